//! Integration tests of the analyzer, one binary: synthetic recordings
//! written with the `schemas` definitions, read through the library API and
//! the `hindsight` binary.

mod debug_dir; // --debug-dir: unnamed frames named, symbol-table names gain file and line
mod errors; // bad input: exit code 2 and one line naming the file
mod export; // pprof and Perfetto exports decoded, against the flame graph and the rows
mod fixture; // temp-dir recordings built from rows given as JSON
mod flamegraph; // folded and SVG flame graphs from synthetic stacks
mod golden; // every report's table format, byte for byte, on the fixture recordings
mod html; // `report html`: one self-contained page with charts, incidents, flame graph, losses
mod info; // `info`: counts, sizes, time range and losses from footers
mod output; // the binary's formats, exit codes and closed pipes
mod report; // interval reports: exact figures, DuckDB cross-check, formats
mod shell; // `sql` without a query: a scripted session on standard input
mod slice; // `slice`: same answers on the window, --pid, names, refusals, DuckDB
mod sql; // query results over one and several recordings
mod timeline; // timeline, runqlat and top on synthetic recordings; every report's formats
mod views; // helper views against a simulated scheduler that knows the answers
