/* SPDX-License-Identifier: MIT */
/*
 * The advancing thread's loop (lib/runtime/thread.c): its idle work, in an order of events the test
 * fixes by queueing everything while the thread is held inside a callback, so that its iterations
 * take the same records in on every run. The clock is injected (runtime_util.h). A plain TAP
 * program (tap.h).
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#include "chime.h"
#include "runtime/records.h"
#include "runtime/runtime.h"
#include "runtime_util.h"
#include "tap.h"

#define MS UINT64_C(1000000)
#define HOUR (UINT64_C(3600) * 1000 * MS)

static void noop(void *arg)
{
    (void)arg;
}

/* A callback that holds the advancing thread until the test lets it go. */
static _Atomic int held, let_go;
static void hold(void *arg)
{
    (void)arg;
    atomic_store(&held, 1);
    while (!atomic_load(&let_go))
        sched_yield();
}

/*
 * The last timers of a burst end in the iteration that took them in, so the producers' demand is
 * still high when they end and the watermark keeps the chunks just above the reserve. Nothing ends
 * afterwards; the demand decays and the watermark falls in the next iterations, and those chunks,
 * every record of them free, must then go back: memory comes back after a burst even if no timer
 * ends again.
 *
 * The order: 10 chunks of records less 1000 taken for timers an hour away; then, while a callback
 * holds the thread, every one of them cancelled and 900 timers scheduled for that same hour, and the
 * clock moved to the hour. Let go, the thread takes the cancels in, 1024 an iteration, then in its
 * last iteration the 24 cancels left and the 900 schedules, which fire at once.
 */
static void memory_goes_back_after_a_burst_once_the_demand_decays(void)
{
    chime_timer *t = start(NULL, 0);
    enum { OLD = 10 * CHIME__REC_CHUNK - 1000, NEW = 900 };
    static chime_id ids[OLD];
    for (size_t i = 0; i < OLD; i++)
        CHECK_EQ(chime_timer_schedule_at(t, HOUR, noop, NULL, &ids[i]), 0);
    chime__timer_sync(t);
    CHECK_EQ(chime_timer_schedule_at(t, 0, hold, NULL, NULL), 0);
    while (!atomic_load(&held))
        sched_yield();
    for (size_t i = 0; i < OLD; i++)
        CHECK_EQ(chime_timer_cancel(t, ids[i]), 0);
    for (size_t i = 0; i < NEW; i++)
        CHECK_EQ(chime_timer_schedule_at(t, HOUR, noop, NULL, NULL), 0);
    atomic_store(&fake_now, HOUR);
    atomic_store(&let_go, 1);
    chime__timer_sync(t);
    struct chime_stats st;
    chime_timer_stats(t, &st);
    CHECK_EQ(st.fired, 1 + NEW);
    CHECK_EQ(st.cancelled, OLD);
    CHECK_EQ(st.pending, 0);

    /* Nothing ends from here on; the thread goes round once a sync. */
    const size_t bound = (CHIME__REC_RESERVE + 1) * CHIME__REC_CHUNK;
    size_t records = records_once_idle(t, bound);
    CHECK(records <= bound, "%zu records still held with no timer pending, 64 iterations after the burst",
          records);
    chime_timer_free(t);
}

int main(void)
{
    static const struct tap_test tests[] = {
        { "memory goes back after a burst once the demand decays", memory_goes_back_after_a_burst_once_the_demand_decays },
    };
    return tap_run(tests, (int)(sizeof(tests) / sizeof(tests[0])));
}
