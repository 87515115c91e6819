/* SPDX-License-Identifier: MIT */
/*
 * The loader thread's reads (lib/store/pg/loader.c): what a takeover, a poll or a notification
 * hands to the logic, and that what it hands over from a snapshot taken before a firing does not
 * fire that timer a second time. One throwaway cluster for the file (test/pg_util.h), one database
 * per scenario, one shard, so that the one node holds it. Interleavings are made with PostgreSQL's
 * own row locks, waited for through pg_blocking_pids, and with the read hook (pg.h).
 */
#include "pg_test.h"
#include "store/pg/pg.h"

static struct pg_cluster cluster;
static char conninfo[600];
static int db_seq;
static struct recorder rec;

static void fresh(void)
{
    char name[32];
    snprintf(name, sizeof name, "loader_%d", ++db_seq);
    CHECK_EQ(pg_cluster_db(&cluster, name, 1, 60, conninfo, sizeof conninfo), 0);
    recorder_free(&rec);
    recorder_init(&rec, NULL);
}

/* The server process of a node's connection ("chime <node> <role>"); -1 if none. */
static int pid_of(PGconn *c, const char *app)
{
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT pid FROM pg_stat_activity WHERE application_name = '%s'",
             app);
    return (int)pg_value(c, sql);
}

/* Whether the server process pid waits for a lock another holds. */
static int blocked(PGconn *c, int pid)
{
    char sql[120];
    snprintf(sql, sizeof sql, "SELECT cardinality(pg_blocking_pids(%d))", pid);
    return pg_value(c, sql) > 0;
}

/* Open a transaction on c that holds key's row of chime.keys. */
static void hold_key(PGconn *c, const char *key)
{
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT 1 FROM chime.keys WHERE key = '%s'::bytea FOR UPDATE", key);
    CHECK(pg_command(c, "BEGIN") && pg_value(c, sql) == 1, "hold %s", key);
}

/* ---- a read whose snapshot came before a firing, handed over after its handler returned ---- */

static chime_store *reread_s;
static PGconn *reread_k;           /* holds k's row: k's firing waits for it */
static _Atomic int reread_armed;   /* the next full read (since NULL) is the one under test */
static _Atomic int reread_done;
static _Atomic uint64_t reread_polls;

/* The loader's first poll on its new connection has its snapshot: k's firing is not in it (the
 * firing waits for k's row). Let the firing through and wait until its handler has returned and
 * its timer has left the table; only then does the poll fetch its rows. */
static void let_k_fire_under_the_snapshot(struct chime__backend *b, const char *since)
{
    if (since || !atomic_exchange(&reread_armed, 0))
        return;
    atomic_store(&reread_polls, atomic_load(&b->polls));
    CHECK(pg_command(reread_k, "COMMIT"), "let k's firing through");
    recorder_wait_key(&rec, "k", 1, NULL);
    store_wait_handlers(reread_s);
    atomic_store(&reread_done, 1);
}

static void *put_blocker(void *arg)
{
    chime_store *s = arg;
    int rc = chime_store_put(s, "blocker", 7, "again", 5, wall_ns() + 7200 * SEC);
    return (void *)(intptr_t)rc;
}

/*
 * A handler that returned 0 leaves the table at once; its acknowledgement is committed by the
 * lane later (D3: not waited for), here later still, since the lane is held by a put of another
 * key whose row a third session locks. Meanwhile the loader reconnects, and its first poll reads
 * every pending row (loader.c, SERVER RESTARTS) from a snapshot taken while k's firing was not yet
 * committed. The poll hands k over after its handler returned: k must not fire again. A firing
 * recorded in this epoch is what the reads skip (firing.c, READS), but this read's snapshot is
 * older than that record, and without a check at the firing itself the handler ran twice, attempt
 * 1 both times, with no crash and no lease lost.
 */
static bool reread_in(uint64_t window)
{
    fresh();
    chime_store *a = NULL;
    CHECK_EQ(pg_open_node(&a, conninfo, "a", &rec, 0, 0), 0);
    PGconn *c = pg_connect_or_die(conninfo);
    char owner[64] = "";
    while (!pg_owner(c, 0, owner, sizeof owner) || strcmp(owner, "a"))
        sleep_ms(2); /* a poll of the database: there is nothing to wait on */
    CHECK_EQ(chime_store_put(a, "blocker", 7, "first", 5, wall_ns() + 7200 * SEC), 0);
    CHECK_EQ(chime_store_put(a, "k", 1, "p", 1, wall_ns() + window), 0);
    reread_s = a;
    reread_k = pg_connect_or_die(conninfo);
    hold_key(reread_k, "k");
    int fire_pid = pid_of(c, "chime a fire"), lane_pid = pid_of(c, "chime a lane");
    while (!blocked(c, fire_pid) && !recorder_count_key(&rec, "k"))
        sleep_ms(2); /* as above */
    if (recorder_count_key(&rec, "k")) { /* it fired before its row was held: a longer window */
        CHECK(pg_command(reread_k, "COMMIT"), "commit");
        PQfinish(reread_k);
        PQfinish(c);
        store_wait_handlers(a);
        CHECK_EQ(chime_store_close(a), 0);
        return false;
    }
    /* The lane, held: k's acknowledgement will wait behind this put */
    PGconn *lane = pg_connect_or_die(conninfo);
    hold_key(lane, "blocker");
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, put_blocker, a), 0);
    while (!blocked(c, lane_pid))
        sleep_ms(2); /* as above */
    /* The loader's connection cut: it reconnects and reads every pending row */
    atomic_store(&reread_done, 0);
    atomic_store(&reread_armed, 1);
    char sql[120];
    snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%d)", pid_of(c, "chime a loader"));
    CHECK(pg_command(c, sql), "cut the loader");
    while (!atomic_load(&reread_done))
        sleep_ms(2); /* a poll of the hook's flag */
    struct chime__backend *b = a->b;
    while (atomic_load(&b->polls) <= atomic_load(&reread_polls))
        sleep_ms(2); /* the poll has handed over what it read */
    while (in_table(a, "k"))
        sleep_ms(2); /* armed again by the poll: it fires, or its firing is refused */
    store_wait_handlers(a);
    size_t fired = recorder_count_key(&rec, "k");
    struct firing f;
    recorder_wait_key(&rec, "k", fired, &f);
    CHECK(fired == 1, "k's handler ran %zu times (the last with attempt %u): its acknowledgement "
          "was still queued when the poll armed it again", fired, f.attempt);
    CHECK(pg_command(lane, "COMMIT"), "release the lane");
    void *rc;
    CHECK_EQ(pthread_join(t, &rc), 0);
    CHECK_EQ((intptr_t)rc, 0);
    CHECK_EQ(chime_store_sync(a), 0);
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.keys WHERE key = 'k' AND end_epoch > 0"), 1);
    CHECK_EQ(pg_value(c, "SELECT attempt FROM chime.keys WHERE key = 'k'"), 1);
    CHECK_EQ(chime_store_close(a), 0);
    PQfinish(lane);
    PQfinish(reread_k);
    PQfinish(c);
    return true;
}

static void test_a_timer_a_poll_read_before_its_firing_does_not_fire_again_after_its_handler(void)
{
    chime__pg_read_hook = let_k_fire_under_the_snapshot;
    in_window(reread_in);
    chime__pg_read_hook = NULL;
}

int main(void)
{
    recorder_init(&rec, NULL);
    static const struct tap_test tests[] = {
        { "a_timer_a_poll_read_before_its_firing_does_not_fire_again_after_its_handler",
          test_a_timer_a_poll_read_before_its_firing_does_not_fire_again_after_its_handler },
    };
    int rc = pg_tests_main(&cluster, tests, (int)(sizeof tests / sizeof *tests));
    recorder_free(&rec);
    return rc;
}
