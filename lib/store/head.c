/* SPDX-License-Identifier: MIT */
/* The journal's head, in the file HEAD (head.h). */
#include "store/head.h"

#include <errno.h>
#include <fcntl.h>

#include "store/format.h"
#include "store/io.h"

/* The whole slot with the greatest sequence number: 0 and *seq, *n; -EBADMSG if none is whole;
 * -EPROTO if a whole one is of another version; an I/O error. */
static int read_slots(int fd, uint64_t *seq, uint64_t *n)
{
    int found = -EBADMSG;
    for (int i = 0; i < 2; i++) {
        unsigned char slot[CHIME__HEAD_SLOT];
        ssize_t got = chime__io_pread(fd, slot, sizeof slot, (uint64_t)i * CHIME__HEAD_STRIDE);
        if (got < 0)
            return (int)got;
        uint64_t s, v;
        int err = (size_t)got == sizeof slot ? chime__head_slot_decode(slot, &s, &v) : -EBADMSG;
        if (err == -EPROTO)
            return err;
        if (!err && (found || s > *seq)) {
            *seq = s;
            *n = v;
            found = 0;
        }
    }
    return found;
}

int chime__head_read(int dir, uint64_t *n)
{
    int fd = chime__io_openat(dir, CHIME__HEAD_NAME, O_RDONLY, 0);
    if (fd < 0)
        return fd;
    uint64_t seq;
    int err = read_slots(fd, &seq, n);
    chime__io_close(fd);
    return err;
}

/* Write slot seq % 2 holding n. */
static int write_slot(int fd, uint64_t seq, uint64_t n)
{
    unsigned char slot[CHIME__HEAD_SLOT];
    chime__head_slot_encode(slot, seq, n);
    return chime__io_pwrite(fd, slot, sizeof slot, seq % 2 * CHIME__HEAD_STRIDE);
}

int chime__head_open(int dir, uint64_t n, struct chime__head *h)
{
    h->fd = chime__io_openat(dir, CHIME__HEAD_NAME, O_CREAT | O_RDWR, 0644);
    if (h->fd < 0)
        return h->fd;
    uint64_t v;
    int err = read_slots(h->fd, &h->seq, &v);
    if (err == -EBADMSG) {
        /* New, or a creation a crash cut: nothing relies on it yet (head.h, THE RULE). Both slots'
         * room is written now, so that later writes change no file size. */
        h->seq = 1;
        err = chime__io_ftruncate(h->fd, 2 * CHIME__HEAD_STRIDE);
        if (!err)
            err = write_slot(h->fd, h->seq, n);
        if (!err)
            err = chime__io_fsync(h->fd);
        if (!err)
            err = chime__io_fsync(dir);
    }
    if (err)
        chime__head_close(h);
    return err;
}

int chime__head_set(struct chime__head *h, uint64_t n)
{
    int err = write_slot(h->fd, h->seq + 1, n);
    if (!err)
        err = chime__io_fdatasync(h->fd);
    if (!err)
        h->seq++;
    return err;
}

void chime__head_close(struct chime__head *h)
{
    if (h->fd >= 0)
        chime__io_close(h->fd);
    h->fd = -1;
}
