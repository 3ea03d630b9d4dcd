// SPDX-License-Identifier: MIT
/* GPU records -> Kineto-style trace events (gpu_trace.h). */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demangle.h"
#include "gpu.h"
#include "gpu_trace.h"
#include "trace_json.h"

#define MAX_TRACKS 1024
#define MAX_CONTEXTS 64

/* One trace's GPU tracks: which metadata it has already, and the device of each context. */
struct gpu_trace {
	struct trace_json *tj;
	uint64_t devices_done;			/* bit per device < 64 */
	struct { int device, stream; } tracks[MAX_TRACKS];
	int nr_tracks;
	struct { uint32_t context, device; } ctx_dev[MAX_CONTEXTS];	/* sync records lack device */
	int nr_ctx;
};

struct gpu_trace *gpu_trace__new(struct trace_json *tj)
{
	struct gpu_trace *gt = calloc(1, sizeof(*gt));

	if (gt)
		gt->tj = tj;
	return gt;
}

void gpu_trace__free(struct gpu_trace *gt)
{
	free(gt);
}

/* process_name/sort for the device and thread_name/sort for the stream, once per trace. */
static void track_metadata(struct gpu_trace *gt, int device, int stream)
{
	struct trace_json *tj = gt->tj;
	char name[48];

	if (device >= 0 && device < 64 && !(gt->devices_done & (1ULL << device))) {
		gt->devices_done |= 1ULL << device;
		snprintf(name, sizeof(name), "GPU %d", device);
		trace_json__process_name(tj, device, name);
		trace_json__process_label(tj, device, name);
		trace_json__process_sort(tj, device, GPU_TRACE_SORT_BASE + device);
	}
	for (int i = 0; i < gt->nr_tracks; i++)
		if (gt->tracks[i].device == device && gt->tracks[i].stream == stream)
			return;
	if (gt->nr_tracks < MAX_TRACKS) {
		gt->tracks[gt->nr_tracks].device = device;
		gt->tracks[gt->nr_tracks].stream = stream;
		gt->nr_tracks++;
	}
	snprintf(name, sizeof(name), "stream %d", stream);
	trace_json__thread_name(tj, device, stream, name);
	/* without it viewers list streams in the order their first record came (1, 3, 2, 4) */
	trace_json__thread_sort(tj, device, stream, stream);
}

static void learn_context(struct gpu_trace *gt, uint32_t context, uint32_t device)
{
	for (int i = 0; i < gt->nr_ctx; i++)
		if (gt->ctx_dev[i].context == context)
			return;
	if (gt->nr_ctx < MAX_CONTEXTS) {
		gt->ctx_dev[gt->nr_ctx].context = context;
		gt->ctx_dev[gt->nr_ctx].device = device;
		gt->nr_ctx++;
	}
}

static uint32_t device_of_context(const struct gpu_trace *gt, uint32_t context)
{
	for (int i = 0; i < gt->nr_ctx; i++)
		if (gt->ctx_dev[i].context == context)
			return gt->ctx_dev[i].device;
	return 0;
}

const char *gpu_trace__copy_kind(uint32_t kind)
{
	static const char *const names[] = {
		"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH",
		"PtoP",
	};

	return kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "Unknown";
}

const char *gpu_trace__mem_kind(uint32_t kind)
{
	static const char *const names[] = {
		"Unknown", "Pageable", "Pinned", "Device", "Array", "Managed", "Device Static",
		"Managed Static",
	};

	return kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "Unknown";
}

const char *gpu_trace__sync_name(uint32_t type)
{
	switch (type) {
	case 1: return "Event Sync";
	case 2: return "Stream Wait Event";
	case 3: return "Stream Sync";
	case 4: return "Context Sync";
	default: return "Unknown Sync";
	}
}

/* CUpti_runtime_api_trace_cbid values (cupti_runtime_cbid.h, CUDA 13.0) of the common calls. */
const char *gpu_trace__runtime_name(uint32_t cbid)
{
	static const struct { uint32_t cbid; const char *name; } names[] = {
		{ 20, "cudaMalloc" }, { 22, "cudaFree" }, { 25, "cudaMallocHost" },
		{ 31, "cudaMemcpy" }, { 41, "cudaMemcpyAsync" }, { 49, "cudaMemset" },
		{ 51, "cudaMemsetAsync" }, { 131, "cudaStreamSynchronize" },
		{ 135, "cudaEventRecord" }, { 137, "cudaEventSynchronize" },
		{ 138, "cudaEventQuery" }, { 147, "cudaStreamWaitEvent" },
		{ 165, "cudaDeviceSynchronize" }, { 211, "cudaLaunchKernel" },
		{ 214, "cudaLaunchKernel_ptsz" }, { 225, "cudaMemcpyAsync_ptsz" },
		{ 235, "cudaMemsetAsync_ptsz" }, { 239, "cudaStreamSynchronize_ptsz" },
		{ 242, "cudaEventRecord_ptsz" }, { 247, "cudaStreamWaitEvent_ptsz" },
		{ 269, "cudaLaunchCooperativeKernel" }, { 311, "cudaGraphLaunch" },
		{ 430, "cudaLaunchKernelExC" }, { 505, "__cudaLaunchKernel" },
		{ 506, "__cudaLaunchKernel_ptsz" },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].cbid == cbid)
			return names[i].name;
	return NULL;
}

static uint64_t dur_of(const struct agent_record *r)
{
	return r->end_ns > r->start_ns ? r->end_ns - r->start_ns : 0;
}

static void common_args(struct trace_json *tj, const struct agent_record *r, int device)
{
	trace_json__arg_i64(tj, "device", device);
	trace_json__arg_u64(tj, "context", r->context);
	trace_json__arg_i64(tj, "stream", (int32_t)r->stream);
	trace_json__arg_u64(tj, "correlation", r->correlation);
}

static void bandwidth_arg(struct trace_json *tj, const struct agent_record *r)
{
	uint64_t dur = dur_of(r);

	trace_json__arg_u64(tj, "bytes", r->bytes);
	/* bytes per ns = GB/s */
	trace_json__arg_f64(tj, "memory bandwidth (GB/s)", dur ? (double)r->bytes / dur : 0.0);
}

int gpu_trace__record(struct gpu_trace *gt, const struct agent_record *r)
{
	int device = (int)r->device, stream = (int)r->stream;
	struct trace_json *tj = gt->tj;
	char name[96];

	switch (r->type) {
	case AGENT_REC_KERNEL: {
		char *demangled = demangle(gpu__record_name(r));

		learn_context(gt, r->context, r->device);
		track_metadata(gt, device, stream);
		trace_json__event(tj, "X", "kernel", demangled ? demangled : gpu__record_name(r),
				  device, stream, r->start_ns, dur_of(r));
		common_args(tj, r, device);
		trace_json__arg_u64(tj, "registers per thread", r->registers);
		trace_json__arg_u64(tj, "shared memory", (uint64_t)r->static_shmem + r->dynamic_shmem);
		trace_json__arg_dim3(tj, "grid", r->grid[0], r->grid[1], r->grid[2]);
		trace_json__arg_dim3(tj, "block", r->block[0], r->block[1], r->block[2]);
		if (r->graph_id)
			trace_json__arg_u64(tj, "graph id", r->graph_id);
		trace_json__event_end(tj);
		free(demangled);
		return 1;
	}
	case AGENT_REC_MEMCPY:
		learn_context(gt, r->context, r->device);
		track_metadata(gt, device, stream);
		snprintf(name, sizeof(name), "Memcpy %s (%s -> %s)", gpu_trace__copy_kind(r->copy_kind),
			 gpu_trace__mem_kind(r->src_kind), gpu_trace__mem_kind(r->dst_kind));
		trace_json__event(tj, "X", "gpu_memcpy", name, device, stream, r->start_ns, dur_of(r));
		common_args(tj, r, device);
		bandwidth_arg(tj, r);
		trace_json__event_end(tj);
		return 1;
	case AGENT_REC_MEMSET:
		learn_context(gt, r->context, r->device);
		track_metadata(gt, device, stream);
		snprintf(name, sizeof(name), "Memset (%s)", gpu_trace__mem_kind(r->dst_kind));
		trace_json__event(tj, "X", "gpu_memset", name, device, stream, r->start_ns, dur_of(r));
		common_args(tj, r, device);
		bandwidth_arg(tj, r);
		trace_json__event_end(tj);
		return 1;
	case AGENT_REC_SYNC:
		/* CUPTI gives a context, not a device; a context sync has no stream (~0) */
		device = (int)device_of_context(gt, r->context);
		if (r->stream == UINT32_MAX)
			stream = 0;
		track_metadata(gt, device, stream);
		trace_json__event(tj, "X", "cuda_sync", gpu_trace__sync_name(r->cbid), device, stream,
				  r->start_ns, dur_of(r));
		common_args(tj, r, device);
		if (r->value)
			trace_json__arg_u64(tj, "cuda event id", r->value);
		trace_json__event_end(tj);
		return 1;
	default:
		return 0;
	}
}

int gpu_trace__api(struct gpu_trace *gt, const struct agent_record *r, int host_pid)
{
	struct trace_json *tj = gt->tj;
	const char *name = NULL;
	char buf[48];
	bool runtime = r->type == AGENT_REC_RUNTIME_API;

	if (!runtime && r->type != AGENT_REC_DRIVER_API)
		return 0;
	if (runtime)
		name = gpu_trace__runtime_name(r->cbid);
	if (!name) {
		snprintf(buf, sizeof(buf), "%s cbid %u", runtime ? "runtime" : "driver", r->cbid);
		name = buf;
	}
	trace_json__event(tj, "X", runtime ? "cuda_runtime" : "cuda_driver", name, host_pid,
			  (int)r->tid, r->start_ns, dur_of(r));
	trace_json__arg_u64(tj, "cbid", r->cbid);
	trace_json__arg_u64(tj, "correlation", r->correlation);
	trace_json__arg_u64(tj, "rc", r->return_value);
	trace_json__event_end(tj);
	return 1;
}

void gpu_trace__flow(struct gpu_trace *gt, uint64_t correlation, int cpu_pid, int cpu_tid,
		     uint64_t launch_ts_ns, int gpu_dev, int stream, uint64_t kernel_ts_ns)
{
	struct trace_json *tj = gt->tj;
	char id[24];

	snprintf(id, sizeof(id), "%" PRIu64, correlation);
	trace_json__event(tj, "s", "ac2g", "ac2g", cpu_pid, cpu_tid, launch_ts_ns, 0);
	trace_json__field_raw(tj, "id", id);
	trace_json__event_end(tj);
	trace_json__event(tj, "f", "ac2g", "ac2g", gpu_dev, stream, kernel_ts_ns, 0);
	trace_json__field_raw(tj, "id", id);
	trace_json__field_raw(tj, "bp", "\"e\"");
	trace_json__event_end(tj);
}
