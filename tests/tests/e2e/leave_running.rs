use std::{
    collections::BTreeMap,
    fs,
    path::Path,
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use hindsight_schemas::layout;

use crate::fixture::{
    bin, quiet, run, settle, shared, sql_count, stat_fields, utc_now_ns, Recorder, Scratch,
};

/// Bytes of every file under a recording (closed chunks, the open chunk's
/// temporaries, recording.json), and the bytes of each closed chunk slice
/// (all tables' files of one roll share a name).
/// Bytes under the recording, the closed chunks' sizes by name, and the
/// bytes of the open chunk's journals (counted in the total too).
fn disk_use(rec: &Path) -> (u64, BTreeMap<String, u64>, u64) {
    let mut total = 0;
    let mut journals = 0;
    let mut slices = BTreeMap::new();
    for entry in fs::read_dir(rec).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            for file in fs::read_dir(&path).into_iter().flatten().flatten() {
                // A file can be renamed or retired between listing and stat.
                let Ok(meta) = file.metadata() else { continue };
                total += meta.len();
                let name = file.file_name().to_string_lossy().into_owned();
                if layout::is_chunk_file(&name) {
                    *slices.entry(name).or_insert(0) += meta.len();
                } else if layout::chunk_of_journal(&name).is_some() {
                    journals += meta.len();
                }
            }
        } else if let Ok(meta) = entry.metadata() {
            total += meta.len();
        }
    }
    (total, slices, journals)
}

fn recording_json(rec: &Path) -> serde_json::Value {
    serde_json::from_str(&fs::read_to_string(rec.join("recording.json")).unwrap()).unwrap()
}

#[test]
fn a_size_budget_holds_while_recording_and_keeps_the_newest_data() {
    // Exclusive: the fault storm would overrun other tests' recorders.
    let _machine = quiet();
    let scratch = Scratch::new();
    let rec = scratch.rec();
    const BUDGET: u64 = 8 << 20;
    let recorder = Recorder::start(
        &rec,
        &[
            "--events",
            "sched,counters,faults",
            "--chunk",
            "1s",
            "--max-size",
            "8MiB",
        ],
    );
    // Page faults at random addresses by the million: ~6 B a row on disk.
    // At nice 19 the recorder gets the CPU it needs to write them.
    let storm = Command::new("nice")
        .args(["-n", "19"])
        .arg(bin("hs-load"))
        .args(["fault-storm", "45", "512"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let storm_pid = storm.id();
    let mut largest_slice = 0u64;
    let mut checks = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(46) {
        let (total, slices, journals) = disk_use(&rec);
        largest_slice = largest_slice.max(slices.values().copied().max().unwrap_or(0));
        checks.push((total, journals));
        thread::sleep(Duration::from_millis(100));
    }
    let storm = storm.wait_with_output().unwrap();
    assert!(storm.status.success());
    let storm_end = utc_now_ns();
    settle();
    let log = recorder.stop();
    let (total, slices, journals) = disk_use(&rec);
    largest_slice = largest_slice.max(slices.values().copied().max().unwrap_or(0));
    checks.push((total, journals));

    // The storm's own pid runs the faults (the nice wrapper execs it).
    let meta = recording_json(&rec);
    let retired = meta["retired"].as_array().cloned().unwrap_or_default();
    let retired_bytes: u64 = retired.iter().map(|r| r["bytes"].as_u64().unwrap()).sum();
    assert!(
        // About 2.5x on an idle 2-CPU machine with the debug build; the
        // encoder, not the workload, sets the pace.
        retired_bytes + total > 3 * BUDGET / 2,
        "the workload must write well past the budget: retired {retired_bytes} B, left {total} B\n{log}"
    );
    // Everything on disk counts: closed chunks, the open chunk's journal
    // and its unfinished Parquet file, recording.json.
    let worst = checks.iter().map(|(t, _)| *t).max().unwrap();
    let worst_journal = checks.iter().map(|(_, j)| *j).max().unwrap();
    eprintln!(
        "retention: wrote {} B against a {BUDGET} B budget; worst of {} checks {worst} B, largest chunk {largest_slice} B, largest journal {worst_journal} B, {total} B left",
        retired_bytes + total,
        checks.len()
    );
    assert!(
        worst <= BUDGET + largest_slice,
        "disk use {worst} B exceeded {BUDGET} B + one chunk ({largest_slice} B) in {} checks",
        checks.len()
    );
    assert!(
        largest_slice < BUDGET / 2,
        "chunks are small: {largest_slice} B"
    );
    // And it deleted no more than it had to: what is left falls short of
    // the budget by at most the room kept for the open chunk (its journal
    // and Parquet file at their peak) and the one slice that a deletion
    // overshoots by.
    assert!(
        total + 2 * largest_slice + worst_journal >= BUDGET,
        "{total} B left of a {BUDGET} B budget (largest chunk {largest_slice} B, journal {worst_journal} B)"
    );
    for entry in &retired {
        assert_eq!(entry["reason"], "max-size", "{entry}");
        // As times, not as text: RFC 3339 drops a whole second's fraction,
        // and "…37Z" sorts after "…37.93Z".
        let time = |key: &str| {
            chrono::DateTime::parse_from_rfc3339(entry[key].as_str().unwrap())
                .unwrap_or_else(|e| panic!("{key} of {entry}: {e}"))
        };
        assert!(time("from") < time("to"), "{entry}");
        assert_ne!(
            entry["table"], "process",
            "a reference table went first: {entry}"
        );
    }
    assert!(retired.iter().any(|r| r["table"] == "page_fault"));

    // The newest data is there: the storm's last second and its switches.
    let last_fault = sql_count(
        &rec,
        &format!("SELECT CAST(max(ts) AS BIGINT) AS t FROM page_fault WHERE pid = {storm_pid}"),
    );
    assert!(
        storm_end - last_fault < 2_000_000_000,
        "the last fault recorded is {} ms before the storm ended",
        (storm_end - last_fault) / 1_000_000
    );
    assert!(
        sql_count(
            &rec,
            &format!("SELECT count(*) AS n FROM sched_switch WHERE prev_pid = {storm_pid}")
        ) > 0
    );
    // ...and so is what names it: the process table kept its first chunk.
    assert!(
        sql_count(
            &rec,
            "SELECT count(*) AS n FROM process WHERE event = 'scan'"
        ) > 0
    );
}

#[test]
fn max_age_retires_chunks_older_than_the_limit() {
    let _machine = shared();
    let scratch = Scratch::new();
    let rec = scratch.rec();
    let recorder = Recorder::start(
        &rec,
        &["--events", "sched", "--chunk", "1s", "--max-age", "3s"],
    );
    thread::sleep(Duration::from_secs(8));
    let stopped = utc_now_ns();
    recorder.stop();

    let meta = recording_json(&rec);
    let retired = meta["retired"].as_array().cloned().unwrap_or_default();
    let by_age: Vec<_> = retired
        .iter()
        .filter(|r| r["reason"] == "max-age" && r["table"] == "sched_switch")
        .collect();
    assert!(!by_age.is_empty(), "{meta}");
    // Chunks that started over 3 s before the last pass (at the stop, just
    // after `stopped`) are gone, and the 1 s chunks after them kept: the
    // oldest switch left is 2-3 s old, give or take the stop's own time and
    // a row read just after the chunk it happened in had closed.
    let oldest = sql_count(
        &rec,
        "SELECT CAST(min(ts) AS BIGINT) AS t FROM sched_switch",
    );
    assert!(
        (1_500_000_000..=3_200_000_000).contains(&(stopped - oldest)),
        "oldest switch kept is {} ms before the stop, want 1500-3200 ms",
        (stopped - oldest) / 1_000_000
    );
    // The reference table is not aged out: the start's scan rows stay.
    assert!(
        sql_count(
            &rec,
            "SELECT count(*) AS n FROM process WHERE event = 'scan'"
        ) > 0
    );
}

#[test]
fn a_second_recorder_on_the_same_directory_is_refused_and_a_dead_ones_lock_is_not() {
    let _machine = shared();
    let scratch = Scratch::new();
    let rec = scratch.rec();
    let first = Recorder::start(&rec, &["--events", "counters"]);
    let out = run(Command::new(bin("hindsight-record"))
        .arg("-o")
        .arg(&rec)
        .args(["--events", "counters", "-d", "1s"]));
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!("another hindsight-record (pid {})", first.pid())),
        "{stderr}"
    );
    assert_eq!(
        recording_json(&rec)["sessions"].as_array().unwrap().len(),
        1,
        "the refused recorder wrote nothing"
    );

    // kill -9 leaves the lock file with a dead pid in it: no obstacle.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(first.pid(), libc::SIGKILL) };
    drop(first);
    assert!(rec.join(layout::LOCK_FILE).exists());
    Recorder::start(&rec, &["--events", "counters", "-d", "1s"]).finish();
    assert_eq!(
        recording_json(&rec)["sessions"].as_array().unwrap().len(),
        2
    );
}

/// The capabilities the systemd unit grants, read from the unit itself.
fn service_capabilities() -> Vec<String> {
    let unit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dist/hindsight-record.service");
    let text = fs::read_to_string(&unit).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("AmbientCapabilities="))
        .expect("the unit grants ambient capabilities");
    let bounding = text
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("the unit bounds capabilities");
    assert_eq!(line, bounding, "the unit grants exactly what it bounds");
    line.split_whitespace().map(str::to_string).collect()
}

#[test]
fn the_service_capability_set_records_everything_as_a_non_root_user() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    let _machine = shared();
    let caps = service_capabilities();
    assert_eq!(
        caps,
        [
            "CAP_BPF",
            "CAP_PERFMON",
            "CAP_SYS_PTRACE",
            "CAP_DAC_READ_SEARCH",
            "CAP_SYS_NICE"
        ]
    );
    // `nobody` with exactly those capabilities, as systemd's DynamicUser
    // with AmbientCapabilities runs it.
    let scratch = Scratch::new();
    fs::set_permissions(scratch.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let state = scratch.dir.path().join("state");
    fs::create_dir(&state).unwrap();
    let nobody = 65534;
    std::os::unix::fs::chown(&state, Some(nobody), Some(nobody)).unwrap();
    let rec = state.join("rec");
    let set = format!(
        "-all,{}",
        caps.iter()
            .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut setpriv = Command::new("setpriv");
    setpriv
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(format!("--inh-caps={set}"))
        .arg(format!("--ambient-caps={set}"))
        .arg(format!("--bounding-set={set}"))
        .arg(bin("hindsight-record"));
    let recorder = Recorder::start_command(setpriv, &rec, &["--task-interval", "1s"]);
    let recorder_pid = recorder.pid();
    let status = fs::read_to_string(format!("/proc/{recorder_pid}/status")).unwrap();
    assert!(status.contains("Uid:\t65534"), "{status}");
    // CAP_SYS_NICE: the drain (the main thread) took nice -10, the writer
    // kept the process's 0 (a thread's nice is field 19 of its stat).
    let nice_of = |tid: &str| {
        stat_fields(&format!("/proc/{recorder_pid}/task/{tid}/stat"))[16]
            .parse::<i32>()
            .unwrap()
    };
    assert_eq!(nice_of(&recorder_pid.to_string()), -10);
    let writer = fs::read_dir(format!("/proc/{recorder_pid}/task"))
        .unwrap()
        .flatten()
        .map(|t| t.file_name().to_string_lossy().into_owned())
        .find(|tid| {
            fs::read_to_string(format!("/proc/{recorder_pid}/task/{tid}/comm"))
                .is_ok_and(|c| c.trim() == "hindsight-write")
        })
        .expect("a writer thread");
    assert_eq!(nice_of(&writer), 0);
    let truth = crate::fixture::pingpong(2_000);
    thread::sleep(Duration::from_millis(1500));
    let log = recorder.stop();
    assert!(!log.contains("warning"), "{log}");

    for child in truth["children"].as_array().unwrap() {
        let tid = child["tid"].as_i64().unwrap();
        let kernel = child["voluntary"].as_i64().unwrap() + child["nonvoluntary"].as_i64().unwrap();
        let q = format!("SELECT count(*) AS n FROM sched_switch WHERE prev_tid = {tid}");
        assert_eq!(sql_count(&rec, &q), kernel, "{child}");
    }
    // Root's /proc/<pid>/io (this test runs as root) needs CAP_SYS_PTRACE
    // and CAP_DAC_READ_SEARCH: with both, I/O counters are there.
    let me = std::process::id();
    assert!(
        sql_count(
            &rec,
            &format!("SELECT count(read_bytes) AS n FROM task_stat WHERE pid = {me}")
        ) > 0
    );
    assert!(
        sql_count(
            &rec,
            "SELECT count(*) AS n FROM process WHERE cmdline IS NOT NULL"
        ) > 0
    );
    let process_dir = rec.join("process");
    let file = fs::read_dir(&process_dir)
        .unwrap()
        .flatten()
        .next()
        .unwrap();
    let meta = file.metadata().unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (nobody, 0o640));
    assert_eq!(fs::metadata(&rec).unwrap().mode() & 0o777, 0o750);
}
