//! `report timeline` finds an injected CPU burst (and nothing in the quiet
//! before it), and memory pressure, an I/O stall, a thrashing page cache
//! and the events a switch storm made the recorder lose, each by its kind,
//! and new programs crowding a service off its CPU; `report runqlat` of a
//! periodic task behind two hogs on its CPU counts its sleeps, and its
//! waits and the hogs' (after wakeups and preemptions) sum to the kernel's
//! schedstat run_delay.

use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use hindsight_schemas::time::rfc3339;
use serde_json::Value;

use crate::fixture::{
    bin, hidden_cpu_seconds, hindsight_stdout, load, quiet, run, shared, sql, sql_count,
    stat_fields_if_any, table_rows, utc_now_ns, Recorder, Scratch,
};

const S: i64 = 1_000_000_000;

/// Holds the machine quiet: any other test's processes would be incidents
/// too (a compiler started by someone else is one, rightly). The quiet
/// holds the recorder's own start: the release build's, as shipped
/// (`Recorder::start_release`).
#[test]
fn timeline_finds_one_injected_burst_and_nothing_in_the_quiet() {
    let _machine = quiet();
    let scratch = Scratch::new();
    let rec_dir = scratch.rec();
    let recorder = Recorder::start_release(&rec_dir, &[]);
    thread::sleep(Duration::from_secs(30));
    let (burst_start, hidden_before) = (utc_now_ns(), hidden_cpu_seconds());
    let burn = load(&["burn", "5"]);
    let (burst_end, hidden_s) = (utc_now_ns(), hidden_cpu_seconds() - hidden_before);
    thread::sleep(Duration::from_secs(15));
    recorder.stop();

    let rec = rec_dir.to_str().unwrap();
    let interval = 5 * S;
    let burn_pid = burn["pid"].as_i64().unwrap();

    // The cpu_time view sums to the CPU time the hog measured itself
    // (getrusage), within what the kernel did not report. On these VMs the
    // kernel now and then switches a thread in without a sched_switch event
    // (bpftrace's tracepoint misses the very same ones): the thread is then
    // seen leaving a CPU it was never seen entering. Such a slice is left out
    // of cpu_time; its length is at most the time since that CPU's previous
    // switch, which bounds the truth from above.
    let sum_s = |sql: &str| -> f64 {
        let out = hindsight_stdout(&["sql", rec, "-f", "json", sql]);
        let row: Value = serde_json::from_str(out.trim()).unwrap();
        row["ns"].as_f64().unwrap_or(0.0) / 1e9
    };
    let on_cpu_s = sum_s(&format!(
        "SELECT sum(dur_ns) AS ns FROM cpu_time WHERE pid = {burn_pid}"
    ));
    let unseen_s = sum_s(&format!(
        "SELECT sum(CAST(ts AS BIGINT) - CAST(before AS BIGINT)) AS ns FROM (
           SELECT ts, prev_pid, prev_tid, lag(ts) OVER on_cpu AS before, lag(next_tid) OVER on_cpu AS came_in
           FROM sched_switch WINDOW on_cpu AS (PARTITION BY cpu ORDER BY ts))
         WHERE prev_pid = {burn_pid} AND came_in <> prev_tid"
    ));
    let own_s = burn["cpu_seconds"].as_f64().unwrap();
    let lost_switches = sql_count(
        &rec_dir,
        "SELECT CAST(coalesce(sum(lost), 0) AS BIGINT) AS n FROM loss WHERE source LIKE '%sched_switch'",
    );
    // A slice is wall time between two tracepoints; the hog's own CPU time
    // leaves out what the kernel knows was not the hog: steal and the VM
    // agent's runs (see `hidden_cpu_seconds`). A fresh-clone run once found
    // 0.42 s more than getrusage in a 5 s burn. They are counted, to a tick
    // per CPU and two for the agent.
    let tolerance = 0.01 + 0.01 * own_s;
    let ticks = 0.01 * (2 + thread::available_parallelism().map_or(1, |n| n.get())) as f64;
    assert!(
        on_cpu_s <= own_s + tolerance + hidden_s + ticks,
        "cpu_time says {on_cpu_s} s, more than the hog's getrusage {own_s} s \
         and the {hidden_s} s of steal and VM agent meanwhile"
    );
    if lost_switches == 0 {
        assert!(
            on_cpu_s + unseen_s >= own_s - tolerance,
            "cpu_time says {on_cpu_s} s (+ at most {unseen_s} s the kernel did not report), \
             the hog's getrusage {own_s} s"
        );
    }

    let text = hindsight_stdout(&["report", "timeline", rec, "-i", "5s", "-f", "json"]);
    let incidents: Vec<Value> = serde_json::from_str(&text).expect("one JSON array");
    assert_eq!(incidents.len(), 1, "expected one incident: {text}");
    let incident = &incidents[0];
    let time = |key: &str| {
        parse_utc(
            incident[key]
                .as_str()
                .unwrap_or_else(|| panic!("{key}: {incident}")),
        )
    };
    let (start, end, peak) = (time("start"), time("end"), time("peak"));
    assert!(
        (start - burst_start).abs() <= interval && (end - burst_end).abs() <= interval,
        "incident {} .. {} vs burst {} .. {}",
        rfc3339(start),
        rfc3339(end),
        rfc3339(burst_start),
        rfc3339(burst_end)
    );
    assert!((start..end).contains(&peak), "{incident}");
    let contributors = incident["contributors"].as_array().unwrap();
    assert!(
        contributors
            .iter()
            .take(3)
            .any(|c| c["pid"].as_i64() == Some(burn_pid)),
        "hs-load ({burn_pid}) is not among the top contributors: {incident}"
    );
    // Its one thread's CPU time in the incident is the burn's getrusage,
    // by the bounds above, less what fell outside the incident's span.
    let burner = contributors
        .iter()
        .find(|c| c["pid"].as_i64() == Some(burn_pid))
        .unwrap();
    let threads = burner["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 1, "{burner}");
    assert_eq!(threads[0]["tid"].as_i64(), Some(burn_pid), "{burner}");
    let thread_s = threads[0]["on_cpu_s"].as_f64().unwrap();
    let outside_s = ((start - burst_start).max(0) + (burst_end - end).max(0)) as f64 / 1e9;
    assert!(
        thread_s <= own_s + tolerance + hidden_s + ticks,
        "the burner's thread: {thread_s} s on CPU, getrusage {own_s} s"
    );
    if lost_switches == 0 {
        assert!(
            thread_s + unseen_s + outside_s >= own_s - tolerance,
            "the burner's thread: {thread_s} s on CPU (+ {unseen_s} s unreported, \
             {outside_s} s of the burst outside the incident), getrusage {own_s} s"
        );
    }
    eprintln!("burner's thread in the incident: {thread_s} s on CPU, getrusage {own_s} s");
    // Its most sampled stack is in the burn loop, named from its symbols.
    let stacks = burner["stacks"].as_array().unwrap();
    assert!(
        stacks
            .first()
            .and_then(|s| s["frames"].as_str())
            .is_some_and(|f| f.contains("hs_load::burn")),
        "the burner's stacks: {burner}"
    );
    let metrics = incident["metrics"].as_array().unwrap();
    let hog = metrics
        .iter()
        .find(|m| m["metric"] == "process_cpu" && m["pid"].as_i64() == Some(burn_pid))
        .unwrap_or_else(|| panic!("no process_cpu departure of the hog: {incident}"));
    // The table a person reads: the one incident, with the hog's line and
    // its observed CPU, rounded to three digits.
    let table = hindsight_stdout(&["report", "timeline", rec, "-i", "5s"]);
    assert_eq!(table.matches("== incident ").count(), 1, "{table}");
    let lines: Vec<Vec<String>> = table_rows(&table, "process_cpu")
        .into_iter()
        .filter(|r| r[1] == burn_pid.to_string())
        .collect();
    assert_eq!(lines.len(), 1, "{table}");
    assert_eq!(lines[0][2], "hs-load", "{table}");
    // METRIC PID COMM BASELINE NORMAL<= OBSERVED ...
    let observed: f64 = lines[0][5].replace(',', "").parse().unwrap();
    let truth = hog["observed"].as_f64().unwrap();
    assert!(
        (observed - truth).abs() <= 0.005 * truth + 0.05,
        "observed {observed} in the table, {truth} in JSON:\n{table}"
    );
    assert!(
        hog["observed"].as_f64().unwrap() > 25.0 && hog["baseline"].as_f64().unwrap() < 5.0,
        "{hog}"
    );

    // The 30 s before the burst, alone, are quiet.
    let quiet_text = hindsight_stdout(&[
        "report",
        "timeline",
        rec,
        "-i",
        "5s",
        "-f",
        "json",
        "--to",
        &rfc3339(burst_start - S),
    ]);
    if quiet_text.trim() != "[]" {
        // Say what the machine's CPU time went to meanwhile: cpu_busy counts
        // steal and interrupts too, which no process's slices hold.
        let split = sql(
            &rec_dir,
            &format!(
                "SELECT CAST(b AS VARCHAR) AS bin,
                   string_agg(name || ' ' || CAST(d AS VARCHAR), ', ' ORDER BY name) AS ticks
                 FROM (SELECT date_bin(INTERVAL '5 seconds', ts) AS b, name, max(value) - min(value) AS d
                       FROM counter
                       WHERE source = 'stat' AND scope IS NULL AND ts <= '{}' AND name IN
                         ('user', 'nice', 'system', 'idle', 'iowait', 'irq', 'softirq', 'steal')
                       GROUP BY 1, 2)
                 GROUP BY b ORDER BY b",
                rfc3339(burst_start)
            ),
        );
        panic!("the quiet part has incidents: {quiet_text}\n/proc/stat ticks of the quiet part: {split:?}");
    }

    // Narrowed to the burst, as one would for a ticket: the range is all
    // burst, and the hour before it is the baseline, so the hog is found.
    let narrowed = hindsight_stdout(&[
        "report",
        "timeline",
        rec,
        "-i",
        "1s",
        "-f",
        "json",
        "--from",
        &rfc3339(burst_start + S),
        "--to",
        &rfc3339(burst_end - S),
    ]);
    let incidents: Vec<Value> = serde_json::from_str(&narrowed).unwrap();
    assert!(
        incidents.iter().any(|i| i["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["metric"] == "process_cpu" && m["pid"].as_i64() == Some(burn_pid))),
        "the burst, narrowed to, is not an incident of the hog: {narrowed}"
    );
}

/// Memory pressure, an I/O stall and the page cache thrashing, each made
/// on the real kernel by a program of its own between quiet stretches:
/// the timeline finds each as an incident of its kind with that program
/// among its first contributors, the events a switch storm made the
/// recorder lose as one incident of kind `lost`, and nothing in the quiet
/// but what the recorder itself led, of kind `recorder`.
/// The I/O stall's process is shown with the stacks it blocked in.
#[test]
fn timeline_finds_memory_io_and_cache_incidents_by_kind() {
    let _machine = quiet();
    let scratch = Scratch::new();
    // Written and on disk before the recording starts: the cold reader
    // drops it from the page cache and reads it back, page by page.
    let cold = scratch.dir.path().join("cold");
    std::fs::write(&cold, vec![1u8; 128 << 20]).unwrap();
    std::fs::File::open(&cold).unwrap().sync_all().unwrap();
    let synced = scratch.dir.path().join("synced");
    let (cold, synced) = (cold.to_str().unwrap(), synced.to_str().unwrap());
    let injections = [
        ("hs-memory", ["fault-storm", "5", "64"], "memory"),
        ("hs-io", ["sync-writes", "5", synced], "io"),
        ("hs-cache", ["cold-reads", "5", cold], "cache_thrash"),
    ];
    let rec_dir = scratch.rec();
    // With the stacks threads block in: the I/O stall's are shown. The
    // release build: the debug one, unwinding thousands of off-CPU stacks a
    // second unoptimized, lost a third of the stall's switches.
    let recorder = Recorder::start_release(&rec_dir, &["--off-cpu-stacks"]);
    thread::sleep(Duration::from_secs(30));
    let mut made = Vec::new();
    for (name, args, kind) in injections {
        let start = utc_now_ns();
        let out = run(Command::new(bin("hs-load"))
            .env("HS_LOAD_NAME", name)
            .args(args));
        let end = utc_now_ns();
        assert!(
            out.status.success(),
            "hs-load {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let truth: Value = serde_json::from_slice(&out.stdout).unwrap();
        eprintln!("{name} ({kind}): {truth}");
        made.push((name, kind, truth["pid"].as_i64().unwrap(), start, end));
        thread::sleep(Duration::from_secs(20));
    }
    // A switch storm faster than the recorder drains: what it could not
    // record is an incident too, of its own kind.
    let start = utc_now_ns();
    let out = run(Command::new(bin("hs-pingpong")).args(["--rounds", "60000", "--pairs", "8"]));
    let end = utc_now_ns();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let truth: Value = serde_json::from_slice(&out.stdout).unwrap();
    thread::sleep(Duration::from_secs(20));
    let recorder_pid = i64::from(recorder.pid());
    recorder.stop();
    let dropped = sql_count(
        &rec_dir,
        &format!(
            "SELECT CAST(COALESCE(SUM(lost), 0) AS BIGINT) AS n FROM loss
             WHERE CAST(ts AS BIGINT) BETWEEN {start} AND {end} + 1000000000"
        ),
    );
    eprintln!("hs-pingpong (lost): {dropped} events lost in the storm");
    assert!(dropped > 0, "the storm must overrun the recorder");

    let rec = rec_dir.to_str().unwrap();
    let interval = 5 * S;
    let text = hindsight_stdout(&["report", "timeline", rec, "-i", "5s", "-f", "json"]);
    let incidents: Vec<Value> = serde_json::from_str(&text).expect("one JSON array");
    let span = |incident: &Value| {
        let time = |key: &str| parse_utc(incident[key].as_str().unwrap());
        (time("start"), time("end"))
    };
    for incident in &incidents {
        let names: Vec<&Value> = incident["contributors"]
            .as_array()
            .unwrap()
            .iter()
            .take(3)
            .map(|c| &c["comm"])
            .collect();
        eprintln!(
            "incident {} .. {}: kinds {}, first contributors {names:?}",
            incident["start"], incident["end"], incident["kinds"]
        );
    }
    let overlaps = |(start, end): (i64, i64), from: i64, to: i64| {
        start <= to + interval && end >= from - interval
    };
    let lost = incidents.iter().filter(|i| {
        overlaps(span(i), start, end) && i["kinds"].as_array().unwrap().iter().any(|k| k == "lost")
    });
    assert_eq!(
        lost.count(),
        1,
        "the storm's losses ({truth}) made no one lost incident: {text}"
    );
    made.push((
        "hs-pingpong",
        "lost",
        truth["pid"].as_i64().unwrap(),
        start,
        end,
    ));
    for &(name, kind, pid, from, to) in &made {
        if kind == "lost" {
            continue;
        }
        let found = incidents.iter().filter(|i| overlaps(span(i), from, to));
        let typed: Vec<&Value> = found
            .filter(|i| i["kinds"].as_array().unwrap().iter().any(|k| k == kind))
            .collect();
        assert!(
            typed.iter().any(|i| i["contributors"]
                .as_array()
                .unwrap()
                .iter()
                .take(3)
                .any(|c| c["pid"].as_i64() == Some(pid))),
            "{name} ({pid}) made no {kind} incident it is among the first contributors of, \
             between {} and {}: {text}",
            rfc3339(from),
            rfc3339(to)
        );
    }
    // The stall's process is shown where it blocked: in its fdatasync
    // calls, kernel frames under its own, weighed by its time in D. Whether
    // its CPU or its D time scored higher (a hair apart in some runs), its
    // blocked stacks are among its stacks.
    let io_pid = made.iter().find(|m| m.1 == "io").unwrap().2;
    let stalled = incidents
        .iter()
        .filter(|i| i["kinds"].as_array().unwrap().iter().any(|k| k == "io"))
        .flat_map(|i| i["contributors"].as_array().unwrap())
        .find(|c| c["pid"].as_i64() == Some(io_pid))
        .unwrap_or_else(|| panic!("hs-io ({io_pid}) contributed to no io incident: {text}"));
    let in_d: f64 = stalled["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["offcpu_d_s"].as_f64().unwrap())
        .sum();
    let top = stalled["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s.get("offcpu_d_s").is_some())
        .unwrap_or_else(|| panic!("hs-io is shown with no stack it blocked in: {stalled}"));
    eprintln!("hs-io: {in_d} s in D, its top stack in D: {top}");
    let blocked_s = top["offcpu_d_s"].as_f64().unwrap();
    let frames = top["frames"].as_str().unwrap();
    assert!(
        frames.contains("hs_load::sync_writes") && frames.ends_with("_[k]"),
        "hs-io's top stack is not its fdatasync, named down to the kernel: {frames}"
    );
    // The same sleeps, split by the interval they began in rather than cut
    // at the incident's edges: a few ms of disagreement at most.
    assert!(
        blocked_s > 0.0 && blocked_s <= in_d + 0.05,
        "hs-io's top stack holds {blocked_s} s in D, its threads {in_d} s: {stalled}"
    );
    // In the quiet, only what the recorder itself did, told as its own: on
    // a machine whose page cache has not held the running programs'
    // binaries, its start reads their symbol tables from disk (once, 0.3 s
    // of its symbolizer in D: 12 % I/O pressure in the first interval).
    let in_the_quiet: Vec<&Value> = incidents
        .iter()
        .filter(|i| {
            !made
                .iter()
                .any(|&(_, _, _, from, to)| overlaps(span(i), from, to))
        })
        .collect();
    let (the_recorders, others): (Vec<&Value>, Vec<&Value>) =
        in_the_quiet.into_iter().partition(|i| {
            i["kinds"][0] == "recorder"
                && i["contributors"][0]["pid"].as_i64() == Some(recorder_pid)
        });
    eprintln!(
        "{} incident(s) in the quiet led by the recorder ({recorder_pid})",
        the_recorders.len()
    );
    assert!(others.is_empty(), "incidents in the quiet: {others:?}");
}

/// Run-queue saturation as a sysadmin meets it: a CPU-bound service that
/// ran alone on its CPU for the whole recording is made to wait behind two
/// new programs pinned to the same CPU. The timeline finds one incident, of
/// kinds `new_process` (the newcomers, with no history on the CPU) and
/// `cpu` (the service's run-queue waits, a program with history), with
/// both among its first contributors; the service's thread waited in it as
/// long as the kernel's schedstat counted; nothing before or after it, the
/// recorder's own start included (the release build's, as above).
#[test]
fn timeline_names_new_hogs_and_the_run_queue_waits_they_caused() {
    let _machine = quiet();
    let scratch = Scratch::new();
    let rec_dir = scratch.rec();
    let on_cpu0 = |name: &str, seconds: &str| {
        Command::new(bin("hs-load"))
            .args(["burn", seconds])
            .env("HS_LOAD_CPU", "0")
            .env("HS_LOAD_NAME", name)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn hs-load")
    };
    let mut service = on_cpu0("hs-service", "600");
    let run_delay = || -> i64 {
        let text = std::fs::read_to_string(format!("/proc/{}/schedstat", service.id())).unwrap();
        text.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let recorder = Recorder::start_release(&rec_dir, &[]);
    thread::sleep(Duration::from_secs(30));
    let (hogs_start, waited_before) = (utc_now_ns(), run_delay());
    let hogs = [on_cpu0("hs-hog", "5"), on_cpu0("hs-hog", "5")];
    let hog_pids: Vec<i64> = hogs
        .into_iter()
        .map(|hog| {
            let out = hog.wait_with_output().unwrap();
            assert!(out.status.success());
            let done: Value = serde_json::from_slice(&out.stdout).unwrap();
            done["pid"].as_i64().unwrap()
        })
        .collect();
    let (hogs_end, waited_s) = (utc_now_ns(), (run_delay() - waited_before) as f64 / 1e9);
    thread::sleep(Duration::from_secs(15));
    recorder.stop();
    let service_pid = i64::from(service.id());
    service.kill().unwrap();
    service.wait().unwrap();
    eprintln!("the service waited {waited_s} s behind the hogs {hog_pids:?} (schedstat)");
    assert!(
        waited_s > 2.0,
        "the service ({service_pid}) waited only {waited_s} s behind two hogs on its CPU"
    );

    let rec = rec_dir.to_str().unwrap();
    let text = hindsight_stdout(&["report", "timeline", rec, "-i", "5s", "-f", "json"]);
    let incidents: Vec<Value> = serde_json::from_str(&text).expect("one JSON array");
    assert_eq!(incidents.len(), 1, "expected one incident: {text}");
    let incident = &incidents[0];
    let (start, end) = (
        parse_utc(incident["start"].as_str().unwrap()),
        parse_utc(incident["end"].as_str().unwrap()),
    );
    let interval = 5 * S;
    assert!(
        (start - hogs_start).abs() <= interval && (end - hogs_end).abs() <= interval,
        "incident {} .. {} vs hogs {} .. {}",
        rfc3339(start),
        rfc3339(end),
        rfc3339(hogs_start),
        rfc3339(hogs_end)
    );
    let kinds: Vec<&str> = incident["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"new_process") && kinds.contains(&"cpu"),
        "kinds {kinds:?}: {incident}"
    );
    let contributors = incident["contributors"].as_array().unwrap();
    let first: Vec<(&str, i64)> = contributors
        .iter()
        .take(3)
        .map(|c| (c["comm"].as_str().unwrap(), c["pid"].as_i64().unwrap()))
        .collect();
    eprintln!("kinds {kinds:?}, first contributors {first:?}");
    assert!(
        first
            .iter()
            .any(|&(comm, pid)| comm == "hs-hog" && hog_pids.contains(&pid)),
        "the hogs {hog_pids:?} are not among the first contributors: {incident}"
    );
    let service_line = contributors
        .iter()
        .take(3)
        .find(|c| c["pid"].as_i64() == Some(service_pid))
        .unwrap_or_else(|| {
            panic!("the service ({service_pid}) is not among the first contributors: {incident}")
        });
    // The service's waits are what departed, as a program with history.
    assert!(
        incident["metrics"].as_array().unwrap().iter().any(|m| {
            m["metric"] == "process_runq_wait" && m["pid"].as_i64() == Some(service_pid)
        }),
        "no process_runq_wait departure of the service: {incident}"
    );
    // Its one thread waited in the incident what schedstat counted while
    // the hogs ran (alone on its CPU before and after, it hardly waits).
    let threads = service_line["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 1, "{service_line}");
    let ours = threads[0]["runq_wait_s"].as_f64().unwrap();
    eprintln!("the service's thread: {ours} s of run-queue waits in the incident");
    assert!(
        (ours - waited_s).abs() <= 0.05 * waited_s + 0.2,
        "the service's thread waited {ours} s in the incident, schedstat {waited_s} s"
    );
}

/// Parses the RFC 3339 UTC times the analyzer prints.
/// An hour of a busy server in which nothing happened but its usual life
/// (load following the time of day, a cron job every 5 minutes, a backup
/// with I/O waits every 15, an hourly build of short-lived compilers,
/// kswapd and compaction bursts), after 3 hours of the same: at the
/// default interval and sensitivity the timeline raises at most the one
/// false incident an hour issue 20 allows. An hour of the real kernel
/// does not fit the suite's time, so the hours are synthesized
/// (`hs-synthday`, the detection benchmark's day with no incident
/// injected), written by the analyzer's chunk writer, indexed and asked as
/// a user would.
#[test]
fn a_quiet_hour_of_a_busy_server_has_at_most_one_false_incident() {
    let _machine = shared();
    let scratch = Scratch::new();
    let dir = scratch.rec();
    let rec = dir.to_str().unwrap();
    // 4 hours, seed 1, the first incident at hour 4: none.
    let truth = run(Command::new(bin("hs-synthday")).args([rec, "4", "1", "4"]));
    assert!(
        truth.status.success(),
        "hs-synthday: {}",
        String::from_utf8_lossy(&truth.stderr)
    );
    let injected: Vec<Value> = serde_json::from_slice(&truth.stdout).unwrap();
    assert!(injected.is_empty(), "{injected:?}");
    hindsight_stdout(&["index", rec]);
    let last_hour = [
        "--from",
        "2026-12-01T03:00:00Z",
        "--to",
        "2026-12-01T04:00:00Z",
    ];
    let text = hindsight_stdout(
        &[
            &["report", "timeline", rec, "-f", "json"][..],
            &last_hour[..],
        ]
        .concat(),
    );
    let incidents: Vec<Value> = serde_json::from_str(&text).unwrap();
    eprintln!(
        "a quiet synthesized hour after 3 of history: {} incidents {incidents:?}",
        incidents.len()
    );
    assert!(incidents.len() <= 1, "false incidents: {incidents:#?}");
    // The hour was not empty: the cron job, the backups and the build's
    // compilers all started in it, as in the hours before.
    let started = sql(
        &dir,
        "SELECT DISTINCT comm FROM process \
         WHERE ts >= TIMESTAMP '2026-12-01T03:00:00Z' AND ts < TIMESTAMP '2026-12-01T04:00:00Z' \
         ORDER BY comm",
    );
    let started: Vec<&str> = started.iter().filter_map(|r| r["comm"].as_str()).collect();
    assert_eq!(started, ["backup", "cc1", "logrotate"]);
}

fn parse_utc(text: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("{text}: {e}"))
        .timestamp_nanos_opt()
        .unwrap()
}

/// log2 slot of BCC's histograms for a latency in ns: floor(log2(us)), 0 for 0 and 1 us.
fn slot(ns: i64) -> i64 {
    let us = ns / 1000;
    if us < 2 {
        0
    } else {
        63 - i64::from(us.leading_zeros())
    }
}

/// What the kernel counted of process `pid` over its whole life, read once
/// it has exited and before it is reaped.
struct AtExit {
    /// schedstat `run_delay`, ns.
    run_delay: f64,
    /// `/proc/PID/status` voluntary and nonvoluntary context switches.
    switches: (i64, i64),
}

fn at_exit(pid: u32) -> AtExit {
    let stat = format!("/proc/{pid}/stat");
    loop {
        let fields = stat_fields_if_any(&stat).expect("the hog is not reaped yet");
        if fields[0] == "Z" {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let schedstat = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> i64 {
        let line = status.lines().find_map(|l| l.strip_prefix(name)).unwrap();
        line.trim().parse().unwrap()
    };
    AtExit {
        run_delay: schedstat
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap(),
        switches: (
            field("voluntary_ctxt_switches:"),
            field("nonvoluntary_ctxt_switches:"),
        ),
    }
}

/// Total and count of the waits `report runqlat --pid PID` reports.
fn runqlat_totals(rec: &str, pid: i64) -> (f64, i64, Vec<(i64, i64)>) {
    let text = hindsight_stdout(&[
        "report",
        "runqlat",
        rec,
        "--interval",
        "1h",
        "--pid",
        &pid.to_string(),
        "-f",
        "json",
    ]);
    let rows: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|r: &Value| r["kind"] == "process")
        .collect();
    let mut counts: Vec<(i64, i64)> = rows
        .iter()
        .map(|r| {
            let low = r["usecs_low"].as_i64().unwrap();
            (slot(low * 1000), r["count"].as_i64().unwrap())
        })
        .collect();
    counts.sort();
    let total_ns = rows.iter().map(|r| r["total_ns"].as_f64().unwrap()).sum();
    // BCC's screen, as a person reads it, has the same waits in its slots.
    let table = hindsight_stdout(&[
        "report",
        "runqlat",
        rec,
        "--interval",
        "1h",
        "--pid",
        &pid.to_string(),
    ]);
    let in_blocks: Vec<&str> = table
        .split("\n\n")
        .filter(|b| b.contains(&format!("pid {pid} ")))
        .collect();
    let mut shown: Vec<(i64, i64)> = in_blocks
        .iter()
        .flat_map(|b| b.lines())
        .filter_map(|line| {
            let (range, rest) = line.split_once(" : ")?;
            let (low, _) = range.split_once("->")?;
            let low: i64 = low.trim().parse().ok()?;
            let count: i64 = rest.split('|').next()?.trim().parse().ok()?;
            Some((slot(low * 1000), count))
        })
        .collect();
    shown.sort();
    assert_eq!(shown, counts, "report runqlat --pid {pid}:\n{table}");
    (total_ns, counts.iter().map(|c| c.1).sum(), counts)
}

/// How far a sum of waits after preemptions may stray from the kernel's
/// `run_delay`. Ours run, as BCC's runqlat measures them, between
/// sched_switch tracepoints; run_delay between readings of the rq clock at
/// the start of __schedule, and when a wakeup preempted the thread, from
/// the wakeup's reading (the clock skips its next update). Behind a hog
/// ours are 1.2-1.7 us per wait shorter here (4 of 4 runs); allowed 5 %
/// either way, and up to 10 us per wait longer.
fn assert_matches_run_delay(what: &str, ours: f64, waits: i64, kernel: f64, lost: i64) {
    let excess = ours - kernel;
    eprintln!(
        "{what}: {:.1} us more than run_delay per wait over {waits} waits",
        excess / waits.max(1) as f64 / 1000.0
    );
    let tolerance = 0.05 * kernel + 200_000.0;
    assert!(
        -tolerance <= excess && excess <= tolerance + waits as f64 * 10_000.0,
        "{what}: runqlat {ours} ns vs schedstat run_delay {kernel} ns: \
         {:.1} us more per wait over {waits} waits ({lost} events lost)",
        excess / waits.max(1) as f64 / 1000.0
    );
}

#[test]
fn runqlat_waits_behind_two_pinned_hogs_match_the_kernels_run_delay() {
    let _machine = shared();
    let scratch = Scratch::new();
    let rec_dir = scratch.rec();
    let rec = rec_dir.to_str().unwrap();
    let recorder = Recorder::start(&rec_dir, &["--events", "sched"]);
    let hog = || {
        Command::new(bin("hs-load"))
            .args(["burn", "4"])
            .env("HS_LOAD_CPU", "0")
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn hog")
    };
    let mut hogs = [hog(), hog()];
    thread::sleep(Duration::from_millis(200));
    let ticks = 100;
    let tick = load_on_cpu0(&["tick", &ticks.to_string(), "20000"]);
    let hog_counts: Vec<(u32, AtExit)> = hogs.iter().map(|h| (h.id(), at_exit(h.id()))).collect();
    for h in &mut hogs {
        h.wait().unwrap();
    }
    thread::sleep(Duration::from_millis(300));
    recorder.stop();
    let lost = sql_count(&rec_dir, "SELECT coalesce(sum(lost), 0) FROM loss");

    // The periodic task: one wait after each wakeup (one per sleep, plus
    // the new task's first, the one after it moved itself onto the hogs' CPU
    // and perhaps one at exit), and the waits after the hogs preempted it.
    let pid = tick["pid"].as_i64().unwrap();
    let sleeps = tick["late_ns"].as_array().unwrap().len() as i64;
    assert!(sleeps > ticks / 2, "slept only {sleeps} of {ticks} ticks");
    let after_wakeup = sql_count(
        &rec_dir,
        &format!("SELECT count(*) FROM runq_latency WHERE pid = {pid} AND after = 'wakeup'"),
    );
    assert!(
        (sleeps..=sleeps + 4).contains(&after_wakeup),
        "{after_wakeup} waits after a wakeup for {sleeps} sleeps"
    );
    // Its run_delay from when it had pinned itself to when it finished,
    // against the waits that began in that window. Every switch-out of it
    // follows a run, and every run a wait. On these machines the
    // tracepoints that fire while the VM's agent (pid 1's threads) is on a
    // CPU reach no tracer (perf sees none either): a run of the task that
    // began with the agent leaving the CPU, after a wakeup in the agent's
    // time, has no recorded start (1 run in 5-10 here). Such runs are
    // counted, and their waits bounded by what was recorded around them
    // ([`unseen_waits`]).
    let window = format!(
        "pid = {pid} AND ts >= to_timestamp_nanos({}) AND ts < to_timestamp_nanos({})",
        tick["start_utc_ns"], tick["end_utc_ns"]
    );
    let in_window = |what: &str, table: &str| {
        let out = hindsight_stdout(&[
            "sql",
            rec,
            "-f",
            "csv",
            &format!("SELECT {what} FROM {table} WHERE {window}"),
        ]);
        let value = out.lines().nth(1).unwrap_or("0");
        value.parse::<f64>().unwrap_or(0.0)
    };
    let total_ns = in_window("sum(latency_ns)", "runq_latency");
    let waits = in_window("count(*)", "runq_latency") as i64;
    let outs = in_window(
        "count(*)",
        "(SELECT ts, prev_pid AS pid FROM sched_switch) s",
    ) as i64;
    // Two references bound these waits, one from each side. run_delay is
    // the lower one: every wait it counts is one of ours, give or take the
    // microseconds between the rq clock's reading and a tracepoint. It is not
    // an upper one: a wakeup that preempts the running task at once has the
    // rq clock skip its next update (wakeup_preempt()), so __schedule reads
    // the wakeup's clock and run_delay counts that wait as 0. bpftrace,
    // reading sched_info.run_delay at each switch-out of this task behind two
    // hogs, found 483 of 502 waits counted under 1 us where the tracepoints
    // were 10 us to 1 ms apart (the interrupt's exit, the tracers' own
    // programs, and on a busy host steal: once 5.4 ms over 100 waits, which
    // failed a check that took run_delay for both bounds). The upper
    // reference is the task's own lateness: a wait after a wakeup lies
    // inside its tick's overrun, from the timer's deadline to the return
    // from sleep (timer slack 1 ns); a wait after a preemption is one that
    // run_delay counts whole.
    let after = |kind: &str| {
        in_window(
            "sum(latency_ns)",
            &format!("(SELECT * FROM runq_latency WHERE after = '{kind}') w"),
        )
    };
    let (after_wakeup_ns, after_preemption_ns) = (after("wakeup"), after("preemption"));
    let late_ns: f64 = tick["late_ns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_f64().unwrap())
        .sum();
    let kernel = tick["run_delay_ns"].as_f64().unwrap();
    let window_ns = [&tick["start_utc_ns"], &tick["end_utc_ns"]].map(|t| t.as_i64().unwrap());
    let unseen = unseen_waits(rec, pid, window_ns);
    // A wait after a wakeup lies inside its tick's overrun, so those
    // unrecorded sum to at most the overruns the recorded ones leave.
    let unseen_at_most = unseen.at_most
        + unseen
            .after_sleeps
            .min((late_ns - after_wakeup_ns).max(0.0));
    let unseen = unseen.count;
    eprintln!(
        "the periodic task: {waits} waits, {after_wakeup_ns} ns after wakeups and \
         {after_preemption_ns} ns after preemptions; lateness {late_ns} ns, run_delay {kernel} ns; \
         {unseen} of {outs} runs began unseen, their waits at most {unseen_at_most} ns"
    );
    assert!(unseen <= 3, "{unseen} of {outs} runs began unseen");
    assert!(
        total_ns + unseen_at_most >= 0.95 * kernel - 200_000.0,
        "the periodic task: runqlat {total_ns} ns over {waits} waits and {unseen} unseen \
         (at most {unseen_at_most} ns in all) is short of schedstat run_delay {kernel} ns"
    );
    assert!(
        after_wakeup_ns <= late_ns,
        "the periodic task: its waits after wakeups sum to {after_wakeup_ns} ns, more than the \
         {late_ns} ns its {sleeps} sleeps overran their deadlines"
    );
    assert!(
        after_preemption_ns <= 1.05 * kernel + 200_000.0,
        "the periodic task: its waits after preemptions sum to {after_preemption_ns} ns, \
         more than all of schedstat run_delay {kernel} ns"
    );
    // Behind two hogs some waits are a hog's slice: milliseconds, not microseconds.
    let (_, _, counts) = runqlat_totals(rec, pid);
    assert!(
        counts.iter().any(|(slot, n)| *slot >= 10 && *n > 0),
        "no wait over a millisecond behind two hogs: {counts:?}"
    );

    // The hogs never sleep: every wait of theirs follows a preemption, and
    // they waited about half of their 4 s. Their whole lives, from
    // `report runqlat --pid`, against their zombies' schedstat.
    for (hog, kernel) in hog_counts {
        let (total_ns, waits, _) = runqlat_totals(rec, hog.into());
        let delay = kernel.run_delay;
        assert!(delay > 0.5e9, "hog {hog} waited only {delay} ns");
        assert_matches_run_delay(&format!("hog {hog}"), total_ns, waits, delay, lost);
        // The kernel counts a switch as involuntary exactly when the thread
        // left the CPU runnable (prev_state R); a switch hidden in the
        // agent's time (see above) may be missing.
        let split = |cond: &str| {
            sql_count(
                &rec_dir,
                &format!("SELECT count(*) FROM sched_switch WHERE prev_pid = {hog} AND {cond}"),
            )
        };
        let recorded = (split("prev_state <> 'R'"), split("prev_state = 'R'"));
        let (voluntary, involuntary) = kernel.switches;
        assert!(
            involuntary > 100,
            "hog {hog}: {involuntary} involuntary switches"
        );
        assert!(
            recorded.0 <= voluntary
                && voluntary - recorded.0 <= 2
                && recorded.1 <= involuntary
                && involuntary - recorded.1 <= 2,
            "hog {hog}: recorded (not R, R) {recorded:?}, kernel (voluntary, involuntary) {:?}",
            kernel.switches
        );
    }
}

/// Waits of thread `tid` that ended in `window` (UTC ns) with no recorded
/// wait for them: how many, and the most they can add up to. A wait lies
/// after the thread's previous switch-out and before its switch-in (or, not
/// recorded either, its switch-out): after a preemption or a recorded
/// wakeup that interval is the wait and the run; after a sleep whose
/// wakeup was not recorded it holds the sleep too, and those waits are
/// returned apart (`after_sleeps`), for the caller to bound by what else
/// it knows. A bound by the longest wait recorded failed: one unseen
/// wait behind the two hogs was 6.1 ms, the longest seen 3.9.
fn unseen_waits(rec: &str, tid: i64, window: [i64; 2]) -> UnseenWaits {
    let events = hindsight_stdout(&[
        "sql",
        rec,
        "-f",
        "csv",
        &format!(
            "SELECT t, kind FROM (
               SELECT CAST(ts AS BIGINT) AS t,
                 CASE WHEN prev_state = 'R' THEN 'preempted' ELSE 'out' END AS kind
               FROM sched_switch WHERE prev_tid = {tid}
               UNION ALL SELECT CAST(ts AS BIGINT), 'in' FROM sched_switch WHERE next_tid = {tid}
               UNION ALL SELECT CAST(ts AS BIGINT), 'wakeup' FROM sched_wakeup WHERE tid = {tid}
               UNION ALL SELECT CAST(ts_run AS BIGINT), 'waited' FROM runq_latency WHERE tid = {tid}
             ) e ORDER BY t, CASE kind WHEN 'wakeup' THEN 0 WHEN 'in' THEN 1 WHEN 'waited' THEN 2 ELSE 3 END"
        ),
    ]);
    let mut unseen = UnseenWaits::default();
    // Since the last switch-out: when the wait could begin at the
    // earliest, whether it was known to (a preemption, a wakeup), the
    // switch-in, and whether a wait was recorded.
    let (mut since, mut known_start, mut switched_in, mut waited) = (window[0], true, None, false);
    for line in events.lines().skip(1) {
        let (t, kind) = line.split_once(',').unwrap();
        let t: i64 = t.parse().unwrap();
        match kind {
            "wakeup" => (since, known_start) = (since.max(t), true),
            "in" => switched_in = Some(t),
            "waited" => waited = true,
            _ => {
                if !waited && (window[0]..window[1]).contains(&t) {
                    let at_most = (switched_in.unwrap_or(t) - since).max(0) as f64;
                    unseen.count += 1;
                    match known_start {
                        true => unseen.at_most += at_most,
                        false => unseen.after_sleeps += at_most,
                    }
                }
                (since, known_start, switched_in, waited) = (t, kind == "preempted", None, false);
            }
        }
    }
    unseen
}

#[derive(Default)]
struct UnseenWaits {
    count: i64,
    at_most: f64,
    after_sleeps: f64,
}

/// Runs `hs-load ARGS` pinned to CPU 0 and returns what it printed.
fn load_on_cpu0(args: &[&str]) -> Value {
    let out = Command::new(bin("hs-load"))
        .args(args)
        .env("HS_LOAD_CPU", "0")
        .output()
        .expect("run hs-load");
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}
