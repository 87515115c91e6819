/* SPDX-License-Identifier: MIT */
/*
 * Relative schedules (lib/runtime/producer.c, RELATIVE SCHEDULES): chime_timer_schedule queues its
 * delay, and the advancing thread gives the timer its deadline when it takes the record in, from a
 * clock read after the pop. chime__timer_relative_test makes every runtime do so: always (2), or as
 * a machine without a TSC clock does (1: only while the thread is ready, else from the caller's
 * clock). On the injected clock (deterministic: the test moves the clock and chime__timer_sync
 * waits for the thread), and on the real clock in the last test, where threads schedule at once and
 * every callback checks that it did not start before its call's clock plus its delay.
 *
 * The last test is randomised: the seed is printed; CHIME_SEED reruns it (the delays; thread
 * interleavings differ from run to run). A plain TAP program: see tap.h.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "alloc.h"
#include "chime.h"
#include "rng.h"
#include "runtime/runtime.h"
#include "runtime/timer.h"
#include "runtime_log.h"
#include "runtime_util.h"
#include "tap.h"

static void a_delay_counts_from_the_clock_its_thread_reads_after_taking_it_in(void)
{
    chime_timer *t = start(NULL, 100 * MS);
    log_reset();
    CHECK_EQ(chime_timer_schedule(t, 5 * MS, log_fire, TAG(1), NULL), 0);
    chime__timer_sync(t); /* taken in at 100 ms: due at 105 */
    expect_next_fires_at(t, 105 * MS, 0);
    struct chime_stats st;
    chime_timer_stats(t, &st);
    CHECK_EQ(st.late_max_ns, 0); /* counted from the tick it fired at, not from the delay's value */
    expect_stats(t, 1, 1, 0, 0);
    chime_timer_free(t);
}

/* A callback on the advancing thread (no workers) moves the clock, as a long callback would, then
 * schedules: the thread's own reading of the clock before its callbacks is older than that call. */
static chime_timer *callback_timer;
static _Atomic int callback_err = 1;

static void move_the_clock_then_schedule(void *arg)
{
    (void)arg;
    atomic_store(&fake_now, 50 * MS);
    int err = chime_timer_schedule(callback_timer, 5 * MS, log_fire, TAG(2), NULL);
    atomic_store(&callback_err, err);
}

static void a_schedule_from_a_callback_counts_from_after_the_call_not_from_the_iteration(void)
{
    callback_timer = start(NULL, 10 * MS);
    log_reset();
    CHECK_EQ(chime_timer_schedule_at(callback_timer, 10 * MS, move_the_clock_then_schedule, NULL,
                                     NULL),
             0);
    chime__timer_sync(callback_timer); /* fired at 10 ms; the clock said 50 ms when it scheduled */
    CHECK_EQ(atomic_load(&callback_err), 0);
    chime__timer_sync(callback_timer);
    CHECK_EQ(atomic_load(&log_n), 0); /* a clock read before the pop would have made it due at 15 */
    expect_next_fires_at(callback_timer, 55 * MS, 0);
    CHECK_EQ(log_tag[0], 2);
    chime_timer_free(callback_timer);
}

/* The advancing thread's next clock read (armed by the test) pushes a relative schedule and moves
 * the clock on before it returns the old time: the drain that pops that record must read the clock
 * again, after the pop, and not use a reading taken before it (nor the one that pushed it). */
static chime_timer *arm_timer;
static pthread_t test_thread;
static _Atomic int clock_armed;

static uint64_t arming_clock(void *arg)
{
    (void)arg;
    uint64_t now = atomic_load(&fake_now);
    if (!pthread_equal(pthread_self(), test_thread) && atomic_exchange(&clock_armed, 0)) {
        atomic_store(&fake_now, 50 * MS);
        int err = chime_timer_schedule(arm_timer, 5 * MS, log_fire, TAG(4), NULL);
        atomic_store(&callback_err, err);
    }
    return now;
}

static void a_record_pushed_while_its_thread_read_the_clock_gets_a_later_reading(void)
{
    test_thread = pthread_self();
    atomic_store(&fake_now, 10 * MS);
    atomic_store(&callback_err, 1);
    CHECK_EQ(chime__timer_new_clocked(&arm_timer, NULL, arming_clock, NULL), 0);
    log_reset();
    chime__timer_sync(arm_timer);
    atomic_store(&clock_armed, 1);
    chime__timer_sync(arm_timer); /* the thread's read: it pushes, the clock says 50 ms */
    chime__timer_sync(arm_timer);
    chime__timer_sync(arm_timer);
    CHECK_EQ(atomic_load(&clock_armed), 0);
    CHECK_EQ(atomic_load(&callback_err), 0);
    CHECK_EQ(atomic_load(&log_n), 0); /* due at 55 ms; a reading from before the pop said 10 */
    expect_next_fires_at(arm_timer, 55 * MS, 0);
    CHECK_EQ(log_tag[0], 4);
    chime_timer_free(arm_timer);
}

/* The deadline the thread gave a delay stays when placing it fails for want of memory: the retry
 * does not count the delay again from a later clock (found in review: it did). The thread's first
 * clock read after the test arms it (the one that gives the delay its deadline) returns 0 and moves
 * the clock to 3 ms, so the retry, in the thread's next iteration, reads 3 ms. */
static _Atomic int step_armed;

static uint64_t stepping_clock(void *arg)
{
    (void)arg;
    uint64_t now = atomic_load(&fake_now);
    if (!pthread_equal(pthread_self(), test_thread) && atomic_exchange(&step_armed, 0))
        atomic_store(&fake_now, 3 * MS);
    return now;
}

static void a_delay_whose_placing_runs_out_of_memory_keeps_the_deadline_it_was_given(void)
{
    test_thread = pthread_self();
    atomic_store(&fake_now, 0);
    chime_timer *t = NULL;
    CHECK_EQ(chime__timer_new_clocked(&t, NULL, stepping_clock, NULL), 0);
    log_reset();
    chime__timer_sync(t);
    while (!atomic_load(&t->sleeper.sleep_until)) /* asleep: no clock read until woken */
        sched_yield();
    atomic_store(&step_armed, 1);
    chime__alloc_fail_after(0); /* the slot array this timer needs (test_runtime.c) */
    CHECK_EQ(chime_timer_schedule(t, 5 * MS, log_fire, TAG(5), NULL), 0);
    chime__timer_sync(t); /* taken in at 0: due at 5 ms; placing failed, and the retry read 3 ms */
    chime__alloc_fail_after(-1);
    CHECK_EQ(atomic_load(&step_armed), 0);
    set_time(t, 5 * MS - 1);
    CHECK_EQ(atomic_load(&log_n), 0);
    set_time(t, 5 * MS);
    CHECK_EQ(atomic_load(&log_n), 1); /* counted again from 3 ms, it would be due at 8 */
    expect_stats(t, 1, 1, 0, 0);
    chime_timer_free(t);
}

/* As without a TSC (mode 1): a callback on the advancing thread (no workers) schedules while the
 * thread is running callbacks, so it is not ready and the caller's clock gives the deadline; then
 * the callback runs on (the clock moves to 80 ms). Queued, the delay would have counted from after
 * the callback (85 ms). It is the last of a storm due at once, fired in the thread's second
 * iteration, which follows the first without a sleep (a sleep alone says not ready). */
static chime_timer *busy_timer;

static void schedule_then_run_on(void *arg)
{
    (void)arg;
    atomic_store(&fake_now, 50 * MS);
    int err = chime_timer_schedule(busy_timer, 5 * MS, log_fire, TAG(6), NULL);
    atomic_store(&callback_err, err);
    atomic_store(&fake_now, 80 * MS);
}

static void a_schedule_from_a_callback_on_the_thread_counts_from_the_call(void)
{
    chime__timer_relative_test = 1;
    busy_timer = start(NULL, 10 * MS);
    chime__timer_relative_test = 2;
    log_reset();
    atomic_store(&callback_err, 1);
    for (int i = 0; i < 1100; i++) /* more than one bounded advance fires (thread.c, FIRE_BATCH) */
        CHECK_EQ(chime_timer_schedule_at(busy_timer, 20 * MS, noop, NULL, NULL), 0);
    CHECK_EQ(chime_timer_schedule_at(busy_timer, 20 * MS, schedule_then_run_on, NULL, NULL), 0);
    chime__timer_sync(busy_timer);
    set_time(busy_timer, 20 * MS);
    chime__timer_sync(busy_timer); /* the clock says 80 ms: due at 55, it has fired */
    CHECK_EQ(atomic_load(&callback_err), 0);
    CHECK_EQ(atomic_load(&log_n), 1);
    CHECK_EQ(log_tag[0], 6);
    chime_timer_free(busy_timer);
}

/* As without a TSC (mode 1), a thread asleep is not ready: the caller's clock gives the deadline
 * at once, and the clock can move before the thread wakes. */
static void a_schedule_while_the_thread_sleeps_counts_from_the_call(void)
{
    chime__timer_relative_test = 1;
    chime_timer *t = start(NULL, 100 * MS);
    chime__timer_relative_test = 2;
    log_reset();
    chime__timer_sync(t);
    while (!atomic_load(&t->sleeper.sleep_until)) /* until it sleeps (sync returns just before) */
        sched_yield();
    CHECK_EQ(chime_timer_schedule(t, 5 * MS, log_fire, TAG(7), NULL), 0);
    set_time(t, 105 * MS); /* moved before the thread took it in, maybe: due at 105 all the same */
    CHECK_EQ(atomic_load(&log_n), 1);
    chime_timer_free(t);
}

static void a_reschedule_replaces_the_delay_by_a_deadline(void)
{
    chime_timer *t = start(NULL, 100 * MS);
    log_reset();
    chime_id id;
    CHECK_EQ(chime_timer_schedule(t, 5 * MS, log_fire, TAG(3), &id), 0);
    chime__timer_sync(t);
    CHECK_EQ(chime_timer_reschedule(t, id, 20 * MS), 0); /* at 100 ms: due at 120, not 100 + 120 */
    set_time(t, 105 * MS);
    CHECK_EQ(atomic_load(&log_n), 0);
    expect_next_fires_at(t, 120 * MS, 0);
    set_time(t, 300 * MS);
    CHECK_EQ(atomic_load(&log_n), 1);
    expect_stats(t, 1, 1, 0, 0);
    chime_timer_free(t);
}

static void a_delay_past_the_clocks_range_is_still_erange(void)
{
    chime_timer *t = start(NULL, 100 * MS);
    CHECK_EQ(chime_timer_schedule(t, UINT64_MAX - 50 * MS, noop, NULL, NULL), -ERANGE);
    CHECK_EQ(chime_timer_schedule(t, UINT64_MAX - 100 * MS, noop, NULL, NULL), 0); /* just fits */
    chime__timer_sync(t);
    expect_stats(t, 1, 0, 0, 0);
    chime_timer_free(t);
}

/* As without a TSC (mode 1), no workers: the thread is ready (in its idle work after an iteration,
 * reading the clock, which the test holds) while a producer queues a timer due at once, whose
 * callback runs 50 ms, and then 1500 delays of 5 ms, more than one drain takes (DRAIN_BATCH): each
 * finds the thread ready. Before it runs that callback the thread takes in what was queued (up to
 * a second drain's worth: wake.h, `ready`), so the delays count from 10 ms and have fired by 60 ms
 * (found in review: they waited behind the callback, due at 65 ms). */
static _Atomic int ready_block_armed, ready_blocked, ready_release;
static chime_timer *ready_timer;
static _Atomic unsigned ready_fired;

static uint64_t ready_blocking_clock(void *arg)
{
    (void)arg;
    if (!pthread_equal(pthread_self(), test_thread) && atomic_load(&ready_block_armed) &&
        atomic_load(&ready_timer->sleeper.ready) == 1) {
        atomic_store(&ready_block_armed, 0);
        atomic_store(&ready_blocked, 1);
        while (!atomic_load(&ready_release))
            sched_yield();
    }
    return atomic_load(&fake_now);
}

static void slow_callback(void *arg)
{
    (void)arg;
    atomic_store(&fake_now, 60 * MS); /* 50 ms of work */
}

static void count_fired(void *arg)
{
    (void)arg;
    atomic_fetch_add(&ready_fired, 1);
}

static void delays_queued_while_the_thread_is_ready_wait_for_no_callback(void)
{
    enum { DELAYS = 1500 };
    test_thread = pthread_self();
    atomic_store(&fake_now, 10 * MS);
    chime__timer_relative_test = 1;
    CHECK_EQ(chime__timer_new_clocked(&ready_timer, NULL, ready_blocking_clock, NULL), 0);
    chime__timer_relative_test = 2;
    chime_timer *t = ready_timer;
    chime__timer_sync(t);
    atomic_store(&ready_block_armed, 1);
    /* One timer fired and given back: the thread then reads the clock in its idle work, ready. */
    CHECK_EQ(chime_timer_schedule_at(t, 10 * MS, noop, NULL, NULL), 0);
    while (!atomic_load(&ready_blocked))
        sched_yield();
    CHECK_EQ(atomic_load(&t->sleeper.ready), 1);
    CHECK_EQ(chime_timer_schedule_at(t, 10 * MS, slow_callback, NULL, NULL), 0);
    for (int i = 0; i < DELAYS; i++)
        CHECK_EQ(chime_timer_schedule(t, 5 * MS, count_fired, NULL, NULL), 0);
    atomic_store(&ready_release, 1);
    chime__timer_sync(t);
    chime__timer_sync(t); /* the clock says 60 ms: every delay, due at 15 ms, has fired */
    CHECK(atomic_load(&ready_fired) == DELAYS,
          "%u of %d delays queued while the thread was ready fired by 60 ms (due at 15 ms)",
          atomic_load(&ready_fired), DELAYS);
    chime_timer_free(t);
}

/* ---- the real clock ---- */

#define THREADS 3
#define PER_THREAD 20000
#define SLOTS (THREADS * PER_THREAD)

struct real_slot {
    uint64_t called;       /* CLOCK_MONOTONIC before the call */
    uint64_t delay;
    _Atomic uint64_t at;   /* when the callback started (0: not yet) */
};

static struct real_slot real_slots[SLOTS];
static uint64_t real_seed;
static chime_timer *real_timer;
static _Atomic uint64_t real_fired;

static void real_fire(void *arg)
{
    struct real_slot *s = arg;
    atomic_store(&s->at, monotonic());
    atomic_fetch_add(&real_fired, 1);
}

static void *real_producer(void *arg)
{
    unsigned p = (unsigned)(uintptr_t)arg;
    struct rng rng = { real_seed ^ (p + 1) * UINT64_C(0x9e3779b97f4a7c15) };
    for (unsigned i = 0; i < PER_THREAD; i++) {
        struct real_slot *s = &real_slots[p * PER_THREAD + i];
        s->delay = rng_below(&rng, 3 * MS); /* 0 to 3 ms: many fire while others are queued */
        s->called = monotonic();
        if (chime_timer_schedule(real_timer, s->delay, real_fire, s, NULL) != 0)
            s->called = UINT64_MAX; /* counted below as a failure */
    }
    return NULL;
}

static void on_the_real_clock_relative_schedules_from_several_threads_never_fire_early(void)
{
    real_seed = rng_seed("relative");
    atomic_store(&real_fired, 0);
    for (size_t i = 0; i < SLOTS; i++)
        atomic_store(&real_slots[i].at, 0);
    /* A 1 us tick, so that a deadline a few microseconds early would show. */
    struct chime_timer_config c = { .workers = 1, .tick_ns = 1000 };
    CHECK_EQ(chime_timer_new(&real_timer, &c), 0);
    pthread_t th[THREADS];
    for (unsigned p = 0; p < THREADS; p++)
        CHECK_EQ(pthread_create(&th[p], NULL, real_producer, (void *)(uintptr_t)p), 0);
    for (unsigned p = 0; p < THREADS; p++)
        pthread_join(th[p], NULL);
    /* They fire with nothing else to wake the thread (a push that finds it asleep wakes it), within
     * a bound generous enough for any machine; then stop has nothing left to fire. */
    uint64_t give_up = monotonic() + 60 * UINT64_C(1000000000);
    while (atomic_load(&real_fired) < SLOTS && monotonic() < give_up)
        sched_yield();
    CHECK_EQ(atomic_load(&real_fired), SLOTS);
    CHECK_EQ(chime_timer_stop(real_timer, CHIME_STOP_DRAIN, NULL), 0);
    size_t early = 0, failed = 0;
    for (size_t i = 0; i < SLOTS; i++) {
        const struct real_slot *s = &real_slots[i];
        if (s->called == UINT64_MAX)
            failed++;
        else if (atomic_load(&s->at) < s->called + s->delay)
            early++;
    }
    CHECK_EQ(failed, 0);
    CHECK(early == 0, "%zu of %d timers fired before their call's clock plus their delay (seed "
          "%llu)", early, SLOTS, (unsigned long long)real_seed);
    chime_timer_free(real_timer);
}

int main(void)
{
    chime__timer_relative_test = 2; /* before any runtime is created; some tests create with 1 */
    static const struct tap_test tests[] = {
        { "a delay counts from the clock its thread reads after taking it in",
          a_delay_counts_from_the_clock_its_thread_reads_after_taking_it_in },
        { "a schedule from a callback counts from after the call, not from the iteration",
          a_schedule_from_a_callback_counts_from_after_the_call_not_from_the_iteration },
        { "a record pushed while its thread read the clock gets a later reading",
          a_record_pushed_while_its_thread_read_the_clock_gets_a_later_reading },
        { "a delay whose placing runs out of memory keeps the deadline it was given",
          a_delay_whose_placing_runs_out_of_memory_keeps_the_deadline_it_was_given },
        { "a schedule from a callback on the thread counts from the call",
          a_schedule_from_a_callback_on_the_thread_counts_from_the_call },
        { "a schedule while the thread sleeps counts from the call",
          a_schedule_while_the_thread_sleeps_counts_from_the_call },
        { "a reschedule replaces the delay by a deadline",
          a_reschedule_replaces_the_delay_by_a_deadline },
        { "a delay past the clock's range is still ERANGE",
          a_delay_past_the_clocks_range_is_still_erange },
        { "delays queued while the thread is ready wait for no callback",
          delays_queued_while_the_thread_is_ready_wait_for_no_callback },
        { "on the real clock, relative schedules from several threads never fire early",
          on_the_real_clock_relative_schedules_from_several_threads_never_fire_early },
    };
    return tap_run(tests, (int)(sizeof(tests) / sizeof(tests[0])));
}
