//! `hindsight index DIR`: builds the derived tables
//! (`hindsight_schemas::derived`) of a recording that lacks them.
//!
//! One pass over the `sched_switch` and `sched_wakeup` chunks in time
//! order, a row group at a time ([`hindsight_schemas::pairing`] does the
//! pairing): memory follows the live threads and one second of events,
//! never the recording's size. Each derived file is written the way the
//! recorder writes chunks (hidden name, close, fsync, rename), so a reader
//! never sees half of one; an interrupted index leaves the recording as it
//! was, or indexed only in part, which reads as not indexed.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use arrow::array::{AsArray, RecordBatch};
use arrow::compute::{lexsort_to_indices, take_record_batch, SortColumn};
use arrow::datatypes::TimestampNanosecondType;
use hindsight_schemas::derived::{self, DERIVED_TABLES};
use hindsight_schemas::layout;
use hindsight_schemas::pairing::Pairing;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ProjectionMask;

use crate::chunk_file::{self, stamp_of, ChunkWriter, Stamp};
use crate::progress::Progress;
use crate::recording::Recording;
use crate::report::parse_time;

/// Rows of a derived table sorted and written as one row group.
const ROW_GROUP_ROWS: usize = 128 * 1024;

/// What an index run did.
#[derive(Debug, Default)]
pub struct Summary {
    pub chunks: usize,
    pub switches: u64,
    pub wakeups: u64,
    /// Rows written per derived table, in `DERIVED_TABLES` order.
    pub rows: Vec<(&'static str, u64)>,
    pub bytes: u64,
    /// Events more than `pairing::REORDER_NS` late, paired out of order.
    pub late: u64,
    pub seconds: f64,
    /// False when the recording was indexed already and nothing was done.
    pub built: bool,
    /// The recording has no `sched_switch` chunk (the `sched` group was not
    /// recorded): there is nothing to pair.
    pub nothing_to_pair: bool,
}

/// Builds the derived tables of the recording in `dir`, unless it is
/// indexed already (`force` rebuilds them anyway).
pub fn index(dir: &Path, force: bool) -> Result<Summary> {
    let started = Instant::now();
    let recording = Recording::open(dir)?;
    let has_switches = recording
        .table(derived::SOURCE_TABLE)
        .is_some_and(|t| !t.chunks.is_empty());
    if !has_switches || (recording.indexed() && !force) {
        return Ok(Summary {
            nothing_to_pair: !has_switches,
            ..Summary::default()
        });
    }
    if recording.journaled(derived::SOURCE_TABLE) {
        eprintln!(
            "hindsight index: {}: a recorder is writing it; the open chunk is left out until it closes",
            dir.display()
        );
    }
    let slices = time_slices(&recording);
    let sessions = recording
        .meta
        .sessions
        .iter()
        .filter_map(|s| parse_time(&s.started).ok())
        .collect();
    let mut pairing = Pairing::new(sessions);
    let bytes_total: u64 = slices.values().map(|s| s.bytes).sum();
    let mut progress = Progress::bytes("indexing", bytes_total);
    let mut summary = Summary {
        rows: DERIVED_TABLES.iter().map(|t| (t.name, 0)).collect(),
        built: true,
        ..Summary::default()
    };
    let source = recording
        .table(derived::SOURCE_TABLE)
        .expect("every table is listed");
    let stamp = match source.chunks.first() {
        Some(chunk) => stamp_of(&chunk.path, &recording),
        None => stamp_of(Path::new(""), &recording),
    };
    let mut written = BTreeSet::new();
    let mut open: Option<Outputs> = None;
    for (i, (name, slice)) in slices.iter().enumerate() {
        if slice.switches.is_some() && open.is_none() {
            open = Some(Outputs::create(dir, name, &stamp)?);
        }
        let mut inputs = Vec::new();
        if let Some(path) = &slice.switches {
            inputs.push(Input::open(path, true)?);
        }
        if let Some(path) = &slice.wakeups {
            inputs.push(Input::open(path, false)?);
        }
        // Read the two tables in step: always the one further behind.
        while let Some(input) = inputs
            .iter_mut()
            .filter(|i| !i.done)
            .min_by_key(|i| i.newest)
        {
            let Some(batch) = input.next()? else {
                continue;
            };
            progress.advance(input.bytes_per_row * batch.num_rows() as u64);
            if input.switches {
                summary.switches += batch.num_rows() as u64;
                pairing.push_switches(&batch)
            } else {
                summary.wakeups += batch.num_rows() as u64;
                pairing.push_wakeups(&batch)
            }
            .with_context(|| format!("{}: not a {} chunk", input.path.display(), input.table()))?;
            let read_until = inputs
                .iter()
                .filter(|i| !i.done)
                .map(|i| i.newest)
                .min()
                .unwrap_or(i64::MAX);
            pairing.advance(read_until);
            if let Some(out) = open.as_mut() {
                if pairing.finished_rows() >= ROW_GROUP_ROWS {
                    out.add(pairing.take())?;
                }
            }
        }
        if i + 1 == slices.len() {
            pairing.finish();
        }
        if slice.switches.is_some() {
            let mut out = open.take().expect("opened above");
            out.add(pairing.take())?;
            for (total, rows) in summary.rows.iter_mut().zip(&out.rows) {
                total.1 += rows;
            }
            summary.bytes += out.close()?;
            written.insert(name.clone());
            summary.chunks += 1;
        }
    }
    remove_stale(dir, &written)?;
    progress.finish();
    summary.late = pairing.late();
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}

/// The chunks of one time slice (one chunk name) of the two source tables.
#[derive(Default)]
struct Slice {
    switches: Option<PathBuf>,
    wakeups: Option<PathBuf>,
    /// Both files' size, for progress.
    bytes: u64,
}

/// Every chunk name of `sched_switch` and `sched_wakeup`, in time order.
fn time_slices(recording: &Recording) -> BTreeMap<String, Slice> {
    let mut slices: BTreeMap<String, Slice> = BTreeMap::new();
    for (table, switches) in [("sched_switch", true), ("sched_wakeup", false)] {
        let Some(files) = recording.table(table) else {
            continue;
        };
        for chunk in &files.chunks {
            let Some(name) = chunk.path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let slice = slices.entry(name.to_owned()).or_default();
            slice.bytes += chunk.bytes;
            let path = Some(chunk.path.clone());
            if switches {
                slice.switches = path;
            } else {
                slice.wakeups = path;
            }
        }
    }
    slices
}

/// One source chunk, read a row group at a time.
struct Input {
    path: PathBuf,
    switches: bool,
    reader: ParquetRecordBatchReader,
    /// How far every CPU's rows have been read ([`read_until`]).
    newest: i64,
    done: bool,
    /// For progress: the file's bytes over its rows.
    bytes_per_row: u64,
}

impl Input {
    fn open(path: &Path, switches: bool) -> Result<Input> {
        let columns: &[&str] = if switches {
            &[
                "ts",
                "cpu",
                "prev_tid",
                "prev_pid",
                "prev_comm",
                "prev_state",
                "next_tid",
                "next_pid",
                "next_comm",
                "next_prio",
                "stack_id",
            ]
        } else {
            &["ts", "cpu", "tid", "pid", "comm"]
        };
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let bytes = file.metadata().map_or(0, |m| m.len());
        let builder = ParquetRecordBatchReaderBuilder::try_new(file)
            .with_context(|| format!("{}: not a Parquet file", path.display()))?;
        let schema = builder.parquet_schema();
        let indices: Vec<usize> = (0..schema.num_columns())
            .filter(|&i| columns.contains(&schema.column(i).name()))
            .collect();
        let mask = ProjectionMask::roots(schema, indices);
        let rows = builder.metadata().file_metadata().num_rows().max(1) as u64;
        let reader = builder
            .with_projection(mask)
            .with_batch_size(32 * 1024)
            .build()
            .with_context(|| format!("reading {}", path.display()))?;
        Ok(Input {
            path: path.to_path_buf(),
            switches,
            reader,
            newest: i64::MIN,
            done: false,
            bytes_per_row: bytes / rows,
        })
    }

    fn table(&self) -> &'static str {
        if self.switches {
            "sched_switch"
        } else {
            "sched_wakeup"
        }
    }

    fn next(&mut self) -> Result<Option<RecordBatch>> {
        match self.reader.next() {
            None => {
                self.done = true;
                Ok(None)
            }
            Some(batch) => {
                let batch = batch.with_context(|| format!("reading {}", self.path.display()))?;
                if let Some(ts) = read_until(&batch) {
                    self.newest = self.newest.max(ts);
                }
                Ok(Some(batch))
            }
        }
    }
}

/// How far a batch has read every CPU's stream: the least, over the CPUs
/// in it, of the newest `ts` of that CPU. A row group is sorted by `cpu, ts`
/// and may span more than the pairing's reorder window (32 K rows of a
/// quiet host are minutes), so its newest row says nothing of the CPUs
/// whose rows come next in the file.
fn read_until(batch: &RecordBatch) -> Option<i64> {
    let ts = batch
        .column_by_name("ts")?
        .as_primitive_opt::<TimestampNanosecondType>()?;
    let cpu = batch
        .column_by_name("cpu")?
        .as_primitive_opt::<arrow::datatypes::Int32Type>()?;
    let mut newest: BTreeMap<i32, i64> = BTreeMap::new();
    for (cpu, ts) in cpu.values().iter().zip(ts.values()) {
        let entry = newest.entry(*cpu).or_insert(*ts);
        *entry = (*entry).max(*ts);
    }
    newest.into_values().min()
}

/// The open derived files of one chunk name.
struct Outputs {
    files: Vec<(PathBuf, PathBuf, ChunkWriter)>,
    /// Rows of each table not yet written: a row group is written once
    /// [`ROW_GROUP_ROWS`] have gathered (or at close), so that a small
    /// table (`thread_second`) is not cut into a row group per batch.
    pending: Vec<Vec<RecordBatch>>,
    rows: Vec<u64>,
}

impl Outputs {
    fn create(dir: &Path, name: &str, stamp: &Stamp) -> Result<Outputs> {
        let mut files = Vec::new();
        for &table in DERIVED_TABLES {
            let table_dir = dir.join(table.name);
            fs::create_dir_all(&table_dir)
                .with_context(|| format!("creating {}", table_dir.display()))?;
            let temp = table_dir.join(layout::temp_file_name(name));
            let writer = chunk_file::create(&temp, table, stamp)?;
            files.push((temp, table_dir.join(name), writer));
        }
        Ok(Outputs {
            rows: vec![0; files.len()],
            pending: vec![Vec::new(); files.len()],
            files,
        })
    }

    /// Adds each table's rows; writes those of a table with a row group's
    /// worth.
    fn add(&mut self, batches: [RecordBatch; 4]) -> Result<()> {
        for (i, batch) in batches.into_iter().enumerate() {
            if batch.num_rows() > 0 {
                self.rows[i] += batch.num_rows() as u64;
                self.pending[i].push(batch);
            }
            let pending: usize = self.pending[i].iter().map(RecordBatch::num_rows).sum();
            if pending >= ROW_GROUP_ROWS {
                self.write(i)?;
            }
        }
        Ok(())
    }

    /// Writes table `i`'s pending rows as one row group sorted by its sort key.
    fn write(&mut self, i: usize) -> Result<()> {
        let batches = std::mem::take(&mut self.pending[i]);
        let Some(first) = batches.first() else {
            return Ok(());
        };
        let table = DERIVED_TABLES[i];
        let batch = arrow::compute::concat_batches(&first.schema(), &batches)?;
        drop(batches);
        let key: Vec<SortColumn> = table
            .sort_key
            .iter()
            .map(|column| SortColumn {
                values: batch.column(table.index(column)).clone(),
                options: None,
            })
            .collect();
        let order = lexsort_to_indices(&key, None)?;
        let sorted = take_record_batch(&batch, &order)?;
        let (temp, _, writer) = &mut self.files[i];
        writer
            .write(&sorted)
            .and_then(|()| writer.flush())
            .with_context(|| format!("writing {}", temp.display()))?;
        Ok(())
    }

    /// Writes what is pending, closes, fsyncs and renames every file;
    /// returns their bytes.
    fn close(mut self) -> Result<u64> {
        for i in 0..self.files.len() {
            self.write(i)?;
        }
        let mut bytes = 0;
        for (temp, path, writer) in self.files {
            bytes += chunk_file::commit(writer, &temp, &path)?;
        }
        Ok(bytes)
    }
}

/// Removes derived files of chunks that are gone (deleted by retention,
/// or from an earlier index of a recording since grown).
fn remove_stale(dir: &Path, written: &BTreeSet<String>) -> Result<()> {
    for table in DERIVED_TABLES {
        let table_dir = dir.join(table.name);
        let Ok(entries) = fs::read_dir(&table_dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if layout::is_chunk_file(&name) && !written.contains(&name) {
                fs::remove_file(entry.path())
                    .with_context(|| format!("removing {}", entry.path().display()))?;
            }
        }
    }
    Ok(())
}

/// What `hindsight index` prints for one recording.
pub fn write_summary(dir: &Path, summary: &Summary, out: &mut impl std::io::Write) -> Result<()> {
    if summary.nothing_to_pair {
        writeln!(
            out,
            "{}: no sched_switch chunks (recorded without --events sched): nothing to pair",
            dir.display()
        )?;
        return Ok(());
    }
    if !summary.built {
        writeln!(
            out,
            "{}: indexed already (--force rebuilds it)",
            dir.display()
        )?;
        return Ok(());
    }
    let rows: Vec<String> = summary
        .rows
        .iter()
        .map(|(table, rows)| format!("{table} {rows}"))
        .collect();
    writeln!(
        out,
        "{}: {} chunks, {} switches and {} wakeups paired in {:.1} s: {} rows ({:.2} MiB)",
        dir.display(),
        summary.chunks,
        summary.switches,
        summary.wakeups,
        summary.seconds,
        rows.join(", "),
        summary.bytes as f64 / (1u64 << 20) as f64,
    )?;
    if summary.late > 0 {
        writeln!(
            out,
            "{}: {} events reached the recorder over a second late and were paired out of order",
            dir.display(),
            summary.late
        )?;
    }
    Ok(())
}
