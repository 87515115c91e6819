/* SPDX-License-Identifier: MIT */
// chime-perf, chime's perf harness: the wheel against a tuned intrusive heap and a sorted list over a
// grid of N (workloads.cc, memory.cc), the threaded runtime's workloads (runtime_bench.cc), then a
// summary with the ratios and the goals the run measured (summary.cc). docs/perf.md explains it all.
//
// Usage: chime-perf [--quick | --full] [--aged] [google-benchmark flags]
//   (default)  the headline comparison at N = 10^3 and 10^6 and the runtime's headline figures, one
//              repetition each: a minute or two
//   --quick    a smoke run at N = 10^3 and 10^4, short repetitions (CI): well under a minute
//   --full     every workload at N = 10^3 .. 10^6, the other heap arity and the id-checked heap too,
//              the median of 3 repetitions interleaved at random
//   --aged     shuffled free lists for the id-based structures (see workloads.cc, Bed::settle)
// --benchmark_filter=REGEX selects measurements by "BM_<workload><<structure>>/<N>" or
// "BM_runtime_<workload>/<arg>:<value>..." (the harness applies it, to count what it runs);
// --benchmark_repetitions=K overrides the mode's repetitions. The exit status is 1 when a workload's
// own check (timers fired, cancelled, pending) failed, 2 on bad arguments; never because of a timing.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "chime.h"
#include "harness.h"
#include "iheap.h"
#include "summary.h"

namespace perf {

Options g_opt;

namespace {

int g_failures;
std::map<std::string, Figure> g_figures;

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
  return "unknown";
}

void add_context() {
  chime_wheel_config layout{.start = 0, CHIME_LAYOUT_MILLISECONDS};
  std::string slots;
  for (unsigned i = 0; i < layout.levels; i++) slots += (i ? "x" : "") + std::to_string(layout.slots[i]);
  benchmark::AddCustomContext("chime_layout", "CHIME_LAYOUT_MILLISECONDS " + slots);
  benchmark::AddCustomContext("chime_allocator", CHIME_PERF_LIB_ALLOCATOR);
#if defined(CHIME_PERF_JEMALLOC) && CHIME_PERF_JEMALLOC
  benchmark::AddCustomContext("harness_allocator", "jemalloc (serves every malloc in the process)");
#else
  benchmark::AddCustomContext("harness_allocator", "glibc malloc");
#endif
  benchmark::AddCustomContext("chime_buildtype", CHIME_PERF_BUILDTYPE);
  benchmark::AddCustomContext("cpu_model", cpu_model());
  benchmark::AddCustomContext("deadline_range_R", "1048576 ticks");
  benchmark::AddCustomContext("heap", "intrusive, arity " + std::to_string(PERF_IHEAP_ARITY));
  benchmark::AddCustomContext("mode", mode_name());
  benchmark::AddCustomContext("free_list_order", g_opt.aged ? "aged (shuffled)" : "fresh (index order)");
}

}  // namespace

const char *mode_name() {
  switch (g_opt.mode) {
    case Mode::quick: return "quick";
    case Mode::full: return "full";
    case Mode::headline: break;
  }
  return "headline";
}

namespace {

struct Queued {
  std::string name;
  std::vector<std::string> arg_names;
  std::vector<int64_t> args;
  void (*fn)(benchmark::State &);
  unsigned setup;
};
std::vector<Queued> g_queue;

}  // namespace

void add(const std::string &name, const std::vector<std::string> &arg_names, const std::vector<int64_t> &args,
         void (*fn)(benchmark::State &), unsigned setup) {
  std::string instance = name;
  for (size_t i = 0; i < args.size(); i++)
    instance += "/" + (i < arg_names.size() ? arg_names[i] + ":" : std::string()) + std::to_string(args[i]);
  if (!g_opt.filter.empty() && !std::regex_search(instance, std::regex(g_opt.filter))) return;
  g_queue.push_back({name, arg_names, args, fn, setup});
}

int queue_all() {
  std::vector<const Queued *> order;
  for (int r = 0; r < g_opt.repetitions; r++)
    for (const Queued &q : g_queue) order.push_back(&q);
  if (g_opt.mode == Mode::full) std::shuffle(order.begin(), order.end(), std::mt19937(20261122));
  for (const Queued *q : order) {
    auto *b = benchmark::RegisterBenchmark(q->name.c_str(), q->fn);
    if (!q->arg_names.empty()) b->ArgNames(q->arg_names);
    b->Args(q->args);
    if (q->setup & kManualTime) b->UseManualTime();
    if (q->setup & kOnce) b->Iterations(1);
    if (q->setup & kMillis) b->Unit(benchmark::kMillisecond);
  }
  return int(order.size());
}

std::string count_name(int64_t n) {
  int e = 0;
  int64_t head = n;
  for (; head >= 10 && head % 10 == 0; head /= 10) e++;
  return head == 1 && e >= 3 ? "10^" + std::to_string(e) : std::to_string(n);
}

bool fail(benchmark::State &st, const std::string &what) {
  g_failures++;
  st.SkipWithError(what.c_str());
  return false;
}

int failures() { return g_failures; }

void note(benchmark::State &st, const std::string &figure, const std::string &label, double value) {
  Figure &f = g_figures[figure];
  f.label = label;
  f.values.push_back(value);
  st.counters[figure] = value;
}

const std::map<std::string, Figure> &figures() { return g_figures; }

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace perf

int main(int argc, char **argv) {
  using perf::g_opt;
  if (argc > 1 && !std::strcmp(argv[1], "--memory-child")) return perf::memory_child(argc, argv);

  bool quick = false, full = false, reps_given = false;
  std::vector<char *> user;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!std::strcmp(a, "--quick")) {
      quick = true;
    } else if (!std::strcmp(a, "--full")) {
      full = true;
    } else if (!std::strcmp(a, "--aged")) {
      g_opt.aged = true;
    } else if (!std::strncmp(a, "--benchmark_filter=", 19)) {
      g_opt.filter = a + 19;
    } else if (!std::strncmp(a, "--benchmark_repetitions=", 24)) {
      g_opt.repetitions = std::atoi(a + 24);
      reps_given = true;
    } else {
      user.push_back(argv[i]);
    }
  }
  if (quick && full) {
    std::fprintf(stderr, "chime-perf: --quick and --full exclude each other\n");
    return 2;
  }
  g_opt.mode = quick ? perf::Mode::quick : full ? perf::Mode::full : perf::Mode::headline;
  if (!reps_given) g_opt.repetitions = full ? 3 : 1;
  if (g_opt.repetitions < 1) {
    std::fprintf(stderr, "chime-perf: --benchmark_repetitions must be at least 1\n");
    return 2;
  }
  try {
    if (!g_opt.filter.empty()) (void)std::regex(g_opt.filter);
  } catch (const std::regex_error &) {
    std::fprintf(stderr, "chime-perf: --benchmark_filter: not a regular expression: %s\n", g_opt.filter.c_str());
    return 2;
  }

  // The mode's settings go first, so that the same flags given on the command line override them.
  // Repetitions are the harness's own (see queue_all), not google-benchmark's.
  static char quick_time[] = "--benchmark_min_time=0.02", headline_time[] = "--benchmark_min_time=0.1",
              full_time[] = "--benchmark_min_time=0.2";
  std::vector<char *> args{argv[0], quick ? quick_time : full ? full_time : headline_time};
  args.insert(args.end(), user.begin(), user.end());
  int nargs = int(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&nargs, args.data());
  if (benchmark::ReportUnrecognizedArguments(nargs, args.data())) return 2;

  perf::register_structure_benchmarks();
  perf::register_memory_benchmarks();
  perf::register_runtime_benchmarks();
  perf::register_store_benchmarks();
  perf::add_context();
  if (std::strcmp(CHIME_PERF_BUILDTYPE, "release"))
    std::fprintf(stderr, "chime-perf: warning: chime was built as '%s', not 'release'\n", CHIME_PERF_BUILDTYPE);

  perf::Reporter rep(perf::queue_all());
  benchmark::RunSpecifiedBenchmarks(&rep);
  perf::print_summary(rep);
  benchmark::Shutdown();
  if (perf::failures()) std::fprintf(stderr, "chime-perf: %d workload(s) failed their checks\n", perf::failures());
  return perf::failures() ? 1 : 0;
}
