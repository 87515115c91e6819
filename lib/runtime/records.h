/* SPDX-License-Identifier: MIT */
/*
 * The threaded runtime's timer records: one per timer, a node of the wheel's levels and the target
 * of its id, in arrays that never move; free records on lock-free stacks that producers take from;
 * memory given back in whole chunks without ever walking the pool while timers are due.
 *
 * A RECORD is 48 bytes in two parallel arrays, plus the levels' 4-byte entry while it is pending:
 *     hot (32 bytes, struct chime__rec)       cold (16 bytes, struct chime__rec_call)
 *     @0  deadline, ticks (the levels')        fn
 *     @8  pos (the levels' position word)      arg
 *     @12 link (queue / free stack / private list)
 *     @16 state (state.h)
 *     @24 deadline_ns, as requested
 * The levels (wheel/levels.h) reach deadline and pos and nothing else; only the advancing thread
 * touches them. A periodic timer's period sits in a third array, touched only where periodic timers
 * are. The id is generation << 32 | index, the generation being the state word's high half, so a
 * cancel does one lookup (base + index) and decides with one compare-and-swap on the record it lands on.
 *
 * ARRAYS THAT NEVER MOVE. Producers read any record an id names while the advancing thread works, so
 * the arrays are address space reserved once for CHIME__REC_MAX records (PROT_NONE, no memory) and
 * committed chunk by chunk (CHIME__REC_CHUNK records) as the pool grows: a lookup is one bounds check
 * against `committed` and an add. A chunk given back is madvise(MADV_DONTNEED)-ed: its memory leaves
 * the process and its pages read as zeros, and a zero state word has generation 0, which no id carries,
 * so a stale or forged id reads mapped memory and gets -ENOENT. A chunk reused later starts its
 * generations above the highest it reached, so no old id comes back to life. A record given back at
 * the last generation (UINT32_MAX) is retired: never handed out again (a next generation would wrap
 * and revive its first ids: found in review), and its chunk is never released. 48 bytes per 2^32
 * reuses of one record.
 *
 * FREE RECORDS sit on CHIME__SHARDS Treiber stacks linked by index (a tag in the head word against
 * ABA). A thread takes from its own shard's stack, so producers on different threads do not contend;
 * the advancing thread gives each record back to the shard of the thread that took it, in batches.
 * A producer whose shard is empty takes from another, then grows the pool under a mutex (the only lock
 * near a producer, and only when the pool grows).
 *
 * GIVING MEMORY BACK never delays a due timer: the advancing thread does O(1) work per record it
 * gives back, and anything that walks more than one record runs in bounded steps only when it is idle.
 *   - Every chunk has a private free list, the advancing thread's. A record given back goes to its
 *     shard's stack while producers are taking records (`demand`) and its chunk is below the
 *     watermark (the chunks live records want: live * 5/4, a few iterations' demand, and a reserve
 *     of CHIME__REC_RESERVE chunks); otherwise to its chunk's private list. So while timers only end
 *     (a burst firing, cancels without new schedules), free records gather chunk by chunk instead of
 *     on stacks in no order.
 *   - A producer that finds its stack empty marks its shard dry (and wakes the advancing thread, which
 *     refills the shard with private lists, the lowest chunks' first, one push per list).
 *   - Idle steps: a chunk above the watermark whose every record is on its private list holds no live
 *     timer and no record anyone can take, and is released (madvise), up to RELEASE_RUN contiguous
 *     chunks per step; and when the watermark falls, a sweep moves records of the chunks above it off
 *     the stacks into their private lists, a bounded number per step, taking a stack off its shard and
 *     putting back what it did not look at before the step ends.
 *
 * Concurrency contract:
 *   - chime__records_take, chime__records_find, chime__records_at, _capacity: any thread.
 *   - chime__records_known, _give, _balance, _flush, _idle, _close, _taken, _each: the advancing
 *     thread only.
 *   - init/destroy: no other call running.
 */
#ifndef CHIME_RUNTIME_RECORDS_H
#define CHIME_RUNTIME_RECORDS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chime.h"
#include "runtime/state.h"
#include "wheel/levels.h"

#define CHIME__REC_CHUNK_SHIFT 12
#define CHIME__REC_CHUNK (1u << CHIME__REC_CHUNK_SHIFT) /* 4096 records: 192 KiB with the cold halves */
/* At most 2^28 records: the levels' bound on nodes (levels.h). 12 GiB of address space, reserved. */
#define CHIME__REC_MAX CHIME__MAX_NODES
#define CHIME__REC_CHUNKS (CHIME__REC_MAX >> CHIME__REC_CHUNK_SHIFT)
#define CHIME__SHARDS 8u          /* free stacks; threads are spread over them round-robin */
#define CHIME__REC_RESERVE 2u     /* chunks kept beyond what live timers need */
#define CHIME__REC_NIL UINT32_MAX
/* A record's pos while it is not in the levels (no entry has this index: levels.h). */
#define CHIME__REC_UNPLACED CHIME__POS_INDEX
_Static_assert(CHIME__SHARDS <= CHIME__ST_SHARDS, "a shard fits the state word's field");

struct chime__rec {
    uint64_t deadline;            /* ticks; the levels' (advancing thread only) */
    uint32_t pos;                 /* the levels' position word, or CHIME__REC_UNPLACED */
    _Atomic uint32_t link;        /* next on the queue, a free stack, or a private list */
    _Atomic uint64_t state;       /* state.h */
    _Atomic uint64_t deadline_ns; /* the requested deadline: the producer's (or its delay: D,
                                     state.h), then a reschedule's */
};
_Static_assert(offsetof(struct chime__rec, deadline) == CHIME__NODE_DEADLINE_AT &&
               offsetof(struct chime__rec, pos) == CHIME__NODE_POS_AT,
               "a record is a node of the levels");
_Static_assert(sizeof(struct chime__rec) == 32, "two hot halves per cache line");

struct chime__rec_call {
    chime_fn *fn;
    void *arg;
};
_Static_assert(sizeof(struct chime__rec_call) == 16, "four cold halves per cache line");

#define CHIME__REC_LINK_AT offsetof(struct chime__rec, link)

/* One free stack: idx | closed << 32 | tag << 33, alone on its line. */
struct chime__shard {
    _Alignas(64) _Atomic uint64_t head;
};

/* The advancing thread's per-shard batch of records to give back. */
struct chime__rec_batch {
    uint32_t first, last, count;
};

struct chime__chunk;

struct chime__records {
    /* Read-only after init. */
    struct chime__rec *hot;
    struct chime__rec_call *cold;
    uint64_t *period;              /* period_ns by index; pages touched only for periodic timers */
    struct chime__chunk *chunk;    /* CHIME__REC_CHUNKS entries, reserved like the records */

    struct chime__shard shard[CHIME__SHARDS];

    /* Shared. */
    _Alignas(64) _Atomic uint32_t committed; /* records [0, committed) are mapped: find's bound;
                                                committed / CHIME__REC_CHUNK chunks ever used */
    _Atomic uint32_t used;                   /* chunks holding memory (not FRESH) */
    _Atomic uint32_t dry;                    /* bit s: a producer found shard s's stack empty */
    uint32_t mapped;                         /* records [0, mapped) are writable (under grow_lock) */
    bool closed;                             /* the pool hands out nothing more (under grow_lock) */
    pthread_mutex_t grow_lock;               /* growth, release, close: never on the fast path */

    /* The advancing thread's own. */
    _Alignas(64) size_t live;                /* records taken in and not given back */
    size_t known, known_seen;                /* records ever taken in; at the last balance */
    size_t demand;                           /* records taken in per iteration, recently */
    size_t nprivate;                         /* records on private lists, all chunks */
    size_t retired;                          /* records given back at the last generation */
    uint32_t watermark;                      /* chunks below it feed the stacks */
    uint32_t low_free;                       /* no private list below this chunk */
    bool sweep_wanted;                       /* the watermark fell since the last sweep began */
    bool sweeping;                           /* a sweep pass is under way... */
    unsigned sweep_shard;                    /* ...at this shard's stack */
    struct chime__rec_batch give[CHIME__SHARDS];
};

/* Reserve the arrays. Return: 0, or -ENOMEM. */
int chime__records_init(struct chime__records *r);
void chime__records_destroy(struct chime__records *r);

static inline struct chime__rec *chime__records_at(const struct chime__records *r, uint32_t idx)
{
    return &r->hot[idx];
}

static inline struct chime__rec_call *chime__records_call(const struct chime__records *r, uint32_t idx)
{
    return &r->cold[idx];
}

/* Point the levels at the records' hot and cold halves. Once: the arrays never move. */
static inline void chime__records_attach(const struct chime__records *r, struct chime__levels *L)
{
    L->nodes = (char *)r->hot;
    L->stride = sizeof(struct chime__rec);
    L->cold = (char *)r->cold;
    L->cold_stride = sizeof(struct chime__rec_call);
}

/* Record idx's period in ns (periodic timers only): written by the producer that took it, before
 * its push; read by the advancing thread. */
static inline uint64_t *chime__records_period(const struct chime__records *r, uint32_t idx)
{
    return &r->period[idx];
}

/* Records taken in and not given back. The advancing thread only. */
static inline size_t chime__records_live(const struct chime__records *r)
{
    return r->live;
}

/* Every index below this names a mapped record (a bound for checks). Any thread. */
static inline uint32_t chime__records_mapped(const struct chime__records *r)
{
    /* acquire: pairs with the release store of committed in grow(): the chunk is mapped. */
    return atomic_load_explicit(&((struct chime__records *)r)->committed, memory_order_acquire);
}

/* The record an id's index names, or NULL if no record there was ever mapped. The caller checks the
 * generation against the record's state word (state.h). O(1), no lock. */
static inline struct chime__rec *chime__records_find(const struct chime__records *r, chime_id id)
{
    uint32_t idx = (uint32_t)id;
    if (idx >= chime__records_mapped(r))
        return NULL;
    return &r->hot[idx];
}

static inline chime_id chime__records_id(uint64_t state, uint32_t idx)
{
    return (uint64_t)chime__gen(state) << 32 | idx;
}

/*
 * Take a free record for the calling thread's shard; *state receives its state word (FREE, with the
 * generation to use). Return: 0; 1 if the shard's stack was empty and the record came from another
 * shard or from new memory (a hint to have the advancing thread give back what it holds);
 * -ESHUTDOWN if the pool is closed; -ENOMEM.
 */
int chime__records_take(struct chime__records *r, unsigned shard, uint32_t *idx, uint64_t *state);

/* The advancing thread has taken record idx in (its first apply): it counts as live. O(1). */
void chime__records_known(struct chime__records *r, uint32_t idx);

/* Give record idx back (it was known): every id naming it dies, and it goes to its shard's stack or
 * to its chunk's private list (see the top). O(1) amortised. */
void chime__records_give(struct chime__records *r, uint32_t idx);

/*
 * Once per iteration of the advancing thread: update the demand and the watermark, and refill the
 * shards producers found dry. O(chunks) at most (a refill's scan for private lists).
 * Return: true if the watermark fell: idle steps may now give back chunks that were below it, even
 * if no record is given back again.
 */
bool chime__records_balance(struct chime__records *r);

/* Push what the give-back batches hold onto the stacks. */
void chime__records_flush(struct chime__records *r);

/* One bounded step of giving memory back (the sweep, or releasing one chunk). Call it only when no
 * timer is due and nothing is queued. Return: true if there is more to do. */
bool chime__records_idle(struct chime__records *r);

/* Refuse every later take with -ESHUTDOWN (a take already past its check still completes). */
void chime__records_close(struct chime__records *r);

/* Records taken by producers and not given back (live ones and ones not yet applied). Exact once the
 * pool is closed and no take is in progress. O(free records). */
size_t chime__records_taken(struct chime__records *r);

/* Call fn(ctx, idx) for every record of every chunk that holds memory. O(capacity). */
void chime__records_each(struct chime__records *r, void (*fn)(void *ctx, uint32_t idx), void *ctx);

/* Records the pool holds memory for (chunks not FRESH). Any thread; exact once no producer grows. */
size_t chime__records_capacity(const struct chime__records *r);

/* Walk the stacks and private lists: every record free once, counts right. For the tests: call it with
 * no producer at work. Return: NULL or a description of the first fault. O(capacity). */
const char *chime__records_check(struct chime__records *r);

#endif /* CHIME_RUNTIME_RECORDS_H */
