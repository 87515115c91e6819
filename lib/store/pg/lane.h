/* SPDX-License-Identifier: MIT */
/* A write lane (lanes.c explains them): its queue of operations, and running one batch (batch.c). */
#ifndef CHIME_STORE_PG_LANE_H
#define CHIME_STORE_PG_LANE_H

#include "store/pg/pg.h"

enum pg_op_kind { PG_OP_PUT, PG_OP_RETRY, PG_OP_CANCEL, PG_OP_ACK, PG_OP_BURY, PG_OP_REQUEUE,
                  PG_OP_DROP, PG_OP_UNFIRE, PG_OP_KINDS };

struct pg_op {
    struct pg_op *next;
    uint8_t kind;
    uint8_t waited;          /* a caller waits for it to be settled (and releases it) */
    _Atomic uint32_t done;   /* settled: a futex word (lanes.c, SETTLING A BATCH) */
    struct pg_op *wakes[2];  /* the waited operations of its batch its waiter wakes in turn */
    _Atomic uint32_t refs;   /* its holders (lanes.c, OWNERSHIP) */
    uint8_t note;            /* notify the shard's owner (a put due soon, for a shard not ours) */
    int status;              /* the result: 0, -ENOENT, -EINPROGRESS, -ESTALE, or the error */
    uint64_t seq;            /* in its lane */
    uint64_t hash;           /* of the key: at most one operation per key in a batch */
    unsigned shard;
    uint64_t due, part;      /* part: stamped from the clock before each attempt (batch.c) */
    uint64_t version;        /* ack, bury: the version; retry: if_version; cancel: its firing one */
    uint64_t epoch;          /* ack, bury, retry, unfire: the epoch of the firing's fence */
    struct chime__backend *settles; /* the outcome of a firing fire() recorded: settled (its
                                       shard's `unsettled`) when the operation is freed */
    uint32_t attempt;        /* put, retry, bury: the attempt to record; unfire: the recorded one */
    uint64_t out_version;    /* put, retry, requeue: the new version; cancel: the cancelled one */
    unsigned char *out_payload; /* requeue: the dead letter's payload (malloc'ed) */
    size_t out_payload_len;
    uint16_t key_len;
    uint32_t payload_len;
    unsigned char data[];    /* the key, then the payload */
};

#define LANE_SEEN 4096 /* slots of a batch's key set; at least twice PG_BATCH */
_Static_assert(LANE_SEEN >= 2 * PG_BATCH && (LANE_SEEN & (LANE_SEEN - 1)) == 0,
               "a batch's key set stays at most half full");

struct pg_lane {
    struct chime__backend *b;
    int index;
    pthread_t thread;
    int started;
    struct pg_conn conn;           /* the lane thread's alone */
    uint64_t mark;                 /* the number of the lane's last try of a batch (P6) */
    uint64_t commit_at;            /* CLOCK_BOOTTIME when that try's COMMIT went out */
    pthread_mutex_t lock;          /* the queue and the counters below */
    pthread_cond_t work;           /* the lane thread waits here for operations */
    struct pg_op *head, *tail;
    uint64_t next_seq;             /* the last sequence handed out */
    int stop;                      /* end once the queue is empty */
    /* Read without the lock (sync, close). A caller waiting for one operation sleeps on that
     * operation's futex word instead: a commit wakes exactly its callers, each once (a shared
     * word would wake the next batch's callers too, for nothing, and each wake is a context
     * switch). */
    _Atomic uint64_t committed;    /* every operation up to this sequence is settled */
    _Atomic uint64_t failed_from;  /* the first sequence of a batch that failed (0: none) */
    _Atomic uint32_t commits;      /* a futex word bumped by every batch (sync waits on it) */
    _Atomic int closed;            /* the lane gave up: refuse new operations */
    _Atomic int abandon;           /* stop retrying (close, with the database unreachable) */
    struct pg_op *batch[PG_BATCH]; /* the lane thread's */
    struct pg_op *seen[LANE_SEEN];
    struct pg_array arrays[12];    /* reused between batches */
    struct pg_op *kind_ops[PG_OP_KINDS][PG_BATCH];
    size_t kind_n[PG_OP_KINDS];
};

/* Run one batch until it is committed (with retries, reconnections and commit resolution) and
 * fill each operation's results. Return: 0; -EIO if the store failed (or gave up). */
int chime__pg_lane_run(struct pg_lane *l, struct pg_op **batch, size_t n);
void chime__pg_lane_free_arrays(struct pg_lane *l);

#endif /* CHIME_STORE_PG_LANE_H */
