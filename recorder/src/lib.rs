//! `hindsight-record`: the flight recorder.
//!
//! It attaches BPF programs to kernel tracepoints, decodes what they send
//! through ring buffers (one per CPU for the busy groups) straight into Arrow builders, and writes zstd
//! Parquet chunks into a recording directory whose layout and schemas come
//! from `hindsight-schemas`. It is production software on other people's
//! machines, so:
//!
//! - memory is bounded: rows are written in batches of at most
//!   [`recorder::BATCH_ROWS`] per table, and the ring buffers share a fixed size;
//! - what it cannot record is recorded: ring-buffer overflows are counted
//!   per CPU in BPF and land in the `loss` table;
//! - every file a reader can see is complete (see [`sink`]), also after
//!   SIGINT/SIGTERM;
//! - disk use is bounded: [`retention`] deletes the oldest closed chunks to
//!   stay under `--max-size` and `--max-age`, and one recorder at a time
//!   writes a directory (the lock in [`recording`]);
//! - it never links DataFusion: reading recordings is the analyzer's job.
//!
//! The path of an event: `bpf/*.bpf.c` → ring buffer → [`decode`] →
//! [`rows`] builders → [`writer`] thread → [`sink`] → Parquet, driven by
//! [`recorder`]. Timed sources ([`counters`], [`tasks`], [`cache`]) fill
//! their rows from the same loop. Stacks ([`stacks`]) are identified on the
//! ring thread and named on the symbolizer's ([`symbolize`]).

pub mod bpf;
pub mod cache;
pub mod cli;
pub mod clock;
pub mod counters;
pub mod decode;
pub mod elf;
#[cfg(test)]
mod kernel_tests;
pub mod losses;
pub mod private_dir;
pub mod procfs;
pub mod recorder;
pub mod recording;
pub mod retention;
pub mod rows;
pub mod sink;
pub mod stacks;
pub mod symbolize;
pub mod tasks;
pub mod unwind;
pub mod writer;

use std::process::ExitCode;

pub use cli::Args;

/// Exit code for a bad invocation or a refused output directory.
pub const EXIT_USAGE: u8 = 2;
/// Exit code for missing privileges or kernel support.
pub const EXIT_UNSUPPORTED: u8 = 3;

/// Runs the recorder with parsed flags; `command_line` is kept in recording.json.
pub fn run(args: Args, command_line: Vec<String>) -> anyhow::Result<ExitCode> {
    if args.list_events {
        for (name, default, what) in cli::EVENT_GROUPS {
            println!(
                "{name:<10} {} {what}",
                if *default { "default " } else { "optional" }
            );
        }
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        match recorder::kernel_support() {
            Some(support) => {
                println!("\nOn this kernel ({}):", release.trim());
                println!("{:<10} records (reads /proc)", "counters");
                for (group, outcome) in support {
                    match outcome {
                        Ok(without) if without.is_empty() => println!("{group:<10} records"),
                        Ok(without) => {
                            println!("{group:<10} records, without {}", without.join(", "))
                        }
                        Err(why) => println!("{group:<10} cannot record: {why}"),
                    }
                }
            }
            None => println!(
                "\nRun as root to see what this kernel ({}) records.",
                release.trim()
            ),
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(cli::Command::Recover { dir }) = &args.command {
        return recover(dir);
    }
    let config = args.resolve(command_line)?;
    let summary = recorder::record(&config)?;
    let rows: Vec<String> = summary
        .rows
        .iter()
        .map(|(t, n)| format!("{t} {n}"))
        .collect();
    eprintln!(
        "hindsight-record: wrote {} files, {:.1} MiB to {} (rows: {}); {}",
        summary.files,
        summary.bytes as f64 / (1 << 20) as f64,
        config.output.display(),
        rows.join(", "),
        if summary.lost == 0 {
            "no events lost".to_string()
        } else {
            format!("{} events lost (see the loss table)", summary.lost)
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// `hindsight-record recover DIR`: every journal of DIR becomes a chunk.
fn recover(path: &std::path::Path) -> anyhow::Result<ExitCode> {
    let not_a_recording = || {
        cli::UsageError(format!(
            "{}: not a hindsight recording (no {})",
            path.display(),
            hindsight_schemas::layout::RECORDING_FILE
        ))
    };
    if !path.is_dir() {
        return Err(not_a_recording().into());
    }
    let dir = private_dir::PrivateDir::open(path)?;
    if recording::read_meta(&dir)?.is_none() {
        return Err(not_a_recording().into());
    }
    // A live recorder's journals are its open chunk, not debris.
    let _lock = recording::lock(&dir)?;
    let recovered = sink::recover_recording(&dir)?;
    for r in &recovered {
        println!(
            "{}: {} rows{}",
            r.path.display(),
            r.rows,
            if r.torn {
                " (the journal's torn last entry was dropped)"
            } else {
                ""
            }
        );
    }
    eprintln!(
        "hindsight-record: recovered {} chunk files in {}",
        recovered.len(),
        path.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The exit code an error deserves: scripts tell "fix your command" (2) and
/// "this machine cannot record" (3) from a failure while recording (1).
pub fn exit_code_for(error: &anyhow::Error) -> u8 {
    if error.downcast_ref::<bpf::Unsupported>().is_some() {
        EXIT_UNSUPPORTED
    } else if error.downcast_ref::<recording::OutputRefused>().is_some()
        || error.downcast_ref::<private_dir::NotPrivate>().is_some()
        || error.downcast_ref::<cli::UsageError>().is_some()
    {
        EXIT_USAGE
    } else {
        1
    }
}
