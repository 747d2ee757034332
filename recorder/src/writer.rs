//! The writer thread: it owns every table's sink and does the expensive
//! part (sorting, Parquet encoding, zstd, fsync), so the thread draining
//! the ring buffers never waits on it. Under a context-switch storm an
//! 8 MiB ring holds ~150 ms of events; encoding a batch inline stalled the
//! drain longer than that and the kernel dropped events.
//!
//! The channel between the two is bounded ([`QUEUE`] batches): when the
//! disk or the encoder cannot keep up, the drain blocks, the ring fills and
//! the kernel counts the drops — memory stays bounded either way.

use std::{
    path::Path,
    sync::{
        atomic::{AtomicU64, Ordering},
        mpsc::{sync_channel, Receiver, SyncSender},
        Arc,
    },
    thread::JoinHandle,
};

use anyhow::{anyhow, Context};
use arrow::record_batch::RecordBatch;
use hindsight_schemas::{Table, TABLES};

use crate::sink::{FileStamp, TableSink};

/// Batches that may wait for the writer; each is at most `BATCH_ROWS` rows.
const QUEUE: usize = 2;

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
#[derive(Debug, Default)]
pub struct WriterStats {
    pub bytes_written: AtomicU64,
    pub files: AtomicU64,
}

/// The recording thread's handle on the writer thread.
pub struct Writer {
    jobs: Option<SyncSender<Job>>,
    thread: Option<JoinHandle<anyhow::Result<RowsWritten>>>,
    pub stats: Arc<WriterStats>,
}

impl Writer {
    /// Creates a sink per table under `recording` and starts the thread.
    pub fn start(recording: &Path, stamp: &FileStamp) -> anyhow::Result<Writer> {
        let sinks = TABLES
            .iter()
            .map(|t| TableSink::new(recording, t, stamp))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let (jobs, queue) = sync_channel(QUEUE);
        let stats = Arc::new(WriterStats::default());
        let thread_stats = Arc::clone(&stats);
        let thread = std::thread::Builder::new()
            .name("hindsight-writer".into())
            .spawn(move || write_jobs(sinks, queue, &thread_stats))
            .context("starting the writer thread")?;
        Ok(Writer {
            jobs: Some(jobs),
            thread: Some(thread),
            stats,
        })
    }

    fn send(&mut self, job: Job) -> anyhow::Result<()> {
        let sent = self
            .jobs
            .as_ref()
            .map(|jobs| jobs.send(job).is_ok())
            .unwrap_or(false);
        if sent {
            Ok(())
        } else {
            // The writer stopped: its error says why.
            Err(self
                .join()
                .err()
                .unwrap_or_else(|| anyhow!("the writer thread stopped")))
        }
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

    /// Closes every open chunk once everything queued before is written.
    pub fn close_chunk(&mut self) -> anyhow::Result<()> {
        let (done, answer) = sync_channel(1);
        self.send(Job::Close { done })?;
        match answer.recv() {
            Ok(result) => result,
            Err(_) => Err(self
                .join()
                .err()
                .unwrap_or_else(|| anyhow!("the writer thread stopped"))),
        }
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

fn write_jobs(
    mut sinks: Vec<TableSink>,
    queue: Receiver<Job>,
    stats: &WriterStats,
) -> anyhow::Result<RowsWritten> {
    for job in queue {
        match job {
            Job::Write {
                table,
                batch,
                file_name,
            } => {
                let sink = sinks
                    .iter_mut()
                    .find(|s| s.table().name == table.name)
                    .expect("a sink per table");
                sink.write(&batch, &file_name)?;
            }
            Job::Close { done } => {
                let mut result = Ok(());
                for sink in &mut sinks {
                    match sink.close_chunk() {
                        Ok(Some(_)) => {
                            stats.files.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(None) => {}
                        Err(e) => {
                            result = Err(e);
                            break;
                        }
                    }
                }
                let total: u64 = sinks.iter().map(|s| s.bytes_written).sum();
                stats.bytes_written.store(total, Ordering::Relaxed);
                let failed = result.is_err();
                let _ = done.send(result);
                if failed {
                    anyhow::bail!("closing a chunk failed");
                }
            }
        }
    }
    Ok(sinks
        .iter()
        .map(|s| (s.table().name, s.rows_written))
        .collect())
}
