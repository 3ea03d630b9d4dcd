// SPDX-License-Identifier: MIT
#include <string.h>
#include "cuda_api.h"
#include "cuda.h"

#define API(sym, nm, k, r, pt) { .symbol = sym, .name = nm, .kind = k, .ret = r, .per_thread = pt }
#define API2(base, k, r) API(base, base, k, r, false), API(base "_ptsz", base, k, r, true)
#define APID(base, k, r) API(base, base, k, r, false), API(base "_ptds", base, k, r, true)

/* Entry-only where a duration adds nothing (async enqueues); entry+return for calls that
 * block (syncs, synchronous copies) or whose return code carries state (event query). */
const struct cuda_api cuda_apis[] = {
	API2("cudaLaunchKernel", API_LAUNCH, false),
	API2("cudaLaunchKernelExC", API_LAUNCH_EXC, false),
	API2("__cudaLaunchKernel", API_LAUNCH_HANDLE, false),
	API2("cudaLaunchCooperativeKernel", API_LAUNCH, false),
	API("__cudaGetKernel", "__cudaGetKernel", API_GET_KERNEL, true, false),
	API("cudaGetKernel", "cudaGetKernel", API_GET_KERNEL, true, false),
	API2("cudaGraphLaunch", API_GRAPH_LAUNCH, false),
	APID("cudaMemcpy", API_MEMCPY, true),
	API2("cudaMemcpyAsync", API_MEMCPY_ASYNC, false),
	APID("cudaMemcpy2D", API_MEMCPY2D, true),
	API2("cudaMemcpy2DAsync", API_MEMCPY2D_ASYNC, false),
	APID("cudaMemset", API_MEMSET, true),
	API2("cudaMemsetAsync", API_MEMSET_ASYNC, false),
	API2("cudaStreamSynchronize", API_STREAM_SYNC, true),
	API("cudaDeviceSynchronize", "cudaDeviceSynchronize", API_DEVICE_SYNC, true, false),
	API("cudaEventSynchronize", "cudaEventSynchronize", API_EVENT_SYNC, true, false),
	API2("cudaEventRecord", API_EVENT_RECORD, false),
	API2("cudaEventRecordWithFlags", API_EVENT_RECORD_FLAGS, false),
	API("cudaEventQuery", "cudaEventQuery", API_EVENT_QUERY, true, false),
	API2("cudaStreamWaitEvent", API_STREAM_WAIT_EVENT, false),
};
const int cuda_api_count = sizeof(cuda_apis) / sizeof(cuda_apis[0]);

/* sizeof(cudaLaunchConfig_t): dim3 grid, dim3 block, size_t smem, stream, attrs*, numAttrs */
#define LAUNCH_CONFIG_SIZE 56

uint64_t cuda_api_cookie(int id, bool caller2)
{
	const struct cuda_api *api = &cuda_apis[id];
	uint64_t cookie = (uint64_t)id;
	uint64_t nstack = 0;

	switch (api->kind) {
	case API_LAUNCH:	/* may carry a CUDA 13 handle too: see decode.c */
	case API_LAUNCH_HANDLE:
		nstack = 3;
		if (caller2)
			cookie |= TP_COOKIE_CALLER2;
		break;
	case API_LAUNCH_EXC:
		nstack = 1;
		cookie |= (1ULL << 20) | ((uint64_t)LAUNCH_CONFIG_SIZE << 24);
		break;
	case API_GET_KERNEL:
		nstack = 1;
		cookie |= TP_COOKIE_SAVE_OUT;
		break;
	case API_MEMCPY2D:
		nstack = 2;	/* return address, kind */
		break;
	case API_MEMCPY2D_ASYNC:
		nstack = 3;	/* return address, kind, stream */
		break;
	default:
		nstack = 0;
		break;
	}
	return cookie | (nstack << 16);
}

bool cuda_api_is_marker(const char *symbol)
{
	return !strcmp(symbol, "cudaLaunchKernel") || !strcmp(symbol, "__cudaLaunchKernel") ||
	       !strcmp(symbol, "cudaStreamSynchronize");
}

const char *cuda_memcpy_kind_str(uint64_t kind)
{
	switch (kind) {
	case 0: return "HtoH";
	case 1: return "HtoD";
	case 2: return "DtoH";
	case 3: return "DtoD";
	case 4: return "Default";
	default: return "Unknown";
	}
}
