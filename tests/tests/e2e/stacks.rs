use std::{
    collections::{HashMap, HashSet},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread,
    time::Duration,
};

use arrow::{
    array::{Array, AsArray},
    datatypes::{Int32Type, Int64Type},
};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::fixture::{bin, quiet, run, shared, sql, sql_count, Recorder, Scratch};

const FREQUENCY: u32 = 499;

/// Compiles the `hs_stacks` workload with frame pointers and symbols: the
/// kernel walks off-CPU stacks by frame pointers only, and cargo has no
/// stable per-binary way to ask for them.
fn build_workload(dir: &Path) -> PathBuf {
    build_workload_as(dir, "hs-stacks")
}

/// [`build_workload`] with `metadata` for `-C metadata`: a binary whose
/// build id no other test's copy shares. Frames are identified by build id
/// and offset, so a frame the recorder named in one copy is named in every
/// copy sampled in the same (system-wide) recording.
fn build_workload_as(dir: &Path, metadata: &str) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin/hs_stacks.rs");
    let exe = dir.join("hs-stacks");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    compile(
        Command::new(rustc).args([
            "--edition",
            "2021",
            "-C",
            "force-frame-pointers=yes",
            "-C",
            "opt-level=1",
            "-C",
            &format!("metadata={metadata}"),
            "-g",
            "-o",
        ]),
        &source,
        exe,
    )
}

/// Runs `compiler` (its flags given, ending in `-o`) on `source` into
/// `exe`, which it returns; a failed compile fails the test with its output.
fn compile(compiler: &mut Command, source: &Path, exe: PathBuf) -> PathBuf {
    let out = run(compiler.arg(&exe).arg(source));
    assert!(
        out.status.success(),
        "compiling {}: {}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// `hindsight flamegraph REC ARGS` as (folded stack, weight) pairs.
fn folded(rec: &Path, args: &[&str]) -> Vec<(String, i64)> {
    let out = run(Command::new(bin("hindsight"))
        .arg("flamegraph")
        .arg(rec)
        .args(args));
    assert!(
        out.status.success(),
        "hindsight flamegraph {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let (stack, weight) = line.rsplit_once(' ').expect("`stack weight`");
            (
                stack.to_string(),
                weight.parse().expect("an integer weight"),
            )
        })
        .collect()
}

/// A frame is the function, demangled with its module path (`hs_stacks::name`).
fn is_function(frame: &str, name: &str) -> bool {
    frame == name || frame.ends_with(&format!("::{name}"))
}

fn weight_of(lines: &[(String, i64)], function: &str) -> i64 {
    lines
        .iter()
        .filter(|(stack, _)| stack.split(';').any(|f| is_function(f, function)))
        .map(|(_, w)| w)
        .sum()
}

/// The samples of a workload's on-CPU stacks against the CPU time the
/// kernel charged it (`truth`'s `cpu_ticks` from /proc/self/stat) at
/// FREQUENCY: within 15 %. Returns (samples, expected).
fn assert_samples_match_cpu_time(
    on_cpu: &[(String, i64)],
    truth: &serde_json::Value,
) -> (i64, f64) {
    let cpu_seconds =
        truth["cpu_ticks"].as_f64().unwrap() / truth["ticks_per_second"].as_f64().unwrap();
    let expected = f64::from(FREQUENCY) * cpu_seconds;
    let samples: i64 = on_cpu.iter().map(|(_, w)| w).sum();
    assert!(
        (samples as f64 / expected - 1.0).abs() <= 0.15,
        "{samples} samples for {cpu_seconds} s of CPU at {FREQUENCY} Hz (want {expected:.0} ± 15 %)"
    );
    (samples, expected)
}

/// The stack ids of `pid`'s samples, per `cpu_sample` file.
fn stack_ids_per_file(rec: &Path, pid: i64) -> Vec<HashSet<i64>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(rec.join("cpu_sample")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "parquet") {
            continue;
        }
        let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).unwrap())
            .unwrap()
            .build()
            .unwrap();
        let mut ids = HashSet::new();
        for batch in reader {
            let batch = batch.unwrap();
            let schema = batch.schema();
            let pids = batch
                .column(schema.index_of("pid").unwrap())
                .as_primitive::<Int32Type>();
            let stacks = batch
                .column(schema.index_of("stack_id").unwrap())
                .as_primitive::<Int64Type>();
            for row in 0..batch.num_rows() {
                if i64::from(pids.value(row)) == pid && !stacks.is_null(row) {
                    ids.insert(stacks.value(row));
                }
            }
        }
        files.push(ids);
    }
    files
}

#[test]
fn stacks_of_a_process_that_exited_are_named_and_weighed() {
    // Off-CPU time is measured against a 10 % bound, and a stack on every
    // switch of a machine busy with the other tests' storms fills the ring.
    let _machine = quiet();
    let scratch = Scratch::new();
    let exe = build_workload(scratch.dir.path());
    let rec = scratch.rec();
    let frequency = FREQUENCY.to_string();
    let recorder = Recorder::start(
        &rec,
        &[
            "--events",
            "sched,cpu",
            "--frequency",
            &frequency,
            "--off-cpu-stacks",
            "--chunk",
            "1s",
            "--ring-size",
            "64M",
        ],
    );
    let out =
        run(Command::new(&exe).args(["--burn-ms", "3000", "--naps", "10", "--nap-ms", "100"]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let truth: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The workload is gone well before the recording ends.
    thread::sleep(Duration::from_secs(2));
    recorder.stop();

    let pid = truth["pid"].as_i64().unwrap();
    let pid_flag = pid.to_string();
    let on_cpu = folded(&rec, &["--on-cpu", "--pid", &pid_flag]);
    let three = weight_of(&on_cpu, "burn_three_parts");
    let one = weight_of(&on_cpu, "burn_one_part");
    assert!(three > 0 && one > 0, "both functions named: {on_cpu:?}");
    let ratio = three as f64 / one as f64;
    assert!(
        (ratio / 3.0 - 1.0).abs() <= 0.15,
        "samples in burn_three_parts : burn_one_part = {three} : {one} = {ratio:.2}, want 3 ± 15 %"
    );
    let (samples, expected) = assert_samples_match_cpu_time(&on_cpu, &truth);

    let off_cpu = folded(&rec, &["--off-cpu", "--pid", &pid_flag]);
    let asleep = weight_of(&off_cpu, "sleep_in_named_function");
    let slept = truth["slept_ns"].as_i64().unwrap();
    eprintln!(
        "on-CPU {three}:{one} = {ratio:.3}; {samples} samples, expected {expected:.0}; off-CPU {asleep} ns vs slept {slept} ns"
    );
    assert!(
        (asleep as f64 / slept as f64 - 1.0).abs() <= 0.10,
        "off-CPU ns under sleep_in_named_function: {asleep}, slept {slept} ns (± 10 %): {off_cpu:?}"
    );
    // The kernel side of those stacks is named too: the scheduler.
    let sleeping: Vec<_> = off_cpu
        .iter()
        .filter(|(s, _)| {
            s.split(';')
                .any(|f| is_function(f, "sleep_in_named_function"))
        })
        .collect();
    assert!(
        sleeping.iter().all(|(s, _)| s
            .split(';')
            .any(|f| f == "schedule_[k]" || f == "__schedule_[k]"))
            && !sleeping.is_empty(),
        "kernel frames named: {sleeping:?}"
    );

    // libc is named too (perf names it from .dynsym and the installed debug
    // file; Debian compresses that file's DWARF): every libc frame of the
    // recording, and the leaf of the workload's naps through libc (its
    // nanosleep or clock_nanosleep: a user frame, not the kernel's
    // do_nanosleep_[k], which its own inline naps also show).
    let libc = sql(
        &rec,
        // A frame the symbolizer was too busy for is written unnamed, and
        // again named when next seen: readers take the named row.
        "SELECT count(*) AS frames, sum(CASE WHEN named = 0 THEN 1 ELSE 0 END) AS unnamed
         FROM (SELECT frame_id, count(function) AS named FROM frame
               WHERE CAST(module AS VARCHAR) LIKE '%/libc.so.6' GROUP BY frame_id)",
    );
    let frames = libc[0]["frames"].as_i64().unwrap();
    assert!(frames > 0, "no libc frame in the recording");
    let unnamed_libc = || {
        sql(
            &rec,
            "SELECT frame_id, any_value(file_offset) AS file_offset, any_value(address) AS address
             FROM frame WHERE CAST(module AS VARCHAR) LIKE '%/libc.so.6'
             GROUP BY frame_id HAVING count(function) = 0",
        )
    };
    assert_eq!(
        libc[0]["unnamed"].as_i64(),
        Some(0),
        "{frames} libc frames, unnamed: {:?}",
        unnamed_libc()
    );
    assert!(
        off_cpu.iter().any(|(s, _)| s
            .split(';')
            .any(|f| f.contains("nanosleep") && !f.ends_with("_[k]"))),
        "no off-CPU stack has libc's nanosleep as a user frame: {off_cpu:?}"
    );

    // It exited before the recording stopped, and still has names (above).
    let exits = sql(
        &rec,
        &format!("SELECT ts FROM process WHERE pid = {pid} AND tid = {pid} AND event = 'exit'"),
    );
    assert_eq!(exits.len(), 1, "the workload's exit was recorded");

    // The same stack in different chunks has the same id.
    let burning: HashSet<i64> = sql(
        &rec,
        "SELECT DISTINCT s.stack_id FROM stack s JOIN frame f ON f.frame_id = s.frame_id \
         WHERE f.function LIKE '%burn_three_parts'",
    )
    .iter()
    .map(|r| r["stack_id"].as_i64().unwrap())
    .collect();
    let mut files_per_stack: HashMap<i64, usize> = HashMap::new();
    for ids in stack_ids_per_file(&rec, pid) {
        for id in ids.intersection(&burning) {
            *files_per_stack.entry(*id).or_default() += 1;
        }
    }
    assert!(
        files_per_stack.values().any(|&n| n >= 2),
        "a burn_three_parts stack seen in two chunks under one id: {files_per_stack:?}"
    );
}

/// A program stripped of its symbols, as shipped, leaves the recorder
/// nothing to name its frames with; given its separate debug file (found by
/// build id under `--debug-dir`, where perf and gdb find them), the analyzer
/// names them as it reads, with file and line, and changes nothing on disk.
#[test]
fn a_stripped_programs_frames_are_named_at_read_time_from_a_debug_dir() {
    let _machine = shared();
    let scratch = Scratch::new();
    let exe = build_workload_as(scratch.dir.path(), "hs-stacks-stripped");
    let readelf = run(Command::new("readelf").arg("-n").arg(&exe));
    let notes = String::from_utf8_lossy(&readelf.stdout);
    let build_id = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("the linker gives the workload a build id: {notes}"))
        .to_string();
    let debug_dir = scratch.dir.path().join("debug");
    let debug_file = debug_dir
        .join(".build-id")
        .join(&build_id[..2])
        .join(format!("{}.debug", &build_id[2..]));
    std::fs::create_dir_all(debug_file.parent().unwrap()).unwrap();
    for args in [
        vec![
            "--only-keep-debug".into(),
            exe.clone().into_os_string(),
            debug_file.clone().into_os_string(),
        ],
        vec!["--strip-all".into(), exe.clone().into_os_string()],
    ] {
        let out = run(Command::new("objcopy").args(&args));
        assert!(
            out.status.success(),
            "objcopy {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let rec = scratch.rec();
    let frequency = FREQUENCY.to_string();
    let recorder = Recorder::start(&rec, &["--events", "cpu", "--frequency", &frequency]);
    let out = run(Command::new(&exe).args(["--burn-ms", "1500", "--naps", "1", "--nap-ms", "10"]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let truth: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    thread::sleep(Duration::from_millis(500));
    recorder.stop();

    let pid = truth["pid"].as_i64().unwrap().to_string();
    let debug = debug_dir.to_str().unwrap();
    let bare = folded(&rec, &["--on-cpu", "--pid", &pid]);
    let named = folded(&rec, &["--on-cpu", "--pid", &pid, "--debug-dir", debug]);
    assert_eq!(
        weight_of(&bare, "burn_three_parts") + weight_of(&bare, "burn_one_part"),
        0,
        "the recorder had nothing to name them with: {bare:?}"
    );
    let (three, one) = (
        weight_of(&named, "burn_three_parts"),
        weight_of(&named, "burn_one_part"),
    );
    let total = |lines: &[(String, i64)]| lines.iter().map(|(_, w)| w).sum::<i64>();
    assert!(three > 0 && one > 0, "named from the debug file: {named:?}");
    assert_eq!(total(&bare), total(&named), "the same samples, only named");
    assert!(
        three + one >= total(&named) * 8 / 10,
        "most samples burn in the two functions: {named:?}"
    );

    // File and line come from the debug file's DWARF; the recording is unchanged.
    let query = format!(
        "SELECT function, file, line FROM frame WHERE build_id = '{build_id}' \
         AND function LIKE '%burn_three_parts'"
    );
    let rows = run(Command::new(bin("hindsight"))
        .args(["sql", "--debug-dir", debug, "--format", "json"])
        .arg(&rec)
        .arg(&query));
    let rows = String::from_utf8_lossy(&rows.stdout);
    let first: serde_json::Value = serde_json::from_str(
        rows.lines()
            .next()
            .unwrap_or_else(|| panic!("no named frame: {rows}")),
    )
    .unwrap();
    assert!(
        first["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("hs_stacks.rs"))
            && first["line"].as_i64() > Some(0),
        "{first}"
    );
    assert!(sql(&rec, &query).is_empty(), "nothing named on disk");
}

/// Runs the frame-pointer workload `exe` for `burn_ms` of CPU as a process
/// in its own mount namespace (as in a container), at `path`, where the
/// host has another file: `/usr/bin/true`. Returns its own account.
fn run_in_own_mount_namespace(exe: &Path, path: &Path, burn_ms: u32) -> serde_json::Value {
    std::fs::copy("/usr/bin/true", path).unwrap();
    let out = run(Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "mount --bind '{}' '{}' && exec '{}' --burn-ms {burn_ms} --naps 1 --nap-ms 10",
            exe.display(),
            path.display(),
            path.display()
        )));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Checks that most of `pid`'s on-CPU samples, at least `least`, are in
/// frames named `burn_three_parts` (a quarter are in `burn_one_part`).
/// `context` ends the message of a failure.
fn assert_burning_named(rec: &Path, pid: &str, least: i64, context: &str) {
    let on_cpu = folded(rec, &["--on-cpu", "--pid", pid]);
    let burning = weight_of(&on_cpu, "burn_three_parts");
    let total: i64 = on_cpu.iter().map(|(_, w)| w).sum();
    // The heaviest stacks only: the whole list cut the count off CI's log.
    let mut heaviest = on_cpu;
    heaviest.sort_by_key(|(_, w)| -w);
    heaviest.truncate(5);
    assert!(
        total >= least && burning * 2 > total,
        "{burning} of {total} samples named burn_three_parts; heaviest stacks: {heaviest:?}; {context}"
    );
}

/// A process in its own mount namespace (as in a container) runs a binary
/// where the host has another file at the same path: its frames are named
/// from its own file, read through `/proc/<pid>/root`, and carry its build
/// id, not the host file's.
#[test]
fn a_binary_in_another_mount_namespace_is_named_from_its_own_file() {
    let _machine = shared();
    let scratch = Scratch::new();
    let exe = build_workload(scratch.dir.path());
    let path = scratch.dir.path().join("prog");
    let rec = scratch.rec();
    let recorder = Recorder::start(&rec, &["--events", "cpu", "--frequency", "499"]);
    let truth = run_in_own_mount_namespace(&exe, &path, 1500);
    recorder.stop();
    assert_burning_named(&rec, &truth["pid"].to_string(), 100, "");
    let build_id = |file: &Path| {
        let out = run(Command::new("readelf").arg("-n").arg(file));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.split("Build ID: ")
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    let recorded = sql(
        &rec,
        &format!(
            "SELECT DISTINCT build_id FROM frame WHERE module = '{}'",
            path.display()
        ),
    );
    assert_eq!(
        recorded,
        [serde_json::json!({ "build_id": build_id(&exe) })],
        "the host file's build id is {}",
        build_id(&path)
    );
}

/// A short container job that exits while the symbolizer is still busy
/// with another program's debug info (here the debug analyzer's, 300 MB):
/// by the time its frames are named its root is gone with it, and they
/// are named from its file, held open since its samples were drained.
/// Read only through the root, 0 of 64, 64 and 67 samples were named
/// A loaded CI machine failed the test above once, its message cut off:
/// most likely this.
#[test]
fn a_container_job_that_exits_before_the_symbolizer_reaches_it_is_named() {
    // Alone: the other tests' recorders, system-wide too, would have the
    // same large binary to name, and their JIT frames wait behind it.
    let _machine = quiet();
    let scratch = Scratch::new();
    let exe = build_workload_as(scratch.dir.path(), "exits-before-naming");
    let path = scratch.dir.path().join("prog");
    let rec = scratch.rec();
    let recorder = Recorder::start(&rec, &["--events", "cpu", "--frequency", "499"]);
    // Samples of a large debug binary: the symbolizer reads its symbols.
    let mut busy = Command::new(bin("hindsight"))
        .arg("sql")
        .arg(&rec)
        .arg("SELECT count(*) FROM cpu_sample")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let truth = run_in_own_mount_namespace(&exe, &path, 100);
    let _ = busy.wait();
    let stopping = std::time::Instant::now();
    recorder.stop();
    // What the recorder could not name is in the recording, though it
    // recorded samples alone (`--events cpu`, no system counters).
    let own = sql(
        &rec,
        "SELECT CAST(name AS VARCHAR) AS name, max(value) AS n FROM counter
         WHERE source = 'recorder' AND name IN ('frames_unnamed_at_stop', 'modules_opened')
         GROUP BY name ORDER BY name",
    );
    assert_eq!(own.len(), 2, "the recorder's own counters: {own:?}");
    assert!(own[1]["n"].as_i64() > Some(0), "{own:?}");
    let stop = format!(
        "the stop took {:?}, frames left unnamed at it: {}",
        stopping.elapsed(),
        own[0]["n"]
    );
    eprintln!("a container job of 100 ms beside the debug analyzer's start: {stop}");
    assert_burning_named(&rec, &truth["pid"].to_string(), 25, &stop);
}

/// Runs `runs` short processes of the frame-pointer workload, each as
/// `wrap` starts it (nothing, or `unshare` into its own mount namespace),
/// under a recorder sampling at [`FREQUENCY`]; then checks that every frame
/// in the binary in their samples is named, that each offset in it has one
/// frame row, and that the recorder opened fewer modules than half the
/// runs (one parse a process would be at least `runs`). Returns the
/// modules opened.
fn short_processes_of_one_binary(runs: usize, wrap: &[&str]) -> i64 {
    let scratch = Scratch::new();
    let exe = build_workload(scratch.dir.path());
    let rec = scratch.rec();
    let frequency = FREQUENCY.to_string();
    let recorder = Recorder::start(
        &rec,
        &["--events", "cpu,counters", "--frequency", &frequency],
    );
    let mut pids = Vec::new();
    for _ in 0..runs {
        let mut command = match wrap {
            [] => Command::new(&exe),
            [first, rest @ ..] => {
                let mut c = Command::new(first);
                c.args(rest).arg(&exe);
                c
            }
        };
        let out = run(command.args(["--burn-ms", "40", "--naps", "0"]));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let truth: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        pids.push(truth["pid"].as_i64().unwrap().to_string());
    }
    thread::sleep(Duration::from_secs(2));
    recorder.stop();

    let module = exe.to_str().unwrap();
    let pids = pids.join(", ");
    let frames = sql(
        &rec,
        &format!(
            "SELECT count(*) AS frames, count(f.function) AS named, count(DISTINCT s.pid) AS processes,
               count(DISTINCT CASE WHEN f.function LIKE '%burn_three_parts' THEN s.pid END) AS burning
             FROM cpu_sample s JOIN stack k ON k.stack_id = s.stack_id
               JOIN frame f ON f.frame_id = k.frame_id
             WHERE s.pid IN ({pids}) AND f.module = '{module}'"
        ),
    );
    let get = |c: &str| frames[0][c].as_i64().unwrap();
    eprintln!(
        "{runs} runs {wrap:?}: {} frames in the binary in samples of {} processes, {} named; {} burning",
        get("frames"),
        get("processes"),
        get("named"),
        get("burning")
    );
    assert!(get("processes") >= runs as i64 / 2, "{frames:?}");
    assert_eq!(
        get("named"),
        get("frames"),
        "every frame in the binary named: {frames:?}"
    );
    // Each burns 40 ms, some 20 samples: every one of them is named
    // burning, its memory map read while it ran (the first samples of a
    // process wake the recorder; it used to read them at its next drain,
    // up to 100 ms on, when most were gone and their frames anonymous).
    assert!(get("burning") >= runs as i64 * 9 / 10, "{frames:?}");
    // The samples taken before a process's execve (in `unshare`, or in
    // the test's fork) are in a program whose map was gone before the
    // recorder read it: their frames are left unnamed, counted apart.
    let comm: String = exe
        .file_name()
        .unwrap()
        .to_string_lossy()
        .chars()
        .take(15)
        .collect();
    let user = sql(
        &rec,
        &format!(
            "SELECT count(*) AS frames, count(*) - count(f.module) AS anonymous,
               count(CASE WHEN s.comm <> '{comm}' THEN 1 END) AS before_exec
             FROM cpu_sample s JOIN stack k ON k.stack_id = s.stack_id
               JOIN (SELECT frame_id, max(module) AS module, max(CAST(kind AS VARCHAR)) AS kind
                     FROM frame GROUP BY frame_id) f ON f.frame_id = k.frame_id
             WHERE s.pid IN ({pids}) AND f.kind = 'user' AND (s.comm = '{comm}' OR f.module IS NULL)"
        ),
    );
    let get = |c: &str| user[0][c].as_i64().unwrap();
    let (before_exec, anonymous) = (get("before_exec"), get("anonymous") - get("before_exec"));
    let user_frames = get("frames") - before_exec;
    eprintln!(
        "{anonymous} of {user_frames} user frames of {comm} in no known mapping; \
         {before_exec} unnamed from before its execve"
    );
    // One process's frames left unnamed (its map read too late, or read
    // before its execve and kept) would be 3 % of them.
    assert!(
        anonymous * 200 <= user_frames,
        "{anonymous} of {user_frames} user frames in no mapping the recorder read"
    );
    // One frame row per offset in the binary, whichever process ran it,
    // and no one process's address for it.
    let rows = sql(
        &rec,
        &format!(
            "SELECT count(*) AS n, count(DISTINCT frame_id) AS ids,
                    count(DISTINCT file_offset) AS offsets, count(address) AS addresses
             FROM frame WHERE module = '{module}'"
        ),
    );
    assert_eq!(rows[0]["n"], rows[0]["ids"], "{rows:?}");
    assert_eq!(rows[0]["ids"], rows[0]["offsets"], "{rows:?}");
    assert_eq!(rows[0]["addresses"], 0, "{rows:?}");
    // The recorder's own count of modules it opened over the whole run:
    // opened again only where the symbolizer let go of modules (more than
    // 16 at once, idle, over its memory budget) and one came back.
    let opened = sql(
        &rec,
        "SELECT max(value) AS n FROM counter WHERE source = 'recorder' AND name = 'modules_opened'",
    )[0]["n"]
        .as_i64()
        .unwrap();
    let modules = sql_count(
        &rec,
        "SELECT count(DISTINCT module) AS n FROM frame WHERE CAST(kind AS VARCHAR) = 'user' AND module IS NOT NULL",
    );
    // How long the event loop left the rings undrained at worst, naming
    // and reading the memory maps of the new processes: reported here, and
    // by bench/stacks.sh beside perf.
    let busy_ms = sql(
        &rec,
        "SELECT max(value) / 1000.0 AS ms, count(*) AS rounds FROM counter
         WHERE source = 'recorder' AND name = 'longest_busy_us'",
    );
    eprintln!(
        "modules opened: {opened}, for {modules} modules named in; the loop's longest busy stretch {} ms over {} rounds",
        busy_ms[0]["ms"], busy_ms[0]["rounds"]
    );
    assert!(busy_ms[0]["rounds"].as_i64() > Some(2), "{busy_ms:?}");
    assert!(busy_ms[0]["ms"].as_f64() > Some(0.0), "{busy_ms:?}");
    // Once a process would be `runs` x `modules` opens; the symbolizer
    // lets go of every module after a second without new frames, so a run
    // opens each module again a few times however many processes there are
    // (17 for 30 processes and 6 modules, 20 for 60 and 5, when measured).
    assert!(
        opened * 4 < runs as i64 * modules,
        "{opened} modules opened for {runs} processes of one binary ({modules} modules named in)"
    );
    opened
}

/// A burst of short-lived processes of one binary (a build host's
/// compiler, a CI runner's test binaries): the binary is opened and parsed
/// once, not once a process, its frames are one set of rows for them all,
/// and every sample in it is named though each process is gone in a blink.
#[test]
fn short_lived_processes_of_one_binary_are_named_from_one_parse() {
    // Alone: the count of modules opened is the whole machine's, and other
    // tests' (or a build's) binaries sampled meanwhile make it hundreds.
    let _machine = quiet();
    short_processes_of_one_binary(60, &[]);
}

/// The same binary in many containers: each process in a mount namespace
/// of its own, whose files the recorder reads through its
/// `/proc/<pid>/root`, a path of its own. Known by its build id, the binary
/// (and libc, and the loader) is opened once, not once a container.
#[test]
fn one_binary_in_many_mount_namespaces_is_opened_once() {
    let _machine = quiet();
    short_processes_of_one_binary(30, &["unshare", "--mount", "--propagation", "private"]);
}

/// Compiles `tests/workloads/hb_omit_fp.c` as distributions build C:
/// optimized, without frame pointers.
fn build_c_without_frame_pointers(dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/hb_omit_fp.c");
    compile(
        Command::new("cc").args(["-O2", "-fomit-frame-pointer", "-g", "-o"]),
        &source,
        dir.join("hb-omit-fp"),
    )
}

/// The share of `lines`' weight whose stack holds `function`.
fn share_under(lines: &[(String, i64)], function: &str) -> f64 {
    let total: i64 = lines.iter().map(|(_, w)| w).sum();
    weight_of(lines, function) as f64 / total.max(1) as f64
}

#[test]
fn code_without_frame_pointers_is_unwound_to_main() {
    // Off-CPU time is measured against a 15 % bound with stacks on every
    // switch: the other tests' storms would fill the ring.
    let _machine = quiet();
    let scratch = Scratch::new();
    let exe = build_c_without_frame_pointers(scratch.dir.path());
    let frequency = FREQUENCY.to_string();
    // The default (--unwind dwarf) and frame pointers alone, side by side
    // on the same run of the workload.
    let (dwarf, fp) = (
        scratch.dir.path().join("dwarf"),
        scratch.dir.path().join("fp"),
    );
    let args = [
        "--events",
        "sched,cpu",
        "--frequency",
        &frequency,
        "--off-cpu-stacks",
        "--ring-size",
        "64M",
    ];
    let recorders = [
        Recorder::start(&dwarf, &args),
        Recorder::start(&fp, &[&args[..], &["--unwind", "fp"]].concat()),
    ];
    let out = run(Command::new(&exe).args(["2000", "10", "100"]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let truth: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    thread::sleep(Duration::from_secs(1));
    for recorder in recorders {
        recorder.stop();
    }

    let pid = truth["pid"].as_i64().unwrap().to_string();
    let on_cpu = folded(&dwarf, &["--on-cpu", "--pid", &pid]);
    let (alpha, beta) = (
        weight_of(&on_cpu, "hb_hot_alpha"),
        weight_of(&on_cpu, "hb_hot_beta"),
    );
    let ratio = alpha as f64 / beta.max(1) as f64;
    let under_main = share_under(&on_cpu, "main");
    let with_fp = folded(&fp, &["--on-cpu", "--pid", &pid]);
    let under_main_fp = share_under(&with_fp, "main");
    let off_cpu = folded(&dwarf, &["--off-cpu", "--pid", &pid]);
    let napped = weight_of(&off_cpu, "hb_nap_here");
    let napped_fp = weight_of(&folded(&fp, &["--off-cpu", "--pid", &pid]), "hb_nap_here");
    let slept = truth["slept_ns"].as_i64().unwrap();
    eprintln!(
        "hb_hot_alpha : hb_hot_beta = {alpha} : {beta} = {ratio:.2}; under main: {:.1} % unwound, {:.1} % by frame pointers; \
         off-CPU under hb_nap_here: {napped} ns unwound, {napped_fp} ns by frame pointers, slept {slept} ns",
        100.0 * under_main,
        100.0 * under_main_fp
    );
    assert!(
        (ratio / 3.0 - 1.0).abs() <= 0.2,
        "samples in hb_hot_alpha : hb_hot_beta = {ratio:.2}, want 3 ± 20 %: {on_cpu:?}"
    );
    assert!(
        under_main >= 0.9,
        "{:.1} % of the samples under main, want 90 %: {on_cpu:?}",
        100.0 * under_main
    );
    // Every frame from the leaf to the program's entry, named.
    assert!(
        on_cpu
            .iter()
            .any(|(s, _)| s.contains("_start;") && s.contains(";main;hb_hot_alpha")),
        "a whole stack from _start to hb_hot_alpha: {on_cpu:?}"
    );
    assert_samples_match_cpu_time(&on_cpu, &truth);
    // Its naps, in libc's nanosleep, under the function that slept.
    assert!(
        (napped as f64 / slept as f64 - 1.0).abs() <= 0.15,
        "off-CPU ns under hb_nap_here: {napped}, slept {slept} ns (± 15 %): {off_cpu:?}"
    );
    // What the test tells apart: frame pointers alone lose main, and the
    // function that slept.
    assert!(
        under_main_fp < 0.5,
        "with --unwind fp, {:.1} % under main: the workload kept its frame pointers?",
        100.0 * under_main_fp
    );
    assert!(
        (napped_fp as f64) < 0.5 * slept as f64,
        "with --unwind fp, {napped_fp} ns under hb_nap_here of {slept} ns slept"
    );
}

/// A real JVM (Debian's OpenJDK) run as a container runs it: in a pid
/// namespace of its own, where it is pid 1 and so writes
/// `/tmp/perf-1.map`, and with a `/tmp` of its own, a tmpfs that goes with
/// its mount namespace. Its two hot methods, compiled by the JIT, are named
/// from the perf map it writes as it exits (`-XX:+DumpPerfMapAtExit`), in
/// their 3:1 ratio of work, though it and its `/tmp` are gone before the
/// recording ends.
#[test]
fn a_jvms_hot_methods_are_named_from_the_perf_map_it_writes_as_it_exits() {
    let _machine = shared();
    let scratch = Scratch::new();
    let classes = scratch.dir.path().join("classes");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/HbHot.java");
    let javac = run(Command::new("javac").arg("-d").arg(&classes).arg(&source));
    assert!(
        javac.status.success(),
        "javac: {}",
        String::from_utf8_lossy(&javac.stderr)
    );
    let rec = scratch.rec();
    let frequency = FREQUENCY.to_string();
    let recorder = Recorder::start(&rec, &["--events", "cpu", "--frequency", &frequency]);
    // The class is copied into the new tmpfs, which then covers /tmp. C1
    // alone (`TieredStopAtLevel=1`): its code is final, where the tiered
    // JIT's first tiers are flushed once C2 takes over, and C2 starved of
    // CPU beside other tests took over late (a CI run had 771 of 842
    // samples in flushed code, so 71 left to weigh the two methods by).
    let container = format!(
        "mount --make-rprivate / && mount -t tmpfs hs-jvm-tmp /mnt && cp {}/HbHot.class /mnt/ \
         && mount --move /mnt /tmp && exec java -XX:+UnlockDiagnosticVMOptions \
         -XX:+DumpPerfMapAtExit -XX:TieredStopAtLevel=1 -XX:CompileCommand=quiet '-XX:CompileCommand=dontinline,HbHot::hbHot*' \
         -cp /tmp HbHot 3",
        classes.display()
    );
    let jvm = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount",
            "--mount-proc",
            "sh",
            "-c",
            &container,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("unshare runs");
    // The JVM's pid here: unshare's one child (sh, which execs java).
    let children = format!("/proc/{0}/task/{0}/children", jvm.id());
    let mut host_pid = String::new();
    for _ in 0..100 {
        host_pid = std::fs::read_to_string(&children)
            .unwrap_or_default()
            .trim()
            .to_string();
        if !host_pid.is_empty() {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let out = jvm.wait_with_output().unwrap();
    assert!(
        out.status.success() && !host_pid.is_empty(),
        "the JVM (pid {host_pid:?} here): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let truth: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        truth["pid"], 1,
        "the JVM is pid 1 in its namespace: {truth}"
    );
    // Gone, with its /tmp: the symbolizer reads the map it left each second.
    thread::sleep(Duration::from_secs(2));
    let log = recorder.stop();

    let on_cpu = folded(&rec, &["--on-cpu", "--pid", &host_pid]);
    let weight = |method: &str| -> i64 {
        on_cpu
            .iter()
            .filter(|(stack, _)| stack.split(';').any(|f| f.contains(method)))
            .map(|(_, w)| w)
            .sum()
    };
    let (alpha, beta) = (weight("HbHot.hbHotAlpha("), weight("HbHot.hbHotBeta("));
    let ratio = alpha as f64 / beta.max(1) as f64;
    // The main thread's CPU time, as the JVM read it: nearly all of it in
    // the two methods, once compiled.
    let expected = truth["main_thread_cpu_ns"].as_f64().unwrap() / 1e9 * f64::from(FREQUENCY);
    let share = (alpha + beta) as f64 / expected;
    // JIT code the map written at exit does not list: code compiled and
    // flushed again (before C1 alone, the tiers below C2: a CI run beside
    // other tests had 256 of 924 samples there, another 771 of 842).
    let flushed: i64 = on_cpu
        .iter()
        .filter(|(stack, _)| stack.ends_with(";StubRoutines (1);[unknown]"))
        .map(|(_, w)| w)
        .sum();
    let accounted = (alpha + beta + flushed) as f64 / expected;
    eprintln!(
        "JVM (pid {host_pid}, 1 in its namespace): hbHotAlpha : hbHotBeta = {alpha} : {beta} = {ratio:.2}; \
         {:.1} % of the main thread's CPU time at {FREQUENCY} Hz, {:.1} % with {flushed} samples \
         in JIT code no longer mapped",
        100.0 * share,
        100.0 * accounted
    );
    // The JIT compiles the two at its own pace, tier by tier: the CPU they
    // take is 3:1 only roughly (3.79 once, beside other tests). Names
    // swapped or missing would be 1:3 or 0.
    // What the recorder could not name, in its own words.
    let unnamed = sql(
        &rec,
        "SELECT name, max(value) AS n FROM counter WHERE source = 'recorder' \
         AND name IN ('frames_unnamed', 'jit_frames_let_go', 'perf_maps_refused') GROUP BY name",
    );
    assert!(
        (ratio / 3.0 - 1.0).abs() <= 0.3,
        "samples in hbHotAlpha : hbHotBeta = {alpha} : {beta}, want 3 ± 30 %: {on_cpu:?}\nthe recorder said: {log}\nits counters: {unnamed:?}"
    );
    assert!(
        (0.5..=1.15).contains(&share) && (0.8..=1.15).contains(&accounted),
        "{} samples name the two methods and {flushed} are in unmapped JIT code, {expected:.0} \
         expected from the main thread's CPU time: {on_cpu:?}",
        alpha + beta
    );
}

/// Compiles `tests/workloads/hb_clock_loop.c` as distributions build C.
fn build_clock_loop(dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/hb_clock_loop.c");
    compile(
        Command::new("cc").args(["-O2", "-fomit-frame-pointer", "-g", "-o"]),
        &source,
        dir.join("hb-clock-loop"),
    )
}

/// A program that reads the clock in a loop spends its samples in the
/// kernel's vDSO, which no file on disk holds: its frames are named from
/// the recorder's own copy of the image (as perf names them), and unwound
/// by its call frame information up to `main`.
#[test]
fn samples_in_the_vdso_are_named_and_unwound_to_main() {
    let _machine = shared();
    let scratch = Scratch::new();
    let exe = build_clock_loop(scratch.dir.path());
    let rec = scratch.rec();
    let frequency = FREQUENCY.to_string();
    let recorder = Recorder::start(&rec, &["--events", "cpu", "--frequency", &frequency]);
    let out = run(Command::new(&exe).arg("2"));
    assert!(out.status.success());
    let truth: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    recorder.stop();

    let pid = truth["pid"].as_i64().unwrap();
    let on_cpu = folded(&rec, &["--on-cpu", "--pid", &pid.to_string()]);
    let samples = sql(
        &rec,
        &format!(
            "SELECT count(*) AS total, count(v.stack_id) AS in_vdso FROM cpu_sample s
             LEFT JOIN (SELECT DISTINCT k.stack_id FROM stack k JOIN frame f ON f.frame_id = k.frame_id
                        WHERE CAST(f.module AS VARCHAR) = '[vdso]') v ON v.stack_id = s.stack_id
             WHERE s.pid = {pid}"
        ),
    );
    let (total, in_vdso) = (
        samples[0]["total"].as_i64().unwrap(),
        samples[0]["in_vdso"].as_i64().unwrap_or(0),
    );
    // Readers take a frame's named row. The workload's frames only:
    // other processes' samples may land in vDSO code no exported symbol
    // covers (the helper at the start of its .text that gettimeofday
    // calls), left unnamed as perf leaves it.
    let vdso_frames = sql(
        &rec,
        &format!(
            "SELECT frame_id, max(function) AS function, max(file_offset) AS file_offset FROM frame
             WHERE CAST(module AS VARCHAR) = '[vdso]' AND frame_id IN
               (SELECT k.frame_id FROM cpu_sample s JOIN stack k ON k.stack_id = s.stack_id
                WHERE s.pid = {pid})
             GROUP BY frame_id"
        ),
    );
    let unnamed = vdso_frames
        .iter()
        .filter(|f| f["function"].is_null())
        .count();
    let under_reader = share_under(&on_cpu, "hb_read_clock");
    let under_main = share_under(&on_cpu, "main");
    eprintln!(
        "{total} samples, {in_vdso} in the vDSO; vDSO frames {vdso_frames:?}; \
         {:.1} % under hb_read_clock, {:.1} % under main",
        100.0 * under_reader,
        100.0 * under_main
    );
    assert!(
        in_vdso as f64 >= 0.5 * total as f64,
        "{in_vdso} of {total} samples in the vDSO: {on_cpu:?}"
    );
    assert!(
        !vdso_frames.is_empty() && unnamed == 0,
        "vDSO frames without a name: {vdso_frames:?}"
    );
    assert!(
        under_main >= 0.95 && under_reader >= 0.9,
        "{:.1} % under main, {:.1} % under hb_read_clock: {on_cpu:?}",
        100.0 * under_main,
        100.0 * under_reader
    );
}

/// Processes shorter than the recorder's drain interval (100 ms), at the
/// default 49 Hz, where the sampler's ring is far from a quarter full: the
/// first samples of a process wake the recorder, which reads its memory map
/// while it runs. Read at the next drain instead, most of them were gone,
/// and their user frames in no mapping: 154 of 167 here (and 1,554 of
/// 2,497 samples of 150 `sort` runs had no user frame named); 2 of 549 now.
#[test]
fn samples_of_processes_shorter_than_a_drain_are_named() {
    let _machine = shared();
    let scratch = Scratch::new();
    let exe = build_clock_loop(scratch.dir.path());
    let rec = scratch.rec();
    let recorder = Recorder::start(&rec, &["--events", "cpu"]);
    let mut pids = Vec::new();
    for _ in 0..100 {
        let out = run(Command::new(&exe).arg("0.015"));
        assert!(out.status.success());
        let truth: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        pids.push(truth["pid"].as_i64().unwrap().to_string());
    }
    recorder.stop();
    let user = sql(
        &rec,
        &format!(
            "SELECT count(DISTINCT s.ts) AS samples, count(*) AS frames,
               count(*) - count(f.module) AS anonymous, count(f.function) AS named
             FROM cpu_sample s JOIN stack k ON k.stack_id = s.stack_id
               JOIN (SELECT frame_id, max(module) AS module, max(function) AS function,
                            max(CAST(kind AS VARCHAR)) AS kind
                     FROM frame GROUP BY frame_id) f ON f.frame_id = k.frame_id
             WHERE s.pid IN ({}) AND f.kind = 'user'",
            pids.join(", ")
        ),
    );
    let get = |c: &str| user[0][c].as_i64().unwrap();
    eprintln!(
        "{} samples of 100 processes of 15 ms at 49 Hz: {} user frames, {} in no known mapping, {} named",
        get("samples"),
        get("frames"),
        get("anonymous"),
        get("named")
    );
    // A few may still be lost where the recorder, on a busy machine, wakes
    // after the process has gone (6 of 238 beside the other tests).
    assert!(get("samples") >= 20, "{user:?}");
    assert!(
        get("anonymous") * 10 <= get("frames"),
        "user frames in no mapping the recorder read: {user:?}"
    );
}
