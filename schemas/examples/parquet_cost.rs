//! What writing a table's rows as Parquet costs by itself, per row: the
//! floor under the recorder's CPU per event, which writes every row it
//! records this way (issue 17, BENCHMARKS.md).
//!
//! Reads a table's rows from a recording's chunks and writes them again in
//! memory, a row group per 32 Ki rows (128 Ki for `cpu_sample` and `stack`) as the
//! recorder writes them (`layout::row_group_rows`): with
//! the recorder's writer properties, and with the alternatives the profile
//! asks about (integer columns without dictionaries, all or one at a time,
//! name columns one at a time, names with min/max statistics, zstd's
//! cheapest level, one data page a column chunk), in interleaved rounds;
//! prints the bytes and the median wall time per row of each. Single-threaded: on an otherwise idle CPU the
//! wall time is the CPU time.
//!
//!     cargo run --release -p hindsight-schemas --example parquet_cost -- \
//!         sched_switch REC/sched_switch/*.parquet

use std::time::Instant;

use arrow::datatypes::DataType;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterPropertiesBuilder};
use parquet::schema::types::ColumnPath;

const ROUNDS: usize = 5;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: parquet_cost TABLE FILE.parquet...");
        std::process::exit(2);
    }
    let Some(table) = hindsight_schemas::TABLES.iter().find(|t| t.name == args[1]) else {
        eprintln!("parquet_cost: no table {}", args[1]);
        std::process::exit(2);
    };
    let mut batches = Vec::new();
    for path in &args[2..] {
        let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .and_then(|b| {
                b.with_batch_size(hindsight_schemas::layout::row_group_rows(table))
                    .build()
            })
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        batches.extend(reader.map(|b| b.expect("a batch")));
    }
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let schema = table.schema();
    let ints: Vec<String> = schema
        .fields()
        .iter()
        .filter(|f| {
            matches!(
                f.data_type(),
                DataType::Int32 | DataType::Int64 | DataType::UInt64
            )
        })
        .map(|f| f.name().clone())
        .collect();
    type Config<'a> = Box<dyn Fn(WriterPropertiesBuilder) -> WriterPropertiesBuilder + 'a>;
    let without_dictionaries = |columns: Vec<String>| -> Config {
        Box::new(move |mut b: WriterPropertiesBuilder| {
            for column in &columns {
                b = b.set_column_dictionary_enabled(ColumnPath::from(column.as_str()), false);
            }
            b
        })
    };
    let mut configs: Vec<(String, Config)> = vec![
        ("recorder's".into(), Box::new(|b| b)),
        (
            "ints without dictionaries".into(),
            without_dictionaries(ints.clone()),
        ),
        (
            "zstd level 1".into(),
            Box::new(|b: WriterPropertiesBuilder| {
                b.set_compression(Compression::ZSTD(ZstdLevel::try_new(1).expect("a level")))
            }),
        ),
        (
            "one data page a column chunk".into(),
            Box::new(|b: WriterPropertiesBuilder| b.set_data_page_row_count_limit(usize::MAX)),
        ),
    ];
    let names: Vec<String> = schema
        .fields()
        .iter()
        .filter(|f| matches!(f.data_type(), DataType::Dictionary(..)))
        .map(|f| f.name().clone())
        .collect();
    // The recorder's properties leave them out since 23a1d74: the cost of
    // keeping them, as before.
    let measured = names.clone();
    configs.push((
        "names with min/max statistics".into(),
        Box::new(move |mut b: WriterPropertiesBuilder| {
            for column in &measured {
                b = b.set_column_statistics_enabled(
                    ColumnPath::from(column.as_str()),
                    EnabledStatistics::Chunk,
                );
            }
            b
        }),
    ));
    for column in ints.iter().chain(&names) {
        configs.push((
            format!("`{column}` without its dictionary"),
            without_dictionaries(vec![column.clone()]),
        ));
    }
    let mut results = vec![(0usize, Vec::new()); configs.len()];
    for _ in 0..ROUNDS {
        for ((_, config), (bytes, times)) in configs.iter().zip(results.iter_mut()) {
            let properties = config(
                hindsight_schemas::layout::writer_properties(table, "h", "b", "v").into_builder(),
            )
            .build();
            let start = Instant::now();
            let mut out = Vec::new();
            let mut writer =
                ArrowWriter::try_new(&mut out, schema.clone(), Some(properties)).expect("a writer");
            for batch in &batches {
                writer.write(batch).expect("written");
                // A row group per batch, as the recorder writes them.
                writer.flush().expect("flushed");
            }
            writer.close().expect("closed");
            times.push(start.elapsed().as_nanos() as f64 / rows as f64);
            *bytes = out.len();
        }
    }
    println!(
        "| {} ({rows} rows) | bytes per row | ns per row (median of {ROUNDS}) |",
        table.name
    );
    println!("|---|---:|---:|");
    for ((name, _), (bytes, mut times)) in configs.iter().zip(results) {
        times.sort_by(f64::total_cmp);
        println!(
            "| {name} | {:.3} | {:.1} |",
            bytes as f64 / rows as f64,
            times[ROUNDS / 2]
        );
    }
}
