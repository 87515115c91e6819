/*
 * chime: a hierarchical, cascading timing-wheel engine.
 *
 * This header is the whole public API and its reference. docs/design.md explains why it is built
 * the way it is; README.md shows it in use.
 *
 * Conventions shared by every function below:
 *   - Errors are negative errno values (-EINVAL, -ENOMEM, -ENOENT); chime_strerror() names them.
 *   - Time is an unsigned 64-bit tick count chosen by the caller (milliseconds for an event loop,
 *     seconds for a batch scheduler). Every value from 0 to UINT64_MAX is a valid deadline.
 *   - A chime_wheel is single-threaded: it has no lock and no atomic. Calls on one wheel must not
 *     overlap; distinct wheels are independent. Callbacks run inside chime_wheel_advance() and may
 *     call any function on the same wheel except chime_wheel_free() (see each function).
 *   - A chime_timer (the threaded runtime, second half of this header) is the thread-safe engine:
 *     every function but new and free may be called from any thread, callbacks included.
 */
#ifndef CHIME_H
#define CHIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(CHIME_BUILDING_LIBRARY) && defined(__GNUC__)
#define CHIME_API __attribute__((visibility("default")))
#else
#define CHIME_API
#endif

/* The most levels a wheel may have; each level has 2 to CHIME_MAX_SLOTS slots. */
#define CHIME_MAX_LEVELS 8
#define CHIME_MAX_SLOTS 4096

/*
 * The default layout: a clock with a millisecond tick. 1000 ms make a second, 60 s a minute,
 * 60 min an hour, 24 h a day, and 512 day slots let the top level span 512 days (about 1.4 years).
 */
#define CHIME_LAYOUT_MILLISECONDS .levels = 5, .slots = { 1000, 60, 60, 24, 512 }
/* The same clock with a one-second tick: 60 s, 60 min, 24 h, 512 days. */
#define CHIME_LAYOUT_SECONDS .levels = 4, .slots = { 60, 60, 24, 512 }

/*
 * A timer handle. 0 is never a valid id. An id names one scheduling of one timer: once that timer
 * has fired (one-shot) or been cancelled, the id is dead for good, even after its memory is reused,
 * and every function given it returns -ENOENT.
 */
typedef uint64_t chime_id;

/* A timer callback; arg is the pointer given when the timer was scheduled. */
typedef void chime_fn(void *arg);

typedef struct chime_wheel chime_wheel;

struct chime_wheel_config {
    uint64_t start;                    /* the wheel's time at creation, in ticks */
    unsigned levels;                   /* 0 = CHIME_LAYOUT_MILLISECONDS (slots[] is then ignored) */
    uint32_t slots[CHIME_MAX_LEVELS];  /* slots per level, lowest first; level i's slot spans level i-1 */
};

/*
 * Create a wheel.
 * @out: receives the wheel; untouched on error.
 * @cfg: the layout and start time; NULL means start 0 with the default layout. Levels whose span
 *       would exceed 2^64 ticks are accepted and simply never used.
 * Return: 0; -EINVAL if out is NULL, levels > CHIME_MAX_LEVELS, or a used slots[i] is outside
 *         2..CHIME_MAX_SLOTS; -ENOMEM.
 * Complexity: O(total slots).
 * Thread safety: any thread; the new wheel belongs to the caller.
 */
CHIME_API int chime_wheel_new(chime_wheel **out, const struct chime_wheel_config *cfg);

/*
 * Destroy a wheel and every timer in it, calling on_unfired(arg) once for each pending timer so
 * the caller can release what it passed (one-shot and periodic alike; in no particular order).
 * @w: may be NULL (no-op).  @on_unfired: may be NULL.
 * Complexity: O(pending + slots).
 * Thread safety: no other call on w may be running; must not be called from one of w's callbacks.
 */
CHIME_API void chime_wheel_free(chime_wheel *w, chime_fn *on_unfired);

/*
 * Schedule fn(arg) to run once, in the first chime_wheel_advance() whose now >= deadline. A deadline
 * at or before chime_wheel_now() fires in the next advance and, for ordering, counts as due at the
 * wheel's time of scheduling.
 * @id: receives the timer's id; may be NULL if the timer will never be cancelled.
 * Return: 0; -EINVAL if w or fn is NULL; -ENOMEM (nothing is scheduled).
 * Complexity: O(1): one node from the pool (no malloc on the steady path), at most `levels` compares.
 * Thread safety: calls on w must not overlap; may be called from w's callbacks.
 */
CHIME_API int chime_wheel_schedule(chime_wheel *w, uint64_t deadline, chime_fn *fn, void *arg,
                                   chime_id *id);

/*
 * Schedule fn(arg) to run at first, first + period, first + 2*period, ... until cancelled. The
 * schedule never drifts: when one advance jumps over several periods, the timer fires once in it and
 * is re-armed at the first boundary after that advance's now. A timer whose next boundary would pass
 * UINT64_MAX ends after its last firing, as a one-shot would. The timer is re-armed before its
 * callback runs, so the callback may cancel or reschedule it.
 * @id: receives the id, valid until the timer is cancelled; may be NULL.
 * Return: 0; -EINVAL if w or fn is NULL or period is 0; -ENOMEM.
 * Complexity: O(1) per firing.
 * Thread safety: as chime_wheel_schedule().
 */
CHIME_API int chime_wheel_schedule_every(chime_wheel *w, uint64_t first, uint64_t period,
                                         chime_fn *fn, void *arg, chime_id *id);

/*
 * Cancel a pending timer: it will not fire (again). Cancelling a periodic timer from inside its own
 * callback stops all later firings and returns 0.
 * Return: 0; -ENOENT if id is not pending (fired one-shot, cancelled, stale, forged, or 0);
 *         -EINVAL if w is NULL.
 * Complexity: O(1): one table lookup, one list unlink. The node is back in the pool on return.
 * Thread safety: as chime_wheel_schedule().
 */
CHIME_API int chime_wheel_cancel(chime_wheel *w, chime_id id);

/*
 * Move a pending timer to a new deadline, keeping its id, callback and argument. For ordering it
 * counts as a new schedule. A periodic timer continues from the new deadline: deadline + k*period.
 * Return: 0; -ENOENT if id is not pending; -EINVAL if w is NULL.
 * Complexity: O(1).
 * Thread safety: as chime_wheel_schedule().
 */
CHIME_API int chime_wheel_reschedule(chime_wheel *w, chime_id id, uint64_t deadline);

/*
 * Advance the wheel's time to now and run every timer due by then. Timers fire in nondecreasing
 * deadline order, ties in the order they were scheduled. While a callback runs, chime_wheel_now()
 * is the tick being fired: the timer's deadline, or, for a timer that was already due when it was
 * scheduled (deadline at or before chime_wheel_now() then), the wheel's time when this advance
 * began, since such timers fire first, before the wheel's time moves; it is never before the
 * deadline and never after now. A timer a callback schedules for a tick not after the current one
 * fires in the next advance; one due later but by now fires in this advance. A now earlier than
 * chime_wheel_now() fires nothing and changes nothing (a clock that stepped back is not an error);
 * so does a call from inside a callback.
 * If memory runs out while timers move down a level (or a periodic timer is re-armed), the advance
 * stops before that point with nothing lost, early or reordered: chime_wheel_next() then reports a
 * time at or before now, and the next advance carries on.
 * Return: how many callbacks ran.
 * Complexity: O(levels + slots holding timers + timers fired + timers cascaded), independent of the
 * number of ticks skipped: each timer cascades at most once per level above the one it ends in,
 * however far away its deadline (up to UINT64_MAX).
 * Thread safety: calls on w must not overlap. w must not be NULL.
 */
CHIME_API size_t chime_wheel_advance(chime_wheel *w, uint64_t now);

/*
 * When to call chime_wheel_advance() next: never later than the earliest pending deadline; exact
 * when that timer sits in the lowest level, otherwise the start of the slot it must first cascade
 * from. A value <= chime_wheel_now() means "advance now": a timer is already due.
 * @deadline: receives the time; untouched on error.
 * Return: 0; -ENOENT if no timer is pending; -EINVAL if w or deadline is NULL.
 * Complexity: O(1): one bit search in the lowest occupied level, no list walk.
 * Thread safety: as chime_wheel_schedule().
 */
CHIME_API int chime_wheel_next(const chime_wheel *w, uint64_t *deadline);

/*
 * How many timers are pending (scheduled, not yet fired or cancelled; periodic timers count until
 * cancelled or ended). Complexity: O(1). Thread safety: as chime_wheel_schedule(). w must not be NULL.
 */
CHIME_API size_t chime_wheel_pending(const chime_wheel *w);

/*
 * The wheel's current time in ticks. Complexity: O(1). Thread safety: as chime_wheel_schedule().
 * w must not be NULL.
 */
CHIME_API uint64_t chime_wheel_now(const chime_wheel *w);

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
    CHIME_STOP_NOW = 2,   /* fire nothing more; every timer that will not fire goes to on_unfired */
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
    uint64_t late_max_ns; /* the latest a callback has started after its deadline */
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
 * Schedule fn(arg) to run once, delay_ns from now (CLOCK_MONOTONIC), rounded up to a tick. "Now" is
 * never earlier than CLOCK_MONOTONIC at the call (so the timer never fires early) and at most a few
 * microseconds later: where the kernel's clock is the TSC, it is read from the TSC, a real clock read
 * being made once every few microseconds per thread (docs/design.md, "The clock").
 * @id: receives the id before the timer can fire (so fn may read it); may be NULL.
 * Return: 0; -EINVAL if t or fn is NULL; -ERANGE if now + delay_ns passes UINT64_MAX; -EAGAIN if
 *         max_pending timers are pending; -ESHUTDOWN once stop has begun; -ENOMEM.
 * Complexity: O(1): a TSC read, a pop from a per-thread-shard free stack, one atomic exchange on the
 *             queue; a system call only to wake the advancing thread when this timer is due before
 *             the time it sleeps until, or when the shard's free records run out.
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
 * workers, a boundary that comes while the last run is still going is skipped. Under
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
 * in the advancing thread's next iteration (its next wake-up), not at its old deadline.
 * Return: 0; -ENOENT if the timer already fired or started, was cancelled, never existed, or the id
 *         is stale, forged or 0; -EINVAL if t is NULL; -ESHUTDOWN after stop has returned.
 * Complexity: O(1): an id lookup, one compare-and-swap, one atomic exchange on the queue.
 * Thread safety: any thread, including callbacks (a periodic timer may cancel itself); lock-free.
 */
CHIME_API int chime_timer_cancel(chime_timer *t, chime_id id);

/*
 * Move a pending timer to now + delay_ns, keeping its id, callback and argument; a periodic timer
 * continues from there. If it returns 0, the timer will not fire at its old deadline. Two concurrent
 * reschedules of one timer: one of them wins.
 * Return: 0; -ENOENT as chime_timer_cancel (one-shot already firing, cancelled, stale...); -EINVAL if
 *         t is NULL; -ERANGE as chime_timer_schedule; -ESHUTDOWN after stop has returned.
 * Complexity and thread safety: as chime_timer_cancel, plus a clock read.
 */
CHIME_API int chime_timer_reschedule(chime_timer *t, chime_id id, uint64_t delay_ns);

/*
 * Stop the runtime. CHIME_STOP_DRAIN refuses new timers (-ESHUTDOWN) and returns once every pending
 * one-shot timer has fired and its callback has returned (cancel and reschedule keep working until
 * then); periodic timers go to on_unfired. CHIME_STOP_NOW fires nothing more: callbacks already
 * running finish, and every timer that will never fire is passed to on_unfired(arg) once, so the
 * caller can free what it gave. on_unfired runs on the advancing thread before stop returns; it may
 * be NULL. The threads are joined before stop returns. Afterwards every call but chime_timer_stats
 * and chime_timer_free returns -ESHUTDOWN.
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

/*
 * A static, human-readable description of err (a negative errno from chime, or 0).
 * Return: never NULL. Complexity: O(1). Thread safety: any thread.
 */
CHIME_API const char *chime_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif /* CHIME_H */
