// SPDX-License-Identifier: MIT
/* report_rules: what to fix. Each rule reads the processes report_analyze.c built and, when
 * its numbers cross its threshold, adds a finding: the numbers, the evidence and the fix.
 * report_analyze() runs a rule only on data that can show it, and says what it could not
 * judge (no --gpu, no --mem) instead. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "report_analyze_int.h"

/* The finding's evidence: the calls behind the first MAX_EVIDENCE gaps (longest first) of
 * one cause. */
static void gap_evidence(const struct ctx *c, const struct proc *p, cJSON *f,
			 const struct gap *g, size_t n, int cause)
{
	cJSON *evs = cJSON_GetObjectItem(f, "evidence");

	for (size_t i = 0, k = 0; i < n && k < MAX_EVIDENCE; i++)
		if (g[i].cause == cause && g[i].by) {
			cJSON_AddItemToArray(evs, evidence(c, p, g[i].by, g[i].by->ts, g[i].by->dur,
							   NULL));
			k++;
		}
}

void rule_idle(struct ctx *c, struct proc *p)
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
		f = finding(c, p, "gpu_idle", frac, title, fix);
		nums = cJSON_GetObjectItem(f, "numbers");
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
		f = finding(c, p, "host_sync", (double)by[0] / win, title,
			    "each sync waits for all queued GPU work, then the GPU waits for the host: "
			    "drop per-step .item()/.cpu()/.numpy()/print(tensor)/"
			    "torch.cuda.synchronize(); accumulate metrics on the GPU and read them every "
			    "N steps; copy with non_blocking=True into pinned memory and wait on an event");
		nums = cJSON_GetObjectItem(f, "numbers");
		num(nums, "syncs", (double)syncs);
		num_or_unknown(nums, "syncs_per_step", p->nr_steps,
			       p->nr_steps ? (double)syncs / p->nr_steps : 0, "no steps found");
		num(nums, "host_blocked_ns", (double)blocked);
		num(nums, "gpu_idle_after_sync_ns", (double)by[0]);
		num(nums, "gpu_idle_after_sync_frac", (double)by[0] / win);
		num(nums, "gaps_after_sync", (double)count[0]);
		gap_evidence(c, p, f, g, n, 0);
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
		f = finding(c, p, "launch_bound", (double)by[1] / win, title,
			    "fewer, larger kernels: torch.compile fuses elementwise ops, CUDA graphs "
			    "(torch.compile(mode=\"reduce-overhead\") or torch.cuda.graphs) replay a "
			    "step with one launch; a larger batch gives each kernel more work");
		nums = cJSON_GetObjectItem(f, "numbers");
		num(nums, "launches", (double)p->nr_launches);
		num(nums, "launches_per_s", p->nr_launches / (win / 1e9));
		num_or_unknown(nums, "cpu_ns_per_launch", with_dur, with_dur ? (double)cpu / with_dur : 0,
			       "launch calls without a duration (trace with --gpu or --durations)");
		num_or_unknown(nums, "kernel_ns_mean", kernels, kernels ? (double)kns / kernels : 0,
			       "no kernels");
		num(nums, "gpu_idle_launch_bound_ns", (double)by[1]);
		gap_evidence(c, p, f, g, n, 1);
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
void rule_dtoh(struct ctx *c, struct proc *p)
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
		f = finding(c, p, "blocking_dtoh", (double)blocked / (p->win_b - p->win_a + 1), title,
			    "a blocking copy to the host (.item(), .cpu(), .tolist(), bool(tensor) in an "
			    "if) waits for every queued kernel: keep values on the GPU, read them every "
			    "N steps, or copy with .to(\"cpu\", non_blocking=True) into pinned memory and "
			    "synchronize on an event when the value is needed");
		nums = cJSON_GetObjectItem(f, "numbers");
		num(nums, "copies", (double)n);
		num_or_unknown(nums, "per_step", p->nr_steps, p->nr_steps ? (double)n / p->nr_steps : 0,
			       "no steps found");
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

void rule_copies(struct ctx *c)
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
	f = finding(c, NULL, "pageable_copies", pg_n ? 0.3 : 0, title,
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

void rule_tiny(struct ctx *c)
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
	f = finding(c, NULL, "tiny_kernels", (double)tiny / n, title,
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

void rule_comm(struct ctx *c, struct proc *p)
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
	f = finding(c, p, "comm_not_overlapped", (double)exposed / win, title,
		    "communication that does not overlap compute adds to every step: let DDP "
		    "overlap gradient all-reduce with backward (no sync between backward and the "
		    "all-reduce; tune bucket_cap_mb), FSDP prefetching (forward_prefetch, "
		    "backward_prefetch), async_op=True collectives waited for later; a long NCCL "
		    "kernel can also be a wait for a slower rank (see straggler_rank)");
	nums = cJSON_GetObjectItem(f, "numbers");
	num(nums, "comm_ns", (double)p->comm_ns);
	num(nums, "comm_overlapped_ns", (double)p->comm_overlap_ns);
	num(nums, "comm_exposed_ns", (double)exposed);
	num(nums, "comm_frac", (double)p->comm_ns / win);
	num(nums, "overlap_frac", (double)p->comm_overlap_ns / p->comm_ns);
}

/* Collective wait: the k-th NCCL kernel of every rank is the same collective (NCCL requires
 * the same order on all ranks); each lasts until the last rank arrives, so its duration
 * beyond the shortest one of the k-th is time spent waiting for others. */
void rule_straggler(struct ctx *c)
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
		f = finding(c, rp[slow], "straggler_rank", sorted_med / win, title,
			    "find what the slow rank does that the others do not: more data per step "
			    "(uneven shards, variable sequence lengths), a slower input pipeline, host "
			    "work only on that rank (logging, checkpointing on rank 0), CPU contention "
			    "or a slower GPU; balance the work or move it off the critical path");
		nums = cJSON_GetObjectItem(f, "numbers");
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

void rule_memory(struct ctx *c, struct proc *p)
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
		f = finding(c, p, "oom", 1, title,
			    "lower the peak: a smaller batch or activation checkpointing "
			    "(torch.utils.checkpoint), mixed precision, free references to tensors "
			    "kept across steps (losses appended to a list without .item()); "
			    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True when reserved memory is "
			    "much larger than allocated");
		nums = cJSON_GetObjectItem(f, "numbers");
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
		f = finding(c, p, "memory_peak", (double)unused / peak_resv[d], title,
			    "the caching allocator holds memory no tensor uses (fragmentation): "
			    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or allocate the "
			    "largest tensors first and keep their shapes fixed");
		nums = cJSON_GetObjectItem(f, "numbers");
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
