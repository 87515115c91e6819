/* SPDX-License-Identifier: MIT */
/*
 * The journal's flusher thread: sealed segments become runs, and runs are merged, so that the disk
 * holds about what is live and a due-time range can be read from a handful of sorted files.
 *
 * FLUSH. A sealed segment (J3: wholly durable) is read into memory, each record flattened into the
 * records a run holds (its kill fields become KILLs sorted where their targets are), sorted into run
 * order, collapsed (a PUT and its KILL both in the segment leave nothing), and written as the run
 * covering that one segment. Only then is the segment deleted. A crash before the rename leaves a
 * .tmp file (removed at open) and the segment; after it, the run and maybe the segment, which open
 * deletes because a run covers it.
 *
 * MERGE. Runs are merged in age order, so a KILL meets its PUT (always in the same or an older run)
 * and both vanish; a merge that includes the oldest run also drops KILLs and FIREs whose target is
 * nowhere. The output covers its inputs' whole range and replaces them the same way a flush replaces
 * a segment; open ignores and deletes any run another run's range contains, so a crash between the
 * rename and the last unlink loses nothing and resurrects nothing.
 *
 * POLICY. After each flush: if the runs hold more than twice the live data plus 1 MiB, merge them
 * all (the disk stays within about twice what is live); otherwise, beyond 6 runs, merge the newest
 * ones, as many as have together at least half the size of the next older run (size tiers: each
 * record is rewritten O(log(total / segment)) times). The next segment's size follows the live data
 * (1 to 16 MiB), so a small store does not preallocate 16 MiB at a time.
 *
 * SCRATCH. A flush reads up to 32 MiB of segments and sorts arrays of tens of MiB built from them.
 * Fresh memory costs a page fault per 4 KiB page on first touch (a microsecond or two each on the
 * project's VM): a quarter of the flusher's time under a burst of firings and acknowledgements. So
 * the buffers stay from one flush to the next (j->scratch) while segments keep coming, and go back
 * once the flusher has had nothing to do for SCRATCH_KEEP_NS, and after open's flushes. (Freed as
 * soon as it caught up, they were allocated afresh for nearly every segment of a steady stream of
 * firings, which one flush at a time keeps up with.)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/deadline.h"
#include "store/grow.h"
#include "store/io.h"
#include "store/journal.h"
#include "store/merge.h"

#define MERGE_ABOVE_RUNS 6
#define SCRATCH_KEEP_NS UINT64_C(1000000000) /* idle this long, the flusher frees its buffers */

/* Publish sealed - flushed for the throttle's lock-free look. Locked. */
static void set_backlog(struct chime__backend *j)
{
    /* relaxed: the throttle re-checks under the lock before it waits */
    atomic_store_explicit(&j->backlog, j->sealed > j->flushed ? j->sealed - j->flushed : 0,
                          memory_order_relaxed);
}

/* The backlog in segments: sealed ones not yet flushed (`backlog`, the lock-free copy of sealed -
 * flushed), and the log's records not yet in a segment, counted in whole segments. Those become
 * sealed segments as soon as the writer gets to them, whatever the throttle decides then: counting
 * only the sealed ones, 64 MB of SYNC_INTERVAL records piled up in the log's memory (its FILL_MAX)
 * while the flusher was behind went to disk past the limit (15 segments of 1 MiB were seen). */
static uint64_t backlog_segments(struct chime__backend *j)
{
    uint64_t seg = chime__wal_segment_bytes(j->wal);
    /* The unwritten bytes first (an acquire load): a segment the writer sealed before it wrote the
     * bytes last subtracted from them is then in `backlog` too, so a byte leaving the one count
     * is never missing from both. (Read the other way round, a put could pass while a batch of
     * several segments moved from the one to the other.) */
    uint64_t unwritten = chime__wal_unwritten(j->wal);
    /* relaxed: set under j->lock by the sealed callback, which the writer calls before it writes
     * on (ordered by the acquire above); the throttle re-checks under j->lock before it waits */
    return atomic_load_explicit(&j->backlog, memory_order_relaxed) + unwritten / (seg ? seg : 1);
}

/* THROTTLE. A caller waits while the backlog is over CHIME__JOURNAL_BACKLOG_MAX; a flush, which
 * signals `done`, ends the wait. One comes: while the backlog is over, either the flusher has a
 * sealed segment to flush, or the log holds more than CHIME__JOURNAL_BACKLOG_MAX segments of
 * records (counted in the larger of the current and the next segment's size, so they cannot fit
 * in the current one: test_store_backlog.c checks it), which its writer writes at once (beyond 4 MB
 * it does not wait for the interval: wal_writer.c), sealing a segment for the flusher as it
 * goes. */
int chime__journal_throttle(struct chime__backend *j)
{
    if (backlog_segments(j) <= CHIME__JOURNAL_BACKLOG_MAX)
        return 0;
    pthread_mutex_lock(&j->lock);
    j->throttled++;
    while (!j->error && !j->stopping && backlog_segments(j) > CHIME__JOURNAL_BACKLOG_MAX)
        pthread_cond_wait(&j->done, &j->lock);
    j->throttled--;
    int err = j->error;
    pthread_mutex_unlock(&j->lock);
    return err;
}

void chime__journal_sealed(void *ctx, uint64_t segment, uint64_t used)
{
    struct chime__backend *j = ctx;
    pthread_mutex_lock(&j->lock);
    if (segment > j->sealed) {
        j->sealed = segment;
        set_backlog(j);
        (void)chime__grow((void **)&j->used, &j->cused, j->nused, sizeof *j->used);
        if (j->nused < j->cused) { /* else the flusher reads the whole preallocated file */
            j->used[j->nused][0] = segment;
            j->used[j->nused++][1] = used;
        }
    }
    pthread_cond_signal(&j->work);
    pthread_mutex_unlock(&j->lock);
}

/* How many bytes of segment `number` hold records, if the log said so at the seal. Locked. */
static uint64_t used_of(struct chime__backend *j, uint64_t number)
{
    for (size_t i = 0; i < j->nused; i++)
        if (j->used[i][0] == number)
            return j->used[i][1];
    return UINT64_MAX;
}

/* Forget what the log said of segments up to `last`. Locked. */
static void forget_used(struct chime__backend *j, uint64_t last)
{
    size_t kept = 0;
    for (size_t i = 0; i < j->nused; i++)
        if (j->used[i][0] > last)
            memcpy(j->used[kept++], j->used[i], sizeof *j->used);
    j->nused = kept;
}

int chime__journal_runs(struct chime__backend *j, struct chime__run ***out, size_t *n)
{
    pthread_mutex_lock(&j->runs_lock);
    struct chime__run **copy = malloc((j->nruns ? j->nruns : 1) * sizeof *copy);
    if (!copy) {
        pthread_mutex_unlock(&j->runs_lock);
        return -ENOMEM;
    }
    for (size_t i = 0; i < j->nruns; i++) {
        copy[i] = j->runs[i];
        chime__run_ref(copy[i]);
    }
    *n = j->nruns;
    pthread_mutex_unlock(&j->runs_lock);
    *out = copy;
    return 0;
}

void chime__journal_runs_release(struct chime__run **runs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        chime__run_unref(runs[i]);
    free(runs);
}

/* Replace runs[first, first + count) (count may be 0: a new newest run) by r, in the list, and
 * drop the list's references to what it replaced. */
static int replace_runs(struct chime__backend *j, size_t first, size_t count, struct chime__run *r)
{
    struct chime__run **gone = count ? malloc(count * sizeof *gone) : NULL;
    if (count && !gone)
        return -ENOMEM;
    pthread_mutex_lock(&j->runs_lock);
    if (count == 0 && chime__grow((void **)&j->runs, &j->cruns, j->nruns, sizeof *j->runs)) {
        pthread_mutex_unlock(&j->runs_lock);
        return -ENOMEM;
    }
    if (count)
        memcpy(gone, j->runs + first, count * sizeof *gone);
    memmove(j->runs + first + 1, j->runs + first + count,
            (j->nruns - first - count) * sizeof *j->runs);
    j->runs[first] = r;
    j->nruns = j->nruns - count + 1;
    pthread_mutex_unlock(&j->runs_lock);
    for (size_t i = 0; i < count; i++)
        chime__run_unref(gone[i]);
    free(gone);
    return 0;
}

/* b holding at least `bytes`, its contents not kept: a buffer too small goes before its replacement
 * is allocated, so that both are never held at once. Return: 0; -ENOMEM (b then holds nothing). */
static int scratch_room(struct chime__scratch_buf *b, size_t bytes)
{
    if (b->cap >= bytes)
        return 0;
    free(b->p);
    b->p = malloc(bytes);
    b->cap = b->p ? bytes : 0;
    return b->p ? 0 : -ENOMEM;
}

void chime__journal_scratch_free(struct chime__backend *j)
{
    struct chime__flush_scratch *s = &j->scratch;
    for (size_t i = 0; i < s->nsegs; i++)
        free(s->segs[i].p);
    free(s->segs);
    free(s->recs);
    free(s->order.p);
    *s = (struct chime__flush_scratch){ NULL, 0, NULL, 0, { NULL, 0 } };
}

/* Buffers for `count` segments. Return: 0; -ENOMEM. */
static int scratch_segments(struct chime__flush_scratch *s, size_t count)
{
    if (s->nsegs >= count)
        return 0;
    struct chime__scratch_buf *grown = realloc(s->segs, count * sizeof *grown);
    if (!grown)
        return -ENOMEM;
    for (size_t i = s->nsegs; i < count; i++)
        grown[i] = (struct chime__scratch_buf){ NULL, 0 };
    s->segs = grown;
    s->nsegs = count;
    return 0;
}

/* Append r, flattened (up to 3 records), to the n records of s. */
static int flatten_into(struct chime__flush_scratch *s, size_t *n, const struct chime__rec *r)
{
    /* room for one more beyond n + 2: for n + 3 (doubling always suffices, by 3 at a time) */
    int err = chime__grow((void **)&s->recs, &s->recs_cap, *n + 2, sizeof *s->recs);
    if (!err)
        *n += (size_t)chime__rec_flatten(r, s->recs + *n);
    return err;
}

/* Read the first `want` bytes of a segment file (fewer if it is shorter) into b. Return: 0 and how
 * much it holds; an error. */
static int slurp(int dir, const char *name, uint64_t want, struct chime__scratch_buf *b,
                 uint64_t *size)
{
    int fd = chime__io_openat(dir, name, O_RDONLY, 0);
    if (fd < 0)
        return fd;
    int err = chime__io_size(fd, size);
    if (!err && *size > want)
        *size = want;
    if (!err)
        err = scratch_room(b, *size ? *size : 1);
    if (!err) {
        ssize_t got = chime__io_pread(fd, b->p, *size, 0);
        if (got < 0)
            err = (int)got;
        else
            *size = (uint64_t)got;
    }
    chime__io_close(fd);
    return err;
}

/* Decode a segment's records (its first `valid` bytes, where records end; UINT64_MAX: not known,
 * up to its zeros) into the n records of s, flattened; raise *next_version. buf holds its first
 * `size` bytes. */
static int gather(uint64_t number, const unsigned char *buf, uint64_t size, uint64_t valid,
                  struct chime__flush_scratch *s, size_t *n, uint64_t *next_version)
{
    struct chime__file_header h;
    if (size < CHIME__FILE_HEADER || chime__header_decode(buf, &h) || h.run || h.lo != number)
        return -EBADMSG;
    if (valid != UINT64_MAX && size < valid)
        return -EBADMSG; /* shorter than what was written to it */
    if (h.next_version > *next_version)
        *next_version = h.next_version;
    uint64_t limit = valid < size ? valid : size;
    for (uint64_t off = CHIME__FILE_HEADER; off < limit;) {
        struct chime__rec r;
        uint32_t len = 0;
        enum chime__decoded d = chime__rec_decode(buf + off, limit - off, &r, &len);
        if (d == CHIME__REC_END) {
            /* Zeros are the end only if nothing but zeros follows (format.md, "The reader's
             * rules"): zeros where records were written, or that data follows, are a lost write. */
            if (valid != UINT64_MAX)
                return -EBADMSG;
            for (uint64_t k = off; k < limit; k++)
                if (buf[k])
                    return -EBADMSG;
            break;
        }
        if (d != CHIME__REC_WHOLE)
            return -EBADMSG; /* replay passes `valid` for a torn segment; a sealed one is whole */
        if (r.type == CHIME__MARK) { /* a group commit's end (format.md): no timer, not in a run */
            if (!chime__mark_valid(&r, &h, off, NULL))
                return -EBADMSG;
            off += len;
            continue;
        }
        if (r.version >= *next_version)
            *next_version = r.version + 1;
        int err = flatten_into(s, n, &r);
        if (err)
            return err;
        off += len;
    }
    return 0;
}

int chime__journal_flush_segments(struct chime__backend *j, uint64_t first, size_t count,
                                  const uint64_t *valid)
{
    struct chime__flush_scratch *scratch = &j->scratch;
    struct chime__rec *recs = NULL, **order = NULL;
    size_t n = 0;
    uint64_t next_version = 1;
    int err = scratch_segments(scratch, count);
    for (size_t i = 0; !err && i < count; i++) {
        if (!valid[i])
            continue; /* nothing whole in it: not even read */
        char name[CHIME__NAME_MAX];
        uint64_t size;
        chime__wal_name(name, first + i);
        err = slurp(j->dir, name, valid[i], &scratch->segs[i], &size);
        if (!err)
            err = gather(first + i, scratch->segs[i].p, size, valid[i], scratch, &n, &next_version);
    }
    struct chime__run *run = NULL;
    if (!err)
        err = scratch_room(&scratch->order, (n ? n : 1) * sizeof *order);
    if (!err) {
        recs = scratch->recs;
        order = scratch->order.p;
        for (size_t i = 0; i < n; i++)
            order[i] = &recs[i];
        chime__rec_sort(order, n);
        struct chime__run_writer w;
        err = chime__run_begin(&w, j->dir, first, first + count - 1, next_version);
        if (!err) {
            struct chime__array_source src;
            struct chime__source *s = &src.base;
            struct chime__collapse c;
            chime__array_source_init(&src, order, n);
            chime__collapse_init(&c, CHIME__KEEP_RUN, j->nruns == 0, chime__run_emit, &w);
            err = chime__merge(&s, 1, &c);
            chime__collapse_free(&c);
            if (err)
                chime__run_abort(&w);
            else
                err = chime__run_commit(&w, &run);
        }
    }
    if (!err)
        err = replace_runs(j, j->nruns, 0, run);
    if (err) {
        if (run)
            chime__run_unref(run);
        return err;
    }
    /* The run is in place (J3): the segments go. */
    for (size_t i = 0; !err && i < count; i++) {
        char name[CHIME__NAME_MAX];
        chime__wal_name(name, first + i);
        err = chime__io_unlinkat(j->dir, name);
    }
    if (!err)
        err = chime__io_fsync(j->dir);
    atomic_fetch_add_explicit(&j->flushes, 1, memory_order_relaxed); /* a statistic */
    return err;
}

/* Merge runs[first, first + count) into one. Flusher thread only. */
static int merge_runs(struct chime__backend *j, size_t first, size_t count)
{
    struct chime__run **in = j->runs + first; /* the flusher alone changes the list (J4) */
    struct chime__run_source *srcs = calloc(count, sizeof *srcs);
    struct chime__source **ptrs = calloc(count, sizeof *ptrs);
    int err = srcs && ptrs ? 0 : -ENOMEM;
    uint64_t next_version = 0;
    size_t opened = 0;
    for (; !err && opened < count; opened++) {
        err = chime__run_source_all(&srcs[opened], in[opened]);
        ptrs[opened] = &srcs[opened].base;
        if (in[opened]->next_version > next_version)
            next_version = in[opened]->next_version;
    }
    if (err && opened)
        opened--; /* the last init failed: it holds nothing to free */
    struct chime__run *out = NULL;
    struct chime__run_writer w;
    if (!err)
        err = chime__run_begin(&w, j->dir, in[0]->lo, in[count - 1]->hi, next_version);
    if (!err) {
        struct chime__collapse c;
        chime__collapse_init(&c, CHIME__KEEP_RUN, first == 0, chime__run_emit, &w);
        err = chime__merge(ptrs, count, &c);
        chime__collapse_free(&c);
        if (err)
            chime__run_abort(&w);
        else
            err = chime__run_commit(&w, &out);
    }
    for (size_t i = 0; i < opened; i++)
        chime__run_source_free(&srcs[i]);
    free(srcs);
    free(ptrs);
    if (err)
        return err;
    /* The inputs' names, while the list still holds them; then the list, then the files. */
    char (*names)[CHIME__NAME_MAX] = malloc(count * sizeof *names);
    if (!names) {
        chime__run_unref(out);
        return -ENOMEM;
    }
    for (size_t i = 0; i < count; i++)
        chime__run_name(names[i], in[i]->lo, in[i]->hi);
    err = replace_runs(j, first, count, out);
    if (err)
        chime__run_unref(out);
    for (size_t i = 0; !err && i < count; i++)
        err = chime__io_unlinkat(j->dir, names[i]);
    if (!err)
        err = chime__io_fsync(j->dir);
    free(names);
    atomic_fetch_add_explicit(&j->merges, 1, memory_order_relaxed); /* a statistic */
    return err;
}

/* The size policy (see POLICY above). Flusher thread only. */
static int maybe_merge(struct chime__backend *j)
{
    size_t n = j->nruns;
    uint64_t total = 0, records = 0;
    for (size_t i = 0; i < n; i++) {
        total += j->runs[i]->size;
        records += j->runs[i]->records;
    }
    uint64_t live = chime__index_count(j->ix, CHIME__IX_PENDING) + chime__index_count(j->ix, CHIME__IX_DEAD);
    uint64_t per = records ? total / records : 128, live_bytes = live * per;
    chime__wal_set_segment_bytes(j->wal, live_bytes);
    if (n >= 2 && total > 2 * live_bytes + ((uint64_t)1 << 20))
        return merge_runs(j, 0, n);
    if (n <= MERGE_ABOVE_RUNS)
        return 0;
    size_t k = 2;
    uint64_t newest = j->runs[n - 1]->size + j->runs[n - 2]->size;
    while (k < n && newest * 2 >= j->runs[n - k - 1]->size) {
        newest += j->runs[n - k - 1]->size;
        k++;
    }
    return merge_runs(j, n - k, k);
}

#define FLUSH_BATCH_BYTES ((uint64_t)32 << 20) /* segment bytes read into one flush at most */
#define FLUSH_BATCH_COUNT 64

/* The log's next segment, created ahead of time. No space or no descriptor is not sticky: the
 * writer tries again when it needs the segment, and fails for good then if it must. -EIO is: a
 * device error, perhaps from the directory's fsync, which reports it once and may then succeed
 * for the next caller (found in review: the writer's own creation could then pass over it). */
static void prepare_segment(struct chime__backend *j)
{
    int err = chime__wal_prepare(j->wal);
    if (err == -EIO)
        chime__journal_fail(j, err);
}

static void *flusher_main(void *arg)
{
    struct chime__backend *j = arg;
    int err = maybe_merge(j); /* what earlier lives (or crashes) left, before anything new */
    if (err)
        chime__journal_fail(j, err);
    prepare_segment(j);
    uint64_t valid[FLUSH_BATCH_COUNT];
    pthread_mutex_lock(&j->lock);
    while (!j->stopping && !j->error) {
        /* relaxed: set before the asker takes j->lock to signal, read here under it */
        if (atomic_exchange_explicit(&j->index_asked, 0, memory_order_relaxed)) {
            pthread_mutex_unlock(&j->lock); /* stripe locks come before j->lock */
            err = chime__index_flush(j->ix, 0);
            if (err)
                chime__journal_fail(j, err);
            pthread_mutex_lock(&j->lock);
            if (j->stopping || j->error)
                break;
            /* On to the segments, if any: puts that keep asking must not starve them. */
        }
        if (j->sealed <= j->flushed && j->scratch.nsegs) { /* nothing left to do: SCRATCH */
            /* j->work's clock (journal.c) */
            struct timespec until = chime__deadline_after(CLOCK_MONOTONIC, SCRATCH_KEEP_NS);
            /* A wake-up (work, an index flush asked, a stop) before the time is up keeps them. */
            if (!atomic_load_explicit(&j->index_asked, memory_order_relaxed) &&
                pthread_cond_timedwait(&j->work, &j->lock, &until) == ETIMEDOUT &&
                j->sealed <= j->flushed) {
                pthread_mutex_unlock(&j->lock);
                chime__journal_scratch_free(j);
                /* release: a test that sees the count sees the buffers gone */
                atomic_fetch_add_explicit(&j->scratch_frees, 1, memory_order_release);
                pthread_mutex_lock(&j->lock);
            }
            continue;
        }
        if (j->sealed <= j->flushed) {
            /* An ask made while j->lock was released above signalled no one: look before waiting. */
            if (!atomic_load_explicit(&j->index_asked, memory_order_relaxed))
                pthread_cond_wait(&j->work, &j->lock);
            continue;
        }
        /* Every sealed segment up to the budget goes into one run: a flush's fixed costs (a run
         * created, synced, renamed; the directory synced twice) are paid once for them all. */
        uint64_t first = j->flushed + 1, bytes = 0;
        size_t count = 0;
        while (count < FLUSH_BATCH_COUNT && first + count <= j->sealed &&
               (count == 0 || bytes < FLUSH_BATCH_BYTES)) {
            valid[count] = used_of(j, first + count);
            bytes += valid[count] == UINT64_MAX ? FLUSH_BATCH_BYTES : valid[count];
            count++;
        }
        pthread_mutex_unlock(&j->lock);
        err = chime__journal_flush_segments(j, first, count, valid);
        if (!err) {
            pthread_mutex_lock(&j->lock);
            j->flushed = first + count - 1;
            set_backlog(j);
            forget_used(j, j->flushed);
            pthread_cond_broadcast(&j->done);
            pthread_mutex_unlock(&j->lock);
            err = maybe_merge(j);
        }
        if (!err)
            prepare_segment(j);
        if (err)
            chime__journal_fail(j, err);
        pthread_mutex_lock(&j->lock);
    }
    pthread_mutex_unlock(&j->lock);
    return NULL;
}

void chime__journal_ask_index_flush(struct chime__backend *j)
{
    /* relaxed: the flusher reads it under j->lock, which this signal takes after the store */
    if (atomic_exchange_explicit(&j->index_asked, 1, memory_order_relaxed))
        return; /* asked already; the flusher has not begun on it */
    pthread_mutex_lock(&j->lock);
    pthread_cond_signal(&j->work);
    pthread_mutex_unlock(&j->lock);
}

int chime__journal_start_flusher(struct chime__backend *j)
{
    if (pthread_create(&j->flusher, NULL, flusher_main, j) != 0)
        return -ECHILD;
    j->flusher_started = 1;
    return 0;
}

void chime__journal_stop_flusher(struct chime__backend *j)
{
    if (!j->flusher_started)
        return;
    pthread_mutex_lock(&j->lock);
    j->stopping = 1;
    pthread_cond_broadcast(&j->work);
    pthread_cond_broadcast(&j->done);
    pthread_mutex_unlock(&j->lock);
    pthread_join(j->flusher, NULL);
    j->flusher_started = 0;
}

int chime__journal_flush_all(struct chime__backend *j)
{
    uint64_t sealed, used;
    int err = chime__wal_seal(j->wal, &sealed, &used);
    if (err)
        return err;
    /* The segment counts as sealed here, where the log's callback for it may not have come yet, so
     * its `used` goes with it: a segment the flusher takes without it is read to its end, where
     * zeros read as unused space, and a lost write of its last commit would go unseen (found in
     * review). The callback, when it comes, finds the segment sealed and does nothing. */
    chime__journal_sealed(j, sealed, used);
    pthread_mutex_lock(&j->lock);
    while (!j->error && !j->stopping && j->flushed < sealed)
        pthread_cond_wait(&j->done, &j->lock);
    err = j->flushed >= sealed ? 0 : j->error ? j->error : -ESHUTDOWN;
    pthread_mutex_unlock(&j->lock);
    return err;
}
