/* SPDX-License-Identifier: MIT */
// What chime-perf prints: a progress line per measurement ("[n/m] ..."), then the summary: one table
// per single-threaded workload (the wheel against the tuned heap and the sorted list), the threaded
// runtime's figures, and the project's goals that this run measured, each met or not. Nothing here
// fails a run: only a workload's own correctness check does.
#include "summary.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "structures.h"

namespace perf {

bool Reporter::ReportContext(const Context &) {
  std::printf("chime-perf: %s run, %d measurement%s", mode_name(), total_, total_ == 1 ? "" : "s");
  if (g_opt.repetitions > 1)
    std::printf(" (%d repetitions of each%s)", g_opt.repetitions, g_opt.mode == Mode::full ? ", in a random order" : "");
  std::printf("; the summary follows them\n");
  std::fflush(stdout);
  return true;
}

void Reporter::ReportRuns(const std::vector<Run> &runs) {
  for (const Run &r : runs) {
    if (r.run_type == Run::RT_Iteration) progress(r);
    take(r);
  }
}

void Reporter::progress(const Run &r) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "[%d/%d] ", ++done_, total_);
  std::string line = buf + r.benchmark_name();
  for (const char *s : {"/iterations:1", "/manual_time", "/repeats:"})
    if (auto at = line.find(s); at != std::string::npos) line.erase(at, std::strlen(s));
  if (r.error_occurred) {
    line += ": FAILED: " + r.error_message;
  } else if (auto c = r.counters.find("bytes_per_timer"); c != r.counters.end()) {
    std::snprintf(buf, sizeof buf, ": %.1f bytes per timer", c->second.value);
    line += buf;
  } else if (r.run_name.function_name.rfind("BM_runtime", 0) == 0 || r.run_name.function_name.rfind("BM_store", 0) == 0) {
    for (const auto &[key, counter] : r.counters) {
      if (!figures().count(key)) continue;  // the histogram's bins and google-benchmark's own
      std::snprintf(buf, sizeof buf, " %s=%.4g", key.c_str(), counter.value);
      line += buf;
    }
  } else if (auto c = r.counters.find("items_per_second"); c != r.counters.end() && c->second.value > 0) {
    std::snprintf(buf, sizeof buf, ": %.2f ns per item", 1e9 / c->second.value);
    line += buf;
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// Keeps each single-threaded result: ns per item, or bytes per timer for memory, one per repetition.
// (The runtime's figures are noted by its workloads themselves.)
void Reporter::take(const Run &r) {
  if (r.error_occurred || r.run_type != Run::RT_Iteration) return;
  // function_name is "BM_<workload><<structure>>", args is "<N>".
  const std::string &f = r.run_name.function_name;
  size_t lt = f.find('<'), gt = f.find('>');
  if (f.rfind("BM_", 0) != 0 || lt == std::string::npos || gt == std::string::npos) return;
  std::string w = f.substr(3, lt - 3), s = f.substr(lt + 1, gt - lt - 1);
  int64_t n = std::atoll(r.run_name.args.c_str());
  if (auto c = r.counters.find("bytes_per_timer"); c != r.counters.end()) {
    value[w][n][s].push_back(c->second.value);
  } else if (auto c = r.counters.find("items_per_second"); c != r.counters.end() && c->second.value > 0) {
    value[w][n][s].push_back(1e9 / c->second.value);  // a rate by now: items / second
  }
}

double Reporter::get(const std::string &w, int64_t n, const std::string &s) const {
  auto a = value.find(w);
  if (a == value.end()) return -1;
  auto b = a->second.find(n);
  if (b == a->second.end()) return -1;
  auto c = b->second.find(s);
  return c == b->second.end() ? -1 : median(c->second);
}

namespace {

// The single-threaded workloads in summary order, with what one item is.
const std::pair<const char *, const char *> kUnits[] = {
    {"churn", "ns per operation (cancel a random timer + schedule it again at now+R; 1-tick advance per 64)"},
    {"schedule", "ns per schedule, deadlines uniform over R"},
    {"cancel", "ns per cancel, random order"},
    {"expire", "ns per fired timer, advancing 1024 ticks at a time"},
    {"same_tick", "ns per timer: N scheduled at one tick, then fired"},
    {"idle_advance", "ns per one-hour advance, one timer a year away"},
    {"memory", "bytes per pending timer: resident memory growth / N in a fresh process"},
};
// Columns in this order, where present.
const char *const kStructures[] = {"wheel", "heap", "list", "heap_2ary", "heap_4ary", "idheap"};
// The runtime's figures in this order (by key prefix), each group in key order.
const char *const kRuntimeOrder[] = {"schedule_", "clock_", "churn_", "burst_", "sleeper_", "idle_", "memory_", "bytes_"};

std::string cell(double v, const char *fmt) {
  if (v < 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

void print_structures(const Reporter &rep) {
  for (const auto &[w, unit] : kUnits) {
    auto it = rep.value.find(w);
    if (it == rep.value.end()) continue;
    bool mem = !std::strcmp(w, "memory");
    std::vector<std::string> cols;
    for (const char *s : kStructures)
      for (const auto &[n, per] : it->second)
        if (per.count(s) && std::find(cols.begin(), cols.end(), s) == cols.end()) cols.push_back(s);
    std::printf("\n%s: %s\n%9s", w, unit, "N");
    for (const auto &c : cols) std::printf(" %10s", c.c_str());
    std::printf(" %11s\n", "wheel/heap");
    for (const auto &[n, per] : it->second) {
      std::printf("%9s", count_name(n).c_str());
      for (const auto &c : cols) std::printf(" %10s", cell(rep.get(w, n, c), mem ? "%.1f" : "%.2f").c_str());
      double wh = rep.get(w, n, "wheel"), hp = rep.get(w, n, "heap");
      std::printf(" %11s\n", wh >= 0 && hp > 0 ? cell(wh / hp, "%.2fx").c_str() : "-");
    }
  }
}

void print_runtime() {
  if (figures().empty()) return;
  std::printf("\nthe threaded runtime (include/chime.h's chime_timer), %s:\n",
              g_opt.repetitions > 1 ? "medians of the repetitions" : "one repetition");
  for (const char *prefix : kRuntimeOrder)
    for (const auto &[key, f] : figures())
      if (key.rfind(prefix, 0) == 0) std::printf("  %-96s %10.3f\n", f.label.c_str(), median(f.values));
}

struct Goal {
  std::string what;
  double got;  // < 0: not measured in this run, not printed
  std::function<bool(double)> met;
};

double figure(const std::string &key) {
  auto it = figures().find(key);
  return it == figures().end() ? -1 : median(it->second.values);
}

void print_goals(const Reporter &rep) {
  auto ratio = [&](const char *w, int64_t n) {
    double wh = rep.get(w, n, "wheel"), hp = rep.get(w, n, "heap");
    return wh >= 0 && hp > 0 ? wh / hp : -1;
  };
  auto at_most = [](double limit) { return [limit](double v) { return v <= limit; }; };
  auto at_least = [](double limit) { return [limit](double v) { return v >= limit; }; };
  const Goal goals[] = {
      {"churn, 10^6 timers: the wheel's time at most 0.5x the heap's", ratio("churn", 1000000), at_most(0.5)},
      {"churn, 10^5 timers: the wheel's time at most 0.4x the heap's", ratio("churn", 100000), at_most(0.4)},
      {"expire, 10^6 timers: the wheel's time per fired timer at most 0.5x the heap's", ratio("expire", 1000000), at_most(0.5)},
      {"schedule, 10^6 timers: the wheel no slower than the heap", ratio("schedule", 1000000), at_most(1.0)},
      {"cancel, 10^6 timers: the wheel's time at most 0.5x the heap's", ratio("cancel", 1000000), at_most(0.5)},
      {"memory, 10^6 timers: the wheel at most 48 bytes per timer", rep.get("memory", 1000000, "wheel"), at_most(48)},
      {"memory, 10^3 timers: the wheel at most 64 bytes per timer", rep.get("memory", 1000, "wheel"), at_most(64)},
      {"an idle one-hour advance under 1 us (ns)", rep.get("idle_advance", 1, "wheel"), at_most(1000)},
      {"runtime: schedule with the clock read, 1 producer, at least 25 M/s", figure("schedule_1p_producer"), at_least(25)},
      {"runtime: schedule with the clock read, 2 producers, at least 17 M/s in total", figure("schedule_2p_producer"), at_least(17)},
      {"runtime: churn at 10^6 pending, at least 10 M operations/s applied", figure("churn_1000000_applied"), at_least(10)},
      {"runtime: burst, 1 ms tick: p99 lateness at most one tick + 0.2 ms (us)", figure("burst_tick1000us_bg0_p99_us"), at_most(1200)},
      {"runtime: burst, 100 us tick: p99 lateness below 0.5 ms (us)", figure("burst_tick100us_bg0_p99_us"),
       [](double v) { return v < 500; }},
      {"runtime: at most 64 bytes per pending timer at 10^6", figure("bytes_1000000"), at_most(64)},
      {"runtime: idle with 10^6 pending, under 1 ms of CPU per second", figure("idle_1000000_cpu_ms_per_s"),
       [](double v) { return v < 1; }},
      {"runtime: after a burst of 10^6, resident memory back within 16 MB", figure("memory_1000000_after_burst_MB"), at_most(16)},
      {"runtime: after a burst of 10^7, resident memory back within 16 MB", figure("memory_10000000_after_burst_MB"), at_most(16)},
  };
  bool any = false;
  for (const Goal &g : goals) {
    if (g.got < 0) continue;
    if (!any) std::printf("\ngoals measured in this run (information only, never a failure):\n");
    any = true;
    std::printf("  %-80s %10.2f  %s\n", g.what.c_str(), g.got, g.met(g.got) ? "met" : "not met");
  }
}

}  // namespace

void print_summary(const Reporter &rep) {
  std::printf("\n=== summary: %s run, %s ===\n", mode_name(),
              g_opt.repetitions > 1 ? "medians of the repetitions" : "one repetition");
  std::printf("wheel/heap is the wheel's cost over the heap's: below 1x the wheel is cheaper.\n");
  if (rep.value.count("churn") && !rep.value.at("churn").empty() && rep.value.at("churn").rbegin()->first > kListMax)
    std::printf("The sorted list runs up to N = 10^5 (one schedule is O(N)): '-' beyond.\n");
  print_structures(rep);
  print_runtime();
  print_goals(rep);
  print_store_summary();
}

}  // namespace perf
