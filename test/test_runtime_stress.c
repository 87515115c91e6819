/*
 * Concurrency stress of the threaded runtime on the real clock: producer threads schedule, cancel and
 * reschedule random timers while callbacks cancel and schedule others; then stop(NOW) and account for
 * every timer. Each one-shot timer must have ended exactly once (fired, cancelled with 0, or passed to
 * on_unfired), each periodic timer exactly once (cancelled or unfired), and chime_timer_stats must
 * agree with the count the test kept itself.
 *
 * Randomised: the seed is printed; CHIME_SEED reruns it (thread interleavings differ from run to run,
 * the operation sequence of each thread does not). CHIME_STRESS_MS sets how long each round runs
 * (default 2000). Runs with 0 and with 2 workers. A plain TAP program: see tap.h.
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
    CHECK(rc == 0 || rc == -ENOENT || rc == -ESHUTDOWN, "cancel: %d", rc);
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
            CHECK_EQ(rc, 0);
            s->used = true;
            atomic_store(&s->id, id);
            /* release: the callbacks that pick a slot below `used` see it filled in */
            atomic_store_explicit(&producer_used[me], ++used, memory_order_release);
        } else if (op < 75 && used) {
            cancel_slot(&slots[(r >> 8) % used]);
        } else if (op < 95 && used) {
            int rc = chime_timer_reschedule(timer, atomic_load(&slots[(r >> 8) % used].id),
                                            (r >> 32) % (20 * MS));
            CHECK(rc == 0 || rc == -ENOENT, "reschedule: %d", rc);
        } else {
            /* A generation of 2^31 or more: no record here is reused that often. */
            chime_id forged = r | UINT64_C(1) << 63;
            CHECK_EQ(chime_timer_cancel(timer, forged), -ENOENT);
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

static void round_with(unsigned workers)
{
    const char *ms_env = getenv("CHIME_STRESS_MS");
    uint64_t ms = ms_env ? strtoull(ms_env, NULL, 10) : 2000;
    for (unsigned p = 0; p < PRODUCERS; p++) {
        memset(producer_slots[p], 0, SLOTS_PER_PRODUCER * sizeof(struct slot));
        atomic_store(&producer_used[p], 0);
    }
    memset(callback_slots, 0, CALLBACK_SLOTS * sizeof(struct slot));
    atomic_store(&callback_next, 0);

    struct chime_timer_config c = { .workers = workers };
    CHECK_EQ(chime_timer_new(&timer, &c), 0);
    atomic_store(&running, true);
    pthread_t th[PRODUCERS];
    for (unsigned p = 0; p < PRODUCERS; p++)
        CHECK_EQ(pthread_create(&th[p], NULL, producer, (void *)(uintptr_t)p), 0);
    /* The producers run for `ms`; this thread waits on the clock, it asserts nothing about time. */
    struct timespec span = { .tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000 };
    nanosleep(&span, NULL);
    atomic_store(&running, false);
    for (unsigned p = 0; p < PRODUCERS; p++)
        pthread_join(th[p], NULL);
    CHECK_EQ(chime_timer_stop(timer, CHIME_STOP_NOW, unfired), 0);

    uint64_t scheduled = 0, fired = 0, runs = 0, cancelled = 0, unfired_n = 0;
    for (unsigned p = 0; p < PRODUCERS; p++)
        account(producer_slots[p], atomic_load(&producer_used[p]), &scheduled, &fired, &runs,
                &cancelled, &unfired_n);
    uint32_t cb = atomic_load(&callback_next);
    account(callback_slots, cb < CALLBACK_SLOTS ? cb : CALLBACK_SLOTS, &scheduled, &fired, &runs,
            &cancelled, &unfired_n);
    struct chime_stats st;
    chime_timer_stats(timer, &st);
    printf("# workers %u: %llu timers, %llu fired, %llu cancelled, %llu unfired, %llu runs\n", workers,
           (unsigned long long)scheduled, (unsigned long long)fired, (unsigned long long)cancelled,
           (unsigned long long)unfired_n, (unsigned long long)runs);
    CHECK(scheduled > 1000 && fired > 0 && cancelled > 0 && unfired_n > 0,
          "the round exercised too little to mean anything");
    CHECK_EQ(st.scheduled, scheduled);
    CHECK_EQ(st.fired, fired);
    CHECK_EQ(st.cancelled, cancelled);
    CHECK_EQ(st.unfired, unfired_n);
    CHECK_EQ(st.runs, runs);
    CHECK_EQ(st.pending, 0);
    CHECK_EQ(st.scheduled, st.fired + st.cancelled + st.unfired);
    chime_timer_free(timer);
}

static void producers_and_callbacks_race_and_every_timer_ends_once(void)
{
    round_with(0);
}

static void the_same_with_two_workers(void)
{
    round_with(2);
}

int main(void)
{
    seed = rng_seed("runtime_stress"); /* printed to stderr, which meson's log keeps */
    for (unsigned p = 0; p < PRODUCERS; p++)
        producer_slots[p] = calloc(SLOTS_PER_PRODUCER, sizeof(struct slot));
    callback_slots = calloc(CALLBACK_SLOTS, sizeof(struct slot));
    static const struct tap_test tests[] = {
        { "producers and callbacks race and every timer ends once",
          producers_and_callbacks_race_and_every_timer_ends_once },
        { "the same with two workers", the_same_with_two_workers },
    };
    int rc = tap_run(tests, 2);
    for (unsigned p = 0; p < PRODUCERS; p++)
        free(producer_slots[p]);
    free(callback_slots);
    return rc;
}
