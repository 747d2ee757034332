//! `report timeline`: the intervals where the system departed from its own
//! baseline, merged into incidents, in time order.
//!
//! SQL statements ([`statements`], one per kind of metric) compute every
//! metric of [`METRICS`] per interval in long form (`interval_start`, `metric`, `pid`, `comm`,
//! `value`) from the tables and the helper views (`counter_rate`,
//! `cpu_time`, `off_cpu`, `runq_latency`); [`super::baseline`] finds the
//! departures and incidents; this module prints them. `--format json` is a
//! contract for scripts: one JSON array of incidents, each with `start`,
//! `end`, `peak` (RFC 3339 UTC), `metrics` and `contributors`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use anyhow::Result;
use arrow::array::{Array, RecordBatch};
use datafusion::prelude::SessionContext;
use hindsight_schemas::time::rfc3339;
use serde_json::{json, Value};

use super::baseline::{self, Incident, MetricSpec, Sample, StackShare, StackTime, ThreadShare};
use super::{pid_list, process_comm, task_deltas, timestamp, Env, SessionFacts, ThreadTime};
use crate::columns::{f64s, i32s, i64s, opt_string, optional_i32s, optional_strings, strings};
use crate::human::{self, Layout, Table};
use crate::output::Format;
use crate::{catalog, flamegraph};

const fn system(
    name: &'static str,
    unit: &'static str,
    floor: f64,
    events: bool,
    kind: &'static str,
) -> MetricSpec {
    MetricSpec {
        name,
        unit,
        per_process: false,
        zero_when_missing: events,
        floor,
        kind,
    }
}

const fn process(
    name: &'static str,
    unit: &'static str,
    floor: f64,
    kind: &'static str,
) -> MetricSpec {
    MetricSpec {
        name,
        unit,
        per_process: true,
        zero_when_missing: true,
        floor,
        kind,
    }
}

/// The kinds of incident, each the evidence of its metrics in [`METRICS`]
/// (and [`baseline::NEW_PROCESS`]: a program with no history on the CPU).
pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const CACHE_THRASH: &str = "cache_thrash";
pub const IO: &str = "io";
pub const NUMA: &str = "numa";
pub const LOST: &str = "lost";
/// An incident the recorder itself led (its first contributor): its
/// start-up, reading the symbols of every program already running from
/// disk, or its own overload. Shown, and told from the system's doing.
pub const RECORDER: &str = "recorder";

/// Every metric the timeline watches, with the least rise that counts.
/// System counters keep their kernel names (`/proc/vmstat`, `/proc/stat`).
pub const METRICS: &[MetricSpec] = &[
    // Reclaim by kswapd with major faults is the page cache thrashing;
    // direct reclaim and memory pressure stall tasks on allocation.
    system("pgscan_kswapd", "pages/s", 1000.0, false, CACHE_THRASH),
    system("pgscan_direct", "pages/s", 100.0, false, MEMORY),
    system("pgsteal_kswapd", "pages/s", 1000.0, false, CACHE_THRASH),
    system("pgsteal_direct", "pages/s", 100.0, false, MEMORY),
    system("pgfault", "faults/s", 20_000.0, false, MEMORY),
    system("pgmajfault", "faults/s", 100.0, false, CACHE_THRASH),
    system("pgmigrate_success", "pages/s", 100.0, false, NUMA),
    system("numa_pages_migrated", "pages/s", 100.0, false, NUMA),
    system("numa_miss", "pages/s", 1000.0, false, NUMA),
    system("ctxt", "switches/s", 5000.0, false, CPU),
    system("cpu_busy", "% of all CPUs", 25.0, false, CPU),
    system("iowait", "% of all CPUs", 10.0, false, IO),
    system("psi_cpu_some", "% of time", 10.0, false, CPU),
    system("psi_memory_some", "% of time", 5.0, false, MEMORY),
    system("psi_memory_full", "% of time", 5.0, false, MEMORY),
    system("psi_io_some", "% of time", 10.0, false, IO),
    system("runq_wait", "ms/s", 200.0, true, CPU),
    system("offcpu_d", "ms/s", 200.0, true, IO),
    system("lost", "events", 1.0, true, LOST),
    process("process_cpu", "% of one CPU", 25.0, CPU),
    process("process_faults", "faults/s", 5000.0, MEMORY),
    process("process_runq_wait", "ms/s", 100.0, CPU),
    process("process_offcpu_d", "ms/s", 200.0, IO),
    process("process_numa_migrated", "pages/s", 100.0, NUMA),
];

const VMSTAT: &[&str] = &[
    "pgscan_kswapd",
    "pgscan_direct",
    "pgsteal_kswapd",
    "pgsteal_direct",
    "pgfault",
    "pgmajfault",
    "pgmigrate_success",
    "numa_pages_migrated",
    "numa_miss",
];

/// The /proc/stat CPU time fields that add up to all the time: busy is all
/// but `idle` and `iowait` (guest time is already inside `user`).
pub const CPU_TICKS: &[&str] = &[
    "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal",
];

const PSI: &[&str] = &[
    "cpu_some_total",
    "memory_some_total",
    "memory_full_total",
    "io_some_total",
];

/// Parses `--metric`: a name of [`METRICS`], or an error listing them.
pub fn parse_metric(name: &str) -> Result<String, String> {
    if METRICS.iter().any(|m| m.name == name) {
        return Ok(name.to_owned());
    }
    let names: Vec<&str> = METRICS.iter().map(|m| m.name).collect();
    Err(format!("no such metric; one of {}", names.join(", ")))
}

/// Parses `--sensitivity`: a number above 0.
pub fn parse_sensitivity(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s > 0.0 && s.is_finite() => Ok(s),
        _ => Err("a number above 0, e.g. 0.5, 1 or 2".into()),
    }
}

pub(super) fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How far before the reported range the timeline reads intervals for its
/// baselines: the trailing 3 hours, and the same time of day a day before
/// (see [`baseline`]), so a range narrowed to an incident is judged against
/// what was normal before it.
pub const HISTORY_NS: i64 = baseline::DAY_NS + baseline::SEASON_HALF_NS;

/// The statements: every metric per interval, in long form, from
/// [`HISTORY_NS`] before the range (where it has a start) to its end, one
/// statement per kind of metric, run one after another ([`query`]). One
/// statement of them all held every sort of every view at once: DataFusion
/// shares the memory limit fairly among them, and with some forty sorts a
/// share could not hold one batch, so two minutes of a real recording
/// failed at 1 GiB.
pub fn statements(env: &Env) -> Vec<String> {
    let mut with_history = env.clone();
    with_history.from = env.from.map(|from| from - HISTORY_NS);
    let env = &with_history;
    let h = env.h();
    let iv_s = env.interval.ns() as f64 / 1e9;
    let events = env.event_bounds("ts");
    let window = (env.from.map(|from| env.interval.align(from)), env.to);
    let ctes = format!(
        "WITH counter_bins AS (  -- system-wide counters per interval: change, and the time it covers
  SELECT {h}{bin} AS interval_start, source, name, sum(delta) AS delta, sum(seconds) AS seconds
  FROM counter_rate
  WHERE scope IS NULL AND {events} AND (
    (source = 'vmstat' AND name IN ({vmstat}))
    OR (source = 'stat' AND name IN ({ticks}, 'ctxt'))
    OR (source = 'pressure' AND name IN ({psi})))
  GROUP BY {h}interval_start, source, name
),
ticks AS (  -- CPU time split of the total line
  SELECT {h}interval_start, sum(delta) AS total,
    sum(CASE WHEN name NOT IN ('idle', 'iowait') THEN delta ELSE 0 END) AS busy,
    sum(CASE WHEN name = 'iowait' THEN delta ELSE 0 END) AS iowait
  FROM counter_bins WHERE source = 'stat' AND name <> 'ctxt'
  GROUP BY {h}interval_start
),
process_cpu AS (  -- on-CPU time per process
  SELECT {h}interval_start, pid, comm, 100.0 * ns / {iv_ns} AS value FROM ({on_cpu}) t
),
process_runq AS (  -- run-queue wait per process
  SELECT {h}interval_start, pid, comm, ns / 1e6 / {iv_s} AS value FROM ({runq}) t
),
process_offcpu AS (  -- uninterruptible (D) off-CPU time per process
  SELECT {h}interval_start, pid, comm, ns / 1e6 / {iv_s} AS value FROM ({offcpu_d}) t
),
{task_deltas},
process_faults AS (  -- minor and major faults per process (task_stat snapshots)
  SELECT {h}interval_start, pid, max(comm) AS comm,
    -- over the bin at least: a process that lived 50 ms is not 50 ms of faulting at its rate
    sum(minflt + majflt) / greatest(max(seconds), {step_seconds:?}) AS value
  FROM task_delta WHERE seconds > 0 AND {interval_bounds}
  GROUP BY {h}interval_start, pid
),
process_migrated AS (  -- pages migrated by each process (numa_event): NUMA balancing moves a
  -- process's pages in its own hinting faults, so the storm is named after whose memory moved
  SELECT {h}{bin} AS interval_start, pid, {process_comm} AS comm,
    sum(pages_succeeded) / {iv_s:?} AS value
  FROM numa_event WHERE CAST(kind AS VARCHAR) = 'migrate_pages' AND {events}
  GROUP BY {h}interval_start, pid
),
{lost}",
        bin = env.bin("ts"),
        process_comm = process_comm("ts"),
        on_cpu = env.thread_time_sql(ThreadTime::OnCpu, env.interval, window),
        runq = env.thread_time_sql(ThreadTime::Runq, env.interval, window),
        offcpu_d = env.thread_time_sql(ThreadTime::OffCpuD, env.interval, window),
        vmstat = quoted(VMSTAT),
        ticks = quoted(CPU_TICKS),
        psi = quoted(PSI),
        iv_ns = env.interval.ns(),
        step_seconds = env.interval.ns() as f64 / 1e9,
        task_deltas = task_deltas(env),
        interval_bounds = env.interval_bounds("interval_start"),
        lost = env.lost_cte(),
    );
    // (the one metric a statement gives, if it gives one, and its rows)
    let system = |metric: &str, rows: &str| {
        (
            Some(metric.to_owned()),
            format!("SELECT {h}interval_start, '{metric}' AS metric, CAST(NULL AS INT) AS pid, CAST(NULL AS VARCHAR) AS comm, {rows}"),
        )
    };
    let per_process = |metric: &str, cte: &str| {
        (
            Some(metric.to_owned()),
            format!("SELECT {h}interval_start, '{metric}' AS metric, pid, CAST(comm AS VARCHAR) AS comm, value FROM {cte}"),
        )
    };
    let parts = [
        (
            None,
            format!(
                "SELECT {h}interval_start,
    CASE WHEN source = 'pressure' THEN 'psi_' || replace(name, '_total', '') ELSE name END AS metric,
    CAST(NULL AS INT) AS pid, CAST(NULL AS VARCHAR) AS comm,
    CASE WHEN source = 'pressure' THEN 100 * delta / 1e6 / seconds ELSE delta / seconds END AS value
  FROM counter_bins WHERE seconds > 0 AND (source <> 'stat' OR name = 'ctxt')"
            ),
        ),
        system("cpu_busy", "100.0 * busy / total AS value FROM ticks WHERE total > 0"),
        system("iowait", "100.0 * iowait / total AS value FROM ticks WHERE total > 0"),
        system("runq_wait", &format!("sum(value) AS value FROM process_runq GROUP BY {h}interval_start")),
        system("offcpu_d", &format!("sum(value) AS value FROM process_offcpu GROUP BY {h}interval_start")),
        system("lost", "CAST(lost AS DOUBLE) AS value FROM lost"),
        per_process("process_cpu", "process_cpu"),
        per_process("process_runq_wait", "process_runq"),
        per_process("process_offcpu_d", "process_offcpu"),
        per_process("process_faults", "process_faults"),
        per_process("process_numa_migrated", "process_migrated"),
    ];
    parts
        .into_iter()
        .filter(|(metric, _)| match (&env.metric, metric) {
            (Some(wanted), Some(given)) => wanted == given,
            _ => true,
        })
        .map(|(metric, rows)| match (&env.metric, metric) {
            (Some(wanted), None) => {
                format!("{ctes}\nSELECT * FROM ({rows}) t WHERE metric = '{wanted}'")
            }
            _ => format!("{ctes}\n{rows}"),
        })
        .collect()
}

/// The statements as one text, for `--show-sql`.
pub fn sql(env: &Env) -> String {
    statements(env).join(";\n\n")
}

/// Every statement's rows, the statements run one after another.
pub async fn query(ctx: &SessionContext, env: &Env) -> Result<Vec<RecordBatch>> {
    let mut batches = Vec::new();
    for statement in statements(env) {
        batches.extend(
            catalog::query_batches(ctx, &statement)
                .await
                .map_err(catalog::one_line)?,
        );
    }
    Ok(batches)
}

/// The SQL's rows as samples, read from the columns (a day at 10 s is
/// hundreds of thousands of rows: no detour through JSON).
pub fn samples(batches: &[RecordBatch]) -> Result<Vec<Sample>> {
    let mut out = Vec::new();
    for batch in batches {
        let (start, metric, value) = (
            i64s(batch, "interval_start")?,
            strings(batch, "metric")?,
            f64s(batch, "value")?,
        );
        let host = optional_strings(batch, "host")?;
        let pid = optional_i32s(batch, "pid")?;
        let comm = optional_strings(batch, "comm")?;
        for row in 0..batch.num_rows() {
            if !(value.is_valid(row) && start.is_valid(row)) {
                continue;
            }
            out.push(Sample {
                host: opt_string(&host, row),
                interval: start.value(row),
                metric: metric.value(row).to_owned(),
                pid: pid
                    .as_ref()
                    .filter(|a| a.is_valid(row))
                    .map(|a| a.value(row)),
                comm: opt_string(&comm, row),
                value: value.value(row),
            });
        }
    }
    // The statements' rows come in no order; the incidents' sums are
    // made in this one, so the same recording always reads the same.
    out.sort_by(|a, b| {
        (&a.host, a.interval, &a.metric, a.pid).cmp(&(&b.host, b.interval, &b.metric, b.pid))
    });
    Ok(out)
}

/// Looks up each contributor's busiest threads and most sampled stacks
/// in its incident ([`add_threads`], [`add_stacks`]).
pub async fn add_details(
    ctx: &SessionContext,
    env: &Env,
    incidents: &mut [Incident],
) -> Result<()> {
    add_threads(ctx, env, incidents).await?;
    add_stacks(ctx, env, incidents).await
}

/// The incidents' contributing processes, and the time from the first
/// incident's start to the last one's end; None without a contributor.
fn contributors_span(incidents: &[Incident]) -> Option<(Vec<i32>, i64, i64)> {
    let pids: BTreeSet<i32> = incidents
        .iter()
        .flat_map(|i| i.contributors.iter().map(|c| c.pid))
        .filter(|pid| *pid > 0)
        .collect();
    let first = incidents.iter().map(|i| i.start).min()?;
    let end = incidents.iter().map(|i| i.end).max()?;
    (!pids.is_empty()).then(|| (pids.into_iter().collect(), first, end))
}

/// Threads shown per contributor.
const THREADS_PER_CONTRIBUTOR: usize = 3;

/// (host, pid, tid) -> interval -> (on-CPU, run-queue, D-state ns; name)
type ThreadTimes = BTreeMap<(Option<String>, i32, i32), BTreeMap<i64, ([i64; 3], Option<String>)>>;

/// Fills in each contributor's threads that did the most in its incident:
/// their on-CPU, run-queue and D-state time there, ranked by the time of
/// the contributor's metric (on-CPU time for faults and page migrations,
/// which are recorded per process). Three statements, one per kind of
/// time, over the contributors' processes from the first incident's start
/// to the last one's end.
async fn add_threads(ctx: &SessionContext, env: &Env, incidents: &mut [Incident]) -> Result<()> {
    let Some((pids, first, end)) = contributors_span(incidents) else {
        return Ok(());
    };
    let mut times = ThreadTimes::new();
    let kinds = [ThreadTime::OnCpu, ThreadTime::Runq, ThreadTime::OffCpuD];
    for (k, kind) in kinds.into_iter().enumerate() {
        let statement =
            env.thread_time_by_tid_sql(kind, env.interval, (Some(first), Some(end)), &pids);
        let batches = catalog::query_batches(ctx, &statement)
            .await
            .map_err(catalog::one_line)?;
        for batch in &batches {
            let (start, pid, tid, ns) = (
                i64s(batch, "interval_start")?,
                i32s(batch, "pid")?,
                i32s(batch, "tid")?,
                i64s(batch, "ns")?,
            );
            let (host, comm) = (
                optional_strings(batch, "host")?,
                optional_strings(batch, "comm")?,
            );
            for row in 0..batch.num_rows() {
                let entry = times
                    .entry((opt_string(&host, row), pid.value(row), tid.value(row)))
                    .or_default()
                    .entry(start.value(row))
                    .or_default();
                entry.0[k] += ns.value(row);
                entry.1 = entry.1.take().or_else(|| opt_string(&comm, row));
            }
        }
    }
    for incident in incidents {
        for c in &mut incident.contributors {
            let ranked = match c.metric.as_str() {
                "process_runq_wait" => 1,
                "process_offcpu_d" => 2,
                _ => 0,
            };
            let host = &incident.host;
            let mut threads: Vec<ThreadShare> = times
                .range((host.clone(), c.pid, i32::MIN)..=(host.clone(), c.pid, i32::MAX))
                .filter_map(|((_, _, tid), by_interval)| {
                    let inside = by_interval.range(incident.start..incident.end);
                    let mut ns = [0i64; 3];
                    let mut comm = None;
                    for (times, name) in inside.map(|(_, v)| v) {
                        (0..3).for_each(|k| ns[k] += times[k]);
                        comm = name.clone().or(comm);
                    }
                    (ns[ranked] > 0).then(|| ThreadShare {
                        tid: *tid,
                        comm,
                        on_cpu_s: ns[0] as f64 / 1e9,
                        runq_wait_s: ns[1] as f64 / 1e9,
                        offcpu_d_s: ns[2] as f64 / 1e9,
                    })
                })
                .collect();
            let time = |t: &ThreadShare| [t.on_cpu_s, t.runq_wait_s, t.offcpu_d_s][ranked];
            threads.sort_by(|a, b| time(b).total_cmp(&time(a)).then(a.tid.cmp(&b.tid)));
            threads.truncate(THREADS_PER_CONTRIBUTOR);
            c.threads = threads;
        }
    }
    Ok(())
}

/// Stacks shown per contributor.
const STACKS_PER_CONTRIBUTOR: usize = 2;

/// (host, pid) -> interval -> stack (None: not read) -> weight
type StackWeights = BTreeMap<(Option<String>, i32), BTreeMap<i64, BTreeMap<Option<i64>, i64>>>;

/// The rows of a statement giving `[host,] interval_start, pid, stack_id,
/// weight`.
async fn stack_weights(ctx: &SessionContext, statement: &str) -> Result<StackWeights> {
    let mut weights = StackWeights::new();
    for batch in &catalog::query_batches(ctx, statement)
        .await
        .map_err(catalog::one_line)?
    {
        let (start, pid, stack, weight) = (
            i64s(batch, "interval_start")?,
            i32s(batch, "pid")?,
            i64s(batch, "stack_id")?,
            i64s(batch, "weight")?,
        );
        let host = optional_strings(batch, "host")?;
        for row in 0..batch.num_rows() {
            *weights
                .entry((opt_string(&host, row), pid.value(row)))
                .or_default()
                .entry(start.value(row))
                .or_default()
                .entry(stack.is_valid(row).then(|| stack.value(row)))
                .or_default() += weight.value(row);
        }
    }
    Ok(weights)
}

/// The heaviest stacks of process `pid` of `host` in the intervals from
/// `start` to before `end`, and the weight of all its stacks there (those
/// not read included); None where none of its stacks was read.
fn top_stacks(
    weights: &StackWeights,
    (host, pid): (&Option<String>, i32),
    start: i64,
    end: i64,
) -> Option<(Vec<(i64, i64)>, i64)> {
    let mut by_stack: BTreeMap<Option<i64>, i64> = BTreeMap::new();
    let by_interval = weights.get(&(host.clone(), pid))?;
    for stacks in by_interval.range(start..end).map(|(_, v)| v) {
        for (stack, n) in stacks {
            *by_stack.entry(*stack).or_default() += n;
        }
    }
    let total: i64 = by_stack.values().sum();
    let mut top: Vec<(i64, i64)> = by_stack
        .into_iter()
        .filter_map(|(stack, n)| stack.map(|s| (s, n)))
        .collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    top.truncate(STACKS_PER_CONTRIBUTOR);
    (!top.is_empty()).then_some((top, total))
}

/// Fills in each contributor's heaviest stacks in its incident, where the
/// recording has them: its most sampled on-CPU stacks (`cpu_sample`) and,
/// for a process that departed in D-state time, the stacks it blocked in,
/// weighed by their time in D (`off_cpu` with `--off-cpu-stacks`; a sleep
/// counts in the interval it began in), the kind of the metric it
/// contributed most to first. A statement per kind of weight, a last one names
/// the stacks shown. Of several recordings too: each recorder's run
/// numbers its stacks and frames from a random start of its own, so an id
/// names one stack or frame across hosts.
async fn add_stacks(ctx: &SessionContext, env: &Env, incidents: &mut [Incident]) -> Result<()> {
    let Some((pids, first, end)) = contributors_span(incidents) else {
        return Ok(());
    };
    let h = env.h();
    let bounds = format!("ts >= {} AND ts < {}", timestamp(first), timestamp(end));
    let on_cpu = stack_weights(
        ctx,
        &format!(
            "SELECT {h}{bin} AS interval_start, pid, stack_id, count(*) AS weight FROM cpu_sample
  WHERE pid IN ({pids}) AND {bounds}
  GROUP BY {h}interval_start, pid, stack_id",
            bin = env.bin("ts"),
            pids = pid_list(&pids),
        ),
    )
    .await?;
    // The processes that departed in D state: the stacks they blocked in
    // are shown whatever metric they contributed most to (a stalled
    // writer's CPU can score a hair above its D time).
    let departed_in_d = |incident: &Incident, pid: i32| {
        incident
            .metrics
            .iter()
            .any(|m| m.metric == "process_offcpu_d" && m.pid == Some(pid))
    };
    let blocked: BTreeSet<i32> = incidents
        .iter()
        .flat_map(|i| i.contributors.iter().filter(|c| departed_in_d(i, c.pid)))
        .map(|c| c.pid)
        .collect();
    let off_cpu_d = if blocked.is_empty() {
        StackWeights::new()
    } else {
        stack_weights(
            ctx,
            &format!(
                "SELECT {h}{bin} AS interval_start, pid, stack_id, sum(dur_ns) AS weight FROM {intervals}
  WHERE state = 'D' AND pid IN ({pids}) AND {bounds}
  GROUP BY {h}interval_start, pid, stack_id",
                bin = env.bin("ts"),
                intervals = env.paired("off_cpu"),
                pids = pid_list(&blocked),
            ),
        )
        .await?
    };
    // (incident, contributor) -> per kind of time, the contributor's own
    // metric's first: its top (stack, weight) and the weight of all its
    // stacks of that kind
    type Chosen = BTreeMap<(usize, usize), Vec<(StackTime, Vec<(i64, i64)>, i64)>>;
    let mut chosen = Chosen::new();
    for (i, incident) in incidents.iter().enumerate() {
        for (c, contributor) in incident.contributors.iter().enumerate() {
            let top = |weights: &StackWeights, time: StackTime| {
                let process = (&incident.host, contributor.pid);
                top_stacks(weights, process, incident.start, incident.end)
                    .map(|(top, total)| (time, top, total))
            };
            let blocked_in = departed_in_d(incident, contributor.pid)
                .then(|| top(&off_cpu_d, StackTime::OffCpuD))
                .flatten();
            let ran = top(&on_cpu, StackTime::OnCpu);
            let kinds: Vec<_> = if contributor.metric == "process_offcpu_d" {
                [blocked_in, ran].into_iter().flatten().collect()
            } else {
                [ran, blocked_in].into_iter().flatten().collect()
            };
            if !kinds.is_empty() {
                chosen.insert((i, c), kinds);
            }
        }
    }
    let ids: BTreeSet<i64> = chosen
        .values()
        .flatten()
        .flat_map(|(_, top, _)| top.iter().map(|t| t.0))
        .collect();
    if ids.is_empty() {
        return Ok(());
    }
    let values: Vec<String> = ids.iter().map(|id| format!("({id})")).collect();
    let statement = format!(
        "WITH chosen AS (SELECT column1 AS stack_id FROM (VALUES {values})),
{named}
SELECT stack_id, string_agg(name, ';' ORDER BY depth DESC) AS frames FROM named GROUP BY stack_id",
        values = values.join(", "),
        named = flamegraph::stack_frames_ctes("chosen"),
    );
    let mut frames: BTreeMap<i64, String> = BTreeMap::new();
    for batch in &catalog::query_batches(ctx, &statement)
        .await
        .map_err(catalog::one_line)?
    {
        let (stack, names) = (i64s(batch, "stack_id")?, optional_strings(batch, "frames")?);
        for row in 0..batch.num_rows() {
            if let Some(name) = opt_string(&names, row) {
                frames.insert(stack.value(row), name);
            }
        }
    }
    for ((i, c), kinds) in chosen {
        incidents[i].contributors[c].stacks = kinds
            .into_iter()
            .flat_map(|(time, top, total)| {
                top.into_iter()
                    .map(move |(stack, weight)| (time, stack, weight, total))
            })
            .map(|(time, stack, weight, total)| StackShare {
                time,
                weight,
                share: weight as f64 / total as f64,
                frames: frames
                    .get(&stack)
                    .cloned()
                    .unwrap_or_else(|| "[unknown]".into()),
            })
            .collect();
    }
    Ok(())
}

/// The incidents of `samples` in the reported range; what came before it
/// is history for the baselines.
pub fn incidents(samples: &[Sample], env: &Env) -> Vec<Incident> {
    let from = env.from.map(|from| env.interval.align(from));
    let mut incidents =
        baseline::incidents(samples, METRICS, env.interval.ns(), from, env.sensitivity);
    for incident in &mut incidents {
        if led_by_the_recorder(incident, &env.sessions) {
            incident.kinds.insert(0, RECORDER);
        }
    }
    incidents
}

/// The incident's first contributor is the recorder of its host that was
/// running then (the latest session started before the incident ended: a
/// pid is reused across sessions).
fn led_by_the_recorder(incident: &Incident, sessions: &[SessionFacts]) -> bool {
    let Some(first) = incident.contributors.first() else {
        return false;
    };
    sessions
        .iter()
        .filter(|s| incident.host.as_ref().is_none_or(|host| *host == s.host))
        .filter(|s| s.start < incident.end)
        .max_by_key(|s| s.start)
        .is_some_and(|s| s.recorder_pid == Some(first.pid))
}

/// An incident as the JSON contract prints it.
pub fn incident_json(incident: &Incident) -> Value {
    let metrics: Vec<Value> = incident
        .metrics
        .iter()
        .map(|m| {
            json!({
                "metric": m.metric,
                "unit": m.unit,
                "pid": m.pid,
                "comm": m.comm,
                "baseline": round(m.baseline),
                "normal_max": round(m.normal_max),
                "observed": round(m.observed),
                "score": round(m.score),
                "peak": rfc3339(m.peak),
                "new": m.new,
            })
        })
        .collect();
    let contributors: Vec<Value> = incident
        .contributors
        .iter()
        .map(|c| {
            let threads: Vec<Value> = c
                .threads
                .iter()
                .map(|t| {
                    json!({"tid": t.tid, "comm": t.comm, "on_cpu_s": round(t.on_cpu_s),
                           "runq_wait_s": round(t.runq_wait_s), "offcpu_d_s": round(t.offcpu_d_s)})
                })
                .collect();
            let stacks: Vec<Value> = c
                .stacks
                .iter()
                .map(|s| {
                    let mut v = json!({"share": round(s.share), "frames": s.frames});
                    match s.time {
                        StackTime::OnCpu => v["samples"] = json!(s.weight),
                        StackTime::OffCpuD => v["offcpu_d_s"] = json!(round(s.weight as f64 / 1e9)),
                    }
                    v
                })
                .collect();
            json!({"pid": c.pid, "comm": c.comm, "metric": c.metric, "share": round(c.share),
                   "score": round(c.score), "threads": threads, "stacks": stacks})
        })
        .collect();
    let counters: Vec<&str> = incident
        .metrics
        .iter()
        .filter(|m| m.pid.is_none())
        .map(|m| m.metric.as_str())
        .collect();
    let mut v = json!({
        "start": rfc3339(incident.start),
        "end": rfc3339(incident.end),
        "peak": rfc3339(incident.peak),
        "kinds": incident.kinds,
        "metrics": metrics,
        "contributors": contributors,
        "counters": counters,
    });
    if let Some(host) = &incident.host {
        v["host"] = json!(host);
    }
    v
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Prints `incidents` in `format`: JSON, one array; CSV, one row per
/// departed metric and per contributor; a table, a block per incident.
pub fn write(
    incidents: &[Incident],
    format: Format,
    layout: &Layout,
    out: &mut impl Write,
) -> Result<()> {
    match format {
        Format::Json => {
            let all: Vec<Value> = incidents.iter().map(incident_json).collect();
            serde_json::to_writer(&mut *out, &Value::Array(all))?;
            writeln!(out)?;
        }
        Format::Csv => {
            writeln!(
                out,
                "incident,host,start,end,peak,kinds,row,metric,unit,pid,comm,baseline,normal_max,observed,score,share,tid,on_cpu_s,runq_wait_s,offcpu_d_s,stack"
            )?;
            for (i, inc) in incidents.iter().enumerate() {
                let head = format!(
                    "{},{},{},{},{},{}",
                    i + 1,
                    csv(inc.host.as_deref().unwrap_or("")),
                    rfc3339(inc.start),
                    rfc3339(inc.end),
                    rfc3339(inc.peak),
                    csv(&inc.kinds.join(" "))
                );
                for m in &inc.metrics {
                    writeln!(
                        out,
                        "{head},metric,{},{},{},{},{},{},{},{},,,,,,",
                        m.metric,
                        csv(m.unit),
                        m.pid.map_or(String::new(), |p| p.to_string()),
                        csv(m.comm.as_deref().unwrap_or("")),
                        round(m.baseline),
                        round(m.normal_max),
                        round(m.observed),
                        round(m.score)
                    )?;
                }
                for c in &inc.contributors {
                    writeln!(
                        out,
                        "{head},contributor,{},,{},{},,,,{},{},,,,,",
                        c.metric,
                        c.pid,
                        csv(c.comm.as_deref().unwrap_or("")),
                        round(c.score),
                        round(c.share)
                    )?;
                    for t in &c.threads {
                        writeln!(
                            out,
                            "{head},thread,{},s,{},{},,,,,,{},{},{},{},",
                            c.metric,
                            c.pid,
                            csv(t.comm.as_deref().unwrap_or("")),
                            t.tid,
                            round(t.on_cpu_s),
                            round(t.runq_wait_s),
                            round(t.offcpu_d_s)
                        )?;
                    }
                    for st in &c.stacks {
                        let (unit, weight) = match st.time {
                            StackTime::OnCpu => ("samples", st.weight as f64),
                            StackTime::OffCpuD => ("s in D", round(st.weight as f64 / 1e9)),
                        };
                        writeln!(
                            out,
                            "{head},stack,{},{unit},{},{},,,{weight},,{},,,,,{}",
                            c.metric,
                            c.pid,
                            csv(c.comm.as_deref().unwrap_or("")),
                            round(st.share),
                            csv(&st.frames)
                        )?;
                    }
                }
            }
        }
        Format::Table => {
            if incidents.is_empty() {
                writeln!(out, "no incidents: nothing departed from the baseline")?;
            }
            for (i, inc) in incidents.iter().enumerate() {
                let host = inc
                    .host
                    .as_deref()
                    .map(|h| format!("{h}  "))
                    .unwrap_or_default();
                writeln!(
                    out,
                    "{}",
                    layout.heading(&format!(
                        "incident {}  {host}{} .. {}  peak {}  {}",
                        i + 1,
                        rfc3339(inc.start),
                        rfc3339(inc.end),
                        rfc3339(inc.peak),
                        inc.kinds.join(", ")
                    ))
                )?;
                let mut table = Table::new(vec![
                    human::label("METRIC"),
                    human::figure("PID"),
                    human::name("COMM", 16),
                    human::figure("BASELINE"),
                    human::figure("NORMAL<="),
                    human::figure("OBSERVED"),
                    human::figure("SCORE"),
                    human::label("UNIT"),
                ])
                .indent(2);
                for m in &inc.metrics {
                    table.row(vec![
                        m.metric.clone(),
                        m.pid.map_or("-".into(), |p| p.to_string()),
                        m.comm.clone().unwrap_or_else(|| "-".into()),
                        human::rate(Some(m.baseline)),
                        human::rate(Some(m.normal_max)),
                        human::rate(Some(m.observed)),
                        format!("{:.1}", m.score),
                        m.unit.to_owned(),
                    ]);
                }
                table.write(layout, out)?;
                if !inc.contributors.is_empty() {
                    writeln!(out, "  top contributors:")?;
                    for c in &inc.contributors {
                        writeln!(
                            out,
                            "  {:>5.1}%  pid {:<8} {:<16} ({}{})",
                            100.0 * c.share,
                            c.pid,
                            c.comm.as_deref().unwrap_or("-"),
                            c.metric,
                            if c.score > 0.0 {
                                format!(", score {:.1}", c.score)
                            } else {
                                String::new()
                            }
                        )?;
                        for t in &c.threads {
                            writeln!(
                                out,
                                "          tid {:<8} {:<16} {:.3} s on CPU, {:.3} s in run queue, {:.3} s in D",
                                t.tid,
                                t.comm.as_deref().unwrap_or("-"),
                                t.on_cpu_s,
                                t.runq_wait_s,
                                t.offcpu_d_s
                            )?;
                        }
                        for st in &c.stacks {
                            let weight = match st.time {
                                StackTime::OnCpu => format!("of its samples ({})", st.weight),
                                StackTime::OffCpuD => {
                                    format!("of its time in D ({:.3} s)", st.weight as f64 / 1e9)
                                }
                            };
                            writeln!(
                                out,
                                "          stack {:>5.1}% {weight}: {}",
                                100.0 * st.share,
                                leaf_first(&st.frames, 4)
                            )?;
                        }
                    }
                }
                writeln!(out)?;
            }
        }
    }
    Ok(())
}

/// The `n` frames nearest the leaf of a folded stack, leaf first.
fn leaf_first(folded: &str, n: usize) -> String {
    let frames: Vec<&str> = folded.rsplit(';').collect();
    let more = if frames.len() > n { " <- ..." } else { "" };
    format!("{}{more}", frames[..frames.len().min(n)].join(" <- "))
}

fn csv(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(weights: &mut StackWeights, pid: i32, interval: i64, stack: Option<i64>, weight: i64) {
        weights
            .entry((None, pid))
            .or_default()
            .entry(interval)
            .or_default()
            .insert(stack, weight);
    }

    #[test]
    fn top_stacks_are_the_heaviest_inside_the_incident_of_all_its_weight() {
        let mut weights = StackWeights::new();
        add(&mut weights, 7, 0, Some(1), 100); // before the incident
        add(&mut weights, 7, 10, Some(1), 5);
        add(&mut weights, 7, 10, Some(2), 30);
        add(&mut weights, 7, 20, Some(3), 10);
        add(&mut weights, 7, 20, None, 55); // not read: in the whole, never shown
        add(&mut weights, 7, 30, Some(4), 1000); // at the incident's end: outside
        add(&mut weights, 8, 10, Some(9), 1);
        assert_eq!(
            top_stacks(&weights, (&None, 7), 10, 30),
            Some((vec![(2, 30), (3, 10)], 100))
        );
        // No rows of the process, or none of its stacks read: no stacks.
        assert_eq!(top_stacks(&weights, (&None, 5), 10, 30), None);
        add(&mut weights, 6, 10, None, 3);
        assert_eq!(top_stacks(&weights, (&None, 6), 10, 30), None);
    }

    #[test]
    fn an_incident_is_the_recorders_when_its_recorder_then_leads_it() {
        let session = |host: &str, start: i64, recorder_pid: Option<i32>| SessionFacts {
            host: host.into(),
            start,
            fault_sample: 1,
            boot_offset: None,
            recorder_pid,
        };
        let incident = |host: Option<&str>, end: i64, first: Option<i32>| Incident {
            host: host.map(String::from),
            start: end - 10,
            end,
            peak: end - 10,
            kinds: vec![IO],
            metrics: Vec::new(),
            contributors: first
                .into_iter()
                .map(|pid| baseline::Contributor {
                    pid,
                    comm: None,
                    metric: "process_offcpu_d".into(),
                    share: 1.0,
                    score: 0.0,
                    threads: Vec::new(),
                    stacks: Vec::new(),
                })
                .collect(),
        };
        // The recorder pid 40 ran from 100, a later one, pid 50, from 1000.
        let sessions = [session("a", 100, Some(40)), session("a", 1000, Some(50))];
        assert!(led_by_the_recorder(
            &incident(None, 110, Some(40)),
            &sessions
        ));
        assert!(!led_by_the_recorder(
            &incident(None, 110, Some(41)),
            &sessions
        ));
        assert!(!led_by_the_recorder(&incident(None, 110, None), &sessions));
        // After the second session began, pid 40 is someone else's.
        assert!(!led_by_the_recorder(
            &incident(None, 1010, Some(40)),
            &sessions
        ));
        assert!(led_by_the_recorder(
            &incident(None, 1010, Some(50)),
            &sessions
        ));
        // Before any session, or on another host, or in a recording older than the pid: no recorder.
        assert!(!led_by_the_recorder(
            &incident(None, 100, Some(40)),
            &sessions
        ));
        assert!(!led_by_the_recorder(
            &incident(Some("b"), 110, Some(40)),
            &sessions
        ));
        assert!(led_by_the_recorder(
            &incident(Some("a"), 110, Some(40)),
            &sessions
        ));
        assert!(!led_by_the_recorder(
            &incident(None, 110, Some(40)),
            &[session("a", 100, None)]
        ));
    }
}
