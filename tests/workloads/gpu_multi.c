// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * gpu_multi: GPU work on several devices and contexts of the simulated stack, or launches that
 * run freely from before a tracer attaches (tests/e2e/test_gpu_multi.py).
 *
 * Usage: gpu_multi [--steps N (3)] [--contexts] [--kernel-us US (50)]
 *        gpu_multi --free-run [--kernel-us US (50)]
 *
 * Default and --contexts: before READY, on device 0 (cudaSetDevice(0)): stream s0, buffers.
 * With --contexts (TPSIM_DEVICES >= 2), also: device 1's primary context (cudaSetDevice(1))
 * with streams p1, p1w, event ep, buffers; and a context of its own on device 1
 * (cuCtxCreate) with streams c1, c1w, event ec, buffers. After GO, EXACTLY per step:
 *   cudaSetDevice(0); cudaLaunchKernel(dev0_k, s0)                              x2
 *   --contexts:
 *   cudaSetDevice(1); cudaLaunchKernel(dev1_k, p1); cudaMemcpyAsync(HtoD 65536, p1);
 *     cudaEventRecord(ep, p1); cudaStreamWaitEvent(p1w, ep); cudaStreamSynchronize(p1)
 *   cuCtxSetCurrent(own); cudaLaunchKernel(ctx_k, c1); cudaMemcpyAsync(DtoH 4096, c1);
 *     cudaEventRecord(ec, c1); cudaStreamWaitEvent(c1w, ec); cudaStreamSynchronize(c1)
 *   cudaSetDevice(0)
 * then cudaDeviceSynchronize() once. So launches = 2N (4N with --contexts).
 * The info line "# contexts ..." gives the context ids (cuCtxGetId) and the stream ids.
 *
 * --free-run: READY, then without waiting for GO: cudaLaunchKernel(free_k, s0) +
 * cudaStreamSynchronize(s0) in a loop until a line "STOP" (or EOF) on stdin; after STOP, five
 * more iterations; then "# launches N" (the exact number made) and DONE.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include "tpsim.h"
#include "handshake.h"

#define H2D_BYTES 65536
#define D2H_BYTES 4096

__attribute__((noinline)) void dev0_k(float *a, int n)
{
	for (int i = 0; i < n; i++)
		a[i] += 1.0f;
}

__attribute__((noinline)) void dev1_k(float *a, int n)
{
	for (int i = 0; i < n; i++)
		a[i] *= 3.0f;
}

__attribute__((noinline)) void ctx_k(float *a, int n)
{
	for (int i = 0; i < n; i++)
		a[i] -= 1.0f;
}

__attribute__((noinline)) void free_k(float *a, int n)
{
	for (int i = 0; i < n; i++)
		a[i] *= 0.5f;
}

static void check(cudaError_t err, const char *what)
{
	if (err == cudaSuccess)
		return;
	fprintf(stderr, "gpu_multi: %s failed: %s (%d)\n", what, cudaGetErrorName(err), (int)err);
	exit(1);
}

static void check_drv(CUresult r, const char *what)
{
	if (r == CUDA_SUCCESS)
		return;
	fprintf(stderr, "gpu_multi: %s failed: %d\n", what, (int)r);
	exit(1);
}

/* The driver entry points this program calls itself (the runtime has loaded libcuda.so.1). */
static struct {
	CUresult (*ctx_create)(CUcontext *, unsigned int, CUdevice);
	CUresult (*ctx_set_current)(CUcontext);
	CUresult (*ctx_get_id)(CUcontext, unsigned long long *);
} drv;

static void load_driver(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);

	if (!lib) {
		fprintf(stderr, "gpu_multi: libcuda.so.1 not loaded by the runtime: %s\n", dlerror());
		exit(1);
	}
	drv.ctx_create = (__typeof__(drv.ctx_create))dlsym(lib, "cuCtxCreate_v2");
	drv.ctx_set_current = (__typeof__(drv.ctx_set_current))dlsym(lib, "cuCtxSetCurrent");
	drv.ctx_get_id = (__typeof__(drv.ctx_get_id))dlsym(lib, "cuCtxGetId");
	if (!drv.ctx_create || !drv.ctx_set_current || !drv.ctx_get_id) {
		fprintf(stderr, "gpu_multi: the driver lacks cuCtxCreate/cuCtxSetCurrent/cuCtxGetId\n");
		exit(1);
	}
}

static volatile int stop_requested;

static void *stdin_reader(void *arg)
{
	char line[64];

	while (fgets(line, sizeof(line), stdin))
		if (!strncmp(line, "STOP", 4))
			break;
	__atomic_store_n(&stop_requested, 1, __ATOMIC_RELEASE);
	return NULL;
}

struct side {			/* one context's streams, event and buffers */
	cudaStream_t s, w;
	cudaEvent_t ev;
	void *dev, *host;
};

static void side_setup(struct side *x)
{
	check(cudaStreamCreate(&x->s), "cudaStreamCreate");
	check(cudaStreamCreate(&x->w), "cudaStreamCreate");
	check(cudaEventCreate(&x->ev), "cudaEventCreate");
	check(cudaMalloc(&x->dev, H2D_BYTES), "cudaMalloc");
	check(cudaMallocHost(&x->host, H2D_BYTES), "cudaMallocHost");
}

static void side_step(struct side *x, const void *k, enum cudaMemcpyKind kind, size_t bytes,
		      void **args)
{
	dim3 grid = { 32, 1, 1 }, block = { 128, 1, 1 };

	check(cudaLaunchKernel(k, grid, block, args, 0, x->s), "cudaLaunchKernel");
	if (kind == cudaMemcpyHostToDevice)
		check(cudaMemcpyAsync(x->dev, x->host, bytes, kind, x->s), "cudaMemcpyAsync");
	else
		check(cudaMemcpyAsync(x->host, x->dev, bytes, kind, x->s), "cudaMemcpyAsync");
	check(cudaEventRecord(x->ev, x->s), "cudaEventRecord");
	check(cudaStreamWaitEvent(x->w, x->ev, 0), "cudaStreamWaitEvent");
	check(cudaStreamSynchronize(x->s), "cudaStreamSynchronize");
}

static void usage(void)
{
	fprintf(stderr, "usage: gpu_multi [--steps N] [--contexts] [--kernel-us US] | "
		"--free-run [--kernel-us US]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int steps = 3, contexts = 0, free_run = 0, n = 256;
	unsigned kernel_us = 50;
	long launches = 0;
	cudaStream_t s0;
	struct side p1 = { 0 }, c1 = { 0 };
	CUcontext own = NULL;
	unsigned long long id_prim1 = 0, id_own = 0;
	dim3 grid = { 64, 1, 1 }, block = { 256, 1, 1 };
	float *d0;
	void *args[2];

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--steps") && i + 1 < argc)
			steps = (int)hs_parse_long(argv[i], argv[i + 1]), i++;
		else if (!strcmp(argv[i], "--kernel-us") && i + 1 < argc)
			kernel_us = (unsigned)hs_parse_long(argv[i], argv[i + 1]), i++;
		else if (!strcmp(argv[i], "--contexts"))
			contexts = 1;
		else if (!strcmp(argv[i], "--free-run"))
			free_run = 1;
		else
			usage();
	}
	if (steps < 1 || (free_run && contexts))
		usage();
	tpsim_set_kernel_us((const void *)dev0_k, kernel_us);
	tpsim_set_kernel_us((const void *)dev1_k, kernel_us);
	tpsim_set_kernel_us((const void *)ctx_k, kernel_us);
	tpsim_set_kernel_us((const void *)free_k, kernel_us);

	check(cudaSetDevice(0), "cudaSetDevice(0)");
	check(cudaStreamCreate(&s0), "cudaStreamCreate");
	check(cudaMalloc((void **)&d0, n * sizeof(float)), "cudaMalloc");
	args[0] = &d0;
	args[1] = &n;
	if (contexts) {
		load_driver();
		check(cudaSetDevice(1), "cudaSetDevice(1)");
		side_setup(&p1);
		check_drv(drv.ctx_get_id(NULL, &id_prim1), "cuCtxGetId");
		check_drv(drv.ctx_create(&own, 0, 1), "cuCtxCreate");	/* now current */
		side_setup(&c1);
		check_drv(drv.ctx_get_id(own, &id_own), "cuCtxGetId");
		check(cudaSetDevice(0), "cudaSetDevice(0)");
		hs_info("contexts device1_primary=%llu device1_own=%llu streams s0=%lld p1=%lld "
			"p1w=%lld c1=%lld c1w=%lld", id_prim1, id_own,
			(long long)tpsim_stream_id(s0), (long long)tpsim_stream_id(p1.s),
			(long long)tpsim_stream_id(p1.w), (long long)tpsim_stream_id(c1.s),
			(long long)tpsim_stream_id(c1.w));
	}

	if (free_run) {
		pthread_t reader;
		int after_stop = 0;

		printf("READY %d\n", (int)getpid());
		fflush(stdout);
		if (pthread_create(&reader, NULL, stdin_reader, NULL)) {
			fprintf(stderr, "gpu_multi: pthread_create failed\n");
			return 1;
		}
		/* launches from before any tracer attaches until STOP, then five more */
		while (after_stop < 5) {
			if (__atomic_load_n(&stop_requested, __ATOMIC_ACQUIRE))
				after_stop++;
			check(cudaLaunchKernel((const void *)free_k, grid, block, args, 0, s0),
			      "cudaLaunchKernel(free_k)");
			launches++;
			check(cudaStreamSynchronize(s0), "cudaStreamSynchronize");
		}
		pthread_join(reader, NULL);
		hs_info("launches %ld", launches);
		hs_done(0);
		return 0;
	}

	hs_ready_wait_go();
	for (int step = 0; step < steps; step++) {
		check(cudaSetDevice(0), "cudaSetDevice(0)");
		for (int i = 0; i < 2; i++, launches++)
			check(cudaLaunchKernel((const void *)dev0_k, grid, block, args, 0, s0),
			      "cudaLaunchKernel(dev0_k)");
		if (!contexts)
			continue;
		check(cudaSetDevice(1), "cudaSetDevice(1)");
		side_step(&p1, (const void *)dev1_k, cudaMemcpyHostToDevice, H2D_BYTES, args);
		launches++;
		check_drv(drv.ctx_set_current(own), "cuCtxSetCurrent");
		side_step(&c1, (const void *)ctx_k, cudaMemcpyDeviceToHost, D2H_BYTES, args);
		launches++;
		check(cudaSetDevice(0), "cudaSetDevice(0)");
	}
	check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	hs_info("launches %ld", launches);
	hs_done(0);
	return 0;
}
