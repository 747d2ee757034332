//! Writing a chunk file the way the recorder does, for the analyzer's
//! commands that add files to a recording or make one (`slice`, `index`):
//! the writer properties of `schemas::layout`, a hidden temporary name,
//! close, fsync, rename, fsync of the folder. A reader never sees half a
//! file.

use std::fs::{self, File, OpenOptions};
use std::io::BufWriter;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use arrow::array::{
    ArrayRef, BooleanArray, DictionaryArray, Float64Array, Int32Array, Int64Array, RecordBatch,
    StringArray, TimestampNanosecondArray, UInt64Array,
};
use arrow::datatypes::Int32Type;
use hindsight_schemas::{layout, ColumnType, Table};
use parquet::arrow::ArrowWriter;
use serde_json::Value;

use crate::recording::Recording;

/// Mode of every file written: recordings hold command lines.
pub const FILE_MODE: u32 = 0o640;

/// A chunk being written.
pub type ChunkWriter = ArrowWriter<BufWriter<File>>;

/// Starts a chunk of `table` at the hidden path `temp`, stamped with `stamp`.
pub fn create(temp: &Path, table: &Table, stamp: &Stamp) -> Result<ChunkWriter> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(temp)
        .with_context(|| format!("creating {}", temp.display()))?;
    let props =
        layout::writer_properties(table, &stamp.host, &stamp.boot_id, &stamp.recorder_version);
    Ok(ArrowWriter::try_new(
        BufWriter::with_capacity(256 << 10, file),
        table.schema(),
        Some(props),
    )?)
}

/// Closes the chunk at `temp`, makes it durable and renames it to
/// `final_path` (same folder); returns its size.
pub fn commit(writer: ChunkWriter, temp: &Path, final_path: &Path) -> Result<u64> {
    let file = writer
        .into_inner()
        .with_context(|| format!("closing {}", temp.display()))?
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(|| format!("flushing {}", temp.display()))?;
    file.sync_all()
        .with_context(|| format!("fsync {}", temp.display()))?;
    let bytes = file.metadata().map_or(0, |m| m.len());
    drop(file);
    fs::rename(temp, final_path).with_context(|| format!("renaming {}", temp.display()))?;
    let dir = final_path.parent().expect("a table folder");
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("fsync {}", dir.display()))?;
    Ok(bytes)
}

/// Who wrote a chunk, copied into every file made from it.
pub struct Stamp {
    pub host: String,
    pub boot_id: String,
    pub recorder_version: String,
}

/// The stamp in a source chunk's key-value metadata; the recording's where
/// a key is missing.
pub fn stamp_of(path: &Path, source: &Recording) -> Stamp {
    let session = source.meta.latest();
    let mut stamp = Stamp {
        host: source.meta.host.clone(),
        boot_id: session.map(|s| s.boot_id.clone()).unwrap_or_default(),
        recorder_version: session
            .map(|s| s.recorder_version.clone())
            .unwrap_or_default(),
    };
    let footer = File::open(path)
        .ok()
        .and_then(|f| hindsight_schemas::footer::read(&f).ok());
    let kv = footer
        .as_ref()
        .and_then(|f| f.file_metadata().key_value_metadata().cloned())
        .unwrap_or_default();
    for entry in kv {
        let Some(value) = entry.value else { continue };
        match entry.key.as_str() {
            layout::key::HOST => stamp.host = value,
            layout::key::BOOT_ID => stamp.boot_id = value,
            layout::key::RECORDER_VERSION => stamp.recorder_version = value,
            _ => {}
        }
    }
    stamp
}

/// A batch of `table` from rows given as JSON objects keyed by column, for
/// recordings made by programs (the tests' fixtures, the timeline
/// benchmark's synthesized day). A missing non-nullable column takes a zero
/// value; a timestamp is UTC ns.
pub fn batch_from_json(table: &Table, rows: &[Value]) -> Result<RecordBatch> {
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(table.columns.len());
    for c in table.columns {
        let wrong = || anyhow!("{}.{}: not a {:?} value", table.name, c.name, c.kind);
        // Each row's cell, or the type's `zero` where missing from a non-nullable column.
        let cells = |zero: Value| -> Vec<Option<Value>> {
            rows.iter()
                .map(|row| match row.get(c.name).filter(|v| !v.is_null()) {
                    Some(v) => Some(v.clone()),
                    None => (!c.nullable).then(|| zero.clone()),
                })
                .collect()
        };
        fn typed<T>(
            cells: Vec<Option<Value>>,
            get: impl Fn(&Value) -> Option<T>,
            wrong: impl Fn() -> anyhow::Error,
        ) -> Result<Vec<Option<T>>> {
            cells
                .iter()
                .map(|v| v.as_ref().map(|v| get(v).ok_or_else(&wrong)).transpose())
                .collect()
        }
        let int = |v: &Value| v.as_i64();
        let text = |v: &Value| v.as_str().map(str::to_owned);
        let array: ArrayRef = match c.kind {
            ColumnType::Timestamp => Arc::new(
                TimestampNanosecondArray::from(typed(cells(0.into()), int, wrong)?)
                    .with_timezone("UTC"),
            ),
            ColumnType::Int32 => {
                let narrow = |v: &Value| v.as_i64().and_then(|i| i32::try_from(i).ok());
                Arc::new(Int32Array::from(typed(cells(0.into()), narrow, wrong)?))
            }
            ColumnType::Int64 => Arc::new(Int64Array::from(typed(cells(0.into()), int, wrong)?)),
            ColumnType::UInt64 => Arc::new(UInt64Array::from(typed(
                cells(0.into()),
                Value::as_u64,
                wrong,
            )?)),
            ColumnType::Bool => Arc::new(BooleanArray::from(typed(
                cells(false.into()),
                Value::as_bool,
                wrong,
            )?)),
            ColumnType::Float64 => Arc::new(Float64Array::from(typed(
                cells(0.0.into()),
                Value::as_f64,
                wrong,
            )?)),
            ColumnType::Name => Arc::new(
                typed(cells("".into()), text, wrong)?
                    .iter()
                    .map(Option::as_deref)
                    .collect::<DictionaryArray<Int32Type>>(),
            ),
            ColumnType::Text => Arc::new(StringArray::from(typed(cells("".into()), text, wrong)?)),
        };
        columns.push(array);
    }
    Ok(RecordBatch::try_new(table.schema(), columns)?)
}
