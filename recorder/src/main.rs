//! `hindsight-record`: parse flags, run, print the error once.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let command_line: Vec<String> = std::env::args().collect();
    let args = hindsight_record::Args::parse();
    match hindsight_record::run(args, command_line) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("hindsight-record: {error:#}");
            ExitCode::from(hindsight_record::exit_code_for(&error))
        }
    }
}
