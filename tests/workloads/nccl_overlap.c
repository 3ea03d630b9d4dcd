// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * nccl_overlap: compute beside NCCL, with an overlap known by construction (tptrace report's
 * comm/compute overlap test, tests/e2e/test_report.py). One process, two ranks of one
 * communicator (ncclCommInitAll on device 0 twice), each rank's collectives on a stream of its
 * own (sc0, sc1), compute on a third (sp); the sim libnccl runs every collective's kernel on the
 * comm's internal stream after an event on the caller's stream.
 *
 * Usage: nccl_overlap [--steps S (6)] [--kernels K (3)] [--compute-us C (500)]
 *
 * After GO, EXACTLY these calls per step, in this order, on the main thread:
 *   1. ncclAllReduce(b0, b0, 1024, ncclFloat32, ncclSum, comm0, sc0)
 *   2. K x cudaLaunchKernel(fake_compute, grid 1, block 1, shmem 0, sp), C us each
 *   3. cudaEventRecord(ev, sp), then cudaEventQuery(ev) every 50 us until it returns
 *      cudaSuccess (a poll, not a sync: the step's only syncs are those of 5, so the report's
 *      step boundaries are NCCL's ends, TPSIM_NCCL_US after the compute at least)
 *   4. ncclAllReduce(b1, b1, 1024, ncclFloat32, ncclSum, comm1, sc1)
 *   5. cudaStreamSynchronize(sc0), cudaStreamSynchronize(sc1)
 * then "DONE". Why every compute kernel lies inside rank 0's NCCL kernel N0 of its step:
 *   - N0 starts on the device when its stream is free, 2 us after its cuLaunchKernelEx returned
 *     (the sim's launch latency; its internal stream's wait for sc0 is already satisfied); the
 *     first compute kernel starts 2 us after ITS launch returned, later in this thread, and the
 *     others follow it back to back on sp;
 *   - N0 cannot end before rank 1 arrives, and rank 1's allreduce is called after the event on
 *     sp completed, i.e. after the last compute kernel ended (the event
 *     recorded after it completed).
 * So the overlap of NCCL and compute kernels is exactly K * C us per step, whatever the host's
 * load; rank 1's kernel starts after the compute ended and overlaps nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include "tpsim.h"
#include "handshake.h"

__attribute__((noinline)) void fake_compute(int *flag)
{
	if (flag)
		*flag = 1;
}

static void cuda_check(cudaError_t err, const char *what)
{
	if (err == cudaSuccess)
		return;
	fprintf(stderr, "nccl_overlap: %s failed: %s (%d)\n", what, cudaGetErrorName(err), (int)err);
	exit(1);
}

static void nccl_check(ncclResult_t r, const char *what)
{
	if (r == ncclSuccess)
		return;
	fprintf(stderr, "nccl_overlap: %s failed: %s (%d)\n", what, ncclGetErrorString(r), (int)r);
	exit(1);
}

int main(int argc, char **argv)
{
	long steps = 6, kernels = 3, compute_us = 500;
	static const int devs[2] = { 0, 0 };
	ncclComm_t comm[2];
	cudaStream_t sc0, sc1, sp;
	cudaEvent_t ev;
	float *b0, *b1;

	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(argv[i], "--steps") && v)
			steps = hs_parse_long(argv[i], v), i++;
		else if (!strcmp(argv[i], "--kernels") && v)
			kernels = hs_parse_long(argv[i], v), i++;
		else if (!strcmp(argv[i], "--compute-us") && v)
			compute_us = hs_parse_long(argv[i], v), i++;
		else {
			fprintf(stderr, "usage: nccl_overlap [--steps S] [--kernels K] "
				"[--compute-us C]\n");
			return 2;
		}
	}
	if (steps < 1 || kernels < 1 || compute_us < 1) {
		fprintf(stderr, "nccl_overlap: --steps, --kernels and --compute-us must be >= 1\n");
		return 2;
	}
	cuda_check(cudaStreamCreateWithFlags(&sc0, cudaStreamNonBlocking), "cudaStreamCreate sc0");
	cuda_check(cudaStreamCreateWithFlags(&sc1, cudaStreamNonBlocking), "cudaStreamCreate sc1");
	cuda_check(cudaStreamCreateWithFlags(&sp, cudaStreamNonBlocking), "cudaStreamCreate sp");
	cuda_check(cudaMalloc((void **)&b0, 1024 * sizeof(float)), "cudaMalloc b0");
	cuda_check(cudaMalloc((void **)&b1, 1024 * sizeof(float)), "cudaMalloc b1");
	cuda_check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
	tpsim_set_kernel_us((const void *)fake_compute, (unsigned)compute_us);
	nccl_check(ncclCommInitAll(comm, 2, devs), "ncclCommInitAll");

	hs_ready_wait_go();
	for (long s = 0; s < steps; s++) {
		dim3 one = { 1, 1, 1 };
		int *flag = NULL;
		void *args[] = { &flag };

		nccl_check(ncclAllReduce(b0, b0, 1024, ncclFloat32, ncclSum, comm[0], sc0),
			   "ncclAllReduce rank 0");
		for (long k = 0; k < kernels; k++)
			cuda_check(cudaLaunchKernel((const void *)fake_compute, one, one, args, 0, sp),
				   "cudaLaunchKernel");
		cuda_check(cudaEventRecord(ev, sp), "cudaEventRecord");
		for (;;) {
			struct timespec d = { 0, 50000 };
			cudaError_t q = cudaEventQuery(ev);

			if (q == cudaSuccess)
				break;
			if (q != cudaErrorNotReady)
				cuda_check(q, "cudaEventQuery");
			nanosleep(&d, NULL);
		}
		nccl_check(ncclAllReduce(b1, b1, 1024, ncclFloat32, ncclSum, comm[1], sc1),
			   "ncclAllReduce rank 1");
		cuda_check(cudaStreamSynchronize(sc0), "cudaStreamSynchronize sc0");
		cuda_check(cudaStreamSynchronize(sc1), "cudaStreamSynchronize sc1");
	}
	nccl_check(ncclCommDestroy(comm[0]), "ncclCommDestroy");
	nccl_check(ncclCommDestroy(comm[1]), "ncclCommDestroy");
	hs_done(0);
	return 0;
}
