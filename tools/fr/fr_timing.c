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
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fr_analyze_int.h"
#include "growbuf.h"

static int64_t i64_abs(int64_t v) { return v < 0 ? (v == INT64_MIN ? INT64_MAX : -v) : v; }

/* A dump's boot, on its host's wall clock: dump_time_ns - dump_mono_ns. Dumps of one machine
 * agree on it (within clock slews); two machines under one --host-id do not. */
#define BOOT_SLACK	2000000000LL
static int64_t boot_of(const struct proc *p)
{
	if (p->dump_time_ns == FR_UNK || p->dump_mono_ns == FR_UNK)
		return FR_UNK;
	return ns_diff(p->dump_time_ns, p->dump_mono_ns);
}

int analysis_note(struct fr_analysis *a, char *line)
{
	if (!line)
		return -ENOMEM;
	if (a->nr_notes >= (int)(sizeof(a->notes) / sizeof(a->notes[0]))) {
		free(line);
		return 0;
	}
	a->notes[a->nr_notes++] = line;
	return 0;
}

static int timing_notes(struct fr_analysis *a);

/* Gives the procs of one clock one host id: one host name and one boot. A dump without a host
 * name has a clock of its own; a host name whose dumps disagree on the boot is several
 * machines (one --host-id given twice): said in a note, and their clocks kept apart. */
int timing_hosts(struct fr_analysis *a)
{
	struct u64map seen = { 0 };	/* host name hash -> first proc of that name + 1 */
	int next = 0, *first_of_id = malloc((a->nr_procs + 1) * sizeof(int));

	if (!first_of_id)
		return -ENOMEM;
	for (int pi = 0; pi < a->nr_procs; pi++) {
		struct proc *p = &a->procs[pi];
		int64_t boot = boot_of(p);
		uint64_t h, v = 0;
		int id = -1;

		if (!p->host[0]) {
			first_of_id[next] = pi;
			p->host_id = next++;
			continue;
		}
		h = str_hash(p->host);
		u64map__get(&seen, h, &v);
		/* the ids of this name are those of procs named alike: scan them */
		for (int k = v ? a->procs[v - 1].host_id : next; k < next && id < 0; k++) {
			const struct proc *q = &a->procs[first_of_id[k]];
			int64_t qb = boot_of(q);

			if (strcmp(q->host, p->host))
				continue;
			if (boot == FR_UNK || qb == FR_UNK || i64_abs(ns_diff(boot, qb)) <= BOOT_SLACK)
				id = k;
		}
		if (id < 0) {
			if (v && !a->host_split) {
				const struct proc *q = &a->procs[v - 1];
				char *line = NULL;

				a->host_split = true;
				if (asprintf(&line, "host %s: dumps from machines booted %.1f s apart "
					     "(pids %" PRId64 " and %" PRId64 "): one --host-id on two "
					     "machines; their times are kept apart", p->host,
					     i64_abs(ns_diff(boot, boot_of(q))) / 1e9, q->pid,
					     p->pid) < 0)
					line = NULL;
				if (analysis_note(a, line))
					goto nomem;
			}
			first_of_id[next] = pi;
			id = next++;
		}
		p->host_id = id;
		if (!v && u64map__set(&seen, h, (uint64_t)pi + 1))
			goto nomem;
	}
	u64map__clear(&seen);
	free(first_of_id);
	a->nr_hosts = next;
	return timing_notes(a);
nomem:
	u64map__clear(&seen);
	free(first_of_id);
	return -ENOMEM;
}

/* A host whose clock is more than a day from the median host's: said once. Nothing compares
 * clocks of different hosts, so the verdicts stand. */
#define CLOCK_FAR	(86400LL * 1000000000LL)
static int cmp_i64(const void *x, const void *y)
{
	int64_t p = *(const int64_t *)x, q = *(const int64_t *)y;

	return p < q ? -1 : p > q;
}

static int timing_notes(struct fr_analysis *a)
{
	int64_t *t = malloc((a->nr_hosts + 1) * sizeof(*t)), med, far = 0;
	int n = 0, far_p = -1;

	if (!t)
		return -ENOMEM;
	for (int ci = 0; ci < a->nr_comms; ci++) {
		char *line = NULL;

		if (!a->comms[ci].align_ambiguous)
			continue;
		if (asprintf(&line, "comm %.8s: seq alignment across hosts ambiguous (clocks apart, dumps "
			     "not from one moment)",
			     a->comms[ci].id + (strncmp(a->comms[ci].id, "inferred:", 9) ? 0 : 9)) < 0)
			line = NULL;
		if (analysis_note(a, line)) {
			free(t);
			return -ENOMEM;
		}
		break;
	}
	for (int i = 0; i < a->nr_hosts; i++)
		t[i] = FR_UNK;
	for (int pi = 0; pi < a->nr_procs; pi++)
		if (a->procs[pi].dump_time_ns != FR_UNK && t[a->procs[pi].host_id] == FR_UNK)
			t[a->procs[pi].host_id] = a->procs[pi].dump_time_ns;
	for (int i = 0; i < a->nr_hosts; i++)
		if (t[i] != FR_UNK)
			t[n++] = t[i];
	if (n < 3) {
		free(t);
		return 0;
	}
	qsort(t, n, sizeof(*t), cmp_i64);
	med = t[n / 2];
	free(t);
	for (int pi = 0; pi < a->nr_procs; pi++) {
		const struct proc *p = &a->procs[pi];
		int64_t d = p->dump_time_ns == FR_UNK ? 0 : i64_abs(ns_diff(p->dump_time_ns, med));

		if (d > far) {
			far = d;
			far_p = pi;
		}
	}
	if (far > CLOCK_FAR) {
		const struct proc *p = &a->procs[far_p];
		char *line = NULL;

		if (asprintf(&line, "host %s's clock is %.1f days %s the other hosts' (its dump_time_ns): "
			     "no verdict compares clocks of different hosts", p->host,
			     far / 86400e9, p->dump_time_ns < med ? "behind" : "ahead of") < 0)
			line = NULL;
		return analysis_note(a, line);
	}
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
		if (r->waited != FR_UNK && r->waited > comm_skew(a, cid))
			a->hang_seen = true;
	}
	qsort(t->rows, t->n, sizeof(*t->rows), cmp_wrow);
	return 0;
}

#define USUAL_MIN_SEQS	4	/* completed collectives a comm's usual wait is taken from */

/* Each comm's hang threshold: a job whose collectives keep ranks waiting a second as a matter
 * of course (a loaded host, long steps, pipeline bubbles) is not hung when a rank waits a
 * second at its dump, nor is a rank that entered a second after its peers missing. The usual
 * wait is the median of the longest wait (its first rank's, completion - creation on one
 * clock) of each collective completed by every rank whose dump holds it (at the rings'
 * edges, by fewer ranks than the comm has): a rank late in a third of the collectives
 * leaves it as it is (the 90th percentile made that lateness the threshold); the threshold
 * twice that, never under --skew-ms, never over half --stuck-ms (a hang the recorder's stall
 * timeout dumped is one). */
int timing_comm_skews(struct fr_analysis *a)
{
	int64_t cap = a->opts.stuck_ns / 2 > a->opts.skew_ns ? a->opts.stuck_ns / 2 : a->opts.skew_ns;

	for (int ci = 0; ci < a->nr_comms; ci++) {
		struct comm *c = &a->comms[ci];
		int64_t *w = malloc((c->aggs.n + 1) * sizeof(*w)), th;
		int n = 0;

		if (!w)
			return -ENOMEM;
		c->skew_ns = a->opts.skew_ns;
		c->usual_wait = FR_UNK;
		for (int k = 0; k < c->aggs.n; k++) {
			const struct seq_agg *g = &a->aggs[c->aggs.v[k]];

			if (g->entered > 0 && g->completed == g->entered && g->nr_waits > 0 &&
			    g->max_wait != FR_UNK && g->max_wait >= 0)
				w[n++] = g->max_wait;
		}
		if (n >= USUAL_MIN_SEQS) {
			qsort(w, n, sizeof(*w), cmp_i64);
			c->usual_wait = w[(n - 1) / 2];
			th = c->usual_wait > cap / 2 ? cap : 2 * c->usual_wait;
			if (th > c->skew_ns)
				c->skew_ns = th;
		}
		free(w);
	}
	return 0;
}

/* the largest comm threshold, for the report's words; *usual its comm's usual wait (FR_UNK
 * when no comm raised it) */
int64_t timing_max_skew(const struct fr_analysis *a, int64_t *usual)
{
	int64_t best = a->opts.skew_ns;

	*usual = FR_UNK;
	for (int ci = 0; ci < a->nr_comms; ci++)
		if (a->comms[ci].skew_ns > best) {
			best = a->comms[ci].skew_ns;
			*usual = a->comms[ci].usual_wait;
		}
	return best;
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
	if (ARRAY_RESERVE(a->redumps, a->cap_redumps, a->nr_redumps + 1, 16))
		return -ENOMEM;
	r = &a->redumps[a->nr_redumps++];
	/* every field: a collective's redump is no p2p one (the array's memory is not zeroed) */
	*r = (struct redump){ .proc = pi, .comm = cid, .seq = seq, .completed = completed };
	return 0;
}

/* proc pi's dump lacks the op matching a p2p op src->dst its peer had posted, and nothing
 * proves it was taken after that op was posted */
int timing_redump_p2p(struct fr_analysis *a, int pi, int cid, int64_t p2p_seq, int src, int dst,
		      bool lacks_recv)
{
	int n = a->nr_redumps, err = timing_redump(a, pi, cid, p2p_seq, false);
	struct redump *r;

	if (err || a->nr_redumps == n)
		return err;	/* listed already */
	r = &a->redumps[a->nr_redumps - 1];
	r->p2p = true;
	r->lacks_recv = lacks_recv;
	r->src = src;
	r->dst = dst;
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
