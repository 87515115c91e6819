/* SPDX-License-Identifier: MIT */
/*
 * A table of the key index (index_table.h): its slots in anonymous memory, or in an unnamed file.
 *
 * FILE TABLES. A table over the index's memory limit (512 KiB) lives in an unnamed file in the
 * journal's directory; the page cache holds its slots and the process holds, per table:
 *
 *   tags     one byte per slot: 0 exactly when the slot is empty, TAG_ENDED when it holds an
 *            ended entry, else the key's tag, from bits of its hash that neither its stripe nor
 *            its home slot uses (1..254).
 *   pending  up to `batch` slots written and not yet in the file, each once, with a map from
 *            position to entry: a 32nd of the table's slots, at least 1024.
 *
 * Invariants, for every position i of a file table:
 *   T1 The slot at i is pending[i] if i is pending, else the file's bytes at i; where tags[i] is
 *      TAG_ENDED, with its version read as ended whatever those bytes say.
 *   T2 tags[i] == 0 exactly when that slot is empty (version 0), TAG_ENDED exactly when it holds
 *      an ended entry, else tags[i] == tag(its hash) and the entry is live.
 * So the tags are an exact picture of the table's occupancy, and a filter of its keys with no false
 * negatives: a lookup walks the key's probe run in the tags, and reads (a 32-byte pread, or the
 * pending entry) only the slots whose tag is the key's. A key that is absent, the common case of a
 * put, is known absent at the first empty tag, and goes to the first ended slot it passed, or else
 * to that empty one: no read. A "maybe" (a slot of the run with the key's tag, holding another key)
 * costs one read and is then settled by the full 128-bit hash, so replace, cancel and
 * acknowledgement stay exact. At the index's load (at most
 * 3/4, usually about half) an unsuccessful probe passes about 1.5 to 7.5 occupied slots (linear
 * probing: (1 + 1/(1 - load)^2) / 2 slots in all), so a new key reads with probability about 0.6 to
 * 2.9 % (each live slot matches with probability 1/254).
 *
 * A write (an insert, an overwrite) goes to pending and sets the tag. A deletion ends the entry in
 * place (index.c, DELETION) by its tag alone (chime__itable_end): nothing is written or read, and
 * the bytes at i keep the entry's last live content, which T1 reads as ended. A key that is absent
 * goes to the first ended slot of its probe run, if there is one: so churn reuses ended slots
 * instead of filling the table with them. (Before, a deletion wrote its ended entry into the batch:
 * under a burst of acknowledgements the firing thread spent 39 % of its samples writing batches
 * out: docs/perf.md, "Deletion by tag".)
 * A full batch is written out sorted by position, a 64 KiB chunk (2048 slots) at a time: a chunk
 * with 8 pending writes or more is read, patched and written whole (a pread and a pwrite of 64 KiB
 * cost about what seven 32-byte pwrites do, measured on the project's VM: 12 us against 1.8 us
 * each); the others get one pwrite per run of consecutive positions. Because the batch is a 32nd of
 * the table, one written out half full to full holds 32 to 64 writes per chunk whatever the table's
 * size: 0.2 to 0.4 us of the kernel's time per write instead of 1.8. The journal's flusher thread
 * writes out batches that are half full (chime__index_flush), so a put seldom meets a full one; when
 * it does, it writes the batch itself, holding its stripe's lock for a few milliseconds (256 chunks
 * for a table of 2^19 slots). The index reserves room before a put appends its record
 * (chime__itable_room), so the put's own write never does I/O.
 *
 * Costs in memory: a file table costs 1 byte per slot of tags (1.3 to 2.7 bytes per key at 3/8 to
 * 3/4 full; 16 MiB for 10^7 keys sized by a rebuild), and a batch of 48 bytes per pending write
 * (an entry and two map words): 1.5 bytes per slot once a batch has filled (24 MiB for 10^7 keys),
 * nothing before (the arrays are allocated untouched). The slots themselves (32 bytes each) are page
 * cache, which the kernel may write out and evict. Nothing here is durable or needs to be: the index
 * is rebuilt from the journal at each open.
 *
 * I/O errors: a failed read fails the operation that needed it; a failed flush leaves every pending
 * write pending (T1 holds: the table reads as before) and fails the operation that needed room. The
 * journal fails for good on either (journal.c, index_failed).
 */
#define _GNU_SOURCE /* MAP_ANONYMOUS */
#include "store/index_table.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "store/io.h"

typedef struct chime__islot_data slot_t;
_Static_assert(sizeof(slot_t) == 32, "a slot is 32 bytes");

#define BATCH_PER 32u   /* a batch holds up to cap / BATCH_PER pending writes ... */
#define BATCH_MIN 1024u /* ... and at least this many */
#define CHUNK 2048u     /* slots (64 KiB) read, patched and written at once by a flush ... */
#define CHUNK_MIN 8u    /* ... when it holds at least this many pending writes */
#define HUGE_PAGE ((size_t)2 << 20)
#define HUGE_FROM ((size_t)4 << 20) /* arrays this large are mapped for huge pages (map_random) */
_Static_assert((CHUNK & (CHUNK - 1)) == 0, "a table of CHUNK slots or more is whole chunks");

#define TAG_ENDED 255u /* T2: the slot holds an ended entry */

/* 1..254 from 32 bits of the hash that the stripe (hi's top 5) and the home slot (lo's low bits)
 * do not use. */
static uint8_t tag_of(uint64_t hi)
{
    return (uint8_t)((uint32_t)(hi >> 24) % 254u + 1u);
}

/* A slot's tag (T2). */
static uint8_t slot_tag(const slot_t *s)
{
    return s->version == 0 ? 0 : (s->version & CHIME__ISLOT_ENDED) ? TAG_ENDED : tag_of(s->hi);
}

/*
 * Map bytes of zeros for an array read and written at random (slots, tags): from HUGE_FROM, aligned
 * to a huge page and advised to use transparent huge pages, before any page exists. With 4 KiB pages
 * nearly every access to a table of tens of MiB was also a TLB miss, whose page walk (a nested one
 * under virtualisation) cost more than the cache miss: an open of 10^7 keys spent most of its time
 * there. Unmapped with munmap(p, bytes). Return: NULL if there is no memory.
 */
static void *map_random(size_t bytes)
{
    size_t extra = bytes >= HUGE_FROM ? HUGE_PAGE : 0;
    char *p = mmap(NULL, bytes + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (extra) {
        char *a = (char *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
        if (a > p)
            munmap(p, (size_t)(a - p));
        if (a + bytes < p + bytes + extra)
            munmap(a + bytes, (size_t)(p + bytes + extra - (a + bytes)));
        p = a;
        madvise(p, bytes, MADV_HUGEPAGE); /* advice: without transparent huge pages, nothing */
    }
    return p;
}

int chime__itable_make(struct chime__itable *t, uint64_t cap)
{
    size_t bytes = cap * sizeof(slot_t);
    void *p = map_random(bytes);
    if (!p)
        return -ENOMEM;
    /* Populated: a table is written all over, and a first read of an untouched page would map the
     * zero page only for the first write to copy it. */
    if (madvise(p, bytes, MADV_POPULATE_WRITE) != 0)
        memset(p, 0, bytes); /* a kernel before 5.14: touch every page ourselves */
    *t = (struct chime__itable)CHIME__ITABLE_NONE;
    t->slots = p;
    t->cap = cap;
    return 0;
}

void chime__itable_free(struct chime__itable *t)
{
    if (t->slots)
        munmap(t->slots, t->cap * sizeof(slot_t));
    if (t->tags)
        munmap(t->tags, t->cap);
    if (t->fd >= 0)
        chime__io_close(t->fd);
    free(t->pend.e);
    free(t->pend.map);
    *t = (struct chime__itable)CHIME__ITABLE_NONE;
}

int chime__itable_to_file(struct chime__itable *t, int dir, uint32_t batch)
{
    if (!batch) /* a 32nd of the slots, so that a full batch holds 64 writes per chunk */
        batch = t->cap / BATCH_PER > BATCH_MIN ? (uint32_t)(t->cap / BATCH_PER) : BATCH_MIN;
    uint32_t mapn = 2;
    while (mapn < 2 * batch)
        mapn *= 2;
    /* Not populated: the tags of a table that is mostly empty stay mostly the zero page. */
    uint8_t *tags = map_random(t->cap);
    struct chime__ipend *e = malloc(batch * sizeof *e);
    uint32_t *map = calloc(mapn, sizeof *map);
    int fd = !tags || !e || !map ? -ENOMEM : chime__io_tmpfile(dir);
    /* Written a page at a time, and read without readahead: the page cache then holds the table in
     * 4 KiB folios. ext4 walks every block of a folio on each buffered write into it, so 32-byte
     * updates of a table written in one 512 MiB stroke (2 MiB folios) cost 10 us each. */
    if (fd >= 0)
        posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    int err = fd < 0 ? fd : 0;
    for (uint64_t off = 0, bytes = t->cap * sizeof(slot_t); !err && off < bytes; off += 4096)
        err = chime__io_pwrite(fd, (char *)t->slots + off, bytes - off < 4096 ? bytes - off : 4096,
                               off);
    if (err) {
        if (fd >= 0)
            chime__io_close(fd);
        if (tags)
            munmap(tags, t->cap);
        free(e);
        free(map);
        return err;
    }
    for (uint64_t i = 0; i < t->cap; i++) /* T2 */
        tags[i] = slot_tag(&t->slots[i]);
    munmap(t->slots, t->cap * sizeof(slot_t));
    t->slots = NULL;
    t->fd = fd;
    t->tags = tags;
    t->pend = (struct chime__ipending){ e, map, 0, batch, mapn - 1 };
    return 0;
}

/* ---- pending writes ---- */

static uint32_t map_home(uint64_t pos, uint32_t mask)
{
    return (uint32_t)((pos * UINT64_C(0x9e3779b97f4a7c15)) >> 32) & mask;
}

/* The pending entry at pos, or NULL. */
static struct chime__ipend *pend_get(const struct chime__ipending *p, uint64_t pos)
{
    if (!p->n)
        return NULL;
    uint32_t mask = p->mask;
    for (uint32_t i = map_home(pos, mask);; i = (i + 1) & mask) {
        uint32_t x = p->map[i];
        if (!x)
            return NULL;
        if (p->e[x - 1].pos == pos)
            return &p->e[x - 1];
    }
}

/* Record a write of s at pos; there is room (n < max) unless pos is already pending. */
static void pend_put(struct chime__itable *t, uint64_t pos, const slot_t *s)
{
    struct chime__ipending *p = &t->pend;
    t->tags[pos] = slot_tag(s); /* T2 */
    uint32_t mask = p->mask;
    for (uint32_t i = map_home(pos, mask);; i = (i + 1) & mask) {
        uint32_t x = p->map[i];
        if (!x) {
            p->e[p->n] = (struct chime__ipend){ pos, *s };
            p->map[i] = ++p->n;
            return;
        }
        if (p->e[x - 1].pos == pos) {
            p->e[x - 1].s = *s;
            return;
        }
    }
}

static int by_pos(const void *a, const void *b)
{
    uint64_t x = ((const struct chime__ipend *)a)->pos, y = ((const struct chime__ipend *)b)->pos;
    return (x > y) - (x < y);
}

/* Write the pending entries e[0 .. k) (sorted, all within one chunk) one pwrite per run. */
static int write_runs(struct chime__itable *t, const struct chime__ipend *e, uint32_t k)
{
    slot_t run[64];
    int err = 0;
    for (uint32_t i = 0; i < k && !err;) {
        uint32_t n = 0;
        uint64_t first = e[i].pos;
        while (i < k && n < 64 && e[i].pos == first + n)
            run[n++] = e[i++].s;
        err = chime__io_pwrite(t->fd, run, n * sizeof *run, first * sizeof *run);
    }
    return err;
}

int chime__itable_flush(struct chime__itable *t)
{
    struct chime__ipending *p = &t->pend;
    if (!p->n)
        return 0;
    /* Sorted in place: the map's indices are rebuilt below. */
    qsort(p->e, p->n, sizeof *p->e, by_pos);
    uint64_t chunk = t->cap < CHUNK ? t->cap : CHUNK;
    slot_t *buf = NULL;
    int err = 0;
    for (uint32_t i = 0, k; i < p->n && !err; i += k) {
        uint64_t c = p->e[i].pos / chunk;
        for (k = 1; i + k < p->n && p->e[i + k].pos / chunk == c; k++)
            ;
        /* A 64 KiB pread and pwrite cost about what 7 pwrites of 32 bytes do (measured here): a
         * chunk with CHUNK_MIN writes or more is read, patched and written whole. */
        if (k >= CHUNK_MIN && !buf)
            buf = malloc(chunk * sizeof *buf);
        if (k < CHUNK_MIN || !buf) {
            err = write_runs(t, p->e + i, k);
            continue;
        }
        ssize_t got = chime__io_pread(t->fd, buf, chunk * sizeof *buf, c * chunk * sizeof *buf);
        if (got != (ssize_t)(chunk * sizeof *buf)) {
            err = got < 0 ? (int)got : -EIO;
            break;
        }
        for (uint32_t x = i; x < i + k; x++)
            buf[p->e[x].pos - c * chunk] = p->e[x].s;
        err = chime__io_pwrite(t->fd, buf, chunk * sizeof *buf, c * chunk * sizeof *buf);
    }
    free(buf);
    uint32_t mask = p->mask;
    memset(p->map, 0, (mask + 1) * sizeof *p->map);
    if (!err) {
        p->n = 0;
        return 0;
    }
    for (uint32_t x = 0; x < p->n; x++) { /* T1: what was written is still pending */
        uint32_t i = map_home(p->e[x].pos, mask);
        while (p->map[i])
            i = (i + 1) & mask;
        p->map[i] = x + 1;
    }
    return err;
}

int chime__itable_room(struct chime__itable *t, uint32_t n)
{
    if (t->slots || !t->cap || t->pend.n + n <= t->pend.max)
        return 0;
    return chime__itable_flush(t);
}

/* ---- reading and writing slots ---- */

int chime__itable_read(const struct chime__itable *t, uint64_t first, uint64_t n, slot_t *buf)
{
    while (n) {
        uint64_t part = t->cap - first < n ? t->cap - first : n;
        if (t->slots) {
            memcpy(buf, t->slots + first, part * sizeof *buf);
        } else {
            ssize_t got = chime__io_pread(t->fd, buf, part * sizeof *buf, first * sizeof *buf);
            if (got != (ssize_t)(part * sizeof *buf))
                return got < 0 ? (int)got : -EIO;
            for (uint64_t i = 0; i < part; i++) { /* T1 */
                const struct chime__ipend *e = pend_get(&t->pend, first + i);
                if (e)
                    buf[i] = e->s;
                if (t->tags[first + i] == TAG_ENDED)
                    buf[i].version |= CHIME__ISLOT_ENDED;
            }
        }
        buf += part;
        n -= part;
        first = 0;
    }
    return 0;
}

int chime__itable_write(struct chime__itable *t, uint64_t first, uint64_t n, const slot_t *buf)
{
    uint64_t mask = t->cap - 1;
    if (t->slots) {
        for (uint64_t i = 0; i < n; i++)
            t->slots[(first + i) & mask] = buf[i];
        return 0;
    }
    for (uint64_t i = 0; i < n; i++) {
        uint64_t pos = (first + i) & mask;
        if (t->pend.n == t->pend.max && !pend_get(&t->pend, pos)) {
            int err = chime__itable_flush(t);
            if (err)
                return err;
        }
        pend_put(t, pos, &buf[i]);
    }
    return 0;
}

/* One slot of a file table (T1). */
static int read_one(const struct chime__itable *t, uint64_t pos, slot_t *s)
{
    const struct chime__ipend *e = pend_get(&t->pend, pos);
    if (e) {
        *s = e->s;
        return 0;
    }
    ssize_t got = chime__io_pread(t->fd, s, sizeof *s, pos * sizeof *s);
    return got == (ssize_t)sizeof *s ? 0 : got < 0 ? (int)got : -EIO;
}

int chime__itable_find(const struct chime__itable *t, const struct chime__hash *h, uint64_t *pos,
                       slot_t *s)
{
    uint64_t mask = t->cap - 1, home = h->lo & mask;
    if (t->slots) { /* in memory: no copies */
        for (uint64_t i = home;; i = (i + 1) & mask) {
            const slot_t *x = &t->slots[i];
            if (x->version == 0 || (x->lo == h->lo && x->hi == h->hi)) {
                *pos = i;
                *s = *x;
                return 0;
            }
        }
    }
    uint8_t want = tag_of(h->hi);
    uint64_t ended = UINT64_MAX; /* the run's first ended slot */
    for (uint64_t i = home;; i = (i + 1) & mask) {
        if (t->tags[i] == 0) { /* T2: empty, and h is nowhere further on */
            *pos = ended != UINT64_MAX ? ended : i;
            *s = (slot_t){ 0, 0, ended != UINT64_MAX ? CHIME__ISLOT_ENDED : 0, 0 };
            return 0;
        }
        if (t->tags[i] == TAG_ENDED && ended == UINT64_MAX)
            ended = i;
        if (t->tags[i] != want)
            continue; /* T2: an ended entry, or another key */
        int err = read_one(t, i, s);
        if (err)
            return err;
        if (s->lo == h->lo && s->hi == h->hi) {
            *pos = i;
            return 0;
        }
    }
}

void chime__itable_end(struct chime__itable *t, uint64_t pos)
{
    t->tags[pos] = TAG_ENDED; /* T2; T1 reads the bytes at pos as ended */
}

/* In a file table: how many slots of h's probe run carry h's tag (T2: the run ends at the first
 * empty tag), and in *pos the first of them; 0 in memory. */
static uint64_t tag_matches(const struct chime__itable *t, const struct chime__hash *h, uint64_t *pos)
{
    if (!t->tags)
        return 0;
    uint64_t mask = t->cap - 1, n = 0;
    uint8_t want = tag_of(h->hi);
    for (uint64_t i = h->lo & mask; t->tags[i]; i = (i + 1) & mask)
        if (t->tags[i] == want && n++ == 0)
            *pos = i;
    return n;
}

int chime__itable_sole(const struct chime__itable *t, const struct chime__hash *h, uint64_t *pos)
{
    return tag_matches(t, h, pos) == 1;
}

int chime__itable_maybe(const struct chime__itable *t, const struct chime__hash *h)
{
    uint64_t pos;
    return tag_matches(t, h, &pos) != 0;
}
