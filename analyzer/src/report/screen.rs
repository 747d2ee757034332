//! What the reports' table formats share: reading a result's rows by
//! column name, cutting them into one block per host and interval, and
//! each block's heading with what the recorder lost in it. The tables
//! themselves are [`crate::human`]'s.

use std::io::Write;

use anyhow::Result;
use serde_json::{Map, Value};

use crate::human::{self, Layout};
use crate::output;

/// One result row, by column name (from [`crate::output::json_rows`]).
pub type Row = Map<String, Value>;

/// A column as text; `-` when null or absent.
pub fn text(row: &Row, column: &str) -> String {
    match row.get(column) {
        None | Some(Value::Null) => "-".into(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    }
}

/// A numeric column; `None` when null or absent.
pub fn num(row: &Row, column: &str) -> Option<f64> {
    row.get(column).and_then(Value::as_f64)
}

/// An integer column; `None` when null or absent.
pub fn int(row: &Row, column: &str) -> Option<i64> {
    row.get(column).and_then(Value::as_i64)
}

/// A text column; `None` when null or absent.
pub fn str<'a>(row: &'a Row, column: &str) -> Option<&'a str> {
    row.get(column).and_then(Value::as_str)
}

/// The rows cut into runs of the same host and interval, in their order.
pub fn intervals(rows: &[Row]) -> Vec<&[Row]> {
    let key = |r: &Row| (r.get("host").cloned(), r.get("interval_start").cloned());
    let mut blocks = Vec::new();
    let mut start = 0;
    while start < rows.len() {
        let k = key(&rows[start]);
        let len = rows[start..].iter().take_while(|r| key(r) == k).count();
        blocks.push(&rows[start..start + len]);
        start += len;
    }
    blocks
}

/// A block's heading, `== [host  ]start  LABEL ==`, with the events the
/// recorder lost in the interval on the same line (`LOST 7 events`, in red
/// on a terminal): the figures under it miss them.
pub fn interval_heading(
    first: &Row,
    label: &str,
    layout: &Layout,
    out: &mut impl Write,
) -> Result<()> {
    let host = str(first, "host")
        .map(|h| format!("{h}  "))
        .unwrap_or_default();
    let text = format!("{host}{}  {label}", text(first, "interval_start"));
    let lost = int(first, "lost").unwrap_or(0);
    if lost > 0 {
        writeln!(
            out,
            "{}{}{}",
            layout.bold(&format!("== {text}  ")),
            layout.warn(&format!("LOST {lost} events")),
            layout.bold(" ==")
        )?;
    } else {
        writeln!(out, "{}", layout.heading(&text))?;
    }
    Ok(())
}

/// The result's rows, or `None` after saying `nothing` (what was not found,
/// and why it may not have been) when there are none.
pub fn rows_or_say(
    batches: &[arrow::array::RecordBatch],
    nothing: &str,
    out: &mut impl Write,
) -> Result<Option<Vec<Row>>> {
    let rows = output::json_rows(batches)?;
    if rows.is_empty() {
        writeln!(out, "{nothing}")?;
        return Ok(None);
    }
    Ok(Some(rows))
}

/// A report's legend: what its columns mean, wrapped, then a blank line.
pub fn legend(text: &str, layout: &Layout, out: &mut impl Write) -> Result<()> {
    writeln!(out, "{}\n", human::wrap(text, layout))?;
    Ok(())
}
