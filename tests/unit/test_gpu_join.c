// SPDX-License-Identifier: MIT
/* The --gpu join (user/gpu/gpu_join.c) on record streams shaped like real CUPTI's: a DRIVER record
 * for the driver call nested in every runtime call, RUNTIME records for calls tptrace does not
 * probe, several threads, late buffers, graph replays. Every case asserts each host call's
 * correlation and the kernel its arrow goes to, not counts alone. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <cupti_runtime_cbid.h>
#include <cupti_driver_cbid.h>
#include "agent/agent_shm.h"
#include "check.h"
#include "cuda_api.h"
#include "gpu_join.h"

#define RT_LAUNCH	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000
#define RT_GETLASTERR	CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020
#define RT_GRAPH	CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000
#define RT_MEMCPY	CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020
#define DRV_LAUNCH	CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel
#define DRV_LAUNCH_EX	CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx
#define DRV_MEMCPY_HTOD	CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2
#define SEC		1000000000ULL
#define MAX_WAIT	(2 * SEC)

struct emitted {
	uint32_t pid, tid, tag;		/* tag: the test's name for the call (its payload) */
	uint64_t ts;
	struct gpu_join_result res;
	char kernel[64];
};

struct flow {
	uint32_t corr, pid, tid, stream;
	uint64_t host_ts, work_start;
};

#define LOG_MAX 16384
static struct emitted emitted[LOG_MAX];
static int nr_emitted;
static struct flow flows[LOG_MAX];
static int nr_flows;

static void on_emit(void *ctx, const struct gpu_join_call *c, void *payload,
		    const struct gpu_join_result *r)
{
	struct emitted *e;

	(void)ctx;
	if (nr_emitted == LOG_MAX) {
		CHECK(false, "more calls written than the test logs");
		return;
	}
	e = &emitted[nr_emitted++];
	e->pid = c->pid;
	e->tid = c->tid;
	e->ts = c->ts;
	memcpy(&e->tag, payload, sizeof(e->tag));
	e->res = *r;
	snprintf(e->kernel, sizeof(e->kernel), "%s", r->kernel ? r->kernel : "");
}

static void on_flow(void *ctx, uint32_t corr, const struct gpu_join_call *c, uint64_t host_ts,
		    uint32_t device, uint32_t context, uint32_t stream, uint64_t work_start)
{
	(void)ctx;
	(void)device;
	(void)context;
	if (nr_flows == LOG_MAX)
		return;
	flows[nr_flows++] = (struct flow){ .corr = corr, .pid = c->pid, .tid = c->tid,
					   .stream = stream,
					   .host_ts = host_ts, .work_start = work_start };
}

static struct gpu_join *setup(void)
{
	struct gpu_join_ops ops = { .emit = on_emit, .flow = on_flow };
	struct gpu_join *j = gpu_join__new(&ops, sizeof(uint32_t));

	nr_emitted = nr_flows = 0;
	/* a measured residual like the sim's: the slack is 100 + 50 + the floor */
	gpu_join__set_clock(j, 1, 8, 100, 50);
	gpu_join__set_clock(j, 2, 8, 100, 50);
	return j;
}

static void call_ex(struct gpu_join *j, uint32_t tag, uint32_t tid, uint32_t domain,
		    uint32_t cbid, uint64_t ts, uint64_t ret_ts)
{
	struct gpu_join_call c = { .pid = 1, .tid = tid, .domain = domain, .cbid = cbid,
				   .gpu_work = true, .ts = ts, .ret_ts = ret_ts };

	CHECK(gpu_join__add_call(j, &c, &tag) == 0, "add call %u", tag);
}

static void launch(struct gpu_join *j, uint32_t tag, uint32_t tid, uint64_t ts)
{
	call_ex(j, tag, tid, CUDA_DOM_RUNTIME, RT_LAUNCH, ts, 0);
}

static void api_rec(struct gpu_join *j, uint32_t type, uint32_t tid, uint32_t cbid,
		    uint64_t start, uint64_t end, uint32_t corr)
{
	struct agent_record r = { .type = type, .tid = tid, .cbid = cbid, .start_ns = start,
				  .end_ns = end, .correlation = corr };

	gpu_join__record(j, 1, &r, NULL);
}

static void rt(struct gpu_join *j, uint32_t tid, uint32_t cbid, uint64_t start, uint64_t end,
	       uint32_t corr)
{
	api_rec(j, AGENT_REC_RUNTIME_API, tid, cbid, start, end, corr);
}

static void drv(struct gpu_join *j, uint32_t tid, uint32_t cbid, uint64_t start, uint64_t end,
		uint32_t corr)
{
	api_rec(j, AGENT_REC_DRIVER_API, tid, cbid, start, end, corr);
}

static void kernel(struct gpu_join *j, uint32_t corr, uint32_t stream, uint64_t start,
		   const char *name)
{
	struct agent_record r = { .type = AGENT_REC_KERNEL, .correlation = corr, .stream = stream,
				  .start_ns = start, .end_ns = start + 1000 };

	gpu_join__record(j, 1, &r, name);
}

static const struct emitted *find(uint32_t tag)
{
	for (int i = 0; i < nr_emitted; i++)
		if (emitted[i].tag == tag)
			return &emitted[i];
	return NULL;
}

static const struct flow *flow_of(uint32_t corr)
{
	const struct flow *f = NULL;
	int n = 0;

	for (int i = 0; i < nr_flows; i++)
		if (flows[i].corr == corr) {
			f = &flows[i];
			n++;
		}
	CHECK(n <= 1, "correlation %u: %d arrows, want at most one", corr, n);
	return f;
}

/* call tag was joined to correlation corr, and its arrow goes to the kernel named name that
 * started at work_start */
static void expect_pair(uint32_t tag, uint32_t corr, const char *name, uint64_t work_start)
{
	const struct emitted *e = find(tag);
	const struct flow *f;

	CHECK(e != NULL, "call %u was written", tag);
	if (!e)
		return;
	CHECK(e->res.status == GPU_JOIN_JOINED && e->res.correlation == corr,
	      "call %u: %s correlation %u, want joined to %u", tag,
	      gpu_join__status_str(e->res.status), e->res.correlation, corr);
	f = flow_of(corr);
	CHECK(f && f->tid == e->tid && f->work_start == work_start,
	      "call %u: arrow %u to the kernel at %llu, want one from its thread to %llu", tag,
	      corr, f ? (unsigned long long)f->work_start : 0ULL,
	      (unsigned long long)work_start);
	if (name)
		CHECK_STR(e->kernel, name);
	/* an entry-only call is drawn with CUPTI's times, its arrow from CUPTI's start */
	CHECK(f && f->host_ts == e->res.api_start, "call %u: arrow from %llu, want %llu", tag,
	      f ? (unsigned long long)f->host_ts : 0ULL, (unsigned long long)e->res.api_start);
}

static void expect_status(uint32_t tag, enum gpu_join_status st)
{
	const struct emitted *e = find(tag);

	CHECK(e && e->res.status == st, "call %u: %s, want %s", tag,
	      e ? gpu_join__status_str(e->res.status) : "not written", gpu_join__status_str(st));
}

/* The issue's example: 4 launches 8 us apart, each with its nested cuLaunchKernel record.
 * CUPTI numbers every API call: runtime 100, driver 101, runtime 102... The old join took the
 * earliest record after the probe and gave 100,101,102,103. */
static void test_issue_example(void)
{
	struct gpu_join *j = setup();
	uint64_t t0 = 10 * SEC, k[4];
	struct gpu_join_stats st;
	char name[16];

	for (int i = 0; i < 4; i++) {
		uint64_t ts = t0 + i * 8000;

		launch(j, i, 77, ts);
		/* CUPTI writes at the call's exit: the nested driver record first */
		drv(j, 77, DRV_LAUNCH, ts + 900, ts + 2500, 101 + 2 * i);
		rt(j, 77, RT_LAUNCH, ts + 300, ts + 3000, 100 + 2 * i);
	}
	for (int i = 0; i < 4; i++) {
		k[i] = t0 + 40000 + i * 5000;
		snprintf(name, sizeof(name), "k%d", i);
		kernel(j, 100 + 2 * i, 7, k[i], name);
	}
	gpu_join__flush(j, t0 + SEC / 10, MAX_WAIT);
	/* three windows are closed by the next launch and CUPTI went past them; the last one
	 * waits (its window is open until the next call or max_wait) */
	CHECK(nr_emitted == 3, "3 decided while the last launch's window is open, got %d",
	      nr_emitted);
	gpu_join__flush(j, t0 + SEC, 0);
	for (int i = 0; i < 4; i++) {
		snprintf(name, sizeof(name), "k%d", i);
		expect_pair(i, 100 + 2 * i, name, k[i]);
		CHECK(find(i) && find(i)->res.api_end == t0 + i * 8000 + 3000,
		      "launch %d: CUPTI's end", i);
	}
	gpu_join__stats(j, &st);
	CHECK(st.joined == 4 && st.records_nested == 4 && st.records_unprobed == 0 &&
	      st.work_unclaimed == 0 && st.flows == 4,
	      "joined %llu nested %llu unprobed %llu work_unclaimed %llu flows %llu",
	      (unsigned long long)st.joined, (unsigned long long)st.records_nested,
	      (unsigned long long)st.records_unprobed, (unsigned long long)st.work_unclaimed,
	      (unsigned long long)st.flows);
	gpu_join__free(j);
}

/* 3 threads, launches 2 us apart on each, interleaved; every launch has its nested driver
 * record and is followed by an unprobed cudaGetLastError. CUPTI's correlation ids are
 * handed out in call order across threads; each thread's records come in its own buffer. */
static void test_three_threads(void)
{
	struct gpu_join *j = setup();
	uint64_t t0 = 20 * SEC;
	uint32_t corr = 1000, want[3][8];
	uint64_t kstart[3][8];
	struct gpu_join_stats st;
	struct { uint32_t tid, cbid, corr; uint64_t s, e; bool driver; } recs[3][24];
	int nr[3] = {};

	for (int i = 0; i < 8; i++)
		for (int t = 0; t < 3; t++) {
			uint64_t ts = t0 + i * 2000 + t * 600;
			uint32_t tid = 100 + t;

			launch(j, t * 100 + i, tid, ts);
			want[t][i] = corr;
			recs[t][nr[t]++] = (typeof(recs[0][0])){ tid, DRV_LAUNCH, corr + 1, ts + 400,
								  ts + 1200, true };
			recs[t][nr[t]++] = (typeof(recs[0][0])){ tid, RT_LAUNCH, corr, ts + 150,
								  ts + 1300, false };
			recs[t][nr[t]++] = (typeof(recs[0][0])){ tid, RT_GETLASTERR, corr + 2,
								  ts + 1450, ts + 1500, false };
			corr += 3;
		}
	/* buffers of threads 2, 0, 1 */
	for (int b = 0; b < 3; b++) {
		int t = (b + 2) % 3;

		for (int r = 0; r < nr[t]; r++) {
			if (recs[t][r].driver)
				drv(j, recs[t][r].tid, recs[t][r].cbid, recs[t][r].s, recs[t][r].e,
				    recs[t][r].corr);
			else
				rt(j, recs[t][r].tid, recs[t][r].cbid, recs[t][r].s, recs[t][r].e,
				   recs[t][r].corr);
		}
	}
	/* kernels run in stream order, one stream per thread */
	for (int i = 0; i < 8; i++)
		for (int t = 0; t < 3; t++) {
			kstart[t][i] = t0 + 100000 + (i * 3 + t) * 3000;
			kernel(j, want[t][i], 10 + t, kstart[t][i], t == 1 ? "mid" : "other");
		}
	gpu_join__flush(j, t0 + SEC / 5, MAX_WAIT);
	gpu_join__flush(j, t0 + SEC, 0);
	for (int t = 0; t < 3; t++)
		for (int i = 0; i < 8; i++)
			expect_pair(t * 100 + i, want[t][i], t == 1 ? "mid" : "other", kstart[t][i]);
	gpu_join__stats(j, &st);
	CHECK(st.joined == 24 && st.records_nested == 24 && st.records_unprobed == 24 &&
	      st.ambiguous == 0 && st.no_record == 0,
	      "joined %llu nested %llu unprobed %llu ambiguous %llu no_record %llu",
	      (unsigned long long)st.joined, (unsigned long long)st.records_nested,
	      (unsigned long long)st.records_unprobed, (unsigned long long)st.ambiguous,
	      (unsigned long long)st.no_record);
	gpu_join__free(j);
}

/* CUPTI enabled after the third launch: those had no record. A later record of the same API
 * must not be taken by them (the fourth's window starts at the fourth's probe). */
static void test_enabled_mid_stream(void)
{
	struct gpu_join *j = setup();
	uint64_t t0 = 30 * SEC;
	struct gpu_join_stats st;

	for (int i = 0; i < 6; i++) {
		uint64_t ts = t0 + i * 5000;

		launch(j, i, 5, ts);
		if (i < 3)
			continue;
		drv(j, 5, DRV_LAUNCH, ts + 500, ts + 1500, 11 + 2 * (i - 3));
		rt(j, 5, RT_LAUNCH, ts + 200, ts + 2000, 10 + 2 * (i - 3));
		kernel(j, 10 + 2 * (i - 3), 3, t0 + 100000 + i, "late");
	}
	gpu_join__flush(j, t0 + SEC, 0);
	for (int i = 0; i < 3; i++)
		expect_status(i, GPU_JOIN_BEFORE_ENABLE);
	for (int i = 3; i < 6; i++)
		expect_pair(i, 10 + 2 * (i - 3), "late", t0 + 100000 + i);
	/* the agent's own enable time, when tptrace knows it, says the same for this pid */
	gpu_join__stats(j, &st);
	CHECK(st.before_enable == 3 && st.joined == 3, "before_enable %llu joined %llu",
	      (unsigned long long)st.before_enable, (unsigned long long)st.joined);
	gpu_join__free(j);
}

/* CUPTI lost the runtime record of the third launch (its nested driver record arrived): that
 * launch stays unjoined, the nested driver record is not taken, the neighbours keep theirs,
 * and the third kernel is GPU work no call carries. */
static void test_dropped_record(void)
{
	struct gpu_join *j = setup();
	uint64_t t0 = 40 * SEC;
	struct gpu_join_stats st;

	for (int i = 0; i < 4; i++) {
		uint64_t ts = t0 + i * 3000;

		launch(j, i, 9, ts);
		drv(j, 9, DRV_LAUNCH, ts + 500, ts + 1500, 201 + 2 * i);
		if (i != 2)
			rt(j, 9, RT_LAUNCH, ts + 200, ts + 2000, 200 + 2 * i);
		kernel(j, 200 + 2 * i, 1, t0 + 50000 + i * 1000, "k");
	}
	gpu_join__flush(j, t0 + SEC, 0);
	expect_pair(0, 200, "k", t0 + 50000);
	expect_pair(1, 202, "k", t0 + 51000);
	expect_status(2, GPU_JOIN_NO_RECORD);
	expect_pair(3, 206, "k", t0 + 53000);
	CHECK(!flow_of(204), "no arrow for the lost record's kernel");
	gpu_join__stats(j, &st);
	CHECK(st.no_record == 1 && st.work_unclaimed == 1 && st.records_unprobed == 1 &&
	      st.records_nested == 3,
	      "no_record %llu work_unclaimed %llu unprobed %llu nested %llu",
	      (unsigned long long)st.no_record, (unsigned long long)st.work_unclaimed,
	      (unsigned long long)st.records_unprobed, (unsigned long long)st.records_nested);
	gpu_join__free(j);
}

/* Two cudaLaunchKernel records in one launch's window (the probe of the other launch was
 * lost): ambiguous, reported, neither taken; its neighbours are unaffected. */
static void test_ambiguous(void)
{
	struct gpu_join *j = setup();
	uint64_t t0 = 50 * SEC;
	struct gpu_join_stats st;

	launch(j, 0, 4, t0);
	rt(j, 4, RT_LAUNCH, t0 + 200, t0 + 1000, 300);
	launch(j, 1, 4, t0 + 4000);
	rt(j, 4, RT_LAUNCH, t0 + 4200, t0 + 5000, 301);
	rt(j, 4, RT_LAUNCH, t0 + 5200, t0 + 6000, 302);
	launch(j, 2, 4, t0 + 8000);
	rt(j, 4, RT_LAUNCH, t0 + 8200, t0 + 9000, 303);
	for (int c = 300; c <= 303; c++)
		kernel(j, c, 2, t0 + 20000 + c, "a");
	gpu_join__flush(j, t0 + SEC, 0);
	expect_pair(0, 300, "a", t0 + 20300);
	expect_status(1, GPU_JOIN_AMBIGUOUS);
	CHECK(find(1) && find(1)->res.candidates == 2, "two candidates");
	expect_pair(2, 303, "a", t0 + 20303);
	CHECK(!flow_of(301) && !flow_of(302), "no arrow guessed");
	gpu_join__stats(j, &st);
	CHECK(st.ambiguous == 1 && st.records_ambiguous == 2 && st.work_unclaimed == 2,
	      "ambiguous %llu records_ambiguous %llu work_unclaimed %llu",
	      (unsigned long long)st.ambiguous, (unsigned long long)st.records_ambiguous,
	      (unsigned long long)st.work_unclaimed);
	gpu_join__free(j);
}

/* Triton: kernels launched straight through the driver (cuLaunchKernel, cuLaunchKernelEx),
 * with DRIVER records only, between runtime launches whose nested cuLaunchKernel records
 * carry the same cbid. Each driver launch joins its own record. */
static void test_driver_launches(void)
{
	struct gpu_join *j = setup();
	uint64_t t0 = 60 * SEC, ts;

	ts = t0;
	call_ex(j, 0, 3, CUDA_DOM_DRIVER, DRV_LAUNCH, ts, 0);
	drv(j, 3, DRV_LAUNCH, ts + 100, ts + 900, 400);
	ts = t0 + 1500;
	launch(j, 1, 3, ts);			/* runtime: nested cuLaunchKernel 402 */
	drv(j, 3, DRV_LAUNCH, ts + 300, ts + 900, 402);
	rt(j, 3, RT_LAUNCH, ts + 100, ts + 1000, 401);
	ts = t0 + 3000;
	call_ex(j, 2, 3, CUDA_DOM_DRIVER, DRV_LAUNCH_EX, ts, 0);
	drv(j, 3, DRV_LAUNCH_EX, ts + 100, ts + 800, 403);
	ts = t0 + 4500;
	call_ex(j, 3, 3, CUDA_DOM_DRIVER, DRV_LAUNCH, ts, 0);
	drv(j, 3, DRV_LAUNCH, ts + 100, ts + 800, 404);
	/* a synchronous driver copy, with its return probe */
	ts = t0 + 6000;
	call_ex(j, 4, 3, CUDA_DOM_DRIVER, DRV_MEMCPY_HTOD, ts, ts + 30000);
	drv(j, 3, DRV_MEMCPY_HTOD, ts + 100, ts + 29000, 405);
	kernel(j, 400, 0, t0 + 10000, "triton_poi_fused_add_0");
	kernel(j, 401, 0, t0 + 11000, "runtime_k");
	kernel(j, 403, 0, t0 + 12000, "triton_red_fused_sum_1");
	kernel(j, 404, 0, t0 + 13000, "triton_poi_fused_add_0");
	{
		struct agent_record r = { .type = AGENT_REC_MEMCPY, .correlation = 405,
					  .start_ns = t0 + 50000, .end_ns = t0 + 60000 };

		gpu_join__record(j, 1, &r, NULL);
	}
	gpu_join__flush(j, t0 + SEC, 0);
	expect_pair(0, 400, "triton_poi_fused_add_0", t0 + 10000);
	expect_pair(1, 401, "runtime_k", t0 + 11000);
	expect_pair(2, 403, "triton_red_fused_sum_1", t0 + 12000);
	expect_pair(3, 404, "triton_poi_fused_add_0", t0 + 13000);
	/* a call with a return probe keeps its probe times; its arrow starts at its entry */
	{
		const struct emitted *e = find(4);
		const struct flow *f = flow_of(405);

		CHECK(e && e->res.status == GPU_JOIN_JOINED && e->res.correlation == 405,
		      "cuMemcpyHtoD joined to 405");
		CHECK(f && f->host_ts == t0 + 6000 && f->work_start == t0 + 50000,
		      "cuMemcpyHtoD arrow from its probe to its copy");
	}
	gpu_join__free(j);
}

/* Records come late, in buffers completed after the next calls were made: nothing is decided
 * before CUPTI delivered past a call's window (the flush bound, now), and the join is the
 * same as in order. */
static void add_buffer1(struct gpu_join *j, uint64_t t0)
{
	for (int i = 0; i < 3; i++) {
		uint64_t ts = t0 + i * 2000;

		drv(j, 8, DRV_LAUNCH, ts + 400, ts + 1000, 501 + 2 * i);
		rt(j, 8, RT_LAUNCH, ts + 100, ts + 1100, 500 + 2 * i);
		rt(j, 8, RT_GETLASTERR, ts + 1300, ts + 1350, 900 + i);
	}
}

static void add_buffer2(struct gpu_join *j, uint64_t t0)
{
	for (int i = 3; i < 6; i++) {
		uint64_t ts = t0 + i * 2000;

		drv(j, 8, DRV_LAUNCH, ts + 400, ts + 1000, 501 + 2 * i);
		rt(j, 8, RT_LAUNCH, ts + 100, ts + 1100, 500 + 2 * i);
	}
	/* the sync's own record: CUPTI is past the last launch */
	rt(j, 8, CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, t0 + 12100, t0 + 90000,
	   520);
}

static void test_late_buffers(void)
{
	struct gpu_join *j = setup();
	uint64_t t0 = 70 * SEC;

	for (int i = 0; i < 6; i++)
		launch(j, i, 8, t0 + i * 2000);
	/* a sync (not joined, but probed) ends the last launch's window */
	gpu_join__mark(j, 1, 8, t0 + 12000);
	gpu_join__flush(j, t0, MAX_WAIT);
	CHECK(nr_emitted == 0, "nothing decided before CUPTI delivered, got %d", nr_emitted);
	/* the first buffer: launches 0..2, by a flush that began at t0 + 5000 */
	add_buffer1(j, t0);
	for (int i = 0; i < 6; i++)
		kernel(j, 500 + 2 * i, 4, t0 + 30000 + i * 4000, "late");
	gpu_join__flush(j, t0 + 5000, MAX_WAIT);
	/* launch 2's window runs to launch 3's probe, past what the flush vouches for: a record
	 * of that window may still be in the next buffer, so it waits too */
	CHECK(nr_emitted == 2 && find(0) && find(1), "launches 0 and 1 decided, got %d",
	      nr_emitted);
	CHECK(!find(2) && !find(3), "launches 2 and 3 wait for the next buffer");
	add_buffer2(j, t0);
	gpu_join__flush(j, t0 + SEC / 5, MAX_WAIT);
	CHECK(nr_emitted == 6, "all decided once delivered, got %d", nr_emitted);
	for (int i = 0; i < 6; i++)
		expect_pair(i, 500 + 2 * i, "late", t0 + 30000 + i * 4000);
	gpu_join__free(j);
}

/* CUPTI hands back a buffer filled later before one filled earlier (tests/sim/cupti does it
 * by default): the thread's newest record is past every window, but the records of launches
 * 0..2 are not in yet. Nothing is decided until a flush vouches for them; a join that took the
 * newest record as proof would call launches 0..2 "no CUPTI record". */
static void test_out_of_order_buffers(void)
{
	struct gpu_join *j = setup();
	uint64_t t0 = 75 * SEC;

	for (int i = 0; i < 6; i++)
		launch(j, i, 8, t0 + i * 2000);
	gpu_join__mark(j, 1, 8, t0 + 12000);
	for (int i = 0; i < 6; i++)
		kernel(j, 500 + 2 * i, 4, t0 + 30000 + i * 4000, "ooo");
	/* the later buffer first, delivered as it filled: no flush has completed since t0 */
	add_buffer2(j, t0);
	gpu_join__flush(j, t0, MAX_WAIT);
	CHECK(!find(0) && !find(1) && !find(2),
	      "launches 0..2 wait for the earlier buffer, got %d decided", nr_emitted);
	add_buffer1(j, t0);
	gpu_join__flush(j, t0 + SEC / 5, MAX_WAIT);
	CHECK(nr_emitted == 6, "all decided once delivered, got %d", nr_emitted);
	for (int i = 0; i < 6; i++)
		expect_pair(i, 500 + 2 * i, "ooo", t0 + 30000 + i * 4000);
	gpu_join__free(j);
}

/* A call whose record never comes is decided after max_wait, not before; memory is given
 * back: records and work older than twice that leave the join (and are counted). */
static void test_wait_policy(void)
{
	struct gpu_join *j = setup();
	uint64_t t0 = 80 * SEC;
	struct gpu_join_stats st;

	rt(j, 6, RT_GETLASTERR, t0 - 1000, t0 - 900, 600);	/* CUPTI is on */
	launch(j, 0, 6, t0);
	gpu_join__flush(j, t0 + SEC, MAX_WAIT);
	CHECK(nr_emitted == 0, "waits up to max_wait");
	gpu_join__flush(j, t0 + MAX_WAIT + 1, MAX_WAIT);
	expect_status(0, GPU_JOIN_NO_RECORD);
	kernel(j, 777, 0, t0 + 10, "orphan");
	gpu_join__flush(j, t0 + 3 * MAX_WAIT, MAX_WAIT);
	gpu_join__flush(j, t0 + 6 * MAX_WAIT, MAX_WAIT);
	gpu_join__stats(j, &st);
	CHECK(st.records_unprobed == 1 && st.work_unclaimed == 1,
	      "old record and work left and were counted: unprobed %llu work_unclaimed %llu",
	      (unsigned long long)st.records_unprobed, (unsigned long long)st.work_unclaimed);
	gpu_join__free(j);
}

/* A CUDA graph replay: one cudaGraphLaunch, one correlation, several kernels on two streams
 * arriving out of start order; the arrow goes to the first, exactly one arrow. */
static void test_graph_replay(void)
{
	struct gpu_join *j = setup();
	uint64_t t0 = 90 * SEC;

	call_ex(j, 0, 2, CUDA_DOM_RUNTIME, RT_GRAPH, t0, 0);
	drv(j, 2, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, t0 + 300, t0 + 2000, 701);
	rt(j, 2, RT_GRAPH, t0 + 100, t0 + 2200, 700);
	gpu_join__mark(j, 1, 2, t0 + 5000);
	rt(j, 2, RT_GETLASTERR, t0 + 5100, t0 + 5200, 702);
	kernel(j, 700, 5, t0 + 30000, "g_second");
	kernel(j, 700, 6, t0 + 20000, "g_first");
	kernel(j, 700, 5, t0 + 40000, "g_third");
	gpu_join__flush(j, t0 + SEC, 0);
	expect_pair(0, 700, "g_first", t0 + 20000);
	CHECK(nr_flows == 1 && flows[0].stream == 6, "one arrow, to stream 6");
	gpu_join__free(j);
}

/* A runtime call with a return probe (cudaMemcpy) takes the record inside [entry, return]. */
static void test_returned_call(void)
{
	struct gpu_join *j = setup();
	uint64_t t0 = 95 * SEC;

	call_ex(j, 0, 12, CUDA_DOM_RUNTIME, RT_MEMCPY, t0, t0 + 50000);
	drv(j, 12, DRV_MEMCPY_HTOD, t0 + 400, t0 + 48000, 801);
	rt(j, 12, RT_MEMCPY, t0 + 100, t0 + 49000, 800);
	gpu_join__flush(j, t0 + SEC, 0);
	CHECK(find(0) && find(0)->res.status == GPU_JOIN_JOINED && find(0)->res.correlation == 800,
	      "cudaMemcpy joined to 800");
	gpu_join__free(j);
}

/* cbids are numbered per domain: the driver call numbered like cudaLaunchKernel's runtime
 * cbid, nested in the launch, is not the launch's record. */
static void test_domain(void)
{
	struct gpu_join *j = setup();
	uint64_t t0 = 97 * SEC;

	launch(j, 0, 13, t0);
	drv(j, 13, RT_LAUNCH, t0 + 150, t0 + 250, 851);
	rt(j, 13, RT_LAUNCH, t0 + 100, t0 + 1000, 850);
	kernel(j, 850, 0, t0 + 5000, "d");
	/* __cudaLaunchKernel enters cudaLaunchKernel: either cbid is its own, nothing else */
	{
		struct gpu_join_call c = { .pid = 1, .tid = 13, .domain = CUDA_DOM_RUNTIME,
					   .cbid = CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000,
					   .cbid_alt = RT_LAUNCH, .gpu_work = true, .ts = t0 + 3000 };
		uint32_t tag = 1;

		gpu_join__add_call(j, &c, &tag);
		rt(j, 13, RT_GETLASTERR, t0 + 3100, t0 + 3200, 852);
		rt(j, 13, RT_LAUNCH, t0 + 3300, t0 + 4000, 853);
		kernel(j, 853, 0, t0 + 6000, "h");
	}
	gpu_join__flush(j, t0 + SEC, 0);
	expect_pair(0, 850, "d", t0 + 5000);
	expect_pair(1, 853, "h", t0 + 6000);
	gpu_join__free(j);
}

/* tptrace knows when each agent said ENABLED: a call before it has no record, even when
 * another process's records started earlier. */
static void test_enable_mark(void)
{
	struct gpu_join *j = setup();
	uint64_t t0 = 98 * SEC;
	struct gpu_join_call c = { .pid = 2, .tid = 21, .domain = CUDA_DOM_RUNTIME,
				   .cbid = RT_LAUNCH, .gpu_work = true, .ts = t0 + 1000 };
	uint32_t tag = 0;

	rt(j, 20, RT_LAUNCH, t0, t0 + 500, 860);	/* pid 1's thread, CUPTI on there */
	gpu_join__set_enabled(j, 2, t0 + 5000);
	gpu_join__add_call(j, &c, &tag);
	c.ts = t0 + 6000;
	tag = 1;
	gpu_join__add_call(j, &c, &tag);
	gpu_join__flush(j, t0 + SEC, 0);
	expect_status(0, GPU_JOIN_BEFORE_ENABLE);
	expect_status(1, GPU_JOIN_NO_RECORD);
	gpu_join__free(j);
}

/* Two processes, each with its own CUPTI: the same correlation ids (each counts from its own
 * start) and the same thread id (two pid namespaces). Each call joins its own process's
 * record and its own process's kernel, the counts are each process's, and process 2, whose
 * agent was enabled later, has its early calls BEFORE_ENABLE even though process 1's records
 * on "the same" thread fit their windows. */
static void test_two_processes(void)
{
	struct gpu_join *j = setup();
	struct gpu_join_stats st1, st2, all;
	uint64_t t0 = 120 * SEC;
	uint32_t tag = 0;

	gpu_join__set_enabled(j, 1, t0);
	gpu_join__set_enabled(j, 2, t0 + 20000);
	for (int i = 0; i < 4; i++) {
		uint64_t ts = t0 + 1000 + i * 8000;

		for (uint32_t pid = 1; pid <= 2; pid++) {
			struct gpu_join_call c = { .pid = pid, .tid = 7, .domain = CUDA_DOM_RUNTIME,
						   .cbid = RT_LAUNCH, .gpu_work = true,
						   .ts = ts + pid * 10 };
			struct agent_record r = { .type = AGENT_REC_RUNTIME_API, .tid = 7,
						  .cbid = RT_LAUNCH, .start_ns = ts + pid * 10 + 200,
						  .end_ns = ts + pid * 10 + 900,
						  .correlation = 50 + i };
			struct agent_record k = { .type = AGENT_REC_KERNEL, .correlation = 50 + i,
						  .stream = pid, .start_ns = ts + 3000 + pid,
						  .end_ns = ts + 4000 };

			tag = pid * 100 + i;
			gpu_join__add_call(j, &c, &tag);
			/* process 2's CUPTI was not on for its first two calls */
			if (pid == 2 && ts + 20 < t0 + 20000)
				continue;
			gpu_join__record(j, pid, &r, NULL);
			gpu_join__record(j, pid, &k, pid == 1 ? "k_one" : "k_two");
		}
	}
	gpu_join__flush(j, t0 + SEC, 0);
	for (int i = 0; i < nr_emitted; i++) {
		const struct emitted *e = &emitted[i];
		bool early = e->pid == 2 && e->tag % 100 < 3;

		CHECK(e->pid == e->tag / 100, "call %u written for pid %u", e->tag, e->pid);
		CHECK(early ? e->res.status == GPU_JOIN_BEFORE_ENABLE :
		      e->res.status == GPU_JOIN_JOINED && e->res.correlation == 50 + e->tag % 100 &&
		      !strcmp(e->kernel, e->pid == 1 ? "k_one" : "k_two"),
		      "call %u: %s corr %u kernel %s", e->tag, gpu_join__status_str(e->res.status),
		      e->res.correlation, e->kernel);
	}
	CHECK(nr_flows == 5, "arrows %d, want 4 + 1", nr_flows);
	for (int i = 0; i < nr_flows; i++)
		CHECK(flows[i].stream == flows[i].pid, "arrow of corr %u from pid %u ends on the "
		      "other process's kernel (stream %u)", flows[i].corr, flows[i].pid,
		      flows[i].stream);
	CHECK(gpu_join__stats_pid(j, 1, &st1) == 0 && gpu_join__stats_pid(j, 2, &st2) == 0,
	      "per-process counts");
	gpu_join__stats(j, &all);
	CHECK(st1.calls == 4 && st1.joined == 4 && st1.before_enable == 0 && st1.flows == 4 &&
	      st1.records == 4 && st1.work_records == 4 && st1.work_unclaimed == 0,
	      "pid 1: calls %llu joined %llu flows %llu", (unsigned long long)st1.calls,
	      (unsigned long long)st1.joined, (unsigned long long)st1.flows);
	CHECK(st2.calls == 4 && st2.joined == 1 && st2.before_enable == 3 && st2.flows == 1 &&
	      st2.records == 1 && st2.work_records == 1,
	      "pid 2: calls %llu joined %llu before_enable %llu", (unsigned long long)st2.calls,
	      (unsigned long long)st2.joined, (unsigned long long)st2.before_enable);
	CHECK(all.calls == 8 && all.joined == 5 && all.before_enable == 3 && all.flows == 5,
	      "total: calls %llu joined %llu", (unsigned long long)all.calls,
	      (unsigned long long)all.joined);
	CHECK(gpu_join__stats_pid(j, 3, &st1) == -ENOENT, "pid 3 unknown");
	gpu_join__free(j);
}

/* A long trace: 4 threads x 25000 launches 2 us apart, records in buffers of 1000 calls
 * delivered 200 ms late, flushed as tptrace does. Every launch joins its own record and the
 * join holds only seconds of state (a per-call walk over everything would not finish). */
static void test_scale(void)
{
	enum { THREADS = 4, PER = 25000, BUF = 1000 };
	struct gpu_join *j = setup();
	uint64_t t0 = 200 * SEC;
	struct gpu_join_stats st;
	int wrong = 0, total = 0;

	for (int b = 0; b < PER / BUF; b++) {
		for (int i = b * BUF; i < (b + 1) * BUF; i++)
			for (int t = 0; t < THREADS; t++)
				launch(j, t * PER + i, 1000 + t, t0 + i * 2000ULL + t * 500);
		for (int i = b * BUF; i < (b + 1) * BUF; i++)
			for (int t = 0; t < THREADS; t++) {
				uint64_t ts = t0 + i * 2000ULL + t * 500;
				uint32_t corr = 3 * (t * PER + i) + 1;

				drv(j, 1000 + t, DRV_LAUNCH, ts + 400, ts + 1200, corr + 1);
				rt(j, 1000 + t, RT_LAUNCH, ts + 150, ts + 1300, corr);
				rt(j, 1000 + t, RT_GETLASTERR, ts + 1400, ts + 1450, corr + 2);
				kernel(j, corr, t, ts + 50000, "s");
			}
		gpu_join__flush(j, t0 + (b + 1) * BUF * 2000ULL + SEC / 5, MAX_WAIT);
		/* count and empty the log as we go */
		for (int e = 0; e < nr_emitted; e++) {
			uint32_t tag = emitted[e].tag;

			total++;
			wrong += emitted[e].res.status != GPU_JOIN_JOINED ||
				 emitted[e].res.correlation != 3 * tag + 1;
		}
		nr_emitted = nr_flows = 0;
	}
	gpu_join__flush(j, t0 + 10 * SEC, 0);
	for (int e = 0; e < nr_emitted; e++) {
		total++;
		wrong += emitted[e].res.status != GPU_JOIN_JOINED ||
			 emitted[e].res.correlation != 3 * emitted[e].tag + 1;
	}
	gpu_join__stats(j, &st);
	CHECK(total == THREADS * PER && wrong == 0, "%d calls written, %d joined wrong", total,
	      wrong);
	CHECK(st.joined == THREADS * PER && st.flows == THREADS * PER &&
	      st.records_nested == THREADS * PER && st.records_unprobed == THREADS * PER,
	      "joined %llu flows %llu nested %llu unprobed %llu", (unsigned long long)st.joined,
	      (unsigned long long)st.flows, (unsigned long long)st.records_nested,
	      (unsigned long long)st.records_unprobed);
	gpu_join__free(j);
}

int main(void)
{
	test_issue_example();
	test_three_threads();
	test_enabled_mid_stream();
	test_dropped_record();
	test_ambiguous();
	test_driver_launches();
	test_late_buffers();
	test_out_of_order_buffers();
	test_wait_policy();
	test_graph_replay();
	test_returned_call();
	test_domain();
	test_enable_mark();
	test_two_processes();
	test_scale();
	return check_done();
}
