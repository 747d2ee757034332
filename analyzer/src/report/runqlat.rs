//! `report runqlat`: run-queue latency (from a wakeup or a preemption to
//! the thread's next switch-in, the `runq_latency` view) as log2 histograms
//! in microseconds, like BCC's runqlat: per interval for the whole system (`kind` = `all`)
//! and for the `--top` processes that waited longest (`kind` = `process`).
//!
//! Slot `s` holds latencies of `us` whole microseconds with
//! `s = floor(log2(us))`, and `us` 0 and 1 in slot 0: the ranges `0 -> 1`,
//! `2 -> 3`, `4 -> 7`, ... of libbpf-tools' `runqlat` and `print_log2_hist`.

use std::io::Write;

use anyhow::Result;
use arrow::array::RecordBatch;
use serde_json::{Map, Value};

use super::{process_comm, screen, Env};
use crate::human::Layout;
use crate::output;

/// The report's one statement.
pub fn sql(env: &Env) -> String {
    let h = env.h();
    let pid_filter = match env.pid {
        Some(pid) => format!(" AND pid = {pid}"),
        None => String::new(),
    };
    let host_eq = |a: &str, b: &str| {
        if env.multi_host {
            format!("{a}.host = {b}.host AND ")
        } else {
            String::new()
        }
    };
    format!(
        "WITH waits AS (  -- every wait that ended in a run, with its log2 slot in microseconds
  SELECT {h}{bin} AS interval_start, ts, tid, pid, comm, latency_ns,
    CASE WHEN latency_ns < 2000 THEN 0
         ELSE CAST(floor(log2(CAST(latency_ns / 1000 AS DOUBLE))) AS BIGINT) END AS slot
  FROM {runq}
  WHERE {bounds}{pid_filter}
),
per_slot AS (  -- per interval, process and slot: small, whatever the number of waits
  SELECT {h}interval_start, pid, {slot_comm} AS comm,
    max(CASE WHEN tid = pid THEN ts END) AS main_ts, max(ts) AS last_ts,
    slot, count(*) AS count, sum(latency_ns) AS total_ns
  FROM waits
  GROUP BY {h}interval_start, pid, slot
),
ranked AS (  -- processes per interval, the longest total wait first, under one name
  -- (of the slots' names, the one process_comm would pick of all the waits)
  SELECT {h}interval_start, pid, comm,
    row_number() OVER (PARTITION BY {h}interval_start ORDER BY total_ns DESC, pid) AS rank
  FROM (
    SELECT {h}interval_start, pid, sum(total_ns) AS total_ns,
      last_value(comm ORDER BY CASE WHEN main_ts IS NULL THEN 0 ELSE 1 END, coalesce(main_ts, last_ts)) AS comm
    FROM per_slot GROUP BY {h}interval_start, pid
  ) per_process
),
{lost},
hist AS (
  SELECT {h}'all' AS kind, interval_start, CAST(NULL AS INT) AS pid, CAST(NULL AS VARCHAR) AS comm, slot,
    sum(count) AS count, sum(total_ns) AS total_ns
  FROM per_slot
  GROUP BY {h}interval_start, slot
  UNION ALL
  SELECT {ph}'process' AS kind, p.interval_start, p.pid, r.comm, p.slot, p.count, p.total_ns
  FROM ranked r JOIN per_slot p
    ON {host_rp}r.interval_start = p.interval_start AND r.pid = p.pid AND r.rank <= {top}
)
SELECT {hh}hist.kind, hist.interval_start, hist.pid, hist.comm,
  CASE WHEN hist.slot = 0 THEN 0 ELSE CAST(power(2, hist.slot) AS BIGINT) END AS usecs_low,
  CAST(power(2, hist.slot + 1) AS BIGINT) - 1 AS usecs_high,
  hist.count, hist.total_ns, coalesce(l.lost, 0) AS lost
FROM hist LEFT JOIN lost l ON {join}
ORDER BY {hh}hist.interval_start, hist.kind, hist.pid, hist.slot",
        bin = env.bin("ts"),
        slot_comm = process_comm("ts"),
        runq = env.paired("runq_latency"),
        bounds = env.event_bounds("ts"),
        lost = env.lost_cte(),
        ph = if env.multi_host { "p.host, " } else { "" },
        hh = if env.multi_host { "hist.host, " } else { "" },
        host_rp = host_eq("r", "p"),
        top = env.top,
        join = env.lost_join("hist"),
    )
}

/// BCC's layout: a block per interval and process, one line a slot, with
/// a bar of stars scaled to the block's largest count.
pub fn write_table(batches: &[RecordBatch], layout: &Layout, out: &mut impl Write) -> Result<()> {
    let rows = output::json_rows(batches)?;
    let key = |r: &Map<String, Value>| {
        (
            r.get("host").cloned(),
            r.get("interval_start").cloned(),
            r.get("kind").cloned(),
            r.get("pid").cloned(),
        )
    };
    let mut start = 0;
    while start < rows.len() {
        let block_key = key(&rows[start]);
        let end = rows[start..]
            .iter()
            .position(|r| key(r) != block_key)
            .map_or(rows.len(), |n| start + n);
        let block = &rows[start..end];
        let first = &block[0];
        let who = match first.get("kind").and_then(Value::as_str) {
            Some("process") => format!(
                "pid {} {}",
                first.get("pid").map_or("-".into(), Value::to_string),
                first.get("comm").and_then(Value::as_str).unwrap_or("-")
            ),
            _ => "all processes".into(),
        };
        screen::interval_heading(first, &who, layout, out)?;
        writeln!(
            out,
            "{:>20} : {:<8} |{:<40}|",
            "usecs", "count", "distribution"
        )?;
        let count = |r: &Map<String, Value>| r.get("count").and_then(Value::as_i64).unwrap_or(0);
        let max = block.iter().map(count).max().unwrap_or(1).max(1);
        for r in block {
            let low = r.get("usecs_low").and_then(Value::as_i64).unwrap_or(0);
            let high = r.get("usecs_high").and_then(Value::as_i64).unwrap_or(0);
            let n = count(r);
            let stars = ((n * 40 + max - 1) / max) as usize;
            writeln!(
                out,
                "{:>9} -> {:<8} : {:<8} |{:<40}|",
                low,
                high,
                n,
                "*".repeat(stars)
            )?;
        }
        writeln!(out)?;
        start = end;
    }
    if rows.is_empty() {
        writeln!(
            out,
            "no waits followed by a run in the range (is the sched group recorded?)"
        )?;
    }
    Ok(())
}
