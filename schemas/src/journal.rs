//! The journal of an open chunk: its rows as Arrow IPC, appended as they
//! arrive, so that a killed recorder (or a crashed host, up to the last
//! fsync) loses at most the rows it had not yet handed over.
//!
//! Format: a sequence of *entries*, each a complete, self-contained Arrow
//! IPC stream (schema with the file's key-value metadata, dictionaries, one
//! record batch, end-of-stream marker; buffers zstd-compressed unless the
//! batch is small). An entry is
//! appended with one `write`; a journal torn by a kill or a full disk ends
//! in at most one partial entry, which a reader drops: [`JournalReader`]
//! yields every complete entry before it and says the tail was torn.
//!
//! Entries do not share dictionaries or state, so a writer that had to cut a
//! failed entry off (disk full) simply truncates the file back to the end
//! of the last good one and appends again.
//!
//! The recorder writes journals; the recorder's `recover` and the analyzer
//! (reading a live recording) read them with the same reader.

use std::{
    collections::HashMap,
    fs::File,
    io::{BufReader, Cursor, Read, Seek, SeekFrom},
    path::Path,
    sync::Arc,
};

use arrow::{
    datatypes::Schema,
    error::ArrowError,
    ipc::{reader::StreamReader, writer::IpcWriteOptions, writer::StreamWriter, CompressionType},
    record_batch::RecordBatch,
};

/// zstd level of the journal's buffers: the cheapest level, since the
/// journal lives only until its chunk closes (Parquet does the real work).
const ZSTD_LEVEL: i32 = 1;

/// What ends every entry: the IPC continuation marker and a zero length.
const END_OF_STREAM: [u8; 8] = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];

/// The most rows, and the most bytes a compressed buffer may inflate to,
/// that a journal entry may declare. The recorder's entries are one batch
/// of at most a few thousand rows; Arrow's reader allocates what a length
/// declares before it reads, so a torn or planted journal must not get to
/// declare exabytes (the fuzzer's first find).
const MAX_ENTRY_ROWS: i64 = 1 << 24;
const MAX_INFLATED_BUFFER: i64 = 256 << 20;

/// Batches smaller than this (in Arrow's memory) are journaled uncompressed.
/// An idle recorder journals a few hundred counter rows a second; making a
/// zstd context and compressing each of their buffers was about a tenth of
/// its CPU (a profile of `--events counters,tasks`), to save a few KiB of a
/// file that lives a minute. The IPC format flags compression per message,
/// so readers take both.
const COMPRESS_FROM_BYTES: usize = 256 << 10;

/// One journal entry for `batch`, with `metadata` (the chunk's Parquet
/// key-value metadata) on its schema so a journal alone says what it is.
pub fn encode_entry(
    batch: &RecordBatch,
    metadata: &HashMap<String, String>,
) -> Result<Vec<u8>, ArrowError> {
    let schema = Schema::new_with_metadata(batch.schema().fields().clone(), metadata.clone());
    let options = if batch.get_array_memory_size() >= COMPRESS_FROM_BYTES {
        IpcWriteOptions::default()
            .try_with_compression(Some(CompressionType::ZSTD))?
            .try_with_compression_level(Some(ZSTD_LEVEL))?
    } else {
        IpcWriteOptions::default()
    };
    let mut writer = StreamWriter::try_new_with_options(Vec::new(), &schema, options)?;
    writer.write(batch)?;
    writer.finish()?;
    writer.into_inner()
}

/// Reads the complete entries of a journal, in order.
pub struct JournalReader<R> {
    input: R,
    /// Set once an entry fails to decode: everything from there on is a torn tail.
    torn: bool,
    /// The key-value metadata of the first entry.
    metadata: Option<HashMap<String, String>>,
    /// Bytes of the input not read yet (known after the first entry).
    left: Option<u64>,
}

impl JournalReader<BufReader<File>> {
    pub fn open(path: &Path) -> std::io::Result<Self> {
        Ok(JournalReader::new(BufReader::with_capacity(
            1 << 20,
            File::open(path)?,
        )))
    }
}

impl<R: Read + Seek> JournalReader<R> {
    pub fn new(input: R) -> Self {
        JournalReader {
            input,
            torn: false,
            metadata: None,
            left: None,
        }
    }

    /// Whether the journal ended in a partial or unreadable entry (a kill
    /// mid-write); the entries before it were all returned.
    pub fn torn(&self) -> bool {
        self.torn
    }

    /// The chunk's key-value metadata, known after the first entry.
    pub fn metadata(&self) -> Option<&HashMap<String, String>> {
        self.metadata.as_ref()
    }

    fn next_entry(&mut self) -> Result<Option<RecordBatch>, ArrowError> {
        let left = match self.left {
            Some(left) => left,
            None => {
                let here = self.input.stream_position()?;
                let end = self.input.seek(SeekFrom::End(0))?;
                self.input.seek(SeekFrom::Start(here))?;
                end.saturating_sub(here)
            }
        };
        if left == 0 {
            return Ok(None);
        }
        let entry = read_entry_bytes(&mut self.input, left)?;
        self.left = Some(left - entry.len() as u64);
        // Arrow's IPC reader panics on some malformed messages (a dictionary
        // field without its index type: arrow-ipc 59's convert.rs unwraps
        // it). A journal that does not decode is a torn one, whatever the
        // reason: the panic is contained to the entry.
        let (batch, metadata) =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decode_entry(&entry)))
                .map_err(|_| bad("Arrow's reader panicked on it"))??;
        if self.metadata.is_none() {
            self.metadata = Some(metadata);
        }
        Ok(Some(batch))
    }
}

/// The batch of one entry's bytes (checked by [`read_entry_bytes`]) and the
/// key-value metadata of its schema.
fn decode_entry(entry: &[u8]) -> Result<(RecordBatch, HashMap<String, String>), ArrowError> {
    let mut stream = StreamReader::try_new(Cursor::new(entry), None)?;
    let batch = stream
        .next()
        .transpose()?
        .ok_or_else(|| bad("no record batch"))?;
    // The end-of-stream marker, read by hand: a kill between the batch and
    // the marker would otherwise look like a clean end.
    let mut marker = [0u8; 8];
    stream.get_mut().read_exact(&mut marker)?;
    if marker != END_OF_STREAM || stream.get_ref().position() != entry.len() as u64 {
        return Err(bad("no end marker"));
    }
    // The schema as the table defines it, without the entry's metadata.
    let plain = Arc::new(Schema::new(batch.schema().fields().clone()));
    let batch = RecordBatch::try_new(plain, batch.columns().to_vec())?;
    Ok((batch, stream.schema().metadata().clone()))
}

fn bad(what: &str) -> ArrowError {
    ArrowError::IpcError(format!("journal entry: {what}"))
}

/// The bytes of the next entry (its messages through the end-of-stream
/// marker), read only after each length its framing declares is checked to
/// fit in the `left` bytes the input has and, for a batch, against
/// [`MAX_ENTRY_ROWS`] and [`MAX_INFLATED_BUFFER`].
fn read_entry_bytes(input: &mut impl Read, mut left: u64) -> Result<Vec<u8>, ArrowError> {
    let mut take = |n: u64, input: &mut dyn Read| -> Result<Vec<u8>, ArrowError> {
        if n > left {
            return Err(bad("a length past the end of the journal"));
        }
        left -= n;
        let mut bytes = vec![0u8; n as usize];
        input.read_exact(&mut bytes)?;
        Ok(bytes)
    };
    let mut entry = Vec::new();
    loop {
        let prefix = take(8, input)?;
        if prefix[..4] != END_OF_STREAM[..4] {
            return Err(bad("no continuation marker"));
        }
        entry.extend_from_slice(&prefix);
        let meta_len = i32::from_le_bytes(prefix[4..8].try_into().expect("4 bytes"));
        if meta_len == 0 {
            return Ok(entry);
        }
        let meta = take(
            u64::try_from(meta_len).map_err(|_| bad("a negative length"))?,
            input,
        )?;
        let message =
            arrow::ipc::root_as_message(&meta).map_err(|e| bad(&format!("a bad message: {e}")))?;
        let body_len =
            u64::try_from(message.bodyLength()).map_err(|_| bad("a negative body length"))?;
        let body = take(body_len, input)?;
        let batch = message
            .header_as_record_batch()
            .or_else(|| message.header_as_dictionary_batch().and_then(|d| d.data()));
        if let Some(batch) = batch {
            check_batch(&batch, &body)?;
        }
        entry.extend_from_slice(&meta);
        entry.extend_from_slice(&body);
    }
}

/// What a batch declares, against the bounds and its own body.
fn check_batch(batch: &arrow::ipc::RecordBatch, body: &[u8]) -> Result<(), ArrowError> {
    let too_many = |n: i64| !(0..=MAX_ENTRY_ROWS).contains(&n);
    if too_many(batch.length())
        || batch
            .nodes()
            .is_some_and(|n| n.iter().any(|f| too_many(f.length())))
    {
        return Err(bad("more rows than an entry holds"));
    }
    for buffer in batch.buffers().into_iter().flatten() {
        let (offset, length) = (buffer.offset(), buffer.length());
        let end = offset
            .checked_add(length)
            .and_then(|e| usize::try_from(e).ok());
        let (Ok(start), Some(end)) = (usize::try_from(offset), end) else {
            return Err(bad("a buffer outside its body"));
        };
        if length < 0 || end > body.len() {
            return Err(bad("a buffer outside its body"));
        }
        // A compressed buffer starts with the length it inflates to (-1:
        // stored as is).
        if batch.compression().is_some() && length >= 8 {
            let inflated = i64::from_le_bytes(body[start..start + 8].try_into().expect("8 bytes"));
            if inflated > MAX_INFLATED_BUFFER {
                return Err(bad("a buffer that inflates past the bound"));
            }
        }
    }
    Ok(())
}

impl<R: Read + Seek> Iterator for JournalReader<R> {
    type Item = RecordBatch;

    fn next(&mut self) -> Option<RecordBatch> {
        if self.torn {
            return None;
        }
        match self.next_entry() {
            Ok(batch) => batch,
            Err(_) => {
                self.torn = true;
                None
            }
        }
    }
}

/// Every complete batch of the journal at `path`, and whether its tail was torn.
pub fn read_journal(path: &Path) -> std::io::Result<(Vec<RecordBatch>, bool)> {
    let mut reader = JournalReader::open(path)?;
    let batches: Vec<RecordBatch> = reader.by_ref().collect();
    Ok((batches, reader.torn()))
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use arrow::array::{
        Array, AsArray, DictionaryArray, Int32Array, StringArray, TimestampNanosecondArray,
    };
    use arrow::datatypes::{Int32Type, TimestampNanosecondType};

    use super::*;
    use crate::tables::LOSS;

    /// A `loss` batch whose dictionary differs from batch to batch, as the
    /// recorder's builders produce them.
    fn batch(first_ts: i64, sources: &[&str]) -> RecordBatch {
        let n = sources.len();
        let ts = TimestampNanosecondArray::from_iter_values((0..n as i64).map(|i| first_ts + i))
            .with_timezone("UTC");
        let cpu = Int32Array::from_iter((0..n as i32).map(|i| (i % 2 == 0).then_some(i)));
        let source: DictionaryArray<Int32Type> = sources.iter().copied().collect();
        let lost = arrow::array::Int64Array::from_iter_values((0..n as i64).map(|i| i * 10));
        RecordBatch::try_new(
            LOSS.schema(),
            vec![
                Arc::new(ts),
                Arc::new(cpu),
                Arc::new(source),
                Arc::new(lost),
            ],
        )
        .unwrap()
    }

    fn metadata() -> HashMap<String, String> {
        HashMap::from([("hindsight.table".to_string(), "loss".to_string())])
    }

    fn journal(batches: &[RecordBatch]) -> (Vec<u8>, Vec<usize>) {
        let mut bytes = Vec::new();
        let mut ends = Vec::new();
        for b in batches {
            bytes.extend(encode_entry(b, &metadata()).unwrap());
            ends.push(bytes.len());
        }
        (bytes, ends)
    }

    fn sources(batch: &RecordBatch) -> Vec<String> {
        let d = batch.column(2).as_dictionary::<Int32Type>();
        let values = d.values().as_any().downcast_ref::<StringArray>().unwrap();
        d.keys()
            .values()
            .iter()
            .map(|&k| values.value(k as usize).to_string())
            .collect()
    }

    #[test]
    fn entries_read_back_in_order_with_their_own_dictionaries() {
        let written = [
            batch(100, &["ring_full:sched_switch", "decode_error:unknown"]),
            batch(200, &["disk_full:counter"]),
            batch(
                300,
                &["decode_error:unknown", "ring_full:sched_switch", "x"],
            ),
        ];
        let (bytes, _) = journal(&written);
        let mut reader = JournalReader::new(Cursor::new(bytes));
        let read: Vec<RecordBatch> = reader.by_ref().collect();
        assert!(!reader.torn());
        assert_eq!(reader.metadata(), Some(&metadata()));
        assert_eq!(read.len(), 3);
        for (r, w) in read.iter().zip(&written) {
            assert_eq!(r, w);
            assert_eq!(sources(r), sources(w));
        }
        let ts = read[2].column(0).as_primitive::<TimestampNanosecondType>();
        assert_eq!(ts.value(2), 302);
        assert!(read[0].column(1).is_null(1));
    }

    /// A small batch is journaled as it is, a large one compressed, and a
    /// journal of both reads back whole.
    #[test]
    fn small_entries_go_uncompressed_and_large_ones_compressed() {
        let small = batch(1, &["ring_full:sched_switch"; 100]);
        let large = batch(1_000, &["ring_full:sched_switch"; 20_000]);
        assert!(small.get_array_memory_size() < COMPRESS_FROM_BYTES);
        assert!(large.get_array_memory_size() >= COMPRESS_FROM_BYTES);
        let uncompressed = |b: &RecordBatch| {
            let mut writer = StreamWriter::try_new(Vec::new(), &b.schema()).unwrap();
            writer.write(b).unwrap();
            writer.finish().unwrap();
            writer.into_inner().unwrap().len()
        };
        let small_entry = encode_entry(&small, &HashMap::new()).unwrap().len();
        let large_entry = encode_entry(&large, &HashMap::new()).unwrap().len();
        assert_eq!(small_entry, uncompressed(&small));
        assert!(
            large_entry * 4 < uncompressed(&large),
            "{large_entry} of {}",
            uncompressed(&large)
        );
        let (bytes, _) = journal(&[small.clone(), large.clone(), small.clone()]);
        let read: Vec<RecordBatch> = JournalReader::new(Cursor::new(bytes)).collect();
        assert_eq!(read, [small.clone(), large, small]);
    }

    /// Cut anywhere, a journal yields exactly the entries that ended before
    /// the cut, and says it was torn unless the cut fell on an entry's end.
    #[test]
    fn a_journal_cut_anywhere_keeps_every_complete_entry() {
        let written = [
            batch(1, &["a", "b"]),
            batch(10, &["c"]),
            batch(20, &["d", "e", "f"]),
        ];
        let (bytes, ends) = journal(&written);
        for cut in 0..=bytes.len() {
            let complete = ends.iter().filter(|&&end| end <= cut).count();
            let mut reader = JournalReader::new(Cursor::new(bytes[..cut].to_vec()));
            let read: Vec<RecordBatch> = reader.by_ref().collect();
            assert_eq!(read.len(), complete, "cut at {cut}");
            assert_eq!(read, written[..complete], "cut at {cut}");
            let on_boundary = cut == 0 || ends.contains(&cut);
            assert_eq!(reader.torn(), !on_boundary, "cut at {cut}");
        }
    }

    #[test]
    fn garbage_after_good_entries_is_a_torn_tail() {
        let (mut bytes, _) = journal(&[batch(1, &["a"])]);
        bytes.extend_from_slice(&[0xff; 64]);
        let mut reader = JournalReader::new(Cursor::new(bytes));
        assert_eq!(reader.by_ref().count(), 1);
        assert!(reader.torn());
    }

    /// Inputs the fuzzer found (fuzz/seeds/journal, replayed by every fuzz
    /// run too): one declares an allocation of exabytes, one a dictionary
    /// field that Arrow's reader panics on. Each is a torn journal.
    #[test]
    fn journals_the_fuzzer_found_are_torn_not_fatal() {
        for input in [
            &include_bytes!("../../fuzz/seeds/journal/huge-allocation")[..],
            &include_bytes!("../../fuzz/seeds/journal/dictionary-without-index-type")[..],
        ] {
            let mut reader = JournalReader::new(Cursor::new(input));
            assert_eq!(reader.by_ref().count(), 0);
            assert!(reader.torn());
        }
    }
}
