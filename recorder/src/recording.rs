//! The recording directory: deciding whether we may write into it, and
//! keeping `recording.json` current (always replaced atomically).

use std::{
    io::{Read, Seek, Write},
    os::fd::AsRawFd,
    path::{Path, PathBuf},
};

use anyhow::Context;
use hindsight_schemas::{
    layout,
    meta::{RecordingMeta, Session, FORMAT},
    SCHEMA_VERSION,
};
use thiserror::Error;

use crate::private_dir::PrivateDir;

/// Why an output directory is refused; the caller exits with a usage error.
#[derive(Debug, Error)]
pub enum OutputRefused {
    #[error("{0}: not empty and not a hindsight recording (no {file}); choose a new or empty directory", file = layout::RECORDING_FILE)]
    Foreign(PathBuf),
    #[error("{path}: recording.json is not readable as a hindsight recording: {reason}")]
    BadMeta { path: PathBuf, reason: String },
    #[error("{path}: written with schema version {found}; this hindsight-record writes {SCHEMA_VERSION}: use a new directory")]
    OtherVersion { path: PathBuf, found: u32 },
    #[error("{path}: recorded on host {found}, this is {host}: use a new directory")]
    OtherHost {
        path: PathBuf,
        found: String,
        host: String,
    },
    #[error("{0}: exists and is not a directory")]
    NotADirectory(PathBuf),
    #[error("{path}: another hindsight-record (pid {pid}) is recording into it; stop it or choose another directory")]
    Locked { path: PathBuf, pid: String },
}

/// An open recording directory and its description.
#[derive(Debug)]
pub struct Recording {
    pub dir: PrivateDir,
    pub meta: RecordingMeta,
    /// Held for as long as this recorder writes into `dir`.
    _lock: std::fs::File,
}

/// Takes the recording's lock file (see [`layout::LOCK_FILE`]) and writes
/// our pid into it; refuses when a live recorder holds it. `flock` locks
/// die with their process, so a recorder killed with `kill -9` leaves a
/// file that the next one simply takes over.
pub fn lock(dir: &PrivateDir) -> anyhow::Result<std::fs::File> {
    lock_within(dir, OWN_LOCK_PATIENCE)
}

/// How long a lock that names our own pid is waited for. A `flock` belongs
/// to the open file description, and a child forked by any thread of this
/// process shares ours until it execs (close-on-exec closes it only then),
/// so a lock this process just released can stay held for that moment.
const OWN_LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

fn lock_within(
    dir: &PrivateDir,
    own_patience: std::time::Duration,
) -> anyhow::Result<std::fs::File> {
    let path = dir.shown(layout::LOCK_FILE);
    // A lock that is not a regular file (a planted link) locks nothing
    // anyone could hold: it is replaced, never opened through.
    let mut file = match dir.open_or_create(layout::LOCK_FILE) {
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => dir
            .remove(layout::LOCK_FILE)
            .and_then(|()| dir.open_or_create(layout::LOCK_FILE)),
        opened => opened,
    }
    .with_context(|| format!("opening {}", path.display()))?;
    let started = std::time::Instant::now();
    // SAFETY: flock on a descriptor we own.
    while unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let error = std::io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(error).with_context(|| format!("locking {}", path.display()));
        }
        let mut pid = String::new();
        let _ = file.rewind().and_then(|()| file.read_to_string(&mut pid));
        let pid = pid.trim();
        if pid == std::process::id().to_string() && started.elapsed() < own_patience {
            std::thread::sleep(std::time::Duration::from_millis(10));
            continue;
        }
        return Err(OutputRefused::Locked {
            path: dir.path().into(),
            pid: if pid.is_empty() {
                "unknown".into()
            } else {
                pid.into()
            },
        }
        .into());
    }
    file.set_len(0)
        .and_then(|_| file.rewind())
        .and_then(|_| file.write_all(format!("{}\n", std::process::id()).as_bytes()))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(file)
}

/// Reads the recording description of `dir`, if it has one.
pub fn read_meta(dir: &PrivateDir) -> anyhow::Result<Option<RecordingMeta>> {
    let path = dir.shown(layout::RECORDING_FILE);
    let mut file = match dir.open_regular(layout::RECORDING_FILE) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut text = String::new();
    file.read_to_string(&mut text)
        .with_context(|| format!("reading {}", path.display()))?;
    RecordingMeta::from_json(&text)
        .ok()
        .filter(|m| m.format == FORMAT)
        .map(Some)
        .ok_or_else(|| {
            OutputRefused::BadMeta {
                path,
                reason: "not a hindsight recording description".into(),
            }
            .into()
        })
}

impl Recording {
    /// Opens `dir` for a new session: creates it, or continues an existing
    /// recording of this host and schema; refuses anything else, and any
    /// directory that another user could write into (see [`PrivateDir`]).
    pub fn open(path: &Path, host: &str, session: Session) -> anyhow::Result<Recording> {
        if path.exists() && !path.is_dir() {
            return Err(OutputRefused::NotADirectory(path.into()).into());
        }
        let dir = PrivateDir::create(path)?;
        let mut meta = match read_meta(&dir)? {
            Some(meta) if meta.schema_version != SCHEMA_VERSION => {
                return Err(OutputRefused::OtherVersion {
                    path: dir.shown(layout::RECORDING_FILE),
                    found: meta.schema_version,
                }
                .into())
            }
            Some(meta) if meta.host != host => {
                return Err(OutputRefused::OtherHost {
                    path: dir.shown(layout::RECORDING_FILE),
                    found: meta.host,
                    host: host.into(),
                }
                .into())
            }
            Some(meta) => meta,
            None if dir
                .entries()
                .with_context(|| format!("reading {}", path.display()))?
                .iter()
                .any(|e| e.name != layout::LOCK_FILE) =>
            {
                return Err(OutputRefused::Foreign(path.into()).into())
            }
            None => new_meta(host),
        };
        // Before anything is written, tidied or recovered: the temporaries
        // and journals may be a running recorder's open chunk.
        let lock = lock(&dir)?;
        recover_stale_chunks(&dir)?;
        meta.sessions.push(session);
        let recording = Recording {
            dir,
            meta,
            _lock: lock,
        };
        recording.save()?;
        Ok(recording)
    }

    pub fn session_mut(&mut self) -> &mut Session {
        self.meta
            .sessions
            .last_mut()
            .expect("open() pushed a session")
    }

    /// Replaces recording.json atomically: write, fsync, rename, fsync dir.
    pub fn save(&self) -> anyhow::Result<()> {
        let temp = layout::temp_file_name(layout::RECORDING_FILE);
        let mut file = self
            .dir
            .create_file(&temp)
            .with_context(|| format!("creating {}", self.dir.shown(&temp).display()))?;
        file.write_all(self.meta.to_json().as_bytes())
            .and_then(|_| file.sync_all())
            .with_context(|| format!("writing {}", self.dir.shown(&temp).display()))?;
        self.dir
            .rename(&temp, layout::RECORDING_FILE)
            .with_context(|| {
                format!(
                    "renaming to {}",
                    self.dir.shown(layout::RECORDING_FILE).display()
                )
            })?;
        self.dir
            .sync()
            .with_context(|| format!("fsync {}", self.dir.path().display()))?;
        Ok(())
    }
}

fn new_meta(host: &str) -> RecordingMeta {
    RecordingMeta {
        format: FORMAT.into(),
        schema_version: SCHEMA_VERSION,
        host: host.into(),
        sessions: Vec::new(),
        retired: Vec::new(),
        slice_of: None,
    }
}

/// The journals a killed recorder left become chunks before anything new
/// is written; their half-written Parquet temporaries go.
fn recover_stale_chunks(dir: &PrivateDir) -> anyhow::Result<()> {
    let recovered = crate::sink::recover_recording(dir)?;
    if !recovered.is_empty() {
        let rows: u64 = recovered.iter().map(|r| r.rows).sum();
        eprintln!(
            "hindsight-record: recovered {} chunk files ({rows} rows) that a previous recorder left open in {}",
            recovered.len(),
            dir.path().display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn session() -> Session {
        Session {
            started: "2026-01-01T00:00:00Z".into(),
            stopped: None,
            boot_id: "b".into(),
            kernel: "k".into(),
            cpus: 2,
            numa_nodes: 1,
            recorder_version: "0".into(),
            command_line: vec!["hindsight-record".into()],
            events: vec!["sched".into()],
            chunk_ns: 1,
            clock_offsets: vec![],
            ..Default::default()
        }
    }

    #[test]
    fn new_and_existing_recordings_open_and_sessions_accumulate() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("rec");
        Recording::open(&dir, "h", session()).unwrap();
        let again = Recording::open(&dir, "h", session()).unwrap();
        assert_eq!(again.meta.sessions.len(), 2);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            crate::private_dir::DIR_MODE
        );
    }

    /// Links planted where the recorder writes are replaced, never written
    /// through; one planted where it reads is refused.
    #[test]
    fn planted_links_are_replaced_not_followed() {
        use std::os::unix::fs::symlink;
        let root = tempfile::tempdir().unwrap();
        let victim = root.path().join("victim");
        fs::write(&victim, "precious").unwrap();
        let dir = root.path().join("rec");
        fs::create_dir(&dir).unwrap();
        symlink(&victim, dir.join(layout::LOCK_FILE)).unwrap();
        drop(Recording::open(&dir, "h", session()).unwrap());
        symlink(
            &victim,
            dir.join(layout::temp_file_name(layout::RECORDING_FILE)),
        )
        .unwrap();
        let again = Recording::open(&dir, "h", session()).unwrap();
        assert_eq!(again.meta.sessions.len(), 2);
        drop(again);
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
        assert!(fs::symlink_metadata(dir.join(layout::LOCK_FILE))
            .unwrap()
            .is_file());

        fs::remove_file(dir.join(layout::RECORDING_FILE)).unwrap();
        symlink(&victim, dir.join(layout::RECORDING_FILE)).unwrap();
        let err = Recording::open(&dir, "h", session()).unwrap_err();
        assert!(format!("{err:#}").contains("not a regular file"), "{err:#}");
    }

    #[test]
    fn foreign_directories_are_refused_with_their_path() {
        let root = tempfile::tempdir().unwrap();
        fs::write(root.path().join("notes.txt"), "mine").unwrap();
        let err = Recording::open(root.path(), "h", session()).unwrap_err();
        assert!(err.downcast_ref::<OutputRefused>().is_some());
        assert!(
            err.to_string().contains("not a hindsight recording"),
            "{err}"
        );
        assert!(
            fs::read_dir(root.path()).unwrap().count() == 1,
            "nothing written into a refused dir"
        );

        let other = root.path().join("other");
        let held = Recording::open(&other, "h", session()).unwrap();
        let err = Recording::open(&other, "h", session()).unwrap_err();
        assert!(
            matches!(err.downcast_ref::<OutputRefused>(), Some(OutputRefused::Locked { pid, .. }) if *pid == std::process::id().to_string()),
            "{err}"
        );
        drop(held);
        Recording::open(&other, "h", session()).unwrap();
        let err = Recording::open(&other, "elsewhere", session()).unwrap_err();
        assert!(err.to_string().contains("recorded on host h"), "{err}");
    }

    /// A lock naming our own pid is held by a description this process
    /// shares (a forked child before its exec): waited for, not refused.
    #[test]
    fn a_lock_our_own_pid_holds_is_waited_for() {
        let root = tempfile::tempdir().unwrap();
        let dir = PrivateDir::create(&root.path().join("rec")).unwrap();
        let first = lock(&dir).unwrap();
        // A second open file description, like a child's inherited one.
        let shared = dir.open_or_create(layout::LOCK_FILE).unwrap();
        drop(first);
        // SAFETY: flock on a descriptor we own.
        assert_eq!(
            unsafe { libc::flock(shared.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
            0
        );
        let err = lock_within(&dir, std::time::Duration::from_millis(50)).unwrap_err();
        assert!(
            matches!(err.downcast_ref::<OutputRefused>(), Some(OutputRefused::Locked { pid, .. }) if *pid == std::process::id().to_string()),
            "{err}"
        );
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            drop(shared);
        });
        let taken = lock_within(&dir, std::time::Duration::from_secs(10)).unwrap();
        releaser.join().unwrap();
        let mut pid = String::new();
        dir.open_regular(layout::LOCK_FILE)
            .unwrap()
            .read_to_string(&mut pid)
            .unwrap();
        assert_eq!(pid, format!("{}\n", std::process::id()));
        drop(taken);
    }
}
