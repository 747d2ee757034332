//! `slice`: the slice answers the window's queries as the source does; the
//! `--pid` rule; names from before the window; refusals; DuckDB reads it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use hindsight::Recording;
use hindsight_schemas::meta::Retired;
use hindsight_schemas::tables::{PAGE_FAULT, PROCESS, SCHED_SWITCH, SCHED_WAKEUP};
use hindsight_schemas::{ColumnType, Table, TABLES};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{json, Value};

use crate::fixture::{hindsight, meta, stderr, stdout, t, Fixture, Rec};
use crate::report::atop_recording_of;
use crate::sql::query_csv;

/// The window every test cuts: 40 s to 50 s into the fixture.
const FROM: &str = "2023-11-14T22:14:00Z";
const TO: &str = "2023-11-14T22:14:10Z";

/// Threads of the fixture's processes: (pid, tid, comm).
const THREADS: [(i64, i64, &str); 5] = [
    (100, 100, "burner"),
    (100, 101, "burner-w"),
    (200, 200, "sleeper"),
    (300, 300, "late"),
    (0, 0, "swapper"),
];

/// The atop fixture (counters, task snapshots, a loss; 61 s) plus
/// switches and wakeups in two chunks each, faults, and process rows
/// before, in and after the window; two sessions, one long before the
/// window, and a retired entry.
fn recording(fx: &Fixture) -> Rec {
    let rec = atop_recording_of(fx, "rec", "web1");
    let mut m = meta("web1");
    let mut old = m.sessions[0].clone();
    old.started = "2023-11-14T21:00:00Z".into();
    old.stopped = Some("2023-11-14T21:30:00Z".into());
    m.sessions.insert(0, old);
    m.retired.push(Retired {
        table: "sched_switch".into(),
        from: "2023-11-14T21:00:00Z".into(),
        to: "2023-11-14T21:30:00Z".into(),
        deleted_at: "2023-11-14T22:00:00Z".into(),
        reason: "max-size".into(),
        files: 30,
        bytes: 1 << 20,
    });
    rec.write_meta(&m);

    let switch = |i: i64| {
        let (prev, next) = (THREADS[(i % 5) as usize], THREADS[((i + 2) % 5) as usize]);
        json!({"ts": t(i * 500 + 7), "cpu": i % 2, "prev_tid": prev.1, "prev_pid": prev.0,
               "prev_comm": prev.2, "prev_state": "S", "prev_prio": 120, "next_tid": next.1,
               "next_pid": next.0, "next_comm": next.2, "next_prio": 120 + i % 3})
    };
    let (early, late): (Vec<Value>, Vec<Value>) = (0..121)
        .map(switch)
        .partition(|r| r["ts"].as_i64().unwrap() < t(45_000));
    rec.chunk(&SCHED_SWITCH, "20231114T221320.000Z-000001.parquet", &early);
    rec.chunk(&SCHED_SWITCH, "20231114T221405.000Z-000002.parquet", &late);

    let wakeup = |i: i64| {
        let (pid, waker) = [(100, 200), (200, 300), (300, 100)][(i % 3) as usize];
        json!({"ts": t(i * 1000 + 300), "cpu": i % 2, "tid": pid, "pid": pid, "comm": "w",
               "target_cpu": (i + 1) % 2, "waker_tid": waker, "waker_pid": waker, "prio": 120})
    };
    let wakeups: Vec<Value> = (0..61).map(wakeup).collect();
    rec.chunk(
        &SCHED_WAKEUP,
        "20231114T221320.000Z-000001.parquet",
        &wakeups[..42],
    );
    rec.chunk(
        &SCHED_WAKEUP,
        "20231114T221402.000Z-000002.parquet",
        &wakeups[42..],
    );

    let fault = |ms: i64, pid: i64| {
        json!({"ts": t(ms), "cpu": 1, "tid": pid, "pid": pid, "address": 4096 * ms as u64,
               "ip": 77u64, "error_code": 6, "kernel": false, "comm": "f"})
    };
    rec.chunk(
        &PAGE_FAULT,
        "20231114T221320.000Z-000001.parquet",
        &[
            fault(15_000, 100),
            fault(41_000, 100),
            fault(47_000, 200),
            fault(55_000, 100),
        ],
    );

    let process = |ms: i64, event: &str, pid: i64, tid: i64, comm: &str, cmdline: Option<&str>| {
        json!({"ts": t(ms), "event": event, "pid": pid, "tid": tid, "ppid": 1, "comm": comm,
               "cmdline": cmdline})
    };
    rec.chunk(
        &PROCESS,
        "20231114T221320.000Z-000001.parquet",
        &[
            process(0, "scan", 100, 100, "sh", Some("sh -c burner")),
            process(0, "scan", 100, 101, "burner-w", None),
            process(0, "scan", 200, 200, "sleeper", Some("sleeper 5")),
            process(0, "scan", 400, 400, "gone", Some("gone")),
            process(0, "scan", 999, 999, "unrelated", Some("never seen again")),
            process(10_000, "exec", 100, 100, "burner", Some("burner --hot")),
            process(24_000, "fork", 300, 300, "late", None),
            process(25_000, "exit", 400, 400, "gone", None),
            process(42_000, "fork", 600, 600, "child", None),
            process(55_000, "exit", 100, 101, "burner-w", None),
        ],
    );
    rec
}

fn slice(source: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args: Vec<&std::ffi::OsStr> = vec!["slice".as_ref(), source.as_os_str()];
    args.extend(extra.iter().map(|a| std::ffi::OsStr::new(*a)));
    args.extend(["-o".as_ref(), out.as_os_str()]);
    hindsight(args)
}

fn slice_ok(source: &Path, out: &Path, extra: &[&str]) {
    let run = slice(source, out, extra);
    assert!(run.status.success(), "{extra:?}: {}", stderr(&run));
}

/// Per table, the rows in the window: count, time range, and the sum of
/// every integer column, as one CSV line.
fn window_figures(dir: &Path, table: &Table, condition: &str) -> String {
    let mut terms = vec!["count(*)".to_string(), "min(ts)".into(), "max(ts)".into()];
    for c in table.columns {
        if matches!(c.kind, ColumnType::Int32 | ColumnType::Int64) {
            terms.push(format!("sum(CAST({} AS BIGINT))", c.name));
        }
        if c.kind == ColumnType::Name {
            terms.push(format!("count(DISTINCT CAST({} AS VARCHAR))", c.name));
        }
    }
    let sql = format!(
        "SELECT {} FROM {} WHERE ts >= TIMESTAMP '{FROM}' AND ts < TIMESTAMP '{TO}' AND {condition}",
        terms.join(", "),
        table.name
    );
    query_csv(&[dir.to_path_buf()], &sql)
}

fn report(args: &[&str], dir: &Path) -> String {
    let mut argv: Vec<&std::ffi::OsStr> = vec!["report".as_ref()];
    argv.extend(args.iter().map(|a| std::ffi::OsStr::new(*a)));
    argv.push(dir.as_os_str());
    let out = hindsight(&argv);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    stdout(&out)
}

fn count(dir: &Path, sql: &str) -> i64 {
    let csv = query_csv(&[dir.to_path_buf()], sql);
    csv.lines().nth(1).unwrap().trim().parse().unwrap()
}

#[test]
fn slice_answers_the_windows_queries_like_the_source() {
    let fx = Fixture::new();
    let rec = recording(&fx);
    let out = fx.path("ticket");
    slice_ok(&rec.dir, &out, &["--from", FROM, "--to", TO]);

    for table in TABLES.iter().filter(|t| t.column("ts").is_some()) {
        let full = window_figures(&rec.dir, table, "TRUE");
        let cut = window_figures(&out, table, "TRUE");
        assert_eq!(cut, full, "{}", table.name);
    }
    // The fixture has rows on both sides of the window in every table it fills.
    for table in [
        "sched_switch",
        "sched_wakeup",
        "counter",
        "task_stat",
        "page_fault",
    ] {
        let inside = count(&out, &format!("SELECT count(*) FROM {table}"));
        let all = count(&rec.dir, &format!("SELECT count(*) FROM {table}"));
        assert!(inside > 0 && inside < all, "{table}: {inside} of {all}");
    }
    // Only rows of the window, but for the baselines and names before it.
    let outside = "ts < TIMESTAMP '2023-11-14T22:14:00Z' OR ts >= TIMESTAMP '2023-11-14T22:14:10Z'";
    for table in ["sched_switch", "sched_wakeup", "page_fault", "loss"] {
        let n = count(
            &out,
            &format!("SELECT count(*) FROM {table} WHERE {outside}"),
        );
        assert_eq!(n, 0, "{table}");
    }

    // Delta reports need the sample before the window: the slice kept it.
    for interval in ["5s", "10s"] {
        let args = [
            "atop",
            "--interval",
            interval,
            "--top",
            "100",
            "--format",
            "json",
        ];
        let window = ["--from", FROM, "--to", TO];
        let full = report(&[&args[..], &window].concat(), &rec.dir);
        let cut = report(&[&args[..], &window].concat(), &out);
        assert!(full.lines().count() >= 2, "{full}");
        assert!(full.contains("\"kind\":\"process\""), "{full}");
        assert_eq!(cut, full, "atop --interval {interval}");
    }
    let full = report(
        &["faults", "--from", FROM, "--to", TO, "--format", "csv"],
        &rec.dir,
    );
    assert_eq!(
        report(
            &["faults", "--from", FROM, "--to", TO, "--format", "csv"],
            &out
        ),
        full
    );

    // recording.json: the overlapping session, no retired list, the origin.
    let sliced = Recording::open(&out).unwrap();
    assert_eq!(sliced.meta.sessions.len(), 1);
    assert_eq!(sliced.meta.sessions[0].started, "2023-11-14T22:13:20Z");
    assert!(sliced.meta.retired.is_empty());
    let origin = sliced.meta.slice_of.as_ref().unwrap();
    assert_eq!((origin.from.as_str(), origin.to.as_str()), (FROM, TO));
    assert_eq!(origin.source, rec.dir.display().to_string());
    assert!(origin.pids.is_empty());

    // info says what it is; the source's info lists what was retired.
    let info = stdout(&hindsight(["info".as_ref(), out.as_os_str()]));
    let line = format!("slice of   {}, {FROM} .. {TO}", rec.dir.display());
    assert!(info.contains(&line), "{line:?} not in\n{info}");
    let info = stdout(&hindsight(["info".as_ref(), rec.dir.as_os_str()]));
    assert!(
        info.contains("retired    2023-11-14T21:00:00Z .. 2023-11-14T21:30:00Z (max-size, 1.0 MiB in 30 files)"),
        "{info}"
    );
    let json = stdout(&hindsight(
        ["info", "--format", "json"]
            .map(std::ffi::OsStr::new)
            .into_iter()
            .chain([out.as_os_str()]),
    ));
    let json: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["slice_of"]["from"], FROM);
}

#[test]
fn slice_files_are_sorted_stamped_chunks_that_duckdb_reads() {
    let fx = Fixture::new();
    let rec = recording(&fx);
    let out = fx.path("ticket");
    slice_ok(&rec.dir, &out, &["--from", FROM, "--to", TO]);

    // Two source chunks overlap the window: two chunks, each sorted by (cpu, ts).
    let sliced = Recording::open(&out).unwrap();
    let chunks = &sliced.table("sched_switch").unwrap().chunks;
    assert_eq!(chunks.len(), 2);
    for chunk in chunks {
        let name = chunk.path.file_name().unwrap().to_str().unwrap();
        assert!(hindsight_schemas::layout::is_chunk_file(name), "{name}");
        let reader =
            ParquetRecordBatchReaderBuilder::try_new(fs::File::open(&chunk.path).unwrap()).unwrap();
        let sorting = reader.metadata().row_group(0).sorting_columns().cloned();
        assert_eq!(
            sorting.map(|s| s.len()),
            Some(2),
            "{name} declares its sort key"
        );
        let mut keys = Vec::new();
        for batch in reader.build().unwrap() {
            let batch = batch.unwrap();
            let cpu = batch
                .column(1)
                .as_any()
                .downcast_ref::<arrow::array::Int32Array>()
                .unwrap();
            let ts = batch
                .column(0)
                .as_any()
                .downcast_ref::<arrow::array::TimestampNanosecondArray>()
                .unwrap();
            keys.extend((0..batch.num_rows()).map(|i| (cpu.value(i), ts.value(i))));
        }
        assert!(keys.windows(2).all(|w| w[0] <= w[1]), "{name}: {keys:?}");
    }
    // No hidden leftovers, next to the slice or in it.
    let parent: Vec<_> = fs::read_dir(fx.path(""))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        parent.iter().all(|n| !n.to_string_lossy().starts_with('.')),
        "{parent:?}"
    );

    let ours = count(
        &out,
        "SELECT count(*) FROM sched_switch WHERE next_pid = 100",
    );
    let script = "import duckdb, sys
print(duckdb.sql(f\"SELECT count(*) FROM read_parquet('{sys.argv[1]}/sched_switch/*.parquet') WHERE next_pid = 100\").fetchall()[0][0])
print(duckdb.sql(f\"SELECT count(*) FROM read_parquet('{sys.argv[1]}/counter/*.parquet')\").fetchall()[0][0])";
    let duck = Command::new("python3")
        .args(["-c", script])
        .arg(&out)
        .output()
        .expect("python3 with duckdb");
    assert!(duck.status.success(), "{}", stderr(&duck));
    let lines: Vec<i64> = stdout(&duck)
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(lines[0], ours);
    assert_eq!(lines[1], count(&out, "SELECT count(*) FROM counter"));
    assert!(lines[0] > 0);
}

#[test]
fn pid_keeps_that_processes_rows_and_the_whole_system() {
    let fx = Fixture::new();
    let rec = recording(&fx);
    let out = fx.path("pid100");
    slice_ok(
        &rec.dir,
        &out,
        &["--from", FROM, "--to", TO, "--pid", "100"],
    );

    let rules: [(&Table, &str); 4] = [
        (&SCHED_SWITCH, "(prev_pid = 100 OR next_pid = 100)"),
        (&SCHED_WAKEUP, "(pid = 100 OR waker_pid = 100)"),
        (&PAGE_FAULT, "pid = 100"),
        (&hindsight_schemas::tables::TASK_STAT, "pid = 100"),
    ];
    for (table, rule) in rules {
        let full = window_figures(&rec.dir, table, rule);
        assert_eq!(window_figures(&out, table, "TRUE"), full, "{}", table.name);
        let rows = full.lines().nth(1).unwrap();
        assert!(!rows.starts_with("0,"), "{}: {full}", table.name);
    }
    // System-wide tables whole for the window.
    for table in [
        &hindsight_schemas::tables::COUNTER,
        &hindsight_schemas::tables::LOSS,
    ] {
        assert_eq!(
            window_figures(&out, table, "TRUE"),
            window_figures(&rec.dir, table, "TRUE"),
            "{}",
            table.name
        );
    }
    let others = count(
        &out,
        "SELECT count(*) FROM sched_switch WHERE prev_pid <> 100 AND next_pid <> 100",
    );
    assert_eq!(others, 0);
    let origin = Recording::open(&out).unwrap().meta.slice_of.unwrap();
    assert_eq!(origin.pids, [100]);
}

#[test]
fn names_from_before_the_window_are_kept() {
    let fx = Fixture::new();
    let rec = recording(&fx);
    let out = fx.path("ticket");
    slice_ok(&rec.dir, &out, &["--from", FROM, "--to", TO]);
    let rows = query_csv(
        std::slice::from_ref(&out),
        "SELECT CAST(event AS VARCHAR) AS event, pid, tid, cmdline FROM process ORDER BY tid, ts",
    );
    // Threads 100, 101, 200, 300 appear in the window's switches and
    // wakeups: each keeps its latest row before the window (100 its exec,
    // not its scan); 600's fork is in the window; 400 and 999 are not
    // referenced; 101's exit is after the window.
    assert_eq!(
        rows,
        "event,pid,tid,cmdline\n\
         exec,100,100,burner --hot\n\
         scan,100,101,\n\
         scan,200,200,sleeper 5\n\
         fork,300,300,\n\
         fork,600,600,\n"
    );
}

#[test]
fn times_take_every_form() {
    let fx = Fixture::new();
    let rec = recording(&fx);
    // The fixture ends at 22:14:20.5 (the last counter sample).
    for (i, (from, to, want_from, want_to)) in [
        ("22:14", "22:14:10", FROM, TO),
        ("+40s", "-10.5s", FROM, TO),
        ("-20.5s", "2023-11-14T23:14:10+01:00", FROM, TO),
    ]
    .into_iter()
    .enumerate()
    {
        let out = fx.path(&format!("t{i}"));
        slice_ok(&rec.dir, &out, &["--from", from, "--to", to]);
        let origin = Recording::open(&out).unwrap().meta.slice_of.unwrap();
        assert_eq!(
            (origin.from.as_str(), origin.to.as_str()),
            (want_from, want_to),
            "{from} {to}"
        );
    }
    let out = fx.path("bad");
    let run = slice(&rec.dir, &out, &["--from", "yesterday"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(stderr(&run).contains("RFC 3339"), "{}", stderr(&run));
    let run = slice(&rec.dir, &out, &["--from", "-1s", "--to", "-2s"]);
    assert_eq!(run.status.code(), Some(2), "{}", stderr(&run));
    assert_eq!(stderr(&run).lines().count(), 1, "{}", stderr(&run));
    assert!(!out.exists());
    // Reports take the same forms.
    let full = report(
        &["atop", "--from", FROM, "--to", TO, "--format", "csv"],
        &rec.dir,
    );
    assert_eq!(
        report(
            &["atop", "--from", "22:14", "--to", "-10.5s", "--format", "csv"],
            &rec.dir
        ),
        full
    );
}

#[test]
fn an_existing_output_is_refused_and_left_alone() {
    let fx = Fixture::new();
    let rec = recording(&fx);
    let out = fx.path("busy");
    fs::create_dir(&out).unwrap();
    fs::write(out.join("notes.txt"), "mine").unwrap();
    let run = slice(&rec.dir, &out, &["--from", FROM, "--to", TO]);
    assert_eq!(run.status.code(), Some(2));
    let err = stderr(&run);
    assert!(err.contains("busy") && err.contains("not empty"), "{err}");
    assert_eq!(err.lines().count(), 1);
    let left: Vec<PathBuf> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(left, [out.join("notes.txt")]);

    // A file is refused too; an empty directory is used.
    let file = fx.path("file");
    fs::write(&file, "x").unwrap();
    assert_eq!(slice(&rec.dir, &file, &[]).status.code(), Some(2));
    let empty = fx.path("empty");
    fs::create_dir(&empty).unwrap();
    slice_ok(&rec.dir, &empty, &["--from", FROM]);
    assert!(Recording::open(&empty).is_ok());
}

/// Stacks and frames follow the kept rows, each once.
#[test]
fn only_the_stacks_and_frames_kept_rows_use_are_kept() {
    use hindsight_schemas::tables::table;
    let fx = Fixture::new();
    let rec = recording(&fx);
    let stack = table("stack").expect("the stack table");
    let frame = table("frame").expect("the frame table");
    let sample = table("cpu_sample").expect("the cpu_sample table");
    let s = |ms: i64, pid: i64, stack_id: i64| {
        json!({"ts": t(ms), "cpu": 0, "tid": pid, "pid": pid, "comm": "x", "stack_id": stack_id,
               "kernel": false})
    };
    rec.chunk(
        sample,
        "20231114T221320.000Z-000001.parquet",
        &[
            s(30_000, 100, 3),
            s(41_000, 100, 1),
            s(42_000, 200, 2),
            s(43_000, 200, 2),
        ],
    );
    // A switch in the window whose leaving thread's stack is 4 (a column
    // `sched_switch` has on the branch that adds stacks).
    rec.chunk(
        &SCHED_SWITCH,
        "20231114T221344.000Z-000003.parquet",
        &[
            json!({"ts": t(44_000), "cpu": 1, "prev_tid": 300, "prev_pid": 300, "prev_comm": "late",
                 "prev_state": "S", "prev_prio": 120, "next_tid": 0, "next_pid": 0,
                 "next_comm": "swapper", "next_prio": 120, "stack_id": 4}),
        ],
    );
    let st = |id: i64, depth: i64, frame: i64| json!({"stack_id": id, "depth": depth, "frame_id": frame});
    rec.chunk(
        stack,
        "20231114T221320.000Z-000001.parquet",
        &[
            st(1, 0, 10),
            st(1, 1, 11),
            st(2, 0, 10),
            st(2, 1, 12),
            st(3, 0, 13),
            st(4, 0, 14),
        ],
    );
    // The recorder may write a stack again in a later chunk.
    rec.chunk(
        stack,
        "20231114T221400.000Z-000002.parquet",
        &[st(1, 0, 10), st(1, 1, 11)],
    );
    let frames: Vec<Value> = (10..16)
        .map(|id| json!({"frame_id": id, "kind": "user", "address": 4096u64, "function": format!("f{id}")}))
        .collect();
    rec.chunk(frame, "20231114T221320.000Z-000001.parquet", &frames);

    let ids = |dir: &Path, sql: &str| -> Vec<String> {
        query_csv(&[dir.to_path_buf()], sql)
            .lines()
            .skip(1)
            .map(str::to_owned)
            .collect()
    };
    let out = fx.path("ticket");
    slice_ok(&rec.dir, &out, &["--from", FROM, "--to", TO]);
    assert_eq!(
        ids(
            &out,
            "SELECT stack_id, depth, frame_id FROM stack ORDER BY 1, 2"
        ),
        ["1,0,10", "1,1,11", "2,0,10", "2,1,12", "4,0,14"]
    );
    assert_eq!(
        ids(&out, "SELECT frame_id FROM frame ORDER BY 1"),
        ["10", "11", "12", "14"]
    );

    let out = fx.path("pid200");
    slice_ok(
        &rec.dir,
        &out,
        &["--from", FROM, "--to", TO, "--pid", "200"],
    );
    assert_eq!(
        ids(
            &out,
            "SELECT stack_id, depth, frame_id FROM stack ORDER BY 1, 2"
        ),
        ["2,0,10", "2,1,12"]
    );
    assert_eq!(
        ids(&out, "SELECT frame_id FROM frame ORDER BY 1"),
        ["10", "12"]
    );
    assert_eq!(ids(&out, "SELECT count(*) FROM cpu_sample"), ["2"]);
}

/// A chunk whose footer reads but whose pages do not fails the slice
/// midway (after other tables were written): nothing is left that looks
/// like a recording, and no hidden directory either.
#[test]
fn a_failure_midway_leaves_nothing_behind() {
    let fx = Fixture::new();
    let rec = recording(&fx);
    let chunk = rec
        .dir
        .join("page_fault/20231114T221320.000Z-000001.parquet");
    let mut bytes = fs::read(&chunk).unwrap();
    let len = bytes.len();
    let footer = u32::from_le_bytes(bytes[len - 8..len - 4].try_into().unwrap()) as usize;
    bytes[4..len - 8 - footer].fill(0xff);
    fs::write(&chunk, bytes).unwrap();
    assert!(Recording::open(&rec.dir).is_ok(), "the footer still reads");

    let out = fx.path("ticket");
    let run = slice(&rec.dir, &out, &["--from", FROM, "--to", TO]);
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    assert_eq!(stderr(&run).lines().count(), 1, "{}", stderr(&run));
    assert!(!out.exists());
    let names: Vec<_> = fs::read_dir(fx.path(""))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["rec"]);
}
