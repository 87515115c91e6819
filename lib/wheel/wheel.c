/* SPDX-License-Identifier: MIT */
/*
 * The public wheel: chime_wheel_* (include/chime.h) over the levels (levels.c, which opens with the
 * design: the mixed-radix clock, placement, cascading and the invariants) and the nodes (nodes.h:
 * 32-byte timer nodes, generation-checked ids).
 *
 * What this file adds to the levels is what a timer means to a user: its id, its callback and
 * argument, and periodic re-arming. A periodic node has CHIME__POS_OWNER set in its position word
 * and its period in the nodes' period array; it is re-armed (placed again) before its callback runs,
 * at the first boundary after the running advance's target, so the callback may cancel or reschedule
 * it and it never fires twice in one advance.
 */
#include "wheel/wheel.h"

#include <errno.h>

#include "alloc.h"
#include "wheel/levels.h"
#include "wheel/nodes.h"

#define PERIODIC CHIME__POS_OWNER /* in a node's pos: the node is a periodic timer */

/* The layout the clock of the card describes; see the table at the top of levels.c. */
static const struct chime_wheel_config default_config = { CHIME_LAYOUT_MILLISECONDS };

struct chime_wheel {
    struct chime__levels L;
    struct chime__nodes nodes;
};

/* The levels read nodes through L.nodes (and prefetch the cold halves they fire through L.cold):
 * after anything that may have moved the arrays. */
static inline void sync_nodes(chime_wheel *w)
{
    chime__nodes_attach(&w->nodes, &w->L);
}

/* The levels' fire step (chime__fire_fn): re-arm or free the node, then run its callback. */
static int fire(void *ctx, uint32_t idx)
{
    chime_wheel *w = ctx;
    struct chime__wnode *h = chime__nodes_hot(&w->nodes, idx);
    const struct chime__call *call = chime__nodes_call(&w->nodes, idx);
    chime_fn *fn = call->fn;
    void *arg = call->arg;
    if (h->pos & PERIODIC) {
        uint64_t deadline = h->deadline;
        uint64_t period = *chime__nodes_period(&w->nodes, idx);
        if (chime__levels_next_boundary(&w->L, &h->deadline, period, UINT64_MAX)) {
            if (chime__levels_place(&w->L, idx) != 0) { /* after advance_to >= now: a slot */
                h->deadline = deadline;
                return -ENOMEM; /* nothing done: the levels stop before this timer */
            }
            fn(arg); /* may schedule, cancel or reschedule anything, this timer included */
            return 0;
        }
    }
    chime__levels_sub(&w->L);
    chime__nodes_give(&w->nodes, idx);
    fn(arg);
    return 0;
}

int chime__wheel_config(struct chime_wheel_config *c)
{
    if (c->levels == 0) {
        uint64_t start = c->start;
        *c = default_config;
        c->start = start;
    }
    if (c->levels > CHIME_MAX_LEVELS)
        return -EINVAL;
    for (unsigned i = 0; i < c->levels; i++)
        if (c->slots[i] < 2 || c->slots[i] > CHIME_MAX_SLOTS)
            return -EINVAL;
    return 0;
}

int chime_wheel_new(chime_wheel **out, const struct chime_wheel_config *cfg)
{
    if (!out)
        return -EINVAL;
    struct chime_wheel_config c = cfg ? *cfg : (struct chime_wheel_config){ 0 };
    if (chime__wheel_config(&c) != 0)
        return -EINVAL;

    chime_wheel *w = chime__alloc(sizeof(*w));
    if (!w)
        return -ENOMEM;
    if (chime__levels_init(&w->L, &c, fire, w) != 0) {
        chime__free(w, sizeof(*w));
        return -ENOMEM;
    }
    chime__nodes_init(&w->nodes);
    sync_nodes(w);
    *out = w;
    return 0;
}

void chime_wheel_free(chime_wheel *w, chime_fn *on_unfired)
{
    if (!w)
        return;
    if (on_unfired) {
        for (uint32_t i = 0; i < chime__nodes_extent(&w->nodes); i++)
            if (chime__nodes_in_use(&w->nodes, i))
                on_unfired(chime__nodes_call(&w->nodes, i)->arg);
    }
    chime__levels_destroy(&w->L);
    chime__nodes_destroy(&w->nodes);
    chime__free(w, sizeof(*w));
}

static int schedule(chime_wheel *w, uint64_t deadline, uint64_t period, chime_fn *fn, void *arg,
                    chime_id *id)
{
    if (!w || !fn)
        return -EINVAL;
    uint32_t idx;
    int err = chime__nodes_take(&w->nodes, &idx);
    sync_nodes(w); /* a take may move the arrays, a failed one too (it grows them one after the other) */
    if (err)
        return err;
    struct chime__wnode *h = chime__nodes_hot(&w->nodes, idx);
    h->deadline = deadline;
    h->pos = 0;
    if (period) {
        if ((err = chime__nodes_grow_periods(&w->nodes, idx)) != 0)
            goto fail;
        *chime__nodes_period(&w->nodes, idx) = period;
        h->pos = PERIODIC;
    }
    if ((err = chime__levels_place(&w->L, idx)) != 0)
        goto fail;
    *chime__nodes_call(&w->nodes, idx) = (struct chime__call){ fn, arg };
    chime__levels_add(&w->L);
    if (id)
        *id = chime__nodes_id(&w->nodes, idx);
    return 0;

fail:
    chime__nodes_give(&w->nodes, idx); /* the id was never handed out */
    return err;
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

int chime_wheel_cancel(chime_wheel *w, chime_id id)
{
    if (!w)
        return -EINVAL;
    /* The node freed here is the next one schedule hands out (LIFO), and schedule writes its cold
     * half, which nothing here reads: fetch it for writing now, alongside the hot half's miss, instead
     * of after it. Only for an index of a node handed out: a forged id's may lie past the array, or
     * the array not exist yet, and forming that address is undefined behaviour even for a prefetch
     * (the fuzz target found it with UBSan: an offset applied to the null array of an empty wheel). */
    if ((uint32_t)id < chime__nodes_extent(&w->nodes))
        __builtin_prefetch(chime__nodes_call(&w->nodes, (uint32_t)id), 1);
    uint32_t idx = chime__nodes_find(&w->nodes, id);
    if (idx == CHIME__NIL)
        return -ENOENT;
    const struct chime__wnode *h = chime__nodes_hot(&w->nodes, idx);
    chime__levels_remove_at(&w->L, h->deadline, h->pos);
    chime__levels_sub(&w->L);
    chime__nodes_give(&w->nodes, idx);
    return 0;
}

int chime_wheel_reschedule(chime_wheel *w, chime_id id, uint64_t deadline)
{
    if (!w)
        return -EINVAL;
    uint32_t idx = chime__nodes_find(&w->nodes, id);
    if (idx == CHIME__NIL)
        return -ENOENT;
    return chime__levels_move(&w->L, idx, deadline);
}

size_t chime_wheel_advance(chime_wheel *w, uint64_t now)
{
    bool done;
    return chime__levels_advance(&w->L, now, SIZE_MAX, &done);
}

int chime_wheel_next(const chime_wheel *w, uint64_t *deadline)
{
    if (!w || !deadline)
        return -EINVAL;
    return chime__levels_next(&w->L, deadline);
}

size_t chime_wheel_pending(const chime_wheel *w)
{
    return chime__nodes_used(&w->nodes);
}

uint64_t chime_wheel_now(const chime_wheel *w)
{
    return w->L.now;
}

/* ---- what the runtime and the tests reach beyond chime.h (wheel.h) ---- */

size_t chime__wheel_advance_some(chime_wheel *w, uint64_t now, size_t limit, bool *done)
{
    return chime__levels_advance(&w->L, now, limit, done);
}

bool chime__wheel_is_pending(const chime_wheel *w, chime_id id)
{
    return chime__nodes_find(&w->nodes, id) != CHIME__NIL;
}

size_t chime__wheel_trim(chime_wheel *w)
{
    size_t freed = chime__levels_trim(&w->L);
    size_t mapped = chime__nodes_bytes(&w->nodes);
    return freed + (chime__nodes_reset(&w->nodes) ? mapped : 0);
}

size_t chime__wheel_capacity(const chime_wheel *w)
{
    return chime__nodes_extent(&w->nodes);
}

uint64_t chime__wheel_cascaded(const chime_wheel *w)
{
    return w->L.moved;
}

const char *chime__wheel_check(const chime_wheel *w)
{
    const char *err = chime__levels_check(&w->L, chime__nodes_extent(&w->nodes));
    if (err)
        return err;
    if (w->L.live != chime__nodes_used(&w->nodes))
        return "pending count wrong: nodes in use are not the live entries";
    struct chime__levels seen = w->L;
    chime__nodes_attach(&w->nodes, &seen);
    if (seen.nodes != w->L.nodes || seen.cold != w->L.cold || seen.stride != w->L.stride ||
        seen.cold_stride != w->L.cold_stride)
        return "the levels do not see the nodes where they are (an array moved unseen)";
    return NULL;
}

const char *chime__wheel_check_pool(const chime_wheel *w)
{
    const char *err = chime__nodes_check(&w->nodes);
    return err ? err : chime__levels_check_slots(&w->L);
}
