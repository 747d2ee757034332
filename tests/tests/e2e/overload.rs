use std::{fs, process::Command};

use crate::fixture::{
    bin, quiet, release_bin, run, settle, sql, sql_count, utc_now_ns, Recorder, Scratch,
};

/// The bound `hindsight-record --help` states, for the defaults and the
/// release build (the debug build maps about 5 MiB more of its own code).
const RSS_BOUND_KB: u64 = 64 << 10;

fn status_kb(pid: i32, key: &str) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
}

#[test]
fn a_switch_storm_is_dropped_and_counted_within_a_bounded_memory() {
    // Exclusive: the storm would make other tests' recordings lose events.
    let _machine = quiet();
    let scratch = Scratch::new();
    let rec = scratch.rec();
    // The shipped build at its defaults, as README and --help state the
    // bound for, at Nice=19 as dist/hindsight-record.service runs it: eight
    // ping-pong pairs then switch far faster than it drains.
    let mut niced = Command::new("nice");
    niced
        .args(["-n", "19"])
        .arg(release_bin("hindsight-record"));
    let recorder = Recorder::start_command(niced, &rec, &["--chunk", "5s"]);
    let storm_began = utc_now_ns();
    let out = run(Command::new(bin("hs-pingpong")).args(["--rounds", "100000", "--pairs", "8"]));
    let storm_ended = utc_now_ns();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let truth: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    settle();
    // A counter row is stamped when its round starts and reads the RSS a
    // moment later: only rows stamped a second before VmHWM was read are
    // sure to have read it before (one stamped just before could read a
    // later, higher RSS, as a full suite's run showed: 58092 vs 58072 kB).
    let peak_read_ns = utc_now_ns() - 1_000_000_000;
    let peak_kb = status_kb(recorder.pid(), "VmHWM:");
    let stop_sent_ns = utc_now_ns();
    let log = recorder.stop();

    let children = truth["children"].as_array().unwrap();
    let kernel: i64 = children
        .iter()
        .map(|c| c["voluntary"].as_i64().unwrap() + c["nonvoluntary"].as_i64().unwrap())
        .sum();
    let pids: Vec<String> = children.iter().map(|c| c["pid"].to_string()).collect();
    let recorded = sql_count(
        &rec,
        &format!(
            "SELECT count(*) AS n FROM sched_switch WHERE prev_pid IN ({})",
            pids.join(",")
        ),
    );
    // Ring-full drops are counted per CPU, not per task: during the storm
    // nearly every switch is the workload's, and the few of other tasks that
    // were dropped too make the sum a little high, well inside 1 %.
    let dropped = sql_count(
        &rec,
        "SELECT CAST(COALESCE(SUM(lost), 0) AS BIGINT) AS n FROM loss WHERE source = 'ring_full:sched_switch'",
    );
    eprintln!(
        "storm: kernel {kernel} switches, recorded {recorded}, dropped {dropped}, peak RSS {peak_kb} kB"
    );
    assert!(
        dropped > kernel / 10,
        "the storm must overrun the recorder: {dropped} of {kernel} dropped\n{log}"
    );
    let accounted = recorded + dropped;
    assert!(
        (accounted - kernel).abs() * 100 <= kernel,
        "recorded {recorded} + dropped {dropped} = {accounted} vs the kernel's {kernel} switches"
    );
    assert!(
        peak_kb < RSS_BOUND_KB,
        "peak RSS {peak_kb} kB exceeds the stated {RSS_BOUND_KB} kB"
    );
    // The losses are dated by the second they happened in, however late
    // the starved recorder read them: every whole second inside the storm
    // (one fewer than its length, at worst) lost some, as the ring stays
    // full while it lasts, and no loss lies outside it. They
    // are counted per CPU: the pairs ran on every CPU, so every CPU lost
    // some, and no loss row of the ring is without its CPU.
    let intervals = sql(
        &rec,
        &format!(
            "SELECT COUNT(DISTINCT ts) AS n, COUNT(DISTINCT cpu) AS cpus,
                SUM(CASE WHEN cpu IS NULL THEN 1 ELSE 0 END) AS without_cpu,
                SUM(CASE WHEN CAST(ts AS BIGINT) < {storm_began}
                          OR CAST(ts AS BIGINT) > {storm_ended} + 1000000000 THEN 1 ELSE 0 END) AS outside
             FROM loss WHERE source = 'ring_full:sched_switch'"
        ),
    );
    let storm_seconds = (storm_ended - storm_began) / 1_000_000_000;
    eprintln!("storm: {storm_seconds} whole seconds; losses {intervals:?}");
    let online = std::thread::available_parallelism().unwrap().get() as i64;
    assert!(
        intervals[0]["n"].as_i64().unwrap() >= (storm_seconds - 1).max(2),
        "losses in every second of a {storm_seconds} s storm: {intervals:?}"
    );
    assert_eq!(intervals[0]["outside"].as_i64(), Some(0), "{intervals:?}");
    assert_eq!(intervals[0]["cpus"].as_i64(), Some(online), "{intervals:?}");
    assert_eq!(
        intervals[0]["without_cpu"].as_i64(),
        Some(0),
        "{intervals:?}"
    );
    assert!(log.contains("events lost (see the loss table)"), "{log}");

    // The recording's account of the recorder itself agrees with /proc: its
    // resident memory, read once a second, of the kernel's peak's size and
    // within the bound; the time its writer held the event loop
    // up, a running total that never falls and fits in the time recorded.
    let own = sql(
        &rec,
        &format!(
            "SELECT name, MAX(value) AS highest, COUNT(*) AS n,
                MAX(CASE WHEN CAST(ts AS BIGINT) <= {peak_read_ns} THEN value END) AS until_peak_read,
                SUM(CASE WHEN value < previous THEN 1 ELSE 0 END) AS falls,
                CAST(MIN(ts) AS BIGINT) AS first_ns,
                (CAST(MAX(ts) AS BIGINT) - CAST(MIN(ts) AS BIGINT)) / 1000 AS span_us
         FROM (SELECT ts, name, value,
                      LAG(value) OVER (PARTITION BY name ORDER BY ts) AS previous
               FROM counter WHERE source = 'recorder' AND name IN ('rss_kb', 'writer_wait_us'))
         GROUP BY name ORDER BY name"
        ),
    );
    eprintln!("storm: the recorder's own counters {own:?}");
    assert_eq!(own.len(), 2, "{own:?}");
    let (rss, wait) = (&own[0], &own[1]);
    // One row a second until the stop, or the round counted late: at
    // Nice=19 the storm starves the recorder and some rounds come a whole
    // second late. The last row is taken after the stop's wait for the
    // pairs' frees (up to 10 s on a loaded machine), which are no rounds.
    let late = sql_count(
        &rec,
        "SELECT CAST(COALESCE(SUM(lost), 0) AS BIGINT) AS n FROM loss WHERE source = 'late:counter'",
    );
    let seconds = (stop_sent_ns - rss["first_ns"].as_i64().unwrap()) / 1_000_000_000;
    assert!(
        rss["n"].as_i64().unwrap() + late >= seconds,
        "{rss:?}: {late} late rounds over the {seconds} s to the stop"
    );
    // Its readings stay under the stated bound, as the kernel's peak does,
    // and the highest is of the kernel's peak's size: a reading in the
    // wrong unit, or of another process, is far off. Not compared more
    // closely: VmHWM misses what the recorder hands back with madvise
    // (malloc_trim) before the kernel next raises its high-water mark, on
    // unmap or exit (fresh-clone run #38: a reading 32 kB above it), and a
    // reading once a second misses the storm's first second of growth
    // (32,484 kB read an instant before a peak of 50,972 kB).
    let highest = rss["highest"].as_i64().unwrap() as u64;
    assert!(
        highest <= RSS_BOUND_KB && 2 * highest >= peak_kb,
        "the recorder's highest rss_kb {highest} vs VmHWM {peak_kb} kB and the bound {RSS_BOUND_KB} kB"
    );
    assert_eq!(wait["falls"], 0, "{wait:?}");
    let waited_us = wait["highest"].as_i64().unwrap();
    let span_us = wait["span_us"].as_i64().unwrap();
    assert!(
        (0..=span_us).contains(&waited_us),
        "writer_wait_us {waited_us} over {span_us} us"
    );
}
