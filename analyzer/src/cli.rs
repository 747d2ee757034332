//! Flags, in two layers: the clap structs below only parse; [`Cli::resolve`]
//! turns them into a [`Config`] that the rest of the crate uses, with
//! defaults filled in from the machine.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::catalog;
use crate::flamegraph;
use crate::output::Format;
use crate::report::{self, Interval};
use crate::when::{self, When};

/// SQL, reports and exports over hindsight recordings, as any user.
#[derive(Debug, Parser)]
#[command(name = "hindsight", version, propagate_version = true)]
#[command(
    long_about = "SQL, reports and exports over hindsight recordings, as any user.\n\n\
A recording is a directory written by hindsight-record: recording.json and one folder of \
Parquet files a table. Copy it anywhere; hindsight needs no root and no BPF.\n\n\
Examples:\n  \
hindsight info rec/\n  \
hindsight sql rec/ 'SELECT count(*) FROM sched_switch'\n  \
hindsight report atop rec/ --interval 10s\n  \
hindsight slice rec/ --from -15m -o ticket/\n  \
hindsight report html ticket/ -o ticket.html\n  \
hindsight export perfetto rec/ -o trace.pftrace"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Threads and DataFusion partitions to use (default: the CPUs, at most 4).
    #[arg(long, global = true, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
    /// Memory all queries may hold (e.g. 512M, 4G); past it sorts and joins spill to TMPDIR,
    /// and a query that still does not fit stops with an error naming this limit. Memory
    /// the engine does not account for counts too: past 4 times this (and at least 1G more)
    /// the process stops with an error, exit code 1, rather than take the machine's memory.
    #[arg(long, global = true, value_name = "SIZE", default_value = "1G", value_parser = parse_memory_limit)]
    pub memory_limit: u64,
    /// A directory of separate debug files by build id (DIR/.build-id/ab/cdef….debug, as
    /// /usr/lib/debug holds them, or DIR/abcdef…/debuginfo, a debuginfod client's cache):
    /// frames the recorder could not name are named from them as they are read, and those
    /// it named from a symbol table alone (a binary with over 4 MiB of DWARF) gain file
    /// and line; the recording is not changed. Repeatable.
    #[arg(long, global = true, value_name = "DIR")]
    pub debug_dir: Vec<PathBuf>,
    /// Run the queries on an Apache DataFusion Ballista 55 cluster: its scheduler's address
    /// (df://HOST, port 50050 unless given). The recording is read by the cluster's
    /// executors, so give it as s3://BUCKET/PREFIX (the executors need the AWS_* variables)
    /// or as a directory every executor sees at the same path; results are the same as
    /// without --cluster. `scripts/cluster up` starts a local one. Not with --debug-dir, or
    /// on a recording still being written.
    #[arg(long, global = true, value_name = "URL", value_parser = catalog::parse_cluster_url)]
    pub cluster: Option<String>,
}

fn parse_memory_limit(text: &str) -> Result<u64, String> {
    let bytes = hindsight_schemas::time::parse_size_bytes(text)?;
    if bytes < 16 << 20 {
        return Err(format!("'{text}': at least 16M"));
    }
    Ok(bytes)
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Sql(SqlArgs),
    Info(InfoArgs),
    Index(IndexArgs),
    #[command(subcommand)]
    Report(ReportCommand),
    Slice(SliceArgs),
    Top(TopArgs),
    Flamegraph(FlamegraphArgs),
    #[command(subcommand)]
    Export(crate::export::ExportCommand),
    Push(PushArgs),
    /// Record (as root): runs `hindsight-record` with the same arguments.
    ///
    /// `hindsight record -o rec -d 30s` is `hindsight-record -o rec -d 30s`, the way
    /// `git foo` runs `git-foo`: hindsight-record is looked for next to this program,
    /// then on PATH. `hindsight record --help` shows its flags.
    #[command(disable_help_flag = true)]
    Record(RecordArgs),
}

/// Arguments passed through to `hindsight-record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Arguments for hindsight-record, as they are.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<std::ffi::OsString>,
}

/// Interval reports (atop, timeline, runqlat, faults, numa, cachetop) and a page for a ticket (html).
#[derive(Debug, Subcommand)]
#[command(
    long_about = "Interval reports, each one SQL query over the recording; --show-sql prints \
it, and it runs unchanged with `hindsight sql`.\n\n\
Intervals are [a, a + INTERVAL) with a a multiple of the interval since the Unix epoch, so \
any length works over any sampling rate. Every row carries `lost`, the events the recorder \
lost in its interval: nonzero means the figures miss something.\n\n\
--format table (the default) is laid out for reading, after the screen of the tool each report \
replaces: figures rounded and grouped, names cut with '…' to fit the terminal (its width, or \
COLUMNS; nothing is cut in a pipe), colour only on a terminal and never with NO_COLOR set. \
--format csv and json keep every column at full precision, for scripts."
)]
pub enum ReportCommand {
    /// Per interval, atop's system lines and its top processes by CPU.
    #[command(long_about = ATOP_ABOUT)]
    Atop(ReportArgs),
    /// Per interval, the processes that page-faulted most, and where.
    #[command(long_about = FAULTS_ABOUT)]
    Faults(ReportArgs),
    /// Per interval, pages migrated and tasks moved between NUMA nodes.
    #[command(long_about = NUMA_ABOUT)]
    Numa(ReportArgs),
    /// Per interval, page-cache hits, misses and dirtied pages per process.
    #[command(long_about = CACHETOP_ABOUT)]
    Cachetop(ReportArgs),
    /// Per interval, run-queue latency histograms (log2, microseconds), like BCC's runqlat.
    #[command(long_about = RUNQLAT_ABOUT)]
    Runqlat(RunqlatArgs),
    /// The incidents: when the system departed from its own baseline, and who caused it.
    #[command(long_about = TIMELINE_ABOUT)]
    Timeline(TimelineArgs),
    /// One HTML page to attach to a ticket: charts, incidents, flame graphs, losses.
    Html(HtmlArgs),
}

const RUNQLAT_ABOUT: &str = "Per interval, run-queue latency: the time a thread waited to run, \
from its wakeup (`sched_wakeup`) or from being preempted (switched out runnable, `prev_state` R) \
to its next switch-in (`sched_switch`), as BCC's runqlat counts it and the kernel's run_delay \
(/proc/PID/schedstat) sums it; from the `runq_wait` table where the \
recording is indexed (`hindsight index`, seconds on a busy hour) and else the `runq_latency` \
view (which pairs the events in every query: minutes on a busy hour), as log2 \
histograms in microseconds like BCC's runqlat: slot [usecs_low, usecs_high] counts the waits of \
that many whole microseconds. One histogram per interval for every process (`kind` = `all`), then \
one for each of the --top processes that waited longest in total (`kind` = `process`). --pid keeps \
one process. Needs the `sched` event group.\n\n\
Output: --format table prints BCC's bars, a block per interval and process; csv and json print \
one row per slot with kind, interval_start, pid, comm, usecs_low, usecs_high, count, total_ns \
(the waits' sum) and lost.\n\n\
Examples:\n  \
hindsight report runqlat rec/ --interval 10s --top 3\n  \
hindsight report runqlat rec/ --pid 4242 -f csv";

const TIMELINE_ABOUT: &str = "The intervals where the system departed from its own baseline, \
merged into incidents, in time order, each with what departed, by how much, and the processes \
behind it.\n\n\
Metrics, per interval: system counter rates (pgscan_kswapd, pgscan_direct, pgsteal_kswapd, \
pgsteal_direct, pgfault, pgmajfault, pgmigrate_success, numa_pages_migrated, numa_miss, ctxt), \
cpu_busy and iowait (% of all CPUs), pressure (psi_cpu_some, psi_memory_some, psi_memory_full, \
psi_io_some, % of time), runq_wait (run-queue wait, ms per s), offcpu_d (uninterruptible off-CPU \
time, ms per s), lost (events the recorder lost), and per process process_cpu (% of one CPU, from \
sched_switch), process_faults (task_stat), process_runq_wait, process_offcpu_d and \
process_numa_migrated (pages the process's migrations moved, pages per s, from numa_event).\n\n\
Method: every series (a system metric, or one program's per-process metric: its processes of one \
comm summed, so the hundredth short-lived compiler has the history of the ninety-nine before it) \
has a value per interval, and each interval is judged against its own history: the 3 hours before \
it and, where the recording reaches back a day, the same hour of the day before (read for the \
baselines and never reported, so a range narrowed to an incident is judged against what was \
normal before it), leaving out intervals that departed themselves (an incident does not become \
normal by lasting, nor yesterday's incident today's normal). From it: the baseline (median), \
the spread (interquartile range / 1.349: a standard deviation for normal noise, which a \
minority of bursts cannot inflate), and the margin, the largest rise still normal: 5 spreads, \
or the metric's floor where more (e.g. 25 points of one CPU for process_cpu, 5000/s for ctxt: \
a flat series has no spread), plus the height of its usual bursts where 3 separate bursts of \
its history reached one (a cron job, an hourly build: mostly-idle series are judged by how often \
and how high they burst, not by a spread of zero). SCORE is the rise over the baseline in \
margins, one unit for every metric: an interval departs when a score exceeds 1 (1/S with \
--sensitivity S), and is judged against the same hour yesterday too before it does. Only rises \
count. An interval without a value counts as zero for processes and events, and is skipped \
for counters. Until a series has 30 intervals of history (the start of a recording), its \
median and spread over what was read stand in; with fewer than 4 intervals in all, \
it has no baseline. Adjacent departing intervals form one incident: \
start, end, the peak interval (the highest score), its kinds (cpu, memory, cache_thrash, io, \
numa, lost, or new_process for a program idle as a rule that took the CPU; the most evident \
first; recorder before them when the recorder itself is the first contributor: its start-up \
reading the running programs' symbols, or its own overload), the departed metrics with \
baseline, normal_max (baseline + margin) and observed (peak) \
values, and the contributors: the programs whose metrics departed, the highest score first, \
each with its busiest process and its share of the metric's rise (the programs that rose most, \
where none departed), and that process's busiest threads in the incident (up to 3, by the \
metric's kind of time: on-CPU, run-queue wait or D state; on-CPU for faults and migrations) \
and its heaviest stacks (up to 2 of each kind): its most sampled on-CPU stacks, where \
cpu_sample was recorded, with their share of its samples, and for a process that departed in \
D state, the stacks it blocked in, weighed by their time in D, where recorded with \
--off-cpu-stacks (the kind of the metric it contributed most to first). \
bench/timeline.sh measures how often it finds injected incidents and how often it finds ones \
that were not (BENCHMARKS.md).\n\n\
Output: --format table prints a block per incident; json prints ONE JSON array of incidents, \
each {start, end, peak (RFC 3339 UTC), kinds: [names], metrics: [{metric, unit, pid, comm, \
baseline, normal_max, observed, score, peak, new}], contributors: [{pid, comm, metric, share, \
score, threads: [{tid, comm, on_cpu_s, runq_wait_s, offcpu_d_s}], stacks: [{samples (on-CPU) \
or offcpu_d_s (blocked in D), share, frames (root first, `;` between)}]}], counters: [names]} \
(a stable contract for scripts and alerting; an empty array when nothing departed); csv prints \
one row per departed metric, per contributor, per thread and per stack. --show-sql prints the \
statements that compute the per-interval metrics.\n\n\
Examples:\n  \
hindsight report timeline rec/\n  \
hindsight report timeline rec/ --interval 1m --metric pgscan_direct\n  \
hindsight report timeline rec/ --from 03:00 --to 03:30 --sensitivity 2\n  \
hindsight report timeline rec/ -f json | jq '.[] | {start, who: .contributors[0].comm}'";

const ATOP_ABOUT: &str = "Per interval, atop's system lines (CPU per CPU and in total, context \
switches, memory, page faults, page scans and steals, migrations, NUMA, pressure) and the top \
processes by CPU, computed in SQL from the raw cumulative counters (`counter`, `task_stat`).\n\n\
Bounding samples: interval [a, b) reports, for every series (a counter; a process, known by \
pid and start time so a reused pid is a new process), the value of its last sample before b \
minus the value of its last sample before a, and rates divide that by the time between those \
two samples, not by the nominal interval: sample_from and sample_to in the output. A series \
that starts inside [a, b) (a process started mid-interval, the recording's start) counts from \
its first sample; a process that vanished counts up to its last snapshot and then has no row. \
An interval holding no sample of a series has no row for it. A step where a value goes \
backwards (a reboot; switch counts of exited threads) counts as zero. Samples up to 10 min \
before --from are read for the first interval's baseline.\n\n\
CPU: busy is every tick but idle and iowait, as a % of all ticks of /proc/stat (guest time is \
already inside user). Process CPU is a % of ONE CPU, as in atop: two full cores are 200%, over \
the process's own snapshots (every --task-interval, 10 s by default, so shorter intervals show \
a process only where a snapshot falls). Memory is /proc/meminfo at the interval's last sample. \
PSI is the % of the interval some (or all) tasks stalled.\n\n\
Output: --format table prints a block per interval: its time, LOST when events were lost in it, \
the system lines, then the processes. csv and json print the same columns as flat rows, one \
`kind` a row: `system` (one per interval), `cpu` (`cpu` = `all` or `cpuN`), `process` (the top \
--top by CPU); columns a kind has no value for are null. Every row has `lost`, the events the \
recorder lost in the interval.\n\n\
Examples:\n  \
hindsight report atop rec/ --interval 10s\n  \
hindsight report atop rec/ -i 1m --from 2024-05-01T12:00:00Z --to 2024-05-01T13:00:00Z --top 5\n  \
hindsight report atop rec/ --show-sql -f csv > atop.csv";

const FAULTS_ABOUT: &str = "Per interval, the processes that page-faulted most (from \
`page_fault`), with their fault rates (user, kernel, write), the most faulted 2 MiB region of \
their address space, and minflt/majflt rates from `task_stat` as a cross-check. Each recorded \
fault stands for `fault_sample` faults of its session (recording.json): `faults` is scaled, \
`recorded` is the raw count. Rates divide by the interval's length. What is mapped at an \
address is `unknown`: no memory maps are recorded.\n\n\
Output: --format table prints a block per interval, the processes that faulted most first: \
FAULTS (~ when estimated from sampled faults), FAULTS/s and its USER, KERNEL and WRITE shares, \
MINFLT/s and MAJFLT/s from /proc, the hot region and the command line; without the faults group, \
only the /proc columns. csv and json print every column above, a row per interval and process.\n\n\
Examples:\n  \
hindsight report faults rec/ --interval 10s --top 5";

const NUMA_ABOUT: &str = "Per interval, NUMA activity: `migrate` rows (per process and \
reason: migrate_pages events, pages succeeded and failed), `task` rows (per process, \
move_numa/swap_numa/stick_numa and node pair src_nid -> dst_nid: how many), and `counter` rows \
(numastat per node, and the numa*/pgmigrate* counters of vmstat and node_vmstat: the change in \
the interval and its rate, by the bounding-sample rule of `report atop`; counters that did not \
change are left out).\n\n\
Output: --format table prints a block per interval, like numastat and numamove side by side, in \
counts: the balancing line (hinting faults and their local share, PTE updates, pages migrated), \
the migration line, numastat's counters with a column per node, the processes whose pages were \
migrated (most first, with the kernel's reason) and the tasks the scheduler moved between nodes \
(from, to, how often). csv and json print the rows above, with rates.\n\n\
Examples:\n  \
hindsight report numa rec/ --interval 1m";

const CACHETOP_ABOUT: &str = "Per interval and process, page-cache accesses (pages looked up by \
reads and mmap faults), hits (accesses minus misses, never below zero), misses (pages added to \
the cache) and dirtied pages, all in pages, and the hit ratio (hits as a % of accesses), like \
BCC's cachetop after the fact; fault_around is the pages of the windows mmap faults mapped \
around themselves, apart from accesses. A `page_cache` row is counted in the interval its `ts` \
(the end of the recorder's interval) falls in. The --top processes of an interval are those \
with the most misses.\n\n\
Output: --format table prints BCC cachetop's columns, a block per interval: PID, COMM, HITS, \
MISSES, DIRTIES, READ_HIT% (hits of the pages looked up) and WRITE_HIT% (dirtied pages that were \
already cached, estimated: pages added beyond those looked up count as written fresh). csv and \
json print accesses, hits, misses, dirtied, hit_ratio_pct and fault_around.\n\n\
Examples:\n  \
hindsight report cachetop rec/ --interval 10s --top 20";

/// Run a SQL query over every table of one or more recordings.
#[derive(Debug, Args)]
#[command(
    long_about = "Run a SQL query over every table of one or more recordings.\n\n\
Every table of the schema is there (sched_switch, sched_wakeup, process, loss, ...), also when \
nothing was recorded into it. `ts` is a UTC timestamp; compare it with a literal such as \
TIMESTAMP '2024-05-01T12:00:00Z'. With several recordings, each table is the UNION ALL of \
them with a `host` column added last. The query is the last argument; quote it. Queries are \
read-only. The helper views cpu_time (on-CPU slices), off_cpu (blocked intervals), \
runq_latency (waits to run after a wakeup or a preemption) and counter_rate (counter deltas and rates) are there too; \
on long recordings query the tables `hindsight index` derives instead (cpu_slice, \
off_cpu_interval, runq_wait: the same rows, without pairing events in every query). \
`hindsight sql rec/` then `\\d NAME` describes any of them.\n\n\
Without a query: on a terminal, an interactive shell (line editing, history in \
~/.hindsight_history, statements end with ';' and may span lines, \\d lists tables and views, \
\\d NAME describes one with its column docs, \\q quits); otherwise statements and commands are \
read from standard input, so a script can be piped in.\n\n\
Examples:\n  \
hindsight sql rec/ 'SELECT prev_comm, count(*) n FROM sched_switch GROUP BY 1 ORDER BY n DESC'\n  \
hindsight sql web1/ web2/ --format csv 'SELECT host, count(*) FROM sched_wakeup GROUP BY host'\n  \
hindsight sql rec/ -f parquet -o slices.parquet 'SELECT * FROM cpu_time'\n  \
hindsight sql rec/                       # the shell\n  \
printf '\\\\d\\nSELECT count(*) FROM off_cpu;\\n' | hindsight sql rec/"
)]
pub struct SqlArgs {
    /// Recording directories (with two or more, every table gains a `host` column), then the
    /// query: one read-only statement, quoted. The last argument is the query unless it is a
    /// directory; without a query, the shell opens.
    #[arg(value_name = "RECORDING... [QUERY]", required = true, num_args = 1..)]
    pub args: Vec<String>,
    /// Output format: an aligned table, CSV with a header, JSON lines, or Parquet (with -o).
    #[arg(long, short = 'f', value_enum, default_value_t = SqlFormatArg::Table)]
    pub format: SqlFormatArg,
    /// Write the result to this file (required with --format parquet).
    #[arg(
        long,
        short = 'o',
        value_name = "FILE",
        required_if_eq("format", "parquet")
    )]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SqlFormatArg {
    /// An aligned table with a header.
    Table,
    /// A header line, then one comma-separated line a row.
    Csv,
    /// One JSON object a line.
    Json,
    /// A zstd Parquet file (needs -o FILE), for pandas, DuckDB, Spark.
    Parquet,
}

/// Show what a recording holds: host, sessions, time range, tables, losses.
#[derive(Debug, Args)]
#[command(
    long_about = "Show what a recording holds: host, kernel, recorder version, sessions, the \
time range of its events, and per table the files, rows, bytes on disk and bytes per row; then \
the events lost and the probes that could not be attached. The time range is what the \
recording still covers; periods whose files retention deleted are listed as `retired` (with \
why, and how many files and bytes), and a slice says what it was cut from (`slice of`). Reads \
Parquet footers only, so it is as fast on a week of data as on a minute.\n\n\
Examples:\n  \
hindsight info rec/\n  \
hindsight info --format json rec/ | jq '.tables[] | select(.rows > 0)'"
)]
pub struct InfoArgs {
    /// Recording directories, described one after the other.
    #[arg(value_name = "RECORDING", required = true, num_args = 1..)]
    pub recordings: Vec<PathBuf>,
    /// Output format: text for people, or one JSON object a recording a line.
    #[arg(long, short = 'f', value_enum, default_value_t = InfoFormatArg::Table)]
    pub format: InfoFormatArg,
}

/// Ship a recording's closed chunks to an S3 bucket, now or continuously.
#[derive(Debug, Args)]
#[command(
    long_about = "Ship a recording's closed chunks to an S3-compatible bucket, so that \
`hindsight` reads them from anywhere as s3://BUCKET/PREFIX, and a prefix holding one recording \
per host (PREFIX/<host>/) reads as all of them with a `host` column.\n\n\
Uploads only what the bucket lacks: run it again, or after an interruption, and it sends the \
rest, never a file twice and never a partial file (an object appears only once its upload is \
complete). The chunk being written is not sent until it closes; recording.json goes last. The \
recorder is not involved: push reads the directory as any reader does.\n\n\
Credentials, region and endpoint come from the standard AWS environment: AWS_ACCESS_KEY_ID, \
AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL (or AWS_ENDPOINT) for a service other than \
AWS, AWS_ALLOW_HTTP=true for a plain-HTTP endpoint. A missing bucket or a refused key is one \
line naming it, exit code 2.\n\n\
Examples:\n  \
hindsight push /var/lib/hindsight/rec s3://fleet/recordings/$(hostname)\n  \
hindsight push --follow /var/lib/hindsight/rec s3://fleet/recordings/$(hostname)\n  \
hindsight report runqlat s3://fleet/recordings --from 03:05 --to 03:15"
)]
pub struct PushArgs {
    /// The recording directory to ship.
    #[arg(value_name = "RECORDING")]
    pub recording: PathBuf,
    /// Where: s3://BUCKET/PREFIX, one prefix per recorded host.
    #[arg(value_name = "URL")]
    pub destination: String,
    /// Keep going: push again every --interval until SIGINT or SIGTERM, so a chunk reaches
    /// the bucket within about that long of closing.
    #[arg(long)]
    pub follow: bool,
    /// Time between pushes with --follow (e.g. 30s, 5m).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_push_interval)]
    pub interval: std::time::Duration,
    /// Also delete from the bucket the chunks no longer in the directory (retired by the
    /// recorder's retention), so the bucket keeps what the host keeps. Off by default: the
    /// bucket keeps everything it was sent.
    #[arg(long)]
    pub delete: bool,
}

fn parse_push_interval(text: &str) -> Result<std::time::Duration, String> {
    let ns = hindsight_schemas::time::parse_duration_ns(text)?;
    if ns < 1_000_000_000 {
        return Err(format!("'{text}': at least 1s"));
    }
    Ok(std::time::Duration::from_nanos(ns.unsigned_abs()))
}

/// Pair the scheduler events once, so reports on long recordings take seconds.
#[derive(Debug, Args)]
#[command(
    long_about = "Pair the scheduler events of a recording once and store the result beside \
them: on-CPU slices (cpu_slice), off-CPU intervals (off_cpu_interval) and run-queue waits \
(runq_wait), plain Parquet tables that hold exactly the rows of the views cpu_time, off_cpu and \
runq_latency. Reports (runqlat, timeline, html) read them when every recording given is indexed; \
otherwise they pair the raw events in every query, which on a busy hour takes minutes and \
gigabytes.\n\n\
One streaming pass over sched_switch and sched_wakeup in time order; memory follows the live \
threads, not the recording's size. Written the way the recorder writes chunks (hidden name, \
fsync, rename); run it again after the recording has grown. Needs write access to RECORDING.\n\n\
Examples:\n  \
hindsight index rec/\n  \
hindsight report runqlat rec/ --interval 1m"
)]
pub struct IndexArgs {
    /// Recording directories, indexed one after the other.
    #[arg(value_name = "RECORDING", required = true, num_args = 1..)]
    pub recordings: Vec<PathBuf>,
    /// Rebuild the derived tables even where they are complete.
    #[arg(long)]
    pub force: bool,
}

/// Cut a smaller, complete recording: a time window, optionally some processes.
#[derive(Debug, Args)]
#[command(
    long_about = "Cut a smaller, complete recording out of RECORDING: the rows with \
FROM <= ts < TO, to attach to a ticket. Every hindsight command (and DuckDB) reads it like any \
recording; its recording.json says what it is a slice of.\n\n\
What is kept: of every table with a `ts` column, the rows in the window; with --pid, only rows \
whose process columns (`pid`, `prev_pid`, `next_pid`, `waker_pid`, any `<role>_pid`) hold one \
of the pids, while tables without one, such as `counter` and `loss`, are about the system and \
kept whole for the window. `counter` and `task_stat` also keep, for each series (a counter, a \
process) sampled in the window, its last sample in the ten minutes before FROM, so a report's \
intervals from FROM on have the same baselines, and the same figures, as in the source. \
`process` also keeps, for every process and thread id in the kept rows, that thread's latest \
row before FROM, so every name and command line is known. `stack` and `frame` keep only what \
kept rows use. Sessions that do not overlap the window and the list of retired files are left \
out.\n\n\
TIME is one of: RFC 3339 (2024-05-01T12:00:00Z); HH:MM[:SS] UTC on the day of the \
recording's last event, or the day before when that is nearer the recording; -15m, that \
long before the last event; +10m, that long after the first.\n\n\
OUT must not exist or be an empty directory. The slice is written into a hidden sibling \
directory and renamed to OUT when complete, so a failure leaves nothing that looks like a \
recording.\n\n\
Examples:\n  \
hindsight slice rec/ --from 14:05 --to 14:20 -o ticket-4711/\n  \
hindsight slice rec/ --from -15m -o last15/\n  \
hindsight slice rec/ --from 2024-05-01T12:00:00Z --to 2024-05-01T12:10:00Z --pid 4242,4243 -o slow-db/"
)]
pub struct SliceArgs {
    /// The recording to cut from.
    #[arg(value_name = "RECORDING")]
    pub recording: PathBuf,
    /// Start of the window, inclusive (default: the first event). See TIME below.
    #[arg(long, value_name = "TIME", value_parser = when::parse, allow_hyphen_values = true)]
    pub from: Option<When>,
    /// End of the window, exclusive (default: just after the last event).
    #[arg(long, value_name = "TIME", value_parser = when::parse, allow_hyphen_values = true)]
    pub to: Option<When>,
    /// Keep only rows of these processes (repeat, or comma-separated).
    #[arg(long, value_name = "PID", value_delimiter = ',')]
    pub pid: Vec<i32>,
    /// The new recording's directory: must not exist, or be empty.
    #[arg(long, short = 'o', value_name = "OUT")]
    pub output: PathBuf,
}

/// `report runqlat`'s flags.
#[derive(Debug, Args)]
pub struct RunqlatArgs {
    #[command(flatten)]
    pub report: ReportArgs,
    /// Only this process (its pid, the kernel tgid).
    #[arg(long, value_name = "PID")]
    pub pid: Option<i32>,
}

/// `report timeline`'s flags.
#[derive(Debug, Args)]
pub struct TimelineArgs {
    #[command(flatten)]
    pub report: ReportArgs,
    /// Watch only this metric (see the list above), e.g. pgscan_direct or process_cpu.
    #[arg(long, value_name = "NAME", value_parser = report::timeline::parse_metric)]
    pub metric: Option<String>,
    /// How readily a rise counts: an interval departs when its score exceeds 1 / S. 2 also reports rises half the usual size; 0.5 only those twice it.
    #[arg(long, value_name = "S", default_value_t = 1.0, value_parser = report::timeline::parse_sensitivity)]
    pub sensitivity: f64,
}

/// `report html`'s flags.
#[derive(Debug, Args)]
#[command(
    long_about = "One self-contained HTML page about a recording, to attach to a ticket: \
what the machine did (charts of CPU, memory, page faults, context switches, disk, pressure and \
the busiest processes' CPU, in UTC), the incidents of `report timeline` shaded on every chart \
and listed with the processes behind them, the on-CPU flame graph (and the off-CPU one when \
recorded with --off-cpu-stacks), and what the recorder could not see: lost events, probes it \
could not attach, periods retention deleted.\n\n\
The page needs nothing else to be read: no network, no script (the flame graphs carry their \
own, for zooming). Open it in any browser, or mail it.\n\n\
Incidents are found as `report timeline` finds them, in --interval intervals (by default 10s, \
longer for windows of more than about 80 minutes, so there are at most 500); the charts have \
about 300 points across the window.\n\n\
Examples:\n  \
hindsight report html rec/ -o report.html\n  \
hindsight report html rec/ --from 14:05 --to 14:20 -o ticket-4711.html\n  \
hindsight report html rec/ --from -15m -o - | gzip > last-15-minutes.html.gz"
)]
pub struct HtmlArgs {
    /// The recording directory.
    #[arg(value_name = "RECORDING")]
    pub recording: PathBuf,
    /// Only from this time on. TIME: RFC 3339, HH:MM[:SS] on the recording's last day, -15m from its end.
    #[arg(long, value_name = "TIME", value_parser = when::parse, allow_hyphen_values = true)]
    pub from: Option<When>,
    /// Only before this time (same forms as --from).
    #[arg(long, value_name = "TIME", value_parser = when::parse, allow_hyphen_values = true)]
    pub to: Option<When>,
    /// Interval in which incidents are found: 10s, 1m (default: 10s, longer for long windows).
    #[arg(long, short = 'i', value_name = "DURATION", value_parser = Interval::parse)]
    pub interval: Option<Interval>,
    /// Processes on the CPU chart, the busiest first.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=10))]
    pub top: u16,
    /// The page to write; `-` writes it to standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
}

/// The atop screen at one moment: system lines and top processes of the interval holding it.
#[derive(Debug, Args)]
#[command(
    long_about = "The atop screen at one moment: `report atop` for the one interval that holds \
--at (intervals are aligned to multiples of --interval since the Unix epoch), with the same \
columns and formats.\n\n\
Examples:\n  \
hindsight top rec/ --at 2024-05-01T12:03:10Z\n  \
hindsight top rec/ --at 2024-05-01T12:03:10Z --interval 1m --top 20 -f json"
)]
pub struct TopArgs {
    /// Recording directories; with two or more, rows gain a `host` column.
    #[arg(value_name = "RECORDING", required = true, num_args = 1..)]
    pub recordings: Vec<PathBuf>,
    /// The moment to show: RFC 3339, HH:MM[:SS] on the recording's last day, -15m from its end.
    #[arg(long, value_name = "TIME", value_parser = when::parse, allow_hyphen_values = true)]
    pub at: When,
    /// Interval length around --at: 10s, 1m, 500ms.
    #[arg(long, short = 'i', value_name = "DURATION", default_value = "10s", value_parser = Interval::parse)]
    pub interval: Interval,
    /// Processes to show, the busiest first.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,
    /// Output format: a table for people, or CSV or JSON lines with the same columns.
    #[arg(long, short = 'f', value_enum, default_value_t = FormatArg::Table)]
    pub format: FormatArg,
    /// Print the SQL on stdout before the result, ending in `;` and a blank line.
    #[arg(long)]
    pub show_sql: bool,
}

/// Flame graphs of where threads ran (--on-cpu) or blocked (--off-cpu).
#[derive(Debug, Args)]
#[command(
    long_about = "Flame graphs of where threads ran (--on-cpu, from cpu_sample) or blocked \
(--off-cpu, from sched_switch), as folded stacks (`frame;frame;... weight`, root first, the \
thread name as the root: what flamegraph.pl, inferno and speedscope read) or as an SVG drawn \
with inferno. On-CPU weights are samples (recording.json's sample_frequency per second of CPU); \
off-CPU weights are nanoseconds from a thread's switch-out to its next switch-in, attributed \
to the stack recorded at the switch-out, which needs a recording made with --off-cpu-stacks. \
Kernel frames end in `_[k]`; a user frame that could not be named shows as [module+0xoffset]. \
The whole graph is one SQL statement over cpu_sample/sched_switch, stack and frame: \
--show-sql prints it (on stderr for SVG or -o).\n\n\
Examples:\n  \
hindsight flamegraph rec/ --on-cpu --pid 1234 > cpu.folded\n  \
hindsight flamegraph rec/ --off-cpu --comm nginx --format svg -o offcpu.svg\n  \
hindsight flamegraph rec/ --on-cpu --from 2024-05-01T12:00:00Z --to 2024-05-01T12:05:00Z --format svg -o cpu.svg"
)]
pub struct FlamegraphArgs {
    #[command(flatten)]
    pub stacks: StackSelection,
    /// Folded stacks (text) or an SVG flame graph.
    #[arg(long, short = 'f', value_enum, default_value_t = GraphFormatArg::Folded)]
    pub format: GraphFormatArg,
    /// Write to this file instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Print the SQL statement too: before the folded lines on stdout, or on stderr with SVG or -o.
    #[arg(long)]
    pub show_sql: bool,
}

/// Which stacks, weighed how: the filters `flamegraph` and `export pprof` share.
#[derive(Debug, Args)]
pub struct StackSelection {
    /// Recording directories.
    #[arg(value_name = "RECORDING", required = true, num_args = 1..)]
    pub recordings: Vec<PathBuf>,
    /// Where threads spent CPU time: weights are samples.
    #[arg(long, conflicts_with = "off_cpu", required_unless_present = "off_cpu")]
    pub on_cpu: bool,
    /// Where threads blocked: weights are nanoseconds switched out.
    #[arg(long)]
    pub off_cpu: bool,
    /// Only this process (kernel tgid).
    #[arg(long, value_name = "PID")]
    pub pid: Option<i32>,
    /// Only this thread (kernel pid).
    #[arg(long, value_name = "TID")]
    pub tid: Option<i32>,
    /// Only threads of this name (exactly as `comm`).
    #[arg(long, value_name = "NAME")]
    pub comm: Option<String>,
    /// Only from this time on: RFC 3339, HH:MM[:SS] on the recording's last day, -15m from its end.
    #[arg(long, value_name = "TIME", value_parser = when::parse, allow_hyphen_values = true)]
    pub from: Option<When>,
    /// Only before this time (same forms).
    #[arg(long, value_name = "TIME", value_parser = when::parse, allow_hyphen_values = true)]
    pub to: Option<When>,
}

impl StackSelection {
    /// The recordings, the flame graph options these select (in folded
    /// format, to stdout) and the window still to resolve.
    pub fn resolve(
        self,
    ) -> (
        Vec<PathBuf>,
        flamegraph::Options,
        (Option<When>, Option<When>),
    ) {
        let options = flamegraph::Options {
            mode: if self.off_cpu {
                flamegraph::Mode::OffCpu
            } else {
                flamegraph::Mode::OnCpu
            },
            pid: self.pid,
            tid: self.tid,
            comm: self.comm,
            from: None,
            to: None,
            format: flamegraph::Format::Folded,
            output: None,
            show_sql: false,
            indexed: false,
        };
        (self.recordings, options, (self.from, self.to))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GraphFormatArg {
    /// `frame;frame;... weight` lines, root first.
    Folded,
    /// An interactive SVG flame graph (open it in a browser).
    Svg,
}

/// The flags every report takes.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Recording directories; with two or more, rows gain a `host` column.
    #[arg(value_name = "RECORDING", required = true, num_args = 1..)]
    pub recordings: Vec<PathBuf>,
    /// Interval length: 10s, 1m, 1m30s, 500ms (units h, m, s, ms, us, ns).
    #[arg(long, short = 'i', value_name = "DURATION", default_value = "10s", value_parser = Interval::parse)]
    pub interval: Interval,
    /// Only intervals from this time on, aligned down to the interval. TIME: RFC 3339
    /// (2024-05-01T12:00:00Z); HH:MM[:SS] UTC on the day of the recording's last event (the
    /// day before when that is nearer the recording); -15m before the last event; +10m
    /// after the first.
    #[arg(long, value_name = "TIME", value_parser = when::parse, allow_hyphen_values = true)]
    pub from: Option<When>,
    /// Only samples and events before this time (same forms as --from).
    #[arg(long, value_name = "TIME", value_parser = when::parse, allow_hyphen_values = true)]
    pub to: Option<When>,
    /// Processes per interval, the busiest first (numa lists every process).
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,
    /// Output format: a table for people, or CSV or JSON lines with the same columns.
    #[arg(long, short = 'f', value_enum, default_value_t = FormatArg::Table)]
    pub format: FormatArg,
    /// Print the SQL on stdout before the result, ending in `;` and a blank line.
    #[arg(long)]
    pub show_sql: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// An aligned table with a header.
    Table,
    /// A header line, then one comma-separated line a row.
    Csv,
    /// One JSON object a line.
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InfoFormatArg {
    /// Aligned text.
    Table,
    /// One JSON object a recording.
    Json,
}

/// What to do, resolved from the flags.
#[derive(Debug, Clone)]
pub struct Config {
    pub action: Action,
    /// Tokio worker threads and DataFusion target partitions.
    pub threads: usize,
    /// Bytes all queries may hold before spilling (`--memory-limit`).
    pub memory_limit: u64,
    /// Where frames are named from at read time (`--debug-dir`).
    pub debug_dirs: Vec<PathBuf>,
    /// The Ballista scheduler queries run on (`--cluster`), as an http:// URL.
    pub cluster: Option<String>,
}

#[derive(Debug, Clone)]
pub enum Action {
    Sql {
        recordings: Vec<PathBuf>,
        /// None: the shell.
        query: Option<String>,
        /// None: Parquet.
        format: Option<Format>,
        output: Option<PathBuf>,
    },
    Info {
        recordings: Vec<PathBuf>,
        json: bool,
    },
    Index {
        recordings: Vec<PathBuf>,
        force: bool,
    },
    Report {
        kind: report::Kind,
        recordings: Vec<PathBuf>,
        options: report::Options,
    },
    HtmlReport(report::html::Request),
    Record {
        args: Vec<std::ffi::OsString>,
    },
    Slice(crate::slice::Request),
    Flamegraph {
        recordings: Vec<PathBuf>,
        options: flamegraph::Options,
        /// `--from`/`--to`, resolved once the recordings are open.
        window: (Option<When>, Option<When>),
    },
    Export(crate::export::Request),
    Push {
        recording: PathBuf,
        destination: String,
        follow: Option<std::time::Duration>,
        options: crate::remote::PushOptions,
    },
}

impl FormatArg {
    fn format(self) -> Format {
        match self {
            FormatArg::Table => Format::Table,
            FormatArg::Csv => Format::Csv,
            FormatArg::Json => Format::Json,
        }
    }
}

impl Cli {
    pub fn resolve(self) -> Config {
        let threads = self
            .threads
            .map_or_else(catalog::default_partitions, usize::from);
        let action = match self.command {
            Command::Sql(mut a) => Action::Sql {
                query: match a.args.last() {
                    Some(last)
                        if a.args.len() > 1
                            && !std::path::Path::new(last).is_dir()
                            && !crate::remote::is_remote(std::path::Path::new(last)) =>
                    {
                        a.args.pop()
                    }
                    _ => None,
                },
                recordings: a.args.into_iter().map(PathBuf::from).collect(),
                format: match a.format {
                    SqlFormatArg::Table => Some(Format::Table),
                    SqlFormatArg::Csv => Some(Format::Csv),
                    SqlFormatArg::Json => Some(Format::Json),
                    SqlFormatArg::Parquet => None,
                },
                output: a.output,
            },
            Command::Record(a) => Action::Record { args: a.args },
            Command::Slice(a) => Action::Slice(crate::slice::Request {
                source: a.recording,
                from: a.from,
                to: a.to,
                pids: crate::slice::normalize_pids(&a.pid),
                output: a.output,
            }),
            Command::Flamegraph(a) => {
                let (recordings, options, window) = a.stacks.resolve();
                Action::Flamegraph {
                    recordings,
                    options: flamegraph::Options {
                        format: match a.format {
                            GraphFormatArg::Folded => flamegraph::Format::Folded,
                            GraphFormatArg::Svg => flamegraph::Format::Svg,
                        },
                        output: a.output,
                        show_sql: a.show_sql,
                        ..options
                    },
                    window,
                }
            }
            Command::Export(e) => Action::Export(e.resolve()),
            Command::Push(a) => Action::Push {
                recording: a.recording,
                destination: a.destination,
                follow: a.follow.then_some(a.interval),
                options: crate::remote::PushOptions { delete: a.delete },
            },
            Command::Index(a) => Action::Index {
                recordings: a.recordings,
                force: a.force,
            },
            Command::Info(a) => Action::Info {
                recordings: a.recordings,
                json: a.format == InfoFormatArg::Json,
            },
            Command::Report(r) => {
                let (kind, a, pid, metric, sensitivity) = match r {
                    ReportCommand::Atop(a) => (report::Kind::Atop, a, None, None, 1.0),
                    ReportCommand::Faults(a) => (report::Kind::Faults, a, None, None, 1.0),
                    ReportCommand::Numa(a) => (report::Kind::Numa, a, None, None, 1.0),
                    ReportCommand::Cachetop(a) => (report::Kind::Cachetop, a, None, None, 1.0),
                    ReportCommand::Runqlat(a) => {
                        (report::Kind::Runqlat, a.report, a.pid, None, 1.0)
                    }
                    ReportCommand::Timeline(a) => (
                        report::Kind::Timeline,
                        a.report,
                        None,
                        a.metric,
                        a.sensitivity,
                    ),
                    ReportCommand::Html(a) => {
                        let request = report::html::Request {
                            recording: a.recording,
                            from: a.from,
                            to: a.to,
                            interval: a.interval,
                            top: usize::from(a.top),
                            output: a.output,
                        };
                        return Config {
                            action: Action::HtmlReport(request),
                            threads,
                            memory_limit: self.memory_limit,
                            debug_dirs: self.debug_dir.clone(),
                            cluster: self.cluster.clone(),
                        };
                    }
                };
                Action::Report {
                    kind,
                    recordings: a.recordings,
                    options: report::Options {
                        interval: a.interval,
                        from: a.from,
                        to: a.to,
                        top: a.top,
                        format: a.format.format(),
                        show_sql: a.show_sql,
                        pid,
                        metric,
                        sensitivity,
                        at: None,
                    },
                }
            }
            Command::Top(a) => Action::Report {
                kind: report::Kind::Atop,
                recordings: a.recordings,
                options: report::Options {
                    interval: a.interval,
                    from: None,
                    to: None,
                    top: a.top,
                    format: a.format.format(),
                    show_sql: a.show_sql,
                    pid: None,
                    metric: None,
                    sensitivity: 1.0,
                    at: Some(a.at),
                },
            },
        };
        Config {
            action,
            threads,
            memory_limit: self.memory_limit,
            debug_dirs: self.debug_dir,
            cluster: self.cluster,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn flags_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn last_positional_is_the_query() {
        let cli =
            Cli::try_parse_from(["hindsight", "sql", "a", "b", "SELECT 1", "--format", "csv"])
                .unwrap();
        match cli.resolve().action {
            Action::Sql {
                recordings,
                query,
                format,
                ..
            } => {
                assert_eq!(recordings, [PathBuf::from("a"), PathBuf::from("b")]);
                assert_eq!(query.as_deref(), Some("SELECT 1"));
                assert_eq!(format, Some(Format::Csv));
            }
            other => panic!("{other:?}"),
        }
        assert!(
            Cli::try_parse_from(["hindsight", "sql", "rec", "-f", "parquet", "SELECT 1"]).is_err()
        );
        // One argument is a recording (and the shell): a lone query fails as "not a recording".
        match Cli::try_parse_from(["hindsight", "sql", "SELECT 1"])
            .unwrap()
            .resolve()
            .action
        {
            Action::Sql {
                recordings, query, ..
            } => {
                assert_eq!(recordings, [PathBuf::from("SELECT 1")]);
                assert_eq!(query, None);
            }
            other => panic!("{other:?}"),
        }
        // A directory last is a recording too.
        let dir = std::env::temp_dir();
        let dir = dir.to_str().unwrap();
        match Cli::try_parse_from(["hindsight", "sql", "a", dir])
            .unwrap()
            .resolve()
            .action
        {
            Action::Sql { query, .. } => assert_eq!(query, None),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn record_passes_every_argument_through() {
        let cli = Cli::try_parse_from(["hindsight", "record", "-o", "rec", "--help"]).unwrap();
        match cli.resolve().action {
            Action::Record { args } => assert_eq!(args, ["-o", "rec", "--help"]),
            other => panic!("{other:?}"),
        }
    }
}
