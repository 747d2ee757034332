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
    let files = protox::compile(ROOTS, [Path::new("proto")])?;
    prost_build::Config::new().compile_fds(files)?;
    Ok(())
}
