/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The wire format between hindsight's BPF programs and hindsight-record.
 *
 * This header is the one definition of every record a BPF program sends to
 * user space. The Rust side never re-declares these structs: it uses the
 * types libbpf-cargo generates from the object's BTF (see the anchors at the
 * end of each *.bpf.c file) and asserts their sizes at compile time.
 *
 * Every record starts with `struct hs_header`, so one ring buffer can carry
 * several kinds and the consumer dispatches on `kind` without guessing.
 * Times are CLOCK_BOOTTIME nanoseconds (bpf_ktime_get_boot_ns): monotonic,
 * counting suspend; user space converts them to UTC with the offset it
 * stores in recording.json.
 */
#ifndef HINDSIGHT_EVENTS_H
#define HINDSIGHT_EVENTS_H

#define HS_COMM_LEN 16
/* Enough for the command lines people read; longer ones are cut, and say so. */
#define HS_CMDLINE_LEN 256

enum hs_kind {
	HS_KIND_SWITCH = 1,
	HS_KIND_WAKEUP = 2,
	HS_KIND_EXEC = 3,
	HS_KIND_FORK = 4,
	HS_KIND_EXIT = 5,
	HS_KIND_FAULT = 6,
	HS_KIND_NUMA = 7,
	/* Never a ring record: the loss-counter index of page-cache counts
	 * dropped because the per-process map was full. */
	HS_KIND_CACHE = 8,
	HS_KIND_SAMPLE = 9,
	HS_KIND_SWITCH_STACK = 10,
	HS_KIND_TASK_EXIT = 11,
	/* A CPU sample with a copy of the user stack; its losses count as
	 * HS_KIND_SAMPLE's. */
	HS_KIND_SAMPLE_COPY = 12,
	/* A switch with the leaving task's stacks and a copy of its user
	 * stack; its losses count as HS_KIND_SWITCH_STACK's. */
	HS_KIND_SWITCH_STACK_COPY = 13,
	/* An hs_switch sent without its two comms, which its CPU's comm
	 * slots hold (see HS_COMM_SLOTS); its losses count as
	 * HS_KIND_SWITCH's. */
	HS_KIND_SWITCH_NAMED_BEFORE = 14,
	/* An hs_wakeup sent without its comm, likewise; its losses count
	 * as HS_KIND_WAKEUP's. */
	HS_KIND_WAKEUP_NAMED_BEFORE = 15,
	/* One past the last kind: the size of the per-CPU loss counters. */
	HS_KIND_MAX = 16,
};

/*
 * A switch and a wakeup name their threads (32 and 16 of their 88 and 64
 * bytes), but a CPU switches among the same few threads again and again:
 * each CPU sends a thread's comm once, and then only when it changes.
 * Each CPU keeps HS_COMM_SLOTS slots, thread `tid`'s at tid % HS_COMM_SLOTS,
 * each holding a tid and a comm. A switch or wakeup whose threads' slots
 * hold their tids and comms already is sent cut before its first comm, as
 * HS_KIND_SWITCH_NAMED_BEFORE or HS_KIND_WAKEUP_NAMED_BEFORE. Otherwise it
 * is sent whole and, when `comms_in_slots` is 1, its threads' tids and
 * comms go into their slots (prev's, then next's), in the order the
 * records are in the CPU's ring. The recorder keeps the same slots per CPU
 * (all zero at the start, as the kernel's are) from those records, read
 * in ring order, and finds the comms of a cut record there. A record
 * reserved but not sent would break this: the programs never discard one.
 */
enum hs_comm_slots {
	HS_COMM_SLOTS = 128,
};

/*
 * What the programs could not send, per CPU, in one per-CPU array of
 * HS_LOSS_SLOTS `struct hs_loss` per program group (see HS_COUNT_LOSS).
 * Slot HS_LOSS_TOTAL holds running totals per kind: exact, whenever the
 * recorder reads them. Slot `second % HS_LOSS_SECONDS` holds the counts of
 * that second of the boot clock, so a loss is dated by when it happened,
 * not by when a recorder starved by the very load that caused it got
 * round to reading; a slot reused before it was read leaves its counts to
 * the totals, dated when read.
 */
#define HS_LOSS_SECONDS 32
#define HS_LOSS_TOTAL HS_LOSS_SECONDS
#define HS_LOSS_SLOTS (HS_LOSS_SECONDS + 1)

struct hs_loss {
	__u64 second;	/* boot-clock second of the counts (0 in the totals slot) */
	__u64 count[HS_KIND_MAX];	/* per enum hs_kind */
};

struct hs_header {
	__u64 ts;	/* CLOCK_BOOTTIME, ns */
	__u32 kind;	/* enum hs_kind */
	__u32 cpu;	/* CPU the probe ran on */
};

/* sched:sched_switch: prev leaves the CPU, next takes it. */
struct hs_switch {
	struct hs_header h;
	__u32 prev_tid;
	__u32 prev_pid;
	__u32 next_tid;
	__u32 next_pid;
	__u32 prev_state;	/* the state prev blocked in (task->__state bits) */
	__u32 prev_exit_state;	/* task->exit_state: tells a zombie from a dead task */
	__s32 prev_prio;	/* kernel priority: 0-99 RT, 100-139 normal, 120 = nice 0 */
	__s32 next_prio;
	__u8 preempt;		/* 1 when prev was preempted (still runnable) */
	__u8 comms_in_slots;	/* 1 when the comms below went into their slots (HS_COMM_SLOTS) */
	__u8 pad[6];
	char prev_comm[HS_COMM_LEN];	/* from here on, not sent with HS_KIND_SWITCH_NAMED_BEFORE */
	char next_comm[HS_COMM_LEN];
};

/* sched:sched_wakeup and sched:sched_wakeup_new. */
struct hs_wakeup {
	struct hs_header h;
	__u32 tid;
	__u32 pid;
	__u32 target_cpu;
	__u32 waker_tid;	/* the task running on h.cpu when the wakeup fired */
	__u32 waker_pid;
	__s32 prio;
	__u8 new_task;		/* 1 for sched_wakeup_new: the first wakeup after fork */
	__u8 comm_in_slot;	/* 1 when comm went into its slot (HS_COMM_SLOTS) */
	__u8 pad[6];
	char comm[HS_COMM_LEN];	/* not sent with HS_KIND_WAKEUP_NAMED_BEFORE */
};

/* sched:sched_process_fork (processes and threads alike). */
struct hs_fork {
	struct hs_header h;
	__u32 parent_tid;
	__u32 parent_pid;
	__u32 child_tid;
	__u32 child_pid;
	__u32 child_ppid;	/* the child's real parent process */
	__u32 pad;
	char comm[HS_COMM_LEN];	/* the child's comm, inherited from the parent */
};

/* sched:sched_process_exec: the new program's comm and its argv. */
struct hs_exec {
	struct hs_header h;
	__u32 tid;
	__u32 pid;
	__u32 ppid;
	__u32 old_tid;		/* the thread that called execve, when not the leader */
	__u32 cmdline_len;	/* bytes of cmdline filled, NUL-separated argv */
	__u32 cmdline_truncated; /* 1 when argv was longer than HS_CMDLINE_LEN */
	char comm[HS_COMM_LEN];
	char cmdline[HS_CMDLINE_LEN];
};

/* sched:sched_process_exit: one record per exiting thread. */
struct hs_exit {
	struct hs_header h;
	__u32 tid;
	__u32 pid;
	__u32 ppid;
	__s32 exit_code;	/* wait status: (code >> 8) exit status, (code & 0x7f) signal */
	char comm[HS_COMM_LEN];
};

/*
 * sched:sched_process_free of a process (its thread-group leader): the
 * process's final counters, every thread's included, once its last thread
 * is gone and it has been reaped. Raw as the kernel keeps them: user space
 * splits CPU time the way /proc does (cputime_adjust).
 */
struct hs_task_exit {
	struct hs_header h;
	__u32 pid;
	__u32 ppid;
	__u64 start_boottime;	/* ns since boot, as /proc/<pid>/stat's starttime before its tick rounding */
	__u64 utime;		/* ns, tick-sampled */
	__u64 stime;		/* ns, tick-sampled */
	__u64 runtime;		/* ns on CPU, exact (sum_exec_runtime) */
	__u64 prev_utime;	/* signal->prev_cputime: the split /proc last reported */
	__u64 prev_stime;
	__u64 min_flt;
	__u64 maj_flt;
	__u64 nvcsw;
	__u64 nivcsw;
	__u64 maxrss_pages;	/* signal->maxrss: the high-water RSS getrusage reports */
	__u64 read_bytes;	/* storage I/O, as /proc/<pid>/io */
	__u64 write_bytes;
	__u32 has_io;		/* 0 when the kernel keeps no I/O accounting */
	__u32 pad;
	char comm[HS_COMM_LEN];
};

/* exceptions:page_fault_user and page_fault_kernel (x86), one in
 * `fault_sample` per CPU. The faulting task is always `current`. */
struct hs_fault {
	struct hs_header h;
	__u64 address;		/* faulting virtual address (cr2) */
	__u64 ip;		/* regs->ip at the fault */
	__u32 tid;
	__u32 pid;
	__u32 error_code;	/* x86 page-fault error code bits */
	__u8 kernel;		/* 1 for page_fault_kernel */
	__u8 pad[3];
	char comm[HS_COMM_LEN];
};

/* Which NUMA event an hs_numa record is. */
enum hs_numa_event {
	HS_NUMA_MOVE = 1,	/* sched:sched_move_numa */
	HS_NUMA_SWAP = 2,	/* sched:sched_swap_numa */
	HS_NUMA_STICK = 3,	/* sched:sched_stick_numa */
	HS_NUMA_MIGRATE = 4,	/* migrate:mm_migrate_pages */
};

/* The kernel's enum migrate_reason, renumbered by CO-RE in the BPF program
 * so the wire value means the same on every kernel. */
enum hs_migrate_reason {
	HS_MR_UNKNOWN = 0,
	HS_MR_COMPACTION = 1,
	HS_MR_MEMORY_FAILURE = 2,
	HS_MR_MEMORY_HOTPLUG = 3,
	HS_MR_SYSCALL = 4,	/* printed by the kernel as syscall_or_cpuset */
	HS_MR_MEMPOLICY_MBIND = 5,
	HS_MR_NUMA_MISPLACED = 6,
	HS_MR_CONTIG_RANGE = 7,
	HS_MR_LONGTERM_PIN = 8,
	HS_MR_DEMOTION = 9,
	HS_MR_DAMON = 10,
};

/* sched:sched_{move,swap,stick}_numa and migrate:mm_migrate_pages.
 * CPUs and nodes are -1 where the event has none (a stick with no partner). */
struct hs_numa {
	struct hs_header h;
	__u32 event;		/* enum hs_numa_event */
	__u32 tid;		/* the task moved; for migrate, current */
	__u32 pid;
	__s32 src_cpu;
	__s32 dst_cpu;
	__s32 src_nid;		/* cpu_to_node(src_cpu), read in the kernel */
	__s32 dst_nid;
	__u32 partner_tid;	/* swap/stick: the task on dst_cpu, 0 if none */
	__u32 partner_pid;
	__u32 reason;		/* migrate: enum hs_migrate_reason */
	__u64 pages_succeeded;	/* migrate only */
	__u64 pages_failed;
	char comm[HS_COMM_LEN];	/* of tid */
};

/* The page-cache counters of one process (tgid) since the last drain: the
 * value of the `cache` group's hash map, read by user space, never sent
 * through a ring. Counts are pages (a folio of order k is 2^k pages). */
struct hs_cache_counts {
	__u64 accesses;		/* lookups: read ranges and mmap faults */
	__u64 misses;		/* pages added to the page cache */
	__u64 dirtied;		/* pages newly dirtied */
	__u64 fault_around;	/* pages in fault-around windows */
	char comm[HS_COMM_LEN];	/* the thread that last touched the cache */
};

/* Frames kept per stack, kernel and user each: deeper stacks are cut at the
 * root end (the leaf side is what a profile needs). */
#define HS_STACK_DEPTH 64

/* A kernel stack and a user stack, as instruction addresses, leaf first:
 * `kernel_frames` kernel addresses, then `user_frames` user addresses right
 * after them. Only the filled part of `ips` is sent: the record ends after
 * ips[kernel_frames + user_frames - 1]. User stacks are walked by frame
 * pointers, so code built without them gives one or two user frames here;
 * a sample's copy of the stack (struct hs_sample_copy) is the cure. */
struct hs_stack {
	__u32 kernel_frames;
	__u32 user_frames;
	/* The program the user frames are in, as /proc/<pid>/stat shows it
	 * (startcode, startstack; 0 for a kernel thread): execve gives both
	 * new values, so the recorder tells a sample of the program a process
	 * ran before an execve from one of the program it runs now, and names
	 * each by its own memory map or leaves it unnamed, never by the
	 * other's. */
	__u64 start_code;
	__u64 start_stack;
	__u64 ips[2 * HS_STACK_DEPTH];
};

/* A CPU sample (perf event cpu-clock): the interrupted thread and its stacks.
 * kernel_frames > 0 exactly when it was interrupted in kernel mode. */
struct hs_sample {
	struct hs_header h;
	__u32 tid;
	__u32 pid;
	char comm[HS_COMM_LEN];
	struct hs_stack stack;	/* last: sent only as far as it is filled */
};

/* Bytes of the user stack a CPU sample copies, from the stack pointer up,
 * for the recorder to unwind by the modules' call frame information
 * (.eh_frame): perf --call-graph dwarf copies 8 KiB by default; Rust and
 * C++ frames are large, and a sample is rare enough to afford 16. */
#define HS_STACK_COPY 16384

/* Off-CPU stacks come with every switch: their copy is the rest of the
 * stack pointer's page, and the next page when that rest is under
 * HS_SWITCH_COPY_MIN bytes. Enough to unwind the libc functions a thread
 * blocks in up to the code that called them; the frame-pointer walk goes
 * on from there. */
#define HS_SWITCH_STACK_COPY 8192
#define HS_SWITCH_COPY_MIN 1024

/* What unwinding code without frame pointers needs, after a record with
 * its stacks: the user registers where the thread left user space and
 * the top of its user stack. The copy is unwound in the recorder and never
 * written. */
struct hs_user_regs {
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u32 copy_bytes;	/* of the copy that follows, read from sp up */
	__u32 pad;
};

/* A CPU sample with a copy of its user stack (h.kind HS_KIND_SAMPLE_COPY);
 * s.stack is sent whole, its frame-pointer walk being the fallback and the
 * kernel half. */
struct hs_sample_copy {
	struct hs_sample s;
	struct hs_user_regs regs;
	__u8 copy[HS_STACK_COPY];	/* last: sent only as far as it is filled */
};

/* sched:sched_switch with the stack of the task leaving the CPU
 * (--off-cpu-stacks); h.kind is HS_KIND_SWITCH_STACK. */
struct hs_switch_stack {
	struct hs_switch sw;
	struct hs_stack stack;	/* last: sent only as far as it is filled */
};

/* A switch with a copy of the leaving task's user stack (h.kind
 * HS_KIND_SWITCH_STACK_COPY, --off-cpu-stacks with --unwind dwarf). */
struct hs_switch_stack_copy {
	struct hs_switch_stack s;	/* whole */
	struct hs_user_regs regs;
	__u8 copy[HS_SWITCH_STACK_COPY];	/* last: sent only as far as it is filled */
};

#endif /* HINDSIGHT_EVENTS_H */
