//! Compiles the BPF programs in `../bpf/` and generates their skeletons.
//! `CLANG` overrides the compiler; the pinned vmlinux.h is chosen by target arch.

use std::{env, path::PathBuf};

use libbpf_cargo::SkeletonBuilder;

/// One skeleton per event group; each `.bpf.c` includes the shared wire header.
const PROGRAMS: &[&str] = &["sched", "faults", "numa", "cache", "stacks", "tasks"];
const HEADERS: &[&str] = &["events.h", "emit.h", "stack.h"];

fn main() {
    let bpf_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap()).join("../bpf");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap();
    let vmlinux_dir = bpf_dir.join("vmlinux").join(&arch);
    println!("cargo:rerun-if-env-changed=CLANG");
    // Relative relocations packed, as the analyzer's (analyzer/build.rs).
    println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    for header in HEADERS {
        println!("cargo:rerun-if-changed={}", bpf_dir.join(header).display());
    }
    println!("cargo:rerun-if-changed={}", vmlinux_dir.display());
    for name in PROGRAMS {
        let source = bpf_dir.join(format!("{name}.bpf.c"));
        println!("cargo:rerun-if-changed={}", source.display());
        let mut builder = SkeletonBuilder::new();
        builder.source(&source).clang_args([
            "-I".into(),
            vmlinux_dir.clone().into_os_string(),
            "-I".into(),
            bpf_dir.clone().into_os_string(),
        ]);
        if let Some(clang) = env::var_os("CLANG") {
            builder.clang(clang);
        }
        builder
            .build_and_generate(out_dir.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building {}: {e:#}", source.display()));
    }
}
