// SPDX-License-Identifier: MIT
/* GPU records -> Kineto-style trace events (gpu_trace.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demangle.h"
#include "gpu.h"
#include "gpu_trace.h"
#include "growbuf.h"
#include "hashmap.h"
#include "trace_json.h"

#define COMM_LEN 32

/* A host process whose GPU work the trace shows. */
struct gt_proc {
	int pid;
	char comm[COMM_LEN];
};

/* One GPU track: a (process, device, context); its streams are its threads. */
struct gt_track {
	int tpid;			/* its pid in the trace */
	int host_pid, device;
	uint32_t context;
};

/* One trace's GPU tracks: which metadata it has already, and the device of each context. */
struct gpu_trace {
	struct trace_json *tj;
	struct u64map procs;		/* host pid + 1 -> struct gt_proc * */
	int nr_procs;
	struct u64map tracks;		/* track_key(pid, device, context) -> struct gt_track * */
	struct u64map devices;		/* host pid << 32 | device, + 1 -> contexts with a track */
	struct u64map streams;		/* trace pid << 32 | stream, + 1 -> 1: thread_name written */
	struct u64map ctx_dev;		/* host pid << 32 | context, + 1 -> device + 1 (sync
					 * records name a context, not a device) */
	uint64_t device_pid_taken;	/* bit per device < 64: pid = device is used */
	int next_extra;			/* GPU_TRACE_PID_EXTRA + n for the next extra track */
	/* sync records of a context whose device no work record told yet (attached mid-run,
	 * the first record a stream wait): held until one does, or gpu_trace__finish */
	struct held_sync { int pid; struct agent_record r; } *held;
	size_t nr_held, cap_held;
	bool finishing;
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
	if (!gt)
		return;
	u64map__free_values(&gt->procs);
	u64map__free_values(&gt->tracks);
	u64map__clear(&gt->devices);
	u64map__clear(&gt->streams);
	u64map__clear(&gt->ctx_dev);
	free(gt->held);
	free(gt);
}

int gpu_trace__set_process(struct gpu_trace *gt, int pid, const char *comm)
{
	bool created;
	struct gt_proc *p = u64map__get_or_alloc(&gt->procs, (uint64_t)(uint32_t)pid + 1,
						 sizeof(*p), &created);

	if (!p)
		return -ENOMEM;
	if (created)
		gt->nr_procs++;
	p->pid = pid;
	snprintf(p->comm, sizeof(p->comm), "%s", comm ? comm : "");
	return 0;
}

static uint64_t track_key(int host_pid, int device, uint32_t context)
{
	/* pids < 2^22, devices < 256: 62 bits, never 0 */
	return ((uint64_t)(uint32_t)host_pid << 40 | (uint64_t)(device & 0xff) << 32 | context) + 1;
}

/* The track of (host_pid, device, context), its metadata written the first time: pid = the
 * device index for the first track on a device (Kineto's convention: a one-process trace is
 * Kineto's), GPU_TRACE_PID_EXTRA + n for any other (another process, another context). Its
 * name is "GPU N", with what tells it apart from the device's other tracks when there are
 * any: the process when the trace shows several, the context when the process uses several
 * on the device; its label always says both. */
static struct gt_track *track_get(struct gpu_trace *gt, int host_pid, int device,
				  uint32_t context)
{
	uint64_t key = track_key(host_pid, device, context), v, nctx = 0;
	struct trace_json *tj = gt->tj;
	const struct gt_proc *p = NULL;
	struct gt_track *t;
	bool created;
	char name[128], label[96], who[64] = "";

	t = u64map__get_or_alloc(&gt->tracks, key, sizeof(*t), &created);
	if (!t || !created)
		return t;
	t->host_pid = host_pid;
	t->device = device;
	t->context = context;
	if (device >= 0 && device < 64 && !(gt->device_pid_taken & (1ULL << device))) {
		gt->device_pid_taken |= 1ULL << device;
		t->tpid = device;
	} else {
		t->tpid = GPU_TRACE_PID_EXTRA + gt->next_extra++;
	}
	if (u64map__get(&gt->procs, (uint64_t)(uint32_t)host_pid + 1, &v))
		p = (const struct gt_proc *)(uintptr_t)v;
	if (p && p->comm[0])
		snprintf(who, sizeof(who), "pid %d %s", host_pid, p->comm);
	else
		snprintf(who, sizeof(who), "pid %d", host_pid);
	key = ((uint64_t)(uint32_t)host_pid << 32 | (uint32_t)device) + 1;
	u64map__get(&gt->devices, key, &nctx);
	u64map__set(&gt->devices, key, nctx + 1);
	if (device < 0)
		snprintf(name, sizeof(name), "GPU ? (%s, context %u)", who, context);
	else if (gt->nr_procs > 1 && nctx)
		snprintf(name, sizeof(name), "GPU %d (%s, context %u)", device, who, context);
	else if (gt->nr_procs > 1)
		snprintf(name, sizeof(name), "GPU %d (%s)", device, who);
	else if (nctx)
		snprintf(name, sizeof(name), "GPU %d (context %u)", device, context);
	else
		snprintf(name, sizeof(name), "GPU %d", device);
	snprintf(label, sizeof(label), "%s, context %u", who, context);
	trace_json__process_name(tj, t->tpid, name);
	trace_json__process_label(tj, t->tpid, label);
	trace_json__process_sort(tj, t->tpid, GPU_TRACE_SORT_BASE + device);
	return t;
}

/* thread_name/sort for the stream, once per track. */
static void stream_metadata(struct gpu_trace *gt, const struct gt_track *t, int stream)
{
	uint64_t key = ((uint64_t)(uint32_t)t->tpid << 32 | (uint32_t)stream) + 1, v;
	char name[32];

	if (u64map__get(&gt->streams, key, &v))
		return;
	u64map__set(&gt->streams, key, 1);
	snprintf(name, sizeof(name), "stream %d", stream);
	trace_json__thread_name(gt->tj, t->tpid, stream, name);
	/* without it viewers list streams in the order their first record came (1, 3, 2, 4) */
	trace_json__thread_sort(gt->tj, t->tpid, stream, stream);
}

static void release_held(struct gpu_trace *gt, int host_pid, uint32_t context);

static void learn_context(struct gpu_trace *gt, int host_pid, uint32_t context, uint32_t device)
{
	uint64_t key = ((uint64_t)(uint32_t)host_pid << 32 | context) + 1, v;

	if (!u64map__get(&gt->ctx_dev, key, &v)) {
		u64map__set(&gt->ctx_dev, key, (uint64_t)device + 1);
		release_held(gt, host_pid, context);
	}
}

/* The device of a context of host_pid, from its work records; -1 when none came yet. */
static int device_of_context(const struct gpu_trace *gt, int host_pid, uint32_t context)
{
	uint64_t v;

	if (u64map__get(&gt->ctx_dev, ((uint64_t)(uint32_t)host_pid << 32 | context) + 1, &v))
		return (int)(v - 1);
	return -1;
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

int gpu_trace__record(struct gpu_trace *gt, int host_pid, const struct agent_record *r)
{
	int device = (int)r->device, stream = (int)r->stream;
	struct trace_json *tj = gt->tj;
	struct gt_track *t;
	char name[96];

	switch (r->type) {
	case AGENT_REC_KERNEL: {
		char *demangled;

		learn_context(gt, host_pid, r->context, r->device);
		t = track_get(gt, host_pid, device, r->context);
		if (!t)
			return 0;
		stream_metadata(gt, t, stream);
		demangled = demangle(gpu__record_name(r));
		trace_json__event(tj, "X", "kernel", demangled ? demangled : gpu__record_name(r),
				  t->tpid, stream, r->start_ns, dur_of(r));
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
		learn_context(gt, host_pid, r->context, r->device);
		t = track_get(gt, host_pid, device, r->context);
		if (!t)
			return 0;
		stream_metadata(gt, t, stream);
		snprintf(name, sizeof(name), "Memcpy %s (%s -> %s)", gpu_trace__copy_kind(r->copy_kind),
			 gpu_trace__mem_kind(r->src_kind), gpu_trace__mem_kind(r->dst_kind));
		trace_json__event(tj, "X", "gpu_memcpy", name, t->tpid, stream, r->start_ns,
				  dur_of(r));
		common_args(tj, r, device);
		bandwidth_arg(tj, r);
		trace_json__event_end(tj);
		return 1;
	case AGENT_REC_MEMSET:
		learn_context(gt, host_pid, r->context, r->device);
		t = track_get(gt, host_pid, device, r->context);
		if (!t)
			return 0;
		stream_metadata(gt, t, stream);
		snprintf(name, sizeof(name), "Memset (%s)", gpu_trace__mem_kind(r->dst_kind));
		trace_json__event(tj, "X", "gpu_memset", name, t->tpid, stream, r->start_ns,
				  dur_of(r));
		common_args(tj, r, device);
		bandwidth_arg(tj, r);
		trace_json__event_end(tj);
		return 1;
	case AGENT_REC_SYNC:
		/* CUPTI gives a context, not a device: the device its work showed; before any
		 * did, the record waits for it (at the end, a track of its own, "GPU ?"); a
		 * context sync has no stream (~0) */
		device = device_of_context(gt, host_pid, r->context);
		if (device < 0 && !gt->finishing) {
			if (ARRAY_RESERVE(gt->held, gt->cap_held, gt->nr_held + 1, 64))
				return 0;
			gt->held[gt->nr_held].pid = host_pid;
			gt->held[gt->nr_held++].r = *r;
			return 1;
		}
		if (r->stream == UINT32_MAX)
			stream = 0;
		t = track_get(gt, host_pid, device, r->context);
		if (!t)
			return 0;
		stream_metadata(gt, t, stream);
		trace_json__event(tj, "X", "cuda_sync", gpu_trace__sync_name(r->cbid), t->tpid,
				  stream, r->start_ns, dur_of(r));
		common_args(tj, r, device);
		if (r->value)
			trace_json__arg_u64(tj, "cuda event id", r->value);
		trace_json__event_end(tj);
		return 1;
	default:
		return 0;
	}
}

/* The held sync records of (host_pid, context), now that its device is known. */
static void release_held(struct gpu_trace *gt, int host_pid, uint32_t context)
{
	size_t k = 0;

	for (size_t i = 0; i < gt->nr_held; i++) {
		struct held_sync h = gt->held[i];

		if (h.pid == host_pid && h.r.context == context)
			gpu_trace__record(gt, h.pid, &h.r);
		else
			gt->held[k++] = h;
	}
	gt->nr_held = k;
}

void gpu_trace__finish(struct gpu_trace *gt)
{
	if (!gt)
		return;
	gt->finishing = true;
	for (size_t i = 0; i < gt->nr_held; i++)
		gpu_trace__record(gt, gt->held[i].pid, &gt->held[i].r);
	gt->nr_held = 0;
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

void gpu_trace__flow(struct gpu_trace *gt, uint64_t id_num, int cpu_pid, int cpu_tid,
		     uint64_t launch_ts_ns, int gpu_dev, uint32_t context, int stream,
		     uint64_t kernel_ts_ns)
{
	struct trace_json *tj = gt->tj;
	struct gt_track *t = track_get(gt, cpu_pid, gpu_dev, context);
	char id[24];

	if (!t)
		return;
	snprintf(id, sizeof(id), "%" PRIu64, id_num);
	trace_json__event(tj, "s", "ac2g", "ac2g", cpu_pid, cpu_tid, launch_ts_ns, 0);
	trace_json__field_raw(tj, "id", id);
	trace_json__event_end(tj);
	trace_json__event(tj, "f", "ac2g", "ac2g", t->tpid, stream, kernel_ts_ns, 0);
	trace_json__field_raw(tj, "id", id);
	trace_json__field_raw(tj, "bp", "\"e\"");
	trace_json__event_end(tj);
}
