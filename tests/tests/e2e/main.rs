//! End-to-end tests: record real kernel activity with `hindsight-record`,
//! query it with `hindsight`, and compare with ground truth from an
//! independent source (`/proc`, DuckDB). They load BPF and need root, which
//! every developer machine and CI has: nothing here is skipped.
//!
//! One binary, one module per concern; `fixture` gives each test its own
//! recording directory and drives the two programs.

mod fixture;

/// Page-cache hits and misses per process, and the atop report on real snapshots.
mod cache_and_atop;
/// System counters and task snapshots match /proc; faults match a known workload.
mod counters_and_tasks;
/// kill -9 and recovery, reading a live recording, full and vanished disks.
mod crash_and_faults;
/// `hindsight index`: derived tables equal the raw-event views; the memory limit holds.
mod derived_tables;
/// The Parquet files are standard: DuckDB reads the same rows as hindsight.
mod duckdb_reads_it;
/// Perfetto and pprof exports of a real recording: slices equal `cpu_time`, totals the flame graph's.
mod exports;
/// Recordings pushed to a real S3 server read back through s3:// as the directories do.
mod fleet;
/// `report html` of a real burst names it and renders in headless Chromium without console errors.
mod html_report;
/// Left running: retention keeps the disk budget and the newest data; one recorder per directory.
mod leave_running;
/// A context-switch storm: dropped and counted in `loss`, memory within its stated bound.
mod overload;
/// The Debian package on a fresh Debian root: installs, enables, records, removes.
mod package;
/// Context switches and process lifecycle rows equal the kernel's own counts.
mod sched_ground_truth;
/// `hindsight slice` of a real recording keeps exactly the window's rows.
mod slice_real;
/// CPU and off-CPU stacks of a known workload: names after exit, weights against /proc.
mod stacks;
/// Stopping mid-chunk and refusing bad setups leave only complete files and clear errors.
mod stop_and_errors;
/// The incident timeline finds an injected burst; runqlat matches measured lateness.
mod timeline_and_runqlat;
/// Debian 12's kernel and a two-node NUMA machine, emulated: the recorder there, the reports here.
mod vm;
