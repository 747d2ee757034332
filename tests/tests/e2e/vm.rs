//! The recorder on other kernels, and on a machine with two NUMA nodes:
//! each test boots a Debian kernel under QEMU (`tests/vm/guest`, TCG; it
//! fetches the kernel package and QEMU where missing), records inside it
//! with this build, and analyzes the recording here, against what the guest
//! itself counted.
//!
//! Exclusive: an emulated guest keeps both CPUs busy.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use crate::fixture::{
    hindsight_stdout, quiet, repo, run, sql, sql_count, table_count, table_rows, Scratch,
};

/// Boots a guest (`guest_args`: `--numa`, `--kernel PACKAGE`) that runs
/// `tests/vm/<script>` with the repository and `args`; returns its output
/// directory. Panics with the guest's log when the script failed.
fn in_guest(scratch: &Scratch, guest_args: &[&str], script: &str, args: &[&str]) -> PathBuf {
    let out = scratch.dir.path().join("guest");
    fs::create_dir_all(&out).unwrap();
    let repo = repo();
    let result = run(Command::new(repo.join("tests/vm/guest"))
        .args(guest_args)
        .arg(&out)
        .arg(repo.join("tests/vm").join(script))
        .arg(&repo)
        .args(args));
    let log = |name: &str| fs::read_to_string(out.join(name)).unwrap_or_default();
    assert!(
        result.status.success(),
        "guest {script}: {}\n--- guest.log\n{}\n--- record.log\n{}\n--- console (end)\n{}",
        String::from_utf8_lossy(&result.stderr),
        log("guest.log"),
        log("record.log"),
        log("console.log")
            .lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .join("\n"),
    );
    out
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .unwrap()
}

/// Debian 12's own kernel.
#[test]
fn the_recorder_records_on_6_1() {
    records_on("6.1");
}

/// The kernel of Debian 12's backports.
#[test]
fn the_recorder_records_on_6_12() {
    records_on("6.12");
}

/// Every context switch of a known workload is in the recording made on a
/// kernel of `series`, and whatever the recorder could not record there it
/// named once on stderr, in `--list-events` and in the recording.
fn records_on(series: &str) {
    let _machine = quiet();
    let scratch = Scratch::new();
    let out = in_guest(&scratch, &["--kernel", series], "record.sh", &[]);
    let kernel = fs::read_to_string(out.join("uname"))
        .unwrap()
        .trim()
        .to_owned();
    assert!(
        kernel.starts_with(&format!("{series}.")),
        "guest kernel {kernel}"
    );
    let log = fs::read_to_string(out.join("record.log")).unwrap();
    let status = fs::read_to_string(out.join("record.status")).unwrap();
    eprintln!("recorder on {kernel}: exit {status}{log}");
    assert_eq!(status.trim(), "0", "{log}");

    let rec = out.join("rec");
    let truth = json(&out.join("pingpong.json"));
    for child in truth["children"].as_array().unwrap() {
        let tid = child["tid"].as_i64().unwrap();
        let kernel = child["voluntary"].as_i64().unwrap() + child["nonvoluntary"].as_i64().unwrap();
        let recorded = sql_count(
            &rec,
            &format!("SELECT count(*) AS n FROM sched_switch WHERE prev_tid = {tid}"),
        );
        assert_eq!(recorded, kernel, "switches of {child} on {kernel}");
    }
    // Timer rounds an emulated CPU was too slow for (`late:`) aside,
    // nothing was lost.
    let lost = sql_count(
        &rec,
        "SELECT CAST(COALESCE(SUM(lost), 0) AS BIGINT) AS n FROM loss WHERE source NOT LIKE 'late:%'",
    );
    if lost != 0 {
        let by_source = sql(
            &rec,
            "SELECT CAST(source AS VARCHAR) AS source, cpu, CAST(sum(lost) AS BIGINT) AS lost, \
               CAST(min(ts) AS VARCHAR) AS first, CAST(max(ts) AS VARCHAR) AS last \
             FROM loss GROUP BY source, cpu ORDER BY source, cpu",
        );
        panic!("{lost} events lost on an idle guest on {kernel}: {by_source:?}");
    }
    // Its off-CPU stacks (with copies of the user stack) loaded on this
    // kernel: every switch of the ping-pong carries one. (Their user
    // frames are not checked: the emulated guest drains the ring after the
    // short children have exited, too late to read their memory maps.)
    let with_stacks = sql(
        &rec,
        &format!(
            "SELECT count(*) AS n, count(stack_id) AS stacks FROM sched_switch WHERE prev_tid = {}",
            truth["children"][0]["tid"]
        ),
    );
    assert_eq!(
        with_stacks[0]["n"], with_stacks[0]["stacks"],
        "switches with a stack on {kernel}"
    );
    // What this kernel lacks is said once and kept in the recording.
    let meta = json(&rec.join("recording.json"));
    let session = meta["sessions"].as_array().unwrap().last().unwrap().clone();
    let skipped: Vec<&str> = session["skipped_probes"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    eprintln!("skipped on {kernel}: {skipped:?}");
    let listed = fs::read_to_string(out.join("list-events.txt")).unwrap();
    assert!(listed.contains("sched      records"), "{listed}");
    for group in skipped.iter().filter_map(|p| p.strip_prefix("group:")) {
        assert!(
            listed.contains(&format!("{group:<10} cannot record: ")),
            "--list-events on {kernel} says {group} cannot record: {listed}"
        );
        assert!(
            log.contains(&format!("the {group} group cannot record on this kernel (")),
            "{group}: {log}"
        );
        assert!(
            !session["events"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g == group),
            "{group} is not listed as recorded: {session}"
        );
    }
    assert!(
        log.lines().filter(|l| l.contains("warning")).count() <= skipped.len(),
        "one line per thing skipped: {log}"
    );
}

/// The problem hindsight was born from, recorded and found: a process whose
/// memory sits on one NUMA node while it runs on the other, and the kernel's
/// NUMA balancing moving that memory over. The recording must show which
/// process, how many pages moved and when, and agree with the guest's own
/// account: the process's pages per node before and after (`move_pages`)
/// and `/proc/vmstat`.
#[test]
fn numa_balancing_moving_a_processs_memory_is_recorded_and_reported() {
    let _machine = quiet();
    let scratch = Scratch::new();
    let out = in_guest(&scratch, &["--numa"], "numa.sh", &["128", "20", "30"]);
    let log = fs::read_to_string(out.join("record.log")).unwrap();
    let status = fs::read_to_string(out.join("record.status")).unwrap();
    assert_eq!(status.trim(), "0", "{log}");
    let stray = json(&out.join("stray.json"));
    eprintln!("numa-stray: {stray}");
    let pages = stray["pages"].as_i64().unwrap();
    let node = |when: &str, n: usize| stray[when][n].as_i64().unwrap_or(0);
    // The scenario itself: all on node 1, then balancing moved most to node 0.
    assert_eq!(
        node("on_node_before", 1),
        pages,
        "placed on node 1: {stray}"
    );
    let moved = node("on_node_after", 0);
    assert!(moved > pages / 2, "balancing moved its memory: {stray}");

    let vmstat = |name: &str| -> i64 {
        let value = |file: &str| {
            fs::read_to_string(out.join(file))
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .map_or(0, |v| v.trim().parse::<i64>().unwrap())
        };
        value("vmstat.after") - value("vmstat.before")
    };
    let (migrated, hint_faults) = (vmstat("numa_pages_migrated"), vmstat("numa_hint_faults"));
    eprintln!("guest vmstat: numa_pages_migrated +{migrated}, numa_hint_faults +{hint_faults}");

    let rec = out.join("rec");
    let pid = stray["pid"].as_i64().unwrap();
    let recorded = sql(
        &rec,
        &format!(
            "SELECT CAST(reason AS VARCHAR) AS reason, CAST(sum(pages_succeeded) AS BIGINT) AS pages
             FROM numa_event WHERE pid = {pid} AND CAST(kind AS VARCHAR) = 'migrate_pages' GROUP BY 1"
        ),
    );
    eprintln!("recorded migrations of {pid}: {recorded:?}");
    let misplaced = recorded
        .iter()
        .find(|r| r["reason"] == "numa_misplaced")
        .and_then(|r| r["pages"].as_i64())
        .unwrap_or(0);
    // Every page of the mapping it found on node 0 at the end moved there
    // through a migration the recorder saw it make, and a few more of its
    // own (stack, heap: 11 pages of 32768 when measured); the guest counted
    // them all, with the recorder's own.
    assert!(
        misplaced >= moved && misplaced - moved <= pages / 100,
        "{misplaced} pages recorded migrating, {moved} moved to node 0: {recorded:?}"
    );
    assert!(
        misplaced <= migrated,
        "vmstat numa_pages_migrated +{migrated}"
    );

    // The reports show it: `report numa` names the process and its pages.
    let report = hindsight_stdout(&["report", "numa", rec.to_str().unwrap(), "--format", "json"]);
    let rows: Vec<serde_json::Value> = report
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let shown: i64 = rows
        .iter()
        .filter(|r| r["kind"] == "migrate" && r["pid"].as_i64() == Some(pid))
        .map(|r| r["pages_succeeded"].as_i64().unwrap_or(0))
        .sum();
    assert_eq!(shown, misplaced, "report numa: {report}");
    assert!(
        rows.iter()
            .any(|r| r["kind"] == "counter" && r["counter"] == "numa_hint_faults"),
        "report numa shows the hinting faults rising: {report}"
    );
    // And as a person reads it (numastat's and numamove's screens): the
    // process's lines of pages migrated, the hinting faults of the
    // balancing lines, and a column for each node.
    let table = hindsight_stdout(&["report", "numa", rec.to_str().unwrap()]);
    let lines = table_rows(&table, &pid.to_string());
    let shown_pages: i64 = lines
        .iter()
        .filter(|r| r.last().map(String::as_str) == Some("numa_misplaced"))
        .inspect(|r| assert_eq!(r[1], "numa-stray", "{table}"))
        .map(|r| table_count(&r[2]))
        .sum();
    assert_eq!(shown_pages, misplaced, "report numa:\n{table}");
    let hint_faults_json: i64 = rows
        .iter()
        .filter(|r| {
            r["kind"] == "counter" && r["source"] == "vmstat" && r["counter"] == "numa_hint_faults"
        })
        .map(|r| r["delta"].as_i64().unwrap())
        .sum();
    let hint_faults_shown: i64 = table
        .lines()
        .filter_map(|l| l.strip_prefix("BALANCING  hinting faults "))
        .map(|rest| table_count(rest.split_whitespace().next().unwrap()))
        .sum();
    assert_eq!(hint_faults_shown, hint_faults_json, "report numa:\n{table}");
    assert!(
        table_rows(&table, "PER NODE")
            .iter()
            .any(|r| r[1..] == ["node0", "node1"]),
        "report numa:\n{table}"
    );
    // `report timeline`, against the quiet half-minutes on either side,
    // names the interval the memory moved in and the process that moved it.
    let timeline = hindsight_stdout(&[
        "report",
        "timeline",
        rec.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let incidents: serde_json::Value = serde_json::from_str(&timeline).unwrap();
    // When half of the process's pages had moved.
    let half_moved = sql(
        &rec,
        &format!(
            "SELECT CAST(ts AS VARCHAR) AS ts FROM (
               SELECT ts, sum(pages_succeeded) OVER (ORDER BY ts) AS done,
                 sum(pages_succeeded) OVER () AS total
               FROM numa_event WHERE pid = {pid} AND CAST(kind AS VARCHAR) = 'migrate_pages') m
             WHERE done * 2 >= total ORDER BY ts LIMIT 1"
        ),
    )[0]["ts"]
        .as_str()
        .unwrap()
        .replace(' ', "T");
    // The recorder's own pages may migrate in its first seconds too, an
    // incident of their own (run #33 had one, 40 s before numa-stray's):
    // the one that holds the moment half of numa-stray's pages had moved is
    // looked for, among the incidents of NUMA migrations.
    let holds_half = |incident: &&serde_json::Value| {
        let (start, end) = (
            incident["start"].as_str().unwrap(),
            incident["end"].as_str().unwrap(),
        );
        start[..19] <= half_moved[..19] && half_moved[..19] < end[..19]
    };
    let found = incidents.as_array().unwrap().iter().find(|incident| {
        holds_half(incident)
            && incident["metrics"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["metric"] == "numa_pages_migrated")
    });
    let incident = found.unwrap_or_else(|| {
        panic!("no incident of NUMA migrations holds {half_moved}, when half the pages had moved: {timeline}")
    });
    assert!(
        incident["contributors"]
            .as_array()
            .unwrap()
            .iter()
            .take(2)
            .any(|c| c["pid"].as_i64() == Some(pid)),
        "numa-stray among the first contributors: {incident}"
    );
    // And for the migrations themselves: its pages moved, per second.
    assert!(
        incident["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["metric"] == "process_numa_migrated" && m["pid"].as_i64() == Some(pid)),
        "numa-stray's own migrations departed: {incident}"
    );

    // `report atop`'s system lines count the migrations of the whole
    // recording, which spans the guest's two vmstat readings.
    let atop = hindsight_stdout(&["report", "atop", rec.to_str().unwrap(), "--format", "json"]);
    let in_atop: f64 = atop
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["kind"] == "system")
        .map(|r| {
            // The first interval may hold only memory readings: no rates,
            // and no span to rate over (`seconds` null).
            r["numa_pages_migrated_s"].as_f64().unwrap_or(0.0)
                * r["seconds"].as_f64().unwrap_or(0.0)
        })
        .sum();
    assert!(
        in_atop.round() as i64 >= migrated,
        "report atop: {in_atop} pages migrated, vmstat says +{migrated} inside the recording"
    );
}
