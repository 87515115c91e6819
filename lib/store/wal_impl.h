/* SPDX-License-Identifier: MIT */
/*
 * The write-ahead log's state, shared by wal.c (the appenders' side and the calls of wal.h) and
 * wal_writer.c (the writer thread and the segments it writes): nothing else includes this. The
 * design is explained in those two files' top comments.
 */
#ifndef CHIME_STORE_WAL_IMPL_H
#define CHIME_STORE_WAL_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "store/head.h"
#include "store/wal.h"
#include "store/waiters.h"

#define FILL_MAX (64u << 20)  /* appenders wait for the writer beyond this many bytes */
#define COMMIT_EARLY (4u << 20) /* with an interval, commit at once beyond this many */
#define SEGMENT_MIN (1u << 20)
#define SEGMENT_MAX (16u << 20)
_Static_assert(SEGMENT_MAX <= UINT32_MAX, "a segment's header records its size in 32 bits");

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
    uint64_t sealed_used;  /* how many of its bytes hold records and MARKs (UINT64_MAX: unknown) */
    uint64_t current;      /* the segment records go to */
    int error;
    int failed_outside;             /* error came from chime__wal_fail: the writer still writes
                                       what was appended before it (FAILURE, wal_writer.c) */
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
    uint64_t prev_end;     /* the previous segment's end, for its MARKs (0: the first since open) */
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

/* Create segment `number` of `size` bytes: header, zeros, file and directory synced; *out receives
 * its descriptor and *salt its header's salt. Return: 0 or the I/O error (nothing left behind). */
int chime__wal_create_segment(const struct chime__wal *w, uint64_t number, uint64_t size,
                              uint64_t next_version, int *out, uint64_t *salt);

/* The writer thread (pthread_create's start routine, given the log). */
void *chime__wal_writer_main(void *arg);

#endif /* CHIME_STORE_WAL_IMPL_H */
