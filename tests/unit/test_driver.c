// SPDX-License-Identifier: MIT
/* Tier 1: the CUDA driver API rows (libcuda.so.1) fed to the decoder and the flight recorder
 * as bpf/cuda.bpf.c emits them. Nesting is decided against this very process: the real
 * libcudart.so.13 is dlopen'ed (a shared runtime: all of it is the runtime) and this binary
 * defines a runtime marker and a libcudart_static_<hash> function (a static cudart, as
 * libnccl.so.2 carries one), so return addresses land where they would in a real process.
 * Also checks the launch config / attribute / CUDA_MEMCPY2D layouts against cuda.h. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>
#include <cjson/cJSON.h>
/* the toolkit's cuda.h by its full path: "cuda.h" is bpf/cuda.h here */
#include CUDA_DRIVER_H
#include <cuda_runtime_api.h>
#include "api_id.h"
#include "check.h"
#include "json_file.h"
#include "cuda.h"
#include "cuda_api.h"
#include "decode.h"
#include "elfsym.h"
#include "flightrec.h"
#include "nccl_api.h"
#include "target.h"
#include "trace_json.h"
#include "session.h"
#include "core_sinks.h"

/* what bpf/cuda.h and cuda_api.c assume of the toolkit's structs */
_Static_assert(sizeof(CUlaunchConfig) == TP_LAUNCH_CONFIG_SIZE, "CUlaunchConfig size");
_Static_assert(offsetof(CUlaunchConfig, sharedMemBytes) == 24, "sharedMemBytes @24");
_Static_assert(offsetof(CUlaunchConfig, hStream) == 32, "hStream @32");
_Static_assert(offsetof(CUlaunchConfig, attrs) == TP_LAUNCH_CONFIG_ATTRS, "attrs @40");
_Static_assert(offsetof(CUlaunchConfig, numAttrs) == TP_LAUNCH_CONFIG_NATTRS, "numAttrs @48");
_Static_assert(sizeof(cudaLaunchConfig_t) == TP_LAUNCH_CONFIG_SIZE, "cudaLaunchConfig_t size");
_Static_assert(offsetof(cudaLaunchConfig_t, attrs) == TP_LAUNCH_CONFIG_ATTRS, "rt attrs @40");
_Static_assert(offsetof(cudaLaunchConfig_t, numAttrs) == TP_LAUNCH_CONFIG_NATTRS, "rt n @48");
_Static_assert(sizeof(CUlaunchAttribute) == TP_LAUNCH_ATTR_SIZE, "CUlaunchAttribute size");
_Static_assert(offsetof(CUlaunchAttribute, value) == 8, "value @8");
_Static_assert(sizeof(cudaLaunchAttribute) == TP_LAUNCH_ATTR_SIZE, "cudaLaunchAttribute size");
_Static_assert(sizeof(CUDA_MEMCPY2D) == 128, "CUDA_MEMCPY2D size");
_Static_assert(offsetof(CUDA_MEMCPY2D, srcMemoryType) == 16 &&
	       offsetof(CUDA_MEMCPY2D, srcHost) == 24 && offsetof(CUDA_MEMCPY2D, srcDevice) == 32 &&
	       offsetof(CUDA_MEMCPY2D, srcPitch) == 48 && offsetof(CUDA_MEMCPY2D, dstMemoryType) == 72 &&
	       offsetof(CUDA_MEMCPY2D, dstDevice) == 88 && offsetof(CUDA_MEMCPY2D, dstPitch) == 104 &&
	       offsetof(CUDA_MEMCPY2D, WidthInBytes) == 112 && offsetof(CUDA_MEMCPY2D, Height) == 120,
	       "CUDA_MEMCPY2D fields");

/* this binary "holds a static cudart": a marker, and an internal function of it */
cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	__asm__ volatile("" ::"r"(stream));
	return cudaSuccess;
}

__attribute__((noinline, used)) int libcudart_static_0123456789abcdef(int x)
{
	__asm__ volatile("" : "+r"(x));
	return x * 3 + 1;
}

/* the application's own code */
__attribute__((noinline, used)) int app_code(int x)
{
	__asm__ volatile("" : "+r"(x));
	return x * 5 + 2;
}

static int pid;
static uint64_t ts = 5000000;
static uint64_t ret_app, ret_static, ret_shared;

static void call(void *sink, int (*cb)(void *, void *, size_t), const char *sym,
		 const uint64_t a[6], const uint64_t st[4], uint64_t ret_addr, const void *deref,
		 size_t dlen)
{
	struct tp_rec_call c = { .type = TP_REC_CALL, .pid = pid, .tid = pid, .ts = ts += 1000 };

	c.api = api_id(sym);
	if (a)
		memcpy(c.args, a, sizeof(c.args));
	if (st)
		memcpy(c.stack, st, sizeof(c.stack));
	c.stack[0] = ret_addr;
	if (deref)
		memcpy(c.deref, deref, dlen);
	cb(sink, &c, deref ? TP_REC_CALL_FULL_SIZE : TP_REC_CALL_SHORT_SIZE);
}

static void ret(void *sink, int (*cb)(void *, void *, size_t), const char *sym, int64_t rc,
		bool has_out, uint64_t out)
{
	struct tp_rec_ret r = { .type = TP_REC_RET, .pid = pid, .tid = pid, .ts = ts += 2500 };

	r.api = api_id(sym);
	r.rc = (uint64_t)rc;
	r.flags = has_out ? TP_RET_OUT_VALID : 0;
	r.out_val = out;
	cb(sink, &r, sizeof(r));
}

#define DCALL(sym, a, st, ra, dr, dl) call(d, test_decoder_ring_cb, sym, a, st, ra, dr, dl)
#define DRET(sym, rc, ho, out) ret(d, test_decoder_ring_cb, sym, rc, ho, out)

/* the nth host event called name */
static cJSON *event(cJSON *trace, const char *name, int nth)
{
	cJSON *e;

	cJSON_ArrayForEach(e, cJSON_GetObjectItem(trace, "traceEvents")) {
		cJSON *n = cJSON_GetObjectItem(e, "name");

		if (cJSON_IsString(n) && !strcmp(n->valuestring, name) && !nth--)
			return e;
	}
	return NULL;
}

static int count(cJSON *trace, const char *name)
{
	int n = 0;

	while (event(trace, name, n))
		n++;
	return n;
}

static cJSON *arg(cJSON *e, const char *k)
{
	return e ? cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), k) : NULL;
}

static double num(cJSON *e, const char *k)
{
	cJSON *v = arg(e, k);

	return cJSON_IsNumber(v) ? v->valuedouble : -12345;
}

static const char *str(cJSON *e, const char *k)
{
	cJSON *v = arg(e, k);

	return cJSON_IsString(v) ? v->valuestring : "(not a string)";
}

static bool dims(cJSON *e, const char *k, int x, int y, int z)
{
	cJSON *v = arg(e, k);

	return cJSON_GetArraySize(v) == 3 && cJSON_GetArrayItem(v, 0)->valueint == x &&
	       cJSON_GetArrayItem(v, 1)->valueint == y && cJSON_GetArrayItem(v, 2)->valueint == z;
}

static void test_decoder(const char *path, struct elfsym_cache *cache)
{
	struct target_probes probes = {};	/* no programs: resolve-only scan */
	struct trace_json *tj = trace_json__open(path);
	struct target *t = target__new(pid);
	const struct decoder_stats *stats;
	struct decoder *d;
	cJSON *trace, *e;
	uint64_t a[6], st[4];

	CHECK(tj && t, "setup");
	trace_json__begin(tj, 1000000, 1700000000000000000ULL);
	target__scan(t, cache, &probes);
	CHECK(target__addr_in_cudart(t, ret_shared), "shared libcudart: runtime code");
	CHECK(target__addr_in_cudart(t, ret_static), "libcudart_static_<hash>: runtime code");
	CHECK(!target__addr_in_cudart(t, ret_app), "the application's code is not the runtime");
	{
		/* the nested-call rule every sink of these records uses */
		struct tp_rec_call c = { .type = TP_REC_CALL, .pid = pid, .tid = pid };

		c.api = api_id("cuLaunchKernel");
		c.stack[0] = ret_shared;
		CHECK(target__call_nesting(t, &c) == CALL_IN_RUNTIME, "made by a shared runtime");
		c.stack[0] = ret_static;
		CHECK(target__call_nesting(t, &c) == CALL_IN_RUNTIME, "made by a static cudart");
		c.stack[0] = ret_app;
		CHECK(target__call_nesting(t, &c) == CALL_OWN, "made by the application");
		c.stack[0] = ret_shared;
		c.flags = TP_CALL_STACK_FAULT;
		CHECK(target__call_nesting(t, &c) == CALL_OWN, "return address unread: its own");
		c.flags = 0;
		c.api = api_id("cudaLaunchKernel");
		CHECK(target__call_nesting(t, &c) == CALL_OWN, "a runtime call is never nested");
	}
	d = test_decoder_new(tj, cache, &probes);
	session__add_target(test_core(d), t);

	/* cuLaunchKernel made by cudaLaunchKernel (shared runtime) and by a static cudart:
	 * nested, not written */
	memcpy(a, (uint64_t[6]){ 0xf00, 1, 1, 1, 32, 1 }, sizeof(a));
	memcpy(st, (uint64_t[4]){ 0, 1, 0, 0 }, sizeof(st));
	DCALL("cuLaunchKernel", a, st, ret_shared, NULL, 0);
	DCALL("cuLaunchKernel_ptsz", a, st, ret_static, NULL, 0);
	/* cuEventQuery nested in cudaEventQuery: has a return probe, still not written */
	DCALL("cuEventQuery", (uint64_t[6]){ 0xe1 }, NULL, ret_shared, NULL, 0);
	DRET("cuEventQuery", 0, false, 0);

	/* Triton: cuModuleGetFunction(&f, mod, "triton_poi_fused_add_0") -> 0xf00, then
	 * cuLaunchKernel(f, grid (7,6,5), block (128,2,3), shmem 12288, stream 0x5100) */
	DCALL("cuModuleGetFunction", ((uint64_t[6]){ 0x7ffd0000, 0x30d000 }), NULL, ret_app,
	      "triton_poi_fused_add_0", sizeof("triton_poi_fused_add_0"));
	DRET("cuModuleGetFunction", 0, true, 0xf00);
	memcpy(a, (uint64_t[6]){ 0xf00, 7, 6, 5, 128, 2 }, sizeof(a));
	memcpy(st, (uint64_t[4]){ 0, 3, 12288, 0x5100 }, sizeof(st));
	DCALL("cuLaunchKernel", a, st, ret_app, NULL, 0);

	/* cuLibraryGetKernel(&k, lib, "_Z5scalePfi") -> 0xc0c0; cuKernelGetFunction(&f, k) ->
	 * 0xf2f2; cuLaunchKernelEx(&config, f) with 3 of 4 attributes copied */
	DCALL("cuLibraryGetKernel", ((uint64_t[6]){ 0x7ffd0008, 0x11b000 }), NULL, ret_app,
	      "_Z5scalePfi", sizeof("_Z5scalePfi"));
	DRET("cuLibraryGetKernel", 0, true, 0xc0c0);
	DCALL("cuKernelGetFunction", ((uint64_t[6]){ 0x7ffd0010, 0xc0c0 }), NULL, ret_app, NULL, 0);
	DRET("cuKernelGetFunction", 0, true, 0xf2f2);
	{
		uint8_t buf[TP_DEREF_MAX] = { 0 };
		CUlaunchConfig cfg = { 9, 8, 7, 64, 4, 2, 49152, (CUstream)0x5200, (void *)0x7ffd2000, 4 };
		CUlaunchAttribute at[3];

		memset(at, 0, sizeof(at));
		at[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
		at[0].value.clusterDim.x = 2;
		at[0].value.clusterDim.y = 1;
		at[0].value.clusterDim.z = 3;
		at[1].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
		at[1].value.priority = -2;
		at[2].id = (CUlaunchAttributeID)77;	/* unknown to the table */
		at[2].value.priority = 0x1234;
		memcpy(buf, &cfg, sizeof(cfg));
		memcpy(buf + TP_LAUNCH_CONFIG_SIZE, at, sizeof(at));
		DCALL("cuLaunchKernelEx", ((uint64_t[6]){ 0x7ffd1000, 0xf2f2, 0x7ffd3000 }), NULL,
		      ret_app, buf, sizeof(buf));
	}
	/* the runtime's cudaLaunchKernelExC: same layout, size_t dynamicSmemBytes, same
	 * attribute decode */
	{
		uint8_t buf[TP_DEREF_MAX] = { 0 };
		cudaLaunchConfig_t cfg;
		cudaLaunchAttribute at[2];

		memset(&cfg, 0, sizeof(cfg));
		memset(at, 0, sizeof(at));
		cfg.gridDim = (dim3){ 3, 2, 1 };
		cfg.blockDim = (dim3){ 96, 1, 1 };
		cfg.dynamicSmemBytes = 0x100000005ULL;	/* above 32 bits: read as size_t */
		cfg.stream = (cudaStream_t)0x5600;
		cfg.attrs = (void *)0x7ffd5000;
		cfg.numAttrs = 2;
		at[0].id = cudaLaunchAttributeProgrammaticEvent;
		at[0].val.programmaticEvent.event = (cudaEvent_t)0xe9;
		at[0].val.programmaticEvent.flags = 1;
		at[0].val.programmaticEvent.triggerAtBlockStart = 1;
		at[1].id = cudaLaunchAttributeAccessPolicyWindow;
		at[1].val.accessPolicyWindow.base_ptr = (void *)0xab000;
		at[1].val.accessPolicyWindow.num_bytes = 4096;
		at[1].val.accessPolicyWindow.hitRatio = 0.5f;
		at[1].val.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
		at[1].val.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
		memcpy(buf, &cfg, sizeof(cfg));
		memcpy(buf + TP_LAUNCH_CONFIG_SIZE, at, sizeof(at));
		DCALL("cudaLaunchKernelExC", ((uint64_t[6]){ 0x7ffd1000, 0xabc0, 0x7ffd3000 }), NULL,
		      ret_app, buf, sizeof(buf));
	}
	/* configs the probe could not read: unknown, never 0 */
	{
		struct tp_rec_call c = { .type = TP_REC_CALL, .pid = pid, .tid = pid, .ts = ts += 1000,
					 .flags = TP_CALL_DEREF_FAULT };
		CUlaunchConfig cfg = { 1, 2, 3, 4, 5, 6, 7, (CUstream)0x5700, (void *)0x10, 2 };

		c.api = api_id("cuLaunchKernelEx_ptsz");
		c.args[1] = 0xf2f2;
		test_decoder_ring_cb(d, &c, TP_REC_CALL_FULL_SIZE);
		c.flags = TP_CALL_ATTRS_FAULT;
		c.ts = ts += 1000;
		memcpy(c.deref, &cfg, sizeof(cfg));
		test_decoder_ring_cb(d, &c, TP_REC_CALL_FULL_SIZE);
	}
	/* a handle nobody named */
	memcpy(a, (uint64_t[6]){ 0xbad0, 1, 1, 1, 1, 1 }, sizeof(a));
	memcpy(st, (uint64_t[4]){ 0, 1, 0, 2 }, sizeof(st));
	DCALL("cuLaunchCooperativeKernel", a, st, ret_app, NULL, 0);

	/* copies and memsets */
	DCALL("cuMemcpyHtoDAsync_v2_ptsz", ((uint64_t[6]){ 0xd000, 0x7000, 4097, 0x5300 }), NULL,
	      ret_app, NULL, 0);
	DCALL("cuMemcpyPeerAsync", ((uint64_t[6]){ 0xd100, 0xc1, 0xd200, 0xc2, 999, 0x5400 }),
	      NULL, ret_app, NULL, 0);
	DCALL("cuMemsetD16_v2", ((uint64_t[6]){ 0xd300, 0xbeef, 100 }), NULL, ret_app, NULL, 0);
	DRET("cuMemsetD16_v2", 34, false, 0);
	{
		CUDA_MEMCPY2D m;

		memset(&m, 0, sizeof(m));
		m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
		m.srcDevice = 0xd400;
		m.srcPitch = 256;
		m.dstMemoryType = CU_MEMORYTYPE_HOST;
		m.dstHost = (void *)0x7100;
		m.dstPitch = 128;
		m.WidthInBytes = 100;
		m.Height = 7;
		DCALL("cuMemcpy2DAsync_v2", ((uint64_t[6]){ 0x7ffd4000, 0x5500 }), NULL, ret_app,
		      &m, sizeof(m));
	}
	/* a nested copy is not written either */
	DCALL("cuMemcpyHtoD_v2", ((uint64_t[6]){ 0xd000, 0x7000, 16 }), NULL, ret_shared, NULL, 0);
	DRET("cuMemcpyHtoD_v2", 0, false, 0);

	decoder__finish(d, ts + 50000);
	stats = decoder__stats(d);
	CHECK(stats->nested_driver_calls == 4, "nested driver calls %llu",
	      (unsigned long long)stats->nested_driver_calls);
	CHECK(stats->launches == 6, "6 direct launches, nested ones not counted: %llu",
	      (unsigned long long)stats->launches);
	CHECK(stats->launches_named == 4, "4 named");
	trace_json__end_events(tj);
	CHECK(trace_json__close(tj) == 0, "close");
	test_decoder_free(d);
	target__free(t);

	trace = check_load_json(path);
	CHECK(trace != NULL, "%s parses", path);
	if (!trace)
		return;
	CHECK(count(trace, "cuLaunchKernel") == 1, "the direct cuLaunchKernel once, nested not");
	CHECK(count(trace, "cuEventQuery") == 0, "nested cuEventQuery not written");
	CHECK(count(trace, "cuMemcpyHtoD") == 0, "nested cuMemcpyHtoD not written");
	e = event(trace, "cuLaunchKernel", 0);
	CHECK_STR(cJSON_GetObjectItem(e, "cat")->valuestring, "cuda_driver");
	CHECK_STR(str(e, "kernel"), "triton_poi_fused_add_0");
	CHECK_STR(str(e, "kernel source"), "module");
	CHECK_STR(str(e, "handle"), "0xf00");
	CHECK(dims(e, "grid", 7, 6, 5) && dims(e, "block", 128, 2, 3), "driver launch dims");
	CHECK(num(e, "shared memory") == 12288 && (str(e, "stream") && !strcmp(str(e, "stream"), "0x5100")), "smem, stream");
	e = event(trace, "cuModuleGetFunction", 0);
	CHECK_STR(str(e, "name"), "triton_poi_fused_add_0");
	CHECK_STR(str(e, "function"), "0xf00");
	CHECK_STR(str(e, "module"), "0x30d000");
	e = event(trace, "cuLibraryGetKernel", 0);
	CHECK_STR(str(e, "name"), "scale(float*, int)");
	CHECK_STR(str(e, "kernel handle"), "0xc0c0");
	e = event(trace, "cuKernelGetFunction", 0);
	CHECK_STR(str(e, "kernel"), "scale(float*, int)");
	CHECK_STR(str(e, "function"), "0xf2f2");
	e = event(trace, "cuLaunchKernelEx", 0);
	CHECK_STR(str(e, "kernel"), "scale(float*, int)");
	CHECK_STR(str(e, "kernel source"), "library");
	CHECK(dims(e, "grid", 9, 8, 7) && dims(e, "block", 64, 4, 2), "Ex dims");
	CHECK(num(e, "shared memory") == 49152 && (str(e, "stream") && !strcmp(str(e, "stream"), "0x5200")), "Ex smem, stream");
	CHECK(num(e, "attributes") == 4 && num(e, "attributes not read") == 1, "4 attrs, 3 read");
	CHECK(dims(e, "cluster dimension", 2, 1, 3), "cluster dims");
	CHECK(num(e, "priority") == -2, "priority");
	CHECK_STR(str(e, "attribute 77"), "0x1234");
	e = event(trace, "cuLaunchKernelEx", 1);
	CHECK(cJSON_IsTrue(arg(e, "config unreadable")) && !arg(e, "grid") && !arg(e, "stream") &&
	      !arg(e, "attributes"), "unreadable config: no values");
	CHECK_STR(str(e, "kernel"), "scale(float*, int)");
	e = event(trace, "cuLaunchKernelEx", 2);
	CHECK(cJSON_IsTrue(arg(e, "attributes unreadable")) && num(e, "attributes") == 2 &&
	      dims(e, "grid", 1, 2, 3) && (str(e, "stream") && !strcmp(str(e, "stream"), "0x5700")), "unreadable attributes");
	e = event(trace, "cudaLaunchKernelExC", 0);
	CHECK(num(e, "shared memory") == (double)0x100000005ULL && (str(e, "stream") && !strcmp(str(e, "stream"), "0x5600")),
	      "runtime config: size_t smem, stream");
	CHECK(num(e, "attributes") == 2, "2 runtime attributes");
	CHECK_STR(str(e, "programmatic event"), "event=0xe9 flags=1 triggerAtBlockStart=1");
	CHECK_STR(str(e, "access policy window"),
		  "base=0xab000 bytes=4096 hitRatio=0.5 hitProp=2 missProp=1");
	e = event(trace, "cuLaunchCooperativeKernel", 0);
	CHECK_STR(str(e, "kernel"), "handle 0xbad0");
	CHECK_STR(str(e, "kernel source"), "unresolved");
	CHECK((str(e, "stream") && !strcmp(str(e, "stream"), "0x2")), "per-thread stream value");
	e = event(trace, "cuMemcpyHtoDAsync", 0);
	CHECK(num(e, "bytes") == 4097 && (str(e, "stream") && !strcmp(str(e, "stream"), "0x5300")), "HtoDAsync bytes, stream");
	CHECK_STR(str(e, "kind"), "HtoD");
	CHECK_STR(str(e, "dst"), "0xd000");
	CHECK_STR(str(e, "src"), "0x7000");
	CHECK(cJSON_IsTrue(arg(e, "per-thread stream")), "_ptsz");
	e = event(trace, "cuMemcpyPeerAsync", 0);
	CHECK(num(e, "bytes") == 999 && (str(e, "stream") && !strcmp(str(e, "stream"), "0x5400")), "peer bytes, stream");
	CHECK_STR(str(e, "kind"), "PtoP");
	CHECK_STR(str(e, "src"), "0xd200");
	CHECK_STR(str(e, "dst context"), "0xc1");
	CHECK_STR(str(e, "src context"), "0xc2");
	e = event(trace, "cuMemsetD16", 0);
	CHECK(num(e, "bytes") == 200 && num(e, "element size") == 2 && num(e, "value") == 0xbeef,
	      "memset D16: N x 2 bytes, value");
	CHECK(num(e, "rc") == 34, "rc");
	e = event(trace, "cuMemcpy2DAsync", 0);
	CHECK(num(e, "bytes") == 700 && num(e, "width") == 100 && num(e, "height") == 7, "2D size");
	CHECK(num(e, "dpitch") == 128 && num(e, "spitch") == 256 && (str(e, "stream") && !strcmp(str(e, "stream"), "0x5500")),
	      "2D pitches, stream");
	CHECK_STR(str(e, "kind"), "DtoH");
	CHECK_STR(str(e, "src"), "0xd400");
	CHECK_STR(str(e, "dst"), "0x7100");
	cJSON_Delete(trace);
}

#define FCALL(sym, a, ra) call(fr, test_fr_ring_cb, sym, a, NULL, ra, NULL, 0)
#define FRET(sym, rc) ret(fr, test_fr_ring_cb, sym, rc, false, 0)

/* the flight recorder learns GPU progress from the driver's event and sync calls, once */
static void test_flightrec(const char *dir, struct elfsym_cache *cache)
{
	struct flightrec_opts fo = { .ring_size = 8, .stall_timeout_ns = 5000000000ULL };
	struct target_probes probes = {};
	const uint64_t comm = 0xc0ffee00, stream = 0x5100, ev = 0xe1;
	struct flightrec *fr;
	struct target *t = target__new(pid);
	char path[512], host[256] = "";
	uint8_t id[128];
	cJSON *dump, *entries;

	fo.dump_dir = dir;
	fr = test_fr_new(&fo);
	CHECK(fr && t, "new");
	target__scan(t, cache, &probes);
	CHECK(flightrec__add_process(fr, t) == 0, "add");
	for (int i = 0; i < 128; i++)
		id[i] = (uint8_t)i;
	call(fr, test_fr_ring_cb, "ncclCommInitRank", (uint64_t[6]){ 0x7ffd0000, 4, 2 }, NULL,
	     ret_app, id, sizeof(id));
	ret(fr, test_fr_ring_cb, "ncclCommInitRank", 0, true, comm);
	call(fr, test_fr_ring_cb, "ncclAllReduce",
	     (uint64_t[6]){ 0x1000, 0x2000, 1024, 7, 0, comm }, (uint64_t[4]){ 0, stream }, ret_app,
	     NULL, 0);
	FRET("ncclAllReduce", 0);
	FCALL("cuEventRecord", ((uint64_t[6]){ ev, stream }), ret_app);
	call(fr, test_fr_ring_cb, "ncclAllGather",
	     (uint64_t[6]){ 0x3000, 0x4000, 16, 2, comm, stream }, NULL, ret_app, NULL, 0);
	FRET("ncclAllGather", 0);
	/* a device-wide sync made inside a static cudart (NCCL's own): not the application's
	 * progress, must not complete the all_gather */
	FCALL("cuCtxSynchronize", NULL, ret_static);
	FRET("cuCtxSynchronize", 0);
	/* the application polls the event through the driver: not ready, then ready */
	FCALL("cuEventQuery", ((uint64_t[6]){ ev }), ret_app);
	FRET("cuEventQuery", 600);
	FCALL("cuEventQuery", ((uint64_t[6]){ ev }), ret_app);
	FRET("cuEventQuery", 0);

	CHECK(flightrec__dump_all(fr, "signal") == 1, "one dump");
	gethostname(host, sizeof(host) - 1);
	flightrec__dump_path(path, sizeof(path), dir, host, pid);
	dump = check_load_json(path);
	if (!dump)
		return;
	entries = cJSON_GetObjectItem(dump, "entries");
	CHECK(cJSON_GetArraySize(entries) == 2, "2 entries");
	CHECK_STR(cJSON_GetObjectItem(cJSON_GetArrayItem(entries, 0), "state")->valuestring,
		  "completed");
	CHECK(strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(entries, 1), "state")->valuestring,
		     "completed"), "all_gather after the event: not completed");
	cJSON_Delete(dump);
	test_fr_free(fr);
	target__free(t);
}

int main(void)
{
	char dir[] = "/tmp/tptrace-drvtest.XXXXXX", path[160], cmd[200];
	struct elfsym_cache *cache = elfsym_cache__new();
	void *h = dlopen(CUDART_PATH, RTLD_NOW | RTLD_LOCAL);
	void *fn = h ? dlsym(h, "cudaLaunchKernel") : NULL;

	pid = getpid();
	CHECK(fn != NULL, "dlopen %s: %s", CUDART_PATH, dlerror());
	CHECK(mkdtemp(dir) != NULL && cache, "setup");
	if (!fn)
		return check_done();
	/* return addresses a few bytes into each function, as a call inside it leaves */
	ret_shared = (uint64_t)(uintptr_t)fn + 8;
	ret_static = (uint64_t)(uintptr_t)libcudart_static_0123456789abcdef + 4;
	ret_app = (uint64_t)(uintptr_t)app_code + 4;
	snprintf(path, sizeof(path), "%s/drv.json", dir);
	test_decoder(path, cache);
	test_flightrec(dir, cache);
	elfsym_cache__free(cache);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	system(cmd);
	return check_done();
}
