// SPDX-License-Identifier: GPL-2.0
/*
 * The `sched` event group: context switches, wakeups and the process
 * lifecycle (fork, exec, exit), each sent as one compact record.
 *
 * BTF-typed raw tracepoints (tp_btf) rather than classic tracepoints: the
 * same kernel events, at about a fifth of the per-event cost, and with the
 * task_struct at hand so we read exactly the fields we store.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "emit.h"
#include "stack.h"

char LICENSE[] SEC("license") = "GPL";

/* Filled and sized by user space before attach (--ring-size). */
HS_CPU_RINGS(sched_rings);

/* Records that found the ring full, per CPU and per kind. */
HS_LOSS_MAP(sched_lost);

/* Set by user space before load (--off-cpu-stacks): send each switch with
 * the stack of the task leaving the CPU. */
const volatile bool off_cpu_stacks = false;

/* Set by user space before load (--unwind dwarf, with --off-cpu-stacks):
 * copy the top of the leaving task's user stack too. */
const volatile bool copy_user_stack = false;

/* Where a switch with its stack is built before its filled part is sent. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hs_switch_stack_copy);
} switch_scratch SEC(".maps");

/* This CPU's comm slots (see HS_COMM_SLOTS in events.h). */
struct hs_comm_slot {
	__u32 tid;
	__u32 pad;
	__u64 comm[2];
};

struct hs_comm_cache {
	/* 1 while a program uses the slots: a program run inside it (none
	 * should: these tracepoints fire with interrupts off) sends its
	 * records whole and leaves the slots alone, so they change in the
	 * order of the records in the ring. */
	__u32 busy;
	__u32 pad;
	struct hs_comm_slot slot[HS_COMM_SLOTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hs_comm_cache);
} comm_cache SEC(".maps");

/* This CPU's slots, marked busy; NULL when another program has them. */
static __always_inline struct hs_comm_cache *take_comm_slots(void)
{
	__u32 zero = 0;
	struct hs_comm_cache *c = bpf_map_lookup_elem(&comm_cache, &zero);
	if (!c || c->busy)
		return 0;
	c->busy = 1;
	return c;
}

static __always_inline struct hs_comm_slot *comm_slot(struct hs_comm_cache *c, __u32 tid)
{
	return &c->slot[tid & (HS_COMM_SLOTS - 1)];
}

/* Whether `tid`'s slot holds it with this comm. */
static __always_inline bool comm_in_slot(struct hs_comm_cache *c, __u32 tid, const __u64 comm[2])
{
	struct hs_comm_slot *s = comm_slot(c, tid);
	return s->tid == tid && s->comm[0] == comm[0] && s->comm[1] == comm[1];
}

static __always_inline void put_comm_in_slot(struct hs_comm_cache *c, __u32 tid, const __u64 comm[2])
{
	struct hs_comm_slot *s = comm_slot(c, tid);
	s->tid = tid;
	s->comm[0] = comm[0];
	s->comm[1] = comm[1];
}

static __always_inline __u32 ppid_of(struct task_struct *task)
{
	return BPF_CORE_READ(task, real_parent, tgid);
}

static __always_inline void fill_switch(struct hs_switch *e, bool preempt,
					struct task_struct *prev,
					struct task_struct *next,
					unsigned int prev_state)
{
	e->prev_tid = prev->pid;
	e->prev_pid = prev->tgid;
	e->next_tid = next->pid;
	e->next_pid = next->tgid;
	e->prev_state = prev_state;
	e->prev_exit_state = prev->exit_state;
	e->prev_prio = prev->prio;
	e->next_prio = next->prio;
	e->preempt = preempt;
}

static __always_inline int on_switch(void *ctx, bool preempt,
				     struct task_struct *prev,
				     struct task_struct *next,
				     unsigned int prev_state)
{
	/* The tracepoint runs while prev is still current, so its stacks are
	 * the ones bpf_get_stack reads: where prev blocked. */
	if (off_cpu_stacks && prev->pid != 0) {
		__u32 zero = 0;
		struct hs_switch_stack_copy *c = bpf_map_lookup_elem(&switch_scratch, &zero);
		if (!c)
			return 0;
		struct hs_switch_stack *e = &c->s;
		e->sw.h.ts = bpf_ktime_get_boot_ns();
		e->sw.h.kind = HS_KIND_SWITCH_STACK;
		e->sw.h.cpu = bpf_get_smp_processor_id();
		fill_switch(&e->sw, preempt, prev, next, prev_state);
		e->sw.comms_in_slots = 0;
		__builtin_memcpy(e->sw.prev_comm, prev->comm, HS_COMM_LEN);
		__builtin_memcpy(e->sw.next_comm, next->comm, HS_COMM_LEN);
		/* Skip this program, bpf_trace_run<N> and __traceiter_sched_switch:
		 * their addresses change with every load, and the stack would
		 * then too; the leaf is __schedule. */
		__u32 filled = hs_read_stack(ctx, &e->stack, 3);
		__u64 size = __builtin_offsetof(struct hs_switch_stack, stack.ips) + filled;
		if (size > sizeof(*e))
			size = sizeof(*e);
		if (copy_user_stack && e->stack.user_frames > 0 &&
		    hs_copy_user_stack(&c->regs, c->copy, HS_SWITCH_STACK_COPY,
				       HS_SWITCH_COPY_MIN)) {
			e->sw.h.kind = HS_KIND_SWITCH_STACK_COPY;
			size = __builtin_offsetof(struct hs_switch_stack_copy, copy) +
			       c->regs.copy_bytes;
			if (size > sizeof(*c))
				size = sizeof(*c);
		}
		HS_OUTPUT(HS_CPU_RING(sched_rings), sched_lost, c, size, HS_KIND_SWITCH_STACK, false);
		return 0;
	}
	void *ring = HS_CPU_RING(sched_rings);
	struct hs_comm_cache *slots = take_comm_slots();
	__u64 prev_comm[2], next_comm[2];
	__builtin_memcpy(prev_comm, prev->comm, HS_COMM_LEN);
	__builtin_memcpy(next_comm, next->comm, HS_COMM_LEN);
	struct hs_switch *e;
	if (slots && comm_in_slot(slots, prev->pid, prev_comm) &&
	    comm_in_slot(slots, next->pid, next_comm)) {
		e = HS_RESERVE_FIRST(ring, sched_lost, struct hs_switch,
				     __builtin_offsetof(struct hs_switch, prev_comm),
				     HS_KIND_SWITCH);
		if (e) {
			fill_switch(e, preempt, prev, next, prev_state);
			e->comms_in_slots = 0;
			e->h.kind = HS_KIND_SWITCH_NAMED_BEFORE;
		}
	} else {
		e = HS_RESERVE(ring, sched_lost, struct hs_switch, HS_KIND_SWITCH);
		if (e) {
			fill_switch(e, preempt, prev, next, prev_state);
			__builtin_memcpy(e->prev_comm, prev_comm, HS_COMM_LEN);
			__builtin_memcpy(e->next_comm, next_comm, HS_COMM_LEN);
			/* Only once the record is sure to be sent. */
			e->comms_in_slots = slots != 0;
			if (slots) {
				put_comm_in_slot(slots, prev->pid, prev_comm);
				put_comm_in_slot(slots, next->pid, next_comm);
			}
		}
	}
	if (slots)
		slots->busy = 0;
	if (e)
		HS_SUBMIT(ring, e);
	return 0;
}

/* 5.18 and later: the state prev left in, as __schedule read it. */
SEC("tp_btf/sched_switch")
int BPF_PROG(hs_sched_switch__v4, bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
{
	return on_switch(ctx, preempt, prev, next, prev_state);
}

/* Before 5.14 a task's state is `state`, then `__state`. */
struct task_struct___state_long {
	long state;
} __attribute__((preserve_access_index));

/* Before 5.18 the tracepoint passes no state: read it from prev, as the
 * kernel's own trace event then did (running when preempted). A wakeup
 * that lands between __schedule's read and this one makes a sleep read as
 * running: the race that 5.18's argument closed. Untested here: these
 * machines can fetch no kernel older than 6.1. */
SEC("tp_btf/sched_switch")
int BPF_PROG(hs_sched_switch__v3, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	unsigned int state = 0;
	if (!preempt) {
		if (bpf_core_field_exists(prev->__state)) {
			state = BPF_CORE_READ(prev, __state);
		} else {
			struct task_struct___state_long *old = (void *)prev;
			state = (unsigned int)BPF_CORE_READ(old, state);
		}
	}
	return on_switch(ctx, preempt, prev, next, state);
}

/* Who woke each task, noted at sched_waking and read at sched_wakeup.
 * sched_waking runs in the waker's context; sched_wakeup often does not:
 * a wakeup queued to an idle CPU is finished there, by the idle task or an
 * interrupt, so `current` at sched_wakeup names pid 0 for most wakeups of
 * a ping-pong on an idle machine. */
struct hs_waker {
	__u32 tid;
	__u32 pid;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct hs_waker);
} wakers SEC(".maps");

SEC("tp_btf/sched_waking")
int BPF_PROG(hs_sched_waking, struct task_struct *p)
{
	struct hs_waker *w = bpf_task_storage_get(&wakers, p, 0,
						  BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (w) {
		__u64 waker = bpf_get_current_pid_tgid();
		w->tid = (__u32)waker;
		w->pid = waker >> 32;
	}
	return 0;
}

static __always_inline int emit_wakeup(struct task_struct *p, __u8 new_task)
{
	void *ring = HS_CPU_RING(sched_rings);
	struct hs_comm_cache *slots = take_comm_slots();
	__u64 comm[2];
	__builtin_memcpy(comm, p->comm, HS_COMM_LEN);
	bool named_before = slots && comm_in_slot(slots, p->pid, comm);
	struct hs_wakeup *e;
	if (named_before) {
		e = HS_RESERVE_FIRST(ring, sched_lost, struct hs_wakeup,
				     __builtin_offsetof(struct hs_wakeup, comm),
				     HS_KIND_WAKEUP);
		if (e) {
			e->h.kind = HS_KIND_WAKEUP_NAMED_BEFORE;
			e->comm_in_slot = 0;
		}
	} else {
		e = HS_RESERVE(ring, sched_lost, struct hs_wakeup, HS_KIND_WAKEUP);
		if (e) {
			__builtin_memcpy(e->comm, comm, HS_COMM_LEN);
			/* Only once the record is sure to be sent. */
			e->comm_in_slot = slots != 0;
			if (slots)
				put_comm_in_slot(slots, p->pid, comm);
		}
	}
	if (slots)
		slots->busy = 0;
	if (!e)
		return 0;
	/* A new task is woken by its parent, which is current; so is any task
	 * whose waking went unseen (the storage could not be had). */
	struct hs_waker *w = new_task ? 0 : bpf_task_storage_get(&wakers, p, 0, 0);
	__u64 current = bpf_get_current_pid_tgid();
	e->tid = p->pid;
	e->pid = p->tgid;
	e->target_cpu = BPF_CORE_READ(p, thread_info.cpu);
	e->waker_tid = w ? w->tid : (__u32)current;
	e->waker_pid = w ? w->pid : current >> 32;
	e->prio = p->prio;
	e->new_task = new_task;
	HS_SUBMIT(ring, e);
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(hs_sched_wakeup, struct task_struct *p)
{
	return emit_wakeup(p, 0);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(hs_sched_wakeup_new, struct task_struct *p)
{
	return emit_wakeup(p, 1);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(hs_sched_process_fork, struct task_struct *parent,
	     struct task_struct *child)
{
	void *ring = HS_CPU_RING(sched_rings);
	struct hs_fork *e =
		HS_RESERVE(ring, sched_lost, struct hs_fork, HS_KIND_FORK);
	if (!e)
		return 0;
	e->parent_tid = parent->pid;
	e->parent_pid = parent->tgid;
	e->child_tid = child->pid;
	e->child_pid = child->tgid;
	e->child_ppid = ppid_of(child);
	__builtin_memcpy(e->comm, child->comm, HS_COMM_LEN);
	HS_SUBMIT(ring, e);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(hs_sched_process_exec, struct task_struct *p, pid_t old_tid,
	     struct linux_binprm *bprm)
{
	void *ring = HS_CPU_RING(sched_rings);
	struct hs_exec *e =
		HS_RESERVE(ring, sched_lost, struct hs_exec, HS_KIND_EXEC);
	if (!e)
		return 0;
	e->tid = p->pid;
	e->pid = p->tgid;
	e->ppid = ppid_of(p);
	e->old_tid = old_tid;
	__builtin_memcpy(e->comm, p->comm, HS_COMM_LEN);

	/* argv was just copied onto the new stack: it is resident, and current is p. */
	unsigned long arg_start = BPF_CORE_READ(p, mm, arg_start);
	unsigned long arg_end = BPF_CORE_READ(p, mm, arg_end);
	unsigned long len = arg_end > arg_start ? arg_end - arg_start : 0;
	e->cmdline_truncated = len > HS_CMDLINE_LEN;
	if (len > HS_CMDLINE_LEN)
		len = HS_CMDLINE_LEN;
	if (bpf_probe_read_user(e->cmdline, len, (void *)arg_start) != 0)
		len = 0;
	e->cmdline_len = len;
	HS_SUBMIT(ring, e);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(hs_sched_process_exit, struct task_struct *p)
{
	void *ring = HS_CPU_RING(sched_rings);
	struct hs_exit *e =
		HS_RESERVE(ring, sched_lost, struct hs_exit, HS_KIND_EXIT);
	if (!e)
		return 0;
	e->tid = p->pid;
	e->pid = p->tgid;
	e->ppid = ppid_of(p);
	e->exit_code = p->exit_code;
	__builtin_memcpy(e->comm, p->comm, HS_COMM_LEN);
	HS_SUBMIT(ring, e);
	return 0;
}

/* Anchors: they put the wire structs into the object's BTF, so libbpf-cargo
 * generates the Rust types from this one definition. Never read. */
struct hs_switch hs_anchor_switch = {};
struct hs_wakeup hs_anchor_wakeup = {};
struct hs_fork hs_anchor_fork = {};
struct hs_exec hs_anchor_exec = {};
struct hs_exit hs_anchor_exit = {};
struct hs_switch_stack hs_anchor_switch_stack = {};
struct hs_switch_stack_copy hs_anchor_switch_stack_copy = {};
enum hs_kind hs_anchor_kind = HS_KIND_SWITCH;
enum hs_comm_slots hs_anchor_comm_slots = HS_COMM_SLOTS;
