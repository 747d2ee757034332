//! Draining the `cache` group's per-process page-cache counters into
//! `page_cache` rows, once per interval.
//!
//! The kernel side (`bpf/cache.bpf.c`) adds to one `hs_cache_counts` per
//! process (tgid) in a hash map; nothing goes through a ring. Each drain
//! reads and deletes every entry, so a row holds what a process did since
//! the previous drain, and a process that did nothing has no row.
//!
//! The race we accept: the BPF programs add to an entry in place, so an
//! update that looked the entry up just before `lookup_and_delete` removed
//! it lands in the removed copy and is lost — a window of nanoseconds per
//! process per interval. A count is never seen twice. (Swapping between two
//! maps would narrow the window but not close it without waiting for every
//! CPU to leave the programs, and would double the memory.)

use libbpf_rs::MapCore;
use plain::Plain;

use crate::{bpf::cache::types::hs_cache_counts, rows::PageCacheRows};

// SAFETY: the generated struct is repr(C), made only of integers and a byte
// array, so every bit pattern is a valid value.
unsafe impl Plain for hs_cache_counts {}

// The layout this module was written against (bpf/events.h).
const _: () = assert!(size_of::<hs_cache_counts>() == 48);

/// Reads and deletes every entry of the `cache_counts` map, appending one
/// row per process with a nonzero count, stamped `ts_utc_ns` (the end of the
/// interval). Returns the number of rows appended.
pub fn drain_page_cache(
    map: &dyn MapCore,
    ts_utc_ns: i64,
    rows: &mut PageCacheRows,
) -> anyhow::Result<usize> {
    // Keys first: iterating a hash map while deleting from it restarts the
    // walk, and new processes keep arriving while we drain.
    let keys: Vec<Vec<u8>> = map.keys().collect();
    let mut appended = 0;
    for key in keys {
        let Some(value) = map.lookup_and_delete(&key)? else {
            continue;
        };
        let (Ok(pid), Ok(counts)) = (
            <[u8; 4]>::try_from(key.as_slice()),
            plain::from_bytes::<hs_cache_counts>(&value),
        ) else {
            anyhow::bail!(
                "cache_counts entry of {}+{} bytes does not match hs_cache_counts",
                key.len(),
                value.len()
            );
        };
        if push_counts(u32::from_ne_bytes(pid), counts, ts_utc_ns, rows) {
            appended += 1;
        }
    }
    Ok(appended)
}

/// Appends one process's counts as the kernel counted them; false when all
/// are zero. (Readahead adds pages before anyone reads them, so in one
/// interval a process can have more misses than accesses: the report, not
/// the recording, clamps hits at zero.)
pub fn push_counts(
    pid: u32,
    counts: &hs_cache_counts,
    ts_utc_ns: i64,
    rows: &mut PageCacheRows,
) -> bool {
    if counts.accesses == 0 && counts.misses == 0 && counts.dirtied == 0 && counts.fault_around == 0
    {
        return false;
    }
    // SAFETY: i8 and u8 have the same size and alignment; only reinterpreted.
    let comm =
        unsafe { std::slice::from_raw_parts(counts.comm.as_ptr().cast::<u8>(), counts.comm.len()) };
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    rows.ts.append_value(ts_utc_ns);
    rows.pid.append_value(pid as i32);
    rows.comm
        .append_value(String::from_utf8_lossy(&comm[..end]));
    rows.accesses.append_value(clamp(counts.accesses));
    rows.misses.append_value(clamp(counts.misses));
    rows.dirtied.append_value(clamp(counts.dirtied));
    rows.fault_around.append_value(clamp(counts.fault_around));
    true
}

fn clamp(pages: u64) -> i64 {
    i64::try_from(pages).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use arrow::{
        array::AsArray,
        datatypes::{Int32Type, Int64Type},
        record_batch::RecordBatch,
    };
    use libbpf_rs::{MapFlags, MapHandle, MapType};

    use super::*;

    fn counts(accesses: u64, misses: u64, dirtied: u64, name: &str) -> hs_cache_counts {
        let mut c = hs_cache_counts {
            accesses,
            misses,
            dirtied,
            fault_around: accesses / 2,
            ..Default::default()
        };
        for (o, b) in c.comm.iter_mut().zip(name.bytes()) {
            *o = b as i8;
        }
        c
    }

    fn column(b: &RecordBatch, name: &str) -> Vec<i64> {
        b.column_by_name(name)
            .unwrap()
            .as_primitive::<Int64Type>()
            .values()
            .to_vec()
    }

    #[test]
    fn counts_become_rows_as_the_kernel_counted_them() {
        let mut rows = PageCacheRows::new();
        let cases = [
            (10, counts(100, 40, 0, "reader")),
            (11, counts(1, 32, 0, "readahead")), // misses > accesses: kept
            (12, counts(0, 0, 5, "writer")),
            (13, counts(0, 0, 0, "idle")), // no row
        ];
        let pushed: Vec<bool> = cases
            .iter()
            .map(|(pid, c)| push_counts(*pid, c, 7, &mut rows))
            .collect();
        assert_eq!(pushed, [true, true, true, false]);
        let b = rows.finish();
        assert_eq!(column(&b, "accesses"), [100, 1, 0]);
        assert_eq!(column(&b, "fault_around"), [50, 0, 0]);
        assert_eq!(column(&b, "misses"), [40, 32, 0]);
        assert_eq!(column(&b, "dirtied"), [0, 0, 5]);
        let pids = b.column_by_name("pid").unwrap().as_primitive::<Int32Type>();
        assert_eq!(pids.values().to_vec(), [10, 11, 12]);
        let comm = b
            .column_by_name("comm")
            .unwrap()
            .as_dictionary::<Int32Type>();
        let names = comm.values().as_string::<i32>();
        assert_eq!(names.value(comm.keys().value(1) as usize), "readahead");
    }

    /// The drain over a real kernel hash map of the same shape: every entry
    /// becomes a row and the map is left empty.
    #[test]
    fn drain_reads_and_empties_the_map() {
        let map = MapHandle::create(
            MapType::Hash,
            Some("hs_test_cache"),
            4,
            size_of::<hs_cache_counts>() as u32,
            64,
            &libbpf_rs::libbpf_sys::bpf_map_create_opts {
                sz: size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
                ..Default::default()
            },
        )
        .unwrap();
        for pid in 1u32..=5 {
            let c = counts(pid as u64 * 10, pid as u64, 0, "p");
            // SAFETY: Plain data, copied out as bytes.
            let value = unsafe { plain::as_bytes(&c) };
            map.update(&pid.to_ne_bytes(), value, MapFlags::ANY)
                .unwrap();
        }
        let mut rows = PageCacheRows::new();
        assert_eq!(drain_page_cache(&map, 1, &mut rows).unwrap(), 5);
        assert_eq!(map.keys().count(), 0);
        let b = rows.finish();
        let mut accesses = column(&b, "accesses");
        accesses.sort();
        assert_eq!(accesses, [10, 20, 30, 40, 50]);
        assert_eq!(drain_page_cache(&map, 2, &mut rows).unwrap(), 0);
    }
}
