/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The simulated driver's private interface, for the simulated runtime and CUPTI only: like the
 * real driver's private tables, it is handed out by cuGetExportTable for one UUID, so
 * libcuda.so.1 exports nothing but cu* names. Consumers dlopen("libcuda.so.1"), get
 * cuGetProcAddress_v2 with dlsym, then cuGetExportTable through it.
 */
#ifndef TPSIM_DRIVER_H
#define TPSIM_DRIVER_H

#include <stddef.h>
#include <stdint.h>
#include <cuda.h>
#include "tpsim.h"

/* "tpsim-driver-ops" */
#define TPSIM_DRIVER_UUID { 't', 'p', 's', 'i', 'm', '-', 'd', 'r', 'i', 'v', 'e', 'r', '-', 'o', \
			    'p', 's' }

struct tpsim_driver_ops {
	size_t size;			/* sizeof(struct tpsim_driver_ops) */
	void (*set_observer)(tpsim_observer_fn fn, void *ctx);
	void (*set_api_observer)(tpsim_api_observer_fn fn, void *ctx);
	/* Bracket a runtime call (the driver brackets its own). */
	void (*api_enter)(int domain, uint32_t cbid);
	void (*api_exit)(void);
	int (*enqueue)(CUstream s, void (*fn)(void *arg), void *arg);
	int (*enqueue_kernel)(CUstream s, const char *name, dim3 grid, dim3 block,
			      void (*fn)(void *arg), void *arg);
	int (*set_kernel_us)(CUfunction f, unsigned us);
	int64_t (*stream_id)(CUstream s);
	uint64_t (*now_ns)(void);
	int (*device_count)(void);
	/* cudaMalloc's TPSIM_MEM_LIMIT_BYTES and cudaFree's kinds: device bytes handed out */
	size_t (*device_bytes_live)(void);
	/* tpsim_set_function_body (a module's function that does host work: NCCL's kernels) */
	int (*set_function_body)(CUfunction f, void (*fn)(void *arg));
	/* the device of the calling thread's current context, -1 when none is current */
	int (*current_device)(void);
	/* the issue observer (tpsim.h tpsim_issue_fn) */
	void (*set_issue_observer)(tpsim_issue_fn fn, void *ctx);
};

#endif /* TPSIM_DRIVER_H */
