// SPDX-License-Identifier: GPL-2.0
/*
 * The `cache` event group: page-cache accesses, misses and dirtied pages per
 * process, counted in the kernel and never sent event by event (filemap
 * tracepoints fire per read call and per page added: far too often to ship).
 * User space drains `cache_counts` once per interval (recorder/src/cache.rs).
 *
 * What is counted, in pages:
 * - accesses: mm_filemap_get_pages (a read(2)-style lookup of index..last)
 *   and mm_filemap_fault (one page);
 * - fault_around: mm_filemap_map_pages, the window start..end a fault mapped
 *   around itself. The tracepoint gives the window, not how many of its
 *   pages were cached and mapped, so these are kept apart from accesses;
 * - misses: mm_filemap_add_to_page_cache, 2^order pages per folio added
 *   (readahead, a read miss, or a write that extends a file);
 * - dirtied: writeback_dirty_folio, 2^order pages per folio going clean to
 *   dirty.
 * A miss is a page added, and an added page is also looked up, so hits are
 * accesses - misses. Readahead adds pages before anyone looks them up, so
 * within one interval misses can exceed accesses; both are kept as counted
 * (the report clamps hits at zero).
 *
 * A read that filemap_read serves in several batches calls
 * mm_filemap_get_pages once per batch with the same end and a start that
 * moves forward; counting each call's whole range would count the tail of a
 * large read many times over. Each thread remembers the last range it
 * counted (task storage): the first call counts the read's whole range, cut
 * at the end of the file, and its continuations count nothing.
 *
 * Cost measured on the 2-vCPU VM (warm 1 GiB file): dd bs=4k, one event per
 * read(2), +6-12 % (~0.1 us per read); dd bs=1M within noise (+-2 %).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "events.h"
#include "emit.h"

char LICENSE[] SEC("license") = "GPL";

/* log2 of the page size; set by user space before load. */
const volatile __u32 page_shift = 12;

/* Per process (tgid) since the last drain. Bounded: when full, a new
 * process's counts are dropped (and counted in cache_lost). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct hs_cache_counts);
} cache_counts SEC(".maps");

/* Updates that found cache_counts full, per CPU, at index HS_KIND_CACHE:
 * the same shape as every group's ring-loss counters. */
HS_LOSS_MAP(cache_lost);

/* The last get_pages range a thread counted: [index, last]. */
struct read_range {
	struct address_space *mapping;
	__u64 index;
	__u64 last;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct read_range);
} cache_last_read SEC(".maps");

static __always_inline struct hs_cache_counts *counts_of_current(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct hs_cache_counts *c = bpf_map_lookup_elem(&cache_counts, &tgid);
	if (!c) {
		struct hs_cache_counts zero = {};
		if (bpf_map_update_elem(&cache_counts, &tgid, &zero, BPF_NOEXIST) == -7 /* -E2BIG: the map is full */) {
			HS_COUNT_LOSS(cache_lost, HS_KIND_CACHE);
			return NULL;
		}
		c = bpf_map_lookup_elem(&cache_counts, &tgid);
		if (!c)
			return NULL;
	}
	bpf_get_current_comm(c->comm, sizeof(c->comm));
	return c;
}

static __always_inline void add_accesses(__u64 pages)
{
	struct hs_cache_counts *c = counts_of_current();
	if (c)
		__sync_fetch_and_add(&c->accesses, pages);
}

/* Older kernels keep a large folio's order in its own field. */
struct folio___order {
	unsigned char _folio_order;
} __attribute__((preserve_access_index));

/* Before 6.18 a folio's flags are a plain word (then memdesc_flags_t). */
struct folio___word_flags {
	unsigned long flags;
} __attribute__((preserve_access_index));

/* 2^order pages of a folio: order-0 unless the head flag says it is large. */
static __always_inline __u64 folio_pages(struct folio *folio)
{
	unsigned long flags = 0;
	struct folio___word_flags *word = (void *)folio;
	if (bpf_core_field_exists(word->flags))
		flags = BPF_CORE_READ(word, flags);
	else
		bpf_core_read(&flags, sizeof(flags), &folio->flags);
	__u32 head = bpf_core_enum_value(enum pageflags, PG_head);
	if (!(flags & (1UL << head)))
		return 1;
	__u32 order = 0;
	if (bpf_core_field_exists(folio->_flags_1)) {
		order = BPF_CORE_READ(folio, _flags_1) & 0xff;
	} else {
		struct folio___order *old = (void *)folio;
		if (bpf_core_field_exists(old->_folio_order))
			order = BPF_CORE_READ(old, _folio_order);
	}
	return 1ULL << (order & 31);
}

SEC("tp_btf/mm_filemap_get_pages")
int BPF_PROG(hs_mm_filemap_get_pages, struct address_space *mapping,
	     unsigned long index, unsigned long last_index)
{
	/* A read that asks past the end of the file looks up no such pages. */
	long long size = BPF_CORE_READ(mapping, host, i_size);
	if (size <= 0)
		return 0;
	unsigned long eof_last = (unsigned long long)(size - 1) >> (page_shift & 63);
	if (last_index > eof_last)
		last_index = eof_last;
	if (last_index < index)
		return 0;
	__u64 pages = last_index - index + 1;
	struct task_struct *task = bpf_get_current_task_btf();
	struct read_range *prev = bpf_task_storage_get(&cache_last_read, task, NULL,
						       BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (prev) {
		/* The next batch of the read already counted whole. */
		if (prev->mapping == mapping && prev->last == last_index &&
		    index > prev->index && index <= prev->last)
			pages = 0;
		prev->mapping = mapping;
		prev->index = index;
		prev->last = last_index;
	}
	if (pages)
		add_accesses(pages);
	return 0;
}

SEC("tp_btf/mm_filemap_map_pages")
int BPF_PROG(hs_mm_filemap_map_pages, struct address_space *mapping,
	     unsigned long start, unsigned long end)
{
	if (end < start)
		return 0;
	struct hs_cache_counts *c = counts_of_current();
	if (c)
		__sync_fetch_and_add(&c->fault_around, end - start + 1);
	return 0;
}

SEC("tp_btf/mm_filemap_fault")
int BPF_PROG(hs_mm_filemap_fault, struct address_space *mapping, unsigned long index)
{
	add_accesses(1);
	return 0;
}

SEC("tp_btf/mm_filemap_add_to_page_cache")
int BPF_PROG(hs_mm_filemap_add_to_page_cache, struct folio *folio)
{
	struct hs_cache_counts *c = counts_of_current();
	if (c)
		__sync_fetch_and_add(&c->misses, folio_pages(folio));
	return 0;
}

SEC("tp_btf/writeback_dirty_folio")
int BPF_PROG(hs_writeback_dirty_folio, struct folio *folio,
	     struct address_space *mapping)
{
	struct hs_cache_counts *c = counts_of_current();
	if (c)
		__sync_fetch_and_add(&c->dirtied, folio_pages(folio));
	return 0;
}

/* Anchor: puts the map value's struct into the object's BTF, so
 * libbpf-cargo generates its Rust type. Never read. */
struct hs_cache_counts hs_anchor_cache_counts = {};
enum hs_kind hs_anchor_kind = HS_KIND_CACHE;
