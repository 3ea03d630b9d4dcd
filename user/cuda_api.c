// SPDX-License-Identifier: MIT
#include <errno.h>
#include <string.h>
#include "cuda_api.h"
#include "cuda.h"
#include <cupti_runtime_cbid.h>
#include <cupti_driver_cbid.h>

/* Runtime rows: symbol, event name, kind, return probe, per-thread variant, CUPTI cbid
 * (CUPTI_RUNTIME_TRACE_CBID_*), GPU work. The cbid constants come from the toolkit's
 * cupti_runtime_cbid.h (a plain enum; this file is built with -I$(CUDA_HOME)/include). */
#define API(sym, nm, k, r, pt, cb, w) { .symbol = sym, .name = nm, .kind = k, .ret = r, \
	.per_thread = pt, .domain = CUDA_DOM_RUNTIME, .cbid = cb, .gpu_work = w }
#define RT(id) CUPTI_RUNTIME_TRACE_CBID_##id
#define API2(base, k, r, cb, cbpt, w) API(base, base, k, r, false, RT(cb), w), \
	API(base "_ptsz", base, k, r, true, RT(cbpt), w)
#define APID(base, k, r, cb, cbpt, w) API(base, base, k, r, false, RT(cb), w), \
	API(base "_ptds", base, k, r, true, RT(cbpt), w)

/* Entry-only where a duration adds nothing (async enqueues); entry+return for calls that
 * block (syncs, synchronous copies) or whose return code carries state (event query). */
const struct cuda_api cuda_apis[] = {
	API2("cudaLaunchKernel", API_LAUNCH, false, cudaLaunchKernel_v7000,
	     cudaLaunchKernel_ptsz_v7000, true),
	API2("cudaLaunchKernelExC", API_LAUNCH_EXC, false, cudaLaunchKernelExC_v11060,
	     cudaLaunchKernelExC_ptsz_v11060, true),
	API2("__cudaLaunchKernel", API_LAUNCH_HANDLE, false, __cudaLaunchKernel_v13000,
	     __cudaLaunchKernel_ptsz_v13000, true),
	API2("cudaLaunchCooperativeKernel", API_LAUNCH, false, cudaLaunchCooperativeKernel_v9000,
	     cudaLaunchCooperativeKernel_ptsz_v9000, true),
	API("__cudaGetKernel", "__cudaGetKernel", API_GET_KERNEL, true, false,
	    RT(__cudaGetKernel_v13000), false),
	API("cudaGetKernel", "cudaGetKernel", API_GET_KERNEL, true, false, RT(cudaGetKernel_v12000),
	    false),
	API2("cudaGraphLaunch", API_GRAPH_LAUNCH, false, cudaGraphLaunch_v10000,
	     cudaGraphLaunch_ptsz_v10000, true),
	APID("cudaMemcpy", API_MEMCPY, true, cudaMemcpy_v3020, cudaMemcpy_ptds_v7000, true),
	API2("cudaMemcpyAsync", API_MEMCPY_ASYNC, false, cudaMemcpyAsync_v3020,
	     cudaMemcpyAsync_ptsz_v7000, true),
	APID("cudaMemcpy2D", API_MEMCPY2D, true, cudaMemcpy2D_v3020, cudaMemcpy2D_ptds_v7000, true),
	API2("cudaMemcpy2DAsync", API_MEMCPY2D_ASYNC, false, cudaMemcpy2DAsync_v3020,
	     cudaMemcpy2DAsync_ptsz_v7000, true),
	APID("cudaMemset", API_MEMSET, true, cudaMemset_v3020, cudaMemset_ptds_v7000, true),
	API2("cudaMemsetAsync", API_MEMSET_ASYNC, false, cudaMemsetAsync_v3020,
	     cudaMemsetAsync_ptsz_v7000, true),
	API2("cudaStreamSynchronize", API_STREAM_SYNC, true, cudaStreamSynchronize_v3020,
	     cudaStreamSynchronize_ptsz_v7000, false),
	API("cudaDeviceSynchronize", "cudaDeviceSynchronize", API_DEVICE_SYNC, true, false,
	    RT(cudaDeviceSynchronize_v3020), false),
	API("cudaEventSynchronize", "cudaEventSynchronize", API_EVENT_SYNC, true, false,
	    RT(cudaEventSynchronize_v3020), false),
	API2("cudaEventRecord", API_EVENT_RECORD, false, cudaEventRecord_v3020,
	     cudaEventRecord_ptsz_v7000, false),
	API2("cudaEventRecordWithFlags", API_EVENT_RECORD_FLAGS, false,
	     cudaEventRecordWithFlags_v11010, cudaEventRecordWithFlags_ptsz_v11010, false),
	API("cudaEventQuery", "cudaEventQuery", API_EVENT_QUERY, true, false,
	    RT(cudaEventQuery_v3020), false),
	API2("cudaStreamWaitEvent", API_STREAM_WAIT_EVENT, false, cudaStreamWaitEvent_v3020,
	     cudaStreamWaitEvent_ptsz_v7000, false),
	/* driver rows (libcuda.so.1, CUDA_DOM_DRIVER) follow: issue 11 */
};
const int cuda_api_count = sizeof(cuda_apis) / sizeof(cuda_apis[0]);

/* cudaLaunchConfig_t (CUDA 12/13): dim3 gridDim @0, dim3 blockDim @12, size_t
 * dynamicSmemBytes @24, cudaStream_t stream @32, cudaLaunchAttribute *attrs @40,
 * unsigned int numAttrs @48; 56 bytes. */
#define LAUNCH_CONFIG_GRID	0
#define LAUNCH_CONFIG_BLOCK	12
#define LAUNCH_CONFIG_SMEM	24
#define LAUNCH_CONFIG_STREAM	32
#define LAUNCH_CONFIG_NATTRS	48
#define LAUNCH_CONFIG_SIZE	56

/* Stack slots copied for the launch signatures: [rsp] return address, [rsp+8] the 7th
 * integer argument (sharedMem), [rsp+16] the 8th (stream). */
#define LAUNCH_STACK_RET	0
#define LAUNCH_STACK_SHMEM	1
#define LAUNCH_STACK_STREAM	2

uint64_t cuda_api_cookie(int id, bool caller2)
{
	const struct cuda_api *api = &cuda_apis[id];
	uint64_t cookie = (uint64_t)id;
	uint64_t nstack = 0;

	switch (api->kind) {
	case API_LAUNCH:	/* may carry a CUDA 13 handle too: see cuda_launch */
	case API_LAUNCH_HANDLE:
		nstack = LAUNCH_STACK_STREAM + 1;
		if (caller2)
			cookie |= TP_COOKIE_CALLER2;
		break;
	case API_LAUNCH_EXC:
		nstack = LAUNCH_STACK_RET + 1;
		/* config is the first argument: deref field 1 + index 0 */
		cookie |= TP_COOKIE_MAKE_DEREF(1, LAUNCH_CONFIG_SIZE);
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
	return cookie | TP_COOKIE_MAKE_STACK(nstack);
}

_Static_assert(LAUNCH_CONFIG_SIZE <= TP_DEREF_MAX, "cudaLaunchConfig_t fits deref[]");

int cuda_api_decode_launch(const struct tp_rec_call *c, struct cuda_launch *l)
{
	const struct cuda_api *api;

	memset(l, 0, sizeof(*l));
	if (c->api >= (uint32_t)cuda_api_count)
		return -EINVAL;
	api = &cuda_apis[c->api];
	l->per_thread = api->per_thread;
	if (!(c->flags & TP_CALL_STACK_FAULT))
		l->ret_addr = c->stack[LAUNCH_STACK_RET];
	switch (api->kind) {
	case API_LAUNCH:
	case API_LAUNCH_HANDLE:
		/* (func rdi, dim3 grid rsi|rdx, dim3 block rcx|r8, args r9, shmem [rsp+8],
		 * stream [rsp+16]): a dim3 by value is split over two registers, x | y << 32
		 * in the first, z in the second */
		l->func_or_handle = c->args[0];
		l->by_handle = api->kind == API_LAUNCH_HANDLE;
		l->grid[0] = (uint32_t)c->args[1];
		l->grid[1] = (uint32_t)(c->args[1] >> 32);
		l->grid[2] = (uint32_t)c->args[2];
		l->block[0] = (uint32_t)c->args[3];
		l->block[1] = (uint32_t)(c->args[3] >> 32);
		l->block[2] = (uint32_t)c->args[4];
		l->args = c->args[5];
		l->shmem = c->stack[LAUNCH_STACK_SHMEM];
		l->stream = c->stack[LAUNCH_STACK_STREAM];
		if (!(c->flags & TP_CALL_STACK_FAULT) && !(c->flags & TP_CALL_CALLER2_FAULT))
			l->caller2 = c->caller2;
		return 0;
	case API_LAUNCH_EXC: {
		/* (const cudaLaunchConfig_t *config rdi, func rsi, args rdx) */
		const uint8_t *cfg = c->deref;

		l->func_or_handle = c->args[1];
		l->args = c->args[2];
		l->has_config = true;
		if (c->flags & TP_CALL_DEREF_FAULT) {
			l->config_unreadable = true;
			return 0;
		}
		memcpy(l->grid, cfg + LAUNCH_CONFIG_GRID, sizeof(l->grid));
		memcpy(l->block, cfg + LAUNCH_CONFIG_BLOCK, sizeof(l->block));
		memcpy(&l->shmem, cfg + LAUNCH_CONFIG_SMEM, sizeof(l->shmem));
		memcpy(&l->stream, cfg + LAUNCH_CONFIG_STREAM, sizeof(l->stream));
		memcpy(&l->config_attrs, cfg + LAUNCH_CONFIG_NATTRS, sizeof(l->config_attrs));
		return 0;
	}
	default:
		return -EINVAL;
	}
}

int cuda_api_decode_sync(const struct tp_rec_call *c, struct cuda_sync *s)
{
	memset(s, 0, sizeof(*s));
	if (c->api >= (uint32_t)cuda_api_count)
		return -EINVAL;
	switch (cuda_apis[c->api].kind) {
	case API_EVENT_RECORD:		/* (event rdi, stream rsi) */
	case API_EVENT_RECORD_FLAGS:	/* (event rdi, stream rsi, flags rdx) */
		s->event = c->args[0];
		s->stream = c->args[1];
		s->has_stream = true;
		if (cuda_apis[c->api].kind == API_EVENT_RECORD_FLAGS) {
			s->flags = (uint32_t)c->args[2];
			s->has_flags = true;
		}
		return 0;
	case API_EVENT_QUERY:		/* (event rdi) */
	case API_EVENT_SYNC:
		s->event = c->args[0];
		return 0;
	case API_STREAM_WAIT_EVENT:	/* (stream rdi, event rsi, flags rdx) */
		s->stream = c->args[0];
		s->has_stream = true;
		s->event = c->args[1];
		s->flags = (uint32_t)c->args[2];
		s->has_flags = true;
		return 0;
	case API_STREAM_SYNC:		/* (stream rdi) */
		s->stream = c->args[0];
		s->has_stream = true;
		/* the legacy default stream (0, cudaStreamLegacy) waits for all blocking streams */
		s->device_sync = c->args[0] == 0 || c->args[0] == 1;
		return 0;
	case API_DEVICE_SYNC:
		s->device_sync = true;
		return 0;
	default:
		return -EINVAL;
	}
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
