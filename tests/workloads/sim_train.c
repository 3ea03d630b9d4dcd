// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * sim_train: a training-loop-shaped workload on the simulated runtime (tests/sim/cudart), linked
 * with -lcudart and an rpath to the sim's lib dir. Kernels are the plain C functions fake_gemm
 * and fake_relu (real .symtab symbols), launched through cudaLaunchKernel.
 *
 * Usage: sim_train [--steps N (5)] [--threads T (1)] [--kernel-us US (200)] [--hold]
 *                  [--ignore-errors] [--linger-ms MS (0)] [--tail-kernel-ms MS]
 *
 * Worker thread i is named "train-w<i>" (pthread_setname_np) before READY; with --linger-ms
 * it stays alive MS ms after its last call (a tracer reads thread names while they exist).
 *
 * Before READY (not counted below), main creates per thread: streams A and B
 * (cudaStreamCreate x2), one event (cudaEventCreate), cudaMalloc x2 (1 MiB, 4096 B),
 * cudaMallocHost x2 (1 MiB, 4096 B); and calls tpsim_set_kernel_us(fake_gemm, US),
 * tpsim_set_kernel_us(fake_relu, US/2). The T worker threads exist before READY and start
 * their loops on GO.
 *
 * After GO, EXACTLY these calls per step per thread, in this order:
 *   1-3. cudaLaunchKernel(fake_gemm, grid (64,2,1), block (256,1,1), args, shmem 4096, A)  x3
 *   4.   cudaLaunchKernel(fake_relu, grid (128,1,1), block (128,1,1), args, shmem 0, B)
 *   5.   cudaMemcpyAsync(dev_in, host_in, 1048576, cudaMemcpyHostToDevice, A)
 *   6.   cudaEventRecord(ev, A)
 *   7.   cudaStreamWaitEvent(B, ev, 0)
 *   8.   cudaMemcpyAsync(host_out, dev_out, 4096, cudaMemcpyDeviceToHost, B)
 *   9.   cudaEventQuery(ev)          -> 600 (cudaErrorNotReady) on the sim: A is still busy
 *   10.  cudaStreamSynchronize(B)
 * and once per thread after its last step:
 *   11.  cudaDeviceSynchronize()
 * Totals for S steps, T threads: cudaLaunchKernel 4*S*T (fake_gemm 3*S*T, fake_relu S*T),
 * cudaMemcpyAsync 2*S*T, cudaEventRecord / cudaStreamWaitEvent / cudaEventQuery /
 * cudaStreamSynchronize S*T each, cudaDeviceSynchronize T.
 * --tail-kernel-ms MS: then, on main after the workers ended, before DONE:
 *   cudaLaunchKernel(fake_tail (MS ms), grid (1,1,1), block (32,1,1), args, 0, worker 0's A)
 *   cudaMemcpyAsync(host_out, dev_out, 4096, cudaMemcpyDeviceToHost, worker 0's B)
 *   cudaStreamSynchronize(worker 0's B)
 * and no sync of A: the tail kernel is still running at DONE (a tracer stopped then finds it
 * in flight), and at exit.
 *
 * GPU time per step on the sim (default 10 GB/s copies): stream A runs 3*US of fake_gemm then
 * the 1 MiB copy (~105 us); B runs fake_relu (US/2), waits for ev, then copies 4096 B (~0.4 us).
 * So one step takes about 3*US + 105 us (805 us with the default US=200).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "tpsim.h"
#include "handshake.h"

#define H2D_BYTES (1 << 20)
#define D2H_BYTES 4096

struct worker {
	pthread_t thread;
	int index;
	cudaStream_t stream_a, stream_b;
	cudaEvent_t ev;
	void *dev_in, *dev_out, *host_in, *host_out;
	int eventquery_not_ready;
};

static int steps = 5;
static long linger_ms;
static bool ignore_errors;
static pthread_mutex_t go_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go_cond = PTHREAD_COND_INITIALIZER;
static bool go;

/* "Device code": never called on the host; the sim only needs distinct function addresses. */
__attribute__((noinline)) void fake_gemm(float *a, int n)
{
	for (int i = 0; i < n; i++)
		a[i] *= 2.0f;
}

__attribute__((noinline)) void fake_relu(float *a, int n)
{
	for (int i = 0; i < n; i++)
		a[i] = a[i] > 0 ? a[i] : 0;
}

__attribute__((noinline)) void fake_tail(float *a, int n)
{
	for (int i = 0; i < n; i++)
		a[i] += 1.0f;
}

static void check(cudaError_t err, const char *what)
{
	if (err == cudaSuccess || ignore_errors)
		return;
	fprintf(stderr, "sim_train: %s failed: %s (%d)\n", what, cudaGetErrorName(err), (int)err);
	exit(1);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	dim3 gemm_grid = { 64, 2, 1 }, gemm_block = { 256, 1, 1 };
	dim3 relu_grid = { 128, 1, 1 }, relu_block = { 128, 1, 1 };
	float *data = w->dev_in;
	int n = 1024;
	void *args[] = { &data, &n };
	cudaError_t err;

	pthread_mutex_lock(&go_lock);
	while (!go)
		pthread_cond_wait(&go_cond, &go_lock);
	pthread_mutex_unlock(&go_lock);

	for (int step = 0; step < steps; step++) {
		for (int i = 0; i < 3; i++)
			check(cudaLaunchKernel((const void *)fake_gemm, gemm_grid, gemm_block, args,
					       4096, w->stream_a), "cudaLaunchKernel(fake_gemm)");
		check(cudaLaunchKernel((const void *)fake_relu, relu_grid, relu_block, args, 0,
				       w->stream_b), "cudaLaunchKernel(fake_relu)");
		check(cudaMemcpyAsync(w->dev_in, w->host_in, H2D_BYTES, cudaMemcpyHostToDevice,
				      w->stream_a), "cudaMemcpyAsync(H2D)");
		check(cudaEventRecord(w->ev, w->stream_a), "cudaEventRecord");
		check(cudaStreamWaitEvent(w->stream_b, w->ev, 0), "cudaStreamWaitEvent");
		check(cudaMemcpyAsync(w->host_out, w->dev_out, D2H_BYTES, cudaMemcpyDeviceToHost,
				      w->stream_b), "cudaMemcpyAsync(D2H)");
		err = cudaEventQuery(w->ev);
		if (err == cudaErrorNotReady)
			w->eventquery_not_ready++;
		else
			check(err, "cudaEventQuery");
		check(cudaStreamSynchronize(w->stream_b), "cudaStreamSynchronize");
	}
	check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	if (linger_ms)
		usleep(linger_ms * 1000);
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: sim_train [--steps N] [--threads T] [--kernel-us US] [--hold] "
		"[--ignore-errors] [--linger-ms MS] [--tail-kernel-ms MS]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int threads = 1, hold = 0, not_ready = 0;
	unsigned kernel_us = 200;
	long tail_ms = 0;
	struct worker *workers;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--steps"))
			steps = (int)hs_parse_long(argv[i], argv[i + 1]), i++;
		else if (!strcmp(argv[i], "--threads"))
			threads = (int)hs_parse_long(argv[i], argv[i + 1]), i++;
		else if (!strcmp(argv[i], "--kernel-us"))
			kernel_us = (unsigned)hs_parse_long(argv[i], argv[i + 1]), i++;
		else if (!strcmp(argv[i], "--hold"))
			hold = 1;
		else if (!strcmp(argv[i], "--ignore-errors"))
			ignore_errors = true;
		else if (!strcmp(argv[i], "--linger-ms"))
			linger_ms = hs_parse_long(argv[i], argv[i + 1]), i++;
		else if (!strcmp(argv[i], "--tail-kernel-ms"))
			tail_ms = hs_parse_long(argv[i], argv[i + 1]), i++;
		else
			usage();
	}
	if (threads < 1)
		usage();

	tpsim_set_kernel_us((const void *)fake_gemm, kernel_us);
	tpsim_set_kernel_us((const void *)fake_relu, kernel_us / 2);

	workers = calloc(threads, sizeof(*workers));
	for (int t = 0; t < threads; t++) {
		struct worker *w = &workers[t];

		w->index = t;
		check(cudaStreamCreate(&w->stream_a), "cudaStreamCreate");
		check(cudaStreamCreate(&w->stream_b), "cudaStreamCreate");
		check(cudaEventCreate(&w->ev), "cudaEventCreate");
		check(cudaMalloc(&w->dev_in, H2D_BYTES), "cudaMalloc");
		check(cudaMalloc(&w->dev_out, D2H_BYTES), "cudaMalloc");
		check(cudaMallocHost(&w->host_in, H2D_BYTES), "cudaMallocHost");
		check(cudaMallocHost(&w->host_out, D2H_BYTES), "cudaMallocHost");
		if (pthread_create(&w->thread, NULL, worker_main, w)) {
			fprintf(stderr, "sim_train: pthread_create failed\n");
			return 1;
		}
		{
			char name[16];

			snprintf(name, sizeof(name), "train-w%d", t % 100000);
			pthread_setname_np(w->thread, name);
		}
	}
	hs_info("sim_train steps=%d threads=%d kernel_us=%u fake_gemm=%p fake_relu=%p", steps,
		threads, kernel_us, (void *)fake_gemm, (void *)fake_relu);

	hs_ready_wait_go();
	pthread_mutex_lock(&go_lock);
	go = true;
	pthread_cond_broadcast(&go_cond);
	pthread_mutex_unlock(&go_lock);

	for (int t = 0; t < threads; t++) {
		pthread_join(workers[t].thread, NULL);
		not_ready += workers[t].eventquery_not_ready;
	}
	hs_info("eventquery_not_ready=%d of %d", not_ready, steps * threads);
	if (tail_ms > 0) {
		struct worker *w = &workers[0];
		dim3 grid = { 1, 1, 1 }, block = { 32, 1, 1 };
		int n = 1;
		void *args[] = { &w->dev_in, &n };

		tpsim_set_kernel_us((const void *)fake_tail, (unsigned)(tail_ms * 1000));
		check(cudaLaunchKernel((const void *)fake_tail, grid, block, args, 0, w->stream_a),
		      "cudaLaunchKernel(fake_tail)");
		check(cudaMemcpyAsync(w->host_out, w->dev_out, D2H_BYTES, cudaMemcpyDeviceToHost,
				      w->stream_b), "cudaMemcpyAsync(tail)");
		check(cudaStreamSynchronize(w->stream_b), "cudaStreamSynchronize(tail)");
	}
	hs_done(hold);
	free(workers);
	return 0;
}
