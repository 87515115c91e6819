/* SPDX-License-Identifier: MIT */
/*
 * chime.h from C++17 (built with -std=c++17 -Wall -Wextra -Wpedantic -Werror): the wheel and the
 * threaded runtime used as a C++ program would, the layouts named with chime_layout_*() since
 * C++17 has no designated initializers. A plain TAP program (tap.h) so that TSan runs it too.
 */
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <vector>

#include <chime.h>

#include "tap.h"

namespace {

struct Log {
    std::vector<int> fired;
};

struct Event {
    Log *log;
    int value;
};

extern "C" void record(void *arg)
{
    auto *e = static_cast<Event *>(arg);
    e->log->fired.push_back(e->value);
}

void wheel_fires_in_deadline_order_on_the_seconds_layout()
{
    chime_wheel_config cfg{};
    cfg.start = 1000;
    cfg.levels = chime_layout_seconds(cfg.slots);
    CHECK_EQ(cfg.levels, 4);
    CHECK_EQ(cfg.slots[3], 512);
    CHECK_EQ(cfg.slots[4], 0);

    chime_wheel *w = nullptr;
    CHECK_EQ(chime_wheel_new(&w, &cfg), 0);
    Log log;
    Event late{&log, 3}, early{&log, 1}, middle{&log, 2}, cancelled{&log, 99};
    chime_id id = 0;
    CHECK_EQ(chime_wheel_schedule(w, 1000 + 86400, record, &late, nullptr), 0); /* a day away */
    CHECK_EQ(chime_wheel_schedule(w, 1000 + 1, record, &early, nullptr), 0);
    CHECK_EQ(chime_wheel_schedule(w, 1000 + 3600, record, &middle, nullptr), 0);
    CHECK_EQ(chime_wheel_schedule(w, 1000 + 60, record, &cancelled, &id), 0);
    CHECK_EQ(chime_wheel_cancel(w, id), 0);
    CHECK_EQ(chime_wheel_cancel(w, id), -ENOENT);

    uint64_t next = 0;
    while (chime_wheel_next(w, &next) == 0)
        chime_wheel_advance(w, next);
    CHECK_EQ(log.fired.size(), 3);
    CHECK(log.fired == (std::vector<int>{1, 2, 3}), "fired %d, %d, %d", log.fired[0], log.fired[1],
          log.fired[2]);
    CHECK_EQ(chime_wheel_now(w), 1000 + 86400);
    chime_wheel_free(w, nullptr);
}

void milliseconds_layout_function_gives_the_clock_layout()
{
    chime_wheel_config cfg{};
    CHECK_EQ(chime_layout_milliseconds(cfg.slots), 5);
    const uint32_t want[CHIME_MAX_LEVELS] = {1000, 60, 60, 24, 512, 0, 0, 0};
    for (unsigned i = 0; i < CHIME_MAX_LEVELS; i++)
        CHECK_EQ(cfg.slots[i], want[i]);
}

std::atomic<int> runtime_fired{0};

extern "C" void count(void *) { runtime_fired.fetch_add(1, std::memory_order_relaxed); }

void runtime_drains_timers_scheduled_from_cxx()
{
    chime_timer_config cfg{};
    cfg.levels = chime_layout_milliseconds(cfg.slots);
    cfg.workers = 1;
    chime_timer *t = nullptr;
    CHECK_EQ(chime_timer_new(&t, &cfg), 0);
    for (int i = 0; i < 9; i++)
        CHECK_EQ(chime_timer_schedule(t, 1000000, count, nullptr, nullptr), 0); /* 1 ms */
    chime_id later = 0; /* an hour away: cancelled long before it could fire, however slow the run */
    CHECK_EQ(chime_timer_schedule(t, 3600 * UINT64_C(1000000000), count, nullptr, &later), 0);
    CHECK_EQ(chime_timer_cancel(t, later), 0);
    CHECK_EQ(chime_timer_stop(t, CHIME_STOP_DRAIN, nullptr), 0);
    chime_stats st{};
    chime_timer_stats(t, &st);
    chime_timer_free(t);
    CHECK_EQ(runtime_fired.load(std::memory_order_relaxed), 9);
    CHECK_EQ(st.fired, 9);
    CHECK_EQ(st.cancelled, 1);
}

void version_and_strerror_link()
{
    CHECK_EQ(chime_version(), CHIME_VERSION);
    CHECK(chime_strerror(-ENOENT) != nullptr, "chime_strerror returned NULL");
}

} // namespace

int main()
{
    static const tap_test tests[] = {
        {"wheel_fires_in_deadline_order_on_the_seconds_layout", wheel_fires_in_deadline_order_on_the_seconds_layout},
        {"milliseconds_layout_function_gives_the_clock_layout", milliseconds_layout_function_gives_the_clock_layout},
        {"runtime_drains_timers_scheduled_from_cxx", runtime_drains_timers_scheduled_from_cxx},
        {"version_and_strerror_link", version_and_strerror_link},
    };
    return tap_run(tests, static_cast<int>(sizeof(tests) / sizeof(tests[0])));
}
