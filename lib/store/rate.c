/* SPDX-License-Identifier: MIT */
/*
 * The rate limit (max_fires_per_s): a token bucket the dispatcher takes from before it records
 * firings, and the pacing of the handlers' starts (fire.c, THE DISPATCHER). The dispatcher's alone:
 * no lock, no atomics.
 */
#include <time.h>

#include "store/store.h"

#define NS_PER_S UINT64_C(1000000000)

/* The rate limit's bucket holds max(1, rate/100) tokens: the burst chime.h states. */
static uint64_t bucket_cap(uint64_t rate)
{
    return rate / 100 > 1 ? rate / 100 : 1;
}

/* The rate limit at the handlers' starts (fire.c, THE DISPATCHER): when, on CLOCK_MONOTONIC, the handler
 * of a firing just recorded may start, due_ns being wall_now's time mono_now. The bucket lets
 * firings be recorded at the rate, but a firing is recorded up to the lead before its due time, so
 * the handlers of the firings recorded during one lead would start together at their due time
 * (found in review: 5 within 0.06 ms at 100/s, where the bucket holds 1). So the starts are spaced
 * as a bucket of the same rate and capacity would let them through (the generic cell rate
 * algorithm): pace_next is the start that the next handler would have at the rate, and a handler
 * may start up to capacity - 1 spacings before it. In absolute time, so that the time the firings'
 * commit took does not move one batch's starts closer to the last's. On the real clock, not on
 * rate_clock (a test's may stand still). The dispatcher's alone. */
uint64_t chime__store_pace(struct chime_store *s, uint64_t due, uint64_t wall_now,
                           uint64_t mono_now)
{
    uint64_t rate = s->cfg.max_fires_per_s;
    uint64_t cap = bucket_cap(rate);
    /* rounded up: never faster than the rate */
    uint64_t spacing = rate < NS_PER_S ? (NS_PER_S + rate - 1) / rate : 1;
    uint64_t early = (cap - 1) * spacing;
    uint64_t want = mono_now + (due > wall_now ? due - wall_now : 0);
    uint64_t start = s->pace_next > want + early ? s->pace_next - early : want;
    s->pace_next = (s->pace_next > start ? s->pace_next : start) + spacing;
    return start;
}

static uint64_t (*test_rate_clock)(void); /* chime__store_set_rate_clock */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

void chime__store_set_rate_clock(uint64_t (*now)(void))
{
    test_rate_clock = now; /* as chime__store_set_clock: before opening, from the opening thread */
}

void chime__store_rate_init(struct chime_store *s)
{
    s->rate_clock = test_rate_clock ? test_rate_clock : mono_ns;
    s->tokens_at = s->rate_clock();
    s->tokens = 1.0;
}

size_t chime__store_allowance(struct chime_store *s, size_t want, uint64_t *wait_ns)
{
    uint64_t rate = s->cfg.max_fires_per_s;
    if (!rate)
        return want;
    double cap = (double)bucket_cap(rate);
    uint64_t now = s->rate_clock();
    s->tokens += (double)(now - s->tokens_at) * (double)rate / 1e9;
    s->tokens_at = now;
    if (s->tokens > cap)
        s->tokens = cap;
    if (s->tokens < 1.0) {
        *wait_ns = (uint64_t)((1.0 - s->tokens) * 1e9 / (double)rate) + 1;
        return 0;
    }
    size_t n = (size_t)s->tokens < want ? (size_t)s->tokens : want;
    s->tokens -= (double)n;
    return n;
}
