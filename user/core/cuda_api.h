/* SPDX-License-Identifier: MIT */
/* The CUDA runtime and driver entry points tptrace probes, and how each one's arguments sit in the
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
	API_DRV_MEMCPY,		/* cuMemcpy*: 1D copies; direction from the row (copy_kind):
				 * (dst, src, bytes [, stream]), Peer: (dst, dctx, src, sctx, bytes
				 * [, stream r9]) */
	API_DRV_MEMCPY2D,	/* cuMemcpy2D_v2[Async] (const CUDA_MEMCPY2D *rdi [, stream rsi]) */
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
	/* the cbid of the function this one enters by a tail jump, which CUPTI may report
	 * instead (__cudaLaunchKernel -> cudaLaunchKernel); 0: none */
	uint32_t cbid_alt;
	/* the call puts GPU work (kernel, copy, memset, graph) on a stream; that work carries
	 * this call's CUPTI correlation id (unless the call is nested in another API call) */
	bool gpu_work;
	/* driver copies and memsets: what the function name says (enum cuda_copy_kind), the
	 * element size of cuMemsetD8/16/32 (1, 2, 4), and whether a stream argument follows */
	uint8_t copy_kind;
	uint8_t elem_size;
	bool async;
};

/* Copy directions as Kineto spells them; the values below DEFAULT are cudaMemcpyKind's. */
enum cuda_copy_kind {
	CUDA_COPY_HTOH = 0, CUDA_COPY_HTOD = 1, CUDA_COPY_DTOH = 2, CUDA_COPY_DTOD = 3,
	CUDA_COPY_DEFAULT = 4,	/* cudaMemcpyDefault, cuMemcpy: from the pointers (UVA) */
	CUDA_COPY_PTOP = 5,	/* cuMemcpyPeer: between the memories of two contexts */
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
	/* driver launch (cuLaunchKernel*): func_or_handle is a CUfunction (or a CUkernel cast
	 * to one), never a host function */
	bool driver;
	/* cudaLaunchKernelExC, cuLaunchKernelEx: the launch config copied by the probe */
	bool has_config;
	bool config_unreadable;		/* the copy faulted: grid..stream above are 0 */
	uint32_t config_attrs;		/* numAttrs */
	uint32_t nr_attrs;		/* attrs[] read (at most TP_LAUNCH_ATTRS_MAX) */
	bool attrs_unreadable;		/* numAttrs > 0 but the array could not be read */
	struct cuda_launch_attr {
		uint32_t id;		/* CUlaunchAttributeID == cudaLaunchAttributeID */
		uint8_t val[64];	/* the value union, raw */
	} attrs[3];
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

/* cudaMemcpyKind / enum cuda_copy_kind as Kineto spells it: HtoH, HtoD, DtoH, DtoD, Default,
 * PtoP. */
const char *cuda_memcpy_kind_str(uint64_t kind);

/* A driver copy (API_DRV_MEMCPY, API_DRV_MEMCPY2D) or memset (API_DRV_MEMSET). */
struct cuda_copy {
	uint64_t dst, src;
	uint64_t bytes;
	uint64_t stream;
	bool has_stream;
	char kind_str[8];		/* "HtoD", "DtoH", "PtoP", "Default", 2D: "AtoD"... */
	/* peer copies: the two contexts */
	uint64_t dst_ctx, src_ctx;
	/* 2D copies */
	bool is_2d, unreadable;		/* unreadable: the CUDA_MEMCPY2D copy faulted */
	uint64_t width, height, dpitch, spitch;
	/* memsets */
	uint32_t elem_size;		/* 1, 2 or 4 */
	uint64_t elements;
	uint32_t value;
};
int cuda_api_decode_copy(const struct tp_rec_call *c, struct cuda_copy *cp);

/* CUlaunchAttributeID name (CU_LAUNCH_ATTRIBUTE_X -> "x" in lower case words), NULL when
 * unknown to this table. */
const char *cuda_launch_attr_name(uint32_t id);

/* A row of libcuda.so.1 (CUDA_DOM_DRIVER). */
bool cuda_api_is_driver(uint32_t id);

#endif
