//! Which chunks of a bucket's recordings a command with a time window
//! needs, decided before anything is downloaded: by the chunks' names, and
//! where the names cannot decide, by the `ts` statistics in their footers
//! (one ranged GET each, remembered beside the cached copy). And, for a
//! cluster, the footers of the chunks it reads ([`footers`]), so the
//! client opens the recording without downloading them.
//!
//! Every table of a recording rotates at once and names its chunk by the
//! wall-clock time it opened (`layout::chunk_file_name`), so the chunks of
//! one name, a *group*, cover one stretch of time: from their name to the
//! next group's. A raw table's rows are written as they are decoded, so
//! their `ts` is within [`NAME_SLACK_NS`] of that stretch. A derived table
//! (`hindsight index`) holds intervals, written in the group where they
//! end: a row's `ts` (its start) is never after the stretch ends, but can
//! be any time before it (a thread asleep for a day).
//!
//! Invariants:
//! - The chunks kept are a superset of those with a row the command reads;
//!   the command then reads the copy with its window made absolute
//!   ([`Selection::range`]), so it prints what the whole recording gives.
//! - A group is kept whole or not at all: the copy stays indexed and
//!   every sample keeps its stacks and frames.
//! - `process` is always kept whole: a process's name may be in the
//!   recording's first chunk only.
//! - In a recording that is not indexed, a command that pairs events
//!   (run-queue waits, off-CPU time, the timeline) reads views over raw
//!   `sched_switch` and `sched_wakeup`, whose pairs reach any time before
//!   or after the window: those two tables are fetched whole, the others
//!   narrowed.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;
use hindsight_schemas::tables::{SCHED_SWITCH, SCHED_WAKEUP};
use hindsight_schemas::when::When;
use hindsight_schemas::{derived, layout, Table};
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::file::metadata::{FooterTail, ParquetMetaData};
use parquet::file::FOOTER_SIZE;

use super::{Location, RemoteError, SCHEME};
use crate::recording::{self, RecordingError};

/// How far a raw row's `ts` may lie outside its group's stretch of names:
/// events decoded just after a rotation belong to the new chunk, and the
/// names are wall-clock time while `ts` is the kernel's clock made UTC.
pub const NAME_SLACK_NS: i64 = 120 * 1_000_000_000;

/// The table every chunk of which is kept.
const WHOLE_TABLE: &str = "process";

/// Bytes read from a chunk's end in the first request: the footer and its
/// length, for all but very wide files.
const FOOTER_GUESS: u64 = 64 << 10;

/// Footer reads in flight at once.
const FOOTERS_IN_FLIGHT: usize = 16;

/// Where what the footers of a cached recording's chunks said is
/// remembered, in its cache directory: `TABLE/NAME SIZE MIN MAX ROWS
/// ROW_GROUPS SCHEMA_VERSION` a line (`-` for no `ts` range).
const FOOTERS_FILE: &str = ".chunk-footers";

/// The time a command reads, as given on its command line.
#[derive(Debug, Clone, Copy)]
pub struct Span {
    pub from: Option<When>,
    pub to: Option<When>,
    /// Also read this long before `from` (a report's baselines).
    pub before_ns: i64,
    /// And, further, as long again as the window (an interval chosen from
    /// the window's length aligns `from` down by up to that much).
    pub before_window: bool,
    /// Also read this long after `to` (`top --at`'s interval).
    pub after_ns: i64,
    /// The derived tables the command reads. Only their rows can start
    /// long before the group that holds them, so only their footers are
    /// read for the groups after the window.
    pub derived: &'static [&'static Table],
}

/// The chunks to fetch and the time range the window resolved against.
#[derive(Debug)]
pub struct Selection {
    /// Per recording root (as given to [`select`]), the files to fetch.
    pub keep: Vec<Vec<String>>,
    /// The first and last event of all the recordings, as the whole copy
    /// would report them: what relative times resolve against (`None`,
    /// not read, when every time is absolute).
    pub range: Option<(i64, i64)>,
    /// Chunks left in the bucket.
    pub skipped: usize,
    /// Footers read from the bucket to decide.
    pub footers_read: usize,
}

/// One closed chunk in the bucket.
#[derive(Debug)]
struct Chunk {
    root: usize,
    /// `TABLE/NAME`, below the recording's root.
    relative: String,
    key: object_store::path::Path,
    size: u64,
    table: &'static Table,
    derived: bool,
}

/// The chunks of one name in one recording.
#[derive(Debug)]
struct Group {
    root: usize,
    start: i64,
    /// The next group's name, the end of this one's stretch; `None` for the last.
    next: Option<i64>,
    chunks: Vec<usize>,
}

impl Group {
    /// Bounds on the `ts` of a chunk of this group, from names alone.
    fn bounds(&self, chunk: &Chunk) -> (i64, i64) {
        let lo = if chunk.derived {
            i64::MIN
        } else {
            self.start.saturating_sub(NAME_SLACK_NS)
        };
        let hi = self
            .next
            .map_or(i64::MAX, |next| next.saturating_add(NAME_SLACK_NS));
        (lo, hi)
    }
}

/// What a chunk's footer said (its rows and `ts` range, in the copy's
/// path), or why it is not a chunk this build reads: then a window keeps
/// it, and opening the copy names what is wrong. Absent while unread.
type Known = HashMap<usize, Result<recording::Chunk, RecordingError>>;

/// The chunks of a listing, by name and by what their footers say, read
/// once per command: [`select`] and [`footers`] share what it learned.
pub struct Selector<'a> {
    store: &'a Arc<dyn ObjectStore>,
    url: &'a str,
    bucket: &'a str,
    dirs: &'a [PathBuf],
    chunks: Vec<Chunk>,
    groups: Vec<Group>,
    known: Known,
    /// What the footers files held, by (root, relative).
    remembered: HashMap<(usize, String), recording::Chunk>,
    footers_read: usize,
}

/// Chooses what of `wanted` (per recording root, the files and their
/// sizes; `dirs` their cache directories) the command needs for `span`.
/// `None` when the window cannot narrow anything: no window, or times
/// that do not resolve (the command then says why).
pub async fn select(
    selector: &mut Selector<'_>,
    wanted: &[BTreeMap<String, u64>],
    span: &Span,
) -> Result<Option<Selection>, RemoteError> {
    if span.from.is_none() && span.to.is_none() {
        return Ok(None);
    }
    // Not indexed, a command that pairs events reads the views over these
    // two, whose pairs can reach any time before or after the window.
    let whole: &[&str] = if wanted.iter().all(indexed) || span.derived.is_empty() {
        &[WHOLE_TABLE]
    } else {
        &[WHOLE_TABLE, SCHED_SWITCH.name, SCHED_WAKEUP.name]
    };
    // The whole recording's first and last event (footers near each end)
    // only where a time is relative to them: "03:05-03:15" on a fleet is
    // two footer reads fewer per host when given as RFC 3339 times.
    let relative = [span.from, span.to]
        .into_iter()
        .flatten()
        .any(|when| !matches!(when, When::Absolute(_)));
    let range = if relative || (span.before_window && span.to.is_none()) {
        selector.range().await?
    } else {
        None
    };
    let resolve = |when: Option<When>| when.map(|w| w.resolve(range)).transpose();
    let (Ok(from), Ok(to)) = (resolve(span.from), resolve(span.to)) else {
        return Ok(None);
    };
    let mut lo = from.map(|f| f.saturating_sub(span.before_ns));
    if span.before_window {
        // Without --to the window runs to the last event.
        if let (Some(l), Some(f), Some(t)) = (lo, from, to.or(range.map(|r| r.1))) {
            lo = Some(l.saturating_sub(t.saturating_sub(f).max(0)));
        }
    }
    let hi = to.map(|t| t.saturating_add(span.after_ns));
    let keep = selector
        .keep(lo.unwrap_or(i64::MIN), hi.unwrap_or(i64::MAX), span.derived)
        .await?;
    selector.remember();
    let mut selection = Selection {
        keep: vec![Vec::new(); wanted.len()],
        range,
        skipped: 0,
        footers_read: selector.footers_read,
    };
    for (root, files) in wanted.iter().enumerate() {
        for relative in files.keys() {
            let is_chunk = relative.contains('/');
            let table = relative.split('/').next().unwrap_or_default();
            if !is_chunk || whole.contains(&table) || keep.contains(&(root, relative.clone())) {
                selection.keep[root].push(relative.clone());
            } else {
                selection.skipped += 1;
            }
        }
    }
    Ok(Some(selection))
}

/// The chunks of `keep` (per recording root, as [`Selection::keep`] gives
/// them; other files are skipped) as a copy in the selector's directories
/// would open them, from their footers: known to the selector already,
/// remembered, in the copy, or read from the bucket. Also how many
/// footers it read from the bucket. A chunk whose footer is not one this
/// build reads is an error naming its object.
pub async fn footers(
    selector: &mut Selector<'_>,
    keep: &[Vec<String>],
) -> Result<(Vec<Vec<recording::Chunk>>, usize), RemoteError> {
    let read_before = selector.footers_read;
    let keep: Vec<HashSet<&str>> = keep
        .iter()
        .map(|files| files.iter().map(String::as_str).collect())
        .collect();
    let kept: Vec<usize> = (0..selector.chunks.len())
        .filter(|&c| {
            let chunk = &selector.chunks[c];
            keep[chunk.root].contains(chunk.relative.as_str())
        })
        .collect();
    selector.learn(&kept).await?;
    selector.remember();
    let mut chunks = vec![Vec::new(); selector.dirs.len()];
    for c in kept {
        let reason = match selector.known.remove(&c) {
            Some(Ok(chunk)) => {
                chunks[selector.chunks[c].root].push(chunk);
                continue;
            }
            Some(Err(e)) => e.to_string(),
            None => "its footer was not read".to_owned(),
        };
        // The error names the object already: said once, in front.
        let object = selector.object_url(c);
        let reason = reason
            .strip_prefix(&format!("{object}: "))
            .unwrap_or(&reason);
        return Err(RemoteError::bad(&object, reason));
    }
    Ok((chunks, selector.footers_read - read_before))
}

/// Whether every `sched_switch` chunk in a listing has its derived chunks.
fn indexed(files: &BTreeMap<String, u64>) -> bool {
    let names = |table: &str| -> Vec<&str> {
        files
            .keys()
            .filter_map(|r| r.strip_prefix(table)?.strip_prefix('/'))
            .collect()
    };
    let source = names(derived::SOURCE_TABLE);
    derived::DERIVED_TABLES
        .iter()
        .all(|t| names(t.name) == source)
}

impl<'a> Selector<'a> {
    /// The chunks of `wanted` (per recording root, the files and their
    /// sizes; `dirs` their cache directories), with the footers the copy
    /// remembers.
    pub fn new(
        store: &'a Arc<dyn ObjectStore>,
        location: &'a Location,
        roots: &[String],
        wanted: &[BTreeMap<String, u64>],
        dirs: &'a [PathBuf],
    ) -> Selector<'a> {
        let mut chunks = Vec::new();
        let mut by_name: BTreeMap<(usize, &str), Vec<usize>> = BTreeMap::new();
        for (root, files) in wanted.iter().enumerate() {
            for (relative, size) in files {
                let Some((table, name)) = relative.split_once('/') else {
                    continue;
                };
                let key = if roots[root].is_empty() {
                    relative.clone()
                } else {
                    format!("{}/{relative}", roots[root])
                };
                // A listing holds only tables this build knows.
                let Some(table) = hindsight_schemas::all_tables().find(|t| t.name == table) else {
                    continue;
                };
                by_name.entry((root, name)).or_default().push(chunks.len());
                chunks.push(Chunk {
                    root,
                    relative: relative.clone(),
                    key: location.key(&key),
                    size: *size,
                    table,
                    derived: derived::DERIVED_TABLES.iter().any(|t| t.name == table.name),
                });
            }
        }
        let mut groups: Vec<Group> = Vec::new();
        for ((root, name), members) in by_name {
            let start = layout::chunk_start_ns(name).unwrap_or(i64::MIN);
            if let Some(last) = groups.last_mut().filter(|g| g.root == root) {
                last.next = Some(start);
            }
            groups.push(Group {
                root,
                start,
                next: None,
                chunks: members,
            });
        }
        let remembered = dirs
            .iter()
            .enumerate()
            .flat_map(|(root, dir)| {
                read_footers(dir)
                    .into_iter()
                    .map(move |(k, v)| ((root, k), v))
            })
            .collect();
        Selector {
            store,
            url: &location.url,
            bucket: &location.bucket,
            dirs,
            chunks,
            groups,
            known: Known::new(),
            remembered,
            footers_read: 0,
        }
    }

    /// The first and last event over every recording, as the footers of
    /// the whole copy give them, reading only the footers near each end.
    async fn range(&mut self) -> Result<Option<(i64, i64)>, RemoteError> {
        let roots: Vec<usize> = self.groups.iter().map(|g| g.root).collect();
        let mut range: Option<(i64, i64)> = None;
        for root in roots.iter().copied().collect::<BTreeSet<_>>() {
            let order: Vec<usize> = (0..self.groups.len())
                .filter(|&g| self.groups[g].root == root)
                .collect();
            // The last event: walk back until no earlier group can hold a later one.
            let mut last: Option<i64> = None;
            for &g in order.iter().rev() {
                let hi = self.groups[g]
                    .next
                    .map_or(i64::MAX, |n| n.saturating_add(NAME_SLACK_NS));
                if last.is_some_and(|l| hi < l) {
                    break;
                }
                for (_, max) in self.read_group(g).await?.into_iter().flatten() {
                    last = Some(last.map_or(max, |l| l.max(max)));
                }
            }
            // The first: walk forward until no later group can hold an
            // earlier one (a derived interval starts at a recorded event).
            let mut first: Option<i64> = None;
            for &g in &order {
                let lo = self.groups[g].start.saturating_sub(NAME_SLACK_NS);
                if first.is_some_and(|f| lo > f) {
                    break;
                }
                for (min, _) in self.read_group(g).await?.into_iter().flatten() {
                    first = Some(first.map_or(min, |f| f.min(min)));
                }
            }
            if let (Some(first), Some(last)) = (first, last) {
                range = Some(range.map_or((first, last), |(a, b)| (a.min(first), b.max(last))));
            }
        }
        Ok(range)
    }

    /// The ranges of a group's chunks, reading the footers not yet known.
    async fn read_group(&mut self, group: usize) -> Result<Vec<Option<(i64, i64)>>, RemoteError> {
        let members = self.groups[group].chunks.clone();
        self.learn(&members).await?;
        Ok(members
            .iter()
            .map(|c| match self.known.get(c) {
                Some(Ok(chunk)) => chunk.ts_range,
                _ => None,
            })
            .collect())
    }

    /// The chunks (by relative path, per root) of every group that may hold
    /// a row with `lo <= ts < hi`.
    async fn keep(
        &mut self,
        lo: i64,
        hi: i64,
        derived_read: &[&Table],
    ) -> Result<HashSet<(usize, String)>, RemoteError> {
        let overlaps = |(a, b): (i64, i64)| a < hi && b >= lo;
        let read = |chunk: &Chunk| {
            !chunk.derived
                || derived_read.iter().any(|t| {
                    chunk
                        .relative
                        .strip_prefix(t.name)
                        .is_some_and(|r| r.starts_with('/'))
                })
        };
        let mut undecided = Vec::new();
        let mut kept = Vec::new();
        for (g, group) in self.groups.iter().enumerate() {
            let candidates: Vec<usize> = group
                .chunks
                .iter()
                .copied()
                .filter(|&c| read(&self.chunks[c]) && overlaps(group.bounds(&self.chunks[c])))
                .collect();
            if candidates.is_empty() {
                continue;
            }
            // A raw chunk whose bounds lie inside the window has only rows
            // in it; no footer needed.
            let inside = candidates.iter().any(|&c| {
                let (a, b) = group.bounds(&self.chunks[c]);
                !self.chunks[c].derived && a >= lo && b < hi
            });
            if inside {
                kept.push(g);
            } else {
                undecided.push((g, candidates));
            }
        }
        let all: Vec<usize> = undecided
            .iter()
            .flat_map(|(_, c)| c.iter().copied())
            .collect();
        self.learn(&all).await?;
        for (g, candidates) in undecided {
            let hit = candidates.iter().any(|c| match self.known.get(c) {
                Some(Ok(chunk)) => chunk.ts_range.is_some_and(overlaps),
                _ => true,
            });
            if hit {
                kept.push(g);
            }
        }
        Ok(kept
            .into_iter()
            .flat_map(|g| self.groups[g].chunks.iter())
            .map(|&c| (self.chunks[c].root, self.chunks[c].relative.clone()))
            .collect())
    }

    /// Reads the footers of `chunks` not yet known: from the cached copy
    /// when it has the same file, else from the bucket.
    async fn learn(&mut self, chunks: &[usize]) -> Result<(), RemoteError> {
        let mut remote = Vec::new();
        for &c in chunks {
            if self.known.contains_key(&c) {
                continue;
            }
            let chunk = &self.chunks[c];
            let remembered = self
                .remembered
                .get(&(chunk.root, chunk.relative.clone()))
                .filter(|known| known.bytes == chunk.size);
            if let Some(known) = remembered {
                self.known.insert(c, Ok(known.clone()));
                continue;
            }
            let local = self.dirs[chunk.root].join(&chunk.relative);
            if std::fs::metadata(&local).is_ok_and(|m| m.len() == chunk.size) {
                self.known
                    .insert(c, recording::read_chunk(&local, chunk.table));
                continue;
            }
            remote.push(c);
        }
        let url = self.url;
        let mut reads = futures::stream::iter(remote.into_iter().map(|c| {
            let store = Arc::clone(self.store);
            let (key, size) = (self.chunks[c].key.clone(), self.chunks[c].size);
            async move { (c, remote_footer(store.as_ref(), &key, size, url).await) }
        }))
        .buffer_unordered(FOOTERS_IN_FLIGHT);
        while let Some((c, read)) = reads.next().await {
            self.footers_read += 1;
            let chunk = &self.chunks[c];
            // Errors name the object in the bucket; the chunk, its place in the copy.
            let object = PathBuf::from(self.object_url(c));
            let known = match read? {
                Some(footer) => {
                    recording::chunk_of_footer(&object, chunk.size, chunk.table, &footer).map(
                        |mut known| {
                            known.path = self.dirs[chunk.root].join(&chunk.relative);
                            known
                        },
                    )
                }
                None => Err(RecordingError::CorruptChunk(object)),
            };
            self.known.insert(c, known);
        }
        Ok(())
    }

    /// The `s3://` URL of chunk `c`.
    fn object_url(&self, c: usize) -> String {
        format!("{SCHEME}{}/{}", self.bucket, self.chunks[c].key)
    }

    /// Writes what is known of the chunks the bucket holds to each cache
    /// directory's footers file, so the next query reads no footer twice.
    /// Best effort: a cache that cannot be written costs the next query
    /// the same reads again.
    fn remember(&self) {
        for (root, dir) in self.dirs.iter().enumerate() {
            let mut known: BTreeMap<&str, &recording::Chunk> = BTreeMap::new();
            for (c, chunk) in self.chunks.iter().enumerate() {
                if chunk.root != root {
                    continue;
                }
                let footer = match self.known.get(&c) {
                    Some(Ok(footer)) => Some(footer),
                    _ => self
                        .remembered
                        .get(&(root, chunk.relative.clone()))
                        .filter(|footer| footer.bytes == chunk.size),
                };
                if let Some(footer) = footer {
                    known.insert(&chunk.relative, footer);
                }
            }
            if known.is_empty() {
                continue;
            }
            let mut lines = String::new();
            for (relative, chunk) in known {
                let (min, max) = match chunk.ts_range {
                    Some((a, b)) => (a.to_string(), b.to_string()),
                    None => ("-".into(), "-".into()),
                };
                lines.push_str(&format!(
                    "{relative} {} {min} {max} {} {} {}\n",
                    chunk.bytes, chunk.rows, chunk.row_groups, chunk.schema_version
                ));
            }
            let _ = std::fs::create_dir_all(dir);
            let temp = dir.join(format!(
                "{FOOTERS_FILE}.{}{}",
                std::process::id(),
                layout::TEMP_SUFFIX
            ));
            if std::fs::write(&temp, lines).is_ok() {
                let _ = std::fs::rename(&temp, dir.join(FOOTERS_FILE));
            }
        }
    }
}

/// The footers file of a cache directory, each chunk at its path in the
/// copy; empty when there is none or it cannot be read (then footers are
/// read again).
fn read_footers(dir: &Path) -> HashMap<String, recording::Chunk> {
    let Ok(text) = std::fs::read_to_string(dir.join(FOOTERS_FILE)) else {
        return HashMap::new();
    };
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let relative = fields.next()?.to_owned();
            let bytes = fields.next()?.parse().ok()?;
            let ts_range = match (fields.next()?, fields.next()?) {
                ("-", "-") => None,
                (a, b) => Some((a.parse().ok()?, b.parse().ok()?)),
            };
            let chunk = recording::Chunk {
                path: dir.join(&relative),
                bytes,
                rows: fields.next()?.parse().ok()?,
                row_groups: fields.next()?.parse().ok()?,
                schema_version: fields.next()?.parse().ok()?,
                ts_range,
            };
            Some((relative, chunk))
        })
        .collect()
}

/// The footer of the object `key` of `size` bytes, with one ranged GET
/// (two for a footer over [`FOOTER_GUESS`]); `Ok(None)` when it is not a
/// readable Parquet footer.
async fn remote_footer(
    store: &dyn ObjectStore,
    key: &object_store::path::Path,
    size: u64,
    url: &str,
) -> Result<Option<ParquetMetaData>, RemoteError> {
    if size < FOOTER_SIZE as u64 {
        return Ok(None);
    }
    let get = |start: u64| async move {
        store
            .get_range(key, start..size)
            .await
            .map_err(|e| RemoteError::store(url, &e))
    };
    let mut tail = get(size - FOOTER_GUESS.min(size)).await?;
    let Ok(footer_tail) = FooterTail::try_from(&tail[tail.len() - FOOTER_SIZE..]) else {
        return Ok(None);
    };
    let needed = (footer_tail.metadata_length() + FOOTER_SIZE) as u64;
    if needed > tail.len() as u64 && needed <= size {
        tail = get(size - needed).await?;
    }
    Ok(hindsight_schemas::footer::parse(&tail).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(files: &[&str]) -> BTreeMap<String, u64> {
        files.iter().map(|f| (f.to_string(), 1)).collect()
    }

    /// A chunk holding one event a second from `start_ns` for `seconds`,
    /// tagged as hindsight tags its chunks.
    fn chunk_bytes(start_ns: i64, seconds: i64) -> Vec<u8> {
        use arrow::{array::Int64Array, datatypes::*, record_batch::RecordBatch};
        let schema = Arc::new(Schema::new(vec![Field::new("ts", DataType::Int64, false)]));
        let ts = Int64Array::from_iter_values((0..seconds).map(|s| start_ns + s * 1_000_000_000));
        let batch = RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(ts)]).unwrap();
        let mut bytes = Vec::new();
        let mut writer = parquet::arrow::ArrowWriter::try_new(&mut bytes, schema, None).unwrap();
        writer.append_key_value_metadata(parquet::file::metadata::KeyValue::new(
            layout::key::SCHEMA_VERSION.to_owned(),
            hindsight_schemas::SCHEMA_VERSION.to_string(),
        ));
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        bytes
    }

    /// A bucket holding `s3://b/host`: `chunks` 10-minute `sched_switch`
    /// chunks from `t0` (see [`chunk_bytes`]), and its listing.
    async fn bucket(
        t0: i64,
        chunks: i64,
    ) -> (Location, Arc<dyn ObjectStore>, BTreeMap<String, u64>) {
        let location = Location::parse("s3://b/host").unwrap();
        let memory = object_store::memory::InMemory::new();
        let mut files = BTreeMap::new();
        for i in 0..chunks {
            let start = t0 + i * 600 * 1_000_000_000;
            let relative = format!("sched_switch/{}", layout::chunk_file_name(start, i as u64));
            let bytes = chunk_bytes(start, 600);
            files.insert(relative.clone(), bytes.len() as u64);
            memory
                .put(&location.key(&relative), bytes.into())
                .await
                .unwrap();
        }
        (location, Arc::new(memory), files)
    }

    #[tokio::test]
    async fn absolute_times_read_no_footer_for_the_recordings_ends() {
        // Four 10-minute chunks; a second in the third.
        let minute = 60 * 1_000_000_000i64;
        let t0 = hindsight_schemas::when::When::parse("2026-12-04T00:00:00Z").unwrap();
        let When::Absolute(t0) = t0 else { panic!() };
        let (location, store, files) = bucket(t0, 4).await;
        let cache = tempfile::tempdir().unwrap();
        let footers_read = |from: When, to: When| {
            let (store, location, files) = (&store, &location, &files);
            let dirs = [cache.path().join(format!("{from:?}"))];
            async move {
                let span = Span {
                    from: Some(from),
                    to: Some(to),
                    before_ns: 0,
                    before_window: false,
                    after_ns: 0,
                    derived: &[],
                };
                let wanted = [files.clone()];
                let mut selector = Selector::new(store, location, &[String::new()], &wanted, &dirs);
                let selection = select(&mut selector, &wanted, &span)
                    .await
                    .unwrap()
                    .unwrap();
                (selection.footers_read, selection.keep[0].clone())
            }
        };
        let second = t0 + 25 * minute;
        let (absolute, kept) = footers_read(
            When::Absolute(second),
            When::Absolute(second + 1_000_000_000),
        )
        .await;
        // The same second, relative to the first event.
        let (relative, kept_too) = footers_read(
            When::AfterStart(25 * minute),
            When::AfterStart(25 * minute + 1_000_000_000),
        )
        .await;
        assert_eq!(kept, kept_too);
        assert_eq!(kept.len(), 1, "{kept:?}");
        // Names settle every chunk but the one before the window (its rows
        // may run 2 min past the next name); the ends take more.
        assert_eq!(absolute, 1);
        assert!(relative > absolute, "{relative}");
    }

    #[tokio::test]
    async fn a_clusters_listing_reads_each_footer_once_and_names_a_bad_object() {
        let second = 1_000_000_000i64;
        let t0 = 1_800_000_000 * second;
        let (location, store, mut files) = bucket(t0, 2).await;
        let cache = tempfile::tempdir().unwrap();
        let dirs = [cache.path().join("host")];
        let list = |files: &BTreeMap<String, u64>| {
            let (store, location, dirs) = (&store, &location, &dirs);
            let (wanted, keep) = ([files.clone()], [files.keys().cloned().collect()]);
            async move {
                let mut selector = Selector::new(store, location, &[String::new()], &wanted, dirs);
                footers(&mut selector, &keep).await
            }
        };
        let (listed, read) = list(&files).await.unwrap();
        assert_eq!(read, 2);
        let first = &listed[0][0];
        assert_eq!(first.path, dirs[0].join(files.keys().next().unwrap()));
        assert_eq!((first.rows, first.row_groups), (600, 1));
        assert_eq!(first.ts_range, Some((t0, t0 + 599 * second)));
        // Remembered in the copy: no footer is read twice.
        let (again, read) = list(&files).await.unwrap();
        assert_eq!(read, 0);
        assert_eq!(again[0][1].ts_range, listed[0][1].ts_range);
        assert_eq!(again[0][1].bytes, listed[0][1].bytes);

        let bad = format!(
            "sched_switch/{}",
            layout::chunk_file_name(t0 + 1200 * second, 2)
        );
        store
            .put(&location.key(&bad), b"not a parquet file".to_vec().into())
            .await
            .unwrap();
        files.insert(bad.clone(), 18);
        let err = list(&files).await.unwrap_err();
        assert!(err.bad_input);
        assert_eq!(
            err.to_string(),
            format!("s3://b/host/{bad}: not a Parquet file (truncated or corrupt)")
        );
    }

    #[test]
    fn only_a_listing_with_every_derived_chunk_is_indexed() {
        let name = "20261204T111456.343Z-000000.parquet";
        let mut files = vec![format!("sched_switch/{name}"), "recording.json".into()];
        let raw: Vec<&str> = files.iter().map(String::as_str).collect();
        assert!(!indexed(&listing(&raw)));
        for t in derived::DERIVED_TABLES {
            files.push(format!("{}/{name}", t.name));
        }
        let all: Vec<&str> = files.iter().map(String::as_str).collect();
        assert!(indexed(&listing(&all)));
    }

    #[test]
    fn bounds_of_raw_chunks_are_their_stretch_and_derived_reach_back() {
        let group = Group {
            root: 0,
            start: 1_000 * NAME_SLACK_NS,
            next: Some(1_001 * NAME_SLACK_NS),
            chunks: vec![],
        };
        let chunk = |derived| Chunk {
            root: 0,
            relative: String::new(),
            key: "k".into(),
            size: 1,
            table: &SCHED_SWITCH,
            derived,
        };
        assert_eq!(
            group.bounds(&chunk(false)),
            (999 * NAME_SLACK_NS, 1_002 * NAME_SLACK_NS)
        );
        assert_eq!(
            group.bounds(&chunk(true)),
            (i64::MIN, 1_002 * NAME_SLACK_NS)
        );
    }
}
