/* SPDX-License-Identifier: MIT */
/*
 * The journal's key index (index.h): open-addressed tables, small ones in memory, large ones in
 * unnamed files read and written slot by slot.
 *
 * A slot is {hash lo, hash hi, version, due}; version 0 marks an empty slot, and a version with the
 * ENDED bit an ended entry: its key has no entry (a lookup reads it as absent), but the slot stays
 * occupied, so a lookup passes it and stops at the first empty slot only.
 *
 * DELETION. In a table in memory, deletion shifts the following slots of the probe run back, so it
 * leaves no ended entry. In a file that would read the rest of the run (a pread, a microsecond or
 * more of system call on the project's VM), so there the entry ends in place instead, by its tag
 * alone (index_table.c, T2): nothing written, nothing read, nothing that can fail. With
 * chime__index_find_live, which finds a key known to be present from the tags alone, an
 * acknowledgement then makes no system call and adds nothing to the batch. An ended slot is taken
 * by the next absent key whose probe run passes it, and the rest go when the table next fills (3/4
 * of its slots, ended ones counted): reserve() rehashes it without them, at the same size unless
 * what is left needs a larger one. A rebuild leaves ended entries too (a version that ended must
 * not come back while the journal is read in any order); chime__index_rebuild_done drops them
 * unless they are few.
 *
 * SHRINKING. A table that deletions leave with at most a 16th of its slots live (ended entries not
 * counted) is rehashed into the least table that holds what is left at most half full: back into
 * memory when that fits there, its file closed. Deletions only ask (the flush hint); the journal's
 * flusher does it in chime__index_flush, under the stripe's lock, as a growth is done under it: so
 * after a burst of timers has fired, the index gives back its tags, its batches and its files'
 * space (10^7 keys: 16 MiB of tags, 512 MiB of file) rather than holding them until a reopen. The
 * sixteenth leaves room: a shrunk table is at most half full and grows at three quarters, so a
 * table does not go back and forth. While it rehashes, that stripe's puts, cancels and
 * acknowledgements wait: reading the table, a few milliseconds for 2^19 slots (16 MiB). A shrink
 * that finds no memory, descriptor or space for the new table leaves the table as it was, and it
 * is tried again once half its live entries have gone (shrink()).
 *
 * WHERE TABLES LIVE. A table of at most 512 KiB is anonymous memory: 32 stripes and two tables each
 * keep at most 32 MiB resident, and a store of up to about a quarter of a million keys never makes a
 * system call for its index. A larger table lives in an unnamed file (O_TMPFILE) in the journal's
 * directory: the page cache holds its slots, and the kernel may write them out and evict them under
 * pressure. The process keeps a tag byte per slot, an exact picture of which slots are empty and a
 * filter of the keys in the others, and a batch of writes not yet in the file, up to a 32nd of the
 * slots (index_table.c states their invariants). A lookup reads only slots whose tag is its key's: a
 * new key, the common put, is known absent, and where it goes, with no read; a key that is present
 * costs a 32-byte pread, unless the caller knows it is (chime__index_find_live, DELETION). Writes
 * join the batch, which goes to the file sorted by slot, dense chunks read, patched and written
 * whole, when it is full, or earlier when the journal's flusher thread writes out every batch that
 * is half full (chime__index_flush), so that a put rarely writes a batch itself. reserve() makes room
 * in the batch before a put appends its record, so the put's own index write never does I/O.
 * (A shared mapping of the file was tried first: every read fault maps the 16 pages around it, so a
 * few thousand random lookups made the whole table resident again between two madvise(DONTNEED)s.)
 *
 * Memory per key: nothing in memory for the slots of a file table, 1 byte of tags per slot (1.3 to
 * 2.7 bytes per key at 3/8 to 3/4 full) and, once its batch has filled, 1.5 bytes per slot for it:
 * 40 MiB for 10^7 keys under puts, 16 MiB when only opened.
 * While a large table grows, the table being built is anonymous memory, written into its file in
 * one sequential write when it is complete: the process holds it whole for that long (32 bytes per
 * slot: 16 MiB per stripe for 10^7 keys).
 *
 * REBUILDING. A rebuild applies the journal's records in any order (index.h). When the journal
 * could hold more keys than SPILL_OVER bytes of tables (presize's estimate), building every table
 * at once would hold the whole index in memory (512 MiB for 10^7 keys); instead the records are
 * spilled (spill.h), one bucket per table, into an unnamed file, and rebuild_done builds the
 * tables one after the other from their buckets, each moved into its file before the next is
 * begun. The process then holds one table under construction, the tags of those done, and the
 * spill's buffers; the spill's file goes through the page cache (32 bytes a record, written once
 * and read once, in 64 KiB blocks).
 *
 * The index stays derived: nothing here is synced, the tags and batches die with the process, and
 * open() rebuilds the whole index (tags included) from the journal.
 */
#include "store/index.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>

#include "store/index_impl.h"
#include "store/lock.h"
#include "store/spill.h"

#define MEM_MAX ((uint64_t)512 << 10)      /* bytes of a table kept in memory */
#define BATCH 0u                           /* pending writes of a file table: 0 sizes them (index_table.c) */
#define PREFETCH_AHEAD 64                  /* entries a resize fetches the new slot of ahead */
#define SPILL_OVER ((uint64_t)64 << 20)    /* a rebuild whose tables may take more bytes spills */
#define SPILL_BLOCK 2048u                  /* slots a spill writes at a time (64 KiB) */
#define SPILL_BLOCK_TESTS 8u               /* the same when a test sets the threshold */

/* What chime__index_open starts with (tests lower them for whole stores: chime__index_set_defaults). */
static uint64_t default_mem_max = MEM_MAX;
static uint32_t default_batch = BATCH;
static uint64_t default_spill_over = SPILL_OVER;
static uint32_t default_spill_block = SPILL_BLOCK;

int chime__index_open(struct chime__index **out, int dir)
{
    struct chime__index *ix = calloc(1, sizeof *ix);
    if (!ix)
        return -ENOMEM;
    uint64_t key[2];
    if (getrandom(key, sizeof key, 0) != (ssize_t)sizeof key) { /* never short for 16 bytes */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        key[0] = (uint64_t)ts.tv_nsec * UINT64_C(0x9e3779b97f4a7c15) ^ (uint64_t)ts.tv_sec;
        key[1] = (uint64_t)(uintptr_t)ix * UINT64_C(0xbf58476d1ce4e5b9);
    }
    ix->k0 = key[0];
    ix->k1 = key[1];
    ix->dir = dir;
    ix->building = 1; /* until rebuild_done: open rebuilds before anything else */
    ix->mem_max = default_mem_max;
    ix->batch = default_batch;
    ix->spill_over = default_spill_over;
    ix->spill_block = default_spill_block;
    for (int i = 0; i < STRIPES; i++) {
        chime__short_lock_init(&ix->stripes[i].lock);
        ix->stripes[i].t[0] = ix->stripes[i].t[1] = (table_t)CHIME__ITABLE_NONE;
    }
    *out = ix;
    return 0;
}

void chime__index_free(struct chime__index *ix)
{
    if (!ix)
        return;
    for (int i = 0; i < STRIPES; i++) {
        for (int t = 0; t < 2; t++)
            chime__itable_free(&ix->stripes[i].t[t]);
        pthread_mutex_destroy(&ix->stripes[i].lock);
    }
    chime__spill_free(ix->spill);
    free(ix);
}

void chime__index_key(const struct chime__index *ix, const void *key, size_t len,
                      struct chime__ikey *out)
{
    out->h = chime__siphash128(ix->k0, ix->k1, key, len);
    out->stripe = (unsigned)(out->h.hi >> 59); /* the top 5 bits: 32 stripes */
    _Static_assert(STRIPES == 32, "the stripe is the hash's top 5 bits");
}

void chime__index_lock(struct chime__index *ix, const struct chime__ikey *k)
{
    pthread_mutex_lock(&ix->stripes[k->stripe].lock);
}

void chime__index_unlock(struct chime__index *ix, const struct chime__ikey *k)
{
    pthread_mutex_unlock(&ix->stripes[k->stripe].lock);
}

/* Whether a table of cap slots lives in a file (unless a rebuild is filling it). */
int chime__index_in_file(const struct chime__index *ix, uint64_t cap)
{
    return !ix->building && cap * sizeof(slot_t) > ix->mem_max;
}

/* Build in *n the rehash of t into cap slots, in memory, dropping ended entries unless keep_ended
 * (during a rebuild, an ended entry is information: that version must not come back). t is not
 * changed. Return: 0; -ENOMEM or an error reading t (*n is then freed). */
static int rehash(const table_t *t, table_t *n, uint64_t cap, int keep_ended)
{
    *n = (table_t)CHIME__ITABLE_NONE;
    int err = chime__itable_make(n, cap);
    slot_t chunk[1024];
    for (uint64_t i = 0; !err && i < t->cap; i += 1024) {
        uint64_t m = t->cap - i < 1024 ? t->cap - i : 1024;
        err = chime__itable_read(t, i, m, chunk);
        for (uint64_t k = 0; !err && k < m; k++) {
            const slot_t *s = &chunk[k];
            /* Fetch the home slot of the entry PREFETCH_AHEAD on: the old table's order is the
             * new one's at random, and a miss per entry in series made the resizes of a rebuild
             * (log2 of its size of them) most of an open's time. A hint only. */
            if (k + PREFETCH_AHEAD < m && n->slots)
                __builtin_prefetch(&n->slots[chunk[k + PREFETCH_AHEAD].lo & (cap - 1)], 1);
            if (s->version == 0 || ((s->version & ENDED) && !keep_ended))
                continue;
            uint64_t pos;
            slot_t unused;
            /* in memory: no error */
            chime__itable_find(n, &(struct chime__hash){ s->lo, s->hi }, &pos, &unused);
            n->slots[pos] = *s;
            n->used++;
            n->ended += (s->version & ENDED) != 0;
        }
    }
    if (err)
        chime__itable_free(n);
    return err;
}

/* t becomes n, rehashed from it (the old file's pending writes go with it: n holds them). */
static void replace(struct chime__index *ix, table_t *t, table_t *n)
{
    atomic_fetch_sub_explicit(&ix->bytes, t->cap * sizeof(slot_t), memory_order_relaxed);
    atomic_fetch_add_explicit(&ix->bytes, n->cap * sizeof(slot_t), memory_order_relaxed);
    chime__itable_free(t);
    *t = *n;
}

/* Rehash t into cap slots (built in memory, then moved into its file if it belongs there). */
int chime__index_resize(struct chime__index *ix, table_t *t, uint64_t cap, int keep_ended)
{
    table_t n;
    int err = rehash(t, &n, cap, keep_ended);
    if (!err && chime__index_in_file(ix, cap)) {
        err = chime__itable_to_file(&n, ix->dir, ix->batch);
        if (err)
            chime__itable_free(&n);
    }
    if (!err)
        replace(ix, t, &n);
    return err;
}

/* Room for one more entry: at most 3/4 of the slots occupied (ended entries count), and (in a file)
 * room for one more pending write, so that the write after a put's append does no I/O. Outside a
 * rebuild, a table that is full rehashes without its ended entries, growing only if what is left
 * would fill more than half of it. */
int chime__index_reserve_table(struct chime__index *ix, table_t *t)
{
    if (t->cap && (t->used + 1) * 4 <= t->cap * 3)
        return chime__itable_room(t, 1);
    int keep_ended = ix->building;
    uint64_t kept = keep_ended ? t->used : t->used - t->ended;
    uint64_t cap = t->cap ? t->cap : MIN_SLOTS;
    while ((kept + 1) * 2 > cap) /* grow so that it is at most half full */
        cap *= 2;
    return chime__index_resize(ix, t, cap, keep_ended);
}

int chime__index_reserve(struct chime__index *ix, enum chime__index_table t,
                         const struct chime__ikey *k)
{
    return chime__index_reserve_table(ix, &ix->stripes[k->stripe].t[t]);
}

/* ---- operations ---- */

/* Whether tb holds so few live entries that it shrinks (SHRINKING): at most a 16th of its slots. */
static int shrinks(const struct chime__index *ix, const table_t *tb)
{
    uint64_t live = tb->used - tb->ended;
    return !ix->building && tb->cap > MIN_SLOTS && live * 16 <= tb->cap &&
           (!tb->unshrunk || (tb->unshrunk > 1 && live * 2 <= tb->unshrunk - 1));
}

/* Ask for a flush (chime__index_flush_wanted) once tb's batch is half full, or tb shrinks. */
static void hint(struct chime__index *ix, const table_t *tb)
{
    if ((tb->pend.max && tb->pend.n * 2 >= tb->pend.max) || shrinks(ix, tb))
        /* relaxed: a hint; the flusher reads the tables under their stripes' locks */
        atomic_store_explicit(&ix->flush_hint, 1, memory_order_relaxed);
}

int chime__index_get(struct chime__index *ix, enum chime__index_table t, const struct chime__ikey *k,
                     uint64_t *version, uint64_t *due)
{
    const table_t *tb = &ix->stripes[k->stripe].t[t];
    if (!tb->cap)
        return 0;
    uint64_t pos;
    slot_t s;
    int err = chime__itable_find(tb, &k->h, &pos, &s);
    if (err)
        return err;
    if (s.version == 0 || (s.version & ENDED))
        return 0;
    *version = s.version;
    *due = s.due;
    return 1;
}

int chime__index_find(struct chime__index *ix, enum chime__index_table t, const struct chime__ikey *k,
                      struct chime__islot *at)
{
    const table_t *tb = &ix->stripes[k->stripe].t[t];
    *at = (struct chime__islot){ 0, 0, 0, 0, 0 };
    if (!tb->cap)
        return 0; /* no table yet: not found (a write needs a reserve first) */
    slot_t s;
    int err = chime__itable_find(tb, &k->h, &at->pos, &s);
    if (err)
        return err;
    at->ended = (s.version & ENDED) != 0;
    at->found = s.version != 0 && !at->ended;
    at->version = at->found ? s.version : 0;
    at->due = at->found ? s.due : 0;
    return 0;
}

static _Atomic int verify_live; /* chime__index_verify_live */

void chime__index_verify_live(int on)
{
    atomic_store_explicit(&verify_live, on, memory_order_relaxed); /* set before the stores open */
}

/* The tests' check of a find_live that trusted its caller: the slot read must say the same. */
static void check_live(struct chime__index *ix, enum chime__index_table t,
                       const struct chime__ikey *k, const struct chime__islot *trusted)
{
    struct chime__islot read;
    if (chime__index_find(ix, t, k, &read))
        return; /* a failed read (a test's injected fault) checks nothing; find_live read nothing */
    if (!read.found || read.pos != trusted->pos || read.version != trusted->version ||
        read.due != trusted->due) {
        fprintf(stderr, "chime: index: a live entry promised as version %llu due %llu at slot %llu "
                        "is %s (version %llu due %llu at slot %llu)\n",
                (unsigned long long)trusted->version, (unsigned long long)trusted->due,
                (unsigned long long)trusted->pos, read.found ? "another" : "not there",
                (unsigned long long)read.version, (unsigned long long)read.due,
                (unsigned long long)read.pos);
        abort();
    }
}

int chime__index_find_live(struct chime__index *ix, enum chime__index_table t,
                           const struct chime__ikey *k, uint64_t version, uint64_t due,
                           struct chime__islot *at)
{
    const table_t *tb = &ix->stripes[k->stripe].t[t];
    uint64_t pos;
    if (tb->cap && chime__itable_sole(tb, &k->h, &pos)) {
        *at = (struct chime__islot){ pos, 1, 0, version, due };
        if (atomic_load_explicit(&verify_live, memory_order_relaxed)) /* relaxed: a test's switch */
            check_live(ix, t, k, at);
        return 0;
    }
    return chime__index_find(ix, t, k, at);
}

int chime__index_write(struct chime__index *ix, enum chime__index_table t,
                       const struct chime__ikey *k, const struct chime__islot *at, uint64_t version,
                       uint64_t due)
{
    table_t *tb = &ix->stripes[k->stripe].t[t];
    slot_t n = { k->h.lo, k->h.hi, version, due };
    int err = chime__itable_write(tb, at->pos, 1, &n);
    if (err)
        return err;
    hint(ix, tb);
    if (!at->found && !at->ended)
        tb->used++;
    tb->ended -= at->ended;
    if (!at->found)
        atomic_fetch_add_explicit(&ix->live[t], 1, memory_order_relaxed);
    return 0;
}

int chime__index_set(struct chime__index *ix, enum chime__index_table t, const struct chime__ikey *k,
                     uint64_t version, uint64_t due)
{
    table_t *tb = &ix->stripes[k->stripe].t[t];
    int err = chime__index_reserve_table(ix, tb);
    uint64_t pos;
    slot_t s;
    if (!err)
        err = chime__itable_find(tb, &k->h, &pos, &s);
    if (err)
        return err;
    slot_t n = { k->h.lo, k->h.hi, version, due };
    err = chime__itable_write(tb, pos, 1, &n);
    if (err)
        return err;
    hint(ix, tb);
    if (s.version == 0) {
        tb->used++;
        atomic_fetch_add_explicit(&ix->live[t], 1, memory_order_relaxed);
    } else if (s.version & ENDED) {
        tb->ended--;
        atomic_fetch_add_explicit(&ix->live[t], 1, memory_order_relaxed);
    }
    return 0;
}

/* The entry s at `pos` of a file table ends in place, by its tag (DELETION). An ended entry is left
 * as it is. */
static void end_at(struct chime__index *ix, enum chime__index_table t, table_t *tb, uint64_t pos,
                   slot_t s)
{
    if (s.version & ENDED)
        return;
    chime__itable_end(tb, pos);
    atomic_fetch_sub_explicit(&ix->live[t], 1, memory_order_relaxed);
    tb->ended++;
    hint(ix, tb);
}

/* Delete the entry s found at `hole` (see chime__index_del). In memory: backward-shift deletion over
 * the probe run after it (up to its first empty slot), in place: later members of the run move into
 * the hole, so that every entry stays reachable from its home slot without passing an empty one.
 * It allocates nothing and cannot fail (the journal deletes after its record is in the log). In a
 * file: end_at, which reads nothing (DELETION). */
static int del_at(struct chime__index *ix, enum chime__index_table t, table_t *tb, uint64_t hole,
                  slot_t s)
{
    if (tb->tags) {
        end_at(ix, t, tb, hole, s);
        return 0;
    }
    uint64_t mask = tb->cap - 1, h = hole;
    for (uint64_t i = (hole + 1) & mask; tb->slots[i].version; i = (i + 1) & mask) {
        /* slots[i] may fill the hole h if its home is not in (h, i], cyclically. */
        uint64_t home = tb->slots[i].lo & mask;
        if (((i - home) & mask) >= ((i - h) & mask)) {
            tb->slots[h] = tb->slots[i];
            h = i;
        }
    }
    tb->slots[h] = (slot_t){ 0, 0, 0, 0 };
    if (!(s.version & ENDED))
        atomic_fetch_sub_explicit(&ix->live[t], 1, memory_order_relaxed);
    else
        tb->ended--;
    tb->used--;
    hint(ix, tb);
    return 0;
}

int chime__index_del(struct chime__index *ix, enum chime__index_table t,
                     const struct chime__ikey *k)
{
    table_t *tb = &ix->stripes[k->stripe].t[t];
    if (!tb->cap)
        return 0;
    uint64_t hole;
    slot_t s;
    int err = chime__itable_find(tb, &k->h, &hole, &s);
    if (err || s.version == 0)
        return err;
    return del_at(ix, t, tb, hole, s);
}

void chime__index_del_at(struct chime__index *ix, enum chime__index_table t,
                         const struct chime__ikey *k, const struct chime__islot *at)
{
    table_t *tb = &ix->stripes[k->stripe].t[t];
    if (at->found)
        del_at(ix, t, tb, at->pos, (slot_t){ k->h.lo, k->h.hi, at->version, at->due });
}

uint64_t chime__index_count(const struct chime__index *ix, enum chime__index_table t)
{
    return atomic_load_explicit(&ix->live[t], memory_order_relaxed);
}

void chime__index_set_memory_max(struct chime__index *ix, uint64_t bytes)
{
    ix->mem_max = bytes;
}

void chime__index_set_defaults(uint64_t mem_max, uint32_t batch, uint64_t spill_over)
{
    default_mem_max = mem_max ? mem_max : MEM_MAX;
    default_batch = batch;
    default_spill_over = spill_over ? spill_over : SPILL_OVER;
    default_spill_block = spill_over ? SPILL_BLOCK_TESTS : SPILL_BLOCK;
}

void chime__index_set_spill_over(struct chime__index *ix, uint64_t bytes)
{
    ix->spill_over = bytes;
    ix->spill_block = SPILL_BLOCK_TESTS;
}

void chime__index_set_write_batch(struct chime__index *ix, uint32_t n)
{
    ix->batch = n;
}

int chime__index_maybe(struct chime__index *ix, enum chime__index_table t, const struct chime__ikey *k)
{
    return chime__itable_maybe(&ix->stripes[k->stripe].t[t], &k->h);
}

/* Rehash tb into the least table that holds its live entries at most half full (SHRINKING). A
 * shrink is never owed: out of memory, or no descriptor or no space for the new table's file,
 * leaves tb as it was, with the index and the log still agreeing, so the journal goes on (found in
 * review: such an error failed it for good, with nothing lost). Such a table is not tried again
 * until half its live entries have gone (tb->unshrunk; a rehash for any other reason clears it):
 * each try reads the whole table under the stripe's lock, and with descriptors exhausted every
 * change to it asked again (found in review). An error reading tb is the table's own, and fails
 * the journal as any read of it would. Return: 1 shrunk, 0 not, or that error. */
static int shrink(struct chime__index *ix, table_t *tb)
{
    uint64_t cap = MIN_SLOTS;
    while ((tb->used - tb->ended + 1) * 2 > cap)
        cap *= 2;
    table_t n;
    int err = rehash(tb, &n, cap, 0); /* -ENOMEM, or an error reading tb */
    int unmade = err == -ENOMEM;
    if (!err && chime__index_in_file(ix, cap) && chime__itable_to_file(&n, ix->dir, ix->batch)) {
        chime__itable_free(&n); /* no memory, descriptor or space for its file */
        unmade = 1;
    }
    if (unmade) { /* not shrunk: not tried again until half its live entries have gone */
        tb->unshrunk = tb->used - tb->ended + 1;
        return 0;
    }
    if (err)
        return err;
    replace(ix, tb, &n); /* a new table: n.unshrunk is 0 */
    return 1;
}

int chime__index_flush(struct chime__index *ix, int all)
{
    /* relaxed: a hint (see hint()); one set after this store is seen by the next call */
    atomic_store_explicit(&ix->flush_hint, 0, memory_order_relaxed);
    int err = 0;
    for (int i = 0; i < STRIPES && !err; i++) {
        pthread_mutex_lock(&ix->stripes[i].lock);
        for (int t = 0; t < 2 && !err; t++) {
            table_t *tb = &ix->stripes[i].t[t];
            int shrunk = shrinks(ix, tb) ? shrink(ix, tb) : 0; /* its pending writes go with it */
            if (shrunk < 0)
                err = shrunk;
            else if (!shrunk && tb->pend.n && (all || tb->pend.n * 2 >= tb->pend.max))
                err = chime__itable_flush(tb);
        }
        pthread_mutex_unlock(&ix->stripes[i].lock);
    }
    return err;
}

int chime__index_flush_wanted(const struct chime__index *ix)
{
    return atomic_load_explicit(&ix->flush_hint, memory_order_relaxed); /* a hint (see hint()) */
}

void chime__index_set_hash_key(struct chime__index *ix, uint64_t k0, uint64_t k1)
{
    ix->k0 = k0;
    ix->k1 = k1;
}

uint64_t chime__index_bytes(const struct chime__index *ix)
{
    return atomic_load_explicit(&ix->bytes, memory_order_relaxed);
}
