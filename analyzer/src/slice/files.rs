//! The slice's files: the output directory (refused when it holds
//! anything; written as a hidden sibling and renamed when complete) and
//! its chunks, written the way the recorder writes them: the writer
//! properties of `schemas::layout`, a hidden temporary name, close, fsync,
//! rename, fsync of the folder.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::BufWriter;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use arrow::array::{AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::TimestampNanosecondType;
use datafusion::execution::SendableRecordBatchStream;
use futures::StreamExt;
use hindsight_schemas::{layout, Table};
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::ParquetMetaDataReader;

use crate::catalog;
use crate::recording::Recording;
use crate::UsageError;

/// Mode of the slice's files and folders: recordings hold command lines.
const FILE_MODE: u32 = 0o640;
const DIR_MODE: u32 = 0o750;

/// Rows per row group of a slice's chunk: the recorder's batch size.
const ROW_GROUP_ROWS: usize = 128 * 1024;

/// The output must not exist, or be an empty directory.
pub(super) fn check_output(out: &Path) -> Result<()> {
    match fs::read_dir(out) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(UsageError(format!(
                    "{}: exists and is not empty; slice writes a new recording",
                    out.display()
                ))
                .into());
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(_) if out.exists() => Err(UsageError(format!(
            "{}: exists and is not an empty directory",
            out.display()
        ))
        .into()),
        Err(e) => Err(e).with_context(|| format!("reading {}", out.display())),
    }
}

/// The hidden directory the slice is written in, removed unless committed.
pub(super) struct Staging {
    pub(super) dir: PathBuf,
    target: PathBuf,
    committed: bool,
}

impl Staging {
    pub(super) fn new(target: &Path) -> Result<Staging> {
        let name = target
            .file_name()
            .ok_or_else(|| UsageError(format!("{}: not a directory name", target.display())))?;
        let parent = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let dir = parent.join(format!(
            ".{}.{}{}",
            name.to_string_lossy(),
            std::process::id(),
            layout::TEMP_SUFFIX
        ));
        if dir.exists() {
            fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        DirBuilder::new()
            .mode(DIR_MODE)
            .create(&dir)
            .with_context(|| format!("creating {}", dir.display()))?;
        Ok(Staging {
            dir,
            target: target.to_path_buf(),
            committed: false,
        })
    }

    /// Renames the finished slice to its name (replacing an empty
    /// directory) and makes the rename durable.
    pub(super) fn commit(mut self) -> Result<()> {
        fs::rename(&self.dir, &self.target).with_context(|| {
            format!(
                "renaming {} to {}",
                self.dir.display(),
                self.target.display()
            )
        })?;
        self.committed = true;
        if let Some(parent) = self.target.parent().filter(|p| p.is_dir()) {
            File::open(parent)
                .and_then(|d| d.sync_all())
                .with_context(|| format!("fsync {}", parent.display()))?;
        }
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Writes `stream` as chunk number `seq` of `table` under `out`, sorted as
/// it comes, named by its earliest `ts` (`default_ts` for a table without
/// one). Returns its path and rows; nothing, and no file, when it is empty.
pub(super) async fn write_chunk(
    out: &Path,
    table: &'static Table,
    mut stream: SendableRecordBatchStream,
    stamp: &Stamp,
    seq: usize,
    default_ts: i64,
) -> Result<Option<(PathBuf, u64)>> {
    let dir = out.join(table.name);
    if !dir.is_dir() {
        DirBuilder::new()
            .mode(DIR_MODE)
            .create(&dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    // The final name needs the earliest row's time, known at the end.
    let temp = dir.join(layout::temp_file_name(&format!("slice-{seq}")));
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(&temp)
        .with_context(|| format!("creating {}", temp.display()))?;
    let props =
        layout::writer_properties(table, &stamp.host, &stamp.boot_id, &stamp.recorder_version);
    let schema = table.schema();
    let mut writer = ArrowWriter::try_new(
        BufWriter::with_capacity(256 << 10, file),
        schema.clone(),
        Some(props),
    )?;
    let ts_index = table.columns.iter().position(|c| c.name == "ts");
    let mut rows = 0u64;
    let mut first_ts: Option<i64> = None;
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(catalog::one_line)?;
        if batch.num_rows() == 0 {
            continue;
        }
        let batch = conform(&batch, &schema)?;
        if let Some(i) = ts_index {
            let ts = batch.column(i).as_primitive::<TimestampNanosecondType>();
            if let Some(min) = arrow::compute::min(ts) {
                first_ts = Some(first_ts.map_or(min, |t| t.min(min)));
            }
        }
        writer
            .write(&batch)
            .with_context(|| format!("writing {}", temp.display()))?;
        rows += batch.num_rows() as u64;
        if writer.in_progress_rows() >= ROW_GROUP_ROWS {
            writer.flush()?;
        }
    }
    if rows == 0 {
        drop(writer);
        fs::remove_file(&temp).with_context(|| format!("removing {}", temp.display()))?;
        return Ok(None);
    }
    let file = writer
        .into_inner()
        .with_context(|| format!("closing {}", temp.display()))?
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(|| format!("flushing {}", temp.display()))?;
    file.sync_all()
        .with_context(|| format!("fsync {}", temp.display()))?;
    drop(file);
    let name = layout::chunk_file_name(first_ts.unwrap_or(default_ts), seq as u64);
    let final_path = dir.join(name);
    fs::rename(&temp, &final_path).with_context(|| format!("renaming {}", temp.display()))?;
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("fsync {}", dir.display()))?;
    Ok(Some((final_path, rows)))
}

/// Who wrote a chunk, copied into the slice's file cut from it.
pub(crate) struct Stamp {
    pub(crate) host: String,
    pub(crate) boot_id: String,
    pub(crate) recorder_version: String,
}

/// The stamp in a source chunk's key-value metadata; the recording's where
/// a key is missing.
pub(crate) fn stamp_of(path: &Path, source: &Recording) -> Stamp {
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

/// A batch with exactly the table's schema (field nullability and types as
/// `schemas` declares them), whatever DataFusion's plan made of it.
fn conform(batch: &RecordBatch, schema: &arrow::datatypes::SchemaRef) -> Result<RecordBatch> {
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| {
            if column.data_type() == field.data_type() {
                Ok(column.clone())
            } else {
                cast(column, field.data_type())
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// Creates `path` with `bytes`, durably.
pub(super) fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {}", path.display()))
}
