/* SPDX-License-Identifier: MIT */
/*
 * Removing entries from the levels: tombstones, compaction, and the queue of deferred removals.
 * levels.c holds the design of the levels themselves and their invariants (I1-I7).
 *
 * TOMBSTONES
 * A removal (a cancel, the old entry of a reschedule, a timer a fire did not re-arm) writes
 * CHIME__DEAD over its entry, at the address the node's position word gives: nothing else is read or
 * moved, so arrival order is kept for free. When the entry is its array's newest, the array just gets
 * shorter. An array whose tombstones outnumber its live entries twice (and more than
 * CHIME__SLOT_MIN_DEAD) is compacted at once, keeping order; an array left with no live entry is
 * emptied and its bit cleared (I3, I4).
 *
 * DEFERRED REMOVALS
 * A cancel that applied its removal at once would find the entry's slot from the node's deadline
 * and write a tombstone there, a chain of some thirty instructions that all wait for the node's
 * cache miss. At 10^6 timers that miss goes to memory, and the waiting instructions fill the CPU's
 * scheduler, so the next cancels' misses cannot start until this one's has been served: measured,
 * the chain tripled the time of a cancel (a dependent load to memory costs about 140 ns on this
 * machine; at 10^6 timers a random cancel took 206 ns, median of 7 processes, where the node's
 * lookup and release alone took 68). So outside an advance a removal only copies the node's
 * deadline and position word into a queue of CHIME__PENDING (levels.h). The queue is applied when
 * it is full, and before anything that walks or frees the slots (advance, trim): by then the misses
 * are long served and the batch's tombstones are written back to back. next() does not apply it: it
 * looks past the slots the queue would empty (levels.c), so that it stays O(1) and writes nothing.
 * A queued removal names an array and an index as the node's header did when it was removed: the
 * node may since have been freed, reused and placed anywhere (a new entry is always appended, so
 * never at that index), and neither the array nor the index moves meanwhile, since only an advance
 * or the queue's own application compacts or empties an array, and an advance applies the queue
 * first.
 */
#include "wheel/levels.h"

/*
 * Drop the tombstones among an array's entries from `from` on, keeping the order of the rest; each
 * moved entry's node is told. Two passes without a branch on the entries: tombstones fall where the
 * cancels fell, at random, and a branch on each would be mispredicted about every other entry.
 */
static void compact(struct chime__levels *L, struct chime__slot *arr, uint32_t from)
{
    uint32_t first = from; /* entries before the first tombstone stay where they are */
    while (first < arr->len && arr->v[first] != CHIME__DEAD)
        first++;
    uint32_t keep = first, mark = L->due_mark;
    bool marked = arr == &L->due && L->due_marked;
    for (uint32_t i = first; i < arr->len; i++) {
        uint32_t idx = arr->v[i];
        if (marked && i == L->due_mark)
            mark = keep; /* due_mark counts the entries before it: the same ones, moved down */
        arr->v[keep] = idx;
        keep += idx != CHIME__DEAD;
    }
    for (uint32_t j = first; j < keep; j++)
        chime__levels_moved(L, arr->v[j], j);
    if (marked)
        L->due_mark = L->due_mark >= arr->len ? keep : mark;
    arr->dead -= arr->len - keep;
    arr->len = keep;
}

/*
 * The due array is being fired and a removal fell beyond due_end, among the timers made due since
 * this advance's part was fixed (or its firing has just begun behind what the callbacks of a
 * resumed level-0 slot left there: start_due): no cursor bounds that part, so it is kept as any
 * array outside a firing is (I4): emptied when nothing live is left in it, compacted on its own
 * when its tombstones outnumber its live entries twice.
 */
void chime__levels_settle_due_tail(struct chime__levels *L)
{
    struct chime__slot *due = &L->due;
    uint32_t tail = due->len - L->due_end, live = tail - L->due_tail_dead;
    if (live == 0) {
        due->dead -= L->due_tail_dead;
        due->len = L->due_end;
    } else if (L->due_tail_dead > CHIME__SLOT_MIN_DEAD && L->due_tail_dead > 2 * live) {
        compact(L, due, L->due_end);
    } else {
        return;
    }
    L->due_tail_dead = 0;
}

/* Is arr the array an advance is firing (its entries must stay where they are until it is done)? */
static bool being_fired(const struct chime__levels *L, const struct chime__slot *arr, unsigned level,
                        uint32_t s)
{
    if (L->firing == CHIME__FIRING_DUE)
        return arr == &L->due;
    return L->firing == CHIME__FIRING_SLOT && level == 0 && s == L->firing_slot;
}

void chime__levels_settle(struct chime__levels *L, struct chime__slot *arr, unsigned level,
                          uint32_t s, uint32_t tombstoned)
{
    if (being_fired(L, arr, level, s)) {
        uint32_t end = L->firing == CHIME__FIRING_DUE ? L->due_end : arr->len;
        if (tombstoned >= L->cursor && tombstoned < end)
            L->firing_left--; /* one fewer to fire in this advance */
        else if (L->firing == CHIME__FIRING_DUE && tombstoned >= end)
            chime__levels_settle_due_tail(L);
        return; /* the part being fired is compacted or freed once the advance has fired it */
    }
    if (chime__slot_live(arr) == 0) {
        chime__slot_clear(arr);
        /* The due array's entries a resumed call counts as its own (due_mark) are gone: timers due
         * appended from now on are not among them, and fire in the next call (found in review: a
         * stale mark made callbacks' due timers fire in this one, and firing_left underflow). */
        if (arr == &L->due)
            L->due_mark = 0;
        if (level < CHIME__LEVELS_MAX)
            chime__levels_unmark(L, level, s); /* I3: no live entry, no bit */
    } else if (chime__slot_wants_compaction(arr)) {
        compact(L, arr, 0);
    }
}

/* The array at (level, s) as chime__levels_locate() names it. */
static struct chime__slot *array_at(struct chime__levels *L, unsigned level, uint32_t s)
{
    return level == CHIME__LEVELS_MAX ? &L->due : &L->lv[level].slots[s];
}

/* Drop entry `at` of arr: a tombstone, or for the newest entry a shorter array (unless it is being
 * fired: the cursor's bounds must not move; the due array's entries beyond due_end are not within
 * them, but they are counted, in due_tail_dead). */
static void drop(struct chime__levels *L, struct chime__slot *arr, uint32_t at)
{
    if (at + 1 == arr->len && L->firing == CHIME__FIRING_NONE) {
        arr->len--;
    } else {
        arr->v[at] = CHIME__DEAD;
        arr->dead++;
        if (L->firing == CHIME__FIRING_DUE && arr == &L->due && at >= L->due_end)
            L->due_tail_dead++;
    }
}

void chime__levels_remove_now(struct chime__levels *L, uint64_t deadline, uint32_t pos)
{
    uint32_t s, at = pos & CHIME__POS_INDEX;
    unsigned level = chime__levels_locate(L, deadline, pos, &s);
    struct chime__slot *arr = array_at(L, level, s);
    drop(L, arr, at);
    chime__levels_settle(L, arr, level, s, at);
}

/*
 * Apply the queued removals: every tombstone first, then free or compact the arrays that need it. In
 * that order because a compaction renumbers its array's entries, which the removals still to apply
 * name by index. An array needs it from the removal that makes it empty or tombstone-heavy on (both
 * only become more true as removals are applied), so the second pass visits those alone; a second
 * visit of one array finds nothing to do. Reads nothing of the nodes but the live ones a compaction
 * moves.
 */
void chime__levels_flush(struct chime__levels *L)
{
    uint32_t n = L->npending, nsettle = 0;
    struct {
        struct chime__slot *arr;
        unsigned level;
        uint32_t slot;
    } settle[CHIME__PENDING];
    L->npending = 0;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t s;
        unsigned level = chime__levels_locate(L, L->pending_deadline[k], L->pending_pos[k], &s);
        struct chime__slot *arr = array_at(L, level, s);
        drop(L, arr, L->pending_pos[k] & CHIME__POS_INDEX);
        if ((unsigned)(chime__slot_live(arr) == 0) | (unsigned)chime__slot_wants_compaction(arr)) {
            settle[nsettle].arr = arr;
            settle[nsettle].level = level;
            settle[nsettle++].slot = s;
        }
    }
    for (uint32_t k = 0; k < nsettle; k++)
        chime__levels_settle(L, settle[k].arr, settle[k].level, settle[k].slot, 0);
}
