/* SPDX-License-Identifier: MIT */
// chime-perf's output: the progress line of each measurement and the summary at the end (summary.cc).
#ifndef CHIME_PERF_SUMMARY_H
#define CHIME_PERF_SUMMARY_H

#include <benchmark/benchmark.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "harness.h"

namespace perf {

// Prints "[n/m] name: value" as each measurement ends (n of the m registered ones, repetitions
// included) and keeps the single-threaded results for the summary. google-benchmark's JSON output
// (--benchmark_out) is written alongside by the library, with every counter, one entry per repetition.
class Reporter : public benchmark::BenchmarkReporter {
 public:
  explicit Reporter(int total) : total_(total) {}
  bool ReportContext(const Context &context) override;
  void ReportRuns(const std::vector<Run> &runs) override;

  // value[workload][N][structure]: ns per item, or bytes per timer for memory, one per repetition.
  std::map<std::string, std::map<int64_t, std::map<std::string, std::vector<double>>>> value;
  double get(const std::string &w, int64_t n, const std::string &s) const;  // the median; -1 if absent

 private:
  void progress(const Run &r);
  void take(const Run &r);
  int total_, done_ = 0;
};

void print_summary(const Reporter &rep);

}  // namespace perf

#endif  // CHIME_PERF_SUMMARY_H
