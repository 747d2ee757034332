//! Flags, in two layers: the clap structs below only parse; [`Cli::resolve`]
//! turns them into a [`Config`] that the rest of the crate uses, with
//! defaults filled in from the machine.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::catalog;
use crate::flamegraph;
use crate::output::Format;
use crate::report::{self, Interval};

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
hindsight report atop rec/ --interval 10s"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Threads and DataFusion partitions to use (default: the CPUs, at most 4).
    #[arg(long, global = true, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Sql(SqlArgs),
    Info(InfoArgs),
    #[command(subcommand)]
    Report(ReportCommand),
    Flamegraph(FlamegraphArgs),
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

/// Interval reports (atop, faults, numa, cachetop), each one SQL query.
#[derive(Debug, Subcommand)]
#[command(
    long_about = "Interval reports, each one SQL query over the recording; --show-sql prints \
it, and it runs unchanged with `hindsight sql`.\n\n\
Intervals are [a, a + INTERVAL) with a a multiple of the interval since the Unix epoch, so \
any length works over any sampling rate. Every row carries `lost`, the events the recorder \
lost in its interval: nonzero means the figures miss something."
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
}

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
Examples:\n  \
hindsight report faults rec/ --interval 10s --top 5";

const NUMA_ABOUT: &str = "Per interval, NUMA activity: `migrate` rows (per process and \
reason: migrate_pages events, pages succeeded and failed), `task` rows (per process, \
move_numa/swap_numa/stick_numa and node pair src_nid -> dst_nid: how many), and `counter` rows \
(numastat per node, and the numa*/pgmigrate* counters of vmstat and node_vmstat: the change in \
the interval and its rate, by the bounding-sample rule of `report atop`; counters that did not \
change are left out).\n\n\
Examples:\n  \
hindsight report numa rec/ --interval 1m";

const CACHETOP_ABOUT: &str = "Per interval and process, page-cache accesses, hits (accesses \
minus misses), misses (pages added to the cache) and dirtied pages, all in pages, and the hit \
ratio (hits as a % of accesses), like BCC's cachetop after the fact. A `page_cache` row is \
counted in the interval its `ts` (the end of the recorder's interval) falls in.\n\n\
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
read-only.\n\n\
Examples:\n  \
hindsight sql rec/ 'SELECT prev_comm, count(*) n FROM sched_switch GROUP BY 1 ORDER BY n DESC'\n  \
hindsight sql web1/ web2/ --format csv 'SELECT host, count(*) FROM sched_wakeup GROUP BY host'"
)]
pub struct SqlArgs {
    /// Recording directories; with two or more, every table gains a `host` column.
    #[arg(value_name = "RECORDING", required = true, num_args = 1..)]
    pub recordings: Vec<PathBuf>,
    /// The SQL query: one read-only statement, as the last argument.
    #[arg(value_name = "QUERY")]
    pub query: String,
    /// Output format: an aligned table, CSV with a header, or JSON lines.
    #[arg(long, short = 'f', value_enum, default_value_t = FormatArg::Table)]
    pub format: FormatArg,
}

/// Show what a recording holds: host, sessions, time range, tables, losses.
#[derive(Debug, Args)]
#[command(
    long_about = "Show what a recording holds: host, kernel, recorder version, sessions, the \
time range of its events, and per table the files, rows, bytes on disk and bytes per row; then \
the events lost and the probes that could not be attached. Reads Parquet footers only, so it is \
as fast on a week of data as on a minute.\n\n\
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
    /// Only from this time on (RFC 3339, 2024-05-01T12:00:00Z).
    #[arg(long, value_name = "TIME", value_parser = report::parse_time)]
    pub from: Option<i64>,
    /// Only before this time (RFC 3339).
    #[arg(long, value_name = "TIME", value_parser = report::parse_time)]
    pub to: Option<i64>,
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
    /// Only intervals from this time on (RFC 3339, 2024-05-01T12:00:00Z), aligned down to the interval.
    #[arg(long, value_name = "TIME", value_parser = report::parse_time)]
    pub from: Option<i64>,
    /// Only samples and events before this time (RFC 3339).
    #[arg(long, value_name = "TIME", value_parser = report::parse_time)]
    pub to: Option<i64>,
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
}

#[derive(Debug, Clone)]
pub enum Action {
    Sql {
        recordings: Vec<PathBuf>,
        query: String,
        format: Format,
    },
    Info {
        recordings: Vec<PathBuf>,
        json: bool,
    },
    Report {
        kind: report::Kind,
        recordings: Vec<PathBuf>,
        options: report::Options,
    },
    Record {
        args: Vec<std::ffi::OsString>,
    },
    Flamegraph {
        recordings: Vec<PathBuf>,
        options: flamegraph::Options,
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
            Command::Sql(a) => Action::Sql {
                recordings: a.recordings,
                query: a.query,
                format: a.format.format(),
            },
            Command::Record(a) => Action::Record { args: a.args },
            Command::Flamegraph(a) => Action::Flamegraph {
                recordings: a.recordings,
                options: flamegraph::Options {
                    mode: if a.off_cpu {
                        flamegraph::Mode::OffCpu
                    } else {
                        flamegraph::Mode::OnCpu
                    },
                    pid: a.pid,
                    tid: a.tid,
                    comm: a.comm,
                    from: a.from,
                    to: a.to,
                    format: match a.format {
                        GraphFormatArg::Folded => flamegraph::Format::Folded,
                        GraphFormatArg::Svg => flamegraph::Format::Svg,
                    },
                    output: a.output,
                    show_sql: a.show_sql,
                },
            },
            Command::Info(a) => Action::Info {
                recordings: a.recordings,
                json: a.format == InfoFormatArg::Json,
            },
            Command::Report(r) => {
                let (kind, a) = match r {
                    ReportCommand::Atop(a) => (report::Kind::Atop, a),
                    ReportCommand::Faults(a) => (report::Kind::Faults, a),
                    ReportCommand::Numa(a) => (report::Kind::Numa, a),
                    ReportCommand::Cachetop(a) => (report::Kind::Cachetop, a),
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
                    },
                }
            }
        };
        Config { action, threads }
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
            } => {
                assert_eq!(recordings, [PathBuf::from("a"), PathBuf::from("b")]);
                assert_eq!(query, "SELECT 1");
                assert_eq!(format, Format::Csv);
            }
            other => panic!("{other:?}"),
        }
        assert!(Cli::try_parse_from(["hindsight", "sql", "SELECT 1"]).is_err());
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
