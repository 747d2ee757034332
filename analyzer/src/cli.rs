//! Flags, in two layers: the clap structs below only parse; [`Cli::resolve`]
//! turns them into a [`Config`] that the rest of the crate uses, with
//! defaults filled in from the machine.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::catalog;
use crate::output::Format;

/// SQL, reports and exports over hindsight recordings, as any user.
#[derive(Debug, Parser)]
#[command(name = "hindsight", version, propagate_version = true)]
#[command(
    long_about = "SQL, reports and exports over hindsight recordings, as any user.\n\n\
A recording is a directory written by hindsight-record: recording.json and one folder of \
Parquet files a table. Copy it anywhere; hindsight needs no root and no BPF.\n\n\
Examples:\n  \
hindsight info rec/\n  \
hindsight sql rec/ 'SELECT count(*) FROM sched_switch'"
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
}

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
                format: match a.format {
                    FormatArg::Table => Format::Table,
                    FormatArg::Csv => Format::Csv,
                    FormatArg::Json => Format::Json,
                },
            },
            Command::Info(a) => Action::Info {
                recordings: a.recordings,
                json: a.format == InfoFormatArg::Json,
            },
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
}
