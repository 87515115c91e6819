/* SPDX-License-Identifier: MIT */
/*
 * The journal's key index (index.h): open-addressed tables, small ones in memory, large ones in
 * unnamed files read and written slot by slot.
 *
 * A slot is {hash lo, hash hi, version, due}; version 0 marks an empty slot. Deletion shifts the
 * following slots of the probe run back (no tombstones in normal operation), so a lookup stops at the
 * first empty slot. Only a rebuild leaves ended entries behind (ENDED bit in the version) until
 * chime__index_rebuild_done drops them.
 *
 * WHERE TABLES LIVE. A table of at most 512 KiB is anonymous memory: 32 stripes and two tables each
 * keep at most 32 MiB resident, and a store of up to about a quarter of a million keys never makes a
 * system call for its index. A larger table lives in an unnamed file (O_TMPFILE) in the journal's
 * directory, and each operation reads the 16 slots around the key (one pread of 512 bytes, more when
 * the probe run is longer) and writes back what it changed: the page cache holds the table, the
 * process holds none of it, and the kernel may write it out and evict it under pressure. (A shared
 * mapping of the file was tried first: every read fault maps the 16 pages around it, so a few
 * thousand random lookups made the whole table resident again between two madvise(DONTNEED)s.)
 * While a rebuild runs, and while a large table grows, the table being built is anonymous memory,
 * written into its file in one sequential write when it is complete: the process holds it whole
 * for that long.
 */
#define _GNU_SOURCE /* MAP_ANONYMOUS */
#include "store/index.h"

#include <errno.h>
#include <fcntl.h>
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
#define MIN_SLOTS 128u                     /* 4 KiB */
#define MEM_MAX ((uint64_t)512 << 10)      /* bytes of a table kept in memory */
#define WINDOW 16u                         /* slots read at once from a file table */
#define ENDED (UINT64_C(1) << 63)          /* rebuild only: this greatest version has ended */

struct slot {
    uint64_t lo, hi, version, due;
};
_Static_assert(sizeof(struct slot) == 32, "a slot is 32 bytes");

struct table {
    struct slot *slots; /* in memory: anonymous, zeroed; NULL if in a file or not yet made */
    int fd;             /* in a file: the unnamed file; -1 otherwise */
    uint64_t cap;       /* slots, a power of two (0: not made yet) */
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
    int building;    /* from open to chime__index_rebuild_done: every table stays in memory */
    uint64_t mem_max; /* bytes of a table kept in memory (MEM_MAX; tests lower it) */
    _Atomic uint64_t bytes;    /* of every table */
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
    ix->mem_max = MEM_MAX;
    for (int i = 0; i < STRIPES; i++) {
        chime__short_lock_init(&ix->stripes[i].lock);
        ix->stripes[i].t[0].fd = ix->stripes[i].t[1].fd = -1;
    }
    *out = ix;
    return 0;
}

static void table_free(struct table *t)
{
    if (t->slots)
        munmap(t->slots, t->cap * sizeof(struct slot));
    if (t->fd >= 0)
        chime__io_close(t->fd);
    t->slots = NULL;
    t->fd = -1;
}

void chime__index_free(struct chime__index *ix)
{
    if (!ix)
        return;
    for (int i = 0; i < STRIPES; i++) {
        for (int t = 0; t < 2; t++)
            table_free(&ix->stripes[i].t[t]);
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

/* ---- slots, wherever the table lives ---- */

/* Read n slots from position `first` on (wrapping round the table) into buf. */
static int read_slots(const struct table *t, uint64_t first, uint64_t n, struct slot *buf)
{
    while (n) {
        uint64_t part = t->cap - first < n ? t->cap - first : n;
        if (t->slots) {
            memcpy(buf, t->slots + first, part * sizeof *buf);
        } else {
            ssize_t got = chime__io_pread(t->fd, buf, part * sizeof *buf, first * sizeof *buf);
            if (got != (ssize_t)(part * sizeof *buf))
                return got < 0 ? (int)got : -EIO;
        }
        buf += part;
        n -= part;
        first = 0;
    }
    return 0;
}

/* Write n slots from buf at position `first` on (wrapping). */
static int write_slots(struct table *t, uint64_t first, uint64_t n, const struct slot *buf)
{
    while (n) {
        uint64_t part = t->cap - first < n ? t->cap - first : n;
        if (t->slots) {
            memcpy(t->slots + first, buf, part * sizeof *buf);
        } else {
            int err = chime__io_pwrite(t->fd, buf, part * sizeof *buf, first * sizeof *buf);
            if (err)
                return err;
        }
        buf += part;
        n -= part;
        first = 0;
    }
    return 0;
}

/* Where h is, or the empty slot where it would go: *pos and a copy of the slot in *s. */
static int find(const struct table *t, const struct chime__hash *h, uint64_t *pos, struct slot *s)
{
    uint64_t mask = t->cap - 1, home = h->lo & mask;
    if (t->slots) { /* in memory: no copies */
        for (uint64_t i = home;; i = (i + 1) & mask) {
            const struct slot *x = &t->slots[i];
            if (x->version == 0 || (x->lo == h->lo && x->hi == h->hi)) {
                *pos = i;
                *s = *x;
                return 0;
            }
        }
    }
    struct slot w[WINDOW];
    for (uint64_t start = home;; start = (start + WINDOW) & mask) {
        uint64_t n = t->cap < WINDOW ? t->cap : WINDOW;
        int err = read_slots(t, start, n, w);
        if (err)
            return err;
        for (uint64_t i = 0; i < n; i++)
            if (w[i].version == 0 || (w[i].lo == h->lo && w[i].hi == h->hi)) {
                *pos = (start + i) & mask;
                *s = w[i];
                return 0;
            }
    }
}

/* ---- making, growing and moving tables ---- */

static int anon_slots(uint64_t cap, struct slot **out)
{
    /* Populated: a table is written all over, and a first read of an untouched page would map the
     * zero page only for the first write to copy it. */
    void *p = mmap(NULL, cap * sizeof(struct slot), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED)
        return -ENOMEM;
    *out = p;
    return 0;
}

/* A table in memory that outgrew MEM_MAX goes into a file: one sequential write. */
static int to_file(const struct chime__index *ix, struct table *t)
{
    int fd = chime__io_tmpfile(ix->dir);
    if (fd < 0)
        return fd;
    /* Written a page at a time, and read without readahead: the page cache then holds the table in
     * 4 KiB folios. ext4 walks every block of a folio on each buffered write into it, so 32-byte
     * updates of a table written in one 512 MiB stroke (2 MiB folios) cost 10 us each. */
    posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    int err = 0;
    for (uint64_t off = 0, bytes = t->cap * sizeof(struct slot); !err && off < bytes; off += 4096)
        err = chime__io_pwrite(fd, (char *)t->slots + off, bytes - off < 4096 ? bytes - off : 4096,
                               off);
    if (err) {
        chime__io_close(fd);
        return err;
    }
    munmap(t->slots, t->cap * sizeof(struct slot));
    t->slots = NULL;
    t->fd = fd;
    return 0;
}

/* Whether a table of cap slots lives in a file (once the rebuild is over). */
static int belongs_in_file(const struct chime__index *ix, uint64_t cap)
{
    return !ix->building && cap * sizeof(struct slot) > ix->mem_max;
}

/* Rehash t into cap slots (built in memory), dropping ended entries unless keep_ended (during a
 * rebuild, an ended entry is information: that version must not come back). */
static int resize(struct chime__index *ix, struct table *t, uint64_t cap, int keep_ended)
{
    struct table n = { NULL, -1, cap, 0, 0 };
    int err = anon_slots(cap, &n.slots);
    struct slot chunk[1024];
    for (uint64_t i = 0; !err && i < t->cap; i += 1024) {
        uint64_t m = t->cap - i < 1024 ? t->cap - i : 1024;
        err = read_slots(t, i, m, chunk);
        for (uint64_t k = 0; !err && k < m; k++) {
            const struct slot *s = &chunk[k];
            if (s->version == 0 || ((s->version & ENDED) && !keep_ended))
                continue;
            uint64_t pos;
            struct slot unused;
            find(&n, &(struct chime__hash){ s->lo, s->hi }, &pos, &unused); /* in memory: no error */
            n.slots[pos] = *s;
            n.used++;
            n.ended += (s->version & ENDED) != 0;
        }
    }
    if (!err && belongs_in_file(ix, cap))
        err = to_file(ix, &n);
    if (err) {
        table_free(&n);
        return err;
    }
    atomic_fetch_sub_explicit(&ix->bytes, t->cap * sizeof(struct slot), memory_order_relaxed);
    atomic_fetch_add_explicit(&ix->bytes, cap * sizeof(struct slot), memory_order_relaxed);
    table_free(t);
    *t = n;
    return 0;
}

/* Room for one more entry: at most 3/4 of the slots occupied. */
static int reserve(struct chime__index *ix, struct table *t)
{
    if (t->cap && (t->used + 1) * 4 <= t->cap * 3)
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

/* ---- operations ---- */

int chime__index_get(struct chime__index *ix, enum chime__index_table t, const struct chime__ikey *k,
                     uint64_t *version, uint64_t *due)
{
    const struct table *tb = &ix->stripes[k->stripe].t[t];
    if (!tb->cap)
        return 0;
    uint64_t pos;
    struct slot s;
    int err = find(tb, &k->h, &pos, &s);
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
    const struct table *tb = &ix->stripes[k->stripe].t[t];
    *at = (struct chime__islot){ 0, 0, 0, 0, 0 };
    if (!tb->cap)
        return 0; /* no table yet: not found (a write needs a reserve first) */
    struct slot s;
    int err = find(tb, &k->h, &at->pos, &s);
    if (err)
        return err;
    at->ended = (s.version & ENDED) != 0;
    at->found = s.version != 0 && !at->ended;
    at->version = at->found ? s.version : 0;
    at->due = at->found ? s.due : 0;
    return 0;
}

int chime__index_write(struct chime__index *ix, enum chime__index_table t,
                       const struct chime__ikey *k, const struct chime__islot *at, uint64_t version,
                       uint64_t due)
{
    struct table *tb = &ix->stripes[k->stripe].t[t];
    struct slot n = { k->h.lo, k->h.hi, version, due };
    int err = write_slots(tb, at->pos, 1, &n);
    if (err)
        return err;
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
    struct table *tb = &ix->stripes[k->stripe].t[t];
    int err = reserve(ix, tb);
    uint64_t pos;
    struct slot s;
    if (!err)
        err = find(tb, &k->h, &pos, &s);
    if (err)
        return err;
    struct slot n = { k->h.lo, k->h.hi, version, due };
    err = write_slots(tb, pos, 1, &n);
    if (err)
        return err;
    if (s.version == 0) {
        tb->used++;
        atomic_fetch_add_explicit(&ix->live[t], 1, memory_order_relaxed);
    } else if (s.version & ENDED) {
        tb->ended--;
        atomic_fetch_add_explicit(&ix->live[t], 1, memory_order_relaxed);
    }
    return 0;
}

/* Delete the entry s found at `hole` (see chime__index_del). */
static int del_at(struct chime__index *ix, enum chime__index_table t, struct table *tb,
                  uint64_t hole, struct slot s)
{
    int err = 0;
    /* The probe run after the slot, up to its first empty slot, read into run[] (grown as
     * needed); then backward-shift deletion on it: move later members of the run into the hole,
     * so that every entry stays reachable from its home slot without passing an empty one. */
    uint64_t mask = tb->cap - 1, len = 0, cap = WINDOW * 2;
    struct slot stack[WINDOW * 2], *run = stack;
    for (;;) {
        if (len + WINDOW > cap) {
            struct slot *grown = malloc((cap *= 2) * sizeof *grown);
            if (!grown) {
                err = -ENOMEM;
                break;
            }
            memcpy(grown, run, len * sizeof *run);
            if (run != stack)
                free(run);
            run = grown;
        }
        uint64_t n = len + WINDOW > tb->cap ? tb->cap - len : WINDOW;
        err = read_slots(tb, (hole + len) & mask, n, run + len);
        if (err)
            break;
        uint64_t before = len;
        len += n;
        int ends = 0;
        for (uint64_t i = before ? before : 1; i < len && !ends; i++)
            ends = run[i].version == 0;
        if (ends || len >= tb->cap)
            break;
    }
    if (!err) {
        uint64_t h = 0; /* the hole, relative to the slot deleted */
        for (uint64_t i = 1; i < len && run[i].version; i++) {
            uint64_t home = ((run[i].lo & mask) - hole) & mask; /* relative home */
            /* run[i] may fill the hole if its home is not in (h, i]. */
            if (!(home > h && home <= i)) {
                run[h] = run[i];
                h = i;
            }
        }
        run[h] = (struct slot){ 0, 0, 0, 0 };
        /* Everything from the deleted slot to the last hole may have changed. */
        err = write_slots(tb, hole, h + 1, run);
    }
    if (run != stack)
        free(run);
    if (err)
        return err;
    if (!(s.version & ENDED))
        atomic_fetch_sub_explicit(&ix->live[t], 1, memory_order_relaxed);
    else
        tb->ended--;
    tb->used--;
    return 0;
}

int chime__index_del(struct chime__index *ix, enum chime__index_table t,
                     const struct chime__ikey *k)
{
    struct table *tb = &ix->stripes[k->stripe].t[t];
    if (!tb->cap)
        return 0;
    uint64_t hole;
    struct slot s;
    int err = find(tb, &k->h, &hole, &s);
    if (err || s.version == 0)
        return err;
    return del_at(ix, t, tb, hole, s);
}

int chime__index_del_at(struct chime__index *ix, enum chime__index_table t,
                        const struct chime__ikey *k, const struct chime__islot *at)
{
    struct table *tb = &ix->stripes[k->stripe].t[t];
    if (!at->found)
        return 0;
    return del_at(ix, t, tb, at->pos, (struct slot){ k->h.lo, k->h.hi, at->version, at->due });
}

/* ---- rebuilding ---- */

int chime__index_presize(struct chime__index *ix, uint64_t n)
{
    uint64_t per = n / STRIPES + 1, cap = MIN_SLOTS;
    while (per * 4 > cap * 3) /* at most three quarters full: the most reserve() lets it be */
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

/* One rebuild step: a put (kill 0) or an ending (kill 1) of `version` for k. The table is in
 * memory (building). */
static int rebuild_one(struct chime__index *ix, const struct chime__rebuild_op *op)
{
    struct table *tb = &ix->stripes[op->k.stripe].t[op->table];
    int err = reserve(ix, tb);
    if (err)
        return err;
    uint64_t pos;
    struct slot cur;
    find(tb, &op->k.h, &pos, &cur);
    struct slot *s = &tb->slots[pos];
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
    return 0;
}

int chime__index_rebuild_done(struct chime__index *ix)
{
    ix->building = 0;
    for (int i = 0; i < STRIPES; i++)
        for (int t = 0; t < 2; t++) {
            struct table *tb = &ix->stripes[i].t[t];
            int err = 0;
            if (tb->ended > tb->used / 4) { /* drop what ended, size the table for what is left */
                uint64_t cap = MIN_SLOTS;
                while ((tb->used - tb->ended + 1) * 2 > cap)
                    cap *= 2;
                err = resize(ix, tb, cap, 0);
            } else if (tb->slots && belongs_in_file(ix, tb->cap)) {
                err = to_file(ix, tb);
            }
            if (err)
                return err;
        }
    return 0;
}

uint64_t chime__index_count(const struct chime__index *ix, enum chime__index_table t)
{
    return atomic_load_explicit(&ix->live[t], memory_order_relaxed);
}

void chime__index_set_memory_max(struct chime__index *ix, uint64_t bytes)
{
    ix->mem_max = bytes;
}

uint64_t chime__index_bytes(const struct chime__index *ix)
{
    return atomic_load_explicit(&ix->bytes, memory_order_relaxed);
}
