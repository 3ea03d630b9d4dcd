// SPDX-License-Identifier: MIT
/* Calls the allocation functions of the REAL libcudart.so.13 with distinct, known arguments
 * after the READY/GO handshake, so a tracer attached in between can check every decoded entry
 * argument. Without a driver each call fails (cudaErrorInsufficientDriver, 35); the return
 * codes are printed ("# rc <api> <rc>") so the test compares them exactly. Asserted by
 * tests/e2e/test_mem.py: keep in sync. */
#include <stdio.h>
#include <cuda_runtime_api.h>
#include "handshake.h"

int main(void)
{
	void *p = NULL;

	hs_ready_wait_go();
	hs_info("rc cudaMalloc %d", (int)cudaMalloc(&p, 1111));
	hs_info("rc cudaMallocAsync %d", (int)cudaMallocAsync(&p, 2222, (cudaStream_t)0x5100));
	hs_info("rc cudaMallocHost %d", (int)cudaMallocHost(&p, 3333));
	hs_info("rc cudaHostAlloc %d", (int)cudaHostAlloc(&p, 4444, cudaHostAllocMapped));
	hs_info("rc cudaMallocManaged %d", (int)cudaMallocManaged(&p, 5555, cudaMemAttachHost));
	hs_info("rc cudaFree %d", (int)cudaFree((void *)0xdead000));
	hs_info("rc cudaFreeAsync %d", (int)cudaFreeAsync((void *)0xbeef000, (cudaStream_t)0x5200));
	hs_info("rc cudaFreeHost %d", (int)cudaFreeHost((void *)0xcafe000));
	hs_info("rc cudaSetDevice %d", (int)cudaSetDevice(3));
	hs_done(0);
	return 0;
}
