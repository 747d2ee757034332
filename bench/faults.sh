#!/usr/bin/env bash
# faults.sh: what recording page faults costs, hindsight-record vs perf record.
#
# Workload: `hs-load fault-storm SECONDS MIB` pinned to one CPU: it writes
# every page of a MIB mapping in a random order, drops them, and again, for
# SECONDS: one minor fault per page, by the million, and prints how many.
#
# Configurations, interleaved in every round so a noisy neighbour hits all
# alike; the summary takes medians over the rounds:
#   bare       nothing recording;
#   hs         `hindsight-record --events faults` (every fault);
#   hs-10      `hindsight-record --events faults --fault-sample 10`;
#   perf       `perf record -e exceptions:page_fault_user -a`.
# Per configuration: faults per second of the workload, the time each fault
# gained against bare (1/rate - 1/rate_bare, in µs), events recorded, and
# bytes on disk per recorded fault (hindsight: page_fault/*.parquet over its
# rows; perf: perf.data over the samples).
#
# Run as root (after `cargo build --release`):
#   bench/faults.sh                 # 5 rounds of 5 s, 64 MiB, CPU 0
#   bench/faults.sh -r 3 -d 3
# The summary (Markdown) goes to stdout, one raw line per run to stderr.
set -euo pipefail

ROUNDS=5
SECONDS_PER_RUN=5
MIB=64
while (($#)); do
    case $1 in
    -r | --rounds) ROUNDS=$2; shift 2 ;;
    -d | --duration) SECONDS_PER_RUN=$2; shift 2 ;;
    -m | --mib) MIB=$2; shift 2 ;;
    *) echo "faults.sh: unknown flag $1" >&2; exit 2 ;;
    esac
done

REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$REPO/target/release}
WORK=$(mktemp -d /tmp/faults_bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
for b in hindsight-record hindsight hs-load; do
    [[ -x $BIN/$b ]] || { echo "faults.sh: $BIN/$b missing: cargo build --release" >&2; exit 1; }
    cp "$BIN/$b" "$WORK/"
done
command -v perf >/dev/null || { echo "faults.sh: perf missing: apt-get install linux-perf" >&2; exit 1; }

storm() { taskset -c 0 "$WORK/hs-load" fault-storm "$SECONDS_PER_RUN" "$MIB" | sed 's/.*"faults":\([0-9]*\).*/\1/'; }

run() { # config round -> "faults events bytes"
    local config=$1 dir=$WORK/$1-$2 faults events bytes pid
    case $config in
    bare)
        faults=$(storm); events=0; bytes=0 ;;
    hs | hs-10)
        local sample=1
        [[ $config == hs-10 ]] && sample=10
        "$WORK/hindsight-record" --output "$dir" --events faults --fault-sample "$sample" 2>/dev/null &
        pid=$!
        sleep 1.5
        faults=$(storm)
        sleep 0.5
        kill -INT "$pid"; wait "$pid" || true
        events=$("$WORK/hindsight" sql "$dir" 'SELECT count(*) AS n FROM page_fault' --format csv | tail -1)
        bytes=$(cat "$dir"/page_fault/*.parquet | wc -c) ;;
    perf)
        perf record -q -e exceptions:page_fault_user -a -o "$dir.data" 2>/dev/null &
        pid=$!
        sleep 1.5
        faults=$(storm)
        sleep 0.5
        kill -INT "$pid"; wait "$pid" || true
        events=$(perf report -i "$dir.data" --stats 2>/dev/null | awk '/SAMPLE events/ {print $3; exit}')
        bytes=$(wc -c < "$dir.data") ;;
    esac
    rm -rf "$dir" "$dir.data"
    echo "$faults ${events:-0} $bytes"
}

configs=(bare hs hs-10 perf)
declare -A results
for round in $(seq 1 "$ROUNDS"); do
    for config in "${configs[@]}"; do
        line=$(run "$config" "$round")
        echo "round $round $config: faults events bytes = $line" >&2
        results[$config]+="$line"$'\n'
    done
done

median() { sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
bare_rate=$(printf '%s' "${results[bare]}" | awk -v s="$SECONDS_PER_RUN" 'NF {print $1/s}' | median)
echo "Kernel $(uname -r), $(nproc) CPUs, $ROUNDS interleaved rounds of ${SECONDS_PER_RUN} s, ${MIB} MiB, medians; load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
echo
echo "| config | faults/s | added µs per fault | events recorded | bytes per recorded fault |"
echo "|---|---:|---:|---:|---:|"
for config in "${configs[@]}"; do
    rate=$(printf '%s' "${results[$config]}" | awk -v s="$SECONDS_PER_RUN" 'NF {print $1/s}' | median)
    events=$(printf '%s' "${results[$config]}" | awk 'NF {print $2}' | median)
    per=$(printf '%s' "${results[$config]}" | awk 'NF && $2 > 0 {print $3/$2}' | median)
    awk -v c="$config" -v r="$rate" -v b="$bare_rate" -v e="$events" -v p="${per:-0}" 'BEGIN {
        printf "| %s | %.0f | %.2f | %.0f | %s |\n", c, r, (1e6/r - 1e6/b), e, (e > 0 ? sprintf("%.1f", p) : "-")
    }'
done
