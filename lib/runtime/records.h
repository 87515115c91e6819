/*
 * The threaded runtime's timer records: a pool that many threads take from without a lock and that
 * only the advancing thread gives back to, addressed by generation-checked ids.
 *
 * A record is one cache line: the state word every thread may race on (see runtime.c for its
 * protocol), the queue link, and what the producer asked for. Records live in 4096-record chunks
 * (256 KiB) mapped with mmap and never unmapped before chime_timer_free(), so any thread may read any
 * record an id names, stale or forged: a chunk the pool has given back is madvise(MADV_DONTNEED)-ed,
 * which returns its memory to the system and makes it read as zeros, and a zero state word has
 * generation 0, which no id ever carries. When a given-back chunk is reused its generations resume
 * above the highest it reached, as in pool.h.
 *
 * Free records sit on CHIME__SHARDS lock-free stacks (Treiber stacks with a tag against ABA). A thread
 * takes from the stack of its own shard, fixed per thread, so producers on different threads do not
 * contend; the advancing thread gives each record back to the shard it came from, in batches.
 *
 * Concurrency contract:
 *   - chime__records_take, chime__records_find: any thread.
 *   - chime__records_give, chime__records_flush, chime__records_shrink, chime__records_close,
 *     chime__records_count_free: the advancing thread only.
 *   - init/destroy: no other call running.
 */
#ifndef CHIME_RECORDS_H
#define CHIME_RECORDS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chime.h"
#include "runtime/mpsc.h"

#define CHIME__REC_CHUNK_SHIFT 12
#define CHIME__REC_CHUNK (1u << CHIME__REC_CHUNK_SHIFT)
/* 2^16 chunks of 2^12 records: at most 268 million timers per runtime (16 GiB of records). The chunk
 * directory is sized for all of them at creation: 512 KiB of address space, touched as it fills. */
#define CHIME__REC_MAX_CHUNKS (1u << 16)
#define CHIME__SHARDS 8u /* a power of two; threads are spread over them round-robin */
#define CHIME__REC_NIL UINT32_MAX

struct chime__rec {
    struct chime__mpsc_node q;       /* the runtime's queue link */
    _Atomic uint64_t state;          /* generation << 32 | shard << 8 | flags: see runtime.c */
    _Atomic uint64_t deadline_ns;    /* requested deadline; rewritten by reschedule */
    _Atomic uint32_t free_next;      /* next record on a free stack (an index) */
    uint32_t idx;                    /* this record's index, set when its chunk is (re)initialised */
    chime_fn *fn;
    void *arg;
    uint64_t period_ns;              /* 0 for a one-shot timer */
    chime_id wheel_id;               /* the wheel timer carrying it; the advancing thread's alone */
};
_Static_assert(sizeof(struct chime__rec) == 64, "a record is one cache line");

/* One shard: a free stack whose head word is idx | closed << 32 | tag << 33, on its own line. */
struct chime__shard {
    _Alignas(64) _Atomic uint64_t head;
};

struct chime__chunk_meta {
    uint32_t gen_floor; /* the generation a (re)initialised chunk's records start at */
    bool dropped;       /* given back to the system (madvise) and not yet reused */
};

struct chime__records {
    struct chime__shard shard[CHIME__SHARDS];
    struct chime__rec **dir;        /* chunk directory: entries below nchunks never change */
    _Atomic uint32_t nchunks;       /* entries published (mapped), dropped ones included */
    pthread_mutex_t grow_lock;      /* serialises growth, shrinking and closing: never on the fast path */
    struct chime__chunk_meta *meta; /* per chunk, under grow_lock */
    _Atomic uint32_t live_chunks;   /* chunks holding memory: nchunks minus dropped */
    bool closed;                    /* under grow_lock: the pool hands out nothing more */
};

int chime__records_init(struct chime__records *r);
void chime__records_destroy(struct chime__records *r);

static inline struct chime__rec *chime__records_at(const struct chime__records *r, uint32_t idx)
{
    return &r->dir[idx >> CHIME__REC_CHUNK_SHIFT][idx & (CHIME__REC_CHUNK - 1)];
}

/* The record an id's index names, or NULL if no such record was ever mapped. The caller checks the
 * generation against the record's state word. O(1), no lock. */
static inline struct chime__rec *chime__records_find(const struct chime__records *r, chime_id id)
{
    uint32_t idx = (uint32_t)id;
    /* acquire: pairs with the release store of nchunks in grow(), so dir[] up to it is visible. */
    if ((idx >> CHIME__REC_CHUNK_SHIFT) >= atomic_load_explicit(&r->nchunks, memory_order_acquire))
        return NULL;
    return chime__records_at(r, idx);
}

/*
 * Take a free record for the calling thread's shard. Its state word holds its generation (free).
 * Return: 0; 1 if the shard's stack was empty and the record came from another shard or from new
 * memory (a hint to have the advancing thread give back what it holds); -ESHUTDOWN if the pool is
 * closed; -ENOMEM.
 */
int chime__records_take(struct chime__records *r, unsigned shard, struct chime__rec **out);

/* The advancing thread's per-shard batch of records to give back. */
struct chime__rec_batch {
    uint32_t first, last, count;
};

/* Kill every id naming rec and queue it for its shard's stack; batches of 64 are pushed at once. */
void chime__records_give(struct chime__records *r, struct chime__rec_batch *batch,
                         struct chime__rec *rec);
/* Push whatever the batches hold. */
void chime__records_flush(struct chime__records *r, struct chime__rec_batch batch[CHIME__SHARDS]);

/*
 * Give back to the system every chunk whose records are all free, keeping at least `keep` free
 * records. The batches must be flushed first. Return: chunks given back. O(free records).
 */
size_t chime__records_shrink(struct chime__records *r, size_t keep);

/* Refuse every later take with -ESHUTDOWN (a take already past its check still completes). */
void chime__records_close(struct chime__records *r);

/* Records on the free stacks; exact once the pool is closed. O(free records). */
size_t chime__records_count_free(struct chime__records *r);

/* Records the pool holds memory for. */
static inline size_t chime__records_capacity(const struct chime__records *r)
{
    return (size_t)atomic_load_explicit(&r->live_chunks, memory_order_relaxed) << CHIME__REC_CHUNK_SHIFT;
}

#endif /* CHIME_RECORDS_H */
