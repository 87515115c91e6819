/* Internal to chime: what the library's files and tests share about the wheel beyond chime.h. */
#ifndef CHIME_WHEEL_H
#define CHIME_WHEEL_H

#include "chime.h"

/*
 * Walk the whole wheel and verify its invariants (I1-I5 in wheel.c, the pool's free list, the
 * pending count). Return: NULL if all hold, else a static description of the first that does not.
 * O(pending + bitmap words): for tests, never for the hot path.
 */
const char *chime__wheel_check(const chime_wheel *w);

/* Walk the pool's free list: every free node marked free, none lost. O(pool capacity). */
const char *chime__wheel_check_pool(const chime_wheel *w);

#endif /* CHIME_WHEEL_H */
