//! End-to-end tests of hindsight live in `tests/e2e/`; this crate's binaries
//! are the workloads they record (see `src/bin/`).
