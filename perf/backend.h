/* SPDX-License-Identifier: MIT */
/*
 * One function table over every timer structure chime is measured against: the wheel (chime itself),
 * the tuned intrusive heap (iheap.h, binary and 4-ary, through an adapter that maps ids onto its
 * timers: for correctness checking only), the id-checked binary heap (heap.h) and the sorted list
 * (list.h). The differential test drives them all through it, so every baseline is checked against
 * the same reference as the wheel.
 *
 * Semantics every backend must share exactly (they are chime_wheel's, one-shot timers only):
 *   - handles are uint64_t, never 0; a handle of a fired or cancelled timer is dead forever, and
 *     cancel/reschedule of a dead, stale or forged handle returns -ENOENT without touching memory;
 *   - a timer's effective deadline is max(deadline, now at the time it was (re)scheduled);
 *   - advance(T) with T < now does nothing and returns 0; otherwise it fires, in order of
 *     (effective deadline, schedule sequence), every timer whose effective deadline is <= T, then
 *     sets now = T; a reschedule takes a new sequence number;
 *   - next() reports a time <= the earliest effective deadline (exact for the baselines), or
 *     -ENOENT when nothing is pending.
 * And inside callbacks (perf/check_baselines.c checks the three agree):
 *   - a firing timer's handle is already dead; while its callback runs, now is max(now, its
 *     effective deadline), and that is the "now" of any (re)schedule the callback makes;
 *   - a timer a callback (re)schedules for a tick not after that now fires in the next advance,
 *     not this one; one due later but by the advance's target fires in this advance;
 *   - advance() called from a callback does nothing and returns 0.
 */
#ifndef CHIME_PERF_BACKEND_H
#define CHIME_PERF_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "chime.h"

#ifdef __cplusplus
extern "C" {
#endif

struct chime_backend {
    const char *name;
    /* Return NULL on allocation failure. capacity_hint: timers expected live at once (may be 0). */
    void *(*create)(uint64_t start, size_t capacity_hint);
    void (*destroy)(void *t);
    int (*schedule)(void *t, uint64_t deadline, chime_fn *fn, void *arg, uint64_t *handle);
    int (*cancel)(void *t, uint64_t handle);
    int (*reschedule)(void *t, uint64_t handle, uint64_t deadline);
    size_t (*advance)(void *t, uint64_t now);
    int (*next)(void *t, uint64_t *deadline);
    size_t (*pending)(void *t);
    /* Debug self-check of the structure's invariants. Return: 0, or -EINVAL. NULL for the wheel
     * (its own check is internal to chime: test_diff.c calls it directly). */
    int (*check)(const void *t);
};

extern const struct chime_backend chime_backend_wheel;
extern const struct chime_backend chime_backend_iheap2; /* the intrusive heap, arity 2 */
extern const struct chime_backend chime_backend_iheap4; /* the intrusive heap, arity 4 */
extern const struct chime_backend chime_backend_heap;
extern const struct chime_backend chime_backend_list;

#ifdef __cplusplus
}
#endif

#endif /* CHIME_PERF_BACKEND_H */
