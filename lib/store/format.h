/* SPDX-License-Identifier: MIT */
/*
 * The journal's records and file headers, in memory and on disk (format.md is the contract): encoding,
 * decoding with every check the reader's rules need, and the order records take in a run.
 */
#ifndef CHIME_STORE_FORMAT_H
#define CHIME_STORE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "chime.h"

#define CHIME__FILE_HEADER 64 /* bytes before the first record of every file */
#define CHIME__REC_HEADER 64  /* bytes before a record's key */
#define CHIME__REC_MAX (CHIME__REC_HEADER + CHIME_STORE_KEY_MAX + CHIME_STORE_PAYLOAD_MAX)
#define CHIME__MARK_LEN 64    /* a MARK record: a header, no key */
#define CHIME__FORMAT_VERSION 5 /* every file's header; a file of another version: -EPROTO */

enum chime__rec_type {
    CHIME__PUT = 1,  /* a pending timer */
    CHIME__KILL = 2, /* ends a version: cancelled, acknowledged, requeued, dropped */
    CHIME__FIRE = 3, /* a firing of a version started */
    CHIME__DEAD = 4, /* a dead letter */
    CHIME__MARK = 5, /* segments only: a group commit's part in the segment ends here (no timer) */
};
#define CHIME__KILL_DEAD 1 /* flags of a KILL: its target is a dead letter */

/* A record, decoded (key and payload point into the buffer it was decoded from) or to encode. A
 * decoded MARK has no key; its fields are read with chime__mark_valid. */
struct chime__rec {
    uint8_t type;
    uint8_t flags;
    uint16_t key_len;
    uint32_t payload_len;
    uint64_t version;
    uint64_t due;
    uint32_t attempt;
    uint64_t kill_version; /* segments only: PUT and DEAD may end a pending timer... */
    uint64_t kill_due;
    uint64_t kill_dead;    /* ...and a dead letter */
    const void *key;
    const void *payload;
    const void *raw;       /* decoded: its encoded bytes, while they match (a run copies them) */
};

/* The record's length on disk: the header, key and payload rounded up to 8 bytes. */
static inline uint32_t chime__rec_len(size_t key_len, size_t payload_len)
{
    return (uint32_t)((CHIME__REC_HEADER + key_len + payload_len + 7) & ~(size_t)7);
}

/* Write r at dst (chime__rec_len bytes, checksum included). */
void chime__rec_encode(void *dst, const struct chime__rec *r);

enum chime__decoded {
    CHIME__REC_WHOLE, /* *out and *len describe the record */
    CHIME__REC_END,   /* fewer than 8 bytes, or 8 zero bytes: nothing was ever written here */
    CHIME__REC_SHORT, /* the header says len bytes and fewer are available: read more (if the file
                         has no more, the record is not whole) */
    CHIME__REC_BAD,   /* not a whole record (format.md: checksum, length or fields) */
};

/* Decode the record at buf, of which avail bytes are available. *len receives its length when known
 * (WHOLE and SHORT). */
enum chime__decoded chime__rec_decode(const void *buf, size_t avail, struct chime__rec *out,
                                      uint32_t *len);

struct chime__file_header {
    int run;               /* 0: a segment ("chimeWAL"), 1: a run ("chimeRUN") */
    uint64_t lo, hi;
    uint64_t next_version;
    uint64_t created;
    uint64_t salt;         /* a segment's: random, never 0, repeated in its MARKs (runs: 0) */
    uint64_t size;         /* the whole file's length in bytes, header included: a run's as written,
                              a segment's as created (64 to UINT32_MAX) */
};

void chime__header_encode(void *dst, const struct chime__file_header *h);
/* Return: 0; -EPROTO if the 64 bytes at src are a whole header of another format version;
 * -EBADMSG if they are not a whole header. */
int chime__header_decode(const void *src, struct chime__file_header *h);

/* ---- HEAD's slots (format.md, "HEAD"; head.c writes and reads them) ---- */

#define CHIME__HEAD_SLOT 40           /* bytes of a slot */
#define CHIME__HEAD_STRIDE 4096       /* slot i is at offset i * CHIME__HEAD_STRIDE */

/* Write the slot of sequence number seq holding head n at dst (CHIME__HEAD_SLOT bytes). */
void chime__head_slot_encode(void *dst, uint64_t seq, uint64_t n);
/* Return: 0 and *seq, *n; -EPROTO if the slot is whole but of another format version; -EBADMSG if
 * it is not whole (never written, or a write a crash tore). */
int chime__head_slot_decode(const void *src, uint64_t *seq, uint64_t *n);

/* ---- a segment's MARKs (format.md, "Records"; wal_writer.c writes them, reader.c checks) ---- */

struct chime__batch_mark {
    uint64_t start;   /* the segment offset where the group commit's records in this segment begin */
    uint64_t segment; /* the segment's number */
    uint64_t salt;    /* the segment header's salt */
    uint64_t prev_end; /* the previous segment's end (its bytes holding records and MARKs, header
                          included) when the writer moved here from it; 0 after an open */
};

/* Write the MARK m at dst (CHIME__MARK_LEN bytes, checksum included). */
void chime__mark_encode(void *dst, const struct chime__batch_mark *m);

/* Whether r, a whole record read at offset `at` of the segment whose header is h, is a MARK that
 * the writer of that segment can have written there: it names the segment and its salt, and a start
 * 8-byte aligned, after the header and not after `at`. *m receives its fields (if m). */
int chime__mark_valid(const struct chime__rec *r, const struct chime__file_header *h, uint64_t at,
                      struct chime__batch_mark *m);

/* File names (format.md): wal-<16 hex digits>.log, run-<16 hex>-<16 hex>.run. */
#define CHIME__NAME_MAX 48
void chime__wal_name(char out[CHIME__NAME_MAX], uint64_t segment);
void chime__run_name(char out[CHIME__NAME_MAX], uint64_t lo, uint64_t hi);
/* Parse a name. Return: 1 a segment (*lo = *hi = its number), 2 a run, 0 neither. */
int chime__parse_name(const char *name, uint64_t *lo, uint64_t *hi);

/* ---- the order of a run (format.md) ---- */

/* Section 0: pending timers, by due time; section 1: dead letters, by version. */
static inline int chime__rec_section(const struct chime__rec *r)
{
    return r->type == CHIME__DEAD || (r->type == CHIME__KILL && (r->flags & CHIME__KILL_DEAD));
}

/* A record's place among those of its version in a run: PUT and DEAD 0, FIRE 1, KILL 2. */
static inline int chime__rec_rank(const struct chime__rec *r)
{
    return r->type == CHIME__FIRE ? 1 : r->type == CHIME__KILL ? 2 : 0;
}

/* <0, 0, >0 as a sorts before, with, after b in a run: (section, due, version, PUT/DEAD < FIRE <
 * KILL). */
int chime__rec_cmp(const struct chime__rec *a, const struct chime__rec *b);

/*
 * A segment's record as a run holds it: the record without its kill fields, then a KILL for each of
 * them. out[] receives 1 to 3 records (key and payload shared with r). Return: how many.
 */
int chime__rec_flatten(const struct chime__rec *r, struct chime__rec out[3]);

#endif /* CHIME_STORE_FORMAT_H */
