/* SPDX-License-Identifier: MIT */
/* Re-entrancy: every wheel function called from inside a callback of the same wheel. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <errno.h>

#include "chime.h"
#include "log.h"
#include "wheel/wheel.h"

static chime_wheel *w;

static void setup(void)
{
    cr_assert(eq(int, chime_wheel_new(&w, NULL), 0));
    log_reset(w);
}

static void teardown(void)
{
    const char *err = chime__wheel_check(w);
    cr_assert(err == NULL, "%s", err);
    chime_wheel_free(w, NULL);
}

TestSuite(reentrancy, .init = setup, .fini = teardown);

static chime_id at(uint64_t deadline, uintptr_t tag)
{
    chime_id id;
    cr_assert(eq(int, chime_wheel_schedule(w, deadline, log_fire, TAG(tag), &id), 0));
    return id;
}

/* A callback that logs itself, then runs one action on the wheel and records its result. */
enum action { CANCEL, RESCHEDULE, SCHEDULE, SCHEDULE_EVERY, ADVANCE, NEXT, PENDING };

struct act {
    enum action what;
    chime_id target;   /* CANCEL, RESCHEDULE */
    uint64_t when;     /* RESCHEDULE, SCHEDULE, SCHEDULE_EVERY (first), ADVANCE */
    uint64_t period;   /* SCHEDULE_EVERY */
    uintptr_t tag;     /* this callback's tag in the log; SCHEDULE*: the new timer's tag is tag + 100 */
    int rc;            /* result of the action */
    uint64_t value;    /* NEXT: the time; PENDING: the count; ADVANCE: the fired count */
    chime_id made;     /* SCHEDULE*: the new id */
    int runs;
};

static void act(void *arg)
{
    struct act *a = arg;
    a->runs++;
    log_fire(TAG(a->tag));
    switch (a->what) {
    case CANCEL: a->rc = chime_wheel_cancel(w, a->target); break;
    case RESCHEDULE: a->rc = chime_wheel_reschedule(w, a->target, a->when); break;
    case SCHEDULE: a->rc = chime_wheel_schedule(w, a->when, log_fire, TAG(a->tag + 100), &a->made); break;
    case SCHEDULE_EVERY:
        a->rc = chime_wheel_schedule_every(w, a->when, a->period, log_fire, TAG(a->tag + 100), &a->made);
        break;
    case ADVANCE: a->value = chime_wheel_advance(w, a->when); break;
    case NEXT: a->rc = chime_wheel_next(w, &a->value); break;
    case PENDING: a->value = chime_wheel_pending(w); break;
    }
}

static chime_id act_at(uint64_t deadline, struct act *a)
{
    chime_id id;
    cr_assert(eq(int, chime_wheel_schedule(w, deadline, act, a, &id), 0));
    return id;
}

Test(reentrancy, cancelling_a_timer_due_on_the_same_tick_stops_it)
{
    struct act a = { .what = CANCEL, .tag = 1 };
    act_at(100, &a);
    a.target = at(100, 2);
    cr_assert(eq(sz, chime_wheel_advance(w, 100), 1));
    cr_assert(eq(int, a.rc, 0));
    cr_assert(eq(sz, fired_count, 1));
    cr_assert(eq(sz, chime_wheel_pending(w), 0));
}

Test(reentrancy, cancelling_a_timer_due_later_in_the_same_advance_stops_it)
{
    struct act a = { .what = CANCEL, .tag = 1 };
    act_at(100, &a);
    a.target = at(5000, 2);
    cr_assert(eq(sz, chime_wheel_advance(w, 10000), 1));
    cr_assert(eq(int, a.rc, 0));
    cr_assert(eq(sz, fired_count, 1));
}

Test(reentrancy, cancelling_a_due_list_timer_from_the_due_list_stops_it)
{
    chime_wheel_advance(w, 50);
    struct act a = { .what = CANCEL, .tag = 1 };
    act_at(10, &a);
    a.target = at(20, 2); /* both already due: they fire from the due list */
    cr_assert(eq(sz, chime_wheel_advance(w, 50), 1));
    cr_assert(eq(int, a.rc, 0));
}

Test(reentrancy, a_one_shot_cancelling_itself_gets_enoent)
{
    struct act a = { .what = CANCEL, .tag = 1 };
    a.target = act_at(100, &a);
    chime_wheel_advance(w, 100);
    cr_assert(eq(int, a.rc, -ENOENT));
    cr_assert(eq(int, a.runs, 1));
}

Test(reentrancy, a_periodic_timer_cancelling_itself_stops_for_good)
{
    struct act a = { .what = CANCEL, .tag = 1 };
    cr_assert(eq(int, chime_wheel_schedule_every(w, 10, 10, act, &a, &a.target), 0));
    cr_assert(eq(sz, chime_wheel_advance(w, 10), 1));
    cr_assert(eq(int, a.rc, 0));
    cr_assert(eq(sz, chime_wheel_advance(w, 1000), 0));
    cr_assert(eq(int, a.runs, 1));
    cr_assert(eq(sz, chime_wheel_pending(w), 0));
}

Test(reentrancy, a_periodic_timer_rescheduling_itself_moves_its_series)
{
    struct act a = { .what = RESCHEDULE, .tag = 1, .when = 55 };
    cr_assert(eq(int, chime_wheel_schedule_every(w, 10, 10, act, &a, &a.target), 0));
    cr_assert(eq(sz, chime_wheel_advance(w, 10), 1));
    cr_assert(eq(int, a.rc, 0));
    a.what = PENDING;
    cr_assert(eq(sz, chime_wheel_advance(w, 54), 0));
    cr_assert(eq(sz, chime_wheel_advance(w, 55), 1));
    cr_assert(eq(sz, chime_wheel_advance(w, 64), 0));
    cr_assert(eq(sz, chime_wheel_advance(w, 65), 1));
}

Test(reentrancy, rescheduling_another_timer_inside_or_beyond_the_advance)
{
    struct act a = { .what = RESCHEDULE, .tag = 1, .when = 700 };
    act_at(100, &a);
    a.target = at(200, 2);
    struct act b = { .what = RESCHEDULE, .tag = 3, .when = 5000 };
    act_at(300, &b);
    b.target = at(400, 4);
    cr_assert(eq(sz, chime_wheel_advance(w, 1000), 3)); /* 1 at 100, 3 at 300, 2 at 700 */
    cr_assert(eq(u64, fired_log[2].tag, 2));
    cr_assert(eq(u64, fired_log[2].now, 700));
    cr_assert(eq(sz, chime_wheel_advance(w, 5000), 1));
}

Test(reentrancy, a_timer_scheduled_due_now_waits_for_the_next_advance)
{
    struct act a = { .what = SCHEDULE, .tag = 1, .when = 100 };
    act_at(100, &a);
    cr_assert(eq(sz, chime_wheel_advance(w, 100), 1));
    cr_assert(eq(int, a.rc, 0));
    cr_assert(eq(sz, chime_wheel_pending(w), 1));
    cr_assert(eq(sz, chime_wheel_advance(w, 100), 1));
    cr_assert(eq(u64, fired_log[1].tag, 101));
}

Test(reentrancy, a_timer_scheduled_in_the_past_waits_for_the_next_advance)
{
    struct act a = { .what = SCHEDULE, .tag = 1, .when = 3 };
    act_at(100, &a);
    cr_assert(eq(sz, chime_wheel_advance(w, 2000), 1));
    cr_assert(eq(sz, chime_wheel_advance(w, 2000), 1));
}

Test(reentrancy, a_timer_scheduled_for_later_in_the_advance_fires_in_it)
{
    struct act a = { .what = SCHEDULE, .tag = 1, .when = 1500 };
    act_at(100, &a);
    cr_assert(eq(sz, chime_wheel_advance(w, 2000), 2));
    cr_assert(eq(u64, fired_log[1].tag, 101));
    cr_assert(eq(u64, fired_log[1].now, 1500));
}

Test(reentrancy, a_callback_that_always_schedules_a_due_timer_cannot_livelock_advance)
{
    static struct act chain[50];
    for (int i = 0; i < 50; i++)
        chain[i] = (struct act){ .what = SCHEDULE, .tag = (uintptr_t)i, .when = 0 };
    /* each run schedules log_fire at 0: due at once, so it must wait for the next advance */
    act_at(10, &chain[0]);
    cr_assert(eq(sz, chime_wheel_advance(w, 10), 1));
    cr_assert(eq(sz, chime_wheel_advance(w, 10), 1));
    cr_assert(eq(sz, chime_wheel_advance(w, 10), 0));
}

Test(reentrancy, schedule_every_from_a_callback)
{
    struct act a = { .what = SCHEDULE_EVERY, .tag = 1, .when = 150, .period = 100 };
    act_at(100, &a);
    cr_assert(eq(sz, chime_wheel_advance(w, 100), 1));
    cr_assert(eq(int, a.rc, 0));
    cr_assert(eq(sz, chime_wheel_advance(w, 400), 1)); /* 150 once; re-armed at 450 */
    cr_assert(eq(sz, chime_wheel_advance(w, 450), 1));
    cr_assert(eq(int, chime_wheel_cancel(w, a.made), 0));
}

Test(reentrancy, advance_from_a_callback_does_nothing)
{
    struct act a = { .what = ADVANCE, .tag = 1, .when = 5000 };
    act_at(100, &a);
    at(200, 2);
    cr_assert(eq(sz, chime_wheel_advance(w, 150), 1));
    cr_assert(eq(u64, a.value, 0));
    cr_assert(eq(u64, chime_wheel_now(w), 150));
    cr_assert(eq(sz, chime_wheel_pending(w), 1));
}

Test(reentrancy, now_next_and_pending_from_a_callback)
{
    struct act a = { .what = NEXT, .tag = 1 };
    struct act b = { .what = PENDING, .tag = 2 };
    act_at(1234, &a);
    act_at(1234, &b);
    at(1234, 3);
    at(99999, 4);
    cr_assert(eq(sz, chime_wheel_advance(w, 5000), 3));
    cr_assert(eq(u64, fired_log[0].now, 1234));
    cr_assert(eq(int, a.rc, 0));
    cr_assert(eq(u64, a.value, 1234)); /* the rest of this tick is still due */
    cr_assert(eq(u64, b.value, 2));    /* 3 and 4 */
}

Test(reentrancy, next_from_a_due_list_callback_says_now)
{
    chime_wheel_advance(w, 100);
    struct act a = { .what = NEXT, .tag = 1 };
    act_at(10, &a);
    at(20, 2);
    cr_assert(eq(sz, chime_wheel_advance(w, 100), 2));
    cr_assert(eq(int, a.rc, 0));
    cr_assert(le(u64, a.value, 100));
}
