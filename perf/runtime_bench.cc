/* SPDX-License-Identifier: MIT */
// The threaded runtime's workloads: schedule throughput from 1 and 2 producers, churn at 10^6 pending
// timers, a burst's firing lateness at two ticks (and, as its floor, a plain thread's wake-up
// lateness), idle CPU and wake-ups, memory through storms and bursts, and bytes per pending timer.
//
// Unlike the wheel's workloads these run against the real clock and real threads, one iteration per
// repetition (each is a second or so of work); the figures each repetition measures are noted and the
// summary prints their median. There are no heap or list equivalents: the baselines are
// single-threaded structures. Everything goes through the public API of the shared library.
#include <benchmark/benchmark.h>
#include <dirent.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "chime.h"
#include "harness.h"

namespace perf {
namespace {

constexpr uint64_t kMs = 1000000;
constexpr uint64_t kHourNs = 3600 * 1000 * kMs;

bool quick() { return g_opt.mode == Mode::quick; }
bool full() { return g_opt.mode == Mode::full; }

uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

void sleep_ms(unsigned ms) {
  timespec ts{time_t(ms / 1000), long(ms % 1000) * 1000000L};
  nanosleep(&ts, nullptr);
}

uint64_t xorshift(uint64_t &x) {
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  return x * UINT64_C(2685821657736338717);
}

void noop(void *) {}

// A runtime with the default configuration, or tick_ns (0: the default 1 ms tick).
chime_timer *make_timer(benchmark::State &st, uint64_t tick_ns = 0) {
  chime_timer_config cfg{};
  cfg.tick_ns = tick_ns;
  chime_timer *t = nullptr;
  if (chime_timer_new(&t, &cfg) != 0) fail(st, "chime_timer_new failed");
  return t;
}

// Wait until the advancing thread has applied every call made before this one: the queue is FIFO
// across producers, so a timer due at once, pushed last, fires after all of them were applied.
void wait_applied(chime_timer *t) {
  std::atomic<bool> done{false};
  chime_timer_schedule_at(
      t, 0, [](void *p) { static_cast<std::atomic<bool> *>(p)->store(true, std::memory_order_release); },
      &done, nullptr);
  while (!done.load(std::memory_order_acquire)) sched_yield();
}

// Schedule n timers one to two hours away, ids into `ids` when given. Return: false if one failed.
bool prefill(chime_timer *t, size_t n, uint64_t &rng, chime_id *ids = nullptr) {
  for (size_t i = 0; i < n; i++)
    if (chime_timer_schedule(t, kHourNs + xorshift(rng) % kHourNs, noop, nullptr, ids ? &ids[i] : nullptr))
      return false;
  return true;
}

// A throughput workload's two figures, in millions per second: `items` over the producers' time
// (start to produced, which is also the iteration's time) and until the advancing thread applied them.
void note_rates(benchmark::State &st, const std::string &name, const std::string &what, size_t items,
                uint64_t start, uint64_t produced, uint64_t applied) {
  double secs = double(produced - start) / 1e9;
  st.SetIterationTime(secs);
  note(st, name + "_producer", what + ", producer side (M/s)", double(items) / secs / 1e6);
  note(st, name + "_applied", what + ", applied by the advancing thread (M/s)",
       double(items) / (double(applied - start) / 1e9) / 1e6);
}

size_t rss_bytes() {
  std::ifstream in("/proc/self/statm");
  size_t pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * size_t(sysconf(_SC_PAGESIZE));
}

// ---- producer throughput ----

// `total` schedules, an hour (plus up to a second) away, split over `producers` threads released at
// once. The producer figure is the time until the last producer returns; the applied figure is the
// time until the advancing thread has taken them all into the wheel.
void BM_runtime_schedule(benchmark::State &st) {
  const unsigned producers = unsigned(st.range(0));
  const bool absolute = st.range(1) != 0;  // schedule_at: no clock read on the producer's path
  const size_t total = quick() ? 200000 : 2000000;
  for (auto _ : st) {
    chime_timer *t = make_timer(st);
    if (!t) return;
    std::atomic<unsigned> ready{0};
    std::atomic<bool> go{false}, bad{false};
    std::vector<std::thread> threads;
    for (unsigned p = 0; p < producers; p++) {
      threads.emplace_back([&, p] {
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) {
        }
        size_t mine = total / producers;
        uint64_t base = mono_ns() + kHourNs;
        for (size_t i = 0; i < mine; i++) {
          uint64_t spread = ((i * 7 + p) & 1023) * kMs;
          if (absolute ? chime_timer_schedule_at(t, base + spread, noop, nullptr, nullptr)
                       : chime_timer_schedule(t, kHourNs + spread, noop, nullptr, nullptr))
            bad = true;
        }
      });
    }
    while (ready.load() < producers) sched_yield();
    uint64_t start = mono_ns();
    go.store(true, std::memory_order_release);
    for (auto &th : threads) th.join();
    uint64_t produced = mono_ns();
    wait_applied(t);
    uint64_t applied = mono_ns();
    chime_timer_free(t);
    if (bad) return (void)fail(st, "schedule failed");
    std::string p = std::to_string(producers);
    note_rates(st, std::string(absolute ? "schedule_at_" : "schedule_") + p + "p",
               std::string(absolute ? "schedule_at (no clock read)" : "schedule (clock read included)") + ", " +
                   p + (producers == 1 ? " producer" : " producers in total"),
               total, start, produced, applied);
  }
  st.SetItemsProcessed(int64_t(st.iterations() * total));
}

// ---- the clock ----

// One store to a random 8-byte word of a 128 MiB array per step, `steps` times, with a vDSO clock
// read before each store or without; ns per step. A schedule writes a record it has not touched in
// a while, then reads the clock in the next one: a clock read ordered after earlier loads and
// stores (the vDSO's fenced TSC read) waits for such a store's cache miss, which a loop of reads
// alone never shows.
double cold_steps(std::vector<uint64_t> &a, size_t steps, bool clock) {
  uint64_t r = 0x9e3779b97f4a7c15u, t0 = mono_ns();
  const size_t mask = a.size() - 1;
  for (size_t i = 0; i < steps; i++) a[xorshift(r) & mask] = clock ? mono_ns() : i;
  return double(mono_ns() - t0) / double(steps);
}

// What the producer's clock costs: a vDSO read of CLOCK_MONOTONIC (what chime_timer_schedule read
// before, and what it still reads where the kernel's clocksource is not the TSC) and a bare TSC read
// (what it reads now, docs/design.md "The clock"), each in a loop on one thread, ns per read; and a
// vDSO read between stores to cold lines, over the same stores alone. The difference between
// BM_runtime_schedule's two forms is the clock as the runtime pays for it.
void BM_runtime_clock(benchmark::State &st) {
  const size_t reads = quick() ? 1000000 : 10000000;
  std::vector<uint64_t> cold(size_t(16) << 20, 1);  // 128 MiB, touched: no page fault in the loops
  for (auto _ : st) {
    uint64_t sink = 0, t0 = mono_ns();
    for (size_t i = 0; i < reads; i++) sink += mono_ns();
    uint64_t t1 = mono_ns();
#if defined(__x86_64__)
    for (size_t i = 0; i < reads; i++) sink += __builtin_ia32_rdtsc();
#endif
    uint64_t t2 = mono_ns();
    benchmark::DoNotOptimize(sink);
    st.SetIterationTime(double(t2 - t0) / 1e9);
    note(st, "clock_monotonic_ns", "clock: one CLOCK_MONOTONIC read through the vDSO (ns)", double(t1 - t0) / double(reads));
#if defined(__x86_64__)
    note(st, "clock_tsc_ns", "clock: one TSC read, unfenced (ns)", double(t2 - t1) / double(reads));
#endif
    double bare = cold_steps(cold, reads / 4, false), timed = cold_steps(cold, reads / 4, true);
    note(st, "clock_after_cold_store_ns",
         "clock: one CLOCK_MONOTONIC read between stores to cold lines, over the stores alone (ns)",
         timed - bare);
  }
}

// ---- churn ----

// n timers pending an hour or two away; one producer replaces random ones: cancel (which must
// succeed) then schedule. Each cancel and each schedule counts as one operation.
void BM_runtime_churn(benchmark::State &st) {
  const size_t n = size_t(st.range(0));
  const size_t pairs = quick() ? 200000 : 2000000;
  std::vector<chime_id> ids(n);
  uint64_t rng = 0x9e3779b97f4a7c15u;
  for (auto _ : st) {
    chime_timer *t = make_timer(st);
    if (!t) return;
    if (!prefill(t, n, rng, ids.data())) {
      chime_timer_free(t);
      return (void)fail(st, "churn: prefill failed");
    }
    wait_applied(t);
    bool bad = false;
    uint64_t start = mono_ns();
    for (size_t k = 0; k < pairs; k++) {
      size_t i = size_t(xorshift(rng) % n);
      bad |= chime_timer_cancel(t, ids[i]) != 0;
      bad |= chime_timer_schedule(t, kHourNs + xorshift(rng) % kHourNs, noop, nullptr, &ids[i]) != 0;
    }
    uint64_t produced = mono_ns();
    wait_applied(t);
    uint64_t applied = mono_ns();
    chime_timer_free(t);
    if (bad) return (void)fail(st, "churn: a cancel or schedule failed");
    note_rates(st, "churn_" + std::to_string(n),
               "churn at " + count_name(int64_t(n)) + " pending, cancels and schedules counted one each", 2 * pairs,
               start, produced, applied);
  }
  st.SetItemsProcessed(int64_t(st.iterations() * 2 * pairs));
}

// ---- a burst's lateness ----

struct Shot {
  uint64_t deadline, fired;
  std::atomic<size_t> *count;
};

void shot(void *p) {
  Shot *s = static_cast<Shot *>(p);
  s->fired = mono_ns();
  s->count->fetch_add(1, std::memory_order_release);
}

// The lateness histogram's bins (upper bounds, µs; the last bin is everything above the last bound),
// as counters "late_lt_<bound>us" and "late_ge_<last>us" in percent, for the plots.
constexpr double kLateBins[] = {10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000};

void note_histogram(benchmark::State &st, const std::vector<double> &late_us) {
  size_t counts[std::size(kLateBins) + 1] = {};
  for (double l : late_us)
    counts[std::upper_bound(std::begin(kLateBins), std::end(kLateBins), l) - std::begin(kLateBins)]++;
  char key[32];
  for (size_t b = 0; b <= std::size(kLateBins); b++) {
    if (b < std::size(kLateBins))
      std::snprintf(key, sizeof key, "late_lt_%gus", kLateBins[b]);
    else
      std::snprintf(key, sizeof key, "late_ge_%gus", kLateBins[b - 1]);
    st.counters[key] = 100.0 * double(counts[b]) / double(late_us.size());
  }
}

// 100 000 timers due uniformly over 1-500 ms, scheduled at once, on a runtime with the given tick and
// `background` timers pending an hour away. Lateness: from each deadline (exact: schedule_at with
// the clock read just before) to its callback's start; it includes the rounding up to the tick.
void BM_runtime_burst(benchmark::State &st) {
  const uint64_t tick_ns = uint64_t(st.range(0)) * 1000;
  const size_t background = size_t(st.range(1));
  constexpr size_t kShots = 100000;
  std::vector<Shot> s(kShots);
  uint64_t rng = 0x2545f4914f6cdd1du;
  for (auto _ : st) {
    chime_timer *t = make_timer(st, tick_ns);
    if (!t) return;
    if (!prefill(t, background, rng)) {
      chime_timer_free(t);
      return (void)fail(st, "burst: background schedule failed");
    }
    wait_applied(t);
    std::atomic<size_t> count{0};
    uint64_t start = mono_ns();
    for (size_t i = 0; i < kShots; i++) {
      uint64_t now = mono_ns();
      s[i] = Shot{now + kMs + xorshift(rng) % (499 * kMs + 1), 0, &count};
      if (chime_timer_schedule_at(t, s[i].deadline, shot, &s[i], nullptr)) {
        chime_timer_free(t);
        return (void)fail(st, "burst: schedule failed");
      }
    }
    while (count.load(std::memory_order_acquire) < kShots && mono_ns() - start < 30000 * kMs) sleep_ms(10);
    st.SetIterationTime(double(mono_ns() - start) / 1e9);
    chime_timer_free(t);
    if (count.load(std::memory_order_acquire) < kShots) return (void)fail(st, "burst: timers did not fire in 30 s");
    std::vector<double> late(kShots);
    for (size_t i = 0; i < kShots; i++) {
      if (s[i].fired < s[i].deadline) return (void)fail(st, "burst: a timer fired early");
      late[i] = double(s[i].fired - s[i].deadline) / 1e3;
    }
    std::sort(late.begin(), late.end());
    std::string k = "burst_tick" + std::to_string(tick_ns / 1000) + "us_bg" + std::to_string(background);
    std::string what = "burst of 100k over 1-500 ms, " +
                       (tick_ns % kMs ? std::to_string(tick_ns / 1000) + " us" : std::to_string(tick_ns / kMs) + " ms") +
                       " tick" + (background ? ", " + count_name(int64_t(background)) + " pending" : std::string()) +
                       ": lateness ";
    note(st, k + "_p50_us", what + "p50 (us)", late[kShots / 2]);
    note(st, k + "_p99_us", what + "p99 (us)", late[kShots * 99 / 100]);
    note(st, k + "_max_us", what + "max (us)", late.back());
    note_histogram(st, late);
  }
  st.SetItemsProcessed(int64_t(st.iterations() * kShots));
}

// ---- the machine's own wake-up lateness ----

// The floor under the burst's lateness: a plain thread (no chime), its timer slack 1 ns as the
// advancing thread's, sleeps with clock_nanosleep to 5000 absolute deadlines 100 us apart (1 to
// 500 ms from the start, as the burst's) and notes how late it woke for each. On a shared or
// loaded machine this is how late any thread that sleeps until a deadline wakes; a runtime cannot
// fire earlier after its deadline than its thread wakes.
void BM_runtime_sleeper(benchmark::State &st) {
  constexpr size_t kWakes = 5000;
  for (auto _ : st) {
    std::vector<double> late(kWakes);
    uint64_t start = mono_ns();
    std::thread th([&] {
      prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
      for (size_t k = 0; k < kWakes; k++) {
        uint64_t deadline = start + kMs + k * (kMs / 10);
        timespec ts{time_t(deadline / 1000000000u), long(deadline % 1000000000u)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
        }
        late[k] = double(mono_ns() - deadline) / 1e3;
      }
    });
    th.join();
    st.SetIterationTime(double(mono_ns() - start) / 1e9);
    std::sort(late.begin(), late.end());
    const std::string what = "a plain thread sleeping to 5000 deadlines over 1-500 ms: wake-up lateness ";
    note(st, "sleeper_p50_us", what + "p50 (us)", late[kWakes / 2]);
    note(st, "sleeper_p99_us", what + "p99 (us)", late[kWakes * 99 / 100]);
    note(st, "sleeper_max_us", what + "max (us)", late.back());
  }
}

// ---- idle ----

// Context switches of every thread of this process but the caller's: each is one wake-up (or a
// preemption) of the advancing thread, the only other thread while this one sleeps.
uint64_t other_threads_switches() {
  uint64_t total = 0;
  long me = syscall(SYS_gettid);
  DIR *d = opendir("/proc/self/task");
  if (!d) return 0;
  while (dirent *e = readdir(d)) {
    if (e->d_name[0] == '.' || std::atol(e->d_name) == me) continue;
    std::ifstream in(std::string("/proc/self/task/") + e->d_name + "/status");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("voluntary_ctxt_switches", 0) == 0 || line.rfind("nonvoluntary_ctxt_switches", 0) == 0)
        total += std::strtoull(line.substr(line.find(':') + 1).c_str(), nullptr, 10);
  }
  closedir(d);
  return total;
}

uint64_t process_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

// n timers pending one to two hours away, no other activity: CPU time and wake-ups of the advancing
// thread per second over a window in which this thread sleeps.
void BM_runtime_idle(benchmark::State &st) {
  const size_t n = size_t(st.range(0));
  const unsigned window_ms = quick() ? 500 : full() ? 3000 : 1000;
  uint64_t rng = 0xda942042e4dd58b5u;
  for (auto _ : st) {
    chime_timer *t = make_timer(st);
    if (!t) return;
    if (!prefill(t, n, rng)) {
      chime_timer_free(t);
      return (void)fail(st, "idle: schedule failed");
    }
    wait_applied(t);
    sleep_ms(50);  // let it finish its iteration and go to sleep
    // Reading /proc costs this thread CPU time: done outside the CPU window.
    uint64_t sw0 = other_threads_switches(), cpu0 = process_cpu_ns(), t0 = mono_ns();
    sleep_ms(window_ms);
    uint64_t t1 = mono_ns(), cpu1 = process_cpu_ns(), sw1 = other_threads_switches();
    chime_timer_free(t);
    double secs = double(t1 - t0) / 1e9;
    st.SetIterationTime(secs);
    std::string k = "idle_" + std::to_string(n), what = "idle, " + count_name(int64_t(n)) + " pending far away: ";
    note(st, k + "_cpu_ms_per_s", what + "CPU (ms per s)", double(cpu1 - cpu0) / 1e6 / secs);
    note(st, k + "_wakeups_per_s", what + "wake-ups per s", double(sw1 - sw0) / secs);
  }
}

// ---- memory ----

// Resident memory through a schedule-then-cancel storm of n timers, then through a burst of n timers
// that all fire within a second or so: the peak during each, and what is left once the runtime is idle.
void BM_runtime_memory(benchmark::State &st) {
  const size_t n = size_t(st.range(0));
  for (auto _ : st) {
    chime_timer *t = make_timer(st);
    if (!t) return;
    wait_applied(t);
    double mb = 1024.0 * 1024.0;
    size_t before = rss_bytes(), peak = before;
    bool bad = false;
    uint64_t start = mono_ns();
    for (size_t i = 0; i < n; i++) {
      chime_id id;
      bad |= chime_timer_schedule(t, kHourNs, noop, nullptr, &id) != 0;
      bad |= chime_timer_cancel(t, id) != 0;
      if ((i & 0xffff) == 0) peak = std::max(peak, rss_bytes());
    }
    wait_applied(t);
    sleep_ms(100);
    size_t after_storm = rss_bytes();
    std::atomic<size_t> fired{0};
    auto count = [](void *p) { static_cast<std::atomic<size_t> *>(p)->fetch_add(1, std::memory_order_relaxed); };
    size_t burst_peak = after_storm;
    for (size_t i = 0; i < n; i++) {
      bad |= chime_timer_schedule(t, 500 * kMs + (i % 500) * kMs, count, &fired, nullptr) != 0;
      if ((i & 0xffff) == 0) burst_peak = std::max(burst_peak, rss_bytes());
    }
    burst_peak = std::max(burst_peak, rss_bytes());
    while (fired.load(std::memory_order_relaxed) < n) sleep_ms(10);
    wait_applied(t);
    sleep_ms(200);
    size_t after_burst = rss_bytes();
    st.SetIterationTime(double(mono_ns() - start) / 1e9);
    chime_timer_free(t);
    if (bad) return (void)fail(st, "memory: a schedule or cancel failed");
    std::string k = "memory_" + std::to_string(n), what = "resident memory, " + count_name(int64_t(n)) + " timers: ";
    note(st, k + "_storm_peak_MB", what + "growth at the peak of a schedule+cancel storm (MB)", double(peak - before) / mb);
    note(st, k + "_after_storm_MB", what + "growth after the storm (MB)", (double(after_storm) - double(before)) / mb);
    note(st, k + "_burst_peak_MB", what + "growth at the peak of a burst (MB)", double(burst_peak - before) / mb);
    note(st, k + "_after_burst_MB", what + "growth after the burst fired (MB)", (double(after_burst) - double(before)) / mb);
  }
}

// n timers pending, bytes per timer measured in a fresh process (memory.cc, runtime_memory_child).
void BM_runtime_bytes(benchmark::State &st) {
  const int64_t n = st.range(0);
  for (auto _ : st) {
    std::string error;
    double v = measure_in_child("runtime", n, &error);
    if (!error.empty()) return (void)fail(st, error);
    note(st, "bytes_" + std::to_string(n), "bytes per pending timer, " + count_name(n) + " pending (resident growth / N)", v);
  }
}

}  // namespace

int runtime_memory_child(size_t n) {
  chime_timer *t = nullptr;
  if (chime_timer_new(&t, nullptr) != 0) return 1;
  wait_applied(t);
  size_t before = anon_resident_bytes();
  uint64_t rng = 0x6a09e667f3bcc909u;
  if (!prefill(t, n, rng)) return 1;
  wait_applied(t);
  size_t after = anon_resident_bytes();
  chime_stats stats;
  chime_timer_stats(t, &stats);
  if (stats.pending != n) {
    std::fprintf(stderr, "chime-perf: memory: the runtime holds %llu timers, not %zu\n",
                 (unsigned long long)stats.pending, n);
    return 1;
  }
  std::printf("bytes_per_timer %.3f\n", (double(after) - double(before)) / double(n));
  std::fflush(stdout);
  std::_Exit(0);  // the runtime's thread is still running: no destructors, no free of 10^6 timers
}

void register_runtime_benchmarks() {
  constexpr unsigned kScenario = kOnce | kManualTime | kMillis;
  for (int64_t at : {0, 1})
    for (int64_t p : {1, 2}) add("BM_runtime_schedule", {"producers", "at"}, {p, at}, BM_runtime_schedule, kScenario);
  add("BM_runtime_clock", {}, {}, BM_runtime_clock, kScenario);
  add("BM_runtime_churn", {"pending"}, {quick() ? 10000 : 1000000}, BM_runtime_churn, kScenario);
  add("BM_runtime_burst", {"tick_us", "pending"}, {1000, 0}, BM_runtime_burst, kScenario);
  add("BM_runtime_burst", {"tick_us", "pending"}, {100, 0}, BM_runtime_burst, kScenario);
  if (full()) add("BM_runtime_burst", {"tick_us", "pending"}, {1000, 1000000}, BM_runtime_burst, kScenario);
  add("BM_runtime_sleeper", {}, {}, BM_runtime_sleeper, kScenario);
  add("BM_runtime_idle", {"pending"}, {quick() ? 100000 : 1000000}, BM_runtime_idle, kScenario);
  add("BM_runtime_memory", {"timers"}, {full() ? 10000000 : 1000000}, BM_runtime_memory, kScenario);
  for (int64_t n : quick() ? std::vector<int64_t>{100000} : full() ? std::vector<int64_t>{1000000, 10000000} : std::vector<int64_t>{1000000})
    add("BM_runtime_bytes", {"pending"}, {n}, BM_runtime_bytes, kOnce);
}

}  // namespace perf
