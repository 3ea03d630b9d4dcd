// SPDX-License-Identifier: MIT
/* report_tables: the report's tables beside the findings: the kernel breakdown, the GPU
 * utilization timeline and idle-gap histogram, the ranks, the inputs; and the findings'
 * order (by severity; within one, the order the rules ran in). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "report_analyze_int.h"

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

void table_kernels(struct ctx *c)
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

void table_timeline(struct ctx *c)
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
			/* the window and its busy time exactly (the bins' fractions are rounded):
			 * HTA's temporal breakdown measures the same window */
			num(o, "end_ns", (double)b);
			{
				double total = 0;

				for (int k = 0; k < UTIL_BINS; k++)
					total += busy[k];
				num(o, "busy_ns", total);
			}
			arr = cJSON_AddArrayToObject(o, "busy_frac");
			for (int k = 0; k < UTIL_BINS; k++)
				cJSON_AddItemToArray(arr, cJSON_CreateNumber(
					round(busy[k] / bin * 1000) / 1000));
			cJSON_AddItemToArray(u, o);
		}
	}
}

void table_ranks(struct ctx *c)
{
	cJSON *r = cJSON_AddArrayToObject(c->report, "ranks");

	for (size_t q = 0; q < c->nr_procs; q++) {
		const struct proc *p = &c->procs[q];
		cJSON *o = cJSON_CreateObject();
		double sum = 0;
		size_t n = 0;

		if (p->rank >= 0)
			num(o, "rank", p->rank);
		else
			unknown(o, "rank", "no rank in the trace");
		num(o, "pid", p->rp->pid);
		/* a step that ends before it starts is a bug (measure_proc says so): left out */
		for (size_t s = 0; s < p->nr_steps; s++)
			if (p->steps[s].b >= p->steps[s].a)
				sum += (double)(p->steps[s].b - p->steps[s].a), n++;
		num_or_unknown(o, "step_wall_ns_mean", n, n ? sum / n : 0, "no steps found");
		num_or_unknown(o, "collective_wait_ns", !isnan(p->collective_wait_ns),
			       p->collective_wait_ns,
			       !p->in->gpu ? "no --gpu data: NCCL kernel times unknown" :
			       "no NCCL kernels in two or more ranks' traces");
		/* rule_comm's sums, finding or not: NCCL kernel time in the window and the part of
		 * it a compute kernel ran beside */
		num_or_unknown(o, "comm_ns", p->in->gpu, (double)p->comm_ns,
			       "no --gpu data: NCCL kernel times unknown");
		num_or_unknown(o, "comm_overlapped_ns", p->in->gpu, (double)p->comm_overlap_ns,
			       "no --gpu data: NCCL kernel times unknown");
		cJSON_AddItemToArray(r, o);
	}
}

void table_inputs(struct ctx *c)
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
		cJSON_AddBoolToObject(o, "torch", in->torch);
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
void sort_findings(cJSON *arr)
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
