/* SPDX-License-Identifier: MIT */
/*
 * GPU activity of a running process through CUPTI (tptrace --gpu): puts the agent
 * (libtptrace_agent.so) into the target, turns CUPTI activity on, drains the agent's
 * shared-memory ring, and takes the agent out again at the end.
 *
 *   attach:  no agent in the target -> ptrace injection: dlopen(agent) + tptrace_agent_start()
 *            agent already there (CUDA_INJECTION64_PATH) -> open /dev/shm/tptrace-gpu.<pid>
 *            then wait until the agent reports ENABLED or why it refused (no CUDA, no libcupti,
 *            another CUPTI subscriber).
 *   poll:    records in CLOCK_MONOTONIC ns, the clock of bpf_ktime_get_ns().
 *   detach:  DISABLE (flush, disable, unsubscribe, cuptiFinalize), drain, then for an injected
 *            agent tptrace_agent_stop() + dlclose(), and check that /proc/<pid>/maps no longer
 *            shows it. The target keeps running throughout.
 *
 * How the agent and the control block reach the target without writing into its filesystem:
 * memfds in tptrace, opened by the target as /proc/<tptrace pid>/fd/<n>. That needs a shared
 * pid namespace and a target allowed to open our fds (same uid, or a root target); otherwise
 * (or with opts.file_transport) both are copied into <target root>/dev/shm, owned by the
 * target's uid, and unlinked as soon as the agent has them open.
 */
#ifndef TPTRACE_GPU_H
#define TPTRACE_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "agent/agent_shm.h"

struct gpu_session;

struct gpu_opts {
	const char *cupti_path;		/* NULL: the agent searches next to libcudart, then by name */
	const char *agent_path;		/* NULL: $TPTRACE_AGENT_SO, next to the tptrace binary, .output */
	uint32_t ring_records;		/* power of two; 0: AGENT_RING_DEFAULT */
	uint32_t flush_ms;		/* agent's cuptiActivityFlushAll period; 0: 200 */
	int timeout_ms;			/* waiting for the agent's answers; 0: 10000 */
	bool no_cuda_precheck;		/* skip gpu__precheck (tests of the agent's own) */
	bool file_transport;		/* use <target root>/dev/shm files, not memfds */
};

/* A record as delivered by gpu__poll: struct agent_record, times in CLOCK_MONOTONIC ns. */
typedef void (*gpu_record_cb)(void *ctx, const struct agent_record *r);

struct gpu_stats {
	uint64_t records;		/* delivered to callbacks (name continuations not counted) */
	uint64_t kernels, memcpys, memsets, syncs, runtime_api, driver_api;
	uint64_t dropped_ring;		/* the agent found the ring full */
	uint64_t dropped_cupti;		/* CUPTI's own drops */
	uint64_t buffers;		/* CUPTI buffers completed */
	uint64_t records_incomplete;	/* CUPTI handed back before the work ended: skipped */
	uint64_t buffers_cut;		/* buffers whose walk stopped at an unreadable record */
	uint64_t flushes;		/* cuptiActivityFlushAll calls completed by the agent */
	uint64_t flushes_partial;	/* ... after which an older buffer was still with CUPTI */
	uint32_t clock_samples;		/* cuptiGetTimestamp samples fitted (clock_fit.h) */
	uint32_t clock_used;		/* in the current fit */
	uint32_t clock_lost;		/* overwritten in the agent before tptrace read them */
	double clock_ppm;		/* the GPU-record clock's fitted drift against the host */
	int64_t clock_offset_ns;	/* ... and its offset at the newest sample */
	uint64_t clock_residual_ns;	/* max |sample - fit| over the samples in the fit */
	uint64_t clock_window_ns;	/* max (mono_after - mono_before): the bound of a sample */
	bool injected;			/* true: ptrace-injected; false: resident agent */
	bool unloaded;			/* after detach: the agent no longer in /proc/<pid>/maps */
	char cupti_path[AGENT_PATH_LEN];	/* the libcupti the agent loaded */
	uint32_t cupti_version;
};

/* 0 when the agent can work in pid: libcuda.so.1 mapped (CUPTI needs the driver) or the agent
 * already resident; else -ENODEV (-errno if its maps cannot be read) with one line in err
 * saying why and what to do. Reads /proc only: the process is not touched. gpu__attach runs it
 * too (unless no_cuda_precheck); on a failure after injection, its message says which objects
 * stay mapped in the target that were not there before, or that nothing does. */
int gpu__precheck(int pid, char *err, size_t errlen);

/* NULL and errno (EPERM: refused/ptrace denied, ENOENT: no agent/CUPTI, ENODEV: no CUDA,
 * EBUSY: another CUPTI subscriber, ETIMEDOUT); err gets one line without "tptrace: ". */
struct gpu_session *gpu__attach(int pid, const struct gpu_opts *opts, char *err, size_t errlen);
/* Drains the ring into cb; returns the number of records delivered or -errno. */
int gpu__poll(struct gpu_session *s, gpu_record_cb cb, void *ctx);
/* Disable, flush, drain into cb, unload. 0 or -errno; err text in gpu__error(). Call once. */
int gpu__detach(struct gpu_session *s, gpu_record_cb cb, void *ctx);
/* CLOCK_MONOTONIC ns before which every activity has been delivered by gpu__poll: the start
 * of the agent's last completed CUPTI flush (the attach time before the first). On a loaded
 * host the agent's thread falls behind the wall clock; this does not. */
uint64_t gpu__delivered_ns(const struct gpu_session *s);
void gpu__stats(const struct gpu_session *s, struct gpu_stats *out);
const char *gpu__error(const struct gpu_session *s);
/* Detaches first if needed (records dropped). NULL is safe. */
void gpu__free(struct gpu_session *s);

/* The full kernel name of a KERNEL record delivered by gpu__poll/gpu__detach (names longer than
 * the inline field come in continuation records, joined here). Valid inside the callback. */
const char *gpu__record_name(const struct agent_record *r);

#endif
