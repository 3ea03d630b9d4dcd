// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * CUDA 13 runtime API entry points of the simulated libcudart.so.13. Prototypes come from the
 * real <cuda_runtime_api.h>, included with __CUDA_API_VERSION_INTERNAL like the real library is
 * built, so both the plain and the _ptds/_ptsz names are declared and checked by the compiler.
 *
 * Return values follow the real runtime where it is observable (NULL out-pointer:
 * cudaErrorInvalidValue, bad handle: cudaErrorInvalidResourceHandle, ...). One deliberate
 * difference: cudaLaunchKernel accepts any host function pointer, registered or not, so C
 * workloads can launch plain functions (named after their ELF symbol when dladdr finds one).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sim.h"

#define DEVICE_MEM_BYTES (80ULL << 30)
#define ALLOC_ALIGN 256
#define PREFAULT_MAX (256ULL << 20)

static __thread cudaError_t last_error;

/* Records err as the thread's last error, like every runtime call does. */
static cudaError_t ret(cudaError_t err)
{
	if (err != cudaSuccess && err != cudaErrorNotReady)
		last_error = err;
	return err;
}

__attribute__((constructor)) static void sim_ctor(void)
{
	sim_init();
}

/* ---- allocations: pointer -> size and kind, so cudaFree can reject what it did not hand out */

enum alloc_kind { ALLOC_DEVICE, ALLOC_HOST, ALLOC_MANAGED };

struct alloc {
	void *ptr;
	size_t size;
	enum alloc_kind kind;
	struct alloc *next;
};

#define ALLOC_BUCKETS 1024
static struct alloc *alloc_table[ALLOC_BUCKETS];
static pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t alloc_bucket(const void *p)
{
	return ((uintptr_t)p >> 8) % ALLOC_BUCKETS;
}

static cudaError_t alloc_new(void **out, size_t size, enum alloc_kind kind)
{
	struct alloc *a;
	void *p;

	if (!out)
		return cudaErrorInvalidValue;
	if (size == 0) {
		*out = NULL;
		return cudaSuccess;
	}
	p = aligned_alloc(ALLOC_ALIGN, (size + ALLOC_ALIGN - 1) / ALLOC_ALIGN * ALLOC_ALIGN);
	a = malloc(sizeof(*a));
	if (!p || !a) {
		free(p);
		free(a);
		return cudaErrorMemoryAllocation;
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
	return cudaSuccess;
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

/* TPSIM_MEM_LIMIT_BYTES=N: cudaMalloc fails with cudaErrorMemoryAllocation when the device
 * memory it handed out and not yet freed, plus size, would exceed N (OOM tests). */
cudaError_t CUDARTAPI cudaMalloc(void **devPtr, size_t size)
{
	const char *limit = getenv("TPSIM_MEM_LIMIT_BYTES");

	if (limit && devPtr) {
		size_t live = 0;

		pthread_mutex_lock(&alloc_lock);
		for (size_t i = 0; i < ALLOC_BUCKETS; i++)
			for (struct alloc *a = alloc_table[i]; a; a = a->next)
				if (a->kind == ALLOC_DEVICE)
					live += a->size;
		pthread_mutex_unlock(&alloc_lock);
		if (live + size > strtoull(limit, NULL, 0))
			return ret(cudaErrorMemoryAllocation);
	}
	return ret(alloc_new(devPtr, size, ALLOC_DEVICE));
}

cudaError_t CUDARTAPI cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
	if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost)
		return ret(cudaErrorInvalidValue);
	return ret(alloc_new(devPtr, size, ALLOC_MANAGED));
}

cudaError_t CUDARTAPI cudaMallocHost(void **ptr, size_t size)
{
	return ret(alloc_new(ptr, size, ALLOC_HOST));
}

cudaError_t CUDARTAPI cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	if (flags & ~(unsigned int)(cudaHostAllocPortable | cudaHostAllocMapped |
				    cudaHostAllocWriteCombined))
		return ret(cudaErrorInvalidValue);
	return ret(alloc_new(pHost, size, ALLOC_HOST));
}

/* cudaFree synchronizes the device, as the real one does, so no queued copy touches freed memory. */
cudaError_t CUDARTAPI cudaFree(void *devPtr)
{
	if (!devPtr)
		return cudaSuccess;
	sim_device_sync(sim_current_device());
	if (!alloc_forget(devPtr, 1u << ALLOC_DEVICE | 1u << ALLOC_MANAGED))
		return ret(cudaErrorInvalidValue);
	free(devPtr);
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFreeHost(void *ptr)
{
	if (!ptr)
		return cudaSuccess;
	sim_device_sync(sim_current_device());
	if (!alloc_forget(ptr, 1u << ALLOC_HOST))
		return ret(cudaErrorInvalidValue);
	free(ptr);
	return cudaSuccess;
}

static cudaError_t malloc_async(void **devPtr, size_t size, cudaStream_t hStream, bool ptsz)
{
	struct sim_stream *s;
	cudaError_t err = sim_stream_resolve(hStream, ptsz, &s);

	if (err)
		return ret(err);
	return ret(alloc_new(devPtr, size, ALLOC_DEVICE));
}

cudaError_t CUDARTAPI cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
	return malloc_async(devPtr, size, hStream, false);
}

cudaError_t CUDARTAPI cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
	return malloc_async(devPtr, size, hStream, true);
}

/* The memory goes back when the stream reaches the free, not when the call returns. */
static cudaError_t free_async(void *devPtr, cudaStream_t hStream, bool ptsz)
{
	struct sim_stream *s;
	struct sim_item *it;
	cudaError_t err = sim_stream_resolve(hStream, ptsz, &s);

	if (err)
		return ret(err);
	if (!devPtr)
		return ret(cudaErrorInvalidValue);
	if (!alloc_forget(devPtr, 1u << ALLOC_DEVICE))
		return ret(cudaErrorInvalidValue);
	it = sim_item_new(TPSIM_FREE);
	it->dst = devPtr;
	it->rec.correlation = sim_next_correlation();
	sim_submit(s, it);
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
	return free_async(devPtr, hStream, false);
}

cudaError_t CUDARTAPI cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
	return free_async(devPtr, hStream, true);
}

/* ---- errors and versions ---------------------------------------------------------------- */

static const struct {
	int code;
	const char *name, *string;
} error_table[] = {
#include "errors.inc"
};

cudaError_t CUDARTAPI cudaGetLastError(void)
{
	cudaError_t err = last_error;

	last_error = cudaSuccess;
	return err;
}

cudaError_t CUDARTAPI cudaPeekAtLastError(void)
{
	return last_error;
}

const char *CUDARTAPI cudaGetErrorName(cudaError_t error)
{
	size_t i;

	for (i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++)
		if (error_table[i].code == (int)error)
			return error_table[i].name;
	return "unrecognized error code";
}

const char *CUDARTAPI cudaGetErrorString(cudaError_t error)
{
	size_t i;

	for (i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++)
		if (error_table[i].code == (int)error)
			return error_table[i].string;
	return "unrecognized error code";
}

cudaError_t CUDARTAPI cudaRuntimeGetVersion(int *runtimeVersion)
{
	if (!runtimeVersion)
		return ret(cudaErrorInvalidValue);
	*runtimeVersion = CUDART_VERSION;
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDriverGetVersion(int *driverVersion)
{
	if (!driverVersion)
		return ret(cudaErrorInvalidValue);
	*driverVersion = 13000;
	return cudaSuccess;
}

/* ---- devices ---------------------------------------------------------------------------- */

cudaError_t CUDARTAPI cudaGetDeviceCount(int *count)
{
	if (!count)
		return ret(cudaErrorInvalidValue);
	*count = sim_cfg.devices;
	return sim_cfg.devices ? cudaSuccess : ret(cudaErrorNoDevice);
}

cudaError_t CUDARTAPI cudaSetDevice(int device)
{
	if (device < 0 || device >= sim_cfg.devices)
		return ret(cudaErrorInvalidDevice);
	sim_set_current_device(device);
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDevice(int *device)
{
	if (!device)
		return ret(cudaErrorInvalidValue);
	*device = sim_current_device();
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceSynchronize(void)
{
	sim_device_sync(sim_current_device());
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceReset(void)
{
	sim_device_sync(sim_current_device());
	return cudaSuccess;
}

/* An H100-like device; only what tools commonly read is filled. */
cudaError_t CUDARTAPI cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
	if (!prop)
		return ret(cudaErrorInvalidValue);
	if (device < 0 || device >= sim_cfg.devices)
		return ret(cudaErrorInvalidDevice);
	memset(prop, 0, sizeof(*prop));
	snprintf(prop->name, sizeof(prop->name), "TPSIM Simulated GPU");
	memcpy(prop->uuid.bytes, "TPSIM-GPU-UUID-", 15);
	prop->uuid.bytes[15] = (char)device;
	prop->totalGlobalMem = DEVICE_MEM_BYTES;
	prop->sharedMemPerBlock = 48 << 10;
	prop->sharedMemPerBlockOptin = 227 << 10;
	prop->sharedMemPerMultiprocessor = 228 << 10;
	prop->regsPerBlock = 65536;
	prop->regsPerMultiprocessor = 65536;
	prop->warpSize = 32;
	prop->memPitch = 2147483647;
	prop->maxThreadsPerBlock = 1024;
	prop->maxThreadsDim[0] = 1024;
	prop->maxThreadsDim[1] = 1024;
	prop->maxThreadsDim[2] = 64;
	prop->maxGridSize[0] = 2147483647;
	prop->maxGridSize[1] = 65535;
	prop->maxGridSize[2] = 65535;
	prop->totalConstMem = 64 << 10;
	prop->major = 9;
	prop->minor = 0;
	prop->multiProcessorCount = 132;
	prop->maxThreadsPerMultiProcessor = 2048;
	prop->maxBlocksPerMultiProcessor = 32;
	prop->memoryBusWidth = 5120;
	prop->l2CacheSize = 50 << 20;
	prop->pciBusID = 0x10 + device;
	prop->concurrentKernels = 1;
	prop->asyncEngineCount = 2;
	prop->unifiedAddressing = 1;
	prop->managedMemory = 1;
	prop->canMapHostMemory = 1;
	prop->cooperativeLaunch = 1;
	prop->streamPrioritiesSupported = 1;
	prop->memoryPoolsSupported = 1;
	return cudaSuccess;
}

/* ---- streams ---------------------------------------------------------------------------- */

cudaError_t CUDARTAPI cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
						    int priority)
{
	struct sim_stream *s;

	if (!pStream || (flags & ~(unsigned int)cudaStreamNonBlocking))
		return ret(cudaErrorInvalidValue);
	s = sim_stream_new(sim_current_device(), flags, priority);
	if (!s)
		return ret(cudaErrorMemoryAllocation);
	*pStream = sim_stream_handle(s);
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	return cudaStreamCreateWithPriority(pStream, flags, 0);
}

cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *pStream)
{
	return cudaStreamCreateWithPriority(pStream, cudaStreamDefault, 0);
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream)
{
	struct sim_stream *s;
	cudaError_t err = sim_stream_resolve(stream, false, &s);

	if (err)
		return ret(err);
	if (s->legacy || s->per_thread)
		return ret(cudaErrorInvalidResourceHandle);
	sim_stream_destroy(s);
	return cudaSuccess;
}

static cudaError_t stream_sync(cudaStream_t stream, bool ptsz)
{
	struct sim_stream *s;
	cudaError_t err = sim_stream_resolve(stream, ptsz, &s);

	if (err)
		return ret(err);
	sim_stream_sync(s);
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream)
{
	return stream_sync(stream, false);
}

cudaError_t CUDARTAPI cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
	return stream_sync(stream, true);
}

static cudaError_t stream_query(cudaStream_t stream, bool ptsz)
{
	struct sim_stream *s;
	cudaError_t err = sim_stream_resolve(stream, ptsz, &s);

	if (err)
		return ret(err);
	return sim_stream_idle(s) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream)
{
	return stream_query(stream, false);
}

cudaError_t CUDARTAPI cudaStreamQuery_ptsz(cudaStream_t stream)
{
	return stream_query(stream, true);
}

static cudaError_t stream_get_id(cudaStream_t stream, unsigned long long *streamId, bool ptsz)
{
	struct sim_stream *s;
	cudaError_t err;

	if (!streamId)
		return ret(cudaErrorInvalidValue);
	err = sim_stream_resolve(stream, ptsz, &s);
	if (err)
		return ret(err);
	*streamId = s->id;
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamGetId(cudaStream_t hStream, unsigned long long *streamId)
{
	return stream_get_id(hStream, streamId, false);
}

cudaError_t CUDARTAPI cudaStreamGetId_ptsz(cudaStream_t hStream, unsigned long long *streamId)
{
	return stream_get_id(hStream, streamId, true);
}

static cudaError_t host_func(cudaStream_t stream, cudaHostFn_t fn, void *userData, bool ptsz)
{
	struct sim_stream *s;
	struct sim_item *it;
	cudaError_t err;

	if (!fn)
		return ret(cudaErrorInvalidValue);
	err = sim_stream_resolve(stream, ptsz, &s);
	if (err)
		return ret(err);
	it = sim_item_new(TPSIM_HOST_FN);
	it->fn = fn;
	it->arg = userData;
	it->rec.correlation = sim_next_correlation();
	sim_submit(s, it);
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
	return host_func(stream, fn, userData, false);
}

cudaError_t CUDARTAPI cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn,
					      void *userData)
{
	return host_func(stream, fn, userData, true);
}

/* ---- events ----------------------------------------------------------------------------- */

cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	struct sim_event *ev;

	if (!event || (flags & ~(unsigned int)(cudaEventBlockingSync | cudaEventDisableTiming |
					       cudaEventInterprocess)))
		return ret(cudaErrorInvalidValue);
	ev = sim_event_new(flags);
	if (!ev)
		return ret(cudaErrorMemoryAllocation);
	*event = (cudaEvent_t)ev;
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t *event)
{
	return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event)
{
	struct sim_event *ev;

	pthread_mutex_lock(&sim_lock);
	ev = sim_event_get(event);
	if (ev) {
		ev->destroyed = true;
		sim_event_put(ev);	/* pending records keep it alive until they complete */
	}
	pthread_mutex_unlock(&sim_lock);
	return ev ? cudaSuccess : ret(cudaErrorInvalidResourceHandle);
}

/* Record and wait items hold an event reference until their worker completes them. */
static cudaError_t submit_event_item(int kind, cudaEvent_t event, cudaStream_t stream, bool ptsz)
{
	struct sim_stream *s;
	struct sim_event *ev;
	struct sim_item *it;
	cudaError_t err = sim_stream_resolve(stream, ptsz, &s);

	if (err)
		return ret(err);
	it = sim_item_new(kind);
	pthread_mutex_lock(&sim_lock);
	ev = sim_event_get(event);
	if (ev) {
		ev->refs++;
		it->event = ev;
		/* A record gets the next generation; a wait waits for the latest one (0: none). */
		it->event_gen = kind == TPSIM_EVENT_RECORD ? ++ev->record_gen : ev->record_gen;
	}
	pthread_mutex_unlock(&sim_lock);
	if (!ev) {
		free(it);
		return ret(cudaErrorInvalidResourceHandle);
	}
	it->rec.correlation = sim_next_correlation();
	sim_submit(s, it);
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	return submit_event_item(TPSIM_EVENT_RECORD, event, stream, false);
}

cudaError_t CUDARTAPI cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream)
{
	return submit_event_item(TPSIM_EVENT_RECORD, event, stream, true);
}

cudaError_t CUDARTAPI cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
					       unsigned int flags)
{
	if (flags & ~(unsigned int)cudaEventRecordExternal)
		return ret(cudaErrorInvalidValue);
	return submit_event_item(TPSIM_EVENT_RECORD, event, stream, false);
}

cudaError_t CUDARTAPI cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream,
						    unsigned int flags)
{
	if (flags & ~(unsigned int)cudaEventRecordExternal)
		return ret(cudaErrorInvalidValue);
	return submit_event_item(TPSIM_EVENT_RECORD, event, stream, true);
}

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
					  unsigned int flags)
{
	if (flags & ~(unsigned int)cudaEventWaitExternal)
		return ret(cudaErrorInvalidValue);
	return submit_event_item(TPSIM_WAIT_EVENT, event, stream, false);
}

cudaError_t CUDARTAPI cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event,
					       unsigned int flags)
{
	if (flags & ~(unsigned int)cudaEventWaitExternal)
		return ret(cudaErrorInvalidValue);
	return submit_event_item(TPSIM_WAIT_EVENT, event, stream, true);
}

/* Never recorded counts as complete, as in CUDA. */
cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event)
{
	struct sim_event *ev;
	cudaError_t err;

	pthread_mutex_lock(&sim_lock);
	ev = sim_event_get(event);
	if (!ev)
		err = cudaErrorInvalidResourceHandle;
	else
		err = ev->done_gen >= ev->record_gen ? cudaSuccess : cudaErrorNotReady;
	pthread_mutex_unlock(&sim_lock);
	return ret(err);
}

cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event)
{
	struct sim_event *ev;
	uint64_t gen;

	pthread_mutex_lock(&sim_lock);
	ev = sim_event_get(event);
	if (!ev) {
		pthread_mutex_unlock(&sim_lock);
		return ret(cudaErrorInvalidResourceHandle);
	}
	gen = ev->record_gen;
	ev->refs++;
	while (ev->done_gen < gen)
		pthread_cond_wait(&sim_progress, &sim_lock);
	sim_event_put(ev);
	pthread_mutex_unlock(&sim_lock);
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
	struct sim_event *a, *b;
	cudaError_t err = cudaSuccess;

	if (!ms)
		return ret(cudaErrorInvalidValue);
	pthread_mutex_lock(&sim_lock);
	a = sim_event_get(start);
	b = sim_event_get(end);
	if (!a || !b || (a->flags & cudaEventDisableTiming) || (b->flags & cudaEventDisableTiming) ||
	    !a->record_gen || !b->record_gen)
		err = cudaErrorInvalidResourceHandle;
	else if (a->done_gen < a->record_gen || b->done_gen < b->record_gen)
		err = cudaErrorNotReady;
	else
		*ms = (float)(((double)b->time_ns - (double)a->time_ns) / 1e6);
	pthread_mutex_unlock(&sim_lock);
	return ret(err);
}

/* ---- copies and memsets ----------------------------------------------------------------- */

static cudaError_t copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
			  size_t height, enum cudaMemcpyKind kind, cudaStream_t stream, bool ptsz,
			  bool sync)
{
	struct sim_stream *s;
	struct sim_item *it;
	cudaError_t err;
	uint64_t seq;

	if ((unsigned int)kind > cudaMemcpyDefault)
		return ret(cudaErrorInvalidMemcpyDirection);
	if (height > 1 && (width > dpitch || width > spitch))
		return ret(cudaErrorInvalidPitchValue);
	err = sim_stream_resolve(stream, ptsz, &s);
	if (err)
		return ret(err);
	if (!width || !height)
		return cudaSuccess;
	if (!dst || !src)
		return ret(cudaErrorInvalidValue);
	it = sim_item_new(TPSIM_MEMCPY);
	it->dst = dst;
	it->src = src;
	it->dpitch = dpitch;
	it->spitch = spitch;
	it->width = width;
	it->height = height;
	it->rec.bytes = width * height;
	it->rec.copy_kind = kind;
	it->rec.correlation = sim_next_correlation();
	seq = sim_submit(s, it);
	if (sync)
		sim_stream_wait_seq(s, seq);
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	return copy2d(dst, count, src, count, count, 1, kind, NULL, false, true);
}

cudaError_t CUDARTAPI cudaMemcpy_ptds(void *dst, const void *src, size_t count,
				      enum cudaMemcpyKind kind)
{
	return copy2d(dst, count, src, count, count, 1, kind, NULL, true, true);
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void *dst, const void *src, size_t count,
				      enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return copy2d(dst, count, src, count, count, 1, kind, stream, false, false);
}

cudaError_t CUDARTAPI cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count,
					   enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return copy2d(dst, count, src, count, count, 1, kind, stream, true, false);
}

cudaError_t CUDARTAPI cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch,
				   size_t width, size_t height, enum cudaMemcpyKind kind)
{
	return copy2d(dst, dpitch, src, spitch, width, height, kind, NULL, false, true);
}

cudaError_t CUDARTAPI cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch,
					size_t width, size_t height, enum cudaMemcpyKind kind)
{
	return copy2d(dst, dpitch, src, spitch, width, height, kind, NULL, true, true);
}

cudaError_t CUDARTAPI cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
					size_t width, size_t height, enum cudaMemcpyKind kind,
					cudaStream_t stream)
{
	return copy2d(dst, dpitch, src, spitch, width, height, kind, stream, false, false);
}

cudaError_t CUDARTAPI cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src,
					     size_t spitch, size_t width, size_t height,
					     enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return copy2d(dst, dpitch, src, spitch, width, height, kind, stream, true, false);
}

static cudaError_t set(void *devPtr, int value, size_t count, cudaStream_t stream, bool ptsz,
		       bool sync)
{
	struct sim_stream *s;
	struct sim_item *it;
	cudaError_t err = sim_stream_resolve(stream, ptsz, &s);
	uint64_t seq;

	if (err)
		return ret(err);
	if (!count)
		return cudaSuccess;
	if (!devPtr)
		return ret(cudaErrorInvalidValue);
	it = sim_item_new(TPSIM_MEMSET);
	it->dst = devPtr;
	it->value = value;
	it->width = count;
	it->dpitch = count;
	it->rec.bytes = count;
	it->rec.correlation = sim_next_correlation();
	seq = sim_submit(s, it);
	if (sync)
		sim_stream_wait_seq(s, seq);
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemset(void *devPtr, int value, size_t count)
{
	return set(devPtr, value, count, NULL, false, true);
}

cudaError_t CUDARTAPI cudaMemset_ptds(void *devPtr, int value, size_t count)
{
	return set(devPtr, value, count, NULL, true, true);
}

cudaError_t CUDARTAPI cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	return set(devPtr, value, count, stream, false, false);
}

cudaError_t CUDARTAPI cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count,
					   cudaStream_t stream)
{
	return set(devPtr, value, count, stream, true, false);
}

/* ---- kernels ---------------------------------------------------------------------------- */

static cudaError_t launch(struct sim_kernel *k, dim3 grid, dim3 block, size_t shmem,
			  cudaStream_t stream, bool ptsz)
{
	struct sim_stream *s;
	struct sim_item *it;
	cudaError_t err;

	if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z ||
	    (unsigned long long)block.x * block.y * block.z > 1024 || block.z > 64 ||
	    grid.y > 65535 || grid.z > 65535)
		return ret(cudaErrorInvalidConfiguration);
	err = sim_stream_resolve(stream, ptsz, &s);
	if (err)
		return ret(err);
	it = sim_item_new(TPSIM_KERNEL);
	it->rec.name = k->name;
	it->rec.func = k->func;
	it->rec.grid[0] = grid.x;
	it->rec.grid[1] = grid.y;
	it->rec.grid[2] = grid.z;
	it->rec.block[0] = block.x;
	it->rec.block[1] = block.y;
	it->rec.block[2] = block.z;
	it->rec.shmem = shmem;
	it->dur_ns = sim_kernel_ns(k);
	it->rec.correlation = sim_next_correlation();
	sim_submit(s, it);
	return cudaSuccess;
}

static cudaError_t launch_func(const void *func, dim3 grid, dim3 block, size_t shmem,
			       cudaStream_t stream, bool ptsz)
{
	if (!func)
		return ret(cudaErrorInvalidDeviceFunction);
	return launch(sim_kernel_get(func), grid, block, shmem, stream, ptsz);
}

cudaError_t CUDARTAPI cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
				       size_t sharedMem, cudaStream_t stream)
{
	return launch_func(func, gridDim, blockDim, sharedMem, stream, false);
}

cudaError_t CUDARTAPI cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
					    void **args, size_t sharedMem, cudaStream_t stream)
{
	return launch_func(func, gridDim, blockDim, sharedMem, stream, true);
}

cudaError_t CUDARTAPI cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim,
						  void **args, size_t sharedMem,
						  cudaStream_t stream)
{
	return launch_func(func, gridDim, blockDim, sharedMem, stream, false);
}

cudaError_t CUDARTAPI cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 gridDim,
						       dim3 blockDim, void **args,
						       size_t sharedMem, cudaStream_t stream)
{
	return launch_func(func, gridDim, blockDim, sharedMem, stream, true);
}

cudaError_t CUDARTAPI cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
					  void **args)
{
	if (!config)
		return ret(cudaErrorInvalidValue);
	return launch_func(func, config->gridDim, config->blockDim, config->dynamicSmemBytes,
			   config->stream, false);
}

cudaError_t CUDARTAPI cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func,
					       void **args)
{
	if (!config)
		return ret(cudaErrorInvalidValue);
	return launch_func(func, config->gridDim, config->blockDim, config->dynamicSmemBytes,
			   config->stream, true);
}

/* The handle is our per-stub struct, never the stub address, as with the real cudaKernel_t. */
cudaError_t CUDARTAPI __cudaGetKernel(cudaKernel_t *kernel, const void *func)
{
	if (!kernel || !func)
		return ret(cudaErrorInvalidValue);
	*kernel = (cudaKernel_t)sim_kernel_get(func);
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr)
{
	return __cudaGetKernel(kernelPtr, entryFuncAddr);
}

static cudaError_t launch_handle(cudaKernel_t kernel, dim3 grid, dim3 block, size_t shmem,
				 cudaStream_t stream, bool ptsz)
{
	struct sim_kernel *k = kernel ? sim_kernel_from_handle(kernel) : NULL;

	if (!k)
		return ret(cudaErrorInvalidResourceHandle);
	return launch(k, grid, block, shmem, stream, ptsz);
}

cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
					 void **args, size_t sharedMem, cudaStream_t stream)
{
	return launch_handle(kernel, gridDim, blockDim, sharedMem, stream, false);
}

cudaError_t CUDARTAPI __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
					      void **args, size_t sharedMem, cudaStream_t stream)
{
	return launch_handle(kernel, gridDim, blockDim, sharedMem, stream, true);
}

/* <<<grid, block, shmem, stream>>> pushes its configuration, the host stub pops it. */
#define CALL_CONFIG_DEPTH 16
static __thread struct {
	dim3 grid, block;
	size_t shmem;
	cudaStream_t stream;
} call_config[CALL_CONFIG_DEPTH];
static __thread int call_config_top;

unsigned CUDARTAPI __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
					       struct CUstream_st *stream)
{
	if (call_config_top >= CALL_CONFIG_DEPTH)
		return 1;
	call_config[call_config_top].grid = gridDim;
	call_config[call_config_top].block = blockDim;
	call_config[call_config_top].shmem = sharedMem;
	call_config[call_config_top].stream = stream;
	call_config_top++;
	return 0;
}

cudaError_t CUDARTAPI __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
						 void *stream)
{
	if (call_config_top == 0)
		return ret(cudaErrorMissingConfiguration);
	call_config_top--;
	*gridDim = call_config[call_config_top].grid;
	*blockDim = call_config[call_config_top].block;
	*sharedMem = call_config[call_config_top].shmem;
	*(cudaStream_t *)stream = call_config[call_config_top].stream;
	return cudaSuccess;
}

/* ---- module registration (nvcc's static constructors) ----------------------------------- */

void **CUDARTAPI __cudaRegisterFatBinary(void *fatCubin)
{
	void **handle = malloc(sizeof(*handle));

	if (handle)
		*handle = fatCubin;
	return handle;
}

void CUDARTAPI __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
}

void CUDARTAPI __cudaUnregisterFatBinary(void **fatCubinHandle)
{
	free(fatCubinHandle);
}

char CUDARTAPI __cudaInitModule(void **fatCubinHandle)
{
	return 1;
}

void CUDARTAPI __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
				      const char *deviceName, int thread_limit, uint3 *tid,
				      uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize)
{
	sim_kernel_register(hostFun, deviceName);
}

void CUDARTAPI __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
				 const char *deviceName, int ext, size_t size, int constant,
				 int global)
{
	/* Device memory is host memory: the host shadow is the variable. */
}

void CUDARTAPI __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress,
					char *deviceAddress, const char *deviceName, int ext,
					size_t size, int constant, int global)
{
	void *p = NULL;

	/* Host code reaches a __managed__ variable through this pointer. */
	if (hostVarPtrAddress && alloc_new(&p, size ? size : 1, ALLOC_MANAGED) == cudaSuccess)
		*hostVarPtrAddress = p;
}

/* ---- graphs: opaque handles; a launch is one unit of TPSIM_KERNEL_US ---------------------- */

#define GRAPH_MAGIC 0x7470736d67726170ULL
#define GRAPH_EXEC_MAGIC 0x7470736d67657865ULL

struct sim_graph {
	uint64_t magic;
};

cudaError_t CUDARTAPI cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags)
{
	struct sim_graph *g;

	if (!pGraph || flags)
		return ret(cudaErrorInvalidValue);
	g = calloc(1, sizeof(*g));
	if (!g)
		return ret(cudaErrorMemoryAllocation);
	g->magic = GRAPH_MAGIC;
	*pGraph = (cudaGraph_t)g;
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t graph)
{
	struct sim_graph *g = (struct sim_graph *)graph;

	if (!g || g->magic != GRAPH_MAGIC)
		return ret(cudaErrorInvalidValue);
	g->magic = 0;
	free(g);
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
					   unsigned long long flags)
{
	struct sim_graph *g = (struct sim_graph *)graph, *exec;

	if (!pGraphExec || !g || g->magic != GRAPH_MAGIC)
		return ret(cudaErrorInvalidValue);
	exec = calloc(1, sizeof(*exec));
	if (!exec)
		return ret(cudaErrorMemoryAllocation);
	exec->magic = GRAPH_EXEC_MAGIC;
	*pGraphExec = (cudaGraphExec_t)exec;
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
	struct sim_graph *exec = (struct sim_graph *)graphExec;

	if (!exec || exec->magic != GRAPH_EXEC_MAGIC)
		return ret(cudaErrorInvalidValue);
	exec->magic = 0;
	free(exec);
	return cudaSuccess;
}

static cudaError_t graph_launch(cudaGraphExec_t graphExec, cudaStream_t stream, bool ptsz)
{
	struct sim_graph *exec = (struct sim_graph *)graphExec;
	struct sim_stream *s;
	struct sim_item *it;
	cudaError_t err;

	if (!exec || exec->magic != GRAPH_EXEC_MAGIC)
		return ret(cudaErrorInvalidValue);
	err = sim_stream_resolve(stream, ptsz, &s);
	if (err)
		return ret(err);
	it = sim_item_new(TPSIM_GRAPH);
	it->rec.name = "cudaGraphLaunch";
	it->dur_ns = sim_cfg.kernel_ns;
	it->rec.correlation = sim_next_correlation();
	sim_submit(s, it);
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	return graph_launch(graphExec, stream, false);
}

cudaError_t CUDARTAPI cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	return graph_launch(graphExec, stream, true);
}
