//! `report numa`: per interval, pages migrated and tasks moved between
//! NUMA nodes (from `numa_event`), and the NUMA counters that changed.
//!
//! Row kinds sharing [`COLUMNS`]:
//! - `migrate`: per process and reason, `migrate_pages` events and the
//!   pages that moved (`pages_succeeded`) or failed to (`pages_failed`);
//! - `task`: per process, event (`move_numa`, `swap_numa`, `stick_numa`)
//!   and node pair (`src_nid` → `dst_nid`), how many times;
//! - `counter`: `numastat` per node, and the `numa*`/`pgmigrate*` counters
//!   of `vmstat` (system) and `node_vmstat` (per node), as the change in the
//!   interval and a rate by the bounding-sample rule; counters that did not
//!   change are left out.

use super::{counter_deltas, select_list, ColumnDef, Env};

/// The result's columns, after `host` with several recordings.
pub const COLUMNS: &[ColumnDef] = &[
    ("kind", "VARCHAR"),
    ("interval_start", "TIMESTAMP"),
    ("lost", "BIGINT"),
    ("pid", "INT"),
    ("comm", "VARCHAR"),
    ("event", "VARCHAR"),
    ("src_nid", "INT"),
    ("dst_nid", "INT"),
    ("reason", "VARCHAR"),
    ("events", "BIGINT"),
    ("pages_succeeded", "BIGINT"),
    ("pages_failed", "BIGINT"),
    ("source", "VARCHAR"),
    ("counter", "VARCHAR"),
    ("scope", "VARCHAR"),
    ("delta", "BIGINT"),
    ("per_s", "DOUBLE"),
];

pub fn sql(env: &Env) -> String {
    let h = env.h();
    // The union's columns: all but `lost`, added by the final SELECT.
    let mut union_cols: Vec<ColumnDef> = Vec::new();
    if env.multi_host {
        union_cols.push(("host", "VARCHAR"));
    }
    union_cols.extend(COLUMNS.iter().filter(|c| c.0 != "lost"));
    let common = |kind: &str| {
        let mut v: Vec<(&str, String)> = vec![
            ("kind", format!("'{kind}'")),
            ("interval_start", "interval_start".into()),
        ];
        if env.multi_host {
            v.push(("host", "host".into()));
        }
        v
    };
    let mut migrate = common("migrate");
    migrate.extend([
        ("pid", "pid".to_string()),
        ("comm", "max(comm)".into()),
        ("event", "event".into()),
        ("reason", "reason".into()),
        ("events", "count(*)".into()),
        ("pages_succeeded", "sum(pages_succeeded)".into()),
        ("pages_failed", "sum(pages_failed)".into()),
    ]);
    let mut task = common("task");
    task.extend([
        ("pid", "pid".to_string()),
        ("comm", "max(comm)".into()),
        ("event", "event".into()),
        ("src_nid", "src_nid".into()),
        ("dst_nid", "dst_nid".into()),
        ("events", "count(*)".into()),
    ]);
    let mut counter = common("counter");
    counter.extend([
        ("source", "CAST(source AS VARCHAR)".to_string()),
        ("counter", "CAST(name AS VARCHAR)".into()),
        ("scope", "CAST(scope AS VARCHAR)".into()),
        ("delta", "delta".into()),
        ("per_s", "delta / seconds".into()),
    ]);
    let mut final_cols: Vec<String> = Vec::new();
    if env.multi_host {
        final_cols.push("r.host".into());
    }
    for (c, _) in COLUMNS {
        final_cols.push(match *c {
            "lost" => "COALESCE(l.lost, 0) AS lost".into(),
            c => format!("r.{c}"),
        });
    }
    let order_host = if env.multi_host { "r.host, " } else { "" };
    format!(
        "WITH
{counter_deltas},
{lost},
event AS (
  SELECT {h}{bin} AS interval_start, CAST(kind AS VARCHAR) AS event, pid,
    CAST(comm AS VARCHAR) AS comm, src_nid, dst_nid, CAST(reason AS VARCHAR) AS reason,
    pages_succeeded, pages_failed
  FROM numa_event
  WHERE {event_bounds}
),
r AS (
  SELECT {migrate}
  FROM event WHERE event = 'migrate_pages'
  GROUP BY {h}interval_start, pid, event, reason
  UNION ALL
  SELECT {task}
  FROM event WHERE event <> 'migrate_pages'
  GROUP BY {h}interval_start, pid, event, src_nid, dst_nid
  UNION ALL
  SELECT {counter}
  FROM counter_delta WHERE seconds > 0 AND delta > 0
)
SELECT {final_cols}
FROM r LEFT JOIN lost l ON {lost_join}
WHERE {interval_bounds}
ORDER BY {order_host}r.interval_start,
  CASE r.kind WHEN 'migrate' THEN 0 WHEN 'task' THEN 1 ELSE 2 END,
  r.pages_succeeded DESC NULLS LAST, r.events DESC NULLS LAST, r.pid, r.event,
  r.src_nid, r.dst_nid, r.source, r.counter, r.scope",
        counter_deltas = counter_deltas(
            env,
            "source = 'numastat'
    OR (source IN ('vmstat', 'node_vmstat') AND (name LIKE 'numa%' OR name LIKE 'pgmigrate%'))"
        ),
        lost = env.lost_cte(),
        bin = env.bin("ts"),
        event_bounds = env.event_bounds("ts"),
        migrate = select_list(&union_cols, &migrate),
        task = select_list(&union_cols, &task),
        counter = select_list(&union_cols, &counter),
        final_cols = final_cols.join(", "),
        lost_join = env.lost_join("r"),
        interval_bounds = env.interval_bounds("r.interval_start"),
    )
}
