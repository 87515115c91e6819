/* SPDX-License-Identifier: MIT */
/*
 * The wheel's, the id-checked heap's and the list's backends of backend.h: thin adapters from the
 * table's void * to each structure (the intrusive heap's, which needs ids, is in iheap_ids.c). The
 * harness calls the structures directly; the table is for the differential test.
 */
#include "backend.h"

#include "heap.h"
#include "list.h"

static void *wheel_create(uint64_t start, size_t capacity_hint)
{
    (void)capacity_hint; /* the wheel's pool grows in chunks; it takes no hint */
    struct chime_wheel_config cfg = { .start = start }; /* levels 0: the default layout */
    chime_wheel *w = NULL;
    return chime_wheel_new(&w, &cfg) ? NULL : w;
}

static void wheel_destroy(void *t) { chime_wheel_free(t, NULL); }

static int wheel_schedule(void *t, uint64_t deadline, chime_fn *fn, void *arg, uint64_t *handle)
{
    return chime_wheel_schedule(t, deadline, fn, arg, handle);
}

static int wheel_cancel(void *t, uint64_t handle) { return chime_wheel_cancel(t, handle); }

static int wheel_reschedule(void *t, uint64_t handle, uint64_t deadline)
{
    return chime_wheel_reschedule(t, handle, deadline);
}

static size_t wheel_advance(void *t, uint64_t now) { return chime_wheel_advance(t, now); }
static int wheel_next(void *t, uint64_t *deadline) { return chime_wheel_next(t, deadline); }
static size_t wheel_pending(void *t) { return chime_wheel_pending(t); }

const struct chime_backend chime_backend_wheel = {
    .name = "wheel",
    .create = wheel_create,
    .destroy = wheel_destroy,
    .schedule = wheel_schedule,
    .cancel = wheel_cancel,
    .reschedule = wheel_reschedule,
    .advance = wheel_advance,
    .next = wheel_next,
    .pending = wheel_pending,
};

/* The baselines' functions differ from the table's only in the pointer type of their first argument. */
#define ADAPTERS(prefix)                                                                          \
    static void *prefix##_create(uint64_t start, size_t hint) { return perf_##prefix##_new(start, hint); } \
    static void prefix##_destroy(void *t) { perf_##prefix##_free(t); }                              \
    static int prefix##_schedule(void *t, uint64_t deadline, chime_fn *fn, void *arg, uint64_t *h)  \
    {                                                                                             \
        return perf_##prefix##_schedule(t, deadline, fn, arg, h);                                 \
    }                                                                                             \
    static int prefix##_cancel(void *t, uint64_t h) { return perf_##prefix##_cancel(t, h); }         \
    static int prefix##_reschedule(void *t, uint64_t h, uint64_t deadline)                        \
    {                                                                                             \
        return perf_##prefix##_reschedule(t, h, deadline);                                        \
    }                                                                                             \
    static size_t prefix##_advance(void *t, uint64_t now) { return perf_##prefix##_advance(t, now); } \
    static int prefix##_next(void *t, uint64_t *d) { return perf_##prefix##_next(t, d); }           \
    static size_t prefix##_pending(void *t) { return perf_##prefix##_pending(t); }                  \
    static int prefix##_check(const void *t) { return perf_##prefix##_check(t); }                   \
    const struct chime_backend chime_backend_##prefix = {                                          \
        .name = #prefix,                                                                          \
        .create = prefix##_create,                                                                \
        .destroy = prefix##_destroy,                                                              \
        .schedule = prefix##_schedule,                                                            \
        .cancel = prefix##_cancel,                                                                \
        .reschedule = prefix##_reschedule,                                                        \
        .advance = prefix##_advance,                                                              \
        .next = prefix##_next,                                                                    \
        .pending = prefix##_pending,                                                              \
        .check = prefix##_check,                                                                  \
    };

ADAPTERS(heap)
ADAPTERS(list)
