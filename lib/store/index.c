/*
 * The journal's key index (index.h): open-addressed tables in shared mappings of unnamed files.
 *
 * A slot is {hash lo, hash hi, version, due}; version 0 marks an empty slot. Deletion shifts the
 * following slots of the probe run back (no tombstones in normal operation), so a lookup stops at the
 * first empty slot. Only a rebuild leaves ended entries behind (ENDED bit in the version) until
 * chime__index_rebuild_done drops them.
 */
#define _GNU_SOURCE /* MADV_DONTNEED semantics on shared file mappings are Linux's */
#include "store/index.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>

#include "store/io.h"

#define STRIPES 32
#define MIN_SLOTS 128u                        /* one 4 KiB page */
#define ENDED (UINT64_C(1) << 63)             /* rebuild only: this greatest version has ended */
#define TRIM_EVERY 4096u                      /* operations between checks */
#define TRIM_ABOVE ((uint64_t)16 << 20)       /* bytes of tables the process may keep resident */

struct slot {
    uint64_t lo, hi, version, due;
};
_Static_assert(sizeof(struct slot) == 32, "a slot is 32 bytes");

struct table {
    struct slot *slots; /* a shared mapping of an unnamed file; NULL until the first insert */
    uint64_t cap;       /* slots, a power of two */
    uint64_t used;      /* occupied slots, ended ones included */
    uint64_t ended;     /* ended entries (rebuild only) */
};

struct stripe {
    pthread_mutex_t lock;
    struct table t[2];
    char pad[64];
};

struct chime__index {
    uint64_t k0, k1; /* the SipHash key */
    int dir;
    _Atomic uint64_t ops;
    _Atomic uint64_t bytes;    /* of every table's file */
    _Atomic uint64_t live[2];  /* entries not ended, per table */
    struct stripe stripes[STRIPES];
};

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
    for (int i = 0; i < STRIPES; i++)
        pthread_mutex_init(&ix->stripes[i].lock, NULL);
    *out = ix;
    return 0;
}

void chime__index_free(struct chime__index *ix)
{
    if (!ix)
        return;
    for (int i = 0; i < STRIPES; i++) {
        for (int t = 0; t < 2; t++)
            if (ix->stripes[i].t[t].slots)
                munmap(ix->stripes[i].t[t].slots, ix->stripes[i].t[t].cap * sizeof(struct slot));
        pthread_mutex_destroy(&ix->stripes[i].lock);
    }
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

/* A table of cap slots in a new unnamed file, mapped; the descriptor is closed at once (the mapping
 * keeps the file). Blocks are reserved up front, so a full disk is an error here and never a SIGBUS
 * on a later store to the mapping. */
static int map_table(const struct chime__index *ix, uint64_t cap, struct slot **out)
{
    size_t bytes = cap * sizeof(struct slot);
    int fd = chime__io_tmpfile(ix->dir);
    if (fd < 0)
        return fd;
    int err = chime__io_fallocate(fd, 0, bytes);
    if (!err) {
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED)
            err = -ENOMEM;
        else
            *out = p;
    }
    chime__io_close(fd);
    return err;
}

/* The slot holding h, or the empty slot where it would go. */
static struct slot *probe(const struct table *t, const struct chime__hash *h)
{
    uint64_t mask = t->cap - 1;
    for (uint64_t i = h->lo & mask;; i = (i + 1) & mask) {
        struct slot *s = &t->slots[i];
        if (s->version == 0 || (s->lo == h->lo && s->hi == h->hi))
            return s;
    }
}

/* Rehash t into cap slots, dropping ended entries unless keep_ended (during a rebuild, an ended
 * entry is information: that version must not come back). */
static int resize(struct chime__index *ix, struct table *t, uint64_t cap, int keep_ended)
{
    struct slot *fresh;
    int err = map_table(ix, cap, &fresh);
    if (err)
        return err;
    struct table n = { fresh, cap, 0, 0 };
    for (uint64_t i = 0; t->slots && i < t->cap; i++) {
        struct slot *s = &t->slots[i];
        if (s->version == 0 || ((s->version & ENDED) && !keep_ended))
            continue;
        *probe(&n, &(struct chime__hash){ s->lo, s->hi }) = *s;
        n.used++;
        n.ended += (s->version & ENDED) != 0;
    }
    if (t->slots) {
        munmap(t->slots, t->cap * sizeof(struct slot));
        atomic_fetch_sub_explicit(&ix->bytes, t->cap * sizeof(struct slot), memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&ix->bytes, cap * sizeof(struct slot), memory_order_relaxed);
    *t = n;
    return 0;
}

/* Room for one more entry: at most 3/4 of the slots occupied. */
static int reserve(struct chime__index *ix, struct table *t)
{
    if (t->slots && (t->used + 1) * 4 <= t->cap * 3)
        return 0;
    uint64_t cap = t->cap ? t->cap : MIN_SLOTS;
    while ((t->used + 1) * 2 > cap) /* grow so that it is at most half full */
        cap *= 2;
    return resize(ix, t, cap, 1);
}

int chime__index_reserve(struct chime__index *ix, enum chime__index_table t,
                         const struct chime__ikey *k)
{
    return reserve(ix, &ix->stripes[k->stripe].t[t]);
}

static void count_op(struct chime__index *ix)
{
    atomic_fetch_add_explicit(&ix->ops, 1, memory_order_relaxed); /* a statistic: no order */
}

int chime__index_get(struct chime__index *ix, enum chime__index_table t, const struct chime__ikey *k,
                     uint64_t *version, uint64_t *due)
{
    count_op(ix);
    struct table *tb = &ix->stripes[k->stripe].t[t];
    if (!tb->slots)
        return 0;
    struct slot *s = probe(tb, &k->h);
    if (s->version == 0 || (s->version & ENDED))
        return 0;
    *version = s->version;
    *due = s->due;
    return 1;
}

int chime__index_set(struct chime__index *ix, enum chime__index_table t, const struct chime__ikey *k,
                     uint64_t version, uint64_t due)
{
    count_op(ix);
    struct table *tb = &ix->stripes[k->stripe].t[t];
    int err = reserve(ix, tb);
    if (err)
        return err;
    struct slot *s = probe(tb, &k->h);
    if (s->version == 0) {
        tb->used++;
        atomic_fetch_add_explicit(&ix->live[t], 1, memory_order_relaxed);
    } else if (s->version & ENDED) {
        tb->ended--;
        atomic_fetch_add_explicit(&ix->live[t], 1, memory_order_relaxed);
    }
    *s = (struct slot){ k->h.lo, k->h.hi, version, due };
    return 0;
}

void chime__index_del(struct chime__index *ix, enum chime__index_table t,
                      const struct chime__ikey *k)
{
    count_op(ix);
    struct table *tb = &ix->stripes[k->stripe].t[t];
    if (!tb->slots)
        return;
    struct slot *s = probe(tb, &k->h);
    if (s->version == 0)
        return;
    if (!(s->version & ENDED))
        atomic_fetch_sub_explicit(&ix->live[t], 1, memory_order_relaxed);
    else
        tb->ended--;
    /* Backward-shift deletion: move later members of the probe run into the hole, so that every
     * entry stays reachable from its home slot without passing an empty one. */
    uint64_t mask = tb->cap - 1, hole = (uint64_t)(s - tb->slots);
    for (uint64_t i = (hole + 1) & mask;; i = (i + 1) & mask) {
        struct slot *n = &tb->slots[i];
        if (n->version == 0)
            break;
        uint64_t home = n->lo & mask;
        /* n may fill the hole if its home is not in (hole, i], cyclically. */
        int between = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
        if (!between) {
            tb->slots[hole] = *n;
            hole = i;
        }
    }
    tb->slots[hole] = (struct slot){ 0, 0, 0, 0 };
    tb->used--;
}

int chime__index_rebuild_put(struct chime__index *ix, enum chime__index_table t,
                             const struct chime__ikey *k, uint64_t version, uint64_t due)
{
    struct table *tb = &ix->stripes[k->stripe].t[t];
    if (tb->slots) {
        struct slot *s = probe(tb, &k->h);
        if (s->version && (s->version & ~ENDED) >= version)
            return 0; /* a greater (or the same) version is known: this record changes nothing */
    }
    return chime__index_set(ix, t, k, version, due);
}

int chime__index_rebuild_kill(struct chime__index *ix, enum chime__index_table t,
                              const struct chime__ikey *k, uint64_t version)
{
    struct table *tb = &ix->stripes[k->stripe].t[t];
    int err = reserve(ix, tb);
    if (err)
        return err;
    struct slot *s = probe(tb, &k->h);
    if (s->version && (s->version & ~ENDED) > version)
        return 0; /* a greater version is known: this ending concerns an older one */
    if (s->version == 0) {
        tb->used++;
        tb->ended++;
    } else if (!(s->version & ENDED)) {
        tb->ended++;
        atomic_fetch_sub_explicit(&ix->live[t], 1, memory_order_relaxed);
    }
    /* The put may come later in the reading order: remember that this version has ended. */
    *s = (struct slot){ k->h.lo, k->h.hi, version | ENDED, 0 };
    return 0;
}

int chime__index_rebuild_done(struct chime__index *ix)
{
    for (int i = 0; i < STRIPES; i++)
        for (int t = 0; t < 2; t++) {
            struct table *tb = &ix->stripes[i].t[t];
            if (tb->ended) {
                uint64_t cap = MIN_SLOTS;
                while ((tb->used - tb->ended + 1) * 2 > cap)
                    cap *= 2;
                int err = resize(ix, tb, cap, 0);
                if (err)
                    return err;
            }
        }
    return 0;
}

uint64_t chime__index_count(const struct chime__index *ix, enum chime__index_table t)
{
    return atomic_load_explicit(&ix->live[t], memory_order_relaxed);
}

uint64_t chime__index_bytes(const struct chime__index *ix)
{
    return atomic_load_explicit(&ix->bytes, memory_order_relaxed);
}

void chime__index_trim(struct chime__index *ix)
{
    uint64_t n = atomic_load_explicit(&ix->ops, memory_order_relaxed);
    if (n < TRIM_EVERY || atomic_load_explicit(&ix->bytes, memory_order_relaxed) <= TRIM_ABOVE)
        return;
    /* One thread trims: the one whose exchange takes the count back to 0. */
    if (!atomic_compare_exchange_strong_explicit(&ix->ops, &n, 0, memory_order_relaxed,
                                                 memory_order_relaxed))
        return;
    for (int i = 0; i < STRIPES; i++) {
        struct stripe *st = &ix->stripes[i];
        pthread_mutex_lock(&st->lock); /* a resize must not unmap what we advise on */
        for (int t = 0; t < 2; t++)
            if (st->t[t].slots)
                madvise(st->t[t].slots, st->t[t].cap * sizeof(struct slot), MADV_DONTNEED);
        pthread_mutex_unlock(&st->lock);
    }
}
