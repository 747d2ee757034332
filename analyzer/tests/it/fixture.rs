//! Recordings in a temp dir: `recording.json` from `meta::RecordingMeta`,
//! chunks as zstd Parquet with `layout::file_metadata`, rows written as
//! JSON objects so that cases read as data.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use arrow::array::RecordBatch;
use hindsight::chunk_file;
use hindsight_schemas::meta::{RecordingMeta, Session, FORMAT};
use hindsight_schemas::time::ClockOffset;
use hindsight_schemas::{layout, Table, SCHEMA_VERSION};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use serde_json::Value;
use tempfile::TempDir;

/// 2023-11-14T22:13:20Z, the start of every fixture.
pub const BASE_NS: i64 = 1_700_000_000_000_000_000;
/// Boot-clock time at `BASE_NS`: process start times below it are before
/// the recording.
pub const BOOTED_BEFORE_NS: i64 = 100_000_000_000;

/// `BASE_NS` plus `ms` milliseconds.
pub fn t(ms: i64) -> i64 {
    BASE_NS + ms * 1_000_000
}

/// A temp dir that holds any number of recordings; removed on drop.
pub struct Fixture {
    root: TempDir,
}

impl Fixture {
    pub fn new() -> Fixture {
        Fixture {
            root: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    /// A recording directory `name` of `host` with one session, no chunks.
    pub fn recording(&self, name: &str, host: &str) -> Rec {
        let rec = Rec {
            dir: self.path(name),
            host: host.into(),
        };
        fs::create_dir_all(&rec.dir).unwrap();
        rec.write_meta(&meta(host));
        rec
    }
}

/// One recording directory.
pub struct Rec {
    pub dir: PathBuf,
    pub host: String,
}

impl Rec {
    pub fn write_meta(&self, meta: &RecordingMeta) {
        fs::write(self.dir.join(layout::RECORDING_FILE), meta.to_json()).unwrap();
    }

    /// Writes `rows` as the chunk `<table>/<file>` with the standard tags.
    pub fn chunk(&self, table: &Table, file: &str, rows: &[Value]) -> PathBuf {
        let tags = layout::file_metadata(table.name, &self.host, "boot-1", "0.1.0-test");
        self.chunk_with_tags(table, file, rows, tags)
    }

    /// Like [`Rec::chunk`], with the key-value metadata given.
    pub fn chunk_with_tags(
        &self,
        table: &Table,
        file: &str,
        rows: &[Value],
        tags: Vec<(String, String)>,
    ) -> PathBuf {
        let dir = self.dir.join(table.name);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(file);
        write_parquet(&path, &batch(table, rows), tags);
        path
    }

    /// Writes `rows` as the chunk `<table>/<file>` as the recorder lays
    /// one out: row groups of `group_rows` rows, each sorted by the
    /// table's key (declared in the file), the file as a whole not.
    pub fn chunk_as_recorded(
        &self,
        table: &Table,
        file: &str,
        rows: &[Value],
        group_rows: usize,
    ) -> PathBuf {
        let dir = self.dir.join(table.name);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(file);
        let stamp = chunk_file::Stamp {
            host: self.host.clone(),
            boot_id: "boot-1".into(),
            recorder_version: "0.1.0-test".into(),
        };
        let temp = dir.join(format!(".{file}.tmp"));
        let mut writer = chunk_file::create(&temp, table, &stamp).unwrap();
        for group in rows.chunks(group_rows) {
            let mut group = group.to_vec();
            group.sort_by(|a, b| {
                table
                    .sort_key
                    .iter()
                    .map(|column| match (a[*column].as_i64(), b[*column].as_i64()) {
                        (Some(x), Some(y)) => x.cmp(&y),
                        _ => a[*column].to_string().cmp(&b[*column].to_string()),
                    })
                    .find(|order| order.is_ne())
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            writer.write(&batch(table, &group)).unwrap();
            writer.flush().unwrap();
        }
        chunk_file::commit(writer, &temp, &path).unwrap();
        path
    }

    /// Creates the folder of `table` without any chunk.
    pub fn empty_table(&self, table: &Table) {
        fs::create_dir_all(self.dir.join(table.name)).unwrap();
    }
}

pub fn meta(host: &str) -> RecordingMeta {
    RecordingMeta {
        format: FORMAT.into(),
        schema_version: SCHEMA_VERSION,
        host: host.into(),
        sessions: vec![Session {
            started: "2023-11-14T22:13:20Z".into(),
            stopped: Some("2023-11-14T22:14:20Z".into()),
            boot_id: "0123456789abcdef".into(),
            kernel: "6.18.0-test".into(),
            cpus: 2,
            numa_nodes: 1,
            recorder_version: "0.1.0-test".into(),
            command_line: vec!["hindsight-record".into()],
            events: vec!["sched".into()],
            chunk_ns: 60_000_000_000,
            // The machine booted 100 s before the recording started.
            clock_offsets: vec![ClockOffset {
                at_boot_ns: BOOTED_BEFORE_NS as u64,
                offset_ns: BASE_NS - BOOTED_BEFORE_NS,
            }],
            skipped_probes: vec!["sched:sched_stick_numa".into()],
            ..Default::default()
        }],
        retired: Vec::new(),
        slice_of: None,
    }
}

/// A batch of `table` from rows given as JSON objects keyed by column.
/// Missing non-nullable columns take a zero value; `ts` is in UTC ns.
pub fn batch(table: &Table, rows: &[Value]) -> RecordBatch {
    chunk_file::batch_from_json(table, rows).expect("rows match the schema")
}

/// A zstd Parquet file as the recorder writes one.
pub fn write_parquet(path: &Path, batch: &RecordBatch, tags: Vec<(String, String)>) {
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_key_value_metadata(Some(
            tags.into_iter().map(|(k, v)| KeyValue::new(k, v)).collect(),
        ))
        .build();
    let mut writer =
        ArrowWriter::try_new(File::create(path).unwrap(), batch.schema(), Some(props)).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
}

/// Runs the `hindsight` binary.
pub fn hindsight<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    Command::new(env!("CARGO_BIN_EXE_hindsight"))
        .args(args)
        // Tables fit a terminal's width only when told; tests read them whole.
        .env_remove("COLUMNS")
        .output()
        .expect("runs hindsight")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}
