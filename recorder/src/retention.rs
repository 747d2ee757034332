//! Retention: keeps a recording under its disk budget (`--max-size`) and
//! age limit (`--max-age`) by deleting its oldest closed chunks.
//!
//! Policy, in the order it is applied after every chunk closes:
//! - Only closed chunks (`<table>/<start>-<seq>.parquet`) are deleted, never
//!   the open chunk's hidden temporaries nor `recording.json`. Since every
//!   table rolls at the same moment, chunks of one roll share a start time:
//!   deleting whole *time slices* (every table's chunk of the oldest start)
//!   takes from each table in proportion to its size, and every table still
//!   covers the same, most recent, period.
//! - `--max-age`: slices that started before `now - max_age` go.
//! - `--max-size`: oldest slices go until the closed chunks *and the open
//!   chunk's files* (its journal and unfinished Parquet file, together about
//!   2.4 times what the chunk becomes) fit the budget. Checked after each
//!   close and at every flush while a chunk is open, this bounds disk use at
//!   the budget plus what the open chunk grows between two flushes (and the
//!   newest slice, which is never deleted).
//! - Reference tables ([`REFERENCE_TABLES`]: `process`, `stack`, `frame`)
//!   hold what newer rows refer to, written once when first seen. Their
//!   files are skipped by both rules above and deleted, oldest first, only
//!   when the budget cannot be met otherwise.
//! - The newest slice is never deleted: a budget smaller than one chunk
//!   still leaves the last minute on disk (and says so once).
//!
//! What is deleted is returned as [`Retired`] entries (per table per pass),
//! which the recorder appends to `recording.json`, so `info` can say which
//! periods the recording no longer covers.
//!
//! The index of closed chunks is built by one directory scan when the
//! recorder starts; after that only the chunks just closed are `stat`ed, so
//! a week of minute chunks costs no directory walk per minute. The open
//! chunk's files are not looked at at all: the writer counts what it
//! appends to them (listing every table's directory once a second was a
//! fifth of an idle recorder's CPU).

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use hindsight_schemas::{layout, meta::Retired, tables::REFERENCE_TABLES, time::rfc3339};

/// Default `--max-size` before the filesystem cap.
pub const DEFAULT_MAX_SIZE: u64 = 2 << 30;
/// The default budget never takes more than this fraction of the
/// filesystem the recording is on (a small root disk stays usable).
pub const DEFAULT_FS_FRACTION: u64 = 10;

/// What retention enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of closed chunks the recording may hold.
    pub max_size: u64,
    /// Closed chunks that started longer ago than this are deleted.
    pub max_age: Option<Duration>,
}

/// The default `--max-size` for a recording in `dir`: [`DEFAULT_MAX_SIZE`],
/// capped to 1/[`DEFAULT_FS_FRACTION`] of its filesystem.
pub fn default_max_size(dir: &Path) -> u64 {
    capped_max_size(filesystem_size(dir))
}

/// [`DEFAULT_MAX_SIZE`] capped to 1/[`DEFAULT_FS_FRACTION`] of a filesystem
/// of `fs_size` bytes; uncapped when its size is unknown.
fn capped_max_size(fs_size: Option<u64>) -> u64 {
    DEFAULT_MAX_SIZE.min(fs_size.unwrap_or(u64::MAX) / DEFAULT_FS_FRACTION)
}

/// Size of the filesystem holding `dir` (or its nearest existing parent).
fn filesystem_size(dir: &Path) -> Option<u64> {
    let existing = dir.ancestors().find(|p| p.exists())?;
    let c_path = std::ffi::CString::new(existing.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs fills the struct we own from a NUL-terminated path.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    Some(stat.f_blocks as u64 * stat.f_frsize as u64)
}

/// One closed chunk on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Chunk {
    bytes: u64,
    /// Close time (UTC ns, from the file's mtime): where the chunk ends.
    end_ns: i64,
}

/// The closed chunks of a recording, by (start, table, file name).
#[derive(Debug)]
pub struct Retention {
    dir: PathBuf,
    limits: Limits,
    chunks: BTreeMap<(i64, String, String), Chunk>,
    /// Bytes of every chunk in `chunks`.
    total: u64,
    /// Bytes of the open chunk's hidden files, as last measured.
    open: u64,
    /// The most the previous chunk took before it closed: the room the
    /// next chunk will likely need, kept free for it from its start.
    last_open_peak: u64,
    /// Whether the "newest slice alone exceeds the budget" warning was given.
    warned_small_budget: bool,
}

impl Retention {
    /// Indexes every closed chunk under `dir` (files of other sessions too).
    pub fn scan(dir: &Path, limits: Limits) -> Retention {
        let mut retention = Retention {
            dir: dir.into(),
            limits,
            chunks: BTreeMap::new(),
            total: 0,
            open: 0,
            last_open_peak: 0,
            warned_small_budget: false,
        };
        for table in fs::read_dir(dir).into_iter().flatten().flatten() {
            if !table.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let table_name = table.file_name().to_string_lossy().into_owned();
            if table_name.starts_with('.') {
                continue;
            }
            for file in fs::read_dir(table.path()).into_iter().flatten().flatten() {
                let name = file.file_name().to_string_lossy().into_owned();
                retention.add(&table_name, &name);
            }
        }
        retention
    }

    /// Bytes of closed chunks the recording holds now.
    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// Takes note of a chunk that was just closed (a name that is not a
    /// closed chunk, or a table that wrote nothing this time, is ignored).
    pub fn add(&mut self, table: &str, file_name: &str) {
        if !layout::is_chunk_file(file_name) {
            return;
        }
        let Some(start) = layout::chunk_start_ns(file_name) else {
            return;
        };
        // Only the recording's own files: a link named like a chunk is not
        // one, whatever it points to.
        let Ok(meta) = fs::symlink_metadata(self.dir.join(table).join(file_name)) else {
            return;
        };
        if !meta.is_file() {
            return;
        }
        let end_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(start, |d| d.as_nanos() as i64);
        let key = (start, table.to_string(), file_name.to_string());
        let chunk = Chunk {
            bytes: meta.len(),
            end_ns,
        };
        if let Some(old) = self.chunks.insert(key, chunk) {
            self.total -= old.bytes;
        }
        self.total += meta.len();
    }

    /// Takes note of the chunk `file_name` of every table in `tables`, then
    /// enforces the limits, keeping `next_chunk_room` bytes free for the
    /// next chunk's files (0 when none follows; else what this one took at
    /// its peak, journals included). Returns what was deleted.
    pub fn after_close<'a>(
        &mut self,
        tables: impl IntoIterator<Item = &'a str>,
        file_name: &str,
        next_chunk_room: u64,
        now_ns: i64,
    ) -> Vec<Retired> {
        for table in tables {
            self.add(table, file_name);
        }
        self.last_open_peak = next_chunk_room;
        self.open = 0;
        self.enforce(now_ns)
    }

    /// Takes `open_bytes`, what the open chunk's files (journals, unfinished
    /// Parquet files) hold on disk so far, as the writer counts them, and,
    /// when they push the recording over its budget, deletes the oldest
    /// slices to make room for them.
    pub fn while_open(&mut self, open_bytes: u64, now_ns: i64) -> Vec<Retired> {
        self.open = open_bytes;
        if self.total + self.reserved_for_open() <= self.limits.max_size {
            return Vec::new();
        }
        self.enforce(now_ns)
    }

    /// Room the open chunk takes or, early in its life, will likely take.
    fn reserved_for_open(&self) -> u64 {
        self.open.max(self.last_open_peak)
    }

    /// Deletes what the limits no longer allow; returns it, per table and reason.
    pub fn enforce(&mut self, now_ns: i64) -> Vec<Retired> {
        let Some(newest) = self.chunks.keys().next_back().map(|k| k.0) else {
            return Vec::new();
        };
        let is_reference = |table: &str| REFERENCE_TABLES.contains(&table);
        let mut doomed: Vec<((i64, String, String), &'static str)> = Vec::new();
        let mut doomed_keys = BTreeSet::new();
        // The open chunk's files cannot be deleted, so they take their room
        // from the closed ones.
        let mut remaining = self.total + self.reserved_for_open();

        if let Some(max_age) = self.limits.max_age {
            let cutoff = now_ns.saturating_sub(max_age.as_nanos() as i64);
            for (key, chunk) in &self.chunks {
                if key.0 < cutoff && key.0 != newest && !is_reference(&key.1) {
                    doomed.push((key.clone(), "max-age"));
                    doomed_keys.insert(key);
                    remaining -= chunk.bytes;
                }
            }
        }
        // Oldest slices of event tables first, then, as a last resort, the
        // reference tables' oldest files.
        for reference_pass in [false, true] {
            for (key, chunk) in &self.chunks {
                if remaining <= self.limits.max_size {
                    break;
                }
                if key.0 == newest
                    || is_reference(&key.1) != reference_pass
                    || doomed_keys.contains(key)
                {
                    continue;
                }
                doomed.push((key.clone(), "max-size"));
                remaining -= chunk.bytes;
            }
        }
        if remaining > self.limits.max_size && !self.warned_small_budget {
            self.warned_small_budget = true;
            eprintln!(
                "hindsight-record: warning: the newest and the open chunks alone take {} bytes, more than --max-size {}; keeping them",
                remaining, self.limits.max_size
            );
        }

        let deleted_at = rfc3339(now_ns);
        let mut retired: Vec<Retired> = Vec::new();
        for (key, reason) in doomed {
            let path = self.dir.join(&key.1).join(&key.2);
            match fs::remove_file(&path) {
                Ok(()) => {}
                // Someone else removed it: it is gone either way.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    eprintln!(
                        "hindsight-record: warning: retention could not delete {}: {e}",
                        path.display()
                    );
                    continue;
                }
            }
            let chunk = self.chunks.remove(&key).expect("doomed chunks are indexed");
            self.total -= chunk.bytes;
            let entry = retired
                .iter_mut()
                .find(|r| r.table == key.1 && r.reason == reason);
            match entry {
                Some(r) => {
                    // Chunks are visited oldest first.
                    r.to = rfc3339(chunk.end_ns);
                    r.files += 1;
                    r.bytes += chunk.bytes;
                }
                None => retired.push(Retired {
                    table: key.1.clone(),
                    from: rfc3339(key.0),
                    to: rfc3339(chunk.end_ns),
                    deleted_at: deleted_at.clone(),
                    reason: reason.into(),
                    files: 1,
                    bytes: chunk.bytes,
                }),
            }
        }
        let dirs: Vec<_> = retired.iter().map(|r| r.table.clone()).collect();
        for table in dirs {
            let _ = fs::File::open(self.dir.join(table)).and_then(|d| d.sync_all());
        }
        retired
    }
}

/// UTC nanoseconds now (the clock chunk names use).
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

#[cfg(test)]
mod tests {
    use std::fs::File;

    use super::*;

    const MINUTE: i64 = 60_000_000_000;
    const T0: i64 = 1_800_000_000_000_000_000;

    /// A fake recording: `slices` minute chunks of each (table, bytes).
    fn recording(slices: i64, tables: &[(&str, usize)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (table, _) in tables {
            fs::create_dir(dir.path().join(table)).unwrap();
        }
        for slice in 0..slices {
            let start = T0 + slice * MINUTE;
            let name = layout::chunk_file_name(start, slice as u64);
            for (table, bytes) in tables {
                let path = dir.path().join(table).join(&name);
                fs::write(&path, vec![0u8; *bytes]).unwrap();
                let end = UNIX_EPOCH + Duration::from_nanos((start + MINUTE) as u64);
                File::options()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_modified(end)
                    .unwrap();
            }
        }
        // What retention must leave alone: the open chunk, the description.
        fs::write(
            dir.path()
                .join(tables[0].0)
                .join(layout::temp_file_name("open.parquet")),
            b"x",
        )
        .unwrap();
        fs::write(dir.path().join(layout::RECORDING_FILE), b"{}").unwrap();
        dir
    }

    fn left(dir: &Path, table: &str) -> Vec<i64> {
        let mut starts: Vec<i64> = fs::read_dir(dir.join(table))
            .unwrap()
            .flatten()
            .filter_map(|f| layout::chunk_start_ns(&f.file_name().to_string_lossy()))
            .map(|s| (s - T0) / MINUTE)
            .collect();
        starts.sort();
        starts
    }

    fn limits(max_size: u64, max_age_minutes: Option<u64>) -> Limits {
        Limits {
            max_size,
            max_age: max_age_minutes.map(|m| Duration::from_secs(m * 60)),
        }
    }

    #[test]
    fn oldest_slices_go_first_so_every_table_covers_the_same_recent_period() {
        let tables = [("sched_switch", 1000), ("counter", 100), ("loss", 10)];
        let dir = recording(10, &tables);
        // 1110 bytes a slice: 4000 bytes keep the newest three slices.
        let mut retention = Retention::scan(dir.path(), limits(4000, None));
        assert_eq!(retention.total_bytes(), 11_100);
        let retired = retention.enforce(T0 + 10 * MINUTE);
        for (table, _) in tables {
            assert_eq!(left(dir.path(), table), [7, 8, 9], "{table}");
        }
        assert_eq!(retention.total_bytes(), 3330);
        let switch = retired.iter().find(|r| r.table == "sched_switch").unwrap();
        assert_eq!(
            (switch.files, switch.bytes, switch.reason.as_str()),
            (7, 7000, "max-size")
        );
        assert_eq!(switch.from, rfc3339(T0));
        assert_eq!(
            switch.to,
            rfc3339(T0 + 7 * MINUTE),
            "end of the newest deleted"
        );
        assert_eq!(retired.len(), 3, "one entry per table: {retired:?}");
        assert!(dir
            .path()
            .join("sched_switch")
            .join(layout::temp_file_name("open.parquet"))
            .exists());
        assert!(dir.path().join(layout::RECORDING_FILE).exists());
        // Within budget: nothing more goes.
        assert!(retention.enforce(T0 + 11 * MINUTE).is_empty());
    }

    #[test]
    fn reference_tables_are_trimmed_only_when_nothing_else_is_left() {
        let tables = [("sched_switch", 1000), ("process", 200)];
        let dir = recording(5, &tables);
        // Budget for every process file and two switch slices: the event
        // table gives up its old chunks, the reference table keeps all.
        let mut retention = Retention::scan(dir.path(), limits(3000, None));
        retention.enforce(T0 + 5 * MINUTE);
        assert_eq!(left(dir.path(), "sched_switch"), [3, 4]);
        assert_eq!(left(dir.path(), "process"), [0, 1, 2, 3, 4]);

        // A budget below that: only then do process files go, oldest first.
        let mut retention = Retention::scan(dir.path(), limits(1700, None));
        let retired = retention.enforce(T0 + 5 * MINUTE);
        assert_eq!(left(dir.path(), "sched_switch"), [4]);
        assert_eq!(left(dir.path(), "process"), [2, 3, 4]);
        assert_eq!(retention.total_bytes(), 1600);
        assert!(retired.iter().any(|r| r.table == "process" && r.files == 2));
    }

    #[test]
    fn max_age_deletes_old_event_chunks_but_not_reference_tables() {
        let tables = [("sched_switch", 10), ("process", 10)];
        let dir = recording(10, &tables);
        let mut retention = Retention::scan(dir.path(), limits(u64::MAX, Some(3)));
        let retired = retention.enforce(T0 + 10 * MINUTE);
        // Started at or after minute 7 (now - 3 min) stays.
        assert_eq!(left(dir.path(), "sched_switch"), [7, 8, 9]);
        assert_eq!(left(dir.path(), "process").len(), 10);
        assert_eq!(retired.len(), 1);
        assert_eq!(retired[0].reason, "max-age");
        assert_eq!(retired[0].files, 7);
    }

    #[test]
    fn the_newest_slice_stays_even_over_budget() {
        let dir = recording(3, &[("sched_switch", 1000)]);
        let mut retention = Retention::scan(dir.path(), limits(10, Some(0)));
        retention.enforce(T0 + 100 * MINUTE);
        assert_eq!(left(dir.path(), "sched_switch"), [2]);
    }

    #[test]
    fn chunks_closed_after_the_scan_are_counted_and_retired() {
        let tables = [("sched_switch", 100)];
        let dir = recording(2, &tables);
        let mut retention = Retention::scan(dir.path(), limits(250, None));
        let name = layout::chunk_file_name(T0 + 2 * MINUTE, 2);
        fs::write(dir.path().join("sched_switch").join(&name), [0u8; 100]).unwrap();
        let retired = retention.after_close(["sched_switch", "counter"], &name, 0, T0 + 3 * MINUTE);
        assert_eq!(left(dir.path(), "sched_switch"), [1, 2]);
        assert_eq!(retired[0].files, 1);
        assert_eq!(retention.total_bytes(), 200);
    }

    #[test]
    fn the_open_chunks_files_take_their_room_from_the_oldest_slices() {
        let tables = [("sched_switch", 100)];
        let dir = recording(5, &tables);
        // 5 slices of 100 bytes and an open file of 1 byte.
        let mut retention = Retention::scan(dir.path(), limits(501, None));
        assert!(retention.while_open(1, T0 + 5 * MINUTE).is_empty(), "fits");

        // The open chunk's journal grows to 250 bytes: three old slices go.
        let open = layout::chunk_file_name(T0 + 5 * MINUTE, 5);
        let journal = dir
            .path()
            .join("sched_switch")
            .join(layout::journal_file_name(&open));
        fs::write(&journal, [0u8; 250]).unwrap();
        let retired = retention.while_open(251, T0 + 6 * MINUTE);
        assert_eq!(retired[0].files, 3);
        assert_eq!(left(dir.path(), "sched_switch"), [3, 4]);

        // It closes into a 100-byte chunk; the next will want 251 bytes too.
        fs::remove_file(&journal).unwrap();
        fs::write(dir.path().join("sched_switch").join(&open), [0u8; 100]).unwrap();
        let retired = retention.after_close(["sched_switch"], &open, 251, T0 + 6 * MINUTE);
        assert_eq!(retired[0].files, 1, "300 closed + 251 kept free > 501");
        assert_eq!(left(dir.path(), "sched_switch"), [4, 5]);

        // The last close keeps no room for a chunk that never comes.
        let last = layout::chunk_file_name(T0 + 6 * MINUTE, 6);
        fs::write(dir.path().join("sched_switch").join(&last), [0u8; 100]).unwrap();
        let retired = retention.after_close(["sched_switch"], &last, 0, T0 + 7 * MINUTE);
        assert!(retired.is_empty());
        assert_eq!(retention.total_bytes(), 300);
    }

    #[test]
    fn the_default_budget_is_capped_by_the_filesystem() {
        const GIB: u64 = 1 << 30;
        let cases = [
            // Unknown size: 2 GiB.
            (None, 2 * GIB),
            // A tenth of a small disk.
            (Some(10 * GIB), GIB),
            (Some(1000), 100),
            // At 20 GiB a tenth is 2 GiB; past it, 2 GiB stays the budget.
            (Some(20 * GIB), 2 * GIB),
            (Some(20 * GIB + 100), 2 * GIB),
            (Some(500 * GIB), 2 * GIB),
        ];
        for (fs_size, want) in cases {
            assert_eq!(capped_max_size(fs_size), want, "{fs_size:?}");
        }
        // A directory not made yet is measured on its nearest parent.
        let path = Path::new("/tmp/does/not/exist/yet");
        let size = filesystem_size(path);
        assert_eq!(size, filesystem_size(Path::new("/tmp")));
        assert!(size.is_some_and(|s| s > 0), "{size:?}");
        assert_eq!(default_max_size(path), capped_max_size(size));
    }
}
