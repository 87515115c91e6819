/* SPDX-License-Identifier: MIT */
/*
 * The threaded runtime's producer side: schedule, cancel and reschedule, callable from any thread.
 * Each takes no lock and makes no system call in the common case; the protocol is state.h's, and
 * these functions call its transitions by name.
 *
 * RELATIVE SCHEDULES. chime_timer_schedule needs an upper bound of the time at the call (clock.h).
 * Where the TSC gives one, the producer computes the deadline itself. Elsewhere (t->relative: the
 * kernel's clock is not the TSC) a clock read is a vDSO call ordered after the producer's own
 * earlier loads and stores: 60 to 140 ns on a kvm-clock VM, three times the rest of a schedule
 * (docs/perf.md). So while the advancing thread is ready (running, and taking in what is queued
 * before it runs any callback itself: wake.h), the producer queues the delay (D, state.h) and the
 * thread gives the timer its deadline when it takes the record in: the clock it reads after popping
 * the record, plus the delay (firing.c, chime__timer_drain). That reading comes after the push,
 * which comes after the call began: the timer still never fires early. It is later than the
 * producer's own reading would have been by the time the record waited in the queue: the thread's
 * work before its next drain, callbacks excluded, but for two races the push cannot undo (a
 * reschedule is the only writer of a queued deadline, state.h, and a settling producer that wrote
 * one too was found in review to undo a reschedule that had returned 0):
 *   - the thread began to sleep just before the push: the push wakes it (chime__timer_push, when
 *     0), and the record waits for the thread's wake-up;
 *   - it began a batch of callbacks of its own (no workers) after taking in what was queued when it
 *     said it was no longer ready, and the push came after that: the record waits for the batch.
 * A thread that is not ready when the producer looks gets a deadline from the producer's clock, as
 * before: asleep, it would take the record in only when it wakes, and waking it costs far more
 * than the read.
 */
#include <errno.h>

#include "runtime/timer.h"

/* This thread's shard, plus one (0: not yet assigned). */
static _Thread_local unsigned tls_shard __attribute__((tls_model("initial-exec")));
static _Atomic unsigned next_shard;

static unsigned my_shard(void)
{
    if (!tls_shard) {
        /* relaxed: the counter only spreads threads over shards; nothing is published through it. */
        tls_shard = atomic_fetch_add_explicit(&next_shard, 1, memory_order_relaxed) % CHIME__SHARDS + 1;
    }
    return tls_shard - 1;
}

/* Whether chime_timer_schedule(t, delay_ns) queues the delay, not a deadline (see the top). */
static bool relative(const chime_timer *t, uint64_t delay_ns)
{
    if (!t->relative || delay_ns > CHIME__DELAY_MAX)
        return false;
    /* relaxed: a hint (see the top: a stale value costs lateness, never earliness). */
    return t->relative > 1 || atomic_load_explicit(&t->sleeper.ready, memory_order_relaxed);
}

/* Take a record, fill it in, queue it. The producer's whole path: no lock, no system call unless the
 * advancing thread must be woken. With `delay`, deadline_ns is a delay (see the top). */
static int submit(chime_timer *t, uint64_t deadline_ns, uint64_t period_ns, chime_fn *fn, void *arg,
                  chime_id *id, bool delay)
{
    /* relaxed: a fast refusal only; the closed pool is what guarantees no timer slips past stop. */
    if (atomic_load_explicit(&t->mode, memory_order_relaxed) != CHIME__MODE_RUNNING)
        return -ESHUTDOWN;
    /* relaxed: a count (Netty's pendingTimeouts); it orders nothing. */
    if (t->max_pending &&
        atomic_fetch_add_explicit(&t->limited, 1, memory_order_relaxed) >= t->max_pending) {
        atomic_fetch_sub_explicit(&t->limited, 1, memory_order_relaxed);
        return -EAGAIN;
    }
    unsigned shard = my_shard();
    uint32_t idx;
    uint64_t free_state;
    int got = chime__records_take(&t->recs, shard, &idx, &free_state);
    if (got < 0) {
        chime__timer_unlimit(t);
        return got;
    }
    struct chime__rec *rec = chime__records_at(&t->recs, idx);
    struct chime__rec_call *call = chime__records_call(&t->recs, idx);
    call->fn = fn;
    call->arg = arg;
    if (period_ns)
        *chime__records_period(&t->recs, idx) = period_ns;
    /* relaxed: published by the push (release), which the advancing thread pops (acquire). */
    atomic_store_explicit(&rec->deadline_ns, deadline_ns, memory_order_relaxed);
    chime__state_taken(&rec->state, free_state, shard, period_ns != 0, delay);
    if (id)
        *id = chime__records_id(free_state, idx); /* before the push: the callback may read it */
    /* got > 0: the shard ran dry; get records back. A delay: wake the thread if it sleeps. */
    chime__timer_push(t, idx, got > 0 || delay ? 0 : deadline_ns);
    return 0;
}

static int deadline_after(const chime_timer *t, uint64_t delay_ns, uint64_t *deadline)
{
    uint64_t now = chime__timer_upper(t); /* an upper bound: the deadline is never early (clock.h) */
    if (delay_ns > UINT64_MAX - now)
        return -ERANGE;
    *deadline = now + delay_ns;
    return 0;
}

int chime_timer_schedule(chime_timer *t, uint64_t delay_ns, chime_fn *fn, void *arg, chime_id *id)
{
    if (!t || !fn)
        return -EINVAL;
    if (relative(t, delay_ns))
        return submit(t, delay_ns, 0, fn, arg, id, true);
    uint64_t deadline;
    int err = deadline_after(t, delay_ns, &deadline);
    return err ? err : submit(t, deadline, 0, fn, arg, id, false);
}

int chime_timer_schedule_at(chime_timer *t, uint64_t deadline_ns, chime_fn *fn, void *arg,
                            chime_id *id)
{
    if (!t || !fn)
        return -EINVAL;
    return submit(t, deadline_ns, 0, fn, arg, id, false);
}

int chime_timer_schedule_every(chime_timer *t, uint64_t first_delay_ns, uint64_t period_ns,
                               chime_fn *fn, void *arg, chime_id *id)
{
    if (!t || !fn || !period_ns)
        return -EINVAL;
    uint64_t deadline;
    int err = deadline_after(t, first_delay_ns, &deadline);
    return err ? err : submit(t, deadline, period_ns, fn, arg, id, false);
}

int chime_timer_cancel(chime_timer *t, chime_id id)
{
    if (!t)
        return -EINVAL;
    /* acquire: pairs with the release store of CHIME__MODE_STOPPED in chime_timer_stop. */
    if (atomic_load_explicit(&t->mode, memory_order_acquire) == CHIME__MODE_STOPPED)
        return -ESHUTDOWN;
    struct chime__rec *rec = chime__records_find(&t->recs, id);
    if (!rec)
        return -ENOENT;
    int got = chime__state_cancel(&rec->state, (uint32_t)(id >> 32));
    if (got < 0)
        return got;
    /* The advancing thread gives this record back within an iteration and a producer of this shard
     * takes it again soon after (the stacks are LIFO): fetch its cold half now, while nothing waits
     * for it, rather than miss on it in that schedule's fill, which its push then waits for. */
    __builtin_prefetch(chime__records_call(&t->recs, (uint32_t)id), 1);
    chime__timer_unlimit(t);
    if (got)
        chime__timer_requeue(t, (uint32_t)id);
    return 0;
}

int chime_timer_reschedule(chime_timer *t, chime_id id, uint64_t delay_ns)
{
    if (!t)
        return -EINVAL;
    if (atomic_load_explicit(&t->mode, memory_order_acquire) == CHIME__MODE_STOPPED) /* as in cancel */
        return -ESHUTDOWN;
    uint64_t deadline;
    int err = deadline_after(t, delay_ns, &deadline);
    if (err)
        return err;
    struct chime__rec *rec = chime__records_find(&t->recs, id);
    if (!rec)
        return -ENOENT;
    int got = chime__state_reschedule_begin(&rec->state, (uint32_t)(id >> 32));
    if (got <= CHIME__RESCHED_LOST)
        return got; /* -ENOENT, or 0: another reschedule is writing, and ours is ordered before it */
    /* We hold W: nobody else writes deadline_ns; the record is not given back before we drop W */
    atomic_store_explicit(&rec->deadline_ns, deadline, memory_order_relaxed); /* published below */
    bool popped = chime__state_reschedule_end(&rec->state); /* taken off the queue while we wrote */
    if (got == CHIME__RESCHED_PUSH || popped)
        chime__timer_push(t, (uint32_t)id, deadline);
    else
        chime__timer_wake_before(t, deadline); /* queued already, or about to be by whoever set Q */
    return 0;
}
