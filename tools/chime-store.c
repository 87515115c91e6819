/* SPDX-License-Identifier: MIT */
/*
 * chime-store: look into a durable store's journal, so that an operator can audit and reconcile what
 * a service holds. It only reads (it takes no lock, and changes nothing), so it may run beside the
 * service. list, count and dead read the files they listed even once the service has compacted
 * them away (snapshot.c); verify reads again when it meets one gone.
 *
 *   chime-store list DIR     pending timers by due time: due (UTC; "never" for UINT64_MAX), due_ns,
 *                            attempts, key, payload size
 *   chime-store dead DIR     dead letters in the order they died, the same columns
 *   chime-store count DIR    how many pending timers and dead letters
 *   chime-store verify DIR   every file checked: its size, records (and a segment's group commits,
 *                            counted by their MARKs), and the first damaged record if any
 *   chime-store --postgres CONNINFO init|status|count|list|dead   the PostgreSQL backend's schema and
 *                            contents (chime-store-pg.c)
 *
 * Keys are printed as text, bytes outside printable ASCII, space and backslash as \xNN. Exit
 * status: 0; 1 if the journal is damaged (open would refuse it) or could not be read, or DIR is not
 * a journal; 2 for a usage error.
 * The journal's format is lib/store/format.md.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chime.h"
#include "store/files.h"
#include "store/format.h"
#include "store/io.h"
#include "store/merge.h"
#include "store/reader.h"
#include "store/run.h"
#include "store/segments.h"
#include "snapshot.h"

/* ---- reading the live records: runs merged with the segments, sorted in memory ---- */

struct segments {
    unsigned char **bufs;
    size_t nbufs;
    struct chime__rec *recs;
    size_t n, cap;
};

/* What open makes of the segments (segments.h): 0, -EBADMSG, or an error reading them. *valid
 * receives where each segment's whole records end (the caller frees it; NULL on -ENOMEM) and
 * *usable how many segments count. */
static int judge_segments(int dir, const struct chime__journal_files *f, uint64_t **valid,
                          size_t *usable)
{
    uint64_t next_version = 0;
    *usable = 0;
    *valid = calloc(f->nsegs ? f->nsegs : 1, sizeof **valid);
    return *valid ? chime__segments_read(dir, f->segs, f->nsegs, f->head, NULL, NULL, *valid,
                                         usable, &next_version)
                  : -ENOMEM;
}

/* Every whole record of the segments, flattened, read by open's rules (segments.h): each segment up
 * to its end or its torn point; damage that open refuses (-EBADMSG) is refused here too. The rules
 * are judged first, then the segments that count are read again whole, so that the records' keys
 * and payloads stay in memory (a running service changing them meanwhile makes this fail: -EBADMSG,
 * and the caller reads again). */
static int read_segments(int dir, const struct chime__journal_files *f, struct segments *s)
{
    memset(s, 0, sizeof *s);
    uint64_t *valid;
    size_t usable;
    int err = judge_segments(dir, f, &valid, &usable);
    s->bufs = calloc(f->nsegs ? f->nsegs : 1, sizeof *s->bufs);
    if (!err && !s->bufs)
        err = -ENOMEM;
    for (size_t i = 0; !err && i < usable; i++) {
        if (valid[i] <= CHIME__FILE_HEADER)
            continue; /* nothing whole in it (a creation a crash cut, or an empty segment) */
        char name[CHIME__NAME_MAX];
        chime__wal_name(name, f->segs[i]);
        int fd = chime__io_openat(dir, name, O_RDONLY, 0);
        unsigned char *buf = fd < 0 ? NULL : malloc(valid[i]);
        ssize_t n = fd < 0 ? fd : buf ? chime__io_pread(fd, buf, valid[i], 0) : -ENOMEM;
        if (fd >= 0)
            chime__io_close(fd);
        if (n < 0 || (uint64_t)n < valid[i]) {
            free(buf);
            err = n < 0 ? (int)n : -EBADMSG; /* (shorter: a running service changed it) */
            break;
        }
        s->bufs[s->nbufs++] = buf;
        for (uint64_t off = CHIME__FILE_HEADER; off < valid[i];) {
            uint32_t len = 0;
            struct chime__rec r;
            if (chime__rec_decode(buf + off, valid[i] - off, &r, &len) != CHIME__REC_WHOLE) {
                err = -EBADMSG; /* the reader found it whole: changed since */
                break;
            }
            off += len;
            if (r.type == CHIME__MARK) /* a group commit's end: no timer */
                continue;
            if (s->n + 3 > s->cap) {
                size_t cap = s->cap * 2 + 1024;
                struct chime__rec *recs = realloc(s->recs, cap * sizeof *recs);
                if (!recs) {
                    err = -ENOMEM;
                    break;
                }
                s->recs = recs;
                s->cap = cap;
            }
            s->n += (size_t)chime__rec_flatten(&r, s->recs + s->n);
        }
    }
    free(valid);
    return err;
}

static void free_segments(struct segments *s)
{
    for (size_t i = 0; i < s->nbufs; i++)
        free(s->bufs[i]);
    free(s->bufs);
    free(s->recs);
}

/* Merge everything the journal holds, collapsed to live PUT and DEAD records, in run order. */
static int read_live(int dir, chime__emit_fn *emit, void *ctx)
{
    struct chime__journal_files f;
    struct segments segs;
    struct snapshot snap = { -1, NULL, NULL, 0 };
    int err = snapshot_list(dir, &f);
    if (!err && f.chain != CHIME__CHAIN_WHOLE)
        err = -EBADMSG; /* a file is missing (verify names it): open refuses the journal */
    if (!err) {
        int taken = snapshot_take(dir, &f, &snap);
        snapshot_test_stop();
        if (taken == 0) {
            dir = snap.dir;
        } else {
            snapshot_free(&snap);
            if (taken == -ENOENT) /* removed between the listing and its opening: list again */
                err = taken;
            /* otherwise no snapshot (no /proc, $TMPDIR not writable): read the journal as it is */
        }
    }
    if (err) {
        chime__journal_files_free(&f);
        return err;
    }
    err = read_segments(dir, &f, &segs);
    struct chime__run **runs = calloc(f.nruns + 1, sizeof *runs);
    struct chime__run_source *srcs = calloc(f.nruns + 1, sizeof *srcs);
    struct chime__source **ptrs = calloc(f.nruns + 1, sizeof *ptrs);
    size_t opened = 0;
    if (!err && (!runs || !srcs || !ptrs))
        err = -ENOMEM;
    for (; !err && opened < f.nruns; opened++) {
        char name[CHIME__NAME_MAX];
        uint64_t bad;
        chime__run_name(name, f.runs[opened].lo, f.runs[opened].hi);
        err = chime__run_open(dir, name, &runs[opened], &bad, NULL, NULL);
        if (!err)
            err = chime__run_source_all(&srcs[opened], runs[opened]);
        if (err && runs[opened])
            chime__run_unref(runs[opened]);
        ptrs[opened] = &srcs[opened].base;
    }
    if (err && opened)
        opened--;
    /* Everything listed is open or in memory: the snapshot's directory goes before anything is
     * printed (a reader gone, as `| head`, ends the tool by SIGPIPE while it prints). */
    snapshot_free(&snap);
    struct chime__rec **order = malloc((segs.n + 1) * sizeof *order);
    if (!err && !order)
        err = -ENOMEM;
    if (!err) {
        struct chime__array_source a;
        for (size_t i = 0; i < segs.n; i++)
            order[i] = &segs.recs[i];
        chime__rec_sort(order, segs.n);
        chime__array_source_init(&a, order, segs.n);
        ptrs[opened] = &a.base;
        struct chime__collapse c;
        chime__collapse_init(&c, CHIME__KEEP_LIVE, 1, emit, ctx);
        if (!err)
            err = chime__merge(ptrs, opened + 1, &c);
        chime__collapse_free(&c);
    }
    for (size_t i = 0; i < opened; i++) {
        chime__run_source_free(&srcs[i]);
        chime__run_unref(runs[i]);
    }
    free(runs);
    free(srcs);
    free(ptrs);
    free(order);
    free_segments(&segs);
    chime__journal_files_free(&f);
    snapshot_free(&snap);
    return err;
}

/* A running service changes the journal while the tool reads it (list, verify): a read that met a
 * file it removed meanwhile is made again, and so is one that met damage, which its writes can
 * mimic (a segment read before the writer finished it, the next one after: its MARKs name a later
 * end) and which real damage survives; LIVE_TRIES reads at most, live_pause() apart. */
#define LIVE_TRIES 5

static void live_pause(void)
{
    nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL);
}

static int read_live_retrying(int dir, chime__emit_fn *emit, void *ctx, int *restarts)
{
    int err = -ENOENT;
    for (int tries = 0; (err == -ENOENT || err == -EBADMSG) && tries < LIVE_TRIES; tries++) {
        if (tries) {
            (*restarts)++;
            live_pause();
        }
        err = read_live(dir, emit, ctx);
    }
    return err;
}

/* ---- the commands ---- */

static void say_kept_changing(void)
{
    fprintf(stderr, "chime-store: the journal kept changing while it was read (a running service); "
                    "try again\n");
}

static void print_key(FILE *out, const unsigned char *k, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (k[i] >= 0x21 && k[i] < 0x7f && k[i] != '\\')
            fputc(k[i], out);
        else
            fprintf(out, "\\x%02x", k[i]);
}

struct listing {
    int dead; /* 0: pending timers; 1: dead letters */
    uint64_t pending, deads;
    int count_only;
};

static int print_one(void *ctx, const struct chime__rec *r)
{
    struct listing *l = ctx;
    int dead = r->type == CHIME__DEAD;
    l->pending += !dead;
    l->deads += dead;
    if (l->count_only || dead != l->dead)
        return 0;
    time_t secs = (time_t)(r->due / 1000000000u);
    struct tm tm;
    char when[32] = "-";
    if (r->due == UINT64_MAX)
        snprintf(when, sizeof when, "never"); /* kept, never fired (chime_store.h) */
    else if (gmtime_r(&secs, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    printf("%s %" PRIu64 " %" PRIu32 " ", when, r->due, r->attempt);
    print_key(stdout, r->key, r->key_len);
    printf(" %" PRIu32 "\n", r->payload_len);
    return 0;
}

static int cmd_read(int dir, int dead, int count_only)
{
    struct listing l = { .dead = dead, .count_only = count_only };
    int restarts = 0;
    if (!count_only)
        printf("# %s\n", dead ? "dead letters, in the order they died: due due_ns attempts key payload-bytes"
                              : "pending timers by due time: due due_ns attempts key payload-bytes");
    int err = read_live_retrying(dir, print_one, &l, &restarts);
    if (err == -ENOENT) { /* a file listed was gone when read, every time: not "no such timer" */
        say_kept_changing();
        return 1;
    }
    if (err) {
        fprintf(stderr, "chime-store: %s\n", chime_strerror(err));
        return 1;
    }
    if (count_only)
        printf("pending %" PRIu64 "\ndead %" PRIu64 "\n", l.pending, l.deads);
    if (restarts)
        fprintf(stderr, "chime-store: the journal changed while it was read (a running service); "
                        "read again %d time(s)\n", restarts);
    return 0;
}

/* verify: one line per file, then a verdict. Return: 0 the journal opens; 1 it is damaged. */
static void say_other_version(FILE *out)
{
    fprintf(out, "ANOTHER FORMAT VERSION: open refuses this journal (-EPROTO); this build reads "
                 "version %d\n", CHIME__FORMAT_VERSION);
}

static int verify_once(int dir, FILE *out)
{
    struct chime__journal_files f;
    int err = snapshot_list(dir, &f);
    if (err == -EPROTO) { /* HEAD, or a file of a journal with no HEAD (files.h): final */
        chime__journal_files_free(&f);
        say_other_version(out);
        return 2;
    }
    if (err) {
        chime__journal_files_free(&f);
        fprintf(stderr, "chime-store: %s\n", chime_strerror(err));
        return 1;
    }
    uint64_t total = 0, records = 0, end = UINT64_MAX; /* the last segment's end, if it was read */
    int damaged = 0, torn = 0, other_version = 0;
    if (f.chain == CHIME__CHAIN_GAP) {
        fprintf(out,
                "MISSING: segments %" PRIu64 " to %" PRIu64 " are in no file (a run or segment was "
                "lost, and its records with it)\n", f.missing.lo, f.missing.hi);
        damaged = 1;
    } else if (f.chain == CHIME__CHAIN_HEADLESS) {
        fprintf(out,
                "MISSING: HEAD, which names the newest segment, is lost or holds no whole slot "
                "(the loss of the newest files could not be told)\n");
        damaged = 1;
    } else if (f.chain == CHIME__CHAIN_OVERLAP) {
        fprintf(out,
                "OVERLAP: the runs from segments %" PRIu64 " and %" PRIu64 " overlap and neither "
                "contains the other (no crash leaves that)\n", f.missing.lo, f.missing.hi);
        damaged = 1;
    }
    for (size_t i = 0; i < f.nruns; i++) {
        char name[CHIME__NAME_MAX];
        struct chime__run *r;
        uint64_t bad;
        chime__run_name(name, f.runs[i].lo, f.runs[i].hi);
        err = chime__run_open(dir, name, &r, &bad, NULL, NULL);
        if (err == -ENOENT)
            goto vanished;
        if (err == -EPROTO) {
            fprintf(out, "%s: %s\n", name, chime_strerror(err));
            other_version = 1;
            continue;
        }
        if (err) {
            fprintf(out, "%s: DAMAGED at offset %" PRIu64 ": %s\n", name, bad, chime_strerror(err));
            damaged = 1;
            continue;
        }
        fprintf(out, "%s: %" PRIu64 " bytes, %" PRIu64 " records, ok\n", name, r->size, r->records);
        total += r->size;
        records += r->records;
        chime__run_unref(r);
    }
    for (size_t i = 0; i < f.nsegs; i++) {
        char name[CHIME__NAME_MAX];
        chime__wal_name(name, f.segs[i]);
        int fd;
        uint64_t size, n = 0, prev_valid = end;
        end = UINT64_MAX; /* unless this one is read to its end below */
        struct chime__file_header h;
        err = chime__file_open(dir, name, &fd, &size, &h);
        if (err == -ENOENT)
            goto vanished;
        if (err == -EPROTO) {
            fprintf(out, "%s: %s\n", name, chime_strerror(err));
            other_version = 1;
            continue;
        }
        enum chime__seg_fit fit = CHIME__SEG_FITS;
        if (!err || err == -EBADMSG)
            fit = chime__segment_fit(err, f.segs[i], size, &h);
        if (fit != CHIME__SEG_FITS) { /* the rules are segments.h's: the same verdict as open */
            if (!err)
                chime__io_close(fd);
            char what[96] = "its header is not whole, or names another file";
            if (fit != CHIME__SEG_HEADER)
                snprintf(what, sizeof what, "it is %" PRIu64 " bytes, created as %" PRIu64, size,
                         h.size);
            int v = chime__segment_verdict(dir, f.segs[i], f.head, fit);
            if (v == -ENOENT)
                goto vanished;
            if (v < 0)
                fprintf(out, "%s: %s\n", name, chime_strerror(v));
            else if (v == CHIME__SEG_GREW || v == CHIME__SEG_WRITTEN)
                fprintf(out, "%s: DAMAGED: %s, and %s (a segment is created whole and synced "
                        "before any record goes in)\n", name, what,
                        v == CHIME__SEG_GREW ? "it grew" : "records follow its header");
            else if (v == CHIME__SEG_NAMED)
                fprintf(out, "%s: DAMAGED: %s, and HEAD names it (HEAD names a segment only once "
                        "it is created)\n", name, what);
            else
                fprintf(out, "%s: %s, nothing after it (a creation a crash cut)\n", name, what);
            damaged |= v != CHIME__SEG_CUT;
            torn |= v == CHIME__SEG_CUT;
            continue;
        }
        if (err) {
            fprintf(out, "%s: %s\n", name, chime_strerror(err));
            damaged = 1;
            continue;
        }
        struct chime__reader rd;
        struct chime__rec rec;
        int got = chime__reader_init_segment(&rd, fd, &h, size);
        while (!got && (got = chime__reader_next(&rd, &rec)) == 1) {
            n++;
            got = 0;
        }
        uint64_t at = 0, start = 0;
        int marked = got == -EBADMSG ? chime__reader_mark_after(&rd, rd.off, &at, &start) : 0;
        if (got < 0 && got != -EBADMSG) {
            fprintf(out, "%s: %s\n", name, chime_strerror(got)); /* open fails with it too */
            damaged = 1;
        } else if (got == -EBADMSG)
            fprintf(out,
                    "%s: %" PRIu64 " bytes, %" PRIu64 " records in %" PRIu64 " group commits, then "
                    "not a whole record at offset %" PRIu64 "\n", name, size, n, rd.marks, rd.off);
        else
            fprintf(out,
                    "%s: %" PRIu64 " bytes, %" PRIu64 " records in %" PRIu64 " group commits, ok\n",
                    name, size, n, rd.marks);
        /* Its MARKs name where the segment before it ended (segments.h). */
        if (rd.prev_end && i > 0 && f.segs[i - 1] + 1 == f.segs[i] && prev_valid != UINT64_MAX &&
            prev_valid != rd.prev_end) {
            fprintf(out, "%s: DAMAGED: its group commits say the segment before it ended at offset "
                   "%" PRIu64 ", where its records end at %" PRIu64 " (a lost write)\n", name,
                   rd.prev_end, prev_valid);
            damaged = 1;
        }
        end = rd.off;
        if (marked < 0) {
            fprintf(out, "%s: %s\n", name, chime_strerror(marked));
            damaged = 1;
        } else if (marked && start > rd.off)
            fprintf(out,
                    "%s: DAMAGED at offset %" PRIu64 ": the group commit marked at offset %" PRIu64
                    " began at %" PRIu64 ", after it, so it had been synced\n", name, rd.off, at,
                    start);
        else if (marked)
            fprintf(out,
                    "%s: DAMAGED at offset %" PRIu64 ": the group commit marked at offset %" PRIu64
                    " holds it, and a later one was written after it, so it had been synced\n",
                    name, rd.off, at);
        if (got == -EBADMSG && !marked && f.segs[i] < f.head) {
            fprintf(out,
                    "%s: DAMAGED at offset %" PRIu64 ": HEAD names segment %" PRIu64
                    ", so this one had been synced whole\n", name, rd.off, f.head);
            damaged = 1;
        }
        if (got == -EBADMSG) {
            /* A torn tail if no later segment was written to, no later group commit marked in
             * this one and HEAD names no later segment (format.md); else damage. */
            if (torn || marked)
                damaged = 1;
            torn = 1;
        } else if (torn && (n || rd.marks)) {
            damaged = 1; /* written to after a cut: the cut was damage */
        }
        total += size;
        records += n;
        chime__reader_free(&rd);
        chime__io_close(fd);
    }
    /* The verdict on the segments is open's own (segments.h), whatever the lines above say. */
    uint64_t *valid = NULL;
    size_t usable;
    err = damaged || other_version ? 0 : judge_segments(dir, &f, &valid, &usable);
    free(valid);
    if (err == -ENOENT)
        goto vanished;
    if (err) {
        fprintf(out, "segments: %s, by open's rules (lib/store/segments.h)\n", chime_strerror(err));
        damaged = 1;
    }
    fprintf(out, "total: %zu runs, %zu segments, %" PRIu64 " bytes, %" PRIu64 " records\n", f.nruns,
           f.nsegs, total, records);
    if (other_version)
        say_other_version(out);
    else if (damaged)
        fprintf(out,
                "DAMAGED: open refuses this journal (-EBADMSG); the first damage is named above\n");
    else if (torn)
        fprintf(out,
                "ok, with a torn tail: open cuts it at the last whole record (a crash cut a write "
                "that was never reported durable)\n");
    else
        fprintf(out, "ok\n");
    chime__journal_files_free(&f);
    return damaged || other_version;
vanished: /* a running service compacted a listed file away: the listing is stale */
    chime__journal_files_free(&f);
    return -ENOENT;
}

/* Read again as list does (LIVE_TRIES): a listing made stale (-ENOENT), or a verdict of damage
 * (1). Only the last read's lines are printed. */
static int cmd_verify(int dir)
{
    int rc = -ENOENT;
    for (int tries = 0; (rc == -ENOENT || rc == 1) && tries < LIVE_TRIES; tries++) {
        if (tries)
            live_pause();
        char *text = NULL;
        size_t len = 0;
        FILE *out = open_memstream(&text, &len);
        if (!out) {
            fprintf(stderr, "chime-store: out of memory\n");
            return 1;
        }
        rc = verify_once(dir, out);
        fclose(out);
        if (rc != -ENOENT && (rc != 1 || tries == LIVE_TRIES - 1))
            fwrite(text, 1, len, stdout);
        free(text);
    }
    if (rc == 2)
        return 1; /* another format version */
    if (rc == -ENOENT) {
        say_kept_changing();
        return 1;
    }
    return rc;
}

struct command {
    const char *name;
    const char *help;
    int (*run)(int dir);
};

static int run_list(int dir) { return cmd_read(dir, 0, 0); }
static int run_dead(int dir) { return cmd_read(dir, 1, 0); }
static int run_count(int dir) { return cmd_read(dir, 0, 1); }

/* Subcommands on a journal directory. A backend with other ways in (issue 11: --postgres CONNINFO)
 * adds its options before the command and its commands here. */
static const struct command commands[] = {
    { "list", "pending timers by due time", run_list },
    { "dead", "dead letters in the order they died", run_dead },
    { "count", "how many pending timers and dead letters", run_count },
    { "verify", "check every file; name the first damaged record", cmd_verify },
};

static int usage(void)
{
    fprintf(stderr, "usage: chime-store COMMAND DIR\n"
                    "       chime-store --postgres CONNINFO init|status|count|list|dead\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(stderr, "  %-7s %s\n", commands[i].name, commands[i].help);
    return 2;
}

#ifdef CHIME_STORE_TOOL_PG
int chime_store_pg_main(const char *conninfo, int argc, char **argv); /* chime-store-pg.c */
#endif

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "--postgres")) {
#ifdef CHIME_STORE_TOOL_PG
        return chime_store_pg_main(argv[2], argc - 3, argv + 3);
#else
        fprintf(stderr, "chime-store: this build has no PostgreSQL support (libpq)\n");
        return 1;
#endif
    }
    if (argc != 3)
        return usage();
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name))
            continue;
        int dir = chime__io_open_dir(argv[2]);
        if (dir < 0) {
            fprintf(stderr, "chime-store: %s: %s\n", argv[2], strerror(-dir)); /* the system's */
            return 1;
        }
        int rc = snapshot_is_journal(dir);
        if (rc <= 0)
            fprintf(stderr, "chime-store: %s: %s\n", argv[2],
                    rc ? strerror(-rc) : "not a journal (no HEAD, LOCK, segment or run in it)");
        rc = rc > 0 ? commands[i].run(dir) : 1;
        chime__io_close(dir);
        return rc;
    }
    return usage();
}
