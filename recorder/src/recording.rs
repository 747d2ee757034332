//! The recording directory: deciding whether we may write into it, and
//! keeping `recording.json` current (always replaced atomically).

use std::{
    fs::{self, DirBuilder, File, OpenOptions},
    io::{Read, Write},
    os::{
        fd::AsRawFd,
        unix::fs::{DirBuilderExt, OpenOptionsExt},
    },
    path::{Path, PathBuf},
};

use anyhow::Context;
use hindsight_schemas::{
    layout,
    meta::{RecordingMeta, Session, FORMAT},
    SCHEMA_VERSION,
};
use thiserror::Error;

use crate::sink::{sync_dir, FILE_MODE};

/// Mode of a recording's directories: recordings contain command lines and paths.
pub const DIR_MODE: u32 = 0o750;

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

/// Creates a directory (and parents) with [`DIR_MODE`]; an existing one is fine.
pub fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))
}

/// An open recording directory and its description.
#[derive(Debug)]
pub struct Recording {
    pub dir: PathBuf,
    pub meta: RecordingMeta,
    /// Held for as long as this recorder writes into `dir`.
    _lock: File,
}

/// Takes the recording's lock file (see [`layout::LOCK_FILE`]) and writes
/// our pid into it; refuses when a live recorder holds it. `flock` locks
/// die with their process, so a recorder killed with `kill -9` leaves a
/// file that the next one simply takes over.
pub fn lock(dir: &Path) -> anyhow::Result<File> {
    let path = dir.join(layout::LOCK_FILE);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(FILE_MODE)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let error = std::io::Error::last_os_error();
        if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            let pid = pid.trim();
            return Err(OutputRefused::Locked {
                path: dir.into(),
                pid: if pid.is_empty() {
                    "unknown".into()
                } else {
                    pid.into()
                },
            }
            .into());
        }
        return Err(error).with_context(|| format!("locking {}", path.display()));
    }
    file.set_len(0)
        .and_then(|_| file.write_all(format!("{}\n", std::process::id()).as_bytes()))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(file)
}

impl Recording {
    /// Opens `dir` for a new session: creates it, or continues an existing
    /// recording of this host and schema; refuses anything else.
    pub fn open(dir: &Path, host: &str, session: Session) -> anyhow::Result<Recording> {
        let meta_path = dir.join(layout::RECORDING_FILE);
        let mut meta = if dir.exists() {
            if !dir.is_dir() {
                return Err(OutputRefused::NotADirectory(dir.into()).into());
            }
            if meta_path.exists() {
                let text = fs::read_to_string(&meta_path)
                    .with_context(|| format!("reading {}", meta_path.display()))?;
                let meta = RecordingMeta::from_json(&text)
                    .ok()
                    .filter(|m| m.format == FORMAT)
                    .ok_or_else(|| OutputRefused::BadMeta {
                        path: meta_path.clone(),
                        reason: "not a hindsight recording description".into(),
                    })?;
                if meta.schema_version != SCHEMA_VERSION {
                    return Err(OutputRefused::OtherVersion {
                        path: meta_path,
                        found: meta.schema_version,
                    }
                    .into());
                }
                if meta.host != host {
                    return Err(OutputRefused::OtherHost {
                        path: meta_path,
                        found: meta.host,
                        host: host.into(),
                    }
                    .into());
                }
                meta
            } else if fs::read_dir(dir)
                .with_context(|| format!("reading {}", dir.display()))?
                .flatten()
                .any(|e| e.file_name() != layout::LOCK_FILE)
            {
                return Err(OutputRefused::Foreign(dir.into()).into());
            } else {
                new_meta(host)
            }
        } else {
            new_meta(host)
        };
        create_private_dir(dir)?;
        // Before anything is written, tidied or recovered: the temporaries
        // and journals may be a running recorder's open chunk.
        let lock = lock(dir)?;
        recover_stale_chunks(dir)?;
        meta.sessions.push(session);
        let recording = Recording {
            dir: dir.into(),
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
        let path = self.dir.join(layout::RECORDING_FILE);
        let temp = self
            .dir
            .join(layout::temp_file_name(layout::RECORDING_FILE));
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(FILE_MODE)
            .open(&temp)
            .with_context(|| format!("creating {}", temp.display()))?;
        file.write_all(self.meta.to_json().as_bytes())
            .and_then(|_| file.sync_all())
            .with_context(|| format!("writing {}", temp.display()))?;
        fs::rename(&temp, &path).with_context(|| format!("renaming to {}", path.display()))?;
        sync_dir(&self.dir).with_context(|| format!("fsync {}", self.dir.display()))?;
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
fn recover_stale_chunks(dir: &Path) -> anyhow::Result<()> {
    let recovered = crate::sink::recover_recording(dir)?;
    if !recovered.is_empty() {
        let rows: u64 = recovered.iter().map(|r| r.rows).sum();
        eprintln!(
            "hindsight-record: recovered {} chunk files ({rows} rows) that a previous recorder left open in {}",
            recovered.len(),
            dir.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
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
            DIR_MODE
        );
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
}
