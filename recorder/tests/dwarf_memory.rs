//! What naming frames of a program that carries a few MiB of DWARF costs
//! the recorder's resident memory at its peak (`VmHWM`, file-backed pages
//! included: its one test runs alone in its process). Named from its DWARF,
//! a module's file is mapped and most of its DWARF touched and parsed, about
//! 1.4 times its size; a release hindsight-record's 12.4 MiB of line tables
//! were the recorder's peak beside this project's own tests. Past
//! `MAX_MODULE_DWARF` a module is named from its symbol table.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use hindsight_record::elf::load_segments;
use hindsight_record::stacks::FrameRow;
use hindsight_record::symbolize::SymbolizerThread;

mod programs;
use programs::{compile, section_sizes};

/// A C program of `functions` functions, each with a struct type of 100
/// members of its own: with `-g`, about 3 KB of DWARF a function.
fn many_types(functions: usize) -> String {
    let mut source = String::new();
    for i in 0..functions {
        let members: String = (0..100).map(|j| format!("long member_{i}_{j}; ")).collect();
        source += &format!(
            "struct record_{i} {{ {members}}};\n\
             long function_{i}(long x) {{ struct record_{i} v = {{0}}; \
             v.member_{i}_0 = x; return v.member_{i}_0 * {i}; }}\n"
        );
    }
    source + "int main(int argc, char **argv) { return (int)function_0(argc); }\n"
}

/// Bytes of `program`'s `.debug_*` sections.
fn dwarf_bytes(program: &Path) -> u64 {
    (section_sizes(program).into_iter())
        .filter(|(name, _)| name.starts_with(".debug_"))
        .map(|(_, size)| size)
        .sum()
}

/// The file offsets of the middle of `program`'s functions `function_N`,
/// by `nm`, with their names: every `step`th.
fn function_offsets(program: &Path, step: usize) -> Vec<(u64, String)> {
    let out = Command::new("nm")
        .args(["-S", "--defined-only", "--"])
        .arg(program)
        .output()
        .expect("nm runs");
    let code = (load_segments(program).unwrap().into_iter())
        .find(|segment| segment.executable)
        .unwrap();
    let mut found: Vec<(u64, String)> = (String::from_utf8(out.stdout).unwrap().lines())
        .filter_map(|line| {
            let [address, size, _, name] = line.split_whitespace().collect::<Vec<_>>()[..] else {
                return None;
            };
            if !name.starts_with("function_") {
                return None;
            }
            let middle =
                u64::from_str_radix(address, 16).ok()? + u64::from_str_radix(size, 16).ok()? / 2;
            Some((middle - code.address + code.offset, name.to_owned()))
        })
        .collect();
    found.sort();
    found.into_iter().step_by(step).collect()
}

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    (status.lines())
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|value| value.trim().trim_end_matches(" kB").parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

/// Names `frames` of `program` on `symbolizer`; returns them as named.
fn name(symbolizer: &SymbolizerThread, program: &Path, frames: &[(u64, String)]) -> Vec<FrameRow> {
    let path = program.to_str().unwrap();
    for (i, (offset, _)) in frames.iter().enumerate() {
        let row = FrameRow {
            module: Some(path.to_owned()),
            file_offset: Some(*offset),
            ..FrameRow::unnamed(i as i64, false, 0x5500_0000_0000 + offset, 1)
        };
        assert!(symbolizer.requests.send(row));
    }
    (0..frames.len())
        .map(|_| {
            symbolizer
                .named
                .recv_timeout(Duration::from_secs(60))
                .unwrap()
        })
        .collect()
}

#[test]
fn a_program_with_megabytes_of_dwarf_is_named_without_mapping_it() {
    let dir = tempfile::tempdir().unwrap();
    let large = compile(dir.path(), "large", &many_types(2000), &["-O0", "-g"]);
    let dwarf = dwarf_bytes(&large);
    assert!(
        dwarf > 5 << 20,
        "the program's DWARF ({dwarf} bytes) is too small to tell"
    );
    // The same code paths once, so that their pages of this test's own
    // binary are resident before the peak is reset: a small program with
    // DWARF, named from it, and one without, named from its symbols.
    let small_source = many_types(5);
    let small = compile(dir.path(), "small", &small_source, &["-O0", "-g"]);
    let plain = compile(dir.path(), "plain", &small_source, &["-O0"]);
    let symbolizer = SymbolizerThread::start(Path::new("/proc")).unwrap();
    let small_frames = function_offsets(&small, 1);
    let named = name(&symbolizer, &small, &small_frames);
    assert!(
        (named.iter()).all(|row| row.line.is_some() && row.file.as_deref().is_some()),
        "a small program is named from its DWARF: {named:?}"
    );
    name(&symbolizer, &plain, &function_offsets(&plain, 1));

    std::fs::write("/proc/self/clear_refs", "5").expect("resets VmHWM");
    let before = status_kib("VmRSS");
    let frames = function_offsets(&large, 40);
    let named = name(&symbolizer, &large, &frames);
    let peak = status_kib("VmHWM");
    let growth = (peak.saturating_sub(before)) << 10;
    eprintln!(
        "{} frames of a program with {dwarf} bytes of DWARF: resident {before} KiB, \
         at most {peak} KiB (+{growth} bytes)",
        frames.len()
    );
    for (row, (_, function)) in named.iter().zip(&frames) {
        assert_eq!(row.function.as_deref(), Some(function.as_str()), "{row:?}");
    }
    // Named from its DWARF, the growth was its size and more (7.9 MB for
    // 5.9 MB of DWARF); from its symbol table, a few hundred KiB.
    assert!(
        growth < dwarf / 4,
        "naming {} frames grew the resident size by {growth} bytes, DWARF {dwarf}",
        frames.len()
    );
}
