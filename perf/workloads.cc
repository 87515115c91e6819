/* SPDX-License-Identifier: MIT */
// The single-threaded workloads: the wheel against the tuned heap and the sorted list (and, in a full
// run, the heap of the other arity and the id-checked heap), workload by workload, over one grid of N.
//
// Every workload is one template run on each structure (BM_churn<wheel>, BM_churn<heap>, ...).
// Per-iteration setup is never timed: batch workloads time their batch with a steady clock
// (UseManualTime), so the untimed setup around it costs wall time only.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "harness.h"
#include "structures.h"

namespace perf {
namespace {

constexpr int kChurnBatch = 64;               // churn: operations per one-tick advance
constexpr uint64_t kExpireStep = 1024;        // expire: ticks per advance (~1 s in ms ticks)
constexpr uint64_t kHour = 3600 * 1000;       // idle_advance: the step, in ms ticks
constexpr uint64_t kYear = 365 * 24 * kHour;  // idle_advance: where its one timer waits

// A random permutation of 0 .. n-1 (Fisher-Yates).
void shuffle(std::vector<uint32_t> &p, Rng &rng) {
  for (size_t i = p.size(); i > 1; i--) std::swap(p[i - 1], p[rng.below(i)]);
}

std::vector<uint32_t> permutation(size_t n, uint64_t seed) {
  std::vector<uint32_t> p(n);
  std::iota(p.begin(), p.end(), 0u);
  Rng rng(seed);
  shuffle(p, rng);
  return p;
}

// A structure at kStart that has already held n timers, so its arrays or pool are grown and their
// pages touched before anything is timed. handles are the caller's: ids, or for an intrusive
// structure the timers themselves (one per index, in one array, as a server's connections would be).
template <class S>
struct Bed {
  typename S::T *t;
  uint64_t now = kStart;
  size_t n;
  std::vector<typename S::Handle> handles;

  explicit Bed(size_t n_) : t(S::create(kStart)), n(n_), handles(n_, S::handle()) {
    if (!t) {
      std::fprintf(stderr, "chime-perf: %s: out of memory\n", S::kName);
      std::exit(2);
    }
    settle();
  }
  ~Bed() { S::destroy(t); }
  Bed(const Bed &) = delete;
  Bed &operator=(const Bed &) = delete;

  // Take all n timers and give them back so that an id structure's free list is in the mode's order:
  // fresh (the default) gives the highest index back first (the low 32 bits of every id structure's
  // handle are its slot or node index), aged (--aged) in random order. An intrusive structure has no
  // free list: the caller owns the timers. Untimed; O(n log n).
  void settle() {
    for (auto &h : handles) S::schedule(t, now + kRange, h);  // one deadline: O(1) even for the list
    if constexpr (S::kIntrusive) {
      for (size_t i = n; i-- > 0;) S::cancel(t, handles[i]);
    } else if (g_opt.aged || S::kSortedFill) {
      for (uint32_t i : permutation(n, 0xbed)) S::cancel(t, handles[i]);
    } else {
      std::vector<uint64_t> by_index(handles);
      std::sort(by_index.begin(), by_index.end(), [](uint64_t a, uint64_t b) { return uint32_t(a) > uint32_t(b); });
      for (uint64_t h : by_index) S::cancel(t, h);
    }
  }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// schedule: insert N timers (deadlines uniform over R) into a structure holding none.
template <class S>
void BM_schedule(benchmark::State &st) {
  Bed<S> b(st.range(0));
  Offsets o(b.n);
  for (auto _ : st) {
    o.redraw();
    auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < b.n; i++) S::schedule(b.t, b.now + o.random[i], b.handles[i]);
    st.SetIterationTime(seconds_since(t0));
    benchmark::DoNotOptimize(b.handles.data());
    if (S::pending(b.t) != b.n) return (void)fail(st, "schedule: pending != N");
    // Cancel newest first: the free list returns to the order the next iteration started from.
    for (size_t i = b.n; i-- > 0;) S::cancel(b.t, b.handles[i]);
  }
  st.SetItemsProcessed(st.iterations() * b.n);
}

// cancel: cancel N pending timers in random order.
template <class S>
void BM_cancel(benchmark::State &st) {
  Bed<S> b(st.range(0));
  Offsets o(b.n);
  auto order = permutation(b.n, 0xca9ce1);
  Rng rng(0xca9ce1);
  for (auto _ : st) {
    o.redraw();
    shuffle(order, rng);
    b.settle();  // the last iteration's random cancels shuffled the free list
    if (!fill<S>(b.t, b.now, o, b.handles)) return (void)fail(st, "cancel: setup failed");
    auto t0 = std::chrono::steady_clock::now();
    int bad = 0;
    for (uint32_t i : order) bad |= S::cancel(b.t, b.handles[i]);
    st.SetIterationTime(seconds_since(t0));
    if (bad || S::pending(b.t) != 0) return (void)fail(st, "cancel: a live timer was not cancelled");
  }
  st.SetItemsProcessed(st.iterations() * b.n);
}

// expire: N pending timers; advance kExpireStep ticks at a time until all have fired. Per fired timer.
template <class S>
void BM_expire(benchmark::State &st) {
  Bed<S> b(st.range(0));
  Offsets o(b.n);
  for (auto _ : st) {
    o.redraw();
    b.settle();  // firing in deadline order shuffled the free list
    if (!fill<S>(b.t, b.now, o, b.handles)) return (void)fail(st, "expire: setup failed");
    size_t fired = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (uint64_t step = kExpireStep; step <= kRange; step += kExpireStep) fired += S::advance(b.t, b.now + step);
    st.SetIterationTime(seconds_since(t0));
    b.now += kRange;
    if (fired != b.n || S::pending(b.t) != 0) return (void)fail(st, "expire: not every timer fired");
  }
  st.SetItemsProcessed(st.iterations() * b.n);
}

// churn, the connection-timeout pattern: N live timers; each operation cancels one at random and
// schedules it again at now + R; every kChurnBatch operations time advances one tick and fires what
// is due. An iteration is one batch: items = iterations * kChurnBatch.
template <class S>
void BM_churn(benchmark::State &st) {
  Bed<S> b(st.range(0));
  if (!fill<S>(b.t, b.now, Offsets(b.n), b.handles)) return (void)fail(st, "churn: setup failed");
  Rng rng(0xc4a9);
  for (auto _ : st) {
    for (int k = 0; k < kChurnBatch; k++) {
      auto &h = b.handles[rng.below(b.n)];
      benchmark::DoNotOptimize(S::cancel(b.t, h));  // -ENOENT when that timer has fired meanwhile
      S::schedule(b.t, b.now + kRange, h);
    }
    benchmark::DoNotOptimize(S::advance(b.t, ++b.now));
  }
  st.SetItemsProcessed(st.iterations() * kChurnBatch);
  if (S::pending(b.t) > b.n || S::pending(b.t) < b.n / 2) fail(st, "churn: pending drifted");
}

// idle_advance: one timer pending a year away; advance an hour at a time until it fires. Per step.
template <class S>
void BM_idle_advance(benchmark::State &st) {
  Bed<S> b(1);
  constexpr uint64_t kSteps = kYear / kHour;
  for (auto _ : st) {
    S::schedule(b.t, b.now + kYear, b.handles[0]);
    size_t fired = 0;
    for (uint64_t k = 1; k <= kSteps; k++) fired += S::advance(b.t, b.now + k * kHour);
    b.now += kYear;
    if (fired != 1) return (void)fail(st, "idle_advance: the timer did not fire exactly once");
  }
  st.SetItemsProcessed(st.iterations() * kSteps);
}

// same_tick: N timers all due at one tick (now + R), then the advance that fires them. Per timer,
// both halves; the counters schedule_ns and fire_ns split it.
template <class S>
void BM_same_tick(benchmark::State &st) {
  Bed<S> b(st.range(0));
  double sched_s = 0, fire_s = 0;
  for (auto _ : st) {
    uint64_t due = b.now + kRange;
    auto t0 = std::chrono::steady_clock::now();
    for (auto &h : b.handles) S::schedule(b.t, due, h);
    auto t1 = std::chrono::steady_clock::now();
    size_t fired = S::advance(b.t, due);
    double fire = seconds_since(t1), sched = std::chrono::duration<double>(t1 - t0).count();
    st.SetIterationTime(sched + fire);
    sched_s += sched;
    fire_s += fire;
    b.now = due;
    if (fired != b.n) return (void)fail(st, "same_tick: not every timer fired");
  }
  double per = 1e9 / double(b.n);
  st.counters["schedule_ns"] = benchmark::Counter(sched_s * per, benchmark::Counter::kAvgIterations);
  st.counters["fire_ns"] = benchmark::Counter(fire_s * per, benchmark::Counter::kAvgIterations);
  st.SetItemsProcessed(st.iterations() * b.n);
}

// ---- registration ----

using Fn = void (*)(benchmark::State &);

struct Workload {
  const char *name;
  bool manual_time;  // the batch is timed by the workload itself
  bool over_n;       // false: one size only (N = 1)
  bool headline;     // part of the default run
};

// In summary order: churn first, the workload that matters most. kFns<S> follows the same order.
constexpr Workload kWorkloads[] = {
    {"churn", false, true, true},        {"schedule", true, true, true},
    {"cancel", true, true, true},        {"expire", true, true, true},
    {"same_tick", true, true, false},    {"idle_advance", false, false, true},
};
template <class S>
constexpr Fn kFns[] = {BM_churn<S>, BM_schedule<S>, BM_cancel<S>, BM_expire<S>, BM_same_tick<S>, BM_idle_advance<S>};
static_assert(std::size(kWorkloads) == std::size(kFns<Wheel>));

template <class S>
void register_structure(const Workload &w, Fn fn, const std::vector<int64_t> &grid) {
  std::string name = std::string("BM_") + w.name + "<" + S::kName + ">";
  for (int64_t n : w.over_n ? grid : std::vector<int64_t>{1}) {
    if (std::string(S::kName) == "list" && n > kListMax) continue;
    add(name, {}, {n}, fn, w.manual_time ? unsigned(kManualTime) : 0u);
  }
}

}  // namespace

// The N of each mode: quick, 10^3 and 10^4; headline, 10^3 and 10^6; full, every decade between.
std::vector<int64_t> structure_grid() {
  switch (g_opt.mode) {
    case Mode::quick: return {1000, 10000};
    case Mode::headline: return {1000, 1000000};
    case Mode::full: break;
  }
  return {1000, 10000, 100000, 1000000};
}

void register_structure_benchmarks() {
  const bool full = g_opt.mode == Mode::full;
  auto grid = structure_grid();
  for (size_t i = 0; i < std::size(kWorkloads); i++) {
    const Workload &w = kWorkloads[i];
    if (g_opt.mode == Mode::headline && !w.headline) continue;
    register_structure<Wheel>(w, kFns<Wheel>[i], grid);
    register_structure<Heap>(w, kFns<Heap>[i], grid);
    register_structure<List>(w, kFns<List>[i], grid);
    if (full) {
      register_structure<HeapOtherArity>(w, kFns<HeapOtherArity>[i], grid);
      register_structure<IdHeap>(w, kFns<IdHeap>[i], grid);
    }
  }
}

}  // namespace perf
