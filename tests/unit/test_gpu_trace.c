// SPDX-License-Identifier: MIT
/* gpu_trace: agent records -> Kineto events, read back with cJSON and checked field by field. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include "check.h"
#include "json_file.h"
#include "gpu.h"
#include "gpu_trace.h"
#include "trace_json.h"

#define BASE 1000000000ULL

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

static int count_named(cJSON *ev, const char *name)
{
	cJSON *e;
	int n = 0;

	cJSON_ArrayForEach(e, ev)
		n += !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "name")), name);
	return n;
}

/* Two traces written at once (interleaved): each has its own metadata and context map. */
static void two_traces(void)
{
	const char *paths[2] = { UNIT_OUT_DIR "/gpu_trace_a.json", UNIT_OUT_DIR "/gpu_trace_b.json" };
	struct agent_record k = { 0 }, s = { 0 };
	struct trace_json *tj[2];
	struct gpu_trace *gt[2];

	for (int i = 0; i < 2; i++) {
		tj[i] = trace_json__open(paths[i]);
		gt[i] = tj[i] ? gpu_trace__new(tj[i]) : NULL;
		CHECK(gt[i] != NULL, "open %s", paths[i]);
		if (!gt[i])
			return;
		trace_json__begin(tj[i], BASE, 0);
	}
	k.type = AGENT_REC_KERNEL;
	k.device = 2, k.context = 9, k.stream = 5;
	strcpy(k.name, "k");
	k.name_len = 1;
	gpu_trace__record(gt[0], 555, &k);
	gpu_trace__record(gt[1], 555, &k);
	gpu_trace__record(gt[0], 555, &k);	/* same track of trace a: no metadata again */
	s.type = AGENT_REC_SYNC;	/* context 9 was learnt by trace a, on device 2 */
	s.context = 9, s.stream = 5, s.cbid = 3;
	gpu_trace__record(gt[0], 555, &s);
	for (int i = 0; i < 2; i++) {
		cJSON *doc, *ev, *sync;

		CHECK(trace_json__close(tj[i]) == 0, "close %s", paths[i]);
		gpu_trace__free(gt[i]);
		doc = check_load_json(paths[i]);
		ev = cJSON_GetObjectItem(doc, "traceEvents");
		CHECK(count_named(ev, "process_name") == 1 && count_named(ev, "thread_name") == 1,
		      "trace %d: one process_name and one thread_name, got %d and %d", i,
		      count_named(ev, "process_name"), count_named(ev, "thread_name"));
		CHECK(count_named(ev, "k") == (i ? 1 : 2), "trace %d: its own kernels", i);
		sync = find(ev, "X", "Stream Sync", 0);
		CHECK(i ? !sync : sync && num(sync, "pid") == 2, "trace %d: sync on device 2", i);
		cJSON_Delete(doc);
	}
}

static const char *meta_of(cJSON *ev, const char *what, int pid, const char *key)
{
	cJSON *e;

	cJSON_ArrayForEach(e, ev) {
		const char *nm = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));

		if (nm && !strcmp(nm, what) && num(e, "pid") == pid)
			return cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"),
									   key));
	}
	return NULL;
}

/* Two processes on device 0 (the same correlation id 9 in both: each CUPTI counts its own),
 * one of them with a second context there: a track each, named apart, labelled with the
 * process; a sync finds its context's device in its own process; each arrow ends on its own
 * process's track. */
static void processes_and_contexts(void)
{
	const char *path = UNIT_OUT_DIR "/gpu_trace_procs.json";
	struct trace_json *tj = trace_json__open(path);
	struct gpu_trace *gt = tj ? gpu_trace__new(tj) : NULL;
	struct agent_record k = { 0 }, s = { 0 };
	cJSON *doc, *ev, *e;
	int seen[3] = { 0 };

	CHECK(gt != NULL, "open %s", path);
	if (!gt)
		return;
	trace_json__begin(tj, BASE, 0);
	CHECK(gpu_trace__set_process(gt, 100, "train") == 0 &&
	      gpu_trace__set_process(gt, 200, "eval") == 0, "set processes");
	k.type = AGENT_REC_KERNEL;
	k.device = 0, k.context = 1, k.stream = 7, k.correlation = 9;
	k.start_ns = BASE + 1000, k.end_ns = BASE + 2000;
	strcpy(k.name, "k");
	k.name_len = 1;
	gpu_trace__record(gt, 100, &k);
	gpu_trace__record(gt, 200, &k);
	k.context = 5;			/* pid 200's second context on device 0 */
	gpu_trace__record(gt, 200, &k);
	s.type = AGENT_REC_SYNC;	/* pid 100 never used context 5: a track of unknown device */
	s.context = 5, s.stream = 7, s.cbid = 2;
	gpu_trace__record(gt, 100, &s);
	gpu_trace__flow(gt, 9, 100, 101, BASE + 500, 0, 1, 7, BASE + 1000);
	gpu_trace__flow(gt, 1ULL << 32 | 9, 200, 201, BASE + 600, 0, 1, 7, BASE + 1000);
	/* attached mid-run: pid 300's first record of context 1 is a stream wait on stream 8,
	 * before any work of it told its device */
	CHECK(gpu_trace__set_process(gt, 300, "late") == 0, "set process");
	s.context = 1, s.stream = 8, s.cbid = 2;
	s.start_ns = BASE + 3000, s.end_ns = BASE + 3500;
	gpu_trace__record(gt, 300, &s);		/* held: device not known yet */
	k.context = 1, k.device = 0, k.stream = 8;
	gpu_trace__record(gt, 300, &k);		/* tells it: the wait goes on its track */
	gpu_trace__finish(gt);
	CHECK(trace_json__close(tj) == 0, "close");
	gpu_trace__free(gt);
	doc = check_load_json(path);
	if (!doc)
		return;
	ev = cJSON_GetObjectItem(doc, "traceEvents");
	/* pid 0 = device 0 for the first track (Kineto's), the others above every host pid */
	CHECK_STR(meta_of(ev, "process_name", 0, "name"), "GPU 0 (pid 100 train)");
	CHECK_STR(meta_of(ev, "process_labels", 0, "labels"), "pid 100 train, context 1");
	CHECK_STR(meta_of(ev, "process_name", GPU_TRACE_PID_EXTRA, "name"), "GPU 0 (pid 200 eval)");
	CHECK_STR(meta_of(ev, "process_name", GPU_TRACE_PID_EXTRA + 1, "name"),
		  "GPU 0 (pid 200 eval, context 5)");
	CHECK_STR(meta_of(ev, "process_labels", GPU_TRACE_PID_EXTRA + 1, "labels"),
		  "pid 200 eval, context 5");
	/* pid 300's track comes before the held sync's, made at the end */
	CHECK_STR(meta_of(ev, "process_name", GPU_TRACE_PID_EXTRA + 2, "name"),
		  "GPU 0 (pid 300 late)");
	CHECK_STR(meta_of(ev, "process_name", GPU_TRACE_PID_EXTRA + 3, "name"),
		  "GPU ? (pid 100 train, context 5)");
	cJSON_ArrayForEach(e, ev) {
		const char *nm = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));
		const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));

		if (!strcmp(nm, "k")) {
			int pid = (int)num(e, "pid");

			seen[pid == 0 ? 0 : pid == GPU_TRACE_PID_EXTRA ? 1 : 2]++;
		} else if (!strcmp(ph, "f")) {
			double id = num(e, "id");

			CHECK(id == 9 ? num(e, "pid") == 0 : num(e, "pid") == GPU_TRACE_PID_EXTRA,
			      "arrow %.0f ends on its own process's track (pid %.0f)", id,
			      num(e, "pid"));
		}
	}
	CHECK(seen[0] == 1 && seen[1] == 1 && seen[2] == 2, "one kernel per track: %d %d %d",
	      seen[0], seen[1], seen[2]);
	cJSON_ArrayForEach(e, ev) {
		const char *nm = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));

		if (nm && !strcmp(nm, "Stream Wait Event") && num(e, "tid") == 7)
			break;
	}
	CHECK(e && num(e, "pid") == GPU_TRACE_PID_EXTRA + 3 && arg(e, "device") == -1,
	      "a sync on a context its process never showed work on: device unknown");
	/* the held wait of pid 300: on the track of the kernel that told its device */
	{
		double kpid = -1, wpid = -2;

		cJSON_ArrayForEach(e, ev) {
			const char *nm = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));

			if (num(e, "tid") != 8)
				continue;
			if (nm && !strcmp(nm, "k"))
				kpid = num(e, "pid");
			else if (nm && !strcmp(nm, "Stream Wait Event")) {
				wpid = num(e, "pid");
				CHECK(arg(e, "device") == 0, "device 0");
			}
		}
		CHECK(kpid == wpid && kpid == GPU_TRACE_PID_EXTRA + 2,
		      "a wait before its context's first work: held, then on that work's track "
		      "(%.0f, %.0f)", kpid, wpid);
	}
	cJSON_Delete(doc);
}

int main(void)
{
	const char *path = UNIT_OUT_DIR "/gpu_trace.json";
	struct trace_json *tj = trace_json__open(path);
	struct gpu_trace *gt = tj ? gpu_trace__new(tj) : NULL;
	struct agent_record k = { 0 }, m = { 0 }, s = { 0 }, api = { 0 }, cont = { 0 };
	cJSON *doc, *ev, *e, *grid;
	int n_meta = 0;

	CHECK(tj != NULL && gt != NULL, "open %s", path);
	if (!tj || !gt)
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
	CHECK_U64(gpu_trace__record(gt, 555, &k), 1);
	k.correlation = 43;	/* same track again: no second metadata */
	k.start_ns += 10000, k.end_ns += 10000;
	gpu_trace__record(gt, 555, &k);

	m.type = AGENT_REC_MEMCPY;
	m.start_ns = BASE + 20000;
	m.end_ns = BASE + 22000;	/* 4000 bytes in 2000 ns = 2 GB/s */
	m.device = 1, m.context = 7, m.stream = 14, m.correlation = 44;
	m.copy_kind = 1, m.src_kind = 2, m.dst_kind = 3, m.bytes = 4000;
	gpu_trace__record(gt, 555, &m);

	s.type = AGENT_REC_SYNC;	/* no device in CUPTI sync records: learnt from context 7 */
	s.start_ns = BASE + 30000, s.end_ns = BASE + 31000;
	s.context = 7, s.stream = 14, s.correlation = 45, s.cbid = 2;
	gpu_trace__record(gt, 555, &s);

	api.type = AGENT_REC_RUNTIME_API;
	api.cbid = 211, api.tid = 777, api.correlation = 42;
	api.start_ns = BASE + 1000, api.end_ns = BASE + 1200;
	CHECK_U64(gpu_trace__record(gt, 555, &api), 0);	/* host side: not a GPU event */
	CHECK_U64(gpu_trace__api(gt, &api, 555), 1);
	cont.type = AGENT_REC_KERNEL_NAME;
	CHECK_U64(gpu_trace__record(gt, 555, &cont), 0);

	gpu_trace__flow(gt, 42, 555, 777, BASE + 1000, 1, 7, 13, BASE + 1500);
	CHECK(trace_json__close(tj) == 0, "close");
	gpu_trace__free(gt);

	doc = check_load_json(path);
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
	/* viewers list threads by thread_sort_index: streams in stream order */
	for (int s = 0; s < 2; s++) {
		e = find(ev, "M", "thread_sort_index", s);
		CHECK(e && num(e, "pid") == 1 && num(e, "tid") == 13 + s &&
		      arg(e, "sort_index") == 13 + s, "stream %d sorted as %d", 13 + s, 13 + s);
	}

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
	two_traces();
	processes_and_contexts();
	return check_done();
}
