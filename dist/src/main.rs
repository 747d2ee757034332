//! `hindsight-man DIR`: writes the man pages of `hindsight` and
//! `hindsight-record` to DIR, one page a command and subcommand
//! (`hindsight.1`, `hindsight-report-atop.1`, `hindsight-record.1`, ...),
//! from the same clap definitions as their `--help`, so a page cannot
//! drift from the binary it ships with. `scripts/package` runs it.

use std::{path::PathBuf, process::ExitCode};

use clap::CommandFactory;

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: hindsight-man DIR");
        return ExitCode::from(2);
    };
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(&dir)?;
        // Not built first: generate_to leaves out the `help` subcommands only
        // on a command it builds itself.
        clap_mangen::generate_to(hindsight::cli::Cli::command(), &dir)?;
        clap_mangen::generate_to(hindsight_record::cli::Args::command(), &dir)
    };
    match write() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hindsight-man: {}: {e}", dir.display());
            ExitCode::FAILURE
        }
    }
}
