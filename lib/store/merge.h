/* SPDX-License-Identifier: MIT */
/*
 * Streams of records in run order (format.md), merged and collapsed: the one piece of logic behind
 * a flush (a segment's records, sorted, into a run), a merge (runs into one), a load (the live timers
 * of a due-time range of every run) and a dead-letter listing.
 *
 * COLLAPSING. Records of one version are adjacent in run order, PUT (or DEAD) first, then FIREs,
 * then KILL. A group that holds both the PUT and the KILL of a version is dead and leaves nothing;
 * FIREs fold into their PUT's attempt count. What survives of a group is, for a run, the PUT; or,
 * when the PUT is elsewhere (an older run), the KILL or the FIRE, unless drop_orphans says there is
 * no older run to hold that PUT. For a load or a listing, only a live PUT (or DEAD) survives.
 */
#ifndef CHIME_STORE_MERGE_H
#define CHIME_STORE_MERGE_H

#include <stddef.h>
#include <stdint.h>

#include "store/format.h"

/* A stream of records in run order. next returns 1 (a record, valid until the next call, or for as
 * long as the source lives if `stable`), 0 (the end) or a negative errno. */
struct chime__source {
    int (*next)(struct chime__source *src, struct chime__rec *out);
    int stable;
};

/* A source over records already in run order, through an array of pointers to them (a sorted
 * segment: the records stay where the segment was read, so the source is stable). */
struct chime__array_source {
    struct chime__source base;
    struct chime__rec *const *recs;
    size_t n, i;
};
void chime__array_source_init(struct chime__array_source *s, struct chime__rec *const *recs,
                              size_t n);

/* Sort pointers to records into the records' run order (rec_sort.c). Cost: O(n) for each byte of
 * (due, version) that the records do not all share; 48 bytes a record and 32 KiB of memory, taken
 * and given back (without it, or for a version of 2^62 or more, qsort: O(n log n)). */
void chime__rec_sort(struct chime__rec **recs, size_t n);

typedef int chime__emit_fn(void *ctx, const struct chime__rec *r);

enum chime__collapse_mode {
    CHIME__KEEP_RUN,  /* what a run must keep (orphans too, unless drop_orphans) */
    CHIME__KEEP_LIVE, /* only live PUT and DEAD records, FIREs folded in */
};

struct chime__collapse {
    enum chime__collapse_mode mode;
    int drop_orphans;
    chime__emit_fn *emit;
    void *ctx;
    /* the group being gathered */
    int open, section;
    uint64_t version, due;
    int has_put, has_kill, has_fire;
    uint32_t fire_max;
    struct chime__rec put, kill, fire;
    unsigned char *buf; /* copies of the put's key and payload, the kill's and fire's keys */
    size_t cap;
};

void chime__collapse_init(struct chime__collapse *c, enum chime__collapse_mode mode,
                          int drop_orphans, chime__emit_fn *emit, void *ctx);
void chime__collapse_free(struct chime__collapse *c);

/*
 * Merge the sources (each in run order) into one run-ordered stream, collapse it, and emit what
 * survives. Stops early when emit returns nonzero, and returns that. Return: 0; what emit returned;
 * a source's error; -ENOMEM.
 */
int chime__merge(struct chime__source **src, size_t n, struct chime__collapse *c);

#endif /* CHIME_STORE_MERGE_H */
