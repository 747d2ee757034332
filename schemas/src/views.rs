//! Helper views the analyzer registers over every recording, as data: name,
//! doc, columns with units, and the SQL that defines them.
//!
//! They turn the raw events into the shapes people query (time on and off
//! the CPU, run-queue waits, counter rates), so users and reports do not
//! each re-derive them with window functions. The SQL is plain DataFusion
//! SQL over the tables of [`crate::tables`]; `{host}` stands where, with
//! several recordings open, the `host` column joins the partition keys
//! ([`View::sql`] fills it in). `SCHEMA.md` shows each view's SQL, so a
//! user can copy and change it.
//!
//! Views keep `ts` a `TIMESTAMP (ns, UTC)`: `date_bin(INTERVAL '10 seconds',
//! ts)` bins them like any table.

use crate::tables::{Column, ColumnType};

/// One view: a named query over the tables.
#[derive(Debug)]
pub struct View {
    pub name: &'static str,
    pub doc: &'static str,
    /// The columns the SQL returns, in order (with several recordings,
    /// `host` comes first).
    pub columns: &'static [Column],
    /// The defining query, with `{host}` where `host, ` goes when several
    /// recordings are open.
    pub template: &'static str,
}

impl View {
    /// The SQL for one recording (`multi_host == false`) or several.
    pub fn sql(&self, multi_host: bool) -> String {
        self.template
            .replace("{host}", if multi_host { "host, " } else { "" })
    }

    pub fn column(&self, column: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == column)
    }
}

/// Looks a view up by name.
pub fn view(name: &str) -> Option<&'static View> {
    VIEWS.iter().copied().find(|v| v.name == name)
}

use ColumnType::*;

const fn col(
    name: &'static str,
    kind: ColumnType,
    nullable: bool,
    unit: &'static str,
    doc: &'static str,
) -> Column {
    Column {
        name,
        kind,
        nullable,
        unit,
        doc,
    }
}

pub static CPU_TIME: View = View {
    name: "cpu_time",
    doc: "On-CPU intervals: one row per time a thread ran on a CPU, from the `sched_switch` that put it \
          there to the next `sched_switch` on that CPU (Perfetto's `sched_slice`). The idle task (tid 0) is left out. \
          A slice whose end switch does not name the same thread leaving (events lost in between) is left out too, \
          so the sums are a lower bound where `loss` has rows. The kernel itself now and then puts a thread on a CPU \
          without a `sched_switch` event (seen on 6.18 VMs, by bpftrace too): that slice has no start and is left out \
          as well. Per-thread CPU time in a window: \
          `SELECT tid, sum(dur_ns) FROM cpu_time WHERE ts >= ... GROUP BY tid`.",
    columns: &[
        col("ts", Timestamp, false, "ns, UTC", "When the thread was switched in."),
        col("ts_end", Timestamp, false, "ns, UTC", "When it was switched out."),
        col("dur_ns", Int64, false, "ns", "Time on the CPU: `ts_end - ts`."),
        col("cpu", Int32, false, "", "CPU it ran on."),
        col("tid", Int32, false, "", "Thread."),
        col("pid", Int32, false, "", "Process of the thread."),
        col("comm", Text, false, "", "Thread name when it was switched in."),
        col("prio", Int32, false, crate::tables::KERNEL_PRIORITY, "Kernel priority when it was switched in."),
        col("end_state", Text, false, "", "State it left the CPU in (`prev_state` of the ending switch): `R` preempted, `S`, `D`, ... blocked."),
    ],
    template: "SELECT {host}ts, ts_end, CAST(ts_end AS BIGINT) - CAST(ts AS BIGINT) AS dur_ns, cpu, tid, pid, comm, prio, end_state
FROM (
  SELECT {host}ts, cpu, next_tid AS tid, next_pid AS pid, CAST(next_comm AS VARCHAR) AS comm, next_prio AS prio,
    lead(ts) OVER on_cpu AS ts_end,
    lead(prev_tid) OVER on_cpu AS end_tid,
    CAST(lead(prev_state) OVER on_cpu AS VARCHAR) AS end_state
  FROM sched_switch
  WINDOW on_cpu AS (PARTITION BY {host}cpu ORDER BY ts)
) slices
WHERE tid <> 0 AND end_tid = tid",
};

pub static OFF_CPU: View = View {
    name: "off_cpu",
    doc: "Off-CPU intervals: one row per time a thread was off the CPU, from the `sched_switch` that took it off \
          to the next one that put it back (on any CPU), with the state it left in: `R` means preempted (it waited \
          in a run queue), `S`/`D` blocked (sleep, I/O, a lock). BCC's offcputime counts `state <> 'R'`. \
          A thread that never ran again before the recording ended has no row. \
          Where the switch that put it back left no event (the kernel puts a thread on a CPU now and then without \
          one, see `cpu_time`, or the event was lost) and the thread is next seen leaving a CPU, the interval ends \
          at the last switch recorded on that CPU before it left, the earliest it can have come back: a lower bound \
          (no row where that switch is not after it left).",
    columns: &[
        col("ts", Timestamp, false, "ns, UTC", "When the thread was switched out."),
        col("ts_end", Timestamp, false, "ns, UTC", "When it was next switched in (or, that switch unseen, the earliest it can have been)."),
        col("dur_ns", Int64, false, "ns", "Time off the CPU: `ts_end - ts`."),
        col("tid", Int32, false, "", "Thread."),
        col("pid", Int32, false, "", "Process of the thread."),
        col("comm", Text, false, "", "Thread name when it was switched out."),
        col("state", Text, false, "", "State it blocked in (`prev_state`): `R` preempted, `S` sleeping, `D` uninterruptible, ..."),
        col("cpu", Int32, false, "", "CPU it left."),
        col("next_cpu", Int32, false, "", "CPU it came back on."),
        col("stack_id", Int64, true, "", "Stack it blocked in (recorded with `--off-cpu-stacks`, else null); join `stack`."),
    ],
    // `cpu_before`: the switch before each switch-out on its CPU, after
    // which an unseen switch-in of the leaving thread happened (unused on
    // switch-ins, where it repeats `ts` only to keep the column's type).
    template: "SELECT {host}ts, ts_end, CAST(ts_end AS BIGINT) - CAST(ts AS BIGINT) AS dur_ns, tid, pid, comm, state, cpu, next_cpu, stack_id
FROM (
  SELECT {host}ts, tid, pid, comm, state, cpu, is_in, stack_id,
    CASE WHEN lead(is_in) OVER thread THEN lead(ts) OVER thread
      WHEN lead(cpu_before) OVER thread > ts THEN lead(cpu_before) OVER thread END AS ts_end,
    lead(cpu) OVER thread AS next_cpu
  FROM (
    SELECT {host}ts, prev_tid AS tid, prev_pid AS pid, CAST(prev_comm AS VARCHAR) AS comm,
      CAST(prev_state AS VARCHAR) AS state, cpu, FALSE AS is_in, stack_id, cpu_before
    FROM (SELECT *, lag(ts) OVER (PARTITION BY {host}cpu ORDER BY ts) AS cpu_before FROM sched_switch) s
    WHERE prev_tid <> 0
    UNION ALL
    SELECT {host}ts, next_tid, next_pid, CAST(next_comm AS VARCHAR), CAST(NULL AS VARCHAR), cpu, TRUE, CAST(NULL AS BIGINT), ts AS cpu_before
    FROM sched_switch WHERE next_tid <> 0
  ) switches
  WINDOW thread AS (PARTITION BY {host}tid ORDER BY ts, is_in)
) edges
WHERE NOT is_in AND ts_end IS NOT NULL",
};

pub static RUNQ_LATENCY: View = View {
    name: "runq_latency",
    doc: "Run-queue latency: one row per wait of a thread to run, as BCC's runqlat counts them and the kernel's \
          `run_delay` (`/proc/PID/schedstat`) sums them: from a wakeup (`sched_wakeup`) of a thread off the CPU, \
          or from a switch-out that left it runnable (`prev_state` `R`, preempted), to its next switch-in. \
          Of several wakeups before a run the last counts; a wakeup of a thread still on its CPU (woken before it \
          switched out) or already preempted starts no wait; a switch-out in any other state ends the wait \
          unpaired.",
    columns: &[
        col("ts", Timestamp, false, "ns, UTC", "When the thread began to wait: woken, or preempted."),
        col("ts_run", Timestamp, false, "ns, UTC", "When it next ran."),
        col("latency_ns", Int64, false, "ns", "Time it waited to run: `ts_run - ts`."),
        col("tid", Int32, false, "", "Thread."),
        col("pid", Int32, false, "", "Process of the thread."),
        col("comm", Text, false, "", "Thread name when it began to wait."),
        col("cpu", Int32, false, "", "CPU it ran on."),
        col("after", Text, false, "", "What the wait followed: `wakeup` or `preemption`."),
    ],
    // Per thread, in time order (wakeups, then switch-outs, then switch-ins
    // at one instant): `opened` is how the thread last switched (null before
    // its first switch): 3 in, 1 out runnable (`R`), 2 out in another state,
    // taken as the code of the latest switch by a running maximum of
    // `ts * 4 + code` (in DECIMAL, to hold it), which costs one pass where a
    // last-non-null would rescan. A wakeup starts a wait only after a
    // switch-out not `R` (or before the first switch); an `R` switch-out
    // starts one itself; a wait pairs with the switch-in right after it,
    // where another wait start or a switch-out does not intervene. Both
    // windows order rows the same way, so the engine sorts once.
    template: "SELECT {host}ts, ts_run, CAST(ts_run AS BIGINT) - CAST(ts AS BIGINT) AS latency_ns, tid, pid, comm, run_cpu AS cpu,
  CASE WHEN kind = 0 THEN 'wakeup' ELSE 'preemption' END AS after
FROM (
  SELECT {host}ts, tid, pid, comm, kind, state,
    lead(ts) OVER thread AS ts_run,
    lead(cpu) OVER thread AS run_cpu,
    lead(kind) OVER thread AS next_kind
  FROM (
    SELECT {host}ts, tid, pid, comm, kind, state, cpu,
      max(CASE WHEN kind = 0 THEN NULL
               ELSE CAST(CAST(ts AS BIGINT) AS DECIMAL(38, 0)) * 4
                 + CASE WHEN kind = 2 THEN 3 WHEN state = 'R' THEN 1 ELSE 2 END END)
        OVER (PARTITION BY {host}tid ORDER BY ts, kind ROWS UNBOUNDED PRECEDING) % 4 AS opened
    FROM (
      SELECT {host}ts, tid, pid, CAST(comm AS VARCHAR) AS comm, 0 AS kind, CAST(NULL AS VARCHAR) AS state, target_cpu AS cpu
      FROM sched_wakeup
      UNION ALL
      SELECT {host}ts, prev_tid, prev_pid, CAST(prev_comm AS VARCHAR), 1, CAST(prev_state AS VARCHAR), cpu
      FROM sched_switch WHERE prev_tid <> 0
      UNION ALL
      SELECT {host}ts, next_tid, next_pid, CAST(next_comm AS VARCHAR), 2, CAST(NULL AS VARCHAR), cpu
      FROM sched_switch WHERE next_tid <> 0
    ) events
  ) tracked
  WHERE kind > 0 OR opened IS NULL OR opened = 2
  WINDOW thread AS (PARTITION BY {host}tid ORDER BY ts, kind)
) edges
WHERE (kind = 0 OR (kind = 1 AND state = 'R')) AND next_kind = 2",
};

pub static COUNTER_RATE: View = View {
    name: "counter_rate",
    doc: "Counters as per-sample deltas: one row per `counter` sample that has a previous sample in its series \
          (`source`, `name`, `scope`), with the change since that sample and its rate. A value that goes backwards \
          (a reboot) counts as zero. For gauges (`MemFree`, `procs_running`) read `value`, not `delta`. \
          Per-interval rates: `SELECT date_bin(INTERVAL '10 seconds', ts) t, sum(delta) / sum(seconds) FROM counter_rate \
          WHERE name = 'pgfault' GROUP BY t`.",
    columns: &[
        col("ts", Timestamp, false, "ns, UTC", "When the sample was read."),
        col("ts_prev", Timestamp, false, "ns, UTC", "When the previous sample of the series was read."),
        col("seconds", Float64, false, "s", "Time between the two samples."),
        col("source", Text, false, "", "As in `counter`."),
        col("name", Text, false, "", "As in `counter`."),
        col("scope", Text, true, "", "As in `counter`."),
        col("value", Int64, false, "see `counter`", "The raw value at `ts`."),
        col("delta", Int64, false, "see `counter`", "`value` minus the previous sample's, or 0 where it went backwards."),
        col("rate", Float64, false, "per second", "`delta / seconds`."),
    ],
    template: "SELECT {host}ts, ts_prev, seconds, source, name, scope, value, delta, delta / seconds AS rate
FROM (
  SELECT {host}ts, CAST(source AS VARCHAR) AS source, CAST(name AS VARCHAR) AS name, CAST(scope AS VARCHAR) AS scope, value,
    lag(ts) OVER series AS ts_prev,
    (CAST(ts AS BIGINT) - CAST(lag(ts) OVER series AS BIGINT)) / 1e9 AS seconds,
    greatest(value - lag(value) OVER series, 0) AS delta
  FROM counter
  WINDOW series AS (PARTITION BY {host}source, name, scope ORDER BY ts)
) steps
WHERE ts_prev IS NOT NULL AND seconds > 0",
};

/// Every view, in the order the docs list them.
pub static VIEWS: &[&View] = &[&CPU_TIME, &OFF_CPU, &RUNQ_LATENCY, &COUNTER_RATE];
