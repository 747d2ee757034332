//! `hindsight export perfetto`: one recording as a Perfetto trace (the
//! protobuf `Trace` that ui.perfetto.dev and trace_processor load).
//!
//! What goes where:
//! - `sched_switch` and `sched_wakeup` become ftrace events in per-CPU
//!   `FtraceEventBundle`s, exactly as Perfetto's own ftrace data source
//!   writes them, so the UI draws CPU tracks, thread states and wakeups.
//!   `prev_state` letters go back to the kernel's bits (`S` 1, `D` 2, ...;
//!   `R` 0, runnable).
//! - Process and thread names: one `ProcessTree` (pid, ppid, command line,
//!   and every thread's process and latest name, from `process` and
//!   `sched_switch`).
//! - `counter` rows: a counter track per series (`name`, and its `scope`
//!   such as `cpu0`), grouped under a track per `source`, with the raw
//!   values (cumulative counters stay cumulative: the UI shows their rate).
//! - `page_fault` and `numa_event` rows: instant events on the thread's
//!   track (NUMA events without a thread on a "NUMA events" track), their
//!   fields as debug annotations.
//! - `cpu_sample` rows: `PerfSample`s whose callstacks, frames, function
//!   names and mappings are interned once (`InternedData`), named by the
//!   flame graph's stack-resolution SQL ([`flamegraph::stack_frames_ctes`]).
//!
//! Time: every timestamp is the recording's UTC nanoseconds, used as the
//! trace clock (Perfetto's BOOTTIME, which ftrace events are read in); a
//! `ClockSnapshot` says that BOOTTIME equals REALTIME, so the UI can show
//! wall-clock times.
//!
//! The file is written as it is queried: each batch of packets is a
//! `Trace` message of its own, and concatenated `Trace` messages are one
//! `Trace` (a repeated field's encodings append), so memory stays bounded
//! by a query batch, not by the recording.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;

use anyhow::Context;
use arrow::array::RecordBatch;
use datafusion::prelude::SessionContext;
use futures::StreamExt;
use prost::Message;

use super::proto::perfetto::{
    clock_snapshot, debug_annotation, ftrace_event, trace_packet, track_descriptor, track_event,
    ClockSnapshot, CounterDescriptor, DebugAnnotation, FtraceEvent, FtraceEventBundle,
    InternedData, InternedString, PerfSample, ProcessTree, SchedSwitchFtraceEvent,
    SchedWakeupFtraceEvent, SchedWakeupNewFtraceEvent, SystemInfo, ThreadDescriptor, Trace,
    TracePacket, TrackDescriptor, TrackEvent, Utsname,
};
use crate::catalog;
use crate::columns::{bools, frame_position, i64s, opt_i64, opt_str, strings, u64s};
use crate::flamegraph;
use crate::when::{self, When};

/// Packet sequences: track events (counters, instants) and CPU samples
/// (with their interned stacks) each need one; ftrace bundles need none.
const TRACK_SEQUENCE: u32 = 1;
const SAMPLE_SEQUENCE: u32 = 2;

/// Packets per `Trace` message written.
const PACKETS_PER_WRITE: usize = 256;

/// The states a thread leaves the CPU in, as `sched_switch` letters, in
/// the order of the kernel's state bits: `S` is bit 0, `D` bit 1, ... `I`
/// bit 7 (`TASK_REPORT_IDLE`); `R`, runnable, is no bit.
const STATE_LETTERS: [&str; 9] = ["R", "S", "D", "T", "t", "X", "Z", "P", "I"];

/// `prev_state` as the kernel's `sched_switch` tracepoint reports it.
pub fn state_bits(letter: &str) -> i64 {
    match STATE_LETTERS.iter().position(|l| *l == letter) {
        Some(0) | None => 0,
        Some(i) => 1 << (i - 1),
    }
}

/// The letter of [`state_bits`] (for readers of the trace, and tests).
pub fn state_letter(bits: i64) -> &'static str {
    if bits == 0 {
        return "R";
    }
    let index = (bits.trailing_zeros() as usize + 1).min(STATE_LETTERS.len() - 1);
    STATE_LETTERS[index]
}

/// How many of each thing went into the trace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub switches: u64,
    pub wakeups: u64,
    pub threads: u64,
    pub counter_tracks: u64,
    pub counter_values: u64,
    pub faults: u64,
    pub numa_events: u64,
    pub samples: u64,
    pub stacks: u64,
}

/// Writes `recording` (rows with from <= ts < to) to `out` as a trace.
pub async fn export(
    recording: &Path,
    window: (Option<When>, Option<When>),
    partitions: usize,
    out: &mut dyn Write,
) -> anyhow::Result<Summary> {
    let opened = crate::recording::open_all(&[recording.to_path_buf()])?;
    let range = opened[0].time_range();
    let (from, to) = when::resolve_window(window.0, window.1, range).map_err(crate::UsageError)?;
    let ctx = catalog::context_for(&opened, partitions).map_err(catalog::one_line)?;
    let session = opened[0].meta.sessions.last();
    let start = from.or(range.map(|r| r.0)).unwrap_or(0);
    let filter = Window { from, to };

    let mut w = Writer::new(out);
    let mut summary = Summary::default();
    w.packet(TracePacket {
        timestamp: Some(ns(start)),
        data: Some(trace_packet::Data::ClockSnapshot(ClockSnapshot {
            clocks: [
                clock_snapshot::clock::BuiltinClocks::Boottime,
                clock_snapshot::clock::BuiltinClocks::Realtime,
            ]
            .into_iter()
            .map(|clock| clock_snapshot::Clock {
                clock_id: Some(clock as u32),
                timestamp: Some(ns(start)),
                ..Default::default()
            })
            .collect(),
            primary_trace_clock: None,
        })),
        ..Default::default()
    })?;
    if let Some(session) = session {
        // trace_processor reads `prev_state` by the kernel version here.
        w.packet(TracePacket {
            timestamp: Some(ns(start)),
            data: Some(trace_packet::Data::SystemInfo(SystemInfo {
                utsname: Some(Utsname {
                    sysname: Some("Linux".into()),
                    release: Some(session.kernel.clone()),
                    ..Default::default()
                }),
                num_cpus: Some(session.cpus),
                page_size: Some(session.page_size).filter(|p| *p > 0),
                ..Default::default()
            })),
            ..Default::default()
        })?;
    }
    summary.threads = process_tree(&ctx, &filter, start, &mut w).await?;
    summary.switches = switches(&ctx, &filter, &mut w).await?;
    summary.wakeups = wakeups(&ctx, &filter, &mut w).await?;
    (summary.counter_tracks, summary.counter_values) = counters(&ctx, &filter, &mut w).await?;
    let mut threads = ThreadTracks::default();
    summary.faults = faults(&ctx, &filter, &mut threads, &mut w).await?;
    summary.numa_events = numa_events(&ctx, &filter, &mut threads, &mut w).await?;
    (summary.stacks, summary.samples) = samples(&ctx, &filter, start, &mut w).await?;
    w.finish()?;
    Ok(summary)
}

/// A UTC nanosecond time as a packet timestamp (times before 1970 are 0).
fn ns(ts: i64) -> u64 {
    u64::try_from(ts).unwrap_or(0)
}

/// The `--from`/`--to` window as SQL conditions on `ts`.
struct Window {
    from: Option<i64>,
    to: Option<i64>,
}

impl Window {
    /// `WHERE` with the window and `extra` conditions, or nothing.
    fn clause(&self, extra: &[&str]) -> String {
        let mut c: Vec<String> = extra.iter().map(|e| e.to_string()).collect();
        if let Some(from) = self.from {
            c.push(format!("ts >= {}", crate::report::timestamp(from)));
        }
        if let Some(to) = self.to {
            c.push(format!("ts < {}", crate::report::timestamp(to)));
        }
        if c.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", c.join(" AND "))
        }
    }
}

/// Streams the packets out, a `Trace` message per [`PACKETS_PER_WRITE`],
/// and marks each sequence's first packet as the start of its state.
struct Writer<'a> {
    out: &'a mut dyn Write,
    pending: Vec<TracePacket>,
    started: Vec<u32>,
}

impl<'a> Writer<'a> {
    fn new(out: &'a mut dyn Write) -> Writer<'a> {
        Writer {
            out,
            pending: Vec::with_capacity(PACKETS_PER_WRITE),
            started: Vec::new(),
        }
    }

    fn packet(&mut self, packet: TracePacket) -> anyhow::Result<()> {
        self.pending.push(packet);
        if self.pending.len() >= PACKETS_PER_WRITE {
            self.flush()?;
        }
        Ok(())
    }

    /// A packet on `sequence`: the first one clears the sequence's
    /// incremental state (interned data); later ones depend on it.
    fn sequenced(&mut self, sequence: u32, mut packet: TracePacket) -> anyhow::Result<()> {
        let first = !self.started.contains(&sequence);
        if first {
            self.started.push(sequence);
        }
        packet.optional_trusted_packet_sequence_id =
            Some(trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(sequence));
        packet.sequence_flags = Some(if first {
            trace_packet::SequenceFlags::SeqIncrementalStateCleared as u32
        } else {
            trace_packet::SequenceFlags::SeqNeedsIncrementalState as u32
        });
        if first {
            packet.first_packet_on_sequence = Some(true);
        }
        self.packet(packet)
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let trace = Trace {
            packet: std::mem::take(&mut self.pending),
        };
        self.out.write_all(&trace.encode_to_vec())?;
        Ok(())
    }

    fn finish(mut self) -> anyhow::Result<()> {
        self.flush()?;
        self.out.flush()?;
        Ok(())
    }
}

/// Runs `sql` and hands every result batch to `each`.
async fn for_each_batch(
    ctx: &SessionContext,
    sql: &str,
    mut each: impl FnMut(&RecordBatch) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut stream = catalog::query_stream(ctx, sql)
        .await
        .map_err(catalog::one_line)?;
    while let Some(batch) = stream.next().await {
        each(&batch.map_err(catalog::one_line)?)?;
    }
    Ok(())
}

/// Writes `events` as one bundle per CPU, CPUs in order.
fn bundles(w: &mut Writer, events: BTreeMap<u32, Vec<FtraceEvent>>) -> anyhow::Result<()> {
    for (cpu, event) in events {
        w.packet(TracePacket {
            data: Some(trace_packet::Data::FtraceEvents(FtraceEventBundle {
                cpu: Some(cpu),
                event,
                lost_events: None,
            })),
            ..Default::default()
        })?;
    }
    Ok(())
}

async fn switches(
    ctx: &SessionContext,
    window: &Window,
    w: &mut Writer<'_>,
) -> anyhow::Result<u64> {
    let sql = format!(
        "SELECT ts, cpu, prev_tid, CAST(prev_comm AS VARCHAR) AS prev_comm, \
         CAST(prev_state AS VARCHAR) AS prev_state, prev_prio, next_tid, \
         CAST(next_comm AS VARCHAR) AS next_comm, next_prio \
         FROM sched_switch{} ORDER BY ts, cpu",
        window.clause(&[])
    );
    let mut count = 0;
    for_each_batch(ctx, &sql, |batch| {
        let ts = i64s(batch, "ts")?;
        let cpu = i64s(batch, "cpu")?;
        let prev_tid = i64s(batch, "prev_tid")?;
        let prev_comm = strings(batch, "prev_comm")?;
        let prev_state = strings(batch, "prev_state")?;
        let prev_prio = i64s(batch, "prev_prio")?;
        let next_tid = i64s(batch, "next_tid")?;
        let next_comm = strings(batch, "next_comm")?;
        let next_prio = i64s(batch, "next_prio")?;
        let mut per_cpu: BTreeMap<u32, Vec<FtraceEvent>> = BTreeMap::new();
        for row in 0..batch.num_rows() {
            per_cpu
                .entry(cpu.value(row) as u32)
                .or_default()
                .push(FtraceEvent {
                    timestamp: Some(ns(ts.value(row))),
                    pid: Some(prev_tid.value(row) as u32),
                    event: Some(ftrace_event::Event::SchedSwitch(SchedSwitchFtraceEvent {
                        prev_comm: Some(prev_comm.value(row).to_owned()),
                        prev_pid: Some(prev_tid.value(row) as i32),
                        prev_prio: Some(prev_prio.value(row) as i32),
                        prev_state: Some(state_bits(prev_state.value(row))),
                        next_comm: Some(next_comm.value(row).to_owned()),
                        next_pid: Some(next_tid.value(row) as i32),
                        next_prio: Some(next_prio.value(row) as i32),
                    })),
                });
        }
        count += batch.num_rows() as u64;
        bundles(w, per_cpu)
    })
    .await
    .context("exporting sched_switch")?;
    Ok(count)
}

async fn wakeups(ctx: &SessionContext, window: &Window, w: &mut Writer<'_>) -> anyhow::Result<u64> {
    let sql = format!(
        "SELECT ts, cpu, tid, CAST(comm AS VARCHAR) AS comm, prio, target_cpu, waker_tid, new_task \
         FROM sched_wakeup{} ORDER BY ts, cpu",
        window.clause(&[])
    );
    let mut count = 0;
    for_each_batch(ctx, &sql, |batch| {
        let ts = i64s(batch, "ts")?;
        let cpu = i64s(batch, "cpu")?;
        let tid = i64s(batch, "tid")?;
        let comm = strings(batch, "comm")?;
        let prio = i64s(batch, "prio")?;
        let target_cpu = i64s(batch, "target_cpu")?;
        let waker = i64s(batch, "waker_tid")?;
        let new_task = bools(batch, "new_task")?;
        let mut per_cpu: BTreeMap<u32, Vec<FtraceEvent>> = BTreeMap::new();
        for row in 0..batch.num_rows() {
            let (comm, pid, prio, target_cpu) = (
                Some(comm.value(row).to_owned()),
                Some(tid.value(row) as i32),
                Some(prio.value(row) as i32),
                Some(target_cpu.value(row) as i32),
            );
            let event = if new_task.value(row) {
                ftrace_event::Event::SchedWakeupNew(SchedWakeupNewFtraceEvent {
                    comm,
                    pid,
                    prio,
                    success: Some(1),
                    target_cpu,
                })
            } else {
                ftrace_event::Event::SchedWakeup(SchedWakeupFtraceEvent {
                    comm,
                    pid,
                    prio,
                    success: Some(1),
                    target_cpu,
                })
            };
            per_cpu
                .entry(cpu.value(row) as u32)
                .or_default()
                .push(FtraceEvent {
                    timestamp: Some(ns(ts.value(row))),
                    pid: Some(waker.value(row) as u32),
                    event: Some(event),
                });
        }
        count += batch.num_rows() as u64;
        bundles(w, per_cpu)
    })
    .await
    .context("exporting sched_wakeup")?;
    Ok(count)
}

/// One `ProcessTree`: every process with its parent and command line, every
/// thread with its process and its latest name (the window's switches
/// included, so threads that never forked or exec'd in view are named too).
async fn process_tree(
    ctx: &SessionContext,
    window: &Window,
    start: i64,
    w: &mut Writer<'_>,
) -> anyhow::Result<u64> {
    let processes = catalog::query_batches(
        ctx,
        "SELECT pid, last_value(ppid ORDER BY ts) AS ppid, \
         last_value(cmdline ORDER BY cmdline IS NOT NULL, ts) AS cmdline \
         FROM process GROUP BY pid ORDER BY pid",
    )
    .await
    .map_err(catalog::one_line)
    .context("reading process")?;
    let threads = catalog::query_batches(
        ctx,
        &format!(
            "SELECT tid, last_value(pid ORDER BY ts) AS pid, last_value(comm ORDER BY ts) AS comm \
             FROM (\
               SELECT ts, tid, pid, CAST(comm AS VARCHAR) AS comm FROM process \
               UNION ALL SELECT ts, next_tid, next_pid, CAST(next_comm AS VARCHAR) FROM sched_switch{} \
               UNION ALL SELECT ts, prev_tid, prev_pid, CAST(prev_comm AS VARCHAR) FROM sched_switch{}\
             ) named GROUP BY tid ORDER BY tid",
            window.clause(&["next_tid <> 0"]),
            window.clause(&["prev_tid <> 0"])
        ),
    )
    .await
    .map_err(catalog::one_line)
    .context("reading thread names")?;
    let mut tree = ProcessTree::default();
    for batch in &processes {
        let pid = i64s(batch, "pid")?;
        let ppid = i64s(batch, "ppid")?;
        let cmdline = strings(batch, "cmdline")?;
        for row in 0..batch.num_rows() {
            tree.processes
                .push(super::proto::perfetto::process_tree::Process {
                    pid: Some(pid.value(row) as i32),
                    ppid: opt_i64(&ppid, row).map(|p| p as i32),
                    cmdline: opt_str(&cmdline, row)
                        .map(|c| c.split(' ').map(str::to_owned).collect())
                        .unwrap_or_default(),
                    ..Default::default()
                });
        }
    }
    for batch in &threads {
        let tid = i64s(batch, "tid")?;
        let pid = i64s(batch, "pid")?;
        let comm = strings(batch, "comm")?;
        for row in 0..batch.num_rows() {
            tree.threads
                .push(super::proto::perfetto::process_tree::Thread {
                    tid: Some(tid.value(row) as i32),
                    tgid: opt_i64(&pid, row).map(|p| p as i32),
                    name: opt_str(&comm, row).map(str::to_owned),
                    nstid: Vec::new(),
                });
        }
    }
    let count = tree.threads.len() as u64;
    w.packet(TracePacket {
        timestamp: Some(ns(start)),
        data: Some(trace_packet::Data::ProcessTree(tree)),
        ..Default::default()
    })?;
    Ok(count)
}

/// Track uuids: allocated in order, never 0.
#[derive(Default)]
struct Uuids(u64);

impl Uuids {
    fn next(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
}

fn track_packet(descriptor: TrackDescriptor) -> TracePacket {
    TracePacket {
        data: Some(trace_packet::Data::TrackDescriptor(descriptor)),
        ..Default::default()
    }
}

fn named(name: String) -> Option<track_descriptor::StaticOrDynamicName> {
    Some(track_descriptor::StaticOrDynamicName::Name(name))
}

/// Counter tracks: a track per `source` holding a counter track per series.
async fn counters(
    ctx: &SessionContext,
    window: &Window,
    w: &mut Writer<'_>,
) -> anyhow::Result<(u64, u64)> {
    let sql = format!(
        "SELECT ts, CAST(source AS VARCHAR) AS source, CAST(name AS VARCHAR) AS name, \
         CAST(scope AS VARCHAR) AS scope, value FROM counter{} ORDER BY source, name, scope, ts",
        window.clause(&[])
    );
    // Counter uuids start above every thread track's (see ThreadTracks).
    let mut uuids = Uuids(1 << 40);
    let mut sources: HashMap<String, u64> = HashMap::new();
    let mut series: HashMap<(String, String, Option<String>), u64> = HashMap::new();
    let mut values = 0;
    for_each_batch(ctx, &sql, |batch| {
        let ts = i64s(batch, "ts")?;
        let source = strings(batch, "source")?;
        let name = strings(batch, "name")?;
        let scope = strings(batch, "scope")?;
        let value = i64s(batch, "value")?;
        for row in 0..batch.num_rows() {
            let key = (
                source.value(row).to_owned(),
                name.value(row).to_owned(),
                opt_str(&scope, row).map(str::to_owned),
            );
            let track = match series.get(&key) {
                Some(uuid) => *uuid,
                None => {
                    let parent = match sources.get(&key.0) {
                        Some(uuid) => *uuid,
                        None => {
                            let uuid = uuids.next();
                            sources.insert(key.0.clone(), uuid);
                            w.packet(track_packet(TrackDescriptor {
                                uuid: Some(uuid),
                                static_or_dynamic_name: named(key.0.clone()),
                                ..Default::default()
                            }))?;
                            uuid
                        }
                    };
                    let uuid = uuids.next();
                    let title = match &key.2 {
                        Some(scope) => format!("{} {scope}", key.1),
                        None => key.1.clone(),
                    };
                    w.packet(track_packet(TrackDescriptor {
                        uuid: Some(uuid),
                        parent_uuid: Some(parent),
                        static_or_dynamic_name: named(title),
                        counter: Some(CounterDescriptor::default()),
                        ..Default::default()
                    }))?;
                    series.insert(key, uuid);
                    uuid
                }
            };
            w.sequenced(
                TRACK_SEQUENCE,
                TracePacket {
                    timestamp: Some(ns(ts.value(row))),
                    data: Some(trace_packet::Data::TrackEvent(TrackEvent {
                        r#type: Some(track_event::Type::Counter as i32),
                        track_uuid: Some(track),
                        counter_value_field: Some(track_event::CounterValueField::CounterValue(
                            value.value(row),
                        )),
                        ..Default::default()
                    })),
                    ..Default::default()
                },
            )?;
            values += 1;
        }
        Ok(())
    })
    .await
    .context("exporting counter")?;
    Ok((series.len() as u64, values))
}

/// Thread tracks for instant events, declared on first use.
#[derive(Default)]
struct ThreadTracks {
    uuids: Uuids,
    by_tid: HashMap<i64, u64>,
    global: Option<u64>,
}

impl ThreadTracks {
    fn thread(
        &mut self,
        w: &mut Writer,
        tid: i64,
        pid: Option<i64>,
        comm: Option<&str>,
    ) -> anyhow::Result<u64> {
        if let Some(uuid) = self.by_tid.get(&tid) {
            return Ok(*uuid);
        }
        let uuid = self.uuids.next();
        w.packet(track_packet(TrackDescriptor {
            uuid: Some(uuid),
            thread: Some(ThreadDescriptor {
                pid: Some(pid.unwrap_or(tid) as i32),
                tid: Some(tid as i32),
                thread_name: comm.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        }))?;
        self.by_tid.insert(tid, uuid);
        Ok(uuid)
    }

    fn global(&mut self, w: &mut Writer, name: &str) -> anyhow::Result<u64> {
        if let Some(uuid) = self.global {
            return Ok(uuid);
        }
        let uuid = self.uuids.next();
        w.packet(track_packet(TrackDescriptor {
            uuid: Some(uuid),
            static_or_dynamic_name: named(name.into()),
            ..Default::default()
        }))?;
        self.global = Some(uuid);
        Ok(uuid)
    }
}

fn annotation(name: &str, value: debug_annotation::Value) -> DebugAnnotation {
    DebugAnnotation {
        name_field: Some(debug_annotation::NameField::Name(name.into())),
        value: Some(value),
        ..Default::default()
    }
}

fn instant(
    w: &mut Writer,
    ts: i64,
    track: u64,
    name: &str,
    debug_annotations: Vec<DebugAnnotation>,
) -> anyhow::Result<()> {
    w.sequenced(
        TRACK_SEQUENCE,
        TracePacket {
            timestamp: Some(ns(ts)),
            data: Some(trace_packet::Data::TrackEvent(TrackEvent {
                r#type: Some(track_event::Type::Instant as i32),
                track_uuid: Some(track),
                name_field: Some(track_event::NameField::Name(name.into())),
                debug_annotations,
                ..Default::default()
            })),
            ..Default::default()
        },
    )
}

async fn faults(
    ctx: &SessionContext,
    window: &Window,
    threads: &mut ThreadTracks,
    w: &mut Writer<'_>,
) -> anyhow::Result<u64> {
    let sql = format!(
        "SELECT ts, tid, pid, CAST(comm AS VARCHAR) AS comm, address, ip, error_code, kernel \
         FROM page_fault{} ORDER BY ts",
        window.clause(&[])
    );
    let mut count = 0;
    for_each_batch(ctx, &sql, |batch| {
        let ts = i64s(batch, "ts")?;
        let tid = i64s(batch, "tid")?;
        let pid = i64s(batch, "pid")?;
        let comm = strings(batch, "comm")?;
        let address = u64s(batch, "address")?;
        let ip = u64s(batch, "ip")?;
        let error_code = i64s(batch, "error_code")?;
        let kernel = bools(batch, "kernel")?;
        for row in 0..batch.num_rows() {
            let track =
                threads.thread(w, tid.value(row), Some(pid.value(row)), opt_str(&comm, row))?;
            let code = error_code.value(row);
            use debug_annotation::Value;
            instant(
                w,
                ts.value(row),
                track,
                if kernel.value(row) {
                    "page fault (kernel)"
                } else {
                    "page fault"
                },
                vec![
                    annotation("address", Value::PointerValue(address.value(row))),
                    annotation("ip", Value::PointerValue(ip.value(row))),
                    annotation("error_code", Value::IntValue(code)),
                    annotation("write", Value::BoolValue(code & 2 != 0)),
                ],
            )?;
        }
        count += batch.num_rows() as u64;
        Ok(())
    })
    .await
    .context("exporting page_fault")?;
    Ok(count)
}

async fn numa_events(
    ctx: &SessionContext,
    window: &Window,
    threads: &mut ThreadTracks,
    w: &mut Writer<'_>,
) -> anyhow::Result<u64> {
    let sql = format!(
        "SELECT ts, CAST(kind AS VARCHAR) AS kind, tid, pid, CAST(comm AS VARCHAR) AS comm, \
         src_cpu, dst_cpu, src_nid, dst_nid, pages_succeeded, pages_failed, \
         CAST(reason AS VARCHAR) AS reason FROM numa_event{} ORDER BY ts",
        window.clause(&[])
    );
    let mut count = 0;
    for_each_batch(ctx, &sql, |batch| {
        let ts = i64s(batch, "ts")?;
        let kind = strings(batch, "kind")?;
        let tid = i64s(batch, "tid")?;
        let pid = i64s(batch, "pid")?;
        let comm = strings(batch, "comm")?;
        let reason = strings(batch, "reason")?;
        let numbers = [
            "src_cpu",
            "dst_cpu",
            "src_nid",
            "dst_nid",
            "pages_succeeded",
            "pages_failed",
        ]
        .map(|name| i64s(batch, name).map(|values| (name, values)));
        let numbers = numbers.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
        for row in 0..batch.num_rows() {
            let track = match opt_i64(&tid, row) {
                Some(tid) => threads.thread(w, tid, opt_i64(&pid, row), opt_str(&comm, row))?,
                None => threads.global(w, "NUMA events")?,
            };
            use debug_annotation::Value;
            let mut annotations: Vec<DebugAnnotation> = numbers
                .iter()
                .filter_map(|(name, values)| {
                    opt_i64(values, row).map(|v| annotation(name, Value::IntValue(v)))
                })
                .collect();
            if let Some(reason) = opt_str(&reason, row) {
                annotations.push(annotation("reason", Value::StringValue(reason.into())));
            }
            instant(w, ts.value(row), track, kind.value(row), annotations)?;
        }
        count += batch.num_rows() as u64;
        Ok(())
    })
    .await
    .context("exporting numa_event")?;
    Ok(count)
}

/// Interning tables: a string or key to its iid, iids from 1.
struct Interned<K> {
    ids: HashMap<K, u64>,
}

impl<K: std::hash::Hash + Eq> Interned<K> {
    fn new() -> Interned<K> {
        Interned {
            ids: HashMap::new(),
        }
    }

    /// The iid of `key`, and whether it is new.
    fn id(&mut self, key: K) -> (u64, bool) {
        let next = self.ids.len() as u64 + 1;
        let id = *self.ids.entry(key).or_insert(next);
        (id, id == next)
    }
}

/// The callstacks of the window's samples, interned: the frames of each
/// stack, root first, named by the flame graph's stack-resolution SQL.
async fn interned_stacks(
    ctx: &SessionContext,
    window: &Window,
) -> anyhow::Result<(InternedData, HashMap<i64, u64>)> {
    let sql = format!(
        "WITH {}\nSELECT stack_id, depth, frame_id, name, module, build_id, address, file_offset \
         FROM named ORDER BY stack_id, depth DESC",
        flamegraph::stack_frames_ctes(&format!(
            "(SELECT stack_id FROM cpu_sample{})",
            window.clause(&["stack_id IS NOT NULL"])
        ))
    );
    let batches = catalog::query_batches(ctx, &sql)
        .await
        .map_err(catalog::one_line)
        .context("resolving the samples' stacks")?;
    let mut data = InternedData::default();
    let mut names = Interned::new();
    let mut paths = Interned::new();
    let mut build_ids = Interned::new();
    let mut mappings = Interned::new();
    let mut frames = Interned::new();
    let mut stacks: HashMap<i64, u64> = HashMap::new();
    let mut open: Option<(i64, Vec<u64>)> = None;
    let mut close = |open: &mut Option<(i64, Vec<u64>)>, data: &mut InternedData| {
        if let Some((stack, frame_ids)) = open.take() {
            let iid = stacks.len() as u64 + 1;
            stacks.insert(stack, iid);
            data.callstacks.push(super::proto::perfetto::Callstack {
                iid: Some(iid),
                frame_ids,
            });
        }
    };
    for batch in &batches {
        let stack_id = i64s(batch, "stack_id")?;
        let frame_id = i64s(batch, "frame_id")?;
        let name = strings(batch, "name")?;
        let module = strings(batch, "module")?;
        let build_id = strings(batch, "build_id")?;
        let address = u64s(batch, "address")?;
        let file_offset = u64s(batch, "file_offset")?;
        for row in 0..batch.num_rows() {
            let stack = stack_id.value(row);
            if open.as_ref().is_some_and(|(s, _)| *s != stack) {
                close(&mut open, &mut data);
            }
            let frames_of_stack = &mut open.get_or_insert_with(|| (stack, Vec::new())).1;
            let (frame_iid, new_frame) = frames.id(frame_id.value(row));
            frames_of_stack.push(frame_iid);
            if !new_frame {
                continue;
            }
            let function = opt_str(&name, row).unwrap_or("[unknown]").to_owned();
            let (name_iid, new_name) = names.id(function.clone());
            if new_name {
                data.function_names.push(InternedString {
                    iid: Some(name_iid),
                    str: Some(function.into_bytes()),
                });
            }
            let module = opt_str(&module, row).unwrap_or("[unknown]").to_owned();
            let build = opt_str(&build_id, row).map(str::to_owned);
            let (mapping_iid, new_mapping) = mappings.id((module.clone(), build.clone()));
            if new_mapping {
                // Perfetto joins a mapping's path from its components with '/'.
                let mut path_string_ids = Vec::new();
                for part in module.split('/').filter(|p| !p.is_empty()) {
                    let (iid, new) = paths.id(part.to_owned());
                    if new {
                        data.mapping_paths.push(InternedString {
                            iid: Some(iid),
                            str: Some(part.as_bytes().to_vec()),
                        });
                    }
                    path_string_ids.push(iid);
                }
                let build_iid = build.map(|b| {
                    let (iid, new) = build_ids.id(b.clone());
                    if new {
                        data.build_ids.push(InternedString {
                            iid: Some(iid),
                            str: Some(b.into_bytes()),
                        });
                    }
                    iid
                });
                data.mappings.push(super::proto::perfetto::Mapping {
                    iid: Some(mapping_iid),
                    build_id: build_iid,
                    path_string_ids,
                    ..Default::default()
                });
            }
            let rel_pc = frame_position(&file_offset, &address, row);
            data.frames.push(super::proto::perfetto::Frame {
                iid: Some(frame_iid),
                function_name_id: Some(name_iid),
                mapping_id: Some(mapping_iid),
                rel_pc,
            });
        }
    }
    close(&mut open, &mut data);
    Ok((data, stacks))
}

/// CPU samples: the interned stacks once, then a `PerfSample` per row.
async fn samples(
    ctx: &SessionContext,
    window: &Window,
    start: i64,
    w: &mut Writer<'_>,
) -> anyhow::Result<(u64, u64)> {
    let (interned, stacks) = interned_stacks(ctx, window).await?;
    w.sequenced(
        SAMPLE_SEQUENCE,
        TracePacket {
            timestamp: Some(ns(start)),
            interned_data: Some(interned),
            ..Default::default()
        },
    )?;
    let sql = format!(
        "SELECT ts, cpu, tid, pid, stack_id, kernel FROM cpu_sample{} ORDER BY ts",
        window.clause(&[])
    );
    let mut count = 0;
    for_each_batch(ctx, &sql, |batch| {
        let ts = i64s(batch, "ts")?;
        let cpu = i64s(batch, "cpu")?;
        let tid = i64s(batch, "tid")?;
        let pid = i64s(batch, "pid")?;
        let stack_id = i64s(batch, "stack_id")?;
        let kernel = bools(batch, "kernel")?;
        use super::proto::perfetto::profiling::CpuMode;
        for row in 0..batch.num_rows() {
            let mode = if kernel.value(row) {
                CpuMode::ModeKernel
            } else {
                CpuMode::ModeUser
            };
            w.sequenced(
                SAMPLE_SEQUENCE,
                TracePacket {
                    timestamp: Some(ns(ts.value(row))),
                    data: Some(trace_packet::Data::PerfSample(PerfSample {
                        cpu: Some(cpu.value(row) as u32),
                        pid: Some(pid.value(row) as u32),
                        tid: Some(tid.value(row) as u32),
                        cpu_mode: Some(mode as i32),
                        callstack_iid: opt_i64(&stack_id, row)
                            .and_then(|s| stacks.get(&s).copied()),
                        ..Default::default()
                    })),
                    ..Default::default()
                },
            )?;
        }
        count += batch.num_rows() as u64;
        Ok(())
    })
    .await
    .context("exporting cpu_sample")?;
    Ok((stacks.len() as u64, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_through_the_kernel_bits() {
        let bits: Vec<i64> = STATE_LETTERS.iter().map(|l| state_bits(l)).collect();
        assert_eq!(bits, [0, 1, 2, 4, 8, 16, 32, 64, 128]);
        for letter in STATE_LETTERS {
            assert_eq!(state_letter(state_bits(letter)), letter);
        }
        assert_eq!(state_bits("?"), 0, "unknown letters read as runnable");
    }

    #[test]
    fn concatenated_traces_are_one_trace() {
        let mut out = Vec::new();
        let mut w = Writer::new(&mut out);
        for i in 0..(PACKETS_PER_WRITE as u64 * 2 + 3) {
            w.sequenced(
                TRACK_SEQUENCE,
                TracePacket {
                    timestamp: Some(i),
                    ..Default::default()
                },
            )
            .unwrap();
        }
        w.finish().unwrap();
        let trace = Trace::decode(out.as_slice()).unwrap();
        assert_eq!(trace.packet.len(), PACKETS_PER_WRITE * 2 + 3);
        assert_eq!(trace.packet[300].timestamp, Some(300));
        let flags: Vec<u32> = trace.packet[..2]
            .iter()
            .map(|p| p.sequence_flags.unwrap())
            .collect();
        assert_eq!(
            flags,
            [1, 2],
            "the first packet clears, the rest need the state"
        );
    }
}
