/* SPDX-License-Identifier: MIT */
/*
 * Reading a journal file's records in order, through a buffer, with format.md's rules: a record is
 * returned only if it is whole; the first one that is not ends the read, and the caller decides
 * (by where the file sits in the journal) whether that is a torn tail or damage.
 */
#ifndef CHIME_STORE_READER_H
#define CHIME_STORE_READER_H

#include <stddef.h>
#include <stdint.h>

#include "store/format.h"

struct chime__reader {
    int fd;
    uint64_t off;        /* file offset of the next record */
    uint64_t end;        /* no record is read at or beyond this offset */
    unsigned char *buf;
    size_t cap;
    size_t start, fill;  /* buf[start, fill) holds the file's bytes from off on */
    int segment;         /* 1: a segment, whose MARKs are skipped (0: a run: a MARK is damage) */
    struct chime__file_header h; /* a segment's header: what its MARKs must name */
    uint64_t marks;      /* MARKs skipped so far */
    uint64_t prev_end;   /* the first MARK's prev_end (format.md): the previous segment's end; 0
                            if none was read, or the writer came to this segment from an open */
};

/* Open the journal file `name` in dir read-only and read its header. Return: 0, with *fd, *size and
 * *h; -EBADMSG if the file is shorter than a header or the header is not whole; -EPROTO if it is a
 * whole header of another format version; an I/O error. On error nothing stays open. */
int chime__file_open(int dir, const char *name, int *fd, uint64_t *size,
                     struct chime__file_header *h);

/* Read a run's records (fd) from off (a record boundary) up to end. Return: 0; -ENOMEM. */
int chime__reader_init(struct chime__reader *r, int fd, uint64_t off, uint64_t end);
/* Read a segment's records (fd, whose header is h) from its first up to end. Return: 0; -ENOMEM. */
int chime__reader_init_segment(struct chime__reader *r, int fd, const struct chime__file_header *h,
                               uint64_t end);
void chime__reader_free(struct chime__reader *r);

/*
 * The next record into *rec (its key and payload valid until the next call). r->off is then the
 * offset just after it; on any other return it is the offset of what was found. A segment's MARKs
 * are checked (chime__mark_valid), counted in r->marks and skipped: never returned.
 * Return: 1 a record; 0 the end (`end` reached, or nothing but zeros from r->off to `end`: nothing
 *         was written there); -EBADMSG the bytes at r->off are not a whole record (a MARK in a run,
 *         or one its segment cannot hold there, included), or are zeros that non-zero bytes follow
 *         before `end`; -EIO or another negative errno if a read failed.
 */
int chime__reader_next(struct chime__reader *r, struct chime__rec *rec);

/*
 * After chime__reader_next returned -EBADMSG at offset x of a segment: whether a group commit that
 * began after x left its MARK, whole, at an 8-byte aligned offset from x to `end` (format.md, "The
 * reader's rules"), or the group commit that holds x left its MARK, whole, and bytes that are not
 * zero follow it (a later group commit's, whose MARK a crash cut). If so, every byte before x had
 * been synced before that later commit was written, and what is at x is damage, not a torn tail.
 * *at receives the MARK's offset, *start its start (after x in the first case, at or before it in
 * the second). Reading it moves nothing (r->off stays at x).
 * Return: 1 found; 0 none (also for a run); a negative errno if a read failed.
 */
int chime__reader_mark_after(struct chime__reader *r, uint64_t x, uint64_t *at, uint64_t *start);

/* Whether anything was ever written to the segment file `name` in dir after its header: a record,
 * whole or not, or any byte that is not zero (format.md, "written to"). The header itself is not
 * read. Return: 1, 0, or an error opening or reading it. */
int chime__reader_written(int dir, const char *name);

#endif /* CHIME_STORE_READER_H */
