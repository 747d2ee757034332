#!/usr/bin/env bash
# storm_rss.sh: the recorder's peak memory under a context-switch storm.
#
# Records with the default flags (every default event group, the 4 MiB ring)
# while `hs-pingpong --pairs PAIRS` switches far faster than any recorder
# writes, and reports the recorder's RSS idle and at its peak (VmHWM from
# /proc/PID/status), the Rss/anon/file split at the end (smaps_rollup), the
# rows it kept and the events it dropped (loss table). The bound stated in
# `hindsight-record --help` is 64 MiB.
#
# Run as root from the repository, after building the binaries:
#   bench/storm_rss.sh                      # release recorder, 8 pairs x 200000 rounds
#   BIN=target/debug bench/storm_rss.sh     # the debug build the tests run
#   bench/storm_rss.sh -- --ring-size 1M    # extra recorder flags after --
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BIN:-target/release}
pairs=${PAIRS:-8}
rounds=${ROUNDS:-200000}
[ "${1:-}" = "--" ] && shift
out=$(mktemp -d)/rec
"$bin/hindsight-record" -o "$out" "$@" 2>"$out.log" &
pid=$!
sleep 3
idle=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
target/debug/hs-pingpong --rounds "$rounds" --pairs "$pairs" >"$out.truth"
sleep 1
peak=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)
split=$(awk '/^(Rss|Pss_Anon|Pss_File):/ {printf "%s %s kB  ", $1, $2}' /proc/$pid/smaps_rollup)
kill -INT $pid
wait $pid
echo "recorder: $bin/hindsight-record $*"
echo "idle RSS ${idle} kB; peak RSS (VmHWM) ${peak} kB; at the end: ${split}"
tail -1 "$out.log"
target/debug/hindsight sql "$out" "SELECT source, sum(lost) AS lost FROM loss GROUP BY 1 ORDER BY 2 DESC"
rm -rf "$(dirname "$out")"
