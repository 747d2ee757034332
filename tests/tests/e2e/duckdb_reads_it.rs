use std::process::Command;

use crate::fixture::{load, pingpong, run, settle, shared, sql, Recorder, Scratch};

/// DuckDB is an independent Parquet reader: if, in every table of a
/// default recording, it reads the same rows as hindsight (their count, and
/// the count, least and greatest value of `ts` and of every integer column),
/// the files are standard and their types and units mean the same to both.
/// CI installs it (`pip install duckdb`); without it this test fails, it
/// does not skip.
#[test]
fn duckdb_reads_every_table_as_hindsight_does() {
    let _machine = shared();
    let scratch = Scratch::new();
    let rec = scratch.rec();
    let recorder = Recorder::start(&rec, &["--chunk", "1s"]);
    pingpong(2_000);
    // Half a second on a CPU: about 25 samples at the default 49 Hz, so the
    // stack tables have rows (the ping-pong alone is a few ms of CPU, and a
    // run with no sample at all left them without a file).
    load(&["burn", "0.5"]);
    settle();
    recorder.stop();

    // Per table: [["count", n], [column, count, min, max], ...], the
    // aggregates in one order that both readers follow.
    let script = r#"
import duckdb, glob, json, os, sys
INTEGERS = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT"}
tables = {}
for table in sorted(os.listdir(sys.argv[1])):
    files = f"{sys.argv[1]}/{table}/*.parquet"
    if not glob.glob(files):
        continue
    source = f"read_parquet('{files}')"
    columns = [(r[0], r[1]) for r in duckdb.sql(f"DESCRIBE SELECT * FROM {source}").fetchall()]
    aggregates, names = ["count(*)"], [["count"]]
    for name, kind in columns:
        value = f'epoch_ns("{name}")' if name == "ts" else f'"{name}"'
        if name == "ts" or kind in INTEGERS:
            aggregates += [f'count("{name}")', f"min({value})", f"max({value})"]
            names.append([name])
    row = list(duckdb.sql(f"SELECT {', '.join(aggregates)} FROM {source}").fetchall()[0])
    result = [["count", row[0]]]
    for i, name in enumerate(names[1:]):
        result.append([name[0]] + row[1 + 3 * i: 4 + 3 * i])
    tables[table] = result
print(json.dumps(tables))
"#;
    let out = run(Command::new("python3").arg("-c").arg(script).arg(&rec));
    assert!(
        out.status.success(),
        "DuckDB could not read the recording (is it installed? `pip install duckdb`):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let duck: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&out.stdout).unwrap();
    for table in [
        "sched_switch",
        "sched_wakeup",
        "process",
        "counter",
        "task_stat",
        "stack",
        "frame",
    ] {
        assert!(duck.contains_key(table), "{table} has no files: {duck:?}");
    }
    eprintln!(
        "DuckDB and hindsight compared on {} tables, {} columns",
        duck.len(),
        duck.values()
            .map(|a| a.as_array().unwrap().len() - 1)
            .sum::<usize>()
    );
    for (table, aggregates) in &duck {
        let aggregates = aggregates.as_array().unwrap();
        let mut select = vec!["count(*) AS n".to_string()];
        for column in &aggregates[1..] {
            let name = column[0].as_str().unwrap();
            let value = if name == "ts" {
                "CAST(ts AS BIGINT)".to_string()
            } else {
                format!("\"{name}\"")
            };
            select.push(format!(
                "count(\"{name}\") AS \"{name}_n\", min({value}) AS \"{name}_min\", max({value}) AS \"{name}_max\""
            ));
        }
        let ours = &sql(&rec, &format!("SELECT {} FROM {table}", select.join(", ")))[0];
        assert!(aggregates[0][1].as_i64().unwrap() > 0, "{table} is empty");
        assert_eq!(ours["n"], aggregates[0][1], "row count of {table}");
        for column in &aggregates[1..] {
            let name = column[0].as_str().unwrap();
            let theirs = &column.as_array().unwrap()[1..];
            let mine = [
                &ours[format!("{name}_n")],
                &ours[format!("{name}_min")],
                &ours[format!("{name}_max")],
            ];
            assert_eq!(
                mine.map(|v| v.to_string()),
                [&theirs[0], &theirs[1], &theirs[2]].map(|v| v.to_string()),
                "{table}.{name}: (count, min, max) by hindsight vs DuckDB"
            );
        }
    }
}
