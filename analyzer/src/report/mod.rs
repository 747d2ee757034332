//! Reports: SQL under the hood, printed on request (`--show-sql`) so users
//! learn to write their own. One module per report holds that report's SQL;
//! this one holds what they share: the interval and time-bound flags, the
//! interval arithmetic in SQL, and running and printing.
//!
//! Every report but the timeline is one read-only statement over the
//! registered tables, so what `--show-sql` prints runs unchanged with
//! `hindsight sql`. The timeline runs one statement per kind of metric (all
//! printed, in order), then looks up its contributors' threads and stacks.
//!
//! Intervals are `[a, a + interval)` with `a` a multiple of the interval
//! since the Unix epoch (`date_bin(INTERVAL '10 seconds', ts)`).
//!
//! Cumulative values (counters, per-process times) become per-interval
//! amounts by one rule, [`Deltas`]: an interval `[a, b)` gets the value of
//! the last sample before `b` minus the value of the last sample before `a`,
//! and the time between those two samples, which is what rates divide by
//! (not the nominal interval). A series whose first sample lies in `[a, b)`
//! counts from that sample. An interval with no sample of a series has no
//! row for it. A step where a value goes backwards (a reboot; switch counts
//! of exited threads) counts as zero.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Result;
use hindsight_schemas::time::rfc3339;

use crate::catalog;
use crate::human::Layout;
use crate::output::{self, Format};
use crate::recording::{self, Recording};
use crate::when::{self, When};

pub mod atop;
pub mod baseline;
pub mod cachetop;
pub mod faults;
pub mod html;
pub mod numa;
pub mod runqlat;
pub mod screen;
pub mod timeline;

/// Which report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Atop,
    Faults,
    Numa,
    Cachetop,
    Runqlat,
    Timeline,
}

/// A report's resolved flags.
#[derive(Clone, Debug)]
pub struct Options {
    pub interval: Interval,
    /// Only intervals that start at or after this, aligned down.
    pub from: Option<When>,
    /// Only samples and events before this.
    pub to: Option<When>,
    /// Rows of processes per interval.
    pub top: usize,
    pub format: Format,
    /// Print the SQL before the result.
    pub show_sql: bool,
    /// Only this process (reports that take `--pid`).
    pub pid: Option<i32>,
    /// Only this metric (`report timeline --metric`).
    pub metric: Option<String>,
    /// `report timeline --sensitivity`: an interval departs when its score exceeds 1 / this.
    pub sensitivity: f64,
    /// `top --at`: the one interval that holds this moment (then `from` and
    /// `to` are unused).
    pub at: Option<When>,
}

/// How far before `--from` samples are read, so the first interval has the
/// sample before it to subtract from.
pub const LOOKBACK_NS: i64 = 10 * 60 * 1_000_000_000;

/// An interval length, parsed from `10s`, `1m`, `1m30s`, `500ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    ns: i64,
}

impl Interval {
    pub fn from_ns(ns: i64) -> Interval {
        assert!(ns > 0, "an interval is positive");
        Interval { ns }
    }

    pub fn ns(self) -> i64 {
        self.ns
    }

    /// Parses a duration in the grammar both programs share
    /// (`hindsight_schemas::time::parse_duration_ns`): `10s`, `1m`, `1m30s`, `250ms`.
    pub fn parse(text: &str) -> Result<Interval, String> {
        hindsight_schemas::time::parse_duration_ns(text).map(|ns| Interval { ns })
    }

    /// The SQL literal, in the largest unit that divides it:
    /// `INTERVAL '10 seconds'`.
    pub fn sql(self) -> String {
        const SQL_UNITS: &[(&str, i64)] = &[
            ("hours", 3_600_000_000_000),
            ("minutes", 60_000_000_000),
            ("seconds", 1_000_000_000),
            ("milliseconds", 1_000_000),
            ("microseconds", 1_000),
            ("nanoseconds", 1),
        ];
        let (unit, scale) = SQL_UNITS
            .iter()
            .find(|(_, scale)| self.ns % scale == 0)
            .expect("nanoseconds divide everything");
        let n = self.ns / scale;
        let unit = if n == 1 {
            unit.trim_end_matches('s')
        } else {
            unit
        };
        format!("INTERVAL '{n} {unit}'")
    }

    /// `ts` rounded down to a multiple of the interval, as
    /// `date_bin(interval, ts)` does.
    pub fn align(self, ts: i64) -> i64 {
        ts.div_euclid(self.ns) * self.ns
    }

    /// For people: `10s`, `1m30s`, `250ms`.
    pub fn human(self) -> String {
        let mut rest = self.ns;
        let mut out = String::new();
        for (unit, scale) in [
            ("h", 3_600_000_000_000),
            ("m", 60_000_000_000),
            ("s", 1_000_000_000),
            ("ms", 1_000_000),
            ("us", 1_000),
            ("ns", 1),
        ] {
            if rest >= scale {
                out.push_str(&format!("{}{unit}", rest / scale));
                rest %= scale;
            }
        }
        out
    }
}

/// Parses an RFC 3339 time (`2024-05-01T12:00:00Z`, any offset) to UTC ns,
/// as `recording.json` writes them.
pub fn parse_time(text: &str) -> Result<i64, String> {
    chrono::DateTime::parse_from_rfc3339(text.trim())
        .ok()
        .and_then(|t| t.timestamp_nanos_opt())
        .ok_or_else(|| format!("{text:?}: expected an RFC 3339 time such as 2024-05-01T12:00:00Z"))
}

/// The first and last event over all `recordings`, from footers: what
/// relative `--from`/`--to` count from.
pub fn time_range(recordings: &[Recording]) -> Option<(i64, i64)> {
    recordings
        .iter()
        .filter_map(Recording::time_range)
        .reduce(|(a0, a1), (b0, b1)| (a0.min(b0), a1.max(b1)))
}

/// A kind of time a thread spends, summed per interval and process by
/// [`Env::thread_time_sql`].
#[derive(Clone, Copy, Debug)]
pub enum ThreadTime {
    /// On a CPU.
    OnCpu,
    /// Waiting in a run queue after a wakeup.
    Runq,
    /// Off the CPU in uninterruptible sleep (`D`).
    OffCpuD,
}

/// What a report's SQL is built for: the flags plus what the recordings
/// say (hosts, sampling factors).
#[derive(Clone, Debug)]
pub struct Env {
    pub interval: Interval,
    pub from: Option<i64>,
    pub to: Option<i64>,
    pub top: usize,
    /// Several recordings: every table has a `host` column, every series
    /// and interval is per host.
    pub multi_host: bool,
    /// Every recording session, of every host.
    pub sessions: Vec<SessionFacts>,
    /// Only this process, where the report supports it.
    pub pid: Option<i32>,
    /// Only this metric, where the report supports it.
    pub metric: Option<String>,
    /// How readily the timeline calls a rise a departure (1 by default).
    pub sensitivity: f64,
    /// Every recording has its derived tables (`hindsight index`): reports
    /// read those instead of pairing raw events in the views.
    pub indexed: bool,
}

impl Env {
    /// Fails when `--from`/`--to` do not resolve against the recordings.
    pub fn new(options: &Options, recordings: &[Recording]) -> Result<Env> {
        let range = time_range(recordings);
        let (from, to) = match options.at {
            Some(at) => {
                let start = options
                    .interval
                    .align(at.resolve(range).map_err(crate::UsageError)?);
                (Some(start), Some(start + options.interval.ns()))
            }
            None => {
                when::resolve_window(options.from, options.to, range).map_err(crate::UsageError)?
            }
        };
        let hosts = catalog::host_labels(recordings);
        let sessions = recordings
            .iter()
            .zip(hosts)
            .flat_map(|(rec, host)| {
                rec.meta.sessions.iter().map(move |s| SessionFacts {
                    host: host.clone(),
                    start: parse_time(&s.started).unwrap_or(i64::MIN),
                    fault_sample: s.fault_sample.max(1),
                    boot_offset: s.clock_offsets.first().map(|o| o.offset_ns),
                    recorder_pid: s.recorder_pid,
                })
            })
            .collect();
        Ok(Env {
            interval: options.interval,
            from,
            to,
            top: options.top,
            multi_host: recordings.len() > 1,
            sessions,
            pid: options.pid,
            metric: options.metric.clone(),
            sensitivity: options.sensitivity,
            indexed: recordings.iter().all(Recording::indexed),
        })
    }

    /// What a report reads for helper view `view` (`cpu_time`, `off_cpu`,
    /// `runq_latency`): its derived table when the recordings are indexed,
    /// which holds the same rows without pairing events in the query.
    pub fn paired(&self, view: &'static str) -> &'static str {
        paired(view, self.indexed)
    }

    /// The statement giving one kind of thread time per `step` interval
    /// and process: `[host,] interval_start, pid, comm, ns`, for the
    /// intervals from `first` (a bin start) to before `end`. Every interval
    /// of time is split at the bin edges, so a process never has more CPU
    /// time in a bin than the bin holds and a long sleep spreads over the
    /// bins it covers. Indexed, with `step` a whole number of seconds, it
    /// sums `thread_second`, split at second edges once by the index;
    /// otherwise it splits the rows of the helper view (or of its derived
    /// table) here.
    pub fn thread_time_sql(
        &self,
        kind: ThreadTime,
        step: Interval,
        window: (Option<i64>, Option<i64>),
    ) -> String {
        self.time_sql(kind, step, window, None)
    }

    /// [`Env::thread_time_sql`] per thread of the processes `pids`:
    /// `[host,] interval_start, pid, tid, comm, ns`.
    pub fn thread_time_by_tid_sql(
        &self,
        kind: ThreadTime,
        step: Interval,
        window: (Option<i64>, Option<i64>),
        pids: &[i32],
    ) -> String {
        self.time_sql(kind, step, window, Some(pids))
    }

    /// The time of `kind` per interval and process, or per thread of the
    /// processes `threads_of`.
    fn time_sql(
        &self,
        kind: ThreadTime,
        step: Interval,
        (first, end): (Option<i64>, Option<i64>),
        threads_of: Option<&[i32]>,
    ) -> String {
        let h = self.h();
        let key = if threads_of.is_some() {
            "pid, tid"
        } else {
            "pid"
        };
        // The processes' rows only, before they are paired or binned.
        let only = match threads_of {
            None => "TRUE".to_owned(),
            Some(pids) => format!("pid IN ({})", pid_list(pids)),
        };
        // The name the process has at the end of the interval.
        let comm = |start: &str| format!("{} AS comm", process_comm(start));
        let (view, view_end, view_filter, second_ns) = match kind {
            ThreadTime::OnCpu => ("cpu_time", "ts_end", "TRUE", "on_cpu_ns"),
            ThreadTime::Runq => ("runq_latency", "ts_run", "TRUE", "runq_ns"),
            ThreadTime::OffCpuD => ("off_cpu", "ts_end", "state = 'D'", "off_cpu_d_ns"),
        };
        let bins = |column: &str| {
            let mut terms = vec!["TRUE".to_owned()];
            if let Some(first) = first {
                terms.push(format!("{column} >= {}", timestamp(first)));
            }
            if let Some(end) = end {
                terms.push(format!("{column} < {}", timestamp(end)));
            }
            terms.join(" AND ")
        };
        if self.indexed && step.ns() % 1_000_000_000 == 0 {
            return format!(
                "SELECT {h}date_bin({step}, ts) AS interval_start, {key}, {comm}, sum({second_ns}) AS ns
  FROM thread_second WHERE {second_ns} > 0 AND {bounds} AND {only}
  GROUP BY {h}interval_start, {key}",
                step = step.sql(),
                comm = comm("ts"),
                bounds = bins("ts"),
            );
        }
        // Rows that overlap the window, each cut into one piece per bin.
        let mut overlap = vec![view_filter.to_owned(), only];
        if let Some(first) = first {
            overlap.push(format!("{view_end} > {}", timestamp(first)));
        }
        if let Some(end) = end {
            overlap.push(format!("ts < {}", timestamp(end)));
        }
        format!(
            "SELECT {h}interval_start, {key}, {comm}, sum(least(e, b_end) - greatest(b, b_start)) AS ns
  FROM (
    SELECT {h}pid, tid, comm, b, e, k * {s} AS b_start, (k + 1) * {s} AS b_end,
      {bin_start} AS interval_start
    FROM (
      SELECT {h}pid, tid, comm, b, e, unnest(range(b / {s}, (e - 1) / {s} + 1)) AS k
      FROM (SELECT {h}pid, tid, comm, CAST(ts AS BIGINT) AS b, CAST({view_end} AS BIGINT) AS e
            FROM {from} WHERE {overlap}) rows
    ) pieces
  ) binned
  WHERE {bounds}
  GROUP BY {h}interval_start, {key}",
            s = step.ns(),
            comm = comm("b"),
            bin_start = ns_as_timestamp(&format!("k * {}", step.ns())),
            from = self.paired(view),
            overlap = overlap.join(" AND "),
            bounds = bins("interval_start"),
        )
    }

    /// `host, ` with several recordings, else nothing: put it before a key
    /// list.
    pub fn h(&self) -> &'static str {
        if self.multi_host {
            "host, "
        } else {
            ""
        }
    }

    /// `date_bin(INTERVAL '10 seconds', ts)`: the start of `ts`'s interval.
    pub fn bin(&self, ts: &str) -> String {
        format!("date_bin({}, {ts})", self.interval.sql())
    }

    /// A condition on the `ts` of samples: before `--to`, and not more than
    /// [`LOOKBACK_NS`] before the first interval, so it has a baseline.
    pub fn sample_bounds(&self, ts: &str) -> String {
        self.bounds(ts, LOOKBACK_NS)
    }

    /// A condition on the `ts` of events: inside the reported intervals.
    pub fn event_bounds(&self, ts: &str) -> String {
        self.bounds(ts, 0)
    }

    fn bounds(&self, ts: &str, lookback: i64) -> String {
        let mut terms = Vec::new();
        if let Some(from) = self.from {
            let start = self.interval.align(from).saturating_sub(lookback);
            terms.push(format!("{ts} >= {}", timestamp(start)));
        }
        if let Some(to) = self.to {
            terms.push(format!("{ts} < {}", timestamp(to)));
        }
        if terms.is_empty() {
            "TRUE".into()
        } else {
            terms.join(" AND ")
        }
    }

    /// A condition on an interval start column: the intervals reported.
    pub fn interval_bounds(&self, column: &str) -> String {
        let mut terms = Vec::new();
        if let Some(from) = self.from {
            terms.push(format!(
                "{column} >= {}",
                timestamp(self.interval.align(from))
            ));
        }
        if let Some(to) = self.to {
            terms.push(format!("{column} < {}", timestamp(to)));
        }
        if terms.is_empty() {
            "TRUE".into()
        } else {
            terms.join(" AND ")
        }
    }

    /// The `lost` CTE: events lost per interval (by `loss.ts`, the end of
    /// the recorder's flush interval in which they were lost). Skipped timer
    /// rounds (`late:` sources) are not events: they are `late_rounds`.
    pub fn lost_cte(&self) -> String {
        let h = self.h();
        format!(
            "lost AS (  -- events the recorder lost, and timer rounds it skipped, per interval
  SELECT {h}{bin} AS interval_start,
    sum(CASE WHEN source LIKE '{late}%' THEN 0 ELSE lost END) AS lost,
    sum(CASE WHEN source LIKE '{late}%' THEN lost ELSE 0 END) AS late_rounds
  FROM loss
  WHERE {bounds}
  GROUP BY {h}interval_start
)",
            bin = self.bin("ts"),
            bounds = self.event_bounds("ts"),
            late = hindsight_schemas::tables::LATE_PREFIX,
        )
    }

    /// The join condition of a row set `r` with `lost l`.
    pub fn lost_join(&self, r: &str) -> String {
        if self.multi_host {
            format!("l.host = {r}.host AND l.interval_start = {r}.interval_start")
        } else {
            format!("l.interval_start = {r}.interval_start")
        }
    }

    /// How many faults one `page_fault` row stands for: `fault_sample` of
    /// the session the row was recorded in (a literal when all agree).
    pub fn fault_weight(&self, ts: &str) -> String {
        let first = self.sessions.first().map_or(1, |s| s.fault_sample);
        if self.sessions.iter().all(|s| s.fault_sample == first) {
            return first.to_string();
        }
        self.per_session(ts, "1", |s| s.fault_sample.to_string())
    }

    /// When a process that a row of `task_stat` is about started, as UTC
    /// ns, if that was after the recording session of the row began and
    /// after the earliest sample read (so every sample of it since is read,
    /// and its counters grew from zero in them); else NULL. `start` is the
    /// row's boot-clock start time (`start_time_ns`).
    pub fn born_in_session(&self, ts: &str, start: &str) -> String {
        let first_read = self
            .from
            .map(|from| self.interval.align(from).saturating_sub(LOOKBACK_NS));
        self.per_session(ts, "NULL", |s| match s.boot_offset {
            Some(offset) => format!(
                "CASE WHEN {start} + {offset} >= {begin} THEN {start} + {offset} END",
                begin = first_read.map_or(s.start, |first| first.max(s.start))
            ),
            None => "NULL".into(),
        })
    }

    /// A SQL expression that is `value(session)` for the session a row at
    /// time `ts` (of its host) was recorded in, `before` for a row older
    /// than every session.
    fn per_session(
        &self,
        ts: &str,
        before: &str,
        value: impl Fn(&SessionFacts) -> String,
    ) -> String {
        let mut sessions: Vec<&SessionFacts> = self.sessions.iter().collect();
        sessions.sort_by_key(|s| std::cmp::Reverse(s.start));
        let mut case = String::from("CASE");
        for session in sessions {
            let host = if self.multi_host {
                format!("host = '{}' AND ", session.host.replace('\'', "''"))
            } else {
                String::new()
            };
            case.push_str(&format!(
                " WHEN {host}{ts} >= {} THEN {}",
                timestamp(session.start),
                value(session)
            ));
        }
        case.push_str(&format!(" ELSE {before} END"));
        case
    }
}

/// What a report needs to know of one recording session.
#[derive(Clone, Debug)]
pub struct SessionFacts {
    /// The host label of its recording.
    pub host: String,
    /// When the recorder started, UTC ns.
    pub start: i64,
    /// One page fault in this many was recorded.
    pub fault_sample: u32,
    /// UTC minus the boot clock, ns, as first measured in the session.
    pub boot_offset: Option<i64>,
    /// The recorder's process id (absent in older recordings).
    pub recorder_pid: Option<i32>,
}

/// The name of a process, as an aggregate over rows of its threads
/// (`tid`, `pid`, `comm`) ordered in time by `ts`: its main thread's latest
/// name if the main thread has a row, else the latest of any of its
/// threads, as atop shows it. Not `max(comm)`, which names a multi-threaded
/// process after its alphabetically last thread and a renamed one after
/// whichever name sorts last. As text: over the dictionary column it took
/// 60 % more time and memory on a day's thread_second.
pub fn process_comm(ts: &str) -> String {
    format!(
        "last_value(CAST(comm AS VARCHAR) ORDER BY CASE WHEN tid = pid THEN 1 ELSE 0 END, {ts})"
    )
}

/// A SQL expression of UTC ns as a timestamp like the tables' `ts`.
pub fn ns_as_timestamp(ns: &str) -> String {
    format!("arrow_cast({ns}, 'Timestamp(Nanosecond, Some(\"UTC\"))')")
}

/// What to read for helper view `view` (`cpu_time`, `off_cpu`,
/// `runq_latency`): its derived table when every recording is `indexed`,
/// else the view itself.
pub fn paired(view: &'static str, indexed: bool) -> &'static str {
    match hindsight_schemas::derived::table_for_view(view) {
        Some(table) if indexed => table,
        _ => view,
    }
}

/// Pids as the items of a SQL list: `1, 2, 3`.
pub fn pid_list<'a>(pids: impl IntoIterator<Item = &'a i32>) -> String {
    let pids: Vec<String> = pids.into_iter().map(i32::to_string).collect();
    pids.join(", ")
}

/// A `TIMESTAMP '...'` literal of UTC ns.
pub fn timestamp(utc_ns: i64) -> String {
    format!("TIMESTAMP '{}'", rfc3339(utc_ns))
}

/// Per-interval amounts of cumulative values by the rule in the module doc:
/// two CTEs, `<name>_step` (each sample minus the one before it in its
/// series) and `<name>` (one row per series and interval).
///
/// `<name>` has the series keys (and `host`), `interval_start`,
/// `sample_from` and `sample_to` (the two bounding samples; `sample_from`
/// is null when the series has one sample only), `seconds` between them,
/// one column per counter holding its change, and one per gauge holding its
/// value at the last sample in the interval.
pub struct Deltas<'a> {
    pub name: &'a str,
    /// The table read.
    pub table: &'a str,
    /// What identifies a series, e.g. `source, name, scope`.
    pub keys: &'a [&'a str],
    /// `(column, expression)`: cumulative values.
    pub counters: &'a [(&'a str, &'a str)],
    /// `(column, expression)`: values taken as they are at the interval's end.
    pub gauges: &'a [(&'a str, &'a str)],
    /// Which rows of `table`.
    pub filter: &'a str,
    /// For a series whose counters started at zero during the recording:
    /// an expression giving that moment as UTC ns (NULL otherwise). Its
    /// first sample then counts from zero at that moment instead of
    /// counting nothing.
    pub born: Option<String>,
    /// A comment on the step CTE.
    pub doc: &'a str,
}

impl Deltas<'_> {
    pub fn sql(&self, env: &Env) -> String {
        let h = env.h();
        let keys = self.keys.join(", ");
        let name = self.name;
        let mut step_cols = String::new();
        let mut sums = String::new();
        // The birth is worked out once a row, in `rows` (it is a CASE over
        // every session), and only where it is used.
        let (from_zero, prev_ts, rows) = match &self.born {
            Some(born) => (
                "CASE WHEN born_ns IS NOT NULL THEN 0 END".to_string(),
                format!("coalesce(lag(ts) OVER series, {})", ns_as_timestamp("born_ns")),
                format!(
                    "(SELECT *, {born} AS born_ns FROM {table} WHERE ({filter}) AND {bounds}) {table}",
                    table = self.table,
                    filter = self.filter,
                    bounds = env.sample_bounds("ts"),
                ),
            ),
            None => (
                "NULL".to_string(),
                "lag(ts) OVER series".to_string(),
                format!(
                    "{table} WHERE ({filter}) AND {bounds}",
                    table = self.table,
                    filter = self.filter,
                    bounds = env.sample_bounds("ts"),
                ),
            ),
        };
        for (col, expr) in self.counters {
            step_cols.push_str(&format!(
                ",\n    greatest({expr} - coalesce(lag({expr}) OVER series, {from_zero}), 0) AS {col}"
            ));
            sums.push_str(&format!(",\n    sum({col}) AS {col}"));
        }
        for (col, expr) in self.gauges {
            step_cols.push_str(&format!(",\n    {expr} AS {col}"));
            sums.push_str(&format!(",\n    last_value({col} ORDER BY ts) AS {col}"));
        }
        format!(
            "{name}_step AS (  -- {doc}: each sample minus the one before it
  SELECT {h}{keys}, ts, {bin} AS interval_start,
    {prev_ts} AS prev_ts{step_cols}
  FROM {rows}
  WINDOW series AS (PARTITION BY {h}{keys} ORDER BY ts)
),
{name} AS (  -- per interval: last sample in it minus last sample before it
  SELECT {h}{keys}, interval_start,
    min(prev_ts) AS sample_from,
    max(ts) AS sample_to,
    (CAST(max(ts) AS BIGINT) - CAST(min(prev_ts) AS BIGINT)) / 1e9 AS seconds{sums}
  FROM {name}_step
  GROUP BY {h}{keys}, interval_start
)",
            doc = self.doc,
            bin = env.bin("ts"),
        )
    }
}

/// What identifies one series of `counter`: its cumulative values are
/// comparable only within it.
pub const COUNTER_SERIES: &[&str] = &["source", "name", "scope"];

/// What identifies one process in `task_stat`: a reused pid is a new series.
pub const TASK_SERIES: &[&str] = &["pid", "start_time_ns"];

/// `counter_delta` (and `counter_delta_step`): the counters `filter`
/// selects, per series (`source`, `name`, `scope`) and interval, with
/// `delta` (the change, for cumulative counters) and `last` (the value at the
/// interval's end, for gauges such as `MemFree`).
pub fn counter_deltas(env: &Env, filter: &str) -> String {
    Deltas {
        name: "counter_delta",
        table: "counter",
        keys: COUNTER_SERIES,
        counters: &[("delta", "value")],
        gauges: &[("last", "value")],
        filter,
        born: None,
        doc: "system counters",
    }
    .sql(env)
}

/// `task_delta` (and `task_delta_step`): per process and interval, CPU time
/// (`cpu_ns`), faults (`minflt`, `majflt`) and context switches (`csw`), and
/// `comm` and `rss_bytes` at the interval's end. A process is its `pid` and
/// `start_time_ns`, so a reused pid starts a new series. A process started
/// after its recording session began counts from zero at its start, so one
/// that lived between two snapshots (and has only its final row) has its
/// line, as in atop.
pub fn task_deltas(env: &Env) -> String {
    Deltas {
        name: "task_delta",
        table: "task_stat",
        keys: TASK_SERIES,
        counters: &[
            ("cpu_ns", "utime_ns + stime_ns"),
            ("minflt", "minflt"),
            ("majflt", "majflt"),
            ("csw", "nvcsw + nivcsw"),
        ],
        gauges: &[
            ("comm", "CAST(comm AS VARCHAR)"),
            ("rss_bytes", "rss_bytes"),
        ],
        filter: "TRUE",
        born: Some(env.born_in_session("ts", "start_time_ns")),
        doc: "process snapshots",
    }
    .sql(env)
}

/// A column of a report's result: name and SQL type, for the `NULL`s of
/// row kinds that do not have it.
pub type ColumnDef = (&'static str, &'static str);

/// A `SELECT` list over `columns` in order: the expression given for each
/// column `values` names, `CAST(NULL AS type)` for the others. Lets row
/// kinds of one report share their columns.
pub fn select_list(columns: &[ColumnDef], values: &[(&str, String)]) -> String {
    for (name, _) in values {
        debug_assert!(
            columns.iter().any(|(c, _)| c == name),
            "{name} is not a column"
        );
    }
    columns
        .iter()
        .map(|(name, ty)| match values.iter().find(|(n, _)| n == name) {
            Some((_, expr)) if expr == name => name.to_string(),
            Some((_, expr)) => format!("{expr} AS {name}"),
            None => format!("CAST(NULL AS {ty}) AS {name}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The SQL of `kind` for `env`.
pub fn sql(kind: Kind, env: &Env) -> String {
    match kind {
        Kind::Atop => atop::sql(env),
        Kind::Faults => faults::sql(env),
        Kind::Numa => numa::sql(env),
        Kind::Cachetop => cachetop::sql(env),
        Kind::Runqlat => runqlat::sql(env),
        Kind::Timeline => timeline::sql(env),
    }
}

/// Says on stderr, once, that a report would read derived tables if the
/// recordings had them, and how long pairing takes without them.
pub fn hint_index(recordings: &[Recording], env: &Env) {
    if env.indexed {
        return;
    }
    let switches: u64 = recordings
        .iter()
        .filter_map(|r| r.table(hindsight_schemas::derived::SOURCE_TABLE))
        .map(|t| t.rows())
        .sum();
    if switches < 1_000_000 {
        return;
    }
    let unindexed: Vec<&Path> = recordings
        .iter()
        .filter(|r| !r.indexed())
        .map(|r| r.dir.as_path())
        .collect();
    eprintln!(
        "{}",
        index_hint(switches, &unindexed, catalog::cluster().is_some())
    );
}

/// What [`hint_index`] says: which recordings to index, named as the user
/// gave them (a bucket's copy by its URL, not the cache's directory). On a
/// cluster the executors read the bucket itself, where `index` writes
/// nothing, so there is nothing to advise.
fn index_hint(switches: u64, unindexed: &[&Path], cluster: bool) -> String {
    let what =
        format!("hindsight: {switches} switches not indexed: this report pairs them in the query");
    if cluster {
        return format!(
            "{what} (a cluster reads the bucket, and an index is kept only in a local copy)"
        );
    }
    let dirs: Vec<String> = unindexed
        .iter()
        .map(|dir| crate::remote::url_of_copy(dir).unwrap_or_else(|| dir.display().to_string()))
        .collect();
    format!(
        "{what}; `hindsight index {}` pairs them once and makes it take seconds",
        dirs.join(" ")
    )
}

/// Runs report `kind` over `dirs` and prints it on stdout: the SQL first
/// with `--show-sql` (ending in `;` and a blank line), then the result.
pub async fn run(kind: Kind, dirs: &[PathBuf], options: &Options, threads: usize) -> Result<()> {
    let recordings = recording::open_all(dirs)?;
    let ctx = catalog::context_for(&recordings, threads).map_err(catalog::one_line)?;
    let env = Env::new(options, &recordings)?;
    if matches!(kind, Kind::Runqlat | Kind::Timeline) {
        hint_index(&recordings, &env);
    }
    let sql = sql(kind, &env);
    let mut out = BufWriter::new(io::stdout());
    if options.show_sql {
        write!(out, "{sql};\n\n")?;
    }
    // The table format is laid out for reading; CSV and JSON stream the
    // statement's rows as they are (the timeline's incidents are made
    // after its statements, in every format).
    let laid_out = options.format == Format::Table || kind == Kind::Timeline;
    if laid_out {
        let batches = if kind == Kind::Timeline {
            timeline::query(&ctx, &env).await?
        } else {
            catalog::query_batches(&ctx, &sql)
                .await
                .map_err(catalog::one_line)?
        };
        let layout = Layout::stdout();
        match kind {
            Kind::Atop => atop::write_table(&batches, &env, &layout, &mut out)?,
            Kind::Runqlat => runqlat::write_table(&batches, &layout, &mut out)?,
            Kind::Numa => numa::write_table(&batches, &env, &layout, &mut out)?,
            Kind::Cachetop => cachetop::write_table(&batches, &env, &layout, &mut out)?,
            Kind::Faults => faults::write_table(&batches, &env, &layout, &mut out)?,
            Kind::Timeline => {
                let samples = timeline::samples(&batches)?;
                let mut incidents = timeline::incidents(&samples, &env);
                timeline::add_details(&ctx, &env, &mut incidents).await?;
                timeline::write(&incidents, options.format, &layout, &mut out)?;
            }
        }
        out.flush()?;
    } else {
        let stream = catalog::query_stream(&ctx, &sql)
            .await
            .map_err(catalog::one_line)?;
        output::write_stream(stream, options.format, out).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_parse_and_print() {
        let cases = [
            ("10s", 10_000_000_000, "INTERVAL '10 seconds'", "10s"),
            ("1m", 60_000_000_000, "INTERVAL '1 minute'", "1m"),
            ("1m30s", 90_000_000_000, "INTERVAL '90 seconds'", "1m30s"),
            ("250ms", 250_000_000, "INTERVAL '250 milliseconds'", "250ms"),
            ("2h", 7_200_000_000_000, "INTERVAL '2 hours'", "2h"),
            ("7ns", 7, "INTERVAL '7 nanoseconds'", "7ns"),
        ];
        for (text, ns, sql, human) in cases {
            let iv = Interval::parse(text).unwrap();
            assert_eq!(iv.ns(), ns, "{text}");
            assert_eq!(iv.sql(), sql, "{text}");
            assert_eq!(iv.human(), human, "{text}");
        }
        for bad in ["", "s", "0s", "10x", "-1s", "99999999999d"] {
            assert!(Interval::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn times_parse_as_rfc3339() {
        assert_eq!(
            parse_time("2023-11-14T22:13:20Z"),
            Ok(1_700_000_000_000_000_000)
        );
        assert_eq!(
            parse_time("2023-11-14T23:13:20.5+01:00"),
            Ok(1_700_000_000_500_000_000)
        );
        assert!(parse_time("yesterday").is_err());
    }

    #[test]
    fn the_index_hint_names_a_buckets_copy_by_its_url_and_advises_no_index_on_a_cluster() {
        let copy = crate::remote::cache_root().join("s3/fleet/hosts/hostA");
        let local = Path::new("/srv/rec");
        let hint = index_hint(2_000_000, &[local, &copy], false);
        assert!(
            hint.ends_with("`hindsight index /srv/rec s3://fleet/hosts/hostA` pairs them once and makes it take seconds"),
            "{hint}"
        );
        let hint = index_hint(2_000_000, &[&copy], true);
        assert!(
            hint.starts_with("hindsight: 2000000 switches not indexed"),
            "{hint}"
        );
        assert!(!hint.contains("hindsight index"), "{hint}");
    }

    #[test]
    fn alignment_is_to_multiples_since_the_epoch() {
        let iv = Interval::parse("10s").unwrap();
        assert_eq!(
            iv.align(1_700_000_005_123_000_000),
            1_700_000_000_000_000_000
        );
        assert_eq!(iv.align(-1), -10_000_000_000);
    }
}
