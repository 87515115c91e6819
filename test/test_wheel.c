/* SPDX-License-Identifier: MIT */
/* Unit tests of the wheel: each operation, each error code, the boundaries, the guarantees. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <criterion/parameterized.h>
#include <errno.h>

#include "chime.h"
#include "log.h"
#include "wheel/wheel.h"

#define SEC UINT64_C(1000)
#define MIN (60 * SEC)
#define HOUR (60 * MIN)
#define DAY (24 * HOUR)
#define YEAR (365 * DAY + DAY / 4)

static chime_wheel *w;

static void setup_ms(void)
{
    cr_assert(eq(int, chime_wheel_new(&w, NULL), 0));
    log_reset(w);
}

static void teardown(void)
{
    cr_assert(chime__wheel_check(w) == NULL, "%s", chime__wheel_check(w));
    chime_wheel_free(w, NULL);
    w = NULL;
}

static chime_id at(uint64_t deadline, uintptr_t tag)
{
    chime_id id = 0;
    cr_assert(eq(int, chime_wheel_schedule(w, deadline, log_fire, TAG(tag), &id), 0));
    cr_assert(ne(u64, id, 0));
    return id;
}

static void expect_fired(const uintptr_t *tags, size_t n)
{
    cr_assert(eq(sz, fired_count, n));
    for (size_t i = 0; i < n; i++)
        cr_assert(eq(u64, fired_log[i].tag, tags[i]), "firing %zu", i);
}

/* ---- creation ---- */

Test(wheel_new, null_out_is_einval)
{
    cr_assert(eq(int, chime_wheel_new(NULL, NULL), -EINVAL));
}

Test(wheel_new, more_than_eight_levels_is_einval)
{
    struct chime_wheel_config c = { .levels = CHIME_MAX_LEVELS + 1 };
    for (unsigned i = 0; i < CHIME_MAX_LEVELS; i++)
        c.slots[i] = 8;
    chime_wheel *x = (chime_wheel *)&c; /* must stay untouched */
    cr_assert(eq(int, chime_wheel_new(&x, &c), -EINVAL));
    cr_assert(eq(ptr, x, (chime_wheel *)&c));
}

ParameterizedTestParameters(wheel_new, slot_counts_outside_2_to_4096_are_einval)
{
    static uint32_t bad[] = { 0, 1, CHIME_MAX_SLOTS + 1, UINT32_MAX };
    return cr_make_param_array(uint32_t, bad, sizeof(bad) / sizeof(bad[0]));
}

ParameterizedTest(uint32_t *slots, wheel_new, slot_counts_outside_2_to_4096_are_einval)
{
    for (unsigned level = 0; level < 3; level++) {
        struct chime_wheel_config c = { .levels = 3, .slots = { 10, 10, 10 } };
        c.slots[level] = *slots;
        chime_wheel *x = NULL;
        cr_assert(eq(int, chime_wheel_new(&x, &c), -EINVAL), "level %u", level);
        cr_assert(eq(ptr, x, NULL));
    }
}

Test(wheel_new, extreme_layouts_are_accepted)
{
    struct chime_wheel_config two = { .levels = 1, .slots = { 2 } };
    struct chime_wheel_config big = { .levels = 8 };
    for (unsigned i = 0; i < 8; i++)
        big.slots[i] = CHIME_MAX_SLOTS;
    chime_wheel *x;
    cr_assert(eq(int, chime_wheel_new(&x, &two), 0));
    chime_wheel_free(x, NULL);
    cr_assert(eq(int, chime_wheel_new(&x, &big), 0));
    cr_assert(chime__wheel_check(x) == NULL);
    chime_wheel_free(x, NULL);
}

Test(wheel_new, defaults_start_at_zero_with_nothing_pending)
{
    cr_assert(eq(int, chime_wheel_new(&w, NULL), 0));
    uint64_t next = 7;
    cr_assert(eq(u64, chime_wheel_now(w), 0));
    cr_assert(eq(sz, chime_wheel_pending(w), 0));
    cr_assert(eq(int, chime_wheel_next(w, &next), -ENOENT));
    cr_assert(eq(u64, next, 7));
    chime_wheel_free(w, NULL);
}

Test(wheel_new, start_time_is_the_wheels_now)
{
    struct chime_wheel_config c = { .start = 123456789, CHIME_LAYOUT_SECONDS };
    cr_assert(eq(int, chime_wheel_new(&w, &c), 0));
    cr_assert(eq(u64, chime_wheel_now(w), 123456789));
    log_reset(w);
    at(123456790, 1);
    cr_assert(eq(sz, chime_wheel_advance(w, 123456789), 0));
    cr_assert(eq(sz, chime_wheel_advance(w, 123456790), 1));
    teardown();
}

/* ---- schedule ---- */

TestSuite(schedule, .init = setup_ms, .fini = teardown);

Test(schedule, null_wheel_or_fn_is_einval_and_schedules_nothing)
{
    chime_id id = 42;
    cr_assert(eq(int, chime_wheel_schedule(NULL, 5, log_fire, NULL, &id), -EINVAL));
    cr_assert(eq(int, chime_wheel_schedule(w, 5, NULL, NULL, &id), -EINVAL));
    cr_assert(eq(int, chime_wheel_schedule_every(NULL, 5, 1, log_fire, NULL, &id), -EINVAL));
    cr_assert(eq(int, chime_wheel_schedule_every(w, 5, 1, NULL, NULL, &id), -EINVAL));
    cr_assert(eq(u64, id, 42));
    cr_assert(eq(sz, chime_wheel_pending(w), 0));
}

Test(schedule, period_zero_is_einval)
{
    chime_id id = 42;
    cr_assert(eq(int, chime_wheel_schedule_every(w, 5, 0, log_fire, NULL, &id), -EINVAL));
    cr_assert(eq(u64, id, 42));
    cr_assert(eq(sz, chime_wheel_pending(w), 0));
}

Test(schedule, id_may_be_null)
{
    cr_assert(eq(int, chime_wheel_schedule(w, 5, log_fire, TAG(1), NULL), 0));
    cr_assert(eq(int, chime_wheel_schedule_every(w, 5, 3, log_fire, TAG(2), NULL), 0));
    cr_assert(eq(sz, chime_wheel_advance(w, 5), 2));
}

Test(schedule, ids_are_distinct_and_never_zero)
{
    static chime_id ids[5000];
    for (size_t i = 0; i < 5000; i++) {
        ids[i] = at(1000 + i, i);
        for (size_t j = 0; j < i; j += 97)
            cr_assert(ne(u64, ids[i], ids[j]));
    }
    cr_assert(eq(sz, chime_wheel_pending(w), 5000));
}

Test(schedule, fires_at_its_deadline_and_not_a_tick_earlier)
{
    uint64_t deadlines[] = { 1, 999, 1000, 1001, 59 * MIN + 59 * SEC + 999, HOUR, DAY + 7, 300 * DAY };
    for (size_t i = 0; i < sizeof(deadlines) / sizeof(deadlines[0]); i++) {
        at(deadlines[i], i);
        cr_assert(eq(sz, chime_wheel_advance(w, deadlines[i] - 1), 0), "deadline %zu early", i);
        cr_assert(eq(sz, chime_wheel_advance(w, deadlines[i]), 1), "deadline %zu missed", i);
        cr_assert(eq(u64, fired_log[fired_count - 1].now, deadlines[i]));
    }
}

Test(schedule, deadline_in_the_past_fires_on_the_next_advance_even_to_the_same_time)
{
    chime_wheel_advance(w, 5000);
    at(10, 1);
    at(0, 2);
    at(5000, 3);
    uint64_t next;
    cr_assert(eq(int, chime_wheel_next(w, &next), 0));
    cr_assert(le(u64, next, 5000));
    cr_assert(eq(sz, chime_wheel_advance(w, 5000), 3));
    expect_fired((uintptr_t[]){ 1, 2, 3 }, 3);
    cr_assert(eq(u64, fired_log[0].now, 5000));
}

/* The case the header once got wrong: a callback schedules a timer in the past; it fires first in
 * the next advance, at the wheel's time when that advance begins (here 60, not the 50 of the
 * callback that scheduled it, nor the 100 the advance goes to). */
static void schedules_a_past_timer(void *arg)
{
    log_fire(arg);
    cr_assert(eq(int, chime_wheel_schedule(w, 10, log_fire, TAG(2), NULL), 0));
}

Test(schedule, a_past_timer_from_a_callback_sees_the_time_its_advance_began)
{
    cr_assert(eq(int, chime_wheel_schedule(w, 50, schedules_a_past_timer, TAG(1), NULL), 0));
    cr_assert(eq(sz, chime_wheel_advance(w, 60), 1));
    cr_assert(eq(sz, chime_wheel_advance(w, 100), 1));
    expect_fired((uintptr_t[]){ 1, 2 }, 2);
    cr_assert(eq(u64, fired_log[0].now, 50), "scheduled ahead: its deadline");
    cr_assert(eq(u64, fired_log[1].now, 60), "already due: the time the advance began");
}

Test(schedule, deadline_zero_and_uint64_max)
{
    at(UINT64_MAX, 2);
    at(0, 1);
    cr_assert(eq(sz, chime_wheel_advance(w, 0), 1));
    cr_assert(eq(sz, chime_wheel_advance(w, UINT64_MAX - 1), 0));
    cr_assert(eq(sz, chime_wheel_advance(w, UINT64_MAX), 1));
    expect_fired((uintptr_t[]){ 1, 2 }, 2);
    cr_assert(eq(u64, chime_wheel_now(w), UINT64_MAX));
    at(UINT64_MAX, 3); /* at the end of time, still due next advance */
    cr_assert(eq(sz, chime_wheel_advance(w, UINT64_MAX), 1));
}

/* ---- cancel ---- */

TestSuite(cancel, .init = setup_ms, .fini = teardown);

Test(cancel, a_pending_timer_never_fires)
{
    chime_id id = at(100, 1);
    at(100, 2);
    cr_assert(eq(int, chime_wheel_cancel(w, id), 0));
    cr_assert(eq(sz, chime_wheel_pending(w), 1));
    chime_wheel_advance(w, 1000);
    expect_fired((uintptr_t[]){ 2 }, 1);
}

Test(cancel, twice_fired_zero_forged_and_null_wheel)
{
    chime_id id = at(100, 1);
    chime_id fired = at(50, 2);
    chime_wheel_advance(w, 60);
    cr_assert(eq(int, chime_wheel_cancel(w, fired), -ENOENT));
    cr_assert(eq(int, chime_wheel_cancel(w, id), 0));
    cr_assert(eq(int, chime_wheel_cancel(w, id), -ENOENT));
    cr_assert(eq(int, chime_wheel_cancel(w, 0), -ENOENT));
    cr_assert(eq(int, chime_wheel_cancel(w, UINT64_MAX), -ENOENT));
    cr_assert(eq(int, chime_wheel_cancel(w, id ^ (UINT64_C(1) << 40)), -ENOENT));
    cr_assert(eq(int, chime_wheel_cancel(w, (uint64_t)1 << 32 | 123456), -ENOENT));
    cr_assert(eq(int, chime_wheel_cancel(NULL, id), -EINVAL));
}

Test(cancel, a_stale_id_misses_the_timer_that_reused_its_node)
{
    chime_id old = at(100, 1);
    cr_assert(eq(int, chime_wheel_cancel(w, old), 0));
    chime_id reuse = at(200, 2); /* the pool is LIFO: same node, next generation */
    cr_assert(eq(u64, (uint32_t)reuse, (uint32_t)old));
    cr_assert(ne(u64, reuse, old));
    cr_assert(eq(int, chime_wheel_cancel(w, old), -ENOENT));
    cr_assert(eq(int, chime_wheel_reschedule(w, old, 5), -ENOENT));
    chime_wheel_advance(w, 200);
    expect_fired((uintptr_t[]){ 2 }, 1);
}

Test(cancel, stops_a_periodic_timer)
{
    chime_id id;
    cr_assert(eq(int, chime_wheel_schedule_every(w, 10, 10, log_fire, TAG(1), &id), 0));
    chime_wheel_advance(w, 10);
    chime_wheel_advance(w, 25);
    cr_assert(eq(sz, fired_count, 2));
    cr_assert(eq(int, chime_wheel_cancel(w, id), 0));
    chime_wheel_advance(w, 1000);
    cr_assert(eq(sz, fired_count, 2));
    cr_assert(eq(sz, chime_wheel_pending(w), 0));
}

/* ---- reschedule ---- */

TestSuite(reschedule, .init = setup_ms, .fini = teardown);

Test(reschedule, moves_earlier_and_later)
{
    chime_id a = at(5 * SEC, 1);
    chime_id b = at(10, 2);
    cr_assert(eq(int, chime_wheel_reschedule(w, a, 5), 0));
    cr_assert(eq(int, chime_wheel_reschedule(w, b, 2 * HOUR), 0));
    chime_wheel_advance(w, 5);
    expect_fired((uintptr_t[]){ 1 }, 1);
    chime_wheel_advance(w, 2 * HOUR - 1);
    cr_assert(eq(sz, fired_count, 1));
    chime_wheel_advance(w, 2 * HOUR);
    expect_fired((uintptr_t[]){ 1, 2 }, 2);
}

Test(reschedule, counts_as_a_new_schedule_for_ties)
{
    chime_id a = at(100, 1);
    at(100, 2);
    cr_assert(eq(int, chime_wheel_reschedule(w, a, 100), 0));
    chime_wheel_advance(w, 100);
    expect_fired((uintptr_t[]){ 2, 1 }, 2);
}

Test(reschedule, a_periodic_timer_continues_from_the_new_deadline)
{
    chime_id id;
    cr_assert(eq(int, chime_wheel_schedule_every(w, 10, 10, log_fire, TAG(1), &id), 0));
    cr_assert(eq(int, chime_wheel_reschedule(w, id, 15), 0));
    for (uint64_t t = 0; t <= 40; t++)
        chime_wheel_advance(w, t);
    cr_assert(eq(sz, fired_count, 3));
    cr_assert(eq(u64, fired_log[0].now, 15));
    cr_assert(eq(u64, fired_log[1].now, 25));
    cr_assert(eq(u64, fired_log[2].now, 35));
}

Test(reschedule, dead_ids_and_null_wheel)
{
    chime_id id = at(10, 1);
    chime_wheel_advance(w, 10);
    cr_assert(eq(int, chime_wheel_reschedule(w, id, 20), -ENOENT));
    cr_assert(eq(int, chime_wheel_reschedule(w, 0, 20), -ENOENT));
    cr_assert(eq(int, chime_wheel_reschedule(NULL, id, 20), -EINVAL));
    cr_assert(eq(sz, chime_wheel_pending(w), 0));
}

/* ---- advance ---- */

TestSuite(advance, .init = setup_ms, .fini = teardown);

Test(advance, backwards_fires_nothing_and_changes_nothing)
{
    chime_wheel_advance(w, 1000);
    at(1000 + 5, 1);
    cr_assert(eq(sz, chime_wheel_advance(w, 999), 0));
    cr_assert(eq(u64, chime_wheel_now(w), 1000));
    cr_assert(eq(sz, chime_wheel_advance(w, 1005), 1));
}

Test(advance, same_deadline_fires_in_schedule_order_across_levels)
{
    /* the first two cascade through every level; the later ones are scheduled nearer the time */
    uint64_t d = 2 * DAY + 3 * HOUR + 4 * MIN + 5 * SEC + 6;
    at(d, 1);
    at(d, 2);
    chime_wheel_advance(w, 2 * DAY + 3 * HOUR);
    at(d, 3);
    chime_wheel_advance(w, d - 1);
    at(d, 4);
    at(d - 1, 0); /* already due: fires first */
    chime_wheel_advance(w, d);
    expect_fired((uintptr_t[]){ 0, 1, 2, 3, 4 }, 5);
}

Test(advance, fires_in_deadline_order_within_one_call)
{
    uint64_t ds[] = { 3 * DAY, 5, 2 * HOUR, 1, 59 * SEC, 2 * HOUR, 1000, 40 * DAY };
    for (size_t i = 0; i < 8; i++)
        at(ds[i], i);
    cr_assert(eq(sz, chime_wheel_advance(w, 100 * DAY), 8));
    expect_fired((uintptr_t[]){ 3, 1, 6, 4, 2, 5, 0, 7 }, 8);
    for (size_t i = 1; i < 8; i++)
        cr_assert(le(u64, fired_log[i - 1].now, fired_log[i].now));
}

/* The rollovers of the default layout: every digit at once, and each level's top. */
static const uint64_t rollovers[] = {
    SEC, MIN, HOUR, DAY, 511 * DAY, 512 * DAY, /* the top level's wrap into the overflow list */
    HOUR - 1, 1024 * DAY, 10 * YEAR,
};

ParameterizedTestParameters(advance, timers_at_a_rollover_fire_on_their_tick_advancing_by_one)
{
    return cr_make_param_array(uint64_t, rollovers, sizeof(rollovers) / sizeof(rollovers[0]));
}

ParameterizedTest(uint64_t *boundary, advance, timers_at_a_rollover_fire_on_their_tick_advancing_by_one)
{
    uint64_t b = *boundary;
    for (uint64_t d = b - 2; d <= b + 2; d++)
        at(d, d - (b - 2));
    chime_wheel_advance(w, b - 4);
    for (uint64_t t = b - 3; t <= b + 3; t++) {
        size_t before = fired_count;
        chime_wheel_advance(w, t);
        cr_assert(chime__wheel_check(w) == NULL);
        bool due = t >= b - 2 && t <= b + 2;
        cr_assert(eq(sz, fired_count - before, due ? 1 : 0), "tick %llu", (unsigned long long)(t - b));
        if (due)
            cr_assert(eq(u64, fired_log[before].now, t));
    }
}

Test(advance, one_tick_at_a_time_across_every_boundary_of_a_small_layout)
{
    chime_wheel_free(w, NULL);
    struct chime_wheel_config c = { .levels = 4, .slots = { 3, 5, 7, 2 } }; /* 210 ticks, overflow */
    cr_assert(eq(int, chime_wheel_new(&w, &c), 0));
    log_reset(w);
    for (uint64_t d = 1; d <= 1000; d++)
        at(d, d);
    for (uint64_t t = 1; t <= 1000; t++) {
        cr_assert(eq(sz, chime_wheel_advance(w, t), 1), "tick %llu", (unsigned long long)t);
        cr_assert(eq(u64, fired_log[t - 1].tag, t));
        cr_assert(eq(u64, fired_log[t - 1].now, t));
        cr_assert(chime__wheel_check(w) == NULL, "tick %llu", (unsigned long long)t);
    }
}

Test(advance, a_single_jump_of_ten_years_fires_everything_due_in_order)
{
    at(20 * YEAR, 5);
    at(5 * YEAR, 4);
    at(1, 1);
    at(YEAR, 3);
    at(DAY, 2);
    cr_assert(eq(sz, chime_wheel_advance(w, 10 * YEAR), 4));
    expect_fired((uintptr_t[]){ 1, 2, 3, 4 }, 4);
    cr_assert(eq(u64, fired_log[3].now, 5 * YEAR));
    cr_assert(eq(u64, chime_wheel_now(w), 10 * YEAR));
    uint64_t next;
    cr_assert(eq(int, chime_wheel_next(w, &next), 0));
    cr_assert(le(u64, next, 20 * YEAR));
    cr_assert(gt(u64, next, 10 * YEAR));
    cr_assert(eq(sz, chime_wheel_advance(w, 20 * YEAR), 1));
}

Test(advance, idle_hours_until_a_timer_a_year_away)
{
    at(YEAR, 1);
    uint64_t t = 0, steps = 0;
    while (fired_count == 0) {
        t += HOUR;
        chime_wheel_advance(w, t);
        steps++;
    }
    cr_assert(eq(u64, steps, YEAR / HOUR));
    cr_assert(eq(u64, fired_log[0].now, YEAR));
}

Test(advance, periodic_timers_do_not_drift_and_fire_once_per_jump)
{
    chime_id id;
    cr_assert(eq(int, chime_wheel_schedule_every(w, 7, 10, log_fire, TAG(1), &id), 0));
    for (uint64_t t = 0; t <= 30; t++)
        chime_wheel_advance(w, t);
    cr_assert(eq(sz, fired_count, 3)); /* 7, 17, 27 */
    cr_assert(eq(u64, fired_log[2].now, 27));
    cr_assert(eq(sz, chime_wheel_advance(w, 1000), 1)); /* 37 .. 997 passed: once */
    cr_assert(eq(u64, fired_log[3].now, 37));
    cr_assert(eq(sz, chime_wheel_advance(w, 1006), 0)); /* re-armed at 1007, not 1037 */
    cr_assert(eq(sz, chime_wheel_advance(w, 1007), 1));
    cr_assert(eq(sz, chime_wheel_pending(w), 1));
}

Test(advance, a_periodic_timer_whose_next_boundary_passes_uint64_max_ends)
{
    chime_id id;
    cr_assert(eq(int, chime_wheel_schedule_every(w, UINT64_MAX - 5, 4, log_fire, TAG(1), &id), 0));
    cr_assert(eq(sz, chime_wheel_advance(w, UINT64_MAX - 5), 1));
    cr_assert(eq(sz, chime_wheel_advance(w, UINT64_MAX - 1), 1));
    cr_assert(eq(sz, chime_wheel_pending(w), 0));
    cr_assert(eq(int, chime_wheel_cancel(w, id), -ENOENT));
}

/* ---- next ---- */

TestSuite(next, .init = setup_ms, .fini = teardown);

Test(next, null_arguments_are_einval)
{
    uint64_t t;
    cr_assert(eq(int, chime_wheel_next(NULL, &t), -EINVAL));
    cr_assert(eq(int, chime_wheel_next(w, NULL), -EINVAL));
}

Test(next, exact_for_a_timer_in_the_lowest_level)
{
    at(999, 1);
    at(500, 2);
    uint64_t t;
    cr_assert(eq(int, chime_wheel_next(w, &t), 0));
    cr_assert(eq(u64, t, 500));
}

Test(next, wakes_once_per_level_above_the_timer_on_the_design_example)
{
    /* docs/design.md: a timer due at 1d 02:03:04.005 cascades day -> hour -> minute -> second -> ms */
    uint64_t d = DAY + 2 * HOUR + 3 * MIN + 4 * SEC + 5;
    at(d, 1);
    uint64_t want[] = { DAY, DAY + 2 * HOUR, DAY + 2 * HOUR + 3 * MIN, DAY + 2 * HOUR + 3 * MIN + 4 * SEC, d };
    uint64_t t;
    for (size_t i = 0; i < 5; i++) {
        cr_assert(eq(int, chime_wheel_next(w, &t), 0));
        cr_assert(eq(u64, t, want[i]), "wake-up %zu", i);
        cr_assert(eq(sz, chime_wheel_advance(w, t), i == 4 ? 1 : 0));
    }
    cr_assert(eq(int, chime_wheel_next(w, &t), -ENOENT));
}

Test(next, reports_a_due_timer_at_or_before_now)
{
    chime_wheel_advance(w, 100);
    at(40, 1);
    at(500, 2);
    uint64_t t;
    cr_assert(eq(int, chime_wheel_next(w, &t), 0));
    cr_assert(le(u64, t, 100));
}

Test(next, an_overflow_timer_is_reported_no_later_than_its_deadline)
{
    at(3 * YEAR + 17, 1);
    uint64_t t, wakes = 0;
    while (chime_wheel_next(w, &t) == 0) {
        cr_assert(le(u64, t, 3 * YEAR + 17));
        chime_wheel_advance(w, t);
        cr_assert(lt(u64, ++wakes, 10), "too many wake-ups");
    }
    expect_fired((uintptr_t[]){ 1 }, 1);
    cr_assert(eq(u64, fired_log[0].now, 3 * YEAR + 17));
}

/* ---- free ---- */

static size_t unfired;
static void count_unfired(void *arg)
{
    unfired += (uintptr_t)arg;
}

Test(wheel_free, calls_on_unfired_once_per_pending_timer)
{
    cr_assert(eq(int, chime_wheel_new(&w, NULL), 0));
    log_reset(w);
    at(5, 1);
    at(HOUR, 10);
    at(10 * YEAR, 100);
    at(0, 1000);
    cr_assert(eq(int, chime_wheel_schedule_every(w, 7, 7, log_fire, TAG(10000), NULL), 0));
    chime_id gone = at(9, 100000);
    cr_assert(eq(int, chime_wheel_cancel(w, gone), 0));
    chime_wheel_advance(w, 5); /* fires 1000 and 1 */
    unfired = 0;
    chime_wheel_free(w, count_unfired);
    cr_assert(eq(sz, unfired, 10110));
    chime_wheel_free(NULL, count_unfired);
}

Test(strerror, every_code_has_its_own_text)
{
    /* Every code a header documents, the store's and its open's included (a review found
     * -ECONNREFUSED, -ENOTSUP and -ENAMETOOLONG named "unknown error"). */
    int codes[] = { 0,          -EINVAL,      -ENOMEM,       -ENOENT,    -EAGAIN,  -ESHUTDOWN,
                    -EDEADLK,   -ERANGE,      -ECHILD,       -EBUSY,     -EINPROGRESS,
                    -EIO,       -ENOSPC,      -EBADMSG,      -EPROTO,    -EACCES,  -ENOTDIR,
                    -ECONNREFUSED, -ENOTSUP,  -EROFS,        -ENAMETOOLONG, -ELOOP, -EMFILE,
                    -ENFILE,    -EPERM,       -EDQUOT,   -EISDIR };
    size_t n = sizeof codes / sizeof codes[0];
    for (size_t i = 0; i < n; i++) {
        cr_assert(ne(str, (char *)chime_strerror(codes[i]), "unknown error"), "%d", codes[i]);
        cr_assert(ne(ptr, (void *)chime_strerror(codes[i]), NULL));
        for (size_t j = 0; j < i; j++)
            cr_assert(ne(str, (char *)chime_strerror(codes[i]), (char *)chime_strerror(codes[j])));
    }
    cr_assert(eq(str, (char *)chime_strerror(-12345), "unknown error"));
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
    /* another errno the file system may return: the C library's text (a probe found -EISDIR named
     * "unknown error") */
    cr_assert(ne(str, (char *)chime_strerror(-EXDEV), "unknown error"));
#endif
}

Test(advance, a_period_one_timer_from_tick_zero_ends_when_advanced_to_the_end_of_time)
{
    /* (UINT64_MAX - 0) / 1 periods passed: one more would wrap the count, not just the deadline */
    cr_assert(eq(int, chime_wheel_schedule_every(w, 0, 1, log_fire, TAG(1), NULL), 0));
    cr_assert(eq(sz, chime_wheel_advance(w, UINT64_MAX), 1));
    cr_assert(eq(sz, chime_wheel_pending(w), 0));
}
