//! The recording's directories, held open, and the files in them created
//! so that nobody but the recorder's own user can redirect a write.
//!
//! The recorder runs as root on hosts where other users write files. A
//! symlink planted where it writes (`.lock` → `/etc/shadow`) must not turn
//! its writes against the host. So:
//! - every directory of a recording is held as a descriptor, opened once,
//!   and must be the recorder user's own and writable by nobody else
//!   (a table directory that is a symlink is refused). After that check
//!   only that user or root can plant anything in it, and moving a parent
//!   directory cannot redirect what is opened relative to the descriptor;
//! - a file is created afresh, `O_CREAT | O_EXCL | O_NOFOLLOW` relative to
//!   its directory, after unlinking whatever held the name (unlink removes
//!   a link, never its target); read only when it is a regular file, never
//!   through a link; and replaced by `renameat`, which replaces a link and
//!   never writes through it.

use std::{
    fs::File,
    io,
    os::fd::OwnedFd,
    path::{Path, PathBuf},
};

use anyhow::Context;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, CWD};
use thiserror::Error;

/// Mode of a recording's directories: recordings contain command lines and paths.
pub const DIR_MODE: u32 = 0o750;

/// Mode of every file a recording holds.
pub const FILE_MODE: u32 = 0o640;

/// A directory the recorder will not write into; the caller exits with a
/// usage error.
#[derive(Debug, Error)]
#[error(
    "{path}: {reason}; whoever can write there could turn the recorder's writes against this host: \
     use a directory that only uid {uid} can write"
)]
pub struct NotPrivate {
    pub path: PathBuf,
    pub reason: String,
    pub uid: u32,
}

/// An open directory of a recording, checked to be private.
#[derive(Debug)]
pub struct PrivateDir {
    fd: OwnedFd,
    path: PathBuf,
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn refuse(path: &Path, reason: String) -> anyhow::Error {
    NotPrivate {
        path: path.into(),
        reason,
        uid: euid(),
    }
    .into()
}

/// What is wrong with the directory open at `fd`, if anything.
fn check(fd: &OwnedFd, path: &Path) -> anyhow::Result<()> {
    let stat = rustix::fs::fstat(fd).with_context(|| format!("stat {}", path.display()))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
        return Err(refuse(path, "not a directory".into()));
    }
    if stat.st_uid != euid() {
        return Err(refuse(path, format!("owned by uid {}", stat.st_uid)));
    }
    if stat.st_mode & 0o022 != 0 {
        return Err(refuse(
            path,
            format!(
                "writable by its group or others (mode {:o})",
                stat.st_mode & 0o7777
            ),
        ));
    }
    Ok(())
}

/// `ELOOP` from `O_NOFOLLOW` (or a name that is not a regular file) as one
/// error that says so.
fn not_regular(name: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{name} is not a regular file (a symbolic link, a FIFO, a device?): not opened"),
    )
}

impl PrivateDir {
    /// Creates `path` (and its parents) where missing, then opens it. The
    /// path the user named may lead through symlinks (`/var/log/hs` to
    /// another disk), but the last one only when it belongs to root or to
    /// the recorder's user: anyone else's could be pointed anywhere later.
    pub fn create(path: &Path) -> anyhow::Result<PrivateDir> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(path)
            .with_context(|| format!("creating {}", path.display()))?;
        Self::open(path)
    }

    /// Opens the existing directory `path` (see [`PrivateDir::create`]).
    pub fn open(path: &Path) -> anyhow::Result<PrivateDir> {
        let link = rustix::fs::statat(CWD, path, AtFlags::SYMLINK_NOFOLLOW)
            .with_context(|| format!("stat {}", path.display()))?;
        let is_link = FileType::from_raw_mode(link.st_mode) == FileType::Symlink;
        if is_link && link.st_uid != 0 && link.st_uid != euid() {
            return Err(refuse(
                path,
                format!("a symbolic link owned by uid {}", link.st_uid),
            ));
        }
        let mut flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        if !is_link {
            flags |= OFlags::NOFOLLOW;
        }
        let fd = rustix::fs::openat(CWD, path, flags, Mode::empty())
            .with_context(|| format!("opening {}", path.display()))?;
        check(&fd, path)?;
        Ok(PrivateDir {
            fd,
            path: path.into(),
        })
    }

    /// The directory `name` in this one, created where missing; never
    /// through a symlink.
    pub fn subdir(&self, name: &str) -> anyhow::Result<PrivateDir> {
        let path = self.path.join(name);
        match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(DIR_MODE)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => {
                return Err(io::Error::from(e))
                    .with_context(|| format!("creating {}", path.display()))
            }
        }
        let fd = match rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
                return Err(refuse(&path, "not a directory (a symbolic link?)".into()))
            }
            Err(e) => {
                return Err(io::Error::from(e))
                    .with_context(|| format!("opening {}", path.display()))
            }
        };
        check(&fd, &path)?;
        Ok(PrivateDir { fd, path })
    }

    /// The directory's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `name` in this directory, for messages.
    pub fn shown(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Creates `name` empty, for writing, replacing whatever held the name
    /// (a leftover of a killed recorder, or a planted link: the link goes,
    /// its target is untouched).
    pub fn create_file(&self, name: &str) -> io::Result<File> {
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(e.into()),
        }
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(FILE_MODE),
        )?;
        Ok(File::from(fd))
    }

    /// Opens `name` for reading and writing, created where missing, and
    /// only if it is a regular file (the lock file, whose content outlives
    /// its holder).
    pub fn open_or_create(&self, name: &str) -> io::Result<File> {
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::from_raw_mode(FILE_MODE),
        )
        .map_err(|e| match e {
            rustix::io::Errno::LOOP => not_regular(name),
            e => e.into(),
        })?;
        Self::regular(fd, name)
    }

    /// Opens `name` for reading, only if it is a regular file.
    pub fn open_regular(&self, name: &str) -> io::Result<File> {
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            rustix::io::Errno::LOOP => not_regular(name),
            e => e.into(),
        })?;
        Self::regular(fd, name)
    }

    fn regular(fd: OwnedFd, name: &str) -> io::Result<File> {
        let stat = rustix::fs::fstat(&fd)?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(not_regular(name));
        }
        // Reads block again (NONBLOCK was only against a FIFO at open).
        rustix::fs::fcntl_setfl(&fd, OFlags::empty())?;
        Ok(File::from(fd))
    }

    /// The size of `name` if it is a regular file here (not a link).
    pub fn regular_size(&self, name: &str) -> Option<u64> {
        let stat = rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        (FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile)
            .then_some(stat.st_size as u64)
    }

    /// Renames `from` to `to` within this directory, replacing `to`.
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        Ok(rustix::fs::renameat(&self.fd, from, &self.fd, to)?)
    }

    /// Removes the name `name` (a link itself, never what it points to).
    pub fn remove(&self, name: &str) -> io::Result<()> {
        Ok(rustix::fs::unlinkat(&self.fd, name, AtFlags::empty())?)
    }

    /// fsyncs the directory, so a rename in it survives a crash.
    pub fn sync(&self) -> io::Result<()> {
        Ok(rustix::fs::fsync(&self.fd)?)
    }

    /// The names in the directory (without `.` and `..`), with whether each
    /// is a regular file and whether a directory, as the entry says (no
    /// link followed).
    pub fn entries(&self) -> io::Result<Vec<Entry>> {
        let mut entries = Vec::new();
        for entry in rustix::fs::Dir::read_from(&self.fd)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == "." || name == ".." {
                continue;
            }
            let kind = match entry.file_type() {
                FileType::Unknown => {
                    rustix::fs::statat(&self.fd, name.as_str(), AtFlags::SYMLINK_NOFOLLOW)
                        .map_or(FileType::Unknown, |s| FileType::from_raw_mode(s.st_mode))
                }
                kind => kind,
            };
            entries.push(Entry { name, kind });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }
}

/// One name in a [`PrivateDir`], sorted by name.
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: String,
    pub kind: FileType,
}

impl Entry {
    pub fn is_file(&self) -> bool {
        self.kind == FileType::RegularFile
    }

    pub fn is_dir(&self) -> bool {
        self.kind == FileType::Directory
    }
}

#[cfg(test)]
mod tests {
    use std::{io::Write, os::unix::fs::symlink};

    use super::*;

    #[test]
    fn files_are_created_fresh_and_never_through_a_planted_link() {
        let root = tempfile::tempdir().unwrap();
        let victim = root.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let dir = PrivateDir::create(&root.path().join("rec")).unwrap();
        symlink(&victim, dir.shown(".lock")).unwrap();
        symlink(&victim, dir.shown("a.tmp")).unwrap();

        assert!(
            dir.open_or_create(".lock").is_err(),
            "the lock opened through a link"
        );
        assert!(dir.open_regular(".lock").is_err());
        let mut file = dir.create_file("a.tmp").unwrap();
        file.write_all(b"ours").unwrap();
        dir.rename("a.tmp", "a").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(dir.shown("a")).unwrap(), "ours");
        assert_eq!(dir.regular_size("a"), Some(4));
        assert_eq!(dir.regular_size(".lock"), None, "a link has no size here");
    }

    #[test]
    fn a_table_directory_that_is_a_link_or_shared_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let elsewhere = root.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let dir = PrivateDir::create(&root.path().join("rec")).unwrap();
        symlink(&elsewhere, dir.shown("sched_switch")).unwrap();
        let err = dir.subdir("sched_switch").unwrap_err();
        assert!(err.downcast_ref::<NotPrivate>().is_some(), "{err}");
        assert!(
            err.to_string().contains("sched_switch: not a directory"),
            "{err}"
        );

        use std::os::unix::fs::PermissionsExt;
        let shared = dir.subdir("counter").unwrap();
        std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = dir.subdir("counter").unwrap_err();
        assert!(
            err.to_string()
                .contains("writable by its group or others (mode 777)"),
            "{err}"
        );
        std::fs::set_permissions(
            root.path().join("rec"),
            std::fs::Permissions::from_mode(0o770),
        )
        .unwrap();
        let err = PrivateDir::open(&root.path().join("rec")).unwrap_err();
        assert!(err.to_string().contains("mode 770"), "{err}");
    }

    #[test]
    fn another_users_directory_or_link_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let theirs = root.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
        let err = PrivateDir::create(&theirs).unwrap_err();
        assert!(err.to_string().contains("owned by uid 65534"), "{err}");

        let mine = root.path().join("mine");
        std::fs::create_dir(&mine).unwrap();
        let link = root.path().join("link");
        symlink(&mine, &link).unwrap();
        PrivateDir::open(&link).expect("my own link to my own directory");
        std::os::unix::fs::lchown(&link, Some(65534), None).unwrap();
        let err = PrivateDir::open(&link).unwrap_err();
        assert!(
            err.to_string()
                .contains("a symbolic link owned by uid 65534"),
            "{err}"
        );
    }
}
