/* SPDX-License-Identifier: MIT */
/* Which segments count, and up to where: see segments.h (replay.c, step 3). */
#include "store/segments.h"

#include <errno.h>

#include "store/io.h"
#include "store/reader.h"
#include "store/format.h"

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

enum chime__seg_fit chime__segment_fit(int open_err, uint64_t number, uint64_t size,
                                       const struct chime__file_header *h)
{
    if (open_err || h->run || h->lo != number)
        return CHIME__SEG_HEADER;
    return size < h->size ? CHIME__SEG_SHORT : size > h->size ? CHIME__SEG_LONG : CHIME__SEG_FITS;
}

/* A segment is created whole (header, zeros to its size) and synced before any record goes in, and
 * never cut or grown after. So one that does not fit is a creation a crash cut (torn, nothing
 * valid) only if nothing was written after its header: records after a bad header are damage
 * (taken for a cut creation, a flipped bit deleted every acknowledged record of the newest segment
 * and the open succeeded: found in review), and so is a written segment of another size (cut
 * part-way, it read as a torn tail, and every commit after the cut was lost without an error:
 * found in review), and a longer one whatever follows. Nor can a crash leave either in a segment
 * HEAD names: HEAD is set to a segment only once it is created and its directory entry synced
 * (head.h, wal.c, wal_writer.c), so such a segment cut to nothing is a lost file, as a deleted
 * one is. */
int chime__segment_verdict(int dir, uint64_t number, uint64_t head, enum chime__seg_fit fit)
{
    if (fit == CHIME__SEG_LONG)
        return CHIME__SEG_GREW;
    int written = written_to(dir, number);
    if (written)
        return written == 1 ? CHIME__SEG_WRITTEN : written;
    return number <= head ? CHIME__SEG_NAMED : CHIME__SEG_CUT;
}

/* One segment: fn with its whole records. *valid receives the offset after the last whole record
 * and *torn whether something else than zeros up to the file's end followed it. If so, -EBADMSG if
 * a later batch's MARK shows that it was damage (format.md, "The reader's rules"). *prev_end
 * receives where its MARKs say the segment before it ended (0: they do not say). */
static int scan_segment(int dir, uint64_t number, uint64_t head, chime__emit_fn *fn, void *ctx,
                        uint64_t *valid, int *torn, uint64_t *prev_end, uint64_t *next_version)
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
    enum chime__seg_fit fit = CHIME__SEG_FITS; /* (another error: below) */
    if (!err || err == -EBADMSG)
        fit = chime__segment_fit(err, number, size, &h);
    if (fit != CHIME__SEG_FITS) {
        if (!err)
            chime__io_close(fd);
        int verdict = chime__segment_verdict(dir, number, head, fit);
        return verdict == CHIME__SEG_CUT ? 0 : verdict > 0 ? -EBADMSG : verdict;
    }
    /* (-EPROTO: a segment of another format version fails the open, as any other error does.) */
    if (err)
        return err;
    if (h.next_version > *next_version)
        *next_version = h.next_version;
    struct chime__reader rd;
    err = chime__reader_init_segment(&rd, fd, &h, size);
    struct chime__rec r;
    while (!err) {
        int n = chime__reader_next(&rd, &r);
        if (n == 1) {
            err = fn ? fn(ctx, &r) : 0;
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

int chime__segments_read(int dir, const uint64_t *segs, size_t n, uint64_t head,
                         chime__emit_fn *fn, void *ctx, uint64_t *valid, size_t *usable,
                         uint64_t *next_version)
{
    int err = 0;
    *usable = n;
    for (size_t i = 0; !err && i < n; i++) {
        int torn;
        uint64_t prev_end;
        err = scan_segment(dir, segs[i], head, fn, ctx, &valid[i], &torn, &prev_end, next_version);
        /* Its MARKs name where the segment before it ended: a lost write of that one's last batch
         * read as its unused space (zeros to its end), and only this tells (format.md). */
        if (!err && prev_end && i > 0 && segs[i - 1] + 1 == segs[i] && valid[i - 1] != prev_end)
            err = -EBADMSG;
        if (err || !torn)
            continue;
        /* HEAD named a later segment: the writer had synced this one whole before it moved on
         * (head.h), so what ends it early is damage, even with nothing written after it. */
        if (segs[i] < head)
            return -EBADMSG;
        for (size_t k = i + 1; !err && k < n; k++) {
            err = written_to(dir, segs[k]);
            if (err == 1)
                err = -EBADMSG; /* written to after it: not a torn tail but damage */
        }
        *usable = i + 1;
        break;
    }
    return err;
}
