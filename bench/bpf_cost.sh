#!/usr/bin/env bash
# bpf_cost.sh: what the recorder's BPF programs cost per run, by the
# kernel's own count (kernel.bpf_stats_enabled: run_time_ns and run_cnt of
# every program, read from the recorder's /proc/PID/fdinfo).
#
# For each recorder binary given, in interleaved rounds: record `--events
# sched` while `perf bench sched pipe -l LOOPS` (pinned to CPU 0) switches
# as fast as it can, then read each loaded program's runs and nanoseconds.
# Prints, per binary and program (by its verified instruction count, which
# tells them apart), the median ns per run over the rounds, in Markdown.
#
#   bench/bpf_cost.sh [-l LOOPS] [-r ROUNDS] RECORDER...
#   bench/bpf_cost.sh /tmp/hindsight-record.before target/release/hindsight-record
#
# Run as root. bpf_stats is switched on for the run and back off after.
set -euo pipefail

loops=300000
rounds=5
while (($#)); do
  case "$1" in
    -l) loops="$2"; shift 2 ;;
    -r) rounds="$2"; shift 2 ;;
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
    rm -rf "$work/rec"
    "$recorder" --output "$work/rec" --events sched 2>"$work/log" &
    pid=$!
    for _ in $(seq 100); do grep -q recording "$work/log" && break; sleep 0.1; done
    taskset -c 0 perf bench sched pipe -l "$loops" >/dev/null
    programs "$pid" | while read -r insns runs ns; do
      ((runs > 0)) && echo "$recorder $insns $runs $ns"
    done >>"$work/results"
    kill -INT "$pid"
    wait "$pid" || true
    echo "round $round: $recorder" >&2
  done
done

echo "| recorder | program (verified insns) | runs per round (median) | ns per run (median) |"
echo "|---|---:|---:|---:|"
python3 - "$work/results" <<'EOF'
import statistics, sys
from collections import defaultdict
runs = defaultdict(list)
for line in open(sys.argv[1]):
    recorder, insns, count, ns = line.split()
    runs[(recorder, int(insns))].append((int(count), int(ns)))
for (recorder, insns), rows in sorted(runs.items()):
    counts = statistics.median(c for c, _ in rows)
    per_run = statistics.median(ns / c for c, ns in rows)
    print(f"| {recorder} | {insns} | {counts:,.0f} | {per_run:.1f} |")
EOF
