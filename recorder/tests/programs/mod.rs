//! C programs a test builds, and what binutils say of them: facts about a
//! program taken from tools independent of the recorder's own ELF reading.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `source` written to `dir/name.c` and compiled by `cc` with `flags` into
/// `dir/name`.
pub fn compile(dir: &Path, name: &str, source: &str, flags: &[&str]) -> PathBuf {
    let path = dir.join(format!("{name}.c"));
    std::fs::write(&path, source).unwrap();
    let program = dir.join(name);
    let status = Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(&program)
        .arg(&path)
        .status()
        .expect("cc runs");
    assert!(status.success(), "cc failed on {name}");
    program
}

/// `program`'s sections by name with their sizes, as `readelf -SW` lists
/// them.
pub fn section_sizes(program: &Path) -> Vec<(String, u64)> {
    let out = Command::new("readelf")
        .args(["-SW", "--"])
        .arg(program)
        .output()
        .expect("readelf runs");
    (String::from_utf8(out.stdout).unwrap().lines())
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(']').nth(1)?.split_whitespace().collect();
            let size = u64::from_str_radix(fields.get(4)?, 16).ok()?;
            Some((fields[0].to_owned(), size))
        })
        .collect()
}
