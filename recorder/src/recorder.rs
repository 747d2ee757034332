//! The recording loop: drain the ring buffer into Arrow builders, hand full
//! batches to the sinks, roll chunks, count losses, stop cleanly.
//!
//! One thread decodes and reads; a writer thread encodes and writes. The
//! loop sleeps in the ring buffer's epoll for at most [`POLL_INTERVAL`], or,
//! with no event stream open, until the next timer (never spins), and a signal only
//! sets a flag that the loop reads, so every stop goes through the same
//! orderly close.

use std::{
    cell::RefCell,
    mem::MaybeUninit,
    rc::Rc,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use anyhow::Context;
use hindsight_schemas::{layout, meta::Session, time::rfc3339};
use libbpf_rs::skel::Skel as _;
use libbpf_rs::{MapCore, MapFlags, RingBufferBuilder};

use crate::{
    bpf::{self, sched::types::hs_kind, TracepointCatalog},
    cache::drain_page_cache,
    cli::Config,
    clock,
    counters::CounterReader,
    decode::{table_of_kind, Decoder},
    procfs::{clock_ticks_per_second, page_size, Procfs},
    recording::Recording,
    retention::{self, Retention},
    rows::{AllRows, ProcessRow},
    sink::FileStamp,
    stacks::StackInterner,
    symbolize::SymbolizerThread,
    tasks::TaskReader,
    writer::Writer,
};

/// Longest the loop sleeps before it drains the ring and checks the clock and signals.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Records drained per turn of the loop at most. Under a storm the kernel
/// refills the ring as fast as it is drained, so an unbounded drain never
/// returned: timers, loss counters, chunk rolls and signals waited for the
/// storm to end. ~64K records take some tens of ms.
const DRAIN_BUDGET: usize = 64 * 1024;
/// Longest the loop sleeps when no ring buffer is open (counters and
/// snapshots only).
const MAX_IDLE_SLEEP: Duration = Duration::from_secs(1);
/// How often per-CPU loss counters are read into `loss` rows.
const LOSS_INTERVAL: Duration = Duration::from_secs(1);
/// Rows buffered per table before they go to the writer (which gathers
/// them into row groups of [`hindsight_schemas::layout::ROW_GROUP_ROWS`]): bounds the
/// recorder's memory (about 60 bytes a row) whatever the event rate. The
/// builders hold up to this many per table, the writer's queue twice this
/// many in all.
pub const BATCH_ROWS: usize = 16 * 1024;
/// What a `tasks` recording goes without when its BPF program cannot run.
const TASKS_WITHOUT_EXITS: &str = "task_stat goes without the final counters of the processes that end (one that lives between two snapshots is missing)";
/// NUMA moves and migrations are rare; their ring needs little room.
const NUMA_RING_SIZE: u32 = 256 << 10;

static STOP: AtomicBool = AtomicBool::new(false);
static ROTATE: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(signal: libc::c_int) {
    if signal == libc::SIGHUP {
        ROTATE.store(true, Ordering::Relaxed);
    } else {
        STOP.store(true, Ordering::Relaxed);
    }
}

/// SIGINT/SIGTERM stop the recording after closing every file; SIGHUP rolls the chunk now.
fn install_signal_handlers() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to atomics, which is async-signal-safe.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// The nice the thread draining the rings takes, whatever the process runs
/// at (`Nice=19` in dist/hindsight-record.service). Draining costs about
/// 0.1 µs an event; waiting is what loses them. At nice 0 a woken drain was
/// seen to wait 46-77 ms behind a CPU-bound nice-0 program on its CPU while
/// a ping-pong on the other filled that CPU's ring; at -10 two 5-minute
/// soaks lost nothing once the loop ran (BENCHMARKS.md, "The drain's
/// priority"). The writer and the symbolizer, which do the expensive work,
/// keep the process's nice.
const DRAIN_NICE: libc::c_int = -10;

/// Gives the calling thread (the drain; every other thread is already
/// started, so none inherits it) [`DRAIN_NICE`], unless it already runs at
/// that or higher. Fails without CAP_SYS_NICE.
fn raise_drain_priority() -> std::io::Result<()> {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as libc::id_t;
    // SAFETY: getpriority and setpriority read and set a thread's nice; on
    // Linux PRIO_PROCESS with a thread id means that one thread. -1 is a
    // valid nice, so errno tells a failure.
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, tid);
        if nice == -1 && *libc::__errno_location() != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if nice <= DRAIN_NICE {
            return Ok(());
        }
        if libc::setpriority(libc::PRIO_PROCESS, tid, DRAIN_NICE) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// What a finished recording wrote, for the summary line.
#[derive(Debug, Default)]
pub struct Summary {
    pub rows: Vec<(&'static str, u64)>,
    pub bytes: u64,
    pub lost: u64,
    pub files: usize,
}

/// Everything the ring-buffer callback touches.
struct Collector {
    decoder: Decoder,
    rows: AllRows,
    writer: Writer,
    file_name: String,
    /// Records received from the kernel, for the recorder's own counters.
    events: u64,
    /// The first write failure; the loop stops on it.
    failure: Option<anyhow::Error>,
    decode_errors: u64,
    /// Present when stacks are recorded (`cpu` group or `--off-cpu-stacks`).
    stacks: Option<StackInterner>,
    /// The loop's longest stretch between two waits for the rings since the
    /// last counter round: while it lasts nothing drains them.
    longest_busy: Duration,
    /// The symbolizer's own counts, recorded as `recorder` counters:
    /// perf maps it refused to read, modules it opened.
    symbolizer_counts: Vec<(&'static str, std::sync::Arc<std::sync::atomic::AtomicU64>)>,
}

impl Collector {
    fn on_record(&mut self, data: &[u8]) -> i32 {
        self.events += 1;
        let decoded = match &mut self.stacks {
            Some(stacks) => self
                .decoder
                .decode_with_stacks(data, &mut self.rows, stacks),
            None => self.decoder.decode(data, &mut self.rows),
        };
        match decoded {
            Ok(kind) => {
                let table = table_of_kind(kind);
                let mut flushed = self.flush_if_full(table);
                if self.stacks.is_some() {
                    flushed = flushed
                        .and_then(|()| self.flush_if_full("stack"))
                        .and_then(|()| self.flush_if_full("frame"));
                }
                if let Err(e) = flushed {
                    self.failure.get_or_insert(e);
                }
            }
            Err(_) => self.decode_errors += 1,
        }
        if self.failure.is_some() {
            -1
        } else {
            0
        }
    }

    /// Writes a table's rows once a batch is full: this bounds memory.
    fn flush_if_full(&mut self, table: &str) -> anyhow::Result<()> {
        if self.rows.get(table).is_some_and(|r| r.len() >= BATCH_ROWS) {
            self.flush(table)?;
        }
        Ok(())
    }

    /// Hands a table's buffered rows to the writer, as one row group of the open chunk.
    fn flush(&mut self, table: &str) -> anyhow::Result<()> {
        let Some(rows) = self.rows.get(table) else {
            return Ok(());
        };
        if rows.is_empty() {
            return Ok(());
        }
        let table = rows.table();
        let batch = rows.finish();
        self.writer.write(table, batch, &self.file_name)
    }

    /// Hands every table's buffered rows to the writer (to the journal).
    fn flush_all(&mut self) -> anyhow::Result<()> {
        for table in hindsight_schemas::TABLES {
            self.flush(table.name)?;
        }
        Ok(())
    }

    /// Flushes every table and has the writer close the chunk's files,
    /// without waiting for it (see [`Writer::begin_close`]).
    fn begin_close_chunk(&mut self) -> anyhow::Result<()> {
        self.flush_all()?;
        self.writer.begin_close()
    }

    /// Flushes every table and closes the chunk's files.
    fn close_chunk(&mut self) -> anyhow::Result<()> {
        self.flush_all()?;
        self.writer.close_chunk()
    }

    /// Rows the writer could not write for a full disk, as `loss` rows, once
    /// writing works again (written while the disk is full, they would be
    /// lost too).
    fn report_disk_full(&mut self) -> u64 {
        let stats = &self.writer.stats;
        if stats.disk_full.load(Ordering::Relaxed) {
            return 0;
        }
        let since = stats.disk_full_since_ns.load(Ordering::Relaxed);
        let mut reported = 0;
        for (table, dropped) in hindsight_schemas::TABLES.iter().zip(&stats.dropped) {
            let n = dropped.swap(0, Ordering::Relaxed);
            if n > 0 {
                let source = format!("disk_full:{}", table.name);
                self.rows.loss.push(since, None, &source, n as i64);
                reported += n;
            }
        }
        reported
    }

    /// Moves frames the symbolizer has named into `frame` rows.
    fn collect_named(
        &mut self,
        symbolizer: &std::sync::mpsc::Receiver<crate::stacks::FrameRow>,
    ) -> anyhow::Result<()> {
        while let Ok(frame) = symbolizer.try_recv() {
            if let Some(stacks) = &mut self.stacks {
                stacks.frame_named(&frame);
            }
            self.rows.frame.push(&frame);
            self.flush_if_full("frame")?;
        }
        Ok(())
    }

    fn bytes_written(&self) -> u64 {
        self.writer.stats.bytes_written.load(Ordering::Relaxed)
    }
}

/// A BPF group's probes, or, where this kernel cannot load them, one
/// warning that says why and `None`: the other groups still record.
fn skip_refused<T>(
    group: &'static str,
    loaded: anyhow::Result<T>,
    refused: &mut Vec<(&'static str, String)>,
) -> Option<T> {
    match loaded {
        Ok(probes) => Some(probes),
        Err(e) => {
            let why = refusal_reason(&e);
            eprintln!("hindsight-record: warning: the {group} group cannot record on this kernel ({why}); recording without it");
            refused.push((group, why));
            None
        }
    }
}

/// Why a group could not load, without the advice about lockdown that
/// fits when nothing loads.
fn refusal_reason(e: &anyhow::Error) -> String {
    match e.downcast_ref::<bpf::Unsupported>() {
        Some(bpf::Unsupported::LoadRefused(why)) => why.clone(),
        _ => format!("{e:#}"),
    }
}

/// A group and what it records on this kernel: the tracepoints it goes
/// without, or why it cannot record.
pub type GroupSupport = (&'static str, Result<Vec<String>, String>);

/// What each BPF event group records on this kernel, for `--list-events`:
/// each one loaded and attached once, as a recording would, then let go.
/// `Ok` lists the tracepoints it goes without. `None` without the
/// privileges or the BTF to try.
pub fn kernel_support() -> Option<Vec<GroupSupport>> {
    bpf::hold_back_libbpf_log();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    bpf::check_privileges(&status).ok()?;
    let catalog = TracepointCatalog::load().ok()?;
    const RING: u32 = 1 << 20;
    let outcome = |loaded: anyhow::Result<Vec<String>>| loaded.map_err(|e| refusal_reason(&e));
    let mut support = Vec::new();
    let mut object = MaybeUninit::uninit();
    support.push((
        "sched",
        outcome(
            bpf::load_sched(&mut object, RING, bpf::OffCpuStacks::Unwound, &catalog)
                .map(|p| p.skipped),
        ),
    ));
    let mut object = MaybeUninit::uninit();
    support.push((
        "tasks",
        outcome(bpf::load_tasks(&mut object, &catalog).map(|p| p.skipped)),
    ));
    let mut object = MaybeUninit::uninit();
    support.push((
        "numa",
        outcome(bpf::load_numa(&mut object, NUMA_RING_SIZE, &catalog).map(|p| p.skipped)),
    ));
    let mut object = MaybeUninit::uninit();
    support.push((
        "cache",
        outcome(bpf::load_cache(&mut object, &catalog).map(|p| p.skipped)),
    ));
    let mut object = MaybeUninit::uninit();
    let cpus = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .map(|online| crate::procfs::parse_cpu_list(&online))
        .unwrap_or_default();
    support.push((
        "cpu",
        outcome(bpf::load_samples(&mut object, RING, 49, true, &cpus).map(|_| Vec::new())),
    ));
    let mut object = MaybeUninit::uninit();
    support.push((
        "faults",
        outcome(bpf::load_faults(&mut object, RING, 1, &catalog).map(|p| p.skipped)),
    ));
    Some(support)
}

/// How long a stop waits for the final counters of processes already
/// reaped: the kernel hands them over when it frees the task, from an RCU
/// callback, which starved kthreads can hold back for seconds (RCU's lazy
/// callbacks wait up to 10 s).
const FREE_WAIT: Duration = Duration::from_secs(10);

/// Waits up to [`FREE_WAIT`] for the frees of processes that ended and were
/// reaped while recording (the `exited` map of `bpf/tasks.bpf.c`; a zombie,
/// still in /proc, is not waited for), draining the rings meanwhile.
/// Returns how many never came.
const _: () = assert!(size_of::<crate::bpf::tasks::types::hs_exited>() == 16);

fn await_frees(exited: &dyn MapCore, procfs: &Procfs, ring: Option<&libbpf_rs::RingBuffer>) -> u64 {
    let deadline = Instant::now() + FREE_WAIT;
    loop {
        let reaped = exited
            .keys()
            .filter_map(|key| exited.lookup(&key, MapFlags::ANY).ok().flatten())
            .filter_map(|value| Some(u32::from_ne_bytes(value.get(8..12)?.try_into().ok()?)))
            .filter(|pid| !procfs.proc_root().join(pid.to_string()).exists())
            .count() as u64;
        if reaped == 0 || Instant::now() >= deadline {
            return reaped;
        }
        if let Some(ring) = ring {
            let _ = ring.consume_raw();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Per-CPU ring-full counters of every loaded group, and the runs the
/// kernel skipped of every program, read as deltas since the last reading.
struct LossCounters {
    /// Per lost map: what its counters showed at the last reading.
    groups: Vec<crate::losses::GroupLosses>,
    last_decode_errors: u64,
    /// Last `recursion_misses` per program.
    last_misses: Vec<u64>,
}

/// Times the kernel did not run a program because it was already running
/// on that CPU (an interrupt fired the same tracepoint inside it): each a
/// lost event, which no ring counter sees. `None` where it cannot be read.
pub(crate) fn recursion_misses(program: &libbpf_rs::Program<'_>) -> Option<u64> {
    use std::os::fd::{AsFd, AsRawFd};
    let mut info = libbpf_rs::libbpf_sys::bpf_prog_info::default();
    let mut len = size_of::<libbpf_rs::libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: the kernel fills at most `len` bytes of the info we own.
    let ret = unsafe {
        libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(
            program.as_fd().as_raw_fd(),
            &mut info,
            &mut len,
        )
    };
    (ret == 0).then_some(info.recursion_misses)
}

impl LossCounters {
    fn new() -> Self {
        LossCounters {
            groups: Vec::new(),
            last_decode_errors: 0,
            last_misses: Vec::new(),
        }
    }

    fn read(
        &mut self,
        maps: &[&dyn MapCore],
        programs: &[libbpf_rs::Program<'_>],
        collector: &mut Collector,
    ) -> anyhow::Result<u64> {
        use crate::losses::Slot;
        let now = clock::utc_now_ns();
        let kinds = hs_kind::HS_KIND_MAX.0 as usize;
        let read_slot = |map: &dyn MapCore, index: u32| -> anyhow::Result<Vec<Slot>> {
            let per_cpu = map
                .lookup_percpu(&index.to_ne_bytes(), MapFlags::ANY)
                .context("reading BPF loss counters")?
                .unwrap_or_default();
            Ok(per_cpu.iter().map(|b| Slot::parse(b, kinds)).collect())
        };
        self.groups.resize_with(maps.len(), Default::default);
        let mut lost_now = 0;
        for (map, group) in maps.iter().zip(&mut self.groups) {
            // The last slot holds the totals; the others, one second each.
            let seconds = map.max_entries().saturating_sub(1);
            let totals: Vec<Vec<u64>> = read_slot(*map, seconds)?
                .into_iter()
                .map(|slot| slot.counts)
                .collect();
            if !group.changed(&totals) {
                continue;
            }
            let slots = (0..seconds)
                .map(|index| read_slot(*map, index))
                .collect::<anyhow::Result<Vec<_>>>()?;
            for lost in group.account(&totals, &slots) {
                // The cache group aggregates in a map, not a ring: its losses are a full map.
                let kind = lost.kind as u32;
                let cause = if kind == hs_kind::HS_KIND_CACHE.0 {
                    "map_full"
                } else {
                    "ring_full"
                };
                let source = format!("{cause}:{}", table_of_kind(kind));
                // Dated by the end of its second, which a slot read within
                // that second has not reached yet.
                let ts = lost.second.map_or(now, |second| {
                    let end = (second + 1).saturating_mul(1_000_000_000);
                    collector.decoder.offset.to_utc_ns(end).min(now)
                });
                collector
                    .rows
                    .loss
                    .push(ts, Some(lost.cpu as i32), &source, lost.count as i64);
                lost_now += lost.count;
            }
        }
        self.last_misses.resize(programs.len(), 0);
        for (program, last) in programs.iter().zip(&mut self.last_misses) {
            let Some(total) = recursion_misses(program) else {
                continue;
            };
            let delta = total.saturating_sub(*last);
            *last = total;
            if delta > 0 {
                let tracepoint =
                    crate::bpf::tracepoint_of(&program.name().to_string_lossy()).to_owned();
                let source = format!("recursion:{tracepoint}");
                collector.rows.loss.push(now, None, &source, delta as i64);
                lost_now += delta;
            }
        }
        lost_now += collector.report_disk_full();
        let decode_delta = collector.decode_errors - self.last_decode_errors;
        if decode_delta > 0 {
            self.last_decode_errors = collector.decode_errors;
            collector
                .rows
                .loss
                .push(now, None, "decode_error:unknown", decode_delta as i64);
            lost_now += decode_delta;
        }
        Ok(lost_now)
    }
}

/// Readers of /proc and /sys that run on a timer, and the recorder's own
/// counters, which ride along with the system counters.
struct Periodic {
    /// Every `--interval`: the system counters when the `counters` group is
    /// recorded, and the recorder's own whatever the groups (its cost,
    /// losses and frames it left unnamed belong in every recording).
    counters: (Option<CounterReader>, Duration, Instant),
    tasks: Option<(TaskReader, Duration, Instant)>,
    /// Drains the kernel's per-process page-cache totals (`cache` group).
    page_cache: Option<(Duration, Instant)>,
}

impl Periodic {
    fn new(config: &Config, procfs: &Procfs, start: Instant) -> Self {
        let wants = |group: &str| config.events.iter().any(|e| e == group);
        Periodic {
            counters: (
                wants("counters").then(|| CounterReader::new(procfs)),
                config.interval,
                start,
            ),
            tasks: wants("tasks").then(|| {
                let reader = TaskReader::new(procfs, clock_ticks_per_second(), page_size());
                (reader, config.task_interval, start)
            }),
            page_cache: wants("cache").then_some((config.interval, start + config.interval)),
        }
    }

    /// The earliest moment a reader is due.
    fn next_due(&self) -> Option<Instant> {
        let counters = Some(self.counters.2);
        let tasks = self.tasks.as_ref().map(|(_, _, next)| *next);
        let page_cache = self.page_cache.as_ref().map(|(_, next)| *next);
        [counters, tasks, page_cache].into_iter().flatten().min()
    }

    /// Reads whatever is due. With `stopped_at` (when the recording was
    /// stopped), reads everything, to bound the end of the recording with a
    /// final sample; rounds count as late only up to the stop, not over the
    /// stop's own wait for the last frees and names.
    fn run_due(
        &mut self,
        now: Instant,
        stopped_at: Option<Instant>,
        c: &mut Collector,
        lost_total: u64,
        cache_counts: Option<&dyn MapCore>,
    ) -> anyhow::Result<()> {
        let ts = clock::utc_now_ns();
        let force = stopped_at.is_some();
        let late_until = stopped_at.unwrap_or(now);
        if let (Some((every, next)), Some(map)) = (&mut self.page_cache, cache_counts) {
            if force || now >= *next {
                push_late(c, ts, "page_cache", *next, *every, late_until);
                *next = next_tick(*next, *every, now);
                drain_page_cache(map, ts, &mut c.rows.page_cache)?;
                c.flush_if_full("page_cache")?;
            }
        }
        let (reader, every, next) = &mut self.counters;
        if force || now >= *next {
            push_late(c, ts, "counter", *next, *every, late_until);
            *next = next_tick(*next, *every, now);
            if let Some(reader) = reader {
                reader.read_round(ts, &mut c.rows.counter);
            }
            push_self_counters(ts, c, lost_total);
            c.flush_if_full("counter")?;
        }
        if let Some((reader, every, next)) = &mut self.tasks {
            if force || now >= *next {
                push_late(c, ts, "task_stat", *next, *every, late_until);
                *next = next_tick(*next, *every, now);
                reader.snapshot_timed(&clock::utc_now_ns, &mut c.rows.task_stat);
                c.flush_if_full("task_stat")?;
            }
        }
        Ok(())
    }
}

/// The next deadline on a fixed grid, skipping ticks that were missed
/// rather than bunching them up after a stall.
fn next_tick(previous: Instant, every: Duration, now: Instant) -> Instant {
    let mut next = previous + every;
    while next <= now {
        next += every;
    }
    next
}

/// Every group's rings under one epoll, and how many there are.
struct Rings<'a> {
    buffer: libbpf_rs::RingBuffer<'a>,
    count: usize,
}

impl<'a> Rings<'a> {
    fn new(buffer: libbpf_rs::RingBuffer<'a>) -> Self {
        let count = (0..)
            .take_while(|&i| !raw_ring(&buffer, i).is_null())
            .count();
        Rings { buffer, count }
    }

    /// Waits up to `timeout` for the rings (they wake us when a quarter
    /// full), then drains at most [`DRAIN_BUDGET`] records. Returns the
    /// records drained, or a negative errno (`-EINTR` when a signal came),
    /// and when the wait ended: from then until the next wait the loop is
    /// busy, and the rings fill without being read.
    fn wait_and_drain(&self, timeout: Duration) -> (i32, Instant) {
        // SAFETY: epoll_wait writes at most one event into the one we own.
        let mut event: libc::epoll_event = unsafe { std::mem::zeroed() };
        let ready = unsafe {
            libc::epoll_wait(
                self.buffer.epoll_fd(),
                &mut event,
                1,
                epoll_timeout_ms(timeout),
            )
        };
        let woke = Instant::now();
        if ready < 0 {
            let errno = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            return (-errno, woke);
        }
        (self.drain_evenly(DRAIN_BUDGET), woke)
    }

    /// Drains at most `budget` records: an even share of it from each ring
    /// first, then what is left of it, ring by ring. libbpf's own consume
    /// offers the whole budget to the rings in order, so under a storm the
    /// first CPUs' rings would take all of it every turn and the losses
    /// would all fall on the other CPUs. Returns the records drained or a
    /// negative errno, as `consume_raw_n` does.
    fn drain_evenly(&self, budget: usize) -> i32 {
        let share = (budget / self.count.max(1)).max(1);
        let mut drained = 0;
        for whole_rest in [false, true] {
            for i in 0..self.count {
                let left = budget - drained;
                if left == 0 {
                    return drained as i32;
                }
                let offer = if whole_rest { left } else { share.min(left) };
                // SAFETY: ring i is one of the live rings counted in `new`.
                let n = unsafe {
                    libbpf_rs::libbpf_sys::ring__consume_n(raw_ring(&self.buffer, i), offer as _)
                };
                if n < 0 {
                    return n;
                }
                drained += n as usize;
            }
        }
        drained as i32
    }
}

/// `timeout` in the whole milliseconds epoll takes, rounded up. Rounded
/// down, the last millisecond before each timer was a wait of 0 and the
/// loop spun through it: 1,844 of the 2,312 waits over a 16 s build, and an
/// eighth of the ring thread's CPU on an idle host.
fn epoll_timeout_ms(timeout: Duration) -> i32 {
    timeout
        .as_nanos()
        .div_ceil(1_000_000)
        .try_into()
        .unwrap_or(i32::MAX)
}

/// The `i`th ring of a ring buffer, for libbpf's per-ring calls; NULL past the last.
fn raw_ring(buffer: &libbpf_rs::RingBuffer<'_>, i: usize) -> *mut libbpf_rs::libbpf_sys::ring {
    use libbpf_rs::AsRawLibbpf;
    // SAFETY: the ring_buffer is live while `buffer` is; an index past its rings gives NULL.
    unsafe {
        libbpf_rs::libbpf_sys::ring_buffer__ring(buffer.as_libbpf_object().as_ptr(), i as u32)
    }
}

/// Timer rounds that fell due but were skipped because the loop came back
/// only at `now` (a stalled disk, a starved recorder): collection was late.
fn missed_ticks(due: Instant, every: Duration, now: Instant) -> u64 {
    if now <= due || every.is_zero() {
        return 0;
    }
    (now.duration_since(due).as_nanos() / every.as_nanos()) as u64
}

/// Records skipped rounds of a timed source in `loss` (source `late:<table>`).
fn push_late(c: &mut Collector, ts: i64, table: &str, due: Instant, every: Duration, now: Instant) {
    let missed = missed_ticks(due, every, now);
    if missed > 0 {
        let source = format!("{}{table}", hindsight_schemas::tables::LATE_PREFIX);
        c.rows.loss.push(ts, None, &source, missed as i64);
    }
}

/// The sampler's ring: a second of samples at their largest (a record with
/// full kernel and user stacks is about 2 KiB), and at least an eighth of
/// `--ring-size` (under the 1 MiB floor at the default 4M; whoever raises it asks every
/// ring to ride out longer pauses), at least 1 MiB, at most `--ring-size`,
/// a power of two. Its pages are resident twice over (the data is mapped
/// twice for wrap-around), so at 49 Hz on a few CPUs a ring the size of
/// `--ring-size` would be 16 MiB of memory for a trickle.
fn sample_ring_size(frequency: u32, cpus: usize, ring_size: u32, copies_stacks: bool) -> u32 {
    // A copy of the user stack runs from the stack pointer to the stack's
    // top or the copy's size: on average about half of it.
    let record = if copies_stacks {
        2048 + bpf::STACK_COPY_BYTES as u64 / 2
    } else {
        2048
    };
    let second = u64::from(frequency) * cpus.max(1) as u64 * record;
    let wanted = second
        .max(u64::from(ring_size) / 8)
        .clamp(1 << 20, u64::from(ring_size).max(1 << 20));
    u32::try_from(wanted.next_power_of_two())
        .unwrap_or(ring_size)
        .min(ring_size.max(1 << 20))
}

/// Sleeps for `duration` or until a signal arrives, whichever is first
/// (`nanosleep` is never restarted after a handler runs; `thread::sleep`
/// would sleep on through SIGINT).
fn sleep_interruptibly(duration: Duration) {
    let request = libc::timespec {
        tv_sec: duration.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(duration.subsec_nanos() as i32),
    };
    // SAFETY: nanosleep reads the timespec we own; the remainder is unused.
    unsafe { libc::nanosleep(&request, std::ptr::null_mut()) };
}

/// The recorder's own cost, recorded like any other source.
fn push_self_counters(ts: i64, c: &mut Collector, lost_total: u64) {
    // SAFETY: getrusage fills the struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let micros = |t: libc::timeval| t.tv_sec * 1_000_000 + t.tv_usec;
    let rss_kb = crate::procfs::self_resident_bytes().map_or(0, |bytes| (bytes / 1024) as i64);
    let values = [
        ("utime_us", micros(usage.ru_utime)),
        ("stime_us", micros(usage.ru_stime)),
        ("rss_kb", rss_kb),
        ("events", c.events as i64),
        ("bytes_written", c.bytes_written() as i64),
        ("lost", lost_total as i64),
        ("writer_wait_us", c.writer.waited().as_micros() as i64),
        // A gauge: the longest the rings went undrained since the last round.
        (
            "longest_busy_us",
            std::mem::take(&mut c.longest_busy).as_micros() as i64,
        ),
    ];
    for (name, value) in values {
        c.rows.counter.push(ts, "recorder", name, None, value);
    }
    for (name, count) in &c.symbolizer_counts {
        let value = count.load(std::sync::atomic::Ordering::Relaxed) as i64;
        c.rows.counter.push(ts, "recorder", name, None, value);
    }
    if let Some(stacks) = &c.stacks {
        let value = stacks.unnamed as i64;
        c.rows
            .counter
            .push(ts, "recorder", "frames_unnamed", None, value);
    }
}

/// Retention's hook: after a chunk named `closed` was closed in every
/// table, delete what the budget no longer allows and note it in
/// recording.json (saved by the caller).
fn retire(
    retention: &mut Retention,
    recording: &mut Recording,
    closed: &str,
    next_chunk_room: u64,
) {
    let tables = hindsight_schemas::TABLES.iter().map(|t| t.name);
    let retired = retention.after_close(tables, closed, next_chunk_room, retention::now_ns());
    recording.meta.retired.extend(retired);
}

/// Once the writer has closed the chunk `closing` names (waited for when
/// `wait`, else only if it is over): retention makes room for the next
/// chunk and recording.json is saved. Nothing to do while it still runs.
fn settle_close(
    c: &mut Collector,
    closing: &mut Option<String>,
    wait: bool,
    retention: &mut Retention,
    recording: &mut Recording,
) -> anyhow::Result<()> {
    if closing.is_none() {
        return Ok(());
    }
    let outcome = if wait {
        c.writer.finish_close()
    } else {
        c.writer.poll_close()
    };
    let Some(outcome) = outcome else {
        return Ok(());
    };
    let closed = closing.take().expect("checked above");
    outcome?;
    let peak = c.writer.stats.last_chunk_peak_bytes.load(Ordering::Relaxed);
    retire(retention, recording, &closed, peak);
    save_recording(recording)
}

/// Saves recording.json; a full disk is not an error here (it is saved
/// again at the next roll, and the writer reports the outage).
fn save_recording(recording: &Recording) -> anyhow::Result<()> {
    match recording.save() {
        Err(e) if crate::sink::is_disk_full(&e) => Ok(()),
        other => other,
    }
}

fn wants(config: &Config, group: &str) -> bool {
    config.events.iter().any(|e| e == group)
}

fn session(config: &Config, host: &crate::procfs::HostInfo) -> Session {
    Session {
        started: rfc3339(clock::utc_now_ns()),
        stopped: None,
        boot_id: host.boot_id.clone(),
        kernel: host.kernel.clone(),
        cpus: host.cpus,
        numa_nodes: host.numa_nodes,
        recorder_version: env!("CARGO_PKG_VERSION").into(),
        command_line: config.command_line.clone(),
        events: config.events.clone(),
        chunk_ns: config.chunk.as_nanos() as u64,
        clock_offsets: Vec::new(),
        clock_ticks_per_second: clock_ticks_per_second(),
        page_size: page_size(),
        counter_interval_ns: if wants(config, "counters") {
            config.interval.as_nanos() as u64
        } else {
            0
        },
        task_interval_ns: if wants(config, "tasks") {
            config.task_interval.as_nanos() as u64
        } else {
            0
        },
        fault_sample: config.fault_sample,
        sample_frequency: if wants(config, "cpu") {
            config.frequency
        } else {
            0
        },
        off_cpu_stacks: config.off_cpu_stacks && wants(config, "sched"),
        sample_unwind: match (wants(config, "cpu"), config.unwind_dwarf) {
            (false, _) => String::new(),
            (true, true) => "dwarf".into(),
            (true, false) => "fp".into(),
        },
        recorder_pid: Some(std::process::id() as i32),
        ..Default::default()
    }
}

/// Records until the duration ends or a signal arrives.
pub fn record(config: &Config) -> anyhow::Result<Summary> {
    bpf::hold_back_libbpf_log();
    let bpf_groups = ["sched", "faults", "numa", "cache", "cpu"];
    let uses_bpf = bpf_groups.iter().any(|g| wants(config, g));
    // `tasks` reads /proc; BPF only adds the final counters of the
    // processes that end, so without it the group still records.
    let catalog = if uses_bpf || wants(config, "tasks") {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let ready = bpf::check_privileges(&status).and_then(|()| TracepointCatalog::load());
        match ready {
            Ok(catalog) => {
                let missing = bpf::missing_optional_capabilities(&status);
                if !missing.is_empty() {
                    eprintln!(
                        "hindsight-record: warning: without {}, other users' /proc/<pid>/io is unreadable (task_stat read_bytes/write_bytes stay null)",
                        missing.join(" and ")
                    );
                }
                Some(catalog)
            }
            Err(e) if !uses_bpf => {
                eprintln!("hindsight-record: warning: {e}; {TASKS_WITHOUT_EXITS}");
                None
            }
            Err(e) => return Err(e.into()),
        }
    } else {
        None
    };
    let procfs = Procfs::default();
    let host = procfs.host_info();
    let mut recording = Recording::open(&config.output, &host.host, session(config, &host))?;
    let stamp = FileStamp {
        host: host.host.clone(),
        boot_id: host.boot_id.clone(),
        recorder_version: env!("CARGO_PKG_VERSION").into(),
    };

    // A group this kernel cannot load is skipped with one warning; the rest record.
    let mut refused: Vec<(&str, String)> = Vec::new();
    let mut faults_object = MaybeUninit::uninit();
    let faults = match (&catalog, wants(config, "faults")) {
        (Some(catalog), true) => skip_refused(
            "faults",
            bpf::load_faults(
                &mut faults_object,
                config.ring_size,
                config.fault_sample,
                catalog,
            ),
            &mut refused,
        ),
        _ => None,
    };
    let mut numa_object = MaybeUninit::uninit();
    let numa = match (&catalog, wants(config, "numa")) {
        (Some(catalog), true) => skip_refused(
            "numa",
            bpf::load_numa(&mut numa_object, NUMA_RING_SIZE, catalog),
            &mut refused,
        ),
        _ => None,
    };
    let mut cache_object = MaybeUninit::uninit();
    let cache = match (&catalog, wants(config, "cache")) {
        (Some(catalog), true) => skip_refused(
            "cache",
            bpf::load_cache(&mut cache_object, catalog),
            &mut refused,
        ),
        _ => None,
    };
    let mut tasks_object = MaybeUninit::uninit();
    let tasks = match (&catalog, wants(config, "tasks")) {
        (Some(catalog), true) => match bpf::load_tasks(&mut tasks_object, catalog) {
            Ok(probes) => Some(probes),
            Err(e) => {
                eprintln!("hindsight-record: warning: {e:#}; {TASKS_WITHOUT_EXITS}");
                None
            }
        },
        _ => None,
    };
    let mut samples_object = MaybeUninit::uninit();
    let samples = match (&catalog, wants(config, "cpu")) {
        (Some(_), true) => {
            let online = std::fs::read_to_string("/sys/devices/system/cpu/online")
                .context("reading /sys/devices/system/cpu/online")?;
            let cpus = crate::procfs::parse_cpu_list(&online);
            skip_refused(
                "cpu",
                bpf::load_samples(
                    &mut samples_object,
                    sample_ring_size(
                        config.frequency,
                        cpus.len(),
                        config.ring_size,
                        config.unwind_dwarf,
                    ),
                    config.frequency,
                    config.unwind_dwarf,
                    &cpus,
                ),
                &mut refused,
            )
        }
        _ => None,
    };
    // The sched group attaches last: its rings fill fastest (a ping-pong
    // writes one CPU's 2 MiB in about 35 ms), and nothing drains them until
    // the loop starts. Loading the other groups first took that wait from
    // 76 ms to 6-21 ms on an idle machine (BENCHMARKS.md, "The drain's
    // priority").
    let mut sched_object = MaybeUninit::uninit();
    let sched = match (&catalog, wants(config, "sched")) {
        (Some(catalog), true) => skip_refused(
            "sched",
            bpf::load_sched(
                &mut sched_object,
                config.ring_size,
                match (config.off_cpu_stacks, config.unwind_dwarf) {
                    (false, _) => bpf::OffCpuStacks::No,
                    (true, false) => bpf::OffCpuStacks::FramePointers,
                    (true, true) => bpf::OffCpuStacks::Unwound,
                },
                catalog,
            ),
            &mut refused,
        ),
        _ => None,
    };
    // Nothing left to record: the reasons, and exit 3.
    let records_without_bpf = ["counters", "tasks"].iter().any(|g| wants(config, g));
    if !refused.is_empty()
        && !records_without_bpf
        && bpf_groups.iter().filter(|g| wants(config, g)).count() == refused.len()
    {
        let reasons: Vec<String> = refused
            .iter()
            .map(|(g, why)| format!("{g}: {why}"))
            .collect();
        return Err(bpf::Unsupported::NoGroup(reasons.join("; ")).into());
    }
    recording
        .session_mut()
        .events
        .retain(|group| !refused.iter().any(|(g, _)| g == group));
    let records_stacks = samples.is_some() || (sched.is_some() && config.off_cpu_stacks);
    let symbolizer = if records_stacks {
        Some(
            SymbolizerThread::start(std::path::Path::new("/proc"))
                .context("starting the symbolizer thread")?,
        )
    } else {
        None
    };
    let mut skipped = Vec::new();
    skipped.extend(sched.iter().flat_map(|p| p.skipped.iter().cloned()));
    skipped.extend(faults.iter().flat_map(|p| p.skipped.iter().cloned()));
    skipped.extend(numa.iter().flat_map(|p| p.skipped.iter().cloned()));
    skipped.extend(cache.iter().flat_map(|p| p.skipped.iter().cloned()));
    skipped.extend(tasks.iter().flat_map(|p| p.skipped.iter().cloned()));
    skipped.extend(refused.iter().map(|(group, _)| format!("group:{group}")));
    recording.session_mut().skipped_probes = skipped;
    // The kernel's BTF (several MiB) is only needed to choose programs.
    drop(catalog);

    let mut retention = Retention::scan(recording.dir.path(), config.retention);
    let retired = retention.enforce(retention::now_ns());
    recording.meta.retired.extend(retired);
    let offset = clock::measure_offset();
    recording.session_mut().clock_offsets.push(offset);
    recording.save()?;
    let writer = Writer::start(&recording.dir, &stamp, config.fsync)?;
    let mut seq = 0u64;
    let collector = Rc::new(RefCell::new(Collector {
        decoder: Decoder::new(offset),
        rows: AllRows::default(),
        writer,
        events: 0,
        file_name: layout::chunk_file_name(clock::utc_now_ns(), seq),
        failure: None,
        decode_errors: 0,
        stacks: symbolizer
            .as_ref()
            .map(|s| StackInterner::new(std::path::Path::new("/proc"), s.requests.clone())),
        longest_busy: Duration::ZERO,
        symbolizer_counts: symbolizer
            .as_ref()
            .map(|s| {
                vec![
                    (
                        "perf_maps_refused",
                        std::sync::Arc::clone(&s.perf_maps_refused),
                    ),
                    ("modules_opened", std::sync::Arc::clone(&s.modules_opened)),
                    (
                        "jit_frames_let_go",
                        std::sync::Arc::clone(&s.jit_frames_let_go),
                    ),
                    (
                        "frames_unnamed_at_stop",
                        std::sync::Arc::clone(&s.frames_unnamed_at_stop),
                    ),
                ]
            })
            .unwrap_or_default(),
    }));

    // Scan after attaching: a process started in between is then seen twice
    // (fork and scan), never missed.
    {
        let now = clock::utc_now_ns();
        let mut c = collector.borrow_mut();
        for task in procfs.scan_tasks() {
            c.rows.process.push(ProcessRow {
                ts: now,
                event: "scan",
                pid: task.pid,
                tid: task.tid,
                ppid: task.ppid,
                comm: &task.comm,
                cmdline: task.cmdline.as_deref(),
                exit_code: None,
            });
        }
    }

    // One epoll over every group's ring; each record says its own kind.
    let mut rings: Vec<&dyn MapCore> = Vec::new();
    let mut lost_maps: Vec<&dyn MapCore> = Vec::new();
    if let Some(p) = &sched {
        rings.extend(bpf::ring_maps(&p.rings));
        lost_maps.push(&p.skel.maps.sched_lost);
    }
    if let Some(p) = &faults {
        rings.extend(bpf::ring_maps(&p.rings));
        lost_maps.push(&p.skel.maps.fault_lost);
    }
    if let Some(p) = &numa {
        rings.push(&p.skel.maps.numa_events);
        lost_maps.push(&p.skel.maps.numa_lost);
    }
    if let Some(p) = &cache {
        lost_maps.push(&p.skel.maps.cache_lost);
    }
    if let Some(p) = &samples {
        rings.push(&p.skel.maps.stack_events);
        lost_maps.push(&p.skel.maps.stack_lost);
    }
    // Processes end far more rarely than events stream in: the tasks ring
    // alone is drained by the timers' wake-ups (or when a quarter full).
    let streams = !rings.is_empty();
    if let Some(p) = &tasks {
        rings.push(&p.skel.maps.task_events);
        lost_maps.push(&p.skel.maps.task_lost);
    }
    // Every loaded group's programs (for their skipped runs) and links (to
    // detach them at the stop).
    let mut programs: Vec<libbpf_rs::Program<'_>> = Vec::new();
    let mut attached: Vec<&crate::bpf::Attached> = Vec::new();
    for (object, links) in [
        sched.as_ref().map(|p| (p.skel.object(), &p.links)),
        faults.as_ref().map(|p| (p.skel.object(), &p.links)),
        numa.as_ref().map(|p| (p.skel.object(), &p.links)),
        cache.as_ref().map(|p| (p.skel.object(), &p.links)),
        samples.as_ref().map(|p| (p.skel.object(), &p.links)),
        tasks.as_ref().map(|p| (p.skel.object(), &p.links)),
    ]
    .into_iter()
    .flatten()
    {
        programs.extend(object.progs().filter(|p| p.autoload()));
        attached.push(links);
    }
    let cache_counts: Option<&dyn MapCore> = cache
        .as_ref()
        .map(|p| &p.skel.maps.cache_counts as &dyn MapCore);
    let ring = if rings.is_empty() {
        None
    } else {
        let mut builder = RingBufferBuilder::new();
        for map in rings {
            let callback_collector = Rc::clone(&collector);
            builder
                .add(map, move |data: &[u8]| {
                    callback_collector.borrow_mut().on_record(data)
                })
                .context("setting up the ring buffer")?;
        }
        Some(Rings::new(
            builder.build().context("setting up the ring buffer")?,
        ))
    };

    if ring.is_some() {
        if let Err(e) = raise_drain_priority() {
            eprintln!(
                "hindsight-record: warning: the thread that drains the ring buffers cannot take \
                 nice {DRAIN_NICE} ({e}; it needs CAP_SYS_NICE): while other programs keep the \
                 CPUs busy it may wait, and the kernel drop events (counted in the loss table)"
            );
        }
    }
    install_signal_handlers();
    eprintln!(
        "hindsight-record: recording {} to {} ({})",
        recording.session_mut().events.join(","),
        config.output.display(),
        match config.duration {
            Some(d) => format!("for {}s; Ctrl-C stops early", d.as_secs_f64()),
            None => "until Ctrl-C or SIGTERM".into(),
        }
    );

    let started = Instant::now();
    let mut periodic = Periodic::new(config, &procfs, started);
    let deadline = config.duration.map(|d| started + d);
    let mut chunk_deadline = started + config.chunk;
    let mut next_flush = started + config.flush;
    let mut next_loss_read = started + LOSS_INTERVAL;
    let mut losses = LossCounters::new();
    let mut lost_total = 0u64;
    let mut failure: Option<anyhow::Error> = None;
    // The last drain stopped at its budget: the ring still holds records.
    let mut backlog = false;
    // The chunk whose close the writer is working on, if any.
    let mut closing: Option<String> = None;

    // When the last wait for the rings ended: the loop's busy stretch
    // runs from then to its next wait.
    let mut busy_since: Option<Instant> = None;
    loop {
        if let Some(woke) = busy_since.take() {
            let mut c = collector.borrow_mut();
            c.longest_busy = c.longest_busy.max(woke.elapsed());
        }
        // The BPF side wakes us only when the ring fills up; otherwise the
        // poll times out and we drain what accumulated.
        // Nothing streams in: sleep until the next timer, which at the
        // default 1 s interval is one wake-up a second, not ten.
        let until_wake = || {
            let wake = [
                periodic.next_due(),
                Some(chunk_deadline),
                Some(next_flush),
                (!lost_maps.is_empty()).then_some(next_loss_read),
                deadline,
            ]
            .into_iter()
            .flatten()
            .min();
            // At most a second: a signal that lands between the stop
            // check and the sleep is then seen a second late at worst.
            wake.map_or(MAX_IDLE_SLEEP, |w| {
                w.saturating_duration_since(Instant::now())
            })
            .min(MAX_IDLE_SLEEP)
        };
        let polled = match &ring {
            Some(ring) => {
                let timeout = if backlog {
                    Duration::ZERO
                } else if streams {
                    // A flush or a snapshot waits for no poll interval: a
                    // kill -9 then loses at most --flush, not --flush plus
                    // up to a poll interval.
                    POLL_INTERVAL.min(until_wake())
                } else {
                    until_wake()
                };
                let (polled, woke) = ring.wait_and_drain(timeout);
                busy_since = Some(woke);
                if let Some(stacks) = &mut collector.borrow_mut().stacks {
                    stacks.drain_ended(Instant::now());
                }
                backlog = polled >= DRAIN_BUDGET as i32;
                polled
            }
            None => {
                sleep_interruptibly(until_wake());
                0
            }
        };
        if let Some(e) = collector.borrow_mut().failure.take() {
            failure = Some(e);
            break;
        }
        if polled < 0 && polled != -libc::EINTR {
            failure = Some(anyhow::anyhow!(
                "polling the ring buffer: {}",
                std::io::Error::from_raw_os_error(-polled)
            ));
            break;
        }
        let now = Instant::now();
        if STOP.load(Ordering::Relaxed) || deadline.is_some_and(|d| now >= d) {
            break;
        }
        let mut c = collector.borrow_mut();
        if let Some(s) = &symbolizer {
            if let Err(e) = c.collect_named(&s.named) {
                failure = Some(e);
                break;
            }
        }
        if now >= next_loss_read {
            next_loss_read = next_tick(next_loss_read, LOSS_INTERVAL, now);
            match losses.read(&lost_maps, &programs, &mut c) {
                Ok(n) => lost_total += n,
                Err(e) => eprintln!("hindsight-record: warning: {e:#}"),
            }
        }
        if let Err(e) = periodic.run_due(now, None, &mut c, lost_total, cache_counts) {
            failure = Some(e);
            break;
        }
        if now >= next_flush {
            // What a kill -9 can lose is what is still in the builders.
            next_flush = next_tick(next_flush, config.flush, now);
            if let Err(e) = c.flush_all() {
                failure = Some(e);
                break;
            }
            let open_bytes = c.writer.stats.open_chunk_bytes.load(Ordering::Relaxed);
            let retired = retention.while_open(open_bytes, retention::now_ns());
            if !retired.is_empty() {
                recording.meta.retired.extend(retired);
                if let Err(e) = save_recording(&recording) {
                    failure = Some(e);
                    break;
                }
            }
        }
        if now >= chunk_deadline || ROTATE.swap(false, Ordering::Relaxed) {
            chunk_deadline = now + config.chunk;
            // A close still under way (a very slow disk) ends first.
            if let Err(e) = settle_close(&mut c, &mut closing, true, &mut retention, &mut recording)
            {
                failure = Some(e);
                break;
            }
            if let Err(e) = c.begin_close_chunk() {
                failure = Some(e);
                break;
            }
            let offset = clock::measure_offset();
            c.decoder.offset = offset;
            seq += 1;
            let next_name = layout::chunk_file_name(clock::utc_now_ns(), seq);
            closing = Some(std::mem::replace(&mut c.file_name, next_name));
            recording.session_mut().clock_offsets.push(offset);
        }
        if let Err(e) = settle_close(&mut c, &mut closing, false, &mut retention, &mut recording) {
            failure = Some(e);
            break;
        }
    }
    let stopped_at = Instant::now();

    // Detach every program, so that no event is added after, then drain
    // what the kernel already handed over, then read the loss counters, and
    // close everything: a stop keeps every event it saw and never leaves a
    // half-written file behind. Only the tasks group stays attached while
    // the frees of reaped processes are awaited (up to FREE_WAIT): the
    // recording ends when it was asked to, not seconds later (CI saw a
    // `--duration 1s` hold 11 s of switches while RCU held frees back).
    let tasks_links = tasks.as_ref().map(|p| &p.links);
    for links in &attached {
        if !tasks_links.is_some_and(|t| std::ptr::eq(t, *links)) {
            links.detach();
        }
    }
    let not_freed = match (&failure, &tasks) {
        (None, Some(tasks)) => await_frees(
            &tasks.skel.maps.exited,
            &procfs,
            ring.as_ref().map(|r| &r.buffer),
        ),
        _ => 0,
    };
    for links in &attached {
        links.detach();
    }
    if let (None, Some(ring)) = (&failure, &ring) {
        let _ = ring.buffer.consume_raw();
    }
    drop(ring);
    let mut c = collector.borrow_mut();
    if let Ok(n) = losses.read(&lost_maps, &programs, &mut c) {
        lost_total += n;
    }
    if not_freed > 0 {
        c.rows.loss.push(
            clock::utc_now_ns(),
            None,
            "not_freed:task_stat",
            not_freed as i64,
        );
        lost_total += not_freed;
    }
    // Every frame sent to the symbolizer is written before the last chunk
    // closes, named if it gets its turn within NAMING_AT_STOP.
    drop(c.stacks.take());
    if let Some(s) = symbolizer {
        let named = s.join(crate::symbolize::NAMING_AT_STOP);
        if let Err(e) = c.collect_named(&named) {
            failure.get_or_insert(e);
        }
    }
    if failure.is_none() {
        // A last sample bounds the end of the recording for interval deltas;
        // taken after the symbolizer's last work, its own counters (perf
        // maps refused while naming the last frames) are final.
        if let Err(e) = periodic.run_due(
            Instant::now(),
            Some(stopped_at),
            &mut c,
            lost_total,
            cache_counts,
        ) {
            failure = Some(e);
        }
    }
    if let Err(e) = settle_close(&mut c, &mut closing, true, &mut retention, &mut recording) {
        failure.get_or_insert(e);
    }
    let closed = c.close_chunk();
    let rows = c.writer.join();
    retire(&mut retention, &mut recording, &c.file_name, 0);
    recording.session_mut().stopped = Some(rfc3339(clock::utc_now_ns()));
    let saved = recording.save();
    if let Some(e) = failure {
        return Err(e);
    }
    closed?;
    let rows = rows?;
    saved?;
    // Rows a still-full disk kept out, never reported in `loss`.
    let unreported: u64 = c
        .writer
        .stats
        .dropped
        .iter()
        .map(|d| d.load(Ordering::Relaxed))
        .sum();
    Ok(Summary {
        rows,
        bytes: c.bytes_written(),
        lost: lost_total + unreported,
        files: c.writer.stats.files.load(Ordering::Relaxed) as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_are_late_only_when_a_whole_interval_was_missed() {
        let due = Instant::now();
        let second = Duration::from_secs(1);
        // (ms late, rounds missed, ms from `due` to the next deadline): the
        // first grid point after now, the missed ones skipped.
        let cases = [
            (0, 0, 1000),
            (999, 0, 1000),
            (1000, 1, 2000),
            (3500, 3, 4000),
        ];
        for (late_ms, missed, next_ms) in cases {
            let now = due + Duration::from_millis(late_ms);
            assert_eq!(missed_ticks(due, second, now), missed, "{late_ms} ms late");
            let next = next_tick(due, second, now);
            assert_eq!(
                next - due,
                Duration::from_millis(next_ms),
                "{late_ms} ms late"
            );
        }
        assert_eq!(missed_ticks(due, second, due - Duration::from_millis(5)), 0);
    }

    #[test]
    fn waits_for_a_timer_round_up_to_a_millisecond_and_only_none_is_zero() {
        let cases = [
            (Duration::ZERO, 0),
            (Duration::from_nanos(1), 1),
            (Duration::from_micros(999), 1),
            (Duration::from_millis(1), 1),
            (Duration::from_micros(1001), 2),
            (Duration::from_millis(100), 100),
            (Duration::from_secs(u64::MAX), i32::MAX),
        ];
        for (timeout, ms) in cases {
            assert_eq!(epoll_timeout_ms(timeout), ms, "{timeout:?}");
        }
    }
}

#[cfg(test)]
mod sample_ring_tests {
    use super::sample_ring_size;

    #[test]
    fn the_sampler_ring_holds_a_second_of_samples_within_bounds() {
        // 49 Hz on 2 CPUs: a trickle, the 1 MiB floor.
        assert_eq!(sample_ring_size(49, 2, 8 << 20, false), 1 << 20);
        // With copies of the user stack: five times the bytes a sample.
        assert_eq!(sample_ring_size(49, 2, 8 << 20, true), 1 << 20);
        assert_eq!(sample_ring_size(99, 2, 8 << 20, true), 2 << 20);
        // 999 Hz on 2 CPUs: 4 MB a second at most, rounded up to 4 MiB.
        assert_eq!(sample_ring_size(999, 2, 8 << 20, false), 4 << 20);
        // Never above --ring-size, never below the floor.
        assert_eq!(sample_ring_size(10_000, 64, 8 << 20, false), 8 << 20);
        assert_eq!(sample_ring_size(49, 2, 1 << 20, false), 1 << 20);
        // A larger --ring-size asks for longer pauses ridden out: an eighth
        // of it (the VM test's 64M: 8 MiB, where a second was 1 MiB and an
        // emulated guest's start-up lost 9 samples).
        assert_eq!(sample_ring_size(49, 2, 64 << 20, true), 8 << 20);
        assert_eq!(sample_ring_size(999, 2, 16 << 20, false), 4 << 20);
    }
}
