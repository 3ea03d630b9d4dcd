/* SPDX-License-Identifier: MIT */
/* What holds GPU memory in one process, rebuilt from the allocation events tptrace saw (see
 * memtrace.h for where they come from): live tensor blocks (PyTorch's caching allocator,
 * USDT), live segments (cudaMalloc & co, cuMemAlloc, cuMemCreate/cuMemMap), byte counters per
 * device, and a bounded history of events. From it: a snapshot in PyTorch's memory_viz format
 * (JSON or pickle) and a report of live allocations by call site.
 *
 * Everything starts at attach: memory allocated before is not known. A free of an unknown
 * block or segment is counted, not guessed; blocks with no known segment around them lie in
 * inferred segments (memlayout.h lays the snapshot out so that memory_viz can replay it). No
 * BPF here: the unit tests feed synthetic events. */
#ifndef TPTRACE_MEMSNAP_H
#define TPTRACE_MEMSNAP_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "ustack.h"

struct memsnap;
struct cJSON;

/* memory_viz trace actions */
enum mem_action {
	MEM_ACT_ALLOC = 0,
	MEM_ACT_FREE_REQUESTED,
	MEM_ACT_FREE_COMPLETED,
	MEM_ACT_SEGMENT_ALLOC,
	MEM_ACT_SEGMENT_FREE,
	MEM_ACT_SEGMENT_MAP,
	MEM_ACT_SEGMENT_UNMAP,
	MEM_ACT_OOM,
	/* cudaFree & co of a pointer tptrace never saw allocated: kept in the history (it may end
	 * a segment inferred from the blocks seen), never written to device_traces */
	MEM_ACT_SEGMENT_FREE_UNKNOWN,
};

/* Where a segment's memory came from. */
enum mem_seg_kind {
	MEM_SEG_DEVICE = 0,	/* cudaMalloc, cuMemAlloc_v2 */
	MEM_SEG_ASYNC,		/* cudaMallocAsync, cudaMallocFromPoolAsync, cuMemAllocAsync */
	MEM_SEG_MAPPED,		/* cuMemMap of a cuMemCreate handle (expandable segments) */
	MEM_SEG_MANAGED,	/* cudaMallocManaged: counted apart, not in the snapshot */
	MEM_SEG_HOST,		/* cudaMallocHost, cudaHostAlloc: pinned host memory, likewise */
	MEM_SEG_KINDS,
};

/* One history entry (device_traces). */
struct mem_event {
	uint8_t action;		/* enum mem_action */
	int8_t device;
	int32_t stack_id;	/* < 0: none */
	uint64_t addr, size, stream;
	uint64_t ts;		/* CLOCK_MONOTONIC ns */
};

struct mem_device_bytes {
	uint64_t allocated;	/* bytes requested by live blocks (USDT) */
	uint64_t reserved;	/* bytes of live segments and cuMemCreate handles */
	uint64_t peak_allocated, peak_reserved;
};

struct memsnap_stats {
	uint64_t allocs, frees;			/* USDT */
	uint64_t frees_unknown;			/* frees of blocks allocated before attach */
	uint64_t segment_allocs, segment_frees;
	uint64_t segment_frees_unknown;		/* segments allocated before attach */
	uint64_t maps, unmaps, unmaps_unknown;
	uint64_t handles_released_unknown;	/* cuMemRelease of a handle created before attach */
	uint64_t ooms;
	uint64_t history_dropped;		/* oldest entries dropped (ring full) */
	uint64_t host_bytes, managed_bytes;	/* live now */
};

#define MEMSNAP_MAX_DEVICES 64
#define MEMSNAP_DEFAULT_HISTORY 200000

/* history: entries kept (a ring; 0: MEMSNAP_DEFAULT_HISTORY). NULL on ENOMEM. */
struct memsnap *memsnap__new(size_t history);
void memsnap__free(struct memsnap *ms);
/* The instant ts 0 stands for in time_us (CLOCK_MONOTONIC ns and CLOCK_REALTIME ns). */
void memsnap__set_clock(struct memsnap *ms, uint64_t mono_ns, uint64_t real_ns);

/* State changes; each returns the device whose counters changed, -1 when nothing changed
 * (an unknown pointer). Sizes are bytes requested. */
int memsnap__block_alloc(struct memsnap *ms, uint64_t ts, int device, uint64_t addr, uint64_t size,
		   uint64_t stream, int32_t stack_id);
int memsnap__block_free(struct memsnap *ms, uint64_t ts, uint64_t addr);
int memsnap__segment_alloc(struct memsnap *ms, uint64_t ts, enum mem_seg_kind kind, int device,
			   uint64_t addr, uint64_t size, uint64_t stream, int32_t stack_id);
/* Frees the segment at addr whatever its kind (cudaFree takes managed memory too). */
int memsnap__segment_free(struct memsnap *ms, uint64_t ts, uint64_t addr);
/* cuMemCreate / cuMemRelease: physical memory, counted as reserved. */
int memsnap__handle_create(struct memsnap *ms, uint64_t ts, int device, uint64_t handle,
			   uint64_t size);
int memsnap__handle_release(struct memsnap *ms, uint64_t ts, uint64_t handle);
/* cuMemMap / cuMemUnmap: a mapped range is a segment (segment_map / segment_unmap). */
int memsnap__map(struct memsnap *ms, uint64_t ts, uint64_t addr, uint64_t size, uint64_t handle,
		 int32_t stack_id);
int memsnap__unmap(struct memsnap *ms, uint64_t ts, uint64_t addr, uint64_t size);
/* A failed allocation (cudaErrorMemoryAllocation / CUDA_ERROR_OUT_OF_MEMORY). */
int memsnap__oom(struct memsnap *ms, uint64_t ts, int device, uint64_t size, uint64_t stream,
		 int32_t stack_id);

const struct mem_device_bytes *memsnap__device(const struct memsnap *ms, int device);
int memsnap__nr_devices(const struct memsnap *ms);	/* 1 + highest device seen, >= 1 */
const struct memsnap_stats *memsnap__stats(const struct memsnap *ms);
/* The device of a live block or segment at addr (for the trace's free events), -1 if unknown. */
int memsnap__device_of(const struct memsnap *ms, uint64_t addr, uint64_t *size);

/* Stack frames for snapshot frames and the leak report. Returns the number of frames written
 * (innermost first); internal[i] marks frames inside the allocator or CUDA libraries, skipped
 * when naming a call site. Strings live as long as the symbolizer. */
struct mem_frame {
	const char *name;	/* "leak_site_a+0x1c", Python: the function; never NULL */
	const char *filename;	/* object path, Python: co_filename; "" when unknown */
	uint64_t addr;
	bool internal;
	int line;		/* Python frames: the line; 0 native or unknown */
	bool python;
};
typedef int (*memsnap_stack_fn)(void *ctx, int32_t stack_id, struct mem_frame *frames, int max);

struct memsnap_info {
	int pid;
	const char *comm;
	const char *alloc_conf;	/* PYTORCH_CUDA_ALLOC_CONF of the target, NULL if unset */
	uint64_t attach_real_ns, end_real_ns;
	const char *version;
	memsnap_stack_fn stack_fn;	/* NULL: no frames */
	void *stack_ctx;
	/* --py-stacks: Python frames of stack ids made by memsnap__stack_with_py (ustacks__get
	 * with ctx = the struct ustacks, or a test's table); NULL: none */
	ustack_lookup_fn ustack_lookup;
	void *ustack_ctx;
};

/* --py-stacks: the stack id to record for an event whose native stack is native_id (< 0:
 * none) and whose Python stack id is ustack (a record's ustack field, bpf/ustack.h): the same
 * native_id when ustack holds no stack, else an id of this memsnap that stands for both.
 * Frames of such an id are the Python frames first (innermost first), then the native ones,
 * as PyTorch's own snapshots have them. */
int32_t memsnap__stack_with_py(struct memsnap *ms, int32_t native_id, uint64_t ustack);

/* The memory_viz snapshot: segments, device_traces, allocator_settings, and "tptrace" (what
 * is unknown, counters, live allocations by call site). NULL on ENOMEM. */
struct cJSON *memsnap__snapshot(struct memsnap *ms, const struct memsnap_info *info);
/* Writes a cJSON tree as a Python pickle (protocol 2 opcodes, which protocols 2-4 readers
 * accept): dicts, lists, str, int, float, bool, None. 0 or negative errno. */
int memsnap__write_pickle(const struct cJSON *root, FILE *f);

/* Live allocations grouped by (what, device, call site, size), largest total first. The call
 * site is the innermost Python frame (function, file, line) when the stack has Python frames
 * (info's ustack_lookup), else the whole native stack (stack id). */
struct mem_leak_group {
	const char *what;	/* "pytorch:malloc", "cudaMalloc" (segment kinds), ... */
	int device;		/* -1: host */
	int32_t stack_id;	/* the first allocation's (Python groups: one of several stacks) */
	uint64_t size, count, total;
	uint64_t first_ts;
	uint64_t py_site;	/* hash of the innermost Python frame; 0: grouped by stack id */
	uint32_t nr_stacks;	/* distinct stack ids in the group (Python groups), else 1 */
};
/* Fills *groups (malloc'ed, caller frees). info may be NULL (then by stack id only). Returns
 * the count or negative errno. */
int memsnap__leak_groups(const struct memsnap *ms, const struct memsnap_info *info,
			 struct mem_leak_group **groups);
/* Text report on f. */
void memsnap__leak_report(const struct memsnap *ms, const struct memsnap_info *info, FILE *f);
/* Name of the first frame outside the allocator/CUDA libraries ("func (file:line)" for a
 * Python frame); "" when none. */
const char *memsnap__call_site(const struct memsnap *ms, const struct memsnap_info *info,
			       int32_t stack_id, char *buf, int size);

#endif
