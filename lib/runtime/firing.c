/* SPDX-License-Identifier: MIT */
/*
 * The advancing thread's handling of records: taking in what producers queued (a new timer, a new
 * deadline, a cancel, the end of a periodic run), the levels' fire step, and running or handing out
 * callbacks. Every decision is a transition of state.h; this file says what follows from each.
 *
 * A record is in the levels (its pos is an entry's) from the apply that places it until the fire step
 * consumes its entry without re-arming it, or an apply or stop takes it out. Its pos says which:
 * CHIME__REC_UNPLACED once it is out, so a cancel that comes after the record fired, or fired as
 * dropped, knows there is nothing to remove.
 */
#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "runtime/timer.h"

#define POP_BATCH CHIME__POP_BATCH
/* chime__timer_drain_queued's bound: as thread.c's DRAIN_BATCH, about 0.1 ms of records, so that
 * a storm of schedules delays a due callback by little more than before. Beyond it (a backlog) due
 * callbacks come first, and a delay queued in it may wait for a batch of them. */
#define DRAIN_QUEUED_MAX 1024

static struct chime__rec *rec_of(chime_timer *t, uint32_t idx)
{
    return chime__records_at(&t->recs, idx);
}

/* Take record idx out of the levels, if it is in them. */
static void unplace(chime_timer *t, uint32_t idx)
{
    struct chime__rec *rec = rec_of(t, idx);
    if (rec->pos == CHIME__REC_UNPLACED)
        return;
    chime__levels_remove(&t->L, idx);
    chime__levels_sub(&t->L);
    rec->pos = CHIME__REC_UNPLACED;
}

/* Give record idx back: every id naming it dies. */
static void give_back(chime_timer *t, uint32_t idx)
{
    chime__records_give(&t->recs, idx);
    t->idle_work = true;
}

/* A timer ends without firing: on_unfired, counted. */
static void count_unfired(chime_timer *t, void *arg)
{
    if (t->on_unfired)
        t->on_unfired(arg);
    chime__stats_add(&t->stats.unfired);
    chime__timer_unlimit(t);
}

void chime__timer_end_unfired(chime_timer *t, uint32_t idx, uint64_t old_state)
{
    unplace(t, idx);
    count_unfired(t, chime__records_call(&t->recs, idx)->arg);
    if (!(old_state & (CHIME__ST_Q | CHIME__ST_W)))
        give_back(t, idx); /* queued, or a writer will push it: apply() gives it back when popped */
}

/* The clock as a drain reads it for relative schedules: once per batch of popped records, after the
 * last pop, so that it is at least the time of every push in the batch (producer.c). */
struct drain_clock {
    uint64_t ns;
    bool read;
};

/* Put record idx, whose state apply found as s, in the levels at its requested deadline, rounded up
 * to a tick (never early), or move it there if it is in them already. With D the deadline is the
 * batch's clock plus the delay deadline_ns holds (producer.c, RELATIVE SCHEDULES); with D and KNOWN
 * the record comes back from a placing that ran out of memory, and keeps the tick it was given then
 * (rec->deadline, the thread's own while the record is out of the levels): counting the delay again
 * from a later clock would make it late (found in review). */
static bool place(chime_timer *t, uint32_t idx, uint64_t s, struct drain_clock *c)
{
    struct chime__rec *rec = rec_of(t, idx);
    /* relaxed: apply's acquire saw R after the write was published (by the push, or by
     * reschedule_end). A reschedule may set R again and write a new deadline after apply's
     * compare-and-swap and before this load (found in review): this placing may then read the new
     * value with the old state's D, and put the timer at the wrong tick, but the reschedule found
     * Q clear and pushes the record, whose next apply places it right, and R makes any firing
     * meanwhile a drop: a wasted placing, never an early or a lost firing. */
    uint64_t ns = atomic_load_explicit(&rec->deadline_ns, memory_order_relaxed), tick;
    if ((s & CHIME__ST_D) && (s & CHIME__ST_KNOWN)) {
        tick = rec->deadline;
    } else if (s & CHIME__ST_D) {
        if (!c->read)
            *c = (struct drain_clock){ chime__timer_now(t), true };
        ns = c->ns > UINT64_MAX - ns ? UINT64_MAX : c->ns + ns; /* never wraps: ns <= DELAY_MAX */
        tick = chime__timer_ticks(t, ns);
    } else {
        tick = chime__timer_ticks(t, ns);
    }
    int err;
    if (rec->pos != CHIME__REC_UNPLACED) {
        err = chime__levels_move(&t->L, idx, tick);
    } else {
        rec->deadline = tick;
        err = chime__levels_place(&t->L, idx);
        if (!err)
            chime__levels_add(&t->L);
    }
    /* The levels could not grow a slot. The producer was told 0, so the timer must not be lost: the
     * record is queued again (Q), and the caller holds it, to try again before anything else. Unless
     * Q was set already: then a reschedule or cancel pushes it, and a newer request wins anyway. */
    return err && chime__state_requeue(&rec->state);
}

/* Apply a record popped from the queue before the drain clock c would be read. Return: true if its
 * placing ran out of memory and it is queued again, for the caller to hold (place). */
static bool apply(chime_timer *t, uint32_t idx, struct drain_clock *c)
{
    struct chime__rec *rec = rec_of(t, idx);
    uint64_t s;
    if (!chime__state_apply(&rec->state, &s))
        return false; /* a reschedule is writing: out of the queue, and its writer pushes it back */
    if (!(s & CHIME__ST_KNOWN)) {
        chime__records_known(&t->recs, idx);
        chime__stats_bump(&t->stats.scheduled);
    }
    switch (chime__life(s)) {
    case CHIME__LIFE_CANCELLED:
        unplace(t, idx);
        if (!(s & CHIME__ST_RUN)) {
            chime__stats_bump(&t->stats.cancelled);
            give_back(t, idx); /* a running periodic timer comes back when its run ends */
        }
        return false;
    case CHIME__LIFE_DONE:
        if (!(s & CHIME__ST_RUN))
            give_back(t, idx); /* ended by stop's sweep while it was queued */
        return false;
    case CHIME__LIFE_PENDING:
        if ((s & CHIME__ST_E) && !(s & CHIME__ST_RUN)) {
            uint64_t old = chime__state_claim(&rec->state);
            if (old)
                chime__timer_end_unfired(t, idx, old); /* a Q in old was set after ours: its setter pushes */
            return false;
        }
        return (s & CHIME__ST_R) && place(t, idx, s, c);
    default:
        return false; /* FREE: never queued */
    }
}

/*
 * Apply the n records at idx in order, until one's placing runs out of memory: that one and those
 * after it become the held records (t->held), which the next drain applies first, still in order.
 * Equal deadlines fire in the order applied, so a record that failed goes nowhere behind the ones
 * popped after it (found in review: requeued at the queue's tail, A of a thread's A, B, C fired
 * last). The held records are still queued as the state word says (Q): the one that failed was
 * queued again by place(), the others have not been applied. Return: true if all were applied.
 */
static bool apply_in_order(chime_timer *t, const uint32_t *idx, size_t n)
{
    /* Read after the last pop (drain): for held records, later still. */
    struct drain_clock c = { 0, false };
    for (size_t i = 0; i < n; i++)
        if (apply(t, idx[i], &c)) {
            memmove(t->held, idx + i, (n - i) * sizeof *idx); /* idx may be t->held itself */
            t->nheld = n - i;
            return false;
        }
    t->nheld = 0;
    return true;
}

/* Apply up to limit queued records, or until record `last` (CHIME__MPSC_NIL: none) was popped; the
 * held records first. Return: true if it stopped at the limit or at `last`, or with records held
 * (out of memory: the thread's next iteration tries again). */
static bool drain(chime_timer *t, size_t limit, uint32_t last)
{
    if (t->nheld && !apply_in_order(t, t->held, t->nheld))
        return true;
    uint32_t popped[POP_BATCH];
    for (size_t done = 0; done < limit;) {
        size_t want = limit - done < POP_BATCH ? limit - done : POP_BATCH, n = 0;
        bool reached = false;
        while (n < want && !reached) {
            uint32_t idx = chime__mpsc_pop(&t->queue);
            if (idx == CHIME__MPSC_NIL)
                break;
            popped[n++] = idx;
            reached = idx == last;
            /* Ask for the next record now, so that its miss overlaps this pop's work: with many
             * records the pop's read of its link is the drain's largest cost (docs/perf.md). A read
             * prefetch: one for writing measured no better, and can take the line from a producer
             * still linking it. */
            uint32_t next = chime__mpsc_peek(&t->queue);
            if (next != CHIME__MPSC_STUB)
                __builtin_prefetch(rec_of(t, next), 0);
        }
        /* Applied in the order popped (equal deadlines fire in it), after the last pop: a relative
         * schedule's clock is read no sooner than that (drain_clock). */
        if (!apply_in_order(t, popped, n))
            return true;
        done += n;
        if (reached)
            return true;
        if (n < want)
            return false;
    }
    return true;
}

bool chime__timer_drain(chime_timer *t, size_t limit)
{
    return drain(t, limit, CHIME__MPSC_NIL);
}

void chime__timer_drain_queued(chime_timer *t)
{
    /* seq_cst: the thread's load in the handshake of wake.h's `ready`, after its store of 0. */
    uint32_t last = chime__mpsc_newest(&t->queue);
    /* STUB: the stub went back behind the newest node, maybe with nodes still before it */
    if (last != CHIME__MPSC_STUB || !chime__mpsc_empty(&t->queue))
        drain(t, DRAIN_QUEUED_MAX, last == CHIME__MPSC_STUB ? CHIME__MPSC_NIL : last);
}

void (*chime__timer_finish_run_hook)(void);

/* End a periodic run (or a withdrawn one): if the timer ended meanwhile, queue it so the advancing
 * thread gives it back; if a reschedule withdrew it, so that it places the timer again
 * (state.h). A withdrawn run's push wakes the thread for the deadline it carries: a reschedule
 * that found this Q set wrote its deadline and only woke the thread, maybe before this push, and
 * that deadline reaches the thread through this push alone (timer.h, chime__timer_push). As a bare
 * requeue it did not wake it, and a periodic timer fired up to a period late (found in review). */
static void finish_run(chime_timer *t, uint32_t idx, bool withdrawn)
{
    if (!chime__state_finish_run(&rec_of(t, idx)->state, withdrawn))
        return;
    if (chime__timer_finish_run_hook)
        chime__timer_finish_run_hook();
    if (!withdrawn) {
        chime__timer_requeue(t, idx); /* a run that ran, of a timer ended: only its memory waits */
        return;
    }
    /* Withdrawn by a reschedule (pending: placed again) or by a cancel (ended: then this wakes
     * the thread for a deadline of no use, at worst). */
    chime__timer_push(t, idx, UINT64_MAX);
    /* seq_cst: after the push, as in chime__timer_requeue: a stopping runtime waits for records. */
    if (atomic_load_explicit(&t->mode, memory_order_seq_cst) != CHIME__MODE_RUNNING)
        chime__timer_wake_before(t, 0);
}

void chime__timer_run_item(void *ctx, const struct chime__item *it)
{
    chime_timer *t = ctx;
    chime__timer_owner = t; /* on a worker: a callback here must not stop t (-EDEADLK) */
    if (it->idx != CHIME__REC_NIL && !chime__state_start_run(&rec_of(t, it->idx)->state)) {
        finish_run(t, it->idx, true); /* withdrawn by a cancel or reschedule: end it unstarted */
        return;
    }
    uint64_t now = chime__timer_now(t);
    chime__stats_run(&t->stats, now > it->deadline_ns ? now - it->deadline_ns : 0);
    if (it->idx == CHIME__REC_NIL) {
        chime__stats_add(&t->stats.fired);
        chime__timer_unlimit(t);
    }
    it->fn(it->arg);
    if (it->idx != CHIME__REC_NIL)
        finish_run(t, it->idx, false);
}

void chime__timer_item_unfired(void *ctx, const struct chime__item *it)
{
    chime_timer *t = ctx;
    if (it->idx != CHIME__REC_NIL)
        finish_run(t, it->idx, false); /* stop's sweep ends the periodic timer itself */
    else
        count_unfired(t, it->arg);
}

void chime__timer_workers_idle(void *ctx)
{
    chime_timer *t = ctx;
    /* seq_cst, both: the waker's half of the sleep handshake (wake.h); the advancing thread reads
     * idle_seq before it asks whether the workers are idle, and again after publishing sleep_until. */
    atomic_fetch_add_explicit(&t->idle_seq, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&t->mode, memory_order_seq_cst) != CHIME__MODE_RUNNING)
        chime__timer_wake_before(t, 0);
}

/* Run a callback, or gather it for the workers. */
static void dispatch(chime_timer *t, const struct chime__item *it)
{
    if (!t->use_workers) {
        chime__timer_run_item(t, it);
        return;
    }
    if (t->batch_n == t->batch_cap) {
        size_t cap = t->batch_cap ? t->batch_cap * 2 : 256;
        struct chime__item *b = chime__realloc_sized(t->batch, t->batch_cap * sizeof(*b), cap * sizeof(*b));
        if (!b) {
            chime__timer_run_item(t, it); /* no memory to hand it over: run it here rather than lose it */
            return;
        }
        t->batch = b;
        t->batch_cap = cap;
    }
    t->batch[t->batch_n++] = *it;
}

void chime__timer_hand_out(chime_timer *t)
{
    if (!t->batch_n)
        return;
    if (chime__workers_submit(&t->workers, t->batch, t->batch_n) != 0) {
        for (size_t i = 0; i < t->batch_n; i++)
            chime__timer_run_item(t, &t->batch[i]); /* the queue could not grow: run them here */
    }
    t->batch_n = 0;
}

int chime__timer_fire(void *ctx, uint32_t idx)
{
    chime_timer *t = ctx;
    struct chime__rec *rec = rec_of(t, idx);
    /* relaxed: PERIODIC is constant while the record is taken; the CAS in state_fire decides. */
    bool periodic = atomic_load_explicit(&rec->state, memory_order_relaxed) & CHIME__ST_PERIODIC;
    bool armed = false; /* re-armed at its next boundary: still in the levels */
    if (periodic) {
        uint64_t deadline = rec->deadline;
        uint64_t period = chime__timer_ticks(t, *chime__records_period(&t->recs, idx));
        uint64_t last = UINT64_MAX / t->tick_ns; /* the tick of the clock's last value */
        if (chime__levels_next_boundary(&t->L, &rec->deadline, period ? period : 1, last)) {
            if (chime__levels_place(&t->L, idx) != 0) { /* after advance_to >= now: a slot */
                rec->deadline = deadline;
                return -ENOMEM; /* nothing done: the levels stop before this timer */
            }
            armed = true;
        }
    }
    enum chime__fire outcome = chime__state_fire(&rec->state, !armed);
    if (outcome == CHIME__FIRE_SKIP && armed)
        return 0; /* the last run is still going: skip this boundary, stay armed */
    if (outcome != CHIME__FIRE_RUN || !armed) {
        if (armed)
            chime__levels_remove(&t->L, idx); /* it must not fire: out of the levels again */
        chime__levels_sub(&t->L);
        rec->pos = CHIME__REC_UNPLACED;
    }
    if (outcome == CHIME__FIRE_END) { /* ended by its schedule: its last run's finish_run queues */
        chime__stats_add(&t->stats.fired);
        chime__timer_unlimit(t); /* as every other end (found in review: its place was kept) */
    }
    if (outcome != CHIME__FIRE_RUN)
        return 0; /* cancelled or ended (queued: apply gives it back), or rescheduled (apply places it) */
    const struct chime__rec_call *call = chime__records_call(&t->recs, idx);
    struct chime__item it = { .fn = call->fn, .arg = call->arg, .idx = armed ? idx : CHIME__REC_NIL };
    if (armed) {
        it.deadline_ns = t->L.now * t->tick_ns; /* the boundary being fired */
    } else {
        /* relaxed: the firing CAS won, so no reschedule writes it any more; read via apply's
         * acquire. A relative schedule's (D) holds its delay: its deadline is the tick it was
         * placed at (its lateness then counts from there, the thread's own included). */
        it.deadline_ns = atomic_load_explicit(&rec->deadline_ns, memory_order_relaxed);
        if (atomic_load_explicit(&rec->state, memory_order_relaxed) & CHIME__ST_D)
            it.deadline_ns = rec->deadline > UINT64_MAX / t->tick_ns ? UINT64_MAX
                                                                      : rec->deadline * t->tick_ns;
        give_back(t, idx); /* no Q (no R, no E): nobody will push it; its ids die now */
    }
    dispatch(t, &it);
    return 0;
}
