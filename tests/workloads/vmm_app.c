// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * vmm_app: driver memory calls on the simulated libcuda.so.1 (tests/sim/cuda_driver), the way
 * PyTorch's expandable segments use them. After GO, in this order:
 *   1. cuMemAlloc_v2(&p, 1048576)                       "# cuMemAlloc 0x<p> 1048576"
 *   2. cuMemCreate(&h, 2097152, prop{device, id 1}, 0)  "# cuMemCreate 0x<h> 2097152"
 *   3. cuMemAddressReserve(&va, 8388608, 0, 0, 0)       "# va 0x<va>" (not probed)
 *   4. cuMemMap(va, 2097152, 0, h, 0)
 *   5. cuMemUnmap(va, 2097152)
 *   6. cuMemRelease(h)
 *   7. cuMemFree_v2(p)
 */
#include <stdio.h>
#include <string.h>
#include <cuda.h>
#include "handshake.h"

int main(void)
{
	CUmemAllocationProp prop;
	CUmemGenericAllocationHandle h = 0;
	CUdeviceptr p = 0, va = 0;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 1;
	hs_ready_wait_go();
	if (cuMemAlloc(&p, 1048576) || cuMemCreate(&h, 2097152, &prop, 0) ||
	    cuMemAddressReserve(&va, 8388608, 0, 0, 0) || cuMemMap(va, 2097152, 0, h, 0) ||
	    cuMemUnmap(va, 2097152) || cuMemRelease(h) || cuMemFree(p)) {
		fprintf(stderr, "vmm_app: a driver call failed\n");
		return 1;
	}
	hs_info("cuMemAlloc 0x%llx 1048576", (unsigned long long)p);
	hs_info("cuMemCreate 0x%llx 2097152", (unsigned long long)h);
	hs_info("va 0x%llx", (unsigned long long)va);
	hs_done(0);
	return 0;
}
