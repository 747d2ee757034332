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
 * Reserve a record of `type` in `ring`, fill its header, or count one loss
 * for `kind_` on this CPU in `lost_map` (a per-CPU array indexed by kind).
 */
#define HS_RESERVE(ring, lost_map, type, kind_)                                \
	({                                                                     \
		type *__rec = bpf_ringbuf_reserve(&(ring), sizeof(type), 0);   \
		if (__rec) {                                                   \
			__rec->h.ts = bpf_ktime_get_boot_ns();                 \
			__rec->h.kind = (kind_);                               \
			__rec->h.cpu = bpf_get_smp_processor_id();             \
		} else {                                                       \
			__u32 __k = (kind_);                                   \
			__u64 *__n = bpf_map_lookup_elem(&(lost_map), &__k);   \
			if (__n)                                               \
				*__n += 1;                                     \
		}                                                              \
		__rec;                                                         \
	})

/*
 * Submit without waking the recorder, unless the ring is a quarter full.
 * A wakeup per event would make the recorder itself the busiest switcher
 * on the machine (each wakeup is a context switch we then record); it
 * drains on its own timer instead, and is woken early only under load.
 */
#define HS_SUBMIT(ring, rec)                                                   \
	do {                                                                   \
		__u64 __avail = bpf_ringbuf_query(&(ring), BPF_RB_AVAIL_DATA);  \
		__u64 __size = bpf_ringbuf_query(&(ring), BPF_RB_RING_SIZE);    \
		bpf_ringbuf_submit((rec), __avail >= __size / 4                \
						  ? BPF_RB_FORCE_WAKEUP        \
						  : BPF_RB_NO_WAKEUP);         \
	} while (0)

#endif /* HINDSIGHT_EMIT_H */
