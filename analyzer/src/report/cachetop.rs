//! `report cachetop`: page-cache hits, misses and dirtied pages per
//! interval and process, like BCC's cachetop, after the fact.
//!
//! `page_cache` rows are already counts per recorder interval (not
//! cumulative), so an interval sums the rows whose `ts` (the end of the
//! recorder's interval) falls in it. Hits are `accesses - misses` (never
//! below zero); the hit ratio is hits as a % of accesses. `fault_around`
//! is the pages of the windows mmap faults mapped around themselves, kept
//! apart from accesses (the kernel does not say how many it mapped). All in
//! pages.

use super::{select_list, ColumnDef, Env};

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
r AS (  -- the busiest processes first
  SELECT *,
    greatest(accesses - misses, 0) AS hits,
    CASE WHEN accesses > 0 THEN 100.0 * greatest(accesses - misses, 0) / accesses END
      AS hit_ratio_pct,
    row_number() OVER (PARTITION BY {h}interval_start ORDER BY accesses + dirtied DESC, pid)
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
