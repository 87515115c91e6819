/*
 * The hierarchical timing wheel.
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
 *     overflow list                                        ...later (re-examined at each top turn)
 *
 * Spans that would pass 2^64 ticks are cut off: a level whose rotation reaches 2^64 covers every
 * remaining tick, the levels above it are never used, and nothing can overflow.
 *
 * PLACEMENT BY DIGITS (Varghese & Lauck's scheme 7, as in Kafka and the pre-4.8 Linux wheel)
 * A timer due at d > now goes into the level of the highest digit in which d differs from now, in the
 * slot that digit of d selects. Equivalently: level i is the lowest level whose current rotation,
 * [base(i), base(i) + rotation(i)), contains d, where base(i) = now - now % rotation(i); its slot is
 * (d - base(i)) / span(i). Each level keeps base(i), so placing a timer is a few compares and one
 * multiplication by a precomputed reciprocal of span(i) (slot_of). A deadline at or before now goes
 * to the due list and fires in the next advance.
 *
 * Worked example, default layout, now = 0, d = 1 day 02:03:04.005 = 93 784 005 ms. The digits of d
 * are (day 1, hour 2, min 3, s 4, ms 5); the highest digit that differs from now's (all zero) is the
 * day, so the timer goes to level 4, slot 1. At now = 1d 00:00:00.000 that slot is cascaded: relative
 * to the new now the hour digit is the highest that differs, so it moves to level 3, slot 2; at
 * 1d 02:00:00.000 to level 2 slot 3; at 1d 02:03:00.000 to level 1 slot 4; at 1d 02:03:04.000 to
 * level 0 slot 5, and it fires when advance reaches 1d 02:03:04.005. docs/design.md draws this.
 *
 * INVARIANTS (chime__wheel_check() verifies each after every step of the randomised tests)
 *  I1. A timer in level i, slot s has base(i) <= d <= base(i) + rotation(i) - 1, d lies in no lower
 *      level's current rotation, and s = (d - base(i)) / span(i). Hence d > now and s > digit(now, i):
 *      every occupied slot is ahead of the clock hand, none is behind it.
 *  I2. Every timer of level i is due before every timer of level i+1: level i's timers all fall in
 *      the current slot of level i+1, and level i+1's occupied slots are later ones (I1).
 *  I3. Bit s of level i's bitmap is set iff slot s's list is not empty; summary bit w iff word w is
 *      not zero; bit i of `occupied` iff level i has a timer.
 *  I4. The overflow list holds exactly the timers due after the top level's current rotation, and
 *      overflow_min is at most the smallest of their deadlines.
 *  I5. Lists keep insertion order, and cascading walks a list in order and appends: timers with equal
 *      deadlines stay in the order they were scheduled, whatever levels they passed through.
 *  I6. Only between the calls of a bounded advance (chime__wheel_advance_some, used by the threaded
 *      runtime to work through a firing storm in batches) may the firing list be non-empty or a
 *      level-0 slot hold timers due at now; the next advance fires those first.
 *
 * ADVANCING WITHOUT WALKING EMPTY TIME
 * By I1 and I2 the next thing that can happen is in the lowest occupied level, at its first set bit:
 * a level-0 slot is a deadline to fire, a higher slot a cascade point (the tick its rotation begins),
 * and with every level empty the next event is the top-level turn in which overflow_min falls. So
 * advance jumps from event to event with two ctz per step (summary word, then slot word) and never
 * visits an empty slot: a gap of ten years with nothing due costs O(levels). Cascading slot s of
 * level i at its start tick e (a multiple of span(i)) moves each timer down to a lower level, and
 * every lower level's base becomes e without a division.
 *
 * Callbacks run with now set to the tick being fired. They may call anything on the wheel: a due
 * timer is unlinked before its callback runs, so a cancel inside a callback can only hit a timer that
 * has not fired yet; timers scheduled for a tick at or before the current one go to the due list and
 * wait for the next advance (no recursion, no livelock).
 *
 * COST: schedule, cancel, reschedule and next are O(1) (a bounded number of compares over at most 8
 * levels). advance is O(levels + occupied slots passed + timers fired + timer cascades); a timer
 * cascades at most once per level it passes. Memory: 48 bytes per timer (pool.h) plus 8 bytes per slot.
 */
#include "wheel/wheel.h"

#include <errno.h>
#include <stdbool.h>

#include "alloc.h"
#include "bits.h"
#include "wheel/pool.h"

/* The layout the clock of the card describes; see the table above. */
static const struct chime_wheel_config default_config = { CHIME_LAYOUT_MILLISECONDS };

struct list {
    uint32_t head, tail; /* CHIME__NIL when empty */
};

struct level {
    uint64_t base;      /* first tick of the rotation now is in: now - now % rotation */
    uint64_t last;      /* rotation - 1, or UINT64_MAX when the rotation reaches 2^64 */
    uint64_t span;      /* ticks per slot */
    uint64_t span_inv;  /* floor((2^64 - 1) / span): slot_of() divides by multiplying */
    uint64_t summary;   /* bit w set iff words[w] != 0 (at most 4096 / 64 = 64 words) */
    uint64_t *words;    /* occupancy: bit s set iff slots[s] is not empty */
    struct list *slots;
    uint32_t nslots;
};
_Static_assert(CHIME_MAX_SLOTS <= 64 * 64, "one summary word covers every bitmap word of a level");

struct chime_wheel {
    uint64_t now;
    uint64_t advance_to;   /* the target of the advance running: periodic timers re-arm after it */
    uint32_t occupied;     /* bit i set iff level i holds a timer (I3) */
    unsigned nlevels;      /* levels in use (configured levels beyond 2^64 ticks are dropped) */
    bool advancing;
    bool partial;          /* an advance stopped at its limit: now is the tick being fired (I6) */
    size_t pending;
    struct list due;       /* CHIME__WHERE_DUE: scheduled at or before now */
    struct list firing;    /* CHIME__WHERE_FIRING: the due list as taken by the running advance */
    struct list overflow;  /* CHIME__WHERE_OVERFLOW: after the top level's current rotation */
    uint64_t due_min;      /* at most the smallest deadline on the due list (may be stale-low) */
    uint64_t overflow_min; /* at most the smallest deadline on the overflow list (I4) */
    struct chime__pool pool;
    struct level lv[CHIME_MAX_LEVELS];
};

static inline struct chime__node *node_at(const chime_wheel *w, uint32_t idx)
{
    return chime__pool_at(&w->pool, idx);
}

static inline uint16_t slot_where(unsigned level, uint32_t slot)
{
    return (uint16_t)(level << 12 | slot);
}

static inline struct list *list_of(chime_wheel *w, uint16_t where)
{
    switch (where) {
    case CHIME__WHERE_DUE: return &w->due;
    case CHIME__WHERE_FIRING: return &w->firing;
    case CHIME__WHERE_OVERFLOW: return &w->overflow;
    default: return &w->lv[where >> 12].slots[where & 0xfff];
    }
}

static inline void bit_set(chime_wheel *w, unsigned level, uint32_t slot)
{
    struct level *lv = &w->lv[level];
    lv->words[slot >> 6] |= UINT64_C(1) << (slot & 63);
    lv->summary |= UINT64_C(1) << (slot >> 6);
    w->occupied |= 1u << level;
}

static inline void bit_clear(chime_wheel *w, unsigned level, uint32_t slot)
{
    struct level *lv = &w->lv[level];
    if ((lv->words[slot >> 6] &= ~(UINT64_C(1) << (slot & 63))) == 0 &&
        (lv->summary &= ~(UINT64_C(1) << (slot >> 6))) == 0)
        w->occupied &= ~(1u << level);
}

/* The first occupied slot of a level. The level must be occupied, so summary and its word are not 0. */
static inline uint32_t first_slot(const struct level *lv)
{
    unsigned word = chime__ctz64(lv->summary);
    return word * 64 + chime__ctz64(lv->words[word]);
}

/* Append node idx (n) to list l, which where names. */
static void append_to(chime_wheel *w, struct list *l, uint16_t where, uint32_t idx,
                      struct chime__node *n)
{
    n->where = where;
    n->next = CHIME__NIL;
    n->prev = l->tail;
    if (l->tail != CHIME__NIL) {
        node_at(w, l->tail)->next = idx;
    } else {
        l->head = idx;
        if (where < CHIME__WHERE_DUE)
            bit_set(w, where >> 12, where & 0xfff);
    }
    l->tail = idx;
}

static void unlink_node(chime_wheel *w, uint32_t idx)
{
    struct chime__node *n = node_at(w, idx);
    struct list *l = list_of(w, n->where);
    if (n->prev != CHIME__NIL)
        node_at(w, n->prev)->next = n->next;
    else
        l->head = n->next;
    if (n->next != CHIME__NIL) {
        node_at(w, n->next)->prev = n->prev;
    } else {
        l->tail = n->prev;
        if (l->head == CHIME__NIL && n->where < CHIME__WHERE_DUE)
            bit_clear(w, n->where >> 12, n->where & 0xfff);
    }
}

/*
 * offset / span without a division instruction (a 64-bit div is a quarter of a schedule's cost).
 * With m = floor((2^64 - 1) / span), q = floor(offset * m / 2^64) is the quotient or one less, since
 * offset * m / 2^64 > offset / span - 1 for every offset < 2^64; one compare corrects it.
 */
static inline uint32_t slot_of(const struct level *lv, uint64_t offset)
{
    __extension__ typedef unsigned __int128 u128; /* gcc and clang; __extension__ for -pedantic */
    uint64_t q = (uint64_t)(((u128)offset * lv->span_inv) >> 64);
    if (offset - q * lv->span >= lv->span)
        q++;
    return (uint32_t)q;
}

/*
 * Put a timer with deadline >= now into the lowest level whose current rotation holds it (I1), or on
 * the overflow list. d == now happens only while cascading into the tick being processed: it lands in
 * level 0 at now's own slot, which advance fires next.
 */
static void place(chime_wheel *w, uint32_t idx, struct chime__node *n)
{
    uint64_t d = n->deadline;
    for (unsigned i = 0; i < w->nlevels; i++) {
        struct level *lv = &w->lv[i];
        uint64_t offset = d - lv->base; /* d >= now >= base: no wrap */
        if (offset <= lv->last) {
            uint32_t s = i == 0 ? (uint32_t)offset : slot_of(lv, offset);
            append_to(w, &lv->slots[s], slot_where(i, s), idx, n);
            return;
        }
    }
    if (w->overflow.head == CHIME__NIL || d < w->overflow_min)
        w->overflow_min = d;
    append_to(w, &w->overflow, CHIME__WHERE_OVERFLOW, idx, n);
}

/* Schedule a node whose deadline is set: due now (the due list) or later (the wheel). */
static void insert(chime_wheel *w, uint32_t idx, struct chime__node *n)
{
    uint64_t d = n->deadline;
    if (d > w->now) {
        place(w, idx, n);
        return;
    }
    if (w->due.head == CHIME__NIL || d < w->due_min)
        w->due_min = d;
    append_to(w, &w->due, CHIME__WHERE_DUE, idx, n);
}

static void set_bases(chime_wheel *w, unsigned below, uint64_t tick)
{
    for (unsigned i = 0; i < below; i++)
        w->lv[i].base = tick;
}

/* Recompute the bases after now moved to t without an event; levels whose rotation changed are empty. */
static void rebase(chime_wheel *w, uint64_t t)
{
    for (unsigned i = 0; i < w->nlevels; i++) {
        struct level *lv = &w->lv[i];
        if (t - lv->base <= lv->last)
            break; /* still in this level's rotation, so in every higher one's too */
        lv->base = t - t % (lv->last + 1); /* last < UINT64_MAX here: the test above failed */
    }
}

int chime_wheel_new(chime_wheel **out, const struct chime_wheel_config *cfg)
{
    if (!out)
        return -EINVAL;
    struct chime_wheel_config c = cfg ? *cfg : (struct chime_wheel_config){ 0 };
    if (c.levels == 0) {
        uint64_t start = c.start;
        c = default_config;
        c.start = start;
    }
    if (c.levels > CHIME_MAX_LEVELS)
        return -EINVAL;
    for (unsigned i = 0; i < c.levels; i++)
        if (c.slots[i] < 2 || c.slots[i] > CHIME_MAX_SLOTS)
            return -EINVAL;

    chime_wheel *w = chime__alloc_zeroed(sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->now = c.start;
    w->due = w->firing = w->overflow = (struct list){ CHIME__NIL, CHIME__NIL };
    chime__pool_init(&w->pool);

    uint64_t span = 1;
    for (unsigned i = 0; i < c.levels; i++) {
        struct level *lv = &w->lv[i];
        lv->span = span;
        lv->span_inv = UINT64_MAX / span;
        lv->nslots = c.slots[i];
        bool reaches_2_64 = span > UINT64_MAX / c.slots[i];
        lv->last = reaches_2_64 ? UINT64_MAX : span * c.slots[i] - 1;
        lv->base = reaches_2_64 ? 0 : c.start - c.start % (lv->last + 1);
        lv->slots = chime__alloc(lv->nslots * sizeof(*lv->slots));
        lv->words = chime__alloc_zeroed(((lv->nslots + 63) / 64) * sizeof(*lv->words));
        w->nlevels = i + 1;
        if (!lv->slots || !lv->words) {
            chime_wheel_free(w, NULL);
            return -ENOMEM;
        }
        for (uint32_t s = 0; s < lv->nslots; s++)
            lv->slots[s] = (struct list){ CHIME__NIL, CHIME__NIL };
        if (reaches_2_64)
            break;
        span *= c.slots[i];
    }
    *out = w;
    return 0;
}

void chime_wheel_free(chime_wheel *w, chime_fn *on_unfired)
{
    if (!w)
        return;
    if (on_unfired) {
        for (size_t i = 0; i < chime__pool_index_limit(&w->pool); i++) {
            if (!w->pool.chunks[i >> CHIME__CHUNK_SHIFT]) {
                i += CHIME__CHUNK_NODES - 1; /* a trimmed chunk: nothing pending in it */
                continue;
            }
            const struct chime__node *n = node_at(w, (uint32_t)i);
            if (n->where != CHIME__WHERE_FREE)
                on_unfired(n->arg);
        }
    }
    for (unsigned i = 0; i < w->nlevels; i++) {
        struct level *lv = &w->lv[i];
        chime__free(lv->slots, lv->nslots * sizeof(*lv->slots));
        chime__free(lv->words, ((lv->nslots + 63) / 64) * sizeof(*lv->words));
    }
    chime__pool_destroy(&w->pool);
    chime__free(w, sizeof(*w));
}

static int schedule(chime_wheel *w, uint64_t deadline, uint64_t period, chime_fn *fn, void *arg,
                    chime_id *id)
{
    if (!w || !fn)
        return -EINVAL;
    uint32_t idx;
    int err = chime__pool_take(&w->pool, &idx);
    if (err)
        return err;
    struct chime__node *n = node_at(w, idx);
    n->deadline = deadline;
    n->period = period;
    n->fn = fn;
    n->arg = arg;
    insert(w, idx, n);
    w->pending++;
    if (id)
        *id = chime__pool_id(&w->pool, idx);
    return 0;
}

int chime_wheel_schedule(chime_wheel *w, uint64_t deadline, chime_fn *fn, void *arg, chime_id *id)
{
    return schedule(w, deadline, 0, fn, arg, id);
}

int chime_wheel_schedule_every(chime_wheel *w, uint64_t first, uint64_t period, chime_fn *fn,
                               void *arg, chime_id *id)
{
    if (period == 0)
        return -EINVAL;
    return schedule(w, first, period, fn, arg, id);
}

/* Find the pending timer id names and take it off its list. Return: 0, -EINVAL, -ENOENT. */
static int detach(chime_wheel *w, chime_id id, uint32_t *idx)
{
    if (!w)
        return -EINVAL;
    *idx = chime__pool_find(&w->pool, id);
    if (*idx == CHIME__NIL)
        return -ENOENT;
    unlink_node(w, *idx);
    return 0;
}

int chime_wheel_cancel(chime_wheel *w, chime_id id)
{
    uint32_t idx;
    int err = detach(w, id, &idx);
    if (err)
        return err;
    chime__pool_give(&w->pool, idx);
    w->pending--;
    return 0;
}

int chime_wheel_reschedule(chime_wheel *w, chime_id id, uint64_t deadline)
{
    uint32_t idx;
    int err = detach(w, id, &idx);
    if (err)
        return err;
    struct chime__node *n = node_at(w, idx);
    n->deadline = deadline;
    insert(w, idx, n);
    return 0;
}

/*
 * Move a periodic timer that just came due to its first boundary after the running advance's
 * target, deadline + k * period with k >= 1. Return false if that boundary would pass UINT64_MAX.
 */
static bool rearm(chime_wheel *w, struct chime__node *n)
{
    /* periods passed: k - 1. Compared before adding 1, which would wrap when it is UINT64_MAX. */
    uint64_t passed = (w->advance_to - n->deadline) / n->period; /* deadline <= now <= advance_to */
    if (passed >= (UINT64_MAX - n->deadline) / n->period)
        return false;
    n->deadline += (passed + 1) * n->period;
    return true;
}

/* Fire timers from the head of a list, in order, unlinking each before its callback runs, until the
 * list is empty or `limit` have fired. */
static size_t fire_list(chime_wheel *w, uint16_t where, size_t limit)
{
    struct list *l = list_of(w, where);
    size_t fired = 0;
    uint32_t idx;
    while (fired < limit && (idx = l->head) != CHIME__NIL) {
        struct chime__node *n = node_at(w, idx);
        chime_fn *fn = n->fn;
        void *arg = n->arg;
        unlink_node(w, idx);
        if (n->period && rearm(w, n)) {
            place(w, idx, n); /* rearm put the deadline after advance_to >= now */
        } else {
            chime__pool_give(&w->pool, idx);
            w->pending--;
        }
        fired++;
        fn(arg); /* may schedule, cancel or reschedule anything, this list included */
    }
    return fired;
}

/* Move slot s of level i (i > 0) down, at e, the tick its span begins. Lower levels are empty (I2). */
static void cascade(chime_wheel *w, unsigned i, uint32_t s, uint64_t e)
{
    struct list *l = &w->lv[i].slots[s];
    uint32_t idx = l->head;
    *l = (struct list){ CHIME__NIL, CHIME__NIL };
    bit_clear(w, i, s);
    set_bases(w, i, e); /* e is a multiple of span(i), so of every lower rotation */
    while (idx != CHIME__NIL) {
        struct chime__node *n = node_at(w, idx);
        uint32_t next = n->next;
        place(w, idx, n); /* its deadline is in [e, e + span(i)): a lower level, or level 0 at e */
        idx = next;
    }
}

/* Move the overflow timers that fall in the top rotation starting at e into the wheel. */
static void refill_from_overflow(chime_wheel *w, uint64_t e)
{
    set_bases(w, w->nlevels, e);
    const struct level *top = &w->lv[w->nlevels - 1];
    uint32_t idx = w->overflow.head;
    bool first = true;
    while (idx != CHIME__NIL) {
        struct chime__node *n = node_at(w, idx);
        uint32_t next = n->next;
        if (n->deadline - e <= top->last) {
            unlink_node(w, idx);
            place(w, idx, n);
        } else if (first || n->deadline < w->overflow_min) {
            w->overflow_min = n->deadline;
            first = false;
        }
        idx = next;
    }
}

/* What happens next in the wheel, by I1 and I2: a level-0 slot to fire, a slot to cascade, or a top
 * turn at which overflow timers come in (level == nlevels). */
struct event {
    uint64_t tick;
    unsigned level;
    uint32_t slot;
};

/* Find the next event; false if the levels and the overflow list are empty. O(1): two ctz. */
static bool next_event(const chime_wheel *w, struct event *ev)
{
    if (w->occupied) {
        ev->level = chime__ctz32(w->occupied); /* occupied != 0 */
        const struct level *lv = &w->lv[ev->level];
        ev->slot = first_slot(lv); /* the level is occupied */
        ev->tick = lv->base + ev->slot * lv->span;
        return true;
    }
    if (w->overflow.head != CHIME__NIL) {
        const struct level *top = &w->lv[w->nlevels - 1];
        ev->level = w->nlevels;
        ev->slot = 0;
        ev->tick = w->overflow_min - w->overflow_min % (top->last + 1); /* last < MAX: I4 */
        return true;
    }
    return false;
}

/*
 * Advance towards now, stopping once `limit` callbacks have run. When it stops early (I6) the wheel's
 * time is the tick being fired and the unfired rest stays where it is: the firing list, or the
 * level-0 slot of that tick. The next call carries on from there.
 */
static size_t advance(chime_wheel *w, uint64_t now, size_t limit)
{
    if (now < w->now || w->advancing)
        return 0;
    w->advancing = true;
    w->advance_to = now;
    size_t fired = 0;

    /* What was due before this call, in schedule order; what callbacks add waits for the next. An
     * advance that stopped early left the rest of its firing list: that goes first. */
    if (w->firing.head == CHIME__NIL && w->due.head != CHIME__NIL) {
        w->firing = w->due;
        w->due = (struct list){ CHIME__NIL, CHIME__NIL };
        for (uint32_t idx = w->firing.head; idx != CHIME__NIL; idx = node_at(w, idx)->next)
            node_at(w, idx)->where = CHIME__WHERE_FIRING;
    }
    if (w->firing.head != CHIME__NIL) {
        fired += fire_list(w, CHIME__WHERE_FIRING, limit);
        if (w->firing.head != CHIME__NIL)
            goto stopped;
    }

    struct event ev;
    while (next_event(w, &ev) && ev.tick <= now) {
        if (fired == limit)
            goto stopped;
        w->now = ev.tick;
        if (ev.level == 0)
            fired += fire_list(w, slot_where(0, ev.slot), limit - fired);
        else if (ev.level < w->nlevels)
            cascade(w, ev.level, ev.slot, ev.tick);
        else
            refill_from_overflow(w, ev.tick);
    }

    w->now = now;
    rebase(w, now);
    w->partial = false;
    w->advancing = false;
    return fired;

stopped:
    w->partial = true;
    w->advancing = false;
    return fired;
}

size_t chime_wheel_advance(chime_wheel *w, uint64_t now)
{
    return advance(w, now, SIZE_MAX);
}

size_t chime__wheel_advance_some(chime_wheel *w, uint64_t now, size_t limit, bool *done)
{
    size_t fired = advance(w, now, limit);
    *done = !w->partial && w->now == now;
    return fired;
}

bool chime__wheel_is_pending(const chime_wheel *w, chime_id id)
{
    return chime__pool_find(&w->pool, id) != CHIME__NIL;
}

size_t chime__wheel_trim(chime_wheel *w, size_t keep)
{
    return chime__pool_trim(&w->pool, keep);
}

size_t chime__wheel_capacity(const chime_wheel *w)
{
    return chime__pool_capacity(&w->pool);
}

int chime_wheel_next(const chime_wheel *w, uint64_t *deadline)
{
    if (!w || !deadline)
        return -EINVAL;
    if (w->firing.head != CHIME__NIL) {
        *deadline = w->now; /* asked from a callback: the rest of the due list fires in this advance */
    } else if (w->due.head != CHIME__NIL) {
        *deadline = w->due_min;
    } else {
        struct event ev;
        if (!next_event(w, &ev))
            return -ENOENT;
        *deadline = ev.tick;
    }
    return 0;
}

size_t chime_wheel_pending(const chime_wheel *w)
{
    return w->pending;
}

uint64_t chime_wheel_now(const chime_wheel *w)
{
    return w->now;
}

/* ---- the self-check: a deliberately plain walk of everything, for the tests ---- */

#define CHECK(cond, msg) \
    do {                 \
        if (!(cond))     \
            return msg;  \
    } while (0)

/* Walk one list: links consistent, every node says it is here. Counts nodes into *count. */
static const char *check_list(const chime_wheel *w, const struct list *l, uint16_t where,
                              size_t *count)
{
    uint32_t prev = CHIME__NIL;
    for (uint32_t idx = l->head; idx != CHIME__NIL; idx = node_at(w, idx)->next) {
        CHECK(idx < chime__pool_index_limit(&w->pool) && w->pool.chunks[idx >> CHIME__CHUNK_SHIFT],
              "list link outside the pool");
        const struct chime__node *n = node_at(w, idx);
        CHECK(n->where == where, "node's where does not name the list holding it");
        CHECK(n->prev == prev, "prev link does not match");
        CHECK(++*count <= w->pool.used, "list longer than the nodes in use (a cycle?)");
        prev = idx;
    }
    CHECK(l->tail == prev, "tail does not match the last node");
    return NULL;
}

const char *chime__wheel_check(const chime_wheel *w)
{
    size_t count = 0;
    const char *err;
    if (!w->advancing && !w->partial)
        CHECK(w->firing.head == CHIME__NIL, "firing list not empty outside advance");
    if ((err = check_list(w, &w->due, CHIME__WHERE_DUE, &count)))
        return err;
    for (uint32_t idx = w->due.head; idx != CHIME__NIL; idx = node_at(w, idx)->next) {
        CHECK(node_at(w, idx)->deadline <= w->now, "due timer not due");
        CHECK(node_at(w, idx)->deadline >= w->due_min, "due_min above a due deadline");
    }
    if ((err = check_list(w, &w->firing, CHIME__WHERE_FIRING, &count)))
        return err;
    /*
     * Slots are visited through the bitmaps, so the walk costs O(bitmap words + timers) and can run
     * after every step of a randomised test. A non-empty slot whose bit is clear is still caught:
     * its timers are missing from count, which must equal the nodes in use.
     */
    for (unsigned i = 0; i < w->nlevels; i++) {
        const struct level *lv = &w->lv[i];
        CHECK(w->now - lv->base <= lv->last, "now outside its level's rotation");
        CHECK(lv->last == UINT64_MAX || lv->base % (lv->last + 1) == 0, "base not a rotation start");
        for (uint32_t word = 0; word < (lv->nslots + 63) / 64; word++) {
            CHECK((lv->words[word] != 0) == (lv->summary >> word & 1), "summary bit mismatch");
            for (uint64_t bits = lv->words[word]; bits; bits &= bits - 1) {
                uint32_t s = word * 64 + chime__ctz64(bits); /* bits != 0 */
                const struct list *l = &lv->slots[s];
                CHECK(s < lv->nslots, "bit set beyond the last slot");
                CHECK(l->head != CHIME__NIL, "slot bit set on an empty list");
                if ((err = check_list(w, l, slot_where(i, s), &count)))
                    return err;
                for (uint32_t idx = l->head; idx != CHIME__NIL; idx = node_at(w, idx)->next) {
                    uint64_t d = node_at(w, idx)->deadline;
                    CHECK(d > w->now || ((w->advancing || w->partial) && d == w->now && i == 0),
                          "timer in the wheel is due");
                    CHECK(d - lv->base <= lv->last, "timer outside its level's rotation");
                    CHECK(i == 0 || d - w->lv[i - 1].base > w->lv[i - 1].last,
                          "timer fits a lower level");
                    CHECK((d - lv->base) / lv->span == s, "timer in the wrong slot");
                }
            }
        }
        CHECK((lv->summary != 0) == (w->occupied >> i & 1), "occupied bit mismatch");
    }
    CHECK((w->occupied >> w->nlevels) == 0, "occupied bit above the levels");
    if ((err = check_list(w, &w->overflow, CHIME__WHERE_OVERFLOW, &count)))
        return err;
    const struct level *top = &w->lv[w->nlevels - 1];
    for (uint32_t idx = w->overflow.head; idx != CHIME__NIL; idx = node_at(w, idx)->next) {
        uint64_t d = node_at(w, idx)->deadline;
        CHECK(d - top->base > top->last, "overflow timer fits the wheel");
        CHECK(d >= w->overflow_min, "overflow_min above an overflow deadline");
    }
    CHECK(count == w->pool.used, "nodes in use not all on a list");
    CHECK(count == w->pending, "pending count wrong");
    return NULL;
}

const char *chime__wheel_check_pool(const chime_wheel *w)
{
    size_t free_count = 0;
    for (uint32_t idx = w->pool.free_head; idx != CHIME__NIL; idx = node_at(w, idx)->next) {
        CHECK(idx < chime__pool_index_limit(&w->pool) && w->pool.chunks[idx >> CHIME__CHUNK_SHIFT],
              "free list link outside the pool");
        CHECK(node_at(w, idx)->where == CHIME__WHERE_FREE, "free list holds a live node");
        CHECK(++free_count <= chime__pool_capacity(&w->pool), "free list cycles");
    }
    CHECK(free_count + w->pool.used == chime__pool_capacity(&w->pool), "nodes lost from the pool");
    return NULL;
}
