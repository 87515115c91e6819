/* SPDX-License-Identifier: MIT */
/*
 * Runs: immutable files of records in run order (format.md), each covering a range of segments. A
 * run is written under a temporary name, synced, renamed, and its directory synced; from then on it
 * is only read, until a merge replaces it. In memory a run keeps a sparse index of its pending
 * section (the due time and offset of a record every 64 KiB), so that reading the timers due in a
 * range costs one seek per run, and the offset where its dead letters begin, with a sparse index of
 * them too (the version and offset of a record every 64 KiB), so that finding one dead letter by
 * its version reads one stretch between two entries of each run (64 KiB and one record at most).
 */
#ifndef CHIME_STORE_RUN_H
#define CHIME_STORE_RUN_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "store/format.h"
#include "store/merge.h"
#include "store/reader.h"

struct chime__mark {
    uint64_t due, off;        /* due: the version, in the index of dead letters */
};

struct chime__run {
    uint64_t lo, hi;          /* the segments it covers */
    uint64_t next_version;
    int fd;
    uint64_t size;            /* file size */
    uint64_t dead_off;        /* where section 1 (dead letters) begins; size if it is empty */
    uint64_t records, puts, deads; /* PUT and DEAD records: live unless a later run ends them */
    struct chime__mark *marks;  /* of the pending section, by due time */
    size_t nmarks, cmarks;
    struct chime__mark *dmarks; /* of the dead letters, by version */
    size_t ndmarks, cdmarks;
    _Atomic int refs;         /* the journal's list holds one; each reader of it, one more */
};

/* Take and drop a reference; the last drop closes the file (a replaced run was already unlinked). */
void chime__run_ref(struct chime__run *r);
void chime__run_unref(struct chime__run *r);

struct chime__run_writer {
    int dir;
    int fd;
    char tmp[CHIME__NAME_MAX + 4];
    unsigned char *buf;
    size_t len, cap;
    uint64_t off;             /* file offset of buf[0] */
    uint64_t last_mark;
    uint64_t created;         /* the header's, written by commit */
    struct chime__run *run;   /* being built */
};

/* Start run-lo-hi.run (as a .tmp file). Return: 0; -ENOMEM; an I/O error. */
int chime__run_begin(struct chime__run_writer *w, int dir, uint64_t lo, uint64_t hi,
                     uint64_t next_version);
/* Add a record (no kill fields), in run order after the previous one. Return: 0; an I/O error. */
int chime__run_add(struct chime__run_writer *w, const struct chime__rec *r);
/* Write the header (with the run's size), sync, rename into place, sync the directory. Return: 0 and
 * *out (one reference); an I/O error (the temporary file is then removed). */
int chime__run_commit(struct chime__run_writer *w, struct chime__run **out);
/* Give up: close and remove the temporary file. */
void chime__run_abort(struct chime__run_writer *w);

/* A chime__emit_fn that adds to a run writer (ctx). */
int chime__run_emit(void *ctx, const struct chime__rec *r);

/*
 * Open the run `name` in dir, check every record, and build its index; scan (if not NULL) is called
 * with each record in file order. Return: 0 and *out; -EBADMSG (a header or record is not whole, a
 * record is out of order, or the file is not the size its header records), with *bad_off the offset;
 * -EPROTO (another format version); what scan returned; -ENOMEM; an I/O error.
 */
int chime__run_open(int dir, const char *name, struct chime__run **out, uint64_t *bad_off,
                    int (*scan)(void *ctx, const struct chime__rec *r), void *ctx);

/* A source over part of a run: its pending timers due in [from, until), or its dead letters. */
struct chime__run_source {
    struct chime__source base;
    struct chime__reader rd;
    uint64_t from, until;
    int section;
};
int chime__run_source_pending(struct chime__run_source *s, struct chime__run *r, uint64_t from,
                              uint64_t until);
int chime__run_source_dead(struct chime__run_source *s, struct chime__run *r);
int chime__run_source_all(struct chime__run_source *s, struct chime__run *r);
void chime__run_source_free(struct chime__run_source *s);

/* Find the DEAD record of `version` among r's dead letters (from the last index entry before it)
 * and call found(ctx, record) with it (its key and payload valid during the call).
 * Return: found's value if it was found (found must return nonzero); 0 if r holds no DEAD of that
 * version; -ENOMEM; -EBADMSG if the bytes read are not whole records (zeros included: a run is
 * written whole), or an I/O error. */
int chime__run_find_dead(struct chime__run *r, uint64_t version,
                         int (*found)(void *ctx, const struct chime__rec *r), void *ctx);

#endif /* CHIME_STORE_RUN_H */
