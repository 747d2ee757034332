//! The one streaming pass that builds the derived tables ([`crate::derived`])
//! from `sched_switch` and `sched_wakeup` rows.
//!
//! Rows come in as the recorder wrote them: each batch sorted by `cpu, ts`,
//! batches in roughly increasing time. Every (table, CPU) is a stream in
//! time order, so a k-way merge over those streams yields all events in
//! time order without a global sort. Events are paired only once they are
//! [`REORDER_NS`] older than the newest event seen, so a row that reached
//! the recorder late still lands in order. At one instant, wakeups come
//! before switch-outs and those before switch-ins, the tie order of the
//! views' `ORDER BY ts, is_in`.
//!
//! State is per CPU (the thread on it) and per thread (on a CPU or not, its
//! last switch-out, and when it began to wait to run): memory follows the
//! live threads and the reorder window, never the rows. Finished rows gather in
//! Arrow builders until [`Pairing::take`] hands them out.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayBuilder, ArrayRef, AsArray, Int32Builder, Int64Builder, RecordBatch,
    StringDictionaryBuilder, TimestampNanosecondBuilder,
};
use arrow::datatypes::{Int32Type, Int64Type, TimestampNanosecondType};
use arrow::error::ArrowError;

use crate::derived::{CPU_SLICE, OFF_CPU_INTERVAL, RUNQ_WAIT, THREAD_SECOND};
use crate::Table;

/// How much event time passes before an event is paired: the most a row
/// may reach the recorder after rows of other CPUs that are newer than it.
/// The recorder drains every ring each turn (a turn is at most 100 ms), so a
/// second is far beyond what it sees; an event later still is paired out
/// of order and counted in [`Pairing::late`].
pub const REORDER_NS: i64 = 1_000_000_000;

#[derive(Clone, Copy)]
struct Switch {
    ts: i64,
    cpu: i32,
    prev_tid: i32,
    prev_pid: i32,
    prev_comm: u32,
    prev_state: u32,
    next_tid: i32,
    next_pid: i32,
    next_comm: u32,
    next_prio: i32,
    stack_id: Option<i64>,
}

#[derive(Clone, Copy)]
struct Wakeup {
    ts: i64,
    tid: i32,
    pid: i32,
    comm: u32,
}

/// The thread on a CPU since its switch-in.
#[derive(Clone, Copy)]
struct OnCpu {
    ts: i64,
    tid: i32,
    pid: i32,
    comm: u32,
    prio: i32,
}

/// A thread's last switch-out, waiting for its next switch-in.
#[derive(Clone, Copy)]
struct Out {
    ts: i64,
    pid: i32,
    comm: u32,
    state: u32,
    cpu: i32,
    stack_id: Option<i64>,
}

/// The start of a wait in a run queue: a wakeup, or a switch-out that
/// left the thread runnable (`R`, preempted).
#[derive(Clone, Copy)]
struct WaitStart {
    ts: i64,
    pid: i32,
    comm: u32,
    preempted: bool,
}

#[derive(Clone, Copy, Default)]
struct ThreadState {
    /// On a CPU since its last switch-in; false too while not yet seen.
    running: bool,
    out: Option<Out>,
    wait: Option<WaitStart>,
}

/// Names (`comm`, `prev_state`) as small integers, so events stay `Copy`.
#[derive(Default)]
struct Names {
    ids: HashMap<Box<str>, u32>,
    names: Vec<Box<str>>,
}

impl Names {
    fn id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.into());
        self.ids.insert(name.into(), id);
        id
    }

    fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }

    /// Every value of a string or dictionary column as ids.
    fn column(&mut self, batch: &RecordBatch, column: &str) -> Result<Vec<u32>, ArrowError> {
        let array = column_of(batch, column)?;
        if let Some(dict) = array.as_dictionary_opt::<Int32Type>() {
            let values = dict.values().as_string::<i32>();
            let ids: Vec<u32> = (0..values.len())
                .map(|i| self.id(values.value(i)))
                .collect();
            return Ok(dict
                .keys()
                .iter()
                .map(|k| k.map_or_else(|| self.id(""), |k| ids[k as usize]))
                .collect());
        }
        let strings = array
            .as_string_opt::<i32>()
            .ok_or_else(|| wrong_type(column))?;
        Ok((0..strings.len())
            .map(|i| {
                self.id(if strings.is_null(i) {
                    ""
                } else {
                    strings.value(i)
                })
            })
            .collect())
    }
}

fn column_of<'a>(batch: &'a RecordBatch, column: &str) -> Result<&'a ArrayRef, ArrowError> {
    batch
        .column_by_name(column)
        .ok_or_else(|| ArrowError::SchemaError(format!("no column {column}")))
}

fn wrong_type(column: &str) -> ArrowError {
    ArrowError::SchemaError(format!("column {column} has an unexpected type"))
}

fn i32s(batch: &RecordBatch, column: &str) -> Result<Vec<i32>, ArrowError> {
    let array = column_of(batch, column)?
        .as_primitive_opt::<Int32Type>()
        .ok_or_else(|| wrong_type(column))?;
    Ok(array.iter().map(Option::unwrap_or_default).collect())
}

fn timestamps(batch: &RecordBatch) -> Result<Vec<i64>, ArrowError> {
    let array = column_of(batch, "ts")?
        .as_primitive_opt::<TimestampNanosecondType>()
        .ok_or_else(|| wrong_type("ts"))?;
    Ok(array.iter().map(Option::unwrap_or_default).collect())
}

/// Appends `event` to a stream that should be in time order; keeps it so
/// (rarely needed) when it is not.
fn push_in_order<T: Copy>(queue: &mut VecDeque<T>, event: T, ts: impl Fn(&T) -> i64) {
    let at = ts(&event);
    if queue.back().is_none_or(|last| ts(last) <= at) {
        queue.push_back(event);
    } else {
        let position = queue.partition_point(|e| ts(e) <= at);
        queue.insert(position, event);
    }
}

/// Which stream a merge head belongs to: wakeups sort before switches at
/// the same instant.
const WAKEUPS: u8 = 0;
const SWITCHES: u8 = 1;

/// Builders of one output table's rows.
struct Rows {
    table: &'static Table,
    ts: TimestampNanosecondBuilder,
    ts_end: TimestampNanosecondBuilder,
    dur: Int64Builder,
    ints: Vec<Int32Builder>,
    names: Vec<StringDictionaryBuilder<Int32Type>>,
    stack_id: Int64Builder,
}

impl Rows {
    fn new(table: &'static Table) -> Rows {
        let count = |kind| table.columns.iter().filter(|c| c.kind == kind).count();
        Rows {
            table,
            ts: TimestampNanosecondBuilder::new(),
            ts_end: TimestampNanosecondBuilder::new(),
            dur: Int64Builder::new(),
            ints: (0..count(crate::ColumnType::Int32))
                .map(|_| Int32Builder::new())
                .collect(),
            names: (0..count(crate::ColumnType::Name))
                .map(|_| StringDictionaryBuilder::new())
                .collect(),
            stack_id: Int64Builder::new(),
        }
    }

    fn len(&self) -> usize {
        self.ts.len()
    }

    /// One row: start, end, then the Int32 and Name columns in schema order.
    fn push(&mut self, ts: i64, ts_end: i64, ints: &[i32], names: &[&str]) {
        self.ts.append_value(ts);
        self.ts_end.append_value(ts_end);
        self.dur.append_value(ts_end - ts);
        for (builder, &v) in self.ints.iter_mut().zip(ints) {
            builder.append_value(v);
        }
        for (builder, v) in self.names.iter_mut().zip(names) {
            builder.append_value(v);
        }
    }

    fn finish(&mut self) -> RecordBatch {
        let utc = |b: &mut TimestampNanosecondBuilder| -> ArrayRef {
            Arc::new(b.finish().with_timezone("UTC"))
        };
        let (mut ints, mut names) = (self.ints.iter_mut(), self.names.iter_mut());
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.table.columns.len());
        for (i, column) in self.table.columns.iter().enumerate() {
            use crate::ColumnType::*;
            columns.push(match (i, column.kind) {
                (0, Timestamp) => utc(&mut self.ts),
                (_, Timestamp) => utc(&mut self.ts_end),
                (_, Int64) if column.nullable => Arc::new(self.stack_id.finish()),
                (_, Int64) => Arc::new(self.dur.finish()),
                (_, Int32) => Arc::new(ints.next().expect("an Int32 builder").finish()),
                (_, Name) => Arc::new(names.next().expect("a Name builder").finish()),
                (_, kind) => unreachable!("derived tables have no {kind:?} column"),
            });
        }
        RecordBatch::try_new(self.table.schema(), columns).expect("rows match their table")
    }
}

const SECOND_NS: i64 = 1_000_000_000;

/// Which `thread_second` column an interval adds to.
#[derive(Clone, Copy)]
enum Share {
    OnCpu,
    Runq,
    OffS,
    OffD,
    OffR,
    OffOther,
}

/// One thread's second: nanoseconds per [`Share`], and the counts.
#[derive(Clone, Copy, Default)]
struct Cell {
    pid: i32,
    comm: u32,
    ns: [i64; 6],
    runs: i64,
    waits: i64,
}

/// `thread_second` rows being summed: each interval split at the edges of
/// the seconds it covers. A cell leaves once its second is over for the
/// pairing; an interval that ends later still (a long sleep) makes new
/// cells for its earlier seconds, which is why readers sum per (ts, tid).
#[derive(Default)]
struct Seconds {
    cells: HashMap<(i64, i32), Cell>,
}

impl Seconds {
    /// Adds the interval `[ts, end)` of thread `(tid, pid, comm)`.
    fn add(&mut self, ts: i64, end: i64, (tid, pid, comm): (i32, i32, u32), share: Share) {
        let mut from = ts;
        let first = ts.div_euclid(SECOND_NS) * SECOND_NS;
        let mut second = first;
        while from < end || (from == end && second == first) {
            let to = end.min(second + SECOND_NS);
            let cell = self.cells.entry((second, tid)).or_default();
            cell.pid = pid;
            cell.comm = comm;
            cell.ns[share as usize] += to - from;
            if second == first {
                match share {
                    Share::OnCpu => cell.runs += 1,
                    Share::Runq => cell.waits += 1,
                    _ => {}
                }
            }
            from = to;
            second += SECOND_NS;
        }
    }

    /// The cells of seconds before `limit`, as `thread_second` rows.
    fn finish_before(&mut self, limit: i64, names: &Names) -> RecordBatch {
        let mut done: Vec<((i64, i32), Cell)> = Vec::new();
        self.cells.retain(|&key, cell| {
            let keep = key.0 >= limit;
            if !keep {
                done.push((key, *cell));
            }
            keep
        });
        let mut ts = TimestampNanosecondBuilder::with_capacity(done.len());
        let mut tid = Int32Builder::with_capacity(done.len());
        let mut pid = Int32Builder::with_capacity(done.len());
        let mut comm = StringDictionaryBuilder::<Int32Type>::new();
        let mut ns: Vec<Int64Builder> = (0..6).map(|_| Int64Builder::new()).collect();
        let mut runs = Int64Builder::with_capacity(done.len());
        let mut waits = Int64Builder::with_capacity(done.len());
        for ((second, thread), cell) in &done {
            ts.append_value(*second);
            tid.append_value(*thread);
            pid.append_value(cell.pid);
            comm.append_value(names.name(cell.comm));
            for (builder, v) in ns.iter_mut().zip(cell.ns) {
                builder.append_value(v);
            }
            runs.append_value(cell.runs);
            waits.append_value(cell.waits);
        }
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(ts.finish().with_timezone("UTC")),
            Arc::new(tid.finish()),
            Arc::new(pid.finish()),
            Arc::new(comm.finish()),
        ];
        columns.extend(ns.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
        columns.push(Arc::new(runs.finish()));
        columns.push(Arc::new(waits.finish()));
        RecordBatch::try_new(THREAD_SECOND.schema(), columns).expect("cells match thread_second")
    }
}

/// The pairing pass. Feed it batches with [`Pairing::push_switches`] and
/// [`Pairing::push_wakeups`], let it pair what is old enough with
/// [`Pairing::advance`] (or everything, at the end, with
/// [`Pairing::finish`]), and take the rows with [`Pairing::take`].
pub struct Pairing {
    names: Names,
    switches: Vec<VecDeque<Switch>>,
    wakeups: Vec<VecDeque<Wakeup>>,
    /// The head of every non-empty stream: (ts, kind, CPU).
    heads: BinaryHeap<Reverse<(i64, u8, usize)>>,
    newest: i64,
    /// The last instant paired, and how many events came in before it.
    paired_until: i64,
    late: u64,
    /// Session starts still ahead: state is dropped when one is crossed.
    session_starts: VecDeque<i64>,
    on_cpu: Vec<Option<OnCpu>>,
    /// When each CPU last switched: the earliest a switch-in that left no
    /// event there can have happened.
    last_switch: Vec<Option<i64>>,
    threads: HashMap<i32, ThreadState>,
    /// The events of one instant, taken from the streams together.
    instant: Vec<(u8, usize)>,
    slices: Rows,
    off_cpu: Rows,
    runq: Rows,
    seconds: Seconds,
    finished: bool,
}

impl Pairing {
    /// A pass over a recording whose sessions (recorder runs) started at
    /// `session_starts` (UTC ns): no interval is paired across one.
    pub fn new(mut session_starts: Vec<i64>) -> Pairing {
        session_starts.sort_unstable();
        Pairing {
            names: Names::default(),
            switches: Vec::new(),
            wakeups: Vec::new(),
            heads: BinaryHeap::new(),
            newest: i64::MIN,
            paired_until: i64::MIN,
            late: 0,
            session_starts: session_starts.into(),
            on_cpu: Vec::new(),
            last_switch: Vec::new(),
            threads: HashMap::new(),
            instant: Vec::new(),
            slices: Rows::new(&CPU_SLICE),
            off_cpu: Rows::new(&OFF_CPU_INTERVAL),
            runq: Rows::new(&RUNQ_WAIT),
            seconds: Seconds::default(),
            finished: false,
        }
    }

    /// Events that arrived after later ones were already paired (more than
    /// [`REORDER_NS`] late): paired out of order.
    pub fn late(&self) -> u64 {
        self.late
    }

    /// Interval rows finished and not yet taken (`thread_second` cells
    /// are few and leave as their seconds end).
    pub fn finished_rows(&self) -> usize {
        self.slices.len() + self.off_cpu.len() + self.runq.len()
    }

    /// Adds `sched_switch` rows (any projection holding the columns used).
    pub fn push_switches(&mut self, batch: &RecordBatch) -> Result<(), ArrowError> {
        let ts = timestamps(batch)?;
        let cpu = i32s(batch, "cpu")?;
        let prev_tid = i32s(batch, "prev_tid")?;
        let prev_pid = i32s(batch, "prev_pid")?;
        let next_tid = i32s(batch, "next_tid")?;
        let next_pid = i32s(batch, "next_pid")?;
        let next_prio = i32s(batch, "next_prio")?;
        let prev_comm = self.names.column(batch, "prev_comm")?;
        let prev_state = self.names.column(batch, "prev_state")?;
        let next_comm = self.names.column(batch, "next_comm")?;
        let stack_id = batch
            .column_by_name("stack_id")
            .and_then(|a| a.as_primitive_opt::<Int64Type>());
        for i in 0..batch.num_rows() {
            let c = cpu[i].max(0) as usize;
            let event = Switch {
                ts: ts[i],
                cpu: cpu[i],
                prev_tid: prev_tid[i],
                prev_pid: prev_pid[i],
                prev_comm: prev_comm[i],
                prev_state: prev_state[i],
                next_tid: next_tid[i],
                next_pid: next_pid[i],
                next_comm: next_comm[i],
                next_prio: next_prio[i],
                stack_id: stack_id.and_then(|s| (!s.is_null(i)).then(|| s.value(i))),
            };
            if self.switches.len() <= c {
                self.switches.resize_with(c + 1, VecDeque::new);
            }
            self.note(event.ts, SWITCHES, c, self.switches[c].is_empty());
            push_in_order(&mut self.switches[c], event, |e| e.ts);
        }
        Ok(())
    }

    /// Adds `sched_wakeup` rows (any projection holding the columns used).
    pub fn push_wakeups(&mut self, batch: &RecordBatch) -> Result<(), ArrowError> {
        let ts = timestamps(batch)?;
        let cpu = i32s(batch, "cpu")?;
        let tid = i32s(batch, "tid")?;
        let pid = i32s(batch, "pid")?;
        let comm = self.names.column(batch, "comm")?;
        for i in 0..batch.num_rows() {
            let c = cpu[i].max(0) as usize;
            let event = Wakeup {
                ts: ts[i],
                tid: tid[i],
                pid: pid[i],
                comm: comm[i],
            };
            if self.wakeups.len() <= c {
                self.wakeups.resize_with(c + 1, VecDeque::new);
            }
            self.note(event.ts, WAKEUPS, c, self.wakeups[c].is_empty());
            push_in_order(&mut self.wakeups[c], event, |e| e.ts);
        }
        Ok(())
    }

    /// Bookkeeping for an event about to join stream (`kind`, `cpu`).
    fn note(&mut self, ts: i64, kind: u8, cpu: usize, stream_empty: bool) {
        self.newest = self.newest.max(ts);
        if ts < self.paired_until {
            self.late += 1;
        }
        if stream_empty {
            self.heads.push(Reverse((ts, kind, cpu)));
        }
    }

    fn head_ts(&self, kind: u8, cpu: usize) -> Option<i64> {
        match kind {
            WAKEUPS => self.wakeups[cpu].front().map(|e| e.ts),
            _ => self.switches[cpu].front().map(|e| e.ts),
        }
    }

    /// Pairs every event older than [`REORDER_NS`] before `read_until`:
    /// the time every source has been read up to (the least, over the
    /// sources still being read, of the newest row each has given).
    pub fn advance(&mut self, read_until: i64) {
        self.pair_until(read_until.min(self.newest).saturating_sub(REORDER_NS));
    }

    /// Pairs every event left: the recording ends here.
    pub fn finish(&mut self) {
        self.pair_until(i64::MAX);
        self.finished = true;
    }

    fn pair_until(&mut self, limit: i64) {
        while let Some(&Reverse((ts, kind, cpu))) = self.heads.peek() {
            // A head can be stale: an out-of-order row went in front of it.
            if self.head_ts(kind, cpu) != Some(ts) {
                self.heads.pop();
                if let Some(actual) = self.head_ts(kind, cpu) {
                    self.heads.push(Reverse((actual, kind, cpu)));
                }
                continue;
            }
            if ts >= limit {
                break;
            }
            // Every event of this instant, across all streams.
            self.instant.clear();
            while let Some(&Reverse((t, kind, cpu))) = self.heads.peek() {
                if t != ts || self.head_ts(kind, cpu) != Some(t) {
                    break;
                }
                self.heads.pop();
                self.instant.push((kind, cpu));
            }
            self.pair_instant(ts);
        }
        self.paired_until = self.paired_until.max(limit.min(self.newest));
    }

    fn pair_instant(&mut self, ts: i64) {
        while self
            .session_starts
            .front()
            .is_some_and(|&start| start <= ts)
        {
            self.session_starts.pop_front();
            self.on_cpu.iter_mut().for_each(|c| *c = None);
            self.last_switch.iter_mut().for_each(|c| *c = None);
            self.threads.clear();
        }
        let mut instant = std::mem::take(&mut self.instant);
        // Take one event from each stream at this instant; streams with
        // several events at this instant are visited again by the loop in
        // `pair_until` (their next head has the same ts).
        let mut switches = Vec::new();
        for &(kind, cpu) in &instant {
            if kind == WAKEUPS {
                let wakeup = self.wakeups[cpu].pop_front().expect("a head");
                self.wake(wakeup);
            } else {
                switches.push(self.switches[cpu].pop_front().expect("a head"));
            }
        }
        for switch in &switches {
            self.switch_out(switch);
        }
        for switch in &switches {
            self.switch_in(switch);
        }
        for (kind, cpu) in instant.drain(..) {
            if let Some(next) = self.head_ts(kind, cpu) {
                self.heads.push(Reverse((next, kind, cpu)));
            }
        }
        self.instant = instant;
    }

    /// A wakeup starts a wait only for a thread off the CPU and not yet
    /// runnable: the kernel also reports wakeups of a thread still on its
    /// CPU (woken between deciding to sleep and switching out), which do not
    /// make it wait, and a preempted thread waits from its switch-out. Of
    /// several wakeups before a run, the last counts (BCC's runqlat).
    fn wake(&mut self, wakeup: Wakeup) {
        let thread = self.threads.entry(wakeup.tid).or_default();
        if thread.running || thread.wait.is_some_and(|w| w.preempted) {
            return;
        }
        thread.wait = Some(WaitStart {
            ts: wakeup.ts,
            pid: wakeup.pid,
            comm: wakeup.comm,
            preempted: false,
        });
    }

    fn switch_out(&mut self, s: &Switch) {
        if s.prev_tid == 0 {
            return;
        }
        // Switched out again with no switch-in seen: it was put on this CPU
        // without an event (see the `off_cpu` view), after the CPU's last
        // switch. That instant ends its time off the CPU: a lower bound
        // (none where nothing switched there since it left).
        let unseen_in = self.threads.get_mut(&s.prev_tid).and_then(|t| t.out.take());
        if let Some(out) = unseen_in {
            let since = self
                .last_switch
                .get(s.cpu.max(0) as usize)
                .copied()
                .flatten();
            if let Some(since) = since.filter(|&since| since > out.ts) {
                self.end_off_cpu(out, s.prev_tid, since, s.cpu);
            }
        }
        let dead = matches!(self.names.name(s.prev_state), "X" | "Z");
        let out = (!dead).then_some(Out {
            ts: s.ts,
            pid: s.prev_pid,
            comm: s.prev_comm,
            state: s.prev_state,
            cpu: s.cpu,
            stack_id: s.stack_id,
        });
        if dead {
            self.threads.remove(&s.prev_tid);
            return;
        }
        let preempted = self.names.name(s.prev_state) == "R";
        let thread = self.threads.entry(s.prev_tid).or_default();
        thread.running = false;
        thread.out = out;
        thread.wait = preempted.then_some(WaitStart {
            ts: s.ts,
            pid: s.prev_pid,
            comm: s.prev_comm,
            preempted: true,
        });
    }

    fn switch_in(&mut self, s: &Switch) {
        let cpu = s.cpu.max(0) as usize;
        if self.on_cpu.len() <= cpu {
            self.on_cpu.resize(cpu + 1, None);
        }
        if self.last_switch.len() <= cpu {
            self.last_switch.resize(cpu + 1, None);
        }
        self.last_switch[cpu] = Some(s.ts);
        if let Some(on) = self.on_cpu[cpu].take() {
            if on.tid == s.prev_tid {
                self.slices.push(
                    on.ts,
                    s.ts,
                    &[s.cpu, on.tid, on.pid, on.prio],
                    &[self.names.name(on.comm), self.names.name(s.prev_state)],
                );
                let who = (on.tid, on.pid, on.comm);
                self.seconds.add(on.ts, s.ts, who, Share::OnCpu);
            }
        }
        if s.next_tid == 0 {
            return;
        }
        self.on_cpu[cpu] = Some(OnCpu {
            ts: s.ts,
            tid: s.next_tid,
            pid: s.next_pid,
            comm: s.next_comm,
            prio: s.next_prio,
        });
        let thread = self.threads.entry(s.next_tid).or_default();
        thread.running = true;
        let (out, wait) = (thread.out.take(), thread.wait.take());
        if let Some(out) = out {
            self.end_off_cpu(out, s.next_tid, s.ts, s.cpu);
        }
        if let Some(wait) = wait {
            let after = if wait.preempted {
                "preemption"
            } else {
                "wakeup"
            };
            self.runq.push(
                wait.ts,
                s.ts,
                &[s.next_tid, wait.pid, s.cpu],
                &[self.names.name(wait.comm), after],
            );
            let who = (s.next_tid, wait.pid, wait.comm);
            self.seconds.add(wait.ts, s.ts, who, Share::Runq);
        }
    }

    /// A thread's time off the CPU since `out`, ended at `end` on `cpu`.
    fn end_off_cpu(&mut self, out: Out, tid: i32, end: i64, cpu: i32) {
        self.off_cpu.push(
            out.ts,
            end,
            &[tid, out.pid, out.cpu, cpu],
            &[self.names.name(out.comm), self.names.name(out.state)],
        );
        self.off_cpu.stack_id.append_option(out.stack_id);
        let share = match self.names.name(out.state) {
            "S" => Share::OffS,
            "D" => Share::OffD,
            "R" | "R+" => Share::OffR,
            _ => Share::OffOther,
        };
        self.seconds
            .add(out.ts, end, (tid, out.pid, out.comm), share);
    }

    /// The rows finished so far, one batch per derived table in the order
    /// of [`crate::derived::DERIVED_TABLES`], in the order they finished
    /// (not sorted by `ts`).
    /// `thread_second` holds the seconds that ended before the last
    /// instant paired (all of them after [`Pairing::finish`]).
    pub fn take(&mut self) -> [RecordBatch; 4] {
        let done = if self.finished {
            i64::MAX
        } else {
            self.paired_until.div_euclid(SECOND_NS) * SECOND_NS
        };
        [
            self.slices.finish(),
            self.off_cpu.finish(),
            self.runq.finish(),
            self.seconds.finish_before(done, &self.names),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::{SCHED_SWITCH, SCHED_WAKEUP};
    use arrow::array::{
        BooleanArray, DictionaryArray, Int32Array, Int64Array, TimestampNanosecondArray,
    };

    /// `(ts, cpu, prev_tid, prev_state, next_tid)`; pid = tid, comm `t<tid>`.
    type Sw = (i64, i32, i32, &'static str, i32);
    /// `(ts, cpu, tid)`.
    type Wk = (i64, i32, i32);

    fn names(values: impl Iterator<Item = String>) -> ArrayRef {
        let values: Vec<String> = values.collect();
        Arc::new(
            values
                .iter()
                .map(String::as_str)
                .collect::<DictionaryArray<Int32Type>>(),
        )
    }

    fn utc(ts: impl Iterator<Item = i64>) -> ArrayRef {
        Arc::new(TimestampNanosecondArray::from_iter_values(ts).with_timezone("UTC"))
    }

    fn switches(rows: &[Sw]) -> RecordBatch {
        let int = |f: fn(&Sw) -> i32| -> ArrayRef {
            Arc::new(rows.iter().map(f).collect::<Int32Array>())
        };
        RecordBatch::try_new(
            SCHED_SWITCH.schema(),
            vec![
                utc(rows.iter().map(|r| r.0)),
                int(|r| r.1),
                int(|r| r.2),
                int(|r| r.2),
                names(rows.iter().map(|r| format!("t{}", r.2))),
                names(rows.iter().map(|r| r.3.to_owned())),
                int(|_| 120),
                int(|r| r.4),
                int(|r| r.4),
                names(rows.iter().map(|r| format!("t{}", r.4))),
                int(|_| 120),
                Arc::new(Int64Array::from(vec![None; rows.len()])),
            ],
        )
        .unwrap()
    }

    fn wakeups(rows: &[Wk]) -> RecordBatch {
        let int = |f: fn(&Wk) -> i32| -> ArrayRef {
            Arc::new(rows.iter().map(f).collect::<Int32Array>())
        };
        RecordBatch::try_new(
            SCHED_WAKEUP.schema(),
            vec![
                utc(rows.iter().map(|r| r.0)),
                int(|r| r.1),
                int(|r| r.2),
                int(|r| r.2),
                names(rows.iter().map(|r| format!("t{}", r.2))),
                int(|r| r.1),
                int(|_| 0),
                int(|_| 0),
                Arc::new(BooleanArray::from(vec![false; rows.len()])),
                int(|_| 120),
            ],
        )
        .unwrap()
    }

    /// Each output table as `(ts, end, tid, text)` rows sorted by `ts`:
    /// text is `end_state`, `state` or `comm`.
    fn rows(batch: &RecordBatch, tid: usize, text: usize) -> Vec<(i64, i64, i32, String)> {
        let ts = batch.column(0).as_primitive::<TimestampNanosecondType>();
        let end = batch.column(1).as_primitive::<TimestampNanosecondType>();
        let tids = batch.column(tid).as_primitive::<Int32Type>();
        let text =
            arrow::compute::cast(batch.column(text), &arrow::datatypes::DataType::Utf8).unwrap();
        let text = text.as_string::<i32>();
        let mut out: Vec<_> = (0..batch.num_rows())
            .map(|i| {
                (
                    ts.value(i),
                    end.value(i),
                    tids.value(i),
                    text.value(i).to_owned(),
                )
            })
            .collect();
        out.sort();
        out
    }

    type Out = Vec<(i64, i64, i32, String)>;

    fn pair(batches: &[(&[Sw], &[Wk])], sessions: Vec<i64>) -> (Out, Out, Out, u64) {
        let mut pairing = Pairing::new(sessions);
        let mut all: Vec<[RecordBatch; 4]> = Vec::new();
        for (sw, wk) in batches {
            pairing.push_switches(&switches(sw)).unwrap();
            pairing.push_wakeups(&wakeups(wk)).unwrap();
            pairing.advance(i64::MAX);
            all.push(pairing.take());
        }
        pairing.finish();
        all.push(pairing.take());
        let concat = |i: usize| {
            let parts: Vec<RecordBatch> = all.iter().map(|b| b[i].clone()).collect();
            arrow::compute::concat_batches(&parts[0].schema(), &parts).unwrap()
        };
        (
            rows(&concat(0), 4, 8),
            rows(&concat(1), 3, 6),
            rows(&concat(2), 3, 5),
            pairing.late(),
        )
    }

    const S: i64 = REORDER_NS;

    #[test]
    fn pairs_slices_off_cpu_intervals_and_waits_like_the_views() {
        // Thread 7 runs on CPU 0, blocks, is woken, runs on CPU 1.
        let sw: &[Sw] = &[
            (10, 0, 0, "R", 7),
            (20, 0, 7, "S", 0),
            (35, 1, 0, "R", 7),
            (50, 1, 7, "R", 8),
        ];
        let wk: &[Wk] = &[(30, 0, 7)];
        let (slices, off, runq, late) = pair(&[(sw, wk)], vec![]);
        assert_eq!(
            slices,
            vec![(10, 20, 7, "S".into()), (35, 50, 7, "R".into())]
        );
        assert_eq!(off, vec![(20, 35, 7, "S".into())]);
        assert_eq!(runq, vec![(30, 35, 7, "t7".into())]);
        assert_eq!(late, 0);
    }

    /// `runq_wait` rows with their `after` column.
    fn waits(batches: &[(&[Sw], &[Wk])]) -> Out {
        let mut pairing = Pairing::new(vec![]);
        for (sw, wk) in batches {
            pairing.push_switches(&switches(sw)).unwrap();
            pairing.push_wakeups(&wakeups(wk)).unwrap();
        }
        pairing.finish();
        rows(&pairing.take()[2], 3, 7)
    }

    #[test]
    fn a_preempted_thread_waits_from_its_switch_out() {
        // 7 is preempted at 20 (a wakeup at 25 changes nothing: it is
        // runnable already) and runs again at 35.
        let sw: &[Sw] = &[(10, 0, 0, "R", 7), (20, 0, 7, "R", 8), (35, 1, 0, "R", 7)];
        assert_eq!(
            waits(&[(sw, &[(25, 0, 7)])]),
            vec![(20, 35, 7, "preemption".into())]
        );
    }

    #[test]
    fn a_wakeup_of_a_thread_on_its_cpu_starts_no_wait() {
        // Woken at 15 while still on CPU 0, 7 then blocks at 20; its next run
        // at 40 follows no wakeup that was seen: no wait, not one of 25 ns.
        let blocked: &[Sw] = &[(10, 0, 0, "R", 7), (20, 0, 7, "S", 0), (40, 1, 0, "R", 7)];
        assert_eq!(waits(&[(blocked, &[(15, 0, 7)])]), vec![]);
        // Woken at 15 on CPU, preempted at 20: it waited from 20.
        let preempted: &[Sw] = &[(10, 0, 0, "R", 7), (20, 0, 7, "R", 8), (40, 1, 0, "R", 7)];
        assert_eq!(
            waits(&[(preempted, &[(15, 0, 7)])]),
            vec![(20, 40, 7, "preemption".into())]
        );
        // Blocked at 20, woken at 30: a wait after a wakeup.
        assert_eq!(
            waits(&[(blocked, &[(15, 0, 7), (30, 0, 7)])]),
            vec![(30, 40, 7, "wakeup".into())]
        );
    }

    #[test]
    fn a_slice_whose_end_names_another_thread_is_left_out() {
        // A switch-in of 9 was lost: 7's slice ends with 9 leaving.
        let sw: &[Sw] = &[(10, 0, 0, "R", 7), (20, 0, 9, "S", 0)];
        let (slices, off, _, _) = pair(&[(sw, &[])], vec![]);
        assert!(slices.is_empty());
        assert!(off.is_empty(), "9 never came back");
    }

    #[test]
    fn the_last_wakeup_and_the_last_switch_out_count() {
        let sw: &[Sw] = &[(10, 0, 7, "S", 0), (12, 0, 7, "D", 0), (40, 1, 0, "R", 7)];
        let wk: &[Wk] = &[(20, 0, 7), (30, 0, 7)];
        let (_, off, runq, _) = pair(&[(sw, wk)], vec![]);
        assert_eq!(off, vec![(12, 40, 7, "D".into())]);
        assert_eq!(runq, vec![(30, 40, 7, "t7".into())]);
    }

    #[test]
    fn at_one_instant_wakeups_then_switch_outs_then_switch_ins() {
        // 7 leaves CPU 1 and enters CPU 0 at the same nanosecond (rows in
        // the opposite order), woken at that instant too.
        let sw: &[Sw] = &[(5, 1, 0, "R", 7), (10, 0, 0, "R", 7), (10, 1, 7, "R", 0)];
        let wk: &[Wk] = &[(10, 1, 7)];
        let (_, off, runq, _) = pair(&[(sw, wk)], vec![]);
        assert_eq!(off, vec![(10, 10, 7, "R".into())]);
        assert_eq!(runq, vec![(10, 10, 7, "t7".into())]);
    }

    #[test]
    fn rows_late_within_the_window_pair_in_time_order() {
        // The wakeup of 7 arrives a batch after its switch-in, 0.2 s late.
        let first: &[Sw] = &[(10, 0, 7, "S", 0), (2 * S, 1, 0, "R", 7)];
        let late_wakeup: &[Wk] = &[(2 * S - S / 5, 0, 7)];
        let mut pairing = Pairing::new(vec![]);
        pairing.push_switches(&switches(first)).unwrap();
        pairing.advance(2 * S);
        pairing.push_wakeups(&wakeups(late_wakeup)).unwrap();
        pairing.finish();
        let [_, _, runq, _] = pairing.take();
        assert_eq!(
            rows(&runq, 3, 5),
            vec![(2 * S - S / 5, 2 * S, 7, "t7".into())]
        );
        assert_eq!(pairing.late(), 0);
        // Beyond the window it is counted.
        let mut pairing = Pairing::new(vec![]);
        pairing.push_switches(&switches(first)).unwrap();
        pairing.advance(i64::MAX);
        pairing
            .push_wakeups(&wakeups(&[(10 + S / 2, 0, 7)]))
            .unwrap();
        assert_eq!(pairing.late(), 1);
    }

    #[test]
    fn nothing_pairs_across_a_restart_or_after_a_dead_thread() {
        let sw: &[Sw] = &[
            (10, 0, 7, "S", 0),
            (30, 0, 0, "R", 7),
            (40, 0, 7, "X", 0),
            (50, 0, 0, "R", 7),
        ];
        let (_, off, _, _) = pair(&[(sw, &[])], vec![0, 20]);
        assert!(off.is_empty(), "{off:?}");
    }

    #[test]
    fn state_carries_from_one_batch_to_the_next() {
        let a: &[Sw] = &[(10, 0, 0, "R", 7)];
        let b: &[Sw] = &[(3 * S, 0, 7, "S", 0)];
        let c: &[Sw] = &[(6 * S, 1, 0, "R", 7)];
        let (slices, off, _, _) = pair(&[(a, &[]), (b, &[]), (c, &[])], vec![]);
        assert_eq!(slices, vec![(10, 3 * S, 7, "S".into())]);
        assert_eq!(off, vec![(3 * S, 6 * S, 7, "S".into())]);
    }

    /// `thread_second` summed per (second, tid): `(second, tid, ns per
    /// share, runs, wakeups)`.
    fn seconds_of(batches: &[RecordBatch]) -> Vec<(i64, i32, [i64; 6], i64, i64)> {
        let mut sums: std::collections::BTreeMap<(i64, i32), ([i64; 6], i64, i64)> =
            Default::default();
        for batch in batches {
            let ts = batch.column(0).as_primitive::<TimestampNanosecondType>();
            let tid = batch.column(1).as_primitive::<Int32Type>();
            let int64 = |i: usize| batch.column(i).as_primitive::<Int64Type>();
            for row in 0..batch.num_rows() {
                let sum = sums.entry((ts.value(row), tid.value(row))).or_default();
                for share in 0..6 {
                    sum.0[share] += int64(4 + share).value(row);
                }
                sum.1 += int64(10).value(row);
                sum.2 += int64(11).value(row);
            }
        }
        sums.into_iter()
            .map(|((second, tid), (ns, runs, wakeups))| (second, tid, ns, runs, wakeups))
            .collect()
    }

    #[test]
    fn thread_seconds_split_every_interval_at_second_edges() {
        // 7 runs 0.5 s .. 2.25 s, sleeps in D until 5.5 s, woken at 5.25 s,
        // runs on CPU 1 from 5.5 s to 5.75 s. The sleep ends batches after
        // its first seconds were handed out: they come again as new rows.
        let ms = |n: i64| n * S / 1000;
        let batches: &[(&[Sw], &[Wk])] = &[
            (&[(ms(500), 0, 0, "R", 7), (ms(2250), 0, 7, "D", 0)], &[]),
            (&[(ms(4000), 0, 0, "R", 0)], &[(ms(5250), 0, 7)]),
            (&[(ms(5500), 1, 0, "R", 7), (ms(5750), 1, 7, "S", 0)], &[]),
        ];
        let mut pairing = Pairing::new(vec![]);
        let mut out = Vec::new();
        for (sw, wk) in batches {
            pairing.push_switches(&switches(sw)).unwrap();
            pairing.push_wakeups(&wakeups(wk)).unwrap();
            pairing.advance(i64::MAX);
            out.push(pairing.take()[3].clone());
        }
        pairing.finish();
        out.push(pairing.take()[3].clone());
        let (on, runq, d) = (0, 1, 3);
        let mut want: Vec<(i64, i32, [i64; 6], i64, i64)> = Vec::new();
        let mut second = |n: i64, f: &dyn Fn(&mut [i64; 6]), runs, wakeups| {
            let mut ns = [0; 6];
            f(&mut ns);
            want.push((n * S, 7, ns, runs, wakeups));
        };
        second(0, &|ns| ns[on] = ms(500), 1, 0);
        second(1, &|ns| ns[on] = S, 0, 0);
        second(2, &|ns| (ns[on], ns[d]) = (ms(250), ms(750)), 0, 0);
        second(3, &|ns| ns[d] = S, 0, 0);
        second(4, &|ns| ns[d] = S, 0, 0);
        second(
            5,
            &|ns| (ns[on], ns[d], ns[runq]) = (ms(250), ms(500), ms(250)),
            1,
            1,
        );
        assert_eq!(seconds_of(&out), want);
        // Rows per take, pairing REORDER_NS behind the newest event: none
        // (paired to 1.25 s, 7 still on CPU); seconds 0, 1 and 2's 0.25 s
        // on CPU (to 4.25 s, 7 asleep since 2.25 s); none (to 4.75 s); at
        // the finish the sleep ends: 2 again with its 0.75 s in D, then 3,
        // 4 and 5. Second 2 comes twice: 7 rows for 6 seconds.
        let rows: Vec<usize> = out.iter().map(RecordBatch::num_rows).collect();
        assert_eq!(rows, [0, 3, 0, 4]);
    }
}
