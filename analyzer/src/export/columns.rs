//! Reading query results by column name, whatever types the engine chose
//! (dictionaries, string views, timestamps): each column is cast once to
//! the plain type the exporter wants.

use anyhow::Context;
use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch, StringArray, UInt64Array,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type, UInt64Type};

fn column(batch: &RecordBatch, name: &str, to: &DataType) -> anyhow::Result<ArrayRef> {
    let array = batch
        .column_by_name(name)
        .with_context(|| format!("the export query returned no column {name}"))?;
    cast(array, to).with_context(|| format!("reading column {name} as {to}"))
}

/// `name` as 64-bit integers; timestamps become UTC nanoseconds.
pub fn i64s(batch: &RecordBatch, name: &str) -> anyhow::Result<Int64Array> {
    Ok(column(batch, name, &DataType::Int64)?
        .as_primitive::<Int64Type>()
        .clone())
}

/// `name` as unsigned 64-bit integers (addresses, which may not fit an i64).
pub fn u64s(batch: &RecordBatch, name: &str) -> anyhow::Result<UInt64Array> {
    Ok(column(batch, name, &DataType::UInt64)?
        .as_primitive::<UInt64Type>()
        .clone())
}

/// `name` as strings.
pub fn strings(batch: &RecordBatch, name: &str) -> anyhow::Result<StringArray> {
    Ok(column(batch, name, &DataType::Utf8)?
        .as_string::<i32>()
        .clone())
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

/// The value at `row`, or None where it is null.
pub fn opt_str(array: &StringArray, row: usize) -> Option<&str> {
    array.is_valid(row).then(|| array.value(row))
}
