// SPDX-License-Identifier: GPL-2.0
/*
 * The `tasks` event group: every process's final counters,
 * the way atop's process accounting sees a process that ended between two
 * snapshots of /proc.
 *
 * Why sched_process_free and not sched_process_exit: a thread's counters
 * are folded into signal_struct when it is released, not when it exits, and
 * when the threads of a process exit together (exit_group) the last one to
 * pass exit cannot tell which of the others have been folded in yet. A
 * leader is released last, once every other thread of its group has been
 * (and it folds its own counters in too), so when it is freed signal_struct
 * holds exactly the process's totals: the sums /proc/<pid>/stat and
 * getrusage make. The leader is freed once it has been reaped, which a
 * parent does at once; a zombie left unreaped still shows in the /proc
 * snapshots.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "emit.h"

char LICENSE[] SEC("license") = "GPL";

/* A few thousand records: processes end far less often than that per drain. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 << 10);
} task_events SEC(".maps");

/* Records that found the ring full, per CPU and per kind. */
HS_LOSS_MAP(task_lost);

/*
 * When each process ended: its last thread's exit, which is when atop's
 * process accounting writes its record. The free that reports the final
 * counters runs from an RCU callback after the parent reaps, normally
 * milliseconds later but seconds later when RCU's kthreads are starved
 * (CPU hogs at nice -20 were seen to hold it back past a recorder's stop):
 * its record is dated by the exit, and a recorder that stops waits for the
 * frees of processes already reaped (the entries left here).
 * Keyed by the leader's task_struct, which cannot be reused before it is
 * freed (a pid can).
 */
struct hs_exited {
	__u64 exit_ts;	/* CLOCK_BOOTTIME, ns */
	__u32 pid;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct hs_exited);
} exited SEC(".maps");

SEC("tp_btf/sched_process_exit")
int BPF_PROG(hs_sched_process_exit, struct task_struct *p)
{
	/* The tracepoint comes after do_exit counted this thread out of the
	 * group: no live thread left means the process ends here. */
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	__u64 leader = (__u64)BPF_CORE_READ(p, group_leader);
	struct hs_exited e = {
		.exit_ts = bpf_ktime_get_boot_ns(),
		.pid = p->tgid,
	};
	/* Full (16384 processes ended and not yet freed): dated by its free. */
	bpf_map_update_elem(&exited, &leader, &e, BPF_ANY);
	return 0;
}

SEC("tp_btf/sched_process_free")
int BPF_PROG(hs_sched_process_free, struct task_struct *p)
{
	/* A thread, or a leader that a non-leader's execve replaced (it took
	 * that thread's tid): its counters are already in signal_struct. */
	if (p->pid != p->tgid)
		return 0;
	struct signal_struct *sig = p->signal;
	if (!sig)
		return 0;
	struct hs_task_exit *e = HS_RESERVE(&task_events, task_lost,
					    struct hs_task_exit, HS_KIND_TASK_EXIT);
	__u64 key = (__u64)p;
	struct hs_exited *ended = bpf_map_lookup_elem(&exited, &key);
	__u64 exit_ts = ended ? ended->exit_ts : 0;
	if (ended)
		bpf_map_delete_elem(&exited, &key);
	if (!e)
		return 0;
	if (exit_ts)
		e->h.ts = exit_ts;
	e->pid = p->tgid;
	e->ppid = BPF_CORE_READ(p, real_parent, tgid);
	e->start_boottime = p->start_boottime;
	e->utime = sig->utime;
	e->stime = sig->stime;
	e->runtime = sig->sum_sched_runtime;
	e->prev_utime = sig->prev_cputime.utime;
	e->prev_stime = sig->prev_cputime.stime;
	e->min_flt = sig->min_flt;
	e->maj_flt = sig->maj_flt;
	e->nvcsw = sig->nvcsw;
	e->nivcsw = sig->nivcsw;
	e->maxrss_pages = sig->maxrss;
	if (bpf_core_field_exists(sig->ioac.read_bytes)) {
		e->read_bytes = sig->ioac.read_bytes;
		e->write_bytes = sig->ioac.write_bytes;
		e->has_io = 1;
	} else {
		e->read_bytes = 0;
		e->write_bytes = 0;
		e->has_io = 0;
	}
	e->pad = 0;
	__builtin_memcpy(e->comm, p->comm, HS_COMM_LEN);
	HS_SUBMIT(&task_events, e);
	return 0;
}

/* Anchor: puts the wire struct into the object's BTF for libbpf-cargo. */
struct hs_task_exit hs_anchor_task_exit = {};
enum hs_kind hs_anchor_kind = HS_KIND_TASK_EXIT;
