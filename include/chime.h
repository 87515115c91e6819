/* SPDX-License-Identifier: MIT */
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

/*
 * The version of this header: MAJOR.MINOR.PATCH, and packed as (MAJOR << 16) | (MINOR << 8) | PATCH
 * so that versions compare as integers. chime_version() returns the packed version of the library
 * the program runs with. The build refuses to configure if these disagree with meson.build's version.
 */
#define CHIME_VERSION_MAJOR 0
#define CHIME_VERSION_MINOR 2
#define CHIME_VERSION_PATCH 0
#define CHIME_VERSION ((CHIME_VERSION_MAJOR << 16) | (CHIME_VERSION_MINOR << 8) | CHIME_VERSION_PATCH)

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
 * The CHIME_LAYOUT_* macros are designated initializers for a chime_wheel_config or a
 * chime_timer_config: struct chime_wheel_config cfg = { .start = now, CHIME_LAYOUT_SECONDS };
 * C++ before C++20 has no designated initializers: it names a layout with chime_layout_*() below.
 */
#define CHIME_LAYOUT_MILLISECONDS .levels = 5, .slots = { CHIME__SLOTS_MILLISECONDS }
/* The same clock with a one-second tick: 60 s, 60 min, 24 h, 512 days. */
#define CHIME_LAYOUT_SECONDS .levels = 4, .slots = { CHIME__SLOTS_SECONDS }
#define CHIME__SLOTS_MILLISECONDS 1000, 60, 60, 24, 512
#define CHIME__SLOTS_SECONDS 60, 60, 24, 512

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

/* Copy a layout's n slot counts into slots[] and zero the rest; returns n. Not for direct use. */
static inline unsigned chime__layout(uint32_t slots[CHIME_MAX_LEVELS], const uint32_t *layout,
                                     unsigned n)
{
    for (unsigned i = 0; i < CHIME_MAX_LEVELS; i++)
        slots[i] = i < n ? layout[i] : 0;
    return n;
}

/*
 * Name a layout without designated initializers (C++ before C++20, or C that fills a config field
 * by field): store the layout's slot counts in slots[] (entries past its levels set to 0) and return
 * its number of levels, so one line sets a chime_wheel_config or a chime_timer_config alike:
 *     cfg.levels = chime_layout_seconds(cfg.slots);
 * The result is the same layout as the CHIME_LAYOUT_* macro of that name.
 * @slots: the config's slots[]; must not be NULL.
 * Return: the layout's number of levels (5 for milliseconds, 4 for seconds).
 * Complexity: O(CHIME_MAX_LEVELS). Thread safety: any thread (slots is the caller's).
 */
static inline unsigned chime_layout_milliseconds(uint32_t slots[CHIME_MAX_LEVELS])
{
    static const uint32_t layout[] = { CHIME__SLOTS_MILLISECONDS };
    return chime__layout(slots, layout, (unsigned)(sizeof(layout) / sizeof(layout[0])));
}

static inline unsigned chime_layout_seconds(uint32_t slots[CHIME_MAX_LEVELS])
{
    static const uint32_t layout[] = { CHIME__SLOTS_SECONDS };
    return chime__layout(slots, layout, (unsigned)(sizeof(layout) / sizeof(layout[0])));
}

/*
 * Create a wheel. Deadlines beyond the layout's top level are held in hidden levels of 64 slots
 * added above it, so every deadline up to UINT64_MAX costs the same O(1) per level it passes.
 * @out: receives the wheel; untouched on error.
 * @cfg: the layout and start time; NULL means start 0 with the default layout. Levels whose span
 *       would exceed 2^64 ticks are accepted and simply never used.
 * Return: 0; -EINVAL if out is NULL, levels > CHIME_MAX_LEVELS, or a used slots[i] is outside
 *         2..CHIME_MAX_SLOTS; -ENOMEM.
 * Complexity: O(levels): the slot tables are mapped, not written (a page becomes resident when a
 * slot on it is first used).
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
 * wheel's time of scheduling. A wheel holds at most 2^28 timers.
 * @id: receives the timer's id; may be NULL if the timer will never be cancelled.
 * Return: 0; -EINVAL if w or fn is NULL; -ENOMEM (out of memory, or 2^28 timers pending; nothing is
 *         scheduled).
 * Complexity: O(1) amortised: a node from the free list, a compare per level below the timer's, one
 * multiply, an append to a slot's array (which grows, rarely, by a realloc).
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
 * callback stops all later firings and returns 0. Never allocates.
 * Return: 0; -ENOENT if id is not pending (fired one-shot, cancelled, stale, forged, or 0);
 *         -EINVAL if w is NULL.
 * Complexity: O(1) amortised: one node read and one store (a tombstone in the timer's slot); a slot
 * whose tombstones reach twice its timers is compacted then, which the cancels that made them pay
 * for. The node is free for reuse on return.
 * Thread safety: as chime_wheel_schedule().
 */
CHIME_API int chime_wheel_cancel(chime_wheel *w, chime_id id);

/*
 * Move a pending timer to a new deadline, keeping its id, callback and argument. For ordering it
 * counts as a new schedule. A periodic timer continues from the new deadline: deadline + k*period.
 * Return: 0; -ENOENT if id is not pending; -EINVAL if w is NULL; -ENOMEM if the timer's new slot
 *         could not grow (the timer stays pending at its old deadline).
 * Complexity: O(1) amortised: as a schedule and a cancel.
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

/* ==== Durable timers ==========================================================================
 *
 * A chime_store holds keyed timers that survive the process: every put, cancel and acknowledgement
 * is recorded in a journal (a directory of append-only, checksummed files; the default backend) before
 * it is reported durable, and a restart finds every pending timer again. Timers fire by running one
 * handler, on the workers of a threaded runtime (chime_timer_*, above) that the store owns. The store
 * uses only the runtime's public API; the runtime knows nothing of disks. docs/design.md explains the
 * journal, recovery and the contract below; lib/store/format.md is the on-disk format.
 *
 * The contract shared by every function below:
 *   - A key (1 to CHIME_STORE_KEY_MAX bytes, compared as bytes) names at most one pending timer. A
 *     put with a pending key replaces its due time and payload: the old one will not fire.
 *   - Deadlines are wall-clock: CLOCK_REALTIME in nanoseconds since the epoch, because they outlive
 *     the process and the machine's boot. A timer never fires before its due time by the wall clock:
 *     if the clock steps back, nothing fires early; if it steps forward, what became due fires (within
 *     max_fires_per_s). A due time already past fires at once.
 *   - AT LEAST ONCE. A handler that returned 0 has been acknowledged: the timer is removed for good
 *     (durably by the next group commit). A handler that was running, or had fired and not been
 *     acknowledged, when the process died runs again after the restart with attempt + 1. A handler can
 *     therefore run more than once for one put: HANDLERS MUST BE IDEMPOTENT (cancel an order only if
 *     it is still unpaid; deduplicate by key and due_ns). attempt > 1 says "this may have run before".
 *   - Only timers due within horizon_ns of now are held in memory; the rest stay on disk, grouped by
 *     due time, and are loaded ahead of their time. Memory follows the horizon, not the total.
 *   - Errors are negative errno values. -EIO (a write or fsync failed) and -ENOSPC (the disk is full)
 *     are sticky: nothing is reported durable after them, no handler starts any more, and every later
 *     put, cancel, sync and dead-letter call returns that error until the store is closed and opened
 *     again (an fsync error cannot be retried safely: the kernel may have dropped the data it failed
 *     to write). Recovery on the next open keeps everything that had been reported durable.
 *
 * Durable timers on PostgreSQL. With cfg->postgres set, timers live in a PostgreSQL database (schema
 * `chime`, created once by `chime-store --postgres CONNINFO init`) that every process opening it
 * shares; the contract above holds across them. Any process (node) puts and cancels any key; each
 * key hashes to a shard, and a shard's timers are fired by its owner, the node holding its lease.
 * Leases expire by the database's clock; a node that dies or is paused past lease_ns loses its
 * shards to the others, which fire its pending and unacknowledged timers (attempt + 1). Every
 * firing, acknowledgement and retry is checked against the lease's epoch in the same transaction, so
 * a node that comes back from a pause cannot record them in its old epoch; a handler already past
 * its start when the pause began runs on, which is what chime_fire.fence is for. With
 * CHIME_SYNC_EACH a put or cancel returns once its transaction committed (one commit serves every
 * thread waiting on that connection: four per process). A lost connection or a restarted server is
 * retried, not an error: calls wait for it. -EIO then means the database rejected chime's
 * statements (a damaged or foreign schema). docs/design.md, "Durable timers on PostgreSQL", says
 * more; the fields are in struct chime_store_config.
 */

typedef struct chime_store chime_store;

#define CHIME_STORE_KEY_MAX 256       /* bytes; keys are 1 to 256 bytes */
#define CHIME_STORE_PAYLOAD_MAX 65536 /* bytes; payloads are 1 to 65536 bytes */

enum chime_sync {
    CHIME_SYNC_EACH = 1,     /* put and cancel return once their record is on stable storage (one
                                group commit, one fdatasync, serves every thread waiting at that
                                moment) */
    CHIME_SYNC_INTERVAL = 2, /* they return at once; records reach stable storage within
                                sync_interval_ns; chime_store_sync() waits for everything before it.
                                A crash can undo the puts and cancels of the last interval */
};

struct chime_store_config {            /* zero fields mean the defaults */
    const char *path;                  /* directory of the journal; created if absent (not its
                                          parents); one process at a time. Required,
                                          unless postgres is set */
    enum chime_sync sync;              /* 0 = CHIME_SYNC_EACH */
    uint64_t sync_interval_ns;         /* 0 = 1 ms; CHIME_SYNC_INTERVAL only */
    uint64_t horizon_ns;               /* timers due later than now + horizon are kept on disk only;
                                          0 = 1 hour; at least 1 s (smaller values are raised to it) */
    uint64_t max_fires_per_s;          /* handlers started per second at most (a restart after a long
                                          outage must not flood downstream); 0 = no limit */
    unsigned max_attempts;             /* firings of one timer at most: a retry asked for after the
                                          last one, or a restart finding the last one unacknowledged,
                                          sends it to the dead letters instead; 0 = 10 */
    struct chime_timer_config runtime; /* tick and workers on which handlers run (as chime_timer_new;
                                          max_pending is ignored) */
    /* PostgreSQL (see "Durable timers on PostgreSQL" below; the journal ignores these fields). */
    const char *postgres;              /* a libpq connection string ("host=db dbname=app"): when set,
                                          timers live in that database, in the schema `chime` that
                                          `chime-store --postgres CONNINFO init` created, and every
                                          process that opens it shares them; path is then unused */
    const char *node;                  /* this process's name in the cluster (at most 63 bytes);
                                          NULL = host name and pid. Two live processes must not share
                                          one (their leases would be one) */
    unsigned shards;                   /* fixed when the schema is created (chime-store init
                                          --shards); 0 = the schema's. Any other value must equal it
                                          (else open fails with -EINVAL) */
    uint64_t lease_ns;                 /* how long a shard's owner may go silent before another node
                                          takes it over; 0 = 10 s; at least 200 ms (smaller values
                                          are raised to it) */
};

/* One firing, as the handler (and a dead-letter listing) sees it. The pointers are valid only during
 * the call. */
struct chime_fire {
    const void *key;
    size_t key_len;         /* the caller's id for the timer (an order number) */
    const void *payload;
    size_t payload_len;     /* opaque bytes stored with it */
    uint64_t due_ns;        /* CLOCK_REALTIME, ns since the epoch, exactly as it was put (a retry's
                               due time is when the handler returned plus its delay) */
    uint32_t attempt;       /* 1 the first time; more after a retry, or after a restart found it
                               fired but not acknowledged (a firing is recorded 2 ms before its due
                               time: a crash in those 2 ms counts it though the handler never ran).
                               For a dead letter: the firings made */
    uint64_t fence;         /* the fencing token of this firing: 0 with the journal; with
                               PostgreSQL, epoch << 16 | shard, where epoch is the lease under which
                               the firing was recorded. For one key it only grows from one owner to
                               the next, so a downstream system that remembers the greatest fence it
                               has seen for a key and refuses smaller ones shuts out a node that was
                               paused past its lease. 0 for a dead letter */
};

/* What a handler returns: 0 = done (acknowledged; removed for good). > 0 = fire again after that many
 * ns, counted from when the handler returned (a retry; attempt + 1). CHIME_STORE_DEAD (or any other
 * negative value) = give up now: the timer goes to the dead letters. */
#define CHIME_STORE_DEAD ((int64_t)-1)

/*
 * A handler runs on the store's runtime (its advancing thread, or one of its workers), never twice at
 * once for the same key: a newer firing of a key whose handler is running waits for it to return. It
 * may call any chime_store_* function but chime_store_close on its own store. A long handler holds its
 * worker (and with no workers, the firing of every other timer) for as long as it runs.
 */
typedef int64_t chime_handler(void *ctx, const struct chime_fire *fire);

/*
 * Open (or create) the store in cfg->path, replay its journal, and start firing: timers already due
 * fire at once (within max_fires_per_s), those due within the horizon are loaded, the rest wait on
 * disk. A torn tail left by a crash is cut at the last whole record; nothing that was reported durable
 * is lost.
 * @out: receives the store; untouched on error.  @handler: called for every firing; @ctx is its first
 * argument.
 * Return: 0; -EINVAL if out, cfg or handler is NULL, cfg->path and cfg->postgres are both NULL,
 *         cfg->sync is not a chime_sync, or the runtime config is invalid (as chime_timer_new);
 *         -EBUSY if another process (or another open store in this one) has the directory open;
 *         -EBADMSG if the journal is damaged other than by a torn tail (a checksum fails in a file
 *         that had been completely written: run `chime-store verify` on the directory); -ENOMEM;
 *         -EIO, -ENOSPC, or another negative errno from the file system (-EACCES, -ENOTDIR, ...);
 *         -ECHILD if a thread could not be started.
 *         With cfg->postgres: -ENOTSUP if this build has no PostgreSQL support (libpq);
 *         -ECONNREFUSED if the database cannot be reached (open does not wait for it); -ENOENT if it
 *         has no schema `chime` (run chime-store --postgres CONNINFO init); -EPROTO if the schema is
 *         another version; -EINVAL also if cfg->shards differs from the schema's or cfg->node is
 *         empty or over 63 bytes; -EBUSY if a live process already uses cfg->node; -EIO if the
 *         database rejects chime's statements.
 * Complexity: O(records in the journal) to replay: the journal is read once (1.2 to 1.7 M records/s
 *             on a loaded 2-core VM: 10^7 timers in 7 to 9 s; see docs/perf.md); plus O(timers due
 *             within the horizon) to load them. The key index is rebuilt in memory during the open
 *             (about 50 bytes a key: 513 MB for 10^7 keys), then moved to a file. With PostgreSQL: a
 *             few connections (ten per node), one lease round (which takes this node's share of
 *             the free shards), and a read of the owned shards' timers due within the horizon.
 * Thread safety: any thread.
 */
CHIME_API int chime_store_open(chime_store **out, const struct chime_store_config *cfg,
                               chime_handler *handler, void *ctx);

/*
 * Schedule the timer `key` to fire at due_ns (wall clock) with a copy of payload; if key is pending,
 * replace its due time and payload instead. If key's handler is running, this schedules a new firing:
 * the running one's acknowledgement (or retry) does not remove it.
 * Return: 0 (with CHIME_SYNC_EACH: the put is on stable storage); -EINVAL if s, key or payload is NULL,
 *         or key_len or payload_len is 0 or over its maximum (nothing is written); -EIO, -ENOSPC (the
 *         store has failed: see above; this put is not durable); -ESHUTDOWN once close has begun;
 *         -ENOMEM.
 * Complexity: O(1) expected: a hash lookup in memory and one in the journal's key index (in memory
 *             up to about a quarter of a million keys; beyond, in a file held in the page cache: a
 *             new key makes no system call, a pending key's slot costs a 32-byte pread, and the
 *             index's writes go to the file in batches, at times by the putting thread, which then
 *             holds one of 32 index locks for a few ms), one record appended; with
 *             CHIME_SYNC_EACH a wait for the next group commit (one fdatasync shared with every
 *             waiting thread). Waits also while the journal's flusher is more than a few segments
 *             behind (the disk sets the pace).
 * Thread safety: any thread, handlers included.
 */
CHIME_API int chime_store_put(chime_store *s, const void *key, size_t key_len, const void *payload,
                              size_t payload_len, uint64_t due_ns);

/*
 * Cancel key's pending timer. Returns 0 exactly when the handler will not start for that key (again):
 * it had not started (a timer that fired and waits for max_fires_per_s has not started). A firing is
 * recorded 2 ms before its due time (so that the handler can start on time): from then on it is
 * starting, and cannot be cancelled.
 * Return: 0 (with CHIME_SYNC_EACH: the cancel is on stable storage, and no crash can undo it);
 *         -ENOENT if key has no pending timer (never put, fired and acknowledged, cancelled, or in the
 *         dead letters); -EINPROGRESS if key's handler is running, or its firing is recorded (from 2
 *         ms before its due time), and no newer put is pending: it cannot be cancelled; -EINVAL if
 *         s or key is NULL or key_len is 0 or over CHIME_STORE_KEY_MAX; -EIO, -ENOSPC, -ESHUTDOWN,
 *         -ENOMEM as chime_store_put.
 * Complexity: as chime_store_put.
 * Thread safety: any thread, handlers included (a handler cancelling its own key gets -EINPROGRESS).
 */
CHIME_API int chime_store_cancel(chime_store *s, const void *key, size_t key_len);

/*
 * Wait until every put, cancel, acknowledgement and dead-letter change that returned before this call
 * is on stable storage.
 * Return: 0; -EINVAL if s is NULL; -EIO, -ENOSPC if the store has failed; -ESHUTDOWN once close has
 *         begun.
 * Complexity: one group commit. Thread safety: any thread, handlers included.
 */
CHIME_API int chime_store_sync(chime_store *s);

/*
 * Stop firing, wait for the handlers that are running, make everything durable and free the store.
 * Pending timers stay in the journal for the next open. s is freed even when an error is returned.
 * Return: 0; -EINVAL if s is NULL; -EDEADLK if called from one of s's handlers (nothing is done);
 *         -EIO, -ENOSPC if the store had failed or the last sync failed (what was reported durable
 *         stays durable).
 * Complexity: O(timers in memory) plus the wait for running handlers and one group commit.
 * Thread safety: any thread but s's handlers; no other call on s may be running or follow.
 */
CHIME_API int chime_store_close(chime_store *s);

/* ---- Dead letters: timers whose handler gave up, or that ran out of attempts ----
 * They keep their key, payload, due time and attempt count, survive restarts, and stay until requeued
 * or dropped. A key names at most one dead letter (a newer one replaces it), independently of its
 * pending timer. */

/* Called once per dead letter; return nonzero to stop the listing early. */
typedef int chime_dead_fn(void *ctx, const struct chime_fire *dead);

/*
 * Call fn(ctx, dead) for each dead letter, in the order they died. The list is a snapshot taken when
 * the call begins; fn runs with no lock of the store held and may call chime_store_* on s (requeue
 * or drop what it is shown, say).
 * Return: 0; the first nonzero value fn returned; -EINVAL if s or fn is NULL; -EIO, -ENOSPC,
 *         -ESHUTDOWN as chime_store_sync; -ENOMEM.
 * Complexity: O(dead letters) plus a read of the journal's dead-letter records; flushes the journal's
 *             newest records first (one file written and synced).
 * Thread safety: any thread, handlers included.
 */
CHIME_API int chime_store_dead_list(chime_store *s, chime_dead_fn *fn, void *ctx);

/*
 * Move key's dead letter back to the pending timers, due at due_ns, with its payload and attempt
 * reset to a first firing; a pending timer of the same key is replaced (as chime_store_put).
 * Return: 0 (durable as chime_store_put); -ENOENT if key has no dead letter; -EINVAL, -EIO, -ENOSPC,
 *         -ESHUTDOWN, -ENOMEM as chime_store_cancel.
 * Complexity and thread safety: as chime_store_put.
 */
CHIME_API int chime_store_dead_requeue(chime_store *s, const void *key, size_t key_len,
                                       uint64_t due_ns);

/*
 * Delete key's dead letter for good.
 * Return: 0 (durable as chime_store_cancel); -ENOENT if key has no dead letter; -EINVAL, -EIO,
 *         -ENOSPC, -ESHUTDOWN, -ENOMEM as chime_store_cancel.
 * Complexity and thread safety: as chime_store_cancel.
 */
CHIME_API int chime_store_dead_drop(chime_store *s, const void *key, size_t key_len);

struct chime_store_stats {
    uint64_t pending;     /* pending timers, in memory and on disk (a running one counts until
                             its handler's outcome is recorded) */
    uint64_t loaded;      /* of those, the ones due within the horizon, held in memory */
    uint64_t running;     /* firings recorded whose outcome is not yet recorded (a handler about
                             to start at its due time, running, or its outcome being written) */
    uint64_t dead;        /* dead letters */
    uint64_t fired;       /* firings recorded since open (each one's handler starts at its due
                             time, unless the store closes or fails first) */
    uint64_t acked;       /* handlers that returned 0 since open */
    uint64_t retried;     /* handlers that asked for a retry since open */
    uint64_t buried;      /* timers sent to the dead letters since open */
    uint64_t journal_bytes; /* bytes the journal's files hold on disk */
    int error;            /* 0, or the sticky -EIO / -ENOSPC */
};

/*
 * Read the store's counters (a snapshot: each is exact at some moment during the call). A NULL s or
 * out is a no-op. With PostgreSQL, pending, dead and journal_bytes (the schema's size) come from a
 * count that the node runs in the database while stats are being asked for, at most every 500 ms:
 * they may be that much older, and the first call after a quiet spell returns the last count (0
 * before any).
 * Complexity: O(files in the journal's directory, a few dozen): journal_bytes is read from it. With
 *             PostgreSQL, O(1) here, and O(pending keys) in the database every 500 ms at most.
 * Thread safety: any thread, handlers included.
 */
CHIME_API void chime_store_stats(const chime_store *s, struct chime_store_stats *out);

/*
 * A static, human-readable description of err (a negative errno from chime, or 0).
 * Return: never NULL. Complexity: O(1). Thread safety: any thread.
 */
CHIME_API const char *chime_strerror(int err);

/*
 * The version of the library the program runs with, packed as CHIME_VERSION is: compare it with
 * CHIME_VERSION (the header the program was compiled with) to detect a library older than the header.
 * Return: (major << 16) | (minor << 8) | patch. Complexity: O(1). Thread safety: any thread.
 */
CHIME_API uint32_t chime_version(void);

#ifdef __cplusplus
}
#endif

#endif /* CHIME_H */
