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
#include "store/lock.h"

#define STRIPES 32
#define MIN_SLOTS 128u                        /* one 4 KiB page */
#define ENDED (UINT64_C(1) << 63)             /* rebuild only: this greatest version has ended */
#define TRIM_EVERY 8192u                      /* operations between checks: at most 32 MiB of pages */
#define TRIM_ABOVE ((uint64_t)32 << 20)       /* bytes of tables the process keeps resident */

struct slot {
    uint64_t lo, hi, version, due;
};
_Static_assert(sizeof(struct slot) == 32, "a slot is 32 bytes");

struct table {
    struct slot *slots; /* a shared mapping of an unnamed file (or, while a rebuild runs, anonymous
                           memory); NULL until the first insert */
    uint64_t cap;       /* slots, a power of two */
    uint64_t used;      /* occupied slots, ended ones included */
    uint64_t ended;     /* ended entries (rebuild only) */
    int anon;           /* slots is anonymous memory: never given back with DONTNEED (it would be
                           lost); rebuild_done moves it into a file */
};

struct stripe {
    pthread_mutex_t lock;
    struct table t[2];
    char pad[64];
};

struct chime__index {
    uint64_t k0, k1; /* the SipHash key */
    int dir;
    int building;    /* from open to chime__index_rebuild_done: new tables are anonymous */
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
    ix->building = 1; /* until rebuild_done: open rebuilds before anything else */
    for (int i = 0; i < STRIPES; i++)
        chime__short_lock_init(&ix->stripes[i].lock);
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

/* Map `bytes` of the unnamed file fd, shared; fd is closed (the mapping keeps the file). */
static int map_file(int fd, size_t bytes, struct slot **out)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    chime__io_close(fd);
    if (p == MAP_FAILED)
        return -ENOMEM;
    /* Slots are touched at random: a fault should map its own page, not the 16 around it (which
     * the next trim would only unmap again). */
    madvise(p, bytes, MADV_RANDOM);
    *out = p;
    return 0;
}

/*
 * A table of cap slots. Normally a new unnamed file, its blocks reserved up front (a full disk is an
 * error here and never a SIGBUS on a later store to the mapping), mapped. While a rebuild runs, plain
 * anonymous memory instead: a first write to a page of a file mapping costs the file system a block
 * allocation, which made a rebuild several times slower; rebuild_done writes the tables out.
 */
static int map_table(const struct chime__index *ix, uint64_t cap, struct slot **out, int *anon)
{
    size_t bytes = cap * sizeof(struct slot);
    *anon = ix->building;
    if (ix->building) {
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return -ENOMEM;
        *out = p;
        return 0;
    }
    int fd = chime__io_tmpfile(ix->dir);
    if (fd < 0)
        return fd;
    int err = chime__io_fallocate(fd, 0, bytes);
    if (err) {
        chime__io_close(fd);
        return err;
    }
    return map_file(fd, bytes, out);
}

/* Move an anonymous table into a file: one sequential write of it, then a mapping of the file. */
static int table_to_file(const struct chime__index *ix, struct table *t)
{
    size_t bytes = t->cap * sizeof(struct slot);
    int fd = chime__io_tmpfile(ix->dir);
    if (fd < 0)
        return fd;
    int err = chime__io_pwrite(fd, t->slots, bytes, 0); /* allocates the blocks as it writes */
    struct slot *mapped;
    if (err) {
        chime__io_close(fd);
        return err;
    }
    err = map_file(fd, bytes, &mapped);
    if (err)
        return err;
    munmap(t->slots, bytes);
    t->slots = mapped;
    t->anon = 0;
    return 0;
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
    int anon;
    int err = map_table(ix, cap, &fresh, &anon);
    if (err)
        return err;
    struct table n = { fresh, cap, 0, 0, anon };
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

int chime__index_presize(struct chime__index *ix, uint64_t n)
{
    uint64_t per = n / STRIPES + 1, cap = MIN_SLOTS;
    while (per * 2 > cap) /* at most half full, as growth leaves a table */
        cap *= 2;
    for (int i = 0; i < STRIPES; i++) {
        struct table *tb = &ix->stripes[i].t[CHIME__IX_PENDING];
        if (tb->cap < cap) {
            int err = resize(ix, tb, cap, 1);
            if (err)
                return err;
        }
    }
    return 0;
}

/* One rebuild step: a put (kill 0) or an ending (kill 1) of `version` for k. */
static int rebuild_one(struct chime__index *ix, const struct chime__rebuild_op *op)
{
    struct table *tb = &ix->stripes[op->k.stripe].t[op->table];
    int err = reserve(ix, tb);
    if (err)
        return err;
    struct slot *s = probe(tb, &op->k.h);
    uint64_t known = s->version & ~ENDED;
    if (s->version && (op->kill ? known > op->version : known >= op->version))
        return 0; /* a greater version is known (or, for a put, this one): nothing changes */
    int was_live = s->version && !(s->version & ENDED), was_ended = (s->version & ENDED) != 0;
    if (s->version == 0)
        tb->used++;
    if (op->kill) {
        /* The put may come later in the reading order: remember that this version has ended. */
        *s = (struct slot){ op->k.h.lo, op->k.h.hi, op->version | ENDED, 0 };
        tb->ended += !was_ended;
        if (was_live)
            atomic_fetch_sub_explicit(&ix->live[op->table], 1, memory_order_relaxed);
    } else {
        *s = (struct slot){ op->k.h.lo, op->k.h.hi, op->version, op->due };
        tb->ended -= was_ended;
        if (!was_live)
            atomic_fetch_add_explicit(&ix->live[op->table], 1, memory_order_relaxed);
    }
    return 0;
}

int chime__index_rebuild(struct chime__index *ix, const struct chime__rebuild_op *ops, size_t n)
{
    for (size_t i = 0; i < n; i++) { /* a hint only: a table that grows meanwhile moves its slots */
        const struct table *tb = &ix->stripes[ops[i].k.stripe].t[ops[i].table];
        if (tb->slots)
            __builtin_prefetch(&tb->slots[ops[i].k.h.lo & (tb->cap - 1)], 1);
    }
    for (size_t i = 0; i < n; i++) {
        int err = rebuild_one(ix, &ops[i]);
        if (err)
            return err;
    }
    return 0; /* no trimming as it goes: a page given back is faulted in again by the next op */
}

static void trim_all(struct chime__index *ix);

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
            if (tb->anon) {
                int err = table_to_file(ix, tb);
                if (err)
                    return err;
            }
        }
    ix->building = 0;
    if (atomic_load_explicit(&ix->bytes, memory_order_relaxed) > TRIM_ABOVE)
        trim_all(ix);
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
    trim_all(ix);
}

static void trim_all(struct chime__index *ix)
{
    for (int i = 0; i < STRIPES; i++) {
        struct stripe *st = &ix->stripes[i];
        pthread_mutex_lock(&st->lock); /* a resize must not unmap what we advise on */
        for (int t = 0; t < 2; t++)
            if (st->t[t].slots && !st->t[t].anon) /* DONTNEED on anonymous memory zeroes it */
                madvise(st->t[t].slots, st->t[t].cap * sizeof(struct slot), MADV_DONTNEED);
        pthread_mutex_unlock(&st->lock);
    }
}
