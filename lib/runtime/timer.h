/*
 * Internal to chime: the threaded runtime's state, shared by runtime.c (the advancing thread, stop,
 * stats) and producer.c (schedule, cancel, reschedule). runtime.c's opening comment explains the
 * protocol: the state word, who wins each race, and the sleep handshake.
 */
#ifndef CHIME_TIMER_H
#define CHIME_TIMER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "chime.h"
#include "runtime/mpsc.h"
#include "runtime/records.h"
#include "runtime/runtime.h"
#include "runtime/workers.h"

/* The state word's flags (bits 0-7 and 16; the shard is bits 8-15, the generation bits 32-63). They
 * keep short names, unlike the rest of what library files share (chime__*): they are the vocabulary
 * of the protocol in runtime.c and producer.c, and nothing outside those two files includes this. */
#define LIFE_MASK 3u
#define LIFE_FREE 0u
#define LIFE_PENDING 1u
#define LIFE_CANCELLED 2u
#define LIFE_DONE 3u
#define ST_Q 4u
#define ST_R 8u
#define ST_RUN 16u
#define ST_KNOWN 32u
#define ST_W 64u
#define ST_E 128u
#define ST_P (1u << 16)
#define GEN_OF(s) ((uint32_t)((s) >> 32))

enum { MODE_RUNNING = 0, MODE_STOPPED = 3 }; /* and CHIME_STOP_DRAIN, CHIME_STOP_NOW while stopping */

struct chime_timer {
    struct chime__records recs;   /* shards on their own lines; see records.h */
    struct chime__mpsc queue;

    /* The sleep handshake (see the top of runtime.c). */
    _Alignas(64) _Atomic uint64_t sleep_until; /* 0: awake; else when it wakes (UINT64_MAX: never) */
    _Atomic uint32_t wake_seq;                 /* the futex word producers bump to wake it */
    _Atomic int mode;                          /* MODE_RUNNING, a chime_stop, or MODE_STOPPED */
    _Atomic uint32_t sync_req;                 /* chime__timer_sync: requests... */
    _Atomic uint32_t sync_done;                /* ...and the last one served (a futex word) */
    _Atomic uint32_t idle_seq;                 /* bumped by a worker that found the pool idle */

    /* Read-only after creation. */
    uint64_t tick_ns;
    size_t max_pending;
    chime__clock_fn *clock;
    void *clock_arg;
    bool real_clock;

    /* The max_pending count; touched only when max_pending is set. */
    _Alignas(64) _Atomic size_t limited;

    /* Statistics, written by the advancing thread (scheduled, cancelled, unfired) and by whichever
     * thread runs a callback (fired, runs, lateness); never by a producer, so that the producer's path
     * has no counter to bump (a locked add cost 13 % of schedule_at's throughput). A timer counts as
     * scheduled when the advancing thread first takes it in, and as cancelled when it gives it back. */
    _Alignas(64) _Atomic uint64_t scheduled, cancelled, fired, runs, unfired, late_max;
    _Atomic uint64_t late_hist[CHIME_LATENESS_BUCKETS];
    _Atomic size_t mem_records, mem_wheel; /* published by the advancing thread for chime__timer_memory */

    /* The advancing thread's own. */
    _Alignas(64) chime_wheel *wheel;
    pthread_t thread;
    struct chime__rec_batch give[CHIME__SHARDS];
    size_t live;           /* records seen and not given back */
    size_t freed_since_trim;
    bool closed;           /* stop has begun: the pool is closed */
    struct chime__item *batch; /* callbacks gathered for the workers during one bounded advance */
    size_t batch_n, batch_cap;
    bool use_workers;
    struct chime__workers workers;

    pthread_mutex_t stop_lock;
    chime_fn *on_unfired;  /* set by stop before it publishes the mode */
};


/* The slow half of chime__timer_wake_before: swap sleep_until (seen as s) to 0 and wake the thread. */
void chime__timer_wake(chime_timer *t, uint64_t when_ns, uint64_t s);

/* Wake the advancing thread if it sleeps until after when_ns (0: if it sleeps at all). Any thread.
 * Inline: on every schedule the answer is almost always "no", one load and a compare. */
static inline void chime__timer_wake_before(chime_timer *t, uint64_t when_ns)
{
    /* seq_cst: the waker's load in the sleep handshake; it follows the waker's seq_cst push, mode or
     * sync_req store, and pairs with the store of sleep_until in sleep_until_due (runtime.c). */
    uint64_t s = atomic_load_explicit(&t->sleep_until, memory_order_seq_cst);
    if (s != 0 && when_ns < s)
        chime__timer_wake(t, when_ns, s);
}

/* The runtime's clock, in nanoseconds (CLOCK_MONOTONIC unless a test injected one). */
static inline uint64_t chime__timer_now(const chime_timer *t)
{
    return t->clock(t->clock_arg);
}

/* Push a record whose Q bit this thread has just set (a cancel, the end of a periodic run) for the
 * advancing thread to give back. A stopping runtime waits for such records, so wake it then; a
 * running one takes them in at its next iteration. */
static inline void chime__timer_requeue(chime_timer *t, struct chime__rec *rec)
{
    chime__mpsc_push(&t->queue, &rec->q);
    /* seq_cst: after the push, the waker's load in the sleep handshake. */
    if (atomic_load_explicit(&t->mode, memory_order_seq_cst) != MODE_RUNNING)
        chime__timer_wake_before(t, 0);
}

/* A timer ended (fired, cancelled or unfired): give its max_pending place back. */
static inline void chime__timer_unlimit(chime_timer *t)
{
    if (t->max_pending) /* relaxed: a count; the schedule that reads it needs no data from us */
        atomic_fetch_sub_explicit(&t->limited, 1, memory_order_relaxed);
}

#endif /* CHIME_TIMER_H */
