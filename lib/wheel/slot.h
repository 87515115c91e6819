/* SPDX-License-Identifier: MIT */
/*
 * A wheel slot: a growable array of 32-bit node indices, in the order the timers were put there.
 *
 * An entry is a node index or CHIME__DEAD. Removing a timer from the middle (cancel, reschedule)
 * writes CHIME__DEAD over its entry, a tombstone: one store to an address the node itself gives
 * (its position), nothing else read or moved, so FIFO order is kept for free. Tombstones are
 * reclaimed when the slot is next walked (fired or cascaded), or at once by a compaction (levels.c)
 * when they are twice the live entries, so a slot never holds more than about three entries per live
 * timer: memory stays bounded under any cancel storm. (Compacting at half as many tombstones cost
 * ten instructions more per churn operation, measured: each compaction moves every live entry and
 * rewrites its node.)
 *
 * Arrays start at CHIME__SLOT_MIN entries and quadruple when full; they keep their capacity when they
 * empty (the owner frees idle ones when it trims). Quadrupling touches half as many of the
 * allocator's size classes on the way up as doubling does, and at 10^3 timers each class touched is
 * a partly used page: measured in fresh processes, 1000 timers cost 57.3 bytes each this way, 65.5
 * doubling from 4 (at 10^6, 38.0 against 37.8: past 16 KiB an array's untouched pages are not
 * resident). Every free and realloc passes the exact size the array was allocated with (jemalloc's
 * sized deallocation requires it).
 *
 * Not thread-safe: a slot belongs to one wheel.
 */
#ifndef CHIME_WHEEL_SLOT_H
#define CHIME_WHEEL_SLOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CHIME__DEAD UINT32_MAX /* a tombstone; never a node index (see CHIME__MAX_NODES) */
#define CHIME__SLOT_MIN 8u     /* the smallest allocation, in entries (32 bytes) */
#define CHIME__SLOT_MIN_DEAD 8u /* tombstones a slot may hold whatever its live count */

struct chime__slot {
    uint32_t *v;   /* cap entries, NULL iff cap == 0 */
    uint32_t len;  /* entries in use, tombstones included */
    uint32_t cap;
    uint32_t dead; /* tombstones among the len entries */
};

/* Make room for one more entry (quadruple, or CHIME__SLOT_MIN). Return: 0, or -ENOMEM (unchanged).
 */
int chime__slot_grow(struct chime__slot *s);

/*
 * Append idx and return its position, or -ENOMEM (s unchanged). O(1) amortised: a realloc when the
 * array is full.
 */
static inline int64_t chime__slot_append(struct chime__slot *s, uint32_t idx)
{
    if (s->len == s->cap) {
        int err = chime__slot_grow(s);
        if (err)
            return err;
    }
    s->v[s->len] = idx;
    return s->len++;
}

/* Live entries: the timers the slot holds. */
static inline uint32_t chime__slot_live(const struct chime__slot *s)
{
    return s->len - s->dead;
}

/* Take ownership of s's array and leave s empty. */
static inline struct chime__slot chime__slot_take(struct chime__slot *s)
{
    struct chime__slot all = *s;
    *s = (struct chime__slot){ NULL, 0, 0, 0 };
    return all;
}

/* Free s's array (if any) and leave s empty. */
void chime__slot_release(struct chime__slot *s);

/* Forget every entry but keep the array for what comes next. */
static inline void chime__slot_clear(struct chime__slot *s)
{
    s->len = 0;
    s->dead = 0;
}

/* True once tombstones are twice the live entries and enough of them to be worth a pass. The bound
 * this keeps: len <= 3 * live + CHIME__SLOT_MIN_DEAD. */
static inline bool chime__slot_wants_compaction(const struct chime__slot *s)
{
    return (unsigned)(s->dead > CHIME__SLOT_MIN_DEAD) & (unsigned)(s->dead > 2 * chime__slot_live(s));
}

#endif /* CHIME_WHEEL_SLOT_H */
