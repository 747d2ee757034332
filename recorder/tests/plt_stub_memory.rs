//! What naming a PLT stub allocates at its most, counted by this test
//! binary's own allocator (its one test runs alone in its process, so no
//! other thread's allocations are counted): a slice of a relocation table
//! at a time, not the table. Read whole and copied, a debug test binary's
//! 15 MB `.rela.dyn` took the recorder to its peak beside a test suite.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

mod common;
use common::{Counting, LIVE_BYTES, PEAK_BYTES};
mod programs;
use programs::{compile, section_sizes};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A position-independent program with 200,000 pointers in its data, a
/// relocation each (a 4.8 MB `.rela.dyn`, as large programs have), that
/// calls `puts` through `.plt` and takes its address, so that the linker
/// gives `__cxa_finalize` a `.plt.got` stub, filled by a relocation in
/// `.rela.dyn`.
fn program_with_many_relocations(dir: &Path) -> PathBuf {
    let pointers = "f,".repeat(200_000);
    let source = format!(
        "#include <stdio.h>\nstatic void f(void) {{}}\nvoid (*table[])(void) = {{{pointers}}};\n\
         int (*taken)(const char *) = puts;\n\
         int main(void) {{ puts(\"hello\"); return table[0] == 0; }}\n"
    );
    compile(dir, "relocated", &source, &["-O0", "-fPIE", "-pie"])
}

#[test]
fn naming_a_plt_stub_reads_its_relocations_a_slice_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let program = program_with_many_relocations(dir.path());
    let relocations = (section_sizes(&program).into_iter())
        .find_map(|(name, size)| (name == ".rela.dyn").then_some(size))
        .unwrap_or(0);
    assert!(
        relocations > 4 << 20,
        "the program's .rela.dyn ({relocations} bytes) is too small to tell"
    );
    // Every 8 bytes of every PLT section: each stub (and the lazy binder)
    // at least once.
    let mut named = Vec::new();
    let mut most = 0;
    for stubs in hindsight_record::elf::plt_ranges(&program) {
        for offset in stubs.step_by(8) {
            let before = LIVE_BYTES.load(Ordering::Relaxed);
            PEAK_BYTES.store(before, Ordering::Relaxed);
            let name = hindsight_record::elf::plt_stub_name(&program, offset);
            most = most.max(PEAK_BYTES.load(Ordering::Relaxed) - before);
            named.extend(name);
        }
    }
    eprintln!("{named:?}: at most {most} bytes allocated; .rela.dyn {relocations} bytes");
    // Through .plt (.rela.plt) and through .plt.got (.rela.dyn).
    for stub in ["puts@plt", "__cxa_finalize@plt"] {
        assert!(named.iter().any(|n| n == stub), "no {stub} in {named:?}");
    }
    assert!(
        most <= (1 << 20) + (64 << 10),
        "naming a stub allocated {most} bytes at its most; .rela.dyn is {relocations}"
    );
}
