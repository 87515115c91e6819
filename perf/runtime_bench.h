// The threaded runtime's workloads for the perf harness (runtime_bench.cc).
#ifndef CHIME_PERF_RUNTIME_BENCH_H
#define CHIME_PERF_RUNTIME_BENCH_H

// Register the runtime's benchmarks; quick: smaller sizes for CI's smoke run.
void register_runtime_benchmarks(bool quick);
// Print the runtime's figures (medians of the repetitions) and targets. Return: workloads that failed.
int print_runtime_summary();

#endif
