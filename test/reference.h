/* SPDX-License-Identifier: MIT */
/*
 * The trivially correct timer structure the differential test compares against: a sorted array of
 * (effective deadline, sequence). Its rules are chime_wheel's, written as plainly as possible:
 *   - a timer's key is max(deadline, now when it was (re)scheduled); ties go to the earlier schedule;
 *   - advance(T) fires, smallest key first, every timer with key <= T; while it fires, now is
 *     max(now, key); a periodic timer re-arms before it is reported, at the first
 *     deadline + k*period > T (k >= 1), and ends if that passes UINT64_MAX;
 *   - then now = T. T < now does nothing.
 * Callbacks that act on the structure (an optional hook, for the fuzz target's re-entrant mode):
 * a timer scheduled or rescheduled while one fires, for a tick not after the current one
 * (key == now), waits for the next call (flag next_call); when the call ends, such timers take
 * now as their key, in the order they were made, behind everything else due then (chime_wheel:
 * the due array, fired after the rest of a half-fired tick, in arrival order).
 */
#ifndef CHIME_TEST_REFERENCE_H
#define CHIME_TEST_REFERENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ref_timer {
    uint64_t key, seq, deadline, period;
    uint64_t handle; /* the subject's id for this timer */
    uint64_t tag;    /* what its callback reports */
    bool next_call;  /* made due by a callback of the current or last call: not fired by it */
};

struct ref_fired {
    uint64_t tag, now;
};

struct ref;
/* Called for each timer fired, after it is reported (and a periodic one re-armed), with a copy of
 * it; it may schedule, remove and reschedule. */
typedef void ref_hook(struct ref *r, const struct ref_timer *fired, void *arg);

struct ref {
    uint64_t now, seq;
    struct ref_timer *v; /* sorted by (key, seq) */
    size_t n, cap;
    bool firing;         /* inside ref_advance_some */
    ref_hook *on_fire;   /* optional */
    void *hook_arg;
};

void ref_init(struct ref *r, uint64_t start);
void ref_destroy(struct ref *r);
void ref_schedule(struct ref *r, uint64_t deadline, uint64_t period, uint64_t handle, uint64_t tag);
/* Index of the timer with this handle, or -1. */
long ref_find(const struct ref *r, uint64_t handle);
void ref_remove(struct ref *r, size_t i);
void ref_reschedule(struct ref *r, size_t i, uint64_t deadline);
/* Fire what advance(T) fires into out (grown as needed); returns how many. Ended one-shot handles
 * are appended to *dead (grown as needed). */
size_t ref_advance(struct ref *r, uint64_t T, struct ref_fired **out, size_t *out_cap,
                   uint64_t **dead, size_t *ndead, size_t *dead_cap);
/* The same, but fire at most `limit` timers, as the runtime's bounded advance does: a periodic one
 * re-arms after T all the same; now is T only once every timer with key <= T has fired, else the
 * key of the last one fired. */
size_t ref_advance_some(struct ref *r, uint64_t T, size_t limit, struct ref_fired **out,
                        size_t *out_cap, uint64_t **dead, size_t *ndead, size_t *dead_cap);
/* Take the subject's time after a bounded advance, or one that ran out of memory. The wheel may
 * stop short of T on a cascade though the reference fired all it had, or, failing to re-arm a
 * periodic timer, at the tick of that timer, after the reference's last firing: the timers this
 * call's callbacks made due (given r->now as key) take `now` as their key instead, behind
 * everything else due then. */
void ref_stop_at(struct ref *r, uint64_t now);

#endif /* CHIME_TEST_REFERENCE_H */
