//! The binary: exact CSV and JSON text, exit codes, a reader that leaves.

use std::process::Command;

use crate::fixture::{hindsight, stderr, stdout, Fixture};
use crate::sql::switches;

const QUERY: &str = "SELECT ts, cpu, prev_comm, prev_state FROM sched_switch \
                     WHERE prev_tid = 100 ORDER BY ts LIMIT 2";

#[test]
fn formats_print_exact_text() {
    let fx = Fixture::new();
    let dir = switches(&fx, "rec", "web1").dir;
    let cases = [
        (
            "csv",
            "ts,cpu,prev_comm,prev_state\n\
             2023-11-14T22:13:20Z,0,bash,S\n\
             2023-11-14T22:13:20.003Z,0,bash,R\n",
        ),
        (
            "json",
            "{\"ts\":\"2023-11-14T22:13:20Z\",\"cpu\":0,\"prev_comm\":\"bash\",\"prev_state\":\"S\"}\n\
             {\"ts\":\"2023-11-14T22:13:20.003Z\",\"cpu\":0,\"prev_comm\":\"bash\",\"prev_state\":\"R\"}\n",
        ),
        (
            "table",
            "+--------------------------+-----+-----------+------------+\n\
             | ts                       | cpu | prev_comm | prev_state |\n\
             +--------------------------+-----+-----------+------------+\n\
             | 2023-11-14T22:13:20Z     | 0   | bash      | S          |\n\
             | 2023-11-14T22:13:20.003Z | 0   | bash      | R          |\n\
             +--------------------------+-----+-----------+------------+\n",
        ),
    ];
    for (format, expected) in cases {
        let out = hindsight([
            "sql".as_ref(),
            dir.as_os_str(),
            QUERY.as_ref(),
            "--format".as_ref(),
            format.as_ref(),
        ]);
        assert_eq!(stderr(&out), "", "{format}");
        assert!(out.status.success(), "{format}");
        assert_eq!(stdout(&out), expected, "{format}");
    }
}

#[test]
fn bad_sql_is_one_line_and_exit_1() {
    let fx = Fixture::new();
    let dir = switches(&fx, "rec", "web1").dir;
    for sql in [
        "SELECT nope FROM sched_switch",
        "SELEC 1",
        "SELECT * FROM no_such_table",
        "CREATE TABLE x (a INT)",
    ] {
        let out = hindsight(["sql".as_ref(), dir.as_os_str(), sql.as_ref()]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{sql}: {err}");
        assert!(
            err.starts_with("hindsight: ") && err.lines().count() == 1,
            "{sql}: {err:?}"
        );
        assert_eq!(stdout(&out), "");
    }
}

#[test]
fn closed_pipe_is_success() {
    let fx = Fixture::new();
    let dir = switches(&fx, "rec", "web1").dir;
    // Far more output than a pipe buffers, so the writer sees the reader go.
    let script = r#""$0" sql "$1" "SELECT x FROM unnest(range(0, 500000)) AS t(x)" -f csv | head -2; echo "exit ${PIPESTATUS[0]}""#;
    let out = Command::new("bash")
        .args(["-c", script, env!("CARGO_BIN_EXE_hindsight")])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "x\n0\nexit 0\n");
    assert_eq!(stderr(&out), "");
}
