#!/usr/bin/env bash
# stacks.sh: what stack capture costs, hindsight-record vs perf record, same workloads, same run.
#
# Part 1, CPU sampling on a busy machine: one CPU burner per CPU (`sha256sum
# /dev/zero`, so every CPU is 100 % busy and every sample has a stack), for
# DURATION seconds per run, under:
#   hs-49     hindsight-record --events cpu --frequency 49 (--unwind dwarf, the default)
#   hs-49-fp  the same with --unwind fp (frame pointers only)
#   hs-999, hs-999-fp  the same at 999 Hz
#   perf-49   perf record -F 49 -a -g
#   perf-49-dwarf  perf record -F 49 -a --call-graph dwarf
#   perf-999, perf-999-dwarf  the same at 999 Hz
# Part 2, off-CPU stacks on a context-switch storm: `perf bench sched pipe -l
# LOOPS` pinned to CPU 0 (two real switches per op), under:
#   hs-sched     hindsight-record --events sched (switches without stacks)
#   hs-offcpu    hindsight-record --events sched --off-cpu-stacks (--unwind dwarf: a stack copy per switch)
#   hs-offcpu-fp the same with --unwind fp
#   perf-sched-g perf record -e sched:sched_switch -a -g
# plus `bare` (nothing recording) for the storm's usecs/op.
# Part 3, stacks where processes come and go: one loop per CPU starting
# short-lived processes of a few binaries (sha256sum, gzip, sort, awk,
# python3; 10-60 ms each) for DURATION seconds, under:
#   hs-churn    hindsight-record --events cpu (the default 49 Hz)
#   perf-churn  perf record -F 49 -a -g
#   both-churn  the two at once, on the same processes: every function perf
#               names in 5 or more of the five programs' user frames, and
#               how often hindsight names it (a function perf names that
#               hindsight names less than a fifth as often is "missed")
# Part 4, JIT code of a real JVM: tests/workloads/HbHot.java (two hot
# methods given work in 3 : 1) run for DURATION/4 seconds (at least 3)
# with -XX:+DumpPerfMapAtExit, on the host (`host`) and as a container runs
# it (`container`: its own pid namespace, where it writes /tmp/perf-1.map,
# and a private tmpfs /tmp that goes with it), under:
#   hs-jit-host, hs-jit-container      hindsight-record --events cpu --frequency 499
#   perf-jit-host, perf-jit-container  perf record -F 499 -a -g (perf report reads maps when it runs)
# Per run: the JVM's samples whose leaf each tool names as either method,
# their ratio, and their share of the JVM main thread's CPU time x 499.
# Part 5, a real parallel build: `make -j<CPUs>` from clean of every C file of
# zstd's library, libbpf and zlib (the C sources of this tree's zstd-sys and
# libbpf-sys in Cargo's registry), `cc -O2 -g`, one object each, under:
#   bare-build  nothing recording (the build's own time)
#   hs-build    hindsight-record at the defaults (every always-on group)
#   perf-build  perf record -F 49 -a -g
# with part 3's figures per run, over the build's processes (cc, cc1, as, ...).
# -b/--builds N runs the build N times from clean, one after another, in each
# run: a build host's minutes, over which frames seen once (hindsight writes
# a frame once a recording) are a smaller share of the bytes.
# Part 6, a Rust build: `cargo build -j<CPUs>` from clean of a small program
# using clap, regex and serde_json (this tree's versions, offline), as
# bare-rust, hs-rust and perf-rust: rustc processes, whose librustc_driver and
# libLLVM carry 15 MiB of unwind tables and tens of MB of symbols.
# Per run (parts 3, 5 and 6; the tool's CPU counted from 3 s after its start,
# past its one-time work): samples, bytes on disk for them (hindsight: the cpu_sample,
# stack and frame tables; perf: perf.data), processes started, the share
# of those processes' user frames named (hindsight's frame table; perf
# script's symbols), the modules hindsight opened
# (`recorder/modules_opened`) and the longest its event loop left the rings
# undrained (`recorder/longest_busy_us`, the run's worst).
# Per run (part 1): also the bytes on disk for the samples (hindsight: the
# cpu_sample, stack and frame tables; perf: perf.data) and per sample: on a
# steady process, what a sample costs once its stacks are known.
#
# All configurations run once per round, interleaved (round 1: all, round 2:
# all, ...), so a noisy neighbour hits them alike; the summary takes medians.
# Per run: the tool's CPU time over the workload (utime+stime from
# /proc/PID/stat, all threads), its share of one CPU, samples or events
# recorded, and for the storm the workload's usecs/op.
#
# Run as root from anywhere (it builds the release recorder first):
#   bench/stacks.sh                  # 5 rounds, 20 s burns, 300000 loops
#   bench/stacks.sh -r 3 -d 10 -l 200000
#   bench/stacks.sh --parts churn -r 3   # only part 3 (parts: sampling,storm,churn,jit,build,rust)
#   bench/stacks.sh --parts build -r 3 -b 4   # part 5, four builds a run
# Flags: -r/--rounds N, -d/--duration SECONDS, -l/--loops N, -p/--parts LIST, -b/--builds N,
# -k/--keep, --no-build. RECORDER=PATH records with another build (with
# --no-build). Recordings are read with target/release/hindsight, or
# ANALYZER=PATH (target/debug/hindsight does, slower).
# Progress and one raw line per run go to stderr; the summary (Markdown) to stdout.
set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-20}
LOOPS=${LOOPS:-300000}
BUILDS=${BUILDS:-1}
KEEP=0
BUILD=1
PARTS=sampling,storm,churn,jit,build,rust

die() {
    echo "stacks.sh: $*" >&2
    exit 1
}

while (($#)); do
    case $1 in
    -r | --rounds) ROUNDS=$2; shift 2 ;;
    -d | --duration) DURATION=$2; shift 2 ;;
    -l | --loops) LOOPS=$2; shift 2 ;;
    -p | --parts) PARTS=$2; shift 2 ;;
    -b | --builds) BUILDS=$2; shift 2 ;;
    -k | --keep) KEEP=1; shift ;;
    --no-build) BUILD=0; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
done
((EUID == 0)) || die "must run as root (BPF and perf record -a need it)"

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
command -v perf >/dev/null || apt-get install -y linux-perf
if ((BUILD)); then
    echo "building the release recorder (cargo may wait for the build lock)..." >&2
    (cd "$root" && cargo build --release -p hindsight-record) >&2
fi
tmp=$(mktemp -d /tmp/hindsight-stacks.XXXXXX)
# A private copy, so that a rebuild in the shared tree cannot swap it mid-run.
cp "${RECORDER:-$root/target/release/hindsight-record}" "$tmp/hindsight-record" ||
    die "missing ${RECORDER:-target/release/hindsight-record}"
recorder=$tmp/hindsight-record
# What reads the recordings: ANALYZER=target/debug/hindsight does too, slower.
analyzer=${ANALYZER:-$root/target/release/hindsight}
results=$tmp/results.tsv
tool_pid=
burners=()
cleanup() {
    for p in "${burners[@]}" $tool_pid; do kill "$p" 2>/dev/null || true; done
    if ((KEEP)); then echo "kept $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

cpu_seconds() { # utime+stime of PID, all threads
    sed 's/.*) //' "/proc/$1/stat" | awk -v hz="$(getconf CLK_TCK)" '{ printf "%.3f\n", ($12 + $13) / hz }'
}

wait_for_line() { # FILE REGEX PID
    local i
    for ((i = 0; i < 600; i++)); do
        grep -sqE "$2" "$1" && return 0
        kill -0 "$3" 2>/dev/null || die "tool exited early; its stderr:"$'\n'"$(cat "$1")"
        sleep 0.1
    done
    die "timed out waiting for '$2' in $1"
}

# Starts a tool (its argv), waits until it is recording; sets tool_pid.
# perf record says nothing when it starts: it gets a second to attach.
start_tool() {
    local err=$1 ready=$2
    shift 2
    "$@" 2>"$err" &
    tool_pid=$!
    if [[ -n $ready ]]; then
        wait_for_line "$err" "$ready" "$tool_pid"
    else
        sleep 1
        kill -0 "$tool_pid" 2>/dev/null || die "$1 exited early: $(cat "$err")"
    fi
}

stop_tool() {
    kill -INT "$tool_pid"
    wait "$tool_pid" || true
    tool_pid=
}

SAMPLING_CONFIGS='hs-49 hs-49-fp perf-49 perf-49-dwarf hs-999 hs-999-fp perf-999 perf-999-dwarf'
printf '#round\tconfig\tseconds\ttool_cpu_s\tevents\tusecs_op\tbytes\n' >"$results"
record() {
    local line
    line=$(printf '%s\t' "$@")
    echo "${line%$'\t'}" >>"$results"
    echo "  ${line%$'\t'}" >&2
}

# Part 1: sampling a busy machine for DURATION seconds.
run_sampling() {
    local r=$1 config=$2 out=$tmp/$2-$1 c0 c1 t0 t1 events bytes
    local hz=${config#*-} unwind=dwarf graph=-g
    hz=${hz%%-*}
    [[ $config == *-fp ]] && unwind=fp
    [[ $config == *-dwarf ]] && graph='--call-graph=dwarf'
    case $config in
    hs-*) start_tool "$out.err" '^hindsight-record: recording ' \
        "$recorder" --output "$out" --events cpu --frequency "$hz" --unwind "$unwind" ;;
    perf-*) start_tool "$out.err" '' perf record -F "$hz" -a "$graph" -o "$out.data" ;;
    esac
    t0=$(date +%s.%N)
    c0=$(cpu_seconds "$tool_pid")
    sleep "$DURATION"
    c1=$(cpu_seconds "$tool_pid")
    t1=$(date +%s.%N)
    stop_tool
    case $config in
    hs-*)
        events=$(grep -o 'cpu_sample [0-9]*' "$out.err" | awk '{ print $2 }')
        bytes=$(cat "$out"/{cpu_sample,stack,frame}/*.parquet | wc -c)
        ;;
    perf-*)
        events=$(perf report -i "$out.data" --stats 2>/dev/null | awk '/SAMPLE events:/ { print $3; exit }')
        bytes=$(wc -c <"$out.data")
        ;;
    esac
    record "$r" "$config" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" \
        "$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.3f", b - a }')" "${events:-0}" - "$bytes"
    ((KEEP)) || rm -rf "$out" "$out.data"
}

# Part 2: a context-switch storm under a tool.
run_storm() {
    local r=$1 config=$2 out=$tmp/$2-$1 c0=0 c1=0 usecs events=-
    case $config in
    hs-sched) start_tool "$out.err" '^hindsight-record: recording ' "$recorder" --output "$out" --events sched ;;
    hs-offcpu) start_tool "$out.err" '^hindsight-record: recording ' "$recorder" --output "$out" --events sched --off-cpu-stacks ;;
    hs-offcpu-fp) start_tool "$out.err" '^hindsight-record: recording ' "$recorder" --output "$out" --events sched --off-cpu-stacks --unwind fp ;;
    perf-sched-g) start_tool "$out.err" '' perf record -e sched:sched_switch -a -g -o "$out.data" ;;
    bare) ;;
    esac
    [[ -n $tool_pid ]] && c0=$(cpu_seconds "$tool_pid")
    usecs=$(taskset -c 0 perf bench sched pipe -l "$LOOPS" | awk '/usecs\/op/ { print $1 }')
    [[ -n $tool_pid ]] && c1=$(cpu_seconds "$tool_pid")
    [[ -n $tool_pid ]] && stop_tool
    case $config in
    hs-*) events=$(grep -o 'sched_switch [0-9]*' "$out.err" | awk '{ print $2 }') ;;
    perf-*) events=$(perf report -i "$out.data" --stats 2>/dev/null | awk '/SAMPLE events:/ { print $3; exit }') ;;
    esac
    record "$r" "$config" - "$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.3f", b - a }')" "${events:-0}" "$usecs" -
    ((KEEP)) || rm -rf "$out" "$out.data"
}

# Part 3: processes of a few binaries coming and going on every CPU.
blob=$tmp/blob
words=$tmp/words
churn() { # DURATION seconds; prints the processes started
    local end=$((SECONDS + DURATION)) w
    for ((w = 0; w < $(nproc); w++)); do
        (
            n=0
            while ((SECONDS < end)); do
                sha256sum "$blob" >/dev/null
                gzip -1 -c "$blob" >/dev/null
                sort "$words" >/dev/null
                awk '{ s += length($0) } END { print s }' "$words" >/dev/null
                python3 -c 'sum(range(300000))'
                n=$((n + 5))
            done
            echo "$n"
        ) &
    done | awk '{ s += $1 } END { print s }'
}

# Part 5: a real parallel build, `make -j<CPUs>` from clean of every C file of
# zstd's library, libbpf and zlib (the sources Cargo fetched for this tree's
# zstd-sys and libbpf-sys), `cc -O2 -g`, one object each: short-lived cc, cc1
# and as processes, a few hundred of them.
BUILD_COMMS='cc|cc1|as|make|sh|mkdir'
locked_crate() { # NAME: the directory of this tree's version of crate NAME in Cargo's registry
    local version
    version=$(awk -v n="name = \"$1\"" '$0 == n { getline; gsub(/version = |"/, ""); print; exit }' "$root/Cargo.lock")
    ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$1-$version" 2>/dev/null | head -1
}
build_makefile() { # writes $tmp/build.mk
    local zstd libbpf
    zstd=$(locked_crate zstd-sys)/zstd/lib
    libbpf=$(locked_crate libbpf-sys)
    [[ -d $zstd && -d $libbpf/libbpf/src && -d $libbpf/zlib ]] ||
        die "part build compiles zstd-sys's and libbpf-sys's C sources from Cargo's registry: run cargo fetch"
    cat >"$tmp/build.mk" <<MAKEFILE
ZSTD := \$(wildcard $zstd/common/*.c $zstd/compress/*.c $zstd/decompress/*.c $zstd/dictBuilder/*.c)
LIBBPF := \$(wildcard $libbpf/libbpf/src/*.c)
ZLIB := \$(wildcard $libbpf/zlib/*.c)
OBJS := \$(patsubst $zstd/%.c,\$(OBJ)/zstd/%.o,\$(ZSTD)) \$(patsubst $libbpf/libbpf/src/%.c,\$(OBJ)/libbpf/%.o,\$(LIBBPF)) \$(patsubst $libbpf/zlib/%.c,\$(OBJ)/zlib/%.o,\$(ZLIB))
all: \$(OBJS)
\$(OBJ)/zstd/%.o: $zstd/%.c
	@mkdir -p \$(dir \$@)
	cc -O2 -g -DZSTD_DISABLE_ASM -I$zstd -I$zstd/common -c \$< -o \$@
\$(OBJ)/libbpf/%.o: $libbpf/libbpf/src/%.c
	@mkdir -p \$(dir \$@)
	cc -O2 -g -D_LARGEFILE64_SOURCE -D_FILE_OFFSET_BITS=64 -I$libbpf/libbpf/include -I$libbpf/libbpf/include/uapi -c \$< -o \$@
\$(OBJ)/zlib/%.o: $libbpf/zlib/%.c
	@mkdir -p \$(dir \$@)
	cc -O2 -g -c \$< -o \$@
MAKEFILE
}
# Part 6: a Rust build, `cargo build -j<CPUs>` from clean of a small program
# using clap, regex and serde_json (this tree's versions, offline from Cargo's
# registry): rustc processes that map librustc_driver and libLLVM (15 MiB of
# unwind tables, 150 and 200 MB files), build scripts, cc and the linker.
RUST_COMMS='rustc|cargo|cc|ld|collect2|build-script-b'
rust_project() { # writes $tmp/rust-project
    local project=$tmp/rust-project
    mkdir -p "$project/src"
    cat >"$project/Cargo.toml" <<'TOML'
[package]
name = "churn-rust"
version = "0.1.0"
edition = "2021"

[dependencies]
clap = { version = "4", features = ["derive"] }
regex = "1"
serde_json = "1"
TOML
    cat >"$project/src/main.rs" <<'RUST'
use clap::Parser;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "a+")]
    pattern: String,
}

fn main() {
    let args = Args::parse();
    let matched = regex::Regex::new(&args.pattern).unwrap().is_match("aaa");
    println!("{}", serde_json::json!({ "matched": matched }));
}
RUST
    # This tree's lock: the same versions, found offline.
    cp "$root/Cargo.lock" "$project/"
}
rust() { # prints the pids the builds allocated (as build does)
    local first last max i
    max=$(cat /proc/sys/kernel/pid_max)
    first=$(cut -d ' ' -f 5 /proc/loadavg)
    for ((i = 0; i < BUILDS; i++)); do
        rm -rf "$tmp/rust-target"
        (cd "$tmp/rust-project" && CARGO_TARGET_DIR=$tmp/rust-target cargo build --offline -q -j"$(nproc)") \
            >/dev/null 2>"$tmp/rust.err" ||
            die "the Rust build (offline, from Cargo's registry: cargo fetch in $root first) failed: $(tail -5 "$tmp/rust.err")"
    done
    last=$(cut -d ' ' -f 5 /proc/loadavg)
    echo $(((last - first + max) % max))
}
build() { # prints the pids the builds allocated (their processes and threads, and anyone else's meanwhile)
    local first last max i
    max=$(cat /proc/sys/kernel/pid_max)
    first=$(cut -d ' ' -f 5 /proc/loadavg)
    for ((i = 0; i < BUILDS; i++)); do
        rm -rf "$tmp/build-obj"
        make -s -j"$(nproc)" -f "$tmp/build.mk" OBJ="$tmp/build-obj" >/dev/null 2>"$tmp/build.err" ||
            die "the build failed: $(tail -5 "$tmp/build.err")"
    done
    last=$(cut -d ' ' -f 5 /proc/loadavg)
    echo $(((last - first + max) % max))
}

sql_list() { # A|B|C: 'A', 'B', 'C', for SQL's IN
    echo "'$(sed "s/|/', '/g" <<<"$1")'"
}

# Parts 3 and 5: one run of a workload of short-lived processes (churn or
# build) under CONFIG (hs-*, perf-*, or bare-* with nothing recording), its
# figures appended to $churn_results. COMMS: the workload's programs, whose
# user frames' names are counted.
run_procs() { # ROUND CONFIG WORKLOAD COMMS
    local r=$1 config=$2 workload=$3 comms=$4 out=$tmp/$2-$1 c0=0 c1=0 t0 t1 started
    local events=- bytes=- named=- opened=- busy=-
    case $config in
    # counters too: the recorder's own counters (modules_opened) are there.
    hs-churn) start_tool "$out.err" '^hindsight-record: recording ' "$recorder" --output "$out" --events cpu,counters ;;
    # A build at the defaults (every always-on group), as a host records it.
    hs-build | hs-rust) start_tool "$out.err" '^hindsight-record: recording ' "$recorder" --output "$out" ;;
    perf-*) start_tool "$out.err" '' perf record -F 49 -a -g -o "$out.data" ;;
    esac
    # Past the tool's start (hindsight reads kallsyms, about 40 ms of CPU;
    # perf writes the running processes' maps): a recorder runs for days.
    if [[ -n $tool_pid ]]; then sleep 3; fi
    t0=$(date +%s.%N)
    if [[ -n $tool_pid ]]; then c0=$(cpu_seconds "$tool_pid"); fi
    started=$($workload)
    if [[ -n $tool_pid ]]; then c1=$(cpu_seconds "$tool_pid"); fi
    t1=$(date +%s.%N)
    if [[ -n $tool_pid ]]; then stop_tool; fi
    case $config in
    hs-*)
        events=$(grep -o 'cpu_sample [0-9]*' "$out.err" | awk '{ print $2 }')
        bytes=$(cat "$out"/{cpu_sample,stack,frame}/*.parquet | wc -c)
        if [[ -x $analyzer ]]; then
            named=$("$analyzer" sql "$out" -f csv \
                "SELECT round(100.0 * count(f.function) / count(*), 2) FROM cpu_sample s
                   JOIN stack k ON k.stack_id = s.stack_id JOIN frame f ON f.frame_id = k.frame_id
                 WHERE CAST(f.kind AS VARCHAR) = 'user' AND f.module IS NOT NULL
                   AND CAST(s.comm AS VARCHAR) IN ($(sql_list "$comms"))" | tail -1)
            opened=$("$analyzer" sql "$out" -f csv \
                "SELECT max(value) FROM counter WHERE source = 'recorder' AND name = 'modules_opened'" | tail -1)
            busy=$("$analyzer" sql "$out" -f csv \
                "SELECT round(max(value) / 1000.0, 1) FROM counter WHERE source = 'recorder' AND name = 'longest_busy_us'" | tail -1)
        fi
        ;;
    perf-*)
        events=$(perf report -i "$out.data" --stats 2>/dev/null | awk '/SAMPLE events:/ { print $3; exit }')
        bytes=$(wc -c <"$out.data")
        # The same share as hindsight's: user frames (not the kernel's) of
        # those processes' samples that perf names.
        named=$(perf script -i "$out.data" -F comm,ip,sym,dso 2>/dev/null | awk -v comms="^($comms)\$" '
            /^[^\t ]/ { comm = $1; next }
            /^\t/ && comm ~ comms && !/kernel\.kallsyms/ { n++; if (!/\[unknown\]/) named++ }
            END { if (n) printf "%.2f", 100 * named / n; else print "-" }')
        ;;
    esac
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$config" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" \
        "$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.3f", b - a }')" \
        "${events:--}" "$bytes" "$started" "$named" "$opened" "$busy" >>"$churn_results"
    echo "  $r $config events=$events bytes=$bytes started=$started named=$named% opened=$opened longest_busy_ms=$busy" >&2
    ((KEEP)) || rm -rf "$out" "$out.data"
}

# Part 4: a JVM's JIT-compiled methods, named or not.
jit_seconds=$((DURATION / 4 > 3 ? DURATION / 4 : 3))
jvm() { # host|container: runs the JVM, prints "HOST_PID MAIN_THREAD_CPU_NS"
    local java="java -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit -XX:CompileCommand=quiet"
    java+=" -XX:CompileCommand=dontinline,HbHot::hbHot*"
    local out=$tmp/jvm.out pid
    if [[ $1 == host ]]; then
        $java -cp "$tmp/classes" HbHot "$jit_seconds" >"$out" &
        pid=$!
    else
        unshare --pid --fork --mount --mount-proc sh -c "mount --make-rprivate / &&
            mount -t tmpfs hs-jvm-tmp /mnt && cp $tmp/classes/HbHot.class /mnt/ && mount --move /mnt /tmp &&
            exec $java -cp /tmp HbHot $jit_seconds" >"$out" &
        local i
        for ((i = 0; i < 100; i++)); do
            pid=$(cat "/proc/$!/task/$!/children" 2>/dev/null | tr -d ' ')
            [[ -n $pid ]] && break
            sleep 0.02
        done
    fi
    wait $! || die "the JVM failed"
    echo "$pid $(grep -o '"main_thread_cpu_ns":[0-9]*' "$out" | cut -d: -f2)"
}

run_jit() {
    local r=$1 config=$2 out=$tmp/$2-$1 where=${2##*-} jvm_pid cpu_ns alpha beta
    case $config in
    hs-*) start_tool "$out.err" '^hindsight-record: recording ' "$recorder" --output "$out" --events cpu --frequency 499 ;;
    perf-*) start_tool "$out.err" '' perf record -F 499 -a -g -o "$out.data" ;;
    esac
    read -r jvm_pid cpu_ns < <(jvm "$where")
    sleep 2 # the map written at exit is read within a second
    stop_tool
    case $config in
    hs-*)
        "$analyzer" flamegraph "$out" --on-cpu --pid "$jvm_pid" >"$out.folded"
        alpha=$(awk '{ w = $NF; sub(/ [0-9]+$/, ""); n = split($0, f, ";"); if (f[n] ~ /HbHot\.hbHotAlpha\(/) s += w } END { print s + 0 }' "$out.folded")
        beta=$(awk '{ w = $NF; sub(/ [0-9]+$/, ""); n = split($0, f, ";"); if (f[n] ~ /HbHot\.hbHotBeta\(/) s += w } END { print s + 0 }' "$out.folded")
        ;;
    perf-*)
        perf report -i "$out.data" --pid "$jvm_pid" --no-children --sort sym --stdio -g none \
            -F sample,sym 2>/dev/null >"$out.leaves"
        alpha=$(awk '/HbHot\.hbHotAlpha\(/ { s += $1 } END { print s + 0 }' "$out.leaves")
        beta=$(awk '/HbHot\.hbHotBeta\(/ { s += $1 } END { print s + 0 }' "$out.leaves")
        ;;
    esac
    rm -f "/tmp/perf-$jvm_pid.map"
    printf '%s\t%s\t%s\t%s\t%s\n' "$r" "$config" "$alpha" "$beta" "$cpu_ns" >>"$jit_results"
    echo "  $r $config alpha=$alpha beta=$beta main_thread_cpu_ns=$cpu_ns" >&2
    ((KEEP)) || rm -rf "$out" "$out.data" "$out.folded" "$out.leaves"
}
JIT_CONFIGS='hs-jit-host perf-jit-host hs-jit-container perf-jit-container'
jit_results=$tmp/jit.tsv
printf '#round\tconfig\talpha\tbeta\tmain_thread_cpu_ns\n' >"$jit_results"

# Part 3's both-churn: the functions perf names in the five programs' user
# frames, against hindsight's on the same run.
CHURN_COMMS='sha256sum|gzip|sort|awk|python3'
run_churn_both() {
    local r=$1 out=$tmp/both-churn-$1 hs_pid perf_pid
    [[ -x $analyzer ]] || return 0
    "$recorder" --output "$out" --events cpu,counters 2>"$out.err" &
    hs_pid=$!
    wait_for_line "$out.err" '^hindsight-record: recording ' "$hs_pid"
    perf record -F 49 -a -g -o "$out.data" 2>"$out.perf.err" &
    perf_pid=$!
    sleep 1
    churn >/dev/null
    kill -INT "$perf_pid" "$hs_pid"
    wait "$perf_pid" "$hs_pid" || true
    # `module:function count`, per user frame of the five programs' samples.
    perf script -i "$out.data" -F comm,ip,sym,dso 2>/dev/null | awk -v comms="^($CHURN_COMMS)\$" '
        /^[^\t ]/ { comm = $1; next }
        /^\t/ && comm ~ comms && !/kernel\.kallsyms/ && !/\[unknown\]/ {
            dso = $NF; gsub(/[()]/, "", dso); n = split(dso, parts, "/")
            sym = $0; sub(/^[\t ]*[0-9a-f]+ /, "", sym); sub(/ \([^()]*\)$/, "", sym)
            count[parts[n] ":" sym]++
        }
        END { for (k in count) print k "\t" count[k] }' | sort >"$out.perf.tsv"
    "$analyzer" sql "$out" -f csv \
        "SELECT regexp_replace(f.module, '.*/', '') || ':' || f.function AS f, count(*) AS n
         FROM cpu_sample s JOIN stack k ON k.stack_id = s.stack_id
         JOIN (SELECT frame_id, max(CAST(module AS VARCHAR)) AS module, max(function) AS function,
                      max(CAST(kind AS VARCHAR)) AS kind
               FROM frame GROUP BY frame_id) f ON f.frame_id = k.frame_id
         WHERE f.kind = 'user' AND f.function IS NOT NULL
           AND CAST(s.comm AS VARCHAR) IN ($(sql_list "$CHURN_COMMS"))
         GROUP BY 1" | tail -n +2 | sed 's/,\([0-9]*\)$/\t\1/' | sort >"$out.hs.tsv"
    # perf's functions (5+ frames) with hindsight's count beside, 0 if none.
    join -t $'\t' -a 1 -e 0 -o 0,1.2,2.2 "$out.perf.tsv" "$out.hs.tsv" |
        awk -F '\t' '$2 >= 5' >"$out.both.tsv"
    local functions missed
    functions=$(wc -l <"$out.both.tsv")
    missed=$(awk -F '\t' '$3 < $2 / 5' "$out.both.tsv" | wc -l)
    printf '%s\t%s\t%s\n' "$r" "$functions" "$missed" >>"$both_results"
    echo "  $r both-churn: $functions functions perf named 5+ times, $missed of them missed by hindsight" >&2
    awk -F '\t' -v r="$r" '$3 < $2 / 5 { print "  round " r " missed: " $1 " (perf " $2 ", hindsight " $3 ")" }' \
        "$out.both.tsv" >>"$both_missed"
    ((KEEP)) || rm -rf "$out" "$out.data"
}
both_results=$tmp/both.tsv
both_missed=$tmp/both-missed.txt
printf '#round\tfunctions_perf_named_5+\tmissed_by_hindsight\n' >"$both_results"
: >"$both_missed"

part() { [[ ,$PARTS, == *,$1,* ]]; }
churn_results=$tmp/churn.tsv
printf '#round\tconfig\tseconds\ttool_cpu_s\tsamples\tbytes\tprocesses\tnamed_pct\tmodules_opened\tlongest_busy_ms\n' >"$churn_results"
if part churn; then
    head -c $((4 << 20)) /dev/urandom >"$blob"
    seq 1 100000 | awk '{ print ($1 * 7919) % 100003 }' >"$words"
fi
if part churn || part build || part rust; then
    [[ -x $analyzer ]] || echo "no $analyzer: named % and modules opened are not read" >&2
fi
if part build; then build_makefile; fi
if part rust; then rust_project; fi
if part jit; then
    command -v javac >/dev/null || apt-get install -y default-jdk-headless
    [[ -x $analyzer ]] || die "part jit reads hindsight's recordings with $analyzer: build it"
    javac -d "$tmp/classes" "$root/tests/workloads/HbHot.java"
fi

load_start=$(cut -d ' ' -f 1-3 /proc/loadavg)
echo "kernel $(uname -r), $(nproc) CPUs; $ROUNDS rounds; load average $load_start" >&2
for ((round = 1; round <= ROUNDS; round++)); do
    if part sampling; then
        for ((c = 0; c < $(nproc); c++)); do
            sha256sum /dev/zero &
            burners+=($!)
        done
        for config in $SAMPLING_CONFIGS; do run_sampling "$round" "$config"; done
        kill "${burners[@]}" 2>/dev/null || true
        wait "${burners[@]}" 2>/dev/null || true
        burners=()
    fi
    if part storm; then
        for config in bare hs-sched hs-offcpu hs-offcpu-fp perf-sched-g; do run_storm "$round" "$config"; done
    fi
    if part churn; then
        for config in hs-churn perf-churn; do run_procs "$round" "$config" churn "$CHURN_COMMS"; done
        run_churn_both "$round"
    fi
    if part build; then
        for config in bare-build hs-build perf-build; do run_procs "$round" "$config" build "$BUILD_COMMS"; done
    fi
    if part rust; then
        for config in bare-rust hs-rust perf-rust; do run_procs "$round" "$config" rust "$RUST_COMMS"; done
    fi
    if part jit; then
        for config in $JIT_CONFIGS; do run_jit "$round" "$config"; done
    fi
done

median() { # column N of config C
    awk -v c="$1" -v n="$2" '$2 == c && $n != "-" { print $n }' "$results" | sort -g |
        awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
tree=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n ${RECORDER:-} ]] && tree="$tree (recorder: $RECORDER)"
echo
echo "Kernel $(uname -r), $(nproc) CPUs, perf $(perf version | awk '{ print $3 }'), hindsight at $tree; $ROUNDS interleaved rounds, medians; load average $load_start at the start, $(cut -d ' ' -f 1-3 /proc/loadavg) at the end."
if part sampling; then
echo
echo "CPU sampling, every CPU busy (\`sha256sum /dev/zero\` per CPU), ${DURATION} s per run:"
echo
echo "| config | tool CPU s | % of one CPU | samples | tool CPU µs per sample | bytes on disk | bytes per sample |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for c in $SAMPLING_CONFIGS; do
    cpu=$(median "$c" 4)
    secs=$(median "$c" 3)
    n=$(median "$c" 5)
    b=$(median "$c" 7)
    echo "| $c | $cpu | $(awk -v c="$cpu" -v s="$secs" 'BEGIN { printf "%.2f", 100 * c / s }') | $n | $(awk -v c="$cpu" -v n="$n" 'BEGIN { if (n > 0) printf "%.1f", 1e6 * c / n; else print "-" }') | $b | $(awk -v b="$b" -v n="$n" 'BEGIN { if (n > 0) printf "%.1f", b / n; else print "-" }') |"
done
fi
if part storm; then
echo
echo "Off-CPU stacks, context-switch storm (\`taskset -c 0 perf bench sched pipe -l $LOOPS\`):"
echo
bare=$(median bare 6)
echo "| config | usecs/op | added µs per switch | tool CPU s | sched_switch events | tool CPU µs per event |"
echo "|---|---:|---:|---:|---:|---:|"
for c in bare hs-sched hs-offcpu hs-offcpu-fp perf-sched-g; do
    us=$(median "$c" 6)
    cpu=$(median "$c" 4)
    n=$(median "$c" 5)
    echo "| $c | $us | $(awk -v u="$us" -v b="$bare" 'BEGIN { printf "%.2f", (u - b) / 2 }') | $cpu | $n | $(awk -v c="$cpu" -v n="$n" 'BEGIN { if (n > 0) printf "%.2f", 1e6 * c / n; else print "-" }') |"
done
fi
cmedian() { # column N of config C in the churn and build results
    awk -v c="$1" -v n="$2" '$2 == c && $n != "-" { print $n }' "$churn_results" | sort -g |
        awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
procs_table() { # CONFIG...: parts 3 and 5's medians, one row per config
    echo "| config | seconds | processes | samples | bytes on disk | bytes per sample | tool CPU s | % of one CPU | user frames named | modules opened | longest undrained ms |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    local c n b cpu secs named
    for c in "$@"; do
        n=$(cmedian "$c" 5)
        b=$(cmedian "$c" 6)
        cpu=$(cmedian "$c" 4)
        secs=$(cmedian "$c" 3)
        named=$(cmedian "$c" 8)
        echo "| $c | $secs | $(cmedian "$c" 7) | $n | $b | $(awk -v b="$b" -v n="$n" 'BEGIN { if (n > 0) printf "%.1f", b / n; else print "-" }') | $cpu | $(awk -v c="$cpu" -v s="$secs" 'BEGIN { printf "%.2f", 100 * c / s }') | $([[ $named == - ]] && echo - || echo "$named %") | $(cmedian "$c" 9) | $(cmedian "$c" 10) |"
    done
}
if part churn; then
    echo
    echo "Stacks where processes come and go (a loop per CPU starting sha256sum, gzip, sort, awk and python3), ${DURATION} s per run, 49 Hz:"
    echo
    procs_table hs-churn perf-churn
fi
if part build; then
    echo
    echo "A parallel build (make -j$(nproc), cc -O2 -g, every C file of zstd's library, libbpf and zlib, from clean; $BUILDS a run, one after another); hindsight at the defaults, perf at 49 Hz; processes: pids allocated during the builds:"
    echo
    procs_table bare-build hs-build perf-build
fi
if part rust; then
    echo
    echo "A Rust build (cargo build -j$(nproc) from clean of a program using clap, regex and serde_json; $BUILDS a run); hindsight at the defaults, perf at 49 Hz:"
    echo
    procs_table bare-rust hs-rust perf-rust
fi
if part churn; then
    echo
    echo "The same processes under both (both-churn): functions perf named in 5 or more of the five programs' user frames, and those hindsight named less than a fifth as often:"
    echo
    echo '```'
    column -t "$both_results"
    cat "$both_missed"
    echo '```'
fi
if part jit; then
    jmedian() { # column N of config C in the JIT results
        awk -v c="$1" -v n="$2" '$2 == c { print $n }' "$jit_results" | sort -g |
            awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
    }
    echo
    echo "A JVM's JIT-compiled methods (tests/workloads/HbHot.java, work in 3 : 1, ${jit_seconds} s, -XX:+DumpPerfMapAtExit), 499 Hz:"
    echo
    echo "| config | samples named hbHotAlpha | named hbHotBeta | ratio | named, % of main thread CPU × 499 |"
    echo "|---|---:|---:|---:|---:|"
    for c in $JIT_CONFIGS; do
        a=$(jmedian "$c" 3)
        b=$(jmedian "$c" 4)
        ns=$(jmedian "$c" 5)
        echo "| $c | $a | $b | $(awk -v a="$a" -v b="$b" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }') | $(awk -v a="$a" -v b="$b" -v ns="$ns" 'BEGIN { if (ns > 0) printf "%.1f", 100 * (a + b) / (ns / 1e9 * 499); else print "-" }') |"
    done
fi
echo
echo "Raw results (one line per run):"
echo
echo '```'
if part sampling || part storm; then column -t "$results"; fi
if part churn || part build || part rust; then column -t "$churn_results"; fi
if part jit; then column -t "$jit_results"; fi
echo '```'
