/* SPDX-License-Identifier: MIT */
/*
 * The binary min-heap baseline: see heap.h for the design.
 *
 * Timers scheduled from a callback for a tick not after the current one must fire in the next
 * advance, not this one (backend.h, as chime_wheel does). Pushed into the heap they would come back
 * to the root at once, so the advance parks them in a small side array instead, keyed as they would
 * be, and pushes them after its loop. A parked timer's slot holds PARKED | its index there; cancel
 * and reschedule leave a tombstone (slot PERF_NIL) in its place.
 */
#include "heap.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "slots.h"

/* Overridable so a test can exercise the renumbering; must exceed the most timers ever pending. */
#ifndef PERF_HEAP_SEQ_LIMIT
#define PERF_HEAP_SEQ_LIMIT UINT32_MAX
#endif
_Static_assert(PERF_HEAP_SEQ_LIMIT <= UINT32_MAX, "sequence numbers are 32 bits");

#define PARKED 0x80000000u /* in a slot's pos: the timer is parked[pos & ~PARKED] */
_Static_assert(PERF_SLOTS_MAX <= PARKED, "heap indices never reach the PARKED bit");

struct entry {
    uint64_t deadline; /* effective deadline */
    uint32_t seq;      /* schedule order among equal deadlines */
    uint32_t slot;     /* the timer's slot (PERF_NIL: a parked tombstone) */
};

struct perf_heap {
    struct entry *a;        /* a[0 .. n), room for slots.cap */
    uint32_t n;
    uint32_t seq;           /* the next sequence number */
    uint64_t now;
    struct perf_slots slots;
    bool advancing;         /* inside perf_heap_advance(): callbacks may be running */
    struct entry *parked;   /* scheduled from a callback, due no later than now: next advance */
    uint32_t nparked, parked_cap;
};

static inline bool before(const struct entry *x, const struct entry *y)
{
    return x->deadline < y->deadline || (x->deadline == y->deadline && x->seq < y->seq);
}

/* Put e at index i, recording the index in its slot. */
static inline void place(perf_heap *h, uint32_t i, struct entry e)
{
    h->a[i] = e;
    h->slots.v[e.slot].pos = i;
}

/* Fill the hole at i with e, moving e up past every larger ancestor. */
static void sift_up(perf_heap *h, uint32_t i, struct entry e)
{
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (!before(&e, &h->a[p]))
            break;
        place(h, i, h->a[p]);
        i = p;
    }
    place(h, i, e);
}

/* Fill the hole at i with e, moving e down past every smaller child. */
static void sift_down(perf_heap *h, uint32_t i, struct entry e)
{
    uint32_t c;
    while ((c = 2 * i + 1) < h->n) {
        if (c + 1 < h->n && before(&h->a[c + 1], &h->a[c]))
            c++;
        if (!before(&h->a[c], &e))
            break;
        place(h, i, h->a[c]);
        i = c;
    }
    place(h, i, e);
}

/* Remove the root: walk the hole down to a leaf along the smaller children, then sift the last
 * entry up from there (Floyd). The last entry usually belongs near the bottom, so this saves the
 * second comparison per level that sift_down would make. */
static void pop_root(perf_heap *h)
{
    struct entry last = h->a[--h->n];
    if (h->n == 0)
        return;
    uint32_t i = 0, c;
    while ((c = 2 * i + 1) < h->n) {
        if (c + 1 < h->n && before(&h->a[c + 1], &h->a[c]))
            c++;
        place(h, i, h->a[c]);
        i = c;
    }
    sift_up(h, i, last);
}

/* Take the entry at i out of the heap. */
static void remove_at(perf_heap *h, uint32_t i)
{
    struct entry last = h->a[--h->n];
    if (i == h->n)
        return;
    if (i > 0 && before(&last, &h->a[(i - 1) / 2]))
        sift_up(h, i, last);
    else
        sift_down(h, i, last);
}

static int cmp_entries(const void *x, const void *y)
{
    return before(x, y) ? -1 : before(y, x) ? 1 : 0;
}

/* The sequence numbers ran out: sort (a sorted array is a heap) and renumber in key order. Parked
 * timers sort after every heap entry of their deadline (they were scheduled later), so they follow. */
static void renumber(perf_heap *h)
{
    qsort(h->a, h->n, sizeof(*h->a), cmp_entries);
    uint32_t seq = 0;
    for (uint32_t i = 0; i < h->n; i++) {
        h->a[i].seq = seq++;
        h->slots.v[h->a[i].slot].pos = i;
    }
    for (uint32_t i = 0; i < h->nparked; i++)
        h->parked[i].seq = seq++;
    h->seq = seq;
}

/* Make room for one more parked timer, so that attach() cannot fail. */
static int reserve_park(perf_heap *h)
{
    if (h->nparked < h->parked_cap)
        return 0;
    uint32_t cap = h->parked_cap ? h->parked_cap * 2 : 16;
    struct entry *p = realloc(h->parked, (size_t)cap * sizeof(*p));
    if (!p)
        return -ENOMEM;
    h->parked = p;
    h->parked_cap = cap;
    return 0;
}

/* Whether attach(deadline) would park the timer (and so needs reserve_park() first). */
static inline bool parks(const perf_heap *h, uint64_t deadline)
{
    return h->advancing && deadline <= h->now;
}

/* Key slot's timer at deadline with a fresh sequence number and put it in the heap, or park it. */
static void attach(perf_heap *h, uint32_t slot, uint64_t deadline)
{
    if (h->seq == PERF_HEAP_SEQ_LIMIT)
        renumber(h);
    bool due = deadline <= h->now;
    struct entry e = { .deadline = due ? h->now : deadline, .seq = h->seq++, .slot = slot };
    if (due && h->advancing) {
        h->slots.v[slot].pos = PARKED | h->nparked;
        h->parked[h->nparked++] = e;
    } else {
        sift_up(h, h->n++, e);
    }
}

/* Take slot's timer out of the heap or the parked array (its slot stays live). */
static void detach(perf_heap *h, uint32_t slot)
{
    uint32_t pos = h->slots.v[slot].pos;
    if (pos & PARKED)
        h->parked[pos & ~PARKED].slot = PERF_NIL;
    else
        remove_at(h, pos);
}

static int grow(perf_heap *h, size_t hint)
{
    uint32_t cap = perf_slots_next_cap(&h->slots, hint);
    if (!cap)
        return -ENOMEM;
    struct entry *a = realloc(h->a, (size_t)cap * sizeof(*a));
    if (!a)
        return -ENOMEM;
    h->a = a;
    return perf_slots_grow(&h->slots, cap);
}

perf_heap *perf_heap_new(uint64_t start, size_t capacity_hint)
{
    perf_heap *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    h->now = start;
    perf_slots_init(&h->slots);
    if (capacity_hint && grow(h, capacity_hint)) {
        perf_heap_free(h);
        return NULL;
    }
    return h;
}

void perf_heap_free(perf_heap *h)
{
    if (!h)
        return;
    perf_slots_destroy(&h->slots);
    free(h->a);
    free(h->parked);
    free(h);
}

int perf_heap_schedule(perf_heap *h, uint64_t deadline, chime_fn *fn, void *arg, uint64_t *handle)
{
    if (!h || !fn)
        return -EINVAL;
    int err = 0;
    if (h->slots.free_head == PERF_NIL)
        err = grow(h, 0);
    if (!err && parks(h, deadline))
        err = reserve_park(h);
    if (err)
        return err;
    uint32_t slot = perf_slots_take(&h->slots, fn, arg);
    attach(h, slot, deadline);
    if (handle)
        *handle = perf_slots_handle(&h->slots, slot);
    return 0;
}

int perf_heap_cancel(perf_heap *h, uint64_t handle)
{
    if (!h)
        return -EINVAL;
    uint32_t slot = perf_slots_find(&h->slots, handle);
    if (slot == PERF_NIL)
        return -ENOENT;
    detach(h, slot);
    perf_slots_give(&h->slots, slot);
    return 0;
}

int perf_heap_reschedule(perf_heap *h, uint64_t handle, uint64_t deadline)
{
    if (!h)
        return -EINVAL;
    uint32_t slot = perf_slots_find(&h->slots, handle);
    if (slot == PERF_NIL)
        return -ENOENT;
    if (parks(h, deadline) && reserve_park(h))
        return -ENOMEM; /* nothing changed */
    detach(h, slot);
    attach(h, slot, deadline);
    return 0;
}

size_t perf_heap_advance(perf_heap *h, uint64_t now)
{
    if (h->advancing || now < h->now)
        return 0;
    h->advancing = true;
    size_t fired = 0;
    while (h->n && h->a[0].deadline <= now) {
        struct entry top = h->a[0];
        pop_root(h);
        struct perf_slot *s = &h->slots.v[top.slot];
        chime_fn *fn = s->fn;
        void *arg = s->arg;
        perf_slots_give(&h->slots, top.slot); /* the handle is dead before the callback runs */
        if (top.deadline > h->now)
            h->now = top.deadline; /* a callback sees its own deadline as the time */
        fn(arg);
        fired++;
    }
    h->now = now;
    /* Parked timers are due no later than now and everything left in the heap is due after it:
     * pushing them in order keeps them first, in schedule order. */
    for (uint32_t i = 0; i < h->nparked; i++)
        if (h->parked[i].slot != PERF_NIL)
            sift_up(h, h->n++, h->parked[i]);
    h->nparked = 0;
    h->advancing = false;
    return fired;
}

int perf_heap_next(const perf_heap *h, uint64_t *deadline)
{
    if (!h || !deadline)
        return -EINVAL;
    bool found = false;
    uint64_t best = 0;
    for (uint32_t i = 0; i < h->nparked && !found; i++) { /* only from a callback */
        if (h->parked[i].slot != PERF_NIL) {
            best = h->parked[i].deadline;
            found = true;
        }
    }
    if (h->n && (!found || h->a[0].deadline < best)) {
        best = h->a[0].deadline;
        found = true;
    }
    if (!found)
        return -ENOENT;
    *deadline = best;
    return 0;
}

size_t perf_heap_pending(const perf_heap *h)
{
    return h->slots.used;
}

int perf_heap_check(const perf_heap *h)
{
    uint32_t live = h->n;
    for (uint32_t i = 0; i < h->n; i++) {
        const struct entry *e = &h->a[i];
        if (e->slot >= h->slots.cap || !h->slots.v[e->slot].fn || h->slots.v[e->slot].pos != i)
            return -EINVAL;
        if (i > 0 && before(e, &h->a[(i - 1) / 2]))
            return -EINVAL;
        if (e->seq >= h->seq)
            return -EINVAL;
    }
    for (uint32_t i = 0; i < h->nparked; i++) {
        uint32_t slot = h->parked[i].slot;
        if (slot == PERF_NIL)
            continue;
        if (h->slots.v[slot].pos != (PARKED | i))
            return -EINVAL;
        live++;
    }
    return live == h->slots.used ? 0 : -EINVAL;
}
