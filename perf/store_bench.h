// The durable store's workloads for the perf harness (store_bench.cc).
#ifndef CHIME_PERF_STORE_BENCH_H
#define CHIME_PERF_STORE_BENCH_H

// Register the store's benchmarks; quick: smaller sizes for CI's smoke run.
void register_store_benchmarks(bool quick);
// Print the store's figures (medians of the repetitions) and targets. Return: workloads that failed.
int print_store_summary();

#endif
