/* SPDX-License-Identifier: MIT */
/*
 * --gpu: the join (gpu_join.h) as a sink of the acquisition core (session.h), and the GPU side
 * that feeds it.
 *
 * Calls: the sink registers with the session as a stage. Of every paired call it holds the
 * ones the join must decide (a CUDA call that waits for a CUPTI record: gpu_join__wants); any
 * other probed call ends the window of the entry-only call before it on its thread. A driver
 * call made inside a runtime call (target__call_nesting) is neither: it is not written. The
 * session marks the held calls for the sink that consumes the join's output (held, in its
 * on_call: it does what it does at a call's arrival and writes nothing), and the join hands
 * them back once decided, with what it found, through struct gpu_sink_consumer.
 *
 * GPU side: each traced process's agent (gpu.h) is polled here. Its records go to the consumer
 * (the GPU tracks) and to the join (API records, and work for arrows and kernel names); its
 * clock samples set the slack of the process's calls; the agents' completed flushes bound what
 * the join may decide (gpu__delivered_ns).
 */
#ifndef TPTRACE_GPU_SINK_H
#define TPTRACE_GPU_SINK_H

#include <stdint.h>
#include "gpu_result.h"

struct agent_record;
struct call;
struct gpu_join_stats;
struct gpu_session;
struct session;
struct gpu_sink;
struct gpu_sink_proc;

/* What the join's output goes to (the trace writer, decode.c). */
struct gpu_sink_consumer {
	/* pid's GPU side is set up (before any of its records): comm is its name; 0 or -errno */
	int (*process)(void *ctx, int pid, const char *comm);
	/* one of pid's GPU records as the agent delivered it, before the join sees it: work,
	 * syncs... (not the API records: those are the join's) */
	void (*record)(void *ctx, int pid, const struct agent_record *r);
	/* a held call decided: c as the session delivered it (c->frame a copy holding the
	 * consumer's user bytes as the entries left them; c->held set), r what the join says */
	void (*joined)(void *ctx, const struct call *c, const struct gpu_join_result *r);
	/* the arrow from a joined call on (pid, tid) to the first GPU work of its correlation in
	 * that process; may come after joined when the work arrives later */
	void (*flow)(void *ctx, int pid, int tid, uint32_t correlation, uint64_t host_ts,
		     uint32_t device, uint32_t context, uint32_t stream, uint64_t work_start);
};

/* Registers with s. NULL and errno. */
struct gpu_sink *gpu_sink__new(struct session *s);
void gpu_sink__free(struct gpu_sink *g);	/* calls still held are dropped; NULL is fine */
/* ctx (a sink of the same session) takes the join's output: the session marks the calls held
 * for it (session__consume). One consumer. 0, -EBUSY when there is one, -ENOENT when ctx is
 * not a sink of the session, -ENOMEM. */
int gpu_sink__subscribe(struct gpu_sink *g, const struct gpu_sink_consumer *ops, void *ctx);

/* A traced process, once the consumer subscribed and before any agent is attached (the
 * consumer counts them: every process is set up before the first record). Owned by g; the
 * same pid gives the same one. NULL and errno. */
struct gpu_sink_proc *gpu_sink__add_process(struct gpu_sink *g, int pid, const char *comm);
/* p's agent answered ENABLED at enabled_ns (its calls from then on have CUPTI records); gpu
 * (owned by the caller, alive until gpu_sink__finish) is polled by gpu_sink__poll, NULL: its
 * records come only through gpu_sink__record. */
void gpu_sink__attached(struct gpu_sink_proc *p, struct gpu_session *gpu, uint64_t enabled_ns);
/* tptrace began turning p's CUPTI off at ns: calls that end after it may have no record. */
void gpu_sink__disabling(struct gpu_sink_proc *p, uint64_t ns);
/* gpu_record_cb (gpu.h) of p (ctx): one of its records. */
void gpu_sink__record(void *p, const struct agent_record *r);
/* Drains every attached agent, takes their clock samples, and hands on the calls the join can
 * decide: those the agents' last completed flushes vouch for (a live agent that has not flushed
 * for a minute no longer holds calls back), or that waited 2 s. now: CLOCK_MONOTONIC ns. */
void gpu_sink__poll(struct gpu_sink *g, uint64_t now);
/* The end (after the session's open calls were delivered, session__finish): the clock samples
 * once more, and every call still held is decided and handed on. */
void gpu_sink__finish(struct gpu_sink *g, uint64_t end_ns);

/* The join's counts, all processes; -ENOENT when g is NULL (--gpu off). */
int gpu_sink__stats(const struct gpu_sink *g, struct gpu_join_stats *out);
/* pid's own; -ENOENT when g is NULL or the join never heard of pid. */
int gpu_sink__stats_pid(const struct gpu_sink *g, int pid, struct gpu_join_stats *out);

#endif
