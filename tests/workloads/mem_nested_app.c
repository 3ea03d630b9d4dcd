// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * mem_nested_app: driver memory calls made inside runtime calls, as the real stack makes them.
 * The simulated libcudart.so.13 runs cudaMalloc on cuMemAlloc_v2 and cudaFree on cuMemFree_v2
 * of the simulated libcuda.so.1 (tests/sim/cuda_driver), so each runtime call below has one
 * nested driver call; the two direct driver calls show the driver probes are live.
 * Before GO: cudaFree(NULL) (runtime and driver initialised, libcuda.so.1 mapped).
 * After GO, in this order:
 *   1. cudaMalloc(&a, 3145728)     -> cuMemAlloc_v2 nested   "# cudaMalloc 0x<a> 3145728"
 *   2. cuMemAlloc_v2(&b, 1048576)  direct                    "# cuMemAlloc 0x<b> 1048576"
 *   3. cudaFree(a)                 -> cuMemFree_v2 nested
 *   4. cuMemFree_v2(b)             direct
 * Before the frees, two copies the trace writer probes (the memory tracer does not): the same
 * nesting for the other sink (test_mem_nested_rule_twins_agree):
 *   2a. cudaMemcpy(a, host, 4096, HostToDevice) -> cuMemcpyHtoD_v2 nested
 *   2b. cuMemcpyHtoD_v2(b, host, 4096)            direct
 */
#include <stdio.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include "handshake.h"

int main(void)
{
	static char host[4096];
	CUdeviceptr b = 0;
	void *a = NULL;

	if (cudaFree(NULL)) {
		fprintf(stderr, "mem_nested_app: cudaFree(NULL) failed\n");
		return 1;
	}
	hs_ready_wait_go();
	if (cudaMalloc(&a, 3145728) || cuMemAlloc(&b, 1048576) ||
	    cudaMemcpy(a, host, sizeof(host), cudaMemcpyHostToDevice) ||
	    cuMemcpyHtoD(b, host, sizeof(host)) || cudaFree(a) || cuMemFree(b)) {
		fprintf(stderr, "mem_nested_app: an allocation call failed\n");
		return 1;
	}
	hs_info("cudaMalloc %p 3145728", a);
	hs_info("cuMemAlloc 0x%llx 1048576", (unsigned long long)b);
	hs_done(0);
	return 0;
}
