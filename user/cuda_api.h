/* SPDX-License-Identifier: MIT */
/* The CUDA runtime entry points tptrace probes, and how each one's arguments sit in the
 * registers and stack at function entry (x86-64 SysV). The table index is the api id carried
 * in the attach cookie and in every record. This file is the one place that knows the launch
 * ABI: what the attach cookie asks the probe to copy (cuda_api_cookie) and how the copied
 * registers, stack slots and structs read back (cuda_api_decode_launch, _decode_sync). */
#ifndef TPTRACE_CUDA_API_H
#define TPTRACE_CUDA_API_H

#include <stdbool.h>
#include <stdint.h>

struct tp_rec_call;

enum cuda_api_kind {
	API_LAUNCH,		/* (func rdi, grid rsi|rdx, block rcx|r8, args r9, shmem [rsp+8], stream [rsp+16]) */
	API_LAUNCH_HANDLE,	/* CUDA 13 __cudaLaunchKernel: same, with a cudaKernel_t handle in rdi */
	API_LAUNCH_EXC,		/* (const cudaLaunchConfig_t *config rdi, func rsi, args rdx) */
	API_GET_KERNEL,		/* __cudaGetKernel(cudaKernel_t *out rdi, const void *stub rsi) */
	API_GRAPH_LAUNCH,	/* (cudaGraphExec_t rdi, stream rsi) */
	API_MEMCPY,		/* (dst, src, count, kind) */
	API_MEMCPY_ASYNC,	/* (dst, src, count, kind, stream r8) */
	API_MEMCPY2D,		/* (dst, dpitch, src, spitch, width r8, height r9, kind [rsp+8]) */
	API_MEMCPY2D_ASYNC,	/* ... kind [rsp+8], stream [rsp+16] */
	API_MEMSET,		/* (ptr, int value, count) */
	API_MEMSET_ASYNC,	/* (ptr, int value, count, stream rcx) */
	API_STREAM_SYNC,	/* (stream) */
	API_DEVICE_SYNC,	/* () */
	API_EVENT_SYNC,		/* (event) */
	API_EVENT_RECORD,	/* (event, stream) */
	API_EVENT_RECORD_FLAGS,	/* (event, stream, flags) */
	API_EVENT_QUERY,	/* (event) */
	API_STREAM_WAIT_EVENT,	/* (stream, event, flags) */
	/* driver API (libcuda.so.1). Syncs, events and graph launches reuse the kinds above:
	 * their arguments sit where the runtime's do (CU_STREAM_LEGACY 1, _PER_THREAD 2). */
	API_DRV_LAUNCH,		/* cuLaunchKernel/cuLaunchCooperativeKernel (f rdi, gx..bx,by rsi..r9,
				 * bz [rsp+8], shmem [rsp+16], stream [rsp+24], params, extra) */
	API_DRV_LAUNCH_EX,	/* cuLaunchKernelEx (const CUlaunchConfig *rdi, f rsi, params, extra) */
	API_DRV_MEMCPY,		/* cuMemcpy*: 1D copies; direction from the row (copy_kind) */
	API_DRV_MEMSET,		/* cuMemsetD8/16/32: (dst, value, N elements [, stream]) */
	API_DRV_GET_FUNCTION,	/* cuModuleGetFunction/cuLibraryGetKernel (out rdi, owner, name) */
	API_DRV_KERNEL_GET_FUNCTION,	/* cuKernelGetFunction (CUfunction *out, CUkernel) */
};

/* Which CUPTI callback domain a row belongs to: CUPTI writes RUNTIME activity records for
 * the first and DRIVER records for the second, each with the row's cbid. */
enum cuda_api_domain {
	CUDA_DOM_RUNTIME = 0,	/* libcudart (shared or static) */
	CUDA_DOM_DRIVER = 1,	/* libcuda.so.1 */
};

struct cuda_api {
	const char *symbol;	/* the exact symbol probed */
	const char *name;	/* event name: the symbol without _ptsz/_ptds */
	enum cuda_api_kind kind;
	bool ret;		/* return probe: its duration or return code matters */
	bool per_thread;	/* _ptsz/_ptds: the per-thread default stream variant */
	enum cuda_api_domain domain;
	/* CUPTI callback id of exactly this symbol in its domain (cupti_runtime_cbid.h,
	 * cupti_driver_cbid.h): what joins a call to its CUPTI API record. 0: none. */
	uint32_t cbid;
	/* the call puts GPU work (kernel, copy, memset, graph) on a stream; that work carries
	 * this call's CUPTI correlation id (unless the call is nested in another API call) */
	bool gpu_work;
};

extern const struct cuda_api cuda_apis[];
extern const int cuda_api_count;

/* Attach cookie for api id (see bpf/cuda.h). caller2: launches also copy the caller's return
 * address (for processes whose kernel stubs lack their __handle statics). */
uint64_t cuda_api_cookie(int id, bool caller2);
/* The symbols that mark an object as holding a CUDA runtime (shared or static). */
bool cuda_api_is_marker(const char *symbol);

/* A kernel launch, decoded from its entry record. */
struct cuda_launch {
	/* The first argument: a host function (the nvcc stub) or, since CUDA 13, a
	 * cudaKernel_t handle. by_handle: the signature says it is a handle
	 * (__cudaLaunchKernel); otherwise it may be either (cudaLaunchKernel takes both). */
	uint64_t func_or_handle;
	bool by_handle;
	uint32_t grid[3], block[3];
	uint64_t shmem;
	uint64_t stream;		/* cudaStream_t: 0 legacy, 1 cudaStreamLegacy, 2 per-thread */
	uint64_t args;			/* void **kernel arguments */
	bool per_thread;		/* _ptsz variant: the default stream is per thread */
	/* cudaLaunchKernelExC: the cudaLaunchConfig_t copied by the probe */
	bool has_config;
	bool config_unreadable;		/* the copy faulted: grid..stream above are 0 */
	uint32_t config_attrs;		/* numAttrs */
	/* return addresses for naming a kernel by the stub that called the launch:
	 * [rsp] and the caller's [rbp+8]; 0 when the probe could not read them */
	uint64_t ret_addr, caller2;
};

/* Fills *l from a launch entry record (API_LAUNCH, API_LAUNCH_HANDLE, API_LAUNCH_EXC).
 * -EINVAL when the record is not a launch. */
int cuda_api_decode_launch(const struct tp_rec_call *c, struct cuda_launch *l);

/* What a stream/event call says about stream order (the flight recorder's progress). */
struct cuda_sync {
	uint64_t event;			/* cudaEvent_t recorded, queried or waited on; 0 none */
	uint64_t stream;		/* the stream recorded on, synchronized or made to wait */
	bool has_stream;
	bool device_sync;		/* waits for all work: device sync, or a legacy default
					 * stream sync (it waits for every blocking stream) */
	bool has_flags;
	uint32_t flags;			/* EventRecordWithFlags, StreamWaitEvent */
};

/* Fills *s for API_EVENT_*, API_STREAM_SYNC, API_DEVICE_SYNC, API_STREAM_WAIT_EVENT;
 * -EINVAL for other apis. */
int cuda_api_decode_sync(const struct tp_rec_call *c, struct cuda_sync *s);

/* cudaMemcpyKind as Kineto spells it: HtoH, HtoD, DtoH, DtoD, Default. */
const char *cuda_memcpy_kind_str(uint64_t kind);

#endif
