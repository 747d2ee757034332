//! `report html` on a synthetic recording with one CPU burst: one file that
//! references nothing outside itself, an SVG per chart, the burst listed as
//! an incident and shaded, the flame graph and the losses there.

use std::fs;
use std::path::Path;

use base64::Engine as _;

use hindsight_schemas::tables::{COUNTER, CPU_SAMPLE, FRAME, LOSS, SCHED_SWITCH, STACK};
use serde_json::{json, Value};

use crate::fixture::{hindsight, stderr, stdout, t, Fixture, Rec};
use crate::flamegraph::stack_rows;
use crate::timeline::burst_recording;

/// [`burst_recording`] (a hog, pid 77, on CPU from 30 s to 35 s) plus what
/// the other parts of the page draw: CPU ticks of /proc/stat, CPU samples
/// of the hog with a stack, and 12 events lost during the burst.
fn recording(fx: &Fixture) -> Rec {
    let rec = burst_recording(fx);
    let mut counters = Vec::new();
    let (mut user, mut idle) = (1000, 5000);
    for k in 0..=60i64 {
        let busy = (30..35).contains(&k);
        user += if busy { 100 } else { 5 };
        idle += if busy { 100 } else { 195 };
        for (name, value) in [("user", user), ("idle", idle)] {
            counters.push(json!({"ts": t(k * 1000 + 500), "source": "stat", "name": name, "scope": null, "value": value}));
        }
    }
    rec.chunk(&COUNTER, "20231114T221320.000Z-000002.parquet", &counters);
    let frames = [
        json!({"frame_id": 1, "kind": "user", "address": 4096, "module": "/usr/bin/hog", "file_offset": 16, "function": "main"}),
        json!({"frame_id": 2, "kind": "user", "address": 4200, "module": "/usr/bin/hog", "file_offset": 32, "function": "spin_forever"}),
    ];
    rec.chunk(&FRAME, "a-000001.parquet", &frames);
    rec.chunk(&STACK, "a-000001.parquet", &stack_rows(10, &[2, 1]));
    let samples: Vec<Value> = (0..20)
        .map(|i| json!({"ts": t(30_000 + i * 200), "cpu": 0, "tid": 77, "pid": 77, "comm": "hog", "stack_id": 10, "kernel": false}))
        .collect();
    rec.chunk(&CPU_SAMPLE, "a-000001.parquet", &samples);
    rec.chunk(
        &LOSS,
        "a-000001.parquet",
        &[json!({"ts": t(32_000), "cpu": 0, "source": "ring_full:sched_switch", "lost": 12})],
    );
    rec
}

/// Every value of `attribute="..."` in `html`.
fn attribute_values<'a>(html: &'a str, attribute: &str) -> Vec<&'a str> {
    let needle = format!(" {attribute}=\"");
    html.split(needle.as_str())
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap())
        .collect()
}

fn page(rec: &Rec, out: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "report",
        "html",
        rec.dir.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let run = hindsight(&args);
    assert!(run.status.success(), "{}", stderr(&run));
    assert_eq!(stdout(&run), "", "the page goes to the file only");
    assert!(stderr(&run).contains("wrote"), "{}", stderr(&run));
    fs::read_to_string(out).unwrap()
}

#[test]
fn the_page_is_one_file_that_lists_and_shades_the_burst() {
    let fx = Fixture::new();
    let rec = recording(&fx);
    let html = page(&rec, &fx.path("report.html"), &[]);

    assert!(html.starts_with("<!DOCTYPE html>"), "{}", &html[..200]);
    assert!(html.trim_end().ends_with("</html>"));
    // Self-contained: nothing fetched, no script of the page's own.
    for attribute in ["src", "href", "data"] {
        for value in attribute_values(&html, attribute) {
            assert!(
                value.starts_with("data:") || value.starts_with('#'),
                "{attribute}={value:?} points outside the page"
            );
        }
    }
    // The SVG namespace is a name, not an address: nothing else may look like one.
    let without_namespaces = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    for outside in ["<script", "<link", "@import", "url(", "http://", "https://"] {
        assert!(
            !without_namespaces.contains(outside),
            "the page has {outside:?}"
        );
    }

    // One SVG per chart: CPU, context switches, lost events, processes.
    let figures = html.matches("<figure>").count();
    assert_eq!(figures, 4, "{html}");
    assert_eq!(html.matches("<svg").count(), figures);
    assert_eq!(html.matches("</svg>").count(), figures);
    for heading in [
        "<h3>CPU</h3>",
        "<h3>Context switches</h3>",
        "<h3>What the recorder lost</h3>",
        "<h3>Processes using the most CPU</h3>",
    ] {
        assert!(html.contains(heading), "no {heading}");
    }
    assert!(html.contains("% of all CPUs") && html.contains("time (UTC)"));

    // The burst: listed, with the hog behind it, and shaded on the charts.
    assert!(html.contains("<b>1 incident</b>"), "{html}");
    assert!(
        html.contains("<tr><td class=\"num\">1</td><td>22:13:50</td><td>22:14:00</td>"),
        "{html}"
    );
    assert!(html.contains("CPU used by hog (77)"), "{html}");
    assert!(html.contains("hog (77) 100 %"), "{html}");
    // Its thread (the burst's 4.95 s on the CPU) and where its samples were.
    assert!(
        html.contains(
            "<small>thread hog (77): 4.95 s on CPU, 0.05 s waiting to run, 0.00 s in D</small>"
        ),
        "{html}"
    );
    assert!(
        html.contains("<small>100 % of its samples in <code>spin_forever</code></small>"),
        "{html}"
    );
    assert_eq!(
        html.matches("opacity=\"0.14\" fill=\"#D62728\"").count(),
        figures,
        "one band per chart"
    );

    // The flame graph of the hog's samples, and what was lost.
    let flame = attribute_values(&html, "data")
        .into_iter()
        .find(|v| v.starts_with("data:image/svg+xml;base64,"))
        .expect("an embedded flame graph");
    let svg = base64::engine::general_purpose::STANDARD
        .decode(flame.trim_start_matches("data:image/svg+xml;base64,"))
        .expect("base64");
    let svg = String::from_utf8(svg).unwrap();
    // All 20 samples of the hog, through main into spin_forever.
    for name in ["hog", "main", "spin_forever"] {
        assert!(
            svg.contains(&format!(">{name} (20 samples, 100.00%)<")),
            "no {name} box of 20 samples in {svg}"
        );
    }
    assert!(!svg.contains("no samples"), "{svg}");
    assert!(html.contains("12 events lost"), "{html}");
    assert!(
        html.contains("<code>ring_full:sched_switch</code>"),
        "{html}"
    );
    assert!(html.contains("without <code>--off-cpu-stacks</code>"));
    assert!(html.contains("What happened on h</h1>"));
    assert!(html.contains("6.18.0-test"));
}

/// A process that renames itself after it starts (a daemon setting its
/// title, a JIT naming its threads) is listed under the name it ends the
/// window with, indexed or not: not under whichever name sorts last, nor
/// the one it had for its first slice.
#[test]
fn a_process_is_listed_under_the_name_it_ends_the_window_with() {
    let fx = Fixture::new();
    let rec = fx.recording("rec", "h");
    let sw = |ms: i64, prev: (i32, &str), next: (i32, &str)| {
        json!({"ts": t(ms), "cpu": 0, "prev_tid": prev.0, "prev_pid": prev.0, "prev_comm": prev.1,
               "prev_state": "R", "prev_prio": 120, "next_tid": next.0, "next_pid": next.0,
               "next_comm": next.1, "next_prio": 120})
    };
    let idle = (0, "swapper/0");
    let (launcher, renamed) = ((88, "zz-launcher"), (88, "aa-renamed"));
    let mut switches = vec![sw(1_000, idle, launcher), sw(1_050, launcher, idle)];
    for k in 1..20 {
        switches.push(sw(1_000 + k * 100, idle, renamed));
        switches.push(sw(1_090 + k * 100, renamed, idle));
    }
    rec.chunk(&SCHED_SWITCH, "a-000001.parquet", &switches);
    let out = fx.path("page.html");
    for indexed in [false, true] {
        if indexed {
            let run = hindsight(["index", rec.dir.to_str().unwrap()]);
            assert!(run.status.success(), "{}", stderr(&run));
        }
        let html = page(&rec, &out, &["-i", "10s"]);
        assert!(
            html.contains("aa-renamed") && !html.contains("zz-launcher"),
            "indexed: {indexed}: {html}"
        );
    }
}

#[test]
fn the_page_goes_to_stdout_with_dash_and_follows_the_window() {
    let fx = Fixture::new();
    let rec = recording(&fx);
    let run = hindsight([
        "report",
        "html",
        rec.dir.to_str().unwrap(),
        "--to",
        "2023-11-14T22:13:45Z",
        "-o",
        "-",
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    let html = stdout(&run);
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(
        html.contains("No incidents"),
        "the quiet part has none: {html}"
    );
    assert!(html.contains("--to 2023-11-14T22:13:45Z"), "{html}");
}

#[test]
fn bad_requests_are_one_line_naming_what_is_wrong() {
    let fx = Fixture::new();
    let rec = recording(&fx);
    let missing = fx.path("nowhere");
    let run = hindsight([
        "report",
        "html",
        missing.to_str().unwrap(),
        "-o",
        fx.path("x.html").to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(2));
    assert!(
        stderr(&run).contains(missing.to_str().unwrap()),
        "{}",
        stderr(&run)
    );
    assert_eq!(stderr(&run).lines().count(), 1, "{}", stderr(&run));
    assert!(!fx.path("x.html").exists());

    let unwritable = fx.path("no-such-dir/report.html");
    let run = hindsight([
        "report",
        "html",
        rec.dir.to_str().unwrap(),
        "-o",
        unwritable.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(1));
    assert!(
        stderr(&run).contains(unwritable.to_str().unwrap()),
        "{}",
        stderr(&run)
    );
    assert_eq!(stderr(&run).lines().count(), 1, "{}", stderr(&run));

    let run = hindsight([
        "report",
        "html",
        rec.dir.to_str().unwrap(),
        "--from",
        "2023-11-14T23:00:00Z",
        "-o",
        "-",
    ]);
    assert_eq!(run.status.code(), Some(2), "{}", stderr(&run));
    assert!(stderr(&run).contains("holds nothing"), "{}", stderr(&run));
    assert_eq!(stdout(&run), "");
}
