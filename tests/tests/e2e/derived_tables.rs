//! `hindsight index` on a real recording of two sessions with one-second
//! chunks: its derived tables hold, row for row, what the raw-event views
//! pair (except the intervals that span the recorder's restart, which the
//! views pair across the gap and the derived tables by contract do not),
//! `thread_second` equals the intervals split at second edges by SQL,
//! reports give the same figures from either, and a query over
//! `--memory-limit` stops with one line naming the limit.

use std::path::Path;
use std::process::Command;

use hindsight_schemas::meta::RecordingMeta;

use crate::fixture::{
    bin, hindsight_stdout, pingpong, run, settle, shared, sql_count, Recorder, Scratch,
};

/// Each derived table, its view, and the columns compared (with the
/// dictionary columns read as text, as the views return them).
const PAIRS: &[(&str, &str, &str, &str)] = &[
    (
        "cpu_slice",
        "cpu_time",
        "ts, ts_end, dur_ns, cpu, tid, pid, CAST(comm AS VARCHAR), prio, CAST(end_state AS VARCHAR)",
        "ts_end",
    ),
    (
        "off_cpu_interval",
        "off_cpu",
        "ts, ts_end, dur_ns, tid, pid, CAST(comm AS VARCHAR), CAST(state AS VARCHAR), cpu, next_cpu, stack_id",
        "ts_end",
    ),
    (
        "runq_wait",
        "runq_latency",
        "ts, ts_run, latency_ns, tid, pid, CAST(comm AS VARCHAR), cpu, CAST(after AS VARCHAR)",
        "ts_run",
    ),
];

/// Each `thread_second` column, the derived table whose intervals it
/// splits, their end column, and which of their rows it counts.
const SECOND_SHARES: &[(&str, &str, &str, &str)] = &[
    ("on_cpu_ns", "cpu_slice", "ts_end", "TRUE"),
    ("runq_ns", "runq_wait", "ts_run", "TRUE"),
    ("off_cpu_s_ns", "off_cpu_interval", "ts_end", "state = 'S'"),
    (
        "off_cpu_r_ns",
        "off_cpu_interval",
        "ts_end",
        "state IN ('R', 'R+')",
    ),
];

/// Splits `source`'s intervals at second edges in SQL and compares the
/// sums per (second, tid) with `thread_second.column`: (thread-seconds,
/// only in the SQL split, only in the rollup).
fn split_against_rollup(
    rec: &Path,
    column: &str,
    source: &str,
    end: &str,
    filter: &str,
) -> (i64, i64, i64) {
    let s = 1_000_000_000i64;
    let ctes = format!(
        "WITH bounds AS (SELECT tid, CAST(ts AS BIGINT) AS b, CAST({end} AS BIGINT) AS e FROM {source} WHERE {filter}),
         pieces AS (SELECT tid, s * {s} AS second, least(e, (s + 1) * {s}) - greatest(b, s * {s}) AS ns
           FROM (SELECT tid, b, e, unnest(range(b / {s}, (e - 1) / {s} + 1)) AS s FROM bounds) p),
         split AS (SELECT second, tid, sum(ns) AS ns FROM pieces GROUP BY second, tid HAVING sum(ns) > 0),
         rollup AS (SELECT CAST(ts AS BIGINT) AS second, tid, sum({column}) AS ns FROM thread_second
           GROUP BY 1, 2 HAVING sum({column}) > 0)"
    );
    let count = |query: &str| sql_count(rec, &format!("{ctes} {query}"));
    (
        count("SELECT count(*) FROM split"),
        count("SELECT count(*) FROM (SELECT * FROM split EXCEPT SELECT * FROM rollup) d"),
        count("SELECT count(*) FROM (SELECT * FROM rollup EXCEPT SELECT * FROM split) d"),
    )
}

fn session_starts(rec: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(rec.join("recording.json")).unwrap();
    let meta = RecordingMeta::from_json(&text).unwrap();
    meta.sessions.iter().map(|s| s.started.clone()).collect()
}

#[test]
fn derived_tables_equal_the_views_across_chunks_and_a_restart() {
    let _machine = shared();
    let scratch = Scratch::new();
    let rec = scratch.rec();
    // The ping-pong processes of the second session: born after the
    // restart, so their state is known to the index and the view alike.
    let mut second_session = Vec::new();
    for session in 0..2 {
        let recorder = Recorder::start(&rec, &["--events", "sched", "--chunk", "1s"]);
        // Several chunks of a ping-pong (about 20 000 switches) each.
        for _ in 0..3 {
            let truth = pingpong(5_000);
            if session == 1 {
                second_session.push(truth["children"][0]["pid"].as_i64().unwrap().to_string());
            }
            std::thread::sleep(std::time::Duration::from_millis(700));
        }
        settle();
        recorder.stop();
    }
    let starts = session_starts(&rec);
    assert_eq!(starts.len(), 2, "two sessions");
    let chunks = std::fs::read_dir(rec.join("sched_switch")).unwrap().count();
    assert!(chunks >= 6, "one-second chunks: {chunks}");

    // Before the index, reports pair raw events in the views.
    let rec_s = rec.to_str().unwrap();
    let runqlat = |extra: &[&str]| {
        let mut args = vec!["report", "runqlat", rec_s, "--interval", "2s", "-f", "csv"];
        args.extend_from_slice(extra);
        hindsight_stdout(&args)
    };
    // A process of the second session: born after the restart, no wait of
    // it can span the restart, nor start in a state the restart made
    // unknown (which the view and the index judge apart).
    let pid = &second_session[2];
    let before = runqlat(&["--pid", pid]);
    assert!(
        before.lines().count() > 2,
        "waits after the restart: {before}"
    );
    assert!(runqlat(&["--show-sql"]).contains("FROM runq_latency"));

    let out = hindsight_stdout(&["index", rec_s]);
    assert!(out.contains(&format!("{chunks} chunks")), "{out}");
    assert!(
        !out.contains("late"),
        "no event was paired out of order: {out}"
    );
    assert!(hindsight_stdout(&["index", rec_s]).contains("indexed already"));
    for table in [
        "cpu_slice",
        "off_cpu_interval",
        "runq_wait",
        "thread_second",
    ] {
        let files = std::fs::read_dir(rec.join(table)).unwrap().count();
        assert_eq!(files, chunks, "{table}: one file per sched_switch chunk");
    }

    // Row for row, both ways, but for what spans the restart, and for the
    // waits after a wakeup of a thread whose state the index could not know
    // (woken after the restart before any switch of it): the view, which
    // knows no sessions, judges those by what the thread did before the gap.
    let restart = &starts[1];
    let unknown_after_restart = format!(
        "SELECT d.* FROM {{table}} d LEFT JOIN (
           SELECT tid, min(ts) AS first FROM (
             SELECT prev_tid AS tid, ts FROM sched_switch UNION ALL SELECT next_tid, ts FROM sched_switch) s
           WHERE ts >= TIMESTAMP '{restart}' GROUP BY tid) f ON d.tid = f.tid
         WHERE d.after = 'wakeup' AND d.ts >= TIMESTAMP '{restart}' AND (f.first IS NULL OR d.ts <= f.first)"
    );
    for (table, view, columns, end) in PAIRS {
        let derived = sql_count(&rec, &format!("SELECT count(*) FROM {table}"));
        assert!(derived > 10_000, "{table}: {derived} rows");
        // An off-CPU interval whose switch-in went unseen ends at the last
        // switch on the CPU the thread next left: across the restart, a
        // switch of the first session. What spans the restart is then any
        // interval that starts at its thread's last switch before it.
        let (source, spanning) = if *view == "off_cpu" {
            (
                format!(
                    "(SELECT v.*, l.last_before FROM off_cpu v LEFT JOIN (
                       SELECT tid, max(ts) AS last_before FROM (
                         SELECT prev_tid AS tid, ts FROM sched_switch
                         UNION ALL SELECT next_tid, ts FROM sched_switch) e
                       WHERE ts < TIMESTAMP '{restart}' GROUP BY tid) l ON v.tid = l.tid) v"
                ),
                format!(
                    "NOT (ts < TIMESTAMP '{restart}' AND ({end} >= TIMESTAMP '{restart}' OR ts >= last_before))"
                ),
            )
        } else {
            (
                view.to_string(),
                format!("NOT (ts < TIMESTAMP '{restart}' AND {end} >= TIMESTAMP '{restart}')"),
            )
        };
        let known = if *table == "runq_wait" {
            format!(
                "(SELECT * FROM {table} EXCEPT {})",
                unknown_after_restart.replace("{table}", table)
            )
        } else {
            table.to_string()
        };
        let view_only = sql_count(
            &rec,
            &format!(
                "SELECT count(*) FROM (SELECT {columns} FROM {source} WHERE {spanning}
                 EXCEPT SELECT {columns} FROM {table})"
            ),
        );
        let derived_only = sql_count(
            &rec,
            &format!(
                "SELECT count(*) FROM (SELECT {columns} FROM {known} k
                 EXCEPT SELECT {columns} FROM {view})"
            ),
        );
        let view_rows = sql_count(
            &rec,
            &format!("SELECT count(*) FROM {source} WHERE {spanning}"),
        );
        let unknown_only = if *table == "runq_wait" {
            sql_count(
                &rec,
                &format!(
                    "SELECT count(*) FROM (SELECT {columns} FROM ({}) u EXCEPT SELECT {columns} FROM {view})",
                    unknown_after_restart.replace("{table}", table)
                ),
            )
        } else {
            0
        };
        assert_eq!(
            (view_only, derived_only, derived),
            (0, 0, view_rows + unknown_only),
            "{table} against {view}: rows only in the view, only in the table, counts"
        );
        assert!(
            unknown_only <= 20,
            "{table}: {unknown_only} waits of unknown start"
        );
        let across = sql_count(
            &rec,
            &format!(
                "SELECT count(*) FROM {table} \
                 WHERE ts < TIMESTAMP '{restart}' AND {end} >= TIMESTAMP '{restart}'"
            ),
        );
        assert_eq!(across, 0, "{table}: nothing paired across the restart");
    }

    // thread_second against the intervals split at second edges in SQL.
    for (column, source, end, filter) in SECOND_SHARES {
        let (seconds, only_sql, only_rollup) =
            split_against_rollup(&rec, column, source, end, filter);
        assert!(seconds >= 6, "{column}: {seconds} thread-seconds");
        assert_eq!(
            (only_sql, only_rollup),
            (0, 0),
            "{column}: (second, tid, ns) only in {source} split by SQL, only in thread_second"
        );
    }
    let over = sql_count(
        &rec,
        "SELECT count(*) FROM (SELECT ts, tid FROM thread_second GROUP BY ts, tid
         HAVING sum(on_cpu_ns) + sum(runq_ns) > 1000000000) t",
    );
    assert_eq!(
        over, 0,
        "no thread ran or waited more than a second in a second"
    );
    let timeline = hindsight_stdout(&["report", "timeline", rec_s, "--show-sql"]);
    assert!(timeline.contains("FROM thread_second"), "{timeline}");

    // The report reads the derived table now, with the same figures.
    assert!(runqlat(&["--show-sql"]).contains("FROM runq_wait"));
    assert_eq!(
        runqlat(&["--pid", pid]),
        before,
        "runqlat from runq_wait and from the view"
    );
}

#[test]
fn a_query_over_the_memory_limit_fails_with_one_line() {
    let _machine = shared();
    let scratch = Scratch::new();
    let rec = scratch.rec();
    let recorder = Recorder::start(&rec, &["--events", "sched"]);
    pingpong(20_000);
    settle();
    recorder.stop();
    // One list of 9 M numbers (72 MB): an aggregate without groups cannot
    // spill, so this is past 16 MiB whatever the temp dir holds.
    let out = run(Command::new(bin("hindsight")).args([
        "--memory-limit",
        "16M",
        "sql",
        rec.to_str().unwrap(),
        "SELECT count(*) FROM (SELECT unnest(array_agg(CAST(a.ts AS BIGINT) + b.cpu))
         FROM (SELECT ts FROM sched_switch LIMIT 3000) a
         CROSS JOIN (SELECT cpu FROM sched_switch LIMIT 3000) b)",
    ]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("--memory-limit 16 MiB") && !stderr.contains("panicked"),
        "names the limit: {stderr}"
    );
    let rows = sql_count(&rec, "SELECT count(*) FROM sched_switch");
    assert!(rows >= 3000, "enough switches for the query: {rows}");
}
