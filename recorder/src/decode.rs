//! Decodes ring-buffer records into table rows: pure functions over bytes,
//! so every field mapping is tested without root or BPF.
//!
//! The record layouts are the structs of `bpf/events.h`, used here through
//! the types libbpf-cargo generated from the BPF object's BTF.

use hindsight_schemas::time::ClockOffset;
use plain::Plain;
use thiserror::Error;

use crate::{
    bpf::sched::types::{hs_exec, hs_exit, hs_fork, hs_header, hs_kind, hs_switch, hs_wakeup},
    procfs::join_argv,
    rows::{AllRows, ProcessRow},
};

// SAFETY: the generated wire structs are repr(C), made only of integers and
// byte arrays, so every bit pattern is a valid value.
unsafe impl Plain for hs_header {}
unsafe impl Plain for hs_switch {}
unsafe impl Plain for hs_wakeup {}
unsafe impl Plain for hs_fork {}
unsafe impl Plain for hs_exec {}
unsafe impl Plain for hs_exit {}

// The layout the decoder was written against; a change to events.h that
// moves these sizes must be looked at here too.
const _: () = assert!(size_of::<hs_header>() == 16);
const _: () = assert!(size_of::<hs_switch>() == 88);
const _: () = assert!(size_of::<hs_wakeup>() == 64);
const _: () = assert!(size_of::<hs_fork>() == 56);
const _: () = assert!(size_of::<hs_exec>() == 312);
const _: () = assert!(size_of::<hs_exit>() == 48);

#[derive(Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record of {len} bytes is too short for its kind {kind}")]
    Short { kind: u32, len: usize },
    #[error("record of unknown kind {0}")]
    UnknownKind(u32),
}

/// The table a kind of record lands in, for naming losses.
pub fn table_of_kind(kind: u32) -> &'static str {
    match hs_kind(kind) {
        hs_kind::HS_KIND_SWITCH => "sched_switch",
        hs_kind::HS_KIND_WAKEUP => "sched_wakeup",
        hs_kind::HS_KIND_EXEC | hs_kind::HS_KIND_FORK | hs_kind::HS_KIND_EXIT => "process",
        _ => "unknown",
    }
}

fn record<T: Plain>(data: &[u8], kind: u32) -> Result<&T, DecodeError> {
    plain::from_bytes(data).map_err(|_| DecodeError::Short {
        kind,
        len: data.len(),
    })
}

/// A NUL-terminated kernel string as text; invalid UTF-8 is replaced, not dropped.
fn c_str(raw: &[i8]) -> std::borrow::Cow<'_, str> {
    // SAFETY: i8 and u8 have the same size and alignment; the slice is only reinterpreted.
    let bytes = unsafe { std::slice::from_raw_parts(raw.as_ptr().cast::<u8>(), raw.len()) };
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end])
}

/// The letter `ps` shows for the state a task blocked in, computed the way
/// the kernel's own sched_switch tracepoint does (`__trace_sched_switch_state`).
pub fn task_state_letter(state: u32, exit_state: u32, preempt: bool) -> &'static str {
    const TASK_REPORT: u32 = 0x7f;
    const TASK_IDLE: u32 = 0x402;
    const TASK_REPORT_IDLE: u32 = 0x80;
    const TASK_UNINTERRUPTIBLE: u32 = 0x2;
    const TASK_RTLOCK_WAIT: u32 = 0x1000;
    const LETTERS: [&str; 9] = ["R", "S", "D", "T", "t", "X", "Z", "P", "I"];
    if preempt {
        return "R";
    }
    let mut report = (state | exit_state) & TASK_REPORT;
    if state == TASK_IDLE {
        report = TASK_REPORT_IDLE;
    }
    if state & TASK_RTLOCK_WAIT != 0 {
        report = TASK_UNINTERRUPTIBLE;
    }
    let index = (u32::BITS - report.leading_zeros()) as usize;
    LETTERS[index.min(LETTERS.len() - 1)]
}

/// Turns records into rows, converting boot-clock times with the offset of
/// the current chunk.
#[derive(Debug)]
pub struct Decoder {
    pub offset: ClockOffset,
}

impl Decoder {
    pub fn new(offset: ClockOffset) -> Self {
        Decoder { offset }
    }

    /// Appends one record to its table; returns its kind.
    pub fn decode(&self, data: &[u8], rows: &mut AllRows) -> Result<u32, DecodeError> {
        let header: &hs_header = record(data, 0)?;
        let kind = header.kind;
        let ts = self.offset.to_utc_ns(header.ts);
        match hs_kind(kind) {
            hs_kind::HS_KIND_SWITCH => {
                let e: &hs_switch = record(data, kind)?;
                let r = &mut rows.sched_switch;
                r.ts.append_value(ts);
                r.cpu.append_value(header.cpu as i32);
                r.prev_tid.append_value(e.prev_tid as i32);
                r.prev_pid.append_value(e.prev_pid as i32);
                r.prev_comm.append_value(c_str(&e.prev_comm));
                r.prev_state.append_value(task_state_letter(
                    e.prev_state,
                    e.prev_exit_state,
                    e.preempt != 0,
                ));
                r.prev_prio.append_value(e.prev_prio);
                r.next_tid.append_value(e.next_tid as i32);
                r.next_pid.append_value(e.next_pid as i32);
                r.next_comm.append_value(c_str(&e.next_comm));
                r.next_prio.append_value(e.next_prio);
            }
            hs_kind::HS_KIND_WAKEUP => {
                let e: &hs_wakeup = record(data, kind)?;
                let r = &mut rows.sched_wakeup;
                r.ts.append_value(ts);
                r.cpu.append_value(header.cpu as i32);
                r.tid.append_value(e.tid as i32);
                r.pid.append_value(e.pid as i32);
                r.comm.append_value(c_str(&e.comm));
                r.target_cpu.append_value(e.target_cpu as i32);
                r.waker_tid.append_value(e.waker_tid as i32);
                r.waker_pid.append_value(e.waker_pid as i32);
                r.new_task.append_value(e.new_task != 0);
                r.prio.append_value(e.prio);
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
            _ => return Err(DecodeError::UnknownKind(kind)),
        }
        Ok(kind)
    }
}

#[cfg(test)]
mod tests {
    use arrow::{
        array::{Array, AsArray},
        datatypes::{Int32Type, TimestampNanosecondType},
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
            (0x1000, 0, false, "D"),
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
        let decoder = Decoder::new(OFFSET);
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
    fn wakeup_marks_new_tasks() {
        let e = hs_wakeup {
            h: header(hs_kind::HS_KIND_WAKEUP, 9, 0),
            tid: 5,
            pid: 4,
            target_cpu: 1,
            waker_tid: 3,
            waker_pid: 2,
            prio: 120,
            new_task: 1,
            comm: comm("w"),
            ..Default::default()
        };
        let mut rows = AllRows::default();
        Decoder::new(OFFSET).decode(&bytes(&e), &mut rows).unwrap();
        let b = rows.sched_wakeup.finish();
        assert!(b.column_by_name("new_task").unwrap().as_boolean().value(0));
        assert_eq!((int(&b, "target_cpu", 0), int(&b, "waker_pid", 0)), (1, 2));
    }

    #[test]
    fn short_and_unknown_records_are_errors_not_panics() {
        let mut rows = AllRows::default();
        let decoder = Decoder::new(OFFSET);
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
