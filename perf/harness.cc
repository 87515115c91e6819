// chime's perf harness (issue 4): the wheel against a binary min-heap and a sorted list, workload by
// workload, over one grid of N; then a summary table with the ratios and the issue's targets.
//
// Every workload is one template run on three structures (BM_churn<wheel>, BM_churn<heap>, ...). Each
// structure is called directly, one out-of-line call per operation: the wheel through the shared
// library (as users call it), the baselines through their static archive; no function table.
// Per-iteration setup is never timed: batch workloads time their batch with a steady clock
// (UseManualTime), so the untimed setup around it costs wall time only.
//
// Usage: chime-perf [--quick] [--aged] [google-benchmark flags]. docs/perf.md explains the output.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include <unistd.h>

#include "chime.h"
#include "heap.h"
#include "list.h"
#include "runtime_bench.h"
#include "store_bench.h"

#if defined(CHIME_PERF_JEMALLOC) && CHIME_PERF_JEMALLOC
#include <jemalloc/jemalloc.h>
#else
#include <malloc.h>
#endif

namespace {

// ---- the parameters every workload shares ----

constexpr uint64_t kRange = uint64_t{1} << 20;      // R: deadlines are uniform over (now, now + R]
constexpr uint64_t kStart = uint64_t{1} << 40;      // the structures' start time, in ms ticks
constexpr int kChurnBatch = 64;                     // churn: operations per one-tick advance
constexpr uint64_t kExpireStep = 1024;              // expire: ticks per advance (~1 s in ms ticks)
constexpr uint64_t kHour = 3600 * 1000;             // idle_advance: the step, in ms ticks
constexpr uint64_t kYear = 365 * 24 * kHour;        // idle_advance: where its one timer waits
constexpr int64_t kFullGrid[] = {1000, 10000, 100000, 1000000};
constexpr int64_t kListMax = 100000;                // the list's O(n) schedule takes seconds past this

int g_failures;         // workloads whose fired or pending counts were wrong: exit status 1
uint64_t g_fired;       // what every callback does: count, so a firing cannot be optimised away

void on_fire(void *) { g_fired++; }

// xorshift64*: a few cycles per draw, identical streams for the three structures.
class Rng {
 public:
  explicit Rng(uint64_t seed) : x_(seed | 1) {}
  uint64_t next() {
    x_ ^= x_ >> 12;
    x_ ^= x_ << 25;
    x_ ^= x_ >> 27;
    return x_ * UINT64_C(2685821657736338717);
  }
  // Uniform in [0, n) for n <= 2^32 (Lemire's multiply-shift, no division).
  uint64_t below(uint64_t n) { return ((next() >> 32) * n) >> 32; }

 private:
  uint64_t x_;
};

// ---- the structures, behind one static interface ----

struct Wheel {
  using T = chime_wheel;
  static constexpr const char *kName = "wheel";
  static constexpr bool kSortedFill = false;
  static T *create(uint64_t start) {
    chime_wheel_config cfg{};  // levels 0: CHIME_LAYOUT_MILLISECONDS
    cfg.start = start;
    chime_wheel *w = nullptr;
    return chime_wheel_new(&w, &cfg) ? nullptr : w;
  }
  static void destroy(T *t) { chime_wheel_free(t, nullptr); }
  static int schedule(T *t, uint64_t d, uint64_t *h) { return chime_wheel_schedule(t, d, on_fire, nullptr, h); }
  static int cancel(T *t, uint64_t h) { return chime_wheel_cancel(t, h); }
  static size_t advance(T *t, uint64_t now) { return chime_wheel_advance(t, now); }
  static size_t pending(const T *t) { return chime_wheel_pending(t); }
};

struct Heap {
  using T = perf_heap;
  static constexpr const char *kName = "heap";
  static constexpr bool kSortedFill = false;
  static T *create(uint64_t start) { return perf_heap_new(start, 0); }
  static void destroy(T *t) { perf_heap_free(t); }
  static int schedule(T *t, uint64_t d, uint64_t *h) { return perf_heap_schedule(t, d, on_fire, nullptr, h); }
  static int cancel(T *t, uint64_t h) { return perf_heap_cancel(t, h); }
  static size_t advance(T *t, uint64_t now) { return perf_heap_advance(t, now); }
  static size_t pending(const T *t) { return perf_heap_pending(t); }
};

struct List {
  using T = perf_list;
  static constexpr const char *kName = "list";
  // Setting up N random timers would walk O(N^2) links: set up in deadline order (O(1) each), into
  // slots whose order Bed::settle() has shuffled, which builds the list random order would build in a
  // fresh structure: list order and memory order a random permutation of each other.
  static constexpr bool kSortedFill = true;  // (and Bed::settle() always shuffles for the list)
  static T *create(uint64_t start) { return perf_list_new(start, 0); }
  static void destroy(T *t) { perf_list_free(t); }
  static int schedule(T *t, uint64_t d, uint64_t *h) { return perf_list_schedule(t, d, on_fire, nullptr, h); }
  static int cancel(T *t, uint64_t h) { return perf_list_cancel(t, h); }
  static size_t advance(T *t, uint64_t now) { return perf_list_advance(t, now); }
  static size_t pending(const T *t) { return perf_list_pending(t); }
};

// N deadline offsets uniform over [1, R], and the same sorted. Each batch draws new ones (untimed):
// replaying one sequence lets the branch predictor learn it, which at N = 10^3 made the heap's
// comparisons look three times cheaper than they are. Same seeds, so the same draws, per structure.
struct Offsets {
  std::vector<uint64_t> random, sorted;
  Rng rng;
  explicit Offsets(size_t n) : random(n), rng(0x5eed0000 + n) { redraw(); }
  void redraw() {
    for (auto &o : random) o = 1 + rng.below(kRange);
    sorted = random;
    std::sort(sorted.begin(), sorted.end());
  }
};

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

// Schedule one timer per offset at now + offset; handles[i] gets the i-th one's handle.
template <class S>
bool fill(typename S::T *t, uint64_t now, const Offsets &o, std::vector<uint64_t> &handles) {
  const auto &off = S::kSortedFill ? o.sorted : o.random;
  bool ok = true;
  for (size_t i = 0; i < off.size(); i++) ok &= S::schedule(t, now + off[i], &handles[i]) == 0;
  return ok;
}

// How a structure's free slots are ordered before a batch: fresh (index order, as a new structure
// hands them out: the default, and what published timer benchmarks measure) or aged (shuffled, as
// after a while of random cancels: --aged). The list is always set up aged; see List::kSortedFill.
bool g_aged;

// A structure at kStart that has already held n timers, so its arrays or pool are grown and their
// pages touched before anything is timed.
template <class S>
struct Bed {
  typename S::T *t;
  uint64_t now = kStart;
  size_t n;
  std::vector<uint64_t> handles;

  explicit Bed(size_t n_) : t(S::create(kStart)), n(n_), handles(n_) {
    if (!t) {
      std::fprintf(stderr, "chime-perf: %s: out of memory\n", S::kName);
      std::exit(2);
    }
    settle();
  }
  ~Bed() { S::destroy(t); }
  Bed(const Bed &) = delete;
  Bed &operator=(const Bed &) = delete;

  // Take all n slots and give them back so that the free list is in the mode's order: fresh gives
  // the highest index back first (the low 32 bits of every structure's handle are the slot or node
  // index), aged in random order. Untimed; O(n log n).
  void settle() {
    for (auto &h : handles) S::schedule(t, now + kRange, &h);  // one deadline: O(1) even for the list
    if (g_aged || S::kSortedFill) {
      for (uint32_t i : permutation(n, 0xbed)) S::cancel(t, handles[i]);
    } else {
      std::vector<uint64_t> by_index(handles);
      std::sort(by_index.begin(), by_index.end(), [](uint64_t a, uint64_t b) { return uint32_t(a) > uint32_t(b); });
      for (uint64_t h : by_index) S::cancel(t, h);
    }
  }
};

void fail(benchmark::State &st, const char *what) {
  g_failures++;
  st.SkipWithError(what);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- the workloads ----

// schedule: insert N timers (deadlines uniform over R) into a structure holding none.
template <class S>
void BM_schedule(benchmark::State &st) {
  Bed<S> b(st.range(0));
  Offsets o(b.n);
  for (auto _ : st) {
    o.redraw();
    auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < b.n; i++) S::schedule(b.t, b.now + o.random[i], &b.handles[i]);
    st.SetIterationTime(seconds_since(t0));
    benchmark::DoNotOptimize(b.handles.data());
    if (S::pending(b.t) != b.n) return fail(st, "schedule: pending != N");
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
    if (!fill<S>(b.t, b.now, o, b.handles)) return fail(st, "cancel: setup failed");
    auto t0 = std::chrono::steady_clock::now();
    int bad = 0;
    for (uint32_t i : order) bad |= S::cancel(b.t, b.handles[i]);
    st.SetIterationTime(seconds_since(t0));
    if (bad || S::pending(b.t) != 0) return fail(st, "cancel: a live timer was not cancelled");
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
    if (!fill<S>(b.t, b.now, o, b.handles)) return fail(st, "expire: setup failed");
    size_t fired = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (uint64_t step = kExpireStep; step <= kRange; step += kExpireStep) fired += S::advance(b.t, b.now + step);
    st.SetIterationTime(seconds_since(t0));
    b.now += kRange;
    if (fired != b.n || S::pending(b.t) != 0) return fail(st, "expire: not every timer fired");
  }
  st.SetItemsProcessed(st.iterations() * b.n);
}

// churn, the connection-timeout pattern: N live timers; each operation cancels one at random and
// schedules it again at now + R; every kChurnBatch operations time advances one tick and fires what
// is due. An iteration is one batch: items = iterations * kChurnBatch.
template <class S>
void BM_churn(benchmark::State &st) {
  Bed<S> b(st.range(0));
  if (!fill<S>(b.t, b.now, Offsets(b.n), b.handles)) return fail(st, "churn: setup failed");
  Rng rng(0xc4a9);
  for (auto _ : st) {
    for (int k = 0; k < kChurnBatch; k++) {
      uint64_t &h = b.handles[rng.below(b.n)];
      benchmark::DoNotOptimize(S::cancel(b.t, h));  // -ENOENT when that timer has fired meanwhile
      S::schedule(b.t, b.now + kRange, &h);
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
    S::schedule(b.t, b.now + kYear, &b.handles[0]);
    size_t fired = 0;
    for (uint64_t k = 1; k <= kSteps; k++) fired += S::advance(b.t, b.now + k * kHour);
    b.now += kYear;
    if (fired != 1) return fail(st, "idle_advance: the timer did not fire exactly once");
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
    for (auto &h : b.handles) S::schedule(b.t, due, &h);
    auto t1 = std::chrono::steady_clock::now();
    size_t fired = S::advance(b.t, due);
    double fire = seconds_since(t1), sched = std::chrono::duration<double>(t1 - t0).count();
    st.SetIterationTime(sched + fire);
    sched_s += sched;
    fire_s += fire;
    b.now = due;
    if (fired != b.n) return fail(st, "same_tick: not every timer fired");
  }
  double per = 1e9 / double(b.n);
  st.counters["schedule_ns"] = benchmark::Counter(sched_s * per, benchmark::Counter::kAvgIterations);
  st.counters["fire_ns"] = benchmark::Counter(fire_s * per, benchmark::Counter::kAvgIterations);
  st.SetItemsProcessed(st.iterations() * b.n);
}

// The bytes the allocator has handed out and not had back.
size_t allocated_bytes() {
#if defined(CHIME_PERF_JEMALLOC) && CHIME_PERF_JEMALLOC
  mallctl("thread.tcache.flush", nullptr, nullptr, nullptr, 0);  // cached small blocks count as used
  uint64_t epoch = 1;
  size_t len = sizeof(epoch);
  mallctl("epoch", &epoch, &len, &epoch, len);  // refresh the statistics
  size_t allocated = 0;
  len = sizeof(allocated);
  mallctl("stats.allocated", &allocated, &len, nullptr, 0);
  return allocated;
#else
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
#endif
}

// memory: bytes per pending timer of a structure created empty and given N timers, by the
// allocator's own statistics (the structure's fixed part included: it matters at small N).
template <class S>
void BM_memory(benchmark::State &st) {
  size_t n = st.range(0);
  Offsets o(n);
  std::vector<uint64_t> handles(n);
  for (auto _ : st) {
    size_t before = allocated_bytes();
    auto *t = S::create(kStart);
    bool ok = t && fill<S>(t, kStart, o, handles);
    size_t after = allocated_bytes();
    if (t) S::destroy(t);
    if (!ok) return fail(st, "memory: setup failed");
    st.counters["bytes_per_timer"] = double(after - before) / double(n);
  }
}

// ---- registration ----

using Fn = void (*)(benchmark::State &);

struct Workload {
  const char *name;
  Fn wheel, heap, list;
  bool manual_time;  // the batch is timed by the workload itself
  bool over_n;       // false: one size only (N = 1)
  const char *unit;  // what "per op" means in the summary
};

#define WORKLOAD(w, manual, over_n, unit) \
  Workload { #w, BM_##w<Wheel>, BM_##w<Heap>, BM_##w<List>, manual, over_n, unit }

// In summary order: churn first, the workload that matters most.
const Workload kWorkloads[] = {
    WORKLOAD(churn, false, true, "ns per operation (cancel + schedule at now+R; 1-tick advance per 64)"),
    WORKLOAD(schedule, true, true, "ns per schedule, deadlines uniform over R"),
    WORKLOAD(cancel, true, true, "ns per cancel, random order"),
    WORKLOAD(expire, true, true, "ns per fired timer, advancing 1024 ticks at a time"),
    WORKLOAD(same_tick, true, true, "ns per timer: N scheduled at one tick, then fired"),
    WORKLOAD(idle_advance, false, false, "ns per one-hour advance, one timer a year away"),
    WORKLOAD(memory, false, true, "bytes per pending timer (allocator statistics)"),
};

void register_all(const std::vector<int64_t> &grid, bool quick) {
  for (const Workload &w : kWorkloads) {
    const std::pair<const char *, Fn> per[] = {{"wheel", w.wheel}, {"heap", w.heap}, {"list", w.list}};
    for (auto [sname, fn] : per) {
      std::string name = std::string("BM_") + w.name + "<" + sname + ">";
      auto *b = benchmark::RegisterBenchmark(name.c_str(), fn);
      if (!w.over_n) {
        b->Arg(1);
      } else {
        for (int64_t n : grid)
          if (std::strcmp(sname, "list") || n <= kListMax) b->Arg(n);
      }
      if (w.manual_time) b->UseManualTime();
      if (!std::strcmp(w.name, "memory")) b->Iterations(1);
    }
  }
  register_runtime_benchmarks(quick);
  register_store_benchmarks(quick);
}

// ---- the summary ----

// Captures each result as the console reporter prints it: ns/op (or bytes/timer for memory), the
// median across repetitions when there are repetitions.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  // A reporter passed in does not see --benchmark_color: colour exactly when stdout is a terminal.
  SummaryReporter() : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_Defaults : OO_Tabular) {}

  void ReportRuns(const std::vector<Run> &runs) override {
    for (const Run &r : runs) take(r);
    ConsoleReporter::ReportRuns(runs);
  }

  // value[workload][n][structure]
  std::map<std::string, std::map<int64_t, std::map<std::string, double>>> value;

  double get(const std::string &w, int64_t n, const std::string &s) const {
    auto a = value.find(w);
    if (a == value.end()) return -1;
    auto b = a->second.find(n);
    if (b == a->second.end()) return -1;
    auto c = b->second.find(s);
    return c == b->second.end() ? -1 : c->second;
  }

 private:
  void take(const Run &r) {
    if (r.error_occurred) return;
    bool repeated = r.repetitions > 1;
    if (repeated ? !(r.run_type == Run::RT_Aggregate && r.aggregate_name == "median")
                 : r.run_type != Run::RT_Iteration)
      return;
    // function_name is "BM_<workload><<structure>>", args is "<N>".
    const std::string &f = r.run_name.function_name;
    size_t lt = f.find('<'), gt = f.find('>');
    if (f.rfind("BM_", 0) != 0 || lt == std::string::npos || gt == std::string::npos) return;
    std::string w = f.substr(3, lt - 3), s = f.substr(lt + 1, gt - lt - 1);
    int64_t n = std::atoll(r.run_name.args.c_str());
    double v = -1;
    if (w == "memory") {
      auto c = r.counters.find("bytes_per_timer");
      if (c != r.counters.end()) v = c->second.value;
    } else {
      auto c = r.counters.find("items_per_second");  // a rate by now: items / second
      if (c != r.counters.end() && c->second.value > 0) v = 1e9 / c->second.value;
    }
    if (v >= 0) value[w][n][s] = v;
  }
};

std::string cell(double v, const char *fmt) {
  if (v < 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

void print_summary(const SummaryReporter &rep) {
  std::printf("\n=== summary: the same run, %s ===\n",
              "median of the repetitions when repeated; ratios > 1 mean the wheel is cheaper");
  for (const Workload &w : kWorkloads) {
    auto it = rep.value.find(w.name);
    if (it == rep.value.end()) continue;
    bool mem = !std::strcmp(w.name, "memory");
    std::printf("\n%s: %s\n", w.name, w.unit);
    std::printf("%9s %10s %10s %10s %11s %11s\n", "N", "wheel", "heap", "list", "heap/wheel", "list/wheel");
    for (const auto &[n, per] : it->second) {
      (void)per;
      double wh = rep.get(w.name, n, "wheel"), hp = rep.get(w.name, n, "heap"), ls = rep.get(w.name, n, "list");
      const char *fmt = mem ? "%.1f" : "%.2f";
      std::printf("%9lld %10s %10s %10s %11s %11s\n", (long long)n, cell(wh, fmt).c_str(),
                  cell(hp, fmt).c_str(), cell(ls, fmt).c_str(),
                  wh > 0 && hp >= 0 ? cell(hp / wh, "%.2fx").c_str() : "-",
                  wh > 0 && ls >= 0 ? cell(ls / wh, "%.2fx").c_str() : "-");
    }
  }

  // The targets of issue 4, as information: nothing here fails the run.
  struct Target {
    const char *what;
    double got;
    bool hit;
  };
  auto ratio = [&](const char *w, int64_t n) {
    double wh = rep.get(w, n, "wheel"), hp = rep.get(w, n, "heap");
    return wh > 0 && hp >= 0 ? hp / wh : -1;
  };
  double churn6 = ratio("churn", 1000000), churn5 = ratio("churn", 100000);
  double sched = rep.get("schedule", 1000000, "wheel"), canc = rep.get("cancel", 1000000, "wheel");
  double expire = ratio("expire", 1000000), idle = rep.get("idle_advance", 1, "wheel");
  double bytes = rep.get("memory", 1000000, "wheel");
  const Target targets[] = {
      {"churn heap/wheel at 1e6 >= 2.0x", churn6, churn6 >= 2.0},
      {"churn heap/wheel at 1e5 >= 2.5x", churn5, churn5 >= 2.5},
      {"schedule at 1e6 < 10 ns", sched, sched < 10},
      {"cancel at 1e6 < 25 ns", canc, canc < 25},
      {"expire heap/wheel at 1e6 >= 1.0x", expire, expire >= 1.0},
      {"idle_advance < 1000 ns per step", idle, idle < 1000},
      {"memory at 1e6 <= 48 bytes per timer", bytes, bytes <= 48},
  };
  std::printf("\ntargets (issue 4; information only, never a failure):\n");
  for (const Target &t : targets)
    std::printf("  %-38s %10s  %s\n", t.what, cell(t.got, "%.2f").c_str(),
                t.got < 0 ? "n/a (not measured in this run)" : t.hit ? "hit" : "MISS");
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos)
      return line.substr(line.find(':') + 2);
  return "unknown";
}

}  // namespace

int main(int argc, char **argv) {
  // --quick: N = 10^3 and 10^4 only, one short repetition each: CI's smoke run, a few seconds.
  // --aged: shuffled free lists (see g_aged).
  bool quick = false;
  std::vector<char *> user;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--quick"))
      quick = true;
    else if (!std::strcmp(argv[i], "--aged"))
      g_aged = true;
    else
      user.push_back(argv[i]);
  }
  // The defaults go first, so that the same flags given on the command line override them. A full
  // run takes the median of three repetitions, interleaved at random so that a burst of load on a
  // shared machine spreads over all structures instead of falling on one (about 5 minutes here, and
  // 5 more for the threaded runtime, whose workloads run one iteration per repetition).
  static char full_reps[] = "--benchmark_repetitions=3", full_time[] = "--benchmark_min_time=0.2",
              full_interleave[] = "--benchmark_enable_random_interleaving=true",
              full_aggregates[] = "--benchmark_display_aggregates_only=true",
              quick_time[] = "--benchmark_min_time=0.02";
  std::vector<char *> args{argv[0]};
  if (quick)
    args.push_back(quick_time);
  else
    args.insert(args.end(), {full_reps, full_time, full_interleave, full_aggregates});
  args.insert(args.end(), user.begin(), user.end());
  int nargs = int(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&nargs, args.data());
  if (benchmark::ReportUnrecognizedArguments(nargs, args.data())) return 2;

  std::vector<int64_t> grid(std::begin(kFullGrid), std::end(kFullGrid));
  if (quick) grid.resize(2);
  register_all(grid, quick);

  chime_wheel_config layout{.start = 0, CHIME_LAYOUT_MILLISECONDS};
  std::string slots;
  for (unsigned i = 0; i < layout.levels; i++) {
    if (i) slots += 'x';
    slots += std::to_string(layout.slots[i]);
  }
  benchmark::AddCustomContext("chime_layout", "CHIME_LAYOUT_MILLISECONDS " + slots);
  benchmark::AddCustomContext("chime_allocator", CHIME_PERF_LIB_ALLOCATOR);
#if defined(CHIME_PERF_JEMALLOC) && CHIME_PERF_JEMALLOC
  benchmark::AddCustomContext("harness_allocator", "jemalloc (serves every malloc; memory from stats.allocated)");
#else
  benchmark::AddCustomContext("harness_allocator", "glibc malloc (memory from mallinfo2)");
#endif
  benchmark::AddCustomContext("chime_buildtype", CHIME_PERF_BUILDTYPE);
  benchmark::AddCustomContext("cpu_model", cpu_model());
  benchmark::AddCustomContext("deadline_range_R", std::to_string(kRange) + " ticks");
  benchmark::AddCustomContext("mode", quick ? "quick" : "full");
  benchmark::AddCustomContext("free_list_order", g_aged ? "aged (shuffled)" : "fresh (index order)");
  if (std::strcmp(CHIME_PERF_BUILDTYPE, "release"))
    std::fprintf(stderr, "chime-perf: warning: chime was built as '%s', not 'release'\n", CHIME_PERF_BUILDTYPE);

  SummaryReporter rep;
  benchmark::RunSpecifiedBenchmarks(&rep);
  print_summary(rep);
  g_failures += print_runtime_summary();
  g_failures += print_store_summary();
  benchmark::Shutdown();
  if (g_failures) std::fprintf(stderr, "chime-perf: %d workload(s) failed their checks\n", g_failures);
  return g_failures ? 1 : 0;
}
