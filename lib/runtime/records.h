/*
 * The threaded runtime's timer records: one per timer, a node of the wheel's levels and the target
 * of its id, in arrays that never move; free records on lock-free stacks that producers take from;
 * memory given back in whole chunks without ever walking the pool while timers are due.
 *
 * A RECORD is 48 bytes in two parallel arrays, plus the levels' 4-byte entry while it is pending:
 *     hot (32 bytes, struct chime__rec)       cold (16 bytes, struct chime__rec_call)
 *     @0  deadline, ticks (the levels')        fn
 *     @8  pos (the levels' position word)      arg
 *     @12 link (queue / free stack / quarantine)
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
 * generations above the highest it reached, so no old id comes back to life.
 *
 * FREE RECORDS sit on CHIME__SHARDS Treiber stacks linked by index (a tag in the head word against
 * ABA). A thread takes from its own shard's stack, so producers on different threads do not contend;
 * the advancing thread gives each record back to the shard of the thread that took it, in batches.
 * A producer whose shard is empty takes from another, then grows the pool under a mutex (the only lock
 * near a producer, and only when the pool grows).
 *
 * GIVING MEMORY BACK never delays a due timer: the advancing thread does O(1) work per record it
 * gives back, and anything that walks more than one record runs in bounded steps only when it is idle.
 *   - A chunk is FRESH (no memory), ACTIVE (its records circulate), DRAINING (its records are given
 *     back to a quarantine of its own, not to the stacks) or READY (draining, every record
 *     quarantined). The advancing thread keeps about live * 5/4 records' worth of chunks active plus
 *     a reserve of CHIME__REC_RESERVE chunks: when more are active, it marks the highest active chunk
 *     DRAINING (once per iteration, and only when nothing is queued, else `live` misses the records on
 *     their way); when live grows back it reactivates a draining chunk (its quarantine goes to a stack
 *     in one push). Each is a scan of chunk states, once per iteration or per 1024 records.
 *   - Records of a chunk that was still active when they were given back sit on the stacks: an idle
 *     sweep (chime__records_idle) takes one stack at a time and moves them to their chunk's quarantine,
 *     a bounded number per step.
 *   - A READY chunk holds no live timer and no free record anyone can take: the idle step releases it,
 *     one per step.
 *
 * Concurrency contract:
 *   - chime__records_take, chime__records_find, chime__records_at: any thread.
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
#define CHIME__REC_RESERVE 2u     /* chunks kept active beyond what live timers need */
#define CHIME__REC_NIL UINT32_MAX
/* A record's pos while it is not in the levels (no entry has this index: levels.h). */
#define CHIME__REC_UNPLACED CHIME__POS_INDEX
_Static_assert(CHIME__SHARDS <= CHIME__ST_SHARDS, "a shard fits the state word's field");

struct chime__rec {
    uint64_t deadline;            /* ticks; the levels' (advancing thread only) */
    uint32_t pos;                 /* the levels' position word, or CHIME__REC_UNPLACED */
    _Atomic uint32_t link;        /* next on the queue, a free stack, or a quarantine */
    _Atomic uint64_t state;       /* state.h */
    _Atomic uint64_t deadline_ns; /* the requested deadline: the producer's, then a reschedule's */
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

    /* Growth: shared, under grow_lock. */
    _Alignas(64) _Atomic uint32_t committed; /* records [0, committed) are mapped: find's bound;
                                                committed / CHIME__REC_CHUNK chunks ever used */
    _Atomic uint32_t active;                 /* ACTIVE chunks */
    bool closed;                             /* the pool hands out nothing more */
    uint32_t mapped;                         /* records [0, mapped) are writable (commit()) */
    pthread_mutex_t grow_lock;               /* growth, release, close: never on the fast path */

    /* The advancing thread's own. */
    _Alignas(64) size_t live;                /* records taken in and not given back */
    size_t quarantined;                      /* records in quarantines, all chunks */
    uint32_t draining, ready;                /* DRAINING (READY included) and READY chunks */
    bool sweep_wanted;                       /* a chunk began draining since the last sweep began */
    bool sweeping;
    unsigned sweep_shard;                    /* the stack being swept, taken off its shard */
    uint32_t sweep_next;                     /* the rest of it, still to look at */
    struct chime__rec_batch sweep_kept;      /* what goes back to that shard */
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

/* The record an id's index names, or NULL if no record there was ever mapped. The caller checks the
 * generation against the record's state word (state.h). O(1), no lock. */
static inline struct chime__rec *chime__records_find(const struct chime__records *r, chime_id id)
{
    uint32_t idx = (uint32_t)id;
    /* acquire: pairs with the release store of committed in grow(): the chunk is mapped. */
    if (idx >= atomic_load_explicit(&r->committed, memory_order_acquire))
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

/* Give record idx back (it was known): every id naming it dies, and it goes to its shard's stack or,
 * if its chunk is draining, to the chunk's quarantine. O(1) amortised. */
void chime__records_give(struct chime__records *r, uint32_t idx);

/*
 * Drain the highest active chunk if more are active than the live records want, or put a draining
 * one back to work if fewer. Call it only when nothing is queued: `live` counts the records the
 * advancing thread has taken in, and while a storm's records are on their way through the queue it
 * is far below what producers hold; draining then would quarantine records the producers need, and
 * they would grow the pool again (found in review). O(chunks) at most, so call it at most once per
 * batch of work (the advancing thread: once per iteration).
 */
void chime__records_balance(struct chime__records *r);

/* Push what the give-back batches hold onto the stacks. */
void chime__records_flush(struct chime__records *r);

/* One bounded step of giving memory back (the sweep, or releasing one chunk). Call it only when no
 * timer is due and nothing is queued. Return: true if there is more to do. */
bool chime__records_idle(struct chime__records *r);

/* Refuse every later take with -ESHUTDOWN (a take already past its check still completes), and put
 * back what a sweep had taken off a stack. */
void chime__records_close(struct chime__records *r);

/* Records taken by producers and not given back (live ones and ones not yet applied). Exact once the
 * pool is closed and no take is in progress. O(free records). */
size_t chime__records_taken(struct chime__records *r);

/* Call fn(ctx, idx) for every record of every chunk that holds memory. O(capacity). */
void chime__records_each(struct chime__records *r, void (*fn)(void *ctx, uint32_t idx), void *ctx);

/* Records the pool holds memory for (chunks not FRESH). */
size_t chime__records_capacity(const struct chime__records *r);

/* Walk the stacks and quarantines: every record free once, counts right. For the tests: call it with
 * no producer at work. Return: NULL or a description of the first fault. O(capacity). */
const char *chime__records_check(struct chime__records *r);

#endif /* CHIME_RUNTIME_RECORDS_H */
