/* SPDX-License-Identifier: MIT */
// What the files of chime-perf share: the run's options, registration through the run's filter (so
// the progress line knows how many measurements there are), the figures the summary prints, and the
// random numbers every workload draws from. docs/perf.md describes the harness.
#ifndef CHIME_PERF_HARNESS_H
#define CHIME_PERF_HARNESS_H

#include <benchmark/benchmark.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace perf {

// ---- the run ----

// quick: CI's smoke run (small N, one short repetition). headline: the default, the comparison a
// newcomer wants in a minute or two. full: every workload at every N, median of 3 (--full).
enum class Mode { quick, headline, full };

struct Options {
  Mode mode = Mode::headline;
  bool aged = false;      // --aged: shuffled free lists (see Bed::settle)
  std::string filter;     // --benchmark_filter, applied by the harness itself (see add())
  int repetitions = 1;    // --benchmark_repetitions, or the mode's default
};
extern Options g_opt;

const char *mode_name();

// How a measurement runs: timed by the workload itself (UseManualTime), one iteration (a workload
// that times a whole scenario), reported in milliseconds.
enum Setup : unsigned { kManualTime = 1, kOnce = 2, kMillis = 4 };

// Queue fn as the measurement "name/arg/..." (google-benchmark's naming; an empty argument name
// gives "name/value") if the run's filter selects it. queue_all() registers every queued one
// `repetitions` times: each repetition is its own benchmark, reported (and counted by the progress
// line) as soon as it ends; a full run registers them in a random but fixed order, so that a burst
// of load on a shared machine spreads over every structure instead of falling on one. The summary and
// plot.sh take the median of the repetitions. Return of queue_all: the measurements registered.
void add(const std::string &name, const std::vector<std::string> &arg_names, const std::vector<int64_t> &args,
         void (*fn)(benchmark::State &), unsigned setup = 0);
int queue_all();
// n as people write it: "10^6" for a power of ten from 1000 up, digits otherwise.
std::string count_name(int64_t n);

// A workload's own correctness check failed: skip the benchmark with `what` and make chime-perf exit
// with status 1. Return: false.
bool fail(benchmark::State &st, const std::string &what);
int failures();

// ---- figures for the summary ----

// A figure of the threaded runtime's workloads, one value per repetition, with what it is (label) in
// the summary, which prints the median. Also set as a counter of the run, so that it reaches the
// JSON output and the plots.
void note(benchmark::State &st, const std::string &figure, const std::string &label, double value);
struct Figure {
  std::string label;
  std::vector<double> values;
};
const std::map<std::string, Figure> &figures();
double median(std::vector<double> v);  // -1 when empty

// ---- the registrations of each part ----

void register_structure_benchmarks();  // workloads.cc
void register_memory_benchmarks();     // memory.cc
void register_runtime_benchmarks();    // runtime_bench.cc
void register_store_benchmarks();      // store_bench.cc
void register_store_baselines();       // store_baselines.cc: raw append, the runtime's lateness
void print_store_summary();            // store_bench.cc: the store's figures and goals
std::vector<int64_t> structure_grid(); // workloads.cc: the N of the run's mode

// ---- memory (memory.cc) ----

// Resident anonymous memory of this process, after the allocator has returned its free pages.
size_t anon_resident_bytes();
// Run `chime-perf --memory-child what n` and return the bytes per pending timer it measured; on
// failure, -1 and *error says why.
double measure_in_child(const std::string &what, int64_t n, std::string *error);
// The child's side: main() hands it argv when argv[1] is --memory-child. Return: exit status.
int memory_child(int argc, char **argv);
// The threaded runtime's child (runtime_bench.cc): n timers pending in a chime_timer.
int runtime_memory_child(size_t n);

// ---- random numbers ----

// xorshift64*: a few cycles per draw, identical streams for every structure.
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

}  // namespace perf

#endif  // CHIME_PERF_HARNESS_H
