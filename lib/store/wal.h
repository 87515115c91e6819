/* SPDX-License-Identifier: MIT */
/*
 * The write-ahead log: every change the journal records is appended here first, and a group commit
 * (one write and one fdatasync for everything appended meanwhile, by any number of threads) makes it
 * durable. The log is a sequence of preallocated segment files; a full segment is sealed and the
 * journal's flusher turns it into a run (compact.c).
 *
 * LSNs are byte counts: every append moves the log's end by its records' lengths, and a position is
 * durable once a commit has synced everything before it. Commits are in order, so the durable part
 * is always a prefix (backend.h, D4). The MARK the writer puts after each commit's part in a
 * segment (format.md) is not appended: LSNs do not count it, segment offsets do.
 */
#ifndef CHIME_STORE_WAL_H
#define CHIME_STORE_WAL_H

#include <stddef.h>
#include <stdint.h>

#include "store/format.h"

struct chime__wal;

struct chime__wal_config {
    int dir;                  /* the journal's directory (borrowed) */
    uint64_t segment;         /* the first segment's number */
    uint64_t next_version;    /* the first version to give out */
    int sync_each;            /* 1: commit as soon as something is appended; 0: every interval */
    uint64_t interval_ns;     /* with sync_each 0 */
    uint64_t segment_bytes;   /* the first segment's size (chime__wal_set_segment_bytes later) */
    /* Called by the writer thread, without the log's lock, each time a segment is sealed (complete
     * and synced): its number, and how many of its bytes (header included) hold records and
     * MARKs. */
    void (*sealed)(void *ctx, uint64_t segment, uint64_t used);
    void (*failed)(void *ctx, int err); /* once, when a write or sync first fails, with the log's lock
                                           held (it must not call the log) and before any caller
                                           sees the error */
    void *ctx;
};

/* Create the first segment and start the writer thread. Return: 0; -ENOMEM, -ECHILD, or an I/O
 * error creating the segment. */
int chime__wal_open(struct chime__wal **out, const struct chime__wal_config *cfg);

/*
 * Append n records, contiguous in the log. A crash keeps a prefix of the log, so possibly only a
 * prefix of these: a change that must be atomic is one record. A PUT or DEAD whose version is 0 is
 * given the next version, written back into recs[i].version. *end receives the LSN just after the
 * last one.
 * Return: 0; the sticky error (-EIO, -ENOSPC) once a write or sync has failed; -ESHUTDOWN after
 *         chime__wal_close began.
 * Thread safety: any thread. Blocks only when 64 MB are waiting for the writer.
 */
int chime__wal_append(struct chime__wal *w, struct chime__rec *recs, size_t n, uint64_t *end);

/* Wait until everything before LSN `lsn` is durable, asking for a commit now (whatever the mode).
 * Return: 0; the sticky error. */
int chime__wal_wait(struct chime__wal *w, uint64_t lsn);

/* chime__wal_wait for everything appended before the call. */
int chime__wal_sync(struct chime__wal *w);

/*
 * Make everything appended before the call durable and, if the current segment holds records, seal
 * it and start a new one. *sealed receives the number of the last sealed segment (every record
 * appended before the call is in it or in an earlier one) and, if used is not NULL, *used what the
 * sealed callback is given for it (UINT64_MAX for a segment sealed before this open): the callback
 * may come after this returns, and a caller that acts on *sealed at once needs both.
 * Return: 0; the sticky error.
 */
int chime__wal_seal(struct chime__wal *w, uint64_t *sealed, uint64_t *used);

/* The size of segments created from now on (clamped to what a segment needs at least). */
void chime__wal_set_segment_bytes(struct chime__wal *w, uint64_t bytes);

/* The journal's throttle (compact.c) measures what waits for the flusher in segments: the sealed
 * ones and what is not in a segment yet. Any thread, no lock; each value exact at some moment.
 * chime__wal_segment_bytes: the larger of the current segment's size and that of segments created
 * from now on (so that what it counts as more than a segment cannot fit in the current one, and
 * its writing must seal a segment for the flusher: compact.c, THROTTLE). chime__wal_unwritten:
 * bytes appended and not yet written to a segment (the fill, and what the writer has not yet
 * written of its batch). Read after it, the journal's count of sealed segments includes every
 * segment sealed before the bytes last subtracted from it were written: the two count bytes twice
 * at worst. */
uint64_t chime__wal_segment_bytes(struct chime__wal *w);
uint64_t chime__wal_unwritten(struct chime__wal *w);

/* Create the next segment ahead of time, so that the writer does not pause to create it. Called by
 * the flusher thread; a no-op if one is ready. Return: 0 or the error (not sticky in the log: the
 * writer will try again, and fail for good then; the flusher fails the journal for -EIO). */
int chime__wal_prepare(struct chime__wal *w);

/* The sticky error, or 0. Any thread, no lock. */
int chime__wal_error(struct chime__wal *w);

/* Fail the log with err (if it has not failed already) for a failure of the journal's outside it:
 * from here on nothing is appended or reported durable, not even a batch the writer holds, and
 * every waiter gets the error; the writer writes what was appended before into the current
 * segment, but begins no segment and does not move HEAD (wal_writer.c, FAILURE). Any thread but
 * the writer's failure callback (which holds the log's lock). */
void chime__wal_fail(struct chime__wal *w, int err);

/* The number of the segment records go to now. */
uint64_t chime__wal_current(struct chime__wal *w);

/* Whether the writer is asleep with nothing to write and no deadline (for the tests: only an
 * append, a wait, a seal or close wakes it then). */
int chime__wal_writer_asleep(struct chime__wal *w);

/* Commit what was appended, stop the writer, and free. Return: 0 or the sticky error. */
int chime__wal_close(struct chime__wal *w);

#endif /* CHIME_STORE_WAL_H */
