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

use std::io::Write;

use anyhow::Result;

use super::screen::{self, Row};
use super::{counter_deltas, process_comm, select_list, ColumnDef, Env};
use crate::human::{self, Layout, Table};

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
        ("comm", process_comm("ts")),
        ("event", "event".into()),
        ("reason", "reason".into()),
        ("events", "count(*)".into()),
        ("pages_succeeded", "sum(pages_succeeded)".into()),
        ("pages_failed", "sum(pages_failed)".into()),
    ]);
    let mut task = common("task");
    task.extend([
        ("pid", "pid".to_string()),
        ("comm", process_comm("ts")),
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
  SELECT {h}{bin} AS interval_start, ts, CAST(kind AS VARCHAR) AS event, tid, pid,
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

/// numastat's per-node counters, in its order, and the `node_vmstat` name
/// of each (the same count, read from the node's own vmstat).
const NODE_COUNTERS: &[(&str, &str)] = &[
    ("numa_hit", "numa_hit"),
    ("numa_miss", "numa_miss"),
    ("numa_foreign", "numa_foreign"),
    ("interleave_hit", "numa_interleave"),
    ("local_node", "numa_local"),
    ("other_node", "numa_other"),
];

/// The system-wide `vmstat` counters the summary line reads; the rest that
/// changed are listed after it.
const SUMMARY_COUNTERS: &[&str] = &[
    "numa_hint_faults",
    "numa_hint_faults_local",
    "numa_pte_updates",
    "numa_huge_pte_updates",
    "numa_pages_migrated",
    "pgmigrate_success",
    "pgmigrate_fail",
    // The sums of the per-node lines.
    "numa_hit",
    "numa_miss",
    "numa_foreign",
    "numa_interleave",
    "numa_local",
    "numa_other",
];

/// Like `numastat` and `numamove` side by side, a block per interval: the
/// balancing summary (hinting faults, PTE updates, pages migrated), the
/// per-node counters with nodes as columns, then the processes whose pages
/// were migrated and the tasks the scheduler moved, busiest first. Counts
/// in the interval; CSV and JSON have the rates too.
pub fn write_table(
    batches: &[arrow::array::RecordBatch],
    env: &Env,
    layout: &Layout,
    out: &mut impl Write,
) -> Result<()> {
    let Some(rows) = screen::rows_or_say(
        batches,
        "no NUMA activity in the range (is the numa group recorded? without NUMA balancing, only allocations per node change)",
        out,
    )?
    else {
        return Ok(());
    };
    let legend = "Counts in each interval. Per node, numastat's counters (pages allocated). Pages migrated: by \
         migrate_pages, per process and reason. Tasks moved: the scheduler's NUMA placement (move_numa \
         moved a task to a node, swap_numa exchanged two, stick_numa could not move one).";
    screen::legend(legend, layout, out)?;
    for block in screen::intervals(&rows) {
        screen::interval_heading(
            &block[0],
            &format!("interval {}", env.interval.human()),
            layout,
            out,
        )?;
        write_summary(block, out)?;
        write_nodes(block, layout, out)?;
        write_processes(block, layout, out)?;
        writeln!(out)?;
    }
    Ok(())
}

fn kind<'a>(block: &'a [Row], kind: &'a str) -> impl Iterator<Item = &'a Row> {
    block
        .iter()
        .filter(move |r| screen::str(r, "kind") == Some(kind))
}

/// The balancing line from `vmstat`, and any other changed NUMA counter.
fn write_summary(block: &[Row], out: &mut impl Write) -> Result<()> {
    let system: Vec<&Row> = kind(block, "counter")
        .filter(|r| screen::str(r, "source") == Some("vmstat"))
        .collect();
    let delta = |name: &str| {
        system
            .iter()
            .find(|r| screen::str(r, "counter") == Some(name))
            .and_then(|r| screen::int(r, "delta"))
            .unwrap_or(0)
    };
    let faults = delta("numa_hint_faults");
    let local = if faults > 0 {
        format!(
            " ({} local)",
            human::pct(Some(
                100.0 * delta("numa_hint_faults_local") as f64 / faults as f64
            ))
        )
    } else {
        String::new()
    };
    writeln!(
        out,
        "BALANCING  hinting faults {}{local}  PTE updates {} (huge {})  pages migrated {}",
        human::count(Some(faults)),
        human::count(Some(delta("numa_pte_updates"))),
        human::count(Some(delta("numa_huge_pte_updates"))),
        human::count(Some(delta("numa_pages_migrated"))),
    )?;
    writeln!(
        out,
        "MIGRATION  pages moved {}  failed {}",
        human::count(Some(delta("pgmigrate_success"))),
        human::count(Some(delta("pgmigrate_fail"))),
    )?;
    let others: Vec<String> = system
        .iter()
        .filter_map(|r| {
            let name = screen::str(r, "counter")?;
            (!SUMMARY_COUNTERS.contains(&name))
                .then(|| format!("{name} {}", human::count(screen::int(r, "delta"))))
        })
        .collect();
    if !others.is_empty() {
        writeln!(out, "ALSO       {}", others.join("  "))?;
    }
    Ok(())
}

/// numastat's screen: a line a counter, a column a node.
fn write_nodes(block: &[Row], layout: &Layout, out: &mut impl Write) -> Result<()> {
    let per_node: Vec<&Row> = kind(block, "counter")
        .filter(|r| matches!(screen::str(r, "source"), Some("numastat" | "node_vmstat")))
        .collect();
    let mut nodes: Vec<&str> = per_node
        .iter()
        .filter_map(|r| screen::str(r, "scope"))
        .collect();
    nodes.sort_by_key(|n| (n.len(), *n)); // node2 before node10
    nodes.dedup();
    if nodes.is_empty() {
        return Ok(());
    }
    let find = |source: &str, name: &str, node: &str| {
        per_node.iter().find(|r| {
            screen::str(r, "source") == Some(source)
                && screen::str(r, "counter") == Some(name)
                && screen::str(r, "scope") == Some(node)
        })
    };
    let mut columns = vec![human::label("PER NODE")];
    columns.extend(nodes.iter().map(|n| human::figure(n)));
    let mut table = Table::new(columns);
    for (numastat, node_vmstat) in NODE_COUNTERS {
        let mut cells = vec![(*numastat).to_owned()];
        for node in &nodes {
            let row =
                find("numastat", numastat, node).or_else(|| find("node_vmstat", node_vmstat, node));
            // A counter that did not change has no row.
            cells.push(human::count(Some(
                row.and_then(|r| screen::int(r, "delta")).unwrap_or(0),
            )));
        }
        table.row(cells);
    }
    // What else a node's vmstat counted (promotions, demotions, migrations).
    let mut extra: Vec<&str> = per_node
        .iter()
        .filter(|r| screen::str(r, "source") == Some("node_vmstat"))
        .filter_map(|r| screen::str(r, "counter"))
        .filter(|name| !NODE_COUNTERS.iter().any(|(_, v)| v == name))
        .collect();
    extra.sort_unstable();
    extra.dedup();
    for name in extra {
        let mut cells = vec![name.to_owned()];
        for node in &nodes {
            let row = find("node_vmstat", name, node);
            cells.push(human::count(Some(
                row.and_then(|r| screen::int(r, "delta")).unwrap_or(0),
            )));
        }
        table.row(cells);
    }
    table.write(layout, out)?;
    Ok(())
}

/// The processes whose pages moved, then the tasks the scheduler moved.
fn write_processes(block: &[Row], layout: &Layout, out: &mut impl Write) -> Result<()> {
    let mut migrated = Table::new(vec![
        human::figure("PID"),
        human::name("COMM", 16),
        human::figure("PAGES MIGRATED"),
        human::figure("FAILED"),
        human::figure("CALLS"),
        human::label("REASON"),
    ]);
    // Already busiest first: the statement orders by pages.
    for r in kind(block, "migrate") {
        migrated.row(vec![
            screen::text(r, "pid"),
            screen::text(r, "comm"),
            human::count(screen::int(r, "pages_succeeded")),
            human::count(screen::int(r, "pages_failed")),
            human::count(screen::int(r, "events")),
            screen::text(r, "reason"),
        ]);
    }
    if !migrated.is_empty() {
        migrated.write(layout, out)?;
    }
    let mut moved = Table::new(vec![
        human::figure("PID"),
        human::name("COMM", 16),
        human::label("TASK MOVE"),
        human::figure("FROM"),
        human::figure("TO"),
        human::figure("TIMES"),
    ]);
    for r in kind(block, "task") {
        moved.row(vec![
            screen::text(r, "pid"),
            screen::text(r, "comm"),
            screen::text(r, "event"),
            screen::text(r, "src_nid"),
            screen::text(r, "dst_nid"),
            human::count(screen::int(r, "events")),
        ]);
    }
    if !moved.is_empty() {
        moved.write(layout, out)?;
    }
    Ok(())
}
