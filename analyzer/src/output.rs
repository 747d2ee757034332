//! Query results on a byte stream: an aligned table for people, CSV and
//! JSON lines for programs; or a Parquet file ([`write_parquet`]).
//!
//! Every format prints timestamps the same way, RFC 3339 in UTC
//! (`2023-11-14T22:13:20.500Z`, as `hindsight_schemas::time::rfc3339`
//! does), whatever zone a query converted them to. CSV and JSON stream batch
//! by batch; the table needs every row first to size its columns.
//!
//! A reader that goes away (`hindsight sql ... | head -1`) ends the output
//! early and successfully: [`write_stream`] returns `Ok` and the query is
//! dropped.

use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::util::display::FormatOptions;
use datafusion::execution::SendableRecordBatchStream;
use futures::StreamExt;

use crate::catalog;

/// How a result is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// An aligned table with a header, for a terminal.
    Table,
    /// A header line, then one line a row.
    Csv,
    /// One JSON object a line (JSON lines); nulls are written as `null`.
    Json,
}

/// Every timestamp: zone-aware ones after [`utc_batch`] moved them to
/// UTC, and zone-less ones (`now()`, `TIMESTAMP '...'` literals), which
/// DataFusion treats as UTC. `%.f` prints 0, 3, 6 or 9 digits, like
/// `SecondsFormat::AutoSi`.
const TIMESTAMP_UTC: &str = "%Y-%m-%dT%H:%M:%S%.fZ";

fn format_options() -> FormatOptions<'static> {
    FormatOptions::new()
        .with_display_error(true)
        .with_timestamp_tz_format(Some(TIMESTAMP_UTC))
        .with_timestamp_format(Some(TIMESTAMP_UTC))
}

/// Writes every batch of `stream` to `out` in `format`, then flushes. A
/// closed pipe is not an error.
pub async fn write_stream(
    stream: SendableRecordBatchStream,
    format: Format,
    out: impl Write,
) -> Result<()> {
    let mut out = PipeAware {
        inner: out,
        closed: false,
    };
    match write_all(stream, format, &mut out).await {
        Err(_) if out.closed => Ok(()),
        other => other,
    }
}

/// Writes `batches` (whose schema is `schema`, also when there are none)
/// in `format`. A closed pipe is not an error.
pub async fn write_batches(
    schema: SchemaRef,
    batches: &[RecordBatch],
    format: Format,
    out: impl Write,
) -> Result<()> {
    // The adapter needs a stream that owns its batches.
    let owned: Vec<RecordBatch> = batches.to_vec();
    let stream = futures::stream::iter(owned.into_iter().map(Ok));
    let stream: SendableRecordBatchStream =
        Box::pin(datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema, stream));
    write_stream(stream, format, out).await
}

async fn write_all(
    mut stream: SendableRecordBatchStream,
    format: Format,
    out: &mut PipeAware<impl Write>,
) -> Result<()> {
    // An empty first batch makes every format print its header even when
    // the result has no rows.
    let empty = utc_batch(&RecordBatch::new_empty(stream.schema()))?;
    match format {
        Format::Table => {
            let mut batches = vec![empty];
            while let Some(batch) = stream.next().await {
                batches.push(utc_batch(&batch.map_err(catalog::one_line)?)?);
            }
            let table = arrow::util::pretty::pretty_format_batches_with_options(
                &batches,
                &format_options(),
            )?;
            writeln!(out, "{table}")?;
        }
        Format::Csv => {
            let mut writer = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .with_timestamp_tz_format(TIMESTAMP_UTC.into())
                .with_timestamp_format(TIMESTAMP_UTC.into())
                .build(&mut *out);
            writer.write(&empty)?;
            while let Some(batch) = stream.next().await {
                writer.write(&utc_batch(&batch.map_err(catalog::one_line)?)?)?;
            }
        }
        Format::Json => {
            let mut writer = arrow::json::WriterBuilder::new()
                .with_explicit_nulls(true)
                .with_timestamp_tz_format(TIMESTAMP_UTC.into())
                .with_timestamp_format(TIMESTAMP_UTC.into())
                .build::<_, arrow::json::writer::LineDelimited>(&mut *out);
            while let Some(batch) = stream.next().await {
                writer.write(&utc_batch(&batch.map_err(catalog::one_line)?)?)?;
            }
            writer.finish()?;
        }
    }
    out.flush()?;
    Ok(())
}

/// Writes every batch of `stream` to a zstd Parquet file at `path`, with
/// the result's schema as it is (timestamps keep their zone).
pub async fn write_parquet(mut stream: SendableRecordBatchStream, path: &Path) -> Result<()> {
    use parquet::arrow::ArrowWriter;
    use parquet::basic::{Compression, ZstdLevel};
    use parquet::file::properties::WriterProperties;
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let mut writer = ArrowWriter::try_new(file, stream.schema(), Some(props))?;
    while let Some(batch) = stream.next().await {
        writer.write(&batch.map_err(catalog::one_line)?)?;
    }
    writer
        .close()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// The rows of `batches` as JSON objects, printed as `--format json`
/// prints them (timestamps RFC 3339 UTC, nulls as `null`): for reports
/// that lay rows out themselves.
pub fn json_rows(
    batches: &[RecordBatch],
) -> Result<Vec<serde_json::Map<String, serde_json::Value>>> {
    let mut text = Vec::new();
    {
        let mut writer = arrow::json::WriterBuilder::new()
            .with_explicit_nulls(true)
            .with_timestamp_tz_format(TIMESTAMP_UTC.into())
            .with_timestamp_format(TIMESTAMP_UTC.into())
            .build::<_, arrow::json::writer::LineDelimited>(&mut text);
        for batch in batches {
            writer.write(&utc_batch(batch)?)?;
        }
        writer.finish()?;
    }
    text.split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| Ok(serde_json::from_slice(line)?))
        .collect()
}

/// The batch with every zone-aware timestamp column in UTC. Only the
/// column's zone changes: Arrow stores the instant, the zone is display.
pub fn utc_batch(batch: &RecordBatch) -> Result<RecordBatch> {
    let schema = batch.schema();
    let needs_utc =
        |t: &DataType| matches!(t, DataType::Timestamp(_, Some(tz)) if tz.as_ref() != "UTC");
    if !schema.fields().iter().any(|f| needs_utc(f.data_type())) {
        return Ok(batch.clone());
    }
    let mut fields = Vec::with_capacity(schema.fields().len());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        match field.data_type() {
            DataType::Timestamp(unit, Some(_)) if needs_utc(field.data_type()) => {
                let utc = DataType::Timestamp(*unit, Some("UTC".into()));
                columns.push(cast(column.as_ref(), &utc)?);
                fields.push(Arc::new(Field::new(
                    field.name(),
                    utc,
                    column.is_nullable(),
                )));
            }
            _ => {
                columns.push(column.clone());
                fields.push(field.clone());
            }
        }
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// Remembers that the reader closed the pipe, so the error it causes ends
/// the output quietly, however the writer above wrapped it.
struct PipeAware<W> {
    inner: W,
    closed: bool,
}

impl<W: Write> PipeAware<W> {
    fn note(&mut self, e: io::Error) -> io::Error {
        if e.kind() == io::ErrorKind::BrokenPipe {
            self.closed = true;
        }
        e
    }
}

impl<W: Write> Write for PipeAware<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf).map_err(|e| self.note(e))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush().map_err(|e| self.note(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{DictionaryArray, Int64Array, TimestampNanosecondArray};
    use arrow::datatypes::Int32Type;
    use futures::executor::block_on;

    fn sample() -> RecordBatch {
        let ts = TimestampNanosecondArray::from(vec![
            Some(1_700_000_000_000_000_000),
            Some(1_700_000_000_500_000_000),
            None,
        ])
        .with_timezone("+01:00");
        let comm: DictionaryArray<Int32Type> = vec![Some("bash"), Some("a,b \"q\""), None]
            .into_iter()
            .collect();
        let n = Int64Array::from(vec![1, 2, 3]);
        RecordBatch::try_from_iter_with_nullable(vec![
            ("ts", Arc::new(ts) as ArrayRef, true),
            ("comm", Arc::new(comm) as ArrayRef, true),
            ("n", Arc::new(n) as ArrayRef, false),
        ])
        .unwrap()
    }

    fn render(format: Format, batches: &[RecordBatch]) -> String {
        let mut out = Vec::new();
        block_on(write_batches(sample().schema(), batches, format, &mut out)).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn formats_print_utc_rfc3339_and_headers() {
        let cases = [
            (
                Format::Csv,
                "ts,comm,n\n\
                 2023-11-14T22:13:20Z,bash,1\n\
                 2023-11-14T22:13:20.500Z,\"a,b \"\"q\"\"\",2\n\
                 ,,3\n",
            ),
            (
                Format::Json,
                "{\"ts\":\"2023-11-14T22:13:20Z\",\"comm\":\"bash\",\"n\":1}\n\
                 {\"ts\":\"2023-11-14T22:13:20.500Z\",\"comm\":\"a,b \\\"q\\\"\",\"n\":2}\n\
                 {\"ts\":null,\"comm\":null,\"n\":3}\n",
            ),
            (
                Format::Table,
                "+--------------------------+---------+---+\n\
                 | ts                       | comm    | n |\n\
                 +--------------------------+---------+---+\n\
                 | 2023-11-14T22:13:20Z     | bash    | 1 |\n\
                 | 2023-11-14T22:13:20.500Z | a,b \"q\" | 2 |\n\
                 |                          |         | 3 |\n\
                 +--------------------------+---------+---+\n",
            ),
        ];
        for (format, expected) in cases {
            assert_eq!(render(format, &[sample()]), expected, "{format:?}");
        }
    }

    #[test]
    fn empty_results_keep_their_header() {
        assert_eq!(render(Format::Csv, &[]), "ts,comm,n\n");
        assert_eq!(render(Format::Json, &[]), "");
        assert!(render(Format::Table, &[]).contains("| ts | comm | n |"));
    }

    #[test]
    fn closed_pipe_is_success() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> io::Result<()> {
                Err(io::ErrorKind::BrokenPipe.into())
            }
        }
        for format in [Format::Table, Format::Csv, Format::Json] {
            block_on(write_batches(
                sample().schema(),
                &[sample()],
                format,
                Closed,
            ))
            .unwrap();
        }
    }
}
