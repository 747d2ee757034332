// SPDX-License-Identifier: GPL-2.0
/*
 * The `cpu` event group: a perf event (cpu-clock, one per CPU, opened by
 * user space at --frequency) runs this program on every tick; it records
 * the interrupted thread with its kernel and user stacks. The idle task is
 * skipped: an idle CPU has nothing to profile. So is the recorder itself:
 * naming its own frames would map and parse its own (large) binary's debug
 * info, which under a switch storm tripled its memory; its cost is in the
 * `counter` table (source `recorder`) instead. With copy_user_stack (the
 * recorder's --unwind dwarf), a sample of a thread with a user stack
 * carries the user registers and the top of the stack as well, for the
 * recorder to unwind code built without frame pointers.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "stack.h"

char LICENSE[] SEC("license") = "GPL";

/* The recorder's own process id, set by user space before load. */
const volatile __u32 self_tgid = 0;

/* Sized by user space before load (--ring-size). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} stack_events SEC(".maps");

/* Records that found the ring full, per CPU and per kind. */
HS_LOSS_MAP(stack_lost);

/* Set by user space before load (--unwind): copy the top of the user
 * stack with each sample, for unwinding by call frame information. */
const volatile bool copy_user_stack = false;

/* Address spaces sampled so far: a process and its mm_struct (which
 * execve replaces; a freed one's address is soon another process's, so
 * the pid goes with it), with its samples so far. The first few samples
 * of one (a new process, or one that just ran execve) wake the recorder,
 * so that it reads the process's memory map then, while a short-lived
 * process still has one, and not at its next drain (up to 100 ms later),
 * when /proc/<pid>/maps is gone and every user frame would stay unnamed.
 * A few, not one: the first often comes while the loader is still mapping
 * the libraries the next ones run in. */
#define HS_WAKING_SAMPLES 8
struct hs_address_space {
	__u64 mm;
	__u32 tgid;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct hs_address_space);
	__type(value, __u8);
} sampled_mms SEC(".maps");

/* A record is built here, then only its filled part is copied to the ring:
 * too big for the BPF stack, and most of `ips` and `copy` stays unused. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hs_sample_copy);
} sample_scratch SEC(".maps");

SEC("perf_event")
int hs_cpu_sample(struct bpf_perf_event_data *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if ((__u32)pid_tgid == 0 || (pid_tgid >> 32) == self_tgid)
		return 0;
	__u32 zero = 0;
	struct hs_sample_copy *c = bpf_map_lookup_elem(&sample_scratch, &zero);
	if (!c)
		return 0;
	struct hs_sample *e = &c->s;
	e->h.ts = bpf_ktime_get_boot_ns();
	e->h.kind = HS_KIND_SAMPLE;
	e->h.cpu = bpf_get_smp_processor_id();
	e->tid = (__u32)pid_tgid;
	e->pid = pid_tgid >> 32;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	__u32 filled = hs_read_stack(ctx, &e->stack, 0);
	__u64 size = __builtin_offsetof(struct hs_sample, stack.ips) + filled;
	if (size > sizeof(*e))
		size = sizeof(*e);
	/* A thread with a user stack (not a kernel thread): its user
	 * registers are the ones saved on entry to the kernel, whether the
	 * tick interrupted it in user mode or in a system call. */
	if (copy_user_stack && e->stack.user_frames > 0 &&
	    hs_copy_user_stack(&c->regs, c->copy, HS_STACK_COPY, HS_STACK_COPY)) {
		e->h.kind = HS_KIND_SAMPLE_COPY;
		size = __builtin_offsetof(struct hs_sample_copy, copy) + c->regs.copy_bytes;
		if (size > sizeof(*c))
			size = sizeof(*c);
	}
	bool young = false;
	if (e->stack.user_frames > 0) {
		struct task_struct *task = (struct task_struct *)bpf_get_current_task();
		struct hs_address_space space = {
			.mm = (__u64)BPF_CORE_READ(task, mm),
			.tgid = e->pid,
		};
		__u8 *seen = space.mm ? bpf_map_lookup_elem(&sampled_mms, &space) : 0;
		if (space.mm && !seen) {
			__u8 first = 1;
			bpf_map_update_elem(&sampled_mms, &space, &first, BPF_ANY);
			young = true;
		} else if (seen && *seen < HS_WAKING_SAMPLES) {
			*seen += 1;
			young = true;
		}
	}
	HS_OUTPUT(&stack_events, stack_lost, c, size, HS_KIND_SAMPLE, young);
	return 0;
}

/* Anchors: they put the wire structs into the object's BTF, so libbpf-cargo
 * generates the Rust types from this one definition. Never read. */
struct hs_sample hs_anchor_sample = {};
struct hs_sample_copy hs_anchor_sample_copy = {};
enum hs_kind hs_anchor_kind = HS_KIND_SAMPLE_COPY;
