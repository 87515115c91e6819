/* SPDX-License-Identifier: MIT */
/*
 * The journal's files as a whole: which runs and segments make up its content, which a crash left
 * behind, and whether any is missing (format.md, "Files"). Open (replay.c) and the chime-store tool
 * both read a directory through this, so that they agree on what it holds.
 *
 * THE CHAIN. Segments are numbered from 1 in a new journal, and every number from 1 to the newest
 * is covered, at every instant, by exactly one live file: a run covers the numbers of the segments
 * it replaced (lo..hi), a segment its own. A flush writes a run even when nothing of its segments
 * survives, a merge's run covers all of its inputs, and only the newest segments, holding no record,
 * are ever deleted without a run to replace them (after which the log reuses their numbers). So a
 * number no live file covers is a file that was lost (deleted by hand, a damaged directory), and its
 * records with it: open refuses the journal rather than open it without them. A run's own length is
 * in its header (format.md), so a run cut short is refused too. The loss of the newest files, which
 * leaves no gap, is told by the head (head.h): a number in HEAD above every number covered. A
 * journal with files but no whole HEAD has lost that file too.
 *
 * Not thread-safe; reads the directory only (the caller deletes what it decides to).
 */
#ifndef CHIME_STORE_FILES_H
#define CHIME_STORE_FILES_H

#include <stddef.h>
#include <stdint.h>

struct chime__range {
    uint64_t lo, hi;
};

struct chime__journal_files {
    struct chime__range *runs;      /* live runs (contained in no other), in order */
    size_t nruns;
    uint64_t *segs;                 /* live segments (above every live run), in order */
    size_t nsegs;
    struct chime__range *gone_runs; /* runs a live run contains: a merge's inputs a crash left */
    size_t ngone_runs;
    uint64_t *gone_segs;            /* segments a live run covers: flushed, not yet deleted */
    size_t ngone_segs;
    /* The first damage to the chain, if any: a run overlapping the one before it, or numbers no
     * live file covers. */
    enum {
        CHIME__CHAIN_WHOLE,
        CHIME__CHAIN_OVERLAP,
        CHIME__CHAIN_GAP,
        CHIME__CHAIN_HEADLESS, /* files, but no whole HEAD (head.h) */
    } chain;
    struct chime__range missing;    /* CHIME__CHAIN_GAP: the first numbers no file covers (up to
                                       the head's when the newest are lost);
                                       CHIME__CHAIN_OVERLAP: the two runs' lo numbers */
    uint64_t head;                  /* HEAD's number (head.h); 0 when there is no whole HEAD */
};

/*
 * List directory dir into f (which chime__journal_files_free frees, whatever the return), HEAD read
 * first (files are only ever added above the head it held). *.tmp files (runs a crash left before
 * their rename) are no part of it; with drop_tmp they are deleted once the listing is judged, not
 * on -EPROTO (open does; the tool leaves them).
 * Return: 0 (f->chain says whether the chain is whole); -EBADMSG a file is named as a run the
 * journal never names one (lo 0 or above hi); -EPROTO HEAD is of another format version, or the
 * chain is not whole (no HEAD: formats 1 to 3 wrote none, format.md) and a listed file's header is
 * of another version; -ENOMEM; an error of the listing, of reading HEAD or of a deletion.
 */
int chime__journal_files_list(int dir, struct chime__journal_files *f, int drop_tmp);
void chime__journal_files_free(struct chime__journal_files *f);

#endif /* CHIME_STORE_FILES_H */
