/* Internal to chime: what the runtime's tests reach beyond chime.h. */
#ifndef CHIME_RUNTIME_H
#define CHIME_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "chime.h"

/* A clock in nanoseconds; the runtime's default is CLOCK_MONOTONIC. */
typedef uint64_t chime__clock_fn(void *arg);

/*
 * chime_timer_new with an injected clock, so tests control time instead of sleeping. With such a
 * clock the advancing thread never sleeps on a timeout: it waits to be woken (a schedule due before
 * its wake-up time, a stop, or chime__timer_sync after the test moved the clock).
 */
int chime__timer_new_clocked(chime_timer **out, const struct chime_timer_config *cfg,
                             chime__clock_fn *clock, void *clock_arg);

/*
 * Return once the advancing thread has gone through a whole iteration that began after this call:
 * every call that returned before it has been applied, everything due by the clock's value at that
 * point has fired (callbacks on workers may still be running), and memory has been trimmed. Any
 * thread but the runtime's own; not after stop.
 */
void chime__timer_sync(chime_timer *t);

/* Wake the advancing thread (after moving an injected clock) without waiting for it. Any thread,
 * also while a stop is under way. */
void chime__timer_poke(chime_timer *t);

/* What the runtime holds memory for: record capacity and wheel nodes. Exact after chime__timer_sync. */
void chime__timer_memory(const chime_timer *t, size_t *records, size_t *wheel_nodes);

#endif /* CHIME_RUNTIME_H */
