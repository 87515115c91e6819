/* SPDX-License-Identifier: MIT */
/*
 * What the runtime's deterministic tests share (test_runtime.c, test_runtime_stop.c): moving the
 * injected clock, a log of callbacks, the statistics check.
 */
#ifndef CHIME_TEST_RUNTIME_LOG_H
#define CHIME_TEST_RUNTIME_LOG_H

#include <stdatomic.h>
#include <stdint.h>

#include "chime.h"
#include "runtime/runtime.h"
#include "runtime_util.h"
#include "tap.h"

#define MS UINT64_C(1000000)

/* Move the clock and let the advancing thread catch up with it. */
static inline void set_time(chime_timer *t, uint64_t now)
{
    atomic_store(&fake_now, now);
    chime__timer_sync(t);
}

/* A log of callbacks: which tag ran, and what the clock said. */
#define LOG_MAX 4096
static _Atomic size_t log_n;
static uintptr_t log_tag[LOG_MAX];
static uint64_t log_time[LOG_MAX];

static inline void log_reset(void)
{
    atomic_store(&log_n, 0);
}

static inline void log_fire(void *arg)
{
    size_t i = atomic_fetch_add(&log_n, 1);
    if (i < LOG_MAX) {
        log_tag[i] = (uintptr_t)arg;
        log_time[i] = fake_clock(NULL);
    }
}

#define TAG(x) ((void *)(uintptr_t)(x))

static inline void expect_stats(chime_timer *t, uint64_t scheduled, uint64_t fired, uint64_t cancelled,
                         uint64_t unfired)
{
    struct chime_stats st;
    chime_timer_stats(t, &st);
    CHECK(st.scheduled == scheduled && st.fired == fired && st.cancelled == cancelled &&
              st.unfired == unfired,
          "stats scheduled %llu fired %llu cancelled %llu unfired %llu, want %llu %llu %llu %llu",
          (unsigned long long)st.scheduled, (unsigned long long)st.fired,
          (unsigned long long)st.cancelled, (unsigned long long)st.unfired,
          (unsigned long long)scheduled, (unsigned long long)fired, (unsigned long long)cancelled,
          (unsigned long long)unfired);
    CHECK_EQ(st.pending, scheduled - fired - cancelled - unfired);
}

/* The logged timers that have fired are `before` until the clock reaches at - 1, and one more at
 * `at` (the injected clock, moved by set_time). */
static inline void expect_next_fires_at(chime_timer *t, uint64_t at, size_t before)
{
    set_time(t, at - 1);
    CHECK_EQ(atomic_load(&log_n), before);
    set_time(t, at);
    CHECK_EQ(atomic_load(&log_n), before + 1);
}

static inline void noop(void *arg)
{
    (void)arg;
}

#endif /* CHIME_TEST_RUNTIME_LOG_H */
