/* SPDX-License-Identifier: MIT */
/*
 * The handle table of the id-based baselines (the list, the id-checked heap, and the id adapter of
 * the intrusive heap): one slot per timer holding what it runs and its generation,
 * a LIFO free list threaded through the free slots, and generation-checked 64-bit handles.
 *
 * It mirrors the wheel's ids on purpose, so the id-based baselines pay what the wheel pays for them:
 * a handle is (generation << 32) | index, the generation starts at 1 and is bumped (skipping 0) each
 * time a slot is freed, so no handle is ever 0 and a handle of a fired or cancelled timer never
 * matches again (until its slot has been reused 2^32 times). The table is one array that doubles
 * (realloc) when full: a baseline grows its own per-timer arrays alongside, indexed by the same slot
 * index. Written again rather than shared with lib/ so the baselines depend on nothing internal.
 *
 * Not thread-safe: a table belongs to one structure.
 */
#ifndef CHIME_PERF_SLOTS_H
#define CHIME_PERF_SLOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chime.h"

#define PERF_NIL UINT32_MAX        /* ends the free list; never a slot index */
#define PERF_SLOTS_MAX (1u << 31)  /* at most 2^31 slots, so a baseline may flag a position's top bit */

struct perf_slot {
    chime_fn *fn;   /* NULL exactly while the slot is free */
    void *arg;
    uint32_t gen;   /* the high half of the slot's current handle; never 0 */
    uint32_t pos;   /* live: where the owning structure keeps the timer; free: the next free slot */
};
/* 24 bytes: with a baseline's 16-byte hot entry, 40 bytes per pending timer. */
_Static_assert(sizeof(void *) != 8 || sizeof(struct perf_slot) == 24, "a slot is 24 bytes");

struct perf_slots {
    struct perf_slot *v;
    uint32_t cap;        /* slots allocated */
    uint32_t free_head;  /* first free slot, or PERF_NIL */
    uint32_t used;       /* live slots: the structure's pending count */
};

/* An empty table: no memory until perf_slots_grow(). */
void perf_slots_init(struct perf_slots *s);
void perf_slots_destroy(struct perf_slots *s);

/*
 * The capacity the next growth should reach: hint if it is larger than cap, otherwise double (at
 * least 64), capped at PERF_SLOTS_MAX. Return: 0 when the table is already at PERF_SLOTS_MAX.
 */
uint32_t perf_slots_next_cap(const struct perf_slots *s, size_t hint);

/* Grow to cap slots (> s->cap), new slots taken lowest index first. Return: 0 or -ENOMEM. O(cap). */
int perf_slots_grow(struct perf_slots *s, uint32_t cap);

/* Take a free slot for fn(arg). The caller has checked free_head != PERF_NIL (grown if needed). */
static inline uint32_t perf_slots_take(struct perf_slots *s, chime_fn *fn, void *arg)
{
    uint32_t idx = s->free_head;
    struct perf_slot *e = &s->v[idx];
    s->free_head = e->pos;
    e->fn = fn;
    e->arg = arg;
    s->used++;
    return idx;
}

/* Free a live slot: every handle naming it dies. O(1). */
static inline void perf_slots_give(struct perf_slots *s, uint32_t idx)
{
    struct perf_slot *e = &s->v[idx];
    e->gen = e->gen + 1 ? e->gen + 1 : 1; /* 0 is skipped: no handle is ever 0 */
    e->fn = NULL;
    e->pos = s->free_head;
    s->free_head = idx;
    s->used--;
}

static inline uint64_t perf_slots_handle(const struct perf_slots *s, uint32_t idx)
{
    return ((uint64_t)s->v[idx].gen << 32) | idx;
}

/* The live slot handle names, or PERF_NIL for a dead, stale or forged handle (0 included). O(1). */
static inline uint32_t perf_slots_find(const struct perf_slots *s, uint64_t handle)
{
    uint32_t idx = (uint32_t)handle;
    if (idx >= s->cap)
        return PERF_NIL;
    const struct perf_slot *e = &s->v[idx];
    if (e->gen != (uint32_t)(handle >> 32) || !e->fn)
        return PERF_NIL;
    return idx;
}

#endif /* CHIME_PERF_SLOTS_H */
