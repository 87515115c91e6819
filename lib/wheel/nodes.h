/* SPDX-License-Identifier: MIT */
/*
 * The wheel's timer nodes and the ids that name them.
 *
 * A node is 32 bytes in two halves kept in parallel arrays. The hot half (16 bytes: the levels'
 * header, deadline, position and the id's generation) is all a cancel, a reschedule or a cascade
 * reads; the cold half (the callback and its argument) is written when the timer is scheduled and
 * read when it fires. At 10^6 timers a cancel then works in 16 MB of nodes instead of 32: with a
 * caller's 8 MB of ids beside them, the cancel's working set fits a 32 MB last-level cache, and its
 * dependent loads hit there instead of going to memory.
 *
 * The arrays are mapped straight from the kernel and grown by remapping (chime__remap moves page
 * tables, not bytes), so node i is at hot + i: a lookup is one shift-add with no chunk table in
 * between, and a cancel's only dependent load is the node itself. Pages are touched in index order
 * as the arrays fill, so resident memory follows the nodes handed out, not the mappings' size; from
 * 4 MiB on they ask for transparent huge pages, so a random node is not also a TLB miss.
 *
 * Free nodes form a LIFO list (a cancel followed by a schedule reuses a node still in cache); nodes
 * never used yet are handed out from `top` upwards. A periodic timer's period lives in a third,
 * parallel mapping that is touched only where periodic timers are: one-shot timers carry none.
 *
 * An id is (generation << 32) | index, and no id is 0: generations start at 1. A node's generation
 * is bumped every time the node is freed: an id of a fired or cancelled timer stops matching the
 * moment its node is freed, whoever reuses the node later. A node freed at the last generation
 * (UINT32_MAX) is retired instead, never handed out again: a next generation would have to wrap
 * and could match an id of its first life (a stale id then cancelled another timer, found in
 * review: 2^32 - 1 reuses of one node take a minute of churn). It costs 32 bytes per 2^32 reuses.
 * chime__nodes_reset() gives every page back once no node is in use; nodes handed out afterwards
 * start above the highest generation ever used, so no old id comes back to life; once a generation
 * has reached the last one, there is none above it, and the wheel keeps its pages.
 *
 * Not thread-safe: the nodes belong to one wheel.
 */
#ifndef CHIME_WHEEL_NODES_H
#define CHIME_WHEEL_NODES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chime.h"
#include "wheel/levels.h"

#define CHIME__NIL UINT32_MAX /* ends the free list */
#define CHIME__POS_FREE CHIME__POS_INDEX /* a free node's pos: no entry has this index */

/* The hot half of a node: what the levels use (deadline, pos: levels.h) and the id's generation. */
struct chime__wnode {
    uint64_t deadline; /* ticks; a free node: the next free index */
    uint32_t pos;      /* levels.h's position word; a free node: CHIME__POS_FREE */
    uint32_t gen;      /* the high half of the id */
};
_Static_assert(offsetof(struct chime__wnode, deadline) == CHIME__NODE_DEADLINE_AT &&
               offsetof(struct chime__wnode, pos) == CHIME__NODE_POS_AT,
               "the levels find a node's deadline and position where levels.h says");

/* The cold half of a node. */
struct chime__call {
    chime_fn *fn;
    void *arg;
};
/* The footprint docs/design.md promises: a pending timer costs one node (two 16-byte halves) plus
 * its entry. */
_Static_assert(sizeof(struct chime__wnode) == 16 && sizeof(struct chime__call) == 16,
               "a timer node is 16 hot bytes and 16 cold ones");

struct chime__nodes {
    struct chime__wnode *v;   /* hot halves */
    struct chime__call *call; /* cold halves, in parallel */
    uint64_t *period;         /* period_cap periods; NULL until a periodic timer is scheduled */
    size_t cap, call_cap, period_cap; /* mapped, in nodes (v, call) and periods */
    uint32_t top;             /* nodes [0, top) have been handed out since the last reset */
    uint32_t free_head;       /* first free node below top, or CHIME__NIL */
    uint32_t used;            /* nodes handed out and not given back */
    uint32_t retired;         /* nodes given back at the last generation: never handed out again */
    uint32_t gen_floor;       /* the generation a node gets the first time it is handed out */
    uint32_t gen_max;         /* the highest generation any node has had */
};

void chime__nodes_init(struct chime__nodes *ns);
void chime__nodes_destroy(struct chime__nodes *ns);
/* Map room for more nodes (double both halves). Return: 0, or -ENOMEM (CHIME__MAX_NODES, or no
 * memory; a half that grew stays grown). */
int chime__nodes_grow(struct chime__nodes *ns);
/* Map room for a period at idx. Return: 0, or -ENOMEM. */
int chime__nodes_grow_periods(struct chime__nodes *ns, uint32_t idx);

/* Take a node (its pos says free until it is placed). Return: 0, or -ENOMEM. May move the arrays,
 * even when it fails (a half that grew stays grown). */
static inline int chime__nodes_take(struct chime__nodes *ns, uint32_t *idx)
{
    if (ns->free_head != CHIME__NIL) {
        *idx = ns->free_head;
        ns->free_head = (uint32_t)ns->v[*idx].deadline;
    } else {
        if (ns->top == ns->cap || ns->top == ns->call_cap) {
            int err = chime__nodes_grow(ns);
            if (err)
                return err;
        }
        *idx = ns->top++;
        ns->v[*idx].gen = ns->gen_floor; /* a fresh page reads 0: no generation yet */
    }
    ns->used++;
    return 0;
}

/* Node idx's hot half, cold half and period (the last only after chime__nodes_grow_periods(idx)).
 * Valid until the next chime__nodes_take or grow, which may move the arrays. */
static inline struct chime__wnode *chime__nodes_hot(const struct chime__nodes *ns, uint32_t idx)
{
    return &ns->v[idx];
}

static inline struct chime__call *chime__nodes_call(const struct chime__nodes *ns, uint32_t idx)
{
    return &ns->call[idx];
}

static inline uint64_t *chime__nodes_period(const struct chime__nodes *ns, uint32_t idx)
{
    return &ns->period[idx];
}

/* Nodes handed out since the last reset: every node in use has an index below this. */
static inline uint32_t chime__nodes_extent(const struct chime__nodes *ns)
{
    return ns->top;
}

/* Nodes in use (taken and not given back). */
static inline uint32_t chime__nodes_used(const struct chime__nodes *ns)
{
    return ns->used;
}

/* Whether node idx (below chime__nodes_extent) is in use. */
static inline bool chime__nodes_in_use(const struct chime__nodes *ns, uint32_t idx)
{
    return ns->v[idx].pos != CHIME__POS_FREE;
}

/* Bytes of both halves for the nodes handed out since the last reset. */
static inline size_t chime__nodes_bytes(const struct chime__nodes *ns)
{
    return (size_t)ns->top * (sizeof(struct chime__wnode) + sizeof(struct chime__call));
}

/* Point the levels at the nodes' halves (levels.h: nodes, stride, cold, cold_stride): at start and
 * after anything that may have moved the arrays (a take). */
static inline void chime__nodes_attach(const struct chime__nodes *ns, struct chime__levels *L)
{
    L->nodes = (char *)ns->v;
    L->stride = sizeof(struct chime__wnode);
    L->cold = (char *)ns->call;
    L->cold_stride = sizeof(struct chime__call);
}

/* Give a node back; every id naming it dies. */
static inline void chime__nodes_give(struct chime__nodes *ns, uint32_t idx)
{
    struct chime__wnode *h = &ns->v[idx];
    h->pos = CHIME__POS_FREE;
    ns->used--;
    if (h->gen == UINT32_MAX) { /* no generation left: retired (see above) */
        ns->retired++;
        return;
    }
    uint32_t gen = ++h->gen;
    ns->gen_max = gen > ns->gen_max ? gen : ns->gen_max;
    h->deadline = ns->free_head;
    ns->free_head = idx;
}

static inline chime_id chime__nodes_id(const struct chime__nodes *ns, uint32_t idx)
{
    return (uint64_t)ns->v[idx].gen << 32 | idx;
}

/* The index of the live node id names, or CHIME__NIL for a dead, stale or forged id. O(1): one
 * load of the node's hot half. */
static inline uint32_t chime__nodes_find(const struct chime__nodes *ns, chime_id id)
{
    uint32_t idx = (uint32_t)id;
    if (idx >= ns->top)
        return CHIME__NIL;
    const struct chime__wnode *h = &ns->v[idx];
    if (h->gen != (uint32_t)(id >> 32) || h->pos == CHIME__POS_FREE)
        return CHIME__NIL;
    return idx;
}

/*
 * If no node is in use and a generation is left above every one used, give every page back to the
 * system and start again from index 0 (at new generations). Return: true if memory was given back.
 * O(1) system calls.
 */
bool chime__nodes_reset(struct chime__nodes *ns);

/* Walk the free list: every free node marked free, none lost, no cycle. O(top). */
const char *chime__nodes_check(const struct chime__nodes *ns);

#endif /* CHIME_WHEEL_NODES_H */
