//! The recorder's decoder of ring-buffer records: the kernel writes them,
//! but a record it cannot make sense of must be an error, never a panic
//! that stops a recording.
#![no_main]

use std::sync::mpsc::sync_channel;

use hindsight_record::{decode::Decoder, rows::AllRows, stacks::StackInterner};
use hindsight_schemas::time::ClockOffset;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut decoder = Decoder::new(ClockOffset {
        at_boot_ns: 1_000_000_000,
        offset_ns: 1_700_000_000_000_000_000,
    });
    let mut rows = AllRows::default();
    let _ = decoder.decode(data, &mut rows);
    // With stacks: a symbolizer that never answers, a /proc with no process.
    let (requests, _queue) = sync_channel(0);
    let mut stacks = StackInterner::new(std::path::Path::new("/nonexistent"), requests);
    let _ = decoder.decode_with_stacks(data, &mut rows, &mut stacks);
});
