/* SPDX-License-Identifier: MIT */
/*
 * The embedded journal, the store's default backend: what its three files share. journal.c holds
 * the backend operations, replay.c recovery at open, compact.c the flusher thread (segments into runs,
 * runs merged). docs/design.md ("The journal") explains the design; format.md is the format.
 *
 * THE PIECES
 *   wal       the write-ahead log: every change is one record appended there (wal.c, wal_writer.c)
 *   runs      immutable, due-ordered files holding what sealed segments held (run.c), oldest first
 *   index     key -> pending version and due time, key -> dead letter (index.c); rebuilt at open
 *
 * INVARIANTS
 *   J1 The journal's content (format.md, "Files") is the runs in `runs` plus the segments numbered
 *      above `flushed`; the index agrees with it: a key is in the index exactly when the content
 *      holds a live version of it, with that version.
 *   J2 A change is appended to the log while its key's index stripe is locked, and the index is
 *      updated before the lock is released: the log's order for one key is the index's order.
 *   J3 Only sealed segments are flushed, and a sealed segment is wholly durable; a run replaces what
 *      it covers only once it is synced and renamed, and its directory synced. So everything a run
 *      leaves out (a PUT together with its KILL) was durable on both sides: a flush or merge never
 *      forgets a durable change whose ending was not itself durable.
 *   J4 Runs are touched by the flusher thread alone; readers (load, listings) take references to a
 *      snapshot of the list under runs_lock, so a merge that replaces runs never pulls a file from
 *      under a reader.
 */
#ifndef CHIME_STORE_JOURNAL_H
#define CHIME_STORE_JOURNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "store/backend.h"
#include "store/index.h"
#include "store/run.h"
#include "store/wal.h"

/* A buffer kept from one flush to the next (compact.c, SCRATCH). */
struct chime__scratch_buf {
    void *p;
    size_t cap; /* bytes */
};

struct chime__flush_scratch {
    struct chime__scratch_buf *segs; /* a buffer per segment read by one flush */
    size_t nsegs;
    struct chime__rec *recs;         /* the segments' records, flattened (grow.h) */
    size_t recs_cap;
    struct chime__scratch_buf order;
};

struct chime__backend {
    const struct chime_store_config *cfg;
    struct chime__sink sink;
    int dir;                   /* the journal's directory */
    int lock_fd;               /* LOCK, flock'ed */
    struct chime__wal *wal;
    struct chime__index *ix;

    pthread_mutex_t runs_lock; /* the list itself; the flusher alone changes it (J4) */
    struct chime__run **runs;  /* oldest (lowest lo) first */
    size_t nruns, cruns;

    pthread_t flusher;
    int flusher_started;
    pthread_mutex_t lock;      /* what follows */
    pthread_cond_t work;       /* the flusher waits here */
    pthread_cond_t done;       /* flush_all waits here */
    uint64_t sealed;           /* the last segment the log sealed */
    uint64_t flushed;          /* the last segment turned into a run */
    uint64_t (*used)[2];       /* sealed segments not yet flushed: {number, bytes holding records} */
    size_t nused, cused;
    int stopping;
    int error;                 /* sticky: a flush or merge failed (the log has its own) */
    int failed_told;           /* sink->failed was called */
    uint64_t throttled;        /* callers held back by chime__journal_throttle now (for tests) */

    _Atomic int error_seen;       /* error, for the put path's check without the lock (journal.c) */
    _Atomic int index_asked;      /* the index's write batches want the flusher (compact.c) */
    _Atomic uint64_t backlog;     /* sealed segments not yet flushed (= sealed - flushed) */
    _Atomic uint64_t flushes, merges; /* statistics, for tests and benchmarks */

    struct chime__flush_scratch scratch; /* the flusher's, or open's before it starts (SCRATCH) */
    _Atomic uint64_t scratch_frees;      /* times the flusher gave them back once idle (tests) */
};

/* replay.c: recover the directory into j (runs, index, next version, segments flushed). On return
 * *first_segment is the number the log starts at and *next_version the version it starts at. */
int chime__journal_replay(struct chime__backend *j, uint64_t *first_segment,
                          uint64_t *next_version);

/* compact.c */
/* Turn the consecutive segments first .. first + count - 1 into one run, and delete them; valid[i]
 * bytes of segment first + i hold its records (all of it: UINT64_MAX; none, and it is not read: 0). */
int chime__journal_flush_segments(struct chime__backend *j, uint64_t first, size_t count,
                                  const uint64_t *valid);
/* Give back the buffers flushes keep from one to the next (compact.c, SCRATCH). Flusher thread, or
 * while it does not run. */
void chime__journal_scratch_free(struct chime__backend *j);
int chime__journal_start_flusher(struct chime__backend *j);
void chime__journal_stop_flusher(struct chime__backend *j);
/* The log's sealed callback: note how much of the segment holds records, wake the flusher. */
void chime__journal_sealed(void *ctx, uint64_t segment, uint64_t used);
/* Seal the log and wait until every segment sealed so far is a run: every record appended before
 * the call is then in a run. Return: 0 or the sticky error. */
int chime__journal_flush_all(struct chime__backend *j);
/* Hold a change back while the flusher is more than CHIME__JOURNAL_BACKLOG_MAX segments behind,
 * counting sealed segments and the log's records not yet in one (the disk, not the callers, sets
 * the pace: otherwise unflushed segments would pile up without bound). Return: 0 or the sticky
 * error. */
#define CHIME__JOURNAL_BACKLOG_MAX 4
int chime__journal_throttle(struct chime__backend *j);
/* Ask the flusher to write out the index's pending writes (chime__index_flush), once until it has
 * begun; called after a change when chime__index_flush_wanted says so. */
void chime__journal_ask_index_flush(struct chime__backend *j);

/* journal.c */
/* The first sticky error of the log or the journal, or 0; tells the sink once. */
int chime__journal_error(struct chime__backend *j);
/* Record a sticky error (and tell the sink, once). */
void chime__journal_fail(struct chime__backend *j, int err);

/* Look k up in table t. Return: 1 found, 0 not, or an error (the journal has failed). */
int chime__journal_lookup(struct chime__backend *j, enum chime__index_table t,
                          const struct chime__ikey *k, uint64_t *version, uint64_t *due);

/* journal_reads.c: the backend operations load, dead_list and dead_read (backend.h). */
int chime__journal_load(struct chime__backend *j, uint64_t from, uint64_t until,
                        chime__timer_fn *fn, void *ctx);
int chime__journal_dead_list(struct chime__backend *j, chime__timer_fn *fn, void *ctx);
int chime__journal_dead_read(struct chime__backend *j, const void *key, size_t key_len,
                             struct chime__dead *out);

/* A snapshot of the run list, each run referenced (J4). Return: 0; -ENOMEM. */
int chime__journal_runs(struct chime__backend *j, struct chime__run ***out, size_t *n);
void chime__journal_runs_release(struct chime__run **runs, size_t n);

#endif /* CHIME_STORE_JOURNAL_H */
