//! `report timeline`, `report runqlat` and `top` over synthetic recordings,
//! and the `--format` every report takes.

use std::path::Path;

use hindsight_schemas::tables::{COUNTER, CPU_SAMPLE, FRAME, SCHED_SWITCH, SCHED_WAKEUP, STACK};
use serde_json::{json, Map, Value};

use crate::fixture::{hindsight, stderr, stdout, t, Fixture, Rec};
use crate::flamegraph::stack_rows;
use crate::report::atop_recording;

const CHUNK: &str = "20231114T221320.000Z-000001.parquet";

/// 60 s on CPU 0: every 100 ms a daemon (pid 50) runs 1 ms; from 30 s to
/// 35 s a hog (pid 77, `hog`) runs in between, otherwise the CPU idles.
/// `ctxt` grows by 1000 to 1040 a second, without a burst.
pub fn burst_recording(fx: &Fixture) -> Rec {
    burst_recording_as(fx, "rec", "h", false)
}

/// [`burst_recording`] as `name` of `host`; with `worker`, the hog's 99 ms
/// a tick are 30 ms of its main thread and then 69 ms of its thread 79,
/// `hog-worker`.
fn burst_recording_as(fx: &Fixture, name: &str, host: &str, worker: bool) -> Rec {
    let rec = fx.recording(name, host);
    let mut switches = Vec::new();
    // (tid, pid, comm)
    let sw = |ms: i64, prev: (i32, i32, &str), next: (i32, i32, &str)| {
        json!({"ts": t(ms), "cpu": 0, "prev_tid": prev.0, "prev_pid": prev.1, "prev_comm": prev.2,
               "prev_state": "R", "prev_prio": 120, "next_tid": next.0, "next_pid": next.1,
               "next_comm": next.2, "next_prio": 120})
    };
    let idle = (0, 0, "swapper/0");
    let daemon = (50, 50, "daemon");
    let hog = (77, 77, "hog");
    let hog_worker = (79, 77, "hog-worker");
    for tick in 0..600 {
        let ms = tick * 100;
        let busy = (30_000..35_000).contains(&ms);
        let hog_was_running = (30_000..35_000).contains(&(ms - 100));
        let before = match (hog_was_running, worker) {
            (false, _) => idle,
            (true, false) => hog,
            (true, true) => hog_worker,
        };
        switches.push(sw(ms, before, daemon));
        switches.push(sw(ms + 1, daemon, if busy { hog } else { idle }));
        if busy && worker {
            switches.push(sw(ms + 31, hog, hog_worker));
        }
    }
    rec.chunk(&SCHED_SWITCH, CHUNK, &switches);
    let mut ctxt = 1_000_000;
    let counters: Vec<Value> = (0..=60)
        .map(|k| {
            ctxt += 1000 + 10 * (k % 5);
            json!({"ts": t(k * 1000 + 500), "source": "stat", "name": "ctxt", "scope": null, "value": ctxt})
        })
        .collect();
    rec.chunk(&COUNTER, CHUNK, &counters);
    rec
}

fn timeline(dir: &Path, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["report", "timeline", dir.to_str().unwrap(), "-f", "json"];
    args.extend_from_slice(extra);
    let out = hindsight(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).expect("one JSON array")
}

#[test]
fn a_burst_is_one_incident_with_its_hog_first() {
    let fx = Fixture::new();
    let rec = burst_recording(&fx);
    let incidents = timeline(&rec.dir, &[]);
    assert_eq!(incidents.len(), 1, "{incidents:#?}");
    let incident = &incidents[0];
    assert_eq!(incident["start"], "2023-11-14T22:13:50Z");
    assert_eq!(incident["end"], "2023-11-14T22:14:00Z");
    assert_eq!(incident["peak"], "2023-11-14T22:13:50Z");
    let hog = &incident["metrics"][0];
    assert_eq!(hog["metric"], "process_cpu");
    assert_eq!(hog["pid"], 77);
    assert_eq!(hog["comm"], "hog");
    assert_eq!(hog["baseline"], 0.0);
    // 50 slices of 99 ms: 4.95 s of 10 s.
    assert_eq!(hog["observed"], 49.5);
    let top = &incident["contributors"][0];
    assert_eq!(
        (top["pid"].clone(), top["comm"].clone()),
        (json!(77), json!("hog"))
    );
    assert_eq!(top["share"], 1.0);
    // Its one thread, on the CPU for the 4.95 s and preempted 50 times,
    // the last time at the end of the burst: 49 waits of 1 ms.
    assert_eq!(
        top["threads"],
        json!([{"tid": 77, "comm": "hog", "on_cpu_s": 4.95, "runq_wait_s": 0.049, "offcpu_d_s": 0.0}])
    );
    // No CPU samples were recorded: no stacks.
    assert_eq!(top["stacks"], json!([]));
    // The daemon runs as always: not a departure.
    assert!(incident["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["pid"] != 50));
}

#[test]
fn the_quiet_part_and_other_metrics_have_no_incident() {
    let fx = Fixture::new();
    let rec = burst_recording(&fx);
    assert_eq!(
        timeline(&rec.dir, &["--to", "2023-11-14T22:13:50Z", "-i", "5s"]),
        Vec::<Value>::new()
    );
    assert_eq!(
        timeline(&rec.dir, &["--metric", "ctxt"]),
        Vec::<Value>::new()
    );
    assert_eq!(timeline(&rec.dir, &["--metric", "process_cpu"]).len(), 1);
    let out = hindsight([
        "report",
        "timeline",
        rec.dir.to_str().unwrap(),
        "--metric",
        "bogus",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("pgscan_direct"), "{}", stderr(&out));
}

/// A contributor's threads come first by the time of its metric, each
/// with its own times.
#[test]
fn a_contributors_threads_are_ranked_by_the_time_of_its_metric() {
    let fx = Fixture::new();
    let rec = burst_recording_as(&fx, "rec", "h", true);
    let incidents = timeline(&rec.dir, &[]);
    assert_eq!(incidents.len(), 1, "{incidents:#?}");
    let top = &incidents[0]["contributors"][0];
    // Its threads waited for each other more than it ran: the program's
    // run-queue wait departs furthest, and its threads are ranked by it.
    assert_eq!(
        (top["pid"].clone(), top["metric"].clone()),
        (json!(77), json!("process_runq_wait")),
        "{top}"
    );
    // 50 ticks of 30 ms and of 69 ms. Each is preempted in every tick and
    // waits for its turn in the next: the main thread 70 ms, the worker
    // 31 ms; the last tick's waits never end.
    assert_eq!(
        top["threads"],
        json!([
            {"tid": 77, "comm": "hog", "on_cpu_s": 1.5, "runq_wait_s": 3.43, "offcpu_d_s": 0.0},
            {"tid": 79, "comm": "hog-worker", "on_cpu_s": 3.45, "runq_wait_s": 1.519, "offcpu_d_s": 0.0},
        ]),
        "{top}"
    );
    // Indexed, from thread_second: the same.
    let out = hindsight(["index", rec.dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(timeline(&rec.dir, &[]), incidents);
}

/// A contributor's most sampled stacks in its incident, with their share
/// of all its samples there (those without a stack too), named root first.
/// [`burst_recording`] as `name` of `host`, with the hog's CPU samples:
/// `in_spin` of them in `main;spin` and `in_kernel` in the kernel under
/// it in the burst, then 5 with no stack; before it, 3 in `main` alone
/// (not the incident's).
fn burst_with_stacks(fx: &Fixture, name: &str, host: &str, in_spin: i64, in_kernel: i64) -> Rec {
    let rec = burst_recording_as(fx, name, host, false);
    let frame = |id: i64, kind: &str, function: &str| {
        json!({"frame_id": id, "kind": kind, "address": 4096 + id as u64,
               "module": if kind == "kernel" { "[kernel]" } else { "/usr/bin/hog" },
               "file_offset": if kind == "kernel" { None } else { Some(id * 16) }, "function": function})
    };
    let frames = [
        frame(1, "user", "main"),
        frame(2, "user", "spin"),
        frame(3, "kernel", "clear_page"),
    ];
    rec.chunk(&FRAME, CHUNK, &frames);
    rec.chunk(
        &STACK,
        CHUNK,
        &[
            stack_rows(10, &[2, 1]),
            stack_rows(20, &[3, 2, 1]),
            stack_rows(30, &[1]),
        ]
        .concat(),
    );
    let mut samples = Vec::new();
    let sample = |ms: i64, stack: Option<i64>| json!({"ts": t(ms), "cpu": 0, "tid": 77, "pid": 77, "comm": "hog", "stack_id": stack, "kernel": false});
    for k in 0..in_spin + in_kernel + 5 {
        let stack = if k < in_spin {
            Some(10)
        } else if k < in_spin + in_kernel {
            Some(20)
        } else {
            None
        };
        samples.push(sample(30_010 + k * 100, stack));
    }
    samples.extend((0..3).map(|k| sample(10_000 + k * 100, Some(30))));
    rec.chunk(&CPU_SAMPLE, CHUNK, &samples);
    rec
}

#[test]
fn a_contributors_most_sampled_stacks_are_named() {
    let fx = Fixture::new();
    let rec = burst_with_stacks(&fx, "rec", "h", 30, 10);
    let incidents = timeline(&rec.dir, &[]);
    assert_eq!(incidents.len(), 1, "{incidents:#?}");
    let top = &incidents[0]["contributors"][0];
    assert_eq!(top["pid"], 77, "{top}");
    assert_eq!(
        top["stacks"],
        json!([
            {"samples": 30, "share": 0.667, "frames": "main;spin"},
            {"samples": 10, "share": 0.222, "frames": "main;spin;clear_page_[k]"},
        ]),
        "{top}"
    );
    let table = stdout(&hindsight([
        "report",
        "timeline",
        rec.dir.to_str().unwrap(),
    ]));
    assert!(
        table.contains("stack  66.7% of its samples (30): spin <- main\n"),
        "{table}"
    );
    let csv = stdout(&hindsight([
        "report",
        "timeline",
        rec.dir.to_str().unwrap(),
        "-f",
        "csv",
    ]));
    assert!(
        csv.lines()
            .any(|l| l.ends_with(",stack,process_cpu,samples,77,hog,,,30,,0.667,,,,,main;spin")),
        "{csv}"
    );
}

/// Two hosts with the same pids: each incident's hog is shown with its own
/// host's stacks, named from frames both recordings hold.
#[test]
fn each_hosts_contributors_have_their_own_stacks() {
    let fx = Fixture::new();
    let one = burst_with_stacks(&fx, "rec", "h", 30, 10);
    let two = burst_with_stacks(&fx, "rec2", "h2", 4, 36);
    let args = [
        "report",
        "timeline",
        one.dir.to_str().unwrap(),
        two.dir.to_str().unwrap(),
        "-f",
        "json",
    ];
    let out = hindsight(args);
    assert!(out.status.success(), "{}", stderr(&out));
    let incidents: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap();
    let stacks_on = |host: &str| {
        let incident = incidents
            .iter()
            .find(|i| i["host"] == host)
            .unwrap_or_else(|| panic!("no incident on {host}: {incidents:#?}"));
        incident["contributors"][0]["stacks"].clone()
    };
    assert_eq!(
        stacks_on("h"),
        json!([
            {"samples": 30, "share": 0.667, "frames": "main;spin"},
            {"samples": 10, "share": 0.222, "frames": "main;spin;clear_page_[k]"},
        ])
    );
    assert_eq!(
        stacks_on("h2"),
        json!([
            {"samples": 36, "share": 0.8, "frames": "main;spin;clear_page_[k]"},
            {"samples": 4, "share": 0.089, "frames": "main;spin"},
        ])
    );
}

/// With every metric in one statement, every view's sort ran at once, each
/// holding 10 MB for its merge and a fair share of the limit too small for
/// one batch: two minutes of a real recording failed at the default 1 GiB.
#[test]
fn the_timeline_of_a_minute_fits_in_32_mib() {
    let fx = Fixture::new();
    let rec = burst_recording(&fx);
    // Two partitions, as on this 2-core class of machine: the statement of
    // every metric failed here at 32 MiB; one kind at a time fits in 16.
    let incidents = timeline(&rec.dir, &["--threads", "2", "--memory-limit", "32M"]);
    assert_eq!(incidents.len(), 1, "{incidents:#?}");
    assert_eq!(incidents[0]["metrics"][0]["pid"], 77);
}

/// A range narrowed to the burst itself is judged against the history
/// before it, not against itself: every interval of the range is the hog's.
#[test]
fn a_range_narrowed_to_the_burst_is_judged_against_what_came_before() {
    let fx = Fixture::new();
    let rec = burst_recording(&fx);
    let narrowed = [
        "--from",
        "2023-11-14T22:13:50Z",
        "--to",
        "2023-11-14T22:13:55Z",
        "-i",
        "1s",
    ];
    let incidents = timeline(&rec.dir, &narrowed);
    assert_eq!(incidents.len(), 1, "{incidents:#?}");
    let incident = &incidents[0];
    assert_eq!(incident["start"], "2023-11-14T22:13:50Z");
    assert_eq!(incident["end"], "2023-11-14T22:13:55Z");
    let hog = &incident["metrics"][0];
    assert_eq!(
        (hog["metric"].clone(), hog["pid"].clone()),
        (json!("process_cpu"), json!(77))
    );
    assert_eq!(hog["baseline"], 0.0);
    // The history is read, not reported: the quiet 30 s before have no incident.
    let before = timeline(
        &rec.dir,
        &[
            "--from",
            "2023-11-14T22:13:45Z",
            "--to",
            "2023-11-14T22:13:50Z",
            "-i",
            "1s",
        ],
    );
    assert_eq!(before, Vec::<Value>::new());
}

#[test]
fn timeline_table_and_csv_name_the_hog() {
    let fx = Fixture::new();
    let rec = burst_recording(&fx);
    let dir = rec.dir.to_str().unwrap();
    let table = stdout(&hindsight(["report", "timeline", dir]));
    assert!(
        table.contains("== incident 1  2023-11-14T22:13:50Z .. 2023-11-14T22:14:00Z"),
        "{table}"
    );
    assert!(table.contains("pid 77       hog"), "{table}");
    let csv = stdout(&hindsight(["report", "timeline", dir, "-f", "csv"]));
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "incident,host,start,end,peak,kinds,row,metric,unit,pid,comm,baseline,normal_max,observed,score,share,tid,on_cpu_s,runq_wait_s,offcpu_d_s,stack"
    );
    // 49.5 % where nothing ran before: 1.98 floors (25 points) above it.
    assert!(
        lines
            .iter()
            .any(|l| l.contains(",new_process,contributor,process_cpu,,77,hog,,,,1.98,1,,,,,")),
        "{csv}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with(",new_process,thread,process_cpu,s,77,hog,,,,,,77,4.95,0.049,0,")),
        "{csv}"
    );
    assert!(
        table.contains(
            "tid 77       hog              4.950 s on CPU, 0.049 s in run queue, 0.000 s in D"
        ),
        "{table}"
    );
}

/// Wakeups of thread 9 followed by its switch-in after 0.5 us, 3 us,
/// 100 us and 120 us; one wakeup of thread 8 that never ran.
pub fn runq_recording(fx: &Fixture) -> Rec {
    let rec = fx.recording("rec", "h");
    let mut wakeups = Vec::new();
    let mut switches = Vec::new();
    for (i, wait_ns) in [500i64, 3_000, 100_000, 120_000].iter().enumerate() {
        let at = t(i as i64 * 10);
        wakeups.push(
            json!({"ts": at, "cpu": 1, "tid": 9, "pid": 9, "comm": "waiter", "target_cpu": 0,
            "waker_tid": 1, "waker_pid": 1, "new_task": false, "prio": 120}),
        );
        switches.push(json!({"ts": at + wait_ns, "cpu": 0, "prev_tid": 0, "prev_pid": 0, "prev_comm": "swapper/0",
            "prev_state": "R", "prev_prio": 120, "next_tid": 9, "next_pid": 9, "next_comm": "waiter", "next_prio": 120}));
        switches.push(json!({"ts": at + wait_ns + 1000, "cpu": 0, "prev_tid": 9, "prev_pid": 9, "prev_comm": "waiter",
            "prev_state": "S", "prev_prio": 120, "next_tid": 0, "next_pid": 0, "next_comm": "swapper/0", "next_prio": 120}));
    }
    wakeups.push(
        json!({"ts": t(100), "cpu": 1, "tid": 8, "pid": 8, "comm": "never", "target_cpu": 0,
        "waker_tid": 1, "waker_pid": 1, "new_task": false, "prio": 120}),
    );
    rec.chunk(&SCHED_WAKEUP, CHUNK, &wakeups);
    rec.chunk(&SCHED_SWITCH, CHUNK, &switches);
    rec
}

#[test]
fn runqlat_buckets_are_bccs_log2_microseconds() {
    let fx = Fixture::new();
    let rec = runq_recording(&fx);
    let out = hindsight(["report", "runqlat", rec.dir.to_str().unwrap(), "-f", "csv"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "kind,interval_start,pid,comm,usecs_low,usecs_high,count,total_ns,lost\n\
         all,2023-11-14T22:13:20Z,,,0,1,1,500,0\n\
         all,2023-11-14T22:13:20Z,,,2,3,1,3000,0\n\
         all,2023-11-14T22:13:20Z,,,64,127,2,220000,0\n\
         process,2023-11-14T22:13:20Z,9,waiter,0,1,1,500,0\n\
         process,2023-11-14T22:13:20Z,9,waiter,2,3,1,3000,0\n\
         process,2023-11-14T22:13:20Z,9,waiter,64,127,2,220000,0\n"
    );
    let table = stdout(&hindsight([
        "report",
        "runqlat",
        rec.dir.to_str().unwrap(),
        "--pid",
        "9",
    ]));
    assert!(table.contains("pid 9 waiter"), "{table}");
    assert!(
        table.contains(
            "       64 -> 127      : 2        |****************************************|"
        ),
        "{table}"
    );
}

/// A multi-threaded process is named as atop names it, on every row of its
/// histogram: after its main thread, or else its thread that waited last;
/// never after whichever thread's name sorts last.
#[test]
fn runqlat_names_a_process_after_its_main_thread_or_its_latest() {
    let fx = Fixture::new();
    let rec = fx.recording("rec", "h");
    let (mut wakeups, mut switches) = (Vec::new(), Vec::new());
    // (tid, pid, comm, when, wait): process 20 is "app" with a worker that
    // alone waited long; process 30 has no main thread among its waits,
    // and its worker "a-worker" waited last.
    let waits = [
        (20, 20, "app", 0, 1_000),
        (21, 20, "zz-worker", 10, 100_000),
        (31, 30, "b-worker", 20, 1_000),
        (32, 30, "a-worker", 30, 100_000),
    ];
    for (tid, pid, comm, ms, wait_ns) in waits {
        let at = t(ms);
        wakeups.push(
            json!({"ts": at, "cpu": 1, "tid": tid, "pid": pid, "comm": comm, "target_cpu": 0,
            "waker_tid": 1, "waker_pid": 1, "new_task": false, "prio": 120}),
        );
        switches.push(json!({"ts": at + wait_ns, "cpu": 0, "prev_tid": 0, "prev_pid": 0, "prev_comm": "swapper/0",
            "prev_state": "R", "prev_prio": 120, "next_tid": tid, "next_pid": pid, "next_comm": comm, "next_prio": 120}));
        switches.push(json!({"ts": at + wait_ns + 1000, "cpu": 0, "prev_tid": tid, "prev_pid": pid, "prev_comm": comm,
            "prev_state": "S", "prev_prio": 120, "next_tid": 0, "next_pid": 0, "next_comm": "swapper/0", "next_prio": 120}));
    }
    rec.chunk(&SCHED_WAKEUP, CHUNK, &wakeups);
    rec.chunk(&SCHED_SWITCH, CHUNK, &switches);
    let out = hindsight(["report", "runqlat", rec.dir.to_str().unwrap(), "-f", "csv"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let names: Vec<(String, String)> = stdout(&out)
        .lines()
        .filter(|l| l.starts_with("process,"))
        .map(|l| {
            let fields: Vec<&str> = l.split(',').collect();
            (fields[2].to_owned(), fields[3].to_owned())
        })
        .collect();
    let expected = |pid: &str, comm: &str| (pid.to_owned(), comm.to_owned());
    assert_eq!(
        names,
        [
            expected("20", "app"),
            expected("20", "app"),
            expected("30", "a-worker"),
            expected("30", "a-worker"),
        ]
    );
}

#[test]
fn runqlat_reads_runq_wait_once_indexed_with_the_same_answer() {
    let fx = Fixture::new();
    let rec = runq_recording(&fx);
    let dir = rec.dir.to_str().unwrap();
    let runqlat = |extra: &[&str]| {
        let mut args = vec!["report", "runqlat", dir, "-f", "csv"];
        args.extend_from_slice(extra);
        let out = hindsight(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let from_view = runqlat(&[]);
    assert!(runqlat(&["--show-sql"]).contains("FROM runq_latency"));
    let out = hindsight(["index", dir]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("1 chunks"), "{}", stdout(&out));
    assert!(runqlat(&["--show-sql"]).contains("FROM runq_wait"));
    assert_eq!(runqlat(&[]), from_view);
    // Indexing again does nothing; --force rebuilds the same files.
    assert!(stdout(&hindsight(["index", dir])).contains("indexed already"));
    let out = hindsight(["index", "--force", dir]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(runqlat(&[]), from_view);
}

#[test]
fn every_report_takes_every_format() {
    let fx = Fixture::new();
    let rec = atop_recording(&fx);
    let dir = rec.dir.to_str().unwrap();
    let reports: &[&[&str]] = &[
        &["report", "atop", dir],
        &["report", "timeline", dir],
        &["report", "runqlat", dir],
        &["report", "numa", dir],
        &["report", "faults", dir],
        &["report", "cachetop", dir],
        &["top", dir, "--at", "2023-11-14T22:13:45Z"],
    ];
    for report in reports {
        let run = |format: &str| {
            let mut args = report.to_vec();
            args.extend(["--format", format]);
            let out = hindsight(&args);
            assert!(out.status.success(), "{args:?}: {}", stderr(&out));
            stdout(&out)
        };
        assert!(!run("table").is_empty(), "{report:?} printed no table");
        let csv = run("csv");
        let csv_rows = csv.lines().count().saturating_sub(1);
        // The fixture gives every report rows but runqlat (it has no
        // scheduler events), so the comparison below is not of empties.
        let has_rows = report[1] != "runqlat";
        assert_eq!(csv_rows > 0, has_rows, "{report:?}: {csv}");
        let json = run("json");
        assert_eq!(
            json_rows(report, &json),
            csv_rows,
            "{report:?}: {json}\nvs\n{csv}"
        );
    }
}

/// The rows of a report's JSON, counted as its CSV has them: one object a
/// line; the timeline's one array of incidents has a CSV row per departed
/// metric and per contributor.
fn json_rows(report: &[&str], json: &str) -> usize {
    if report[1] == "timeline" {
        let incidents: Vec<Map<String, Value>> = serde_json::from_str(json).unwrap();
        let len = |i: &Map<String, Value>, key: &str| i[key].as_array().unwrap().len();
        return incidents
            .iter()
            .map(|i| len(i, "metrics") + len(i, "contributors"))
            .sum();
    }
    let objects: Vec<Map<String, Value>> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    objects.len()
}

#[test]
fn top_is_atop_for_the_interval_holding_the_moment() {
    let fx = Fixture::new();
    let rec = atop_recording(&fx);
    let dir = rec.dir.to_str().unwrap();
    let top = stdout(&hindsight([
        "top",
        dir,
        "--at",
        "2023-11-14T22:13:47Z",
        "-f",
        "csv",
    ]));
    let atop = stdout(&hindsight([
        "report",
        "atop",
        dir,
        "--from",
        "2023-11-14T22:13:40Z",
        "--to",
        "2023-11-14T22:13:50Z",
        "-f",
        "csv",
    ]));
    assert_eq!(top, atop);
    assert!(top.contains("system,2023-11-14T22:13:40Z"), "{top}");
    assert!(!top.contains("2023-11-14T22:13:30Z,"), "{top}");
}

/// What a report of one recording at `step` is built for, with no flags.
fn env_at(step: &str, indexed: bool) -> hindsight::report::Env {
    hindsight::report::Env {
        interval: hindsight::report::Interval::parse(step).unwrap(),
        from: None,
        to: None,
        top: 5,
        multi_host: false,
        sessions: Vec::new(),
        pid: None,
        metric: None,
        sensitivity: 1.0,
        indexed,
    }
}

/// Per-process on-CPU nanoseconds per bin of `step`, as the timeline and
/// the HTML chart sum them.
fn on_cpu_per_bin(rec: &Rec, step: &str, indexed: bool) -> Vec<(i64, i64, i64)> {
    use hindsight::report::ThreadTime;
    let env = env_at(step, indexed);
    let sql = format!(
        "SELECT CAST(interval_start AS BIGINT) AS t, pid, ns FROM ({}) s ORDER BY 1, 2",
        env.thread_time_sql(ThreadTime::OnCpu, env.interval, (None, None))
    );
    rows_per_bin(rec, &sql)
}

/// `(bin start ms, pid, ms)` of a statement's `t`, `pid` and `ns` columns.
fn rows_per_bin(rec: &Rec, sql: &str) -> Vec<(i64, i64, i64)> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let rows = runtime.block_on(async {
        let ctx = hindsight::open_context(std::slice::from_ref(&rec.dir))
            .await
            .unwrap();
        let batches = hindsight::query_batches(&ctx, sql).await.unwrap();
        hindsight::output::json_rows(&batches).unwrap()
    });
    rows.iter()
        .map(|r| {
            let int = |k: &str| r[k].as_i64().unwrap_or_else(|| panic!("{k} in {r:?}"));
            (
                (int("t") - t(0)) / 1_000_000,
                int("pid"),
                int("ns") / 1_000_000,
            )
        })
        .collect()
}

#[test]
fn on_cpu_time_is_split_at_bin_edges_indexed_or_not() {
    // A hog (77) runs 0.5 s .. 3.25 s, a daemon (50) 3.25 s .. 3.5 s.
    let fx = Fixture::new();
    let rec = fx.recording("rec", "h");
    let sw = |ms: i64, prev: i32, next: i32| {
        let comm = |tid: i32| {
            if tid == 0 {
                "swapper/0".to_owned()
            } else {
                format!("t{tid}")
            }
        };
        json!({"ts": t(ms), "cpu": 0, "prev_tid": prev, "prev_pid": prev, "prev_comm": comm(prev),
               "prev_state": "S", "prev_prio": 120, "next_tid": next, "next_pid": next,
               "next_comm": comm(next), "next_prio": 120})
    };
    rec.chunk(
        &SCHED_SWITCH,
        CHUNK,
        &[sw(500, 0, 77), sw(3250, 77, 50), sw(3500, 50, 0)],
    );
    // (bin start ms, pid, ms on CPU in the bin)
    let by_second = vec![
        (0, 77, 500),
        (1000, 77, 1000),
        (2000, 77, 1000),
        (3000, 50, 250),
        (3000, 77, 250),
    ];
    let by_two = vec![(0, 77, 1500), (2000, 50, 250), (2000, 77, 1250)];
    assert_eq!(on_cpu_per_bin(&rec, "1s", false), by_second);
    // The HTML chart's window starts at the first event, 0.5 s into its
    // first bin: that bin is charted too.
    let env = env_at("1s", false);
    let chart = hindsight::report::html::process_cpu_sql(&env, (t(500), t(3501)), env.interval);
    assert_eq!(rows_per_bin(&rec, &chart), by_second);
    assert_eq!(on_cpu_per_bin(&rec, "2s", false), by_two);
    let out = hindsight(["index", rec.dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(on_cpu_per_bin(&rec, "1s", true), by_second);
    assert_eq!(on_cpu_per_bin(&rec, "2s", true), by_two);
    // A step that is not whole seconds splits the derived rows in SQL;
    // bins count from the epoch (as date_bin's do), here from -0.5 s.
    assert_eq!(
        on_cpu_per_bin(&rec, "1500ms", true),
        vec![
            (-500, 77, 500),
            (1000, 77, 1500),
            (2500, 50, 250),
            (2500, 77, 750)
        ]
    );
}

/// The metrics of every incident of the timeline of `dir`.
fn departing_metrics(dir: &Path) -> Vec<String> {
    timeline(dir, &[])
        .iter()
        .flat_map(|i| i["metrics"].as_array().unwrap().clone())
        .map(|m| m["metric"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_skipped_timer_round_is_no_lost_event_and_no_incident() {
    let fx = Fixture::new();
    let rec = burst_recording(&fx);
    rec.chunk(
        &hindsight_schemas::tables::LOSS,
        CHUNK,
        &[json!({"ts": t(10_000), "source": "late:counter", "lost": 3})],
    );
    let metrics = departing_metrics(&rec.dir);
    assert!(
        !metrics.iter().any(|m| m == "lost"),
        "three skipped counter rounds are not lost events: {metrics:?}"
    );
    let fx = Fixture::new();
    let rec = burst_recording(&fx);
    rec.chunk(
        &hindsight_schemas::tables::LOSS,
        CHUNK,
        &[json!({"ts": t(10_000), "cpu": 0, "source": "ring_full:sched_switch", "lost": 3})],
    );
    let metrics = departing_metrics(&rec.dir);
    assert!(metrics.iter().any(|m| m == "lost"), "{metrics:?}");
}
