/* SPDX-License-Identifier: MIT */
/*
 * Records into their run order (merge.h, chime__rec_sort): (section, due, version, PUT/DEAD < FIRE
 * < KILL), as chime__rec_cmp orders them.
 *
 * A flush sorts every record of up to 32 MiB of segments. qsort with chime__rec_cmp made two
 * dependent loads per comparison (the pointers, then the 80-byte records) and an indirect call,
 * n log n times: a tenth of the flusher's time under a stream of far puts (docs/perf.md). Here
 * each record becomes a key of two words, read once:
 *     hi = due (0 in section 1, as chime__rec_cmp ignores it there)
 *     lo = version << 2 | rank
 * the records of section 1 (dead letters) are put after those of section 0, and each part is
 * sorted by (hi, lo) with a least-significant-digit radix sort, a byte at a time, skipping every
 * byte that all keys share (due times near each other and versions from one counter share most of
 * theirs): a few passes, each a sequential read and a scatter. Versions count records from 1, so
 * they stay far below 2^62, which the packing needs; a larger one, or no memory for the keys, sorts
 * with qsort as before. Equal keys (FIREs of one version) may come out in either order, as with
 * qsort: the collapse folds them by their largest attempt.
 */
#include <stdlib.h>
#include <string.h>

#include "store/merge.h"

struct key {
    uint64_t hi, lo;
    struct chime__rec *rec;
};

static int cmp_ptr(const void *a, const void *b)
{
    return chime__rec_cmp(*(const struct chime__rec *const *)a, *(const struct chime__rec *const *)b);
}

static unsigned digit(const struct key *k, unsigned d)
{
    return (unsigned)((d < 8 ? k->lo >> (8 * d) : k->hi >> (8 * (d - 8))) & 0xff);
}

enum { DIGITS = 16 }; /* lo's 8 bytes first, then hi's */

/* Sort k[0 .. n) by (hi, lo), tmp holding n more and count DIGITS x 256 counters; the result ends
 * in k. (The counters are not on the stack: open's replay flushes on the caller's thread.) */
static void radix(struct key *k, struct key *tmp, size_t (*count)[256], size_t n)
{
    if (n < 2)
        return;
    memset(count, 0, DIGITS * sizeof *count);
    for (size_t i = 0; i < n; i++) /* every digit's histogram in one read */
        for (unsigned d = 0; d < DIGITS; d++)
            count[d][digit(&k[i], d)]++;
    struct key *src = k, *dst = tmp;
    for (unsigned d = 0; d < DIGITS; d++) {
        if (count[d][digit(&src[0], d)] == n)
            continue; /* every key has this byte: the pass would change nothing */
        size_t at[256], sum = 0;
        for (unsigned b = 0; b < 256; b++) {
            at[b] = sum;
            sum += count[d][b];
        }
        for (size_t i = 0; i < n; i++) /* stable: the passes before stay in force */
            dst[at[digit(&src[i], d)]++] = src[i];
        struct key *t = src;
        src = dst;
        dst = t;
    }
    if (src != k)
        for (size_t i = 0; i < n; i++)
            k[i] = src[i];
}

void chime__rec_sort(struct chime__rec **recs, size_t n)
{
    if (n < 2)
        return;
    struct key *k = malloc(2 * n * sizeof *k + DIGITS * sizeof(size_t[256]));
    size_t first = 0, last = n; /* section 0 from the front, section 1 from the back */
    for (size_t i = 0; k && i < n; i++) {
        const struct chime__rec *r = recs[i];
        if (r->version >> 62) {
            free(k);
            k = NULL;
            break;
        }
        int section = chime__rec_section(r);
        struct key x = { section ? 0 : r->due, r->version << 2 | (uint64_t)chime__rec_rank(r), recs[i] };
        k[section ? --last : first++] = x;
    }
    if (!k) {
        qsort(recs, n, sizeof *recs, cmp_ptr);
        return;
    }
    size_t (*count)[256] = (size_t (*)[256])(k + 2 * n);
    radix(k, k + n, count, first);
    radix(k + first, k + n, count, n - first);
    for (size_t i = 0; i < n; i++)
        recs[i] = k[i].rec;
    free(k);
}
