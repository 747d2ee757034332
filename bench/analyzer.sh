#!/usr/bin/env bash
# analyzer.sh: how long hindsight takes to answer over a big recording, and
# in how much memory, beside DuckDB answering the same questions over the
# same files in the same run.
#
# Questions (each a hindsight command and DuckDB's equivalent SQL):
#   index        `hindsight index` (pairing once; DuckDB has no equivalent)
#   runqlat      `report runqlat --interval 10s --top 3` over the whole recording;
#                DuckDB pairs a wakeup or a preemption with the next switch-in per
#                thread with window functions over the raw tables, by the
#                runq_latency view's rule, and bins log2 slots
#   runqlat-10s  the same on a 10 s window in the middle (--from/--to)
#   timeline     `report timeline --interval 10s` (DuckDB: no equivalent)
#   cpu          on-CPU time per process and 10 s (the timeline's process_cpu):
#                hindsight sums thread_second; DuckDB pairs raw switches per CPU
#                with lead(), as the cpu_time view does
#   runqlat-1m, timeline-1m, atop-1m
#                the issue's "whole budget at 1 m intervals" questions (atop
#                reads counters and task snapshots: a `--events sched`
#                recording has none, and it answers at once)
#   count        `SELECT count(*) FROM runq_wait` against DuckDB counting the same
#                Parquet files
#   raw-runqlat  (RAW=1 only) runqlat before indexing, from the views: minutes
#
# Rounds are interleaved (hindsight, DuckDB, hindsight, DuckDB, ...) and the
# summary takes medians. Wall time and peak RSS come from /usr/bin/time.
#
# Usage, as root from the repository, after `cargo build --release`:
#   bench/analyzer.sh REC                 # an existing recording (indexed by the script)
#   RECORD=90 bench/analyzer.sh REC       # first record a 90 s switch storm into REC
#   ROUNDS=5 RAW=1 bench/analyzer.sh REC
#   RECORD=90 MIXED=1 COPIES=15 bench/analyzer.sh REC
#                                         # every event group under the storm and
#                                         # bench/soak.sh's loads, then made 15 times
#                                         # as long (REC.x15) by examples/replicate
#                                         # (`cargo build --release --example replicate`)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$repo/target/release}
rounds=${ROUNDS:-3}
rec=${1:?usage: bench/analyzer.sh RECORDING}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 -c 'import duckdb' 2>/dev/null || python3 -m pip install --quiet duckdb

if [ -n "${RECORD:-}" ]; then
  rm -rf "$rec"
  events=(--events sched)
  [ -n "${MIXED:-}" ] && events=()
  "$bin/hindsight-record" -o "$rec" -d "${RECORD}s" "${events[@]}" 2>"$work/record.log" &
  recorder=$!
  sleep 2
  end=$((SECONDS + RECORD - 4))
  loads=()
  if [ -n "${MIXED:-}" ]; then
    # bench/soak.sh's loads beside the storm: CPU bursts, page faults, page cache.
    dd if=/dev/urandom of="$work/cachefile" bs=1M count=64 status=none
    (while [ $SECONDS -lt $end ]; do "$bin/hs-load" burn 2 >/dev/null; sleep 3; done) &
    loads+=($!)
    (while [ $SECONDS -lt $end ]; do "$bin/hs-load" touch 20000 100 >/dev/null; sleep 5; done) &
    loads+=($!)
    (while [ $SECONDS -lt $end ]; do
      "$bin/hs-load" evict "$work/cachefile" >/dev/null
      "$bin/hs-load" read "$work/cachefile" >/dev/null
      sleep 5
    done) &
    loads+=($!)
  fi
  while [ $SECONDS -lt $end ]; do "$bin/hs-pingpong" --rounds 200000 >/dev/null; done
  wait "${loads[@]}" $recorder
fi
if [ -n "${COPIES:-}" ]; then
  # A long recording from this one: COPIES shifted copies, one after another.
  rm -rf "$rec.x$COPIES"
  "$bin/examples/replicate" "$rec" "$rec.x$COPIES" "$COPIES"
  rec=$rec.x$COPIES
fi

# `measure NAME CMD...`: one timed run; appends "NAME seconds kib" to results.
measure() {
  local name=$1
  shift
  /usr/bin/time -f '%e %M' -o "$work/time" "$@" >"$work/out" 2>"$work/err" || {
    echo "$name failed:" >&2
    cat "$work/err" >&2
    return 1
  }
  echo "$name $(cat "$work/time")" >>"$work/results"
}

cat >"$work/duck.py" <<'PY'
import sys, duckdb
rec, sql = sys.argv[1], sys.argv[2]
con = duckdb.connect()
con.execute("SET threads = 2")
con.sql(sql.replace("REC", rec)).fetchall()
PY
duck=(python3 "$work/duck.py" "$rec")

range=$("$bin/hindsight" sql "$rec" -f csv \
  "SELECT CAST(min(ts) AS BIGINT) / 1000000000, CAST(max(ts) AS BIGINT) / 1000000000 FROM sched_switch" | tail -1)
first=${range%,*}
last=${range#*,}
mid=$(((first + last) / 2 / 10 * 10))
from=$(date -u -d "@$mid" +%Y-%m-%dT%H:%M:%SZ)
to=$(date -u -d "@$((mid + 10))" +%Y-%m-%dT%H:%M:%SZ)
switches=$("$bin/hindsight" sql "$rec" -f csv "SELECT count(*) FROM sched_switch" | tail -1)
wakeups=$("$bin/hindsight" sql "$rec" -f csv "SELECT count(*) FROM sched_wakeup" | tail -1)

slot="CASE WHEN lat < 2000 THEN 0 ELSE CAST(floor(log2(lat / 1000)) AS BIGINT) END"
duck_raw_runqlat() {
  # The runq_latency view's rule: a wait starts at a wakeup of a thread off
  # the CPU (not preempted) or at a switch-out in state R, and ends at the
  # thread's next switch-in.
  local where=$1 bucket=${2:-10 seconds}
  echo "WITH ev AS (
    SELECT ts, tid, pid, 0 AS kind, NULL AS state FROM read_parquet('REC/sched_wakeup/*.parquet') $where
    UNION ALL
    SELECT ts, prev_tid, prev_pid, 1, CAST(prev_state AS VARCHAR) FROM read_parquet('REC/sched_switch/*.parquet')
    WHERE prev_tid <> 0 ${where/WHERE/AND}
    UNION ALL
    SELECT ts, next_tid, next_pid, 2, NULL FROM read_parquet('REC/sched_switch/*.parquet')
    WHERE next_tid <> 0 ${where/WHERE/AND}),
  numbered AS (SELECT *, sum(CASE WHEN kind > 0 THEN 1 ELSE 0 END)
                 OVER (PARTITION BY tid ORDER BY ts, kind rows unbounded preceding) AS run FROM ev),  -- lower case: duck.py replaces REC
  opened AS (SELECT *, first_value(kind) OVER r AS opened_by, first_value(state) OVER r AS opened_in
             FROM numbered WINDOW r AS (PARTITION BY tid, run ORDER BY ts, kind)),
  e AS (SELECT ts, pid, kind, state, lead(ts) OVER w AS ts_run, lead(kind) OVER w AS next_kind
        FROM opened
        WHERE kind > 0 OR opened_by = 0 OR (opened_by = 1 AND opened_in <> 'R')
        WINDOW w AS (PARTITION BY tid ORDER BY ts, kind)),
  waits AS (SELECT time_bucket(INTERVAL '$bucket', ts) AS b, pid,
                   epoch_ns(ts_run) - epoch_ns(ts) AS lat
            FROM e WHERE (kind = 0 OR (kind = 1 AND state = 'R')) AND next_kind = 2)
  SELECT b, $slot AS slot, count(*), sum(lat) FROM waits GROUP BY ALL ORDER BY ALL"
}
window="WHERE ts >= TIMESTAMPTZ '$from' AND ts < TIMESTAMPTZ '$to'"
# On-CPU time per process and 10 s from the raw switches: a slice runs from a
# switch-in to the next switch on that CPU when it names the same thread
# leaving (the cpu_time view's rule), counted in the interval it starts in.
duck_raw_cpu="WITH s AS (
    SELECT ts, next_tid, next_pid, lead(ts) OVER w AS ts_end, lead(prev_tid) OVER w AS out_tid
    FROM read_parquet('REC/sched_switch/*.parquet') WINDOW w AS (PARTITION BY cpu ORDER BY ts))
  SELECT time_bucket(INTERVAL '10 seconds', ts) AS b, next_pid, sum(epoch_ns(ts_end) - epoch_ns(ts))
  FROM s WHERE next_tid <> 0 AND out_tid = next_tid GROUP BY ALL ORDER BY ALL"

derived=("$rec"/cpu_slice "$rec"/off_cpu_interval "$rec"/runq_wait "$rec"/thread_second)
if [ -n "${RAW:-}" ]; then
  rm -rf "${derived[@]}"
  measure raw-runqlat:hindsight "$bin/hindsight" report runqlat "$rec" --interval 10s --top 3
  measure raw-runqlat:duckdb "${duck[@]}" "$(duck_raw_runqlat "")"
fi
measure index:hindsight "$bin/hindsight" index --force "$rec"
bytes_derived=$(du -cb "${derived[@]}" | tail -1 | cut -f1)
bytes_raw=$(du -cb "$rec"/sched_switch "$rec"/sched_wakeup | tail -1 | cut -f1)

for _ in $(seq "$rounds"); do
  measure runqlat:hindsight "$bin/hindsight" report runqlat "$rec" --interval 10s --top 3
  measure runqlat:duckdb "${duck[@]}" "$(duck_raw_runqlat "")"
  measure runqlat-10s:hindsight "$bin/hindsight" report runqlat "$rec" --interval 10s --top 3 --from "$from" --to "$to"
  measure runqlat-10s:duckdb "${duck[@]}" "$(duck_raw_runqlat "$window")"
  measure timeline:hindsight "$bin/hindsight" report timeline "$rec" --interval 10s
  measure cpu:hindsight "$bin/hindsight" sql "$rec" \
    "SELECT date_bin(INTERVAL '10 seconds', ts) AS b, pid, sum(on_cpu_ns) FROM thread_second GROUP BY 1, 2 ORDER BY 1, 2"
  measure cpu:duckdb "${duck[@]}" "$duck_raw_cpu"
  measure runqlat-1m:hindsight "$bin/hindsight" report runqlat "$rec" --interval 1m --top 3
  measure runqlat-1m:duckdb "${duck[@]}" "$(duck_raw_runqlat "" "1 minute")"
  measure timeline-1m:hindsight "$bin/hindsight" report timeline "$rec" --interval 1m
  measure atop-1m:hindsight "$bin/hindsight" report atop "$rec" --interval 1m
  measure count:hindsight "$bin/hindsight" sql "$rec" "SELECT count(*) FROM runq_wait"
  measure count:duckdb "${duck[@]}" "SELECT count(*) FROM read_parquet('REC/runq_wait/*.parquet')"
done

echo "recording: $rec, $switches switches, $wakeups wakeups; raw sched tables $((bytes_raw >> 20)) MiB, derived tables $((bytes_derived >> 20)) MiB"
echo "window: $from .. $to; rounds: $rounds; $(nproc) CPUs; $(date -u +%Y-%m-%dT%H:%MZ)"
python3 - "$work/results" <<'EOF'
import sys, statistics, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, secs, kib = line.split()
    runs[name].append((float(secs), int(kib)))
med = {k: (statistics.median(s for s, _ in v), statistics.median(m for _, m in v)) for k, v in runs.items()}
print(f"{'question':<14} {'hindsight s':>12} {'RSS MiB':>8} {'DuckDB s':>9} {'RSS MiB':>8} {'time ratio':>10}")
for q in dict.fromkeys(k.split(':')[0] for k in runs):
    h, d = med.get(q + ':hindsight'), med.get(q + ':duckdb')
    cell = lambda m: (f"{m[0]:>12.2f} {m[1] / 1024:>8.0f}" if m else f"{'-':>12} {'-':>8}")
    ratio = f"{h[0] / d[0]:>10.2f}" if h and d else f"{'-':>10}"
    dd = f"{d[0]:>9.2f} {d[1] / 1024:>8.0f}" if d else f"{'-':>9} {'-':>8}"
    print(f"{q:<14} {cell(h)} {dd} {ratio}")
EOF
