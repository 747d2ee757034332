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
/// The Parquet files are standard: DuckDB reads the same rows as hindsight.
mod duckdb_reads_it;
/// Context switches and process lifecycle rows equal the kernel's own counts.
mod sched_ground_truth;
/// CPU and off-CPU stacks of a known workload: names after exit, weights against /proc.
mod stacks;
/// Stopping mid-chunk and refusing bad setups leave only complete files and clear errors.
mod stop_and_errors;
