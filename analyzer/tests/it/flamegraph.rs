//! `flamegraph` on a synthetic recording: exact folded lines, deduplicated
//! stacks and frames, off-CPU nanoseconds, filters, SVG and --show-sql.

use hindsight_schemas::tables::{CPU_SAMPLE, FRAME, SCHED_SWITCH, STACK};
use serde_json::{json, Value};

use crate::fixture::{hindsight, stderr, stdout, t, Fixture, Rec};

/// The `stack` rows of stack `id`: `frames` leaf first.
pub fn stack_rows(id: i64, frames: &[i64]) -> Vec<Value> {
    frames
        .iter()
        .enumerate()
        .map(|(depth, f)| json!({"stack_id": id, "depth": depth, "frame_id": f}))
        .collect()
}

/// Frames: 1 main, 2 work, 3 an unnamed user frame, 4 a kernel frame.
/// Stacks: 10 = work <- main; 20 = schedule (kernel) <- work <- main;
/// 30 = the unnamed frame <- main. Stacks and frames are written twice
/// (two sessions), once unnamed: readers must not double count.
pub fn recording(fx: &Fixture) -> Rec {
    let rec = fx.recording("rec", "web1");
    let frame = |id: i64, kind: &str, function: Option<&str>, offset: Option<u64>| {
        json!({"frame_id": id, "kind": kind, "address": 4096 + id as u64, "module": if kind == "kernel" { "[kernel]" } else { "/usr/bin/app" },
               "file_offset": offset, "function": function})
    };
    let frames = [
        frame(1, "user", Some("main"), Some(0x10)),
        frame(2, "user", Some("work;inner"), Some(0x20)),
        frame(3, "user", None, Some(0x3f)),
        frame(4, "kernel", Some("schedule"), None),
    ];
    rec.chunk(&FRAME, "a-000001.parquet", &frames);
    let mut again = frames.to_vec();
    again[1] = frame(2, "user", None, Some(0x20)); // written unnamed once
    rec.chunk(&FRAME, "b-000001.parquet", &again);
    let stacks: Vec<Value> = [
        stack_rows(10, &[2, 1]),
        stack_rows(20, &[4, 2, 1]),
        stack_rows(30, &[3, 1]),
    ]
    .concat();
    rec.chunk(&STACK, "a-000001.parquet", &stacks);
    rec.chunk(&STACK, "b-000001.parquet", &stacks);
    let sample = |ms: i64, tid: i32, comm: &str, stack: Option<i64>| json!({"ts": t(ms), "cpu": 0, "tid": tid, "pid": tid, "comm": comm, "stack_id": stack, "kernel": false});
    rec.chunk(
        &CPU_SAMPLE,
        "a-000001.parquet",
        &[
            sample(0, 7, "app", Some(10)),
            sample(1, 7, "app", Some(10)),
            sample(2, 7, "app", Some(10)),
            sample(3, 7, "app", Some(30)),
            sample(4, 7, "app", None),
            sample(5, 8, "other", Some(10)),
        ],
    );
    // Thread 7 blocks at 10 ms (stack 20) until 13 ms, again at 20 ms until
    // 21 ms on the other CPU; thread 8 blocks at 13 ms and never returns.
    let sw = |ms: i64, cpu: i32, prev: (i32, &str), stack: Option<i64>, next: (i32, &str)| {
        json!({"ts": t(ms), "cpu": cpu, "prev_tid": prev.0, "prev_pid": prev.0, "prev_comm": prev.1, "prev_state": "S",
               "prev_prio": 120, "next_tid": next.0, "next_pid": next.0, "next_comm": next.1, "next_prio": 120, "stack_id": stack})
    };
    rec.chunk(
        &SCHED_SWITCH,
        "a-000001.parquet",
        &[
            sw(10, 0, (7, "app"), Some(20), (8, "other")),
            sw(13, 0, (8, "other"), Some(10), (7, "app")),
            sw(20, 0, (7, "app"), Some(20), (0, "swapper/0")),
            sw(21, 1, (0, "swapper/1"), None, (7, "app")),
        ],
    );
    rec
}

pub fn folded(rec: &Rec, args: &[&str]) -> String {
    let mut all = vec!["flamegraph", rec.dir.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = hindsight(&all);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    stdout(&out)
}

#[test]
fn on_cpu_counts_samples_once_per_stack_root_first() {
    let fx = Fixture::new();
    let rec = recording(&fx);
    assert_eq!(
        folded(&rec, &["--on-cpu"]),
        "app 1\napp;main;[app+0x3f] 1\napp;main;work:inner 3\nother;main;work:inner 1\n"
    );
    assert_eq!(
        folded(&rec, &["--on-cpu", "--comm", "other"]),
        "other;main;work:inner 1\n"
    );
    assert_eq!(
        folded(
            &rec,
            &["--on-cpu", "--pid", "7", "--to", "2023-11-14T22:13:20.002Z"]
        ),
        "app;main;work:inner 2\n"
    );
}

#[test]
fn off_cpu_weighs_nanoseconds_until_the_thread_runs_again() {
    let fx = Fixture::new();
    let rec = recording(&fx);
    // 3 ms + 1 ms under stack 20; thread 8 never came back: no weight.
    assert_eq!(
        folded(&rec, &["--off-cpu", "--tid", "7"]),
        "app;main;work:inner;schedule_[k] 4000000\n"
    );
    assert_eq!(folded(&rec, &["--off-cpu", "--pid", "8"]), "");
}

#[test]
fn svg_and_sql_are_there_on_request() {
    let fx = Fixture::new();
    let rec = recording(&fx);
    let svg_path = fx.path("cpu.svg");
    let out = hindsight([
        "flamegraph",
        rec.dir.to_str().unwrap(),
        "--on-cpu",
        "--format",
        "svg",
        "-o",
        svg_path.to_str().unwrap(),
        "--show-sql",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg.contains("<svg") && svg.contains("work:inner"), "{svg}");
    assert!(
        stderr(&out).contains("FROM cpu_sample"),
        "the SQL goes to stderr with -o"
    );
    assert!(stdout(&out).is_empty());
    let text = folded(&rec, &["--off-cpu", "--show-sql"]);
    assert!(text.starts_with("WITH weights AS"), "{text}");
    assert!(text.contains("FROM off_cpu\n"), "{text}");
    let usage = hindsight(["flamegraph", rec.dir.to_str().unwrap()]);
    assert_eq!(
        usage.status.code(),
        Some(2),
        "--on-cpu or --off-cpu is required"
    );
}
