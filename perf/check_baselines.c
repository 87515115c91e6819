/* SPDX-License-Identifier: MIT */
/*
 * A self-test of the baselines where the differential test (test/test_diff.c) does not reach:
 * callbacks that schedule, cancel and reschedule while an advance runs (the heaps' parked arrays,
 * the list's parked list), and the heaps' sequence renumbering (this program is built with small
 * PERF_HEAP_SEQ_LIMIT and PERF_IHEAP_SEQ_LIMIT so that it happens hundreds of times).
 *
 * The same random script runs on every structure through backend.h's table; each run writes a log
 * (every firing's tag, every call's return value, pending after every step, and next() after every
 * step where it is exact). The baselines' logs (the intrusive heap of arity 2 and 4, the id-checked
 * heap, the list) must be identical, next() included; the wheel's must equal the heap's without
 * next() (the wheel's may be early). The baselines' self-checks must pass after every step.
 * Usage: check_baselines [steps] [seed]. Exit status 0 when all agree.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend.h"

#define MAX_TAGS 256 /* live timers at most (PERF_HEAP_SEQ_LIMIT must exceed it); more are skipped */

struct run {
    const struct chime_backend *b;
    void *t;
    uint64_t rng;
    uint64_t handle[MAX_TAGS], deadline[MAX_TAGS];
    uint32_t live[MAX_TAGS], nlive; /* live tags */
    uint32_t where[MAX_TAGS];       /* a live tag's index in live[] */
    uint64_t *log;
    size_t nlog, log_cap;
    int log_next;                   /* log next()'s value: only where it is exact */
    int failed;
};

static uint64_t next_rand(struct run *r) /* splitmix64 */
{
    uint64_t z = (r->rng += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static uint64_t below(struct run *r, uint64_t n) { return next_rand(r) % n; }

static void put(struct run *r, uint64_t v)
{
    if (r->nlog == r->log_cap) {
        r->log_cap = r->log_cap ? r->log_cap * 2 : 4096;
        r->log = realloc(r->log, r->log_cap * sizeof(*r->log));
        if (!r->log)
            abort();
    }
    r->log[r->nlog++] = v;
}

static void fired(void *arg);

static struct run *current; /* the run whose callbacks are firing; a callback's arg is its tag */

static void add_live(struct run *r, uint32_t tag)
{
    r->where[tag] = r->nlive;
    r->live[r->nlive++] = tag;
}

static void drop_live(struct run *r, uint32_t tag)
{
    uint32_t last = r->live[--r->nlive];
    r->live[r->where[tag]] = last;
    r->where[last] = r->where[tag];
}

/* Schedule a timer at deadline under a free tag (found from a random point onwards). */
static void op_schedule(struct run *r, uint64_t deadline)
{
    if (r->nlive == MAX_TAGS)
        return;
    uint32_t tag = (uint32_t)below(r, MAX_TAGS);
    while (r->handle[tag])
        tag = (tag + 1) % MAX_TAGS;
    uint64_t h = 0;
    if (r->b->schedule(r->t, deadline, fired, (void *)(uintptr_t)tag, &h) != 0 || h == 0) {
        r->failed = 1;
        return;
    }
    r->handle[tag] = h;
    r->deadline[tag] = deadline;
    add_live(r, tag);
}

static void op_cancel_or_reschedule(struct run *r, uint64_t base)
{
    if (!r->nlive)
        return;
    uint32_t tag = r->live[below(r, r->nlive)];
    if (below(r, 2)) {
        put(r, (uint64_t)r->b->cancel(r->t, r->handle[tag]));
        r->handle[tag] = 0;
        drop_live(r, tag);
    } else {
        uint64_t d = base + below(r, 8) - 3;
        put(r, (uint64_t)r->b->reschedule(r->t, r->handle[tag], d));
        r->deadline[tag] = d;
    }
}

static int self_check(const struct run *r)
{
    return r->b->check ? r->b->check(r->t) : 0;
}

/* Log pending and next(), and run the self-check: after every step and inside every callback. */
static void log_state(struct run *r)
{
    uint64_t when = 0;
    int rc = r->b->next(r->t, &when);
    put(r, r->b->pending(r->t));
    put(r, (uint64_t)rc);
    if (r->log_next)
        put(r, rc ? 0 : when);
    if (self_check(r)) {
        fprintf(stderr, "%s: self-check failed after log entry %zu\n", r->b->name, r->nlog);
        r->failed = 1;
    }
    if (r->b->pending(r->t) != r->nlive) {
        fprintf(stderr, "%s: pending %zu, the script says %u\n", r->b->name, r->b->pending(r->t),
                r->nlive);
        r->failed = 1;
    }
}

static void fired(void *arg)
{
    struct run *r = current;
    uint32_t tag = (uint32_t)(uintptr_t)arg;
    put(r, 1000000 + tag);
    uint64_t dead = r->handle[tag];
    r->handle[tag] = 0;
    drop_live(r, tag);
    put(r, (uint64_t)r->b->cancel(r->t, dead)); /* its own handle is dead already: -ENOENT */
    put(r, r->b->advance(r->t, r->deadline[tag] + 100)); /* nested: does nothing */
    switch (below(r, 4)) { /* around its own deadline: some due at once (parked), some later */
    case 0: op_schedule(r, r->deadline[tag] + below(r, 6) - 3); break;
    case 1: op_cancel_or_reschedule(r, r->deadline[tag]); break;
    default: break;
    }
    log_state(r);
}

static void run(struct run *r, const struct chime_backend *b, int log_next, size_t steps,
                uint64_t seed)
{
    *r = (struct run){ .b = b, .rng = seed, .log_next = log_next };
    uint64_t now = 1000;
    r->t = b->create(now, 0);
    if (!r->t)
        abort();
    current = r;
    for (size_t step = 0; step < steps && !r->failed; step++) {
        unsigned op = (unsigned)below(r, 10);
        if (op < 4) {
            op_schedule(r, now + below(r, 64) - 8);
        } else if (op < 6) {
            op_cancel_or_reschedule(r, now);
        } else if (op < 7) { /* forged */
            uint64_t h = next_rand(r) | 1;
            put(r, (uint64_t)(below(r, 2) ? b->cancel(r->t, h) : b->reschedule(r->t, h, now)));
        } else {
            uint64_t to = below(r, 8) ? now + below(r, 16) : now - 1; /* sometimes backwards */
            put(r, b->advance(r->t, to));
            if (to > now)
                now = to;
        }
        log_state(r);
    }
    b->destroy(r->t);
}

static int same_log(const struct run *a, const struct run *b, uint64_t seed)
{
    for (size_t i = 0; i < a->nlog && i < b->nlog; i++) {
        if (a->log[i] != b->log[i]) {
            fprintf(stderr, "%s and %s disagree at log entry %zu (seed %" PRIu64 "): %" PRIu64
                    " against %" PRIu64 "\n", a->b->name, b->b->name, i, seed, a->log[i], b->log[i]);
            return 0;
        }
    }
    return a->nlog == b->nlog;
}

int main(int argc, char **argv)
{
    size_t steps = argc > 1 ? strtoull(argv[1], NULL, 0) : 200000;
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) : 42;
    /* Every baseline against the list (exact next() included), then the wheel against the
     * intrusive heap (without next()). */
    const struct chime_backend *baselines[] = { &chime_backend_heap, &chime_backend_iheap2,
                                                &chime_backend_iheap4 };
    static struct run a, b;
    int bad = 0;
    size_t entries = 0;
    run(&a, &chime_backend_list, 1, steps, seed);
    bad |= a.failed;
    for (size_t i = 0; i < sizeof(baselines) / sizeof(baselines[0]) && !bad; i++) {
        run(&b, baselines[i], 1, steps, seed);
        bad |= b.failed || !same_log(&a, &b, seed);
        entries = b.nlog;
        free(b.log);
    }
    free(a.log);
    if (!bad) {
        run(&a, &chime_backend_iheap4, 0, steps, seed);
        run(&b, &chime_backend_wheel, 0, steps, seed);
        bad = a.failed || b.failed || !same_log(&a, &b, seed);
        free(a.log);
        free(b.log);
    }
    printf("%s: %zu steps, seed %" PRIu64 ", %zu log entries\n", bad ? "FAIL" : "ok", steps, seed,
           entries);
    return bad;
}
