// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "cuda_api.h"
#include "cuda.h"
#include "nccl_api.h"
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

/* Driver rows: the exported symbol (cuda.h maps cuMemcpyHtoD to cuMemcpyHtoD_v2 and, under
 * CUDA_API_PER_THREAD_DEFAULT_STREAM, to cuMemcpyHtoD_v2_ptds), the event name users write
 * (without _v2, _ptds, _ptsz), CUPTI_DRIVER_TRACE_CBID_<symbol>. Every driver row copies
 * [rsp] at least: a driver call whose return address lies in a CUDA runtime is nested in a
 * runtime call and written once, as that call (decode.c). */
#define DRV(sym, nm, k, r, pt, w, ck, es, as) { .symbol = #sym, .name = nm, .kind = k, .ret = r, \
	.per_thread = pt, .domain = CUDA_DOM_DRIVER, .cbid = CUPTI_DRIVER_TRACE_CBID_##sym, \
	.gpu_work = w, .copy_kind = ck, .elem_size = es, .async = as }
/* a call and its per-thread default stream twin */
#define DRV_S(sym, nm, k, r, w, ck, es, as) DRV(sym, nm, k, r, false, w, ck, es, as), \
	DRV(sym##_ptsz, nm, k, r, true, w, ck, es, as)
#define DRV_D(sym, nm, k, r, w, ck, es, as) DRV(sym, nm, k, r, false, w, ck, es, as), \
	DRV(sym##_ptds, nm, k, r, true, w, ck, es, as)
#define DRV_COPY(sym, nm, ck) DRV_D(sym, nm, API_DRV_MEMCPY, true, true, ck, 0, false)
#define DRV_COPY_ASYNC(sym, nm, ck) DRV_S(sym, nm, API_DRV_MEMCPY, false, true, ck, 0, true)
#define DRV_SET(sym, nm, es) DRV_D(sym, nm, API_DRV_MEMSET, true, true, 0, es, false)
#define DRV_SET_ASYNC(sym, nm, es) DRV_S(sym, nm, API_DRV_MEMSET, false, true, 0, es, true)

#define DRIVER_ROWS \
	DRV_S(cuLaunchKernel, "cuLaunchKernel", API_DRV_LAUNCH, false, true, 0, 0, true), \
	DRV_S(cuLaunchKernelEx, "cuLaunchKernelEx", API_DRV_LAUNCH_EX, false, true, 0, 0, true), \
	DRV_S(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", API_DRV_LAUNCH, false, \
	      true, 0, 0, true), \
	DRV_S(cuGraphLaunch, "cuGraphLaunch", API_GRAPH_LAUNCH, false, true, 0, 0, true), \
	DRV_COPY(cuMemcpy, "cuMemcpy", CUDA_COPY_DEFAULT), \
	DRV_COPY_ASYNC(cuMemcpyAsync, "cuMemcpyAsync", CUDA_COPY_DEFAULT), \
	DRV_COPY(cuMemcpyHtoD_v2, "cuMemcpyHtoD", CUDA_COPY_HTOD), \
	DRV_COPY(cuMemcpyDtoH_v2, "cuMemcpyDtoH", CUDA_COPY_DTOH), \
	DRV_COPY(cuMemcpyDtoD_v2, "cuMemcpyDtoD", CUDA_COPY_DTOD), \
	DRV_COPY_ASYNC(cuMemcpyHtoDAsync_v2, "cuMemcpyHtoDAsync", CUDA_COPY_HTOD), \
	DRV_COPY_ASYNC(cuMemcpyDtoHAsync_v2, "cuMemcpyDtoHAsync", CUDA_COPY_DTOH), \
	DRV_COPY_ASYNC(cuMemcpyDtoDAsync_v2, "cuMemcpyDtoDAsync", CUDA_COPY_DTOD), \
	DRV_COPY(cuMemcpyPeer, "cuMemcpyPeer", CUDA_COPY_PTOP), \
	DRV_COPY_ASYNC(cuMemcpyPeerAsync, "cuMemcpyPeerAsync", CUDA_COPY_PTOP), \
	DRV_D(cuMemcpy2D_v2, "cuMemcpy2D", API_DRV_MEMCPY2D, true, true, 0, 0, false), \
	DRV_S(cuMemcpy2DAsync_v2, "cuMemcpy2DAsync", API_DRV_MEMCPY2D, false, true, 0, 0, true), \
	DRV_SET(cuMemsetD8_v2, "cuMemsetD8", 1), \
	DRV_SET(cuMemsetD16_v2, "cuMemsetD16", 2), \
	DRV_SET(cuMemsetD32_v2, "cuMemsetD32", 4), \
	DRV_SET_ASYNC(cuMemsetD8Async, "cuMemsetD8Async", 1), \
	DRV_SET_ASYNC(cuMemsetD16Async, "cuMemsetD16Async", 2), \
	DRV_SET_ASYNC(cuMemsetD32Async, "cuMemsetD32Async", 4), \
	DRV_S(cuStreamSynchronize, "cuStreamSynchronize", API_STREAM_SYNC, true, false, 0, 0, \
	      false), \
	DRV(cuCtxSynchronize, "cuCtxSynchronize", API_DEVICE_SYNC, true, false, false, 0, 0, \
	    false), \
	DRV(cuEventSynchronize, "cuEventSynchronize", API_EVENT_SYNC, true, false, false, 0, 0, \
	    false), \
	DRV_S(cuEventRecord, "cuEventRecord", API_EVENT_RECORD, false, false, 0, 0, false), \
	DRV_S(cuEventRecordWithFlags, "cuEventRecordWithFlags", API_EVENT_RECORD_FLAGS, false, \
	      false, 0, 0, false), \
	DRV(cuEventQuery, "cuEventQuery", API_EVENT_QUERY, true, false, false, 0, 0, false), \
	DRV_S(cuStreamWaitEvent, "cuStreamWaitEvent", API_STREAM_WAIT_EVENT, false, false, 0, 0, \
	      false), \
	DRV(cuModuleGetFunction, "cuModuleGetFunction", API_DRV_GET_FUNCTION, true, false, false, \
	    0, 0, false), \
	DRV(cuLibraryGetKernel, "cuLibraryGetKernel", API_DRV_GET_FUNCTION, true, false, false, \
	    0, 0, false), \
	DRV(cuKernelGetFunction, "cuKernelGetFunction", API_DRV_KERNEL_GET_FUNCTION, true, false, \
	    false, 0, 0, false)

/* Entry-only where a duration adds nothing (async enqueues); entry+return for calls that
 * block (syncs, synchronous copies) or whose return code carries state (event query). */
const struct cuda_api cuda_apis[] = {
	API2("cudaLaunchKernel", API_LAUNCH, false, cudaLaunchKernel_v7000,
	     cudaLaunchKernel_ptsz_v7000, true),
	API2("cudaLaunchKernelExC", API_LAUNCH_EXC, false, cudaLaunchKernelExC_v11060,
	     cudaLaunchKernelExC_ptsz_v11060, true),
	/* a tail jump into cudaLaunchKernel in the real runtime: CUPTI may report either cbid */
	{ .symbol = "__cudaLaunchKernel", .name = "__cudaLaunchKernel", .kind = API_LAUNCH_HANDLE,
	  .domain = CUDA_DOM_RUNTIME, .cbid = RT(__cudaLaunchKernel_v13000),
	  .cbid_alt = RT(cudaLaunchKernel_v7000), .gpu_work = true },
	{ .symbol = "__cudaLaunchKernel_ptsz", .name = "__cudaLaunchKernel", .kind = API_LAUNCH_HANDLE,
	  .per_thread = true, .domain = CUDA_DOM_RUNTIME, .cbid = RT(__cudaLaunchKernel_ptsz_v13000),
	  .cbid_alt = RT(cudaLaunchKernel_ptsz_v7000), .gpu_work = true },
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
	/* driver rows (libcuda.so.1): see below */
	DRIVER_ROWS
};
const int cuda_api_count = sizeof(cuda_apis) / sizeof(cuda_apis[0]);
/* api ids of both tables share the record's api field and the cookie's 16 bits */
_Static_assert(sizeof(cuda_apis) / sizeof(cuda_apis[0]) <= NCCL_API_BASE,
	       "CUDA api ids stay below the NCCL ones");

/* cudaLaunchConfig_t (CUDA 12/13): dim3 gridDim @0, dim3 blockDim @12, size_t
 * dynamicSmemBytes @24, cudaStream_t stream @32, cudaLaunchAttribute *attrs @40,
 * unsigned int numAttrs @48; 56 bytes. */
#define LAUNCH_CONFIG_GRID	0
#define LAUNCH_CONFIG_BLOCK	12
#define LAUNCH_CONFIG_SMEM	24
#define LAUNCH_CONFIG_STREAM	32
#define LAUNCH_CONFIG_NATTRS	48
#define LAUNCH_CONFIG_SIZE	56
/* CUlaunchConfig (cuda.h) has the same layout, with unsigned int sharedMemBytes @24 */
_Static_assert(LAUNCH_CONFIG_SIZE == TP_LAUNCH_CONFIG_SIZE &&
	       LAUNCH_CONFIG_NATTRS == TP_LAUNCH_CONFIG_NATTRS, "bpf/cuda.h agrees");

/* cuLaunchKernel's stack slots: blockDimZ, sharedMemBytes, hStream */
#define DRV_LAUNCH_STACK_BZ	1
#define DRV_LAUNCH_STACK_SMEM	2
#define DRV_LAUNCH_STACK_STREAM	3
_Static_assert(DRV_LAUNCH_STACK_STREAM < TP_STACK_MAX, "cuLaunchKernel's stream is copied");

/* CUDA_MEMCPY2D (cuda.h, 64-bit): srcXInBytes @0, srcY @8, srcMemoryType @16, srcHost @24,
 * srcDevice @32, srcArray @40, srcPitch @48, then the same seven for dst from @56,
 * WidthInBytes @112, Height @120; 128 bytes. */
#define MEMCPY2D_SRC		0
#define MEMCPY2D_DST		56
#define MEMCPY2D_MEMTYPE	16	/* from SRC/DST */
#define MEMCPY2D_HOST		24
#define MEMCPY2D_DEVICE		32
#define MEMCPY2D_ARRAY		40
#define MEMCPY2D_PITCH		48
#define MEMCPY2D_WIDTH		112
#define MEMCPY2D_HEIGHT		120
#define MEMCPY2D_SIZE		128
_Static_assert(MEMCPY2D_SIZE <= TP_DEREF_MAX, "CUDA_MEMCPY2D fits deref[]");

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
	case API_DRV_LAUNCH_EX:
		nstack = LAUNCH_STACK_RET + 1;
		/* config is the first argument: deref field 1 + index 0; then its attributes */
		cookie |= TP_COOKIE_MAKE_DEREF(1, LAUNCH_CONFIG_SIZE) | TP_COOKIE_DEREF_ATTRS;
		break;
	case API_DRV_LAUNCH:
		/* [rsp] return address, [rsp+8] blockDimZ, [rsp+16] sharedMemBytes,
		 * [rsp+24] hStream (kernelParams and extra further up are not copied) */
		nstack = DRV_LAUNCH_STACK_STREAM + 1;
		break;
	case API_DRV_MEMCPY2D:
		nstack = 1;
		cookie |= TP_COOKIE_MAKE_DEREF(1, MEMCPY2D_SIZE);
		break;
	case API_DRV_GET_FUNCTION:
		/* (out rdi, owner rsi, const char *name rdx): the name is read at entry, the
		 * handle at return */
		nstack = 1;
		cookie |= TP_COOKIE_SAVE_OUT | TP_COOKIE_MAKE_DEREF(3, 0) | TP_COOKIE_DEREF_STR;
		break;
	case API_DRV_KERNEL_GET_FUNCTION:
		nstack = 1;
		cookie |= TP_COOKIE_SAVE_OUT;
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
		/* driver calls: the return address tells a nested call from the application's */
		nstack = api->domain == CUDA_DOM_DRIVER ? 1 : 0;
		break;
	}
	return cookie | TP_COOKIE_MAKE_STACK(nstack);
}

_Static_assert(LAUNCH_CONFIG_SIZE <= TP_DEREF_MAX, "cudaLaunchConfig_t fits deref[]");
_Static_assert(sizeof(((struct cuda_launch *)0)->attrs) / sizeof(struct cuda_launch_attr) ==
	       TP_LAUNCH_ATTRS_MAX && 8 + 64 == TP_LAUNCH_ATTR_SIZE, "attrs[] holds what is copied");

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
	case API_DRV_LAUNCH:
		/* (CUfunction f rdi, gridDimX..Z rsi rdx rcx, blockDimX,Y r8 r9, blockDimZ [rsp+8],
		 * sharedMemBytes [rsp+16], hStream [rsp+24], kernelParams, extra): every
		 * dimension its own unsigned int */
		l->func_or_handle = c->args[0];
		l->by_handle = l->driver = true;
		l->grid[0] = (uint32_t)c->args[1];
		l->grid[1] = (uint32_t)c->args[2];
		l->grid[2] = (uint32_t)c->args[3];
		l->block[0] = (uint32_t)c->args[4];
		l->block[1] = (uint32_t)c->args[5];
		l->block[2] = (uint32_t)c->stack[DRV_LAUNCH_STACK_BZ];
		l->shmem = (uint32_t)c->stack[DRV_LAUNCH_STACK_SMEM];
		l->stream = c->stack[DRV_LAUNCH_STACK_STREAM];
		return 0;
	case API_LAUNCH_EXC:
	case API_DRV_LAUNCH_EX: {
		/* (const cudaLaunchConfig_t *config rdi, func rsi, args rdx);
		 * (const CUlaunchConfig *config rdi, CUfunction f rsi, kernelParams rdx, extra rcx) */
		const uint8_t *cfg = c->deref;
		uint32_t n;

		l->func_or_handle = c->args[1];
		l->args = c->args[2];
		l->has_config = true;
		l->driver = l->by_handle = api->kind == API_DRV_LAUNCH_EX;
		if (c->flags & TP_CALL_DEREF_FAULT) {
			l->config_unreadable = true;
			return 0;
		}
		memcpy(l->grid, cfg + LAUNCH_CONFIG_GRID, sizeof(l->grid));
		memcpy(l->block, cfg + LAUNCH_CONFIG_BLOCK, sizeof(l->block));
		if (l->driver) {
			uint32_t smem;

			memcpy(&smem, cfg + LAUNCH_CONFIG_SMEM, sizeof(smem));
			l->shmem = smem;
		} else {
			memcpy(&l->shmem, cfg + LAUNCH_CONFIG_SMEM, sizeof(l->shmem));
		}
		memcpy(&l->stream, cfg + LAUNCH_CONFIG_STREAM, sizeof(l->stream));
		memcpy(&l->config_attrs, cfg + LAUNCH_CONFIG_NATTRS, sizeof(l->config_attrs));
		n = l->config_attrs < TP_LAUNCH_ATTRS_MAX ? l->config_attrs : TP_LAUNCH_ATTRS_MAX;
		if (n && (c->flags & TP_CALL_ATTRS_FAULT)) {
			l->attrs_unreadable = true;
			return 0;
		}
		for (uint32_t i = 0; i < n; i++) {
			const uint8_t *a = cfg + TP_LAUNCH_CONFIG_SIZE + i * TP_LAUNCH_ATTR_SIZE;

			memcpy(&l->attrs[i].id, a, sizeof(l->attrs[i].id));
			memcpy(l->attrs[i].val, a + 8, sizeof(l->attrs[i].val));
		}
		l->nr_attrs = n;
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
	case CUDA_COPY_HTOH: return "HtoH";
	case CUDA_COPY_HTOD: return "HtoD";
	case CUDA_COPY_DTOH: return "DtoH";
	case CUDA_COPY_DTOD: return "DtoD";
	case CUDA_COPY_DEFAULT: return "Default";
	case CUDA_COPY_PTOP: return "PtoP";
	default: return "Unknown";
	}
}

bool cuda_api_is_driver(uint32_t id)
{
	return id < (uint32_t)cuda_api_count && cuda_apis[id].domain == CUDA_DOM_DRIVER;
}

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* CUmemorytype: 1 host, 2 device, 3 array, 4 unified */
static char memtype_letter(uint32_t t)
{
	return t == 1 ? 'H' : t == 2 ? 'D' : t == 3 ? 'A' : t == 4 ? 'U' : '?';
}

int cuda_api_decode_copy(const struct tp_rec_call *c, struct cuda_copy *cp)
{
	const struct cuda_api *api;

	memset(cp, 0, sizeof(*cp));
	if (c->api >= (uint32_t)cuda_api_count)
		return -EINVAL;
	api = &cuda_apis[c->api];
	switch (api->kind) {
	case API_DRV_MEMCPY:
		snprintf(cp->kind_str, sizeof(cp->kind_str), "%s",
			 cuda_memcpy_kind_str(api->copy_kind));
		if (api->copy_kind == CUDA_COPY_PTOP) {
			/* (dstDevice, dstContext, srcDevice, srcContext, ByteCount [, hStream r9]) */
			cp->dst = c->args[0];
			cp->dst_ctx = c->args[1];
			cp->src = c->args[2];
			cp->src_ctx = c->args[3];
			cp->bytes = c->args[4];
			cp->stream = api->async ? c->args[5] : 0;
		} else {
			/* (dst, src, ByteCount [, hStream rcx]) */
			cp->dst = c->args[0];
			cp->src = c->args[1];
			cp->bytes = c->args[2];
			cp->stream = api->async ? c->args[3] : 0;
		}
		cp->has_stream = api->async;
		return 0;
	case API_DRV_MEMCPY2D: {
		/* (const CUDA_MEMCPY2D *pCopy rdi [, hStream rsi]) */
		const uint8_t *m = c->deref;
		uint32_t st, dt;

		cp->is_2d = true;
		cp->stream = api->async ? c->args[1] : 0;
		cp->has_stream = api->async;
		if (c->flags & TP_CALL_DEREF_FAULT) {
			cp->unreadable = true;
			return 0;
		}
		memcpy(&st, m + MEMCPY2D_SRC + MEMCPY2D_MEMTYPE, sizeof(st));
		memcpy(&dt, m + MEMCPY2D_DST + MEMCPY2D_MEMTYPE, sizeof(dt));
		/* the pointer the memory type selects: host, device or array */
		cp->src = rd64(m + MEMCPY2D_SRC + (st == 1 ? MEMCPY2D_HOST : st == 3 ?
						  MEMCPY2D_ARRAY : MEMCPY2D_DEVICE));
		cp->dst = rd64(m + MEMCPY2D_DST + (dt == 1 ? MEMCPY2D_HOST : dt == 3 ?
						  MEMCPY2D_ARRAY : MEMCPY2D_DEVICE));
		cp->spitch = rd64(m + MEMCPY2D_SRC + MEMCPY2D_PITCH);
		cp->dpitch = rd64(m + MEMCPY2D_DST + MEMCPY2D_PITCH);
		cp->width = rd64(m + MEMCPY2D_WIDTH);
		cp->height = rd64(m + MEMCPY2D_HEIGHT);
		cp->bytes = cp->width * cp->height;
		/* the direction the memory types give: HtoD..., AtoD with an array, Default
		 * when either side is unified (resolved from the pointer by the driver) */
		if (st == 4 || dt == 4)
			snprintf(cp->kind_str, sizeof(cp->kind_str), "Default");
		else
			snprintf(cp->kind_str, sizeof(cp->kind_str), "%cto%c", memtype_letter(st),
				 memtype_letter(dt));
		return 0;
	}
	case API_DRV_MEMSET:
		/* cuMemsetD8/16/32[Async](CUdeviceptr dst, unsigned char/short/int value,
		 * size_t N [, hStream rcx]): N elements of elem_size bytes */
		cp->dst = c->args[0];
		cp->elem_size = api->elem_size;
		cp->value = api->elem_size == 1 ? (uint8_t)c->args[1] :
			    api->elem_size == 2 ? (uint16_t)c->args[1] : (uint32_t)c->args[1];
		cp->elements = c->args[2];
		cp->bytes = cp->elements * api->elem_size;
		cp->stream = api->async ? c->args[3] : 0;
		cp->has_stream = api->async;
		return 0;
	default:
		return -EINVAL;
	}
}

const char *cuda_launch_attr_name(uint32_t id)
{
	switch (id) {
	case 0: return "ignore";
	case 1: return "access policy window";
	case 2: return "cooperative";
	case 3: return "synchronization policy";
	case 4: return "cluster dimension";
	case 5: return "cluster scheduling policy preference";
	case 6: return "programmatic stream serialization";
	case 7: return "programmatic event";
	case 8: return "priority";
	case 9: return "mem sync domain map";
	case 10: return "mem sync domain";
	case 11: return "preferred cluster dimension";
	case 12: return "launch completion event";
	case 13: return "device updatable kernel node";
	case 14: return "preferred shared memory carveout";
	case 16: return "nvlink util centric scheduling";
	default: return NULL;
	}
}
