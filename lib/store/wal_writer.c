/* SPDX-License-Identifier: MIT */
/*
 * The write-ahead log's writer thread (wal.c explains the group commit): it takes the batches the
 * appenders filled, writes them into segments, syncs them and publishes each commit.
 *
 * SEGMENTS. A segment is created with its header, filled with zeros to its size (chosen by the
 * journal: about the live data, between 1 and 16 MB), synced, and its directory entry synced,
 * before any record goes in (format.md). A batch that does not fit is written up to the last record
 * that fits, and that segment is fdatasynced, before anything is written to the next: so only the
 * newest segment can ever hold a torn record, which is what the reader's rules assume. Written
 * space means a commit's fdatasync logs no metadata: not a new file size, and not the conversion of
 * unwritten extents either, which a fallocate'd segment costs at each commit that reaches a new
 * block (an ext4 journal commit inside every fdatasync: 64 threads' SYNC_EACH puts ran 1.25-1.34x
 * faster without it, docs/perf.md). The zeros are written once per segment, off the commit path:
 * the flusher creates the next segment ahead of time (chime__wal_prepare) so that the writer does
 * not pause. Moving to a segment, the writer makes it the journal's head (head.h) before it
 * publishes any commit into it: one more small write and fdatasync per segment.
 *
 * MARKS. Each batch's part in a segment is followed by a MARK in the same pwritev (room for it is
 * kept): where the part begins, the segment's number and its header's salt (format.md). Nothing of a
 * batch is written before the previous batch's fdatasync returned, so a whole MARK proves every byte
 * of its segment before its start synced: the reader tells damage there from a torn tail. A MARK
 * also names where the previous segment ended (prev_end, 0 in the first segment since open): a
 * lost write of that segment's last batch reads as its unused space, and only this tells. MARKs are
 * not appended: LSNs count records only (`done` below, an offset in the batch's buffer, is an LSN
 * difference); seg_off, and the `used` a seal reports, count MARKs too.
 *
 * FAILURE. The first failed write, fdatasync, or segment creation sets the sticky error: `durable`
 * never moves again, every waiter and every later call gets the error (backend.h, D5). After a
 * failed fdatasync the kernel may have dropped the pages it could not write and marked them clean,
 * so a retry could "succeed" without the data: the only safe answer is to stop and let a reopen
 * recover from what is on disk. A failure of the journal's outside the log (the flusher's, the
 * index's: chime__wal_fail) sets the same error, so nothing more is appended or reported durable,
 * not even the batch the writer holds; the writer still writes what was appended before it into
 * the current segment (records a reopen may find, as after a crash), but begins no segment and
 * does not move HEAD: after a failed fsync of the directory, a segment it created could be named
 * in HEAD without its entry on disk (found in review).
 */
#define _GNU_SOURCE /* getrandom, pwritev */
#include "store/wal_impl.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/random.h>

#include "store/io.h"

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A segment header's salt: random, never 0 (format.md). It need not be secret from the disk, only
 * unknown to whoever chooses payloads, so that no payload can hold a MARK that passes for this
 * segment's; when the kernel has no entropy to give at once, the clock and an address stand in. */
static uint64_t new_salt(void)
{
    uint64_t salt = 0;
    if (getrandom(&salt, sizeof salt, GRND_NONBLOCK) != (ssize_t)sizeof salt) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        salt = realtime_ns() * 0x9e3779b97f4a7c15u ^ (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)&ts;
    }
    return salt ? salt : 1;
}

/* Create segment `number` of `size` bytes: header, zeros, file and directory synced. */
int chime__wal_create_segment(const struct chime__wal *w, uint64_t number, uint64_t size,
                              uint64_t next_version, int *out, uint64_t *salt)
{
    char name[CHIME__NAME_MAX];
    chime__wal_name(name, number);
    int fd = chime__io_openat(w->cfg.dir, name, O_CREAT | O_EXCL | O_RDWR, 0644);
    if (fd < 0)
        return fd;
    unsigned char header[CHIME__FILE_HEADER];
    chime__header_encode(header, &(struct chime__file_header){
        .run = 0, .lo = number, .hi = number, .next_version = next_version,
        .created = realtime_ns(), .salt = *salt = new_salt(), .size = size });
    int err = chime__io_pwrite(fd, header, sizeof header, 0);
    if (!err)
        err = chime__io_zero_fill(fd, sizeof header, size - sizeof header);
    if (!err)
        err = chime__io_fsync(fd);
    if (!err)
        err = chime__io_fsync(w->cfg.dir);
    if (err) {
        chime__io_close(fd);
        chime__io_unlinkat(w->cfg.dir, name);
        return err;
    }
    *out = fd;
    return 0;
}

/* The writer moves to the next segment; the current one is complete and synced, and holds every
 * record before LSN `at`. */
static int next_segment(struct chime__wal *w, uint64_t at)
{
    pthread_mutex_lock(&w->lock);
    while (w->preparing) /* the flusher is creating it: wait rather than race it for the name */
        pthread_cond_wait(&w->done, &w->lock);
    if (w->error) { /* failed from outside (chime__wal_fail): no new segment */
        int err = w->error;
        pthread_mutex_unlock(&w->lock);
        return err;
    }
    uint64_t old = w->current, number = old + 1, size, salt = w->next_salt;
    int fd = w->next_fd;
    w->next_fd = -1;
    /* None prepared: this thread creates it, and holds `preparing` meanwhile so that a
     * chime__wal_prepare (which names its segment current + 1, and current moves only below) does
     * not create the same name and make one of the two fail with -EEXIST. */
    w->preparing = fd < 0;
    uint64_t next_version = atomic_load_explicit(&w->next_version, memory_order_relaxed);
    pthread_mutex_unlock(&w->lock);

    if (fd >= 0) {
        size = w->next_size;
    } else {
        size = atomic_load_explicit(&w->segment_bytes, memory_order_relaxed);
        int err = chime__wal_create_segment(w, number, size, next_version, &fd, &salt);
        if (err) {
            pthread_mutex_lock(&w->lock);
            w->preparing = 0;
            pthread_cond_broadcast(&w->done);
            pthread_mutex_unlock(&w->lock);
            return err;
        }
    }
    chime__io_close(w->fd);
    uint64_t used = w->seg_off;
    w->prev_end = used;
    w->fd = fd;
    w->seg_off = CHIME__FILE_HEADER;
    w->seg_size = size;
    atomic_store_explicit(&w->current_bytes, size, memory_order_relaxed); /* a size only */
    w->seg_number = number;
    w->seg_salt = salt;

    pthread_mutex_lock(&w->lock);
    w->current = number;
    w->preparing = 0;
    w->sealed = old;
    w->sealed_used = used;
    w->sealed_lsn = at;
    pthread_cond_broadcast(&w->done);
    pthread_mutex_unlock(&w->lock);
    if (w->cfg.sealed)
        w->cfg.sealed(w->cfg.ctx, old, used);
    /* acquire: pairs with fail_locked's release. Failed from outside meanwhile: HEAD stays where
     * it is (nothing is committed into the new segment). */
    int err = atomic_load_explicit(&w->error_seen, memory_order_acquire);
    /* Before any commit into the new segment is published (head.h, THE RULE): what returns here
     * goes back to write_batch or the seal, whose commit waits for it. */
    return err ? err : chime__head_set(&w->head, number);
}

static uint32_t record_len(const unsigned char *p)
{
    return (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
}

/* Write a batch of whole records, which begins at LSN `lsn`, and sync it, moving to new segments as
 * they fill up; each part in a segment is followed by its MARK (see MARKS). */
static int write_batch(struct chime__wal *w, const unsigned char *buf, size_t len, uint64_t lsn)
{
    size_t done = 0;
    while (done < len) {
        size_t take = 0;
        while (done + take < len) {
            uint32_t rl = record_len(buf + done + take);
            if (w->seg_off + take + rl + CHIME__MARK_LEN > w->seg_size)
                break;
            take += rl;
        }
        if (take) {
            unsigned char mark[CHIME__MARK_LEN];
            struct chime__batch_mark m = { .start = w->seg_off, .segment = w->seg_number,
                                           .salt = w->seg_salt, .prev_end = w->prev_end };
            chime__mark_encode(mark, &m);
            int err = chime__io_pwrite2(w->fd, buf + done, take, mark, sizeof mark, w->seg_off);
            if (err)
                return err;
            w->seg_off += take + sizeof mark;
            done += take;
            /* release: the segments sealed before these bytes were written (reported through
             * cfg.sealed) are seen by a throttle that reads this count with acquire first: it
             * may count bytes twice, never miss them (compact.c, backlog_segments) */
            atomic_fetch_sub_explicit(&w->unwritten, take, memory_order_release);
        }
        if (done < len) {
            /* The rest goes to the next segment: this one is synced first (see SEGMENTS). */
            int err = chime__io_fdatasync(w->fd);
            if (!err)
                err = next_segment(w, lsn + done);
            if (err)
                return err;
        }
    }
    return chime__io_fdatasync(w->fd);
}

static void fail_locked(struct chime__wal *w, int err)
{
    if (w->error)
        return; /* failed from outside (chime__wal_fail) as the writer worked: its error stays */
    w->error = err;
    /* release: pairs with chime__wal_error's acquire, so that a caller who sees the error also
     * sees what the writer did before it, the journal told (cfg.failed, called first). An append
     * or a commit checks `error` itself, under the lock. */
    atomic_store_explicit(&w->error_seen, err, memory_order_release);
    pthread_cond_broadcast(&w->done);
    chime__waiters_fail(&w->waiters, err);
}

void chime__wal_fail(struct chime__wal *w, int err)
{
    pthread_mutex_lock(&w->lock);
    w->failed_outside = !w->error;
    fail_locked(w, err);
    pthread_cond_signal(&w->work); /* an idle writer sees the error and ends */
    pthread_mutex_unlock(&w->lock);
}

static int interval_passed(const struct chime__wal *w, struct timespec *deadline)
{
    uint64_t ns = (uint64_t)w->last_commit.tv_nsec + w->cfg.interval_ns;
    deadline->tv_sec = w->last_commit.tv_sec + (time_t)(ns / 1000000000u);
    deadline->tv_nsec = (long)(ns % 1000000000u);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > deadline->tv_sec ||
           (now.tv_sec == deadline->tv_sec && now.tv_nsec >= deadline->tv_nsec);
}

void *chime__wal_writer_main(void *arg)
{
    struct chime__wal *w = arg;
    pthread_mutex_lock(&w->lock);
    /* After an outside failure, on until what was appended before it is written (FAILURE). */
    while (!w->error || (w->failed_outside && w->fill_len > 0)) {
        int have = w->fill_len > 0, seal = w->seal_upto > w->sealed_lsn && !w->error;
        if (!have && !seal) {
            if (w->closing)
                break;
            w->writer_idle = 1;
            pthread_cond_wait(&w->work, &w->lock);
            w->writer_idle = 0;
            continue;
        }
        if (have && !w->cfg.sync_each && w->wanted <= w->durable && !seal && !w->closing &&
            !w->error && w->fill_len < COMMIT_EARLY) {
            struct timespec deadline;
            if (!interval_passed(w, &deadline)) {
                w->writer_idle = 1; /* woken early by COMMIT_EARLY bytes, or by a waiter */
                pthread_cond_timedwait(&w->work, &w->lock, &deadline);
                w->writer_idle = 0;
                continue;
            }
        }

        /* Group commit: when the last commit served several threads, they are appending again
         * now; let them, for a moment, so that one fdatasync serves them all rather than the first
         * one alone (the gather stops as soon as a pause adds nothing). */
        if (w->cfg.sync_each && w->last_batch > 1 && !seal && !w->closing && !w->error) {
            for (int i = 0; i < 4; i++) {
                size_t before = w->fill_len;
                pthread_mutex_unlock(&w->lock);
                sched_yield();
                pthread_mutex_lock(&w->lock);
                if (w->fill_len == before)
                    break;
            }
        }

        /* Take the batch; it may be empty when a seal is all there is to do. */
        unsigned char *batch = w->fill;
        size_t len = w->fill_len, batch_cap = w->fill_cap;
        uint64_t end = w->appended;
        seal = w->seal_upto > w->sealed_lsn && end >= w->seal_upto && !w->error;
        w->fill = w->spare;
        w->fill_cap = w->spare_cap;
        w->fill_len = 0;
        w->last_batch = w->fill_records;
        w->fill_records = 0;
        w->spare = batch;
        w->spare_cap = batch_cap;
        chime__waiters_taken(&w->waiters, ++w->batches, end); /* under the lock: see WAITING */
        pthread_cond_broadcast(&w->done); /* appenders held back by FILL_MAX may go on */
        pthread_mutex_unlock(&w->lock);

        int err = len ? write_batch(w, batch, len, end - len) : 0;
        if (!err && seal && w->seg_off > CHIME__FILE_HEADER)
            err = next_segment(w, end);
        clock_gettime(CLOCK_MONOTONIC, &w->last_commit);

        pthread_mutex_lock(&w->lock);
        if (err && !w->error) {
            /* Tell the journal (and the store) before any waiter can see the error, so that the
             * caller who gets -EIO finds the store failed. The callback takes no lock of ours. */
            if (w->cfg.failed)
                w->cfg.failed(w->cfg.ctx, err);
            fail_locked(w, err);
        }
        if (err) /* its own write or sync failed: nothing more is written (FAILURE) */
            w->failed_outside = 0;
        if (w->error) /* this batch's, or the journal's: never reported durable */
            continue;
        w->durable = end;
        if (seal && w->sealed_lsn < end) /* the current segment held no record: nothing to seal */
            w->sealed_lsn = end;
        pthread_cond_broadcast(&w->done);
        /* Wake the waiters without the lock: the first thing each of them does next is append. */
        pthread_mutex_unlock(&w->lock);
        chime__waiters_commit(&w->waiters, w->batches, end);
        pthread_mutex_lock(&w->lock);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}
