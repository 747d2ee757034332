//! Reading query results by column name, whatever types the engine chose
//! (dictionaries, string views, timestamps): each column is cast once to
//! the plain type the reader wants. For the exports, the HTML page and the
//! timeline, which read rows into Rust without a detour through JSON.

use anyhow::Context;
use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float64Array, Int32Array, Int64Array, PrimitiveArray,
    RecordBatch, StringArray, UInt64Array,
};
use arrow::compute::cast;
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Float64Type, Int32Type, Int64Type, UInt64Type,
};

/// Column `name` of `batch` as `to`, if the batch has it.
fn optional(batch: &RecordBatch, name: &str, to: &DataType) -> anyhow::Result<Option<ArrayRef>> {
    batch
        .column_by_name(name)
        .map(|array| cast(array, to).with_context(|| format!("reading column {name} as {to}")))
        .transpose()
}

fn column(batch: &RecordBatch, name: &str, to: &DataType) -> anyhow::Result<ArrayRef> {
    optional(batch, name, to)?.with_context(|| format!("the query returned no column {name}"))
}

/// `name` as the primitive type `T`, whatever type the engine chose for it.
fn primitives<T: ArrowPrimitiveType>(
    batch: &RecordBatch,
    name: &str,
) -> anyhow::Result<PrimitiveArray<T>> {
    Ok(column(batch, name, &T::DATA_TYPE)?
        .as_primitive::<T>()
        .clone())
}

/// `name` as 64-bit integers; timestamps become UTC nanoseconds.
pub fn i64s(batch: &RecordBatch, name: &str) -> anyhow::Result<Int64Array> {
    primitives::<Int64Type>(batch, name)
}

/// `name` as 32-bit integers (pids, tids).
pub fn i32s(batch: &RecordBatch, name: &str) -> anyhow::Result<Int32Array> {
    primitives::<Int32Type>(batch, name)
}

/// `name` as 64-bit floats.
pub fn f64s(batch: &RecordBatch, name: &str) -> anyhow::Result<Float64Array> {
    primitives::<Float64Type>(batch, name)
}

/// `name` as unsigned 64-bit integers (addresses, which may not fit an i64).
pub fn u64s(batch: &RecordBatch, name: &str) -> anyhow::Result<UInt64Array> {
    primitives::<UInt64Type>(batch, name)
}

/// `name` as strings.
pub fn strings(batch: &RecordBatch, name: &str) -> anyhow::Result<StringArray> {
    Ok(column(batch, name, &DataType::Utf8)?
        .as_string::<i32>()
        .clone())
}

/// `name` as strings, if the batch has it (`host` of several recordings).
pub fn optional_strings(batch: &RecordBatch, name: &str) -> anyhow::Result<Option<StringArray>> {
    Ok(optional(batch, name, &DataType::Utf8)?.map(|a| a.as_string::<i32>().clone()))
}

/// `name` as 32-bit integers, if the batch has it.
pub fn optional_i32s(batch: &RecordBatch, name: &str) -> anyhow::Result<Option<Int32Array>> {
    if batch.column_by_name(name).is_none() {
        return Ok(None);
    }
    primitives::<Int32Type>(batch, name).map(Some)
}

/// `name` as booleans.
pub fn bools(batch: &RecordBatch, name: &str) -> anyhow::Result<BooleanArray> {
    Ok(column(batch, name, &DataType::Boolean)?
        .as_boolean()
        .clone())
}

/// The value at `row`, or None where it is null.
pub fn opt_i64(array: &Int64Array, row: usize) -> Option<i64> {
    array.is_valid(row).then(|| array.value(row))
}

/// The value at `row`, or None where it is null.
pub fn opt_u64(array: &UInt64Array, row: usize) -> Option<u64> {
    array.is_valid(row).then(|| array.value(row))
}

/// Where the frame at `row` is, for formats that place a frame in its
/// module: a frame in a file at its offset in the file (its address was
/// one process's), a kernel or anonymous frame, which has no offset, at its
/// address.
pub fn frame_position(file_offset: &UInt64Array, address: &UInt64Array, row: usize) -> Option<u64> {
    opt_u64(file_offset, row).or(opt_u64(address, row))
}

/// The value at `row`, or None where it is null.
pub fn opt_str(array: &StringArray, row: usize) -> Option<&str> {
    array.is_valid(row).then(|| array.value(row))
}

/// The value at `row` of an optional column, or None where it is null or
/// the column is missing.
pub fn opt_string(array: &Option<StringArray>, row: usize) -> Option<String> {
    array
        .as_ref()
        .and_then(|a| opt_str(a, row))
        .map(str::to_owned)
}
