// SPDX-License-Identifier: MIT
/* fr_timing: what the dumps' own times prove when they were not taken at one moment.
 *
 * A fleet never dumps at one instant: one recorder dumps its processes one after another,
 * hosts answer a trigger seconds apart, and hosts' clocks are not synchronised (they may be
 * years off). Every time in one dump is on its host's clock, so differences within a dump —
 * and between dumps of one host — are exact; between hosts only causality is known: a
 * collective completes on any rank only after every rank of the comm entered it.
 *
 * Rank m's newest collective is seq s - 1 and it never entered s, which rank w is waiting in.
 * Was m really missing, or was its dump just taken earlier than w's?
 *   - w on m's host (one clock): m's dump came dump_m - created_w(s) after w entered s.
 *   - any host: w entered s - 1 before m completed s - 1 (causality), and entered s
 *     created_w(s) - created_w(s - 1) later (w's clock); m's dump came dump_m - done_m(s - 1)
 *     after that completion (m's clock). So m's dump came at least
 *     (dump_m - done_m(s - 1)) - (created_w(s) - created_w(s - 1)) after w entered s —
 *     whatever the clocks. With w's step short and m idle since, this is nearly exact.
 * m is missing when one of these bounds reaches the late-arrival threshold: it had not
 * entered s that long after others had. If some rank completed s, every rank had entered it:
 * m's dump is older than that completion, never evidence against m. Otherwise, when the
 * waiters look hung (own wait past the threshold) but m's lag is not proven, m's dump may be
 * from before the hang: its host should be dumped again (rule dumps_not_simultaneous).
 *
 * The same reasoning for state_divergence: rank A never completed s, which B completed. B's
 * completion came before A's dump by at least (dump_A - done_A(s - 1)) -
 * (done_B(s) - created_B(s - 1)) on any hosts, dump_A - done_B(s) on one host.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "fr_analyze_int.h"

/* gives the procs of one host one id; a dump without a host name has a clock of its own */
int timing_hosts(struct fr_analysis *a)
{
	struct u64map seen = { 0 };
	int next = 0;

	for (int pi = 0; pi < a->nr_procs; pi++) {
		struct proc *p = &a->procs[pi];
		uint64_t h, v = 0;

		if (!p->host[0]) {
			p->host_id = next++;
			continue;
		}
		h = str_hash(p->host);
		/* a collision of two host names would merge their clocks: compare the names */
		u64map__get(&seen, h, &v);
		if (v && !strcmp(a->procs[v - 1].host, p->host)) {
			p->host_id = a->procs[v - 1].host_id;
			continue;
		}
		p->host_id = next++;
		if (!v && u64map__set(&seen, h, (uint64_t)pi + 1)) {
			u64map__clear(&seen);
			return -ENOMEM;
		}
	}
	u64map__clear(&seen);
	a->nr_hosts = next;
	return 0;
}

struct wrow {
	int64_t seq;
	int host;
	int64_t created, step, waited;	/* step: created(s) - created(s - 1), FR_UNK */
};

static int cmp_wrow(const void *x, const void *y)
{
	const struct wrow *p = x, *q = y;

	if (p->seq != q->seq)
		return p->seq < q->seq ? -1 : 1;
	return p->host - q->host;
}

void timing_comm_free(struct timing_comm *t)
{
	free(t->rows);
	t->rows = NULL;
	t->n = 0;
}

/* The members of comm cid waiting in a collective (their oldest one not completed), sorted
 * by (seq, host), for the lag bounds. */
int timing_comm_build(struct fr_analysis *a, int cid, struct timing_comm *t)
{
	struct comm *c = &a->comms[cid];

	t->rows = malloc((c->members.n + 1) * sizeof(*t->rows));
	t->n = 0;
	if (!t->rows)
		return -ENOMEM;
	for (int i = 0; i < c->members.n; i++) {
		struct member *m = &a->members[c->members.v[i]];
		struct proc *p = &a->procs[m->proc];
		struct wrow *r;

		if (!m->placed || m->init_failed || p->dead || m->st_seq == FR_UNK ||
		    m->st_created == FR_UNK)
			continue;
		r = &t->rows[t->n++];
		r->seq = m->st_seq;
		r->host = p->host_id;
		r->created = m->st_created;
		r->step = m->st_prev_created != FR_UNK ? ns_diff(m->st_created, m->st_prev_created) :
			  FR_UNK;
		r->waited = p->dump_time_ns != FR_UNK ? ns_diff(p->dump_time_ns, m->st_created) :
			    FR_UNK;
		/* waiting past the threshold at its own dump: the job looks hung here */
		if (r->waited != FR_UNK && r->waited > a->opts.skew_ns)
			a->hang_seen = true;
	}
	qsort(t->rows, t->n, sizeof(*t->rows), cmp_wrow);
	return 0;
}

/* first row with (seq, host) >= the key */
static int lower(const struct timing_comm *t, int64_t seq, int host)
{
	int lo = 0, hi = t->n;

	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		const struct wrow *r = &t->rows[mid];

		if (r->seq < seq || (r->seq == seq && r->host < host))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* How long member mi's dump is proven to have come after a rank entered seq s, which mi
 * never entered: FR_UNK when nothing proves it (no waiter, no times). *waited: the longest
 * any rank had waited in s at its own dump (FR_UNK: none known); *how: TIMING_SAME_HOST or
 * TIMING_CAUSAL, the bound that gave the answer. */
int64_t timing_lag(const struct fr_analysis *a, const struct timing_comm *t, int mi, int64_t s,
		   int64_t *waited, int *how)
{
	const struct member *m = &a->members[mi];
	const struct proc *p = &a->procs[m->proc];
	int64_t lag = FR_UNK, min_step = FR_UNK, min_here = FR_UNK;
	int i = lower(t, s, INT32_MIN);

	*waited = FR_UNK;
	*how = 0;
	for (; i < t->n && t->rows[i].seq == s; i++) {
		const struct wrow *r = &t->rows[i];

		if (r->waited != FR_UNK && (*waited == FR_UNK || r->waited > *waited))
			*waited = r->waited;
		if (r->step != FR_UNK && (min_step == FR_UNK || r->step < min_step))
			min_step = r->step;
		if (r->host == p->host_id && (min_here == FR_UNK || r->created < min_here))
			min_here = r->created;
	}
	if (p->dump_time_ns == FR_UNK)
		return FR_UNK;
	if (min_here != FR_UNK) {
		lag = ns_diff(p->dump_time_ns, min_here);
		*how = TIMING_SAME_HOST;
	}
	if (min_step != FR_UNK && m->lc_seq == s - 1 && m->lc_done != FR_UNK) {
		int64_t b = ns_diff(ns_diff(p->dump_time_ns, m->lc_done), min_step);

		if (lag == FR_UNK || b > lag) {
			lag = b;
			*how = TIMING_CAUSAL;
		}
	}
	return lag;
}

/* How long before member mi's dump (it never completed seq s) another member is proven to
 * have completed s: the best bound over the comm's members, FR_UNK when none. */
int64_t timing_done_before(const struct fr_analysis *a, int cid, int mi, int64_t s, int *how)
{
	const struct comm *c = &a->comms[cid];
	const struct member *m = &a->members[mi];
	const struct proc *p = &a->procs[m->proc];
	int64_t best = FR_UNK;

	*how = 0;
	if (p->dump_time_ns == FR_UNK)
		return FR_UNK;
	for (int i = 0; i < c->members.n; i++) {
		const struct member *b = &a->members[c->members.v[i]];
		const struct proc *q = &a->procs[b->proc];
		int64_t bound = FR_UNK;
		int kind = 0;

		if (!b->placed || b->lc_seq == FR_UNK || b->lc_seq < s)
			continue;
		if (q->host_id == p->host_id) {
			/* one clock: B completed s by its newest completion and by its dump */
			int64_t done = q->dump_time_ns;

			if (b->lc_done != FR_UNK && (done == FR_UNK || b->lc_done < done))
				done = b->lc_done;
			if (done != FR_UNK) {
				bound = ns_diff(p->dump_time_ns, done);
				kind = TIMING_SAME_HOST;
			}
		}
		if (b->lc_seq == s && b->lc_done != FR_UNK && b->lc_prev_created != FR_UNK &&
		    m->st_seq == s && m->st_prev_done != FR_UNK) {
			int64_t x = ns_diff(ns_diff(p->dump_time_ns, m->st_prev_done),
					    ns_diff(b->lc_done, b->lc_prev_created));

			if (bound == FR_UNK || x > bound) {
				bound = x;
				kind = TIMING_CAUSAL;
			}
		}
		if (bound != FR_UNK && (best == FR_UNK || bound > best)) {
			best = bound;
			*how = kind;
		}
	}
	return best;
}

/* proc pi's dump is older than what the others show: its host should be dumped again */
int timing_redump(struct fr_analysis *a, int pi, int cid, int64_t seq, bool completed)
{
	struct redump *r;

	for (int i = 0; i < a->nr_redumps; i++)
		if (a->redumps[i].proc == pi)
			return 0;
	if (grow((void **)&a->redumps, &a->cap_redumps, a->nr_redumps + 1, sizeof(*a->redumps)))
		return -ENOMEM;
	r = &a->redumps[a->nr_redumps++];
	r->proc = pi;
	r->comm = cid;
	r->seq = seq;
	r->completed = completed;
	return 0;
}

/* One verdict naming every dump that is older than the hang the others show, and the hosts
 * to dump again. It blames no rank. */
int rule_not_one_moment(struct fr_analysis *a)
{
	struct verdict *v;

	if (!a->nr_redumps || !a->hang_seen)
		return 0;
	if (!(v = verdict_new(a, RULE_NOT_ONE_MOMENT, a->redumps[0].comm, a->redumps[0].seq,
			      NULL)))
		return -ENOMEM;
	for (int i = 0; i < a->nr_redumps; i++)
		if (ivec_push(&v->others, a->redumps[i].proc))
			return -ENOMEM;
	return 0;
}
