/* SPDX-License-Identifier: MIT */
/*
 * The write-ahead log and its group commit (wal.h): the appenders' side and the calls of wal.h.
 * The writer thread and the segments it writes are in wal_writer.c; the state both share, in
 * wal_impl.h.
 *
 * Appenders encode their records into `fill` under the lock, each given the next LSN (and, for a
 * PUT or DEAD, the next version), and return; with CHIME_SYNC_EACH they then wait for `durable` to
 * pass their LSN. One writer thread swaps `fill` with its spare buffer, writes the batch with one
 * pwrite per segment it touches, fdatasyncs, publishes `durable`, and wakes that batch's waiters:
 * however many threads appended while the previous fdatasync ran, one fdatasync serves them all. With
 * CHIME_SYNC_INTERVAL the writer commits every interval, or at once for a waiter (sync, a firing)
 * or when 4 MB have piled up.
 *
 * WAITING. Sixty-four threads waiting for one commit must not, on being woken, fight over the
 * log's lock to find out that they may go, nor be woken by a commit that is not theirs: they wait
 * without the lock, by the protocol of waiters.h. The writer numbers the batches it takes, tells the
 * waiters (under the lock, so that an append is in the batch taken after it) and publishes each
 * commit there.
 */
#define _GNU_SOURCE /* pthread_condattr_setclock */
#include "store/wal_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/io.h"
#include "store/lock.h"

static uint64_t clamp_segment(uint64_t bytes)
{
    return bytes < SEGMENT_MIN ? SEGMENT_MIN : bytes > SEGMENT_MAX ? SEGMENT_MAX : bytes;
}

int chime__wal_open(struct chime__wal **out, const struct chime__wal_config *cfg)
{
    struct chime__wal *w = calloc(1, sizeof *w);
    if (!w)
        return -ENOMEM;
    w->cfg = *cfg;
    w->fd = w->next_fd = -1;
    atomic_init(&w->next_version, cfg->next_version);
    w->current = cfg->segment;
    w->sealed = cfg->segment - 1;
    w->sealed_used = UINT64_MAX;
    atomic_init(&w->segment_bytes, clamp_segment(cfg->segment_bytes));
    atomic_init(&w->unwritten, 0);
    atomic_init(&w->current_bytes, 0);
    chime__waiters_init(&w->waiters);
    chime__short_lock_init(&w->lock);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->work, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&w->done, NULL);
    clock_gettime(CLOCK_MONOTONIC, &w->last_commit);

    /* HEAD exists before the first segment does (head.h), and names it before the writer starts. */
    uint64_t size = atomic_load_explicit(&w->segment_bytes, memory_order_relaxed);
    int err = chime__head_open(cfg->dir, w->current - 1, &w->head);
    if (err)
        goto fail;
    err = chime__wal_create_segment(w, w->current, size, cfg->next_version, &w->fd, &w->seg_salt);
    if (err)
        goto fail_head;
    w->seg_off = CHIME__FILE_HEADER;
    w->seg_size = size;
    atomic_store_explicit(&w->current_bytes, size, memory_order_relaxed); /* a size only */
    w->seg_number = w->current;
    err = chime__head_set(&w->head, w->current);
    if (!err && pthread_create(&w->writer, NULL, chime__wal_writer_main, w) != 0)
        err = -ECHILD;
    if (err) {
        /* The segment stays: the head may name it now. Holding no record, it goes at the next open
         * (replay.c, step 4), which lowers the head first. */
        chime__io_close(w->fd);
        goto fail_head;
    }
    *out = w;
    return 0;
fail_head:
    chime__head_close(&w->head);
fail:
    pthread_cond_destroy(&w->work);
    pthread_cond_destroy(&w->done);
    pthread_mutex_destroy(&w->lock);
    free(w);
    return err;
}

int chime__wal_append(struct chime__wal *w, struct chime__rec *recs, size_t n, uint64_t *end)
{
    /* Encoding (a copy and a checksum) happens before the lock, which then guards a memcpy: when a
     * commit wakes 64 threads that all append at once, the lock is held for tens of nanoseconds,
     * not hundreds. A version needs no lock: records of one key are appended one after another by
     * the store (it holds the key's lock), so a later record of a key always gets a greater version,
     * and versions of different keys need no order (format.md). */
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += chime__rec_len(recs[i].key_len, recs[i].payload_len);
    unsigned char stack[1024], *enc = total <= sizeof stack ? stack : malloc(total);
    if (!enc)
        return -ENOMEM;
    for (size_t i = 0, off = 0; i < n; i++) {
        if ((recs[i].type == CHIME__PUT || recs[i].type == CHIME__DEAD) && recs[i].version == 0)
            recs[i].version = atomic_fetch_add_explicit(&w->next_version, 1, memory_order_relaxed);
        chime__rec_encode(enc + off, &recs[i]);
        off += chime__rec_len(recs[i].key_len, recs[i].payload_len);
    }
    pthread_mutex_lock(&w->lock);
    while (!w->error && !w->closing && w->fill_len > 0 && w->fill_len + total > FILL_MAX)
        pthread_cond_wait(&w->done, &w->lock);
    int err = w->error ? w->error : w->closing ? -ESHUTDOWN : 0;
    if (!err && w->fill_len + total > w->fill_cap) {
        size_t cap = w->fill_cap ? w->fill_cap : 64u << 10;
        while (cap < w->fill_len + total)
            cap *= 2;
        unsigned char *grown = realloc(w->fill, cap);
        if (grown) {
            w->fill = grown;
            w->fill_cap = cap;
        } else {
            err = -ENOMEM;
        }
    }
    int wake = 0;
    if (!err) {
        int first = w->fill_len == 0;
        memcpy(w->fill + w->fill_len, enc, total);
        w->fill_len += total;
        /* relaxed: a figure for the throttle's look, which re-checks under its own lock (and a
         * change it admits late is one record over, never lost) */
        atomic_fetch_add_explicit(&w->unwritten, total, memory_order_relaxed);
        w->fill_records++;
        w->appended += total;
        *end = w->appended;
        /* Only a writer asleep needs waking (most of the time it is inside an fdatasync). With
         * sync_each a commit is due now. With an interval, the first record since the last commit
         * starts the interval's clock: the writer asleep without a deadline (nothing to write) must
         * wake to set one, or the record waits for the next thing that wakes it, however late
         * (found in review: a lone put was lost to kill -9 seconds after it returned); after that
         * it wakes on its own, or for COMMIT_EARLY bytes. */
        wake = w->writer_idle && (w->cfg.sync_each || first || w->fill_len >= COMMIT_EARLY);
        if (wake)
            w->writer_idle = 0;
    }
    pthread_mutex_unlock(&w->lock);
    if (wake) /* outside the lock: the woken writer's first act is to take it */
        pthread_cond_signal(&w->work);
    if (enc != stack)
        free(enc);
    return err;
}

int chime__wal_wait(struct chime__wal *w, uint64_t lsn)
{
    if (chime__waiters_durable(&w->waiters) >= lsn)
        return 0;
    if (!w->cfg.sync_each) { /* the writer waits for its interval: ask for a commit now */
        pthread_mutex_lock(&w->lock);
        if (w->wanted < lsn && w->durable < lsn) {
            w->wanted = lsn;
            pthread_cond_signal(&w->work);
        }
        pthread_mutex_unlock(&w->lock);
    }
    return chime__waiters_wait(&w->waiters, lsn);
}

int chime__wal_sync(struct chime__wal *w)
{
    pthread_mutex_lock(&w->lock);
    uint64_t lsn = w->appended;
    pthread_mutex_unlock(&w->lock);
    return chime__wal_wait(w, lsn);
}

int chime__wal_seal(struct chime__wal *w, uint64_t *sealed, uint64_t *used)
{
    pthread_mutex_lock(&w->lock);
    uint64_t lsn = w->appended;
    if (w->seal_upto < lsn) {
        w->seal_upto = lsn;
        pthread_cond_signal(&w->work);
    }
    while (!w->error && w->sealed_lsn < lsn)
        pthread_cond_wait(&w->done, &w->lock);
    int err = w->sealed_lsn >= lsn ? 0 : w->error;
    *sealed = w->sealed;
    if (used)
        *used = w->sealed_used;
    pthread_mutex_unlock(&w->lock);
    return err;
}

void chime__wal_set_segment_bytes(struct chime__wal *w, uint64_t bytes)
{
    atomic_store_explicit(&w->segment_bytes, clamp_segment(bytes), memory_order_relaxed);
}

uint64_t chime__wal_segment_bytes(struct chime__wal *w)
{
    /* relaxed: sizes, nothing more */
    uint64_t next = atomic_load_explicit(&w->segment_bytes, memory_order_relaxed),
             current = atomic_load_explicit(&w->current_bytes, memory_order_relaxed);
    return next > current ? next : current;
}

uint64_t chime__wal_unwritten(struct chime__wal *w)
{
    /* acquire: pairs with write_batch's release (see there) */
    return atomic_load_explicit(&w->unwritten, memory_order_acquire);
}

int chime__wal_prepare(struct chime__wal *w)
{
    pthread_mutex_lock(&w->lock);
    if (w->next_fd >= 0 || w->preparing || w->error || w->closing) {
        pthread_mutex_unlock(&w->lock);
        return 0;
    }
    w->preparing = 1;
    uint64_t number = w->current + 1;
    uint64_t next_version = atomic_load_explicit(&w->next_version, memory_order_relaxed);
    pthread_mutex_unlock(&w->lock);

    uint64_t size = atomic_load_explicit(&w->segment_bytes, memory_order_relaxed), salt = 0;
    int fd = -1, err = chime__wal_create_segment(w, number, size, next_version, &fd, &salt);

    pthread_mutex_lock(&w->lock);
    w->preparing = 0;
    if (!err) {
        w->next_fd = fd;
        w->next_segment = number;
        w->next_size = size;
        w->next_salt = salt;
    }
    pthread_cond_broadcast(&w->done);
    pthread_mutex_unlock(&w->lock);
    return err;
}

int chime__wal_error(struct chime__wal *w)
{
    /* No lock: every put, cancel and acknowledgement asks this before it appends, and the log's
     * lock is the one they all share (under puts from two threads, a quarter of the putters'
     * sleeps were on this lock, two thirds of those here; docs/perf.md). */
    return atomic_load_explicit(&w->error_seen, memory_order_acquire); /* see fail_locked */
}

uint64_t chime__wal_current(struct chime__wal *w)
{
    pthread_mutex_lock(&w->lock);
    uint64_t c = w->current;
    pthread_mutex_unlock(&w->lock);
    return c;
}

int chime__wal_writer_asleep(struct chime__wal *w)
{
    pthread_mutex_lock(&w->lock);
    int asleep = w->writer_idle && w->fill_len == 0;
    pthread_mutex_unlock(&w->lock);
    return asleep;
}

int chime__wal_close(struct chime__wal *w)
{
    pthread_mutex_lock(&w->lock);
    w->closing = 1;
    pthread_cond_signal(&w->work);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->writer, NULL);

    int err = w->error;
    chime__io_close(w->fd);
    chime__head_close(&w->head);
    if (w->next_fd >= 0) { /* an unused segment ahead of time: no record, nothing to keep */
        char name[CHIME__NAME_MAX];
        chime__wal_name(name, w->next_segment);
        chime__io_close(w->next_fd);
        chime__io_unlinkat(w->cfg.dir, name);
    }
    free(w->fill);
    free(w->spare);
    pthread_cond_destroy(&w->work);
    pthread_cond_destroy(&w->done);
    pthread_mutex_destroy(&w->lock);
    free(w);
    return err;
}
