/* SPDX-License-Identifier: MIT */
/* The runtime's timer records, their free stacks and growth: see records.h (reclaim.c gives them
 * back). */
#define _GNU_SOURCE /* MAP_NORESERVE, MADV_*: Linux interfaces beyond C11 */
#include "runtime/records_impl.h"

#include <errno.h>
#include <sys/mman.h>

/* From this offset on the arrays ask for transparent huge pages: a cancel at 10^6 timers lands on a
 * random record of 32 MB, and with 4 KiB pages nearly every one is also a TLB miss. Below it, 2 MiB
 * pages would cost more memory than they save (as in wheel/nodes.c). */
#define HUGE_FROM (UINT64_C(4) << 20)
#define GRAIN (UINT32_C(1) << 17) /* records made writable at a time: 4 MiB of hot halves, 2 of cold */

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
    *r = (struct chime__records){ 0 };
    for (unsigned s = 0; s < CHIME__SHARDS; s++)
        atomic_init(&r->shard[s].head, CHIME__REC_NIL);
    atomic_init(&r->committed, 0);
    atomic_init(&r->used, 0);
    atomic_init(&r->dry, 0);
    if (pthread_mutex_init(&r->grow_lock, NULL))
        return -ENOMEM; /* nothing reserved yet */
    r->hot = reserve(RESERVE_HOT, PROT_NONE);
    r->cold = reserve(RESERVE_COLD, PROT_NONE);
    r->period = reserve(RESERVE_PERIOD, PROT_NONE);
    r->chunk = reserve(CHUNK_TABLE, PROT_READ | PROT_WRITE); /* 1.5 MiB, touched as chunks are used */
    if (!r->hot || !r->cold || !r->period || !r->chunk) {
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
    if (r->chunk)
        munmap(r->chunk, CHUNK_TABLE);
    /* Initialised before any reservation, so whenever this runs (once after a successful init, or
     * from a failed one). It was initialised last, and a reservation that failed before the
     * table's left it destroyed uninitialised (found in review; harmless with glibc). */
    pthread_mutex_destroy(&r->grow_lock);
    r->hot = NULL;
    r->cold = NULL;
    r->period = NULL;
    r->chunk = NULL;
}

/* ---- the free stacks ---- */

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

/* Put a chunk to use (the lowest FRESH one, or a new one on top) and push its records onto shard s. */
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
    uint32_t first = c << CHIME__REC_CHUNK_SHIFT;
    for (uint32_t i = 0; i < CHIME__REC_CHUNK; i++) {
        struct chime__rec *rec = &r->hot[first + i];
        rec->pos = CHIME__REC_UNPLACED; /* before any taker: published by push_chain */
        chime__state_fresh(&rec->state, gen, s); /* reaches takers through push_chain */
        atomic_store_explicit(&rec->link, i + 1 < CHIME__REC_CHUNK ? first + i + 1 : CHIME__REC_NIL,
                              memory_order_relaxed);
    }
    ch->f_first = ch->f_last = CHIME__REC_NIL;
    ch->nfree = 0;
    atomic_fetch_add_explicit(&r->used, 1, memory_order_relaxed); /* a count: chime__records_capacity */
    set_chunk_state(r, c, USED);
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
        if (!hint) {
            /* relaxed: a request, not data; the wake-up the caller makes carries it (wake.h). */
            atomic_fetch_or_explicit(&r->dry, 1u << shard, memory_order_relaxed);
            hint = 1;
        }
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

void chime__records_close(struct chime__records *r)
{
    pthread_mutex_lock(&r->grow_lock);
    r->closed = true;
    for (unsigned s = 0; s < CHIME__SHARDS; s++) {
        /* relaxed: closing publishes nothing; a pop that sees the flag simply gives up. */
        atomic_fetch_or_explicit(&r->shard[s].head, HEAD_CLOSED, memory_order_relaxed);
    }
    pthread_mutex_unlock(&r->grow_lock);
    r->sweeping = false; /* nothing of a sweep is held between steps */
}

size_t chime__records_capacity(const struct chime__records *r)
{
    /* relaxed: a count, exact on the advancing thread (which releases) once no producer grows. */
    return (size_t)atomic_load_explicit(&r->used, memory_order_relaxed) << CHIME__REC_CHUNK_SHIFT;
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
    return chime__records_capacity(r) - count_stacks(r) - r->nprivate - r->retired - n;
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

/* Every record of a chain is a free record of a used chunk (of chunk `only`, unless CHIME__REC_NIL),
 * and the chain ends. Return: NULL or a fault; *n its length. */
static const char *check_chain(const struct chime__records *r, uint32_t idx, uint32_t only, size_t *n)
{
    size_t limit = chime__records_capacity(r);
    for (*n = 0; idx != CHIME__REC_NIL; idx = next_free(r, idx)) {
        if (idx >= atomic_load_explicit(&r->committed, memory_order_acquire) ||
            chunk_state(r, idx >> CHIME__REC_CHUNK_SHIFT) != USED)
            return "a free list holds a record of no used chunk";
        if (only != CHIME__REC_NIL && idx >> CHIME__REC_CHUNK_SHIFT != only)
            return "a private list holds another chunk's record";
        if (chime__life(atomic_load_explicit(&r->hot[idx].state, memory_order_relaxed)) != CHIME__LIFE_FREE)
            return "a free list holds a record that is not free";
        if (++*n > limit)
            return "a free list cycles";
    }
    return NULL;
}

const char *chime__records_check(struct chime__records *r)
{
    size_t free_total = 0, live = 0, nprivate = 0, n;
    uint32_t used = 0, top = chunks_top(r);
    const char *err;
    for (uint32_t c = 0; c < top; c++) {
        const struct chime__chunk *ch = &r->chunk[c];
        if (chunk_state(r, c) == FRESH) {
            if (ch->live || ch->nfree)
                return "a fresh chunk holds records";
            continue;
        }
        used++;
        if ((err = check_chain(r, ch->nfree ? ch->f_first : CHIME__REC_NIL, c, &n)))
            return err;
        if (n != ch->nfree)
            return "a private list's length is not its count";
        if (ch->nfree && c < r->low_free)
            return "a private list below low_free";
        if (ch->live + ch->nfree > CHIME__REC_CHUNK)
            return "a chunk holds more records than it has";
        nprivate += n;
        live += ch->live;
    }
    if (nprivate != r->nprivate)
        return "private total wrong";
    if (live != r->live)
        return "live total wrong";
    if (used != atomic_load_explicit(&r->used, memory_order_relaxed))
        return "used chunk count wrong";
    for (unsigned s = 0; s < CHIME__SHARDS; s++) {
        uint64_t h = atomic_load_explicit(&r->shard[s].head, memory_order_acquire); /* as count_stacks */
        if ((err = check_chain(r, HEAD_IDX(h), CHIME__REC_NIL, &n)))
            return err;
        free_total += n;
    }
    for (unsigned s = 0; s < CHIME__SHARDS; s++)
        free_total += r->give[s].count;
    if (free_total + nprivate + live > (size_t)used << CHIME__REC_CHUNK_SHIFT)
        return "more records free or live than the chunks hold (one is counted twice)";
    return NULL;
}
