//! `hindsight sql DIR` without a query, scripted on standard input: list
//! tables, describe one, run a multi-line statement; errors go on.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::fixture::Fixture;
use crate::sql::switches;

fn session(dir: &std::path::Path, script: &str, format: &str) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hindsight"))
        .arg("sql")
        .arg(dir)
        .args(["--format", format])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn a_scripted_session_lists_describes_and_runs_multi_line_statements() {
    let fx = Fixture::new();
    let rec = switches(&fx, "rec", "web1");
    let out = session(
        &rec.dir,
        "\\d\n\
         \\d cpu_time\n\
         -- on-CPU time per thread, over two lines\n\
         SELECT tid, sum(dur_ns) AS ns\n\
           FROM cpu_time GROUP BY tid ORDER BY tid;\n\
         SELECT count(*) AS n FROM sched_switch;\n",
        "csv",
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    // \d: every table and view, with its kind.
    for line in [
        "sched_switch      table",
        "counter           table",
        "runq_wait         table",
        "cpu_time          view",
        "counter_rate      view",
    ] {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}");
    }
    // \d cpu_time: the columns with units and docs from schemas.
    assert!(
        stdout.contains("view cpu_time: On-CPU intervals"),
        "{stdout}"
    );
    let dur = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("dur_ns "))
        .unwrap_or_else(|| panic!("no dur_ns line in:\n{stdout}"));
    let words: Vec<&str> = dur.split_whitespace().collect();
    assert_eq!(words[1], "BIGINT", "{dur}");
    assert!(
        dur.ends_with("Time on the CPU: `ts_end - ts`. [ns]"),
        "{dur}"
    );
    // The multi-line query: bash (100) ran 2..3 ms on cpu0 and 4..5 ms on
    // cpu1, sleep (200) 0..1 ms; cc1's slices never end in the recording.
    assert!(
        stdout.contains("tid,ns\n100,2000000\n200,1000000\n"),
        "{stdout}"
    );
    assert!(stdout.contains("n\n6\n"), "{stdout}");
}

#[test]
fn errors_in_a_script_are_one_line_and_fail_the_run_but_not_the_session() {
    let fx = Fixture::new();
    let rec = switches(&fx, "rec", "web1");
    let out = session(
        &rec.dir,
        "SELECT nope FROM sched_switch;\n\\d no_such_table\nSELECT 41 + 1 AS answer;\nSELECT 1\n",
        "json",
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stdout, "{\"answer\":42}\n");
    let errors: Vec<&str> = stderr.lines().collect();
    assert_eq!(errors.len(), 3, "{stderr}");
    assert!(
        errors[0].starts_with("error: ") && errors[0].contains("nope"),
        "{stderr}"
    );
    assert!(errors[1].contains("no_such_table"), "{stderr}");
    assert!(errors[2].contains("missing ';'"), "{stderr}");
}

#[test]
fn parquet_output_reads_back() {
    let fx = Fixture::new();
    let rec = switches(&fx, "rec", "web1");
    let file = fx.path("out.parquet");
    let out = Command::new(env!("CARGO_BIN_EXE_hindsight"))
        .arg("sql")
        .arg(&rec.dir)
        .args(["-f", "parquet", "-o"])
        .arg(&file)
        .arg("SELECT ts, tid, dur_ns FROM cpu_time ORDER BY ts")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(&file).unwrap(),
    )
    .unwrap()
    .build()
    .unwrap();
    let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(rows, 3);
}
