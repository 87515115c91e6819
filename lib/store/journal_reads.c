/* SPDX-License-Identifier: MIT */
/*
 * The embedded journal's reads (journal.h): loads of the timers due in a range and the dead-letter
 * listing, each a merge of every run collapsed to its live records, after a flush of the log; and
 * one dead letter read by its version ahead of a requeue, from the runs' indexes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store/journal.h"
#include "store/merge.h"

/* The live records a load or listing hands over, as timers. */
struct handover {
    chime__timer_fn *fn;
    void *ctx;
};

static int hand_over(void *ctx, const struct chime__rec *r)
{
    struct handover *h = ctx;
    struct chime__timer t = { .key = r->key, .key_len = r->key_len, .payload = r->payload,
                              .payload_len = r->payload_len, .due_ns = r->due,
                              .attempt = r->attempt, .ref = { r->version, 0 } };
    return h->fn(h->ctx, &t);
}

/* Merge, collapsed to live records, the pending timers due in [from, until) of every run, or
 * (dead) the dead letters, into emit. */
static int read_runs(struct chime__backend *j, int dead, uint64_t from, uint64_t until,
                     chime__emit_fn *emit, void *ctx)
{
    struct chime__run **runs;
    size_t n;
    int err = chime__journal_runs(j, &runs, &n);
    if (err)
        return err;
    struct chime__run_source *srcs = calloc(n ? n : 1, sizeof *srcs);
    struct chime__source **ptrs = calloc(n ? n : 1, sizeof *ptrs);
    size_t opened = 0;
    err = srcs && ptrs ? 0 : -ENOMEM;
    for (; !err && opened < n; opened++) {
        err = dead ? chime__run_source_dead(&srcs[opened], runs[opened])
                   : chime__run_source_pending(&srcs[opened], runs[opened], from, until);
        ptrs[opened] = &srcs[opened].base;
    }
    if (err && opened)
        opened--;
    if (!err) {
        struct chime__collapse c;
        chime__collapse_init(&c, CHIME__KEEP_LIVE, 1, emit, ctx);
        err = chime__merge(ptrs, n, &c);
        chime__collapse_free(&c);
    }
    for (size_t i = 0; i < opened; i++)
        chime__run_source_free(&srcs[i]);
    free(srcs);
    free(ptrs);
    chime__journal_runs_release(runs, n);
    return err;
}

int chime__journal_load(struct chime__backend *j, uint64_t from, uint64_t until,
                        chime__timer_fn *fn, void *ctx)
{
    int err = chime__journal_flush_all(j); /* every record appended so far is in a run now */
    if (err)
        return err;
    struct handover h = { .fn = fn, .ctx = ctx };
    return read_runs(j, 0, from, until, hand_over, &h);
}

int chime__journal_dead_list(struct chime__backend *j, chime__timer_fn *fn, void *ctx)
{
    int err = chime__journal_flush_all(j);
    if (err)
        return err;
    struct handover h = { .fn = fn, .ctx = ctx };
    return read_runs(j, 1, 0, 0, hand_over, &h);
}

/* chime__run_find_dead's callback: keep a copy of the dead letter's payload in the chime__dead at
 * ctx. */
static int copy_dead(void *ctx, const struct chime__rec *r)
{
    struct chime__dead *d = ctx;
    d->payload = malloc(r->payload_len);
    if (!d->payload)
        return -ENOMEM;
    memcpy(d->payload, r->payload, r->payload_len);
    d->payload_len = r->payload_len;
    return 1; /* found: stop */
}

/* The key's dead letter version in the index (0: none), or an error. */
static int dead_version(struct chime__backend *j, const struct chime__ikey *k, uint64_t *dead)
{
    uint64_t unused;
    *dead = 0;
    chime__index_lock(j->ix, k);
    int err = chime__journal_error(j);
    int had = err ? 0 : chime__journal_lookup(j, CHIME__IX_DEAD, k, dead, &unused);
    chime__index_unlock(j->ix, k);
    return err ? err : had < 0 ? had : 0;
}

/* Whether a run holds d->version's DEAD record (its payload copied into d). Return: 1, 0, or an
 * error. */
static int find_in_runs(struct chime__backend *j, struct chime__dead *d)
{
    struct chime__run **runs;
    size_t n;
    int err = chime__journal_runs(j, &runs, &n);
    if (err)
        return err;
    for (size_t i = n; !err && i-- > 0;) /* the newest first: a requeue reads a recent burial */
        err = chime__run_find_dead(runs[i], d->version, copy_dead, d);
    chime__journal_runs_release(runs, n);
    return err;
}

/* The key's dead letter, read outside every lock of the logic (backend.h, dead_read): its version
 * from the index, its payload from the runs (each run's index of dead letters by version: about
 * 64 KiB read per run), and only if none holds it, from the runs again after a flush of the log.
 * Flushing first, every requeue paid a run's write and syncs, and read every dead letter: 2.3 to
 * 8.6 ms each with 10^3 to 5*10^4 of them, 10 to 15 us now (the NEWS entry has the probe). The
 * flush once held up a whole stripe of keys (found in review): it is made with no lock held. The
 * key's calls go on meanwhile, and a drop or requeue then a merge can take it out of the runs: a
 * search after the flush that misses it reads the key's dead letter of now if the index changed;
 * only a version it still names that no run holds is damage. */
int chime__journal_dead_read(struct chime__backend *j, const void *key, size_t key_len,
                             struct chime__dead *out)
{
    struct chime__ikey k;
    chime__index_key(j->ix, key, key_len, &k);
    *out = (struct chime__dead){ 0, NULL, 0 };
    uint64_t dead = 0, now = 0;
    int err = dead_version(j, &k, &dead), flushed = 0;
    while (!err && dead) {
        struct chime__dead got = { dead, NULL, 0 };
        err = find_in_runs(j, &got);
        if (err == 1) {
            *out = got;
            return 0;
        }
        free(got.payload);
        if (!err && !flushed) {
            flushed = 1; /* in the log still: flush it, and look again */
            err = chime__journal_flush_all(j);
        } else if (!err && !(err = dead_version(j, &k, &now))) {
            if (now == dead)
                return -EBADMSG; /* the index names a dead letter no run holds */
            dead = now;
            flushed = 0;
        }
    }
    return err;
}
