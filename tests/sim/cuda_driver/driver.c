// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * A simulated libcuda.so.1 with just the memory calls tptrace probes in the driver (our machines
 * have no driver): cuMemAlloc_v2/cuMemFree_v2 on host memory, and the virtual memory management
 * calls PyTorch's expandable segments use (cuMemCreate, cuMemAddressReserve, cuMemMap,
 * cuMemUnmap, cuMemRelease, cuMemAddressFree) as bookkeeping only: a "mapped" range is never
 * touched. Prototypes come from the real <cuda.h> (its macros give the _v2 names).
 */
#include <stdint.h>
#include <stdlib.h>
#include <cuda.h>

static uintptr_t next_va = 0x7e0000000000ULL;
static CUmemGenericAllocationHandle next_handle = 0x1000;

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
	void *p;

	if (!dptr || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	p = aligned_alloc(256, (bytesize + 255) / 256 * 256);
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*dptr = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr dptr)
{
	free((void *)(uintptr_t)dptr);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
			     const CUmemAllocationProp *prop, unsigned long long flags)
{
	if (!handle || !prop || !size || flags)
		return CUDA_ERROR_INVALID_VALUE;
	*handle = next_handle++;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
	return handle ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
				     CUdeviceptr addr, unsigned long long flags)
{
	if (!ptr || !size)
		return CUDA_ERROR_INVALID_VALUE;
	*ptr = (CUdeviceptr)next_va;
	next_va += (size + (2 << 20) - 1) / (2 << 20) * (2 << 20);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
			  CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	return ptr && size && handle ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	return ptr && size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
