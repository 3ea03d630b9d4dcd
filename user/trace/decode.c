// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "calls.h"
#include "cuda.h"
#include "cuda_api.h"
#include "decode.h"
#include "hashmap.h"
#include "log.h"
#include "nccl_api.h"
#include "demangle.h"
#include "gpu_sink.h"
#include "gpu_trace.h"
#include "procmaps.h"
#include "session.h"
#include "target.h"
#include "trace_json.h"
#include "ustack.h"
#include "trace_stacks.h"

struct decoder {
	struct trace_json *tj;
	struct elfsym_cache *cache;
	struct session *session;	/* the acquisition core that hands calls over */
	size_t user_off;		/* where its bytes are in a call_frame's user */
	struct u64map named_threads;	/* pid << 32 | tid -> 1: thread_name written */
	uint64_t next_correlation;
	struct decoder_stats stats;
	uint64_t nested_open;		/* nested driver calls open when their process exited or
					 * the trace ended: not unfinished calls of their own */

	/* --gpu: the GPU tracks, and the calls the join (gpu_sink.h) held, decided; NULL without */
	struct gpu_trace *gpu;
	struct u64map gpu_procs;	/* --gpu: pid + 1 -> its ordinal (the order they were set up) */
	uint32_t nr_gpu_procs;
	/* --gpu: a host stream handle -> the CUPTI stream id its work ran on (the number its
	 * GPU track is named by), learned from joined calls; see stream_key */
	struct u64map stream_ids;
	/* the host event being written: its process and thread, its join result */
	int cur_pid, cur_tid;
	const struct gpu_join_result *cur_jr;

	/* --py-stacks */
	ustack_lookup_fn ustack_lookup;	/* NULL: stack ids are ignored */
	void *ustack_ctx;
	struct u64map py_threads;	/* pid << 32 | tid -> struct py_thread * */
	uint64_t next_py_id;		/* Kineto's "Python id" of the next slice */

	/* BEGIN at entry: the writer opens calls (trace_writer__wants_open) */
	bool open_calls;
	bool opening;			/* writing a call's open: what its entry says */
};

/* What the decoder keeps in its user bytes of a call_frame (session.h). */
enum {
	USER_CORRELATION,
	USER_PY_DEPTH,		/* Python frames of the call's stack when it entered */
	USER_PY_INNER_ID,	/* the "Python id" of the innermost of them */
	USER_SLOTS
};

/* --py-stacks: one Python frame drawn as a python_function slice on its thread, open while
 * the thread's calls keep showing it. It stands for one activation of the function as far as
 * the probes can tell: the same code object at the same depth, called from the same line of
 * its parent. (Two calls from one line with no probed call between them in which the frame is
 * missing are one slice: nothing in the records tells them apart.) */
struct py_slice {
	uint64_t code;
	int call_line;		/* the parent frame's line at the call; 0 for the outermost */
	uint64_t id;
	uint64_t start, end;
	/* the last call in it has no return probe and is drawn by the --gpu join with CUPTI's
	 * times, later than its probe: the slice then lasts until the thread's next call */
	bool end_open;
	char *name;		/* "<co_filename>(<co_firstlineno>): <func>", as torch.profiler */
};

struct py_thread {
	int pid, tid;
	int depth;
	struct py_slice open[TP_PY_MAX_FRAMES];	/* outermost first */
};

static void dec_entry(void *ctx, struct call_frame *f, void *user);
static void dec_call(void *ctx, const struct call *c, void *user);
static void dec_exit(void *ctx, const struct tp_rec_exit *x);

struct decoder *decoder__new(struct session *s, struct trace_json *tj,
			     struct elfsym_cache *cache)
{
	static const struct session_sink_ops ops = {
		.user_bytes = USER_SLOTS * sizeof(uint64_t),
		.on_entry = dec_entry, .on_call = dec_call, .on_exit = dec_exit,
	};
	struct decoder *d = calloc(1, sizeof(*d));
	int err;

	if (!d)
		return NULL;
	d->tj = tj;
	d->cache = cache;
	d->session = s;
	d->next_correlation = 1;
	d->open_calls = trace_writer__wants_open(tj);
	err = session__add_sink(s, &ops, d, &d->user_off);
	if (err) {
		free(d);
		errno = -err;
		return NULL;
	}
	return d;
}

void decoder__free(struct decoder *d)
{
	uint64_t v;

	if (!d)
		return;
	u64map__clear(&d->named_threads);
	u64map__clear(&d->stream_ids);
	for (size_t it = 0; u64map__next(&d->py_threads, &it, NULL, &v);) {
		struct py_thread *th = (struct py_thread *)(uintptr_t)v;

		for (int i = 0; i < th->depth; i++)
			free(th->open[i].name);
	}
	u64map__free_values(&d->py_threads);
	u64map__clear(&d->gpu_procs);
	gpu_trace__free(d->gpu);
	free(d);
}

int decoder__set_ustacks(struct decoder *d, ustack_lookup_fn lookup, void *ctx)
{
	d->ustack_lookup = lookup;
	d->ustack_ctx = ctx;
	d->next_py_id = 1;
	return 0;
}

const struct decoder_stats *decoder__stats(struct decoder *d)
{
	const struct calls_stats *cs = session__stats(d->session);

	d->stats.records = cs->records;
	d->stats.orphan_returns = cs->orphan_returns;
	d->stats.bad_records = cs->bad_records;
	d->stats.depth_overflows = cs->depth_overflows;
	d->stats.unwound = cs->unwound;
	d->stats.unfinished = cs->unfinished + cs->exited_in_call - d->nested_open;
	d->stats.dl_events = cs->dlopens;
	return &d->stats;
}

static struct target *find_target(struct decoder *d, int pid)
{
	return session__target(d->session, pid);
}

/* Names a thread the first time it shows up, while it still exists. */
static void name_thread(struct decoder *d, int pid, int tid)
{
	uint64_t key = (uint64_t)(uint32_t)pid << 32 | (uint32_t)tid, v;
	char name[64];

	if (!key || u64map__get(&d->named_threads, key, &v))
		return;
	u64map__set(&d->named_threads, key, 1);
	if (procmaps__thread_name(pid, tid, name, sizeof(name)) || !name[0])
		snprintf(name, sizeof(name), "thread %d", tid);
	trace_json__thread_name(d->tj, pid, tid, name);
}

/* (process, handle) -> key; the default-stream handles (0 legacy, 1 cudaStreamLegacy, 2
 * cudaStreamPerThread) name another stream in each thread (per-thread) or context: keyed by
 * thread as well. */
static uint64_t stream_key(int pid, int tid, uint64_t stream)
{
	uint64_t k = (uint64_t)(uint32_t)pid << 32 ^ stream * 0x9e3779b97f4a7c15ULL;

	if (stream <= 2)
		k ^= (uint64_t)(uint32_t)tid * 0xff51afd7ed558ccdULL;
	return k ? k : 1;
}

static void arg_stream(struct decoder *d, struct trace_json *tj, uint64_t stream)
{
	const struct gpu_join_result *jr = d->cur_jr;
	uint64_t id;

	/* the cudaStream_t value: 0 legacy default, 1 cudaStreamLegacy, 2 cudaStreamPerThread.
	 * A handle, so hex ("0x5100"), as the memory and NCCL calls write theirs: an integer
	 * "stream" is a GPU stream id in Kineto's format, and HTA takes every event that has
	 * one for GPU work (host calls counted as kernels). */
	trace_json__arg_hex(tj, "stream", stream);
	if (!d->gpu)
		return;
	/* --gpu: the GPU track's name, so the two can be matched by eye ("stream 7"): from this
	 * call's own work, else from an earlier call on the same handle */
	if (jr && jr->status == GPU_JOIN_JOINED && jr->has_work)
		u64map__set(&d->stream_ids, stream_key(d->cur_pid, d->cur_tid, stream),
			    (uint64_t)jr->stream + 1);
	if (u64map__get(&d->stream_ids, stream_key(d->cur_pid, d->cur_tid, stream), &id) && id) {
		char name[32];

		snprintf(name, sizeof(name), "stream %llu", (unsigned long long)(id - 1));
		trace_json__arg_str(tj, "stream track", name);
	}
}

/* The launch config's attributes (cudaLaunchKernelExC, cuLaunchKernelEx), each under its
 * name; the values union is read per id (cuda.h, CUlaunchAttributeValue). */
static void launch_attr_args(struct trace_json *tj, const struct cuda_launch *l)
{
	char key[48], val[96];

	trace_json__arg_u64(tj, "attributes", l->config_attrs);
	if (l->attrs_unreadable) {
		trace_json__arg_bool(tj, "attributes unreadable", true);
		return;
	}
	if (l->config_attrs > l->nr_attrs)
		trace_json__arg_u64(tj, "attributes not read", l->config_attrs - l->nr_attrs);
	for (uint32_t i = 0; i < l->nr_attrs; i++) {
		const uint8_t *v = l->attrs[i].val;
		const char *name = cuda_launch_attr_name(l->attrs[i].id);
		uint32_t u[3];
		int32_t in;
		uint64_t q[2];
		float f;

		memcpy(u, v, sizeof(u));
		memcpy(&in, v, sizeof(in));
		memcpy(q, v, sizeof(q));
		switch (l->attrs[i].id) {
		case 0:		/* CU_LAUNCH_ATTRIBUTE_IGNORE: an empty slot */
			break;
		case 2:		/* int cooperative */
		case 6:		/* int programmaticStreamSerializationAllowed */
		case 8:		/* int priority */
			trace_json__arg_i64(tj, name, in);
			break;
		case 4:		/* clusterDim {x, y, z} */
		case 11:	/* preferredClusterDim */
			trace_json__arg_dim3(tj, name, u[0], u[1], u[2]);
			break;
		case 7:		/* programmaticEvent {CUevent, int flags, int triggerAtBlockStart} */
			snprintf(val, sizeof(val), "event=0x%llx flags=%d triggerAtBlockStart=%d",
				 (unsigned long long)q[0], (int32_t)(q[1] & 0xffffffff),
				 (int32_t)(q[1] >> 32));
			trace_json__arg_str(tj, name, val);
			break;
		case 12:	/* launchCompletionEvent {CUevent, int flags} */
			snprintf(val, sizeof(val), "event=0x%llx flags=%d",
				 (unsigned long long)q[0], (int32_t)(q[1] & 0xffffffff));
			trace_json__arg_str(tj, name, val);
			break;
		case 1:		/* accessPolicyWindow {base_ptr, num_bytes, float hitRatio,
				 * hitProp, missProp} */
			memcpy(&f, v + 16, sizeof(f));
			memcpy(u, v + 20, 2 * sizeof(u[0]));
			snprintf(val, sizeof(val), "base=0x%llx bytes=%llu hitRatio=%g hitProp=%u "
				 "missProp=%u", (unsigned long long)q[0], (unsigned long long)q[1],
				 (double)f, u[0], u[1]);
			trace_json__arg_str(tj, name, val);
			break;
		case 9:		/* memSyncDomainMap {unsigned char default_, remote} */
			snprintf(val, sizeof(val), "default=%u remote=%u", v[0], v[1]);
			trace_json__arg_str(tj, name, val);
			break;
		case 13:	/* deviceUpdatableKernelNode {int deviceUpdatable, devNode} */
			snprintf(val, sizeof(val), "deviceUpdatable=%d devNode=0x%llx", in,
				 (unsigned long long)q[1]);
			trace_json__arg_str(tj, name, val);
			break;
		default:
			if (name) {	/* an enum or unsigned int value */
				trace_json__arg_u64(tj, name, u[0]);
			} else {	/* unknown to this table: its id and first 8 bytes */
				snprintf(key, sizeof(key), "attribute %u", l->attrs[i].id);
				trace_json__arg_hex(tj, key, q[0]);
			}
			break;
		}
	}
}

static void launch_args(struct decoder *d, struct target *t, const struct tp_rec_call *c,
			const char *gpu_kernel)
{
	struct trace_json *tj = d->tj;
	struct cuda_launch l;
	struct kernel_name k;

	cuda_api_decode_launch(c, &l);
	target__kernel_name(t, d->cache, &l, c->ts, &k);
	if (l.config_unreadable)
		trace_json__arg_bool(tj, "config unreadable", true);
	else if (l.has_config)
		launch_attr_args(tj, &l);
	if (!k.name && gpu_kernel) {
		/* CUPTI named the kernel this launch produced: keep it for later launches of the
		 * same handle, also after the agent is gone */
		k.name = gpu_kernel;
		k.source = "cupti";
		if (t && (k.handle || l.func_or_handle) && (!l.has_config || l.driver))
			target__set_handle(t, k.handle ? k.handle : l.func_or_handle, k.name, "cupti");
	}
	if (k.name) {
		trace_json__arg_str(tj, "kernel", k.name);
		d->stats.launches_named += !d->opening;
	} else {
		char raw[48];

		snprintf(raw, sizeof(raw), "%s 0x%llx", k.func ? "func" : "handle",
			 (unsigned long long)(k.func ? k.func : l.func_or_handle));
		trace_json__arg_str(tj, "kernel", raw);
		k.source = "unresolved";
	}
	trace_json__arg_str(tj, "kernel source", k.source);
	if (k.func)
		trace_json__arg_hex(tj, "func", k.func);
	else
		trace_json__arg_hex(tj, "handle", k.handle ? k.handle :
				    l.has_config ? 0 : l.func_or_handle);
	/* an unreadable launch config: its fields are unknown, not 0 ("config unreadable") */
	if (!l.config_unreadable) {
		trace_json__arg_dim3(tj, "grid", l.grid[0], l.grid[1], l.grid[2]);
		trace_json__arg_dim3(tj, "block", l.block[0], l.block[1], l.block[2]);
		trace_json__arg_u64(tj, "shared memory", l.shmem);
		arg_stream(d, tj, l.stream);
	}
	d->stats.launches += !d->opening;
}

/* "0,1,2" */
static void arg_int_list(struct trace_json *tj, const char *key, const int32_t *v, int n)
{
	char list[NCCL_SHRINK_EXCLUDE_MAX * 12] = "";
	int len = 0;

	for (int i = 0; i < n; i++)
		len += snprintf(list + len, sizeof(list) - len, "%s%d", i ? "," : "", v[i]);
	trace_json__arg_str(tj, key, list);
}

/* --py-stacks: the event's "stack" arg (ustack__write_args), counted. */
static void stack_args(struct decoder *d, const struct tp_rec_call *c)
{
	int kind;

	if (!d->ustack_lookup)
		return;
	kind = ustack__write_args(d->tj, d->ustack_lookup, d->ustack_ctx, c->pid, c->ustack);
	if (d->opening)
		return;		/* counted once, when the call is written */
	switch (kind) {
	case USTACK_ARG_STACK:
		d->stats.stacks++;
		break;
	case USTACK_ARG_STATUS:
		d->stats.stacks_status++;
		break;
	case USTACK_ARG_MISSING:
		d->stats.stacks_missing++;
		break;
	default:
		break;
	}
}

/* A call's event: complete ("X", when it completed), or its open (d->opening: at its entry,
 * with what the entry says; trace_writer__call_open) */
static void call_event(struct decoder *d, const char *cat, const char *name, uint32_t pid,
		       uint32_t tid, uint64_t ts, uint64_t dur)
{
	if (d->opening)
		trace_writer__call_open(d->tj, cat, name, (int)pid, (int)tid, ts);
	else
		trace_json__event(d->tj, "X", cat, name, (int)pid, (int)tid, ts, dur);
}

/* NCCL calls on the CPU timeline: cat "nccl", the collective's arguments decoded per the
 * NCCL 2.28 ABI (nccl_api.c), rc and duration from the return probe. */
static void emit_nccl(struct decoder *d, const struct tp_rec_call *c, uint64_t correlation,
		      const struct tp_rec_ret *r, uint64_t end_ns)
{
	const struct nccl_api *api = &nccl_apis[c->api - NCCL_API_BASE];
	struct trace_json *tj = d->tj;
	uint64_t dur = r ? r->ts - c->ts : (end_ns > c->ts ? end_ns - c->ts : 0);
	bool out_ok = r && (r->flags & TP_RET_OUT_VALID);

	d->cur_pid = (int)c->pid;
	d->cur_tid = (int)c->tid;
	d->cur_jr = NULL;
	call_event(d, "nccl", api->symbol, c->pid, c->tid, c->ts, dur);
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
		arg_stream(d, tj, o.stream);
		break;
	}
	case NAPI_INIT_RANK:
	case NAPI_INIT_RANK_CONFIG:
	case NAPI_INIT_SCALABLE: {
		struct nccl_init in;
		char id[24];

		nccl_api_decode_init(api, c, &in);
		trace_json__arg_i64(tj, "nranks", in.nranks);
		trace_json__arg_i64(tj, "rank", in.rank);
		if (api->kind == NAPI_INIT_SCALABLE)
			trace_json__arg_i64(tj, "nId", in.nid);
		if (in.has_id) {
			snprintf(id, sizeof(id), "%016llx", (unsigned long long)in.id_hash);
			trace_json__arg_str(tj, "comm_id", id);
		}
		if (api->kind != NAPI_INIT_RANK)
			trace_json__arg_hex(tj, "config", in.config);
		if (out_ok)
			trace_json__arg_hex(tj, "new comm", r->out_val);
		break;
	}
	case NAPI_INIT_ALL: {
		struct nccl_init in;

		nccl_api_decode_init(api, c, &in);
		trace_json__arg_i64(tj, "ndev", in.nranks);
		if (in.nlist)
			arg_int_list(tj, "devlist", in.list, in.nlist);
		break;
	}
	case NAPI_SPLIT: {
		struct nccl_init in;

		nccl_api_decode_init(api, c, &in);
		trace_json__arg_hex(tj, "comm", in.parent);
		trace_json__arg_i64(tj, "color", in.color);
		trace_json__arg_i64(tj, "key", in.key);
		trace_json__arg_hex(tj, "config", in.config);
		if (out_ok)
			trace_json__arg_hex(tj, "new comm", r->out_val);
		break;
	}
	case NAPI_SHRINK: {
		struct nccl_init in;

		nccl_api_decode_init(api, c, &in);
		trace_json__arg_hex(tj, "comm", in.parent);
		trace_json__arg_i64(tj, "exclude count", in.nexclude);
		if (in.nlist)
			arg_int_list(tj, "exclude", in.list, in.nlist);
		trace_json__arg_i64(tj, "flags", in.shrink_flags);
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
	stack_args(d, c);
	trace_json__event_end(tj);
	d->stats.calls += !d->opening;
}

/* A driver call made by a runtime call (cudaLaunchKernel -> cuLaunchKernel, cudaMemcpy ->
 * cuMemcpy...; target__call_nesting): that call is the one written; the driver call is
 * counted, never written and never counted as a launch. One NCCL made is written. */
static bool nested_driver_call(struct decoder *d, const struct tp_rec_call *c)
{
	return session__driver_call_in_runtime(d->session, c);
}

static void emit_host(struct decoder *d, const struct tp_rec_call *c, uint64_t correlation,
		      const struct tp_rec_ret *r, uint64_t end_ns,
		      const struct gpu_join_result *jr);

/* jr: what the --gpu join said about a call it held (NULL: written at its arrival). */
static void write_call(struct decoder *d, const struct call *c, uint64_t correlation,
		       const struct gpu_join_result *jr)
{
	const struct tp_rec_call *rec = &c->frame->rec;
	const struct tp_rec_ret *r = c->end == CALL_RETURNED ? c->ret : NULL;
	/* unwound, exited, unfinished: written as a slice up to end_ns, marked "unfinished" */
	uint64_t end_ns = c->end == CALL_UNWOUND || c->end == CALL_EXITED ||
			  c->end == CALL_UNFINISHED ? c->end_ns : 0;

	if (rec->api >= NCCL_API_BASE)
		emit_nccl(d, rec, correlation, r, end_ns);
	else
		emit_host(d, rec, correlation, r, end_ns, jr);
}

/* cuMemcpy*, cuMemcpy2D*, cuMemsetD*: the arguments cuda_api_decode_copy read */
static void drv_copy_args(struct decoder *d, struct trace_json *tj, const struct tp_rec_call *c)
{
	struct cuda_copy cp;

	cuda_api_decode_copy(c, &cp);
	if (cp.unreadable) {
		trace_json__arg_bool(tj, "copy parameters unreadable", true);
	} else if (cuda_apis[c->api].kind == API_DRV_MEMSET) {
		trace_json__arg_u64(tj, "bytes", cp.bytes);
		trace_json__arg_u64(tj, "element size", cp.elem_size);
		trace_json__arg_u64(tj, "elements", cp.elements);
		trace_json__arg_u64(tj, "value", cp.value);
		trace_json__arg_hex(tj, "dst", cp.dst);
	} else {
		trace_json__arg_u64(tj, "bytes", cp.bytes);
		trace_json__arg_str(tj, "kind", cp.kind_str);
		if (cp.is_2d) {
			trace_json__arg_u64(tj, "width", cp.width);
			trace_json__arg_u64(tj, "height", cp.height);
			trace_json__arg_u64(tj, "dpitch", cp.dpitch);
			trace_json__arg_u64(tj, "spitch", cp.spitch);
		}
		trace_json__arg_hex(tj, "dst", cp.dst);
		trace_json__arg_hex(tj, "src", cp.src);
		if (cuda_apis[c->api].copy_kind == CUDA_COPY_PTOP) {
			trace_json__arg_hex(tj, "dst context", cp.dst_ctx);
			trace_json__arg_hex(tj, "src context", cp.src_ctx);
		}
	}
	/* synchronous driver copies run on the legacy default stream */
	arg_stream(d, tj, cp.stream);
}

/* cuModuleGetFunction / cuLibraryGetKernel (out, owner, name) and cuKernelGetFunction
 * (CUfunction *out, CUkernel): the handle they return is named for later launches. */
static void drv_handle_args(struct trace_json *tj, struct target *t, const struct tp_rec_call *c,
			    const struct tp_rec_ret *r)
{
	bool out_ok = r && (r->flags & TP_RET_OUT_VALID) && (int32_t)r->rc == 0 && r->out_val;
	const char *sym = cuda_apis[c->api].symbol;

	if (cuda_apis[c->api].kind == API_DRV_KERNEL_GET_FUNCTION) {
		const char *src = NULL, *name = t ? target__handle_name(t, c->args[1], &src) : NULL;

		trace_json__arg_hex(tj, "kernel handle", c->args[1]);
		if (name)
			trace_json__arg_str(tj, "kernel", name);
		if (out_ok) {
			trace_json__arg_hex(tj, "function", r->out_val);
			/* the CUfunction of a CUkernel inherits its name */
			if (name)
				target__set_handle(t, r->out_val, name, src);
		}
		return;
	}
	{
		bool library = !strcmp(sym, "cuLibraryGetKernel");
		bool bad = c->flags & TP_CALL_DEREF_FAULT;
		char copied[TP_DEREF_MAX + 1], *name;

		/* the probe copied a NUL-terminated string; bound it all the same */
		memcpy(copied, c->deref, TP_DEREF_MAX);
		copied[TP_DEREF_MAX] = '\0';
		name = bad ? NULL : demangle(copied);

		trace_json__arg_hex(tj, library ? "library" : "module", c->args[1]);
		if (name)
			trace_json__arg_str(tj, "name", name);
		else
			trace_json__arg_bool(tj, "name unreadable", true);
		if (out_ok) {
			trace_json__arg_hex(tj, library ? "kernel handle" : "function", r->out_val);
			if (t && name)
				target__set_handle(t, r->out_val, name, library ? "library" : "module");
		}
		free(name);
	}
}

/* jr: what the --gpu join said about the call (NULL: not joined). A joined entry-only call
 * is drawn with CUPTI's start and duration: the probe saw only its entry. */
static void emit_host(struct decoder *d, const struct tp_rec_call *c, uint64_t correlation,
		      const struct tp_rec_ret *r, uint64_t end_ns,
		      const struct gpu_join_result *jr)
{
	const struct cuda_api *api = &cuda_apis[c->api];
	struct target *t = find_target(d, c->pid);
	struct trace_json *tj = d->tj;
	const char *gpu_kernel = jr ? jr->kernel : NULL;
	uint64_t dur = r ? r->ts - c->ts : (end_ns > c->ts ? end_ns - c->ts : 0), ts = c->ts;

	d->cur_pid = (int)c->pid;
	d->cur_tid = (int)c->tid;
	d->cur_jr = jr;
	if (jr && jr->status == GPU_JOIN_JOINED && !r && !end_ns) {
		ts = jr->api_start;
		dur = jr->api_end > jr->api_start ? jr->api_end - jr->api_start : 0;
	}
	call_event(d, api->domain == CUDA_DOM_DRIVER ? "cuda_driver" : "cuda_runtime", api->name,
		   c->pid, c->tid, ts, dur);
	switch (api->kind) {
	case API_LAUNCH:
	case API_LAUNCH_HANDLE:
	case API_LAUNCH_EXC:
	case API_DRV_LAUNCH:
	case API_DRV_LAUNCH_EX:
		launch_args(d, t, c, gpu_kernel);
		break;
	case API_DRV_MEMCPY:
	case API_DRV_MEMCPY2D:
	case API_DRV_MEMSET:
		drv_copy_args(d, tj, c);
		break;
	case API_DRV_GET_FUNCTION:
	case API_DRV_KERNEL_GET_FUNCTION:
		drv_handle_args(tj, t, c, r);
		break;
	case API_GET_KERNEL: {
		const char *name = t ? target__symbolize(t, c->args[1]) : NULL;

		/* a stub symbol names its kernel (legacy host functions carry the kernel's name) */
		if (t && c->args[1] && target__stub_kernel(t, c->args[1]))
			name = target__stub_kernel(t, c->args[1]);
		trace_json__arg_str(tj, "kernel", name ? name : "");
		trace_json__arg_hex(tj, "func", c->args[1]);
		if (r && (r->flags & TP_RET_OUT_VALID)) {
			trace_json__arg_hex(tj, "handle", r->out_val);
			if (t && name && r->out_val)
				target__set_handle(t, r->out_val, name, "getkernel");
		}
		break;
	}
	case API_GRAPH_LAUNCH:
		trace_json__arg_hex(tj, "graph", c->args[0]);
		arg_stream(d, tj, c->args[1]);
		break;
	case API_MEMCPY:
	case API_MEMCPY_ASYNC:
		trace_json__arg_u64(tj, "bytes", c->args[2]);
		trace_json__arg_str(tj, "kind", cuda_memcpy_kind_str(c->args[3]));
		trace_json__arg_hex(tj, "dst", c->args[0]);
		trace_json__arg_hex(tj, "src", c->args[1]);
		arg_stream(d, tj, api->kind == API_MEMCPY_ASYNC ? c->args[4] : 0);
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
		arg_stream(d, tj, api->kind == API_MEMCPY2D_ASYNC ? c->stack[2] : 0);
		break;
	case API_MEMSET:
	case API_MEMSET_ASYNC:
		trace_json__arg_u64(tj, "bytes", c->args[2]);
		trace_json__arg_i64(tj, "value", (int32_t)c->args[1]);
		trace_json__arg_hex(tj, "ptr", c->args[0]);
		arg_stream(d, tj, api->kind == API_MEMSET_ASYNC ? c->args[3] : 0);
		break;
	case API_STREAM_SYNC:
	case API_DEVICE_SYNC:
	case API_EVENT_SYNC:
	case API_EVENT_QUERY:
	case API_EVENT_RECORD:
	case API_EVENT_RECORD_FLAGS:
	case API_STREAM_WAIT_EVENT: {
		struct cuda_sync sy;

		cuda_api_decode_sync(c, &sy);
		if (api->kind == API_STREAM_WAIT_EVENT)
			arg_stream(d, tj, sy.stream);
		if (api->kind != API_STREAM_SYNC && api->kind != API_DEVICE_SYNC)
			trace_json__arg_hex(tj, "event", sy.event);
		if (sy.has_stream && api->kind != API_STREAM_WAIT_EVENT)
			arg_stream(d, tj, sy.stream);
		if (sy.has_flags)
			trace_json__arg_u64(tj, "flags", sy.flags);
		break;
	}
	}
	trace_json__arg_u64(tj, "correlation", correlation);
	if (jr && jr->status != GPU_JOIN_JOINED)
		trace_json__arg_str(tj, "cupti", jr->status_str);
	if (api->per_thread)
		trace_json__arg_bool(tj, "per-thread stream", true);
	if (r)
		trace_json__arg_i64(tj, "rc", (int32_t)r->rc);
	else if (end_ns)
		trace_json__arg_bool(tj, "unfinished", true);
	stack_args(d, c);
	trace_json__event_end(tj);
	d->stats.calls += !d->opening;
}

/* ---- --gpu: the consumer of the join's output (gpu_sink.h) ---- */

/* A held call decided: written with CUPTI's correlation when joined, else with its own. */
static void gpu_joined(void *ctx, const struct call *c, const struct gpu_join_result *jr)
{
	struct decoder *d = ctx;
	const uint64_t *slot = (const uint64_t *)((const char *)c->frame->user + d->user_off);

	write_call(d, c, jr->status == GPU_JOIN_JOINED ? jr->correlation : slot[USER_CORRELATION],
		   jr);
}

/* The arrow's id is unique in the trace: the process's ordinal above its correlation id (the
 * first process's arrows keep Kineto's id = correlation). */
static void gpu_flow(void *ctx, int pid, int tid, uint32_t correlation, uint64_t host_ts,
		     uint32_t device, uint32_t context, uint32_t stream, uint64_t work_start)
{
	struct decoder *d = ctx;
	uint64_t ordinal = 0;

	u64map__get(&d->gpu_procs, (uint64_t)(uint32_t)pid + 1, &ordinal);
	gpu_trace__flow(d->gpu, ordinal << 32 | correlation, pid, tid, host_ts, (int)device,
			context, (int)stream, work_start);
}

static int gpu_process(void *ctx, int pid, const char *comm)
{
	struct decoder *d = ctx;
	uint64_t key = (uint64_t)(uint32_t)pid + 1, v;

	if (gpu_trace__set_process(d->gpu, pid, comm))
		return -ENOMEM;
	if (u64map__get(&d->gpu_procs, key, &v))
		return 0;
	return u64map__set(&d->gpu_procs, key, d->nr_gpu_procs++) ? -ENOMEM : 0;
}

/* GPU work on the process's device/context/stream track, as it arrives */
static void gpu_record(void *ctx, int pid, const struct agent_record *r)
{
	struct decoder *d = ctx;

	gpu_trace__record(d->gpu, pid, r);
}

int decoder__enable_gpu(struct decoder *d, struct gpu_sink *g)
{
	static const struct gpu_sink_consumer ops = {
		.process = gpu_process, .record = gpu_record, .joined = gpu_joined,
		.flow = gpu_flow,
	};
	int err;

	d->gpu = gpu_trace__new(d->tj);
	if (!d->gpu)
		return -ENOMEM;
	err = gpu_sink__subscribe(g, &ops, d);
	if (err) {
		gpu_trace__free(d->gpu);
		d->gpu = NULL;
		return err;
	}
	/* uprobe-only events keep ids CUPTI never hands out */
	d->next_correlation = 1ULL << 40;
	return 0;
}

/* ---- --py-stacks: python_function slices ----
 * Built from the sequence of stacks each thread's calls carry, in the order the calls entered
 * (the calls core hands entries over in order; completions come innermost first). At an
 * entry, the frames of the thread's open slices that the new stack does not share are closed
 * and the new stack's other frames opened at the entry's time; when a call completes, the
 * slices it entered under are stretched to its end. So every slice covers the calls made
 * under it, and a parent covers its children. */

static struct py_thread *py_thread(struct decoder *d, int pid, int tid, bool create)
{
	uint64_t key = (uint64_t)(uint32_t)pid << 32 | (uint32_t)tid, v;
	struct py_thread *th;
	bool created;

	if (!create)
		return u64map__get(&d->py_threads, key ? key : 1, &v) ?
		       (struct py_thread *)(uintptr_t)v : NULL;
	th = u64map__get_or_alloc(&d->py_threads, key ? key : 1, sizeof(*th), &created);
	if (th && created) {
		th->pid = pid;
		th->tid = tid;
	}
	return th;
}

/* Writes the slices at depth >= keep, innermost first; next_ts: when the thread's next call
 * entered (what an open end stretches to). */
static void py_close(struct decoder *d, struct py_thread *th, int keep, uint64_t next_ts)
{
	while (th->depth > keep) {
		struct py_slice *o = &th->open[--th->depth];
		uint64_t end = o->end_open && next_ts > o->end ? next_ts : o->end;

		/* opened by trace_writer__slice_begin in py_entry */
		trace_json__event(d->tj, "E", "python_function", o->name, th->pid, th->tid,
				  o->start, end - o->start);
		trace_json__arg_u64(d->tj, "Python id", o->id);
		if (th->depth)
			trace_json__arg_u64(d->tj, "Python parent id", th->open[th->depth - 1].id);
		trace_json__event_end(d->tj);
		free(o->name);
		o->name = NULL;
		d->stats.python_slices++;
	}
}

static char *py_slice_name(const struct ustack_frame *f)
{
	char *name = NULL;
	int n;

	/* a code object that could not be read has no name, file or line to show */
	if (f->unresolved || !f->func)
		n = asprintf(&name, "<unresolved code 0x%llx>", (unsigned long long)f->code);
	else
		n = asprintf(&name, "%s(%d): %s", f->file ? f->file : "?", f->firstlineno, f->func);
	return n < 0 ? NULL : name;
}

/* A call entered with its stack: the thread's slices follow it. Its user slots get the number
 * of Python frames it entered under and the innermost one's id, for py_call_end. */
static void py_entry(struct decoder *d, const struct call_frame *f, uint64_t *user)
{
	const struct tp_rec_call *c = &f->rec;
	const struct ustack *s = NULL;
	struct py_thread *th;
	int n, same = 0;

	user[USER_PY_DEPTH] = 0;
	if (!d->ustack_lookup || c->ustack == TP_USTACK_NONE)
		return;
	if (c->ustack >= TP_USTACK_FIRST_ID) {
		s = d->ustack_lookup(d->ustack_ctx, c->pid, c->ustack);
		if (!s)
			return;
	} else if (c->ustack != TP_USTACK_NOPY) {
		/* lost or unreadable: the stack is unknown, the open slices stay as they are */
		return;
	}
	/* no Python thread state: this thread runs no Python now */
	n = s ? s->nr_py : 0;
	if (n > TP_PY_MAX_FRAMES)
		n = TP_PY_MAX_FRAMES;
	th = py_thread(d, c->pid, c->tid, n > 0);
	if (!th)
		return;
	/* s->py is innermost first: outermost-first position i is s->py[n - 1 - i] */
	for (; same < th->depth && same < n; same++) {
		const struct ustack_frame *fr = &s->py[n - 1 - same];
		int call_line = same ? s->py[n - same].line : 0;

		if (th->open[same].code != fr->code || th->open[same].call_line != call_line)
			break;
	}
	py_close(d, th, same, c->ts);
	for (int i = 0; i < same; i++)
		if (c->ts < th->open[i].start)
			th->open[i].start = c->ts;
	for (int i = same; i < n; i++) {
		const struct ustack_frame *fr = &s->py[n - 1 - i];
		struct py_slice *o = &th->open[i];
		char *name = py_slice_name(fr);

		if (!name)
			break;
		*o = (struct py_slice){ .code = fr->code, .call_line = i ? s->py[n - i].line : 0,
					.id = d->next_py_id++, .start = c->ts, .end = c->ts,
					.name = name };
		th->depth = i + 1;
		trace_writer__slice_begin(d->tj, "python_function", name, th->pid, th->tid, c->ts);
	}
	user[USER_PY_DEPTH] = th->depth;
	user[USER_PY_INNER_ID] = th->depth ? th->open[th->depth - 1].id : 0;
}

/* A call completed (end: its slice's end; end_open: it may be drawn later than that): the
 * slices it entered under, when still open, last at least as long. */
static void py_call_end(struct decoder *d, const struct call_frame *f, const uint64_t *user,
			uint64_t end, bool end_open)
{
	int n = (int)user[USER_PY_DEPTH];
	struct py_thread *th;

	if (!n)
		return;
	th = py_thread(d, f->rec.pid, f->rec.tid, false);
	/* closed since by an entry with another stack: only a Python callback inside the call
	 * can do that */
	if (!th || th->depth < n || th->open[n - 1].id != user[USER_PY_INNER_ID])
		return;
	for (int i = 0; i < n; i++) {
		struct py_slice *o = &th->open[i];

		if (end > o->end) {
			o->end = end;
			o->end_open = end_open;
		} else if (end == o->end) {
			o->end_open |= end_open;
		}
	}
}

/* Closes the slices of pid's threads (0: all) at the end of their last calls. */
static void py_close_all(struct decoder *d, int pid, uint64_t end_ns)
{
	uint64_t v;

	for (size_t it = 0; u64map__next(&d->py_threads, &it, NULL, &v);) {
		struct py_thread *th = (struct py_thread *)(uintptr_t)v;

		if (!pid || th->pid == pid)
			py_close(d, th, 0, end_ns);
	}
}

/* ---- the acquisition core's sink (session.h) ---- */

static void dec_entry(void *ctx, struct call_frame *f, void *user)
{
	struct decoder *d = ctx;
	uint64_t *slot = user;

	name_thread(d, f->rec.pid, f->rec.tid);
	slot[USER_CORRELATION] = d->next_correlation++;
	/* a driver call a runtime call made runs under the runtime call's stack; it is not
	 * written */
	if ((!d->ustack_lookup && !d->open_calls) || nested_driver_call(d, &f->rec))
		return;
	if (d->ustack_lookup)
		py_entry(d, f, slot);
	/* BEGIN at entry: a call whose return will come is opened with what its entry says
	 * (its END, when it completes, adds the return value and the join's results) */
	if (d->open_calls && session__has_return(d->session, f->rec.api)) {
		d->opening = true;
		if (f->rec.api >= NCCL_API_BASE)
			emit_nccl(d, &f->rec, slot[USER_CORRELATION], NULL, 0);
		else
			emit_host(d, &f->rec, slot[USER_CORRELATION], NULL, 0, NULL);
		d->opening = false;
	}
}

static void dec_call(void *ctx, const struct call *c, void *user)
{
	struct decoder *d = ctx;
	const struct tp_rec_call *rec = &c->frame->rec;
	const uint64_t *slot = user;
	uint64_t correlation = slot[USER_CORRELATION];

	if (nested_driver_call(d, rec)) {
		d->stats.nested_driver_calls++;
		/* its runtime call is the one still open, not this one */
		if (c->end == CALL_EXITED || c->end == CALL_UNFINISHED)
			d->nested_open++;
		return;
	}
	if (d->ustack_lookup) {
		/* entry-only calls are drawn at their entry, or by the --gpu join with CUPTI's
		 * times: those end before the thread's next call, not at the entry */
		bool no_ret = c->end == CALL_NO_RETURN || c->end == CALL_OVERFLOW;

		py_call_end(d, c->frame, slot, c->ret ? c->ret->ts : no_ret ? rec->ts : c->end_ns,
			    no_ret && d->gpu);
	}
	/* held by the --gpu join: written once it decides (gpu_joined) */
	if (!c->held)
		write_call(d, c, correlation, NULL);
}

static void dec_exit(void *ctx, const struct tp_rec_exit *x)
{
	struct decoder *d = ctx;
	struct target *t = find_target(d, x->pid);

	/* its open calls were delivered (ended at the exit) before this */
	if (d->ustack_lookup)
		py_close_all(d, x->pid, x->ts);
	if (t) {
		/* the main loop notices the exit itself (pidfd) and says so */
		target__set_exit(t, (int)x->exit_code, x->ts);
	}
}

void decoder__finish(struct decoder *d, uint64_t end_ns)
{
	session__finish(d->session, end_ns);
	gpu_trace__finish(d->gpu);	/* every GPU record is in by now */
	if (d->ustack_lookup)
		py_close_all(d, 0, end_ns);
}
