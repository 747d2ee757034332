use std::{fs, io::Write, thread, time::Duration};

use crate::fixture::{
    hindsight_stdout, load, load_reaped, quiet, shared, sql, table_count, table_rows, Recorder,
    Scratch,
};

/// Reading a file that is not in the page cache shows about one miss per
/// page for the reader; reading it again shows hits and almost no misses.
#[test]
fn page_cache_misses_then_hits_per_process() {
    let _machine = shared();
    let scratch = Scratch::new();
    const PAGES: i64 = 2_560; // 10 MiB
    let file = scratch.dir.path().join("data.bin");
    let mut out = fs::File::create(&file).unwrap();
    let block = vec![7u8; 4096];
    for _ in 0..PAGES {
        out.write_all(&block).unwrap();
    }
    drop(out);
    let path = file.to_str().unwrap();
    load(&["evict", path]);

    let rec = scratch.rec();
    let recorder = Recorder::start(&rec, &["--events", "cache", "--interval", "200ms"]);
    let cold = load(&["read", path]);
    let warm = load(&["read", path]);
    thread::sleep(Duration::from_millis(500));
    recorder.stop();

    let counts = |pid: i64| {
        let rows = sql(
            &rec,
            &format!("SELECT sum(accesses) AS accesses, sum(misses) AS misses FROM page_cache WHERE pid = {pid}"),
        );
        (
            rows[0]["accesses"].as_i64().unwrap_or(0),
            rows[0]["misses"].as_i64().unwrap_or(0),
        )
    };
    let (cold_accesses, cold_misses) = counts(cold["pid"].as_i64().unwrap());
    let (warm_accesses, warm_misses) = counts(warm["pid"].as_i64().unwrap());
    eprintln!(
        "page cache: cold {cold_accesses} accesses, {cold_misses} misses; warm {warm_accesses} accesses, {warm_misses} misses; {PAGES} pages"
    );
    // Readahead may bring in a little more than the file; the program's own
    // binary and libraries are already cached by the first run.
    assert!(
        (PAGES * 95 / 100..=PAGES * 110 / 100).contains(&cold_misses),
        "cold read: {cold_misses} misses for {PAGES} pages"
    );
    // Every page of the file looked up once by the read, plus the few the
    // program's start faults in from its binary and libc (18 here): within
    // 2 %. A read counted twice, or a batch's range counted again by its
    // continuation, lands far outside.
    let looked_up = PAGES..=PAGES * 102 / 100;
    assert!(
        looked_up.contains(&cold_accesses),
        "cold read: {cold_accesses} accesses for {PAGES} pages"
    );
    assert!(
        looked_up.contains(&warm_accesses),
        "warm read: {warm_accesses} accesses for {PAGES} pages"
    );
    assert!(
        warm_misses <= PAGES / 100,
        "warm read: {warm_misses} misses"
    );

    // The screen a person reads says the same, in cachetop's columns: the
    // cold reader missed about every page, the warm one hit them.
    let rec_s = rec.to_str().unwrap();
    let table = hindsight_stdout(&["report", "cachetop", rec_s, "--interval", "1h"]);
    assert!(
        table.contains("PID  COMM")
            && table.contains("HITS  MISSES  DIRTIES  READ_HIT%  WRITE_HIT%"),
        "{table}"
    );
    let shown = |pid: &serde_json::Value| {
        let rows = table_rows(&table, &pid.to_string());
        let sum = |column: usize| rows.iter().map(|r| table_count(&r[column])).sum::<i64>();
        (sum(2), sum(3), rows)
    };
    let (cold_hits, cold_shown_misses, cold_rows) = shown(&cold["pid"]);
    assert_eq!(cold_shown_misses, cold_misses, "{table}");
    assert!(
        cold_hits <= PAGES / 20,
        "cold read: {cold_hits} hits shown\n{table}"
    );
    let (warm_hits, warm_shown_misses, warm_rows) = shown(&warm["pid"]);
    assert_eq!(warm_shown_misses, warm_misses, "{table}");
    assert_eq!(warm_hits, warm_accesses - warm_misses, "{table}");
    for row in cold_rows.iter().chain(&warm_rows) {
        assert_eq!(row[1], "hs-load", "{table}");
    }
    if let [row] = warm_rows.as_slice() {
        let ratio: f64 = row[5]
            .trim_start_matches('>')
            .trim_end_matches('%')
            .parse()
            .unwrap();
        assert!(ratio >= 99.0, "warm read hit {}\n{table}", row[5]);
    }
}

/// `report atop`: a process burning one core shows about 100 % CPU (a % of
/// one CPU, as atop counts), a sleeping one under 2 %.
#[test]
fn atop_report_shows_a_burner_at_one_core_and_a_sleeper_near_zero() {
    let _machine = quiet();
    let scratch = Scratch::new();
    let rec = scratch.rec();
    let recorder = Recorder::start(
        &rec,
        &["--events", "counters,tasks", "--task-interval", "1s"],
    );
    // The burner runs at nice -20; so must the sampler, or it may not run.
    recorder.keep_on_time();
    // The test's own /proc/stat readings, every 20 ms: (when, busy ticks,
    // all ticks), busy as atop counts it (all but idle and iowait).
    let polling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let poller = {
        let polling = std::sync::Arc::clone(&polling);
        thread::spawn(move || {
            let mut readings = Vec::new();
            while polling.load(std::sync::atomic::Ordering::Relaxed) {
                let stat = std::fs::read_to_string("/proc/stat").unwrap();
                let ticks: Vec<i64> = stat
                    .lines()
                    .next()
                    .unwrap()
                    .split_whitespace()
                    .skip(1)
                    .take(8)
                    .map(|t| t.parse().unwrap())
                    .collect();
                let all: i64 = ticks.iter().sum();
                readings.push((crate::fixture::utc_now_ns(), all - ticks[3] - ticks[4], all));
                thread::sleep(Duration::from_millis(20));
            }
            readings
        })
    };
    let sleeper = thread::spawn(|| load(&["sleep", "5"]));
    let burn_start = crate::fixture::utc_now_ns();
    let burner = load(&["burn", "5"]);
    let burn_end = crate::fixture::utc_now_ns();
    let sleeper = sleeper.join().unwrap();
    polling.store(false, std::sync::atomic::Ordering::Relaxed);
    let readings = poller.join().unwrap();
    thread::sleep(Duration::from_millis(300));
    recorder.stop();

    let rows = atop_rows(&rec, "2s");
    // (CPU %, seconds between the bounding samples) of each interval of a process.
    let cpu_of = |pid: i64| -> Vec<(f64, f64)> {
        rows.iter()
            .filter(|r| r["kind"] == "process" && r["pid"].as_i64() == Some(pid))
            .map(|r| {
                (
                    r["cpu_pct"].as_f64().unwrap(),
                    r["seconds"].as_f64().unwrap(),
                )
            })
            .collect()
    };
    let burning = cpu_of(burner["pid"].as_i64().unwrap());
    let sleeping = cpu_of(sleeper["pid"].as_i64().unwrap());
    assert!(
        burning.len() >= 2,
        "the burner spans several intervals: {burning:?}"
    );
    let seconds: f64 = burning.iter().map(|(_, s)| s).sum();
    let average = burning.iter().map(|(p, s)| p * s).sum::<f64>() / seconds;
    // Ground truth: the burner's own getrusage over its run. On a VM the
    // hypervisor may steal part of "a full core"; the report must agree with
    // what the process really got, and that must be about one core.
    let own =
        100.0 * burner["cpu_seconds"].as_f64().unwrap() / burner["wall_seconds"].as_f64().unwrap();
    assert!(
        (average - own).abs() <= 3.0,
        "report {average:.1} % vs getrusage {own:.1} % ({burning:?})"
    );
    // The burner did burn (no hollow agreement of two zeros): most of a
    // core by its own count. Not "a full core": on this shared machine it
    // once got 91.9 % (fresh-clone run #71), and the report said 91.8 %.
    assert!(
        own >= 80.0 && average <= 105.0,
        "burner CPU {average:.1} % ({burning:?}; getrusage {own:.1} %)"
    );
    assert!(
        !sleeping.is_empty() && sleeping.iter().all(|(p, _)| *p < 2.0),
        "sleeper CPU %: {sleeping:?}"
    );
    // The screen a person reads shows those figures, interval by interval,
    // to a tenth of a point ("99.1%"; ">99.9%" for a share just under 100).
    let table = hindsight_stdout(&["report", "atop", rec.to_str().unwrap(), "-i", "2s"]);
    let shown: Vec<String> = table_rows(&table, &burner["pid"].to_string())
        .into_iter()
        .map(|r| r[2].clone())
        .collect();
    assert_eq!(shown.len(), burning.len(), "{table}");
    for (cell, (truth, _)) in shown.iter().zip(&burning) {
        let figure: f64 = cell
            .trim_start_matches('>')
            .trim_end_matches('%')
            .parse()
            .unwrap();
        let agrees = if cell.starts_with('>') {
            *truth > figure && *truth < 100.0
        } else {
            (figure - truth).abs() <= 0.05 + 1e-9
        };
        assert!(agrees, "{cell} shown for {truth} %:\n{table}");
    }
    // The system lines are there too: every interval inside the burn is
    // as busy as the test's own /proc/stat readings at its two samples say.
    let utc = |r: &serde_json::Value, key: &str| {
        chrono::DateTime::parse_from_rfc3339(r[key].as_str().unwrap())
            .unwrap()
            .timestamp_nanos_opt()
            .unwrap()
    };
    let nearest = |ts: i64| {
        *readings
            .iter()
            .min_by_key(|(at, _, _)| (at - ts).abs())
            .unwrap()
    };
    let mut compared = Vec::new();
    for row in rows
        .iter()
        .filter(|r| r["kind"] == "cpu" && r["cpu"] == "all")
    {
        let (from, to) = (utc(row, "sample_from"), utc(row, "sample_to"));
        if from < burn_start || to > burn_end {
            continue;
        }
        let ((_, busy1, all1), (_, busy2, all2)) = (nearest(from), nearest(to));
        let truth = 100.0 * (busy2 - busy1) as f64 / (all2 - all1) as f64;
        let reported = row["busy_pct"].as_f64().unwrap();
        compared.push((reported, truth));
        assert!(
            reported >= 45.0 && (reported - truth).abs() <= 5.0,
            "busy {reported:.1} % in {}..{}, /proc/stat says {truth:.1} %",
            row["sample_from"],
            row["sample_to"]
        );
    }
    assert!(
        !compared.is_empty(),
        "no interval inside the burn: {rows:?}"
    );
    eprintln!("busy %, reported vs /proc/stat: {compared:?}");
}

/// `report atop`'s rows (every process's) of a recording at `interval`, as JSON.
fn atop_rows(rec: &std::path::Path, interval: &str) -> Vec<serde_json::Value> {
    let rec = rec.to_str().unwrap();
    let args = [
        "report",
        "atop",
        rec,
        "--interval",
        interval,
        "--top",
        "100000",
        "--format",
        "json",
    ];
    hindsight_stdout(&args)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .collect()
}

/// Processes that start and end within a task interval (and one that spans
/// a snapshot or two) each have `report atop` lines whose CPU time, faults
/// and switches add up to the kernel's account of their whole lives: what
/// their parent's wait4 gets. atop shows such processes too (process
/// accounting at exit); from /proc snapshots alone they vanish.
#[test]
fn processes_that_end_between_snapshots_have_atop_lines_that_add_up() {
    let _machine = shared();
    let scratch = Scratch::new();
    let rec = scratch.rec();
    let recorder = Recorder::start(
        &rec,
        &["--events", "counters,tasks", "--task-interval", "3s"],
    );
    recorder.keep_on_time();
    thread::sleep(Duration::from_millis(500));
    let long = thread::spawn(|| load_reaped(&["burn", "4"]));
    thread::sleep(Duration::from_millis(500));
    let short = thread::spawn(|| load_reaped(&["burn", "1"]));
    thread::sleep(Duration::from_millis(200));
    // Faults by the thousand and two sleeps, in half a second.
    let toucher = load_reaped(&["touch", "3000", "200"]);
    let workloads = [long.join().unwrap(), short.join().unwrap(), toucher];
    thread::sleep(Duration::from_millis(500));
    recorder.stop();

    let rows: Vec<serde_json::Value> = atop_rows(&rec, "3s")
        .into_iter()
        .filter(|r| r["kind"] == "process")
        .collect();
    for (json, usage) in &workloads {
        let pid = json["pid"].as_i64().unwrap();
        let lines: Vec<&serde_json::Value> = rows
            .iter()
            .filter(|r| r["pid"].as_i64() == Some(pid))
            .collect();
        if lines.is_empty() {
            // What the recording holds of it, and what it lost: a final row
            // the kernel never handed over is a `not_freed` loss.
            let rows = sql(
                &rec,
                &format!("SELECT * FROM task_stat WHERE pid = {pid} ORDER BY ts"),
            );
            let losses = sql(&rec, "SELECT * FROM loss");
            panic!("no atop line for {json}: task_stat rows {rows:?}; losses {losses:?}");
        }
        // Rates times the seconds they are over give back the amounts.
        let total = |rate: &str, scale: f64| -> f64 {
            lines
                .iter()
                .map(|r| r[rate].as_f64().unwrap() * r["seconds"].as_f64().unwrap() / scale)
                .sum()
        };
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        let cpu = secs(usage.ru_utime) + secs(usage.ru_stime);
        let faults = (usage.ru_minflt + usage.ru_majflt) as f64;
        let switches = (usage.ru_nvcsw + usage.ru_nivcsw) as f64;
        let (got_cpu, got_faults, got_switches) = (
            total("cpu_pct", 100.0),
            total("faults_s", 1.0),
            total("csw_s", 1.0),
        );
        let what = format!(
            "{json}: report cpu {got_cpu:.4} s, faults {got_faults:.1}, switches {got_switches:.1}; \
             wait4 cpu {cpu:.4} s, faults {faults}, switches {switches}; lines {lines:?}"
        );
        eprintln!("atop lines vs wait4: {what}");
        assert!((got_cpu - cpu).abs() < 0.002, "{what}");
        assert!((got_faults - faults).abs() < 0.5, "{what}");
        assert!((got_switches - switches).abs() < 0.5, "{what}");
        // Its final counters are dated by its exit, as atop's accounting
        // record is, not by the task's free, which comes after the reap (and,
        // RCU's threads starved, seconds after): before its output closed.
        let closed = json["closed_utc_ns"].as_i64().unwrap();
        let ended = sql(
            &rec,
            &format!(
                "SELECT CAST(ts AS BIGINT) AS ts FROM task_stat WHERE pid = {pid} AND state = 'X'"
            ),
        );
        assert_eq!(ended.len(), 1, "one final row: {ended:?}");
        let before_close_us = (closed - ended[0]["ts"].as_i64().unwrap()) / 1000;
        assert!(
            (0..100_000).contains(&before_close_us),
            "final row {before_close_us} µs before its output closed"
        );
    }
    // The short burner lived a third of an interval: its lines show what
    // it got of a core over its own life (about all of one), not a third.
    let (short, _) = &workloads[1];
    let own =
        100.0 * short["cpu_seconds"].as_f64().unwrap() / short["wall_seconds"].as_f64().unwrap();
    let short_lines: Vec<f64> = rows
        .iter()
        .filter(|r| r["pid"] == short["pid"])
        .map(|r| r["cpu_pct"].as_f64().unwrap())
        .collect();
    assert!(
        short_lines.iter().all(|p| (p - own).abs() < 10.0),
        "short burner CPU % per line: {short_lines:?}, its own {own:.1} %"
    );
}
