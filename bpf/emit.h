/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared by every hindsight BPF program: the ring buffer reserve that
 * counts what it could not send, so a full ring is a recorded loss and never
 * a silent one.
 */
#ifndef HINDSIGHT_EMIT_H
#define HINDSIGHT_EMIT_H

#include "events.h"

/*
 * Count one lost record of `kind_` on this CPU in `lost_map` (a per-CPU
 * array of HS_LOSS_SLOTS struct hs_loss): in this second's slot, then in
 * the totals, in that order, so that whatever the recorder sees in the
 * totals it also finds in a second's slot read after them (unless reused).
 */
#define HS_COUNT_LOSS(lost_map, kind_)                                         \
	do {                                                                   \
		__u32 __kind = (kind_);                                        \
		__u64 __second = bpf_ktime_get_boot_ns() / 1000000000ULL;      \
		__u32 __slot = __second % HS_LOSS_SECONDS;                     \
		struct hs_loss *__l = bpf_map_lookup_elem(&(lost_map), &__slot); \
		if (__l && __kind < HS_KIND_MAX) {                             \
			if (__l->second != __second) {                         \
				for (int __i = 0; __i < HS_KIND_MAX; __i++)     \
					__l->count[__i] = 0;                   \
				__l->second = __second;                        \
			}                                                      \
			__l->count[__kind] += 1;                               \
		}                                                              \
		__u32 __totals = HS_LOSS_TOTAL;                                \
		__l = bpf_map_lookup_elem(&(lost_map), &__totals);             \
		if (__l && __kind < HS_KIND_MAX)                               \
			__l->count[__kind] += 1;                               \
	} while (0)

/* The loss counters of one program group (see struct hs_loss). */
#define HS_LOSS_MAP(name)                                                      \
	struct {                                                               \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);                       \
		__uint(max_entries, HS_LOSS_SLOTS);                            \
		__type(key, __u32);                                            \
		__type(value, struct hs_loss);                                 \
	} name SEC(".maps")

/*
 * The prototype of every ring a group's HS_CPU_RINGS holds. User space makes
 * the rings themselves, sized from --ring-size, and the kernel does not
 * compare a ring's size with its prototype's.
 */
struct hs_ring {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 16);
};

/*
 * A group's rings, looked up by the CPU a record is made on: one ring for
 * each CPU, or for each small group of CPUs when --ring-size cannot give
 * every CPU a ring of its own (user space puts the same ring at several
 * CPUs' slots, and sizes the array to the possible CPUs). A ring shared by
 * every CPU serialized them all on its spinlock and producer position: a
 * second CPU made each record about 117 ns dearer (BENCHMARKS.md).
 */
#define HS_CPU_RINGS(name)                                                     \
	struct {                                                               \
		__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);                      \
		__uint(max_entries, 1);                                        \
		__type(key, __u32);                                            \
		__array(values, struct hs_ring);                               \
	} name SEC(".maps")

/* This CPU's ring in `rings` (an HS_CPU_RINGS), or NULL if it has none. */
#define HS_CPU_RING(rings)                                                     \
	({                                                                     \
		__u32 __cpu = bpf_get_smp_processor_id();                      \
		(void *)bpf_map_lookup_elem(&(rings), &__cpu);                 \
	})

/*
 * Reserve a record of `type` in `ring` (a ring's address, NULL counting as a
 * full ring), fill its header, or count one loss for `kind_` in `lost_map`
 * (HS_COUNT_LOSS).
 */
#define HS_RESERVE(ring, lost_map, type, kind_)                                \
	HS_RESERVE_FIRST(ring, lost_map, type, sizeof(type), kind_)

/*
 * HS_RESERVE of only the first `size` bytes of a `type` (a constant, at most
 * sizeof(type)): the fields past it are neither written nor sent.
 */
#define HS_RESERVE_FIRST(ring, lost_map, type, size, kind_)                    \
	({                                                                     \
		void *__ring = (ring);                                         \
		type *__rec = __ring ? bpf_ringbuf_reserve(__ring, (size), 0)  \
				     : (type *)0;                              \
		if (__rec) {                                                   \
			__rec->h.ts = bpf_ktime_get_boot_ns();                 \
			__rec->h.kind = (kind_);                               \
			__rec->h.cpu = bpf_get_smp_processor_id();             \
		} else {                                                       \
			HS_COUNT_LOSS(lost_map, kind_);                        \
		}                                                              \
		__rec;                                                         \
	})

/*
 * The wakeup flag for a record about to go to `ring`: none, unless
 * `wake_now` or the ring is a quarter full. A wakeup per event would make
 * the recorder itself the busiest switcher on the machine (each wakeup is
 * a context switch we then record); it drains on its own timer instead,
 * and is woken early only under load.
 *
 * The fill is read for about one record in HS_WAKE_EVERY, those whose
 * boot-clock nanoseconds (`ts`, the record's header) are a multiple of it:
 * the low bits of a nanosecond clock are jitter, and a coarse clock, whose
 * readings all are, falls back to reading it for every record. So a ring
 * past a quarter full wakes the recorder a few records later, and the two
 * bpf_ringbuf_query calls are saved on the others, at the cost of one
 * test. (Counting records per CPU in a map instead was no cheaper than
 * querying on every record: bench/bpf_cost.sh, BENCHMARKS.md.)
 */
#define HS_WAKE_EVERY 64
#define HS_WAKE_FLAG(ring, ts, wake_now)                                       \
	((wake_now) || (((ts) & (HS_WAKE_EVERY - 1)) == 0 &&                   \
			bpf_ringbuf_query((ring), BPF_RB_AVAIL_DATA) >=        \
				bpf_ringbuf_query((ring), BPF_RB_RING_SIZE) / 4) \
		 ? BPF_RB_FORCE_WAKEUP                                         \
		 : BPF_RB_NO_WAKEUP)

/* Submit a record reserved with HS_RESERVE (see HS_WAKE_FLAG). */
#define HS_SUBMIT(ring, rec)                                                   \
	bpf_ringbuf_submit((rec), HS_WAKE_FLAG(ring, (rec)->h.ts, 0))

#endif /* HINDSIGHT_EMIT_H */
