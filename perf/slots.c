/* SPDX-License-Identifier: MIT */
/* The baselines' handle table: see slots.h. */
#include "slots.h"

#include <errno.h>
#include <stdlib.h>

void perf_slots_init(struct perf_slots *s)
{
    *s = (struct perf_slots){ .free_head = PERF_NIL };
}

void perf_slots_destroy(struct perf_slots *s)
{
    free(s->v);
    perf_slots_init(s);
}

uint32_t perf_slots_next_cap(const struct perf_slots *s, size_t hint)
{
    if (s->cap >= PERF_SLOTS_MAX)
        return 0;
    size_t cap = s->cap ? (size_t)s->cap * 2 : 64;
    if (hint > s->cap)
        cap = hint;
    return cap > PERF_SLOTS_MAX ? PERF_SLOTS_MAX : (uint32_t)cap;
}

int perf_slots_grow(struct perf_slots *s, uint32_t cap)
{
    struct perf_slot *v = realloc(s->v, (size_t)cap * sizeof(*v));
    if (!v)
        return -ENOMEM;
    /* Thread the new slots in front of the free list, lowest index first. */
    for (uint32_t i = s->cap; i < cap; i++)
        v[i] = (struct perf_slot){ .gen = 1, .pos = i + 1 < cap ? i + 1 : s->free_head };
    s->free_head = s->cap;
    s->v = v;
    s->cap = cap;
    return 0;
}
