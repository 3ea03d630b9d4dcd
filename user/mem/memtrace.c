// SPDX-License-Identifier: MIT
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <cjson/cJSON.h>
#include "growbuf.h"
#include "mem.skel.h"
#include "mem.h"
#include "calls.h"
#include "attach.h"
#include "elfsym.h"
#include "hashmap.h"
#include "log.h"
#include "memsnap.h"
#include "ustack.h"
#include "trace_stacks.h"
#include "memtrace.h"
#include "procmaps.h"
#include "session.h"
#include "target.h"
#include "trace_json.h"
#include "util.h"

#ifndef TPTRACE_VERSION
#define TPTRACE_VERSION "0.0.0"
#endif

enum mem_api_kind { K_ALLOC, K_FREE, K_SET_DEVICE, K_VMM_CREATE, K_VMM_RELEASE, K_VMM_MAP,
		    K_VMM_UNMAP };

/* What each probed function takes (x86-64 SysV: integer arguments in rdi rsi rdx rcx r8 r9,
 * args[0..5]); -1 = absent. The out-pointer is read at return: the allocated address or
 * handle. cudaError_t and CUresult are ints in eax; 2 is out of memory in both enums
 * (cudaErrorMemoryAllocation, CUDA_ERROR_OUT_OF_MEMORY). */
struct mem_api {
	const char *symbol;
	uint8_t kind;		/* enum mem_api_kind */
	uint8_t seg;		/* enum mem_seg_kind */
	bool driver;
	int8_t out, size, ptr, stream, flags;
	int8_t deref;		/* pointer argument read at entry ... */
	uint8_t deref_off;	/* ... at this offset (8 bytes) */
};

#define NO -1
static const struct mem_api mem_apis[] = {
	/* cudaMalloc(void **devPtr, size_t size) */
	{ "cudaMalloc", K_ALLOC, MEM_SEG_DEVICE, false, 0, 1, NO, NO, NO, NO, 0 },
	/* cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream) */
	{ "cudaMallocAsync", K_ALLOC, MEM_SEG_ASYNC, false, 0, 1, NO, 2, NO, NO, 0 },
	{ "cudaMallocAsync_ptsz", K_ALLOC, MEM_SEG_ASYNC, false, 0, 1, NO, 2, NO, NO, 0 },
	/* cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t pool, cudaStream_t) */
	{ "cudaMallocFromPoolAsync", K_ALLOC, MEM_SEG_ASYNC, false, 0, 1, NO, 3, NO, NO, 0 },
	{ "cudaMallocFromPoolAsync_ptsz", K_ALLOC, MEM_SEG_ASYNC, false, 0, 1, NO, 3, NO, NO, 0 },
	/* cudaMallocHost(void **ptr, size_t size) */
	{ "cudaMallocHost", K_ALLOC, MEM_SEG_HOST, false, 0, 1, NO, NO, NO, NO, 0 },
	/* cudaHostAlloc(void **pHost, size_t size, unsigned int flags) */
	{ "cudaHostAlloc", K_ALLOC, MEM_SEG_HOST, false, 0, 1, NO, NO, 2, NO, 0 },
	/* cudaMallocManaged(void **devPtr, size_t size, unsigned int flags) */
	{ "cudaMallocManaged", K_ALLOC, MEM_SEG_MANAGED, false, 0, 1, NO, NO, 2, NO, 0 },
	/* cudaFree(void *devPtr): device and managed memory */
	{ "cudaFree", K_FREE, MEM_SEG_DEVICE, false, NO, NO, 0, NO, NO, NO, 0 },
	/* cudaFreeAsync(void *devPtr, cudaStream_t hStream) */
	{ "cudaFreeAsync", K_FREE, MEM_SEG_ASYNC, false, NO, NO, 0, 1, NO, NO, 0 },
	{ "cudaFreeAsync_ptsz", K_FREE, MEM_SEG_ASYNC, false, NO, NO, 0, 1, NO, NO, 0 },
	/* cudaFreeHost(void *ptr) */
	{ "cudaFreeHost", K_FREE, MEM_SEG_HOST, false, NO, NO, 0, NO, NO, NO, 0 },
	/* cudaSetDevice(int device): the device of later cudaMalloc calls on this thread */
	{ "cudaSetDevice", K_SET_DEVICE, 0, false, NO, NO, NO, NO, NO, NO, 0 },
	/* cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) */
	{ "cuMemAlloc_v2", K_ALLOC, MEM_SEG_DEVICE, true, 0, 1, NO, NO, NO, NO, 0 },
	/* cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) */
	{ "cuMemAllocAsync", K_ALLOC, MEM_SEG_ASYNC, true, 0, 1, NO, 2, NO, NO, 0 },
	/* cuMemFree_v2(CUdeviceptr dptr) */
	{ "cuMemFree_v2", K_FREE, MEM_SEG_DEVICE, true, NO, NO, 0, NO, NO, NO, 0 },
	/* cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) */
	{ "cuMemFreeAsync", K_FREE, MEM_SEG_ASYNC, true, NO, NO, 0, 1, NO, NO, 0 },
	/* cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
	 *             const CUmemAllocationProp *prop, unsigned long long flags):
	 * prop->location {type @8, id @12}: one u64 at offset 8, type low, device id high */
	{ "cuMemCreate", K_VMM_CREATE, MEM_SEG_MAPPED, true, 0, 1, NO, NO, 3, 2, 8 },
	/* cuMemRelease(CUmemGenericAllocationHandle handle) */
	{ "cuMemRelease", K_VMM_RELEASE, MEM_SEG_MAPPED, true, NO, NO, 0, NO, NO, NO, 0 },
	/* cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle
	 *          handle, unsigned long long flags) */
	{ "cuMemMap", K_VMM_MAP, MEM_SEG_MAPPED, true, NO, 1, 0, NO, 4, NO, 0 },
	/* cuMemUnmap(CUdeviceptr ptr, size_t size) */
	{ "cuMemUnmap", K_VMM_UNMAP, MEM_SEG_MAPPED, true, NO, 1, 0, NO, NO, NO, 0 },
};
#undef NO
#define NR_MEM_APIS ((int)(sizeof(mem_apis) / sizeof(mem_apis[0])))
#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define C10_DEVICE_TYPE_CUDA 1
#define ERR_OUT_OF_MEMORY 2

enum obj_flags { OBJ_SEEN = 1, OBJ_USDT = 2, OBJ_RUNTIME = 4, OBJ_DRIVER = 8 };

/* A symbolized code address, cached. */
struct frame_sym {
	bool internal;
	const char *file;	/* owned by the target's objects or maps; "" */
	char name[];
};

struct memtrace {
	struct target *t;
	int pid;			/* target__pid(t) */
	struct trace_json *tj;
	struct mem_bpf *skel;
	struct ring_buffer *rb;
	struct session *core;		/* its ring's consumer (session.h), this its one sink */
	struct memsnap *snap;
	struct probe_progs progs;	/* mem_entry/mem_return, their multi flavours */
	struct probe_links links;	/* every memory probe, detached by memtrace__free */
	uint8_t *obj_flags;		/* per target__obj index */
	int nr_objs_seen;
	struct u64map tid_device;	/* tid -> device + 1 (cudaSetDevice) */
	struct u64map syms;		/* address -> struct frame_sym * */
	struct memtrace_stats st;
	char **paths;			/* libraries probed, for the metadata */
	int nr_paths;
	/* stack ids handed to memsnap for uprobe stacks: the BPF stack id plus the caller the
	 * walk may have missed (mem.h: caller) */
	struct synth_stack { int32_t stack_id; uint64_t caller; } *synth;
	int nr_synth, cap_synth;
	struct u64map synth_index;	/* key -> index + 1 */
	bool any_host, any_managed;
	struct ustacks *ustacks;	/* --py-stacks: Python frames of each allocation, else NULL */
	char py_why[256];		/* why the process's allocations carry no Python frames */
};

#define SYNTH_STACK_BASE (1 << 30)

/* ---- finding probes ------------------------------------------------------------------------ */

static void add_path(struct memtrace *mt, const char *path, const char *what)
{
	char **n = realloc(mt->paths, (mt->nr_paths + 1) * sizeof(*n));
	char buf[4200];

	if (!n)
		return;
	mt->paths = n;
	snprintf(buf, sizeof(buf), "%s: %s", what, path);
	mt->paths[mt->nr_paths] = strdup(buf);
	if (mt->paths[mt->nr_paths])
		mt->nr_paths++;
}

static uint64_t api_cookie(int id)
{
	const struct mem_api *a = &mem_apis[id];
	uint64_t c = (uint64_t)id;

	c |= a->driver ? MEM_COOKIE_DRIVER : MEM_COOKIE_RUNTIME;
	if (a->kind == K_ALLOC || a->kind == K_VMM_CREATE || a->kind == K_VMM_MAP)
		c |= MEM_COOKIE_STACK;
	if (a->out >= 0)
		c |= (uint64_t)(a->out + 1) << MEM_COOKIE_OUT_SHIFT;
	if (a->deref >= 0)
		c |= (uint64_t)(a->deref + 1) << MEM_COOKIE_DEREF_SHIFT |
		     (uint64_t)a->deref_off << MEM_COOKIE_OFF_SHIFT;
	return c;
}

/* Entry and return probes on every function of the table present in obj (runtime or driver
 * half), as one plan: one uprobe_multi link each way where the kernel has them. Aliases (two
 * names, one address) are probed once. Functions probed, or a negative errno. */
static int attach_apis(struct memtrace *mt, const struct target_obj *obj, bool driver)
{
	struct probe_plan *plan = probe_plan__new(obj);
	struct probe_counts counts = {};
	int r;

	if (!plan)
		return -ENOMEM;
	for (int id = 0; id < NR_MEM_APIS; id++)
		if (mem_apis[id].driver == driver)
			probe_plan__add(plan, mem_apis[id].symbol, api_cookie(id), true);
	r = probe_plan__attach(plan, mt->pid, &mt->progs, &mt->links, &counts);
	probe_plan__free(plan);
	mt->st.attach_errors += counts.errors;
	/* a return probe attaches only where its entry did: returns count whole functions */
	return r < 0 ? r : counts.returns;
}

/* PyTorch's caching-allocator USDT probes in obj. Probes attached or a negative errno. */
static int attach_usdt(struct memtrace *mt, const struct target_obj *obj)
{
	struct probe_plan *plan = probe_plan__new(obj);
	struct probe_counts counts = {};
	int r;

	if (!plan)
		return -ENOMEM;
	probe_plan__add_usdt(plan, mt->skel->progs.mem_usdt_malloc, "pytorch", "malloc");
	probe_plan__add_usdt(plan, mt->skel->progs.mem_usdt_free, "pytorch", "free");
	r = probe_plan__attach(plan, mt->pid, &mt->progs, &mt->links, &counts);
	probe_plan__free(plan);
	mt->st.attach_errors += counts.errors;
	return r;
}

/* Probes the objects the target found since the last call. */
static int attach_new_objects(struct memtrace *mt)
{
	struct target *t = mt->t;
	uint8_t *flags;

	if (target__nr_objs(t) <= mt->nr_objs_seen)
		return 0;
	flags = realloc(mt->obj_flags, target__nr_objs(t));
	if (!flags)
		return -ENOMEM;
	mt->obj_flags = flags;
	for (int i = mt->nr_objs_seen; i < target__nr_objs(t); i++) {
		const struct target_obj *obj = target__obj(t, i);
		int r;

		flags[i] = OBJ_SEEN;
		if (!obj->es)
			continue;
		if (elfsym__has_usdt_provider(obj->es, "pytorch")) {
			r = attach_usdt(mt, obj);
			if (r < 0)
				return r;
			if (r > 0) {
				flags[i] |= OBJ_USDT;
				mt->st.usdt_probes += r;
				add_path(mt, obj->path, "usdt");
			}
		}
		if (elfsym__find_func(obj->es, "cudaMalloc")) {
			r = attach_apis(mt, obj, false);
			if (r < 0)
				return r;
			if (r > 0) {
				flags[i] |= OBJ_RUNTIME;
				mt->st.runtime_probes += r;
				add_path(mt, obj->path, "cudart");
			}
		}
		if (elfsym__find_func(obj->es, "cuMemAlloc_v2")) {
			r = attach_apis(mt, obj, true);
			if (r < 0)
				return r;
			if (r > 0) {
				flags[i] |= OBJ_DRIVER;
				mt->st.driver_probes += r;
				add_path(mt, obj->path, "driver");
			}
		}
	}
	mt->nr_objs_seen = target__nr_objs(t);
	return 0;
}

/* ---- symbolizing stacks -------------------------------------------------------------------- */

/* ret_addr: a return address (all frames but the first): look up addr - 1, which lies in the
 * call instruction, so a call that ends its function is not given to the next one. The
 * lookup is target.c's; this formats a frame ("fn+0x1c", else "lib.so+0x1234") and marks
 * frames in the libraries we probe as internal. */
static const struct frame_sym *symbolize(struct memtrace *mt, uint64_t addr, bool ret_addr)
{
	uint64_t lookup = addr - (ret_addr ? 1 : 0), cached;
	struct target *t = mt->t;
	const struct vma *v = NULL;
	struct frame_sym *fs;
	struct target_sym sym;
	char name[1024];
	long idx = -1;

	if (u64map__get(&mt->syms, addr, &cached))
		return (const struct frame_sym *)(uintptr_t)cached;
	if (!target__sym_at(t, lookup, &sym))
		idx = sym.obj - target__obj(t, 0);
	v = target__maps(t) ? procmaps__find(target__maps(t), addr) : NULL;
	if (sym.name) {
		snprintf(name, sizeof(name), "%s+0x%" PRIx64, sym.name,
			 sym.offset + (ret_addr ? 1 : 0));
	} else if (v && v->path) {
		const char *base = strrchr(v->path, '/');

		snprintf(name, sizeof(name), "%s+0x%" PRIx64, base ? base + 1 : v->path,
			 addr - v->start + v->offset);
	} else {
		snprintf(name, sizeof(name), "0x%" PRIx64, addr);
	}
	fs = malloc(sizeof(*fs) + strlen(name) + 1);
	if (!fs)
		return NULL;
	strcpy(fs->name, name);
	fs->file = sym.obj ? sym.obj->path : (v && v->path ? v->path : "");
	fs->internal = idx >= 0 && idx < mt->nr_objs_seen &&
		       (mt->obj_flags[idx] & (OBJ_USDT | OBJ_RUNTIME | OBJ_DRIVER));
	u64map__set(&mt->syms, addr ? addr : 1, (uint64_t)(uintptr_t)fs);
	return fs;
}

static int call_stack_id(struct memtrace *mt, int32_t stack_id, uint64_t caller)
{
	uint64_t key = u64_mix(caller) ^ (uint32_t)stack_id, idx;

	if (stack_id < 0 || !caller)
		return stack_id;
	key = key ? key : 1;
	if (u64map__get(&mt->synth_index, key, &idx) && mt->synth[idx - 1].stack_id == stack_id &&
	    mt->synth[idx - 1].caller == caller)
		return SYNTH_STACK_BASE + (int)(idx - 1);
	if (ARRAY_RESERVE(mt->synth, mt->cap_synth, mt->nr_synth + 1, 64))
		return stack_id;
	mt->synth[mt->nr_synth] = (struct synth_stack){ stack_id, caller };
	u64map__set(&mt->synth_index, key, mt->nr_synth + 1);
	return SYNTH_STACK_BASE + mt->nr_synth++;
}

static int stack_frames(void *ctx, int32_t stack_id, struct mem_frame *frames, int max)
{
	struct memtrace *mt = ctx;
	uint64_t ips[MEM_STACK_DEPTH];
	uint32_t key = stack_id;
	int n = 0;

	if (stack_id >= SYNTH_STACK_BASE && stack_id - SYNTH_STACK_BASE < mt->nr_synth) {
		const struct synth_stack *s = &mt->synth[stack_id - SYNTH_STACK_BASE];
		const struct frame_sym *fs;

		n = stack_frames(ctx, s->stack_id, frames, max);
		if (n < 1 || n == max || (n > 1 && frames[1].addr == s->caller))
			return n;
		fs = symbolize(mt, s->caller, true);
		if (!fs)
			return n;
		memmove(&frames[2], &frames[1], (n - 1) * sizeof(*frames));
		frames[1] = (struct mem_frame){ .name = fs->name, .filename = fs->file,
						.addr = s->caller, .internal = fs->internal };
		return n + 1;
	}
	if (stack_id < 0 || !mt->skel)
		return 0;
	memset(ips, 0, sizeof(ips));
	if (bpf_map_lookup_elem(bpf_map__fd(mt->skel->maps.mem_stacks), &key, ips))
		return 0;
	for (int i = 0; i < MEM_STACK_DEPTH && n < max && ips[i]; i++) {
		const struct frame_sym *fs = symbolize(mt, ips[i], i > 0);

		if (!fs)
			break;
		frames[n] = (struct mem_frame){ .name = fs->name, .filename = fs->file,
						.addr = ips[i], .internal = fs->internal };
		n++;
	}
	return n;
}

/* --py-stacks: resolves a new stack id now, while its code objects are alive (the snapshot is
 * written at the end, maybe after the process exited); ustacks keeps it per id, so a known
 * id costs one lookup. Returns the id for memsnap__stack_with_py. */
static uint64_t py_resolve(struct memtrace *mt, uint32_t pid, uint64_t ustack)
{
	if (mt->ustacks && ustack >= TP_USTACK_FIRST_ID)
		ustacks__get(mt->ustacks, (int)pid, ustack);
	return mt->ustacks ? ustack : 0;
}

/* ---- decoding ------------------------------------------------------------------------------ */

static int cur_device(struct memtrace *mt, uint32_t tid)
{
	uint64_t v;

	return tid && u64map__get(&mt->tid_device, tid, &v) ? (int)v - 1 : 0;
}

static void write_counters(struct memtrace *mt, int device, uint64_t ts, bool alloc, bool reserved)
{
	const struct mem_device_bytes *d = memsnap__device(mt->snap, device);
	char name[64];

	if (!mt->tj || !d)
		return;
	if (alloc) {
		snprintf(name, sizeof(name), "bytes allocated (cuda:%d)", device);
		trace_json__event(mt->tj, "C", "cuda_memory", name, mt->pid, 0, ts, 0);
		trace_json__arg_u64(mt->tj, "bytes", d->allocated);
		trace_json__event_end(mt->tj);
	}
	if (reserved) {
		snprintf(name, sizeof(name), "bytes reserved (cuda:%d)", device);
		trace_json__event(mt->tj, "C", "cuda_memory", name, mt->pid, 0, ts, 0);
		trace_json__arg_u64(mt->tj, "bytes", d->reserved);
		trace_json__event_end(mt->tj);
	}
}

static void write_host_counters(struct memtrace *mt, uint64_t ts)
{
	const struct memsnap_stats *st = memsnap__stats(mt->snap);

	if (!mt->tj)
		return;
	if (mt->any_host) {
		trace_json__event(mt->tj, "C", "cuda_memory", "bytes pinned host", mt->pid, 0, ts, 0);
		trace_json__arg_u64(mt->tj, "bytes", st->host_bytes);
		trace_json__event_end(mt->tj);
	}
	if (mt->any_managed) {
		trace_json__event(mt->tj, "C", "cuda_memory", "bytes managed", mt->pid, 0, ts, 0);
		trace_json__arg_u64(mt->tj, "bytes", st->managed_bytes);
		trace_json__event_end(mt->tj);
	}
}

/* Kineto's memory event: one per state change, with the totals after it; with --py-stacks
 * the allocating call's stack as the calls' `stack` arg. */
static void write_memory_event(struct memtrace *mt, uint32_t tid, uint64_t ts, const char *action,
			       int device, uint64_t addr, int64_t bytes, uint64_t ustack)
{
	const struct mem_device_bytes *d = memsnap__device(mt->snap, device);

	if (!mt->tj || !d)
		return;
	trace_json__event(mt->tj, "i", "cuda_memory", "[memory]", mt->pid, tid, ts, 0);
	trace_json__field_raw(mt->tj, "s", "\"t\"");
	trace_json__arg_str(mt->tj, "action", action);
	trace_json__arg_i64(mt->tj, "Device Type", 1);
	trace_json__arg_i64(mt->tj, "Device Id", device);
	trace_json__arg_hex(mt->tj, "Addr", addr);
	trace_json__arg_i64(mt->tj, "Bytes", bytes);
	trace_json__arg_u64(mt->tj, "Total Allocated", d->allocated);
	trace_json__arg_u64(mt->tj, "Total Reserved", d->reserved);
	if (mt->ustacks)
		ustack__write_args(mt->tj, ustacks__lookup, mt->ustacks, mt->pid, ustack);
	trace_json__event_end(mt->tj);
}

static void write_oom(struct memtrace *mt, const struct mem_rec_call *rec, const char *api,
		      int device, uint64_t size)
{
	const struct mem_device_bytes *d = memsnap__device(mt->snap, device);

	if (!mt->tj)
		return;
	trace_json__event(mt->tj, "i", "cuda_memory", "OOM", mt->pid, rec->tid, rec->ts_return, 0);
	trace_json__field_raw(mt->tj, "s", "\"p\"");
	trace_json__arg_str(mt->tj, "api", api);
	trace_json__arg_i64(mt->tj, "device", device);
	trace_json__arg_u64(mt->tj, "size", size);
	trace_json__arg_i64(mt->tj, "rc", (int32_t)rec->rc);
	if (d) {
		trace_json__arg_u64(mt->tj, "bytes allocated", d->allocated);
		trace_json__arg_u64(mt->tj, "bytes reserved", d->reserved);
	}
	if (mt->ustacks)	/* which line ran out of memory */
		ustack__write_args(mt->tj, ustacks__lookup, mt->ustacks, mt->pid, rec->ustack);
	trace_json__event_end(mt->tj);
}

static void write_call(struct memtrace *mt, const struct mem_rec_call *rec, const struct mem_api *a,
		       int device)
{
	struct trace_json *tj = mt->tj;

	if (!tj)
		return;
	trace_json__event(tj, "i", "cuda_memory", a->symbol, mt->pid, rec->tid, rec->ts_entry, 0);
	trace_json__field_raw(tj, "s", "\"t\"");
	if (a->size >= 0)
		trace_json__arg_u64(tj, "size", rec->args[a->size]);
	if (a->out >= 0 && (rec->flags & MEM_CALL_OUT_OK) && !rec->rc)
		trace_json__arg_hex(tj, a->kind == K_VMM_CREATE ? "handle" : "ptr", rec->out_val);
	if (a->ptr >= 0)
		trace_json__arg_hex(tj, a->kind == K_VMM_RELEASE ? "handle" : "ptr", rec->args[a->ptr]);
	if (a->kind == K_VMM_MAP)
		trace_json__arg_hex(tj, "handle", rec->args[3]);
	if (a->stream >= 0)
		trace_json__arg_hex(tj, "stream", rec->args[a->stream]);
	if (a->flags >= 0)
		trace_json__arg_u64(tj, "flags", rec->args[a->flags]);
	if (a->kind == K_SET_DEVICE)
		trace_json__arg_i64(tj, "device", (int32_t)rec->args[0]);
	else if (a->seg != MEM_SEG_HOST)
		trace_json__arg_i64(tj, "device", device);
	trace_json__arg_i64(tj, "rc", (int32_t)rec->rc);
	trace_json__arg_f64(tj, "duration_us", (rec->ts_return - rec->ts_entry) / 1e3);
	if (mt->ustacks)
		ustack__write_args(tj, ustacks__lookup, mt->ustacks, mt->pid, rec->ustack);
	trace_json__event_end(tj);
}

/* The calls core (calls.c) validated the record: type, size, api < NR_MEM_APIS. */
static void handle_call(void *ctx, const void *data)
{
	struct memtrace *mt = ctx;
	const struct mem_rec_call *rec = data;
	const struct mem_api *a;
	int32_t rc = (int32_t)rec->rc;
	int device, changed = -1;
	const char *action = NULL;
	uint64_t addr = 0, size = 0;
	int64_t bytes = 0;
	int32_t stack_id;

	a = &mem_apis[rec->api];
	mt->st.calls++;
	device = cur_device(mt, rec->tid);
	if (a->kind == K_VMM_CREATE && (rec->flags & MEM_CALL_DEREF_OK) &&
	    (uint32_t)rec->deref_val == CU_MEM_LOCATION_TYPE_DEVICE)
		device = (int)(rec->deref_val >> 32);
	/* --py-stacks: the caller's Python frames go before the native ones (rec->ustack is 0,
	 * no stack, when capture is off) */
	stack_id = memsnap__stack_with_py(mt->snap, call_stack_id(mt, rec->stack_id, rec->caller),
					  py_resolve(mt, rec->pid, rec->ustack));
	write_call(mt, rec, a, device);
	if (rc == ERR_OUT_OF_MEMORY && (a->kind == K_ALLOC || a->kind == K_VMM_CREATE)) {
		size = rec->args[a->size];
		mt->st.ooms++;
		memsnap__oom(mt->snap, rec->ts_return, device, size,
			     a->stream >= 0 ? rec->args[a->stream] : 0, stack_id);
		write_oom(mt, rec, a->symbol, device, size);
		return;
	}
	if (rc != 0) {
		mt->st.failed_calls++;
		return;
	}
	switch (a->kind) {
	case K_SET_DEVICE:
		u64map__set(&mt->tid_device, rec->tid ? rec->tid : 1, (uint64_t)(int32_t)rec->args[0] + 1);
		return;
	case K_ALLOC:
		if (!(rec->flags & MEM_CALL_OUT_OK) || !rec->out_val)
			return;
		addr = rec->out_val;
		size = rec->args[a->size];
		changed = memsnap__segment_alloc(mt->snap, rec->ts_return, a->seg, device, addr, size,
						 a->stream >= 0 ? rec->args[a->stream] : 0, stack_id);
		bytes = size;
		action = "segment_alloc";
		mt->any_host |= a->seg == MEM_SEG_HOST;
		mt->any_managed |= a->seg == MEM_SEG_MANAGED;
		break;
	case K_FREE:
		addr = rec->args[a->ptr];
		if (!addr)
			return;
		changed = memsnap__device_of(mt->snap, addr, &size);
		changed = memsnap__segment_free(mt->snap, rec->ts_return, addr);
		bytes = -(int64_t)size;
		action = "segment_free";
		break;
	case K_VMM_CREATE:
		if (!(rec->flags & MEM_CALL_OUT_OK))
			return;
		size = rec->args[a->size];
		changed = memsnap__handle_create(mt->snap, rec->ts_return, device, rec->out_val, size);
		bytes = size;
		action = "handle_create";
		break;
	case K_VMM_RELEASE:
		changed = memsnap__handle_release(mt->snap, rec->ts_return, rec->args[0]);
		action = "handle_release";
		break;
	case K_VMM_MAP:
		addr = rec->args[0];
		size = rec->args[1];
		memsnap__map(mt->snap, rec->ts_return, addr, size, rec->args[3], stack_id);
		changed = memsnap__device_of(mt->snap, addr, NULL);
		action = "segment_map";
		break;
	case K_VMM_UNMAP:
		addr = rec->args[0];
		size = rec->args[1];
		changed = memsnap__device_of(mt->snap, addr, NULL);
		memsnap__unmap(mt->snap, rec->ts_return, addr, size);
		action = "segment_unmap";
		break;
	}
	if (a->seg == MEM_SEG_HOST || a->seg == MEM_SEG_MANAGED ||
	    (a->kind == K_FREE && changed < 0)) {
		write_host_counters(mt, rec->ts_return);
		if (changed < 0)
			return;
	}
	if (changed < 0 || !action)
		return;
	write_memory_event(mt, rec->tid, rec->ts_return, action, changed, addr, bytes, rec->ustack);
	if (a->kind != K_VMM_MAP && a->kind != K_VMM_UNMAP)
		write_counters(mt, changed, rec->ts_return, false, true);
}

static void handle_usdt(void *ctx, const void *data)
{
	struct memtrace *mt = ctx;
	const struct mem_rec_usdt *rec = data;
	uint64_t size = 0;
	int device;

	if (rec->type == MEM_REC_MALLOC) {
		/* c10::Device is {DeviceType type; DeviceIndex index;}: two bytes, CUDA = 1 */
		if ((rec->device & 0xff) == C10_DEVICE_TYPE_CUDA && (int8_t)(rec->device >> 8) >= 0)
			device = (int8_t)(rec->device >> 8);
		else
			device = cur_device(mt, rec->tid);
		device = memsnap__block_alloc(mt->snap, rec->ts, device, rec->ptr, rec->size,
					      rec->stream, memsnap__stack_with_py(mt->snap, rec->stack_id,
						      py_resolve(mt, rec->pid, rec->ustack)));
		if (device < 0)
			return;
		write_memory_event(mt, rec->tid, rec->ts, "alloc", device, rec->ptr, rec->size,
				   rec->ustack);
		write_counters(mt, device, rec->ts, true, false);
		return;
	}
	memsnap__device_of(mt->snap, rec->ptr, &size);
	device = memsnap__block_free(mt->snap, rec->ts, rec->ptr);
	if (device < 0)
		return;
	write_memory_event(mt, rec->tid, rec->ts, "free", device, rec->ptr, -(int64_t)size, 0);
	write_counters(mt, device, rec->ts, true, false);
}

static struct session *new_core(struct memtrace *mt)
{
	static const struct session_sink_ops ops = {
		.on_mem_call = handle_call, .on_mem_usdt = handle_usdt,
	};
	struct session *s = session__new_mem(NR_MEM_APIS);

	if (s && session__add_sink(s, &ops, mt, NULL)) {
		session__free(s);
		return NULL;
	}
	return s;
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

struct memtrace *memtrace__attach(struct target *t, struct trace_json *tj,
				  const struct memtrace_opts *opts)
{
	struct memtrace_opts none = {};
	struct memtrace *mt;
	int err;

	if (!opts)
		opts = &none;
	mt = calloc(1, sizeof(*mt));
	if (!mt) {
		log_error("out of memory\n");
		return NULL;
	}
	mt->t = t;
	mt->pid = target__pid(t);
	mt->tj = tj;
	mt->snap = memsnap__new(opts->history);
	if (!mt->snap) {
		log_error("out of memory\n");
		goto err;
	}
	memsnap__set_clock(mt->snap, clock_ns(CLOCK_MONOTONIC),
			   clock_ns(CLOCK_REALTIME));
	mt->skel = mem_bpf__open();
	if (!mt->skel) {
		log_error("failed to open the memory BPF object: %s\n", strerror(errno));
		goto err;
	}
	if (opts->uprobe_multi) {
		bpf_program__set_expected_attach_type(mt->skel->progs.mem_entry_multi,
			(enum bpf_attach_type)TP_BPF_TRACE_UPROBE_MULTI);
		bpf_program__set_expected_attach_type(mt->skel->progs.mem_return_multi,
			(enum bpf_attach_type)TP_BPF_TRACE_UPROBE_MULTI);
	} else {
		bpf_program__set_autoload(mt->skel->progs.mem_entry_multi, false);
		bpf_program__set_autoload(mt->skel->progs.mem_return_multi, false);
	}
	mt->skel->rodata->capture_stacks = !opts->no_stacks;
	bpf_map__set_max_entries(mt->skel->maps.mem_events,
				 (uint32_t)(opts->ring_mb ? opts->ring_mb : 4) << 20);
	if (opts->no_stacks)
		bpf_map__set_max_entries(mt->skel->maps.mem_stacks, 1);
	/* Python frames are taken where the native stack would be (mem.bpf.c: stack cookie),
	 * with or without the native stack (tptrace -p --mem --py-stacks has none) */
	mt->skel->rodata->ustacks_on = opts->py_stacks;
	if (!mt->skel->rodata->ustacks_on)
		bpf_map__set_max_entries(mt->skel->maps.ustacks, 1);
	bpf_program__set_autoload(mt->skel->progs.ustack_code_free, opts->py_stacks);
	err = mem_bpf__load(mt->skel);
	if (err) {
		if (err == -EPERM || err == -EACCES)
			log_error("loading memory BPF programs: %s (run as root: needs CAP_BPF "
				  "and CAP_PERFMON, or CAP_SYS_ADMIN)\n", strerror(-err));
		else
			log_error("loading memory BPF programs: %s\n", strerror(-err));
		goto err;
	}
	if (mt->skel->rodata->ustacks_on) {
		const char *python;

		mt->ustacks = ustacks__new(bpf_map__fd(mt->skel->maps.ustacks),
					   bpf_map__fd(mt->skel->maps.ustack_procs),
					   bpf_map__fd(mt->skel->maps.ustack_counters), false);
		if (!mt->ustacks) {
			log_error("out of memory\n");
			goto err;
		}
		ustacks__set_code_free_prog(mt->ustacks, mt->skel->progs.ustack_code_free);
		if (ustacks__add_pid(mt->ustacks, target__pid(t), &python, mt->py_why, sizeof(mt->py_why)))
			log_info("pid %d: no Python frames in the snapshot: %s\n", target__pid(t), mt->py_why);
		else
			log_verbose("pid %d: Python %s: allocations carry Python frames\n", target__pid(t),
				    python);
	}
	mt->progs.entry = mt->skel->progs.mem_entry;
	mt->progs.ret = mt->skel->progs.mem_return;
	if (opts->uprobe_multi) {
		mt->progs.entry_multi = mt->skel->progs.mem_entry_multi;
		mt->progs.ret_multi = mt->skel->progs.mem_return_multi;
	}
	mt->core = new_core(mt);
	mt->rb = mt->core ? ring_buffer__new(bpf_map__fd(mt->skel->maps.mem_events),
					     session__ring_cb, mt->core, NULL) : NULL;
	if (!mt->rb) {
		log_error("failed to create the memory ring buffer: %s\n", strerror(errno));
		goto err;
	}
	err = attach_new_objects(mt);
	if (err) {
		log_error("attaching memory probes to pid %d (%s): %s\n", target__pid(t), target__comm(t),
			  strerror(-err));
		goto err;
	}
	log_verbose("pid %d: %d USDT, %d runtime, %d driver memory probes\n", target__pid(t),
		    mt->st.usdt_probes, mt->st.runtime_probes, mt->st.driver_probes);
	return mt;
err:
	memtrace__free(mt);
	return NULL;
}

/* A BPF-side counter into *out; a failed read makes every counter unknown. */
static void read_counter(struct memtrace *mt, uint32_t idx, uint64_t *out)
{
	int err = mt->skel ? session__percpu_sum(bpf_map__fd(mt->skel->maps.mem_counters), idx, out)
			   : -ENOENT;

	if (err && !mt->st.counters_err)
		mt->st.counters_err = err;
}

int memtrace__poll(struct memtrace *mt)
{
	int err = attach_new_objects(mt);

	if (err)
		return err;
	err = ring_buffer__consume(mt->rb);
	return err == -EINTR ? 0 : err;
}

void memtrace__finish(struct memtrace *mt, uint64_t end_ns)
{
	ring_buffer__consume(mt->rb);
	for (int d = 0; d < memsnap__nr_devices(mt->snap); d++)
		write_counters(mt, d, end_ns, true, true);
	write_host_counters(mt, end_ns);
	memtrace__stats(mt);
}

const struct memtrace_stats *memtrace__stats(struct memtrace *mt)
{
	mt->st.counters_err = 0;
	read_counter(mt, MEM_CNT_DROPPED, &mt->st.dropped);
	read_counter(mt, MEM_CNT_NESTED, &mt->st.nested_driver_calls);
	read_counter(mt, MEM_CNT_ORPHAN, &mt->st.orphan_returns);
	read_counter(mt, MEM_CNT_STACK_FAIL, &mt->st.stack_failures);
	if (mt->core) {
		mt->st.records = session__stats(mt->core)->records;
		mt->st.bad_records = session__stats(mt->core)->bad_records;
	}
	return &mt->st;
}

char *memtrace__meta_json(struct memtrace *mt)
{
	const struct memtrace_stats *st = memtrace__stats(mt);
	const struct memsnap_stats *ss = memsnap__stats(mt->snap);
	cJSON *o = cJSON_CreateObject(), *arr;
	char *out;

	if (!o)
		return NULL;
	cJSON_AddNumberToObject(o, "pid", mt->pid);
	arr = cJSON_AddArrayToObject(o, "libraries");
	for (int i = 0; i < mt->nr_paths; i++)
		cJSON_AddItemToArray(arr, cJSON_CreateString(mt->paths[i]));
	cJSON_AddNumberToObject(o, "usdt_probes", st->usdt_probes);
	cJSON_AddNumberToObject(o, "runtime_probes", st->runtime_probes);
	cJSON_AddNumberToObject(o, "driver_probes", st->driver_probes);
	cJSON_AddNumberToObject(o, "attach_errors", st->attach_errors);
	cJSON_AddNumberToObject(o, "records", (double)st->records);
	cJSON_AddNumberToObject(o, "bad_records", (double)st->bad_records);
	cJSON_AddNumberToObject(o, "calls", (double)st->calls);
	cJSON_AddNumberToObject(o, "failed_calls", (double)st->failed_calls);
	cJSON_AddNumberToObject(o, "ooms", (double)st->ooms);
	if (st->counters_err) {
		/* unknown, not 0: the BPF counters could not be read */
		cJSON_AddNullToObject(o, "events_dropped");
		cJSON_AddNullToObject(o, "nested_driver_calls");
		cJSON_AddNullToObject(o, "orphan_returns");
		cJSON_AddNullToObject(o, "stack_failures");
		cJSON_AddStringToObject(o, "counters_unknown", strerror(-st->counters_err));
	} else {
		cJSON_AddNumberToObject(o, "events_dropped", (double)st->dropped);
		cJSON_AddNumberToObject(o, "nested_driver_calls", (double)st->nested_driver_calls);
		cJSON_AddNumberToObject(o, "orphan_returns", (double)st->orphan_returns);
		cJSON_AddNumberToObject(o, "stack_failures", (double)st->stack_failures);
	}
	if (mt->ustacks) {	/* --py-stacks */
		cJSON *py = cJSON_AddObjectToObject(o, "py_stacks");
		const char *v = ustacks__python(mt->ustacks, mt->pid);
		uint64_t n;

		if (v)
			cJSON_AddStringToObject(py, "python", v);
		else
			cJSON_AddNullToObject(py, "python");
		v = ustacks__why(mt->ustacks, mt->pid);
		if (v)
			cJSON_AddStringToObject(py, "why_no_frames", v);
		else
			cJSON_AddNullToObject(py, "why_no_frames");
		/* unknown, not 0, when the counter cannot be read */
		if (!ustacks__counter(mt->ustacks, TP_USTACK_CNT_LOST, &n))
			cJSON_AddNumberToObject(py, "stacks_lost", (double)n);
		else
			cJSON_AddNullToObject(py, "stacks_lost");
		if (!ustacks__counter(mt->ustacks, TP_USTACK_CNT_NOPY, &n))
			cJSON_AddNumberToObject(py, "events_without_python", (double)n);
		else
			cJSON_AddNullToObject(py, "events_without_python");
	} else {
		cJSON_AddNullToObject(o, "py_stacks");
	}
	cJSON_AddNumberToObject(o, "allocs", (double)ss->allocs);
	cJSON_AddNumberToObject(o, "frees", (double)ss->frees);
	cJSON_AddNumberToObject(o, "frees_unknown", (double)ss->frees_unknown);
	cJSON_AddNumberToObject(o, "segment_allocs", (double)ss->segment_allocs);
	cJSON_AddNumberToObject(o, "segment_frees", (double)ss->segment_frees);
	cJSON_AddNumberToObject(o, "segment_frees_unknown", (double)ss->segment_frees_unknown);
	cJSON_AddStringToObject(o, "note", "counters start at 0 at attach: memory allocated before "
				"is not known");
	out = cJSON_Print(o);
	cJSON_Delete(o);
	return out;
}

struct memsnap *memtrace__snap(struct memtrace *mt)
{
	return mt->snap;
}

void memtrace__info(struct memtrace *mt, struct memsnap_info *info)
{
	memset(info, 0, sizeof(*info));
	info->pid = mt->pid;
	info->comm = target__comm(mt->t);
	info->alloc_conf = target__alloc_conf(mt->t);
	info->version = TPTRACE_VERSION;
	info->stack_fn = stack_frames;
	info->stack_ctx = mt;
	if (mt->ustacks) {
		info->ustack_lookup = ustacks__lookup;
		info->ustack_ctx = mt->ustacks;
	}
}

void memtrace__free(struct memtrace *mt)
{
	if (!mt)
		return;
	ring_buffer__free(mt->rb);
	session__free(mt->core);
	probe_links__destroy(&mt->links);
	ustacks__free(mt->ustacks);
	mem_bpf__destroy(mt->skel);
	memsnap__free(mt->snap);
	u64map__free_values(&mt->syms);
	u64map__clear(&mt->tid_device);
	u64map__clear(&mt->synth_index);
	free(mt->synth);
	for (int i = 0; i < mt->nr_paths; i++)
		free(mt->paths[i]);
	free(mt->paths);
	free(mt->obj_flags);
	free(mt);
}
