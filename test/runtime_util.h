/* SPDX-License-Identifier: MIT */
/*
 * For the runtime's deterministic tests: the injected clock they move by hand (runtime.h), and the
 * records the runtime holds once it has gone idle.
 */
#ifndef CHIME_TEST_RUNTIME_UTIL_H
#define CHIME_TEST_RUNTIME_UTIL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "chime.h"
#include "runtime/runtime.h"
#include "tap.h"

static _Atomic uint64_t fake_now;
static inline uint64_t fake_clock(void *arg)
{
    (void)arg;
    return atomic_load_explicit(&fake_now, memory_order_relaxed);
}

/* CLOCK_MONOTONIC in ns, as the runtime's real clock reads it (for the tests on that clock). */
static inline uint64_t monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A runtime on the injected clock, which reads `now`. */
static inline chime_timer *start(const struct chime_timer_config *cfg, uint64_t now)
{
    atomic_store(&fake_now, now);
    chime_timer *t = NULL;
    CHECK_EQ(chime__timer_new_clocked(&t, cfg, fake_clock, NULL), 0);
    return t;
}

/* The records the runtime holds once it has gone idle. Memory goes back in the advancing thread's
 * idle steps, as the producers' recent demand decays (it halves every iteration: records.h), so
 * this syncs (one iteration each) until the figure is within bound, or 64 times at most: a demand
 * of 2^64 records would have decayed by then. */
static inline size_t records_once_idle(chime_timer *t, size_t bound)
{
    size_t records = 0;
    for (int i = 0; i < 64; i++) {
        chime__timer_sync(t);
        records = chime__timer_memory(t);
        if (records <= bound)
            break;
    }
    return records;
}

#endif /* CHIME_TEST_RUNTIME_UTIL_H */
