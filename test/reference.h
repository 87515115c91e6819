/* SPDX-License-Identifier: MIT */
/*
 * The trivially correct timer structure the differential test compares against: a sorted array of
 * (effective deadline, sequence). Its rules are chime_wheel's, written as plainly as possible:
 *   - a timer's key is max(deadline, now when it was (re)scheduled); ties go to the earlier schedule;
 *   - advance(T) fires, smallest key first, every timer with key <= T; while it fires, now is
 *     max(now, key); a periodic timer re-arms before it is reported, at the first
 *     deadline + k*period > T (k >= 1), and ends if that passes UINT64_MAX;
 *   - then now = T. T < now does nothing.
 */
#ifndef CHIME_TEST_REFERENCE_H
#define CHIME_TEST_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

struct ref_timer {
    uint64_t key, seq, deadline, period;
    uint64_t handle; /* the subject's id for this timer */
    uint64_t tag;    /* what its callback reports */
};

struct ref_fired {
    uint64_t tag, now;
};

struct ref {
    uint64_t now, seq;
    struct ref_timer *v; /* sorted by (key, seq) */
    size_t n, cap;
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

#endif /* CHIME_TEST_REFERENCE_H */
