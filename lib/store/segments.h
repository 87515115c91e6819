/* SPDX-License-Identifier: MIT */
/*
 * Which of the journal's segments count, and up to where: step 3 of replay (replay.c), in one place
 * for open and for chime-store's list, dead and count, so that the tool reads a journal exactly as
 * open would (format.md, "The reader's rules").
 */
#ifndef CHIME_STORE_SEGMENTS_H
#define CHIME_STORE_SEGMENTS_H

#include <stddef.h>
#include <stdint.h>

#include "store/format.h"
#include "store/merge.h"

/*
 * Read the segments segs[0 .. n) (ascending numbers, those no run covers; head: the segment HEAD
 * names) in order, calling fn (if not NULL) with each whole record of those that count, MARKs
 * skipped. valid[i] receives the offset after segment i's last whole record (0 if its header is
 * not whole), *usable how many segments count: those before the first torn one, and the torn one up
 * to valid[]. *next_version is raised to every header's next_version. The rules:
 *   - a segment whose header is not whole (or names another file), or whose file is shorter than
 *     its header says it was created, is a creation a crash cut, torn with nothing valid; unless
 *     HEAD names it or something was written after its header: damage; longer: damage;
 *   - a segment that ends in something other than zeros is torn there; damage if a later group
 *     commit's MARK shows that what is torn had been synced, or if HEAD names a later segment;
 *   - a segment whose MARKs say the one before it ended elsewhere than its records do: damage;
 *   - any later segment written to after a torn one: damage.
 * Reads only; holds nothing open on return.
 * Return: 0; -EBADMSG damage (open refuses the journal); fn's error; an I/O error; -ENOMEM.
 */
int chime__segments_read(int dir, const uint64_t *segs, size_t n, uint64_t head,
                         chime__emit_fn *fn, void *ctx, uint64_t *valid, size_t *usable,
                         uint64_t *next_version);

/* How a segment's opening (chime__file_open) fits the rules above, before its records are read. */
enum chime__seg_fit {
    CHIME__SEG_FITS = 0, /* a whole header, this segment's, the file the size it was created at */
    CHIME__SEG_HEADER,   /* a header not whole (-EBADMSG), or a whole one of another file */
    CHIME__SEG_SHORT,    /* this segment's header, the file shorter than it was created */
    CHIME__SEG_LONG,     /* this segment's header, the file longer than it was created */
};

/* The fit of segment `number` from chime__file_open's result: open_err 0 (then size and h are
 * what it read) or -EBADMSG (then they are unused). Cost: O(1); reads nothing. */
enum chime__seg_fit chime__segment_fit(int open_err, uint64_t number, uint64_t size,
                                       const struct chime__file_header *h);

/* What a segment that does not fit is: a creation a crash cut, or damage, and by which rule. */
enum chime__seg_verdict {
    CHIME__SEG_CUT = 0, /* a creation a crash cut: torn, nothing valid in it */
    CHIME__SEG_GREW,    /* damage: longer than created (a segment is never grown) */
    CHIME__SEG_WRITTEN, /* damage: something was written after its header */
    CHIME__SEG_NAMED,   /* damage: HEAD names it (HEAD names a segment only once it is created) */
};

/* The verdict on segment `number` of directory dir, whose fit is not CHIME__SEG_FITS (head: the
 * segment HEAD names). The one rule for open (chime__segments_read) and chime-store's verify.
 * Cost: reads the segment after its header (chime__reader_written) unless it grew.
 * Return: a verdict (>= 0); -ENOENT if the file is gone; another read error. */
int chime__segment_verdict(int dir, uint64_t number, uint64_t head, enum chime__seg_fit fit);

#endif /* CHIME_STORE_SEGMENTS_H */
