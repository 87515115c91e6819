#!/bin/sh
# SPDX-License-Identifier: MIT
# Plot a chime-perf JSON file (--benchmark_out) as SVG charts with gnuplot, reading the JSON with jq:
#   - one chart per single-threaded workload: cost per operation against N on log-log axes, one line
#     per structure (memory: bytes per timer on a linear axis; idle_advance, one N: bars);
#   - the threaded runtime: schedule throughput by number of producers (runtime_schedule.svg) and the
#     lateness histogram of a burst at each tick (runtime_lateness.svg).
# Every chart says on which machine (CPU model), at which commit and when (UTC) it was measured, as
# far as the JSON knows (perf/run.sh records the commit and the date). With repetitions, the medians
# are plotted. The x axis spans the N the run measured, no more.
#
# Usage: perf/plot.sh RESULTS.json [OUTDIR]   (OUTDIR defaults to the JSON file's directory)
set -eu

json=${1:?usage: perf/plot.sh RESULTS.json [OUTDIR]}
out=${2:-$(dirname "$json")}
for tool in gnuplot jq; do
  command -v $tool >/dev/null 2>&1 || { echo "plot.sh: $tool not found (apt-get install gnuplot-nox jq)" >&2; exit 1; }
done
mkdir -p "$out"

# The footer of every chart.
footer=$(jq -r '.context | "machine: \(.cpu_model // "unknown CPU") (\(.num_cpus) CPUs) | commit \(.commit // "unknown")"
  + " | \(.utc_date // .date) | \(.mode // "?") run"' "$json")

# One result per measurement: each repetition is its own entry with the same run_name (chime-perf
# repeats by registering again), so every numeric field becomes its median across them; failed
# runs are dropped.
results='def median: sort | .[(length - 1) / 2 | floor];
  [.benchmarks[] | select(.error_occurred != true and .run_type == "iteration")] | group_by(.run_name)
  | map(. as $runs | reduce ($runs[0] | keys_unsorted[]) as $k ($runs[0];
      if (.[$k] | type) == "number" then .[$k] = ([$runs[][$k]] | median) else . end))'

# Single-threaded results, one line each: workload structure N value (ns per item, or bytes).
table=$(jq -r "$results"' | .[]
  | (.run_name | capture("^BM_(?<w>[a-z_]+)<(?<s>[a-z_0-9]+)>/(?<n>[0-9]+)")) as $m
  | select($m != null)
  | (if .bytes_per_timer then .bytes_per_timer
     elif (.items_per_second // 0) > 0 then 1e9 / .items_per_second else empty end) as $v
  | "\($m.w) \($m.s) \($m.n) \($v)"' "$json")

# gnuplot settings shared by every chart: size, font, the footer under the plot.
preamble() { # $1: output file, $2: title, $3: y label
  cat <<EOF
set terminal svg size 760,500 noenhanced font 'sans,12' background rgb 'white'
set output '$1'
set title "$2"
set ylabel '$3'
set grid
set datafile missing 'NaN'
set bmargin 6
set label 99 "$footer" at screen 0.01, screen 0.02 font 'sans,9' textcolor rgb '#555555'
EOF
}

colour() {
  case $1 in
    wheel) echo '#1f77b4' ;; heap) echo '#d62728' ;; list) echo '#7f7f7f' ;;
    heap_2ary|heap_4ary) echo '#ff9896' ;; idheap) echo '#9467bd' ;; *) echo '#2ca02c' ;;
  esac
}

workloads=$(printf '%s\n' "$table" | awk 'NF { print $1 }' | sort -u)
for w in $workloads; do
  # Structures in a fixed order, those present only; columns of the .dat in that order.
  structures=$(for s in wheel heap list heap_2ary heap_4ary idheap; do
    printf '%s\n' "$table" | awk -v w="$w" -v s="$s" '$1 == w && $2 == s { print s; exit }'; done)
  dat="$out/$w.dat"
  printf '%s\n' "$table" | awk -v w="$w" -v cols="$structures" '
    BEGIN { ncol = split(cols, c, /[ \n]+/) }
    $1 == w { v[$3 "," $2] = $4; ns[$3] = 1 }
    END {
      printf "# N"; for (i = 1; i <= ncol; i++) printf " %s", c[i]; print ""
      for (n in ns) {
        printf "%s", n
        for (i = 1; i <= ncol; i++) printf " %s", ((n "," c[i]) in v) ? v[n "," c[i]] : "NaN"
        print ""
      }
    }' | sort -n > "$dat"

  case $w in
    churn)        title="churn: cancel one at random, schedule it again at now+R; 1-tick advance per 64"; unit="ns per operation" ;;
    schedule)     title="schedule: insert N timers, deadlines uniform over R = 2^20"; unit="ns per schedule" ;;
    cancel)       title="cancel: N pending timers, random order"; unit="ns per cancel" ;;
    expire)       title="expire: N timers, advance 1024 ticks at a time until all fired"; unit="ns per fired timer" ;;
    same_tick)    title="same_tick: N timers due at one tick, scheduled then fired"; unit="ns per timer" ;;
    idle_advance) title="idle_advance: one timer a year away, advance an hour per step"; unit="ns per step" ;;
    memory)       title="memory: resident memory growth / N, in a fresh process"; unit="bytes per pending timer" ;;
    *)            title=$w; unit="ns per item" ;;
  esac

  if [ "$w" = idle_advance ]; then
    i=0; xtics=""; plot=""
    for s in $structures; do
      xtics="$xtics${xtics:+, }'$s' $i"
      plot="$plot${plot:+, }'$dat' using ($i):$((i + 2)) with boxes lc rgb '$(colour "$s")'"
      i=$((i + 1))
    done
    body="set style fill solid 0.6 border -1; set boxwidth 0.5; set yrange [0:*]; set xrange [-0.6:$((i - 1)).6]
set xtics ($xtics); unset key
plot $plot"
  else
    # The x axis spans the measured N (a factor 1.6 either side); ticks at the measured N only.
    range=$(awk '!/^#/ { if (min == "" || $1 < min) min = $1; if ($1 > max) max = $1 }
      END { printf "%g:%g", min / 1.6, max * 1.6 }' "$dat")
    xtics=$(awk '!/^#/ { n = $1; l = n >= 1e6 ? n / 1e6 "M" : n >= 1e3 ? n / 1e3 "k" : n
      printf "%s'\''%s'\'' %s", (c++ ? ", " : ""), l, n }' "$dat")
    if [ "$w" = memory ]; then scale="set logscale x; set yrange [0:*]"; else scale="set logscale xy; set format y '%g'"; fi
    i=2; plot=""
    for s in $structures; do
      # The other arity's heap dashed: in memory it lies exactly on the heap's line.
      case $s in heap_2ary|heap_4ary) dash="dt 2" ;; *) dash="" ;; esac
      plot="$plot${plot:+, }'$dat' using 1:$i with linespoints lw 2 $dash pt 7 ps 1 lc rgb '$(colour "$s")' title '$s'"
      i=$((i + 1))
    done
    # The legend sits outside the plot, below it, so it can never cover a data point.
    body="$scale
set xrange [$range]; set xtics ($xtics)
set xlabel 'N (live timers)'; set key outside top center horizontal
plot $plot"
  fi

  { preamble "$out/$w.svg" "$title" "$unit"; printf '%s\n' "$body"; } | gnuplot
  echo "plot.sh: $out/$w.svg"
done

# ---- the threaded runtime ----

# Schedule throughput (producer side, M/s) by producers: with the clock read (schedule) and without.
sched=$(jq -r "$results"' | .[] | select(.run_name | startswith("BM_runtime_schedule/"))
  | (.run_name | capture("producers:(?<p>[0-9]+)/at:(?<a>[0-9]+)")) as $m
  | (to_entries[] | select(.key | endswith("_producer")) | .value) as $v
  | "\($m.p) \($m.a) \($v)"' "$json")
if [ -n "$sched" ]; then
  dat="$out/runtime_schedule.dat"
  printf '%s\n' "$sched" | awk '
    { v[$1 "," $2] = $3; p[$1] = 1 }
    END {
      print "# producers schedule schedule_at (M schedules/s, producer side)"
      for (k in p) printf "%s %s %s\n", k, ((k ",0") in v) ? v[k ",0"] : "NaN", ((k ",1") in v) ? v[k ",1"] : "NaN"
    }' | sort -n > "$dat"
  { preamble "$out/runtime_schedule.svg" "runtime: schedules per second by producer threads (all producers together)" "M schedules per second"
    cat <<EOF
set style data histograms; set style histogram clustered gap 1; set style fill solid 0.7 border -1
set yrange [0:*]; set xlabel 'producer threads'; set key outside top center horizontal
plot '$dat' using 2:xtic(1) lc rgb '#1f77b4' title 'chime_timer_schedule (reads the clock)', \
     '' using 3 lc rgb '#aec7e8' title 'chime_timer_schedule_at (no clock read)'
EOF
  } | gnuplot
  echo "plot.sh: $out/runtime_schedule.svg"
fi

# The lateness histogram of the burst, one series per tick (runs with no background timers).
late=$(jq -r "$results"' | .[] | select(.run_name | test("^BM_runtime_burst/tick_us:[0-9]+/pending:0"))
  | (.run_name | capture("tick_us:(?<t>[0-9]+)")) as $m
  | to_entries[] | select(.key | startswith("late_"))
  | "\($m.t) \(.key) \(.value)"' "$json")
if [ -n "$late" ]; then
  dat="$out/runtime_lateness.dat"
  ticks=$(printf '%s\n' "$late" | awk '{ print $1 }' | sort -rn | uniq | tr '\n' ' ')
  # Rows: the bins in order of their bound; columns: one per tick, percent of timers (0 as NaN: log axis).
  printf '# bin_us' > "$dat"; for tk in $ticks; do printf ' tick_%sus' "$tk" >> "$dat"; done; echo >> "$dat"
  # Rows: the bins in order of their bound, labelled as ranges; columns: one per tick, percent of
  # timers (0 as NaN: the axis is logarithmic).
  printf '%s\n' "$late" | awk -v ticks="$ticks" '
    BEGIN { nt = split(ticks, t, " ") }
    {
      b = $2; sub(/^late_/, "", b); bound = b; sub(/^(lt|ge)_/, "", bound); sub(/us$/, "", bound)
      key[b] = bound + (b ~ /^ge_/ ? 0.5 : 0); ge[b] = b ~ /^ge_/; bnd[b] = bound; v[b "," $1] = $3
    }
    END {
      for (b in key) {
        printf "%s %s %s", key[b], ge[b], bnd[b]
        for (i = 1; i <= nt; i++) { x = v[b "," t[i]]; printf " %s", (x > 0) ? x : "NaN" }
        print ""
      }
    }' | sort -g | awk 'function k(x) { return x >= 1000 ? x / 1000 "k" : x }
      { label = $2 ? k($3) "+" : k(prev + 0) "-" k($3); prev = $3; $1 = $2 = $3 = ""
        sub(/^ +/, ""); print label, $0 }' >> "$dat"
  i=2; plot=""
  for tk in $ticks; do
    if [ $((tk % 1000)) -eq 0 ]; then name="$((tk / 1000)) ms tick"; else name="$tk us tick"; fi
    if [ $i -eq 2 ]; then use="2:xtic(1)"; c='#1f77b4'; else use=$i; c='#ff7f0e'; fi
    plot="$plot${plot:+, }'$dat' using $use lc rgb '$c' title '$name'"
    i=$((i + 1))
  done
  { preamble "$out/runtime_lateness.svg" "runtime: lateness of a burst of 100k timers due over 1-500 ms" "% of timers (log scale)"
    cat <<EOF
set style data histograms; set style histogram clustered gap 1; set style fill solid 0.7 border -1
set logscale y; set yrange [0.001:100]; set format y '%g'
set xlabel 'lateness (us): from the deadline to the callback starting'
set key outside top center horizontal
plot $plot
EOF
  } | gnuplot
  echo "plot.sh: $out/runtime_lateness.svg"
fi
