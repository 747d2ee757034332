use std::{process::Command, thread, time::Duration};

use hindsight_schemas::time::rfc3339;

use crate::fixture::{
    bin, pingpong, run, settle, shared, sql_count, utc_now_ns, Recorder, Scratch,
};

/// Records three bursts of ping-pong, slices out the middle one (by the
/// clock read around it), and checks with `hindsight sql` that the slice
/// holds exactly the source's rows of the window, and with `--pid` exactly
/// one child's switches.
#[test]
fn slicing_the_middle_of_a_real_recording_keeps_exactly_its_rows() {
    let _machine = shared();
    let scratch = Scratch::new();
    let rec = scratch.rec();
    let recorder = Recorder::start(&rec, &["--chunk", "1s"]);
    pingpong(2_000);
    thread::sleep(Duration::from_millis(1200));
    let from = utc_now_ns();
    let middle = pingpong(2_000);
    // Long enough for the window to span several 1 s chunks.
    thread::sleep(Duration::from_millis(1500));
    let to = utc_now_ns();
    thread::sleep(Duration::from_millis(1200));
    pingpong(2_000);
    settle();
    recorder.stop();

    let (from, to) = (rfc3339(from), rfc3339(to));
    let window = format!("ts >= TIMESTAMP '{from}' AND ts < TIMESTAMP '{to}'");
    let cut = scratch.dir.path().join("middle");
    let out = run(Command::new(bin("hindsight"))
        .args(["slice".as_ref(), rec.as_os_str()])
        .args(["--from", &from, "--to", &to, "-o"])
        .arg(&cut));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    for table in [
        "sched_switch",
        "sched_wakeup",
        "process",
        "counter",
        "task_stat",
    ] {
        let query = format!("SELECT count(*) AS n FROM {table} WHERE {window}");
        let full = sql_count(&rec, &query);
        assert_eq!(sql_count(&cut, &query), full, "{table} in the window");
        if matches!(table, "sched_switch" | "sched_wakeup") {
            let all = sql_count(&rec, &format!("SELECT count(*) AS n FROM {table}"));
            assert!(full > 0 && full < all, "{table}: {full} of {all}");
            let kept = sql_count(&cut, &format!("SELECT count(*) AS n FROM {table}"));
            assert_eq!(kept, full, "{table}: only the window");
        }
    }
    // Nothing after the window, and before it only each counter series'
    // last sample in the source, the baseline of the window's first delta.
    for table in ["sched_switch", "counter", "task_stat", "process"] {
        let after = format!("SELECT count(*) AS n FROM {table} WHERE ts >= TIMESTAMP '{to}'");
        assert_eq!(sql_count(&cut, &after), 0, "{table} after the window");
    }
    let baselines = sql_count(
        &rec,
        &format!(
            "SELECT count(*) AS n FROM (
               SELECT source, name, scope FROM counter WHERE ts < TIMESTAMP '{from}'
               GROUP BY source, name, scope) b
             JOIN (SELECT DISTINCT source, name, scope FROM counter WHERE {window}) w
             ON b.source = w.source AND b.name = w.name
               AND (b.scope = w.scope OR (b.scope IS NULL AND w.scope IS NULL))"
        ),
    );
    assert!(baselines > 0, "the counters sampled before the window");
    assert_eq!(
        sql_count(
            &cut,
            &format!("SELECT count(*) AS n FROM counter WHERE ts < TIMESTAMP '{from}'")
        ),
        baselines,
        "one baseline sample a counter series"
    );
    // Several source chunks (1 s each) overlapped the window.
    let files = std::fs::read_dir(cut.join("sched_switch")).unwrap().count();
    assert!(files >= 2, "{files} files");

    let child = middle["children"][0]["pid"].as_i64().unwrap();
    let by_pid = scratch.dir.path().join("child");
    let out = run(Command::new(bin("hindsight"))
        .args(["slice".as_ref(), rec.as_os_str()])
        .args([
            "--from",
            &from,
            "--to",
            &to,
            "--pid",
            &child.to_string(),
            "-o",
        ])
        .arg(&by_pid));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs = format!("(prev_pid = {child} OR next_pid = {child})");
    let full = sql_count(
        &rec,
        &format!("SELECT count(*) AS n FROM sched_switch WHERE {window} AND {theirs}"),
    );
    assert!(full >= 1_000, "ping-pong child switched {full} times");
    assert_eq!(
        sql_count(&by_pid, "SELECT count(*) AS n FROM sched_switch"),
        full
    );
    let named = sql_count(
        &by_pid,
        &format!("SELECT count(*) AS n FROM process WHERE pid = {child}"),
    );
    assert!(named >= 1, "the child's process rows are kept");
    // The system's counters whole for the window; its wakeups only where
    // the child woke or was woken.
    let in_window = |dir: &std::path::Path, table: &str, cond: &str| {
        sql_count(
            dir,
            &format!("SELECT count(*) AS n FROM {table} WHERE {window} AND {cond}"),
        )
    };
    assert_eq!(
        in_window(&by_pid, "counter", "TRUE"),
        in_window(&rec, "counter", "TRUE")
    );
    let woke = format!("(pid = {child} OR waker_pid = {child})");
    let wakeups = in_window(&rec, "sched_wakeup", &woke);
    assert!(wakeups >= 1_000, "the child's wakeups: {wakeups}");
    assert_eq!(
        sql_count(&by_pid, "SELECT count(*) AS n FROM sched_wakeup"),
        wakeups
    );

    let info = run(Command::new(bin("hindsight")).arg("info").arg(&by_pid));
    let text = String::from_utf8_lossy(&info.stdout);
    assert!(
        text.contains(&format!("slice of   {}", rec.display())),
        "{text}"
    );
}
