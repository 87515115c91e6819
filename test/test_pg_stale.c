/* SPDX-License-Identifier: MIT */
/*
 * What a node leaves on the server, and what the server's settings could take from it, each found
 * by a review's probes (lib/store/pg/conn.c, SESSION SETTINGS and STALE SESSIONS; house.c):
 * a session the server keeps after the node gave its connection up, rows of nodes that never
 * lived half an hour, a database whose commits do not wait for the WAL, and an ask about a lost
 * COMMIT later than the try's mark is kept. The node talks to the
 * real server, through test/pg_proxy.h where the test needs a network that loses a flow; one
 * throwaway cluster for the file (test/pg_util.h), one database per test.
 */
#include "pg_test.h"

#include <signal.h>

#include "pg_proxy.h"
#include "store/pg/pg.h" /* chime__pg_silence_ns, chime__pg_commit_hook */

static struct pg_cluster cluster;
static struct pg_proxy proxy;
static char direct[600], relayed[600], name[32];
static struct recorder rec;

static void fresh(void)
{
    pg_fresh_db(&cluster, "stale", 8, PG_WIDTH_S, direct, sizeof direct, name);
    CHECK_EQ(pg_proxy_start(&proxy, cluster.port), 0);
    pg_proxy_conninfo(&proxy, name, relayed, sizeof relayed);
    recorder_free(&rec);
    recorder_init(&rec, NULL);
}

static _Atomic int commits_sent;

static void count_commit(void)
{
    atomic_fetch_add(&commits_sent, 1);
}

struct call {
    chime_store *s;
    const char *key;
    int rc;
};

/* Node "a" through the relay, then the silence bound lowered to 1 s (its old value returned). */
static chime_store *open_relayed(uint64_t *silence)
{
    chime_store *a = NULL;
    int rc = pg_open_node(&a, relayed, "a", &rec, 10 * SEC, 0);
    CHECK(rc == 0, "open: %s", chime_strerror(rc));
    *silence = atomic_exchange(&chime__pg_silence_ns, 1 * SEC);
    return a;
}

/*
 * The network loses a try's flow after its mark and BEGIN reached the server, before the put's
 * statement and the COMMIT the lane sent after it did; the server's end of the connection stays
 * open (the relay keeps it, as a proxy or a middlebox that lost the flow would), so the server
 * holds the try's session, its transaction and its uncommitted mark, waiting for the rest. The
 * lane gives the connection up (1 s of silence) and asks about its COMMIT on a new one: the ask
 * waited on the uncommitted mark for ever, and the put with it (found in review; close too, past
 * its bound). Now the new connection ends the session it gave up (conn.c, STALE SESSIONS), the
 * ask finds the try did not commit, and the batch runs again: the put returns 0 with its timer
 * pending once. Without that the put never returns, and the watchdog fails the test.
 */
static void test_a_try_session_the_server_keeps_is_ended(void)
{
    fresh();
    uint64_t silence;
    chime_store *a = open_relayed(&silence);
    pg_proxy_keep_server(&proxy, 1);
    pg_proxy_stall_bind(&proxy, 4000, 1);
    atomic_store(&commits_sent, 0);
    chime__pg_commit_hook = count_commit;
    static char payload[8000]; /* a Bind over the relay's 4000 bytes */
    memset(payload, 'p', sizeof payload);
    CHECK_EQ(chime_store_put(a, "order-1", 7, payload, sizeof payload, wall_ns() + 3600 * SEC), 0);
    chime__pg_commit_hook = NULL;
    CHECK_EQ(pg_proxy_stalls(&proxy), 1);           /* the path under test was taken: */
    CHECK(atomic_load(&commits_sent) >= 2, "COMMIT sent %d times", atomic_load(&commits_sent));
    PGconn *c = pg_connect_or_die(direct);
    CHECK_EQ(pg_pending_rows(c, "order-1"), 1);
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.timers WHERE key = 'order-1'"), 1);
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.marks WHERE fence"), 1); /* the ask's */
    CHECK_EQ(chime_store_close(a), 0);
    pg_proxy_keep_server(&proxy, 0);
    atomic_store(&chime__pg_silence_ns, silence);
    PQfinish(c);
    pg_proxy_stop(&proxy);
}

/*
 * The rows nothing else deletes (fences, marks of nodes that never closed, rows of dead nodes,
 * old lease history) are deleted a day after, by the housekeeper. It did so every 30 minutes of a
 * node's life, so where no node lives that long (a crash loop, short jobs) they stayed for ever
 * (found in review). Now each node also does it at its first round: a node that opens deletes
 * them (a poll on the rows: the housekeeper offers nothing to wait on; without it they stay, and
 * the watchdog fails the test), and leaves the younger ones.
 */
static void test_a_node_cleans_what_is_a_day_old_when_it_starts(void)
{
    fresh();
    PGconn *c = pg_connect_or_die(direct);
    CHECK(pg_command(c, "INSERT INTO chime.marks (token, lane, batch, node, at, fence) VALUES"
                        " (1, 0, 7, 'gone', now() - interval '2 days', true),"
                        " (2, 0, 9, 'crashed', now() - interval '2 days', false),"
                        " (3, 0, 4, 'recent', now() - interval '1 hour', true)"),
          "marks");
    CHECK(pg_command(c, "INSERT INTO chime.nodes (node, token, expires) VALUES"
                        " ('crashed', 2, now() - interval '2 days')"),
          "nodes");
    chime_store *a = NULL;
    CHECK_EQ(pg_open_node(&a, direct, "a", &rec, 2 * SEC, 0), 0);
    while (pg_value(c, "SELECT count(*) FROM chime.marks WHERE at < now() - interval '1 day'") ||
           pg_value(c, "SELECT count(*) FROM chime.nodes WHERE node = 'crashed'"))
        sleep_ms(20);
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.marks WHERE node = 'recent'"), 1);
    CHECK_EQ(chime_store_close(a), 0);
    PQfinish(c);
    pg_proxy_stop(&proxy);
}

/*
 * A database set to synchronous_commit = off (a common tuning) has a commit return before its
 * WAL is flushed, and a put that chime reported durable (CHIME_SYNC_EACH) was lost when the
 * server crashed (found in review). Now chime's sessions raise it to local. The WAL writer is
 * stopped so that nothing else flushes the put's commit before the crash (it would within
 * 3 x wal_writer_delay), then the server is stopped with mode immediate, a crash.
 */
static void test_a_put_survives_a_crash_with_synchronous_commit_off(void)
{
    fresh();
    PGconn *c = pg_connect_or_die(direct);
    char sql[160];
    snprintf(sql, sizeof sql, "ALTER DATABASE %s SET synchronous_commit = off", name);
    CHECK(pg_command(c, sql), "alter database");
    chime_store *a = NULL;
    CHECK_EQ(pg_open_node(&a, direct, "a", &rec, 10 * SEC, 0), 0);
    CHECK(pg_command(c, "CHECKPOINT"), "checkpoint");
    long long writer =
            pg_value(c, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'");
    CHECK(writer > 0, "no WAL writer");
    CHECK_EQ(kill((pid_t)writer, SIGSTOP), 0);
    int rc = chime_store_put(a, "order-2", 7, "x", 1, wall_ns() + 3600 * SEC);
    CHECK_EQ(rc, 0);
    CHECK_EQ(pg_pending_rows(c, "order-2"), 1); /* committed, as far as the server's memory goes */
    PQfinish(c);
    CHECK_EQ(kill((pid_t)writer, SIGKILL), 0);
    pg_util_stop_server(&cluster, "immediate");
    CHECK_EQ(pg_util_start_server(&cluster), 0);
    c = pg_connect_or_die(direct);
    CHECK(pg_pending_rows(c, "order-2") == 1, "a put reported durable was lost in a crash");
    PQfinish(c);
    CHECK_EQ(chime_store_close(a), 0);
    pg_proxy_stop(&proxy);
}

static void *put_small(void *arg)
{
    struct call *k = arg;
    k->rc = chime_store_put(k->s, k->key, strlen(k->key), "x", 1, wall_ns() + 3600 * SEC);
    return NULL;
}

/*
 * A lane whose COMMIT reply was lost asks its try's mark, which the housekeepers delete a day
 * after (house.c): asked later, a committed try read as not committed and ran again (found in
 * review: a put applied twice, after a cancel of its key had returned 0). So the lane asks for
 * half a day at most (chime__pg_ask_within_ns, 3 s here); past that the outcome is unknown, the
 * call returns -EIO and the store fails. Here the server is stopped right after it committed the
 * put (the relay withholds the reply), for longer than the bound: the put returns -EIO, not 0
 * once the server is back. Without the bound it waits for the server, which the test starts only
 * after the put returned: the watchdog fails it.
 */
static void test_a_lane_does_not_ask_past_its_marks_age(void)
{
    fresh();
    uint64_t silence;
    chime_store *a = open_relayed(&silence);
    uint64_t within = atomic_exchange(&chime__pg_ask_within_ns, 3 * SEC);
    pg_proxy_stall_commit(&proxy, "chime_put", 1);
    struct call put = { a, "order-3", 1 };
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, put_small, &put), 0);
    while (pg_proxy_stalls(&proxy) < 1)
        sleep_ms(1); /* a poll on the relay: it offers nothing to wait on */
    pg_util_stop_server(&cluster, "fast");
    pthread_join(t, NULL);
    CHECK_EQ(put.rc, -EIO);
    CHECK_EQ(pg_util_start_server(&cluster), 0);
    PGconn *c = pg_connect_or_die(direct);
    CHECK_EQ(pg_pending_rows(c, "order-3"), 1); /* it had committed: -EIO said "unknown" */
    CHECK_EQ(chime_store_close(a), -EIO);
    atomic_store(&chime__pg_ask_within_ns, within);
    atomic_store(&chime__pg_silence_ns, silence);
    PQfinish(c);
    pg_proxy_stop(&proxy);
}

/*
 * Ending a session given up on is best effort: a user that may not run pg_terminate_backend (its
 * EXECUTE revoked from PUBLIC, a common hardening, and the user no superuser) gets an error from
 * it. That error was part of the connect's session settings, so every connect failed for ever
 * after the first lost connection, and the node's calls hung (found in review). Here user rv owns
 * the schema, the node's sessions are all ended from outside (as a restart would), and a put must
 * still return 0: without the fix it waits for ever, and the watchdog fails the test.
 */
static void test_a_user_that_may_not_end_sessions_still_reconnects(void)
{
    fresh();
    PGconn *c = pg_connect_or_die(direct);
    CHECK(pg_command(c, "DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'rv')"
                        " THEN CREATE ROLE rv LOGIN; END IF; END$$"),
          "role");
    CHECK(pg_command(c, "ALTER SCHEMA chime OWNER TO rv"), "schema");
    CHECK(pg_command(c, "DO $$DECLARE r record; BEGIN FOR r IN SELECT c.oid::regclass AS n,"
                        " c.relkind FROM pg_class c WHERE c.relnamespace = 'chime'::regnamespace"
                        " AND c.relkind IN ('r', 'p', 'S', 'v') LOOP"
                        " EXECUTE format('ALTER %s %s OWNER TO rv', CASE r.relkind WHEN 'S' THEN"
                        " 'SEQUENCE' WHEN 'v' THEN 'VIEW' ELSE 'TABLE' END, r.n); END LOOP; END$$"),
          "owners");
    CHECK(pg_command(c, "REVOKE EXECUTE ON FUNCTION pg_terminate_backend(integer, bigint)"
                        " FROM PUBLIC"),
          "revoke");
    char as_rv[700];
    snprintf(as_rv, sizeof as_rv, "%s user=rv", direct);
    chime_store *a = NULL;
    int rc = pg_open_node(&a, as_rv, "a", &rec, 2 * SEC, 0);
    CHECK(rc == 0, "open: %s", chime_strerror(rc));
    CHECK_EQ(chime_store_put(a, "order-4", 7, "x", 1, wall_ns() + 3600 * SEC), 0);
    CHECK(pg_value(c, "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))"
                      " FROM pg_stat_activity WHERE usename = 'rv'") > 0,
          "no session of the node's to end");
    CHECK_EQ(chime_store_put(a, "order-5", 7, "x", 1, wall_ns() + 3600 * SEC), 0);
    CHECK_EQ(pg_pending_rows(c, "order-5"), 1);
    CHECK_EQ(chime_store_close(a), 0);
    PQfinish(c);
    pg_proxy_stop(&proxy);
}

int main(void)
{
    static const struct tap_test tests[] = {
        { "a_try_session_the_server_keeps_is_ended", test_a_try_session_the_server_keeps_is_ended },
        { "a_node_cleans_what_is_a_day_old_when_it_starts",
          test_a_node_cleans_what_is_a_day_old_when_it_starts },
        { "a_put_survives_a_crash_with_synchronous_commit_off",
          test_a_put_survives_a_crash_with_synchronous_commit_off },
        { "a_lane_does_not_ask_past_its_marks_age", test_a_lane_does_not_ask_past_its_marks_age },
        { "a_user_that_may_not_end_sessions_still_reconnects",
          test_a_user_that_may_not_end_sessions_still_reconnects },
    };
    int rc = pg_tests_main(&cluster, tests, (int)(sizeof tests / sizeof *tests));
    recorder_free(&rec);
    return rc;
}
