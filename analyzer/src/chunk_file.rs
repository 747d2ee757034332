//! Writing a chunk file the way the recorder does, for the analyzer's
//! commands that add files to a recording or make one (`slice`, `index`):
//! the writer properties of `schemas::layout`, a hidden temporary name,
//! close, fsync, rename, fsync of the folder. A reader never sees half a
//! file.

use std::fs::{self, File, OpenOptions};
use std::io::BufWriter;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::{Context, Result};
use hindsight_schemas::{layout, Table};
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::ParquetMetaDataReader;

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
        .and_then(|f| ParquetMetaDataReader::new().parse_and_finish(&f).ok());
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
