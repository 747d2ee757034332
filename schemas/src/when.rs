//! The one parser of the times `--from` and `--to` take, in every command.
//!
//! A time is read in two steps: [`When::parse`] checks the text when the
//! flags are parsed (a typo fails before any file is opened), and
//! [`When::resolve`] turns it into UTC nanoseconds once the recording's
//! time range is known, since most forms are relative to the recording:
//!
//! - RFC 3339, any offset: `2024-05-01T12:00:00Z`, `2024-05-01T14:00:00.5+02:00`;
//! - a UTC time of day, `HH:MM` or `HH:MM:SS[.fff]`, on the UTC date of the
//!   recording's last event or the day before, whichever puts it nearer the
//!   recording (inside it where it can be): `23:30` in a recording from
//!   22:00 to 02:00 is the first evening, and a `--to` a few seconds past the
//!   last event stays on its day;
//! - `-DURATION`: that long before the recording's last event (`-15m`, `-2h`, `-90s`);
//! - `+DURATION`: that long after the recording's first event (`+10m`).
//!
//! Durations are those of every flag (`crate::time::parse_duration_ns`).
//! The recording's first and last event are those of its tables' footers,
//! over every recording named (the analyzer's `Recording::time_range`).

use crate::time::parse_duration_ns;
use chrono::{DateTime, NaiveTime};

/// The `--help` text every `--from`/`--to` shares.
pub const HELP: &str = "RFC 3339 (2024-05-01T12:00:00Z); HH:MM[:SS] UTC on the day of the \
recording's last event, or the day before when that is nearer the recording; -15m before the \
last event; +10m after the first";

/// A time as given on the command line, before the recording is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// UTC nanoseconds.
    Absolute(i64),
    /// Nanoseconds since midnight UTC.
    TimeOfDay(i64),
    /// Nanoseconds before the last event.
    BeforeEnd(i64),
    /// Nanoseconds after the first event.
    AfterStart(i64),
}

const DAY_NS: i64 = 86_400_000_000_000;

impl When {
    /// Checks the syntax of `text`; the error is one line that shows the forms.
    pub fn parse(text: &str) -> Result<When, String> {
        let text = text.trim();
        let duration = |rest: &str| {
            parse_duration_ns(rest).map_err(|e| format!("{text:?}: {e}; a time is one of: {HELP}"))
        };
        if let Some(rest) = text.strip_prefix('-') {
            return duration(rest).map(When::BeforeEnd);
        }
        if let Some(rest) = text.strip_prefix('+') {
            return duration(rest).map(When::AfterStart);
        }
        if let Ok(t) = DateTime::parse_from_rfc3339(text) {
            return t
                .timestamp_nanos_opt()
                .map(When::Absolute)
                .ok_or_else(|| format!("{text:?}: out of range"));
        }
        let time_of_day = ["%H:%M", "%H:%M:%S%.f"]
            .iter()
            .find_map(|format| NaiveTime::parse_from_str(text, format).ok());
        if let Some(t) = time_of_day {
            let ns = t.signed_duration_since(NaiveTime::MIN).num_nanoseconds();
            return Ok(When::TimeOfDay(ns.expect("a day fits in i64 ns")));
        }
        Err(format!("{text:?}: not a time; a time is one of: {HELP}"))
    }

    /// UTC nanoseconds, given the first and last event of the recording
    /// (`None` when it has none, which only absolute times can do without).
    pub fn resolve(self, range: Option<(i64, i64)>) -> Result<i64, String> {
        if let When::Absolute(t) = self {
            return Ok(t);
        }
        let (start, end) = range.ok_or_else(|| {
            "the recording has no events, so only RFC 3339 times can be given".to_string()
        })?;
        Ok(match self {
            When::Absolute(_) => unreachable!("returned above"),
            When::BeforeEnd(d) => end.saturating_sub(d),
            When::AfterStart(d) => start.saturating_add(d),
            // Saturating: the range comes from files' statistics, which a
            // damaged file can set to anything (the fuzzer's find).
            When::TimeOfDay(of_day) => {
                let midnight = end.div_euclid(DAY_NS).saturating_mul(DAY_NS);
                let t = midnight.saturating_add(of_day);
                let away = |t: i64| start.saturating_sub(t).max(t.saturating_sub(end)).max(0);
                let day_before = t.saturating_sub(DAY_NS);
                if away(day_before) < away(t) {
                    day_before
                } else {
                    t
                }
            }
        })
    }
}

/// Resolves an optional `--from`/`--to` pair and checks that `from < to`.
pub fn resolve_window(
    from: Option<When>,
    to: Option<When>,
    range: Option<(i64, i64)>,
) -> Result<(Option<i64>, Option<i64>), String> {
    let from = from.map(|w| w.resolve(range)).transpose()?;
    let to = to.map(|w| w.resolve(range)).transpose()?;
    if let (Some(f), Some(t)) = (from, to) {
        if f >= t {
            return Err(format!(
                "--from {} is not before --to {}",
                crate::time::rfc3339(f),
                crate::time::rfc3339(t)
            ));
        }
    }
    Ok((from, to))
}

/// For clap: `value_parser = when::parse`.
pub fn parse(text: &str) -> Result<When, String> {
    When::parse(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2023-11-14T22:13:20Z.
    const T0: i64 = 1_700_000_000_000_000_000;
    const S: i64 = 1_000_000_000;

    fn at(text: &str, range: (i64, i64)) -> Result<String, String> {
        When::parse(text)?
            .resolve(Some(range))
            .map(crate::time::rfc3339)
    }

    #[test]
    fn every_form_resolves_against_the_recording() {
        // A recording from 22:13:20 to 22:43:20 UTC, 2023-11-14.
        let range = (T0, T0 + 1800 * S);
        let cases = [
            ("2023-11-14T22:20:00Z", "2023-11-14T22:20:00Z"),
            ("2023-11-15T00:20:00.5+02:00", "2023-11-14T22:20:00.500Z"),
            ("-15m", "2023-11-14T22:28:20Z"),
            ("-90s", "2023-11-14T22:41:50Z"),
            ("-1m30s", "2023-11-14T22:41:50Z"),
            ("+10m", "2023-11-14T22:23:20Z"),
            ("22:30", "2023-11-14T22:30:00Z"),
            ("22:30:15", "2023-11-14T22:30:15Z"),
            ("22:30:15.25", "2023-11-14T22:30:15.250Z"),
            ("22:43:20", "2023-11-14T22:43:20Z"),
            // Just after the last event: still its day, not the day before.
            ("22:50", "2023-11-14T22:50:00Z"),
            ("08:00", "2023-11-14T08:00:00Z"),
        ];
        for (text, expected) in cases {
            assert_eq!(at(text, range).as_deref(), Ok(expected), "{text}");
        }
    }

    #[test]
    fn time_of_day_across_midnight_takes_the_end_day() {
        // 23:00 on the 14th to 01:00 on the 15th.
        let end = 1_700_006_400 * S; // 2023-11-15T00:00:00Z
        let range = (end - 3600 * S, end + 3600 * S);
        assert_eq!(at("00:30", range).unwrap(), "2023-11-15T00:30:00Z");
        assert_eq!(at("23:30", range).unwrap(), "2023-11-14T23:30:00Z");
    }

    #[test]
    fn bad_times_are_one_line_errors() {
        for bad in [
            "",
            "yesterday",
            "25:00",
            "12",
            "-",
            "-15x",
            "+",
            "12:60",
            "2023-11-14",
        ] {
            let err = When::parse(bad).expect_err(bad);
            assert!(!err.contains('\n'), "{err}");
            assert!(err.contains("RFC 3339"), "{bad:?}: {err}");
        }
        assert!(When::parse("-5m")
            .unwrap()
            .resolve(None)
            .unwrap_err()
            .contains("no events"));
        assert_eq!(
            When::parse("2023-11-14T22:13:20Z").unwrap().resolve(None),
            Ok(T0)
        );
    }

    #[test]
    fn windows_must_be_ordered() {
        let range = Some((T0, T0 + 60 * S));
        let w = |t: &str| Some(When::parse(t).unwrap());
        assert_eq!(
            resolve_window(w("+10s"), w("-10s"), range),
            Ok((Some(T0 + 10 * S), Some(T0 + 50 * S)))
        );
        assert!(resolve_window(w("-10s"), w("+10s"), range)
            .unwrap_err()
            .contains("is not before"));
        assert_eq!(resolve_window(None, None, None), Ok((None, None)));
    }

    /// The fuzzer's find: a recording whose statistics span all of time
    /// (a damaged file's) overflowed a time of day.
    #[test]
    fn a_time_of_day_in_a_range_of_all_time_saturates() {
        let when = When::parse("23:30").unwrap();
        assert!(when.resolve(Some((i64::MIN, i64::MAX))).is_ok());
        assert!(when.resolve(Some((i64::MIN, i64::MIN))).is_ok());
    }
}
