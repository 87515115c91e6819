/* SPDX-License-Identifier: MIT */
/* The reference timer structure: see reference.h. Slow on purpose: obviously right is the point. */
#include "reference.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    size_t cap2 = *cap ? *cap * 2 : 64;
    while (cap2 < need)
        cap2 *= 2;
    p = realloc(p, cap2 * elem);
    if (!p)
        abort();
    *cap = cap2;
    return p;
}

void ref_init(struct ref *r, uint64_t start)
{
    *r = (struct ref){ .now = start };
}

void ref_destroy(struct ref *r)
{
    free(r->v);
    *r = (struct ref){ 0 };
}

static void insert_sorted(struct ref *r, struct ref_timer t)
{
    r->v = grow(r->v, &r->cap, r->n + 1, sizeof(*r->v));
    size_t lo = 0, hi = r->n; /* first index whose (key, seq) is greater: seq is always the largest */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->v[mid].key <= t.key)
            lo = mid + 1;
        else
            hi = mid;
    }
    memmove(&r->v[lo + 1], &r->v[lo], (r->n - lo) * sizeof(*r->v));
    r->v[lo] = t;
    r->n++;
}

void ref_schedule(struct ref *r, uint64_t deadline, uint64_t period, uint64_t handle, uint64_t tag)
{
    insert_sorted(r, (struct ref_timer){
        .key = deadline > r->now ? deadline : r->now,
        .seq = ++r->seq,
        .deadline = deadline,
        .period = period,
        .handle = handle,
        .tag = tag,
        .next_call = r->firing && deadline <= r->now,
    });
}

long ref_find(const struct ref *r, uint64_t handle)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->v[i].handle == handle)
            return (long)i;
    return -1;
}

void ref_remove(struct ref *r, size_t i)
{
    memmove(&r->v[i], &r->v[i + 1], (r->n - i - 1) * sizeof(*r->v));
    r->n--;
}

void ref_reschedule(struct ref *r, size_t i, uint64_t deadline)
{
    struct ref_timer t = r->v[i];
    ref_remove(r, i);
    ref_schedule(r, deadline, t.period, t.handle, t.tag);
}

size_t ref_advance(struct ref *r, uint64_t T, struct ref_fired **out, size_t *out_cap,
                   uint64_t **dead, size_t *ndead, size_t *dead_cap)
{
    return ref_advance_some(r, T, SIZE_MAX, out, out_cap, dead, ndead, dead_cap);
}

/* Index of the first timer this call may fire, or r->n. */
static size_t first_eligible(const struct ref *r)
{
    size_t i = 0;
    while (i < r->n && r->v[i].next_call)
        i++;
    return i;
}

/* The call ends at r->now: what its callbacks made due goes behind everything due by then, in the
 * order it was made (their keys were now as it grew, so that is their order in the array). */
static void end_call(struct ref *r)
{
    r->firing = false;
    struct ref_timer *moved = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < r->n;) {
        if (!r->v[i].next_call) {
            i++;
            continue;
        }
        moved = grow(moved, &cap, n + 1, sizeof(*moved));
        moved[n++] = r->v[i];
        ref_remove(r, i);
    }
    for (size_t k = 0; k < n; k++) {
        moved[k].key = r->now;
        moved[k].seq = ++r->seq;
        insert_sorted(r, moved[k]);
    }
    free(moved);
}

size_t ref_advance_some(struct ref *r, uint64_t T, size_t limit, struct ref_fired **out,
                        size_t *out_cap, uint64_t **dead, size_t *ndead, size_t *dead_cap)
{
    if (T < r->now)
        return 0;
    for (size_t i = 0; i < r->n; i++)
        r->v[i].next_call = false; /* made due by the last call: this one fires them */
    r->firing = true;
    size_t fired = 0, i;
    while ((i = first_eligible(r)) < r->n && r->v[i].key <= T) {
        if (fired == limit) {
            end_call(r); /* now stays at the last key fired */
            return fired;
        }
        struct ref_timer t = r->v[i];
        ref_remove(r, i);
        if (t.key > r->now)
            r->now = t.key;
        *out = grow(*out, out_cap, fired + 1, sizeof(**out));
        (*out)[fired++] = (struct ref_fired){ .tag = t.tag, .now = r->now };
        bool rearmed = false;
        if (t.period) {
            uint64_t passed = (T - t.deadline) / t.period; /* + 1 could wrap: compare first */
            if (passed < (UINT64_MAX - t.deadline) / t.period) {
                ref_schedule(r, t.deadline + (passed + 1) * t.period, t.period, t.handle, t.tag);
                rearmed = true;
            }
        }
        if (!rearmed) {
            *dead = grow(*dead, dead_cap, *ndead + 1, sizeof(**dead));
            (*dead)[(*ndead)++] = t.handle;
        }
        if (r->on_fire)
            r->on_fire(r, &t, r->hook_arg);
    }
    r->now = T;
    end_call(r);
    return fired;
}

void ref_stop_at(struct ref *r, uint64_t now)
{
    /* They were moved to the old now, and go to the subject's behind what is due then: the rest of
     * a tick the subject stopped in (a periodic timer it could not re-arm) fires before them. */
    r->now = now;
    end_call(r);
}
