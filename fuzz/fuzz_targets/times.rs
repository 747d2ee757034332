//! Every time, duration, size and file name a user or a directory listing
//! hands the tools: `--from`/`--to`, `--interval`, `--max-size`, chunk and
//! journal names.
#![no_main]

use hindsight_schemas::{layout, time, when::When};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(when) = When::parse(text) {
        for range in [
            None,
            Some((0, 0)),
            Some((i64::MIN, i64::MAX)),
            Some((1_700_000_000_000_000_000, 1_700_000_086_400_000_000)),
        ] {
            let _ = when.resolve(range);
        }
    }
    let _ = time::parse_duration_ns(text);
    let _ = time::parse_size_bytes(text);
    let _ = time::parse_compact_utc(text);
    let _ = layout::chunk_start_ns(text);
    let _ = layout::chunk_of_journal(text);
    let _ = layout::is_chunk_file(text);
});
