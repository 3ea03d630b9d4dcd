// SPDX-License-Identifier: MIT
/* report_analyze: the inputs' events -> the report object of docs/report-schema.md.
 *
 * The unit is a host process (a rank): its host calls, and the GPU work its calls launched
 * (a GPU track tptrace labelled with its process is that process's; else joined by CUPTI's
 * correlation id; in a trace of one process all GPU work is its own; work no
 * call carries, such as NCCL's own kernels, goes to the process that launched most work on
 * that device). Every rule returns numbers; a rule whose data is missing (no --gpu, no --mem)
 * adds a cannot_judge entry instead of a guess. The rules are in report_rules.c, the tables
 * in report_tables.c (report_analyze_int.h).
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "report_analyze_int.h"

const uint64_t gap_edges[7] = { 0, 1000, 10000, 100000, 1000000, 10000000, 100000000 };

/* --- small helpers --------------------------------------------------------------------- */

static const struct rinput *sort_in;
static int cmp_ev_ts(const void *a, const void *b)
{
	const struct rev *x = &sort_in->ev[*(const size_t *)a], *y = &sort_in->ev[*(const size_t *)b];

	return x->ts < y->ts ? -1 : x->ts > y->ts;
}

int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

uint64_t pct(const uint64_t *sorted, size_t n, double p)
{
	size_t i;

	if (!n)
		return 0;
	i = (size_t)ceil(p * n) - (p > 0);
	return sorted[i >= n ? n - 1 : i];
}

cJSON *num(cJSON *o, const char *k, double v)
{
	return cJSON_AddNumberToObject(o, k, v);
}

/* null with "<k>_unknown": why */
void unknown(cJSON *o, const char *k, const char *why)
{
	char key[96];

	cJSON_AddNullToObject(o, k);
	snprintf(key, sizeof(key), "%s_unknown", k);
	cJSON_AddStringToObject(o, key, why);
}

void num_or_unknown(cJSON *o, const char *k, bool known, double v, const char *why)
{
	if (known)
		num(o, k, v);
	else
		unknown(o, k, why);
}

const char *S(const struct ctx *c, uint32_t id)
{
	return rstrings__get(c->strs, id);
}

bool is_busy_kind(int k)
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

const char *rank_label(const struct proc *p, char *buf, size_t n)
{
	if (p->rank >= 0)
		snprintf(buf, n, "rank %d", p->rank);
	else
		snprintf(buf, n, "pid %u", p->rp->pid);
	return buf;
}

/* |[a,b) ∩ busy| by binary search on the merged intervals */
uint64_t busy_in(const struct proc *p, uint64_t a, uint64_t b)
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

cJSON *evidence(const struct ctx *c, const struct proc *p, const struct rev *e,
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

cJSON *finding(struct ctx *c, const struct proc *p, const char *id, double share,
	       const char *title, const char *fix)
{
	cJSON *f = cJSON_CreateObject(), *numbers;

	cJSON_AddStringToObject(f, "id", id);
	cJSON_AddStringToObject(f, "severity", share >= 0.3 ? "high" : share >= 0.1 ? "medium" : "low");
	cJSON_AddStringToObject(f, "title", title);
	numbers = cJSON_AddObjectToObject(f, "numbers");
	if (p)
		rank_num(numbers, p);
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
		struct u64map corr_pid = {}, dev_pid_votes = {}, pid_proc = {};
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
			u64map__set(&pid_proc, (uint64_t)p->rp->pid + 1, c->nr_procs);
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
				uint64_t k = 0, host;

				if (ev->kind < RK_KERNEL || ev->kind > RK_GPU_SYNC)
					continue;
				/* a track labelled with its process is that process's; else by the
				 * correlation of the call that launched it (one process per trace
				 * in Kineto's) */
				if (u64map__get(&in->gpu_host, (uint64_t)ev->pid + 1, &host))
					u64map__get(&pid_proc, host + 1, &k);
				else if (c->nr_procs - first == 1)
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
		u64map__clear(&pid_proc);
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

static bool is_step_func(struct ctx *c, const struct rev *e)
{
	return e->kind == RK_PYFUNC && name_is_func(S(c, e->name), c->o->step_func);
}

static bool is_profiler_step(struct ctx *c, const struct rev *e)
{
	return e->kind == RK_USER_ANN && !strncmp(S(c, e->name), "ProfilerStep#", 13);
}

/* Steps are the slices is_step picks, on the thread that has the most of them; that
 * thread, or false when no slice is one (or out of memory). */
static bool steps_of_slices(struct ctx *c, struct proc *p,
			    bool (*is_step)(struct ctx *c, const struct rev *e), uint64_t *tid)
{
	const struct rev *ev = p->in->ev;
	struct u64map per_tid = {};
	uint64_t best_tid = 0, best = 0;

	for (size_t i = 0; i < p->nr_host; i++) {
		const struct rev *e = &ev[p->host[i]];
		uint64_t v = 0;

		if (!is_step(c, e))
			continue;
		u64map__get(&per_tid, (uint64_t)e->tid + 1, &v);
		u64map__set(&per_tid, (uint64_t)e->tid + 1, ++v);
		if (v > best)
			best = v, best_tid = e->tid;
	}
	u64map__clear(&per_tid);
	if (!best || !(p->steps = calloc(best, sizeof(*p->steps))))
		return false;
	for (size_t i = 0; i < p->nr_host; i++) {
		const struct rev *e = &ev[p->host[i]];

		if (e->tid == best_tid && is_step(c, e))
			p->steps[p->nr_steps++] = (struct step){ e->ts, e->ts + e->dur };
	}
	*tid = best_tid;
	return true;
}

static void steps_python(struct ctx *c, struct proc *p)
{
	uint64_t tid;

	snprintf(p->method, sizeof(p->method), "python:%.24s", c->o->step_func);
	if (!steps_of_slices(c, p, is_step_func, &tid)) {
		snprintf(p->method_detail, sizeof(p->method_detail),
			 "no python_function slice named %.80s (traced without --py-stacks, or the "
			 "function makes no CUDA call)", c->o->step_func);
		return;
	}
	snprintf(p->method_detail, sizeof(p->method_detail),
		 "each python_function slice %.80s on thread %lu is a step", c->o->step_func,
		 (unsigned long)tid);
}

/* --torch: torch.profiler's ProfilerStep#N slices (user_annotation; tptrace draws one per
 * optimizer step of its window) are the steps, on the thread with the most. false if none. */
static bool steps_profiler(struct ctx *c, struct proc *p)
{
	uint64_t tid;

	if (!steps_of_slices(c, p, is_profiler_step, &tid))
		return false;
	snprintf(p->method, sizeof(p->method), "profiler_steps");
	snprintf(p->method_detail, sizeof(p->method_detail),
		 "each torch.profiler ProfilerStep#N slice on thread %lu is a step (--torch)",
		 (unsigned long)tid);
	return true;
}

/* a call whose return was never seen (RF_UNFINISHED: a probe attached while it ran, or the
 * trace ended in it) has no known end: no step can end there */
static bool is_marker(const struct rev *e)
{
	if (e->flags & RF_UNFINISHED)
		return false;
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
	bool py = false;

	snprintf(p->method, sizeof(p->method), "none");
	for (size_t i = 0; i < p->nr_host; i++) {
		const struct rev *e = &ev[p->host[i]];
		uint64_t v = 0;

		py |= e->kind == RK_PYFUNC;
		if (e->kind == RK_PYFUNC || e->kind == RK_OOM || e->kind == RK_CPU_OP ||
		    e->kind == RK_USER_ANN)
			continue;
		u64map__get(&per_tid, (uint64_t)e->tid + 1, &v);
		u64map__set(&per_tid, (uint64_t)e->tid + 1, ++v);
		if (v > best)
			best = v, tid = e->tid;
	}
	u64map__clear(&per_tid);
	if (!best) {
		/* kept for its memory counters or OOMs (build_procs), maybe Python slices too */
		snprintf(p->method_detail, sizeof(p->method_detail), "no CUDA or NCCL calls in the "
			 "trace of pid %u%s", p->rp->pid, py || p->in->torch ? "" :
			 " (memory events only)");
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

const struct rev *launch_of(const struct proc *p, const struct rev *g)
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
bool is_blocking(const struct proc *p, const struct rev *e)
{
	if (e->kind == RK_SYNC)
		return true;
	if (e->kind != RK_COPY || !(e->flags & RF_HAS_DUR))
		return false;
	if (!(e->flags & RF_ASYNC))
		return true;
	return e->dur > 20000 && !u64map__get(&p->pinned_calls, (uint64_t)(e - p->in->ev) + 1, NULL);
}

int cmp_gap_len(const void *x, const void *y)
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
struct gap *idle_gaps(struct ctx *c, struct proc *p, size_t *nr)
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
	size_t h0 = 0, g0 = 0, nr_walls = 0, nr_bad = 0;
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
		if (st->b < st->a) {
			/* never a wrapped unsigned difference: the step is left out of every
			 * measure and said to be what it is */
			char why[160];

			snprintf(why, sizeof(why), "tptrace bug: this step ends %llu ns before it "
				 "starts; please report it with the trace",
				 (unsigned long long)(st->a - st->b));
			unknown(o, "wall_ns", why);
			cJSON_AddItemToArray(steps, o);
			nr_bad++;
			continue;
		}
		num(o, "wall_ns", (double)(st->b - st->a));
		walls[nr_walls++] = st->b - st->a;
		wall_sum += (double)(st->b - st->a);
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
	if (nr_bad)
		num(pr, "steps_invalid", (double)nr_bad);
	if (nr_walls && walls) {
		qsort(walls, nr_walls, sizeof(*walls), cmp_u64);
		num(sw, "mean", wall_sum / nr_walls);
		num(sw, "p50", (double)pct(walls, nr_walls, 0.5));
		num(sw, "p99", (double)pct(walls, nr_walls, 0.99));
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
	table_inputs(&c);
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
		else if (!steps_profiler(&c, p))
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
	table_kernels(&c);
	table_ops(&c);
	table_timeline(&c);
	table_ranks(&c);
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
