#!/usr/bin/env bash
# atop_compare.sh: what always-on counters + task snapshots cost, hindsight-record vs `atop -w`.
#
# Issue 4: "Compare against `atop -w` raw logging at the same interval: bytes per
# day (extrapolated from an hour) and CPU cost of each, same run. Target:
# counters + task snapshots at 1 s / 10 s cost less CPU than atop at 10 s, on
# disk no more than atop's raw log per day."
#
# In one run, at the same time, on whatever the machine is doing anyway (a
# mixed workload: no synthetic load is started), it runs side by side:
#   atop       `atop -w FILE 10`: atop's raw log, one sample of the system and
#              of every process every 10 s;
#   hindsight  `hindsight-record --output DIR --events counters,tasks
#              --interval INTERVAL --task-interval 10s`: system counters every
#              INTERVAL (1 s unless set),
#              a snapshot of every process every 10 s, files rolled every 60 s
#              (the default --chunk: one zstd Parquet file per table per minute);
#   full       (unless FULL=0) `hindsight-record --output DIR2` at its defaults
#              (sched, counters, tasks, numa, cache). NOT comparable to atop: it
#              traces every context switch and more; shown for scale only.
# Any atop service (atop, atopacct) is stopped first so that only our atop runs.
#
# Every SAMPLE seconds (and at the end) it records, per tool: CPU seconds
# (utime+stime of the process and all its threads, /proc/PID/stat, clock ticks
# / CLK_TCK), RSS and peak RSS (VmRSS, VmHWM of /proc/PID/status) and bytes on
# disk (atop: size of FILE; hindsight: the sum of the sizes of the files under DIR,
# like `du -sb DIR` less its 4 KiB directory entries), plus the number of
# processes and threads on the machine (both tools' per-process cost scales
# with it). After DURATION seconds it stops hindsight-record with SIGINT (it
# closes its files and exits 0) and atop with SIGTERM (SIGINT is ignored
# by a background job of a non-interactive shell and atop keeps it so), takes the final sizes,
# reads the `recorder` counters hindsight records about itself, and prints a
# table: CPU seconds, CPU % of one core, peak RSS, bytes on disk, bytes per
# day (bytes * 86400 / elapsed seconds, a linear extrapolation) and whether
# the targets of issue 4 are met. Note that CPU spent in BPF programs (only the
# `full` config has any) runs in the traced tasks and is not in its CPU time.
#
# Run as root (installs atop with apt-get only if it is missing):
#   bench/atop_compare.sh                       # one hour, samples every 10 min
#   DURATION=600 SAMPLE=60 bench/atop_compare.sh   # quicker
#   FULL=0 bench/atop_compare.sh                # without the third config
# Environment: DURATION (s, default 3600), SAMPLE (s, default 600), INTERVAL
# (hindsight's --interval, default 1s; 10s is atop's own), FULL
# (1/0, default 1), BIN (dir with hindsight-record and hindsight, default
# target/release of this repo; both are copied to WORK first so a rebuild
# during the run does not matter), WORK (default: a new mktemp -d dir; the
# recordings, atop's log, samples.csv and the outputs are left there).
set -euo pipefail

DURATION=${DURATION:-3600}
SAMPLE=${SAMPLE:-600}
INTERVAL=${INTERVAL:-1s}
FULL=${FULL:-1}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${BIN:-$REPO/target/release}
WORK=${WORK:-$(mktemp -d /tmp/atop_compare.XXXXXX)}
mkdir -p "$WORK"

[[ $(id -u) -eq 0 ]] || { echo "atop_compare.sh: run as root" >&2; exit 1; }
if ! command -v atop >/dev/null; then
    echo "# atop missing: apt-get install -y atop"
    DEBIAN_FRONTEND=noninteractive apt-get install -y atop >"$WORK/apt.log" 2>&1
fi
cp "$BIN/hindsight-record" "$BIN/hindsight" "$WORK/"
HREC=$WORK/hindsight-record
HSQL=$WORK/hindsight

# Only our own atop: stop the service(s) the package may have started.
if command -v systemctl >/dev/null; then systemctl stop atop atopacct 2>/dev/null || true; fi
if command -v service >/dev/null; then
    service atop stop >/dev/null 2>&1 || true; service atopacct stop >/dev/null 2>&1 || true
fi
if pgrep -x atop >/dev/null || pgrep -x atopacctd >/dev/null; then
    echo "# WARNING: an atop/atopacctd process is still running (not ours):"
    pgrep -a -x atop || true; pgrep -a -x atopacctd || true
fi

TCK=$(getconf CLK_TCK)
ATOP_LOG=$WORK/atop.raw
HDIR=$WORK/rec_counters_tasks
FDIR=$WORK/rec_full

cpu_s() {   # utime+stime of PID (all threads) in seconds; empty if gone
    local s
    s=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    s=${s##*) }                       # fields from 3 (state) on
    awk -v t="$TCK" '{ printf "%.2f", ($12 + $13) / t }' <<<"$s"
}
status_kb() {   # field ($2: VmRSS/VmHWM) of /proc/PID/status in kB
    awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status" 2>/dev/null || true
}
nprocs() { find /proc -maxdepth 1 -name '[0-9]*' | wc -l; }
nthreads() { find /proc/[0-9]*/task -maxdepth 1 -mindepth 1 2>/dev/null | wc -l; }
dsize() {   # bytes of the files (not the directory entries) under $1
    if [[ -d $1 ]]; then find "$1" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }'; elif [[ -f $1 ]]; then stat -c %s "$1"; else echo 0; fi; }

echo "# work dir: $WORK"
echo "# host: $(uname -r), $(nproc) CPUs, CLK_TCK=$TCK, atop $(atop -V 2>&1 | head -1)"
echo "# start: $(date -u +%FT%TZ), DURATION=${DURATION}s SAMPLE=${SAMPLE}s FULL=$FULL"
echo "# processes at start: $(nprocs), threads: $(nthreads)"

atop -w "$ATOP_LOG" 10 >"$WORK/atop.out" 2>&1 &
APID=$!
"$HREC" --output "$HDIR" --events counters,tasks --interval "$INTERVAL" --task-interval 10s \
    >"$WORK/hindsight.out" 2>&1 &
HPID=$!
FPID=
if [[ $FULL == 1 ]]; then
    "$HREC" --output "$FDIR" >"$WORK/full.out" 2>&1 &
    FPID=$!
fi
T0=$(date +%s.%N)
echo "# pids: atop $APID, hindsight $HPID${FPID:+, full $FPID}"

cleanup() {
    for p in $HPID $FPID; do kill -INT "$p" 2>/dev/null || true; done
    kill -TERM "$APID" 2>/dev/null || true
}
trap 'cleanup; exit 130' INT TERM

CSV=$WORK/samples.csv
echo "elapsed_s,procs,threads,atop_cpu_s,atop_rss_kb,atop_bytes,hs_cpu_s,hs_rss_kb,hs_bytes,full_cpu_s,full_rss_kb,full_bytes" >"$CSV"
sample() {
    local el
    el=$(awk -v a="$(date +%s.%N)" -v b="$T0" 'BEGIN { printf "%.1f", a - b }')
    echo "$el,$(nprocs),$(nthreads),$(cpu_s $APID),$(status_kb $APID VmRSS),$(dsize "$ATOP_LOG"),$(cpu_s $HPID),$(status_kb $HPID VmRSS),$(dsize "$HDIR"),${FPID:+$(cpu_s $FPID)},${FPID:+$(status_kb $FPID VmRSS)},${FPID:+$(dsize "$FDIR")}" >>"$CSV"
    tail -1 "$CSV"
}
alive() { kill -0 "$1" 2>/dev/null; }

echo "# samples ($CSV):"; head -1 "$CSV"
END=$(awk -v t="$T0" -v d="$DURATION" 'BEGIN { printf "%d", t + d }')
EARLY=
while :; do
    now=$(date +%s)
    (( now >= END )) && break
    left=$(( END - now )); nap=$(( left < SAMPLE ? left : SAMPLE ))
    sleep "$nap"
    for p in $APID $HPID $FPID; do
        alive "$p" || EARLY="$EARLY $p"
    done
    if [[ -n $EARLY ]]; then echo "# ERROR: exited early: pid(s)$EARLY (atop $APID, hindsight $HPID${FPID:+, full $FPID})"; break; fi
    (( $(date +%s) >= END )) || sample
done

# Final figures: CPU and peak RSS right before the stop, sizes after the exit.
T1=$(date +%s.%N)
ELAPSED=$(awk -v a="$T1" -v b="$T0" 'BEGIN { printf "%.1f", a - b }')
sample
PROCS_END=$(nprocs); THREADS_END=$(nthreads)
A_CPU=$(cpu_s $APID); A_HWM=$(status_kb $APID VmHWM)
H_CPU=$(cpu_s $HPID); H_HWM=$(status_kb $HPID VmHWM)
F_CPU=; F_HWM=
[[ -n $FPID ]] && { F_CPU=$(cpu_s $FPID); F_HWM=$(status_kb $FPID VmHWM); }

# SIGINT to hindsight-record (it installs its own handler). atop gets SIGTERM:
# a background job of a non-interactive bash starts with SIGINT ignored and
# atop does not re-enable it, so SIGINT would not stop it.
for p in $HPID $FPID; do kill -INT "$p" 2>/dev/null || true; done
kill -TERM "$APID" 2>/dev/null || true
H_RC=0; A_RC=0; F_RC=
wait "$HPID" || H_RC=$?
wait "$APID" || A_RC=$?
if [[ -n $FPID ]]; then F_RC=0; wait "$FPID" || F_RC=$?; fi
trap - INT TERM
echo "# stopped at $(date -u +%FT%TZ) after ${ELAPSED}s; exit codes: atop $A_RC, hindsight $H_RC${FPID:+, full $F_RC}"
echo "# processes at end: $PROCS_END, threads: $THREADS_END"

A_B=$(dsize "$ATOP_LOG"); H_B=$(dsize "$HDIR"); F_B=
[[ -n $FPID ]] && F_B=$(dsize "$FDIR")

echo
echo "# hindsight's own recorder counters (max over the run):"
for d in "$HDIR" ${FPID:+"$FDIR"}; do
    echo "## $d"
    "$HSQL" sql "$d" "SELECT name, max(value) FROM counter WHERE source='recorder' GROUP BY 1 ORDER BY 1" \
        2>&1 | tee "$d.recorder.txt" || true
done
echo
echo "# hindsight info (rows and bytes per table):"
for d in "$HDIR" ${FPID:+"$FDIR"}; do
    echo "## $d"
    "$HSQL" info "$d" 2>&1 | tee "$d.info.txt" || true
done

echo
echo "# result: ${ELAPSED}s on a $(nproc)-CPU machine, $PROCS_END processes / $THREADS_END threads at the end"
row() {   # name cpu_s hwm_kb bytes
    awk -v n="$1" -v c="$2" -v r="$3" -v b="$4" -v e="$ELAPSED" 'BEGIN {
        printf "| %-36s | %9.2f | %7.3f | %9.1f | %12d | %14.0f |\n",
            n, c, 100 * c / e, r / 1024, b, b * 86400 / e }'
}
echo "| tool                                 | CPU s     | CPU %   | max RSS MiB | bytes      | bytes/day      |"
echo "|--------------------------------------|-----------|---------|-----------|--------------|----------------|"
row "atop -w 10" "$A_CPU" "$A_HWM" "$A_B"
row "hindsight counters,tasks $INTERVAL/10s" "$H_CPU" "$H_HWM" "$H_B"
[[ -n $FPID ]] && row "hindsight defaults (NOT comparable)" "$F_CPU" "$F_HWM" "$F_B"
echo
CPU_OK=$(awk -v h="$H_CPU" -v a="$A_CPU" 'BEGIN { print (h < a) ? "MET" : "NOT met" }')
DISK_OK=$(awk -v h="$H_B" -v a="$A_B" 'BEGIN { print (h <= a) ? "MET" : "NOT met" }')
echo "# target 1, CPU(hindsight counters,tasks) < CPU(atop): $H_CPU s vs $A_CPU s: $CPU_OK"
echo "# target 2, bytes/day(hindsight) <= bytes/day(atop): $H_B vs $A_B bytes in the same ${ELAPSED}s: $DISK_OK"
[[ -z $EARLY ]] || { echo "# ERROR: a tool exited early (pid(s)$EARLY); the figures above cover less than DURATION"; exit 1; }
[[ $H_RC == 0 && ( -z $FPID || $F_RC == 0 ) ]] || { echo "# ERROR: hindsight-record exited $H_RC${FPID:+ / $F_RC}"; exit 1; }
