/* SPDX-License-Identifier: MIT */
/* The address layout behind a memory_viz snapshot, built so that memory_viz can replay it.
 *
 * memory_viz (PyTorch's MemoryViz.js) starts from the final `segments` and walks
 * `device_traces` backwards: a free puts its block back, an alloc removes it, segment_free /
 * segment_unmap put a segment back (an unmap merged with contiguous neighbours of the same
 * stream), segment_alloc removes the segment starting at its address, segment_map shrinks the
 * segment that holds its range. At every step each block must lie in a segment, and a final
 * block's address is its segment's address plus the sizes of the blocks before it. So:
 *  - every block, live or freed while tracing, lies in one segment for all of its lifetime: a
 *    segment seen allocated, or an inferred one where tptrace saw none (memory allocated
 *    before attach, or by a path not probed);
 *  - an inferred segment exists from the start of the history unless a known segment held
 *    the same addresses earlier; it lives to the end unless one holds them later; where it
 *    cannot, synthetic segment_alloc / segment_free events (marked tptrace_inferred) bound it;
 *  - final segments are tiled by their blocks in address order, gaps `inactive`;
 *  - input that no real allocator can produce (two live blocks or segments overlapping, a
 *    block reallocated without its free, a block crossing a segment's edge or lifetime) is
 *    left out of the snapshot and counted, never drawn as an impossible layout. */
#ifndef TPTRACE_MEMLAYOUT_H
#define TPTRACE_MEMLAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "memsnap.h"

/* The stream of a cuMemMap range: not known (cuMemMap takes none). Distinct from every real
 * stream so that memory_viz, which merges a range put back by segment_unmap with touching
 * segments of the same stream, never merges it into a cudaMalloc segment that a later step
 * removes whole. */
#define MEMLAYOUT_STREAM_UNKNOWN UINT64_MAX

/* Something live at the end: a block (size = bytes requested) or a segment. */
struct memlayout_item {
	uint64_t addr, size, stream;
	int32_t stack_id;
	int device;
	bool mapped;		/* a cuMemMap range (expandable segments) */
	const char *source;	/* segments: "cudaMalloc", ... */
};

struct memlayout_block {
	uint64_t addr, size, requested;
	int32_t stack_id;
	bool active;		/* false: a gap, "inactive" */
};

struct memlayout_segment {
	uint64_t addr, size, stream;
	uint64_t allocated, requested;	/* sums over its active blocks */
	int device;
	int32_t stack_id;
	const char *source;	/* "before_attach" when inferred */
	bool inferred, expandable;
	size_t first_block, nr_blocks;	/* into memlayout.blocks */
};

struct memlayout_event {
	struct mem_event ev;
	bool inferred;		/* synthetic bound of an inferred segment */
};

/* Input left out of the snapshot, by reason. */
struct memlayout_issues {
	uint64_t block_realloc;		/* allocated again at its address without a free */
	uint64_t block_overlap;		/* overlaps a block live at the same time */
	uint64_t block_outside;		/* crosses the edge or the lifetime of a known segment */
	uint64_t block_unplaced;	/* no inferred segment can hold it beside its neighbours */
	uint64_t segment_realloc;	/* allocated again at its address without a free */
	uint64_t segment_overlap;	/* overlaps a segment live at the same time */
	uint64_t state_mismatch;	/* open in the history, not live at the end */
	uint64_t empty;			/* 0 bytes, or at address 0 */
};

struct memlayout {
	struct memlayout_segment *segs;		/* by device, then address */
	size_t nr_segs;
	struct memlayout_block *blocks;
	size_t nr_blocks;
	struct memlayout_event *events;		/* oldest first, all devices */
	size_t nr_events;
	struct memlayout_issues issues;
	uint64_t inferred_bounds;		/* synthetic segment events */
};

/* events: the history, oldest first; blocks / segs: what is live at the end (segments on a
 * device only). NULL and errno on failure. */
struct memlayout *memlayout__build(const struct mem_event *events, size_t nr_events,
				   const struct memlayout_item *blocks, size_t nr_blocks,
				   const struct memlayout_item *segs, size_t nr_segs);
void memlayout__free(struct memlayout *l);
uint64_t memlayout__issues_total(const struct memlayout_issues *i);

#endif
