//! Where things live in a recording directory, and what every file says
//! about itself.
//!
//! ```text
//! rec/
//!   recording.json                   the recording's self-description (see meta)
//!   <table>/<start>-<seq>.parquet    closed chunks, one folder a table
//!   <table>/.<start>-<seq>.parquet.tmp   the chunk being written; never read
//!   <table>/.<start>-<seq>.parquet.journal   the same chunk's rows as an Arrow
//!                                    IPC journal (see journal): what survives a crash
//! ```
//!
//! A chunk's journal is removed only after its Parquet file is renamed into
//! place, so a reader that sees both `<name>.parquet` and
//! `.<name>.parquet.journal` must read only the Parquet file.

/// The self-description at the root of every recording.
pub const RECORDING_FILE: &str = "recording.json";

/// Extension of closed, readable chunks.
pub const PARQUET_EXT: &str = "parquet";

/// Suffix of files still being written. Readers skip them; they become a
/// `.parquet` only by an atomic rename after close and fsync.
pub const TEMP_SUFFIX: &str = ".tmp";

/// Suffix of a chunk's journal, the crash-safe copy of its rows while it is open.
pub const JOURNAL_SUFFIX: &str = ".journal";

/// Parquet key-value metadata keys, so a file mailed alone still says what it is.
pub mod key {
    pub const SCHEMA_VERSION: &str = "hindsight.schema_version";
    pub const TABLE: &str = "hindsight.table";
    pub const HOST: &str = "hindsight.host";
    pub const BOOT_ID: &str = "hindsight.boot_id";
    pub const RECORDER_VERSION: &str = "hindsight.recorder_version";
}

/// File name of a chunk: start time (UTC, sortable) and a sequence number
/// that keeps names unique within one recorder run.
pub fn chunk_file_name(start_utc_ns: i64, seq: u64) -> String {
    let start = crate::time::compact_utc(start_utc_ns);
    format!("{start}-{seq:06}.{PARQUET_EXT}")
}

/// The temporary name a chunk is written under before its rename.
pub fn temp_file_name(final_name: &str) -> String {
    format!(".{final_name}{TEMP_SUFFIX}")
}

/// The journal kept next to an open chunk named `final_name`.
pub fn journal_file_name(final_name: &str) -> String {
    format!(".{final_name}{JOURNAL_SUFFIX}")
}

/// The chunk a journal belongs to (`.<name>.parquet.journal` → `<name>.parquet`),
/// or None when `file_name` is not a journal.
pub fn chunk_of_journal(file_name: &str) -> Option<&str> {
    file_name
        .strip_prefix('.')?
        .strip_suffix(JOURNAL_SUFFIX)
        .filter(|chunk| is_chunk_file(chunk))
}

/// Whether a directory entry is a closed chunk that readers should open.
pub fn is_chunk_file(file_name: &str) -> bool {
    !file_name.starts_with('.') && file_name.ends_with(&format!(".{PARQUET_EXT}"))
}

/// The key-value metadata every Parquet file of a recording carries.
pub fn file_metadata(
    table: &str,
    host: &str,
    boot_id: &str,
    recorder_version: &str,
) -> Vec<(String, String)> {
    vec![
        (
            key::SCHEMA_VERSION.into(),
            crate::SCHEMA_VERSION.to_string(),
        ),
        (key::TABLE.into(), table.into()),
        (key::HOST.into(), host.into()),
        (key::BOOT_ID.into(), boot_id.into()),
        (key::RECORDER_VERSION.into(), recorder_version.into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_names_sort_by_time_and_hide_temporaries() {
        let a = chunk_file_name(1_700_000_000_000_000_000, 1);
        let b = chunk_file_name(1_700_000_060_000_000_000, 0);
        assert_eq!(a, "20231114T221320.000Z-000001.parquet");
        assert!(a < b);
        assert!(is_chunk_file(&a));
        assert!(!is_chunk_file(&temp_file_name(&a)));
        assert!(!is_chunk_file("recording.json"));
        let journal = journal_file_name(&a);
        assert!(!is_chunk_file(&journal));
        assert_eq!(chunk_of_journal(&journal), Some(a.as_str()));
        assert_eq!(chunk_of_journal(&temp_file_name(&a)), None);
        assert_eq!(chunk_of_journal(".x.journal"), None);
    }
}
