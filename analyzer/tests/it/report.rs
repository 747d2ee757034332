//! Reports over synthetic recordings: exact figures, process identity,
//! any interval length, DuckDB as an independent check, formats.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use hindsight_schemas::tables::{COUNTER, LOSS, NUMA_EVENT, PAGE_CACHE, PAGE_FAULT, TASK_STAT};
use serde_json::{json, Map, Value};

use crate::fixture::{hindsight, meta, stderr, stdout, t, Fixture, Rec};

const CHUNK: &str = "20231114T221320.000Z-000001.parquet";

/// ctxt increments at counter sample `k` (one sample a second).
fn ctxt_step(k: i64) -> i64 {
    1000 + 100 * (k % 3)
}

/// pgfault increments at sample `k`: a burst from 30 s to 35 s.
fn pgfault_step(k: i64) -> i64 {
    if (30..35).contains(&k) {
        5000
    } else {
        500
    }
}

/// A recording of 61 s: counters every second at k + 0.5 s (k = 0..=60),
/// task snapshots every 10 s at 5, 15, ... 55 s, one loss at 33 s.
///
/// CPU ticks a second: cpu0 user 60, system 20, idle 15, iowait 5 (and
/// guest 30, which the kernel already counts in user); cpu1 user 10, idle
/// 90. Processes: 100 burns one core, 200 sleeps (0.1 %), 300 starts at
/// 22.5 s and burns two cores, 400 burns half a core and is gone after 25 s,
/// 500 is two processes: 10 % until 15 s, then (a new start at 23 s, far
/// smaller cumulative times) 30 % from 25 s; 600 lives from 41 s to 42.5 s,
/// between two snapshots, and has only its final row (state `X`): 1.2 s of
/// CPU. The ones that start during the recording count from zero at their
/// start. Page cache: every 5 s (5 .. 60 s), 100 looks up 1000 pages of
/// which it misses 100 and dirties 10; 300 reads 400 pages, all cached.
pub fn atop_recording(fx: &Fixture) -> Rec {
    atop_recording_of(fx, "rec", "web1")
}

/// [`atop_recording`] in directory `name`, of `host`.
pub fn atop_recording_of(fx: &Fixture, name: &str, host: &str) -> Rec {
    let rec = fx.recording(name, host);
    let mut counters = Vec::new();
    let mut ctxt = 5_000_000;
    let mut pgfault = 90_000_000;
    for k in 0..=60i64 {
        let ts = t(k * 1000 + 500);
        if k > 0 {
            ctxt += ctxt_step(k);
            pgfault += pgfault_step(k);
        }
        let mut c = |source: &str, name: &str, scope: Option<&str>, value: i64| {
            counters.push(
                json!({"ts": ts, "source": source, "name": name, "scope": scope, "value": value}),
            );
        };
        let base = 1_000_000;
        for (scope, per_s) in [
            (Some("cpu0"), [60, 0, 20, 15, 5, 0, 0, 0, 30]),
            (Some("cpu1"), [10, 0, 0, 90, 0, 0, 0, 0, 0]),
            (None, [70, 0, 20, 105, 5, 0, 0, 0, 30]),
        ] {
            let names = [
                "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest",
            ];
            for (name, rate) in names.iter().zip(per_s) {
                c("stat", name, scope, base + rate * k);
            }
        }
        c("stat", "ctxt", None, ctxt);
        c("stat", "procs_running", None, 3);
        c("vmstat", "pgfault", None, pgfault);
        c("vmstat", "pgmajfault", None, 10 + k);
        c("vmstat", "pgscan_kswapd", None, 200 * (k - 30).max(0));
        c("vmstat", "numa_hit", None, 1_000 * k);
        c("meminfo", "MemFree", None, 8_000_000 - 1000 * k);
        c("meminfo", "MemAvailable", None, 9_000_000);
        c("meminfo", "Cached", None, 2_000_000 + 500 * k);
        c("pressure", "cpu_some_total", None, 250_000 * k);
        c("pressure", "memory_some_total", None, 100_000 * k);
        c("pressure", "memory_full_total", None, 50_000 * k);
    }
    rec.chunk(&COUNTER, CHUNK, &counters);

    let mut tasks = Vec::new();
    for j in 0..6i64 {
        let ts = t(5000 + 10_000 * j);
        let mut p = |pid: i64, comm: &str, start: i64, cpu_ns: i64, faults: i64, csw: i64| {
            tasks.push(json!({"ts": ts, "pid": pid, "comm": comm, "state": "R",
                "utime_ns": cpu_ns / 5 * 4, "stime_ns": cpu_ns / 5, "minflt": faults, "majflt": 0,
                "rss_bytes": 100 << 20, "vsize_bytes": 200 << 20, "threads": 1,
                "nvcsw": csw, "nivcsw": 0, "ppid": 1, "start_time_ns": start}));
        };
        let s = 1_000_000_000;
        p(100, "burner", 1, 10 * s * j, 1000 + 200 * j, 100 * j);
        p(200, "sleeper", 2, s / 100 * j, 0, 100 * j);
        if j >= 2 {
            let booted = crate::fixture::BOOTED_BEFORE_NS;
            p(
                300,
                "late",
                booted + 22 * s + s / 2,
                5 * s + 20 * s * (j - 2),
                0,
                0,
            );
            p(500, "reused", booted + 23 * s, 3 * s * (j - 2), 0, 0);
        } else {
            p(500, "old", 3, 1000 * s + s * j, 0, 0);
        }
        if j <= 2 {
            p(400, "gone", 4, 5 * s * j, 0, 0);
        }
    }
    tasks.push(json!({"ts": t(42_500), "pid": 600, "comm": "brief", "state": "X",
        "utime_ns": 1_000_000_000, "stime_ns": 200_000_000, "minflt": 300, "majflt": 0,
        "rss_bytes": 0, "vsize_bytes": 0, "threads": 0, "nvcsw": 3, "nivcsw": 0, "ppid": 1,
        "start_time_ns": crate::fixture::BOOTED_BEFORE_NS + 41_000_000_000i64, "rss_peak_bytes": 8 << 20}));
    rec.chunk(&TASK_STAT, CHUNK, &tasks);
    rec.chunk(
        &LOSS,
        CHUNK,
        &[json!({"ts": t(33_000), "source": "ring_full:page_fault", "lost": 7})],
    );
    let mut cache = Vec::new();
    for k in 1..=12i64 {
        cache.push(
            json!({"ts": t(5000 * k), "pid": 100, "comm": "burner", "accesses": 1000,
            "misses": 100, "dirtied": 10, "fault_around": 0}),
        );
        if k >= 5 {
            cache.push(
                json!({"ts": t(5000 * k), "pid": 300, "comm": "late", "accesses": 400,
                "misses": 0, "dirtied": 0, "fault_around": 16}),
            );
        }
    }
    rec.chunk(&PAGE_CACHE, CHUNK, &cache);
    rec
}

/// Runs `hindsight report <args>` and returns its JSON lines.
fn report_json(args: &[&str], dir: &Path) -> Vec<Map<String, Value>> {
    let mut argv: Vec<&std::ffi::OsStr> = vec!["report".as_ref()];
    argv.extend(args.iter().map(|a| std::ffi::OsStr::new(*a)));
    argv.extend([dir.as_os_str(), "--format".as_ref(), "json".as_ref()]);
    let out = hindsight(&argv);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The rows of `kind` in the interval starting at `start_ms` (from BASE).
fn rows<'a>(
    rows: &'a [Map<String, Value>],
    kind: &str,
    start_ms: i64,
) -> Vec<&'a Map<String, Value>> {
    let start = hindsight_schemas::time::rfc3339(t(start_ms));
    rows.iter()
        .filter(|r| r["kind"] == kind && r["interval_start"] == start.as_str())
        .collect()
}

fn f(row: &Map<String, Value>, column: &str) -> f64 {
    row[column]
        .as_f64()
        .unwrap_or_else(|| panic!("{column} in {row:?}"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[track_caller]
fn assert_close(row: &Map<String, Value>, column: &str, expected: f64) {
    let got = f(row, column);
    assert!(
        close(got, expected),
        "{column}: {got} != {expected} in {row:?}"
    );
}

/// pid → cpu_pct of the process rows.
fn cpu_by_pid(rows: &[&Map<String, Value>]) -> Vec<(i64, f64)> {
    rows.iter()
        .map(|r| (r["pid"].as_i64().unwrap(), f(r, "cpu_pct")))
        .collect()
}

#[test]
fn atop_ten_seconds_exact() {
    let fx = Fixture::new();
    let dir = atop_recording(&fx).dir;
    let all = report_json(&["atop", "--interval", "10s"], &dir);

    // [10 s, 20 s): samples 9.5 s .. 19.5 s.
    let system = rows(&all, "system", 10_000);
    assert_eq!(system.len(), 1);
    let s = system[0];
    assert_eq!(s["sample_from"], "2023-11-14T22:13:29.500Z");
    assert_eq!(s["sample_to"], "2023-11-14T22:13:39.500Z");
    assert_close(s, "seconds", 10.0);
    assert_close(s, "ctxt_s", 1100.0);
    assert_close(s, "pgfault_s", 500.0);
    assert_close(s, "pgmajfault_s", 1.0);
    assert_close(s, "pgscan_kswapd_s", 0.0);
    assert_close(s, "numa_hit_s", 1000.0);
    assert_close(s, "psi_cpu_some_pct", 25.0);
    assert_close(s, "psi_memory_some_pct", 10.0);
    assert_close(s, "psi_memory_full_pct", 5.0);
    assert_eq!(s["mem_free_kb"], 8_000_000 - 19_000);
    assert_eq!(s["mem_cached_kb"], 2_000_000 + 500 * 19);
    assert_eq!(s["lost"], 0);
    assert!(s["psi_io_some_pct"].is_null(), "not recorded: null");

    let cpus = rows(&all, "cpu", 10_000);
    let cpu: Vec<_> = cpus
        .iter()
        .map(|r| {
            (
                r["cpu"].as_str().unwrap(),
                f(r, "busy_pct"),
                f(r, "user_pct"),
                f(r, "system_pct"),
                f(r, "iowait_pct"),
                f(r, "idle_pct"),
            )
        })
        .collect();
    assert_eq!(
        cpu,
        [
            ("all", 45.0, 35.0, 10.0, 2.5, 52.5),
            ("cpu0", 80.0, 60.0, 20.0, 5.0, 15.0),
            ("cpu1", 10.0, 10.0, 0.0, 0.0, 90.0),
        ]
    );

    // One full core is 100 %; the gone process still counts up to its last
    // snapshot; the old pid 500 is itself; the late one has no baseline yet.
    let procs = rows(&all, "process", 10_000);
    let cpu = cpu_by_pid(&procs);
    assert_eq!(cpu.len(), 4, "{cpu:?}");
    for ((pid, got), (want_pid, want)) in
        cpu.iter()
            .zip([(100, 100.0), (400, 50.0), (500, 10.0), (200, 0.1)])
    {
        assert_eq!(*pid, want_pid);
        assert!(close(*got, want), "{pid}: {got}");
    }
    let burner = procs[0];
    assert_eq!(burner["comm"], "burner");
    assert_close(burner, "faults_s", 20.0);
    assert_close(burner, "csw_s", 10.0);
    assert_eq!(burner["rss_bytes"], 100 << 20);
    assert_eq!(burner["sample_from"], "2023-11-14T22:13:25Z");

    // [30 s, 40 s): the fault burst, the loss, the late process at 200 %,
    // the new pid 500 from its own first snapshot, no row for the gone one.
    let s = rows(&all, "system", 30_000)[0];
    assert_close(s, "pgfault_s", 2750.0);
    assert_close(s, "pgscan_kswapd_s", 200.0 * 9.0 / 10.0);
    assert_eq!(s["lost"], 7);
    let procs = rows(&all, "process", 30_000);
    assert!(procs.iter().all(|r| r["lost"] == 7));
    let cpu = cpu_by_pid(&procs);
    let want = [(300, 200.0), (100, 100.0), (500, 30.0), (200, 0.1)];
    assert_eq!(cpu.len(), want.len(), "{cpu:?}");
    for ((pid, got), (want_pid, want)) in cpu.iter().zip(want) {
        assert_eq!(*pid, want_pid);
        assert!(close(*got, want), "{pid}: {got}");
    }
    // A process started during the recording counts from zero at its
    // start: the late one from 22.5 s, and the brief one, seen only in its
    // final row, over its 1.5 s of life.
    let late = rows(&all, "process", 20_000)
        .into_iter()
        .find(|r| r["pid"] == 300)
        .expect("the late process from its start");
    assert_eq!(late["sample_from"], "2023-11-14T22:13:42.500Z");
    assert_close(late, "cpu_pct", 200.0);
    let brief = rows(&all, "process", 40_000)
        .into_iter()
        .find(|r| r["pid"] == 600)
        .expect("a line for the process that lived between two snapshots");
    assert_eq!(brief["comm"], "brief");
    assert_eq!(brief["sample_from"], "2023-11-14T22:14:01Z");
    assert_close(brief, "seconds", 1.5);
    assert_close(brief, "cpu_pct", 80.0);
    assert_close(brief, "faults_s", 200.0);
    assert_close(brief, "csw_s", 2.0);
    // Nothing negative or absurd anywhere.
    for r in all.iter().filter(|r| r["kind"] == "process") {
        let cpu = f(r, "cpu_pct");
        assert!((0.0..=200.0 + 1e-9).contains(&cpu), "{r:?}");
    }

    // --top and --from/--to.
    let top = report_json(
        &[
            "atop",
            "--top",
            "1",
            "--from",
            "2023-11-14T22:13:55Z",
            "--to",
            "2023-11-14T22:14:10Z",
        ],
        &dir,
    );
    let starts: Vec<_> = top
        .iter()
        .map(|r| r["interval_start"].as_str().unwrap())
        .collect();
    assert!(
        starts
            .iter()
            .all(|s| ["2023-11-14T22:13:50Z", "2023-11-14T22:14:00Z"].contains(s)),
        "{starts:?}"
    );
    assert_eq!(rows(&top, "process", 30_000).len(), 1);
    // The first interval still has the sample before it as its baseline.
    assert_close(rows(&top, "system", 30_000)[0], "pgfault_s", 2750.0);
    assert_eq!(rows(&top, "system", 20_000).len(), 0);
    assert_eq!(rows(&top, "system", 50_000).len(), 0);
}

#[test]
fn atop_any_interval_length() {
    let fx = Fixture::new();
    let dir = atop_recording(&fx).dir;

    // 60 s over 1 s samples. Minutes since the epoch start 20 s before
    // the fixture: [-20 s, 40 s) spans the samples at 0.5 s .. 39.5 s.
    let all = report_json(&["atop", "--interval", "1m"], &dir);
    let s = rows(&all, "system", -20_000)[0];
    assert_eq!(s["sample_from"], "2023-11-14T22:13:20.500Z");
    assert_eq!(s["sample_to"], "2023-11-14T22:13:59.500Z");
    assert_close(s, "seconds", 39.0);
    let ctxt: i64 = (1..40).map(ctxt_step).sum();
    assert_close(s, "ctxt_s", ctxt as f64 / 39.0);
    let faults: i64 = (1..40).map(pgfault_step).sum();
    assert_close(s, "pgfault_s", faults as f64 / 39.0);
    assert_eq!(s["lost"], 7);
    assert_close(rows(&all, "cpu", -20_000)[0], "busy_pct", 45.0);
    let cpu = cpu_by_pid(&rows(&all, "process", -20_000));
    // Most CPU time first, as atop sorts: the burner's 30 s before the late
    // one's 25 s (at twice the rate, over half the time).
    let want = [
        (100, 100.0),
        (300, 200.0),
        (400, 50.0),
        (500, 25.0),
        (500, 10.0),
        (200, 0.1),
    ];
    assert_eq!(cpu.len(), want.len(), "{cpu:?}");
    for ((pid, got), (want_pid, want)) in cpu.iter().zip(want) {
        assert_eq!(*pid, want_pid);
        assert!(close(*got, want), "{pid}: {got}");
    }
    // [40 s, 100 s): from the last sample before it, 39.5 s .. 60.5 s.
    let s = rows(&all, "system", 40_000)[0];
    assert_close(s, "seconds", 21.0);
    let ctxt: i64 = (40..61).map(ctxt_step).sum();
    assert_close(s, "ctxt_s", ctxt as f64 / 21.0);
    let cpu = cpu_by_pid(&rows(&all, "process", 40_000));
    assert_eq!(cpu.len(), 5, "the brief one too: {cpu:?}");

    // 3 s over 1 s samples: [10 s, 13 s) (a multiple of 3 s since the
    // epoch) spans 9.5 s .. 12.5 s.
    let all = report_json(&["atop", "--interval", "3s"], &dir);
    let s = rows(&all, "system", 10_000)[0];
    assert_eq!(s["sample_from"], "2023-11-14T22:13:29.500Z");
    assert_close(s, "seconds", 3.0);
    let ctxt: i64 = (10..13).map(ctxt_step).sum();
    assert_close(s, "ctxt_s", ctxt as f64 / 3.0);
}

/// The atop figures, computed independently with DuckDB from the same
/// Parquet files: for each series and interval [b, b + iv) holding one of
/// its samples, the last sample before b + iv minus the last sample before
/// b; for a series starting in the interval, minus zero at the process's
/// start if it started after the recording did (its start time converted
/// with the session's clock offset), else minus its first sample.
const DUCKDB_ATOP: &str = r#"
import duckdb, json, sys
rec, iv, session_start, offset = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
con = duckdb.connect()
con.sql(f"""CREATE VIEW counters AS SELECT source || '/' || name || '/' || coalesce(scope, 'all') AS series,
    epoch_ns(ts) AS t, value AS v, NULL::BIGINT AS born FROM read_parquet('{rec}/counter/*.parquet')""")
for col, expr in [("cpu", "utime_ns + stime_ns"), ("faults", "minflt + majflt"), ("csw", "nvcsw + nivcsw")]:
    con.sql(f"""CREATE VIEW task_{col} AS SELECT pid || '/' || start_time_ns AS series, pid,
        epoch_ns(ts) AS t, {expr} AS v,
        CASE WHEN start_time_ns + {offset} >= {session_start} THEN start_time_ns + {offset} END AS born
        FROM read_parquet('{rec}/task_stat/*.parquet')""")

def bounds(view):
    q = f"""
    WITH ends AS (
      SELECT series, (t // {iv}) * {iv} AS b, arg_max(v, t) AS v1, max(t) AS t1, any_value(born) AS born
      FROM {view} GROUP BY series, b
    )
    SELECT e.series, e.b, e.v1, e.t1,
      coalesce((SELECT arg_max(v, t) FROM {view} s WHERE s.series = e.series AND s.t < e.b),
               CASE WHEN e.born IS NOT NULL THEN 0 END,
               (SELECT arg_min(v, t) FROM {view} s WHERE s.series = e.series AND s.t >= e.b)) AS v0,
      coalesce((SELECT max(t) FROM {view} s WHERE s.series = e.series AND s.t < e.b),
               e.born,
               (SELECT min(t) FROM {view} s WHERE s.series = e.series AND s.t >= e.b)) AS t0
    FROM ends e"""
    return {(s, b): (v0, t0, v1, t1) for s, b, v1, t1, v0, t0 in duckdb.sql(q, connection=con).fetchall()}

out = []
c = bounds("counters")
intervals = sorted({b for _, b in c})
ticks = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
for b in intervals:
    def delta(series):
        v0, t0, v1, t1 = c.get((series, b), (None, 0, None, 0))
        return (v1 - v0, (t1 - t0) / 1e9) if v0 is not None and t1 > t0 else (None, 0)
    for scope in ["all", "cpu0", "cpu1"]:
        d = {n: delta(f"stat/{n}/{scope}")[0] for n in ticks}
        if None in d.values() or sum(d.values()) == 0:
            continue
        total = sum(d.values())
        out.append({"interval": b, "kind": "cpu", "key": scope,
                    "busy_pct": 100 * (total - d["idle"] - d["iowait"]) / total,
                    "iowait_pct": 100 * d["iowait"] / total})
    row = {"interval": b, "kind": "system", "key": None}
    for col, series, scale in [("ctxt_s", "stat/ctxt/all", 1), ("pgfault_s", "vmstat/pgfault/all", 1),
                               ("psi_memory_some_pct", "pressure/memory_some_total/all", 1e-4)]:
        d, secs = delta(series)
        if d is not None:
            row[col] = d * scale / secs
    row["mem_free_kb"] = c[("meminfo/MemFree/all", b)][2]
    out.append(row)

tasks = {col: bounds(f"task_{col}") for col in ["cpu", "faults", "csw"]}
for (series, b), (v0, t0, v1, t1) in tasks["cpu"].items():
    if t1 <= t0:
        continue
    secs = (t1 - t0) / 1e9
    row = {"interval": b, "kind": "process", "key": series, "cpu_pct": 100 * (v1 - v0) / 1e9 / secs}
    for col in ["faults", "csw"]:
        f0, _, f1, _ = tasks[col][(series, b)]
        row[col + "_s"] = (f1 - f0) / secs
    out.append(row)
print(json.dumps(out))
"#;

#[test]
fn atop_deltas_equal_duckdb_for_every_interval() {
    let fx = Fixture::new();
    let rec = atop_recording(&fx);
    for (interval, ns) in [
        ("10s", 10_000_000_000i64),
        ("3s", 3_000_000_000),
        ("1m", 60_000_000_000),
        ("7s", 7_000_000_000),
    ] {
        let ours = report_json(&["atop", "--interval", interval, "--top", "100"], &rec.dir);
        let out = Command::new("python3")
            .args(["-c", DUCKDB_ATOP])
            .arg(&rec.dir)
            .arg(ns.to_string())
            .arg(crate::fixture::BASE_NS.to_string())
            .arg((crate::fixture::BASE_NS - crate::fixture::BOOTED_BEFORE_NS).to_string())
            .output()
            .expect("python3 with duckdb");
        assert!(out.status.success(), "{}", stderr(&out));
        let expected: Vec<Map<String, Value>> = serde_json::from_slice(&out.stdout).unwrap();
        assert!(expected.len() > 10, "{interval}: {expected:?}");

        // Every row of ours has its DuckDB twin, and the other way round.
        let key = |r: &Map<String, Value>| -> (String, String, String) {
            let kind = r["kind"].as_str().unwrap().to_string();
            let ts = if let Some(ns) = r.get("interval").and_then(Value::as_i64) {
                hindsight_schemas::time::rfc3339(ns)
            } else {
                r["interval_start"].as_str().unwrap().to_string()
            };
            let k = match kind.as_str() {
                "cpu" => r
                    .get("key")
                    .or(r.get("cpu"))
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string(),
                "process" if r.contains_key("key") => r["key"]
                    .as_str()
                    .unwrap()
                    .split('/')
                    .next()
                    .unwrap()
                    .to_string(),
                "process" => r["pid"].to_string(),
                _ => String::new(),
            };
            (ts, kind, k)
        };
        let mut mine: HashMap<_, Vec<&Map<String, Value>>> = HashMap::new();
        for r in &ours {
            mine.entry(key(r)).or_default().push(r);
        }
        let mut matched = 0;
        for e in &expected {
            let candidates = mine
                .get(&key(e))
                .unwrap_or_else(|| panic!("{interval}: no row for {e:?}"));
            let metrics: Vec<(&String, f64)> = e
                .iter()
                .filter(|(k, _)| !["interval", "kind", "key"].contains(&k.as_str()))
                .map(|(k, v)| (k, v.as_f64().unwrap()))
                .collect();
            // A reused pid has two rows; one of them must match.
            let hit = candidates
                .iter()
                .any(|r| metrics.iter().all(|(col, want)| close(f(r, col), *want)));
            assert!(hit, "{interval}: {e:?} vs {candidates:?}");
            matched += 1;
        }
        assert_eq!(
            ours.len(),
            matched,
            "{interval}: rows without a DuckDB twin"
        );
    }
}

/// Two NUMA nodes over 20 s: page migrations, task moves, numastat.
pub fn numa_recording(fx: &Fixture) -> Rec {
    let rec = fx.recording("rec", "numa1");
    let ev = |ms: i64,
              kind: &str,
              pid: i64,
              src: Option<i64>,
              dst: Option<i64>,
              ok: Option<i64>,
              failed: Option<i64>| {
        json!({"ts": t(ms), "kind": kind, "tid": pid, "pid": pid, "comm": "worker",
               "src_nid": src, "dst_nid": dst, "pages_succeeded": ok, "pages_failed": failed,
               "reason": ok.map(|_| "numa_misplaced")})
    };
    rec.chunk(
        &NUMA_EVENT,
        CHUNK,
        &[
            ev(1000, "migrate_pages", 42, None, None, Some(512), Some(3)),
            ev(2000, "migrate_pages", 42, None, None, Some(100), Some(0)),
            ev(3000, "move_numa", 42, Some(0), Some(1), None, None),
            ev(4000, "move_numa", 42, Some(0), Some(1), None, None),
            ev(5000, "swap_numa", 43, Some(1), Some(0), None, None),
            ev(12_000, "move_numa", 42, Some(1), Some(0), None, None),
        ],
    );
    let mut counters = Vec::new();
    for k in 0..=20i64 {
        for (node, hit, miss) in [("node0", 1000, 10), ("node1", 400, 0)] {
            counters.push(json!({"ts": t(k * 1000), "source": "numastat", "name": "numa_hit", "scope": node, "value": hit * k}));
            counters.push(json!({"ts": t(k * 1000), "source": "numastat", "name": "numa_miss", "scope": node, "value": miss * k}));
        }
        counters.push(json!({"ts": t(k * 1000), "source": "vmstat", "name": "pgmigrate_success", "value": 61 * k}));
        counters
            .push(json!({"ts": t(k * 1000), "source": "vmstat", "name": "MemFree", "value": k}));
    }
    rec.chunk(&COUNTER, CHUNK, &counters);
    rec
}

/// Two NUMA nodes: page migrations, task moves between them, numastat.
#[test]
fn numa_two_nodes() {
    let fx = Fixture::new();
    let rec = numa_recording(&fx);

    let all = report_json(&["numa", "--interval", "10s"], &rec.dir);
    let first: Vec<_> = all
        .iter()
        .filter(|r| r["interval_start"] == "2023-11-14T22:13:20Z")
        .collect();
    let migrate: Vec<_> = first.iter().filter(|r| r["kind"] == "migrate").collect();
    assert_eq!(migrate.len(), 1);
    assert_eq!(
        (migrate[0]["pid"].as_i64(), migrate[0]["events"].as_i64()),
        (Some(42), Some(2))
    );
    assert_eq!(migrate[0]["pages_succeeded"], 612);
    assert_eq!(migrate[0]["pages_failed"], 3);
    assert_eq!(migrate[0]["reason"], "numa_misplaced");
    let moves: Vec<_> = first
        .iter()
        .filter(|r| r["kind"] == "task")
        .map(|r| {
            (
                r["pid"].as_i64().unwrap(),
                r["event"].as_str().unwrap(),
                r["src_nid"].as_i64().unwrap(),
                r["dst_nid"].as_i64().unwrap(),
                r["events"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        moves,
        [(42, "move_numa", 0, 1, 2), (43, "swap_numa", 1, 0, 1)]
    );
    let counters: Vec<_> = first
        .iter()
        .filter(|r| r["kind"] == "counter")
        .map(|r| {
            (
                r["source"].as_str().unwrap(),
                r["counter"].as_str().unwrap(),
                r["scope"].as_str(),
                f(r, "per_s"),
            )
        })
        .collect();
    assert_eq!(
        counters,
        [
            ("numastat", "numa_hit", Some("node0"), 1000.0),
            ("numastat", "numa_hit", Some("node1"), 400.0),
            ("numastat", "numa_miss", Some("node0"), 10.0),
            ("vmstat", "pgmigrate_success", None, 61.0),
        ]
    );
    let second: Vec<_> = all
        .iter()
        .filter(|r| r["interval_start"] == "2023-11-14T22:13:30Z" && r["kind"] == "task")
        .collect();
    assert_eq!(
        (second[0]["src_nid"].as_i64(), second[0]["dst_nid"].as_i64()),
        (Some(1), Some(0))
    );
}

/// Faults of three processes, sampled 1 in 10 for the first 5 s, and one's snapshots.
pub fn faults_recording(fx: &Fixture) -> Rec {
    let rec = fx.recording("rec", "web1");
    let mut m = meta("web1");
    m.sessions[0].fault_sample = 10;
    // A second session from 5 s on records every fault.
    let mut second = m.sessions[0].clone();
    second.started = "2023-11-14T22:13:25Z".into();
    second.fault_sample = 1;
    m.sessions.push(second);
    rec.write_meta(&m);
    let mut faults = Vec::new();
    for i in 0..30u64 {
        faults.push(json!({"ts": t(1000 + i as i64 * 100), "cpu": 0, "tid": 7, "pid": 7, "comm": "toucher",
            "address": 0x7f00_0000_0000u64 + i * 4096, "ip": 0x401000u64, "error_code": 6, "kernel": false}));
    }
    for i in 0..5u64 {
        faults.push(
            json!({"ts": t(2000 + i as i64), "cpu": 1, "tid": 8, "pid": 8, "comm": "other",
            "address": 0x5500_0000u64 + i, "ip": 0x401000u64, "error_code": 0, "kernel": true}),
        );
    }
    for i in 0..2u64 {
        faults.push(
            json!({"ts": t(6000), "cpu": 1, "tid": 9, "pid": 9, "comm": "late",
            "address": 0x1000u64 * i, "ip": 0u64, "error_code": 0, "kernel": false}),
        );
    }
    rec.chunk(&PAGE_FAULT, CHUNK, &faults);
    let snap = |ms: i64, minflt: i64| json!({"ts": t(ms), "pid": 7, "comm": "toucher", "state": "R", "minflt": minflt, "majflt": 0, "start_time_ns": 5});
    rec.chunk(&TASK_STAT, CHUNK, &[snap(0, 0), snap(9000, 270)]);
    rec
}

/// Faults: each recorded fault stands for `fault_sample`; task_stat beside.
#[test]
fn faults_scale_by_fault_sample() {
    let fx = Fixture::new();
    let rec = faults_recording(&fx);

    let all = report_json(&["faults", "--interval", "10s"], &rec.dir);
    assert_eq!(all.len(), 3, "{all:?}");
    let top = &all[0];
    assert_eq!(top["pid"], 7);
    assert_eq!(top["recorded"], 30);
    assert_eq!(top["faults"], 300);
    assert_close(top, "faults_s", 30.0);
    assert_close(top, "write_faults_s", 30.0);
    assert_close(top, "kernel_faults_s", 0.0);
    assert_close(top, "minflt_s", 30.0);
    assert_eq!(top["top_region"], "0x7f0000000000");
    assert_eq!(top["top_region_faults"], 300);
    assert_eq!(top["mapping"], "unknown");
    let other = &all[1];
    assert_eq!(
        (other["pid"].as_i64(), other["faults"].as_i64()),
        (Some(8), Some(50))
    );
    assert_close(other, "kernel_faults_s", 5.0);
    assert!(other["minflt_s"].is_null());
    let late = &all[2];
    assert_eq!(
        (late["pid"].as_i64(), late["faults"].as_i64()),
        (Some(9), Some(2))
    );
}

/// Page-cache counts of a reader and a writer over two intervals.
pub fn cachetop_recording(fx: &Fixture) -> Rec {
    let rec = fx.recording("rec", "web1");
    let row = |ms: i64, pid: i64, comm: &str, accesses: i64, misses: i64, dirtied: i64| json!({"ts": t(ms), "pid": pid, "comm": comm, "accesses": accesses, "misses": misses, "dirtied": dirtied});
    rec.chunk(
        &PAGE_CACHE,
        CHUNK,
        &[
            row(1000, 10, "cat", 100, 100, 0),
            row(2000, 10, "cat", 300, 0, 0),
            row(1000, 11, "dd", 50, 10, 40),
            row(1500, 12, "writer", 0, 64, 64),
            row(11_000, 10, "cat", 10, 20, 0),
        ],
    );
    rec
}

/// cachetop: hits are accesses minus misses; the ratio of hits to accesses.
#[test]
fn cachetop_hit_ratio() {
    let fx = Fixture::new();
    let rec = cachetop_recording(&fx);
    let all = report_json(&["cachetop", "--interval", "10s"], &rec.dir);
    let got: Vec<_> = all
        .iter()
        .map(|r| {
            (
                r["interval_start"].as_str().unwrap(),
                r["pid"].as_i64().unwrap(),
                r["accesses"].as_i64().unwrap(),
                r["hits"].as_i64().unwrap(),
                r["misses"].as_i64().unwrap(),
                r["dirtied"].as_i64().unwrap(),
                r["hit_ratio_pct"].as_f64(),
            )
        })
        .collect();
    // The most misses first, as cachetop sorts.
    assert_eq!(
        got,
        [
            ("2023-11-14T22:13:20Z", 10, 400, 300, 100, 0, Some(75.0)),
            ("2023-11-14T22:13:20Z", 12, 0, 0, 64, 64, None),
            ("2023-11-14T22:13:20Z", 11, 50, 40, 10, 40, Some(80.0)),
            ("2023-11-14T22:13:30Z", 10, 10, 0, 20, 0, Some(0.0)),
        ]
    );
}

/// Every report: `--show-sql` prints SQL that `hindsight sql` runs; CSV
/// and JSON carry the same columns; the table prints.
#[test]
fn show_sql_and_formats() {
    let fx = Fixture::new();
    let dir = atop_recording(&fx).dir;
    for report in ["atop", "faults", "numa", "cachetop"] {
        let run = |extra: &[&str]| {
            let mut argv: Vec<&std::ffi::OsStr> =
                vec!["report".as_ref(), report.as_ref(), dir.as_os_str()];
            argv.extend(extra.iter().map(|a| std::ffi::OsStr::new(*a)));
            let out = hindsight(&argv);
            assert!(out.status.success(), "{report} {extra:?}: {}", stderr(&out));
            stdout(&out)
        };
        let shown = run(&["--show-sql", "--format", "csv"]);
        let (sql, result) = shown.split_once(";\n\n").expect("SQL, then the result");
        assert!(sql.starts_with("WITH\n"), "{report}: {sql}");
        let csv = run(&["--format", "csv"]);
        assert_eq!(result, csv, "{report}");
        // The SQL runs as it is.
        let out = hindsight([
            "sql".as_ref(),
            dir.as_os_str(),
            sql.as_ref(),
            "--format".as_ref(),
            "csv".as_ref(),
        ]);
        assert_eq!(stdout(&out), csv, "{report}: {}", stderr(&out));

        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        let data_rows = csv.lines().count() - 1;
        assert!(data_rows > 0, "{report}: no data row in\n{csv}");
        let json = run(&["--format", "json"]);
        assert_eq!(json.lines().count(), data_rows, "{report}: {json}");
        for line in json.lines() {
            let row: Map<String, Value> = serde_json::from_str(line).unwrap();
            assert_eq!(
                row.keys().map(String::as_str).collect::<Vec<_>>().len(),
                header.len(),
                "{report}"
            );
            assert!(
                header.iter().all(|c| row.contains_key(*c)),
                "{report}: {header:?} vs {row:?}"
            );
        }
        let table = run(&[]);
        assert!(!table.is_empty(), "{report}");
    }
    let table = {
        let out = hindsight([
            "report".as_ref(),
            "atop".as_ref(),
            dir.as_os_str(),
            "--top".as_ref(),
            "3".as_ref(),
        ]);
        stdout(&out)
    };
    // The interval's losses are on its heading.
    assert!(
        table.contains("== 2023-11-14T22:13:50Z  interval 10s  LOST 7 events =="),
        "{table}"
    );
    // The rest of the layout: tests/golden/atop.txt.
}

/// Several recordings: every row has its host, and each host's figures
/// are its own.
#[test]
fn several_hosts() {
    let fx = Fixture::new();
    let a = atop_recording_of(&fx, "a", "web1").dir;
    let b = atop_recording_of(&fx, "b", "web2").dir;
    for report in ["atop", "faults", "numa", "cachetop"] {
        let out = hindsight([
            "report".as_ref(),
            report.as_ref(),
            a.as_os_str(),
            b.as_os_str(),
            "-f".as_ref(),
            "csv".as_ref(),
        ]);
        assert!(out.status.success(), "{report}: {}", stderr(&out));
        let csv = stdout(&out);
        assert!(csv.starts_with("host,"), "{report}");
        for host in ["web1", "web2"] {
            assert!(
                csv.lines()
                    .skip(1)
                    .any(|l| l.starts_with(&format!("{host},"))),
                "{report}: no row of {host} in\n{csv}"
            );
        }
    }
    let mut argv = vec![a.as_os_str(), b.as_os_str()];
    argv.insert(0, "atop".as_ref());
    let out = hindsight(
        ["report".as_ref()]
            .into_iter()
            .chain(argv)
            .chain(["-f".as_ref(), "json".as_ref()]),
    );
    let all: Vec<Map<String, Value>> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for host in ["web1", "web2"] {
        let mine: Vec<_> = all.iter().filter(|r| r["host"] == host).collect();
        let s = mine
            .iter()
            .find(|r| r["kind"] == "system" && r["interval_start"] == "2023-11-14T22:13:30Z")
            .unwrap();
        assert_close(s, "ctxt_s", 1100.0);
        let burner = mine
            .iter()
            .find(|r| r["pid"] == 100 && r["interval_start"] == "2023-11-14T22:13:30Z")
            .unwrap();
        assert_close(burner, "cpu_pct", 100.0);
    }
}

#[test]
fn bad_report_flags_are_usage_errors() {
    let fx = Fixture::new();
    let dir = atop_recording(&fx).dir;
    for args in [
        ["--interval", "0s"],
        ["--interval", "ten"],
        ["--from", "yesterday"],
    ] {
        let mut argv: Vec<&std::ffi::OsStr> =
            vec!["report".as_ref(), "atop".as_ref(), dir.as_os_str()];
        argv.extend(args.iter().map(|a| std::ffi::OsStr::new(*a)));
        let out = hindsight(&argv);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stderr(&out).contains(args[1]), "{}", stderr(&out));
    }
}
