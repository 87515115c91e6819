/* Internal to chime: what the library's files and tests share about the wheel beyond chime.h. */
#ifndef CHIME_WHEEL_H
#define CHIME_WHEEL_H

#include <stdbool.h>

#include "chime.h"

/*
 * Advance towards now as chime_wheel_advance() does, but stop once `limit` callbacks have run (for the
 * threaded runtime, which works through a firing storm in bounded batches). *done is set to whether
 * the wheel reached now; if not, call again (with the same or a later now) to carry on.
 * Return: how many callbacks ran.
 */
size_t chime__wheel_advance_some(chime_wheel *w, uint64_t now, size_t limit, bool *done);

/* Whether id names a pending timer. O(1). */
bool chime__wheel_is_pending(const chime_wheel *w, chime_id id);

/* Give back node memory beyond the pending timers plus `keep` spare nodes. Return: chunks released.
 * O(pool capacity): call it when load has dropped, not on every step. */
size_t chime__wheel_trim(chime_wheel *w, size_t keep);

/* Nodes the wheel's pool holds memory for. O(1). */
size_t chime__wheel_capacity(const chime_wheel *w);

/*
 * Walk the whole wheel and verify its invariants (I1-I5 in wheel.c, the pool's free list, the
 * pending count). Return: NULL if all hold, else a static description of the first that does not.
 * O(pending + bitmap words): for tests, never for the hot path.
 */
const char *chime__wheel_check(const chime_wheel *w);

/* Walk the pool's free list: every free node marked free, none lost. O(pool capacity). */
const char *chime__wheel_check_pool(const chime_wheel *w);

#endif /* CHIME_WHEEL_H */
