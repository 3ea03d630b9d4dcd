/* SPDX-License-Identifier: MIT */
/* The trace writer, a sink of the acquisition core (session.h): turns complete calls into
 * trace events, decodes arguments per the ABI tables (cuda_api.c, nccl_api.c), names kernels
 * (target__kernel_name), and writes Kineto-style host events through trace_json. */
#ifndef TPTRACE_DECODE_H
#define TPTRACE_DECODE_H

#include <stddef.h>
#include <stdint.h>
#include "ustack.h"

struct decoder;
struct trace_writer;
struct elfsym_cache;

struct decoder_stats {
	/* from the calls core (calls.c) */
	uint64_t records;		/* call and return records consumed */
	uint64_t calls;			/* API call events written */
	uint64_t launches;
	uint64_t launches_named;	/* launches whose kernel name is known */
	uint64_t unfinished;		/* calls still inside at the end of the trace */
	uint64_t orphan_returns;	/* returns whose entry was not seen (attached mid-call) */
	uint64_t dl_events;
	uint64_t bad_records;
	uint64_t depth_overflows;	/* nested past CALLS_MAX_DEPTH: written without return */
	uint64_t unwound;		/* left by longjmp/exception: ended at a caller's return */
	/* driver calls made by a CUDA runtime (cudaLaunchKernel -> cuLaunchKernel): not
	 * written, the runtime call shows the launch or copy once */
	uint64_t nested_driver_calls;
	/* --py-stacks (decoder__set_ustacks) */
	uint64_t stacks;		/* events given a stack arg (resolved stacks) */
	uint64_t stacks_status;		/* events whose stack is a status (no Python thread
					 * state, lost, unreadable): marked, no frames */
	uint64_t stacks_missing;	/* stack ids the lookup did not find: marked */
	uint64_t python_slices;		/* python_function slices written */
};

struct session;
/* Registers with s (which hands it calls and knows the processes: session__add_target). NULL
 * and errno. */
struct decoder *decoder__new(struct session *s, struct trace_writer *tj,
			     struct elfsym_cache *cache);
void decoder__free(struct decoder *d);

/* --py-stacks: the records' ustack ids are looked up with lookup(ctx, pid, id) (ustacks__get
 * with the session's struct ustacks; a table in tests). Every CUDA/NCCL event then carries a
 * compact "stack" arg, and its thread gets Kineto with_stack-style python_function slices
 * around its calls. Without it, ids are ignored. */
int decoder__set_ustacks(struct decoder *d, ustack_lookup_fn lookup, void *ctx);	/* 0 or -ENOMEM */

/* --gpu: d consumes the output of the join g (a sink of the same session, gpu_sink.h): the
 * calls it holds are written once decided, with CUPTI's correlation, kernel name and arrow,
 * and g's processes' GPU work goes on GPU tracks. 0 or a negative errno. */
struct gpu_sink;
int decoder__enable_gpu(struct decoder *d, struct gpu_sink *g);

/* Ends the session's open calls (session__finish): calls still open (a thread blocked in a
 * sync when the trace ended) are written as slices ending at end_ns, marked "unfinished". */
void decoder__finish(struct decoder *d, uint64_t end_ns);
const struct decoder_stats *decoder__stats(struct decoder *d);

#endif
