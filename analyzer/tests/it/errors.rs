//! Input that is not a readable recording: exit code 2 and one line on
//! stderr naming the file at fault, for every command.

use std::fs;
use std::path::PathBuf;

use hindsight_schemas::layout;
use hindsight_schemas::tables::SCHED_SWITCH;
use serde_json::json;

use crate::fixture::{hindsight, stderr, stdout, t, Fixture, Rec};
use crate::sql::switches;

/// Breaks a good recording; returns the path the message must name.
type Breakage = fn(&Fixture, &Rec) -> PathBuf;

fn first_chunk(rec: &Rec) -> PathBuf {
    rec.dir
        .join("sched_switch/20231114T221320.000Z-000001.parquet")
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let cases: [(&str, Breakage, &str); 8] = [
        (
            "missing directory",
            |fx, _| fx.path("nowhere"),
            "no such directory",
        ),
        (
            "no recording.json",
            |_, rec| {
                fs::remove_file(rec.dir.join(layout::RECORDING_FILE)).unwrap();
                rec.dir.clone()
            },
            "not a hindsight recording (no recording.json)",
        ),
        (
            "foreign JSON",
            |_, rec| {
                let path = rec.dir.join(layout::RECORDING_FILE);
                fs::write(&path, r#"{"name": "left-pad", "version": "1.0.0"}"#).unwrap();
                path
            },
            "not a hindsight recording",
        ),
        (
            "not JSON",
            |_, rec| {
                let path = rec.dir.join(layout::RECORDING_FILE);
                fs::write(&path, "hello").unwrap();
                path
            },
            "not a hindsight recording (invalid JSON",
        ),
        (
            "newer recording.json",
            |_, rec| {
                let path = rec.dir.join(layout::RECORDING_FILE);
                let mut meta = crate::fixture::meta(&rec.host);
                meta.schema_version = 9;
                rec.write_meta(&meta);
                path
            },
            "written with schema version 9, this hindsight reads up to 1",
        ),
        (
            "truncated chunk",
            |_, rec| {
                let path = first_chunk(rec);
                let bytes = fs::read(&path).unwrap();
                fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
                path
            },
            "not a Parquet file (truncated or corrupt)",
        ),
        (
            "newer chunk",
            |_, rec| {
                let mut tags = layout::file_metadata("sched_switch", &rec.host, "b", "9.0.0");
                tags[0].1 = "9".into();
                let row =
                    json!({"ts": t(9), "prev_comm": "x", "prev_state": "S", "next_comm": "y"});
                rec.chunk_with_tags(
                    &SCHED_SWITCH,
                    "20231114T221320.009Z-000009.parquet",
                    &[row],
                    tags,
                )
            },
            "written with schema version 9, this hindsight reads up to 1",
        ),
        (
            "untagged chunk",
            |_, rec| {
                let row =
                    json!({"ts": t(9), "prev_comm": "x", "prev_state": "S", "next_comm": "y"});
                rec.chunk_with_tags(
                    &SCHED_SWITCH,
                    "20231114T221320.009Z-000009.parquet",
                    &[row],
                    vec![],
                )
            },
            "no valid hindsight.schema_version",
        ),
    ];
    for (what, break_it, message) in cases {
        let fx = Fixture::new();
        let rec = switches(&fx, "rec", "web1");
        let culprit = break_it(&fx, &rec);
        let dir = if what == "missing directory" {
            culprit.clone()
        } else {
            rec.dir.clone()
        };
        let commands: [&[&str]; 2] = [&["sql"], &["info"]];
        for command in commands {
            let mut args: Vec<std::ffi::OsString> = command.iter().map(Into::into).collect();
            args.push(dir.clone().into());
            if command == ["sql"] {
                args.push("SELECT count(*) FROM sched_switch".into());
            }
            let out = hindsight(&args);
            let err = stderr(&out);
            let expected = format!("hindsight: {}: {message}", culprit.display());
            assert_eq!(out.status.code(), Some(2), "{what} ({command:?}): {err}");
            assert!(
                err.starts_with(&expected),
                "{what} ({command:?}): {err:?} does not start with {expected:?}"
            );
            assert_eq!(err.lines().count(), 1, "{what} ({command:?}): {err:?}");
            assert!(out.stdout.is_empty(), "{what} ({command:?})");
        }
    }
}

#[test]
fn unknown_folders_and_hidden_files_are_ignored() {
    let fx = Fixture::new();
    let rec = switches(&fx, "rec", "web1");
    fs::create_dir_all(rec.dir.join("from_the_future")).unwrap();
    fs::write(rec.dir.join("from_the_future/x.parquet"), "not parquet").unwrap();
    fs::create_dir_all(rec.dir.join(".journal")).unwrap();
    fs::write(rec.dir.join("sched_switch/.y.parquet.tmp"), "half written").unwrap();
    let out = hindsight([
        "sql".as_ref(),
        rec.dir.as_os_str(),
        "SELECT count(*) AS n FROM sched_switch".as_ref(),
        "-f".as_ref(),
        "csv".as_ref(),
    ]);
    assert_eq!(stderr(&out), "");
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "n\n6\n");
}

/// Memory the pool does not account for (here one 1.5 GB string) stops the
/// process past 4 times `--memory-limit`, at least 1 GiB over it: one line
/// naming the limit, exit code 1, instead of the machine's memory and the
/// OOM killer.
#[test]
fn a_query_past_the_heap_ceiling_stops_with_one_line() {
    let fx = Fixture::new();
    let rec = switches(&fx, "rec", "h");
    let out = hindsight([
        "sql",
        rec.dir.to_str().unwrap(),
        "--memory-limit",
        "16M",
        "SELECT length(repeat('x', 1500000000)) AS n",
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(out.stdout.is_empty());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("hindsight: stopped: the query held ")
            && err.contains("over the 1.0 GiB this process allows with --memory-limit 16 MiB"),
        "{err}"
    );
    // Under the ceiling the same kind of query answers.
    let out = hindsight([
        "sql",
        rec.dir.to_str().unwrap(),
        "--memory-limit",
        "16M",
        "-f",
        "csv",
        "SELECT length(repeat('x', 1000000)) AS n",
    ]);
    assert_eq!(stdout(&out), "n\n1000000\n", "{}", stderr(&out));
}

/// A sort past `--memory-limit` spills to the temp directory and still
/// answers; the command leaves nothing behind there, where each command
/// used to leave an empty `datafusion-*` directory there, spill or not.
#[test]
fn spills_go_to_tmpdir_and_leave_nothing_behind() {
    let fx = Fixture::new();
    let rec = switches(&fx, "rec", "h");
    let tmp = fx.path("tmp");
    fs::create_dir_all(&tmp).unwrap();
    let in_tmp = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_hindsight"))
            .args(args)
            .env("TMPDIR", &tmp)
            .output()
            .unwrap();
        let left: Vec<_> = fs::read_dir(&tmp)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert!(left.is_empty(), "left in TMPDIR by {args:?}: {left:?}");
        out
    };
    let dir = rec.dir.to_str().unwrap();
    // 3 M rows sorted for the window are 24 MB of keys alone: under a
    // 16 MiB pool the sort answers only by spilling.
    let out = in_tmp(&[
        "sql",
        dir,
        "--memory-limit",
        "16M",
        "-f",
        "csv",
        "SELECT sum(x * rn) AS s FROM (SELECT x, row_number() OVER (ORDER BY x DESC) AS rn \
         FROM generate_series(1, 3000000) AS t(x))",
    ]);
    // sum over x of x * (3000001 - x)
    assert_eq!(stdout(&out), "s\n4500004500001000000\n", "{}", stderr(&out));
    let out = in_tmp(&["info", dir]);
    assert!(out.status.success(), "{}", stderr(&out));
}
