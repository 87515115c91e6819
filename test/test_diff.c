/* SPDX-License-Identifier: MIT */
/*
 * The differential test: long random runs of schedule, cancel, reschedule, periodic timers and
 * advances by small and huge steps, applied both to a subject and to the reference model
 * (reference.h); after every advance the fired sequence must be the reference's exactly, and after
 * every step the wheel's self-check must pass. Subjects: the wheel under several layouts (2-slot
 * levels, odd radices, the two presets, a layout past 2^64 ticks) and the baselines of perf/ (the
 * intrusive heap of arity 2 and 4 through its id adapter, the id-checked heap, the list) through the
 * same table, with their self-checks after every step.
 *
 * CHIME_SEED=<n> repeats a run; CHIME_DIFF_OPS=<n> sets the operations per subject (default 10^6);
 * CHIME_DIFF_ONLY=<text> runs only the subjects whose name contains it.
 *
 * Inside the step loop expectations go through EXPECT: cr_assert builds and encodes an assertion
 * record at every call, passing or not, which cost a third of the run.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "chime.h"
#include "reference.h"
#include "rng.h"
#include "wheel/wheel.h"

/* cr_assert's check and message, paid only when the check fails. */
#define EXPECT(cond, ...)          \
    do {                           \
        if (!(cond))               \
            cr_fatal(__VA_ARGS__); \
    } while (0)

struct subject {
    const char *name;
    const struct chime_backend *backend; /* NULL: the wheel, with the layout below */
    struct chime_wheel_config layout;
};

static struct subject subjects[] = {
    { "wheel ms clock", NULL, { 0 } },
    { "wheel seconds clock", NULL, { CHIME_LAYOUT_SECONDS } },
    { "wheel 1x2", NULL, { .levels = 1, .slots = { 2 } } },
    { "wheel 2x2x2", NULL, { .levels = 3, .slots = { 2, 2, 2 } } },
    { "wheel 3x5x7x2", NULL, { .levels = 4, .slots = { 3, 5, 7, 2 } } },
    { "wheel 2-3 x8", NULL, { .levels = 8, .slots = { 2, 3, 2, 3, 2, 3, 2, 3 } } },
    { "wheel 4096 x8 (past 2^64)", NULL,
      { .levels = 8, .slots = { 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096 } } },
    { "intrusive heap, arity 2", &chime_backend_iheap2, { 0 } },
    { "intrusive heap, arity 4", &chime_backend_iheap4, { 0 } },
    { "heap", &chime_backend_heap, { 0 } },
    { "list", &chime_backend_list, { 0 } },
};

/* ---- what the callbacks record ---- */

static struct ref_fired *got;
static size_t ngot, got_cap;
static chime_wheel *current_wheel; /* to read the wheel's time inside a callback */

static void record(void *arg)
{
    if (ngot == got_cap) {
        got_cap = got_cap ? got_cap * 2 : 256;
        got = realloc(got, got_cap * sizeof(*got));
        cr_assert(got != NULL);
    }
    got[ngot++] = (struct ref_fired){
        .tag = (uint64_t)(uintptr_t)arg,
        .now = current_wheel ? chime_wheel_now(current_wheel) : 0,
    };
}

static size_t unfired;
static void count_unfired(void *arg)
{
    (void)arg;
    unfired++;
}

/* ---- the subject's operations: the wheel directly, a baseline through its table ---- */

struct driver {
    const struct subject *s;
    void *t;
};

static int d_schedule(struct driver *d, uint64_t deadline, uint64_t period, uint64_t tag,
                      uint64_t *handle)
{
    void *arg = (void *)(uintptr_t)tag;
    if (!d->s->backend)
        return period ? chime_wheel_schedule_every(d->t, deadline, period, record, arg, handle)
                      : chime_wheel_schedule(d->t, deadline, record, arg, handle);
    return d->s->backend->schedule(d->t, deadline, record, arg, handle);
}

static int d_cancel(struct driver *d, uint64_t h)
{
    return d->s->backend ? d->s->backend->cancel(d->t, h) : chime_wheel_cancel(d->t, h);
}

static int d_reschedule(struct driver *d, uint64_t h, uint64_t deadline)
{
    return d->s->backend ? d->s->backend->reschedule(d->t, h, deadline)
                         : chime_wheel_reschedule(d->t, h, deadline);
}

static size_t d_advance(struct driver *d, uint64_t now)
{
    return d->s->backend ? d->s->backend->advance(d->t, now) : chime_wheel_advance(d->t, now);
}

static int d_next(struct driver *d, uint64_t *when)
{
    return d->s->backend ? d->s->backend->next(d->t, when) : chime_wheel_next(d->t, when);
}

static size_t d_pending(struct driver *d)
{
    return d->s->backend ? d->s->backend->pending(d->t) : chime_wheel_pending(d->t);
}

/* ---- random deadlines and steps that hit the interesting places ---- */

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* rotation[i]: ticks per turn of level i (saturating), for aiming at level boundaries. */
static unsigned nrot;
static uint64_t rotation[CHIME_MAX_LEVELS + 1];

static void set_rotations(const struct chime_wheel_config *layout)
{
    struct chime_wheel_config c = *layout;
    if (c.levels == 0)
        c = (struct chime_wheel_config){ CHIME_LAYOUT_MILLISECONDS };
    uint64_t r = 1;
    nrot = 0;
    for (unsigned i = 0; i < c.levels && r != UINT64_MAX; i++) {
        r = r > UINT64_MAX / c.slots[i] ? UINT64_MAX : r * c.slots[i];
        rotation[nrot++] = r;
    }
    rotation[nrot++] = UINT64_C(1) << 40; /* far beyond small layouts: the overflow list */
}

/* The next multiple of m after x (saturating). */
static uint64_t next_multiple(uint64_t x, uint64_t m)
{
    return sat_add(x - x % m, m);
}

static uint64_t pick_deadline(struct rng *g, uint64_t now)
{
    uint64_t r = rotation[rng_below(g, nrot)];
    switch (rng_below(g, 10)) {
    case 0: return now - rng_below(g, (now < 1000 ? now : 1000) + 1); /* past, or now */
    case 1: return sat_add(now, rng_below(g, 17));
    case 2:
    case 3:
    case 4: return sat_add(now, rng_below(g, r) + 1);
    case 5:
    case 6: return next_multiple(now, r) - 1 + rng_below(g, 3); /* a rollover, or one either side */
    case 7: return sat_add(now, rng_below(g, 3 * r));
    case 8: return rng_below(g, 8) ? now : 0;
    default: return UINT64_MAX - rng_below(g, 2);
    }
}

static uint64_t pick_period(struct rng *g)
{
    switch (rng_below(g, 4)) {
    case 0: return 1 + rng_below(g, 3);
    case 1: return 1 + rng_below(g, 100);
    case 2: return rotation[rng_below(g, nrot)];
    default: return 1 + rng_below(g, rotation[rng_below(g, nrot)]);
    }
}

/*
 * Where to advance to. Far jumps (which fire most of what is pending) are rare while fewer than
 * `crowd` timers are pending and common above it, so runs keep hundreds to thousands of timers in
 * the wheel (long slot lists, big cascades) and still cross huge gaps.
 */
static uint64_t pick_target(struct rng *g, uint64_t now, const struct ref *ref, size_t crowd)
{
    const uint64_t far = UINT64_C(1) << 61; /* time must not run out before the last step */
    uint64_t r = rotation[rng_below(g, nrot)];
    bool jump = now < far && rng_below(g, 1000) < (ref->n > crowd ? 300u : 5u);
    if (jump) {
        switch (rng_below(g, 4)) {
        case 0: return now + rng_below(g, r < (UINT64_C(1) << 40) ? r : 1);
        case 1: return r < far ? next_multiple(now, r) - 1 + rng_below(g, 3) : now;
        case 2: return now + rng_below(g, UINT64_C(1) << 40);
        default: return now + UINT64_C(315576000000); /* ten years of milliseconds */
        }
    }
    switch (rng_below(g, 20)) {
    case 0: case 1: case 2: case 3: case 4: case 5: case 6: case 7: case 8: case 9: case 10:
    case 11: case 12:
        return now + rng_below(g, 4);
    case 13: return now + rng_below(g, rotation[0] + 1);
    case 14: case 15: /* the next rollover of one of the two lowest levels, or a tick either side */
        r = rotation[rng_below(g, nrot < 2 ? nrot : 2)];
        return r < far ? next_multiple(now, r) - 1 + rng_below(g, 3) : now;
    case 16: case 17: return ref->n && ref->v[0].key < far ? ref->v[0].key : now + 1;
    default: return now - rng_below(g, 3); /* a clock that stepped back, or stood still */
    }
}

static size_t ops_per_subject(void)
{
    const char *env = getenv("CHIME_DIFF_OPS");
    return env && *env ? (size_t)strtoull(env, NULL, 0) : 1000000;
}

/* ---- the run ---- */

static void check_wheel(const struct driver *d, size_t step)
{
    if (d->s->backend) {
        EXPECT(d->s->backend->check(d->t) == 0, "step %zu: %s self-check", step, d->s->name);
        return;
    }
    const char *err = chime__wheel_check(d->t);
    EXPECT(err == NULL, "step %zu: self-check: %s", step, err);
    if (step % 4096 == 0) {
        err = chime__wheel_check_pool(d->t);
        EXPECT(err == NULL, "step %zu: pool check: %s", step, err);
    }
}

static void run(const struct subject *s)
{
    struct rng g = { rng_seed(s->name) };
    size_t nops = ops_per_subject();
    set_rotations(&s->layout);
    uint64_t start = rng_below(&g, 2) ? 0 : rng_below(&g, UINT64_C(1) << 50);

    struct driver d = { .s = s };
    if (s->backend) {
        d.t = s->backend->create(start, 0);
    } else {
        struct chime_wheel_config c = s->layout;
        c.start = start;
        cr_assert(eq(int, chime_wheel_new((chime_wheel **)&d.t, &c), 0));
        current_wheel = d.t;
    }
    cr_assert(d.t != NULL);

    struct ref ref;
    ref_init(&ref, start);
    struct ref_fired *want = NULL;
    size_t want_cap = 0;
    uint64_t *dead = NULL;
    size_t ndead = 0, dead_cap = 0;
    uint64_t tags = 0, fired_total = 0, pending_sum = 0;
    size_t max_pending = 0, phase_end = 0, phases = 0, seen_min = SIZE_MAX, seen_max = 0;

    for (size_t step = 0; step < nops; step++) {
        uint64_t now = ref.now;
        if (step == phase_end) {
            /* A new phase with its own population: a handful (levels mostly empty, the due array
             * and the firing paths), tens, hundreds (long slot arrays, big cascades, compaction),
             * about a thousand (every level and the hidden far levels occupied at once). */
            static const size_t targets[] = { 4, 32, 256, 1024 };
            max_pending = targets[rng_below(&g, sizeof(targets) / sizeof(targets[0]))];
            phase_end = step + 8192 + rng_below(&g, 32768);
            phases++;
        }
        unsigned op = (unsigned)rng_below(&g, 100);
        if (ref.n > 2 * max_pending && op < 35)
            op = 35 + op % 15; /* far deadlines that no jump reaches: thin them out by cancelling */
        else if (ref.n < max_pending / 2 && op >= 35)
            op %= 35; /* too few: schedule instead of cancelling or advancing, until there are */
        if (op < 30 || (op < 35 && !s->backend)) { /* schedule; periodic for the wheel only */
            uint64_t deadline = pick_deadline(&g, now);
            uint64_t period = op >= 30 ? pick_period(&g) : 0;
            uint64_t h = 0, tag = ++tags;
            EXPECT(d_schedule(&d, deadline, period, tag, &h) == 0, "step %zu", step);
            EXPECT(h != 0, "step %zu: id 0", step);
            EXPECT(ref_find(&ref, h) == -1, "step %zu: id %" PRIu64 " reused while live",
                      step, h);
            ref_schedule(&ref, deadline, period, h, tag);
        } else if (op < 50) { /* cancel a live timer; one time in eight a run of up to 40, so that
                                  the wheel's queue of removals fills and is applied by a cancel */
            for (size_t run = rng_below(&g, 8) ? 1 : 1 + rng_below(&g, 40); run && ref.n; run--) {
                size_t i = rng_below(&g, ref.n);
                uint64_t h = ref.v[i].handle;
                EXPECT(d_cancel(&d, h) == 0, "step %zu: cancel of a live id", step);
                ref_remove(&ref, i);
                if (ndead == dead_cap) {
                    dead_cap = dead_cap ? dead_cap * 2 : 1024;
                    dead = realloc(dead, dead_cap * sizeof(*dead));
                    EXPECT(dead != NULL, "out of memory");
                }
                dead[ndead++] = h;
                if (run % 4 == 0) /* and after the step, as every step */
                    check_wheel(&d, step);
            }
        } else if (op < 58) { /* reschedule a live timer */
            if (!ref.n)
                continue;
            size_t i = rng_below(&g, ref.n);
            uint64_t deadline = pick_deadline(&g, now);
            EXPECT(d_reschedule(&d, ref.v[i].handle, deadline) == 0, "step %zu", step);
            ref_reschedule(&ref, i, deadline);
        } else if (op < 63) { /* a dead, forged or zero id */
            uint64_t h = ndead && rng_below(&g, 2) ? dead[rng_below(&g, ndead)]
                         : rng_below(&g, 4) ? rng_next(&g) : 0;
            if (ref_find(&ref, h) >= 0)
                continue; /* a forged value that happens to be live */
            if (rng_below(&g, 2))
                EXPECT(d_cancel(&d, h) == -ENOENT, "step %zu: cancel of dead id", step);
            else
                EXPECT(d_reschedule(&d, h, now + 1) == -ENOENT, "step %zu", step);
        } else if (op < 68) { /* next: never later than the earliest, never pointlessly early */
            uint64_t when = 0;
            int rc = d_next(&d, &when);
            if (!ref.n) {
                EXPECT(rc == -ENOENT, "step %zu", step);
            } else {
                EXPECT(rc == 0, "step %zu", step);
                EXPECT(when <= ref.v[0].key, "step %zu: next %" PRIu64 " after the earliest %" PRIu64,
                          step, when, ref.v[0].key);
                if (ref.v[0].key > now)
                    EXPECT(when > now, "step %zu: next says due, nothing is", step);
                if (s->backend)
                    EXPECT(when == ref.v[0].key, "step %zu: baseline next inexact", step);
            }
        } else { /* advance */
            uint64_t target = pick_target(&g, now, &ref, max_pending);
            ngot = 0;
            size_t n = d_advance(&d, target);
            size_t nwant = ref_advance(&ref, target, &want, &want_cap, &dead, &ndead, &dead_cap);
            EXPECT(n == ngot, "step %zu: advance's count is not what ran", step);
            EXPECT(ngot == nwant, "step %zu: advance %" PRIu64 " -> %" PRIu64
                      " fired %zu, reference %zu", step, now, target, ngot, nwant);
            for (size_t k = 0; k < nwant; k++) {
                EXPECT(got[k].tag == want[k].tag, "step %zu: firing %zu of %zu: timer %" PRIu64
                          ", reference %" PRIu64, step, k, nwant, got[k].tag, want[k].tag);
                if (!s->backend)
                    EXPECT(got[k].now == want[k].now, "step %zu: firing %zu: now %" PRIu64
                              ", reference %" PRIu64, step, k, got[k].now, want[k].now);
            }
            fired_total += nwant;
        }
        EXPECT(d_pending(&d) == ref.n, "step %zu: pending %zu, reference %zu", step, d_pending(&d),
                  ref.n);
        pending_sum += ref.n;
        seen_min = ref.n < seen_min ? ref.n : seen_min;
        seen_max = ref.n > seen_max ? ref.n : seen_max;
        check_wheel(&d, step);
    }

    fprintf(stderr, "%s: %zu operations in %zu phases (target populations 4, 32, 256, 1024), %" PRIu64
            " timers fired, pending min %zu, mean %.0f, max %zu\n", s->name, nops, phases, fired_total,
            seen_min, nops ? (double)pending_sum / (double)nops : 0.0, seen_max);
    if (s->backend) {
        s->backend->destroy(d.t);
    } else {
        unfired = 0;
        chime_wheel_free(d.t, count_unfired);
        cr_assert(eq(sz, unfired, ref.n), "free: on_unfired count");
        current_wheel = NULL;
    }
    ref_destroy(&ref);
    free(want);
    free(dead);
    free(got);
    got = NULL;
    ngot = got_cap = 0;
}

/* Parameters are indices: Criterion runs each case in a new process, where pointers would dangle. */
ParameterizedTestParameters(diff, random_operations_match_the_reference)
{
    static size_t which[sizeof(subjects) / sizeof(subjects[0])];
    for (size_t i = 0; i < sizeof(which) / sizeof(which[0]); i++)
        which[i] = i;
    return cr_make_param_array(size_t, which, sizeof(which) / sizeof(which[0]));
}

ParameterizedTest(size_t *which, diff, random_operations_match_the_reference)
{
    const char *only = getenv("CHIME_DIFF_ONLY");
    if (only && *only && !strstr(subjects[*which].name, only))
        cr_skip_test("CHIME_DIFF_ONLY=%s", only);
    run(&subjects[*which]);
}
