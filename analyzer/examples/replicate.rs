//! `replicate SRC OUT COPIES`: a long recording made of a short one, for the
//! analyzer's benchmark at a scale this machine cannot record in a session
//! (`bench/analyzer.sh`, issue 12's 300 M switches).
//!
//! Every raw chunk of SRC is written COPIES times through the chunk writer
//! that `slice` and `index` use (`schemas::layout`'s properties), each copy
//! with every timestamp shifted by a whole number of the recording's span, and
//! each copy's sessions appended to `recording.json` as restarts of the same
//! boot. `stack` and `frame` are written once, since every copy refers to the
//! same ids. Derived tables are left out: the copy needs `hindsight index`,
//! as an older recording would. The result passes `hindsight info`.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use arrow::array::{new_null_array, Array, ArrayRef, RecordBatch, TimestampNanosecondArray};
use arrow::datatypes::DataType;
use hindsight::chunk_file;
use hindsight::recording::Recording;
use hindsight_schemas::{derived, layout, time, ColumnType, Table};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

const SECOND_NS: i64 = 1_000_000_000;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [src, out, copies] = args.as_slice() else {
        bail!("usage: replicate SRC OUT COPIES");
    };
    let copies: i64 = copies.parse().context("COPIES is a whole number")?;
    let (src, out) = (PathBuf::from(src), PathBuf::from(out));
    if out.exists() {
        bail!("{} exists; replicate writes a new recording", out.display());
    }
    let source = Recording::open(&src)?;
    let shift = span_ns(&source)?;
    fs::create_dir_all(&out)?;
    let mut written = 0u64;
    for files in &source.tables {
        if derived::DERIVED_TABLES
            .iter()
            .any(|t| t.name == files.table.name)
        {
            continue;
        }
        let reference = matches!(files.table.name, "stack" | "frame");
        let dir = out.join(files.table.name);
        let count = files.chunks.len() as u64;
        for copy in 0..if reference { 1 } else { copies } {
            for (i, chunk) in files.chunks.iter().enumerate() {
                let name = chunk.path.file_name().unwrap().to_string_lossy();
                let start = layout::chunk_start_ns(&name).unwrap_or(0) + copy * shift;
                let seq = copy as u64 * count + i as u64;
                let target = dir.join(layout::chunk_file_name(start, seq));
                written += shifted_copy(&chunk.path, &target, files.table, copy * shift, &source)?;
            }
        }
    }
    let mut meta = source.meta.clone();
    meta.sessions = (0..copies)
        .flat_map(|copy| {
            source.meta.sessions.iter().map(move |s| {
                let mut s = s.clone();
                s.started = shift_rfc3339(&s.started, copy * shift);
                s.stopped = s.stopped.as_deref().map(|t| shift_rfc3339(t, copy * shift));
                for offset in &mut s.clock_offsets {
                    offset.at_boot_ns += (copy * shift) as u64;
                }
                s
            })
        })
        .collect();
    meta.retired.clear();
    fs::write(out.join(layout::RECORDING_FILE), meta.to_json())?;
    eprintln!(
        "replicate: {} copies {} s apart, {} MiB",
        copies,
        shift / SECOND_NS,
        written >> 20
    );
    Ok(())
}

/// Whole seconds from the first session's start to past the last row, plus a
/// gap of two seconds: copies shifted by it never overlap.
fn span_ns(source: &Recording) -> Result<i64> {
    let first = source
        .meta
        .sessions
        .first()
        .map(|s| parse_rfc3339(&s.started))
        .context("the recording has no session")?;
    let last = source
        .tables
        .iter()
        .flat_map(|t| t.chunks.iter().filter_map(|c| c.ts_range.map(|r| r.1)))
        .chain(
            source
                .meta
                .sessions
                .iter()
                .filter_map(|s| s.stopped.as_deref().map(parse_rfc3339)),
        )
        .max()
        .unwrap_or(first);
    Ok(((last - first) / SECOND_NS + 3) * SECOND_NS)
}

fn parse_rfc3339(text: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .and_then(|t| t.timestamp_nanos_opt())
        .unwrap_or(0)
}

fn shift_rfc3339(text: &str, by: i64) -> String {
    time::rfc3339(parse_rfc3339(text) + by)
}

/// Writes `path`'s rows to `target` with every timestamp moved by `by`;
/// returns the bytes written.
fn shifted_copy(
    path: &Path,
    target: &Path,
    table: &Table,
    by: i64,
    source: &Recording,
) -> Result<u64> {
    let dir = target.parent().unwrap();
    fs::create_dir_all(dir)?;
    let name = target.file_name().unwrap().to_string_lossy();
    let temp = dir.join(layout::temp_file_name(&name));
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path)?)?.build()?;
    let mut writer = chunk_file::create(&temp, table, &chunk_file::stamp_of(path, source))?;
    for batch in reader {
        let batch = batch?;
        let schema = table.schema();
        // By name: a file written before a nullable column was added has
        // no such column, and its copy has it null.
        let columns = table
            .columns
            .iter()
            .zip(schema.fields())
            .map(|(def, field)| match batch.column_by_name(def.name) {
                Some(column) if def.kind == ColumnType::Timestamp && by != 0 => {
                    shift_times(column, by)
                }
                Some(column) => column.clone(),
                None => new_null_array(field.data_type(), batch.num_rows()),
            })
            .collect();
        writer.write(&RecordBatch::try_new(schema, columns)?)?;
    }
    chunk_file::commit(writer, &temp, target)
}

fn shift_times(column: &ArrayRef, by: i64) -> ArrayRef {
    let times = column
        .as_any()
        .downcast_ref::<TimestampNanosecondArray>()
        .expect("a Timestamp column is nanoseconds");
    let tz = match column.data_type() {
        DataType::Timestamp(_, tz) => tz.clone(),
        _ => None,
    };
    Arc::new(
        times
            .unary::<_, arrow::datatypes::TimestampNanosecondType>(|t| t + by)
            .with_timezone_opt(tz),
    )
}
