/* The runtime's timer records: see records.h. */
#define _GNU_SOURCE /* MAP_NORESERVE, MADV_*: Linux interfaces beyond C11 */
#include "runtime/records.h"

#include <errno.h>
#include <sys/mman.h>

#define GIVE_BATCH 64    /* records the advancing thread gathers per shard before one push */
#define SWEEP_STEP 256   /* records an idle sweep step looks at: a few tens of microseconds at most,
                            one cache miss each */
/* From this offset on the arrays ask for transparent huge pages: a cancel at 10^6 timers lands on a
 * random record of 32 MB, and with 4 KiB pages nearly every one is also a TLB miss. Below it, 2 MiB
 * pages would cost more memory than they save (as in wheel/nodes.c). */
#define HUGE_FROM (UINT64_C(4) << 20)
#define GRAIN (UINT32_C(1) << 17) /* records made writable at a time: 4 MiB of hot halves, 2 of cold */

enum { FRESH, ACTIVE, DRAINING, READY };

/* Per chunk. state: FRESH <-> ACTIVE under grow_lock (growth, release); ACTIVE, DRAINING and READY
 * change among themselves on the advancing thread only. The counts are the advancing thread's, set
 * by growth for a FRESH chunk before its records can reach it. */
struct chime__chunk {
    _Atomic uint8_t state;
    uint32_t live;          /* records known and not given back */
    uint32_t quarantined;   /* records in the quarantine chain q_first..q_last */
    uint32_t q_first, q_last;
    uint32_t gen_max;       /* the highest generation a record of this chunk has had */
};

/* The stack's head word: index of the top record, a closed flag, and a tag that changes on every
 * successful update so that a pop that read a stale top fails its compare-and-swap (ABA). */
#define HEAD_IDX(h) ((uint32_t)(h))
#define HEAD_CLOSED (UINT64_C(1) << 32)
#define HEAD_NEXT_TAG(h) ((((h) >> 33) + 1) << 33)

#define REC_BYTES (sizeof(struct chime__rec))
#define CALL_BYTES (sizeof(struct chime__rec_call))
#define RESERVE_HOT ((size_t)CHIME__REC_MAX * REC_BYTES)
#define RESERVE_COLD ((size_t)CHIME__REC_MAX * CALL_BYTES)
#define RESERVE_PERIOD ((size_t)CHIME__REC_MAX * sizeof(uint64_t))
#define CHUNK_TABLE ((size_t)CHIME__REC_CHUNKS * sizeof(struct chime__chunk))

static void *reserve(size_t bytes, int prot)
{
    void *p = mmap(NULL, bytes, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

int chime__records_init(struct chime__records *r)
{
    *r = (struct chime__records){ .sweep_next = CHIME__REC_NIL };
    for (unsigned s = 0; s < CHIME__SHARDS; s++)
        atomic_init(&r->shard[s].head, CHIME__REC_NIL);
    atomic_init(&r->committed, 0);
    atomic_init(&r->active, 0);
    r->hot = reserve(RESERVE_HOT, PROT_NONE);
    r->cold = reserve(RESERVE_COLD, PROT_NONE);
    r->period = reserve(RESERVE_PERIOD, PROT_NONE);
    r->chunk = reserve(CHUNK_TABLE, PROT_READ | PROT_WRITE); /* 1.5 MiB, touched as chunks are used */
    if (!r->hot || !r->cold || !r->period || !r->chunk || pthread_mutex_init(&r->grow_lock, NULL)) {
        chime__records_destroy(r);
        return -ENOMEM;
    }
    madvise((char *)r->hot + HUGE_FROM, RESERVE_HOT - HUGE_FROM, MADV_HUGEPAGE); /* a hint */
    madvise((char *)r->cold + HUGE_FROM, RESERVE_COLD - HUGE_FROM, MADV_HUGEPAGE);
    return 0;
}

void chime__records_destroy(struct chime__records *r)
{
    if (r->hot)
        munmap(r->hot, RESERVE_HOT);
    if (r->cold)
        munmap(r->cold, RESERVE_COLD);
    if (r->period)
        munmap(r->period, RESERVE_PERIOD);
    if (r->chunk) {
        munmap(r->chunk, CHUNK_TABLE);
        pthread_mutex_destroy(&r->grow_lock); /* initialised whenever chunk was */
    }
    r->hot = NULL;
    r->cold = NULL;
    r->period = NULL;
    r->chunk = NULL;
}

static _Atomic uint32_t *link_of(const struct chime__records *r, uint32_t idx)
{
    return &r->hot[idx].link;
}

/* Chunks ever committed. acquire: pairs with the release store in grow(), so the chunk table's
 * entries below it are initialised. */
static uint32_t chunks_top(const struct chime__records *r)
{
    return atomic_load_explicit(&r->committed, memory_order_acquire) >> CHIME__REC_CHUNK_SHIFT;
}

static uint32_t chunk_state(const struct chime__records *r, uint32_t c)
{
    /* acquire: pairs with the release in set_chunk_state. A chunk's records travel through the stacks,
     * but its count in `active` does not: growth counts a chunk before it marks it ACTIVE, and the
     * advancing thread, which uncounts it after seeing it ACTIVE, must see that count first. */
    return atomic_load_explicit(&r->chunk[c].state, memory_order_acquire);
}

static void set_chunk_state(struct chime__records *r, uint32_t c, uint8_t state)
{
    atomic_store_explicit(&r->chunk[c].state, state, memory_order_release); /* see chunk_state */
}

/* ---- the free stacks ---- */

/* Push the chain first..last (linked through link) onto a shard's stack. */
static void push_chain(struct chime__records *r, struct chime__shard *s, uint32_t first, uint32_t last)
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

/* Pop one record. Return: 0; -EAGAIN if the stack is empty; -ESHUTDOWN if it is closed. */
static int pop(struct chime__records *r, struct chime__shard *s, uint32_t *idx)
{
    /* acquire: pairs with the release CAS in push_chain; the top record's link is read next. */
    uint64_t h = atomic_load_explicit(&s->head, memory_order_acquire);
    for (;;) {
        if (h & HEAD_CLOSED)
            return -ESHUTDOWN;
        uint32_t top = HEAD_IDX(h);
        if (top == CHIME__REC_NIL)
            return -EAGAIN;
        /* The taker writes both halves next, and its push (a locked instruction) waits for those
         * stores: fetch them for writing now, so their misses overlap the compare-and-swap. */
        __builtin_prefetch(&r->hot[top], 1);
        __builtin_prefetch(&r->cold[top], 1);
        /* relaxed: if top is still the top, its link was published by the push we acquired; if a
         * concurrent pop took it meanwhile, this value is garbage and the CAS below fails (the tag
         * changed). The record is mapped either way: chunks are never unmapped. */
        uint32_t next = atomic_load_explicit(link_of(r, top), memory_order_relaxed);
        /* acquire (success and failure): as the first load. */
        if (atomic_compare_exchange_weak_explicit(&s->head, &h, HEAD_NEXT_TAG(h) | (h & HEAD_CLOSED) | next,
                                                  memory_order_acquire, memory_order_acquire)) {
            *idx = top;
            return 0;
        }
    }
}

/* Take a shard's whole stack (leaving it empty, its closed flag kept). Return: the old top. */
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

static uint32_t next_free(const struct chime__records *r, uint32_t idx)
{
    /* relaxed: the caller owns the chain (taken off its stack, or never pushed). */
    return atomic_load_explicit(link_of(r, idx), memory_order_relaxed);
}

/* Append idx to a private chain (a batch, the sweep's kept records). */
static void chain_add(const struct chime__records *r, struct chime__rec_batch *b, uint32_t idx)
{
    /* relaxed: the chain is private until push_chain publishes it. Records go on the front, so the
     * chain pops in the reverse of its adding: the last given back is taken first (still in cache). */
    atomic_store_explicit(link_of(r, idx), b->count ? b->first : CHIME__REC_NIL, memory_order_relaxed);
    if (!b->count)
        b->last = idx;
    b->first = idx;
    b->count++;
}

/* ---- growth (producers, under grow_lock) ---- */

/* Make records [r->mapped, want) writable in every array, in whole grains: committing costs no
 * memory until a page is touched, and a grain spans whole 2 MiB pages of each array, which the
 * kernel can then back with transparent huge pages beyond HUGE_FROM (a fault inside a range that is
 * only partly writable gets 4 KiB pages). */
static int commit(struct chime__records *r, uint32_t want)
{
    if (want <= r->mapped)
        return 0;
    uint32_t to = (want + GRAIN - 1) / GRAIN * GRAIN;
    if (to > CHIME__REC_MAX)
        to = CHIME__REC_MAX;
    void *base[3] = { r->hot, r->cold, r->period };
    size_t unit[3] = { REC_BYTES, CALL_BYTES, sizeof(uint64_t) };
    for (int i = 0; i < 3; i++) {
        char *p = (char *)base[i] + (size_t)r->mapped * unit[i];
        if (mprotect(p, (size_t)(to - r->mapped) * unit[i], PROT_READ | PROT_WRITE))
            return -ENOMEM; /* an array made writable stays so; the next growth tries the rest again */
    }
    r->mapped = to;
    return 0;
}

static void populate(void *base, size_t unit, uint32_t c)
{
#ifdef MADV_POPULATE_WRITE
    /* The chunk is about to be written whole: one call maps its pages instead of a page fault per
     * page on producers' paths. Linux 5.14+; without it the faults come one by one. */
    madvise((char *)base + (size_t)c * CHIME__REC_CHUNK * unit, CHIME__REC_CHUNK * unit,
            MADV_POPULATE_WRITE);
#else
    (void)base, (void)unit, (void)c;
#endif
}

/* Make a chunk active (the lowest FRESH one, or a new one on top) and push its records onto shard s. */
static int grow(struct chime__records *r, unsigned s)
{
    /* relaxed: committed is written under grow_lock, which we hold. */
    uint32_t top = atomic_load_explicit(&r->committed, memory_order_relaxed) >> CHIME__REC_CHUNK_SHIFT;
    uint32_t c = 0;
    while (c < top && chunk_state(r, c) != FRESH)
        c++;
    if (c == top) {
        if (c == CHIME__REC_CHUNKS)
            return -ENOMEM;
        if (commit(r, (c + 1) << CHIME__REC_CHUNK_SHIFT))
            return -ENOMEM;
        r->chunk[c].gen_max = 0;
    }
    populate(r->hot, REC_BYTES, c);
    populate(r->cold, CALL_BYTES, c);
    struct chime__chunk *ch = &r->chunk[c];
    uint32_t gen = chime__gen_next(ch->gen_max);
    ch->gen_max = gen;
    ch->live = 0;
    ch->quarantined = 0;
    uint32_t first = c << CHIME__REC_CHUNK_SHIFT;
    for (uint32_t i = 0; i < CHIME__REC_CHUNK; i++) {
        struct chime__rec *rec = &r->hot[first + i];
        rec->pos = CHIME__REC_UNPLACED; /* before any taker: published by push_chain */
        /* relaxed: these records reach takers only through push_chain's release. A stale id's holder
         * may read the state word concurrently and finds a generation no live id carries. */
        atomic_store_explicit(&rec->state, chime__state_free(gen, s), memory_order_relaxed);
        atomic_store_explicit(&rec->link, i + 1 < CHIME__REC_CHUNK ? first + i + 1 : CHIME__REC_NIL,
                              memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&r->active, 1, memory_order_relaxed); /* ordered by the store below */
    set_chunk_state(r, c, ACTIVE);
    if (c == top) {
        /* release: pairs with the acquire loads in chime__records_find and chunks_top: the chunk is
         * mapped and its entry in the chunk table set. */
        atomic_store_explicit(&r->committed, (c + 1) << CHIME__REC_CHUNK_SHIFT, memory_order_release);
    }
    push_chain(r, &r->shard[s], first, first + CHIME__REC_CHUNK - 1);
    return 0;
}

int chime__records_take(struct chime__records *r, unsigned shard, uint32_t *idx, uint64_t *state)
{
    int err = pop(r, &r->shard[shard], idx);
    int hint = 0;
    while (err) {
        if (err == -ESHUTDOWN)
            return err;
        hint = 1;
        for (unsigned i = 1; i < CHIME__SHARDS && err == -EAGAIN; i++)
            err = pop(r, &r->shard[(shard + i) % CHIME__SHARDS], idx);
        if (err != -EAGAIN)
            continue; /* taken, or closed */
        pthread_mutex_lock(&r->grow_lock);
        err = r->closed ? -ESHUTDOWN : grow(r, shard);
        pthread_mutex_unlock(&r->grow_lock);
        if (err)
            return err;
        err = pop(r, &r->shard[shard], idx); /* others may take the new chunk first: then again */
    }
    /* relaxed: the pop's acquire made the record ours, state included. */
    *state = atomic_load_explicit(&r->hot[*idx].state, memory_order_relaxed);
    return hint;
}

/* ---- the balance between live records and active chunks (advancing thread) ---- */

/* Chunks to keep active for `live` records: a quarter more, and the reserve. */
static uint32_t wanted(size_t live)
{
    return (uint32_t)((live + live / 4 + CHIME__REC_CHUNK - 1) >> CHIME__REC_CHUNK_SHIFT) + CHIME__REC_RESERVE;
}

/* Start draining the highest active chunk. */
static void drain_one(struct chime__records *r)
{
    uint32_t c = chunks_top(r);
    while (c-- > 0) {
        if (chunk_state(r, c) == ACTIVE) { /* an active chunk has no quarantine: DRAINING, not READY */
            set_chunk_state(r, c, DRAINING);
            atomic_fetch_sub_explicit(&r->active, 1, memory_order_relaxed); /* as in grow() */
            r->draining++;
            r->sweep_wanted = true; /* some of its free records may be on the stacks */
            return;
        }
    }
}

/* Put the lowest draining chunk back to work: its quarantine goes onto a stack in one push. */
static void reactivate_one(struct chime__records *r)
{
    for (uint32_t c = 0, top = chunks_top(r); c < top; c++) {
        uint32_t st = chunk_state(r, c);
        if (st != DRAINING && st != READY)
            continue;
        struct chime__chunk *ch = &r->chunk[c];
        if (st == READY)
            r->ready--;
        r->draining--;
        set_chunk_state(r, c, ACTIVE);
        atomic_fetch_add_explicit(&r->active, 1, memory_order_relaxed); /* as in grow() */
        if (ch->quarantined) {
            unsigned s = chime__shard(atomic_load_explicit(&r->hot[ch->q_first].state,
                                                           memory_order_relaxed)); /* ours */
            push_chain(r, &r->shard[s], ch->q_first, ch->q_last);
            r->quarantined -= ch->quarantined;
            ch->quarantined = 0;
        }
        return;
    }
}

void chime__records_balance(struct chime__records *r)
{
    uint32_t active = atomic_load_explicit(&r->active, memory_order_relaxed); /* as in grow() */
    uint32_t want = wanted(r->live);
    if (active > want + 1)
        drain_one(r);
    else if (active < want && r->draining)
        reactivate_one(r);
}

void chime__records_known(struct chime__records *r, uint32_t idx)
{
    r->chunk[idx >> CHIME__REC_CHUNK_SHIFT].live++;
    r->live++;
    /* Live is growing: take a draining chunk back if live records want it (checked every 1024, so
     * the scan in it is O(1) amortised). Always safe, unlike draining (see chime__records_balance). */
    if (r->draining && (r->live & (CHIME__REC_CHUNK / 4 - 1)) == 0 &&
        atomic_load_explicit(&r->active, memory_order_relaxed) < wanted(r->live)) /* as in grow() */
        reactivate_one(r);
}

/* Put a free record of a draining chunk in its quarantine. */
static void quarantine(struct chime__records *r, uint32_t c, uint32_t idx)
{
    struct chime__chunk *ch = &r->chunk[c];
    /* relaxed: the quarantine is the advancing thread's; a reactivation's push publishes it. */
    atomic_store_explicit(link_of(r, idx), ch->quarantined ? ch->q_first : CHIME__REC_NIL,
                          memory_order_relaxed);
    if (!ch->quarantined)
        ch->q_last = idx;
    ch->q_first = idx;
    r->quarantined++;
    if (++ch->quarantined == CHIME__REC_CHUNK) {
        set_chunk_state(r, c, READY);
        r->ready++;
    }
}

void chime__records_give(struct chime__records *r, uint32_t idx)
{
    struct chime__rec *rec = &r->hot[idx];
    uint32_t c = idx >> CHIME__REC_CHUNK_SHIFT;
    struct chime__chunk *ch = &r->chunk[c];
    rec->pos = CHIME__REC_UNPLACED;
    uint64_t s = chime__state_freed(&rec->state);
    if (chime__gen(s) > ch->gen_max)
        ch->gen_max = chime__gen(s);
    ch->live--;
    r->live--;
    if (chunk_state(r, c) != ACTIVE) {
        quarantine(r, c, idx);
    } else {
        struct chime__rec_batch *b = &r->give[chime__shard(s)];
        chain_add(r, b, idx);
        if (b->count == GIVE_BATCH) {
            push_chain(r, &r->shard[chime__shard(s)], b->first, b->last);
            b->count = 0;
        }
    }
}

void chime__records_flush(struct chime__records *r)
{
    for (unsigned s = 0; s < CHIME__SHARDS; s++) {
        struct chime__rec_batch *b = &r->give[s];
        if (b->count) {
            push_chain(r, &r->shard[s], b->first, b->last);
            b->count = 0;
        }
    }
}

/* ---- idle work: the sweep and releasing chunks ---- */

/* Look at up to SWEEP_STEP records of the stack being swept; at its end, put back what stays. */
static void sweep_step(struct chime__records *r)
{
    if (r->sweep_next == CHIME__REC_NIL && r->sweep_kept.count == 0)
        r->sweep_next = take_all(&r->shard[r->sweep_shard]);
    for (unsigned i = 0; i < SWEEP_STEP && r->sweep_next != CHIME__REC_NIL; i++) {
        uint32_t idx = r->sweep_next;
        r->sweep_next = next_free(r, idx);
        uint32_t c = idx >> CHIME__REC_CHUNK_SHIFT;
        if (chunk_state(r, c) == ACTIVE)
            chain_add(r, &r->sweep_kept, idx);
        else
            quarantine(r, c, idx);
    }
    if (r->sweep_next != CHIME__REC_NIL)
        return;
    struct chime__rec_batch *k = &r->sweep_kept;
    if (k->count)
        push_chain(r, &r->shard[r->sweep_shard], k->first, k->last);
    k->count = 0;
    if (++r->sweep_shard == CHIME__SHARDS) {
        r->sweep_shard = 0;
        r->sweeping = false;
    }
}

static void release(void *base, size_t unit, uint32_t c)
{
    madvise((char *)base + (size_t)c * CHIME__REC_CHUNK * unit, CHIME__REC_CHUNK * unit, MADV_DONTNEED);
}

/* Give a READY chunk's memory back: its pages read as zeros from now on (generation 0). */
static void release_one(struct chime__records *r)
{
    for (uint32_t c = 0, top = chunks_top(r); c < top; c++) {
        if (chunk_state(r, c) != READY)
            continue;
        /* Against growth, which reads FRESH and gen_max. A producer growing the pool holds the lock
         * for a while (it maps and fills a chunk): rather than wait, try again at the next step. */
        if (pthread_mutex_trylock(&r->grow_lock))
            return;
        release(r->hot, REC_BYTES, c);
        release(r->cold, CALL_BYTES, c);
        release(r->period, sizeof(uint64_t), c);
        r->chunk[c].quarantined = 0;
        set_chunk_state(r, c, FRESH);
        pthread_mutex_unlock(&r->grow_lock);
        r->quarantined -= CHIME__REC_CHUNK;
        r->ready--;
        r->draining--;
        return;
    }
}

bool chime__records_idle(struct chime__records *r)
{
    if (r->closed)
        return false; /* read under no lock: only this thread closes */
    chime__records_balance(r);
    if (!r->sweeping && r->sweep_wanted) {
        r->sweep_wanted = false;
        r->sweeping = true;
    }
    if (r->sweeping)
        sweep_step(r);
    else if (r->ready)
        release_one(r);
    return r->sweeping || r->sweep_wanted || r->ready ||
           atomic_load_explicit(&r->active, memory_order_relaxed) > wanted(r->live) + 1;
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
    if (r->sweeping) { /* finish the stack being swept without quarantining: it goes back whole */
        while (r->sweep_next != CHIME__REC_NIL) {
            uint32_t idx = r->sweep_next;
            r->sweep_next = next_free(r, idx);
            chain_add(r, &r->sweep_kept, idx);
        }
        if (r->sweep_kept.count)
            push_chain(r, &r->shard[r->sweep_shard], r->sweep_kept.first, r->sweep_kept.last);
        r->sweep_kept.count = 0;
        r->sweeping = false;
    }
}

size_t chime__records_capacity(const struct chime__records *r)
{
    size_t active = atomic_load_explicit(&r->active, memory_order_relaxed); /* as in grow() */
    return (active + r->draining) << CHIME__REC_CHUNK_SHIFT;
}

static size_t count_stacks(const struct chime__records *r)
{
    size_t n = 0;
    for (unsigned s = 0; s < CHIME__SHARDS; s++) {
        /* acquire: pairs with push_chain's release; the links below are read next. */
        uint64_t h = atomic_load_explicit(&r->shard[s].head, memory_order_acquire);
        for (uint32_t idx = HEAD_IDX(h); idx != CHIME__REC_NIL; idx = next_free(r, idx))
            n++;
    }
    return n;
}

size_t chime__records_taken(struct chime__records *r)
{
    size_t n = 0;
    for (unsigned s = 0; s < CHIME__SHARDS; s++)
        n += r->give[s].count;
    return chime__records_capacity(r) - count_stacks(r) - r->quarantined - n;
}

void chime__records_each(struct chime__records *r, void (*fn)(void *ctx, uint32_t idx), void *ctx)
{
    for (uint32_t c = 0, top = chunks_top(r); c < top; c++) {
        if (chunk_state(r, c) == FRESH)
            continue;
        for (uint32_t i = 0; i < CHIME__REC_CHUNK; i++)
            fn(ctx, c << CHIME__REC_CHUNK_SHIFT | i);
    }
}

const char *chime__records_check(struct chime__records *r)
{
    size_t on_stacks = count_stacks(r), quarantined = 0, live = 0, seen = 0;
    uint32_t draining = 0, ready = 0, active = 0, top = chunks_top(r);
    for (uint32_t c = 0; c < top; c++) {
        const struct chime__chunk *ch = &r->chunk[c];
        uint32_t st = chunk_state(r, c);
        active += st == ACTIVE;
        draining += st == DRAINING || st == READY;
        ready += st == READY;
        if (st == FRESH) {
            if (ch->live || ch->quarantined)
                return "a fresh chunk holds records";
            continue;
        }
        if (st == READY && ch->quarantined != CHIME__REC_CHUNK)
            return "a ready chunk's quarantine is not full";
        if (st != READY && ch->quarantined == CHIME__REC_CHUNK)
            return "a full quarantine's chunk is not ready";
        if (st == ACTIVE && ch->quarantined)
            return "an active chunk has a quarantine";
        uint32_t n = 0;
        for (uint32_t idx = ch->quarantined ? ch->q_first : CHIME__REC_NIL; idx != CHIME__REC_NIL;
             idx = next_free(r, idx)) {
            if (idx >> CHIME__REC_CHUNK_SHIFT != c)
                return "a quarantine holds another chunk's record";
            if (chime__life(atomic_load_explicit(&r->hot[idx].state, memory_order_relaxed)) != CHIME__LIFE_FREE)
                return "a quarantined record is not free";
            if (++n > ch->quarantined)
                return "a quarantine is longer than its count";
        }
        if (n != ch->quarantined)
            return "a quarantine is shorter than its count";
        quarantined += n;
        live += ch->live;
        seen++;
    }
    if (quarantined != r->quarantined)
        return "quarantine total wrong";
    if (live != r->live)
        return "live total wrong";
    if (draining != r->draining || ready != r->ready ||
        active != atomic_load_explicit(&r->active, memory_order_relaxed))
        return "chunk counts wrong";
    for (unsigned s = 0; s < CHIME__SHARDS; s++) {
        uint64_t h = atomic_load_explicit(&r->shard[s].head, memory_order_acquire); /* as count_stacks */
        for (uint32_t idx = HEAD_IDX(h); idx != CHIME__REC_NIL; idx = next_free(r, idx)) {
            if (idx >= top << CHIME__REC_CHUNK_SHIFT || chunk_state(r, idx >> CHIME__REC_CHUNK_SHIFT) == FRESH)
                return "a stack holds a record of no chunk";
            if (chime__life(atomic_load_explicit(&r->hot[idx].state, memory_order_relaxed)) != CHIME__LIFE_FREE)
                return "a stack holds a record that is not free";
        }
    }
    size_t batched = 0;
    for (unsigned s = 0; s < CHIME__SHARDS; s++)
        batched += r->give[s].count;
    if (on_stacks + quarantined + batched + live > seen << CHIME__REC_CHUNK_SHIFT)
        return "more records free or live than the chunks hold (one is counted twice)";
    return NULL;
}
