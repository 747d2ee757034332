#!/usr/bin/env bash
# sched_pipe.sh: what recording every context switch costs, hindsight-record vs perf record.
#
# Workload: `perf bench sched pipe -l LOOPS`, two processes ping-ponging one
# word through a pair of pipes. Pinned to one CPU (the default, `taskset -c 0`)
# every op is two real context switches on that CPU: a context-switch storm.
#
# Three configurations, interleaved in every round (bare, hindsight, perf,
# bare, hindsight, perf, ...) so that a noisy neighbour hits all three alike;
# the summary takes medians over the rounds:
#   bare       nothing recording;
#   hindsight  under `target/release/hindsight-record --output DIR --events sched`,
#              started before and stopped with SIGINT after the workload;
#   perf       under `perf record -e sched:sched_switch -a -o FILE`, started
#              with events disabled, enabled through its control fifo right
#              before the workload, stopped with SIGINT after it.
# Both tools record the whole machine for the whole run, not only the workload.
#
# Per configuration it prints: median usecs/op (perf bench's own figure) and
# the slowdown against bare; bytes per sched_switch event (hindsight: size of
# DIR/sched_switch/*.parquet / rows of sched_switch; perf: size of perf.data /
# sched_switch samples counted by `perf report --stats`); events recorded and
# lost; the tool's CPU time (during the workload, from /proc/PID/stat, and in
# total from start to exit, from /usr/bin/time) and its max RSS. Then the
# switches per op (the workload's own sched_switch rows, prev_comm =
# 'sched-pipe'), the added microseconds per switch, and the targets of issue 2.
#
# Run as root from anywhere (it builds the release binaries first):
#   bench/sched_pipe.sh                      # 7 rounds of 500000 loops, pinned to CPU 0
#   bench/sched_pipe.sh -l 200000 -r 3       # quicker
#   bench/sched_pipe.sh --cpu none           # unpinned: the two processes may use both CPUs
#   LOOPS=200000 ROUNDS=3 PIN=none bench/sched_pipe.sh
#   bench/sched_pipe.sh --tool-cpu 1         # diagnostic: both tools confined to CPU 1
# Flags: -l/--loops N, -r/--rounds N, -c/--cpu LIST|none (workload CPUs),
# -t/--tool-cpu LIST|none (recorder and perf record CPUs; default none),
# -a/--recorder-arg ARG (one more argument for hindsight-record; repeatable),
# -k/--keep (keep the temp dir with every recording and the raw results), --no-build.
# Progress and one raw line per run go to stderr; the summary (Markdown) to stdout.
set -euo pipefail

LOOPS=${LOOPS:-500000}
ROUNDS=${ROUNDS:-7}
PIN=${PIN:-0}
TOOL_PIN=${TOOL_PIN:-none}
KEEP=${KEEP:-0}
BUILD=1
recorder_args=()

die() {
    echo "sched_pipe.sh: $*" >&2
    exit 1
}

while (($#)); do
    case $1 in
    -l | --loops) LOOPS=$2; shift 2 ;;
    -r | --rounds) ROUNDS=$2; shift 2 ;;
    -c | --cpu) PIN=$2; shift 2 ;;
    -t | --tool-cpu) TOOL_PIN=$2; shift 2 ;;
    -a | --recorder-arg) recorder_args+=("$2"); shift 2 ;;
    -k | --keep) KEEP=1; shift ;;
    --no-build) BUILD=0; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
done
[[ $LOOPS =~ ^[1-9][0-9]*$ ]] || die "--loops must be a positive integer"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer"
((EUID == 0)) || die "must run as root (BPF and perf record -a need it)"

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
recorder=$root/target/release/hindsight-record
analyzer=$root/target/release/hindsight

command -v perf >/dev/null || apt-get install -y linux-perf
[[ -x /usr/bin/time ]] || apt-get install -y time
command -v taskset >/dev/null || die "taskset (util-linux) is missing"
if ((BUILD)); then
    echo "building release binaries (cargo may wait for the build lock)..." >&2
    (cd "$root" && cargo build --release -p hindsight-record -p hindsight) >&2
fi

if [[ $PIN == none ]]; then
    pin=()
else
    pin=(taskset -c "$PIN")
fi
if [[ $TOOL_PIN == none ]]; then
    tool_pin=()
else
    tool_pin=(taskset -c "$TOOL_PIN")
fi

tmp=$(mktemp -d /tmp/hindsight-bench.XXXXXX)
# Run private copies, so that a rebuild in the shared tree during the rounds cannot swap them.
for bin in "$recorder" "$analyzer"; do
    [[ -x $bin ]] || die "missing $bin (run without --no-build)"
    ln "$bin" "$tmp/" 2>/dev/null || cp "$bin" "$tmp/"
done
recorder=$tmp/hindsight-record
analyzer=$tmp/hindsight
results=$tmp/results.tsv
tool_pid=
cleanup() {
    if [[ -n $tool_pid ]] && kill -0 "$tool_pid" 2>/dev/null; then
        kill -INT "$tool_pid" 2>/dev/null || true
        sleep 1
        kill -KILL "$tool_pid" 2>/dev/null || true
    fi
    if ((KEEP)); then
        echo "kept $tmp" >&2
    else
        rm -rf "$tmp"
    fi
}
trap cleanup EXIT

# The workload; prints perf bench's usecs/op.
workload() {
    local out
    out=$("${pin[@]}" perf bench sched pipe -l "$LOOPS")
    awk '/usecs\/op/ { print $1; found = 1 } END { exit !found }' <<<"$out" ||
        die "no usecs/op in perf bench output: $out"
}

# Waits until FILE has a line matching REGEX while PID lives (timeout 120 s).
wait_for_line() {
    local file=$1 regex=$2 pid=$3 i
    for ((i = 0; i < 1200; i++)); do
        grep -sqE "$regex" "$file" && return 0
        kill -0 "$pid" 2>/dev/null || die "tool exited before '$regex'; its stderr:"$'\n'"$(cat "$file")"
        sleep 0.1
    done
    die "timed out waiting for '$regex' in $file"
}

# The single child of PID (the tool under /usr/bin/time).
child_of() {
    local c
    c=$(cat "/proc/$1/task/$1/children" 2>/dev/null || pgrep -P "$1")
    c=${c%% *}
    [[ -n $c ]] || die "no child of /usr/bin/time (pid $1)"
    echo "$c"
}

# utime+stime of PID (all threads), in seconds.
cpu_seconds() {
    local hz
    hz=$(getconf CLK_TCK)
    sed 's/.*) //' "/proc/$1/stat" | awk -v hz="$hz" '{ printf "%.3f\n", ($12 + $13) / hz }'
}

sum_sizes() { # files under a directory matching a glob
    find "$1" -type f -name "$2" -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }'
}

hsql() { # one value from a query over a recording
    "$analyzer" sql "$1" "$2" --format csv | tail -n 1
}

# Raw columns: round config usecs_op sched_switch_events workload_switches
# sched_switch_bytes all_bytes lost cpu_during_s cpu_total_s max_rss_kb
printf '#round\tconfig\tusecs_op\tevents\tpipe_switches\tswitch_bytes\tall_bytes\tlost\tcpu_during_s\tcpu_total_s\tmax_rss_kb\n' >"$results"
record() {
    local line
    line=$(printf '%s\t' "$@")
    line=${line%$'\t'}
    echo "$line" >>"$results"
    echo "  $line" >&2
}

run_bare() {
    local usecs
    usecs=$(workload)
    record "$1" bare "$usecs" - - - - - - - -
}

run_hindsight() {
    local r=$1 dir=$tmp/hindsight-$1 err=$tmp/hindsight-$1.err tf=$tmp/hindsight-$1.time
    local tpid rpid c0 c1 usecs rc=0
    /usr/bin/time -f '%e %U %S %M' -o "$tf" "${tool_pin[@]}" "$recorder" --output "$dir" --events sched "${recorder_args[@]}" 2>"$err" &
    tpid=$!
    wait_for_line "$err" '^hindsight-record: recording ' "$tpid"
    rpid=$(child_of "$tpid")
    tool_pid=$rpid
    c0=$(cpu_seconds "$rpid")
    usecs=$(workload)
    c1=$(cpu_seconds "$rpid")
    kill -INT "$rpid"
    wait "$tpid" || rc=$?
    tool_pid=
    ((rc == 0)) || die "hindsight-record exited with $rc in round $r; its stderr:"$'\n'"$(cat "$err")"$'\n'"$(cat "$tf")"
    compgen -G "$dir/sched_switch/*.parquet" >/dev/null ||
        die "no $dir/sched_switch/*.parquet after round $r; stderr:"$'\n'"$(cat "$err")"
    local events pipe bytes all lost total rss
    events=$(hsql "$dir" 'SELECT count(*) AS n FROM sched_switch')
    pipe=$(hsql "$dir" "SELECT count(*) AS n FROM sched_switch WHERE prev_comm = 'sched-pipe'")
    lost=$(hsql "$dir" 'SELECT coalesce(sum(lost), 0) AS n FROM loss')
    if ((lost > 0)); then
        echo "  round $r: hindsight-record lost events; its loss table by source:" >&2
        "$analyzer" sql "$dir" 'SELECT source, count(*) AS intervals, sum(lost) AS lost FROM loss GROUP BY source ORDER BY lost DESC' >&2
        tail -n 1 "$err" >&2
    fi
    bytes=$(sum_sizes "$dir/sched_switch" '*.parquet')
    all=$(sum_sizes "$dir" '*')
    read -r _ u s rss <"$tf"
    total=$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", u + s }')
    record "$r" hindsight "$usecs" "$events" "$pipe" "$bytes" "$all" "$lost" \
        "$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.3f", b - a }')" "$total" "$rss"
    ((KEEP)) || rm -rf "$dir"
    sync # write back now, not during the next run
}

run_perf() {
    local r=$1 data=$tmp/perf-$1.data err=$tmp/perf-$1.err tf=$tmp/perf-$1.time
    local ctl=$tmp/perf-$1.ctl ack=$tmp/perf-$1.ack
    local tpid ppid c0 c1 usecs reply rc=0 cfd afd
    mkfifo "$ctl" "$ack"
    exec {cfd}<>"$ctl" {afd}<>"$ack" # read-write opens: neither side blocks
    /usr/bin/time -f '%e %U %S %M' -o "$tf" \
        "${tool_pin[@]}" perf record -e sched:sched_switch -a -o "$data" -D -1 --control "fifo:$ctl,$ack" 2>"$err" &
    tpid=$!
    wait_for_line "$err" '^Events disabled' "$tpid"
    ppid=$(child_of "$tpid")
    tool_pid=$ppid
    echo enable >&"$cfd"
    read -r -t 30 -u "$afd" reply || die "perf record did not acknowledge 'enable' in round $r"
    [[ $reply == ack ]] || die "perf record answered '$reply' to 'enable'"
    c0=$(cpu_seconds "$ppid")
    usecs=$(workload)
    c1=$(cpu_seconds "$ppid")
    kill -INT "$ppid"
    wait "$tpid" || rc=$?
    tool_pid=
    exec {cfd}>&- {afd}>&-
    # perf record re-raises SIGINT after writing its file: /usr/bin/time then exits 2 and says so.
    grep -q 'Captured and wrote' "$err" ||
        die "perf record (exit $rc) did not finish its file in round $r; its stderr:"$'\n'"$(cat "$err")"
    local stats events lost pipe total rss
    stats=$(perf report -i "$data" --stats 2>/dev/null)
    events=$(awk '/sched:sched_switch stats:/ { s = 1 } s && /SAMPLE events:/ { print $3; exit }' <<<"$stats")
    lost=$(awk '/sched:sched_switch stats:/ { s = 1 } s && /LOST_SAMPLES events:/ { print $3; f = 1; exit } END { if (!f) print 0 }' <<<"$stats")
    [[ -n $events ]] || die "no sched_switch samples in perf report --stats for round $r:"$'\n'"$stats"
    pipe=$(perf script -i "$data" -F comm 2>/dev/null | awk '$1 == "sched-pipe" { n++ } END { print n + 0 }')
    read -r _ u s rss < <(grep -v '^Command' "$tf")
    total=$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", u + s }')
    local size
    size=$(stat -c %s "$data")
    record "$r" perf "$usecs" "$events" "$pipe" "$size" "$size" "$lost" \
        "$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.3f", b - a }')" "$total" "$rss"
    ((KEEP)) || rm -f "$data"
    rm -f "$ctl" "$ack"
    sync # write back now, not during the next run
}

load_start=$(cut -d ' ' -f 1-3 /proc/loadavg)
echo "kernel $(uname -r), $(nproc) CPUs, perf $(perf version | awk '{ print $3 }'); workload: ${pin[*]} perf bench sched pipe -l $LOOPS; tools on CPUs: $TOOL_PIN; recorder arguments: ${recorder_args[*]:-none}; $ROUNDS rounds; load average $load_start" >&2
echo "raw: $(head -n 1 "$results" | tr -d '#')" >&2
for ((round = 1; round <= ROUNDS; round++)); do
    run_bare "$round"
    run_hindsight "$round"
    run_perf "$round"
done

# Summary: medians per configuration over the rounds.
median() { # column COL of config CFG
    awk -v c="$1" -v n="$2" '$2 == c && $n != "-" { print $n }' "$results" | sort -g |
        awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
per_event() { # median over rounds of column A / column B
    awk -v c="$1" -v a="$2" -v b="$3" '$2 == c && $b > 0 { print $a / $b }' "$results" | sort -g |
        awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
f() { awk -v x="$1" -v fmt="$2" 'BEGIN { if (x == "-") print "-"; else printf fmt "\n", x }'; }

bare=$(median bare 3)
h_us=$(median hindsight 3)
p_us=$(median perf 3)
h_bpe=$(per_event hindsight 6 4)
p_bpe=$(per_event perf 6 4)
h_all=$(per_event hindsight 7 4)
# The workload's own switches, from the recordings (either tool) that lost nothing.
switches_per_op=$(awk -v l="$LOOPS" '$2 != "bare" && $8 == 0 { print $5 / l }' "$results" | sort -g |
    awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
[[ $switches_per_op != - ]] || switches_per_op=2 # every recording lost events: assume perf bench's two
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { print a / b }'; }
added() { awk -v t="$1" -v b="$bare" -v s="$switches_per_op" 'BEGIN { print (t - b) / s }'; }

echo
tree=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -z $(git -C "$root" status --porcelain --untracked-files=no -- recorder bpf schemas 2>/dev/null) ]] ||
    tree="$tree + uncommitted changes in recorder/bpf/schemas"
echo "Workload: \`${pin[*]}${pin[*]:+ }perf bench sched pipe -l $LOOPS\`, $ROUNDS interleaved rounds, medians;" \
    "tools on CPUs: $TOOL_PIN;${recorder_args[*]:+ recorder arguments: ${recorder_args[*]};} kernel $(uname -r), $(nproc) CPUs, perf $(perf version | awk '{ print $3 }'), hindsight at $tree;" \
    "load average $load_start at the start, $(cut -d ' ' -f 1-3 /proc/loadavg) at the end."
echo
echo "| config | usecs/op | slowdown | B/sched_switch event | sched_switch events | lost | workload switches | tool CPU s during workload | tool CPU s total | max RSS MiB |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
echo "| bare | $(f "$bare" %.3f) | 1.00 | - | - | - | - | - | - | - |"
for c in hindsight perf; do
    us=$(median "$c" 3)
    echo "| $c | $(f "$us" %.3f) | $(f "$(ratio "$us" "$bare")" %.2f) | $(f "$(per_event "$c" 6 4)" %.2f) |" \
        "$(f "$(median "$c" 4)" %.0f) | $(f "$(median "$c" 8)" %.0f) | $(f "$(median "$c" 5)" %.0f) |" \
        "$(f "$(median "$c" 9)" %.2f) | $(f "$(median "$c" 10)" %.2f) | $(f "$(awk -v k="$(median "$c" 11)" 'BEGIN { print k / 1024 }')" %.1f) |"
done
echo
h_slow=$(ratio "$h_us" "$bare")
p_slow=$(ratio "$p_us" "$bare")
h_add=$(added "$h_us")
p_add=$(added "$p_us")
verdict() { awk -v x="$1" 'BEGIN { print (x ? "met" : "NOT met") }'; }
paired() { # median over rounds of usecs/op under CFG / bare usecs/op of the same round
    awk -v c="$1" '$2 == "bare" { b[$1] = $3 } $2 == c { r[$1] = $3 } END { for (k in r) if (k in b) print r[k] / b[k] }' "$results" | sort -g |
        awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
lossy() { # rounds in which CFG lost events
    awk -v c="$1" '$2 == c && $8 > 0 { printf "%sround %s (%d lost)", (n++ ? ", " : ""), $1, $8 } END { if (!n) printf "none" }' "$results"
}
echo "- slowdown as the median of per-round ratios (tool / bare of the same round): hindsight $(f "$(paired hindsight)" %.2f), perf $(f "$(paired perf)" %.2f)"
echo "- rounds with lost events: hindsight $(lossy hindsight); perf $(lossy perf)"
echo "- workload switches per op: $(f "$switches_per_op" %.3f) (median over the recordings of either tool that lost nothing of sched_switch events with prev_comm 'sched-pipe' / $LOOPS)"
echo "- added per switch: hindsight $(f "$h_add" %.3f) µs, perf $(f "$p_add" %.3f) µs ((median usecs/op under the tool - bare) / switches per op)"
echo "- hindsight, all tables (sched_switch, sched_wakeup, process, loss) per sched_switch event: $(f "$h_all" %.2f) B"
us_per_event() { awk -v x="$(per_event "$1" 9 4)" 'BEGIN { if (x == "-") print "-"; else printf "%.2f\n", x * 1e6 }'; }
echo "- tool CPU per recorded sched_switch event, during the workload: hindsight $(us_per_event hindsight) µs, perf $(us_per_event perf) µs"
echo "- target: hindsight B/event <= perf's / 10: $(f "$h_bpe" %.2f) vs $(f "$(awk -v p="$p_bpe" 'BEGIN { print p / 10 }')" %.2f): $(verdict "$(awk -v h="$h_bpe" -v p="$p_bpe" 'BEGIN { print h <= p / 10 }')")"
echo "- target: hindsight slowdown <= perf's: $(f "$h_slow" %.2f) vs $(f "$p_slow" %.2f): $(verdict "$(awk -v h="$h_slow" -v p="$p_slow" 'BEGIN { print h <= p }')")"
echo "- DESIGN §8 bar: <= 0.33 µs added per switch: $(f "$h_add" %.3f): $(verdict "$(awk -v h="$h_add" 'BEGIN { print h <= 0.33 }')"); <= 4 B per switch: $(f "$h_bpe" %.2f): $(verdict "$(awk -v h="$h_bpe" 'BEGIN { print h <= 4 }')")"
echo
echo "Raw results (one line per run):"
echo
echo '```'
column -t "$results"
echo '```'
