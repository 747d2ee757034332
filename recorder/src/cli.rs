//! Command-line flags, in two layers: [`Args`] only parses (clap), and
//! [`Args::resolve`] turns it into the [`Config`] the recorder runs on.

use std::{path::PathBuf, time::Duration};

use clap::Parser;
use thiserror::Error;

use crate::retention::{default_max_size, Limits};

/// A flag value that parses but cannot be used; exits with the usage code.
#[derive(Debug, Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Event groups `--events` accepts, with whether they run by default.
pub const EVENT_GROUPS: &[(&str, bool, &str)] = &[
    ("sched", true, "context switches, wakeups, fork/exec/exit (tables sched_switch, sched_wakeup, process)"),
    ("counters", true, "/proc/vmstat, /proc/stat, meminfo, PSI, per-node NUMA counters every --interval (table counter)"),
    ("tasks", true, "every process's CPU time, faults, switches, RSS, I/O every --task-interval, and its final counters when it ends (table task_stat)"),
    ("numa", true, "NUMA task moves and page migrations (table numa_event)"),
    ("cache", true, "page-cache accesses, misses and dirtied pages per process every --interval (table page_cache)"),
    ("cpu", true, "CPU samples with kernel and user stacks at --frequency Hz on every CPU (tables cpu_sample, stack, frame)"),
    ("faults", false, "every page fault, or one in --fault-sample (table page_fault); costly on fault-heavy hosts"),
];

const AFTER_HELP: &str = "\
Examples:
  hindsight-record --output /var/lib/hindsight/rec --duration 30s
  hindsight-record -o rec --events sched --chunk 10s      # until Ctrl-C

After a crash (kill -9, power loss), the open chunk's journal becomes an
ordinary chunk at the next start in the same directory, or now with:
  hindsight-record recover /var/lib/hindsight/rec

Then ask the recording what happened, as any user (also while it records):
  hindsight sql rec 'SELECT prev_comm, count(*) FROM sched_switch GROUP BY 1 ORDER BY 2 DESC LIMIT 10'

Leave it running (oldest files deleted first to stay under 2 GiB and 7 days;
dist/hindsight-record.service runs it as a service):
  hindsight-record -o /var/lib/hindsight/rec --max-size 2G --max-age 7d

Memory is bounded whatever the event rate: rows are buffered in batches of 16K
per table and row groups of 32K; the symbolizer lets go of the binaries it
names once they hold 12 MiB, names a binary with over 4 MiB of DWARF from
its symbol table alone, and one whose symbol table is 1 MiB or more from an
index of its functions; the unwinder maps at most 20 MiB of call frame
information; when the disk or encoder falls behind, the kernel
drops events and counts them per CPU in the loss table. Measured at the
defaults (BENCHMARKS.md): 48 MiB RSS at the peak of a context-switch storm;
47 MiB median and 55 MiB at the peak of a 30-minute mixed workload whose
binaries the CPU sampler had to name; 41.5-42.5 MiB through a Rust build.
Bound: 64 MiB, except beside a Rust project's debug test suite (74.8 MiB at
the peak beside this project's own, over 64 MiB in 50 of 2,440 half-second
samples; see BENCHMARKS.md).
A larger --ring-size costs twice its size for each of the sched and faults
rings, and a quarter of it for the sampler's (an eighth of it, at least 1 MiB):
every ring is mapped twice over.

The thread that drains the rings takes nice -10 (root or CAP_SYS_NICE; without,
it warns): it costs about 0.1 µs an event, and kept waiting for a CPU it would
let a ring fill. The rest keeps the nice it was started with.

One recorder per directory: a second one on the same DIR is refused (exit 2).

Exit codes: 0 recorded and every file is complete; 1 failed while recording
(files closed so far stay readable); 2 bad invocation or an output directory
that is not a recording; 3 missing privileges or kernel support (root or
CAP_BPF+CAP_PERFMON, BTF at /sys/kernel/btf/vmlinux).";

/// Record what the kernel does to a directory of Parquet files.
///
/// hindsight-record attaches BPF programs to kernel tracepoints (scheduler,
/// NUMA, page cache, page faults), reads system and per-process counters
/// from /proc, and writes it all to zstd Parquet, one folder a table,
/// rolling files every --chunk. It needs root (or CAP_BPF and CAP_PERFMON);
/// --events counters,tasks alone records /proc without them, and says what it misses.
/// It stops at the end of --duration or on SIGINT/SIGTERM, and every file it
/// leaves is complete. SIGHUP closes the current files and starts new ones.
///
/// Crash safety: the chunk being written is journaled (Arrow IPC, next to
/// it as a hidden .journal file); a kill -9 loses at most the last --flush,
/// a host crash at most the last --fsync. A full disk pauses recording (the
/// rows not written are counted in the loss table as disk_full:<table>,
/// and logged once a minute) until there is room again.
#[derive(Debug, Parser)]
#[command(
    name = "hindsight-record",
    version,
    after_help = AFTER_HELP,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Recording directory: created if missing; an existing recording is appended to.
    #[arg(
        short,
        long,
        value_name = "DIR",
        required_unless_present = "list_events"
    )]
    pub output: Option<PathBuf>,

    /// Stop after this long (e.g. 30s, 10m, 2h); without it, record until SIGINT/SIGTERM.
    #[arg(short, long, value_name = "TIME", value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Comma-separated event groups to record [default: every always-on group; see --list-events].
    #[arg(short, long, value_name = "LIST", value_delimiter = ',')]
    pub events: Vec<String>,

    /// Close a file of every table and start the next this often.
    #[arg(long, value_name = "TIME", default_value = "60s", value_parser = parse_duration)]
    pub chunk: Duration,

    /// Read system counters (and page-cache totals) this often.
    #[arg(long, value_name = "TIME", default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,

    /// Snapshot every process from /proc this often.
    #[arg(long, value_name = "TIME", default_value = "10s", value_parser = parse_duration)]
    pub task_interval: Duration,

    /// With --events faults: record one page fault in N per CPU (1 records every fault;
    /// each recorded fault adds about 0.30 µs to the fault, perf record 0.89 µs, and 4.0 B
    /// on disk; BENCHMARKS.md).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub fault_sample: u32,

    /// With --events cpu: samples per second of CPU time, on every CPU (1-10000;
    /// each sample costs the recorder 5.5 µs of CPU to unwind, 3.0 µs with --unwind fp,
    /// BENCHMARKS.md).
    #[arg(long, value_name = "HZ", default_value_t = 49, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub frequency: u32,

    /// How user stacks (of CPU samples, and of --off-cpu-stacks) are walked. `dwarf`
    /// (the default) copies the top of the user stack with each one and unwinds it in
    /// the recorder by the modules' .eh_frame, so code built without frame pointers
    /// (most of Debian, libc included) keeps its callers; `fp` follows frame pointers
    /// only, as `perf record -g` does.
    #[arg(long, value_name = "HOW", default_value = "dwarf", value_parser = ["dwarf", "fp"])]
    pub unwind: String,

    /// With --events sched: record the stack of every thread leaving a CPU
    /// (sched_switch.stack_id), for off-CPU flame graphs. Off by default: on a
    /// switch storm, a stack on every switch added 4.76 µs to the switch and 5.52 µs
    /// of recorder CPU per event (4.00 µs and 1.86 µs with --unwind fp, perf -g 3.98 µs;
    /// BENCHMARKS.md).
    #[arg(long)]
    pub off_cpu_stacks: bool,

    /// Size of the BPF ring buffers between kernel and recorder (a power of two; e.g. 8M):
    /// the sched and faults groups' size each, split between rings of one CPU each (or
    /// of a few CPUs, where each CPU cannot have 256K); the sampler's ring is an eighth
    /// of it (at least 1 MiB). Their pages are resident twice over; larger rings ride out
    /// longer bursts without drops, at twice their size in memory.
    #[arg(long, value_name = "BYTES", default_value = "4M", value_parser = parse_size)]
    pub ring_size: u64,

    /// Disk budget: after every chunk (and at every flush), the oldest closed files are
    /// deleted until they, plus room for the open chunk and its journal, fit; disk use
    /// stays under SIZE plus at most one chunk
    /// [default: 2G, capped to a tenth of the output's filesystem; at the 4.46 GB/day a
    /// busy 2-CPU host recorded with the defaults (BENCHMARKS.md) that is half a day,
    /// and weeks on a quiet host].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_size: Option<u64>,

    /// Delete closed files that started longer ago than this (e.g. 7d, 12h) [default: no age limit].
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    pub max_age: Option<Duration>,

    /// Hand buffered rows to the journal at least this often: what a kill -9 can lose.
    #[arg(long, value_name = "TIME", default_value = "1s", value_parser = parse_duration)]
    pub flush: Duration,

    /// fsync the journal at least this often: what a host crash can lose.
    #[arg(long, value_name = "TIME", default_value = "5s", value_parser = parse_duration)]
    pub fsync: Duration,

    /// List the event groups and exit.
    #[arg(long)]
    pub list_events: bool,
}

/// Subcommands besides recording.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Turn the journals a killed recorder left in DIR into ordinary Parquet
    /// chunks (a start in DIR does the same), then exit. Safe to repeat.
    Recover {
        /// The recording directory.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

/// What the recorder runs with, validated.
#[derive(Clone, Debug)]
pub struct Config {
    pub output: PathBuf,
    pub duration: Option<Duration>,
    pub events: Vec<String>,
    pub chunk: Duration,
    pub interval: Duration,
    pub task_interval: Duration,
    pub fault_sample: u32,
    pub ring_size: u32,
    /// Retention: `--max-size` (resolved default) and `--max-age`.
    pub retention: Limits,
    pub flush: Duration,
    pub fsync: Duration,
    pub frequency: u32,
    /// `--unwind dwarf`: samples carry a copy of the user stack.
    pub unwind_dwarf: bool,
    pub off_cpu_stacks: bool,
    /// argv as given, kept in recording.json.
    pub command_line: Vec<String>,
}

impl Args {
    pub fn resolve(self, command_line: Vec<String>) -> anyhow::Result<Config> {
        let events = if self.events.is_empty() {
            EVENT_GROUPS
                .iter()
                .filter(|g| g.1)
                .map(|g| g.0.to_string())
                .collect()
        } else {
            let mut events = Vec::new();
            for e in self
                .events
                .iter()
                .map(|e| e.trim())
                .filter(|e| !e.is_empty())
            {
                if !EVENT_GROUPS.iter().any(|g| g.0 == e) {
                    let known: Vec<_> = EVENT_GROUPS.iter().map(|g| g.0).collect();
                    return Err(UsageError(format!(
                        "unknown event group '{e}' (known: {})",
                        known.join(", ")
                    ))
                    .into());
                }
                if !events.iter().any(|k| k == e) {
                    events.push(e.to_string());
                }
            }
            events
        };
        if self.chunk < Duration::from_secs(1) {
            return Err(UsageError("--chunk must be at least 1s".into()).into());
        }
        if self.interval < Duration::from_millis(100)
            || self.task_interval < Duration::from_millis(100)
        {
            return Err(
                UsageError("--interval and --task-interval must be at least 100ms".into()).into(),
            );
        }
        if !self.ring_size.is_power_of_two() || !(1 << 16..=1 << 30).contains(&self.ring_size) {
            return Err(
                UsageError("--ring-size must be a power of two between 64K and 1G".into()).into(),
            );
        }
        if self.flush < Duration::from_millis(100) || self.fsync < self.flush {
            return Err(UsageError(
                "--flush must be at least 100ms and --fsync at least --flush".into(),
            )
            .into());
        }
        let output = self
            .output
            .ok_or_else(|| UsageError("--output DIR is required".into()))?;
        if self.max_size.is_some_and(|s| s < 1 << 20) {
            return Err(UsageError("--max-size must be at least 1M".into()).into());
        }
        let retention = Limits {
            max_size: self.max_size.unwrap_or_else(|| default_max_size(&output)),
            max_age: self.max_age,
        };
        Ok(Config {
            output,
            duration: self.duration,
            events,
            chunk: self.chunk,
            interval: self.interval,
            task_interval: self.task_interval,
            fault_sample: self.fault_sample,
            ring_size: self.ring_size as u32,
            retention,
            flush: self.flush,
            fsync: self.fsync,
            frequency: self.frequency,
            unwind_dwarf: self.unwind == "dwarf",
            off_cpu_stacks: self.off_cpu_stacks,
            command_line,
        })
    }
}

/// A duration flag, in the grammar both programs share (`30s`, `1m30s`, `500ms`, `2h`).
pub fn parse_duration(text: &str) -> anyhow::Result<Duration> {
    let ns = hindsight_schemas::time::parse_duration_ns(text).map_err(anyhow::Error::msg)?;
    Ok(Duration::from_nanos(ns as u64))
}

/// A size flag, in the grammar both programs share (`4096`, `64K`, `8M`, `1G`).
pub fn parse_size(text: &str) -> anyhow::Result<u64> {
    hindsight_schemas::time::parse_size_bytes(text).map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes_parse_like_people_write_them() {
        let cases = [
            ("30s", 30.0),
            ("500ms", 0.5),
            ("10m", 600.0),
            ("2h", 7200.0),
            ("1d", 86400.0),
            ("7", 7.0),
        ];
        for (text, secs) in cases {
            assert_eq!(
                parse_duration(text).unwrap(),
                Duration::from_secs_f64(secs),
                "{text}"
            );
        }
        for bad in ["", "s", "-1s", "10x", "0"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_size("8M").unwrap(), 8 << 20);
        assert_eq!(parse_size("64KiB").unwrap(), 64 << 10);
        assert!(parse_size("12Q").is_err());
    }

    #[test]
    fn events_default_to_always_on_groups_and_reject_unknown_ones() {
        let args = |events: &[&str]| Args {
            command: None,
            flush: Duration::from_secs(1),
            fsync: Duration::from_secs(5),
            output: Some("x".into()),
            duration: None,
            events: events.iter().map(|s| s.to_string()).collect(),
            chunk: Duration::from_secs(60),
            interval: Duration::from_secs(1),
            task_interval: Duration::from_secs(10),
            fault_sample: 1,
            ring_size: 8 << 20,
            max_size: None,
            max_age: None,
            frequency: 49,
            unwind: "dwarf".into(),
            off_cpu_stacks: false,
            list_events: false,
        };
        assert_eq!(
            args(&[]).resolve(vec![]).unwrap().events,
            vec!["sched", "counters", "tasks", "numa", "cache", "cpu"]
        );
        assert_eq!(
            args(&["sched", "sched"]).resolve(vec![]).unwrap().events,
            vec!["sched"]
        );
        let err = args(&["bogus"]).resolve(vec![]).unwrap_err().to_string();
        assert!(err.contains("unknown event group 'bogus'"), "{err}");
    }
}
