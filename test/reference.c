/* SPDX-License-Identifier: MIT */
/* The reference timer structure: see reference.h. Slow on purpose: obviously right is the point. */
#include "reference.h"

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

size_t ref_advance_some(struct ref *r, uint64_t T, size_t limit, struct ref_fired **out,
                        size_t *out_cap, uint64_t **dead, size_t *ndead, size_t *dead_cap)
{
    if (T < r->now)
        return 0;
    size_t fired = 0;
    while (r->n && r->v[0].key <= T) {
        if (fired == limit)
            return fired; /* now stays at the last key fired */
        struct ref_timer t = r->v[0];
        ref_remove(r, 0);
        if (t.key > r->now)
            r->now = t.key;
        *out = grow(*out, out_cap, fired + 1, sizeof(**out));
        (*out)[fired++] = (struct ref_fired){ .tag = t.tag, .now = r->now };
        if (t.period) {
            uint64_t passed = (T - t.deadline) / t.period; /* + 1 could wrap: compare first */
            if (passed < (UINT64_MAX - t.deadline) / t.period) {
                ref_schedule(r, t.deadline + (passed + 1) * t.period, t.period, t.handle, t.tag);
                continue;
            }
        }
        *dead = grow(*dead, dead_cap, *ndead + 1, sizeof(**dead));
        (*dead)[(*ndead)++] = t.handle;
    }
    r->now = T;
    return fired;
}
