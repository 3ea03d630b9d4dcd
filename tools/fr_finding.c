// SPDX-License-Identifier: MIT
/* fr_finding: building findings — culprits sorted by rank, the confidence and why (as data;
 * fr_text words it), the causal order of the report. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "fr_analyze_int.h"

struct verdict *verdict_new(struct fr_analysis *a, int rule, int comm, int64_t seq,
			    const char *op)
{
	struct verdict *v;

	if (grow((void **)&a->verdicts, &a->cap_verdicts, a->nr_verdicts + 1,
		 sizeof(*a->verdicts)))
		return NULL;
	v = &a->verdicts[a->nr_verdicts];
	memset(v, 0, sizeof(*v));
	v->rule = rule;
	v->comm = comm;
	v->seq = seq;
	v->agg = -1;
	v->order = a->nr_verdicts++;
	snprintf(v->op, sizeof(v->op), "%s", op ? op : "");
	return v;
}

void verdict_free(struct verdict *v)
{
	free(v->who);
	free(v->culprits.v);
	free(v->waiting.v);
	free(v->behind.v);
	free(v->dead.v);
	free(v->others.v);
	if (v->rule == RULE_STUCK)
		free(v->ev.stuck.calls);
}

#define MAX_WHO (1 << 16)	/* culprits listed per verdict */

void who_add(struct verdict *v, int64_t grank, int64_t crank, int proc)
{
	if (v->nr_who >= MAX_WHO)
		return;
	if (v->nr_who == v->cap_who) {
		int cap = v->cap_who ? v->cap_who * 2 : 8;
		void *p = realloc(v->who, cap * sizeof(*v->who));

		if (!p)
			return;
		v->who = p;
		v->cap_who = cap;
	}
	v->who[v->nr_who][0] = grank == FR_UNK ? -1 : grank;
	v->who[v->nr_who][1] = crank == FR_UNK ? -1 : crank;
	v->who[v->nr_who][2] = proc;
	v->nr_who++;
}

void who_member(struct fr_analysis *a, struct verdict *v, int mi)
{
	struct member *m = &a->members[mi];

	who_add(v, a->procs[m->proc].global_rank, m->rank, m->proc);
}

void who_proc(struct fr_analysis *a, struct verdict *v, int pi)
{
	who_add(v, a->procs[pi].global_rank, FR_UNK, pi);
}

static int cmp_who(const void *x, const void *y)
{
	const int64_t *p = x, *q = y;

	/* known global ranks first, ascending; unknown ones by comm rank, then dump order */
	if ((p[0] < 0) != (q[0] < 0))
		return p[0] < 0 ? 1 : -1;
	for (int i = 0; i < 3; i++)
		if (p[i] != q[i])
			return p[i] < q[i] ? -1 : 1;
	return 0;
}

void who_sort(struct verdict *v)
{
	int n = 0;

	if (v->nr_who > 1)
		qsort(v->who, v->nr_who, sizeof(*v->who), cmp_who);
	for (int i = 0; i < v->nr_who; i++)
		if (!n || memcmp(v->who[i], v->who[n - 1], sizeof(*v->who)))
			memcpy(v->who[n++], v->who[i], sizeof(*v->who));
	v->nr_who = n;
}

void set_low(struct verdict *v, int why, int proc, int64_t seq)
{
	if (v->low)
		return;	/* the first reason is the one that matters */
	v->low = why;
	v->low_proc = proc;
	v->low_seq = seq;
}

/* Why a verdict at (comm, seq) might be wrong because some member's ring no longer holds seq. */
void check_wrap(struct fr_analysis *a, struct verdict *v, int comm, int64_t seq)
{
	struct comm *c = &a->comms[comm];

	for (int i = 0; i < c->members.n; i++) {
		struct member *m = &a->members[c->members.v[i]];
		struct proc *p = &a->procs[m->proc];

		if (!m->placed || m->init_failed)
			continue;
		if (m->partial && m->oldest_seq != FR_UNK && m->oldest_seq > seq && !p->wrapped) {
			set_low(v, LOW_ATTACHED_AFTER, m->proc, seq);
			return;
		}
		if ((m->oldest_seq != FR_UNK && m->oldest_seq > seq && p->wrapped) ||
		    (m->oldest_seq == FR_UNK && p->wrapped)) {
			set_low(v, LOW_WRAPPED, m->proc, seq);
			return;
		}
	}
}

void check_dropped(struct fr_analysis *a, struct verdict *v)
{
	for (int i = 0; i < v->nr_who; i++) {
		int pi = (int)v->who[i][2];

		if (pi >= 0 && a->procs[pi].events_dropped != FR_UNK &&
		    a->procs[pi].events_dropped > 0) {
			set_low(v, LOW_DROPPED, pi, FR_UNK);
			return;
		}
	}
}

/* Verdicts on comms matched across dumps by their collective sequences rest on that match. */
void mark_inferred(struct fr_analysis *a)
{
	for (int i = 0; i < a->nr_verdicts; i++) {
		struct verdict *v = &a->verdicts[i];

		if (v->comm >= 0 && a->comms[v->comm].inferred)
			v->medium = true;
	}
}

static int cmp_verdict(const void *x, const void *y)
{
	const struct verdict *p = x, *q = y;

	if (p->rule != q->rule)
		return p->rule - q->rule;
	return p->order - q->order;
}

void sort_verdicts(struct fr_analysis *a)
{
	if (a->nr_verdicts > 1)
		qsort(a->verdicts, a->nr_verdicts, sizeof(*a->verdicts), cmp_verdict);
}
