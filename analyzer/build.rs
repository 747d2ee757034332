//! Generates the Perfetto and pprof protobuf types of `src/export/proto.rs`
//! from the vendored `.proto` files in `proto/` (see `proto/README.md`).
//! protox compiles them in Rust, so building needs no `protoc`.

use std::path::Path;

const ROOTS: [&str; 2] = [
    "proto/protos/perfetto/trace/trace.proto",
    "proto/pprof/profile.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    // Relative relocations packed (DT_RELR, glibc 2.36 and later): the
    // analyzer's 243,624 of them took 5.85 MB as RELA entries (BENCHMARKS.md,
    // "The Debian package and binary sizes"). An older linker ignores the flag.
    println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    let files = protox::compile(ROOTS, [Path::new("proto")])?;
    prost_build::Config::new().compile_fds(files)?;
    Ok(())
}
