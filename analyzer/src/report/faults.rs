//! `report faults`: page faults per interval and process, from the
//! `page_fault` events, with the per-process `minflt`/`majflt` counters of
//! `task_stat` beside them as a cross-check.
//!
//! Each recorded fault stands for `fault_sample` faults (recording.json,
//! per session), so `faults` is an estimate when sampling was on and
//! `recorded` is the raw row count. Event rates divide by the interval's
//! length, `task_stat` rates by the process's own bounding samples (its
//! life, for one born or gone in the interval); processes rank by faults in
//! the interval.
//! The most faulted 2 MiB-aligned region of each process is shown; what is
//! mapped there is `unknown`, since no memory maps are recorded (yet).

use std::io::Write;

use anyhow::Result;

use super::screen;
use super::{process_comm, select_list, task_deltas, ColumnDef, Env};
use crate::human::{self, Column, Layout, Table};

/// The result's columns, after `host` with several recordings.
pub const COLUMNS: &[ColumnDef] = &[
    ("interval_start", "TIMESTAMP"),
    ("lost", "BIGINT"),
    ("pid", "INT"),
    ("comm", "VARCHAR"),
    ("faults", "BIGINT"),
    ("faults_s", "DOUBLE"),
    ("user_faults_s", "DOUBLE"),
    ("kernel_faults_s", "DOUBLE"),
    ("write_faults_s", "DOUBLE"),
    ("recorded", "BIGINT"),
    ("top_region", "VARCHAR"),
    ("top_region_faults", "BIGINT"),
    ("mapping", "VARCHAR"),
    ("cmdline", "VARCHAR"),
    ("minflt_s", "DOUBLE"),
    ("majflt_s", "DOUBLE"),
];

/// Address bits below a region: 2 MiB.
const REGION: u64 = 2 * 1024 * 1024;

pub fn sql(env: &Env) -> String {
    let h = env.h();
    let seconds = env.interval.ns() as f64 / 1e9;
    let on = |a: &str, b: &str| {
        let host = if env.multi_host {
            format!(" AND {a}.host = {b}.host")
        } else {
            String::new()
        };
        format!("{a}.interval_start = {b}.interval_start AND {a}.pid = {b}.pid{host}")
    };
    let joined_host = if env.multi_host {
        "COALESCE(p.host, t.host) AS host, "
    } else {
        ""
    };
    let cmd_on = if env.multi_host {
        "c.pid = r.pid AND c.host = r.host"
    } else {
        "c.pid = r.pid"
    };
    let mut columns: Vec<ColumnDef> = Vec::new();
    if env.multi_host {
        columns.push(("host", "VARCHAR"));
    }
    columns.extend_from_slice(COLUMNS);
    let mut values: Vec<(&str, String)> = vec![
        ("interval_start", "r.interval_start".into()),
        ("lost", "COALESCE(l.lost, 0)".into()),
        ("pid", "r.pid".into()),
        ("comm", "r.comm".into()),
        ("faults", "r.faults".into()),
        ("faults_s", "r.faults_s".into()),
        (
            "user_faults_s",
            "(r.faults - r.kernel_faults) / {seconds}".into(),
        ),
        ("kernel_faults_s", "r.kernel_faults / {seconds}".into()),
        ("write_faults_s", "r.write_faults / {seconds}".into()),
        ("recorded", "r.recorded".into()),
        (
            "top_region",
            "'0x' || to_hex(CAST(g.region AS BIGINT))".into(),
        ),
        ("top_region_faults", "g.faults".into()),
        (
            "mapping",
            "CASE WHEN g.region IS NOT NULL THEN 'unknown' END".into(),
        ),
        ("cmdline", "c.cmdline".into()),
        ("minflt_s", "r.minflt_s".into()),
        ("majflt_s", "r.majflt_s".into()),
    ];
    if env.multi_host {
        values.push(("host", "r.host".into()));
    }
    let values: Vec<(&str, String)> = values
        .into_iter()
        .map(|(c, e)| (c, e.replace("{seconds}", &format!("{seconds:?}"))))
        .collect();
    let order_host = if env.multi_host { "r.host, " } else { "" };
    format!(
        "WITH
{task_deltas},
{lost},
fault AS (  -- page faults, each standing for fault_sample faults of its session
  SELECT {h}{bin} AS interval_start, ts, tid, pid, comm, address, kernel, error_code,
    {weight} AS weight
  FROM page_fault
  WHERE {event_bounds}
),
by_process AS (
  SELECT {h}interval_start, pid, {process_comm} AS comm,
    count(*) AS recorded,
    sum(weight) AS faults,
    sum(CASE WHEN kernel THEN weight ELSE 0 END) AS kernel_faults,
    sum(CASE WHEN (error_code & 2) <> 0 THEN weight ELSE 0 END) AS write_faults
  FROM fault
  GROUP BY {h}interval_start, pid
),
by_region AS (  -- {region_mib} MiB-aligned address regions, the most faulted first
  SELECT *, row_number() OVER (PARTITION BY {h}interval_start, pid ORDER BY faults DESC, region) AS rank
  FROM (
    SELECT {h}interval_start, pid, address - address % {region} AS region, sum(weight) AS faults
    FROM fault
    GROUP BY {h}interval_start, pid, address - address % {region}
  )
),
task AS (  -- the cross-check: minflt and majflt from the process snapshots
  SELECT {h}interval_start, pid, max(comm) AS comm, sum(minflt + majflt) AS task_faults,
    sum(minflt / seconds) AS minflt_s, sum(majflt / seconds) AS majflt_s
  FROM task_delta
  WHERE seconds > 0
  GROUP BY {h}interval_start, pid
),
cmdline AS (  -- the last command line known of each pid
  SELECT {h}pid, last_value(cmdline ORDER BY ts) AS cmdline
  FROM process
  WHERE cmdline IS NOT NULL
  GROUP BY {h}pid
),
r AS (  -- faulting processes, ranked per interval
  SELECT *, row_number() OVER (
      PARTITION BY {h}interval_start
      -- by amount: a process that lived 50 ms has a high rate, and few faults
      ORDER BY COALESCE(faults, task_faults) DESC, pid) AS rank
  FROM (
    SELECT {joined_host}COALESCE(p.interval_start, t.interval_start) AS interval_start,
      COALESCE(p.pid, t.pid) AS pid, COALESCE(p.comm, t.comm) AS comm,
      p.faults, p.faults / {seconds:?} AS faults_s, p.kernel_faults, p.write_faults, p.recorded,
      t.minflt_s, t.majflt_s, t.task_faults
    FROM by_process p FULL JOIN task t ON {pt_on}
  )
  WHERE faults > 0 OR minflt_s + majflt_s > 0
)
SELECT {select}
FROM r
  LEFT JOIN by_region g ON {gr_on} AND g.rank = 1
  LEFT JOIN cmdline c ON {cmd_on}
  LEFT JOIN lost l ON {lost_join}
WHERE r.rank <= {top} AND {interval_bounds}
ORDER BY {order_host}r.interval_start, r.rank",
        task_deltas = task_deltas(env),
        lost = env.lost_cte(),
        bin = env.bin("ts"),
        process_comm = process_comm("ts"),
        weight = env.fault_weight("ts"),
        event_bounds = env.event_bounds("ts"),
        region = REGION,
        region_mib = REGION >> 20,
        pt_on = on("p", "t"),
        gr_on = on("g", "r"),
        select = select_list(&columns, &values),
        lost_join = env.lost_join("r"),
        top = env.top,
        interval_bounds = env.interval_bounds("r.interval_start"),
    )
}

/// A block per interval, the most faulting processes first: the faults
/// recorded (their kinds as rates), /proc's minflt and majflt rates beside
/// them as the cross-check, the most faulted 2 MiB region, the command.
pub fn write_table(
    batches: &[arrow::array::RecordBatch],
    env: &Env,
    layout: &Layout,
    out: &mut impl Write,
) -> Result<()> {
    let Some(rows) = screen::rows_or_say(
        batches,
        "no page faults in the range (is the faults group or the tasks group recorded?)",
        out,
    )?
    else {
        return Ok(());
    };
    let estimated = |r: &screen::Row| {
        matches!(
            (screen::int(r, "recorded"), screen::int(r, "faults")),
            (Some(recorded), Some(faults)) if recorded < faults
        )
    };
    // Without the faults group only /proc's counters are known: the
    // columns of the events are left out rather than shown empty.
    let events = rows.iter().any(|r| screen::int(r, "faults").is_some());
    let legend = if events {
        format!(
            "FAULTS: page faults in the interval, from the faults group ({}); USER/s, KERNEL/s, WRITE/s: \
             the same by kind, per second. MINFLT/s, MAJFLT/s: the process's own counters in /proc, per \
             second of its snapshots. HOT REGION: the {} MiB of address space it faulted most in, with its \
             faults.",
            if rows.iter().any(estimated) {
                "~: estimated from sampled faults, each recorded one standing for --fault-sample of them"
            } else {
                "- where it was not recorded"
            },
            REGION >> 20,
        )
    } else {
        "MINFLT/s, MAJFLT/s: the process's own counters in /proc, per second of its snapshots (the \
         faults group was not recorded: no kinds, no addresses)."
            .to_owned()
    };
    screen::legend(&legend, layout, out)?;
    type Cell = fn(&screen::Row) -> String;
    type Field = (Column, Box<dyn Fn(&screen::Row) -> String>);
    let rate = |column: &'static str| move |r: &screen::Row| human::rate(screen::num(r, column));
    let mut fields: Vec<Field> = vec![
        (
            human::figure("PID"),
            Box::new((|r| screen::text(r, "pid")) as Cell),
        ),
        (
            human::name("COMM", 16),
            Box::new((|r| screen::text(r, "comm")) as Cell),
        ),
    ];
    if events {
        fields.push((
            human::figure("FAULTS"),
            Box::new(move |r| {
                let mark = if estimated(r) { "~" } else { "" };
                format!("{mark}{}", human::count(screen::int(r, "faults")))
            }),
        ));
        fields.push((human::figure("FAULTS/s"), Box::new(rate("faults_s"))));
        fields.push((
            human::figure("USER/s").optional(),
            Box::new(rate("user_faults_s")),
        ));
        fields.push((
            human::figure("KERNEL/s").optional(),
            Box::new(rate("kernel_faults_s")),
        ));
        fields.push((
            human::figure("WRITE/s").optional(),
            Box::new(rate("write_faults_s")),
        ));
    }
    fields.push((human::figure("MINFLT/s"), Box::new(rate("minflt_s"))));
    fields.push((human::figure("MAJFLT/s"), Box::new(rate("majflt_s"))));
    if events {
        fields.push((
            human::label("HOT REGION").optional(),
            Box::new(|r| {
                match (
                    screen::str(r, "top_region"),
                    screen::int(r, "top_region_faults"),
                ) {
                    (Some(at), Some(n)) => format!("{at} ({})", human::count(Some(n))),
                    _ => "-".into(),
                }
            }),
        ));
    }
    fields.push((
        human::name("CMDLINE", 60),
        Box::new((|r| screen::text(r, "cmdline")) as Cell),
    ));
    for block in screen::intervals(&rows) {
        screen::interval_heading(
            &block[0],
            &format!("interval {}", env.interval.human()),
            layout,
            out,
        )?;
        let mut table = Table::new(fields.iter().map(|(c, _)| c.clone()).collect());
        for r in block {
            table.row(fields.iter().map(|(_, cell)| cell(r)).collect());
        }
        table.write(layout, out)?;
        writeln!(out)?;
    }
    Ok(())
}
