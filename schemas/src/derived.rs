//! Derived tables: the raw scheduler events paired per thread once, stored
//! as ordinary Parquet beside the raw tables, and read by every report.
//!
//! Pairing events (a switch-in with its switch-out, a wakeup with the run
//! that followed) needs them in time order per thread or per CPU. Done in
//! SQL with `lead()` over a whole table, that sorts every row of the
//! recording for each query and no time filter reaches below the window
//! (30 M switches: 100 s and 7 GiB for one report). Done once, in one
//! streaming pass ([`crate::pairing`]), the result is plain tables
//! whose rows are what the helper views `cpu_time`, `off_cpu` and
//! `runq_latency` return, which prune by `ts` like any table and open in
//! DuckDB or Spark unchanged.
//!
//! Layout: `<table>/<name>.parquet` for every closed `sched_switch` chunk
//! `<name>.parquet`, holding the rows whose pairing completed while that
//! chunk was read (so a row's `ts` may lie in an earlier chunk). A chunk
//! with nothing to pair still gets its (empty) file: a recording is
//! *indexed* when every `sched_switch` chunk has its file in each derived
//! table. Row groups are sorted by CPU (`cpu_slice`) or thread, then `ts`,
//! which keeps consecutive times close (delta encoding) and answers
//! per-thread questions in order; a row group holds the rows paired in
//! one stretch of time and carries page statistics, so a time window reads
//! little more than its row groups.
//!
//! Edges, the same for every derived table:
//! - chunk edges are invisible: the pass carries its state from one chunk to
//!   the next, and waits [`crate::pairing::REORDER_NS`] of event time before
//!   it pairs an event, so events that reached the recorder late (drained
//!   from another CPU's ring a moment later) still pair in time order;
//! - a recorder restart (a new session in `recording.json`) ends every open
//!   interval unpaired: what happened while nothing recorded is unknown, so
//!   no interval spans the gap (the raw views would pair across it); a
//!   thread's state is unknown after it too, so a wakeup before the thread's
//!   first switch starts a wait (the view judges it by what the thread did
//!   before the gap);
//! - a thread that left the CPU dead (`prev_state` `X` or `Z`) has no
//!   off-CPU interval after that switch: its tid may be reused by a new
//!   thread;
//! - the end of the recording leaves the intervals still open unpaired;
//! - lost events (`loss` rows for `sched_switch`/`sched_wakeup`) pair
//!   whatever events surround them, exactly as the raw views do: an on-CPU
//!   slice is dropped when its end switch does not name the same thread, an
//!   off-CPU interval whose switch-in is missing ends at the earliest that
//!   switch-in can have been (a lower bound), a run-queue wait may come out
//!   too long. Reports print the loss beside each interval.

use crate::tables::{col, nullable, ColumnType::*, Table};

/// The `group` of every derived table (what `SCHEMA.md` shows where raw
/// tables name their `--events` group).
pub const DERIVED_GROUP: &str = "derived";

pub static CPU_SLICE: Table = Table {
    name: "cpu_slice",
    group: DERIVED_GROUP,
    doc: "On-CPU slices, paired once: the rows of the `cpu_time` view (from the `sched_switch` that put a thread \
          on a CPU to the next `sched_switch` on that CPU, when that one names the same thread leaving), \
          written by `hindsight index` and read by the reports instead of the view.",
    sort_key: &["cpu", "ts"],
    columns: &[
        col("ts", Timestamp, "ns, UTC", "When the thread was switched in."),
        col("ts_end", Timestamp, "ns, UTC", "When it was switched out."),
        col("dur_ns", Int64, "ns", "Time on the CPU: `ts_end - ts`."),
        col("cpu", Int32, "", "CPU it ran on."),
        col("tid", Int32, "", "Thread."),
        col("pid", Int32, "", "Process of the thread."),
        col("comm", Name, "", "Thread name when it was switched in."),
        col("prio", Int32, crate::tables::KERNEL_PRIORITY, "Kernel priority when it was switched in."),
        col("end_state", Name, "", "State it left the CPU in (`prev_state` of the ending switch): `R` preempted, `S`, `D`, ... blocked."),
    ],
};

pub static OFF_CPU_INTERVAL: Table = Table {
    name: "off_cpu_interval",
    group: DERIVED_GROUP,
    doc: "Off-CPU intervals, paired once: the rows of the `off_cpu` view (from the `sched_switch` that took a \
          thread off the CPU to the next one that put it back, on any CPU, or where that one left no event, to \
          the earliest it can have been), written by `hindsight index`.",
    sort_key: &["tid", "ts"],
    columns: &[
        col("ts", Timestamp, "ns, UTC", "When the thread was switched out."),
        col("ts_end", Timestamp, "ns, UTC", "When it was next switched in (or, that switch unseen, the earliest it can have been)."),
        col("dur_ns", Int64, "ns", "Time off the CPU: `ts_end - ts`."),
        col("tid", Int32, "", "Thread."),
        col("pid", Int32, "", "Process of the thread."),
        col("comm", Name, "", "Thread name when it was switched out."),
        col("state", Name, "", "State it blocked in (`prev_state`): `R` preempted, `S` sleeping, `D` uninterruptible, ..."),
        col("cpu", Int32, "", "CPU it left."),
        col("next_cpu", Int32, "", "CPU it came back on."),
        nullable("stack_id", Int64, "", "Stack it blocked in (recorded with `--off-cpu-stacks`, else null); join `stack`."),
    ],
};

pub static RUNQ_WAIT: Table = Table {
    name: "runq_wait",
    group: DERIVED_GROUP,
    doc: "Run-queue waits, paired once: the rows of the `runq_latency` view (from a wakeup, or from a switch-out \
          that left the thread runnable, to the thread's next switch-in: BCC's runqlat, the kernel's `run_delay`), \
          written by `hindsight index`.",
    sort_key: &["tid", "ts"],
    columns: &[
        col("ts", Timestamp, "ns, UTC", "When the thread began to wait: woken, or preempted."),
        col("ts_run", Timestamp, "ns, UTC", "When it next ran."),
        col("latency_ns", Int64, "ns", "Time it waited to run: `ts_run - ts`."),
        col("tid", Int32, "", "Thread."),
        col("pid", Int32, "", "Process of the thread."),
        col("comm", Name, "", "Thread name when it began to wait."),
        col("cpu", Int32, "", "CPU it ran on."),
        col("after", Name, "", "What the wait followed: `wakeup` (a `sched_wakeup`) or `preemption` (switched out in state `R`)."),
    ],
};

pub static THREAD_SECOND: Table = Table {
    name: "thread_second",
    group: DERIVED_GROUP,
    doc: "Per thread and per second of wall-clock time: how long it ran, waited to run and was off the CPU in each \
          state, from the rows of `cpu_slice`, `runq_wait` and `off_cpu_interval` split at every second's edge, so \
          a 30 s sleep counts one second in each of 30 rows and no thread has more than a second of CPU in a second. \
          Far smaller than the intervals (one row per thread that did something in a second), it answers per-second \
          and coarser questions (the timeline) and is the table to keep when raw events are retired. \
          A (`ts`, `tid`) may have several rows: an interval that ends after its second's row was written (a long \
          sleep) adds rows for the seconds it covers; sum them (`GROUP BY ts, tid`). Written by `hindsight index`.",
    sort_key: &["tid", "ts"],
    columns: &[
        col("ts", Timestamp, "ns, UTC", "Start of the second (a whole second of UTC)."),
        col("tid", Int32, "", "Thread."),
        col("pid", Int32, "", "Process of the thread."),
        col("comm", Name, "", "Thread name (of the last interval counted)."),
        col("on_cpu_ns", Int64, "ns", "Time on a CPU in this second (`cpu_slice`)."),
        col("runq_ns", Int64, "ns", "Time waiting in a run queue (after a wakeup or a preemption) in this second (`runq_wait`)."),
        col("off_cpu_s_ns", Int64, "ns", "Time off the CPU asleep (`S`, interruptible) in this second."),
        col("off_cpu_d_ns", Int64, "ns", "Time off the CPU in uninterruptible sleep (`D`, usually I/O) in this second."),
        col("off_cpu_r_ns", Int64, "ns", "Time off the CPU while still runnable (`R`, preempted) in this second."),
        col("off_cpu_other_ns", Int64, "ns", "Time off the CPU in any other state (`T`, `t`, `I`, ...) in this second."),
        col("runs", Int64, "", "On-CPU slices that began in this second (switch-ins)."),
        col("waits", Int64, "", "Run-queue waits that began in this second (`runq_wait` rows)."),
    ],
};

/// Every derived table, in the order the docs list them.
pub static DERIVED_TABLES: &[&Table] = &[&CPU_SLICE, &OFF_CPU_INTERVAL, &RUNQ_WAIT, &THREAD_SECOND];

/// The raw table whose chunks the derived tables follow, one file each.
pub const SOURCE_TABLE: &str = "sched_switch";

/// Each derived table and the helper view it equals, row for row, where
/// no session edge or dead thread intervenes (see the module doc).
pub const REPLACES: &[(&str, &str)] = &[
    ("cpu_slice", "cpu_time"),
    ("off_cpu_interval", "off_cpu"),
    ("runq_wait", "runq_latency"),
];

/// The derived table that holds the rows of helper view `view`.
pub fn table_for_view(view: &str) -> Option<&'static str> {
    REPLACES.iter().find(|(_, v)| *v == view).map(|(t, _)| *t)
}

/// Looks a derived table up by name.
pub fn derived_table(name: &str) -> Option<&'static Table> {
    DERIVED_TABLES.iter().copied().find(|t| t.name == name)
}
