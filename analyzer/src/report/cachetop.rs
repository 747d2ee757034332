//! `report cachetop`: page-cache hits, misses and dirtied pages per
//! interval and process, like BCC's cachetop, after the fact.
//!
//! `page_cache` rows are already counts per recorder interval (not
//! cumulative), so an interval sums the rows whose `ts` (the end of the
//! recorder's interval) falls in it. Hits are `accesses - misses` (never
//! below zero); the hit ratio is hits as a % of accesses. `fault_around`
//! is the pages of the windows mmap faults mapped around themselves, kept
//! apart from accesses (the kernel does not say how many it mapped). All in
//! pages. The `--top` processes of each interval are those with the most
//! misses (then the most pages touched).

use std::io::Write;

use anyhow::Result;

use super::screen;
use super::{select_list, ColumnDef, Env};
use crate::human::{self, Layout, Table};

/// The result's columns, after `host` with several recordings.
pub const COLUMNS: &[ColumnDef] = &[
    ("interval_start", "TIMESTAMP"),
    ("lost", "BIGINT"),
    ("pid", "INT"),
    ("comm", "VARCHAR"),
    ("accesses", "BIGINT"),
    ("hits", "BIGINT"),
    ("misses", "BIGINT"),
    ("dirtied", "BIGINT"),
    ("hit_ratio_pct", "DOUBLE"),
    ("fault_around", "BIGINT"),
];

pub fn sql(env: &Env) -> String {
    let h = env.h();
    let mut columns: Vec<ColumnDef> = Vec::new();
    let mut values: Vec<(&str, String)> = Vec::new();
    if env.multi_host {
        columns.push(("host", "VARCHAR"));
        values.push(("host", "r.host".into()));
    }
    columns.extend_from_slice(COLUMNS);
    values.extend([
        ("interval_start", "r.interval_start".to_string()),
        ("lost", "COALESCE(l.lost, 0)".into()),
        ("pid", "r.pid".into()),
        ("comm", "r.comm".into()),
        ("accesses", "r.accesses".into()),
        ("hits", "r.hits".into()),
        ("misses", "r.misses".into()),
        ("dirtied", "r.dirtied".into()),
        ("hit_ratio_pct", "r.hit_ratio_pct".into()),
        ("fault_around", "r.fault_around".into()),
    ]);
    let order_host = if env.multi_host { "r.host, " } else { "" };
    format!(
        "WITH
{lost},
per_process AS (
  SELECT {h}{bin} AS interval_start, pid,
    last_value(CAST(comm AS VARCHAR) ORDER BY ts) AS comm,
    sum(accesses) AS accesses, sum(misses) AS misses, sum(dirtied) AS dirtied,
    sum(fault_around) AS fault_around
  FROM page_cache
  WHERE {event_bounds}
  GROUP BY {h}interval_start, pid
),
r AS (  -- the processes that missed most first, as cachetop sorts
  SELECT *,
    greatest(accesses - misses, 0) AS hits,
    CASE WHEN accesses > 0 THEN 100.0 * greatest(accesses - misses, 0) / accesses END
      AS hit_ratio_pct,
    row_number() OVER (PARTITION BY {h}interval_start ORDER BY misses DESC, accesses + dirtied DESC, pid)
      AS rank
  FROM per_process
)
SELECT {select}
FROM r LEFT JOIN lost l ON {lost_join}
WHERE r.rank <= {top} AND {interval_bounds}
ORDER BY {order_host}r.interval_start, r.rank",
        lost = env.lost_cte(),
        bin = env.bin("ts"),
        event_bounds = env.event_bounds("ts"),
        select = select_list(&columns, &values),
        lost_join = env.lost_join("r"),
        top = env.top,
        interval_bounds = env.interval_bounds("r.interval_start"),
    )
}

/// BCC cachetop's screen, a block per interval: the processes that missed
/// the cache most first, with HITS, MISSES, DIRTIES and the read and write
/// hit ratios, in pages.
pub fn write_table(
    batches: &[arrow::array::RecordBatch],
    env: &Env,
    layout: &Layout,
    out: &mut impl Write,
) -> Result<()> {
    let Some(rows) = screen::rows_or_say(
        batches,
        "no page-cache activity in the range (is the cache group recorded?)",
        out,
    )?
    else {
        return Ok(());
    };
    let legend = "In pages, per interval. HITS: pages looked up that were cached (looked up minus added); \
         MISSES: pages added to the cache; DIRTIES: pages dirtied. READ_HIT%: hits of the pages looked up. \
         WRITE_HIT%: dirtied pages that were already cached, estimated as those beyond the pages added \
         that no lookup explains.";
    screen::legend(legend, layout, out)?;
    for block in screen::intervals(&rows) {
        screen::interval_heading(
            &block[0],
            &format!("interval {}", env.interval.human()),
            layout,
            out,
        )?;
        let mut table = Table::new(vec![
            human::figure("PID"),
            human::name("COMM", 16),
            human::figure("HITS"),
            human::figure("MISSES"),
            human::figure("DIRTIES"),
            human::figure("READ_HIT%"),
            human::figure("WRITE_HIT%"),
        ]);
        // The statement ranks them: most misses first.
        for r in block {
            let get = |c: &str| screen::int(r, c).unwrap_or(0);
            table.row(vec![
                screen::text(r, "pid"),
                screen::text(r, "comm"),
                human::count(screen::int(r, "hits")),
                human::count(screen::int(r, "misses")),
                human::count(screen::int(r, "dirtied")),
                human::pct(screen::num(r, "hit_ratio_pct")),
                human::pct(write_hit_pct(
                    get("accesses"),
                    get("misses"),
                    get("dirtied"),
                )),
            ]);
        }
        table.write(layout, out)?;
        writeln!(out)?;
    }
    Ok(())
}

/// Of the pages dirtied, the share that were already cached: a page a
/// write adds to the cache is a miss that no lookup explains (writes are
/// not looked up), so misses beyond the pages looked up count as write
/// misses. An estimate, as BCC's is; `None` when nothing was dirtied.
pub fn write_hit_pct(accesses: i64, misses: i64, dirtied: i64) -> Option<f64> {
    if dirtied <= 0 {
        return None;
    }
    let write_misses = (misses - accesses).clamp(0, dirtied);
    Some(100.0 * (dirtied - write_misses) as f64 / dirtied as f64)
}
