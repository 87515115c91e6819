/* SPDX-License-Identifier: MIT */
/*
 * The write-ahead log and its group commit (wal.h).
 *
 * Appenders encode their records into `fill` under the lock, each given the next LSN (and, for a
 * PUT or DEAD, the next version), and return; with CHIME_SYNC_EACH they then wait for `durable` to
 * pass their LSN. One writer thread swaps `fill` with its spare buffer, writes the batch with one
 * pwrite per segment it touches, fdatasyncs, publishes `durable`, and wakes that batch's waiters:
 * however many threads appended while the previous fdatasync ran, one fdatasync serves them all. With
 * CHIME_SYNC_INTERVAL the writer commits every interval, or at once for a waiter (sync, a firing)
 * or when 4 MB have piled up.
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
 * of its segment before its start synced: the reader tells damage there from a torn tail. MARKs are
 * not appended: LSNs count records only (`done` below, an offset in the batch's buffer, is an LSN
 * difference); seg_off, and the `used` a seal reports, count MARKs too.
 *
 * WAITING. Sixty-four threads waiting for one commit must not, on being woken, fight over the
 * log's lock to find out that they may go, nor be woken by a commit that is not theirs: they wait
 * without the lock, by the protocol of waiters.h. The writer numbers the batches it takes, tells the
 * waiters (under the lock, so that an append is in the batch taken after it) and publishes each
 * commit there.
 *
 * FAILURE. The first failed write, fdatasync, or segment creation sets the sticky error: `durable`
 * never moves again, every waiter and every later call gets the error (backend.h, D5). After a
 * failed fdatasync the kernel may have dropped the pages it could not write and marked them clean,
 * so a retry could "succeed" without the data: the only safe answer is to stop and let a reopen
 * recover from what is on disk.
 */
#define _GNU_SOURCE /* pthread_condattr_setclock */
#include "store/wal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "store/head.h"
#include "store/io.h"
#include "store/lock.h"
#include "store/waiters.h"

#define FILL_MAX (64u << 20)  /* appenders wait for the writer beyond this many bytes */
#define COMMIT_EARLY (4u << 20) /* with an interval, commit at once beyond this many */
#define SEGMENT_MIN (1u << 20)
#define SEGMENT_MAX (16u << 20)

struct chime__wal {
    pthread_mutex_t lock;
    pthread_cond_t work; /* the writer waits here: records, a wanted commit, a seal, close */
    pthread_cond_t done; /* everyone else waits here: a commit, a seal, room in fill */
    struct chime__wal_config cfg;
    pthread_t writer;

    /* under lock */
    unsigned char *fill;
    size_t fill_len, fill_cap;
    uint64_t appended;     /* LSN of the end of fill */
    uint64_t durable;      /* everything before this LSN is synced */
    uint64_t wanted;       /* a waiter wants a commit up to here now */
    uint64_t seal_upto;    /* a seal is wanted of everything before this LSN */
    uint64_t sealed_lsn;   /* everything before this LSN is in segments <= sealed */
    uint64_t sealed;       /* the last sealed segment */
    uint64_t current;      /* the segment records go to */
    int error;
    int closing;
    int writer_idle;       /* the writer waits on `work` for records: an append must wake it */
    size_t fill_records;   /* appends (calls) in fill */
    size_t last_batch;     /* appends in the last commit */
    int preparing;         /* the next segment is being created (by chime__wal_prepare, or by the
                              writer when none was prepared): nobody else may create it */
    int next_fd;           /* a segment created ahead of time, or -1 */
    uint64_t next_segment, next_size, next_salt; /* next_fd's number, size and header salt */

    /* the writer's own */
    unsigned char *spare;
    size_t spare_cap;
    int fd;                /* the current segment */
    struct chime__head head; /* names the current segment (head.h) */
    uint64_t seg_off, seg_size;
    uint64_t seg_number, seg_salt; /* the current segment's number and header salt, for its MARKs */
    struct timespec last_commit;

    _Atomic int error_seen;         /* `error`, for chime__wal_error's look without the lock */
    _Atomic uint64_t segment_bytes; /* size of segments created from now on */
    _Atomic uint64_t unwritten;     /* see chime__wal_unwritten */
    _Atomic uint64_t current_bytes; /* seg_size, for chime__wal_segment_bytes */
    _Atomic uint64_t next_version;  /* given out without the lock: see chime__wal_append */

    /* Waiting for durability without the lock (see WAITING). */
    uint64_t batches;              /* batches taken: the writer's own */
    struct chime__waiters waiters; /* durable and error, published after each commit */
};

static uint64_t clamp_segment(uint64_t bytes)
{
    return bytes < SEGMENT_MIN ? SEGMENT_MIN : bytes > SEGMENT_MAX ? SEGMENT_MAX : bytes;
}

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
static int create_segment(const struct chime__wal *w, uint64_t number, uint64_t size,
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
        .created = realtime_ns(), .salt = *salt = new_salt() });
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
        int err = create_segment(w, number, size, next_version, &fd, &salt);
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
    w->sealed_lsn = at;
    pthread_cond_broadcast(&w->done);
    pthread_mutex_unlock(&w->lock);
    if (w->cfg.sealed)
        w->cfg.sealed(w->cfg.ctx, old, used);
    /* Before any commit into the new segment is published (head.h, THE RULE): what returns here
     * goes back to write_batch or the seal, whose commit waits for it. */
    return chime__head_set(&w->head, number);
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
                                           .salt = w->seg_salt };
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
    w->error = err;
    /* release: pairs with chime__wal_error's acquire, so that a caller who sees the error also
     * sees what the writer did before it, the journal told (cfg.failed, called first). An append
     * or a commit checks `error` itself, under the lock. */
    atomic_store_explicit(&w->error_seen, err, memory_order_release);
    pthread_cond_broadcast(&w->done);
    chime__waiters_fail(&w->waiters, err);
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

static void *writer_main(void *arg)
{
    struct chime__wal *w = arg;
    pthread_mutex_lock(&w->lock);
    while (!w->error) {
        int have = w->fill_len > 0, seal = w->seal_upto > w->sealed_lsn;
        if (!have && !seal) {
            if (w->closing)
                break;
            w->writer_idle = 1;
            pthread_cond_wait(&w->work, &w->lock);
            w->writer_idle = 0;
            continue;
        }
        if (have && !w->cfg.sync_each && w->wanted <= w->durable && !seal && !w->closing &&
            w->fill_len < COMMIT_EARLY) {
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
        if (w->cfg.sync_each && w->last_batch > 1 && !seal && !w->closing) {
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
        seal = w->seal_upto > w->sealed_lsn && end >= w->seal_upto;
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
        if (err) {
            /* Tell the journal (and the store) before any waiter can see the error, so that the
             * caller who gets -EIO finds the store failed. The callback takes no lock of ours. */
            if (w->cfg.failed)
                w->cfg.failed(w->cfg.ctx, err);
            fail_locked(w, err);
            break;
        }
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
    err = create_segment(w, w->current, size, cfg->next_version, &w->fd, &w->seg_salt);
    if (err)
        goto fail_head;
    w->seg_off = CHIME__FILE_HEADER;
    w->seg_size = size;
    atomic_store_explicit(&w->current_bytes, size, memory_order_relaxed); /* a size only */
    w->seg_number = w->current;
    err = chime__head_set(&w->head, w->current);
    if (!err && pthread_create(&w->writer, NULL, writer_main, w) != 0)
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

int chime__wal_seal(struct chime__wal *w, uint64_t *sealed)
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
    int fd = -1, err = create_segment(w, number, size, next_version, &fd, &salt);

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
