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

use super::{select_list, task_deltas, ColumnDef, Env};

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
  SELECT {h}{bin} AS interval_start, pid, comm, address, kernel, error_code,
    {weight} AS weight
  FROM page_fault
  WHERE {event_bounds}
),
by_process AS (
  SELECT {h}interval_start, pid, max(CAST(comm AS VARCHAR)) AS comm,
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
