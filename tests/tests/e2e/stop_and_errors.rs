use std::{fs, os::unix::process::CommandExt, path::Path, process::Command};

use crate::fixture::{
    bin, pingpong, run, settle, shared, sql, sql_count, steal_seconds, Recorder, Scratch,
};

/// Every file under a recording: no temporaries, and every Parquet file
/// opens with a standard reader and has rows.
fn assert_only_complete_files(rec: &Path) -> usize {
    let mut parquet_files = 0;
    for table in fs::read_dir(rec)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
    {
        for file in fs::read_dir(table.path()).unwrap().flatten() {
            let name = file.file_name().into_string().unwrap();
            assert!(
                !name.starts_with('.'),
                "leftover temporary {}",
                file.path().display()
            );
            let reader = parquet::file::reader::SerializedFileReader::new(
                fs::File::open(file.path()).unwrap(),
            )
            .unwrap_or_else(|e| panic!("{} is not readable: {e}", file.path().display()));
            use parquet::file::reader::FileReader;
            assert!(
                reader.metadata().file_metadata().num_rows() > 0,
                "{} is empty",
                file.path().display()
            );
            parquet_files += 1;
        }
    }
    parquet_files
}

#[test]
fn sigint_in_the_middle_of_a_chunk_leaves_only_complete_files() {
    let _machine = shared();
    let scratch = Scratch::new();
    let rec = scratch.rec();
    // A chunk far longer than the run: the stop always lands mid-chunk.
    let recorder = Recorder::start(&rec, &["--chunk", "10m"]);
    // Stopped right after the workload: what the kernel still holds at
    // the SIGINT is drained, not dropped.
    let truth = pingpong(3_000);
    let log = recorder.stop();
    assert!(log.contains("wrote "), "{log}");
    assert!(
        assert_only_complete_files(&rec) >= 3,
        "sched_switch, sched_wakeup and process files expected"
    );
    let meta: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(rec.join("recording.json")).unwrap()).unwrap();
    assert!(
        meta["sessions"][0]["stopped"].is_string(),
        "the session records its clean stop: {meta}"
    );
    for child in truth["children"].as_array().unwrap() {
        let tid = child["tid"].as_i64().unwrap();
        let kernel = child["voluntary"].as_i64().unwrap() + child["nonvoluntary"].as_i64().unwrap();
        let q = format!("SELECT count(*) AS n FROM sched_switch WHERE prev_tid = {tid}");
        assert_eq!(sql_count(&rec, &q), kernel, "{child}");
    }
}

/// Milliseconds from the first row of `table` to its last.
fn span_ms(rec: &Path, table: &str) -> i64 {
    sql_count(
        rec,
        &format!(
            "SELECT (CAST(max(ts) AS BIGINT) - CAST(min(ts) AS BIGINT)) / 1000000 FROM {table}"
        ),
    )
}

#[test]
fn duration_ends_the_recording_and_a_second_run_appends_a_session() {
    let _machine = shared();
    let scratch = Scratch::new();
    let rec = scratch.rec();
    let steal_before = steal_seconds();
    Recorder::start(&rec, &["--duration", "1s"]).finish();
    let stolen_ms = ((steal_seconds() - steal_before) * 1000.0) as i64;
    let first = sql_count(&rec, "SELECT count(*) AS n FROM sched_switch");
    // It recorded for that second, not an instant nor on and on. A second
    // the hypervisor takes from the machine passes on every clock of it:
    // that much more is no fault of ours. (CI once saw 11 s of switches:
    // the stop's wait for a task's free, which the next test pins down.)
    let span_ms = span_ms(&rec, "sched_switch");
    assert!(
        (900..=1500 + stolen_ms).contains(&span_ms),
        "switches over {span_ms} ms ({stolen_ms} ms stolen by the hypervisor meanwhile)"
    );
    Recorder::start(&rec, &["--duration", "1s"]).finish();
    let both = sql_count(&rec, "SELECT count(*) AS n FROM sched_switch");
    assert!(both > first && first > 0, "{first} then {both}");
    let meta: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(rec.join("recording.json")).unwrap()).unwrap();
    assert_eq!(meta["sessions"].as_array().unwrap().len(), 2);
    assert_only_complete_files(&rec);
}

#[test]
fn a_stop_that_waits_for_a_tasks_free_records_nothing_after_its_end() {
    let _machine = shared();
    let scratch = Scratch::new();
    let rec = scratch.rec();
    let steal_before = steal_seconds();
    // A kernel whose frees never come: with sched_process_free hidden,
    // every process that ends while recording stays in the `exited` map,
    // as those RCU holds back do on a loaded machine, so the stop waits
    // its 10 s for them.
    let recorder = Recorder::start_with_env(
        &rec,
        &["--duration", "2s"],
        &[("HINDSIGHT_TEST_HIDE_TRACEPOINTS", "sched_process_free")],
    );
    let started = std::time::Instant::now();
    pingpong(1_000);
    recorder.finish();
    let ran = started.elapsed();
    let stolen_ms = ((steal_seconds() - steal_before) * 1000.0) as i64;
    // The stop did wait (10 s) for the frees, and says they never came:
    // at least pingpong and its two children.
    assert!(ran.as_secs_f64() > 8.0, "the stop took {ran:?}");
    let not_freed = sql_count(
        &rec,
        "SELECT coalesce(sum(lost), 0) FROM loss WHERE source = 'not_freed:task_stat'",
    );
    assert!(not_freed >= 3, "{:?}", sql(&rec, "SELECT * FROM loss"));
    // The wait is the stop's, not the recording's: the timers' rounds it
    // passed over are not `late:` losses (a 2 s recording has at most two
    // rounds a timer could genuinely miss; the 10 s wait made 8-10 each).
    let late = sql(
        &rec,
        "SELECT source, sum(lost) AS n FROM loss WHERE source LIKE 'late:%' GROUP BY source",
    );
    assert!(
        late.iter().all(|r| r["n"].as_i64().unwrap() <= 2),
        "{late:?}"
    );
    // And the events stopped at the two seconds asked for.
    for table in ["sched_switch", "sched_wakeup"] {
        let span_ms = span_ms(&rec, table);
        assert!(
            (1_900..=2_500 + stolen_ms).contains(&span_ms),
            "{table} over {span_ms} ms ({stolen_ms} ms stolen by the hypervisor meanwhile)"
        );
    }
}

#[test]
fn a_missing_tracepoint_is_skipped_with_a_warning_and_the_rest_records() {
    let _machine = shared();
    let scratch = Scratch::new();
    let rec = scratch.rec();
    let recorder = Recorder::start_with_env(
        &rec,
        &[],
        &[("HINDSIGHT_TEST_HIDE_TRACEPOINTS", "sched_wakeup_new")],
    );
    assert!(
        recorder
            .log
            .contains("warning: tracepoint sched:sched_wakeup_new is missing"),
        "{}",
        recorder.log
    );
    pingpong(1_000); // forks two children: each would have a sched_wakeup_new
    settle();
    recorder.stop();
    let meta: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(rec.join("recording.json")).unwrap()).unwrap();
    assert_eq!(
        meta["sessions"][0]["skipped_probes"],
        serde_json::json!(["sched:sched_wakeup_new"])
    );
    assert_eq!(
        sql_count(
            &rec,
            "SELECT count(*) AS n FROM sched_wakeup WHERE new_task"
        ),
        0
    );
    assert!(sql_count(&rec, "SELECT count(*) AS n FROM sched_wakeup") > 1_000);
    assert!(
        sql_count(
            &rec,
            "SELECT count(*) AS n FROM process WHERE event = 'fork'"
        ) >= 2
    );
}

#[test]
fn new_tasks_are_woken_with_sched_wakeup_new() {
    let _machine = shared();
    let scratch = Scratch::new();
    let rec = scratch.rec();
    let recorder = Recorder::start(&rec, &[]);
    let truth = pingpong(100);
    settle();
    recorder.stop();
    for child in truth["children"].as_array().unwrap() {
        let tid = child["tid"].as_i64().unwrap();
        let q = format!("SELECT count(*) AS n FROM sched_wakeup WHERE new_task AND tid = {tid}");
        assert_eq!(sql_count(&rec, &q), 1, "{child}");
    }
}

/// The one-line error a refused start prints, and its exit code.
fn refused(command: &mut Command) -> (i32, String) {
    let out = run(command);
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert_eq!(
        stderr.lines().count(),
        1,
        "one line expected, got:\n{stderr}"
    );
    (out.status.code().expect("exited, not killed"), stderr)
}

#[test]
fn setups_that_cannot_work_are_refused_with_one_clear_line() {
    let _machine = shared();
    let scratch = Scratch::new();

    // Not root: the unprivileged user `nobody`.
    let out_dir = scratch.dir.path().join("as-nobody");
    let (code, message) = refused(
        Command::new(bin("hindsight-record"))
            .arg("-o")
            .arg(&out_dir)
            .uid(65534)
            .gid(65534),
    );
    assert_eq!(code, 3, "{message}");
    assert!(
        message.contains("needs root") && message.contains("CAP_BPF"),
        "{message}"
    );
    assert!(
        !out_dir.exists(),
        "nothing is created before the privilege check"
    );

    // Not root, but only /proc to read: it records, and says in one line
    // what it goes without (the final counters of processes that end).
    fs::set_permissions(
        scratch.dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let owned = scratch.dir.path().join("nobody-owns");
    fs::create_dir(&owned).unwrap();
    std::os::unix::fs::chown(&owned, Some(65534), Some(65534)).unwrap();
    let rec = owned.join("rec");
    let out = run(Command::new(bin("hindsight-record"))
        .arg("-o")
        .arg(&rec)
        .args([
            "--events",
            "counters,tasks",
            "--task-interval",
            "1s",
            "-d",
            "1s",
        ])
        .uid(65534)
        .gid(65534));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning")).collect();
    assert!(
        warnings.len() == 1
            && warnings[0].contains("needs root")
            && warnings[0].contains("final counters"),
        "{stderr}"
    );
    assert!(sql_count(&rec, "SELECT count(*) AS n FROM task_stat") > 0);

    // A directory that holds other things.
    let foreign = scratch.dir.path().join("foreign");
    fs::create_dir(&foreign).unwrap();
    fs::write(foreign.join("notes.txt"), "keep me").unwrap();
    let (code, message) = refused(
        Command::new(bin("hindsight-record"))
            .arg("-o")
            .arg(&foreign)
            .args(["-d", "1s"]),
    );
    assert_eq!(code, 2, "{message}");
    assert!(
        message.contains("not a hindsight recording") && message.contains("foreign"),
        "{message}"
    );
    assert_eq!(
        fs::read_dir(&foreign).unwrap().count(),
        1,
        "the foreign directory is untouched"
    );

    // Directories that another user could write into: whoever can plant a
    // link there could make a root recorder overwrite any file.
    for (name, owner, mode, says) in [
        ("theirs", 65534, 0o750, "owned by uid 65534"),
        (
            "shared",
            0,
            0o777,
            "writable by its group or others (mode 777)",
        ),
    ] {
        let dir = scratch.dir.path().join(name);
        fs::create_dir(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(owner), None).unwrap();
        fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
        let (code, message) = refused(
            Command::new(bin("hindsight-record"))
                .arg("-o")
                .arg(&dir)
                .args(["-d", "1s"]),
        );
        assert_eq!(code, 2, "{message}");
        assert!(
            message.contains(name) && message.contains(says),
            "{message}"
        );
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            0,
            "{name} was written into"
        );
    }

    // An event group that does not exist.
    let (code, message) = refused(
        Command::new(bin("hindsight-record"))
            .arg("-o")
            .arg(scratch.rec())
            .args(["--events", "sched,bogus"]),
    );
    assert_eq!(code, 2, "{message}");
    assert!(message.contains("unknown event group 'bogus'"), "{message}");
}

/// Links planted where a root recorder writes or reads (the lock,
/// recording.json's temporary, a table's journal and Parquet temporary)
/// are replaced or passed over: the file they point to is untouched, and
/// the recorder records.
#[test]
fn links_planted_in_a_recording_are_never_followed() {
    use hindsight_schemas::layout;
    use std::os::unix::fs::symlink;
    let _machine = shared();
    let scratch = Scratch::new();
    let victim = scratch.dir.path().join("victim");
    fs::write(&victim, "precious").unwrap();
    let rec = scratch.rec();
    fs::create_dir(&rec).unwrap();
    symlink(&victim, rec.join(layout::LOCK_FILE)).unwrap();
    let record = || {
        let out = run(Command::new(bin("hindsight-record"))
            .arg("-o")
            .arg(&rec)
            .args(["--events", "sched", "-d", "1s"]));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        sql_count(&rec, "SELECT count(*) FROM sched_switch")
    };
    let first = record();
    assert!(first > 0);
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");

    let chunk = layout::chunk_file_name(0, 1);
    let table = rec.join("sched_switch");
    for link in [
        rec.join(layout::temp_file_name(layout::RECORDING_FILE)),
        table.join(layout::journal_file_name(&chunk)),
        table.join(layout::temp_file_name(&chunk)),
    ] {
        symlink(&victim, link).unwrap();
    }
    let second = record();
    assert!(
        second > first,
        "{second} switches after a second run of {first}"
    );
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
    let meta = fs::read_to_string(rec.join(layout::RECORDING_FILE)).unwrap();
    assert_eq!(meta.matches("\"started\"").count(), 2, "{meta}");
}

/// Perf maps planted where a JIT's would be (anyone can write to `/tmp`):
/// a FIFO (a reader would block forever), another user's file and a sparse
/// file of a terabyte. The recorder names nothing from them, counts each,
/// and still records and stops in time; the map a process wrote itself
/// names its code.
#[cfg(target_arch = "x86_64")]
#[test]
fn perf_maps_that_are_traps_neither_block_nor_name_anything() {
    use std::{process::Stdio, time::Duration};
    let _machine = shared();
    let scratch = Scratch::new();
    let rec = scratch.rec();
    let recorder = Recorder::start(&rec, &["--events", "cpu,counters", "--frequency", "199"]);
    // Every map covers all of user space, so any JIT address would match.
    let plant = |pid: u32, kind: &str| {
        let path = format!("/tmp/perf-{pid}.map");
        match kind {
            "fifo" => {
                let fifo = std::ffi::CString::new(path).unwrap();
                // SAFETY: mkfifo reads the NUL-terminated path we own.
                assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o666) }, 0);
            }
            "foreign" => {
                fs::write(&path, "0 7fffffffffff planted_by_someone_else\n").unwrap();
                std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
            }
            "huge" => {
                fs::write(&path, "0 7fffffffffff read_a_terabyte\n").unwrap();
                fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_len(1 << 40)
                    .unwrap();
            }
            _ => fs::write(&path, "0 7fffffffffff jitted_by_itself\n").unwrap(),
        }
    };
    // Before each one's 500 ms pause ends: the map is there before any sample.
    let jits: Vec<(&str, std::process::Child)> = ["fifo", "foreign", "huge", "own"]
        .into_iter()
        .map(|kind| {
            let child = Command::new(bin("hs-load"))
                .args(["jit", "2"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            plant(child.id(), kind);
            (kind, child)
        })
        .collect();
    // The workloads live until the recorder has stopped (it names every
    // frame before it exits): their maps are read through their /proc
    // entries however far behind the symbolizer is.
    std::thread::sleep(Duration::from_secs(3));
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(recorder.pid(), libc::SIGINT) };
    let (status, log) = recorder.exit_within(Duration::from_secs(60));
    let mut pids = Vec::new();
    for (kind, mut jit) in jits {
        drop(jit.stdin.take());
        let pid = jit.id();
        let out = jit.wait_with_output().unwrap();
        let _ = fs::remove_file(format!("/tmp/perf-{pid}.map"));
        assert!(out.status.success(), "{kind}");
        pids.push((kind, pid));
    }
    assert!(status.success(), "{log}");

    for (kind, pid) in pids {
        let leaves = sql(
            &rec,
            &format!(
                "SELECT f.function, count(*) AS n FROM cpu_sample s \
                 JOIN stack k ON k.stack_id = s.stack_id AND k.depth = 0 \
                 JOIN frame f ON f.frame_id = k.frame_id \
                 WHERE s.pid = {pid} AND f.module IS NULL AND CAST(f.kind AS VARCHAR) = 'user' \
                 GROUP BY f.function"
            ),
        );
        let samples: i64 = leaves.iter().map(|r| r["n"].as_i64().unwrap()).sum();
        assert!(
            samples > 50,
            "{kind}: {samples} samples with the JIT code as leaf"
        );
        let named: Vec<_> = leaves.iter().filter(|r| !r["function"].is_null()).collect();
        if kind == "own" {
            assert!(
                named.iter().all(|r| r["function"] == "jitted_by_itself") && !named.is_empty(),
                "{kind}: {leaves:?}"
            );
        } else {
            assert!(
                named.is_empty(),
                "{kind}: named from a planted map: {leaves:?}"
            );
        }
    }
    let refused = sql_count(
        &rec,
        "SELECT CAST(max(value) AS BIGINT) FROM counter WHERE source = 'recorder' AND name = 'perf_maps_refused'",
    );
    assert_eq!(refused, 3, "the planted maps counted\n{log}");
    assert!(log.contains("perf map not read"), "{log}");
}
