/* SPDX-License-Identifier: MIT */
/*
 * The sorted-list baseline: see list.h for the design.
 *
 * Both lists are circular with a sentinel, so unlinking never needs to know which list a timer is
 * in: e[PENDING] heads the sorted list, e[PARKED] the timers a callback scheduled for a tick not
 * after the current one, which must wait for the next advance (backend.h). The advance splices them
 * in front of the sorted list when its loop is done. The timer in slot i is e[i + FIRST].
 */
#include "list.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "slots.h"

#define PENDING 0u
#define PARKED 1u
#define FIRST 2u /* e[] index of slot 0 */
_Static_assert(PERF_SLOTS_MAX + FIRST > PERF_SLOTS_MAX, "e[] indices fit in 32 bits");

struct link {
    uint64_t deadline; /* effective deadline */
    uint32_t prev, next;
};

struct perf_list {
    struct link *e;         /* FIRST + slots.cap entries */
    struct perf_slots slots;
    uint64_t now;
    bool advancing;         /* inside perf_list_advance(): callbacks may be running */
};

static inline void link_after(struct link *e, uint32_t p, uint32_t i)
{
    uint32_t n = e[p].next;
    e[i].prev = p;
    e[i].next = n;
    e[n].prev = i;
    e[p].next = i;
}

static inline void unlink_at(struct link *e, uint32_t i)
{
    e[e[i].prev].next = e[i].next;
    e[e[i].next].prev = e[i].prev;
}

/* Key slot's timer at deadline and link it where it belongs. */
static void attach(perf_list *l, uint32_t slot, uint64_t deadline)
{
    struct link *e = l->e;
    uint32_t i = slot + FIRST;
    if (deadline <= l->now) {
        e[i].deadline = l->now;
        if (l->advancing) {
            link_after(e, e[PARKED].prev, i);
            return;
        }
    } else {
        e[i].deadline = deadline;
    }
    uint64_t d = e[i].deadline;
    uint32_t p = e[PENDING].next;
    if (p == PENDING || d < e[p].deadline) {
        p = PENDING; /* before the head: O(1) */
    } else {
        p = e[PENDING].prev; /* the walk: after the last timer due no later */
        while (e[p].deadline > d)
            p = e[p].prev; /* stops at the head at the latest, whose deadline is <= d */
    }
    link_after(e, p, i);
}

static int grow(perf_list *l, size_t hint)
{
    uint32_t cap = perf_slots_next_cap(&l->slots, hint);
    if (!cap)
        return -ENOMEM;
    struct link *e = realloc(l->e, ((size_t)cap + FIRST) * sizeof(*e));
    if (!e)
        return -ENOMEM;
    l->e = e;
    return perf_slots_grow(&l->slots, cap);
}

perf_list *perf_list_new(uint64_t start, size_t capacity_hint)
{
    perf_list *l = calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->now = start;
    perf_slots_init(&l->slots);
    l->e = malloc(FIRST * sizeof(*l->e));
    if (!l->e || (capacity_hint && grow(l, capacity_hint))) {
        perf_list_free(l);
        return NULL;
    }
    l->e[PENDING] = (struct link){ .prev = PENDING, .next = PENDING };
    l->e[PARKED] = (struct link){ .prev = PARKED, .next = PARKED };
    return l;
}

void perf_list_free(perf_list *l)
{
    if (!l)
        return;
    perf_slots_destroy(&l->slots);
    free(l->e);
    free(l);
}

int perf_list_schedule(perf_list *l, uint64_t deadline, chime_fn *fn, void *arg, uint64_t *handle)
{
    if (!l || !fn)
        return -EINVAL;
    if (l->slots.free_head == PERF_NIL) {
        int err = grow(l, 0);
        if (err)
            return err;
    }
    uint32_t slot = perf_slots_take(&l->slots, fn, arg);
    attach(l, slot, deadline);
    if (handle)
        *handle = perf_slots_handle(&l->slots, slot);
    return 0;
}

/* Unlink the timer handle names, leaving its slot live. Return: 0; -ENOENT; -EINVAL. */
static int detach(perf_list *l, uint64_t handle, uint32_t *slot)
{
    if (!l)
        return -EINVAL;
    *slot = perf_slots_find(&l->slots, handle);
    if (*slot == PERF_NIL)
        return -ENOENT;
    unlink_at(l->e, *slot + FIRST);
    return 0;
}

int perf_list_cancel(perf_list *l, uint64_t handle)
{
    uint32_t slot;
    int err = detach(l, handle, &slot);
    if (!err)
        perf_slots_give(&l->slots, slot);
    return err;
}

int perf_list_reschedule(perf_list *l, uint64_t handle, uint64_t deadline)
{
    uint32_t slot;
    int err = detach(l, handle, &slot);
    if (!err)
        attach(l, slot, deadline);
    return err;
}

size_t perf_list_advance(perf_list *l, uint64_t now)
{
    if (l->advancing || now < l->now)
        return 0;
    l->advancing = true;
    struct link *e = l->e;
    size_t fired = 0;
    uint32_t i;
    while ((i = e[PENDING].next) != PENDING && e[i].deadline <= now) {
        unlink_at(e, i);
        uint32_t slot = i - FIRST;
        struct perf_slot *s = &l->slots.v[slot];
        chime_fn *fn = s->fn;
        void *arg = s->arg;
        perf_slots_give(&l->slots, slot); /* the handle is dead before the callback runs */
        if (e[i].deadline > l->now)
            l->now = e[i].deadline; /* a callback sees its own deadline as the time */
        fn(arg);
        fired++;
        e = l->e; /* the callback may have grown the arrays */
    }
    l->now = now;
    /* Parked timers are due no later than now, everything still pending after it: they go first. */
    if (e[PARKED].next != PARKED) {
        uint32_t first = e[PARKED].next, last = e[PARKED].prev, head = e[PENDING].next;
        e[PENDING].next = first;
        e[first].prev = PENDING;
        e[last].next = head;
        e[head].prev = last;
        e[PARKED] = (struct link){ .prev = PARKED, .next = PARKED };
    }
    l->advancing = false;
    return fired;
}

int perf_list_next(const perf_list *l, uint64_t *deadline)
{
    if (!l || !deadline)
        return -EINVAL;
    const struct link *e = l->e;
    uint32_t p = e[PARKED].next, q = e[PENDING].next; /* parked: only from a callback */
    if (p == PARKED && q == PENDING)
        return -ENOENT;
    if (p == PARKED || (q != PENDING && e[q].deadline < e[p].deadline))
        p = q;
    *deadline = e[p].deadline;
    return 0;
}

size_t perf_list_pending(const perf_list *l)
{
    return l->slots.used;
}

/* Count the timers of the list headed by sentinel s, checking links and (if sorted) order. */
static int64_t check_one(const perf_list *l, uint32_t s, bool sorted)
{
    const struct link *e = l->e;
    int64_t count = 0;
    for (uint32_t p = s, i = e[s].next; i != s; p = i, i = e[i].next) {
        if (i < FIRST || i - FIRST >= l->slots.cap || !l->slots.v[i - FIRST].fn)
            return -1;
        if (e[i].prev != p || (sorted && p != s && e[p].deadline > e[i].deadline))
            return -1;
        if (++count > (int64_t)l->slots.used)
            return -1;
    }
    return count;
}

int perf_list_check(const perf_list *l)
{
    int64_t pending = check_one(l, PENDING, true), parked = check_one(l, PARKED, false);
    if (pending < 0 || parked < 0 || pending + parked != (int64_t)l->slots.used)
        return -EINVAL;
    return 0;
}
