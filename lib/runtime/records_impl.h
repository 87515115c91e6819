/* SPDX-License-Identifier: MIT */
/*
 * Internal to the record pool's two files: records.c (the records, their free stacks, growth, take)
 * and reclaim.c (giving records back, the watermark, idle work). See records.h.
 */
#ifndef CHIME_RUNTIME_RECORDS_IMPL_H
#define CHIME_RUNTIME_RECORDS_IMPL_H

#include "runtime/records.h"

#define GIVE_BATCH 64    /* records the advancing thread gathers per shard before one push */

enum { FRESH, USED };

/* Per chunk. state: FRESH -> USED by growth, USED -> FRESH by release, both under grow_lock (growth
 * looks for a FRESH chunk). Everything else is the advancing thread's, set by growth for a FRESH
 * chunk before its records can reach that thread; a walk over the chunks (refill, release) reads
 * those fields only once chunk_state has said USED, since growth may be writing a FRESH one's. */
struct chime__chunk {
    _Atomic uint8_t state;
    uint32_t live;           /* records known and not given back */
    uint32_t nfree;          /* records in the private free list f_first..f_last */
    uint32_t f_first, f_last;
    uint32_t gen_max;        /* the highest generation a record of this chunk has had */
};

/* The stack's head word: index of the top record, a closed flag, and a tag that changes on every
 * successful update so that a pop that read a stale top fails its compare-and-swap (ABA). */
#define HEAD_IDX(h) ((uint32_t)(h))
#define HEAD_CLOSED (UINT64_C(1) << 32)
#define HEAD_NEXT_TAG(h) ((((h) >> 33) + 1) << 33)

#define REC_BYTES (sizeof(struct chime__rec))
#define CALL_BYTES (sizeof(struct chime__rec_call))

static inline _Atomic uint32_t *link_of(const struct chime__records *r, uint32_t idx)
{
    return &r->hot[idx].link;
}

/* Chunks ever committed. acquire: pairs with the release store in grow(), so the chunk table's
 * entries below it are initialised. */
static inline uint32_t chunks_top(const struct chime__records *r)
{
    return atomic_load_explicit(&r->committed, memory_order_acquire) >> CHIME__REC_CHUNK_SHIFT;
}

static inline uint32_t chunk_state(const struct chime__records *r, uint32_t c)
{
    /* acquire: pairs with the release in set_chunk_state: a USED chunk's table entry is set. */
    return atomic_load_explicit(&r->chunk[c].state, memory_order_acquire);
}

static inline void set_chunk_state(struct chime__records *r, uint32_t c, uint8_t state)
{
    atomic_store_explicit(&r->chunk[c].state, state, memory_order_release); /* see chunk_state */
}

/* ---- the free stacks ---- */

/* Push the chain first..last (linked through link) onto a shard's stack. */
static inline void push_chain(struct chime__records *r, struct chime__shard *s, uint32_t first, uint32_t last)
{
    uint64_t h = atomic_load_explicit(&s->head, memory_order_relaxed); /* the CAS checks it */
    uint64_t nh;
    do {
        /* relaxed: published by the release CAS below. */
        atomic_store_explicit(link_of(r, last), HEAD_IDX(h), memory_order_relaxed);
        nh = HEAD_NEXT_TAG(h) | (h & HEAD_CLOSED) | first;
        /* release: pairs with the acquire CAS in pop(), so a taker sees the chain's links and the
         * records' state words (their new generations) as written before this push. */
    } while (!atomic_compare_exchange_weak_explicit(&s->head, &h, nh, memory_order_release,
                                                    memory_order_relaxed));
}

/* Take a shard's whole stack (leaving it empty, its closed flag kept). Return: the old top. */
static inline uint32_t take_all(struct chime__shard *s)
{
    uint64_t h = atomic_load_explicit(&s->head, memory_order_relaxed); /* the CAS checks it */
    /* acquire: as in pop(): the records' links and states were published by their pushes. */
    while (!atomic_compare_exchange_weak_explicit(&s->head, &h,
                                                  HEAD_NEXT_TAG(h) | (h & HEAD_CLOSED) | CHIME__REC_NIL,
                                                  memory_order_acquire, memory_order_relaxed))
        ;
    return HEAD_IDX(h);
}

static inline uint32_t next_free(const struct chime__records *r, uint32_t idx)
{
    /* relaxed: the caller owns the chain (taken off its stack, or never pushed). */
    return atomic_load_explicit(link_of(r, idx), memory_order_relaxed);
}

/* Append idx to a private chain (a batch, a sweep step's kept records). */
static inline void chain_add(const struct chime__records *r, struct chime__rec_batch *b, uint32_t idx)
{
    /* relaxed: the chain is private until push_chain publishes it. Records go on the front, so the
     * chain pops in the reverse of its adding: the last given back is taken first (still in cache). */
    atomic_store_explicit(link_of(r, idx), b->count ? b->first : CHIME__REC_NIL, memory_order_relaxed);
    if (!b->count)
        b->last = idx;
    b->first = idx;
    b->count++;
}

#endif /* CHIME_RUNTIME_RECORDS_IMPL_H */
