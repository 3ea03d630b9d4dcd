// SPDX-License-Identifier: MIT
/* Tier 1: the decoder and trace writer fed with synthetic ring records as bpf/cuda.bpf.c
 * emits them (x86-64 SysV register/stack layout), the trace read back with cJSON: exact
 * dim3 split, stack arguments, memcpy kinds, return codes, unfinished calls, NCCL decoding,
 * kernel names resolved against this very binary, gzip output. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>
#include <cjson/cJSON.h>
#include "api_id.h"
#include "check.h"
#include "cuda.h"
#include "cuda_api.h"
#include "decode.h"
#include "elfsym.h"
#include "nccl_api.h"
#include "target.h"
#include "trace_json.h"
#include "session.h"
#include "core_sinks.h"

__attribute__((noinline)) void kernel_stub_for_test(float *p, int n)
{
	__asm__ volatile("" ::"r"(p), "r"(n));
}

static int pid;
static uint64_t ts = 5000000;

static void call(struct decoder *d, const char *sym, const uint64_t a[6], const uint64_t st[4],
		 int tid)
{
	struct tp_rec_call c = { .type = TP_REC_CALL, .pid = pid, .tid = tid, .ts = ts += 1000 };

	c.api = api_id(sym);
	memcpy(c.args, a, sizeof(c.args));
	if (st)
		memcpy(c.stack, st, sizeof(c.stack));
	/* short records (no deref) as the probe sends them */
	test_decoder_ring_cb(d, &c, TP_REC_CALL_SHORT_SIZE);
}

static void ret(struct decoder *d, const char *sym, int64_t rc, int tid)
{
	struct tp_rec_ret r = { .type = TP_REC_RET, .pid = pid, .tid = tid, .ts = ts += 2500 };

	r.api = api_id(sym);
	r.rc = (uint64_t)rc;
	test_decoder_ring_cb(d, &r, sizeof(r));
}

/* The launch ABI decoder (cuda_api.c) on its own: what each signature's record holds. */
static void test_launch_abi(void)
{
	struct tp_rec_call c = { .type = TP_REC_CALL };
	struct cuda_launch l;
	struct cuda_sync sy;
	uint64_t cookie;

	c.api = api_id("cudaLaunchKernel_ptsz");
	c.args[0] = 0x401234;
	c.args[1] = 4 | 5ULL << 32;
	c.args[2] = 6;
	c.args[3] = 128;
	c.args[4] = 1;
	c.args[5] = 0x7ffd0000;
	c.stack[0] = 0x401300;
	c.stack[1] = 512;
	c.stack[2] = 2;
	c.caller2 = 0x401400;
	CHECK(cuda_api_decode_launch(&c, &l) == 0, "launch decodes");
	CHECK(l.per_thread && !l.by_handle && !l.has_config, "_ptsz: per-thread, function");
	CHECK(l.grid[0] == 4 && l.grid[1] == 5 && l.grid[2] == 6 && l.block[0] == 128 &&
	      l.block[1] == 0 && l.block[2] == 1, "dim3 over two registers each");
	CHECK(l.shmem == 512 && l.stream == 2 && l.args == 0x7ffd0000, "stack slots, args");
	CHECK(l.ret_addr == 0x401300 && l.caller2 == 0x401400, "return addresses");
	c.flags = TP_CALL_CALLER2_FAULT;
	cuda_api_decode_launch(&c, &l);
	CHECK(l.ret_addr == 0x401300 && l.caller2 == 0, "an unreadable caller is 0");
	c.flags = TP_CALL_STACK_FAULT;
	cuda_api_decode_launch(&c, &l);
	CHECK(l.ret_addr == 0 && l.caller2 == 0, "an unreadable stack names no caller");
	c.api = api_id("__cudaLaunchKernel");
	cuda_api_decode_launch(&c, &l);
	CHECK(l.by_handle && !l.per_thread, "__cudaLaunchKernel passes a handle");
	c.api = api_id("cudaLaunchKernelExC");
	c.flags = TP_CALL_DEREF_FAULT;
	cuda_api_decode_launch(&c, &l);
	CHECK(l.has_config && l.config_unreadable && l.grid[0] == 0 && l.func_or_handle == (4 | 5ULL << 32),
	      "ExC: function in rsi, config unreadable");
	cookie = cuda_api_cookie(c.api, false);
	CHECK(TP_COOKIE_DEREF_ARG(cookie) == 1 && TP_COOKIE_DEREF_LEN(cookie) == 56 &&
	      TP_COOKIE_STACK(cookie) == 1, "ExC cookie: copy *rdi, 56 bytes, the return address");
	cookie = cuda_api_cookie(api_id("cudaLaunchKernel"), true);
	CHECK(TP_COOKIE_STACK(cookie) == 3 && (cookie & TP_COOKIE_CALLER2), "launch cookie");
	c.api = api_id("cudaMemcpy");
	CHECK(cuda_api_decode_launch(&c, &l) == -EINVAL, "not a launch");

	memset(&c, 0, sizeof(c));
	c.api = api_id("cudaEventRecordWithFlags");
	c.args[0] = 0xe1;
	c.args[1] = 0x5100;
	CHECK(cuda_api_decode_sync(&c, &sy) == 0 && sy.event == 0xe1 && sy.stream == 0x5100 &&
	      sy.has_stream && !sy.device_sync, "event record");
	c.api = api_id("cudaStreamSynchronize");
	c.args[0] = 1;	/* cudaStreamLegacy */
	CHECK(cuda_api_decode_sync(&c, &sy) == 0 && sy.device_sync, "legacy stream waits for all");
	c.api = api_id("cudaStreamWaitEvent");
	c.args[0] = 0x5200;
	c.args[1] = 0xe2;
	CHECK(cuda_api_decode_sync(&c, &sy) == 0 && sy.stream == 0x5200 && sy.event == 0xe2,
	      "stream wait event");
	c.api = api_id("cudaMemset");
	CHECK(cuda_api_decode_sync(&c, &sy) == -EINVAL, "not a sync");
}

/* The trace writer takes its drop counts from the calls core. */
static void test_decoder_counts(const char *path)
{
	struct target_probes probes = {};
	struct trace_json *tj = trace_json__open(path);
	struct decoder *d;
	uint32_t junk = 77;

	trace_json__begin(tj, 0, 0);
	d = test_decoder_new(tj, NULL, &probes);
	for (int i = 0; i < 17; i++)
		call(d, "cudaStreamSynchronize", (uint64_t[6]){ 0x5100 }, NULL, pid);
	for (int i = 0; i < 17; i++)
		ret(d, "cudaStreamSynchronize", 0, pid);
	ret(d, "cudaStreamSynchronize", 0, pid);
	test_decoder_ring_cb(d, &junk, sizeof(junk));
	CHECK_U64(decoder__stats(d)->depth_overflows, 1);
	CHECK_U64(decoder__stats(d)->orphan_returns, 1);
	CHECK_U64(decoder__stats(d)->bad_records, 1);
	CHECK_U64(decoder__stats(d)->calls, 17);
	CHECK_U64(decoder__stats(d)->records, 35);
	test_decoder_free(d);
	trace_json__end_events(tj);
	CHECK(trace_json__close(tj) == 0, "close");
}

static cJSON *load(const char *path)
{
	gzFile f = gzopen(path, "rb");	/* reads plain files too */
	static char buf[1 << 20];
	int n;

	CHECK(f != NULL, "open %s", path);
	if (!f)
		return NULL;
	n = gzread(f, buf, sizeof(buf) - 1);
	gzclose(f);
	buf[n > 0 ? n : 0] = '\0';
	return cJSON_Parse(buf);
}

static cJSON *event(cJSON *trace, const char *name, int nth)
{
	cJSON *e;

	cJSON_ArrayForEach(e, cJSON_GetObjectItem(trace, "traceEvents")) {
		cJSON *n = cJSON_GetObjectItem(e, "name");

		if (cJSON_IsString(n) && !strcmp(n->valuestring, name) && nth-- == 0)
			return e;
	}
	return NULL;
}

static cJSON *arg(cJSON *e, const char *k)
{
	return e ? cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), k) : NULL;
}

static double num(cJSON *e, const char *k)
{
	cJSON *v = arg(e, k);

	return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static const char *str(cJSON *e, const char *k)
{
	cJSON *v = arg(e, k);

	return cJSON_IsString(v) ? v->valuestring : "(none)";
}

static bool dims(cJSON *e, const char *k, int x, int y, int z)
{
	cJSON *v = arg(e, k);

	return cJSON_GetArraySize(v) == 3 && cJSON_GetArrayItem(v, 0)->valueint == x &&
	       cJSON_GetArrayItem(v, 1)->valueint == y && cJSON_GetArrayItem(v, 2)->valueint == z;
}

static int run(const char *path)
{
	struct elfsym_cache *cache = elfsym_cache__new();
	struct target_probes probes = {};	/* no programs: resolve-only scan */
	struct trace_json *tj = trace_json__open(path);
	struct target *t = target__new(pid);
	struct decoder *d;
	cJSON *trace, *e;
	uint64_t a[6], st[4];

	CHECK(tj && t && cache, "setup");
	ts = 5000000;
	trace_json__begin(tj, 1000000, 1700000000000000000ULL);
	target__scan(t, cache, &probes);
	d = test_decoder_new(tj, cache, &probes);
	session__add_target(test_core(d), t);

	/* cudaLaunchKernel(stub, grid (70000,3,2), block (32,4,1), args, shmem 4096, stream 0x5100) */
	memcpy(a, (uint64_t[6]){ (uint64_t)(uintptr_t)kernel_stub_for_test,
				 70000 | (3ULL << 32), 2, 32 | (4ULL << 32), 1, 0x7ffd0000 }, sizeof(a));
	memcpy(st, (uint64_t[4]){ 0x401000, 4096, 0x5100, 0 }, sizeof(st));
	call(d, "cudaLaunchKernel", a, st, pid);
	/* cudaMemcpy2DAsync(dst, dpitch 64, src, spitch 128, width 48, height 5, kind DtoH, stream) */
	memcpy(a, (uint64_t[6]){ 0x1000, 64, 0x2000, 128, 48, 5 }, sizeof(a));
	memcpy(st, (uint64_t[4]){ 0x401000, 2, 0x5200, 0 }, sizeof(st));
	call(d, "cudaMemcpy2DAsync", a, st, pid);
	/* cudaStreamSynchronize(0x5100) = 0, and one left unfinished on another thread */
	memcpy(a, (uint64_t[6]){ 0x5100 }, sizeof(a));
	call(d, "cudaStreamSynchronize", a, NULL, pid);
	ret(d, "cudaStreamSynchronize", 0, pid);
	call(d, "cudaDeviceSynchronize", (uint64_t[6]){ 0 }, NULL, pid + 100000);
	/* ncclReduce(send, recv, 7, float64, max, root 3, [comm], [stream]) */
	memcpy(a, (uint64_t[6]){ 0x3000, 0x4000, 7, 8, 2, 3 }, sizeof(a));
	memcpy(st, (uint64_t[4]){ 0x401000, 0xc0ffee, 0x5300, 0 }, sizeof(st));
	call(d, "ncclReduce", a, st, pid);
	ret(d, "ncclReduce", 0, pid);
	/* cudaLaunchKernelExC(&config, handle, args): config copied by the probe (deref[]), the
	 * function argument a CUDA 13 handle known from __cudaGetKernel */
	target__set_handle(t, 0xabc000, "exc_kernel(int)", "getkernel");
	{
		struct tp_rec_call c = { .type = TP_REC_CALL, .pid = pid, .tid = pid, .ts = ts += 1000 };
		uint32_t cfg[14] = { 9, 8, 7, 64, 2, 1 };	/* grid, block */
		uint64_t smem = 2048, stream = 0x5400;

		memcpy((char *)cfg + 24, &smem, 8);
		memcpy((char *)cfg + 32, &stream, 8);
		cfg[12] = 2;	/* numAttrs */
		c.api = api_id("cudaLaunchKernelExC");
		c.args[0] = 0x7ffd1000;
		c.args[1] = 0xabc000;
		memcpy(c.deref, cfg, sizeof(cfg));
		test_decoder_ring_cb(d, &c, TP_REC_CALL_FULL_SIZE);
	}
	/* a return without its entry (attached mid-call) */
	ret(d, "cudaEventSynchronize", 0, pid);
	decoder__finish(d, ts + 50000);
	CHECK(decoder__stats(d)->orphan_returns == 1, "orphan return counted");
	CHECK(decoder__stats(d)->unfinished == 1, "one unfinished");
	CHECK(decoder__stats(d)->launches_named == 2, "launches named");
	trace_json__end_events(tj);
	trace_json__top_raw(tj, "tptrace", "{\"version\": \"test\"}");
	CHECK(trace_json__close(tj) == 0, "close");
	test_decoder_free(d);
	target__free(t);
	elfsym_cache__free(cache);

	trace = load(path);
	CHECK(trace != NULL, "%s parses", path);
	if (!trace)
		return 1;
	e = event(trace, "cudaLaunchKernel", 0);
	CHECK_STR(str(e, "kernel"), "kernel_stub_for_test");
	CHECK_STR(str(e, "kernel source"), "symbol");
	CHECK(dims(e, "grid", 70000, 3, 2), "grid split over rsi/rdx");
	CHECK(dims(e, "block", 32, 4, 1), "block split over rcx/r8");
	CHECK(num(e, "shared memory") == 4096 && (str(e, "stream") && !strcmp(str(e, "stream"), "0x5100")), "stack args");
	CHECK(cJSON_GetObjectItem(e, "dur")->valuedouble == 0, "entry-only: no duration");
	CHECK(cJSON_GetObjectItem(e, "ts")->valuedouble == 4001.0, "ts in us from the base");
	CHECK_STR(cJSON_GetObjectItem(e, "cat")->valuestring, "cuda_runtime");
	e = event(trace, "cudaLaunchKernelExC", 0);
	CHECK_STR(str(e, "kernel"), "exc_kernel(int)");
	CHECK_STR(str(e, "kernel source"), "getkernel");
	CHECK_STR(str(e, "handle"), "0xabc000");
	CHECK(dims(e, "grid", 9, 8, 7) && dims(e, "block", 64, 2, 1), "config dims");
	CHECK(num(e, "shared memory") == 2048 && (str(e, "stream") && !strcmp(str(e, "stream"), "0x5400")), "config smem/stream");
	CHECK(num(e, "attributes") == 2, "attributes");
	e = event(trace, "cudaMemcpy2DAsync", 0);
	CHECK(num(e, "bytes") == 240 && num(e, "width") == 48 && num(e, "height") == 5, "2D");
	CHECK_STR(str(e, "kind"), "DtoH");
	CHECK((str(e, "stream") && !strcmp(str(e, "stream"), "0x5200")) && num(e, "dpitch") == 64 && num(e, "spitch") == 128, "2D args");
	e = event(trace, "cudaStreamSynchronize", 0);
	CHECK(num(e, "rc") == 0 && cJSON_GetObjectItem(e, "dur")->valuedouble == 2.5, "sync rc and dur");
	e = event(trace, "cudaDeviceSynchronize", 0);
	CHECK(cJSON_IsTrue(arg(e, "unfinished")), "unfinished marked");
	CHECK(cJSON_GetObjectItem(e, "dur")->valuedouble > 0, "unfinished runs to the end");
	e = event(trace, "ncclReduce", 0);
	CHECK_STR(cJSON_GetObjectItem(e, "cat")->valuestring, "nccl");
	CHECK(num(e, "count") == 7 && num(e, "root") == 3 && num(e, "bytes") == 56, "reduce args");
	CHECK_STR(str(e, "dtype"), "float64");
	CHECK_STR(str(e, "reduce_op"), "max");
	CHECK_STR(str(e, "comm"), "0xc0ffee");
	CHECK((str(e, "stream") && !strcmp(str(e, "stream"), "0x5300")), "reduce stream from [rsp+16]");
	CHECK(event(trace, "cudaEventSynchronize", 0) == NULL, "orphan return writes nothing");
	CHECK(event(trace, "thread_name", 0) != NULL, "threads named");
	cJSON_Delete(trace);
	return 0;
}

int main(void)
{
	char dir[] = "/tmp/tptrace-dectest.XXXXXX", path[128], buf[64];
	struct trace_json *tj;
	cJSON *j;

	pid = getpid();
	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	snprintf(path, sizeof(path), "%s/t.json", dir);
	run(path);
	snprintf(path, sizeof(path), "%s/t.json.gz", dir);
	run(path);
	{
		/* gzip for real: starts with the gzip magic */
		FILE *f = fopen(path, "rb");
		unsigned char m[2] = { 0 };

		CHECK(f && fread(m, 1, 2, f) == 2 && m[0] == 0x1f && m[1] == 0x8b, "gzip magic");
		if (f)
			fclose(f);
	}

	test_launch_abi();
	snprintf(path, sizeof(path), "%s/counts.json", dir);
	test_decoder_counts(path);

	/* names with quotes, backslashes and control characters stay valid JSON */
	snprintf(path, sizeof(path), "%s/esc.json", dir);
	tj = trace_json__open(path);
	trace_json__begin(tj, 0, 0);
	trace_json__thread_name(tj, 1, 2, "we\"ird\\name\n\x01");
	CHECK(trace_json__close(tj) == 0, "close");
	j = load(path);
	CHECK(j != NULL, "escaped JSON parses");
	CHECK_STR(str(event(j, "thread_name", 0), "name"), "we\"ird\\name\n\x01");
	cJSON_Delete(j);
	CHECK(json_escape(buf, sizeof(buf), "a\"b") == 6, "escape length");

	/* a write error is reported, never a silently short file */
	tj = trace_json__open("/dev/full");
	CHECK(tj != NULL, "open /dev/full");
	trace_json__begin(tj, 0, 0);
	for (int i = 0; i < 20000; i++) {
		trace_json__event(tj, "X", "c", "n", 1, 1, 0, 0);
		trace_json__event_end(tj);
	}
	CHECK(trace_json__close(tj) == -ENOSPC, "ENOSPC surfaces");
	snprintf(buf, sizeof(buf), "rm -rf %s", dir);
	system(buf);
	return check_done();
}
