/* SPDX-License-Identifier: MIT */
/*
 * The journal's head: the number of the newest segment whose records may have been acknowledged,
 * kept in the file HEAD (format.md, "HEAD"). The chain of segment numbers (files.h) finds a lost
 * file by the gap it leaves before a later one; the head finds the loss of the newest files, which
 * leave no gap: a head above every number the journal's files cover is a lost file.
 *
 * THE RULE. The head is at least the number of every segment holding an acknowledged record: the
 * writer sets it to a segment's number, durably, before the first commit into that segment is
 * published (wal_writer.c), and the log's first segment is created only once HEAD exists. It may be
 * above the newest file only while that segment's records were never acknowledged: open lowers it
 * (durably) before it deletes the newest segments that hold no whole record (replay.c).
 *
 * HEAD holds two slots, 4 KiB apart, each with a sequence number and a checksum; a write goes to
 * the slot the last one did not use, then fdatasync. A write a crash tore leaves the other slot,
 * one head older, which is still at least the head of every record acknowledged before it.
 *
 * Not thread-safe: one writer at a time (the log's writer thread, or open before it starts).
 */
#ifndef CHIME_STORE_HEAD_H
#define CHIME_STORE_HEAD_H

#include <stdint.h>

#define CHIME__HEAD_NAME "HEAD"

struct chime__head {
    int fd;       /* HEAD, open for writing; -1 when closed */
    uint64_t seq; /* the sequence number of the last slot written */
};

/* The head of the journal in dir. Return: 0 and *n; -ENOENT if there is no HEAD; -EBADMSG if it
 * holds no whole slot; -EPROTO if a whole slot is of another format version; an I/O error. */
int chime__head_read(int dir, uint64_t *n);

/* Open HEAD for chime__head_set; if it does not exist or holds no whole slot, write it holding n
 * first, synced with its directory entry. Return: 0; an I/O error (h is then closed). */
int chime__head_open(int dir, uint64_t n, struct chime__head *h);

/* Make n the head, durably: one write of a slot and an fdatasync. Return: 0; an I/O error. */
int chime__head_set(struct chime__head *h, uint64_t n);

void chime__head_close(struct chime__head *h);

#endif /* CHIME_STORE_HEAD_H */
