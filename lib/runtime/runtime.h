/* SPDX-License-Identifier: MIT */
/* Internal to chime: what the runtime's tests, and the store, reach beyond chime.h. */
#ifndef CHIME_RUNTIME_RUNTIME_H
#define CHIME_RUNTIME_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "chime.h"
#include "runtime/clock.h"

/* chime_timer_new's checks of cfg (NULL: the defaults), with nothing made: workers, tick_ns and the
 * layout. The store makes them before it creates a journal, so that an open it refuses leaves
 * nothing behind. Return: 0; -EINVAL. Any thread. */
int chime__timer_config_check(const struct chime_timer_config *cfg);

/*
 * chime_timer_new with an injected clock (its value in ns, for both of the runtime's clocks), so
 * tests control time instead of sleeping. With such a clock the advancing thread never sleeps on a
 * timeout: it waits to be woken (a schedule due before its wake-up time, a stop, or
 * chime__timer_sync after the test moved the clock).
 */
int chime__timer_new_clocked(chime_timer **out, const struct chime_timer_config *cfg,
                             chime__clock_fn *clock, void *clock_arg);

/*
 * Return once the advancing thread has gone through a whole iteration that began after this call:
 * every call that returned before it has been applied, everything due by the clock's value at that
 * point has fired (callbacks on workers may still be running), and, unless a deadline is less than
 * half a millisecond away, the memory it can give back has been given back. Any thread but the
 * runtime's own; not after stop.
 */
void chime__timer_sync(chime_timer *t);

/* Wake the advancing thread (after moving an injected clock) without waiting for it. Any thread,
 * also while a stop is under way. */
void chime__timer_poke(chime_timer *t);

/* Tests only: called on a worker between a periodic run's end (its state's CAS) and the push that
 * brings the record back to the advancing thread. Set it before any runtime starts. */
extern void (*chime__timer_finish_run_hook)(void);

/* Tests only: how every runtime created after it is set treats chime_timer_schedule's delays
 * (lib/runtime/producer.c, RELATIVE SCHEDULES), whatever its clock: 0 as its clock decides; 1 as
 * without a TSC (queued while the thread is ready, else a deadline from the caller's clock); 2
 * always queued, so that every deadline is one the thread gives. */
extern int chime__timer_relative_test;

/* Records the runtime holds memory for. Exact after chime__timer_sync. */
size_t chime__timer_memory(const chime_timer *t);

/* Verify the records' pool and the levels (records.h, levels.h). Only once stop has returned (the
 * advancing thread is joined). Return: NULL, or a description of the first fault. */
const char *chime__timer_check(chime_timer *t);

#endif /* CHIME_RUNTIME_RUNTIME_H */
