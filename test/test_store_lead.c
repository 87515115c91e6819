/* SPDX-License-Identifier: MIT */
/*
 * The lead of firings before their due time (lib/store/lead.c), on an injected clock: the longest
 * firing commit of the last one or two periods, rounded up to a power of two of microseconds, plus a
 * tick, within bounds; the maximum until a whole period of commits has been timed.
 */
#include "store_util.h"

#include "store/lead.h"

#define US UINT64_C(1000)
#define TICK (1000 * US)
#define PERIOD CHIME__LEAD_PERIOD_NS

static struct chime__lead l;

/* A lead that has timed commits for a period already, all quicker than 1 us, at time 1 s. */
static uint64_t learned(void)
{
    chime__lead_init(&l, TICK);
    chime__lead_note(&l, 100, SEC);
    chime__lead_note(&l, 100, SEC + PERIOD);
    return SEC + PERIOD;
}

static void the_lead_is_the_maximum_until_a_period_of_commits_is_timed(void)
{
    chime__lead_init(&l, TICK);
    CHECK_EQ(chime__lead_ns(&l), CHIME__LEAD_MAX_NS);
    chime__lead_note(&l, 100 * US, SEC);
    CHECK_EQ(chime__lead_ns(&l), CHIME__LEAD_MAX_NS);
    chime__lead_note(&l, 100 * US, SEC + PERIOD - 1);
    CHECK_EQ(chime__lead_ns(&l), CHIME__LEAD_MAX_NS);
    chime__lead_note(&l, 100 * US, SEC + PERIOD);
    uint64_t want = 128 * US + TICK; /* 100 us rounded up to a power of two of us, plus the tick */
    CHECK_EQ(chime__lead_ns(&l), want < CHIME__LEAD_MIN_NS ? CHIME__LEAD_MIN_NS : want);
}

static void quick_commits_give_the_least_lead(void)
{
    learned();
    CHECK_EQ(chime__lead_ns(&l), CHIME__LEAD_MIN_NS); /* 1 us + a tick is below the least */
}

static void a_slow_commit_raises_the_lead_at_once_rounded_up_to_a_power_of_two(void)
{
    uint64_t now = learned();
    chime__lead_note(&l, 5000 * US, now + 1); /* 5 ms: 8192 us */
    CHECK_EQ(chime__lead_ns(&l), 8192 * US + TICK);
    chime__lead_note(&l, 100 * US, now + 2); /* a quick one after it changes nothing */
    CHECK_EQ(chime__lead_ns(&l), 8192 * US + TICK);
    chime__lead_note(&l, 8192 * US, now + 3); /* a power of two exactly is its own bound */
    CHECK_EQ(chime__lead_ns(&l), 8192 * US + TICK);
}

static void the_lead_never_exceeds_its_maximum(void)
{
    uint64_t now = learned();
    chime__lead_note(&l, 3 * SEC, now + 1);
    CHECK_EQ(chime__lead_ns(&l), CHIME__LEAD_MAX_NS);
    chime__lead_note(&l, UINT64_MAX / 2, now + 2);
    CHECK_EQ(chime__lead_ns(&l), CHIME__LEAD_MAX_NS);
}

static void a_slow_commit_stops_counting_after_the_next_period(void)
{
    uint64_t now = learned(); /* a period began at now */
    chime__lead_note(&l, 5000 * US, now + 1);
    chime__lead_note(&l, 100, now + PERIOD); /* the next period: the slow one is the last period's */
    CHECK_EQ(chime__lead_ns(&l), 8192 * US + TICK);
    chime__lead_note(&l, 100, now + 2 * PERIOD); /* and then it is gone */
    CHECK_EQ(chime__lead_ns(&l), CHIME__LEAD_MIN_NS);
}

static void after_a_silence_the_next_commit_alone_decides(void)
{
    uint64_t now = learned();
    chime__lead_note(&l, 20000 * US, now + 1);
    CHECK_EQ(chime__lead_ns(&l), CHIME__LEAD_MAX_NS > 32768 * US + TICK ? 32768 * US + TICK
                                                                        : CHIME__LEAD_MAX_NS);
    /* Nothing for an hour: both periods are over, and what was learned of the disk still holds. */
    chime__lead_note(&l, 300 * US, now + 3600 * SEC);
    CHECK_EQ(chime__lead_ns(&l), CHIME__LEAD_MIN_NS);
}

static const struct tap_test tests[] = {
    { "the_lead_is_the_maximum_until_a_period_of_commits_is_timed",
      the_lead_is_the_maximum_until_a_period_of_commits_is_timed },
    { "quick_commits_give_the_least_lead", quick_commits_give_the_least_lead },
    { "a_slow_commit_raises_the_lead_at_once_rounded_up_to_a_power_of_two",
      a_slow_commit_raises_the_lead_at_once_rounded_up_to_a_power_of_two },
    { "the_lead_never_exceeds_its_maximum", the_lead_never_exceeds_its_maximum },
    { "a_slow_commit_stops_counting_after_the_next_period",
      a_slow_commit_stops_counting_after_the_next_period },
    { "after_a_silence_the_next_commit_alone_decides", after_a_silence_the_next_commit_alone_decides },
};

int main(void)
{
    return tap_run(tests, (int)(sizeof tests / sizeof tests[0]));
}
