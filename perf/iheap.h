/* SPDX-License-Identifier: MIT */
/*
 * Baseline 1: a tuned intrusive min-heap of timers, what a C programmer who wants a heap writes (the
 * shape of libuv's timer heap, packed tighter): the heap users are compared against.
 *   - The user owns the timer (struct perf_iheap_timer, embedded in their own object): it holds the
 *     callback, its argument, a sequence number and its position in the heap. No ids, no lookup:
 *     cancel starts at the timer itself and reads its index, O(log n).
 *   - The heap is one array of 16-byte entries with the key inline (effective deadline, pointer to
 *     the timer), so sifting compares keys without leaving the array. The array starts D - 1 entries
 *     into a 64-byte-aligned block, so the D siblings of every node share one cache line (D = 4) or
 *     half of one (D = 2).
 *   - Equal deadlines fire in schedule order: each schedule takes a 32-bit sequence number, kept in
 *     the timer and read only when two deadlines tie (as libuv does with its start_id). It is 32 bits
 *     to keep the timer at 24 bytes; when the numbers run out (after 2^32 - 1 schedules) the heap is
 *     sorted and renumbered 0..n-1, which keeps every order and is a valid heap: O(n log n) once per
 *     4 billion schedules.
 *   - The root is removed with Floyd's bottom-up sift: the hole walks down to a leaf along the
 *     smallest children, then the last entry sifts up from there (it usually belongs near the
 *     bottom), which saves a comparison per level. The smallest child is picked with conditional
 *     moves, not branches, and in a heap too large for the L2 cache each step down prefetches the
 *     children of all D candidates, so the next level's miss overlaps this level's comparisons.
 *   - The arity D is 2 or 4, chosen per heap (perf_iheap_new); each has its own inlined loops, so the
 *     choice costs one predictable branch per call. PERF_IHEAP_ARITY is the one the harness calls
 *     "the heap": the faster of the two on this project's machine (docs/perf.md has the run).
 * Semantics are those of perf/backend.h (chime_wheel's, one-shot timers), with timers in place of
 * handles: a timer that is not pending (never scheduled, fired, cancelled) makes cancel and
 * reschedule return -ENOENT. A timer must not be scheduled on two heaps at once, nor freed while
 * pending; those are the caller's duties, as with any intrusive structure.
 *
 * Not thread-safe: calls on one heap must not overlap.
 */
#ifndef CHIME_PERF_IHEAP_H
#define CHIME_PERF_IHEAP_H

#include <stddef.h>
#include <stdint.h>

#include "chime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PERF_IHEAP_ARITY 4 /* the arity the harness measures as "heap" (see the design note above) */

/* Not pending: the index of a timer that is in no heap. */
#define PERF_IHEAP_IDLE UINT32_MAX

/* The user's part of a timer: embed it in your own object. Initialise it with PERF_IHEAP_TIMER_INIT
 * (or index = PERF_IHEAP_IDLE) before its first use; the heap owns the other fields while it is
 * pending. 24 bytes on LP64. */
struct perf_iheap_timer {
    chime_fn *fn;
    void *arg;
    uint32_t seq;   /* schedule order among equal deadlines */
    uint32_t index; /* where the heap keeps it; PERF_IHEAP_IDLE when not pending */
};
#define PERF_IHEAP_TIMER_INIT { NULL, NULL, 0, PERF_IHEAP_IDLE }

typedef struct perf_iheap perf_iheap;

/* A heap of arity 2 or 4 (0: PERF_IHEAP_ARITY) at time start with room for capacity_hint timers
 * (0: grow on demand). NULL: no memory, or another arity. */
perf_iheap *perf_iheap_new(uint64_t start, size_t capacity_hint, unsigned arity);
/* Free the heap; pending timers are dropped without running (their index stays as it was). */
void perf_iheap_free(perf_iheap *h);
/* Schedule fn(arg) at deadline on tm; a pending tm is moved (as reschedule, with the new fn, arg).
 * Return: 0; -EINVAL (h, tm or fn NULL); -ENOMEM (tm unchanged). O(log n). */
int perf_iheap_schedule(perf_iheap *h, struct perf_iheap_timer *tm, uint64_t deadline, chime_fn *fn,
                        void *arg);
/* Cancel a pending timer. Return: 0; -ENOENT (tm not pending); -EINVAL (h or tm NULL). O(log n). */
int perf_iheap_cancel(perf_iheap *h, struct perf_iheap_timer *tm);
/* Move a pending timer to deadline with a new sequence number. Return: as cancel, or -ENOMEM (only
 * from a callback, when the timer must wait for the next advance and there is no room; unchanged).
 * O(log n). */
int perf_iheap_reschedule(perf_iheap *h, struct perf_iheap_timer *tm, uint64_t deadline);
/* Fire every timer due by now (see backend.h). Return: callbacks run. O(fired * log n). */
size_t perf_iheap_advance(perf_iheap *h, uint64_t now);
/* The earliest effective deadline (exact). Return: 0; -ENOENT (none pending); -EINVAL. O(1). */
int perf_iheap_next(const perf_iheap *h, uint64_t *deadline);
/* Pending timers. O(1). */
size_t perf_iheap_pending(const perf_iheap *h);
/* The heap's arity (2 or 4). */
unsigned perf_iheap_arity(const perf_iheap *h);
/* Debug self-check: the heap property, every timer's back-index, sequence numbers, the count.
 * Return: 0, or -EINVAL. O(n). */
int perf_iheap_check(const perf_iheap *h);

#ifdef __cplusplus
}
#endif

#endif /* CHIME_PERF_IHEAP_H */
