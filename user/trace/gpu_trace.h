/* SPDX-License-Identifier: MIT */
/*
 * GPU activity (struct agent_record from the CUPTI agent, see gpu.h) into a Chrome/Kineto trace
 * through trace_json: one trace process per GPU track, a (host process, device, context), with
 * one thread per stream (tid = stream id, "stream N"); categories kernel, gpu_memcpy,
 * gpu_memset, cuda_sync; CPU->GPU flows ac2g.
 * A track's pid is the device index for the first track on that device (Kineto's convention:
 * a trace of one process with one context per device is exactly Kineto's), and
 * GPU_TRACE_PID_EXTRA + n for the others (another process, another context on the device);
 * its process_name is "GPU N", followed by what tells it apart from the device's other tracks
 * ("GPU 0 (pid 1234 python)" when the trace shows several processes, "context C" when the
 * process uses several on the device); its process_labels always says "pid P comm, context C"
 * (tptrace report reads the host pid there); sort index 5000000 + N.
 * Metadata is written the first time a track/stream shows up in the trace: a struct gpu_trace
 * remembers which, for one trace_json.
 */
#ifndef TPTRACE_GPU_TRACE_H
#define TPTRACE_GPU_TRACE_H

#include <stdint.h>
#include "agent/agent_shm.h"

struct trace_writer;
struct gpu_trace;

#define GPU_TRACE_SORT_BASE 5000000
/* above every host pid (PID_MAX_LIMIT is 2^22) */
#define GPU_TRACE_PID_EXTRA (1 << 22)

/* GPU tracks written into tj (which must outlive it). NULL and errno on ENOMEM. */
struct gpu_trace *gpu_trace__new(struct trace_writer *tj);
void gpu_trace__free(struct gpu_trace *gt);	/* NULL is fine */

/* Names the GPU tracks of host process pid (comm: its name, may be NULL). Every process whose
 * records the trace shows is set before the first record: the count decides the names.
 * 0 or -ENOMEM. */
int gpu_trace__set_process(struct gpu_trace *gt, int pid, const char *comm);

/* KERNEL, MEMCPY, MEMSET, SYNC records of host process host_pid become X events on its
 * tracks; API records and name continuations are skipped (the host side comes from uprobes;
 * see gpu_trace__api). Returns 1 if an event was written, 0 if skipped. Kernel names are
 * demangled. */
int gpu_trace__record(struct gpu_trace *gt, int host_pid, const struct agent_record *r);

/* The end of the trace: sync records still held because no work record told their context's
 * device go on a track of their own ("GPU ?"). Call before the trace's end. */
void gpu_trace__finish(struct gpu_trace *gt);

/* A RUNTIME_API/DRIVER_API record as a cuda_runtime/cuda_driver X event on (host_pid, r->tid),
 * for traces without uprobes. Returns 1 if written. */
int gpu_trace__api(struct gpu_trace *gt, const struct agent_record *r, int host_pid);

/* CPU launch -> GPU work arrow: ph "s" on (cpu_pid, cpu_tid) at launch_ts_ns, ph "f" with
 * "bp":"e" on cpu_pid's track of (gpu_dev, context), thread stream, at kernel_ts_ns; cat and
 * name "ac2g". id: unique in the trace (a correlation id alone is not: each process's CUPTI
 * counts its own). */
void gpu_trace__flow(struct gpu_trace *gt, uint64_t id, int cpu_pid, int cpu_tid,
		     uint64_t launch_ts_ns, int gpu_dev, uint32_t context, int stream,
		     uint64_t kernel_ts_ns);

/* Names used in events, exposed for tests: "HtoD", "Pinned", "Stream Wait Event", ... */
const char *gpu_trace__copy_kind(uint32_t kind);
const char *gpu_trace__mem_kind(uint32_t kind);
const char *gpu_trace__sync_name(uint32_t type);
const char *gpu_trace__runtime_name(uint32_t cbid);	/* NULL when not in the table */

#endif
