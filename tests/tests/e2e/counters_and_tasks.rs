use std::fs;

use crate::fixture::{
    hindsight_stdout, load, load_reaped, quiet, shared, sql, sql_count, table_count, table_rows,
    utc_now_ns, Recorder, Scratch,
};

fn vmstat(name: &str) -> i64 {
    let text = fs::read_to_string("/proc/vmstat").unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /proc/vmstat"))
}

/// The recorded pgfault counter is what /proc/vmstat said when it was
/// read. The test reads /proc/vmstat itself every 2 ms while a workload
/// faults a million pages; each recorded sample around the workload lies
/// between the test's own readings just before and just after it (a few ms
/// of slack for the two clocks), and their delta is the test's within 1 %.
#[test]
fn recorded_pgfault_deltas_match_proc_vmstat() {
    let _machine = quiet();
    let scratch = Scratch::new();
    let rec = scratch.rec();
    let recorder = Recorder::start(&rec, &["--events", "counters", "--interval", "100ms"]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut readings = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                readings.push((utc_now_ns(), vmstat("pgfault")));
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            readings
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    let t1 = utc_now_ns();
    load(&["touch", "1000000", "0"]);
    let t2 = utc_now_ns();
    std::thread::sleep(std::time::Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let readings = poller.join().unwrap();
    recorder.stop();

    let sample = |cond: &str, order: &str| {
        let q = format!(
            "SELECT CAST(ts AS BIGINT) AS ts, value FROM counter WHERE source = 'vmstat' AND name = 'pgfault' \
             AND scope IS NULL AND {cond} ORDER BY ts {order} LIMIT 1"
        );
        let row = &sql(&rec, &q)[0];
        (row["ts"].as_i64().unwrap(), row["value"].as_i64().unwrap())
    };
    let (ts1, start) = sample(&format!("CAST(ts AS BIGINT) <= {t1}"), "DESC");
    let (ts2, end) = sample(&format!("CAST(ts AS BIGINT) >= {t2}"), "ASC");
    let nearest = |ts: i64| {
        *readings
            .iter()
            .min_by_key(|(at, _)| (at - ts).abs())
            .unwrap()
    };
    let ((at1, before), (at2, after)) = (nearest(ts1), nearest(ts2));
    assert!(
        (at1 - ts1).abs() < 20_000_000 && (at2 - ts2).abs() < 20_000_000,
        "readings too far from the samples"
    );
    let slack = 3_000_000;
    for (ts, value) in [(ts1, start), (ts2, end)] {
        let below = readings.iter().rev().find(|(at, _)| *at <= ts - slack);
        let above = readings.iter().find(|(at, _)| *at >= ts + slack);
        let (Some(&(_, low)), Some(&(_, high))) = (below, above) else {
            panic!("no reading of the test's within {slack} ns on both sides of {ts}");
        };
        assert!(
            (low..=high).contains(&value),
            "recorded pgfault {value} at {ts}: the test read {low} just before and {high} just after"
        );
    }
    let (recorded, truth) = (end - start, after - before);
    assert!(
        truth >= 1_000_000,
        "the workload faults once per page: {truth}"
    );
    assert!(
        (recorded - truth).abs() as f64 <= truth as f64 * 0.01,
        "recorded delta {recorded} vs /proc/vmstat delta {truth} at the same moments"
    );
    // Every source of the group is there.
    let sources = sql(
        &rec,
        "SELECT DISTINCT CAST(source AS VARCHAR) AS s FROM counter ORDER BY s",
    );
    let sources: Vec<_> = sources
        .iter()
        .map(|r| r["s"].as_str().unwrap().to_string())
        .collect();
    let mut expected = vec!["meminfo", "recorder", "stat", "vmstat"];
    if fs::metadata("/proc/pressure/cpu").is_ok() {
        expected.push("pressure");
    }
    if fs::metadata("/sys/devices/system/node/node0").is_ok() {
        expected.extend(["node_vmstat", "numastat"]);
    }
    for want in expected {
        assert!(
            sources.iter().any(|s| s == want),
            "no {want} counters in {sources:?}"
        );
    }
}

/// A process that touches N fresh pages: its task snapshots grow by N minor
/// faults while it touches them, its final row holds the kernel's count of
/// its whole life (what its parent's wait4 gets), and its recorded page
/// faults are that count too, within 1 %.
#[test]
fn touched_pages_show_in_task_snapshots_and_fault_events() {
    let _machine = shared();
    let scratch = Scratch::new();
    let rec = scratch.rec();
    let recorder = Recorder::start(
        &rec,
        &["--events", "tasks,faults", "--task-interval", "300ms"],
    );
    recorder.keep_on_time();
    const PAGES: i64 = 20_000;
    let (done, usage) = load_reaped(&["touch", &PAGES.to_string(), "1000"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    recorder.stop();
    let pid = done["pid"].as_i64().unwrap();
    let kernel_faults = usage.ru_minflt + usage.ru_majflt;

    let snapshots = sql_count(
        &rec,
        &format!("SELECT count(*) AS n FROM task_stat WHERE pid = {pid}"),
    );
    assert!(
        snapshots >= 3,
        "the 2 s workload spans several 300 ms snapshots: {snapshots}"
    );
    // Between the snapshots before and after the touching (1 s of sleep
    // on either side), the pages and nothing else: within 1 %.
    let grew = sql_count(
        &rec,
        &format!(
            "SELECT max(minflt) - min(minflt) AS n FROM task_stat WHERE pid = {pid} AND state <> 'X'"
        ),
    );
    assert!(
        (PAGES..=PAGES + PAGES / 100).contains(&grew),
        "minflt grew by {grew} for {PAGES} pages"
    );
    let last = sql(
        &rec,
        &format!("SELECT minflt + majflt AS n, state FROM task_stat WHERE pid = {pid} ORDER BY ts DESC LIMIT 1"),
    );
    assert_eq!(last[0]["state"], "X", "the final row is last: {last:?}");
    assert_eq!(
        last[0]["n"].as_i64(),
        Some(kernel_faults),
        "final row vs wait4"
    );
    let faults = sql_count(
        &rec,
        &format!("SELECT count(*) AS n FROM page_fault WHERE pid = {pid}"),
    );
    eprintln!(
        "touch: {faults} page_fault rows, wait4 {kernel_faults} faults, snapshots grew {grew}"
    );
    assert!(
        (faults - kernel_faults).abs() * 100 <= kernel_faults,
        "{faults} page_fault rows vs the kernel's {kernel_faults} faults of the process"
    );

    // `report faults` as a person reads it: the toucher's line carries
    // those faults.
    let table = hindsight_stdout(&[
        "report",
        "faults",
        rec.to_str().unwrap(),
        "--interval",
        "1h",
    ]);
    let rows = table_rows(&table, &pid.to_string());
    assert!(!rows.is_empty(), "no line of pid {pid}:\n{table}");
    let header = table_rows(&table, "PID");
    assert_eq!(
        header[0][..9],
        [
            "PID", "COMM", "FAULTS", "FAULTS/s", "USER/s", "KERNEL/s", "WRITE/s", "MINFLT/s",
            "MAJFLT/s"
        ],
        "{table}"
    );
    let shown: i64 = rows.iter().map(|r| table_count(&r[2])).sum();
    assert_eq!(shown, faults, "{table}");
    for row in &rows {
        assert_eq!(row[1], "hs-load", "{table}");
    }
}
