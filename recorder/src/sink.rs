//! The Parquet sink: one per table, writing the chunk files of a recording.
//!
//! Guarantees, which the rest of the recorder and every reader rely on:
//! - A reader never sees a partial file. A chunk is written under a hidden
//!   temporary name (`<table>/.<name>.parquet.tmp`), then closed (footer
//!   written), fsynced, renamed to `<name>.parquet` and the directory
//!   fsynced. Readers list only `*.parquet` names that do not start with `.`.
//! - Memory is bounded by the caller's batch size: each batch written is
//!   one Parquet row group, encoded and flushed to the temporary file at once.
//! - Within each row group, rows are sorted by the table's sort key (for
//!   example `cpu, ts`), and the file declares it in its metadata.
//! - Every file carries the schema version, table, host and boot id in its
//!   key-value metadata, so it still says what it is when mailed alone.
//!
//! A chunk whose recorder is killed before the rename stays a `.tmp` file:
//! never read, removed by the next recorder start. (Journaling the open
//! chunk so a kill loses at most a second is a separate layer.)

use std::{
    fs::{self, File, OpenOptions},
    io::BufWriter,
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
    sync::Arc,
};

use anyhow::Context;
use arrow::{
    array::{Array, AsArray, StringArray, UInt32Array},
    compute::{lexsort_to_indices, take_record_batch, SortColumn, SortOptions},
    datatypes::{Int32Type, Int64Type, TimestampNanosecondType},
    record_batch::RecordBatch,
};
use hindsight_schemas::{layout, Table};
use parquet::{
    arrow::ArrowWriter,
    basic::{Compression, Encoding, ZstdLevel},
    file::{
        metadata::{KeyValue, SortingColumn},
        properties::{EnabledStatistics, WriterProperties},
    },
    schema::types::ColumnPath,
};

/// Mode of every file a recording holds: recordings contain command lines.
pub const FILE_MODE: u32 = 0o640;

/// Who wrote a recording, stamped into every file.
#[derive(Clone, Debug)]
pub struct FileStamp {
    pub host: String,
    pub boot_id: String,
    pub recorder_version: String,
}

struct OpenChunk {
    writer: ArrowWriter<BufWriter<File>>,
    temp_path: PathBuf,
    final_path: PathBuf,
}

/// Writes one table's chunks.
pub struct TableSink {
    table: &'static Table,
    dir: PathBuf,
    props: WriterProperties,
    open: Option<OpenChunk>,
    /// Bytes of the files this sink has closed, for the recorder's own accounting.
    pub bytes_written: u64,
    pub rows_written: u64,
}

/// Writer properties chosen per column: delta encoding for the timestamp
/// (consecutive events differ by little), dictionaries elsewhere (zstd on
/// top), the table's sort key declared.
fn writer_properties(table: &Table, stamp: &FileStamp) -> WriterProperties {
    let sorting: Vec<SortingColumn> = table
        .sort_key
        .iter()
        .map(|name| SortingColumn {
            column_idx: table.index(name) as i32,
            descending: false,
            nulls_first: false,
        })
        .collect();
    let metadata = layout::file_metadata(
        table.name,
        &stamp.host,
        &stamp.boot_id,
        &stamp.recorder_version,
    )
    .into_iter()
    .map(|(k, v)| KeyValue::new(k, v))
    .collect();
    let ts = ColumnPath::from("ts");
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(
            ZstdLevel::try_new(3).expect("valid zstd level"),
        ))
        .set_column_dictionary_enabled(ts.clone(), false)
        .set_column_encoding(ts, Encoding::DELTA_BINARY_PACKED)
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_max_row_group_row_count(Some(usize::MAX))
        .set_sorting_columns(Some(sorting))
        .set_key_value_metadata(Some(metadata))
        .build()
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
    let columns: Vec<SortColumn> = table
        .sort_key
        .iter()
        .map(|name| SortColumn {
            values: batch.column(table.index(name)).clone(),
            options: Some(SortOptions {
                descending: false,
                nulls_first: false,
            }),
        })
        .collect();
    let indices = lexsort_to_indices(&columns, None)?;
    Ok(take_record_batch(batch, &indices)?)
}

/// fsync a directory, so a rename in it survives a crash.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

impl TableSink {
    pub fn new(recording: &Path, table: &'static Table, stamp: &FileStamp) -> anyhow::Result<Self> {
        let dir = recording.join(table.name);
        crate::recording::create_private_dir(&dir)?;
        Ok(TableSink {
            table,
            dir,
            props: writer_properties(table, stamp),
            open: None,
            bytes_written: 0,
            rows_written: 0,
        })
    }

    pub fn table(&self) -> &'static Table {
        self.table
    }

    /// Appends a batch as one sorted row group of the open chunk, opening
    /// the chunk file named `file_name` when none is open.
    pub fn write(&mut self, batch: &RecordBatch, file_name: &str) -> anyhow::Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let sorted = sort_batch(self.table, batch)?;
        if self.open.is_none() {
            self.open = Some(self.open_chunk(file_name)?);
        }
        let chunk = self.open.as_mut().expect("opened above");
        let path = &chunk.temp_path;
        chunk
            .writer
            .write(&sorted)
            .with_context(|| format!("writing {}", path.display()))?;
        chunk
            .writer
            .flush()
            .with_context(|| format!("writing {}", path.display()))?;
        self.rows_written += sorted.num_rows() as u64;
        Ok(())
    }

    fn open_chunk(&self, file_name: &str) -> anyhow::Result<OpenChunk> {
        let final_path = self.dir.join(file_name);
        let temp_path = self.dir.join(layout::temp_file_name(file_name));
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(FILE_MODE)
            .open(&temp_path)
            .with_context(|| format!("creating {}", temp_path.display()))?;
        let writer = ArrowWriter::try_new(
            BufWriter::with_capacity(256 << 10, file),
            Arc::clone(&self.table.schema()),
            Some(self.props.clone()),
        )
        .with_context(|| format!("starting {}", temp_path.display()))?;
        Ok(OpenChunk {
            writer,
            temp_path,
            final_path,
        })
    }

    /// Closes the open chunk (if any): footer, fsync, rename, fsync the dir.
    /// Returns the path of the closed file.
    pub fn close_chunk(&mut self) -> anyhow::Result<Option<PathBuf>> {
        let Some(chunk) = self.open.take() else {
            return Ok(None);
        };
        let temp = &chunk.temp_path;
        let buffered = chunk
            .writer
            .into_inner()
            .with_context(|| format!("closing {}", temp.display()))?;
        let file = buffered
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("flushing {}", temp.display()))?;
        file.sync_all()
            .with_context(|| format!("fsync {}", temp.display()))?;
        self.bytes_written += file.metadata().map(|m| m.len()).unwrap_or(0);
        drop(file);
        fs::rename(temp, &chunk.final_path).with_context(|| {
            format!(
                "renaming {} to {}",
                temp.display(),
                chunk.final_path.display()
            )
        })?;
        sync_dir(&self.dir).with_context(|| format!("fsync {}", self.dir.display()))?;
        Ok(Some(chunk.final_path))
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::AsArray;
    use arrow::datatypes::Int32Type;
    use parquet::{arrow::arrow_reader::ParquetRecordBatchReaderBuilder, file::reader::FileReader};

    use super::*;
    use crate::rows::SchedSwitchRows;

    fn stamp() -> FileStamp {
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
        let columns: Vec<SortColumn> = table
            .sort_key
            .iter()
            .map(|name| SortColumn {
                values: batch.column(table.index(name)).clone(),
                options: Some(SortOptions {
                    descending: false,
                    nulls_first: false,
                }),
            })
            .collect();
        let expected =
            take_record_batch(&batch, &lexsort_to_indices(&columns, None).unwrap()).unwrap();
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

    #[test]
    fn chunks_appear_only_when_closed_sorted_and_stamped() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = TableSink::new(
            dir.path(),
            &hindsight_schemas::tables::SCHED_SWITCH,
            &stamp(),
        )
        .unwrap();
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
        let closed = sink.close_chunk().unwrap().unwrap();
        assert_eq!(visible(), vec!["c-000000.parquet"]);
        assert_eq!(
            fs::metadata(&closed).unwrap().permissions().mode() & 0o777,
            FILE_MODE
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
