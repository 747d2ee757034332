//! `hindsight-record`: parse flags, run, print the error once.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // One malloc arena: glibc gives each thread (writer, symbolizer) its own,
    // and memory freed in one stays mapped there; the recorder's threads
    // hardly contend. Measured under a switch storm: 8 MiB less peak RSS.
    // SAFETY: mallopt only tunes the allocator; called before any thread.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
    // Each chunk's batches and column buffers take a few MiB at the heap's
    // top and free them together: glibc's trim threshold (2 MiB once it has
    // adapted) gave them back to the kernel after every row group and took
    // them again page by page, 0.14 GiB of page faults in a 1.3 M event
    // switch storm, 17-25 % of the writer's CPU. Keeping 8 MiB of free
    // top of heap stops that without raising the peak (the heap peaked at
    // 14 MiB); a request of 4 MiB or more is still its own mapping, given
    // back as soon as it is freed (fixing one threshold stops glibc
    // adapting the other).
    // SAFETY: as above.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 8 << 20);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
    }
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
