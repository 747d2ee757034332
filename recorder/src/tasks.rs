//! Per-process snapshots for the `task_stat` table: atop's process list,
//! read from `/proc/<pid>/{stat,status,io,cgroup}` and
//! `/proc/<pid>/task/*/status`, without tracing anything.
//!
//! Every live process is included, kernel threads too. A process that exits
//! while it is being read is skipped, never an error: `stat` and the
//! context-switch counts must both be read for a row, while `io` (which
//! needs ptrace rights) and `cgroup` are null when unreadable. The file
//! buffers are kept across snapshots.

use std::{
    borrow::Cow,
    fs,
    path::{Path, PathBuf},
};

use crate::{
    procfs::{read_into, split_stat, Procfs},
    rows::{TaskStatRow, TaskStatRows},
};

/// Converts USER_HZ ticks (`/proc` CPU times and start times) to ns; the
/// one place this conversion happens.
pub fn ticks_to_ns(ticks: u64, clock_ticks_per_second: u32) -> i64 {
    let ns = u128::from(ticks) * 1_000_000_000 / u128::from(clock_ticks_per_second.max(1));
    i64::try_from(ns).unwrap_or(i64::MAX)
}

/// A boot-clock time in ns rounded down to USER_HZ ticks, as
/// `/proc/<pid>/stat` gives `starttime`: a process's final row then has the
/// same `start_time_ns` as its snapshots.
pub fn boot_ns_to_tick(boot_ns: u64, clock_ticks_per_second: u32) -> i64 {
    let hz = u128::from(clock_ticks_per_second.max(1));
    let ticks = u128::from(boot_ns) * hz / 1_000_000_000;
    ticks_to_ns(
        u64::try_from(ticks).unwrap_or(u64::MAX),
        clock_ticks_per_second,
    )
}

/// A process's CPU time, split into user and system the way /proc and
/// getrusage split it (the kernel's `cputime_adjust`): the exact run time
/// `runtime`, divided in the proportion of the tick-sampled `utime` and
/// `stime`, never below the split last reported (`prev`), so the figures
/// never go backwards. Returns `(utime, stime)` in ns.
pub fn split_cputime(utime: u64, stime: u64, runtime: u64, prev: (u64, u64)) -> (u64, u64) {
    let (prev_utime, prev_stime) = prev;
    if prev_utime.saturating_add(prev_stime) >= runtime {
        return prev;
    }
    let stime = if stime == 0 {
        0
    } else if utime == 0 {
        runtime
    } else {
        let scaled =
            u128::from(stime) * u128::from(runtime) / (u128::from(stime) + u128::from(utime));
        u64::try_from(scaled).unwrap_or(runtime)
    };
    let stime = stime.max(prev_stime);
    let utime = runtime - stime;
    if utime < prev_utime {
        (prev_utime, runtime - prev_utime)
    } else {
        (utime, stime)
    }
}

/// The fields of `/proc/<pid>/stat` a snapshot keeps, in their units.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcStat<'a> {
    pub comm: &'a str,
    pub state: &'a str,
    pub ppid: i32,
    pub minflt: i64,
    pub majflt: i64,
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    pub threads: i32,
    pub start_ticks: u64,
    pub vsize_bytes: i64,
    pub rss_pages: i64,
}

/// Parses `/proc/<pid>/stat` (see proc(5)); fields are counted from the
/// last `)`, as the comm may hold spaces and parentheses.
pub fn parse_stat(stat: &str) -> Option<ProcStat<'_>> {
    let (comm, rest) = split_stat(stat)?;
    // Fields after the comm, 0-based: 0 state, 1 ppid, 7 minflt, 9 majflt,
    // 11 utime, 12 stime, 17 num_threads, 19 starttime, 20 vsize, 21 rss.
    let mut fields = [""; 22];
    let mut count = 0;
    for (slot, field) in fields.iter_mut().zip(rest.split_ascii_whitespace()) {
        *slot = field;
        count += 1;
    }
    if count < fields.len() {
        return None;
    }
    Some(ProcStat {
        comm,
        state: fields[0],
        ppid: fields[1].parse().ok()?,
        minflt: fields[7].parse().ok()?,
        majflt: fields[9].parse().ok()?,
        utime_ticks: fields[11].parse().ok()?,
        stime_ticks: fields[12].parse().ok()?,
        threads: fields[17].parse().ok()?,
        start_ticks: fields[19].parse().ok()?,
        vsize_bytes: fields[20].parse().ok()?,
        rss_pages: fields[21].parse().ok()?,
    })
}

/// What a snapshot reads from a `status` file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatusFields {
    pub voluntary_switches: i64,
    pub involuntary_switches: i64,
    /// `VmHWM` in bytes; None for a kernel thread (no memory of its own).
    pub rss_peak_bytes: Option<i64>,
}

/// The switch counts (both needed) and the RSS high-water mark of a
/// `status` file.
pub fn parse_status(status: &[u8]) -> Option<StatusFields> {
    let (mut voluntary, mut involuntary, mut peak_kb) = (None, None, None);
    for line in status.split(|&b| b == b'\n') {
        if let Some(value) = line.strip_prefix(b"voluntary_ctxt_switches:") {
            voluntary = parse_number(value);
        } else if let Some(value) = line.strip_prefix(b"nonvoluntary_ctxt_switches:") {
            involuntary = parse_number(value);
        } else if let Some(value) = line.strip_prefix(b"VmHWM:") {
            peak_kb = value.strip_suffix(b"kB").and_then(parse_number);
        }
    }
    Some(StatusFields {
        voluntary_switches: voluntary?,
        involuntary_switches: involuntary?,
        rss_peak_bytes: peak_kb.map(|kb: i64| kb.saturating_mul(1024)),
    })
}

/// `(read_bytes, write_bytes)` from `/proc/<pid>/io`.
pub fn parse_io(io: &[u8]) -> Option<(i64, i64)> {
    let (mut read, mut write) = (None, None);
    for line in io.split(|&b| b == b'\n') {
        if let Some(value) = line.strip_prefix(b"read_bytes:") {
            read = parse_number(value);
        } else if let Some(value) = line.strip_prefix(b"write_bytes:") {
            write = parse_number(value);
        }
    }
    Some((read?, write?))
}

/// The cgroup v2 path, from the `0::<path>` line of `/proc/<pid>/cgroup`.
pub fn parse_cgroup(cgroup: &[u8]) -> Option<&str> {
    cgroup
        .split(|&b| b == b'\n')
        .find_map(|line| line.strip_prefix(b"0::"))
        .and_then(|path| std::str::from_utf8(path).ok())
}

fn parse_number(text: &[u8]) -> Option<i64> {
    std::str::from_utf8(text).ok()?.trim().parse().ok()
}

/// Takes [`TaskReader::snapshot`]s of every process below a `/proc` root.
#[derive(Debug)]
pub struct TaskReader {
    clock_ticks_per_second: u32,
    page_size: u32,
    paths: ProcPaths,
    stat: Vec<u8>,
    status: Vec<u8>,
    io: Vec<u8>,
    cgroup: Vec<u8>,
}

/// Builds `<proc root>/<pid>/...` paths in one retained buffer.
#[derive(Debug)]
struct ProcPaths {
    root: PathBuf,
    path: PathBuf,
}

impl ProcPaths {
    fn get(&mut self, dir: &Path, parts: &[&str]) -> &Path {
        self.path.as_mut_os_string().clear();
        self.path.push(&self.root);
        self.path.push(dir);
        for part in parts {
            self.path.push(part);
        }
        &self.path
    }
}

impl TaskReader {
    /// `clock_ticks_per_second` and `page_size` are the units of the
    /// recorded machine's `/proc` (see [`crate::procfs::clock_ticks_per_second`]
    /// and [`crate::procfs::page_size`]).
    pub fn new(procfs: &Procfs, clock_ticks_per_second: u32, page_size: u32) -> Self {
        TaskReader {
            clock_ticks_per_second,
            page_size,
            paths: ProcPaths {
                root: procfs.proc_root().to_path_buf(),
                path: PathBuf::new(),
            },
            stat: Vec::with_capacity(1024),
            status: Vec::with_capacity(4096),
            io: Vec::with_capacity(256),
            cgroup: Vec::with_capacity(256),
        }
    }

    /// Appends one row per live process, all stamped `ts_utc_ns`, and
    /// returns how many.
    pub fn snapshot(&mut self, ts_utc_ns: i64, rows: &mut TaskStatRows) -> usize {
        self.snapshot_timed(&|| ts_utc_ns, rows)
    }

    /// Like [`Self::snapshot`], but stamps each process with `clock()` read
    /// just before its files: a round over hundreds of processes takes long
    /// enough (tens of ms on a busy host) that one stamp for all would skew
    /// per-process rates by as much, where this keeps them to the tick.
    pub fn snapshot_timed(&mut self, clock: &dyn Fn() -> i64, rows: &mut TaskStatRows) -> usize {
        let Ok(entries) = fs::read_dir(&self.paths.root) else {
            return 0;
        };
        let mut count = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            if self.read_process(clock(), pid, Path::new(&name), rows) {
                count += 1;
            }
        }
        count
    }

    /// Reads one process and appends its row; false when it has gone.
    fn read_process(&mut self, ts: i64, pid: i32, dir: &Path, rows: &mut TaskStatRows) -> bool {
        let paths = &mut self.paths;
        if read_into(paths.get(dir, &["stat"]), &mut self.stat).is_err() {
            return false;
        }
        // comm is the only field that may not be UTF-8; borrowed when it is.
        let text: Cow<'_, str> = String::from_utf8_lossy(&self.stat);
        let Some(stat) = parse_stat(&text) else {
            return false;
        };
        let Some(status) = switches(paths, &mut self.status, dir, stat.threads) else {
            return false;
        };
        let io = read_into(paths.get(dir, &["io"]), &mut self.io)
            .ok()
            .and_then(|()| parse_io(&self.io));
        let cgroup = read_into(paths.get(dir, &["cgroup"]), &mut self.cgroup)
            .ok()
            .and_then(|()| parse_cgroup(&self.cgroup));
        let hz = self.clock_ticks_per_second;
        rows.push(TaskStatRow {
            ts,
            pid,
            comm: stat.comm,
            state: stat.state,
            utime_ns: ticks_to_ns(stat.utime_ticks, hz),
            stime_ns: ticks_to_ns(stat.stime_ticks, hz),
            minflt: stat.minflt,
            majflt: stat.majflt,
            rss_bytes: stat.rss_pages.saturating_mul(i64::from(self.page_size)),
            vsize_bytes: stat.vsize_bytes,
            threads: stat.threads,
            nvcsw: status.voluntary_switches,
            nivcsw: status.involuntary_switches,
            io,
            cgroup,
            ppid: stat.ppid,
            start_time_ns: ticks_to_ns(stat.start_ticks, hz),
            rss_peak_bytes: status.rss_peak_bytes,
        });
        true
    }
}

/// Context switches summed over a process's live threads
/// (`/proc/<pid>/status` only counts the leader's; a single-threaded process
/// needs no directory listing), and the RSS high-water mark of its memory
/// (every thread's status shows the same); None when the process has gone.
fn switches(
    paths: &mut ProcPaths,
    status: &mut Vec<u8>,
    dir: &Path,
    threads: i32,
) -> Option<StatusFields> {
    if threads == 1 {
        read_into(paths.get(dir, &["status"]), status).ok()?;
        return parse_status(status);
    }
    let mut sum: Option<StatusFields> = None;
    for thread in fs::read_dir(paths.get(dir, &["task"])).ok()?.flatten() {
        let tid = thread.file_name();
        let Some(tid) = tid.to_str() else {
            continue;
        };
        // A thread that exits meanwhile is left out of the sum.
        if read_into(paths.get(dir, &["task", tid, "status"]), status).is_err() {
            continue;
        }
        if let Some(thread) = parse_status(status) {
            let total = sum.get_or_insert_with(StatusFields::default);
            total.voluntary_switches += thread.voluntary_switches;
            total.involuntary_switches += thread.involuntary_switches;
            total.rss_peak_bytes = total.rss_peak_bytes.max(thread.rss_peak_bytes);
        }
    }
    sum
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use arrow::{
        array::{AsArray, RecordBatch},
        compute::{sort_to_indices, take_record_batch},
        datatypes::{Int32Type, Int64Type, TimestampNanosecondType},
        util::pretty::pretty_format_batches,
    };

    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    fn status(voluntary: i64, involuntary: i64, peak_kb: Option<i64>) -> String {
        let peak = peak_kb.map_or(String::new(), |kb| format!("VmHWM:\t{kb:>8} kB\n"));
        format!(
            "Name:\tx\nState:\tS (sleeping)\nThreads:\t1\n{peak}\
             voluntary_ctxt_switches:\t{voluntary}\nnonvoluntary_ctxt_switches:\t{involuntary}\n"
        )
    }

    /// The batch as a table without `ts` (checked apart), sorted by pid (a
    /// fixture directory lists in any order).
    fn table(batch: &RecordBatch) -> Vec<String> {
        let stamps = batch.column(0).as_primitive::<TimestampNanosecondType>();
        assert!(stamps.iter().all(|ts| ts == Some(1_000)), "{stamps:?}");
        let order = sort_to_indices(batch.column(1), None, None).unwrap();
        let sorted = take_record_batch(batch, &order).unwrap();
        let sorted = sorted
            .project(&(1..sorted.num_columns()).collect::<Vec<_>>())
            .unwrap();
        pretty_format_batches(&[sorted])
            .unwrap()
            .to_string()
            .lines()
            .map(String::from)
            .collect()
    }

    #[test]
    fn snapshots_processes_of_a_fixture_tree() {
        let root = tempfile::tempdir().unwrap();
        let p = root.path().join("proc");
        // Two threads, comm with spaces and parentheses, io and cgroup v1 + v2.
        write(
            &p,
            "42/stat",
            "42 (my (odd) name) S 7 42 42 0 -1 4194304 1000 5 3 0 150 25 0 0 20 0 2 0 12345 8192000 10 \
             18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n",
        );
        write(&p, "42/status", &status(1, 2, Some(120)));
        write(&p, "42/task/42/status", &status(1, 2, Some(120)));
        write(&p, "42/task/43/status", &status(10, 20, Some(120)));
        write(
            &p,
            "42/io",
            "rchar: 9\nwchar: 9\nsyscr: 1\nsyscw: 1\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 7\n",
        );
        write(
            &p,
            "42/cgroup",
            "4:memory:/old\n0::/system.slice/app.service\n",
        );
        // No io (unreadable) and no cgroup v2 line; a `)` inside the comm.
        write(
            &p,
            "7/stat",
            "7 (worker) x) R 1 7 7 0 -1 0 11 0 0 0 3 4 0 0 20 0 1 0 99 0 0 18446744073709551615\n",
        );
        write(&p, "7/status", &status(5, 6, None));
        write(&p, "7/task/7/status", &status(5, 6, None));
        write(&p, "7/cgroup", "4:memory:/old\n");
        // Gone between listing and reading: a stat but no status.
        write(
            &p,
            "9/stat",
            "9 (gone) Z 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0 0\n",
        );
        write(&p, "self/stat", "ignored");
        let mut reader = TaskReader::new(&Procfs::new(&p, root.path().join("sys")), 100, 4096);
        let mut rows = TaskStatRows::new();
        assert_eq!(reader.snapshot(1_000, &mut rows), 2);
        let expected = [
            "+-----+---------------+-------+------------+-----------+--------+--------+-----------+-------------+---------+-------+--------+------------+-------------+---------------------------+------+---------------+----------------+",
            "| pid | comm          | state | utime_ns   | stime_ns  | minflt | majflt | rss_bytes | vsize_bytes | threads | nvcsw | nivcsw | read_bytes | write_bytes | cgroup                    | ppid | start_time_ns | rss_peak_bytes |",
            "+-----+---------------+-------+------------+-----------+--------+--------+-----------+-------------+---------+-------+--------+------------+-------------+---------------------------+------+---------------+----------------+",
            "| 7   | worker) x     | R     | 30000000   | 40000000  | 11     | 0      | 0         | 0           | 1       | 5     | 6      |            |             |                           | 1    | 990000000     |                |",
            "| 42  | my (odd) name | S     | 1500000000 | 250000000 | 1000   | 3      | 40960     | 8192000     | 2       | 11    | 22     | 4096       | 8192        | /system.slice/app.service | 7    | 123450000000  | 122880         |",
            "+-----+---------------+-------+------------+-----------+--------+--------+-----------+-------------+---------+-------+--------+------------+-------------+---------------------------+------+---------------+----------------+",
        ];
        assert_eq!(table(&rows.finish()), expected);
        // The buffers are reused: a second snapshot gives the same rows.
        assert_eq!(reader.snapshot(1_000, &mut rows), 2);
        assert_eq!(table(&rows.finish()), expected);
    }

    #[test]
    fn ticks_convert_to_ns() {
        for (ticks, hz, ns) in [
            (0, 100, 0),
            (1, 100, 10_000_000),
            (150, 100, 1_500_000_000),
            (3, 300, 10_000_000),
            (1, 300, 3_333_333),
            (7, 1000, 7_000_000),
            (u64::MAX, 1, i64::MAX),
        ] {
            assert_eq!(ticks_to_ns(ticks, hz), ns, "{ticks} ticks at {hz} Hz");
        }
    }

    #[test]
    fn cpu_time_splits_like_the_kernels_cputime_adjust() {
        for (utime, stime, runtime, prev, split) in [
            // In proportion of the ticks, all of the exact run time.
            (3, 1, 1_000, (0, 0), (750, 250)),
            (0, 5, 1_000, (0, 0), (0, 1_000)),
            (5, 0, 1_000, (0, 0), (1_000, 0)),
            (0, 0, 1_000, (0, 0), (1_000, 0)),
            // Never below what was reported before...
            (1, 1, 1_000, (100, 600), (400, 600)),
            (1, 3, 1_000, (500, 100), (500, 500)),
            // ...and when the run time has not grown past it, that split stays.
            (1, 1, 1_000, (700, 300), (700, 300)),
            (1, 1, 1_000, (800, 300), (800, 300)),
        ] {
            assert_eq!(
                split_cputime(utime, stime, runtime, prev),
                split,
                "utime {utime} stime {stime} runtime {runtime} prev {prev:?}"
            );
        }
    }

    #[test]
    fn boot_times_round_down_to_the_tick() {
        assert_eq!(boot_ns_to_tick(123_456_789_012, 100), 123_450_000_000);
        assert_eq!(boot_ns_to_tick(9_999_999, 100), 0);
        assert_eq!(boot_ns_to_tick(10_000_000, 100), 10_000_000);
    }

    #[test]
    fn parses_the_files_pieces() {
        assert_eq!(parse_stat("1 (x) S 0 1"), None, "too few fields");
        assert_eq!(parse_io(b"read_bytes: 1\n"), None);
        assert_eq!(parse_cgroup(b"0::/\n"), Some("/"));
        assert_eq!(parse_cgroup(b"1:cpu:/a\n"), None);
        assert_eq!(
            parse_status(&status(3, 4, Some(2)).into_bytes()),
            Some(StatusFields {
                voluntary_switches: 3,
                involuntary_switches: 4,
                rss_peak_bytes: Some(2048),
            })
        );
        assert_eq!(
            parse_status(b"VmHWM:\t 1 kB\nvoluntary_ctxt_switches:\t1\n"),
            None
        );
    }

    #[test]
    fn snapshots_the_live_machine() {
        let hz = crate::procfs::clock_ticks_per_second();
        // Burn CPU until the kernel has charged this process at least a tick.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut spin = 0u64;
        while Instant::now() < deadline {
            for i in 0..100_000 {
                spin = std::hint::black_box(spin.wrapping_mul(31).wrapping_add(i));
            }
            let stat = fs::read_to_string("/proc/self/stat").unwrap();
            let stat = parse_stat(&stat).unwrap();
            if stat.utime_ticks + stat.stime_ticks > 0 {
                break;
            }
        }
        let mut reader = TaskReader::new(&Procfs::default(), hz, crate::procfs::page_size());
        let mut rows = TaskStatRows::new();
        let rounds = 5;
        let start = Instant::now();
        let mut count = 0;
        for round in 0..rounds {
            count = reader.snapshot(round, &mut rows);
        }
        eprintln!(
            "tasks: {count} rows per snapshot, {:?} per snapshot",
            start.elapsed() / rounds as u32
        );
        let batch = rows.finish();
        let pids = batch.column(1).as_primitive::<Int32Type>();
        let own = i32::try_from(std::process::id()).unwrap();
        let row = (0..batch.num_rows())
            .rev()
            .find(|&r| pids.value(r) == own)
            .expect("own pid in the snapshot");
        let int64 = |column: usize| batch.column(column).as_primitive::<Int64Type>().value(row);
        let int32 = |column: usize| batch.column(column).as_primitive::<Int32Type>().value(row);
        assert!(int64(4) + int64(5) > 0, "utime + stime");
        assert!(
            int64(4) + int64(5) < 3_600 * 1_000_000_000,
            "under an hour of CPU"
        );
        assert!(int64(6) > 0, "minflt");
        assert!(int64(8) > 0 && int64(8) < int64(9), "rss within vsize");
        assert!(int32(10) >= 1, "threads");
        assert!(int64(11) + int64(12) > 0, "context switches");
        assert_eq!(
            int32(16),
            std::os::unix::process::parent_id() as i32,
            "ppid"
        );
        assert!(int64(17) > 0, "start time");
        assert!(int64(18) >= int64(8), "the RSS peak is at least the RSS");
        assert!(!batch.column(13).is_null(row), "root reads its own io");
    }
}
