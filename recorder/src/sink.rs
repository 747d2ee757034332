//! The Parquet sink: one per table, writing the chunk files of a recording,
//! and the journal that makes the open chunk survive a crash.
//!
//! Guarantees, which the rest of the recorder and every reader rely on:
//! - A reader never sees a partial Parquet file. A chunk is written under a
//!   hidden temporary name (`<table>/.<name>.parquet.tmp`), then closed
//!   (footer written), fsynced, renamed to `<name>.parquet` and the
//!   directory fsynced. Readers list only `*.parquet` names that do not
//!   start with `.`.
//! - Every row handed to [`TableSink::write`] is first appended to the
//!   chunk's journal (`<table>/.<name>.parquet.journal`, see
//!   `hindsight_schemas::journal`) with one `write`, before anything else
//!   happens to it: from then on a `kill -9` cannot lose it (it is in the
//!   page cache), and after [`TableSink::sync`] (every `--fsync`) neither can
//!   a host crash. The journal is removed only after the chunk's Parquet
//!   file is renamed into place; [`recover_recording`] turns the journals a
//!   dead recorder left into ordinary sorted chunks.
//! - Memory is bounded: rows wait for their row group in the sink until
//!   [`layout::ROW_GROUP_ROWS`] have gathered ([`layout::LARGE_ROW_GROUP_ROWS`] for
//!   `cpu_sample` and `stack`), then are sorted and encoded at once.
//! - Within each row group, rows are sorted by the table's sort key (for
//!   example `cpu, ts`), and the file declares it in its metadata.
//! - Every file carries the schema version, table, host and boot id in its
//!   key-value metadata (the journal too), so it still says what it is when
//!   mailed alone.
//! - A full disk (ENOSPC, EDQUOT) is not an error: the entry that failed is
//!   cut off the journal and its rows reported as dropped
//!   ([`Written::DiskFull`]); a Parquet file that failed is deleted and
//!   rebuilt from the journal at close; a close that fails is retried from
//!   the journal later ([`Closed::Deferred`]). Closed files are never touched.

use std::{
    collections::HashMap,
    fs::File,
    io::{self, BufWriter, Write},
    path::PathBuf,
    sync::Arc,
};

use anyhow::Context;
use arrow::{
    array::{Array, AsArray, StringArray, UInt32Array},
    compute::{concat_batches, lexsort_to_indices, take_record_batch, SortColumn, SortOptions},
    datatypes::{Int32Type, Int64Type, TimestampNanosecondType},
    record_batch::RecordBatch,
};
use hindsight_schemas::{
    journal,
    layout::{self, row_group_rows},
    Table, TABLES,
};
use parquet::{arrow::ArrowWriter, file::properties::WriterProperties};

use crate::private_dir::PrivateDir;

/// Who wrote a recording, stamped into every file.
#[derive(Clone, Debug)]
pub struct FileStamp {
    pub host: String,
    pub boot_id: String,
    pub recorder_version: String,
}

impl FileStamp {
    /// The stamp a chunk's key-value metadata (or its journal's) carries.
    fn from_metadata(metadata: &HashMap<String, String>) -> Self {
        let get = |key: &str| metadata.get(key).cloned().unwrap_or_default();
        FileStamp {
            host: get(layout::key::HOST),
            boot_id: get(layout::key::BOOT_ID),
            recorder_version: get(layout::key::RECORDER_VERSION),
        }
    }
}

/// Whether an error is the disk (or the user's quota) being full, anywhere
/// in its chain: the one write failure the recorder rides out.
pub fn is_disk_full(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(io_is_disk_full)
    })
}

fn io_is_disk_full(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// What became of a batch handed to [`TableSink::write`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Journaled (and counted in `rows_written`).
    Stored,
    /// Not written: the disk is full. The rows are lost and must be counted.
    DiskFull { dropped: u64 },
}

/// What became of the open chunk at [`TableSink::close_chunk`].
#[derive(Debug)]
pub enum Closed {
    /// No chunk was open.
    Nothing,
    /// Renamed into place; its journal is gone. `peak_bytes`: the most it
    /// took on disk, just before the journal went (journal and file both).
    File { path: PathBuf, peak_bytes: u64 },
    /// The disk is full: the journal stays, to become a chunk with
    /// [`TableSink::recover`] once there is room (or at the next start).
    /// The journal's file name.
    Deferred(String),
}

/// Rows waiting for their row group.
struct RowGroupBuffer {
    batches: Vec<RecordBatch>,
    rows: usize,
    /// [`row_group_rows`] of the table.
    limit: usize,
}

impl RowGroupBuffer {
    fn new(table: &Table) -> Self {
        RowGroupBuffer {
            batches: Vec::new(),
            rows: 0,
            limit: row_group_rows(table),
        }
    }

    fn push(&mut self, batch: RecordBatch) {
        self.rows += batch.num_rows();
        self.batches.push(batch);
    }

    fn is_full(&self) -> bool {
        self.rows >= self.limit
    }

    /// Everything pending as one batch sorted by the table's key (None if empty).
    fn take_sorted(&mut self, table: &Table) -> anyhow::Result<Option<RecordBatch>> {
        self.rows = 0;
        let batches = std::mem::take(&mut self.batches);
        let batch = match batches.as_slice() {
            [] => return Ok(None),
            [one] => one.clone(),
            many => concat_batches(&table.schema(), many)?,
        };
        Ok(Some(sort_batch(table, &batch)?))
    }
}

/// A chunk being written: its journal (every row, the truth after a crash)
/// and its Parquet file (row groups so far).
struct OpenChunk {
    /// None once a write to it failed on a full disk: the file is deleted
    /// and rebuilt from the journal at close.
    parquet: Option<ArrowWriter<BufWriter<File>>>,
    temp_name: String,
    final_name: String,
    journal: File,
    journal_name: String,
    /// Length of the journal's complete entries: a failed append is cut back to it.
    journal_len: u64,
    pending: RowGroupBuffer,
    /// Whether the directory entries of the new files have been fsynced.
    dir_synced: bool,
    /// `journal_len` at the last fsync: a journal not grown since needs none.
    synced_len: u64,
}

/// Writes one table's chunks.
pub struct TableSink {
    table: &'static Table,
    dir: PrivateDir,
    props: WriterProperties,
    /// The key-value metadata, also stamped on every journal entry.
    metadata: HashMap<String, String>,
    open: Option<OpenChunk>,
    /// Bytes of the files this sink has closed, for the recorder's own accounting.
    pub bytes_written: u64,
    pub rows_written: u64,
}

/// Writer properties: one definition for every writer of chunks, in `schemas`.
fn writer_properties(table: &Table, stamp: &FileStamp) -> WriterProperties {
    layout::writer_properties(table, &stamp.host, &stamp.boot_id, &stamp.recorder_version)
}

/// The sort key as integers per row, in the order the file declares:
/// integers and timestamps as themselves, dictionary strings as the rank of
/// their value (byte order, equal strings equal rank), nulls last. Every
/// table's key qualifies; a column of another type gives None.
fn integer_key_columns(table: &Table, batch: &RecordBatch) -> Option<Vec<Vec<i64>>> {
    table
        .sort_key
        .iter()
        .map(|name| {
            let column = batch.column(table.index(name));
            let mut keys: Vec<i64> = if let Some(a) = column.as_primitive_opt::<Int32Type>() {
                a.values().iter().map(|&v| i64::from(v)).collect()
            } else if let Some(a) = column.as_primitive_opt::<TimestampNanosecondType>() {
                a.values().to_vec()
            } else if let Some(a) = column.as_primitive_opt::<Int64Type>() {
                a.values().to_vec()
            } else {
                let dictionary = column.as_dictionary_opt::<Int32Type>()?;
                let ranks = string_ranks(dictionary.values().as_string_opt::<i32>()?);
                dictionary
                    .keys()
                    .values()
                    .iter()
                    .map(|&k| ranks.get(k as usize).copied().unwrap_or(i64::MAX))
                    .collect()
            };
            if let Some(nulls) = column.logical_nulls() {
                for (key, valid) in keys.iter_mut().zip(nulls.iter()) {
                    if !valid {
                        *key = i64::MAX;
                    }
                }
            }
            Some(keys)
        })
        .collect()
}

/// Each value's rank in byte order; equal values share a rank. Sorting a
/// few hundred dictionary values once replaces string comparisons per row,
/// which were the largest part of closing a counter chunk.
fn string_ranks(values: &StringArray) -> Vec<i64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_unstable_by_key(|&i| values.value(i));
    let mut ranks = vec![0; values.len()];
    let mut rank = 0;
    for (position, &i) in order.iter().enumerate() {
        if position > 0 && values.value(order[position - 1]) != values.value(i) {
            rank += 1;
        }
        ranks[i] = rank;
    }
    ranks
}

/// Sorts a batch by the table's sort key. Keys that map to integers (every
/// table's) take a plain sort of (key..., row) tuples: the generic
/// comparator sort was a quarter of the recorder's CPU under a
/// context-switch storm.
fn sort_batch(table: &Table, batch: &RecordBatch) -> anyhow::Result<RecordBatch> {
    if table.sort_key.is_empty() || batch.num_rows() < 2 {
        return Ok(batch.clone());
    }
    if let Some(keys) = integer_key_columns(table, batch) {
        let mut order: Vec<u32> = (0..batch.num_rows() as u32).collect();
        match keys.as_slice() {
            [a] => order.sort_by_key(|&i| a[i as usize]),
            [a, b] => order.sort_by_key(|&i| (a[i as usize], b[i as usize])),
            _ => order.sort_by(|&i, &j| {
                keys.iter()
                    .map(|k| k[i as usize])
                    .cmp(keys.iter().map(|k| k[j as usize]))
            }),
        }
        // Already in order (a single CPU, or one pid): nothing to move.
        if order.iter().enumerate().all(|(pos, &i)| pos as u32 == i) {
            return Ok(batch.clone());
        }
        return Ok(take_record_batch(batch, &UInt32Array::from(order))?);
    }
    let indices = lexsort_to_indices(&declared_sort_columns(table, batch), None)?;
    Ok(take_record_batch(batch, &indices)?)
}

/// The sort key as Arrow's comparator sorts it, in the order the file
/// declares (ascending, nulls last).
fn declared_sort_columns(table: &Table, batch: &RecordBatch) -> Vec<SortColumn> {
    table
        .sort_key
        .iter()
        .map(|name| SortColumn {
            values: batch.column(table.index(name)).clone(),
            options: Some(SortOptions {
                descending: false,
                nulls_first: false,
            }),
        })
        .collect()
}

fn start_parquet(
    dir: &PrivateDir,
    name: &str,
    table: &Table,
    props: &WriterProperties,
) -> anyhow::Result<ArrowWriter<BufWriter<File>>> {
    let file = dir
        .create_file(name)
        .with_context(|| format!("creating {}", dir.shown(name).display()))?;
    ArrowWriter::try_new(
        BufWriter::with_capacity(256 << 10, file),
        Arc::clone(&table.schema()),
        Some(props.clone()),
    )
    .with_context(|| format!("starting {}", dir.shown(name).display()))
}

/// Writes the footer, fsyncs, renames `temp` to `final_name` and fsyncs the
/// directory; returns the file's size.
fn finish_parquet(
    writer: ArrowWriter<BufWriter<File>>,
    dir: &PrivateDir,
    temp: &str,
    final_name: &str,
) -> anyhow::Result<u64> {
    let shown = dir.shown(temp);
    let buffered = writer
        .into_inner()
        .with_context(|| format!("closing {}", shown.display()))?;
    let file = buffered
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(|| format!("flushing {}", shown.display()))?;
    file.sync_all()
        .with_context(|| format!("fsync {}", shown.display()))?;
    let bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
    drop(file);
    dir.rename(temp, final_name).with_context(|| {
        format!(
            "renaming {} to {}",
            shown.display(),
            dir.shown(final_name).display()
        )
    })?;
    dir.sync()
        .with_context(|| format!("fsync {}", dir.path().display()))?;
    Ok(bytes)
}

fn write_row_group(
    writer: &mut ArrowWriter<BufWriter<File>>,
    batch: &RecordBatch,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    writer
        .write(batch)
        .and_then(|()| writer.flush())
        .with_context(|| format!("writing {}", path.display()))
}

impl TableSink {
    pub fn new(
        recording: &PrivateDir,
        table: &'static Table,
        stamp: &FileStamp,
    ) -> anyhow::Result<Self> {
        let dir = recording.subdir(table.name)?;
        let metadata = layout::file_metadata(
            table.name,
            &stamp.host,
            &stamp.boot_id,
            &stamp.recorder_version,
        )
        .into_iter()
        .collect();
        Ok(TableSink {
            table,
            dir,
            props: writer_properties(table, stamp),
            metadata,
            open: None,
            bytes_written: 0,
            rows_written: 0,
        })
    }

    pub fn table(&self) -> &'static Table {
        self.table
    }

    /// Journals a batch for the open chunk, opening the chunk named
    /// `file_name` when none is open; writes a sorted row group once
    /// [`layout::ROW_GROUP_ROWS`] have gathered.
    pub fn write(&mut self, batch: &RecordBatch, file_name: &str) -> anyhow::Result<Written> {
        let rows = batch.num_rows() as u64;
        if rows == 0 {
            return Ok(Written::Stored);
        }
        if self.open.is_none() {
            match self.open_chunk(file_name) {
                Ok(chunk) => self.open = Some(chunk),
                Err(e) if is_disk_full(&e) => return Ok(Written::DiskFull { dropped: rows }),
                Err(e) => return Err(e),
            }
        }
        let entry = journal::encode_entry(batch, &self.metadata)
            .with_context(|| format!("encoding a journal entry of {}", self.table.name))?;
        let chunk = self.open.as_mut().expect("opened above");
        if let Err(e) = chunk.journal.write_all(&entry) {
            // Cut the partial entry off, so later entries follow a complete one.
            let _ = chunk.journal.set_len(chunk.journal_len);
            if io_is_disk_full(&e) {
                return Ok(Written::DiskFull { dropped: rows });
            }
            return Err(e).with_context(|| {
                format!("writing {}", self.dir.shown(&chunk.journal_name).display())
            });
        }
        chunk.journal_len += entry.len() as u64;
        chunk.pending.push(batch.clone());
        self.rows_written += rows;
        if chunk.pending.is_full() {
            self.write_pending()?;
        }
        Ok(Written::Stored)
    }

    /// Writes the pending rows as one row group. On a full disk the Parquet
    /// file is given up (and its space freed): the journal has the rows.
    fn write_pending(&mut self) -> anyhow::Result<()> {
        let Some(chunk) = self.open.as_mut() else {
            return Ok(());
        };
        let Some(sorted) = chunk.pending.take_sorted(self.table)? else {
            return Ok(());
        };
        let Some(writer) = chunk.parquet.as_mut() else {
            return Ok(());
        };
        match write_row_group(writer, &sorted, &self.dir.shown(&chunk.temp_name)) {
            Ok(()) => Ok(()),
            Err(e) if is_disk_full(&e) => {
                chunk.parquet = None;
                let _ = self.dir.remove(&chunk.temp_name);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn open_chunk(&self, file_name: &str) -> anyhow::Result<OpenChunk> {
        let temp_name = layout::temp_file_name(file_name);
        let journal_name = layout::journal_file_name(file_name);
        // A journal of this name can only be left from a run that died
        // before recovery: it is replaced, never appended to behind its torn
        // tail.
        let journal = self
            .dir
            .create_file(&journal_name)
            .with_context(|| format!("creating {}", self.dir.shown(&journal_name).display()))?;
        let parquet = match start_parquet(&self.dir, &temp_name, self.table, &self.props) {
            Ok(writer) => Some(writer),
            Err(e) if is_disk_full(&e) => None,
            Err(e) => return Err(e),
        };
        Ok(OpenChunk {
            parquet,
            temp_name,
            final_name: file_name.into(),
            journal,
            journal_name,
            journal_len: 0,
            pending: RowGroupBuffer::new(self.table),
            dir_synced: false,
            synced_len: 0,
        })
    }

    /// Bytes of the open chunk's files: its journal's complete entries and
    /// what its Parquet file has been given so far.
    pub fn open_bytes(&self) -> u64 {
        self.open.as_ref().map_or(0, |chunk| {
            let parquet = chunk.parquet.as_ref().map_or(0, |w| w.bytes_written());
            chunk.journal_len + parquet as u64
        })
    }

    /// fsyncs the open chunk's journal (and, the first time, the directory
    /// that holds it), so a host crash loses nothing journaled before.
    pub fn sync(&mut self) -> anyhow::Result<()> {
        let Some(chunk) = self.open.as_mut() else {
            return Ok(());
        };
        if chunk.synced_len == chunk.journal_len && chunk.dir_synced {
            // Nothing appended since: fsyncing idle tables' journals took
            // about 8 % of an idle recorder's CPU.
            return Ok(());
        }
        chunk
            .journal
            .sync_data()
            .with_context(|| format!("fsync {}", self.dir.shown(&chunk.journal_name).display()))?;
        chunk.synced_len = chunk.journal_len;
        if !chunk.dir_synced {
            self.dir
                .sync()
                .with_context(|| format!("fsync {}", self.dir.path().display()))?;
            chunk.dir_synced = true;
        }
        Ok(())
    }

    /// Closes the open chunk (if any): last row group, footer, fsync,
    /// rename, fsync the dir, then removes the journal.
    pub fn close_chunk(&mut self) -> anyhow::Result<Closed> {
        let Some(chunk) = self.open.as_ref() else {
            return Ok(Closed::Nothing);
        };
        if chunk.journal_len == 0 {
            // Opened, but the disk filled before its first entry: a file of
            // no rows would only be one more thing to read.
            let chunk = self.open.take().expect("checked above");
            let _ = self.dir.remove(&chunk.temp_name);
            let _ = self.dir.remove(&chunk.journal_name);
            return Ok(Closed::Nothing);
        }
        let finished = self.write_pending().and_then(|()| {
            let chunk = self.open.as_mut().expect("checked above");
            match chunk.parquet.take() {
                Some(writer) => {
                    finish_parquet(writer, &self.dir, &chunk.temp_name, &chunk.final_name)
                }
                None => {
                    // The Parquet file was given up on a full disk: rebuild it.
                    let rebuilt = recover_journal(self.table, &self.dir, &chunk.journal_name)?;
                    Ok(rebuilt.map_or(0, |r| r.bytes))
                }
            }
        });
        let chunk = self.open.take().expect("checked above");
        match finished {
            Ok(bytes) => {
                self.bytes_written += bytes;
                // After the rename: a crash in between leaves both, and readers
                // and recovery prefer the Parquet file.
                let _ = self.dir.remove(&chunk.journal_name);
                Ok(Closed::File {
                    path: self.dir.shown(&chunk.final_name),
                    peak_bytes: chunk.journal_len + bytes,
                })
            }
            Err(e) if is_disk_full(&e) => {
                let _ = self.dir.remove(&chunk.temp_name);
                Ok(Closed::Deferred(chunk.journal_name))
            }
            Err(e) => Err(e),
        }
    }
}

impl TableSink {
    /// Closes a chunk that [`Closed::Deferred`] left as its journal
    /// `journal_name`, counting the file's bytes as written.
    pub fn recover(&mut self, journal_name: &str) -> anyhow::Result<Option<Recovered>> {
        let recovered = recover_journal(self.table, &self.dir, journal_name)?;
        if let Some(r) = &recovered {
            self.bytes_written += r.bytes;
        }
        Ok(recovered)
    }
}

/// A journal turned into a chunk.
#[derive(Debug)]
pub struct Recovered {
    pub table: &'static str,
    pub path: PathBuf,
    pub rows: u64,
    pub bytes: u64,
    /// Whether the journal ended in a partial entry (dropped).
    pub torn: bool,
}

/// Turns the journal `journal_name` in `dir` (of `table`) into the sorted
/// Parquet chunk it stands for, then removes it. A journal whose chunk is
/// already in place (the recorder died between rename and removal) is just
/// removed; one without a single complete entry too. Returns what was written.
pub fn recover_journal(
    table: &'static Table,
    dir: &PrivateDir,
    journal_name: &str,
) -> anyhow::Result<Option<Recovered>> {
    let journal_path = dir.shown(journal_name);
    let chunk_name = layout::chunk_of_journal(journal_name)
        .with_context(|| format!("{}: not a journal", journal_path.display()))?;
    let temp_name = layout::temp_file_name(chunk_name);
    let remove_journal = || {
        dir.remove(journal_name)
            .with_context(|| format!("removing {}", journal_path.display()))
    };
    if dir.regular_size(chunk_name).is_some() {
        remove_journal()?;
        return Ok(None);
    }
    let file = dir
        .open_regular(journal_name)
        .with_context(|| format!("reading {}", journal_path.display()))?;
    let mut entries = journal::JournalReader::new(io::BufReader::with_capacity(1 << 20, file));
    let mut writer = None;
    let mut pending = RowGroupBuffer::new(table);
    let mut rows = 0u64;
    let temp_path = dir.shown(&temp_name);
    while let Some(batch) = entries.next() {
        if writer.is_none() {
            let stamp = FileStamp::from_metadata(entries.metadata().expect("after an entry"));
            writer = Some(start_parquet(
                dir,
                &temp_name,
                table,
                &writer_properties(table, &stamp),
            )?);
        }
        rows += batch.num_rows() as u64;
        pending.push(batch);
        if pending.is_full() {
            let sorted = pending.take_sorted(table)?.expect("full");
            write_row_group(writer.as_mut().expect("started"), &sorted, &temp_path)?;
        }
    }
    let torn = entries.torn();
    drop(entries);
    let Some(mut writer) = writer else {
        remove_journal()?;
        return Ok(None);
    };
    if let Some(sorted) = pending.take_sorted(table)? {
        write_row_group(&mut writer, &sorted, &temp_path)?;
    }
    let bytes = finish_parquet(writer, dir, &temp_name, chunk_name)?;
    remove_journal()?;
    Ok(Some(Recovered {
        table: table.name,
        path: dir.shown(chunk_name),
        rows,
        bytes,
        torn,
    }))
}

/// Recovers every journal of a recording into chunks and removes the
/// half-written Parquet temporaries a killed recorder left (their rows are
/// in the journals). Run at every start in the directory and by
/// `hindsight-record recover`. Only regular files are read or removed; a
/// table directory that is a link is refused (see [`PrivateDir`]).
pub fn recover_recording(recording: &PrivateDir) -> anyhow::Result<Vec<Recovered>> {
    let mut recovered = Vec::new();
    let present: Vec<String> = recording
        .entries()
        .with_context(|| format!("reading {}", recording.path().display()))?
        .into_iter()
        .map(|e| e.name)
        .collect();
    for table in TABLES {
        if !present.iter().any(|name| name == table.name) {
            continue;
        }
        let dir = recording.subdir(table.name)?;
        let files: Vec<String> = dir
            .entries()
            .with_context(|| format!("reading {}", dir.path().display()))?
            .into_iter()
            .filter(|e| e.is_file())
            .map(|e| e.name)
            .collect();
        for name in files
            .iter()
            .filter(|n| layout::chunk_of_journal(n).is_some())
        {
            recovered.extend(recover_journal(table, &dir, name)?);
        }
        for name in files
            .iter()
            .filter(|n| n.starts_with('.') && n.ends_with(layout::TEMP_SUFFIX))
        {
            match dir.remove(name) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("removing {}", dir.shown(name).display()))
                }
            }
        }
    }
    Ok(recovered)
}

#[cfg(test)]
pub(crate) mod tests {
    use arrow::array::AsArray;
    use arrow::datatypes::Int32Type;
    use parquet::{arrow::arrow_reader::ParquetRecordBatchReaderBuilder, file::reader::FileReader};

    use std::{
        fs::{self, OpenOptions},
        path::Path,
    };

    use super::*;
    use crate::rows::SchedSwitchRows;

    pub(crate) fn stamp() -> FileStamp {
        FileStamp {
            host: "h".into(),
            boot_id: "b".into(),
            recorder_version: "0".into(),
        }
    }

    /// Dictionary keys sort by their strings' ranks with nulls last, exactly
    /// as Arrow's comparator sorts the strings, whatever order the
    /// dictionary was built in.
    #[test]
    fn dictionary_keys_sort_like_their_strings_with_nulls_last() {
        let mut rows = crate::rows::CounterRows::new();
        let samples = [
            (3, "vmstat", "pgfault", None),
            (1, "stat", "cpu_user", Some("cpu1")),
            (2, "vmstat", "pgfault", None),
            (1, "stat", "cpu_user", Some("cpu0")),
            (1, "stat", "cpu_user", None),
            (2, "stat", "cpu_user", Some("cpu0")),
            (1, "meminfo", "MemFree", None),
            (1, "vmstat", "nr_free_pages", None),
            (0, "stat", "cpu_user", Some("cpu1")),
        ];
        for (ts, source, name, scope) in samples {
            rows.push(ts, source, name, scope, ts * 10);
        }
        let batch = rows.finish();
        let table = &hindsight_schemas::tables::COUNTER;
        assert!(integer_key_columns(table, &batch).is_some());
        let sorted = sort_batch(table, &batch).unwrap();
        let order = lexsort_to_indices(&declared_sort_columns(table, &batch), None).unwrap();
        let expected = take_record_batch(&batch, &order).unwrap();
        assert_eq!(sorted, expected);
        let scope = sorted.column(table.index("scope"));
        let scope: Vec<Option<String>> = (0..scope.len())
            .map(|i| {
                scope.is_valid(i).then(|| {
                    let d = scope.as_dictionary::<Int32Type>();
                    let v = d.values().as_string::<i32>();
                    v.value(d.keys().value(i) as usize).to_string()
                })
            })
            .collect();
        // stat/cpu_user: cpu0 (ts 1, 2), cpu1 (ts 0, 1), then the null scope.
        assert_eq!(
            scope[1..6],
            [
                Some("cpu0".into()),
                Some("cpu0".into()),
                Some("cpu1".into()),
                Some("cpu1".into()),
                None
            ]
        );
    }

    /// Switch rows, one per (ts, cpu), every other column derived from ts.
    pub(crate) fn switches(rows: &[(i64, i32)]) -> RecordBatch {
        let mut b = SchedSwitchRows::new();
        for &(ts, cpu) in rows {
            b.ts.append_value(ts);
            b.cpu.append_value(cpu);
            for c in [
                &mut b.prev_tid,
                &mut b.prev_pid,
                &mut b.prev_prio,
                &mut b.next_tid,
                &mut b.next_pid,
                &mut b.next_prio,
            ] {
                c.append_value(ts as i32);
            }
            for c in [&mut b.prev_comm, &mut b.prev_state, &mut b.next_comm] {
                c.append_value(format!("t{}", ts % 3));
            }
            b.stack_id.append_null();
        }
        b.finish()
    }

    fn sink(dir: &Path) -> TableSink {
        TableSink::new(
            &PrivateDir::open(dir).unwrap(),
            &hindsight_schemas::tables::SCHED_SWITCH,
            &stamp(),
        )
        .unwrap()
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    /// (cpu, prev_tid) of every row of a Parquet file, in file order.
    pub(crate) fn cpu_and_tid(path: &Path) -> Vec<(i32, i32)> {
        ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap())
            .unwrap()
            .build()
            .unwrap()
            .flat_map(|b| {
                let b = b.unwrap();
                let cpu = b.column(1).as_primitive::<Int32Type>().clone();
                let tid = b.column(2).as_primitive::<Int32Type>().clone();
                (0..b.num_rows())
                    .map(|i| (cpu.value(i), tid.value(i)))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn the_open_chunk_is_journaled_and_the_journal_goes_when_it_closes() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = sink(dir.path());
        let table_dir = dir.path().join("sched_switch");
        let batch = switches(&[(3, 1), (1, 0)]);
        assert_eq!(
            sink.write(&batch, "c-000000.parquet").unwrap(),
            Written::Stored
        );
        sink.sync().unwrap();
        let journal = table_dir.join(layout::journal_file_name("c-000000.parquet"));
        let (entries, torn) = journal::read_journal(&journal).unwrap();
        assert_eq!((entries, torn), (vec![batch], false));
        assert!(matches!(sink.close_chunk().unwrap(), Closed::File { .. }));
        assert_eq!(names(&table_dir), ["c-000000.parquet"]);
        assert!(matches!(sink.close_chunk().unwrap(), Closed::Nothing));
    }

    /// A sink dropped without closing (a killed recorder) leaves a journal
    /// and a footer-less temporary; recovery makes one sorted chunk of every
    /// complete entry, with row groups of at most two batches' worth.
    #[test]
    fn recovery_turns_a_dead_sinks_journal_into_a_sorted_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let table_dir = dir.path().join("sched_switch");
        let mut expected = Vec::new();
        {
            let mut sink = sink(dir.path());
            for (i, &cpu) in [1, 0, 1].iter().enumerate() {
                let ts = 10 * i as i64;
                let batch = switches(&[(ts + 2, cpu), (ts + 1, 1 - cpu)]);
                sink.write(&batch, "c-000007.parquet").unwrap();
                expected.extend([(cpu, ts as i32 + 2), (1 - cpu, ts as i32 + 1)]);
            }
            // Dropped, not closed.
        }
        let journal = table_dir.join(layout::journal_file_name("c-000007.parquet"));
        // Killed in the middle of a fourth entry.
        let torn_entry = journal::encode_entry(&switches(&[(99, 0)]), &HashMap::new()).unwrap();
        let mut file = OpenOptions::new().append(true).open(&journal).unwrap();
        file.write_all(&torn_entry[..torn_entry.len() / 2]).unwrap();
        drop(file);
        assert_eq!(
            names(&table_dir),
            [".c-000007.parquet.journal", ".c-000007.parquet.tmp"]
        );

        let recovered = recover_recording(&PrivateDir::open(dir.path()).unwrap()).unwrap();
        assert_eq!(recovered.len(), 1);
        assert_eq!((recovered[0].rows, recovered[0].torn), (6, true));
        assert_eq!(names(&table_dir), ["c-000007.parquet"]);
        expected.sort();
        assert_eq!(cpu_and_tid(&recovered[0].path), expected);
        let kv = parquet::file::reader::SerializedFileReader::new(
            File::open(&recovered[0].path).unwrap(),
        )
        .unwrap()
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .cloned()
        .unwrap();
        assert!(kv
            .iter()
            .any(|k| k.key == layout::key::BOOT_ID && k.value.as_deref() == Some("b")));
        assert!(
            recover_recording(&PrivateDir::open(dir.path()).unwrap())
                .unwrap()
                .is_empty(),
            "idempotent"
        );
    }

    /// A recorder that died after the rename but before removing the journal:
    /// the chunk stays as it is and the journal goes.
    #[test]
    fn a_journal_whose_chunk_is_in_place_is_only_removed() {
        let dir = tempfile::tempdir().unwrap();
        let table_dir = dir.path().join("sched_switch");
        let mut sink = sink(dir.path());
        let batch = switches(&[(1, 0)]);
        sink.write(&batch, "c-000001.parquet").unwrap();
        let journal = table_dir.join(layout::journal_file_name("c-000001.parquet"));
        let kept = fs::read(&journal).unwrap();
        sink.close_chunk().unwrap();
        fs::write(&journal, kept).unwrap();
        assert!(recover_recording(&PrivateDir::open(dir.path()).unwrap())
            .unwrap()
            .is_empty());
        assert_eq!(names(&table_dir), ["c-000001.parquet"]);
    }

    #[test]
    fn row_groups_gather_up_to_the_bound_before_they_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = sink(dir.path());
        let big: Vec<(i64, i32)> = (0..layout::ROW_GROUP_ROWS as i64 / 2 + 1)
            .map(|t| (t, 0))
            .collect();
        for _ in 0..3 {
            sink.write(&switches(&big), "c-000002.parquet").unwrap();
        }
        let Closed::File { path, .. } = sink.close_chunk().unwrap() else {
            panic!("a chunk was open")
        };
        let groups = row_group_rows_of(&path);
        let half = big.len() as i64;
        assert_eq!(groups, [2 * half, half]);
    }

    /// The rows of each row group of the Parquet file `path`.
    fn row_group_rows_of(path: &Path) -> Vec<i64> {
        let reader =
            parquet::file::reader::SerializedFileReader::new(File::open(path).unwrap()).unwrap();
        reader
            .metadata()
            .row_groups()
            .iter()
            .map(|g| g.num_rows())
            .collect()
    }

    #[test]
    fn cpu_samples_and_stacks_gather_a_larger_row_group() {
        // Past the other tables' bound, within these tables': one row group.
        let rows = layout::ROW_GROUP_ROWS + layout::ROW_GROUP_ROWS / 2;
        let mut samples = crate::rows::CpuSampleRows::new();
        for i in 0..rows as i64 {
            samples.ts.append_value(i);
            samples.cpu.append_value((i % 2) as i32);
            samples.tid.append_value(7);
            samples.pid.append_value(7);
            samples.comm.append_value("burn");
            samples.stack_id.append_value(i % 100);
            samples.kernel.append_value(false);
        }
        let mut stacks = crate::rows::StackRows::new();
        for stack_id in 0..rows as i64 / 16 {
            stacks.push(stack_id, &[stack_id % 1000; 16]);
        }
        let batches = [
            (&hindsight_schemas::tables::CPU_SAMPLE, samples.finish()),
            (&hindsight_schemas::tables::STACK, stacks.finish()),
        ];
        for (table, batch) in batches {
            let dir = tempfile::tempdir().unwrap();
            let mut sink =
                TableSink::new(&PrivateDir::open(dir.path()).unwrap(), table, &stamp()).unwrap();
            // As the ring thread hands them over: a drain's rows at a time.
            for start in (0..rows).step_by(4096) {
                let slice = batch.slice(start, 4096.min(rows - start));
                sink.write(&slice, "c-000003.parquet").unwrap();
            }
            let Closed::File { path, .. } = sink.close_chunk().unwrap() else {
                panic!("a chunk was open")
            };
            assert_eq!(row_group_rows_of(&path), [rows as i64], "{}", table.name);
        }
    }

    #[test]
    fn chunks_appear_only_when_closed_sorted_and_stamped() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = sink(dir.path());
        let mut rows = SchedSwitchRows::new();
        for (ts, cpu) in [(30, 1), (10, 0), (20, 1), (5, 0)] {
            rows.ts.append_value(ts);
            rows.cpu.append_value(cpu);
            for b in [
                &mut rows.prev_tid,
                &mut rows.prev_pid,
                &mut rows.prev_prio,
                &mut rows.next_tid,
                &mut rows.next_pid,
                &mut rows.next_prio,
            ] {
                b.append_value(ts as i32);
            }
            for b in [
                &mut rows.prev_comm,
                &mut rows.prev_state,
                &mut rows.next_comm,
            ] {
                b.append_value("x");
            }
            rows.stack_id.append_null();
        }
        sink.write(&rows.finish(), "c-000000.parquet").unwrap();
        let table_dir = dir.path().join("sched_switch");
        let visible = || -> Vec<String> {
            fs::read_dir(&table_dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| layout::is_chunk_file(n))
                .collect()
        };
        assert!(visible().is_empty(), "an open chunk must not be visible");
        let Closed::File { path: closed, .. } = sink.close_chunk().unwrap() else {
            panic!("a chunk was open")
        };
        assert_eq!(visible(), vec!["c-000000.parquet"]);
        assert_eq!(
            fs::metadata(&closed).unwrap().permissions().mode() & 0o777,
            crate::private_dir::FILE_MODE
        );

        let reader =
            parquet::file::reader::SerializedFileReader::new(File::open(&closed).unwrap()).unwrap();
        let kv = reader
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .unwrap()
            .clone();
        assert!(kv
            .iter()
            .any(|k| k.key == layout::key::TABLE && k.value.as_deref() == Some("sched_switch")));
        let batch = ParquetRecordBatchReaderBuilder::try_new(File::open(&closed).unwrap())
            .unwrap()
            .build()
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        let cpu: Vec<i32> = batch
            .column(1)
            .as_primitive::<Int32Type>()
            .values()
            .to_vec();
        let tid: Vec<i32> = batch
            .column(2)
            .as_primitive::<Int32Type>()
            .values()
            .to_vec();
        assert_eq!(cpu, [0, 0, 1, 1]);
        assert_eq!(tid, [5, 10, 20, 30]);
    }

    use std::os::unix::fs::PermissionsExt;
}
