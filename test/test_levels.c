/* SPDX-License-Identifier: MIT */
/*
 * The wheel's storage (levels.c, slot.c, nodes.c) seen through the public API: far timers in hidden
 * levels, tombstones and compaction, memory given back by trim, and a failure at every allocation
 * point, with sized frees checked against the allocator.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "alloc.h"
#include "chime.h"
#include "log.h"
#include "reference.h"
#include "rng.h"
#include "wheel/slot.h"
#include "wheel/wheel.h"

static chime_wheel *w;

static void check(void)
{
    const char *err = chime__wheel_check(w);
    cr_assert(err == NULL, "%s", err);
    err = chime__wheel_check_pool(w);
    cr_assert(err == NULL, "%s", err);
}

static void make(const struct chime_wheel_config *cfg)
{
    chime__alloc_check_sizes(true); /* every sized free checked against the allocator's record */
    cr_assert(eq(int, chime_wheel_new(&w, cfg), 0));
    log_reset(w);
}

static void teardown(void)
{
    if (w)
        check();
    chime_wheel_free(w, NULL);
    w = NULL;
    chime__alloc_fail_after(-1);
    chime__alloc_check_sizes(false);
}

TestSuite(far, .fini = teardown);

/*
 * Timers beyond the configured top level each in its own top rotation: an overflow list rescanned at
 * every top turn made this O(n^2) (1.8 s for 32 000 timers with 64x64). With hidden levels each
 * timer cascades at most once per level it passes.
 */
static uintptr_t far_expected; /* the tag the next firing must carry: they fire in deadline order */
static void far_fire(void *arg)
{
    cr_assert(eq(u64, (uintptr_t)arg, far_expected), "in deadline order");
    far_expected++;
}

static void far_timers_cost_a_bounded_number_of_cascades(const struct chime_wheel_config *cfg,
                                                         uint64_t rotation, unsigned max_cascades)
{
    enum { N = 20000 };
    make(cfg);
    for (uintptr_t k = 0; k < N; k++)
        cr_assert(eq(int, chime_wheel_schedule(w, rotation * (k + 1) + (k * 37) % rotation, far_fire,
                                               TAG(k), NULL), 0));
    check();
    far_expected = 0;
    cr_assert(eq(sz, chime_wheel_advance(w, rotation * (N + 1)), N));
    cr_assert(eq(u64, far_expected, N));
    cr_assert(le(u64, chime__wheel_cascaded(w), (uint64_t)N * max_cascades),
              "%llu cascades for %d timers", (unsigned long long)chime__wheel_cascaded(w), N);
}

Test(far, timers_past_a_64x64_wheel_each_cascade_a_few_times_not_n)
{
    /* deadlines up to 4096 * 20001 < 4096 * 64^3: hidden levels 2 to 4, at most 4 cascades each */
    far_timers_cost_a_bounded_number_of_cascades(
        &(struct chime_wheel_config){ .levels = 2, .slots = { 64, 64 } }, 4096, 4);
}

Test(far, timers_past_a_one_level_3600_slot_ring_each_cascade_a_few_times_not_n)
{
    /* the seed articles' ring: deadlines up to 3600 * 20001 < 3600 * 64^3 */
    far_timers_cost_a_bounded_number_of_cascades(
        &(struct chime_wheel_config){ .levels = 1, .slots = { 3600 } }, 3600, 4);
}

Test(far, next_reports_a_far_timer_no_later_than_its_deadline_and_it_fires_exactly_there)
{
    make(&(struct chime_wheel_config){ .levels = 2, .slots = { 64, 64 } });
    uint64_t d = UINT64_C(1) << 50;
    cr_assert(eq(int, chime_wheel_schedule(w, d, log_fire, TAG(1), NULL), 0));
    uint64_t next, steps = 0;
    while (chime_wheel_next(w, &next) == 0) {
        cr_assert(le(u64, next, d));
        chime_wheel_advance(w, next);
        check();
        cr_assert(lt(u64, ++steps, 64), "one wake-up per level, not one per top turn");
    }
    cr_assert(eq(sz, fired_count, 1));
    cr_assert(eq(u64, fired_log[0].now, d));
}

TestSuite(tombstones, .fini = teardown);

Test(tombstones, cancelling_most_of_a_slot_keeps_the_rest_in_order)
{
    make(NULL);
    enum { N = 3000 };
    static chime_id ids[N];
    for (uintptr_t i = 0; i < N; i++)
        cr_assert(eq(int, chime_wheel_schedule(w, 5000, log_fire, TAG(i), &ids[i]), 0));
    for (size_t i = 0; i < N; i++) {
        if (i % 7 != 3) {
            cr_assert(eq(int, chime_wheel_cancel(w, ids[i]), 0));
            if (i % 97 == 0)
                check(); /* compactions happen along the way; positions must stay exact */
        }
    }
    check();
    chime_wheel_advance(w, 5000);
    size_t k = 0;
    for (size_t i = 3; i < N; i += 7)
        cr_assert(eq(u64, fired_log[k++].tag, i));
    cr_assert(eq(sz, fired_count, k));
}

/* Count the entries (tombstones included) a wheel holds: every pending timer lands in one slot, so
 * memory under a churn is that slot's array. Reported through the wheel's trim, which frees empty
 * arrays: none here, so this only counts. */
Test(tombstones, a_churn_storm_in_one_far_slot_keeps_memory_bounded)
{
    make(NULL);
    enum { LIVE = 1000, OPS = 200000 };
    static chime_id ids[LIVE];
    struct rng g = { 7 };
    for (size_t i = 0; i < LIVE; i++)
        cr_assert(eq(int, chime_wheel_schedule(w, 3600000, log_fire, NULL, &ids[i]), 0));
    for (size_t op = 0; op < OPS; op++) {
        size_t i = rng_below(&g, LIVE);
        cr_assert(eq(int, chime_wheel_cancel(w, ids[i]), 0));
        cr_assert(eq(int, chime_wheel_schedule(w, 3600000, log_fire, NULL, &ids[i]), 0));
    }
    check(); /* I4: at most 3 * live + 8 entries per slot, whatever the storm */
    chime_wheel_advance(w, 3600000);
    cr_assert(eq(sz, fired_count, LIVE));
}

Test(tombstones, trim_frees_the_arrays_of_empty_slots)
{
    make(NULL);
    for (uintptr_t i = 0; i < 500; i++)
        chime_wheel_schedule(w, 10 + i, log_fire, TAG(i), NULL);
    chime_wheel_advance(w, 1000);
    cr_assert(eq(sz, fired_count, 500));
    cr_assert(gt(sz, chime__wheel_trim(w), 0), "fired slots kept their arrays until now");
    cr_assert(eq(sz, chime__wheel_trim(w), 0), "nothing left to give back");
}

/* ---- removals queued by cancels and reschedules (levels.c, "deferred removals") ---- */

TestSuite(queued, .fini = teardown);

enum { ONE_PER_SLOT = 20 }; /* more than CHIME__PENDING: the 16th cancel applies the queue */
static chime_id ids_one_per_slot[ONE_PER_SLOT];

/* A default wheel with ONE_PER_SLOT timers in level-0 slots 10, 11, ... (tags 0, 1, ...), each alone
 * in its slot, and one more (tag ONE_PER_SLOT) at 5000, in level 1. */
static void make_one_per_slot(void)
{
    make(NULL);
    for (uintptr_t i = 0; i < ONE_PER_SLOT; i++)
        cr_assert(eq(int, chime_wheel_schedule(w, 10 + i, log_fire, TAG(i), &ids_one_per_slot[i]), 0));
    cr_assert(eq(int, chime_wheel_schedule(w, 5000, log_fire, TAG(ONE_PER_SLOT), NULL), 0));
}

/* 20 cancels, each emptying a level-0 slot: 16 are applied together by the 16th, 4 stay queued
 * until next(), which must not report the slots they emptied. */
Test(queued, next_does_not_report_a_slot_that_queued_cancels_emptied)
{
    make_one_per_slot();
    for (size_t i = 0; i < ONE_PER_SLOT; i++) {
        cr_assert(eq(int, chime_wheel_cancel(w, ids_one_per_slot[i]), 0));
        check(); /* I7: each queued removal names its entry, the counts are as if applied */
        cr_assert(eq(int, chime_wheel_cancel(w, ids_one_per_slot[i]), -ENOENT),
                  "cancelled twice while queued");
    }
    uint64_t when = 0;
    cr_assert(eq(int, chime_wheel_next(w, &when), 0));
    cr_assert(eq(u64, when, 5000), "next reported %" PRIu64 ", a slot a queued cancel emptied", when);
    check();
    chime_wheel_advance(w, 5000);
    cr_assert(eq(sz, fired_count, 1));
    cr_assert(eq(u64, fired_log[0].tag, ONE_PER_SLOT));
}

/* Due timers cancelled and still queued: next must not say "due now". */
Test(queued, next_does_not_report_due_timers_whose_cancels_are_queued)
{
    make(&(struct chime_wheel_config){ CHIME_LAYOUT_MILLISECONDS, .start = 100 });
    chime_id ids[3];
    for (uintptr_t i = 0; i < 3; i++)
        cr_assert(eq(int, chime_wheel_schedule(w, 90 + i, log_fire, TAG(i), &ids[i]), 0));
    cr_assert(eq(int, chime_wheel_schedule(w, 7000, log_fire, TAG(3), NULL), 0));
    uint64_t when = 0;
    cr_assert(eq(int, chime_wheel_next(w, &when), 0));
    cr_assert(eq(u64, when, 90), "the due timers are reported while they are pending");
    for (size_t i = 0; i < 3; i++)
        cr_assert(eq(int, chime_wheel_cancel(w, ids[i]), 0));
    check();
    cr_assert(eq(int, chime_wheel_next(w, &when), 0));
    cr_assert(eq(u64, when, 7000), "next reported %" PRIu64 " for due timers whose cancels are queued",
              when);
    chime_wheel_advance(w, 7000);
    cr_assert(eq(sz, fired_count, 1));
    cr_assert(eq(u64, fired_log[0].tag, 3));
}

/* Cancels and reschedules in long runs with no advance between them, over the due array and a few
 * slots: every removal queued, applied 16 at a time (emptying arrays, compacting them), checked after
 * each step; the survivors then fire in deadline order, FIFO among equal deadlines. */
Test(queued, long_runs_of_removals_over_the_due_array_and_slots_keep_order)
{
    make(&(struct chime_wheel_config){ CHIME_LAYOUT_MILLISECONDS, .start = 1000 });
    enum { N = 600 };
    static chime_id ids[N];
    static uint64_t due[N];
    struct rng g = { 11 };
    for (uintptr_t i = 0; i < N; i++) {
        due[i] = i % 3 == 0 ? 1000 - i % 7 : 1000 + 1 + i % 5 * 700; /* due now, or 4 slots */
        cr_assert(eq(int, chime_wheel_schedule(w, due[i], log_fire, TAG(i), &ids[i]), 0));
    }
    static bool gone[N];
    size_t left = N;
    for (size_t step = 0; step < 2 * N; step++) {
        size_t i = rng_below(&g, N);
        if (gone[i])
            continue;
        if (rng_below(&g, 3) == 0) { /* to the back of the same deadline's line */
            cr_assert(eq(int, chime_wheel_reschedule(w, ids[i], due[i]), 0));
        } else {
            cr_assert(eq(int, chime_wheel_cancel(w, ids[i]), 0));
            gone[i] = true;
            left--;
        }
        check();
    }
    cr_assert(eq(sz, chime_wheel_pending(w), left));
    chime_wheel_advance(w, 1000 + 1 + 4 * 700);
    cr_assert(eq(sz, fired_count, left));
    for (size_t k = 1; k < fired_count; k++) {
        uintptr_t a = (uintptr_t)fired_log[k - 1].tag, b = (uintptr_t)fired_log[k].tag;
        cr_assert(le(u64, due[a] < 1000 ? 1000 : due[a], due[b] < 1000 ? 1000 : due[b]),
                  "timer %" PRIuPTR " fired after %" PRIuPTR, b, a);
    }
}

/* Trim applies the queue first: the arrays of slots that queued cancels emptied go back too. One
 * timer stays, so the nodes' pages stay and what trim frees is the slots' arrays alone. */
Test(queued, trim_frees_the_arrays_of_slots_that_queued_cancels_emptied)
{
    make_one_per_slot();
    for (size_t i = 0; i < ONE_PER_SLOT; i++)
        cr_assert(eq(int, chime_wheel_cancel(w, ids_one_per_slot[i]), 0));
    size_t freed = chime__wheel_trim(w);
    cr_assert(eq(sz, freed, (size_t)ONE_PER_SLOT * CHIME__SLOT_MIN * sizeof(uint32_t)),
              "%zu bytes freed: some of the 20 emptied slots kept their arrays", freed);
    check();
}

/* ---- out of memory at every allocation point ---- */

TestSuite(oom, .fini = teardown);

static struct ref ref;
static uint64_t deadline_of[1024];
static bool periodic[1024];
static uintptr_t *got;  /* one-shot timers in the order the wheel fired them */
static size_t ngot, got_cap;

static void fired_checked(void *arg)
{
    uintptr_t tag = (uintptr_t)arg;
    cr_assert(ge(u64, chime_wheel_now(w), deadline_of[tag]), "timer %zu fired early", (size_t)tag);
    if (periodic[tag])
        return;
    if (ngot == got_cap) {
        got_cap = got_cap ? 2 * got_cap : 256;
        got = realloc(got, got_cap * sizeof(*got));
        cr_assert(got != NULL);
    }
    got[ngot++] = tag;
}

/*
 * One script of schedules (near, far, periodic), cancels, reschedules and advances, with the n-th
 * allocation from the start failing. Every call must either succeed or return -ENOMEM having changed
 * nothing; an advance may stop early. The self-check runs after every step. Afterwards, with memory
 * back and everything advanced to the end of time, the one-shot timers that were accepted must have
 * fired exactly once each, in the order the reference model fires them (its advances concatenated:
 * an advance cut short only moves firings to the next one, never reorders them).
 * Return: false once the script ran without the failure being reached.
 */
static bool script_with_failure_at(long n)
{
    chime__alloc_fail_after(n);
    int err = chime_wheel_new(&w, NULL);
    if (err) {
        cr_assert(eq(int, err, -ENOMEM));
        cr_assert(w == NULL);
        return true;
    }
    ref_init(&ref, 0);
    ngot = 0;
    struct rng g = { 0x00f00d };
    chime_id ids[1024];
    size_t n_ids = 0, nwant = 0, want_cap = 0, ndead = 0, dead_cap = 0;
    uint64_t now = 0, *dead = NULL;
    struct ref_fired *want = NULL;
    uintptr_t *expected = NULL;
    size_t nexpected = 0;
    bool reached = false;
    for (int step = 0; step <= 400; step++) {
        unsigned op = (unsigned)rng_below(&g, 10);
        if (step == 400) {
            /* relaxed: this thread's own countdown. Below 0: the n-th allocation came and failed. */
            reached = atomic_load_explicit(&chime__alloc_fail_countdown, memory_order_relaxed) < 0;
            chime__alloc_fail_after(-1); /* memory is back: finish everything */
            for (size_t i = 0; i < n_ids; i++) /* periodic timers never end: cancel them */
                if (periodic[i] && ids[i])
                    cr_assert(eq(int, chime_wheel_cancel(w, ids[i]), 0));
            now = UINT64_MAX;
            op = 9;
        }
        if (op < 5 && n_ids < 1024) {
            bool far = rng_below(&g, 8) == 0;
            uint64_t d = now + (far ? rng_below(&g, UINT64_C(1) << 45) : rng_below(&g, 200000));
            bool every = rng_below(&g, 12) == 0;
            uintptr_t tag = n_ids++;
            deadline_of[tag] = d;
            periodic[tag] = every;
            err = every ? chime_wheel_schedule_every(w, d, 1000 + rng_below(&g, 5000), fired_checked,
                                                     TAG(tag), &ids[tag])
                        : chime_wheel_schedule(w, d, fired_checked, TAG(tag), &ids[tag]);
            cr_assert(err == 0 || err == -ENOMEM, "schedule: %d", err);
            if (err)
                ids[tag] = 0;
            else if (!every)
                ref_schedule(&ref, d, 0, ids[tag], tag);
        } else if (op < 8 && n_ids) {
            size_t i = rng_below(&g, n_ids);
            long r = ref_find(&ref, ids[i]);
            if (!ids[i] || r < 0)
                continue; /* never accepted, periodic, fired or cancelled */
            if (op < 7) {
                cr_assert(eq(int, chime_wheel_cancel(w, ids[i]), 0));
                ref_remove(&ref, (size_t)r);
            } else {
                uint64_t d = now + rng_below(&g, 100000);
                err = chime_wheel_reschedule(w, ids[i], d);
                cr_assert(err == 0 || err == -ENOMEM, "reschedule: %d", err);
                if (err == 0) {
                    ref_reschedule(&ref, (size_t)r, d);
                    deadline_of[i] = d;
                }
            }
        } else if (op >= 8) {
            if (step < 400)
                now += rng_below(&g, 70000);
            chime_wheel_advance(w, now); /* may stop early: the rest fires later */
            nwant = ref_advance(&ref, now, &want, &want_cap, &dead, &ndead, &dead_cap);
            expected = realloc(expected, (nexpected + nwant + 1) * sizeof(*expected));
            cr_assert(expected != NULL);
            for (size_t k = 0; k < nwant; k++)
                expected[nexpected++] = want[k].tag;
        }
        check();
    }
    cr_assert(eq(sz, chime_wheel_pending(w), 0));
    cr_assert(eq(sz, ngot, nexpected), "failure at allocation %ld", n);
    for (size_t k = 0; k < nexpected; k++)
        cr_assert(eq(u64, got[k], expected[k]), "failure at allocation %ld: firing %zu", n, k);
    free(expected);
    free(want);
    free(dead);
    ref_destroy(&ref);
    chime_wheel_free(w, NULL);
    w = NULL;
    return reached;
}

Test(oom, every_allocation_point_fails_cleanly_with_sized_frees_checked)
{
    chime__alloc_check_sizes(true); /* jemalloc build: every sized free checked against sallocx */
    long n = 0;
    while (script_with_failure_at(n))
        n++;
    free(got);
    cr_assert(gt(sz, (size_t)n, 20), "the script allocates at %ld points", n);
    fprintf(stderr, "oom: the script was run with each of its %ld allocations failing in turn\n", n);
}

/* Found in review: chime.h said chime_wheel_now() "stays before the tick that could not be done",
 * but a level-0 slot is fired at its own tick, so when a periodic timer's re-arm there runs out of
 * memory (the next allocation: the array of tick 15's slot), the wheel's time is that tick. What
 * holds, and chime.h now says: the time is at most that tick, next() is between it and the
 * advance's argument, nothing fired, and the next advance fires both timers. */
Test(oom, a_failed_periodic_rearm_leaves_the_time_at_most_its_tick_and_next_due)
{
    chime_wheel *w;
    cr_assert(eq(int, chime_wheel_new(&w, NULL), 0));
    log_reset(w);
    cr_assert(eq(int, chime_wheel_schedule_every(w, 5, 10, log_fire, TAG(1), NULL), 0));
    cr_assert(eq(int, chime_wheel_schedule(w, 5, log_fire, TAG(2), NULL), 0));
    chime__alloc_fail_after(0);
    size_t ran = chime_wheel_advance(w, 7);
    chime__alloc_fail_after(-1);
    cr_assert(eq(sz, ran, 0), "the advance stops before the periodic timer, the first of its tick");
    uint64_t next = 0;
    cr_assert(eq(int, chime_wheel_next(w, &next), 0));
    cr_expect(le(u64, chime_wheel_now(w), 5));
    cr_expect(ge(u64, next, chime_wheel_now(w)));
    cr_expect(le(u64, next, 7));
    cr_assert(eq(sz, chime_wheel_advance(w, 7), 2)); /* nothing lost */
    cr_expect(eq(sz, fired_count, 2));
    chime_wheel_free(w, NULL);
}
