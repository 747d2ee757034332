//! Arrow builders for each table, filled one event at a time without
//! allocating, and turned into a `RecordBatch` in the column order that
//! `hindsight_schemas` defines.

use arrow::{
    array::{
        ArrayBuilder, ArrayRef, BooleanBuilder, Int32Builder, Int64Builder, StringBuilder,
        StringDictionaryBuilder, TimestampNanosecondBuilder,
    },
    datatypes::{Int32Type, SchemaRef},
    record_batch::RecordBatch,
};
use hindsight_schemas::{tables, Table};

pub type NameBuilder = StringDictionaryBuilder<Int32Type>;

fn timestamps() -> TimestampNanosecondBuilder {
    TimestampNanosecondBuilder::new().with_timezone("UTC")
}

/// Declares a table's builders in schema order. `COLUMNS` lets a test check
/// that order against the schema, since `RecordBatch::try_new` only checks types.
macro_rules! table_rows {
    ($(#[$doc:meta])* $name:ident for $table:expr; $($col:ident: $builder:ty = $init:expr),+ $(,)?) => {
        $(#[$doc])*
        pub struct $name {
            schema: SchemaRef,
            $(pub $col: $builder,)+
        }

        impl $name {
            #[allow(dead_code)]
            pub const COLUMNS: &'static [&'static str] = &[$(stringify!($col)),+];

            pub fn table() -> &'static Table {
                &$table
            }

            pub fn new() -> Self {
                Self { schema: $table.schema(), $($col: $init,)+ }
            }

            pub fn len(&self) -> usize {
                self.ts.len()
            }

            pub fn is_empty(&self) -> bool {
                self.len() == 0
            }

            /// Takes the rows so far as a batch and leaves the builders empty.
            pub fn finish(&mut self) -> RecordBatch {
                let columns: Vec<ArrayRef> = vec![$(ArrayBuilder::finish(&mut self.$col)),+];
                RecordBatch::try_new(self.schema.clone(), columns)
                    .expect("builders are declared in schema order with schema types")
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }
    };
}

table_rows! {
    /// Rows of `sched_switch`.
    SchedSwitchRows for tables::SCHED_SWITCH;
    ts: TimestampNanosecondBuilder = timestamps(),
    cpu: Int32Builder = Int32Builder::new(),
    prev_tid: Int32Builder = Int32Builder::new(),
    prev_pid: Int32Builder = Int32Builder::new(),
    prev_comm: NameBuilder = NameBuilder::new(),
    prev_state: NameBuilder = NameBuilder::new(),
    prev_prio: Int32Builder = Int32Builder::new(),
    next_tid: Int32Builder = Int32Builder::new(),
    next_pid: Int32Builder = Int32Builder::new(),
    next_comm: NameBuilder = NameBuilder::new(),
    next_prio: Int32Builder = Int32Builder::new(),
}

table_rows! {
    /// Rows of `sched_wakeup`.
    SchedWakeupRows for tables::SCHED_WAKEUP;
    ts: TimestampNanosecondBuilder = timestamps(),
    cpu: Int32Builder = Int32Builder::new(),
    tid: Int32Builder = Int32Builder::new(),
    pid: Int32Builder = Int32Builder::new(),
    comm: NameBuilder = NameBuilder::new(),
    target_cpu: Int32Builder = Int32Builder::new(),
    waker_tid: Int32Builder = Int32Builder::new(),
    waker_pid: Int32Builder = Int32Builder::new(),
    new_task: BooleanBuilder = BooleanBuilder::new(),
    prio: Int32Builder = Int32Builder::new(),
}

table_rows! {
    /// Rows of `process`.
    ProcessRows for tables::PROCESS;
    ts: TimestampNanosecondBuilder = timestamps(),
    event: NameBuilder = NameBuilder::new(),
    pid: Int32Builder = Int32Builder::new(),
    tid: Int32Builder = Int32Builder::new(),
    ppid: Int32Builder = Int32Builder::new(),
    comm: NameBuilder = NameBuilder::new(),
    cmdline: StringBuilder = StringBuilder::new(),
    exit_code: Int32Builder = Int32Builder::new(),
}

table_rows! {
    /// Rows of `loss`.
    LossRows for tables::LOSS;
    ts: TimestampNanosecondBuilder = timestamps(),
    cpu: Int32Builder = Int32Builder::new(),
    source: NameBuilder = NameBuilder::new(),
    lost: Int64Builder = Int64Builder::new(),
}

/// One `process` row; `event` is one of the documented names.
pub struct ProcessRow<'a> {
    pub ts: i64,
    pub event: &'static str,
    pub pid: i32,
    pub tid: i32,
    pub ppid: i32,
    pub comm: &'a str,
    pub cmdline: Option<&'a str>,
    pub exit_code: Option<i32>,
}

impl ProcessRows {
    pub fn push(&mut self, row: ProcessRow<'_>) {
        self.ts.append_value(row.ts);
        self.event.append_value(row.event);
        self.pid.append_value(row.pid);
        self.tid.append_value(row.tid);
        self.ppid.append_value(row.ppid);
        self.comm.append_value(row.comm);
        self.cmdline.append_option(row.cmdline);
        self.exit_code.append_option(row.exit_code);
    }
}

impl LossRows {
    pub fn push(&mut self, ts: i64, cpu: Option<i32>, source: &str, lost: i64) {
        self.ts.append_value(ts);
        self.cpu.append_option(cpu);
        self.source.append_value(source);
        self.lost.append_value(lost);
    }
}

/// A finished batch of one table, ready for its sink.
pub struct TableBatch {
    pub table: &'static Table,
    pub batch: RecordBatch,
}

impl TableBatch {
    pub fn new(table: &'static Table, batch: RecordBatch) -> Self {
        TableBatch { table, batch }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_follow_schema_column_order() {
        let cases: [(&Table, &[&str]); 4] = [
            (SchedSwitchRows::table(), SchedSwitchRows::COLUMNS),
            (SchedWakeupRows::table(), SchedWakeupRows::COLUMNS),
            (ProcessRows::table(), ProcessRows::COLUMNS),
            (LossRows::table(), LossRows::COLUMNS),
        ];
        for (table, columns) in cases {
            let names: Vec<_> = table.columns.iter().map(|c| c.name).collect();
            assert_eq!(names, columns, "{}", table.name);
        }
    }

    #[test]
    fn finish_empties_the_builders_and_keeps_utc() {
        let mut rows = LossRows::new();
        rows.push(5, Some(1), "ring_full:sched_switch", 3);
        let batch = rows.finish();
        assert_eq!(batch.num_rows(), 1);
        assert!(rows.is_empty());
        assert_eq!(
            batch.schema().field(0).data_type(),
            &tables::LOSS.columns[0].kind.data_type()
        );
    }
}
