//! A chunk's Parquet footer, which the analyzer reads first of every file
//! it opens (a file attached to a ticket may be anything): the metadata,
//! its key-value tags and the `ts` statistics it takes the time range from.
#![no_main]

use libfuzzer_sys::fuzz_target;
use parquet::file::statistics::Statistics;

fuzz_target!(|data: &[u8]| {
    // As the analyzer reads footers: walked for bounds first (see
    // hindsight_schemas::footer), then decoded by parquet-rs.
    let Ok(footer) = hindsight_schemas::footer::parse(data) else {
        return;
    };
    let meta = footer.file_metadata();
    let _ = meta.num_rows();
    for kv in meta.key_value_metadata().into_iter().flatten() {
        let _ = (kv.key.len(), kv.value.as_deref());
    }
    for group in footer.row_groups() {
        for column in group.columns() {
            let _ = column.column_path().string();
            if let Some(Statistics::Int64(s)) = column.statistics() {
                let _ = (s.min_opt(), s.max_opt());
            }
        }
    }
});
