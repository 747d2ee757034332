//! What journaling a table's rows costs by itself, per row: every batch
//! the recorder receives is appended to its open chunk's journal as Arrow
//! IPC before it is written as Parquet (see `hindsight_schemas::journal`),
//! and the profile of a context-switch storm put a fifth of the writer
//! thread's CPU in compressing those entries (issue 17, BENCHMARKS.md).
//!
//! Reads a table's rows from a recording's chunks in batches of 16 Ki rows
//! (the recorder's `BATCH_ROWS`), encodes each as one journal entry with
//! the journal's compression and with the alternatives, in interleaved
//! rounds, and prints the bytes and the median wall time per row of each.
//! Single-threaded: on an otherwise idle CPU the wall time is the CPU time.
//!
//!     cargo run --release -p hindsight-schemas --example journal_cost -- \
//!         sched_switch REC/sched_switch/*.parquet

use std::time::Instant;

use arrow::ipc::{writer::IpcWriteOptions, writer::StreamWriter, CompressionType};
use arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

const ROUNDS: usize = 5;
/// The recorder's largest batch (`BATCH_ROWS` in its `recorder.rs`).
const BATCH_ROWS: usize = 16 * 1024;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: journal_cost TABLE FILE.parquet...");
        std::process::exit(2);
    }
    let mut batches = Vec::new();
    for path in &args[2..] {
        let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .and_then(|b| b.with_batch_size(BATCH_ROWS).build())
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        batches.extend(reader.map(|b| b.expect("a batch")));
    }
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let metadata = Default::default();
    let journal = |batch: &RecordBatch| {
        hindsight_schemas::journal::encode_entry(batch, &metadata).expect("an entry")
    };
    let with = |compression: Option<CompressionType>, level: Option<i32>| {
        move |batch: &RecordBatch| {
            let options = IpcWriteOptions::default()
                .try_with_compression(compression)
                .and_then(|o| o.try_with_compression_level(level))
                .expect("options");
            let mut writer =
                StreamWriter::try_new_with_options(Vec::new(), &batch.schema(), options)
                    .expect("a writer");
            writer.write(batch).expect("written");
            writer.finish().expect("finished");
            writer.into_inner().expect("the bytes")
        }
    };
    type Encode<'a> = Box<dyn Fn(&RecordBatch) -> Vec<u8> + 'a>;
    let configs: Vec<(String, Encode)> = vec![
        ("the journal's".into(), Box::new(journal)),
        (
            "zstd level 1".into(),
            Box::new(with(Some(CompressionType::ZSTD), Some(1))),
        ),
        (
            "zstd level -1".into(),
            Box::new(with(Some(CompressionType::ZSTD), Some(-1))),
        ),
        (
            "zstd level -5".into(),
            Box::new(with(Some(CompressionType::ZSTD), Some(-5))),
        ),
        (
            "lz4 frame".into(),
            Box::new(with(Some(CompressionType::LZ4_FRAME), None)),
        ),
        ("uncompressed".into(), Box::new(with(None, None))),
    ];
    let mut results = vec![(0usize, Vec::new()); configs.len()];
    for _ in 0..ROUNDS {
        for ((_, encode), (bytes, times)) in configs.iter().zip(&mut results) {
            let start = Instant::now();
            *bytes = batches.iter().map(|b| encode(b).len()).sum();
            times.push(start.elapsed().as_nanos() as f64 / rows as f64);
        }
    }
    println!(
        "| {} ({rows} rows) | bytes per row | ns per row (median of {ROUNDS}) |",
        args[1]
    );
    println!("|---|---:|---:|");
    for ((name, _), (bytes, times)) in configs.iter().zip(&mut results) {
        times.sort_by(f64::total_cmp);
        println!(
            "| {name} | {:.2} | {:.1} |",
            *bytes as f64 / rows as f64,
            times[ROUNDS / 2]
        );
    }
}
