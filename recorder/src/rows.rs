//! Arrow builders for each table, filled one event at a time without
//! allocating, and turned into a `RecordBatch` in the column order that
//! `hindsight_schemas` defines.

use std::{borrow::Cow, sync::Arc};

use arrow::{
    array::{
        ArrayBuilder, ArrayRef, BooleanBuilder, DictionaryArray, Int32Array, Int32Builder,
        Int64Builder, StringArray, StringBuilder, TimestampNanosecondBuilder, UInt64Builder,
    },
    datatypes::{Int32Type, SchemaRef},
    record_batch::RecordBatch,
};
use hindsight_schemas::{tables, Table};

/// A `Name` column (dictionary of strings) of one batch, with its names
/// interned by their bytes as the kernel sent them, not with a UTF-8 check,
/// a search for its NUL and a hash of the string as Arrow's builder does
/// (the recorder appends two or three names per context switch).
///
/// A name of at most 16 bytes (every `comm`) is looked up first as one
/// 128-bit word in a small table of the names just seen, which takes no
/// hash of its bytes and no comparison of slices; the hashing and
/// comparing of the map below was a tenth of the recorder's CPU under a
/// context-switch storm. The table only remembers: two names in one of its
/// entries just go to the map. The map is ahash's, seeded at random, as
/// Arrow's own: names are chosen by whoever runs a program, and a fixed
/// hash could be made to collide.
#[derive(Debug)]
pub struct NameBuilder {
    keys: Int32Builder,
    values: StringBuilder,
    index: ahash::AHashMap<Box<[u8]>, i32>,
    /// (name's 16 bytes as sent, its key) of names seen in this batch;
    /// [`NO_KEY`] where none.
    recent: [(u128, i32); RECENT_NAMES],
}

/// Entries of [`NameBuilder`]'s table of names just seen: more than the
/// threads a CPU switches between in a batch, far fewer than a cache line
/// per name.
const RECENT_NAMES: usize = 64;
const NO_KEY: i32 = -1;

impl Default for NameBuilder {
    fn default() -> Self {
        NameBuilder {
            keys: Int32Builder::default(),
            values: StringBuilder::default(),
            index: ahash::AHashMap::default(),
            recent: [(0, NO_KEY); RECENT_NAMES],
        }
    }
}

/// A name's entry in the table of names just seen: its word's bits mixed
/// by a multiply, the top ones taken.
fn recent_slot(word: u128) -> usize {
    let folded = (word as u64) ^ ((word >> 64) as u64).rotate_left(29);
    (folded.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - RECENT_NAMES.trailing_zeros())) as usize
}

impl NameBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a name given as the kernel keeps it (`comm`): bytes up to
    /// the first NUL; invalid UTF-8 is replaced, as `from_utf8_lossy` does.
    pub fn append_c_name(&mut self, raw: &[i8; 16]) {
        // SAFETY: i8 and u8 have the same size and alignment.
        let bytes: &[u8; 16] = unsafe { &*raw.as_ptr().cast::<[u8; 16]>() };
        // The bytes past the NUL are part of the word: a name sent with
        // different ones takes another entry, and finds the same key.
        let word = u128::from_ne_bytes(*bytes);
        let key = self.key_of_word(word, || c_name_bytes(raw), String::from_utf8_lossy);
        self.keys.append_value(key);
    }

    pub fn append_value(&mut self, name: impl AsRef<str>) {
        let name = name.as_ref();
        let key = if name.len() <= 16 {
            let mut bytes = [0u8; 16];
            bytes[..name.len()].copy_from_slice(name.as_bytes());
            self.key_of_word(
                u128::from_ne_bytes(bytes),
                || name.as_bytes(),
                |_| name.into(),
            )
        } else {
            self.key_of(name.as_bytes(), || name.into())
        };
        self.keys.append_value(key);
    }

    pub fn append_null(&mut self) {
        self.keys.append_null();
    }

    pub fn append_option(&mut self, name: Option<impl AsRef<str>>) {
        match name {
            Some(name) => self.append_value(name),
            None => self.append_null(),
        }
    }

    /// The key of the name whose 16 bytes are `word`: from the table of
    /// names just seen, else from the map by its `bytes` (interned as
    /// `name` of them if new), and remembered in the table.
    fn key_of_word<'a>(
        &mut self,
        word: u128,
        bytes: impl FnOnce() -> &'a [u8],
        name: impl FnOnce(&'a [u8]) -> Cow<'a, str>,
    ) -> i32 {
        let slot = recent_slot(word);
        match self.recent[slot] {
            (held, key) if held == word && key != NO_KEY => key,
            _ => {
                let bytes = bytes();
                let key = self.key_of(bytes, || name(bytes));
                self.recent[slot] = (word, key);
                key
            }
        }
    }

    /// The key of the name with these bytes, interned if new.
    fn key_of<'a>(&mut self, bytes: &[u8], name: impl FnOnce() -> Cow<'a, str>) -> i32 {
        if let Some(&key) = self.index.get(bytes) {
            return key;
        }
        let key = i32::try_from(self.index.len()).expect("fewer names than rows in a batch");
        self.values.append_value(name());
        self.index.insert(bytes.into(), key);
        key
    }

    fn finish_dictionary(&mut self) -> DictionaryArray<Int32Type> {
        self.index.clear();
        self.recent = [(0, NO_KEY); RECENT_NAMES];
        name_dictionary(self.keys.finish(), self.values.finish())
    }
}

fn name_dictionary(keys: Int32Array, values: StringArray) -> DictionaryArray<Int32Type> {
    DictionaryArray::try_new(keys, Arc::new(values)).expect("every key indexes a value")
}

/// A name as the kernel keeps it (a `char` array): its bytes up to the first NUL.
pub fn c_name_bytes(raw: &[i8]) -> &[u8] {
    // SAFETY: i8 and u8 have the same size and alignment; the slice is only reinterpreted.
    let bytes = unsafe { std::slice::from_raw_parts(raw.as_ptr().cast::<u8>(), raw.len()) };
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    &bytes[..end]
}

impl ArrayBuilder for NameBuilder {
    fn len(&self) -> usize {
        self.keys.len()
    }

    fn finish(&mut self) -> ArrayRef {
        Arc::new(self.finish_dictionary())
    }

    fn finish_cloned(&self) -> ArrayRef {
        Arc::new(name_dictionary(
            self.keys.finish_cloned(),
            self.values.finish_cloned(),
        ))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn into_box_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

/// Rows of one table waiting to be written, whatever the table.
pub trait PendingRows {
    fn table(&self) -> &'static Table;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Takes the rows so far as a batch and leaves the builders empty.
    fn finish(&mut self) -> RecordBatch;
}

fn timestamps() -> TimestampNanosecondBuilder {
    TimestampNanosecondBuilder::new().with_timezone("UTC")
}

/// Declares a table's builders in schema order. `COLUMNS` lets a test check
/// that order against the schema, since `RecordBatch::try_new` only checks types.
macro_rules! table_rows {
    ($(#[$doc:meta])* $name:ident for $table:expr; $first:ident: $first_builder:ty = $first_init:expr, $($col:ident: $builder:ty = $init:expr),+ $(,)?) => {
        table_rows!(@impl $(#[$doc])* $name for $table; $first; $first: $first_builder = $first_init, $($col: $builder = $init),+);
    };
    (@impl $(#[$doc:meta])* $name:ident for $table:expr; $first:ident; $($col:ident: $builder:ty = $init:expr),+) => {
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
                ArrayBuilder::len(&self.$first)
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

        impl PendingRows for $name {
            fn table(&self) -> &'static Table {
                &$table
            }

            fn len(&self) -> usize {
                $name::len(self)
            }

            fn finish(&mut self) -> RecordBatch {
                $name::finish(self)
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
    stack_id: Int64Builder = Int64Builder::new(),
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

table_rows! {
    /// Rows of `counter`.
    CounterRows for tables::COUNTER;
    ts: TimestampNanosecondBuilder = timestamps(),
    source: NameBuilder = NameBuilder::new(),
    name: NameBuilder = NameBuilder::new(),
    scope: NameBuilder = NameBuilder::new(),
    value: Int64Builder = Int64Builder::new(),
}

table_rows! {
    /// Rows of `task_stat`.
    TaskStatRows for tables::TASK_STAT;
    ts: TimestampNanosecondBuilder = timestamps(),
    pid: Int32Builder = Int32Builder::new(),
    comm: NameBuilder = NameBuilder::new(),
    state: NameBuilder = NameBuilder::new(),
    utime_ns: Int64Builder = Int64Builder::new(),
    stime_ns: Int64Builder = Int64Builder::new(),
    minflt: Int64Builder = Int64Builder::new(),
    majflt: Int64Builder = Int64Builder::new(),
    rss_bytes: Int64Builder = Int64Builder::new(),
    vsize_bytes: Int64Builder = Int64Builder::new(),
    threads: Int32Builder = Int32Builder::new(),
    nvcsw: Int64Builder = Int64Builder::new(),
    nivcsw: Int64Builder = Int64Builder::new(),
    read_bytes: Int64Builder = Int64Builder::new(),
    write_bytes: Int64Builder = Int64Builder::new(),
    cgroup: StringBuilder = StringBuilder::new(),
    ppid: Int32Builder = Int32Builder::new(),
    start_time_ns: Int64Builder = Int64Builder::new(),
    rss_peak_bytes: Int64Builder = Int64Builder::new(),
}

table_rows! {
    /// Rows of `page_fault`.
    PageFaultRows for tables::PAGE_FAULT;
    ts: TimestampNanosecondBuilder = timestamps(),
    cpu: Int32Builder = Int32Builder::new(),
    tid: Int32Builder = Int32Builder::new(),
    pid: Int32Builder = Int32Builder::new(),
    address: UInt64Builder = UInt64Builder::new(),
    ip: UInt64Builder = UInt64Builder::new(),
    error_code: Int32Builder = Int32Builder::new(),
    kernel: BooleanBuilder = BooleanBuilder::new(),
    comm: NameBuilder = NameBuilder::new(),
}

table_rows! {
    /// Rows of `numa_event`.
    NumaEventRows for tables::NUMA_EVENT;
    ts: TimestampNanosecondBuilder = timestamps(),
    kind: NameBuilder = NameBuilder::new(),
    tid: Int32Builder = Int32Builder::new(),
    pid: Int32Builder = Int32Builder::new(),
    src_cpu: Int32Builder = Int32Builder::new(),
    dst_cpu: Int32Builder = Int32Builder::new(),
    src_nid: Int32Builder = Int32Builder::new(),
    dst_nid: Int32Builder = Int32Builder::new(),
    pages_succeeded: Int64Builder = Int64Builder::new(),
    pages_failed: Int64Builder = Int64Builder::new(),
    reason: NameBuilder = NameBuilder::new(),
    comm: NameBuilder = NameBuilder::new(),
}

table_rows! {
    /// Rows of `page_cache`.
    PageCacheRows for tables::PAGE_CACHE;
    ts: TimestampNanosecondBuilder = timestamps(),
    pid: Int32Builder = Int32Builder::new(),
    comm: NameBuilder = NameBuilder::new(),
    accesses: Int64Builder = Int64Builder::new(),
    misses: Int64Builder = Int64Builder::new(),
    dirtied: Int64Builder = Int64Builder::new(),
    fault_around: Int64Builder = Int64Builder::new(),
}

table_rows! {
    /// Rows of `cpu_sample`.
    CpuSampleRows for tables::CPU_SAMPLE;
    ts: TimestampNanosecondBuilder = timestamps(),
    cpu: Int32Builder = Int32Builder::new(),
    tid: Int32Builder = Int32Builder::new(),
    pid: Int32Builder = Int32Builder::new(),
    comm: NameBuilder = NameBuilder::new(),
    stack_id: Int64Builder = Int64Builder::new(),
    kernel: BooleanBuilder = BooleanBuilder::new(),
}

table_rows! {
    /// Rows of `stack`.
    StackRows for tables::STACK;
    stack_id: Int64Builder = Int64Builder::new(),
    depth: Int32Builder = Int32Builder::new(),
    frame_id: Int64Builder = Int64Builder::new(),
}

table_rows! {
    /// Rows of `frame`.
    FrameRows for tables::FRAME;
    frame_id: Int64Builder = Int64Builder::new(),
    kind: NameBuilder = NameBuilder::new(),
    address: UInt64Builder = UInt64Builder::new(),
    module: StringBuilder = StringBuilder::new(),
    build_id: StringBuilder = StringBuilder::new(),
    file_offset: UInt64Builder = UInt64Builder::new(),
    function: StringBuilder = StringBuilder::new(),
    file: StringBuilder = StringBuilder::new(),
    line: Int32Builder = Int32Builder::new(),
    inlined: StringBuilder = StringBuilder::new(),
    elf_address: UInt64Builder = UInt64Builder::new(),
}

impl StackRows {
    /// Appends a stack, one row per frame, leaf first.
    pub fn push(&mut self, stack_id: i64, frame_ids: &[i64]) {
        for (depth, frame_id) in frame_ids.iter().enumerate() {
            self.stack_id.append_value(stack_id);
            self.depth.append_value(depth as i32);
            self.frame_id.append_value(*frame_id);
        }
    }
}

impl CounterRows {
    pub fn push(&mut self, ts: i64, source: &str, name: &str, scope: Option<&str>, value: i64) {
        self.ts.append_value(ts);
        self.source.append_value(source);
        self.name.append_value(name);
        self.scope.append_option(scope);
        self.value.append_value(value);
    }
}

/// The rows of every table, waiting for their sinks.
#[derive(Default)]
pub struct AllRows {
    pub sched_switch: SchedSwitchRows,
    pub sched_wakeup: SchedWakeupRows,
    pub process: ProcessRows,
    pub counter: CounterRows,
    pub task_stat: TaskStatRows,
    pub page_fault: PageFaultRows,
    pub numa_event: NumaEventRows,
    pub page_cache: PageCacheRows,
    pub cpu_sample: CpuSampleRows,
    pub stack: StackRows,
    pub frame: FrameRows,
    pub loss: LossRows,
}

impl AllRows {
    pub fn each(&mut self) -> [&mut dyn PendingRows; 12] {
        [
            &mut self.sched_switch,
            &mut self.sched_wakeup,
            &mut self.process,
            &mut self.counter,
            &mut self.task_stat,
            &mut self.page_fault,
            &mut self.numa_event,
            &mut self.page_cache,
            &mut self.cpu_sample,
            &mut self.stack,
            &mut self.frame,
            &mut self.loss,
        ]
    }

    /// A table's rows by its name. Asked after every record (is its batch
    /// full?), so a match rather than a search of `each` by name: that
    /// search took 6 % of the recorder's CPU in a switch storm.
    pub fn get(&mut self, table: &str) -> Option<&mut dyn PendingRows> {
        Some(match table {
            "sched_switch" => &mut self.sched_switch,
            "sched_wakeup" => &mut self.sched_wakeup,
            "process" => &mut self.process,
            "counter" => &mut self.counter,
            "task_stat" => &mut self.task_stat,
            "page_fault" => &mut self.page_fault,
            "numa_event" => &mut self.numa_event,
            "page_cache" => &mut self.page_cache,
            "cpu_sample" => &mut self.cpu_sample,
            "stack" => &mut self.stack,
            "frame" => &mut self.frame,
            "loss" => &mut self.loss,
            _ => return None,
        })
    }
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

/// One `task_stat` row: a snapshot of a process, or its final counters.
pub struct TaskStatRow<'a> {
    pub ts: i64,
    pub pid: i32,
    pub comm: &'a str,
    pub state: &'a str,
    pub utime_ns: i64,
    pub stime_ns: i64,
    pub minflt: i64,
    pub majflt: i64,
    pub rss_bytes: i64,
    pub vsize_bytes: i64,
    pub threads: i32,
    pub nvcsw: i64,
    pub nivcsw: i64,
    /// `(read_bytes, write_bytes)` where known.
    pub io: Option<(i64, i64)>,
    pub cgroup: Option<&'a str>,
    pub ppid: i32,
    pub start_time_ns: i64,
    pub rss_peak_bytes: Option<i64>,
}

impl TaskStatRows {
    pub fn push(&mut self, row: TaskStatRow<'_>) {
        self.ts.append_value(row.ts);
        self.pid.append_value(row.pid);
        self.comm.append_value(row.comm);
        self.state.append_value(row.state);
        self.utime_ns.append_value(row.utime_ns);
        self.stime_ns.append_value(row.stime_ns);
        self.minflt.append_value(row.minflt);
        self.majflt.append_value(row.majflt);
        self.rss_bytes.append_value(row.rss_bytes);
        self.vsize_bytes.append_value(row.vsize_bytes);
        self.threads.append_value(row.threads);
        self.nvcsw.append_value(row.nvcsw);
        self.nivcsw.append_value(row.nivcsw);
        self.read_bytes.append_option(row.io.map(|(read, _)| read));
        self.write_bytes
            .append_option(row.io.map(|(_, write)| write));
        self.cgroup.append_option(row.cgroup);
        self.ppid.append_value(row.ppid);
        self.start_time_ns.append_value(row.start_time_ns);
        self.rss_peak_bytes.append_option(row.rss_peak_bytes);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_follow_schema_column_order() {
        let cases: [(&Table, &[&str]); 12] = [
            (SchedSwitchRows::table(), SchedSwitchRows::COLUMNS),
            (SchedWakeupRows::table(), SchedWakeupRows::COLUMNS),
            (ProcessRows::table(), ProcessRows::COLUMNS),
            (CounterRows::table(), CounterRows::COLUMNS),
            (TaskStatRows::table(), TaskStatRows::COLUMNS),
            (PageFaultRows::table(), PageFaultRows::COLUMNS),
            (NumaEventRows::table(), NumaEventRows::COLUMNS),
            (PageCacheRows::table(), PageCacheRows::COLUMNS),
            (CpuSampleRows::table(), CpuSampleRows::COLUMNS),
            (StackRows::table(), StackRows::COLUMNS),
            (FrameRows::table(), FrameRows::COLUMNS),
            (LossRows::table(), LossRows::COLUMNS),
        ];
        for (table, columns) in cases {
            let names: Vec<_> = table.columns.iter().map(|c| c.name).collect();
            assert_eq!(names, columns, "{}", table.name);
        }
    }

    #[test]
    fn every_table_has_rows() {
        let mut rows = AllRows::default();
        for table in hindsight_schemas::TABLES {
            let found = rows.get(table.name);
            assert_eq!(found.map(|r| r.table().name), Some(table.name));
        }
        assert!(rows.get("unknown").is_none());
    }

    #[test]
    fn names_are_interned_per_batch_by_their_bytes() {
        use arrow::array::{Array, AsArray};
        let comm = |name: &[u8]| -> [i8; 16] {
            let mut raw = [0i8; 16];
            for (to, &from) in raw.iter_mut().zip(name) {
                *to = from as i8;
            }
            raw
        };
        let mut names = NameBuilder::new();
        names.append_c_name(&comm(b"hs-ping"));
        names.append_value("hs-ping");
        names.append_null();
        names.append_c_name(&comm(b"a-full-16-chars!"));
        names.append_c_name(&comm(b"bad \xff name"));
        names.append_c_name(&comm(b"hs-ping"));
        let array = names.finish();
        let names_of = |array: &ArrayRef| -> Vec<Option<String>> {
            let dictionary = array.as_dictionary::<Int32Type>();
            let values = dictionary.values().as_string::<i32>();
            dictionary
                .keys()
                .iter()
                .map(|k| k.map(|k| values.value(k as usize).to_owned()))
                .collect()
        };
        assert_eq!(
            names_of(&array),
            [
                Some("hs-ping".into()),
                Some("hs-ping".into()),
                None,
                Some("a-full-16-chars!".into()),
                Some("bad \u{fffd} name".into()),
                Some("hs-ping".into()),
            ]
        );
        // One value per distinct name, and the next batch starts afresh.
        assert_eq!(array.as_dictionary::<Int32Type>().values().len(), 3);
        assert_eq!(array.null_count(), 1);
        names.append_c_name(&comm(b"next"));
        let next = names.finish();
        assert_eq!(names_of(&next), [Some("next".into())]);
        assert_eq!(next.as_dictionary::<Int32Type>().values().len(), 1);
    }

    #[test]
    fn names_sharing_an_entry_of_the_recent_table_keep_their_own_keys() {
        use arrow::array::AsArray;
        let comm = |name: &str, after_nul: u8| -> [i8; 16] {
            let mut raw = [after_nul as i8; 16];
            for (to, &from) in raw.iter_mut().zip(name.as_bytes()) {
                *to = from as i8;
            }
            raw[name.len()] = 0;
            raw
        };
        let word = |raw: &[i8; 16]| u128::from_ne_bytes(raw.map(|b| b as u8));
        // Two names whose words take the same entry.
        let first = comm("worker-0", 0);
        let second = (1..)
            .map(|i| comm(&format!("worker-{i}"), 0))
            .find(|raw| recent_slot(word(raw)) == recent_slot(word(&first)))
            .unwrap();
        let mut names = NameBuilder::new();
        // The first name again with other bytes past its NUL, as a
        // kernel that does not clear them may send it.
        let first_again = comm("worker-0", b'x');
        for raw in [&first, &second, &first, &first_again, &second] {
            names.append_c_name(raw);
        }
        names.append_value("worker-0");
        let array = names.finish();
        let dictionary = array.as_dictionary::<Int32Type>();
        let values = dictionary.values().as_string::<i32>();
        let got: Vec<&str> = dictionary
            .keys()
            .iter()
            .map(|k| values.value(k.unwrap() as usize))
            .collect();
        let second_name = String::from_utf8(
            second
                .iter()
                .take_while(|&&b| b != 0)
                .map(|&b| b as u8)
                .collect(),
        )
        .unwrap();
        assert_eq!(
            got,
            [
                "worker-0",
                &second_name,
                "worker-0",
                "worker-0",
                &second_name,
                "worker-0"
            ]
        );
        assert_eq!(arrow::array::Array::len(values), 2);
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
