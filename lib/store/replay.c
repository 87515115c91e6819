/* SPDX-License-Identifier: MIT */
/*
 * Recovery at open: from whatever a crash left in the directory to J1 (journal.h), in four steps.
 *
 * 1. Sort out the files (files.h). *.tmp files are dropped: a run not yet renamed. A run whose range
 *    another run's contains is set aside: a merge's input that a crash left behind. The other runs
 *    must not overlap. Segments a run covers are set aside: flushed, not yet deleted. The runs and
 *    the remaining segments must cover every segment number from 1 on, up to the head (head.h) at
 *    least: a gap is a lost file.
 * 2. Read every run, oldest first, checking every record and its length, and rebuild the key index
 *    from them. Only then delete what step 1 set aside: a damaged run fails the open with the files
 *    it replaced still there.
 * 3. Read the segments in order and rebuild the index from their records, up to the first one that
 *    is not whole, by the rules segments.h states and implements (shared with chime-store): a
 *    segment torn where a crash cuts the last batch is the torn tail (everything before it counts,
 *    it and everything after it do not); damage that a crash cannot explain (a later segment or
 *    group commit written after the tear, HEAD naming a later segment, MARKs that disagree with
 *    where the segment before ended) is -EBADMSG, and nothing has been changed on disk.
 * 4. Flush every segment into a run, the torn one up to its last whole record, and delete it; the
 *    newest ones that hold no whole record are just deleted, once the head (head.h) is lowered to
 *    the last one kept, and the log starts afresh at the first of their numbers (a restart of an
 *    idle store adds no file).
 *
 * The index is order-independent (index.h, rebuild), so step 3 may read segments after runs even
 * where a run holds records older than a KILL in a segment. Versions restart above every version and
 * every header's next_version seen.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "store/files.h"
#include "store/grow.h"
#include "store/head.h"
#include "store/io.h"
#include "store/journal.h"
#include "store/segments.h"

/* Step 1: the live runs and segments, and what they replace (files.h), with *.tmp files dropped;
 * the chain of segment numbers must be whole. */
static int sort_out(struct chime__journal_files *f, int dir)
{
    int err = chime__journal_files_list(dir, f, 1);
    if (!err && f->chain != CHIME__CHAIN_WHOLE)
        err = -EBADMSG; /* overlapping runs, or a file missing: its records are lost */
    return err ? err : chime__io_fsync(dir);
}

#define REBUILD_BATCH 64 /* index operations prefetched together (index.h) */
/* Segment bytes flushed into one run in step 4 at most (a single segment larger than this, up to
 * 16 MiB, still goes whole). A flush holds its segments and their records, decoded, until the run is written: measured,
 * 58 MB resident beyond the rest for the three segments a 10^7-timer journal left, in one batch of
 * up to 32 MiB (the flusher's), more than the rebuilt index's tags. Smaller batches cost at most a
 * few more runs, which the flusher's merges fold. */
#define REPLAY_FLUSH ((uint64_t)8 << 20)

struct rebuild {
    struct chime__backend *j;
    uint64_t next_version;
    struct chime__rebuild_op ops[REBUILD_BATCH];
    size_t n;
};

static int rebuild_flush(struct rebuild *rb)
{
    int err = chime__index_rebuild(rb->j->ix, rb->ops, rb->n);
    rb->n = 0;
    return err;
}

static int rebuild_one(void *ctx, const struct chime__rec *r)
{
    struct rebuild *rb = ctx;
    struct chime__index *ix = rb->j->ix;
    if (r->version >= rb->next_version)
        rb->next_version = r->version + 1;
    struct chime__rec flat[3];
    int n = chime__rec_flatten(r, flat);
    for (int i = 0; i < n; i++) {
        if (flat[i].type == CHIME__FIRE)
            continue; /* a FIRE changes no key's version */
        struct chime__rebuild_op *op = &rb->ops[rb->n++];
        chime__index_key(ix, flat[i].key, flat[i].key_len, &op->k);
        op->version = flat[i].version;
        op->due = flat[i].due;
        op->kill = flat[i].type == CHIME__KILL;
        op->table = flat[i].type == CHIME__DEAD || (flat[i].flags & CHIME__KILL_DEAD)
                        ? CHIME__IX_DEAD
                        : CHIME__IX_PENDING;
        if (op->table == CHIME__IX_DEAD)
            op->due = 0;
    }
    return rb->n > REBUILD_BATCH - 3 ? rebuild_flush(rb) : 0;
}

/* After step 2 read every live run whole: delete the runs and segments they replace. Not before, so
 * that an open refused for a damaged run leaves the files that still hold its records. */
static int drop_replaced(const struct chime__journal_files *l, int dir)
{
    char name[CHIME__NAME_MAX];
    for (size_t i = 0; i < l->ngone_runs; i++) {
        chime__run_name(name, l->gone_runs[i].lo, l->gone_runs[i].hi);
        int err = chime__io_unlinkat(dir, name);
        if (err)
            return err;
    }
    for (size_t i = 0; i < l->ngone_segs; i++) {
        chime__wal_name(name, l->gone_segs[i]);
        int err = chime__io_unlinkat(dir, name);
        if (err)
            return err;
    }
    return l->ngone_runs || l->ngone_segs ? chime__io_fsync(dir) : 0;
}

static int add_run(struct chime__backend *j, struct chime__run *r)
{
    if (chime__grow((void **)&j->runs, &j->cruns, j->nruns, sizeof *j->runs))
        return -ENOMEM;
    j->runs[j->nruns++] = r;
    return 0;
}

int chime__journal_replay(struct chime__backend *j, uint64_t *first_segment,
                          uint64_t *next_version)
{
    struct chime__journal_files l;
    struct rebuild rb = { .j = j, .next_version = 1 };
    uint64_t *valid = NULL;
    int err = sort_out(&l, j->dir);

    if (!err) /* at most a key per 144 bytes of journal: the tables need not grow as they fill */
        err = chime__index_presize(j->ix, chime__io_dir_bytes(j->dir) / 144);
    for (size_t i = 0; !err && i < l.nruns; i++) { /* step 2 */
        char name[CHIME__NAME_MAX];
        chime__run_name(name, l.runs[i].lo, l.runs[i].hi);
        struct chime__run *r;
        uint64_t bad_off;
        err = chime__run_open(j->dir, name, &r, &bad_off, rebuild_one, &rb);
        if (!err) {
            if (r->next_version > rb.next_version)
                rb.next_version = r->next_version;
            err = add_run(j, r);
            if (err)
                chime__run_unref(r);
        }
    }

    if (!err)
        err = drop_replaced(&l, j->dir);

    size_t usable = 0; /* step 3: segments before the torn one, and the torn one (segments.h) */
    if (!err && l.nsegs && !(valid = calloc(l.nsegs, sizeof *valid)))
        err = -ENOMEM;
    if (!err)
        err = chime__segments_read(j->dir, l.segs, l.nsegs, l.head, rebuild_one, &rb, valid,
                                   &usable, &rb.next_version);
    if (!err)
        err = rebuild_flush(&rb);
    if (!err)
        err = chime__index_rebuild_done(j->ix);

    /* Step 4. The newest segments that hold no whole record (the one a restart left empty, what
     * follows a torn tail) are deleted, and the log starts again at the first of their numbers:
     * no run is spent on nothing, and the numbering has no gap. */
    size_t keep = err ? 0 : usable;
    while (keep && valid[keep - 1] <= CHIME__FILE_HEADER)
        keep--;
    for (size_t i = 0; !err && i < keep;) { /* consecutive segments, REPLAY_FLUSH of records a run */
        size_t count = 0;
        uint64_t bytes = 0;
        while (i + count < keep && (count == 0 || bytes + valid[i + count] <= REPLAY_FLUSH))
            bytes += valid[i + count++];
        err = chime__journal_flush_segments(j, l.segs[i], count, valid + i);
        i += count;
    }
    uint64_t last = keep ? l.segs[keep - 1] : l.nruns ? l.runs[l.nruns - 1].hi : 0;
    if (!err && keep < l.nsegs && l.head > last) {
        /* The head may name a segment about to go: lower it first (head.h, THE RULE), or a crash
         * between the two would leave a head above every file, which reads as a lost one. */
        struct chime__head h;
        err = chime__head_open(j->dir, last, &h);
        if (!err) {
            err = chime__head_set(&h, last);
            chime__head_close(&h);
        }
    }
    for (size_t i = l.nsegs; !err && i > keep; i--) { /* (none on error: keep is 0 then) */
        char name[CHIME__NAME_MAX];
        chime__wal_name(name, l.segs[i - 1]);
        err = chime__io_unlinkat(j->dir, name);
    }
    if (!err && keep < l.nsegs)
        err = chime__io_fsync(j->dir);
    *first_segment = last + 1;
    *next_version = rb.next_version;
    free(valid);
    chime__journal_files_free(&l);
    return err;
}
