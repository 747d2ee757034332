//! `report atop`: per interval, atop's system lines and its process list,
//! computed from the raw cumulative `counter` and `task_stat` samples.
//!
//! One statement, three row kinds sharing the columns of [`COLUMNS`]:
//! - `system`: context switches, memory, paging, migration, NUMA and
//!   pressure, one row per interval;
//! - `cpu`: the CPU time split, one row for the total (`cpu` = `all`) and
//!   one per CPU; busy is every kind of tick but idle and iowait, as a % of
//!   all ticks (`guest` and `guest_nice` are left out: the kernel already
//!   counts them in `user` and `nice`);
//! - `process`: the top `--top` processes by CPU time used in the interval,
//!   as atop sorts them; CPU as a % of ONE CPU (two full cores are 200%),
//!   over the process's own two bounding snapshots.
//!   A process started during the recording counts from zero at its start,
//!   and its final row (taken as it ends) bounds its last interval, so one
//!   that lived between two snapshots has its line, as in atop.
//!
//! Every amount follows the bounding-sample rule of [`super::Deltas`];
//! memory is `meminfo` at the last sample in the interval. `lost` on every
//! row is the events lost in the interval.

use std::io::Write;

use anyhow::Result;
use arrow::array::RecordBatch;

use super::screen::{self, num, text, Row};
use super::{counter_deltas, select_list, task_deltas, ColumnDef, Env};
use crate::human::{self, Layout, Table};
use crate::output;

/// The result's columns after `host` (several recordings only), `kind`,
/// the interval and its bounding samples, and `lost`.
pub const COLUMNS: &[ColumnDef] = &[
    ("kind", "VARCHAR"),
    ("interval_start", "TIMESTAMP"),
    ("sample_from", "TIMESTAMP"),
    ("sample_to", "TIMESTAMP"),
    ("seconds", "DOUBLE"),
    // cpu rows
    ("cpu", "VARCHAR"),
    ("busy_pct", "DOUBLE"),
    ("user_pct", "DOUBLE"),
    ("system_pct", "DOUBLE"),
    ("iowait_pct", "DOUBLE"),
    ("idle_pct", "DOUBLE"),
    ("steal_pct", "DOUBLE"),
    // the system row
    ("ctxt_s", "DOUBLE"),
    ("mem_free_kb", "BIGINT"),
    ("mem_available_kb", "BIGINT"),
    ("mem_cached_kb", "BIGINT"),
    ("pgfault_s", "DOUBLE"),
    ("pgmajfault_s", "DOUBLE"),
    ("pgscan_kswapd_s", "DOUBLE"),
    ("pgscan_direct_s", "DOUBLE"),
    ("pgsteal_kswapd_s", "DOUBLE"),
    ("pgsteal_direct_s", "DOUBLE"),
    ("pgmigrate_success_s", "DOUBLE"),
    ("pgmigrate_fail_s", "DOUBLE"),
    ("numa_hit_s", "DOUBLE"),
    ("numa_miss_s", "DOUBLE"),
    ("numa_foreign_s", "DOUBLE"),
    ("numa_local_s", "DOUBLE"),
    ("numa_other_s", "DOUBLE"),
    ("numa_pages_migrated_s", "DOUBLE"),
    ("psi_cpu_some_pct", "DOUBLE"),
    ("psi_memory_some_pct", "DOUBLE"),
    ("psi_memory_full_pct", "DOUBLE"),
    ("psi_io_some_pct", "DOUBLE"),
    ("psi_io_full_pct", "DOUBLE"),
    // process rows
    ("pid", "INT"),
    ("comm", "VARCHAR"),
    ("cpu_pct", "DOUBLE"),
    ("faults_s", "DOUBLE"),
    ("csw_s", "DOUBLE"),
    ("rss_bytes", "BIGINT"),
];

/// `/proc/stat` CPU time kinds that make up the total.
const CPU_TICKS: &[&str] = &[
    "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal",
];

/// `/proc/vmstat` counters shown as rates: column `<name>_s`.
const VMSTAT: &[&str] = &[
    "pgfault",
    "pgmajfault",
    "pgscan_kswapd",
    "pgscan_direct",
    "pgsteal_kswapd",
    "pgsteal_direct",
    "pgmigrate_success",
    "pgmigrate_fail",
    "numa_hit",
    "numa_miss",
    "numa_foreign",
    "numa_local",
    "numa_other",
    "numa_pages_migrated",
];

/// `/proc/meminfo` gauges: (name, column).
const MEMINFO: &[(&str, &str)] = &[
    ("MemFree", "mem_free_kb"),
    ("MemAvailable", "mem_available_kb"),
    ("Cached", "mem_cached_kb"),
];

/// Pressure totals (µs): (name, column).
const PSI: &[(&str, &str)] = &[
    ("cpu_some_total", "psi_cpu_some_pct"),
    ("memory_some_total", "psi_memory_some_pct"),
    ("memory_full_total", "psi_memory_full_pct"),
    ("io_some_total", "psi_io_some_pct"),
    ("io_full_total", "psi_io_full_pct"),
];

fn quoted(names: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    names
        .into_iter()
        .map(|n| format!("'{}'", n.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The result's columns, `host` first with several recordings.
pub fn columns(env: &Env) -> Vec<ColumnDef> {
    let mut columns = Vec::new();
    if env.multi_host {
        columns.push(("host", "VARCHAR"));
    }
    columns.extend_from_slice(COLUMNS);
    columns
}

/// The report's one statement.
pub fn sql(env: &Env) -> String {
    let h = env.h();
    let cpu_ticks = quoted(CPU_TICKS);
    let filter = format!(
        "(source = 'stat' AND name IN ({cpu_ticks}, 'ctxt'))
    OR (source = 'vmstat' AND scope IS NULL AND name IN ({vmstat}))
    OR (source = 'meminfo' AND scope IS NULL AND name IN ({meminfo}))
    OR (source = 'pressure' AND scope IS NULL AND name IN ({psi}))",
        vmstat = quoted(VMSTAT),
        meminfo = quoted(MEMINFO.iter().map(|m| m.0)),
        psi = quoted(PSI.iter().map(|p| p.0)),
    );

    let mut system_cols = vec![
        "min(sample_from) AS sample_from".to_string(),
        "max(sample_to) AS sample_to".into(),
        "(CAST(max(sample_to) AS BIGINT) - CAST(min(sample_from) AS BIGINT)) / 1e9 AS seconds"
            .into(),
        "max(CASE WHEN source = 'stat' AND name = 'ctxt' THEN delta / seconds END) AS ctxt_s"
            .into(),
    ];
    for (name, col) in MEMINFO {
        system_cols.push(format!(
            "max(CASE WHEN source = 'meminfo' AND name = '{name}' THEN last END) AS {col}"
        ));
    }
    for name in VMSTAT {
        system_cols.push(format!(
            "max(CASE WHEN source = 'vmstat' AND name = '{name}' THEN delta / seconds END) AS {name}_s"
        ));
    }
    for (name, col) in PSI {
        system_cols.push(format!(
            "max(CASE WHEN source = 'pressure' AND name = '{name}' \
             THEN 100 * delta / 1e6 / seconds END) AS {col}"
        ));
    }
    let system_cols = system_cols.join(",\n    ");

    let all = columns(env);
    // The union's columns: all but `lost`, which the final SELECT adds.
    let common = |kind: &str| -> Vec<(&str, String)> {
        let mut v = vec![
            ("kind", format!("'{kind}'")),
            ("interval_start", "interval_start".into()),
            ("sample_from", "sample_from".into()),
            ("sample_to", "sample_to".into()),
            ("seconds", "seconds".into()),
        ];
        if env.multi_host {
            v.push(("host", "host".into()));
        }
        v
    };
    let mut system_row = common("system");
    let system_names: Vec<String> = std::iter::once("ctxt_s".to_string())
        .chain(MEMINFO.iter().map(|m| m.1.to_string()))
        .chain(VMSTAT.iter().map(|n| format!("{n}_s")))
        .chain(PSI.iter().map(|p| p.1.to_string()))
        .collect();
    let system_values = COLUMNS
        .iter()
        .filter(|(c, _)| system_names.iter().any(|n| n == c))
        .map(|(c, _)| (*c, c.to_string()));
    system_row.extend(system_values);
    debug_assert_eq!(
        system_row.len(),
        common("system").len() + system_names.len()
    );
    let mut cpu_row = common("cpu");
    cpu_row.extend([
        ("cpu", "cpu".to_string()),
        ("busy_pct", "100.0 * (ticks - idle - iowait) / ticks".into()),
        ("user_pct", "100.0 * usr / ticks".into()),
        ("system_pct", "100.0 * sys / ticks".into()),
        ("iowait_pct", "100.0 * iowait / ticks".into()),
        ("idle_pct", "100.0 * idle / ticks".into()),
        ("steal_pct", "100.0 * steal / ticks".into()),
    ]);
    let mut process_row = common("process");
    process_row.extend([
        ("pid", "pid".to_string()),
        ("comm", "comm".into()),
        ("cpu_pct", "cpu_pct".into()),
        ("faults_s", "faults_s".into()),
        ("csw_s", "csw_s".into()),
        ("rss_bytes", "rss_bytes".into()),
    ]);

    let final_cols = all
        .iter()
        .map(|(c, _)| match *c {
            "seconds" => "r.seconds, COALESCE(l.lost, 0) AS lost".to_string(),
            c => format!("r.{c}"),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let order_host = if env.multi_host { "r.host, " } else { "" };

    format!(
        "WITH
{counter_deltas},
{task_deltas},
{lost},
cpu AS (  -- ticks by kind per CPU ('all': the total line)
  SELECT {h}interval_start, COALESCE(CAST(scope AS VARCHAR), 'all') AS cpu,
    min(sample_from) AS sample_from, max(sample_to) AS sample_to, max(seconds) AS seconds,
    sum(delta) AS ticks,
    sum(CASE WHEN name IN ('user', 'nice') THEN delta ELSE 0 END) AS usr,
    sum(CASE WHEN name IN ('system', 'irq', 'softirq') THEN delta ELSE 0 END) AS sys,
    sum(CASE WHEN name = 'iowait' THEN delta ELSE 0 END) AS iowait,
    sum(CASE WHEN name = 'idle' THEN delta ELSE 0 END) AS idle,
    sum(CASE WHEN name = 'steal' THEN delta ELSE 0 END) AS steal
  FROM counter_delta
  WHERE source = 'stat' AND name IN ({cpu_ticks}) AND seconds > 0
  GROUP BY {h}interval_start, scope
),
system AS (  -- one row per interval: rates of system-wide counters, memory at the end
  SELECT {h}interval_start,
    {system_cols}
  FROM counter_delta
  WHERE scope IS NULL AND NOT (source = 'stat' AND name IN ({cpu_ticks}))
    AND (seconds > 0 OR source = 'meminfo')
  GROUP BY {h}interval_start
),
process AS (  -- CPU as a % of one CPU, ranked per interval
  SELECT {h}interval_start, sample_from, sample_to, seconds, pid, comm,
    100 * cpu_ns / 1e9 / seconds AS cpu_pct,
    (minflt + majflt) / seconds AS faults_s,
    csw / seconds AS csw_s,
    rss_bytes,
    row_number() OVER (PARTITION BY {h}interval_start ORDER BY cpu_ns DESC, pid) AS rank
  FROM task_delta
  WHERE seconds > 0
),
r AS (
  SELECT {system_select} FROM system
  UNION ALL
  SELECT {cpu_select} FROM cpu WHERE ticks > 0
  UNION ALL
  SELECT {process_select} FROM process WHERE rank <= {top}
)
SELECT {final_cols}
FROM r LEFT JOIN lost l ON {lost_join}
WHERE {interval_bounds}
ORDER BY {order_host}r.interval_start,
  CASE r.kind WHEN 'system' THEN 0 WHEN 'cpu' THEN 1 ELSE 2 END,
  TRY_CAST(substr(r.cpu, 4) AS INT) NULLS FIRST, r.cpu_pct * r.seconds DESC, r.pid",
        counter_deltas = counter_deltas(env, &filter),
        task_deltas = task_deltas(env),
        lost = env.lost_cte(),
        system_select = select_list(&all, &system_row),
        cpu_select = select_list(&all, &cpu_row),
        process_select = select_list(&all, &process_row),
        top = env.top,
        lost_join = env.lost_join("r"),
        interval_bounds = env.interval_bounds("r.interval_start"),
    )
}

/// Prints the result like atop: a block per interval, its system lines,
/// then its process lines.
pub fn write_table(
    batches: &[RecordBatch],
    env: &Env,
    layout: &Layout,
    mut out: impl Write,
) -> Result<()> {
    let rows = output::json_rows(batches)?;
    if rows.is_empty() {
        writeln!(
            out,
            "no intervals: the recording has no counter or task_stat samples in the range"
        )?;
    }
    for (i, block) in screen::intervals(&rows).into_iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        screen::interval_heading(
            &block[0],
            &format!("interval {}", env.interval.human()),
            layout,
            &mut out,
        )?;
        let mut processes = Table::new(vec![
            human::figure("PID"),
            human::name("COMM", 16),
            human::figure("CPU"),
            human::figure("FAULTS/s"),
            human::figure("CSW/s"),
            human::figure("RSS"),
        ]);
        for row in block {
            match screen::str(row, "kind") {
                Some("system") => write_system(row, &mut out)?,
                Some("cpu") => writeln!(
                    out,
                    "CPU   {:<5} busy {:>6}  user {:>6}  sys {:>6}  iowait {:>6}  idle {:>6}  steal {:>6}",
                    text(row, "cpu"),
                    pct(row, "busy_pct"),
                    pct(row, "user_pct"),
                    pct(row, "system_pct"),
                    pct(row, "iowait_pct"),
                    pct(row, "idle_pct"),
                    pct(row, "steal_pct"),
                )?,
                _ => processes.row(vec![
                    text(row, "pid"),
                    text(row, "comm"),
                    pct(row, "cpu_pct"),
                    rate(row, "faults_s"),
                    rate(row, "csw_s"),
                    human::bytes(num(row, "rss_bytes")),
                ]),
            }
        }
        if !processes.is_empty() {
            processes.write(layout, &mut out)?;
        }
    }
    Ok(())
}

fn write_system(row: &Row, out: &mut impl Write) -> Result<()> {
    let r = |c: &str| rate(row, c);
    let kb = |c: &str| human::bytes(num(row, c).map(|v| v * 1024.0));
    let p = |c: &str| pct(row, c);
    writeln!(
        out,
        "TIME  samples {} .. {} ({} s)",
        text(row, "sample_from"),
        text(row, "sample_to"),
        num(row, "seconds").map_or("-".into(), |s| format!("{s:.1}")),
    )?;
    writeln!(out, "CSW   ctxt/s {}", r("ctxt_s"))?;
    writeln!(
        out,
        "MEM   free {}  available {}  cache {}",
        kb("mem_free_kb"),
        kb("mem_available_kb"),
        kb("mem_cached_kb")
    )?;
    writeln!(
        out,
        "PAG   fault/s {}  majflt/s {}  scan kswapd/s {}  direct/s {}  steal kswapd/s {}  direct/s {}",
        r("pgfault_s"),
        r("pgmajfault_s"),
        r("pgscan_kswapd_s"),
        r("pgscan_direct_s"),
        r("pgsteal_kswapd_s"),
        r("pgsteal_direct_s"),
    )?;
    writeln!(
        out,
        "MIG   migrate ok/s {}  fail/s {}  numa pages migrated/s {}",
        r("pgmigrate_success_s"),
        r("pgmigrate_fail_s"),
        r("numa_pages_migrated_s"),
    )?;
    writeln!(
        out,
        "NUMA  hit/s {}  miss/s {}  foreign/s {}  local/s {}  other/s {}",
        r("numa_hit_s"),
        r("numa_miss_s"),
        r("numa_foreign_s"),
        r("numa_local_s"),
        r("numa_other_s"),
    )?;
    writeln!(
        out,
        "PSI   cpu some {}  memory some {} full {}  io some {} full {}",
        p("psi_cpu_some_pct"),
        p("psi_memory_some_pct"),
        p("psi_memory_full_pct"),
        p("psi_io_some_pct"),
        p("psi_io_full_pct"),
    )?;
    Ok(())
}

fn pct(row: &Row, column: &str) -> String {
    human::pct(num(row, column))
}

fn rate(row: &Row, column: &str) -> String {
    human::rate(num(row, column))
}
