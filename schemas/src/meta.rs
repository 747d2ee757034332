//! `recording.json`: what a recording is, written by the recorder, read by
//! every `hindsight` command before it opens a table.
//!
//! Fields are only ever added (readers ignore what they do not know), so an
//! old analyzer reads a newer recording's description as far as it can, and
//! `schema_version` says whether it may read the tables.

use serde::{Deserialize, Serialize};

use crate::time::ClockOffset;

/// The value of `format`: tells a recording from any other JSON file.
pub const FORMAT: &str = "hindsight-recording";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordingMeta {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`crate::SCHEMA_VERSION`] of the writer.
    pub schema_version: u32,
    /// Host name of the recorded machine.
    pub host: String,
    /// One entry per run of the recorder into this directory, oldest first.
    pub sessions: Vec<Session>,
    /// What retention deleted, oldest first, so `info` can say which
    /// periods the recording no longer covers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired: Vec<Retired>,
    /// Set when `hindsight slice` cut this recording from another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slice_of: Option<SliceOrigin>,
}

/// Chunks of one table that retention deleted in one pass.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Retired {
    pub table: String,
    /// UTC, RFC 3339: the start of the oldest deleted chunk.
    pub from: String,
    /// UTC, RFC 3339: the end of the newest deleted chunk (where what is
    /// left of the table begins).
    pub to: String,
    /// UTC, RFC 3339: when they were deleted.
    pub deleted_at: String,
    /// Why: `max-size` or `max-age`.
    pub reason: String,
    pub files: u64,
    pub bytes: u64,
}

/// Where a slice came from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SliceOrigin {
    /// The source recording's directory, as given to `slice`.
    pub source: String,
    /// UTC, RFC 3339: the window kept, `from` inclusive, `to` exclusive.
    pub from: String,
    pub to: String,
    /// Only these processes were kept (empty: all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pids: Vec<i32>,
    /// UTC, RFC 3339: when the slice was made.
    pub made_at: String,
}

/// One run of `hindsight-record`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// UTC, RFC 3339.
    pub started: String,
    /// UTC, RFC 3339; absent while recording or after a crash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// `/proc/sys/kernel/random/boot_id`: raw boot-clock times are only
    /// comparable within one boot.
    pub boot_id: String,
    /// `uname -r`.
    pub kernel: String,
    pub cpus: u32,
    pub numa_nodes: u32,
    pub recorder_version: String,
    /// argv of the recorder, as given.
    pub command_line: Vec<String>,
    /// Event groups recorded.
    pub events: Vec<String>,
    /// Chunk length, nanoseconds.
    pub chunk_ns: u64,
    /// Every boot-to-UTC offset used, one per chunk.
    pub clock_offsets: Vec<ClockOffset>,
    /// USER_HZ: the unit of the CPU times in `/proc/stat` counters.
    #[serde(default = "default_clock_ticks")]
    pub clock_ticks_per_second: u32,
    /// Page size in bytes.
    #[serde(default = "default_page_size")]
    pub page_size: u32,
    /// Counters interval, nanoseconds (0 when counters were not recorded).
    #[serde(default)]
    pub counter_interval_ns: u64,
    /// Task snapshot interval, nanoseconds (0 when tasks were not recorded).
    #[serde(default)]
    pub task_interval_ns: u64,
    /// One page fault in this many is recorded (1: every fault).
    #[serde(default = "one")]
    pub fault_sample: u32,
    /// CPU samples per second of CPU time (`--frequency`); 0 when `cpu` was not recorded.
    #[serde(default)]
    pub sample_frequency: u32,
    /// True when `sched_switch.stack_id` was recorded (`--off-cpu-stacks`).
    #[serde(default)]
    pub off_cpu_stacks: bool,
    /// How the user stacks of CPU samples were unwound (`--unwind`):
    /// `dwarf` (call frame information, frame pointers where a module has
    /// none) or `fp` (frame pointers only); empty in recordings older than
    /// the option, which walked frame pointers.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sample_unwind: String,
    /// Tracepoints that could not be attached on this kernel
    /// (`category:name`), and event groups that could not load at all
    /// (`group:name`; those are not in `events`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_probes: Vec<String>,
    /// The recorder's own process id: what the recorder itself did (its
    /// start-up reading every running program's symbols, an overload) is
    /// told from what the system did. Absent in older recordings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorder_pid: Option<i32>,
}

fn default_clock_ticks() -> u32 {
    100
}

fn default_page_size() -> u32 {
    4096
}

fn one() -> u32 {
    1
}

impl RecordingMeta {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("recording metadata always serializes") + "\n"
    }

    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The most recent session, which `info` describes the machine by.
    pub fn latest(&self) -> Option<&Session> {
        self.sessions.last()
    }
}
