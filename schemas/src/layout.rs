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
//!   .lock                            held by the recorder writing into it
//! ```
//!
//! A chunk's journal is removed only after its Parquet file is renamed into
//! place, so a reader that sees both `<name>.parquet` and
//! `.<name>.parquet.journal` must read only the Parquet file.

use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::{KeyValue, SortingColumn};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use crate::Table;

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

/// Rows the recorder gathers (and journals) before it sorts them and writes
/// them as one Parquet row group: large enough for good compression, small enough to
/// bound the writer's memory (about 60 bytes a row, per table).
pub const ROW_GROUP_ROWS: usize = 32 * 1024;

/// `cpu_sample`'s and `stack`'s bound instead: a minute of 999 Hz on 2
/// CPUs (120 k samples) in one row group, so the dictionary of 64-bit
/// ids (8 bytes an id when they were hashes) is written once a chunk,
/// not four times. `cpu_sample.stack_id` took 1.47-1.54 B a sample against
/// 1.55-1.75 (BENCHMARKS.md, "Bytes per sample on a steady process");
/// and a parallel build's `stack` file (a minute's stacks: 87 k rows, three
/// row groups, each with its own dictionary of the frames' ids) took 18 %
/// fewer bytes in one (BENCHMARKS.md, "One row group a chunk for `stack`").
/// Both tables' rows are small (`stack`: three fixed-width columns), and at
/// the default 49 Hz a minute of 40 CPUs fits.
pub const LARGE_ROW_GROUP_ROWS: usize = 128 * 1024;

/// How many rows of `table` make a row group of a recorded chunk.
pub fn row_group_rows(table: &Table) -> usize {
    if [crate::tables::CPU_SAMPLE.name, crate::tables::STACK.name].contains(&table.name) {
        LARGE_ROW_GROUP_ROWS
    } else {
        ROW_GROUP_ROWS
    }
}

/// How every chunk is encoded, by the recorder and by `hindsight slice`:
/// delta encoding for the timestamp (consecutive events differ by little),
/// dictionaries elsewhere but where they save nothing
/// ([`a_dictionary_saves_nothing`]), zstd level 3 on top (higher levels
/// gain nothing here; level 1 wrote a `sched_switch` row 5-20 % faster
/// and 1-4 % larger, not taken), chunk-level statistics (readers prune by
/// `ts`) but on names not sorted by ([`a_min_and_max_prune_nothing`]), the
/// table's sort key declared, and [`file_metadata`] as
/// key-value metadata. Row groups end only where the writer flushes: each
/// is one sorted batch.
pub fn writer_properties(
    table: &Table,
    host: &str,
    boot_id: &str,
    recorder_version: &str,
) -> WriterProperties {
    let sorting: Vec<SortingColumn> = table
        .sort_key
        .iter()
        .map(|name| SortingColumn {
            column_idx: table.index(name) as i32,
            descending: false,
            nulls_first: false,
        })
        .collect();
    let metadata = file_metadata(table.name, host, boot_id, recorder_version)
        .into_iter()
        .map(|(k, v)| KeyValue::new(k, v))
        .collect();
    let ts = ColumnPath::from("ts");
    let mut builder = WriterProperties::builder()
        .set_compression(Compression::ZSTD(
            ZstdLevel::try_new(zstd_level(table)).expect("valid zstd level"),
        ))
        .set_column_dictionary_enabled(ts.clone(), false)
        .set_column_encoding(ts, Encoding::DELTA_BINARY_PACKED)
        .set_statistics_enabled(EnabledStatistics::Chunk);
    if table.group == crate::derived::DERIVED_GROUP {
        // Derived rows are sorted by `ts` only: their ends and durations
        // are near-unique numbers that dictionaries cannot shrink (4x the
        // raw events' bytes with them, measured), and page statistics let
        // a time window skip most of each row group.
        for column in table.columns.iter().filter(|c| {
            matches!(
                c.kind,
                crate::ColumnType::Timestamp | crate::ColumnType::Int64
            )
        }) {
            let path = ColumnPath::from(column.name);
            builder = builder
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_encoding(path, Encoding::DELTA_BINARY_PACKED);
        }
        builder = builder.set_statistics_enabled(EnabledStatistics::Page);
    } else {
        for column in table
            .columns
            .iter()
            .filter(|c| a_dictionary_saves_nothing(table, c))
        {
            builder = builder.set_column_dictionary_enabled(ColumnPath::from(column.name), false);
        }
        for &(_, column) in STEPPING.iter().filter(|(t, _)| *t == table.name) {
            builder = builder
                .set_column_encoding(ColumnPath::from(column), Encoding::DELTA_BINARY_PACKED);
        }
        for column in table
            .columns
            .iter()
            .filter(|c| a_min_and_max_prune_nothing(table, c))
        {
            builder = builder.set_column_statistics_enabled(
                ColumnPath::from(column.name),
                EnabledStatistics::None,
            );
        }
        // A row group's column in one data page (up to its 1 MiB), not one
        // per 20,000 rows: nothing reads these tables by page, and fewer,
        // larger pages took 1-2 % fewer bytes (BENCHMARKS.md, "Fewer
        // dictionaries").
        builder = builder.set_data_page_row_count_limit(usize::MAX);
    }
    builder
        .set_max_row_group_row_count(Some(usize::MAX))
        .set_sorting_columns(Some(sorting))
        .set_key_value_metadata(Some(metadata))
        .build()
}

/// zstd's level for a table's pages. The reference tables' rows are
/// written once each and are mostly names (a Rust function's demangled
/// name runs to hundreds of bytes): a higher level takes fewer of their
/// bytes (a Rust build's `frame` and `stack`: 6.7 % fewer at 9 than at 3)
/// for no write time that could be told apart (9-10 ms for their 89 KB).
/// Not 9, but 6: zstd's context for a 1 MiB page is 12 MiB at 9 (4.3 at
/// 6, 2.5 at 3), allocated and cleared as each such page is compressed,
/// and beside a test suite a `frame` chunk's dictionary page at 9 was the
/// recorder's resident peak (BENCHMARKS.md, "Two peaks between samples").
/// The event tables' millions of rows keep the cheaper level.
fn zstd_level(table: &Table) -> i32 {
    if crate::tables::REFERENCE_TABLES.contains(&table.name) {
        6
    } else {
        3
    }
}

/// Strings a table is not sorted by: a row group holds threads of every
/// name, so its least and greatest (`bash` to `systemd`) bracket nearly any
/// name asked for and skip nothing, while keeping them compares every row's
/// string twice: writing a `sched_switch` row took 14 % less time without
/// (BENCHMARKS.md, "The writer's heap, names' statistics and the ring
/// thread's names"). Strings in the sort key (`counter.name`) keep theirs,
/// which do skip row groups.
fn a_min_and_max_prune_nothing(table: &Table, column: &crate::Column) -> bool {
    matches!(
        column.kind,
        crate::ColumnType::Name | crate::ColumnType::Text
    ) && !table.sort_key.contains(&column.name)
}

/// Integer columns whose rows, in their table's order, step by little:
/// delta encoding writes the steps in a few bits, where zstd over the
/// plain values kept about two bytes a row. A stack's id (ids are counted
/// up, each repeated for its frames) and a frame's addresses and offsets
/// (frames are in code order): a parallel build's `stack` and `frame`
/// files took 5.8 KB (4 %) fewer of their 116 KB (BENCHMARKS.md,
/// "Numbered ids"). A frame's id too: in code order its steps are not
/// small, but a chunk's new frames were numbered together, so they span a
/// few thousand ids, 13 bits where zstd kept 2 bytes (a Rust build's
/// `frame.frame_id` 15 % fewer bytes, BENCHMARKS.md, "Runs that recur").
const STEPPING: &[(&str, &str)] = &[
    ("stack", "stack_id"),
    ("frame", "frame_id"),
    ("frame", "address"),
    ("frame", "file_offset"),
    ("frame", "elf_address"),
];

/// Columns whose repeats zstd finds better than a dictionary does. In a
/// stack's frame ids and depths, runs that recur whole (the callers many
/// stacks share) are one match over plain 8-byte values, while a
/// dictionary's indices, bit-packed to 12 or 13 bits, fall at no byte
/// boundary and hide them; a frame's function name repeats in neighbouring
/// rows (the frames of one function, in code order), as cheap to zstd as an
/// index. Without: a Rust build's `stack` took 32 % fewer bytes and
/// `frame.function` 4 %, a steady process's 32 % and 10 % (BENCHMARKS.md,
/// "Runs that recur").
const ZSTD_FINDS_THE_REPEATS: &[(&str, &str)] = &[
    ("stack", "frame_id"),
    ("stack", "depth"),
    ("frame", "function"),
];

/// Columns no two rows of a file share: a frame is written once a
/// recording.
const NEW_IN_EVERY_ROW: &[(&str, &str)] = &[("frame", "frame_id")];

/// Columns a dictionary makes no smaller: a table's leading sort column
/// (in a row group, runs of one CPU, pid or stack), kernel priorities (a
/// few values, nearly all one), addresses and file offsets (nearly every
/// one new), identities no two rows share ([`NEW_IN_EVERY_ROW`]), and
/// those whose repeats zstd finds ([`ZSTD_FINDS_THE_REPEATS`]). A
/// dictionary costs a hash per row: without one, writing a `sched_switch`
/// or `sched_wakeup` row took 10-14 % less time, a `page_fault` row's
/// address took 14 % fewer bytes (BENCHMARKS.md, "Fewer dictionaries").
/// Derived tables have their own rule ([`writer_properties`]).
fn a_dictionary_saves_nothing(table: &Table, column: &crate::Column) -> bool {
    use crate::ColumnType::{Int32, Int64, UInt64};
    if ZSTD_FINDS_THE_REPEATS.contains(&(table.name, column.name)) {
        return true;
    }
    match column.kind {
        Int32 | Int64 => {
            table.sort_key.first() == Some(&column.name)
                || column.unit == crate::tables::KERNEL_PRIORITY
                || NEW_IN_EVERY_ROW.contains(&(table.name, column.name))
        }
        UInt64 => true,
        _ => false,
    }
}

/// File name of a chunk: start time (UTC, sortable) and a sequence number
/// that keeps names unique within one recorder run.
pub fn chunk_file_name(start_utc_ns: i64, seq: u64) -> String {
    let start = crate::time::compact_utc(start_utc_ns);
    format!("{start}-{seq:06}.{PARQUET_EXT}")
}

/// The start time (UTC ns) a closed chunk's name carries; `None` for a
/// name [`chunk_file_name`] did not produce.
pub fn chunk_start_ns(file_name: &str) -> Option<i64> {
    let stem = file_name.strip_suffix(&format!(".{PARQUET_EXT}"))?;
    let (start, seq) = stem.rsplit_once('-')?;
    seq.parse::<u64>().ok()?;
    crate::time::parse_compact_utc(start)
}

/// Lock file at the root of a recording, held (`flock`) by the one recorder
/// writing into it and holding its pid; the kernel drops the lock when that
/// process dies, so a stale file never blocks the next recorder.
pub const LOCK_FILE: &str = ".lock";

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
    fn sorted_columns_priorities_and_addresses_go_without_dictionaries() {
        let dictionary = |table: &Table, column: &str| {
            writer_properties(table, "h", "b", "v").dictionary_enabled(&ColumnPath::from(column))
        };
        let switch = &crate::tables::SCHED_SWITCH;
        for column in ["ts", "cpu", "prev_prio", "next_prio"] {
            assert!(!dictionary(switch, column), "{column}");
        }
        for column in ["prev_tid", "next_pid", "prev_comm", "stack_id"] {
            assert!(dictionary(switch, column), "{column}");
        }
        let wakeup = &crate::tables::SCHED_WAKEUP;
        assert!(!dictionary(wakeup, "prio"));
        // Not sorted by: a dictionary packs its few values in bits.
        assert!(dictionary(wakeup, "target_cpu"));
        assert!(!dictionary(&crate::tables::TASK_STAT, "pid"));
        assert!(!dictionary(&crate::tables::PAGE_FAULT, "address"));
        assert!(dictionary(&crate::tables::PAGE_FAULT, "tid"));
        assert!(!dictionary(&crate::tables::STACK, "stack_id"));
        assert!(!dictionary(&crate::tables::STACK, "frame_id"));
        assert!(!dictionary(&crate::tables::STACK, "depth"));
        assert!(!dictionary(&crate::tables::FRAME, "function"));
        assert!(dictionary(&crate::tables::FRAME, "module"));
        assert!(!dictionary(&crate::tables::FRAME, "frame_id"));
        assert!(dictionary(&crate::tables::CPU_SAMPLE, "stack_id"));
        let encoding = |table: &Table, column: &str| {
            writer_properties(table, "h", "b", "v").encoding(&ColumnPath::from(column))
        };
        assert_eq!(
            encoding(&crate::tables::STACK, "stack_id"),
            Some(Encoding::DELTA_BINARY_PACKED)
        );
        assert_eq!(
            encoding(&crate::tables::FRAME, "elf_address"),
            Some(Encoding::DELTA_BINARY_PACKED)
        );
        assert_eq!(encoding(&crate::tables::STACK, "frame_id"), None);
        for (table, column) in STEPPING {
            let table = crate::TABLES.iter().find(|t| t.name == *table).unwrap();
            assert!(table.columns.iter().any(|c| c.name == *column), "{column}");
            assert!(!dictionary(table, column), "{column}");
        }
        // Derived tables have their own rule.
        assert!(dictionary(&crate::derived::CPU_SLICE, "prio"));
        // And keep pages a time window can skip.
        let pages =
            |table: &Table| writer_properties(table, "h", "b", "v").data_page_row_count_limit();
        assert_eq!(pages(switch), usize::MAX);
        assert!(pages(&crate::derived::RUNQ_WAIT) < usize::MAX);
    }

    #[test]
    fn names_not_sorted_by_go_without_statistics() {
        let statistics = |table: &Table, column: &str| {
            writer_properties(table, "h", "b", "v").statistics_enabled(&ColumnPath::from(column))
        };
        let switch = &crate::tables::SCHED_SWITCH;
        assert_eq!(statistics(switch, "prev_comm"), EnabledStatistics::None);
        assert_eq!(statistics(switch, "prev_state"), EnabledStatistics::None);
        assert_eq!(statistics(switch, "prev_tid"), EnabledStatistics::Chunk);
        assert_eq!(statistics(switch, "ts"), EnabledStatistics::Chunk);
        assert_eq!(
            statistics(&crate::tables::PROCESS, "cmdline"),
            EnabledStatistics::None
        );
        // Names sorted by keep the statistics that skip row groups.
        assert_eq!(
            statistics(&crate::tables::COUNTER, "name"),
            EnabledStatistics::Chunk
        );
        // Derived tables keep their page statistics.
        assert_eq!(
            statistics(&crate::derived::CPU_SLICE, "ts"),
            EnabledStatistics::Page
        );
    }

    #[test]
    fn chunk_names_sort_by_time_and_hide_temporaries() {
        let a = chunk_file_name(1_700_000_000_000_000_000, 1);
        let b = chunk_file_name(1_700_000_060_000_000_000, 0);
        assert_eq!(a, "20231114T221320.000Z-000001.parquet");
        assert!(a < b);
        assert!(is_chunk_file(&a));
        assert!(!is_chunk_file(&temp_file_name(&a)));
        assert!(!is_chunk_file("recording.json"));
        assert_eq!(chunk_start_ns(&a), Some(1_700_000_000_000_000_000));
        assert_eq!(chunk_start_ns("notes.parquet"), None);
        assert_eq!(chunk_start_ns(&temp_file_name(&a)), None);
        let journal = journal_file_name(&a);
        assert!(!is_chunk_file(&journal));
        assert_eq!(chunk_of_journal(&journal), Some(a.as_str()));
        assert_eq!(chunk_of_journal(&temp_file_name(&a)), None);
        assert_eq!(chunk_of_journal(".x.journal"), None);
    }
}
