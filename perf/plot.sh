#!/bin/sh
# Plot a chime-perf JSON file (--benchmark_out) as SVG charts with gnuplot: for each workload, cost
# per operation against N on log-log axes, one line per structure (wheel, heap, list). idle_advance
# has one N, so it is drawn as three bars; memory as bytes per timer on a linear axis. The threaded
# runtime's workloads have no structure to compare and are left to the summary.
# Only POSIX sh, awk and gnuplot. With repetitions, the medians are plotted.
#
# Usage: perf/plot.sh RESULTS.json [OUTDIR]   (OUTDIR defaults to the JSON file's directory)
set -eu

json=${1:?usage: perf/plot.sh RESULTS.json [OUTDIR]}
out=${2:-$(dirname "$json")}
command -v gnuplot >/dev/null 2>&1 || { echo "plot.sh: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
mkdir -p "$out"

# One line per result: workload structure N value, where value is ns per item (1e9 / items_per_second)
# or, for memory, bytes_per_timer. google-benchmark's JSON has one key per line, which awk can read.
table=$(awk '
  function flush() {
    if (run != "") {
      v = (bytes != "") ? bytes : (ips > 0 ? 1e9 / ips : "")
      if (v != "") {
        if (type == "aggregate" && agg == "median") med[run] = v
        else if (type == "iteration") it[run] = v
      }
    }
    run = type = agg = bytes = ""; ips = 0
  }
  /^  "benchmarks"/ { inb = 1 }
  !inb { next }
  /^    {/ { flush() }
  /"run_name":/       { run = $0;  sub(/.*"run_name": "/, "", run);  sub(/".*/, "", run) }
  /"run_type":/       { type = $0; sub(/.*"run_type": "/, "", type); sub(/".*/, "", type) }
  /"aggregate_name":/ { agg = $0;  sub(/.*"aggregate_name": "/, "", agg); sub(/".*/, "", agg) }
  /"items_per_second":/ { ips = $0;  sub(/.*: /, "", ips);  sub(/,$/, "", ips); ips += 0 }
  /"bytes_per_timer":/  { bytes = $0; sub(/.*: /, "", bytes); sub(/,$/, "", bytes); bytes += 0 }
  END {
    flush()
    for (k in it) if (!(k in med)) med[k] = it[k]
    for (k in med) {
      # BM_<workload><<structure>>/<N>[/manual_time][/iterations:1]. The workloads of the runtime
      # (BM_runtime_*, no structure) are reported in the summary, not plotted.
      if (k !~ /</) continue
      name = k; sub(/^BM_/, "", name)
      w = name; sub(/<.*/, "", w)
      s = name; sub(/^[^<]*</, "", s); sub(/>.*/, "", s)
      n = name; sub(/^[^>]*>\//, "", n); sub(/\/.*/, "", n)
      printf "%s %s %s %.6g\n", w, s, n, med[k]
    }
  }' "$json")

# Nothing to plot is not an error when the run held only the runtime's workloads (a filter).
[ -n "$table" ] || { echo "plot.sh: no wheel, heap or list results in $json: no charts"; exit 0; }

for w in $(printf '%s\n' "$table" | awk '{ print $1 }' | sort -u); do
  dat="$out/$w.dat"
  # Columns: N wheel heap list (NaN where a structure has no result at that N).
  printf '%s\n' "$table" | awk -v w="$w" '
    $1 == w { v[$3 "," $2] = $4; ns[$3] = 1 }
    END {
      print "# N wheel heap list"
      for (n in ns) printf "%s %s %s %s\n", n, get(n, "wheel"), get(n, "heap"), get(n, "list")
    }
    function get(n, s) { return ((n "," s) in v) ? v[n "," s] : "NaN" }' | sort -n > "$dat"

  case $w in
    churn)        title="churn: cancel one at random, schedule it again at now+R; 1-tick advance per 64"; unit="ns per operation" ;;
    schedule)     title="schedule: insert N timers, deadlines uniform over R = 2^20"; unit="ns per schedule" ;;
    cancel)       title="cancel: N pending timers, random order"; unit="ns per cancel" ;;
    expire)       title="expire: N timers, advance 1024 ticks at a time until all fired"; unit="ns per fired timer" ;;
    same_tick)    title="same_tick: N timers due at one tick, scheduled then fired"; unit="ns per timer" ;;
    idle_advance) title="idle_advance: one timer a year away, advance an hour per step"; unit="ns per step" ;;
    memory)       title="memory: bytes per pending timer (allocator statistics)"; unit="bytes per timer" ;;
    *)            title=$w; unit="ns per item" ;;
  esac

  if [ "$w" = idle_advance ]; then
    plot="set style fill solid 0.6 border -1; set boxwidth 0.5; set yrange [0:*]; set xrange [-0.6:2.6]
set xtics ('wheel' 0, 'heap' 1, 'list' 2); unset key
plot '$dat' using (0):2 with boxes lc rgb '#1f77b4', '' using (1):3 with boxes lc rgb '#d62728', \
     '' using (2):4 with boxes lc rgb '#7f7f7f'"
  else
    if [ "$w" = memory ]; then scale="set logscale x; set yrange [0:*]"; else scale="set logscale xy; set format y '%g'"; fi
    plot="$scale
set xrange [600:1.6e6]; set xtics ('1k' 1e3, '10k' 1e4, '100k' 1e5, '1M' 1e6)
set xlabel 'N (live timers)'; set key top left
plot '$dat' using 1:2 with linespoints lw 2 pt 7 ps 1 lc rgb '#1f77b4' title 'wheel', \
     '' using 1:3 with linespoints lw 2 pt 5 ps 1 lc rgb '#d62728' title 'heap', \
     '' using 1:4 with linespoints lw 2 pt 9 ps 1 lc rgb '#7f7f7f' title 'list'"
  fi

  gnuplot <<EOF
set terminal svg size 720,460 noenhanced font 'sans,12' background rgb 'white'
set output '$out/$w.svg'
set title "$title"
set ylabel '$unit'
set grid
set datafile missing 'NaN'
$plot
EOF
  echo "plot.sh: $out/$w.svg"
done
