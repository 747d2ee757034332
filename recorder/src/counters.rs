//! System counters for the `counter` table: one round reads `/proc/vmstat`,
//! `/proc/stat`, `/proc/meminfo`, `/proc/pressure/*` and each NUMA node's
//! `vmstat` and `numastat`, and appends one row per value, raw and
//! cumulative, exactly as the kernel printed it.
//!
//! A round runs every `--interval` for days, so it is cheap: every file is
//! opened once and re-read from offset 0 with `pread` (procfs and sysfs
//! regenerate the text on a read at 0) into one retained buffer, lines are
//! parsed in place, and the only copies are the dictionary builders' own.
//! The NUMA nodes are listed once, at construction.

use std::{
    fs::File,
    path::{Path, PathBuf},
};

use crate::{
    procfs::{pread_all, Procfs},
    rows::CounterRows,
};

/// The column names of a `cpu` line of `/proc/stat`, in the kernel's order.
const CPU_FIELDS: [&str; 10] = [
    "user",
    "nice",
    "system",
    "idle",
    "iowait",
    "irq",
    "softirq",
    "steal",
    "guest",
    "guest_nice",
];

/// `/proc/stat` lines kept whole, as `name = key`.
const STAT_SCALARS: [&str; 4] = ["ctxt", "processes", "procs_running", "procs_blocked"];

/// `/proc/stat` lines of which only the first number (the total) is kept,
/// and the name it is kept under: the `softirq` line's total becomes
/// `softirqs`, since `softirq` already names the CPU-time field of the `cpu` line.
const STAT_TOTALS: [(&str, &str); 2] = [("intr", "intr"), ("softirq", "softirqs")];

/// The PSI resources and their row names: (file, `some` name, `full` name).
const PRESSURE: [(&str, &str, &str); 3] = [
    ("cpu", "cpu_some_total", "cpu_full_total"),
    ("memory", "memory_some_total", "memory_full_total"),
    ("io", "io_some_total", "io_full_total"),
];

/// A kernel text file kept open and re-read from the start each round.
#[derive(Debug)]
struct KernelFile {
    path: PathBuf,
    file: Option<File>,
}

impl KernelFile {
    fn new(path: PathBuf) -> Self {
        KernelFile { path, file: None }
    }

    /// Fills `buf` with the file's current text; false when it cannot be
    /// read (absent, as `/proc/pressure` without PSI). It is opened again
    /// next round after a failure.
    fn read(&mut self, buf: &mut Vec<u8>) -> bool {
        if self.file.is_none() {
            self.file = File::open(&self.path).ok();
        }
        let Some(file) = &self.file else {
            return false;
        };
        match pread_all(file, buf) {
            Ok(()) => true,
            Err(_) => {
                self.file = None;
                false
            }
        }
    }
}

/// A NUMA node's two files, with its scope (`node0`).
#[derive(Debug)]
struct Node {
    scope: String,
    vmstat: KernelFile,
    numastat: KernelFile,
}

/// Reads every counter source once per [`CounterReader::read_round`].
#[derive(Debug)]
pub struct CounterReader {
    vmstat: KernelFile,
    stat: KernelFile,
    meminfo: KernelFile,
    pressure: [KernelFile; 3],
    nodes: Vec<Node>,
    buf: Vec<u8>,
}

impl CounterReader {
    /// Lists the NUMA nodes under the `/sys` root; the files are opened on
    /// the first round.
    pub fn new(procfs: &Procfs) -> Self {
        let proc_root = procfs.proc_root();
        CounterReader {
            vmstat: KernelFile::new(proc_root.join("vmstat")),
            stat: KernelFile::new(proc_root.join("stat")),
            meminfo: KernelFile::new(proc_root.join("meminfo")),
            pressure: PRESSURE
                .map(|(file, _, _)| KernelFile::new(proc_root.join("pressure").join(file))),
            nodes: list_nodes(&procfs.sys_root().join("devices/system/node")),
            buf: Vec::with_capacity(16 * 1024),
        }
    }

    /// Appends one row per value of every source, all stamped `ts_utc_ns`,
    /// and returns how many. A source that cannot be read is skipped.
    pub fn read_round(&mut self, ts_utc_ns: i64, rows: &mut CounterRows) -> usize {
        let before = rows.len();
        let buf = &mut self.buf;
        if self.vmstat.read(buf) {
            push_key_values(rows, ts_utc_ns, "vmstat", None, buf);
        }
        if self.stat.read(buf) {
            push_stat(rows, ts_utc_ns, buf);
        }
        if self.meminfo.read(buf) {
            push_key_values(rows, ts_utc_ns, "meminfo", None, buf);
        }
        for (file, (_, some, full)) in self.pressure.iter_mut().zip(PRESSURE) {
            if file.read(buf) {
                push_pressure(rows, ts_utc_ns, some, full, buf);
            }
        }
        for node in &mut self.nodes {
            let scope = Some(node.scope.as_str());
            if node.vmstat.read(buf) {
                push_key_values(rows, ts_utc_ns, "node_vmstat", scope, buf);
            }
            if node.numastat.read(buf) {
                push_key_values(rows, ts_utc_ns, "numastat", scope, buf);
            }
        }
        rows.len() - before
    }
}

/// `nodeN` directories in node order.
fn list_nodes(dir: &Path) -> Vec<Node> {
    let mut numbers: Vec<u32> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            entry
                .file_name()
                .to_str()?
                .strip_prefix("node")?
                .parse()
                .ok()
        })
        .collect();
    numbers.sort_unstable();
    numbers
        .into_iter()
        .map(|n| {
            let scope = format!("node{n}");
            let node_dir = dir.join(&scope);
            Node {
                vmstat: KernelFile::new(node_dir.join("vmstat")),
                numastat: KernelFile::new(node_dir.join("numastat")),
                scope,
            }
        })
        .collect()
}

/// Lines of a file as whitespace-separated fields, without allocating;
/// lines that are not UTF-8 are skipped.
fn lines(buf: &[u8]) -> impl Iterator<Item = std::str::SplitAsciiWhitespace<'_>> {
    buf.split(|&b| b == b'\n')
        .filter_map(|line| std::str::from_utf8(line).ok())
        .map(str::split_ascii_whitespace)
}

/// A kernel number: signed, or unsigned past `i64::MAX`, stored wrapped
/// (an `unsigned long` holding a negative drift reads back as negative).
fn parse_value(text: &str) -> Option<i64> {
    text.parse::<i64>()
        .ok()
        .or_else(|| text.parse::<u64>().ok().map(|v| v as i64))
}

/// `key value` lines (`vmstat`, `numastat`) and `Key: value kB` lines
/// (`meminfo`): the name is the key without its colon.
fn push_key_values(rows: &mut CounterRows, ts: i64, source: &str, scope: Option<&str>, buf: &[u8]) {
    for mut fields in lines(buf) {
        let (Some(key), Some(value)) = (fields.next(), fields.next()) else {
            continue;
        };
        let key = key.strip_suffix(':').unwrap_or(key);
        if let Some(value) = parse_value(value) {
            rows.push(ts, source, key, scope, value);
        }
    }
}

/// `/proc/stat`: CPU times per CPU and in total, the scalar lines, and the
/// totals of `intr` and `softirq`; `btime` and the rest are not counters.
fn push_stat(rows: &mut CounterRows, ts: i64, buf: &[u8]) {
    for mut fields in lines(buf) {
        let Some(key) = fields.next() else {
            continue;
        };
        if let Some(cpu) = key.strip_prefix("cpu") {
            let scope = (!cpu.is_empty()).then_some(key);
            for (name, value) in CPU_FIELDS.iter().zip(fields) {
                if let Some(value) = parse_value(value) {
                    rows.push(ts, "stat", name, scope, value);
                }
            }
        } else if STAT_SCALARS.contains(&key) {
            if let Some(value) = fields.next().and_then(parse_value) {
                rows.push(ts, "stat", key, None, value);
            }
        } else if let Some((_, name)) = STAT_TOTALS.iter().find(|(k, _)| *k == key) {
            if let Some(value) = fields.next().and_then(parse_value) {
                rows.push(ts, "stat", name, None, value);
            }
        }
    }
}

/// A PSI file: `some avg10=.. avg60=.. avg300=.. total=N` and the same for
/// `full`; only the totals (microseconds) are kept.
fn push_pressure(rows: &mut CounterRows, ts: i64, some: &str, full: &str, buf: &[u8]) {
    for mut fields in lines(buf) {
        let name = match fields.next() {
            Some("some") => some,
            Some("full") => full,
            _ => continue,
        };
        let total = fields.find_map(|field| field.strip_prefix("total="));
        if let Some(value) = total.and_then(parse_value) {
            rows.push(ts, "pressure", name, None, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{fs, time::Instant};

    use arrow::{
        array::{Array, AsArray},
        datatypes::{DataType, Int64Type},
        record_batch::RecordBatch,
    };

    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    /// (source, name, scope, value) of every row, in order.
    fn rows_of(batch: &RecordBatch) -> Vec<(String, String, Option<String>, i64)> {
        let text = |i: usize| arrow::compute::cast(batch.column(i), &DataType::Utf8).unwrap();
        let (source, name, scope) = (text(1), text(2), text(3));
        let (source, name, scope) = (
            source.as_string::<i32>(),
            name.as_string::<i32>(),
            scope.as_string::<i32>(),
        );
        let values = batch.column(4).as_primitive::<Int64Type>();
        (0..batch.num_rows())
            .map(|row| {
                (
                    source.value(row).to_string(),
                    name.value(row).to_string(),
                    scope.is_valid(row).then(|| scope.value(row).to_string()),
                    values.value(row),
                )
            })
            .collect()
    }

    fn round(procfs: &Procfs) -> Vec<(String, String, Option<String>, i64)> {
        let mut rows = CounterRows::new();
        let count = CounterReader::new(procfs).read_round(7, &mut rows);
        let batch = rows.finish();
        assert_eq!(count, batch.num_rows());
        rows_of(&batch)
    }

    fn expected(
        cases: &[(&str, &str, Option<&str>, i64)],
    ) -> Vec<(String, String, Option<String>, i64)> {
        cases
            .iter()
            .map(|&(source, name, scope, value)| {
                (source.into(), name.into(), scope.map(Into::into), value)
            })
            .collect()
    }

    #[test]
    fn reads_every_source_of_a_fixture_tree() {
        let root = tempfile::tempdir().unwrap();
        let p = root.path().join("proc");
        let s = root.path().join("sys");
        write(
            &p,
            "vmstat",
            "nr_free_pages 893825\npgfault 1234\nnr_drift 18446744073709551615\n",
        );
        write(
            &p,
            "stat",
            "cpu  375 0 24 79 7 0 1 6 0 0\n\
             cpu0 178 0 12 49 4 0 0 3 0 0\n\
             cpu1 197 1 12 30 2 0 1 3 0 0\n\
             intr 1937995 0 0 14 481\n\
             ctxt 3788908\n\
             btime 1796024167\n\
             processes 30867\n\
             procs_running 5\n\
             procs_blocked 1\n\
             softirq 454924 0 84388 4\n",
        );
        write(
            &p,
            "meminfo",
            "MemTotal:       16314916 kB\nActive(anon):     123 kB\nHugePages_Total:       2\n",
        );
        write(
            &p,
            "pressure/cpu",
            "some avg10=11.01 avg60=11.70 avg300=7.49 total=210515486\n\
             full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        );
        write(
            &p,
            "pressure/io",
            "some avg10=0.07 avg60=0.18 avg300=0.06 total=8420539\n",
        );
        write(&s, "devices/system/node/node0/vmstat", "nr_free_pages 10\n");
        write(
            &s,
            "devices/system/node/node0/numastat",
            "numa_hit 56\nnuma_miss 0\n",
        );
        write(
            &s,
            "devices/system/node/node10/vmstat",
            "nr_free_pages 30\n",
        );
        write(&s, "devices/system/node/node10/numastat", "numa_hit 57\n");
        write(&s, "devices/system/node/node2/vmstat", "nr_free_pages 20\n");
        write(&s, "devices/system/node/possible", "0-10\n");
        let cpu = |scope: Option<&'static str>, values: [i64; 10]| {
            CPU_FIELDS
                .iter()
                .zip(values)
                .map(move |(&name, v)| ("stat", name, scope, v))
        };
        let mut cases = vec![
            ("vmstat", "nr_free_pages", None, 893825),
            ("vmstat", "pgfault", None, 1234),
            ("vmstat", "nr_drift", None, -1),
        ];
        cases.extend(cpu(None, [375, 0, 24, 79, 7, 0, 1, 6, 0, 0]));
        cases.extend(cpu(Some("cpu0"), [178, 0, 12, 49, 4, 0, 0, 3, 0, 0]));
        cases.extend(cpu(Some("cpu1"), [197, 1, 12, 30, 2, 0, 1, 3, 0, 0]));
        cases.extend([
            ("stat", "intr", None, 1937995),
            ("stat", "ctxt", None, 3788908),
            ("stat", "processes", None, 30867),
            ("stat", "procs_running", None, 5),
            ("stat", "procs_blocked", None, 1),
            ("stat", "softirqs", None, 454924),
            ("meminfo", "MemTotal", None, 16314916),
            ("meminfo", "Active(anon)", None, 123),
            ("meminfo", "HugePages_Total", None, 2),
            ("pressure", "cpu_some_total", None, 210515486),
            ("pressure", "cpu_full_total", None, 0),
            ("pressure", "io_some_total", None, 8420539),
            ("node_vmstat", "nr_free_pages", Some("node0"), 10),
            ("numastat", "numa_hit", Some("node0"), 56),
            ("numastat", "numa_miss", Some("node0"), 0),
            ("node_vmstat", "nr_free_pages", Some("node2"), 20),
            ("node_vmstat", "nr_free_pages", Some("node10"), 30),
            ("numastat", "numa_hit", Some("node10"), 57),
        ]);
        assert_eq!(round(&Procfs::new(&p, &s)), expected(&cases));
    }

    #[test]
    fn missing_sources_are_skipped() {
        let root = tempfile::tempdir().unwrap();
        let p = root.path().join("proc");
        write(&p, "vmstat", "pgfault 1\n");
        write(&p, "meminfo", "MemFree: 5 kB\n");
        assert_eq!(
            round(&Procfs::new(&p, root.path().join("sys"))),
            expected(&[
                ("vmstat", "pgfault", None, 1),
                ("meminfo", "MemFree", None, 5)
            ])
        );
    }

    #[test]
    fn rereads_a_file_that_changed_between_rounds() {
        let root = tempfile::tempdir().unwrap();
        let p = root.path().join("proc");
        write(&p, "vmstat", "pgfault 1\n");
        let mut reader = CounterReader::new(&Procfs::new(&p, root.path().join("sys")));
        let mut rows = CounterRows::new();
        reader.read_round(1, &mut rows);
        write(&p, "vmstat", "pgfault 22\n");
        reader.read_round(2, &mut rows);
        let values: Vec<i64> = rows_of(&rows.finish()).into_iter().map(|r| r.3).collect();
        assert_eq!(values, [1, 22]);
    }

    #[test]
    fn reads_the_live_machine() {
        let mut reader = CounterReader::new(&Procfs::default());
        let mut rows = CounterRows::new();
        let rounds = 50;
        let start = Instant::now();
        for round in 0..rounds {
            reader.read_round(round, &mut rows);
        }
        let per_round = start.elapsed() / rounds as u32;
        let all = rows_of(&rows.finish());
        eprintln!(
            "counters: {} rows per round, {per_round:?} per round",
            all.len() / rounds as usize
        );
        let has = |source: &str, name: &str, scope: Option<&str>| {
            all.iter()
                .any(|r| r.0 == source && r.1 == name && r.2.as_deref() == scope)
        };
        assert!(has("vmstat", "pgfault", None));
        assert!(has("stat", "user", Some("cpu0")));
        assert!(has("stat", "idle", None));
        assert!(has("meminfo", "MemFree", None));
        let ctxt: Vec<i64> = all.iter().filter(|r| r.1 == "ctxt").map(|r| r.3).collect();
        assert_eq!(ctxt.len(), rounds as usize);
        assert!(ctxt.windows(2).all(|w| w[0] <= w[1]), "{ctxt:?}");
        assert!(
            ctxt[0] < ctxt[ctxt.len() - 1],
            "re-reading an open file sees new values"
        );
    }
}
