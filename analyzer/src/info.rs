//! `hindsight info`: what a recording holds, from its description and the
//! Parquet footers [`Recording::open`] already read.
//!
//! Rows, bytes and the time range come from footers and row-group
//! statistics, so `info` costs the same on a minute or a week of data. The
//! one exception is the sum of `loss.lost`, read with a query, and only
//! when the loss table has rows at all.

use std::io::Write;

use anyhow::{Context, Result};
use arrow::array::{Array, AsArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type};
use hindsight_schemas::meta::{Retired, SliceOrigin};
use hindsight_schemas::tables::is_late_source;
use hindsight_schemas::time::rfc3339;
use hindsight_schemas::SCHEMA_VERSION;
use serde::Serialize;

use crate::catalog;
use crate::recording::Recording;

/// Everything `info` prints, in the shape `--format json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub dir: String,
    /// The bucket's URL when `dir` is the local copy of one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub host: String,
    /// Kernel of the latest session.
    pub kernel: Option<String>,
    /// Recorder version of the latest session.
    pub recorder_version: Option<String>,
    pub schema_version: u32,
    pub sessions: Vec<SessionSummary>,
    /// First and last event of any table, RFC 3339 UTC.
    pub start: Option<String>,
    pub end: Option<String>,
    pub duration_s: Option<f64>,
    pub tables: Vec<TableSummary>,
    /// Events lost: `loss.lost` summed over every source but `late:`.
    pub lost: i64,
    /// Timer rounds skipped: `loss.lost` of the `late:` sources.
    pub late_rounds: i64,
    /// The same by `loss.source`, largest first.
    pub lost_by_source: Vec<Loss>,
    /// Probes any session could not attach, each once.
    pub skipped_probes: Vec<String>,
    /// Periods retention deleted, merged across tables, oldest first.
    pub retired: Vec<RetiredPeriod>,
    /// Set when this recording is a `hindsight slice` of another.
    pub slice_of: Option<SliceOrigin>,
}

/// A stretch of time whose chunks retention deleted (from
/// `recording.json`'s `retired`, overlapping entries merged).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetiredPeriod {
    /// UTC, RFC 3339.
    pub from: String,
    pub to: String,
    /// `max-size`, `max-age`, each once.
    pub reasons: Vec<String>,
    pub files: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SessionSummary {
    pub started: String,
    pub stopped: Option<String>,
    pub kernel: String,
    pub boot_id: String,
    pub cpus: u32,
    pub recorder_version: String,
    pub events: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TableSummary {
    pub name: String,
    pub files: usize,
    pub rows: u64,
    /// On disk, all files of the table.
    pub bytes: u64,
    /// `None` for a table without rows.
    pub bytes_per_row: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Loss {
    pub source: String,
    pub lost: i64,
    /// When: the first and last interval with a loss of this source, RFC 3339 UTC.
    pub first: String,
    pub last: String,
}

/// Summarizes one recording; `partitions` bounds the loss query.
pub async fn summarize(rec: &Recording, partitions: usize) -> Result<Summary> {
    let meta = &rec.meta;
    let latest = meta.latest();
    let range = rec.time_range();
    let tables = rec
        .tables
        .iter()
        .map(|t| {
            let (rows, bytes) = (t.rows(), t.bytes());
            TableSummary {
                name: t.table.name.to_owned(),
                files: t.chunks.len(),
                rows,
                bytes,
                bytes_per_row: (rows > 0).then(|| bytes as f64 / rows as f64),
            }
        })
        .collect();
    let lost_by_source = losses(rec, partitions).await?;
    let mut skipped_probes: Vec<String> = Vec::new();
    for probe in meta.sessions.iter().flat_map(|s| &s.skipped_probes) {
        if !skipped_probes.contains(probe) {
            skipped_probes.push(probe.clone());
        }
    }
    Ok(Summary {
        dir: rec.dir.display().to_string(),
        url: crate::remote::url_of_copy(&rec.dir),
        host: meta.host.clone(),
        kernel: latest.map(|s| s.kernel.clone()),
        recorder_version: latest.map(|s| s.recorder_version.clone()),
        schema_version: meta.schema_version,
        sessions: meta
            .sessions
            .iter()
            .map(|s| SessionSummary {
                started: s.started.clone(),
                stopped: s.stopped.clone(),
                kernel: s.kernel.clone(),
                boot_id: s.boot_id.clone(),
                cpus: s.cpus,
                recorder_version: s.recorder_version.clone(),
                events: s.events.clone(),
            })
            .collect(),
        start: range.map(|(a, _)| rfc3339(a)),
        end: range.map(|(_, b)| rfc3339(b)),
        duration_s: range.map(|(a, b)| (b - a) as f64 / 1e9),
        tables,
        lost: lost_by_source
            .iter()
            .filter(|l| !is_late_source(&l.source))
            .map(|l| l.lost)
            .sum(),
        late_rounds: lost_by_source
            .iter()
            .filter(|l| is_late_source(&l.source))
            .map(|l| l.lost)
            .sum(),
        lost_by_source,
        skipped_probes,
        retired: retired_periods(&meta.retired),
        slice_of: meta.slice_of.clone(),
    })
}

/// Merges retention's per-table entries into periods of time: entries
/// whose spans overlap or touch are one period. Entries with unreadable
/// times are listed as they are.
pub fn retired_periods(retired: &[Retired]) -> Vec<RetiredPeriod> {
    let mut spans: Vec<(i64, i64, &Retired)> = Vec::new();
    let mut unreadable = Vec::new();
    for r in retired {
        match (
            crate::report::parse_time(&r.from),
            crate::report::parse_time(&r.to),
        ) {
            (Ok(a), Ok(b)) => spans.push((a, b.max(a), r)),
            _ => unreadable.push(r),
        }
    }
    spans.sort_by_key(|s| (s.0, s.1));
    let mut periods: Vec<(i64, i64, RetiredPeriod)> = Vec::new();
    for (from, to, r) in spans {
        match periods.last_mut() {
            Some((_, end, period)) if from <= *end => {
                if to > *end {
                    *end = to;
                    period.to = r.to.clone();
                }
                if !period.reasons.contains(&r.reason) {
                    period.reasons.push(r.reason.clone());
                }
                period.files += r.files;
                period.bytes += r.bytes;
            }
            _ => periods.push((
                from,
                to,
                RetiredPeriod {
                    from: r.from.clone(),
                    to: r.to.clone(),
                    reasons: vec![r.reason.clone()],
                    files: r.files,
                    bytes: r.bytes,
                },
            )),
        }
    }
    let mut out: Vec<RetiredPeriod> = periods.into_iter().map(|p| p.2).collect();
    out.extend(unreadable.into_iter().map(|r| RetiredPeriod {
        from: r.from.clone(),
        to: r.to.clone(),
        reasons: vec![r.reason.clone()],
        files: r.files,
        bytes: r.bytes,
    }));
    out
}

/// `loss.lost` summed by source; no query at all when the table is empty.
async fn losses(rec: &Recording, partitions: usize) -> Result<Vec<Loss>> {
    if rec.table("loss").is_none_or(|t| t.rows() == 0) {
        return Ok(Vec::new());
    }
    let ctx =
        catalog::context_for(std::slice::from_ref(rec), partitions).map_err(catalog::one_line)?;
    let sql =
        "SELECT source, SUM(lost) AS lost, CAST(MIN(ts) AS BIGINT) AS first, CAST(MAX(ts) AS BIGINT) AS last \
         FROM loss GROUP BY source ORDER BY lost DESC, source";
    let batches = catalog::query_batches(&ctx, sql)
        .await
        .map_err(catalog::one_line)
        .context("summing losses")?;
    let mut out = Vec::new();
    for batch in batches {
        // Casts make the reading independent of how DataFusion typed the
        // dictionary column and the sum.
        let source = cast(batch.column(0), &DataType::Utf8)?;
        let lost = cast(batch.column(1), &DataType::Int64)?;
        let first = cast(batch.column(2), &DataType::Int64)?;
        let last = cast(batch.column(3), &DataType::Int64)?;
        let (source, lost) = (source.as_string::<i32>(), lost.as_primitive::<Int64Type>());
        let (first, last) = (
            first.as_primitive::<Int64Type>(),
            last.as_primitive::<Int64Type>(),
        );
        for i in 0..batch.num_rows() {
            let name = if source.is_null(i) {
                ""
            } else {
                source.value(i)
            };
            out.push(Loss {
                source: name.to_owned(),
                lost: lost.value(i),
                first: rfc3339(first.value(i)),
                last: rfc3339(last.value(i)),
            });
        }
    }
    Ok(out)
}

/// One JSON object on one line.
pub fn write_json(summary: &Summary, mut out: impl Write) -> Result<()> {
    serde_json::to_writer(&mut out, summary)?;
    writeln!(out)?;
    Ok(())
}

/// The summary for a person to read.
pub fn write_text(s: &Summary, mut out: impl Write) -> Result<()> {
    let or_unknown = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".into());
    match &s.url {
        Some(url) => writeln!(out, "recording  {url} (copy in {})", s.dir)?,
        None => writeln!(out, "recording  {}", s.dir)?,
    }
    writeln!(out, "host       {}", s.host)?;
    writeln!(out, "kernel     {}", or_unknown(&s.kernel))?;
    writeln!(out, "recorder   {}", or_unknown(&s.recorder_version))?;
    writeln!(
        out,
        "schema     version {} (this hindsight reads up to {SCHEMA_VERSION})",
        s.schema_version
    )?;
    match (&s.start, &s.end, s.duration_s) {
        (Some(start), Some(end), Some(d)) => {
            writeln!(out, "time       {start} .. {end} ({})", human_duration(d))?
        }
        _ => writeln!(out, "time       no events")?,
    }
    if let Some(origin) = &s.slice_of {
        let pids = if origin.pids.is_empty() {
            String::new()
        } else {
            let pids: Vec<String> = origin.pids.iter().map(i32::to_string).collect();
            format!(", pids {}", pids.join(","))
        };
        writeln!(
            out,
            "slice of   {}, {} .. {}{pids} (made {})",
            origin.source, origin.from, origin.to, origin.made_at
        )?;
    }
    for r in &s.retired {
        writeln!(
            out,
            "retired    {} .. {} ({}, {} in {} files)",
            r.from,
            r.to,
            r.reasons.join(", "),
            human_bytes(r.bytes),
            r.files
        )?;
    }
    writeln!(out, "sessions   {}", s.sessions.len())?;
    for (i, x) in s.sessions.iter().enumerate() {
        let stopped = x.stopped.as_deref().unwrap_or("(not stopped)");
        writeln!(
            out,
            "  {:>2}  {} .. {}  kernel {}  boot {}  {} CPUs  recorder {}  events {}",
            i + 1,
            x.started,
            stopped,
            x.kernel,
            x.boot_id.get(..8).unwrap_or(&x.boot_id),
            x.cpus,
            x.recorder_version,
            if x.events.is_empty() {
                "-".into()
            } else {
                x.events.join(",")
            },
        )?;
    }
    writeln!(out, "tables")?;
    let width = s
        .tables
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(5)
        .max(5);
    writeln!(
        out,
        "  {:<width$}  {:>6}  {:>12}  {:>10}  {:>9}",
        "table", "files", "rows", "bytes", "bytes/row"
    )?;
    for t in &s.tables {
        let per_row = t.bytes_per_row.map_or("-".into(), |b| format!("{b:.1}"));
        writeln!(
            out,
            "  {:<width$}  {:>6}  {:>12}  {:>10}  {:>9}",
            t.name,
            t.files,
            t.rows,
            human_bytes(t.bytes),
            per_row
        )?;
    }
    if s.lost_by_source.is_empty() {
        writeln!(out, "losses     no events lost")?;
    } else {
        let events = match s.lost {
            0 => "no events lost".to_owned(),
            n => format!("{n} events lost"),
        };
        let rounds = match s.late_rounds {
            0 => String::new(),
            n => format!("; {n} timer rounds skipped (late: sources)"),
        };
        writeln!(out, "losses     {events}{rounds}")?;
        let source_width = s
            .lost_by_source
            .iter()
            .map(|l| l.source.len())
            .max()
            .unwrap_or(0);
        for l in &s.lost_by_source {
            let when = if l.first == l.last {
                l.first.clone()
            } else {
                format!("{} .. {}", l.first, l.last)
            };
            writeln!(out, "  {:<source_width$}  {:>12}  {when}", l.source, l.lost)?;
        }
    }
    if s.skipped_probes.is_empty() {
        writeln!(out, "skipped    no probes skipped")?;
    } else {
        writeln!(out, "skipped    {}", s.skipped_probes.join(", "))?;
    }
    Ok(())
}

/// A size for people: [`crate::human::bytes`] of a count of bytes.
pub(crate) fn human_bytes(n: u64) -> String {
    crate::human::bytes(Some(n as f64))
}

pub(crate) fn human_duration(seconds: f64) -> String {
    if seconds < 60.0 {
        return format!("{seconds:.3} s");
    }
    let total = seconds.round() as u64;
    let (h, m, s) = (total / 3600, total / 60 % 60, total % 60);
    if h > 0 {
        format!("{h} h {m:02} min {s:02} s")
    } else {
        format!("{m} min {s:02} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn humans_read_sizes_and_durations() {
        let cases = [
            (0, "0 B"),
            (1023, "1023 B"),
            (1536, "1.5 KiB"),
            (5 << 30, "5.0 GiB"),
        ];
        for (n, text) in cases {
            assert_eq!(human_bytes(n), text);
        }
        assert_eq!(human_duration(1.5), "1.500 s");
        assert_eq!(human_duration(125.0), "2 min 05 s");
        assert_eq!(human_duration(3725.0), "1 h 02 min 05 s");
    }

    #[test]
    fn retired_entries_merge_into_periods() {
        let entry = |table: &str, from: &str, to: &str, reason: &str, files, bytes| Retired {
            table: table.into(),
            from: from.into(),
            to: to.into(),
            deleted_at: "2026-11-30T18:00:00Z".into(),
            reason: reason.into(),
            files,
            bytes,
        };
        let retired = [
            entry(
                "counter",
                "2026-11-30T06:00:00Z",
                "2026-11-30T09:00:00Z",
                "max-size",
                3,
                300,
            ),
            entry(
                "sched_switch",
                "2026-11-30T06:00:00Z",
                "2026-11-30T12:00:00Z",
                "max-size",
                36,
                1000,
            ),
            entry(
                "counter",
                "2026-11-30T09:00:00Z",
                "2026-11-30T10:00:00Z",
                "max-age",
                3,
                100,
            ),
            entry(
                "loss",
                "2026-11-30T13:00:00Z",
                "2026-11-30T14:00:00Z",
                "max-age",
                1,
                1,
            ),
        ];
        let periods = retired_periods(&retired);
        assert_eq!(periods.len(), 2, "{periods:?}");
        assert_eq!(
            (periods[0].from.as_str(), periods[0].to.as_str()),
            ("2026-11-30T06:00:00Z", "2026-11-30T12:00:00Z")
        );
        assert_eq!(periods[0].reasons, ["max-size", "max-age"]);
        assert_eq!((periods[0].files, periods[0].bytes), (42, 1400));
        assert_eq!(periods[1].from, "2026-11-30T13:00:00Z");
    }
}
