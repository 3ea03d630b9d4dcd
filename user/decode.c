// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda.h"
#include "cuda_api.h"
#include "decode.h"
#include "hashmap.h"
#include "log.h"
#include "nccl_api.h"
#include "demangle.h"
#include "gpu.h"
#include "gpu_trace.h"
#include "procmaps.h"
#include "target.h"
#include "trace_json.h"

#define MAX_DEPTH 16

struct pending {
	struct tp_rec_call call;
	uint64_t correlation;
};

struct thread {
	int pid, tid;
	int depth;
	struct pending stack[MAX_DEPTH];
};

/* --gpu: host calls CUPTI also reports wait here until their CUPTI API record (same thread,
 * overlapping time) gives them CUPTI's correlation id, so the host event, the GPU event and
 * the ac2g arrow share one id (HTA links CPU and GPU by equal correlation). */
struct gpu_pending {
	struct tp_rec_call call;
	struct tp_rec_ret ret;
	bool has_ret;
	uint64_t end_ns;		/* unfinished calls: when the trace ended */
	uint64_t own_corr;
	uint64_t cupti_corr;		/* 0 until matched */
	uint64_t queued_ns;
};

struct gpu_api {
	uint64_t start, end;
	uint32_t corr, tid;
	bool used;
};

struct gpu_work {			/* a GPU record, by correlation, for arrows and names */
	uint64_t start;
	uint32_t device, stream;
	char *kernel;			/* demangled, kernels only */
};

struct decoder {
	struct trace_json *tj;
	struct elfsym_cache *cache;
	const struct target_probes *probes;
	struct target **targets;
	int nr_targets;
	struct u64map threads;		/* tid -> struct thread* */
	uint64_t next_correlation;
	struct decoder_stats stats;

	struct gpu_trace *gpu;		/* --gpu: the GPU tracks; NULL without */
	struct gpu_pending *pending;
	size_t nr_pending, cap_pending;
	struct gpu_api *apis;		/* CUPTI API records not yet matched */
	size_t nr_apis, cap_apis;
	struct u64map gpu_work;		/* correlation -> struct gpu_work* */
	uint64_t gpu_matched, gpu_unmatched, gpu_flows;
};


struct decoder *decoder__new(struct trace_json *tj, struct elfsym_cache *cache,
			     const struct target_probes *probes)
{
	struct decoder *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	d->tj = tj;
	d->cache = cache;
	d->probes = probes;
	d->next_correlation = 1;
	return d;
}

void decoder__free(struct decoder *d)
{
	if (!d)
		return;
	u64map__free_values(&d->threads);
	for (size_t i = 0; i < d->gpu_work.cap; i++) {
		if (d->gpu_work.keys[i]) {
			struct gpu_work *w = (struct gpu_work *)(uintptr_t)d->gpu_work.vals[i];

			free(w->kernel);
			free(w);
		}
	}
	u64map__clear(&d->gpu_work);
	free(d->pending);
	free(d->apis);
	free(d->targets);
	gpu_trace__free(d->gpu);
	free(d);
}

int decoder__add_target(struct decoder *d, struct target *t)
{
	struct target **n = realloc(d->targets, (d->nr_targets + 1) * sizeof(*n));

	if (!n)
		return -ENOMEM;
	d->targets = n;
	d->targets[d->nr_targets++] = t;
	return 0;
}

const struct decoder_stats *decoder__stats(const struct decoder *d)
{
	return &d->stats;
}

static struct target *find_target(struct decoder *d, int pid)
{
	for (int i = 0; i < d->nr_targets; i++)
		if (d->targets[i]->pid == pid)
			return d->targets[i];
	return NULL;
}

static struct thread *get_thread(struct decoder *d, int pid, int tid)
{
	bool created;
	struct thread *th = u64map__get_or_alloc(&d->threads, (uint64_t)tid, sizeof(*th), &created);

	if (!th || !created)
		return th;
	th->pid = pid;
	th->tid = tid;
	/* name the thread the first time it shows up, while it still exists */
	{
		char name[64];

		if (procmaps__thread_name(pid, tid, name, sizeof(name)) || !name[0])
			snprintf(name, sizeof(name), "thread %d", tid);
		trace_json__thread_name(d->tj, pid, tid, name);
	}
	return th;
}

static void arg_stream(struct trace_json *tj, uint64_t stream)
{
	/* the cudaStream_t value: 0 legacy default, 1 cudaStreamLegacy, 2 cudaStreamPerThread */
	trace_json__arg_u64(tj, "stream", stream);
}

static void launch_args(struct decoder *d, struct target *t, const struct tp_rec_call *c,
			const struct cuda_api *api, const char *gpu_kernel)
{
	struct trace_json *tj = d->tj;
	uint32_t grid[3], block[3];
	uint64_t shmem, stream, func = 0, handle = 0;
	const char *name = NULL, *source = NULL;

	if (api->kind == API_LAUNCH_EXC) {
		/* cudaLaunchConfig_t: dim3 grid @0, dim3 block @12, size_t smem @24, stream @32,
		 * attrs @40, numAttrs @48 */
		const uint8_t *cfg = c->deref;
		uint32_t nattrs;

		memcpy(grid, cfg, 12);
		memcpy(block, cfg + 12, 12);
		memcpy(&shmem, cfg + 24, 8);
		memcpy(&stream, cfg + 32, 8);
		memcpy(&nattrs, cfg + 48, 4);
		func = c->args[1];
		if (c->flags & TP_CALL_DEREF_FAULT)
			trace_json__arg_bool(tj, "config unreadable", true);
		else
			trace_json__arg_u64(tj, "attributes", nattrs);
	} else {
		/* dim3 by value is split over two registers: x | y << 32, then z */
		grid[0] = (uint32_t)c->args[1];
		grid[1] = (uint32_t)(c->args[1] >> 32);
		grid[2] = (uint32_t)c->args[2];
		block[0] = (uint32_t)c->args[3];
		block[1] = (uint32_t)(c->args[3] >> 32);
		block[2] = (uint32_t)c->args[4];
		shmem = c->stack[1];
		stream = c->stack[2];
		if (api->kind == API_LAUNCH_HANDLE)
			handle = c->args[0];
	}
	/* cudaLaunchKernel takes a host function or, since CUDA 13, a cudaKernel_t handle
	 * (__cudaLaunchKernel tail-jumps into it, see target.c). Names, best first: a handle
	 * seen in __cudaGetKernel or read from a stub's __handle static; the symbol of a host
	 * function; the device stub that made the call (return address, or the caller's when
	 * a non-inlined launch helper sits in between). */
	if (t && api->kind != API_LAUNCH_EXC) {
		uint64_t first = c->args[0];

		name = target__handle_name(t, first, &source);
		if (!name && first && api->kind == API_LAUNCH_HANDLE) {
			target__scan_handle_statics(t, d->cache, c->ts);
			name = target__handle_name(t, first, &source);
		}
		if (name) {
			handle = first;
		} else if (first && api->kind == API_LAUNCH) {
			name = target__stub_kernel(t, first);
			if (!name)
				name = target__symbolize(t, first);
			source = "symbol";
		}
		if (!name && first && api->kind == API_LAUNCH) {
			target__scan_handle_statics(t, d->cache, c->ts);
			name = target__handle_name(t, first, &source);
			if (name)
				handle = first;
		}
		if (!name && !(c->flags & TP_CALL_STACK_FAULT)) {
			name = target__stub_kernel(t, c->stack[0]);
			if (!name && !(c->flags & TP_CALL_CALLER2_FAULT))
				name = target__stub_kernel(t, c->caller2);
			if (name) {
				source = "caller";
				handle = first;
				if (first)
					target__set_handle(t, first, name, "caller");
			}
		}
		if (!handle && api->kind == API_LAUNCH)
			func = first;
	} else if (t && func) {
		/* cudaLaunchKernelExC takes a function or, like cudaLaunchKernel, a handle */
		name = target__handle_name(t, func, &source);
		if (name) {
			handle = func;
			func = 0;
		} else {
			name = target__stub_kernel(t, func);
			if (!name)
				name = target__symbolize(t, func);
			source = "symbol";
		}
	}
	if (!name && gpu_kernel) {
		/* CUPTI named the kernel this launch produced: keep it for later launches of the
		 * same handle, also after the agent is gone */
		name = gpu_kernel;
		source = "cupti";
		if (t && (handle || c->args[0]) && api->kind != API_LAUNCH_EXC)
			target__set_handle(t, handle ? handle : c->args[0], name, "cupti");
	}
	if (name) {
		trace_json__arg_str(tj, "kernel", name);
		d->stats.launches_named++;
	} else {
		char raw[48];

		snprintf(raw, sizeof(raw), "%s 0x%llx", func ? "func" : "handle",
			 (unsigned long long)(func ? func : c->args[0]));
		trace_json__arg_str(tj, "kernel", raw);
		source = "unresolved";
	}
	trace_json__arg_str(tj, "kernel source", source);
	if (func)
		trace_json__arg_hex(tj, "func", func);
	else
		trace_json__arg_hex(tj, "handle", handle ? handle : (api->kind == API_LAUNCH_EXC ? 0 : c->args[0]));
	trace_json__arg_dim3(tj, "grid", grid[0], grid[1], grid[2]);
	trace_json__arg_dim3(tj, "block", block[0], block[1], block[2]);
	trace_json__arg_u64(tj, "shared memory", shmem);
	arg_stream(tj, stream);
	d->stats.launches++;
}

/* "0,1,2": n int32 values copied by the probe (at most max of them). */
static void arg_int_list(struct trace_json *tj, const char *key, const uint8_t *data, int n,
			 int max)
{
	char list[32 * 12] = "";
	int len = 0;

	for (int i = 0; i < n && i < max; i++) {
		int32_t v;

		memcpy(&v, data + 4 * i, 4);
		len += snprintf(list + len, sizeof(list) - len, "%s%d", i ? "," : "", v);
	}
	trace_json__arg_str(tj, key, list);
}

/* NCCL calls on the CPU timeline: cat "nccl", the collective's arguments decoded per the
 * NCCL 2.28 ABI (nccl_api.c), rc and duration from the return probe. */
static void emit_nccl(struct decoder *d, const struct tp_rec_call *c, uint64_t correlation,
		      const struct tp_rec_ret *r, uint64_t end_ns)
{
	const struct nccl_api *api = &nccl_apis[c->api - NCCL_API_BASE];
	struct trace_json *tj = d->tj;
	uint64_t dur = r ? r->ts - c->ts : (end_ns > c->ts ? end_ns - c->ts : 0);
	bool out_ok = r && (r->flags & 1);

	trace_json__event(tj, "X", "nccl", api->symbol, c->pid, c->tid, c->ts, dur);
	switch (api->kind) {
	case NAPI_COLL: {
		struct nccl_coll o;

		nccl_api_decode_coll(api, c, &o);
		trace_json__arg_str(tj, "collective", nccl_op_name(o.op));
		trace_json__arg_u64(tj, "count", o.count);
		trace_json__arg_str(tj, "dtype", nccl_dtype_name(o.dtype));
		if (nccl_dtype_size(o.dtype))
			trace_json__arg_u64(tj, "bytes", o.count * nccl_dtype_size(o.dtype));
		if (nccl_op_has_redop(o.op))
			trace_json__arg_str(tj, "reduce_op", nccl_redop_name(o.redop));
		if (nccl_op_has_root(o.op))
			trace_json__arg_i64(tj, "root", o.root);
		if (nccl_op_is_p2p(o.op))
			trace_json__arg_i64(tj, "peer", o.peer);
		if (o.op != NCCL_OP_RECV)
			trace_json__arg_hex(tj, "sendbuff", o.sendbuff);
		if (o.op != NCCL_OP_SEND)
			trace_json__arg_hex(tj, "recvbuff", o.recvbuff);
		trace_json__arg_hex(tj, "comm", o.comm);
		arg_stream(tj, o.stream);
		break;
	}
	case NAPI_INIT_RANK:
	case NAPI_INIT_RANK_CONFIG:
	case NAPI_INIT_SCALABLE: {
		char id[24];

		/* rank is the third integer argument in all three (the id travels in memory) */
		trace_json__arg_i64(tj, "nranks", (int32_t)c->args[1]);
		trace_json__arg_i64(tj, "rank", (int32_t)c->args[2]);
		if (api->kind == NAPI_INIT_SCALABLE)
			trace_json__arg_i64(tj, "nId", (int32_t)c->args[3]);
		if (!(c->flags & TP_CALL_DEREF_FAULT)) {
			snprintf(id, sizeof(id), "%016llx",
				 (unsigned long long)nccl_hash(c->deref, 128, 0));
			trace_json__arg_str(tj, "comm_id", id);
		}
		if (api->kind == NAPI_INIT_RANK_CONFIG)
			trace_json__arg_hex(tj, "config", c->args[3]);
		else if (api->kind == NAPI_INIT_SCALABLE)
			trace_json__arg_hex(tj, "config", c->args[5]);
		if (out_ok)
			trace_json__arg_hex(tj, "new comm", r->out_val);
		break;
	}
	case NAPI_INIT_ALL: {
		int ndev = (int32_t)c->args[1];

		trace_json__arg_i64(tj, "ndev", ndev);
		if (!(c->flags & TP_CALL_DEREF_FAULT) && c->args[2] && ndev > 0)
			arg_int_list(tj, "devlist", c->deref, ndev, 8);	/* 32 bytes copied */
		break;
	}
	case NAPI_SPLIT:
		trace_json__arg_hex(tj, "comm", c->args[0]);
		trace_json__arg_i64(tj, "color", (int32_t)c->args[1]);
		trace_json__arg_i64(tj, "key", (int32_t)c->args[2]);
		trace_json__arg_hex(tj, "config", c->args[4]);
		if (out_ok)
			trace_json__arg_hex(tj, "new comm", r->out_val);
		break;
	case NAPI_SHRINK: {
		int n = (int32_t)c->args[2];

		trace_json__arg_hex(tj, "comm", c->args[0]);
		trace_json__arg_i64(tj, "exclude count", n);
		if (!(c->flags & TP_CALL_DEREF_FAULT) && n > 0)
			arg_int_list(tj, "exclude", c->deref, n, 32);	/* 128 bytes copied */
		trace_json__arg_i64(tj, "flags", (int32_t)c->args[5]);
		if (out_ok)
			trace_json__arg_hex(tj, "new comm", r->out_val);
		break;
	}
	case NAPI_REVOKE:
		trace_json__arg_hex(tj, "comm", c->args[0]);
		trace_json__arg_i64(tj, "flags", (int32_t)c->args[1]);
		break;
	case NAPI_ASYNC_ERROR:
	case NAPI_COUNT:
	case NAPI_USER_RANK:
	case NAPI_CU_DEVICE:
		trace_json__arg_hex(tj, "comm", c->args[0]);
		if (out_ok)
			trace_json__arg_i64(tj, api->kind == NAPI_ASYNC_ERROR ? "async_error" :
					    api->kind == NAPI_COUNT ? "count" :
					    api->kind == NAPI_USER_RANK ? "rank" : "device",
					    (int32_t)r->out_val);
		break;
	case NAPI_FINALIZE:
	case NAPI_DESTROY:
	case NAPI_ABORT:
		trace_json__arg_hex(tj, "comm", c->args[0]);
		break;
	default:
		break;
	}
	trace_json__arg_u64(tj, "correlation", correlation);
	if (r)
		trace_json__arg_i64(tj, "rc", (int32_t)r->rc);
	else if (end_ns)
		trace_json__arg_bool(tj, "unfinished", true);
	trace_json__event_end(tj);
	d->stats.calls++;
}

static bool gpu_joinable(const struct tp_rec_call *c)
{
	if (c->api >= NCCL_API_BASE)
		return false;
	switch (cuda_apis[c->api].kind) {
	case API_LAUNCH:
	case API_LAUNCH_HANDLE:
	case API_LAUNCH_EXC:
	case API_GRAPH_LAUNCH:
	case API_MEMCPY:
	case API_MEMCPY_ASYNC:
	case API_MEMCPY2D:
	case API_MEMCPY2D_ASYNC:
	case API_MEMSET:
	case API_MEMSET_ASYNC:
		return true;
	default:
		return false;
	}
}

static void emit_host(struct decoder *d, const struct tp_rec_call *c, uint64_t correlation,
		      const struct tp_rec_ret *r, uint64_t end_ns, const char *gpu_kernel);

static void emit_call(struct decoder *d, const struct tp_rec_call *c, uint64_t correlation,
		      const struct tp_rec_ret *r, uint64_t end_ns)
{
	if (c->api >= NCCL_API_BASE) {
		emit_nccl(d, c, correlation, r, end_ns);
		return;
	}
	if (d->gpu && gpu_joinable(c)) {
		struct gpu_pending *p;

		if (d->nr_pending == d->cap_pending) {
			size_t cap = d->cap_pending ? d->cap_pending * 2 : 1024;
			struct gpu_pending *n = realloc(d->pending, cap * sizeof(*n));

			if (!n) {
				emit_host(d, c, correlation, r, end_ns, NULL);
				return;
			}
			d->pending = n;
			d->cap_pending = cap;
		}
		p = &d->pending[d->nr_pending++];
		memset(p, 0, sizeof(*p));
		p->call = *c;
		if (r) {
			p->ret = *r;
			p->has_ret = true;
		}
		p->end_ns = end_ns;
		p->own_corr = correlation;
		p->queued_ns = c->ts;
		return;
	}
	emit_host(d, c, correlation, r, end_ns, NULL);
}

static void emit_host(struct decoder *d, const struct tp_rec_call *c, uint64_t correlation,
		      const struct tp_rec_ret *r, uint64_t end_ns, const char *gpu_kernel)
{
	const struct cuda_api *api = &cuda_apis[c->api];
	struct target *t = find_target(d, c->pid);
	struct trace_json *tj = d->tj;
	uint64_t dur = r ? r->ts - c->ts : (end_ns > c->ts ? end_ns - c->ts : 0);

	trace_json__event(tj, "X", "cuda_runtime", api->name, c->pid, c->tid, c->ts, dur);
	switch (api->kind) {
	case API_LAUNCH:
	case API_LAUNCH_HANDLE:
	case API_LAUNCH_EXC:
		launch_args(d, t, c, api, gpu_kernel);
		break;
	case API_GET_KERNEL: {
		const char *name = t ? target__symbolize(t, c->args[1]) : NULL;

		/* a stub symbol names its kernel (legacy host functions carry the kernel's name) */
		if (t && c->args[1] && target__stub_kernel(t, c->args[1]))
			name = target__stub_kernel(t, c->args[1]);
		trace_json__arg_str(tj, "kernel", name ? name : "");
		trace_json__arg_hex(tj, "func", c->args[1]);
		if (r && (r->flags & 1)) {
			trace_json__arg_hex(tj, "handle", r->out_val);
			if (t && name && r->out_val)
				target__set_handle(t, r->out_val, name, "getkernel");
		}
		break;
	}
	case API_GRAPH_LAUNCH:
		trace_json__arg_hex(tj, "graph", c->args[0]);
		arg_stream(tj, c->args[1]);
		break;
	case API_MEMCPY:
	case API_MEMCPY_ASYNC:
		trace_json__arg_u64(tj, "bytes", c->args[2]);
		trace_json__arg_str(tj, "kind", cuda_memcpy_kind_str(c->args[3]));
		trace_json__arg_hex(tj, "dst", c->args[0]);
		trace_json__arg_hex(tj, "src", c->args[1]);
		arg_stream(tj, api->kind == API_MEMCPY_ASYNC ? c->args[4] : 0);
		break;
	case API_MEMCPY2D:
	case API_MEMCPY2D_ASYNC:
		/* (dst, dpitch, src, spitch, width, height, kind [rsp+8], stream [rsp+16]) */
		trace_json__arg_u64(tj, "bytes", c->args[4] * c->args[5]);
		trace_json__arg_str(tj, "kind", cuda_memcpy_kind_str(c->stack[1]));
		trace_json__arg_u64(tj, "width", c->args[4]);
		trace_json__arg_u64(tj, "height", c->args[5]);
		trace_json__arg_u64(tj, "dpitch", c->args[1]);
		trace_json__arg_u64(tj, "spitch", c->args[3]);
		trace_json__arg_hex(tj, "dst", c->args[0]);
		trace_json__arg_hex(tj, "src", c->args[2]);
		arg_stream(tj, api->kind == API_MEMCPY2D_ASYNC ? c->stack[2] : 0);
		break;
	case API_MEMSET:
	case API_MEMSET_ASYNC:
		trace_json__arg_u64(tj, "bytes", c->args[2]);
		trace_json__arg_i64(tj, "value", (int32_t)c->args[1]);
		trace_json__arg_hex(tj, "ptr", c->args[0]);
		arg_stream(tj, api->kind == API_MEMSET_ASYNC ? c->args[3] : 0);
		break;
	case API_STREAM_SYNC:
		arg_stream(tj, c->args[0]);
		break;
	case API_DEVICE_SYNC:
		break;
	case API_EVENT_SYNC:
	case API_EVENT_QUERY:
		trace_json__arg_hex(tj, "event", c->args[0]);
		break;
	case API_EVENT_RECORD:
	case API_EVENT_RECORD_FLAGS:
		trace_json__arg_hex(tj, "event", c->args[0]);
		arg_stream(tj, c->args[1]);
		if (api->kind == API_EVENT_RECORD_FLAGS)
			trace_json__arg_u64(tj, "flags", (uint32_t)c->args[2]);
		break;
	case API_STREAM_WAIT_EVENT:
		arg_stream(tj, c->args[0]);
		trace_json__arg_hex(tj, "event", c->args[1]);
		trace_json__arg_u64(tj, "flags", (uint32_t)c->args[2]);
		break;
	}
	trace_json__arg_u64(tj, "correlation", correlation);
	if (api->per_thread)
		trace_json__arg_bool(tj, "per-thread stream", true);
	if (r)
		trace_json__arg_i64(tj, "rc", (int32_t)r->rc);
	else if (end_ns)
		trace_json__arg_bool(tj, "unfinished", true);
	trace_json__event_end(tj);
	d->stats.calls++;
}

int decoder__enable_gpu(struct decoder *d)
{
	d->gpu = gpu_trace__new(d->tj);
	if (!d->gpu)
		return -ENOMEM;
	/* uprobe-only events keep ids CUPTI never hands out */
	d->next_correlation = 1ULL << 40;
	return 0;
}

static struct gpu_work *gpu_work_get(struct decoder *d, uint64_t corr)
{
	uint64_t v;

	return corr && u64map__get(&d->gpu_work, corr, &v) ? (struct gpu_work *)(uintptr_t)v : NULL;
}

/* The CUPTI API record of a call: on the same thread, the first one that starts after the
 * probe fired (CUPTI's API callback runs inside the call, after any lazy initialisation the
 * runtime does first) and before that thread's next probed call. Calls made before CUPTI was
 * enabled have no record: the next-call bound keeps them from taking a later call's. */
#define GPU_CLOCK_SLACK_NS 20000ULL		/* CUPTI vs bpf timestamps */
#define GPU_MATCH_WINDOW_NS 100000000ULL	/* last call on a thread: at most 100 ms */

static bool match_pending(struct decoder *d, size_t idx)
{
	struct gpu_pending *p = &d->pending[idx];
	uint64_t ts = p->call.ts, until = ts + GPU_MATCH_WINDOW_NS;
	struct gpu_api *best = NULL;

	for (size_t i = idx + 1; i < d->nr_pending; i++) {
		if (d->pending[i].call.tid == p->call.tid && d->pending[i].call.ts > ts) {
			until = d->pending[i].call.ts;
			break;
		}
	}
	for (size_t i = 0; i < d->nr_apis; i++) {
		struct gpu_api *a = &d->apis[i];

		if (a->used || a->tid != p->call.tid)
			continue;
		if (a->start + GPU_CLOCK_SLACK_NS < ts || a->start >= until)
			continue;
		if (!best || a->start < best->start)
			best = a;
	}
	if (!best)
		return false;
	best->used = true;
	p->cupti_corr = best->corr;
	return true;
}

static void finalize_pending(struct decoder *d, struct gpu_pending *p)
{
	struct gpu_work *w = gpu_work_get(d, p->cupti_corr);

	if (p->cupti_corr)
		d->gpu_matched++;
	else
		d->gpu_unmatched++;
	emit_host(d, &p->call, p->cupti_corr ? p->cupti_corr : p->own_corr,
		  p->has_ret ? &p->ret : NULL, p->end_ns, w ? w->kernel : NULL);
	if (w) {
		gpu_trace__flow(d->gpu, p->cupti_corr, p->call.pid, p->call.tid, p->call.ts,
				(int)w->device, (int)w->stream, w->start);
		d->gpu_flows++;
	}
}

/* Emits pending host calls that found their GPU work, or waited longer than max_wait_ns
 * (max_wait_ns 0: everything, at the end of the trace). */
void decoder__gpu_flush(struct decoder *d, uint64_t now_ns, uint64_t max_wait_ns)
{
	size_t keep = 0;

	for (size_t i = 0; i < d->nr_pending; i++) {
		struct gpu_pending *p = &d->pending[i];
		bool old = !max_wait_ns || now_ns - p->queued_ns > max_wait_ns;

		if (!p->cupti_corr)
			match_pending(d, i);
		if ((p->cupti_corr && gpu_work_get(d, p->cupti_corr)) || old) {
			finalize_pending(d, p);
			continue;
		}
		d->pending[keep++] = *p;
	}
	d->nr_pending = keep;
	/* API records nobody claimed within the window are done with */
	keep = 0;
	for (size_t i = 0; i < d->nr_apis; i++) {
		struct gpu_api *a = &d->apis[i];

		if (a->used || (max_wait_ns && now_ns - a->end > 2 * max_wait_ns) || !max_wait_ns)
			continue;
		d->apis[keep++] = *a;
	}
	d->nr_apis = keep;
}

/* gpu__poll callback: GPU work goes on its device/stream track right away; API records wait
 * for the host calls they belong to. */
void decoder__gpu_cb(void *ctx, const struct agent_record *r)
{
	struct decoder *d = ctx;

	switch (r->type) {
	case AGENT_REC_RUNTIME_API:
	case AGENT_REC_DRIVER_API:
		if (d->nr_apis == d->cap_apis) {
			size_t cap = d->cap_apis ? d->cap_apis * 2 : 1024;
			struct gpu_api *n = realloc(d->apis, cap * sizeof(*n));

			if (!n)
				return;
			d->apis = n;
			d->cap_apis = cap;
		}
		d->apis[d->nr_apis++] = (struct gpu_api){ .start = r->start_ns, .end = r->end_ns,
							  .corr = r->correlation, .tid = r->tid };
		return;
	case AGENT_REC_KERNEL:
	case AGENT_REC_MEMCPY:
	case AGENT_REC_MEMSET: {
		struct gpu_work *w;

		gpu_trace__record(d->gpu, r);
		if (!r->correlation || gpu_work_get(d, r->correlation))
			return;
		w = calloc(1, sizeof(*w));
		if (!w)
			return;
		w->start = r->start_ns;
		w->device = r->device;
		w->stream = r->stream;
		if (r->type == AGENT_REC_KERNEL)
			w->kernel = demangle(gpu__record_name(r));
		u64map__set(&d->gpu_work, r->correlation, (uint64_t)(uintptr_t)w);
		return;
	}
	default:
		gpu_trace__record(d->gpu, r);
		return;
	}
}

void decoder__gpu_stats(const struct decoder *d, uint64_t *matched, uint64_t *unmatched,
			uint64_t *flows)
{
	*matched = d->gpu_matched;
	*unmatched = d->gpu_unmatched;
	*flows = d->gpu_flows;
}

static void on_call(struct decoder *d, const struct tp_rec_call *c)
{
	struct thread *th = get_thread(d, c->pid, c->tid);
	uint64_t correlation = d->next_correlation++;
	bool has_ret = c->api >= NCCL_API_BASE ? nccl_api_has_return(c->api - NCCL_API_BASE) :
		       cuda_apis[c->api].ret || d->probes->all_returns;

	if (th && has_ret) {
		if (th->depth < MAX_DEPTH) {
			th->stack[th->depth].call = *c;
			th->stack[th->depth].correlation = correlation;
			th->depth++;
			return;
		}
	}
	emit_call(d, c, correlation, NULL, 0);
}

static void on_return(struct decoder *d, const struct tp_rec_ret *r)
{
	struct thread *th = get_thread(d, r->pid, r->tid);

	if (!th)
		return;
	for (int i = th->depth - 1; i >= 0; i--) {
		if (th->stack[i].call.api != r->api)
			continue;
		/* frames above i lost their returns (longjmp, exceptions): close them here */
		for (int j = th->depth - 1; j > i; j--)
			emit_call(d, &th->stack[j].call, th->stack[j].correlation, NULL, r->ts);
		emit_call(d, &th->stack[i].call, th->stack[i].correlation, r, 0);
		th->depth = i;
		return;
	}
	d->stats.orphan_returns++;
}

static void on_dlopen(struct decoder *d, const struct tp_rec_dlopen *r)
{
	struct target *t = find_target(d, r->pid);
	int n;

	d->stats.dl_events++;
	if (!t)
		return;
	n = target__scan(t, d->cache, d->probes);
	if (n > 0)
		log_verbose("tptrace: pid %d loaded new code: %d probes attached\n", t->pid, n);
}

int decoder__ring_cb(void *ctx, void *data, size_t size)
{
	struct decoder *d = ctx;
	uint32_t type;

	if (size < sizeof(type)) {
		d->stats.bad_records++;
		return 0;
	}
	memcpy(&type, data, sizeof(type));
	switch (type) {
	case TP_REC_CALL: {
		/* short records carry no deref[]: copy into a zeroed full record */
		struct tp_rec_call c = {};

		if (size < TP_REC_CALL_SHORT_SIZE)
			break;
		memcpy(&c, data, size < sizeof(c) ? size : sizeof(c));
		if (c.api >= (uint32_t)cuda_api_count &&
		    (c.api < NCCL_API_BASE || c.api >= NCCL_API_BASE + (uint32_t)nccl_api_count))
			break;
		d->stats.records++;
		on_call(d, &c);
		return 0;
	}
	case TP_REC_RET: {
		uint32_t api = ((struct tp_rec_ret *)data)->api;

		if (size < sizeof(struct tp_rec_ret) || (api >= (uint32_t)cuda_api_count &&
		    (api < NCCL_API_BASE || api >= NCCL_API_BASE + (uint32_t)nccl_api_count)))
			break;
		d->stats.records++;
		on_return(d, data);
		return 0;
	}
	case TP_REC_DLOPEN:
		if (size < sizeof(struct tp_rec_dlopen))
			break;
		on_dlopen(d, data);
		return 0;
	case TP_REC_EXIT: {
		const struct tp_rec_exit *x = data;
		struct target *t;

		if (size < sizeof(*x))
			break;
		t = find_target(d, x->pid);
		if (t) {
			/* the main loop notices the exit itself (pidfd) and says so */
			t->exit_code = (int)x->exit_code;
			t->exit_ns = x->ts;
		}
		return 0;
	}
	}
	d->stats.bad_records++;
	return 0;
}

void decoder__finish(struct decoder *d, uint64_t end_ns)
{
	for (size_t i = 0; i < d->threads.cap; i++) {
		struct thread *th;

		if (!d->threads.keys[i])
			continue;
		th = (struct thread *)(uintptr_t)d->threads.vals[i];
		struct target *t = find_target(d, th->pid);
		/* a process that died inside a call was inside it until it died */
		uint64_t end = t && t->exited && t->exit_ns ? t->exit_ns : end_ns;

		for (int j = th->depth - 1; j >= 0; j--) {
			emit_call(d, &th->stack[j].call, th->stack[j].correlation, NULL, end);
			d->stats.unfinished++;
		}
		th->depth = 0;
	}
}
