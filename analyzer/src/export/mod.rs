//! `hindsight export`: a recording in other tools' formats.
//!
//! - [`perfetto`]: a Perfetto trace (scheduling, names, counters, faults,
//!   NUMA events, CPU samples with stacks) for ui.perfetto.dev.
//! - [`pprof`]: an on-CPU or off-CPU profile for `go tool pprof` and
//!   Pyroscope, weighed and named by the flame graph's SQL.
//! - [`proto`]: the protobuf types both are written with, generated from
//!   the vendored `.proto` files by `build.rs`.
//!
//! The command's flags live here rather than in `cli.rs`, which only adds
//! the subcommand, so the exports stay one module. Output goes to a hidden
//! file beside `-o FILE`, renamed when complete: a failed export leaves no
//! partial file behind.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::flamegraph;
use crate::when::{self, When};

pub mod perfetto;
pub mod pprof;
pub mod proto;

/// Export a recording for other tools: a Perfetto trace, a pprof profile.
#[derive(Debug, Subcommand)]
#[command(
    long_about = "Export a recording for other tools: a Perfetto trace (open it at \
ui.perfetto.dev) or a pprof profile (go tool pprof, Grafana Pyroscope).\n\n\
Examples:\n  \
hindsight export perfetto rec/ -o trace.pftrace\n  \
hindsight export pprof rec/ --on-cpu --pid 1234 -o cpu.pb.gz && go tool pprof -http=: cpu.pb.gz"
)]
pub enum ExportCommand {
    /// A Perfetto trace: CPU scheduling, thread names, counters, faults, NUMA events, samples.
    #[command(long_about = PERFETTO_ABOUT)]
    Perfetto(PerfettoArgs),
    /// A pprof profile (gzipped protobuf) of on-CPU samples or off-CPU time, with stacks.
    #[command(long_about = PPROF_ABOUT)]
    Pprof(PprofArgs),
}

const PERFETTO_ABOUT: &str = "Write one recording as a Perfetto trace (protobuf), the format \
ui.perfetto.dev (Open trace file) and trace_processor load.\n\n\
What it holds: sched_switch and sched_wakeup as per-CPU ftrace events (CPU tracks, thread \
states, wakeups); process and thread names and command lines; every counter series as a \
counter track under a track per source (raw values: cumulative counters stay cumulative, pick \
\"rate\" in the UI); page faults and NUMA events as instant events on their thread's track, \
their fields as arguments; CPU samples with their stacks (named as in `hindsight flamegraph`). \
Times are the recording's UTC times.\n\n\
--from/--to keep the rows with FROM <= ts < TO (a thread on CPU across a bound shows from the \
first switch inside). A summary of what was written goes to stderr.\n\n\
Examples:\n  \
hindsight export perfetto rec/ -o trace.pftrace\n  \
hindsight export perfetto rec/ --from 14:05 --to 14:06 -o incident.pftrace\n  \
hindsight export perfetto rec/ -o - | gzip > trace.pftrace.gz";

const PPROF_ABOUT: &str = "Write a pprof profile (profile.proto, gzipped): the stacks of \
`hindsight flamegraph` with the same flags, for go tool pprof, Grafana Pyroscope and \
speedscope. Stacks and totals equal the folded flame graph's: every stack has the thread name \
as its root frame; kernel frames end in `_[k]`.\n\n\
--on-cpu: sample types samples/count and cpu/nanoseconds (samples times the sampling period, \
1 s / the recording's --frequency). --off-cpu: off_cpu/nanoseconds, the time from a thread's \
switch-out to its next switch-in, under the stack recorded at the switch-out (record with \
--off-cpu-stacks).\n\n\
Examples:\n  \
hindsight export pprof rec/ --on-cpu -o cpu.pb.gz\n  \
go tool pprof -http=: cpu.pb.gz\n  \
hindsight export pprof rec/ --off-cpu --comm postgres --from -5m -o off.pb.gz\n  \
go tool pprof -top -sample_index=off_cpu off.pb.gz";

/// `export perfetto`'s flags.
#[derive(Debug, Args)]
pub struct PerfettoArgs {
    /// The recording directory.
    #[arg(value_name = "RECORDING")]
    pub recording: PathBuf,
    /// Only from this time on: RFC 3339, HH:MM[:SS] on the recording's last day, -15m from its end.
    #[arg(long, value_name = "TIME", value_parser = when::parse, allow_hyphen_values = true)]
    pub from: Option<When>,
    /// Only before this time (same forms).
    #[arg(long, value_name = "TIME", value_parser = when::parse, allow_hyphen_values = true)]
    pub to: Option<When>,
    /// The trace file to write (`-` for stdout), e.g. trace.pftrace.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
}

/// `export pprof`'s flags: the flame graph's filters.
#[derive(Debug, Args)]
pub struct PprofArgs {
    #[command(flatten)]
    pub stacks: crate::cli::StackSelection,
    /// The profile to write (`-` for stdout), e.g. profile.pb.gz.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
}

/// An export, resolved from the flags.
#[derive(Debug, Clone)]
pub enum Request {
    Perfetto {
        recording: PathBuf,
        window: (Option<When>, Option<When>),
        output: PathBuf,
    },
    Pprof {
        recordings: Vec<PathBuf>,
        /// The flame graph's filters; `format`, `output` and `show_sql` unused.
        options: flamegraph::Options,
        window: (Option<When>, Option<When>),
        output: PathBuf,
    },
}

impl ExportCommand {
    pub fn resolve(self) -> Request {
        match self {
            ExportCommand::Perfetto(a) => Request::Perfetto {
                recording: a.recording,
                window: (a.from, a.to),
                output: a.output,
            },
            ExportCommand::Pprof(a) => {
                let (recordings, options, window) = a.stacks.resolve();
                Request::Pprof {
                    recordings,
                    options,
                    window,
                    output: a.output,
                }
            }
        }
    }
}

/// Runs an export, writing its summary line to stderr.
pub async fn run(request: &Request, partitions: usize) -> anyhow::Result<()> {
    match request {
        Request::Perfetto {
            recording,
            window,
            output,
        } => {
            let mut sink = Sink::create(output)?;
            let exported = perfetto::export(recording, *window, partitions, &mut sink.out).await;
            let summary = sink.finish(exported)?;
            eprintln!(
                "hindsight: wrote {}: {} switches, {} wakeups, {} threads, {} counter tracks ({} values), \
                 {} page faults, {} NUMA events, {} CPU samples ({} stacks)",
                shown(output),
                summary.switches,
                summary.wakeups,
                summary.threads,
                summary.counter_tracks,
                summary.counter_values,
                summary.faults,
                summary.numa_events,
                summary.samples,
                summary.stacks
            );
        }
        Request::Pprof {
            recordings,
            options,
            window,
            output,
        } => {
            let mut sink = Sink::create(output)?;
            let exported =
                pprof::export(recordings, options, *window, partitions, &mut sink.out).await;
            let summary = sink.finish(exported)?;
            let unit = match options.mode {
                flamegraph::Mode::OnCpu => "CPU samples",
                flamegraph::Mode::OffCpu => "ns off CPU",
            };
            eprintln!(
                "hindsight: wrote {}: {} stacks, {} {unit}",
                shown(output),
                summary.samples,
                summary.total
            );
        }
    }
    Ok(())
}

fn shown(output: &Path) -> String {
    if output == Path::new("-") {
        "stdout".into()
    } else {
        output.display().to_string()
    }
}

/// Where an export goes: stdout for `-` (not a terminal: the formats are
/// binary), else a hidden file beside `-o FILE`, renamed into place once
/// complete and removed when the export fails.
struct Sink {
    out: Box<dyn Write>,
    /// The hidden file and the name it gets when complete.
    file: Option<(PathBuf, PathBuf)>,
}

impl Sink {
    fn create(output: &Path) -> anyhow::Result<Sink> {
        if output == Path::new("-") {
            let stdout = std::io::stdout();
            if stdout.is_terminal() {
                return Err(crate::UsageError(
                    "refusing to write a binary export to a terminal: give -o FILE, or redirect stdout"
                        .into(),
                )
                .into());
            }
            return Ok(Sink {
                out: Box::new(std::io::BufWriter::new(stdout)),
                file: None,
            });
        }
        let name = output
            .file_name()
            .with_context(|| format!("{}: not a file name", output.display()))?;
        let dir = match output.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let partial = dir.join(format!(".{}.partial", name.to_string_lossy()));
        let file = std::fs::File::create(&partial)
            .with_context(|| format!("creating {}", partial.display()))?;
        Ok(Sink {
            out: Box::new(std::io::BufWriter::new(file)),
            file: Some((partial, output.to_path_buf())),
        })
    }

    /// Completes the output when the export succeeded, else removes it.
    fn finish<T>(mut self, exported: anyhow::Result<T>) -> anyhow::Result<T> {
        let flushed = exported.and_then(|t| {
            self.out.flush()?;
            Ok(t)
        });
        drop(self.out);
        match (flushed, self.file) {
            (Ok(t), Some((partial, output))) => {
                std::fs::rename(&partial, &output)
                    .with_context(|| format!("writing {}", output.display()))?;
                Ok(t)
            }
            (Err(e), Some((partial, _))) => {
                let _ = std::fs::remove_file(&partial);
                Err(e)
            }
            (result, None) => result,
        }
    }
}
