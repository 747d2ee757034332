//! Everything the recorder reads from `/proc` and `/sys`, with the root as a
//! parameter so tests run on a fixture tree instead of the live machine.

use std::{
    fs, io,
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
};

/// A thread alive when recording starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScannedTask {
    pub pid: i32,
    pub tid: i32,
    pub ppid: i32,
    pub comm: String,
    /// None for kernel threads (empty `/proc/<pid>/cmdline`).
    pub cmdline: Option<String>,
}

/// The machine, as recording.json describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostInfo {
    pub host: String,
    pub kernel: String,
    pub boot_id: String,
    pub cpus: u32,
    pub numa_nodes: u32,
}

/// Reads `/proc` and `/sys` below injectable roots.
#[derive(Clone, Debug)]
pub struct Procfs {
    proc_root: PathBuf,
    sys_root: PathBuf,
}

impl Default for Procfs {
    fn default() -> Self {
        Procfs::new("/proc", "/sys")
    }
}

impl Procfs {
    pub fn new(proc_root: impl Into<PathBuf>, sys_root: impl Into<PathBuf>) -> Self {
        Procfs {
            proc_root: proc_root.into(),
            sys_root: sys_root.into(),
        }
    }

    /// The `/proc` root (`/proc` on the live machine).
    pub fn proc_root(&self) -> &Path {
        &self.proc_root
    }

    /// The `/sys` root (`/sys` on the live machine).
    pub fn sys_root(&self) -> &Path {
        &self.sys_root
    }

    fn read_trimmed(&self, path: &Path) -> Option<String> {
        fs::read_to_string(path).ok().map(|s| s.trim().to_string())
    }

    pub fn host_info(&self) -> HostInfo {
        let kernel_dir = self.proc_root.join("sys/kernel");
        let cpus = self
            .read_trimmed(&self.sys_root.join("devices/system/cpu/possible"))
            .and_then(|s| count_cpu_list(&s))
            .unwrap_or(1);
        let numa_nodes = self
            .read_trimmed(&self.sys_root.join("devices/system/node/possible"))
            .and_then(|s| count_cpu_list(&s))
            .unwrap_or(1);
        HostInfo {
            host: self
                .read_trimmed(&kernel_dir.join("hostname"))
                .unwrap_or_default(),
            kernel: self
                .read_trimmed(&kernel_dir.join("osrelease"))
                .unwrap_or_default(),
            boot_id: self
                .read_trimmed(&kernel_dir.join("random/boot_id"))
                .unwrap_or_default(),
            cpus,
            numa_nodes,
        }
    }

    /// Every thread of every process, as `process` rows of event `scan`.
    /// Processes that exit while we look are skipped, not errors.
    pub fn scan_tasks(&self) -> Vec<ScannedTask> {
        let mut tasks = Vec::new();
        let Ok(entries) = fs::read_dir(&self.proc_root) else {
            return tasks;
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            let dir = entry.path();
            let Some(stat) = self.read_trimmed(&dir.join("stat")) else {
                continue;
            };
            let Some(ppid) = parse_stat_ppid(&stat) else {
                continue;
            };
            let cmdline = fs::read(dir.join("cmdline"))
                .ok()
                .and_then(|raw| join_argv(&raw, false));
            let Ok(threads) = fs::read_dir(dir.join("task")) else {
                continue;
            };
            for thread in threads.flatten() {
                let Some(tid) = thread
                    .file_name()
                    .to_str()
                    .and_then(|s| s.parse::<i32>().ok())
                else {
                    continue;
                };
                let Some(comm) = self.read_trimmed(&thread.path().join("comm")) else {
                    continue;
                };
                tasks.push(ScannedTask {
                    pid,
                    tid,
                    ppid,
                    comm,
                    cmdline: cmdline.clone(),
                });
            }
        }
        tasks.sort_by_key(|t| (t.pid, t.tid));
        tasks
    }
}

/// The CPUs of a kernel CPU list such as `0-3,8,10-11`; junk is ignored.
pub fn parse_cpu_list(list: &str) -> Vec<u32> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        let (first, last) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(first), Ok(last)) = (first.trim().parse::<u32>(), last.trim().parse::<u32>()) {
            cpus.extend(first..=last.min(first.saturating_add(65535)));
        }
    }
    cpus
}

/// Counts the CPUs (or nodes) in a kernel list like `0-3,8,10-11`.
pub fn count_cpu_list(list: &str) -> Option<u32> {
    let count = parse_cpu_list(list).len() as u32;
    (count > 0).then_some(count)
}

/// The ppid from `/proc/<pid>/stat`; the comm field may hold spaces and
/// parentheses, so fields are counted from the last `)`.
pub fn parse_stat_ppid(stat: &str) -> Option<i32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// `/proc/<pid>/stat` split into the comm (between the first `(` and the
/// last `)`, so it may hold spaces and parentheses) and the fields after it,
/// starting with the state letter.
pub fn split_stat(stat: &str) -> Option<(&str, &str)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    Some((stat.get(open + 1..close)?, &stat[close + 1..]))
}

/// Replaces `buf`'s contents with the file at `path`, keeping its capacity,
/// so a reader that calls this every round does not allocate.
pub fn read_into(path: &Path, buf: &mut Vec<u8>) -> io::Result<()> {
    pread_all(&fs::File::open(path)?, buf)
}

/// Reads the whole file from offset 0 into `buf`, reusing its capacity.
/// procfs and sysfs regenerate the text on a read at 0, so a kept-open file
/// re-reads fresh values. Unlike `read_to_end` this costs no `statx` and
/// `lseek` per file (procfs sizes are 0 anyway), which were a third of a
/// task snapshot's system calls.
pub fn pread_all(file: &fs::File, buf: &mut Vec<u8>) -> io::Result<()> {
    buf.clear();
    loop {
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        let filled = buf.len();
        buf.resize(buf.capacity(), 0);
        let read = file.read_at(&mut buf[filled..], filled as u64);
        buf.truncate(filled + *read.as_ref().unwrap_or(&0));
        if read? == 0 {
            return Ok(());
        }
    }
}

/// USER_HZ, the unit of CPU times in `/proc` (`sysconf(_SC_CLK_TCK)`; 100
/// where it cannot be read).
pub fn clock_ticks_per_second() -> u32 {
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u32::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// The page size in bytes, the unit of `rss` in `/proc/<pid>/stat`
/// (`sysconf(_SC_PAGESIZE)`; 4096 where it cannot be read).
pub fn page_size() -> u32 {
    // SAFETY: sysconf only reads a configuration value.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u32::try_from(size).ok().filter(|&s| s > 0).unwrap_or(4096)
}

/// This process's resident memory in bytes (`/proc/self/statm`, the same
/// figure as VmRSS), or None where it cannot be read. The file is opened
/// once and read again from its start each time: the symbolizer reads it
/// ten times a second while it names frames, and opening and closing it
/// were more than half of each read.
pub fn self_resident_bytes() -> Option<u64> {
    static STATM: std::sync::OnceLock<Option<fs::File>> = std::sync::OnceLock::new();
    let statm = STATM
        .get_or_init(|| fs::File::open("/proc/self/statm").ok())
        .as_ref()?;
    // Seven numbers: at most 7 * 21 bytes.
    let mut text = [0u8; 160];
    let read = statm.read_at(&mut text, 0).ok()?;
    let resident = text[..read].split(u8::is_ascii_whitespace).nth(1)?;
    let pages: u64 = std::str::from_utf8(resident).ok()?.parse().ok()?;
    Some(pages * u64::from(page_size()))
}

/// NUL-separated argv as one line, arguments separated by spaces; `None`
/// when empty (kernel threads). `truncated` appends `...`.
pub fn join_argv(raw: &[u8], truncated: bool) -> Option<String> {
    let trimmed = match raw.iter().rposition(|&b| b != 0) {
        Some(last) => &raw[..=last],
        None => return None,
    };
    let mut line: String = String::from_utf8_lossy(trimmed).replace('\0', " ");
    if truncated {
        line.push_str("...");
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resident_bytes_are_read_afresh_from_the_file_kept_open() {
        let before = self_resident_bytes().expect("statm");
        // 256 MiB touched, resident from here on: more than the other
        // test threads could free meanwhile.
        let touched = vec![1u8; 256 << 20];
        let after = self_resident_bytes().expect("statm");
        assert!(
            after >= before + (192 << 20),
            "{before} then {after} bytes with 256 MiB more touched"
        );
        std::hint::black_box(&touched);
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn scans_processes_threads_and_kernel_threads_from_a_fixture_tree() {
        let root = tempfile::tempdir().unwrap();
        let proc_root = root.path().join("proc");
        write(&proc_root, "42/stat", "42 (my (odd) name) S 7 42 42 0 -1");
        write(&proc_root, "42/cmdline", "/usr/bin/app\0--flag\0value\0");
        write(&proc_root, "42/task/42/comm", "my (odd) name\n");
        write(&proc_root, "42/task/43/comm", "worker\n");
        write(&proc_root, "2/stat", "2 (kthreadd) S 0 0 0 0 -1");
        write(&proc_root, "2/cmdline", "");
        write(&proc_root, "2/task/2/comm", "kthreadd\n");
        write(&proc_root, "self/stat", "ignored");
        let tasks = Procfs::new(&proc_root, root.path().join("sys")).scan_tasks();
        let line = Some("/usr/bin/app --flag value".to_string());
        assert_eq!(
            tasks,
            vec![
                ScannedTask {
                    pid: 2,
                    tid: 2,
                    ppid: 0,
                    comm: "kthreadd".into(),
                    cmdline: None
                },
                ScannedTask {
                    pid: 42,
                    tid: 42,
                    ppid: 7,
                    comm: "my (odd) name".into(),
                    cmdline: line.clone()
                },
                ScannedTask {
                    pid: 42,
                    tid: 43,
                    ppid: 7,
                    comm: "worker".into(),
                    cmdline: line
                },
            ]
        );
    }

    #[test]
    fn host_info_reads_kernel_files() {
        let root = tempfile::tempdir().unwrap();
        let p = root.path().join("proc");
        let s = root.path().join("sys");
        write(&p, "sys/kernel/hostname", "db7\n");
        write(&p, "sys/kernel/osrelease", "6.18.0\n");
        write(&p, "sys/kernel/random/boot_id", "abc-123\n");
        write(&s, "devices/system/cpu/possible", "0-3,8\n");
        write(&s, "devices/system/node/possible", "0-1\n");
        let info = Procfs::new(p, s).host_info();
        assert_eq!(
            info,
            HostInfo {
                host: "db7".into(),
                kernel: "6.18.0".into(),
                boot_id: "abc-123".into(),
                cpus: 5,
                numa_nodes: 2
            }
        );
    }

    #[test]
    fn cpu_lists_parse_like_the_kernel_prints_them() {
        let cases: [(&str, &[u32]); 5] = [
            ("0-3\n", &[0, 1, 2, 3]),
            ("0,2,4-5", &[0, 2, 4, 5]),
            ("", &[]),
            ("\n", &[]),
            ("7,x,9-8", &[7]),
        ];
        for (list, want) in cases {
            assert_eq!(parse_cpu_list(list), want, "{list:?}");
        }
    }

    #[test]
    fn argv_joins_and_marks_truncation() {
        assert_eq!(join_argv(b"a\0b c\0", false).as_deref(), Some("a b c"));
        assert_eq!(join_argv(b"abc", true).as_deref(), Some("abc..."));
        assert_eq!(join_argv(b"\0\0", false), None);
    }
}
