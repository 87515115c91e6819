/* SPDX-License-Identifier: MIT */
/*
 * A lane's COMMIT whose reply is lost, across a server restart, a backend's crash, or a lost reply
 * to the lane's own ask (lib/store/pg/batch.c, resolve; pg.h, P6). The transaction's id says
 * nothing after a crash (the server may give it out again), so the lane asks with the try's mark,
 * a row the try wrote in its own transaction: it inserts the same row as a fence unless it is
 * there. The try's mark there, the try committed; a fence, it did not, and runs again. Each test
 * is a way an earlier resolution was found wrong in review (each one's comment says how). The
 * node talks to the real server through test/pg_proxy.h; one throwaway cluster for the file
 * (test/pg_util.h), one database per test.
 */
#include "pg_test.h"

#include "pg_proxy.h"
#include "store/pg/pg.h" /* chime__pg_silence_ns */

static struct pg_cluster cluster;
static struct pg_proxy proxy;
static char direct[600], relayed[600];
static struct recorder rec;
static uint64_t silence; /* chime__pg_silence_ns's default */

/* A fresh database, the relay to it, a fresh recorder. */
static void fresh(void)
{
    char name[32];
    pg_fresh_db(&cluster, "restart", 8, PG_WIDTH_S, direct, sizeof direct, name);
    CHECK_EQ(pg_proxy_start(&proxy, cluster.port), 0);
    pg_proxy_conninfo(&proxy, name, relayed, sizeof relayed);
    recorder_free(&rec);
    recorder_init(&rec, NULL);
    silence = atomic_load(&chime__pg_silence_ns);
}

static void finish(PGconn *c)
{
    PQfinish(c);
    atomic_store(&chime__pg_silence_ns, silence);
    pg_proxy_stop(&proxy);
}

/* Open node `node`; then its waits (and the other node's) give a silent connection up after 1 s.
 * The open itself has the default, since one reply slower than 1 s (a sanitizer, a busy machine)
 * fails it with -ECONNREFUSED (test_pg_cuts, most likely, once in CI under TSan). Each wait reads
 * the bound as it begins: waits already begun keep theirs. */
static chime_store *open_node(const char *conninfo, const char *node)
{
    chime_store *s = NULL;
    atomic_store(&chime__pg_silence_ns, silence);
    int rc = pg_open_node(&s, conninfo, node, &rec, 10 * SEC, 0);
    CHECK(rc == 0, "open %s: %s", node, chime_strerror(rc));
    atomic_store(&chime__pg_silence_ns, 1 * SEC);
    return s;
}

struct call {
    chime_store *s;
    const char *key;
    int cancel; /* else a put due in an hour */
    int rc;
};

static void *run_call(void *arg)
{
    struct call *k = arg;
    k->rc = k->cancel ? chime_store_cancel(k->s, k->key, strlen(k->key))
                      : chime_store_put(k->s, k->key, strlen(k->key), "x", 1,
                                        wall_ns() + 3600 * SEC);
    return NULL;
}

/* Start the call in a thread; once the server has committed its batch (the relay withholds the
 * reply), hold a's connections and restart the server. The caller releases the hold and joins. */
static void commit_then_restart(struct call *k, pthread_t *t)
{
    pg_proxy_stall_commit(&proxy, k->cancel ? "chime_cancel" : "chime_put", 1);
    CHECK_EQ(pthread_create(t, NULL, run_call, k), 0);
    while (pg_proxy_stalls(&proxy) < 1)
        sleep_ms(1); /* a poll on the relay: it offers nothing to wait on */
    pg_proxy_hold(&proxy, 1); /* before the lane gives up its connection (1 s of silence) */
    CHECK_EQ(pg_cluster_restart(&cluster), 0);
}

/* Close both (b may be NULL); what a node held goes with it, also after a restart cut its
 * connections: its shards, its row, its lanes' marks of tries (not their fences, kept a day). */
static void close_both(PGconn *c, chime_store *a, chime_store *b)
{
    if (b)
        CHECK_EQ(chime_store_close(b), 0);
    CHECK_EQ(chime_store_close(a), 0);
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.shards WHERE owner IS NOT NULL"), 0);
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.nodes"), 0);
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.marks WHERE NOT fence"), 0);
}

/*
 * Node "a" puts order-1 through the relay, which passes the COMMIT to the server and withholds the
 * reply (the server has committed). While a's new connections get no answer, the server restarts
 * and node "b" cancels order-1 (0: it was pending). Then a's lane learns what became of its batch.
 * Run again, the put would make order-1 pending a second time, and it would fire after a cancel
 * that returned 0; it must stay cancelled, with one row of timers (applied once).
 */
static void test_a_put_committed_before_a_restart_is_not_applied_again(void)
{
    fresh();
    chime_store *a = open_node(relayed, "a");
    struct call put = { a, "order-1", 0, 1 };
    pthread_t t;
    commit_then_restart(&put, &t);
    PGconn *c = pg_connect_or_die(direct);
    CHECK_EQ(pg_pending_rows(c, "order-1"), 1);
    chime_store *b = open_node(direct, "b");
    CHECK_EQ(chime_store_cancel(b, "order-1", 7), 0);
    pg_proxy_hold(&proxy, 0);
    pthread_join(t, NULL);
    CHECK_EQ(put.rc, 0);
    long long pending = pg_pending_rows(c, "order-1");
    long long rows = pg_value(c, "SELECT count(*) FROM chime.timers WHERE key = 'order-1'");
    CHECK(pending == 0 && rows == 1,
          "after a cancel that returned 0: %lld pending, %lld rows (the put ran twice)", pending,
          rows);
    CHECK_EQ(chime_store_cancel(a, "order-1", 7), -ENOENT);
    close_both(c, a, b);
    finish(c);
}

/*
 * The same for a cancel: it committed, and its reply was lost across a restart. Run again, it
 * would find nothing pending and report -ENOENT, "it had fired or never existed", for the timer
 * it has just cancelled; it must report 0.
 */
static void test_a_cancel_committed_before_a_restart_reports_it(void)
{
    fresh();
    chime_store *a = open_node(relayed, "a");
    CHECK_EQ(chime_store_put(a, "order-2", 7, "x", 1, wall_ns() + 3600 * SEC), 0);
    struct call cancel = { a, "order-2", 1, 1 };
    pthread_t t;
    commit_then_restart(&cancel, &t);
    PGconn *c = pg_connect_or_die(direct);
    CHECK_EQ(pg_pending_rows(c, "order-2"), 0);
    pg_proxy_hold(&proxy, 0);
    pthread_join(t, NULL);
    CHECK(cancel.rc == 0, "a cancel that took effect returned %s", chime_strerror(cancel.rc));
    CHECK_EQ(pg_pending_rows(c, "order-2"), 0);
    close_both(c, a, NULL);
    finish(c);
}

/*
 * One backend's crash: the server ends every session and recovers, but the postmaster stays, and
 * with it pg_postmaster_start_time(). Found in review: the lane, seeing the same start time, asked
 * pg_xact_status about its transaction's id, which the recovered server had given out again (the
 * try's WAL never reached the disk), and took another transaction's commit for its own: the put
 * returned 0 and the database did not have it. Here the relay stops reading at the put's Bind
 * (8 kB of payload), after the try's mark; COMMIT waits in the sockets, so the lane counts it sent.
 * The test kills the lane's backend, lets other transactions take ids and commit, then releases the
 * relay: the put must be in the database once. (Whether the id was given out again depends on
 * whether the WAL writer flushed the mark's record before the kill; the test prints it.)
 */
static void *put_big(void *arg)
{
    static char payload[8000];
    struct call *k = arg;
    memset(payload, 'p', sizeof payload);
    k->rc = chime_store_put(k->s, k->key, strlen(k->key), payload, sizeof payload,
                            wall_ns() + 3600 * SEC);
    return NULL;
}

static void test_a_put_cut_by_a_backend_crash_is_run_again(void)
{
    fresh();
    chime_store *a = open_node(relayed, "a");
    PGconn *c = pg_connect_or_die(direct);
    pg_proxy_stall_bind(&proxy, 4000, 1);
    struct call put = { a, "order-3", 0, 1 };
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, put_big, &put), 0);
    long long pid = 0, xid = 0;
    while (!pid) { /* a poll on the server: the lane's session, in its transaction */
        PGresult *r = PQexec(c, "SELECT pid, backend_xid::text::int8 FROM pg_stat_activity"
                                " WHERE application_name = 'chime a lane'"
                                " AND backend_xid IS NOT NULL");
        CHECK(PQresultStatus(r) == PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
        if (PQntuples(r) == 1 && pg_proxy_stalls(&proxy) == 1) {
            pid = atoll(PQgetvalue(r, 0, 0));
            xid = atoll(PQgetvalue(r, 0, 1));
        }
        PQclear(r);
        if (!pid)
            sleep_ms(1);
    }
    pg_proxy_hold(&proxy, 1); /* before the lane gives up its connection (1 s of silence) */
    PQfinish(c);
    CHECK_EQ(kill((pid_t)pid, SIGKILL), 0); /* a backend of this test's own cluster */
    for (c = NULL; !c;) { /* a poll: the server ends every session, recovers, and accepts again */
        sleep_ms(50);
        c = PQconnectdb(direct);
        if (PQstatus(c) != CONNECTION_OK) {
            PQfinish(c);
            c = NULL;
        }
    }
    long long next = pg_value(c, "SELECT pg_current_xact_id()::text::bigint");
    printf("# the lane's transaction id %lld; the first given out after the crash %lld\n", xid,
           next);
    while (next < xid + 50) /* other sessions' transactions take ids, and commit */
        next = pg_value(c, "SELECT pg_current_xact_id()::text::bigint");
    pg_proxy_hold(&proxy, 0);
    pthread_join(t, NULL);
    long long rows = pg_pending_rows(c, "order-3");
    CHECK(put.rc == 0 && rows == 1, "put returned %s; the database holds %lld pending rows of it",
          chime_strerror(put.rc), rows);
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.marks WHERE fence"), 1);
    close_both(c, a, NULL);
    finish(c);
}

/*
 * The lane's ask is cut as well. The put's first try stalls at its Bind, after its mark, and never
 * commits; the lane asks on a new connection, which inserts the fence; the server commits it and
 * the relay cuts the reply. Asked again, the fence must answer "not committed" again. Found in
 * review: the ask was a plain insert then, which found its own row the second time and read it as
 * the try's mark, and the put returned 0 with nothing in the database. The fence stays, through
 * the housekeeper's trims and after close: the try's session could still be waiting to insert its
 * mark (found in review: the trim took it, and a try held in the network committed after it).
 */
static void test_an_ask_whose_reply_is_lost_gets_the_same_answer(void)
{
    fresh();
    chime_store *a = open_node(relayed, "a");
    PGconn *c = pg_connect_or_die(direct);
    pg_proxy_stall_bind(&proxy, 4000, 1);
    pg_proxy_cut_commit(&proxy, "sql:RETURNING m.fence", 1);
    struct call put = { a, "order-4", 0, 1 };
    put_big(&put);
    CHECK_EQ(pg_proxy_stalls(&proxy), 1); /* the paths under test were taken */
    CHECK_EQ(pg_proxy_cuts(&proxy), 1);
    long long rows = pg_pending_rows(c, "order-4");
    CHECK(put.rc == 0 && rows == 1, "put returned %s; the database holds %lld pending rows of it",
          chime_strerror(put.rc), rows);
    /* The housekeeper trims the marks of tries, never a fence (a poll on its work, as below). */
    pg_put_far(a, "more", 3, "x", 1);
    while (pg_value(c, "SELECT count(*) FROM chime.marks WHERE NOT fence") > PG_LANES)
        sleep_ms(50);
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.marks WHERE fence"), 1);
    close_both(c, a, NULL);
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.marks WHERE fence"), 1);
    finish(c);
}

/*
 * Marks do not pile up: every try of a batch inserts one, and the node's housekeeper deletes all
 * but each lane's latest (lib/store/pg/house.c, every 2 s). Forty puts, each its own batch, make
 * forty (numbered from 1); then the count comes down to one per lane (a poll: the housekeeper
 * offers nothing to wait on; without the deletion it never does, and the watchdog fails the
 * test). The latest stays, the one a lane may have to read.
 */
static void test_marks_are_trimmed_to_each_lanes_latest(void)
{
    fresh();
    chime_store *a = open_node(direct, "a");
    PGconn *c = pg_connect_or_die(direct);
    pg_put_far(a, "k", 40, "x", 1);
    long long max = pg_value(c, "SELECT max(batch) FROM chime.marks");
    CHECK(max >= 40, "40 puts, each its own batch, and the latest mark is of batch %lld", max);
    while (pg_value(c, "SELECT count(*) FROM chime.marks") > PG_LANES)
        sleep_ms(50);
    CHECK(pg_value(c, "SELECT min(batch) FROM chime.marks") >= max, "the latest mark was deleted");
    close_both(c, a, NULL);
    finish(c);
}

int main(void)
{
    static const struct tap_test tests[] = {
        { "a_put_committed_before_a_restart_is_not_applied_again",
          test_a_put_committed_before_a_restart_is_not_applied_again },
        { "a_cancel_committed_before_a_restart_reports_it",
          test_a_cancel_committed_before_a_restart_reports_it },
        { "a_put_cut_by_a_backend_crash_is_run_again",
          test_a_put_cut_by_a_backend_crash_is_run_again },
        { "an_ask_whose_reply_is_lost_gets_the_same_answer",
          test_an_ask_whose_reply_is_lost_gets_the_same_answer },
        { "marks_are_trimmed_to_each_lanes_latest", test_marks_are_trimmed_to_each_lanes_latest },
    };
    int rc = pg_tests_main(&cluster, tests, (int)(sizeof tests / sizeof *tests));
    recorder_free(&rec);
    return rc;
}
