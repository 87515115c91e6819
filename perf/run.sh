#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# chime's perf run: build chime in release mode with its harness, run chime-perf, keep the console
# output and the JSON, print the summary, draw the SVG charts.
#
# Usage: perf/run.sh [--quick | --full] [--out DIR] [chime-perf flags...]     (flags in any order)
#   (default)  the headline: wheel, tuned heap and sorted list at N = 10^3 and 10^6, and the threaded
#              runtime's headline figures, one repetition each (about 30 s here, after the build)
#   --quick    the smoke run CI uses: N = 10^3 and 10^4, short repetitions (about 10 s)
#   --full     every workload at N = 10^3 to 10^6, plus the heap of the other arity and the heap with
#              generation-checked ids, the median of 3 repetitions (about 10 minutes here)
#   --out DIR  where results go (default perf-results/): console.txt, summary.txt, perf.json, and a
#              .dat and an .svg per chart. The previous run's files there are removed first, so a
#              run never leaves new results beside stale ones.
#   any other flag goes to chime-perf: --aged, --benchmark_filter=REGEX, --benchmark_repetitions=K
# Environment: CHIME_PERF_BUILDDIR, the build directory (default build: the README's second command
# then runs the tests in it); CHIME_PERF_QUICK=1 adds --quick (CI runs the README's command so).
# Exit status: chime-perf's (1 when a workload's own correctness check failed), else 0.
# Needs meson, ninja, a C and a C++ compiler, google-benchmark, gnuplot and jq; jemalloc is optional.
set -euo pipefail

cd "$(dirname "$0")/.."
out=perf-results
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=${2:?perf/run.sh: --out needs a directory}; shift 2 ;;
    --out=*) out=${1#--out=}; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
build=${CHIME_PERF_BUILDDIR:-build}
if [ "${CHIME_PERF_QUICK:-0}" = 1 ]; then
  args=(--quick "${args[@]}")
fi

# Release build, perf harness required; an existing build directory is switched to those settings.
if [ -f "$build/build.ninja" ]; then
  meson configure "$build" -Dbuildtype=release -Dperf=enabled
else
  meson setup "$build" --buildtype=release -Dperf=enabled
fi
ninja -C "$build"

# What the charts print under each plot: the commit measured and when (the CPU model is in the JSON).
# Read before the old results are removed: when they are tracked (docs/perf), removing them would
# make every run look like one of uncommitted code.
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ "$commit" != unknown ] && ! git diff --quiet HEAD 2>/dev/null; then commit="$commit-dirty"; fi
mkdir -p "$out"
rm -f "$out"/console.txt "$out"/summary.txt "$out"/perf.json "$out"/*.dat "$out"/*.svg
# The console output is the progress display: line-buffered through tee, so it shows as it runs.
status=0
stdbuf -oL "$build/perf/chime-perf" --benchmark_out="$out/perf.json" --benchmark_out_format=json \
  --benchmark_context="commit=$commit,utc_date=$(date -u '+%Y-%m-%d %H:%M UTC')" \
  ${args[@]+"${args[@]}"} 2>&1 | tee "$out/console.txt" || status=$?
sed -n '/^=== summary/,$p' "$out/console.txt" >"$out/summary.txt"

if [ -f "$out/perf.json" ]; then
  perf/plot.sh "$out/perf.json" "$out"
fi
echo "perf/run.sh: results in $out/ (summary.txt, console.txt, perf.json, *.svg)"
exit "$status"
