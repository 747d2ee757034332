//! Every table of a recording, as data: columns, Arrow types, units, docs.
//!
//! Column order here is the order in the Parquet files. New columns go at
//! the end and are nullable, so recordings written before them still read.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

/// The Arrow type of a column, named by what it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnType {
    /// UTC wall-clock time, nanoseconds: `Timestamp(Nanosecond, "UTC")`.
    Timestamp,
    /// A small set of repeating strings (task names, states): dictionary-encoded.
    Name,
    /// Free text (command lines).
    Text,
    Bool,
    Int32,
    Int64,
    /// Addresses and other unsigned 64-bit values.
    UInt64,
    /// Ratios and rates; only views compute them, tables store raw integers.
    Float64,
}

impl ColumnType {
    pub fn data_type(self) -> DataType {
        match self {
            ColumnType::Timestamp => DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
            ColumnType::Name => {
                DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
            }
            ColumnType::Text => DataType::Utf8,
            ColumnType::Bool => DataType::Boolean,
            ColumnType::Int32 => DataType::Int32,
            ColumnType::Int64 => DataType::Int64,
            ColumnType::UInt64 => DataType::UInt64,
            ColumnType::Float64 => DataType::Float64,
        }
    }

    /// How the type reads in SQL, for the docs.
    pub fn sql_name(self) -> &'static str {
        match self {
            ColumnType::Timestamp => "TIMESTAMP (ns, UTC)",
            ColumnType::Name => "VARCHAR (dictionary)",
            ColumnType::Text => "VARCHAR",
            ColumnType::Bool => "BOOLEAN",
            ColumnType::Int32 => "INT",
            ColumnType::Int64 => "BIGINT",
            ColumnType::UInt64 => "BIGINT UNSIGNED",
            ColumnType::Float64 => "DOUBLE",
        }
    }
}

/// One column of a table.
#[derive(Debug)]
pub struct Column {
    pub name: &'static str,
    pub kind: ColumnType,
    pub nullable: bool,
    /// Unit of the value, empty where it has none (identifiers, names).
    pub unit: &'static str,
    pub doc: &'static str,
}

/// One table: a folder of Parquet files in a recording.
#[derive(Debug)]
pub struct Table {
    /// Table name in SQL and folder name on disk.
    pub name: &'static str,
    /// The event group of `hindsight-record --events` that fills it.
    pub group: &'static str,
    pub doc: &'static str,
    /// The order rows are sorted in within each Parquet row group.
    pub sort_key: &'static [&'static str],
    pub columns: &'static [Column],
}

impl Table {
    /// The Arrow schema, with the table's name in its metadata.
    pub fn schema(&self) -> SchemaRef {
        let fields: Vec<Field> = self
            .columns
            .iter()
            .map(|c| Field::new(c.name, c.kind.data_type(), c.nullable))
            .collect();
        Arc::new(Schema::new(fields))
    }

    /// Position of a column; panics on a name this table does not have,
    /// which is a programming error caught by any test that touches it.
    pub fn index(&self, column: &str) -> usize {
        self.columns
            .iter()
            .position(|c| c.name == column)
            .unwrap_or_else(|| panic!("table {} has no column {column}", self.name))
    }

    pub fn column(&self, column: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == column)
    }
}

/// Looks a table up by name.
pub fn table(name: &str) -> Option<&'static Table> {
    TABLES.iter().copied().find(|t| t.name == name)
}

pub(crate) const fn col(
    name: &'static str,
    kind: ColumnType,
    unit: &'static str,
    doc: &'static str,
) -> Column {
    Column {
        name,
        kind,
        nullable: false,
        unit,
        doc,
    }
}

pub(crate) const fn nullable(
    name: &'static str,
    kind: ColumnType,
    unit: &'static str,
    doc: &'static str,
) -> Column {
    Column {
        name,
        kind,
        nullable: true,
        unit,
        doc,
    }
}

use ColumnType::*;

const TS_DOC: &str = "When the event happened, converted from the kernel's boot clock with the offset in recording.json.";
const CPU_DOC: &str = "CPU the event was recorded on.";
/// The unit of the kernel's task priorities (`prio` of the sched tracepoints).
pub const KERNEL_PRIORITY: &str = "kernel priority";

pub static SCHED_SWITCH: Table = Table {
    name: "sched_switch",
    group: "sched",
    doc: "One row per context switch (`sched:sched_switch`): `prev` leaves the CPU, `next` takes it. \
          A thread's on-CPU time runs from the row where it is `next` to the next row where it is `prev` on the same CPU.",
    sort_key: &["cpu", "ts"],
    columns: &[
        col("ts", Timestamp, "ns, UTC", TS_DOC),
        col("cpu", Int32, "", CPU_DOC),
        col("prev_tid", Int32, "", "Thread leaving the CPU (kernel pid); 0 is the idle task."),
        col("prev_pid", Int32, "", "Process of the thread leaving the CPU (kernel tgid)."),
        col("prev_comm", Name, "", "Name of the thread leaving the CPU, at the time of the switch."),
        col("prev_state", Name, "", "State the leaving thread blocked in, as `ps` shows it: `R` preempted (still runnable), `S` sleeping, `D` uninterruptible, `T` stopped, `t` traced, `X` dead, `Z` zombie, `P` parked, `I` idle kernel thread."),
        col("prev_prio", Int32, KERNEL_PRIORITY, "Kernel priority of the leaving thread: 0-99 real-time, 100-139 normal (120 = nice 0)."),
        col("next_tid", Int32, "", "Thread taking the CPU; 0 is the idle task."),
        col("next_pid", Int32, "", "Process of the thread taking the CPU."),
        col("next_comm", Name, "", "Name of the thread taking the CPU."),
        col("next_prio", Int32, KERNEL_PRIORITY, "Kernel priority of the thread taking the CPU."),
        nullable("stack_id", Int64, "", "The stack of the thread leaving the CPU, kernel and user (see `stack`); null unless recorded with `--off-cpu-stacks`, for the idle task, or when no stack could be read. Off-CPU time is attributed to it: from this row to the next row where the same thread is `next`."),
    ],
};

pub static SCHED_WAKEUP: Table = Table {
    name: "sched_wakeup",
    group: "sched",
    doc: "One row per wakeup (`sched:sched_wakeup`, `sched:sched_wakeup_new`): the thread becomes runnable. \
          Run-queue latency is the time from here to the thread's next switch-in.",
    sort_key: &["cpu", "ts"],
    columns: &[
        col("ts", Timestamp, "ns, UTC", TS_DOC),
        col("cpu", Int32, "", "CPU the wakeup ran on."),
        col("tid", Int32, "", "Thread woken."),
        col("pid", Int32, "", "Process of the thread woken."),
        col("comm", Name, "", "Name of the thread woken."),
        col("target_cpu", Int32, "", "CPU whose run queue the thread was put on."),
        col("waker_tid", Int32, "", "Thread that asked for the wakeup, seen at `sched_waking` in its own context (`sched_wakeup` itself may fire on the woken thread's CPU, from the idle task); in interrupt context, the interrupted thread; for a new task, its parent."),
        col("waker_pid", Int32, "", "Process of `waker_tid`."),
        col("new_task", Bool, "", "True for the first wakeup of a new thread (`sched_wakeup_new`)."),
        col("prio", Int32, KERNEL_PRIORITY, "Kernel priority of the thread woken."),
    ],
};

pub static PROCESS: Table = Table {
    name: "process",
    group: "sched",
    doc: "Process and thread lifecycle: a `scan` row for every thread alive when recording started, \
          then `fork`, `exec` and `exit` as they happen, so every pid seen anywhere has a name and a command line, also after it exited.",
    sort_key: &["ts"],
    columns: &[
        col("ts", Timestamp, "ns, UTC", TS_DOC),
        col("event", Name, "", "`scan` (alive at start), `fork` (new process or thread), `exec` (new program), `exit` (thread ended)."),
        col("pid", Int32, "", "Process (kernel tgid)."),
        col("tid", Int32, "", "Thread (kernel pid); equals `pid` for a process's main thread."),
        col("ppid", Int32, "", "Parent process."),
        col("comm", Name, "", "Thread name: after `exec`, the new program's; on `fork`, inherited from the parent."),
        nullable("cmdline", Text, "", "Arguments separated by spaces; on `exec` at most the first 256 bytes, ending in `...` when cut; null for kernel threads and for `fork`/`exit`."),
        nullable("exit_code", Int32, "", "On `exit`: the wait status, `exit_code >> 8` is the exit status and `exit_code & 127` the signal that killed it."),
    ],
};

/// The `loss.source` prefix of skipped timer rounds (`late:counter`): those
/// rows count rounds, not events, and are never added to events lost.
pub const LATE_PREFIX: &str = "late:";

/// Whether a `loss.source` counts skipped timer rounds rather than events.
pub fn is_late_source(source: &str) -> bool {
    source.starts_with(LATE_PREFIX)
}

pub static LOSS: Table = Table {
    name: "loss",
    group: "always",
    doc: "What the recording could not see: events dropped, per CPU, per source and per interval. \
          A row is written for each second (`ring_full`, `map_full`: dated by the kernel as they happened, however \
          late the recorder read them) or reading interval (the others) in which something was lost; no row means \
          nothing was lost.",
    sort_key: &["ts"],
    columns: &[
        col("ts", Timestamp, "ns, UTC", "End of the second or interval in which the events were lost (ring or map losses \
            the recorder read too late to date, when it read them)."),
        nullable("cpu", Int32, "", "CPU the loss happened on; null where it is not per CPU."),
        col("source", Name, "", "What was lost, as `<cause>:<table>`: `ring_full:sched_switch` (the BPF ring buffer was full), \
            `map_full:page_cache` (the kernel's aggregation map was full), `decode_error:unknown` (a record the recorder could not read), \
            `late:counter` / `late:task_stat` / `late:page_cache` (the recorder was busy past a timer round and skipped it), \
            `recursion:<tracepoint>` (the kernel skipped a BPF program because it was already running on that CPU, \
            e.g. `recursion:sched_wakeup`: that event is missing), `not_freed:task_stat` (processes reaped before the \
            recorder stopped whose final counters the kernel had not handed over 10 s later: their last rows are missing)."),
        col("lost", Int64, "events", "Number of events lost; for `late:` sources, the number of timer rounds skipped."),
    ],
};

pub static COUNTER: Table = Table {
    name: "counter",
    group: "counters",
    doc: "System counters read every `--interval`, stored raw and cumulative exactly as the kernel printed them, one row per value \
          (long form): the delta between two rows of the same (`source`, `name`, `scope`) is what happened in between. \
          Sources and units: `vmstat` (/proc/vmstat; pages or events), `stat` (/proc/stat; CPU times in USER_HZ ticks, \
          see `clock_ticks_per_second` in recording.json, scope `cpuN` or null for the total line; `ctxt`, `intr`, `softirqs` (the `softirq` line's total), `processes` counts; \
          `procs_running`, `procs_blocked` gauges), `meminfo` (/proc/meminfo; kB), `pressure` (/proc/pressure/*; \
          `<resource>_some_total`/`<resource>_full_total` in microseconds), `node_vmstat` and `numastat` \
          (/sys/devices/system/node/nodeN; pages or events, scope `nodeN`), and `recorder` (the recorder itself, in every recording whatever its `--events`: \
          `utime_us`, `stime_us` CPU time, `rss_kb` resident memory (a gauge), `events` received, `bytes_written` closed to disk, `lost` events, `writer_wait_us` time its event loop was held up by its writer (full queue, slow disk): rings are not drained meanwhile, so `ring_full` losses with a rise here are the recorder's own, `longest_busy_us` the longest its event loop went between two waits for the rings since the last round (a gauge: the rings are not read meanwhile; /proc reading, decoding, a new process's memory map); and, when stacks are recorded, `perf_maps_refused`, processes whose JIT perf map was not read because they were not the process's own regular file of at most 64 MiB, `modules_opened`, binaries and libraries the symbolizer opened and parsed: one per binary however many processes run it, more where it let go of them to bound its memory and they came back, `frames_unnamed`, frames written without names because the symbolizer was too far behind (each is tried again when a later stack holds it), `jit_frames_let_go`, JIT frames let go of unnamed while they waited for their process's perf map, to bound the recorder's memory, and `frames_unnamed_at_stop`, frames still queued for names when the recorder stopped and written unnamed after its 10 s of grace, so that it exits within its unit's stop timeout).",
    sort_key: &["source", "name", "scope", "ts"],
    columns: &[
        col("ts", Timestamp, "ns, UTC", "When the value was read."),
        col("source", Name, "", "Where the value comes from: `vmstat`, `stat`, `meminfo`, `pressure`, `node_vmstat`, `numastat`, `recorder`."),
        col("name", Name, "", "The kernel's name of the value, as in its file (`pgfault`, `MemFree`, `user`, ...)."),
        nullable("scope", Name, "", "What the value is about when not system-wide: `cpu0`, `node1`; null for system-wide values."),
        col("value", Int64, "see source", "The raw value; cumulative for counters, current for gauges."),
    ],
};

pub static TASK_STAT: Table = Table {
    name: "task_stat",
    group: "tasks",
    doc: "A snapshot of every process every `--task-interval`, read from /proc/<pid>/{stat,status,io,cgroup}: atop's \
          process list. Cumulative columns (times, faults, switches, I/O) grow over a process's \
          life; the delta between two rows of the same `pid` (and `start_time_ns`) is its activity in between. \
          When a process ends, one more row (state `X`) holds its final counters, every thread's included, taken in the \
          kernel as it is reaped (`sched:sched_process_free`), so a process that lived between two snapshots has its \
          totals too: it started from zero at `start_time_ns`.",
    sort_key: &["pid", "ts"],
    columns: &[
        col("ts", Timestamp, "ns, UTC", "When the snapshot was taken."),
        col("pid", Int32, "", "Process (kernel tgid)."),
        col("comm", Name, "", "Process name."),
        col("state", Name, "", "State letter from /proc/<pid>/stat (`R`, `S`, `D`, `Z`, ...); `X` on the row of a process's final counters."),
        col("utime_ns", Int64, "ns", "CPU time in user mode, all threads, cumulative: /proc's figure, to its tick in snapshots, to the ns in a final row (split from the exact run time as /proc splits it)."),
        col("stime_ns", Int64, "ns", "CPU time in kernel mode, all threads, cumulative (see `utime_ns`)."),
        col("minflt", Int64, "faults", "Minor page faults, all threads, cumulative."),
        col("majflt", Int64, "faults", "Major page faults (needed I/O), all threads, cumulative."),
        col("rss_bytes", Int64, "bytes", "Resident memory (0 in a final row: the memory is gone)."),
        col("vsize_bytes", Int64, "bytes", "Virtual memory size."),
        col("threads", Int32, "", "Number of threads."),
        col("nvcsw", Int64, "switches", "Voluntary context switches, cumulative: summed over the live threads in a snapshot (/proc keeps no total of the threads that ended), over every thread in a final row."),
        col("nivcsw", Int64, "switches", "Involuntary context switches, cumulative, counted like `nvcsw`."),
        nullable("read_bytes", Int64, "bytes", "Bytes read from storage (/proc/<pid>/io), cumulative; null where unreadable."),
        nullable("write_bytes", Int64, "bytes", "Bytes written to storage, cumulative; null where unreadable."),
        nullable("cgroup", Text, "", "The cgroup v2 path (/proc/<pid>/cgroup)."),
        col("ppid", Int32, "", "Parent process."),
        col("start_time_ns", Int64, "ns since boot", "When the process started, to /proc's tick, so a reused pid is told apart."),
        nullable("rss_peak_bytes", Int64, "bytes", "Resident memory high-water mark: `VmHWM` of /proc/<pid>/status in a snapshot, the kernel's `maxrss` (what getrusage reports) in a final row; null for kernel threads."),
    ],
};

pub static PAGE_FAULT: Table = Table {
    name: "page_fault",
    group: "faults",
    doc: "Page faults (`exceptions:page_fault_user`, `exceptions:page_fault_kernel`). With `--fault-sample N` one fault in N \
          per CPU is recorded; the factor is in recording.json (`fault_sample`), so counts scale back by multiplying.",
    sort_key: &["cpu", "ts"],
    columns: &[
        col("ts", Timestamp, "ns, UTC", TS_DOC),
        col("cpu", Int32, "", CPU_DOC),
        col("tid", Int32, "", "Thread that faulted."),
        col("pid", Int32, "", "Process that faulted."),
        col("address", UInt64, "", "Faulting virtual address."),
        col("ip", UInt64, "", "Instruction pointer at the fault."),
        col("error_code", Int32, "", "x86 page-fault error code: bit 0 protection (vs not-present), 1 write, 2 user mode, 4 instruction fetch."),
        col("kernel", Bool, "", "True when the fault happened in kernel mode (`page_fault_kernel`)."),
        col("comm", Name, "", "Name of the thread that faulted."),
    ],
};

pub static NUMA_EVENT: Table = Table {
    name: "numa_event",
    group: "numa",
    doc: "NUMA balancing and page migration: tasks moved or swapped between nodes by the scheduler \
          (`sched:sched_move_numa`, `sched_swap_numa`, `sched_stick_numa`) and pages migrated (`migrate:mm_migrate_pages`). \
          Columns a kind has no value for are null.",
    sort_key: &["ts"],
    columns: &[
        col("ts", Timestamp, "ns, UTC", TS_DOC),
        col("kind", Name, "", "`move_numa`, `swap_numa`, `stick_numa` or `migrate_pages`."),
        nullable("tid", Int32, "", "Task moved (for `migrate_pages`, the task running the migration)."),
        nullable("pid", Int32, "", "Process of `tid`."),
        nullable("src_cpu", Int32, "", "CPU the task left."),
        nullable("dst_cpu", Int32, "", "CPU the task went to (for `swap_numa`, the CPU of the swapped partner)."),
        nullable("src_nid", Int32, "", "Node the task left."),
        nullable("dst_nid", Int32, "", "Node the task went to."),
        nullable("pages_succeeded", Int64, "pages", "Pages migrated (`migrate_pages`)."),
        nullable("pages_failed", Int64, "pages", "Pages that failed to migrate (`migrate_pages`)."),
        nullable("reason", Name, "", "Why pages were migrated (`numa_misplaced`, `compaction`, ...), as the kernel names it."),
        nullable("comm", Name, "", "Name of `tid`."),
    ],
};

pub static PAGE_CACHE: Table = Table {
    name: "page_cache",
    group: "cache",
    doc: "Page-cache activity per process per `--interval`, counted in the kernel from `filemap` and `writeback` tracepoints \
          and written as one row per process that touched the cache, as counted (nothing is adjusted): `accesses - misses` \
          are hits where positive (BCC's cachetop, after the fact; readahead can make an interval's misses exceed its \
          accesses). All counts are in pages (a folio of order k counts 2^k pages).",
    sort_key: &["pid", "ts"],
    columns: &[
        col("ts", Timestamp, "ns, UTC", "End of the interval."),
        col("pid", Int32, "", "Process."),
        col("comm", Name, "", "Name of the process's thread that last touched the cache in the interval."),
        col("accesses", Int64, "pages", "Pages looked up: the range of each read (`mm_filemap_get_pages`, cut at the end of the file, a read served in batches counted once) and one page per mmap fault that reached the page cache (`mm_filemap_fault`)."),
        col("misses", Int64, "pages", "Pages added to the page cache (read from storage)."),
        col("dirtied", Int64, "pages", "Pages dirtied (to be written back)."),
        nullable("fault_around", Int64, "pages", "Pages in the windows mmap faults mapped around themselves (`mm_filemap_map_pages`): the kernel maps those of them that are cached and up to date, and does not say how many; not in `accesses`. Null in recordings made before it was counted."),
    ],
};

/// Tables whose rows describe things that later rows of other tables refer
/// to (a pid's name and command line; a stack's frames once stacks are
/// recorded), each written once, when first seen. Retention deletes their
/// files only as a last resort, after every older file of every other
/// table, and never by age: a week-old `exec` row still names the process
/// in this minute's switches.
pub static REFERENCE_TABLES: &[&str] = &["process", "stack", "frame"];
pub static CPU_SAMPLE: Table = Table {
    name: "cpu_sample",
    group: "cpu",
    doc: "One row per CPU sample: a `cpu-clock` perf event fires on every CPU `--frequency` times a second of CPU time and \
          records the interrupted thread and its stack. A thread's samples times the sampling period estimate its CPU time; \
          idle CPUs are not sampled (the idle task is skipped). The frequency is in recording.json (`sample_frequency`).",
    sort_key: &["cpu", "ts"],
    columns: &[
        col("ts", Timestamp, "ns, UTC", TS_DOC),
        col("cpu", Int32, "", "CPU that was sampled."),
        col("tid", Int32, "", "Thread that was running (kernel pid)."),
        col("pid", Int32, "", "Process of that thread (kernel tgid)."),
        col("comm", Name, "", "Name of the thread."),
        nullable("stack_id", Int64, "", "Its stack, kernel frames then user frames (see `stack`); null when neither stack could be read."),
        col("kernel", Bool, "", "True when the thread was interrupted in kernel mode (the sample has kernel frames)."),
    ],
};

pub static STACK: Table = Table {
    name: "stack",
    group: "cpu",
    doc: "The frames of every stack referenced by `cpu_sample.stack_id` and `sched_switch.stack_id`, one row per frame \
          (long form: no list type to unnest, a stack is rebuilt with a plain join on `frame` ordered by `depth`, and DuckDB, \
          pandas and any SQL engine read it as is). A stack is written once per session (a recorder's run), in the chunk where it was first seen; \
          recordings written before ids were numbered (hindsight 2026-12-07) can hold the same rows twice, so readers use \
          `SELECT DISTINCT`. Depth 0 is the leaf (where the thread was); kernel frames come before user frames.",
    sort_key: &["stack_id", "depth"],
    columns: &[
        col("stack_id", Int64, "", "The stack's id: one per stack (its frames, leaf first) in every chunk and every process of a recorder's run, counted up from a random start drawn per run, so runs and hosts read together do not share ids (a new run gives the same stack a new id)."),
        col("depth", Int32, "", "Position in the stack: 0 is the leaf, counting towards the root."),
        col("frame_id", Int64, "", "The frame at this depth (see `frame`)."),
    ],
};

pub static FRAME: Table = Table {
    name: "frame",
    group: "cpu",
    doc: "What each frame is, symbolized while its process was alive: user frames with blazesym by (build id or module \
          path, file offset), JIT code from `/tmp/perf-<pid>.map`, kernel frames from /proc/kallsyms. A frame is written once \
          per session, in the chunk where it was first seen (possibly a later chunk than its stacks), and again, under the \
          same id, when it was first written unnamed (the symbolizer behind): readers deduplicate by `frame_id`, taking the \
          named row. User stacks of CPU samples are unwound by the modules' `.eh_frame` (`--unwind dwarf`, the default; \
          `sample_unwind` in recording.json), so code built without frame pointers keeps its callers; off-CPU stacks \
          (`--off-cpu-stacks`) are unwound from a smaller copy (up to 8 KiB) and completed by frame pointers.",
    // By where the code is, not by `frame_id` (the order first seen, which
    // says little): neighbouring rows then share module and function, and
    // their offsets and addresses differ by little. A quarter fewer bytes
    // (BENCHMARKS.md, "Frames in code order").
    sort_key: &["module", "file_offset", "address"],
    columns: &[
        col("frame_id", Int64, "", "The frame's id: one per frame identity (kind, module (build id, else path) and file offset for user frames; the address for kernel frames) in every chunk and every process of a recorder's run, counted up from a random start drawn per run, so runs and hosts read together do not share ids."),
        col("kind", Name, "", "`kernel` or `user`."),
        nullable("address", UInt64, "", "Virtual address of the instruction (a return address for all but the leaf) for kernel frames and code in no file (JIT, anonymous memory). Null for frames in a file, which `module` (or `build_id`) and `file_offset` name in every process that maps it: each maps it at its own address. Recordings whose files declare this column not nullable hold, for those, the address in the first process the frame was seen in."),
        nullable("module", Text, "", "Path of the file mapped at the address (`[kernel]` or `[<module>]` for kernel frames); null for anonymous memory."),
        nullable("build_id", Text, "", "GNU build id of the module, in hex, where it has one: re-symbolize elsewhere with it."),
        nullable("file_offset", UInt64, "bytes", "Offset of the address in the module file (for `[vdso]`, in the kernel's vDSO image, which the recorder names and unwinds from its own copy); null for kernel and anonymous frames."),
        nullable("function", Text, "", "Function name (demangled); null when it could not be resolved."),
        nullable("file", Text, "", "Source file, from debug info (DWARF). Null for modules without it, and for modules whose DWARF exceeds 4 MiB: the recorder names those from their symbol table alone, to bound its memory (`hindsight --debug-dir` fills it when read)."),
        nullable("line", Int32, "", "Source line, from debug info (null where `file` is)."),
        nullable("inlined", Text, "", "Functions inlined at this address, innermost last, separated by `;` (from debug info)."),
        nullable("elf_address", UInt64, "", "`file_offset` as an address of the module's own ELF file (through its `PT_LOAD` program headers): what a separate debug file, `addr2line` and `hindsight --debug-dir` look a frame up by, since a debug file keeps no code to take offsets in. Null where `file_offset` is."),
    ],
};

/// Every table, in the order the docs list them.
pub static TABLES: &[&Table] = &[
    &SCHED_SWITCH,
    &SCHED_WAKEUP,
    &PROCESS,
    &COUNTER,
    &TASK_STAT,
    &PAGE_FAULT,
    &NUMA_EVENT,
    &PAGE_CACHE,
    &CPU_SAMPLE,
    &STACK,
    &FRAME,
    &LOSS,
];
