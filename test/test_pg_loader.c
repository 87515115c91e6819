/* SPDX-License-Identifier: MIT */
/*
 * The loader thread's reads (lib/store/pg/loader.c): what a takeover, a poll or a notification
 * hands to the logic, and that what it hands over from a snapshot taken before a firing does not
 * fire that timer a second time. One throwaway cluster for the file (test/pg_util.h), one database
 * per scenario, one shard, so that the one node holds it. Interleavings are made with PostgreSQL's
 * own row locks, waited for through pg_blocking_pids, and with the read hook (pg.h).
 */
#include "pg_test.h"

static struct pg_cluster cluster;
static char conninfo[600];
static struct recorder rec;

static void fresh(void)
{
    pg_fresh_db(&cluster, "loader", 1, PG_WIDTH_S, conninfo, sizeof conninfo, NULL);
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

/* A fresh database and node "a" on it, once it holds the shard; *c: a connection of the test's. */
static chime_store *open_owner(PGconn **c)
{
    fresh();
    chime_store *a = NULL;
    CHECK_EQ(pg_open_node(&a, conninfo, "a", &rec, 0, 0), 0);
    *c = pg_connect_or_die(conninfo);
    char owner[64] = "";
    while (!pg_owner(*c, 0, owner, sizeof owner) || strcmp(owner, "a"))
        sleep_ms(2); /* a poll of the database: there is nothing to wait on */
    return a;
}

/* End the server process of a's loader: the loader reconnects, and its first poll reads every
 * pending row (loader.c, SERVER RESTARTS). */
static void cut_loader(PGconn *c)
{
    char sql[120];
    snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%d)", pid_of(c, "chime a loader"));
    CHECK(pg_command(c, sql), "cut the loader");
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
    /* the loader's poll, not a load of the keeper's at a multiple of horizon / 8 (keeper.c) */
    if (since || !pthread_equal(pthread_self(), b->loader_thread) ||
        !atomic_exchange(&reread_armed, 0))
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
    PGconn *c;
    chime_store *a = open_owner(&c);
    CHECK_EQ(chime_store_put(a, "blocker", 7, "first", 5, wall_ns() + 7200 * SEC), 0);
    CHECK_EQ(chime_store_put(a, "k", 1, "p", 1, wall_ns() + window), 0);
    reread_s = a;
    reread_k = pg_connect_or_die(conninfo);
    pg_hold_key(reread_k, "k");
    int fire_pid = pid_of(c, "chime a fire"), lane_pid = pid_of(c, "chime a lane");
    while (!pg_blocked(c, fire_pid) && !recorder_count_key(&rec, "k"))
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
    pg_hold_key(lane, "blocker");
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, put_blocker, a), 0);
    while (!pg_blocked(c, lane_pid))
        sleep_ms(2); /* as above */
    atomic_store(&reread_done, 0);
    atomic_store(&reread_armed, 1);
    cut_loader(c);
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

/* ---- a partition made while the loader, its cursor open, waits for a cancel's stripe ---- */

static chime_store *cycle_s;
static _Atomic int cycle_armed;
static _Atomic int cycle_loader_pid, cycle_started, cycle_put_done;
static pthread_t cycle_put, cycle_cancel;

static void *put_far(void *arg)
{
    uint64_t due = wall_ns() + 1000 * 60 * SEC; /* beyond the partitions made ahead */
    intptr_t rc = chime_store_put(arg, "far", 3, "f", 1, due);
    atomic_store(&cycle_put_done, 1);
    return (void *)rc;
}

static void *cancel_x(void *arg)
{
    return (void *)(intptr_t)chime_store_cancel(arg, "x", 1);
}

/* Whether another thread holds the stripe lock of key (a cancel holds it while it waits). */
static int stripe_held(chime_store *s, const char *key)
{
    struct hot_stripe *st = chime__store_stripe(s, chime__store_hash(s, key, strlen(key)));
    if (pthread_mutex_trylock(&st->lock) != 0)
        return 1;
    pthread_mutex_unlock(&st->lock);
    return 0;
}

/* The loader's first poll on its new connection has declared its cursor: chime.timers is locked
 * (ACCESS SHARE) until its transaction ends. A put beyond the partitions goes into the lane, which
 * must make its partition; then a cancel of x, which the poll is about to hand over, takes x's
 * stripe and waits behind the put. */
static void start_the_cycle(struct chime__backend *b, const char *since)
{
    if (since || !pthread_equal(pthread_self(), b->loader_thread) || /* as above */
        !atomic_exchange(&cycle_armed, 0))
        return;
    PGconn *c = pg_connect_or_die(conninfo);
    atomic_store(&cycle_loader_pid, pid_of(c, "chime a loader"));
    int lane_pid = pid_of(c, "chime a lane");
    CHECK_EQ(pthread_create(&cycle_put, NULL, put_far, cycle_s), 0);
    while (!pg_blocked(c, lane_pid) && !atomic_load(&cycle_put_done))
        sleep_ms(2); /* a poll of the database: the lane waits for the table's lock, or is done */
    CHECK_EQ(pthread_create(&cycle_cancel, NULL, cancel_x, cycle_s), 0);
    while (!atomic_load(&cycle_put_done) && !stripe_held(cycle_s, "x"))
        sleep_ms(1); /* a poll of the lock: the cancel reports nothing while it waits */
    PQfinish(c);
    atomic_store(&cycle_started, 1);
}

/*
 * The loader arms what its cursor reads with its transaction open (loader.c); arming takes the
 * key's stripe lock, which a cancel holds while it waits for its lane; and the lane's put needs a
 * partition nobody has made yet. CREATE TABLE ... PARTITION OF locks chime.timers exclusively, so
 * it waits for the loader's transaction: a cycle the server cannot see. Its 100 ms lock_timeout
 * only makes the lane try again, and again (schema.c, ensure_one): the cycle held, every write of
 * the node with it, until the server ended the loader's session for idling in its transaction
 * (max(lease / 2, 1 s); conn.c), and the loader read everything again on a new connection.
 * Attached instead (ALTER TABLE ... ATTACH PARTITION: SHARE UPDATE EXCLUSIVE on chime.timers),
 * the partition is made beside readers: the put, then the cancel, then the poll go through.
 */
static void test_a_partition_made_while_the_loader_arms_does_not_wait_for_its_transaction(void)
{
    PGconn *c;
    chime_store *a = open_owner(&c);
    CHECK_EQ(chime_store_put(a, "x", 1, "p", 1, wall_ns() + 600 * SEC), 0);
    cycle_s = a;
    chime__pg_read_hook = start_the_cycle;
    atomic_store(&cycle_put_done, 0);
    atomic_store(&cycle_armed, 1);
    cut_loader(c); /* its first poll then reads x */
    while (!atomic_load(&cycle_started))
        sleep_ms(2); /* a poll of the hook's flag */
    void *rc;
    CHECK_EQ(pthread_join(cycle_put, &rc), 0);
    CHECK_EQ((intptr_t)rc, 0);
    CHECK_EQ(pthread_join(cycle_cancel, &rc), 0);
    CHECK_EQ((intptr_t)rc, 0);
    int now_pid = pid_of(c, "chime a loader");
    CHECK(now_pid == atomic_load(&cycle_loader_pid),
          "the put waited until the server ended the loader's session (pid %d, now %d)",
          atomic_load(&cycle_loader_pid), now_pid);
    chime__pg_read_hook = NULL;
    CHECK_EQ(chime_store_close(a), 0);
    PQfinish(c);
}

int main(void)
{
    recorder_init(&rec, NULL);
    static const struct tap_test tests[] = {
        { "a_timer_a_poll_read_before_its_firing_does_not_fire_again_after_its_handler",
          test_a_timer_a_poll_read_before_its_firing_does_not_fire_again_after_its_handler },
        { "a_partition_made_while_the_loader_arms_does_not_wait_for_its_transaction",
          test_a_partition_made_while_the_loader_arms_does_not_wait_for_its_transaction },
    };
    int rc = pg_tests_main(&cluster, tests, (int)(sizeof tests / sizeof *tests));
    recorder_free(&rec);
    return rc;
}
