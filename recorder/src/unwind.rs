//! User stacks through code built without frame pointers: a CPU sample
//! taken with `--unwind dwarf` carries the user registers and a copy of the
//! top of the user stack (`struct hs_sample_copy`), and this walks the copy
//! by each module's call frame information (`.eh_frame`, read once per
//! module file) with framehop, the unwinder samply uses. The copy is
//! never written: only the addresses found go on, like a frame-pointer
//! walk's, to [`crate::stacks::StackInterner`].
//!
//! Where a module has no call frame information (JIT code, a stripped
//! `.eh_frame`), framehop follows the frame pointer; where the copy ends
//! before the stack does, the frame-pointer walk the kernel did for the
//! same sample completes the stack from the last frame both agree on.
//!
//! Runs on the ring-buffer thread: a module's sections are mapped once (a
//! few hundred KiB for libc and most programs), an unwind is a few
//! microseconds, and samples come at `--frequency` per CPU. The rules
//! found in a module are kept with it, at its own addresses, for every
//! process that maps it: a build's thousandth compiler process unwinds
//! by the rules its first ones needed.

use std::{
    collections::HashMap,
    fs::File,
    ops::{Deref, Range},
    path::Path,
    sync::{Arc, Mutex, PoisonError},
};

use framehop::{
    x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64},
    ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder as _,
};

use crate::{
    elf,
    stacks::{find_mapping, Mapping},
};

/// Frames kept per user stack (`HS_STACK_DEPTH`).
const MAX_FRAMES: usize = 64;
/// Bytes of unwind sections (and their rule caches) kept for all modules;
/// past this, room is made from the modules the process at hand does not
/// map (and the processes' unwinders, which share them, are rebuilt),
/// before the next is mapped. A module that finds no room beside the
/// process's others is not mapped: its frames are walked by frame
/// pointers, as `perf -g` does. Room for a `rustc` process's modules
/// together (16.4 MiB: libLLVM's 8.6, librustc_driver's 6.8, their rule
/// caches and libc's) and a linker's.
const SECTIONS_BUDGET: usize = 20 << 20;
/// A module whose sections alone are more than this is not mapped either:
/// a debug build of a large Rust program carries 17-19 MiB, and reading
/// one took a switch storm's recorder from 48 to 89 MiB; mapped, beside
/// this project's tests, 15 MiB of the debug analyzer's were resident.
const MAX_MODULE_SECTIONS: usize = 16 << 20;
/// What one of a module's rule caches costs beside its sections: 33,048
/// bytes allocated (`tests/rule_cache_bytes.rs`), 8 KiB of them framehop's
/// 509 direct-mapped rules and the rest gimli's context for evaluating
/// DWARF call frame instructions (four rows of 192 register rules). Charged
/// at 12 KiB before, the caches beside this project's tests took 12 MB of
/// heap (heaptrack, at the recorder's peak) where the budget saw 4.4 MiB.
pub const RULE_CACHE_BYTES: usize = 33 << 10;
/// Functions (`.eh_frame` entries) a module has per rule cache, and the
/// most caches one has: a build's `cc1` has 45,000 functions and was
/// sampled at 13,000 addresses a process, which one cache's 509 slots
/// kept evicting each other from. Half as many as at first (1,024 and 32),
/// since a cache was found to cost 33 KiB, not 12: a large module's 1 MiB
/// of caches became half a MiB, and the ring thread's CPU through a Rust
/// build did not change that could be measured (BENCHMARKS.md, "A frame in
/// a file known by its offset alone").
const FUNCTIONS_PER_RULE_CACHE: usize = 2048;
const MAX_RULE_CACHES: usize = 16;

/// Section bytes shared by every process that maps the module: mapped
/// from the file, never copied, so only the pages unwinding touches count
/// in the recorder's RSS (and those are the page cache's, shared). Read
/// into the heap, a `rustc`'s 15 MiB of sections were resident whole for
/// the few thousand rules a build looks up. A file truncated in place
/// while mapped would fault, as blazesym's maps of the same files would;
/// compilers, linkers and package managers write a new file and rename it.
#[derive(Clone, Default)]
pub struct Bytes(Option<Arc<MappedSection>>);

/// One section of a file, mapped read-only.
struct MappedSection {
    map: memmap2::Mmap,
    /// Where the section starts in `map`, which starts on a page.
    start: usize,
}

impl Bytes {
    /// Maps `section` of `file`.
    fn map(file: &File, section: &elf::Section) -> Option<Bytes> {
        const PAGE: u64 = 4096;
        let page_start = section.offset / PAGE * PAGE;
        let start = usize::try_from(section.offset - page_start).ok()?;
        let len = start.checked_add(usize::try_from(section.size).ok()?)?;
        if section.offset.checked_add(section.size)? > file.metadata().ok()?.len() {
            return None;
        }
        // SAFETY: a read-only map of a regular file; what it reads stays
        // valid unless the file is truncated in place (see `Bytes`).
        let map = unsafe {
            memmap2::MmapOptions::new()
                .offset(page_start)
                .len(len)
                .map(file)
        }
        .ok()?;
        Some(Bytes(Some(Arc::new(MappedSection { map, start }))))
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Some(section) => &section.map[section.start..],
            None => &[],
        }
    }
}

/// What unwinding needs of one module file, at its own addresses (SVMAs).
struct ModuleSections {
    segments: Vec<elf::LoadSegment>,
    eh_frame: (std::ops::Range<u64>, Bytes),
    eh_frame_hdr: Option<(std::ops::Range<u64>, Bytes)>,
    text: Option<std::ops::Range<u64>>,
    got: Option<std::ops::Range<u64>>,
    /// How many rule caches its unwinder gets ([`ModuleSections::rule_caches`]),
    /// as counted into the budget when the sections were read.
    rule_caches: usize,
}

impl ModuleSections {
    /// The unwind sections of the module at `path`, once `make_room` has
    /// agreed to their size in bytes and their rule caches'.
    fn read(path: &Path, make_room: impl FnOnce(usize) -> bool) -> Option<ModuleSections> {
        let file = File::open(path).ok()?;
        let sections = elf::sections(&file).ok()?;
        let find = |name: &[u8]| sections.iter().find(|s| s.name == name && s.size > 0);
        let range = |s: &elf::Section| s.address..s.address + s.size;
        let load = |s: &elf::Section| -> Option<(std::ops::Range<u64>, Bytes)> {
            Some((range(s), Bytes::map(&file, s)?))
        };
        let eh_frame = find(b".eh_frame")?;
        let eh_frame_hdr = find(b".eh_frame_hdr");
        let (eh_frame_size, hdr_size) = (
            usize::try_from(eh_frame.size).ok()?,
            usize::try_from(eh_frame_hdr.map_or(0, |h| h.size)).ok()?,
        );
        let caches = Self::rule_caches(eh_frame_size, hdr_size);
        if !make_room(eh_frame_size + hdr_size + caches * RULE_CACHE_BYTES) {
            return None;
        }
        Some(ModuleSections {
            segments: elf::load_segments(path)?,
            eh_frame: load(eh_frame)?,
            eh_frame_hdr: eh_frame_hdr.and_then(load),
            text: find(b".text").map(range),
            got: find(b".got").map(range),
            rule_caches: caches,
        })
    }

    fn bytes(&self) -> usize {
        self.eh_frame.1.len() + self.eh_frame_hdr.as_ref().map_or(0, |h| h.1.len())
    }

    /// Rule caches for this module: one per [`FUNCTIONS_PER_RULE_CACHE`]
    /// functions, counted by `.eh_frame_hdr`'s 8-byte index entries (or
    /// `.eh_frame`'s entries, about 48 bytes each, without one).
    fn rule_caches(eh_frame: usize, eh_frame_hdr: usize) -> usize {
        let functions = if eh_frame_hdr > 0 {
            eh_frame_hdr / 8
        } else {
            eh_frame / 48
        };
        functions
            .div_ceil(FUNCTIONS_PER_RULE_CACHE)
            .clamp(1, MAX_RULE_CACHES)
    }

    /// What to subtract from an address in `mapping` (one of this file's
    /// mappings) for the file's own address, if `mapping` holds its code.
    fn bias(&self, mapping: &Mapping) -> Option<u64> {
        // The code segment in this mapping: mappings start on a page, and
        // the page holding a segment's first byte may hold the end of the
        // segment before it, so the mapping's own offset can name the wrong one.
        let length = mapping.end - mapping.start;
        let code = self.segments.iter().find(|s| {
            s.executable && s.offset < mapping.offset + length && mapping.offset < s.offset + s.size
        })?;
        let code_avma = mapping
            .start
            .wrapping_add(code.offset.wrapping_sub(mapping.offset));
        Some(code_avma.wrapping_sub(code.address))
    }
}

/// framehop's unwinder for one module file, which it sees at the file's own
/// addresses, with the rules it found there. Every process that maps the
/// file shares it: a compiler's thousandth process starts with the rules
/// its first ones needed, where an unwinder per process (framehop's cache
/// is keyed by the unwinder) started each new process cold, reading
/// `.eh_frame` again for every frame.
struct ModuleUnwinder {
    sections: ModuleSections,
    unwinder: UnwinderX86_64<Bytes>,
    /// Only its own rules, so an entry never goes stale: framehop keys its
    /// cache by an unwinder generation that wraps at 65,536, which
    /// unwinders rebuilt per process reached within a busy build. A large
    /// module has several, each for its own run of 509 addresses in turn
    /// ([`ModuleUnwinder::cache_of`]), as one cache of 509 × their number.
    caches: Mutex<Vec<CacheX86_64>>,
}

impl ModuleUnwinder {
    fn new(name: &str, sections: ModuleSections) -> ModuleUnwinder {
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: sections.text.clone(),
            eh_frame_svma: Some(sections.eh_frame.0.clone()),
            eh_frame: Some(sections.eh_frame.1.clone()),
            eh_frame_hdr_svma: sections.eh_frame_hdr.as_ref().map(|h| h.0.clone()),
            eh_frame_hdr: sections.eh_frame_hdr.as_ref().map(|h| h.1.clone()),
            got_svma: sections.got.clone(),
            ..Default::default()
        };
        let mut unwinder = UnwinderX86_64::new();
        // Mapped at its own addresses: an address is looked up after its
        // mapping's bias is taken off.
        unwinder.add_module(Module::new(name.to_string(), 0..u64::MAX, 0, info));
        let caches = (0..sections.rule_caches)
            .map(|_| CacheX86_64::new())
            .collect();
        ModuleUnwinder {
            sections,
            unwinder,
            caches: Mutex::new(caches),
        }
    }

    fn bytes(&self) -> usize {
        let caches = self.caches.lock().unwrap_or_else(PoisonError::into_inner);
        self.sections.bytes() + caches.len() * RULE_CACHE_BYTES
    }

    /// Which of `count` caches holds the rule for `lookup` (an address of
    /// the module's own): framehop picks the slot by the address modulo its
    /// 509, so the next 509 addresses go to the next cache.
    fn cache_of(lookup: u64, count: usize) -> usize {
        ((lookup / 509) % count as u64) as usize
    }
}

/// A module file's code mapped in a process, at `avma`.
struct MappedModule {
    avma: Range<u64>,
    bias: u64,
    module: Arc<ModuleUnwinder>,
}

/// One process's modules as framehop sees them, built from its maps:
/// sorted by address, not overlapping.
pub struct ProcessUnwinder(Vec<MappedModule>);

impl ProcessUnwinder {
    fn module_at(&self, address: u64) -> Option<&MappedModule> {
        let after = self.0.partition_point(|m| m.avma.start <= address);
        let mapped = &self.0[after.checked_sub(1)?];
        mapped.avma.contains(&address).then_some(mapped)
    }
}

/// The user registers of a sample and the stack bytes from `sp` up.
pub struct StackCopy<'a> {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    pub bytes: &'a [u8],
}

impl StackCopy<'_> {
    fn read(&self, address: u64) -> Result<u64, ()> {
        let at = usize::try_from(address.checked_sub(self.sp).ok_or(())?).map_err(|_| ())?;
        let word = self.bytes.get(at..at.checked_add(8).ok_or(())?).ok_or(())?;
        Ok(u64::from_le_bytes(word.try_into().map_err(|_| ())?))
    }
}

/// Module unwinders by build id (else path), within their budget.
pub struct Unwinders {
    modules: HashMap<String, Option<Arc<ModuleUnwinder>>>,
    module_bytes: usize,
    /// At most this many bytes in `modules` ([`SECTIONS_BUDGET`]).
    budget: usize,
    /// Bumped when the modules start over: unwinders built before hold
    /// sections no longer counted, and are rebuilt.
    pub generation: u64,
    /// For code in no module read: framehop follows the frame pointer.
    outside: (UnwinderX86_64<Bytes>, CacheX86_64),
}

impl Default for Unwinders {
    fn default() -> Self {
        Unwinders {
            modules: HashMap::new(),
            module_bytes: 0,
            budget: SECTIONS_BUDGET,
            generation: 0,
            outside: (UnwinderX86_64::new(), CacheX86_64::new()),
        }
    }
}

impl Unwinders {
    /// The unwinder of the module file `key`, read now if it is new;
    /// room is made from the modules not `in_use` by the process at hand.
    ///
    /// Every module went when one more did not fit, those of the process
    /// at hand too, which it went on holding uncounted: a `rustc` process's
    /// modules were 0.4 MiB over the budget, so each new one read its
    /// 15 MiB of sections afresh and held them, and beside a Rust build
    /// the recorder's heap held 45 MiB of sections.
    fn module(
        &mut self,
        name: &str,
        open_path: &str,
        key: String,
        in_use: &[String],
    ) -> Option<Arc<ModuleUnwinder>> {
        if let Some(found) = self.modules.get(&key) {
            return found.clone();
        }
        let budget = self.budget;
        let read = ModuleSections::read(Path::new(open_path), |size| {
            if size > budget.min(MAX_MODULE_SECTIONS) {
                return false;
            }
            if self.module_bytes + size > budget {
                let held = self.modules.len();
                self.modules.retain(|key, _| in_use.contains(key));
                if self.modules.len() < held {
                    self.module_bytes = (self.modules.values().flatten()).map(|m| m.bytes()).sum();
                    self.generation += 1;
                }
            }
            self.module_bytes + size <= budget
        })
        .map(|sections| Arc::new(ModuleUnwinder::new(name, sections)));
        if let Some(m) = &read {
            self.module_bytes += m.bytes();
        }
        self.modules.insert(key, read.clone());
        read
    }

    /// The unwinder of a process whose file mappings are `modules`: each
    /// with the path its file is read by (through a container's
    /// `/proc/<pid>/root`) and the key its sections are kept under (its
    /// build id where it has one, so one binary in many containers, or run
    /// by many short processes, is read once).
    pub fn for_process<'m>(
        &mut self,
        modules: impl IntoIterator<Item = (&'m Mapping, String, String)>,
    ) -> ProcessUnwinder {
        let mut mapped: Vec<MappedModule> = Vec::new();
        let mut in_use: Vec<String> = Vec::new();
        for (mapping, open_path, key) in modules {
            let name = mapping.path.as_deref().unwrap_or_default();
            let Some(module) = self.module(name, &open_path, key.clone(), &in_use) else {
                continue;
            };
            in_use.push(key);
            if let Some(bias) = module.sections.bias(mapping) {
                mapped.push(MappedModule {
                    avma: mapping.start..mapping.end,
                    bias,
                    module,
                });
            }
        }
        mapped.sort_unstable_by_key(|m| m.avma.start);
        ProcessUnwinder(mapped)
    }

    /// One frame of `process` unwound: the caller's return address, or
    /// None at the stack's root.
    fn unwind_frame(
        &mut self,
        process: &ProcessUnwinder,
        frame: FrameAddress,
        regs: &mut UnwindRegsX86_64,
        read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
    ) -> Result<Option<u64>, framehop::Error> {
        let Some(mapped) = process.module_at(frame.address_for_lookup()) else {
            let (unwinder, cache) = &mut self.outside;
            return unwinder.unwind_frame(frame, regs, cache, read_stack);
        };
        let own_address = frame.address().wrapping_sub(mapped.bias);
        let frame = if frame.is_return_address() {
            FrameAddress::from_return_address(own_address)
                .ok_or(framehop::Error::ReturnAddressIsNull)?
        } else {
            FrameAddress::from_instruction_pointer(own_address)
        };
        let module = &mapped.module;
        let mut caches = module.caches.lock().unwrap_or_else(PoisonError::into_inner);
        let count = caches.len();
        let cache = &mut caches[ModuleUnwinder::cache_of(frame.address_for_lookup(), count)];
        module.unwinder.unwind_frame(frame, regs, cache, read_stack)
    }

    /// Unwinds `copy` into `out` (leaf first), completing it from
    /// `frame_pointer_walk` (the kernel's walk of the same stack) where the
    /// copy ran out first. Returns false, leaving `out` empty, when the
    /// copy gave no more than the walk.
    pub fn unwind(
        &mut self,
        process: &ProcessUnwinder,
        maps: &[Mapping],
        copy: &StackCopy,
        frame_pointer_walk: &[u64],
        out: &mut Vec<u64>,
    ) -> bool {
        out.clear();
        let mut regs = UnwindRegsX86_64::new(copy.ip, copy.sp, copy.bp);
        let mut read_stack = |address| copy.read(address);
        let mut frame = FrameAddress::from_instruction_pointer(copy.ip);
        out.push(copy.ip);
        let mut reached_root = false;
        while out.len() < MAX_FRAMES {
            match self.unwind_frame(process, frame, &mut regs, &mut read_stack) {
                Ok(Some(caller)) => match FrameAddress::from_return_address(caller) {
                    Some(next) => {
                        out.push(caller);
                        frame = next;
                    }
                    None => break,
                },
                Ok(None) => {
                    reached_root = true;
                    break;
                }
                Err(_) => break,
            }
        }
        // framehop follows frame pointers through code it knows nothing
        // of; a return address outside every mapping is a wrong guess.
        while out.len() > 1 && find_mapping(maps, out[out.len() - 1]).is_none() {
            out.pop();
            reached_root = false;
        }
        if !reached_root {
            let last = out.last().copied();
            if let Some(at) = last.and_then(|l| frame_pointer_walk.iter().position(|&a| a == l)) {
                let room = MAX_FRAMES.saturating_sub(out.len());
                out.extend(frame_pointer_walk[at + 1..].iter().take(room));
            }
        }
        if out.len() <= frame_pointer_walk.len() && !reached_root {
            out.clear();
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stacks::parse_maps;

    /// This thread's registers and up to 16 KiB of its stack from here up
    /// (no further than the stack's mapping), as a sample would carry them.
    #[cfg(target_arch = "x86_64")]
    #[inline(never)]
    fn capture_own_stack() -> (u64, u64, u64, Vec<u8>) {
        let (ip, sp, bp): (u64, u64, u64);
        // SAFETY: reads three registers, writes nothing else.
        unsafe {
            std::arch::asm!("lea {}, [rip]", out(reg) ip);
            std::arch::asm!("mov {}, rsp", out(reg) sp);
            std::arch::asm!("mov {}, rbp", out(reg) bp);
        }
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let stack_end = maps
            .lines()
            .filter_map(|l| l.split_once(' ')?.0.split_once('-'))
            .map(|(a, b)| {
                (
                    u64::from_str_radix(a, 16).unwrap(),
                    u64::from_str_radix(b, 16).unwrap(),
                )
            })
            .find(|&(start, end)| start <= sp && sp < end)
            .unwrap()
            .1;
        let len = (stack_end - sp).min(16 << 10) as usize;
        // SAFETY: sp..sp + len lies in this thread's live stack mapping.
        let bytes = unsafe { std::slice::from_raw_parts(sp as *const u8, len) }.to_vec();
        (ip, sp, bp, bytes)
    }

    /// This process's file mappings, each read and kept by its path.
    fn own_files(maps: &[Mapping]) -> impl Iterator<Item = (&Mapping, String, String)> {
        maps.iter().filter_map(|m| {
            let path = m.path.clone().filter(|p| !p.starts_with('['))?;
            Some((m, path.clone(), path))
        })
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(never)]
    fn caller_of_capture() -> (u64, u64, u64, Vec<u8>) {
        std::hint::black_box(capture_own_stack())
    }

    /// The recorder's own stack, unwound as a sample's would be: through
    /// this test, the test harness and std (built without frame pointers)
    /// to the thread's start in libc.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_live_stack_unwinds_through_code_without_frame_pointers() {
        let (ip, sp, bp, bytes) = caller_of_capture();
        let maps = parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let mut unwinders = Unwinders::default();
        let process = unwinders.for_process(own_files(&maps));
        let copy = StackCopy {
            ip,
            sp,
            bp,
            bytes: &bytes,
        };
        let mut frames = Vec::new();
        assert!(unwinders.unwind(&process, &maps, &copy, &[], &mut frames));
        let within = |f: u64, function: u64| (function..function + 512).contains(&f);
        let caller = caller_of_capture as *const () as u64;
        let test = a_live_stack_unwinds_through_code_without_frame_pointers as *const () as u64;
        assert!(frames[0] == ip, "{frames:x?}");
        assert!(
            frames.iter().any(|&f| within(f, caller)),
            "caller_of_capture at {caller:x}: {frames:x?}"
        );
        assert!(
            frames.iter().any(|&f| within(f, test)),
            "the test at {test:x}: {frames:x?}"
        );
        // Past the test: the harness, std, and libc's thread start.
        let libc = |f: &u64| {
            crate::stacks::find_mapping(&maps, *f)
                .and_then(|m| m.path.as_deref())
                .is_some_and(|p| p.contains("libc.so"))
        };
        assert!(frames.iter().any(libc), "no frame in libc: {frames:x?}");
        // A frame-pointer walk through such code: the leaf, then garbage.
        // The unwound stack wins.
        let mut again = Vec::new();
        assert!(unwinders.unwind(&process, &maps, &copy, &[ip, 0x1234], &mut again));
        assert_eq!(again, frames);
        // A copy cut short after the leaf, with a walk that went further:
        // the walk completes it from the last frame both agree on, which
        // gives nothing the walk lacks, so the walk is used.
        let short = StackCopy {
            bytes: &bytes[..8],
            ..copy
        };
        let mut cut = Vec::new();
        assert!(!unwinders.unwind(&process, &maps, &short, &frames, &mut cut));
        assert!(cut.is_empty());
    }

    /// Rule lookups that missed, over every module's cache.
    fn rule_misses(unwinders: &Unwinders) -> u64 {
        unwinders
            .modules
            .values()
            .flatten()
            .flat_map(|m| {
                let caches = m.caches.lock().unwrap();
                caches.iter().map(|c| c.stats()).collect::<Vec<_>>()
            })
            .map(|stats| {
                stats.miss_empty_slot_count
                    + stats.miss_wrong_address_count
                    + stats.miss_wrong_modules_count
            })
            .sum()
    }

    /// A new process of a binary already seen starts with the rules the
    /// ones before found: an unwinder per process started cold, and looked
    /// every frame up in `.eh_frame` again.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_new_process_of_a_module_unwinds_by_the_rules_found_before() {
        let (ip, sp, bp, bytes) = caller_of_capture();
        let maps = parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let copy = StackCopy {
            ip,
            sp,
            bp,
            bytes: &bytes,
        };
        let mut unwinders = Unwinders::default();
        let first = unwinders.for_process(own_files(&maps));
        let mut frames = Vec::new();
        assert!(unwinders.unwind(&first, &maps, &copy, &[], &mut frames));
        let first_misses = rule_misses(&unwinders);
        assert!(first_misses >= 5, "{first_misses} lookups for {frames:x?}");
        let second = unwinders.for_process(own_files(&maps));
        let mut again = Vec::new();
        assert!(unwinders.unwind(&second, &maps, &copy, &[], &mut again));
        assert_eq!(again, frames);
        // Two of a stack's addresses can share one of a cache's 509 slots.
        let second_misses = rule_misses(&unwinders) - first_misses;
        assert!(
            second_misses <= first_misses / 2,
            "{second_misses} missed again of {first_misses}"
        );
    }

    #[test]
    fn a_module_over_the_budget_is_not_read_and_others_make_room_first() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_str().unwrap();
        let size = Unwinders::default()
            .module("exe", exe, "exe".into(), &[])
            .expect("this test binary has .eh_frame")
            .bytes();
        let mut small = Unwinders {
            budget: size - 1,
            ..Unwinders::default()
        };
        assert!(small.module("exe", exe, "exe".into(), &[]).is_none());
        assert_eq!(small.module_bytes, 0);
        // Two modules that each fit but not together: the first goes
        // before the second is read, so the budget is never passed.
        let mut two = Unwinders {
            budget: size + size / 2,
            ..Unwinders::default()
        };
        assert!(two.module("exe", exe, "first".into(), &[]).is_some());
        assert!(two.module("exe", exe, "second".into(), &[]).is_some());
        assert_eq!((two.module_bytes, two.generation), (size, 1));
        assert!(!two.modules.contains_key("first"));
        // Room is not made from the process's own modules: the one that
        // does not fit beside them is not read, and they stay counted.
        let in_use = ["second".to_owned()];
        assert!(two.module("exe", exe, "third".into(), &in_use).is_none());
        assert_eq!((two.module_bytes, two.generation), (size, 1));
        assert!(two.modules["second"].is_some());
        // Another process's modules make room as before.
        assert!(two.module("exe", exe, "fourth".into(), &[]).is_some());
        assert_eq!((two.module_bytes, two.generation), (size, 2));
        assert!(!two.modules.contains_key("second"));
    }

    #[test]
    fn a_large_modules_addresses_share_no_slot_within_its_caches_span() {
        // cc1's 45,000 functions (a 361 KB `.eh_frame_hdr`): every cache.
        let caches = ModuleSections::rule_caches(2_400_000, 361_000);
        assert_eq!(caches, MAX_RULE_CACHES);
        assert_eq!(ModuleSections::rule_caches(17_000, 2_800), 1);
        assert_eq!(ModuleSections::rule_caches(192 * 1024, 0), 2);
        // framehop's slot is the address modulo 509: addresses 509 apart
        // share it, and so go to different caches, until the caches' span.
        let at = |a: u64| (ModuleUnwinder::cache_of(a, caches), a % 509);
        let base = 0x2c_1234;
        let placed: std::collections::HashSet<_> =
            (0..caches as u64).map(|i| at(base + 509 * i)).collect();
        assert_eq!(placed.len(), caches);
        assert_eq!(at(base), at(base + 509 * caches as u64));
    }

    #[test]
    fn the_copy_is_read_within_its_bytes_only() {
        let bytes: Vec<u8> = (0u8..24).collect();
        let copy = StackCopy {
            ip: 0,
            sp: 0x1000,
            bp: 0,
            bytes: &bytes,
        };
        let word = |first: u8| u64::from_le_bytes(std::array::from_fn(|i| first + i as u8));
        assert_eq!(copy.read(0x1000), Ok(word(0)));
        assert_eq!(copy.read(0x1010), Ok(word(16)));
        assert_eq!(copy.read(0x1011), Err(()));
        assert_eq!(copy.read(0xfff), Err(()));
        assert_eq!(copy.read(u64::MAX), Err(()));
    }
}
