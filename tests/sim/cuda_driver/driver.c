// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Entry points of the simulated driver libcuda.so.1 (our machines have no driver). It owns the
 * engine (engine.c); the simulated libcudart.so.13 sits on top of it and reaches every entry
 * point through cuGetProcAddress_v2, as the real runtime does, so a runtime call runs its
 * driver call underneath (cudaLaunchKernel -> cuLaunchKernel, cudaMemcpyAsync -> cuMemcpyAsync,
 * cudaMalloc -> cuMemAlloc_v2, ...). Prototypes come from the real <cuda.h>, included with
 * __CUDA_API_VERSION_INTERNAL as the real library is built, so every exported name is the real
 * driver's own (_v2, _ptds, _ptsz included: compare with `nm -D lib/stubs/libcuda.so`).
 *
 * Every entry point is one API call for the sim CUPTI: sim_api_enter right after entry,
 * sim_api_exit right before return (DRV_API), with the CUPTI_DRIVER_TRACE_CBID_* of exactly the
 * symbol called. Handles (CUcontext, CUstream, CUevent, CUmodule, CUlibrary, CUkernel,
 * CUfunction, CUgraph, CUgraphExec) are opaque addresses in never-readable memory (engine.c).
 *
 * Behaviour (as the real driver where it is observable):
 *  - everything but cuInit, cuDriverGetVersion, cuGetProcAddress*, cuGetExportTable and the
 *    memory calls returns CUDA_ERROR_NOT_INITIALIZED before cuInit; launches, copies, memsets,
 *    streams, events, modules and graphs need a current context (cuCtxSetCurrent /
 *    cuDevicePrimaryCtxRetain), else CUDA_ERROR_INVALID_CONTEXT.
 *  - cuModuleLoadData/cuLibraryLoadData take PTX text: the kernels are its `.entry` names; a
 *    cubin/fatbin image is CUDA_ERROR_INVALID_IMAGE (the sim cannot read one). Asking for a name
 *    that is not an entry is CUDA_ERROR_NOT_FOUND.
 *  - cuLaunchKernel accepts a CUfunction or a CUkernel (as CUDA 12+); bad geometry, more than
 *    48 KiB of dynamic shared memory, kernelParams and extra both given: CUDA_ERROR_INVALID_VALUE.
 *    cuLaunchKernelEx also checks its attributes (unknown id, attrs NULL with numAttrs,
 *    a cluster that does not divide the grid: CUDA_ERROR_INVALID_CLUSTER_SIZE).
 *  - stream capture (cuStreamBeginCapture_v2 .. cuStreamEndCapture) records kernels, copies and
 *    memsets as graph nodes; each cuGraphLaunch replays them on the stream, every node with the
 *    graph launch's (outermost API call's) correlation id and the graph's id. Event records,
 *    waits and syncs on a capturing stream: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (the real one
 *    turns event records into nodes; not simulated).
 *  - cuMemcpy/cuMemcpyAsync/cuMemcpyPeer infer the direction from the pointers (UVA): memory
 *    from cuMemAlloc_v2 and cuMemAllocManaged is device, cuMemAllocHost/cuMemHostAlloc pinned host,
 *    anything else pageable host.
 * Contexts: each device's primary context (id = device + 1, made by cuInit), and those of
 * cuCtxCreate (ids from TPSIM_DEVICES + 1, made current as the real one pushes them); a
 * stream, and the work on it, belongs to the context current when it was made (the default
 * streams to the current one); cuCtxSynchronize waits for its context's streams only.
 * Limits: no context stack (cuCtxPush/Pop); memory calls work without cuInit or a
 * context (tests/workloads/vmm_app.c calls them bare); VMM calls are bookkeeping only, a
 * "mapped" range is never touched; device memory is host memory.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cupti_driver_cbid.h>
#include "sim.h"

#define MAX_DYNAMIC_SHMEM (48u << 10)

static bool initialized;
struct sim_ctx {
	int device;
	uint32_t id;			/* CUPTI's contextId */
	bool primary;
	void *handle;
};
static struct sim_ctx contexts[SIM_MAX_CONTEXTS];	/* by id; [0] unused */
static uint32_t next_ctx_id;		/* the next cuCtxCreate's; 0 before cuInit */
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread void *current_ctx;

static void api_scope_end(int *unused)
{
	sim_api_exit();
}

/* One API record per call: opened after entry, closed before return (cleanup runs after the
 * return value is computed). */
#define DRV_API(name)								\
	sim_init();								\
	__attribute__((cleanup(api_scope_end))) int api_scope_ =		\
		(sim_api_enter(TPSIM_DOMAIN_DRIVER, CUPTI_DRIVER_TRACE_CBID_##name), 0); \
	(void)api_scope_

static CUresult need_init(void)
{
	return __atomic_load_n(&initialized, __ATOMIC_ACQUIRE) ? CUDA_SUCCESS
							       : CUDA_ERROR_NOT_INITIALIZED;
}

static CUresult need_ctx(void)
{
	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	return current_ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

static CUresult from_rt(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return CUDA_SUCCESS;
	case cudaErrorInvalidResourceHandle: return CUDA_ERROR_INVALID_HANDLE;
	case cudaErrorMemoryAllocation: return CUDA_ERROR_OUT_OF_MEMORY;
	case cudaErrorNotReady: return CUDA_ERROR_NOT_READY;
	default: return CUDA_ERROR_INVALID_VALUE;
	}
}

static CUresult resolve(CUstream h, bool ptsz, struct sim_stream **s)
{
	return from_rt(sim_stream_resolve((cudaStream_t)h, ptsz, s));
}

/* ---- initialisation, versions, devices, contexts ---------------------------------------- */

/* tpsim_driver.h current_device (not an API call) */
int sim_ctx_current_device(void)
{
	int *dev = current_ctx ? sim_handle_get(H_CONTEXT, current_ctx) : NULL;

	return dev ? *dev : -1;
}

CUresult CUDAAPI cuInit(unsigned int Flags)
{
	DRV_API(cuInit);
	if (Flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (!sim_cfg.devices)
		return CUDA_ERROR_NO_DEVICE;
	pthread_mutex_lock(&ctx_lock);
	for (int d = 0; d < sim_cfg.devices; d++) {
		struct sim_ctx *c = &contexts[d + 1];

		if (c->handle)
			continue;
		c->device = d;
		c->id = (uint32_t)d + 1;
		c->primary = true;
		c->handle = sim_handle_new(H_CONTEXT, c);
	}
	if (!next_ctx_id)
		next_ctx_id = (uint32_t)sim_cfg.devices + 1;
	pthread_mutex_unlock(&ctx_lock);
	__atomic_store_n(&initialized, true, __ATOMIC_RELEASE);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
	DRV_API(cuDriverGetVersion);
	if (!driverVersion)
		return CUDA_ERROR_INVALID_VALUE;
	*driverVersion = 13000;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
	DRV_API(cuDeviceGetCount);
	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = sim_cfg.devices;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
	DRV_API(cuDeviceGet);
	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	if (ordinal < 0 || ordinal >= sim_cfg.devices)
		return CUDA_ERROR_INVALID_DEVICE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	DRV_API(cuDevicePrimaryCtxRetain);
	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= sim_cfg.devices)
		return CUDA_ERROR_INVALID_DEVICE;
	*pctx = contexts[dev + 1].handle;
	return CUDA_SUCCESS;
}

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	struct sim_ctx *c;

	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= sim_cfg.devices)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&ctx_lock);
	if (next_ctx_id >= SIM_MAX_CONTEXTS) {
		pthread_mutex_unlock(&ctx_lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	c = &contexts[next_ctx_id];
	c->device = dev;
	c->id = next_ctx_id++;
	c->primary = false;
	c->handle = sim_handle_new(H_CONTEXT, c);
	pthread_mutex_unlock(&ctx_lock);
	*pctx = c->handle;
	/* the new context is made current */
	current_ctx = c->handle;
	sim_set_current_context(c->device, c->id);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	DRV_API(cuCtxCreate_v2);
	return ctx_create(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
				CUdevice dev)
{
	DRV_API(cuCtxCreate_v4);
	return ctx_create(pctx, flags, dev);
}

/* Waits for the context's work, then the handle is gone; a primary context is not the
 * caller's to destroy. */
CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
	struct sim_ctx *c;

	DRV_API(cuCtxDestroy_v2);
	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	c = sim_handle_get(H_CONTEXT, ctx);
	if (!c || c->primary)
		return CUDA_ERROR_INVALID_CONTEXT;
	sim_context_sync(c->id);
	sim_handle_drop(H_CONTEXT, ctx);
	if (current_ctx == ctx)
		current_ctx = NULL;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
	const struct sim_ctx *c;

	DRV_API(cuCtxGetDevice);
	if (need_ctx())
		return need_ctx();
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	c = sim_handle_get(H_CONTEXT, current_ctx);
	if (!c)
		return CUDA_ERROR_INVALID_CONTEXT;
	*device = c->device;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
	const struct sim_ctx *c;

	DRV_API(cuCtxGetId);
	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ctxId)
		return CUDA_ERROR_INVALID_VALUE;
	c = sim_handle_get(H_CONTEXT, ctx ? ctx : current_ctx);
	if (!c)
		return CUDA_ERROR_INVALID_CONTEXT;
	*ctxId = c->id;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
	DRV_API(cuCtxGetCurrent);
	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = current_ctx;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
	const struct sim_ctx *c;

	DRV_API(cuCtxSetCurrent);
	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ctx) {
		current_ctx = NULL;
		return CUDA_SUCCESS;
	}
	c = sim_handle_get(H_CONTEXT, ctx);
	if (!c)
		return CUDA_ERROR_INVALID_CONTEXT;
	current_ctx = ctx;
	sim_set_current_context(c->device, c->id);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
	DRV_API(cuCtxSynchronize);
	if (need_ctx())
		return need_ctx();
	sim_context_sync(sim_current_context());
	return CUDA_SUCCESS;
}

/* ---- memory ------------------------------------------------------------------------------ */

enum alloc_kind { ALLOC_DEVICE, ALLOC_HOST, ALLOC_MANAGED };

struct alloc {
	void *ptr;
	size_t size;
	enum alloc_kind kind;
	struct alloc *next;
};

#define ALLOC_BUCKETS 1024
#define ALLOC_ALIGN 256
#define PREFAULT_MAX (256ULL << 20)
static struct alloc *alloc_table[ALLOC_BUCKETS];
static pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t alloc_bucket(const void *p)
{
	return ((uintptr_t)p >> 8) % ALLOC_BUCKETS;
}

size_t sim_device_bytes_live(void)
{
	size_t live = 0;

	pthread_mutex_lock(&alloc_lock);
	for (size_t i = 0; i < ALLOC_BUCKETS; i++)
		for (struct alloc *a = alloc_table[i]; a; a = a->next)
			if (a->kind == ALLOC_DEVICE)
				live += a->size;
	pthread_mutex_unlock(&alloc_lock);
	return live;
}

/* TPSIM_MEM_LIMIT_BYTES=N: device allocations fail with CUDA_ERROR_OUT_OF_MEMORY when the
 * device memory handed out and not yet freed, plus size, would exceed N (OOM tests). */
static CUresult alloc_new(void **out, size_t size, enum alloc_kind kind)
{
	const char *limit = getenv("TPSIM_MEM_LIMIT_BYTES");
	struct alloc *a;
	void *p;

	if (!out || !size)
		return CUDA_ERROR_INVALID_VALUE;
	if (kind == ALLOC_DEVICE && limit && sim_device_bytes_live() + size > strtoull(limit, NULL, 0))
		return CUDA_ERROR_OUT_OF_MEMORY;
	p = aligned_alloc(ALLOC_ALIGN, (size + ALLOC_ALIGN - 1) / ALLOC_ALIGN * ALLOC_ALIGN);
	a = malloc(sizeof(*a));
	if (!p || !a) {
		free(p);
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	/* Touch it now (pinned and device memory are resident), so the first copy into it does
	 * not pay page faults; beyond PREFAULT_MAX the test would rather not commit the RAM. */
	if (kind == ALLOC_MANAGED || size <= PREFAULT_MAX)
		memset(p, 0, size);
	a->ptr = p;
	a->size = size;
	a->kind = kind;
	pthread_mutex_lock(&alloc_lock);
	a->next = alloc_table[alloc_bucket(p)];
	alloc_table[alloc_bucket(p)] = a;
	pthread_mutex_unlock(&alloc_lock);
	*out = p;
	return CUDA_SUCCESS;
}

/* Forgets p if it is an allocation of one of the kinds in mask; false if it is not. */
static bool alloc_forget(void *p, unsigned int kind_mask)
{
	struct alloc **pp, *a;

	pthread_mutex_lock(&alloc_lock);
	for (pp = &alloc_table[alloc_bucket(p)]; (a = *pp); pp = &a->next) {
		if (a->ptr == p && (kind_mask & (1u << a->kind))) {
			*pp = a->next;
			pthread_mutex_unlock(&alloc_lock);
			free(a);
			return true;
		}
	}
	pthread_mutex_unlock(&alloc_lock);
	return false;
}

/* Kind of the allocation containing p; -1 for memory the driver did not hand out. */
static int alloc_kind_of(const void *p)
{
	int kind = -1;

	pthread_mutex_lock(&alloc_lock);
	for (size_t i = 0; i < ALLOC_BUCKETS && kind < 0; i++)
		for (struct alloc *a = alloc_table[i]; a; a = a->next)
			if ((const char *)p >= (const char *)a->ptr &&
			    (const char *)p < (const char *)a->ptr + a->size) {
				kind = a->kind;
				break;
			}
	pthread_mutex_unlock(&alloc_lock);
	return kind;
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	DRV_API(cuMemAlloc_v2);
	return alloc_new((void **)dptr, bytesize, ALLOC_DEVICE);
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	DRV_API(cuMemAllocManaged);
	if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
		return CUDA_ERROR_INVALID_VALUE;
	return alloc_new((void **)dptr, bytesize, ALLOC_MANAGED);
}

CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	DRV_API(cuMemAllocHost_v2);
	return alloc_new(pp, bytesize, ALLOC_HOST);
}

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	DRV_API(cuMemHostAlloc);
	if (Flags & ~(unsigned int)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
				    CU_MEMHOSTALLOC_WRITECOMBINED))
		return CUDA_ERROR_INVALID_VALUE;
	return alloc_new(pp, bytesize, ALLOC_HOST);
}

/* Synchronizes the device first, as the real one does, so no queued copy touches freed memory. */
CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
	DRV_API(cuMemFree_v2);
	if (!dptr)
		return CUDA_SUCCESS;
	sim_device_sync(sim_current_device());
	if (!alloc_forget((void *)(uintptr_t)dptr, 1u << ALLOC_DEVICE | 1u << ALLOC_MANAGED))
		return CUDA_ERROR_INVALID_VALUE;
	free((void *)(uintptr_t)dptr);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFreeHost(void *p)
{
	DRV_API(cuMemFreeHost);
	if (!p)
		return CUDA_SUCCESS;
	sim_device_sync(sim_current_device());
	if (!alloc_forget(p, 1u << ALLOC_HOST))
		return CUDA_ERROR_INVALID_VALUE;
	free(p);
	return CUDA_SUCCESS;
}

static CUresult mem_alloc_async(CUdeviceptr *dptr, size_t bytesize, CUstream h, bool ptsz)
{
	struct sim_stream *s;
	CUresult r = resolve(h, ptsz, &s);

	return r ? r : alloc_new((void **)dptr, bytesize, ALLOC_DEVICE);
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	DRV_API(cuMemAllocAsync);
	return mem_alloc_async(dptr, bytesize, hStream, false);
}

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	DRV_API(cuMemAllocAsync_ptsz);
	return mem_alloc_async(dptr, bytesize, hStream, true);
}

/* The memory goes back when the stream reaches the free, not when the call returns. */
static CUresult mem_free_async(CUdeviceptr dptr, CUstream h, bool ptsz)
{
	struct sim_stream *s;
	struct sim_item *it;
	CUresult r = resolve(h, ptsz, &s);

	if (r)
		return r;
	if (!dptr || !alloc_forget((void *)(uintptr_t)dptr, 1u << ALLOC_DEVICE))
		return CUDA_ERROR_INVALID_VALUE;
	it = sim_item_new(TPSIM_FREE);
	it->dst = (void *)(uintptr_t)dptr;
	sim_submit(s, it);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	DRV_API(cuMemFreeAsync);
	return mem_free_async(dptr, hStream, false);
}

CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
	DRV_API(cuMemFreeAsync_ptsz);
	return mem_free_async(dptr, hStream, true);
}

/* Virtual memory management: bookkeeping only. */
static uintptr_t next_va = 0x7e0000000000ULL;

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
			     const CUmemAllocationProp *prop, unsigned long long flags)
{
	DRV_API(cuMemCreate);
	if (!handle || !prop || !size || flags)
		return CUDA_ERROR_INVALID_VALUE;
	*handle = (CUmemGenericAllocationHandle)(uintptr_t)sim_handle_new(H_MEMHANDLE, (void *)1);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
	void *h = (void *)(uintptr_t)handle;

	DRV_API(cuMemRelease);
	if (!sim_handle_get(H_MEMHANDLE, h))
		return CUDA_ERROR_INVALID_VALUE;
	sim_handle_drop(H_MEMHANDLE, h);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
				     CUdeviceptr addr, unsigned long long flags)
{
	DRV_API(cuMemAddressReserve);
	if (!ptr || !size)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&alloc_lock);
	*ptr = (CUdeviceptr)next_va;
	next_va += (size + (2 << 20) - 1) / (2 << 20) * (2 << 20);
	pthread_mutex_unlock(&alloc_lock);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	DRV_API(cuMemAddressFree);
	return ptr && size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
			  CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	DRV_API(cuMemMap);
	return ptr && size && sim_handle_get(H_MEMHANDLE, (void *)(uintptr_t)handle) ?
		CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	DRV_API(cuMemUnmap);
	return ptr && size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- copies and memsets ------------------------------------------------------------------ */

#define KIND_INFER (-1)

static int infer_kind(const void *dst, const void *src)
{
	bool ddev = alloc_kind_of(dst) == ALLOC_DEVICE || alloc_kind_of(dst) == ALLOC_MANAGED;
	bool sdev = alloc_kind_of(src) == ALLOC_DEVICE || alloc_kind_of(src) == ALLOC_MANAGED;

	if (ddev && sdev)
		return cudaMemcpyDeviceToDevice;
	if (ddev)
		return cudaMemcpyHostToDevice;
	if (sdev)
		return cudaMemcpyDeviceToHost;
	return cudaMemcpyHostToHost;
}

static CUresult copy(void *dst, const void *src, size_t bytes, int kind, CUstream h, bool ptsz,
		     bool sync)
{
	struct sim_stream *s;
	struct sim_item *it;
	CUresult r = need_ctx();
	uint64_t seq;

	if (r)
		return r;
	r = resolve(h, ptsz, &s);
	if (r)
		return r;
	if (!bytes)
		return CUDA_SUCCESS;
	if (!dst || !src)
		return CUDA_ERROR_INVALID_VALUE;
	if (sync && s->capture)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	it = sim_item_new(TPSIM_MEMCPY);
	it->dst = dst;
	it->src = src;
	it->dpitch = it->spitch = it->width = bytes;
	it->rec.bytes = bytes;
	it->rec.copy_kind = kind == KIND_INFER ? infer_kind(dst, src) : kind;
	/* the host side of an HtoD/DtoH copy: pinned when the driver allocated it, else pageable;
	 * the real driver stages pageable memory, so even an async copy returns only when done */
	if (it->rec.copy_kind == cudaMemcpyHostToDevice || it->rec.copy_kind == cudaMemcpyDeviceToHost)
		it->rec.host_pageable = alloc_kind_of(it->rec.copy_kind == cudaMemcpyHostToDevice ?
						      src : dst) != ALLOC_HOST;
	if (it->rec.host_pageable)
		sync = true;
	seq = sim_submit_or_capture(s, it);
	if (sync && seq)
		sim_stream_wait_seq(s, seq);
	return CUDA_SUCCESS;
}

#define D(p) ((void *)(uintptr_t)(p))

CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	DRV_API(cuMemcpy);
	return copy(D(dst), D(src), ByteCount, KIND_INFER, NULL, false, true);
}

CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	DRV_API(cuMemcpy_ptds);
	return copy(D(dst), D(src), ByteCount, KIND_INFER, NULL, true, true);
}

CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
	DRV_API(cuMemcpyAsync);
	return copy(D(dst), D(src), ByteCount, KIND_INFER, hStream, false, false);
}

CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
				   CUstream hStream)
{
	DRV_API(cuMemcpyAsync_ptsz);
	return copy(D(dst), D(src), ByteCount, KIND_INFER, hStream, true, false);
}

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	DRV_API(cuMemcpyHtoD_v2);
	return copy(D(dstDevice), srcHost, ByteCount, cudaMemcpyHostToDevice, NULL, false, true);
}

CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	DRV_API(cuMemcpyHtoD_v2_ptds);
	return copy(D(dstDevice), srcHost, ByteCount, cudaMemcpyHostToDevice, NULL, true, true);
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	DRV_API(cuMemcpyDtoH_v2);
	return copy(dstHost, D(srcDevice), ByteCount, cudaMemcpyDeviceToHost, NULL, false, true);
}

CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	DRV_API(cuMemcpyDtoH_v2_ptds);
	return copy(dstHost, D(srcDevice), ByteCount, cudaMemcpyDeviceToHost, NULL, true, true);
}

CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
	DRV_API(cuMemcpyDtoD_v2);
	return copy(D(dstDevice), D(srcDevice), ByteCount, cudaMemcpyDeviceToDevice, NULL, false,
		    true);
}

CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
	DRV_API(cuMemcpyDtoD_v2_ptds);
	return copy(D(dstDevice), D(srcDevice), ByteCount, cudaMemcpyDeviceToDevice, NULL, true,
		    true);
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
				      CUstream hStream)
{
	DRV_API(cuMemcpyHtoDAsync_v2);
	return copy(D(dstDevice), srcHost, ByteCount, cudaMemcpyHostToDevice, hStream, false, false);
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost,
					   size_t ByteCount, CUstream hStream)
{
	DRV_API(cuMemcpyHtoDAsync_v2_ptsz);
	return copy(D(dstDevice), srcHost, ByteCount, cudaMemcpyHostToDevice, hStream, true, false);
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
				      CUstream hStream)
{
	DRV_API(cuMemcpyDtoHAsync_v2);
	return copy(dstHost, D(srcDevice), ByteCount, cudaMemcpyDeviceToHost, hStream, false, false);
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
					   CUstream hStream)
{
	DRV_API(cuMemcpyDtoHAsync_v2_ptsz);
	return copy(dstHost, D(srcDevice), ByteCount, cudaMemcpyDeviceToHost, hStream, true, false);
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
				      size_t ByteCount, CUstream hStream)
{
	DRV_API(cuMemcpyDtoDAsync_v2);
	return copy(D(dstDevice), D(srcDevice), ByteCount, cudaMemcpyDeviceToDevice, hStream,
		    false, false);
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
					   size_t ByteCount, CUstream hStream)
{
	DRV_API(cuMemcpyDtoDAsync_v2_ptsz);
	return copy(D(dstDevice), D(srcDevice), ByteCount, cudaMemcpyDeviceToDevice, hStream,
		    true, false);
}

static CUresult peer_ctx_check(CUcontext a, CUcontext b)
{
	return sim_handle_get(H_CONTEXT, a) && sim_handle_get(H_CONTEXT, b) ? CUDA_SUCCESS
									    : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
			      CUcontext srcContext, size_t ByteCount)
{
	DRV_API(cuMemcpyPeer);
	if (peer_ctx_check(dstContext, srcContext))
		return CUDA_ERROR_INVALID_CONTEXT;
	return copy(D(dstDevice), D(srcDevice), ByteCount, cudaMemcpyDeviceToDevice, NULL, false,
		    true);
}

CUresult CUDAAPI cuMemcpyPeer_ptds(CUdeviceptr dstDevice, CUcontext dstContext,
				   CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount)
{
	DRV_API(cuMemcpyPeer_ptds);
	if (peer_ctx_check(dstContext, srcContext))
		return CUDA_ERROR_INVALID_CONTEXT;
	return copy(D(dstDevice), D(srcDevice), ByteCount, cudaMemcpyDeviceToDevice, NULL, true,
		    true);
}

CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext,
				   CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount,
				   CUstream hStream)
{
	DRV_API(cuMemcpyPeerAsync);
	if (peer_ctx_check(dstContext, srcContext))
		return CUDA_ERROR_INVALID_CONTEXT;
	return copy(D(dstDevice), D(srcDevice), ByteCount, cudaMemcpyDeviceToDevice, hStream,
		    false, false);
}

CUresult CUDAAPI cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice, CUcontext dstContext,
					CUdeviceptr srcDevice, CUcontext srcContext,
					size_t ByteCount, CUstream hStream)
{
	DRV_API(cuMemcpyPeerAsync_ptsz);
	if (peer_ctx_check(dstContext, srcContext))
		return CUDA_ERROR_INVALID_CONTEXT;
	return copy(D(dstDevice), D(srcDevice), ByteCount, cudaMemcpyDeviceToDevice, hStream,
		    true, false);
}

/* 2D: host, device and unified operands (arrays are not simulated: CUDA_ERROR_NOT_SUPPORTED). */
static CUresult copy2d(const CUDA_MEMCPY2D *c, CUstream h, bool ptsz, bool sync)
{
	struct sim_stream *s;
	struct sim_item *it;
	CUresult r = need_ctx();
	const char *src;
	char *dst;
	bool sdev, ddev;
	uint64_t seq;

	if (r)
		return r;
	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	if (c->srcMemoryType == CU_MEMORYTYPE_ARRAY || c->dstMemoryType == CU_MEMORYTYPE_ARRAY)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (c->Height > 1 && (c->WidthInBytes > c->srcPitch || c->WidthInBytes > c->dstPitch))
		return CUDA_ERROR_INVALID_VALUE;
	r = resolve(h, ptsz, &s);
	if (r)
		return r;
	if (!c->WidthInBytes || !c->Height)
		return CUDA_SUCCESS;
	src = c->srcMemoryType == CU_MEMORYTYPE_HOST ? c->srcHost : D(c->srcDevice);
	dst = c->dstMemoryType == CU_MEMORYTYPE_HOST ? c->dstHost : D(c->dstDevice);
	if (!src || !dst)
		return CUDA_ERROR_INVALID_VALUE;
	src += c->srcY * c->srcPitch + c->srcXInBytes;
	dst += c->dstY * c->dstPitch + c->dstXInBytes;
	if (sync && s->capture)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	it = sim_item_new(TPSIM_MEMCPY);
	it->dst = dst;
	it->src = src;
	it->dpitch = c->dstPitch;
	it->spitch = c->srcPitch;
	it->width = c->WidthInBytes;
	it->height = c->Height;
	it->rec.bytes = c->WidthInBytes * c->Height;
	sdev = c->srcMemoryType == CU_MEMORYTYPE_DEVICE;
	ddev = c->dstMemoryType == CU_MEMORYTYPE_DEVICE;
	if (c->srcMemoryType == CU_MEMORYTYPE_UNIFIED || c->dstMemoryType == CU_MEMORYTYPE_UNIFIED) {
		it->rec.copy_kind = infer_kind(dst, src);
	} else {
		it->rec.copy_kind = sdev && ddev ? cudaMemcpyDeviceToDevice :
				    ddev ? cudaMemcpyHostToDevice :
				    sdev ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
	}
	seq = sim_submit_or_capture(s, it);
	if (sync && seq)
		sim_stream_wait_seq(s, seq);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy)
{
	DRV_API(cuMemcpy2D_v2);
	return copy2d(pCopy, NULL, false, true);
}

CUresult CUDAAPI cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *pCopy)
{
	DRV_API(cuMemcpy2D_v2_ptds);
	return copy2d(pCopy, NULL, true, true);
}

CUresult CUDAAPI cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
	DRV_API(cuMemcpy2DAsync_v2);
	return copy2d(pCopy, hStream, false, false);
}

CUresult CUDAAPI cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
	DRV_API(cuMemcpy2DAsync_v2_ptsz);
	return copy2d(pCopy, hStream, true, false);
}

static CUresult memset_n(CUdeviceptr dst, uint32_t value, unsigned elem, size_t n, CUstream h,
			 bool ptsz, bool sync)
{
	struct sim_stream *s;
	struct sim_item *it;
	CUresult r = need_ctx();
	uint64_t seq;

	if (r)
		return r;
	r = resolve(h, ptsz, &s);
	if (r)
		return r;
	if (!n)
		return CUDA_SUCCESS;
	if (!dst || dst % elem)
		return CUDA_ERROR_INVALID_VALUE;
	if (sync && s->capture)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	it = sim_item_new(TPSIM_MEMSET);
	it->dst = D(dst);
	it->value = value;
	it->elem = elem;
	it->width = it->dpitch = n * elem;
	it->rec.bytes = n * elem;
	seq = sim_submit_or_capture(s, it);
	if (sync && seq)
		sim_stream_wait_seq(s, seq);
	return CUDA_SUCCESS;
}

#define MEMSET_FNS(bits, type, elem)							\
CUresult CUDAAPI cuMemsetD##bits##_v2(CUdeviceptr dstDevice, type v, size_t N)		\
{											\
	DRV_API(cuMemsetD##bits##_v2);							\
	return memset_n(dstDevice, v, elem, N, NULL, false, true);			\
}											\
CUresult CUDAAPI cuMemsetD##bits##_v2_ptds(CUdeviceptr dstDevice, type v, size_t N)	\
{											\
	DRV_API(cuMemsetD##bits##_v2_ptds);						\
	return memset_n(dstDevice, v, elem, N, NULL, true, true);			\
}											\
CUresult CUDAAPI cuMemsetD##bits##Async(CUdeviceptr dstDevice, type v, size_t N,	\
					CUstream hStream)				\
{											\
	DRV_API(cuMemsetD##bits##Async);						\
	return memset_n(dstDevice, v, elem, N, hStream, false, false);			\
}											\
CUresult CUDAAPI cuMemsetD##bits##Async_ptsz(CUdeviceptr dstDevice, type v, size_t N,	\
					     CUstream hStream)				\
{											\
	DRV_API(cuMemsetD##bits##Async_ptsz);						\
	return memset_n(dstDevice, v, elem, N, hStream, true, false);			\
}

MEMSET_FNS(8, unsigned char, 1)
MEMSET_FNS(16, unsigned short, 2)
MEMSET_FNS(32, unsigned int, 4)

/* ---- streams ----------------------------------------------------------------------------- */

static CUresult stream_create(CUstream *ph, unsigned int flags, int priority)
{
	struct sim_stream *s;
	CUresult r = need_ctx();

	if (r)
		return r;
	if (!ph || (flags & ~(unsigned int)CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	s = sim_stream_new(flags, priority);
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*ph = (CUstream)sim_stream_handle(s);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	DRV_API(cuStreamCreate);
	return stream_create(phStream, Flags, 0);
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
	DRV_API(cuStreamCreateWithPriority);
	return stream_create(phStream, flags, priority);
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream)
{
	struct sim_stream *s;
	CUresult r;

	DRV_API(cuStreamDestroy_v2);
	r = need_ctx();
	if (r)
		return r;
	if (!hStream || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD)
		return CUDA_ERROR_INVALID_HANDLE;
	r = resolve(hStream, false, &s);
	if (r)
		return r;
	sim_stream_destroy(s);
	return CUDA_SUCCESS;
}

static CUresult stream_sync(CUstream h, bool ptsz)
{
	struct sim_stream *s;
	CUresult r = need_ctx();

	if (r)
		return r;
	r = resolve(h, ptsz, &s);
	if (r)
		return r;
	if (s->capture)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	sim_stream_sync(s);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
	DRV_API(cuStreamSynchronize);
	return stream_sync(hStream, false);
}

CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream)
{
	DRV_API(cuStreamSynchronize_ptsz);
	return stream_sync(hStream, true);
}

static CUresult stream_query(CUstream h, bool ptsz)
{
	struct sim_stream *s;
	CUresult r = need_ctx();

	if (r)
		return r;
	r = resolve(h, ptsz, &s);
	if (r)
		return r;
	return sim_stream_idle(s) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI cuStreamQuery(CUstream hStream)
{
	DRV_API(cuStreamQuery);
	return stream_query(hStream, false);
}

CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream)
{
	DRV_API(cuStreamQuery_ptsz);
	return stream_query(hStream, true);
}

static CUresult stream_get_id(CUstream h, unsigned long long *id, bool ptsz)
{
	struct sim_stream *s;
	CUresult r = need_ctx();

	if (r)
		return r;
	if (!id)
		return CUDA_ERROR_INVALID_VALUE;
	r = resolve(h, ptsz, &s);
	if (r)
		return r;
	*id = s->id;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamGetId(CUstream hStream, unsigned long long *streamId)
{
	DRV_API(cuStreamGetId);
	return stream_get_id(hStream, streamId, false);
}

CUresult CUDAAPI cuStreamGetId_ptsz(CUstream hStream, unsigned long long *streamId)
{
	DRV_API(cuStreamGetId_ptsz);
	return stream_get_id(hStream, streamId, true);
}

static CUresult host_func(CUstream h, CUhostFn fn, void *userData, bool ptsz)
{
	struct sim_stream *s;
	struct sim_item *it;
	CUresult r = need_ctx();

	if (r)
		return r;
	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	r = resolve(h, ptsz, &s);
	if (r)
		return r;
	it = sim_item_new(TPSIM_HOST_FN);
	it->fn = fn;
	it->arg = userData;
	sim_submit_or_capture(s, it);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
	DRV_API(cuLaunchHostFunc);
	return host_func(hStream, fn, userData, false);
}

CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
{
	DRV_API(cuLaunchHostFunc_ptsz);
	return host_func(hStream, fn, userData, true);
}

/* ---- events ------------------------------------------------------------------------------ */

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	struct sim_event *ev;
	CUresult r;

	DRV_API(cuEventCreate);
	r = need_ctx();
	if (r)
		return r;
	if (!phEvent || (Flags & ~(unsigned int)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
						 CU_EVENT_INTERPROCESS)))
		return CUDA_ERROR_INVALID_VALUE;
	ev = sim_event_new(Flags);
	if (!ev)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*phEvent = (CUevent)ev->handle;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent)
{
	struct sim_event *ev;

	DRV_API(cuEventDestroy_v2);
	if (need_ctx())
		return need_ctx();
	pthread_mutex_lock(&sim_lock);
	ev = sim_event_get((cudaEvent_t)hEvent);
	if (ev) {
		ev->destroyed = true;
		sim_event_put(ev);	/* pending records keep it alive until they complete */
	}
	pthread_mutex_unlock(&sim_lock);
	return ev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* Record and wait items hold an event reference until their worker completes them. */
static CUresult event_item(int kind, CUevent event, CUstream h, bool ptsz)
{
	struct sim_stream *s;
	struct sim_event *ev;
	struct sim_item *it;
	CUresult r = need_ctx();

	if (r)
		return r;
	r = resolve(h, ptsz, &s);
	if (r)
		return r;
	if (s->capture)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	it = sim_item_new(kind);
	pthread_mutex_lock(&sim_lock);
	ev = sim_event_get((cudaEvent_t)event);
	if (ev) {
		ev->refs++;
		it->event = ev;
		/* A record gets the next generation; a wait waits for the latest one (0: none). */
		it->event_gen = kind == TPSIM_EVENT_RECORD ? ++ev->record_gen : ev->record_gen;
	}
	pthread_mutex_unlock(&sim_lock);
	if (!ev) {
		free(it);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	sim_submit(s, it);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
	DRV_API(cuEventRecord);
	return event_item(TPSIM_EVENT_RECORD, hEvent, hStream, false);
}

CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
	DRV_API(cuEventRecord_ptsz);
	return event_item(TPSIM_EVENT_RECORD, hEvent, hStream, true);
}

CUresult CUDAAPI cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
	DRV_API(cuEventRecordWithFlags);
	if (flags & ~(unsigned int)CU_EVENT_RECORD_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	return event_item(TPSIM_EVENT_RECORD, hEvent, hStream, false);
}

CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags)
{
	DRV_API(cuEventRecordWithFlags_ptsz);
	if (flags & ~(unsigned int)CU_EVENT_RECORD_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	return event_item(TPSIM_EVENT_RECORD, hEvent, hStream, true);
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	DRV_API(cuStreamWaitEvent);
	if (Flags & ~(unsigned int)CU_EVENT_WAIT_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	return event_item(TPSIM_WAIT_EVENT, hEvent, hStream, false);
}

CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	DRV_API(cuStreamWaitEvent_ptsz);
	if (Flags & ~(unsigned int)CU_EVENT_WAIT_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	return event_item(TPSIM_WAIT_EVENT, hEvent, hStream, true);
}

/* Never recorded counts as complete, as in CUDA. */
CUresult CUDAAPI cuEventQuery(CUevent hEvent)
{
	struct sim_event *ev;
	CUresult r;

	DRV_API(cuEventQuery);
	if (need_ctx())
		return need_ctx();
	pthread_mutex_lock(&sim_lock);
	ev = sim_event_get((cudaEvent_t)hEvent);
	if (!ev)
		r = CUDA_ERROR_INVALID_HANDLE;
	else
		r = ev->done_gen >= ev->record_gen ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
	pthread_mutex_unlock(&sim_lock);
	return r;
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
	struct sim_event *ev;
	uint64_t gen;

	DRV_API(cuEventSynchronize);
	if (need_ctx())
		return need_ctx();
	pthread_mutex_lock(&sim_lock);
	ev = sim_event_get((cudaEvent_t)hEvent);
	if (!ev) {
		pthread_mutex_unlock(&sim_lock);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	gen = ev->record_gen;
	ev->refs++;
	while (ev->done_gen < gen)
		pthread_cond_wait(&sim_progress, &sim_lock);
	sim_event_put(ev);
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	struct sim_event *a, *b;
	CUresult r = CUDA_SUCCESS;

	DRV_API(cuEventElapsedTime_v2);
	if (need_ctx())
		return need_ctx();
	if (!pMilliseconds)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	a = sim_event_get((cudaEvent_t)hStart);
	b = sim_event_get((cudaEvent_t)hEnd);
	if (!a || !b || (a->flags & CU_EVENT_DISABLE_TIMING) || (b->flags & CU_EVENT_DISABLE_TIMING) ||
	    !a->record_gen || !b->record_gen)
		r = CUDA_ERROR_INVALID_HANDLE;
	else if (a->done_gen < a->record_gen || b->done_gen < b->record_gen)
		r = CUDA_ERROR_NOT_READY;
	else
		*pMilliseconds = (float)(((double)b->time_ns - (double)a->time_ns) / 1e6);
	pthread_mutex_unlock(&sim_lock);
	return r;
}

/* ---- modules, libraries, kernels ---------------------------------------------------------- */

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
	struct sim_module *m;
	CUresult r;

	DRV_API(cuModuleLoadData);
	r = need_ctx();
	if (r)
		return r;
	if (!module || !image)
		return CUDA_ERROR_INVALID_VALUE;
	m = sim_module_load(image, false, &r);
	if (m)
		*module = (CUmodule)m->handle;
	return r;
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
	struct sim_module *m;

	DRV_API(cuModuleUnload);
	if (need_ctx())
		return need_ctx();
	m = sim_handle_get(H_MODULE, hmod);
	if (!m)
		return CUDA_ERROR_INVALID_HANDLE;
	sim_module_unload(m);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	struct sim_module *m;
	struct sim_kernel *k;

	DRV_API(cuModuleGetFunction);
	if (need_ctx())
		return need_ctx();
	if (!hfunc || !name)
		return CUDA_ERROR_INVALID_VALUE;
	m = sim_handle_get(H_MODULE, hmod);
	if (!m)
		return CUDA_ERROR_INVALID_HANDLE;
	k = sim_module_find(m, name);
	if (!k)
		return CUDA_ERROR_NOT_FOUND;
	*hfunc = (CUfunction)k->function_handle;
	return CUDA_SUCCESS;
}

/* A library is context-independent: no current context needed. */
CUresult CUDAAPI cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
				   void **jitOptionsValues, unsigned int numJitOptions,
				   CUlibraryOption *libraryOptions, void **libraryOptionValues,
				   unsigned int numLibraryOptions)
{
	struct sim_module *m;
	CUresult r;

	DRV_API(cuLibraryLoadData);
	r = need_init();
	if (r)
		return r;
	if (!library || !code)
		return CUDA_ERROR_INVALID_VALUE;
	m = sim_module_load(code, true, &r);
	if (m)
		*library = (CUlibrary)m->handle;
	return r;
}

CUresult CUDAAPI cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
	struct sim_module *m;
	struct sim_kernel *k;

	DRV_API(cuLibraryGetKernel);
	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pKernel || !name)
		return CUDA_ERROR_INVALID_VALUE;
	m = sim_handle_get(H_LIBRARY, library);
	if (!m)
		return CUDA_ERROR_INVALID_HANDLE;
	k = sim_module_find(m, name);
	if (!k)
		return CUDA_ERROR_NOT_FOUND;
	*pKernel = (CUkernel)k->kernel_handle;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
	struct sim_kernel *k;

	DRV_API(cuKernelGetFunction);
	if (need_ctx())
		return need_ctx();
	if (!pFunc)
		return CUDA_ERROR_INVALID_VALUE;
	k = sim_handle_get(H_KERNEL, kernel);
	if (!k)
		return CUDA_ERROR_INVALID_HANDLE;
	*pFunc = (CUfunction)k->function_handle;
	return CUDA_SUCCESS;
}

/* cuFuncGetName, cuKernelGetName: the entry's name, for a handle of that kind */
static CUresult handle_name(const char **name, enum sim_htype kind, const void *handle)
{
	struct sim_kernel *k;

	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	k = sim_handle_get(kind, handle);
	if (!k)
		return CUDA_ERROR_INVALID_HANDLE;
	*name = k->name;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncGetName(const char **name, CUfunction hfunc)
{
	DRV_API(cuFuncGetName);
	return handle_name(name, H_FUNCTION, hfunc);
}

CUresult CUDAAPI cuKernelGetName(const char **name, CUkernel hfunc)
{
	DRV_API(cuKernelGetName);
	return handle_name(name, H_KERNEL, hfunc);
}

/* ---- launches ------------------------------------------------------------------------------ */

struct launch_geom {
	unsigned grid[3], block[3], shmem;
};

/* A CUfunction, or a CUkernel passed as one (CUDA 12+). */
static struct sim_kernel *function_of(CUfunction f)
{
	struct sim_kernel *k = sim_handle_get(H_FUNCTION, f);

	return k ? k : sim_handle_get(H_KERNEL, f);
}

static CUresult launch(CUfunction f, const struct launch_geom *g, CUstream h, bool ptsz,
		       void **kernelParams, void **extra)
{
	struct sim_kernel *k;
	struct sim_stream *s;
	struct sim_item *it;
	CUresult r = need_ctx();

	if (r)
		return r;
	k = function_of(f);
	if (!k)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!g->grid[0] || !g->grid[1] || !g->grid[2] || !g->block[0] || !g->block[1] ||
	    !g->block[2] || (unsigned long long)g->block[0] * g->block[1] * g->block[2] > 1024 ||
	    g->block[0] > 1024 || g->block[1] > 1024 || g->block[2] > 64 ||
	    g->grid[1] > 65535 || g->grid[2] > 65535 || g->shmem > MAX_DYNAMIC_SHMEM ||
	    (kernelParams && extra))
		return CUDA_ERROR_INVALID_VALUE;
	r = resolve(h, ptsz, &s);
	if (r)
		return r;
	it = sim_item_new(TPSIM_KERNEL);
	it->rec.name = k->name;
	it->rec.func = k->function_handle;
	memcpy(it->rec.grid, g->grid, sizeof(it->rec.grid));
	memcpy(it->rec.block, g->block, sizeof(it->rec.block));
	it->rec.shmem = g->shmem;
	it->dur_ns = sim_kernel_ns(k);
	if (k->body) {
		it->fn = k->body;	/* engine.c execute: real time, as a host function */
		it->arg = kernelParams ? *(void **)kernelParams[0] : NULL;
	}
	sim_submit_or_capture(s, it);
	return CUDA_SUCCESS;
}

#define GEOM(gx, gy, gz, bx, by, bz, sh) (&(struct launch_geom){ { gx, gy, gz }, { bx, by, bz }, sh })

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
				unsigned int gridDimZ, unsigned int blockDimX,
				unsigned int blockDimY, unsigned int blockDimZ,
				unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
				void **extra)
{
	DRV_API(cuLaunchKernel);
	return launch(f, GEOM(gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
			      sharedMemBytes), hStream, false, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
				     unsigned int gridDimZ, unsigned int blockDimX,
				     unsigned int blockDimY, unsigned int blockDimZ,
				     unsigned int sharedMemBytes, CUstream hStream,
				     void **kernelParams, void **extra)
{
	DRV_API(cuLaunchKernel_ptsz);
	return launch(f, GEOM(gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
			      sharedMemBytes), hStream, true, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
					   unsigned int gridDimY, unsigned int gridDimZ,
					   unsigned int blockDimX, unsigned int blockDimY,
					   unsigned int blockDimZ, unsigned int sharedMemBytes,
					   CUstream hStream, void **kernelParams)
{
	DRV_API(cuLaunchCooperativeKernel);
	return launch(f, GEOM(gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
			      sharedMemBytes), hStream, false, kernelParams, NULL);
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
						unsigned int gridDimY, unsigned int gridDimZ,
						unsigned int blockDimX, unsigned int blockDimY,
						unsigned int blockDimZ, unsigned int sharedMemBytes,
						CUstream hStream, void **kernelParams)
{
	DRV_API(cuLaunchCooperativeKernel_ptsz);
	return launch(f, GEOM(gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
			      sharedMemBytes), hStream, true, kernelParams, NULL);
}

/* CUlaunchConfig and its attributes, checked as the real driver checks them. */
static CUresult launch_ex(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
			  void **extra, bool ptsz)
{
	if (!config || (config->numAttrs && !config->attrs))
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < config->numAttrs; i++) {
		const CUlaunchAttribute *a = &config->attrs[i];

		switch (a->id) {
		case CU_LAUNCH_ATTRIBUTE_IGNORE:
		case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
		case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
		case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
		case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
		case CU_LAUNCH_ATTRIBUTE_PRIORITY:
		case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
		case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
		case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT:
		case CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE:
		case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
			break;
		case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
			if (a->value.cooperative > 1)
				return CUDA_ERROR_INVALID_VALUE;
			break;
		case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
		case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION: {
			unsigned cx = a->value.clusterDim.x, cy = a->value.clusterDim.y,
				 cz = a->value.clusterDim.z;

			if (!cx || !cy || !cz || (unsigned long long)cx * cy * cz > 16 ||
			    config->gridDimX % cx || config->gridDimY % cy || config->gridDimZ % cz)
				return CUDA_ERROR_INVALID_CLUSTER_SIZE;
			break;
		}
		default:
			return CUDA_ERROR_INVALID_VALUE;
		}
	}
	return launch(f, GEOM(config->gridDimX, config->gridDimY, config->gridDimZ,
			      config->blockDimX, config->blockDimY, config->blockDimZ,
			      config->sharedMemBytes), config->hStream, ptsz, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
				  void **extra)
{
	DRV_API(cuLaunchKernelEx);
	return launch_ex(config, f, kernelParams, extra, false);
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
				       void **kernelParams, void **extra)
{
	DRV_API(cuLaunchKernelEx_ptsz);
	return launch_ex(config, f, kernelParams, extra, true);
}

/* ---- stream capture and graphs ------------------------------------------------------------ */

static CUresult begin_capture(CUstream h, CUstreamCaptureMode mode, bool ptsz)
{
	struct sim_stream *s;
	struct sim_graph *g;
	CUresult r = need_ctx();

	if (r)
		return r;
	r = resolve(h, ptsz, &s);
	if (r)
		return r;
	/* the legacy default stream cannot be captured */
	if (s->legacy)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	if (mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	g = sim_graph_new(false);
	if (!g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&sim_lock);
	if (s->capture) {
		pthread_mutex_unlock(&sim_lock);
		sim_graph_free(g);
		return CUDA_ERROR_ILLEGAL_STATE;
	}
	s->capture = g;
	s->capture_mode = mode;
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
	DRV_API(cuStreamBeginCapture_v2);
	return begin_capture(hStream, mode, false);
}

CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
	DRV_API(cuStreamBeginCapture_v2_ptsz);
	return begin_capture(hStream, mode, true);
}

static CUresult end_capture(CUstream h, CUgraph *phGraph, bool ptsz)
{
	struct sim_stream *s;
	struct sim_graph *g;
	CUresult r = need_ctx();

	if (r)
		return r;
	if (!phGraph)
		return CUDA_ERROR_INVALID_VALUE;
	r = resolve(h, ptsz, &s);
	if (r)
		return r;
	pthread_mutex_lock(&sim_lock);
	g = s->capture;
	s->capture = NULL;
	pthread_mutex_unlock(&sim_lock);
	if (!g)
		return CUDA_ERROR_ILLEGAL_STATE;
	*phGraph = (CUgraph)g->handle;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
	DRV_API(cuStreamEndCapture);
	return end_capture(hStream, phGraph, false);
}

CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
	DRV_API(cuStreamEndCapture_ptsz);
	return end_capture(hStream, phGraph, true);
}

static CUresult capture_info(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id, bool ptsz)
{
	struct sim_stream *s;
	CUresult r = need_ctx();

	if (r)
		return r;
	if (!status)
		return CUDA_ERROR_INVALID_VALUE;
	r = resolve(h, ptsz, &s);
	if (r)
		return r;
	pthread_mutex_lock(&sim_lock);
	*status = s->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
	if (id && s->capture)
		*id = s->capture->graph_id;
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
	DRV_API(cuStreamIsCapturing);
	return capture_info(hStream, captureStatus, NULL, false);
}

CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
	DRV_API(cuStreamIsCapturing_ptsz);
	return capture_info(hStream, captureStatus, NULL, true);
}

CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
					cuuint64_t *id_out)
{
	DRV_API(cuStreamGetCaptureInfo);
	return capture_info(hStream, captureStatus_out, id_out, false);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_ptsz(CUstream hStream,
					     CUstreamCaptureStatus *captureStatus_out,
					     cuuint64_t *id_out)
{
	DRV_API(cuStreamGetCaptureInfo_ptsz);
	return capture_info(hStream, captureStatus_out, id_out, true);
}

/* An empty graph (what cudaGraphCreate makes; node-building calls are not simulated). */
CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
	struct sim_graph *g;

	DRV_API(cuGraphCreate);
	if (need_ctx())
		return need_ctx();
	if (!phGraph || flags)
		return CUDA_ERROR_INVALID_VALUE;
	g = sim_graph_new(false);
	if (!g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*phGraph = (CUgraph)g->handle;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph)
{
	struct sim_graph *g;

	DRV_API(cuGraphDestroy);
	if (need_ctx())
		return need_ctx();
	g = sim_handle_get(H_GRAPH, hGraph);
	if (!g)
		return CUDA_ERROR_INVALID_VALUE;
	sim_graph_free(g);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
					     unsigned long long flags)
{
	struct sim_graph *g, *exec;

	DRV_API(cuGraphInstantiateWithFlags);
	if (need_ctx())
		return need_ctx();
	g = sim_handle_get(H_GRAPH, hGraph);
	if (!phGraphExec || !g)
		return CUDA_ERROR_INVALID_VALUE;
	exec = sim_graph_new(true);
	if (!exec)
		return CUDA_ERROR_OUT_OF_MEMORY;
	exec->graph_id = g->graph_id;
	pthread_mutex_lock(&sim_lock);
	exec->nodes = calloc(g->nr_nodes ? g->nr_nodes : 1, sizeof(*exec->nodes));
	for (size_t i = 0; exec->nodes && i < g->nr_nodes; i++)
		exec->nodes[exec->nr_nodes++] = sim_item_clone(g->nodes[i]);
	pthread_mutex_unlock(&sim_lock);
	if (!exec->nodes) {
		sim_graph_free(exec);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*phGraphExec = (CUgraphExec)exec->handle;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	struct sim_graph *exec;

	DRV_API(cuGraphExecDestroy);
	if (need_ctx())
		return need_ctx();
	exec = sim_handle_get(H_GRAPH_EXEC, hGraphExec);
	if (!exec)
		return CUDA_ERROR_INVALID_VALUE;
	sim_graph_free(exec);
	return CUDA_SUCCESS;
}

/* Replays the nodes in capture order on the stream; an empty graph is one graph item. */
static CUresult graph_launch(CUgraphExec h, CUstream hs, bool ptsz)
{
	struct sim_graph *exec;
	struct sim_stream *s;
	struct sim_item *it;
	CUresult r = need_ctx();

	if (r)
		return r;
	exec = sim_handle_get(H_GRAPH_EXEC, h);
	if (!exec)
		return CUDA_ERROR_INVALID_VALUE;
	r = resolve(hs, ptsz, &s);
	if (r)
		return r;
	if (s->capture)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	if (!exec->nr_nodes) {
		it = sim_item_new(TPSIM_GRAPH);
		it->rec.name = "cudaGraphLaunch";
		it->rec.graph_id = exec->graph_id;
		it->dur_ns = sim_cfg.kernel_ns;
		sim_submit(s, it);
		return CUDA_SUCCESS;
	}
	for (size_t i = 0; i < exec->nr_nodes; i++) {
		struct sim_item *proto = exec->nodes[i];

		it = sim_item_new(proto->kind);
		*it = *proto;
		it->next = NULL;
		it->rec.host_tid = sim_gettid();
		it->rec.api_start_ns = sim_now_ns();
		it->rec.correlation = sim_work_correlation();
		it->rec.graph_id = exec->graph_id;
		sim_submit(s, it);
	}
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	DRV_API(cuGraphLaunch);
	return graph_launch(hGraphExec, hStream, false);
}

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	DRV_API(cuGraphLaunch_ptsz);
	return graph_launch(hGraphExec, hStream, true);
}

/* ---- entry points by name ------------------------------------------------------------------ */

extern const struct tpsim_driver_ops sim_driver_ops;

CUresult CUDAAPI cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
	static const char uuid[16] = TPSIM_DRIVER_UUID;

	DRV_API(cuGetExportTable);
	if (!ppExportTable || !pExportTableId)
		return CUDA_ERROR_INVALID_VALUE;
	if (memcmp(pExportTableId->bytes, uuid, sizeof(uuid)))
		return CUDA_ERROR_NOT_FOUND;
	*ppExportTable = &sim_driver_ops;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
				     cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus);

/*
 * cuGetProcAddress_v2 resolves a base name ("cuMemcpyHtoD") for a CUDA version to the entry
 * point the real driver hands out: the newest version not above the one asked for, and with
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM its _ptds/_ptsz form where there is one.
 */
static const struct proc {
	const char *name;
	int version;
	void *fn, *fn_pt;
} procs[] = {
#define P(name, ver, fn, fn_pt) { name, ver, (void *)(fn), (void *)(fn_pt) }
	P("cuInit", 2000, cuInit, NULL),
	P("cuDriverGetVersion", 2020, cuDriverGetVersion, NULL),
	P("cuDeviceGet", 2000, cuDeviceGet, NULL),
	P("cuDeviceGetCount", 2000, cuDeviceGetCount, NULL),
	P("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain, NULL),
	P("cuCtxGetCurrent", 4000, cuCtxGetCurrent, NULL),
	P("cuCtxSetCurrent", 4000, cuCtxSetCurrent, NULL),
	P("cuCtxSynchronize", 2000, cuCtxSynchronize, NULL),
	P("cuCtxCreate", 3020, cuCtxCreate_v2, NULL),
	P("cuCtxDestroy", 4000, cuCtxDestroy_v2, NULL),
	P("cuCtxGetDevice", 2000, cuCtxGetDevice, NULL),
	P("cuCtxGetId", 12000, cuCtxGetId, NULL),
	P("cuGetProcAddress", 12000, cuGetProcAddress_v2, NULL),
	P("cuGetExportTable", 3000, cuGetExportTable, NULL),
	P("cuMemAlloc", 3020, cuMemAlloc_v2, NULL),
	P("cuMemAllocManaged", 6000, cuMemAllocManaged, NULL),
	P("cuMemAllocHost", 3020, cuMemAllocHost_v2, NULL),
	P("cuMemHostAlloc", 2020, cuMemHostAlloc, NULL),
	P("cuMemFree", 3020, cuMemFree_v2, NULL),
	P("cuMemFreeHost", 2000, cuMemFreeHost, NULL),
	P("cuMemAllocAsync", 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz),
	P("cuMemFreeAsync", 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz),
	P("cuMemCreate", 10020, cuMemCreate, NULL),
	P("cuMemRelease", 10020, cuMemRelease, NULL),
	P("cuMemAddressReserve", 10020, cuMemAddressReserve, NULL),
	P("cuMemAddressFree", 10020, cuMemAddressFree, NULL),
	P("cuMemMap", 10020, cuMemMap, NULL),
	P("cuMemUnmap", 10020, cuMemUnmap, NULL),
	P("cuMemcpy", 4000, cuMemcpy, cuMemcpy_ptds),
	P("cuMemcpyAsync", 4000, cuMemcpyAsync, cuMemcpyAsync_ptsz),
	P("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds),
	P("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds),
	P("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds),
	P("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz),
	P("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz),
	P("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz),
	P("cuMemcpyPeer", 4000, cuMemcpyPeer, cuMemcpyPeer_ptds),
	P("cuMemcpyPeerAsync", 4000, cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz),
	P("cuMemcpy2D", 3020, cuMemcpy2D_v2, cuMemcpy2D_v2_ptds),
	P("cuMemcpy2DAsync", 3020, cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2_ptsz),
	P("cuMemsetD8", 3020, cuMemsetD8_v2, cuMemsetD8_v2_ptds),
	P("cuMemsetD16", 3020, cuMemsetD16_v2, cuMemsetD16_v2_ptds),
	P("cuMemsetD32", 3020, cuMemsetD32_v2, cuMemsetD32_v2_ptds),
	P("cuMemsetD8Async", 3020, cuMemsetD8Async, cuMemsetD8Async_ptsz),
	P("cuMemsetD16Async", 3020, cuMemsetD16Async, cuMemsetD16Async_ptsz),
	P("cuMemsetD32Async", 3020, cuMemsetD32Async, cuMemsetD32Async_ptsz),
	P("cuStreamCreate", 2000, cuStreamCreate, NULL),
	P("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority, NULL),
	P("cuStreamDestroy", 4000, cuStreamDestroy_v2, NULL),
	P("cuStreamSynchronize", 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz),
	P("cuStreamGetId", 12000, cuStreamGetId, cuStreamGetId_ptsz),
	P("cuStreamQuery", 2000, cuStreamQuery, cuStreamQuery_ptsz),
	P("cuStreamWaitEvent", 3020, cuStreamWaitEvent, cuStreamWaitEvent_ptsz),
	P("cuLaunchHostFunc", 10000, cuLaunchHostFunc, cuLaunchHostFunc_ptsz),
	P("cuEventCreate", 2000, cuEventCreate, NULL),
	P("cuEventDestroy", 4000, cuEventDestroy_v2, NULL),
	P("cuEventRecord", 2000, cuEventRecord, cuEventRecord_ptsz),
	P("cuEventRecordWithFlags", 11010, cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz),
	P("cuEventQuery", 2000, cuEventQuery, NULL),
	P("cuEventSynchronize", 2000, cuEventSynchronize, NULL),
	P("cuEventElapsedTime", 12080, cuEventElapsedTime_v2, NULL),
	P("cuModuleLoadData", 2000, cuModuleLoadData, NULL),
	P("cuModuleUnload", 2000, cuModuleUnload, NULL),
	P("cuModuleGetFunction", 2000, cuModuleGetFunction, NULL),
	P("cuLibraryLoadData", 12000, cuLibraryLoadData, NULL),
	P("cuLibraryGetKernel", 12000, cuLibraryGetKernel, NULL),
	P("cuKernelGetFunction", 12000, cuKernelGetFunction, NULL),
	P("cuFuncGetName", 12030, cuFuncGetName, NULL),
	P("cuKernelGetName", 12030, cuKernelGetName, NULL),
	P("cuLaunchKernel", 4000, cuLaunchKernel, cuLaunchKernel_ptsz),
	P("cuLaunchKernelEx", 11060, cuLaunchKernelEx, cuLaunchKernelEx_ptsz),
	P("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel,
	  cuLaunchCooperativeKernel_ptsz),
	P("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz),
	P("cuStreamEndCapture", 10000, cuStreamEndCapture, cuStreamEndCapture_ptsz),
	P("cuStreamIsCapturing", 10000, cuStreamIsCapturing, cuStreamIsCapturing_ptsz),
	P("cuStreamGetCaptureInfo", 10010, cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_ptsz),
	P("cuGraphCreate", 10000, cuGraphCreate, NULL),
	P("cuGraphDestroy", 10000, cuGraphDestroy, NULL),
	P("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags, NULL),
	P("cuGraphExecDestroy", 10000, cuGraphExecDestroy, NULL),
	P("cuGraphLaunch", 10000, cuGraphLaunch, cuGraphLaunch_ptsz),
#undef P
};

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
				     cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
	const struct proc *found = NULL;
	bool too_old = false;

	DRV_API(cuGetProcAddress_v2);
	if (!symbol || !pfn)
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;
	for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
		if (strcmp(procs[i].name, symbol))
			continue;
		if (procs[i].version > cudaVersion)
			too_old = true;
		else if (!found || procs[i].version > found->version)
			found = &procs[i];
	}
	if (!found) {
		if (symbolStatus)
			*symbolStatus = too_old ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
						: CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
		return CUDA_ERROR_NOT_FOUND;
	}
	*pfn = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && found->fn_pt ?
		found->fn_pt : found->fn;
	if (symbolStatus)
		*symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
	return CUDA_SUCCESS;
}
