/*
 * The wheel's timer nodes and the ids that name them.
 *
 * A node is 32 bytes, two to a cache line and never straddling one: the levels' header (deadline and
 * position, levels.h), the id's generation, the callback and its argument. Nodes live in one array
 * mapped straight from the kernel and grown by remapping (chime__remap moves page tables, not bytes),
 * so node i is at v + i: a lookup is one multiply-add with no chunk table in between, and a cancel's
 * only dependent load is the node itself. Pages are touched in index order as the array fills, so
 * resident memory follows the nodes handed out, not the mapping's size.
 *
 * Free nodes form a LIFO list (a cancel followed by a schedule reuses a node still in cache); nodes
 * never used yet are handed out from `top` upwards. A periodic timer's period lives in a second,
 * parallel mapping that is touched only where periodic timers are: one-shot timers carry none.
 *
 * An id is (generation << 32) | index. A node's generation is bumped every time the node is freed
 * (skipping 0, so no id is ever 0): an id of a fired or cancelled timer stops matching the moment its
 * node is freed, whoever reuses the node later. Generations are 32 bits, so an id could be mistaken
 * for a newer one only after its node has been reused 2^32 times. chime__nodes_reset() gives every
 * page back once no node is in use; nodes handed out afterwards start above the highest generation
 * ever used, so no old id comes back to life.
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

struct chime__node {
    struct chime__hdr h; /* deadline (free: the next free index), pos, owner: the generation */
    chime_fn *fn;        /* NULL iff the node is free */
    void *arg;
};
/* The footprint docs/design.md promises: a pending timer costs one node plus its entry. */
_Static_assert(sizeof(struct chime__node) == 32, "a timer node is 32 bytes");

struct chime__nodes {
    struct chime__node *v;  /* cap nodes mapped */
    uint64_t *period;       /* period_cap periods mapped; NULL until a periodic timer is scheduled */
    size_t cap, period_cap;
    uint32_t top;           /* nodes [0, top) have been handed out since the last reset */
    uint32_t free_head;     /* first free node below top, or CHIME__NIL */
    uint32_t used;          /* nodes handed out and not given back */
    uint32_t gen_floor;     /* the generation a node gets the first time it is handed out */
    uint32_t gen_max;       /* the highest generation any node has had */
};

void chime__nodes_init(struct chime__nodes *ns);
void chime__nodes_destroy(struct chime__nodes *ns);
/* Map room for more nodes (double). Return: 0, or -ENOMEM (CHIME__MAX_NODES, or no memory). */
int chime__nodes_grow(struct chime__nodes *ns);
/* Map room for a period at idx. Return: 0, or -ENOMEM. */
int chime__nodes_grow_periods(struct chime__nodes *ns, uint32_t idx);

/* Take a node (free: fn NULL). Return: 0, or -ENOMEM. May move the array (growth). */
static inline int chime__nodes_take(struct chime__nodes *ns, uint32_t *idx)
{
    if (ns->free_head != CHIME__NIL) {
        *idx = ns->free_head;
        ns->free_head = (uint32_t)ns->v[*idx].h.deadline;
    } else {
        if (ns->top == ns->cap) {
            int err = chime__nodes_grow(ns);
            if (err)
                return err;
        }
        *idx = ns->top++;
        ns->v[*idx].h.owner = ns->gen_floor; /* a fresh page reads 0: no generation yet */
    }
    ns->used++;
    return 0;
}

/* Give a node back; every id naming it dies. */
static inline void chime__nodes_give(struct chime__nodes *ns, uint32_t idx)
{
    struct chime__node *n = &ns->v[idx];
    uint32_t gen = n->h.owner + 1 ? n->h.owner + 1 : 1; /* 0 is skipped: no id is ever 0 */
    n->h.owner = gen;
    if (gen > ns->gen_max)
        ns->gen_max = gen;
    n->h.pos = CHIME__POS_FREE;
    n->h.deadline = ns->free_head;
    n->fn = NULL;
    ns->free_head = idx;
    ns->used--;
}

static inline chime_id chime__nodes_id(const struct chime__nodes *ns, uint32_t idx)
{
    return (uint64_t)ns->v[idx].h.owner << 32 | idx;
}

/* The index of the live node id names, or CHIME__NIL for a dead, stale or forged id. O(1). */
static inline uint32_t chime__nodes_find(const struct chime__nodes *ns, chime_id id)
{
    uint32_t idx = (uint32_t)id;
    if (idx >= ns->top)
        return CHIME__NIL;
    const struct chime__node *n = &ns->v[idx];
    if (n->h.owner != (uint32_t)(id >> 32) || !n->fn)
        return CHIME__NIL;
    return idx;
}

/*
 * If no node is in use, give every page back to the system and start again from index 0 (at new
 * generations). Return: true if memory was given back. O(1) system calls.
 */
bool chime__nodes_reset(struct chime__nodes *ns);

/* Walk the free list: every free node marked free, none lost, no cycle. O(top). */
const char *chime__nodes_check(const struct chime__nodes *ns);

#endif /* CHIME_WHEEL_NODES_H */
