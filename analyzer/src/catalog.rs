//! Recordings as DataFusion tables.
//!
//! Every table of `hindsight_schemas::all_tables` (the recorded ones and
//! the derived ones) is registered, always, with
//! the schema from `schemas` rather than one inferred from files: a table
//! with no file yet still has its columns, and a file written before a
//! nullable column was added reads with that column null.
//!
//! - One recording: each table is a `ListingTable` over `<dir>/<table>/`
//!   that lists only `*.parquet`, so the hidden `.<name>.parquet.tmp` of a
//!   chunk being written is never opened. A missing folder is an empty table.
//! - A recording being written: the rows of its open chunk are in hidden
//!   journals (`.<name>.parquet.journal`, see `hindsight_schemas::journal`).
//!   Their complete entries are read when the session opens and the table
//!   becomes the union of the closed chunks (as listed by `Recording::open`,
//!   a snapshot, so a chunk that closes meanwhile is not read twice) and a
//!   memory table of the journals' rows. A torn last entry is skipped; a
//!   journal whose chunk is already in place is skipped.
//! - Several recordings: each table is the `UNION ALL` of the recordings'
//!   tables with a `host` column (Utf8, last, where a `host=<name>/`
//!   partition column would be) holding [`host_labels`].
//!
//! - With `--debug-dir`, `frame` is a view that names, from those debug
//!   files, the frames the recorder left unnamed (see [`crate::debug_names`]).
//!
//! Then every helper view of `hindsight_schemas::VIEWS` (`cpu_time`,
//! `off_cpu`, `runq_latency`, `counter_rate`) is defined over those tables,
//! with `host` in its partitions when there are several recordings.
//!
//! Row order is not declared to DataFusion: `schemas` promises sorting
//! within a row group only, and a wrong declared order gives wrong results.
//!
//! - On a Ballista cluster (`--cluster`, [`set_cluster`]) the session plans
//!   here and runs there: Ballista's scheduler and executors know only the
//!   standard Parquet format, so each table lists its closed chunks by URL
//!   (`s3://` for a copy of a bucket, `file://` otherwise) with statistics
//!   off, which is what keeps the scheduler from declaring each file's
//!   order (the reason for [`ChunkFormat`]). Journals and `--debug-dir`
//!   are local state the cluster cannot see, so they are refused.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use ballista::extension::SessionStateExt;
use datafusion::catalog::TableProvider;
use datafusion::common::TableReference;
use datafusion::datasource::empty::EmptyTable;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::datasource::provider_as_source;
use datafusion::datasource::{MemTable, ViewTable};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{FairSpillPool, TrackConsumersPool};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::{ident, lit, LogicalPlanBuilder};
use datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};
use hindsight_schemas::{all_tables, journal, layout, tables::FRAME, VIEWS};

use crate::chunk_format::ChunkFormat;
use crate::debug_names;
use crate::recording::{Recording, TableFiles};
use crate::remote;

/// The name of the column that tells recordings apart when several are open.
pub const HOST_COLUMN: &str = "host";

/// Partitions (and worker threads) when the caller does not choose: the
/// machine's CPUs, at most 4, so a query on a shared 2-core host leaves
/// room for the recorder.
pub fn default_partitions() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(4)
}

/// The memory every query of this process may hold when the caller does
/// not choose (`--memory-limit`): well under this 2-core, 24 GiB class of
/// machine, where the recorder and the services it watches run too.
pub const DEFAULT_MEMORY_LIMIT: u64 = 1 << 30;

/// The one memory budget of this process's queries, set once from
/// `--memory-limit` before the first query ([`set_memory_limit`]).
static RUNTIME: OnceLock<(u64, Arc<RuntimeEnv>)> = OnceLock::new();

/// Sets the memory all queries of this process share: operators that can
/// (sorts, joins, aggregations) spill to files in a directory of the
/// temp directory (`TMPDIR`) past it, made at the first
/// spill and gone with [`remove_spill_dir`]; a query that still cannot fit
/// fails with [`one_line`]'s message naming the limit. Only the first call
/// counts.
pub fn set_memory_limit(bytes: u64) -> Result<()> {
    // The default disk manager makes its directory at the first spill; one
    // given a path makes it at once, and every command left it behind.
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(TrackConsumersPool::new(
            FairSpillPool::new(usize::try_from(bytes).unwrap_or(usize::MAX)),
            NonZeroUsize::new(3).expect("nonzero"),
        )))
        .build_arc()?;
    let _ = RUNTIME.set((bytes, runtime));
    Ok(())
}

/// Removes the directory spills went to, if any query spilled. The runtime
/// lives in a static that is never dropped, so its directory would outlive
/// the process; call this once the command's last query is done.
pub fn remove_spill_dir() {
    let Some((_, runtime)) = RUNTIME.get() else {
        return;
    };
    for dir in runtime.disk_manager.temp_dir_paths() {
        // Best effort: a leftover empty directory in TMPDIR is no reason to
        // fail a command whose answer was already written.
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn runtime() -> Result<&'static (u64, Arc<RuntimeEnv>)> {
    if RUNTIME.get().is_none() {
        set_memory_limit(DEFAULT_MEMORY_LIMIT)?;
    }
    Ok(RUNTIME.get().expect("set above"))
}

/// The Ballista scheduler every query of this process runs on
/// (`--cluster`), as `http://HOST:PORT`; unset, queries run here.
static CLUSTER: OnceLock<String> = OnceLock::new();

/// The port of a Ballista scheduler's address when `df://HOST` gives none.
pub const DEFAULT_SCHEDULER_PORT: u16 = 50050;

/// Parses `--cluster`: `df://HOST[:PORT]` to the `http://HOST:PORT` the
/// Ballista client connects to.
pub fn parse_cluster_url(text: &str) -> std::result::Result<String, String> {
    let url =
        url::Url::parse(text).map_err(|e| format!("'{text}': {e}, expected df://HOST[:PORT]"))?;
    if url.scheme() != "df" {
        return Err(format!("'{text}': expected df://HOST[:PORT]"));
    }
    let Some(host) = url.host_str().filter(|h| !h.is_empty()) else {
        return Err(format!("'{text}': no host, expected df://HOST[:PORT]"));
    };
    if !matches!(url.path(), "" | "/") {
        return Err(format!(
            "'{text}': a scheduler's address has no path, expected df://HOST[:PORT]"
        ));
    }
    let port = url.port().unwrap_or(DEFAULT_SCHEDULER_PORT);
    Ok(format!("http://{host}:{port}"))
}

/// Makes every later session run its queries on the Ballista scheduler
/// at `scheduler` (from [`parse_cluster_url`]). Only the first call counts.
pub fn set_cluster(scheduler: String) {
    let _ = CLUSTER.set(scheduler);
}

/// The scheduler queries run on, if `--cluster` was given.
pub fn cluster() -> Option<&'static str> {
    CLUSTER.get().map(String::as_str)
}

/// A session with every table of `recordings` registered.
pub fn context_for(recordings: &[Recording], partitions: usize) -> Result<SessionContext> {
    let config = SessionConfig::new()
        .with_target_partitions(partitions.max(1))
        .with_information_schema(true);
    let runtime = Arc::clone(&runtime()?.1);
    let ctx = match cluster() {
        None => SessionContext::new_with_config_rt(config, runtime),
        Some(scheduler) => {
            // The scheduler lists the files and plans the scans; with
            // statistics it would take each file's order from its
            // sorting_columns, which hold within a row group only.
            let config = config.set_bool("datafusion.execution.collect_statistics", false);
            let mut state = SessionStateBuilder::new()
                .with_config(config)
                .with_runtime_env(runtime)
                .with_default_features()
                .build()
                .upgrade_for_ballista(scheduler.to_owned())?;
            // Ballista 55's adaptive planner re-plans a window's input
            // after a shuffle and sorts it without one of its PARTITION BY
            // columns; the stage then fails ("Expects PARTITION BY
            // expression to be ordered", report atop). The static planner
            // keeps DataFusion's plan.
            state
                .config_mut()
                .options_mut()
                .set("ballista.planner.adaptive.enabled", "false")?;
            SessionContext::new_with_state(state)
        }
    };
    match recordings {
        [] => return Err(DataFusionError::Plan("no recording to open".into())),
        [one] => {
            for files in &one.tables {
                let provider = table_provider(files)?;
                if files.table.name == FRAME.name && debug_names::active() {
                    let plan = LogicalPlanBuilder::scan(
                        "frame_as_recorded",
                        provider_as_source(provider),
                        None,
                    )?
                    .build()?;
                    let named = debug_names::named_frames(plan)?;
                    ctx.register_table(FRAME.name, Arc::new(ViewTable::new(named, None)))?;
                } else {
                    ctx.register_table(files.table.name, provider)?;
                }
            }
        }
        many => {
            let hosts = host_labels(many);
            for (i, table) in all_tables().enumerate() {
                let mut union: Option<LogicalPlanBuilder> = None;
                for (part_no, (rec, host)) in many.iter().zip(&hosts).enumerate() {
                    let files = &rec.tables[i];
                    debug_assert_eq!(files.table.name, table.name);
                    let mut columns: Vec<_> = table.columns.iter().map(|c| ident(c.name)).collect();
                    columns.push(lit(host.as_str()).alias(HOST_COLUMN));
                    let part = LogicalPlanBuilder::scan(
                        // A private name per part; only the union is registered.
                        TableReference::bare(format!("{}_{part_no}", table.name)),
                        provider_as_source(table_provider(files)?),
                        None,
                    )?
                    .project(columns)?
                    .build()?;
                    union = Some(match union {
                        None => LogicalPlanBuilder::from(part),
                        Some(u) => u.union(part)?,
                    });
                }
                let mut plan = union.expect("two or more recordings").build()?;
                if table.name == FRAME.name && debug_names::active() {
                    plan = debug_names::named_frames(plan)?;
                }
                ctx.register_table(table.name, Arc::new(ViewTable::new(plan, None)))?;
            }
        }
    }
    register_views(&ctx, recordings.len() > 1)?;
    Ok(ctx)
}

/// Registers every helper view of `hindsight_schemas::VIEWS` over the
/// tables already in `ctx`. Planning a view reads no data.
fn register_views(ctx: &SessionContext, multi_host: bool) -> Result<()> {
    for view in VIEWS {
        let plan = futures::executor::block_on(ctx.sql(&view.sql(multi_host)))
            .map_err(|e| e.context(format!("defining view {}", view.name)))?
            .into_unoptimized_plan();
        ctx.register_table(view.name, Arc::new(ViewTable::new(plan, None)))?;
    }
    Ok(())
}

/// The table provider for one table of one recording.
fn table_provider(files: &TableFiles) -> Result<Arc<dyn TableProvider>> {
    if cluster().is_some() {
        return cluster_table_provider(files);
    }
    let schema = files.table.schema();
    if !files.dir.is_dir() {
        return Ok(Arc::new(EmptyTable::new(schema)));
    }
    let format = Arc::new(ChunkFormat::default());
    let journaled = journal_rows(files)?;
    if journaled.is_empty() {
        return Ok(listing_table(vec![dir_url(&files.dir)?], format, schema)?);
    }
    let live = Arc::new(MemTable::try_new(schema.clone(), vec![journaled])?);
    if files.chunks.is_empty() {
        return Ok(live);
    }
    let urls = files
        .chunks
        .iter()
        .map(|chunk| file_url(&chunk.path))
        .collect::<Result<Vec<_>>>()?;
    let closed = listing_table(urls, format, schema)?;
    let name = files.table.name;
    let plan = LogicalPlanBuilder::scan(
        TableReference::bare(format!("{name}_closed")),
        provider_as_source(closed),
        None,
    )?
    .union(
        LogicalPlanBuilder::scan(
            TableReference::bare(format!("{name}_journal")),
            provider_as_source(live),
            None,
        )?
        .build()?,
    )?
    .build()?;
    Ok(Arc::new(ViewTable::new(plan, None)))
}

/// The table provider for one table of one recording whose queries run on
/// a Ballista cluster: its closed chunks by URL, in plain Parquet. A copy
/// of a bucket lists its chunks there (`recording::list_in_bucket`).
fn cluster_table_provider(files: &TableFiles) -> Result<Arc<dyn TableProvider>> {
    let schema = without_dictionaries(&files.table.schema());
    if files.journaled() {
        return Err(DataFusionError::Plan(format!(
            "{}: the recording is being written, and the rows of its open chunk are in \
             journals only this machine can read; query it without --cluster, or once \
             the recorder has stopped",
            files.dir.display()
        )));
    }
    if files.chunks.is_empty() {
        return Ok(Arc::new(EmptyTable::new(schema)));
    }
    let bucket = files.dir.parent().and_then(remote::url_of_copy);
    let urls = files
        .chunks
        .iter()
        .map(|chunk| match &bucket {
            Some(recording) => {
                let name = chunk.path.file_name().unwrap_or_default().to_string_lossy();
                ListingTableUrl::parse(format!("{recording}/{}/{name}", files.table.name))
            }
            None => file_url(&chunk.path),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(listing_table(
        urls,
        Arc::new(ParquetFormat::default()),
        schema,
    )?)
}

/// A table of the chunks (`*.parquet`) at `urls`, files or folders, read
/// with `format` as `schema`.
fn listing_table(
    urls: Vec<ListingTableUrl>,
    format: Arc<dyn FileFormat>,
    schema: SchemaRef,
) -> Result<Arc<ListingTable>> {
    let options =
        ListingOptions::new(format).with_file_extension(format!(".{}", layout::PARQUET_EXT));
    let config = ListingTableConfig::new_with_multi_paths(urls)
        .with_listing_options(options)
        .with_schema(schema);
    Ok(Arc::new(ListingTable::try_new(config)?))
}

/// `schema` with every dictionary-encoded column as its plain values.
/// Ballista 55's shuffles hand the next stage plain strings where the plan
/// expects a dictionary (the stage fails: "RowConverter column schema
/// mismatch"), so on a cluster the Parquet reader decodes them at once.
fn without_dictionaries(schema: &SchemaRef) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|field| match field.data_type() {
            DataType::Dictionary(_, values) => field
                .as_ref()
                .clone()
                .with_data_type(values.as_ref().clone()),
            _ => field.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Every complete row of the table's journals whose chunk is not closed yet.
fn journal_rows(files: &TableFiles) -> Result<Vec<RecordBatch>> {
    let Ok(entries) = std::fs::read_dir(&files.dir) else {
        return Ok(Vec::new());
    };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let schema = files.table.schema();
    let mut rows = Vec::new();
    for name in names {
        let Some(chunk) = layout::chunk_of_journal(&name) else {
            continue;
        };
        if files.dir.join(chunk).exists() {
            continue;
        }
        let path = files.dir.join(&name);
        let batches = match journal::read_journal(&path) {
            Ok((batches, _torn)) => batches,
            // Closed and removed since the directory was listed.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(DataFusionError::Plan(format!("{}: {e}", path.display())));
            }
        };
        for batch in batches {
            rows.push(
                RecordBatch::try_new(schema.clone(), batch.columns().to_vec()).map_err(|e| {
                    DataFusionError::Plan(format!(
                        "{}: not a journal of table {} ({e})",
                        path.display(),
                        files.table.name
                    ))
                })?,
            );
        }
    }
    Ok(rows)
}

/// A `file://` URL of one file.
fn file_url(path: &Path) -> Result<ListingTableUrl> {
    let absolute = std::path::absolute(path)?;
    let url = url::Url::from_file_path(&absolute).map_err(|()| {
        DataFusionError::Plan(format!("{}: cannot be expressed as a URL", path.display()))
    })?;
    ListingTableUrl::try_new(url, None)
}

/// A `file://` URL of a directory, built from the path itself so that
/// characters such as `*`, `[` or `#` in a directory name stay literal.
fn dir_url(dir: &Path) -> Result<ListingTableUrl> {
    let absolute = std::path::absolute(dir)?;
    let url = url::Url::from_directory_path(&absolute).map_err(|()| {
        DataFusionError::Plan(format!("{}: cannot be expressed as a URL", dir.display()))
    })?;
    ListingTableUrl::try_new(url, None)
}

/// The `host` value of each recording: the host name from its
/// `recording.json`, or, where two recordings share a host name,
/// `<host>/<directory name>`, numbered if even that repeats.
pub fn host_labels(recordings: &[Recording]) -> Vec<String> {
    let mut per_host: HashMap<&str, usize> = HashMap::new();
    for rec in recordings {
        *per_host.entry(rec.meta.host.as_str()).or_default() += 1;
    }
    let mut labels: Vec<String> = recordings
        .iter()
        .map(|rec| {
            let host = rec.meta.host.as_str();
            if per_host[host] == 1 {
                return host.to_owned();
            }
            let name = std::path::absolute(&rec.dir)
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| rec.dir.display().to_string());
            format!("{host}/{name}")
        })
        .collect();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for label in &mut labels {
        let n = seen.entry(label.clone()).or_default();
        *n += 1;
        if *n > 1 {
            label.push_str(&format!("#{n}"));
        }
    }
    labels
}

/// The options every user query runs with: read-only, since a recording
/// is evidence (no `CREATE`, `INSERT` or `COPY ... TO`).
pub fn read_only() -> SQLOptions {
    SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
}

/// A DataFusion error as the one line `hindsight` prints: its outermost
/// message only, since that already quotes its sources (printing the chain
/// repeats them), with line breaks ("Valid fields are ...") made spaces.
///
/// A query over the memory limit says so first, with the limit and the
/// flag that raises it.
pub fn one_line(err: DataFusionError) -> anyhow::Error {
    let exhausted = matches!(err.find_root(), DataFusionError::ResourcesExhausted(_));
    let text = err.strip_backtrace();
    let text = if exhausted {
        let limit = RUNTIME.get().map_or(DEFAULT_MEMORY_LIMIT, |r| r.0);
        format!(
            "the query needs more memory than --memory-limit {} allows, even spilling to {}: {text}",
            human_bytes(limit),
            std::env::temp_dir().display()
        )
    } else {
        text
    };
    anyhow::Error::msg(
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// `1 GiB`, `512 MiB`: a size for people, in the largest binary unit
/// that divides it.
pub fn human_bytes(bytes: u64) -> String {
    for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} bytes")
}

/// Plans `sql` and streams its result.
pub async fn query_stream(ctx: &SessionContext, sql: &str) -> Result<SendableRecordBatchStream> {
    ctx.sql_with_options(sql, read_only())
        .await?
        .execute_stream()
        .await
}

/// Runs `sql` and collects its result.
pub async fn query_batches(ctx: &SessionContext, sql: &str) -> Result<Vec<RecordBatch>> {
    ctx.sql_with_options(sql, read_only())
        .await?
        .collect()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_address_is_df_host_and_an_optional_port() {
        assert_eq!(
            parse_cluster_url("df://10.0.0.5").unwrap(),
            "http://10.0.0.5:50050"
        );
        assert_eq!(
            parse_cluster_url("df://scheduler.example:6000/").unwrap(),
            "http://scheduler.example:6000"
        );
        for bad in [
            "http://h:50050",
            "df://",
            "df://h/x",
            "h:50050",
            "df://h:99999",
        ] {
            assert!(parse_cluster_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn on_a_cluster_strings_are_read_without_their_dictionary() {
        let schema = hindsight_schemas::tables::SCHED_SWITCH.schema();
        assert!(schema
            .fields()
            .iter()
            .any(|f| matches!(f.data_type(), DataType::Dictionary(..))));
        let plain = without_dictionaries(&schema);
        for (before, after) in schema.fields().iter().zip(plain.fields()) {
            assert_eq!(before.name(), after.name());
            assert_eq!(before.is_nullable(), after.is_nullable());
            match before.data_type() {
                DataType::Dictionary(_, values) => assert_eq!(after.data_type(), values.as_ref()),
                other => assert_eq!(after.data_type(), other),
            }
        }
    }
}
