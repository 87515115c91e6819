/* SPDX-License-Identifier: MIT */
/* Buffered, checked reading of a journal file's records (reader.h). */
#include "store/reader.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "store/io.h"

#define READ_CHUNK (128u << 10) /* bytes per read; also room for the largest record */

int chime__reader_init(struct chime__reader *r, int fd, uint64_t off, uint64_t end)
{
    _Static_assert(READ_CHUNK >= CHIME__REC_MAX + 8, "a buffer must hold the largest record");
    *r = (struct chime__reader){ .fd = fd, .off = off, .end = end, .cap = READ_CHUNK };
    r->buf = malloc(r->cap);
    return r->buf ? 0 : -ENOMEM;
}

int chime__reader_init_segment(struct chime__reader *r, int fd, const struct chime__file_header *h,
                               uint64_t end)
{
    int err = chime__reader_init(r, fd, CHIME__FILE_HEADER, end);
    r->segment = 1;
    r->h = *h;
    return err;
}

void chime__reader_free(struct chime__reader *r)
{
    free(r->buf);
    r->buf = NULL;
}

/* Make at least `want` bytes available from r->off, if the range has them. Return: bytes available
 * (maybe fewer than want), or a negative errno. */
static ssize_t fill_to(struct chime__reader *r, size_t want)
{
    size_t have = r->fill - r->start;
    if (have >= want)
        return (ssize_t)have;
    memmove(r->buf, r->buf + r->start, have);
    r->start = 0;
    r->fill = have;
    uint64_t from = r->off + have;
    size_t room = r->cap - have;
    if (from >= r->end)
        return (ssize_t)have;
    if (room > r->end - from)
        room = (size_t)(r->end - from);
    ssize_t got = chime__io_pread(r->fd, r->buf + have, room, from);
    if (got < 0)
        return got;
    r->fill += (size_t)got;
    return (ssize_t)r->fill;
}

/* Zeros (or fewer than 8 bytes) at r->off end the records only if every byte from there to r->end
 * is zero: a writer never leaves a gap and writes after it, so data after zeros means the zeros
 * were data once (format.md, "The reader's rules"). Return: 0 all zero; -EBADMSG; a read error.
 * r->off stays at the zeros. */
static int rest_is_zero(struct chime__reader *r)
{
    for (uint64_t off = r->off; off < r->end;) {
        size_t want = r->end - off < r->cap ? (size_t)(r->end - off) : r->cap;
        ssize_t got = chime__io_pread(r->fd, r->buf, want, off);
        r->start = r->fill = 0; /* buf no longer holds the bytes from r->off on */
        if (got < 0)
            return (int)got;
        for (ssize_t i = 0; i < got; i++)
            if (r->buf[i])
                return -EBADMSG;
        if ((size_t)got < want)
            return 0; /* the file ends before r->end */
        off += (uint64_t)got;
    }
    return 0;
}

int chime__reader_next(struct chime__reader *r, struct chime__rec *rec)
{
again:
    if (r->off >= r->end)
        return 0;
    ssize_t have = fill_to(r, CHIME__REC_HEADER);
    if (have < 0)
        return (int)have;
    uint32_t len = 0;
    enum chime__decoded d = chime__rec_decode(r->buf + r->start, (size_t)have, rec, &len);
    if (d == CHIME__REC_SHORT) {
        have = fill_to(r, len);
        if (have < 0)
            return (int)have;
        d = chime__rec_decode(r->buf + r->start, (size_t)have, rec, &len);
        if (d == CHIME__REC_SHORT)
            return -EBADMSG; /* the file ends inside the record: a cut write */
    }
    if (d == CHIME__REC_END) /* zeros, or fewer than 8 bytes before the end */
        return rest_is_zero(r);
    if (d == CHIME__REC_BAD)
        return -EBADMSG;
    if (rec->type == CHIME__MARK) { /* a group commit's end: no timer */
        struct chime__batch_mark m;
        if (!r->segment || !chime__mark_valid(rec, &r->h, r->off, &m))
            return -EBADMSG;
        if (!r->marks)
            r->prev_end = m.prev_end; /* every MARK of a segment names the same */
        r->marks++;
        r->start += len;
        r->off += len;
        goto again;
    }
    r->start += len;
    r->off += len;
    return 1;
}

/* Whether the CHIME__MARK_LEN bytes at p can be a MARK: its length and type, before the checksum. */
static int looks_like_mark(const unsigned char *p)
{
    return p[8] == CHIME__MARK && p[4] == CHIME__MARK_LEN && !p[5] && !p[6] && !p[7];
}

int chime__reader_mark_after(struct chime__reader *r, uint64_t x, uint64_t *at, uint64_t *start)
{
    if (!r->segment)
        return 0;
    r->start = r->fill = 0; /* buf no longer holds the bytes from r->off on */
    /* nonzero_end: the offset after the last byte that is not zero */
    uint64_t last_at = 0, last_start = 0, nonzero_end = 0;
    int marked = 0;
    for (uint64_t off = x; off + CHIME__MARK_LEN <= r->end;) {
        size_t want = r->end - off < r->cap ? (size_t)(r->end - off) : r->cap;
        ssize_t got = chime__io_pread(r->fd, r->buf, want, off);
        if (got < 0)
            return (int)got;
        for (size_t k = (size_t)got; k > 0; k--)
            if (r->buf[k - 1]) {
                if (off + k > nonzero_end)
                    nonzero_end = off + k;
                break;
            }
        size_t i = 0;
        for (; i + CHIME__MARK_LEN <= (size_t)got; i += 8) {
            struct chime__rec rec;
            struct chime__batch_mark m;
            uint32_t len;
            if (looks_like_mark(r->buf + i) &&
                chime__rec_decode(r->buf + i, CHIME__MARK_LEN, &rec, &len) == CHIME__REC_WHOLE &&
                chime__mark_valid(&rec, &r->h, off + i, &m)) {
                if (m.start > x) {
                    *at = off + i;
                    *start = m.start;
                    return 1;
                }
                marked = 1; /* its commit holds x: the last one written, unless more follows */
                last_at = off + i;
                last_start = m.start;
            }
        }
        if ((size_t)got < want)
            break; /* the file ends before r->end */
        off += i; /* from the first offset not looked at (i > 0, as want >= CHIME__MARK_LEN) */
    }
    /* A group commit written after the one that holds x (its bytes after that one's MARK, whose own
     * MARK a crash cut) was written only once that one had been synced. */
    if (marked && nonzero_end > last_at + CHIME__MARK_LEN) {
        *at = last_at;
        *start = last_start;
        return 1;
    }
    return 0;
}

int chime__file_open(int dir, const char *name, int *fd, uint64_t *size,
                     struct chime__file_header *h)
{
    *fd = chime__io_openat(dir, name, O_RDONLY, 0);
    if (*fd < 0)
        return *fd;
    unsigned char header[CHIME__FILE_HEADER];
    int err = chime__io_size(*fd, size);
    ssize_t got = err ? 0 : chime__io_pread(*fd, header, sizeof header, 0);
    if (!err && got < 0)
        err = (int)got;
    if (!err)
        err = got < (ssize_t)sizeof header ? -EBADMSG : chime__header_decode(header, h);
    if (err) {
        chime__io_close(*fd);
        *fd = -1;
    }
    return err;
}

int chime__reader_written(int dir, const char *name)
{
    int fd = chime__io_openat(dir, name, O_RDONLY, 0);
    if (fd < 0)
        return fd;
    uint64_t size = 0;
    struct chime__reader rd;
    struct chime__rec r;
    int err = chime__io_size(fd, &size);
    if (!err)
        err = chime__reader_init(&rd, fd, CHIME__FILE_HEADER, size);
    if (!err) {
        /* a record, a MARK (not valid outside a segment's read), or zeros that data follows:
         * written to; nothing but zeros: not */
        err = chime__reader_next(&rd, &r);
        err = err == 1 || err == -EBADMSG ? 1 : err;
        chime__reader_free(&rd);
    }
    chime__io_close(fd);
    return err;
}
