// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * launch_storm: launches as dense as a PyTorch eager step's, on several threads, on the
 * simulated runtime. Each thread launches back to back, with cudaGetLastError after every
 * launch (PyTorch's C10_CUDA_KERNEL_LAUNCH_CHECK), so under CUPTI each launch is a RUNTIME
 * record holding a nested cuLaunchKernel DRIVER record, followed by an unprobed
 * cudaGetLastError RUNTIME record, a few microseconds apart: the stream a join by time alone
 * gets wrong.
 *
 * Usage: launch_storm [--threads T (3)] [--launches N (100)] [--kernel-us US (20)] [--hold]
 * Before READY: each thread creates its stream (cudaStreamCreate) and loads its two kernels
 * (cudaGetKernel), and prints "# thread=<i> tid=<gettid> stream=<handle>".
 * After GO, thread i: N x { cudaLaunchKernel(storm_a or storm_b alternately, grid (i+1,1,1),
 * block (32*(j%4+1),1,1), args, 0, its stream); cudaGetLastError() }, then
 * cudaStreamSynchronize(its stream). Kernels last US µs (tpsim_set_kernel_us).
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cuda_runtime_api.h>
#include "tpsim.h"
#include "handshake.h"

#define MAX_THREADS 32

void storm_a(int *x) { (void)x; }
void storm_b(int *x) { (void)x; }

static int nr_launches = 100;
static pthread_barrier_t ready, go;

struct worker {
	int idx;
	cudaStream_t stream;
};

static void check(cudaError_t err, const char *what)
{
	if (err != cudaSuccess) {
		fprintf(stderr, "launch_storm: %s: %s\n", what, cudaGetErrorString(err));
		exit(1);
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	cudaKernel_t k;
	int x = 0;
	void *args[] = { &x };

	check(cudaStreamCreate(&w->stream), "cudaStreamCreate");
	check(cudaGetKernel(&k, (const void *)storm_a), "cudaGetKernel");
	check(cudaGetKernel(&k, (const void *)storm_b), "cudaGetKernel");
	hs_info("thread=%d tid=%ld stream=0x%llx", w->idx, (long)syscall(SYS_gettid),
		(unsigned long long)(uintptr_t)w->stream);
	pthread_barrier_wait(&ready);
	pthread_barrier_wait(&go);
	for (int j = 0; j < nr_launches; j++) {
		dim3 grid = { (unsigned)w->idx + 1, 1, 1 }, block = { 32u * (j % 4 + 1), 1, 1 };

		check(cudaLaunchKernel(j % 2 ? (const void *)storm_b : (const void *)storm_a, grid,
				       block, args, 0, w->stream), "cudaLaunchKernel");
		check(cudaGetLastError(), "launch check");
	}
	check(cudaStreamSynchronize(w->stream), "cudaStreamSynchronize");
	return NULL;
}

int main(int argc, char **argv)
{
	struct worker w[MAX_THREADS];
	pthread_t th[MAX_THREADS];
	int threads = 3, kernel_us = 20, hold = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = (int)hs_parse_long(argv[i], argv[i + 1]), i++;
		else if (!strcmp(argv[i], "--launches") && i + 1 < argc)
			nr_launches = (int)hs_parse_long(argv[i], argv[i + 1]), i++;
		else if (!strcmp(argv[i], "--kernel-us") && i + 1 < argc)
			kernel_us = (int)hs_parse_long(argv[i], argv[i + 1]), i++;
		else if (!strcmp(argv[i], "--hold"))
			hold = 1;
		else {
			fprintf(stderr, "usage: launch_storm [--threads T] [--launches N] "
				"[--kernel-us US] [--hold]\n");
			return 2;
		}
	}
	if (threads < 1 || threads > MAX_THREADS)
		return 2;
	tpsim_set_kernel_us((const void *)storm_a, kernel_us);
	tpsim_set_kernel_us((const void *)storm_b, kernel_us);
	pthread_barrier_init(&ready, NULL, threads + 1);
	pthread_barrier_init(&go, NULL, threads + 1);
	for (int i = 0; i < threads; i++) {
		w[i].idx = i;
		if (pthread_create(&th[i], NULL, worker_main, &w[i]))
			return 1;
	}
	pthread_barrier_wait(&ready);
	hs_ready_wait_go();
	pthread_barrier_wait(&go);
	for (int i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	hs_done(hold);
	return 0;
}
