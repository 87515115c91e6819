/* SPDX-License-Identifier: MIT */
/*
 * Concurrency stress of the threaded runtime on the real clock: producer threads schedule, cancel and
 * reschedule random timers while callbacks cancel and schedule others; then stop(NOW) and account for
 * every timer. Each one-shot timer must have ended exactly once (fired, cancelled with 0, or passed to
 * on_unfired), each periodic timer exactly once (cancelled or unfired), and chime_timer_stats must
 * agree with the count the test kept itself.
 *
 * Rounds: with 0 and with 2 workers, stopping after the producers are done (NOW) or while they are
 * still at work (NOW and DRAIN); then two loops that once hung a draining stop (found in review).
 * The two rounds that stop while the producers run schedule relative to the advancing thread's
 * clock (lib/runtime/producer.c, RELATIVE SCHEDULES; chime__timer_relative_test): the first always,
 * the second as machines without a TSC clock do; the others as this machine's clock decides.
 *
 * Randomised: the seed is printed; CHIME_SEED reruns it (thread interleavings differ from run to run,
 * the operation sequence of each thread does not). CHIME_STRESS_MS sets how long each round runs
 * (default 1000). A plain TAP program: see tap.h.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "chime.h"
#include "rng.h"
#include "runtime/runtime.h"
#include "tap.h"

#define MS UINT64_C(1000000)
#define PRODUCERS 3
#define SLOTS_PER_PRODUCER (1u << 19)
#define CALLBACK_SLOTS (1u << 19)

struct slot {
    _Atomic chime_id id;  /* 0 until scheduled */
    _Atomic int fired;    /* callback runs */
    _Atomic int cancelled;
    _Atomic int unfired;
    bool periodic;
    bool used;            /* schedule returned 0 */
};

static struct slot *producer_slots[PRODUCERS];
static _Atomic uint32_t producer_used[PRODUCERS];
static struct slot *callback_slots;
static _Atomic uint32_t callback_next;

static chime_timer *timer;
static _Atomic bool running;
static _Atomic bool stopping; /* stop may have been called while the producers run */
static uint64_t seed;

/* A small hash so callbacks make "random" choices without shared state. */
static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    return x;
}

static void fire(void *arg);

static void cancel_slot(struct slot *s)
{
    chime_id id = atomic_load(&s->id);
    if (!id)
        return;
    int rc = chime_timer_cancel(timer, id);
    CHECK(rc == 0 || rc == -ENOENT || (rc == -ESHUTDOWN && stopping), "cancel: %d", rc);
    if (rc == 0)
        atomic_fetch_add(&s->cancelled, 1);
}

static void fire(void *arg)
{
    struct slot *s = arg;
    int n = atomic_fetch_add(&s->fired, 1);
    uint64_t h = mix((uintptr_t)s ^ (uint64_t)n ^ seed);
    if (h % 8 == 0) {
        /* Schedule another timer from inside a callback. */
        uint32_t i = atomic_fetch_add(&callback_next, 1);
        if (i < CALLBACK_SLOTS) {
            struct slot *c = &callback_slots[i];
            chime_id id;
            int rc = chime_timer_schedule(timer, (h >> 8) % (5 * MS), fire, c, &id);
            CHECK(rc == 0 || rc == -ESHUTDOWN, "schedule from a callback: %d", rc);
            if (rc == 0) {
                c->used = true;
                atomic_store(&c->id, id);
            }
        }
    } else if (h % 8 == 1) {
        /* Cancel some other producer's timer. */
        unsigned p = (unsigned)(h >> 8) % PRODUCERS;
        uint32_t used = atomic_load(&producer_used[p]);
        if (used)
            cancel_slot(&producer_slots[p][(h >> 16) % used]);
    }
}

static void unfired(void *arg)
{
    struct slot *s = arg;
    atomic_fetch_add(&s->unfired, 1);
}

static void *producer(void *p)
{
    unsigned me = (unsigned)(uintptr_t)p;
    struct rng rng = { .state = seed + me };
    struct slot *slots = producer_slots[me];
    uint32_t used = 0;
    while (atomic_load_explicit(&running, memory_order_relaxed)) {
        uint64_t r = rng_next(&rng);
        unsigned op = (unsigned)(r % 100);
        if (op < 50 && used < SLOTS_PER_PRODUCER) {
            struct slot *s = &slots[used];
            uint64_t delay = (r >> 8) % (20 * MS);
            chime_id id;
            int rc;
            if ((r >> 40) % 10 == 0) {
                s->periodic = true;
                rc = chime_timer_schedule_every(timer, delay, 1 * MS + (r >> 48) % (4 * MS), fire, s, &id);
            } else {
                rc = chime_timer_schedule(timer, delay, fire, s, &id);
            }
            CHECK(rc == 0 || (rc == -ESHUTDOWN && stopping), "schedule: %d", rc);
            if (rc)
                continue;
            s->used = true;
            atomic_store(&s->id, id);
            /* release: the callbacks that pick a slot below `used` see it filled in */
            atomic_store_explicit(&producer_used[me], ++used, memory_order_release);
        } else if (op < 75 && used) {
            cancel_slot(&slots[(r >> 8) % used]);
        } else if (op < 95 && used) {
            int rc = chime_timer_reschedule(timer, atomic_load(&slots[(r >> 8) % used].id),
                                            (r >> 32) % (20 * MS));
            CHECK(rc == 0 || rc == -ENOENT || (rc == -ESHUTDOWN && stopping), "reschedule: %d", rc);
        } else {
            /* A generation of 2^31 or more: no record here is reused that often. */
            chime_id forged = r | UINT64_C(1) << 63;
            int rc = chime_timer_cancel(timer, forged);
            CHECK(rc == -ENOENT || (rc == -ESHUTDOWN && stopping), "forged cancel: %d", rc);
        }
    }
    return NULL;
}

static void account(struct slot *slots, uint32_t n, uint64_t *scheduled, uint64_t *fired,
                    uint64_t *runs, uint64_t *cancelled, uint64_t *unfired_n)
{
    for (uint32_t i = 0; i < n; i++) {
        struct slot *s = &slots[i];
        if (!s->used)
            continue;
        int f = atomic_load(&s->fired), c = atomic_load(&s->cancelled), u = atomic_load(&s->unfired);
        (*scheduled)++;
        *runs += (uint64_t)f;
        *cancelled += (uint64_t)c;
        *unfired_n += (uint64_t)u;
        if (s->periodic) {
            CHECK(c + u == 1, "periodic timer %u: cancelled %d unfired %d (runs %d)", i, c, u, f);
        } else {
            CHECK(f + c + u == 1, "timer %u: fired %d cancelled %d unfired %d", i, f, c, u);
            *fired += (uint64_t)f;
        }
    }
}

/* One round: producers for CHIME_STRESS_MS, then stop(how), either after joining them or while they
 * are still running (during). */
static void round_with(unsigned workers, enum chime_stop how, bool during)
{
    const char *ms_env = getenv("CHIME_STRESS_MS");
    uint64_t ms = ms_env ? strtoull(ms_env, NULL, 10) : 1000;
    for (unsigned p = 0; p < PRODUCERS; p++) {
        memset(producer_slots[p], 0, SLOTS_PER_PRODUCER * sizeof(struct slot));
        atomic_store(&producer_used[p], 0);
    }
    memset(callback_slots, 0, CALLBACK_SLOTS * sizeof(struct slot));
    atomic_store(&callback_next, 0);

    struct chime_timer_config c = { .workers = workers };
    CHECK_EQ(chime_timer_new(&timer, &c), 0);
    atomic_store(&stopping, during);
    atomic_store(&running, true);
    pthread_t th[PRODUCERS];
    for (unsigned p = 0; p < PRODUCERS; p++)
        CHECK_EQ(pthread_create(&th[p], NULL, producer, (void *)(uintptr_t)p), 0);
    /* The producers run for `ms`; this thread waits on the clock, it asserts nothing about time. */
    struct timespec span = { .tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000 };
    nanosleep(&span, NULL);
    if (during)
        CHECK_EQ(chime_timer_stop(timer, how, unfired), 0);
    atomic_store(&running, false);
    for (unsigned p = 0; p < PRODUCERS; p++)
        pthread_join(th[p], NULL);
    if (!during)
        CHECK_EQ(chime_timer_stop(timer, how, unfired), 0);

    uint64_t scheduled = 0, fired = 0, runs = 0, cancelled = 0, unfired_n = 0;
    for (unsigned p = 0; p < PRODUCERS; p++)
        account(producer_slots[p], atomic_load(&producer_used[p]), &scheduled, &fired, &runs,
                &cancelled, &unfired_n);
    uint32_t cb = atomic_load(&callback_next);
    account(callback_slots, cb < CALLBACK_SLOTS ? cb : CALLBACK_SLOTS, &scheduled, &fired, &runs,
            &cancelled, &unfired_n);
    const char *err = chime__timer_check(timer); /* the pool's lists and the levels, after stop */
    CHECK(err == NULL, "after stop: %s", err);
    struct chime_stats st;
    chime_timer_stats(timer, &st);
    printf("# workers %u, %s %s: %llu timers, %llu fired, %llu cancelled, %llu unfired, %llu runs\n",
           workers, how == CHIME_STOP_NOW ? "NOW" : "DRAIN", during ? "during" : "after",
           (unsigned long long)scheduled, (unsigned long long)fired, (unsigned long long)cancelled,
           (unsigned long long)unfired_n, (unsigned long long)runs);
    CHECK(scheduled > 1000 && fired > 0 && cancelled > 0, "the round exercised too little");
    CHECK_EQ(st.scheduled, scheduled);
    CHECK_EQ(st.fired, fired);
    CHECK_EQ(st.cancelled, cancelled);
    CHECK_EQ(st.unfired, unfired_n);
    CHECK_EQ(st.runs, runs);
    CHECK_EQ(st.pending, 0);
    chime_timer_free(timer);
}

static void no_workers_stop_now_after_the_producers(void)
{
    round_with(0, CHIME_STOP_NOW, false);
}

static void two_workers_stop_now_after_the_producers(void)
{
    round_with(2, CHIME_STOP_NOW, false);
}

static void no_workers_stop_now_while_the_producers_run(void)
{
    chime__timer_relative_test = 2;
    round_with(0, CHIME_STOP_NOW, true);
    chime__timer_relative_test = 0;
}

static void two_workers_stop_drain_while_the_producers_run(void)
{
    chime__timer_relative_test = 1;
    round_with(2, CHIME_STOP_DRAIN, true);
    chime__timer_relative_test = 0;
}

static volatile unsigned spin_sink;
static unsigned spin_len;

static void spin(void *arg)
{
    (void)arg;
    for (unsigned i = 0; i < spin_len; i++)
        spin_sink++;
}

/* The last worker going idle raced with the advancing thread going to sleep: the stop never returned
 * (meson's timeout would report it). */
static void a_drain_stop_returns_when_the_workers_finish_the_last_callbacks(void)
{
    struct rng rng = { .state = seed };
    for (int it = 0; it < 50; it++) {
        chime_timer *t;
        struct chime_timer_config c = { .workers = 1 };
        CHECK_EQ(chime_timer_new(&t, &c), 0);
        spin_len = (unsigned)rng_below(&rng, 200);
        /* More than a chunk of records: the advancing thread then trims memory in the iteration in
         * which it finds the workers busy, which widens the window the race needs. */
        for (int k = 0; k < 40000; k++)
            CHECK_EQ(chime_timer_schedule(t, 2 * MS, spin, NULL, NULL), 0);
        CHECK_EQ(chime_timer_stop(t, CHIME_STOP_DRAIN, NULL), 0);
        struct chime_stats st;
        chime_timer_stats(t, &st);
        CHECK_EQ(st.fired, 40000);
        chime_timer_free(t);
    }
}

static _Atomic int periodic_started;

static void slow_periodic(void *arg)
{
    (void)arg;
    atomic_store(&periodic_started, 1);
    struct timespec ms = { 0, 1000000 };
    nanosleep(&ms, NULL); /* a long run, so the stop finds it running */
}

static void *drain_stopper(void *p)
{
    CHECK_EQ(chime_timer_stop(p, CHIME_STOP_DRAIN, unfired), 0);
    return NULL;
}

/* Reschedules of a periodic timer that a draining stop was ending: its record was given back while a
 * reschedule still held it, and the stop never returned. */
static void a_drain_stop_returns_while_a_periodic_timer_is_rescheduled(void)
{
    for (int it = 0; it < 20; it++) {
        chime_timer *t;
        struct chime_timer_config c = { .workers = 1 };
        CHECK_EQ(chime_timer_new(&t, &c), 0);
        static struct slot s;
        memset(&s, 0, sizeof(s));
        atomic_store(&periodic_started, 0);
        chime_id id;
        CHECK_EQ(chime_timer_schedule_every(t, 0, 1 * MS, slow_periodic, &s, &id), 0);
        while (!atomic_load(&periodic_started))
            sched_yield();
        pthread_t th;
        CHECK_EQ(pthread_create(&th, NULL, drain_stopper, t), 0);
        int rc;
        while ((rc = chime_timer_reschedule(t, id, 1 * MS)) == 0)
            ;
        CHECK(rc == -ENOENT || rc == -ESHUTDOWN, "reschedule: %d", rc);
        pthread_join(th, NULL);
        CHECK_EQ(atomic_load(&s.unfired), 1);
        chime_timer_free(t);
    }
}

int main(void)
{
    seed = rng_seed("runtime_stress"); /* printed to stderr, which meson's log keeps */
    for (unsigned p = 0; p < PRODUCERS; p++)
        producer_slots[p] = calloc(SLOTS_PER_PRODUCER, sizeof(struct slot));
    callback_slots = calloc(CALLBACK_SLOTS, sizeof(struct slot));
    static const struct tap_test tests[] = {
        { "no workers, stop NOW after the producers", no_workers_stop_now_after_the_producers },
        { "two workers, stop NOW after the producers", two_workers_stop_now_after_the_producers },
        { "no workers, stop NOW while the producers run", no_workers_stop_now_while_the_producers_run },
        { "two workers, stop DRAIN while the producers run", two_workers_stop_drain_while_the_producers_run },
        { "a DRAIN stop returns when the workers finish the last callbacks",
          a_drain_stop_returns_when_the_workers_finish_the_last_callbacks },
        { "a DRAIN stop returns while a periodic timer is rescheduled",
          a_drain_stop_returns_while_a_periodic_timer_is_rescheduled },
    };
    int rc = tap_run(tests, (int)(sizeof(tests) / sizeof(tests[0])));
    for (unsigned p = 0; p < PRODUCERS; p++)
        free(producer_slots[p]);
    free(callback_slots);
    return rc;
}
