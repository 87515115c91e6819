/* SPDX-License-Identifier: MIT */
/*
 * The record pool's give-back half (records.h, "giving memory back"): where a record goes when the
 * advancing thread gives it back, the watermark and the producers' demand, refilling dry shards, and
 * the idle steps that give memory back (the sweep, releasing chunks). The advancing thread's alone.
 */
#define _GNU_SOURCE /* MADV_DONTNEED: a Linux interface beyond C11 */
#include <sys/mman.h>

#include "runtime/records_impl.h"

#define SWEEP_STEP 256   /* records an idle sweep step looks at: a few tens of microseconds at most,
                            one cache miss each */
#define RELEASE_RUN 32u  /* chunks released in one idle step at most */

/* Chunks to keep for `live` records: a quarter more, and the reserve. */
static uint32_t wanted(size_t live)
{
    return (uint32_t)((live + live / 4 + CHIME__REC_CHUNK - 1) >> CHIME__REC_CHUNK_SHIFT) + CHIME__REC_RESERVE;
}

void chime__records_known(struct chime__records *r, uint32_t idx)
{
    r->chunk[idx >> CHIME__REC_CHUNK_SHIFT].live++;
    r->live++;
    r->known++;
}

/* Put free record idx on its chunk's private list. */
static void keep_private(struct chime__records *r, uint32_t c, uint32_t idx)
{
    struct chime__chunk *ch = &r->chunk[c];
    /* relaxed: the list is this thread's; a refill's push publishes it. */
    atomic_store_explicit(link_of(r, idx), ch->nfree ? ch->f_first : CHIME__REC_NIL, memory_order_relaxed);
    if (!ch->nfree)
        ch->f_last = idx;
    ch->f_first = idx;
    ch->nfree++;
    r->nprivate++;
    if (c < r->low_free)
        r->low_free = c;
}

void chime__records_give(struct chime__records *r, uint32_t idx)
{
    struct chime__rec *rec = &r->hot[idx];
    uint32_t c = idx >> CHIME__REC_CHUNK_SHIFT;
    struct chime__chunk *ch = &r->chunk[c];
    rec->pos = CHIME__REC_UNPLACED;
    /* relaxed: the word is this thread's now (state.h, freed: no transition races it) */
    uint32_t gen_was = chime__gen(atomic_load_explicit(&rec->state, memory_order_relaxed));
    uint64_t s = chime__state_freed(&rec->state);
    if (chime__gen(s) > ch->gen_max)
        ch->gen_max = chime__gen(s);
    ch->live--;
    r->live--;
    if (chime__gen(s) == gen_was) { /* the last generation: retired, on no list (records.h) */
        r->retired++;
        return;
    }
    if (!r->demand || c >= r->watermark) {
        keep_private(r, c, idx); /* nobody is taking, or its chunk is beyond what live records need */
        return;
    }
    struct chime__rec_batch *b = &r->give[chime__shard(s)];
    chain_add(r, b, idx);
    if (b->count == GIVE_BATCH) {
        push_chain(r, &r->shard[chime__shard(s)], b->first, b->last);
        b->count = 0;
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

/* A producer found shard s empty: push private lists onto it, the lowest chunks' first, enough for
 * two iterations of the recent demand (at least a chunk's worth), or all there is. Each list goes in
 * one push. */
static void refill(struct chime__records *r, unsigned s)
{
    size_t want = 2 * r->demand > CHIME__REC_CHUNK ? 2 * r->demand : CHIME__REC_CHUNK, pushed = 0;
    uint32_t top = chunks_top(r);
    for (uint32_t c = r->low_free; c < top && pushed < want; c++) {
        /* A FRESH chunk holds no list, and a producer growing the pool may be writing its fields:
         * read them only once its state says USED (chunk_state's acquire pairs with growth's
         * release, after its writes). */
        if (chunk_state(r, c) != USED)
            continue;
        struct chime__chunk *ch = &r->chunk[c];
        if (!ch->nfree)
            continue;
        push_chain(r, &r->shard[s], ch->f_first, ch->f_last);
        pushed += ch->nfree;
        r->nprivate -= ch->nfree;
        ch->nfree = 0;
        r->low_free = c + 1; /* the lists below are empty */
    }
}

bool chime__records_balance(struct chime__records *r)
{
    /* Demand: records taken in since the last call, or half the last figure, whichever is more, so
     * that it falls to 0 a few iterations after producers stop. */
    size_t recent = r->known - r->known_seen;
    r->known_seen = r->known;
    r->demand = recent > r->demand / 2 ? recent : r->demand / 2;
    uint32_t mark = wanted(r->live + 4 * r->demand);
    bool fell = mark < r->watermark;
    if (fell)
        r->sweep_wanted = true; /* records of the chunks above may be on the stacks */
    r->watermark = mark;
    /* relaxed: a request that carries no data (the refill publishes through its own pushes); a bit
     * set just after this exchange is seen at the next iteration, which its wake-up brings. */
    uint32_t dry = atomic_exchange_explicit(&r->dry, 0, memory_order_relaxed);
    for (unsigned s = 0; dry; s++, dry >>= 1)
        if (dry & 1)
            refill(r, s);
    return fell;
}

/* ---- idle work: the sweep and releasing chunks ---- */

/*
 * Put back the chain starting at first, whose last record's link is NIL, onto shard s's stack, which
 * a sweep step emptied. O(1) unless a producer grew the pool onto that stack meanwhile: then what it
 * pushed (a chunk's chain, or a few) is taken off and walked to its end, to go on top. Producers may
 * take all of that between our look at the stack and our taking it: then there is nothing to walk.
 */
static void reattach(struct chime__records *r, struct chime__shard *s, uint32_t first)
{
    uint64_t h = atomic_load_explicit(&s->head, memory_order_relaxed); /* the CAS checks it */
    for (;;) {
        if (HEAD_IDX(h) == CHIME__REC_NIL) {
            /* release: as in push_chain: a taker sees the chain's links. */
            if (atomic_compare_exchange_weak_explicit(&s->head, &h, HEAD_NEXT_TAG(h) | (h & HEAD_CLOSED) | first,
                                                      memory_order_release, memory_order_relaxed))
                return;
            continue;
        }
        uint32_t x = take_all(s), tail = x;
        if (x == CHIME__REC_NIL) {
            h = atomic_load_explicit(&s->head, memory_order_relaxed); /* the CAS above checks it */
            continue;
        }
        while (next_free(r, tail) != CHIME__REC_NIL)
            tail = next_free(r, tail);
        /* relaxed: the chain is ours until the CAS above publishes it. */
        atomic_store_explicit(link_of(r, tail), first, memory_order_relaxed);
        first = x;
        h = atomic_load_explicit(&s->head, memory_order_relaxed);
    }
}

/*
 * One step of the sweep over shard s: take its stack off, look at up to SWEEP_STEP records from the
 * top, move those of chunks at or above the watermark to their private lists and the others to the
 * previous shard's stack (swept already in this pass, or last: they are not looked at twice but for
 * shard 0's), and put the rest back at once. Nothing is held between steps, so producers of that
 * shard lose their free records for one step at most. Return: true if the stack is done.
 */
static bool sweep_step(struct chime__records *r, unsigned s)
{
    uint32_t next = take_all(&r->shard[s]);
    struct chime__rec_batch kept = { 0, 0, 0 };
    for (unsigned i = 0; i < SWEEP_STEP && next != CHIME__REC_NIL; i++) {
        uint32_t idx = next;
        next = next_free(r, idx);
        uint32_t c = idx >> CHIME__REC_CHUNK_SHIFT;
        if (c < r->watermark)
            chain_add(r, &kept, idx);
        else
            keep_private(r, c, idx);
    }
    if (kept.count)
        push_chain(r, &r->shard[(s + CHIME__SHARDS - 1) % CHIME__SHARDS], kept.first, kept.last);
    if (next == CHIME__REC_NIL)
        return true;
    reattach(r, &r->shard[s], next);
    return false;
}

static void release(void *base, size_t unit, uint32_t from, uint32_t to)
{
    madvise((char *)base + (size_t)from * CHIME__REC_CHUNK * unit, (size_t)(to - from) * CHIME__REC_CHUNK * unit,
            MADV_DONTNEED);
}

/* A chunk above the watermark whose every record is on its private list: none is live, none can be
 * taken. Not one that has reached the last generation: grown again, it would have none above to
 * start at (records.h). */
static bool releasable(const struct chime__records *r, uint32_t c)
{
    return c >= r->watermark && chunk_state(r, c) == USED &&
           r->chunk[c].nfree == CHIME__REC_CHUNK && r->chunk[c].gen_max != UINT32_MAX;
}

/* Give back the highest run of releasable chunks, at most RELEASE_RUN of them (one madvise per array:
 * a whole run of 16 or more spans whole huge pages, which go back without being split). Their pages
 * read as zeros from now on: generation 0. Return: false if there was none. */
static bool release_run(struct chime__records *r)
{
    uint32_t to = chunks_top(r);
    while (to > r->watermark && !releasable(r, to - 1))
        to--;
    if (to <= r->watermark)
        return false;
    uint32_t from = to - 1;
    while (from > r->watermark && to - from < RELEASE_RUN && releasable(r, from - 1))
        from--;
    /* Against growth, which looks for FRESH chunks and reads gen_max. A producer growing the pool
     * holds the lock for a while (it maps and fills a chunk): rather than wait, come back next step. */
    if (pthread_mutex_trylock(&r->grow_lock))
        return true;
    release(r->hot, REC_BYTES, from, to);
    release(r->cold, CALL_BYTES, from, to);
    release(r->period, sizeof(uint64_t), from, to);
    for (uint32_t c = from; c < to; c++) {
        r->chunk[c].nfree = 0;
        set_chunk_state(r, c, FRESH);
    }
    atomic_fetch_sub_explicit(&r->used, to - from, memory_order_relaxed); /* as in grow() */
    pthread_mutex_unlock(&r->grow_lock);
    r->nprivate -= (size_t)(to - from) << CHIME__REC_CHUNK_SHIFT;
    return true;
}

bool chime__records_idle(struct chime__records *r)
{
    if (r->closed)
        return false; /* read under no lock: only this thread closes */
    if (!r->sweeping && r->sweep_wanted) {
        r->sweep_wanted = false;
        r->sweeping = true;
        r->sweep_shard = 0;
    }
    if (r->sweeping) {
        if (sweep_step(r, r->sweep_shard) && ++r->sweep_shard == CHIME__SHARDS)
            r->sweeping = false;
        return true;
    }
    return release_run(r);
}
