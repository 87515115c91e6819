/* SPDX-License-Identifier: MIT */
/*
 * Spilling records into buckets on disk (spill.h).
 *
 * One file for all the buckets: blocks are appended at its end in the order buffers fill, so the
 * writes are sequential whatever the buckets' order, and a bucket is the list of its blocks'
 * offsets followed by the records still in its buffer. Every block holds exactly per_block
 * records, so a bucket's count says how many of its records are on disk and how many in its
 * buffer.
 */
#include "store/spill.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store/grow.h"
#include "store/io.h"

struct bucket {
    unsigned char *buf; /* a block's bytes once the bucket has a record; NULL before */
    size_t fill;        /* records in buf */
    uint64_t *blocks;   /* file offsets of its blocks, in the order they were written */
    size_t nblocks, cblocks;
};

struct chime__spill {
    int dir;
    int fd;        /* the file, or -1 until the first block is written */
    uint64_t end;  /* bytes written to the file */
    size_t rec_size, per_block, block; /* block: bytes of a block */
    unsigned nbuckets;
    struct bucket b[];
};

int chime__spill_open(struct chime__spill **out, int dir, unsigned buckets, size_t rec_size,
                      size_t per_block)
{
    if (!buckets || !rec_size || !per_block)
        return -EINVAL;
    struct chime__spill *s = calloc(1, sizeof *s + buckets * sizeof s->b[0]);
    if (!s)
        return -ENOMEM;
    s->dir = dir;
    s->fd = -1;
    s->rec_size = rec_size;
    s->per_block = per_block;
    s->block = rec_size * per_block;
    s->nbuckets = buckets;
    *out = s;
    return 0;
}

static void bucket_free(struct bucket *b)
{
    free(b->buf);
    free(b->blocks);
    *b = (struct bucket){ 0 };
}

void chime__spill_free(struct chime__spill *s)
{
    if (!s)
        return;
    for (unsigned i = 0; i < s->nbuckets; i++)
        bucket_free(&s->b[i]);
    if (s->fd >= 0)
        chime__io_close(s->fd);
    free(s);
}

/* Append b's full buffer to the file as a block. */
static int write_block(struct chime__spill *s, struct bucket *b)
{
    int err = chime__grow((void **)&b->blocks, &b->cblocks, b->nblocks, sizeof *b->blocks);
    if (err)
        return err;
    if (s->fd < 0) {
        int fd = chime__io_tmpfile(s->dir);
        if (fd < 0)
            return fd;
        s->fd = fd;
    }
    err = chime__io_pwrite(s->fd, b->buf, s->block, s->end);
    if (err)
        return err;
    b->blocks[b->nblocks++] = s->end;
    s->end += s->block;
    b->fill = 0;
    return 0;
}

int chime__spill_add(struct chime__spill *s, unsigned bucket, const void *rec)
{
    struct bucket *b = &s->b[bucket];
    if (!b->buf && !(b->buf = malloc(s->block)))
        return -ENOMEM;
    if (b->fill == s->per_block) { /* full: out before the record goes in, so a failure adds nothing */
        int err = write_block(s, b);
        if (err)
            return err;
    }
    memcpy(b->buf + b->fill++ * s->rec_size, rec, s->rec_size);
    return 0;
}

uint64_t chime__spill_count(const struct chime__spill *s, unsigned bucket)
{
    const struct bucket *b = &s->b[bucket];
    return (uint64_t)b->nblocks * s->per_block + b->fill;
}

int chime__spill_read(struct chime__spill *s, unsigned bucket, chime__spill_fn *fn, void *ctx)
{
    struct bucket *b = &s->b[bucket];
    int err = 0;
    unsigned char *block = b->nblocks ? malloc(s->block) : NULL;
    if (b->nblocks && !block)
        err = -ENOMEM;
    for (size_t i = 0; !err && i < b->nblocks; i++) {
        ssize_t got = chime__io_pread(s->fd, block, s->block, b->blocks[i]);
        if (got < 0)
            err = (int)got;
        else if ((size_t)got < s->block)
            err = -EBADMSG; /* the file lost what was written to it */
        else
            err = fn(ctx, block, s->per_block);
    }
    if (!err && b->fill)
        err = fn(ctx, b->buf, b->fill);
    free(block);
    bucket_free(b);
    return err;
}
