/*
 * The timer-node pool and id table.
 *
 * Nodes live in fixed-size chunks that never move, so a node's index is stable for its life and the
 * wheel links nodes by 32-bit index instead of by pointer (halving the links). Free nodes form a LIFO
 * list, so a cancel followed by a schedule reuses a node that is still in cache.
 *
 * An id is (generation << 32) | index. Each node's generation starts at 1 and is bumped every time the
 * node is freed (skipping 0, so no id is ever 0): an id of a fired or cancelled timer stops matching
 * the moment its node is freed, whoever reuses the node later. Generations are 32 bits, so an id could
 * be mistaken for a newer one only after its node has been reused 2^32 times.
 *
 * Memory follows load: chime__pool_trim() gives back chunks whose every node is free. A trimmed chunk
 * leaves a hole (a NULL entry) in the chunk table, so indices never move and an id naming a node of
 * the hole is simply not found; when the hole is filled again its generations resume above the
 * highest the old chunk reached, so no old id comes back to life.
 *
 * Not thread-safe: the pool belongs to one wheel.
 */
#ifndef CHIME_POOL_H
#define CHIME_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chime.h"

#define CHIME__NIL UINT32_MAX            /* the index that ends a list */
#define CHIME__CHUNK_SHIFT 12            /* 4096 nodes (192 KiB) per chunk */
#define CHIME__CHUNK_NODES (1u << CHIME__CHUNK_SHIFT)
#define CHIME__MAX_NODES (CHIME__NIL - 1) /* indices 0 .. NIL-1; NIL itself is never a node */

/* Where a node is: a wheel slot (level << 12 | slot) or one of these. */
#define CHIME__WHERE_DUE 0x8000u      /* scheduled at or before the wheel's time: fires next advance */
#define CHIME__WHERE_FIRING 0x8001u   /* the due list as taken by the advance running now */
#define CHIME__WHERE_OVERFLOW 0x8002u /* beyond the top level's current rotation */
#define CHIME__WHERE_FREE 0xffffu     /* in the pool's free list */

struct chime__node {
    uint32_t next, prev; /* list links (pool indices); the free list uses next only */
    uint64_t deadline;   /* in ticks; for a periodic timer, the next boundary */
    chime_fn *fn;
    void *arg;
    uint64_t period;     /* 0 for a one-shot timer */
    uint32_t gen;        /* generation, the high half of the id; never 0 */
    uint16_t where;      /* which list holds the node (see CHIME__WHERE_*) */
    uint16_t unused;
};
/* The footprint promised in docs/design.md: a pending timer costs one node, id included. */
_Static_assert(sizeof(struct chime__node) == 48, "a timer node is 48 bytes");
_Static_assert(CHIME_MAX_SLOTS <= 4096 && CHIME_MAX_LEVELS <= 8, "where packs level:3 and slot:12");

struct chime__pool {
    struct chime__node **chunks; /* NULL where a chunk was trimmed (a hole) */
    uint32_t *gen_floor;  /* per chunk: the generation its nodes start at when it is (re)allocated */
    uint32_t nchunks;     /* chunk table entries in use, holes included: indices < nchunks << SHIFT */
    uint32_t live_chunks; /* entries that hold memory */
    uint32_t chunks_cap;  /* room in chunks[] and gen_floor[] */
    uint32_t free_head;   /* first free node, or CHIME__NIL */
    uint32_t used;        /* nodes handed out and not yet freed */
};

static inline struct chime__node *chime__pool_at(const struct chime__pool *p, uint32_t idx)
{
    return &p->chunks[idx >> CHIME__CHUNK_SHIFT][idx & (CHIME__CHUNK_NODES - 1)];
}

static inline chime_id chime__pool_id(const struct chime__pool *p, uint32_t idx)
{
    return ((uint64_t)chime__pool_at(p, idx)->gen << 32) | idx;
}

/* The index of the live node id names, or CHIME__NIL for a dead, stale or forged id. O(1). */
static inline uint32_t chime__pool_find(const struct chime__pool *p, chime_id id)
{
    uint32_t idx = (uint32_t)id;
    if (idx >= ((uint64_t)p->nchunks << CHIME__CHUNK_SHIFT) || !p->chunks[idx >> CHIME__CHUNK_SHIFT])
        return CHIME__NIL;
    const struct chime__node *n = chime__pool_at(p, idx);
    if (n->gen != (uint32_t)(id >> 32) || n->where == CHIME__WHERE_FREE)
        return CHIME__NIL;
    return idx;
}

void chime__pool_init(struct chime__pool *p);
/* Add a chunk of free nodes (filling a hole first). Return: 0, or -ENOMEM. */
int chime__pool_grow(struct chime__pool *p);
/*
 * Give back every chunk whose nodes are all free, as long as at least `keep` free nodes remain.
 * Return: the number of chunks given back. O(capacity): walks the free list and the freed chunks.
 */
size_t chime__pool_trim(struct chime__pool *p, size_t keep);
void chime__pool_destroy(struct chime__pool *p);

/* Take a node (its where is still CHIME__WHERE_FREE). Return: 0, or -ENOMEM. Inline: it is on
 * every schedule, and a call into pool.c cost more than the pop itself. */
static inline int chime__pool_take(struct chime__pool *p, uint32_t *idx)
{
    if (p->free_head == CHIME__NIL) {
        int err = chime__pool_grow(p);
        if (err)
            return err;
    }
    *idx = p->free_head;
    p->free_head = chime__pool_at(p, *idx)->next;
    p->used++;
    return 0;
}

/* Give a node back; every id naming it dies. */
static inline void chime__pool_give(struct chime__pool *p, uint32_t idx)
{
    struct chime__node *n = chime__pool_at(p, idx);
    n->gen = n->gen + 1 ? n->gen + 1 : 1; /* 0 is skipped: no id is ever 0 */
    n->where = CHIME__WHERE_FREE;
    n->next = p->free_head;
    p->free_head = idx;
    p->used--;
}
/* Nodes the pool holds memory for. */
static inline size_t chime__pool_capacity(const struct chime__pool *p)
{
    return (size_t)p->live_chunks << CHIME__CHUNK_SHIFT;
}

/* One past the highest index the pool has ever handed out: indices of holes included. */
static inline size_t chime__pool_index_limit(const struct chime__pool *p)
{
    return (size_t)p->nchunks << CHIME__CHUNK_SHIFT;
}

#endif /* CHIME_POOL_H */
