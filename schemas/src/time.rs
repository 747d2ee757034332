//! Time: the kernel stamps events with CLOCK_BOOTTIME; recordings store UTC.
//!
//! The offset between the two moves (NTP slews the wall clock, suspend does
//! not stop the boot clock), so the recorder re-reads it at every chunk and
//! keeps each reading in recording.json. This is the one place that turns a
//! boot-clock reading into UTC.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

/// `realtime - boottime` at one moment, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockOffset {
    /// Boot-clock reading when the offset was measured.
    pub at_boot_ns: u64,
    /// Add to a boot-clock reading to get UTC nanoseconds since the epoch.
    pub offset_ns: i64,
}

impl ClockOffset {
    /// UTC nanoseconds since the epoch of a boot-clock reading.
    pub fn to_utc_ns(self, boot_ns: u64) -> i64 {
        (boot_ns as i64).saturating_add(self.offset_ns)
    }
}

/// RFC 3339 with nanoseconds, the way every hindsight output prints a time.
pub fn rfc3339(utc_ns: i64) -> String {
    DateTime::<Utc>::from_timestamp_nanos(utc_ns).to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// A sortable, file-name-safe UTC time: `20231114T221320.000Z`.
pub fn compact_utc(utc_ns: i64) -> String {
    DateTime::<Utc>::from_timestamp_nanos(utc_ns)
        .format("%Y%m%dT%H%M%S%.3fZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_clock_converts_with_offset() {
        let offset = ClockOffset {
            at_boot_ns: 5_000,
            offset_ns: 1_700_000_000_000_000_000,
        };
        assert_eq!(offset.to_utc_ns(1_000_000_000), 1_700_000_001_000_000_000);
        assert_eq!(rfc3339(1_700_000_001_000_000_000), "2023-11-14T22:13:21Z");
        assert_eq!(
            rfc3339(1_700_000_001_000_000_500),
            "2023-11-14T22:13:21.000000500Z"
        );
    }
}
