//! Decodes ring-buffer records into table rows: pure functions over bytes,
//! so every field mapping is tested without root or BPF.
//!
//! The record layouts are the structs of `bpf/events.h`, used here through
//! the types libbpf-cargo generated from the BPF object's BTF.

use hindsight_schemas::time::ClockOffset;
use plain::Plain;
use thiserror::Error;

use crate::{
    bpf::{
        faults::types::hs_fault,
        numa::types::{hs_migrate_reason, hs_numa, hs_numa_event},
        sched::types::{
            hs_comm_slots, hs_exec, hs_exit, hs_fork, hs_header, hs_kind, hs_switch,
            hs_switch_stack, hs_switch_stack_copy, hs_wakeup,
        },
        stacks::types::{hs_sample, hs_sample_copy, hs_user_regs},
        tasks::types::hs_task_exit,
    },
    procfs::join_argv,
    rows::{AllRows, ProcessRow, TaskStatRow},
    stacks::{Program, Running, StackInterner},
    tasks::{boot_ns_to_tick, split_cputime},
    unwind::StackCopy,
};

// SAFETY: the generated wire structs are repr(C), made only of integers and
// byte arrays, so every bit pattern is a valid value.
unsafe impl Plain for hs_header {}
unsafe impl Plain for hs_switch {}
unsafe impl Plain for hs_wakeup {}
unsafe impl Plain for hs_fork {}
unsafe impl Plain for hs_exec {}
unsafe impl Plain for hs_exit {}
unsafe impl Plain for hs_fault {}
unsafe impl Plain for hs_numa {}
unsafe impl Plain for hs_sample {}
unsafe impl Plain for hs_user_regs {}
unsafe impl Plain for hs_switch_stack {}
unsafe impl Plain for hs_task_exit {}

// The layout the decoder was written against; a change to events.h that
// moves these sizes must be looked at here too.
const _: () = assert!(size_of::<hs_header>() == 16);
const _: () = assert!(size_of::<hs_switch>() == 88);
const _: () = assert!(size_of::<hs_wakeup>() == 64);
const _: () = assert!(size_of::<hs_fork>() == 56);
const _: () = assert!(size_of::<hs_exec>() == 312);
const _: () = assert!(size_of::<hs_exit>() == 48);
const _: () = assert!(size_of::<hs_fault>() == 64);
const _: () = assert!(size_of::<hs_numa>() == 88);
const _: () = assert!(size_of::<hs_sample>() == 40 + 24 + 2 * 64 * 8);
const _: () = assert!(size_of::<hs_switch_stack>() == 88 + 24 + 2 * 64 * 8);
const _: () = assert!(size_of::<hs_task_exit>() == 152);

/// Bytes before the stack addresses of a sample and of a switch with its
/// stack: the part always sent; the addresses follow as far as filled.
const SAMPLE_FIXED: usize = std::mem::offset_of!(hs_sample, stack.ips);
const SAMPLE_REGS_AT: usize = std::mem::offset_of!(hs_sample_copy, regs);
const SWITCH_REGS_AT: usize = std::mem::offset_of!(hs_switch_stack_copy, regs);
const SWITCH_STACK_FIXED: usize = std::mem::offset_of!(hs_switch_stack, stack.ips);
/// Bytes of a switch or wakeup sent without its comms (`*_NAMED_BEFORE`).
const SWITCH_UNNAMED: usize = std::mem::offset_of!(hs_switch, prev_comm);
const WAKEUP_UNNAMED: usize = std::mem::offset_of!(hs_wakeup, comm);

#[derive(Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record of {len} bytes is too short for its kind {kind}")]
    Short { kind: u32, len: usize },
    #[error("record of unknown kind {0}")]
    UnknownKind(u32),
    #[error("NUMA record of unknown event {0}")]
    UnknownNumaEvent(u32),
    #[error(
        "record of kind {kind} sent without the comm of thread {tid}, which CPU {cpu} never sent"
    )]
    CommNotSent { kind: u32, cpu: u32, tid: u32 },
}

type Comm = [i8; 16];

/// One CPU's slots: a tid and its comm each.
type CpuCommSlots = Box<[(u32, Comm)]>;

/// The recorder's copy of each CPU's comm slots (`HS_COMM_SLOTS` in
/// `bpf/events.h`), kept from the records that filled the kernel's, in
/// ring order: where a switch or wakeup sent without its comms finds
/// them.
#[derive(Debug, Default)]
struct CommSlots {
    /// Per CPU, made on its first record that fills a slot; a slot holds
    /// a tid and its comm, all zero at first as in the kernel.
    cpus: Vec<Option<CpuCommSlots>>,
}

impl CommSlots {
    const SLOTS: usize = hs_comm_slots::HS_COMM_SLOTS.0 as usize;
    /// Above the kernel's largest CPU number (`CONFIG_NR_CPUS` is at most
    /// 8192): a record claiming a higher one is corrupt, and its CPU gets
    /// no slots rather than a table that large.
    const CPUS: usize = 8192;

    fn put(&mut self, cpu: u32, tid: u32, comm: &Comm) {
        let cpu = cpu as usize;
        if cpu >= Self::CPUS {
            return;
        }
        if self.cpus.len() <= cpu {
            self.cpus.resize_with(cpu + 1, || None);
        }
        let slots = self.cpus[cpu]
            .get_or_insert_with(|| vec![(0, [0; 16]); Self::SLOTS].into_boxed_slice());
        slots[tid as usize % Self::SLOTS] = (tid, *comm);
    }

    fn get(&self, cpu: u32, tid: u32, kind: u32) -> Result<Comm, DecodeError> {
        let slots = self.cpus.get(cpu as usize).and_then(Option::as_ref);
        match slots.map(|slots| &slots[tid as usize % Self::SLOTS]) {
            Some(&(held, comm)) if held == tid => Ok(comm),
            _ => Err(DecodeError::CommNotSent { kind, cpu, tid }),
        }
    }
}

/// The table a kind of record lands in, for naming losses.
pub fn table_of_kind(kind: u32) -> &'static str {
    match hs_kind(kind) {
        hs_kind::HS_KIND_SWITCH | hs_kind::HS_KIND_SWITCH_NAMED_BEFORE => "sched_switch",
        hs_kind::HS_KIND_WAKEUP | hs_kind::HS_KIND_WAKEUP_NAMED_BEFORE => "sched_wakeup",
        hs_kind::HS_KIND_EXEC | hs_kind::HS_KIND_FORK | hs_kind::HS_KIND_EXIT => "process",
        hs_kind::HS_KIND_FAULT => "page_fault",
        hs_kind::HS_KIND_NUMA => "numa_event",
        hs_kind::HS_KIND_CACHE => "page_cache",
        hs_kind::HS_KIND_SAMPLE | hs_kind::HS_KIND_SAMPLE_COPY => "cpu_sample",
        hs_kind::HS_KIND_SWITCH_STACK | hs_kind::HS_KIND_SWITCH_STACK_COPY => "sched_switch",
        hs_kind::HS_KIND_TASK_EXIT => "task_stat",
        _ => "unknown",
    }
}

fn record<T: Plain>(data: &[u8], kind: u32) -> Result<&T, DecodeError> {
    plain::from_bytes(data).map_err(|_| DecodeError::Short {
        kind,
        len: data.len(),
    })
}

/// A record sent only up to `fixed` bytes plus its filled stack, copied
/// into a whole struct (the unsent tail reads as zeros).
fn truncated<T: Plain + Default>(data: &[u8], kind: u32, fixed: usize) -> Result<T, DecodeError> {
    if data.len() < fixed {
        return Err(DecodeError::Short {
            kind,
            len: data.len(),
        });
    }
    let mut value = T::default();
    // SAFETY: T is Plain, so any bytes written into it form a valid value.
    let bytes = unsafe { plain::as_mut_bytes(&mut value) };
    let n = data.len().min(bytes.len());
    bytes[..n].copy_from_slice(&data[..n]);
    Ok(value)
}

/// The [`Running`] program a stack record's `hs_stack` was taken in (the
/// sampler's and the switch tracer's are one C struct, two generated Rust
/// types).
macro_rules! running {
    ($pid:expr, $stack:expr) => {
        Running {
            pid: $pid,
            program: Program {
                start_code: $stack.start_code,
                start_stack: $stack.start_stack,
            },
        }
    };
}

/// The kernel and user addresses of a stack, leaf first, as far as the
/// record carried them (`sent` bytes of addresses).
pub fn split_stack(
    ips: &[u64],
    kernel_frames: u32,
    user_frames: u32,
    sent: usize,
) -> (&[u64], &[u64]) {
    let available = (sent / 8).min(ips.len());
    let k = (kernel_frames as usize).min(available);
    let u = (user_frames as usize).min(available - k);
    (&ips[..k], &ips[k..k + u])
}

/// The user registers at `regs_at` in a record of `kind` that carries a
/// copy of the user stack, and the copy after them.
fn stack_copy(data: &[u8], kind: u32, regs_at: usize) -> Result<StackCopy<'_>, DecodeError> {
    let copy_at = regs_at + size_of::<hs_user_regs>();
    if data.len() < copy_at {
        return Err(DecodeError::Short {
            kind,
            len: data.len(),
        });
    }
    let regs: hs_user_regs = truncated(&data[regs_at..], kind, size_of::<hs_user_regs>())?;
    let end = data.len().min(copy_at + regs.copy_bytes as usize);
    Ok(StackCopy {
        ip: regs.ip,
        sp: regs.sp,
        bp: regs.bp,
        bytes: &data[copy_at..end],
    })
}

/// Appends one `cpu_sample` row.
fn push_sample(ts: i64, e: &hs_sample, kernel: bool, stack_id: Option<i64>, rows: &mut AllRows) {
    let r = &mut rows.cpu_sample;
    r.ts.append_value(ts);
    r.cpu.append_value(e.h.cpu as i32);
    r.tid.append_value(e.tid as i32);
    r.pid.append_value(e.pid as i32);
    r.comm.append_c_name(&e.comm);
    r.stack_id.append_option(stack_id);
    r.kernel.append_value(kernel);
}

/// A NUL-terminated kernel string as text; invalid UTF-8 is replaced, not dropped.
fn c_str(raw: &[i8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(crate::rows::c_name_bytes(raw))
}

/// The `numa_event.kind` of an `hs_numa_event`.
pub fn numa_kind_name(event: u32) -> Option<&'static str> {
    Some(match hs_numa_event(event) {
        hs_numa_event::HS_NUMA_MOVE => "move_numa",
        hs_numa_event::HS_NUMA_SWAP => "swap_numa",
        hs_numa_event::HS_NUMA_STICK => "stick_numa",
        hs_numa_event::HS_NUMA_MIGRATE => "migrate_pages",
        _ => return None,
    })
}

/// The kernel's name for a migration reason, as `migrate:mm_migrate_pages`
/// prints it (`MIGRATE_REASON` in include/trace/events/migrate.h). The BPF
/// program has already renumbered the kernel's `enum migrate_reason` into
/// our `hs_migrate_reason` with CO-RE, so this table holds on every kernel.
pub fn migrate_reason_name(reason: u32) -> &'static str {
    match hs_migrate_reason(reason) {
        hs_migrate_reason::HS_MR_COMPACTION => "compaction",
        hs_migrate_reason::HS_MR_MEMORY_FAILURE => "memory_failure",
        hs_migrate_reason::HS_MR_MEMORY_HOTPLUG => "memory_hotplug",
        hs_migrate_reason::HS_MR_SYSCALL => "syscall_or_cpuset",
        hs_migrate_reason::HS_MR_MEMPOLICY_MBIND => "mempolicy_mbind",
        hs_migrate_reason::HS_MR_NUMA_MISPLACED => "numa_misplaced",
        hs_migrate_reason::HS_MR_CONTIG_RANGE => "contig_range",
        hs_migrate_reason::HS_MR_LONGTERM_PIN => "longterm_pin",
        hs_migrate_reason::HS_MR_DEMOTION => "demotion",
        hs_migrate_reason::HS_MR_DAMON => "damon",
        _ => "unknown",
    }
}

/// A CPU or node number, null where the event has none (-1).
fn non_negative(value: i32) -> Option<i32> {
    (value >= 0).then_some(value)
}

/// The letter `ps` shows for the state a task blocked in, computed the way
/// the kernel's own sched_switch tracepoint does (`__trace_sched_switch_state`).
pub fn task_state_letter(state: u32, exit_state: u32, preempt: bool) -> &'static str {
    const TASK_REPORT: u32 = 0x7f;
    const TASK_IDLE: u32 = 0x402;
    const TASK_REPORT_IDLE: u32 = 0x80;
    const TASK_UNINTERRUPTIBLE: u32 = 0x2;
    const TASK_RTLOCK_WAIT: u32 = 0x1000;
    const TASK_FROZEN: u32 = 0x8000;
    const LETTERS: [&str; 9] = ["R", "S", "D", "T", "t", "X", "Z", "P", "I"];
    if preempt {
        return "R";
    }
    let mut report = (state | exit_state) & TASK_REPORT;
    // The kernel's __task_state_index: TASK_IDLE is a mask (an idle
    // kthread may carry TASK_FREEZABLE too); a frozen task reports as D.
    if state & TASK_IDLE == TASK_IDLE {
        report = TASK_REPORT_IDLE;
    }
    if state & (TASK_RTLOCK_WAIT | TASK_FROZEN) != 0 {
        report = TASK_UNINTERRUPTIBLE;
    }
    let index = (u32::BITS - report.leading_zeros()) as usize;
    LETTERS[index.min(LETTERS.len() - 1)]
}

/// Turns records into rows, converting boot-clock times with the offset of
/// the current chunk, and the kernel's units into /proc's.
#[derive(Debug)]
pub struct Decoder {
    pub offset: ClockOffset,
    /// USER_HZ, to round start times as /proc does.
    pub clock_ticks_per_second: u32,
    pub page_size: u32,
    comms: CommSlots,
}

impl Decoder {
    /// A decoder for this machine's units.
    pub fn new(offset: ClockOffset) -> Self {
        Decoder {
            offset,
            clock_ticks_per_second: crate::procfs::clock_ticks_per_second(),
            page_size: crate::procfs::page_size(),
            comms: CommSlots::default(),
        }
    }

    /// Appends one record to its table; returns its kind. Records are
    /// taken in the order of their ring: a switch or wakeup may name its
    /// threads by an earlier one's comms.
    pub fn decode(&mut self, data: &[u8], rows: &mut AllRows) -> Result<u32, DecodeError> {
        let header: &hs_header = record(data, 0)?;
        let kind = header.kind;
        let ts = self.offset.to_utc_ns(header.ts);
        match hs_kind(kind) {
            hs_kind::HS_KIND_SWITCH => {
                let e: &hs_switch = record(data, kind)?;
                if e.comms_in_slots != 0 {
                    self.comms.put(header.cpu, e.prev_tid, &e.prev_comm);
                    self.comms.put(header.cpu, e.next_tid, &e.next_comm);
                }
                push_switch(ts, e, rows, None);
            }
            hs_kind::HS_KIND_SWITCH_NAMED_BEFORE => {
                let mut e: hs_switch = truncated(data, kind, SWITCH_UNNAMED)?;
                e.prev_comm = self.comms.get(header.cpu, e.prev_tid, kind)?;
                e.next_comm = self.comms.get(header.cpu, e.next_tid, kind)?;
                push_switch(ts, &e, rows, None);
            }
            hs_kind::HS_KIND_WAKEUP => {
                let e: &hs_wakeup = record(data, kind)?;
                if e.comm_in_slot != 0 {
                    self.comms.put(header.cpu, e.tid, &e.comm);
                }
                push_wakeup(ts, e, rows);
            }
            hs_kind::HS_KIND_WAKEUP_NAMED_BEFORE => {
                let mut e: hs_wakeup = truncated(data, kind, WAKEUP_UNNAMED)?;
                e.comm = self.comms.get(header.cpu, e.tid, kind)?;
                push_wakeup(ts, &e, rows);
            }
            hs_kind::HS_KIND_FORK => {
                let e: &hs_fork = record(data, kind)?;
                rows.process.push(ProcessRow {
                    ts,
                    event: "fork",
                    pid: e.child_pid as i32,
                    tid: e.child_tid as i32,
                    ppid: e.child_ppid as i32,
                    comm: &c_str(&e.comm),
                    cmdline: None,
                    exit_code: None,
                });
            }
            hs_kind::HS_KIND_EXEC => {
                let e: &hs_exec = record(data, kind)?;
                // SAFETY: as in c_str, a reinterpretation of i8 as u8.
                let raw = unsafe {
                    std::slice::from_raw_parts(e.cmdline.as_ptr().cast::<u8>(), e.cmdline.len())
                };
                let len = (e.cmdline_len as usize).min(raw.len());
                let cmdline = join_argv(&raw[..len], e.cmdline_truncated != 0);
                rows.process.push(ProcessRow {
                    ts,
                    event: "exec",
                    pid: e.pid as i32,
                    tid: e.tid as i32,
                    ppid: e.ppid as i32,
                    comm: &c_str(&e.comm),
                    cmdline: cmdline.as_deref(),
                    exit_code: None,
                });
            }
            hs_kind::HS_KIND_EXIT => {
                let e: &hs_exit = record(data, kind)?;
                rows.process.push(ProcessRow {
                    ts,
                    event: "exit",
                    pid: e.pid as i32,
                    tid: e.tid as i32,
                    ppid: e.ppid as i32,
                    comm: &c_str(&e.comm),
                    cmdline: None,
                    exit_code: Some(e.exit_code),
                });
            }
            hs_kind::HS_KIND_TASK_EXIT => {
                let e: &hs_task_exit = record(data, kind)?;
                self.push_task_exit(ts, e, rows);
            }
            hs_kind::HS_KIND_FAULT => {
                let e: &hs_fault = record(data, kind)?;
                let r = &mut rows.page_fault;
                r.ts.append_value(ts);
                r.cpu.append_value(header.cpu as i32);
                r.tid.append_value(e.tid as i32);
                r.pid.append_value(e.pid as i32);
                r.address.append_value(e.address);
                r.ip.append_value(e.ip);
                r.error_code.append_value(e.error_code as i32);
                r.kernel.append_value(e.kernel != 0);
                r.comm.append_c_name(&e.comm);
            }
            hs_kind::HS_KIND_NUMA => {
                let e: &hs_numa = record(data, kind)?;
                let name = numa_kind_name(e.event).ok_or(DecodeError::UnknownNumaEvent(e.event))?;
                let migrate = hs_numa_event(e.event) == hs_numa_event::HS_NUMA_MIGRATE;
                let r = &mut rows.numa_event;
                r.ts.append_value(ts);
                r.kind.append_value(name);
                r.tid.append_value(e.tid as i32);
                r.pid.append_value(e.pid as i32);
                r.src_cpu.append_option(non_negative(e.src_cpu));
                r.dst_cpu.append_option(non_negative(e.dst_cpu));
                r.src_nid.append_option(non_negative(e.src_nid));
                r.dst_nid.append_option(non_negative(e.dst_nid));
                if migrate {
                    r.pages_succeeded
                        .append_value(i64::try_from(e.pages_succeeded).unwrap_or(i64::MAX));
                    r.pages_failed
                        .append_value(i64::try_from(e.pages_failed).unwrap_or(i64::MAX));
                    r.reason.append_value(migrate_reason_name(e.reason));
                } else {
                    r.pages_succeeded.append_null();
                    r.pages_failed.append_null();
                    r.reason.append_null();
                }
                r.comm.append_c_name(&e.comm);
            }
            _ => return Err(DecodeError::UnknownKind(kind)),
        }
        Ok(kind)
    }

    /// Appends a record that carries a stack (a CPU sample, a switch with
    /// the leaving task's stack), interning the stack; other records go
    /// to [`Decoder::decode`]. Returns the kind.
    pub fn decode_with_stacks(
        &mut self,
        data: &[u8],
        rows: &mut AllRows,
        stacks: &mut StackInterner,
    ) -> Result<u32, DecodeError> {
        let header: &hs_header = record(data, 0)?;
        let kind = header.kind;
        let ts = self.offset.to_utc_ns(header.ts);
        match hs_kind(kind) {
            hs_kind::HS_KIND_SAMPLE => {
                let e: hs_sample = truncated(data, kind, SAMPLE_FIXED)?;
                let s = &e.stack;
                let (kernel, user) = split_stack(
                    &s.ips,
                    s.kernel_frames,
                    s.user_frames,
                    data.len() - SAMPLE_FIXED,
                );
                let stack_id = stacks.intern(
                    running!(e.pid, s),
                    kernel,
                    user,
                    &mut rows.stack,
                    &mut rows.frame,
                );
                push_sample(ts, &e, !kernel.is_empty(), stack_id, rows);
            }
            hs_kind::HS_KIND_SAMPLE_COPY => {
                let copy = stack_copy(data, kind, SAMPLE_REGS_AT)?;
                let e: hs_sample = truncated(data, kind, SAMPLE_FIXED)?;
                let s = &e.stack;
                let (kernel, user) =
                    split_stack(&s.ips, s.kernel_frames, s.user_frames, s.ips.len() * 8);
                let stack_id = stacks.intern_copied(
                    running!(e.pid, s),
                    kernel,
                    user,
                    &copy,
                    &mut rows.stack,
                    &mut rows.frame,
                );
                push_sample(ts, &e, !kernel.is_empty(), stack_id, rows);
            }
            hs_kind::HS_KIND_SWITCH_STACK_COPY => {
                let copy = stack_copy(data, kind, SWITCH_REGS_AT)?;
                let e: hs_switch_stack = truncated(data, kind, SWITCH_STACK_FIXED)?;
                let s = &e.stack;
                let (kernel, user) =
                    split_stack(&s.ips, s.kernel_frames, s.user_frames, s.ips.len() * 8);
                let stack_id = stacks.intern_copied(
                    running!(e.sw.prev_pid, s),
                    kernel,
                    user,
                    &copy,
                    &mut rows.stack,
                    &mut rows.frame,
                );
                push_switch(ts, &e.sw, rows, stack_id);
            }
            hs_kind::HS_KIND_SWITCH_STACK => {
                let e: hs_switch_stack = truncated(data, kind, SWITCH_STACK_FIXED)?;
                let s = &e.stack;
                let (kernel, user) = split_stack(
                    &s.ips,
                    s.kernel_frames,
                    s.user_frames,
                    data.len() - SWITCH_STACK_FIXED,
                );
                let stack_id = stacks.intern(
                    running!(e.sw.prev_pid, s),
                    kernel,
                    user,
                    &mut rows.stack,
                    &mut rows.frame,
                );
                push_switch(ts, &e.sw, rows, stack_id);
            }
            hs_kind::HS_KIND_EXEC => {
                // A new program: the process's old memory map no longer applies.
                let e: &hs_exec = record(data, kind)?;
                stacks.forget(e.pid);
                return self.decode(data, rows);
            }
            _ => return self.decode(data, rows),
        }
        Ok(kind)
    }
}

impl Decoder {
    /// A process's final counters as its last `task_stat` row, in the units
    /// and by the rules of its snapshots.
    fn push_task_exit(&self, ts: i64, e: &hs_task_exit, rows: &mut AllRows) {
        let (utime, stime) =
            split_cputime(e.utime, e.stime, e.runtime, (e.prev_utime, e.prev_stime));
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        rows.task_stat.push(TaskStatRow {
            ts,
            pid: e.pid as i32,
            comm: &c_str(&e.comm),
            state: "X",
            utime_ns: count(utime),
            stime_ns: count(stime),
            minflt: count(e.min_flt),
            majflt: count(e.maj_flt),
            rss_bytes: 0,
            vsize_bytes: 0,
            threads: 0,
            nvcsw: count(e.nvcsw),
            nivcsw: count(e.nivcsw),
            io: (e.has_io != 0).then(|| (count(e.read_bytes), count(e.write_bytes))),
            cgroup: None,
            ppid: e.ppid as i32,
            start_time_ns: boot_ns_to_tick(e.start_boottime, self.clock_ticks_per_second),
            // A kernel thread never had memory of its own: null, as in its snapshots.
            rss_peak_bytes: (e.maxrss_pages > 0)
                .then(|| count(e.maxrss_pages).saturating_mul(i64::from(self.page_size))),
        });
    }
}

/// One `sched_wakeup` row.
fn push_wakeup(ts: i64, e: &hs_wakeup, rows: &mut AllRows) {
    let r = &mut rows.sched_wakeup;
    r.ts.append_value(ts);
    r.cpu.append_value(e.h.cpu as i32);
    r.tid.append_value(e.tid as i32);
    r.pid.append_value(e.pid as i32);
    r.comm.append_c_name(&e.comm);
    r.target_cpu.append_value(e.target_cpu as i32);
    r.waker_tid.append_value(e.waker_tid as i32);
    r.waker_pid.append_value(e.waker_pid as i32);
    r.new_task.append_value(e.new_task != 0);
    r.prio.append_value(e.prio);
}

/// One `sched_switch` row.
fn push_switch(ts: i64, e: &hs_switch, rows: &mut AllRows, stack_id: Option<i64>) {
    let r = &mut rows.sched_switch;
    r.ts.append_value(ts);
    r.cpu.append_value(e.h.cpu as i32);
    r.prev_tid.append_value(e.prev_tid as i32);
    r.prev_pid.append_value(e.prev_pid as i32);
    r.prev_comm.append_c_name(&e.prev_comm);
    r.prev_state.append_value(task_state_letter(
        e.prev_state,
        e.prev_exit_state,
        e.preempt != 0,
    ));
    r.prev_prio.append_value(e.prev_prio);
    r.next_tid.append_value(e.next_tid as i32);
    r.next_pid.append_value(e.next_pid as i32);
    r.next_comm.append_c_name(&e.next_comm);
    r.next_prio.append_value(e.next_prio);
    r.stack_id.append_option(stack_id);
}

#[cfg(test)]
mod tests {
    use arrow::{
        array::{Array, AsArray},
        datatypes::{Int32Type, Int64Type, TimestampNanosecondType, UInt64Type},
        record_batch::RecordBatch,
    };

    use super::*;

    fn comm(name: &str) -> [i8; 16] {
        let mut out = [0i8; 16];
        for (o, b) in out.iter_mut().zip(name.bytes()) {
            *o = b as i8;
        }
        out
    }

    fn bytes<T: Plain>(value: &T) -> Vec<u8> {
        // SAFETY: T is Plain (plain old data); we copy its bytes out.
        unsafe { plain::as_bytes(value) }.to_vec()
    }

    fn header(kind: hs_kind, ts: u64, cpu: u32) -> hs_header {
        hs_header {
            ts,
            kind: kind.0,
            cpu,
        }
    }

    // SAFETY: as above; each skeleton generates its own copy of the header.
    unsafe impl Plain for crate::bpf::faults::types::hs_header {}
    unsafe impl Plain for crate::bpf::numa::types::hs_header {}
    unsafe impl Plain for crate::bpf::tasks::types::hs_header {}

    /// The same header as another skeleton's generated type.
    fn retype<H: Plain + Copy>(h: hs_header) -> H {
        *plain::from_bytes::<H>(&bytes(&h)).unwrap()
    }

    fn text(batch: &RecordBatch, column: &str, row: usize) -> String {
        let col = batch.column_by_name(column).unwrap();
        if let Some(dict) = col.as_dictionary_opt::<Int32Type>() {
            let values = dict.values().as_string::<i32>();
            return values.value(dict.keys().value(row) as usize).to_string();
        }
        col.as_string::<i32>().value(row).to_string()
    }

    fn int(batch: &RecordBatch, column: &str, row: usize) -> i64 {
        let col = batch.column_by_name(column).unwrap();
        if let Some(ts) = col.as_primitive_opt::<TimestampNanosecondType>() {
            return ts.value(row);
        }
        col.as_primitive::<Int32Type>().value(row) as i64
    }

    const OFFSET: ClockOffset = ClockOffset {
        at_boot_ns: 0,
        offset_ns: 1_000_000_000_000,
    };

    #[test]
    fn switch_record_becomes_a_sched_switch_row() {
        let e = hs_switch {
            h: header(hs_kind::HS_KIND_SWITCH, 500, 1),
            prev_tid: 11,
            prev_pid: 10,
            next_tid: 21,
            next_pid: 20,
            prev_state: 2,
            prev_prio: 120,
            next_prio: 98,
            prev_comm: comm("prev-thread"),
            next_comm: comm("a-full-16-chars!"),
            ..Default::default()
        };
        let mut rows = AllRows::default();
        let kind = Decoder::new(OFFSET).decode(&bytes(&e), &mut rows).unwrap();
        assert_eq!(kind, 1);
        let b = rows.sched_switch.finish();
        assert_eq!(b.num_rows(), 1);
        let ints = [
            ("ts", 1_000_000_000_500),
            ("cpu", 1),
            ("prev_tid", 11),
            ("prev_pid", 10),
            ("prev_prio", 120),
            ("next_tid", 21),
            ("next_pid", 20),
            ("next_prio", 98),
        ];
        for (column, want) in ints {
            assert_eq!(int(&b, column, 0), want, "{column}");
        }
        assert_eq!(text(&b, "prev_comm", 0), "prev-thread");
        assert_eq!(text(&b, "next_comm", 0), "a-full-16-chars!");
        assert_eq!(text(&b, "prev_state", 0), "D");
    }

    /// The records of one CPU's ring in order: switches and wakeups sent
    /// whole fill the slots, and those sent without comms are named from
    /// them, per CPU and only by a tid's own slot.
    #[test]
    fn records_sent_without_comms_are_named_by_their_cpus_earlier_records() {
        let switch = |cpu, prev_tid, next_tid, names: Option<(&str, &str)>| {
            let mut e = hs_switch {
                h: header(hs_kind::HS_KIND_SWITCH_NAMED_BEFORE, 1, cpu),
                prev_tid,
                next_tid,
                ..Default::default()
            };
            match names {
                Some((prev, next)) => {
                    e.h.kind = hs_kind::HS_KIND_SWITCH.0;
                    e.comms_in_slots = 1;
                    e.prev_comm = comm(prev);
                    e.next_comm = comm(next);
                    bytes(&e)
                }
                None => bytes(&e)[..SWITCH_UNNAMED].to_vec(),
            }
        };
        let wakeup = |cpu, tid, name: Option<&str>| {
            let mut e = hs_wakeup {
                h: header(hs_kind::HS_KIND_WAKEUP_NAMED_BEFORE, 1, cpu),
                tid,
                ..Default::default()
            };
            match name {
                Some(name) => {
                    e.h.kind = hs_kind::HS_KIND_WAKEUP.0;
                    e.comm_in_slot = 1;
                    e.comm = comm(name);
                    bytes(&e)
                }
                None => bytes(&e)[..WAKEUP_UNNAMED].to_vec(),
            }
        };
        let slots = CommSlots::SLOTS as u32;
        let mut decoder = Decoder::new(OFFSET);
        let mut rows = AllRows::default();
        let mut decode = |record: Vec<u8>| decoder.decode(&record, &mut rows);
        decode(switch(0, 11, 21, Some(("ping", "pong")))).unwrap();
        decode(switch(0, 21, 11, None)).unwrap();
        // A wakeup fills the slot a switch reads, and the other way round.
        decode(wakeup(0, 31, Some("woken"))).unwrap();
        decode(switch(0, 11, 31, None)).unwrap();
        decode(wakeup(0, 11, None)).unwrap();
        // Another CPU's slots are its own.
        assert_eq!(
            decode(switch(1, 11, 21, None)),
            Err(DecodeError::CommNotSent {
                kind: hs_kind::HS_KIND_SWITCH_NAMED_BEFORE.0,
                cpu: 1,
                tid: 11
            })
        );
        // A CPU number past any kernel's gets no slots.
        decode(switch(u32::MAX, 11, 21, Some(("ping", "pong")))).unwrap();
        assert!(decode(switch(u32::MAX, 11, 21, None)).is_err());
        // A tid that shares a slot takes it over.
        decode(switch(0, 11 + slots, 21, Some(("other", "pong")))).unwrap();
        assert!(decode(wakeup(0, 11, None)).is_err());
        decode(wakeup(0, 11 + slots, None)).unwrap();
        // A record sent whole but not put in the slots (a program run
        // inside another) leaves them as they were.
        let mut apart = switch(0, 21, 41, Some(("renamed", "new")));
        apart[std::mem::offset_of!(hs_switch, comms_in_slots)] = 0;
        decode(apart).unwrap();
        decode(switch(0, 21, 11 + slots, None)).unwrap();
        assert!(decode(wakeup(0, 41, None)).is_err());

        let b = rows.sched_switch.finish();
        let names: Vec<(String, String)> = (0..b.num_rows())
            .map(|r| (text(&b, "prev_comm", r), text(&b, "next_comm", r)))
            .collect();
        let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(
            names,
            [
                pair("ping", "pong"),
                pair("pong", "ping"),
                pair("ping", "woken"),
                pair("ping", "pong"),
                pair("other", "pong"),
                pair("renamed", "new"),
                pair("pong", "other"),
            ]
        );
        let w = rows.sched_wakeup.finish();
        let woken: Vec<String> = (0..w.num_rows()).map(|r| text(&w, "comm", r)).collect();
        assert_eq!(woken, ["woken", "ping", "other"]);
    }

    #[test]
    fn task_states_match_the_kernel_letters() {
        let cases = [
            (0, 0, true, "R"),
            (0, 0, false, "R"),
            (1, 0, false, "S"),
            (0x101, 0, false, "S"), // TASK_KILLABLE sleeps report as S
            (2, 0, false, "D"),
            (4, 0, false, "T"),
            (8, 0, false, "t"),
            (0x80, 0x10, false, "X"), // TASK_DEAD with EXIT_DEAD
            (0x80, 0x20, false, "Z"), // TASK_DEAD with EXIT_ZOMBIE
            (0x40, 0, false, "P"),
            (0x402, 0, false, "I"),
            (0x2402, 0, false, "I"), // TASK_IDLE | TASK_FREEZABLE: still idle
            (0x1000, 0, false, "D"),
            (0x8000, 0, false, "D"), // TASK_FROZEN reports as uninterruptible
        ];
        for (state, exit_state, preempt, want) in cases {
            assert_eq!(
                task_state_letter(state, exit_state, preempt),
                want,
                "{state:#x}"
            );
        }
    }

    #[test]
    fn lifecycle_records_become_process_rows() {
        let mut exec = hs_exec {
            h: header(hs_kind::HS_KIND_EXEC, 1, 0),
            tid: 7,
            pid: 7,
            ppid: 3,
            comm: comm("sleep"),
            cmdline_len: 8,
            ..Default::default()
        };
        for (o, b) in exec.cmdline.iter_mut().zip(b"sleep\x001\x00") {
            *o = *b as i8;
        }
        let fork = hs_fork {
            h: header(hs_kind::HS_KIND_FORK, 2, 0),
            parent_tid: 7,
            parent_pid: 7,
            child_tid: 8,
            child_pid: 7,
            child_ppid: 3,
            comm: comm("sleep"),
            ..Default::default()
        };
        let exit = hs_exit {
            h: header(hs_kind::HS_KIND_EXIT, 3, 1),
            tid: 7,
            pid: 7,
            ppid: 3,
            exit_code: 9,
            comm: comm("sleep"),
        };
        let mut decoder = Decoder::new(OFFSET);
        let mut rows = AllRows::default();
        for record in [bytes(&exec), bytes(&fork), bytes(&exit)] {
            decoder.decode(&record, &mut rows).unwrap();
        }
        let b = rows.process.finish();
        let events: Vec<_> = (0..3).map(|r| text(&b, "event", r)).collect();
        assert_eq!(events, ["exec", "fork", "exit"]);
        assert_eq!(text(&b, "cmdline", 0), "sleep 1");
        assert!(b.column_by_name("cmdline").unwrap().is_null(1));
        assert_eq!(
            (int(&b, "pid", 1), int(&b, "tid", 1), int(&b, "ppid", 1)),
            (7, 8, 3)
        );
        let exit_code = b
            .column_by_name("exit_code")
            .unwrap()
            .as_primitive::<Int32Type>();
        assert_eq!((exit_code.is_null(0), exit_code.value(2)), (true, 9));
    }

    #[test]
    fn a_process_end_becomes_its_final_task_stat_row() {
        let mut e = hs_task_exit {
            h: retype(header(hs_kind::HS_KIND_TASK_EXIT, 5_000, 1)),
            pid: 42,
            ppid: 1,
            start_boottime: 1_234_567_890,
            // 3 ticks of user time to 1 of system, 2 s exactly on CPU.
            utime: 30_000_000,
            stime: 10_000_000,
            runtime: 2_000_000_000,
            min_flt: 300,
            maj_flt: 2,
            nvcsw: 7,
            nivcsw: 9,
            maxrss_pages: 25,
            read_bytes: 4096,
            write_bytes: 8192,
            has_io: 1,
            comm: comm("hog"),
            ..Default::default()
        };
        let mut decoder = Decoder {
            clock_ticks_per_second: 100,
            page_size: 4096,
            ..Decoder::new(OFFSET)
        };
        let mut rows = AllRows::default();
        let kind = decoder.decode(&bytes(&e), &mut rows).unwrap();
        assert_eq!(table_of_kind(kind), "task_stat");
        e.has_io = 0;
        e.maxrss_pages = 0;
        decoder.decode(&bytes(&e), &mut rows).unwrap();
        let b = rows.task_stat.finish();
        let long = |column: &str, row: usize| {
            let col = b.column_by_name(column).unwrap();
            (!col.is_null(row)).then(|| col.as_primitive::<Int64Type>().value(row))
        };
        assert_eq!(int(&b, "ts", 0), OFFSET.to_utc_ns(5_000));
        assert_eq!((int(&b, "pid", 0), int(&b, "ppid", 0)), (42, 1));
        assert_eq!(
            (text(&b, "comm", 0), text(&b, "state", 0)),
            ("hog".into(), "X".into())
        );
        // The exact run time, split 3:1 as /proc splits it.
        assert_eq!(long("utime_ns", 0), Some(1_500_000_000));
        assert_eq!(long("stime_ns", 0), Some(500_000_000));
        assert_eq!((long("minflt", 0), long("majflt", 0)), (Some(300), Some(2)));
        assert_eq!((long("nvcsw", 0), long("nivcsw", 0)), (Some(7), Some(9)));
        assert_eq!(
            (long("read_bytes", 0), long("write_bytes", 0)),
            (Some(4096), Some(8192))
        );
        assert_eq!(long("rss_bytes", 0), Some(0));
        assert_eq!(long("rss_peak_bytes", 0), Some(25 * 4096));
        // Rounded to the tick like /proc/<pid>/stat's starttime, so the
        // row joins the process's snapshots.
        assert_eq!(long("start_time_ns", 0), Some(1_230_000_000));
        assert_eq!(
            (long("read_bytes", 1), long("rss_peak_bytes", 1)),
            (None, None)
        );
    }

    #[test]
    fn wakeup_marks_new_tasks() {
        let wakeup = |new_task| hs_wakeup {
            h: header(hs_kind::HS_KIND_WAKEUP, 9, 0),
            tid: 5,
            pid: 4,
            target_cpu: 1,
            waker_tid: 3,
            waker_pid: 2,
            prio: 120,
            new_task,
            comm: comm("w"),
            ..Default::default()
        };
        let mut rows = AllRows::default();
        let mut decoder = Decoder::new(OFFSET);
        decoder.decode(&bytes(&wakeup(1)), &mut rows).unwrap();
        decoder.decode(&bytes(&wakeup(0)), &mut rows).unwrap();
        let b = rows.sched_wakeup.finish();
        let new_task = b.column_by_name("new_task").unwrap().as_boolean();
        assert_eq!((new_task.value(0), new_task.value(1)), (true, false));
        assert_eq!(new_task.null_count(), 0);
        assert_eq!((int(&b, "target_cpu", 0), int(&b, "waker_pid", 0)), (1, 2));
    }

    #[test]
    fn fault_record_becomes_a_page_fault_row() {
        let e = hs_fault {
            h: retype(header(hs_kind::HS_KIND_FAULT, 40, 1)),
            address: 0x7f00_dead_b000,
            ip: 0xffff_ffff_8100_0000,
            tid: 12,
            pid: 11,
            error_code: 0x2,
            kernel: 1,
            comm: comm("faulter"),
            ..Default::default()
        };
        let mut rows = AllRows::default();
        let kind = Decoder::new(OFFSET).decode(&bytes(&e), &mut rows).unwrap();
        assert_eq!(table_of_kind(kind), "page_fault");
        let b = rows.page_fault.finish();
        let u64s = |c: &str| {
            b.column_by_name(c)
                .unwrap()
                .as_primitive::<UInt64Type>()
                .value(0)
        };
        assert_eq!(
            (u64s("address"), u64s("ip")),
            (0x7f00_dead_b000, 0xffff_ffff_8100_0000)
        );
        let ints = [
            ("ts", 1_000_000_000_040),
            ("cpu", 1),
            ("tid", 12),
            ("pid", 11),
            ("error_code", 2),
        ];
        for (column, want) in ints {
            assert_eq!(int(&b, column, 0), want, "{column}");
        }
        assert!(b.column_by_name("kernel").unwrap().as_boolean().value(0));
        assert_eq!(text(&b, "comm", 0), "faulter");
    }

    /// One `numa_event` row as text, nulls as `-`, in schema order after ts.
    fn numa_row(b: &RecordBatch, row: usize) -> String {
        let mut out = Vec::new();
        for field in b.schema().fields().iter().skip(1) {
            let col = b.column_by_name(field.name()).unwrap();
            out.push(if col.is_null(row) {
                "-".to_string()
            } else if let Some(v) = col.as_primitive_opt::<Int64Type>() {
                v.value(row).to_string()
            } else if col.as_primitive_opt::<Int32Type>().is_some() {
                int(b, field.name(), row).to_string()
            } else {
                text(b, field.name(), row)
            });
        }
        out.join(" ")
    }

    #[test]
    fn numa_records_fill_only_their_kind_columns() {
        let task = |event: hs_numa_event, src_cpu, dst_cpu, src_nid, dst_nid| hs_numa {
            h: retype(header(hs_kind::HS_KIND_NUMA, 1, 0)),
            event: event.0,
            tid: 31,
            pid: 30,
            src_cpu,
            dst_cpu,
            src_nid,
            dst_nid,
            partner_tid: 41,
            partner_pid: 40,
            comm: comm("worker"),
            ..Default::default()
        };
        let migrate = |reason: hs_migrate_reason| hs_numa {
            h: retype(header(hs_kind::HS_KIND_NUMA, 2, 1)),
            event: hs_numa_event::HS_NUMA_MIGRATE.0,
            tid: 50,
            pid: 50,
            src_cpu: -1,
            dst_cpu: -1,
            src_nid: -1,
            dst_nid: -1,
            reason: reason.0,
            pages_succeeded: 512,
            pages_failed: 3,
            comm: comm("kcompactd0"),
            ..Default::default()
        };
        let cases = [
            (
                task(hs_numa_event::HS_NUMA_MOVE, 0, 5, 0, 1),
                "move_numa 31 30 0 5 0 1 - - - worker",
            ),
            (
                task(hs_numa_event::HS_NUMA_SWAP, 2, 6, 0, 1),
                "swap_numa 31 30 2 6 0 1 - - - worker",
            ),
            // sched_stick_numa with no partner CPU (-1): no destination.
            (
                task(hs_numa_event::HS_NUMA_STICK, 3, -1, 1, -1),
                "stick_numa 31 30 3 - 1 - - - - worker",
            ),
            (
                migrate(hs_migrate_reason::HS_MR_NUMA_MISPLACED),
                "migrate_pages 50 50 - - - - 512 3 numa_misplaced kcompactd0",
            ),
            (
                migrate(hs_migrate_reason::HS_MR_SYSCALL),
                "migrate_pages 50 50 - - - - 512 3 syscall_or_cpuset kcompactd0",
            ),
            (
                migrate(hs_migrate_reason(77)),
                "migrate_pages 50 50 - - - - 512 3 unknown kcompactd0",
            ),
        ];
        let mut decoder = Decoder::new(OFFSET);
        let mut rows = AllRows::default();
        for (record, _) in &cases {
            let kind = decoder.decode(&bytes(record), &mut rows).unwrap();
            assert_eq!(table_of_kind(kind), "numa_event");
        }
        let b = rows.numa_event.finish();
        for (row, (_, want)) in cases.iter().enumerate() {
            assert_eq!(numa_row(&b, row), *want, "row {row}");
        }
        let bad = hs_numa {
            h: retype(header(hs_kind::HS_KIND_NUMA, 1, 0)),
            event: 9,
            ..Default::default()
        };
        assert_eq!(
            decoder.decode(&bytes(&bad), &mut rows),
            Err(DecodeError::UnknownNumaEvent(9))
        );
        assert!(rows.numa_event.is_empty());
    }

    #[test]
    fn every_migrate_reason_of_the_kernel_has_its_trace_name() {
        let names: Vec<_> = (0..=11).map(migrate_reason_name).collect();
        assert_eq!(
            names,
            [
                "unknown",
                "compaction",
                "memory_failure",
                "memory_hotplug",
                "syscall_or_cpuset",
                "mempolicy_mbind",
                "numa_misplaced",
                "contig_range",
                "longterm_pin",
                "demotion",
                "damon",
                "unknown"
            ]
        );
    }

    #[test]
    fn short_and_unknown_records_are_errors_not_panics() {
        let mut rows = AllRows::default();
        let mut decoder = Decoder::new(OFFSET);
        assert_eq!(
            decoder.decode(&[0u8; 4], &mut rows),
            Err(DecodeError::Short { kind: 0, len: 4 })
        );
        let h = header(hs_kind::HS_KIND_SWITCH, 1, 0);
        assert_eq!(
            decoder.decode(&bytes(&h), &mut rows),
            Err(DecodeError::Short { kind: 1, len: 16 })
        );
        let h = header(hs_kind(99), 1, 0);
        assert_eq!(
            decoder.decode(&bytes(&h), &mut rows),
            Err(DecodeError::UnknownKind(99))
        );
        assert!(rows.sched_switch.is_empty());
    }
}

#[cfg(test)]
mod stack_tests {
    use arrow::{array::AsArray, datatypes::Int64Type};

    use std::mem::offset_of;

    use super::*;

    unsafe impl Plain for crate::bpf::stacks::types::hs_header {}

    #[test]
    fn stacks_split_at_what_was_sent() {
        let ips = [1, 2, 3, 4, 5, 0, 0];
        assert_eq!(split_stack(&ips, 2, 3, 40), (&[1, 2][..], &[3, 4, 5][..]));
        // A record cut short keeps what it carries.
        assert_eq!(split_stack(&ips, 2, 3, 24), (&[1, 2][..], &[3][..]));
        assert_eq!(split_stack(&ips, 9, 9, 8), (&[1][..], &[][..]));
        assert_eq!(split_stack(&ips, 0, 0, 56), (&[][..], &[][..]));
    }

    #[test]
    fn a_sample_carries_its_stack_id_and_mode() {
        let mut e = hs_sample::default();
        let header = hs_header {
            ts: 1_000,
            kind: hs_kind::HS_KIND_SAMPLE.0,
            cpu: 1,
        };
        e.h = *plain::from_bytes(unsafe { plain::as_bytes(&header) }).unwrap();
        e.tid = 11;
        e.pid = 10;
        e.stack.kernel_frames = 2;
        e.stack.user_frames = 1;
        e.stack.ips[..3].copy_from_slice(&[0xffff_0001, 0xffff_0002, 0x4000]);
        // Only the filled part of the stack travels.
        let data = unsafe { plain::as_bytes(&e) }[..SAMPLE_FIXED + 3 * 8].to_vec();
        let mut rows = AllRows::default();
        let (tx, rx) = std::sync::mpsc::sync_channel(16);
        let root = tempfile::tempdir().unwrap(); // no maps: the user frame is anonymous
        let mut interner = StackInterner::new(root.path(), tx);
        let mut decoder = Decoder::new(ClockOffset {
            at_boot_ns: 0,
            offset_ns: 0,
        });
        let kind = decoder
            .decode_with_stacks(&data, &mut rows, &mut interner)
            .unwrap();
        assert_eq!(kind, hs_kind::HS_KIND_SAMPLE.0);
        let batch = rows.cpu_sample.finish();
        let ids = batch.column(5).as_primitive::<Int64Type>();
        assert!(batch.column(6).as_boolean().value(0), "kernel mode");
        // The sample's stack: its three frames, kernel then user, leaf first.
        let stack = rows.stack.finish();
        assert_eq!(
            stack.column(0).as_primitive::<Int64Type>().values(),
            &[ids.value(0); 3]
        );
        let named: Vec<(i64, u64)> = rx.try_iter().map(|f| (f.frame_id, f.address)).collect();
        let frame_ids = stack
            .column(2)
            .as_primitive::<Int64Type>()
            .values()
            .to_vec();
        assert_eq!(
            named,
            frame_ids
                .iter()
                .copied()
                .zip([0xffff_0001, 0xffff_0002, 0x4000])
                .collect::<Vec<_>>(),
            "three new frames to name, in the stack's order"
        );
        // Too short for its fixed part: an error, not a panic.
        assert!(decoder
            .decode_with_stacks(&data[..30], &mut rows, &mut interner)
            .is_err());
    }

    #[test]
    fn a_sample_with_a_stack_copy_falls_back_to_its_walk_where_it_cannot_unwind() {
        let mut e = hs_sample_copy::default();
        let header = hs_header {
            ts: 1_000,
            kind: hs_kind::HS_KIND_SAMPLE_COPY.0,
            cpu: 0,
        };
        e.s.h = *plain::from_bytes(unsafe { plain::as_bytes(&header) }).unwrap();
        e.s.tid = 11;
        e.s.pid = 10;
        e.s.stack.user_frames = 2;
        e.s.stack.ips[..2].copy_from_slice(&[0x4000, 0x5000]);
        e.regs.ip = 0x4000;
        e.regs.sp = 0x7000_0000;
        e.regs.copy_bytes = 64;
        // The copy travels as far as it is filled, the sample whole.
        let data = unsafe { plain::as_bytes(&e) }[..offset_of!(hs_sample_copy, copy) + 64].to_vec();
        let mut rows = AllRows::default();
        let (tx, rx) = std::sync::mpsc::sync_channel(16);
        let root = tempfile::tempdir().unwrap(); // no maps: nothing to unwind by
        let mut interner = StackInterner::new(root.path(), tx);
        let mut decoder = Decoder::new(ClockOffset {
            at_boot_ns: 0,
            offset_ns: 0,
        });
        decoder
            .decode_with_stacks(&data, &mut rows, &mut interner)
            .unwrap();
        let batch = rows.cpu_sample.finish();
        let ids = batch.column(5).as_primitive::<Int64Type>();
        // The walk's two frames, as the frame pointers gave them.
        let stack = rows.stack.finish();
        assert_eq!(
            stack.column(0).as_primitive::<Int64Type>().values(),
            &[ids.value(0); 2]
        );
        let walked: Vec<u64> = rx.try_iter().map(|f| f.address).collect();
        assert_eq!(walked, [0x4000, 0x5000]);
        assert!(!batch.column(6).as_boolean().value(0), "user mode");
        // Cut inside the registers: an error, not a panic.
        let cut = SAMPLE_REGS_AT + 8;
        assert!(decoder
            .decode_with_stacks(&data[..cut], &mut rows, &mut interner)
            .is_err());
        // A copy shorter than it says: unwound as far as it goes.
        assert!(decoder
            .decode_with_stacks(&data[..data.len() - 32], &mut rows, &mut interner)
            .is_ok());
    }
}
