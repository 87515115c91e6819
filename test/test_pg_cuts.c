/* SPDX-License-Identifier: MIT */
/*
 * Lost connections on PostgreSQL: a node talks to the real server through test/pg_proxy.h, which
 * cuts its connections at chosen points of the protocol. What the node reports must be what the
 * database holds: a call that returned 0 took effect once, whatever was lost on the way. One
 * throwaway cluster for the file (test/pg_util.h), one database per test.
 */
#include "pg_test.h"

#include "pg_proxy.h"
#include "store/pg/pg.h" /* chime__pg_silence_ns */

static struct pg_cluster cluster;
static struct pg_proxy proxy;
static char direct[600], relayed[600];
static struct recorder rec;

#define SHARDS 8

/* A fresh database with the schema (shards; partitions of partition_s seconds), the relay to it
 * started, and a fresh recorder. */
static void fresh_db(unsigned shards, unsigned partition_s)
{
    char name[32];
    pg_fresh_db(&cluster, "cuts", shards, partition_s, direct, sizeof direct, name);
    CHECK_EQ(pg_proxy_start(&proxy, cluster.port), 0);
    pg_proxy_conninfo(&proxy, name, relayed, sizeof relayed);
    recorder_free(&rec);
    recorder_init(&rec, NULL);
}

static void fresh(void)
{
    fresh_db(SHARDS, PG_WIDTH_S);
}

static chime_store *open_relayed(void)
{
    chime_store *s = NULL;
    int rc = pg_open_node(&s, relayed, "a", &rec, 2 * SEC, 0);
    CHECK(rc == 0, "open: %s", chime_strerror(rc));
    return s;
}

/*
 * The server committed the batch, and the connection died before its reply came. The lane cannot
 * tell a commit from a rollback; it must ask the server (its mark: batch.c, resolve) rather than
 * run the batch again, which would apply it twice: a second run of the cancel finds nothing
 * pending and would tell the caller -ENOENT, "it had fired or never existed", for the timer it has
 * just cancelled.
 */
static void test_a_commit_whose_reply_is_lost_is_reported_as_it_was_applied(void)
{
    fresh();
    chime_store *s = open_relayed();
    PGconn *c = pg_connect_or_die(direct);
    CHECK_EQ(chime_store_put(s, "order-1", 7, "cancel", 6, wall_ns() + 3600 * SEC), 0);
    pg_proxy_cut_commit(&proxy, "chime_cancel", 1);
    CHECK_EQ(chime_store_cancel(s, "order-1", 7), 0);
    CHECK_EQ(pg_proxy_cuts(&proxy), 1); /* the path under test was taken */
    CHECK_EQ(pg_pending_rows(c, "order-1"), 0);
    CHECK_EQ(chime_store_cancel(s, "order-1", 7), -ENOENT);

    /* A put the same way: recorded once, and fires once, as a first attempt. */
    pg_proxy_cut_commit(&proxy, "chime_put", 1);
    CHECK_EQ(chime_store_put(s, "order-2", 7, "remind", 6, wall_ns() + 300 * MS), 0);
    CHECK_EQ(pg_proxy_cuts(&proxy), 2);
    struct firing f;
    recorder_wait_key(&rec, "order-2", 1, &f);
    CHECK_EQ(f.attempt, 1);
    CHECK_EQ(strcmp(f.payload, "remind"), 0);
    pg_wait_idle(s, direct);
    CHECK_EQ(recorder_count_key(&rec, "order-2"), 1);
    CHECK_EQ(atomic_load(&rec.early), 0);
    CHECK_EQ(chime_store_close(s), 0);
    PQfinish(c);
    pg_proxy_stop(&proxy);
}

/*
 * The server answers up to a transaction's end and then sends nothing more, its connection left
 * open: a server alive but stuck, whose kernel still acknowledges, so TCP's own checks never fire.
 * The node must give such a connection up once the server has been silent for
 * chime__pg_silence_ns (lowered here to 1 s), as if it had been cut: the put's lane then learns
 * from a new connection that its batch committed, and reports it once; the firing thread records
 * the firing again on a new connection, and the timer fires. Without that bound both calls wait
 * for ever, and the test's watchdog fails it.
 */
static void test_a_server_that_stops_answering_is_given_up_on(void)
{
    fresh();
    chime_store *s = open_relayed();
    /* Lowered once the node is open: the open's own waits keep the default, since one reply slower
     * than 1 s fails the open (-ECONNREFUSED); under TSan on a busy machine that happened once in
     * CI, most likely this way. */
    uint64_t silence = atomic_exchange(&chime__pg_silence_ns, 1 * SEC);
    PGconn *c = pg_connect_or_die(direct);
    pg_proxy_stall_commit(&proxy, "chime_put", 1);
    CHECK_EQ(chime_store_put(s, "order-3", 7, "cancel", 6, wall_ns() + 3600 * SEC), 0);
    CHECK_EQ(pg_proxy_stalls(&proxy), 1); /* the path under test was taken */
    CHECK_EQ(pg_pending_rows(c, "order-3"), 1);
    CHECK_EQ(chime_store_cancel(s, "order-3", 7), 0); /* it was reported as it is */

    pg_proxy_stall_commit(&proxy, "chime_fire", 1);
    uint64_t due = wall_ns() + 300 * MS;
    CHECK_EQ(chime_store_put(s, "order-4", 7, "remind", 6, due), 0);
    struct firing f;
    recorder_wait_key(&rec, "order-4", 1, &f);
    CHECK_EQ(pg_proxy_stalls(&proxy), 2);
    CHECK_EQ(f.due, due);
    pg_wait_idle(s, direct);
    CHECK_EQ(chime_store_sync(s), 0); /* the acknowledgement committed */
    CHECK_EQ(pg_pending_rows(c, "order-4"), 0);
    CHECK_EQ(atomic_load(&rec.early), 0);
    CHECK_EQ(chime_store_close(s), 0);
    atomic_store(&chime__pg_silence_ns, silence);
    PQfinish(c);
    pg_proxy_stop(&proxy);
}

/*
 * The server stops reading in the middle of a batch: the relay reads no more of a connection from
 * the head of a Bind of over 8 MiB (the put statement's arrays), and leaves chime's end open, as a
 * stuck server's kernel would. (The relay holds the server's replies while the puts are queued, so
 * that the lane cannot cut them into small batches as they come, and the byte bound is lifted.)
 * The lane's sends fill the sockets and block; TCP's own bound on unacknowledged data is off here
 * (tcp_user_timeout=0), and the relay's kernel acknowledges what it buffers anyway. The lane must
 * give the connection up once nothing has moved either way for chime__pg_silence_ns (1 s here),
 * and send the batch again on a new one: every put is then in the database once. Without that
 * bound the sync waits for ever, and the test's watchdog fails it. Under valgrind and the
 * sanitizers (TAP_SLOW) the bound is 10 s and the lease 10 s: with three tests at once on two
 * cores, the 12 MiB batch took the relay over a second to pass on, and the server ended every
 * session for its idle_in_transaction_session_timeout, lease / 2 (the hang test_pg_link checks).
 */
static void test_a_server_that_stops_reading_is_given_up_on(void)
{
    enum { PUTS = 400 };
    fresh();
    size_t batch_bytes = chime__pg_batch_bytes;
    chime__pg_batch_bytes = SIZE_MAX; /* one batch of 12 MiB: its sends fill the sockets */
    char conninfo[700];
    snprintf(conninfo, sizeof conninfo, "%s tcp_user_timeout=0", relayed);
    struct chime_store_config cfg;
    pg_node_config(&cfg, conninfo, "a", (TAP_SLOW ? 10 : 2) * SEC, 0);
    cfg.sync = CHIME_SYNC_INTERVAL; /* the puts queue up, and one batch takes them */
    chime_store *s = NULL;
    int rc = pg_open_config(&s, &cfg, &rec);
    CHECK(rc == 0, "open: %s", chime_strerror(rc));
    uint64_t silence = atomic_exchange(&chime__pg_silence_ns, (TAP_SLOW ? 10 : 1) * SEC);
    static char payload[CHIME_STORE_PAYLOAD_MAX];
    memset(payload, 'p', sizeof payload);
    pg_proxy_stall_bind(&proxy, (size_t)8 << 20, 1);
    pg_proxy_hold(&proxy, 1); /* the lane takes what is queued first, and cannot finish it ... */
    pg_put_far(s, "big", PUTS, payload, sizeof payload);
    pg_proxy_hold(&proxy, 0); /* ... until all are queued: of its two batches, one has 200 puts
                                 or more, over 12 MiB */
    rc = chime_store_sync(s);
    CHECK(rc == 0, "sync: %s", chime_strerror(rc));
    CHECK_EQ(pg_proxy_stalls(&proxy), 1); /* the path under test was taken */
    CHECK_EQ(pg_pending_of(direct, "big"), PUTS);
    CHECK_EQ(chime_store_close(s), 0);
    atomic_store(&chime__pg_silence_ns, silence);
    chime__pg_batch_bytes = batch_bytes;
    pg_proxy_stop(&proxy);
}

#define FAR_KEYS 32
#define SOON_KEYS 32

/* Operations per random test: CHIME_PG_CUT_OPS, default 300 (valgrind and TSan runs use fewer). */
static int ops_wanted(void)
{
    const char *v = getenv("CHIME_PG_CUT_OPS");
    return v && *v ? atoi(v) : 300;
}

/*
 * Connections cut at random messages, in either direction, on every connection the node has (its
 * write lanes, loader, leases, notifications), while one thread puts and cancels: far timers whose
 * state a model follows (put: pending; cancel: 0 exactly when pending, else -ENOENT), and near ones
 * that must each fire, never early. Afterwards, with the cuts stopped, the database holds exactly
 * the model's far timers. With CHIME_SYNC_INTERVAL a put is reported once chime_store_sync returned
 * 0, and a lane that lost its results after COMMIT leaves its puts to the loader's poll (pg.h, P7).
 * The seed drives the operations and the cuts; the cuts also fall by the threads' timing, so a seed
 * repeats the operations, not every cut.
 */
static void random_cuts(enum chime_sync sync)
{
    fresh();
    uint64_t seed = rng_seed(sync == CHIME_SYNC_EACH ? "cuts, SYNC_EACH" : "cuts, SYNC_INTERVAL");
    struct rng r = { seed };
    struct chime_store_config cfg;
    pg_node_config(&cfg, relayed, "a", 2 * SEC, 0);
    cfg.sync = sync;
    chime_store *s = NULL;
    int rc = pg_open_config(&s, &cfg, &rec);
    CHECK(rc == 0, "open: %s", chime_strerror(rc));
    pg_proxy_cut_random(&proxy, 5000, seed); /* 0.5 % of the messages each way */
    int pending[FAR_KEYS] = { 0 }, soon_put = 0, ops = ops_wanted();
    char key[32];
    for (int i = 0; i < ops; i++) {
        unsigned what = (unsigned)rng_below(&r, 10), k = (unsigned)rng_below(&r, FAR_KEYS);
        if (what < 5) {
            snprintf(key, sizeof key, "far-%u", k);
            rc = chime_store_put(s, key, strlen(key), "far", 3, wall_ns() + 3600 * SEC);
            CHECK(rc == 0, "op %d: put %s: %s", i, key, chime_strerror(rc));
            pending[k] = 1;
        } else if (what < 9) {
            snprintf(key, sizeof key, "far-%u", k);
            rc = chime_store_cancel(s, key, strlen(key));
            CHECK(rc == (pending[k] ? 0 : -ENOENT), "op %d: cancel %s (%s): %s", i, key,
                  pending[k] ? "pending" : "not pending", chime_strerror(rc));
            pending[k] = 0;
        } else if (soon_put < SOON_KEYS) {
            snprintf(key, sizeof key, "soon-%d", soon_put++);
            uint64_t due = wall_ns() + (200 + rng_below(&r, 1000)) * MS;
            rc = chime_store_put(s, key, strlen(key), "soon", 4, due);
            CHECK(rc == 0, "op %d: put %s: %s", i, key, chime_strerror(rc));
        }
    }
    rc = chime_store_sync(s);
    CHECK(rc == 0, "sync: %s", chime_strerror(rc));
    int cuts = pg_proxy_cuts(&proxy);
    printf("# %d connections cut during %d operations and a sync\n", cuts, ops);
    CHECK(cuts > 0, "no connection was cut: the test tested nothing");
    pg_proxy_cut_random(&proxy, 0, 0);
    for (int i = 0; i < soon_put; i++) { /* every reported put fires (its lease may move first) */
        snprintf(key, sizeof key, "soon-%d", i);
        recorder_wait_key(&rec, key, 1, NULL);
    }
    CHECK_EQ(atomic_load(&rec.early), 0);
    PGconn *c = pg_connect_or_die(direct);
    for (int k = 0; k < FAR_KEYS; k++) {
        snprintf(key, sizeof key, "far-%d", k);
        long long rows = pg_pending_rows(c, key);
        CHECK(rows == (long long)pending[k], "%s: %lld pending rows, the calls said %d", key, rows,
              pending[k]);
        CHECK_EQ(recorder_count_key(&rec, key), 0);
    }
    PQfinish(c);
    CHECK_EQ(chime_store_close(s), 0);
    pg_proxy_stop(&proxy);
}

static void test_random_cuts_lose_nothing_a_call_reported_sync_each(void)
{
    random_cuts(CHIME_SYNC_EACH);
}

static void test_random_cuts_lose_nothing_a_call_reported_sync_interval(void)
{
    random_cuts(CHIME_SYNC_INTERVAL);
}

/*
 * The server crashes while a lane's COMMIT is in flight, before anything of that transaction
 * reached its WAL. After the restart the transaction's id may be given out again, and
 * pg_xact_status then reports another transaction's fate: here, one of the test's own, which
 * commit. Found in review: the lane took that for its own commit and reported the put durable,
 * with nothing of it in the database. A lane now asks its batch's mark, which the restart shows
 * absent (batch.c, resolve), and runs the batch again.
 */
struct put_arg {
    chime_store *s;
    int rc;
};

static void *put_big(void *arg)
{
    struct put_arg *p = arg;
    static char payload[8000];
    memset(payload, 'p', sizeof payload);
    p->rc = chime_store_put(p->s, "lost", 4, payload, sizeof payload, wall_ns() + 3600 * SEC);
    return NULL;
}

static _Atomic int commits_sent;

static void count_commit(void)
{
    atomic_fetch_add(&commits_sent, 1);
}

static void test_a_commit_cut_by_a_server_crash_is_not_resolved_by_a_reused_xid(void)
{
    fresh();
    chime_store *s = NULL;
    /* lease 10 s: the idle transaction is not ended by the server (5 s) before the crash */
    int rc = pg_open_node(&s, relayed, "a", &rec, 10 * SEC, 0);
    CHECK(rc == 0, "open: %s", chime_strerror(rc));
    uint64_t silence = atomic_exchange(&chime__pg_silence_ns, 1 * SEC);
    /* The put's Bind (8 kB of payload) is not read by the relay: BEGIN and the transaction id go
     * through, the statements and the COMMIT the lane sends after them stay in the sockets. */
    pg_proxy_stall_bind(&proxy, 4000, 1);
    atomic_store(&commits_sent, 0);
    chime__pg_commit_hook = count_commit;
    struct put_arg p = { s, 1 };
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, put_big, &p), 0);
    /* A poll on the hook's count (the lane has its id and has sent COMMIT) and on the relay's:
     * the relay's thread may read the Bind after the lane has sent what follows it (found in CI
     * under TSan: "got 0"). */
    while (atomic_load(&commits_sent) < 1 || pg_proxy_stalls(&proxy) < 1)
        sleep_ms(1);
    CHECK_EQ(pg_proxy_stalls(&proxy), 1);
    pg_proxy_hold(&proxy, 1); /* the lane's new connection waits until the id is taken again */
    pg_util_stop_server(&cluster, "immediate");
    CHECK_EQ(pg_util_start_server(&cluster), 0);
    PGconn *c = pg_connect_or_die(direct);
    for (int i = 0; i < 50; i++) /* other sessions' transactions, as the other nodes' would be */
        pg_value(c, "SELECT pg_current_xact_id()::text::bigint");
    pg_proxy_hold(&proxy, 0);
    pthread_join(t, NULL);
    chime__pg_commit_hook = NULL;
    long long rows = pg_pending_rows(c, "lost");
    CHECK(p.rc == 0 && rows == 1, "put returned %s; the database holds %lld pending rows of it",
          chime_strerror(p.rc), rows);
    PQfinish(c);
    CHECK_EQ(chime_store_close(s), 0);
    atomic_store(&chime__pg_silence_ns, silence);
    pg_proxy_stop(&proxy);
}

/*
 * After a crash the server gives out again the transaction ids of transactions whose abort records
 * had not reached the WAL on disk (nothing flushes an abort). Found in review: the loader kept its
 * last poll's snapshot across the reconnection, and a row committed under such an id, below that
 * snapshot's xmax and not in its list, counts as seen by it: every poll skipped it. Here node "b"
 * puts a timer due soon into the shard node "a" owns while a's connections are held, so that its
 * notification is lost: a's first poll on its new connection must read it (loader.c, SERVER
 * RESTARTS). Without that, nothing arms it while "a" keeps the shard.
 *
 * The reuse is made certain: nothing may write the aborts' WAL records before the crash, and any
 * commit would (it writes the WAL up to its own record, and whole pages). The WAL writer is
 * stopped, then killed with the server; a's lease thread, whose rounds commit, waits in the
 * renewal hook; autovacuum is off; a checkpoint comes just before (the next timed one is minutes
 * away); partitions are of an hour (the housekeeper creates one, and commits, once a partition).
 * "b" opens only after the restart. A CHECK says that the put's id was given out before the crash.
 */
static _Atomic(struct chime__backend *) gate_b;
static _Atomic int gate_closed, gate_waiting;

/* The renewal hook: node "a"'s lease thread, just after a round committed, waits here while the
 * gate is closed. */
static void wait_at_gate(struct chime__backend *b, unsigned shard)
{
    (void)shard;
    if (b != atomic_load(&gate_b))
        return;
    atomic_store(&gate_waiting, atomic_load(&gate_closed));
    while (atomic_load(&gate_closed))
        sleep_ms(5); /* a poll on the test's flag */
    atomic_store(&gate_waiting, 0);
}

static void set_autovacuum(PGconn *c, const char *sql)
{
    CHECK(pg_command(c, sql), "%s", sql);
    CHECK_EQ(pg_value(c, "SELECT pg_reload_conf()::int"), 1);
}

/* Wait until the node's loader completed two polls more than `since`, read before: the second
 * began after this call, so its snapshot is later than everything done before it. */
static void wait_polls(struct chime__backend *be, uint64_t since)
{
    while (atomic_load(&be->polls) < since + 2)
        sleep_ms(5); /* a poll on the statistic: the loader offers nothing to wait on */
}

static void test_a_poll_after_a_server_crash_reads_rows_of_reused_transaction_ids(void)
{
    enum { ABORTS = 200 };
    fresh_db(1, 3600);
    PGconn *c = pg_connect_or_die(direct);
    set_autovacuum(c, "ALTER SYSTEM SET autovacuum = off");
    chime__pg_renew_hook = wait_at_gate; /* before any lease thread runs */
    chime_store *a = NULL, *b = NULL;
    /* lease 30 s: its belief (22 s from the round held at the gate) outlasts the crash */
    int rc = pg_open_node(&a, relayed, "a", &rec, 30 * SEC, 0);
    CHECK(rc == 0, "open a: %s", chime_strerror(rc));
    char owner[64] = "";
    long long epoch = pg_owner(c, 0, owner, sizeof owner);
    CHECK(epoch > 0 && !strcmp(owner, "a"), "shard 0: owner %s, epoch %lld", owner, epoch);
    atomic_store(&gate_closed, 1);
    atomic_store(&gate_b, a->b);
    while (!atomic_load(&gate_waiting))
        sleep_ms(5); /* a poll on the hook's flag: a's next round has committed */
    while (pg_value(c, "SELECT count(*) FROM pg_stat_activity"
                       " WHERE backend_type = 'autovacuum worker'") != 0)
        sleep_ms(10); /* a poll: the server offers nothing to wait on */
    CHECK(pg_command(c, "CHECKPOINT"), "checkpoint");
    long long writer = pg_value(c, "SELECT pid FROM pg_stat_activity"
                                   " WHERE backend_type = 'walwriter'");
    CHECK(writer > 0, "no WAL writer in pg_stat_activity");
    CHECK_EQ(kill((pid_t)writer, SIGSTOP), 0);
    long long top = 0;
    for (int i = 0; i < ABORTS; i++) { /* ids taken, and their transactions rolled back */
        CHECK(pg_command(c, "BEGIN"), "begin");
        top = pg_value(c, "SELECT pg_current_xact_id()::text::bigint");
        CHECK(pg_command(c, "ROLLBACK"), "rollback");
    }
    wait_polls(a->b, atomic_load(&a->b->polls)); /* a's snapshot has seen the aborts end */
    pg_proxy_hold(&proxy, 1); /* no reply reaches "a": it reconnects after b's notification */
    CHECK_EQ(kill((pid_t)writer, SIGKILL), 0); /* a crash, with the aborts in its buffers */
    pg_util_stop_server(&cluster, "immediate");
    CHECK_EQ(pg_util_start_server(&cluster), 0);
    PQfinish(c);
    c = pg_connect_or_die(direct);
    atomic_store(&gate_closed, 0); /* a's next rounds find their connection gone, and wait */

    rc = pg_open_node(&b, direct, "b", &rec, 30 * SEC, 0); /* its share of one shard: none */
    CHECK(rc == 0, "open b: %s", chime_strerror(rc));
    CHECK_EQ(chime_store_put(b, "reused", 6, "x", 1, wall_ns() + 2 * SEC), 0);
    long long tx = pg_value(c, "SELECT tx FROM chime.timers WHERE key = 'reused'");
    CHECK(tx > 0 && tx <= top, "the put's transaction id %lld was not given out before the crash "
          "(the aborted ones ended at %lld): the test tested nothing", tx, top);
    printf("# the put's transaction id %lld, given out before the crash (aborts up to %lld)\n", tx,
           top);
    CHECK_EQ(pg_owner(c, 0, NULL, 0), epoch);
    uint64_t armed = atomic_load(&a->b->armed), polls = atomic_load(&a->b->polls);
    pg_proxy_hold(&proxy, 0);
    wait_polls(a->b, polls); /* one of them on a new connection */
    CHECK(atomic_load(&a->b->armed) > armed,
          "a's polls after its reconnection armed nothing: the put of transaction %lld (an id "
          "given out again) was skipped", tx);
    struct firing f;
    recorder_wait_key(&rec, "reused", 1, &f);
    CHECK_EQ(pg_fence_epoch(f.fence), (uint64_t)epoch); /* by "a", in the epoch held throughout */
    pg_wait_idle(a, direct);
    CHECK_EQ(recorder_count_key(&rec, "reused"), 1);
    CHECK_EQ(atomic_load(&rec.early), 0);
    CHECK_EQ(chime_store_close(b), 0);
    CHECK_EQ(chime_store_close(a), 0);
    chime__pg_renew_hook = NULL;
    atomic_store(&gate_b, NULL);
    set_autovacuum(c, "ALTER SYSTEM RESET autovacuum");
    PQfinish(c);
    pg_proxy_stop(&proxy);
}

/*
 * A dead-letter listing while the server is down waits for it, as every call does (chime_store.h).
 * Found in review: it gave up after 50 tries (5 s) with -EIO, which the contract keeps for a schema
 * the database rejects. Here the server stays down until the listing has tried 60 times (a test
 * hook counts them), then comes back, and the listing must succeed.
 */
static _Atomic int dead_retries, dead_listed, load_waits;

/* chime__pg_wait_hook: count the waits of the listing's connection and of the loads'. */
static void count_waits(struct chime__backend *b, struct pg_conn *pc)
{
    if (pc == &b->misc_conn)
        atomic_fetch_add(&dead_retries, 1);
    if (pc == &b->load_conn)
        atomic_fetch_add(&load_waits, 1);
}

struct list_arg {
    chime_store *s;
    int rc;
    size_t n;
};

static void *list_dead(void *arg)
{
    struct list_arg *a = arg;
    a->rc = chime_store_dead_list(a->s, store_count_dead, &a->n);
    atomic_store(&dead_listed, 1);
    return NULL;
}

static void test_a_dead_letter_listing_waits_for_a_server_that_is_down(void)
{
    fresh();
    atomic_store(&dead_retries, 0);
    atomic_store(&dead_listed, 0);
    chime__pg_wait_hook = count_waits; /* before the store's threads start, which read it */
    chime_store *s = NULL;
    int rc = pg_open_node(&s, direct, "a", &rec, 10 * SEC, 0);
    CHECK(rc == 0, "open: %s", chime_strerror(rc));
    pg_util_stop_server(&cluster, "fast");
    struct list_arg a = { s, 1, 0 };
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, list_dead, &a), 0);
    while (atomic_load(&dead_retries) < 60 && !atomic_load(&dead_listed))
        sleep_ms(1); /* a poll on the hook's count: the listing waits for the server */
    CHECK(!atomic_load(&dead_listed), "the listing gave up after %d tries: %s",
          atomic_load(&dead_retries), chime_strerror(a.rc));
    CHECK_EQ(pg_util_start_server(&cluster), 0);
    pthread_join(t, NULL);
    CHECK(a.rc == 0, "the listing returned %s", chime_strerror(a.rc));
    CHECK_EQ(a.n, 0);
    CHECK_EQ(chime_store_close(s), 0);
    chime__pg_wait_hook = NULL; /* once the store's threads have ended */
    pg_proxy_stop(&proxy); /* fresh() started it; the next test's fresh() starts it again */
}

/*
 * Close while a load waits for a server that is down. The keeper loads every horizon / 8 (125 ms
 * here); a load that meets the server gone waits for it, as every call does. Close stops the keeper
 * first, and so waited for the load as long as the server stayed away, or until the node's belief
 * in its leases lapsed (3/4 of the lease: 90 s here) and it had no shard left to read (found in
 * review). Close now tells the backend first, and the load gives up (what it did not read stays in
 * the database). The server stays down until close has returned, or for 60 s at most (a liveness
 * bound, under the lapse).
 */
struct close_arg {
    chime_store *s;
    int rc;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done;
};

static void *close_store(void *arg)
{
    struct close_arg *a = arg;
    int rc = chime_store_close(a->s);
    pthread_mutex_lock(&a->lock);
    a->rc = rc;
    a->done = 1;
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

static void test_close_does_not_wait_for_a_load_that_waits_for_the_server(void)
{
    fresh();
    struct chime_store_config cfg;
    pg_node_config(&cfg, direct, "a", 120 * SEC, 0);
    cfg.horizon_ns = SEC; /* the shortest: the keeper loads eight times a second */
    struct close_arg a = { NULL, 0, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
    atomic_store(&load_waits, 0);
    chime__pg_wait_hook = count_waits; /* before the store's threads start, which read it */
    CHECK_EQ(pg_open_config(&a.s, &cfg, &rec), 0);
    pg_util_stop_server(&cluster, "fast");
    while (atomic_load(&load_waits) < 3)
        sleep_ms(1); /* a poll on the hook's count: a load waits for the server */
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, close_store, &a), 0);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    pthread_mutex_lock(&a.lock);
    while (!a.done && pthread_cond_timedwait(&a.cond, &a.lock, &until) == 0)
        ;
    int done = a.done;
    pthread_mutex_unlock(&a.lock);
    CHECK_EQ(pg_util_start_server(&cluster), 0); /* back for the next test, or to end the wait */
    pthread_join(t, NULL);
    chime__pg_wait_hook = NULL; /* close has returned: the store's threads have ended */
    pg_proxy_stop(&proxy); /* fresh() started it */
    CHECK(done, "close waited 60 s for a load that waited for the server (%d waits)",
          atomic_load(&load_waits));
    CHECK_EQ(a.rc, 0);
}

int main(void)
{
    static const struct tap_test tests[] = {
        { "a_commit_whose_reply_is_lost_is_reported_as_it_was_applied",
          test_a_commit_whose_reply_is_lost_is_reported_as_it_was_applied },
        { "a_server_that_stops_answering_is_given_up_on",
          test_a_server_that_stops_answering_is_given_up_on },
        { "a_server_that_stops_reading_is_given_up_on",
          test_a_server_that_stops_reading_is_given_up_on },
        { "random_cuts_lose_nothing_a_call_reported_sync_each",
          test_random_cuts_lose_nothing_a_call_reported_sync_each },
        { "random_cuts_lose_nothing_a_call_reported_sync_interval",
          test_random_cuts_lose_nothing_a_call_reported_sync_interval },
        { "a_commit_cut_by_a_server_crash_is_not_resolved_by_a_reused_xid",
          test_a_commit_cut_by_a_server_crash_is_not_resolved_by_a_reused_xid },
        { "a_poll_after_a_server_crash_reads_rows_of_reused_transaction_ids",
          test_a_poll_after_a_server_crash_reads_rows_of_reused_transaction_ids },
        { "a_dead_letter_listing_waits_for_a_server_that_is_down",
          test_a_dead_letter_listing_waits_for_a_server_that_is_down },
        { "close_does_not_wait_for_a_load_that_waits_for_the_server",
          test_close_does_not_wait_for_a_load_that_waits_for_the_server },
    };
    int rc = pg_tests_main(&cluster, tests, (int)(sizeof tests / sizeof *tests));
    recorder_free(&rec);
    return rc;
}
