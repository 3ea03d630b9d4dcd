// SPDX-License-Identifier: MIT
/* fr_finding: building findings — culprits sorted by rank, the confidence and why (as data;
 * fr_text words it), the causal order of the report. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "fr_analyze_int.h"
#include "growbuf.h"

struct verdict *verdict_new(struct fr_analysis *a, int rule, int comm, int64_t seq,
			    const char *op)
{
	struct verdict *v;

	if (ARRAY_RESERVE(a->verdicts, a->cap_verdicts, a->nr_verdicts + 1, 16))
		return NULL;
	v = &a->verdicts[a->nr_verdicts];
	memset(v, 0, sizeof(*v));
	v->rule = rule;
	v->comm = comm;
	v->seq = seq;
	v->agg = -1;
	v->caused_by = -1;
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
	if (ARRAY_RESERVE(v->who, v->cap_who, v->nr_who + 1, 8))
		return;
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
		if (v->comm >= 0 && a->comms[v->comm].align_ambiguous)
			set_low(v, LOW_ALIGN_AMBIGUOUS, -1, FR_UNK);
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

/* ------------------------------------------------------------------ roles */

int64_t member_open_wait(const struct fr_analysis *a, int mi, int64_t seq)
{
	const struct member *m = &a->members[mi];
	const struct proc *p = &a->procs[m->proc];

	if (m->st_seq != seq || m->st_created == FR_UNK || p->dump_time_ns == FR_UNK)
		return FR_UNK;
	return ns_diff(p->dump_time_ns, m->st_created);
}

int verdict_waiters(const struct fr_analysis *a, const struct verdict *v, int **out,
		    int64_t *minw, int64_t *maxw)
{
	const struct comm *c;
	int n = 0;

	*out = NULL;
	*minw = *maxw = FR_UNK;
	if (v->comm < 0 || v->seq == FR_UNK || v->rule == RULE_NOT_ONE_MOMENT ||
	    v->rule == RULE_RANKS_UNKNOWN)
		return 0;
	c = &a->comms[v->comm];
	if (!(*out = malloc((c->members.n + 1) * sizeof(int))))
		return -ENOMEM;
	for (int i = 0; i < c->members.n; i++) {
		int mi = c->members.v[i];
		const struct member *m = &a->members[mi];
		const struct proc *p = &a->procs[m->proc];
		bool blamed = false;
		int64_t w;

		if (!m->placed || m->init_failed || p->dead || m->st_seq != v->seq)
			continue;
		for (int k = 0; k < v->nr_who && !blamed; k++)
			blamed = v->who[k][2] == m->proc;
		if (blamed)
			continue;
		(*out)[n++] = mi;
		if ((w = member_open_wait(a, mi, v->seq)) != FR_UNK) {
			if (*minw == FR_UNK || w < *minw)
				*minw = w;
			if (*maxw == FR_UNK || w > *maxw)
				*maxw = w;
		}
	}
	return n;
}

/* mark[proc] = 1 for the processes v blames, 0 for the others */
static void mark_blamed(const struct fr_analysis *a, const struct verdict *v, uint8_t *mark)
{
	memset(mark, 0, a->nr_procs + 1);
	for (int k = 0; k < v->nr_who; k++)
		if (v->who[k][2] >= 0)
			mark[v->who[k][2]] = 1;
}

/* v names every process of the job (PyTorch's own dumps lying beside ours aside: a rank may
 * have both); mark is scratch */
static bool names_every_process(const struct fr_analysis *a, const struct verdict *v,
				uint8_t *mark)
{
	mark_blamed(a, v, mark);
	for (int pi = 0; pi < a->nr_procs; pi++)
		if (!mark[pi] && !a->procs[pi].torch)
			return false;
	return v->nr_who > 0;
}

/* rules whose findings may follow from another one */
static bool may_follow(int rule)
{
	return rule == RULE_STUCK || rule == RULE_P2P || rule == RULE_STATE ||
	       rule == RULE_NO_PROGRESS || rule == RULE_ATTACHED_AFTER ||
	       rule == RULE_MISSING_DUMP || rule == RULE_LATE;
}

/* every proc of v is blamed by cause c or waits on it */
static bool explained_by(const struct fr_analysis *a, const struct verdict *v,
			 const struct verdict *c, const uint8_t *mark)
{
	(void)a;
	(void)c;
	if (!v->nr_who)
		return false;
	for (int k = 0; k < v->nr_who; k++)
		if (v->who[k][2] < 0 || !mark[v->who[k][2]])
			return false;
	return true;
}

/* The cause of verdict vi: a corrupt dump for the missing dump it makes; else an earlier
 * cause that blames every rank of vi or has them wait on it (a cause that may itself follow
 * from one — stuck_in_call, state_divergence, no_progress — only by blaming them);
 * attached_after_hang, and no_progress of every rank, follow from the first hang cause. -1:
 * vi is a cause. */
static int find_cause(struct fr_analysis *a, int vi, uint8_t *mark)
{
	struct verdict *v = &a->verdicts[vi];

	if (v->rule == RULE_MISSING_DUMP) {
		/* the dump that is there but could not be read */
		for (int ci = 0; ci < a->nr_verdicts; ci++) {
			const struct verdict *c = &a->verdicts[ci];
			bool hit = c->rule == RULE_CORRUPT && v->nr_who > 0 &&
				   a->corrupt[c->ev.corrupt.idx].global_rank != FR_UNK;

			for (int k = 0; k < v->nr_who && hit; k++)
				hit = v->who[k][0] == a->corrupt[c->ev.corrupt.idx].global_rank;
			if (hit)
				return ci;
		}
		return -1;
	}
	for (int ci = 0; ci < vi; ci++) {
		struct verdict *c = &a->verdicts[ci];
		int *w = NULL, n;
		int64_t lo, hi;

		/* ranks cut off with a host are "missing" because of it, and their dumps look
		 * older than the others' wait: nothing else makes these consequences */
		if ((v->rule == RULE_MISSING_RANK || v->rule == RULE_NOT_ONE_MOMENT) &&
		    c->rule != RULE_PARTITION)
			continue;

		if (c->caused_by >= 0 || c->rule == RULE_CORRUPT || c->rule == RULE_MISSING_DUMP ||
		    c->rule == RULE_NOT_ONE_MOMENT || c->rule == RULE_RANKS_UNKNOWN ||
		    c->rule == RULE_STRAGGLER ||
		    c->rule == RULE_LATE)
			continue;
		/* no_progress of every rank singles out nobody: the whole job waits on the cause
		 * (a partitioned host's peers and ranks attached after the hang alike, whose
		 * rings may not say in which collective they wait) */
		if (v->rule == RULE_ATTACHED_AFTER ||
		    (v->rule == RULE_NO_PROGRESS && names_every_process(a, v, mark)))
			return ci;
		mark_blamed(a, c, mark);
		if (c->rule == RULE_PARTITION)
			partition_mark(a, c, mark);
		/* ranks blocked in CUDA/NCCL calls while the job hangs on a rank that died, never
		 * entered a collective or was cut off: the other members of that rank's comm, in
		 * whichever call their part of the job reached (a sync, an earlier p2p recv),
		 * wait for it too */
		if (v->rule == RULE_STUCK && c->comm >= 0 &&
		    (c->rule == RULE_DEAD_RANK || c->rule == RULE_MISSING_RANK ||
		     c->rule == RULE_PARTITION)) {
			const struct comm *cc = &a->comms[c->comm];

			for (int k = 0; k < cc->members.n; k++) {
				const struct member *m = &a->members[cc->members.v[k]];

				if (m->placed && !a->procs[m->proc].dead)
					mark[m->proc] = 1;
			}
		}
		if (!may_follow(c->rule) && v->rule != RULE_LATE) {
			for (int k = 0; k < c->waiting.n; k++)
				mark[a->members[c->waiting.v[k]].proc] = 1;
			if ((n = verdict_waiters(a, c, &w, &lo, &hi)) < 0)
				return n;
			for (int k = 0; k < n; k++)
				mark[a->members[w[k]].proc] = 1;
			free(w);
		}
		if (v->rule == RULE_NOT_ONE_MOMENT) {
			bool all = a->nr_redumps > 0;

			for (int k = 0; k < a->nr_redumps && all; k++)
				all = mark[a->redumps[k].proc];
			if (all)
				return ci;
			continue;
		}
		if (explained_by(a, v, c, mark))
			return ci;
	}
	return -1;
}

int link_roles(struct fr_analysis *a)
{
	uint8_t *mark = malloc(a->nr_procs + 1);
	struct verdict *out;
	int *pos, n = 0;

	if (!mark)
		return -ENOMEM;
	for (int i = 0; i < a->nr_verdicts; i++) {
		int c;

		if (!may_follow(a->verdicts[i].rule) && a->verdicts[i].rule != RULE_MISSING_RANK &&
		    a->verdicts[i].rule != RULE_NOT_ONE_MOMENT)
			continue;
		if ((c = find_cause(a, i, mark)) < -1) {
			free(mark);
			return c;
		}
		a->verdicts[i].caused_by = c;
	}
	free(mark);
	/* each cause, then what follows from it */
	out = malloc((a->nr_verdicts + 1) * sizeof(*out));
	pos = malloc((a->nr_verdicts + 1) * sizeof(*pos));
	if (!out || !pos) {
		free(out);
		free(pos);
		return -ENOMEM;
	}
	for (int i = 0; i < a->nr_verdicts; i++) {
		if (a->verdicts[i].caused_by >= 0)
			continue;
		pos[i] = n;
		out[n++] = a->verdicts[i];
		for (int k = 0; k < a->nr_verdicts; k++)
			if (a->verdicts[k].caused_by == i) {
				pos[k] = n;
				out[n++] = a->verdicts[k];
			}
	}
	for (int i = 0; i < n; i++)
		if (out[i].caused_by >= 0)
			out[i].caused_by = pos[out[i].caused_by];
	if (n)
		memcpy(a->verdicts, out, n * sizeof(*out));
	free(out);
	free(pos);
	return 0;
}

int nr_causes(const struct fr_analysis *a)
{
	int n = 0;

	for (int i = 0; i < a->nr_verdicts; i++)
		n += a->verdicts[i].caused_by < 0;
	return n;
}
