/* SPDX-License-Identifier: MIT */
/*
 * Sorting a flush's records into run order (merge.h): (section, due, version, PUT/DEAD < FIRE <
 * KILL), as chime__rec_cmp orders them.
 *
 * A flush sorts up to a few hundred thousand records read from its segments. Sorted as pointers
 * with qsort, each comparison loaded two records at random (80 bytes each, tens of MiB in all): a
 * cache miss per record per level of the sort, and the largest item of the flusher's time under a
 * stream of puts (8 % of all the samples of BM_store_put/threads:2/sync:2/loaded:0, 2026-11-28).
 *
 * Here each record's sort key is copied once, in order, into a 24-byte entry with its pointer,
 * and the entries are sorted by a least-significant-digit radix sort: one stable pass per byte of
 * the key, from the least significant (the rank, then the version's eight bytes, then the due
 * time's, then the section), each a sequential read and a scatter into 256 buckets. A pass whose
 * byte is the same in every entry (the high bytes of due times and versions that a flush's records
 * share) is skipped: the counts of every pass come from one walk, before the first. So a flush of
 * n records costs about n * (2 + passes) entry moves, with no comparison and no load of a record
 * after the first.
 */
#include <stdlib.h>

#include "store/merge.h"

/* 24 bytes: the record's address carries its rank (bits 0-1) and section (bit 2), which a record's
 * alignment leaves free. */
struct key {
    uint64_t due, version;
    uintptr_t r;
};
_Static_assert(_Alignof(struct chime__rec) >= 8, "three free bits in a record's address");

#define DIGITS 18 /* the rank, 8 of the version, 8 of the due time, the section */

static unsigned digit(const struct key *k, int d)
{
    if (d == 0)
        return (unsigned)(k->r & 3);
    if (d <= 8)
        return (unsigned)(k->version >> (8 * (d - 1))) & 255;
    if (d <= 16)
        return (unsigned)(k->due >> (8 * (d - 9))) & 255;
    return (unsigned)(k->r >> 2) & 1;
}

static int cmp_ptr(const void *a, const void *b)
{
    return chime__rec_cmp(*(const struct chime__rec *const *)a,
                          *(const struct chime__rec *const *)b);
}

size_t chime__rec_sort_scratch(size_t n)
{
    return 2 * n * sizeof(struct key);
}

void chime__rec_sort(struct chime__rec **recs, size_t n, void *scratch)
{
    if (n < 2)
        return;
    struct key *a = scratch ? scratch : malloc(chime__rec_sort_scratch(n)), *b = a ? a + n : NULL;
    if (!a) { /* out of memory: the slow way, which needs none */
        qsort(recs, n, sizeof *recs, cmp_ptr);
        return;
    }
    static const uint8_t ranks[] = { [CHIME__FIRE] = 1, [CHIME__KILL] = 2 };
    _Static_assert(CHIME__FIRE < sizeof ranks && CHIME__KILL < sizeof ranks, "ranks by type");
    size_t (*count)[256] = calloc(DIGITS, sizeof *count);
    if (!count) {
        if (!scratch)
            free(a);
        qsort(recs, n, sizeof *recs, cmp_ptr);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const struct chime__rec *r = recs[i];
        int section = chime__rec_section(r);
        uintptr_t rank = r->type < sizeof ranks ? ranks[r->type] : 0;
        a[i] = (struct key){ section ? 0 : r->due, r->version,
                             (uintptr_t)recs[i] | rank | (uintptr_t)section << 2 };
        for (int d = 0; d < DIGITS; d++)
            count[d][digit(&a[i], d)]++;
    }
    for (int d = 0; d < DIGITS; d++) {
        if (count[d][digit(&a[0], d)] == n)
            continue; /* every entry has this byte: the pass would not move anything */
        size_t at = 0;
        for (unsigned v = 0; v < 256; v++) { /* counts become each bucket's first place */
            size_t c = count[d][v];
            count[d][v] = at;
            at += c;
        }
        for (size_t i = 0; i < n; i++)
            b[count[d][digit(&a[i], d)]++] = a[i];
        struct key *t = a;
        a = b;
        b = t;
    }
    for (size_t i = 0; i < n; i++)
        recs[i] = (struct chime__rec *)(a[i].r & ~(uintptr_t)7);
    free(count);
    if (!scratch)
        free(a < b ? a : b);
}
