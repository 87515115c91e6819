/* SPDX-License-Identifier: MIT */
/*
 * Handing a shard over on PostgreSQL (lib/store/pg/lease.c, DRAIN): a node above its share, while
 * another node is below its own, drains its highest shard and releases it once the firings it
 * recorded there are settled. Node a holds both shards of the schema and fires a timer of shard 1;
 * node b joins, and a drains shard 1 to it. One throwaway cluster for the file (test/pg_util.h),
 * one database per test.
 */
#include "pg_test.h"

static struct pg_cluster cluster;
static char conninfo[600];
static struct recorder rec;

/* A node that drains a shard (another node joined below its share) lets the outcomes of its
 * running handlers through until they are settled, for a lease at most (lease.c, DRAIN). Found in
 * review: a retry was refused locally instead, so the handler's delay was lost and the next owner
 * fired the timer again at once. Then in CI under valgrind: the shard was released a round after
 * the drain began, settled or not, and a retry that took longer to commit was refused. */
/* When the handler asks for its retry: as the drain begins, once the round after the drain's has
 * ended, or once its shard was released from under it. */
enum drain_mode { RETRY_AT_ONCE, RETRY_AFTER_A_ROUND, RETRY_WHEN_RELEASED };
static struct chime__backend *drain_b;
static enum drain_mode drain_mode; /* set before the node opens */
static _Atomic int drain_started, held_after_a_round;
static _Atomic uint64_t retry_asked_at, rounds_until_released;
#define RETRY_NS (4 * SEC)

static int64_t retry_while_draining(struct recorder *r, const struct chime_fire *fire)
{
    (void)r;
    if (fire->attempt != 1)
        return 0;
    atomic_store(&drain_started, 1);
    unsigned shard = pg_fence_shard(fire->fence);
    uint64_t epoch = pg_fence_epoch(fire->fence);
    struct pg_shard *sh = &drain_b->shards[shard];
    /* polls, here and below: the lease thread offers nothing to wait on (meson's timeout) */
    while (!atomic_load(&sh->draining))
        sleep_ms(2);
    uint64_t seen = atomic_load(&drain_b->rounds);
    if (drain_mode == RETRY_AFTER_A_ROUND) {
        while (atomic_load(&drain_b->rounds) < seen + 2) /* the drain's round, and the next */
            sleep_ms(2);
        atomic_store(&held_after_a_round, chime__pg_believes(drain_b, shard, epoch));
    } else if (drain_mode == RETRY_WHEN_RELEASED) {
        while (atomic_load(&sh->epoch) == epoch)
            sleep_ms(2);
        atomic_store(&rounds_until_released, atomic_load(&drain_b->rounds) - seen);
    }
    atomic_store(&retry_asked_at, wall_ns());
    return (int64_t)RETRY_NS;
}

/* Node a fires a timer of its shard 1, node b joins, a drains shard 1 while the handler runs; the
 * timer's second firing (b's) into *f. */
static void drain_under_a_handler(const char *db, enum drain_mode mode, uint64_t lease,
                                  struct firing *f)
{
    CHECK_EQ(pg_cluster_db(&cluster, db, 2, PG_WIDTH_S, conninfo, sizeof conninfo), 0);
    recorder_init(&rec, NULL);
    rec.reply = retry_while_draining;
    drain_mode = mode;
    atomic_store(&drain_started, 0);
    chime_store *a = NULL, *b = NULL;
    CHECK_EQ(pg_open_node(&a, conninfo, "a", &rec, lease, 0), 0);
    drain_b = a->b;
    char key[32];
    pg_key_in_shard(key, sizeof key, "drain", 1, 2); /* "a" drains its highest shard */
    CHECK_EQ(chime_store_put(a, key, strlen(key), "x", 1, wall_ns() + 100 * MS), 0);
    while (!atomic_load(&drain_started))
        sleep_ms(2); /* a poll on the handler's flag */
    CHECK_EQ(pg_open_node(&b, conninfo, "b", &rec, lease, 0), 0);
    recorder_wait_key(&rec, key, 2, f);
    pg_wait_idle(b, conninfo);
    pg_wait_settled(a); /* a retry committed, or refused */
    pg_wait_settled(b);
    CHECK_EQ(chime_store_close(b), 0);
    CHECK_EQ(chime_store_close(a), 0);
    recorder_free(&rec);
}

static void check_the_retry_kept_its_delay(const struct firing *f)
{
    uint64_t asked = atomic_load(&retry_asked_at);
    CHECK_EQ(f->attempt, 2);
    CHECK(f->at_wall >= asked + RETRY_NS, /* never early: the retry's due time */
          "attempt %u fired %.3f s after the handler asked for a retry in %.3f s", f->attempt,
          (double)(f->at_wall - asked) / 1e9, (double)RETRY_NS / 1e9);
}

static void test_a_retry_asked_while_its_shard_drains_keeps_its_delay(void)
{
    struct firing f;
    drain_under_a_handler("drain_1", RETRY_AT_ONCE, 2 * SEC, &f);
    check_the_retry_kept_its_delay(&f);
}

/* Rounds of 1 s: the retry commits within the two rounds left before the drain's lease is up. */
static void test_a_handler_that_outlasts_a_round_of_its_drain_still_keeps_its_retrys_delay(void)
{
    struct firing f;
    drain_under_a_handler("drain_2", RETRY_AFTER_A_ROUND, 4 * SEC, &f);
    CHECK(atomic_load(&held_after_a_round), "the shard was released under a running handler");
    check_the_retry_kept_its_delay(&f);
}

/* The other bound: a handler that never ends holds the shard a lease (4 rounds), not forever. */
static void test_a_drain_releases_its_shard_after_a_lease_whatever_still_runs(void)
{
    struct firing f;
    drain_under_a_handler("drain_3", RETRY_WHEN_RELEASED, 2 * SEC, &f);
    uint64_t rounds = atomic_load(&rounds_until_released);
    CHECK(rounds >= 3, "released %llu rounds after the drain began, its handler running",
          (unsigned long long)rounds);
    CHECK_EQ(f.attempt, 2); /* the retry was refused: b fired it again */
}


/*
 * A firing recorded whose handler does not start (its shard began draining in between: the fence
 * is no longer valid when the handler's turn comes) is settled by the logic's abandon: the drain
 * then releases the shard at its next round, not a lease later. The backend's fire() is wrapped so
 * that it returns only once the shard drains.
 */
static struct chime__backend_ops fire_waits;
static _Atomic uint64_t rounds_at_drain;

static int fire_then_wait_for_the_drain(struct chime__backend *b, struct chime__firing *f,
                                        size_t n)
{
    int err = chime__pg_ops.fire(b, f, n);
    for (size_t i = 0; !err && i < n; i++) {
        if (f[i].status != 0)
            continue;
        struct pg_shard *sh = &b->shards[pg_fence_shard(f[i].ref.fence)];
        atomic_store(&drain_started, 1);
        while (!atomic_load(&sh->draining))
            sleep_ms(2); /* a poll: the lease thread offers nothing to wait on */
        atomic_store(&rounds_at_drain, atomic_load(&b->rounds));
    }
    return err;
}

/* The drained shard's release, polled for (the lease thread offers nothing to wait on): the lease
 * rounds a's lease thread had ended then. */
static uint64_t rounds_at_release(chime_store *a)
{
    while (atomic_load(&a->b->released) == 0)
        sleep_ms(2);
    return atomic_load(&a->b->rounds);
}

/* a's firing of key never ran its handler: b fired the timer, and only b, as attempt 1 (a
 * un-recorded its firing before the release: backend.c, pg_abandon); every firing settled, both
 * nodes closed. */
static void fired_again_by_b_alone(chime_store *a, chime_store *b, const char *key)
{
    struct firing f;
    recorder_wait_key(&rec, key, 1, &f);
    CHECK_EQ(f.attempt, 1);
    pg_wait_idle(b, conninfo);
    store_wait_handlers(a);
    pg_wait_settled(a);
    pg_wait_settled(b);
    CHECK_EQ(chime_store_close(b), 0);
    CHECK_EQ(chime_store_close(a), 0);
    CHECK_EQ(recorder_count_key(&rec, key), 1);
    recorder_free(&rec);
}

/* Node a opened on cfg with its fire() wrapped by fire (which holds a firing until its shard
 * drains), and a timer of its shard 1 put into key[32], due in 100 ms; returned once the wrapper
 * has a's firing of it. */
static chime_store *a_with_a_firing_held(const struct chime_store_config *cfg,
                                         int (*fire)(struct chime__backend *,
                                                     struct chime__firing *, size_t),
                                         char *key)
{
    atomic_store(&drain_started, 0);
    fire_waits = chime__pg_ops;
    fire_waits.fire = fire;
    chime__store_set_backend(&fire_waits); /* node a's alone */
    chime_store *a = NULL;
    CHECK_EQ(pg_open_config(&a, cfg, &rec), 0);
    chime__store_set_backend(NULL);
    pg_key_in_shard(key, 32, "drain", 1, 2);
    CHECK_EQ(chime_store_put(a, key, strlen(key), "x", 1, wall_ns() + 100 * MS), 0);
    while (!atomic_load(&drain_started))
        sleep_ms(2); /* a poll on the wrapper's flag */
    return a;
}

static void test_a_firing_abandoned_before_its_handler_starts_does_not_hold_the_drain(void)
{
    CHECK_EQ(pg_cluster_db(&cluster, "drain_4", 2, PG_WIDTH_S, conninfo, sizeof conninfo), 0);
    recorder_init(&rec, NULL);
    struct chime_store_config cfg;
    pg_node_config(&cfg, conninfo, "a", (TAP_SLOW ? 10 : 2) * SEC, 0);
    char key[32];
    chime_store *a = a_with_a_firing_held(&cfg, fire_then_wait_for_the_drain, key), *b = NULL;
    cfg.node = "b";
    CHECK_EQ(pg_open_config(&b, &cfg, &rec), 0);
    uint64_t released_at = rounds_at_release(a); /* then the wrapper has seen the drain */
    uint64_t rounds = released_at - atomic_load(&rounds_at_drain);
    CHECK(rounds <= 2, "released %llu rounds after the drain began, with nothing running",
          (unsigned long long)rounds);
    fired_again_by_b_alone(a, b, key);
}

/*
 * A firing of the draining shard whose handler has not begun (the one worker is busy with a
 * handler of another shard) never will: its fence is invalid from the drain on, and run_handler
 * abandons it whenever the worker comes free. The revoke that follows the drain settles it at
 * once (lifecycle.c, sink_revoke), so that it does not hold the drain until then: found in review,
 * it held it a whole lease ('released 4 rounds after the drain began'), and the shard's timers
 * fired nowhere meanwhile.
 */
static _Atomic int busy_started, busy_release;
static int64_t busy_reply(struct recorder *r, const struct chime_fire *fire)
{
    (void)r;
    if (fire->key_len >= 4 && !memcmp(fire->key, "busy", 4)) {
        atomic_store(&busy_started, 1);
        while (!atomic_load(&busy_release))
            sleep_ms(2); /* a poll on the test's flag */
    }
    return 0;
}

static void test_a_firing_waiting_for_a_busy_worker_does_not_hold_the_drain(void)
{
    CHECK_EQ(pg_cluster_db(&cluster, "drain_5", 2, PG_WIDTH_S, conninfo, sizeof conninfo), 0);
    recorder_init(&rec, NULL);
    rec.reply = busy_reply;
    atomic_store(&busy_started, 0);
    atomic_store(&busy_release, 0);
    uint64_t lease = (TAP_SLOW ? 10 : 2) * SEC;
    chime_store *a = NULL, *b = NULL;
    struct chime_store_config cfg;
    pg_node_config(&cfg, conninfo, "a", lease, 0);
    cfg.runtime.workers = 1; /* the busy handler holds it */
    CHECK_EQ(pg_open_config(&a, &cfg, &rec), 0);
    char busy[32], key[32];
    pg_key_in_shard(busy, sizeof busy, "busy", 0, 2); /* a keeps shard 0 */
    pg_key_in_shard(key, sizeof key, "drain", 1, 2);  /* and drains shard 1 */
    /* The runtime's one worker runs the store's own callbacks too: the second firing is taken
     * (a lead of 2 ms at least before its due time) before the first's handler begins. */
    uint64_t due = wall_ns() + 300 * MS;
    CHECK_EQ(chime_store_put(a, busy, strlen(busy), "x", 1, due), 0);
    CHECK_EQ(chime_store_put(a, key, strlen(key), "x", 1, due + 1 * MS), 0);
    while (!atomic_load(&busy_started))
        sleep_ms(2);
    struct chime_store_stats st;
    do { /* its firing recorded, its handler waiting for the worker: a poll */
        sleep_ms(2);
        chime_store_stats(a, &st);
    } while (st.running < 2);
    CHECK_EQ(pg_open_node(&b, conninfo, "b", &rec, lease, 0), 0);
    while (!atomic_load(&a->b->shards[1].draining))
        sleep_ms(2); /* a poll: the lease thread offers nothing to wait on */
    uint64_t at_drain = atomic_load(&a->b->rounds);
    uint64_t rounds = rounds_at_release(a) - at_drain;
    atomic_store(&busy_release, 1);
    CHECK(rounds <= 2, "released %llu rounds after the drain began, nothing of its shard running",
          (unsigned long long)rounds);
    fired_again_by_b_alone(a, b, key);
}

/*
 * A firing the old owner recorded but whose handler never began is un-recorded by the drain (in
 * its epoch, before the release): the new owner fires it with the attempt it would have had, so
 * that a join spends no attempt, and with max_attempts 1 the timer runs rather than go to the
 * dead letters unrun. Found in review: b fired it as attempt 2 (13 to 20 of 360 timers buried
 * unrun across runs of a join/leave loop). key_held: the test holds the key's row (another
 * transaction's lock) once the drain has begun, so that the un-record waits for it, holding the
 * shard's row FOR KEY SHARE, past the drain's lease bound: a releases the shard, and b may take it
 * only once the un-record has committed in a's epoch. With lock_timeout off: the owners' sessions
 * give a key's row up after max(lease / 4, 1 s), before the drain's bound (conn.c), and the shard
 * is then free between the un-record's runs.
 */
static _Atomic int key_held;

static int fire_then_wait_for_the_key(struct chime__backend *b, struct chime__firing *f, size_t n)
{
    int err = fire_then_wait_for_the_drain(b, f, n);
    while (!err && atomic_load(&drain_started) && !atomic_load(&key_held))
        sleep_ms(2); /* a poll on the test's flag */
    return err;
}

/* Whether a statement of c's database waits for a lock (the server's activity view). */
static int waits_for_a_lock(PGconn *c)
{
    return pg_value(c, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                       " AND datname = current_database()") > 0;
}

static void join_with_max_attempts_1(const char *db, int hold_the_key)
{
    CHECK_EQ(pg_cluster_db(&cluster, db, 2, PG_WIDTH_S, conninfo, sizeof conninfo), 0);
    recorder_init(&rec, NULL);
    atomic_store(&key_held, !hold_the_key);
    atomic_store(&chime__pg_lock_timeout_off, hold_the_key);
    struct chime_store_config cfg;
    pg_node_config(&cfg, conninfo, "a", (TAP_SLOW ? 10 : 2) * SEC, 0);
    cfg.max_attempts = 1;
    char key[32];
    chime_store *a = a_with_a_firing_held(&cfg, fire_then_wait_for_the_key, key), *b = NULL;
    cfg.node = "b";
    CHECK_EQ(pg_open_config(&b, &cfg, &rec), 0);
    PGconn *holder = pg_connect_or_die(conninfo);
    if (hold_the_key) {
        while (!atomic_load(&a->b->shards[1].draining))
            sleep_ms(2); /* a poll: the lease thread offers nothing to wait on */
        pg_hold_key(holder, key);
        atomic_store(&key_held, 1);
        int waiting;
        while (!(waiting = waits_for_a_lock(holder)) && !atomic_load(&a->b->released))
            sleep_ms(2); /* polls: the un-record waits for the key, the shard's row locked */
        CHECK(waiting, "the shard was released with no un-record waiting for its key");
        rounds_at_release(a); /* a lease after the drain began, its un-record unsettled */
        uint64_t seen = atomic_load(&b->b->rounds);
        while (atomic_load(&b->b->rounds) < seen + 2)
            sleep_ms(2); /* a poll: a round of b's begun after the release has ended */
        CHECK(pg_value(holder, "SELECT count(*) FROM chime.shards WHERE shard = 1"
                               " AND owner IS NOT NULL") == 0,
              "the shard was taken while the un-record of its old epoch waited");
        CHECK(pg_command(holder, "COMMIT"), "the key's holder could not commit");
    }
    size_t dead = 0;
    while (!recorder_count_key(&rec, key) && !dead) { /* polls: fired, or buried unrun */
        sleep_ms(2);
        CHECK_EQ(chime_store_dead_list(b, store_count_dead, &dead), 0);
    }
    CHECK_EQ(dead, 0);
    struct firing f;
    recorder_wait_key(&rec, key, 1, &f);
    CHECK_EQ(f.attempt, 1);
    CHECK_EQ(pg_fence_epoch(f.fence) >= 2, 1); /* b's epoch: a's was 1 */
    pg_wait_idle(b, conninfo);
    store_wait_handlers(a);
    pg_wait_settled(a);
    pg_wait_settled(b);
    CHECK_EQ(chime_store_close(b), 0);
    CHECK_EQ(chime_store_close(a), 0);
    atomic_store(&chime__pg_lock_timeout_off, 0);
    CHECK_EQ(recorder_count_key(&rec, key), 1);
    PQfinish(holder);
    recorder_free(&rec);
}

static void test_a_join_spends_no_attempt_of_a_firing_whose_handler_never_began(void)
{
    join_with_max_attempts_1("drain_6", 0);
}

static void test_the_next_owner_waits_for_an_un_record_that_outlasts_the_drain(void)
{
    join_with_max_attempts_1("drain_7", 1);
}

int main(void)
{
    static const struct tap_test tests[] = {
        { "a_retry_asked_while_its_shard_drains_keeps_its_delay",
          test_a_retry_asked_while_its_shard_drains_keeps_its_delay },
        { "a_handler_that_outlasts_a_round_of_its_drain_still_keeps_its_retrys_delay",
          test_a_handler_that_outlasts_a_round_of_its_drain_still_keeps_its_retrys_delay },
        { "a_drain_releases_its_shard_after_a_lease_whatever_still_runs",
          test_a_drain_releases_its_shard_after_a_lease_whatever_still_runs },
        { "a_firing_abandoned_before_its_handler_starts_does_not_hold_the_drain",
          test_a_firing_abandoned_before_its_handler_starts_does_not_hold_the_drain },
        { "a_firing_waiting_for_a_busy_worker_does_not_hold_the_drain",
          test_a_firing_waiting_for_a_busy_worker_does_not_hold_the_drain },
        { "a_join_spends_no_attempt_of_a_firing_whose_handler_never_began",
          test_a_join_spends_no_attempt_of_a_firing_whose_handler_never_began },
        { "the_next_owner_waits_for_an_un_record_that_outlasts_the_drain",
          test_the_next_owner_waits_for_an_un_record_that_outlasts_the_drain },
    };
    return pg_tests_main(&cluster, tests, (int)(sizeof tests / sizeof *tests));
}
