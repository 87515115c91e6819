/* SPDX-License-Identifier: MIT */
/*
 * The durable store and the wall clock (lib/store/fire.c, keeper.c): deadlines are CLOCK_REALTIME,
 * the runtime counts CLOCK_MONOTONIC. With an injected clock (the real one plus an offset this test
 * moves, reported to the store as the kernel reports a step of CLOCK_REALTIME) these check: a step
 * back makes nothing fire early, a step forward makes what became due fire, far timers are loaded
 * when a step brings them within the horizon, a restart after the clock moved fires what is due, a
 * firing is recorded the lead ahead of its due time (and not before), and a handler whose firing was
 * recorded waits through a step back, starts when the clock passes its due time, and does not keep
 * close waiting; and the kernel's clock is watched from before the first load. test_store_loads.c
 * has the keeper's loads racing with puts.
 */
#include "store_util.h"

#include "store/io.h"

static char *dir;
static struct recorder rec;

static chime_store *open_cfg(struct chime_store_config *cfg)
{
    return store_open_on_fake_clock(dir, &rec, cfg);
}

static chime_store *open_fake(uint64_t horizon_ns)
{
    return open_cfg(&(struct chime_store_config){ .horizon_ns = horizon_ns });
}

static void fresh(void)
{
    store_test_fresh(&dir, "clock", &rec);
}

/* A put due at now + window, then the clock an hour back: if the step came within the window,
 * nothing starts until the clock comes back. */
static bool step_back_in(uint64_t window)
{
    fresh();
    chime_store *s = open_fake(0);
    uint64_t due = fake_wall() + window;
    CHECK_EQ(chime_store_put(s, "k", 1, "x", 1, due), 0);
    fake_step(s, -(int64_t)(3600 * SEC)); /* an hour back: the monotonic deadline comes first */
    uint64_t real = fake_wall() + 3600 * SEC;
    bool fit = real < due; /* a firing recorded before the step waits for the wall clock too */
    while (fit && fake_wall() + 3600 * SEC < due + window)
        sleep_ms(10); /* the monotonic deadline passes; the wall clock says an hour to go */
    if (fit)
        CHECK_EQ(recorder_count(&rec), 0);
    fake_step(s, (int64_t)(3600 * SEC)); /* back to where it was: now it is due */
    recorder_wait(&rec, 1);
    CHECK(!atomic_load(&rec.early), "fired before its due time by the wall clock");
    CHECK_EQ(rec.f[0].due, due);
    CHECK_EQ(chime_store_close(s), 0);
    return fit;
}

static void a_step_back_fires_nothing_before_its_due_time(void)
{
    in_window(step_back_in);
}

static void a_step_forward_fires_what_became_due(void)
{
    fresh();
    chime_store *s = open_fake(0);
    uint64_t now = fake_wall();
    CHECK_EQ(chime_store_put(s, "in-10-min", 9, "x", 1, now + 600 * SEC), 0);
    CHECK_EQ(chime_store_put(s, "in-20-min", 9, "x", 1, now + 1200 * SEC), 0);
    fake_step(s, (int64_t)(900 * SEC)); /* 15 minutes forward */
    recorder_wait(&rec, 1);
    CHECK(strcmp(rec.f[0].key, "in-10-min") == 0, "fired %s", rec.f[0].key);
    CHECK(!atomic_load(&rec.early), "early");
    chime__store_settle(s); /* the keeper has handled the step (its sweep, its load) */
    CHECK_EQ(recorder_count(&rec), 1); /* the other one is still five minutes away... */
    /* ...and a firing of it before its due time, whenever it came, sets rec.early (below) */
    fake_step(s, (int64_t)(600 * SEC));
    recorder_wait(&rec, 2);
    CHECK(!atomic_load(&rec.early), "early");
    CHECK_EQ(chime_store_close(s), 0);
}

static void far_timers_load_when_the_clock_brings_them_within_the_horizon(void)
{
    fresh();
    chime_store *s = open_fake(60 * SEC); /* a one-minute horizon */
    uint64_t now = fake_wall();
    for (int d = 1; d <= 30; d++) { /* one timer a day for 30 days, as the cold tier holds them */
        char key[16];
        snprintf(key, sizeof key, "day%02d", d);
        CHECK_EQ(chime_store_put(s, key, strlen(key), "x", 1, now + (uint64_t)d * 86400 * SEC), 0);
    }
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    CHECK_EQ(st.pending, 30);
    CHECK_EQ(st.loaded, 0);
    CHECK_EQ(chime_store_cancel(s, "day07", 5), 0); /* found on disk */
    fake_step(s, (int64_t)(10 * 86400 * SEC + 30 * SEC)); /* ten days on */
    recorder_wait(&rec, 9);
    chime__store_settle(s);
    store_wait_handlers(s); /* the ninth handler's entry leaves the table after its outcome */
    CHECK_EQ(recorder_count(&rec), 9); /* days 1-10 but 7 */
    CHECK_EQ(recorder_count_key(&rec, "day07"), 0);
    chime_store_stats(s, &st);
    CHECK_EQ(st.loaded, 0); /* day 11 is a day away: still on disk */
    CHECK_EQ(chime_store_close(s), 0);

    s = open_fake(60 * SEC); /* a restart twenty days later: the rest are due */
    fake_step(s, (int64_t)(20 * 86400 * SEC));
    recorder_wait(&rec, 29);
    CHECK(!atomic_load(&rec.early), "early");
    store_wait_idle(s);
    CHECK_EQ(recorder_count(&rec), 29);
    CHECK_EQ(chime_store_close(s), 0);
}

static void a_restart_after_the_clock_moved_on_fires_what_is_overdue(void)
{
    fresh();
    chime_store *s = open_fake(0);
    uint64_t now = fake_wall();
    CHECK_EQ(chime_store_put(s, "a", 1, "x", 1, now + 3600 * SEC), 0);
    CHECK_EQ(chime_store_put(s, "b", 1, "x", 1, now + 7200 * SEC), 0);
    CHECK_EQ(chime_store_close(s), 0);
    fake_step(NULL, (int64_t)(5400 * SEC)); /* 90 minutes pass while it is down */
    s = open_fake(0);
    recorder_wait(&rec, 1);
    chime__store_settle(s);
    CHECK_EQ(recorder_count(&rec), 1);
    CHECK(strcmp(rec.f[0].key, "a") == 0, "fired %s", rec.f[0].key);
    CHECK_EQ(chime_store_close(s), 0);
}

static uint64_t fired(chime_store *s)
{
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    return st.fired;
}

/* The wall clock a handler's callback must have seen and waited on (0: none), and whether one
 * did (chime__store_rewait_hook, from main on). */
static _Atomic uint64_t rewait_want;
static _Atomic int rewaited;

static void note_rewait(uint64_t wall)
{
    uint64_t want = atomic_load(&rewait_want);
    if (want && wall == want)
        atomic_store(&rewaited, 1);
}

/* The clock stands still 1 ms before the timer's due time: its firing is recorded (from the lead
 * before, at least 2 ms) and its handler waits for the due time. Then the clock steps an hour back
 * without the store being told (so no sweep re-arms the handler first): the handler's own callback,
 * due in 1 ms, must find the wall clock before the due time and wait an hour more. The test waits
 * for a callback that saw the stepped clock and armed itself again (or for the handler to run,
 * which fails it). A review found that a 50 ms sleep here let the keeper's sweep do it first, and
 * a handler that did not look at the wall clock went unseen. */
static chime_store *a_handler_waiting_an_hour(uint64_t *due)
{
    fresh();
    chime_store *s = open_fake(0);
    *due = fake_wall() + 10 * SEC;
    CHECK_EQ(chime_store_put(s, "k", 1, "x", 1, *due), 0);
    fake_freeze(s, *due - MS);
    while (fired(s) == 0)
        sleep_ms(1); /* a poll: the firing is recorded by the store's own threads */
    atomic_store(&rewaited, 0);
    atomic_store(&rewait_want, *due - 3600 * SEC);
    fake_freeze(NULL, *due - 3600 * SEC);
    while (!atomic_load(&rewaited) && recorder_count(&rec) == 0)
        sleep_ms(1); /* a poll: the handler's callback waits again, or (wrongly) runs the handler */
    atomic_store(&rewait_want, 0);
    chime__store_settle(s);
    CHECK_EQ(recorder_count(&rec), 0);
    return s;
}

static void a_waiting_handler_starts_when_the_clock_steps_past_its_due_time(void)
{
    uint64_t due;
    chime_store *s = a_handler_waiting_an_hour(&due);
    atomic_store(&fake_offset, (int64_t)(20 * SEC)); /* let the clock run again, past the due time */
    fake_freeze(s, 0);
    recorder_wait(&rec, 1);
    CHECK(!atomic_load(&rec.early), "fired before its due time by the wall clock");
    CHECK_EQ(rec.f[0].due, due);
    CHECK_EQ(rec.f[0].attempt, 1);
    CHECK_EQ(chime_store_close(s), 0);
}

/* Found in review: a handler armed an hour out by a step back, then the clock stepped forward past
 * its due time before the keeper swept for the step, and close, due within the lead, waited for
 * it: the hour. Close arms it again from the wall clock now, so it starts at once and close returns
 * (before the fix, this test waited an hour, past meson's timeout). */
static void close_starts_a_due_handler_an_unswept_step_left_armed_an_hour_out(void)
{
    uint64_t due;
    chime_store *s = a_handler_waiting_an_hour(&due);
    atomic_store(&fake_offset, (int64_t)(20 * SEC)); /* past its due time, the keeper not told */
    fake_freeze(NULL, 0);
    CHECK_EQ(chime_store_close(s), 0);
    CHECK_EQ(recorder_count(&rec), 1);
    CHECK(!atomic_load(&rec.early), "fired before its due time by the wall clock");
    CHECK_EQ(rec.f[0].attempt, 1);
}

static int fail_log_writes(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    (void)ctx;
    (void)name;
    return op == CHIME_IO_WRITE && fd >= 0 && is_file(fd, "/wal-") ? -EIO : 0;
}

/* Found in review: a handler whose firing was recorded before the store failed still started. A
 * failed store starts none (chime_store.h); the firing stays recorded, and the restart fires it. */
static void a_failed_store_starts_no_handler_even_one_recorded_before(void)
{
    uint64_t due;
    chime_store *s = a_handler_waiting_an_hour(&due);
    chime__io_set_fault(fail_log_writes, NULL);
    CHECK_EQ(chime_store_put(s, "other", 5, "o", 1, due + 3600 * SEC), -EIO);
    chime__io_set_fault(NULL, NULL);
    atomic_store(&fake_offset, (int64_t)(20 * SEC)); /* past the due time: it would start now */
    fake_freeze(s, 0);
    struct chime_store_stats st;
    do {
        sleep_ms(1); /* a poll: the runtime calls the waiting handler back on its own */
        chime_store_stats(s, &st);
    } while (st.running);
    CHECK_EQ(recorder_count(&rec), 0);
    CHECK_EQ(chime_store_close(s), -EIO);
    s = open_fake(0);
    recorder_wait(&rec, 1);
    CHECK_EQ(rec.f[0].attempt, 2);
    CHECK_EQ(chime_store_close(s), 0);
}

/* A store that has not timed commits for a whole period yet has the longest lead (lib/store/lead.h):
 * a timer is cancellable until that lead before its due time, and from then its firing is recorded
 * (cancel: -EINPROGRESS) while its handler waits for the due time itself. */
static void a_firing_is_recorded_the_lead_before_its_due_time_and_not_before(void)
{
    fresh();
    chime_store *s = open_fake(0);
    uint64_t t0 = fake_wall();
    fake_freeze(s, t0);
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    CHECK_EQ(st.lead_ns, 50 * MS);
    uint64_t due = t0 + 80 * MS;
    CHECK_EQ(chime_store_put(s, "k", 1, "x", 1, due), 0);
    CHECK_EQ(chime_store_put(s, "other", 5, "x", 1, due), 0);
    fake_freeze(s, due - 50 * MS - MS); /* a millisecond before the lead: still cancellable */
    CHECK_EQ(chime_store_cancel(s, "other", 5), 0);
    fake_freeze(s, due - 40 * MS); /* within the lead: taken, and its firing recorded */
    while (fired(s) == 0)
        sleep_ms(1); /* a poll: the firing is recorded by the store's own threads */
    CHECK_EQ(chime_store_cancel(s, "k", 1), -EINPROGRESS);
    CHECK_EQ(recorder_count(&rec), 0); /* the wall clock stands 40 ms before its due time */
    fake_freeze(s, due);
    recorder_wait(&rec, 1);
    CHECK(!atomic_load(&rec.early), "fired before its due time by the wall clock");
    CHECK_EQ(rec.f[0].due, due);
    CHECK_EQ(fired(s), 1); /* "other" never fired */
    fake_freeze(s, 0);
    CHECK_EQ(chime_store_close(s), 0);
}

static void close_does_not_wait_for_a_handler_the_clock_put_off(void)
{
    uint64_t due;
    chime_store *s = a_handler_waiting_an_hour(&due);
    CHECK_EQ(chime_store_close(s), 0); /* at once, not in an hour */
    CHECK_EQ(recorder_count(&rec), 0);
    atomic_store(&fake_offset, (int64_t)(20 * SEC));
    fake_freeze(NULL, 0);
    s = open_fake(0); /* its firing was recorded: the restart fires it again, as attempt 2 */
    recorder_wait(&rec, 1);
    CHECK(!atomic_load(&rec.early), "early");
    CHECK_EQ(rec.f[0].attempt, 2);
    CHECK_EQ(chime_store_close(s), 0);
}

static _Atomic int hold_first; /* the next handler waits while this is set */

/* How many timers are held for their key's running handler (the table read under its locks). */
static size_t held(chime_store *s)
{
    size_t n = 0;
    for (int i = 0; i < HOT_STRIPES; i++) {
        struct hot_stripe *st = &s->stripes[i];
        pthread_mutex_lock(&st->lock);
        for (size_t b = 0; b < st->nbuckets; b++)
            for (struct hot *e = st->buckets[b]; e; e = e->next)
                n += e->state == HOT_HELD;
        pthread_mutex_unlock(&st->lock);
    }
    return n;
}

static int64_t held_reply(struct recorder *r, const struct chime_fire *f)
{
    (void)r;
    (void)f;
    while (atomic_load(&hold_first))
        sleep_ms(1); /* a poll: the test lets it go */
    return 0;
}

/* As above for a newer put of a key whose handler runs: held when due, then the clock an hour
 * back, then the handler returns and releases it. Its firing is not recorded an hour early. */
static void a_held_timer_released_after_a_step_back_stays_cancellable(void)
{
    fresh();
    rec.reply = held_reply;
    atomic_store(&hold_first, 1);
    struct chime_store_config cfg = { .runtime.workers = 2 }; /* callbacks while the first waits */
    chime_store *s = open_cfg(&cfg);
    uint64_t t0 = fake_wall(), due = t0 + 100 * MS;
    fake_freeze(s, t0);
    CHECK_EQ(chime_store_put(s, "k", 1, "1", 1, due), 0);
    fake_freeze(s, due);
    while (fired(s) == 0)
        sleep_ms(1); /* a poll: recorded by the store's threads; its handler then waits */
    CHECK_EQ(chime_store_put(s, "k", 1, "2", 1, due + 100 * MS), 0);
    fake_freeze(s, due + 100 * MS);
    while (held(s) == 0)
        sleep_ms(1); /* a poll: its callback finds it due and holds it for the running handler */
    atomic_store(&rewaited, 0);
    atomic_store(&rewait_want, due + 100 * MS - 3600 * SEC);
    fake_freeze(s, due + 100 * MS - 3600 * SEC); /* an hour back */
    atomic_store(&hold_first, 0);
    recorder_wait(&rec, 1);
    while (!atomic_load(&rewaited) && fired(s) < 2)
        sleep_ms(1); /* a poll: the dispatcher takes what the handler's end released */
    atomic_store(&rewait_want, 0);
    CHECK_EQ(chime_store_cancel(s, "k", 1), 0);
    fake_freeze(s, 0);
    CHECK_EQ(chime_store_close(s), 0);
    CHECK_EQ(recorder_count(&rec), 1);
    rec.reply = NULL;
}

static int is_timerfd(int fd)
{
    return is_file(fd, "anon_inode:[timerfd]");
}

/* The timerfds this process holds open. */
static int timerfds(void)
{
    return fds_where(is_timerfd);
}

static int timerfds_at_first_load = -1;

static int load_counting_timerfds(struct chime__backend *b, uint64_t from, uint64_t until,
                                  chime__timer_fn *fn, void *ctx)
{
    if (timerfds_at_first_load < 0)
        timerfds_at_first_load = timerfds();
    return chime__journal_ops.load(b, from, until, fn, ctx);
}

/*
 * The kernel's clock is watched for steps from before the first load (lib/store/keeper.c, THE
 * CLOCK), which arms what it reads from the wall time of then: the timerfd that reports steps is
 * open while that load runs. Found in review: it was made when the keeper started, after the first
 * load, and a step in between went unseen (the timers that load armed then fired late or early by
 * the step). A test cannot step CLOCK_REALTIME, so this checks the order, on a store that keeps the
 * kernel's clock. A store on a test's clock watches none: a set of CLOCK_REALTIME on the machine
 * must not wake a keeper that a test holds an account of (test_store_loads hung so in CI).
 */
static void the_clock_is_watched_before_the_first_load_arms_anything(void)
{
    fresh();
    int before = timerfds();
    struct chime__backend_ops counting = chime__journal_ops;
    counting.load = load_counting_timerfds;
    chime__store_set_backend(&counting);
    chime_store *s = NULL;
    struct chime_store_config cfg = { .path = dir, .horizon_ns = 60 * SEC };
    CHECK_EQ(chime_store_open(&s, &cfg, recorder_handler, &rec), 0); /* CLOCK_REALTIME */
    chime__store_set_backend(NULL);
    int after = timerfds();
    printf("# timerfds: %d before the open, %d during its first load, %d after it\n", before,
           timerfds_at_first_load, after);
    CHECK(after > before, "the open made no timerfd");
    CHECK_EQ(timerfds_at_first_load, after);
    CHECK_EQ(chime_store_close(s), 0);
    CHECK_EQ(timerfds(), before);
    s = open_fake(60 * SEC);
    CHECK_EQ(timerfds(), before); /* on the test's clock */
    CHECK_EQ(chime_store_close(s), 0);
}

static const struct tap_test tests[] = {
    { "a_step_back_fires_nothing_before_its_due_time", a_step_back_fires_nothing_before_its_due_time },
    { "a_step_forward_fires_what_became_due", a_step_forward_fires_what_became_due },
    { "far_timers_load_when_the_clock_brings_them_within_the_horizon",
      far_timers_load_when_the_clock_brings_them_within_the_horizon },
    { "a_restart_after_the_clock_moved_on_fires_what_is_overdue",
      a_restart_after_the_clock_moved_on_fires_what_is_overdue },
    { "a_waiting_handler_starts_when_the_clock_steps_past_its_due_time",
      a_waiting_handler_starts_when_the_clock_steps_past_its_due_time },
    { "a_firing_is_recorded_the_lead_before_its_due_time_and_not_before",
      a_firing_is_recorded_the_lead_before_its_due_time_and_not_before },
    { "close_does_not_wait_for_a_handler_the_clock_put_off",
      close_does_not_wait_for_a_handler_the_clock_put_off },
    { "a_failed_store_starts_no_handler_even_one_recorded_before",
      a_failed_store_starts_no_handler_even_one_recorded_before },
    { "close_starts_a_due_handler_an_unswept_step_left_armed_an_hour_out",
      close_starts_a_due_handler_an_unswept_step_left_armed_an_hour_out },
    { "a_held_timer_released_after_a_step_back_stays_cancellable",
      a_held_timer_released_after_a_step_back_stays_cancellable },
    { "the_clock_is_watched_before_the_first_load_arms_anything",
      the_clock_is_watched_before_the_first_load_arms_anything },
};

int main(void)
{
    chime__store_rewait_hook = note_rewait; /* before any store's threads read it */
    return store_tests_run(tests, (int)(sizeof tests / sizeof tests[0]), &dir, &rec, fake_wall);
}
