//! The contract between `hindsight-record` and `hindsight`.
//!
//! Nothing else in the workspace defines a table name, a column, its Arrow
//! type, its unit, or where a file of a recording lives. The recorder builds
//! its Arrow builders from [`tables`]; the analyzer registers the same
//! schemas with DataFusion, so a table with no file yet still has its
//! columns, and a file written by an older recorder (fewer, always nullable
//! new columns) still reads.
//!
//! - [`tables`]: every table, its columns, types, units and docs.
//! - [`layout`]: directory and file names, Parquet key-value metadata.
//! - [`journal`]: the Arrow IPC journal of a chunk being written.
//! - [`footer`]: a chunk's Parquet footer, read so no file makes it spin.
//! - [`meta`]: `recording.json`, the recording's self-description.
//! - [`time`]: the one conversion from the kernel's boot clock to UTC.
//! - [`when`]: the one parser of the times `--from` and `--to` take.
//! - [`views`]: the helper views the analyzer defines over the tables.
//! - [`derived`]: tables derived from the raw events (scheduler events
//!   paired per thread), and [`pairing`], the one pass that builds them.
//! - [`doc`]: renders `SCHEMA.md` from the above (a test keeps it current).

pub mod derived;
pub mod doc;
pub mod footer;
pub mod journal;
pub mod layout;
pub mod meta;
pub mod pairing;
pub mod tables;
pub mod time;
pub mod views;
pub mod when;

/// Version of the on-disk format. Bumped when a reader of the previous
/// version could misread a new recording; adding a nullable column does not
/// bump it.
pub const SCHEMA_VERSION: u32 = 1;

pub use derived::DERIVED_TABLES;
pub use tables::{Column, ColumnType, Table, TABLES};

/// Every table a recording may hold: the recorded ones ([`TABLES`]), then
/// the derived ones ([`DERIVED_TABLES`]).
pub fn all_tables() -> impl Iterator<Item = &'static Table> {
    TABLES.iter().chain(DERIVED_TABLES).copied()
}
pub use views::{View, VIEWS};
