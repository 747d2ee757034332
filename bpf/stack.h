/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Reading the current task's kernel and user stacks into a `struct hs_stack`
 * and sending only the filled part: most stacks are a few frames deep, and a
 * fixed-size record would carry 1 KB of zeros per event.
 */
#ifndef HINDSIGHT_STACK_H
#define HINDSIGHT_STACK_H

#include "emit.h"
#include <bpf/bpf_core_read.h>

#define HS_STACK_BYTES (HS_STACK_DEPTH * sizeof(__u64))

/* Fills `s` from `ctx` (a perf-event or tracing context); returns the bytes
 * of `ips` filled. The user stack goes right after the kernel one.
 * `kernel_skip` leaf frames are left out of the kernel stack (0-255): a
 * tracepoint program sees itself and the tracepoint's plumbing there. */
static __always_inline __u32 hs_read_stack(void *ctx, struct hs_stack *s, __u64 kernel_skip)
{
	long kernel_bytes = bpf_get_stack(ctx, s->ips, HS_STACK_BYTES,
					  kernel_skip & BPF_F_SKIP_FIELD_MASK);
	if (kernel_bytes < 0)
		kernel_bytes = 0;
	__u32 kernel_frames = (__u32)kernel_bytes / sizeof(__u64);
	if (kernel_frames > HS_STACK_DEPTH)
		kernel_frames = HS_STACK_DEPTH;
	long user_bytes = bpf_get_stack(ctx, &s->ips[kernel_frames], HS_STACK_BYTES,
					BPF_F_USER_STACK);
	if (user_bytes < 0)
		user_bytes = 0;
	__u32 user_frames = (__u32)user_bytes / sizeof(__u64);
	if (user_frames > HS_STACK_DEPTH)
		user_frames = HS_STACK_DEPTH;
	s->kernel_frames = kernel_frames;
	s->user_frames = user_frames;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	s->start_code = BPF_CORE_READ(task, mm, start_code);
	s->start_stack = BPF_CORE_READ(task, mm, start_stack);
	return (kernel_frames + user_frames) * sizeof(__u64);
}

#define HS_PAGE 4096

/*
 * Fills `regs` with the current task's user registers (saved on entry to
 * the kernel, whether it entered by an interrupt or a system call) and
 * copies its user stack from the stack pointer up into `copy` (`max`
 * bytes long): the rest of that page, then whole pages while fewer than
 * `min` bytes are copied and more fit, up to the first page that cannot
 * be read (the top of the stack). Page by page, because one read that runs
 * past the stack's end fails whole. Returns the bytes copied (also in
 * regs->copy_bytes); `max` and `min` are constants.
 */
static __always_inline __u32 hs_copy_user_stack(struct hs_user_regs *regs, __u8 *copy,
						__u32 max, __u32 min)
{
	struct pt_regs *user = bpf_task_pt_regs(bpf_get_current_task_btf());
	regs->ip = BPF_CORE_READ(user, ip);
	regs->sp = BPF_CORE_READ(user, sp);
	regs->bp = BPF_CORE_READ(user, bp);
	regs->copy_bytes = 0;
	__u64 sp = regs->sp;
	__u64 first = HS_PAGE - (sp & (HS_PAGE - 1));
	if (first > HS_PAGE || first > max)
		return 0;
	if (bpf_probe_read_user(copy, first, (const void *)sp))
		return 0;
	__u32 copied = first;
#pragma unroll
	for (int page = 0; page < HS_STACK_COPY / HS_PAGE - 1; page++) {
		__u64 at = first + (__u64)page * HS_PAGE;
		if (at >= min || at + HS_PAGE > max)
			break;
		if (bpf_probe_read_user(&copy[at], HS_PAGE, (const void *)(sp + at)))
			break;
		copied = at + HS_PAGE;
	}
	regs->copy_bytes = copied;
	return copied;
}

/*
 * Sends the first `size` bytes of `rec` (a per-CPU scratch record) to
 * `ring` (as HS_RESERVE takes it), or counts one loss for `kind_` in
 * `lost_map`; wakes the recorder when `wake_now`, else as HS_SUBMIT does
 * (HS_WAKE_FLAG).
 */
#define HS_OUTPUT(ring, lost_map, rec, size, kind_, wake_now)                  \
	do {                                                                   \
		void *__ring = (ring);                                         \
		if (!__ring ||                                                 \
		    bpf_ringbuf_output(__ring, (rec), (size),                  \
				       HS_WAKE_FLAG(__ring, ((struct hs_header *)(rec))->ts, \
						    wake_now)))                \
			HS_COUNT_LOSS(lost_map, kind_);                        \
	} while (0)

#endif /* HINDSIGHT_STACK_H */
