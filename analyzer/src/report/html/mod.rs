//! `report html`: one self-contained HTML page about a recording, to attach
//! to a ticket. It says what the machine did over a window (charts of the
//! main counters and of the busiest processes' CPU), when it departed from
//! its usual level (the incidents, shaded on every chart and listed), which
//! code burned the CPU (flame graphs), and what the recorder could not see.
//!
//! One definition of each thing: the header is [`crate::info::summarize`],
//! the incidents are [`super::timeline`]'s SQL and baseline step, the flame
//! graphs [`crate::flamegraph`]'s statement and SVG. This module adds the
//! two statements the charts need ([`system_sql`], [`process_cpu_sql`],
//! over the `counter_rate` and `cpu_time` views), the layout, and
//! [`plot`], which draws the charts.
//!
//! Self-contained means viewable offline and safe to mail: no script, and
//! nothing fetched. Charts are inline SVG; each flame graph is inferno's SVG
//! in a `data:` URL inside an `<object>`, so its own script (zoom, search)
//! runs in a document of its own and the page needs none.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use arrow::array::{Array, RecordBatch};
use base64::Engine as _;
use chrono::{DateTime, Utc};
use hindsight_schemas::time::rfc3339;

use super::baseline::{Departure, Incident, StackTime};
use super::{timeline, Env, Interval, ThreadTime};
use crate::columns::{f64s, i32s, i64s, strings};
use crate::flamegraph;
use crate::info::{self, Summary};
use crate::output::Format;
use crate::recording::Recording;
use crate::when::{self, When};
use crate::{catalog, UsageError};

pub mod plot;

/// `report html`'s flags, resolved.
#[derive(Clone, Debug)]
pub struct Request {
    pub recording: PathBuf,
    pub from: Option<When>,
    pub to: Option<When>,
    /// The interval incidents are found in; `None`: [`incident_interval`].
    pub interval: Option<Interval>,
    /// Processes on the CPU chart.
    pub top: usize,
    /// Where the page goes; `-` is standard output.
    pub output: PathBuf,
}

const S: i64 = 1_000_000_000;

/// Intervals of a length people count in, for choosing one automatically.
const ROUND_INTERVALS_S: &[i64] = &[
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400,
];

/// The shortest round interval of at least `ns`.
fn round_interval(ns: i64) -> Interval {
    let s = ROUND_INTERVALS_S
        .iter()
        .copied()
        .find(|s| s * S >= ns)
        .unwrap_or(86400);
    Interval::from_ns(s * S)
}

/// The charts' resolution: about 300 points across the window, never
/// finer than the counters' 1 s default.
pub fn plot_step(window_ns: i64) -> Interval {
    round_interval(window_ns / 300)
}

/// The incidents' interval when none is given: `report timeline`'s 10 s,
/// longer when the window would hold more than 500 of them (each series'
/// baseline needs only enough intervals, and a week of 10 s intervals per
/// process is a large query for a page).
pub fn incident_interval(window_ns: i64) -> Interval {
    round_interval((window_ns / 500).max(10 * S))
}

/// The window the page covers, UTC ns `[start, end)`: `--from`/`--to`, or
/// the whole recording.
fn window(request: &Request, rec: &Recording) -> Result<(i64, i64)> {
    let Some((first, last)) = rec.time_range() else {
        return Err(UsageError(format!(
            "{}: the recording has no events yet: nothing to report",
            rec.dir.display()
        ))
        .into());
    };
    let (from, to) =
        when::resolve_window(request.from, request.to, Some((first, last))).map_err(UsageError)?;
    let (start, end) = (from.unwrap_or(first), to.unwrap_or(last + 1));
    if start >= end {
        return Err(UsageError(format!(
            "{}: the window {} .. {} holds nothing of the recording ({} .. {})",
            rec.dir.display(),
            rfc3339(start),
            rfc3339(end),
            rfc3339(first),
            rfc3339(last)
        ))
        .into());
    }
    Ok((start, end))
}

/// Everything the page shows, gathered before any of it is written.
#[derive(Debug)]
pub struct Page {
    pub summary: Summary,
    /// UTC ns, `[start, end)`.
    pub window: (i64, i64),
    pub interval: Interval,
    pub step: Interval,
    pub incidents: Vec<Incident>,
    /// System series by name (see [`system_sql`]): interval start, value.
    pub system: BTreeMap<String, Vec<(i64, f64)>>,
    /// The busiest processes, the busiest first.
    pub processes: Vec<ProcessCpu>,
    /// On-CPU flame graph: `None` when no CPU samples were recorded.
    pub on_cpu: Option<FlameGraph>,
    /// Off-CPU flame graph: `None` without `--off-cpu-stacks`.
    pub off_cpu: Option<FlameGraph>,
    pub sample_frequency: u32,
    pub events: Vec<String>,
    pub cpus: u32,
}

/// One process's CPU over the window.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessCpu {
    pub pid: i32,
    pub comm: String,
    /// On-CPU time over the window.
    pub total_ns: i64,
    /// `% of one CPU` per plotted interval, zero where it did not run.
    pub points: Vec<(i64, f64)>,
}

#[derive(Debug)]
pub struct FlameGraph {
    /// inferno's SVG document; empty when there was nothing to draw.
    pub svg: String,
    /// Distinct stacks drawn.
    pub stacks: usize,
}

/// The statement behind the system charts: per interval of `step` in
/// `[start, end)`, one row per series (`t` UTC ns, `series`, `value`):
/// `cpu_busy` and `cpu_iowait` (% of all CPUs), the meminfo gauges in
/// bytes, `pgfault`, `pgmajfault`, `pgpgin`, `pgpgout` (KiB) and `ctxt` per
/// second, `psi_<resource>_some` (% of time), and `lost` (events).
pub fn system_sql((start, end): (i64, i64), step: Interval) -> String {
    let bounds = format!(
        "ts >= {} AND ts < {}",
        super::timestamp(start),
        super::timestamp(end)
    );
    format!(
        "WITH bins AS (  -- system-wide counters per interval: change, time it covers, last value
  SELECT date_bin({step}, ts) AS t, source, name,
    sum(delta) AS delta, sum(seconds) AS seconds, last_value(value ORDER BY ts) AS value
  FROM counter_rate
  WHERE scope IS NULL AND {bounds} AND (
    (source = 'stat' AND name IN ({ticks}, 'ctxt'))
    OR (source = 'vmstat' AND name IN ('pgfault', 'pgmajfault', 'pgpgin', 'pgpgout'))
    OR (source = 'meminfo' AND name IN ('MemTotal', 'MemAvailable', 'MemFree', 'Cached'))
    OR (source = 'pressure' AND name IN ('cpu_some_total', 'memory_some_total', 'io_some_total')))
  GROUP BY 1, 2, 3
),
ticks AS (  -- CPU time split of the total line
  SELECT t, sum(delta) AS total,
    sum(CASE WHEN name NOT IN ('idle', 'iowait') THEN delta ELSE 0 END) AS busy,
    sum(CASE WHEN name = 'iowait' THEN delta ELSE 0 END) AS iowait
  FROM bins WHERE source = 'stat' AND name <> 'ctxt'
  GROUP BY t
),
series AS (
  SELECT t, 'cpu_busy' AS series, 100.0 * busy / total AS value FROM ticks WHERE total > 0
  UNION ALL SELECT t, 'cpu_iowait', 100.0 * iowait / total FROM ticks WHERE total > 0
  UNION ALL SELECT t, name, 1024.0 * value FROM bins WHERE source = 'meminfo'
  UNION ALL SELECT t, name, delta / seconds FROM bins
    WHERE seconds > 0 AND (source = 'vmstat' OR (source = 'stat' AND name = 'ctxt'))
  UNION ALL SELECT t, 'psi_' || replace(name, '_total', ''), 100.0 * delta / 1e6 / seconds FROM bins
    WHERE source = 'pressure' AND seconds > 0
  UNION ALL SELECT date_bin({step}, ts), 'lost', CAST(sum(lost) AS DOUBLE) FROM loss
    WHERE {bounds} GROUP BY 1
)
SELECT CAST(t AS BIGINT) AS t, series, CAST(value AS DOUBLE) AS value FROM series ORDER BY t, series",
        step = step.sql(),
        ticks = timeline::quoted(timeline::CPU_TICKS),
    )
}

/// The statement behind the process chart: on-CPU nanoseconds per process
/// and interval of `step`, counted as `report timeline` counts
/// `process_cpu` ([`Env::thread_time_sql`]).
pub fn process_cpu_sql(env: &Env, (start, end): (i64, i64), step: Interval) -> String {
    // From the bin that holds the window's start: thread_time_sql takes bin
    // starts, and an unaligned start would drop the first bin's CPU time.
    format!(
        "SELECT CAST(interval_start AS BIGINT) AS t, pid, comm, ns FROM ({}) t ORDER BY 1, 2",
        env.thread_time_sql(
            ThreadTime::OnCpu,
            step,
            (Some(step.align(start)), Some(end))
        )
    )
}

/// [`system_sql`]'s rows as series.
fn system_series(batches: &[RecordBatch]) -> Result<BTreeMap<String, Vec<(i64, f64)>>> {
    let mut out: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
    for batch in batches {
        let (t, name, value) = (
            i64s(batch, "t")?,
            strings(batch, "series")?,
            f64s(batch, "value")?,
        );
        for row in 0..batch.num_rows() {
            if t.is_null(row) || name.is_null(row) || value.is_null(row) {
                continue;
            }
            out.entry(name.value(row).to_owned())
                .or_default()
                .push((t.value(row), value.value(row)));
        }
    }
    Ok(out)
}

/// [`process_cpu_sql`]'s rows as the `top` busiest processes, with a point
/// (zero where it did not run) at every interval of the window.
fn busiest_processes(
    batches: &[RecordBatch],
    (start, end): (i64, i64),
    step: Interval,
    top: usize,
) -> Result<Vec<ProcessCpu>> {
    let mut by_pid: BTreeMap<i32, (String, BTreeMap<i64, i64>)> = BTreeMap::new();
    for batch in batches {
        let (t, pid, comm, ns) = (
            i64s(batch, "t")?,
            i32s(batch, "pid")?,
            strings(batch, "comm")?,
            i64s(batch, "ns")?,
        );
        for row in 0..batch.num_rows() {
            if t.is_null(row) || pid.is_null(row) || ns.is_null(row) {
                continue;
            }
            let entry = by_pid.entry(pid.value(row)).or_default();
            // Rows come in time order: the name kept is the one the
            // process ends the window with.
            if !comm.is_null(row) && entry.0 != comm.value(row) {
                entry.0 = comm.value(row).to_owned();
            }
            *entry.1.entry(t.value(row)).or_default() += ns.value(row);
        }
    }
    let mut processes: Vec<ProcessCpu> = by_pid
        .into_iter()
        .map(|(pid, (comm, bins))| ProcessCpu {
            pid,
            comm,
            total_ns: bins.values().sum(),
            points: (0..)
                .map(|k| step.align(start) + k * step.ns())
                .take_while(|&t| t < end)
                .map(|t| {
                    let ns = bins.get(&t).copied().unwrap_or(0);
                    (t, 100.0 * ns as f64 / step.ns() as f64)
                })
                .collect(),
        })
        .collect();
    processes.sort_by_key(|p| (std::cmp::Reverse(p.total_ns), p.pid));
    processes.truncate(top);
    Ok(processes)
}

/// Gathers everything the page shows from the recording.
pub async fn gather(request: &Request, partitions: usize) -> Result<Page> {
    let rec = Recording::open(&request.recording)?;
    let recordings = std::slice::from_ref(&rec);
    let window = window(request, &rec)?;
    let interval = request
        .interval
        .unwrap_or_else(|| incident_interval(window.1 - window.0));
    let step = plot_step(window.1 - window.0);
    let ctx = catalog::context_for(recordings, partitions).map_err(catalog::one_line)?;
    let summary = info::summarize(&rec, partitions).await?;

    let options = super::Options {
        interval,
        from: request.from,
        to: request.to,
        top: request.top,
        format: Format::Table,
        show_sql: false,
        pid: None,
        metric: None,
        sensitivity: 1.0,
        at: None,
    };
    let env = Env::new(&options, recordings)?;
    let query = |sql: String| {
        let ctx = ctx.clone();
        async move {
            catalog::query_batches(&ctx, &sql)
                .await
                .map_err(catalog::one_line)
        }
    };
    let samples = timeline::samples(&timeline::query(&ctx, &env).await?)?;
    let mut incidents = timeline::incidents(&samples, &env);
    timeline::add_details(&ctx, &env, &mut incidents).await?;
    let system = system_series(&query(system_sql(window, step)).await?)?;
    let processes = busiest_processes(
        &query(process_cpu_sql(&env, window, step)).await?,
        window,
        step,
        request.top,
    )?;

    let graph = |mode| flamegraph::Options {
        mode,
        pid: None,
        tid: None,
        comm: None,
        from: Some(window.0),
        to: Some(window.1),
        format: flamegraph::Format::Svg,
        output: None,
        show_sql: false,
        indexed: env.indexed,
    };
    let draw = |mode, lines: Vec<String>| -> Result<FlameGraph> {
        if lines.is_empty() {
            return Ok(FlameGraph {
                svg: String::new(),
                stacks: 0,
            });
        }
        let mut svg = Vec::new();
        flamegraph::svg(&lines, mode, &mut svg)?;
        Ok(FlameGraph {
            svg: String::from_utf8(svg).context("inferno wrote an SVG that is not UTF-8")?,
            stacks: lines.len(),
        })
    };
    let sampled = rec.table("cpu_sample").is_some_and(|t| t.rows() > 0);
    let on_cpu = if sampled {
        let lines =
            flamegraph::folded(&ctx, &flamegraph::sql(&graph(flamegraph::Mode::OnCpu))).await?;
        Some(draw(flamegraph::Mode::OnCpu, lines)?)
    } else {
        None
    };
    let off_cpu = if flamegraph::off_cpu_stacks_recorded(recordings) {
        let lines =
            flamegraph::folded(&ctx, &flamegraph::sql(&graph(flamegraph::Mode::OffCpu))).await?;
        Some(draw(flamegraph::Mode::OffCpu, lines)?)
    } else {
        None
    };
    let latest = rec.meta.latest();
    let mut events: Vec<String> = Vec::new();
    for e in rec.meta.sessions.iter().flat_map(|s| &s.events) {
        if !events.contains(e) {
            events.push(e.clone());
        }
    }
    Ok(Page {
        summary,
        window,
        interval,
        step,
        incidents,
        system,
        processes,
        on_cpu,
        off_cpu,
        sample_frequency: latest.map_or(0, |s| s.sample_frequency),
        events,
        cpus: latest.map_or(0, |s| s.cpus),
    })
}

/// Runs `report html`: gathers the page, then writes it whole, so a failure
/// leaves no half-written file behind.
pub async fn run(request: &Request, partitions: usize) -> Result<()> {
    let page = gather(request, partitions).await?;
    let html = render(&page, &request.recording)?;
    if request.output == Path::new("-") {
        let mut out = std::io::stdout().lock();
        out.write_all(html.as_bytes())?;
        out.flush()?;
    } else {
        std::fs::write(&request.output, &html)
            .with_context(|| format!("writing {}", request.output.display()))?;
        eprintln!(
            "hindsight: wrote {} ({}): {} incident{}, {} chart{}",
            request.output.display(),
            info::human_bytes(html.len() as u64),
            page.incidents.len(),
            if page.incidents.len() == 1 { "" } else { "s" },
            html.matches("<svg").count(),
            if html.matches("<svg").count() == 1 {
                ""
            } else {
                "s"
            },
        );
    }
    Ok(())
}

/// Text made safe for HTML content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `2023-11-14 22:13:20 UTC`, for people (fractions of a second dropped).
fn when_text(ns: i64) -> String {
    DateTime::<Utc>::from_timestamp_nanos(ns)
        .format("%Y-%m-%d %H:%M:%S UTC")
        .to_string()
}

/// `22:13:20`, for times whose date the page already said.
fn time_of_day(ns: i64) -> String {
    DateTime::<Utc>::from_timestamp_nanos(ns)
        .format("%H:%M:%S")
        .to_string()
}

/// A metric of `report timeline` in words, for the incident table.
fn metric_words(m: &Departure) -> String {
    let who = || {
        format!(
            "{} ({})",
            m.comm.as_deref().unwrap_or("?"),
            m.pid.map_or("-".into(), |p| p.to_string())
        )
    };
    match m.metric.as_str() {
        "process_cpu" => format!("CPU used by {}", who()),
        "process_faults" => format!("page faults of {}", who()),
        "process_runq_wait" => format!("time {} waited for a CPU", who()),
        "process_offcpu_d" => format!("time {} was blocked (D state, often disk I/O)", who()),
        "process_numa_migrated" => format!("pages of {} migrated between NUMA nodes", who()),
        "cpu_busy" => "CPU busy".into(),
        "iowait" => "CPU idle waiting for I/O".into(),
        "ctxt" => "context switches".into(),
        "pgfault" => "page faults".into(),
        "pgmajfault" => "major page faults (read from disk)".into(),
        "pgscan_kswapd" => "pages scanned by kswapd (memory reclaim)".into(),
        "pgscan_direct" => "pages scanned by allocating tasks (direct reclaim)".into(),
        "pgsteal_kswapd" => "pages reclaimed by kswapd".into(),
        "pgsteal_direct" => "pages reclaimed by allocating tasks".into(),
        "pgmigrate_success" => "pages migrated".into(),
        "numa_pages_migrated" => "pages migrated between NUMA nodes".into(),
        "numa_miss" => "NUMA misses".into(),
        "psi_cpu_some" => "time tasks waited for a CPU (pressure)".into(),
        "psi_memory_some" => "time tasks waited for memory (pressure)".into(),
        "psi_memory_full" => "time all tasks waited for memory (pressure)".into(),
        "psi_io_some" => "time tasks waited for I/O (pressure)".into(),
        "runq_wait" => "time all tasks waited for a CPU".into(),
        "offcpu_d" => "time all tasks were blocked (D state)".into(),
        "lost" => "events the recorder lost".into(),
        other => other.to_owned(),
    }
}

/// A figure for a table: `49.5`, `27856`, `0.7`.
fn figure(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// What a loss source means, in words.
fn loss_words(source: &str) -> String {
    let (cause, table) = source.split_once(':').unwrap_or((source, ""));
    match cause {
        "ring_full" => format!("{table} events dropped: the kernel's buffer was full"),
        "map_full" => format!("{table} entries dropped: the kernel's table was full"),
        "late" => format!("{table} readings skipped: the recorder was busy past its timer"),
        "disk_full" => format!("{table} rows not written: the disk was full"),
        "decode_error" => "records the recorder could not read".into(),
        _ => source.to_owned(),
    }
}

/// The unit that keeps bytes readable at `max`: (name, divisor).
fn byte_unit(max: f64) -> (&'static str, f64) {
    const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
    const MIB: f64 = 1024.0 * 1024.0;
    if max >= GIB {
        ("GiB", GIB)
    } else if max >= MIB {
        ("MiB", MIB)
    } else {
        ("KiB", 1024.0)
    }
}

/// One chart of the page: its heading, one sentence on how to read it, the
/// chart and its legend.
struct Figure {
    heading: String,
    about: String,
    chart: plot::Chart,
}

fn line(label: &str, points: Option<&Vec<(i64, f64)>>, scale: f64) -> Option<plot::Line> {
    let points = points?;
    Some(plot::Line {
        label: label.into(),
        points: points.iter().map(|(t, v)| (*t, v / scale)).collect(),
    })
}

/// The system charts that have data, in the order a person reads them.
fn system_figures(page: &Page) -> Vec<Figure> {
    let s = &page.system;
    let step_ns = page.step.ns();
    let chart =
        |title: &str, unit: &str, y_at_least: f64, lines: Vec<Option<plot::Line>>| plot::Chart {
            title: title.into(),
            unit: unit.into(),
            lines: lines.into_iter().flatten().collect(),
            y_at_least,
            step_ns,
        };
    let mut figures = vec![Figure {
        heading: "CPU".into(),
        about: format!(
            "How busy the {} CPUs were, as a share of all of them (100 % is every CPU busy), and the time they sat idle waiting for disk I/O.",
            page.cpus
        ),
        chart: chart(
            "CPU busy, % of all CPUs",
            "% of all CPUs",
            100.0,
            vec![
                line("busy", s.get("cpu_busy"), 1.0),
                line("idle, waiting for I/O", s.get("cpu_iowait"), 1.0),
            ],
        ),
    }];
    // Memory in use is what the kernel could not hand out without
    // reclaiming: total minus available (free plus reclaimable cache).
    let total: BTreeMap<i64, f64> = s
        .get("MemTotal")
        .map(|v| v.iter().copied().collect())
        .unwrap_or_default();
    let used: Vec<(i64, f64)> = s
        .get("MemAvailable")
        .into_iter()
        .flatten()
        .filter_map(|(t, avail)| total.get(t).map(|total| (*t, total - avail)))
        .collect();
    let memory_total = total.values().copied().fold(0.0, f64::max);
    let (unit, scale) = byte_unit(memory_total);
    figures.push(Figure {
        heading: "Memory".into(),
        about: format!(
            "Memory in use (all of it, {}, minus what the kernel could still hand out), the page cache (file contents kept in memory, given back when needed), and memory not used at all.",
            format_args!("{:.1} {unit}", memory_total / scale)
        ),
        chart: chart(
            "Memory",
            unit,
            memory_total / scale,
            vec![
                (!used.is_empty()).then(|| plot::Line {
                    label: "in use".into(),
                    points: used.iter().map(|(t, v)| (*t, v / scale)).collect(),
                }),
                line("page cache", s.get("Cached"), scale),
                line("free", s.get("MemFree"), scale),
            ],
        ),
    });
    figures.push(Figure {
        heading: "Page faults".into(),
        about: "Page faults: a program touched memory the kernel had to map first. Major faults had to wait for the disk.".into(),
        chart: chart(
            "Page faults per second",
            "faults per second",
            0.0,
            vec![
                line("all faults", s.get("pgfault"), 1.0),
                line("major faults", s.get("pgmajfault"), 1.0),
            ],
        ),
    });
    figures.push(Figure {
        heading: "Context switches".into(),
        about: "How often the CPUs switched from one thread to another.".into(),
        chart: chart(
            "Context switches per second",
            "switches per second",
            0.0,
            vec![line("context switches", s.get("ctxt"), 1.0)],
        ),
    });
    let disk_max = ["pgpgin", "pgpgout"]
        .iter()
        .filter_map(|n| s.get(*n))
        .flatten()
        .map(|p| p.1 * 1024.0)
        .fold(0.0, f64::max);
    let (unit, scale) = byte_unit(disk_max);
    let scale = scale / 1024.0; // the series are KiB/s
    figures.push(Figure {
        heading: "Disk".into(),
        about: "Data read from and written to block devices, all disks together (/proc/vmstat pgpgin and pgpgout).".into(),
        chart: chart(
            "Disk reads and writes",
            &format!("{unit} per second"),
            0.0,
            vec![
                line("read", s.get("pgpgin"), scale),
                line("written", s.get("pgpgout"), scale),
            ],
        ),
    });
    figures.push(Figure {
        heading: "Waiting for resources".into(),
        about: "Pressure stall information: the share of time in which at least one task had to wait for a CPU, for memory or for I/O.".into(),
        chart: chart(
            "Pressure stall, % of time",
            "% of time",
            10.0,
            vec![
                line("waiting for a CPU", s.get("psi_cpu_some"), 1.0),
                line("waiting for memory", s.get("psi_memory_some"), 1.0),
                line("waiting for I/O", s.get("psi_io_some"), 1.0),
            ],
        ),
    });
    if s.get("lost").is_some_and(|l| l.iter().any(|p| p.1 > 0.0)) {
        figures.push(Figure {
            heading: "What the recorder lost".into(),
            about: format!(
                "Events the recorder had to drop per {} (its buffers were full, or it was late): figures in these intervals are lower bounds.",
                page.step.human()
            ),
            chart: chart(
                "Events lost",
                &format!("events per {}", page.step.human()),
                0.0,
                vec![line("events lost", s.get("lost"), 1.0)],
            ),
        });
    }
    figures.retain(|f| !f.chart.lines.is_empty());
    figures
}

fn process_figure(page: &Page) -> Figure {
    Figure {
        heading: "Processes using the most CPU".into(),
        about: format!(
            "The {} processes that ran longest in this window, from the scheduler's switches. 100 % is one CPU for the whole interval; a process with several threads can use more.",
            page.processes.len()
        ),
        chart: plot::Chart {
            title: "CPU per process, % of one CPU".into(),
            unit: "% of one CPU".into(),
            lines: page
                .processes
                .iter()
                .map(|p| plot::Line {
                    label: format!("{} ({})", p.comm, p.pid),
                    points: p.points.clone(),
                })
                .collect(),
            y_at_least: 10.0,
            step_ns: page.step.ns(),
        },
    }
}

const STYLE: &str = "
body { font-family: system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif; color: #1a1a1a; background: #fff; margin: 0; }
main { max-width: 1240px; margin: 0 auto; padding: 16px 20px 40px; }
h1 { font-size: 1.7em; margin: 0.2em 0; }
h2 { font-size: 1.3em; margin-top: 1.8em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
h3 { font-size: 1.05em; margin: 1.2em 0 0.2em; }
p.sub { color: #555; margin: 0 0 1em; }
p.about { color: #444; margin: 0.2em 0 0.4em; max-width: 60em; }
.verdict { display: flex; gap: 12px; flex-wrap: wrap; margin: 1em 0; }
.verdict div { border-radius: 6px; padding: 10px 14px; background: #f3f5f8; border-left: 5px solid #0072b2; }
.verdict div.warn { border-left-color: #d62728; background: #fdf1f0; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.93em; }
th, td { text-align: left; padding: 4px 10px; border-bottom: 1px solid #e4e4e4; vertical-align: top; }
th { background: #f6f6f6; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.facts th { background: none; width: 14em; }
code { font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace; font-size: 0.92em; background: #f3f3f3; padding: 0 3px; border-radius: 3px; }
figure { margin: 0 0 0.5em; }
figure svg { width: 100%; height: auto; display: block; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 18px; font-size: 0.9em; margin: 2px 0 0 64px; }
.legend span::before { content: ''; display: inline-block; width: 18px; height: 4px; margin-right: 6px; vertical-align: middle; background: var(--c); }
.legend span.band::before { height: 12px; background: rgba(214, 39, 40, 0.2); border: 1px solid rgba(214, 39, 40, 0.5); }
.flame { overflow-x: auto; border: 1px solid #eee; }
.flame object { display: block; }
footer { margin-top: 3em; color: #666; font-size: 0.9em; }
";

/// The page, as one string.
pub fn render(page: &Page, dir: &Path) -> Result<String> {
    let s = &page.summary;
    let (start, end) = page.window;
    // A copy of a bucket is named by its URL: the commands the page
    // suggests then read the bucket, not a cache that may hold no chunk.
    let dir_text = crate::remote::url_of_copy(dir).unwrap_or_else(|| dir.display().to_string());
    let same_day = when_text(start)[..10] == when_text(end - 1)[..10];
    let until = if same_day {
        format!("{} UTC", time_of_day(end))
    } else {
        when_text(end)
    };
    let range_text = format!("{} to {until}", when_text(start).trim_end_matches(" UTC"));
    let mut h = String::with_capacity(64 * 1024);
    let title = format!("What happened on {}, {range_text}", s.host);
    writeln!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"generator\" content=\"hindsight {}\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>",
        env!("CARGO_PKG_VERSION"),
        escape(&title)
    )?;
    writeln!(h, "<h1>What happened on {}</h1>", escape(&s.host))?;
    writeln!(
        h,
        "<p class=\"sub\">{} ({}), all times UTC. Recorded by hindsight on kernel {}.</p>",
        escape(&range_text),
        info::human_duration((end - start) as f64 / 1e9),
        escape(s.kernel.as_deref().unwrap_or("unknown"))
    )?;

    // The verdict first: what a reader came for.
    writeln!(h, "<div class=\"verdict\">")?;
    match page.incidents.len() {
        0 => writeln!(
            h,
            "<div>No incidents: nothing rose clearly above its usual level.</div>"
        )?,
        n => writeln!(
            h,
            "<div class=\"warn\"><b>{n} incident{}</b>: {} the system departed from its usual level (shaded red on the charts).</div>",
            if n == 1 { "" } else { "s" },
            if n == 1 { "a time when" } else { "times when" }
        )?,
    }
    if s.lost == 0 {
        writeln!(
            h,
            "<div>Nothing was lost: the recorder kept every event.</div>"
        )?;
    } else {
        writeln!(
            h,
            "<div class=\"warn\"><b>{} events lost</b> by the recorder: see <a href=\"#gaps\">what it could not see</a>.</div>",
            s.lost
        )?;
    }
    writeln!(h, "</div>")?;

    incidents_section(&mut h, page, &dir_text)?;

    writeln!(h, "<h2 id=\"system\">The system over time</h2>")?;
    writeln!(
        h,
        "<p class=\"about\">Each point is one {} interval.</p>",
        page.step.human()
    )?;
    let bands: Vec<plot::Band> = page
        .incidents
        .iter()
        .enumerate()
        .map(|(i, inc)| plot::Band {
            start: inc.start,
            end: inc.end,
            label: format!("{}", i + 1),
        })
        .collect();
    let figures = system_figures(page);
    if figures.is_empty() {
        writeln!(
            h,
            "<p>No system counters in this window (the <code>counters</code> event group was not recorded).</p>"
        )?;
    }
    for figure in &figures {
        figure_html(&mut h, figure, page.window, &bands)?;
    }

    writeln!(h, "<h2 id=\"processes\">Which processes used the CPU</h2>")?;
    if page.processes.is_empty() {
        writeln!(
            h,
            "<p>No scheduler events in this window (the <code>sched</code> event group was not recorded), so no CPU time per process.</p>"
        )?;
    } else {
        figure_html(&mut h, &process_figure(page), page.window, &bands)?;
        let window_s = (end - start) as f64 / 1e9;
        writeln!(
            h,
            "<table>\n<tr><th>Process</th><th>PID</th><th>CPU time</th><th>Average, % of one CPU</th></tr>"
        )?;
        for p in &page.processes {
            writeln!(
                h,
                "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{:.2} s</td><td class=\"num\">{:.1} %</td></tr>",
                escape(&p.comm),
                p.pid,
                p.total_ns as f64 / 1e9,
                100.0 * p.total_ns as f64 / 1e9 / window_s
            )?;
        }
        writeln!(h, "</table>")?;
    }

    flame_section(&mut h, page, &dir_text)?;
    recording_section(&mut h, page, &dir_text)?;

    writeln!(
        h,
        "<footer>Made by <code>hindsight report html</code> {} from the recording <code>{}</code>. \
         Every figure on this page is a query over the recording; <code>hindsight sql {}</code> asks your own.</footer>",
        env!("CARGO_PKG_VERSION"),
        escape(&dir_text),
        escape(&shell_word(&dir_text))
    )?;
    writeln!(h, "</main>\n</body>\n</html>")?;
    Ok(h)
}

/// `text` as one word for a POSIX shell, quoted only when it must be.
fn shell_word(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:=@".contains(c))
    {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

fn figure_html(
    h: &mut String,
    figure: &Figure,
    window: (i64, i64),
    bands: &[plot::Band],
) -> Result<()> {
    writeln!(h, "<h3>{}</h3>", escape(&figure.heading))?;
    writeln!(h, "<p class=\"about\">{}</p>", escape(&figure.about))?;
    writeln!(h, "<figure>")?;
    h.push_str(&plot::svg(&figure.chart, window, bands)?);
    write!(h, "<div class=\"legend\">")?;
    for (i, line) in figure.chart.lines.iter().enumerate() {
        write!(
            h,
            "<span style=\"--c: {}\">{}</span>",
            plot::color(i),
            escape(&line.label)
        )?;
    }
    if !bands.is_empty() {
        write!(h, "<span class=\"band\">incident</span>")?;
    }
    writeln!(h, "</div>\n</figure>")?;
    Ok(())
}

fn incidents_section(h: &mut String, page: &Page, dir: &str) -> Result<()> {
    writeln!(h, "<h2 id=\"incidents\">Incidents</h2>")?;
    writeln!(
        h,
        "<p class=\"about\">An incident is a stretch of {} intervals in which some measure (a counter, or one process's CPU, faults or waiting) rose far above its own usual level in this window: more than 5 times its typical variation above its median, and by more than a minimum that keeps noise out. \
         The same list, with every figure: <code>hindsight report timeline {} -i {}{}</code>.</p>",
        page.interval.human(),
        escape(&shell_word(dir)),
        page.interval.human(),
        window_flags(page)
    )?;
    if page.incidents.is_empty() {
        writeln!(h, "<p>No incidents in this window.</p>")?;
        return Ok(());
    }
    writeln!(
        h,
        "<table>\n<tr><th>#</th><th>From</th><th>To</th><th>Worst at</th><th>What rose (usual → seen)</th><th>Processes behind it</th></tr>"
    )?;
    // Times of day suffice when the window is one day: the header says which.
    let (start, end) = page.window;
    let same_day = when_text(start)[..10] == when_text(end - 1)[..10];
    let at = |ns| {
        if same_day {
            time_of_day(ns)
        } else {
            when_text(ns)
        }
    };
    for (i, inc) in page.incidents.iter().enumerate() {
        let mut rose = String::new();
        for m in inc.metrics.iter().take(4) {
            write!(
                rose,
                "{}: {} → {} {} <code>{}</code><br>",
                escape(&metric_words(m)),
                figure(m.baseline),
                figure(m.observed),
                escape(m.unit),
                escape(&m.metric)
            )?;
        }
        if inc.metrics.len() > 4 {
            write!(rose, "and {} more", inc.metrics.len() - 4)?;
        }
        let mut who = String::new();
        // A share that rounds to 0 % names a bystander, not a cause.
        for c in inc.contributors.iter().filter(|c| c.share >= 0.005) {
            write!(
                who,
                "{} ({}) {:.0} %<br>",
                escape(c.comm.as_deref().unwrap_or("?")),
                c.pid,
                100.0 * c.share
            )?;
            // Its busiest thread and its most sampled stack's leaf: where to look next.
            if let Some(t) = c.threads.first() {
                write!(
                    who,
                    "<small>thread {} ({}): {:.2} s on CPU, {:.2} s waiting to run, {:.2} s in D</small><br>",
                    escape(t.comm.as_deref().unwrap_or("?")),
                    t.tid,
                    t.on_cpu_s,
                    t.runq_wait_s,
                    t.offcpu_d_s
                )?;
            }
            if let Some(stack) = c.stacks.first() {
                let leaf = stack.frames.rsplit(';').next().unwrap_or_default();
                let weighed = match stack.time {
                    StackTime::OnCpu => "of its samples",
                    StackTime::OffCpuD => "of its time in D",
                };
                write!(
                    who,
                    "<small>{:.0} % {weighed} in <code>{}</code></small><br>",
                    100.0 * stack.share,
                    escape(leaf)
                )?;
            }
        }
        if who.is_empty() {
            who.push_str("no single process stood out");
        }
        writeln!(
            h,
            "<tr><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{rose}</td><td>{who}</td></tr>",
            i + 1,
            at(inc.start),
            at(inc.end),
            at(inc.peak),
        )?;
    }
    writeln!(h, "</table>")?;
    Ok(())
}

/// `--from`/`--to` for the commands the page suggests, when the window is
/// not the whole recording.
fn window_flags(page: &Page) -> String {
    let (start, end) = page.window;
    let whole = page
        .summary
        .start
        .as_deref()
        .and_then(|s| super::parse_time(s).ok())
        == Some(start)
        && page
            .summary
            .end
            .as_deref()
            .and_then(|s| super::parse_time(s).ok())
            .map(|last| last + 1)
            == Some(end);
    if whole {
        String::new()
    } else {
        format!(" --from {} --to {}", rfc3339(start), rfc3339(end))
    }
}

fn flame_section(h: &mut String, page: &Page, dir: &str) -> Result<()> {
    writeln!(h, "<h2 id=\"flamegraphs\">Where the CPU time went</h2>")?;
    let flags = window_flags(page);
    let dir = escape(&shell_word(dir));
    match &page.on_cpu {
        None => writeln!(
            h,
            "<p>CPU samples were not recorded (the <code>cpu</code> event group), so there is no on-CPU flame graph.</p>"
        )?,
        Some(graph) => {
            writeln!(
                h,
                "<p class=\"about\">A flame graph of the code running on the CPUs, sampled {} times a second: each box is a function, as wide as the share of samples in which it was on the stack; below it, the function that called it, down to the process name at the bottom. \
                 Point at a box to see its name and share; click to zoom. The same as a file: <code>hindsight flamegraph {dir} --on-cpu{flags} -f svg -o cpu.svg</code>.</p>",
                page.sample_frequency
            )?;
            flame_html(h, graph, "On-CPU flame graph")?;
        }
    }
    match &page.off_cpu {
        None => writeln!(
            h,
            "<p class=\"about\">No off-CPU flame graph (where threads waited): the recording was made without <code>--off-cpu-stacks</code>.</p>"
        )?,
        Some(graph) => {
            writeln!(h, "<h3>Where threads waited</h3>")?;
            writeln!(
                h,
                "<p class=\"about\">The code threads were in when they left the CPU to wait (for a lock, the disk, the network, a timer), as wide as the time they waited. \
                 The same as a file: <code>hindsight flamegraph {dir} --off-cpu{flags} -f svg -o off-cpu.svg</code>.</p>"
            )?;
            flame_html(h, graph, "Off-CPU flame graph")?;
        }
    }
    Ok(())
}

/// inferno's SVG size, from its root element.
fn svg_size(svg: &str) -> (u32, u32) {
    let root = svg
        .find("<svg")
        .and_then(|at| svg[at..].find('>').map(|end| &svg[at..at + end]))
        .unwrap_or("");
    let attribute = |name: &str| {
        root.split(&format!(" {name}=\""))
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .and_then(|v| v.parse::<f64>().ok())
            .map(|v| v as u32)
    };
    (
        attribute("width").unwrap_or(1200),
        attribute("height").unwrap_or(600),
    )
}

fn flame_html(h: &mut String, graph: &FlameGraph, title: &str) -> Result<()> {
    if graph.stacks == 0 {
        writeln!(h, "<p>No stacks in this window.</p>")?;
        return Ok(());
    }
    let (width, height) = svg_size(&graph.svg);
    let data = base64::engine::general_purpose::STANDARD.encode(&graph.svg);
    writeln!(
        h,
        "<div class=\"flame\"><object type=\"image/svg+xml\" data=\"data:image/svg+xml;base64,{data}\" width=\"{width}\" height=\"{height}\" aria-label=\"{}\">{}</object></div>",
        escape(title),
        escape(title)
    )?;
    Ok(())
}

fn recording_section(h: &mut String, page: &Page, dir: &str) -> Result<()> {
    let s = &page.summary;
    writeln!(h, "<h2 id=\"gaps\">What the recorder could not see</h2>")?;
    writeln!(h, "<ul>")?;
    if s.lost_by_source.is_empty() {
        writeln!(h, "<li>No events were lost.</li>")?;
    } else {
        writeln!(
            h,
            "<li>{} events were lost and {} timer rounds skipped over the whole recording. Figures that count events (CPU per process, context switches per process, waits) are lower bounds where events were lost; a skipped round only widens the next sample's interval:\n<table>\n<tr><th>What</th><th>Lost</th><th>When (UTC)</th></tr>",
            s.lost, s.late_rounds
        )?;
        for l in &s.lost_by_source {
            let first = super::parse_time(&l.first).map_or(l.first.clone(), when_text);
            let last = super::parse_time(&l.last).map_or(l.last.clone(), when_text);
            let when = if first == last {
                first
            } else {
                format!("{first} to {last}")
            };
            writeln!(
                h,
                "<tr><td>{} <code>{}</code></td><td class=\"num\">{}</td><td>{}</td></tr>",
                escape(&loss_words(&l.source)),
                escape(&l.source),
                l.lost,
                escape(&when)
            )?;
        }
        writeln!(h, "</table></li>")?;
    }
    for probe in &s.skipped_probes {
        writeln!(
            h,
            "<li>The probe <code>{}</code> could not be attached on this kernel: its events are missing.</li>",
            escape(probe)
        )?;
    }
    for r in &s.retired {
        writeln!(
            h,
            "<li>{} to {} was deleted to keep the recording within its disk budget ({}).</li>",
            escape(&r.from),
            escape(&r.to),
            escape(&r.reasons.join(", "))
        )?;
    }
    let groups = [
        "sched", "counters", "tasks", "cpu", "faults", "numa", "cache",
    ];
    let missing: Vec<&str> = groups
        .iter()
        .copied()
        .filter(|g| !page.events.iter().any(|e| e == g))
        .collect();
    if !missing.is_empty() {
        writeln!(
            h,
            "<li>Event groups not recorded: {}.</li>",
            missing
                .iter()
                .map(|g| format!("<code>{g}</code>"))
                .collect::<Vec<_>>()
                .join(", ")
        )?;
    }
    writeln!(
        h,
        "<li>Network traffic is not recorded by hindsight.</li>\n</ul>"
    )?;

    writeln!(h, "<h2 id=\"recording\">About the recording</h2>")?;
    writeln!(h, "<table class=\"facts\">")?;
    let mut fact =
        |name: &str, value: String| writeln!(h, "<tr><th>{name}</th><td>{value}</td></tr>");
    fact("Host", escape(&s.host))?;
    fact("Kernel", escape(s.kernel.as_deref().unwrap_or("unknown")))?;
    fact("CPUs", page.cpus.to_string())?;
    fact(
        "Recorded",
        match (&s.start, &s.end) {
            (Some(a), Some(b)) => format!(
                "{} to {}",
                super::parse_time(a).map_or(a.clone(), when_text),
                super::parse_time(b).map_or(b.clone(), when_text)
            ),
            _ => "no events".into(),
        },
    )?;
    fact(
        "This page",
        format!(
            "{} to {}",
            when_text(page.window.0),
            when_text(page.window.1)
        ),
    )?;
    fact("Event groups", escape(&page.events.join(", ")))?;
    fact(
        "Recorder",
        format!(
            "hindsight-record {}, {} session{}",
            escape(s.recorder_version.as_deref().unwrap_or("unknown")),
            s.sessions.len(),
            if s.sessions.len() == 1 { "" } else { "s" }
        ),
    )?;
    fact("Directory", format!("<code>{}</code>", escape(dir)))?;
    writeln!(h, "</table>")?;
    writeln!(
        h,
        "<p class=\"about\">Everything the recording holds, table by table: <code>hindsight info {}</code>.</p>",
        escape(&shell_word(dir))
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_are_round_and_scale_with_the_window() {
        let cases = [
            (60 * S, S, 10 * S),
            (3600 * S, 15 * S, 10 * S),
            (86400 * S, 300 * S, 300 * S),
            (7 * 86400 * S, 3600 * S, 1800 * S),
        ];
        for (window, step, interval) in cases {
            assert_eq!(plot_step(window).ns(), step, "step for {window}");
            assert_eq!(
                incident_interval(window).ns(),
                interval,
                "interval for {window}"
            );
        }
    }

    #[test]
    fn text_is_escaped_and_shell_words_quoted() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(shell_word("/tmp/rec"), "/tmp/rec");
        assert_eq!(shell_word("my rec"), "'my rec'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
    }

    #[test]
    fn losses_and_metrics_read_as_words() {
        assert_eq!(
            loss_words("ring_full:sched_switch"),
            "sched_switch events dropped: the kernel's buffer was full"
        );
        assert_eq!(loss_words("mystery"), "mystery");
        let m = Departure {
            metric: "process_cpu".into(),
            unit: "% of one CPU",
            pid: Some(77),
            comm: Some("hog".into()),
            baseline: 0.0,
            normal_max: 25.0,
            observed: 49.5,
            score: 2.0,
            peak: 0,
            new: true,
        };
        assert_eq!(metric_words(&m), "CPU used by hog (77)");
    }

    #[test]
    fn inferno_sizes_are_read_from_the_root_element() {
        let svg = "<?xml version=\"1.0\"?><svg version=\"1.1\" width=\"1200\" height=\"486\" onload=\"init(evt)\">";
        assert_eq!(svg_size(svg), (1200, 486));
        assert_eq!(svg_size("nonsense"), (1200, 600));
    }
}
