//! Every report's table format, byte for byte, on the fixture recordings:
//! `tests/golden/<case>.txt` is what a person sees. A deliberate change of
//! layout is made by running the tests with `UPDATE_GOLDEN=1` and reading
//! the diff of those files; any other change fails here.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::fixture::{Fixture, Rec};
use crate::report::{atop_recording, cachetop_recording, faults_recording, numa_recording};
use crate::timeline::{burst_recording, runq_recording};

fn golden_path(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{case}.txt"))
}

/// `hindsight report ARGS DIR`'s standard output, `columns` wide when given
/// (as a terminal of that width would be), whole otherwise.
fn table(dir: &Path, args: &[&str], columns: Option<usize>) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hindsight"));
    command.arg("report").arg(args[0]).arg(dir).args(&args[1..]);
    command.env_remove("COLUMNS").env_remove("NO_COLOR");
    if let Some(c) = columns {
        command.env("COLUMNS", c.to_string());
    }
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_reports_table_is_its_golden_file() {
    type Build = fn(&Fixture) -> Rec;
    let cases: &[(&str, Build, &[&str], Option<usize>)] = &[
        ("atop", atop_recording, &["atop", "--top", "3"], None),
        ("numa", numa_recording, &["numa", "--interval", "10s"], None),
        (
            "cachetop",
            cachetop_recording,
            &["cachetop", "--interval", "10s"],
            None,
        ),
        (
            "faults",
            faults_recording,
            &["faults", "--interval", "10s"],
            None,
        ),
        (
            "faults-60-columns",
            faults_recording,
            &["faults", "--interval", "10s"],
            Some(60),
        ),
        (
            "runqlat",
            runq_recording,
            &["runqlat", "--interval", "10s"],
            None,
        ),
        ("timeline", burst_recording, &["timeline"], None),
    ];
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut differ = Vec::new();
    for (case, build, args, columns) in cases {
        let fx = Fixture::new();
        let rec = build(&fx);
        let actual = table(&rec.dir, args, *columns);
        if let Some(width) = columns {
            for line in actual.lines() {
                assert!(
                    line.chars().count() <= *width,
                    "{case}: {line:?} is wider than {width}"
                );
            }
        }
        let path = golden_path(case);
        if update {
            std::fs::write(&path, &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
        if actual != expected {
            differ.push(format!(
                "{case}: differs from {}\n--- now:\n{actual}--- golden:\n{expected}",
                path.display()
            ));
        }
    }
    assert!(
        differ.is_empty(),
        "{}\n(after a deliberate change of layout, UPDATE_GOLDEN=1 rewrites the files)",
        differ.join("\n")
    );
}
