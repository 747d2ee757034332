#!/usr/bin/env bash
# bpf_cost.sh: what the recorder's BPF programs cost per run, by the
# kernel's own count (kernel.bpf_stats_enabled: run_time_ns and run_cnt of
# every program, read from the recorder's /proc/PID/fdinfo).
#
# For each recorder binary given, in interleaved rounds: record `--events
# sched` while N copies of `perf bench sched pipe -l LOOPS`, copy i pinned to
# CPU i, switch as fast as they can, then read each loaded program's runs and
# nanoseconds. Prints, per binary, number of producers and program (by its
# verified instruction count, which tells them apart), the median ns per run
# over the rounds, each producer's switches per second (two per op) and the
# events the recorder lost, in Markdown.
#
# With -p 1,2 (producers: one CPU, then two at once) it is the ring-contention
# benchmark of issue 17: a ring's reservation takes a spinlock and moves a
# producer position every writer shares, so what a run costs as CPUs are added
# is what sharing a ring costs (with the caches' and the recorder's own share
# of the CPUs). A recorder with a ring per CPU should cost the same at 1 and 2.
#
#   bench/bpf_cost.sh [-l LOOPS] [-r ROUNDS] [-p PRODUCERS,...] RECORDER...
#   bench/bpf_cost.sh /tmp/hindsight-record.before target/release/hindsight-record
#   bench/bpf_cost.sh -p 1,2 target/release/hindsight-record
#
# Run as root. bpf_stats is switched on for the run and back off after.
set -euo pipefail

loops=300000
rounds=5
producers=1
while (($#)); do
  case "$1" in
    -l) loops="$2"; shift 2 ;;
    -r) rounds="$2"; shift 2 ;;
    -p) producers="$2"; shift 2 ;;
    *) break ;;
  esac
done
(($#)) || { sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
command -v perf >/dev/null || { echo "bpf_cost.sh: needs perf (apt-get install linux-perf)" >&2; exit 2; }

was="$(sysctl -n kernel.bpf_stats_enabled)"
work="$(mktemp -d)"
trap 'sysctl -qw kernel.bpf_stats_enabled="$was"; rm -rf "$work"' EXIT
sysctl -qw kernel.bpf_stats_enabled=1

# One line per program of recorder PID: insns runs ns.
programs() {
  local fd info
  for fd in /proc/"$1"/fd/*; do
    [[ "$(readlink "$fd")" == "anon_inode:bpf-prog" ]] || continue
    info="/proc/$1/fdinfo/${fd##*/}"
    awk '/^verified_insns:/ {i=$2} /^run_cnt:/ {c=$2} /^run_time_ns:/ {t=$2}
         END {print i, c, t}' "$info"
  done
}

for ((round = 1; round <= rounds; round++)); do
  for recorder in "$@"; do
    for n in ${producers//,/ }; do
      ((n <= $(nproc))) || { echo "bpf_cost.sh: $n producers, $(nproc) CPUs" >&2; exit 2; }
      rm -rf "$work/rec" "$work"/pipe.*
      "$recorder" --output "$work/rec" --events sched 2>"$work/log" &
      pid=$!
      for _ in $(seq 100); do grep -q "^hindsight-record: recording " "$work/log" && break; sleep 0.1; done
      pipes=()
      for ((cpu = 0; cpu < n; cpu++)); do
        taskset -c "$cpu" perf bench sched pipe -l "$loops" >"$work/pipe.$cpu" &
        pipes+=($!)
      done
      wait "${pipes[@]}"
      # Each producer's switches per second: two per op.
      rate=$(awk '/usecs\/op/ { s += 2e6 / $1; k++ } END { printf "%.0f", s / k }' "$work"/pipe.*)
      stats=$(programs "$pid")
      kill -INT "$pid"
      wait "$pid" || true
      lost=$(grep -oE '[0-9]+ events lost' "$work/log" | awk '{ print $1 }' || true)
      while read -r insns runs ns; do
        ((runs > 0)) && echo "$recorder $n $insns $runs $ns $rate ${lost:-0}"
      done <<<"$stats" >>"$work/results"
      echo "round $round: $recorder, $n producers: $rate switches/s each, ${lost:-0} lost" >&2
    done
  done
done

echo "| recorder | producers | program (verified insns) | runs per round (median) | ns per run (median) | switches/s per producer (median) | events lost (median) |"
echo "|---|---:|---:|---:|---:|---:|---:|"
python3 - "$work/results" <<'EOF'
import statistics, sys
from collections import defaultdict
runs = defaultdict(list)
for line in open(sys.argv[1]):
    recorder, producers, insns, count, ns, rate, lost = line.split()
    runs[(recorder, int(producers), int(insns))].append((int(count), int(ns), int(rate), int(lost)))
for (recorder, producers, insns), rows in sorted(runs.items()):
    counts = statistics.median(r[0] for r in rows)
    per_run = statistics.median(r[1] / r[0] for r in rows)
    rate = statistics.median(r[2] for r in rows)
    lost = statistics.median(r[3] for r in rows)
    print(f"| {recorder} | {producers} | {insns} | {counts:,.0f} | {per_run:.1f} | {rate:,.0f} | {lost:,.0f} |")
EOF
