//! `hindsight`, the analyzer: SQL, reports and exports over recordings
//! written by `hindsight-record`.
//!
//! Invariants:
//! - Unprivileged and portable: it reads a copy of a recording directory as
//!   any user. It knows nothing of BPF and does not depend on the recorder
//!   crate; `hindsight_schemas` is the whole contract between the two.
//! - Read-only: no command modifies a recording, and queries may not write.
//! - Input is checked before it is used ([`recording`]): a directory that
//!   is not a recording, a truncated chunk or a chunk from a newer schema
//!   is one line naming the file, and exit code 2 ([`exit_code`]).
//!
//! Map:
//! - [`cli`]: clap flags and their resolution into a [`cli::Config`].
//! - [`recording`]: open and validate a recording directory from its
//!   `recording.json` and Parquet footers; [`RecordingError`].
//! - [`catalog`]: register recordings as DataFusion tables, run queries,
//!   here or (`--cluster`) on an Apache DataFusion Ballista cluster.
//! - [`output`]: print results as a table, CSV or JSON lines; write Parquet.
//! - [`shell`]: `hindsight sql` without a query: the interactive shell, or
//!   a script on standard input.
//! - [`info`]: the `info` command's summary.
//! - [`report`]: interval reports (atop, timeline, runqlat, faults, numa,
//!   cachetop), one SQL statement each, a module per report; `top` is atop
//!   at one moment; `html`, one page for a ticket made of the others.
//! - [`slice`]: cut a smaller, complete recording out of one.
//! - [`when`] (from `hindsight_schemas`): the one parser of `--from`/`--to` times (RFC 3339, time of
//!   day, relative to the recording's end or start).
//! - [`flamegraph`]: folded stacks and SVG flame graphs, one SQL statement.
//! - [`export`]: Perfetto traces and pprof profiles.
//! - [`remote`]: recordings in S3 buckets: `push`, and `s3://` wherever a
//!   recording is read (mirrored into a local cache first).
//!
//! From other Rust code (reports, end-to-end tests):
//! ```no_run
//! # async fn example() -> Result<(), hindsight::Error> {
//! let ctx = hindsight::open_context(&["rec".into()]).await?;
//! let batches = hindsight::query_batches(&ctx, "SELECT count(*) FROM sched_switch").await?;
//! # Ok(()) }
//! ```

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use datafusion::error::DataFusionError;
use datafusion::prelude::SessionContext;

pub mod catalog;
pub mod chunk_file;
pub mod chunk_format;
pub mod cli;
pub mod columns;
pub mod debug_names;
pub mod export;
pub mod flamegraph;
pub mod heap;
pub mod human;
pub mod index;
pub mod info;
pub mod output;
pub mod progress;
pub mod recording;
pub mod remote;
pub mod report;
pub mod shell;
pub mod slice;
pub use hindsight_schemas::when;

pub use catalog::query_batches;
pub use recording::{Recording, RecordingError};

/// Why [`open_context`] failed: the input, or the engine.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Recording(#[from] RecordingError),
    #[error(transparent)]
    Query(#[from] DataFusionError),
}

/// A request that cannot be carried out as given (a time outside what
/// the flags accept, an output that exists): exit code 2, like bad input.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Validates `dirs` and returns a session with all their tables registered
/// (with a `host` column when there are several), with the default
/// partitions. See [`catalog::context_for`] to choose them.
pub async fn open_context(dirs: &[PathBuf]) -> Result<SessionContext, Error> {
    let recordings = recording::open_all(dirs)?;
    Ok(catalog::context_for(
        &recordings,
        catalog::default_partitions(),
    )?)
}

/// Runs one command line: the whole program after flag parsing.
pub fn run(cli: cli::Cli) -> anyhow::Result<ExitCode> {
    let config = cli.resolve();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.threads)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let outcome = runtime.block_on(execute(config));
    catalog::remove_spill_dir();
    outcome
}

async fn execute(config: cli::Config) -> anyhow::Result<ExitCode> {
    catalog::set_memory_limit(config.memory_limit).map_err(catalog::one_line)?;
    heap::set_ceiling(config.memory_limit);
    debug_names::set_debug_dirs(config.debug_dirs.clone());
    if let Some(scheduler) = config.cluster.clone() {
        if !config.debug_dirs.is_empty() {
            return Err(UsageError(
                "--debug-dir names frames from files on this machine, which a --cluster's \
                 executors cannot read: use one or the other"
                    .into(),
            )
            .into());
        }
        catalog::set_cluster(scheduler);
    }
    let mut action = config.action;
    fetch_remote(&mut action).await?;
    // Validate every input before the first byte of output.
    match action {
        cli::Action::Sql {
            recordings,
            query,
            format,
            output: file,
        } => {
            let recordings = recording::open_all(&recordings)?;
            let ctx =
                catalog::context_for(&recordings, config.threads).map_err(catalog::one_line)?;
            let Some(query) = query else {
                let Some(format) = format else {
                    anyhow::bail!("--format parquet needs a query: the shell prints to a terminal");
                };
                let all_ok = shell::run(&ctx, format).await?;
                return Ok(if all_ok {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                });
            };
            let stream = catalog::query_stream(&ctx, &query)
                .await
                .map_err(catalog::one_line)?;
            match (format, file) {
                (None, Some(path)) => output::write_parquet(stream, &path).await?,
                (Some(format), Some(path)) => {
                    let file = std::fs::File::create(&path)
                        .with_context(|| format!("creating {}", path.display()))?;
                    output::write_stream(stream, format, BufWriter::new(file)).await?;
                }
                (Some(format), None) => {
                    output::write_stream(stream, format, BufWriter::new(io::stdout())).await?
                }
                (None, None) => anyhow::bail!("--format parquet needs -o FILE"),
            }
        }
        cli::Action::Info { recordings, json } => {
            let recordings = recording::open_all(&recordings)?;
            let mut out = BufWriter::new(io::stdout());
            for (i, rec) in recordings.iter().enumerate() {
                let summary = info::summarize(rec, config.threads).await?;
                let written = if json {
                    info::write_json(&summary, &mut out)
                } else {
                    if i > 0 {
                        writeln!(out)?;
                    }
                    info::write_text(&summary, &mut out)
                };
                match written.and_then(|()| Ok(out.flush()?)) {
                    Err(e) if is_broken_pipe(&e) => return Ok(ExitCode::SUCCESS),
                    other => other?,
                }
            }
        }
        cli::Action::Index { recordings, force } => {
            let mut out = BufWriter::new(io::stdout());
            for dir in &recordings {
                let summary = index::index(dir, force)?;
                index::write_summary(dir, &summary, &mut out)?;
            }
            out.flush()?;
        }
        cli::Action::Report {
            kind,
            recordings,
            options,
        } => match report::run(kind, &recordings, &options, config.threads).await {
            Err(e) if is_broken_pipe(&e) => return Ok(ExitCode::SUCCESS),
            other => other?,
        },
        cli::Action::HtmlReport(request) => report::html::run(&request, config.threads).await?,
        cli::Action::Record { args } => return exec_recorder(&args),
        cli::Action::Slice(request) => {
            let outcome = slice::run(&request, config.threads).await?;
            let mut out = BufWriter::new(io::stdout());
            let written =
                slice::write_outcome(&request, &outcome, &mut out).and_then(|()| Ok(out.flush()?));
            match written {
                Err(e) if is_broken_pipe(&e) => return Ok(ExitCode::SUCCESS),
                other => other?,
            }
        }
        cli::Action::Flamegraph {
            recordings,
            options,
            window,
        } => match flamegraph::run(&recordings, &options, window, config.threads).await {
            Err(e) if is_broken_pipe(&e) => return Ok(ExitCode::SUCCESS),
            other => other?,
        },
        cli::Action::Export(request) => match export::run(&request, config.threads).await {
            Err(e) if is_broken_pipe(&e) => return Ok(ExitCode::SUCCESS),
            other => other?,
        },
        cli::Action::Push {
            recording,
            destination,
            follow,
            options,
        } => {
            let out = io::stdout();
            match follow {
                Some(interval) => {
                    remote::push_follow(&recording, &destination, &options, interval, out).await?
                }
                None => {
                    let pushed =
                        remote::push(&recording, &destination, &options, &mut Default::default())
                            .await?;
                    remote::write_pushed(&recording, &destination, &pushed, out)?;
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Replaces every `s3://` recording the action reads with the local
/// copies of the recordings under it (see [`remote`]). A command that
/// names one URL and a time window fetches only the chunks the window
/// needs, and its times are made absolute against the whole recording's
/// range, which the partial copy does not hold.
async fn fetch_remote(action: &mut cli::Action) -> anyhow::Result<()> {
    use cli::Action;
    let span = span_of(action);
    // On a cluster the executors read the chunks from the bucket; `index`
    // and `slice` write files made from them here.
    let chunks = match action {
        _ if catalog::cluster().is_none() => remote::Chunks::Downloaded,
        Action::Index { .. } | Action::Slice(_) => remote::Chunks::Downloaded,
        _ => remote::Chunks::Listed,
    };
    let mut range = None;
    match action {
        Action::Sql { recordings, .. }
        | Action::Info { recordings, .. }
        | Action::Index { recordings, .. }
        | Action::Report { recordings, .. }
        | Action::Flamegraph { recordings, .. }
        | Action::Export(export::Request::Pprof { recordings, .. }) => {
            // Relative times count from all the recordings named together.
            let span = span.filter(|_| recordings.len() == 1);
            let mut local = Vec::with_capacity(recordings.len());
            for arg in recordings.iter() {
                let (dirs, whole) = fetch_one_url(arg, span.as_ref(), chunks).await?;
                local.extend(dirs);
                range = range.or(whole);
            }
            *recordings = local;
        }
        Action::Slice(slice::Request { source: one, .. })
        | Action::HtmlReport(report::html::Request { recording: one, .. })
        | Action::Export(export::Request::Perfetto { recording: one, .. }) => {
            let (local, whole) = fetch_one_url(one, span.as_ref(), chunks).await?;
            range = whole;
            if local.len() > 1 {
                return Err(UsageError(format!(
                    "{}: holds {} recordings, one per host; this command reads one: \
                     name it, as {}/HOST",
                    one.display(),
                    local.len(),
                    one.display().to_string().trim_end_matches('/'),
                ))
                .into());
            }
            *one = local.into_iter().next().expect("one recording");
        }
        Action::Record { .. } | Action::Push { .. } => {}
    }
    if let Some(range) = range {
        for when in times_of(action) {
            if let Ok(t) = when.resolve(range) {
                *when = when::When::Absolute(t);
            }
        }
    }
    Ok(())
}

/// The time an action reads, for fetching only that much of a bucket;
/// `None` for the actions that read everything (`sql`, `info`, `index`,
/// and the Perfetto export, whose first states come from any time before).
fn span_of(action: &cli::Action) -> Option<remote::Span> {
    use cli::Action;
    use hindsight_schemas::derived::{DERIVED_TABLES, OFF_CPU_INTERVAL, RUNQ_WAIT};
    use hindsight_schemas::Table;
    use report::LOOKBACK_NS;
    // The derived tables each reads (see remote::Span::derived).
    let every_derived = DERIVED_TABLES;
    static RUNQ_ONLY: [&Table; 1] = [&RUNQ_WAIT];
    static OFF_CPU_ONLY: [&Table; 1] = [&OFF_CPU_INTERVAL];
    let span = |(from, to): (Option<when::When>, Option<when::When>), before_ns| remote::Span {
        from,
        to,
        before_ns,
        before_window: false,
        after_ns: 0,
        derived: every_derived,
    };
    match action {
        Action::Report { kind, options, .. } => {
            let interval = options.interval.ns();
            if let Some(at) = options.at {
                return Some(remote::Span {
                    after_ns: interval,
                    derived: &[],
                    ..span((Some(at), Some(at)), LOOKBACK_NS + interval)
                });
            }
            // Reports align `from` down to their interval, and those with
            // counters read the sample before it.
            let (history, derived): (i64, &'static [&'static Table]) = match kind {
                report::Kind::Runqlat => (0, &RUNQ_ONLY),
                report::Kind::Timeline => {
                    (report::timeline::HISTORY_NS + LOOKBACK_NS, every_derived)
                }
                _ => (LOOKBACK_NS, &[]),
            };
            Some(remote::Span {
                derived,
                ..span((options.from, options.to), history + interval)
            })
        }
        Action::HtmlReport(request) => Some(remote::Span {
            before_window: request.interval.is_none(),
            ..span(
                (request.from, request.to),
                report::timeline::HISTORY_NS
                    + LOOKBACK_NS
                    + request.interval.map_or(0, report::Interval::ns),
            )
        }),
        Action::Slice(request) => Some(span((request.from, request.to), LOOKBACK_NS)),
        Action::Flamegraph {
            window, options, ..
        }
        | Action::Export(export::Request::Pprof {
            window, options, ..
        }) => Some(remote::Span {
            derived: match options.mode {
                flamegraph::Mode::OffCpu => &OFF_CPU_ONLY,
                _ => &[],
            },
            ..span(*window, 0)
        }),
        _ => None,
    }
}

/// The action's `--from`, `--to` and `--at`.
fn times_of(action: &mut cli::Action) -> Vec<&mut when::When> {
    use cli::Action;
    let times: Vec<&mut Option<when::When>> = match action {
        Action::Report { options, .. } => {
            vec![&mut options.from, &mut options.to, &mut options.at]
        }
        Action::HtmlReport(r) => vec![&mut r.from, &mut r.to],
        Action::Slice(r) => vec![&mut r.from, &mut r.to],
        Action::Flamegraph { window, .. }
        | Action::Export(export::Request::Pprof { window, .. }) => {
            vec![&mut window.0, &mut window.1]
        }
        _ => Vec::new(),
    };
    times.into_iter().filter_map(Option::as_mut).collect()
}

/// The local copies of `arg`'s recordings when it is an `s3://` URL, else
/// `arg`; and the whole recording's range when only part was fetched.
async fn fetch_one_url(
    arg: &std::path::Path,
    span: Option<&remote::Span>,
    chunks: remote::Chunks,
) -> anyhow::Result<(Vec<PathBuf>, Option<Option<(i64, i64)>>)> {
    if !remote::is_remote(arg) {
        return Ok((vec![arg.to_path_buf()], None));
    }
    let url = arg.to_string_lossy();
    let (dirs, fetched) = remote::fetch(&url, span, chunks).await?;
    // What was fetched is for a person watching.
    let watched = io::IsTerminal::is_terminal(&io::stderr());
    if watched && chunks == remote::Chunks::Listed {
        eprintln!(
            "{url}: {} chunks left in the bucket for the cluster, {} outside the window \
             ({} footers read)",
            fetched.listed, fetched.skipped, fetched.footers
        );
    } else if watched && (fetched.files > 0 || fetched.skipped > 0) {
        let skipped = if fetched.skipped > 0 {
            format!(
                ", {} outside the window left there ({} footers read to tell)",
                fetched.skipped, fetched.footers
            )
        } else {
            String::new()
        };
        eprintln!(
            "{url}: fetched {} files ({}) into {}, {} already there{skipped}",
            fetched.files,
            info::human_bytes(fetched.bytes),
            remote::cache_root().display(),
            fetched.cached
        );
    }
    Ok((dirs, fetched.range))
}

/// Replaces this process with `hindsight-record ARGS`: the sibling of this
/// binary when there is one (an installed pair), else the one on PATH. The
/// analyzer only runs the recorder; it never links it.
fn exec_recorder(args: &[std::ffi::OsString]) -> anyhow::Result<ExitCode> {
    use std::os::unix::process::CommandExt;
    const RECORDER: &str = "hindsight-record";
    let sibling = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join(RECORDER)));
    let program = sibling
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(RECORDER));
    let error = std::process::Command::new(&program).args(args).exec();
    Err(anyhow::anyhow!(
        "cannot run {}: {error} (install hindsight-record next to hindsight or on PATH)",
        program.display()
    ))
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain()
        .filter_map(|e| e.downcast_ref::<io::Error>())
        .any(|e| e.kind() == io::ErrorKind::BrokenPipe)
}

/// Whether `err` is about the input (a recording, a bucket, the request)
/// rather than a failure while working on it.
pub fn is_bad_input(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<RecordingError>().is_some()
            || e.downcast_ref::<UsageError>().is_some()
            || e.downcast_ref::<remote::RemoteError>()
                .is_some_and(|e| e.bad_input)
            || matches!(e.downcast_ref::<Error>(), Some(Error::Recording(_)))
    })
}

/// The exit code for an error `run` returned: 2 for input that is not a
/// readable recording (like a usage error, the command cannot work on it),
/// 1 for anything else, such as a query that does not plan.
pub fn exit_code(err: &anyhow::Error) -> ExitCode {
    if is_bad_input(err) {
        ExitCode::from(2)
    } else {
        ExitCode::FAILURE
    }
}
