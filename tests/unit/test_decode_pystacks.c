// SPDX-License-Identifier: MIT
/* Tier 1: --py-stacks in the trace writer. Call records carrying stack ids, as bpf/cuda.bpf.c
 * emits them, go through the decoder with a lookup table standing in for ustacks__get; the
 * trace is read back with cJSON. Checked exactly: the python_function slices (names as
 * torch.profiler writes them, ts, dur, tid, "Python id"/"Python parent id"), that they nest
 * and cover the calls made under them, the compact "stack" arg (Python and native frames), a
 * thread without Python state, a lost stack, an id the lookup does not know, an unresolved
 * code object, two threads interleaving, calls nested in an NCCL call, and --gpu's
 * entry-only calls. */
#include <stdlib.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "api_id.h"
#include "check.h"
#include "cuda.h"
#include "decode.h"
#include "gpu_sink.h"
#include "target.h"
#include "trace_json.h"
#include "ustack.h"
#include "session.h"
#include "core_sinks.h"

static int pid = 4000;

/* ---- the fake stack table ---- */

#define F(code_, file_, first_, func_, line_) \
	{ .code = code_, .file = file_, .firstlineno = first_, .func = func_, .line = line_ }
#define MOD(line)	F(0x1000, "/w/train.py", 1, "<module>", line)
#define MAIN(line)	F(0x2000, "/w/train.py", 10, "main", line)
#define STEP(line)	F(0x3000, "/w/train.py", 20, "Model.step", line)
#define FWD(line)	F(0x4000, "/w/model.py", 30, "forward", line)
#define BWD(line)	F(0x5000, "/w/model.py", 40, "backward", line)
#define ALLR(line)	F(0x6000, "/w/dist.py", 60, "all_reduce", line)
#define BOOT(line)	F(0x7000, "/w/worker.py", 1, "<module>", line)
#define WORK(line)	F(0x8000, "/w/worker.py", 70, "<lambda>", line)

/* innermost first, as ustacks__get gives them */
static struct ustack_frame s1[] = { FWD(31), STEP(22), MAIN(12), MOD(50) };
static struct ustack_frame s2[] = { FWD(33), STEP(22), MAIN(12), MOD(50) };
static struct ustack_frame s3[] = { BWD(41), STEP(23), MAIN(12), MOD(50) };
static struct ustack_frame s3n[] = {
	{ .pc = 0x7f0000001234, .file = "/usr/lib/libcudart.so.13", .module_off = 0x1234,
	  .func = "cudaMemcpy" },
	{ .pc = 0x555000 },
};
static struct ustack_frame s4[] = { FWD(31), STEP(22), MAIN(13), MOD(50) };
/* freed: whatever name or line it had is stale and must not show */
static struct ustack_frame s5[] = { { .code = 0x9000, .unresolved = true, .func = "stale",
				      .file = "/w/stale.py", .line = 99, .firstlineno = 98 },
				    FWD(31), STEP(22), MAIN(13), MOD(50) };
static struct ustack_frame s6[] = { ALLR(61), MAIN(14), MOD(50) };
static struct ustack_frame t1[] = { WORK(72), BOOT(5) };
static struct ustack_frame t2[] = { WORK(73), BOOT(5) };

#define STACK(id_, py_, fl_) { .id = id_, .pid = 4000, .nr_py = sizeof(py_) / sizeof(py_[0]), \
			       .py = py_, .flags = fl_ }
static struct ustack stacks[] = {
	STACK(0x101, s1, 0), STACK(0x102, s2, 0), STACK(0x103, s3, 0), STACK(0x104, s4, 0),
	STACK(0x105, s5, TP_USTACK_PY_TRUNCATED), STACK(0x106, s6, 0),
	STACK(0x201, t1, 0), STACK(0x202, t2, 0),
};
static int lookups;

static const struct ustack *fake_lookup(void *ctx, int p, uint64_t id)
{
	lookups++;
	CHECK(ctx == stacks, "the lookup gets its ctx");
	for (size_t i = 0; i < sizeof(stacks) / sizeof(stacks[0]); i++)
		if (stacks[i].id == id && stacks[i].pid == p)
			return &stacks[i];
	return NULL;
}

/* What the stack arg of a call with stack id must be: ustack__compact's line (its format is
 * user/core/ustack.c's, tested there), or the status name in <>. */
static const char *want_stack(uint64_t id)
{
	static char buf[4096];

	if (id < TP_USTACK_FIRST_ID)
		snprintf(buf, sizeof(buf), "<%s>", ustacks__status_name(id));
	else
		ustack__compact(fake_lookup(stacks, pid, id), buf, sizeof(buf));
	return buf;
}

/* ---- records ---- */

static void call(struct decoder *d, const char *sym, int tid, uint64_t ts, uint64_t ustack)
{
	struct tp_rec_call c = { .type = TP_REC_CALL, .pid = pid, .tid = tid, .ts = ts,
				 .ustack = ustack };

	c.api = api_id(sym);
	c.stack[0] = 0x401000;
	test_decoder_ring_cb(d, &c, sizeof(c));
}

static void ret(struct decoder *d, const char *sym, int tid, uint64_t ts)
{
	struct tp_rec_ret r = { .type = TP_REC_RET, .pid = pid, .tid = tid, .ts = ts };

	r.api = api_id(sym);
	test_decoder_ring_cb(d, &r, sizeof(r));
}

/* ---- reading the trace back ---- */

static cJSON *load(const char *path)
{
	static char buf[1 << 20];
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

	if (f)
		fclose(f);
	buf[n] = '\0';
	return cJSON_Parse(buf);
}

static const char *sget(cJSON *e, const char *k)
{
	cJSON *v = cJSON_GetObjectItem(e, k);

	return cJSON_IsString(v) ? v->valuestring : "";
}

static double nget(cJSON *e, const char *k)
{
	cJSON *v = cJSON_GetObjectItem(e, k);

	return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static cJSON *args(cJSON *e)
{
	return cJSON_GetObjectItem(e, "args");
}

/* the nth event named name on tid (ph X) */
static cJSON *find(cJSON *trace, const char *name, int tid, int nth)
{
	cJSON *e;

	cJSON_ArrayForEach(e, cJSON_GetObjectItem(trace, "traceEvents"))
		if (!strcmp(sget(e, "ph"), "X") && !strcmp(sget(e, "name"), name) &&
		    nget(e, "tid") == tid && nth-- == 0)
			return e;
	return NULL;
}

static int count_cat(cJSON *trace, const char *cat, int tid)
{
	cJSON *e;
	int n = 0;

	cJSON_ArrayForEach(e, cJSON_GetObjectItem(trace, "traceEvents"))
		if (!strcmp(sget(e, "cat"), cat) && (tid < 0 || nget(e, "tid") == tid))
			n++;
	return n;
}

/* A python_function slice: name, tid, ts and end in ns (trace µs * 1000), its parent's id (0:
 * none). Returns its "Python id". */
static int slice(cJSON *trace, const char *name, int tid, int nth, uint64_t start, uint64_t end,
		 int parent)
{
	cJSON *e = find(trace, name, tid, nth), *p;

	CHECK(e != NULL, "slice %s #%d on %d", name, nth, tid);
	if (!e)
		return -1;
	CHECK_STR(sget(e, "cat"), "python_function");
	CHECK(nget(e, "ts") * 1000 == start && (nget(e, "ts") + nget(e, "dur")) * 1000 == end,
	      "%s #%d: [%g, %g] us, want [%g, %g]", name, nth, nget(e, "ts"),
	      nget(e, "ts") + nget(e, "dur"), start / 1e3, end / 1e3);
	p = cJSON_GetObjectItem(args(e), "Python parent id");
	if (parent)
		CHECK(cJSON_IsNumber(p) && p->valueint == parent, "%s #%d: parent %d", name, nth,
		      parent);
	else
		CHECK(p == NULL, "%s #%d: outermost, no parent", name, nth);
	return (int)nget(args(e), "Python id");
}

/* Every two X slices of one thread are disjoint or nested (Perfetto draws nothing else), and
 * each call with a resolved stack lies inside a python_function slice of its innermost
 * frame on its thread. */
static void check_nesting(cJSON *trace)
{
	cJSON *evs = cJSON_GetObjectItem(trace, "traceEvents"), *a, *b;

	cJSON_ArrayForEach(a, evs) {
		double as = nget(a, "ts"), ae = as + nget(a, "dur");
		const char *stack = sget(args(a), "stack");
		bool covered = false;

		if (strcmp(sget(a, "ph"), "X"))
			continue;
		cJSON_ArrayForEach(b, evs) {
			double bs = nget(b, "ts"), be = bs + nget(b, "dur");

			if (a == b || strcmp(sget(b, "ph"), "X") || nget(a, "tid") != nget(b, "tid"))
				continue;
			CHECK(ae <= bs || be <= as || (as <= bs && be <= ae) || (bs <= as && ae <= be),
			      "%s [%g, %g] and %s [%g, %g] overlap without nesting",
			      sget(a, "name"), as, ae, sget(b, "name"), bs, be);
			if (stack[0] && stack[0] != '<' && !strcmp(sget(b, "cat"), "python_function") &&
			    bs <= as && ae <= be)
				covered = true;
		}
		if (stack[0] && stack[0] != '<')
			CHECK(covered, "%s at %g: no python_function slice covers it",
			      sget(a, "name"), as);
	}
}

static void test_slices(const char *path)
{
	struct target_probes probes = {};
	struct trace_json *tj = trace_json__open(path);
	struct decoder *d;
	const struct decoder_stats *st;
	int A = pid, B = pid + 1, C = pid + 2;
	int mod, mainf, step, step2, allr, boot;
	cJSON *trace, *e;

	stacks[2].nr_native = 2;
	stacks[2].native = s3n;
	stacks[2].native_stop = "no frame pointer in /usr/bin/python3.11 (_PyEval_EvalFrame)";
	CHECK(tj != NULL, "open %s", path);
	trace_json__begin(tj, 0, 0);
	d = test_decoder_new(tj, NULL, &probes);
	CHECK(decoder__set_ustacks(d, fake_lookup, stacks) == 0, "ustacks on");

	call(d, "cudaLaunchKernel", A, 1000, 0x101);		/* entry only */
	call(d, "cudaLaunchKernel", A, 2000, 0x102);		/* forward, another line */
	call(d, "ncclAllReduce", B, 2500, 0x201);		/* thread B, in between */
	ret(d, "ncclAllReduce", B, 2700);
	call(d, "cudaMemcpy", A, 3000, 0x103);			/* backward */
	call(d, "cudaStreamSynchronize", C, 3200, TP_USTACK_NOPY);	/* a C++ thread */
	ret(d, "cudaMemcpy", A, 3500);
	call(d, "cudaMemcpy", B, 3300, 0x202);
	ret(d, "cudaMemcpy", B, 3400);
	ret(d, "cudaStreamSynchronize", C, 3900);
	call(d, "cudaStreamSynchronize", A, 4000, 0x104);	/* step called from line 13 */
	ret(d, "cudaStreamSynchronize", A, 4800);
	call(d, "cudaLaunchKernel", A, 5000, TP_USTACK_LOST);	/* unknown: nothing changes */
	call(d, "cudaLaunchKernel", A, 5500, 0x105);		/* a freed code object */
	call(d, "cudaLaunchKernel", A, 6000, 0x999);		/* not in the table */
	call(d, "ncclAllReduce", A, 7000, 0x106);		/* a launch nested in NCCL */
	call(d, "cudaLaunchKernel", A, 7100, 0x106);
	ret(d, "ncclAllReduce", A, 7600);
	call(d, "cudaStreamSynchronize", A, 8000, TP_USTACK_NOPY);	/* A lost its Python */
	ret(d, "cudaStreamSynchronize", A, 8100);
	call(d, "cudaLaunchKernel", A, 8500, 0x106);		/* and has it again */
	decoder__finish(d, 9000);
	st = decoder__stats(d);
	CHECK_U64(st->stacks, 10);
	CHECK_U64(st->stacks_status, 3);
	CHECK_U64(st->stacks_missing, 1);
	CHECK_U64(st->python_slices, 14);
	trace_json__end_events(tj);
	CHECK(trace_json__close(tj) == 0, "close");
	test_decoder_free(d);

	trace = load(path);
	CHECK(trace != NULL, "%s parses", path);
	if (!trace)
		return;
	/* thread A: <module> and main span all its known stacks up to the NOPY call */
	mod = slice(trace, "/w/train.py(1): <module>", A, 0, 1000, 7600, 0);
	mainf = slice(trace, "/w/train.py(10): main", A, 0, 1000, 7600, mod);
	CHECK(mod == 1 && mainf == 2, "ids in order of opening: %d %d", mod, mainf);
	step = slice(trace, "/w/train.py(20): Model.step", A, 0, 1000, 3500, mainf);
	slice(trace, "/w/model.py(30): forward", A, 0, 1000, 2000, step);
	slice(trace, "/w/model.py(40): backward", A, 0, 3000, 3500, step);
	/* called again from another line of main: another activation */
	step2 = slice(trace, "/w/train.py(20): Model.step", A, 1, 4000, 5500, mainf);
	CHECK(step2 != step, "a new id");
	slice(trace, "/w/model.py(30): forward", A, 1, 4000, 5500, step2);
	slice(trace, "<unresolved code 0x9000>", A, 0, 5500, 5500,
	      (int)nget(args(find(trace, "/w/model.py(30): forward", A, 1)), "Python id"));
	allr = slice(trace, "/w/dist.py(60): all_reduce", A, 0, 7000, 7600, mainf);
	CHECK(allr > step2, "opened later, larger id");
	CHECK(find(trace, "/w/model.py(30): forward", A, 2) == NULL, "two forward slices");
	/* the call without Python state ended them: new ones for the stack after it */
	mod = slice(trace, "/w/train.py(1): <module>", A, 1, 8500, 8500, 0);
	mainf = slice(trace, "/w/train.py(10): main", A, 1, 8500, 8500, mod);
	slice(trace, "/w/dist.py(60): all_reduce", A, 1, 8500, 8500, mainf);
	/* thread B interleaved, its own slices */
	boot = slice(trace, "/w/worker.py(1): <module>", B, 0, 2500, 3400, 0);
	slice(trace, "/w/worker.py(70): <lambda>", B, 0, 2500, 3400, boot);
	CHECK(count_cat(trace, "python_function", A) == 12, "12 slices on A");
	CHECK(count_cat(trace, "python_function", B) == 2, "2 slices on B");
	CHECK(count_cat(trace, "python_function", C) == 0, "none on the C++ thread");

	/* the stack args */
	e = find(trace, "cudaLaunchKernel", A, 0);
	CHECK_STR(sget(args(e), "stack"), want_stack(0x101));
	CHECK(strstr(sget(args(e), "stack"), ":31 forward") != NULL, "the innermost frame's line");
	CHECK(cJSON_GetObjectItem(args(e), "stack truncated") == NULL, "not truncated");
	e = find(trace, "cudaMemcpy", A, 0);
	CHECK_STR(sget(args(e), "stack"), want_stack(0x103));
	CHECK(strstr(sget(args(e), "stack"), " | ") && strstr(sget(args(e), "stack"), "cudaMemcpy"),
	      "native frames after the Python ones");
	CHECK_STR(sget(args(e), "native stack end"),
		  "no frame pointer in /usr/bin/python3.11 (_PyEval_EvalFrame)");
	CHECK_STR(sget(args(find(trace, "cudaStreamSynchronize", C, 0)), "stack"),
		  "<no Python thread state>");
	CHECK_STR(sget(args(find(trace, "cudaLaunchKernel", A, 2)), "stack"),
		  want_stack(TP_USTACK_LOST));
	e = find(trace, "cudaLaunchKernel", A, 3);
	CHECK_STR(sget(args(e), "stack"), want_stack(0x105));
	CHECK(strstr(sget(args(e), "stack"), "<unresolved code 0x9000>") &&
	      !strstr(sget(args(e), "stack"), "stale"), "a freed code object shows no stale line");
	CHECK_STR(sget(args(e), "stack truncated"), "more Python frames than recorded (depth "
		  "limit or a looping frame chain)");
	CHECK_STR(sget(args(find(trace, "cudaLaunchKernel", A, 4)), "stack"), "<stack not found>");
	CHECK_STR(sget(args(find(trace, "cudaLaunchKernel", A, 5)), "stack"), want_stack(0x106));
	CHECK_STR(sget(args(find(trace, "ncclAllReduce", A, 0)), "stack"), want_stack(0x106));
	CHECK_STR(sget(args(find(trace, "ncclAllReduce", B, 0)), "stack"), want_stack(0x201));
	CHECK_STR(sget(args(find(trace, "cudaMemcpy", B, 0)), "stack"), want_stack(0x202));
	check_nesting(trace);
	cJSON_Delete(trace);
}

/* --gpu: an entry-only launch is drawn by the join (with CUPTI's times when joined, after its
 * probe): its slices last until the thread's next call, which it cannot outlast. */
static void test_gpu_entry_only(const char *path)
{
	struct target_probes probes = {};
	struct trace_json *tj = trace_json__open(path);
	struct gpu_sink *g;
	struct decoder *d;
	cJSON *trace;
	int step;

	trace_json__begin(tj, 0, 0);
	d = test_decoder_new(tj, NULL, &probes);
	CHECK(decoder__set_ustacks(d, fake_lookup, stacks) == 0, "ustacks on");
	g = gpu_sink__new(test_core(d));
	CHECK(g && decoder__enable_gpu(d, g) == 0, "gpu on");
	call(d, "cudaLaunchKernel", pid, 1000, 0x101);
	call(d, "cudaMemcpy", pid, 2000, 0x103);
	ret(d, "cudaMemcpy", pid, 2600);
	call(d, "cudaLaunchKernel", pid, 3000, 0x103);
	decoder__finish(d, 5000);
	gpu_sink__finish(g, 5000);
	trace_json__end_events(tj);
	CHECK(trace_json__close(tj) == 0, "close");
	gpu_sink__free(g);
	test_decoder_free(d);

	trace = load(path);
	CHECK(trace != NULL, "%s parses", path);
	if (!trace)
		return;
	step = slice(trace, "/w/train.py(20): Model.step", pid, 0, 1000, 5000, 2);
	slice(trace, "/w/model.py(30): forward", pid, 0, 1000, 2000, step);
	/* the last launch's end is the end of the trace */
	slice(trace, "/w/model.py(40): backward", pid, 0, 2000, 5000, step);
	check_nesting(trace);
	cJSON_Delete(trace);
}

/* Without decoder__set_ustacks the ids are ignored: no lookups, no args, no slices. */
static void test_off(const char *path)
{
	struct target_probes probes = {};
	struct trace_json *tj = trace_json__open(path);
	struct decoder *d;
	cJSON *trace;

	trace_json__begin(tj, 0, 0);
	d = test_decoder_new(tj, NULL, &probes);
	lookups = 0;
	call(d, "cudaLaunchKernel", pid, 1000, 0x101);
	call(d, "cudaLaunchKernel", pid, 2000, TP_USTACK_NOPY);
	decoder__finish(d, 3000);
	trace_json__end_events(tj);
	CHECK(trace_json__close(tj) == 0, "close");
	test_decoder_free(d);
	CHECK(lookups == 0, "no lookups");
	trace = load(path);
	CHECK(trace && count_cat(trace, "python_function", -1) == 0, "no slices");
	CHECK(trace && cJSON_GetObjectItem(args(find(trace, "cudaLaunchKernel", pid, 1)),
					   "stack") == NULL, "no stack arg");
	cJSON_Delete(trace);
}

/* a frame whose line could not be computed (0) never shows a line number */
static void test_line_unknown(void)
{
	struct ustack_frame fr[] = { FWD(0), STEP(22) };
	struct ustack st = { .id = 0x301, .pid = 4000, .nr_py = 2, .py = fr };
	char buf[256];

	ustack__compact(&st, buf, sizeof(buf));
	CHECK_STR(buf, "model.py:? forward < train.py:22 Model.step");
}

int main(void)
{
	char dir[] = "/tmp/tptrace-pystacks.XXXXXX", path[128];

	test_line_unknown();

	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	snprintf(path, sizeof(path), "%s/slices.json", dir);
	test_slices(path);
	unlink(path);
	snprintf(path, sizeof(path), "%s/gpu.json", dir);
	test_gpu_entry_only(path);
	unlink(path);
	snprintf(path, sizeof(path), "%s/off.json", dir);
	test_off(path);
	unlink(path);
	rmdir(dir);
	return check_done();
}
