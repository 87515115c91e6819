/* SPDX-License-Identifier: MIT */
/*
 * The key index's layout, shared by index.c (open, operations, flushing) and index_rebuild.c (the
 * rebuild at open); of the rest, only test_store_index_tags includes it, to check every slot.
 * index.c explains the design.
 */
#ifndef CHIME_STORE_INDEX_IMPL_H
#define CHIME_STORE_INDEX_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "store/index_table.h"

#define STRIPES 32
#define MIN_SLOTS 128u                     /* 4 KiB */
#define ENDED CHIME__ISLOT_ENDED           /* this (greatest) version of the key has ended */

typedef struct chime__islot_data slot_t;
typedef struct chime__itable table_t;

struct stripe {
    pthread_mutex_t lock;
    table_t t[2];
    char pad[64];
};

struct chime__index {
    uint64_t k0, k1; /* the SipHash key */
    int dir;
    int building;    /* tables being filled by a rebuild stay in memory (REBUILDING) */
    uint64_t mem_max; /* bytes of a table kept in memory (MEM_MAX; tests lower it) */
    uint32_t batch;   /* pending writes of a file table (0: sized by the table; tests set it) */
    uint64_t spill_over; /* SPILL_OVER; tests lower it */
    uint32_t spill_block; /* SPILL_BLOCK; SPILL_BLOCK_TESTS when a test set spill_over */
    struct chime__spill *spill; /* a rebuild's records, a bucket per table (REBUILDING), or NULL */
    _Atomic uint64_t bytes;    /* of every table */
    _Atomic uint64_t live[2];  /* entries not ended, per table */
    _Atomic int flush_hint;    /* a file table holds half a batch of pending writes */
    struct stripe stripes[STRIPES];
};

/* Whether a table of cap slots lives in a file (unless a rebuild is filling it). */
int chime__index_in_file(const struct chime__index *ix, uint64_t cap);
/* Rehash t into cap slots (built in memory), dropping ended entries unless keep_ended (during a
 * rebuild, an ended entry is information: that version must not come back). Return: 0; -ENOMEM or
 * an I/O error (t is then unchanged). */
int chime__index_resize(struct chime__index *ix, table_t *t, uint64_t cap, int keep_ended);
/* Room in t for one more entry, rehashing or growing it if full (index.c). Return: as
 * chime__index_reserve. */
int chime__index_reserve_table(struct chime__index *ix, table_t *t);

#endif /* CHIME_STORE_INDEX_IMPL_H */
