//! The writer thread: it owns every table's sink and does the expensive
//! part (journaling, sorting, Parquet encoding, zstd, fsync), so the thread
//! draining the ring buffers never waits on it. Under a context-switch
//! storm the ring (4 MiB by default) holds ~75 ms of events; encoding a
//! batch inline stalled the drain longer than that and the kernel dropped
//! events.
//!
//! The channel between the two is bounded ([`QUEUE`] batches): when the
//! disk or the encoder cannot keep up, the drain blocks, the ring fills and
//! the kernel counts the drops — memory stays bounded either way. How long
//! the drain was held up so is counted ([`Writer::waited`]), so a loss in
//! the recording can be told apart from one the writer caused.
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
//! that could not be closed are closed from their journals later.

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering},
        mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError},
        Arc,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{anyhow, Context};
use arrow::record_batch::RecordBatch;
use hindsight_schemas::{Table, TABLES};

use crate::private_dir::PrivateDir;
use crate::sink::{is_disk_full, Closed, FileStamp, TableSink, Written};

/// Batches that may wait for the writer; each is at most `BATCH_ROWS` rows.
const QUEUE: usize = 2;

/// How often a lasting disk-full outage is logged again.
const OUTAGE_LOG_INTERVAL: Duration = Duration::from_secs(60);

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
        let (jobs, queue) = sync_channel(QUEUE);
        let stats = Arc::new(WriterStats::default());
        let mut thread = WriterThread {
            sinks,
            recording: recording.path().to_path_buf(),
            stats: Arc::clone(&stats),
            sync_every,
            deferred: Vec::new(),
            outage: None,
        };
        let thread = std::thread::Builder::new()
            .name("hindsight-writer".into())
            .spawn(move || thread.run(queue))
            .context("starting the writer thread")?;
        Ok(Writer {
            jobs: Some(jobs),
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
    sinks: Vec<TableSink>,
    recording: PathBuf,
    stats: Arc<WriterStats>,
    sync_every: Duration,
    /// Journals of chunks whose close failed on a full disk: closed from
    /// their journals as soon as a close succeeds again.
    deferred: Vec<(&'static Table, String)>,
    outage: Option<Outage>,
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
                }) => self.write(table, &batch, &file_name)?,
                Ok(Job::Close { done }) => {
                    let result = self.close_chunks();
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
        match self.sinks[index].write(batch, file_name)? {
            Written::Stored => self.space_is_back(),
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
