// SPDX-License-Identifier: GPL-2.0
/*
 * The `tasks` event group's one program: every process's final counters,
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
	struct hs_task_exit *e = HS_RESERVE(task_events, task_lost,
					    struct hs_task_exit, HS_KIND_TASK_EXIT);
	if (!e)
		return 0;
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
	HS_SUBMIT(task_events, e);
	return 0;
}

/* Anchor: puts the wire struct into the object's BTF for libbpf-cargo. */
struct hs_task_exit hs_anchor_task_exit = {};
enum hs_kind hs_anchor_kind = HS_KIND_TASK_EXIT;
