//! A chunk's Parquet footer, read so that no file can make the reader spin.
//!
//! parquet-rs skips a field it does not know by walking its Thrift compact
//! encoding, and there a `bool` element of a list, set or map takes no
//! bytes (the specification gives it one). So a footer of 2 KB that
//! declares a `list<bool>` of 2^31 elements, or many, holds the reader for
//! seconds each: a 2,003-byte input the fuzzer found took 0.55 s in the
//! release `hindsight info` and 2 min 19 s in the fuzzer's build, all in
//! `skip_till_depth`. Before parquet-rs sees a footer, [`walk`] goes over
//! it as parquet-rs will, and refuses one whose containers declare more
//! elements in all than the footer has bytes: a footer written to the
//! specification never does, since every element takes a byte or more.

use std::{fs::File, os::unix::fs::FileExt};

use parquet::{
    errors::ParquetError,
    file::metadata::{FooterTail, ParquetMetaData, ParquetMetaDataReader},
};

/// The fixed end of a Parquet file: the footer's length and `PAR1`.
const TAIL: usize = 8;

/// How deep structs and containers may nest (parquet-rs's own limit).
const MAX_DEPTH: u32 = 64;

/// The footer of the Parquet file `file`.
pub fn read(file: &File) -> Result<ParquetMetaData, ParquetError> {
    let size = file.metadata()?.len();
    let mut tail = [0u8; TAIL];
    if size < TAIL as u64 {
        return Err(too_short());
    }
    file.read_exact_at(&mut tail, size - TAIL as u64)?;
    let start = metadata_start(size, tail)?;
    let mut metadata = vec![0u8; (size - TAIL as u64 - start) as usize];
    file.read_exact_at(&mut metadata, start)?;
    decode(&metadata)
}

/// The footer of a Parquet file held in memory: the whole file, or any
/// end of it that holds the footer.
pub fn parse(file: &[u8]) -> Result<ParquetMetaData, ParquetError> {
    let size = file.len();
    let tail = file.get(size.checked_sub(TAIL).ok_or_else(too_short)?..);
    let tail: [u8; TAIL] = tail.and_then(|t| t.try_into().ok()).ok_or_else(too_short)?;
    let start = metadata_start(size as u64, tail)? as usize;
    decode(&file[start..size - TAIL])
}

fn too_short() -> ParquetError {
    ParquetError::General("shorter than a footer".into())
}

/// Where the footer of a file of `size` bytes, ending in `tail`, starts.
fn metadata_start(size: u64, tail: [u8; TAIL]) -> Result<u64, ParquetError> {
    let length = FooterTail::try_from(tail)?.metadata_length() as u64;
    size.checked_sub(length + TAIL as u64)
        .ok_or_else(|| ParquetError::General("footer longer than the file".into()))
}

/// A footer's Thrift bytes (without the file's last 8 bytes), decoded
/// once [`walk`] has found them bounded.
pub fn decode(metadata: &[u8]) -> Result<ParquetMetaData, ParquetError> {
    walk(metadata)?;
    ParquetMetaDataReader::decode_metadata(metadata)
}

/// Walks `metadata`, a Thrift compact struct, as parquet-rs skips it; an
/// error if it is cut short, nests too deep, or its containers declare
/// more elements than it has bytes.
pub fn walk(metadata: &[u8]) -> Result<(), ParquetError> {
    let mut walker = Walker {
        bytes: metadata,
        at: 0,
        elements_left: metadata.len(),
    };
    walker
        .value(STRUCT, MAX_DEPTH)
        .ok_or_else(|| ParquetError::General("footer is not a bounded Thrift struct".into()))
}

// The Thrift compact protocol's type codes.
const BOOL_TRUE: u8 = 1;
const BOOL_FALSE: u8 = 2;
const BYTE: u8 = 3;
const I16: u8 = 4;
const I32: u8 = 5;
const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
const STRUCT: u8 = 12;
const UUID: u8 = 13;

struct Walker<'a> {
    bytes: &'a [u8],
    at: usize,
    /// Container elements the rest of the footer may still declare.
    elements_left: usize,
}

impl Walker<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    fn skip(&mut self, n: u64) -> Option<()> {
        let end = self.at.checked_add(usize::try_from(n).ok()?)?;
        (end <= self.bytes.len()).then(|| self.at = end)
    }

    fn varint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.byte()?;
            value |= u64::from(b & 0x7f).checked_shl(shift)?;
            if b & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    /// Takes `n` elements from the footer's allowance.
    fn elements(&mut self, n: u64) -> Option<()> {
        self.elements_left = self.elements_left.checked_sub(usize::try_from(n).ok()?)?;
        Some(())
    }

    fn value(&mut self, kind: u8, depth: u32) -> Option<()> {
        let depth = depth.checked_sub(1)?;
        match kind {
            // As parquet-rs skips them: a struct field's bool is in its
            // header, and a container's takes nothing.
            BOOL_TRUE | BOOL_FALSE => Some(()),
            BYTE => self.skip(1),
            I16 | I32 | I64 => self.varint().map(drop),
            DOUBLE => self.skip(8),
            BINARY => {
                let n = self.varint()?;
                self.skip(n)
            }
            UUID => self.skip(16),
            STRUCT => loop {
                let header = self.byte()?;
                if header == 0 {
                    return Some(());
                }
                if header >> 4 == 0 {
                    self.varint()?; // the field id, in full
                }
                self.value(header & 0x0f, depth)?;
            },
            LIST | SET => {
                let header = self.byte()?;
                let n = match header >> 4 {
                    15 => self.varint()?,
                    short => u64::from(short),
                };
                self.elements(n)?;
                (0..n).try_for_each(|_| self.value(header & 0x0f, depth))
            }
            MAP => {
                let n = self.varint()?;
                if n == 0 {
                    return Some(());
                }
                self.elements(n.checked_mul(2)?)?;
                let kinds = self.byte()?;
                (0..n).try_for_each(|_| {
                    self.value(kinds >> 4, depth)?;
                    self.value(kinds & 0x0f, depth)
                })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_of_bools_longer_than_the_footer_is_refused() {
        // struct { 1: list<bool> of 2^31 } in compact: field header
        // (delta 1, list), list header (size follows, bool), varint size.
        let mut footer = vec![0x19, 0xf1];
        footer.extend([0x80, 0x80, 0x80, 0x80, 0x08]);
        footer.push(0);
        assert!(walk(&footer).is_err());
        // The same list of 3 bools is what the specification allows.
        assert!(walk(&[0x19, 0x31, 0]).is_ok());
    }

    #[test]
    fn the_footer_the_fuzzer_found_slow_is_refused_at_once() {
        // 2,003 bytes that held parquet-rs for 0.55 s (release) in
        // `skip_till_depth`; a seed of the footer fuzz target.
        let file = include_bytes!("../../fuzz/seeds/footer/slow-list-of-bools");
        let tail: [u8; TAIL] = file[file.len() - TAIL..].try_into().unwrap();
        let start = metadata_start(file.len() as u64, tail).unwrap() as usize;
        // Refused by the walk, before parquet-rs would spin on it.
        assert!(walk(&file[start..file.len() - TAIL]).is_err());
        assert!(parse(file).is_err());
    }

    #[test]
    fn every_tables_footer_as_the_recorder_writes_it_is_read() {
        use arrow::{
            array::{new_null_array, Int64Array},
            record_batch::RecordBatch,
        };
        for table in crate::all_tables() {
            let schema = table.schema();
            // A thousand rows: `ts` counts, every other column is null
            // (or, where it may not be, its type's zero).
            let columns = schema
                .fields()
                .iter()
                .map(|field| match field.name().as_str() {
                    "ts" => arrow::compute::cast(
                        &Int64Array::from_iter_values(0..1000),
                        field.data_type(),
                    )
                    .unwrap(),
                    _ if field.is_nullable() => new_null_array(field.data_type(), 1000),
                    _ => arrow::compute::cast(
                        &Int64Array::from_iter_values(std::iter::repeat_n(0, 1000)),
                        field.data_type(),
                    )
                    .unwrap(),
                })
                .collect();
            let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
            let properties = crate::layout::writer_properties(table, "h", "b", "v");
            let mut bytes = Vec::new();
            let mut writer =
                parquet::arrow::ArrowWriter::try_new(&mut bytes, schema, Some(properties)).unwrap();
            writer.write(&batch).unwrap();
            writer.close().unwrap();
            let footer = parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", table.name));
            assert_eq!(footer.file_metadata().num_rows(), 1000, "{}", table.name);
        }
    }
}
