//! The symbolizer thread: names each new frame once, off the ring-buffer
//! thread, so a slow debug-info parse never delays draining the kernel.
//!
//! Frames arrive already identified by module file and offset (see
//! [`crate::stacks`]), so names come from the file on disk and a process
//! that exited since it was sampled still gets them. User frames are named
//! by blazesym from the ELF symbols and DWARF (PLT stubs, which no symbol
//! covers, from their relocations: `memcpy@plt`); frames in anonymous memory
//! from `/tmp/perf-<pid>.map` (what JITs write for perf), read through the
//! process's own root and only when it is the process's own regular file
//! (see [`ProcessTmp::read_map`]), again while a frame waits for a name and
//! once after the process exits (a JVM writes its map as it exits);
//! kernel frames from
//! `/proc/kallsyms`, read once. The request queue is bounded: when it is
//! full the ring thread writes the frame without a name instead of waiting.

use ahash::{AHashMap, AHashSet};
use std::{
    io::Read,
    os::unix::fs::{MetadataExt, OpenOptionsExt},
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        mpsc::{sync_channel, Receiver, Sender, SyncSender, TryRecvError, TrySendError},
        Arc, OnceLock,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use blazesym::symbolize::{
    source::{Elf, Source},
    Input, Symbolized, Symbolizer,
};

use crate::{
    elf::{
        load_address, load_segments, module_debug_info, plt_ranges, plt_stub_name,
        symbol_table_size, DebugInfo, FunctionIndex, LoadSegment, SymbolTable, LARGE_SYMBOL_TABLE,
    },
    procfs::self_resident_bytes,
    stacks::FrameRow,
};

/// Frames waiting to be named; beyond this they are written unnamed.
const QUEUE: usize = 16 * 1024;

/// A frame in the symbolizer's queue. Boxed because std's bounded channel
/// writes every slot's stamp when it is made: 16K slots of a 216-byte
/// [`FrameRow`] were 3.5 MiB resident for the life of the recorder, for a
/// queue that is nearly always empty; boxed, a slot is 16 bytes.
pub type QueuedFrame = Box<FrameRow>;

/// How long a stopping recorder lets the symbolizer go on naming the frames
/// still queued; the rest are written unnamed (and counted). A full queue
/// behind a slow parse on a loaded host kept a debug recorder naming for 8
/// minutes past its `--duration`; its systemd unit allows 60 s to stop
/// before SIGKILL, and the last chunk is closed only after this.
pub const NAMING_AT_STOP: Duration = Duration::from_secs(10);

/// `/proc/kallsyms`'s code symbols, sorted by address; modules' symbols
/// carry their module as `name [module]`. The names live in one buffer
/// (tens of thousands of small strings would cost twice the memory).
#[derive(Debug, Default)]
pub struct Kallsyms {
    /// Each symbol's address, sorted; and where its name ends in `names`
    /// (the same index). Two vectors, not one of pairs, each of exactly its
    /// length: the pairs, collected in place from the parse's 40-byte
    /// entries, kept their 5 MiB for the life of the recorder (a tenth of
    /// its peak under a switch storm); these take 1.5 MiB for 121,000
    /// symbols.
    addresses: Vec<u64>,
    name_ends: Vec<u32>,
    names: String,
}

impl Kallsyms {
    pub fn parse(text: &str) -> Self {
        let mut entries: Vec<(u64, &str, Option<&str>)> = text
            .lines()
            .filter_map(|line| {
                let mut fields = line.split_whitespace();
                let address = u64::from_str_radix(fields.next()?, 16).ok()?;
                let kind = fields.next()?;
                let name = fields.next()?;
                // Only code: text symbols, global or local.
                if !matches!(kind, "t" | "T" | "w" | "W") || address == 0 {
                    return None;
                }
                Some((address, name, fields.next()))
            })
            .collect();
        entries.sort_by_key(|e| e.0);
        let mut addresses = Vec::with_capacity(entries.len());
        let mut name_ends = Vec::with_capacity(entries.len());
        let mut names = String::new();
        for (address, name, module) in entries {
            names.push_str(name);
            if let Some(module) = module {
                names.push(' ');
                names.push_str(module);
            }
            addresses.push(address);
            name_ends.push(names.len() as u32);
        }
        names.shrink_to_fit();
        Kallsyms {
            addresses,
            name_ends,
            names,
        }
    }

    /// The function holding `address` and its module (`[kernel]` or `[ext4]`).
    pub fn lookup(&self, address: u64) -> Option<(&str, &str)> {
        let i = self.addresses.partition_point(|&a| a <= address);
        let end = *self.name_ends[..i].last()? as usize;
        let start = i
            .checked_sub(2)
            .map_or(0, |before| self.name_ends[before] as usize);
        let name = &self.names[start..end];
        Some(match name.split_once(' ') {
            Some((function, module)) => (function, module),
            None => (name, "[kernel]"),
        })
    }
}

/// A JIT's `/tmp/perf-<pid>.map`: `START SIZE name` per line, hex.
pub fn perf_map_lookup(text: &str, address: u64) -> Option<&str> {
    text.lines().find_map(|line| {
        let mut fields = line.splitn(3, ' ');
        let start = u64::from_str_radix(fields.next()?.trim_start_matches("0x"), 16).ok()?;
        let size = u64::from_str_radix(fields.next()?.trim_start_matches("0x"), 16).ok()?;
        let name = fields.next()?.trim();
        (start <= address && address < start.saturating_add(size)).then_some(name)
    })
}

/// How a module's frames are named.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Naming {
    /// From its own DWARF: function, file, line and inlined functions.
    Dwarf,
    /// From its symbol tables (`.symtab`, else `.dynsym`): functions only.
    Symbols,
    /// From the symbol table of its separate debug file (found by build id
    /// or debug link): functions only, internal ones too. Not from that
    /// file's DWARF: compressed, libc's inflates to 10 MiB in the recorder
    /// (it took a switch storm's peak from 59 to 71 MiB), for a file and
    /// line.
    SeparateSymbols(PathBuf),
}

/// What is remembered of a module between its frames.
#[derive(Debug)]
struct ModuleFacts {
    naming: Naming,
    /// Its `PT_LOAD` program headers (empty when unreadable).
    segments: Vec<LoadSegment>,
    /// File ranges of its PLT stubs, which no symbol covers.
    plt: Vec<std::ops::Range<u64>>,
    /// Below this address its own symbol tables name nothing
    /// ([`SymbolTable::stripped_start`]); 0 when that is not known.
    symbols_start: u64,
    /// perf's name for each address several functions share, from the
    /// file that names it ([`SymbolTable::preferred_aliases`]).
    aliases: std::collections::HashMap<u64, Box<str>>,
    /// Times it was opened while named from its DWARF.
    dwarf_opens: u32,
    /// The build id of the file these facts were read from, when it has one.
    build_id: Option<String>,
    /// The files it is named from (itself, its debug file) whose symbol
    /// tables are too large for blazesym: named by a [`FunctionIndex`].
    indexed: Vec<PathBuf>,
}

/// What a frame's lookup found.
enum Found<'a> {
    /// blazesym's answer, from DWARF or from a symbol table.
    Symbol(blazesym::symbolize::Sym<'a>),
    /// A [`FunctionIndex`]'s: the name of the function, perf's choice
    /// among those at its address.
    Indexed(String),
}

/// A file's [`FunctionIndex`] (None when it has none within
/// [`MAX_INDEXED_FUNCTIONS`]), and when it was last used.
struct IndexedFile {
    index: Option<FunctionIndex>,
    used: u64,
}

/// The [`FunctionIndex`]es built, by file.
type FunctionIndexes = AHashMap<PathBuf, IndexedFile>;

/// Fills in what blazesym knows about `offset` in the ELF file `path`, and
/// where `offset` loads in the module's own addresses (which a debug file
/// found later is looked up by).
fn name_user_frame(
    symbolizer: &Symbolizer,
    indexes: &FunctionIndexes,
    demangled: &mut DemangledNames,
    path: &str,
    offset: u64,
    module_facts: &ModuleFacts,
    row: &mut FrameRow,
) {
    row.elf_address = load_address(&module_facts.segments, offset);
    // Before the symbols: a PLT stub lies in no function, but a symbol
    // before it (`_init`, at the end of `.init`) may seem to reach it.
    if module_facts.plt.iter().any(|stubs| stubs.contains(&offset)) {
        row.function = plt_stub_name(Path::new(path), offset);
        if row.function.is_some() {
            return;
        }
    }
    let naming = &module_facts.naming;
    let lookup = |file: &Path, dwarf: bool, input: Input<u64>| {
        if module_facts.indexed.iter().any(|indexed| indexed == file) {
            let address = match input {
                Input::FileOffset(offset) => load_address(&module_facts.segments, offset)?,
                Input::VirtOffset(address) | Input::AbsAddr(address) => address,
            };
            let (_, name) = indexes.get(file)?.index.as_ref()?.lookup(address)?;
            return Some(Found::Indexed(name));
        }
        let mut elf = Elf::new(file);
        elf.debug_syms = dwarf;
        match symbolizer.symbolize_single(&Source::Elf(elf), input) {
            Ok(Symbolized::Sym(sym)) => Some(Found::Symbol(sym)),
            _ => None,
        }
    };
    let module = Path::new(path);
    let own_symbols_may_name = |offset: u64| {
        load_address(&module_facts.segments, offset)
            .is_none_or(|address| address >= module_facts.symbols_start)
    };
    let find = |offset: u64| {
        let found = match naming {
            Naming::Dwarf => lookup(module, true, Input::FileOffset(offset)),
            Naming::SeparateSymbols(debug) => load_address(&module_facts.segments, offset)
                .and_then(|address| lookup(debug, false, Input::VirtOffset(address))),
            Naming::Symbols => None,
        };
        // What DWARF or a debug file could not name, the module's own
        // symbol tables may still.
        found.or_else(|| {
            own_symbols_may_name(offset)
                .then(|| lookup(module, false, Input::FileOffset(offset)))
                .flatten()
        })
    };
    // A return address just past a call that never returns (libc's `exit`
    // ends with its call to `__run_exit_handlers`) lies past its function's
    // end: the call before it names it, as perf and samply look return
    // addresses up.
    let Some(found) = find(offset).or_else(|| find(offset.checked_sub(1)?)) else {
        return;
    };
    let sym = match found {
        Found::Symbol(sym) => sym,
        Found::Indexed(name) => {
            row.function = Some(demangled.of(&name).to_owned());
            return;
        }
    };
    row.function = Some(match module_facts.aliases.get(&sym.addr) {
        Some(name) => name.to_string(),
        None => demangled.of(&sym.name).to_owned(),
    });
    if let Some(code) = &sym.code_info {
        let file = match &code.dir {
            Some(dir) => dir.join(&*code.file).to_string_lossy().into_owned(),
            None => code.file.to_string_lossy().into_owned(),
        };
        row.file = Some(file);
        row.line = code.line;
    }
    if !sym.inlined.is_empty() {
        let names: Vec<String> = (sym.inlined.iter())
            .map(|f| demangled.of(&f.name).to_owned())
            .collect();
        row.inlined = Some(names.join(";"));
    }
}

/// Bytes of names kept by [`DemangledNames`], mangled and demangled; past
/// this it starts afresh. A build's `cc1` frames name about 1,700 C++
/// functions, some 0.4 MiB of names.
const MAX_DEMANGLED_BYTES: usize = 1 << 20;

/// Function names demangled once, kept by their mangled names across
/// modules and processes. blazesym demangled every name it found: a
/// function is named for each of its sampled addresses, and in a parallel
/// build `cc1`'s C++ names (2.7 addresses a function) took a fifth of the
/// symbolizer's time in `cpp_demangle`.
#[derive(Default)]
struct DemangledNames {
    names: AHashMap<Box<str>, Box<str>>,
    bytes: usize,
}

impl DemangledNames {
    /// `name` demangled as blazesym would with no language known: as a
    /// Rust name (`{:#}`, without the hash), else as a C++ one, else as it is.
    fn of(&mut self, name: &str) -> &str {
        if !self.names.contains_key(name) {
            let demangled = rustc_demangle::try_demangle(name)
                .map(|d| format!("{d:#}"))
                .ok()
                .or_else(|| cpp_demangle::Symbol::new(name).ok()?.demangle().ok())
                .unwrap_or_else(|| name.to_owned());
            if self.bytes > MAX_DEMANGLED_BYTES {
                self.names.clear();
                self.bytes = 0;
            }
            self.bytes += name.len() + demangled.len();
            self.names.insert(name.into(), demangled.into());
        }
        &self.names[name]
    }
}

/// Frames queued for the symbolizer thread, which they do not wake:
/// [`FrameRequests::wake`] does, at the end of a drain once enough frames
/// wait or the first has waited long enough
/// ([`crate::stacks::StackInterner::drain_ended`]). Woken by every frame,
/// the symbolizer took the CPU from the ring thread mid-drain once per
/// frame: during a parallel build (49 Hz, 2 CPUs busy) it blocked 4,049
/// times in 18 s against the ring thread's 517 waits, and the ring thread
/// was preempted 3,746 times (BENCHMARKS.md, "A parallel build").
#[derive(Clone)]
pub struct FrameRequests {
    queue: SyncSender<QueuedFrame>,
    /// None for a queue no thread reads on its own (tests).
    symbolizer: Option<std::thread::Thread>,
}

impl FrameRequests {
    /// Requests on `queue` that wake `symbolizer`.
    pub fn waking(queue: SyncSender<QueuedFrame>, symbolizer: std::thread::Thread) -> Self {
        FrameRequests {
            queue,
            symbolizer: Some(symbolizer),
        }
    }

    /// Queues `row` without waking the symbolizer; gives it back when the
    /// queue is full or the symbolizer gone.
    #[must_use]
    pub fn try_send(&self, row: FrameRow) -> Option<FrameRow> {
        match self.queue.try_send(Box::new(row)) {
            Ok(()) => None,
            Err(TrySendError::Full(row) | TrySendError::Disconnected(row)) => Some(*row),
        }
    }

    /// Queues `row`, waiting while the queue is full, and wakes the
    /// symbolizer; false when it is gone.
    pub fn send(&self, row: FrameRow) -> bool {
        let sent = self.queue.send(Box::new(row)).is_ok();
        self.wake();
        sent
    }

    /// Has the symbolizer look at its queue (at once if it is waiting).
    pub fn wake(&self) {
        if let Some(thread) = &self.symbolizer {
            thread.unpark();
        }
    }
}

impl From<SyncSender<QueuedFrame>> for FrameRequests {
    fn from(queue: SyncSender<QueuedFrame>) -> Self {
        FrameRequests {
            queue,
            symbolizer: None,
        }
    }
}

/// Names frames on its own thread. Dropping the sender side ends it after
/// the queue is empty; [`SymbolizerThread::join`] waits for that.
pub struct SymbolizerThread {
    pub requests: FrameRequests,
    pub named: Receiver<FrameRow>,
    /// Perf maps refused so far (not regular, not the process's own, too big).
    pub perf_maps_refused: Arc<AtomicU64>,
    /// Modules (binaries, libraries) opened and parsed so far: one a binary
    /// however many processes run it, more only where memory is let go of
    /// (idle, over budget) and the module comes back.
    pub modules_opened: Arc<AtomicU64>,
    /// JIT frames let go of unnamed while they waited for a perf map, to
    /// keep the waiting within [`MAX_PENDING_JIT_FRAMES`] and
    /// [`MAX_PERF_MAPS`].
    pub jit_frames_let_go: Arc<AtomicU64>,
    /// User frames written unnamed because the recorder was stopping and
    /// [`NAMING_AT_STOP`] had passed.
    pub frames_unnamed_at_stop: Arc<AtomicU64>,
    /// When set and past, user frames are passed on unnamed.
    naming_ends: Arc<OnceLock<Instant>>,
    handle: JoinHandle<()>,
}

impl SymbolizerThread {
    pub fn start(proc_root: &Path) -> std::io::Result<Self> {
        let (requests, queue) = sync_channel::<QueuedFrame>(QUEUE);
        let (named_tx, named) = std::sync::mpsc::channel();
        let perf_maps = PerfMaps::new(proc_root, Arc::default());
        let perf_maps_refused = Arc::clone(&perf_maps.refused);
        let jit_frames_let_go = Arc::clone(&perf_maps.let_go);
        let modules_opened = Arc::new(AtomicU64::new(0));
        let frames_unnamed_at_stop = Arc::new(AtomicU64::new(0));
        let naming_ends = Arc::new(OnceLock::new());
        let stopping = Stopping {
            naming_ends: Arc::clone(&naming_ends),
            frames_unnamed: Arc::clone(&frames_unnamed_at_stop),
        };
        let opened = Arc::clone(&modules_opened);
        let kallsyms_path = proc_root.join("kallsyms");
        let handle = std::thread::Builder::new()
            .name("hs-symbolize".into())
            .spawn(move || run(queue, named_tx, &kallsyms_path, perf_maps, opened, stopping))?;
        Ok(SymbolizerThread {
            requests: FrameRequests::waking(requests, handle.thread().clone()),
            named,
            perf_maps_refused,
            modules_opened,
            jit_frames_let_go,
            frames_unnamed_at_stop,
            naming_ends,
            handle,
        })
    }

    /// From `grace` on, user frames are passed on unnamed: kernel frames
    /// are still named (a lookup in memory), and JIT frames waiting for a
    /// perf map still get their last read.
    pub fn stop_naming_after(&self, grace: Duration) {
        let _ = self.naming_ends.set(Instant::now() + grace);
    }

    /// Waits for every queued frame to be passed on, named for at most
    /// `grace` more; the caller must have dropped every clone of
    /// `requests`. Returns what is left to collect.
    pub fn join(self, grace: Duration) -> Receiver<FrameRow> {
        self.stop_naming_after(grace);
        drop(self.requests);
        // Off its wait, to find the queue closed.
        self.handle.thread().unpark();
        let _ = self.handle.join();
        self.named
    }
}

/// Modules blazesym may hold open at once. It keeps every file it has read
/// mapped, with its parsed debug info, for the life of the symbolizer: on a
/// host that runs many binaries (a build machine sampled libLLVM, rustc and
/// dozens more) that grew the recorder's memory without bound, so past this
/// many the symbolizer starts afresh. Each frame is named once per recording
/// anyway, so the cost is re-reading a module that comes back. Stacks
/// unwound to `_start` name frames in most of the 5-10 libraries a program
/// maps: 8 made short-lived programs reopen them (22 opens for 30 runs of
/// one binary); memory is held by MODULE_MEMORY_BUDGET, not by this.
const MAX_OPEN_MODULES: usize = 16;

/// With no user frame to name for this long, the symbolizer lets go of
/// every module it holds: their mappings and parsed debug info count in
/// the recorder's RSS (libLLVM's mapping alone 7 MiB, a debug build's line
/// tables tens of MiB). New user frames come in bursts, when new code is
/// sampled; kernel frames, named from kallsyms, do not keep modules open.
const IDLE_RELEASE: Duration = Duration::from_secs(1);

/// How much the recorder's resident memory may grow while the symbolizer
/// holds modules before it lets go of them, at the end of the burst of
/// frames it is naming (or before it opens another module). On a build
/// machine new code is sampled all the time, so the idle release never
/// comes: libLLVM, librustc_driver and libpython together held 26 MiB
/// during a build. This is the symbolizer's part of the recorder's memory
/// bound.
const MODULE_MEMORY_BUDGET: u64 = 12 << 20;

/// The most functions a [`FunctionIndex`] holds, at 12 bytes each: the
/// whole [`MODULE_MEMORY_BUDGET`]. A program with more (a debug build of a
/// browser) has its frames left unnamed rather than the recorder's memory
/// bound broken; a debug build of this project's own tests has 550,000.
const MAX_INDEXED_FUNCTIONS: usize = (MODULE_MEMORY_BUDGET / 12) as usize;

/// How long the modules may stay over [`MODULE_MEMORY_BUDGET`] between
/// bursts before they are let go: what naming adds in this time is
/// small next to the budget.
const BUDGET_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// Modules with more DWARF of their own than this are named from their
/// symbol table alone (and a separate debug file's DWARF is never read,
/// see [`Naming::SeparateSymbols`]): function names, no
/// file, line or inlined functions. Naming frames from DWARF maps the file
/// and touches and parses most of its DWARF, which the recorder's resident
/// size holds until the module is let go of: about 1.2-1.4 times its size
/// (a release hindsight-record, 12.4 MiB of line tables: 12.2 MB of its
/// file mapped and 5.6 MB parsed to name 51 frames; a C program with 5.7
/// MiB: 6.9 MB, `recorder/tests/dwarf_memory.rs`), a spike the budget
/// above cannot prevent. Debug builds of small programs carry a few
/// hundred KiB to a few MiB, libc's debug file 10 MiB inflated.
const MAX_MODULE_DWARF: u64 = MODULE_MEMORY_BUDGET / 3;

/// A module named from its DWARF that has been opened (and its line
/// tables parsed) this many times is named from its symbol table from then
/// on: function names, no file or line. Where processes come and go the
/// symbolizer lets go of its modules between bursts (memory budget, idle),
/// and a large one that keeps coming back was parsed again for every new
/// frame: a Python built with `-g` (17 MB of DWARF in libpython), started
/// 35 times a second, cost the recorder 4.4 % of a CPU, mostly in parsing
/// line tables.
const MAX_DWARF_OPENS: u32 = 3;

/// Modules whose DWARF size is remembered; past this the memory starts
/// afresh (a host that keeps making new binaries).
const MAX_REMEMBERED_MODULES: usize = 4096;

/// Addresses with several names kept over the modules remembered (about
/// 60 bytes each): libc's debug file has 1,776.
const MAX_ALIAS_NAMES: usize = 32 * 1024;

/// `/tmp/perf-<pid>.map` texts kept for naming JIT frames: at most this
/// many processes' and this many bytes in all (past either, they are read
/// again as needed).
const MAX_PERF_MAPS: usize = 64;
const MAX_PERF_MAP_BYTES: usize = 8 << 20;

/// A JIT appends to its perf map as it compiles: an address the map read
/// earlier does not hold sends us back to the file, at most this often.
const PERF_MAP_REREAD: Duration = Duration::from_secs(1);

/// The largest perf map read: a JVM's after a day of compiling is a few
/// MiB; a sparse file of terabytes is someone's trap.
const MAX_PERF_MAP_FILE: u64 = 64 << 20;

/// JIT frames not named yet, waiting for their process's perf map to
/// name them (a JVM run with `-XX:+DumpPerfMapAtExit` writes it as it
/// exits): at most this many, for all processes. Past it a frame stays
/// unnamed.
const MAX_PENDING_JIT_FRAMES: usize = 16 * 1024;

/// `openat2(2)`: `name` under the directory `dir`, resolved as `resolve`
/// says (`RESOLVE_IN_ROOT`: `dir` is `/` for it, absolute links included).
fn open_under(
    dir: &std::os::fd::OwnedFd,
    name: &str,
    flags: i32,
    resolve: u64,
) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let name = std::ffi::CString::new(name).map_err(std::io::Error::other)?;
    // SAFETY: open_how is plain data; zero is "no flags".
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.resolve = resolve;
    // SAFETY: openat2 reads the NUL-terminated name and the open_how we
    // own, of the size given.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            name.as_ptr(),
            &how as *const libc::open_how,
            size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just gave us this descriptor, and only us.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// A process's own `/tmp`, where JITs write their perf maps: its `/tmp`
/// as it sees it (a container's, or systemd's `PrivateTmp=`, not the
/// host's), held open as an `O_PATH` descriptor. That outlives the process
/// and its mount namespace, so a map written as it exits (a JVM run with
/// `-XX:+DumpPerfMapAtExit`) is still read, even from a private tmpfs that
/// went with the namespace. With it: the name the process gives its map
/// (by its pid in its own pid namespace: a JVM in a container writes
/// `perf-1.map`), and the user the map must belong to.
#[derive(Debug)]
struct ProcessTmp {
    tmp: std::os::fd::OwnedFd,
    map_name: String,
    uid: u32,
}

impl ProcessTmp {
    /// `<proc_root>/<pid>`'s `/tmp`, pid-namespace pid and owner; None
    /// when the process is gone or has no `/tmp`.
    fn open(proc_root: &Path, pid: u32) -> Option<ProcessTmp> {
        let process = proc_root.join(pid.to_string());
        let uid = std::fs::metadata(&process).ok()?.uid();
        let root: std::os::fd::OwnedFd = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(process.join("root"))
            .ok()?
            .into();
        let tmp = open_under(
            &root,
            "tmp",
            libc::O_PATH | libc::O_DIRECTORY,
            libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS,
        )
        .ok()?;
        // `NSpid:\t4242\t1`: the last is the pid as the process sees it.
        let nspid = std::fs::read_to_string(process.join("status"))
            .ok()
            .and_then(|status| {
                let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
                line.split_whitespace().last()?.parse::<u32>().ok()
            })
            .unwrap_or(pid);
        Some(ProcessTmp {
            tmp,
            map_name: format!("perf-{nspid}.map"),
            uid,
        })
    }

    /// The perf map, read only when it is a regular file in that `/tmp`
    /// itself (no link followed: the recorder runs as root and anyone can
    /// write to `/tmp`), not a FIFO (which would block the symbolizer, and
    /// with it the recorder's shutdown), owned by the process's own user
    /// (else it names someone else's code), of at most
    /// [`MAX_PERF_MAP_FILE`] bytes; not read again while it is the file
    /// last read (`known`) unchanged. `Err`: there is one, refused, with
    /// why.
    fn read_map(&self, known: Option<MapStamp>) -> Result<MapRead, String> {
        let what = || format!("/tmp/{} (uid {})", self.map_name, self.uid);
        let fd = match open_under(
            &self.tmp,
            &self.map_name,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
        ) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(MapRead::Missing),
            Err(e) => return Err(format!("{}: {e}", what())),
        };
        let mut file = std::fs::File::from(fd);
        let meta = file.metadata().map_err(|e| format!("{}: {e}", what()))?;
        let stamp = (meta.ino(), meta.len(), meta.mtime(), meta.mtime_nsec());
        if known == Some(stamp) {
            return Ok(MapRead::Unchanged);
        }
        if !meta.is_file() {
            return Err(format!("{}: not a regular file", what()));
        }
        if meta.uid() != self.uid {
            return Err(format!("{}: owned by uid {}", what(), meta.uid()));
        }
        if meta.len() > MAX_PERF_MAP_FILE {
            return Err(format!(
                "{}: {} bytes, over {MAX_PERF_MAP_FILE}",
                what(),
                meta.len()
            ));
        }
        let mut text = String::new();
        file.by_ref()
            .take(MAX_PERF_MAP_FILE)
            .read_to_string(&mut text)
            .map_err(|e| format!("{}: {e}", what()))?;
        Ok(MapRead::Text(text, stamp))
    }
}

/// A perf map's inode, size and modification time: a map re-read only
/// when these change (a JVM's can run to megabytes, and frames its map
/// never names, such as a bad unwind's, would have it read every second).
type MapStamp = (u64, u64, i64, i64);

/// What reading a perf map found.
enum MapRead {
    Missing,
    Unchanged,
    Text(String, MapStamp),
}

/// A JIT process's `/tmp` ([`ProcessTmp`]), opened by the thread that
/// drains the rings on the process's first frame in anonymous executable
/// memory, while the process surely runs, and handed to the symbolizer
/// with that frame. The symbolizer may be seconds behind (a large binary's
/// symbols to parse): a JIT that has exited by the time it gets there
/// could no longer be opened, and a map written at exit would be missed.
#[derive(Clone, Debug)]
pub struct JitTmp(Arc<ProcessTmp>);

impl JitTmp {
    pub fn open(proc_root: &Path, pid: u32) -> Option<JitTmp> {
        ProcessTmp::open(proc_root, pid).map(|tmp| JitTmp(Arc::new(tmp)))
    }
}

impl PartialEq for JitTmp {
    fn eq(&self, other: &JitTmp) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Module files held open at once for frames waiting to be named
/// ([`HeldModule`]): a few per container program sampled in the seconds
/// the symbolizer may be behind. Past it a frame goes with its path only.
pub const MAX_HELD_MODULES: usize = 256;

/// A module file whose path goes with its process, opened by the ring
/// thread while the process runs and handed to the symbolizer with the
/// process's frames in it: a container's file, read through
/// `/proc/<pid>/root`, or a deleted one, through `/proc/<pid>/map_files`.
/// The symbolizer may be seconds behind (a large binary's debug info to
/// parse); once the process has exited neither path opens, and the frames
/// of a short container job were left unnamed. Read as
/// `/proc/self/fd/<n>`, which is this file for as long as it is held.
/// Only for a file with a build id: another file may be given the same
/// number later, and the build id is what tells them apart.
#[derive(Clone, Debug)]
pub struct HeldModule(Arc<HeldFile>);

#[derive(Debug)]
struct HeldFile {
    file: std::fs::File,
    held: Arc<AtomicUsize>,
}

impl Drop for HeldFile {
    fn drop(&mut self) {
        self.held.fetch_sub(1, Ordering::Relaxed);
    }
}

impl HeldModule {
    /// The regular file at `path`, unless `held` already counts
    /// [`MAX_HELD_MODULES`] (it counts this one until its last clone goes).
    /// Not blocking on a FIFO a container put there, nor following a
    /// link it put in place of the file since.
    pub fn open(path: &str, held: &Arc<AtomicUsize>) -> Option<HeldModule> {
        if held.load(Ordering::Relaxed) >= MAX_HELD_MODULES {
            return None;
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
            .open(path)
            .ok()
            .filter(|f| f.metadata().is_ok_and(|m| m.is_file()))?;
        held.fetch_add(1, Ordering::Relaxed);
        Some(HeldModule(Arc::new(HeldFile {
            file,
            held: Arc::clone(held),
        })))
    }

    /// The path that reads the held file.
    fn path(&self) -> String {
        use std::os::fd::AsRawFd;
        format!("{HELD_PATH_PREFIX}{}", self.0.file.as_raw_fd())
    }
}

impl PartialEq for HeldModule {
    fn eq(&self, other: &HeldModule) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

const HELD_PATH_PREFIX: &str = "/proc/self/fd/";

/// What is known of one JIT process's perf map.
#[derive(Debug)]
struct JitProcess {
    /// None when the process was gone before it could be opened.
    tmp: Option<Arc<ProcessTmp>>,
    /// The map's text (None: no map, or refused), which file it was, and
    /// when it was last looked at.
    text: Option<String>,
    stamp: Option<MapStamp>,
    read_at: Instant,
    /// Its frames the map did not name yet.
    pending: Vec<FrameRow>,
}

/// The perf maps JIT runtimes write, cached, and the JIT frames they have
/// not named yet: a frame is written unnamed at once and named again when
/// its map names it, while the process runs or just after it exits
/// (readers take the named row of a frame).
struct PerfMaps {
    proc_root: PathBuf,
    processes: AHashMap<u32, JitProcess>,
    /// Frames in `pending`, over all processes.
    pending: usize,
    /// Processes whose map was refused (see [`ProcessTmp::read_map`]), for
    /// the recorder's own counters: each once, though a map is read again
    /// (every [`PERF_MAP_REREAD`] while new addresses come).
    refused: Arc<AtomicU64>,
    refused_pids: AHashSet<u32>,
    /// Frames let go of unnamed to keep within the bounds.
    let_go: Arc<AtomicU64>,
}

impl PerfMaps {
    fn new(proc_root: &Path, refused: Arc<AtomicU64>) -> Self {
        PerfMaps {
            proc_root: proc_root.to_path_buf(),
            processes: AHashMap::new(),
            pending: 0,
            refused,
            refused_pids: AHashSet::new(),
            let_go: Arc::default(),
        }
    }

    fn read(&mut self, pid: u32) {
        let Some(process) = self.processes.get_mut(&pid) else {
            return;
        };
        process.read_at = Instant::now();
        let Some(tmp) = &process.tmp else {
            return;
        };
        (process.text, process.stamp) = match tmp.read_map(process.stamp) {
            Ok(MapRead::Unchanged) => return,
            Ok(MapRead::Text(text, stamp)) => (Some(text), Some(stamp)),
            Ok(MapRead::Missing) => (None, None),
            Err(why) => {
                if self.refused_pids.len() >= MAX_PERF_MAPS {
                    self.refused_pids.clear();
                }
                if self.refused_pids.insert(pid)
                    && self.refused.fetch_add(1, Ordering::Relaxed) == 0
                {
                    eprintln!("hindsight-record: warning: perf map not read: pid {pid}: {why} (counted as recorder/perf_maps_refused)");
                }
                (None, None)
            }
        };
    }

    /// Makes room for one more process: a JIT's map can run to megabytes,
    /// so a few are kept, not hundreds; those with frames waiting stay
    /// while any other can go.
    fn make_room(&mut self) {
        let held: usize = self
            .processes
            .values()
            .filter_map(|p| p.text.as_ref())
            .map(String::len)
            .sum();
        if self.processes.len() < MAX_PERF_MAPS && held <= MAX_PERF_MAP_BYTES {
            return;
        }
        self.processes.retain(|_, p| !p.pending.is_empty());
        if self.processes.len() >= MAX_PERF_MAPS {
            self.processes.clear();
            self.let_go
                .fetch_add(std::mem::take(&mut self.pending) as u64, Ordering::Relaxed);
        }
    }

    /// The name the map of `pid` gives `address`; `opened` is the
    /// process's `/tmp` if the ring thread opened it.
    fn lookup(&mut self, pid: u32, address: u64, opened: Option<&JitTmp>) -> Option<String> {
        let name_in =
            |p: &JitProcess| perf_map_lookup(p.text.as_deref()?, address).map(str::to_string);
        if let Some(process) = self.processes.get_mut(&pid) {
            if process.tmp.is_none() {
                process.tmp = opened.map(|t| Arc::clone(&t.0));
            }
            let found = name_in(process);
            if found.is_some() || process.read_at.elapsed() < PERF_MAP_REREAD {
                return found;
            }
        } else {
            self.make_room();
            let tmp = match opened {
                Some(t) => Some(Arc::clone(&t.0)),
                None => ProcessTmp::open(&self.proc_root, pid).map(Arc::new),
            };
            self.processes.insert(
                pid,
                JitProcess {
                    tmp,
                    text: None,
                    stamp: None,
                    read_at: Instant::now(),
                    pending: Vec::new(),
                },
            );
        }
        self.read(pid);
        name_in(&self.processes[&pid])
    }

    /// Keeps a JIT frame its map did not name, to name it when the map
    /// does.
    fn hold(&mut self, row: &FrameRow) {
        if self.pending >= MAX_PENDING_JIT_FRAMES {
            self.let_go.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if let Some(process) = self.processes.get_mut(&row.pid) {
            if process.tmp.is_some() {
                process.pending.push(row.clone());
                self.pending += 1;
            }
        }
    }

    /// Reads again, at most every [`PERF_MAP_REREAD`] (or now, with
    /// `final_read`, as the recorder stops), the maps of processes with
    /// frames waiting, and returns the frames they now name. A process
    /// found gone has its map read once more (what it wrote as it exited)
    /// and is then let go of.
    fn name_pending(&mut self, final_read: bool) -> Vec<FrameRow> {
        let due: Vec<u32> = self
            .processes
            .iter()
            .filter(|(_, p)| {
                !p.pending.is_empty() && (final_read || p.read_at.elapsed() >= PERF_MAP_REREAD)
            })
            .map(|(pid, _)| *pid)
            .collect();
        let mut named = Vec::new();
        for pid in due {
            let gone = !self.proc_root.join(pid.to_string()).exists();
            self.read(pid);
            let process = self
                .processes
                .get_mut(&pid)
                .expect("due processes are held");
            let text = process.text.as_deref().unwrap_or_default();
            let before = process.pending.len();
            process.pending.retain_mut(|row| {
                row.function = perf_map_lookup(text, row.address).map(str::to_string);
                if row.function.is_some() {
                    named.push(row.clone());
                }
                row.function.is_none()
            });
            let mut left = process.pending.len();
            if gone {
                self.processes.remove(&pid);
                left = 0;
            }
            self.pending -= before - left;
        }
        named
    }
}

/// blazesym and the modules it holds, let go of when idle or over budget.
struct Modules {
    symbolizer: Symbolizer,
    demangled: DemangledNames,
    /// The modules open, each with the build id of the frame it was opened
    /// for: blazesym does not look at a file again once open (see
    /// [`new_symbolizer`]), so a frame of another build id at the same path
    /// (the file replaced by an upgrade) has every module opened afresh,
    /// once the file there is that build.
    open: AHashMap<String, Option<String>>,
    /// The build ids of the files at paths here: a frame is named from a
    /// file only if it is the frame's build, and a container's module is
    /// read from the file at its path here when that is its build
    /// ([`module_file`]).
    file_ids: crate::stacks::BuildIds<String>,
    /// Per module path: how its frames are named.
    namings: AHashMap<String, ModuleFacts>,
    /// The function indexes of the files in the `indexed` of `namings`,
    /// built as their first frame is named; let go of when idle, or when
    /// over budget once the modules are (see [`Modules::release`]).
    indexes: FunctionIndexes,
    /// Counts the frames named from an index: their `used` clock.
    index_uses: u64,
    /// Symbol tables this large or larger are indexed
    /// ([`LARGE_SYMBOL_TABLE`]; tests index every one).
    large_symbol_table: u64,
    /// Entries of the `aliases` of `namings`.
    alias_names: usize,
    /// Per build id, the path its module was opened by: the same binary
    /// run in other containers (seen through each one's `/proc/<pid>/root`,
    /// another path each time) is the same file, named from the one open.
    by_build_id: AHashMap<String, String>,
    last_user_frame: Instant,
    /// When [`Modules::release_between_bursts`] last read the resident size.
    budget_checked_at: Instant,
    /// The recorder's resident bytes just after the last release.
    resident_at_release: u64,
    /// [`MODULE_MEMORY_BUDGET`], and how resident memory is read
    /// ([`self_resident_bytes`]); tests set both.
    budget: u64,
    resident: fn() -> Option<u64>,
    /// Counts every module opened (and so parsed) by blazesym.
    opened: Arc<AtomicU64>,
}

impl Modules {
    fn new(budget: u64, resident: fn() -> Option<u64>) -> Self {
        Modules {
            budget,
            resident,
            opened: Arc::default(),
            symbolizer: new_symbolizer(),
            demangled: DemangledNames::default(),
            open: AHashMap::new(),
            file_ids: crate::stacks::BuildIds::default(),
            namings: AHashMap::new(),
            indexes: FunctionIndexes::new(),
            index_uses: 0,
            large_symbol_table: LARGE_SYMBOL_TABLE,
            alias_names: 0,
            by_build_id: AHashMap::new(),
            last_user_frame: Instant::now(),
            budget_checked_at: Instant::now(),
            resident_at_release: resident().unwrap_or(0),
        }
    }

    /// Forgets how `path`'s frames are named, and its aliases with it: the
    /// facts of another build read there again must not count them twice
    /// toward [`MAX_ALIAS_NAMES`].
    fn forget_naming(&mut self, path: &str) {
        if let Some(facts) = self.namings.remove(path) {
            self.alias_names = self.alias_names.saturating_sub(facts.aliases.len());
            for file in &facts.indexed {
                self.indexes.remove(file);
            }
        }
    }

    /// Names the frame at `offset` in the ELF file `path`, whose build id
    /// is `build_id` when it has one; marks it [`FrameRow::file_missing`]
    /// when no file of that build is there.
    fn name(&mut self, path: &str, build_id: Option<&str>, offset: u64, row: &mut FrameRow) {
        let path = match build_id.and_then(|id| self.by_build_id.get(id)) {
            // The frame's own path (nothing to check), or another that is
            // open and still there: a gone process's root is not.
            Some(open)
                if open == path || (self.open.contains_key(open) && Path::new(open).exists()) =>
            {
                open.clone()
            }
            _ => {
                // A held file's number may be another file's once it is
                // let go of: frames of other paths are not named through it.
                if let Some(id) = build_id.filter(|_| !path.starts_with(HELD_PATH_PREFIX)) {
                    if self.by_build_id.len() >= MAX_REMEMBERED_MODULES {
                        self.by_build_id.clear();
                    }
                    self.by_build_id.insert(id.to_owned(), path.to_owned());
                }
                path.to_owned()
            }
        };
        let path = path.as_str();
        if let Some(id) = build_id {
            let opened_as = self.open.get(path);
            if opened_as.map(Option::as_deref) != Some(Some(id)) {
                // Not open for this build. The file there now may be another
                // (upgraded since the frame's process started): its names
                // are another program's, and the frame is left unnamed.
                if !self.file_ids.is(path.to_owned(), Path::new(path), id) {
                    row.file_missing = true;
                    return;
                }
                if matches!(opened_as, Some(Some(_))) {
                    self.release();
                    self.forget_naming(path);
                }
            }
        }
        let opening = !self.open.contains_key(path);
        if opening {
            if self.open.len() >= MAX_OPEN_MODULES || self.over_budget() {
                self.release();
            }
            self.open
                .insert(path.to_string(), build_id.map(str::to_owned));
            self.opened.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(facts) = self.namings.get_mut(path).filter(|_| opening) {
            if facts.naming == Naming::Dwarf {
                facts.dwarf_opens += 1;
                if facts.dwarf_opens > MAX_DWARF_OPENS {
                    facts.naming = Naming::Symbols;
                }
            }
        }
        // Facts of another build at the path (a held file's number given
        // to another file, or a file replaced) are read again.
        if self
            .namings
            .get(path)
            .is_none_or(|facts| build_id.is_some() && facts.build_id.as_deref() != build_id)
        {
            if self.namings.len() >= MAX_REMEMBERED_MODULES || self.alias_names > MAX_ALIAS_NAMES {
                self.namings.clear();
                self.alias_names = 0;
            }
            let large_symbol_table = |file: &Path| {
                symbol_table_size(file).is_some_and(|size| size >= self.large_symbol_table)
            };
            let own_table_large = large_symbol_table(Path::new(path));
            // A module whose symbol table is too large for blazesym is not
            // named from its DWARF either: blazesym reads the table there too.
            let naming = match module_debug_info(Path::new(path)) {
                Some(DebugInfo::Own(bytes)) if bytes <= MAX_MODULE_DWARF && !own_table_large => {
                    Naming::Dwarf
                }
                Some(DebugInfo::Separate(debug)) => Naming::SeparateSymbols(debug),
                _ => Naming::Symbols,
            };
            let mut indexed = Vec::new();
            if own_table_large {
                indexed.push(PathBuf::from(path));
            }
            if let Naming::SeparateSymbols(debug) = &naming {
                if large_symbol_table(debug) {
                    indexed.push(debug.clone());
                }
            }
            let segments = load_segments(Path::new(path)).unwrap_or_default();
            let plt = plt_ranges(Path::new(path));
            let own_symbols = SymbolTable::read(Path::new(path));
            let symbols_start = own_symbols.as_ref().and_then(SymbolTable::stripped_start);
            let naming_symbols = match &naming {
                Naming::SeparateSymbols(debug) => SymbolTable::read(debug),
                Naming::Dwarf | Naming::Symbols => own_symbols,
            };
            let aliases = naming_symbols
                .map(|table| table.preferred_aliases(MAX_ALIAS_NAMES))
                .unwrap_or_default();
            self.forget_naming(path);
            self.alias_names += aliases.len();
            self.namings.insert(
                path.to_string(),
                ModuleFacts {
                    build_id: build_id.map(str::to_owned),
                    dwarf_opens: u32::from(naming == Naming::Dwarf),
                    naming,
                    segments,
                    plt,
                    symbols_start: symbols_start.unwrap_or(0),
                    aliases,
                    indexed,
                },
            );
        }
        let mut built = false;
        for file in self.namings[path].indexed.clone() {
            if !self.indexes.contains_key(&file) {
                self.make_room_for_index(&file);
            }
            self.index_uses += 1;
            let indexed = (self.indexes.entry(file.clone())).or_insert_with(|| {
                built = true;
                IndexedFile {
                    index: FunctionIndex::build(&file, MAX_INDEXED_FUNCTIONS),
                    used: 0,
                }
            });
            indexed.used = self.index_uses;
        }
        let facts = &self.namings[path];

        name_user_frame(
            &self.symbolizer,
            &self.indexes,
            &mut self.demangled,
            path,
            offset,
            facts,
            row,
        );
        if built {
            self.keep_indexes_within_budget();
        }
        // Idle time counts from the end of the work: parsing a large module
        // can itself take longer than IDLE_RELEASE.
        self.last_user_frame = Instant::now();
    }

    fn over_budget(&self) -> bool {
        (self.resident)()
            .is_some_and(|now| now.saturating_sub(self.resident_at_release) > self.budget)
    }

    /// Lets go of every module when nothing is waiting to be named and the
    /// modules have been idle too long or hold too much.
    ///
    /// The resident size is read at most every [`BUDGET_CHECK_INTERVAL`]:
    /// where processes come and go the queue runs dry between frames
    /// dozens of times a second, and those reads of `/proc/self/statm`
    /// were 4 % of the recorder's CPU.
    fn release_between_bursts(&mut self) {
        if self.open.is_empty() && self.indexes.is_empty() {
            return;
        }
        if self.last_user_frame.elapsed() >= IDLE_RELEASE {
            self.release();
            self.release_indexes();
        } else if self.budget_checked_at.elapsed() >= BUDGET_CHECK_INTERVAL {
            self.budget_checked_at = Instant::now();
            if self.over_budget() {
                self.release();
            }
        }
    }

    /// A fresh symbolizer, and the memory the old one held handed back;
    /// the function indexes are kept, as many as fit the budget by their
    /// own size, the least recently used let go of first.
    ///
    /// An index outlives the modules because building one costs 45 ms (a
    /// test binary's 670,000 symbols read and 505,000 functions sorted),
    /// and the program it names is often run again and again (a test
    /// suite's command-line binary, `rustc`'s librustc_driver): let go of
    /// with the modules, it was built again for nearly every new frame.
    /// The budget counts from what is resident now less the indexes kept,
    /// so they and what the modules grow by next stay within it together.
    /// What else grew the recorder since the last release (the unwinder's
    /// sections paged in, the writer's open chunks) is not the
    /// symbolizer's to hand back: counted against it, it had every index
    /// let go of at each release, and `rustc`'s built four times a build
    /// (BENCHMARKS.md, "A frame in a file known by its offset alone").
    fn release(&mut self) {
        self.symbolizer = new_symbolizer();
        self.open.clear();
        return_free_heap();
        self.keep_indexes_within_budget();
        self.resident_at_release =
            ((self.resident)().unwrap_or(0)).saturating_sub(self.index_bytes());
    }

    /// What the function indexes held take.
    fn index_bytes(&self) -> u64 {
        (self.indexes.values())
            .filter_map(|indexed| indexed.index.as_ref())
            .map(|index| index.bytes() as u64)
            .sum()
    }

    /// Lets go of the least recently used function indexes until those
    /// left hold at most [`Modules::budget`] together, or one is left. The
    /// resident size alone does not bound them: it is read against what
    /// the recorder held at the last release, and what other threads let go
    /// of since made room for a third index of 6 MiB beside the CI's tests.
    fn keep_indexes_within_budget(&mut self) {
        while self.indexes.len() > 1 && self.index_bytes() > self.budget {
            self.release_least_recently_used_index();
        }
    }

    /// Lets go of the least recently used function indexes until one of
    /// `file` can be built beside those left within the budget: building
    /// holds half the symbol table's bytes (each 24-byte symbol a 12-byte
    /// entry) until the index is thinned. With the indexes kept through
    /// releases, a test binary's built beside two others took the
    /// recorder's peak past the budget (BENCHMARKS.md, "A frame in a file
    /// known by its offset alone").
    fn make_room_for_index(&mut self, file: &Path) {
        let building = symbol_table_size(file).map_or(0, |size| (size / 2).min(self.budget));
        while !self.indexes.is_empty() && self.index_bytes() + building > self.budget {
            self.release_least_recently_used_index();
        }
    }

    /// Lets go of the function index used longest ago.
    fn release_least_recently_used_index(&mut self) {
        let oldest = (self.indexes.iter())
            .min_by_key(|(_, indexed)| indexed.used)
            .map(|(file, _)| file.clone());
        if let Some(file) = oldest {
            self.indexes.remove(&file);
            return_free_heap();
        }
    }

    /// Lets go of every function index; the budget counts from here.
    fn release_indexes(&mut self) {
        self.indexes.clear();
        return_free_heap();
        self.resident_at_release = (self.resident)().unwrap_or(0);
    }
}

/// Hands freed heap back to the system: glibc keeps it otherwise, and it
/// counts in the recorder's RSS.
fn return_free_heap() {
    // SAFETY: malloc_trim only returns free memory to the system.
    unsafe { libc::malloc_trim(0) };
}

/// blazesym, told not to look at a file again once it has it open: by
/// default it `stat`s the file for every frame, to see whether it changed,
/// and those calls were a fifth of the symbolizer's time during a parallel
/// build (BENCHMARKS.md, "A parallel build"). [`Modules::name`] sees a
/// replaced file by its build id instead.
fn new_symbolizer() -> Symbolizer {
    Symbolizer::builder()
        .enable_auto_reload(false)
        .enable_code_info(true)
        .enable_inlined_fns(true)
        // Demangled by DemangledNames, once a name.
        .enable_demangling(false)
        .build()
}

/// Where to read a module from. A process in another mount namespace has
/// its files read through its own root (`open_path`), which goes when the
/// process goes and is another path for every process. So the file at the
/// same path here is read instead when its build id (`host_id`) is the one
/// recorded: the same binary, one path for every process that runs it, and
/// there after they are gone. A container's own file, another binary, is
/// read through its root, or, once that is gone with the process, through
/// the file the ring thread held open for it ([`HeldModule`]).
fn module_file(
    open_path: Option<&str>,
    module: &str,
    build_id: Option<&str>,
    held: Option<&HeldModule>,
    host_id: impl FnOnce(&str) -> Option<String>,
) -> String {
    match open_path {
        Some(open) if build_id.is_none() || host_id(module).as_deref() != build_id => match held {
            Some(held) if !Path::new(open).exists() => held.path(),
            _ => open.to_owned(),
        },
        _ => module.to_owned(),
    }
}

/// The symbolizer's side of [`SymbolizerThread::stop_naming_after`].
struct Stopping {
    naming_ends: Arc<OnceLock<Instant>>,
    frames_unnamed: Arc<AtomicU64>,
}

impl Stopping {
    fn past(&self) -> bool {
        self.naming_ends
            .get()
            .is_some_and(|end| Instant::now() >= *end)
    }
}

fn run(
    queue: Receiver<QueuedFrame>,
    named: Sender<FrameRow>,
    kallsyms_path: &Path,
    mut perf_maps: PerfMaps,
    opened: Arc<AtomicU64>,
    stopping: Stopping,
) {
    let kallsyms = Kallsyms::parse(&std::fs::read_to_string(kallsyms_path).unwrap_or_default());
    // The 5 MiB text just read is free now.
    return_free_heap();
    let mut modules = Modules::new(MODULE_MEMORY_BUDGET, self_resident_bytes);
    modules.opened = opened;
    // JIT frames named since they were written: sent again, with names.
    let send_named_jit_frames = |perf_maps: &mut PerfMaps, final_read: bool| {
        perf_maps
            .name_pending(final_read)
            .into_iter()
            .all(|row| named.send(row).is_ok())
    };
    loop {
        if !send_named_jit_frames(&mut perf_maps, false) {
            return;
        }
        let mut row = match queue.try_recv() {
            Ok(row) => *row,
            Err(TryRecvError::Empty) => {
                modules.release_between_bursts();
                // Until FrameRequests::wake, or a second for the JIT
                // frames waiting and the idle release.
                std::thread::park_timeout(Duration::from_secs(1));
                continue;
            }
            Err(TryRecvError::Disconnected) => {
                send_named_jit_frames(&mut perf_maps, true);
                return;
            }
        };
        if !row.kernel && stopping.past() {
            stopping.frames_unnamed.fetch_add(1, Ordering::Relaxed);
        } else if row.kernel {
            if let Some((function, module)) = kallsyms.lookup(row.address) {
                row.function = Some(function.to_string());
                row.module = Some(module.to_string());
            } else {
                row.module = Some("[kernel]".into());
            }
        } else if let (Some(module), Some(offset)) = (row.module.clone(), row.file_offset) {
            let build_id = row.build_id.clone();
            let file = module_file(
                row.open_path.as_deref(),
                &module,
                build_id.as_deref(),
                row.held.as_ref(),
                |path| modules.file_ids.get(path.to_owned(), Path::new(path)),
            );
            modules.name(&file, build_id.as_deref(), offset, &mut row);
        } else if row.module.is_none() && row.maybe_jit {
            row.function = perf_maps.lookup(row.pid, row.address, row.jit_tmp.as_ref());
            if row.function.is_none() {
                perf_maps.hold(&row);
            }
        }
        if named.send(row).is_err() {
            return;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn kallsyms_names_code_and_modules() {
        let k = Kallsyms::parse(
            "ffffffff81000000 T _stext\n\
             ffffffff81001000 t schedule\n\
             ffffffff81002000 D some_data\n\
             ffffffffc0001000 t ext4_read [ext4]\n\
             0000000000000000 T hidden\n",
        );
        assert_eq!(k.lookup(0xffffffff81001010), Some(("schedule", "[kernel]")));
        // Data symbols are not code: the address still belongs to schedule.
        assert_eq!(k.lookup(0xffffffff81002010), Some(("schedule", "[kernel]")));
        assert_eq!(k.lookup(0xffffffffc0001004), Some(("ext4_read", "[ext4]")));
        assert_eq!(k.lookup(0x10), None);
    }

    #[test]
    fn perf_maps_name_jit_code() {
        let map = "7f00001000 40 LazyCompile:*foo app.js:1\n0x7f00002000 0x10 bar\n";
        assert_eq!(
            perf_map_lookup(map, 0x7f0000103f),
            Some("LazyCompile:*foo app.js:1")
        );
        assert_eq!(perf_map_lookup(map, 0x7f00001040), None);
        assert_eq!(perf_map_lookup(map, 0x7f00002004), Some("bar"));
    }

    /// A fake `/proc` whose process `pid` has a `/tmp`; returns that `/tmp`.
    fn process_tmp(proc_root: &Path, pid: u32) -> PathBuf {
        let tmp = proc_root.join(pid.to_string()).join("root/tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        tmp
    }

    #[test]
    fn a_perf_map_that_grows_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = process_tmp(dir.path(), 42).join("perf-42.map");
        std::fs::write(&path, "1000 10 first\n").unwrap();
        let mut maps = PerfMaps::new(dir.path(), Arc::default());
        assert_eq!(maps.lookup(42, 0x1004, None).as_deref(), Some("first"));
        assert_eq!(maps.lookup(43, 0x1004, None), None, "pid 43 has no map");
        // The JIT compiles more: until PERF_MAP_REREAD passes, the cached
        // text answers; then the file is read again.
        std::fs::write(&path, "1000 10 first\n2000 10 second\n").unwrap();
        assert_eq!(maps.lookup(42, 0x2004, None), None);
        maps.processes.get_mut(&42).unwrap().read_at -= PERF_MAP_REREAD;
        assert_eq!(maps.lookup(42, 0x2004, None).as_deref(), Some("second"));
    }

    /// A JVM run with `-XX:+DumpPerfMapAtExit` writes its map as it exits:
    /// its frames, seen while it ran, are named then, through the root
    /// held open since, though `/proc/<pid>` is gone.
    #[test]
    fn a_jit_frame_is_named_by_the_map_its_process_writes_as_it_exits() {
        let dir = tempfile::tempdir().unwrap();
        process_tmp(dir.path(), 42);
        let mut maps = PerfMaps::new(dir.path(), Arc::default());
        let row = FrameRow::unnamed(7, false, 0x1004, 42);
        assert_eq!(maps.lookup(42, 0x1004, None), None);
        maps.hold(&row);
        assert!(maps.name_pending(false).is_empty(), "not due, and no map");
        let exited = dir.path().join("exited");
        std::fs::rename(dir.path().join("42"), &exited).unwrap();
        std::fs::write(exited.join("root/tmp/perf-42.map"), "1000 10 jitted\n").unwrap();
        let named = maps.name_pending(true);
        assert_eq!(named.len(), 1);
        assert_eq!(
            (named[0].frame_id, named[0].function.as_deref()),
            (7, Some("jitted"))
        );
        assert!(maps.processes.is_empty() && maps.pending == 0, "let go of");
    }

    /// The symbolizer may reach a JIT's first frame after the JIT has
    /// exited: the `/tmp` the ring thread opened with that frame still
    /// finds the map it wrote as it exited; opened only then, it would not.
    #[test]
    fn a_tmp_opened_with_the_first_jit_frame_outlives_a_symbolizer_behind() {
        let dir = tempfile::tempdir().unwrap();
        process_tmp(dir.path(), 42);
        let opened = JitTmp::open(dir.path(), 42).expect("the process runs");
        let exited = dir.path().join("exited");
        std::fs::rename(dir.path().join("42"), &exited).unwrap();
        std::fs::write(exited.join("root/tmp/perf-42.map"), "1000 10 jitted\n").unwrap();
        let mut late = PerfMaps::new(dir.path(), Arc::default());
        assert_eq!(late.lookup(42, 0x1004, None), None, "gone: nothing to open");
        let mut maps = PerfMaps::new(dir.path(), Arc::default());
        assert_eq!(
            maps.lookup(42, 0x1004, Some(&opened)).as_deref(),
            Some("jitted")
        );
    }

    /// In a pid namespace (a container) the JIT names its map by the pid
    /// it sees, not the host's.
    #[test]
    fn a_containers_jit_map_is_found_by_its_own_pid() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = process_tmp(dir.path(), 4242);
        std::fs::write(
            dir.path().join("4242/status"),
            "Name:\tjava\nNSpid:\t4242\t7\n",
        )
        .unwrap();
        std::fs::write(tmp.join("perf-7.map"), "1000 10 in_container\n").unwrap();
        std::fs::write(tmp.join("perf-4242.map"), "1000 10 wrong\n").unwrap();
        let mut maps = PerfMaps::new(dir.path(), Arc::default());
        assert_eq!(
            maps.lookup(4242, 0x1004, None).as_deref(),
            Some("in_container")
        );
    }

    /// Maps the recorder must not read: a FIFO (reading it would block the
    /// symbolizer), another user's file, a sparse file of a terabyte, and a
    /// link. Each is refused and counted; the process's own file is read.
    #[test]
    fn perf_maps_that_are_traps_are_refused_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let refused = Arc::new(AtomicU64::new(0));
        let mut maps = PerfMaps::new(dir.path(), Arc::clone(&refused));
        let fifo = process_tmp(dir.path(), 1).join("perf-1.map");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0);
        let theirs = process_tmp(dir.path(), 2).join("perf-2.map");
        std::fs::write(&theirs, "1000 10 planted\n").unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
        let huge = process_tmp(dir.path(), 3).join("perf-3.map");
        std::fs::File::create(&huge)
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        let target = process_tmp(dir.path(), 4).join("elsewhere");
        std::fs::write(&target, "1000 10 linked\n").unwrap();
        std::os::unix::fs::symlink(&target, target.with_file_name("perf-4.map")).unwrap();
        let own = process_tmp(dir.path(), 5).join("perf-5.map");
        std::fs::write(&own, "1000 10 mine\n").unwrap();

        for pid in 1..=4 {
            assert_eq!(maps.lookup(pid, 0x1004, None), None, "pid {pid}");
        }
        assert_eq!(refused.load(Ordering::Relaxed), 4);
        // Read again once PERF_MAP_REREAD has passed: still refused, counted once.
        for pid in 1..=4 {
            maps.processes.get_mut(&pid).unwrap().read_at -= PERF_MAP_REREAD;
            assert_eq!(maps.lookup(pid, 0x1008, None), None, "pid {pid}");
        }
        assert_eq!(refused.load(Ordering::Relaxed), 4);
        assert_eq!(maps.lookup(5, 0x1004, None).as_deref(), Some("mine"));
        assert_eq!(
            maps.lookup(6, 0x1004, None),
            None,
            "no map is not a refusal"
        );
        assert_eq!(refused.load(Ordering::Relaxed), 4);
    }

    /// A frame of this test binary's own code at `address`, as the ring
    /// thread would hand it over: module path and file offset.
    fn own_frame(address: u64) -> FrameRow {
        let maps = crate::stacks::parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let m = crate::stacks::find_mapping(&maps, address).unwrap();
        FrameRow {
            module: m.path.clone(),
            file_offset: Some(address - m.start + m.offset),
            ..FrameRow::unnamed(1, false, address, std::process::id())
        }
    }

    #[test]
    fn the_recorder_names_its_own_code() {
        // An independent truth: this test binary's own function, found
        // through our maps and file offset, is named by the thread.
        let thread = SymbolizerThread::start(Path::new("/proc")).unwrap();
        let address = the_recorder_names_its_own_code as *const () as u64;
        assert!(thread.requests.send(own_frame(address)));
        let named = thread.join(NAMING_AT_STOP).recv().unwrap();
        // Demangled as Rust names are, without their hash.
        assert_eq!(
            named.function.unwrap_or_default(),
            format!("{}::the_recorder_names_its_own_code", module_path!())
        );
    }

    /// C++ names are demangled as `c++filt` demangles them, once each
    /// however many of the function's addresses are named.
    #[test]
    fn cxx_functions_are_named_as_cxxfilt_names_them() {
        let dir = tempfile::tempdir().unwrap();
        let program = compile_c(
            dir.path(),
            "namespace hs { template <typename T> struct Box {\n\
             __attribute__((noinline)) static T twice(T v) { return v * 2 + 1; } }; }\n\
             int main(int argc, char **) { return hs::Box<long>::twice(argc); }\n",
            // g++'s front end; nothing of libstdc++ to link.
            &["-x", "c++", "-O1"],
        );
        let mangled = "_ZN2hs3BoxIlE5twiceEl";
        let filt = std::process::Command::new("c++filt")
            .arg(mangled)
            .output()
            .unwrap();
        let expected = String::from_utf8(filt.stdout).unwrap().trim().to_owned();
        assert_eq!(expected, "hs::Box<long>::twice(long)");
        let start = readelf_offset(&program, mangled);
        let path = program.to_str().unwrap();
        let mut modules = Modules::new(u64::MAX, self_resident_bytes);
        let names: Vec<Option<String>> = [start, start + 1]
            .into_iter()
            .map(|offset| {
                let mut row = FrameRow {
                    module: Some(path.into()),
                    file_offset: Some(offset),
                    ..FrameRow::unnamed(1, false, 0x5500_0000_0000 + offset, 1)
                };
                modules.name(path, None, offset, &mut row);
                row.function
            })
            .collect();
        assert_eq!(names, [Some(expected.clone()), Some(expected)]);
        assert_eq!(modules.demangled.names.len(), 1);
    }

    #[test]
    fn a_stopping_recorder_passes_frames_on_unnamed_once_its_grace_is_over() {
        // A kernel frame is still named from memory; user frames, which
        // could each mean parsing a module, are passed on and counted.
        let kallsyms = Kallsyms::parse(&std::fs::read_to_string("/proc/kallsyms").unwrap());
        let kernel_address = kallsyms.addresses[kallsyms.addresses.len() / 2];
        let thread = SymbolizerThread::start(Path::new("/proc")).unwrap();
        thread.stop_naming_after(Duration::ZERO);
        let address = the_recorder_names_its_own_code as *const () as u64;
        for i in 0..100 {
            assert!(thread.requests.send(own_frame(address + i)));
        }
        let kernel = FrameRow::unnamed(2, true, kernel_address, 0);
        assert!(thread.requests.send(kernel));
        let unnamed_at_stop = Arc::clone(&thread.frames_unnamed_at_stop);
        let rows: Vec<FrameRow> = thread.join(Duration::ZERO).iter().collect();
        assert_eq!(rows.len(), 101);
        assert!(rows[..100].iter().all(|row| row.function.is_none()));
        assert!(rows[100].function.is_some(), "{:?}", rows[100]);
        assert_eq!(unnamed_at_stop.load(Ordering::Relaxed), 100);
    }

    #[test]
    fn a_sample_in_libcs_plt_is_named_after_the_stub_not_left_blank() {
        // A CPU sample in the few instructions of a stub (libc calling its
        // own memcpy through one) was the one unnamed libc frame of a run.
        let libc = "/lib/x86_64-linux-gnu/libc.so.6";
        let stub = plt_ranges(Path::new(libc))[0].start + 0x13;
        let mut row = FrameRow {
            module: Some(libc.into()),
            file_offset: Some(stub),
            ..FrameRow::unnamed(1, false, 0x7f00_0000_0000 + stub, 1)
        };
        Modules::new(u64::MAX, self_resident_bytes).name(libc, None, stub, &mut row);
        let name = row.function.unwrap_or_default();
        assert!(name.ends_with("@plt") && name.len() > 4, "{name:?}");
    }

    /// `program` (C source) built by `cc` with `flags` in `dir`.
    pub(crate) fn compile_c(dir: &Path, program: &str, flags: &[&str]) -> PathBuf {
        let source = dir.join("program.c");
        std::fs::write(&source, program).unwrap();
        let exe = dir.join("program");
        let cc = std::process::Command::new("cc")
            .args(flags)
            .arg("-o")
            .arg(&exe)
            .arg(&source)
            .status()
            .unwrap();
        assert!(cc.success());
        exe
    }

    /// The symbols `readelf -W` lists with `table` (`-s`, `--dyn-syms`) in
    /// the ELF `module`: (value, size, type, section, name without version).
    pub(crate) fn readelf_symbols(
        module: &Path,
        table: &str,
    ) -> Vec<(u64, u64, String, String, String)> {
        let out = std::process::Command::new("readelf")
            .args(["-W", table])
            .arg(module)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 8 && f[0].trim_end_matches(':').parse::<u32>().is_ok()).then(|| {
                    (
                        u64::from_str_radix(f[1], 16).unwrap(),
                        f[2].parse().unwrap_or(0),
                        f[3].to_owned(),
                        f[6].to_owned(),
                        f[7].split('@').next().unwrap().to_owned(),
                    )
                })
            })
            .collect()
    }

    /// The file offset of `address` in the ELF `module`'s code.
    fn code_offset(module: &Path, address: u64) -> u64 {
        let segments = load_segments(module).unwrap();
        let code = segments.iter().find(|s| s.executable).unwrap();
        address - code.address + code.offset
    }

    /// The file offset of the start of `function` in the ELF `module`, by
    /// `readelf` (its first symbol of that name in either table).
    fn readelf_offset(module: &Path, function: &str) -> u64 {
        let symbols = readelf_symbols(module, "-s");
        let found = symbols.iter().find(|s| s.2 == "FUNC" && s.4 == function);
        code_offset(module, found.unwrap().0)
    }

    fn function_at(module: &Path, offset: u64) -> Option<String> {
        function_at_by(
            &mut Modules::new(u64::MAX, self_resident_bytes),
            module,
            offset,
        )
    }

    fn function_at_by(modules: &mut Modules, module: &Path, offset: u64) -> Option<String> {
        let path = module.to_str().unwrap();
        let mut row = FrameRow {
            module: Some(path.into()),
            file_offset: Some(offset),
            ..FrameRow::unnamed(1, false, 0x5500_0000_0000 + offset, 1)
        };
        modules.name(path, None, offset, &mut row);
        row.function
    }

    /// Modules that name every frame from a [`FunctionIndex`], as a
    /// program with a symbol table of tens of MB is named.
    fn indexing_modules() -> Modules {
        let mut modules = Modules::new(u64::MAX, self_resident_bytes);
        modules.large_symbol_table = 0;
        modules
    }

    #[test]
    fn a_module_with_a_large_symbol_table_is_named_by_its_index_as_blazesym_names_it() {
        // This test binary's functions, as readelf lists them: a few hundred
        // of them, spread over the table, each looked up in its middle.
        let exe = std::env::current_exe().unwrap();
        let functions: Vec<_> = readelf_symbols(&exe, "-s")
            .into_iter()
            .filter(|s| s.2 == "FUNC" && s.1 > 0 && s.3 != "UND")
            .collect();
        assert!(functions.len() > 10_000, "{} functions", functions.len());
        // Where several functions share an address blazesym's choice is
        // not perf's, and the index's is (the test above).
        let mut at_address = std::collections::HashMap::new();
        for function in &functions {
            *at_address.entry(function.0).or_insert(0) += 1;
        }
        let functions: Vec<_> = (functions.iter())
            .filter(|function| at_address[&function.0] == 1)
            .collect();
        let (mut by_blazesym, mut by_index) = (
            Modules::new(u64::MAX, self_resident_bytes),
            indexing_modules(),
        );
        // However large this binary's table is (CI's builds have larger).
        by_blazesym.large_symbol_table = u64::MAX;
        let mut named = 0;
        for (address, size, ..) in functions.iter().step_by(functions.len() / 300) {
            let offset = code_offset(&exe, address + size / 2);
            let blazesym = function_at_by(&mut by_blazesym, &exe, offset);
            let indexed = function_at_by(&mut by_index, &exe, offset);
            assert_eq!(indexed, blazesym, "at {address:#x}");
            named += usize::from(indexed.is_some());
        }
        assert!(named >= 300, "{named} named");
        assert!(by_blazesym.indexes.is_empty());
        assert!(by_index.indexes.values().all(|i| i.index.is_some()));
        assert_eq!(by_index.indexes.len(), 1);
    }

    #[test]
    fn a_programs_plt_stub_is_named_for_its_target_not_for_init() {
        // `_init`, sized 0 at the end of `.init`, comes just before `.plt`:
        // the symbol tables alone named a sample in `puts@plt` `_init`.
        let dir = tempfile::tempdir().unwrap();
        let exe = compile_c(
            dir.path(),
            "#include <stdio.h>\nint main(void) { return puts(\"x\"); }\n",
            &["-O0"],
        );
        let stubs = plt_ranges(&exe);
        let stub = stubs.iter().find(|r| r.end - r.start > 16).unwrap().start + 16 + 4;
        assert_eq!(function_at(&exe, stub).as_deref(), Some("puts@plt"));
    }

    #[test]
    fn a_stripped_programs_frames_are_named_by_its_dynamic_symbols() {
        let dir = tempfile::tempdir().unwrap();
        let program = "int twice(int x) { return 2 * x; }\n\
                       __attribute__((noinline)) int exported(int x) { return twice(x) + 1; }\n\
                       int main(int argc, char **argv) { return exported(argc); }\n";
        let full = compile_c(dir.path(), program, &["-O1"]);
        let stripped_start = |file: &Path| SymbolTable::read(file).unwrap().stripped_start();
        assert_eq!(stripped_start(&full), None, "it has a .symtab");
        let stripped = dir.path().join("stripped");
        std::fs::rename(
            compile_c(
                dir.path(),
                program,
                &["-O1", "-s", "-Wl,--export-dynamic-symbol=exported"],
            ),
            &stripped,
        )
        .unwrap();
        let defined = readelf_symbols(&stripped, "--dyn-syms")
            .into_iter()
            .filter(|s| s.3 != "UND")
            .map(|s| s.0)
            .min();
        assert_eq!(stripped_start(&stripped), defined);
        let offset = readelf_offset(&stripped, "exported");
        assert_eq!(
            function_at(&stripped, offset + 1).as_deref(),
            Some("exported")
        );
    }

    #[test]
    fn a_function_of_several_names_is_given_the_one_perf_gives() {
        // Global over weak and local, then the fewest leading underscores.
        let dir = tempfile::tempdir().unwrap();
        let exe = compile_c(
            dir.path(),
            "int __internal_work(int x) { return x * 7; }\n\
             extern int work(int) __attribute__((alias(\"__internal_work\")));\n\
             extern int a_weak_name(int) __attribute__((weak, alias(\"__internal_work\")));\n\
             static int a_local_name(int) __attribute__((alias(\"__internal_work\"), used));\n\
             int main(int argc, char **argv) { return work(argc); }\n",
            &["-O1"],
        );
        // libc's `read`, named from its debug file (libc6-dbg) by four
        // names there, by two in its own `.dynsym` (`read`, `__read`).
        let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
        let (work, read) = (readelf_offset(&exe, "work"), readelf_offset(libc, "read"));
        // The same choice where blazesym names and where an index does.
        for mut modules in [
            Modules::new(u64::MAX, self_resident_bytes),
            indexing_modules(),
        ] {
            let work = function_at_by(&mut modules, &exe, work + 1);
            assert_eq!(work.as_deref(), Some("work"));
            let read = function_at_by(&mut modules, libc, read + 4);
            assert_eq!(read.as_deref(), Some("read"));
        }
    }

    #[test]
    fn a_return_address_past_a_noreturn_call_is_named_for_the_caller() {
        // libc's `exit` (26 bytes) ends with its call to
        // `__run_exit_handlers`: the return address is its end, in no symbol.
        let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
        let symbols = readelf_symbols(libc, "-s");
        let exit = symbols.iter().find(|s| s.2 == "FUNC" && s.4 == "exit");
        let (start, size) = exit.map(|s| (s.0, s.1)).unwrap();
        let function = function_at(libc, code_offset(libc, start + size));
        assert!(
            function.as_deref().is_some_and(|f| f.ends_with("exit")),
            "{function:?}"
        );
    }

    #[test]
    fn a_module_parsed_again_and_again_is_named_from_its_symbols() {
        let dir = tempfile::tempdir().unwrap();
        let exe = compile_c(dir.path(), "int main(void) { return 0; }\n", &["-O0", "-g"]);
        let exe = exe.to_str().unwrap();
        let out = std::process::Command::new("nm").arg(exe).output().unwrap();
        let main = String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| {
                l.strip_suffix(" T main")
                    .map(|a| u64::from_str_radix(a, 16).unwrap())
            })
            .unwrap();
        let code = load_segments(Path::new(exe))
            .unwrap()
            .into_iter()
            .find(|s| s.executable)
            .unwrap();
        let offset = main - code.address + code.offset;
        let mut modules = Modules::new(u64::MAX, self_resident_bytes);
        let mut name = || {
            let mut row = FrameRow {
                module: Some(exe.into()),
                file_offset: Some(offset),
                ..FrameRow::unnamed(1, false, 0x5500_0000_0000 + offset, 1)
            };
            modules.name(exe, None, offset, &mut row);
            modules.release();
            (row.function, row.file)
        };
        for _ in 0..MAX_DWARF_OPENS {
            let (function, file) = name();
            assert_eq!(function.as_deref(), Some("main"));
            assert!(
                file.is_some_and(|f| f.ends_with("program.c")),
                "named from its DWARF"
            );
        }
        let (function, file) = name();
        assert_eq!((function.as_deref(), file), (Some("main"), None));
    }

    /// A stand-in for the process's resident memory: other tests in this
    /// process allocate and free at the same time.
    static FAKE_RESIDENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    #[test]
    fn one_binary_under_two_paths_is_opened_once() {
        let address = one_binary_under_two_paths_is_opened_once as *const () as u64;
        let mut first = own_frame(address);
        let path = first.module.clone().unwrap();
        let offset = first.file_offset.unwrap();
        // The same file as a process in another mount namespace shows it.
        let other = format!("/proc/self/root{path}");
        let id = crate::stacks::read_build_id(Path::new(&path));
        let mut modules = Modules::new(u64::MAX, self_resident_bytes);
        modules.name(&path, id.as_deref(), offset, &mut first);
        let mut again = own_frame(address);
        modules.name(&other, id.as_deref(), offset, &mut again);
        assert!(first.function.is_some());
        assert_eq!(again.function, first.function);
        assert_eq!(modules.opened.load(Ordering::Relaxed), 1);
        // Without a build id, another path is another module.
        modules.name(&other, None, offset, &mut own_frame(address));
        assert_eq!(modules.opened.load(Ordering::Relaxed), 2);
    }

    /// A file replaced at its path (an upgrade renames the new one over
    /// it) is another build id there: its frames are named from the new
    /// file, not from the one open since before.
    #[test]
    fn a_module_replaced_at_its_path_is_read_again() {
        let address = a_module_replaced_at_its_path_is_read_again as *const () as u64;
        let own = own_frame(address);
        let offset = own.file_offset.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app");
        let path_str = path.to_str().unwrap();
        let install = |from: &Path| {
            let staged = dir.path().join("app.new");
            std::fs::copy(from, &staged).unwrap();
            std::fs::rename(&staged, &path).unwrap();
            crate::stacks::read_build_id(&path)
        };
        let exe = std::env::current_exe().unwrap();
        let first_id = install(&exe);
        let mut modules = Modules::new(u64::MAX, self_resident_bytes);
        let mut first = own_frame(address);
        modules.name(path_str, first_id.as_deref(), offset, &mut first);
        assert!(first
            .function
            .as_deref()
            .unwrap()
            .contains("a_module_replaced_at_its_path"));
        // Another binary (this one's loader) now at the path.
        let maps = crate::stacks::parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let loader = maps
            .into_iter()
            .filter_map(|m| m.path)
            .find(|p| p.contains("/ld-linux"));
        let second_id = install(Path::new(&loader.unwrap()));
        assert_ne!(first_id, second_id);
        let mut second = own_frame(address);
        modules.name(path_str, second_id.as_deref(), offset, &mut second);
        assert_ne!(
            second.function, first.function,
            "named from the file now there"
        );
        assert_eq!(modules.opened.load(Ordering::Relaxed), 2);
        // The first build's aliases no longer count toward the bound.
        let counted: usize = modules.namings.values().map(|f| f.aliases.len()).sum();
        assert_eq!(modules.alias_names, counted);
        // A frame of a process that still runs the old file: the file at
        // the path is not its build, and names nothing of it.
        let mut old = own_frame(address);
        modules.name(path_str, first_id.as_deref(), offset, &mut old);
        assert_eq!((old.function, old.file_missing), (None, true));
        assert!(!second.file_missing && !first.file_missing);
        assert_eq!(modules.opened.load(Ordering::Relaxed), 2);
    }

    /// A container's process that exited before the symbolizer reached
    /// its frames: its root is gone, and the file the ring thread held
    /// open for them names them; without it they are left unnamed.
    #[test]
    fn a_containers_file_held_open_names_its_frames_after_its_process_is_gone() {
        let address = a_containers_file_held_open_names_its_frames_after_its_process_is_gone
            as *const () as u64;
        let offset = own_frame(address).file_offset.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let app = dir.path().join("root/app");
        std::fs::create_dir_all(app.parent().unwrap()).unwrap();
        std::fs::copy(std::env::current_exe().unwrap(), &app).unwrap();
        let id = crate::stacks::read_build_id(&app);
        let open_path = app.to_str().unwrap().to_owned();
        let count = Arc::default();
        let held = HeldModule::open(&open_path, &count).unwrap();
        std::fs::remove_dir_all(dir.path().join("root")).unwrap();
        let host_id = |path: &str| crate::stacks::read_build_id(Path::new(path));
        let mut modules = Modules::new(u64::MAX, self_resident_bytes);
        let name = |modules: &mut Modules, held: Option<&HeldModule>| {
            let file = module_file(Some(&open_path), "/app", id.as_deref(), held, host_id);
            let mut row = own_frame(address);
            modules.name(&file, id.as_deref(), offset, &mut row);
            (row.function, row.file_missing)
        };
        let (function, missing) = name(&mut modules, Some(&held));
        assert!(
            !missing
                && function
                    .as_deref()
                    .is_some_and(|f| f.contains("held_open_names_its_frames")),
            "{function:?}"
        );
        assert_eq!(name(&mut modules, None), (None, true));
    }

    /// At most [`MAX_HELD_MODULES`] files are held at once; one let go of
    /// makes room for the next.
    #[test]
    fn held_module_files_are_bounded() {
        let count = Arc::new(AtomicUsize::new(MAX_HELD_MODULES - 1));
        let exe = std::env::current_exe().unwrap();
        let exe = exe.to_str().unwrap();
        let last = HeldModule::open(exe, &count).expect("room for one");
        assert!(HeldModule::open(exe, &count).is_none());
        drop(last);
        assert!(HeldModule::open(exe, &count).is_some());
        assert_eq!(count.load(Ordering::Relaxed), MAX_HELD_MODULES - 1);
        assert!(
            HeldModule::open("/proc/self", &count).is_none(),
            "not a file"
        );
    }

    #[test]
    fn a_containers_module_is_read_here_only_when_its_build_id_matches() {
        let exe = std::env::current_exe().unwrap();
        let exe = exe.to_str().unwrap();
        let id = crate::stacks::read_build_id(Path::new(exe));
        assert!(
            id.is_some(),
            "the test binary has a build id (Debian's linker adds one)"
        );
        let host_id = |path: &str| crate::stacks::read_build_id(Path::new(path));
        let through_root = format!("/proc/4194304000/root{exe}");
        // Not a container's: its path.
        assert_eq!(module_file(None, exe, id.as_deref(), None, host_id), exe);
        // The same binary as here, by build id: the file here.
        assert_eq!(
            module_file(Some(&through_root), exe, id.as_deref(), None, host_id),
            exe
        );
        // Another binary at the same path, or one whose build id is not
        // known: through the container's root.
        assert_eq!(
            module_file(Some(&through_root), exe, Some("00"), None, host_id),
            through_root
        );
        assert_eq!(
            module_file(Some(&through_root), exe, None, None, host_id),
            through_root
        );
    }

    fn fake_resident() -> Option<u64> {
        Some(FAKE_RESIDENT.load(std::sync::atomic::Ordering::Relaxed))
    }

    #[test]
    fn function_indexes_outlive_the_modules_within_budget_and_go_least_recently_used_first() {
        let dir = tempfile::tempdir().unwrap();
        let program = compile_c(dir.path(), "int main(void) { return 0; }\n", &["-O1"]);
        let program_main = readelf_offset(&program, "main");
        let address =
            function_indexes_outlive_the_modules_within_budget_and_go_least_recently_used_first
                as *const () as u64;
        let exe = PathBuf::from(own_frame(address).module.unwrap());
        let exe_offset = own_frame(address).file_offset.unwrap();
        // Its own stand-in: the other test's growth must not count here.
        static RESIDENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let mut modules = Modules::new(MODULE_MEMORY_BUDGET, || {
            Some(RESIDENT.load(std::sync::atomic::Ordering::Relaxed))
        });
        modules.large_symbol_table = 0;
        let name = |modules: &mut Modules, module: &Path, offset| {
            assert!(function_at_by(modules, module, offset).is_some());
        };
        name(&mut modules, &program, program_main);
        name(&mut modules, &exe, exe_offset);
        let held = |modules: &Modules| {
            let mut files: Vec<PathBuf> = modules.indexes.keys().cloned().collect();
            files.sort();
            files
        };
        let mut both = vec![exe.clone(), program.clone()];
        both.sort();
        // Within budget, the modules go and the indexes stay.
        modules.release();
        assert!(modules.open.is_empty());
        assert_eq!(held(&modules), both);
        // The least recently used goes first.
        name(&mut modules, &program, program_main);
        modules.release_least_recently_used_index();
        assert_eq!(held(&modules), std::slice::from_ref(&program));
        // Over budget by what the rest of the recorder grew by: the modules
        // go, the indexes (within the budget by their own size) stay, and
        // the budget counts again from there.
        name(&mut modules, &exe, exe_offset);
        RESIDENT.fetch_add(
            MODULE_MEMORY_BUDGET + 1,
            std::sync::atomic::Ordering::Relaxed,
        );
        assert!(modules.over_budget());
        modules.release();
        assert!(modules.open.is_empty());
        assert_eq!(held(&modules), both);
        assert!(!modules.over_budget());
        // What the indexes take counts: grown by the rest of the budget,
        // it is over again.
        let room = MODULE_MEMORY_BUDGET - modules.index_bytes();
        RESIDENT.fetch_add(room, std::sync::atomic::Ordering::Relaxed);
        assert!(!modules.over_budget());
        RESIDENT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        assert!(modules.over_budget());
        // Idle: everything goes, indexes with the modules.
        name(&mut modules, &exe, exe_offset);
        modules.release();
        assert_eq!(held(&modules), both);
        modules.last_user_frame -= IDLE_RELEASE;
        modules.release_between_bursts();
        assert!(modules.indexes.is_empty());
        // Together within the budget by their own size, however the
        // resident size reads: the least recently used goes.
        let exe_index = FunctionIndex::build(&exe, MAX_INDEXED_FUNCTIONS).unwrap();
        modules.budget = exe_index.bytes() as u64;
        name(&mut modules, &program, program_main);
        assert_eq!(held(&modules), std::slice::from_ref(&program));
        name(&mut modules, &exe, exe_offset);
        assert_eq!(held(&modules), std::slice::from_ref(&exe));
        // Room is made before a build, for the half of the symbol table
        // that building holds, not only after it: the exe's index made way
        // for the program's small one...
        name(&mut modules, &program, program_main);
        assert_eq!(held(&modules), std::slice::from_ref(&program));
        // ...and the program's is kept for the exe's only if both fit.
        let building = symbol_table_size(&exe).unwrap() / 2;
        modules.budget = modules.index_bytes() + building;
        modules.make_room_for_index(&exe);
        assert_eq!(held(&modules), std::slice::from_ref(&program));
        modules.budget -= 1;
        modules.make_room_for_index(&exe);
        assert!(modules.indexes.is_empty());
    }

    #[test]
    fn modules_are_let_go_when_idle_or_over_budget() {
        let address = modules_are_let_go_when_idle_or_over_budget as *const () as u64;
        let mut row = own_frame(address);
        let path = row.module.clone().unwrap();
        let offset = row.file_offset.unwrap();
        let grow = |bytes| FAKE_RESIDENT.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);

        let mut modules = Modules::new(MODULE_MEMORY_BUDGET, fake_resident);
        let checked_long_ago =
            |modules: &mut Modules| modules.budget_checked_at -= BUDGET_CHECK_INTERVAL;
        modules.name(&path, None, offset, &mut row);
        assert!(row.function.is_some());
        // Within budget and just used: kept open for the next burst.
        grow(MODULE_MEMORY_BUDGET);
        checked_long_ago(&mut modules);
        modules.release_between_bursts();
        assert_eq!(modules.open.len(), 1);
        // Over budget, but the size was read just now: kept until the
        // next reading...
        grow(1);
        modules.release_between_bursts();
        assert_eq!(modules.open.len(), 1);
        // ...and let go at the end of a burst after it...
        checked_long_ago(&mut modules);
        modules.release_between_bursts();
        assert!(modules.open.is_empty());
        // ...and the budget counts again from there, the indexes kept in it.
        modules.name(&path, None, offset, &mut own_frame(address));
        grow(MODULE_MEMORY_BUDGET - modules.index_bytes());
        checked_long_ago(&mut modules);
        modules.release_between_bursts();
        assert_eq!(modules.open.len(), 1);
        // Idle for longer than IDLE_RELEASE: let go, whatever it holds.
        modules.last_user_frame -= IDLE_RELEASE;
        modules.release_between_bursts();
        assert!(modules.open.is_empty());
    }
}
