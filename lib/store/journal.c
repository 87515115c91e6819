/* SPDX-License-Identifier: MIT */
/*
 * The embedded journal: the backend operations (backend.h) over the log, the runs and the key index
 * (journal.h explains the pieces and their invariants).
 *
 * Each change to a key is one record, appended with the key's index stripe locked (J2): a put that
 * replaces a pending timer names it in the same record (kill_version), so there is no instant, on
 * disk or after a crash, at which a key has two pending timers or a replaced one lost its successor.
 * With CHIME_SYNC_EACH the caller then waits for the group commit, with the stripe unlocked.
 */
#define _GNU_SOURCE /* pthread_condattr_setclock */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "store/io.h"
#include "store/journal.h"
#include "store/merge.h"

/* ---- the journal's sticky error (journal.h) ---- */

/* The journal's part of a failure. The log's writer calls only this (wal_failed), with its lock. */
static void journal_failed(struct chime__backend *j, int err)
{
    pthread_mutex_lock(&j->lock);
    /* The logic hears of the failure before any caller can see it (backend.h, D5: no handler may
     * start once a call has returned the error), so the sink is told under the lock that guards
     * j->error, before it is set. The sink only records the error; it does not call the journal. */
    if (!j->failed_told && j->sink.failed)
        j->sink.failed(j->sink.ctx, err);
    j->failed_told = 1;
    if (!j->error)
        j->error = err;
    /* release: pairs with the acquire load in chime__journal_error, so a caller that sees the error
     * also sees the sink told before it (D5). */
    atomic_store_explicit(&j->error_seen, j->error, memory_order_release);
    pthread_cond_broadcast(&j->done);
    pthread_cond_broadcast(&j->work);
    pthread_mutex_unlock(&j->lock);
}

void chime__journal_fail(struct chime__backend *j, int err)
{
    journal_failed(j, err);
    /* Then the log, which stops reporting anything durable, even the batch its writer holds
     * (wal_writer.c, FAILURE; found in review: a put returned 0 after the store failed). */
    if (j->wal)
        chime__wal_fail(j->wal, err);
}

int chime__journal_error(struct chime__backend *j)
{
    int err = j->wal ? chime__wal_error(j->wal) : 0;
    if (err)
        return err;
    /* acquire: pairs with the release store in chime__journal_fail. Every put and cancel asks this,
     * so it takes no lock. */
    return atomic_load_explicit(&j->error_seen, memory_order_acquire);
}

/* ---- the operations ---- */

static int sync_each(const struct chime__backend *j)
{
    return j->cfg->sync != CHIME_SYNC_INTERVAL;
}

static int j_wait(struct chime__backend *j, uint64_t ticket)
{
    return ticket ? chime__wal_wait(j->wal, ticket) : 0; /* a ticket is the record's end LSN */
}

/* An index error (reading or writing a table's file, growing a table): the index and the log could
 * disagree from here on, so the journal fails (as for a failed write of the log). */
static int index_failed(struct chime__backend *j, int err)
{
    if (err)
        chime__journal_fail(j, err);
    return err;
}

/* A table that could not grow, before the record is appended: the table is as it was (index.h,
 * reserve), so the index and the log still agree. Out of memory is then this call's error alone, as
 * for the store's own allocations in a put (chime_store.h: -ENOMEM is sticky only where a recorded
 * timer would go unfired); the journal does not fail for it (found in review: it did, and every
 * later call returned -ENOMEM until a reopen). A device's error (-EIO, -ENOSPC) still fails it. */
static int index_grow_failed(struct chime__backend *j, int err)
{
    return err == -ENOMEM ? err : index_failed(j, err);
}

/* Unlock k's stripe after a change, and ask the flusher for the index's work if it is wanted: write
 * batches filling up (a put then rarely finds its batch full and writes it itself), or a table that
 * deletions have emptied enough to shrink (index.c, SHRINKING). */
static void unlock_key(struct chime__backend *j, const struct chime__ikey *k)
{
    chime__index_unlock(j->ix, k);
    if (chime__index_flush_wanted(j->ix))
        chime__journal_ask_index_flush(j);
}

int chime__journal_lookup(struct chime__backend *j, enum chime__index_table t,
                          const struct chime__ikey *k, uint64_t *version, uint64_t *due)
{
    int found = chime__index_get(j->ix, t, k, version, due);
    return found < 0 ? index_failed(j, found) : found;
}

static int j_admit(struct chime__backend *j)
{
    return chime__journal_throttle(j); /* a user's call; a retry (the logic's put) is not held */
}

static int j_put(struct chime__backend *j, const struct chime__put *p, struct chime__put_result *res,
                 uint64_t *ticket)
{
    struct chime__ikey k;
    struct chime__islot at = { 0, 0, 0, 0, 0 };
    chime__index_key(j->ix, p->key, p->key_len, &k);
    chime__index_lock(j->ix, &k);
    uint64_t lsn = 0;
    int err = chime__journal_error(j);
    if (!err) /* grow the table first, if it must: once the record is in the log, nothing may fail */
        err = index_grow_failed(j, chime__index_reserve(j->ix, CHIME__IX_PENDING, &k));
    if (!err) /* one probe: the slot found is the one written after the append */
        err = index_failed(j, chime__index_find(j->ix, CHIME__IX_PENDING, &k, &at));
    uint64_t old = at.version;
    if (!err && p->if_version && (!at.found || old != p->if_version))
        err = -ESTALE;
    struct chime__rec r = { .type = CHIME__PUT, .key_len = (uint16_t)p->key_len, .key = p->key,
                            .payload_len = (uint32_t)p->payload_len, .payload = p->payload,
                            .due = p->due_ns, .attempt = p->attempt,
                            .kill_version = at.found ? old : 0, .kill_due = at.found ? at.due : 0 };
    if (!err)
        err = chime__wal_append(j->wal, &r, 1, &lsn);
    if (!err)
        err = index_failed(j, chime__index_write(j->ix, CHIME__IX_PENDING, &k, &at, r.version,
                                                 p->due_ns));
    unlock_key(j, &k);
    if (err)
        return err;
    *res = (struct chime__put_result){ .ref = { r.version, 0 },
                                       .replaced = { at.found ? old : 0, 0 }, .owned = 1 };
    *ticket = lsn;
    return 0;
}

static int j_cancel(struct chime__backend *j, const void *key, size_t key_len, uint64_t firing,
                    struct chime__ref *victim, uint64_t *ticket)
{
    struct chime__ikey k;
    chime__index_key(j->ix, key, key_len, &k);
    chime__index_lock(j->ix, &k);
    struct chime__islot at = { 0, 0, 0, 0, 0 };
    uint64_t lsn = 0;
    int err = chime__journal_error(j);
    /* One probe, the only read: the slot found is the one deleted after the append, which reads
     * and writes nothing (index.h), so nothing can fail once the record is in the log. */
    if (!err)
        err = index_failed(j, chime__index_find(j->ix, CHIME__IX_PENDING, &k, &at));
    uint64_t v = at.version, due = at.due;
    err = err ? err : at.found ? 0 : -ENOENT;
    if (!err && firing && v == firing)
        err = -EINPROGRESS; /* its firing has begun: the logic holds it (backend.h, cancel) */
    struct chime__rec r = { .type = CHIME__KILL, .key_len = (uint16_t)key_len, .key = key,
                            .version = v, .due = due };
    if (!err)
        err = chime__wal_append(j->wal, &r, 1, &lsn);
    if (!err)
        chime__index_del_at(j->ix, CHIME__IX_PENDING, &k, &at);
    unlock_key(j, &k);
    if (err)
        return err;
    *victim = (struct chime__ref){ v, 0 };
    *ticket = lsn;
    return 0;
}

static int j_fire(struct chime__backend *j, struct chime__firing *f, size_t n)
{
    /* The logic fires only versions it holds, and nobody else changes them meanwhile: every status
     * is 0. A cancel of a version whose firing began is refused because the logic names it (the
     * `firing` argument of cancel), so the index needs no mark of its own. */
    struct chime__rec stack[64], *recs = n <= 64 ? stack : malloc(n * sizeof *recs);
    if (!recs)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        recs[i] = (struct chime__rec){ .type = CHIME__FIRE, .key_len = (uint16_t)f[i].key_len,
                                       .key = f[i].key, .version = f[i].ref.version,
                                       .due = f[i].due_ns, .attempt = f[i].attempt };
        f[i].status = 0;
    }
    uint64_t lsn = 0;
    int err = chime__journal_error(j);
    if (!err)
        err = chime__wal_append(j->wal, recs, n, &lsn);
    if (recs != stack)
        free(recs);
    return err ? err : chime__wal_wait(j->wal, lsn); /* D2: durable before any handler starts */
}

static int j_ack(struct chime__backend *j, const struct chime__timer *t, int current)
{
    struct chime__ikey k;
    struct chime__islot at;
    chime__index_key(j->ix, t->key, t->key_len, &k);
    chime__index_lock(j->ix, &k);
    uint64_t lsn;
    int err = chime__journal_error(j);
    /* The deletion after the append reads and writes nothing (index.h): it cannot fail.
     * One process at a time holds the journal, so when the logic says t->ref is still current it
     * is the key's live entry, and the index may find its slot without reading it (index.h). */
    if (!err && current)
        err = index_failed(j, chime__index_find_live(j->ix, CHIME__IX_PENDING, &k, t->ref.version,
                                                     t->due_ns, &at));
    else if (!err)
        err = index_failed(j, chime__index_find(j->ix, CHIME__IX_PENDING, &k, &at));
    if (!err && at.found && at.version == t->ref.version) { /* else a put replaced it: nothing */
        struct chime__rec r = { .type = CHIME__KILL, .key_len = (uint16_t)t->key_len,
                                .key = t->key, .version = t->ref.version, .due = at.due };
        err = chime__wal_append(j->wal, &r, 1, &lsn);
        if (!err)
            chime__index_del_at(j->ix, CHIME__IX_PENDING, &k, &at);
    }
    unlock_key(j, &k);
    return err; /* D3: not waited for */
}

static int j_bury(struct chime__backend *j, const struct chime__timer *t)
{
    struct chime__ikey k;
    chime__index_key(j->ix, t->key, t->key_len, &k);
    chime__index_lock(j->ix, &k);
    struct chime__islot pend, dead;
    uint64_t lsn;
    int err = chime__journal_error(j);
    /* Every read, growth and batch write first: once the record is in the log, nothing may fail
     * (the deletion reads and writes nothing: index.h). */
    if (!err)
        err = index_failed(j, chime__index_find(j->ix, CHIME__IX_PENDING, &k, &pend));
    if (!err && pend.found && pend.version == t->ref.version) {
        err = index_grow_failed(j, chime__index_reserve(j->ix, CHIME__IX_DEAD, &k));
        if (!err)
            err = index_failed(j, chime__index_find(j->ix, CHIME__IX_DEAD, &k, &dead));
        struct chime__rec r = { .type = CHIME__DEAD, .key_len = (uint16_t)t->key_len,
                                .key = t->key, .payload_len = (uint32_t)t->payload_len,
                                .payload = t->payload, .due = t->due_ns, .attempt = t->attempt,
                                .kill_version = pend.version, .kill_due = pend.due,
                                .kill_dead = !err && dead.found ? dead.version : 0 };
        if (!err)
            err = chime__wal_append(j->wal, &r, 1, &lsn);
        if (!err)
            chime__index_del_at(j->ix, CHIME__IX_PENDING, &k, &pend);
        if (!err)
            err = index_failed(j, chime__index_write(j->ix, CHIME__IX_DEAD, &k, &dead, r.version,
                                                     0));
    }
    unlock_key(j, &k);
    return err; /* D3: not waited for */
}

static int j_dead_requeue(struct chime__backend *j, const void *key, size_t key_len,
                          uint64_t due_ns, const struct chime__dead *seen,
                          struct chime__put_result *res, chime__timer_fn *fn, void *ctx,
                          uint64_t *ticket)
{
    struct chime__ikey k; /* `seen` is j_dead_read's (the journal has one) */
    chime__index_key(j->ix, key, key_len, &k);
    uint64_t lsn = 0;
    chime__index_lock(j->ix, &k);
    int err = chime__journal_error(j);
    /* Every read, growth and batch write first: once the record is in the log, nothing may fail. */
    struct chime__islot pat = { 0, 0, 0, 0, 0 }, dat = { 0, 0, 0, 0, 0 };
    if (!err)
        err = index_grow_failed(j, chime__index_reserve(j->ix, CHIME__IX_PENDING, &k));
    if (!err)
        err = index_failed(j, chime__index_find(j->ix, CHIME__IX_PENDING, &k, &pat));
    if (!err)
        err = index_failed(j, chime__index_find(j->ix, CHIME__IX_DEAD, &k, &dat));
    /* The dead letter read is still the key's (a bury, drop or requeue of the key may have come
     * between: the logic then reads it again). Versions only grow, so the same version is the
     * same record, with the payload read. */
    if (!err && (!dat.found || dat.version != seen->version))
        err = dat.found ? -EAGAIN : -ENOENT;
    struct chime__rec r = { .type = CHIME__PUT, .key_len = (uint16_t)key_len, .key = key,
                            .payload_len = (uint32_t)seen->payload_len, .payload = seen->payload,
                            .due = due_ns, .kill_version = pat.found ? pat.version : 0,
                            .kill_due = pat.found ? pat.due : 0, .kill_dead = dat.version };
    if (!err)
        err = chime__wal_append(j->wal, &r, 1, &lsn);
    if (!err)
        err = index_failed(j, chime__index_write(j->ix, CHIME__IX_PENDING, &k, &pat, r.version,
                                                 due_ns));
    if (!err)
        chime__index_del_at(j->ix, CHIME__IX_DEAD, &k, &dat);
    unlock_key(j, &k);
    if (!err) {
        *res = (struct chime__put_result){ .ref = { r.version, 0 },
                                           .replaced = { pat.found ? pat.version : 0, 0 },
                                           .owned = 1 };
        struct chime__timer t = { .key = key, .key_len = key_len, .payload = seen->payload,
                                  .payload_len = seen->payload_len, .due_ns = due_ns,
                                  .ref = res->ref };
        fn(ctx, &t);
        *ticket = lsn;
    }
    return err;
}

static int j_dead_drop(struct chime__backend *j, const void *key, size_t key_len,
                       uint64_t *ticket)
{
    struct chime__ikey k;
    chime__index_key(j->ix, key, key_len, &k);
    chime__index_lock(j->ix, &k);
    struct chime__islot at = { 0, 0, 0, 0, 0 };
    uint64_t lsn = 0;
    int err = chime__journal_error(j);
    /* The read first; the deletion after the append reads and writes nothing (index.h). */
    if (!err)
        err = index_failed(j, chime__index_find(j->ix, CHIME__IX_DEAD, &k, &at));
    if (!err && !at.found)
        err = -ENOENT;
    struct chime__rec r = { .type = CHIME__KILL, .flags = CHIME__KILL_DEAD,
                            .key_len = (uint16_t)key_len, .key = key, .version = at.version };
    if (!err)
        err = chime__wal_append(j->wal, &r, 1, &lsn);
    if (!err)
        chime__index_del_at(j->ix, CHIME__IX_DEAD, &k, &at);
    unlock_key(j, &k);
    *ticket = lsn;
    return err;
}

static int j_sync(struct chime__backend *j)
{
    int err = chime__journal_error(j);
    return err ? err : chime__wal_sync(j->wal);
}

static void j_stats(struct chime__backend *j, struct chime__backend_stats *out)
{
    out->pending = chime__index_count(j->ix, CHIME__IX_PENDING);
    out->dead = chime__index_count(j->ix, CHIME__IX_DEAD);
    out->bytes = chime__io_dir_bytes(j->dir);
}

static void wal_failed(void *ctx, int err)
{
    journal_failed(ctx, err); /* the log fails itself (it holds its lock here) */
}

static void free_journal(struct chime__backend *j)
{
    for (size_t i = 0; i < j->nruns; i++)
        chime__run_unref(j->runs[i]);
    free(j->runs);
    free(j->used);
    chime__journal_scratch_free(j);
    chime__index_free(j->ix);
    if (j->lock_fd >= 0)
        chime__io_close(j->lock_fd); /* releases the flock */
    if (j->dir >= 0)
        chime__io_close(j->dir);
    pthread_cond_destroy(&j->work);
    pthread_cond_destroy(&j->done);
    pthread_mutex_destroy(&j->lock);
    pthread_mutex_destroy(&j->runs_lock);
    free(j);
}

static int j_open(struct chime__backend **out, const struct chime_store_config *cfg,
                  const struct chime__sink *sink)
{
    struct chime__backend *j = calloc(1, sizeof *j);
    if (!j)
        return -ENOMEM;
    j->cfg = cfg;
    j->sink = *sink;
    j->dir = j->lock_fd = -1;
    pthread_mutex_init(&j->lock, NULL);
    pthread_mutex_init(&j->runs_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the flusher's idle wait (compact.c, SCRATCH) */
    pthread_cond_init(&j->work, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&j->done, NULL);
    atomic_init(&j->flushes, 0);
    atomic_init(&j->backlog, 0);
    atomic_init(&j->error_seen, 0);
    atomic_init(&j->merges, 0);
    atomic_init(&j->scratch_frees, 0);

    int err = chime__io_make_dir(cfg->path);
    if (!err) {
        j->dir = chime__io_open_dir(cfg->path);
        err = j->dir < 0 ? j->dir : 0;
    }
    if (!err) {
        j->lock_fd = chime__io_openat(j->dir, "LOCK", O_CREAT | O_RDWR, 0644);
        err = j->lock_fd < 0 ? j->lock_fd : chime__io_lock(j->lock_fd);
    }
    if (!err)
        err = chime__index_open(&j->ix, j->dir);
    uint64_t first_segment = 1, next_version = 1;
    if (!err)
        err = chime__journal_replay(j, &first_segment, &next_version);
    chime__journal_scratch_free(j); /* what replay's flushes kept (compact.c, SCRATCH) */
    if (!err) {
        j->sealed = j->flushed = first_segment - 1;
        struct chime__wal_config wc = {
            .dir = j->dir, .segment = first_segment, .next_version = next_version,
            .sync_each = sync_each(j), .interval_ns = cfg->sync_interval_ns,
            .segment_bytes = 0, .sealed = chime__journal_sealed, .failed = wal_failed, .ctx = j };
        err = chime__wal_open(&j->wal, &wc);
    }
    if (!err) {
        err = chime__journal_start_flusher(j);
        if (err)
            chime__wal_close(j->wal);
    }
    if (err) { /* replay leaves the directory consistent wherever it stopped: nothing to undo */
        free_journal(j);
        return err;
    }
    *out = j;
    return 0;
}

static int j_close(struct chime__backend *j)
{
    chime__journal_stop_flusher(j); /* first: it calls into the log */
    int err = chime__wal_close(j->wal); /* commits what was appended, stops the writer */
    if (!err)
        err = j->error;
    free_journal(j);
    return err;
}

const struct chime__backend_ops chime__journal_ops = {
    .name = "journal",
    .fire_batch = 4096, /* fire + ack, 10^6 due at once: about 1.07x 1024's (docs/perf.md) */
    .open = j_open,
    .admit = j_admit,
    .put = j_put,
    .cancel = j_cancel,
    .wait = j_wait,
    .fire = j_fire,
    .ack = j_ack,
    .bury = j_bury,
    .load = chime__journal_load,
    .dead_list = chime__journal_dead_list,
    .dead_read = chime__journal_dead_read,
    .dead_requeue = j_dead_requeue,
    .dead_drop = j_dead_drop,
    .sync = j_sync,
    .fence_valid = NULL,
    .stats = j_stats,
    .close = j_close,
};
