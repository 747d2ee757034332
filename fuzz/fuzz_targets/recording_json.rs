//! `recording.json`, which the recorder reads when it continues a
//! recording and the analyzer when it opens one.
#![no_main]

use hindsight_schemas::meta::RecordingMeta;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(meta) = RecordingMeta::from_json(text) {
        let again = RecordingMeta::from_json(&meta.to_json()).expect("what we write reads back");
        assert_eq!(again.sessions.len(), meta.sessions.len());
        let _ = meta.latest();
    }
});
