/* SPDX-License-Identifier: MIT */
/*
 * A spill: fixed-size records sorted into buckets on their way to disk, read back one bucket at a
 * time, so that a process can sort more than it should hold.
 *
 * The key index's rebuild at open uses it (index.c, "rebuilding"): every record read from the
 * journal goes into the bucket of the table it changes, and the tables are then built one at a
 * time from their buckets, so that the process holds one table under construction instead of all
 * of them (a rebuilt index of 10^7 keys is 512 MiB of tables).
 *
 * A bucket keeps a buffer of a block's size; a full buffer is appended to one unnamed
 * file (O_TMPFILE in the given directory, created when the first block is written) and the bucket
 * notes the block's offset. Reading a bucket returns its records in the order they were added, a
 * block at a time, and gives back its memory. Nothing is durable: the file has no name and goes
 * when the spill is freed or the process ends. Memory: at most a buffer per bucket that has
 * records, and 8 bytes per block written.
 *
 * Not thread-safe: one thread at a time. Errors are negative errno values: -ENOMEM, or those of
 * creating, writing and reading the file (io.h: -EIO, -ENOSPC...).
 */
#ifndef CHIME_STORE_SPILL_H
#define CHIME_STORE_SPILL_H

#include <stddef.h>
#include <stdint.h>

struct chime__spill;

/* A spill of `buckets` buckets of records of rec_size bytes, written in blocks of per_block
 * records, its file to be made in the directory `dir` (borrowed). No I/O yet.
 * Return: 0, -EINVAL (a size of 0), -ENOMEM. */
int chime__spill_open(struct chime__spill **out, int dir, unsigned buckets, size_t rec_size,
                      size_t per_block);
/* Free everything, the file included (a NULL s: nothing). */
void chime__spill_free(struct chime__spill *s);

/* Add a record (rec_size bytes) to a bucket. O(1), a block write when the bucket's buffer fills.
 * Return: 0, -ENOMEM, or the write's error (the record is then not added). */
int chime__spill_add(struct chime__spill *s, unsigned bucket, const void *rec);

/* Records added to a bucket and not yet read back. */
uint64_t chime__spill_count(const struct chime__spill *s, unsigned bucket);

/* Receives n (> 0) records, one after the other; returns 0 to go on, or an error to stop. */
typedef int chime__spill_fn(void *ctx, const void *recs, size_t n);

/* Hand a bucket's records to fn in the order they were added, a block at a time, then empty the
 * bucket and give back its memory (also when it fails). Return: 0, fn's error, -ENOMEM, or a
 * read's error (-EIO; -EBADMSG if the file is shorter than what was written to it). */
int chime__spill_read(struct chime__spill *s, unsigned bucket, chime__spill_fn *fn, void *ctx);

#endif /* CHIME_STORE_SPILL_H */
