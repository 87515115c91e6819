/* SPDX-License-Identifier: MIT */
/*
 * One table of the key index (index.c), wherever its slots live: in anonymous memory, or in an
 * unnamed file with a tag per slot and a batch of pending writes in memory (index_table.c explains
 * the file tables' invariants and costs). index.c holds the hashing, the stripes, the operations and
 * the rebuild; this is the storage under them.
 */
#ifndef CHIME_STORE_INDEX_TABLE_H
#define CHIME_STORE_INDEX_TABLE_H

#include <stdint.h>

#include "store/hash.h"

/* {hash lo, hash hi, version, due}; version 0 marks an empty slot, a version with
 * CHIME__ISLOT_ENDED an ended entry (index.c, DELETION). */
struct chime__islot_data {
    uint64_t lo, hi, version, due;
};
#define CHIME__ISLOT_ENDED (UINT64_C(1) << 63)

/* Slots written to a file table and not yet in its file (index_table.c, "PENDING WRITES"). */
struct chime__ipending {
    struct chime__ipend {
        uint64_t pos;
        struct chime__islot_data s;
    } *e;           /* at most max entries, one per position */
    uint32_t *map;  /* open-addressed on pos: index in e + 1, 0 empty; 2 * max entries, a power of 2 */
    uint32_t n, max;
    uint32_t mask;  /* of map */
};

struct chime__itable {
    struct chime__islot_data *slots; /* in memory: anonymous, zeroed; NULL if in a file or not made */
    int fd;                          /* in a file: the unnamed file; -1 otherwise */
    uint8_t *tags;                   /* in a file: a byte per slot (index_table.c, T2) */
    struct chime__ipending pend;     /* in a file: writes not yet in it */
    uint64_t cap;                    /* slots, a power of two (0: not made yet) */
    uint64_t used;                   /* occupied slots, ended ones included */
    uint64_t ended;                  /* ended entries */
    uint64_t unshrunk;               /* index.c, SHRINKING: 1 + the live entries when a shrink of
                                        this table failed; 0 if none did */
};

#define CHIME__ITABLE_NONE { NULL, -1, NULL, { NULL, NULL, 0, 0, 0 }, 0, 0, 0, 0 }

/* A zeroed table of cap slots in anonymous memory. Return: 0; -ENOMEM. */
int chime__itable_make(struct chime__itable *t, uint64_t cap);
void chime__itable_free(struct chime__itable *t);
/* Move a table in memory into an unnamed file in dir (one sequential write) with its tags and room
 * for `batch` pending writes (0: sized by the table). Return: 0; -ENOMEM or an I/O error (the table
 * is then unchanged). */
int chime__itable_to_file(struct chime__itable *t, int dir, uint32_t batch);

/* Read n slots from position first on (wrapping round the table) into buf, as the table holds
 * them (a file's content overlaid by its pending writes). Return: 0 or an I/O error. */
int chime__itable_read(const struct chime__itable *t, uint64_t first, uint64_t n,
                       struct chime__islot_data *buf);
/* Write n slots from buf at position first on (wrapping). In a file table they join the pending
 * writes, which go to the file when the batch is full. Return: 0 or an error writing the batch. */
int chime__itable_write(struct chime__itable *t, uint64_t first, uint64_t n,
                        const struct chime__islot_data *buf);
/* Write the pending writes into the file, sorted by position: a chunk holding several of them is
 * read, patched and written whole, others go one pwrite per run of consecutive positions.
 * Return: 0 or an I/O error (the pending writes then stay, and the table reads as before). */
int chime__itable_flush(struct chime__itable *t);
/* Room for `n` more pending writes without a flush (flushing if needed). Return: as flush. */
int chime__itable_room(struct chime__itable *t, uint32_t n);

/* Where h is, or the slot where it would go: *pos and a copy of the slot in *s. In a file table
 * the tags rule out every slot but those whose tag is h's: a key that is absent costs no read
 * unless a slot of its probe run shares its tag, and goes to the run's first ended entry if it has
 * one (*s then an ended entry of no key: {0, 0, CHIME__ISLOT_ENDED, 0}), else to the empty slot
 * that ends the run. Return: 0 or an I/O error. */
int chime__itable_find(const struct chime__itable *t, const struct chime__hash *h, uint64_t *pos,
                       struct chime__islot_data *s);
/* End the live entry at pos of a file table in place, by its tag alone (T2): nothing is written or
 * read, so it cannot fail. Cost: O(1). */
void chime__itable_end(struct chime__itable *t, uint64_t pos);
/* In a file table: 1 and *pos if exactly one slot of h's probe run carries h's tag, from the tags
 * alone (no read); if h is in the table, it is there. 0 when none or several do, or in memory. */
int chime__itable_sole(const struct chime__itable *t, const struct chime__hash *h, uint64_t *pos);
/* Whether a slot of h's probe run has h's tag, h's own slot included (tests: a "maybe"). 0 for a
 * table in memory. */
int chime__itable_maybe(const struct chime__itable *t, const struct chime__hash *h);

#endif /* CHIME_STORE_INDEX_TABLE_H */
