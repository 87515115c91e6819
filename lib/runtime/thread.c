/* SPDX-License-Identifier: MIT */
/*
 * The advancing thread: its loop, the idle work that gives memory back, and stop.
 *
 * ONE ITERATION: take in up to DRAIN_BATCH queued records; advance the levels to the clock, firing at
 * most FIRE_BATCH callbacks (a storm is worked through in batches, the queue drained between them, so
 * a cancel issued during a storm stops every timer not yet fired); hand the callbacks to the workers;
 * then, with nothing queued and nothing due, give memory back in bounded steps for as long as the
 * next deadline is more than IDLE_MARGIN_NS away; then sleep until the next deadline (wake.h).
 *
 * GIVING MEMORY BACK NEVER DELAYS A DUE TIMER. While timers are due, the thread's memory work is O(1)
 * per record (records.h: a give-back, to a stack or to a chunk's private list) and a scan of chunks
 * once per iteration (chime__records_balance). Everything that walks more than one record or slot
 * (the sweep of the free stacks, releasing chunks, freeing idle slot arrays) is an idle step: it
 * starts only when nothing is queued, no stop is asked for, and the next deadline is at least
 * IDLE_MARGIN_NS away, and further than the longest recent step took; each step is bounded (256
 * records, 32 chunks, or the levels' slots once). A release of 32 chunks can take longer than the
 * margin (0.36 ms measured on the project's VM), hence the second condition (idle_work).
 */
#define _GNU_SOURCE /* prctl: a Linux interface beyond C11 */
#include <sched.h>
#include <sys/prctl.h>

#include "runtime/timer.h"

#define FIRE_BATCH 1024              /* callbacks per bounded advance */
#define STOP_COUNT_EVERY 64          /* begin_stop's rounds between counts while the queue is busy */
#define DRAIN_BATCH 1024             /* queued records applied per iteration before time is read again:
                                        about 0.1 ms, so a burst of schedules delays a due timer by
                                        no more than that (4096 made the burst's first timers late) */
#define IDLE_MARGIN_NS UINT64_C(100000) /* idle work only while the next deadline is this far away */
#define TRIM_MIN 4096                /* slot arrays are trimmed once the pending timers have halved
                                        from a peak of at least this many */

_Thread_local chime_timer *chime__timer_owner;

/* ---- idle work ---- */

/* One bounded step. Return: true if there is more to do. */
static bool idle_step(chime_timer *t)
{
    if (t->trim_peak >= TRIM_MIN && t->L.live <= t->trim_peak / 2) {
        chime__levels_trim(&t->L); /* O(total slots): the slot arrays that fired empty */
        t->trim_peak = t->L.live;
        return true;
    }
    return chime__records_idle(&t->recs);
}

/* Give memory back while the thread is idle. Return: false if it stopped because something arrived
 * (the caller goes round again instead of sleeping). A step starts only if the next deadline is
 * further away than IDLE_MARGIN_NS and than the longest recent step took: a step that releases
 * chunks (one madvise of up to RELEASE_RUN of them per array) took 0.36 ms on the project's 2-vCPU
 * VM (found in review), and a timer due meanwhile would wait for it. That figure decays by an
 * eighth per call, whether or not a step fits, so that one step slowed by preemption does not hold
 * memory back for long while deadlines come close together. */
static bool idle_work(chime_timer *t, uint64_t wake_ns)
{
    if (t->idle_work)
        t->idle_step_ns -= t->idle_step_ns / 8;
    while (t->idle_work) {
        /* relaxed: a hint to stop early; the sleep handshake reads mode again. */
        if (!chime__mpsc_empty(&t->queue) ||
            atomic_load_explicit(&t->mode, memory_order_relaxed) != CHIME__MODE_RUNNING)
            return false;
        uint64_t now = chime__timer_now(t);
        uint64_t margin = t->idle_step_ns > IDLE_MARGIN_NS ? t->idle_step_ns : IDLE_MARGIN_NS;
        if (wake_ns != UINT64_MAX && now + margin >= wake_ns)
            return true; /* not idle: a deadline is near */
        t->idle_work = idle_step(t);
        uint64_t took = chime__timer_now(t) - now;
        if (took > t->idle_step_ns)
            t->idle_step_ns = took;
    }
    return true;
}

/* ---- stop ---- */

struct sweep {
    chime_timer *t;
    int mode;
};

/* End one record at stop if it will not fire: under NOW every pending timer, under DRAIN the periodic
 * ones (a running one is marked E and ended when its run is over). */
static void sweep_one(void *ctx, uint32_t idx)
{
    const struct sweep *sw = ctx;
    chime_timer *t = sw->t;
    _Atomic uint64_t *st = &chime__records_at(&t->recs, idx)->state;
    for (;;) {
        /* relaxed: the transitions below decide; a record's fields were acquired when it was applied. */
        uint64_t s = atomic_load_explicit(st, memory_order_relaxed);
        if (sw->mode == CHIME_STOP_NOW && (s & CHIME__ST_KNOWN) &&
            chime__life(s) == CHIME__LIFE_CANCELLED && (s & (CHIME__ST_Q | CHIME__ST_W))) {
            /* its canceller's push (or its writer's, W) comes after this thread has gone */
            chime__stats_bump(&t->stats.cancelled);
            return;
        }
        if (!(s & CHIME__ST_KNOWN) || chime__life(s) != CHIME__LIFE_PENDING)
            return;
        if (sw->mode == CHIME_STOP_DRAIN && !(s & CHIME__ST_PERIODIC))
            return; /* one-shot timers fire as usual */
        if (s & CHIME__ST_RUN) {
            /* Only under DRAIN (NOW joined the workers first): finish_run's CAS sees E, or the run
             * ended first and this fails, and the loop claims the timer. */
            if (chime__state_end_on_drain(st, s))
                return;
            continue;
        }
        uint64_t old = chime__state_claim(st); /* RUN is set by this thread only: it stays clear */
        if (old) {
            chime__timer_end_unfired(t, idx, old);
            return;
        }
    }
}

/*
 * Stop has begun: close the pool and wait until every record a producer took has reached the queue
 * and been applied, so that the pool's live count accounts for every timer; then end what will not
 * fire.
 */
static void begin_stop(chime_timer *t, int mode)
{
    t->closed = true;
    if (mode == CHIME_STOP_NOW && t->use_workers) {
        chime__workers_stop(&t->workers, true, chime__timer_item_unfired);
        t->use_workers = false;
    }
    chime__records_close(&t->recs);
    /*
     * Not "until the queue is empty": reschedules and cancels may go on pushing records the thread
     * already knows for as long as they like (a thread rescheduling one timer in a loop would hold a
     * stop off forever). What must arrive is every record taken from the pool, and they are counted.
     */
    for (unsigned round = 1;; round++) {
        bool more = chime__timer_drain(t, DRAIN_BATCH);
        chime__records_flush(&t->recs);
        /* The count of taken records walks the free stacks, O(free records): count once the queue
         * ran dry, or every STOP_COUNT_EVERY rounds while producers keep pushing (found with faster
         * schedules that grew the pool: 140 ms a round, a stop of 53 s in the stress test). */
        if ((!more || round % STOP_COUNT_EVERY == 0) &&
            chime__records_taken(&t->recs) == chime__records_live(&t->recs))
            break;
        sched_yield(); /* a producer took a record and has not pushed it yet */
    }
    struct sweep sw = { t, mode };
    chime__records_each(&t->recs, sweep_one, &sw);
}

/* ---- the loop ---- */

static void publish_sync(chime_timer *t, uint32_t sync)
{
    if (atomic_load_explicit(&t->sync_done, memory_order_relaxed) != sync) { /* ours to write */
        /* release: pairs with the acquire load in chime__timer_sync. */
        atomic_store_explicit(&t->sync_done, sync, memory_order_release);
        chime__futex_wake_all(&t->sync_done);
    }
}

/* Whether the levels have something to do by tick: a timer due, or a cascade that may make one. */
static bool due_by(const chime_timer *t, uint64_t tick)
{
    uint64_t next;
    return chime__levels_next(&t->L, &next) == 0 && next <= tick;
}

/* When the next thing happens, in ns (UINT64_MAX: nothing pending, or nothing the clock reaches).
 * *due: something is due by tick, the tick just advanced to (a callback scheduled it there). Not
 * told by comparing the time with the clock's: at UINT64_MAX ns (a test's clock) a wake saturated
 * there looked due, and the thread went round without end (found in review). */
static uint64_t next_wake(const chime_timer *t, uint64_t tick, bool *due)
{
    uint64_t next;
    *due = false;
    if (chime__levels_next(&t->L, &next) != 0)
        return UINT64_MAX;
    *due = next <= tick;
    return next > UINT64_MAX / t->tick_ns ? UINT64_MAX : next * t->tick_ns;
}

/* The queue the drain just emptied is not empty: a push came since, or one is half done (mpsc.h: a
 * producer swapped the tail and has not linked its record yet, and nothing can be popped until it
 * does). Give the CPU away rather than go round at once: spinning on a producer preempted there
 * holds its CPU off it (found in review: on one CPU, or under SCHED_FIFO, a livelock). */
static void yield_to_a_push(chime_timer *t)
{
    if (!chime__mpsc_empty(&t->queue))
        sched_yield();
}

/* Sleep until wake_ns unless something arrived since the thread last looked (wake.h). */
static void sleep_until(chime_timer *t, uint64_t wake_ns, int mode_seen, uint32_t sync_seen,
                        uint32_t idle_seen)
{
    uint32_t seq = chime__sleeper_prepare(&t->sleeper, wake_ns);
    /* seq_cst, each: the sleeper's loads in the handshake, after its store of sleep_until. */
    if (chime__mpsc_empty(&t->queue) &&
        atomic_load_explicit(&t->mode, memory_order_seq_cst) == mode_seen &&
        atomic_load_explicit(&t->sync_req, memory_order_seq_cst) == sync_seen &&
        atomic_load_explicit(&t->idle_seq, memory_order_seq_cst) == idle_seen)
        chime__sleeper_wait(&t->sleeper, seq, t->real_clock ? wake_ns : UINT64_MAX);
    else
        yield_to_a_push(t);
    chime__sleeper_awake(&t->sleeper);
}

void *chime__timer_main(void *arg)
{
    chime_timer *t = arg;
    chime__timer_owner = t;
    /* Wake within about a microsecond of a deadline instead of the default 50 us of timer slack. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    for (;;) {
        /* acquire: pairs with the seq_cst stores in chime__timer_sync and chime_timer_stop. */
        uint32_t sync = atomic_load_explicit(&t->sync_req, memory_order_acquire);
        int mode = atomic_load_explicit(&t->mode, memory_order_acquire);
        if (mode != CHIME__MODE_RUNNING && !t->closed) {
            begin_stop(t, mode);
            if (mode == CHIME_STOP_NOW)
                break;
        }
        bool more = chime__timer_drain(t, DRAIN_BATCH);
        uint64_t now = chime__timer_now(t), tick = chime__div(now, t->tick_ns, t->tick_inv);
        if (!t->use_workers && due_by(t, tick)) {
            /* Callbacks may run here: no delay may wait behind them (wake.h, `ready`), so take in
             * what came since the drain once `ready` says 0. Only then: a store at every
             * iteration took the line producers read at every schedule from them. */
            chime__sleeper_set_ready(&t->sleeper, false);
            chime__timer_drain_queued(t);
        }
        bool done;
        chime__levels_advance(&t->L, tick, FIRE_BATCH, &done);
        chime__timer_hand_out(t);
        chime__sleeper_set_ready(&t->sleeper, true);
        if (t->L.live > t->trim_peak)
            t->trim_peak = t->L.live;
        /* Demand, watermark, dry shards: once per iteration. A watermark that fell makes idle work
         * even when nothing ended (the last timers of a burst ended while the demand was high). */
        if (!t->closed && chime__records_balance(&t->recs))
            t->idle_work = true;
        if (more || !done)
            continue; /* a storm: take the producers' news before the next batch */
        chime__records_flush(&t->recs);
        /* seq_cst: see chime__timer_workers_idle. */
        uint32_t idle = atomic_load_explicit(&t->idle_seq, memory_order_seq_cst);
        if (mode == CHIME_STOP_DRAIN && chime__records_live(&t->recs) == 0 &&
            (!t->use_workers || chime__workers_idle(&t->workers)))
            break;
        bool due;
        uint64_t wake = next_wake(t, tick, &due);
        if (due)
            continue;
        if (!t->closed && !idle_work(t, wake)) {
            yield_to_a_push(t);
            continue; /* something arrived: take it in first */
        }
        /* relaxed: a figure for chime__timer_memory, exact only after a sync. */
        atomic_store_explicit(&t->mem_records, chime__records_capacity(&t->recs), memory_order_relaxed);
        publish_sync(t, sync);
        sleep_until(t, wake, mode, sync, idle);
    }
    if (t->use_workers) {
        chime__workers_stop(&t->workers, false, chime__timer_item_unfired); /* DRAIN: idle already */
        t->use_workers = false;
    }
    chime__records_flush(&t->recs);
    return NULL;
}
