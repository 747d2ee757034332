//! The `hindsight` command; everything it does lives in the library.

use std::process::ExitCode;

use clap::Parser;

/// The heap, counted: past a ceiling derived from `--memory-limit` the
/// process stops with an error rather than take the machine's memory.
#[global_allocator]
static HEAP: hindsight::heap::BoundedHeap = hindsight::heap::BoundedHeap;

fn main() -> ExitCode {
    let cli = hindsight::cli::Cli::parse();
    match hindsight::run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("hindsight: {err:#}");
            hindsight::exit_code(&err)
        }
    }
}
