/* SPDX-License-Identifier: MIT */
/*
 * Baseline 3 ("idheap" in the harness): a binary min-heap of timers with the wheel's kind of handles,
 * generation-checked 64-bit ids looked up in a slot table (slots.h). The heap users are compared
 * against is the intrusive one of iheap.h; this one shows what such ids cost a heap. Written for
 * speed so that the comparison means something:
 *   - the heap is one contiguous array of 16-byte entries holding the ordering key (effective
 *     deadline, 32-bit sequence number) next to the timer's slot index, so a comparison never leaves
 *     the array;
 *   - each timer's slot records its heap index, so cancel and reschedule are O(log n);
 *   - handles come from the shared slot table (slots.h): no allocation per operation once the
 *     arrays have grown (they double; a capacity hint sizes them up front);
 *   - the root is removed with Floyd's bottom-up sift (one comparison per level on the way down).
 * Semantics are those stated in backend.h, exactly.
 *
 * Sequence numbers are 32 bits to keep entries at 16 bytes. When they run out (after 2^32 - 1
 * schedules) the heap is sorted and renumbered 0..n-1, which keeps every order and is a valid heap:
 * O(n log n) once per 4 billion schedules.
 *
 * Not thread-safe: calls on one heap must not overlap.
 */
#ifndef CHIME_PERF_HEAP_H
#define CHIME_PERF_HEAP_H

#include <stddef.h>
#include <stdint.h>

#include "chime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct perf_heap perf_heap;

/* A heap at time start with room for capacity_hint timers (0: grow on demand). NULL: no memory. */
perf_heap *perf_heap_new(uint64_t start, size_t capacity_hint);
/* Free the heap; pending timers are dropped without running. h may be NULL. */
void perf_heap_free(perf_heap *h);
/* Schedule fn(arg) at deadline. Return: 0; -EINVAL (h or fn NULL); -ENOMEM. O(log n). */
int perf_heap_schedule(perf_heap *h, uint64_t deadline, chime_fn *fn, void *arg, uint64_t *handle);
/* Cancel a pending timer. Return: 0; -ENOENT (handle not pending); -EINVAL. O(log n). */
int perf_heap_cancel(perf_heap *h, uint64_t handle);
/* Move a pending timer to deadline with a new sequence number. Return: as cancel, or -ENOMEM (only
 * from a callback, when the timer must wait for the next advance and there is no room; unchanged).
 * O(log n). */
int perf_heap_reschedule(perf_heap *h, uint64_t handle, uint64_t deadline);
/* Fire every timer due by now (see backend.h). Return: callbacks run. O(fired * log n). */
size_t perf_heap_advance(perf_heap *h, uint64_t now);
/* The earliest effective deadline (exact). Return: 0; -ENOENT (none pending); -EINVAL. O(1). */
int perf_heap_next(const perf_heap *h, uint64_t *deadline);
/* Pending timers. O(1). */
size_t perf_heap_pending(const perf_heap *h);
/* Debug self-check: the heap property and every slot's back-index. Return: 0, or -EINVAL. O(n). */
int perf_heap_check(const perf_heap *h);

#ifdef __cplusplus
}
#endif

#endif /* CHIME_PERF_HEAP_H */
