// SPDX-License-Identifier: GPL-2.0
/*
 * The `faults` event group: page faults (exceptions:page_fault_user and
 * page_fault_kernel, x86), one compact record per sampled fault.
 *
 * Faults come by the million under memory pressure, so user space sets
 * `fault_sample` before load and each CPU sends one fault in N (1 = all).
 * The counter is per CPU: no atomics, no cache line shared between CPUs, and
 * a tp_btf program runs with migration disabled so the CPU cannot change
 * under it. The recording stores N so counts scale back.
 *
 * A fault is handled in the context of the task that faulted, so `current`
 * is the faulting thread: bpf_get_current_pid_tgid() and
 * bpf_get_current_comm() are exact, no task_struct walk needed.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "emit.h"

char LICENSE[] SEC("license") = "GPL";

/* One fault in `fault_sample` per CPU is sent; set before load. */
const volatile __u32 fault_sample = 1;

/* Filled and sized by user space before attach (--ring-size). */
HS_CPU_RINGS(fault_rings);

/* Records that found the ring full, per CPU and per kind. */
HS_LOSS_MAP(fault_lost);

/* Faults seen since the last one sent, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} fault_skipped SEC(".maps");

static __always_inline int emit_fault(unsigned long address, struct pt_regs *regs,
				      unsigned long error_code, __u8 kernel)
{
	if (fault_sample > 1) {
		__u32 zero = 0;
		__u32 *seen = bpf_map_lookup_elem(&fault_skipped, &zero);
		if (!seen)
			return 0;
		if (++*seen < fault_sample)
			return 0;
		*seen = 0;
	}
	void *ring = HS_CPU_RING(fault_rings);
	struct hs_fault *e =
		HS_RESERVE(ring, fault_lost, struct hs_fault, HS_KIND_FAULT);
	if (!e)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	e->address = address;
	e->ip = BPF_CORE_READ(regs, ip);
	e->tid = (__u32)id;
	e->pid = id >> 32;
	e->error_code = error_code;
	e->kernel = kernel;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	HS_SUBMIT(ring, e);
	return 0;
}

SEC("tp_btf/page_fault_user")
int BPF_PROG(hs_page_fault_user, unsigned long address, struct pt_regs *regs,
	     unsigned long error_code)
{
	return emit_fault(address, regs, error_code, 0);
}

SEC("tp_btf/page_fault_kernel")
int BPF_PROG(hs_page_fault_kernel, unsigned long address, struct pt_regs *regs,
	     unsigned long error_code)
{
	return emit_fault(address, regs, error_code, 1);
}

/* Anchors: they put the wire structs into the object's BTF, so libbpf-cargo
 * generates the Rust types from this one definition. Never read. */
struct hs_fault hs_anchor_fault = {};
enum hs_kind hs_anchor_kind = HS_KIND_FAULT;
