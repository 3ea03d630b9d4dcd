// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * sim_job: a training loop on the simulated runtime with faults to order, for tptrace report's
 * tests (tests/e2e/test_report.py). One thread, one stream s.
 *
 * Usage: sim_job [--steps N (12)] [--kernels K (4)] [--kernel-us US (200)]
 *                [--sync lag|step (lag)] [--host-us H (0)] [--copy pinned|pageable (pinned)]
 *                [--copy-bytes B (1048576)] [--launch-gap-us G (0)]
 *
 * After GO, EXACTLY these calls per step k, in this order:
 *   0. [--host-us H] H µs of host work (a sleep, no call)
 *   1. cudaMemcpyAsync(dev_in, host_in, B, HostToDevice, s): host_in from cudaMallocHost
 *      (pinned) or malloc (pageable: the sim then blocks the call until the copy is done, at a
 *      quarter of the bandwidth, as the real runtime stages pageable memory)
 *   2. K x cudaLaunchKernel(fake_step, grid (64,1,1), block (256,1,1), shmem 0, s), US µs each
 *      ([--launch-gap-us G] G µs of host work (a sleep) before each: a host slower than its
 *      kernels, launch-bound)
 *   then with --sync lag (healthy: the host runs at most one step ahead):
 *   3. cudaEventRecord(ev[k % 2], s)
 *   4. cudaEventSynchronize(ev[(k + 1) % 2])   (step k-1's event; at k = 0 never recorded:
 *      returns at once)
 *   or with --sync step (`loss.item()` every step):
 *   3. cudaMemcpyAsync(host_loss, dev_in, 4, DeviceToHost, s)  (host_loss pinned)
 *   4. cudaStreamSynchronize(s)
 * and once after the last step: cudaDeviceSynchronize().
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime_api.h>
#include "tpsim.h"
#include "handshake.h"

__attribute__((noinline)) void fake_step(float *a, int n)
{
	for (int i = 0; i < n; i++)
		a[i] += 1.0f;
}

static void check(cudaError_t err, const char *what)
{
	if (err == cudaSuccess)
		return;
	fprintf(stderr, "sim_job: %s failed: %s (%d)\n", what, cudaGetErrorName(err), (int)err);
	exit(1);
}

/* Host work that makes no CUDA call. A sleep, not a spin: on a 2-CPU test host a spin would
 * starve the simulated GPU's threads and stretch its kernels. */
static void host_work_us(long us)
{
	struct timespec d = { us / 1000000, (us % 1000000) * 1000L };

	nanosleep(&d, NULL);
}

static void usage(void)
{
	fprintf(stderr, "usage: sim_job [--steps N] [--kernels K] [--kernel-us US] "
		"[--sync lag|step] [--host-us H] [--copy pinned|pageable] [--copy-bytes B] "
		"[--launch-gap-us G]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int steps = 12, kernels = 4;
	long kernel_us = 200, host_us = 0, launch_gap_us = 0;
	size_t copy_bytes = 1 << 20;
	bool sync_step = false, pageable = false;
	cudaStream_t s;
	cudaEvent_t ev[2];
	void *dev_in, *host_in, *host_loss;
	dim3 grid = { 64, 1, 1 }, block = { 256, 1, 1 };

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v)
			usage();
		if (!strcmp(a, "--steps"))
			steps = (int)hs_parse_long(a, v);
		else if (!strcmp(a, "--kernels"))
			kernels = (int)hs_parse_long(a, v);
		else if (!strcmp(a, "--kernel-us"))
			kernel_us = hs_parse_long(a, v);
		else if (!strcmp(a, "--host-us"))
			host_us = hs_parse_long(a, v);
		else if (!strcmp(a, "--launch-gap-us"))
			launch_gap_us = hs_parse_long(a, v);
		else if (!strcmp(a, "--copy-bytes"))
			copy_bytes = (size_t)hs_parse_long(a, v);
		else if (!strcmp(a, "--sync") && (!strcmp(v, "lag") || !strcmp(v, "step")))
			sync_step = !strcmp(v, "step");
		else if (!strcmp(a, "--copy") && (!strcmp(v, "pinned") || !strcmp(v, "pageable")))
			pageable = !strcmp(v, "pageable");
		else
			usage();
		i++;
	}
	tpsim_set_kernel_us((const void *)fake_step, (unsigned)kernel_us);
	check(cudaStreamCreate(&s), "cudaStreamCreate");
	check(cudaEventCreate(&ev[0]), "cudaEventCreate");
	check(cudaEventCreate(&ev[1]), "cudaEventCreate");
	check(cudaMalloc(&dev_in, copy_bytes), "cudaMalloc");
	check(cudaMallocHost(&host_loss, 4096), "cudaMallocHost");
	if (pageable) {
		host_in = malloc(copy_bytes);
		if (!host_in)
			return 1;
		memset(host_in, 1, copy_bytes);
	} else {
		check(cudaMallocHost(&host_in, copy_bytes), "cudaMallocHost");
	}
	hs_info("sim_job steps=%d kernels=%d kernel_us=%ld sync=%s host_us=%ld copy=%s bytes=%zu",
		steps, kernels, kernel_us, sync_step ? "step" : "lag", host_us,
		pageable ? "pageable" : "pinned", copy_bytes);
	hs_ready_wait_go();
	for (int k = 0; k < steps; k++) {
		float *data = dev_in;
		int n = 256;
		void *args[] = { &data, &n };

		if (host_us)
			host_work_us(host_us);
		check(cudaMemcpyAsync(dev_in, host_in, copy_bytes, cudaMemcpyHostToDevice, s),
		      "cudaMemcpyAsync(HtoD)");
		for (int i = 0; i < kernels; i++) {
			if (launch_gap_us)
				host_work_us(launch_gap_us);
			check(cudaLaunchKernel((const void *)fake_step, grid, block, args, 0, s),
			      "cudaLaunchKernel");
		}
		if (sync_step) {
			check(cudaMemcpyAsync(host_loss, dev_in, 4, cudaMemcpyDeviceToHost, s),
			      "cudaMemcpyAsync(DtoH)");
			check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
		} else {
			check(cudaEventRecord(ev[k % 2], s), "cudaEventRecord");
			check(cudaEventSynchronize(ev[(k + 1) % 2]), "cudaEventSynchronize");
		}
	}
	check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	hs_done(false);
	return 0;
}
