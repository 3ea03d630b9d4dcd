/* SPDX-License-Identifier: MIT */
/*
 * --gpu: joins host calls (uprobe events) with CUPTI's API records, so that a launch carries
 * the correlation id CUPTI gave its kernel. A call takes a record only when all of these hold:
 *   - same thread (CUPTI's threadId is the caller's gettid(), as the probe's tid);
 *   - same API: the call's row (cuda_api.h) has the record's domain (RUNTIME_API <->
 *     CUDA_DOM_RUNTIME, DRIVER_API <-> CUDA_DOM_DRIVER) and exactly its cbid;
 *   - its start lies in the call's window: from the probe's time (CUPTI stamps the record
 *     inside the call, after the uprobe fired) less the clock slack, up to the return probe
 *     (plus slack) or, for entry-only calls, up to the thread's next probed call (less slack).
 * So the driver record CUPTI writes for the driver call nested in every runtime call, and the
 * records of calls tptrace does not probe (cudaGetLastError...), can never be taken. Exactly
 * one candidate joins; none leaves the call unjoined with its reason; two or more is
 * AMBIGUOUS: reported, never guessed.
 *
 * The join decides a call once its window is closed and CUPTI has delivered records past it
 * on that thread (or it waited max_wait_ns); records and work are kept a bounded time.
 *
 * Everything is per process: each traced process has its own CUPTI, whose correlation ids
 * come from its own counter, and thread ids are the process's. So calls and API records are
 * keyed by (pid, tid), GPU work by (pid, correlation), and the clock slack, the enable time
 * and the counts are each process's (gpu_join__stats_pid; gpu_join__stats sums them).
 */
#ifndef TPTRACE_GPU_JOIN_H
#define TPTRACE_GPU_JOIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "gpu_result.h"

struct gpu_join;
struct agent_record;

/* A host call handed to the join. */
struct gpu_join_call {
	uint32_t pid, tid;
	uint32_t api;		/* cuda_apis[] index (the caller's; the join reads the three below) */
	uint32_t domain;	/* enum cuda_api_domain of the row */
	uint32_t cbid;		/* CUPTI callback id of the row */
	uint32_t cbid_alt;	/* the cbid of the function this one enters by a jump
				 * (__cudaLaunchKernel -> cudaLaunchKernel); 0 none */
	bool gpu_work;		/* the row puts work on a stream: wait a while for it */
	uint64_t ts;		/* entry probe, CLOCK_MONOTONIC ns */
	uint64_t ret_ts;	/* return probe; 0: entry-only (or no return seen) */
};

/* What the join says about a call (struct gpu_join_result, gpu_result.h) goes to emit with the
 * call's payload. */
struct gpu_join_ops {
	void *ctx;
	/* a call decided: write it (payload is what gpu_join__add_call copied) */
	void (*emit)(void *ctx, const struct gpu_join_call *c, void *payload,
		     const struct gpu_join_result *r);
	/* the arrow from a joined call (c->pid's) to the first GPU work of its correlation in
	 * that process; may come after emit when the work arrives later */
	void (*flow)(void *ctx, uint32_t correlation, const struct gpu_join_call *c,
		     uint64_t host_ts, uint32_t device, uint32_t context, uint32_t stream,
		     uint64_t work_start);
};

struct gpu_join_stats {
	uint64_t calls;			/* handed in, decided */
	uint64_t joined;
	uint64_t before_enable;
	uint64_t after_disable;
	uint64_t no_record;
	uint64_t ambiguous;
	uint64_t flows;
	/* CUPTI API records no call claimed, once they leave the join */
	uint64_t records;		/* API records received */
	uint64_t records_nested;	/* driver records inside a runtime record on the same
					 * thread: the driver call under a runtime call, expected */
	uint64_t records_unprobed;	/* calls tptrace does not probe (or whose probe event
					 * was lost) */
	uint64_t records_ambiguous;	/* left by an ambiguous call */
	uint64_t work_records;		/* kernels, copies, memsets received */
	uint64_t work_unclaimed;	/* ... whose correlation no written call carries */
	uint64_t slack_ns;		/* the clock slack in use at the end */
};

/* payload_size: bytes copied per call and handed back to emit. NULL and errno on failure. */
struct gpu_join *gpu_join__new(const struct gpu_join_ops *ops, size_t payload_size);
void gpu_join__free(struct gpu_join *j);

/* pid's measured CUPTI-vs-CLOCK_MONOTONIC residual (gpu_stats.clock_residual_ns and
 * clock_window_ns; samples 0: not measured yet). Sets the window slack of pid's calls. */
void gpu_join__set_clock(struct gpu_join *j, uint32_t pid, uint32_t samples,
			 uint64_t residual_ns, uint64_t window_ns);
/* pid's agent reported CUPTI enabled at or before enabled_ns: calls before it had no record.
 * Without it, pid's earliest API record received bounds the enable time. */
void gpu_join__set_enabled(struct gpu_join *j, uint32_t pid, uint64_t enabled_ns);
/* tptrace began turning pid's CUPTI off at disabled_ns: calls that ended after it may have
 * no record (not a loss). */
void gpu_join__set_disabled(struct gpu_join *j, uint32_t pid, uint64_t disabled_ns);

/* Whether a call of cuda_apis[api] waits for a CUPTI record (it has a cbid and puts work on a
 * stream, or is an event record / stream wait CUPTI also reports). */
bool gpu_join__wants(uint32_t api);
/* Copies the call; emitted (through ops->emit) once decided. 0 or -ENOMEM. */
int gpu_join__add_call(struct gpu_join *j, const struct gpu_join_call *c, const void *payload);
/* A probed call on tid that does not wait for a record (a sync, an NCCL call...): it still
 * ends the window of the entry-only call before it. */
void gpu_join__mark(struct gpu_join *j, uint32_t pid, uint32_t tid, uint64_t ts);
/* pid's CUPTI records (gpu__poll order): API records are kept for calls, work for arrows and
 * names; other types are ignored. */
void gpu_join__record(struct gpu_join *j, uint32_t pid, const struct agent_record *r,
		      const char *kernel);

/* Decides what can be decided at now_ns, the time up to which CUPTI has delivered every API
 * record (the agents' last completed flush began then: gpu__delivered_ns): a call that returned
 * before it has all its records in. Records do not come in order (CUPTI hands back buffers late
 * and out of order), so a thread's newest record says nothing about its older ones. Calls
 * waiting longer than max_wait_ns are decided with what arrived. max_wait_ns 0: the end,
 * everything is decided and counted. */
void gpu_join__flush(struct gpu_join *j, uint64_t now_ns, uint64_t max_wait_ns);
/* All processes' counts summed (slack_ns: the widest in use). */
void gpu_join__stats(const struct gpu_join *j, struct gpu_join_stats *out);
/* pid's counts; -ENOENT when the join never heard of pid. */
int gpu_join__stats_pid(const struct gpu_join *j, uint32_t pid, struct gpu_join_stats *out);
const char *gpu_join__status_str(enum gpu_join_status s);

#endif
