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
    /// Tracepoints that could not be attached on this kernel.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_probes: Vec<String>,
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
