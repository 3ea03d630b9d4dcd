// SPDX-License-Identifier: MIT
/* report_ops: the operator breakdown of --torch traces, as torch.profiler's
 * key_averages().table() shows it: per op name (aten::addmm, a record_function label) the
 * count, the total CPU time (the slices' durations) and the self CPU time (less the time of
 * the slices nested in each one on its thread), and the GPU time of the kernels, copies and
 * memsets the op launched (--gpu): self for the innermost op around the launch, total for
 * every op around it.
 *
 * Nesting is torch's own rule (FunctionEvent children): on one thread, sorted by start (the
 * longer first on a tie), a slice is the child of the nearest open one that it starts inside
 * and does not outlast. python_function slices (torch's Python tracer, with_stack) take part
 * in the nesting as they do in torch, so a record_function's self time leaves out the Python
 * it ran; they get no row (torch shows them only as a stack's frames). ProfilerStep#N rows are
 * one "ProfilerStep*" row, as torch groups them.
 *
 * A launch is matched to the ops by its thread and time: tptrace's probe of the launch call
 * and the profiler's slices are on one clock (the --torch clock alignment), the main thread
 * under its OS tid. Ops on a torch thread whose OS tid tptrace could not learn cannot be
 * matched: their GPU time is unknown, never 0.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "growbuf.h"
#include "report_analyze_int.h"

#define TORCH_TID_UNKNOWN 0x40000000u	/* user/trace/torchprof.c: a torch thread, OS tid unknown */

struct opsum {
	uint32_t name;
	bool annotation, gpu_unmatched;
	uint64_t count, self, total, gpu_self, gpu_total, launches;
};

struct item {
	size_t ev;
	uint64_t end;
	uint32_t row;		/* index + 1 in the sums; 0: a python_function slice or a launch */
	long parent;		/* the item it is nested in (for a launch: the innermost), -1 none */
	uint64_t children;	/* time of its direct children */
	uint32_t nr_children;
	bool gone;		/* merged into its parent (torch's duplicate nested node) */
};

static const struct rev *sort_ev;
static int cmp_item(const void *x, const void *y)
{
	const struct item *a = x, *b = y;
	const struct rev *ea = &sort_ev[a->ev], *eb = &sort_ev[b->ev];
	bool la = ea->kind == RK_LAUNCH, lb = eb->kind == RK_LAUNCH;

	if (ea->tid != eb->tid)
		return ea->tid < eb->tid ? -1 : 1;
	if (ea->ts != eb->ts)
		return ea->ts < eb->ts ? -1 : 1;
	if (la != lb)		/* a launch at an op's first ns is inside it */
		return la ? 1 : -1;
	return a->end > b->end ? -1 : a->end < b->end;
}

static int cmp_self(const void *x, const void *y)
{
	const struct opsum *a = x, *b = y;

	if (a->self != b->self)
		return a->self > b->self ? -1 : 1;
	return a->name < b->name ? -1 : a->name > b->name;
}

/* the row of name (its index + 1), created on first sight; 0 on ENOMEM */
static uint32_t row_of(struct ctx *c, struct u64map *rows, struct opsum **sums, size_t *nr,
		       size_t *cap, uint32_t name, bool annotation)
{
	uint64_t v = 0;

	if (annotation && !strncmp(S(c, name), "ProfilerStep#", 13))
		name = rstrings__intern(c->strs, "ProfilerStep*", 13);
	if (u64map__get(rows, (uint64_t)name + 1, &v))
		return (uint32_t)v;
	if (ARRAY_RESERVE(*sums, *cap, *nr + 1, 64))
		return 0;
	memset(&(*sums)[*nr], 0, sizeof(**sums));
	(*sums)[*nr].name = name;
	(*sums)[*nr].annotation = annotation;
	if (u64map__set(rows, (uint64_t)name + 1, *nr + 1))
		return 0;
	return (uint32_t)++*nr;
}

/* the item i stands for once merged items are skipped */
static long alive(const struct item *it, long i)
{
	while (i >= 0 && it[i].gone)
		i = it[i].parent;
	return i;
}

/* one process: its slices and launches, by thread and time */
static int ops_of_proc(struct ctx *c, const struct proc *p, struct u64map *rows,
		       struct opsum **sums, size_t *nr, size_t *cap)
{
	const struct rev *ev = p->in->ev;
	struct u64map gpu_of = {};	/* correlation -> GPU ns + 1 */
	struct item *it = calloc(p->nr_host + 1, sizeof(*it));
	long *stack = calloc(p->nr_host + 1, sizeof(*stack));
	size_t n = 0, depth = 0;
	int ret = -ENOMEM;

	if (!it || !stack)
		goto out;
	for (size_t i = 0; i < p->nr_gpu; i++) {
		const struct rev *g = &ev[p->gpu[i]];
		uint64_t v = 0;

		if (!is_busy_kind(g->kind) || !g->corr)
			continue;
		u64map__get(&gpu_of, g->corr, &v);
		if (u64map__set(&gpu_of, g->corr, (v ? v : 1) + g->dur))
			goto out;
	}
	for (size_t i = 0; i < p->nr_host; i++) {
		const struct rev *e = &ev[p->host[i]];
		uint32_t row = 0;

		if (e->kind == RK_CPU_OP || e->kind == RK_USER_ANN) {
			row = row_of(c, rows, sums, nr, cap, e->name, e->kind == RK_USER_ANN);
			if (!row)
				goto out;
		} else if (e->kind != RK_PYFUNC && e->kind != RK_LAUNCH) {
			continue;
		}
		it[n++] = (struct item){ .ev = p->host[i], .end = e->ts + e->dur, .row = row,
					 .parent = -1 };
	}
	sort_ev = ev;
	qsort(it, n, sizeof(*it), cmp_item);
	/* the tree, by torch's rule: a slice is the child of the innermost open one it starts
	 * inside and does not outlast; a launch belongs to the innermost open one */
	for (size_t i = 0; i < n; i++) {
		const struct rev *e = &ev[it[i].ev];

		if (i && ev[it[i - 1].ev].tid != e->tid)
			depth = 0;
		if (e->kind == RK_LAUNCH) {
			while (depth && it[stack[depth - 1]].end <= e->ts)
				depth--;
			it[i].parent = depth ? stack[depth - 1] : -1;
			continue;
		}
		while (depth && (e->ts >= it[stack[depth - 1]].end ||
				 it[i].end > it[stack[depth - 1]].end))
			depth--;
		if (depth) {
			it[i].parent = stack[depth - 1];
			it[stack[depth - 1]].children += e->dur;
			it[stack[depth - 1]].nr_children++;
		}
		stack[depth++] = (long)i;
	}
	/* torch's EventList._remove_dup_nodes: the only child of a slice of its own name (an op
	 * re-dispatched to itself) is merged into it: its children become the parent's. Parents
	 * come first in this order, so a chain folds in one pass. */
	for (size_t i = 0; i < n; i++) {
		long q;

		if (!it[i].row || ev[it[i].ev].kind == RK_LAUNCH)
			continue;
		q = alive(it, it[i].parent);
		it[i].parent = q;
		if (q < 0 || it[q].row != it[i].row || it[q].nr_children != 1)
			continue;
		it[i].gone = true;
		it[q].children = it[i].children;
		it[q].nr_children = it[i].nr_children;
	}
	for (size_t i = 0; i < n; i++) {
		const struct rev *e = &ev[it[i].ev];

		if (e->kind == RK_LAUNCH) {
			uint64_t g = 0;
			bool inner = true;

			if (u64map__get(&gpu_of, e->corr, &g))
				g--;
			/* the innermost op's self; every op around it, its total */
			for (long q = alive(it, it[i].parent); q >= 0; q = alive(it, it[q].parent)) {
				struct opsum *s;

				if (!it[q].row)
					continue;
				s = &(*sums)[it[q].row - 1];
				s->gpu_total += g;
				s->launches++;
				if (inner)
					s->gpu_self += g;
				inner = false;
			}
			continue;
		}
		if (it[i].row && !it[i].gone) {
			struct opsum *s = &(*sums)[it[i].row - 1];

			s->count++;
			s->total += e->dur;
			s->self += e->dur - it[i].children;
			if (e->tid >= TORCH_TID_UNKNOWN)
				s->gpu_unmatched = true;
		}
	}
	ret = 0;
out:
	u64map__clear(&gpu_of);
	free(it);
	free(stack);
	return ret;
}

void table_ops(struct ctx *c)
{
	struct u64map rows = {};
	struct opsum *sums = NULL;
	size_t nr = 0, cap = 0;
	bool any = false, gpu = c->nr_procs > 0;
	uint64_t self_all = 0, count_all = 0;
	cJSON *o, *top;

	for (size_t k = 0; k < c->nr_procs; k++) {
		if (!c->procs[k].in->torch)
			continue;
		any = true;
		gpu &= c->procs[k].in->gpu;
		if (ops_of_proc(c, &c->procs[k], &rows, &sums, &nr, &cap))
			goto out;
	}
	if (!any) {
		unknown(c->report, "ops", "no torch.profiler events in the traces: trace with --torch");
		goto out;
	}
	o = cJSON_AddObjectToObject(c->report, "ops");
	for (size_t i = 0; i < nr; i++) {
		self_all += sums[i].self;
		count_all += sums[i].count;
	}
	num(o, "count", (double)count_all);
	num(o, "self_cpu_ns", (double)self_all);
	cJSON_AddBoolToObject(o, "gpu", gpu);
	qsort(sums, nr, sizeof(*sums), cmp_self);
	/* every name: tens of them in a model (a few hundred at most), and --compare and the
	 * checks against torch's own table need them all */
	top = cJSON_AddArrayToObject(o, "top");
	for (size_t i = 0; i < nr; i++) {
		const struct opsum *s = &sums[i];
		cJSON *r;

		r = cJSON_CreateObject();
		cJSON_AddStringToObject(r, "name", S(c, s->name));
		cJSON_AddStringToObject(r, "kind", s->annotation ? "annotation" : "op");
		num(r, "count", (double)s->count);
		num(r, "self_cpu_ns", (double)s->self);
		num(r, "self_cpu_share", self_all ? (double)s->self / self_all : 0);
		num(r, "total_cpu_ns", (double)s->total);
		num(r, "mean_total_cpu_ns", s->count ? (double)s->total / s->count : 0);
		if (!gpu || s->gpu_unmatched) {
			const char *why = !gpu ? "no --gpu data in the trace (trace with --torch --gpu)" :
				"it ran on a torch thread whose OS thread is unknown: its launches "
				"cannot be matched";

			unknown(r, "gpu_self_ns", why);
			unknown(r, "gpu_total_ns", why);
			unknown(r, "launches", why);
		} else {
			num(r, "gpu_self_ns", (double)s->gpu_self);
			num(r, "gpu_total_ns", (double)s->gpu_total);
			num(r, "launches", (double)s->launches);
		}
		cJSON_AddItemToArray(top, r);
	}
out:
	u64map__clear(&rows);
	free(sums);
}
