/* SPDX-License-Identifier: MIT */
/* Internal to chime: what the library's files and tests share about the wheel beyond chime.h. */
#ifndef CHIME_WHEEL_H
#define CHIME_WHEEL_H

#include <stdbool.h>

#include "chime.h"

/* Resolve a layout as chime_wheel_new() does: levels 0 becomes the default layout (start kept).
 * Return: 0, or -EINVAL for a layout chime_wheel_new() rejects. (The threaded runtime builds its
 * levels from the same configuration.) */
int chime__wheel_config(struct chime_wheel_config *c);

/*
 * Advance towards now as chime_wheel_advance() does, but stop once `limit` callbacks have run (for the
 * threaded runtime, which works through a firing storm in bounded batches). *done is set to whether
 * the wheel reached now; if not, call again (with the same or a later now) to carry on.
 * Return: how many callbacks ran.
 */
size_t chime__wheel_advance_some(chime_wheel *w, uint64_t now, size_t limit, bool *done);

/* Whether id names a pending timer. O(1). */
bool chime__wheel_is_pending(const chime_wheel *w, chime_id id);

/* Free the arrays of empty slots and, if no timer is pending, give the node memory back to the
 * system. Return: bytes given back (0: nothing). O(total slots) plus O(1) system calls. */
size_t chime__wheel_trim(chime_wheel *w);

/* Nodes the wheel has handed out since it last gave memory back (what it holds pages for). O(1). */
size_t chime__wheel_capacity(const chime_wheel *w);

/* Entries moved down a level by cascades since the wheel was made (tests bound the work with it). */
uint64_t chime__wheel_cascaded(const chime_wheel *w);

/*
 * Walk the whole wheel and verify its invariants (I1-I6 in levels.c, the pending count). Return: NULL
 * if all hold, else a static description of the first that does not. O(pending + tombstones + bitmap
 * words): for tests, never for the hot path.
 */
const char *chime__wheel_check(const chime_wheel *w);

/* Walk the nodes' free list and every slot of every level: nothing lost, no memory held by an empty
 * slot. O(nodes + slots): for tests, every few thousand steps. */
const char *chime__wheel_check_pool(const chime_wheel *w);

#endif /* CHIME_WHEEL_H */
