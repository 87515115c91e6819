/* SPDX-License-Identifier: MIT */
/* Growing a malloc'ed array by doubling: the store's lists of files, runs, sealed segments, a run's
 * marks, a spill's blocks and a flush's records. */
#ifndef CHIME_STORE_GROW_H
#define CHIME_STORE_GROW_H

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

/* Make room for one more element of size bytes in *p, which holds n of *cap (doubling, 16 at
 * first). Return: 0, or -ENOMEM with *p and *cap unchanged. */
static inline int chime__grow(void **p, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 16;
    void *g = realloc(*p, c * size);
    if (!g)
        return -ENOMEM;
    *p = g;
    *cap = c;
    return 0;
}

#endif /* CHIME_STORE_GROW_H */
