/* SPDX-License-Identifier: MIT */
/*
 * The journal's key index: for every key, the version and due time of its pending timer, and the
 * version of its dead letter. It is how a put finds the timer it replaces and a cancel knows whether
 * a key is pending, for keys whose timers are far away and held nowhere in memory.
 *
 * The index is derived: open() rebuilds it from the journal, so it is never synced and a crash
 * cannot damage it. Small tables are memory (at most 32 MiB in all); large ones live in unnamed files
 * (O_TMPFILE) in the journal's directory, whose slots the kernel's page cache holds and may write out
 * and evict under pressure, while the process keeps a byte per slot (a tag that says which slots are
 * empty and which might hold a key) and a batch of writes not yet in the file (index_table.c). That
 * is how 10^7 far timers cost the process little resident memory, and how a put of a new key, the
 * common case, makes no system call for the index: the tags say it is absent and where it goes, and
 * its slot is written later, in a batch. A lookup of a key that is present costs a 32-byte pread
 * (unless the caller knows it is present: chime__index_find_live), a deletion none.
 *
 * A key is named by its SipHash-2-4-128 under a key drawn at random at open (hash.c). Tables are
 * open-addressed with linear probing, 32 bytes a slot, at most 3/4 full, in 32 stripes by hash, each
 * with its own lock: calls for one key hold its stripe's lock (chime__index_lock).
 */
#ifndef CHIME_STORE_INDEX_H
#define CHIME_STORE_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "store/hash.h"

struct chime__index;

enum chime__index_table {
    CHIME__IX_PENDING = 0, /* key -> version and due time of its pending timer */
    CHIME__IX_DEAD = 1,    /* key -> version of its dead letter */
};

struct chime__ikey {
    struct chime__hash h;
    unsigned stripe;
};

/* Return: 0; -ENOMEM. The tables' files go in the directory `dir` (borrowed). */
int chime__index_open(struct chime__index **out, int dir);
void chime__index_free(struct chime__index *ix);

/* The key's name in this index. Any thread, no lock. */
void chime__index_key(const struct chime__index *ix, const void *key, size_t len,
                      struct chime__ikey *out);

void chime__index_lock(struct chime__index *ix, const struct chime__ikey *k);
void chime__index_unlock(struct chime__index *ix, const struct chime__ikey *k);

/* With k's stripe locked. Errors are those of reading or writing a table's file (-EIO...), or
 * -ENOMEM, -ENOSPC when a table grows. */
/* Return: 1 and the entry, 0 if the key has none, or an error. */
int chime__index_get(struct chime__index *ix, enum chime__index_table t, const struct chime__ikey *k,
                     uint64_t *version, uint64_t *due);
/* Make room for one more entry in table t of k's stripe, so that the next chime__index_set there
 * does not grow it. Return: 0; -ENOMEM, -ENOSPC or an I/O error if the table had to grow. */
int chime__index_reserve(struct chime__index *ix, enum chime__index_table t,
                         const struct chime__ikey *k);
/* Insert or overwrite. Return: 0; as chime__index_reserve, or an error writing a table's file. */
int chime__index_set(struct chime__index *ix, enum chime__index_table t, const struct chime__ikey *k,
                     uint64_t version, uint64_t due);
/* A lookup that remembers where the key goes, for a write after it (the put path: look up, append
 * to the log, write the new version): one probe instead of two. Nothing may change the stripe's
 * table in between; reserve first (growth moves the slots). */
struct chime__islot {
    uint64_t pos;
    int found;        /* 1: version and due hold the key's live entry */
    int ended;        /* the slot holds an ended entry: the key's (left by a rebuild), or in a
                         file table the first ended slot of the key's probe run; a write takes it */
    uint64_t version, due;
};
int chime__index_find(struct chime__index *ix, enum chime__index_table t, const struct chime__ikey *k,
                      struct chime__islot *at);
int chime__index_write(struct chime__index *ix, enum chime__index_table t,
                       const struct chime__ikey *k, const struct chime__islot *at, uint64_t version,
                       uint64_t due);
/* As chime__index_find for a key the caller knows holds the live entry {version, due} (the journal's
 * acknowledgement of a timer the store's logic says nothing has replaced): in a file table, when only
 * one slot of the key's probe run carries its tag, that slot is the key's, and it is found without
 * reading the file; otherwise this is chime__index_find. Return: as chime__index_find. */
int chime__index_find_live(struct chime__index *ix, enum chime__index_table t,
                           const struct chime__ikey *k, uint64_t version, uint64_t due,
                           struct chime__islot *at);
/* Delete the entry chime__index_find found (at->found): one probe instead of two. It reads and
 * writes nothing (a file table's entry ends by its tag: index.c, DELETION), so it cannot fail and
 * may follow the append of the change's record. Cost: O(1) in a file table; in memory, the rest of
 * the probe run shifted back. */
void chime__index_del_at(struct chime__index *ix, enum chime__index_table t,
                         const struct chime__ikey *k, const struct chime__islot *at);
int chime__index_del(struct chime__index *ix, enum chime__index_table t,
                     const struct chime__ikey *k);

/*
 * Rebuilding (open, one thread, no lock needed): apply records in any order. A key keeps its
 * greatest version, live or ended, so a version ended and then met again cannot come back.
 */
struct chime__rebuild_op {
    struct chime__ikey k;
    uint64_t version, due;
    uint8_t table; /* enum chime__index_table */
    uint8_t kill;  /* 1: the version ended */
};
/* Room for about n keys per table, so that a rebuild does not grow (rehash) its tables as it goes;
 * or, when tables for n keys would take more than 64 MiB, the rebuild spills its records to disk
 * and builds one table at a time in chime__index_rebuild_done (index.c, "REBUILDING"). Before the
 * first chime__index_rebuild. Return: 0, -ENOMEM. */
int chime__index_presize(struct chime__index *ix, uint64_t n);
/* Apply ops in their order (or spill them, to be applied by chime__index_rebuild_done). Their slots
 * are fetched ahead, a batch at a time: a rebuild is a cache miss per record otherwise. Return: 0 or
 * an error as chime__index_set, or the spill's (spill.h). */
int chime__index_rebuild(struct chime__index *ix, const struct chime__rebuild_op *ops, size_t n);
/* Build the tables from the spill if there is one, then drop what ended (unless it is under a
 * quarter of a table: an ended entry reads as absent, and a later put of its key takes its slot),
 * size down a table at most an eighth full (presize was told of more keys than there are), and move
 * the large tables into their files. Return: 0 or an error as chime__index_rebuild. */
int chime__index_rebuild_done(struct chime__index *ix);

/* Live entries in table t (exact when no call runs). Any thread. */
uint64_t chime__index_count(const struct chime__index *ix, enum chime__index_table t);

/* Tests: tables larger than `bytes` go into files (512 KiB otherwise), before any is made. */
void chime__index_set_memory_max(struct chime__index *ix, uint64_t bytes);
/* Tests: pending writes a file table holds before it writes them out (0, the default: sized by the
 * table, index_table.c), before any table is in a file. */
void chime__index_set_write_batch(struct chime__index *ix, uint32_t n);
/* Tests: the memory limit, batch and spill threshold every index opened from now on starts with (0:
 * the defaults), so that a whole store's index lives in files, or its rebuilds spill (a threshold
 * set also makes the spill write blocks of 8 records, so that a small rebuild goes through its
 * file); set while no store is open. */
void chime__index_set_defaults(uint64_t mem_max, uint32_t batch, uint64_t spill_over);
/* Tests: when on, chime__index_find_live also looks the key up the reading way whenever it trusts
 * its caller, and aborts with a message if the caller's promise was wrong (the key's live entry is
 * not {version, due} at the slot the tags chose). The promise comes from the store's logic; a wrong
 * one would end another timer, or place a KILL where its PUT is not, silently. */
void chime__index_verify_live(int on);
/* Tests: a rebuild spills when its tables may take more than `bytes` (64 MiB otherwise), in blocks
 * of 8 records; before chime__index_presize. */
void chime__index_set_spill_over(struct chime__index *ix, uint64_t bytes);
/* Tests: 1 if k's tags in table t say "maybe" (a slot of its probe run has its tag: a lookup reads
 * from the file), 0 if they settle the lookup without a read. With k's stripe locked. */
int chime__index_maybe(struct chime__index *ix, enum chime__index_table t, const struct chime__ikey *k);
/* Tests: the hash key (drawn at random by open) set from a test's seed, before any key is named,
 * so that a failing run's table layout repeats with its seed. */
void chime__index_set_hash_key(struct chime__index *ix, uint64_t k0, uint64_t k1);

/* Write out the pending writes of every file table whose batch is at least half full (all: of every
 * file table), and shrink every table at most a 16th live (index.c, SHRINKING), one stripe at a
 * time under its lock (the flusher thread calls this, so that puts rarely find a full batch).
 * Return: 0 or the first I/O error (the journal then fails: the index could not keep its writes);
 * a shrink that finds no memory, or no descriptor or space for its file, leaves its table as it
 * was. */
int chime__index_flush(struct chime__index *ix, int all);
/* Whether some file table holds at least half a batch of pending writes, or some table shrinks.
 * Any thread, no lock: a hint for waking the flusher. */
int chime__index_flush_wanted(const struct chime__index *ix);

/* Bytes of the tables, in memory and in files. */
uint64_t chime__index_bytes(const struct chime__index *ix);

#endif /* CHIME_STORE_INDEX_H */
