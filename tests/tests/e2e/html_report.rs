//! `report html` of a real recording with an injected CPU burst: the page
//! names the burner, and headless Chromium renders it without a console
//! message into a screenshot that is a real picture (right size, many
//! colours, the red incident band among them).
//!
//! Console messages: Chromium started with `--enable-logging=stderr --v=0`
//! writes every console message and every uncaught exception of every
//! frame as a `...:CONSOLE...` line on its stderr, whatever its level. The
//! page has no script of its own, so any such line is a failure. The test
//! first shows that this Chromium does report a deliberate error that way,
//! so a change in its log format cannot make the check pass vacuously.
//! Failed loads of other files are not console lines; the analyzer's
//! synthetic test checks that the page refers to nothing outside itself.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::Duration;

use crate::fixture::{bin, hindsight_stdout, load, quiet, run, sql, sql_count, Recorder, Scratch};

/// A screenshot of `page` by headless Chromium, `width` x `height` CSS
/// pixels: the PNG and what Chromium logged (its `CONSOLE` lines).
fn screenshot(page: &Path, out: &Path, (width, height): (u32, u32)) -> (Vec<u8>, Vec<String>) {
    let profile = out.with_extension("profile");
    let result = run(Command::new("chromium").args([
        "--headless",
        "--no-sandbox", // as root, as CI runs
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--enable-logging=stderr",
        "--v=0",
        &format!("--user-data-dir={}", profile.display()),
        &format!("--window-size={width},{height}"),
        &format!("--screenshot={}", out.display()),
        &format!("file://{}", page.display()),
    ]));
    let log = String::from_utf8_lossy(&result.stderr).into_owned();
    assert!(
        result.status.success(),
        "chromium failed ({}), is it installed (scripts/install-deps)?\n{log}",
        result.status
    );
    let png = std::fs::read(out).unwrap_or_else(|e| panic!("{}: {e}\n{log}", out.display()));
    let console = log
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(str::to_owned)
        .collect();
    (png, console)
}

/// A decoded 8-bit RGB or RGBA PNG: width, height and one RGB triple a pixel.
struct Picture {
    width: u32,
    height: u32,
    pixels: Vec<[u8; 3]>,
}

/// Decodes the PNGs Chromium writes (8-bit RGB or RGBA, not interlaced).
fn decode_png(png: &[u8]) -> Picture {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let (mut header, mut compressed) = (Vec::new(), Vec::new());
    let mut at = 8;
    while at + 8 <= png.len() {
        let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
        let kind = &png[at + 4..at + 8];
        let data = &png[at + 8..at + 8 + len];
        match kind {
            b"IHDR" => header = data.to_vec(),
            b"IDAT" => compressed.extend_from_slice(data),
            _ => {}
        }
        at += 12 + len;
    }
    let width = u32::from_be_bytes(header[0..4].try_into().unwrap());
    let height = u32::from_be_bytes(header[4..8].try_into().unwrap());
    let (depth, colour, interlace) = (header[8], header[9], header[12]);
    assert!(
        depth == 8 && (colour == 2 || colour == 6) && interlace == 0,
        "an unexpected PNG kind: depth {depth}, colour type {colour}, interlace {interlace}"
    );
    let bpp = if colour == 6 { 4 } else { 3 };
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(compressed.as_slice())
        .read_to_end(&mut raw)
        .expect("PNG data inflates");
    let stride = width as usize * bpp;
    assert_eq!(raw.len(), height as usize * (stride + 1), "PNG data size");
    let mut previous = vec![0u8; stride];
    let mut pixels = Vec::with_capacity(width as usize * height as usize);
    for row in raw.chunks(stride + 1) {
        let (filter, data) = (row[0], &row[1..]);
        let mut line = vec![0u8; stride];
        for i in 0..stride {
            let a = if i >= bpp { line[i - bpp] } else { 0 };
            let b = previous[i];
            let c = if i >= bpp { previous[i - bpp] } else { 0 };
            let predicted = match filter {
                0 => 0,
                1 => a,
                2 => b,
                3 => ((u16::from(a) + u16::from(b)) / 2) as u8,
                4 => {
                    let p = i16::from(a) + i16::from(b) - i16::from(c);
                    let (pa, pb, pc) = (
                        (p - i16::from(a)).abs(),
                        (p - i16::from(b)).abs(),
                        (p - i16::from(c)).abs(),
                    );
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                other => panic!("PNG filter {other}"),
            };
            line[i] = data[i].wrapping_add(predicted);
        }
        pixels.extend(line.chunks(bpp).map(|p| [p[0], p[1], p[2]]));
        previous = line;
    }
    Picture {
        width,
        height,
        pixels,
    }
}

/// Holds the machine quiet, as the timeline test does: the burst should be
/// the busiest thing recorded.
#[test]
fn the_html_report_of_a_real_burst_renders_in_chromium() {
    let _machine = quiet();
    let scratch = Scratch::new();
    let dir = scratch.dir.path();

    // Chromium reports a console error the way the check below looks for.
    let broken = dir.join("broken.html");
    std::fs::write(
        &broken,
        "<!DOCTYPE html><title>x</title><p>x</p><script>console.error('deliberate')</script>",
    )
    .unwrap();
    let (_, console) = screenshot(&broken, &dir.join("broken.png"), (400, 300));
    assert!(
        console.iter().any(|l| l.contains("deliberate")),
        "this Chromium does not log console messages on stderr: the check would be blind: {console:?}"
    );

    let rec = scratch.rec();
    let recorder = Recorder::start(&rec, &[]);
    thread::sleep(Duration::from_secs(20));
    let burst_start = crate::fixture::utc_now_ns();
    let burn = load(&["burn", "5"]);
    let burst_end = crate::fixture::utc_now_ns();
    thread::sleep(Duration::from_secs(10));
    recorder.stop();
    let burn_pid = burn["pid"].as_i64().unwrap();

    let page: PathBuf = dir.join("report.html");
    let rec_arg = rec.to_str().unwrap();
    let out = run(Command::new(bin("hindsight")).args([
        "report",
        "html",
        rec_arg,
        "-i",
        "5s",
        "-o",
        page.to_str().unwrap(),
    ]));
    assert!(
        out.status.success(),
        "report html failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    // The process table is the busiest processes by the cpu_time view, in
    // order; the burner is among them unless the recorder lost switches
    // (then cpu_time is a lower bound, and a storm of another program's
    // switches may have hidden the burner's). Not necessarily first: a
    // compiler of someone else's on a shared machine can outrun 5 s.
    let busiest = sql(
        &rec,
        "SELECT pid FROM cpu_time GROUP BY pid ORDER BY sum(dur_ns) DESC, pid LIMIT 8",
    );
    let mut from = 0;
    for row in &busiest {
        let cell = format!("<td class=\"num\">{}</td>", row["pid"]);
        let at = html[from..]
            .find(&cell)
            .unwrap_or_else(|| panic!("{cell} is not in the process table in order"));
        from += at + cell.len();
    }
    let lost_switches = sql_count(
        &rec,
        "SELECT coalesce(sum(lost), 0) FROM loss WHERE source LIKE '%sched_switch'",
    );
    if lost_switches == 0 {
        assert!(
            busiest.iter().any(|r| r["pid"].as_i64() == Some(burn_pid)),
            "hs-load ({burn_pid}) is not among the busiest processes: {busiest:?}"
        );
    }
    let incidents: Vec<serde_json::Value> = serde_json::from_str(&hindsight_stdout(&[
        "report", "timeline", rec_arg, "-i", "5s", "-f", "json",
    ]))
    .unwrap();
    // Losses or not, the burst is an incident, and the burner's CPU one of
    // its departures from the baseline (not always a top contributor: a
    // compiler of someone else's may outrun it).
    let utc = |i: &serde_json::Value, key: &str| {
        chrono::DateTime::parse_from_rfc3339(i[key].as_str().unwrap())
            .unwrap()
            .timestamp_nanos_opt()
            .unwrap()
    };
    assert!(
        incidents.iter().any(|i| utc(i, "start") < burst_end
            && utc(i, "end") > burst_start
            && i["metrics"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| { m["pid"].as_i64() == Some(burn_pid) && m["metric"] == "process_cpu" })),
        "no incident over the burst names hs-load ({burn_pid}): {incidents:?}"
    );
    let listed = if incidents.len() == 1 {
        "<b>1 incident</b>".to_owned()
    } else {
        format!("<b>{} incidents</b>", incidents.len())
    };
    assert!(html.contains(&listed), "the page does not say {listed}");
    assert!(
        html.contains("data:image/svg+xml;base64,"),
        "no on-CPU flame graph, though the recorder sampled the CPU"
    );

    let (png, console) = screenshot(&page, &dir.join("report.png"), (1280, 2000));
    assert!(console.is_empty(), "console messages: {console:#?}");
    let picture = decode_png(&png);
    assert_eq!((picture.width, picture.height), (1280, 2000));
    let mut colours: Vec<[u8; 3]> = picture.pixels.clone();
    colours.sort_unstable();
    colours.dedup();
    // Text, lines and their anti-aliasing give a page hundreds of colours;
    // a blank or failed render has one or a few.
    assert!(colours.len() > 100, "{} colours only", colours.len());
    // The incident bands: the page's red at 14 % over white.
    let band = picture
        .pixels
        .iter()
        .filter(|p| p[0] >= 245 && (218..=232).contains(&p[1]) && (218..=232).contains(&p[2]))
        .count();
    assert!(
        band > 2000,
        "{band} pixels of incident band in the screenshot"
    );
}

/// Names are chosen by whoever runs a process, and a report attached to a
/// ticket is a page other people open: a process named as markup, and a
/// function named as markup, stay text everywhere the page shows them.
/// Injected, `<body onload=y>` (15 bytes, the longest name a process has)
/// would give the page's body an onload handler (the DOM Chromium builds
/// would show it) that runs `y` and logs its ReferenceError to the console,
/// which Chromium reports. A function name has no length limit: a JIT's
/// perf map names its code `<img src=x onerror=alert(1)>`, which reaches the
/// on-CPU flame graph (inferno's SVG, with its script) and would be an
/// image whose failed load opens a dialog.
#[cfg(target_arch = "x86_64")]
#[test]
fn a_process_named_as_markup_is_shown_as_text() {
    use std::process::Stdio;
    const NAME: &str = "<body onload=y>";
    const FUNCTION: &str = "<img src=x onerror=alert(1)>";
    const FUNCTION_ESCAPED: &str = "&lt;img src=x onerror=alert(1)&gt;";
    let _machine = quiet();
    let scratch = Scratch::new();
    let dir = scratch.dir.path();
    let rec = scratch.rec();
    let recorder = Recorder::start(&rec, &[]);
    thread::sleep(Duration::from_secs(5));
    let mut jit = Command::new(bin("hs-load"))
        .args(["jit", "3"])
        .env("HS_LOAD_NAME", NAME)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Before its 500 ms pause ends, so every sample of its code is named.
    let map = format!("/tmp/perf-{}.map", jit.id());
    std::fs::write(&map, format!("0 7fffffffffff {FUNCTION}\n")).unwrap();
    thread::sleep(Duration::from_secs(5));
    // The JIT lives until the recorder has named its frames from its map.
    recorder.stop();
    drop(jit.stdin.take());
    let out = jit.wait_with_output().unwrap();
    let _ = std::fs::remove_file(&map);
    assert!(out.status.success());
    let named = sql_count(
        &rec,
        &format!(
            "SELECT count(*) FROM cpu_sample s JOIN stack k ON k.stack_id = s.stack_id \
             JOIN frame f ON f.frame_id = k.frame_id WHERE f.function = '{FUNCTION}'"
        ),
    );
    assert!(
        named > 20,
        "{named} samples in the function named as markup"
    );

    let page = dir.join("report.html");
    let out = run(Command::new(bin("hindsight")).args([
        "report",
        "html",
        rec.to_str().unwrap(),
        "-i",
        "2s",
        "-o",
        page.to_str().unwrap(),
    ]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("&lt;body onload=y&gt;"),
        "the process is not on the page under its name"
    );
    assert!(!html.contains(NAME), "the name is in the page unescaped");
    let (_, console) = screenshot(&page, &dir.join("report.png"), (1280, 2000));
    assert!(console.is_empty(), "console messages: {console:#?}");
    let dom = run(Command::new("chromium").args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        &format!("--user-data-dir={}", dir.join("dom-profile").display()),
        "--dump-dom",
        &format!("file://{}", page.display()),
    ]));
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(
        dom.contains("&lt;body onload=y&gt;"),
        "no text of the name in the DOM"
    );
    assert!(!dom.contains("onload=\""), "an onload attribute in the DOM");

    // The flame graph is a document of its own (a data: URL in an
    // <object>): its names are XML text, and Chromium builds no element of
    // them when it opens the graph alone.
    let svg = flame_graph_svgs(&html)
        .into_iter()
        .next()
        .expect("an on-CPU flame graph");
    assert!(
        svg.contains(FUNCTION_ESCAPED),
        "the function is not in the flame graph"
    );
    assert!(
        !svg.contains(FUNCTION),
        "the function is in the flame graph unescaped"
    );
    let graph = dir.join("graph.svg");
    std::fs::write(&graph, &svg).unwrap();
    let (_, console) = screenshot(&graph, &dir.join("graph.png"), (1200, 800));
    assert!(
        console.is_empty(),
        "console messages of the graph: {console:#?}"
    );
    let dom = run(Command::new("chromium").args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        &format!("--user-data-dir={}", dir.join("graph-profile").display()),
        "--dump-dom",
        &format!("file://{}", graph.display()),
    ]));
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(
        dom.contains(FUNCTION_ESCAPED),
        "no text of the function in the graph's DOM"
    );
    assert!(!dom.contains("<img"), "an img element in the graph's DOM");
}

/// The SVG documents of the page's flame graphs, decoded from their data: URLs.
fn flame_graph_svgs(html: &str) -> Vec<String> {
    use base64::Engine;
    const PREFIX: &str = "data:image/svg+xml;base64,";
    html.match_indices(PREFIX)
        .map(|(at, _)| {
            let data = &html[at + PREFIX.len()..];
            let data = &data[..data.find('"').expect("a closing quote")];
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(data)
                .unwrap();
            String::from_utf8(bytes).unwrap()
        })
        .collect()
}
