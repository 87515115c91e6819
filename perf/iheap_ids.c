/* SPDX-License-Identifier: MIT */
/*
 * The intrusive heap (iheap.h) behind backend.h's id-based table, for correctness checking only: the
 * differential test and check_baselines drive every structure by id, and the intrusive heap has no
 * ids. Each id is a generation-checked slot of slots.h whose record, allocated once per slot and
 * never moved, holds the intrusive timer. The record's timer runs a trampoline that gives the slot
 * back (the id dies before the callback runs, as backend.h requires) and then the user's callback.
 * The harness never comes here: it calls iheap.h with the timers themselves.
 */
#include <errno.h>
#include <stdlib.h>

#include "backend.h"
#include "iheap.h"
#include "slots.h"

struct ids;

struct rec {
    struct perf_iheap_timer tm;
    struct ids *ids;
    uint32_t slot;
};

struct ids {
    perf_iheap *h;
    struct perf_slots slots; /* the user's fn and arg, and the ids */
    struct rec **recs;       /* recs[slot], slots.cap of them */
};

static void trampoline(void *arg)
{
    struct rec *r = arg;
    struct perf_slot *s = &r->ids->slots.v[r->slot];
    chime_fn *fn = s->fn;
    void *user = s->arg;
    perf_slots_give(&r->ids->slots, r->slot);
    fn(user);
}

static int grow(struct ids *t)
{
    uint32_t old = t->slots.cap, cap = perf_slots_next_cap(&t->slots, 0);
    if (!cap)
        return -ENOMEM;
    struct rec **recs = realloc(t->recs, (size_t)cap * sizeof(*recs));
    if (!recs)
        return -ENOMEM;
    t->recs = recs;
    for (uint32_t i = old; i < cap; i++) {
        recs[i] = malloc(sizeof(*recs[i]));
        if (!recs[i]) {
            while (i-- > old)
                free(recs[i]);
            return -ENOMEM;
        }
        *recs[i] = (struct rec){ .tm = PERF_IHEAP_TIMER_INIT, .ids = t, .slot = i };
    }
    if (perf_slots_grow(&t->slots, cap)) {
        for (uint32_t i = old; i < cap; i++)
            free(recs[i]);
        return -ENOMEM;
    }
    return 0;
}

static void ids_destroy(void *p)
{
    struct ids *t = p;
    if (!t)
        return;
    for (uint32_t i = 0; i < t->slots.cap; i++)
        free(t->recs[i]);
    free(t->recs);
    perf_slots_destroy(&t->slots);
    perf_iheap_free(t->h);
    free(t);
}

static void *ids_create(uint64_t start, size_t capacity_hint, unsigned arity)
{
    struct ids *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    perf_slots_init(&t->slots);
    t->h = perf_iheap_new(start, capacity_hint, arity);
    if (!t->h) {
        ids_destroy(t);
        return NULL;
    }
    return t;
}

static void *create2(uint64_t start, size_t hint) { return ids_create(start, hint, 2); }
static void *create4(uint64_t start, size_t hint) { return ids_create(start, hint, 4); }

static int ids_schedule(void *p, uint64_t deadline, chime_fn *fn, void *arg, uint64_t *handle)
{
    struct ids *t = p;
    if (!fn)
        return -EINVAL;
    if (t->slots.free_head == PERF_NIL && grow(t))
        return -ENOMEM;
    uint32_t slot = perf_slots_take(&t->slots, fn, arg);
    struct rec *r = t->recs[slot];
    int err = perf_iheap_schedule(t->h, &r->tm, deadline, trampoline, r);
    if (err) {
        perf_slots_give(&t->slots, slot);
        return err;
    }
    if (handle)
        *handle = perf_slots_handle(&t->slots, slot);
    return 0;
}

static int ids_cancel(void *p, uint64_t handle)
{
    struct ids *t = p;
    uint32_t slot = perf_slots_find(&t->slots, handle);
    if (slot == PERF_NIL)
        return -ENOENT;
    int err = perf_iheap_cancel(t->h, &t->recs[slot]->tm);
    if (!err)
        perf_slots_give(&t->slots, slot);
    return err; /* -ENOENT here would be the adapter's own bug: check() then fails too */
}

static int ids_reschedule(void *p, uint64_t handle, uint64_t deadline)
{
    struct ids *t = p;
    uint32_t slot = perf_slots_find(&t->slots, handle);
    if (slot == PERF_NIL)
        return -ENOENT;
    return perf_iheap_reschedule(t->h, &t->recs[slot]->tm, deadline);
}

static size_t ids_advance(void *p, uint64_t now) { return perf_iheap_advance(((struct ids *)p)->h, now); }

static int ids_next(void *p, uint64_t *deadline)
{
    return perf_iheap_next(((struct ids *)p)->h, deadline);
}

static size_t ids_pending(void *p) { return perf_iheap_pending(((struct ids *)p)->h); }

/* The heap's own check, and every live id's timer pending and every free one's idle. */
static int ids_check(const void *p)
{
    const struct ids *t = p;
    if (perf_iheap_check(t->h) || perf_iheap_pending(t->h) != t->slots.used)
        return -EINVAL;
    for (uint32_t i = 0; i < t->slots.cap; i++)
        if ((t->slots.v[i].fn != NULL) != (t->recs[i]->tm.index != PERF_IHEAP_IDLE))
            return -EINVAL;
    return 0;
}

#define IDS_BACKEND(arity)                                                                        \
    const struct chime_backend chime_backend_iheap##arity = {                                      \
        .name = "iheap" #arity,                                                                   \
        .create = create##arity,                                                                  \
        .destroy = ids_destroy,                                                                   \
        .schedule = ids_schedule,                                                                 \
        .cancel = ids_cancel,                                                                     \
        .reschedule = ids_reschedule,                                                             \
        .advance = ids_advance,                                                                   \
        .next = ids_next,                                                                         \
        .pending = ids_pending,                                                                   \
        .check = ids_check,                                                                       \
    };

IDS_BACKEND(2)
IDS_BACKEND(4)
