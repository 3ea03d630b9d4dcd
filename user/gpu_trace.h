/* SPDX-License-Identifier: MIT */
/*
 * GPU activity (struct agent_record from the CUPTI agent, see gpu.h) into a Chrome/Kineto trace
 * through trace_json: one process per device (pid = device index, "GPU N", sort index
 * 5000000 + N), one thread per stream (tid = stream id, "stream N"); categories kernel,
 * gpu_memcpy, gpu_memset, cuda_sync; CPU->GPU flows ac2g with id = correlation.
 * Metadata is written the first time a device/stream shows up in the trace: a struct gpu_trace
 * remembers which, for one trace_json.
 */
#ifndef TPTRACE_GPU_TRACE_H
#define TPTRACE_GPU_TRACE_H

#include <stdint.h>
#include "agent/agent_shm.h"

struct trace_json;
struct gpu_trace;

#define GPU_TRACE_SORT_BASE 5000000

/* GPU tracks written into tj (which must outlive it). NULL and errno on ENOMEM. */
struct gpu_trace *gpu_trace__new(struct trace_json *tj);
void gpu_trace__free(struct gpu_trace *gt);	/* NULL is fine */

/* KERNEL, MEMCPY, MEMSET, SYNC records become X events; API records and name continuations
 * are skipped (the host side comes from uprobes; see gpu_trace__api). Returns 1 if an event
 * was written, 0 if skipped. Kernel names are demangled. */
int gpu_trace__record(struct gpu_trace *gt, const struct agent_record *r);

/* A RUNTIME_API/DRIVER_API record as a cuda_runtime/cuda_driver X event on (host_pid, r->tid),
 * for traces without uprobes. Returns 1 if written. */
int gpu_trace__api(struct gpu_trace *gt, const struct agent_record *r, int host_pid);

/* CPU launch -> GPU kernel arrow: ph "s" on (cpu_pid, cpu_tid) at launch_ts_ns, ph "f" with
 * "bp":"e" on (gpu_dev, stream) at kernel_ts_ns; cat and name "ac2g", id = correlation. */
void gpu_trace__flow(struct gpu_trace *gt, uint64_t correlation, int cpu_pid, int cpu_tid,
		     uint64_t launch_ts_ns, int gpu_dev, int stream, uint64_t kernel_ts_ns);

/* Names used in events, exposed for tests: "HtoD", "Pinned", "Stream Wait Event", ... */
const char *gpu_trace__copy_kind(uint32_t kind);
const char *gpu_trace__mem_kind(uint32_t kind);
const char *gpu_trace__sync_name(uint32_t type);
const char *gpu_trace__runtime_name(uint32_t cbid);	/* NULL when not in the table */

#endif
