/* SPDX-License-Identifier: MIT */
/*
 * Baseline 2: a sorted doubly linked list of timers, what Redis' ae.c and most first designs do,
 * written as well as the design allows:
 *   - links are 32-bit indices into one contiguous array of 16-byte entries (deadline, prev, next),
 *     kept apart from the cold slot data (callback, argument, generation) of the shared slot table;
 *   - insertion walks from the tail (new deadlines are usually the latest), with an O(1) shortcut
 *     for a deadline before the head; equal deadlines keep schedule order (a new timer goes after
 *     them), so no sequence number is stored;
 *   - cancel unlinks in O(1) by handle; firing pops from the head in O(1) per timer;
 *   - no allocation per operation once the arrays have grown (they double; a hint sizes them).
 * The cost is the walk: O(n) per schedule in general. Semantics are those stated in backend.h.
 *
 * Not thread-safe: calls on one list must not overlap.
 */
#ifndef CHIME_PERF_LIST_H
#define CHIME_PERF_LIST_H

#include <stddef.h>
#include <stdint.h>

#include "chime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct perf_list perf_list;

/* A list at time start with room for capacity_hint timers (0: grow on demand). NULL: no memory. */
perf_list *perf_list_new(uint64_t start, size_t capacity_hint);
/* Free the list; pending timers are dropped without running. l may be NULL. */
void perf_list_free(perf_list *l);
/* Schedule fn(arg) at deadline. Return: 0; -EINVAL (l or fn NULL); -ENOMEM. O(n), O(1) for a
 * deadline no earlier than the last one's or before the first one's. */
int perf_list_schedule(perf_list *l, uint64_t deadline, chime_fn *fn, void *arg, uint64_t *handle);
/* Cancel a pending timer. Return: 0; -ENOENT (handle not pending); -EINVAL. O(1). */
int perf_list_cancel(perf_list *l, uint64_t handle);
/* Move a pending timer to deadline, after those already due then. Return: as cancel. O(n). */
int perf_list_reschedule(perf_list *l, uint64_t handle, uint64_t deadline);
/* Fire every timer due by now (see backend.h). Return: callbacks run. O(1) per fired timer. */
size_t perf_list_advance(perf_list *l, uint64_t now);
/* The earliest effective deadline (exact). Return: 0; -ENOENT (none pending); -EINVAL. O(1). */
int perf_list_next(const perf_list *l, uint64_t *deadline);
/* Pending timers. O(1). */
size_t perf_list_pending(const perf_list *l);
/* Debug self-check: links, order and count. Return: 0, or -EINVAL. O(n). */
int perf_list_check(const perf_list *l);

#ifdef __cplusplus
}
#endif

#endif /* CHIME_PERF_LIST_H */
