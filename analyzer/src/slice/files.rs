//! The slice's files: the output directory (refused when it holds
//! anything; written as a hidden sibling and renamed when complete) and
//! its chunks, written the way the recorder writes them (`chunk_file`).

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use arrow::array::{AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::TimestampNanosecondType;
use datafusion::execution::SendableRecordBatchStream;
use futures::StreamExt;
use hindsight_schemas::{layout, Table};

use crate::catalog;
use crate::chunk_file::{self, Stamp, FILE_MODE};
use crate::UsageError;

/// Mode of the slice's folders: recordings hold command lines.
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
    let schema = table.schema();
    let mut writer = chunk_file::create(&temp, table, stamp)?;
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
    let name = layout::chunk_file_name(first_ts.unwrap_or(default_ts), seq as u64);
    let final_path = dir.join(name);
    chunk_file::commit(writer, &temp, &final_path)?;
    Ok(Some((final_path, rows)))
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
