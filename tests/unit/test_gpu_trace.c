// SPDX-License-Identifier: MIT
/* gpu_trace: agent records -> Kineto events, read back with cJSON and checked field by field. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include "check.h"
#include "gpu.h"
#include "gpu_trace.h"
#include "trace_json.h"

#define BASE 1000000000ULL

static cJSON *read_json(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;
	cJSON *j;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = calloc(1, n + 1);
	if (fread(buf, 1, n, f) != (size_t)n)
		n = 0;
	fclose(f);
	j = cJSON_Parse(buf);
	free(buf);
	return j;
}

/* i-th event with this ph and name (NULL: any name) */
static cJSON *find(cJSON *events, const char *ph, const char *name, int nth)
{
	cJSON *e;

	cJSON_ArrayForEach(e, events) {
		const char *p = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
		const char *nm = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));

		if (p && !strcmp(p, ph) && (!name || (nm && !strcmp(nm, name))) && nth-- == 0)
			return e;
	}
	return NULL;
}

static double num(cJSON *obj, const char *key)
{
	cJSON *v = cJSON_GetObjectItem(obj, key);

	return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static double arg(cJSON *e, const char *key)
{
	return num(cJSON_GetObjectItem(e, "args"), key);
}

int main(void)
{
	const char *path = UNIT_OUT_DIR "/gpu_trace.json";
	struct trace_json *tj = trace_json__open(path);
	struct agent_record k = { 0 }, m = { 0 }, s = { 0 }, api = { 0 }, cont = { 0 };
	cJSON *doc, *ev, *e, *grid;
	int n_meta = 0;

	CHECK(tj != NULL, "open %s", path);
	if (!tj)
		return check_done();
	trace_json__begin(tj, BASE, 0);

	k.type = AGENT_REC_KERNEL;
	k.start_ns = BASE + 1500;
	k.end_ns = BASE + 4000;
	k.device = 1, k.context = 7, k.stream = 13, k.correlation = 42;
	k.grid[0] = 64, k.grid[1] = 2, k.grid[2] = 1;
	k.block[0] = 256, k.block[1] = 1, k.block[2] = 1;
	k.registers = 32, k.static_shmem = 1024, k.dynamic_shmem = 4096;
	strcpy(k.name, "_Z5scalePffi");
	k.name_len = strlen(k.name);
	CHECK_U64(gpu_trace__record(tj, &k), 1);
	k.correlation = 43;	/* same track again: no second metadata */
	k.start_ns += 10000, k.end_ns += 10000;
	gpu_trace__record(tj, &k);

	m.type = AGENT_REC_MEMCPY;
	m.start_ns = BASE + 20000;
	m.end_ns = BASE + 22000;	/* 4000 bytes in 2000 ns = 2 GB/s */
	m.device = 1, m.context = 7, m.stream = 14, m.correlation = 44;
	m.copy_kind = 1, m.src_kind = 2, m.dst_kind = 3, m.bytes = 4000;
	gpu_trace__record(tj, &m);

	s.type = AGENT_REC_SYNC;	/* no device in CUPTI sync records: learnt from context 7 */
	s.start_ns = BASE + 30000, s.end_ns = BASE + 31000;
	s.context = 7, s.stream = 14, s.correlation = 45, s.cbid = 2;
	gpu_trace__record(tj, &s);

	api.type = AGENT_REC_RUNTIME_API;
	api.cbid = 211, api.tid = 777, api.correlation = 42;
	api.start_ns = BASE + 1000, api.end_ns = BASE + 1200;
	CHECK_U64(gpu_trace__record(tj, &api), 0);	/* host side: not a GPU event */
	CHECK_U64(gpu_trace__api(tj, &api, 555), 1);
	cont.type = AGENT_REC_KERNEL_NAME;
	CHECK_U64(gpu_trace__record(tj, &cont), 0);

	gpu_trace__flow(tj, 42, 555, 777, BASE + 1000, 1, 13, BASE + 1500);
	CHECK(trace_json__close(tj) == 0, "close");

	doc = read_json(path);
	CHECK(doc != NULL, "trace parses as JSON");
	if (!doc)
		return check_done();
	ev = cJSON_GetObjectItem(doc, "traceEvents");

	e = find(ev, "X", "scale(float*, float, int)", 0);
	CHECK(e != NULL, "demangled kernel event");
	if (e) {
		CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(e, "cat")), "kernel");
		CHECK(num(e, "pid") == 1 && num(e, "tid") == 13, "pid = device, tid = stream");
		CHECK(num(e, "ts") == 1.5 && num(e, "dur") == 2.5, "ts %.3f dur %.3f", num(e, "ts"),
		      num(e, "dur"));
		CHECK(arg(e, "device") == 1 && arg(e, "stream") == 13 && arg(e, "correlation") == 42,
		      "device/stream/correlation args");
		CHECK(arg(e, "registers per thread") == 32 && arg(e, "shared memory") == 5120,
		      "registers, static + dynamic shared memory");
		grid = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "grid");
		CHECK(cJSON_GetArraySize(grid) == 3 && cJSON_GetArrayItem(grid, 1)->valueint == 2,
		      "grid [64, 2, 1]");
	}
	CHECK(find(ev, "X", "scale(float*, float, int)", 1) != NULL, "second kernel");
	e = find(ev, "X", "Memcpy HtoD (Pinned -> Device)", 0);
	CHECK(e != NULL, "memcpy named like Kineto");
	if (e) {
		CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(e, "cat")), "gpu_memcpy");
		CHECK(arg(e, "bytes") == 4000 && arg(e, "memory bandwidth (GB/s)") == 2.0,
		      "bytes and bandwidth");
		CHECK(num(e, "tid") == 14, "memcpy stream");
	}
	e = find(ev, "X", "Stream Wait Event", 0);
	CHECK(e != NULL && num(e, "pid") == 1 && num(e, "tid") == 14, "sync on device of its context");
	e = find(ev, "X", "cudaLaunchKernel", 0);
	CHECK(e != NULL && num(e, "pid") == 555 && num(e, "tid") == 777, "runtime API on the host thread");
	CHECK_STR(e ? cJSON_GetStringValue(cJSON_GetObjectItem(e, "cat")) : NULL, "cuda_runtime");

	e = find(ev, "M", "process_name", 0);
	CHECK(e && num(e, "pid") == 1, "process_name for device 1");
	CHECK_STR(e ? cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "name")) : NULL,
		  "GPU 1");
	e = find(ev, "M", "process_sort_index", 0);
	CHECK(e && arg(e, "sort_index") == GPU_TRACE_SORT_BASE + 1, "sort index 5000001");
	cJSON_ArrayForEach(e, ev)
		if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "name")), "thread_name"))
			n_meta++;
	CHECK(n_meta == 2, "one thread_name per stream (13, 14), got %d", n_meta);
	e = find(ev, "M", "thread_name", 0);
	CHECK_STR(e ? cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "name")) : NULL,
		  "stream 13");

	e = find(ev, "s", "ac2g", 0);
	CHECK(e && num(e, "id") == 42 && num(e, "pid") == 555 && num(e, "tid") == 777 && num(e, "ts") == 1.0,
	      "flow start on the launching thread");
	CHECK_STR(e ? cJSON_GetStringValue(cJSON_GetObjectItem(e, "cat")) : NULL, "ac2g");
	e = find(ev, "f", "ac2g", 0);
	CHECK(e && num(e, "id") == 42 && num(e, "pid") == 1 && num(e, "tid") == 13 && num(e, "ts") == 1.5,
	      "flow end on the kernel's stream");
	CHECK_STR(e ? cJSON_GetStringValue(cJSON_GetObjectItem(e, "bp")) : NULL, "e");

	CHECK_STR(gpu_trace__copy_kind(10), "PtoP");
	CHECK_STR(gpu_trace__mem_kind(1), "Pageable");
	CHECK_STR(gpu_trace__sync_name(4), "Context Sync");
	CHECK(gpu_trace__runtime_name(99999) == NULL, "unknown cbid");
	cJSON_Delete(doc);
	return check_done();
}
