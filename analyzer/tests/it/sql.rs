//! Query results over one and several recordings, through the library API.

use std::path::PathBuf;

use hindsight::output::{self, Format};
use hindsight_schemas::tables::{LOSS, PROCESS, SCHED_SWITCH};
use serde_json::json;

use crate::fixture::{t, Fixture, Rec};

/// A recording with two sched_switch chunks (six switches on two CPUs), an
/// empty `process` folder, no `sched_wakeup` folder, and a hidden chunk
/// still being written that must never be read.
pub fn switches(fx: &Fixture, name: &str, host: &str) -> Rec {
    let rec = fx.recording(name, host);
    let sw = |ms, cpu, prev: (i32, &str, &str), next: (i32, &str)| {
        json!({"ts": t(ms), "cpu": cpu, "prev_tid": prev.0, "prev_pid": prev.0, "prev_comm": prev.1,
               "prev_state": prev.2, "prev_prio": 120, "next_tid": next.0, "next_pid": next.0,
               "next_comm": next.1, "next_prio": 120})
    };
    rec.chunk(
        &SCHED_SWITCH,
        "20231114T221320.000Z-000001.parquet",
        &[
            sw(0, 0, (100, "bash", "S"), (200, "sleep")),
            sw(1, 0, (200, "sleep", "S"), (0, "swapper/0")),
            sw(2, 0, (0, "swapper/0", "R"), (100, "bash")),
            sw(3, 0, (100, "bash", "R"), (300, "cc1")),
        ],
    );
    rec.chunk(
        &SCHED_SWITCH,
        "20231114T221320.004Z-000002.parquet",
        &[
            sw(4, 1, (300, "cc1", "R"), (100, "bash")),
            sw(5, 1, (100, "bash", "S"), (300, "cc1")),
        ],
    );
    let hidden = rec.chunk(
        &SCHED_SWITCH,
        "hidden.parquet",
        &[
            sw(6, 1, (999, "ghost", "S"), (999, "ghost")),
            sw(7, 1, (999, "ghost", "S"), (999, "ghost")),
        ],
    );
    std::fs::rename(
        &hidden,
        hidden.with_file_name(".20231114T221320.006Z-000003.parquet.tmp"),
    )
    .unwrap();
    rec.empty_table(&PROCESS);
    rec.empty_table(&LOSS);
    rec
}

/// Runs `sql` over `dirs` and returns the CSV the binary would print.
pub fn query_csv(dirs: &[PathBuf], sql: &str) -> String {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let ctx = hindsight::open_context(dirs).await.unwrap();
        let stream = hindsight::catalog::query_stream(&ctx, sql).await.unwrap();
        let mut out = Vec::new();
        output::write_stream(stream, Format::Csv, &mut out)
            .await
            .unwrap();
        String::from_utf8(out).unwrap()
    })
}

#[test]
fn one_recording() {
    let fx = Fixture::new();
    let dirs = [switches(&fx, "rec", "web1").dir];
    let cases = [
        (
            "SELECT prev_tid, count(*) AS n FROM sched_switch GROUP BY prev_tid ORDER BY prev_tid",
            "prev_tid,n\n0,1\n100,3\n200,1\n300,1\n",
        ),
        (
            "SELECT prev_comm, count(*) AS n FROM sched_switch GROUP BY prev_comm ORDER BY n DESC, prev_comm",
            "prev_comm,n\nbash,3\ncc1,1\nsleep,1\nswapper/0,1\n",
        ),
        (
            "SELECT count(*) AS n FROM sched_switch WHERE ts >= TIMESTAMP '2023-11-14T22:13:20.003Z'",
            "n\n3\n",
        ),
        (
            "SELECT ts, next_comm FROM sched_switch WHERE ts < '2023-11-14T22:13:20.002Z' ORDER BY ts",
            "ts,next_comm\n2023-11-14T22:13:20Z,sleep\n2023-11-14T22:13:20.001Z,swapper/0\n",
        ),
        (
            // Zone-less values are UTC to DataFusion; other zones print in UTC.
            "SELECT TIMESTAMP '2024-01-01T00:00:00.25' AS naive, \
             arrow_cast(ts, 'Timestamp(Nanosecond, Some(\"Europe/Paris\"))') AS paris \
             FROM sched_switch ORDER BY ts LIMIT 1",
            "naive,paris\n2024-01-01T00:00:00.250Z,2023-11-14T22:13:20Z\n",
        ),
        ("SELECT count(*) AS n FROM sched_wakeup", "n\n0\n"),
        ("SELECT count(*) AS n FROM process", "n\n0\n"),
        ("SELECT source, lost FROM loss", "source,lost\n"),
        ("SELECT count(*) AS n FROM sched_switch WHERE prev_comm = 'ghost'", "n\n0\n"),
    ];
    for (sql, expected) in cases {
        assert_eq!(query_csv(&dirs, sql), expected, "{sql}");
    }
}

#[test]
fn several_recordings_gain_a_host_column() {
    let fx = Fixture::new();
    let web1 = switches(&fx, "a", "web1").dir;
    let db1 = switches(&fx, "b", "db1").dir;
    let sql = "SELECT host, count(*) AS n FROM sched_switch GROUP BY host ORDER BY host";
    assert_eq!(
        query_csv(&[web1.clone(), db1], sql),
        "host,n\ndb1,6\nweb1,6\n"
    );

    // A second recording of the same host is told apart by its directory.
    let again = switches(&fx, "c", "web1").dir;
    assert_eq!(
        query_csv(&[web1.clone(), again], sql),
        "host,n\nweb1/a,6\nweb1/c,6\n"
    );

    // Empty tables union to empty tables, with the host column.
    let sql = "SELECT * FROM sched_wakeup";
    let header = query_csv(&[web1.clone(), fx.recording("d", "x").dir], sql);
    assert_eq!(
        header,
        "ts,cpu,tid,pid,comm,target_cpu,waker_tid,waker_pid,new_task,prio,host\n"
    );

    // One recording has no host column.
    assert!(!query_csv(&[web1], "SELECT * FROM sched_wakeup").contains("host"));
}

/// A recording being written: closed chunks plus the open chunk's journal,
/// whose torn last entry (the recorder was mid-write) is skipped; a journal
/// whose chunk is already in place is not read twice.
#[test]
fn a_live_recording_reads_closed_chunks_and_the_journal() {
    use hindsight_schemas::{journal, layout};
    use std::io::Write;

    let fx = Fixture::new();
    let rec = switches(&fx, "rec", "web1");
    let sw = |ms: i64, tid: i32| {
        json!({"ts": t(ms), "cpu": 0, "prev_tid": tid, "prev_pid": tid, "prev_comm": "live",
               "prev_state": "S", "prev_prio": 120, "next_tid": 0, "next_pid": 0,
               "next_comm": "swapper/0", "next_prio": 120})
    };
    let dir = rec.dir.join("sched_switch");
    let metadata = layout::file_metadata("sched_switch", "web1", "boot-1", "0.1.0-test")
        .into_iter()
        .collect();
    let entry = |rows: &[serde_json::Value]| {
        journal::encode_entry(&crate::fixture::batch(&SCHED_SWITCH, rows), &metadata).unwrap()
    };
    let open_chunk = "20231114T221320.010Z-000004.parquet";
    let mut file = std::fs::File::create(dir.join(layout::journal_file_name(open_chunk))).unwrap();
    file.write_all(&entry(&[sw(10, 7), sw(11, 7)])).unwrap();
    file.write_all(&entry(&[sw(12, 8)])).unwrap();
    let torn = entry(&[sw(13, 9)]);
    file.write_all(&torn[..torn.len() - 20]).unwrap();
    drop(file);
    // Closed a moment ago, its journal not removed yet.
    std::fs::write(
        dir.join(layout::journal_file_name(
            "20231114T221320.004Z-000002.parquet",
        )),
        entry(&[sw(4, 5)]),
    )
    .unwrap();

    let dirs = [rec.dir];
    let sql = "SELECT prev_comm, count(*) AS n FROM sched_switch GROUP BY 1 ORDER BY 1";
    assert_eq!(
        query_csv(&dirs, sql),
        "prev_comm,n\nbash,3\ncc1,1\nlive,3\nsleep,1\nswapper/0,1\n"
    );
    assert_eq!(
        query_csv(
            &dirs,
            "SELECT max(ts) AS last FROM sched_switch WHERE prev_comm = 'live'"
        ),
        "last\n2023-11-14T22:13:20.012Z\n"
    );
}

/// What `--cluster` cannot do is refused before anything is sent: the
/// journals of a recording being written are on this machine only, and so
/// are `--debug-dir`'s files; an address that is not `df://HOST[:PORT]` is
/// a usage error. (Port 9 is discard: nothing would answer there.)
#[test]
fn the_cluster_refuses_what_it_cannot_see() {
    use hindsight_schemas::{journal, layout};

    let fx = Fixture::new();
    let rec = switches(&fx, "rec", "web1");
    let dir = rec.dir.join("sched_switch");
    let metadata = layout::file_metadata("sched_switch", "web1", "boot-1", "0.1.0-test")
        .into_iter()
        .collect();
    let on_cluster = |extra: &[&str]| {
        let mut args = vec!["--cluster", "df://127.0.0.1:9"];
        args.extend_from_slice(extra);
        args.extend([
            "sql",
            rec.dir.to_str().unwrap(),
            "SELECT count(*) FROM sched_switch",
        ]);
        crate::fixture::hindsight(args)
    };

    let out = on_cluster(&["--debug-dir", "/usr/lib/debug"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        crate::fixture::stderr(&out)
    );
    assert!(crate::fixture::stderr(&out).contains("--debug-dir"));

    let row = json!({"ts": t(10), "cpu": 0, "prev_tid": 7, "prev_pid": 7, "prev_comm": "live",
                     "prev_state": "S", "prev_prio": 120, "next_tid": 0, "next_pid": 0,
                     "next_comm": "swapper/0", "next_prio": 120});
    std::fs::write(
        dir.join(layout::journal_file_name(
            "20231114T221320.010Z-000004.parquet",
        )),
        journal::encode_entry(&crate::fixture::batch(&SCHED_SWITCH, &[row]), &metadata).unwrap(),
    )
    .unwrap();
    let out = on_cluster(&[]);
    let said = crate::fixture::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("being written") && said.contains(&dir.display().to_string()),
        "{said}"
    );
    assert_eq!(said.trim().lines().count(), 1, "{said}");

    for bad in ["http://127.0.0.1:50050", "df://", "df://host/path"] {
        let out = crate::fixture::hindsight(["--cluster", bad, "info", rec.dir.to_str().unwrap()]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{bad}: {}",
            crate::fixture::stderr(&out)
        );
        assert!(
            crate::fixture::stderr(&out).contains("df://HOST[:PORT]"),
            "{bad}"
        );
    }
}
