/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Sim-only API of the simulated CUDA stack (tests/sim/cudart, tests/sim/cuda_driver).
 *
 * The engine (streams, workers, events, kernels, graphs) lives in the simulated driver
 * libcuda.so.1, as on a real system; the simulated runtime libcudart.so.13 dlopens it at first
 * use and exports the real CUDA 13 runtime ABI plus these tpsim_* functions (version node
 * `libcudart.so.13`), which forward to the driver's private table (tpsim_driver.h, obtained with
 * cuGetExportTable like the real runtime's private interfaces). Other simulated libraries (NCCL,
 * the caching allocator) link against the runtime and use this header to put work on the same
 * stream workers that run kernels and copies, so stream order, syncs and events behave as on a
 * GPU.
 *
 * Streams: every stream (legacy default stream, per-thread default stream, created streams) has
 * a FIFO and one worker thread that runs its items in order. The legacy default stream keeps
 * CUDA's implicit synchronisation with blocking streams of the same device.
 *
 * Environment (read once, at load):
 *   TPSIM_KERNEL_US=100         duration of every kernel and cudaGraphLaunch, in µs
 *   TPSIM_KERNEL_TIMES=a=500,b=2 per-kernel µs, first pattern that is a substring of the
 *                               kernel's name (registered device name, else its ELF symbol)
 *   TPSIM_COPY_GBPS=10          copy bandwidth: a copy lasts bytes / (GBPS * 1e9) s
 *                               (a copy to or from pageable host memory a quarter of that)
 *   TPSIM_DEVICES=1             cudaGetDeviceCount; each device has its primary context
 *                               (contextId device + 1), cuCtxCreate makes more
 *   TPSIM_VERBOSE=1             one stderr line per executed item (kind, name, grid, block,
 *                               stream, correlation, start/end ns, ctx=context id last)
 *   TPSIM_SPIN_US=200           most a worker yield-spins to hit a deadline (0: sleep only)
 * Kernel duration precedence: tpsim_set_kernel_us, TPSIM_KERNEL_TIMES, TPSIM_KERNEL_US.
 */
#ifndef TPSIM_H
#define TPSIM_H

#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Kinds of work a stream worker runs; every executed item is reported as one record. */
enum tpsim_kind {
	TPSIM_KERNEL = 1,	/* cudaLaunchKernel*, __cudaLaunchKernel*, tpsim_enqueue_kernel */
	TPSIM_MEMCPY = 2,
	TPSIM_MEMSET = 3,
	TPSIM_EVENT_RECORD = 4,
	TPSIM_WAIT_EVENT = 5,	/* cudaStreamWaitEvent */
	TPSIM_GRAPH = 6,	/* launch of an EMPTY graph (cudaGraphCreate): one TPSIM_KERNEL_US */
	TPSIM_HOST_FN = 7,	/* tpsim_enqueue, cudaLaunchHostFunc */
	TPSIM_FREE = 8,		/* cudaFreeAsync */
};

/* What the worker did, in CLOCK_MONOTONIC ns (the domain of bpf_ktime_get_ns()). */
struct tpsim_record {
	enum tpsim_kind kind;
	const char *name;		/* kernel: registered device name (mangled) or host symbol */
	const void *func;		/* kernel: host stub / function pointer */
	uint64_t correlation;		/* the OUTERMOST API call that enqueued it (its CUPTI
					 * correlationId), else a fresh id (tpsim_enqueue*) */
	uint32_t graph_id;		/* replayed from a graph (cuGraphLaunch): the graph's id */
	uint64_t stream_id;		/* 0 legacy default, 1.. per-thread defaults and created */
	cudaStream_t stream;		/* the handle as the API saw it after resolving 0/0x1/0x2 */
	int device;
	uint32_t context;		/* the CUDA context of its stream (CUPTI's contextId): ids
					 * from 1 in creation order, the primary contexts first */
	uint32_t grid[3], block[3];
	size_t shmem;
	size_t bytes;			/* memcpy/memset */
	int copy_kind;			/* enum cudaMemcpyKind */
	int host_pageable;		/* memcpy: its host side is pageable (not from
					 * cuMemAllocHost/cuMemHostAlloc): 1/4 of the bandwidth, and
					 * an async copy blocks its caller, as the real one does */
	uint64_t start_ns, end_ns;
	uint32_t host_tid;		/* gettid() of the thread that enqueued it */
	uint64_t api_start_ns;		/* inside the API call: when the item was made */
	uint64_t api_end_ns;		/* ... and when it was queued (the call returns next) */
	/* the issue observer's (a CUPTI sim's) own state for this item, from issue to end: where
	 * its record was reserved, as real CUPTI reserves a kernel's record at the launch */
	void *tool_buf;
	size_t tool_off;
};

/*
 * API calls. Every simulated runtime and driver entry point is bracketed by an API observer
 * call on the calling thread: phase 0 right after entry, phase 1 right before return (the sim
 * CUPTI writes one CUpti_ActivityAPI record per call from them). Each call has its own
 * correlation id from one process-wide counter; depth 0 is the outermost call of the thread.
 */
enum tpsim_domain { TPSIM_DOMAIN_RUNTIME = 1, TPSIM_DOMAIN_DRIVER = 2 };

struct tpsim_api_call {
	int domain;			/* enum tpsim_domain */
	uint32_t cbid;			/* CUPTI_RUNTIME_TRACE_CBID_* / CUPTI_DRIVER_TRACE_CBID_* */
	uint64_t correlation;
	uint32_t tid;			/* gettid() */
	int depth;
};

typedef void (*tpsim_api_observer_fn)(const struct tpsim_api_call *call, int phase, void *ctx);

/* Called on the worker thread after each item completes; one observer (a CUPTI sim). */
typedef void (*tpsim_observer_fn)(const struct tpsim_record *rec, void *ctx);
/* Called on the submitting thread, inside the API call, before the item is queued (its times
 * are 0): a tool that reserves the record at the launch (the sim CUPTI) keeps its state in
 * rec->tool_buf/tool_off, which the same item's completion observer sees. */
typedef void (*tpsim_issue_fn)(struct tpsim_record *rec, void *ctx);
void tpsim_set_observer(tpsim_observer_fn fn, void *ctx);
void tpsim_set_api_observer(tpsim_api_observer_fn fn, void *ctx);

/*
 * Run fn(arg) on the worker of stream s, in order with the stream's other work. fn may block
 * (a collective rendezvous); the stream makes no progress meanwhile, exactly like a GPU stream
 * stuck in a kernel. Never blocks the caller. Returns a cudaError_t (0 on success).
 */
int tpsim_enqueue(cudaStream_t s, void (*fn)(void *arg), void *arg);

/* Like tpsim_enqueue, but reported as a kernel `name` (kept by the caller; a literal) with this
 * launch geometry. */
int tpsim_enqueue_kernel(cudaStream_t s, const char *name, dim3 grid, dim3 block,
			 void (*fn)(void *arg), void *arg);

/*
 * A function of a module (a CUfunction from cuModuleGetFunction) that does host work when it
 * runs: every launch of it runs fn on the stream's worker, given the launch's first kernel
 * parameter (a pointer), and lasts as long as fn takes. NCCL's sim kernels (they wait for
 * their peers). Returns a CUresult.
 */
int tpsim_set_function_body(void *function, void (*fn)(void *arg));

/* Kernel duration for a plain function pointer launched with cudaLaunchKernel (C workloads). */
void tpsim_set_kernel_us(const void *func, unsigned us);

/* Stable small id of a stream handle (0 = legacy default); -1 for an invalid handle. */
int64_t tpsim_stream_id(cudaStream_t s);

/* CLOCK_MONOTONIC in ns. */
uint64_t tpsim_now_ns(void);

#ifdef __cplusplus
}
#endif

#endif /* TPSIM_H */
