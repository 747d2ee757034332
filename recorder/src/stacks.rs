//! Stacks to rows: every frame gets an identity that does not depend on
//! where a binary happened to be mapped, every stack one made of its
//! frames', and each new frame goes to the symbolizer once.
//!
//! Runs on the ring-buffer thread, so it only does cheap work: a lookup in
//! the process's memory map (read once per process and program from
//! `/proc/<pid>/maps`, while the process is alive, and again when an
//! address falls outside it), two hash-set probes, and a non-blocking send.
//! Each stack record says which program its process ran ([`Program`]): a
//! sample taken before an `execve` and read after it is not named by the
//! new program's map (its frames stay unnamed), nor does it stop the new
//! program's samples from being named.
//! A process in another mount namespace (a container) mapped its files by
//! paths of its own: they are read through `/proc/<pid>/root`, so its build
//! ids and names are its own files', not the host's files of those paths.
//! Names are resolved on the symbolizer's thread ([`crate::symbolize`]).
//!
//! Identities: a user frame is (module build id, else path; file offset), so
//! the same code is one frame in every process and chunk; a kernel frame is
//! its address (stable for one boot); a frame in anonymous memory (JIT code)
//! is (pid, address); a stack is its frames, leaf first. Identities are
//! FNV-1a 64 hashes, kept in memory only. What is written, `frame_id` and
//! `stack_id`, is a number given to each identity when first seen
//! ([`Numbering`]): counting up from a random start each run, so ids are
//! small steps apart and compress, where 64-bit hashes took 8 bytes each,
//! two thirds of a parallel build's stack and frame bytes (BENCHMARKS.md,
//! "Numbered ids").

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use crate::{
    rows::{FrameRows, StackRows},
    symbolize::FrameRequests,
    unwind::{ProcessUnwinder, StackCopy, Unwinders},
};

/// Stacks and frames remembered as written, with their ids; past this, the
/// maps are cleared and the rows seen again are written again under new
/// ids (a frame's rows then say the same under two ids, each named). A map
/// this full takes about 2.2 MiB (a set of hashes took 1.2); a million
/// entries (a day of new stacks on a busy host) would take 34 MiB each,
/// half the recorder's memory bound.
const MAX_REMEMBERED: usize = 1 << 16;

/// Frames remembered as unnamed for a missing file
/// ([`StackInterner::frame_named`]): a few per program deleted while its
/// frames waited to be named. Past this the memory starts afresh, and
/// those frames stay unnamed.
const MAX_MISSING_FILES: usize = 4096;
/// Processes whose executable mappings are kept (a few KiB each); past
/// this the cache starts over.
const MAX_PROCESSES: usize = 1024;
/// How long a file whose path goes with its process is held open after its
/// process's samples were last met ([`StackInterner::held_module`]): longer
/// than the samples of a process that exited wait in the ring, or its
/// frames in the symbolizer's queue, on a loaded host.
const HOLD_AFTER_LAST_SEEN: Duration = Duration::from_secs(10);

/// At the end of a drain, the symbolizer is woken for the frames queued
/// since its last wake once this many wait, or once the first of them has
/// waited [`WAKE_SYMBOLIZER_AFTER`]; else its own timer finds them within a
/// second. Woken after every drain that found a new frame, it was woken
/// 30 times a second during a parallel build and took the CPU from the
/// ring thread 20 times a second; the wakes and switches were a sixth of
/// the recorder's CPU (BENCHMARKS.md, "The symbolizer woken in batches").
const WAKE_SYMBOLIZER_FRAMES: usize = 512;
const WAKE_SYMBOLIZER_AFTER: Duration = Duration::from_millis(250);

/// Files whose build id is kept.
const MAX_BUILD_IDS: usize = 4096;
/// How long a build id read from a file is taken for the same path and
/// inode without a look at the file. Both stay when a file is rewritten in
/// place (`cp` over a binary not running), and a freed inode may be the
/// next file written at that path (the upgrade after next): past this, the
/// file's [`FileStamp`] is read (a `stat`), and the build id again only if
/// it changed. Reading every build id again every 10 s instead cost 3-7 %
/// more recorder CPU during a parallel build (BENCHMARKS.md, "Build ids
/// by file").
pub const BUILD_ID_TRUST: Duration = Duration::from_secs(1);
/// A process's maps are re-read at most this often when an address misses them.
const MAPS_REREAD: Duration = Duration::from_millis(200);
/// ... except for its first few misses, re-read at once: a program's first
/// sample often comes while the loader is still mapping its libraries, and
/// a short one (a compiler, `sort`) is gone long before MAPS_REREAD.
const QUICK_REREADS: u8 = 4;

/// FNV-1a 64 over bytes, continuing from `hash`.
fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// The identity of a kernel frame.
pub fn kernel_frame_key(address: u64) -> i64 {
    let h = fnv1a(FNV_OFFSET, b"kernel\0");
    fnv1a(h, &address.to_le_bytes()) as i64
}

/// The identity of a user frame in a file: `module_key` is its build id
/// in hex when it has one, else its path.
pub fn user_frame_key(module_key: &str, file_offset: u64) -> i64 {
    let h = fnv1a(FNV_OFFSET, b"user\0");
    let h = fnv1a(h, module_key.as_bytes());
    fnv1a(fnv1a(h, b"\0"), &file_offset.to_le_bytes()) as i64
}

/// The identity of a frame in anonymous memory (JIT code): only
/// meaningful within its process.
pub fn anon_frame_key(pid: u32, address: u64) -> i64 {
    let h = fnv1a(FNV_OFFSET, b"anon\0");
    let h = fnv1a(h, &pid.to_le_bytes());
    fnv1a(h, &address.to_le_bytes()) as i64
}

/// The identity of a stack of frames, given leaf first by their ids.
pub fn stack_key(frame_ids: &[i64]) -> i64 {
    frame_ids
        .iter()
        .fold(fnv1a(FNV_OFFSET, b"stack\0"), |h, id| {
            fnv1a(h, &id.to_le_bytes())
        }) as i64
}

/// Bits of an id that count; the bits above them (but the sign) are a
/// random start drawn when the count begins and again each time it fills.
const COUNTED_BITS: u32 = 20;

/// The ids written for frames, or for stacks: consecutive numbers from a
/// random start. Consecutive, so that a chunk's ids differ in their low
/// bits only: sorted, they delta-encode to a few bits, and in a dictionary
/// their high bytes repeat for zstd. From a random start of 43 bits (and
/// a new one each 2^20 ids), so that two runs (sessions of one recording,
/// hosts read together) give the same id to different things with odds of
/// about n² / 2^44 for n starts drawn (10,000: 6 in a million), and
/// readers may join `stack` and `frame` by id alone, as they did when ids
/// were hashes.
struct Numbering {
    start: i64,
    counted: i64,
}

impl Numbering {
    fn new() -> Numbering {
        Numbering {
            start: random_start(),
            counted: 0,
        }
    }

    fn next_id(&mut self) -> i64 {
        if self.counted == 1 << COUNTED_BITS {
            *self = Numbering::new();
        }
        self.counted += 1;
        self.start | (self.counted - 1)
    }
}

/// A random multiple of 2^[`COUNTED_BITS`] in `0..2^63`.
fn random_start() -> i64 {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes at most `bytes.len()` bytes into `bytes`.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    let random = if got == bytes.len() as isize {
        u64::from_ne_bytes(bytes)
    } else {
        // No getrandom (a kernel before 3.17): the clock's nanoseconds,
        // different for each run all the same.
        fnv1a(
            FNV_OFFSET,
            &std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
                .to_le_bytes(),
        )
    };
    ((random >> (COUNTED_BITS + 1)) << COUNTED_BITS) as i64
}

/// The program a process runs, as its stack records carry it and
/// `/proc/<pid>/stat` shows it: `execve` gives both addresses new values
/// (the kernel randomizes them for every program it starts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Program {
    pub start_code: u64,
    pub start_stack: u64,
}

/// A process and the program it ran when a stack was taken: the key of
/// the memory maps read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Running {
    pub pid: u32,
    pub program: Program,
}

/// The [`Program`] in a `/proc/<pid>/stat` text: fields 26 (startcode)
/// and 28 (startstack), counted from the last `)` as the comm may hold
/// spaces and parentheses.
pub fn parse_stat_program(stat: &str) -> Option<Program> {
    let (_, fields) = crate::procfs::split_stat(stat)?;
    let mut fields = fields.split_whitespace().skip(26 - 3);
    let start_code = fields.next()?.parse().ok()?;
    let start_stack = fields.nth(1)?.parse().ok()?;
    Some(Program {
        start_code,
        start_stack,
    })
}

/// Which file a mapping maps: its device and inode. A package upgrade
/// renames the new file over the old, so the same path is another inode
/// for the processes started after it, while those started before still
/// map the old one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileKey {
    pub dev_major: u32,
    pub dev_minor: u32,
    pub inode: u64,
}

impl FileKey {
    /// None for what maps no file (inode 0): anonymous memory, `[vdso]`.
    fn of(dev_major: u32, dev_minor: u32, inode: u64) -> Option<FileKey> {
        (inode != 0).then_some(FileKey {
            dev_major,
            dev_minor,
            inode,
        })
    }
}

/// One line of `/proc/<pid>/maps` that maps code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Offset in the file of `start`.
    pub offset: u64,
    /// The file, or a pseudo name like `[vdso]`; None for anonymous memory.
    pub path: Option<String>,
    /// The file's device and inode; None where `path` names no file.
    pub file: Option<FileKey>,
}

/// Parses the executable mappings of a `/proc/<pid>/maps` text, sorted by start.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    let mut maps: Vec<Mapping> = text
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(6, ' ');
            let range = fields.next()?;
            let perms = fields.next()?;
            let offset = fields.next()?;
            let (major, minor) = fields.next()?.split_once(':')?;
            let inode = fields.next()?;
            let path = fields.next().map(str::trim).filter(|p| !p.is_empty());
            if !perms.contains('x') {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                offset: u64::from_str_radix(offset, 16).ok()?,
                path: path.map(str::to_string),
                file: FileKey::of(
                    u32::from_str_radix(major, 16).ok()?,
                    u32::from_str_radix(minor, 16).ok()?,
                    inode.parse().ok()?,
                ),
            })
        })
        .collect();
    maps.sort_by_key(|m| m.start);
    maps
}

/// The executable mappings of an open `/proc/<pid>/maps`, sorted by
/// start. Where the kernel answers `PROCMAP_QUERY` (Linux 6.11 and later)
/// they are asked of it, one executable mapping at a time; `query` is
/// cleared where it does not, and the text is parsed from then on (into
/// `text`, reused). The text formats every mapping of the process, and it
/// was the largest part of what a new process cost the recorder: a Python's 105
/// mappings took 105-126 µs to read against 27 µs for its 19 executable
/// ones by query. The query leaves out `[vsyscall]`, the fixed legacy page
/// (not a mapping of the process's own), which C libraries have not called
/// for a decade.
pub fn read_executable_mappings(
    maps: &std::fs::File,
    query: &mut bool,
    text: &mut Vec<u8>,
) -> Vec<Mapping> {
    if *query {
        match query_executable_mappings(maps, text) {
            Ok(mappings) => return mappings,
            // Gone since the open: its memory is no longer there to read.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Vec::new(),
            // An older kernel, or a file that is not procfs's (tests).
            Err(_) => *query = false,
        }
    }
    match crate::procfs::pread_all(maps, text) {
        Ok(()) => parse_maps(&String::from_utf8_lossy(text)),
        Err(_) => Vec::new(),
    }
}

/// `struct procmap_query` of `<linux/fs.h>`.
#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

/// `_IOWR('f', 17, struct procmap_query)`.
const PROCMAP_QUERY: u64 =
    (3 << 30) | ((std::mem::size_of::<ProcmapQuery>() as u64) << 16) | ((b'f' as u64) << 8) | 17;
const PROCMAP_QUERY_VMA_EXECUTABLE: u64 = 0x04;
const PROCMAP_QUERY_COVERING_OR_NEXT_VMA: u64 = 0x10;

/// Every executable mapping, by `PROCMAP_QUERY` from address 0 up: each
/// answer is the first at or after the address asked. `name` holds the
/// names (paths) as the kernel writes them.
fn query_executable_mappings(
    maps: &std::fs::File,
    name: &mut Vec<u8>,
) -> std::io::Result<Vec<Mapping>> {
    use std::os::fd::AsRawFd;
    name.clear();
    name.resize(libc::PATH_MAX as usize + 1, 0);
    let mut mappings = Vec::new();
    let mut address = 0;
    loop {
        let mut q = ProcmapQuery {
            size: std::mem::size_of::<ProcmapQuery>() as u64,
            query_flags: PROCMAP_QUERY_COVERING_OR_NEXT_VMA | PROCMAP_QUERY_VMA_EXECUTABLE,
            query_addr: address,
            vma_name_addr: name.as_mut_ptr() as u64,
            vma_name_size: name.len() as u32,
            ..ProcmapQuery::default()
        };
        // SAFETY: `q` is the struct the kernel reads and writes for this
        // request, of the size it says, and its name buffer is `name`, of
        // the length it gives.
        if unsafe { libc::ioctl(maps.as_raw_fd(), PROCMAP_QUERY as _, &mut q) } != 0 {
            let e = std::io::Error::last_os_error();
            // Past the last one.
            return match e.raw_os_error() {
                Some(libc::ENOENT) => Ok(mappings),
                _ => Err(e),
            };
        }
        // The size the kernel wrote counts the name's NUL; 0 for none.
        let length = (q.vma_name_size as usize).saturating_sub(1).min(name.len());
        mappings.push(Mapping {
            start: q.vma_start,
            end: q.vma_end,
            offset: q.vma_offset,
            path: (length > 0).then(|| String::from_utf8_lossy(&name[..length]).into_owned()),
            file: FileKey::of(q.dev_major, q.dev_minor, q.inode),
        });
        if q.vma_end <= address {
            return Ok(mappings);
        }
        address = q.vma_end;
    }
}

/// The mapping holding `address`, if any.
pub fn find_mapping(maps: &[Mapping], address: u64) -> Option<&Mapping> {
    let i = maps.partition_point(|m| m.start <= address);
    maps[..i].last().filter(|m| address < m.end)
}

/// What the symbolizer needs to name a frame; it answers with a [`FrameRow`].
#[derive(Clone, Debug, PartialEq)]
pub struct FrameRow {
    pub frame_id: i64,
    pub kernel: bool,
    pub address: u64,
    pub module: Option<String>,
    pub build_id: Option<String>,
    pub file_offset: Option<u64>,
    /// `file_offset` in the module's own ELF addresses.
    pub elf_address: Option<u64>,
    /// The process the frame was first seen in (for JIT maps).
    pub pid: u32,
    /// Where the recorder reads `module` when that is not its own path: a
    /// process in another mount namespace's file, through
    /// `/proc/<pid>/root`. Not stored.
    pub open_path: Option<String>,
    /// On a process's first frame in anonymous executable memory (JIT
    /// code): its `/tmp`, where its perf map will be. Not stored.
    pub jit_tmp: Option<crate::symbolize::JitTmp>,
    /// `open_path`'s file, held open while the process ran: that path
    /// goes with the process. Not stored.
    pub held: Option<crate::symbolize::HeldModule>,
    /// Code a perf map may name: in anonymous executable memory, or outside
    /// the map of a process known to have such code (JIT code freed since).
    /// Any other address in no mapping is a bad unwind, not worth holding
    /// for a map that will never name it. Not stored.
    pub maybe_jit: bool,
    /// Set by the symbolizer when no file of the frame's build was at the
    /// path it was given (deleted since, or replaced by another build):
    /// the frame may still be named from another path of that build
    /// ([`StackInterner::frame_named`]). Not stored.
    pub file_missing: bool,
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    pub inlined: Option<String>,
}

impl FrameRow {
    /// A frame known only by its identity and address, before any naming.
    pub fn unnamed(frame_id: i64, kernel: bool, address: u64, pid: u32) -> FrameRow {
        FrameRow {
            frame_id,
            kernel,
            address,
            module: None,
            build_id: None,
            file_offset: None,
            elf_address: None,
            pid,
            open_path: None,
            jit_tmp: None,
            held: None,
            maybe_jit: false,
            file_missing: false,
            function: None,
            file: None,
            line: None,
            inlined: None,
        }
    }
}

impl FrameRows {
    pub fn push(&mut self, f: &FrameRow) {
        self.frame_id.append_value(f.frame_id);
        self.kind
            .append_value(if f.kernel { "kernel" } else { "user" });
        // A file's frame is one frame in every process that maps the file,
        // each at its own address: an address would say where the first
        // of them had it, and took a fifth of a Rust build's `frame` bytes
        // (BENCHMARKS.md, "A frame in a file known by its offset alone").
        self.address
            .append_option(f.file_offset.is_none().then_some(f.address));
        self.module.append_option(f.module.as_deref());
        self.build_id.append_option(f.build_id.as_deref());
        self.file_offset.append_option(f.file_offset);
        self.function.append_option(f.function.as_deref());
        self.file.append_option(f.file.as_deref());
        self.line.append_option(f.line.map(|l| l as i32));
        self.inlined.append_option(f.inlined.as_deref());
        self.elf_address.append_option(f.elf_address);
    }
}

struct ProcessMaps {
    maps: Vec<Mapping>,
    /// Built on its first sample with a stack copy, paired with the
    /// [`Unwinders::generation`] whose module sections it holds.
    unwinder: Option<(u64, ProcessUnwinder)>,
    read_at: Instant,
    /// Times the maps were read again at once (see [`QUICK_REREADS`]).
    quick_rereads: u8,
    /// `<proc_root>/<pid>/root` when the process is in another mount
    /// namespace than the recorder (its paths are not ours).
    root: Option<String>,
    /// Whether its `/tmp` went to the symbolizer with a JIT frame.
    jit_tmp_sent: bool,
    /// The frame ids of addresses in its file mappings that are known to
    /// the symbolizer ([`StackInterner::known_frame`]).
    known_frames: ahash::AHashMap<u64, i64>,
}

impl ProcessMaps {
    /// A process gone, or one whose program is no longer running: nothing
    /// to find, and no reason to read its map again before [`MAPS_REREAD`].
    fn closed() -> ProcessMaps {
        ProcessMaps {
            maps: Vec::new(),
            unwinder: None,
            read_at: Instant::now(),
            quick_rereads: QUICK_REREADS,
            root: None,
            jit_tmp_sent: false,
            known_frames: ahash::AHashMap::default(),
        }
    }

    fn no_quick_rereads(&mut self) {
        self.read_at = Instant::now();
        self.quick_rereads = QUICK_REREADS;
    }
}

/// Turns raw stacks into `stack_id`s, writing each new stack to `stack`
/// rows and sending each new frame to the symbolizer.
pub struct StackInterner {
    proc_root: PathBuf,
    processes: ahash::AHashMap<Running, ProcessMaps>,
    build_ids: BuildIds<(String, Option<FileKey>)>,
    /// Stacks written, by identity, with their ids. ahash's maps: with
    /// std's SipHash, looking up every id of every sample was a quarter of
    /// the interning in a profile of two builds.
    written_stacks: ahash::AHashMap<i64, i64>,
    /// Frames seen, by identity, with their ids; an id's bitwise NOT
    /// (ids are never negative) while its frame, written unnamed, waits to
    /// be sent again ([`StackInterner::send`]).
    seen_frames: ahash::AHashMap<i64, i64>,
    stack_numbers: Numbering,
    frame_numbers: Numbering,
    /// Frames the symbolizer could not name because their file was not at
    /// the path they were sent with ([`FrameRow::file_missing`]), with
    /// that path: sent again when seen from another path.
    missing_files: ahash::AHashMap<i64, String>,
    /// Entries of the processes' `known_frames`, at most [`MAX_REMEMBERED`]
    /// (past that they start afresh): counted here, as processes' maps
    /// are let go of, so this is at least what they hold.
    known_frames: usize,
    symbolizer: FrameRequests,
    /// Frames queued since the symbolizer was last woken: how many, and
    /// when the first was.
    queued: Option<(usize, Instant)>,
    /// Frames written unnamed because the symbolizer's queue was full.
    pub unnamed: u64,
    frame_ids: Vec<i64>,
    unwinders: Unwinders,
    unwound: Vec<u64>,
    /// The recorder's own mount namespace (`/proc/self/ns/mnt`), which
    /// does not change while it runs.
    own_mount_namespace: Option<PathBuf>,
    /// Whether to ask the kernel for mappings (see [`read_executable_mappings`]).
    procmap_query: bool,
    /// The text of the last `/proc` file read, its capacity kept.
    proc_text: Vec<u8>,
    /// Files whose path goes with their process, held open for its frames
    /// ([`crate::symbolize::HeldModule`]), by file, with when their process
    /// was last met: opened when its map is read, while it surely runs, and
    /// let go of [`HOLD_AFTER_LAST_SEEN`] after that (an open file in a
    /// container's root keeps its runtime from unmounting it).
    held_files: ahash::AHashMap<FileKey, (crate::symbolize::HeldModule, Instant)>,
    /// How many are held, by this and by the frames in the queue.
    held_modules: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// When held files were last looked over for ones to let go of.
    held_swept_at: Instant,
}

impl StackInterner {
    pub fn new(proc_root: &Path, symbolizer: impl Into<FrameRequests>) -> Self {
        StackInterner {
            proc_root: proc_root.to_path_buf(),
            processes: ahash::AHashMap::new(),
            build_ids: BuildIds::default(),
            written_stacks: ahash::AHashMap::default(),
            seen_frames: ahash::AHashMap::default(),
            stack_numbers: Numbering::new(),
            frame_numbers: Numbering::new(),
            missing_files: ahash::AHashMap::new(),
            known_frames: 0,
            symbolizer: symbolizer.into(),
            queued: None,
            unnamed: 0,
            frame_ids: Vec::new(),
            unwinders: Unwinders::default(),
            unwound: Vec::new(),
            own_mount_namespace: std::fs::read_link(proc_root.join("self/ns/mnt")).ok(),
            procmap_query: true,
            proc_text: Vec::new(),
            held_files: ahash::AHashMap::new(),
            held_modules: std::sync::Arc::default(),
            held_swept_at: Instant::now(),
        }
    }

    /// The end of a drain, at `now`: lets go of the files held longest
    /// and wakes the symbolizer once enough frames wait for it, or the
    /// first has waited long enough ([`WAKE_SYMBOLIZER_FRAMES`]), not once
    /// a frame ([`FrameRequests`]).
    pub fn drain_ended(&mut self, now: Instant) {
        self.let_go_of_held_files(now);
        let due = self.queued.is_some_and(|(count, first)| {
            count >= WAKE_SYMBOLIZER_FRAMES
                || now.saturating_duration_since(first) >= WAKE_SYMBOLIZER_AFTER
        });
        if due {
            self.wake_symbolizer();
        }
    }

    /// Wakes the symbolizer for every frame queued since it was last woken.
    pub fn wake_symbolizer(&mut self) {
        if self.queued.take().is_some() {
            self.symbolizer.wake();
        }
    }

    /// A process replaced its program: its old map no longer applies.
    pub fn forget(&mut self, pid: u32) {
        self.processes.retain(|running, _| running.pid != pid);
    }

    /// The `stack_id` of kernel then user addresses (each leaf first)
    /// taken in `running`; None for an empty stack. New stacks land in `stacks`, new
    /// frames go to the symbolizer (or, when it is saturated, straight
    /// into `frames` without names).
    pub fn intern(
        &mut self,
        running: Running,
        kernel: &[u64],
        user: &[u64],
        stacks: &mut StackRows,
        frames: &mut FrameRows,
    ) -> Option<i64> {
        if kernel.is_empty() && user.is_empty() {
            return None;
        }
        let mut frame_ids = std::mem::take(&mut self.frame_ids);
        frame_ids.clear();
        for &address in kernel {
            let key = kernel_frame_key(address);
            let (id, new) = self.frame_seen(key);
            frame_ids.push(id);
            if new {
                self.send(
                    key,
                    FrameRow::unnamed(id, true, address, running.pid),
                    frames,
                );
            }
        }
        for &address in user {
            if let Some(id) = self.known_frame(running, address) {
                frame_ids.push(id);
                continue;
            }
            let (key, mut row) = self.user_frame(running, address);
            let (id, new) = self.frame_seen(key);
            row.frame_id = id;
            frame_ids.push(id);
            let carries_tmp = row.jit_tmp.is_some();
            let in_file = row.file_offset.is_some() && row.module.is_some();
            let new = new || self.found_elsewhere(&row);
            let sent = new && self.send(key, row, frames);
            if in_file && (sent || !new) {
                self.remember_frame(running, address, id);
            }
            if carries_tmp && !sent {
                // The symbolizer never got the process's /tmp: the next
                // JIT frame carries it instead.
                if let Some(process) = self.processes.get_mut(&running) {
                    process.jit_tmp_sent = false;
                }
            }
        }
        if self.written_stacks.len() >= MAX_REMEMBERED {
            self.written_stacks.clear();
        }
        let id = match self.written_stacks.entry(stack_key(&frame_ids)) {
            std::collections::hash_map::Entry::Occupied(written) => *written.get(),
            std::collections::hash_map::Entry::Vacant(new) => {
                let id = *new.insert(self.stack_numbers.next_id());
                stacks.push(id, &frame_ids);
                id
            }
        };
        self.frame_ids = frame_ids;
        Some(id)
    }

    /// [`StackInterner::intern`] with the user stack unwound from `copy`
    /// (a sample's registers and top of its user stack), or, where that
    /// finds no more, the frame-pointer walk `user`.
    pub fn intern_copied(
        &mut self,
        running: Running,
        kernel: &[u64],
        user: &[u64],
        copy: &StackCopy,
        stacks: &mut StackRows,
        frames: &mut FrameRows,
    ) -> Option<i64> {
        let mut unwound = std::mem::take(&mut self.unwound);
        let id = if self.unwind(running, copy, user, &mut unwound) {
            self.intern(running, kernel, &unwound, stacks, frames)
        } else {
            self.intern(running, kernel, user, stacks, frames)
        };
        self.unwound = unwound;
        id
    }

    fn unwind(&mut self, key: Running, copy: &StackCopy, user: &[u64], out: &mut Vec<u64>) -> bool {
        // Reads the process's map if it is new, or the sample's address new to it.
        if self.mapping_of(key, copy.ip).is_none() {
            return false;
        }
        let Some(process) = self.processes.get(&key) else {
            return false;
        };
        let generation = self.unwinders.generation;
        if process
            .unwinder
            .as_ref()
            .is_none_or(|(built, _)| *built != generation)
        {
            let (maps, root) = (process.maps.clone(), process.root.clone());
            let files: Vec<(&Mapping, String, String)> = maps
                .iter()
                .filter_map(|m| {
                    let path = m.path.as_deref()?;
                    if path == "[vdso]" {
                        let open = crate::elf::vdso_path()?.to_owned();
                        return Some((m, open, path.to_owned()));
                    }
                    let path = Some(path).filter(|p| !p.starts_with('['))?;
                    let (path, open) = file_of(&self.proc_root, key.pid, root.as_deref(), m, path);
                    let open = open.unwrap_or(path);
                    // Sections without a build id are kept by file, not
                    // path: an upgraded one is another file.
                    let key = self
                        .build_id_of(key.pid, m, &open)
                        .unwrap_or_else(|| match m.file {
                            Some(f) => {
                                format!("{open} {}:{}:{}", f.dev_major, f.dev_minor, f.inode)
                            }
                            None => open.clone(),
                        });
                    Some((m, open, key))
                })
                .collect();
            let unwinder = self.unwinders.for_process(files);
            if self.unwinders.generation != generation {
                // The modules started over to stay in their budget: the
                // unwinders built before hold the old ones' sections.
                for process in self.processes.values_mut() {
                    process.unwinder = None;
                }
            }
            let built = (self.unwinders.generation, unwinder);
            if let Some(process) = self.processes.get_mut(&key) {
                process.unwinder = Some(built);
            }
        }
        let Some(ProcessMaps {
            maps,
            unwinder: Some((_, unwinder)),
            ..
        }) = self.processes.get(&key)
        else {
            return false;
        };
        self.unwinders.unwind(unwinder, maps, copy, user, out)
    }

    /// The id of the frame `key`, and whether its row is to be sent now:
    /// on its first sighting, and the next after it was written unnamed.
    fn frame_seen(&mut self, key: i64) -> (i64, bool) {
        if self.seen_frames.len() >= MAX_REMEMBERED {
            // Sent again on their next sighting, from every process.
            self.seen_frames.clear();
            self.forget_known_frames();
        }
        match self.seen_frames.entry(key) {
            std::collections::hash_map::Entry::Occupied(seen) => {
                let seen = seen.into_mut();
                let unsent = *seen < 0;
                if unsent {
                    *seen = !*seen;
                }
                (*seen, unsent)
            }
            std::collections::hash_map::Entry::Vacant(new) => {
                (*new.insert(self.frame_numbers.next_id()), true)
            }
        }
    }

    /// The frame id of `address` in `running`'s process when it is in a
    /// file mapping and was sent before: most of a process's samples are
    /// in code it was sampled in before (7 of 10 user frames of a
    /// build's `cc1`), and placing an address again (its mapping, the
    /// mapped file's build id, a row of strings to compare by id) was most
    /// of the interning. The process's map, while the recorder holds it,
    /// places the address where it did.
    fn known_frame(&self, running: Running, address: u64) -> Option<i64> {
        let process = self.processes.get(&running)?;
        process.known_frames.get(&address).copied()
    }

    fn remember_frame(&mut self, running: Running, address: u64, id: i64) {
        if self.known_frames >= MAX_REMEMBERED {
            self.forget_known_frames();
        }
        if let Some(process) = self.processes.get_mut(&running) {
            if process.known_frames.insert(address, id).is_none() {
                self.known_frames += 1;
            }
        }
    }

    fn forget_known_frames(&mut self) {
        for process in self.processes.values_mut() {
            process.known_frames = ahash::AHashMap::default();
        }
        self.known_frames = 0;
    }

    /// Whether `row`, a frame sent before, is now seen at another path than
    /// the one whose file was missing when the symbolizer came to it. Tests
    /// that run one program from a scratch directory then delete it, or
    /// builds that run a tool from a temporary one, leave the symbolizer a
    /// few of their frames to name after the file went; the same build
    /// run from elsewhere is the same frame, and it was never sent again.
    fn found_elsewhere(&mut self, row: &FrameRow) -> bool {
        if self.missing_files.is_empty() {
            return false;
        }
        let path = row.open_path.as_deref().or(row.module.as_deref());
        match self.missing_files.get(&row.frame_id) {
            Some(missing) if Some(missing.as_str()) != path => {
                self.missing_files.remove(&row.frame_id);
                true
            }
            _ => false,
        }
    }

    /// Told of each frame the symbolizer passes on: one it could not name
    /// because its file was missing is sent again when seen from another
    /// path ([`StackInterner::found_elsewhere`]); readers take its named
    /// row over the unnamed one.
    pub fn frame_named(&mut self, row: &FrameRow) {
        if !row.file_missing {
            return;
        }
        let Some(path) = row.open_path.as_ref().or(row.module.as_ref()) else {
            return;
        };
        if self.missing_files.len() >= MAX_MISSING_FILES {
            self.missing_files.clear();
        }
        self.missing_files.insert(row.frame_id, path.clone());
        // Processes that saw it while it waited to be named look again.
        for process in self.processes.values_mut() {
            process.known_frames.retain(|_, id| *id != row.frame_id);
        }
    }

    /// Queues a new frame (identity `key`) for naming. When the symbolizer
    /// is behind (a huge binary's debug info to parse), the frame is
    /// written unnamed now, and sent again on its next sighting, under the
    /// same id: readers take the named row of a frame over an unnamed one.
    /// Whether it was queued.
    fn send(&mut self, key: i64, row: FrameRow, frames: &mut FrameRows) -> bool {
        match self.symbolizer.try_send(row) {
            None => {
                let (count, _) = self.queued.get_or_insert_with(|| (0, Instant::now()));
                *count += 1;
                true
            }
            Some(row) => {
                // Behind: it may be waiting for the end of this drain.
                self.symbolizer.wake();
                self.unnamed += 1;
                if let Some(seen) = self.seen_frames.get_mut(&key) {
                    *seen = !row.frame_id;
                }
                frames.push(&row);
                false
            }
        }
    }

    /// The process's `/tmp`, opened now, on its first frame in anonymous
    /// memory (see [`crate::symbolize::JitTmp`]); None after that.
    fn first_jit_frame(&mut self, running: Running) -> Option<crate::symbolize::JitTmp> {
        let process = self.processes.get_mut(&running)?;
        if std::mem::replace(&mut process.jit_tmp_sent, true) {
            return None;
        }
        crate::symbolize::JitTmp::open(&self.proc_root, running.pid)
    }

    /// Identifies a user address through the process's memory map: its
    /// identity, and its row without an id yet.
    fn user_frame(&mut self, running: Running, address: u64) -> (i64, FrameRow) {
        let pid = running.pid;
        let mut row = FrameRow::unnamed(0, false, address, pid);
        let anon = anon_frame_key(pid, address);
        let Some(mapping) = self.mapping_of(running, address) else {
            row.maybe_jit = self.processes.get(&running).is_some_and(|p| p.jit_tmp_sent);
            return (anon, row);
        };
        let Some(path) = mapping.path.as_deref() else {
            row.maybe_jit = true;
            row.jit_tmp = self.first_jit_frame(running);
            return (anon, row);
        };
        let file_offset = address - mapping.start + mapping.offset;
        if path.starts_with('[') {
            // [vdso], [vsyscall]: no file, but the same code in every process.
            let offset = address - mapping.start;
            let key = user_frame_key(path, offset);
            if path == "[vdso]" {
                // Named from the recorder's own copy of the image.
                row.open_path = crate::elf::vdso_path().map(str::to_owned);
                row.file_offset = row.open_path.as_ref().map(|_| offset);
            }
            row.module = Some(path.to_owned());
            return (key, row);
        }
        let root = self.processes.get(&running).and_then(|p| p.root.as_deref());
        let (path, open_path) = file_of(&self.proc_root, pid, root, &mapping, path);
        let build_id = self.build_id_of(pid, &mapping, open_path.as_deref().unwrap_or(&path));
        let key = user_frame_key(build_id.as_deref().unwrap_or(&path), file_offset);
        if let (Some(open), Some(_), Some(file)) = (&open_path, &build_id, mapping.file) {
            row.held = self.held_module(file, open);
        }
        row.module = Some(path);
        row.build_id = build_id;
        row.file_offset = Some(file_offset);
        row.open_path = open_path;
        (key, row)
    }

    /// `file`, open at `path` (a path that goes with its process), held for
    /// the symbolizer: opened the first time, and kept while its processes
    /// are met.
    fn held_module(&mut self, file: FileKey, path: &str) -> Option<crate::symbolize::HeldModule> {
        let now = Instant::now();
        if let Some((held, seen)) = self.held_files.get_mut(&file) {
            *seen = now;
            return Some(held.clone());
        }
        let held = crate::symbolize::HeldModule::open(path, &self.held_modules)?;
        self.held_files.insert(file, (held.clone(), now));
        Some(held)
    }

    /// Lets go of the held files whose processes were last met
    /// [`HOLD_AFTER_LAST_SEEN`] before `now` (once a second at most): the
    /// frames queued still hold theirs until they are named.
    fn let_go_of_held_files(&mut self, now: Instant) {
        if now.saturating_duration_since(self.held_swept_at) < Duration::from_secs(1) {
            return;
        }
        self.held_swept_at = now;
        self.held_files
            .retain(|_, (_, seen)| now.saturating_duration_since(*seen) < HOLD_AFTER_LAST_SEEN);
    }

    /// `<proc_root>/<pid>/root` if `pid` is in another mount namespace
    /// than the recorder (None when it is in ours, or cannot be told).
    fn foreign_root(&self, pid: u32) -> Option<String> {
        let process = self.proc_root.join(pid.to_string());
        let theirs = std::fs::read_link(process.join("ns/mnt")).ok()?;
        let ours = self.own_mount_namespace.as_ref()?;
        (&theirs != ours).then(|| process.join("root").to_string_lossy().into_owned())
    }

    /// The mapping of `address` in the map of `key`'s process running its
    /// program, reading the map when the process or program is new, or
    /// the address new to it.
    fn mapping_of(&mut self, key: Running, address: u64) -> Option<Mapping> {
        let mut quick_rereads = 0;
        if let Some(p) = self.processes.get(&key) {
            if let Some(m) = find_mapping(&p.maps, address) {
                return Some(m.clone());
            }
            if p.quick_rereads >= QUICK_REREADS && p.read_at.elapsed() < MAPS_REREAD {
                return None;
            }
            quick_rereads = p.quick_rereads.saturating_add(1);
        }
        // New process or program, or a new mapping (dlopen, JIT): read the map again.
        if self.processes.len() >= MAX_PROCESSES {
            self.processes.clear();
        }
        let maps = self.read_maps(key);
        if maps.is_empty() {
            // Gone, or it has run another program since this record was
            // taken: what was read of this program while it ran still
            // names its records, the map of the next one none of them
            // (that one is read for the next program's own records).
            self.processes
                .entry(key)
                .and_modify(ProcessMaps::no_quick_rereads)
                .or_insert_with(ProcessMaps::closed);
            return None;
        }
        let found = find_mapping(&maps, address).cloned();
        self.remember_maps(key, maps, quick_rereads);
        found
    }

    /// The executable mappings of `key`'s process while it runs `key`'s
    /// program, read from `/proc`: empty when it is gone, a kernel thread,
    /// or runs another program now. The program is read once, after the
    /// map file is opened: an open `/proc/<pid>/maps` reads the memory
    /// the process had when it was opened (the kernel holds on to that
    /// `mm`, and reads nothing once an `execve` drops it), so a program
    /// still running after the open is the one whose map the file reads.
    /// A record that does not say its program takes the map `/proc` shows.
    fn read_maps(&mut self, key: Running) -> Vec<Mapping> {
        let dir = self.proc_root.join(key.pid.to_string());
        let Ok(maps) = std::fs::File::open(dir.join("maps")) else {
            return Vec::new();
        };
        if key.program != Program::default() {
            let running = crate::procfs::read_into(&dir.join("stat"), &mut self.proc_text)
                .ok()
                .and_then(|()| parse_stat_program(&String::from_utf8_lossy(&self.proc_text)));
            if running != Some(key.program) {
                return Vec::new();
            }
        }
        read_executable_mappings(&maps, &mut self.procmap_query, &mut self.proc_text)
    }

    fn remember_maps(&mut self, key: Running, maps: Vec<Mapping>, quick_rereads: u8) {
        // Known already: a process that enters another mount namespace
        // (a container runtime's) then runs its program there, which is
        // a new key.
        let root = match self.processes.get(&key) {
            Some(known) if !known.maps.is_empty() => known.root.clone(),
            _ => self.foreign_root(key.pid),
        };
        // A container's files are read through its root, and a deleted
        // file through the process's map_files, which go with the process:
        // their build ids are read now, while it lives, for the samples of
        // it still in the ring, and the files held open for the symbolizer.
        for m in &maps {
            let Some(path) = m.path.as_deref().filter(|p| !p.starts_with('[')) else {
                continue;
            };
            if root.is_none() && !path.ends_with(" (deleted)") {
                continue;
            }
            if let (_, Some(open)) = file_of(&self.proc_root, key.pid, root.as_deref(), m, path) {
                if let (Some(_), Some(file)) = (self.build_id_of(key.pid, m, &open), m.file) {
                    self.held_module(file, &open);
                }
            }
        }
        // Maps read again for new JIT code: its /tmp was sent already.
        let jit_tmp_sent = self.processes.get(&key).is_some_and(|p| p.jit_tmp_sent);
        self.processes.insert(
            key,
            ProcessMaps {
                maps,
                unwinder: None,
                read_at: Instant::now(),
                quick_rereads,
                root,
                jit_tmp_sent,
                known_frames: ahash::AHashMap::default(),
            },
        );
    }

    /// The build id of the file `mapping` of process `pid` maps, read at
    /// `path` while that is the file there, else through the process's
    /// `map_files`.
    fn build_id_of(&mut self, pid: u32, mapping: &Mapping, path: &str) -> Option<String> {
        let key = (path.to_owned(), mapping.file);
        match mapping.file {
            Some(file) => {
                let link = || map_files_link(&self.proc_root, pid, mapping);
                self.build_ids
                    .get_mapped(key, Path::new(path), file.inode, link)
            }
            None => self.build_ids.get(key, Path::new(path)),
        }
    }
}

/// A mapped file's path, without the ` (deleted)` the kernel adds to a file
/// no longer there, and where the recorder reads the file when not at that
/// path: through the process's `map_files` link when it was deleted or
/// replaced since it was mapped (an upgrade renames a new file over a
/// running one; the link reads the file the process maps, for as long as
/// it maps it), else through a container's `root`.
fn file_of(
    proc_root: &Path,
    pid: u32,
    root: Option<&str>,
    mapping: &Mapping,
    path: &str,
) -> (String, Option<String>) {
    match path.strip_suffix(" (deleted)") {
        Some(path) => (
            path.to_owned(),
            Some(map_files_link(proc_root, pid, mapping)),
        ),
        None => (path.to_owned(), root.map(|r| format!("{r}{path}"))),
    }
}

/// The process's own link to the file `mapping` maps, which reads that
/// file for as long as the process maps it, wherever its path went.
fn map_files_link(proc_root: &Path, pid: u32, mapping: &Mapping) -> String {
    let link = proc_root
        .join(pid.to_string())
        .join(format!("map_files/{:x}-{:x}", mapping.start, mapping.end));
    link.to_string_lossy().into_owned()
}

/// What tells one version of a file at a path from another: device,
/// inode, size, and the times of its last write and change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileStamp([i64; 7]);

impl FileStamp {
    fn inode(&self) -> u64 {
        self.0[1] as u64
    }

    fn of(path: &Path) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        // Bit for bit: only equality is asked of them.
        Some(FileStamp([
            m.dev() as i64,
            m.ino() as i64,
            m.size() as i64,
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
        ]))
    }
}

/// A build id read from a file, the file's stamp just before, and when it
/// was last known to be the file's.
struct KnownBuildId {
    id: Option<String>,
    stamp: Option<FileStamp>,
    checked_at: Instant,
}

/// Build ids read from files, keyed by what tells one file from another
/// where it is known (path and inode), each taken for [`BUILD_ID_TRUST`]
/// and then checked by the file's stamp; past [`MAX_BUILD_IDS`] files it
/// starts over.
pub struct BuildIds<K> {
    ids: ahash::AHashMap<K, KnownBuildId>,
    pub trust: Duration,
    /// Build ids read from files so far.
    pub reads: u64,
}

impl<K> Default for BuildIds<K> {
    fn default() -> Self {
        BuildIds {
            ids: ahash::AHashMap::new(),
            trust: BUILD_ID_TRUST,
            reads: 0,
        }
    }
}

impl<K: std::hash::Hash + Eq> BuildIds<K> {
    /// The build id of the file `key` names, read at `path` unless known
    /// to be that file's.
    pub fn get(&mut self, key: K, path: &Path) -> Option<String> {
        if let Some(id) = self.trusted(&key) {
            return id;
        }
        let now = FileStamp::of(path);
        if let Some(id) = self.confirmed(&key, |known| known.is_some() && known == now) {
            return id;
        }
        self.read(key, path, now)
    }

    /// As [`BuildIds::get`], for a file a process maps, of inode `inode`.
    /// Where `path` holds another file now (the mapped one was replaced
    /// there, or deleted), the mapped file has not changed: the id known
    /// stays, and one not known yet is read at `mapped`, the process's own
    /// link to the file.
    pub fn get_mapped(
        &mut self,
        key: K,
        path: &Path,
        inode: u64,
        mapped: impl FnOnce() -> String,
    ) -> Option<String> {
        if let Some(id) = self.trusted(&key) {
            return id;
        }
        let now = FileStamp::of(path);
        let elsewhere = now.is_none_or(|stamp| stamp.inode() != inode);
        if let Some(id) = self.confirmed(&key, |known| elsewhere || known == now) {
            return id;
        }
        if elsewhere && !self.ids.contains_key(&key) {
            let mapped = PathBuf::from(mapped());
            let stamp = FileStamp::of(&mapped);
            return self.read(key, &mapped, stamp);
        }
        self.read(key, path, now)
    }

    /// Whether the file `key` names is the build `id`. One known as another
    /// is read again unless its stamp is the same: it may have been
    /// replaced since.
    pub fn is(&mut self, key: K, path: &Path, id: &str) -> bool {
        match self.ids.get(&key) {
            Some(known) if known.id.as_deref() != Some(id) => {
                let now = FileStamp::of(path);
                if known.stamp.is_some() && now == known.stamp {
                    return false;
                }
                self.read(key, path, now).as_deref() == Some(id)
            }
            _ => self.get(key, path).as_deref() == Some(id),
        }
    }

    /// The id known for `key`, while it is trusted without a look at the
    /// file.
    fn trusted(&self, key: &K) -> Option<Option<String>> {
        self.ids
            .get(key)
            .filter(|known| known.checked_at.elapsed() < self.trust)
            .map(|known| known.id.clone())
    }

    /// The id known for `key`, trusted again, where `unchanged` says of
    /// the stamp it was read with that the file is still the one read.
    fn confirmed(
        &mut self,
        key: &K,
        unchanged: impl FnOnce(Option<FileStamp>) -> bool,
    ) -> Option<Option<String>> {
        let known = self
            .ids
            .get_mut(key)
            .filter(|known| unchanged(known.stamp))?;
        known.checked_at = Instant::now();
        Some(known.id.clone())
    }

    /// Reads the build id at `path`, whose stamp was `stamp` just before:
    /// a write while the notes are read shows next time.
    fn read(&mut self, key: K, path: &Path, stamp: Option<FileStamp>) -> Option<String> {
        let id = read_build_id(path);
        self.reads += 1;
        if self.ids.len() >= MAX_BUILD_IDS {
            self.ids.clear();
        }
        self.ids.insert(
            key,
            KnownBuildId {
                id: id.clone(),
                stamp,
                checked_at: Instant::now(),
            },
        );
        id
    }
}

/// The GNU build id of the ELF file at `path`, in hex; `None` when it has
/// none or cannot be read.
pub fn read_build_id(path: &Path) -> Option<String> {
    blazesym::helper::read_elf_build_id(path)
        .ok()
        .flatten()
        .map(|bytes| bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_tell_kinds_modules_offsets_and_order_apart() {
        // FNV-1a 64 as published (the tag, a NUL, then little-endian integers).
        assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xaf63dc4c8601ec8c);
        let keys = [
            kernel_frame_key(0x10),
            user_frame_key("ab", 0x10),
            user_frame_key("ab", 0x11),
            user_frame_key("ac", 0x10),
            anon_frame_key(0, 0x10),
            anon_frame_key(7, 0x10),
            stack_key(&[1, 2]),
            stack_key(&[2, 1]),
            stack_key(&[]),
        ];
        let distinct: std::collections::HashSet<_> = keys.iter().collect();
        assert_eq!(distinct.len(), keys.len(), "{keys:?}");
        assert_eq!(user_frame_key("ab", 0x10), user_frame_key("ab", 0x10));
    }

    #[test]
    fn ids_count_up_from_a_random_start_and_stay_positive() {
        let mut frames = Numbering::new();
        let mut stacks = Numbering::new();
        let first = frames.next_id();
        assert_eq!(frames.next_id(), first + 1);
        assert!(first >= 0 && first % (1 << COUNTED_BITS) == 0, "{first:#x}");
        // Two runs start apart (equal with odds of one in 2^43).
        assert_ne!(first, stacks.next_id());
        // A full count starts again elsewhere, never past the sign.
        frames.counted = (1 << COUNTED_BITS) - 1;
        let last = frames.next_id();
        assert_eq!(last, first + (1 << COUNTED_BITS) - 1);
        let next = frames.next_id();
        assert!(
            next >= 0 && next % (1 << COUNTED_BITS) == 0 && next != first,
            "{next:#x}"
        );
    }

    #[test]
    fn maps_keep_executable_mappings_sorted() {
        let text = "\
7f0000002000-7f0000003000 r-xp 00002000 08:01 42   /usr/lib/libc.so.6
55550000-55551000 r--p 00000000 08:01 7    /bin/app
55551000-55553000 r-xp 00001000 08:01 7    /bin/app
7fff0000-7fff1000 r-xp 00000000 00:00 0    [vdso]
7e000000-7e100000 rwxp 00000000 00:00 0
";
        let maps = parse_maps(text);
        assert_eq!(maps.len(), 4);
        assert_eq!(maps[0].path.as_deref(), Some("/bin/app"));
        assert_eq!(maps[0].offset, 0x1000);
        assert_eq!(maps[1].path, None);
        let m = find_mapping(&maps, 0x55552abc).unwrap();
        assert_eq!(0x55552abc - m.start + m.offset, 0x2abc);
        assert!(find_mapping(&maps, 0x55550500).is_none()); // not executable
        assert!(find_mapping(&maps, 0x10).is_none());
        assert!(find_mapping(&maps, 0x55553000).is_none()); // end is exclusive
    }

    /// Waits for `pid` to sleep with libc mapped: spawned, it may still
    /// be loading its program, its mappings changing.
    fn wait_until_asleep(pid: u32) {
        let settled = || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
            crate::procfs::split_stat(&stat)
                .is_some_and(|(_, fields)| fields.trim_start().starts_with('S'))
                && maps.contains("/libc.so")
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !settled() {
            assert!(Instant::now() < deadline, "{pid} never slept");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The mappings of `pid` both ways: by query where this kernel
    /// answers it, and from the text; `[vsyscall]` left out of the text's.
    fn mappings_both_ways(pid: u32) -> (bool, Vec<Mapping>, Vec<Mapping>) {
        let maps = std::fs::File::open(format!("/proc/{pid}/maps")).unwrap();
        let (mut query, mut text) = (true, Vec::new());
        let queried = read_executable_mappings(&maps, &mut query, &mut text);
        let mut parsed = read_executable_mappings(&maps, &mut false, &mut text);
        parsed.retain(|m| m.path.as_deref() != Some("[vsyscall]"));
        (query, queried, parsed)
    }

    #[test]
    fn mappings_asked_of_the_kernel_equal_the_texts() {
        // Anonymous executable memory (JIT code) as well as files and [vdso].
        // SAFETY: a fresh private anonymous page, unmapped below.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(page, libc::MAP_FAILED);
        let (query, queried, parsed) = mappings_both_ways(std::process::id());
        // SAFETY: the page mapped above, used by nothing else.
        unsafe { libc::munmap(page, 4096) };
        assert!(parsed
            .iter()
            .any(|m| m.path.is_none() && m.start == page as u64));
        assert!(parsed.iter().any(|m| m.path.as_deref() == Some("[vdso]")));
        if query {
            assert_eq!(queried, parsed);
        }
        // Another process's, through its own map file.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        wait_until_asleep(child.id());
        let (_, queried, parsed) = mappings_both_ways(child.id());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(parsed
            .iter()
            .any(|m| m.path.as_deref().is_some_and(|p| p.ends_with("/sleep"))));
        assert_eq!(queried, parsed);
    }

    /// What [`StackInterner::read_maps`] rests on: a map file opened
    /// before an `execve` reads nothing after it, rather than the next
    /// program's map.
    #[test]
    fn a_map_file_opened_before_an_execve_reads_nothing_after_it() {
        use std::io::Write;
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read line; exec sleep 30"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        wait_until_asleep(pid);
        let maps = std::fs::File::open(format!("/proc/{pid}/maps")).unwrap();
        let program =
            || parse_stat_program(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap());
        let before = program();
        let mut text = Vec::new();
        assert!(!read_executable_mappings(&maps, &mut false, &mut text).is_empty());
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while program() == before && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_ne!(program(), before, "sh did not exec sleep");
        // The exec lets go of the old memory just after the new program
        // shows in stat; sleep's own maps are never empty.
        let after = loop {
            let after = (
                read_executable_mappings(&maps, &mut true, &mut text),
                read_executable_mappings(&maps, &mut false, &mut text),
            );
            if after == (Vec::new(), Vec::new()) || Instant::now() >= deadline {
                break after;
            }
        };
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(after, (Vec::new(), Vec::new()));
    }

    /// Version `version` of a C program that sleeps until killed, built
    /// with `flags` in its own folder of `dir`.
    fn sleeper(dir: &Path, version: u32, flags: &[&str]) -> PathBuf {
        let folder = dir.join(format!("v{version}"));
        std::fs::create_dir(&folder).unwrap();
        let program = format!(
            "#include <unistd.h>\nint version = {version};\n\
             int main(void) {{ pause(); return version; }}\n"
        );
        crate::symbolize::tests::compile_c(&folder, &program, flags)
    }

    /// Two versions of [`sleeper`]: two files, two build ids.
    fn two_versions(dir: &Path) -> (PathBuf, PathBuf) {
        let versions = (sleeper(dir, 1, &["-O1"]), sleeper(dir, 2, &["-O1"]));
        assert_ne!(read_build_id(&versions.0), read_build_id(&versions.1));
        versions
    }

    /// Where `main` runs in `program`, built not position-independent, by `nm`.
    fn main_address(program: &Path) -> u64 {
        let nm = std::process::Command::new("nm")
            .arg("-P")
            .arg(program)
            .output()
            .unwrap();
        String::from_utf8_lossy(&nm.stdout)
            .lines()
            .find_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                (fields.first() == Some(&"main"))
                    .then(|| u64::from_str_radix(fields[2], 16).unwrap())
            })
            .unwrap()
    }

    /// A program run from a scratch directory deleted before the
    /// symbolizer came to its frames (a test's program, a build's tool),
    /// then the same build run from another path: the same frames (one
    /// build id), named from the other path. Sent once, they stayed
    /// unnamed for the rest of the recording, in every stack of the
    /// program run from anywhere.
    #[test]
    fn a_frame_whose_file_went_is_named_when_its_build_runs_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let first = sleeper(dir.path(), 1, &["-O1", "-no-pie"]);
        let second = dir.path().join("elsewhere");
        std::fs::copy(&first, &second).unwrap();
        let main = main_address(&first);
        let start = |program: &Path| {
            let child = std::process::Command::new(program).spawn().unwrap();
            wait_until_asleep(child.id());
            child
        };
        let mut children = [start(&first), start(&second)];
        let running = |child: &std::process::Child| Running {
            pid: child.id(),
            program: Program::default(),
        };
        let symbolizer = crate::symbolize::SymbolizerThread::start(Path::new("/proc")).unwrap();
        let mut interner = StackInterner::new(Path::new("/proc"), symbolizer.requests.clone());
        let (mut stacks, mut frames) = (StackRows::new(), FrameRows::new());
        let mut sample = |interner: &mut StackInterner, running: Running| {
            interner.intern(running, &[], &[main], &mut stacks, &mut frames);
            interner.wake_symbolizer();
        };
        let named = |interner: &mut StackInterner, wait: Duration| {
            let row = symbolizer.named.recv_timeout(wait).ok()?;
            interner.frame_named(&row);
            Some(row)
        };
        // The first's map read while its file is there, the file gone
        // before the symbolizer looks.
        assert!(interner.mapping_of(running(&children[0]), main).is_some());
        std::fs::remove_file(&first).unwrap();
        sample(&mut interner, running(&children[0]));
        // The second process samples it too before the first's miss is
        // known: sent already, nothing to send.
        sample(&mut interner, running(&children[1]));
        let missed = named(&mut interner, Duration::from_secs(10));
        // Seen again at the path that is gone: not sent again.
        sample(&mut interner, running(&children[0]));
        let again = named(&mut interner, Duration::from_millis(500));
        sample(&mut interner, running(&children[1]));
        let elsewhere = named(&mut interner, Duration::from_secs(10));
        for child in &mut children {
            child.kill().unwrap();
            child.wait().unwrap();
        }
        let missed = missed.expect("the symbolizer passes the frame on");
        assert_eq!(missed.module.as_deref(), first.to_str());
        assert_eq!((missed.function, missed.file_missing), (None, true));
        assert!(again.is_none(), "{again:?}");
        let elsewhere = elsewhere.expect("seen at another path, sent again");
        assert_eq!(elsewhere.frame_id, missed.frame_id, "one build, one frame");
        assert_eq!(elsewhere.module.as_deref(), second.to_str());
        assert_eq!(elsewhere.function.as_deref(), Some("main"));
    }

    /// A binary deleted while it runs (an upgrade that renames a new file
    /// over it shows the same: ` (deleted)` after its path in the map): its
    /// frames keep its path and build id, read through the process's
    /// `map_files`, and are named from there while it runs.
    #[test]
    fn a_running_binary_deleted_from_its_path_is_read_through_its_mapping() {
        let dir = tempfile::tempdir().unwrap();
        // Not position-independent: `main` runs at its symbol's address.
        let program = sleeper(dir.path(), 1, &["-O1", "-no-pie"]);
        let main = main_address(&program);
        let id = read_build_id(&program);
        let mut child = std::process::Command::new(&program).spawn().unwrap();
        wait_until_asleep(child.id());
        std::fs::remove_file(&program).unwrap();
        let (tx, _rx) = std::sync::mpsc::sync_channel(64);
        let mut interner = StackInterner::new(Path::new("/proc"), tx);
        let running = Running {
            pid: child.id(),
            program: Program::default(),
        };
        let (_, row) = interner.user_frame(running, main);
        let (module, build_id) = (row.module.clone(), row.build_id.clone());
        let thread = crate::symbolize::SymbolizerThread::start(Path::new("/proc")).unwrap();
        assert!(thread.requests.send(row));
        let named = thread
            .join(crate::symbolize::NAMING_AT_STOP)
            .recv()
            .unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(module.as_deref(), program.to_str());
        assert_eq!(build_id, id);
        assert_eq!(named.function.as_deref(), Some("main"));
    }

    /// A binary upgraded while it runs, the new file renamed over the old
    /// as package managers do: processes started before still run the old
    /// file and have its build id, those started after the new one's, past
    /// any trust in what was read, and when the old process's build id is
    /// first asked for after the upgrade. Build ids kept by path alone gave
    /// both the old one; read again from the path, both the new one.
    #[test]
    fn a_binary_replaced_at_its_path_is_told_apart_by_its_inode() {
        let dir = tempfile::tempdir().unwrap();
        let (old, new) = two_versions(dir.path());
        let installed = dir.path().join("daemon");
        std::fs::copy(&old, &installed).unwrap();
        let interner =
            || StackInterner::new(Path::new("/proc"), std::sync::mpsc::sync_channel(64).0);
        // One reads the old process's build id before the upgrade, one
        // only its map.
        let (mut early, mut late) = (interner(), interner());
        let start = || {
            let child = std::process::Command::new(&installed).spawn().unwrap();
            wait_until_asleep(child.id());
            let maps = std::fs::read_to_string(format!("/proc/{}/maps", child.id())).unwrap();
            let code = parse_maps(&maps)
                .into_iter()
                .find(|m| m.path.as_deref() == installed.to_str())
                .unwrap();
            let running = Running {
                pid: child.id(),
                program: Program::default(),
            };
            (child, running, code.start)
        };
        let (mut before, before_running, before_code) = start();
        let early_id = early.user_frame(before_running, before_code).1.build_id;
        assert!(late.mapping_of(before_running, before_code).is_some());
        std::fs::rename(&new, &installed).unwrap();
        let (mut after, after_running, after_code) = start();
        early.build_ids.trust = Duration::ZERO;
        late.build_ids.trust = Duration::ZERO;
        let ids = [
            early.user_frame(after_running, after_code).1.build_id,
            early.user_frame(before_running, before_code).1.build_id,
            late.user_frame(before_running, before_code).1.build_id,
        ];
        for child in [&mut before, &mut after] {
            child.kill().unwrap();
            child.wait().unwrap();
        }
        let (old_id, new_id) = (read_build_id(&old), read_build_id(&installed));
        assert_eq!(early_id, old_id);
        assert_eq!(ids[0], new_id, "started after the upgrade");
        assert_eq!(ids[1], old_id, "started before, its id read before");
        assert_eq!(ids[2], old_id, "started before, its id first read after");
    }

    /// A file rewritten in place keeps its path and inode: its build id is
    /// read again once the one read is no longer trusted and the file's
    /// stamp has changed, and only then.
    #[test]
    fn a_build_id_is_read_again_once_its_trust_is_over() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let (first, second) = two_versions(dir.path());
        let installed = dir.path().join("tool");
        std::fs::copy(&first, &installed).unwrap();
        let inode = std::fs::metadata(&installed).unwrap().ino();
        let mut ids = BuildIds::default();
        let id = |ids: &mut BuildIds<u64>| ids.get(inode, &installed);
        assert_eq!(id(&mut ids), read_build_id(&first));
        // Past its trust, a file not changed is not read again.
        ids.trust = Duration::ZERO;
        assert_eq!(id(&mut ids), read_build_id(&first));
        assert_eq!(ids.reads, 1);
        ids.trust = Duration::from_secs(3600);
        std::fs::copy(&second, &installed).unwrap();
        assert_eq!(std::fs::metadata(&installed).unwrap().ino(), inode);
        assert_eq!(id(&mut ids), read_build_id(&first), "trusted for a while");
        ids.trust = Duration::ZERO;
        assert_eq!(id(&mut ids), read_build_id(&second));
        assert_eq!(ids.reads, 2);
    }

    /// Whether this thread was woken (unparked) since it last parked:
    /// a wake is remembered, and the next park returns at once.
    fn was_woken() -> bool {
        let asked = Instant::now();
        std::thread::park_timeout(Duration::from_millis(300));
        asked.elapsed() < Duration::from_millis(150)
    }

    /// An interner over a `/proc` of one process, pid 7, with one mapping
    /// of an app at 0x1000-0x3000.
    fn one_process_interner(
        symbolizer: impl Into<FrameRequests>,
    ) -> (tempfile::TempDir, StackInterner) {
        let root = tempfile::tempdir().unwrap();
        fake_process(
            root.path(),
            7,
            "1000-3000 r-xp 00000000 08:01 7 /nonexistent/app\n",
        );
        let interner = StackInterner::new(root.path(), symbolizer);
        (root, interner)
    }

    /// New frames wake the symbolizer at the end of a drain, not one by
    /// one: once the first has waited [`WAKE_SYMBOLIZER_AFTER`], or
    /// [`WAKE_SYMBOLIZER_FRAMES`] wait; a drain with nothing new wakes nothing.
    #[test]
    fn queued_frames_wake_the_symbolizer_in_batches() {
        let (tx, rx) = std::sync::mpsc::sync_channel(2 * WAKE_SYMBOLIZER_FRAMES);
        // This thread stands for the symbolizer.
        let (_root, mut interner) =
            one_process_interner(FrameRequests::waking(tx, std::thread::current()));
        let (mut stacks, mut frames) = (StackRows::new(), FrameRows::new());
        let mut sample = |interner: &mut StackInterner, user: &[u64]| {
            let running = Running {
                pid: 7,
                program: Program::default(),
            };
            interner.intern(running, &[0xffff_1000], user, &mut stacks, &mut frames);
        };
        sample(&mut interner, &[0x1010, 0x2020]);
        let start = Instant::now();
        assert_eq!(rx.try_iter().count(), 3, "every new frame queued");
        assert!(!was_woken(), "queued frames wake no one by themselves");
        // A drain ends before they have waited long enough.
        interner.drain_ended(start);
        assert!(!was_woken());
        interner.drain_ended(start + WAKE_SYMBOLIZER_AFTER);
        assert!(was_woken());
        // Nothing new since: no wake, however long after.
        sample(&mut interner, &[0x1010, 0x2020]);
        interner.drain_ended(start + 10 * WAKE_SYMBOLIZER_AFTER);
        assert!(!was_woken());
        // Enough new frames wake it at once.
        let many: Vec<u64> = (0..WAKE_SYMBOLIZER_FRAMES as u64)
            .map(|i| 0x1100 + 4 * i)
            .collect();
        let (first_half, second_half) = many.split_at(WAKE_SYMBOLIZER_FRAMES / 2);
        // Drains that end as the first of them is queued: a stall of the
        // test's thread must not make them wait long enough.
        let queued_at = Instant::now();
        for stack in first_half.chunks(32) {
            sample(&mut interner, stack);
        }
        interner.drain_ended(queued_at);
        assert!(!was_woken());
        for stack in second_half.chunks(32) {
            sample(&mut interner, stack);
        }
        interner.drain_ended(queued_at);
        assert!(was_woken());
        assert_eq!(rx.try_iter().count(), WAKE_SYMBOLIZER_FRAMES);
    }

    #[test]
    fn a_stack_and_its_frames_are_written_once() {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (root, mut interner) = one_process_interner(tx);
        let mut stacks = StackRows::new();
        let mut frames = FrameRows::new();
        let a = interner.intern(
            Running {
                pid: 7,
                program: Program::default(),
            },
            &[0xffff_1000],
            &[0x1010, 0x2020],
            &mut stacks,
            &mut frames,
        );
        let b = interner.intern(
            Running {
                pid: 7,
                program: Program::default(),
            },
            &[0xffff_1000],
            &[0x1010, 0x2020],
            &mut stacks,
            &mut frames,
        );
        assert_eq!(a, b);
        assert_eq!(stacks.len(), 3, "one row per frame, once");
        // The queue holds one frame; the other two were written unnamed,
        // and tried again on their second sighting.
        assert_eq!(interner.unnamed, 4);
        assert_eq!(frames.len(), 4);
        let first = rx.try_recv().unwrap();
        assert!(first.kernel);
        // The same code at the same file offset in another process is the same frame.
        fake_process(
            root.path(),
            8,
            "9000-b000 r-xp 00000000 08:01 7 /nonexistent/app\n",
        );
        let c = interner.intern(
            Running {
                pid: 8,
                program: Program::default(),
            },
            &[0xffff_1000],
            &[0x9010, 0xa020],
            &mut stacks,
            &mut frames,
        );
        assert_eq!(a, c);
        // Still written once: pid 8's sighting adds no stack rows, and of
        // its frames only the one the full queue turned away is written
        // (unnamed); the other was queued, the kernel frame sent before.
        assert_eq!(stacks.len(), 3, "the stack is not written again");
        assert_eq!((interner.unnamed, frames.len()), (5, 5));
        // The stack's rows name its frames leaf first, kernel then user,
        // by ids given in the order first seen; each frame's rows, unnamed
        // or sent again, keep its id.
        let column = |batch: &arrow::record_batch::RecordBatch, name: &str| {
            batch
                .column_by_name(name)
                .unwrap()
                .as_any()
                .downcast_ref::<arrow::array::Int64Array>()
                .unwrap()
                .values()
                .to_vec()
        };
        let stack = stacks.finish();
        assert_eq!(column(&stack, "stack_id"), vec![a.unwrap(); 3]);
        let ids = column(&stack, "frame_id");
        assert_eq!(ids, vec![ids[0], ids[0] + 1, ids[0] + 2]);
        let written = column(&frames.finish(), "frame_id");
        assert!(
            written.iter().all(|id| ids.contains(id)),
            "{written:?} {ids:?}"
        );
        assert_eq!(first.frame_id, ids[0]);
        assert_eq!(
            interner.intern(
                Running {
                    pid: 8,
                    program: Program::default()
                },
                &[],
                &[],
                &mut stacks,
                &mut frames
            ),
            None
        );
    }

    /// Process `pid` in a fake `/proc` at `proc_root`: its `maps`, and a
    /// `root` with a `tmp` as its own view of the file system.
    fn fake_process(proc_root: &std::path::Path, pid: u32, maps: &str) {
        let dir = proc_root.join(pid.to_string());
        std::fs::create_dir_all(dir.join("root/tmp")).unwrap();
        std::fs::write(dir.join("maps"), maps).unwrap();
    }

    /// A `/proc/<pid>/stat` line of a process running `program`.
    fn stat_line(pid: u32, program: Program) -> String {
        let fields: Vec<String> = (3..=52)
            .map(|field| match field {
                3 => "R".to_string(),
                26 => program.start_code.to_string(),
                28 => program.start_stack.to_string(),
                _ => "0".to_string(),
            })
            .collect();
        format!("{pid} (a (b) c) {}\n", fields.join(" "))
    }

    #[test]
    fn the_program_is_read_from_stat_past_a_comm_with_parentheses() {
        let program = Program {
            start_code: 0x5555_0000,
            start_stack: 0x7ffc_0000,
        };
        assert_eq!(parse_stat_program(&stat_line(9, program)), Some(program));
        assert_eq!(parse_stat_program("9 (x) R 1 2"), None);
    }

    #[test]
    fn a_sample_from_before_an_execve_is_not_named_by_the_new_program() {
        let (tx, rx) = std::sync::mpsc::sync_channel(64);
        let root = tempfile::tempdir().unwrap();
        let (old, new) = (
            Program {
                start_code: 0x1000,
                start_stack: 0x7000,
            },
            Program {
                start_code: 0x5000,
                start_stack: 0x8000,
            },
        );
        // By the time the recorder reads pid 9, it runs the new program,
        // mapped where the old one had code too.
        fake_process(
            root.path(),
            9,
            "1000-6000 r-xp 00000000 08:01 7 /nonexistent/new\n",
        );
        std::fs::write(root.path().join("9/stat"), stat_line(9, new)).unwrap();
        let mut interner = StackInterner::new(root.path(), tx);
        let (mut stacks, mut frames) = (StackRows::new(), FrameRows::new());
        let mut module_of = |program, address| {
            interner.intern(
                Running { pid: 9, program },
                &[],
                &[address],
                &mut stacks,
                &mut frames,
            );
            rx.try_recv().unwrap().module
        };
        // Samples of the old program: more of them than the map is read
        // again at once for; none is named after the new program.
        for address in 0x1010..0x1020 {
            assert_eq!(module_of(old, address), None, "{address:#x}");
        }
        // The new program's samples are named by its map.
        assert_eq!(module_of(new, 0x1100).as_deref(), Some("/nonexistent/new"));
        assert_eq!(module_of(new, 0x5100).as_deref(), Some("/nonexistent/new"));
        // A record that does not say its program (an old recorder's test
        // data) takes the map /proc shows.
        assert_eq!(
            module_of(Program::default(), 0x1200).as_deref(),
            Some("/nonexistent/new")
        );
    }

    /// A JIT (pid 11): its binary, and anonymous executable memory.
    fn jvm(
        symbolizer: std::sync::mpsc::SyncSender<crate::symbolize::QueuedFrame>,
    ) -> (tempfile::TempDir, StackInterner, Running) {
        let root = tempfile::tempdir().unwrap();
        fake_process(
            root.path(),
            11,
            "1000-2000 r-xp 00000000 08:01 7 /nonexistent/jvm\n\
             7000-9000 rwxp 00000000 00:00 0 \n",
        );
        let interner = StackInterner::new(root.path(), symbolizer);
        let running = Running {
            pid: 11,
            program: Program::default(),
        };
        (root, interner, running)
    }

    /// Frames of a file in another mount namespace's root carry that file,
    /// held open since the process's map was read, one open for all of
    /// them; the interner lets go of it [`HOLD_AFTER_LAST_SEEN`] after the
    /// process was last met, and the frames when they are named. A host
    /// process's frames, whose path stays, carry nothing.
    #[test]
    fn a_containers_frames_carry_its_file_held_open_until_they_are_named() {
        use std::os::unix::fs::MetadataExt;
        let (tx, rx) = std::sync::mpsc::sync_channel(64);
        let proc_root = tempfile::tempdir().unwrap();
        let ns = |pid: &str, id: u32| {
            let dir = proc_root.path().join(pid).join("ns");
            std::fs::create_dir_all(&dir).unwrap();
            std::os::unix::fs::symlink(format!("mnt:[{id}]"), dir.join("mnt")).unwrap();
        };
        ns("self", 1);
        let app = proc_root.path().join("11/root/app");
        std::fs::create_dir_all(app.parent().unwrap()).unwrap();
        std::fs::copy("/usr/bin/true", &app).unwrap();
        assert!(
            read_build_id(&app).is_some(),
            "Debian's binaries have build ids"
        );
        let meta = std::fs::metadata(&app).unwrap();
        let maps = format!(
            "1000-3000 r-xp 00000000 {:02x}:{:02x} {} /app\n",
            libc::major(meta.dev()),
            libc::minor(meta.dev()),
            meta.ino()
        );
        fake_process(proc_root.path(), 11, &maps);
        ns("11", 2);
        fake_process(proc_root.path(), 12, &maps);
        ns("12", 1);
        let mut interner = StackInterner::new(proc_root.path(), tx);
        let (mut stacks, mut frames) = (StackRows::new(), FrameRows::new());
        let running = |pid| Running {
            pid,
            program: Program::default(),
        };
        interner.intern(
            running(11),
            &[],
            &[0x1010, 0x2020],
            &mut stacks,
            &mut frames,
        );
        interner.intern(running(12), &[], &[0x1030], &mut stacks, &mut frames);
        interner.wake_symbolizer();
        let sent: Vec<FrameRow> = rx.try_iter().map(|frame| *frame).collect();
        let held: Vec<_> = sent.iter().map(|f| f.held.clone()).collect();
        assert_eq!(sent.len(), 3);
        let (first, second) = (held[0].as_ref().unwrap(), held[1].as_ref().unwrap());
        assert!(first == second, "one open for the file");
        assert!(held[2].is_none(), "the host's process: its path stays");
        // A frame of it first met after it exited (its samples drained
        // late): its file was opened when its map was read.
        std::fs::remove_dir_all(proc_root.path().join("11/root")).unwrap();
        interner.intern(running(11), &[], &[0x2800], &mut stacks, &mut frames);
        let late = *rx.try_recv().unwrap();
        assert!(late.held.as_ref() == Some(first), "{late:?}");
        drop(late);
        let count = |interner: &StackInterner| {
            interner
                .held_modules
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        assert_eq!(count(&interner), 1);
        drop((sent, held));
        interner.let_go_of_held_files(Instant::now() + HOLD_AFTER_LAST_SEEN / 2);
        assert_eq!(count(&interner), 1, "its process was met lately");
        interner.let_go_of_held_files(Instant::now() + HOLD_AFTER_LAST_SEEN);
        assert_eq!(count(&interner), 0);
    }

    /// A process's first frame in anonymous executable memory (JIT code)
    /// carries its `/tmp`, opened while it runs; later ones, and frames of
    /// its files, do not.
    #[test]
    fn the_first_jit_frame_of_a_process_carries_its_tmp() {
        let (tx, rx) = std::sync::mpsc::sync_channel(64);
        let (root, mut interner, running) = jvm(tx);
        let (mut stacks, mut frames) = (StackRows::new(), FrameRows::new());
        interner.intern(
            running,
            &[],
            &[0x7010, 0x1010, 0x8020, 0xdead_0000],
            &mut stacks,
            &mut frames,
        );
        let sent: Vec<FrameRow> = rx.try_iter().map(|frame| *frame).collect();
        let carries: Vec<(u64, bool, bool)> = sent
            .iter()
            .map(|f| (f.address, f.jit_tmp.is_some(), f.maybe_jit))
            .collect();
        // An address in no mapping of a JIT may be code it freed since.
        assert_eq!(
            carries,
            [
                (0x7010, true, true),
                (0x1010, false, false),
                (0x8020, false, true),
                (0xdead_0000, false, true)
            ]
        );
        // In a process with no JIT code it is a bad unwind: no perf map
        // will name it, so the symbolizer does not wait for one.
        fake_process(
            root.path(),
            12,
            "1000-2000 r-xp 00000000 08:01 7 /nonexistent/app\n",
        );
        let other = Running {
            pid: 12,
            program: Program::default(),
        };
        interner.intern(other, &[], &[0xdead_0000], &mut stacks, &mut frames);
        let sent: Vec<(u64, bool)> = rx.try_iter().map(|f| (f.address, f.maybe_jit)).collect();
        assert_eq!(sent, [(0xdead_0000, false)]);
    }

    /// A first JIT frame the full queue turned away took the process's
    /// `/tmp` with it: the next JIT frame that is queued carries it.
    #[test]
    fn a_jit_tmp_the_full_queue_turned_away_goes_with_the_next_jit_frame() {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (_root, mut interner, running) = jvm(tx);
        let (mut stacks, mut frames) = (StackRows::new(), FrameRows::new());
        // The file frame fills the queue; the JIT frame after it is written unnamed.
        interner.intern(running, &[], &[0x1010, 0x7010], &mut stacks, &mut frames);
        assert_eq!((interner.unnamed, frames.len()), (1, 1));
        let queued: Vec<u64> = rx.try_iter().map(|f| f.address).collect();
        assert_eq!(queued, [0x1010]);
        interner.intern(running, &[], &[0x8020], &mut stacks, &mut frames);
        let sent: Vec<(u64, bool)> = rx
            .try_iter()
            .map(|f| (f.address, f.jit_tmp.is_some()))
            .collect();
        assert_eq!(sent, [(0x8020, true)]);
    }
}
