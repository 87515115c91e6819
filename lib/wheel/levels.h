/* SPDX-License-Identifier: MIT */
/*
 * The wheel's levels: where each pending timer's entry sits, and how time moves them. levels.c opens
 * with the design (the mixed-radix clock, placement, cascading, the invariants); this header holds
 * the structures and the O(1) paths that schedule and cancel inline.
 *
 * The levels know a timer only as a node index and two fields at the start of the node, in an array
 * the owner gives (nodes, stride): the deadline (a uint64_t at offset 0, in ticks) and the position
 * word (a uint32_t at offset 8). They reach those two as scalars (chime__node_deadline,
 * chime__node_pos), never through a struct of their own, so an owner's node may be any type that
 * begins with them: the public wheel's (nodes.h) and the threaded runtime's records. What a node
 * holds beyond them, its id, and what firing it means are the owner's business; the levels call its
 * fire function for each timer that comes due.
 *
 * Not thread-safe: one owner, calls never overlap (the owner's callbacks run inside advance).
 */
#ifndef CHIME_WHEEL_LEVELS_H
#define CHIME_WHEEL_LEVELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chime.h"
#include "wheel/slot.h"

/*
 * The levels a wheel may use: up to CHIME_MAX_LEVELS configured ones, then hidden levels of
 * CHIME__HIDDEN_SLOTS slots each until one spans every tick up to 2^64 (levels.c, "far timers").
 * The most: 8 configured levels of 2 slots reach 2^8 ticks; ten hidden levels of 64 reach 2^68.
 */
#define CHIME__HIDDEN_SLOTS 64u
#define CHIME__LEVELS_MAX 18u
_Static_assert(CHIME__LEVELS_MAX <= 32, "occupied is a 32-bit mask");

/* A node's position word: the index of its entry, and which array holds it. */
#define CHIME__POS_DUE (UINT32_C(1) << 31)   /* the entry is in the due array, not a slot */
#define CHIME__POS_OWNER (UINT32_C(1) << 30) /* the owner's to use; the levels keep it as it is */
#define CHIME__POS_INDEX (CHIME__POS_OWNER - 1)
/* At most this many nodes (2^28): a slot then never reaches 2^30 entries (slot.h's bound is twice
 * the live entries plus a few), so an index fits CHIME__POS_INDEX, and CHIME__DEAD is no node. */
#define CHIME__MAX_NODES (UINT32_C(1) << 28)

/* Where the two fields the levels use lie in every node. */
#define CHIME__NODE_DEADLINE_AT 0 /* uint64_t: the deadline, in ticks */
#define CHIME__NODE_POS_AT 8      /* uint32_t: CHIME__POS_DUE | index, or a slot index (the slot follows
                                     from the deadline) */

struct chime__level {
    uint64_t base;     /* first tick of the rotation now is in: now - now % rotation */
    uint64_t last;     /* rotation - 1, or UINT64_MAX when the rotation reaches 2^64 */
    uint64_t span;     /* ticks per slot */
    uint64_t span_inv; /* floor((2^64 - 1) / span): slot_of() divides by multiplying */
    uint64_t summary;  /* bit w set iff words[w] != 0 (at most 4096 / 64 = 64 words) */
    uint64_t *words;   /* occupancy: bit s set iff slots[s] holds a live entry */
    struct chime__slot *slots;
    uint32_t nslots;
};
_Static_assert(CHIME_MAX_SLOTS <= 64 * 64, "one summary word covers every bitmap word of a level");

/*
 * Fire node idx, whose entry has just been consumed (the entry is no longer live; its node is the
 * owner's again). Return 0 once done (the owner may have run a callback, re-armed the node with
 * chime__levels_place, or freed it), or -ENOMEM if it could not re-arm: then it must have done
 * nothing at all, and the levels put the entry back and stop the advance there.
 */
typedef int chime__fire_fn(void *ctx, uint32_t idx);

enum chime__firing { CHIME__FIRING_NONE, CHIME__FIRING_DUE, CHIME__FIRING_SLOT };

/* Removals (cancels, the old entries of reschedules) queued before their tombstones are written
 * together (removal.c, "deferred removals"). */
#define CHIME__PENDING 16u

struct chime__levels {
    char *nodes;           /* node i's header is at nodes + i * stride; the owner updates it */
    size_t stride;
    char *cold;            /* the owner's other data for node i, at cold + i * cold_stride (or NULL):
                              fetched ahead when the node is about to fire */
    size_t cold_stride;
    uint64_t now;
    uint64_t advance_to;   /* the target of the advance running */
    uint32_t occupied;     /* bit i set iff level i holds a live entry (I3) */
    unsigned nlevels;      /* configured levels in use, then the hidden ones */
    unsigned nconfigured;
    bool advancing;
    bool partial;          /* an advance stopped at its limit (I6) */
    enum chime__firing firing; /* the array being fired, while advancing or partial */
    uint32_t firing_slot;  /* with CHIME__FIRING_SLOT: the level-0 slot (its bit is clear meanwhile) */
    uint32_t cursor;       /* the next entry to fire in that array */
    uint32_t firing_left;  /* live entries from the cursor to the end of what this advance fires */
    uint32_t due_end;      /* with CHIME__FIRING_DUE: entries [0, due_end) fire in this advance */
    uint32_t due_tail_dead; /* with CHIME__FIRING_DUE: tombstones among [due_end, len), the part
                               scheduled since, which is compacted on its own (I4) */
    uint32_t due_mark;     /* while a call resumes a level-0 slot: the due array's length when it
                              began (due_marked); those entries fire right after the slot */
    bool due_marked;
    struct chime__slot due; /* timers scheduled at or before now: they fire in the next advance */
    uint64_t due_min;      /* at most the smallest deadline in the due array (may be stale-low) */
    size_t live;           /* live entries: the timers the levels hold */
    uint64_t moved;        /* entries cascaded down a level, in all (a statistic for the tests) */
    chime__fire_fn *fire;
    void *ctx;
    char *table;           /* every level's slot table and bitmap words: one mapping (levels.c) */
    size_t table_bytes;
    /* The last tick of each level's current rotation, base(i) + rotation(i) - 1 (saturated at
     * UINT64_MAX): a deadline d >= now is in level i's rotation iff d <= limit[i]. Dense, so that
     * finding a level reads one or two cache lines. */
    uint64_t limit[CHIME__LEVELS_MAX];
    struct chime__level lv[CHIME__LEVELS_MAX];
    /* Removals not yet applied (removal.c, "deferred removals"): the deadline and position word each
     * node had when it was cancelled. Only while no array is being fired (I7). */
    uint32_t npending;
    uint32_t pending_pos[CHIME__PENDING];
    uint64_t pending_deadline[CHIME__PENDING];
};

/*
 * Set up levels for cfg (already validated by the owner) starting at cfg->start. Return: 0, or
 * -ENOMEM (nothing to destroy).
 */
int chime__levels_init(struct chime__levels *L, const struct chime_wheel_config *cfg,
                       chime__fire_fn *fire, void *ctx);
/* Free the levels' memory (not the nodes). */
void chime__levels_destroy(struct chime__levels *L);

/* Node idx's deadline and position word (see CHIME__NODE_*_AT). */
static inline uint64_t *chime__node_deadline(const struct chime__levels *L, uint32_t idx)
{
    return (uint64_t *)(L->nodes + (size_t)idx * L->stride + CHIME__NODE_DEADLINE_AT);
}

static inline uint32_t *chime__node_pos(const struct chime__levels *L, uint32_t idx)
{
    return (uint32_t *)(L->nodes + (size_t)idx * L->stride + CHIME__NODE_POS_AT);
}

/*
 * offset / span without a division instruction (a 64-bit div was a quarter of a schedule's cost).
 * With m = floor((2^64 - 1) / span), q = floor(offset * m / 2^64) is the quotient or one less, since
 * offset * m / 2^64 > offset / span - 1 for every offset < 2^64; one compare corrects it (without a
 * branch: which way it goes depends on the deadline). Exact for span 1 too (m = 2^64 - 1).
 */
static inline uint32_t chime__slot_of(const struct chime__level *lv, uint64_t offset)
{
    __extension__ typedef unsigned __int128 u128; /* gcc and clang; __extension__ for -pedantic */
    uint64_t q = (uint64_t)(((u128)offset * lv->span_inv) >> 64);
    q += offset - q * lv->span >= lv->span;
    return (uint32_t)q;
}

/* The level and slot a deadline >= now belongs to: the lowest level whose current rotation holds it
 * (I1). O(levels), one multiply. For placing: the loop exits where a new timer lands, which is the
 * same level time after time in a steady workload, so the branch predicts. */
static inline unsigned chime__levels_find(const struct chime__levels *L, uint64_t d, uint32_t *slot)
{
    unsigned i = 0;
    while (d > L->limit[i]) /* the top level's limit is UINT64_MAX: the loop ends there */
        i++;
    *slot = chime__slot_of(&L->lv[i], d - L->lv[i].base);
    return i;
}

/*
 * As chime__levels_find for a deadline known to lie below level `top` (inside its rotation), without
 * a branch on the deadline. The deadline has usually just come from a node that missed the cache,
 * and a mispredicted branch on it would throw away the work the CPU started past it (the caller's
 * next operation, its next miss), turning independent misses into a chain. Containment is monotone
 * (a level's rotation lies inside every higher one's), so the level is the number of levels below
 * top that do not hold d.
 */
static inline unsigned chime__levels_find_below(const struct chime__levels *L, uint64_t d,
                                                unsigned top, uint32_t *slot)
{
    unsigned level = 0;
    for (unsigned i = 0; i < top; i++)
        level += d > L->limit[i];
    *slot = chime__slot_of(&L->lv[level], d - L->lv[level].base);
    return level;
}

/* As chime__levels_find for a timer the levels hold (a cancel, a reschedule): its level is occupied
 * (I3), or it is level 0's slot being fired, so the highest occupied level bounds the search. */
static inline unsigned chime__levels_find_held(const struct chime__levels *L, uint64_t d,
                                               uint32_t *slot)
{
    unsigned top = 31 - (unsigned)__builtin_clz(L->occupied | 1); /* | 1: clz(0) is undefined */
    return chime__levels_find_below(L, d, top, slot);
}

/* Out-of-line halves of the inline paths below. */
int chime__levels_append_slow(struct chime__levels *L, unsigned level, uint32_t s, uint32_t idx);
void chime__levels_settle(struct chime__levels *L, struct chime__slot *arr, unsigned level,
                          uint32_t s, uint32_t tombstoned);
/* While the due array is being fired: empty or compact its part beyond due_end if due_tail_dead
 * says it needs it (I4). */
void chime__levels_settle_due_tail(struct chime__levels *L);

/* Set the occupancy bits for a slot that has just become non-empty (I3). */
static inline void chime__levels_mark(struct chime__levels *L, unsigned level, uint32_t s)
{
    struct chime__level *lv = &L->lv[level];
    lv->words[s >> 6] |= UINT64_C(1) << (s & 63);
    lv->summary |= UINT64_C(1) << (s >> 6);
    L->occupied |= UINT32_C(1) << level;
}

/* Clear the occupancy bits of a slot that has just become empty (I3). */
static inline void chime__levels_unmark(struct chime__levels *L, unsigned level, uint32_t s)
{
    struct chime__level *lv = &L->lv[level];
    if ((lv->words[s >> 6] &= ~(UINT64_C(1) << (s & 63))) == 0 &&
        (lv->summary &= ~(UINT64_C(1) << (s >> 6))) == 0)
        L->occupied &= ~(UINT32_C(1) << level);
}

/* Node idx's entry now sits at index `at` of the same array: tell its node. */
static inline void chime__levels_moved(struct chime__levels *L, uint32_t idx, uint32_t at)
{
    uint32_t *pos = chime__node_pos(L, idx);
    *pos = (*pos & ~CHIME__POS_INDEX) | at;
}

/* Where the entry of a node whose header reads (deadline, pos) is: return its level, or
 * CHIME__LEVELS_MAX for the due array, and its slot in *s (0 for the due array). */
static inline unsigned chime__levels_locate(const struct chime__levels *L, uint64_t deadline,
                                            uint32_t pos, uint32_t *s)
{
    *s = 0;
    return pos & CHIME__POS_DUE ? CHIME__LEVELS_MAX : chime__levels_find_held(L, deadline, s);
}

/* The array queued removal k (< npending) names, as it names it: no tombstone written yet. */
static inline const struct chime__slot *chime__levels_queued(const struct chime__levels *L,
                                                             uint32_t k)
{
    uint32_t s;
    unsigned level = chime__levels_locate(L, L->pending_deadline[k], L->pending_pos[k], &s);
    return level == CHIME__LEVELS_MAX ? &L->due : &L->lv[level].slots[s];
}

/* Append node idx to slot s of a level, writing its position (keeping the owner bit).
 * Return: 0, or -ENOMEM (nothing changed). */
static inline int chime__levels_append(struct chime__levels *L, unsigned level, uint32_t s,
                                       uint32_t idx)
{
    struct chime__slot *sl = &L->lv[level].slots[s];
    if (sl->len == sl->cap)
        return chime__levels_append_slow(L, level, s, idx);
    sl->v[sl->len] = idx;
    uint32_t *pos = chime__node_pos(L, idx);
    *pos = (*pos & CHIME__POS_OWNER) | sl->len;
    if (sl->len++ == 0)
        chime__levels_mark(L, level, s);
    return 0;
}

/* As chime__levels_place for a deadline at or before now. */
int chime__levels_place_due(struct chime__levels *L, uint32_t idx);

/*
 * Put node idx in the array its deadline selects: the due array if deadline <= now (it fires in the
 * next advance), else the slot of the lowest level whose rotation holds it. Writes the node's pos.
 * Does not count it as live: the caller adds it (chime__levels_add) or it was live already (a move).
 * Return: 0, or -ENOMEM (nothing changed). O(1) amortised: O(levels) compares, one multiply.
 */
static inline int chime__levels_place(struct chime__levels *L, uint32_t idx)
{
    uint64_t d = *chime__node_deadline(L, idx);
    if (d <= L->now)
        return chime__levels_place_due(L, idx);
    uint32_t s;
    unsigned level = chime__levels_find(L, d, &s);
    return chime__levels_append(L, level, s, idx);
}

/* Node idx has just been placed as a new timer: count it. */
static inline void chime__levels_add(struct chime__levels *L)
{
    L->live++;
}

/* Out-of-line halves of chime__levels_remove_at. */
void chime__levels_remove_now(struct chime__levels *L, uint64_t deadline, uint32_t pos);
void chime__levels_flush(struct chime__levels *L);

/*
 * Remove the entry of a node whose header read (deadline, pos) when it was placed. Outside an
 * advance the removal is queued, and applied with the next CHIME__PENDING - 1 others (or by the
 * next advance, trim or flush; next looks past them): only two stores in cache wait for the node's
 * cache miss, where finding its slot and writing its tombstone would hold up the caller's next
 * operations (removal.c, "deferred removals"). While an array is being fired it is applied at once:
 * a tombstone (or, for the newest entry, a shorter array), compaction when tombstones outnumber the
 * live entries, and an array with no live entry emptied, so that an empty slot never looks
 * occupied. Not counted out of live: see chime__levels_sub. O(1) amortised.
 */
static inline void chime__levels_remove_at(struct chime__levels *L, uint64_t deadline, uint32_t pos)
{
    if (L->firing != CHIME__FIRING_NONE) {
        chime__levels_remove_now(L, deadline, pos);
        return;
    }
    uint32_t n = L->npending;
    L->pending_deadline[n] = deadline;
    L->pending_pos[n] = pos;
    L->npending = n + 1;
    if (n + 1 == CHIME__PENDING)
        chime__levels_flush(L);
}

/* Tombstone node idx's entry (a cancel). */
static inline void chime__levels_remove(struct chime__levels *L, uint32_t idx)
{
    chime__levels_remove_at(L, *chime__node_deadline(L, idx), *chime__node_pos(L, idx));
}

/*
 * Move node idx, already placed, to a new deadline (a reschedule): placed anew at the end of its new
 * array, then its old entry tombstoned. Return: 0, or -ENOMEM with the timer where it was.
 */
int chime__levels_move(struct chime__levels *L, uint32_t idx, uint64_t deadline);

/*
 * Move a periodic timer's deadline, which has just come due, to its first boundary after the running
 * advance's target: deadline + k * period with k >= 1. `last` is the last tick the owner's clock
 * can reach: UINT64_MAX for the public wheel, whose time is the caller's; for the runtime, the
 * tick of UINT64_MAX ns (a boundary beyond it never came, and the timer stayed pending for good:
 * found in review). Return: false if that boundary would pass `last` (the deadline is then
 * unchanged and the timer ends, as a one-shot would). For the owners' fire functions.
 */
static inline bool chime__levels_next_boundary(const struct chime__levels *L, uint64_t *deadline,
                                               uint64_t period, uint64_t last)
{
    /* periods passed: k - 1. Compared before adding 1, which would wrap when it is UINT64_MAX.
     * deadline <= now <= advance_to <= last: time past `last` is never reached. */
    uint64_t passed = (L->advance_to - *deadline) / period;
    if (passed >= (last - *deadline) / period)
        return false;
    *deadline += (passed + 1) * period;
    return true;
}

/* A timer left the levels for good (cancelled, or fired and not re-armed). */
static inline void chime__levels_sub(struct chime__levels *L)
{
    L->live--;
}

/*
 * Advance towards now, firing at most limit timers through L->fire. Return: how many fired. Sets
 * *done when the levels have reached now; otherwise (the limit, or memory ran out while cascading
 * or re-arming) the next call carries on. A now before the current one, or a call from inside a
 * fire, does nothing.
 */
size_t chime__levels_advance(struct chime__levels *L, uint64_t now, size_t limit, bool *done);

/* The next time anything happens (see chime_wheel_next), looking past the slots that queued removals
 * empty (without applying them). Return: 0, or -ENOENT if nothing is held. */
int chime__levels_next(const struct chime__levels *L, uint64_t *when);

/* Walk everything and verify the invariants (levels_check.c), the queued removals included (it does
 * not apply them). nodes_limit: indices below it are nodes. Return: NULL, or a static description
 * of the first that fails. O(live + dead + bitmap words). */
const char *chime__levels_check(const struct chime__levels *L, uint32_t nodes_limit);

/* Walk every slot of every level, bits clear included: nothing held where no bit says so.
 * O(total slots): for tests, every few thousand steps. */
const char *chime__levels_check_slots(const struct chime__levels *L);

/* Apply the queued removals, then free the arrays of empty slots (an empty slot keeps its array for
 * the next timers that land there, so a slot that fills and fires every second does not go back to
 * the allocator each time). Return: bytes freed. O(total slots). */
size_t chime__levels_trim(struct chime__levels *L);

#endif /* CHIME_WHEEL_LEVELS_H */
