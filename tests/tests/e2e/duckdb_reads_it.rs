use std::process::Command;

use crate::fixture::{pingpong, run, settle, shared, sql_count, Recorder, Scratch};

/// DuckDB is an independent Parquet reader: if it counts the same rows as
/// hindsight in every table, the files are standard. CI installs it
/// (`pip install duckdb`); without it this test fails, it does not skip.
#[test]
fn duckdb_counts_the_same_rows_as_hindsight() {
    let _machine = shared();
    let scratch = Scratch::new();
    let rec = scratch.rec();
    let recorder = Recorder::start(&rec, &["--chunk", "1s"]);
    pingpong(2_000);
    settle();
    recorder.stop();

    let tables = ["sched_switch", "sched_wakeup", "process"];
    let script = format!(
        "import duckdb, json, sys\n\
         counts = {{t: duckdb.sql(f\"SELECT count(*) FROM read_parquet('{{sys.argv[1]}}/{{t}}/*.parquet')\").fetchall()[0][0] for t in {tables:?}}}\n\
         counts['sched_switch_tids'] = duckdb.sql(f\"SELECT count(DISTINCT prev_tid) FROM read_parquet('{{sys.argv[1]}}/sched_switch/*.parquet')\").fetchall()[0][0]\n\
         print(json.dumps(counts))\n"
    );
    let out = run(Command::new("python3").arg("-c").arg(&script).arg(&rec));
    assert!(
        out.status.success(),
        "DuckDB could not read the recording (is it installed? `pip install duckdb`):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let duck: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for table in tables {
        let ours = sql_count(&rec, &format!("SELECT count(*) AS n FROM {table}"));
        assert!(ours > 0, "{table} is empty");
        assert_eq!(duck[table].as_i64(), Some(ours), "row count of {table}");
    }
    let tids = sql_count(
        &rec,
        "SELECT count(DISTINCT prev_tid) AS n FROM sched_switch",
    );
    assert_eq!(duck["sched_switch_tids"].as_i64(), Some(tids));
}
