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
 *    is not whole, or zeros that data follows (the reader's end is zeros up to the file's end); a
 *    segment whose header is not whole is torn at its start, unless something was written after
 *    it (then -EBADMSG: its header had been synced before any record went in). A segment whose
 *    MARKs say the one before it ended elsewhere than where its records do is damage too. If
 *    a later segment was written to (anything but zeros after its header), that was damage: the
 *    writer had synced this one whole before writing there. Likewise if a whole MARK after it names
 *    a start after it: the batch that wrote that MARK was written only once everything before its
 *    start had been synced. -EBADMSG either way, and nothing has been changed on disk. Otherwise it
 *    is the torn tail, what a crash cut of the last batch: everything before it counts, it and
 *    everything after it do not (format.md, "The reader's rules").
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
#include "store/reader.h"

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

/* Whether anything was ever written to segment `number` after its header (chime__reader_written:
 * a record, whole or not, or any byte that is not zero). The writer writes to a segment only after
 * the one before it is complete and synced, so a torn segment followed by one that was written to
 * was not torn by a crash. Return: 1, 0, or a read error. */
static int written_to(int dir, uint64_t number)
{
    char name[CHIME__NAME_MAX];
    chime__wal_name(name, number);
    return chime__reader_written(dir, name);
}

/* Step 3 for one segment: rebuild from its whole records. *valid receives the offset after the last
 * whole record and *torn whether something else than zeros up to the file's end followed it. If so,
 * -EBADMSG if a later batch's MARK shows that it was damage (format.md, "The reader's rules").
 * *prev_end receives where its MARKs say the segment before it ended (0: they do not say). */
static int scan_segment(int dir, uint64_t number, uint64_t head, struct rebuild *rb,
                        uint64_t *valid, int *torn, uint64_t *prev_end)
{
    char name[CHIME__NAME_MAX];
    chime__wal_name(name, number);
    *valid = 0;
    *torn = 1;
    *prev_end = 0;
    int fd;
    uint64_t size = 0;
    struct chime__file_header h;
    int err = chime__file_open(dir, name, &fd, &size, &h);
    if (err == -EBADMSG || (!err && (h.run || h.lo != number))) {
        if (!err)
            chime__io_close(fd);
        /* A header not whole, or not this segment's: a creation a crash cut (torn, nothing valid),
         * if nothing was written after it. A header is synced before any record goes in and never
         * rewritten, so records after a bad one are damage: taken for a cut creation, a flipped bit
         * deleted every acknowledged record of the newest segment and the open succeeded (found
         * in review). Nor can a crash leave it in a segment the head names: the head is set to a
         * segment only once its header and directory entry are synced (head.h, wal.c,
         * wal_writer.c), so such a segment cut to nothing is a lost file, as a deleted one is. */
        if (number <= head)
            return -EBADMSG;
        int written = written_to(dir, number);
        return written == 1 ? -EBADMSG : written;
    }
    /* (-EPROTO: a segment of another format version fails the open, as any other error does.) */
    if (err)
        return err;
    if (h.next_version > rb->next_version)
        rb->next_version = h.next_version;
    struct chime__reader rd;
    err = chime__reader_init_segment(&rd, fd, &h, size);
    struct chime__rec r;
    while (!err) {
        int n = chime__reader_next(&rd, &r);
        if (n == 1) {
            err = rebuild_one(rb, &r);
            continue;
        }
        if (n == 0)
            *torn = 0;
        else if (n != -EBADMSG)
            err = n;
        else { /* a torn point: damage if a later batch's MARK names a start after it */
            uint64_t at, start;
            err = chime__reader_mark_after(&rd, rd.off, &at, &start);
            if (err == 1)
                err = -EBADMSG;
        }
        break;
    }
    *valid = rd.off;
    *prev_end = rd.prev_end;
    chime__reader_free(&rd);
    chime__io_close(fd);
    return err;
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

    size_t usable = l.nsegs; /* step 3: segments before the torn one, and the torn one */
    if (!err && l.nsegs && !(valid = calloc(l.nsegs, sizeof *valid)))
        err = -ENOMEM;
    for (size_t i = 0; !err && i < l.nsegs; i++) {
        int torn;
        uint64_t prev_end;
        err = scan_segment(j->dir, l.segs[i], l.head, &rb, &valid[i], &torn, &prev_end);
        /* Its MARKs name where the segment before it ended: a lost write of that one's last batch
         * read as its unused space (zeros to its end), and only this tells (format.md). */
        if (!err && prev_end && i > 0 && l.segs[i - 1] + 1 == l.segs[i] && valid[i - 1] != prev_end)
            err = -EBADMSG;
        if (err || !torn)
            continue;
        /* HEAD named a later segment: the writer had synced this one whole before it moved on
         * (head.h), so what ends it early is damage, even with nothing written after it. */
        if (l.segs[i] < l.head) {
            err = -EBADMSG;
            break;
        }
        for (size_t k = i + 1; !err && k < l.nsegs; k++) {
            err = written_to(j->dir, l.segs[k]);
            if (err == 1)
                err = -EBADMSG; /* written to after it: not a torn tail but damage */
        }
        usable = i + 1;
        break;
    }
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
