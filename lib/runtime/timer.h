/* SPDX-License-Identifier: MIT */
/*
 * Internal to chime: the threaded runtime's state, shared by its files.
 *
 *     producer.c   schedule, cancel, reschedule: any thread, lock-free
 *     firing.c     the advancing thread's handling of records: applying what producers queued,
 *                  firing, handing callbacks to workers
 *     thread.c     the advancing thread's loop: sleeping, idle work (memory back), stop's sweep
 *     runtime.c    create, stop, free, stats, now, and the tests' hooks
 * with the primitives they use: state.h (the protocol: the state word and its transitions),
 * records.h (the records and their ids), mpsc.h (the queue), wake.h (the sleep handshake),
 * clock.h, stats.h and workers.h. docs/design.md explains the whole.
 *
 * WHO OWNS WHAT. The advancing thread alone touches the levels, a record's deadline and pos, the
 * give-back batches and the pool's counts. Producers touch a record's state word (by the transitions
 * of state.h) and, for a record they have just taken or whose W bit they hold, its other fields; they
 * hand records over through the queue.
 */
#ifndef CHIME_RUNTIME_TIMER_H
#define CHIME_RUNTIME_TIMER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "bits.h"
#include "chime.h"
#include "runtime/clock.h"
#include "runtime/mpsc.h"
#include "runtime/records.h"
#include "runtime/state.h"
#include "runtime/stats.h"
#include "runtime/wake.h"
#include "runtime/workers.h"
#include "wheel/levels.h"

enum { CHIME__MODE_RUNNING = 0, CHIME__MODE_STOPPED = 3 }; /* and the chime_stop modes while stopping */

/* Records a drain pops before it applies them (firing.c). */
#define CHIME__POP_BATCH 64

struct chime_timer {
    struct chime__records recs;   /* its shared parts on their own lines */
    struct chime__mpsc queue;
    struct chime__sleeper sleeper;

    /* Requests the sleeper must not miss (each joins the handshake of wake.h). */
    _Alignas(64) _Atomic int mode;  /* CHIME__MODE_RUNNING, a chime_stop, or CHIME__MODE_STOPPED */
    _Atomic uint32_t sync_req;      /* chime__timer_sync: requests... */
    _Atomic uint32_t sync_done;     /* ...and the last one served (a futex word) */
    _Atomic uint32_t idle_seq;      /* bumped by a worker that found the pool idle */

    /* Read-only after creation. */
    uint64_t tick_ns, tick_inv;     /* the tick, and chime__div_inv of it */
    size_t max_pending;
    chime__clock_fn *clock;         /* CLOCK_MONOTONIC, or a test's */
    void *clock_arg;
    bool real_clock;
    uint8_t relative;               /* schedule queues delays: 0 never, 1 while the thread is ready,
                                       2 always (a test's; producer.c, RELATIVE SCHEDULES) */

    /* The max_pending count; touched only when max_pending is set. */
    _Alignas(64) _Atomic size_t limited;

    struct chime__stats stats;
    _Atomic size_t mem_records;     /* published by the advancing thread for chime__timer_memory */

    /* The advancing thread's own. */
    _Alignas(64) struct chime__levels L;
    uint32_t held[CHIME__POP_BATCH]; /* popped and not applied: one whose placing ran out of memory,
                                        then those popped after it (firing.c, drain) */
    size_t nheld;
    pthread_t thread;
    bool closed;                    /* stop has begun: the pool is closed */
    bool idle_work;                 /* memory may be given back (records, slot arrays) */
    size_t trim_peak;               /* the most timers pending since the slot arrays were trimmed */
    uint64_t idle_step_ns;          /* the longest recent idle step, decaying (thread.c) */
    struct chime__item *batch;      /* callbacks gathered for the workers during one bounded advance */
    size_t batch_n, batch_cap;
    bool use_workers;
    struct chime__workers workers;

    pthread_mutex_t stop_lock;
    chime_fn *on_unfired;           /* set by stop before it publishes the mode */
};

/* The longest delay a producer queues as a delay (producer.c): the clock plus it never wraps. */
#define CHIME__DELAY_MAX (UINT64_C(1) << 62)

/* The runtime's clock: CLOCK_MONOTONIC (never ahead of it) unless a test injected one. */
static inline uint64_t chime__timer_now(const chime_timer *t)
{
    return t->clock(t->clock_arg);
}

/* An upper bound of the clock, for deadlines a producer computes (clock.h). */
static inline uint64_t chime__timer_upper(const chime_timer *t)
{
    return t->real_clock ? chime__clock_upper() : t->clock(t->clock_arg);
}

/* A deadline in nanoseconds as a tick, rounded up: a timer never fires before it. */
static inline uint64_t chime__timer_ticks(const chime_timer *t, uint64_t ns)
{
    return chime__div_up(ns, t->tick_ns, t->tick_inv);
}

/* Wake the advancing thread if it sleeps until after when_ns. Any thread, after its news. */
static inline void chime__timer_wake_before(chime_timer *t, uint64_t when_ns)
{
    chime__sleeper_wake_before(&t->sleeper, when_ns);
}

/*
 * Push record idx, which this thread has just taken (a schedule) or rescheduled and whose Q bit it
 * set, and wake the advancing thread if it sleeps until after when_ns (0: if it sleeps at all) or
 * after the record's deadline as it stands once pushed, whichever is earlier. The record's deadline
 * too, not only the caller's: a reschedule that found Q set (ours) wrote a deadline of its own and
 * woke the thread without pushing, maybe before this push, so that the thread found nothing queued
 * and went back to sleep; that deadline reaches the thread only through this push.
 */
static inline void chime__timer_push(chime_timer *t, uint32_t idx, uint64_t when_ns)
{
    struct chime__rec *rec = chime__records_at(&t->recs, idx);
    chime__mpsc_push(&t->queue, idx);
    /* seq_cst: after the push in the single total order, so after the seq_cst reschedule_end of any
     * reschedule whose wake-up the thread took before its last look at the queue (which the push
     * follows: wake.h); as an acquire it reads that reschedule_end's release, so deadline_ns below is
     * at least that reschedule's. A record given back meanwhile (cancelled and applied) gives some
     * other deadline, or 0: a wake-up for nothing at worst. */
    (void)atomic_load_explicit(&rec->state, memory_order_seq_cst);
    uint64_t due = atomic_load_explicit(&rec->deadline_ns, memory_order_relaxed); /* see above */
    chime__timer_wake_before(t, due < when_ns ? due : when_ns);
}

/* Push record idx, whose Q bit this thread has just set, for the advancing thread to take in. A
 * stopping runtime waits for records, so wake it then; a running one takes them in at its next
 * iteration (a cancel need not wake it: the record's memory can wait until then). */
static inline void chime__timer_requeue(chime_timer *t, uint32_t idx)
{
    chime__mpsc_push(&t->queue, idx);
    /* seq_cst: after the push, the waker's load in the sleep handshake (wake.h). */
    if (atomic_load_explicit(&t->mode, memory_order_seq_cst) != CHIME__MODE_RUNNING)
        chime__timer_wake_before(t, 0);
}

/* A timer ended (fired, cancelled or unfired): give its max_pending place back. */
static inline void chime__timer_unlimit(chime_timer *t)
{
    if (t->max_pending) /* relaxed: a count; the schedule that reads it needs no data from us */
        atomic_fetch_sub_explicit(&t->limited, 1, memory_order_relaxed);
}

/* ---- firing.c: the advancing thread's handling of records ---- */

/* The levels' fire step (chime__fire_fn): decide, by the state word, whether record idx fires. */
int chime__timer_fire(void *ctx, uint32_t idx);
/* Apply up to limit queued records. Return: true if it stopped at the limit (more may be queued). */
bool chime__timer_drain(chime_timer *t, size_t limit);
/* Apply the records queued before the call (up to 1024 of them, and not past a push half done:
 * mpsc.h): the advancing thread's half of the handshake of `ready` (wake.h), before it runs
 * callbacks itself. */
void chime__timer_drain_queued(chime_timer *t);
/* Hand the callbacks gathered during an advance to the workers. */
void chime__timer_hand_out(chime_timer *t);
/* End a timer that will never fire: on_unfired, counted, out of the levels, given back unless queued.
 * The caller won the claim (state.h) from old_state. */
void chime__timer_end_unfired(chime_timer *t, uint32_t idx, uint64_t old_state);
/* The workers' run function and leftover function (workers.h), and their idle hook. */
void chime__timer_run_item(void *ctx, const struct chime__item *it);
void chime__timer_item_unfired(void *ctx, const struct chime__item *it);
void chime__timer_workers_idle(void *ctx);

/* ---- thread.c ---- */

/* The advancing thread. */
void *chime__timer_main(void *arg);

/* The thread whose advancing thread or worker this thread is (stop from it would wait on itself). */
extern _Thread_local chime_timer *chime__timer_owner;

#endif /* CHIME_RUNTIME_TIMER_H */
