// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "agent/agent_shm.h"
#include "cuda_api.h"
#include "gpu_join.h"
#include "growbuf.h"
#include "hashmap.h"

/*
 * The slack is how far a CUPTI API timestamp may sit from the CLOCK_MONOTONIC reading it stands
 * for. The agent registers clock_gettime(CLOCK_MONOTONIC) as CUPTI's timestamp callback, the
 * clock bpf_ktime_get_ns() reads, so a record stamped inside a call is later than the probe at
 * its entry, and earlier than the probe of the next call, by the true order of events; the
 * only error is CUPTI's own (interpolated or cached) timestamps, which the agent measures as
 * clock_residual_ns (max |cuptiGetTimestamp - midpoint of the monotonic reads around it|).
 * Slack = residual + the sampling window (the bound of one sample) + a floor for the reads'
 * own latency. Until measured, a conservative default.
 */
#define SLACK_FLOOR_NS		250ULL
#define SLACK_DEFAULT_NS	2000ULL

/* Counted for the process and in the total. */
#define COUNT(j, p, field) do { (j)->st.field++; (p)->st.field++; } while (0)

struct jrec {				/* one CUPTI API record */
	uint64_t start, end;
	uint32_t corr, cbid;
	uint8_t domain;			/* enum cuda_api_domain */
	bool claimed, ambiguous;
};

struct jcall {				/* a host call waiting for its record */
	struct gpu_join_call call;
	uint64_t next_ts;		/* entry-only: the thread's next probed call; 0 unknown */
	uint64_t arrived_ns;		/* the join's clock when it came in */
	bool decided;
	struct gpu_join_result res;
	unsigned char payload[];
};

/* One process: CUPTI is per process (its own correlation counter, clock alignment and enable
 * time), so is everything the join keys and counts. */
struct jproc {
	uint32_t pid;
	uint64_t slack;
	uint64_t enabled;		/* its agent's enable time; 0 not told */
	uint64_t disabled;		/* when tptrace began turning its CUPTI off; 0 not yet */
	uint64_t first_record;		/* its earliest API record start; 0 none yet */
	struct gpu_join_stats st;
};

struct jthread {
	uint32_t pid, tid;
	struct jproc *proc;
	struct jcall **calls;		/* by entry time */
	size_t nr_calls, cap_calls;
	struct jrec *recs;		/* by start */
	size_t nr_recs, cap_recs;
};

struct jwork {				/* GPU work of one (process, correlation) */
	struct jproc *proc;
	uint64_t start;			/* the first (earliest) work's start */
	uint32_t device, context, stream;
	char *kernel;			/* name of that first kernel */
	uint64_t nr_records;
	uint64_t seen_ns;
	bool claimed, flow_drawn;
	struct gpu_join_call call;	/* the claiming call, for an arrow drawn later */
	uint64_t host_ts;
};

struct gpu_join {
	struct gpu_join_ops ops;
	size_t payload_size;
	/* keyed by process: thread ids and CUPTI correlation ids are per process */
	struct u64map procs;		/* pid + 1 -> struct jproc* */
	struct u64map threads;		/* pid << 32 | tid, + 1 -> struct jthread* */
	struct u64map work;		/* pid << 32 | correlation -> struct jwork* */
	uint64_t now, last_sweep;
	struct gpu_join_stats st;
};

static const char *status_names[] = {
	[GPU_JOIN_JOINED] = "joined",
	[GPU_JOIN_BEFORE_ENABLE] = "before CUPTI was enabled",
	[GPU_JOIN_AFTER_DISABLE] = "after CUPTI was disabled",
	[GPU_JOIN_NO_RECORD] = "no CUPTI record",
	[GPU_JOIN_AMBIGUOUS] = "ambiguous",
};

const char *gpu_join__status_str(enum gpu_join_status s)
{
	return s <= GPU_JOIN_AMBIGUOUS ? status_names[s] : "?";
}

struct gpu_join *gpu_join__new(const struct gpu_join_ops *ops, size_t payload_size)
{
	struct gpu_join *j = calloc(1, sizeof(*j));

	if (!j)
		return NULL;
	j->ops = *ops;
	j->payload_size = payload_size;
	return j;
}

static void free_work(struct jwork *w)
{
	free(w->kernel);
	free(w);
}

void gpu_join__free(struct gpu_join *j)
{
	uint64_t v;

	if (!j)
		return;
	for (size_t it = 0; u64map__next(&j->threads, &it, NULL, &v);) {
		struct jthread *t = (struct jthread *)(uintptr_t)v;

		for (size_t i = 0; i < t->nr_calls; i++)
			free(t->calls[i]);
		free(t->calls);
		free(t->recs);
		free(t);
	}
	u64map__clear(&j->threads);
	for (size_t it = 0; u64map__next(&j->work, &it, NULL, &v);)
		free_work((struct jwork *)(uintptr_t)v);
	u64map__clear(&j->work);
	u64map__free_values(&j->procs);
	free(j);
}

static struct jproc *proc_get(struct gpu_join *j, uint32_t pid)
{
	bool created;
	struct jproc *p = u64map__get_or_alloc(&j->procs, (uint64_t)pid + 1, sizeof(*p), &created);

	if (p && created) {
		p->pid = pid;
		p->slack = SLACK_DEFAULT_NS;
	}
	return p;
}

void gpu_join__set_clock(struct gpu_join *j, uint32_t pid, uint32_t samples,
			 uint64_t residual_ns, uint64_t window_ns)
{
	struct jproc *p = proc_get(j, pid);

	if (p && samples)
		p->slack = residual_ns + window_ns + SLACK_FLOOR_NS;
}

void gpu_join__set_enabled(struct gpu_join *j, uint32_t pid, uint64_t enabled_ns)
{
	struct jproc *p = proc_get(j, pid);

	if (p)
		p->enabled = enabled_ns;
}

void gpu_join__set_disabled(struct gpu_join *j, uint32_t pid, uint64_t disabled_ns)
{
	struct jproc *p = proc_get(j, pid);

	if (p)
		p->disabled = disabled_ns;
}

bool gpu_join__wants(uint32_t api)
{
	const struct cuda_api *a;

	if (api >= (uint32_t)cuda_api_count)
		return false;
	a = &cuda_apis[api];
	/* work on a stream (its kernel/copy carries the correlation), or an entry-only call
	 * CUPTI reports (event record, stream wait): CUPTI's times give it a duration */
	return a->cbid && (a->gpu_work || !a->ret);
}

static inline uint64_t thread_key(uint32_t pid, uint32_t tid)
{
	return ((uint64_t)pid << 32 | tid) + 1;
}

/* correlation 0 is none: the key is never 0 when it is not */
static inline uint64_t work_key(uint32_t pid, uint32_t corr)
{
	return (uint64_t)pid << 32 | corr;
}

static struct jthread *thread_get(struct gpu_join *j, uint32_t pid, uint32_t tid)
{
	bool created;
	struct jproc *p = proc_get(j, pid);
	struct jthread *t;

	if (!p)
		return NULL;
	t = u64map__get_or_alloc(&j->threads, thread_key(pid, tid), sizeof(*t), &created);
	if (t && created) {
		t->pid = pid;
		t->tid = tid;
		t->proc = p;
	}
	return t;
}

static struct jwork *work_get(struct gpu_join *j, uint32_t pid, uint32_t corr)
{
	uint64_t v;

	return corr && u64map__get(&j->work, work_key(pid, corr), &v) ?
	       (struct jwork *)(uintptr_t)v : NULL;
}

int gpu_join__add_call(struct gpu_join *j, const struct gpu_join_call *c, const void *payload)
{
	struct jthread *t = thread_get(j, c->pid, c->tid);
	struct jcall *jc;
	size_t pos;

	if (!t)
		return -ENOMEM;
	if (ARRAY_RESERVE(t->calls, t->cap_calls, t->nr_calls + 1, 16))
		return -ENOMEM;
	jc = calloc(1, sizeof(*jc) + j->payload_size);
	if (!jc)
		return -ENOMEM;
	jc->call = *c;
	/* waits are counted from the call's own time (the same clock as now_ns) */
	jc->arrived_ns = c->ret_ts ? c->ret_ts : c->ts;
	memcpy(jc->payload, payload, j->payload_size);
	/* calls come in completion order: an outer call with a return probe after its inner ones */
	for (pos = t->nr_calls; pos && t->calls[pos - 1]->call.ts > c->ts; pos--)
		;
	memmove(&t->calls[pos + 1], &t->calls[pos], (t->nr_calls - pos) * sizeof(*t->calls));
	t->calls[pos] = jc;
	t->nr_calls++;
	/* this call closes the window of the entry-only call before it; one after it closes
	 * this one's */
	if (pos && !t->calls[pos - 1]->call.ret_ts &&
	    (!t->calls[pos - 1]->next_ts || t->calls[pos - 1]->next_ts > c->ts))
		t->calls[pos - 1]->next_ts = c->ts;
	if (pos + 1 < t->nr_calls && !c->ret_ts)
		jc->next_ts = t->calls[pos + 1]->call.ts;
	return 0;
}

void gpu_join__mark(struct gpu_join *j, uint32_t pid, uint32_t tid, uint64_t ts)
{
	uint64_t v;
	struct jthread *t;

	if (!u64map__get(&j->threads, thread_key(pid, tid), &v))
		return;
	t = (struct jthread *)(uintptr_t)v;
	for (size_t i = t->nr_calls; i-- > 0;) {
		struct jcall *jc = t->calls[i];

		if (jc->call.ts >= ts)
			continue;
		if (!jc->call.ret_ts && (!jc->next_ts || jc->next_ts > ts))
			jc->next_ts = ts;
		break;
	}
}

static void add_rec(struct gpu_join *j, uint32_t pid, const struct agent_record *r)
{
	struct jthread *t = thread_get(j, pid, r->tid);
	struct jrec rec = {
		.start = r->start_ns, .end = r->end_ns, .corr = r->correlation, .cbid = r->cbid,
		.domain = r->type == AGENT_REC_DRIVER_API ? CUDA_DOM_DRIVER : CUDA_DOM_RUNTIME,
	};
	size_t pos;

	if (!t)
		return;
	if (ARRAY_RESERVE(t->recs, t->cap_recs, t->nr_recs + 1, 64))
		return;
	/* CUPTI writes a record at the call's exit: a nested driver record before its runtime
	 * one; keep them by start */
	for (pos = t->nr_recs; pos && t->recs[pos - 1].start > rec.start; pos--)
		;
	memmove(&t->recs[pos + 1], &t->recs[pos], (t->nr_recs - pos) * sizeof(*t->recs));
	t->recs[pos] = rec;
	t->nr_recs++;
	if (!t->proc->first_record || rec.start < t->proc->first_record)
		t->proc->first_record = rec.start;
	COUNT(j, t->proc, records);
}

static void add_work(struct gpu_join *j, uint32_t pid, const struct agent_record *r,
		     const char *kernel)
{
	struct jproc *p = proc_get(j, pid);
	bool created;
	struct jwork *w;

	if (!p)
		return;
	COUNT(j, p, work_records);
	if (!r->correlation)
		return;
	w = u64map__get_or_alloc(&j->work, work_key(pid, r->correlation), sizeof(*w), &created);
	if (!w)
		return;
	w->proc = p;
	w->seen_ns = j->now ? j->now : r->start_ns;
	w->nr_records++;
	if (w->nr_records == 1 || r->start_ns < w->start) {
		/* graph replays put several kernels on one correlation: the first one is the
		 * arrow's end and names the launch */
		w->start = r->start_ns;
		w->device = r->device;
		w->context = r->context;
		w->stream = r->stream;
		if (kernel) {
			free(w->kernel);
			w->kernel = strdup(kernel);
		}
	}
	if (w->claimed && !w->flow_drawn) {
		j->ops.flow(j->ops.ctx, r->correlation, &w->call, w->host_ts, w->device,
			    w->context, w->stream, w->start);
		w->flow_drawn = true;
		COUNT(j, p, flows);
	}
}

void gpu_join__record(struct gpu_join *j, uint32_t pid, const struct agent_record *r,
		      const char *kernel)
{
	switch (r->type) {
	case AGENT_REC_RUNTIME_API:
	case AGENT_REC_DRIVER_API:
		add_rec(j, pid, r);
		break;
	case AGENT_REC_KERNEL:
	case AGENT_REC_MEMCPY:
	case AGENT_REC_MEMSET:
		add_work(j, pid, r, r->type == AGENT_REC_KERNEL ? kernel : NULL);
		break;
	default:
		break;
	}
}

static uint64_t enable_bound(const struct jproc *p)
{
	return p->enabled ? p->enabled : p->first_record;
}

/* The window's end: the return probe, else the thread's next probed call; UINT64_MAX when
 * neither came (the call waited long enough, or the trace ended). */
static uint64_t window_end(const struct jthread *t, const struct jcall *jc)
{
	uint64_t slack = t->proc->slack;

	if (jc->call.ret_ts)
		return jc->call.ret_ts + slack;
	if (jc->next_ts)
		return jc->next_ts > slack ? jc->next_ts - slack : 0;
	return UINT64_MAX;
}

/* When CUPTI must have delivered every record the call's window can hold: the call returned
 * (its records are written before it returns) by its return probe, else by its thread's next
 * probed call; UINT64_MAX when neither came. */
static uint64_t delivered_by(const struct jthread *t, const struct jcall *jc)
{
	if (jc->call.ret_ts)
		return jc->call.ret_ts + t->proc->slack;
	return jc->next_ts ? jc->next_ts : UINT64_MAX;
}

/* The first record starting at or after lo (records are kept by start): a thread keeps
 * seconds of records, a linear walk per call would be quadratic. */
static size_t first_at(const struct jthread *t, uint64_t lo)
{
	size_t a = 0, b = t->nr_recs;

	while (a < b) {
		size_t m = a + (b - a) / 2;

		if (t->recs[m].start < lo)
			a = m + 1;
		else
			b = m;
	}
	return a;
}

/* The record is of the call's API: its domain and its cbid. */
static bool same_api(const struct gpu_join_call *c, const struct jrec *r)
{
	return r->domain == c->domain && (r->cbid == c->cbid || (c->cbid_alt && r->cbid == c->cbid_alt));
}

static void decide(struct gpu_join *j, struct jthread *t, struct jcall *jc, uint64_t hi)
{
	const struct gpu_join_call *api = &jc->call;
	struct jproc *p = t->proc;
	uint64_t lo = jc->call.ts > p->slack ? jc->call.ts - p->slack : 0;
	size_t first = first_at(t, lo);
	struct jrec *found = NULL;
	int n = 0;

	for (size_t i = first; i < t->nr_recs && t->recs[i].start < hi; i++) {
		struct jrec *r = &t->recs[i];

		if (r->start < lo || r->claimed || !same_api(api, r))
			continue;
		found = r;
		n++;
	}
	jc->decided = true;
	jc->res.candidates = n;
	if (n == 1) {
		found->claimed = true;
		jc->res.status = GPU_JOIN_JOINED;
		jc->res.correlation = found->corr;
		jc->res.api_start = found->start;
		jc->res.api_end = found->end;
		COUNT(j, p, joined);
	} else if (n > 1) {
		for (size_t i = first; i < t->nr_recs && t->recs[i].start < hi; i++)
			if (t->recs[i].start >= lo && !t->recs[i].claimed && same_api(api, &t->recs[i]))
				t->recs[i].ambiguous = true;
		jc->res.status = GPU_JOIN_AMBIGUOUS;
		COUNT(j, p, ambiguous);
	} else if (enable_bound(p) && jc->call.ts < enable_bound(p)) {
		jc->res.status = GPU_JOIN_BEFORE_ENABLE;
		COUNT(j, p, before_enable);
	} else if (p->disabled && (jc->call.ret_ts ? jc->call.ret_ts : jc->call.ts) >= p->disabled) {
		jc->res.status = GPU_JOIN_AFTER_DISABLE;
		COUNT(j, p, after_disable);
	} else {
		jc->res.status = GPU_JOIN_NO_RECORD;
		COUNT(j, p, no_record);
	}
	jc->res.status_str = gpu_join__status_str(jc->res.status);
	COUNT(j, p, calls);
}

static void emit(struct gpu_join *j, struct jthread *t, struct jcall *jc)
{
	struct jwork *w = NULL;
	bool created;

	jc->res.kernel = NULL;
	jc->res.has_work = false;
	if (jc->res.status == GPU_JOIN_JOINED) {
		w = u64map__get_or_alloc(&j->work, work_key(t->pid, jc->res.correlation),
					 sizeof(*w), &created);
		if (w && created)
			w->proc = t->proc;
		if (w && !w->claimed) {
			w->claimed = true;
			w->call = jc->call;
			/* an entry-only call is drawn at CUPTI's start (see gpu_join_result) */
			w->host_ts = jc->call.ret_ts ? jc->call.ts : jc->res.api_start;
			w->seen_ns = j->now;
			jc->res.kernel = w->kernel;
			if (w->nr_records) {
				jc->res.has_work = true;
				jc->res.device = w->device;
				jc->res.context = w->context;
				jc->res.stream = w->stream;
			}
		}
	}
	j->ops.emit(j->ops.ctx, &jc->call, jc->payload, &jc->res);
	if (w && w->claimed && w->nr_records && !w->flow_drawn) {
		j->ops.flow(j->ops.ctx, jc->res.correlation, &w->call, w->host_ts, w->device,
			    w->context, w->stream, w->start);
		w->flow_drawn = true;
		COUNT(j, t->proc, flows);
	}
}

/* An unclaimed record leaves the join: a driver record inside a runtime record of the same
 * thread is the driver call under that runtime call; anything else is a call tptrace did not
 * see. Runtime calls do not nest in each other, so the closest runtime record before it decides. */
static void count_unclaimed(struct gpu_join *j, const struct jthread *t, size_t idx)
{
	const struct jrec *r = &t->recs[idx];

	if (r->claimed)
		return;
	if (r->ambiguous) {
		COUNT(j, t->proc, records_ambiguous);
		return;
	}
	if (r->domain == CUDA_DOM_DRIVER) {
		for (size_t i = idx; i-- > 0;) {
			const struct jrec *q = &t->recs[i];

			if (q->domain != CUDA_DOM_RUNTIME)
				continue;
			if (q->start <= r->start && r->end <= q->end) {
				COUNT(j, t->proc, records_nested);
				return;
			}
			break;
		}
	}
	COUNT(j, t->proc, records_unprobed);
}

static bool rec_expired(const struct jrec *r, uint64_t now, uint64_t max_wait)
{
	return !max_wait || (now > r->end && now - r->end > 2 * max_wait);
}

static void flush_thread(struct gpu_join *j, struct jthread *t, uint64_t now, uint64_t max_wait)
{
	bool final = !max_wait;
	size_t keep = 0;

	for (size_t i = 0; i < t->nr_calls; i++) {
		struct jcall *jc = t->calls[i];
		bool waited = final || (now > jc->arrived_ns && now - jc->arrived_ns > max_wait);

		if (!jc->decided) {
			uint64_t hi = window_end(t, jc);

			/* decided once CUPTI delivered everything up to the window's end: not by
			 * the thread's newest record, buffers come out of order */
			if (waited || (hi != UINT64_MAX && delivered_by(t, jc) <= now))
				decide(j, t, jc, hi);
		}
		/* a joined call that puts work on a stream waits for it: CUPTI names its kernel */
		if (jc->decided && (waited || jc->res.status != GPU_JOIN_JOINED ||
				    !jc->call.gpu_work ||
				    (work_get(j, t->pid, jc->res.correlation) &&
				     work_get(j, t->pid, jc->res.correlation)->nr_records))) {
			emit(j, t, jc);
			free(jc);
			continue;
		}
		t->calls[keep++] = jc;
	}
	t->nr_calls = keep;

	/* records stay as long as a call could still want them; the ones leaving are classified
	 * first, while the runtime records before them are all still in place */
	for (size_t i = 0; i < t->nr_recs; i++)
		if (rec_expired(&t->recs[i], now, max_wait))
			count_unclaimed(j, t, i);
	keep = 0;
	for (size_t i = 0; i < t->nr_recs; i++)
		if (!rec_expired(&t->recs[i], now, max_wait))
			t->recs[keep++] = t->recs[i];
	t->nr_recs = keep;
}

static void sweep_work(struct gpu_join *j, uint64_t now, uint64_t max_wait)
{
	struct u64map live = {};
	uint64_t k, v;

	for (size_t it = 0; u64map__next(&j->work, &it, &k, &v);) {
		struct jwork *w = (struct jwork *)(uintptr_t)v;

		if (max_wait && (now <= w->seen_ns || now - w->seen_ns <= 2 * max_wait)) {
			if (!u64map__set(&live, k, v))
				continue;
		}
		if (!w->claimed) {
			j->st.work_unclaimed += w->nr_records;
			if (w->proc)
				w->proc->st.work_unclaimed += w->nr_records;
		}
		free_work(w);
	}
	u64map__clear(&j->work);
	j->work = live;
}

void gpu_join__flush(struct gpu_join *j, uint64_t now_ns, uint64_t max_wait_ns)
{
	uint64_t v;

	j->now = now_ns;
	for (size_t it = 0; u64map__next(&j->threads, &it, NULL, &v);)
		flush_thread(j, (struct jthread *)(uintptr_t)v, now_ns, max_wait_ns);
	if (!max_wait_ns || (now_ns > j->last_sweep && now_ns - j->last_sweep > max_wait_ns)) {
		sweep_work(j, now_ns, max_wait_ns);
		j->last_sweep = now_ns;
	}
}

void gpu_join__stats(const struct gpu_join *j, struct gpu_join_stats *out)
{
	uint64_t v;

	*out = j->st;
	/* the widest slack any process uses */
	out->slack_ns = 0;
	for (size_t it = 0; u64map__next(&j->procs, &it, NULL, &v);) {
		const struct jproc *p = (const struct jproc *)(uintptr_t)v;

		if (p->slack > out->slack_ns)
			out->slack_ns = p->slack;
	}
	if (!j->procs.nr)
		out->slack_ns = SLACK_DEFAULT_NS;
}

int gpu_join__stats_pid(const struct gpu_join *j, uint32_t pid, struct gpu_join_stats *out)
{
	uint64_t v;
	const struct jproc *p;

	if (!u64map__get(&j->procs, (uint64_t)pid + 1, &v))
		return -ENOENT;
	p = (const struct jproc *)(uintptr_t)v;
	*out = p->st;
	out->slack_ns = p->slack;
	return 0;
}
