/* SPDX-License-Identifier: MIT */
/*
 * chime: the threaded runtime (chime_timer_*). Part of the public API: programs include
 * <chime.h>, which includes this header; the conventions stated there hold here too.
 */
#ifndef CHIME_H
#include "chime.h" /* the entry point: it includes this header again after its own declarations */
#elif !defined(CHIME_TIMER_H)
#define CHIME_TIMER_H

#ifdef __cplusplus
extern "C" {
#endif

/* ==== The threaded runtime ====================================================================
 *
 * A chime_timer owns a wheel and one advancing thread. Any number of threads schedule, cancel and
 * reschedule timers without a lock: each call pushes onto a lock-free queue that the advancing thread
 * drains. The thread sleeps until the earliest deadline (no tick while idle), fires what is due and
 * runs callbacks itself, or hands them to a pool of worker threads so that a slow callback cannot
 * hold up the clock. Time is CLOCK_MONOTONIC in nanoseconds. docs/design.md explains the design;
 * lib/runtime/state.h holds the protocol between threads.
 *
 * Rules shared by every function below:
 *   - Deadlines round up to the next tick: a timer never fires early. It fires as soon as the
 *     advancing thread sees that its tick has come (stats report how late that was).
 *   - Ids are generation-checked as in the wheel: a stale or forged id is a clean -ENOENT, never a
 *     crash. Schedules made by one thread are applied in their order.
 *   - Errors are negative errno values: -EINVAL (bad argument), -ERANGE (deadline past the clock's
 *     range), -ENOMEM, -ENOENT, -EAGAIN (max_pending reached), -ESHUTDOWN (stopped, or stopping and
 *     the call would add a timer), -EDEADLK (stop from a callback), -ECHILD (a thread could not be
 *     started).
 */

typedef struct chime_timer chime_timer;

struct chime_timer_config {          /* all zero (or a NULL config) means the defaults */
    uint64_t tick_ns;                /* 0 = 1 ms (1000000); at most CHIME_MAX_TICK_NS */
    unsigned levels;                 /* wheel layout as in chime_wheel_config; 0 = the clock layout */
    uint32_t slots[CHIME_MAX_LEVELS];
    size_t max_pending;              /* 0 = no limit; past it, schedules return -EAGAIN */
    unsigned workers;                /* 0 = callbacks run on the advancing thread; N = N worker threads
                                        (at most CHIME_MAX_WORKERS) */
};
#define CHIME_MAX_WORKERS 256
/* The longest tick: an hour. Deadlines round up to a tick, so a longer one only delays every timer
 * (with UINT64_MAX, 584 years: a draining stop would wait that long). */
#define CHIME_MAX_TICK_NS (UINT64_C(3600) * 1000000000u)

enum chime_stop {
    CHIME_STOP_DRAIN = 1, /* refuse new timers, let every pending one-shot timer fire, then stop */
    CHIME_STOP_NOW = 2,   /* fire nothing more (but what had begun firing: chime_timer_stop);
                             every timer that will not fire goes to on_unfired */
};

/* Lateness histogram buckets: bucket 0 counts callbacks started less than 1 us after their deadline,
 * bucket i (1..14) those [2^(i-1), 2^i) us late, bucket 15 those 16.384 ms late or more. */
#define CHIME_LATENESS_BUCKETS 16

struct chime_stats {
    /* Per timer, as the advancing thread has seen them: a schedule or cancel counts once the thread
     * has taken it in, which is at the latest its next wake-up (a schedule due earlier than that
     * wakes it at once; a later one, or a cancel, waits for it, so with the earliest deadline an
     * hour away a count can trail its call by up to an hour). Once stop has returned they are exact.
     * scheduled == pending + fired + cancelled + unfired whenever they are read together (pending is
     * computed so), and every timer ends in exactly one of the last three. */
    uint64_t scheduled;   /* timers accepted by schedule, schedule_at and schedule_every */
    uint64_t pending;     /* not yet ended: waiting, queued, or handed to a worker and not started */
    uint64_t fired;       /* ended by firing: one-shot timers whose callback started */
    uint64_t cancelled;   /* ended by a cancel that returned 0 */
    uint64_t unfired;     /* ended by stop without firing (on_unfired was called for each) */
    /* Per callback */
    uint64_t runs;        /* callbacks started, periodic firings included */
    uint64_t late_max_ns; /* the latest a callback has started after its deadline (after the tick it
                             fired at, for a periodic run and for a schedule whose delay was queued:
                             chime_timer_schedule) */
    uint64_t late_hist[CHIME_LATENESS_BUCKETS];
};

/*
 * Create a runtime and start its advancing thread (and workers).
 * @out: receives the timer; untouched on error.  @cfg: NULL means the defaults.
 * Return: 0; -EINVAL if out is NULL, the layout is invalid (as chime_wheel_new), tick_ns exceeds
 *         CHIME_MAX_TICK_NS, or workers exceeds CHIME_MAX_WORKERS; -ENOMEM; -ECHILD if a thread
 *         could not be started.
 * Complexity: O(slots + workers), plus thread creation; the first runtime of a process also spends
 *             about a millisecond measuring the TSC against CLOCK_MONOTONIC (see schedule).
 * Thread safety: any thread.
 */
CHIME_API int chime_timer_new(chime_timer **out, const struct chime_timer_config *cfg);

/*
 * Schedule fn(arg) to run once, delay_ns from now (CLOCK_MONOTONIC), rounded up to a tick. "Now"
 * is never earlier than CLOCK_MONOTONIC at the call (so the timer never fires early). Where the
 * kernel's clock is the TSC, it is read from the TSC, a real clock read being made once every few
 * microseconds per thread, and is at most a few microseconds late. Elsewhere a clock read costs
 * more than the rest of the call, so while the advancing thread is running (and not running
 * callbacks itself) the delay is queued and that thread reads the clock once it has taken the
 * timer in: "now" is then late by the time the timer waited in the queue, the thread's work before
 * it next takes timers in, callbacks excluded (in two races, a batch of callbacks on that thread or
 * its wake-up); otherwise the caller reads the clock (docs/design.md, "The clock"). So two equal
 * delays from one thread, the first queued and the second not, can fire in the reverse order.
 * @id: receives the id before the timer can fire (so fn may read it); may be NULL.
 * Return: 0; -EINVAL if t or fn is NULL; -ERANGE if now + delay_ns passes UINT64_MAX; -EAGAIN if
 *         max_pending timers are pending; -ESHUTDOWN once stop has begun; -ENOMEM.
 * Complexity: O(1): a TSC read (or a clock read, or none), a pop from a per-thread-shard free
 *             stack, one atomic exchange on the queue; a system call only to wake the advancing
 *             thread when this timer is due before the time it sleeps until (a queued delay: when
 *             it has just gone to sleep), or when the shard's free records run out.
 * Thread safety: any thread, including callbacks; lock-free (but when the pool must grow, which
 *                takes a mutex shared by growing producers only).
 */
CHIME_API int chime_timer_schedule(chime_timer *t, uint64_t delay_ns, chime_fn *fn, void *arg,
                                   chime_id *id);

/*
 * As chime_timer_schedule, at an absolute CLOCK_MONOTONIC deadline (a past one fires at once), such
 * as chime_timer_now() + delay. No clock read. Return, complexity and thread safety as
 * chime_timer_schedule (no -ERANGE).
 */
CHIME_API int chime_timer_schedule_at(chime_timer *t, uint64_t deadline_ns, chime_fn *fn,
                                      void *arg, chime_id *id);

/*
 * Schedule fn(arg) at now + first_delay_ns and then every period_ns (rounded up to whole ticks)
 * until cancelled, without drift. A run never overlaps the previous run of the same timer: with
 * workers, a boundary that comes while the last run is still going is skipped. A timer whose next
 * boundary would pass the clock's range (UINT64_MAX ns) ends at its last one, as a one-shot timer
 * does (fired; if that boundary is skipped, once the run still going is over). Under
 * CHIME_STOP_DRAIN a periodic timer is not waited for: it goes to on_unfired.
 * Return: as chime_timer_schedule; -EINVAL also if period_ns is 0.
 * Complexity and thread safety: as chime_timer_schedule.
 */
CHIME_API int chime_timer_schedule_every(chime_timer *t, uint64_t first_delay_ns,
                                         uint64_t period_ns, chime_fn *fn, void *arg,
                                         chime_id *id);

/*
 * Cancel a timer. Returns 0 exactly when the callback will not start after this call returns: a
 * one-shot timer had not begun firing; a periodic timer fires no more (a run already started, maybe
 * this very one, completes; a run fired but still waiting for a worker is withdrawn). A one-shot
 * timer that fired and waits for a worker has begun firing (-ENOENT). The timer's memory is reclaimed
 * in the advancing thread's next iteration: its next wake-up, which a cancel does not bring forward
 * (so the old deadline, if the timer was the earliest).
 * Return: 0; -ENOENT if the timer already fired or started, was cancelled, never existed, or the id
 *         is stale, forged or 0; -EINVAL if t is NULL; -ESHUTDOWN after stop has returned.
 * Complexity: O(1): an id lookup, one compare-and-swap, one atomic exchange on the queue.
 * Thread safety: any thread, including callbacks (a periodic timer may cancel itself); lock-free.
 */
CHIME_API int chime_timer_cancel(chime_timer *t, chime_id id);

/*
 * Move a pending timer to now + delay_ns, keeping its id, callback and argument; a periodic timer
 * continues from there: the new deadline is its next boundary, so one that comes while a run
 * already started is still going is skipped like any other (the next run is a period later; a run
 * fired but not started yet is withdrawn instead, and the new deadline stands). If it returns 0,
 * the timer will not fire at its old deadline. Two concurrent reschedules of one timer: one of
 * them wins.
 * Return: 0; -ENOENT as chime_timer_cancel (one-shot already firing, cancelled, stale...); -EINVAL if
 *         t is NULL; -ERANGE as chime_timer_schedule; -ESHUTDOWN after stop has returned.
 * Complexity and thread safety: as chime_timer_cancel, plus a clock read.
 */
CHIME_API int chime_timer_reschedule(chime_timer *t, chime_id id, uint64_t delay_ns);

/*
 * Stop the runtime. CHIME_STOP_DRAIN refuses new timers (-ESHUTDOWN) and returns once every pending
 * one-shot timer has fired and its callback has returned (cancel and reschedule keep working until
 * then); periodic timers go to on_unfired. CHIME_STOP_NOW fires nothing more once the advancing
 * thread sees it: callbacks already running finish, and so do those whose firing had begun (the rest
 * of the batch the advancing thread was firing, at most 1024 callbacks; with workers, what each
 * worker had already taken from its queue, at most 32 each); every timer that will never fire is
 * passed to on_unfired(arg) once, so the caller can free what it gave. on_unfired runs on the
 * advancing thread before stop returns; it may be NULL. The threads are joined before stop returns.
 * Afterwards every call but chime_timer_stats, chime_timer_now and chime_timer_free returns
 * -ESHUTDOWN (after its own argument checks: -EINVAL, and a schedule's -ERANGE, come first).
 * Return: 0; -EINVAL if t is NULL or how is neither mode; -EDEADLK if called from one of t's
 *         callbacks (or on_unfired); -ESHUTDOWN if stop was already called.
 * Complexity: O(pending + pool capacity); DRAIN also waits for the last deadline.
 * Thread safety: any thread but t's own (see -EDEADLK); a second concurrent stop gets -ESHUTDOWN.
 */
CHIME_API int chime_timer_stop(chime_timer *t, enum chime_stop how, chime_fn *on_unfired);

/*
 * Stop the runtime if it is running (as CHIME_STOP_NOW without on_unfired) and free everything. To
 * have every timer that will not fire handed back, call chime_timer_stop(t, CHIME_STOP_NOW,
 * on_unfired) first: free then finds the runtime stopped.
 * @t: may be NULL (no-op).
 * Complexity: O(pool capacity). Thread safety: no other call on t may be running or follow; must not
 * be called from one of t's callbacks.
 */
CHIME_API void chime_timer_free(chime_timer *t);

/*
 * Read the counters (see struct chime_stats). Read while timers are in flight they are a snapshot of
 * what the advancing thread has applied: pending is computed as scheduled - fired - cancelled -
 * unfired with scheduled read last, so it is never negative. A NULL t or out is a no-op.
 * Complexity: O(buckets). Thread safety: any thread, any time before chime_timer_free.
 */
CHIME_API void chime_timer_stats(const chime_timer *t, struct chime_stats *out);

/*
 * The runtime's clock: CLOCK_MONOTONIC in nanoseconds, the time base of chime_timer_schedule_at's
 * deadlines. chime_timer_schedule_at(t, chime_timer_now(t) + d, ...) never fires before d has passed.
 * Return: the time; 0 if t is NULL. Complexity: O(1): one clock read.
 * Thread safety: any thread, any time before chime_timer_free.
 */
CHIME_API uint64_t chime_timer_now(const chime_timer *t);

#ifdef __cplusplus
}
#endif

#endif /* CHIME_TIMER_H */
