// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * dlopen_app: links no CUDA library; loads libcudart only after GO, so a tracer attached at
 * READY must notice the new mapping and attach to it while the process runs.
 *
 * Usage: dlopen_app --lib PATH [--iters N (3)] [--settle-ms MS (300)] [--wait-line] [--hold]
 *                   [--malloc BYTES]
 *
 * After GO:
 *   dlopen(PATH, RTLD_NOW | RTLD_LOCAL); dlsym cudaLaunchKernel, cudaStreamSynchronize,
 *   cudaDeviceSynchronize; print "# loaded"; sleep MS milliseconds (time for the tracer to
 *   attach to the new library), or with --wait-line until it reads a line on stdin (the test
 *   says when the tracer has attached); then EXACTLY, per iteration:
 *     1. cudaLaunchKernel(dl_kernel, grid (7,1,1), block (32,1,1), args, 0, 0)
 *     2. cudaStreamSynchronize(0)
 *   and once after the loop:
 *     3. cudaDeviceSynchronize()
 *   With --malloc, then: cudaMalloc(&p, BYTES), "# malloc 0x<p> BYTES", cudaFree(p) (a memory
 *   tracer waiting for the runtime sees both).
 * CUDA errors are ignored (35 with the real runtime and no driver). Before DONE:
 * "# errors=E first=F". A failed dlopen/dlsym is a setup error: message on stderr, exit 1.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime_api.h>	/* types only: nothing is linked */
#include "handshake.h"

typedef cudaError_t (*launch_kernel_fn)(const void *, dim3, dim3, void **, size_t, cudaStream_t);
typedef cudaError_t (*stream_sync_fn)(cudaStream_t);
typedef cudaError_t (*device_sync_fn)(void);
typedef cudaError_t (*malloc_fn)(void **, size_t);
typedef cudaError_t (*free_fn)(void *);

/* The "kernel": only its address matters. */
__attribute__((noinline)) void dl_kernel(int *v)
{
	if (v)
		*v = 1;
}

static int errors, first_error;

static void note(cudaError_t err)
{
	if (err != cudaSuccess && !errors++)
		first_error = (int)err;
}

static void *must_dlsym(void *lib, const char *name)
{
	void *p = dlsym(lib, name);

	if (!p) {
		fprintf(stderr, "dlopen_app: dlsym %s: %s\n", name, dlerror());
		exit(1);
	}
	return p;
}

int main(int argc, char **argv)
{
	const char *path = NULL;
	long iters = 3, settle_ms = 300, malloc_bytes = 0;
	int hold = 0, wait_line = 0, value = 0, *ptr = &value;
	void *args[] = { &ptr };
	dim3 grid = { 7, 1, 1 }, block = { 32, 1, 1 };
	launch_kernel_fn launch_kernel;
	stream_sync_fn stream_sync;
	device_sync_fn device_sync;
	struct timespec settle;
	void *lib;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--lib"))
			path = argv[++i];
		else if (!strcmp(argv[i], "--iters"))
			iters = hs_parse_long(argv[i], argv[i + 1]), i++;
		else if (!strcmp(argv[i], "--settle-ms"))
			settle_ms = hs_parse_long(argv[i], argv[i + 1]), i++;
		else if (!strcmp(argv[i], "--hold"))
			hold = 1;
		else if (!strcmp(argv[i], "--wait-line"))
			wait_line = 1;
		else if (!strcmp(argv[i], "--malloc"))
			malloc_bytes = hs_parse_long(argv[i], argv[i + 1]), i++;
		else
			path = NULL, i = argc;
	}
	if (!path) {
		fprintf(stderr, "usage: dlopen_app --lib PATH [--iters N] [--settle-ms MS] [--wait-line] "
			"[--hold] [--malloc BYTES]\n");
		return 2;
	}

	hs_ready_wait_go();
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "dlopen_app: dlopen %s: %s\n", path, dlerror());
		return 1;
	}
	launch_kernel = (launch_kernel_fn)must_dlsym(lib, "cudaLaunchKernel");
	stream_sync = (stream_sync_fn)must_dlsym(lib, "cudaStreamSynchronize");
	device_sync = (device_sync_fn)must_dlsym(lib, "cudaDeviceSynchronize");
	hs_info("loaded");

	if (wait_line) {
		char line[64];

		if (!fgets(line, sizeof(line), stdin)) {
			fprintf(stderr, "dlopen_app: stdin closed before the go-on line\n");
			return 2;
		}
	} else {
		settle.tv_sec = settle_ms / 1000;
		settle.tv_nsec = (settle_ms % 1000) * 1000000L;
		while (nanosleep(&settle, &settle))
			;
	}

	for (long it = 0; it < iters; it++) {
		note(launch_kernel((const void *)dl_kernel, grid, block, args, 0, 0));
		note(stream_sync(0));
	}
	note(device_sync());
	if (malloc_bytes > 0) {
		malloc_fn cuda_malloc = (malloc_fn)must_dlsym(lib, "cudaMalloc");
		free_fn cuda_free = (free_fn)must_dlsym(lib, "cudaFree");
		void *p = NULL;

		note(cuda_malloc(&p, (size_t)malloc_bytes));
		hs_info("malloc %p %ld", p, malloc_bytes);
		note(cuda_free(p));
	}
	hs_info("errors=%d first=%d", errors, first_error);
	hs_done(hold);
	return 0;
}
