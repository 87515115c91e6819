/* SPDX-License-Identifier: MIT */
/*
 * The tuned intrusive heap baseline: see iheap.h for the design.
 *
 * Every loop takes the arity D as a constant argument and is forced inline into a caller that passes
 * 2 or 4, so each arity gets its own code (index arithmetic by shifts, a fixed tournament for the
 * smallest child) and a call pays one predictable branch to pick it.
 *
 * Timers scheduled from a callback for a tick not after the current one must fire in the next
 * advance, not this one (backend.h, as chime_wheel does). Pushed into the heap they would come back
 * to the root at once, so the advance parks them in a small side array instead, keyed as they would
 * be, and pushes them after its loop. A parked timer's index is PARKED | its place there; cancel and
 * reschedule leave a tombstone (timer NULL) in its place.
 */
#include "iheap.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Overridable so a test can exercise the renumbering; must exceed the most timers ever pending. */
#ifndef PERF_IHEAP_SEQ_LIMIT
#define PERF_IHEAP_SEQ_LIMIT UINT32_MAX
#endif
_Static_assert(PERF_IHEAP_SEQ_LIMIT <= UINT32_MAX, "sequence numbers are 32 bits");
_Static_assert(PERF_IHEAP_ARITY == 2 || PERF_IHEAP_ARITY == 4, "the heap is binary or 4-ary");

#define PARKED 0x80000000u      /* in a timer's index: the timer is parked[index & ~PARKED] */
#define MAX_CAP (PARKED - 1)    /* heap indices stay below PARKED and PERF_IHEAP_IDLE */
#define LINE 64                 /* the block's alignment: one cache line */
#define INLINE static inline __attribute__((always_inline))
/* From this many entries (1 MiB of them, this machine's L2) the root's removal prefetches the groups
 * of the next level down: at 10^6 timers that took expire from 284-292 to 191-206 ns per fired timer,
 * while below it the extra instructions cost more than the misses they hide (with it always on,
 * expire at 10^3 went from 51 to 67 ns). */
#define PREFETCH_FROM (1u << 16)

struct entry {
    uint64_t deadline;           /* effective deadline */
    struct perf_iheap_timer *tm; /* NULL only for a parked tombstone */
};
_Static_assert(sizeof(void *) != 8 || sizeof(struct entry) == 16, "an entry is 16 bytes");
_Static_assert(sizeof(void *) != 8 || sizeof(struct perf_iheap_timer) == 24, "a timer is 24 bytes");

struct perf_iheap {
    struct entry *a;        /* a[0 .. n), room for cap; D - 1 entries into block */
    void *block;            /* LINE-aligned */
    uint32_t n, cap;
    uint32_t seq;           /* the next sequence number */
    unsigned arity;
    uint64_t now;
    bool advancing;         /* inside perf_iheap_advance(): callbacks may be running */
    struct entry *parked;   /* scheduled from a callback, due no later than now: next advance */
    uint32_t nparked, parked_cap, parked_live;
};

/* x fires before y. Sequence numbers are read only on a tie (a dereference of both timers). */
INLINE bool before(const struct entry *x, const struct entry *y)
{
    return x->deadline < y->deadline || (x->deadline == y->deadline && x->tm->seq < y->tm->seq);
}

/* Put e at index i, recording the index in its timer. */
INLINE void place(struct entry *a, uint32_t i, struct entry e)
{
    a[i] = e;
    e.tm->index = i;
}

/* Fill the hole at i with e, moving e up past every later ancestor. fresh: e was scheduled just now,
 * so its sequence number is the largest of all and a tie never moves it (no dereference). */
INLINE void sift_up(struct entry *a, uint32_t i, struct entry e, unsigned D, bool fresh)
{
    while (i > 0) {
        uint32_t p = (i - 1) / D;
        if (fresh ? !(e.deadline < a[p].deadline) : !before(&e, &a[p]))
            break;
        place(a, i, a[p]);
        i = p;
    }
    place(a, i, e);
}

/* The earlier of a[i] and a[j]. Written so that the compiler selects with a conditional move: the
 * outcome of comparing random deadlines is a coin toss that a branch would mispredict half the time.
 * Ties (rare, but every comparison in a burst of one deadline) take the branch to the sequences. */
INLINE uint32_t earlier(const struct entry *a, uint32_t i, uint32_t j)
{
    uint64_t di = a[i].deadline, dj = a[j].deadline;
    if (__builtin_expect(di == dj, 0))
        return a[j].tm->seq < a[i].tm->seq ? j : i;
    return dj < di ? j : i;
}

/* The earliest of the children c .. c + D - 1 that exist (c < n). */
INLINE uint32_t min_child(const struct entry *a, uint32_t n, uint32_t c, unsigned D)
{
    if (c + D <= n) { /* a full group: a tournament, two rounds for D = 4 */
        if (D == 2)
            return earlier(a, c, c + 1);
        return earlier(a, earlier(a, c, c + 1), earlier(a, c + 2, c + 3));
    }
    uint32_t best = c;
    for (uint32_t k = c + 1; k < n; k++)
        best = earlier(a, best, k);
    return best;
}

/* Fill the hole at i with e, moving e down past every earlier child. */
INLINE void sift_down(struct entry *a, uint32_t n, uint32_t i, struct entry e, unsigned D)
{
    uint32_t c;
    while ((c = D * i + 1) < n) {
        c = min_child(a, n, c, D);
        if (!before(&a[c], &e))
            break;
        place(a, i, a[c]);
        i = c;
    }
    place(a, i, e);
}

/* Remove the root (Floyd): walk the hole down to a leaf along the earliest children, then sift the
 * last entry up from there. */
INLINE void pop_root(perf_iheap *h, unsigned D)
{
    struct entry *a = h->a;
    struct entry last = a[--h->n];
    uint32_t n = h->n, i = 0, c;
    if (n == 0)
        return;
    bool big = n > PREFETCH_FROM;
    while ((c = D * i + 1) < n) {
        if (big) /* the next level's groups, whichever child wins: their loads overlap this level's */
            for (uint32_t k = 0; k < D; k++)
                __builtin_prefetch(&a[D * (c + k) + 1]);
        c = min_child(a, n, c, D);
        place(a, i, a[c]);
        i = c;
    }
    sift_up(a, i, last, D, false);
}

/* Take the entry at i out of the heap. */
INLINE void remove_at(perf_iheap *h, uint32_t i, unsigned D)
{
    struct entry *a = h->a;
    struct entry last = a[--h->n];
    if (i == h->n)
        return;
    if (i > 0 && before(&last, &a[(i - 1) / D]))
        sift_up(a, i, last, D, false);
    else
        sift_down(a, h->n, i, last, D);
}

static int cmp_entries(const void *x, const void *y)
{
    return before(x, y) ? -1 : before(y, x) ? 1 : 0;
}

/* The sequence numbers ran out: sort (a sorted array is a heap of any arity) and renumber in key
 * order. Parked timers were scheduled after every heap entry of their deadline, so they follow. */
static void renumber(perf_iheap *h)
{
    qsort(h->a, h->n, sizeof(*h->a), cmp_entries);
    uint32_t seq = 0;
    for (uint32_t i = 0; i < h->n; i++) {
        h->a[i].tm->seq = seq++;
        h->a[i].tm->index = i;
    }
    for (uint32_t i = 0; i < h->nparked; i++)
        if (h->parked[i].tm)
            h->parked[i].tm->seq = seq++;
    h->seq = seq;
}

/* Room for cap entries: a new LINE-aligned block, the heap copied over. */
static int grow(perf_iheap *h, size_t cap)
{
    if (cap > MAX_CAP)
        cap = MAX_CAP;
    if (cap <= h->cap)
        return -ENOMEM;
    size_t bytes = (cap + h->arity - 1) * sizeof(struct entry);
    bytes = (bytes + LINE - 1) / LINE * LINE; /* aligned_alloc wants a multiple of the alignment */
    void *block = aligned_alloc(LINE, bytes);
    if (!block)
        return -ENOMEM;
    struct entry *a = (struct entry *)block + (h->arity - 1);
    if (h->n)
        memcpy(a, h->a, (size_t)h->n * sizeof(*a));
    free(h->block);
    h->block = block;
    h->a = a;
    h->cap = (uint32_t)cap;
    return 0;
}

/* Make room for one more parked timer, so that attach() cannot fail. */
static int reserve_park(perf_iheap *h)
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
INLINE bool parks(const perf_iheap *h, uint64_t deadline)
{
    return h->advancing && deadline <= h->now;
}

/* Key tm at deadline with a fresh sequence number and put it in the heap, or park it. The caller
 * made room (reserve_park, or cap > n). */
INLINE void attach(perf_iheap *h, struct perf_iheap_timer *tm, uint64_t deadline, unsigned D)
{
    if (h->seq == PERF_IHEAP_SEQ_LIMIT)
        renumber(h);
    tm->seq = h->seq++;
    bool due = deadline <= h->now;
    struct entry e = { .deadline = due ? h->now : deadline, .tm = tm };
    if (due && h->advancing) {
        tm->index = PARKED | h->nparked;
        h->parked[h->nparked++] = e;
        h->parked_live++;
    } else {
        sift_up(h->a, h->n++, e, D, true);
    }
}

/* Take a pending tm out of the heap or the parked array and mark it idle. */
INLINE void detach(perf_iheap *h, struct perf_iheap_timer *tm, unsigned D)
{
    uint32_t i = tm->index;
    if (i & PARKED) {
        h->parked[i & ~PARKED].tm = NULL;
        h->parked_live--;
    } else {
        remove_at(h, i, D);
    }
    tm->index = PERF_IHEAP_IDLE;
}

perf_iheap *perf_iheap_new(uint64_t start, size_t capacity_hint, unsigned arity)
{
    if (arity == 0)
        arity = PERF_IHEAP_ARITY;
    if (arity != 2 && arity != 4)
        return NULL;
    perf_iheap *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    h->now = start;
    h->arity = arity;
    if (capacity_hint && grow(h, capacity_hint)) {
        perf_iheap_free(h);
        return NULL;
    }
    return h;
}

void perf_iheap_free(perf_iheap *h)
{
    if (!h)
        return;
    free(h->block);
    free(h->parked);
    free(h);
}

/* The body of schedule and reschedule for one arity: tm's deadline becomes deadline. Growing from a
 * callback is safe: the firing loop reads the array's address afresh for every timer. */
INLINE int set(perf_iheap *h, struct perf_iheap_timer *tm, uint64_t deadline, unsigned D)
{
    bool pending = tm->index != PERF_IHEAP_IDLE;
    if (parks(h, deadline) && reserve_park(h))
        return -ENOMEM;
    /* Room for every pending timer in the heap, parked ones included (they come back after the
     * advance's loop, where growing could fail); a pending tm's own place makes room for itself. */
    if (h->n + h->parked_live + !pending > h->cap && grow(h, h->cap ? (size_t)h->cap * 2 : 64))
        return -ENOMEM;
    if (pending)
        detach(h, tm, D);
    attach(h, tm, deadline, D);
    return 0;
}

int perf_iheap_schedule(perf_iheap *h, struct perf_iheap_timer *tm, uint64_t deadline, chime_fn *fn,
                        void *arg)
{
    if (!h || !tm || !fn)
        return -EINVAL;
    int err = h->arity == 4 ? set(h, tm, deadline, 4) : set(h, tm, deadline, 2);
    if (!err) {
        tm->fn = fn;
        tm->arg = arg;
    }
    return err;
}

int perf_iheap_cancel(perf_iheap *h, struct perf_iheap_timer *tm)
{
    if (!h || !tm)
        return -EINVAL;
    if (tm->index == PERF_IHEAP_IDLE)
        return -ENOENT;
    if (h->arity == 4)
        detach(h, tm, 4);
    else
        detach(h, tm, 2);
    return 0;
}

int perf_iheap_reschedule(perf_iheap *h, struct perf_iheap_timer *tm, uint64_t deadline)
{
    if (!h || !tm)
        return -EINVAL;
    if (tm->index == PERF_IHEAP_IDLE)
        return -ENOENT;
    return h->arity == 4 ? set(h, tm, deadline, 4) : set(h, tm, deadline, 2);
}

/* The firing loop of perf_iheap_advance for one arity. */
INLINE size_t fire(perf_iheap *h, uint64_t now, unsigned D)
{
    size_t fired = 0;
    while (h->n && h->a[0].deadline <= now) {
        struct entry top = h->a[0];
        pop_root(h, D);
        struct perf_iheap_timer *tm = top.tm;
        tm->index = PERF_IHEAP_IDLE; /* not pending before the callback runs: it may reuse tm */
        if (top.deadline > h->now)
            h->now = top.deadline; /* a callback sees its own deadline as the time */
        tm->fn(tm->arg);
        fired++;
    }
    h->now = now;
    /* Parked timers are due no later than now and everything left in the heap is due after it:
     * pushing them in order keeps them first, in schedule order. */
    for (uint32_t i = 0; i < h->nparked; i++) {
        struct entry e = h->parked[i];
        if (e.tm)
            sift_up(h->a, h->n++, e, D, false);
    }
    h->nparked = h->parked_live = 0;
    return fired;
}

size_t perf_iheap_advance(perf_iheap *h, uint64_t now)
{
    if (!h || h->advancing || now < h->now)
        return 0;
    h->advancing = true;
    size_t fired = h->arity == 4 ? fire(h, now, 4) : fire(h, now, 2);
    h->advancing = false;
    return fired;
}

int perf_iheap_next(const perf_iheap *h, uint64_t *deadline)
{
    if (!h || !deadline)
        return -EINVAL;
    bool found = false;
    uint64_t best = 0;
    for (uint32_t i = 0; i < h->nparked && !found; i++) { /* only from a callback */
        if (h->parked[i].tm) {
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

size_t perf_iheap_pending(const perf_iheap *h)
{
    return (size_t)h->n + h->parked_live;
}

unsigned perf_iheap_arity(const perf_iheap *h)
{
    return h->arity;
}

int perf_iheap_check(const perf_iheap *h)
{
    uint32_t live = 0;
    for (uint32_t i = 0; i < h->n; i++) {
        const struct entry *e = &h->a[i];
        if (!e->tm || e->tm->index != i || e->tm->seq >= h->seq)
            return -EINVAL;
        if (i > 0 && before(e, &h->a[(i - 1) / h->arity]))
            return -EINVAL;
    }
    for (uint32_t i = 0; i < h->nparked; i++) {
        const struct perf_iheap_timer *tm = h->parked[i].tm;
        if (!tm)
            continue;
        if (tm->index != (PARKED | i) || tm->seq >= h->seq)
            return -EINVAL;
        live++;
    }
    return live == h->parked_live && h->n + live <= h->cap ? 0 : -EINVAL;
}
