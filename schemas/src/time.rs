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

/// The inverse of [`compact_utc`]; `None` for anything it did not write.
pub fn parse_compact_utc(text: &str) -> Option<i64> {
    chrono::NaiveDateTime::parse_from_str(text, "%Y%m%dT%H%M%S%.3fZ")
        .ok()?
        .and_utc()
        .timestamp_nanos_opt()
}

/// Units a duration may be written in; longer suffixes first, so `ms` is
/// not read as `m` then `s`.
const DURATION_UNITS: &[(&str, f64)] = &[
    ("min", 60e9),
    ("ms", 1e6),
    ("us", 1e3),
    ("ns", 1.0),
    ("d", 86_400e9),
    ("h", 3_600e9),
    ("m", 60e9),
    ("s", 1e9),
];

/// A size as both programs' flags take it: `4096`, `64K`, `8M`, `1G`
/// (binary multiples; `KiB` style suffixes too).
pub fn parse_size_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: u64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a size"))?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        other => return Err(format!("'{text}': unknown size unit '{other}'")),
    };
    value
        .checked_shl(shift)
        .filter(|v| v >> shift == value)
        .ok_or_else(|| format!("'{text}' is too large"))
}

/// Parses a duration the way both programs' flags take it: one or more
/// `<number><unit>` terms (`10s`, `1m30s`, `1.5h`, `250ms`), units `ns`,
/// `us`, `ms`, `s`, `m`/`min`, `h`, `d`; a bare number is seconds. Returns
/// nanoseconds, always positive.
pub fn parse_duration_ns(text: &str) -> Result<i64, String> {
    let bad = || format!("'{text}' is not a duration (examples: 10s, 1m30s, 500ms, 2h, 7d)");
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let scale = if rest.is_empty() && total == 0.0 {
            1e9
        } else {
            let &(unit, scale) = DURATION_UNITS
                .iter()
                .find(|(u, _)| rest.starts_with(u))
                .ok_or_else(bad)?;
            rest = &rest[unit.len()..];
            scale
        };
        total += number * scale;
    }
    if !(total.is_finite() && total >= 1.0 && total < i64::MAX as f64) {
        return Err(format!("'{text}' must be a positive duration"));
    }
    Ok(total.round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_people_write_them() {
        let cases = [
            ("30s", 30_000_000_000),
            ("500ms", 500_000_000),
            ("10m", 600_000_000_000),
            ("1m30s", 90_000_000_000),
            ("1.5h", 5_400_000_000_000),
            ("2min", 120_000_000_000),
            ("1d", 86_400_000_000_000),
            ("7", 7_000_000_000),
            ("7ns", 7),
        ];
        for (text, ns) in cases {
            assert_eq!(parse_duration_ns(text), Ok(ns), "{text}");
        }
        for bad in ["", "s", "-1s", "10x", "0", "0s", "1s2", "99999999999d"] {
            assert!(parse_duration_ns(bad).is_err(), "{bad:?}");
        }
    }

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
