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

#endif /* CHIME_STORE_SEGMENTS_H */
