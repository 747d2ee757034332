//! The `hindsight` command; everything it does lives in the library.

use std::process::ExitCode;

use clap::Parser;

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
