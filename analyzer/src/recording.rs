//! Opening a recording directory and checking it before anything reads it.
//!
//! A recording is `recording.json` plus one folder a table (see
//! `hindsight_schemas::layout`). [`Recording::open`] reads the description
//! and every closed chunk's Parquet footer — never the data — so a bad
//! input is named precisely, once, before a query or report starts:
//!
//! - the directory must exist and hold a `recording.json` whose `format` is
//!   `meta::FORMAT` and whose `schema_version` this build reads;
//! - every chunk's footer must parse and carry `hindsight.schema_version`
//!   no newer than [`SCHEMA_VERSION`] (and, when present, the table name of
//!   the folder it sits in).
//!
//! Hidden files (`.<name>.parquet.tmp`, still being written), folders of
//! tables this build does not know and `.journal/` are ignored. A table
//! folder that is missing or empty is a table with no rows, not an error.
//!
//! The footers are kept: `info` reports rows, bytes and the time range from
//! them without scanning a single page.
//!
//! A copy of a bucket that a Ballista cluster reads (`--cluster`) holds
//! only `recording.json`: its chunks stay in the bucket, where the
//! executors read them, and [`list_in_bucket`] gives their footers, read
//! with ranged GETs. Opening that copy takes its chunks from that list.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use hindsight_schemas::meta::{self, RecordingMeta};
use hindsight_schemas::{all_tables, derived, layout, Table, SCHEMA_VERSION};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::statistics::Statistics;

/// Why a directory or file is not a recording this build can read. Every
/// kind names the path at fault; `hindsight` exits with code 2 on any of them.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    #[error("{}: no such directory", .0.display())]
    NoSuchDir(PathBuf),
    #[error("{}: not a hindsight recording (no {})", .0.display(), layout::RECORDING_FILE)]
    NoMeta(PathBuf),
    #[error("{}: not a hindsight recording ({reason})", path.display())]
    Foreign { path: PathBuf, reason: String },
    #[error("{}: not a Parquet file (truncated or corrupt)", .0.display())]
    CorruptChunk(PathBuf),
    #[error("{}: no valid {} in its Parquet metadata (not written by hindsight)", .0.display(), layout::key::SCHEMA_VERSION)]
    UntaggedChunk(PathBuf),
    #[error("{}: written with schema version {version}, this hindsight reads up to {SCHEMA_VERSION}", path.display())]
    NewerVersion { path: PathBuf, version: u32 },
    #[error("{}: holds table {found}, not {expected}", path.display())]
    WrongTable {
        path: PathBuf,
        expected: &'static str,
        found: String,
    },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
}

impl RecordingError {
    fn io(path: &Path, source: io::Error) -> Self {
        RecordingError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A validated recording directory.
#[derive(Debug)]
pub struct Recording {
    /// The directory as the user named it.
    pub dir: PathBuf,
    pub meta: RecordingMeta,
    /// One entry per table of `hindsight_schemas::all_tables`, in that
    /// order, present or not.
    pub tables: Vec<TableFiles>,
}

/// The closed chunks of one table in one recording.
#[derive(Debug)]
pub struct TableFiles {
    pub table: &'static Table,
    /// `<recording>/<table>/`, which may not exist.
    pub dir: PathBuf,
    /// Sorted by file name, that is by start time.
    pub chunks: Vec<Chunk>,
}

/// What a chunk's footer says about it.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub path: PathBuf,
    /// Size on disk.
    pub bytes: u64,
    pub rows: u64,
    pub row_groups: usize,
    pub schema_version: u32,
    /// Smallest and largest `ts` (UTC ns) from row-group statistics; `None`
    /// when the file has no rows or no statistics for `ts`.
    pub ts_range: Option<(i64, i64)>,
}

impl Recording {
    /// Reads `recording.json` and every chunk footer; see the module doc
    /// for what is checked.
    pub fn open(dir: &Path) -> Result<Recording, RecordingError> {
        Self::open_reusing(dir, None)
    }

    /// As [`Recording::open`], but the footer of a chunk that `earlier`
    /// (an open of the same directory) read at the same path and size is
    /// not read again: a closed chunk never changes (the recorder renames
    /// it into place whole), so a `push --follow` round over a day of
    /// chunks reads only the footers of those closed since the last.
    pub fn open_reusing(
        dir: &Path,
        earlier: Option<&Recording>,
    ) -> Result<Recording, RecordingError> {
        if !dir.is_dir() {
            return Err(RecordingError::NoSuchDir(dir.to_path_buf()));
        }
        let meta = read_meta(dir)?;
        let listed = IN_BUCKET
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(dir)
            .cloned();
        let tables = match listed {
            Some(chunks) => all_tables()
                .map(|table| {
                    let table_dir = dir.join(table.name);
                    let mut chunks: Vec<Chunk> = chunks
                        .iter()
                        .filter(|c| c.path.parent() == Some(table_dir.as_path()))
                        .cloned()
                        .collect();
                    chunks.sort_by(|a, b| a.path.cmp(&b.path));
                    TableFiles {
                        table,
                        dir: table_dir,
                        chunks,
                    }
                })
                .collect(),
            None => all_tables()
                .map(|table| {
                    let earlier = earlier.and_then(|e| e.table(table.name));
                    read_table(dir, table, earlier)
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        Ok(Recording {
            dir: dir.to_path_buf(),
            meta,
            tables,
        })
    }

    /// The chunks of `table`, empty for a table not recorded.
    pub fn table(&self, name: &str) -> Option<&TableFiles> {
        self.tables.iter().find(|t| t.table.name == name)
    }

    /// Whether the derived tables cover every closed `sched_switch` chunk
    /// and no open chunk has rows they lack (see `hindsight_schemas::derived`).
    pub fn indexed(&self) -> bool {
        let Some(source) = self.table(derived::SOURCE_TABLE) else {
            return false;
        };
        let names = |files: &TableFiles| -> Vec<std::ffi::OsString> {
            files
                .chunks
                .iter()
                .filter_map(|c| c.path.file_name().map(ToOwned::to_owned))
                .collect()
        };
        let expected = names(source);
        !self.journaled(derived::SOURCE_TABLE)
            && derived::DERIVED_TABLES.iter().all(|t| {
                self.table(t.name)
                    .is_some_and(|files| names(files) == expected)
            })
    }

    /// Whether `table` has an open chunk's journal (a recorder is writing).
    pub fn journaled(&self, table: &str) -> bool {
        self.table(table).is_some_and(TableFiles::journaled)
    }

    /// Earliest and latest `ts` of any table, from footers only.
    pub fn time_range(&self) -> Option<(i64, i64)> {
        self.tables
            .iter()
            .flat_map(|t| &t.chunks)
            .filter_map(|c| c.ts_range)
            .reduce(|(a0, a1), (b0, b1)| (a0.min(b0), a1.max(b1)))
    }
}

impl TableFiles {
    /// Whether the table has an open chunk's journal (a recorder is writing).
    pub fn journaled(&self) -> bool {
        fs::read_dir(&self.dir).is_ok_and(|entries| {
            entries.flatten().any(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| layout::chunk_of_journal(n).is_some())
            })
        })
    }

    pub fn rows(&self) -> u64 {
        self.chunks.iter().map(|c| c.rows).sum()
    }

    pub fn bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.bytes).sum()
    }
}

/// The chunks of the recording copied to `dir` that stayed in the bucket,
/// by the path each would have in the copy: from then on this process
/// opens `dir` with these chunks, whatever files the directory holds.
pub fn list_in_bucket(dir: &Path, chunks: Vec<Chunk>) {
    IN_BUCKET
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(dir.to_path_buf(), chunks);
}

/// What [`list_in_bucket`] was given, by copy.
static IN_BUCKET: Mutex<BTreeMap<PathBuf, Vec<Chunk>>> = Mutex::new(BTreeMap::new());

/// Opens every directory, stopping at the first that is not a readable
/// recording.
pub fn open_all(dirs: &[PathBuf]) -> Result<Vec<Recording>, RecordingError> {
    dirs.iter().map(|d| Recording::open(d)).collect()
}

fn read_meta(dir: &Path) -> Result<RecordingMeta, RecordingError> {
    let path = dir.join(layout::RECORDING_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(RecordingError::NoMeta(dir.to_path_buf()))
        }
        Err(e) => return Err(RecordingError::io(&path, e)),
    };
    let foreign = |reason: String| RecordingError::Foreign {
        path: path.clone(),
        reason,
    };
    // Look at `format` and the version before the full structure, so a
    // foreign or newer file is named as such instead of by a missing field.
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| foreign(format!("invalid JSON: {e}")))?;
    match value.get("format").and_then(|f| f.as_str()) {
        Some(meta::FORMAT) => {}
        Some(other) => {
            return Err(foreign(format!(
                "format is {other:?}, expected {:?}",
                meta::FORMAT
            )))
        }
        None => return Err(foreign(format!("no \"format\": {:?}", meta::FORMAT))),
    }
    if let Some(version) = value.get("schema_version").and_then(|v| v.as_u64()) {
        if version > u64::from(SCHEMA_VERSION) {
            let version = u32::try_from(version).unwrap_or(u32::MAX);
            return Err(RecordingError::NewerVersion { path, version });
        }
    }
    RecordingMeta::from_json(&text).map_err(|e| foreign(e.to_string()))
}

fn read_table(
    dir: &Path,
    table: &'static Table,
    earlier: Option<&TableFiles>,
) -> Result<TableFiles, RecordingError> {
    let table_dir = dir.join(table.name);
    let mut names = Vec::new();
    match fs::read_dir(&table_dir) {
        Ok(entries) => {
            for entry in entries {
                let entry = entry.map_err(|e| RecordingError::io(&table_dir, e))?;
                let name = entry.file_name();
                // Names that are not UTF-8 cannot be chunks (chunk names are ASCII).
                if let Some(name) = name.to_str().filter(|n| layout::is_chunk_file(n)) {
                    names.push(name.to_owned());
                }
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(RecordingError::io(&table_dir, e)),
    }
    names.sort();
    let known = |path: &Path| -> Option<Chunk> {
        let chunks = &earlier?.chunks;
        let i = chunks
            .binary_search_by(|c| c.path.as_path().cmp(path))
            .ok()?;
        let size = fs::metadata(path).ok()?.len();
        (chunks[i].bytes == size).then(|| chunks[i].clone())
    };
    let chunks = names
        .iter()
        .map(|name| {
            let path = table_dir.join(name);
            known(&path).map_or_else(|| read_chunk(&path, table), Ok)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(TableFiles {
        table,
        dir: table_dir,
        chunks,
    })
}

/// Reads one footer (the last few KiB of the file) and checks its tags.
pub fn read_chunk(path: &Path, table: &'static Table) -> Result<Chunk, RecordingError> {
    let file = File::open(path).map_err(|e| RecordingError::io(path, e))?;
    let bytes = file
        .metadata()
        .map_err(|e| RecordingError::io(path, e))?
        .len();
    let footer = hindsight_schemas::footer::read(&file)
        .map_err(|_| RecordingError::CorruptChunk(path.to_path_buf()))?;
    chunk_of_footer(path, bytes, table, &footer)
}

/// A chunk of `table` at `path`, `bytes` long, from its footer, with its
/// tags checked.
pub fn chunk_of_footer(
    path: &Path,
    bytes: u64,
    table: &'static Table,
    footer: &ParquetMetaData,
) -> Result<Chunk, RecordingError> {
    let schema_version = check_tags(path, table, footer)?;
    let rows = u64::try_from(footer.file_metadata().num_rows()).unwrap_or(0);
    Ok(Chunk {
        path: path.to_path_buf(),
        bytes,
        rows,
        row_groups: footer.num_row_groups(),
        schema_version,
        ts_range: ts_range(footer),
    })
}

fn check_tags(
    path: &Path,
    table: &'static Table,
    footer: &ParquetMetaData,
) -> Result<u32, RecordingError> {
    let kv = footer.file_metadata().key_value_metadata();
    let get = |key: &str| {
        kv.and_then(|kv| kv.iter().find(|e| e.key == key))
            .and_then(|e| e.value.as_deref())
    };
    let version = get(layout::key::SCHEMA_VERSION)
        .and_then(|v| v.trim().parse::<u32>().ok())
        .ok_or_else(|| RecordingError::UntaggedChunk(path.to_path_buf()))?;
    if version > SCHEMA_VERSION {
        return Err(RecordingError::NewerVersion {
            path: path.to_path_buf(),
            version,
        });
    }
    // A file moved into the wrong folder would otherwise fail later with a
    // schema mismatch that names neither the file nor the cause.
    if let Some(found) = get(layout::key::TABLE) {
        if found != table.name {
            return Err(RecordingError::WrongTable {
                path: path.to_path_buf(),
                expected: table.name,
                found: found.to_owned(),
            });
        }
    }
    Ok(version)
}

/// Min and max of the `ts` column over all row groups, from statistics.
pub(crate) fn ts_range(footer: &ParquetMetaData) -> Option<(i64, i64)> {
    footer
        .row_groups()
        .iter()
        .filter(|rg| rg.num_rows() > 0)
        .filter_map(|rg| {
            let column = rg
                .columns()
                .iter()
                .find(|c| c.column_path().string() == "ts")?;
            match column.statistics()? {
                Statistics::Int64(s) => Some((*s.min_opt()?, *s.max_opt()?)),
                _ => None,
            }
        })
        .reduce(|(a0, a1), (b0, b1)| (a0.min(b0), a1.max(b1)))
}
