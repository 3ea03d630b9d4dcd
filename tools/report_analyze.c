// SPDX-License-Identifier: MIT
/* report_analyze: the inputs' events -> the report object of docs/report-schema.md.
 *
 * The unit is a host process (a rank): its host calls, and the GPU work its calls launched
 * (joined by CUPTI's correlation id; in a trace of one process all GPU work is its own; work no
 * call carries, such as NCCL's own kernels, goes to the process that launched most work on
 * that device). Every rule returns numbers; a rule whose data is missing (no --gpu, no --mem)
 * adds a cannot_judge entry instead of a guess.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "report.h"
#include "hashmap.h"

#define TINY_KERNEL_NS	10000	/* "tiny": shorter than 10 µs */
#define MAX_EVIDENCE	5
#define UTIL_BINS	100

struct ival {
	uint64_t a, b;
	size_t first;		/* index (in proc->gpu) of the item that opened the interval */
};

struct step {
	uint64_t a, b;
};

struct proc {
	struct rinput *in;
	const struct rproc *rp;
	int rank;
	size_t *host, nr_host;	/* indices into in->ev, by ts */
	bool mem;		/* it has memory counters (--mem) */
	size_t *gpu, nr_gpu;	/* GPU work (kernels, copies, memsets, syncs), by ts */
	struct ival *busy;	/* merged busy intervals (kernels, copies, memsets) */
	size_t nr_busy;
	struct step *steps;
	size_t nr_steps;
	char method[32], method_detail[256];
	uint64_t win_a, win_b;	/* the analysis window: the steps, else the whole process */
	/* idle split */
	uint64_t idle_ns, idle_sync_ns, idle_launch_ns, idle_data_ns, idle_other_ns;
	size_t nr_launches, nr_syncs;
	struct u64map corr;	/* correlation -> index + 1 of the host call carrying it */
	struct u64map pinned_calls;	/* ev index of host copy calls whose GPU copy was pinned */
	size_t *blk, nr_blk;	/* blocking host calls (is_blocking), by end time */
	double collective_wait_ns;	/* NAN unknown */
	uint64_t comm_ns, comm_overlap_ns;
};

struct ctx {
	struct rinput *in;
	size_t nr_in;
	struct rstrings *strs;
	const struct report_opts *o;
	struct proc *procs;
	size_t nr_procs;
	bool any_gpu, all_gpu, any_mem, any_py;
	cJSON *report, *findings, *cannot;
	uint64_t gap_counts[8];
};

static const uint64_t gap_edges[] = { 0, 1000, 10000, 100000, 1000000, 10000000, 100000000 };

/* --- small helpers --------------------------------------------------------------------- */

static const struct rinput *sort_in;
static int cmp_ev_ts(const void *a, const void *b)
{
	const struct rev *x = &sort_in->ev[*(const size_t *)a], *y = &sort_in->ev[*(const size_t *)b];

	return x->ts < y->ts ? -1 : x->ts > y->ts;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t pct(const uint64_t *sorted, size_t n, double p)
{
	size_t i;

	if (!n)
		return 0;
	i = (size_t)ceil(p * n) - (p > 0);
	return sorted[i >= n ? n - 1 : i];
}

static cJSON *num(cJSON *o, const char *k, double v)
{
	return cJSON_AddNumberToObject(o, k, v);
}

/* null with "<k>_unknown": why */
static void unknown(cJSON *o, const char *k, const char *why)
{
	char key[96];

	cJSON_AddNullToObject(o, k);
	snprintf(key, sizeof(key), "%s_unknown", k);
	cJSON_AddStringToObject(o, key, why);
}

static void num_or_unknown(cJSON *o, const char *k, bool known, double v, const char *why)
{
	if (known)
		num(o, k, v);
	else
		unknown(o, k, why);
}

static const char *S(const struct ctx *c, uint32_t id)
{
	return rstrings__get(c->strs, id);
}

static bool is_busy_kind(int k)
{
	return k == RK_KERNEL || k == RK_GPU_COPY || k == RK_GPU_SET;
}

static void rank_num(cJSON *o, const struct proc *p)
{
	if (p->rank >= 0)
		num(o, "rank", p->rank);
	else
		unknown(o, "rank", "no rank in the trace (no RANK in the process's environment)");
}

static const char *rank_label(const struct proc *p, char *buf, size_t n)
{
	if (p->rank >= 0)
		snprintf(buf, n, "rank %d", p->rank);
	else
		snprintf(buf, n, "pid %u", p->rp->pid);
	return buf;
}

/* |[a,b) ∩ busy| by binary search on the merged intervals */
static uint64_t busy_in(const struct proc *p, uint64_t a, uint64_t b)
{
	size_t lo = 0, hi = p->nr_busy;
	uint64_t sum = 0;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (p->busy[mid].b <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < p->nr_busy && p->busy[i].a < b; i++) {
		uint64_t x = p->busy[i].a > a ? p->busy[i].a : a;
		uint64_t y = p->busy[i].b < b ? p->busy[i].b : b;

		if (y > x)
			sum += y - x;
	}
	return sum;
}

static uint64_t clip(const struct rev *e, uint64_t a, uint64_t b)
{
	uint64_t x = e->ts > a ? e->ts : a, y = e->ts + e->dur < b ? e->ts + e->dur : b;

	return y > x ? y - x : 0;
}

static cJSON *evidence(const struct ctx *c, const struct proc *p, const struct rev *e,
		       uint64_t ts, uint64_t dur, const char *name)
{
	cJSON *o = cJSON_CreateObject();

	num(o, "pid", p ? p->rp->pid : e->pid);
	num(o, "tid", e->tid);
	num(o, "ts_ns", (double)ts);
	num(o, "dur_ns", (double)dur);
	cJSON_AddStringToObject(o, "name", name ? name : S(c, e->name));
	if (e->where)
		cJSON_AddStringToObject(o, "where", S(c, e->where));
	else
		cJSON_AddNullToObject(o, "where");
	return o;
}

static cJSON *finding(struct ctx *c, const char *id, double share, const char *title,
		      const char *fix)
{
	cJSON *f = cJSON_CreateObject();

	cJSON_AddStringToObject(f, "id", id);
	cJSON_AddStringToObject(f, "severity", share >= 0.3 ? "high" : share >= 0.1 ? "medium" : "low");
	cJSON_AddStringToObject(f, "title", title);
	cJSON_AddObjectToObject(f, "numbers");
	cJSON_AddArrayToObject(f, "evidence");
	cJSON_AddStringToObject(f, "fix", fix);
	cJSON_AddItemToArray(c->findings, f);
	return f;
}

static void cannot_judge(struct ctx *c, const char *what, const char *why)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "what", what);
	cJSON_AddStringToObject(o, "why", why);
	cJSON_AddItemToArray(c->cannot, o);
}

/* --- processes and their GPU work --------------------------------------------------------- */

static int build_procs(struct ctx *c)
{
	size_t total = 0;

	for (size_t i = 0; i < c->nr_in; i++)
		total += c->in[i].nr_procs;
	c->procs = calloc(total ? total : 1, sizeof(*c->procs));
	if (!c->procs)
		return -ENOMEM;
	for (size_t i = 0; i < c->nr_in; i++) {
		struct rinput *in = &c->in[i];
		struct u64map corr_pid = {}, dev_pid_votes = {};
		size_t first = c->nr_procs;

		for (size_t k = 0; k < in->nr_procs; k++) {
			struct proc *p = &c->procs[c->nr_procs++];

			p->in = in;
			p->rp = &in->procs[k];
			p->rank = in->procs[k].rank;
			p->host = calloc(in->nr + 1, sizeof(size_t));
			p->gpu = calloc(in->nr + 1, sizeof(size_t));
			p->collective_wait_ns = NAN;
			if (!p->host || !p->gpu)
				return -ENOMEM;
		}
		/* host calls by pid; the correlation of each call that has one */
		for (size_t e = 0; e < in->nr; e++) {
			const struct rev *ev = &in->ev[e];

			if (ev->kind >= RK_KERNEL && ev->kind <= RK_GPU_SYNC)
				continue;
			if (ev->kind == RK_MEM_COUNTER) {
				for (size_t k = first; k < c->nr_procs; k++)
					if (c->procs[k].rp->pid == ev->pid)
						c->procs[k].mem = true;
				continue;
			}
			for (size_t k = first; k < c->nr_procs; k++)
				if (c->procs[k].rp->pid == ev->pid) {
					c->procs[k].host[c->procs[k].nr_host++] = e;
					if (ev->corr && ev->kind != RK_PYFUNC) {
						u64map__set(&corr_pid, ev->corr, k + 1);
						u64map__set(&c->procs[k].corr, ev->corr, e + 1);
					}
					break;
				}
		}
		/* GPU work: its launching call's process */
		for (int pass = 0; pass < 2; pass++)
			for (size_t e = 0; e < in->nr; e++) {
				const struct rev *ev = &in->ev[e];
				uint64_t k = 0;

				if (ev->kind < RK_KERNEL || ev->kind > RK_GPU_SYNC)
					continue;
				if (c->nr_procs - first == 1)
					k = first + 1;
				else if (ev->corr)
					u64map__get(&corr_pid, ev->corr, &k);
				if (pass == 0) {
					if (k) {
						uint64_t key = ((uint64_t)(uint8_t)ev->device << 32 | k) + 1, v = 0;

						u64map__get(&dev_pid_votes, key, &v);
						u64map__set(&dev_pid_votes, key, v + 1);
					}
					continue;
				}
				if (!k) {
					uint64_t best = 0;

					for (size_t q = first; q < c->nr_procs; q++) {
						uint64_t key = ((uint64_t)(uint8_t)ev->device << 32 | (q + 1)) + 1;
						uint64_t v = 0;

						if (u64map__get(&dev_pid_votes, key, &v) && v > best)
							best = v, k = q + 1;
					}
				}
				if (k)
					c->procs[k - 1].gpu[c->procs[k - 1].nr_gpu++] = e;
			}
		u64map__clear(&corr_pid);
		u64map__clear(&dev_pid_votes);
		for (size_t k = first; k < c->nr_procs; k++) {
			struct proc *p = &c->procs[k];

			sort_in = in;
			qsort(p->host, p->nr_host, sizeof(size_t), cmp_ev_ts);
			qsort(p->gpu, p->nr_gpu, sizeof(size_t), cmp_ev_ts);
		}
	}
	/* drop processes with no host call and no memory counter (a pid named in metadata only;
	 * a --mem trace of a process whose calls were all made before attach has counters only) */
	for (size_t k = 0; k < c->nr_procs;) {
		if (c->procs[k].nr_host || c->procs[k].mem) {
			k++;
			continue;
		}
		free(c->procs[k].host);
		free(c->procs[k].gpu);
		u64map__clear(&c->procs[k].corr);
		u64map__clear(&c->procs[k].pinned_calls);
		memmove(&c->procs[k], &c->procs[k + 1], (c->nr_procs - k - 1) * sizeof(*c->procs));
		c->nr_procs--;
	}
	return 0;
}

static int build_busy(struct proc *p)
{
	const struct rev *ev = p->in->ev;

	p->busy = calloc(p->nr_gpu + 1, sizeof(*p->busy));
	if (!p->busy)
		return -ENOMEM;
	for (size_t i = 0; i < p->nr_gpu; i++) {
		const struct rev *e = &ev[p->gpu[i]];
		struct ival *last = p->nr_busy ? &p->busy[p->nr_busy - 1] : NULL;

		if (!is_busy_kind(e->kind) || !e->dur)
			continue;
		if (last && e->ts <= last->b) {
			if (e->ts + e->dur > last->b)
				last->b = e->ts + e->dur;
			continue;
		}
		p->busy[p->nr_busy++] = (struct ival){ e->ts, e->ts + e->dur, i };
	}
	return 0;
}

/* --- steps ---------------------------------------------------------------------------------
 * With --step FUNC: each python_function slice named FUNC (on the thread with the most) is a
 * step. Otherwise the host thread with the most CUDA/NCCL calls is read as a sequence of
 * "markers" -- syncs, blocking copies, NCCL collectives -- each with a signature (name,
 * stream, bytes). The smallest period p with tok[i] == tok[i+p] for >= 80 % of i is the
 * training loop's; among the markers once per period, a sync (else a blocking copy, else a
 * collective) with the longest total time is where a step ends. A step runs from one of its
 * ends to the next; what comes before the first end is not a step (tracing may have begun in
 * the middle of one). */

static bool name_is_func(const char *slice, const char *func)
{
	/* "<co_filename>(<co_firstlineno>): <function>" */
	const char *c = strstr(slice, "): ");
	size_t n = strlen(func);

	if (!c)
		return !strcmp(slice, func);
	c += 3;
	if (!strcmp(c, func))
		return true;
	/* qualname "Trainer.step" matches "step" */
	return strlen(c) > n && c[strlen(c) - n - 1] == '.' && !strcmp(c + strlen(c) - n, func);
}

static void steps_python(struct ctx *c, struct proc *p)
{
	const struct rev *ev = p->in->ev;
	struct u64map per_tid = {};
	uint64_t best_tid = 0, best = 0;

	for (size_t i = 0; i < p->nr_host; i++) {
		const struct rev *e = &ev[p->host[i]];
		uint64_t v = 0;

		if (e->kind != RK_PYFUNC || !name_is_func(S(c, e->name), c->o->step_func))
			continue;
		u64map__get(&per_tid, (uint64_t)e->tid + 1, &v);
		u64map__set(&per_tid, (uint64_t)e->tid + 1, ++v);
		if (v > best)
			best = v, best_tid = e->tid;
	}
	u64map__clear(&per_tid);
	snprintf(p->method, sizeof(p->method), "python:%.24s", c->o->step_func);
	if (!best) {
		snprintf(p->method_detail, sizeof(p->method_detail),
			 "no python_function slice named %.80s (traced without --py-stacks, or the "
			 "function makes no CUDA call)", c->o->step_func);
		return;
	}
	p->steps = calloc(best, sizeof(*p->steps));
	if (!p->steps)
		return;
	for (size_t i = 0; i < p->nr_host; i++) {
		const struct rev *e = &ev[p->host[i]];

		if (e->kind == RK_PYFUNC && e->tid == best_tid &&
		    name_is_func(S(c, e->name), c->o->step_func))
			p->steps[p->nr_steps++] = (struct step){ e->ts, e->ts + e->dur };
	}
	snprintf(p->method_detail, sizeof(p->method_detail),
		 "each python_function slice %.80s on thread %lu is a step", c->o->step_func,
		 (unsigned long)best_tid);
}

static bool is_marker(const struct rev *e)
{
	return e->kind == RK_SYNC || e->kind == RK_NCCL ||
	       (e->kind == RK_COPY && !(e->flags & RF_ASYNC));
}

static uint64_t signature(const struct rev *e)
{
	return ((uint64_t)e->name * 0x9E3779B97F4A7C15ull) ^ (e->stream * 0xC2B2AE3D27D4EB4Full) ^
	       (e->kind == RK_SYNC ? 0 : e->bytes * 0x165667B19E3779F9ull) ^ e->kind;
}

static int marker_class(const struct rev *e)
{
	return e->kind == RK_SYNC ? 0 : e->kind == RK_COPY ? 1 : 2;
}

static void steps_markers(struct ctx *c, struct proc *p)
{
	const struct rev *ev = p->in->ev;
	struct u64map per_tid = {}, counts = {}, durs = {};
	uint64_t tid = 0, best = 0, *tok = NULL, chosen = 0;
	size_t *idx = NULL, n = 0, period = 0, nb = 0;
	int chosen_class = 9;
	uint64_t chosen_dur = 0;

	snprintf(p->method, sizeof(p->method), "none");
	for (size_t i = 0; i < p->nr_host; i++) {
		const struct rev *e = &ev[p->host[i]];
		uint64_t v = 0;

		if (e->kind == RK_PYFUNC || e->kind == RK_OOM)
			continue;
		u64map__get(&per_tid, (uint64_t)e->tid + 1, &v);
		u64map__set(&per_tid, (uint64_t)e->tid + 1, ++v);
		if (v > best)
			best = v, tid = e->tid;
	}
	u64map__clear(&per_tid);
	if (!best) {
		snprintf(p->method_detail, sizeof(p->method_detail), "no CUDA or NCCL calls in the "
			 "trace of pid %u (memory events only)", p->rp->pid);
		return;
	}
	tok = calloc(p->nr_host + 1, sizeof(*tok));
	idx = calloc(p->nr_host + 1, sizeof(*idx));
	if (!tok || !idx)
		goto cleanup;
	for (size_t i = 0; i < p->nr_host; i++) {
		const struct rev *e = &ev[p->host[i]];

		if (e->tid == tid && is_marker(e)) {
			tok[n] = signature(e) | 1;
			idx[n++] = p->host[i];
		}
	}
	for (size_t per = 1; per * 2 <= n && !period; per++) {
		size_t match = 0;

		for (size_t i = 0; i + per < n; i++)
			match += tok[i] == tok[i + per];
		if (match * 5 >= (n - per) * 4)
			period = per;
	}
	if (!period) {
		snprintf(p->method_detail, sizeof(p->method_detail),
			 "no repeating pattern in the %zu syncs/collectives of thread %lu: "
			 "give --step FUNC (with --py-stacks)", n, (unsigned long)tid);
		goto cleanup;
	}
	/* markers once per period, in a window in the middle */
	{
		size_t w0 = n / 2 >= period / 2 ? n / 2 - period / 2 : 0;

		if (w0 + period > n)
			w0 = n - period;
		for (size_t i = 0; i < n; i++) {
			uint64_t v = 0;

			u64map__get(&counts, tok[i], &v);
			u64map__set(&counts, tok[i], v + 1);
			u64map__get(&durs, tok[i], &v);
			u64map__set(&durs, tok[i], v + ev[idx[i]].dur);
		}
		for (size_t i = w0; i < w0 + period; i++) {
			size_t once = 0;
			uint64_t d = 0;
			int cls = marker_class(&ev[idx[i]]);

			for (size_t k = w0; k < w0 + period; k++)
				once += tok[k] == tok[i];
			if (once != 1)
				continue;
			u64map__get(&durs, tok[i], &d);
			if (cls < chosen_class || (cls == chosen_class && d > chosen_dur))
				chosen = tok[i], chosen_class = cls, chosen_dur = d;
		}
	}
	if (!chosen)
		goto cleanup;
	for (size_t i = 0; i < n; i++)
		nb += tok[i] == chosen;
	if (nb < 2) {
		snprintf(p->method_detail, sizeof(p->method_detail), "one step end only");
		goto cleanup;
	}
	p->steps = calloc(nb, sizeof(*p->steps));
	if (!p->steps)
		goto cleanup;
	{
		uint64_t prev = 0;
		const struct rev *m = NULL;

		for (size_t i = 0; i < n; i++) {
			const struct rev *e = &ev[idx[i]];

			if (tok[i] != chosen)
				continue;
			if (prev)
				p->steps[p->nr_steps++] = (struct step){ prev, e->ts + e->dur };
			prev = e->ts + e->dur;
			m = e;
		}
		snprintf(p->method, sizeof(p->method), "%s",
			 chosen_class == 0 ? "syncs" : chosen_class == 1 ? "syncs" : "collectives");
		snprintf(p->method_detail, sizeof(p->method_detail),
			 "a step ends at each %s%s%.0llx on thread %lu (period %zu of its %zu "
			 "syncs/collectives)", S(c, m->name), m->stream ? " on stream 0x" : "",
			 (unsigned long long)m->stream, (unsigned long)tid, period, n);
	}
cleanup:
	u64map__clear(&counts);
	u64map__clear(&durs);
	free(tok);
	free(idx);
}

/* --- per-process measures ----------------------------------------------------------------- */

static const struct rev *launch_of(const struct proc *p, const struct rev *g)
{
	uint64_t i = 0;

	if (!p || !g->corr || !u64map__get(&p->corr, g->corr, &i))
		return NULL;
	return &p->in->ev[i - 1];
}

/* A host call that blocked until the GPU drained: a sync, or a copy that is not async. An
 * async copy that took long is taken as staged through pageable memory, unless its GPU copy
 * says the host side was pinned: then the call was only slow (a busy host), it waited for
 * nothing. */
static bool is_blocking(const struct proc *p, const struct rev *e)
{
	if (e->kind == RK_SYNC)
		return true;
	if (e->kind != RK_COPY || !(e->flags & RF_HAS_DUR))
		return false;
	if (!(e->flags & RF_ASYNC))
		return true;
	return e->dur > 20000 && !u64map__get(&p->pinned_calls, (uint64_t)(e - p->in->ev) + 1, NULL);
}

struct gap {
	uint64_t a, b;
	int cause;		/* 0 sync, 1 launch, 2 data, 3 other */
	const struct rev *by;	/* the blocking call, or the late launch */
};

static int cmp_gap_len(const void *x, const void *y)
{
	const struct gap *a = x, *b = y;
	uint64_t la = a->b - a->a, lb = b->b - b->a;

	return la > lb ? -1 : la < lb;
}

/* Idle gaps inside the window, each with its cause:
 *   sync   a blocking host call (sync, blocking copy) returned during the gap, having started
 *          before it, and the work ending the gap was launched after it returned: the host
 *          waited for the GPU to drain, then had to refill the queue;
 *   data   the work that ends the gap is a host-to-device copy: the GPU waited for input;
 *   launch the call that launched the work ending the gap came after the work before it had
 *          started: the host was not ahead of the GPU, too slow to keep the queue filled
 *          (CPU/launch bound);
 *   other  the work was queued in time but started late (waits on events, other streams,
 *          other ranks). */
static struct gap *idle_gaps(struct ctx *c, struct proc *p, size_t *nr)
{
	const struct rev *ev = p->in->ev;
	struct gap *g = calloc(p->nr_busy + 1, sizeof(*g));
	size_t n = 0, hi = 0, kb = 0;

	*nr = 0;
	if (!g)
		return NULL;
	for (size_t i = 1; i < p->nr_busy; i++) {
		uint64_t a = p->busy[i - 1].b, b = p->busy[i].a;
		const struct rev *next = &ev[p->gpu[p->busy[i].first]];
		const struct rev *l;
		struct gap *x;

		if (b <= p->win_a || a >= p->win_b)
			continue;
		if (a < p->win_a)
			a = p->win_a;
		if (b > p->win_b)
			b = p->win_b;
		x = &g[n++];
		x->a = a;
		x->b = b;
		x->cause = 3;
		for (size_t k = 0; k < sizeof(gap_edges) / sizeof(gap_edges[0]); k++)
			if (b - a >= gap_edges[k])
				hi = k;
		c->gap_counts[hi]++;
		/* blocking calls that end in the gap (or within 2 us before it: the GPU's last
		 * item and the sync's return are stamped by two clocks) */
		while (kb < p->nr_blk && ev[p->blk[kb]].ts + ev[p->blk[kb]].dur + 2000 < a)
			kb++;
		l = launch_of(p, next);
		for (size_t k = kb; k < p->nr_blk; k++) {
			const struct rev *h = &ev[p->blk[k]];

			if (h->ts + h->dur >= b)
				break;
			/* and the work ending the gap was launched only after it returned: the
			 * queue was empty because the host was blocked */
			if (h->ts < a && l && l->ts + 2000 >= h->ts + h->dur) {
				x->cause = 0;
				x->by = h;
			}
		}
		if (x->cause == 0)
			continue;
		if (next->kind == RK_GPU_COPY && next->dir == RD_HTOD) {
			x->cause = 2;
			x->by = launch_of(p, next);
			continue;
		}
		/* launched after the previous item had started on the GPU: the host was not ahead
		 * of the GPU, the queue ran dry (the GPU's own launch latency included) */
		if (l && p->busy[i].first && l->ts >= ev[p->gpu[p->busy[i].first - 1]].ts) {
			x->cause = 1;
			x->by = l;
		}
	}
	*nr = n;
	return g;
}

static const struct rev *sort_blk_ev;
static int cmp_end(const void *x, const void *y)
{
	const struct rev *a = &sort_blk_ev[*(const size_t *)x], *b = &sort_blk_ev[*(const size_t *)y];

	return a->ts + a->dur < b->ts + b->dur ? -1 : a->ts + a->dur > b->ts + b->dur;
}

static int build_blocking(struct proc *p)
{
	p->blk = calloc(p->nr_host + 1, sizeof(*p->blk));
	if (!p->blk)
		return -ENOMEM;
	for (size_t i = 0; i < p->nr_gpu; i++) {
		const struct rev *g = &p->in->ev[p->gpu[i]], *l;

		if (g->kind == RK_GPU_COPY && (g->flags & RF_PINNED) && (l = launch_of(p, g)) &&
		    u64map__set(&p->pinned_calls, (uint64_t)(l - p->in->ev) + 1, 1))
			return -ENOMEM;
	}
	for (size_t i = 0; i < p->nr_host; i++)
		if (is_blocking(p, &p->in->ev[p->host[i]]))
			p->blk[p->nr_blk++] = p->host[i];
	sort_blk_ev = p->in->ev;
	qsort(p->blk, p->nr_blk, sizeof(*p->blk), cmp_end);
	return 0;
}

static void measure_proc(struct ctx *c, struct proc *p, cJSON *per_rank)
{
	const struct rev *ev = p->in->ev;
	bool gpu = p->in->gpu;
	cJSON *pr = cJSON_CreateObject(), *steps = cJSON_CreateArray(), *sw;
	uint64_t *walls = calloc(p->nr_steps + 1, sizeof(uint64_t));
	double wall_sum = 0;
	size_t h0 = 0, g0 = 0;
	uint64_t max_dur = 0;

	for (size_t i = 0; i < p->nr_gpu; i++)
		if (ev[p->gpu[i]].dur > max_dur)
			max_dur = ev[p->gpu[i]].dur;

	if (p->rank >= 0)
		num(pr, "rank", p->rank);
	else
		unknown(pr, "rank", "no rank in the trace (no RANK in the process's environment)");
	num(pr, "pid", p->rp->pid);
	for (size_t s = 0; s < p->nr_steps; s++) {
		struct step *st = &p->steps[s];
		cJSON *o = cJSON_CreateObject();
		uint64_t by[4] = {};
		size_t launches = 0, syncs = 0;

		num(o, "index", (double)s);
		num(o, "start_ns", (double)st->a);
		num(o, "wall_ns", (double)(st->b - st->a));
		walls[s] = st->b - st->a;
		wall_sum += (double)walls[s];
		while (h0 < p->nr_host && ev[p->host[h0]].ts < st->a)
			h0++;
		for (size_t i = h0; i < p->nr_host && ev[p->host[i]].ts < st->b; i++) {
			launches += ev[p->host[i]].kind == RK_LAUNCH;
			syncs += ev[p->host[i]].kind == RK_SYNC;
		}
		/* GPU items that may overlap: none that ended before the longest item could */
		while (g0 < p->nr_gpu && ev[p->gpu[g0]].ts + max_dur < st->a)
			g0++;
		for (size_t i = g0; i < p->nr_gpu && ev[p->gpu[i]].ts < st->b; i++) {
			const struct rev *e = &ev[p->gpu[i]];
			int k = e->kind == RK_KERNEL ? (e->flags & RF_NCCL_KERNEL ? 1 : 0) :
				e->kind == RK_GPU_COPY ? 2 : e->kind == RK_GPU_SET ? 3 : -1;

			if (k >= 0)
				by[k] += clip(e, st->a, st->b);
		}
		if (gpu) {
			uint64_t busy = busy_in(p, st->a, st->b);

			num(o, "gpu_busy_ns", (double)busy);
			num(o, "gpu_idle_ns", (double)(st->b - st->a - busy));
			num(o, "compute_ns", (double)by[0]);
			num(o, "comm_ns", (double)by[1]);
			num(o, "copy_ns", (double)by[2]);
			num(o, "memset_ns", (double)by[3]);
		} else {
			static const char *const k[] = { "gpu_busy_ns", "gpu_idle_ns", "compute_ns",
							 "comm_ns", "copy_ns", "memset_ns" };

			for (size_t i = 0; i < 6; i++)
				unknown(o, k[i], "no --gpu data in the trace");
		}
		num(o, "launches", (double)launches);
		num(o, "syncs", (double)syncs);
		cJSON_AddItemToArray(steps, o);
	}
	cJSON_AddItemToObject(pr, "steps", steps);
	sw = cJSON_AddObjectToObject(pr, "step_wall_ns");
	if (p->nr_steps && walls) {
		qsort(walls, p->nr_steps, sizeof(*walls), cmp_u64);
		num(sw, "mean", wall_sum / p->nr_steps);
		num(sw, "p50", (double)pct(walls, p->nr_steps, 0.5));
		num(sw, "p99", (double)pct(walls, p->nr_steps, 0.99));
	} else {
		unknown(sw, "mean", "no steps found");
		unknown(sw, "p50", "no steps found");
		unknown(sw, "p99", "no steps found");
	}
	cJSON_AddItemToArray(per_rank, pr);
	free(walls);
	for (size_t i = 0; i < p->nr_host; i++) {
		const struct rev *e = &ev[p->host[i]];

		if (e->ts < p->win_a || e->ts >= p->win_b)
			continue;
		p->nr_launches += e->kind == RK_LAUNCH;
		p->nr_syncs += e->kind == RK_SYNC;
	}
}

static void window(struct proc *p)
{
	const struct rev *ev = p->in->ev;

	if (p->nr_steps) {
		p->win_a = p->steps[0].a;
		p->win_b = p->steps[p->nr_steps - 1].b;
		return;
	}
	p->win_a = UINT64_MAX;
	p->win_b = 0;
	for (size_t i = 0; i < p->nr_host; i++) {
		const struct rev *e = &ev[p->host[i]];

		if (e->ts < p->win_a)
			p->win_a = e->ts;
		if (e->ts + e->dur > p->win_b)
			p->win_b = e->ts + e->dur;
	}
	for (size_t i = 0; i < p->nr_busy; i++) {
		if (p->busy[i].a < p->win_a)
			p->win_a = p->busy[i].a;
		if (p->busy[i].b > p->win_b)
			p->win_b = p->busy[i].b;
	}
}

/* --- rules -------------------------------------------------------------------------------- */

static void rule_idle(struct ctx *c, struct proc *p)
{
	char title[256], rl[32];
	struct gap *g;
	size_t n;
	uint64_t win = p->win_b - p->win_a, busy, by[4] = {}, count[4] = {};
	double frac;
	cJSON *f, *nums, *evs;
	const char *fix;
	int top = 3;

	if (!win)
		return;
	busy = busy_in(p, p->win_a, p->win_b);
	g = idle_gaps(c, p, &n);
	if (!g)
		return;
	for (size_t i = 0; i < n; i++) {
		by[g[i].cause] += g[i].b - g[i].a;
		count[g[i].cause]++;
	}
	p->idle_ns = win - busy;
	p->idle_sync_ns = by[0];
	p->idle_launch_ns = by[1];
	p->idle_data_ns = by[2];
	p->idle_other_ns = p->idle_ns - by[0] - by[1] - by[2];
	frac = (double)p->idle_ns / win;
	qsort(g, n, sizeof(*g), cmp_gap_len);
	rank_label(p, rl, sizeof(rl));
	if (frac > c->o->idle_frac_min) {
		for (int k = 0; k < 3; k++)
			if (by[k] > by[top == 3 ? 0 : top] || (top == 3 && by[k]))
				top = by[k] >= (top == 3 ? 0 : by[top]) ? k : top;
		fix = top == 0 ? "the GPU runs dry at every host sync: remove per-step .item(), .cpu(), "
				 "print(tensor) and torch.cuda.synchronize() from the loop, or do them "
				 "every N steps" :
		      top == 1 ? "the host cannot launch fast enough: fewer, larger kernels "
				 "(torch.compile, a larger batch), CUDA graphs "
				 "(torch.compile(mode=\"reduce-overhead\"))" :
		      top == 2 ? "the GPU waits for input: more DataLoader workers, pin_memory=True, "
				 ".to(device, non_blocking=True), prefetch the next batch" :
				 "the GPU waits on dependencies (events, other streams or ranks): see the "
				 "straggler and communication findings";
		snprintf(title, sizeof(title), "GPU idle %.1f%% of the time (%s): %.1f%% after host "
			 "syncs, %.1f%% launch-bound, %.1f%% waiting on data, %.1f%% other",
			 100 * frac, rl, 100.0 * by[0] / win, 100.0 * by[1] / win, 100.0 * by[2] / win,
			 100.0 * p->idle_other_ns / win);
		f = finding(c, "gpu_idle", frac, title, fix);
		nums = cJSON_GetObjectItem(f, "numbers");
		rank_num(nums, p);
		num(nums, "pid", p->rp->pid);
		num(nums, "window_ns", (double)win);
		num(nums, "idle_ns", (double)p->idle_ns);
		num(nums, "idle_frac", frac);
		num(nums, "idle_after_sync_ns", (double)by[0]);
		num(nums, "idle_launch_bound_ns", (double)by[1]);
		num(nums, "idle_waiting_data_ns", (double)by[2]);
		num(nums, "idle_other_ns", (double)p->idle_other_ns);
		num(nums, "gaps", (double)n);
		evs = cJSON_GetObjectItem(f, "evidence");
		for (size_t i = 0; i < n && i < MAX_EVIDENCE; i++) {
			static const char *const cause[] = { "after a host sync", "launch-bound",
							     "waiting on data", "other" };
			char name[160];

			snprintf(name, sizeof(name), "GPU idle gap (%s%s%s)", cause[g[i].cause],
				 g[i].by ? ": " : "", g[i].by ? S(c, g[i].by->name) : "");
			cJSON_AddItemToArray(evs, evidence(c, p, g[i].by ? g[i].by :
							     &p->in->ev[p->host[0]], g[i].a,
							     g[i].b - g[i].a, name));
			if (!g[i].by)
				cJSON_SetNumberValue(cJSON_GetObjectItem(
					cJSON_GetArrayItem(evs, cJSON_GetArraySize(evs) - 1), "tid"), 0);
		}
	}
	/* host syncs that drain the GPU, each a finding of its own */
	if ((double)by[0] / win >= 0.05) {
		const struct rev *ev = p->in->ev;
		uint64_t blocked = 0;
		size_t syncs = 0;

		for (size_t i = 0; i < p->nr_host; i++) {
			const struct rev *e = &ev[p->host[i]];

			if (e->ts >= p->win_a && e->ts < p->win_b && is_blocking(p, e))
				blocked += e->dur, syncs += e->kind == RK_SYNC;
		}
		snprintf(title, sizeof(title), "%zu host syncs (%.1f per step) leave the GPU idle "
			 "%.1f%% of the time (%s)", syncs, p->nr_steps ? (double)syncs / p->nr_steps : 0,
			 100.0 * by[0] / win, rl);
		f = finding(c, "host_sync", (double)by[0] / win, title,
			    "each sync waits for all queued GPU work, then the GPU waits for the host: "
			    "drop per-step .item()/.cpu()/.numpy()/print(tensor)/"
			    "torch.cuda.synchronize(); accumulate metrics on the GPU and read them every "
			    "N steps; copy with non_blocking=True into pinned memory and wait on an event");
		nums = cJSON_GetObjectItem(f, "numbers");
		rank_num(nums, p);
		num(nums, "syncs", (double)syncs);
		if (p->nr_steps)
			num(nums, "syncs_per_step", (double)syncs / p->nr_steps);
		else
			unknown(nums, "syncs_per_step", "no steps found");
		num(nums, "host_blocked_ns", (double)blocked);
		num(nums, "gpu_idle_after_sync_ns", (double)by[0]);
		num(nums, "gpu_idle_after_sync_frac", (double)by[0] / win);
		num(nums, "gaps_after_sync", (double)count[0]);
		evs = cJSON_GetObjectItem(f, "evidence");
		for (size_t i = 0, k = 0; i < n && k < MAX_EVIDENCE; i++)
			if (g[i].cause == 0 && g[i].by) {
				cJSON_AddItemToArray(evs, evidence(c, p, g[i].by, g[i].by->ts,
								   g[i].by->dur, NULL));
				k++;
			}
	}
	if ((double)by[1] / win >= 0.1) {
		const struct rev *ev = p->in->ev;
		uint64_t cpu = 0, kns = 0;
		size_t with_dur = 0, kernels = 0;

		for (size_t i = 0; i < p->nr_host; i++) {
			const struct rev *e = &ev[p->host[i]];

			if (e->kind == RK_LAUNCH && (e->flags & RF_HAS_DUR))
				cpu += e->dur, with_dur++;
		}
		for (size_t i = 0; i < p->nr_gpu; i++)
			if (ev[p->gpu[i]].kind == RK_KERNEL)
				kns += ev[p->gpu[i]].dur, kernels++;
		snprintf(title, sizeof(title), "launch-bound: the GPU waits for kernel launches "
			 "%.1f%% of the time, %.0f launches/s (%s)", 100.0 * by[1] / win,
			 p->nr_launches / (win / 1e9), rl);
		f = finding(c, "launch_bound", (double)by[1] / win, title,
			    "fewer, larger kernels: torch.compile fuses elementwise ops, CUDA graphs "
			    "(torch.compile(mode=\"reduce-overhead\") or torch.cuda.graphs) replay a "
			    "step with one launch; a larger batch gives each kernel more work");
		nums = cJSON_GetObjectItem(f, "numbers");
		rank_num(nums, p);
		num(nums, "launches", (double)p->nr_launches);
		num(nums, "launches_per_s", p->nr_launches / (win / 1e9));
		num_or_unknown(nums, "cpu_ns_per_launch", with_dur, with_dur ? (double)cpu / with_dur : 0,
			       "launch calls without a duration (trace with --gpu or --durations)");
		num_or_unknown(nums, "kernel_ns_mean", kernels, kernels ? (double)kns / kernels : 0,
			       "no kernels");
		num(nums, "gpu_idle_launch_bound_ns", (double)by[1]);
		evs = cJSON_GetObjectItem(f, "evidence");
		for (size_t i = 0, k = 0; i < n && k < MAX_EVIDENCE; i++)
			if (g[i].cause == 1 && g[i].by) {
				cJSON_AddItemToArray(evs, evidence(c, p, g[i].by, g[i].by->ts,
								   g[i].by->dur, NULL));
				k++;
			}
	}
	free(g);
}

struct dtoh {
	const struct rev *copy, *sync;	/* sync: the wait right after an async copy, or NULL */
	uint64_t wait;
};

static int cmp_dtoh(const void *x, const void *y)
{
	const struct dtoh *a = x, *b = y;

	return a->wait > b->wait ? -1 : a->wait < b->wait;
}

/* DtoH copies the host waits for: a synchronous copy API, or an async one followed by a sync
 * as the thread's next call (`.item()`, `.cpu()`, `.tolist()`). */
static void rule_dtoh(struct ctx *c, struct proc *p)
{
	const struct rev *ev = p->in->ev;
	struct dtoh *hits;
	size_t n = 0;
	uint64_t blocked = 0, bytes = 0;
	char title[200], rl[32];
	cJSON *f, *nums, *evs;

	hits = calloc(p->nr_host + 1, sizeof(*hits));
	if (!hits)
		return;
	for (size_t i = 0; i < p->nr_host; i++) {
		const struct rev *e = &ev[p->host[i]], *next = NULL;
		uint64_t wait = e->dur;

		if (e->kind != RK_COPY || e->dir != RD_DTOH || e->ts < p->win_a || e->ts >= p->win_b)
			continue;
		if (e->flags & RF_ASYNC) {
			for (size_t k = i + 1; k < p->nr_host; k++)
				if (ev[p->host[k]].tid == e->tid && ev[p->host[k]].kind != RK_PYFUNC) {
					next = &ev[p->host[k]];
					break;
				}
			if (!next || next->kind != RK_SYNC || next->ts - (e->ts + e->dur) > 1000000)
				continue;
			wait += next->dur;
		}
		hits[n++] = (struct dtoh){ e, next, wait };
		blocked += wait;
		bytes += e->bytes;
	}
	if (n >= 2 && (!p->nr_steps || n * 2 >= p->nr_steps)) {
		rank_label(p, rl, sizeof(rl));
		snprintf(title, sizeof(title), "%zu blocking device-to-host copies (%.1f per step), "
			 "host blocked %.3f ms (%s)", n, p->nr_steps ? (double)n / p->nr_steps : 0,
			 blocked / 1e6, rl);
		f = finding(c, "blocking_dtoh", (double)blocked / (p->win_b - p->win_a + 1), title,
			    "a blocking copy to the host (.item(), .cpu(), .tolist(), bool(tensor) in an "
			    "if) waits for every queued kernel: keep values on the GPU, read them every "
			    "N steps, or copy with .to(\"cpu\", non_blocking=True) into pinned memory and "
			    "synchronize on an event when the value is needed");
		nums = cJSON_GetObjectItem(f, "numbers");
		rank_num(nums, p);
		num(nums, "copies", (double)n);
		if (p->nr_steps)
			num(nums, "per_step", (double)n / p->nr_steps);
		else
			unknown(nums, "per_step", "no steps found");
		num(nums, "bytes", (double)bytes);
		num(nums, "host_blocked_ns", (double)blocked);
		evs = cJSON_GetObjectItem(f, "evidence");
		qsort(hits, n, sizeof(*hits), cmp_dtoh);
		for (size_t i = 0; i < n && i < MAX_EVIDENCE; i++) {
			char name[128];

			snprintf(name, sizeof(name), "%s DtoH %llu B%s%s", S(c, hits[i].copy->name),
				 (unsigned long long)hits[i].copy->bytes, hits[i].sync ? " + " : "",
				 hits[i].sync ? S(c, hits[i].sync->name) : "");
			cJSON_AddItemToArray(evs, evidence(c, p, hits[i].copy, hits[i].copy->ts,
							   hits[i].wait, name));
		}
	}
	free(hits);
}

static void rule_copies(struct ctx *c)
{
	uint64_t pg_bytes = 0, pg_ns = 0, pin_bytes = 0, pin_ns = 0, pg_n = 0, pin_n = 0;
	const struct rev *first = NULL;
	const struct proc *fp = NULL;
	char title[200];
	cJSON *f, *nums, *evs;

	for (size_t k = 0; k < c->nr_procs; k++) {
		const struct proc *p = &c->procs[k];

		for (size_t i = 0; i < p->nr_gpu; i++) {
			const struct rev *e = &p->in->ev[p->gpu[i]];

			if (e->kind != RK_GPU_COPY)
				continue;
			if (e->flags & RF_PAGEABLE) {
				pg_bytes += e->bytes, pg_ns += e->dur, pg_n++;
				if (!first || e->dur > first->dur)
					first = e, fp = p;
			} else if (e->flags & RF_PINNED) {
				pin_bytes += e->bytes, pin_ns += e->dur, pin_n++;
			}
		}
	}
	if (pg_bytes < (1 << 20))
		return;
	snprintf(title, sizeof(title), "%llu copies from/to pageable host memory, %.1f MB at "
		 "%.2f GB/s%s", (unsigned long long)pg_n, pg_bytes / 1e6,
		 pg_ns ? (double)pg_bytes / pg_ns : 0, pin_ns ? "" : "");
	if (pin_ns) {
		size_t l = strlen(title);

		snprintf(title + l, sizeof(title) - l, " (pinned: %.2f GB/s)",
			 (double)pin_bytes / pin_ns);
	}
	f = finding(c, "pageable_copies", pg_n ? 0.3 : 0, title,
		    "copies from pageable memory are staged and synchronous: DataLoader(pin_memory="
		    "True), tensor.pin_memory(), then .to(device, non_blocking=True)");
	nums = cJSON_GetObjectItem(f, "numbers");
	num(nums, "pageable_copies", (double)pg_n);
	num(nums, "pageable_bytes", (double)pg_bytes);
	num(nums, "pageable_ns", (double)pg_ns);
	num(nums, "pageable_gbps", pg_ns ? (double)pg_bytes / pg_ns : 0);
	num(nums, "pinned_copies", (double)pin_n);
	num(nums, "pinned_bytes", (double)pin_bytes);
	num_or_unknown(nums, "pinned_gbps", pin_ns, pin_ns ? (double)pin_bytes / pin_ns : 0,
		       "no pinned copies");
	evs = cJSON_GetObjectItem(f, "evidence");
	{
		const struct rev *l = launch_of(fp, first);

		cJSON_AddItemToArray(evs, evidence(c, fp, l ? l : first, first->ts, first->dur,
						   S(c, first->name)));
	}
}

static void rule_tiny(struct ctx *c)
{
	uint64_t n = 0, tiny = 0, ns = 0, tiny_ns = 0;
	struct u64map by_name = {};
	uint64_t best_name = 0, best = 0;
	char title[200];
	cJSON *f, *nums, *evs;
	const struct rev *ex = NULL;
	const struct proc *exp = NULL;

	for (size_t k = 0; k < c->nr_procs; k++) {
		const struct proc *p = &c->procs[k];

		for (size_t i = 0; i < p->nr_gpu; i++) {
			const struct rev *e = &p->in->ev[p->gpu[i]];
			uint64_t v = 0;

			if (e->kind != RK_KERNEL)
				continue;
			n++;
			ns += e->dur;
			if (e->dur >= TINY_KERNEL_NS)
				continue;
			tiny++;
			tiny_ns += e->dur;
			u64map__get(&by_name, (uint64_t)e->name + 1, &v);
			u64map__set(&by_name, (uint64_t)e->name + 1, ++v);
			if (v > best) {
				best = v, best_name = e->name;
				if (!ex || ex->name != e->name)
					ex = e, exp = p;
			}
		}
	}
	u64map__clear(&by_name);
	if (tiny < 20 || tiny * 10 < n * 3)
		return;
	snprintf(title, sizeof(title), "%llu of %llu kernels (%.0f%%) run under 10 us, mean "
		 "%.1f us", (unsigned long long)tiny, (unsigned long long)n, 100.0 * tiny / n,
		 tiny_ns / 1e3 / tiny);
	f = finding(c, "tiny_kernels", (double)tiny / n, title,
		    "each launch costs microseconds of CPU: fuse small ops (torch.compile), use "
		    "fused optimizers (foreach=True / fused=True), larger batches, CUDA graphs");
	nums = cJSON_GetObjectItem(f, "numbers");
	num(nums, "kernels", (double)n);
	num(nums, "tiny_kernels", (double)tiny);
	num(nums, "tiny_count_frac", (double)tiny / n);
	num(nums, "tiny_time_frac", ns ? (double)tiny_ns / ns : 0);
	num(nums, "tiny_mean_ns", (double)tiny_ns / tiny);
	num(nums, "threshold_ns", TINY_KERNEL_NS);
	evs = cJSON_GetObjectItem(f, "evidence");
	if (ex) {
		const struct rev *l = launch_of(exp, ex);

		(void)best_name;
		cJSON_AddItemToArray(evs, evidence(c, exp, l ? l : ex, ex->ts, ex->dur, S(c, ex->name)));
	}
}

/* NCCL kernels on the GPU, and how much of them ran while a compute kernel ran too. */
static void comm_overlap(struct proc *p)
{
	const struct rev *ev = p->in->ev;
	struct ival *comm = calloc(p->nr_gpu + 1, sizeof(*comm));
	struct ival *comp = calloc(p->nr_gpu + 1, sizeof(*comp));
	size_t nc = 0, nk = 0;

	if (!comm || !comp)
		goto cleanup;
	for (size_t i = 0; i < p->nr_gpu; i++) {
		const struct rev *e = &ev[p->gpu[i]];
		struct ival *set = e->flags & RF_NCCL_KERNEL ? comm : comp;
		size_t *n = e->flags & RF_NCCL_KERNEL ? &nc : &nk;

		if (e->kind != RK_KERNEL || !e->dur || e->ts >= p->win_b || e->ts + e->dur <= p->win_a)
			continue;
		if (*n && e->ts <= set[*n - 1].b) {
			if (e->ts + e->dur > set[*n - 1].b)
				set[*n - 1].b = e->ts + e->dur;
		} else {
			set[(*n)++] = (struct ival){ e->ts, e->ts + e->dur, i };
		}
	}
	for (size_t i = 0, k = 0; i < nc; i++) {
		p->comm_ns += comm[i].b - comm[i].a;
		while (k < nk && comp[k].b <= comm[i].a)
			k++;
		for (size_t j = k; j < nk && comp[j].a < comm[i].b; j++) {
			uint64_t a = comp[j].a > comm[i].a ? comp[j].a : comm[i].a;
			uint64_t b = comp[j].b < comm[i].b ? comp[j].b : comm[i].b;

			if (b > a)
				p->comm_overlap_ns += b - a;
		}
	}
cleanup:
	free(comm);
	free(comp);
}

static void rule_comm(struct ctx *c, struct proc *p)
{
	uint64_t win = p->win_b - p->win_a, exposed;
	char title[200], rl[32];
	cJSON *f, *nums;

	comm_overlap(p);
	exposed = p->comm_ns - p->comm_overlap_ns;
	if (!win || !p->comm_ns || exposed * 5 < win)
		return;
	rank_label(p, rl, sizeof(rl));
	snprintf(title, sizeof(title), "NCCL kernels %.1f%% of the time, %.0f%% of it overlapped "
		 "with compute (%s)", 100.0 * p->comm_ns / win, 100.0 * p->comm_overlap_ns / p->comm_ns,
		 rl);
	f = finding(c, "comm_not_overlapped", (double)exposed / win, title,
		    "communication that does not overlap compute adds to every step: let DDP "
		    "overlap gradient all-reduce with backward (no sync between backward and the "
		    "all-reduce; tune bucket_cap_mb), FSDP prefetching (forward_prefetch, "
		    "backward_prefetch), async_op=True collectives waited for later; a long NCCL "
		    "kernel can also be a wait for a slower rank (see straggler_rank)");
	nums = cJSON_GetObjectItem(f, "numbers");
	rank_num(nums, p);
	num(nums, "comm_ns", (double)p->comm_ns);
	num(nums, "comm_overlapped_ns", (double)p->comm_overlap_ns);
	num(nums, "comm_exposed_ns", (double)exposed);
	num(nums, "comm_frac", (double)p->comm_ns / win);
	num(nums, "overlap_frac", (double)p->comm_overlap_ns / p->comm_ns);
}

/* Collective wait: the k-th NCCL kernel of every rank is the same collective (NCCL requires
 * the same order on all ranks); each lasts until the last rank arrives, so its duration
 * beyond the shortest one of the k-th is time spent waiting for others. */
static void rule_straggler(struct ctx *c)
{
	size_t nr = 0, ncoll = SIZE_MAX;
	uint64_t **durs;
	struct proc **rp;
	double *wait, sorted_med;
	size_t slow = 0;
	char title[200], rl[32];
	cJSON *f, *nums;

	rp = calloc(c->nr_procs + 1, sizeof(*rp));
	durs = calloc(c->nr_procs + 1, sizeof(*durs));
	wait = calloc(c->nr_procs + 1, sizeof(*wait));
	if (!rp || !durs || !wait)
		goto cleanup;
	for (size_t k = 0; k < c->nr_procs; k++) {
		struct proc *p = &c->procs[k];
		size_t n = 0;

		if (!p->in->gpu)
			continue;
		durs[nr] = calloc(p->nr_gpu + 1, sizeof(uint64_t));
		if (!durs[nr])
			goto cleanup;
		for (size_t i = 0; i < p->nr_gpu; i++) {
			const struct rev *e = &p->in->ev[p->gpu[i]];

			if (e->kind == RK_KERNEL && (e->flags & RF_NCCL_KERNEL))
				durs[nr][n++] = e->dur;
		}
		if (!n) {
			free(durs[nr]);
			durs[nr] = NULL;
			continue;
		}
		rp[nr++] = p;
		if (n < ncoll)
			ncoll = n;
	}
	if (nr < 2)
		goto cleanup;
	for (size_t i = 0; i < ncoll; i++) {
		uint64_t lo = UINT64_MAX;

		for (size_t r = 0; r < nr; r++)
			if (durs[r][i] < lo)
				lo = durs[r][i];
		for (size_t r = 0; r < nr; r++)
			wait[r] += (double)(durs[r][i] - lo);
	}
	for (size_t r = 0; r < nr; r++) {
		rp[r]->collective_wait_ns = wait[r];
		if (wait[r] < wait[slow])
			slow = r;
	}
	{
		double *w = calloc(nr, sizeof(double));
		size_t m = 0;
		uint64_t win = rp[slow]->win_b - rp[slow]->win_a;

		if (!w)
			goto cleanup;
		for (size_t r = 0; r < nr; r++)
			if (r != slow)
				w[m++] = wait[r];
		for (size_t i = 1; i < m; i++)
			for (size_t j = i; j > 0 && w[j - 1] > w[j]; j--) {
				double t = w[j];

				w[j] = w[j - 1];
				w[j - 1] = t;
			}
		sorted_med = w[m / 2];
		free(w);
		/* the others wait >= 10 % of the time, the slow one at most a quarter of that */
		if (!win || sorted_med < 0.1 * win || wait[slow] > 0.25 * sorted_med)
			goto cleanup;
		rank_label(rp[slow], rl, sizeof(rl));
		snprintf(title, sizeof(title), "%s is a straggler: the other ranks wait %.3f ms for "
			 "it in collectives (%.1f%% of the time), it waits %.3f ms", rl,
			 sorted_med / 1e6, 100.0 * sorted_med / win, wait[slow] / 1e6);
		f = finding(c, "straggler_rank", sorted_med / win, title,
			    "find what the slow rank does that the others do not: more data per step "
			    "(uneven shards, variable sequence lengths), a slower input pipeline, host "
			    "work only on that rank (logging, checkpointing on rank 0), CPU contention "
			    "or a slower GPU; balance the work or move it off the critical path");
		nums = cJSON_GetObjectItem(f, "numbers");
		rank_num(nums, rp[slow]);
		num(nums, "pid", rp[slow]->rp->pid);
		num(nums, "collective_wait_ns", wait[slow]);
		num(nums, "others_collective_wait_ns_median", sorted_med);
		num(nums, "collectives", (double)ncoll);
		num(nums, "ranks", (double)nr);
		if (rp[slow]->nr_steps)
			num(nums, "delay_per_step_ns", (sorted_med - wait[slow]) / rp[slow]->nr_steps);
	}
cleanup:
	if (durs)
		for (size_t r = 0; r < c->nr_procs; r++)
			free(durs[r]);
	free(durs);
	free(rp);
	free(wait);
}

static void rule_memory(struct ctx *c, struct proc *p)
{
	const struct rev *ev = p->in->ev;
	uint64_t alloc[128] = {}, peak_resv[128] = {}, alloc_at_peak[128] = {},
		 peak_alloc[128] = {};
	const struct rev *peak_ev[128] = {};
	bool in_peak[128] = {};
	size_t ooms = 0;
	const struct rev *first_oom = NULL;
	char title[200], rl[32];
	cJSON *f, *nums, *evs;

	rank_label(p, rl, sizeof(rl));
	for (size_t i = 0; i < p->in->nr; i++) {
		const struct rev *e = &ev[i];
		int d = e->device < 0 ? 0 : e->device;

		if (e->pid != p->rp->pid)
			continue;
		if (e->kind == RK_MEM_COUNTER) {
			/* Allocated at the peak: the most allocated while reserved stays at its
			 * peak. The allocator reserves a segment before it hands out the block
			 * that needed it (the reserved counter moves first), and the smallest
			 * unused share is the one the finding may claim. */
			if (e->flags & RF_RESERVED) {
				if (e->bytes > peak_resv[d]) {
					peak_resv[d] = e->bytes;
					alloc_at_peak[d] = alloc[d];
					peak_ev[d] = e;
				} else if (e->bytes == peak_resv[d] && alloc[d] > alloc_at_peak[d]) {
					alloc_at_peak[d] = alloc[d];
				}
				in_peak[d] = e->bytes == peak_resv[d];
			} else {
				alloc[d] = e->bytes;
				if (e->bytes > peak_alloc[d])
					peak_alloc[d] = e->bytes;
				if (in_peak[d] && e->bytes > alloc_at_peak[d])
					alloc_at_peak[d] = e->bytes;
			}
		} else if (e->kind == RK_OOM) {
			ooms++;
			if (!first_oom)
				first_oom = e;
		}
	}
	if (ooms) {
		snprintf(title, sizeof(title), "%zu out-of-memory allocations (%s), the first "
			 "asking %.1f MiB", ooms, rl, first_oom->bytes / 1048576.0);
		f = finding(c, "oom", 1, title,
			    "lower the peak: a smaller batch or activation checkpointing "
			    "(torch.utils.checkpoint), mixed precision, free references to tensors "
			    "kept across steps (losses appended to a list without .item()); "
			    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True when reserved memory is "
			    "much larger than allocated");
		nums = cJSON_GetObjectItem(f, "numbers");
		rank_num(nums, p);
		num(nums, "ooms", (double)ooms);
		num(nums, "first_request_bytes", (double)first_oom->bytes);
		num(nums, "peak_allocated_bytes", (double)peak_alloc[first_oom->device < 0 ? 0 : first_oom->device]);
		num(nums, "peak_reserved_bytes", (double)peak_resv[first_oom->device < 0 ? 0 : first_oom->device]);
		evs = cJSON_GetObjectItem(f, "evidence");
		cJSON_AddItemToArray(evs, evidence(c, p, first_oom, first_oom->ts, 0, NULL));
	}
	for (int d = 0; d < 128; d++) {
		uint64_t unused = peak_resv[d] - (alloc_at_peak[d] < peak_resv[d] ? alloc_at_peak[d] : peak_resv[d]);

		if (!peak_resv[d] || !peak_alloc[d] || unused * 2 < peak_resv[d] ||
		    unused < (256ull << 20))
			continue;
		snprintf(title, sizeof(title), "memory peak %.1f MiB reserved on cuda:%d with %.1f "
			 "MiB of it unused by tensors (%s)", peak_resv[d] / 1048576.0, d,
			 unused / 1048576.0, rl);
		f = finding(c, "memory_peak", (double)unused / peak_resv[d], title,
			    "the caching allocator holds memory no tensor uses (fragmentation): "
			    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or allocate the "
			    "largest tensors first and keep their shapes fixed");
		nums = cJSON_GetObjectItem(f, "numbers");
		rank_num(nums, p);
		num(nums, "device", d);
		num(nums, "peak_reserved_bytes", (double)peak_resv[d]);
		num(nums, "peak_allocated_bytes", (double)peak_alloc[d]);
		num(nums, "allocated_at_peak_bytes", (double)(peak_resv[d] - unused));
		num(nums, "unused_at_peak_bytes", (double)unused);
		snprintf(title, sizeof(title), "reserved %.1f MiB, at most %.1f MiB allocated while "
			 "it stays there", peak_resv[d] / 1048576.0,
			 (peak_resv[d] - unused) / 1048576.0);
		cJSON_AddItemToArray(cJSON_GetObjectItem(f, "evidence"),
				     evidence(c, p, peak_ev[d], peak_ev[d]->ts, 0, title));
	}
}

/* --- kernels, timeline, ranks ---------------------------------------------------------------- */

struct kdur {
	uint32_t name;
	uint64_t dur;
};

static int cmp_kdur(const void *x, const void *y)
{
	const struct kdur *a = x, *b = y;

	if (a->name != b->name)
		return a->name < b->name ? -1 : 1;
	return a->dur < b->dur ? -1 : a->dur > b->dur;
}

struct ksum {
	uint32_t name;
	size_t first, n;
	uint64_t total;
};

static int cmp_ksum(const void *x, const void *y)
{
	const struct ksum *a = x, *b = y;

	return a->total > b->total ? -1 : a->total < b->total;
}

static void kernels(struct ctx *c)
{
	cJSON *k = cJSON_AddObjectToObject(c->report, "kernels");
	cJSON *top = cJSON_AddArrayToObject(k, "top"), *bs = cJSON_AddArrayToObject(k, "by_stream");
	cJSON *l = cJSON_AddObjectToObject(k, "launch");
	size_t nk = 0, ns = 0, nl = 0, nld = 0;
	struct kdur *kd;
	struct ksum *sums;
	uint64_t total = 0, *ld, host_span = 0, lsum = 0;
	struct u64map streams = {};

	for (size_t p = 0; p < c->nr_procs; p++) {
		nk += c->procs[p].nr_gpu;
		nl += c->procs[p].nr_host;
	}
	kd = calloc(nk + 1, sizeof(*kd));
	sums = calloc(nk + 1, sizeof(*sums));
	ld = calloc(nl + 1, sizeof(*ld));
	if (!kd || !sums || !ld)
		goto cleanup;
	nk = nl = 0;
	for (size_t q = 0; q < c->nr_procs; q++) {
		const struct proc *p = &c->procs[q];

		host_span += p->win_b > p->win_a ? p->win_b - p->win_a : 0;
		for (size_t i = 0; i < p->nr_gpu; i++) {
			const struct rev *e = &p->in->ev[p->gpu[i]];
			uint64_t key, v = 0;

			if (!is_busy_kind(e->kind))
				continue;
			/* by stream: (input, device, stream) */
			key = ((uint64_t)(p->in - c->in) << 48 | (uint64_t)(uint8_t)e->device << 40 |
			       (e->stream & 0xffffffffff)) + 1;
			u64map__get(&streams, key, &v);
			u64map__set(&streams, key, v + e->dur);
			if (e->kind != RK_KERNEL)
				continue;
			kd[nk++] = (struct kdur){ e->name, e->dur };
			total += e->dur;
		}
		for (size_t i = 0; i < p->nr_host; i++) {
			const struct rev *e = &p->in->ev[p->host[i]];

			if (e->kind != RK_LAUNCH || e->ts < p->win_a || e->ts >= p->win_b)
				continue;
			nl++;
			if (e->flags & RF_HAS_DUR)
				ld[nld++] = e->dur, lsum += e->dur;
		}
	}
	qsort(kd, nk, sizeof(*kd), cmp_kdur);
	for (size_t i = 0; i < nk;) {
		size_t j = i;
		uint64_t t = 0;

		while (j < nk && kd[j].name == kd[i].name)
			t += kd[j++].dur;
		sums[ns++] = (struct ksum){ kd[i].name, i, j - i, t };
		i = j;
	}
	qsort(sums, ns, sizeof(*sums), cmp_ksum);
	for (size_t i = 0; i < ns && i < 20; i++) {
		cJSON *o = cJSON_CreateObject();
		uint64_t *d = calloc(sums[i].n, sizeof(uint64_t));

		if (!d)
			break;
		for (size_t j = 0; j < sums[i].n; j++)
			d[j] = kd[sums[i].first + j].dur;
		cJSON_AddStringToObject(o, "name", S(c, sums[i].name));
		num(o, "count", (double)sums[i].n);
		num(o, "total_ns", (double)sums[i].total);
		num(o, "mean_ns", (double)sums[i].total / sums[i].n);
		num(o, "p50_ns", (double)pct(d, sums[i].n, 0.5));
		num(o, "p99_ns", (double)pct(d, sums[i].n, 0.99));
		num(o, "share", total ? (double)sums[i].total / total : 0);
		free(d);
		cJSON_AddItemToArray(top, o);
	}
	for (size_t it = 0; u64map__next(&streams, &it, NULL, NULL);) {
		uint64_t key = streams.keys[it - 1] - 1, busy = streams.vals[it - 1];
		cJSON *o = cJSON_CreateObject();
		size_t kernels_on = 0;
		size_t in = key >> 48;
		int dev = (int)(int8_t)(key >> 40 & 0xff);
		uint64_t stream = key & 0xffffffffff;

		for (size_t q = 0; q < c->nr_procs; q++) {
			const struct proc *p = &c->procs[q];

			if ((size_t)(p->in - c->in) != in)
				continue;
			for (size_t i = 0; i < p->nr_gpu; i++) {
				const struct rev *e = &p->in->ev[p->gpu[i]];

				kernels_on += e->kind == RK_KERNEL && e->device == dev &&
					      (e->stream & 0xffffffffff) == stream;
			}
		}
		if (c->nr_in > 1)
			cJSON_AddStringToObject(o, "trace", c->in[in].path);
		num(o, "device", dev);
		num(o, "stream", (double)stream);
		num(o, "kernels", (double)kernels_on);
		num(o, "busy_ns", (double)busy);
		cJSON_AddItemToArray(bs, o);
	}
	num(l, "count", (double)nl);
	qsort(ld, nld, sizeof(*ld), cmp_u64);
	num_or_unknown(l, "cpu_ns_mean", nld, nld ? (double)lsum / nld : 0,
		       "launch calls carry no duration: trace with --gpu or --durations");
	num_or_unknown(l, "cpu_ns_p50", nld, (double)pct(ld, nld, 0.5),
		       "launch calls carry no duration: trace with --gpu or --durations");
	num_or_unknown(l, "kernel_ns_mean", nk, nk ? (double)total / nk : 0,
		       c->any_gpu ? "no kernels" : "no --gpu data in the trace");
	num_or_unknown(l, "per_s", host_span, host_span ? nl / (host_span / 1e9) : 0,
		       "no host calls");
cleanup:
	u64map__clear(&streams);
	free(kd);
	free(sums);
	free(ld);
}

static void timeline(struct ctx *c)
{
	cJSON *t = cJSON_AddObjectToObject(c->report, "timeline");
	cJSON *u = cJSON_AddArrayToObject(t, "utilization");
	cJSON *ig = cJSON_AddObjectToObject(t, "idle_gaps");
	cJSON *edges = cJSON_AddArrayToObject(ig, "edges_ns"), *counts = cJSON_AddArrayToObject(ig, "counts");

	for (size_t i = 0; i < sizeof(gap_edges) / sizeof(gap_edges[0]); i++) {
		cJSON_AddItemToArray(edges, cJSON_CreateNumber((double)gap_edges[i]));
		cJSON_AddItemToArray(counts, cJSON_CreateNumber((double)c->gap_counts[i]));
	}
	for (size_t q = 0; q < c->nr_procs; q++) {
		const struct proc *p = &c->procs[q];
		int devs[128] = {};

		for (size_t i = 0; i < p->nr_gpu; i++)
			if (p->in->ev[p->gpu[i]].device >= 0)
				devs[(int)p->in->ev[p->gpu[i]].device] = 1;
		for (int d = 0; d < 128; d++) {
			uint64_t a = UINT64_MAX, b = 0, bin;
			double busy[UTIL_BINS] = {};
			cJSON *o, *arr;

			if (!devs[d])
				continue;
			for (size_t i = 0; i < p->nr_gpu; i++) {
				const struct rev *e = &p->in->ev[p->gpu[i]];

				if (e->device != d || !is_busy_kind(e->kind))
					continue;
				if (e->ts < a)
					a = e->ts;
				if (e->ts + e->dur > b)
					b = e->ts + e->dur;
			}
			if (b <= a)
				continue;
			bin = (b - a + UTIL_BINS - 1) / UTIL_BINS;
			/* per device: union of that device's work, bin by bin (streams overlap) */
			{
				uint64_t ca = 0, cb = 0;

				for (size_t i = 0; i <= p->nr_gpu; i++) {
					const struct rev *e = i < p->nr_gpu ? &p->in->ev[p->gpu[i]] : NULL;

					if (e && (e->device != d || !is_busy_kind(e->kind) || !e->dur))
						continue;
					if (e && cb && e->ts <= cb) {
						if (e->ts + e->dur > cb)
							cb = e->ts + e->dur;
						continue;
					}
					for (uint64_t x = ca; cb && x < cb;) {
						size_t k = (size_t)((x - a) / bin);
						uint64_t end = a + (k + 1) * bin;

						if (k >= UTIL_BINS)
							break;
						if (end > cb)
							end = cb;
						busy[k] += (double)(end - x);
						x = end;
					}
					if (e)
						ca = e->ts, cb = e->ts + e->dur;
				}
			}
			o = cJSON_CreateObject();
			if (p->rank >= 0)
				num(o, "rank", p->rank);
			num(o, "pid", p->rp->pid);
			num(o, "device", d);
			num(o, "bin_ns", (double)bin);
			num(o, "start_ns", (double)a);
			arr = cJSON_AddArrayToObject(o, "busy_frac");
			for (int k = 0; k < UTIL_BINS; k++)
				cJSON_AddItemToArray(arr, cJSON_CreateNumber(
					round(busy[k] / bin * 1000) / 1000));
			cJSON_AddItemToArray(u, o);
		}
	}
}

static void ranks(struct ctx *c)
{
	cJSON *r = cJSON_AddArrayToObject(c->report, "ranks");

	for (size_t q = 0; q < c->nr_procs; q++) {
		const struct proc *p = &c->procs[q];
		cJSON *o = cJSON_CreateObject();
		double sum = 0;

		if (p->rank >= 0)
			num(o, "rank", p->rank);
		else
			unknown(o, "rank", "no rank in the trace");
		num(o, "pid", p->rp->pid);
		for (size_t s = 0; s < p->nr_steps; s++)
			sum += (double)(p->steps[s].b - p->steps[s].a);
		num_or_unknown(o, "step_wall_ns_mean", p->nr_steps, p->nr_steps ? sum / p->nr_steps : 0,
			       "no steps found");
		num_or_unknown(o, "collective_wait_ns", !isnan(p->collective_wait_ns),
			       p->collective_wait_ns,
			       !p->in->gpu ? "no --gpu data: NCCL kernel times unknown" :
			       "no NCCL kernels in two or more ranks' traces");
		cJSON_AddItemToArray(r, o);
	}
}

static void inputs(struct ctx *c)
{
	cJSON *a = cJSON_AddArrayToObject(c->report, "inputs");

	for (size_t i = 0; i < c->nr_in; i++) {
		const struct rinput *in = &c->in[i];
		cJSON *o = cJSON_CreateObject();
		int rank = -1;

		for (size_t k = 0; k < in->nr_procs; k++)
			if (in->procs[k].rank >= 0 && rank < 0)
				rank = in->procs[k].rank;
		cJSON_AddStringToObject(o, "path", in->path);
		if (in->nr_procs)
			num(o, "pid", in->procs[0].pid);
		else
			unknown(o, "pid", "no host process in the trace");
		if (rank >= 0)
			num(o, "rank", rank);
		else
			cJSON_AddNullToObject(o, "rank");
		if (in->hostname[0])
			cJSON_AddStringToObject(o, "hostname", in->hostname);
		else
			unknown(o, "hostname", "tptrace traces do not record the host name");
		num(o, "events", (double)in->events_read);
		num(o, "span_ns", (double)in->span_ns);
		cJSON_AddBoolToObject(o, "gpu", in->gpu);
		cJSON_AddBoolToObject(o, "mem", in->mem);
		cJSON_AddBoolToObject(o, "py_stacks", in->py_stacks);
		cJSON_AddItemToArray(a, o);
	}
}

static int cmp_finding(const void *x, const void *y)
{
	static const char *const sev[] = { "high", "medium", "low" };
	const cJSON *a = *(const cJSON *const *)x, *b = *(const cJSON *const *)y;
	const char *sa = cJSON_GetStringValue(cJSON_GetObjectItem(a, "severity"));
	const char *sb = cJSON_GetStringValue(cJSON_GetObjectItem(b, "severity"));
	int ia = 0, ib = 0;

	for (int i = 0; i < 3; i++) {
		if (!strcmp(sa, sev[i]))
			ia = i;
		if (!strcmp(sb, sev[i]))
			ib = i;
	}
	return ia - ib;
}

/* stable by severity: rules already run in the order a user should read them */
static void sort_findings(cJSON *arr)
{
	int n = cJSON_GetArraySize(arr);
	cJSON **items = calloc(n + 1, sizeof(*items));

	if (!items)
		return;
	for (int i = 0; i < n; i++)
		items[i] = cJSON_DetachItemFromArray(arr, 0);
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && cmp_finding(&items[j - 1], &items[j]) > 0; j--) {
			cJSON *t = items[j];

			items[j] = items[j - 1];
			items[j - 1] = t;
		}
	for (int i = 0; i < n; i++)
		cJSON_AddItemToArray(arr, items[i]);
	free(items);
}

cJSON *report_analyze(struct rinput *in, size_t nr_in, struct rstrings *strs,
		      const struct report_opts *o, char *err, size_t errsz)
{
	struct ctx c = { .in = in, .nr_in = nr_in, .strs = strs, .o = o, .all_gpu = true };
	cJSON *steps, *per_rank;
	const char *method = NULL, *detail = NULL;

	for (size_t i = 0; i < nr_in; i++) {
		c.any_gpu |= in[i].gpu;
		c.all_gpu &= in[i].gpu;
		c.any_mem |= in[i].mem;
		c.any_py |= in[i].py_stacks;
	}
	if (build_procs(&c)) {
		snprintf(err, errsz, "out of memory");
		return NULL;
	}
	c.report = cJSON_CreateObject();
	num(c.report, "tptrace_report", 1);
	inputs(&c);
	steps = cJSON_AddObjectToObject(c.report, "steps");
	c.findings = cJSON_AddArrayToObject(c.report, "findings");
	c.cannot = cJSON_AddArrayToObject(c.report, "cannot_judge");
	for (size_t k = 0; k < c.nr_procs; k++) {
		struct proc *p = &c.procs[k];

		if ((p->in->gpu && build_busy(p)) || build_blocking(p)) {
			snprintf(err, errsz, "out of memory");
			cJSON_Delete(c.report);
			return NULL;
		}
		if (o->step_func)
			steps_python(&c, p);
		else
			steps_markers(&c, p);
		window(p);
		if (!method || (!strcmp(method, "none") && p->nr_steps)) {
			method = p->method;
			detail = p->method_detail;
		}
	}
	cJSON_AddStringToObject(steps, "method", method ? method : "none");
	cJSON_AddStringToObject(steps, "method_detail", detail ? detail : "no host process");
	per_rank = cJSON_AddArrayToObject(steps, "per_rank");
	for (size_t k = 0; k < c.nr_procs; k++)
		measure_proc(&c, &c.procs[k], per_rank);
	for (size_t k = 0; k < c.nr_procs; k++) {
		struct proc *p = &c.procs[k];

		if (p->in->gpu)
			rule_idle(&c, p);
		rule_dtoh(&c, p);
		if (p->in->gpu)
			rule_comm(&c, p);
		if (p->in->mem)
			rule_memory(&c, p);
	}
	if (c.any_gpu) {
		rule_tiny(&c);
		rule_copies(&c);
		rule_straggler(&c);
	}
	if (!c.all_gpu) {
		const char *why = c.any_gpu ? "some traces have no --gpu data" :
					      "no --gpu data in the trace (trace with --gpu)";

		cannot_judge(&c, "GPU idle time and its causes (launch-bound, host syncs, data)", why);
		cannot_judge(&c, "whether host syncs leave the GPU idle", why);
		cannot_judge(&c, "tiny kernels and the kernel breakdown", why);
		cannot_judge(&c, "pageable vs pinned copies and their bandwidth", why);
		cannot_judge(&c, "NCCL time and its overlap with compute", why);
		cannot_judge(&c, "straggler ranks (collective wait)", why);
	}
	if (!c.any_mem)
		cannot_judge(&c, "memory peak and out-of-memory allocations",
			     "no memory data in the trace (trace with --mem)");
	{
		bool any_steps = false, launch_dur = false;

		for (size_t k = 0; k < c.nr_procs; k++) {
			any_steps |= c.procs[k].nr_steps > 0;
			for (size_t i = 0; i < c.procs[k].nr_host && !launch_dur; i++) {
				const struct rev *e = &c.procs[k].in->ev[c.procs[k].host[i]];

				launch_dur = e->kind == RK_LAUNCH && (e->flags & RF_HAS_DUR);
			}
		}
		if (!any_steps)
			cannot_judge(&c, "per-step times", detail ? detail : "no steps found");
		if (!launch_dur)
			cannot_judge(&c, "CPU time per launch",
				     "launch calls carry no duration (trace with --gpu or --durations)");
	}
	sort_findings(c.findings);
	kernels(&c);
	timeline(&c);
	ranks(&c);
	for (size_t k = 0; k < c.nr_procs; k++) {
		free(c.procs[k].host);
		free(c.procs[k].gpu);
		free(c.procs[k].busy);
		free(c.procs[k].steps);
		free(c.procs[k].blk);
		u64map__clear(&c.procs[k].corr);
		u64map__clear(&c.procs[k].pinned_calls);
	}
	free(c.procs);
	return c.report;
}
