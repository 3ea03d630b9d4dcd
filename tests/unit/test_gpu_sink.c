// SPDX-License-Identifier: MIT
/* Tier 1: the --gpu join as a sink of the session (user/gpu/gpu_sink.c), fed synthetic ring
 * records through the session and CUPTI records through gpu_sink__record.
 *   - the sink holds exactly the calls the join decides (CUDA calls that wait for a CUPTI
 *     record); the session marks them held for its consumer only, other sinks see them plain;
 *   - a held call comes back to the consumer once decided, as the session delivered it: its
 *     record, its return or end, and the consumer's own user bytes from the entry;
 *   - a call that does not wait ends the window of the entry-only call before it, so the join
 *     decides that one as soon as the agents vouch for the window, not after the 2 s wait;
 *   - GPU work reaches the consumer (tracks), API records do not; arrows and kernel names do;
 *   - with the trace writer as the consumer: a held launch is written when decided, with
 *     CUPTI's correlation, kernel and arrow; one without a record keeps its own id, says why. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "agent/agent_shm.h"
#include "api_id.h"
#include "check.h"
#include "cuda.h"
#include "decode.h"
#include "gpu_join.h"
#include "gpu_sink.h"
#include "session.h"
#include "target.h"
#include "trace_json.h"
#include "json_file.h"

#define PID	4242
#define T0	1000000000ULL
#define SEC	1000000000ULL

static struct target_probes probes;	/* no programs: nothing is attached */

static void feed_call(struct session *s, const char *sym, int tid, uint64_t ts)
{
	struct tp_rec_call c = { .type = TP_REC_CALL, .pid = PID, .tid = tid, .ts = ts };

	c.api = api_id(sym);
	session__ring_cb(s, &c, TP_REC_CALL_SHORT_SIZE);
}

static void feed_ret(struct session *s, const char *sym, int tid, uint64_t ts, int rc)
{
	struct tp_rec_ret r = { .type = TP_REC_RET, .pid = PID, .tid = tid, .ts = ts,
				.rc = (uint64_t)rc };

	r.api = api_id(sym);
	session__ring_cb(s, &r, sizeof(r));
}

/* CUPTI's record of a runtime call on tid, and the kernel it launched */
static void cupti_launch(struct gpu_sink_proc *p, const char *sym, int tid, uint64_t start,
			 uint32_t corr)
{
	struct agent_record r = { .type = AGENT_REC_RUNTIME_API, .tid = tid,
				  .cbid = cuda_apis[api_id(sym)].cbid, .start_ns = start,
				  .end_ns = start + 3000, .correlation = corr };

	gpu_sink__record(p, &r);
}

static void cupti_kernel(struct gpu_sink_proc *p, uint32_t corr, uint64_t start,
			 const char *mangled)
{
	struct agent_record k = { .type = AGENT_REC_KERNEL, .correlation = corr, .stream = 7,
				  .device = 0, .context = 1, .start_ns = start,
				  .end_ns = start + 20000 };

	snprintf(k.name, sizeof(k.name), "%s", mangled);
	k.name_len = strlen(mangled);
	gpu_sink__record(p, &k);
}

static void cupti_copy(struct gpu_sink_proc *p, uint32_t corr, uint64_t start)
{
	struct agent_record m = { .type = AGENT_REC_MEMCPY, .correlation = corr, .stream = 7,
				  .context = 1, .start_ns = start, .end_ns = start + 5000,
				  .bytes = 4096, .copy_kind = 1 };

	gpu_sink__record(p, &m);
}

/* ---- a consumer that writes down what it is given ---- */

#define LOG_MAX 16

struct seen {
	int api;
	bool held;
	enum call_end end;
	uint64_t end_ns;
	uint64_t mark;			/* its first user slot */
	bool has_ret;
	int rc;
	struct gpu_join_result r;	/* joined only */
	char kernel[64];
};

struct consumer {
	int nr_calls, nr_joined, nr_records, nr_api_records, nr_flows, nr_procs;
	struct seen calls[LOG_MAX], joined[LOG_MAX];
	size_t user_off;
	int flow_pid, flow_tid;
	uint32_t flow_corr, flow_stream;
	uint64_t flow_host_ts, flow_work;
	int proc_pid;
	char proc_comm[32];
	char log[64];			/* 'c' on_call, 'C' held on_call, 'j' joined */
	int nr_log;
};

static void c_entry(void *ctx, struct call_frame *f, void *user)
{
	(void)ctx;
	((uint64_t *)user)[0] = f->rec.ts << 4 | 0xa;
	((uint64_t *)user)[1] = ~f->rec.ts;
}

static void c_call(void *ctx, const struct call *c, void *user)
{
	struct consumer *k = ctx;

	if (k->nr_calls < LOG_MAX)
		k->calls[k->nr_calls++] = (struct seen){ .api = c->frame->rec.api, .held = c->held,
							 .end = c->end,
							 .mark = ((uint64_t *)user)[0] };
	if (k->nr_log < (int)sizeof(k->log))
		k->log[k->nr_log++] = c->held ? 'C' : 'c';
}

static int c_process(void *ctx, int pid, const char *comm)
{
	struct consumer *k = ctx;

	k->nr_procs++;
	k->proc_pid = pid;
	snprintf(k->proc_comm, sizeof(k->proc_comm), "%s", comm ? comm : "");
	return 0;
}

static void c_record(void *ctx, int pid, const struct agent_record *r)
{
	struct consumer *k = ctx;

	CHECK(pid == PID, "record of pid %d", pid);
	if (r->type == AGENT_REC_RUNTIME_API || r->type == AGENT_REC_DRIVER_API)
		k->nr_api_records++;
	k->nr_records++;
}

static void c_joined(void *ctx, const struct call *c, const struct gpu_join_result *r)
{
	struct consumer *k = ctx;
	const uint64_t *u = (const uint64_t *)((const char *)c->frame->user + k->user_off);
	struct seen *s;

	if (k->nr_log < (int)sizeof(k->log))
		k->log[k->nr_log++] = 'j';
	if (k->nr_joined == LOG_MAX)
		return;
	s = &k->joined[k->nr_joined++];
	*s = (struct seen){ .api = c->frame->rec.api, .held = c->held, .end = c->end,
			    .end_ns = c->end_ns, .has_ret = c->ret != NULL,
			    .rc = c->ret ? (int)c->ret->rc : 0, .r = *r };
	/* both slots as the entry left them, or 0 */
	s->mark = u[1] == ~c->frame->rec.ts ? u[0] : 0;
	snprintf(s->kernel, sizeof(s->kernel), "%s", r->kernel ? r->kernel : "");
	s->r.kernel = NULL;
}

static void c_flow(void *ctx, int pid, int tid, uint32_t correlation, uint64_t host_ts,
		   uint32_t device, uint32_t context, uint32_t stream, uint64_t work_start)
{
	struct consumer *k = ctx;

	(void)device;
	(void)context;
	k->nr_flows++;
	k->flow_pid = pid;
	k->flow_tid = tid;
	k->flow_corr = correlation;
	k->flow_stream = stream;
	k->flow_host_ts = host_ts;
	k->flow_work = work_start;
}

static const struct gpu_sink_consumer consumer_ops = {
	.process = c_process, .record = c_record, .joined = c_joined, .flow = c_flow,
};

/* another sink of the session, not the join's consumer: it sees every call plain */
struct plain {
	int calls, held;
};

static void p_call(void *ctx, const struct call *c, void *user)
{
	struct plain *p = ctx;

	(void)user;
	p->calls++;
	p->held += c->held;
}

static uint64_t mark_of(uint64_t entry_ts)
{
	return entry_ts << 4 | 0xa;
}

static void test_interface(void)
{
	static const struct session_sink_ops plain_ops = { .user_bytes = 8, .on_call = p_call };
	static const struct session_sink_ops cons_ops = {
		.user_bytes = 16, .on_entry = c_entry, .on_call = c_call,
	};
	struct session *s = session__new(NULL, &probes);
	struct plain plain = {};
	struct consumer k = {}, stranger = {};
	struct gpu_join_stats st;
	struct gpu_sink_proc *p;
	struct gpu_sink *g;
	int tid = PID + 1;

	CHECK(s && session__add_sink(s, &plain_ops, &plain, NULL) == 0 &&
	      session__add_sink(s, &cons_ops, &k, &k.user_off) == 0, "session and sinks");
	CHECK(k.user_off == 8, "the consumer's bytes after the other sink's: %zu", k.user_off);
	g = gpu_sink__new(s);
	CHECK(g != NULL, "gpu sink");
	if (!s || !g)
		return;
	CHECK(gpu_sink__stats(g, &st) == -ENOENT, "no join before a consumer");
	CHECK(gpu_sink__subscribe(g, &consumer_ops, &stranger) == -ENOENT, "not a sink: refused");
	CHECK(session__consume(s, &k, &plain) == -ENOENT, "a sink that holds nothing is no stage");
	CHECK(session__consume(s, g, g) == -EINVAL, "a stage does not consume itself");
	CHECK(gpu_sink__subscribe(g, &consumer_ops, &k) == 0, "subscribed");
	CHECK(gpu_sink__subscribe(g, &consumer_ops, &k) == -EBUSY, "one consumer");

	p = gpu_sink__add_process(g, PID, "train");
	CHECK(p && k.nr_procs == 1 && k.proc_pid == PID && !strcmp(k.proc_comm, "train"),
	      "the consumer hears of the process");
	CHECK(gpu_sink__add_process(g, PID, "train") == p && k.nr_procs == 1, "once per pid");
	if (!p)
		return;
	gpu_sink__attached(p, NULL, T0);

	/* entry-only launch: held; a sync after it (not held) ends its window */
	feed_call(s, "cudaLaunchKernel", tid, T0 + 10000);
	CHECK(k.nr_calls == 1 && k.calls[0].held && k.calls[0].mark == mark_of(T0 + 10000),
	      "the launch reaches the consumer held, with its bytes");
	CHECK(plain.calls == 1 && plain.held == 0, "the other sink sees it plain");
	feed_call(s, "cudaStreamSynchronize", tid, T0 + 20000);
	feed_ret(s, "cudaStreamSynchronize", tid, T0 + 25000, 0);
	CHECK(k.nr_calls == 2 && !k.calls[1].held, "a sync is not held");
	/* a copy with a return probe: held with its return */
	feed_call(s, "cudaMemcpy", tid, T0 + 30000);
	feed_ret(s, "cudaMemcpy", tid, T0 + 39000, 11);
	CHECK(k.nr_calls == 3 && k.calls[2].held, "a copy is held");
	/* an NCCL call is never held */
	feed_call(s, "ncclAllReduce", tid, T0 + 40000);
	feed_ret(s, "ncclAllReduce", tid, T0 + 45000, 0);
	CHECK(k.nr_calls == 4 && !k.calls[3].held, "NCCL is not held");
	/* a launch CUPTI has no record of, and a copy still open at the end */
	feed_call(s, "cudaLaunchKernel", tid, T0 + 50000);
	feed_call(s, "cudaMemcpy", tid, T0 + 60000);
	CHECK(plain.calls == 5 && plain.held == 0, "plain: every call, none held");

	/* CUPTI: the first launch's record and kernel, the copy's record */
	cupti_launch(p, "cudaLaunchKernel", tid, T0 + 11000, 77);
	cupti_launch(p, "cudaMemcpy", tid, T0 + 31000, 79);
	cupti_kernel(p, 77, T0 + 18000, "_Z4gemmPf");
	cupti_copy(p, 79, T0 + 35000);
	CHECK(k.nr_records == 2 && k.nr_api_records == 0,
	      "work to the consumer, API records only to the join (%d, %d)", k.nr_records,
	      k.nr_api_records);

	/* the agents vouch up to the launch's entry only: nothing can be decided */
	gpu_sink__poll(g, T0 + 15000);
	CHECK(k.nr_joined == 0, "nothing decided before the window closed: %d", k.nr_joined);
	/* up to after the sync: the first launch's window is closed (the sync ended it) and has
	 * its record: decided long before the 2 s wait */
	gpu_sink__poll(g, T0 + 26000);
	CHECK(k.nr_joined == 1, "the first launch decided by the sync's mark: %d", k.nr_joined);
	CHECK(k.joined[0].api == api_id("cudaLaunchKernel") && k.joined[0].held &&
	      k.joined[0].end == CALL_NO_RETURN && !k.joined[0].has_ret,
	      "handed back as delivered");
	CHECK(k.joined[0].mark == mark_of(T0 + 10000), "with the consumer's bytes from its entry");
	CHECK(k.joined[0].r.status == GPU_JOIN_JOINED && k.joined[0].r.correlation == 77 &&
	      !strcmp(k.joined[0].kernel, "gemm(float*)"), "joined: corr %u kernel '%s'",
	      k.joined[0].r.correlation, k.joined[0].kernel);
	CHECK(k.nr_flows == 1 && k.flow_pid == PID && k.flow_tid == tid && k.flow_corr == 77 &&
	      k.flow_stream == 7 && k.flow_host_ts == T0 + 11000 && k.flow_work == T0 + 18000,
	      "the arrow from CUPTI's start to the kernel");

	/* the copy returned at 39 us: its records are in once the agents vouch past that (and
	 * the slack) */
	gpu_sink__poll(g, T0 + 40000);
	CHECK(k.nr_joined == 1, "the copy waits for the agents: %d", k.nr_joined);
	gpu_sink__poll(g, T0 + 42000);
	CHECK(k.nr_joined == 2 && k.joined[1].api == api_id("cudaMemcpy") &&
	      k.joined[1].end == CALL_RETURNED && k.joined[1].has_ret && k.joined[1].rc == 11 &&
	      k.joined[1].r.status == GPU_JOIN_JOINED && k.joined[1].r.correlation == 79 &&
	      k.joined[1].mark == mark_of(T0 + 30000), "the copy, with its return");
	CHECK(k.nr_flows == 2 && k.flow_corr == 79 && k.flow_host_ts == T0 + 30000 &&
	      k.flow_work == T0 + 35000, "its arrow from its entry to the copy");

	/* the end: the open copy is delivered unfinished (held), then everything is decided */
	session__finish(s, T0 + 90000);
	CHECK(k.nr_calls == 6 && k.calls[5].held && k.calls[5].end == CALL_UNFINISHED,
	      "the open copy arrives held at the end");
	CHECK(k.nr_joined == 2, "not decided before gpu_sink__finish");
	gpu_sink__finish(g, T0 + 90000);
	CHECK(k.nr_joined == 4, "all decided at the end: %d", k.nr_joined);
	CHECK(k.joined[2].api == api_id("cudaLaunchKernel") &&
	      k.joined[2].r.status == GPU_JOIN_NO_RECORD &&
	      !strcmp(k.joined[2].r.status_str, "no CUPTI record") &&
	      k.joined[2].mark == mark_of(T0 + 50000), "the launch without a record, said so");
	CHECK(k.joined[3].api == api_id("cudaMemcpy") && k.joined[3].end == CALL_UNFINISHED &&
	      k.joined[3].end_ns == T0 + 90000 && !k.joined[3].has_ret &&
	      k.joined[3].mark == mark_of(T0 + 60000), "the unfinished copy, ending at the end");
	CHECK(!strcmp(k.log, "CcCcCjjCjj"), "held calls are written only once decided: %s", k.log);

	CHECK(gpu_sink__stats(g, &st) == 0 && st.calls == 4 && st.joined == 2 &&
	      st.no_record == 2 && st.flows == 2, "counts: %llu calls %llu joined %llu no record",
	      (unsigned long long)st.calls, (unsigned long long)st.joined,
	      (unsigned long long)st.no_record);
	CHECK(gpu_sink__stats_pid(g, PID, &st) == 0 && st.calls == 4, "the process's counts");
	CHECK(gpu_sink__stats_pid(g, PID + 7, &st) == -ENOENT, "an unknown pid");
	CHECK(gpu_sink__stats(NULL, &st) == -ENOENT, "no join without --gpu");
	gpu_sink__free(g);
	session__free(s);
}

/* ---- the trace writer as the consumer ---- */

static cJSON *args_of(cJSON *trace, const char *name, int nth)
{
	cJSON *e;

	cJSON_ArrayForEach(e, cJSON_GetObjectItem(trace, "traceEvents")) {
		cJSON *n = cJSON_GetObjectItem(e, "name"), *ph = cJSON_GetObjectItem(e, "ph");

		if (cJSON_IsString(n) && !strcmp(n->valuestring, name) && cJSON_IsString(ph) &&
		    !strcmp(ph->valuestring, "X") && nth-- == 0)
			return cJSON_GetObjectItem(e, "args");
	}
	return NULL;
}

static int count_ph(cJSON *trace, const char *ph, const char *cat)
{
	cJSON *e;
	int n = 0;

	cJSON_ArrayForEach(e, cJSON_GetObjectItem(trace, "traceEvents")) {
		cJSON *p = cJSON_GetObjectItem(e, "ph"), *c = cJSON_GetObjectItem(e, "cat");

		n += cJSON_IsString(p) && !strcmp(p->valuestring, ph) && cJSON_IsString(c) &&
		     !strcmp(c->valuestring, cat);
	}
	return n;
}

static const char *str(cJSON *o, const char *k)
{
	cJSON *v = cJSON_GetObjectItem(o, k);

	return cJSON_IsString(v) ? v->valuestring : "";
}

static double num(cJSON *o, const char *k)
{
	cJSON *v = cJSON_GetObjectItem(o, k);

	return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static void test_trace_writer(void)
{
	char path[] = "/tmp/tptrace-gpusink-test.XXXXXX";
	char file[sizeof(path) + 16];
	struct session *s = session__new(NULL, &probes);
	struct trace_json *tj;
	struct decoder *d;
	struct gpu_sink *g;
	struct gpu_sink_proc *p;
	cJSON *trace, *a;
	int tid = PID + 1;

	CHECK(mkdtemp(path) != NULL, "temp dir");
	snprintf(file, sizeof(file), "%s/t.json", path);
	tj = trace_json__open(file);
	CHECK(s && tj, "session and writer");
	if (!s || !tj)
		return;
	trace_json__begin(tj, T0, 0);
	d = decoder__new(s, tj, NULL);
	g = gpu_sink__new(s);
	CHECK(d && g && decoder__enable_gpu(d, g) == 0, "the writer consumes the join");
	if (!d || !g)
		return;
	p = gpu_sink__add_process(g, PID, "train");
	CHECK(p != NULL, "process");
	if (!p)
		return;
	gpu_sink__attached(p, NULL, T0);
	feed_call(s, "cudaLaunchKernel", tid, T0 + 10000);
	feed_call(s, "cudaStreamSynchronize", tid, T0 + 20000);
	feed_ret(s, "cudaStreamSynchronize", tid, T0 + 25000, 0);
	feed_call(s, "cudaLaunchKernel", tid, T0 + 30000);
	CHECK(decoder__stats(d)->calls == 1, "only the sync written at once: %llu",
	      (unsigned long long)decoder__stats(d)->calls);
	cupti_launch(p, "cudaLaunchKernel", tid, T0 + 11000, 77);
	cupti_kernel(p, 77, T0 + 18000, "_Z4gemmPf");
	gpu_sink__poll(g, T0 + 26000);
	CHECK(decoder__stats(d)->calls == 2, "the joined launch written once decided: %llu",
	      (unsigned long long)decoder__stats(d)->calls);
	decoder__finish(d, T0 + 90000);
	gpu_sink__finish(g, T0 + 90000);
	CHECK(decoder__stats(d)->calls == 3, "all written at the end");
	trace_json__end_events(tj);
	CHECK(trace_json__close(tj) == 0, "close");
	gpu_sink__free(g);
	decoder__free(d);
	session__free(s);

	trace = check_load_json(file);
	if (!trace)
		return;
	a = args_of(trace, "cudaLaunchKernel", 0);
	CHECK(a && num(a, "correlation") == 77 && !strcmp(str(a, "kernel"), "gemm(float*)") &&
	      !strcmp(str(a, "kernel source"), "cupti") && !cJSON_GetObjectItem(a, "cupti"),
	      "the joined launch: CUPTI's correlation and kernel");
	a = args_of(trace, "cudaLaunchKernel", 1);
	CHECK(a && num(a, "correlation") >= (double)(1ULL << 40) &&
	      !strcmp(str(a, "cupti"), "no CUPTI record"), "the other keeps its own id, says why");
	CHECK(count_ph(trace, "s", "ac2g") == 1 && count_ph(trace, "f", "ac2g") == 1,
	      "one arrow, both ends");
	CHECK(count_ph(trace, "X", "kernel") == 1, "the kernel on its GPU track");
	cJSON_Delete(trace);
	unlink(file);
	rmdir(path);
}

int main(void)
{
	test_interface();
	test_trace_writer();
	return check_done();
}
