#!/usr/bin/env bash
# timeline.sh: does `report timeline` find what happened, and only that?
#
# A day of a busy 4-CPU server is synthesized through the analyzer's chunk
# writer (tests/src/bin/hs_synthday.rs: web workers and a database that
# follow the time of day, daemons, a cron job every 5 minutes, a backup with
# I/O waits every 15 minutes, an hourly build of short-lived compilers,
# kswapd and compaction bursts), with an incident injected every 20 minutes
# from the second hour: CPU saturation by a service, a new process taking
# the CPU, memory pressure, page-cache thrash, I/O stalls, a NUMA
# balancing storm, recorder losses; strengths 1, 1/2 and 1/4 of a gross one,
# 60-180 s long. `hindsight index`, then `report timeline -f json` at each
# --interval and --sensitivity, scored by bench/timeline-score.py:
#   found   an incident starts within one interval of the injection
#   named   ... and its first contributor is the injected process
#   typed   ... and its first kind is the injected kind
#   false   incidents that overlap no injection, per hour after the first
#           WARMUP hours (the trailing history the baselines need); those
#           in the warm-up are counted apart
# Wall time and peak RSS of each timeline come from /usr/bin/time.
#
# Usage, from the repository (no root needed):
#   bench/timeline.sh                     # 26 h (a day of history for the last 2 h), seed 1
#   HOURS=8 SEED=2 bench/timeline.sh
#   NO_BUILD=1 INTERVALS="10s" SENSITIVITIES="1" bench/timeline.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
hours=${HOURS:-26}
seed=${SEED:-1}
warmup=${WARMUP:-3}
intervals=${INTERVALS:-10s 1m}
sensitivities=${SENSITIVITIES:-0.5 1 2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ -z "${NO_BUILD:-}" ]; then
  cargo build --release --quiet -p hindsight --bin hindsight -p hindsight-e2e --bin hs-synthday
fi
bin=$repo/target/release
"$bin/hs-synthday" "$work/rec" "$hours" "$seed" > "$work/truth.json"
"$bin/hindsight" index "$work/rec" >&2

echo "| --interval | --sensitivity | strength 1 found/named/typed | 1/2 | 1/4 | false per hour (after ${warmup} h) | false in warm-up | wall s | RSS MiB |"
echo "|---|---|---|---|---|---|---|---|---|"
for interval in $intervals; do
  case $interval in *s) seconds=${interval%s} ;; *m) seconds=$((${interval%m} * 60)) ;; esac
  for sensitivity in $sensitivities; do
    /usr/bin/time -f "%e %M" -o "$work/time" "$bin/hindsight" report timeline "$work/rec" \
      -i "$interval" --sensitivity "$sensitivity" -f json > "$work/incidents.json"
    read -r wall rss_kb < "$work/time"
    python3 "$repo/bench/timeline-score.py" "$work/truth.json" "$work/incidents.json" \
      "$seconds" "$hours" "$warmup" > "$work/score.json"
    python3 - "$work/score.json" "$interval" "$sensitivity" "$wall" "$rss_kb" <<'EOF'
import json, sys
score = json.load(open(sys.argv[1]))
interval, sensitivity, wall, rss_kb = sys.argv[2:6]
cells = []
for strength in ("1.0", "0.5", "0.25"):
    r = score["by_strength"].get(strength)
    cells.append(f"{r['found']}/{r['named']}/{r['typed']} of {r['injected']}" if r else "-")
print(f"| {interval} | {sensitivity} | " + " | ".join(cells)
      + f" | {score['false_per_hour']} | {score['false_in_warmup']} | {wall} | {int(rss_kb) // 1024} |")
EOF
    if [ -n "${VERBOSE:-}" ]; then
      python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d["by_kind"])); [print(" false:", e) for e in d["false_examples"]]' "$work/score.json" >&2
    fi
  done
done
