/* SPDX-License-Identifier: MIT */
/*
 * chime: a hierarchical, cascading timing-wheel engine.
 *
 * This header and the two it includes at its end are the whole public API and its reference:
 * chime.h the conventions and the single-threaded wheel, chime_timer.h the threaded runtime,
 * chime_store.h durable timers. docs/design.md explains why it is built the way it is; README.md
 * shows it in use.
 *
 * Conventions shared by every function below:
 *   - Errors are negative errno values (-EINVAL, -ENOMEM, -ENOENT); chime_strerror() names them.
 *   - Time is an unsigned 64-bit tick count chosen by the caller (milliseconds for an event loop,
 *     seconds for a batch scheduler). Every value from 0 to UINT64_MAX is a valid deadline.
 *   - A chime_wheel is single-threaded: it has no lock and no atomic. Calls on one wheel must not
 *     overlap; distinct wheels are independent. Callbacks run inside chime_wheel_advance() and may
 *     call any function on the same wheel except chime_wheel_free() (see each function).
 *   - A chime_timer (the threaded runtime, chime_timer.h) is the thread-safe engine: every function
 *     but new and free may be called from any thread, callbacks included.
 *   - A chime_store (durable timers, chime_store.h) keeps keyed timers across restarts.
 *
 * Include this header: it includes chime_timer.h and chime_store.h, one header per layer.
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
 * Complexity: O(the most timers ever pending at once + slots): the node arrays, which never shrink,
 * are walked for the pending ones.
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
 * Complexity: O(1) amortised: one node read; the tombstone in the timer's slot is written with
 * fifteen others, by every sixteenth cancel or by the next advance; a slot whose tombstones exceed
 * twice its timers (and 8) is compacted then, which the cancels that made them pay for. The node is
 * free for reuse on return.
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
 * time at or before now (this call's argument) and at or after chime_wheel_now(), which is at most
 * the tick that could not be done, and the next advance carries on.
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
 * from. A value <= chime_wheel_now() means "advance now": a timer is already due. (From inside a
 * callback, while timers due by the current tick are still to fire, it is chime_wheel_now(), which
 * can be later than the deadline of a timer that callback scheduled in the past: both mean "due".)
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

/*
 * A static, human-readable description of err (a negative errno from chime, or 0; another negative
 * errno, such as one of the file system's that chime_store_open passes on, gets the C library's
 * description, "unknown error" where it has none).
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

/* The other layers of the API, in the order they build on each other. Each of them, included on its
 * own, includes this header instead, which comes back to it here. */
#include "chime_timer.h" /* the threaded runtime: chime_timer_* */
#include "chime_store.h" /* durable timers: chime_store_* */

#endif /* CHIME_H */
