//! Just enough ELF to know how much DWARF a module carries before blazesym
//! maps and parses it: the section headers and the debug link (the build id
//! comes from blazesym's own reader, as for frames); and to hand a module's
//! `.eh_frame` to the unwinder ([`crate::unwind`]).
//!
//! Naming a frame from DWARF maps and touches most of the debug sections
//! (a second hindsight-record's release binary, sampled: 72 of its 89 MiB), all of it
//! counted in the recorder's RSS. The symbolizer uses this to name frames
//! of modules with more DWARF than it can afford from their symbol table
//! alone. Only 64-bit little-endian files are read (what x86-64 and arm64
//! run); anything else reads as carrying no debug info.

use std::{
    collections::HashMap,
    fs::File,
    io,
    ops::ControlFlow,
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
};

/// `SHF_COMPRESSED`: the section starts with an `Elf64_Chdr` that gives
/// its size once inflated (what blazesym holds in memory).
const SHF_COMPRESSED: u64 = 0x800;

/// Where distributions install separate debug files (blazesym's defaults).
const DEBUG_DIRS: [&str; 2] = ["/usr/lib/debug", "/lib/debug"];

/// What a module says about its debug info.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DebugSections {
    /// Bytes of `.debug_*` and `.zdebug_*` sections, inflated.
    pub dwarf_bytes: u64,
    /// The file name `.gnu_debuglink` names.
    pub debug_link: Option<String>,
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn read_at(file: &File, offset: u64, len: u64) -> io::Result<Vec<u8>> {
    // Section headers and the small sections read here are far below this;
    // a larger figure is a corrupt header, not a reason to allocate it.
    if len > 16 << 20 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "ELF header field out of range",
        ));
    }
    let mut buf = vec![0; len as usize];
    file.read_exact_at(&mut buf, offset)?;
    Ok(buf)
}

/// One section header.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Section {
    pub name: Vec<u8>,
    pub flags: u64,
    /// Where the section is loaded (its SVMA); 0 for sections not loaded.
    pub address: u64,
    pub offset: u64,
    pub size: u64,
}

/// The section headers of an ELF file; empty when it is not a 64-bit
/// little-endian ELF file or has no section table.
pub fn sections(file: &File) -> io::Result<Vec<Section>> {
    if file.metadata()?.len() < 64 {
        return Ok(Vec::new());
    }
    let header = read_at(file, 0, 64)?;
    let (elf64, little_endian) = (header[4] == 2, header[5] == 1);
    if &header[..4] != b"\x7fELF" || !elf64 || !little_endian {
        return Ok(Vec::new());
    }
    let table_offset = u64_at(&header, 0x28);
    let entry_size = u64::from(u16_at(&header, 0x3a));
    let mut count = u64::from(u16_at(&header, 0x3c));
    let mut names_index = u64::from(u16_at(&header, 0x3e));
    if table_offset == 0 || entry_size < 64 {
        return Ok(Vec::new());
    }
    // Extended numbering: the real figures live in section 0.
    let first = read_at(file, table_offset, 64)?;
    if count == 0 {
        count = u64_at(&first, 32);
    }
    if names_index == 0xffff {
        names_index = u64::from(u32_at(&first, 40));
    }
    let table = read_at(file, table_offset, count.saturating_mul(entry_size))?;
    let section = |i: u64| &table[(i * entry_size) as usize..(i * entry_size + 64) as usize];
    if names_index >= count {
        return Ok(Vec::new());
    }
    let names_header = section(names_index);
    let names = read_at(file, u64_at(names_header, 24), u64_at(names_header, 32))?;
    let name_of = |header: &[u8]| {
        let start = (u32_at(header, 0) as usize).min(names.len());
        let end = names[start..]
            .iter()
            .position(|&b| b == 0)
            .map_or(names.len(), |n| start + n);
        names[start..end].to_vec()
    };
    Ok((0..count)
        .map(|i| {
            let header = section(i);
            Section {
                name: name_of(header),
                flags: u64_at(header, 8),
                address: u64_at(header, 16),
                offset: u64_at(header, 24),
                size: u64_at(header, 32),
            }
        })
        .collect())
}

/// The bytes of `section` (at most 16 MiB: more is refused as corrupt).
pub fn section_data(file: &File, section: &Section) -> io::Result<Vec<u8>> {
    read_at(file, section.offset, section.size)
}

/// Calls `visit` with each `entry_size`-byte entry of `section` in order,
/// the section read 1 MiB at a time, until `visit` breaks: what it broke
/// with, or None when it never did. A large program's tables are tens of
/// MB (a debug test binary's `.symtab` 16 MB, its `.rela.dyn` 15 MB) and
/// read whole they are resident whole: `.rela.dyn` read and copied to
/// name one PLT stub was the recorder's peak beside a test suite, 91 MiB
/// (BENCHMARKS.md, "Two peaks between samples").
fn each_entry<T>(
    file: &File,
    section: &Section,
    entry_size: u64,
    mut visit: impl FnMut(&[u8]) -> ControlFlow<T>,
) -> io::Result<Option<T>> {
    let slice_len = ((1 << 20) / entry_size).max(1) * entry_size;
    let mut slice = Vec::new();
    let mut at = 0;
    while at + entry_size <= section.size {
        let len = (section.size - at).min(slice_len) / entry_size * entry_size;
        slice.resize(len as usize, 0);
        file.read_exact_at(&mut slice, section.offset + at)?;
        at += len;
        for entry in slice.chunks_exact(entry_size as usize) {
            if let ControlFlow::Break(found) = visit(entry) {
                return Ok(Some(found));
            }
        }
    }
    Ok(None)
}

/// Reads the section headers of the ELF file at `path`.
pub fn debug_sections(path: &Path) -> io::Result<DebugSections> {
    let file = File::open(path)?;
    let mut found = DebugSections::default();
    for section in sections(&file)? {
        let (name, flags, offset, size) =
            (&section.name, section.flags, section.offset, section.size);
        if name.starts_with(b".debug_") || name.starts_with(b".zdebug_") {
            let inflated = if flags & SHF_COMPRESSED != 0 && size >= 24 {
                u64_at(&read_at(&file, offset, 24)?, 8)
            } else {
                size
            };
            found.dwarf_bytes = found.dwarf_bytes.saturating_add(inflated);
        } else if name == b".gnu_debuglink" {
            let data = read_at(&file, offset, size)?;
            let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
            found.debug_link = std::str::from_utf8(&data[..end])
                .ok()
                .filter(|s| !s.is_empty())
                .map(str::to_string);
        }
    }
    Ok(found)
}

/// The separate debug files blazesym would consult for `module`, in its
/// order: by build id under the debug directories, then by debug link in
/// the debug directories, beside the module, and under the debug
/// directories by the module's own directory.
fn separate_debug_candidates(
    module: &Path,
    build_id: Option<&[u8]>,
    debug_link: Option<&str>,
) -> Vec<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(id) = build_id.filter(|id| id.len() >= 8) {
        let hex: String = id[1..].iter().map(|b| format!("{b:02x}")).collect();
        for dir in DEBUG_DIRS {
            candidates.push(Path::new(dir).join(format!(".build-id/{:02x}/{hex}.debug", id[0])));
        }
    }
    if let Some(link) = debug_link {
        for dir in DEBUG_DIRS {
            candidates.push(Path::new(dir).join(link));
        }
        if let Some(module_dir) = module.parent() {
            candidates.push(module_dir.join(link));
            let relative = module_dir.strip_prefix("/").unwrap_or(module_dir);
            for dir in DEBUG_DIRS {
                candidates.push(Path::new(dir).join(relative).join(link));
            }
        }
    }
    candidates
}

/// Where the names of `module`'s frames come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DebugInfo {
    /// DWARF of its own, this many bytes inflated.
    Own(u64),
    /// None of its own, but a separate debug file (`libc6-dbg`'s, found by
    /// build id or debug link), whose symbol table names what `.dynsym` does
    /// not.
    Separate(PathBuf),
    /// Neither: its symbol tables only.
    None,
}

/// What naming a frame of `module` can read. None when the module cannot
/// be read.
pub fn module_debug_info(module: &Path) -> Option<DebugInfo> {
    let sections = debug_sections(module).ok()?;
    if sections.dwarf_bytes > 0 {
        return Some(DebugInfo::Own(sections.dwarf_bytes));
    }
    let build_id = blazesym::helper::read_elf_build_id(module).ok().flatten();
    let separate =
        separate_debug_candidates(module, build_id.as_deref(), sections.debug_link.as_deref())
            .into_iter()
            .find(|candidate| candidate.is_file());
    Some(separate.map_or(DebugInfo::None, DebugInfo::Separate))
}

/// One `PT_LOAD` program header: file bytes `offset..offset + size` load
/// at `address`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadSegment {
    pub offset: u64,
    pub size: u64,
    pub address: u64,
    /// `PF_X`: the segment holds code.
    pub executable: bool,
}

/// The `PT_LOAD` segments of the ELF file `module`; None when it cannot be
/// read as a 64-bit little-endian ELF file.
pub fn load_segments(module: &Path) -> Option<Vec<LoadSegment>> {
    const PT_LOAD: u32 = 1;
    let file = File::open(module).ok()?;
    let header = read_at(&file, 0, 64).ok()?;
    if &header[..4] != b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return None;
    }
    let (table_offset, entry_size, count) = (
        u64_at(&header, 0x20),
        u64::from(u16_at(&header, 0x36)),
        u64::from(u16_at(&header, 0x38)),
    );
    if entry_size < 56 {
        return None;
    }
    let table = read_at(&file, table_offset, count * entry_size).ok()?;
    Some(
        (0..count)
            .map(|i| &table[(i * entry_size) as usize..])
            .filter(|entry| u32_at(entry, 0) == PT_LOAD)
            .map(|entry| LoadSegment {
                executable: u32_at(entry, 4) & 1 != 0,
                offset: u64_at(entry, 8),
                address: u64_at(entry, 16),
                size: u64_at(entry, 32),
            })
            .collect(),
    )
}

/// An ELF file's symbol table (`.symtab`, else `.dynsym`), read once for
/// what the symbolizer asks of it beyond blazesym; its names are read only
/// when asked for.
pub struct SymbolTable {
    file: File,
    /// Whether it is `.dynsym`: the file has no `.symtab` (a stripped
    /// binary: Debian's `cc1`, `as`, most of `/usr/bin`).
    dynamic: bool,
    symbols: Vec<u8>,
    strings: Section,
}

/// A symbol table at least this large is not handed to blazesym, nor read
/// whole by [`SymbolTable::read`]: its frames are named by a
/// [`FunctionIndex`]. blazesym maps the file, touches the whole table and
/// sorts an index of 8 B a symbol, all of it in the recorder's RSS, and
/// does it again each time the symbolizer lets go of its modules: a debug
/// build's test binary (670,000 symbols, a 16 MB `.symtab` and a 70 MB
/// `.strtab`) took the recorder from 44 MiB to 74-122 MiB, and rustc's
/// librustc_driver (a 4.0 MB `.symtab`), opened again and again through a
/// Rust build, cost the symbolizer 0.8-1.1 s of CPU in an 11-12 s build
/// (indexed: 0.14-0.30 s in 3 rounds of 5, 0.9-1.4 s in the other 2).
/// libc's and most programs' tables are far below it.
pub const LARGE_SYMBOL_TABLE: u64 = 1 << 20;

/// The table that names `file`'s functions (`.symtab`, else `.dynsym`),
/// whether it is `.dynsym`, and its string table.
fn symbol_table_sections(file: &File) -> Option<(bool, Section, Section)> {
    let sections = sections(file).ok()?;
    let named = |name: &[u8]| sections.iter().find(|s| s.name == name && s.size > 0);
    let (dynamic, (symbols, strings)) = match named(b".symtab") {
        Some(symtab) => (false, (symtab, named(b".strtab")?)),
        None => (true, named(b".dynsym").zip(named(b".dynstr"))?),
    };
    Some((dynamic, symbols.clone(), strings.clone()))
}

/// The size in bytes of the table that names `file`'s functions; None
/// when it has none readable.
pub fn symbol_table_size(file: &Path) -> Option<u64> {
    let (_, symbols, _) = symbol_table_sections(&File::open(file).ok()?)?;
    Some(symbols.size)
}

/// The NUL-terminated name at `offset` in the string table `strings` of
/// `file`, read from the file (a large program's `.strtab` is tens of MB).
fn string_at(file: &File, strings: &Section, offset: u32) -> Option<Vec<u8>> {
    // Longer names are cut here: a Rust or C++ name of this length is
    // already past what anyone reads in a flame graph.
    const MAX_NAME: u64 = 64 << 10;
    let start = u64::from(offset);
    let mut name = Vec::new();
    let mut chunk = [0u8; 512];
    while (name.len() as u64) < MAX_NAME {
        let at = start + name.len() as u64;
        if at >= strings.size {
            break;
        }
        let want = (strings.size - at).min(chunk.len() as u64) as usize;
        let read = file.read_at(&mut chunk[..want], strings.offset + at).ok()?;
        if read == 0 {
            break;
        }
        match chunk[..read].iter().position(|&b| b == 0) {
            Some(end) => {
                name.extend_from_slice(&chunk[..end]);
                return Some(name);
            }
            None => name.extend_from_slice(&chunk[..read]),
        }
    }
    Some(name)
}

/// An ELF symbol's type and binding (`st_info`).
const STT_FUNC: u8 = 2;
const STT_GNU_IFUNC: u8 = 10;
const STB_GLOBAL: u8 = 1;
const STB_WEAK: u8 = 2;

/// perf's preference among the functions at one address
/// (`choose_best_symbol` in its `util/symbol.c`), all but the names: a
/// sized symbol over a sizeless one, not weak over weak, global over
/// local. Ties go on to [`name_preference`].
fn symbol_preference(size: u64, info: u8) -> (bool, bool, bool) {
    let binding = info >> 4;
    (size > 0, binding != STB_WEAK, binding == STB_GLOBAL)
}

/// The rest of perf's preference: fewer leading underscores, the longer
/// name.
fn name_preference(name: &[u8]) -> (std::cmp::Reverse<usize>, usize) {
    let underscores = name.iter().take_while(|&&b| b == b'_').count();
    (std::cmp::Reverse(underscores), name.len())
}

/// Whether a symbol table entry is a function defined in its file, as perf
/// counts them (`elf_sym__is_function`).
fn is_defined_function(symbol: &[u8]) -> bool {
    matches!(symbol[4] & 0xf, STT_FUNC | STT_GNU_IFUNC)
        && u16_at(symbol, 6) != 0
        && u32_at(symbol, 0) != 0
}

/// One function of a [`FunctionIndex`]: its start, its size and perf's
/// [`symbol_preference`] for it packed in 32 bits, and where its name is in
/// the string table. 12 bytes.
#[derive(Clone, Copy, Debug)]
struct IndexedFunction {
    /// From [`FunctionIndex::base`].
    start: u32,
    /// The size in the low [`IndexedFunction::SIZE_BITS`] bits (a larger
    /// one is cut to their most: no function is 512 MiB), the preference
    /// in the three above.
    size_and_preference: u32,
    name: u32,
}

impl IndexedFunction {
    const SIZE_BITS: u32 = 29;
    const SIZE_MASK: u32 = (1 << Self::SIZE_BITS) - 1;

    fn new(start: u32, size: u64, info: u8, name: u32) -> Self {
        let (sized, not_weak, global) = symbol_preference(size, info);
        let preference = u32::from(sized) << 2 | u32::from(not_weak) << 1 | u32::from(global);
        let size = u32::try_from(size).unwrap_or(u32::MAX).min(Self::SIZE_MASK);
        IndexedFunction {
            start,
            size_and_preference: preference << Self::SIZE_BITS | size,
            name,
        }
    }

    fn size(&self) -> u32 {
        self.size_and_preference & Self::SIZE_MASK
    }

    fn set_size(&mut self, size: u32) {
        self.size_and_preference =
            self.size_and_preference & !Self::SIZE_MASK | size.min(Self::SIZE_MASK);
    }

    fn preference(&self) -> u32 {
        self.size_and_preference >> Self::SIZE_BITS
    }
}

/// The functions of a symbol table too large for blazesym
/// ([`LARGE_SYMBOL_TABLE`]), sorted by address, 12 bytes each; the table is
/// read a slice at a time and the names from the file only for the frames
/// they name. One function per address, the one perf names; a sizeless
/// function reaches the next one, as perf extends it.
pub struct FunctionIndex {
    file: File,
    strings: Section,
    /// The lowest address of the file's code: functions are kept as 32-bit
    /// offsets from it.
    base: u64,
    functions: Vec<IndexedFunction>,
}

impl FunctionIndex {
    /// Indexes the functions of `file`'s symbol table; None when it has
    /// none readable or more than `max_functions`.
    ///
    /// Its memory is the index alone: the table is read a slice at a time,
    /// the index allocated once at the most it can need (pages never
    /// written are never resident) and sorted and thinned in place. A
    /// growing vector of (function, preference) and a stable sort beside it
    /// peaked at 25 MiB for a test binary's 6 MiB index.
    pub fn build(file: &Path, max_functions: usize) -> Option<FunctionIndex> {
        const SHF_EXECINSTR: u64 = 0x4;
        let file = File::open(file).ok()?;
        let (_, symbols, strings) = symbol_table_sections(&file)?;
        let base = sections(&file)
            .ok()?
            .iter()
            .filter(|s| s.flags & SHF_EXECINSTR != 0 && s.address != 0)
            .map(|s| s.address)
            .min()?;
        let most = usize::try_from(symbols.size / 24).ok()?.min(max_functions);
        let mut functions: Vec<IndexedFunction> = Vec::with_capacity(most);
        let too_many = each_entry(&file, &symbols, 24, |symbol| {
            let start = u64_at(symbol, 8)
                .checked_sub(base)
                .and_then(|start| u32::try_from(start).ok());
            match start.filter(|_| is_defined_function(symbol)) {
                None => ControlFlow::Continue(()),
                Some(_) if functions.len() >= max_functions => ControlFlow::Break(()),
                Some(start) => {
                    let size = u64_at(symbol, 16);
                    functions.push(IndexedFunction::new(
                        start,
                        size,
                        symbol[4],
                        u32_at(symbol, 0),
                    ));
                    ControlFlow::Continue(())
                }
            }
        });
        if too_many.ok()?.is_some() {
            return None;
        }
        // Among functions alike down to their names' length perf takes the
        // table's first; in-place sorting forgets that order, and the
        // name's place in the string table stands in for it.
        functions.sort_unstable_by_key(|f| (f.start, f.name));
        let mut kept = 0;
        let mut first = 0;
        while first < functions.len() {
            let start = functions[first].start;
            let mut end = first + 1;
            while functions.get(end).is_some_and(|f| f.start == start) {
                end += 1;
            }
            let same = &functions[first..end];
            let best = match same {
                [only] => *only,
                _ => {
                    let top = same.iter().map(IndexedFunction::preference).max()?;
                    // max_by_key keeps the last of equals: hence rev.
                    *(same.iter().rev())
                        .filter(|f| f.preference() == top)
                        .max_by_key(|f| {
                            string_at(&file, &strings, f.name).map(|name| name_preference(&name))
                        })?
                }
            };
            functions[kept] = best;
            kept += 1;
            first = end;
        }
        functions.truncate(kept);
        functions.shrink_to_fit();
        // A sizeless function reaches the next one (perf's
        // `symbols__fixup_end`); the last reaches no further than itself.
        for i in 1..functions.len() {
            if functions[i - 1].size() == 0 {
                let reach = functions[i].start - functions[i - 1].start;
                functions[i - 1].set_size(reach);
            }
        }
        Some(FunctionIndex {
            file,
            strings,
            base,
            functions,
        })
    }

    /// Bytes it holds in memory.
    pub fn bytes(&self) -> usize {
        self.functions.capacity() * std::mem::size_of::<IndexedFunction>()
    }

    /// The function at `address` (its start and its name as the table
    /// spells it, mangled or not).
    pub fn lookup(&self, address: u64) -> Option<(u64, String)> {
        let offset = u32::try_from(address.checked_sub(self.base)?).ok()?;
        let after = self.functions.partition_point(|f| f.start <= offset);
        let function = self.functions[..after].last()?;
        let inside = offset == function.start || offset - function.start < function.size();
        if !inside {
            return None;
        }
        let name = string_at(&self.file, &self.strings, function.name)?;
        (!name.is_empty()).then(|| {
            (
                self.base + u64::from(function.start),
                String::from_utf8_lossy(&name).into_owned(),
            )
        })
    }
}

impl SymbolTable {
    /// The symbol table of `file`; None when it has none readable, or when
    /// it is [`LARGE_SYMBOL_TABLE`] or more (see [`FunctionIndex`]).
    pub fn read(file: &Path) -> Option<SymbolTable> {
        let file = File::open(file).ok()?;
        let (dynamic, symbols, strings) = symbol_table_sections(&file)?;
        if symbols.size >= LARGE_SYMBOL_TABLE {
            return None;
        }
        Some(SymbolTable {
            symbols: section_data(&file, &symbols).ok()?,
            strings,
            dynamic,
            file,
        })
    }

    fn entries(&self) -> impl Iterator<Item = &[u8]> {
        self.symbols.chunks_exact(24)
    }

    /// The lowest address a symbol starts at, where `.dynsym` is the
    /// file's only table; `u64::MAX` when no symbol there is defined. None
    /// for a `.symtab`.
    ///
    /// No symbol names an address below it, yet blazesym answers such an
    /// address only after stepping over every undefined symbol (all at
    /// address 0: 151 in Debian's `as`) twice, and a frame not named is
    /// looked up twice. In a parallel build of C, 149 of `as`'s 152 frames
    /// lay there (BENCHMARKS.md, "Frames below a stripped program's first
    /// symbol").
    pub fn stripped_start(&self) -> Option<u64> {
        const SHN_UNDEF: u16 = 0;
        self.dynamic.then(|| {
            self.entries()
                .filter(|symbol| u16_at(symbol, 6) != SHN_UNDEF)
                .map(|symbol| u64_at(symbol, 8))
                .min()
                .unwrap_or(u64::MAX)
        })
    }

    /// The name perf shows for each address that several functions share,
    /// by perf's own choice among them (`choose_best_symbol` in its
    /// `util/symbol.c`): a sized symbol over a sizeless one, not weak over
    /// weak, global over local, fewer leading underscores, the longer
    /// name, else the first in the table. libc's debug file has four names
    /// for `read` (`__libc_read`, `__GI___libc_read`, `__GI___read`,
    /// `read`) and 1,776 such addresses; blazesym names the first it
    /// finds, perf and the program's source say `read`. At most `limit`
    /// addresses (none past it). Mangled names (C++, Rust) are left to
    /// blazesym, which demangles them.
    pub fn preferred_aliases(&self, limit: usize) -> HashMap<u64, Box<str>> {
        // (address, index) of every defined function; names are read only
        // where an address has several (1.1-3.3 ms for cc1's 27,107
        // functions at 800 addresses, all C++ and so left alone; 0.5-0.8 ms
        // for libc's debug file).
        let mut functions: Vec<(u64, usize)> = self
            .entries()
            .enumerate()
            .filter(|(_, s)| {
                matches!(s[4] & 0xf, STT_FUNC | STT_GNU_IFUNC)
                    && u16_at(s, 6) != 0
                    && u64_at(s, 8) != 0
            })
            .map(|(index, s)| (u64_at(s, 8), index))
            .collect();
        functions.sort_unstable();
        let shared: Vec<&[(u64, usize)]> = functions
            .chunk_by(|a, b| a.0 == b.0)
            .filter(|same| same.len() > 1)
            .collect();
        if shared.is_empty() || shared.len() > limit {
            return HashMap::new();
        }
        let Ok(strings) = section_data(&self.file, &self.strings) else {
            return HashMap::new();
        };
        let symbol = |index: usize| &self.symbols[index * 24..index * 24 + 24];
        let name_of = |index: usize| -> &[u8] {
            let rest = strings
                .get(u32_at(symbol(index), 0) as usize..)
                .unwrap_or_default();
            &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())]
        };
        let mut aliases = HashMap::new();
        for same in shared {
            // The table's first of equals is perf's choice, and max_by_key
            // keeps the last: hence rev.
            let best = same.iter().rev().max_by_key(|&&(_, index)| {
                let symbol = symbol(index);
                (
                    symbol_preference(u64_at(symbol, 16), symbol[4]),
                    name_preference(name_of(index)),
                )
            });
            let Some(&(address, index)) = best else {
                continue;
            };
            let name = name_of(index);
            let differ = same.iter().any(|&(_, other)| name_of(other) != name);
            if differ && !name.is_empty() && !(name.starts_with(b"_Z") || name.starts_with(b"_R")) {
                aliases.insert(address, String::from_utf8_lossy(name).into());
            }
        }
        aliases
    }
}

/// The virtual address at which byte `offset` of a module with `segments`
/// is loaded: how a frame found by file offset is looked up in a separate
/// debug file, which holds no code (and whose own program headers say
/// nothing of file offsets).
pub fn load_address(segments: &[LoadSegment], offset: u64) -> Option<u64> {
    segments
        .iter()
        .find(|s| s.offset <= offset && offset < s.offset + s.size)
        .map(|s| offset - s.offset + s.address)
}

/// The kernel's vDSO (`[vdso]` in every process's map: `clock_gettime`,
/// `gettimeofday`), as a file the symbolizer and the unwinder can open:
/// the recorder's own copy, the same image every 64-bit process of this
/// kernel maps, written once to a memfd. `/proc/self/fd/N`, or None when
/// there is no vDSO or it cannot be copied.
pub fn vdso_path() -> Option<&'static str> {
    static VDSO: std::sync::OnceLock<Option<(File, String)>> = std::sync::OnceLock::new();
    VDSO.get_or_init(|| {
        use std::io::Write;
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: getauxval only reads the auxiliary vector.
        let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        let length = maps.lines().find_map(|line| {
            let range = line.strip_suffix("[vdso]")?.split_whitespace().next()?;
            let (start, end) = range.split_once('-')?;
            let (start, end) = (
                u64::from_str_radix(start, 16).ok()?,
                u64::from_str_radix(end, 16).ok()?,
            );
            (start == base).then_some(end - start)
        })?;
        // SAFETY: the kernel maps the vDSO readable at `base` for `length`
        // bytes for the life of the process.
        let image = unsafe { std::slice::from_raw_parts(base as *const u8, length as usize) };
        // SAFETY: memfd_create reads the NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"hindsight-vdso".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: the kernel just gave us this descriptor, and only us.
        let mut file = unsafe { File::from_raw_fd(fd) };
        file.write_all(image).ok()?;
        let path = format!("/proc/self/fd/{}", file.as_raw_fd());
        Some((file, path))
    })
    .as_ref()
    .map(|(_, path)| path.as_str())
}

/// The sections that hold PLT stubs: the few instructions through which a
/// call into another module jumps.
fn is_plt(name: &[u8]) -> bool {
    matches!(name, b".plt" | b".plt.sec" | b".plt.got")
}

/// The file ranges of `module`'s PLT sections (empty when it has none, or
/// when it is not an x86-64 ELF file, whose stubs [`plt_stub_name`] reads).
pub fn plt_ranges(module: &Path) -> Vec<std::ops::Range<u64>> {
    const EM_X86_64: u16 = 62;
    let Ok(file) = File::open(module) else {
        return Vec::new();
    };
    match read_at(&file, 0, 64) {
        Ok(header) if header.len() == 64 && u16_at(&header, 0x12) == EM_X86_64 => {}
        _ => return Vec::new(),
    }
    sections(&file)
        .unwrap_or_default()
        .into_iter()
        .filter(|s| is_plt(&s.name) && s.size > 0)
        .map(|s| s.offset..s.offset + s.size)
        .collect()
}

/// The name of the x86-64 PLT stub at file `offset` of `module`, as
/// objdump and perf give it: `target@plt`. Symbol tables do not cover
/// stubs, so without this a sample in one (libc calls its own `memcpy`
/// through one) is a frame without a name. The target is the relocation of
/// the GOT slot the stub jumps through (`jmp *disp32(%rip)`; the lazy stub
/// of an IBT `.plt` pushes its relocation's index instead); a libc
/// `IRELATIVE` slot names the `IFUNC` symbol whose resolver it holds, where
/// objdump says `*ABS*+0x<resolver>` (what is said here too when no
/// exported symbol has that value). A stub with no relocation (the PLT's
/// first entry, which runs the lazy binder) is `[plt]`.
pub fn plt_stub_name(module: &Path, offset: u64) -> Option<String> {
    const R_X86_64_IRELATIVE: u32 = 37;
    let file = File::open(module).ok()?;
    let sections = sections(&file).ok()?;
    let named = |name: &[u8]| sections.iter().find(|s| s.name == name);
    let plt = sections
        .iter()
        .find(|s| is_plt(&s.name) && s.offset <= offset && offset < s.offset + s.size)?;
    let entry_size = if plt.name == b".plt.got" { 8 } else { 16 };
    let entry_start = plt.offset + (offset - plt.offset) / entry_size * entry_size;
    let code = read_at(&file, entry_start, entry_size).ok()?;
    let entry_address = plt.address + (entry_start - plt.offset);
    // (r_offset, r_info, r_addend)
    let relocation = |entry: &[u8]| (u64_at(entry, 0), u64_at(entry, 8), u64_at(entry, 16));
    let jump = code
        .windows(2)
        .position(|w| w == [0xff, 0x25])
        .filter(|&at| at + 6 <= code.len());
    let filled_by = match jump {
        Some(at) => {
            let displacement = i64::from(u32_at(&code, at + 2) as i32);
            let slot = (entry_address + at as u64 + 6).wrapping_add_signed(displacement);
            [b".rela.plt".as_slice(), b".rela.dyn"]
                .into_iter()
                .filter_map(named)
                .find_map(|relocations| {
                    each_entry(&file, relocations, 24, |entry| match relocation(entry) {
                        found if found.0 == slot => ControlFlow::Break(found),
                        _ => ControlFlow::Continue(()),
                    })
                    .ok()
                    .flatten()
                })
        }
        None => code
            .iter()
            .position(|&b| b == 0x68)
            .filter(|&at| at + 5 <= code.len())
            .and_then(|at| {
                let index = u64::from(u32_at(&code, at + 1));
                let jump_slots = named(b".rela.plt").filter(|s| index < s.size / 24)?;
                let entry = read_at(&file, jump_slots.offset + index * 24, 24).ok()?;
                Some(relocation(&entry))
            }),
    };
    let Some((_, info, addend)) = filled_by else {
        return Some("[plt]".to_owned());
    };
    // Read an entry at a time, never whole: a large library's dynamic
    // symbols and their names are megabytes.
    let dynamic = named(b".dynsym").zip(named(b".dynstr"));
    let name_of = |symbol: &[u8], strings: &Section| {
        string_at(&file, strings, u32_at(symbol, 0))
            .map(|name| String::from_utf8_lossy(&name).into_owned())
    };
    let index = info >> 32;
    let target = if index != 0 {
        let (symbols, strings) = dynamic.filter(|(symbols, _)| index < symbols.size / 24)?;
        name_of(
            &read_at(&file, symbols.offset + index * 24, 24).ok()?,
            strings,
        )?
    } else if info as u32 == R_X86_64_IRELATIVE {
        dynamic
            .and_then(|(symbols, strings)| {
                each_entry(&file, symbols, 24, |symbol| {
                    if symbol[4] & 0xf == STT_GNU_IFUNC && u64_at(symbol, 8) == addend {
                        ControlFlow::Break(name_of(symbol, strings))
                    } else {
                        ControlFlow::Continue(())
                    }
                })
                .ok()
                .flatten()
                .flatten()
            })
            .unwrap_or_else(|| format!("*ABS*+{addend:#x}"))
    } else {
        return Some("[plt]".to_owned());
    };
    Some(format!("{target}@plt"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Section name and size as `readelf -SW` prints them, an independent
    /// reader of the same file.
    fn readelf_dwarf_bytes(path: &Path) -> Option<u64> {
        let out = std::process::Command::new("readelf")
            .args(["-SW", "--"])
            .arg(path)
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        let mut total = 0;
        for line in text.lines() {
            let Some(rest) = line.trim_start().strip_prefix('[') else {
                continue;
            };
            let fields: Vec<&str> = rest.split_once(']')?.1.split_whitespace().collect();
            if fields.len() > 4 && fields[0].starts_with(".debug_") {
                total += u64::from_str_radix(fields[4], 16).ok()?;
            }
        }
        Some(total)
    }

    #[test]
    fn dwarf_of_this_test_binary_matches_readelf() {
        let exe = std::env::current_exe().unwrap();
        let ours = debug_sections(&exe).unwrap();
        assert!(ours.dwarf_bytes > 0, "a test build carries DWARF");
        let theirs = readelf_dwarf_bytes(&exe).expect("readelf (binutils, beside the linker)");
        assert_eq!(ours.dwarf_bytes, theirs);
    }

    #[test]
    fn not_elf_reads_as_no_debug_info() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("script.sh");
        std::fs::write(
            &text,
            "#!/bin/sh\necho this is not an ELF file, but it is long enough\n",
        )
        .unwrap();
        assert_eq!(debug_sections(&text).unwrap(), DebugSections::default());
        std::fs::write(&text, "#!/bin/sh\n").unwrap();
        assert_eq!(debug_sections(&text).unwrap(), DebugSections::default());
        assert!(debug_sections(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn separate_debug_files_are_looked_up_by_build_id_then_link() {
        let build_id = [0x93, 0xac, 0x61, 0xec, 0x5a, 0x8e, 0xb1, 0x39];
        let candidates = separate_debug_candidates(
            Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6"),
            Some(&build_id),
            Some("libc.so.6.debug"),
        );
        assert_eq!(
            candidates[0],
            Path::new("/usr/lib/debug/.build-id/93/ac61ec5a8eb139.debug")
        );
        assert!(candidates.contains(&PathBuf::from(
            "/usr/lib/debug/usr/lib/x86_64-linux-gnu/libc.so.6.debug"
        )));
    }

    /// Every `LOAD` segment of this test binary, as `readelf -lW` prints
    /// them: a byte inside one loads at its address plus the same distance.
    #[test]
    fn file_offsets_map_to_load_addresses_like_readelf() {
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new("readelf")
            .args(["-lW", "--"])
            .arg(&exe)
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
        let ours = load_segments(&exe).unwrap();
        let mut segments = 0;
        for line in text.lines().filter(|l| l.trim_start().starts_with("LOAD")) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (offset, vaddr, size) = (hex(fields[1]), hex(fields[2]), hex(fields[4]));
            if size > 8 {
                assert_eq!(load_address(&ours, offset + 7), Some(vaddr + 7), "{line}");
                segments += 1;
            }
        }
        assert!(segments >= 2, "{text}");
    }

    #[test]
    fn an_index_reaches_a_sizeless_function_to_the_next_and_holds_no_more_than_its_most() {
        let dir = tempfile::tempdir().unwrap();
        // `bare` is written in assembly with no `.size`: a symbol of size
        // 0, like many hand-written routines; `after` follows it.
        let exe = crate::symbolize::tests::compile_c(
            dir.path(),
            "__asm__(\".text\\n.globl bare\\n.type bare,@function\\nbare:\\n\"\n\
             \"nop\\nnop\\nnop\\nnop\\nret\\n\");\n\
             int after(int x) { return x + 1; }\n\
             int main(int argc, char **argv) { return after(argc); }\n",
            &["-O1"],
        );
        let index = FunctionIndex::build(&exe, usize::MAX).unwrap();
        let symbols = crate::symbolize::tests::readelf_symbols(&exe, "-s");
        let address = |name: &str| symbols.iter().find(|s| s.4 == name).unwrap().0;
        let (bare, after) = (address("bare"), address("after"));
        assert!(bare < after);
        let named = |address| index.lookup(address);
        assert_eq!(named(bare + 4), Some((bare, "bare".to_owned())));
        // Up to the next function (with its alignment padding), not past.
        assert_eq!(named(after - 1), Some((bare, "bare".to_owned())));
        assert_eq!(named(after), Some((after, "after".to_owned())));
        // Every function counts toward the most, before any is let go.
        let functions = index.functions.len();
        assert!(FunctionIndex::build(&exe, functions).is_some());
        assert!(FunctionIndex::build(&exe, functions - 1).is_none());
    }

    /// Every PLT stub's name against objdump's label for it, in a program
    /// (symbol relocations) and in libc (mostly `IRELATIVE`, for which the
    /// `IFUNC` is named where objdump prints `*ABS*+0x<resolver>`).
    #[test]
    fn plt_stubs_are_named_as_objdump_names_them() {
        for module in ["/usr/bin/bash", "/lib/x86_64-linux-gnu/libc.so.6"] {
            let path = Path::new(module);
            let ranges = plt_ranges(path);
            assert!(!ranges.is_empty(), "{module} has a PLT");
            let out = std::process::Command::new("objdump")
                .args([
                    "-d", "-j", ".plt", "-j", ".plt.sec", "-j", ".plt.got", module,
                ])
                .output()
                .expect("objdump runs");
            let text = String::from_utf8_lossy(&out.stdout);
            let file = File::open(path).unwrap();
            let sections = sections(&file).unwrap();
            let mut checked = 0;
            for line in text.lines() {
                // `000000000002f030 <endgrent@plt>:`
                let Some((address, label)) = line.split_once(" <") else {
                    continue;
                };
                let Some(label) = label.strip_suffix(">:") else {
                    continue;
                };
                let address = u64::from_str_radix(address, 16).unwrap();
                let section = sections
                    .iter()
                    .find(|s| {
                        is_plt(&s.name) && s.address <= address && address < s.address + s.size
                    })
                    .unwrap();
                // The middle of the stub, as a sample lands.
                let offset = address - section.address + section.offset + 3;
                assert!(ranges.iter().any(|r| r.contains(&offset)));
                let ours = plt_stub_name(path, offset).unwrap();
                if label.contains("@plt-0x") {
                    assert_eq!(ours, "[plt]", "{module} {address:#x}");
                } else if label.starts_with("*ABS*") {
                    assert!(ours.ends_with("@plt"), "{module} {address:#x}: {ours}");
                } else {
                    assert_eq!(ours, label, "{module} {address:#x}");
                }
                checked += 1;
            }
            assert!(
                checked > 10,
                "{module}: {checked} stubs in objdump's output"
            );
        }
        // Code that is not a stub is not named as one.
        assert_eq!(plt_stub_name(Path::new("/usr/bin/bash"), 0), None);
    }
}
