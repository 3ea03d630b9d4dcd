// SPDX-License-Identifier: MIT
/* Calls every driver entry point tptrace probes in the REAL driver ABI: linked against the
 * toolkit's /usr/local/cuda/lib/stubs/libcuda.so (soname libcuda.so.1; the test puts a
 * libcuda.so.1 link to it on LD_LIBRARY_PATH). Each stub returns CUDA_ERROR_STUB_LIBRARY (34);
 * the entry is what is observed. Every argument is distinct; tests/e2e/test_real_driver.py
 * asserts each one, in this order — keep the two in sync. */
#include <stdint.h>
#include <string.h>
#include <cuda.h>
#include "handshake.h"

/* cuda.h declares one flavour of each call (legacy or, with
 * CUDA_API_PER_THREAD_DEFAULT_STREAM, per-thread); the other exported one is declared here */
CUresult cuLaunchKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
			     unsigned, unsigned, CUstream, void **, void **);
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned,
					unsigned, unsigned, unsigned, CUstream, void **);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *, CUfunction, void **, void **);
CUresult cuGraphLaunch_ptsz(CUgraphExec, CUstream);
CUresult cuMemcpy_ptds(CUdeviceptr, CUdeviceptr, size_t);
CUresult cuMemcpyAsync_ptsz(CUdeviceptr, CUdeviceptr, size_t, CUstream);
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr, const void *, size_t);
CUresult cuMemcpyDtoH_v2_ptds(void *, CUdeviceptr, size_t);
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr, CUdeviceptr, size_t);
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr, const void *, size_t, CUstream);
CUresult cuMemcpyDtoHAsync_v2_ptsz(void *, CUdeviceptr, size_t, CUstream);
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr, CUdeviceptr, size_t, CUstream);
CUresult cuMemcpyPeer_ptds(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t);
CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t,
				CUstream);
CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *);
CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *, CUstream);
CUresult cuMemsetD8_v2_ptds(CUdeviceptr, unsigned char, size_t);
CUresult cuMemsetD16_v2_ptds(CUdeviceptr, unsigned short, size_t);
CUresult cuMemsetD32_v2_ptds(CUdeviceptr, unsigned int, size_t);
CUresult cuMemsetD8Async_ptsz(CUdeviceptr, unsigned char, size_t, CUstream);
CUresult cuMemsetD16Async_ptsz(CUdeviceptr, unsigned short, size_t, CUstream);
CUresult cuMemsetD32Async_ptsz(CUdeviceptr, unsigned int, size_t, CUstream);
CUresult cuStreamSynchronize_ptsz(CUstream);
CUresult cuEventRecord_ptsz(CUevent, CUstream);
CUresult cuEventRecordWithFlags_ptsz(CUevent, CUstream, unsigned int);
CUresult cuStreamWaitEvent_ptsz(CUstream, CUevent, unsigned int);

#define S ((CUstream)0x5100)
#define S2 ((CUstream)0x5200)
#define PT ((CUstream)2)		/* CU_STREAM_PER_THREAD */
#define EV ((CUevent)0xe7e7)
#define F ((CUfunction)0xf00d)

/* This executable also "holds a static cudart" (as libnccl.so.2 does): a runtime entry point
 * marks it, and driver calls made from a libcudart_static_<hash> function are nested in a
 * runtime call: counted, not written. Neither is a tail call, so each leaves its return
 * address inside the function. */
int cudaStreamSynchronize(void *stream)
{
	__asm__ volatile("" ::"r"(stream));
	return 0;
}

__attribute__((noinline, used)) int libcudart_static_feedface(void)
{
	volatile int rc = 0;

	rc += cuMemcpyHtoD(0xf000, (void *)0x7f00, 77);
	rc += cuLaunchKernel((CUfunction)0xfeed, 1, 1, 1, 1, 1, 1, 0, S, NULL, NULL);
	return rc;
}

static CUDA_MEMCPY2D m2d(CUmemorytype st, CUmemorytype dt, uint64_t src, uint64_t dst,
			 size_t spitch, size_t dpitch, size_t w, size_t h)
{
	CUDA_MEMCPY2D m;

	memset(&m, 0, sizeof(m));
	m.srcMemoryType = st;
	m.dstMemoryType = dt;
	if (st == CU_MEMORYTYPE_HOST)
		m.srcHost = (const void *)(uintptr_t)src;
	else if (st == CU_MEMORYTYPE_ARRAY)
		m.srcArray = (CUarray)(uintptr_t)src;
	else
		m.srcDevice = src;
	if (dt == CU_MEMORYTYPE_HOST)
		m.dstHost = (void *)(uintptr_t)dst;
	else
		m.dstDevice = dst;
	m.srcPitch = spitch;
	m.dstPitch = dpitch;
	m.WidthInBytes = w;
	m.Height = h;
	return m;
}

int main(void)
{
	void *params[2] = { 0 };
	char host[256];
	CUlaunchAttribute a1[3], a2[4];
	CUlaunchConfig c1, c2;
	CUDA_MEMCPY2D m;
	CUfunction f = 0;
	CUkernel k = 0;

	memset(a1, 0, sizeof(a1));
	a1[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
	a1[0].value.clusterDim.x = 2;
	a1[0].value.clusterDim.y = 1;
	a1[0].value.clusterDim.z = 4;
	a1[1].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
	a1[1].value.cooperative = 1;
	a1[2].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
	a1[2].value.priority = -3;
	c1 = (CUlaunchConfig){ 31, 32, 33, 128, 1, 2, 12345, S, a1, 3 };
	memset(a2, 0, sizeof(a2));
	a2[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
	a2[0].value.programmaticStreamSerializationAllowed = 1;
	a2[1].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
	a2[1].value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING;
	a2[2].id = (CUlaunchAttributeID)99;	/* an id this tptrace does not know */
	a2[2].value.priority = 0x4242;
	a2[3].id = CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN;	/* past what the probe copies */
	c2 = (CUlaunchConfig){ 41, 42, 43, 256, 1, 1, 0, PT, a2, 4 };

	hs_ready_wait_go();
	/* launches */
	cuLaunchKernel(F, 11, 12, 13, 32, 4, 2, 4096, S, params, NULL);
	cuLaunchKernel_ptsz(F, 21, 22, 23, 64, 2, 3, 777, PT, params, NULL);
	cuLaunchCooperativeKernel(F, 70000, 3, 1, 1024, 1, 1, 65536, S, params);
	cuLaunchCooperativeKernel_ptsz(F, 5, 6, 7, 8, 9, 10, 11, S2, params);
	cuLaunchKernelEx(&c1, F, params, NULL);
	cuLaunchKernelEx_ptsz(&c2, F, params, NULL);
	cuGraphLaunch((CUgraphExec)0x9a9a, S);
	cuGraphLaunch_ptsz((CUgraphExec)0x9b9b, PT);
	/* 1D copies */
	cuMemcpy(0xd000, 0xd100, 48);
	cuMemcpy_ptds(0xd000, 0xd100, 49);
	cuMemcpyAsync(0xd000, 0xd100, 50, S);
	cuMemcpyAsync_ptsz(0xd000, 0xd100, 51, S2);
	cuMemcpyHtoD(0xd200, (void *)0x7200, 52);
	cuMemcpyHtoD_v2_ptds(0xd200, (void *)0x7200, 53);
	cuMemcpyDtoH((void *)0x7300, 0xd300, 54);
	cuMemcpyDtoH_v2_ptds((void *)0x7300, 0xd300, 55);
	cuMemcpyDtoD(0xd400, 0xd500, 56);
	cuMemcpyDtoD_v2_ptds(0xd400, 0xd500, 57);
	cuMemcpyHtoDAsync(0xd200, (void *)0x7200, 58, S);
	cuMemcpyHtoDAsync_v2_ptsz(0xd200, (void *)0x7200, 59, S2);
	cuMemcpyDtoHAsync((void *)0x7300, 0xd300, 60, S);
	cuMemcpyDtoHAsync_v2_ptsz((void *)0x7300, 0xd300, 61, S2);
	cuMemcpyDtoDAsync(0xd400, 0xd500, 62, S);
	cuMemcpyDtoDAsync_v2_ptsz(0xd400, 0xd500, 63, S2);
	cuMemcpyPeer(0xd600, (CUcontext)0xc1, 0xd700, (CUcontext)0xc2, 64);
	cuMemcpyPeer_ptds(0xd600, (CUcontext)0xc1, 0xd700, (CUcontext)0xc2, 65);
	cuMemcpyPeerAsync(0xd600, (CUcontext)0xc1, 0xd700, (CUcontext)0xc2, 66, S);
	cuMemcpyPeerAsync_ptsz(0xd600, (CUcontext)0xc1, 0xd700, (CUcontext)0xc2, 67, S2);
	/* 2D copies through CUDA_MEMCPY2D */
	m = m2d(CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST, 0xd800, (uintptr_t)host, 256, 128, 100, 7);
	cuMemcpy2D(&m);
	m = m2d(CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE, 0x7400, 0xd900, 16, 32, 10, 3);
	cuMemcpy2D_v2_ptds(&m);
	m = m2d(CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE, 0xda00, 0xdb00, 64, 48, 20, 2);
	cuMemcpy2DAsync(&m, S);
	m = m2d(CU_MEMORYTYPE_ARRAY, CU_MEMORYTYPE_DEVICE, 0xa11a, 0xdc00, 0, 8, 8, 8);
	cuMemcpy2DAsync_v2_ptsz(&m, S2);
	/* memsets: N elements of 1, 2 or 4 bytes */
	cuMemsetD8(0xe000, 0xab, 100);
	cuMemsetD8_v2_ptds(0xe000, 0xcd, 101);
	cuMemsetD16(0xe100, 0xbeef, 102);
	cuMemsetD16_v2_ptds(0xe100, 0x1234, 103);
	cuMemsetD32(0xe200, 0xdeadbeef, 104);
	cuMemsetD32_v2_ptds(0xe200, 0x01020304, 105);
	cuMemsetD8Async(0xe300, 0x11, 106, S);
	cuMemsetD8Async_ptsz(0xe300, 0x22, 107, S2);
	cuMemsetD16Async(0xe400, 0x3333, 108, S);
	cuMemsetD16Async_ptsz(0xe400, 0x4444, 109, S2);
	cuMemsetD32Async(0xe500, 0x55555555, 110, S);
	cuMemsetD32Async_ptsz(0xe500, 0x66666666, 111, S2);
	/* stream order */
	cuStreamSynchronize(S);
	cuStreamSynchronize_ptsz(S2);
	cuCtxSynchronize();
	cuEventRecord(EV, S);
	cuEventRecord_ptsz(EV, S2);
	cuEventRecordWithFlags(EV, S, CU_EVENT_RECORD_EXTERNAL);
	cuEventRecordWithFlags_ptsz(EV, PT, CU_EVENT_RECORD_EXTERNAL);
	cuEventQuery(EV);
	cuEventSynchronize(EV);
	cuStreamWaitEvent(S, EV, 0);
	cuStreamWaitEvent_ptsz(S2, EV, CU_EVENT_WAIT_EXTERNAL);
	/* kernel handles (without a driver nothing is returned: rc 34, no handle) */
	cuModuleGetFunction(&f, (CUmodule)0x30d0, "triton_poi_fused_add_0");
	cuLibraryGetKernel(&k, (CUlibrary)0x11b0, "_Z5scalePfi");
	cuKernelGetFunction(&f, (CUkernel)0xc0c0);
	/* nested in "the runtime" */
	libcudart_static_feedface();
	hs_done(0);
	return 0;
}
