/* SPDX-License-Identifier: MIT */
/*
 * The threaded runtime's protocol: one 64-bit state word per timer record, and every transition any
 * thread makes on it. Every decision between threads about a timer (will it fire, was it cancelled,
 * who gives its record back) is a compare-and-swap on this word; the functions below are the only
 * code that changes it, and the runtime's other files call them by name.
 *
 * THE STATE WORD, bit by bit
 *     bits  0-1   life      FREE, PENDING, CANCELLED or DONE (ended by firing or by stop)
 *     bit   2     Q         queued: the record is on the queue or about to be pushed. Whoever sets
 *                           Q pushes the record, so it is never on the queue twice (mpsc.h).
 *     bit   3     R         a deadline in deadline_ns waits to be placed: the advancing thread places
 *                           the timer when it pops the record, and never fires it at an older one
 *     bit   4     W         a reschedule is writing deadline_ns; the advancing thread leaves the
 *                           record queued until the writer is done
 *     bit   5     KNOWN     the advancing thread has taken the record in (it counts as scheduled)
 *     bit   6     RUN       a periodic timer's run is handed out or running; its next boundary is
 *                           skipped, so runs of one timer never overlap
 *     bit   7     P         that run has not started yet: cancel and reschedule clear P to withdraw
 *                           it, and the run starts only if it can clear P itself
 *     bit   8     E         a draining stop ends this periodic timer once its run is over
 *     bit   9     PERIODIC  set at schedule, constant while the record is taken
 *     bit  10     D         deadline_ns holds a delay, not a deadline: the deadline is the clock
 *                           the advancing thread reads after it pops the record, plus that delay
 *                           (producer.c, RELATIVE SCHEDULES); set at schedule, cleared by a
 *                           reschedule. Applied again with D and KNOWN (a placing that ran out of
 *                           memory), the record keeps the tick it was given (firing.c, place)
 *     bits 12-15  shard     the free stack the record goes back to (records.h)
 *     bits 32-63  generation, the high half of the timer's id; bumped when the record is given back
 *
 * THE TRANSITIONS (producer: any thread calling schedule, cancel or reschedule; grower: a producer
 * growing the pool, under its lock; advancing: the runtime's own thread; a run's end happens on
 * whichever thread ran it, a worker or the advancing one)
 *
 *     transition        who          from                        to
 *     fresh             grower       (new memory)                FREE, above the chunk's generations
 *     taken             producer     FREE                        PENDING +Q +R (+PERIODIC/D); push
 *     cancel            producer     PENDING                     CANCELLED +Q -P; push unless Q was set
 *     reschedule_begin  producer     PENDING, no W               +W +R +Q -P -D; write deadline_ns
 *     reschedule_end    producer     W                           -W +Q; push if Q was set at begin and
 *                                                               apply has cleared it since
 *     apply             advancing    popped, no W                -Q -R +KNOWN; then place, move or give back
 *     apply (W)         advancing    popped, W                   -Q; the writer's reschedule_end pushes
 *     fire              advancing    PENDING, no R, RUN, E       one-shot (or last): DONE; periodic: +RUN +P
 *     fire (end)        advancing    PENDING +RUN, no R, E       the last boundary: DONE, RUN kept
 *     start_run         runner       RUN +P                      -P (or the run is skipped: withdrawn)
 *     finish_run        runner       RUN                         -RUN -P; ended meanwhile: +Q, push;
 *                                                               withdrawn, pending: +Q +R, push
 *     claim             advancing    PENDING                     DONE (stop's sweep, a drained periodic)
 *     end_on_drain      advancing    PENDING +RUN                +E -P (a draining stop meets a running one)
 *     requeue           advancing    any (owned)                 +Q +R; push unless Q was set
 *     freed             advancing    any (given back)            FREE, generation + 1; at the last
 *                                                               generation FREE as it is, and the
 *                                                               record is retired (records.h)
 *
 * WHO WINS EACH RACE
 *   - cancel against fire (and against stop's claim): both are a CAS from PENDING, so exactly one
 *     succeeds. cancel returns 0 only if it got there first, and then the callback never starts.
 *   - cancel against a periodic run handed out: the timer stays PENDING while it runs, so cancel
 *     wins and clears P; a run that has not cleared P yet is withdrawn, one that has completes.
 *   - reschedule against fire: reschedule sets R before it returns and fire refuses R, so the timer
 *     never fires at its old deadline once a reschedule has returned 0.
 *   - reschedule against reschedule: the second finds W and returns 0 without writing, as if it had
 *     run just before the first, whose deadline stands.
 *   - cancel against reschedule: both CAS from PENDING; a cancel after a reschedule still ends the
 *     timer (it stays PENDING with R), a reschedule after a cancel finds CANCELLED (-ENOENT).
 *   - apply against a writer (W): apply leaves the record out of the queue (-Q) and reschedule_end
 *     sets Q again and pushes it, so exactly one of them has it queued at any time and the thread
 *     never waits on a preempted writer (it pushed the record back and spun on it until a review);
 *     a cancel meanwhile finds Q clear and pushes it itself, and the writer's end then finds Q set.
 *   - a run's end against a cancel: whichever comes second sees the other; the record is given back
 *     exactly once, by the advancing thread, when it pops it with neither RUN nor Q left to come.
 *   - a withdrawn run's end against a reschedule: a reschedule that ends while the run's end
 *     holds Q only wakes the thread, maybe before the run's push, so that push wakes it for the
 *     record's deadline (chime__timer_push; it was a bare push until a review: a period late).
 * So every timer ends exactly once: fired (fire's CAS to DONE, or a periodic timer's cancel), cancelled
 * (cancel's CAS), or unfired (claim).
 *
 * MEMORY ORDERS. All transitions are read-modify-writes of one atomic word, so they are totally ordered
 * (its modification order) whatever their memory order; an order only matters for the other data a
 * transition hands over, and each function says which. The record's fields reach the advancing thread
 * through the queue (its push releases, its pop acquires); a reschedule's new deadline_ns through
 * reschedule_end and apply.
 */
#ifndef CHIME_RUNTIME_STATE_H
#define CHIME_RUNTIME_STATE_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define CHIME__ST_LIFE UINT64_C(3)
#define CHIME__LIFE_FREE UINT64_C(0)
#define CHIME__LIFE_PENDING UINT64_C(1)
#define CHIME__LIFE_CANCELLED UINT64_C(2)
#define CHIME__LIFE_DONE UINT64_C(3)
#define CHIME__ST_Q (UINT64_C(1) << 2)
#define CHIME__ST_R (UINT64_C(1) << 3)
#define CHIME__ST_W (UINT64_C(1) << 4)
#define CHIME__ST_KNOWN (UINT64_C(1) << 5)
#define CHIME__ST_RUN (UINT64_C(1) << 6)
#define CHIME__ST_P (UINT64_C(1) << 7)
#define CHIME__ST_E (UINT64_C(1) << 8)
#define CHIME__ST_PERIODIC (UINT64_C(1) << 9)
#define CHIME__ST_D (UINT64_C(1) << 10)
#define CHIME__ST_SHARD_SHIFT 12
#define CHIME__ST_SHARDS 16u /* the shard field's range */
#define CHIME__ST_SHARD (UINT64_C(15) << CHIME__ST_SHARD_SHIFT)
#define CHIME__ST_GEN_SHIFT 32

static inline uint64_t chime__life(uint64_t s) { return s & CHIME__ST_LIFE; }
static inline uint32_t chime__gen(uint64_t s) { return (uint32_t)(s >> CHIME__ST_GEN_SHIFT); }
static inline unsigned chime__shard(uint64_t s)
{
    return (unsigned)((s & CHIME__ST_SHARD) >> CHIME__ST_SHARD_SHIFT);
}

/* A free record's state: its generation and shard, life FREE. */
static inline uint64_t chime__state_free(uint32_t gen, unsigned shard)
{
    return (uint64_t)gen << CHIME__ST_GEN_SHIFT | (uint64_t)shard << CHIME__ST_SHARD_SHIFT;
}

/*
 * fresh: a record of memory just committed to the pool (by a producer growing it, under the pool's
 * lock) gets its first state: FREE at generation gen, going back to `shard`. relaxed: the record
 * reaches takers only through the free stack's push (release); a stale id's holder may read the word
 * meanwhile and finds a generation no live id carries.
 */
static inline void chime__state_fresh(_Atomic uint64_t *st, uint32_t gen, unsigned shard)
{
    atomic_store_explicit(st, chime__state_free(gen, shard), memory_order_relaxed);
}

/*
 * taken: a producer on `shard` has taken the free record whose state it read as `free_state` (its own
 * since the free stack's pop) and filled it in, with a delay in deadline_ns if `relative`; store it
 * before the push. relaxed: the push publishes it with the record's fields. A stale id's holder may
 * read the word meanwhile and sees another generation.
 */
static inline void chime__state_taken(_Atomic uint64_t *st, uint64_t free_state, unsigned shard,
                                      bool periodic, bool relative)
{
    uint64_t s = chime__state_free(chime__gen(free_state), shard) | CHIME__LIFE_PENDING | CHIME__ST_Q |
                 CHIME__ST_R | (periodic ? CHIME__ST_PERIODIC : 0) | (relative ? CHIME__ST_D : 0);
    atomic_store_explicit(st, s, memory_order_relaxed);
}

/*
 * cancel: PENDING -> CANCELLED +Q -P, if the word still carries generation gen.
 * Return: 1 if cancelled and the caller must push the record (Q was clear); 0 if cancelled and it is
 * queued already; -ENOENT if not pending (fired, cancelled, stale). relaxed: the outcome is the word
 * itself and a cancel hands over no other data; the push that may follow orders the rest.
 */
static inline int chime__state_cancel(_Atomic uint64_t *st, uint32_t gen)
{
    uint64_t s = atomic_load_explicit(st, memory_order_relaxed);
    do {
        if (chime__gen(s) != gen || chime__life(s) != CHIME__LIFE_PENDING)
            return -ENOENT;
    } while (!atomic_compare_exchange_weak_explicit(
        st, &s, (s & ~(CHIME__ST_LIFE | CHIME__ST_P)) | CHIME__LIFE_CANCELLED | CHIME__ST_Q,
        memory_order_relaxed, memory_order_relaxed));
    return !(s & CHIME__ST_Q);
}

enum chime__resched { CHIME__RESCHED_LOST = 0, CHIME__RESCHED_WRITE = 1, CHIME__RESCHED_PUSH = 2 };

/*
 * reschedule_begin: PENDING without W -> +W +R +Q -P -D (the deadline it writes is absolute).
 * Return: -ENOENT as cancel; LOST if another reschedule holds W (this one is ordered just before it
 * and writes nothing); WRITE if the caller now holds W and must write deadline_ns, then call
 * reschedule_end; PUSH as WRITE, and the caller pushes the record after reschedule_end (Q was
 * clear).
 * acquire: the previous writer's deadline_ns store (released by its reschedule_end) happens before
 * ours, so the last reschedule's deadline is the one that stays.
 */
static inline int chime__state_reschedule_begin(_Atomic uint64_t *st, uint32_t gen)
{
    uint64_t s = atomic_load_explicit(st, memory_order_relaxed); /* the CAS checks it */
    do {
        if (chime__gen(s) != gen || chime__life(s) != CHIME__LIFE_PENDING)
            return -ENOENT;
        if (s & CHIME__ST_W)
            return CHIME__RESCHED_LOST;
    } while (!atomic_compare_exchange_weak_explicit(
        st, &s, (s & ~(CHIME__ST_P | CHIME__ST_D)) | CHIME__ST_W | CHIME__ST_R | CHIME__ST_Q,
        memory_order_acquire, memory_order_relaxed));
    return s & CHIME__ST_Q ? CHIME__RESCHED_WRITE : CHIME__RESCHED_PUSH;
}

/* reschedule_end: drop W. Return: true if the caller must push the record: the advancing thread
 * popped it while W was held and left it out of the queue (apply cleared Q), so that it does not go
 * round on it until this writer is done (found in review: it re-pushed and popped it again, never
 * sleeping, for as long as the writer was preempted); the push here brings it back. Never true for
 * a PUSH caller (its Q stays until its own push). release: pairs with the acquire in
 * chime__state_apply (which leaves a record with W to its writer) and in the next
 * chime__state_reschedule_begin. seq_cst, not just release (the same locked instruction on x86):
 * when Q was set by a producer that has not pushed yet, only that push carries this deadline to the
 * advancing thread, and the seq_cst load after it in chime__timer_push must read this store
 * (timer.h). */
static inline bool chime__state_reschedule_end(_Atomic uint64_t *st)
{
    uint64_t s = atomic_load_explicit(st, memory_order_relaxed); /* the CAS checks it */
    uint64_t ns;
    do {
        ns = (s & ~CHIME__ST_W) | CHIME__ST_Q;
    } while (!atomic_compare_exchange_weak_explicit(st, &s, ns, memory_order_seq_cst,
                                                    memory_order_relaxed));
    return !(s & CHIME__ST_Q);
}

/*
 * apply: the advancing thread popped the record: -Q -R +KNOWN. Return: true with *old the state
 * before; false if a reschedule holds W: then only Q is cleared (the record is out of the queue)
 * and the writer's reschedule_end pushes it again, so the thread does not wait for the writer.
 * acquire: pairs with reschedule_end and finish_run (their writes, deadline_ns and the end of a run,
 * come before); the fields written before a push come through the pop.
 */
static inline bool chime__state_apply(_Atomic uint64_t *st, uint64_t *old)
{
    uint64_t s = atomic_load_explicit(st, memory_order_acquire);
    uint64_t ns;
    do {
        ns = s & CHIME__ST_W ? s & ~CHIME__ST_Q
                             : (s & ~(CHIME__ST_Q | CHIME__ST_R)) | CHIME__ST_KNOWN;
    } while (!atomic_compare_exchange_weak_explicit(st, &s, ns, memory_order_acquire,
                                                    memory_order_acquire));
    if (s & CHIME__ST_W)
        return false;
    *old = s;
    return true;
}

enum chime__fire {
    CHIME__FIRE_DROP, /* it must not fire, and it leaves the wheel: cancelled, ended, or R (a new
                         deadline is queued and apply places it) */
    CHIME__FIRE_SKIP, /* a periodic timer whose last run is still going: skip this boundary */
    CHIME__FIRE_RUN,  /* it fires: a one-shot timer is DONE, a periodic run is handed out (RUN, P) */
    CHIME__FIRE_END,  /* a periodic timer's last boundary while its last run is still going: DONE,
                         with RUN kept; the run's finish_run queues it, and apply gives it back */
};

/*
 * fire: the levels' entry for this record came due. PENDING without R, RUN or E -> DONE (a one-shot
 * timer, or a periodic one's last firing) or +RUN +P (a periodic run; the timer stays PENDING).
 * With RUN (a periodic run still going): not the last boundary -> nothing (skipped); the last one
 * (the next would pass the clock's range) -> DONE with RUN kept, since no boundary is left to fire
 * at.
 * relaxed: the CAS is the decision (cancel races on the same word); what the firing thread then
 * reads (deadline_ns, the callback) it acquired when it applied the record.
 */
static inline enum chime__fire chime__state_fire(_Atomic uint64_t *st, bool last)
{
    uint64_t s = atomic_load_explicit(st, memory_order_relaxed);
    uint64_t ns;
    do {
        if (chime__life(s) != CHIME__LIFE_PENDING || (s & (CHIME__ST_R | CHIME__ST_E)))
            return CHIME__FIRE_DROP;
        if ((s & CHIME__ST_RUN) && !last)
            return CHIME__FIRE_SKIP;
        ns = (s & CHIME__ST_PERIODIC) && !last ? s | CHIME__ST_RUN | CHIME__ST_P
                                               : (s & ~CHIME__ST_LIFE) | CHIME__LIFE_DONE;
    } while (!atomic_compare_exchange_weak_explicit(st, &s, ns, memory_order_relaxed,
                                                    memory_order_relaxed));
    return s & CHIME__ST_RUN ? CHIME__FIRE_END : CHIME__FIRE_RUN;
}

/* start_run: a periodic run is about to start: clear P. Return: false if it was withdrawn (a cancel
 * or reschedule cleared P first): then the run must not start. relaxed: the decision is the word. */
static inline bool chime__state_start_run(_Atomic uint64_t *st)
{
    uint64_t s = atomic_load_explicit(st, memory_order_relaxed);
    do {
        if (!(s & CHIME__ST_P))
            return false;
    } while (!atomic_compare_exchange_weak_explicit(st, &s, s & ~CHIME__ST_P, memory_order_relaxed,
                                                    memory_order_relaxed));
    return true;
}

/*
 * finish_run: a periodic run is over (or was withdrawn, `withdrawn`): -RUN -P. If the timer was
 * cancelled or is being ended meanwhile and is not queued, set Q: return true, and the caller
 * pushes it so that the advancing thread gives the record back. A run withdrawn while the timer
 * stays PENDING (only a reschedule does that) also sets Q and R in the same CAS: the new deadline's
 * boundary may have come while RUN was still set and been skipped, so apply places the timer at its
 * new deadline again (at once if it has passed; found in review: it ran a whole period late).
 * Return true then too if Q was clear; that push wakes the thread for the deadline (races above).
 * release: pairs with apply's acquire; the runner is done with the record before the advancing
 * thread can give it back.
 */
static inline bool chime__state_finish_run(_Atomic uint64_t *st, bool withdrawn)
{
    uint64_t s = atomic_load_explicit(st, memory_order_relaxed); /* the CAS checks it */
    uint64_t ns;
    do {
        ns = s & ~(CHIME__ST_RUN | CHIME__ST_P);
        bool ended = chime__life(s) != CHIME__LIFE_PENDING || (s & CHIME__ST_E);
        if (ended && !(s & CHIME__ST_Q))
            ns |= CHIME__ST_Q;
        else if (!ended && withdrawn)
            ns |= CHIME__ST_Q | CHIME__ST_R;
    } while (!atomic_compare_exchange_weak_explicit(st, &s, ns, memory_order_release,
                                                    memory_order_relaxed));
    return (ns & CHIME__ST_Q) && !(s & CHIME__ST_Q);
}

/* claim: PENDING -> DONE, for a timer that will never fire (stop). Return: the state before, or 0 if
 * it was not PENDING (a cancel got there first). relaxed: as fire. */
static inline uint64_t chime__state_claim(_Atomic uint64_t *st)
{
    uint64_t s = atomic_load_explicit(st, memory_order_relaxed);
    do {
        if (chime__life(s) != CHIME__LIFE_PENDING)
            return 0;
    } while (!atomic_compare_exchange_weak_explicit(st, &s, (s & ~CHIME__ST_LIFE) | CHIME__LIFE_DONE,
                                                    memory_order_relaxed, memory_order_relaxed));
    return s;
}

/* end_on_drain: a draining stop meets a periodic timer whose run is out: PENDING +RUN -> +E -P, so
 * that finish_run queues it and apply ends it. Return: false if the word was not so (the run ended
 * meanwhile, or a cancel came): the caller looks again. relaxed: as fire. */
static inline bool chime__state_end_on_drain(_Atomic uint64_t *st, uint64_t seen)
{
    if (chime__life(seen) != CHIME__LIFE_PENDING || !(seen & CHIME__ST_RUN))
        return false;
    return atomic_compare_exchange_strong_explicit(st, &seen, (seen & ~CHIME__ST_P) | CHIME__ST_E,
                                                   memory_order_relaxed, memory_order_relaxed);
}

/* requeue: the advancing thread could not place a record it owes a place (out of memory): +Q +R so
 * that it comes back. Return: true if the caller must push it (Q was clear). relaxed: the push that
 * follows publishes it; deadline_ns is unchanged. */
static inline bool chime__state_requeue(_Atomic uint64_t *st)
{
    return !(atomic_fetch_or_explicit(st, CHIME__ST_Q | CHIME__ST_R, memory_order_relaxed) &
             CHIME__ST_Q);
}

/* The generation after gen: 0 is skipped, so no id is ever 0. */
static inline uint32_t chime__gen_next(uint32_t gen)
{
    return gen + 1 ? gen + 1 : 1;
}

/*
 * freed: the advancing thread gives the record back: FREE, next generation, same shard; every id
 * naming it stops matching. At the last generation (UINT32_MAX) it stays there, FREE: the next one
 * would wrap, and an id of the record's first life would match again, so the caller retires the
 * record instead of handing it out (records.h). Return: the new state. relaxed: the free stack's
 * push (release) publishes it to the next taker; a stale id's holder needs nothing but the word.
 */
static inline uint64_t chime__state_freed(_Atomic uint64_t *st)
{
    uint64_t s = atomic_load_explicit(st, memory_order_relaxed); /* ours: no transition races it */
    uint32_t gen = chime__gen(s);
    uint64_t ns = chime__state_free(gen == UINT32_MAX ? gen : gen + 1, chime__shard(s));
    atomic_store_explicit(st, ns, memory_order_relaxed);
    return ns;
}

#endif /* CHIME_RUNTIME_STATE_H */
