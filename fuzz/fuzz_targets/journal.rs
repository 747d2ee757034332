//! The journal of an open chunk, as `recover` and the analyzer read it
//! after a crash: any bytes end in complete entries and a torn tail, never
//! a panic.
#![no_main]

use hindsight_schemas::journal::JournalReader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The reader contains a panic of Arrow's in one entry (a torn tail, as
    // in production); libfuzzer-sys's hook would abort before it could. A
    // panic that escapes still reaches libfuzzer-sys and is a crash.
    std::panic::set_hook(Box::new(|_| {}));
    let mut reader = JournalReader::new(std::io::Cursor::new(data));
    for batch in reader.by_ref() {
        let _ = batch.num_rows();
    }
    let _ = (reader.torn(), reader.metadata());
});
