/* The runtime's record pool: see records.h. */
#define _GNU_SOURCE /* mmap flags, madvise: Linux interfaces beyond C11 */
#include "runtime/records.h"

#include <errno.h>
#include <sys/mman.h>

#include "alloc.h"

#define CHUNK_BYTES (CHIME__REC_CHUNK * sizeof(struct chime__rec))
#define GIVE_BATCH 64 /* records the advancing thread gathers per shard before one push */

/* The shard stack's head word: index of the top record, a closed flag, and a tag that changes on
 * every successful update so that a pop that read a stale top fails its compare-and-swap (ABA). */
#define HEAD_IDX(h) ((uint32_t)(h))
#define HEAD_CLOSED (UINT64_C(1) << 32)
#define HEAD_NEXT_TAG(h) ((((h) >> 33) + 1) << 33)

int chime__records_init(struct chime__records *r)
{
    for (unsigned s = 0; s < CHIME__SHARDS; s++) {
        atomic_init(&r->shard[s].head, CHIME__REC_NIL);
    }
    atomic_init(&r->nchunks, 0);
    atomic_init(&r->live_chunks, 0);
    r->closed = false;
    r->dir = chime__alloc_zeroed(CHIME__REC_MAX_CHUNKS * sizeof(*r->dir));
    r->meta = chime__alloc_zeroed(CHIME__REC_MAX_CHUNKS * sizeof(*r->meta));
    if (!r->dir || !r->meta || pthread_mutex_init(&r->grow_lock, NULL)) {
        chime__free(r->dir, CHIME__REC_MAX_CHUNKS * sizeof(*r->dir));
        chime__free(r->meta, CHIME__REC_MAX_CHUNKS * sizeof(*r->meta));
        return -ENOMEM;
    }
    return 0;
}

void chime__records_destroy(struct chime__records *r)
{
    uint32_t n = atomic_load_explicit(&r->nchunks, memory_order_relaxed); /* no other call runs */
    for (uint32_t c = 0; c < n; c++)
        munmap(r->dir[c], CHUNK_BYTES);
    chime__free(r->dir, CHIME__REC_MAX_CHUNKS * sizeof(*r->dir));
    chime__free(r->meta, CHIME__REC_MAX_CHUNKS * sizeof(*r->meta));
    pthread_mutex_destroy(&r->grow_lock);
}

/* Push the chain first..last (linked through free_next) onto a shard's stack. */
static void push_chain(struct chime__records *r, struct chime__shard *s, uint32_t first,
                       uint32_t last)
{
    struct chime__rec *tail = chime__records_at(r, last);
    uint64_t h = atomic_load_explicit(&s->head, memory_order_relaxed); /* the CAS checks it */
    uint64_t nh;
    do {
        /* relaxed: published by the release CAS below. */
        atomic_store_explicit(&tail->free_next, HEAD_IDX(h), memory_order_relaxed);
        nh = HEAD_NEXT_TAG(h) | (h & HEAD_CLOSED) | first;
        /* release: pairs with the acquire CAS in pop(), so a taker sees the chain's links and the
         * records' state words (their new generations) as written before this push. */
    } while (!atomic_compare_exchange_weak_explicit(&s->head, &h, nh, memory_order_release,
                                                    memory_order_relaxed));
}

/* Pop one record. Return: 0; -EAGAIN if the stack is empty; -ESHUTDOWN if it is closed. */
static int pop(struct chime__records *r, struct chime__shard *s, uint32_t *idx)
{
    /* acquire: pairs with the release CAS in push_chain; the top record's free_next is read next. */
    uint64_t h = atomic_load_explicit(&s->head, memory_order_acquire);
    for (;;) {
        if (h & HEAD_CLOSED)
            return -ESHUTDOWN;
        uint32_t top = HEAD_IDX(h);
        if (top == CHIME__REC_NIL)
            return -EAGAIN;
        /*
         * relaxed: if top is still the head when the CAS below succeeds, no one has popped it since
         * our acquire load, so this is the link its pusher published. If someone did, the tag has
         * changed and the CAS fails whatever we read here. The record's memory is always mapped.
         */
        uint32_t next = atomic_load_explicit(&chime__records_at(r, top)->free_next,
                                             memory_order_relaxed);
        uint64_t nh = HEAD_NEXT_TAG(h) | next;
        /* acquire (success and failure): as the first load; the popped record's state word and
         * contents were published by the push that put it here. */
        if (atomic_compare_exchange_weak_explicit(&s->head, &h, nh, memory_order_acquire,
                                                  memory_order_acquire)) {
            *idx = top;
            return 0;
        }
    }
}

/* Map (or reuse a dropped) chunk and push its records onto shard s. Called with grow_lock held. */
static int grow(struct chime__records *r, unsigned s)
{
    uint32_t n = atomic_load_explicit(&r->nchunks, memory_order_relaxed); /* written under the lock */
    uint32_t c = 0;
    while (c < n && !r->meta[c].dropped)
        c++;
    if (c == n) {
        if (n == CHIME__REC_MAX_CHUNKS)
            return -ENOMEM;
        /* MAP_POPULATE: the chunk is about to be written whole; one call maps its 64 pages instead of
         * 64 page faults on the taker's path. */
        void *mem = mmap(NULL, CHUNK_BYTES, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (mem == MAP_FAILED)
            return -ENOMEM;
        r->dir[c] = mem;
        r->meta[c].gen_floor = 1;
    } else {
#ifdef MADV_POPULATE_WRITE
        madvise(r->dir[c], CHUNK_BYTES, MADV_POPULATE_WRITE); /* as MAP_POPULATE; Linux 5.14+ */
#endif
    }
    struct chime__rec *chunk = r->dir[c];
    uint32_t first = c << CHIME__REC_CHUNK_SHIFT;
    for (uint32_t i = 0; i < CHIME__REC_CHUNK; i++) {
        struct chime__rec *rec = &chunk[i];
        rec->idx = first + i;
        /* relaxed: these records are reachable only after push_chain's release. A stale id's
         * canceller may read the state word concurrently; it is atomic for that reason, and any
         * generation it reads here is one no live id carries. */
        atomic_store_explicit(&rec->state, (uint64_t)r->meta[c].gen_floor << 32 | (uint64_t)s << 8,
                              memory_order_relaxed);
        atomic_store_explicit(&rec->free_next, i + 1 < CHIME__REC_CHUNK ? first + i + 1 : CHIME__REC_NIL,
                              memory_order_relaxed);
    }
    r->meta[c].dropped = false;
    if (c == n) {
        /* release: pairs with the acquire load in chime__records_find: dir[c] is set. */
        atomic_store_explicit(&r->nchunks, n + 1, memory_order_release);
    }
    atomic_fetch_add_explicit(&r->live_chunks, 1, memory_order_relaxed); /* a statistic */
    push_chain(r, &r->shard[s], first, first + CHIME__REC_CHUNK - 1);
    return 0;
}

int chime__records_take(struct chime__records *r, unsigned shard, struct chime__rec **out)
{
    uint32_t idx;
    int err = pop(r, &r->shard[shard], &idx);
    if (err == 0) {
        *out = chime__records_at(r, idx);
        return 0;
    }
    for (;;) {
        if (err == -ESHUTDOWN)
            return err;
        for (unsigned i = 1; i < CHIME__SHARDS; i++) {
            err = pop(r, &r->shard[(shard + i) % CHIME__SHARDS], &idx);
            if (err == 0) {
                *out = chime__records_at(r, idx);
                return 1;
            }
            if (err == -ESHUTDOWN)
                return err;
        }
        pthread_mutex_lock(&r->grow_lock);
        err = r->closed ? -ESHUTDOWN : grow(r, shard);
        pthread_mutex_unlock(&r->grow_lock);
        if (err)
            return err;
        err = pop(r, &r->shard[shard], &idx); /* others may take the new chunk first: then retry */
        if (err == 0) {
            *out = chime__records_at(r, idx);
            return 1;
        }
    }
}

void chime__records_give(struct chime__records *r, struct chime__rec_batch *batch,
                         struct chime__rec *rec)
{
    uint64_t s = atomic_load_explicit(&rec->state, memory_order_relaxed); /* ours: no race on it */
    uint32_t gen = (uint32_t)(s >> 32) + 1;
    if (gen == 0)
        gen = 1; /* no id is ever generation 0 */
    unsigned shard = (unsigned)(s >> 8) & (CHIME__SHARDS - 1);
    /* release: a canceller holding the old id reads this with acquire and gives up (its generation
     * no longer matches). The record is not reachable by takers until the batch is pushed. */
    atomic_store_explicit(&rec->state, (uint64_t)gen << 32 | (uint64_t)shard << 8,
                          memory_order_release);
    struct chime__rec_batch *b = &batch[shard];
    /* relaxed: published by push_chain's release. */
    atomic_store_explicit(&rec->free_next, b->count ? b->first : CHIME__REC_NIL, memory_order_relaxed);
    if (!b->count)
        b->last = rec->idx;
    b->first = rec->idx;
    if (++b->count == GIVE_BATCH) {
        push_chain(r, &r->shard[shard], b->first, b->last);
        b->count = 0;
    }
}

void chime__records_flush(struct chime__records *r, struct chime__rec_batch batch[CHIME__SHARDS])
{
    for (unsigned s = 0; s < CHIME__SHARDS; s++) {
        if (batch[s].count) {
            push_chain(r, &r->shard[s], batch[s].first, batch[s].last);
            batch[s].count = 0;
        }
    }
}

/* Take a shard's whole stack (leaving it empty, closed flag kept). Return: the old top. */
static uint32_t take_all(struct chime__shard *s)
{
    uint64_t h = atomic_load_explicit(&s->head, memory_order_relaxed); /* the CAS checks it */
    /* acquire: as in pop(): the records' links and states were published by their pushes. */
    while (!atomic_compare_exchange_weak_explicit(&s->head, &h,
                                                  HEAD_NEXT_TAG(h) | (h & HEAD_CLOSED) | CHIME__REC_NIL,
                                                  memory_order_acquire, memory_order_relaxed))
        ;
    return HEAD_IDX(h);
}

static uint32_t next_free(struct chime__records *r, uint32_t idx)
{
    /* relaxed: the caller took the stack this record was on, so it owns the link. */
    return atomic_load_explicit(&chime__records_at(r, idx)->free_next, memory_order_relaxed);
}

size_t chime__records_shrink(struct chime__records *r, size_t keep)
{
    pthread_mutex_lock(&r->grow_lock);
    uint32_t n = atomic_load_explicit(&r->nchunks, memory_order_relaxed); /* under the lock */
    uint32_t *free_in = chime__alloc_zeroed((n ? n : 1) * sizeof(*free_in));
    if (!free_in) {
        pthread_mutex_unlock(&r->grow_lock);
        return 0; /* an optimisation: without memory for it, keep everything */
    }
    /* Take every stack: a producer that finds its stack empty meanwhile takes from a fuller one or
     * maps a new chunk, so this never blocks anyone, at worst costs one chunk. */
    uint32_t top[CHIME__SHARDS];
    size_t total = 0;
    for (unsigned s = 0; s < CHIME__SHARDS; s++) {
        top[s] = take_all(&r->shard[s]);
        for (uint32_t idx = top[s]; idx != CHIME__REC_NIL; idx = next_free(r, idx)) {
            free_in[idx >> CHIME__REC_CHUNK_SHIFT]++;
            total++;
        }
    }
    const uint32_t DROP = UINT32_MAX;
    size_t dropped = 0;
    for (uint32_t c = n; c-- > 0 && total >= keep + CHIME__REC_CHUNK;) {
        if (!r->meta[c].dropped && free_in[c] == CHIME__REC_CHUNK) {
            free_in[c] = DROP;
            total -= CHIME__REC_CHUNK;
            dropped++;
        }
    }
    /* Put the rest back, each stack in its old order, without the dropped chunks' records. */
    for (unsigned s = 0; s < CHIME__SHARDS; s++) {
        uint32_t first = CHIME__REC_NIL, last = CHIME__REC_NIL;
        for (uint32_t idx = top[s]; idx != CHIME__REC_NIL; idx = next_free(r, idx)) {
            if (free_in[idx >> CHIME__REC_CHUNK_SHIFT] == DROP)
                continue;
            if (last == CHIME__REC_NIL)
                first = idx;
            else
                atomic_store_explicit(&chime__records_at(r, last)->free_next, idx,
                                      memory_order_relaxed); /* published by push_chain */
            last = idx;
        }
        if (last != CHIME__REC_NIL)
            push_chain(r, &r->shard[s], first, last);
    }
    for (uint32_t c = 0; c < n; c++) {
        if (free_in[c] != DROP)
            continue;
        uint32_t floor = 0;
        for (uint32_t i = 0; i < CHIME__REC_CHUNK; i++) {
            /* relaxed: every record here is free and off every stack: only stale ids read them. */
            uint32_t gen = (uint32_t)(atomic_load_explicit(&r->dir[c][i].state,
                                                           memory_order_relaxed) >> 32);
            if (gen > floor)
                floor = gen;
        }
        r->meta[c].gen_floor = floor + 1 ? floor + 1 : 1;
        r->meta[c].dropped = true;
        /* The pages read as zeros from now on (generation 0: no id matches) and hold no memory. */
        madvise(r->dir[c], CHUNK_BYTES, MADV_DONTNEED);
        atomic_fetch_sub_explicit(&r->live_chunks, 1, memory_order_relaxed); /* a statistic */
    }
    chime__free(free_in, (n ? n : 1) * sizeof(*free_in));
    pthread_mutex_unlock(&r->grow_lock);
    return dropped;
}

void chime__records_close(struct chime__records *r)
{
    pthread_mutex_lock(&r->grow_lock);
    r->closed = true;
    for (unsigned s = 0; s < CHIME__SHARDS; s++) {
        /* relaxed: closing publishes nothing; a pop that sees the flag simply gives up. */
        atomic_fetch_or_explicit(&r->shard[s].head, HEAD_CLOSED, memory_order_relaxed);
    }
    pthread_mutex_unlock(&r->grow_lock);
}

size_t chime__records_count_free(struct chime__records *r)
{
    size_t total = 0;
    for (unsigned s = 0; s < CHIME__SHARDS; s++) {
        /* acquire: pairs with push_chain's release; the links below are read next. */
        uint64_t h = atomic_load_explicit(&r->shard[s].head, memory_order_acquire);
        for (uint32_t idx = HEAD_IDX(h); idx != CHIME__REC_NIL; idx = next_free(r, idx))
            total++;
    }
    return total;
}
