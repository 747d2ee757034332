// SPDX-License-Identifier: GPL-2.0
/*
 * The `numa` event group: tasks the scheduler moves, swaps or keeps between
 * NUMA nodes (sched:sched_move_numa, sched_swap_numa, sched_stick_numa) and
 * page migrations (migrate:mm_migrate_pages), one hs_numa record each.
 *
 * Nodes are computed here, as the tracepoints' own format does with
 * cpu_to_node(), from `numa_cpu_node`: user space fills it from
 * /sys/devices/system/node/node<N>/cpulist after load and before attach, so
 * every record carries its nodes and the decoder stays a pure function of
 * the bytes. (Reading the kernel's per-CPU `numa_node` through a typed
 * __ksym would need CONFIG_KALLSYMS_ALL, which common kernels, this one
 * included, lack: the load then fails with "failed to find the address for
 * kernel symbol".) The CPU-to-node mapping is fixed at boot.
 *
 * mm_migrate_pages has gained arguments over time (4, then 7 with thp_*,
 * then 8 with large_folio_split). There is one program per layout, named
 * `hs_mm_migrate_pages__v<N>`; user space loads only the one whose N matches
 * the kernel's BTF. (One program choosing the layout at run time does not
 * pass the verifier: clang folds the branches into a variable ctx offset.)
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "emit.h"

char LICENSE[] SEC("license") = "GPL";

/* Node of each possible CPU, plus one (0: unknown); sized and filled by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32);
} numa_cpu_node SEC(".maps");

/* Sized by user space before load: a fixed 256 KiB (NUMA_RING_SIZE in
 * recorder.rs), not --ring-size: moves and migrations are rare. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} numa_events SEC(".maps");

/* Records that found the ring full, per CPU and per kind. */
HS_LOSS_MAP(numa_lost);

static __always_inline __s32 node_of(int cpu)
{
	if (cpu < 0)
		return -1;
	__u32 key = cpu;
	__u32 *node = bpf_map_lookup_elem(&numa_cpu_node, &key);
	return node && *node ? (__s32)*node - 1 : -1;
}

static __always_inline int emit_task_move(__u32 event, struct task_struct *src,
					  int src_cpu, struct task_struct *dst,
					  int dst_cpu)
{
	struct hs_numa *e =
		HS_RESERVE(&numa_events, numa_lost, struct hs_numa, HS_KIND_NUMA);
	if (!e)
		return 0;
	e->event = event;
	e->tid = BPF_CORE_READ(src, pid);
	e->pid = BPF_CORE_READ(src, tgid);
	BPF_CORE_READ_INTO(&e->comm, src, comm);
	e->src_cpu = src_cpu;
	e->dst_cpu = dst_cpu;
	e->src_nid = node_of(src_cpu);
	e->dst_nid = node_of(dst_cpu);
	/* stick_numa may pass no partner (the verifier knows: null-check it). */
	e->partner_tid = dst ? BPF_CORE_READ(dst, pid) : 0;
	e->partner_pid = dst ? BPF_CORE_READ(dst, tgid) : 0;
	e->reason = HS_MR_UNKNOWN;
	e->pages_succeeded = 0;
	e->pages_failed = 0;
	HS_SUBMIT(&numa_events, e);
	return 0;
}

SEC("tp_btf/sched_move_numa")
int BPF_PROG(hs_sched_move_numa, struct task_struct *tsk, int src_cpu, int dst_cpu)
{
	return emit_task_move(HS_NUMA_MOVE, tsk, src_cpu, NULL, dst_cpu);
}

SEC("tp_btf/sched_swap_numa")
int BPF_PROG(hs_sched_swap_numa, struct task_struct *src_tsk, int src_cpu,
	     struct task_struct *dst_tsk, int dst_cpu)
{
	return emit_task_move(HS_NUMA_SWAP, src_tsk, src_cpu, dst_tsk, dst_cpu);
}

SEC("tp_btf/sched_stick_numa")
int BPF_PROG(hs_sched_stick_numa, struct task_struct *src_tsk, int src_cpu,
	     struct task_struct *dst_tsk, int dst_cpu)
{
	return emit_task_move(HS_NUMA_STICK, src_tsk, src_cpu, dst_tsk, dst_cpu);
}

/* The kernel's migrate_reason value in our stable numbering (events.h). */
static __always_inline __u32 hs_reason(int reason)
{
#define HS_MAP_REASON(kernel_name, ours)                                        \
	if (bpf_core_enum_value_exists(enum migrate_reason, kernel_name) &&      \
	    reason == bpf_core_enum_value(enum migrate_reason, kernel_name))     \
		return ours;
	HS_MAP_REASON(MR_COMPACTION, HS_MR_COMPACTION)
	HS_MAP_REASON(MR_MEMORY_FAILURE, HS_MR_MEMORY_FAILURE)
	HS_MAP_REASON(MR_MEMORY_HOTPLUG, HS_MR_MEMORY_HOTPLUG)
	HS_MAP_REASON(MR_SYSCALL, HS_MR_SYSCALL)
	HS_MAP_REASON(MR_MEMPOLICY_MBIND, HS_MR_MEMPOLICY_MBIND)
	HS_MAP_REASON(MR_NUMA_MISPLACED, HS_MR_NUMA_MISPLACED)
	HS_MAP_REASON(MR_CONTIG_RANGE, HS_MR_CONTIG_RANGE)
	HS_MAP_REASON(MR_LONGTERM_PIN, HS_MR_LONGTERM_PIN)
	HS_MAP_REASON(MR_DEMOTION, HS_MR_DEMOTION)
	HS_MAP_REASON(MR_DAMON, HS_MR_DAMON)
#undef HS_MAP_REASON
	return HS_MR_UNKNOWN;
}

static __always_inline int emit_migrate(unsigned long succeeded,
					unsigned long failed, int reason)
{
	struct hs_numa *e =
		HS_RESERVE(&numa_events, numa_lost, struct hs_numa, HS_KIND_NUMA);
	if (!e)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	e->event = HS_NUMA_MIGRATE;
	e->tid = (__u32)id;
	e->pid = id >> 32;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	e->src_cpu = -1;
	e->dst_cpu = -1;
	e->src_nid = -1;
	e->dst_nid = -1;
	e->partner_tid = 0;
	e->partner_pid = 0;
	e->reason = hs_reason(reason);
	e->pages_succeeded = succeeded;
	e->pages_failed = failed;
	HS_SUBMIT(&numa_events, e);
	return 0;
}

/* 6.13 and later. */
SEC("tp_btf/mm_migrate_pages")
int BPF_PROG(hs_mm_migrate_pages__v8, unsigned long succeeded, unsigned long failed,
	     unsigned long thp_succeeded, unsigned long thp_failed,
	     unsigned long thp_split, unsigned long large_folio_split,
	     enum migrate_mode mode, int reason)
{
	return emit_migrate(succeeded, failed, reason);
}

/* 5.10 to 6.12. */
SEC("tp_btf/mm_migrate_pages")
int BPF_PROG(hs_mm_migrate_pages__v7, unsigned long succeeded, unsigned long failed,
	     unsigned long thp_succeeded, unsigned long thp_failed,
	     unsigned long thp_split, enum migrate_mode mode, int reason)
{
	return emit_migrate(succeeded, failed, reason);
}

/* Before 5.10. */
SEC("tp_btf/mm_migrate_pages")
int BPF_PROG(hs_mm_migrate_pages__v4, unsigned long succeeded, unsigned long failed,
	     enum migrate_mode mode, int reason)
{
	return emit_migrate(succeeded, failed, reason);
}

/* Anchors: they put the wire structs into the object's BTF, so libbpf-cargo
 * generates the Rust types from this one definition. Never read. */
struct hs_numa hs_anchor_numa = {};
enum hs_kind hs_anchor_kind = HS_KIND_NUMA;
enum hs_numa_event hs_anchor_numa_event = HS_NUMA_MOVE;
enum hs_migrate_reason hs_anchor_migrate_reason = HS_MR_UNKNOWN;
