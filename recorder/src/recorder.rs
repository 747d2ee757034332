//! The recording loop: drain the ring buffer into Arrow builders, hand full
//! batches to the sinks, roll chunks, count losses, stop cleanly.
//!
//! One thread does it all. The loop sleeps in the ring buffer's epoll for
//! at most [`POLL_INTERVAL`] (never spins), and a signal only sets a flag
//! that the loop reads, so every stop goes through the same orderly close.

use std::{
    cell::RefCell,
    mem::MaybeUninit,
    rc::Rc,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use anyhow::Context;
use hindsight_schemas::{layout, meta::Session, time::rfc3339};
use libbpf_rs::{MapCore, MapFlags, RingBufferBuilder};

use crate::{
    bpf::{self, sched::types::hs_kind, TracepointCatalog},
    cli::Config,
    clock,
    decode::{table_of_kind, Decoder},
    procfs::Procfs,
    recording::Recording,
    rows::{AllRows, ProcessRow},
    sink::{FileStamp, TableSink},
};

/// Longest the loop sleeps before it drains the ring and checks the clock and signals.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// How often per-CPU loss counters are read into `loss` rows.
const LOSS_INTERVAL: Duration = Duration::from_secs(1);
/// Rows buffered per table before they are written as one row group:
/// bounds the recorder's memory (about 60 bytes a row) whatever the event rate.
pub const BATCH_ROWS: usize = 128 * 1024;

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
    sinks: Vec<TableSink>,
    file_name: String,
    files: usize,
    /// Records received from the kernel, for the recorder's own counters.
    events: u64,
    /// The first write failure; the loop stops on it.
    failure: Option<anyhow::Error>,
    decode_errors: u64,
}

impl Collector {
    fn on_record(&mut self, data: &[u8]) -> i32 {
        self.events += 1;
        match self.decoder.decode(data, &mut self.rows) {
            Ok(kind) => {
                let table = table_of_kind(kind);
                if let Err(e) = self.flush_if_full(table) {
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

    /// Writes a table's buffered rows as one row group of the open chunk.
    fn flush(&mut self, table: &str) -> anyhow::Result<()> {
        let Some(rows) = self.rows.get(table) else { return Ok(()) };
        if rows.len() == 0 {
            return Ok(());
        }
        let batch = rows.finish();
        let sink = self.sinks.iter_mut().find(|s| s.table().name == table).expect("a sink per table");
        sink.write(&batch, &self.file_name)
    }

    /// Flushes every table and closes the chunk's files.
    fn close_chunk(&mut self) -> anyhow::Result<()> {
        for table in hindsight_schemas::TABLES {
            self.flush(table.name)?;
        }
        for sink in &mut self.sinks {
            if sink.close_chunk()?.is_some() {
                self.files += 1;
            }
        }
        Ok(())
    }

    fn bytes_written(&self) -> u64 {
        self.sinks.iter().map(|s| s.bytes_written).sum()
    }
}

/// Per-CPU ring-full counters, read as deltas since the last reading.
struct LossCounters {
    last: Vec<Vec<u64>>,
    last_decode_errors: u64,
}

impl LossCounters {
    fn new() -> Self {
        LossCounters {
            last: vec![Vec::new(); hs_kind::HS_KIND_MAX.0 as usize],
            last_decode_errors: 0,
        }
    }

    fn read(&mut self, map: &dyn MapCore, collector: &mut Collector) -> anyhow::Result<u64> {
        let now = clock::utc_now_ns();
        let mut lost_now = 0;
        for kind in 1..hs_kind::HS_KIND_MAX.0 {
            let per_cpu = map
                .lookup_percpu(&kind.to_ne_bytes(), MapFlags::ANY)
                .context("reading BPF loss counters")?
                .unwrap_or_default();
            let last = &mut self.last[kind as usize];
            last.resize(per_cpu.len(), 0);
            for (cpu, value) in per_cpu.iter().enumerate() {
                let total = value
                    .get(..8)
                    .map(|b| u64::from_ne_bytes(b.try_into().unwrap()))
                    .unwrap_or(0);
                let delta = total.saturating_sub(last[cpu]);
                last[cpu] = total;
                if delta > 0 {
                    let source = format!("ring_full:{}", table_of_kind(kind));
                    collector.rows.loss.push(now, Some(cpu as i32), &source, delta as i64);
                    lost_now += delta;
                }
            }
        }
        let decode_delta = collector.decode_errors - self.last_decode_errors;
        if decode_delta > 0 {
            self.last_decode_errors = collector.decode_errors;
            collector.rows.loss.push(now, None, "decode_error:unknown", decode_delta as i64);
            lost_now += decode_delta;
        }
        Ok(lost_now)
    }
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
        ..Default::default()
    }
}

/// Records until the duration ends or a signal arrives.
pub fn record(config: &Config) -> anyhow::Result<Summary> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    bpf::check_privileges(&status)?;
    let catalog = TracepointCatalog::load()?;
    let procfs = Procfs::default();
    let host = procfs.host_info();
    let mut recording = Recording::open(&config.output, &host.host, session(config, &host))?;
    let stamp = FileStamp {
        host: host.host.clone(),
        boot_id: host.boot_id.clone(),
        recorder_version: env!("CARGO_PKG_VERSION").into(),
    };

    let mut object = MaybeUninit::uninit();
    let probes = bpf::load_sched(&mut object, config.ring_size, &catalog)?;
    recording.session_mut().skipped_probes = probes.skipped.clone();

    let offset = clock::measure_offset();
    recording.session_mut().clock_offsets.push(offset);
    recording.save()?;
    let sinks = hindsight_schemas::TABLES
        .iter()
        .map(|t| TableSink::new(&recording.dir, t, &stamp))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut seq = 0u64;
    let collector = Rc::new(RefCell::new(Collector {
        decoder: Decoder::new(offset),
        rows: AllRows::default(),
        sinks,
        events: 0,
        file_name: layout::chunk_file_name(clock::utc_now_ns(), seq),
        files: 0,
        failure: None,
        decode_errors: 0,
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

    let mut builder = RingBufferBuilder::new();
    let callback_collector = Rc::clone(&collector);
    builder
        .add(&probes.skel.maps.sched_events, move |data: &[u8]| {
            callback_collector.borrow_mut().on_record(data)
        })
        .context("setting up the ring buffer")?;
    let ring = builder.build().context("setting up the ring buffer")?;

    install_signal_handlers();
    eprintln!(
        "hindsight-record: recording {} to {} ({})",
        config.events.join(","),
        config.output.display(),
        match config.duration {
            Some(d) => format!("for {}s; Ctrl-C stops early", d.as_secs_f64()),
            None => "until Ctrl-C or SIGTERM".into(),
        }
    );

    let started = Instant::now();
    let deadline = config.duration.map(|d| started + d);
    let mut chunk_deadline = started + config.chunk;
    let mut next_loss_read = started + LOSS_INTERVAL;
    let mut losses = LossCounters::new();
    let mut lost_total = 0u64;
    let mut failure: Option<anyhow::Error> = None;

    loop {
        // The BPF side wakes us only when the ring fills up; otherwise the
        // poll times out and we drain what accumulated.
        let mut polled = ring.poll_raw(POLL_INTERVAL);
        if polled >= 0 || polled == -libc::EINTR {
            polled = ring.consume_raw();
        }
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
        if now >= next_loss_read {
            next_loss_read = now + LOSS_INTERVAL;
            match losses.read(&probes.skel.maps.sched_lost, &mut c) {
                Ok(n) => lost_total += n,
                Err(e) => eprintln!("hindsight-record: warning: {e:#}"),
            }
        }
        if now >= chunk_deadline || ROTATE.swap(false, Ordering::Relaxed) {
            chunk_deadline = now + config.chunk;
            if let Err(e) = c.close_chunk() {
                failure = Some(e);
                break;
            }
            let offset = clock::measure_offset();
            c.decoder.offset = offset;
            seq += 1;
            c.file_name = layout::chunk_file_name(clock::utc_now_ns(), seq);
            drop(c);
            recording.session_mut().clock_offsets.push(offset);
            if let Err(e) = recording.save() {
                failure = Some(e);
                break;
            }
        }
    }

    // Drain what the kernel already handed over, then close everything: a
    // stop never leaves a half-written file behind.
    if failure.is_none() {
        let _ = ring.consume_raw();
    }
    drop(ring);
    let mut c = collector.borrow_mut();
    if let Ok(n) = losses.read(&probes.skel.maps.sched_lost, &mut c) {
        lost_total += n;
    }
    let closed = c.close_chunk();
    recording.session_mut().stopped = Some(rfc3339(clock::utc_now_ns()));
    let saved = recording.save();
    if let Some(e) = failure {
        return Err(e);
    }
    closed?;
    saved?;
    Ok(Summary {
        rows: c
            .sinks
            .iter()
            .map(|s| (s.table().name, s.rows_written))
            .collect(),
        bytes: c.bytes_written(),
        lost: lost_total,
        files: c.files,
    })
}
