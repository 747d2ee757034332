//! The writer thread: it owns every table's sink and does the expensive
//! part (journaling, sorting, Parquet encoding, zstd, fsync), so the thread
//! draining the ring buffers never waits on it. Under a context-switch
//! storm the ring (4 MiB by default) holds ~75 ms of events; encoding a
//! batch inline stalled the drain longer than that and the kernel dropped
//! events.
//!
//! The queue between the two is bounded by the rows it holds
//! ([`QUEUE_ROWS`], two full batches), not by its batches: every second's
//! flush hands over a small batch of each table, and a queue of two batches
//! held the drain up behind them while the writer was busy (in a soak, a
//! flush waited over 10 ms every 5-10 s, up to 56 ms; BENCHMARKS.md, "The
//! drain's priority"), long enough for a burst to fill one CPU's ring. When
//! the disk or the encoder cannot keep up, the drain blocks, the ring fills
//! and the kernel counts the drops — memory stays bounded either way. How
//! long the drain was held up so is counted ([`Writer::waited`]), so a loss
//! in the recording can be told apart from one the writer caused.
//!
//! Closing a chunk (the last row group, footer, fsync and rename of every
//! table's file, and fsync of every table's directory) is two fsyncs per
//! table: 20-40 ms on this project's idle test disk. But an fsync waits
//! for what else the filesystem must write first (one took 130 ms here
//! beside a 6 GB write), and on a slower disk kept busy by other programs
//! that can outlast what a ring holds.
//! So the drain does not wait for it: it asks for the close
//! ([`Writer::begin_close`]), goes on, and picks up the answer
//! ([`Writer::poll_close`]) when it comes.
//!
//! The thread also keeps the journals durable: every `sync_every` it fsyncs
//! them (and notices an output directory that was removed). A full disk
//! does not stop it: batches that cannot be written are counted per table
//! in [`WriterStats`] (the recording loop turns them into `loss` rows once
//! writing works again), the outage is logged once a minute, and chunks
//! that could not be closed are closed from their journals later. `loss`
//! batches are the exception: they say what else was lost (one
//! `disk_full:` row carries a whole outage), so one the disk refuses is
//! held ([`HeldLosses`]) and written with the next write that succeeds.

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering},
        mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError},
        Arc, Condvar, Mutex,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{anyhow, Context};
use arrow::{
    array::{Array, AsArray},
    datatypes::{Int32Type, Int64Type, TimestampNanosecondType},
    record_batch::RecordBatch,
};
use hindsight_schemas::{tables::LOSS, Table, TABLES};

use crate::private_dir::PrivateDir;
use crate::rows::LossRows;
use crate::sink::{is_disk_full, Closed, FileStamp, TableSink, Written};

/// Rows that may wait for the writer, in all tables' batches together: the
/// memory two full batches took when the queue counted batches. A batch
/// larger than this (a snapshot of more processes) goes alone.
const QUEUE_ROWS: usize = 2 * crate::recorder::BATCH_ROWS;

/// Jobs that may wait for the writer: a flush of every table and a close
/// fit without waiting, however few rows each holds.
const QUEUE_JOBS: usize = 2 * TABLES.len() + 1;

/// The rows queued for the writer thread and not yet written, and whether
/// the thread is gone (then nobody waits for room).
#[derive(Default)]
struct QueuedRows {
    state: Mutex<(usize, bool)>,
    room: Condvar,
}

impl QueuedRows {
    /// Counts `rows` more as queued once they fit under [`QUEUE_ROWS`] (or
    /// nothing else is queued), waiting for the writer until then.
    fn admit(&self, rows: usize) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while !state.1 && state.0 > 0 && state.0 + rows > QUEUE_ROWS {
            state = self.room.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.0 += rows;
    }

    /// The writer is done with `rows` of them.
    fn release(&self, rows: usize) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.0 = state.0.saturating_sub(rows);
        self.room.notify_all();
    }

    /// The writer thread stopped: nobody waits for room any more.
    fn close(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        self.room.notify_all();
    }
}

/// How often a lasting disk-full outage is logged again.
const OUTAGE_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// `loss` rows held through a disk-full outage before they are folded into
/// one per CPU and source (about 2 MiB).
const HELD_LOSS_ROWS: usize = 65_536;

enum Job {
    Write {
        table: &'static Table,
        batch: RecordBatch,
        file_name: String,
    },
    /// Close every open chunk, then answer.
    Close {
        done: SyncSender<anyhow::Result<()>>,
    },
}

/// Rows written per table, what the writer thread returns when it stops.
pub type RowsWritten = Vec<(&'static str, u64)>;

/// What the writer has put on disk, readable from the recording thread.
#[derive(Debug)]
pub struct WriterStats {
    pub bytes_written: AtomicU64,
    pub files: AtomicU64,
    /// The most disk the last closed chunk took while open (journals and
    /// Parquet files of every table): the room retention keeps for the next.
    pub last_chunk_peak_bytes: AtomicU64,
    /// What the open chunk's files (and journals a full disk kept from
    /// closing) take on disk so far, after the last job: retention's measure.
    pub open_chunk_bytes: AtomicU64,
    /// Rows not written for a full disk, per table (index of `TABLES`),
    /// not yet reported in `loss`: the recording loop takes them.
    pub dropped: Vec<AtomicU64>,
    /// Every row ever dropped for a full disk, for the final summary.
    pub dropped_total: AtomicU64,
    /// Whether the last write failed for a full disk.
    pub disk_full: AtomicBool,
    /// UTC ns when the current (or last) outage began.
    pub disk_full_since_ns: AtomicI64,
}

impl Default for WriterStats {
    fn default() -> Self {
        WriterStats {
            bytes_written: AtomicU64::new(0),
            files: AtomicU64::new(0),
            last_chunk_peak_bytes: AtomicU64::new(0),
            open_chunk_bytes: AtomicU64::new(0),
            dropped: TABLES.iter().map(|_| AtomicU64::new(0)).collect(),
            dropped_total: AtomicU64::new(0),
            disk_full: AtomicBool::new(false),
            disk_full_since_ns: AtomicI64::new(0),
        }
    }
}

/// The recording thread's handle on the writer thread.
pub struct Writer {
    jobs: Option<SyncSender<Job>>,
    queued: Arc<QueuedRows>,
    thread: Option<JoinHandle<anyhow::Result<RowsWritten>>>,
    pub stats: Arc<WriterStats>,
    /// The answer to the chunk close under way, if one is.
    closing: Option<Receiver<anyhow::Result<()>>>,
    /// How long the recording thread has been blocked on the writer.
    waited: Duration,
}

impl Writer {
    /// Creates a sink per table under `recording` and starts the thread,
    /// which fsyncs the journals every `sync_every`.
    pub fn start(
        recording: &PrivateDir,
        stamp: &FileStamp,
        sync_every: Duration,
    ) -> anyhow::Result<Writer> {
        let sinks = TABLES
            .iter()
            .map(|t| TableSink::new(recording, t, stamp))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let (jobs, queue) = sync_channel(QUEUE_JOBS);
        let queued = Arc::new(QueuedRows::default());
        let stats = Arc::new(WriterStats::default());
        let mut thread = WriterThread {
            queued: Arc::clone(&queued),
            sinks,
            recording: recording.path().to_path_buf(),
            stats: Arc::clone(&stats),
            sync_every,
            deferred: Vec::new(),
            outage: None,
            held_losses: HeldLosses::default(),
            chunk_name: None,
        };
        let thread = std::thread::Builder::new()
            .name("hindsight-writer".into())
            .spawn(move || thread.run(queue))
            .context("starting the writer thread")?;
        Ok(Writer {
            jobs: Some(jobs),
            queued,
            thread: Some(thread),
            stats,
            closing: None,
            waited: Duration::ZERO,
        })
    }

    /// How long, in all, the recording thread was held up by the writer: a
    /// full queue, or a close it had to wait for. Meanwhile nobody drained
    /// the rings.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    fn send(&mut self, job: Job) -> anyhow::Result<()> {
        let Some(jobs) = self.jobs.as_ref() else {
            return Err(self.stopped());
        };
        if let Job::Write { batch, .. } = &job {
            let blocked = Instant::now();
            self.queued.admit(batch.num_rows());
            self.waited += blocked.elapsed();
        }
        let sent = match jobs.try_send(job) {
            Ok(()) => true,
            Err(TrySendError::Disconnected(_)) => false,
            Err(TrySendError::Full(job)) => {
                let blocked = Instant::now();
                let sent = jobs.send(job).is_ok();
                self.waited += blocked.elapsed();
                sent
            }
        };
        if sent {
            Ok(())
        } else {
            Err(self.stopped())
        }
    }

    /// Why the writer thread is gone: its own error, if it left one.
    fn stopped(&mut self) -> anyhow::Error {
        self.join()
            .err()
            .unwrap_or_else(|| anyhow!("the writer thread stopped"))
    }

    /// Queues a batch for the open chunk of its table (named `file_name`).
    pub fn write(
        &mut self,
        table: &'static Table,
        batch: RecordBatch,
        file_name: &str,
    ) -> anyhow::Result<()> {
        self.send(Job::Write {
            table,
            batch,
            file_name: file_name.to_string(),
        })
    }

    /// Asks the writer to close every open chunk once everything queued
    /// before is written, without waiting for it; batches written after
    /// this go to the next chunk. A close still under way is waited for
    /// first: two would only queue behind each other.
    pub fn begin_close(&mut self) -> anyhow::Result<()> {
        if let Some(result) = self.finish_close() {
            result?;
        }
        let (done, answer) = sync_channel(1);
        self.send(Job::Close { done })?;
        self.closing = Some(answer);
        Ok(())
    }

    /// The outcome of the close under way, once it is over; `None` while
    /// it runs or when there is none.
    pub fn poll_close(&mut self) -> Option<anyhow::Result<()>> {
        let answer = self.closing.as_ref()?.try_recv();
        match answer {
            Ok(result) => {
                self.closing = None;
                Some(result)
            }
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => {
                self.closing = None;
                Some(Err(self.stopped()))
            }
        }
    }

    /// Waits for the close under way, if there is one, and returns its outcome.
    pub fn finish_close(&mut self) -> Option<anyhow::Result<()>> {
        let answer = self.closing.take()?;
        let blocked = Instant::now();
        let result = answer.recv();
        self.waited += blocked.elapsed();
        Some(result.unwrap_or_else(|_| Err(self.stopped())))
    }

    /// Closes every open chunk and waits until it is done.
    pub fn close_chunk(&mut self) -> anyhow::Result<()> {
        self.begin_close()?;
        self.finish_close().unwrap_or(Ok(()))
    }

    /// Stops the thread; returns rows written per table, or its first error.
    pub fn join(&mut self) -> anyhow::Result<RowsWritten> {
        self.jobs.take();
        match self.thread.take() {
            Some(thread) => thread
                .join()
                .map_err(|_| anyhow!("the writer thread panicked"))?,
            None => Err(anyhow!("the writer thread already stopped")),
        }
    }
}

/// A disk-full period: when it began and what it cost so far.
struct Outage {
    since: Instant,
    dropped: u64,
    last_logged: Instant,
}

struct WriterThread {
    /// Shared with [`Writer`]: released as each batch is written.
    queued: Arc<QueuedRows>,
    sinks: Vec<TableSink>,
    recording: PathBuf,
    stats: Arc<WriterStats>,
    sync_every: Duration,
    /// Journals of chunks whose close failed on a full disk: closed from
    /// their journals as soon as a close succeeds again.
    deferred: Vec<(&'static Table, String)>,
    outage: Option<Outage>,
    held_losses: HeldLosses,
    /// The file name of the chunk being written, where held losses go.
    chunk_name: Option<String>,
}

impl Drop for WriterThread {
    /// However the thread ends (an error, a panic), a drain waiting for
    /// room in the queue is let go, to find the thread gone.
    fn drop(&mut self) {
        self.queued.close();
    }
}

/// `loss` rows a full disk kept out, bounded: past [`HELD_LOSS_ROWS`] they
/// are folded into one row per CPU and source (latest time, summed count),
/// which keeps every lost event counted.
#[derive(Default)]
struct HeldLosses {
    batches: Vec<RecordBatch>,
    rows: usize,
}

impl HeldLosses {
    fn hold(&mut self, batch: RecordBatch) {
        self.rows += batch.num_rows();
        self.batches.push(batch);
        if self.rows > HELD_LOSS_ROWS {
            self.fold();
        }
    }

    fn fold(&mut self) {
        let mut totals = std::collections::BTreeMap::<(Option<i32>, String), (i64, i64)>::new();
        for batch in self.batches.drain(..) {
            let column = |name| batch.column_by_name(name).expect("a loss batch");
            let ts = column("ts").as_primitive::<TimestampNanosecondType>();
            let cpu = column("cpu").as_primitive::<Int32Type>();
            let source = column("source").as_dictionary::<Int32Type>();
            let names = source.values().as_string::<i32>();
            let lost = column("lost").as_primitive::<Int64Type>();
            for row in 0..batch.num_rows() {
                let name = names.value(source.keys().value(row) as usize);
                let cpu = cpu.is_valid(row).then(|| cpu.value(row));
                let total = totals
                    .entry((cpu, name.to_string()))
                    .or_insert((i64::MIN, 0));
                total.0 = total.0.max(ts.value(row));
                total.1 += lost.value(row);
            }
        }
        let mut rows = LossRows::new();
        for ((cpu, source), (ts, lost)) in totals {
            rows.push(ts, cpu, &source, lost);
        }
        self.rows = rows.len();
        self.batches.push(rows.finish());
    }
}

impl WriterThread {
    fn run(&mut self, queue: Receiver<Job>) -> anyhow::Result<RowsWritten> {
        let mut result = self.serve(queue);
        if let Err(e) = result {
            result = Err(match std::fs::metadata(&self.recording) {
                // Say the cause, not the file that happened to fail first.
                Err(gone) => anyhow!(
                    "{}: the output directory is gone ({gone}); stopping",
                    self.recording.display()
                ),
                Ok(_) => e,
            });
            // Leave the journals as durable as the disk allows: they are
            // what the next start recovers.
            for sink in &mut self.sinks {
                let _ = sink.sync();
            }
        }
        result?;
        if self.held_losses.rows > 0 {
            eprintln!(
                "hindsight-record: {}: the disk is still full: {} loss rows could not be written \
                 (the summary counts what they held)",
                self.recording.display(),
                self.held_losses.rows
            );
        }
        Ok(self
            .sinks
            .iter()
            .map(|s| (s.table().name, s.rows_written))
            .collect())
    }

    fn serve(&mut self, queue: Receiver<Job>) -> anyhow::Result<()> {
        let mut last_sync = Instant::now();
        loop {
            let until_sync = self.sync_every.saturating_sub(last_sync.elapsed());
            match queue.recv_timeout(until_sync) {
                Ok(Job::Write {
                    table,
                    batch,
                    file_name,
                }) => {
                    self.write(table, &batch, &file_name)?;
                    self.queued.release(batch.num_rows());
                    self.count_open_bytes();
                }
                Ok(Job::Close { done }) => {
                    let result = self.close_chunks();
                    // Before the answer: whoever waited reads it next.
                    self.count_open_bytes();
                    let failed = result.is_err();
                    let _ = done.send(result);
                    if failed {
                        anyhow::bail!("closing a chunk failed");
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
            if last_sync.elapsed() >= self.sync_every {
                last_sync = Instant::now();
                self.sync()?;
            }
        }
    }

    fn write(&mut self, table: &Table, batch: &RecordBatch, file_name: &str) -> anyhow::Result<()> {
        let index = TABLES
            .iter()
            .position(|t| t.name == table.name)
            .expect("a sink per table");
        if self.chunk_name.as_deref() != Some(file_name) {
            self.chunk_name = Some(file_name.to_string());
        }
        match self.sinks[index].write(batch, file_name)? {
            Written::Stored => {
                self.space_is_back();
                self.write_held_losses()?;
            }
            Written::DiskFull { .. } if table.name == LOSS.name => {
                self.held_losses.hold(batch.clone());
                self.disk_full(0);
            }
            Written::DiskFull { dropped } => {
                self.stats.dropped[index].fetch_add(dropped, Ordering::Relaxed);
                self.stats
                    .dropped_total
                    .fetch_add(dropped, Ordering::Relaxed);
                self.disk_full(dropped);
            }
        }
        Ok(())
    }

    /// Writes the `loss` rows a full disk kept out, as far as it now can.
    fn write_held_losses(&mut self) -> anyhow::Result<()> {
        let Some(file_name) = self.chunk_name.as_deref() else {
            return Ok(());
        };
        if self.held_losses.batches.is_empty() {
            return Ok(());
        }
        let sink = self
            .sinks
            .iter_mut()
            .find(|s| s.table().name == LOSS.name)
            .expect("a sink per table");
        let mut written = 0;
        for batch in &self.held_losses.batches {
            match sink.write(batch, file_name)? {
                Written::Stored => {
                    written += 1;
                    self.held_losses.rows -= batch.num_rows();
                }
                Written::DiskFull { .. } => break,
            }
        }
        self.held_losses.batches.drain(..written);
        if !self.held_losses.batches.is_empty() {
            self.disk_full(0);
        }
        Ok(())
    }

    fn disk_full(&mut self, dropped: u64) {
        let now = Instant::now();
        let outage = match &mut self.outage {
            Some(outage) => outage,
            None => {
                self.stats
                    .disk_full_since_ns
                    .store(crate::clock::utc_now_ns(), Ordering::Relaxed);
                self.stats.disk_full.store(true, Ordering::Relaxed);
                eprintln!(
                    "hindsight-record: {}: disk full: not recording new data until there is room \
                     (closed files stay complete; dropped rows are counted in the loss table)",
                    self.recording.display()
                );
                self.outage.insert(Outage {
                    since: now,
                    dropped: 0,
                    last_logged: now,
                })
            }
        };
        outage.dropped += dropped;
        if now.duration_since(outage.last_logged) >= OUTAGE_LOG_INTERVAL {
            outage.last_logged = now;
            eprintln!(
                "hindsight-record: {}: disk still full after {}s: {} rows not written so far",
                self.recording.display(),
                now.duration_since(outage.since).as_secs(),
                outage.dropped
            );
        }
    }

    fn space_is_back(&mut self) {
        if let Some(outage) = self.outage.take() {
            self.stats.disk_full.store(false, Ordering::Relaxed);
            eprintln!(
                "hindsight-record: {}: writing again after {}s of full disk; {} rows were not \
                 written (see the loss table)",
                self.recording.display(),
                outage.since.elapsed().as_secs(),
                outage.dropped
            );
        }
    }

    /// Publishes what the open chunk's files take (see `open_chunk_bytes`).
    fn count_open_bytes(&self) {
        let deferred: u64 = self
            .deferred
            .iter()
            .map(|(table, journal)| {
                let path = self.recording.join(table.name).join(journal);
                std::fs::metadata(path).map_or(0, |m| m.len())
            })
            .sum();
        let open: u64 = self.sinks.iter().map(|s| s.open_bytes()).sum();
        self.stats
            .open_chunk_bytes
            .store(open + deferred, Ordering::Relaxed);
    }

    /// fsyncs every open journal; fails if the recording directory is gone.
    fn sync(&mut self) -> anyhow::Result<()> {
        if let Err(e) = std::fs::metadata(&self.recording) {
            anyhow::bail!(
                "{}: the output directory is gone ({e}); stopping",
                self.recording.display()
            );
        }
        let mut full = false;
        for sink in &mut self.sinks {
            match sink.sync() {
                Ok(()) => {}
                Err(e) if is_disk_full(&e) => full = true,
                Err(e) => return Err(e),
            }
        }
        if full {
            self.disk_full(0);
        }
        Ok(())
    }

    fn close_chunks(&mut self) -> anyhow::Result<()> {
        self.write_held_losses()?;
        let mut peak_bytes = 0;
        for sink in &mut self.sinks {
            match sink.close_chunk()? {
                Closed::File { peak_bytes: p, .. } => {
                    self.stats.files.fetch_add(1, Ordering::Relaxed);
                    peak_bytes += p;
                }
                Closed::Deferred(journal) => self.deferred.push((sink.table(), journal)),
                Closed::Nothing => {}
            }
        }
        // Chunks left open by a full disk, closed now if there is room.
        let mut still_deferred = Vec::new();
        for (table, journal) in std::mem::take(&mut self.deferred) {
            let sink = self
                .sinks
                .iter_mut()
                .find(|s| s.table().name == table.name)
                .expect("a sink per table");
            match sink.recover(&journal) {
                Ok(recovered) => {
                    if recovered.is_some() {
                        self.stats.files.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(e) if is_disk_full(&e) => still_deferred.push((table, journal)),
                Err(e) => return Err(e),
            }
        }
        self.deferred = still_deferred;
        // The next chunk's name comes with its first write: a closed
        // chunk's is never reused.
        self.chunk_name = None;
        self.stats
            .last_chunk_peak_bytes
            .store(peak_bytes, Ordering::Relaxed);
        let total: u64 = self.sinks.iter().map(|s| s.bytes_written).sum();
        self.stats.bytes_written.store(total, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use hindsight_schemas::tables::SCHED_SWITCH;

    use super::*;
    use crate::sink::tests::{cpu_and_tid, stamp, switches};

    fn losses(rows: &[(i64, Option<i32>, &str, i64)]) -> RecordBatch {
        let mut batch = LossRows::new();
        for &(ts, cpu, source, lost) in rows {
            batch.push(ts, cpu, source, lost);
        }
        batch.finish()
    }

    /// (cpu, source) -> (latest ts, summed lost) over every held row.
    fn held_totals(held: &HeldLosses) -> Vec<(Option<i32>, String, i64, i64)> {
        let mut copy = HeldLosses {
            batches: held.batches.clone(),
            rows: held.rows,
        };
        copy.fold();
        let batch = &copy.batches[0];
        let ts = batch.column(0).as_primitive::<TimestampNanosecondType>();
        let cpu = batch.column(1).as_primitive::<Int32Type>();
        let source = batch.column(2).as_dictionary::<Int32Type>();
        let names = source.values().as_string::<i32>();
        let lost = batch.column(3).as_primitive::<Int64Type>();
        (0..batch.num_rows())
            .map(|r| {
                (
                    cpu.is_valid(r).then(|| cpu.value(r)),
                    names.value(source.keys().value(r) as usize).to_string(),
                    ts.value(r),
                    lost.value(r),
                )
            })
            .collect()
    }

    /// Held through a long outage, loss rows stay bounded and every lost
    /// event stays counted, each source and CPU apart.
    #[test]
    fn held_losses_fold_into_one_row_per_cpu_and_source_keeping_every_count() {
        let mut held = HeldLosses::default();
        let per_batch = 1000;
        let batches = HELD_LOSS_ROWS / per_batch + 2;
        for b in 0..batches {
            let rows: Vec<_> = (0..per_batch)
                .map(|r| {
                    let ts = (b * per_batch + r) as i64;
                    match r % 3 {
                        0 => (ts, Some(0), "ring_full:sched_switch", 2),
                        1 => (ts, Some(1), "ring_full:sched_switch", 3),
                        _ => (ts, None, "disk_full:counter", 5),
                    }
                })
                .collect();
            held.hold(losses(&rows));
        }
        assert!(held.rows <= HELD_LOSS_ROWS, "{} rows held", held.rows);
        let count =
            |residue| (0..per_batch).filter(|r| r % 3 == residue).count() as i64 * batches as i64;
        let last = (batches * per_batch) as i64;
        assert_eq!(
            held_totals(&held),
            [
                (None, "disk_full:counter".into(), last - 2, 5 * count(2)),
                (
                    Some(0),
                    "ring_full:sched_switch".into(),
                    last - 1,
                    2 * count(0)
                ),
                (
                    Some(1),
                    "ring_full:sched_switch".into(),
                    last - 3,
                    3 * count(1)
                ),
            ]
        );
    }

    /// Whether `admit(rows)` on another thread returns within `within`;
    /// the thread stays waiting (and is let go by the test) if not.
    fn admitted_within(
        queued: &Arc<QueuedRows>,
        rows: usize,
        within: Duration,
    ) -> (bool, std::sync::mpsc::Receiver<()>) {
        let (done, admitted) = std::sync::mpsc::channel();
        let queued = Arc::clone(queued);
        std::thread::spawn(move || {
            queued.admit(rows);
            let _ = done.send(());
        });
        (admitted.recv_timeout(within).is_ok(), admitted)
    }

    /// A second's flush hands the writer a small batch of every table: they
    /// queue behind a writer that is busy (an fsync) without holding the
    /// drain up, while a full batch past the rows' bound waits until the
    /// writer has written enough.
    #[test]
    fn the_queue_holds_rows_not_batches() {
        let queued = Arc::new(QueuedRows::default());
        queued.admit(crate::recorder::BATCH_ROWS);
        for _ in 0..2 * TABLES.len() {
            let (admitted, _) = admitted_within(&queued, 100, Duration::from_secs(10));
            assert!(admitted, "a small batch waited behind one full batch");
        }
        let (admitted, later) = admitted_within(
            &queued,
            crate::recorder::BATCH_ROWS,
            Duration::from_millis(200),
        );
        assert!(!admitted, "a full batch went past the rows' bound");
        queued.release(crate::recorder::BATCH_ROWS);
        assert!(
            later.recv_timeout(Duration::from_secs(10)).is_ok(),
            "the batch still waits once the writer wrote a full one"
        );
    }

    /// A batch above the whole bound (a snapshot of very many processes)
    /// goes when nothing else is queued; a writer thread that is gone lets
    /// every waiting drain go.
    #[test]
    fn an_oversized_batch_goes_alone_and_a_gone_writer_lets_waiters_go() {
        let queued = Arc::new(QueuedRows::default());
        let (admitted, _) = admitted_within(&queued, 3 * QUEUE_ROWS, Duration::from_secs(10));
        assert!(admitted, "an oversized batch waited on an empty queue");
        let (admitted, later) = admitted_within(&queued, 1, Duration::from_millis(200));
        assert!(!admitted, "a batch went past an oversized one");
        queued.close();
        assert!(later.recv_timeout(Duration::from_secs(10)).is_ok());
    }

    /// A tmpfs of a few pages, filled by `filler` until there is no room.
    struct TinyDisk {
        dir: tempfile::TempDir,
    }

    impl TinyDisk {
        fn mount() -> TinyDisk {
            let dir = tempfile::tempdir().unwrap();
            let status = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(status.success(), "mount tmpfs (tests run as root)");
            TinyDisk { dir }
        }

        fn filler(&self) -> PathBuf {
            self.dir.path().join("filler")
        }

        fn fill(&self) {
            use std::io::Write;
            let mut file = std::fs::File::create(self.filler()).unwrap();
            let block = [0u8; 4096];
            while file.write_all(&block).is_ok() {}
        }
    }

    impl Drop for TinyDisk {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }

    fn wait_for(what: &str, done: impl Fn() -> bool) {
        let asked = Instant::now();
        while !done() {
            assert!(asked.elapsed() < Duration::from_secs(30), "{what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A `loss` batch the full disk refused carries a count nothing else
    /// has (here a whole earlier outage's): it is written as soon as a
    /// write succeeds again, not counted as one more row lost.
    #[test]
    fn a_loss_batch_refused_by_a_full_disk_is_written_once_there_is_room() {
        let disk = TinyDisk::mount();
        let rec = disk.dir.path().join("rec");
        let mut writer = Writer::start(
            &PrivateDir::create(&rec).unwrap(),
            &stamp(),
            Duration::from_secs(60),
        )
        .unwrap();
        disk.fill();
        let name = "a-000000.parquet";
        writer
            .write(
                &LOSS,
                losses(&[(7, None, "disk_full:sched_switch", 40_000)]),
                name,
            )
            .unwrap();
        let stats = Arc::clone(&writer.stats);
        wait_for("the writer saw the full disk", || {
            stats.disk_full.load(Ordering::Relaxed)
        });
        std::fs::remove_file(disk.filler()).unwrap();
        writer
            .write(&SCHED_SWITCH, switches(&[(1, 0)]), name)
            .unwrap();
        writer.close_chunk().unwrap();
        writer.join().unwrap();

        assert_eq!(stats.dropped_total.load(Ordering::Relaxed), 0);
        let file = std::fs::File::open(rec.join("loss").join(name)).unwrap();
        let batches: Vec<_> =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
                .unwrap()
                .build()
                .unwrap()
                .map(Result::unwrap)
                .collect();
        let written = HeldLosses {
            rows: batches.iter().map(RecordBatch::num_rows).sum(),
            batches,
        };
        assert_eq!(
            held_totals(&written),
            [(None, "disk_full:sched_switch".into(), 7, 40_000)]
        );
    }

    /// Retention's measure of the open chunk is what its hidden files hold
    /// on disk, counted by the writer rather than listed: their size, with
    /// what is still buffered for them, and nothing once the chunk is closed.
    #[test]
    fn the_open_chunks_bytes_are_what_its_files_hold() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = Writer::start(
            &PrivateDir::open(dir.path()).unwrap(),
            &stamp(),
            Duration::from_secs(60),
        )
        .unwrap();
        let stats = Arc::clone(&writer.stats);
        let name = "a-000000.parquet";
        let rows: Vec<(i64, i32)> = (0..40_000).map(|i| (i, (i % 2) as i32)).collect();
        writer.write(&SCHED_SWITCH, switches(&rows), name).unwrap();
        writer
            .write(
                &LOSS,
                losses(&[(7, None, "ring_full:sched_switch", 3)]),
                name,
            )
            .unwrap();
        let hidden = || -> u64 {
            ["sched_switch", "loss"]
                .iter()
                .flat_map(|t| std::fs::read_dir(dir.path().join(t)).unwrap())
                .map(Result::unwrap)
                .filter(|f| f.file_name().to_string_lossy().starts_with('.'))
                .map(|f| f.metadata().unwrap().len())
                .sum()
        };
        wait_for("the writer counted both tables' files", || {
            stats.open_chunk_bytes.load(Ordering::Relaxed) >= hidden() && hidden() > 0
        });
        writer.close_chunk().unwrap();
        assert_eq!(
            stats.open_chunk_bytes.load(Ordering::Relaxed),
            0,
            "after the close"
        );
        writer
            .write(&SCHED_SWITCH, switches(&rows), "b-000001.parquet")
            .unwrap();
        // What the Parquet writer was given is counted, also the part still
        // in its file's 256 KiB buffer: the room it will take.
        wait_for("the next chunk's files", || {
            let counted = stats.open_chunk_bytes.load(Ordering::Relaxed);
            let on_disk = hidden();
            on_disk > 0 && (on_disk..=on_disk + (256 << 10)).contains(&counted)
        });
        writer.join().unwrap();
    }

    /// The recording thread asks for a close and goes on writing: what it
    /// writes meanwhile lands in the next chunk, the close is reported
    /// exactly once, and the closed chunk is complete before the next one is.
    #[test]
    fn batches_written_while_a_chunk_closes_go_to_the_next_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let table_dir = dir.path().join("sched_switch");
        let mut writer = Writer::start(
            &PrivateDir::open(dir.path()).unwrap(),
            &stamp(),
            Duration::from_secs(1),
        )
        .unwrap();
        let first = "a-000000.parquet";
        let second = "b-000001.parquet";
        writer
            .write(&SCHED_SWITCH, switches(&[(1, 0), (2, 1)]), first)
            .unwrap();
        writer.begin_close().unwrap();
        writer
            .write(&SCHED_SWITCH, switches(&[(3, 0)]), second)
            .unwrap();

        let asked = Instant::now();
        let outcome = loop {
            if let Some(outcome) = writer.poll_close() {
                break outcome;
            }
            assert!(
                asked.elapsed() < Duration::from_secs(30),
                "the close never ended"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        outcome.unwrap();
        assert!(writer.poll_close().is_none(), "one close, one answer");
        assert_eq!(cpu_and_tid(&table_dir.join(first)), [(0, 1), (1, 2)]);
        assert!(
            !table_dir.join(second).exists(),
            "the next chunk is still open"
        );

        writer.close_chunk().unwrap();
        assert_eq!(cpu_and_tid(&table_dir.join(second)), [(0, 3)]);
        let rows = writer.join().unwrap();
        assert!(rows.contains(&("sched_switch", 3)));
    }

    /// A second close asked for while the first still runs waits for it,
    /// rather than leaving its answer behind.
    #[test]
    fn a_close_asked_for_during_another_ends_the_first_one_first() {
        let dir = tempfile::tempdir().unwrap();
        let table_dir = dir.path().join("sched_switch");
        let mut writer = Writer::start(
            &PrivateDir::open(dir.path()).unwrap(),
            &stamp(),
            Duration::from_secs(1),
        )
        .unwrap();
        writer
            .write(&SCHED_SWITCH, switches(&[(1, 0)]), "a-000000.parquet")
            .unwrap();
        writer.begin_close().unwrap();
        writer
            .write(&SCHED_SWITCH, switches(&[(2, 0)]), "b-000001.parquet")
            .unwrap();
        writer.begin_close().unwrap();
        assert!(table_dir.join("a-000000.parquet").exists());
        assert!(writer.finish_close().unwrap().is_ok());
        assert!(table_dir.join("b-000001.parquet").exists());
        assert!(writer.finish_close().is_none());
    }
}
