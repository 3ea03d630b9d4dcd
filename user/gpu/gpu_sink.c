// SPDX-License-Identifier: MIT
/* The --gpu join as a sink of the session, fed by the agents (gpu_sink.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "agent/agent_shm.h"
#include "calls.h"
#include "cuda_api.h"
#include "demangle.h"
#include "gpu.h"
#include "gpu_join.h"
#include "gpu_sink.h"
#include "growbuf.h"
#include "nccl_api.h"
#include "session.h"
#include "target.h"

/* A call that waited this long for its CUPTI records is decided with what arrived. */
#define JOIN_MAX_WAIT_NS	2000000000ULL
/* The clock the join gives up by: a call waits for its CUPTI records by the agents' flushes,
 * not by the wall clock, so a loaded host that delays the agents' thread delays the join
 * instead of leaving calls unjoined (launches unnamed). The slowest live agent sets it; one
 * that has not flushed for a minute (stopped, hung) no longer holds calls back. */
#define JOIN_AGENT_LAG_MAX_NS	60000000000ULL

struct gpu_sink_proc {
	struct gpu_sink *g;
	int pid;
	struct gpu_session *gpu;	/* NULL until attached (or fed by hand) */
};

struct gpu_sink {
	struct session *session;
	struct gpu_join *join;		/* made when the consumer subscribes */
	struct gpu_sink_consumer out;
	void *out_ctx;
	size_t user_bytes;		/* of each held frame's user bytes: the consumer's end */
	struct gpu_sink_proc **procs;	/* in the order they were set up */
	int nr_procs, cap_procs;
};

/* What the join keeps of a held call: the call as the session delivered it, the frame's user
 * bytes cut after the consumer's. */
struct held {
	struct tp_rec_ret ret;
	enum call_end end;
	uint64_t end_ns;
	bool has_ret;
	struct tp_rec_call rec;
	uint64_t user[];
};

static bool sink_hold(void *ctx, const struct call *c, void *user);

struct gpu_sink *gpu_sink__new(struct session *s)
{
	static const struct session_sink_ops ops = { .hold = sink_hold };
	struct gpu_sink *g = calloc(1, sizeof(*g));
	int err;

	if (!g)
		return NULL;
	g->session = s;
	err = session__add_sink(s, &ops, g, NULL);
	if (err) {
		free(g);
		errno = -err;
		return NULL;
	}
	return g;
}

void gpu_sink__free(struct gpu_sink *g)
{
	if (!g)
		return;
	gpu_join__free(g->join);
	for (int i = 0; i < g->nr_procs; i++)
		free(g->procs[i]);
	free(g->procs);
	free(g);
}

/* The join decided a call: back to the consumer as the session delivered it. */
static void join_emit(void *ctx, const struct gpu_join_call *jc, void *payload,
		      const struct gpu_join_result *r)
{
	struct gpu_sink *g = ctx;
	struct held *h = payload;
	struct call_frame f;
	struct call c = { .frame = &f, .ret = h->has_ret ? &h->ret : NULL, .end = h->end,
			  .end_ns = h->end_ns, .held = true };

	(void)jc;
	f.rec = h->rec;
	memcpy(f.user, h->user, g->user_bytes);
	memset((char *)f.user + g->user_bytes, 0, sizeof(f.user) - g->user_bytes);
	g->out.joined(g->out_ctx, &c, r);
}

static void join_flow(void *ctx, uint32_t correlation, const struct gpu_join_call *c,
		      uint64_t host_ts, uint32_t device, uint32_t context, uint32_t stream,
		      uint64_t work_start)
{
	struct gpu_sink *g = ctx;

	g->out.flow(g->out_ctx, (int)c->pid, (int)c->tid, correlation, host_ts, device, context,
		    stream, work_start);
}

int gpu_sink__subscribe(struct gpu_sink *g, const struct gpu_sink_consumer *ops, void *ctx)
{
	struct gpu_join_ops jops = { .ctx = g, .emit = join_emit, .flow = join_flow };
	int err;

	if (g->join)
		return -EBUSY;
	err = session__consume(g->session, ctx, g);
	if (err)
		return err;
	/* the consumer's bytes are among those used so far: the frame is kept up to there */
	g->user_bytes = session__user_used(g->session);
	g->join = gpu_join__new(&jops, sizeof(struct held) + g->user_bytes);
	if (!g->join)
		return -ENOMEM;
	g->out = *ops;
	g->out_ctx = ctx;
	return 0;
}

static bool sink_hold(void *ctx, const struct call *c, void *user)
{
	struct gpu_sink *g = ctx;
	const struct tp_rec_call *rec = &c->frame->rec;
	const struct tp_rec_ret *r = c->end == CALL_RETURNED ? c->ret : NULL;
	const struct cuda_api *api;
	uint64_t buf[(sizeof(struct held) + CALLS_USER_BYTES) / sizeof(uint64_t)];
	struct held *h = (struct held *)buf;
	struct gpu_join_call jc;

	(void)user;
	if (!g->join || session__driver_call_in_runtime(g->session, rec))
		return false;
	if (rec->api >= NCCL_API_BASE || !gpu_join__wants(rec->api)) {
		/* not joined itself, but it ends the window of the entry-only call before it */
		gpu_join__mark(g->join, rec->pid, rec->tid, rec->ts);
		return false;
	}
	api = &cuda_apis[rec->api];
	jc = (struct gpu_join_call){ .pid = rec->pid, .tid = rec->tid, .api = rec->api,
				     .domain = api->domain, .cbid = api->cbid,
				     .cbid_alt = api->cbid_alt, .gpu_work = api->gpu_work,
				     .ts = rec->ts, .ret_ts = r ? r->ts : 0 };
	memset(h, 0, sizeof(*h));
	h->rec = *rec;
	memcpy(h->user, c->frame->user, g->user_bytes);
	h->has_ret = r != NULL;
	if (r)
		h->ret = *r;
	h->end = c->end;
	/* unwound, exited, unfinished: it ended then */
	h->end_ns = c->end == CALL_UNWOUND || c->end == CALL_EXITED || c->end == CALL_UNFINISHED ?
		    c->end_ns : 0;
	/* out of memory: not held, written now unjoined */
	return !gpu_join__add_call(g->join, &jc, h);
}

struct gpu_sink_proc *gpu_sink__add_process(struct gpu_sink *g, int pid, const char *comm)
{
	struct gpu_sink_proc *p;
	int err;

	for (int i = 0; i < g->nr_procs; i++)
		if (g->procs[i]->pid == pid)
			return g->procs[i];
	if (ARRAY_RESERVE(g->procs, g->cap_procs, g->nr_procs + 1, 4) ||
	    !(p = calloc(1, sizeof(*p)))) {
		errno = ENOMEM;
		return NULL;
	}
	p->g = g;
	p->pid = pid;
	err = g->out.process ? g->out.process(g->out_ctx, pid, comm) : 0;
	if (err) {
		free(p);
		errno = -err;
		return NULL;
	}
	g->procs[g->nr_procs++] = p;
	return p;
}

void gpu_sink__attached(struct gpu_sink_proc *p, struct gpu_session *gpu, uint64_t enabled_ns)
{
	p->gpu = gpu;
	if (p->g->join)
		gpu_join__set_enabled(p->g->join, (uint32_t)p->pid, enabled_ns);
}

void gpu_sink__disabling(struct gpu_sink_proc *p, uint64_t ns)
{
	if (p->g->join)
		gpu_join__set_disabled(p->g->join, (uint32_t)p->pid, ns);
}

/* GPU work goes on the process's device/context/stream track right away; API records go to
 * the join, which holds them for the host calls they belong to. */
void gpu_sink__record(void *ctx, const struct agent_record *r)
{
	const struct gpu_sink_proc *p = ctx;
	struct gpu_sink *g = p->g;
	char *kernel;

	if (r->type != AGENT_REC_RUNTIME_API && r->type != AGENT_REC_DRIVER_API && g->out.record)
		g->out.record(g->out_ctx, p->pid, r);
	if (!g->join)
		return;
	switch (r->type) {
	case AGENT_REC_KERNEL:
		kernel = demangle(gpu__record_name(r));
		gpu_join__record(g->join, (uint32_t)p->pid, r, kernel);
		free(kernel);
		return;
	case AGENT_REC_RUNTIME_API:
	case AGENT_REC_DRIVER_API:
	case AGENT_REC_MEMCPY:
	case AGENT_REC_MEMSET:
		gpu_join__record(g->join, (uint32_t)p->pid, r, NULL);
		return;
	default:
		return;
	}
}

/* Each process's calls get the slack of its own agent's clock alignment. */
static void clocks_to_join(struct gpu_sink *g)
{
	for (int i = 0; i < g->nr_procs; i++) {
		struct gpu_stats st;

		if (!g->procs[i]->gpu)
			continue;
		gpu__stats(g->procs[i]->gpu, &st);
		gpu_join__set_clock(g->join, (uint32_t)g->procs[i]->pid, st.clock_samples,
				    st.clock_residual_ns, st.clock_window_ns);
	}
}

/* When the slowest live agent's last completed flush began (JOIN_AGENT_LAG_MAX_NS above). */
static uint64_t delivered_bound(struct gpu_sink *g, uint64_t now)
{
	uint64_t at = now;

	for (int i = 0; i < g->nr_procs; i++) {
		struct gpu_sink_proc *p = g->procs[i];
		struct target *t = session__target(g->session, p->pid);
		uint64_t d;

		if (!p->gpu || (t && target__exited(t)))
			continue;
		d = gpu__delivered_ns(p->gpu);
		if (d < at)
			at = d;
	}
	return now - at > JOIN_AGENT_LAG_MAX_NS ? now - JOIN_AGENT_LAG_MAX_NS : at;
}

void gpu_sink__poll(struct gpu_sink *g, uint64_t now)
{
	/* the agent's ring is our memory: it can be drained after the target died */
	for (int i = 0; i < g->nr_procs; i++)
		if (g->procs[i]->gpu)
			gpu__poll(g->procs[i]->gpu, gpu_sink__record, g->procs[i]);
	if (!g->join)
		return;
	clocks_to_join(g);
	gpu_join__flush(g->join, delivered_bound(g, now), JOIN_MAX_WAIT_NS);
}

void gpu_sink__finish(struct gpu_sink *g, uint64_t end_ns)
{
	if (!g->join)
		return;
	clocks_to_join(g);
	gpu_join__flush(g->join, end_ns, 0);
}

int gpu_sink__stats(const struct gpu_sink *g, struct gpu_join_stats *out)
{
	if (!g || !g->join)
		return -ENOENT;
	gpu_join__stats(g->join, out);
	return 0;
}

int gpu_sink__stats_pid(const struct gpu_sink *g, int pid, struct gpu_join_stats *out)
{
	if (!g || !g->join)
		return -ENOENT;
	return gpu_join__stats_pid(g->join, (uint32_t)pid, out);
}
