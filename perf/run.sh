#!/usr/bin/env bash
# The full perf run: build chime in release mode with the harness, run every workload at N = 10^3 to
# 10^6, keep the console output and the JSON, print the summary, draw the SVG charts.
#
# Usage: perf/run.sh [--out DIR] [chime-perf flags...]
#   --out DIR   where results go (default: perf-results/); writes console.txt, summary.txt,
#               perf.json, and one .dat and .svg per workload
#   flags       passed to chime-perf, e.g. --quick, --aged, --benchmark_filter=churn,
#               --benchmark_repetitions=1 (the default is the median of 3: about 5 minutes for the
#               wheel and its baselines, 5 more for the threaded runtime)
# Environment: CHIME_PERF_BUILDDIR, the build directory (default build: the README's second command
# then runs the tests in it); CHIME_PERF_QUICK=1 adds --quick (CI runs the README's command so).
# Needs meson, ninja, a C and a C++ compiler, google-benchmark, gnuplot; jemalloc is optional.
set -euo pipefail

cd "$(dirname "$0")/.."
out=perf-results
if [ "${1:-}" = --out ]; then
  out=${2:?perf/run.sh: --out needs a directory}
  shift 2
fi
build=${CHIME_PERF_BUILDDIR:-build}
if [ "${CHIME_PERF_QUICK:-0}" = 1 ]; then
  set -- --quick "$@"
fi

# Release build, perf harness required; an existing build directory is switched to those settings.
if [ -f "$build/build.ninja" ]; then
  meson configure "$build" -Dbuildtype=release -Dperf=enabled
else
  meson setup "$build" --buildtype=release -Dperf=enabled
fi
ninja -C "$build"

mkdir -p "$out"
# The console output is the progress display: line-buffered through tee, so it shows as it runs
# (chime-perf colours only a terminal, so console.txt is plain text).
stdbuf -oL "$build/perf/chime-perf" --benchmark_out="$out/perf.json" --benchmark_out_format=json \
  "$@" 2>&1 | tee "$out/console.txt"
sed -n '/^=== summary/,$p' "$out/console.txt" >"$out/summary.txt"

perf/plot.sh "$out/perf.json" "$out"
echo "perf/run.sh: results in $out/ (summary.txt, perf.json, *.svg)"
