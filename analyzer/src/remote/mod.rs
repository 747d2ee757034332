//! Recordings in S3-compatible object storage: `hindsight push` ships a
//! recording's closed chunks to a bucket, and every command that takes a
//! recording also takes `s3://BUCKET/PREFIX`.
//!
//! The bucket holds exactly the files of a recording directory, under
//! `PREFIX/` (`recording.json`, `<table>/<chunk>.parquet`), so a prefix
//! copied down with any S3 tool is a recording. A prefix that is not one
//! itself but holds one per host (`PREFIX/<host>/recording.json`) opens as
//! all of them, with a `host` column, as several directories do.
//!
//! Reading mirrors the prefix into a local cache ([`cache_root`]) and the
//! command then reads the copy, so a recording's second query downloads
//! nothing: a closed chunk never changes (its name is its start time and
//! sequence), so one whose size matches is not fetched again, and a chunk
//! the bucket no longer has (retention) leaves the cache too.
//!
//! A command with a time window (`--from`/`--to`, `top --at`) that names
//! one URL fetches only the chunks the window needs ([`window`]): chosen
//! by their names, and where names cannot tell, by the `ts` statistics of
//! their footers, read with a ranged GET before any chunk is downloaded.
//! Its times are then made absolute against the whole recording, so it
//! answers as it would over the whole directory.
//!
//! A command a Ballista cluster runs ([`Chunks::Listed`]) downloads only
//! `recording.json`: the executors read the chunks from the bucket, and
//! the copy opens with the chunks its footers describe (read the same way,
//! and remembered beside the copy).
//!
//! Credentials, region and endpoint come from the standard AWS environment
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
//! `AWS_ENDPOINT_URL` or `AWS_ENDPOINT`, `AWS_ALLOW_HTTP=true` for a local
//! endpoint), read by `object_store`, the client DataFusion uses.
//!
//! Invariants:
//! - Nothing partial is ever visible: S3 makes an object visible only once
//!   its upload completes (a multipart upload that fails is aborted), and
//!   the cache writes each download to a hidden temp file and renames it.
//! - A pushed recording is a valid recording: only chunks that
//!   [`Recording::open`] validated are sent, and `recording.json` goes
//!   last, so a prefix becomes a recording only once its chunks are there.
//! - Memory stays bounded whatever the file sizes: files stream in parts of
//!   [`PART_BYTES`], at most [`PARTS_IN_FLIGHT`] at a time.

use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use hindsight_schemas::{all_tables, derived, layout};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};

use crate::recording::Recording;

mod window;
pub use window::Span;

/// The one URL scheme read and written.
pub const SCHEME: &str = "s3://";

/// Files at most this big go up in one request; bigger ones in parts of it.
const PART_BYTES: usize = 8 << 20;

/// Parts of one file uploading at once (S3 multipart), and files
/// downloading at once: the memory held is about this many parts.
const PARTS_IN_FLIGHT: usize = 4;

/// A download's temp file untouched this long was left by a command that
/// died: the next fetch of the same recording removes it.
const STALE_DOWNLOAD: Duration = Duration::from_secs(3600);

/// Whether `arg` names a recording in object storage rather than a directory.
pub fn is_remote(arg: &Path) -> bool {
    arg.to_str().is_some_and(|s| s.starts_with(SCHEME))
}

/// What went wrong with a bucket: a line naming the URL and the cause.
/// `bad_input` (a missing bucket, a refused credential, a malformed URL, a
/// prefix that holds no recording) makes `hindsight` exit with code 2, like
/// a directory that is not a recording; a network failure is code 1.
#[derive(Debug, thiserror::Error)]
#[error("{url}: {reason}")]
pub struct RemoteError {
    pub url: String,
    pub reason: String,
    pub bad_input: bool,
}

impl RemoteError {
    fn bad(url: &str, reason: impl Into<String>) -> RemoteError {
        RemoteError {
            url: url.to_owned(),
            reason: reason.into(),
            bad_input: true,
        }
    }

    /// Names the cause of an `object_store` error in a line: the service's
    /// error code when it sent one, not the request dump that follows it.
    fn store(url: &str, err: &object_store::Error) -> RemoteError {
        let text = error_chain(err);
        let code = |code: &str| text.contains(code);
        let (reason, bad_input) = if code("NoSuchBucket") {
            ("no such bucket".to_owned(), true)
        } else if code("InvalidAccessKeyId") {
            (
                "the access key is not valid (AWS_ACCESS_KEY_ID)".to_owned(),
                true,
            )
        } else if code("SignatureDoesNotMatch") {
            (
                "the secret key does not match the access key (AWS_SECRET_ACCESS_KEY)".to_owned(),
                true,
            )
        } else if code("AccessDenied")
            || matches!(
                err,
                object_store::Error::PermissionDenied { .. }
                    | object_store::Error::Unauthenticated { .. }
            )
        {
            ("access denied".to_owned(), true)
        } else if code("169.254.169.254") {
            // No key in the environment, so the client asked the EC2
            // instance metadata service, which is not there.
            (
                "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY".to_owned(),
                true,
            )
        } else if matches!(err, object_store::Error::UnknownConfigurationKey { .. }) {
            (first_line(&text), true)
        } else {
            (first_line(&text), false)
        };
        RemoteError {
            url: url.to_owned(),
            reason,
            bad_input,
        }
    }

    fn io(url: &str, path: &Path, err: &std::io::Error) -> RemoteError {
        RemoteError {
            url: url.to_owned(),
            reason: format!("{}: {err}", path.display()),
            bad_input: false,
        }
    }
}

/// An error and its causes, `: `-separated, as one string: the cause a
/// user can act on ("Connection refused") is usually the innermost.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The first line of a message, without the retry detail `object_store`
/// puts between what failed and why.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or(text);
    let line = line.strip_prefix("Generic S3 error: ").unwrap_or(line);
    match line.split_once(", after ") {
        Some((what, rest)) => match rest.split_once(" - ") {
            Some((_, why)) => format!("{what}: {}", why.trim()),
            None => what.to_owned(),
        },
        None => line.trim().to_owned(),
    }
}

/// A bucket and the prefix in it, from `s3://BUCKET/PREFIX`.
#[derive(Debug, Clone)]
pub struct Location {
    /// The URL as given, for messages.
    pub url: String,
    pub bucket: String,
    /// Without leading or trailing `/`; empty for the whole bucket.
    pub prefix: String,
}

impl Location {
    pub fn parse(url: &str) -> Result<Location, RemoteError> {
        let Some(rest) = url.strip_prefix(SCHEME) else {
            return Err(RemoteError::bad(url, "not an s3://BUCKET/PREFIX URL"));
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(RemoteError::bad(url, "no bucket name after s3://"));
        }
        let prefix = prefix.trim_matches('/');
        if prefix.split('/').any(|part| part == "." || part == "..") {
            return Err(RemoteError::bad(url, "'.' and '..' are not prefixes"));
        }
        Ok(Location {
            url: url.to_owned(),
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
        })
    }

    /// A client for the bucket, configured from the AWS environment.
    fn store(&self) -> Result<Arc<dyn ObjectStore>, RemoteError> {
        let store = AmazonS3Builder::from_env()
            .with_bucket_name(&self.bucket)
            .build()
            .map_err(|e| RemoteError::store(&self.url, &e))?;
        Ok(Arc::new(store))
    }

    /// The key of `relative` (a `/`-separated path) under the prefix.
    fn key(&self, relative: &str) -> ObjectPath {
        if self.prefix.is_empty() {
            ObjectPath::from(relative)
        } else {
            ObjectPath::from(format!("{}/{relative}", self.prefix))
        }
    }

    /// Where the prefix is mirrored: `<cache>/s3/BUCKET/PREFIX` from AWS,
    /// `<cache>/s3@HOST:PORT/BUCKET/PREFIX` from another endpoint, so two
    /// services with a bucket of the same name never share copies.
    pub fn cache_dir(&self) -> PathBuf {
        let endpoint = ["AWS_ENDPOINT_URL", "AWS_ENDPOINT"]
            .iter()
            .find_map(|name| std::env::var(name).ok().filter(|e| !e.is_empty()));
        let service = match endpoint {
            None => "s3".to_owned(),
            Some(url) => {
                let host = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
                format!("s3@{}", host.trim_end_matches('/').replace('/', "_"))
            }
        };
        cache_root()
            .join(service)
            .join(&self.bucket)
            .join(&self.prefix)
    }

    fn prefix_path(&self) -> Option<ObjectPath> {
        (!self.prefix.is_empty()).then(|| ObjectPath::from(self.prefix.as_str()))
    }
}

/// Every object under `location`'s prefix, as (path below the prefix, size).
async fn list(
    store: &dyn ObjectStore,
    location: &Location,
) -> Result<BTreeMap<String, u64>, RemoteError> {
    let prefix = location.prefix_path();
    let mut objects = BTreeMap::new();
    let mut listing = store.list(prefix.as_ref());
    while let Some(meta) = listing
        .try_next()
        .await
        .map_err(|e| RemoteError::store(&location.url, &e))?
    {
        let key = meta.location.as_ref();
        let relative = match &prefix {
            Some(p) => key
                .strip_prefix(p.as_ref())
                .and_then(|r| r.strip_prefix('/'))
                .unwrap_or(key),
            None => key,
        };
        objects.insert(relative.to_owned(), meta.size);
    }
    Ok(objects)
}

/// Whether `relative` (below a recording's root) is a file of a recording:
/// its description or a closed chunk of a table this build knows.
fn recording_file(relative: &str) -> bool {
    if relative == layout::RECORDING_FILE {
        return true;
    }
    let Some((table, name)) = relative.split_once('/') else {
        return false;
    };
    all_tables().any(|t| t.name == table) && layout::is_chunk_file(name)
}

/// Where mirrored recordings are kept: `HINDSIGHT_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/hindsight`, else `~/.cache/hindsight`.
pub fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("HINDSIGHT_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("hindsight");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(home) => PathBuf::from(home).join(".cache").join("hindsight"),
        None => std::env::temp_dir().join("hindsight-cache"),
    }
}

/// The `s3://BUCKET/PREFIX` URL whose local copy `dir` is (see
/// [`Location::cache_dir`]), for showing a copy by where it came from;
/// `None` for a directory outside the cache.
pub fn url_of_copy(dir: &Path) -> Option<String> {
    let below = dir.strip_prefix(cache_root()).ok()?;
    let mut parts = below.components().map(|c| c.as_os_str().to_string_lossy());
    let service = parts.next()?;
    if service != "s3" && !service.starts_with("s3@") {
        return None;
    }
    let rest: Vec<_> = parts.collect();
    (!rest.is_empty()).then(|| format!("s3://{}", rest.join("/")))
}

/// What a fetch brings of the chunks a command reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunks {
    /// Into the cache, for a command that reads them here.
    Downloaded,
    /// Only their footers, for a command a cluster runs: its executors
    /// read the chunks from the bucket (see [`crate::recording::list_in_bucket`]).
    Listed,
}

/// What a fetch did, for the line on stderr.
#[derive(Debug, Default, Clone, Copy)]
pub struct Fetched {
    pub files: usize,
    pub bytes: u64,
    pub cached: usize,
    /// Chunks left in the bucket for a cluster to read ([`Chunks::Listed`]).
    pub listed: usize,
    /// Chunks outside the command's window, left in the bucket.
    pub skipped: usize,
    /// Footers read from the bucket to find the window's chunks.
    pub footers: usize,
    /// When the window narrowed the fetch: the first and last event of the
    /// whole recording, which the command's relative times must resolve
    /// against (the copy holds only part of it).
    pub range: Option<Option<(i64, i64)>>,
}

/// The local copies of the recordings under `url`: one directory when the
/// prefix is a recording, one per host (sorted) when it holds several.
/// Downloads what the cache lacks of what a command reading `span` needs
/// (everything when `span` is `None`), its chunks only if `chunks` says
/// so; see the module doc and [`window`].
pub async fn fetch(
    url: &str,
    span: Option<&Span>,
    chunks: Chunks,
) -> Result<(Vec<PathBuf>, Fetched), RemoteError> {
    let location = Location::parse(url)?;
    let store = location.store()?;
    let objects = list(store.as_ref(), &location).await?;
    let roots = recording_roots(&objects);
    if roots.is_empty() {
        let reason = if objects.is_empty() {
            "no objects under this prefix".to_owned()
        } else {
            format!(
                "not a hindsight recording (no {} here or one level below)",
                layout::RECORDING_FILE
            )
        };
        return Err(RemoteError::bad(url, reason));
    }
    let cache = location.cache_dir();
    let dirs: Vec<PathBuf> = roots
        .iter()
        .map(|root| {
            if root.is_empty() {
                cache.clone()
            } else {
                cache.join(root)
            }
        })
        .collect();
    let wanted: Vec<BTreeMap<String, u64>> = roots
        .iter()
        .map(|root| {
            objects
                .iter()
                .filter_map(|(key, size)| {
                    let relative = if root.is_empty() {
                        key.as_str()
                    } else {
                        key.strip_prefix(root.as_str())?.strip_prefix('/')?
                    };
                    recording_file(relative).then(|| (relative.to_owned(), *size))
                })
                .collect()
        })
        .collect();
    for (dir, files) in dirs.iter().zip(&wanted) {
        forget_retired(dir, files, url)?;
    }
    let mut fetched = Fetched::default();
    // One selector for the window and the listing: what the first learns
    // of the footers, the second does not read again.
    let mut selector = (span.is_some() || chunks == Chunks::Listed)
        .then(|| window::Selector::new(&store, &location, &roots, &wanted, &dirs));
    let selection = match (span, selector.as_mut()) {
        (Some(span), Some(selector)) => window::select(selector, &wanted, span).await?,
        _ => None,
    };
    let mut keep: Vec<Vec<String>> = match selection {
        Some(selection) => {
            fetched.skipped = selection.skipped;
            fetched.footers = selection.footers_read;
            fetched.range = Some(selection.range);
            selection.keep
        }
        None => wanted.iter().map(|w| w.keys().cloned().collect()).collect(),
    };
    if let (Chunks::Listed, Some(selector)) = (chunks, selector.as_mut()) {
        let (listed, footers) = window::footers(selector, &keep).await?;
        fetched.footers += footers;
        for (dir, chunks) in dirs.iter().zip(listed) {
            fetched.listed += chunks.len();
            crate::recording::list_in_bucket(dir, chunks);
        }
        // Only the recordings' descriptions come down.
        for files in &mut keep {
            files.retain(|relative| !relative.contains('/'));
        }
    }
    let mut jobs = Vec::new();
    for (((root, dir), files), keep) in roots.iter().zip(&dirs).zip(&wanted).zip(keep) {
        for relative in keep {
            let size = files[&relative];
            let local = dir.join(&relative);
            // recording.json is rewritten as a recording goes on; a closed
            // chunk never is.
            let same = relative != layout::RECORDING_FILE
                && std::fs::metadata(&local).is_ok_and(|m| m.len() == size);
            if same {
                fetched.cached += 1;
                continue;
            }
            let key = if root.is_empty() {
                relative
            } else {
                format!("{root}/{relative}")
            };
            jobs.push((location.key(&key), local, size));
        }
    }
    let total: u64 = jobs.iter().map(|(_, _, size)| size).sum();
    let mut progress = crate::progress::Progress::bytes("downloading", total);
    let mut downloads = futures::stream::iter(jobs.into_iter().map(|(key, local, _)| {
        let store = Arc::clone(&store);
        async move { download(store.as_ref(), &key, &local, url).await }
    }))
    .buffer_unordered(PARTS_IN_FLIGHT);
    while let Some(bytes) = downloads.next().await {
        let bytes = bytes?;
        progress.advance(bytes);
        fetched.files += 1;
        fetched.bytes += bytes;
    }
    progress.finish();
    Ok((dirs, fetched))
}

/// The recordings under a listing, as paths below its prefix: `""` when the
/// prefix itself is one, else each `<host>` with a `<host>/recording.json`.
fn recording_roots(objects: &BTreeMap<String, u64>) -> Vec<String> {
    if objects.contains_key(layout::RECORDING_FILE) {
        return vec![String::new()];
    }
    objects
        .keys()
        .filter_map(|key| {
            let (host, file) = key.split_once('/')?;
            (file == layout::RECORDING_FILE).then(|| host.to_owned())
        })
        .collect()
}

/// Removes from a cached copy the chunks the bucket no longer has
/// (retention retired them), so the copy reads as the bucket does. Tables
/// the bucket has no chunk of are left alone: `hindsight index` may have
/// derived them in the cache.
fn forget_retired(
    dir: &Path,
    wanted: &BTreeMap<String, u64>,
    url: &str,
) -> Result<(), RemoteError> {
    let remote_tables: HashSet<&str> = wanted
        .keys()
        .filter_map(|relative| relative.split_once('/').map(|(table, _)| table))
        .collect();
    // `recording.json`'s own download.
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        remove_if_stale_download(&entry);
    }
    for table in all_tables() {
        let derived_here = derived::DERIVED_TABLES.iter().any(|d| d.name == table.name);
        if derived_here && !remote_tables.contains(table.name) {
            continue;
        }
        let table_dir = dir.join(table.name);
        let Ok(entries) = std::fs::read_dir(&table_dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if remove_if_stale_download(&entry) || !layout::is_chunk_file(name) {
                continue;
            }
            if !wanted.contains_key(&format!("{}/{name}", table.name)) {
                let path = entry.path();
                std::fs::remove_file(&path).map_err(|e| RemoteError::io(url, &path, &e))?;
            }
        }
    }
    Ok(())
}

/// Whether `entry` is a download's temp file (see [`download`]), removed
/// when a killed command left it (one still going is younger than
/// [`STALE_DOWNLOAD`]).
fn remove_if_stale_download(entry: &std::fs::DirEntry) -> bool {
    let name = entry.file_name();
    let Some(name) = name.to_str() else {
        return false;
    };
    if !(name.starts_with('.') && name.ends_with(layout::TEMP_SUFFIX)) {
        return false;
    }
    let stale = entry
        .metadata()
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().unwrap_or_default() > STALE_DOWNLOAD);
    if stale {
        let _ = std::fs::remove_file(entry.path());
    }
    true
}

/// Streams one object into `local`, through a hidden temp file renamed
/// into place, and returns its size.
async fn download(
    store: &dyn ObjectStore,
    key: &ObjectPath,
    local: &Path,
    url: &str,
) -> Result<u64, RemoteError> {
    let dir = local.parent().expect("a file below the cache");
    std::fs::create_dir_all(dir).map_err(|e| RemoteError::io(url, dir, &e))?;
    let name = local
        .file_name()
        .expect("a file name")
        .to_string_lossy()
        .into_owned();
    // Hidden, so no reader opens it, and this process's own: two commands
    // filling one cache at once each write their own copy and rename it.
    let temp = dir.join(format!(
        ".{name}.{}{}",
        std::process::id(),
        layout::TEMP_SUFFIX
    ));
    let mut file = std::fs::File::create(&temp).map_err(|e| RemoteError::io(url, &temp, &e))?;
    let mut stream = store
        .get(key)
        .await
        .map_err(|e| RemoteError::store(url, &e))?
        .into_stream();
    let mut bytes = 0u64;
    while let Some(part) = stream
        .try_next()
        .await
        .map_err(|e| RemoteError::store(url, &e))?
    {
        file.write_all(&part)
            .map_err(|e| RemoteError::io(url, &temp, &e))?;
        bytes += part.len() as u64;
    }
    drop(file);
    std::fs::rename(&temp, local).map_err(|e| RemoteError::io(url, local, &e))?;
    Ok(bytes)
}

/// How `hindsight push` runs.
#[derive(Debug, Clone)]
pub struct PushOptions {
    /// Also remove from the bucket the chunks no longer in the directory
    /// (those retention retired).
    pub delete: bool,
}

/// What one push did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pushed {
    pub uploaded: usize,
    pub bytes: u64,
    /// Files the bucket already had, the same size.
    pub present: usize,
    pub deleted: usize,
}

/// What a push knows of the bucket from the rounds before it: `--follow`
/// lists the prefix once every [`RELIST_EVERY`] rather than every round, so
/// a day of rounds costs a few hundred list requests, not one per 1,000
/// keys per round.
#[derive(Debug, Default)]
pub struct PushState {
    listed_at: Option<Instant>,
    /// Path below the prefix → size, as listed and then as uploaded.
    remote: BTreeMap<String, u64>,
    /// The `recording.json` the bucket has, once this process knows it.
    meta: Option<Vec<u8>>,
    /// The directory as the last round read it: footers of the chunks
    /// still there are not read again.
    local: Option<Recording>,
}

/// How often `--follow` lists the bucket again, to notice objects that
/// someone else removed or changed.
const RELIST_EVERY: Duration = Duration::from_secs(600);

/// Uploads what `dir`'s closed chunks and description the bucket lacks;
/// see the module doc. Safe to repeat and to interrupt: a second run
/// uploads only what the first did not finish. `state` carries what the
/// bucket holds from one call to the next ([`PushState`]).
pub async fn push(
    dir: &Path,
    url: &str,
    options: &PushOptions,
    state: &mut PushState,
) -> anyhow::Result<Pushed> {
    let outcome = push_round(dir, url, options, state).await;
    if outcome.is_err() {
        // What failed may have left the bucket unlike what `state` says.
        *state = PushState::default();
    }
    outcome
}

async fn push_round(
    dir: &Path,
    url: &str,
    options: &PushOptions,
    state: &mut PushState,
) -> anyhow::Result<Pushed> {
    let recording = Recording::open_reusing(dir, state.local.as_ref())?;
    let location = Location::parse(url)?;
    let store = location.store()?;
    if state
        .listed_at
        .is_none_or(|at| at.elapsed() >= RELIST_EVERY)
    {
        *state = PushState {
            listed_at: Some(Instant::now()),
            remote: list(store.as_ref(), &location).await?,
            meta: None,
            local: None,
        };
    }
    let mut pushed = Pushed::default();
    let mut local_files = HashSet::new();
    for files in &recording.tables {
        for chunk in &files.chunks {
            let name = chunk
                .path
                .file_name()
                .expect("a chunk file")
                .to_string_lossy();
            let relative = format!("{}/{name}", files.table.name);
            local_files.insert(relative.clone());
            if state.remote.get(&relative) == Some(&chunk.bytes) {
                pushed.present += 1;
                continue;
            }
            match upload(store.as_ref(), &location.key(&relative), &chunk.path, url).await {
                Ok(bytes) => {
                    pushed.uploaded += 1;
                    pushed.bytes += bytes;
                    state.remote.insert(relative, bytes);
                }
                // Retention retired it since the directory was read.
                Err(UploadError::Gone) => {}
                Err(UploadError::Failed(e)) => return Err(e.into()),
            }
        }
    }
    let meta_path = dir.join(layout::RECORDING_FILE);
    let meta = std::fs::read(&meta_path).map_err(|e| RemoteError::io(url, &meta_path, &e))?;
    let meta_key = location.key(layout::RECORDING_FILE);
    if state.meta.is_none()
        && state.remote.get(layout::RECORDING_FILE) == Some(&(meta.len() as u64))
    {
        let remote_meta = store
            .get(&meta_key)
            .await
            .map_err(|e| RemoteError::store(url, &e))?
            .bytes()
            .await
            .map_err(|e| RemoteError::store(url, &e))?;
        state.meta = Some(remote_meta.to_vec());
    }
    if state.meta.as_deref() == Some(meta.as_slice()) {
        pushed.present += 1;
    } else {
        pushed.bytes += meta.len() as u64;
        pushed.uploaded += 1;
        store
            .put(&meta_key, PutPayload::from(meta.clone()))
            .await
            .map_err(|e| RemoteError::store(url, &e))?;
        state
            .remote
            .insert(layout::RECORDING_FILE.to_owned(), meta.len() as u64);
        state.meta = Some(meta);
    }
    if options.delete {
        let retired: Vec<String> = state
            .remote
            .keys()
            .filter(|relative| {
                *relative != layout::RECORDING_FILE
                    && recording_file(relative)
                    && !local_files.contains(*relative)
            })
            .cloned()
            .collect();
        for relative in retired {
            store
                .delete(&location.key(&relative))
                .await
                .map_err(|e| RemoteError::store(url, &e))?;
            state.remote.remove(&relative);
            pushed.deleted += 1;
        }
    }
    state.local = Some(recording);
    Ok(pushed)
}

enum UploadError {
    Gone,
    Failed(RemoteError),
}

/// Uploads one file: in one request when small, else as a multipart upload
/// that is aborted if anything fails, so no partial object ever appears.
async fn upload(
    store: &dyn ObjectStore,
    key: &ObjectPath,
    path: &Path,
    url: &str,
) -> Result<u64, UploadError> {
    let failed = |e: std::io::Error| UploadError::Failed(RemoteError::io(url, path, &e));
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(UploadError::Gone),
        Err(e) => return Err(failed(e)),
    };
    let size = file.metadata().map_err(failed)?.len();
    let store_failed = |e: object_store::Error| UploadError::Failed(RemoteError::store(url, &e));
    if size <= PART_BYTES as u64 {
        let mut bytes = Vec::with_capacity(size as usize);
        file.read_to_end(&mut bytes).map_err(failed)?;
        let len = bytes.len() as u64;
        store
            .put(key, PutPayload::from(bytes))
            .await
            .map_err(store_failed)?;
        return Ok(len);
    }
    let mut writer = WriteMultipart::new_with_chunk_size(
        store.put_multipart(key).await.map_err(store_failed)?,
        PART_BYTES,
    );
    let mut buffer = vec![0u8; PART_BYTES];
    let mut sent = 0u64;
    loop {
        let outcome = match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                writer.write(&buffer[..n]);
                sent += n as u64;
                writer.wait_for_capacity(PARTS_IN_FLIGHT).await
            }
            Err(e) => {
                let _ = writer.abort().await;
                return Err(failed(e));
            }
        };
        if let Err(e) = outcome {
            let _ = writer.abort().await;
            return Err(store_failed(e));
        }
    }
    writer.finish().await.map_err(store_failed)?;
    Ok(sent)
}

/// Pushes now, then again every `interval` until SIGINT or SIGTERM,
/// writing a line a round to `out`. A round that fails is reported on
/// stderr and retried at the next; only a first round that fails on bad
/// input (no bucket, a refused key) ends the loop, with its error.
pub async fn push_follow(
    dir: &Path,
    url: &str,
    options: &PushOptions,
    interval: Duration,
    mut out: impl Write,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut first = true;
    let mut state = PushState::default();
    loop {
        match push(dir, url, options, &mut state).await {
            Ok(pushed) => {
                write_pushed(dir, url, &pushed, &mut out)?;
                out.flush()?;
            }
            Err(e) if first && crate::is_bad_input(&e) => return Err(e),
            Err(e) => eprintln!("hindsight push: {e:#} (retrying in {interval:?})"),
        }
        first = false;
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = interrupt.recv() => return Ok(()),
            _ = terminate.recv() => return Ok(()),
        }
    }
}

/// One line saying what a push did.
pub fn write_pushed(
    dir: &Path,
    url: &str,
    pushed: &Pushed,
    mut out: impl Write,
) -> std::io::Result<()> {
    write!(
        out,
        "{} -> {url}: {} uploaded ({}), {} already there",
        dir.display(),
        pushed.uploaded,
        crate::info::human_bytes(pushed.bytes),
        pushed.present
    )?;
    if pushed.deleted > 0 {
        write!(out, ", {} deleted", pushed.deleted)?;
    }
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_into_bucket_and_prefix() {
        let l = Location::parse("s3://b/fleet/host-a/").unwrap();
        assert_eq!(
            (l.bucket.as_str(), l.prefix.as_str()),
            ("b", "fleet/host-a")
        );
        assert_eq!(
            l.key("recording.json").as_ref(),
            "fleet/host-a/recording.json"
        );
        let whole = Location::parse("s3://b").unwrap();
        assert_eq!(whole.key("x/y").as_ref(), "x/y");
        for bad in ["s3://", "s3:///p", "http://b/p", "s3://b/../p"] {
            let e = Location::parse(bad).unwrap_err();
            assert!(e.bad_input && e.to_string().starts_with(bad), "{e}");
        }
    }

    #[test]
    fn a_copy_is_shown_by_the_url_it_came_from() {
        let location = Location::parse("s3://b/fleet/host-a/").unwrap();
        assert_eq!(
            url_of_copy(&location.cache_dir()).as_deref(),
            Some("s3://b/fleet/host-a")
        );
        assert_eq!(url_of_copy(&cache_root().join("elsewhere/b")), None);
        assert_eq!(url_of_copy(Path::new("/var/lib/hindsight/rec")), None);
    }

    #[test]
    fn a_prefix_is_one_recording_or_one_per_host() {
        let listing = |keys: &[&str]| -> BTreeMap<String, u64> {
            keys.iter().map(|k| ((*k).to_owned(), 1)).collect()
        };
        assert_eq!(
            recording_roots(&listing(&["recording.json", "sched_switch/a.parquet"])),
            [""]
        );
        assert_eq!(
            recording_roots(&listing(&[
                "b/recording.json",
                "a/recording.json",
                "a/sched_switch/x.parquet",
                "c/sched_switch/x.parquet",
                "d/e/recording.json",
            ])),
            ["a", "b"]
        );
        assert!(recording_roots(&listing(&["x.parquet"])).is_empty());
    }

    #[test]
    fn only_a_recordings_own_files_are_shipped() {
        assert!(recording_file("recording.json"));
        assert!(recording_file(
            "sched_switch/20261204T111456.343Z-000000.parquet"
        ));
        assert!(!recording_file(
            "sched_switch/.20261204T111456.343Z-000000.parquet.tmp"
        ));
        assert!(!recording_file(
            "no_such_table/20261204T111456.343Z-000000.parquet"
        ));
        assert!(!recording_file(".lock"));
    }

    #[test]
    fn a_cached_copy_loses_retired_chunks_and_dead_downloads_only() {
        let copy = tempfile::tempdir().unwrap();
        let table = copy.path().join("sched_switch");
        std::fs::create_dir(&table).unwrap();
        let kept = "20261204T111456.343Z-000000.parquet";
        let retired = "20261204T111356.343Z-000000.parquet";
        let dead = [
            copy.path().join(".recording.json.4242.tmp"),
            table.join(format!(".{kept}.4242.tmp")),
        ];
        let going = table.join(format!(".{kept}.4343.tmp"));
        for path in [&table.join(kept), &table.join(retired), &going]
            .into_iter()
            .chain(&dead)
        {
            std::fs::write(path, b"x").unwrap();
        }
        let long_ago = std::time::SystemTime::now() - STALE_DOWNLOAD * 2;
        for path in &dead {
            let file = std::fs::File::options().write(true).open(path).unwrap();
            file.set_modified(long_ago).unwrap();
        }
        let wanted = BTreeMap::from([(format!("sched_switch/{kept}"), 1)]);
        forget_retired(copy.path(), &wanted, "s3://b/p").unwrap();
        let mut left: Vec<String> = walk(copy.path());
        left.sort();
        let expected = [
            format!("sched_switch/.{kept}.4343.tmp"),
            format!("sched_switch/{kept}"),
        ];
        assert_eq!(left, expected);
    }

    /// Files below `dir`, as paths relative to it.
    fn walk(dir: &Path) -> Vec<String> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                files.extend(walk(&path).into_iter().map(|f| format!("{name}/{f}")));
            } else {
                files.push(name);
            }
        }
        files
    }

    #[test]
    fn a_store_error_is_one_line_with_the_services_code() {
        let err = object_store::Error::Generic {
            store: "S3",
            source: "Error performing list request: Client error with status 404 Not Found: \
                     <Error><Code>NoSuchBucket</Code></Error>\nmore"
                .into(),
        };
        let e = RemoteError::store("s3://nope/p", &err);
        assert_eq!(e.to_string(), "s3://nope/p: no such bucket");
        assert!(e.bad_input);
    }
}
