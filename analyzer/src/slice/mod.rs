//! `hindsight slice`: a smaller, complete recording cut from another, to
//! attach to a ticket.
//!
//! The slice has the recorder's layout and encoding (`schemas::layout`:
//! one folder a table, chunk names, key-value metadata, writer properties,
//! each file sorted by its table's sort key), so every command, and DuckDB,
//! reads it like any recording. Which rows it keeps:
//!
//! - a table with a `ts` column: rows with `from <= ts < to`, read chunk by
//!   chunk (a chunk is skipped by its footer's `ts` range), one output chunk
//!   per source chunk that kept rows;
//! - with `--pid`: only rows whose process columns (`pid` and every
//!   `<role>_pid`, such as `prev_pid`, `next_pid`, `waker_pid`) hold one of
//!   the pids. A table without a process column (`counter`, `loss`) is kept
//!   whole for the window: it is about the system;
//! - cumulative tables (`counter`, `task_stat`): also, for each series with
//!   a sample in the window, its last sample in the ten minutes before
//!   `from`, so the window's first interval has the same baseline as in the
//!   source and every delta report over the window agrees with it;
//! - `process`: also, for every process or thread id found in the kept rows
//!   (columns `pid`, `tid`, `ppid`, `<role>_pid`, `<role>_tid`), that
//!   thread's latest `process` row before `from`, so names and command lines
//!   of everything in the window are known;
//! - reference tables, when this build has them: `stack`, only the stacks
//!   whose `stack_id` a kept row uses (columns `stack_id` and
//!   `<role>_stack_id`), and `frame`, only the frames those stacks use, each
//!   once (the recorder may repeat them across chunks). Any
//!   other table without `ts` is copied whole.
//!
//! `recording.json` is the source's, with only the sessions that overlap
//! the window, no `retired` list (what retention deleted is not in the
//! slice's scope) and `slice_of` saying where it came from.
//!
//! The output is written into a hidden sibling directory
//! (`.<name>.<pid>.tmp`) with the recorder's protocol per file (temp name,
//! close, fsync, rename), and renamed to its name only when complete: a
//! failure leaves no directory that looks like a recording. Memory is one
//! source chunk's kept rows (they are sorted), not a table.
//!
//! This module holds the rules (which rows, as DataFusion queries);
//! `files` holds the output directory and the chunk writer.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use datafusion::catalog::TableProvider;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::datasource::MemTable;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::prelude::{SessionConfig, SessionContext};
use hindsight_schemas::meta::{RecordingMeta, SliceOrigin};
use hindsight_schemas::time::rfc3339;
use hindsight_schemas::{layout, ColumnType, Table, TABLES};

use crate::catalog;
use crate::recording::{Chunk, Recording};
use crate::report::{self, timestamp, LOOKBACK_NS};
use crate::when::When;
use crate::UsageError;

mod files;

use crate::chunk_file::{stamp_of, Stamp};
use files::{check_output, write_chunk, write_file, Staging};

/// What to cut.
#[derive(Clone, Debug)]
pub struct Request {
    pub source: PathBuf,
    /// Default: the source's first event.
    pub from: Option<When>,
    /// Default: just after the source's last event.
    pub to: Option<When>,
    /// Empty: every process.
    pub pids: Vec<i32>,
    pub output: PathBuf,
}

/// What was written, per table.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub from: i64,
    pub to: i64,
    /// `(table, files, rows)`, every table that kept rows.
    pub tables: Vec<(&'static str, usize, u64)>,
}

/// Cuts the slice; see the module doc.
pub async fn run(req: &Request, threads: usize) -> Result<Outcome> {
    let source = Recording::open(&req.source)?;
    check_output(&req.output)?;
    let range = source.time_range();
    if range.is_none() {
        return Err(UsageError(format!("{}: no events to slice", req.source.display())).into());
    }
    let from = req.from.unwrap_or(When::AfterStart(0));
    let to = req.to.map_or_else(
        // Just after the last event, so the last event is in the slice.
        || Ok(range.map_or(0, |(_, end)| end.saturating_add(1))),
        |w| w.resolve(range),
    );
    let (from, to) = match (from.resolve(range), to) {
        (Ok(f), Ok(t)) if f < t => (f, t),
        (Ok(f), Ok(t)) => {
            return Err(UsageError(format!(
                "--from {} is not before --to {}",
                rfc3339(f),
                rfc3339(t)
            ))
            .into())
        }
        (Err(e), _) | (_, Err(e)) => return Err(UsageError(e).into()),
    };

    let staging = Staging::new(&req.output)?;
    let mut slicer = Slicer {
        source: &source,
        from,
        to,
        pids: &req.pids,
        out: staging.dir.clone(),
        threads: threads.max(1),
        written: Vec::new(),
    };
    let meta = slice_meta(&source, req, from, to);
    let meta_path = staging.dir.join(layout::RECORDING_FILE);
    write_file(&meta_path, meta.to_json().as_bytes())?;

    for &table in TABLES {
        if table.name == "process" || is_reference(table) {
            continue;
        }
        if has_ts(table) {
            slicer.window(table).await?;
        } else {
            slicer.copy_whole(table).await?;
        }
    }
    if let Some(process) = hindsight_schemas::tables::table("process") {
        slicer.window(process).await?;
        slicer.process_before(process).await?;
    }
    slicer.references().await?;

    File::open(&staging.dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("fsync {}", staging.dir.display()))?;
    let written = std::mem::take(&mut slicer.written);
    staging.commit()?;
    // What was renamed must read as a recording.
    Recording::open(&req.output)?;
    Ok(Outcome {
        from,
        to,
        tables: written,
    })
}

/// The source's description, narrowed to the window.
fn slice_meta(source: &Recording, req: &Request, from: i64, to: i64) -> RecordingMeta {
    let mut meta = source.meta.clone();
    meta.sessions.retain(|s| {
        let started = report::parse_time(&s.started).unwrap_or(i64::MIN);
        let stopped = s
            .stopped
            .as_deref()
            .map_or(Ok(i64::MAX), report::parse_time);
        started < to && stopped.unwrap_or(i64::MAX) >= from
    });
    meta.retired.clear();
    meta.slice_of = Some(SliceOrigin {
        source: req.source.display().to_string(),
        from: rfc3339(from),
        to: rfc3339(to),
        pids: req.pids.clone(),
        made_at: rfc3339(chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0)),
    });
    meta
}

fn has_ts(table: &Table) -> bool {
    table
        .column("ts")
        .is_some_and(|c| c.kind == ColumnType::Timestamp)
}

/// `stack` and `frame` are cut by what the kept rows use, not by time.
fn is_reference(table: &Table) -> bool {
    matches!(table.name, "stack" | "frame")
}

/// The columns that name a process: `pid` and `<role>_pid`.
fn process_columns(table: &Table) -> Vec<&'static str> {
    table
        .columns
        .iter()
        .filter(|c| c.kind == ColumnType::Int32 && (c.name == "pid" || c.name.ends_with("_pid")))
        .map(|c| c.name)
        .collect()
}

/// The columns that name a process or a thread, whose `process` rows
/// before the window the slice keeps.
fn id_columns(table: &Table) -> Vec<&'static str> {
    table
        .columns
        .iter()
        .filter(|c| {
            c.kind == ColumnType::Int32
                && (matches!(c.name, "pid" | "tid" | "ppid")
                    || c.name.ends_with("_pid")
                    || c.name.ends_with("_tid"))
        })
        .map(|c| c.name)
        .collect()
}

/// The columns that reference a stack: `stack_id` and `<role>_stack_id`.
fn stack_columns(table: &Table) -> Vec<&'static str> {
    table
        .columns
        .iter()
        .filter(|c| c.name == "stack_id" || c.name.ends_with("_stack_id"))
        .map(|c| c.name)
        .collect()
}

/// The series of a cumulative table, whose last sample before the window
/// is kept as a baseline: the keys the reports' deltas use.
fn series_keys(table: &Table) -> Option<&'static [&'static str]> {
    match table.name {
        "counter" => Some(report::COUNTER_SERIES),
        "task_stat" => Some(report::TASK_SERIES),
        _ => None,
    }
}

fn quoted(column: &str) -> String {
    format!("\"{column}\"")
}

fn select_columns(table: &Table) -> String {
    table
        .columns
        .iter()
        .map(|c| quoted(c.name))
        .collect::<Vec<_>>()
        .join(", ")
}

fn order_by(table: &Table) -> String {
    if table.sort_key.is_empty() {
        return String::new();
    }
    let keys: Vec<String> = table
        .sort_key
        .iter()
        .map(|k| format!("{} ASC NULLS LAST", quoted(k)))
        .collect();
    format!(" ORDER BY {}", keys.join(", "))
}

struct Slicer<'a> {
    source: &'a Recording,
    from: i64,
    to: i64,
    pids: &'a [i32],
    out: PathBuf,
    threads: usize,
    /// `(table, files, rows)` written so far.
    written: Vec<(&'static str, usize, u64)>,
}

impl<'a> Slicer<'a> {
    fn context(&self) -> SessionContext {
        SessionContext::new_with_config(SessionConfig::new().with_target_partitions(self.threads))
    }

    fn chunks(&self, table: &Table) -> &'a [Chunk] {
        self.source
            .table(table.name)
            .map_or(&[][..], |t| t.chunks.as_slice())
    }

    /// Chunks that may hold rows with `lo <= ts < hi`.
    fn chunks_between(&self, table: &Table, lo: i64, hi: i64) -> Vec<&'a Chunk> {
        self.chunks(table)
            .iter()
            .filter(|c| match c.ts_range {
                Some((min, max)) => min < hi && max >= lo,
                None => c.rows > 0,
            })
            .collect()
    }

    /// The `--pid` condition on `table`'s rows; `TRUE` without `--pid` or
    /// for a system-wide table.
    fn pid_filter(&self, table: &Table) -> String {
        let columns = process_columns(table);
        if self.pids.is_empty() || columns.is_empty() {
            return "TRUE".into();
        }
        let list = crate::report::pid_list(self.pids);
        let terms: Vec<String> = columns
            .iter()
            .map(|c| format!("{} IN ({list})", quoted(c)))
            .collect();
        format!("({})", terms.join(" OR "))
    }

    /// The rows of `table` in the window, one output chunk per source
    /// chunk; for a cumulative table, the baseline samples too.
    async fn window(&mut self, table: &'static Table) -> Result<()> {
        let condition = format!(
            "\"ts\" >= {} AND \"ts\" < {} AND {}",
            timestamp(self.from),
            timestamp(self.to),
            self.pid_filter(table)
        );
        let sql = format!(
            "SELECT {} FROM t WHERE {condition}{}",
            select_columns(table),
            order_by(table)
        );
        let mut kept = Vec::new();
        for chunk in self.chunks_between(table, self.from, self.to) {
            let ctx = self.context();
            ctx.register_table("t", files_table(table, std::slice::from_ref(&chunk.path))?)?;
            let stream = query(&ctx, &sql).await?;
            let stamp = stamp_of(&chunk.path, self.source);
            kept.extend(self.write(table, stream, &stamp).await?);
        }
        if let Some(keys) = series_keys(table) {
            let chunks = self.chunks_between(table, self.from - LOOKBACK_NS, self.from);
            self.baseline(table, keys, &chunks, &kept).await?;
        }
        Ok(())
    }

    /// The last sample in the lookback before the window of each series
    /// that has a sample in the window (`kept`: the slice's files of
    /// `table`): what its first delta in the window subtracts.
    async fn baseline(
        &mut self,
        table: &'static Table,
        keys: &[&str],
        chunks: &[&Chunk],
        kept: &[PathBuf],
    ) -> Result<()> {
        if chunks.is_empty() || kept.is_empty() {
            return Ok(());
        }
        let paths: Vec<PathBuf> = chunks.iter().map(|c| c.path.clone()).collect();
        let ctx = self.context();
        ctx.register_table("t", files_table(table, &paths)?)?;
        ctx.register_table("w", files_table(table, kept)?)?;
        // One string per series, nulls included (a NUL byte never occurs
        // in a name), so an uncorrelated IN finds the series in the window.
        let series = keys
            .iter()
            .map(|k| format!("coalesce(CAST({} AS VARCHAR), chr(0))", quoted(k)))
            .collect::<Vec<_>>()
            .join(", '/', ");
        let keys: Vec<String> = keys.iter().map(|k| quoted(k)).collect();
        let sql = format!(
            "SELECT {cols} FROM (
               SELECT *, row_number() OVER (PARTITION BY {keys} ORDER BY \"ts\" DESC) AS hs_rank
               FROM t WHERE \"ts\" >= {lo} AND \"ts\" < {from} AND {pids}
             ) WHERE hs_rank = 1 AND concat({series}) IN (SELECT concat({series}) FROM w){order}",
            cols = select_columns(table),
            keys = keys.join(", "),
            lo = timestamp(self.from - LOOKBACK_NS),
            from = timestamp(self.from),
            pids = self.pid_filter(table),
            order = order_by(table),
        );
        let stream = query(&ctx, &sql).await?;
        let stamp = stamp_of(&chunks[chunks.len() - 1].path, self.source);
        self.write(table, stream, &stamp).await?;
        Ok(())
    }

    /// A table this build knows without `ts` and without a rule: all of it.
    async fn copy_whole(&mut self, table: &'static Table) -> Result<()> {
        let sql = format!("SELECT {} FROM t{}", select_columns(table), order_by(table));
        for chunk in self.chunks(table) {
            let ctx = self.context();
            ctx.register_table("t", files_table(table, std::slice::from_ref(&chunk.path))?)?;
            let stream = query(&ctx, &sql).await?;
            let stamp = stamp_of(&chunk.path, self.source);
            self.write(table, stream, &stamp).await?;
        }
        Ok(())
    }

    /// The slice so far as a session, to find what its rows reference.
    fn output_context(&self) -> Result<SessionContext> {
        let out = Recording::open(&self.out)?;
        catalog::context_for(std::slice::from_ref(&out), self.threads).map_err(catalog::one_line)
    }

    fn source_context(&self) -> Result<SessionContext> {
        catalog::context_for(std::slice::from_ref(self.source), self.threads)
            .map_err(catalog::one_line)
    }

    /// Every distinct value of `columns` over the slice's tables, as the
    /// one-column table `name` in `into`. False when no table has such a column.
    async fn collect_ids(
        &self,
        columns: fn(&Table) -> Vec<&'static str>,
        name: &str,
        into: &SessionContext,
    ) -> Result<bool> {
        let parts: Vec<String> = TABLES
            .iter()
            .flat_map(|t| {
                columns(t)
                    .into_iter()
                    .map(move |c| format!("SELECT {} AS id FROM {}", quoted(c), t.name))
            })
            .collect();
        if parts.is_empty() {
            return Ok(false);
        }
        let sql = format!(
            "SELECT DISTINCT id FROM ({}) WHERE id IS NOT NULL",
            parts.join(" UNION ALL ")
        );
        let df = self
            .output_context()?
            .sql(&sql)
            .await
            .map_err(catalog::one_line)?;
        let schema = Arc::new(df.schema().as_arrow().clone());
        let batches = df.collect().await.map_err(catalog::one_line)?;
        into.register_table(name, Arc::new(MemTable::try_new(schema, vec![batches])?))?;
        Ok(true)
    }

    /// For every process and thread id in the slice, its thread's latest
    /// `process` row before the window.
    async fn process_before(&mut self, process: &'static Table) -> Result<()> {
        let ctx = self.source_context()?;
        if !self.collect_ids(id_columns, "hs_referenced", &ctx).await? {
            return Ok(());
        }
        let sql = format!(
            "SELECT {cols} FROM (
               SELECT *, row_number() OVER (PARTITION BY \"tid\" ORDER BY \"ts\" DESC) AS hs_rank
               FROM process
               WHERE \"ts\" < {from} AND \"tid\" IN (SELECT id FROM hs_referenced)
             ) WHERE hs_rank = 1{order}",
            cols = select_columns(process),
            from = timestamp(self.from),
            order = order_by(process),
        );
        let stream = query(&ctx, &sql).await?;
        let stamp = self.latest_stamp();
        self.write(process, stream, &stamp).await?;
        Ok(())
    }

    /// `stack`: the stacks kept rows use; `frame`: the frames those use.
    /// Looked up by name, so it works once the tables exist in `schemas`.
    ///
    /// The tables do not exist on the branch this was written on: its test
    /// (`only_the_stacks_and_frames_kept_rows_use_are_kept`) runs in full
    /// once they do, and was run against the `stack`/`frame`/`cpu_sample`
    /// definitions of the stacks branch.
    async fn references(&mut self) -> Result<()> {
        let Some(stack) = hindsight_schemas::tables::table("stack") else {
            return Ok(());
        };
        let ctx = self.source_context()?;
        if !self.collect_ids(stack_columns, "hs_stacks", &ctx).await? {
            return Ok(());
        }
        let kept_stacks = "SELECT id FROM hs_stacks";
        // The recorder may write a stack or frame in more than one chunk
        // (readers deduplicate): the slice holds each once.
        let sql = format!(
            "SELECT DISTINCT {} FROM stack WHERE \"stack_id\" IN ({kept_stacks}){}",
            select_columns(stack),
            order_by(stack)
        );
        let stamp = self.latest_stamp();
        let stream = query(&ctx, &sql).await?;
        self.write(stack, stream, &stamp).await?;
        if let Some(frame) = hindsight_schemas::tables::table("frame") {
            let sql = format!(
                "SELECT DISTINCT {} FROM frame WHERE \"frame_id\" IN \
                 (SELECT \"frame_id\" FROM stack WHERE \"stack_id\" IN ({kept_stacks})){}",
                select_columns(frame),
                order_by(frame)
            );
            let stream = query(&ctx, &sql).await?;
            self.write(frame, stream, &stamp).await?;
        }
        Ok(())
    }

    /// The stamp of files not cut from one source chunk: the latest
    /// session kept.
    fn latest_stamp(&self) -> Stamp {
        let session = self.source.meta.latest();
        Stamp {
            host: self.source.meta.host.clone(),
            boot_id: session.map(|s| s.boot_id.clone()).unwrap_or_default(),
            recorder_version: session
                .map(|s| s.recorder_version.clone())
                .unwrap_or_default(),
        }
    }

    /// Writes `stream` as the next chunk of `table` and returns its path;
    /// nothing when it is empty.
    async fn write(
        &mut self,
        table: &'static Table,
        stream: SendableRecordBatchStream,
        stamp: &Stamp,
    ) -> Result<Option<PathBuf>> {
        let seq = self
            .written
            .iter()
            .find(|w| w.0 == table.name)
            .map_or(0, |w| w.1);
        let Some((path, rows)) =
            write_chunk(&self.out, table, stream, stamp, seq, self.from).await?
        else {
            return Ok(None);
        };
        match self.written.iter_mut().find(|w| w.0 == table.name) {
            Some(w) => {
                w.1 += 1;
                w.2 += rows;
            }
            None => self.written.push((table.name, 1, rows)),
        }
        Ok(Some(path))
    }
}

/// A table over some chunk files of one table, with the schema from `schemas`.
fn files_table(table: &Table, paths: &[PathBuf]) -> Result<Arc<dyn TableProvider>> {
    let urls = paths
        .iter()
        .map(|p| {
            let absolute = std::path::absolute(p)?;
            let url = url::Url::from_file_path(&absolute)
                .map_err(|()| anyhow::anyhow!("{}: cannot be expressed as a URL", p.display()))?;
            Ok(ListingTableUrl::try_new(url, None)?)
        })
        .collect::<Result<Vec<_>>>()?;
    let options = ListingOptions::new(Arc::new(ParquetFormat::default()))
        .with_file_extension(format!(".{}", layout::PARQUET_EXT));
    let config = ListingTableConfig::new_with_multi_paths(urls)
        .with_listing_options(options)
        .with_schema(table.schema());
    Ok(Arc::new(ListingTable::try_new(config)?))
}

async fn query(ctx: &SessionContext, sql: &str) -> Result<SendableRecordBatchStream> {
    ctx.sql(sql)
        .await
        .map_err(catalog::one_line)?
        .execute_stream()
        .await
        .map_err(catalog::one_line)
}

/// Distinct pids given, sorted: `--pid 3 --pid 1,3` is `[1, 3]`.
pub fn normalize_pids(pids: &[i32]) -> Vec<i32> {
    pids.iter()
        .copied()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// What `slice` prints on stdout: where the slice is, its window, and per
/// table the files and rows kept.
pub fn write_outcome(req: &Request, outcome: &Outcome, mut out: impl std::io::Write) -> Result<()> {
    writeln!(
        out,
        "slice {} of {}: {} .. {}{}",
        req.output.display(),
        req.source.display(),
        rfc3339(outcome.from),
        rfc3339(outcome.to),
        if req.pids.is_empty() {
            String::new()
        } else {
            format!(
                "  pids {}",
                req.pids
                    .iter()
                    .map(i32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            )
        }
    )?;
    for (table, files, rows) in &outcome.tables {
        writeln!(out, "  {table:<14} {files:>4} files  {rows:>12} rows")?;
    }
    Ok(())
}
