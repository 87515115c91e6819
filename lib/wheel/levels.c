/* SPDX-License-Identifier: MIT */
/*
 * The hierarchical timing wheel: levels of slots, each slot an array of node indices.
 *
 * LEVELS AS A MIXED-RADIX CLOCK
 * Time is a 64-bit tick count read as a number in a mixed radix: level i has slots[i] slots, and one
 * slot of level i spans a whole rotation of level i-1. With span(0) = 1,
 *
 *     span(i)     = slots[0] * slots[1] * ... * slots[i-1]      ticks per slot of level i
 *     rotation(i) = span(i) * slots[i] = span(i+1)              ticks per turn of level i
 *     digit(t, i) = (t / span(i)) % slots[i]
 *
 * The default layout (CHIME_LAYOUT_MILLISECONDS) is a wall clock with a millisecond tick:
 *
 *     level  slots  granularity (span)   rotation          a timer lands here when it is due...
 *     0      1000   1 ms                 1 s               ...within the current second
 *     1        60   1 s                  1 min             ...within the current minute
 *     2        60   1 min                1 h               ...within the current hour
 *     3        24   1 h                  1 day             ...within the current day
 *     4       512   1 day                512 days          ...within the current 512-day turn
 *     5-9      64   512 days * 64^(k-5)  512 days * 64^(k-4)  hidden levels, for the far future
 *
 * FAR TIMERS: HIDDEN LEVELS
 * Above the configured levels the wheel adds hidden levels of 64 slots each until one of them spans
 * every tick up to 2^64 (five for the default layout, at most ten for 8 levels of 2 slots). A timer
 * beyond the configured top is therefore placed, cascaded and found exactly like any other, and
 * cascades at most once per level it passes: there is no overflow list to rescan at every top-level
 * turn (which cost O(n) per far timer, O(n^2) in all, when each sat in its own top rotation), and
 * the complexity below holds for every deadline up to UINT64_MAX. A level whose rotation reaches
 * 2^64 covers every remaining tick; the levels above it are never made, so nothing can overflow.
 *
 * PLACEMENT BY DIGITS (Varghese & Lauck's scheme 7, as in Kafka and the pre-4.8 Linux wheel)
 * A timer due at d > now goes into the level of the highest digit in which d differs from now, in the
 * slot that digit of d selects. Equivalently: level i is the lowest level whose current rotation,
 * [base(i), base(i) + rotation(i)), contains d, where base(i) = now - now % rotation(i); its slot is
 * (d - base(i)) / span(i) (chime__levels_find). A deadline at or before now goes to the due array
 * and fires at the start of the next advance.
 *
 * Worked example, default layout, now = 0, d = 1 day 02:03:04.005 = 93 784 005 ms. The digits of d
 * are (day 1, hour 2, min 3, s 4, ms 5); the highest digit that differs from now's (all zero) is the
 * day, so the timer goes to level 4, slot 1. At now = 1d 00:00:00.000 that slot is cascaded: relative
 * to the new now the hour digit is the highest that differs, so it moves to level 3, slot 2; at
 * 1d 02:00:00.000 to level 2 slot 3; at 1d 02:03:00.000 to level 1 slot 4; at 1d 02:03:04.000 to
 * level 0 slot 5, and it fires when advance reaches 1d 02:03:04.005. docs/design.md draws this.
 *
 * SLOTS ARE ARRAYS; A NODE KNOWS ITS POSITION
 * A slot is an array of 32-bit node indices in the order the timers arrived (slot.h), and a node's
 * header holds its deadline and pos, the index of its entry. The array holding the entry follows
 * from the deadline: by I1 it is the slot chime__levels_find computes, unless pos says the due
 * array. So a cancel reads one node and, from numbers already in cache, finds the slot and writes one
 * tombstone (CHIME__DEAD) at a known address: no neighbour is touched. Outside an advance that part
 * is queued and applied sixteen removals at a time, so that nothing waits on the node's cache miss
 * (removal.c, "deferred removals"); next() looks past the slots the queue would empty. Firing and
 * cascading walk an array front to back, a stream of independent loads, and fetch the nodes a few
 * entries ahead of use so that their cache misses overlap instead of forming a chain.
 *
 * INVARIANTS (chime__levels_check() verifies each after every step of the randomised tests)
 *  I1. A live entry in level i, slot s names a node with deadline d such that base(i) <= d <=
 *      base(i) + rotation(i) - 1, d lies in no lower level's current rotation, s = (d - base(i)) /
 *      span(i), and the node's pos is that entry's index (without CHIME__POS_DUE). Hence d > now and
 *      s > digit(now, i): every occupied slot is ahead of the clock hand, none is behind it (but for
 *      I6).
 *  I2. Every timer of level i is due before every timer of level i+1: level i's timers all fall in
 *      the current slot of level i+1, and level i+1's occupied slots are later ones (I1).
 *  I3. Bit s of level i's bitmap is set iff slot s holds a live entry (but the level-0 slot being
 *      fired, which is unmarked while it fires); summary bit w iff word w is not zero; bit i of
 *      `occupied` iff level i has a set bit. An array with no live entry is emptied (len 0).
 *  I4. Tombstones: a slot's `dead` counts its CHIME__DEAD entries exactly, and outside the array
 *      being fired, dead <= max(2 * live, CHIME__SLOT_MIN_DEAD): len <= 3 * live + 8 (live as the
 *      array counts it, I7). While the due array is being fired, the same bound holds for its part
 *      beyond due_end (timers made due since; due_tail_dead counts its tombstones), so a cancel
 *      storm between the calls of a bounded advance cannot grow it without bound. The due array's
 *      entries name nodes with deadline <= now and pos = CHIME__POS_DUE | index. Each node is named
 *      by exactly one live entry, and the live count is their number.
 *  I5. Arrays keep arrival order, and cascading walks an array in order and appends: timers with
 *      equal deadlines stay in the order they were scheduled, whatever levels they passed through.
 *  I6. Only between the calls of a bounded advance (the threaded runtime works through a firing storm
 *      in batches) may the due array or a level-0 slot due at now be half fired; the next advance
 *      fires the rest first, from the cursor.
 *  I7. Removals are queued only while no array is being fired, so the queue is empty whenever one is.
 *      Each queued removal names a distinct entry that is not a tombstone, whose node no longer
 *      counts it: I1, I3 and I4 hold for the arrays as if every queued removal had been applied,
 *      but for the counts, which the application brings up to date (a slot may be marked and hold
 *      no live entry until then).
 *
 * ADVANCING WITHOUT WALKING EMPTY TIME
 * By I1 and I2 the next thing that can happen is in the lowest occupied level, at its first set bit:
 * a level-0 slot is a deadline to fire, a higher slot a cascade point (the tick its span begins). So
 * advance jumps from event to event with three ctz per step (occupied, summary word, slot word) and
 * never visits an empty slot: a gap of ten years with nothing due costs O(levels). Cascading slot s
 * of level i at its start tick e (a multiple of span(i)) moves each timer down to a lower level, and
 * every lower level's base becomes e without a division. Those lower levels are empty at that moment
 * (level i is the lowest occupied), which is what makes a cascade that runs out of memory undoable:
 * everything it placed is in the levels below, so it puts the slot back as it was and the advance
 * stops before tick e, to carry on in the next call. No timer is lost, early or reordered.
 *
 * Callbacks run with now set to the tick being fired. They may call anything on the wheel: a fired
 * entry is consumed before its callback runs, a cancel inside a callback tombstones an entry (the
 * array being fired is compacted only once it is done), and timers scheduled for a tick at or before
 * the current one go to the due array behind the part this advance fires (no recursion, no livelock).
 *
 * COST: schedule, cancel, reschedule and next are O(1) (a bounded number of compares over at most
 * 18 levels, amortised O(1) array growth and compaction). advance is O(levels + occupied slots passed
 * + timers fired + timer cascades + tombstones passed); a timer cascades at most once per level it
 * passes. Memory: the owner's node (32 bytes for the wheel) plus a 4-byte entry per timer (arrays
 * double as they grow, and tombstones can triple an array under a cancel storm) plus 24 bytes per
 * slot of each level in use. An empty slot keeps its array until chime__levels_trim.
 */
#include "wheel/levels.h"

#include <errno.h>

#include "alloc.h"
#include "bits.h"

#define PREFETCH_AHEAD 8 /* entries: far enough for a node miss to overlap with the work between */

/* ---- set up and tear down ---- */

/* Move level i's rotation to the one starting at b, keeping limit[i] in step. */
static void set_base(struct chime__levels *L, unsigned i, uint64_t b)
{
    const struct chime__level *lv = &L->lv[i];
    L->lv[i].base = b;
    L->limit[i] = b > UINT64_MAX - lv->last ? UINT64_MAX : b + lv->last;
}


int chime__levels_init(struct chime__levels *L, const struct chime_wheel_config *cfg,
                       chime__fire_fn *fire, void *ctx)
{
    *L = (struct chime__levels){ .now = cfg->start, .fire = fire, .ctx = ctx };
    uint64_t span = 1;
    size_t words = 0;
    for (unsigned i = 0; i < CHIME__LEVELS_MAX; i++) {
        struct chime__level *lv = &L->lv[i];
        uint32_t n = i < cfg->levels ? cfg->slots[i] : CHIME__HIDDEN_SLOTS;
        words += (n + 63) / 64;
        bool reaches_2_64 = span > UINT64_MAX / n;
        lv->span = span;
        lv->span_inv = UINT64_MAX / span;
        lv->nslots = n;
        lv->last = reaches_2_64 ? UINT64_MAX : span * n - 1;
        set_base(L, i, reaches_2_64 ? 0 : cfg->start - cfg->start % (lv->last + 1));
        L->nlevels = i + 1;
        if (reaches_2_64)
            break;
        span *= n;
    }
    L->nconfigured = cfg->levels < L->nlevels ? cfg->levels : L->nlevels;
    /* Every level's slot table and bitmap words in one mapping of zero pages: a page becomes resident
     * only when a slot on it is first used, so a wheel holding a thousand timers in a few levels pays
     * for the few pages those slots are on, not for the 1000-slot table of a level it barely uses.
     * Slot tables first (8-byte aligned), then the words. */
    size_t slots = 0;
    for (unsigned i = 0; i < L->nlevels; i++)
        slots += L->lv[i].nslots;
    L->table_bytes = slots * sizeof(struct chime__slot) + words * sizeof(uint64_t);
    L->table_bytes = (L->table_bytes + 4095) / 4096 * 4096;
    char *table = chime__map(L->table_bytes);
    if (!table)
        return -ENOMEM;
    L->table = table;
    uint64_t *w = (uint64_t *)(table + slots * sizeof(struct chime__slot));
    for (unsigned i = 0; i < L->nlevels; i++) {
        L->lv[i].slots = (struct chime__slot *)table;
        table += L->lv[i].nslots * sizeof(struct chime__slot);
        L->lv[i].words = w;
        w += (L->lv[i].nslots + 63) / 64;
    }
    return 0;
}

void chime__levels_destroy(struct chime__levels *L)
{
    for (unsigned i = 0; i < L->nlevels; i++) {
        struct chime__level *lv = &L->lv[i];
        for (uint32_t s = 0; s < lv->nslots; s++)
            chime__slot_release(&lv->slots[s]);
    }
    chime__slot_release(&L->due);
    chime__unmap(L->table, L->table_bytes);
}

/* ---- the slow halves of the inline paths ---- */

int chime__levels_append_slow(struct chime__levels *L, unsigned level, uint32_t s, uint32_t idx)
{
    struct chime__slot *sl = &L->lv[level].slots[s];
    int64_t at = chime__slot_append(sl, idx);
    if (at < 0)
        return (int)at;
    uint32_t *pos = chime__node_pos(L, idx);
    *pos = (*pos & CHIME__POS_OWNER) | (uint32_t)at;
    if (at == 0)
        chime__levels_mark(L, level, s);
    return 0;
}

int chime__levels_place_due(struct chime__levels *L, uint32_t idx)
{
    int64_t at = chime__slot_append(&L->due, idx);
    if (at < 0)
        return (int)at;
    uint32_t *pos = chime__node_pos(L, idx);
    *pos = (*pos & CHIME__POS_OWNER) | CHIME__POS_DUE | (uint32_t)at;
    uint64_t d = *chime__node_deadline(L, idx);
    if (chime__slot_live(&L->due) == 1 || d < L->due_min)
        L->due_min = d; /* the first live entry resets it: stale-low otherwise */
    return 0;
}

/* ---- events ---- */

/* What happens next by I1 and I2: the first occupied slot of the lowest occupied level. */
struct event {
    uint64_t tick;
    unsigned level;
    uint32_t slot;
};

/* Find the next event; false if no level holds a timer. O(1): three ctz. */
static bool next_event(const struct chime__levels *L, struct event *ev)
{
    if (!L->occupied)
        return false;
    ev->level = chime__ctz32(L->occupied); /* occupied != 0 */
    const struct chime__level *lv = &L->lv[ev->level];
    unsigned word = chime__ctz64(lv->summary); /* the level is occupied (I3) */
    ev->slot = word * 64 + chime__ctz64(lv->words[word]); /* summary bit set: word != 0 */
    ev->tick = lv->base + ev->slot * lv->span;
    return true;
}

/* The arrays the queued removals name, for counting what each array really holds. */
struct queued {
    uint32_t n;
    const struct chime__slot *arr[CHIME__PENDING];
};

/* How many entries of arr are queued for removal: the live entries it holds are this fewer. */
static uint32_t queued_in(const struct queued *q, const struct chime__slot *arr)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < q->n; i++)
        k += q->arr[i] == arr;
    return k;
}

/* As next_event, looking past every slot whose live entries are all queued for removal: a marked
 * slot counts at least one, so each slot passed takes one of the at most CHIME__PENDING - 1 queued
 * removals, and the walk stays O(levels + bitmap words + CHIME__PENDING^2), without a write. */
static bool next_live_event(const struct chime__levels *L, const struct queued *q, struct event *ev)
{
    for (uint32_t occ = L->occupied; occ; occ &= occ - 1) {
        const struct chime__level *lv = &L->lv[chime__ctz32(occ)]; /* occ != 0 */
        for (uint64_t sum = lv->summary; sum; sum &= sum - 1) {
            unsigned word = chime__ctz64(sum); /* sum != 0 */
            for (uint64_t bits = lv->words[word]; bits; bits &= bits - 1) {
                uint32_t s = word * 64 + chime__ctz64(bits); /* bits != 0 */
                if (chime__slot_live(&lv->slots[s]) > queued_in(q, &lv->slots[s])) {
                    ev->level = chime__ctz32(occ);
                    ev->slot = s;
                    ev->tick = lv->base + s * lv->span;
                    return true;
                }
            }
        }
    }
    return false;
}

int chime__levels_next(const struct chime__levels *L, uint64_t *when)
{
    struct queued q = { .n = L->npending };
    for (uint32_t k = 0; k < q.n; k++) /* none while firing (I7) */
        q.arr[k] = chime__levels_queued(L, k);
    struct event ev;
    uint32_t due_live = chime__slot_live(&L->due) - queued_in(&q, &L->due);
    if (L->firing == CHIME__FIRING_DUE)
        due_live -= L->firing_left;
    if (L->firing_left)
        *when = L->now; /* asked from a callback or between batches: the rest fires now */
    else if (due_live)
        *when = L->due_min; /* <= now: scheduled due, they fire in the next advance */
    else if (next_live_event(L, &q, &ev))
        *when = ev.tick;
    else
        return -ENOENT;
    return 0;
}

/* ---- cascading ---- */

/* A cascade of slot s of level `from` ran out of memory after placing src->v[0 .. stop) below:
 * everything below `from` came from it (those levels were empty), so empty them, restore their
 * bases and put the slot back as it was. */
static void undo_cascade(struct chime__levels *L, unsigned from, uint32_t s, struct chime__slot *src,
                         uint32_t stop, const uint64_t *bases)
{
    for (unsigned k = 0; k < from; k++) {
        struct chime__level *lv = &L->lv[k];
        for (unsigned word = 0; lv->summary; word++) {
            for (uint64_t bits = lv->words[word]; bits; bits &= bits - 1)
                chime__slot_clear(&lv->slots[word * 64 + chime__ctz64(bits)]); /* bits != 0 */
            lv->words[word] = 0;
            lv->summary &= ~(UINT64_C(1) << word);
        }
        L->occupied &= ~(UINT32_C(1) << k);
        set_base(L, k, bases[k]);
    }
    for (uint32_t j = 0; j < stop; j++)
        if (src->v[j] != CHIME__DEAD)
            chime__levels_moved(L, src->v[j], j);
    L->lv[from].slots[s] = *src;
    chime__levels_mark(L, from, s);
}

/* Move slot s of level i (i > 0) down, at e, the tick its span begins. Lower levels are empty (I2).
 * Return: 0, or -ENOMEM with nothing changed. */
static int cascade(struct chime__levels *L, unsigned i, uint32_t s, uint64_t e)
{
    struct chime__slot src = chime__slot_take(&L->lv[i].slots[s]);
    chime__levels_unmark(L, i, s);
    uint64_t bases[CHIME__LEVELS_MAX];
    for (unsigned k = 0; k < i; k++) {
        bases[k] = L->lv[k].base;
        set_base(L, k, e); /* e is a multiple of span(i), so of every lower rotation */
    }
    /* Cascading into level 0 is the last move before a timer fires (within one rotation of level 0):
     * fetch the owner's cold data now, so that firing finds it in cache. */
    bool warm_cold = i == 1 && L->cold;
    for (uint32_t j = 0; j < src.len; j++) {
        if (j + PREFETCH_AHEAD < src.len && src.v[j + PREFETCH_AHEAD] != CHIME__DEAD) {
            uint32_t ahead = src.v[j + PREFETCH_AHEAD];
            __builtin_prefetch(chime__node_deadline(L, ahead), 1);
            if (warm_cold)
                __builtin_prefetch(L->cold + (size_t)ahead * L->cold_stride, 0);
        }
        uint32_t idx = src.v[j];
        if (idx == CHIME__DEAD)
            continue;
        uint32_t t;
        /* its deadline is in [e, e + span(i)) */
        unsigned k = chime__levels_find_below(L, *chime__node_deadline(L, idx), i, &t);
        if (chime__levels_append(L, k, t, idx) != 0) {
            undo_cascade(L, i, s, &src, j, bases);
            return -ENOMEM;
        }
    }
    L->moved += chime__slot_live(&src);
    chime__slot_clear(&src);
    L->lv[i].slots[s] = src; /* empty, its array kept for what lands there next */
    return 0;
}

/* ---- firing ---- */

static struct chime__slot *firing_array(struct chime__levels *L)
{
    return L->firing == CHIME__FIRING_DUE ? &L->due : &L->lv[0].slots[L->firing_slot];
}

/* Fire the array being fired from the cursor on, at most limit timers. Return: how many fired;
 * *stopped if it stopped before the end (the limit, or a fire that could not re-arm). */
static size_t fire_from_cursor(struct chime__levels *L, size_t limit, bool *stopped)
{
    size_t fired = 0;
    for (;;) {
        struct chime__slot *arr = firing_array(L); /* again each time: callbacks may grow the due array */
        uint32_t end = L->firing == CHIME__FIRING_DUE ? L->due_end : arr->len;
        uint32_t i = L->cursor;
        if (i >= end)
            return fired;
        if (i + PREFETCH_AHEAD < end && arr->v[i + PREFETCH_AHEAD] != CHIME__DEAD) {
            uint32_t ahead = arr->v[i + PREFETCH_AHEAD];
            __builtin_prefetch(chime__node_deadline(L, ahead), 1);
            if (L->cold)
                __builtin_prefetch(L->cold + (size_t)ahead * L->cold_stride, 0);
        }
        uint32_t idx = arr->v[i];
        if (idx == CHIME__DEAD) {
            L->cursor = i + 1;
            continue;
        }
        if (fired == limit) {
            *stopped = true;
            return fired;
        }
        arr->v[i] = CHIME__DEAD; /* consumed: nothing names it from here on */
        arr->dead++;
        L->cursor = i + 1;
        L->firing_left--;
        if (L->fire(L->ctx, idx) != 0) {
            arr = firing_array(L); /* the fire did nothing: put the entry back and stop before it */
            arr->v[i] = idx;
            arr->dead--;
            L->cursor = i;
            L->firing_left++;
            *stopped = true;
            return fired;
        }
        fired++;
    }
}

/* Live entries of a[from, to). */
static uint32_t live_in(const struct chime__slot *a, uint32_t from, uint32_t to)
{
    uint32_t live = 0;
    for (uint32_t i = from; i < to; i++)
        live += a->v[i] != CHIME__DEAD;
    return live;
}

/* Start firing the due array's first `end` entries, `live` of them live. Entries beyond `end`
 * (what the callbacks of a resumed level-0 slot made due) form the tail from here on: count its
 * tombstones (every tombstone of the array not among the first `end` entries) and hold it to its
 * bound (I4). */
static void start_due(struct chime__levels *L, uint32_t end, uint32_t live)
{
    L->firing = CHIME__FIRING_DUE;
    L->due_end = end;
    L->due_tail_dead = L->due.dead - (end - live);
    L->cursor = 0;
    L->firing_left = live;
    if (L->due_tail_dead)
        chime__levels_settle_due_tail(L);
}

/* The due array's part that fired is done: keep what callbacks added behind it, at the front. */
static void finish_due(struct chime__levels *L)
{
    struct chime__slot *due = &L->due;
    L->firing = CHIME__FIRING_NONE;
    uint32_t keep = 0, dead = 0;
    for (uint32_t i = L->due_end; i < due->len; i++) {
        uint32_t idx = due->v[i];
        due->v[keep] = idx;
        if (idx == CHIME__DEAD) {
            dead++;
        } else {
            chime__levels_moved(L, idx, keep);
            uint64_t d = *chime__node_deadline(L, idx);
            if (keep == dead || d < L->due_min) /* the first live one resets due_min */
                L->due_min = d;
        }
        keep++;
    }
    due->len = keep;
    due->dead = dead;
    if (keep == dead || chime__slot_wants_compaction(due))
        chime__levels_settle(L, due, CHIME__LEVELS_MAX, 0, 0); /* free or compact it now */
}

/* Start firing level-0 slot s: out of the bitmap meanwhile (I3), so that next_event looks past it. */
static void start_slot(struct chime__levels *L, uint32_t s)
{
    L->firing = CHIME__FIRING_SLOT;
    L->firing_slot = s;
    L->cursor = 0;
    L->firing_left = chime__slot_live(&L->lv[0].slots[s]);
    chime__levels_unmark(L, 0, s);
}

/* A level-0 slot has fired whole (callbacks cannot add to it: what they schedule at now is due). */
static void finish_slot(struct chime__levels *L)
{
    L->firing = CHIME__FIRING_NONE;
    chime__slot_clear(&L->lv[0].slots[L->firing_slot]);
}

/* Recompute the bases after now moved to t without an event; levels whose rotation changed are empty. */
static void rebase(struct chime__levels *L, uint64_t t)
{
    for (unsigned i = 0; i < L->nlevels; i++) {
        struct chime__level *lv = &L->lv[i];
        if (t - lv->base <= lv->last)
            break; /* still in this level's rotation, so in every higher one's too */
        set_base(L, i, t - t % (lv->last + 1)); /* last < UINT64_MAX: the test above failed */
    }
}

size_t chime__levels_advance(struct chime__levels *L, uint64_t now, size_t limit, bool *done)
{
    *done = false;
    if (now < L->now || L->advancing)
        return 0;
    if (L->npending)
        chime__levels_flush(L); /* I7: no removal is queued while an array is being fired */
    L->advancing = true;
    L->advance_to = now;
    size_t fired = 0;
    bool stopped = false;

    /* What was due before this call fires first, in arrival order; what callbacks add waits for the
     * next call. A call that stopped early (I6) left the rest of an array, which comes before what
     * was scheduled due since: the rest of the due array, then the newer due timers; or the rest of
     * a level-0 slot at now, then the due array as it was when this call began (due_mark). */
    if (L->firing == CHIME__FIRING_SLOT) {
        L->due_mark = L->due.len;
        L->due_marked = true;
        fired += fire_from_cursor(L, limit, &stopped);
        L->due_marked = false;
        if (stopped)
            goto stop;
        finish_slot(L);
        if (L->due_mark && live_in(&L->due, 0, L->due_mark))
            start_due(L, L->due_mark, live_in(&L->due, 0, L->due_mark));
    } else if (L->firing == CHIME__FIRING_DUE) {
        L->firing_left += live_in(&L->due, L->due_end, L->due.len); /* scheduled since: now too */
        L->due_end = L->due.len;
        L->due_tail_dead = 0;
    } else if (chime__slot_live(&L->due)) {
        start_due(L, L->due.len, chime__slot_live(&L->due));
    }
    if (L->firing == CHIME__FIRING_DUE) {
        fired += fire_from_cursor(L, limit - fired, &stopped);
        if (stopped)
            goto stop;
        finish_due(L);
    }

    struct event ev;
    while (next_event(L, &ev) && ev.tick <= now) {
        if (fired == limit)
            goto stop;
        uint64_t before = L->now;
        L->now = ev.tick;
        if (ev.level == 0) {
            start_slot(L, ev.slot);
            fired += fire_from_cursor(L, limit - fired, &stopped);
            if (stopped)
                goto stop;
            finish_slot(L);
        } else if (cascade(L, ev.level, ev.slot, ev.tick) != 0) {
            L->now = before; /* out of memory: the next call tries this cascade again */
            goto stop;
        }
    }

    L->now = now;
    rebase(L, now);
    L->partial = false;
    L->advancing = false;
    *done = true;
    return fired;

stop:
    L->partial = true;
    L->advancing = false;
    return fired;
}

int chime__levels_move(struct chime__levels *L, uint32_t idx, uint64_t deadline)
{
    uint64_t *d = chime__node_deadline(L, idx);
    uint32_t *pos = chime__node_pos(L, idx);
    uint64_t old_deadline = *d;
    uint32_t old_pos = *pos;
    *d = deadline;
    int err = chime__levels_place(L, idx);
    if (err) {
        *d = old_deadline;
        *pos = old_pos;
        return err;
    }
    chime__levels_remove_at(L, old_deadline, old_pos);
    return 0;
}

size_t chime__levels_trim(struct chime__levels *L)
{
    if (L->npending)
        chime__levels_flush(L); /* the slots they empty can then be freed too */
    size_t freed = 0;
    for (unsigned i = 0; i < L->nlevels; i++) {
        struct chime__level *lv = &L->lv[i];
        for (uint32_t s = 0; s < lv->nslots; s++) {
            bool firing = L->firing == CHIME__FIRING_SLOT && i == 0 && s == L->firing_slot;
            if (lv->slots[s].len == 0 && lv->slots[s].cap && !firing) {
                freed += lv->slots[s].cap * sizeof(uint32_t);
                chime__slot_release(&lv->slots[s]);
            }
        }
    }
    if (L->due.len == 0 && L->due.cap) {
        freed += L->due.cap * sizeof(uint32_t);
        chime__slot_release(&L->due);
    }
    return freed;
}
