#!/usr/bin/env bash
# soak.sh: hindsight-record at its default settings, for a long while, under a
# steady mixed workload: is its CPU flat, its memory flat, its disk use per
# hour what the budget expects, and does it lose anything?
#
# Issue 5: "A 30-minute soak at the default settings under a steady mixed
# workload: recorder CPU %, RSS over time (flat), bytes per hour, loss; in
# BENCHMARKS.md."
#
# The workload, started here and kept running for the whole soak on top of
# whatever the machine does anyway, mixes every event group the defaults
# record:
#   switches   hs-pingpong in a loop (two processes passing a byte, 20,000
#              rounds, 2 s pause, then a new pair: bursts of context switches,
#              forks and exits);
#   cpu        hs-load burn 2 s, then 3 s asleep, in a loop (a duty-cycled hog);
#   faults     hs-load touch 20,000 pages every 5 s (80 MiB of fresh memory);
#   cache      a 64 MiB file evicted and read back every 10 s (page-cache misses,
#              then hits).
# Every SAMPLE seconds it writes the recorder's CPU seconds (utime+stime of all
# its threads, /proc/PID/stat), VmRSS and bytes on disk (sum of the file sizes
# under the recording) to samples.csv. At the end it stops the recorder with
# SIGINT and prints: CPU % of one core overall and per sample interval, RSS
# min/median/max over the samples and VmHWM, bytes per hour, rows per table,
# and the losses the recording itself reports (`loss` table, per source).
#
# Run as root from the repository, after `cargo build --release -p
# hindsight-record -p hindsight` and `cargo build -p hindsight-e2e --bins`:
#   bench/soak.sh                        # 30 minutes, a sample a minute
#   DURATION=300 SAMPLE=30 bench/soak.sh # quicker
# Environment: DURATION (s, default 1800), SAMPLE (s, default 60), EXTRA (more
# recorder arguments, default none), BIN (release binaries, default
# target/release), LOADBIN (workload binaries, default target/debug), WORK
# (default: a new mktemp -d dir; the recording and samples.csv are left there).
set -euo pipefail

DURATION=${DURATION:-1800}
SAMPLE=${SAMPLE:-60}
EXTRA=${EXTRA:-}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${BIN:-$REPO/target/release}
LOADBIN=${LOADBIN:-$REPO/target/debug}
WORK=${WORK:-$(mktemp -d /tmp/soak.XXXXXX)}
mkdir -p "$WORK"
[[ $(id -u) -eq 0 ]] || { echo "soak.sh: run as root" >&2; exit 1; }
cp "$BIN/hindsight-record" "$BIN/hindsight" "$LOADBIN/hs-load" "$LOADBIN/hs-pingpong" "$WORK/"
HREC=$WORK/hindsight-record
HSQL=$WORK/hindsight
REC=$WORK/rec
TCK=$(getconf CLK_TCK)

cpu_s() {
    local s
    s=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    s=${s##*) }
    awk -v t="$TCK" '{ printf "%.2f", ($12 + $13) / t }' <<<"$s"
}
status_kb() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status" 2>/dev/null || true; }
dsize() { find "$1" -type f -printf '%s\n' 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'; }

echo "# work dir: $WORK"
echo "# host: $(uname -r), $(nproc) CPUs; start $(date -u +%FT%TZ), DURATION=${DURATION}s SAMPLE=${SAMPLE}s"
echo "# recorder: hindsight-record --output $REC $EXTRA (defaults otherwise)"

# shellcheck disable=SC2086 # EXTRA is a list of arguments
"$HREC" --output "$REC" $EXTRA >"$WORK/recorder.out" 2>&1 &
HPID=$!

LOADS=()
( while :; do "$WORK/hs-pingpong" --rounds 20000 >/dev/null 2>&1 || true; sleep 2; done ) &
LOADS+=($!); disown
( while :; do "$WORK/hs-load" burn 2 >/dev/null 2>&1 || true; sleep 3; done ) &
LOADS+=($!); disown
( while :; do "$WORK/hs-load" touch 20000 100 >/dev/null 2>&1 || true; sleep 5; done ) &
LOADS+=($!); disown
dd if=/dev/urandom of="$WORK/cachefile" bs=1M count=64 status=none
( while :; do "$WORK/hs-load" evict "$WORK/cachefile" >/dev/null 2>&1 || true
               "$WORK/hs-load" read "$WORK/cachefile" >/dev/null 2>&1 || true
               "$WORK/hs-load" read "$WORK/cachefile" >/dev/null 2>&1 || true; sleep 10; done ) &
LOADS+=($!); disown

stop_loads() {
    for p in "${LOADS[@]}"; do pkill -P "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
}
trap 'stop_loads; kill -INT $HPID 2>/dev/null; exit 130' INT TERM

T0=$(date +%s.%N)
CSV=$WORK/samples.csv
echo "elapsed_s,cpu_s,rss_kb,bytes" >"$CSV"
sample() {
    local el
    el=$(awk -v a="$(date +%s.%N)" -v b="$T0" 'BEGIN { printf "%.1f", a - b }')
    echo "$el,$(cpu_s $HPID),$(status_kb $HPID VmRSS),$(dsize "$REC")" >>"$CSV"
    tail -1 "$CSV"
}
head -1 "$CSV"
END=$(awk -v t="$T0" -v d="$DURATION" 'BEGIN { printf "%d", t + d }')
while (( $(date +%s) < END )); do
    left=$(( END - $(date +%s) )); sleep $(( left < SAMPLE ? left : SAMPLE ))
    kill -0 "$HPID" 2>/dev/null || { echo "# ERROR: the recorder exited early"; stop_loads; exit 1; }
    sample
done
ELAPSED=$(awk -v a="$(date +%s.%N)" -v b="$T0" 'BEGIN { printf "%.1f", a - b }')
CPU=$(cpu_s $HPID); HWM=$(status_kb $HPID VmHWM)
stop_loads
kill -INT "$HPID"
RC=0; wait "$HPID" || RC=$?
trap - INT TERM
BYTES=$(dsize "$REC")
echo "# stopped after ${ELAPSED}s, recorder exit code $RC"
echo
echo "# CPU % of one core per sample interval, RSS MiB per sample:"
awk -F, 'NR > 2 { printf "  %7.1f s  cpu %5.2f %%  rss %6.1f MiB  disk %8.1f MiB\n", $1, 100 * ($2 - c) / ($1 - t), $3 / 1024, $4 / 1048576 }
         NR > 1 { t = $1; c = $2 }' "$CSV"
echo
echo "# rows and bytes per table:"
"$HSQL" info "$REC" 2>&1 | tee "$WORK/info.txt" || true
echo
echo "# losses the recording reports:"
"$HSQL" sql "$REC" "SELECT source, sum(lost) AS lost FROM loss GROUP BY source ORDER BY source" 2>&1 \
    | tee "$WORK/loss.txt" || true
echo
RSS=$(awk -F, 'NR > 1 { print $3 }' "$CSV" | sort -n | awk '{ a[NR] = $1 } END { printf "%.1f / %.1f / %.1f", a[1] / 1024, a[int((NR + 1) / 2)] / 1024, a[NR] / 1024 }')
awk -v c="$CPU" -v e="$ELAPSED" -v b="$BYTES" -v h="$HWM" -v r="$RSS" 'BEGIN {
    printf "| soak | %.0f s | CPU %.2f s = %.2f %% of one core | RSS min/median/max %s MiB, peak (VmHWM) %.1f MiB | %.1f MiB on disk = %.1f MiB/hour |\n",
        e, c, 100 * c / e, r, h / 1024, b / 1048576, b / 1048576 * 3600 / e }'
