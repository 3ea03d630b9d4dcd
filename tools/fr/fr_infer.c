// SPDX-License-Identifier: MIT
/* fr_infer: identity inference. Comms created before attach (local ids, seqs from attach)
 * are matched across dumps by their collective sequences; split children with an unknown
 * rank get it from their members' split keys and parent ranks. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "fr_analyze_int.h"
#include "growbuf.h"

static struct sig entry_sig(const struct fr_entry *e)
{
	struct sig s = {
		.count = e->count, .in_size = e->in_size, .out_size = e->out_size,
		.root = fr_op_has_root(e->op) ? e->root : -1,
		.op = e->op, .dtype = e->dtype,
		.redop = fr_op_has_redop(e->op) ? e->redop : FR_RED_NONE,
	};
	return s;
}

/* Signatures that must agree on every rank of a comm whatever its size: in/out sizes scale
 * with nranks per op, and nranks is what is not known yet. */
static bool sig_match(const struct fr_entry *x, const struct fr_entry *y)
{
	struct sig p = entry_sig(x), q = entry_sig(y);

	return p.op == q.op && p.count == q.count && p.dtype == q.dtype && p.redop == q.redop &&
	       p.root == q.root;
}

static int64_t i64_abs(int64_t v) { return v < 0 ? (v == INT64_MIN ? INT64_MAX : -v) : v; }

static int cmp_i64(const void *x, const void *y)
{
	int64_t p = *(const int64_t *)x, q = *(const int64_t *)y;

	return p < q ? -1 : p > q;
}

static const struct fr_entry *pcoll(const struct pend *p, int i) { return &p->e[p->coll[i]]; }

/* index of p's collective with seq, -1 */
static int pend_find_seq(const struct pend *p, int64_t seq)
{
	int lo = 0, hi = p->nc - 1;

	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2;
		int64_t s = pcoll(p, mid)->coll_seq;

		if (s == seq)
			return mid;
		if (s < seq)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

/* index of p's collective created nearest to t (creation times rise with record order) */
static int pend_near_time(const struct pend *p, int64_t t)
{
	int lo = 0, hi = p->nc - 1;

	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		int64_t c = pcoll(p, mid)->created_ns;

		if (c != FR_UNK && c < t)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo > 0 && pcoll(p, lo)->created_ns != FR_UNK && pcoll(p, lo - 1)->created_ns != FR_UNK &&
	    i64_abs(ns_diff(t, pcoll(p, lo - 1)->created_ns)) <
	    i64_abs(ns_diff(pcoll(p, lo)->created_ns, t)))
		lo--;
	return lo;
}

#define ALIGN_CANDS	64
#define ALIGN_CANDS_HOSTS 160	/* ... across hosts: time-free candidates added */
#define ALIGN_NEAR	8	/* candidate offsets: this many collectives either side in time */
#define ALIGN_SAT	16	/* a prefix this long is as good as any longer one; time decides */
#define ALIGN_SOLID	8	/* a member placed by this many matches (none impossible, not
				 * ambiguous) anchors its host's others */
#define ALIGN_MAX_DT	30000000000LL	/* matched collectives further apart than this: no */
#define ALIGN_CAUSAL_SLACK 200000LL	/* ns: two recorders' clock conversions on one host */
#define ALIGN_STATE_MARGIN 500000000LL	/* ns: a completion one host's other ranks must see */
#define ALIGN_DONE_SLACK 50000LL	/* ns: completion spreads closer than this are equal */
#define ALIGN_RAW_CLOSE 10000000000LL	/* dumps this close on the clocks as they are: those
					 * clocks may agree (one trigger, synchronised hosts) */

struct align {
	bool ok;
	int64_t d;		/* m's seq x is r's x + d */
	int prefix;		/* matching collectives from the start of the overlap */
	int impossible;		/* matches that one host's clock says cannot be one collective,
				 * or completed on one side long before the other's dump without
				 * completing there (state_conflict) */
	int64_t dt;		/* median creation-time difference over the first matches; across
				 * hosts taken against the dumps' times (clocks apart) */
	int64_t clk;		/* m's clock minus r's: the median creation-time difference */
	int64_t spread;		/* across hosts: spread of the completion-time differences, -1 */
	int later_bad;		/* across hosts: mismatching signatures past the prefix */
	bool ambiguous;		/* across hosts, another offset was as good but for dt, and dt
				 * does not tell them apart (dumps not from one moment) */
	int causal;		/* one clock: matches seen completed on one side before the
				 * other called them (of impossible) */
	int fault_end;		/* the overlap ends in a pending mismatch counted in prefix */
};

/* most of its matches cannot be one collective, or (one clock) one completed before the other
 * side called it: not this offset, however long its history */
static bool refuted(const struct align *x)
{
	return x->causal > 0 || 2 * x->impossible > x->prefix;
}

/* A collective completes on no rank before every rank has called it: on one host (one clock),
 * a match where one side was seen completed before the other side was even called is two
 * different collectives. */
static bool causal_conflict(const struct fr_entry *e, const struct fr_entry *f)
{
	return (e->created_ns != FR_UNK && f->completed_ns != FR_UNK &&
		e->created_ns > f->completed_ns + ALIGN_CAUSAL_SLACK) ||
	       (f->created_ns != FR_UNK && e->completed_ns != FR_UNK &&
		f->created_ns > e->completed_ns + ALIGN_CAUSAL_SLACK);
}

/* A collective completes on every rank once all of them have called it: one rank seeing it
 * completed while the other, which had entered it before that, still has it pending in a dump
 * taken well after (margin: the other's own discovery of the completion) is two different
 * collectives, or one rank's GPU side stuck (rare). An alignment shifted by a period of a
 * hung job's schedule pairs the stuck ranks' pending collectives with one rank's completed
 * ones of the step before: their creation times cannot tell them apart when that rank ran
 * late, their states can. One host's clock only: see state_conflict_hosts_one for the others. */
static bool state_conflict_one(const struct fr_entry *done, const struct fr_entry *pend,
			       int64_t pend_dump_ns, int64_t margin)
{
	return done->state == FR_ST_COMPLETED && done->completed_ns != FR_UNK &&
	       (pend->state == FR_ST_ENQUEUED || pend->state == FR_ST_STARTED) &&
	       pend->created_ns != FR_UNK && pend->created_ns < done->completed_ns &&
	       pend_dump_ns != FR_UNK && pend_dump_ns > done->completed_ns + margin;
}

static bool state_conflict(const struct fr_entry *e, int64_t e_dump, const struct fr_entry *f,
			   int64_t f_dump)
{
	return state_conflict_one(e, f, f_dump, ALIGN_STATE_MARGIN) ||
	       state_conflict_one(f, e, e_dump, ALIGN_STATE_MARGIN);
}

/* The same across hosts, whose clocks are not compared (seconds or years apart): pend's rank
 * completed an earlier matched collective p (pend_prev) and done's rank entered p before that
 * completion (done_prev); so pend's dump came at least (dump - completion of p, pend's clock)
 * - (completion of this one - entry into p, done's clock) after done's rank saw this one
 * complete. Past the margin, pend's rank should have seen it complete too. */
static bool state_conflict_hosts_one(const struct fr_entry *done, const struct fr_entry *done_prev,
				     const struct fr_entry *pend, const struct fr_entry *pend_prev,
				     int64_t pend_dump_ns)
{
	if (!done_prev || !pend_prev || done->state != FR_ST_COMPLETED ||
	    done->completed_ns == FR_UNK || done_prev->created_ns == FR_UNK ||
	    (pend->state != FR_ST_ENQUEUED && pend->state != FR_ST_STARTED) ||
	    pend_prev->state != FR_ST_COMPLETED || pend_prev->completed_ns == FR_UNK ||
	    pend_dump_ns == FR_UNK)
		return false;
	return ns_diff(pend_dump_ns, pend_prev->completed_ns) -
	       ns_diff(done->completed_ns, done_prev->created_ns) > ALIGN_STATE_MARGIN;
}

/* m's i-th collective, matched at offset d, is the last pair of the overlap and one side of
 * it is still pending */
static bool pending_fault(const struct pend *m, int i, const struct pend *r, int64_t d)
{
	const struct fr_entry *e = pcoll(m, i);
	int j = pend_find_seq(r, e->coll_seq + d);

	if (j < 0 || (e->state == FR_ST_COMPLETED && pcoll(r, j)->state == FR_ST_COMPLETED))
		return false;
	for (int k = i + 1; k < m->nc; k++)
		if (pend_find_seq(r, pcoll(m, k)->coll_seq + d) >= 0)
			return false;
	return true;
}

static bool align_better_dt(const struct align *x, const struct align *y)
{
	if (i64_abs(x->dt) != i64_abs(y->dt))
		return i64_abs(x->dt) < i64_abs(y->dt);
	return x->prefix > y->prefix;
}

/* x better than y up to the time tie-break (0: equal so far, 1: x, -1: y) */
static int align_cmp_evidence(const struct align *x, const struct align *y)
{
	/* a pair that cannot be one collective is no match: a short history (rings of a
	 * few collectives since attach) shifted by a period can overlap one collective more
	 * than the true offset, and that one is the pair the states refute */
	int px = x->prefix - x->impossible < ALIGN_SAT ? x->prefix - x->impossible : ALIGN_SAT;
	int py = y->prefix - y->impossible < ALIGN_SAT ? y->prefix - y->impossible : ALIGN_SAT;
	bool rx = refuted(x), ry = refuted(y);

	/* below saturation, an overlap that goes on to collectives both sides completed with
	 * different signatures is worth a match less: a short run of a periodic schedule
	 * (all_gather, all_gather, reduce_scatter) then a contradiction is chance as likely
	 * as history, against a shorter overlap that agrees to its end */
	if (px < ALIGN_SAT && py < ALIGN_SAT) {
		px -= x->later_bad > 0;
		py -= y->later_bad > 0;
	}

	if (!y->ok)
		return x->ok ? 1 : 0;
	if (!x->ok)
		return -1;
	/* refuted, however long (where the reference's newest collective is a mismatch, the
	 * true offset's prefix stops one short of a wrong one's; a wrong shift's overlap can
	 * be longer than the true one's) */
	if (rx != ry)
		return ry ? 1 : -1;
	if (px != py)
		return px > py ? 1 : -1;
	/* matches that cannot be one collective (the states, one host's clock) are proof;
	 * disagreement later in the overlap is not: a rank that skipped a collective disagrees
	 * from there on at its true offset, and a shift by a step that pushes the skip past
	 * the others' newest entry agrees everywhere */
	if (x->impossible != y->impossible)
		return x->impossible < y->impossible ? 1 : -1;
	/* across hosts, a shift by a period matches as long a prefix: one that agrees on the
	 * whole overlap is the likelier */
	if (!x->later_bad != !y->later_bad)
		return !x->later_bad ? 1 : -1;
	return 0;
}

static bool align_better(const struct align *x, const struct align *y)
{
	int c = align_cmp_evidence(x, y);

	if (c)
		return c > 0;
	return x->ok && align_better_dt(x, y);
}

/* index of p's first collective with seq >= seq (p->nc when none) */
static int pend_lower_seq(const struct pend *p, int64_t seq)
{
	int lo = 0, hi = p->nc;

	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;

		if (pcoll(p, mid)->coll_seq < seq)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static void add_cand(int64_t *cands, int *nc, int max, int64_t d)
{
	for (int c = 0; c < *nc; c++)
		if (cands[c] == d)
			return;
	if (*nc < max)
		cands[(*nc)++] = d;
}

/* the candidate of e[] (evidence ties) nearest by |key|, whether it is clearly the nearest
 * (within half the runner-up's distance, or within the slack) */
static int nearest(const struct align *e, int n, bool raw, bool *decisive)
{
	int b = -1, b2 = -1;

	for (int i = 0; i < n; i++) {
		int64_t k = i64_abs(raw ? e[i].clk : e[i].dt);

		if (b < 0 || k < i64_abs(raw ? e[b].clk : e[b].dt)) {
			b2 = b;
			b = i;
		} else if (b2 < 0 || k < i64_abs(raw ? e[b2].clk : e[b2].dt)) {
			b2 = i;
		}
	}
	*decisive = b2 < 0 || i64_abs(raw ? e[b].clk : e[b].dt) <= ALIGN_CAUSAL_SLACK ||
		    2 * i64_abs(raw ? e[b].clk : e[b].dt) < i64_abs(raw ? e[b2].clk : e[b2].dt);
	return b;
}

/* Across hosts, among the offsets the evidence cannot tell apart (the best's ties): times
 * decide. Against the dumps' own times (only as good as the dumps are simultaneous), or on
 * the clocks as they are (only as good as the hosts' clocks agree, possible when the dumps'
 * times are seconds apart at most): the one that is clearly the nearest. Where neither is
 * clear, the completion-time differences that stay the most constant (one collective
 * completes at one instant on every rank), when clearly so; else the alignment is ambiguous. */
static struct align align_hosts_pick(struct align *all, int nall, const struct align *best,
				     bool raw_ok)
{
	struct align e[ALIGN_CANDS_HOSTS], pick;
	int n = 0, d, r, sbest = -1;
	bool d_dec, r_dec, s_dec = true;

	for (int i = 0; i < nall; i++)
		if (!align_cmp_evidence(&all[i], best))
			e[n++] = all[i];
	if (n < 2)
		return *best;
	d = nearest(e, n, false, &d_dec);
	/* the dumps' times are seconds apart at most, not exactly simultaneous: an offset near
	 * them by chance is contested by one whose completions agree clearly better */
	for (int i = 0; i < n && d_dec; i++)
		if (e[i].spread >= 0 && e[d].spread >= 0 &&
		    2 * e[i].spread + ALIGN_DONE_SLACK < e[d].spread)
			d_dec = false;
	r = raw_ok ? nearest(e, n, true, &r_dec) : -1;
	if (raw_ok && r == d) {
		pick = e[d];
		pick.ambiguous = !d_dec && !r_dec;
		return pick;
	}
	if (d_dec && (!raw_ok || !r_dec)) {
		pick = e[d];
		pick.ambiguous = false;
		return pick;
	}
	if (raw_ok && r_dec && !d_dec) {
		pick = e[r];
		pick.ambiguous = false;
		return pick;
	}
	if (d_dec) {
		/* both clear and different: clocks apart with dumps at one moment, or clocks
		 * that agree with dumps a step apart */
		pick = e[d];
		pick.ambiguous = true;
		return pick;
	}
	for (int i = 0; i < n; i++)
		if (e[i].spread >= 0 && (sbest < 0 || e[i].spread < e[sbest].spread))
			sbest = i;
	for (int i = 0; sbest >= 0 && i < n; i++)
		if (i != sbest && (e[i].spread < 0 ||
				   2 * e[sbest].spread + ALIGN_DONE_SLACK >= e[i].spread))
			s_dec = false;
	if (sbest >= 0 && s_dec) {
		pick = e[sbest];
		pick.ambiguous = false;
		return pick;
	}
	pick = e[raw_ok ? r : d];
	pick.ambiguous = true;
	return pick;
}

/* The newest pairs of an alignment's overlap each side saw completed: m completed mprev
 * (paired with rprev_m), r completed rprev (paired with mprev_r). */
struct align_prev {
	const struct fr_entry *mprev, *rprev_m, *rprev, *mprev_r;
};

/* One pair counted as one collective at al's offset: the prefix it extends (up to its cap),
 * and what says it cannot be one (one host's clock; the states, on either clock). */
static void count_pair(struct align *al, const struct fr_entry *e, const struct fr_entry *f,
		       const struct align_prev *pv, bool one_clock, int64_t m_dump, int64_t r_dump)
{
	if (al->prefix < 4 * ALIGN_SAT)
		al->prefix++;
	al->causal += one_clock && causal_conflict(e, f);
	if ((one_clock && (causal_conflict(e, f) || state_conflict(e, m_dump, f, r_dump))) ||
	    (!one_clock && (state_conflict_hosts_one(e, pv->mprev_r, f, pv->rprev, r_dump) ||
			    state_conflict_hosts_one(f, pv->rprev_m, e, pv->mprev, m_dump))))
		al->impossible++;
}

/* Aligns m's collective sequence to r's: the seq offset with the longest matching history
 * from where the two overlap (so a rank that skipped a collective later is not "fixed" by a
 * shift that matches its tail); ties go to the one with fewer matches that cannot be (one_clock:
 * m and r were recorded on one host, see causal_conflict; state_conflict, m_dump and r_dump
 * are the dumps' times), then, across hosts, to the one whose completion times differ by the
 * most constant amount, then to the one whose matches were created closest in time (a skew
 * between hosts, or ranks a step apart, blurs this one). Across hosts the clocks are not
 * compared: creation times are taken against each dump's own time (the dumps answered one
 * trigger, seconds apart at most), and when that alone chose between offsets that are
 * otherwise as good and it cannot tell them apart, the alignment is ambiguous.
 * Comms whose seqs count from comm init on both sides can only be at offset 0. */
static struct align align_to(const struct pend *m, int64_t m_dump, const struct pend *r,
			     int64_t r_dump, bool one_clock)
{
	struct align best = { 0 }, all[ALIGN_CANDS_HOSTS];
	int nall = 0;
	int64_t cands[ALIGN_CANDS_HOSTS], dts[ALIGN_SAT], dds[4 * ALIGN_SAT];
	int nc = 0, taken = 0;
	bool hosts = !one_clock;
	/* across hosts, m's times in r's frame: against the dumps' times */
	int64_t shift = hosts && m_dump != FR_UNK && r_dump != FR_UNK ? ns_diff(m_dump, r_dump) : 0;

	if (!m->nc || !r->nc)
		return best;
	if (!m->ci.seq_attach && !r->ci.seq_attach) {
		cands[nc++] = 0;
	} else {
		int64_t r0 = pcoll(r, 0)->created_ns, r1 = pcoll(r, r->nc - 1)->created_ns;

		for (int pass = 0; pass < 2 && !taken; pass++) {
			for (int i = 0; i < m->nc && taken < 4; i++) {
				const struct fr_entry *e = pcoll(m, i);
				int64_t t;
				int j;

				if (e->created_ns == FR_UNK)
					continue;
				t = ns_diff(e->created_ns, shift);
				/* first pass: m's collectives created while r was recording */
				if (!pass && (r0 == FR_UNK || r1 == FR_UNK || t < r0 || t > r1))
					continue;
				taken++;
				j = pend_near_time(r, t);
				for (int k = j - ALIGN_NEAR; k <= j + ALIGN_NEAR; k++)
					if (k >= 0 && k < r->nc && sig_match(e, pcoll(r, k)))
						add_cand(cands, &nc, ALIGN_CANDS,
							 pcoll(r, k)->coll_seq - e->coll_seq);
			}
		}
		/* across hosts the dumps' times may be seconds apart: every offset that pairs
		 * one side's first collective with the other's, nearest the time guess first */
		if (hosts) {
			const struct fr_entry *m0 = pcoll(m, 0), *r0e = pcoll(r, 0);
			int jm = m0->created_ns == FR_UNK ? 0 :
				 pend_near_time(r, ns_diff(m0->created_ns, shift));
			int jr = r0e->created_ns == FR_UNK ? 0 :
				 pend_near_time(m, r0e->created_ns + shift);

			for (int w = 0; w < r->nc || w < m->nc; w++) {
				for (int sgn = -1; sgn <= 1; sgn += 2) {
					int k = jm + sgn * w, i = jr + sgn * w;

					if (k >= 0 && k < r->nc && sig_match(m0, pcoll(r, k)))
						add_cand(cands, &nc, ALIGN_CANDS_HOSTS,
							 pcoll(r, k)->coll_seq - m0->coll_seq);
					if (i >= 0 && i < m->nc && sig_match(pcoll(m, i), r0e))
						add_cand(cands, &nc, ALIGN_CANDS_HOSTS,
							 r0e->coll_seq - pcoll(m, i)->coll_seq);
				}
				if (nc >= ALIGN_CANDS_HOSTS)
					break;
			}
		}
	}
	for (int c = 0; c < nc; c++) {
		struct align al = { .d = cands[c], .spread = -1 };
		struct align_prev pv = { 0 };
		int nd = 0, ndd = 0;

		for (int i = pend_lower_seq(m, pcoll(r, 0)->coll_seq - al.d); i < m->nc; i++) {
			const struct fr_entry *e = pcoll(m, i), *f;
			int j = pend_find_seq(r, e->coll_seq + al.d);

			if (j < 0)
				continue;
			f = pcoll(r, j);
			if (!sig_match(e, f) && al.prefix >= 2 && pending_fault(m, i, r, al.d)) {
				/* the overlap's last pair, one side still in it, after a history
				 * that agrees (two matches at least: one is chance): a mismatched
				 * collective hangs there; the history agrees to the end (a wrong
				 * offset that pairs it with nothing would win by one) */
				count_pair(&al, e, f, &pv, one_clock, m_dump, r_dump);
				al.fault_end = 1;
				break;
			}
			if (!sig_match(e, f)) {
				if (!hosts)
					break;
				/* across hosts: the rest of the overlap, signatures only, of
				 * collectives both completed: a mismatch where one side is still
				 * pending is what a mismatched collective's hang looks like (the
				 * fault, not a wrong offset; a shift by a period that pairs it
				 * with nothing would otherwise win) */
				for (; i < m->nc; i++) {
					const struct fr_entry *x = pcoll(m, i), *y;

					j = pend_find_seq(r, x->coll_seq + al.d);
					if (j < 0)
						continue;
					y = pcoll(r, j);
					al.later_bad += !sig_match(x, y) &&
							x->state == FR_ST_COMPLETED &&
							y->state == FR_ST_COMPLETED;
					/* ... and one side seen completed while the other still
					 * waited in it long after cannot be one collective,
					 * whatever the signatures */
					al.impossible +=
						state_conflict_hosts_one(x, pv.mprev_r, y, pv.rprev, r_dump) ||
						state_conflict_hosts_one(y, pv.rprev_m, x, pv.mprev, m_dump);
				}
				break;
			}
			/* past the prefix that counts, the matches still go on to the pending
			 * collectives at the overlap's end: only there can a shifted alignment's
			 * states conflict (a hung job's history is longer than the prefix) */
			count_pair(&al, e, f, &pv, one_clock, m_dump, r_dump);
			if (nd < ALIGN_SAT && e->created_ns != FR_UNK && f->created_ns != FR_UNK)
				dts[nd++] = ns_diff(e->created_ns, f->created_ns);
			if (hosts && ndd < 4 * ALIGN_SAT && e->completed_ns != FR_UNK &&
			    f->completed_ns != FR_UNK && e->state == FR_ST_COMPLETED &&
			    f->state == FR_ST_COMPLETED)
				dds[ndd++] = ns_diff(e->completed_ns, f->completed_ns);
			if (e->state == FR_ST_COMPLETED && e->completed_ns != FR_UNK) {
				pv.mprev = e;
				pv.rprev_m = f;
			}
			if (f->state == FR_ST_COMPLETED && f->completed_ns != FR_UNK) {
				pv.rprev = f;
				pv.mprev_r = e;
			}
		}
		if (!al.prefix)
			continue;
		if (nd) {
			qsort(dts, nd, sizeof(*dts), cmp_i64);
			al.clk = dts[nd / 2];
			al.dt = ns_diff(al.clk, shift);
		}
		if (ndd >= 4) {
			/* the middle half's range: a late wake-up on either side is not held
			 * against the offset */
			qsort(dds, ndd, sizeof(*dds), cmp_i64);
			al.spread = ns_diff(dds[ndd - 1 - ndd / 4], dds[ndd / 4]);
		}
		/* across hosts: too far apart against the dumps and on the clocks as they are
		 * (dumps of one job minutes apart on clocks that agree are still one job) */
		if (i64_abs(al.dt) > ALIGN_MAX_DT && (!hosts || i64_abs(al.clk) > ALIGN_MAX_DT))
			continue;
		/* one matching collective of many is chance, not evidence */
		al.ok = al.prefix >= 2 || m->nc == 1 || r->nc == 1;
		if (align_better(&al, &best))
			best = al;
		if (al.ok && nall < ALIGN_CANDS_HOSTS)
			all[nall++] = al;
	}
	if (hosts && best.ok)
		best = align_hosts_pick(all, nall, &best, i64_abs(shift) <= ALIGN_RAW_CLOSE);
	return best;
}

static bool same_host(const struct fr_analysis *a, const struct pend *x, const struct pend *y)
{
	const char *hx = a->procs[x->proc].host, *hy = a->procs[y->proc].host;

	return hx[0] && !strcmp(hx, hy);
}

static bool cluster_has_proc(const struct fr_analysis *a, const struct cluster *c, int proc)
{
	for (int i = 0; i < c->pends.n; i++)
		if (a->pends[c->pends.v[i]].proc == proc)
			return true;
	return false;
}

/* hard reasons two pre-attach comms are not the same communicator */
static bool pend_compatible(const struct pend *x, const struct pend *y)
{
	if (x->ci.split_color != FR_UNK && y->ci.split_color != FR_UNK &&
	    x->ci.split_color != y->ci.split_color)
		return false;
	if (x->ci.nranks != FR_UNK && y->ci.nranks != FR_UNK && x->ci.nranks != y->ci.nranks)
		return false;
	if (x->ci.rank != FR_UNK && y->ci.rank != FR_UNK && x->ci.rank == y->ci.rank)
		return false;
	return true;
}

struct cslot {
	struct fr_entry rep[3];	/* a representative entry per distinct signature */
	int cnt[3], n, total;
};

/* the majority entry at a consensus slot, NULL when none has more than half */
static const struct fr_entry *cslot_major(const struct cslot *c)
{
	int best = -1;

	for (int i = 0; i < c->n; i++)
		if (best < 0 || c->cnt[i] > c->cnt[best])
			best = i;
	if (best < 0 || c->cnt[best] < 2 || c->cnt[best] * 2 <= c->total)
		return NULL;
	return &c->rep[best];
}

static int64_t rebase_coll(const struct pend *p, int64_t seq)
{
	int64_t x = seq + p->d;

	if (p->hole_len && x >= p->hole_seq)
		x += p->hole_len;
	return x;
}

/* A rank that skipped k collectives and went on has, from the skip on, the majority's
 * sequence shifted by k: find it (its history before stays as aligned) and record the hole. */
static int find_skips(struct fr_analysis *a, struct cluster *cl)
{
	int64_t lo = INT64_MAX, hi = INT64_MIN;
	struct cslot *cs;

	for (int i = 0; i < cl->pends.n; i++) {
		struct pend *p = &a->pends[cl->pends.v[i]];

		if (!p->nc)
			continue;
		if (pcoll(p, 0)->coll_seq + p->d < lo)
			lo = pcoll(p, 0)->coll_seq + p->d;
		if (pcoll(p, p->nc - 1)->coll_seq + p->d > hi)
			hi = pcoll(p, p->nc - 1)->coll_seq + p->d;
	}
	if (cl->pends.n < 3 || lo > hi || hi - lo >= (1 << 22))
		return 0;
	cs = calloc(hi - lo + 1, sizeof(*cs));
	if (!cs)
		return -ENOMEM;
	for (int i = 0; i < cl->pends.n; i++) {
		struct pend *p = &a->pends[cl->pends.v[i]];

		for (int k = 0; k < p->nc; k++) {
			const struct fr_entry *e = pcoll(p, k);
			struct cslot *c = &cs[e->coll_seq + p->d - lo];
			int g;

			for (g = 0; g < c->n; g++)
				if (sig_match(e, &c->rep[g]))
					break;
			if (g == c->n && c->n < 3)
				c->rep[c->n++] = *e;
			if (g < c->n)
				c->cnt[g]++;
			c->total++;
		}
	}
	for (int i = 0; i < cl->pends.n; i++) {
		struct pend *p = &a->pends[cl->pends.v[i]];
		int first = -1;

		for (int k = 0; k < p->nc && first < 0; k++) {
			const struct fr_entry *e = pcoll(p, k);
			const struct fr_entry *maj = cslot_major(&cs[e->coll_seq + p->d - lo]);

			if (maj && !sig_match(e, maj))
				first = k;
		}
		if (first < 0)
			continue;
		for (int64_t skip = 1; skip <= 4; skip++) {
			int cmp = 0;
			bool ok = true;

			for (int k = first; k < p->nc && ok; k++) {
				int64_t x = pcoll(p, k)->coll_seq + p->d + skip;
				const struct fr_entry *maj = x <= hi ? cslot_major(&cs[x - lo]) : NULL;

				ok = maj && sig_match(pcoll(p, k), maj);
				cmp++;
			}
			if (ok && cmp) {
				p->hole_seq = pcoll(p, first)->coll_seq + p->d;
				p->hole_len = skip;
				break;
			}
		}
	}
	free(cs);
	return 0;
}

/* p2p seqs count per rank, so they are aligned by time: the offset most of m's sends/recvs
 * have to the reference's op of the same kind created nearest (clock offset removed) */
static int64_t p2p_offset(const struct pend *m, const struct pend *r)
{
	int64_t cand[64];
	int n = 0, best = 0, best_n = 0;

	if (!m->ci.seq_attach && !r->ci.seq_attach)
		return 0;
	for (int i = m->n - 1; i >= 0 && n < 64; i--) {
		const struct fr_entry *e = &m->e[i], *near = NULL;
		int64_t t;

		if (!fr_op_is_p2p(e->op) || e->created_ns == FR_UNK || e->p2p_seq == FR_UNK)
			continue;
		t = ns_diff(e->created_ns, m->clock);
		for (int j = 0; j < r->n; j++) {
			const struct fr_entry *f = &r->e[j];

			if (f->op != e->op || f->created_ns == FR_UNK || f->p2p_seq == FR_UNK)
				continue;
			if (!near || i64_abs(ns_diff(f->created_ns, t)) <
				     i64_abs(ns_diff(near->created_ns, t)))
				near = f;
		}
		if (near)
			cand[n++] = near->p2p_seq - e->p2p_seq;
	}
	for (int i = 0; i < n; i++) {
		int c = 0;

		for (int j = 0; j < n; j++)
			c += cand[j] == cand[i];
		if (c > best_n || (c == best_n && i64_abs(cand[i]) < i64_abs(cand[best])))
			best = i, best_n = c;
	}
	return n ? cand[best] : 0;
}

static int cmp_pend_rank(const void *x, const void *y, void *arg)
{
	const struct fr_analysis *a = arg;
	const struct pend *p = &a->pends[*(const int *)x], *q = &a->pends[*(const int *)y];
	int64_t gp = a->procs[p->proc].global_rank, gq = a->procs[q->proc].global_rank;

	if ((gp == FR_UNK) != (gq == FR_UNK))
		return gp == FR_UNK ? 1 : -1;
	if (gp != gq)
		return gp < gq ? -1 : 1;
	return p->proc - q->proc;
}

static int cmp_str_ptr(const void *x, const void *y)
{
	return strcmp(*(char *const *)x, *(char *const *)y);
}

/* entry e has signature g (sizes apart: a comm created before attach may not know them) */
static bool sig_matches(const struct sig *g, const struct fr_entry *e)
{
	return g->op == e->op && g->count == e->count && g->dtype == e->dtype &&
	       g->redop == (fr_op_has_redop(e->op) ? e->redop : FR_RED_NONE) &&
	       g->root == (fr_op_has_root(e->op) ? e->root : -1);
}

/* Comms created before attach: cluster the local comms of different dumps that are the same
 * communicator, rebase their seqs to a common origin, infer ranks, then fold them. */
/* Some recorders saw a communicator's init (its exact id, rank and size), others attached
 * after it (a local id, seqs from attach): the cluster of the latter is the same comm when
 * an exact comm of known size has room for it (no shared process, enough absent ranks) and
 * exactly one offset D makes the reference's collectives (rebased seq + D) match the exact
 * comm's signatures, the best by where its newest collective falls against the exact
 * members' newest (a periodic schedule matches at several offsets: a tie is no match). A
 * reference whose recorder dropped events is compared from its newest collective back to
 * its first mismatch (entries lost before it number the older ones lower), EXACT_MIN at
 * least; its collectives from that mismatch back are left out when it is folded (*lost_upto,
 * its own seq there). On one host's clock, an offset that has the reference complete a
 * collective before an exact member entered it is refuted. The exact comm's index, D in
 * *off; -1 when none. */
#define EXACT_CHECK	64	/* newest collectives of the reference compared */
#define EXACT_MIN	4	/* ... at least this many must land on known seqs */
static int exact_match(struct fr_analysis *a, const struct cluster *cl, int nr_exact,
		       int64_t *off, int64_t *lost_upto)
{
	const struct pend *r = &a->pends[cl->ref];
	int best_c = -1;
	int64_t best_d = 0, best_score = INT64_MAX, best_brk = FR_UNK;
	bool tie = false, dropped = a->procs[r->proc].events_dropped != FR_UNK &&
				    a->procs[r->proc].events_dropped > 0;
	const char *rhost = a->procs[r->proc].host;

	if (!r->nc)
		return -1;
	for (int ci = 0; ci < nr_exact; ci++) {
		const struct comm *c = &a->comms[ci];
		int64_t enewest = FR_UNK, emax = 0, rnewest = rebase_coll(r, pcoll(r, r->nc - 1)->coll_seq);
		bool overlap = false;

		if (c->inferred || c->nranks == FR_UNK || !c->members.n ||
		    c->members.n + cl->pends.n > c->nranks || !strncmp(c->id, "local:", 6))
			continue;
		for (int i = 0; i < c->members.n && !overlap; i++) {
			const struct member *m = &a->members[c->members.v[i]];

			if (m->rank == FR_UNK)
				overlap = true;	/* an exact member without a rank: not this */
			for (int k = 0; k < cl->pends.n && !overlap; k++)
				overlap = a->pends[cl->pends.v[k]].proc == m->proc;
			if (m->newest_seq != FR_UNK && (enewest == FR_UNK || m->newest_seq > enewest))
				enewest = m->newest_seq;
		}
		for (int i = 0; i < a->nr_aggs; i++)
			if (a->aggs[i].comm == ci && a->aggs[i].seq > emax)
				emax = a->aggs[i].seq;
		if (overlap || enewest == FR_UNK)
			continue;
		/* below 0 too: a member of the cluster aligned too far back (nothing pending
		 * to place it) moves the cluster's origin back; the others' true offset is then
		 * negative, and the collectives it puts before seq 1 are dropped (fold_pend) */
		for (int64_t d = rnewest > 0 ? 1 - rnewest : 0; d <= emax; d++) {
			int hit = 0;
			bool bad = false;
			int64_t score, brk = FR_UNK;

			for (int k = r->nc - 1; k >= 0 && k >= r->nc - EXACT_CHECK && !bad; k--) {
				const struct fr_entry *e = pcoll(r, k);
				int ai = agg_find(a, ci, rebase_coll(r, e->coll_seq) + d);
				const struct agg_extra *x;
				const struct seq_agg *g;

				if (ai < 0)
					continue;
				/* one host's clock: a collective completes once every rank has
				 * entered it; the reference's completed before an exact rank of its
				 * host entered this seq is another collective */
				g = &a->aggs[ai];
				if (e->state == FR_ST_COMPLETED && e->completed_ns != FR_UNK &&
				    g->max_created != FR_UNK && g->max_m >= 0 && rhost[0] &&
				    !strcmp(a->procs[a->members[g->max_m].proc].host, rhost) &&
				    g->max_created > e->completed_ns + ALIGN_CAUSAL_SLACK) {
					bad = true;
					break;
				}
				/* any signature the exact members used there: where they
				 * disagree (the fault may be one of theirs) the majority is
				 * not known yet */
				bad = !sig_matches(&a->aggs[ai].sig0, e);
				x = a->aggs[ai].extra >= 0 ? &a->extras[a->aggs[ai].extra] : NULL;
				for (int gi = 0; bad && x && gi < x->nr_groups; gi++)
					bad = !sig_matches(&x->groups[gi].sig, e);
				if (bad && x && x->other_n)
					continue;	/* more signatures than kept: no evidence */
				/* the reference's own pending collective may be the fault (a
				 * mismatched one hangs): no evidence against the offset */
				if (bad && e->state != FR_ST_COMPLETED) {
					bad = false;
					continue;
				}
				/* its recorder dropped events: its older entries may be counted
				 * without lost ones (numbered lower): compared down to there */
				if (bad && dropped && hit >= EXACT_MIN) {
					bad = false;
					brk = e->coll_seq;
					break;
				}
				hit++;
			}
			if (bad || hit < EXACT_MIN)
				continue;
			score = i64_abs(rnewest + d - enewest);
			if (score < best_score) {
				best_score = score;
				best_c = ci;
				best_d = d;
				best_brk = brk;
				tie = false;
			} else if (score == best_score) {
				tie = true;
			}
		}
	}
	if (best_c < 0 || tie)
		return -1;
	*off = best_d;
	*lost_upto = best_brk;
	return best_c;
}

/* Each pend's collectives in order (p->coll), and its comm's size where the recorder did not
 * say it but sizes that scale with nranks do. */
static int index_collectives(struct fr_analysis *a)
{
	for (int i = 0; i < a->nr_pends; i++) {
		struct pend *p = &a->pends[i];

		p->coll = malloc((p->n + 1) * sizeof(int));
		if (!p->coll)
			return -ENOMEM;
		for (int k = 0; k < p->n; k++) {
			const struct fr_entry *e = &p->e[k];

			if (fr_op_is_p2p(e->op) || e->coll_seq == FR_UNK || e->coll_seq < 0)
				continue;
			if (p->nc && e->coll_seq <= pcoll(p, p->nc - 1)->coll_seq)
				continue;	/* out of order: folding would drop it too */
			p->coll[p->nc++] = k;
			/* sizes that scale with nranks tell it when the recorder knew it */
			if (p->ci.nranks == FR_UNK && e->count > 0) {
				int64_t big = e->op == FR_OP_ALL_GATHER || e->op == FR_OP_GATHER ||
					      e->op == FR_OP_ALL_TO_ALL ? e->out_size :
					      e->op == FR_OP_REDUCE_SCATTER || e->op == FR_OP_SCATTER ?
					      e->in_size : FR_UNK;

				if (big != FR_UNK && big > 0 && big % e->count == 0 &&
				    big / e->count <= FR_MAX_NRANKS)
					p->ci.nranks = big / e->count;
			}
		}
	}
	return 0;
}

/* its newest collective is still pending */
static bool pend_waits(const struct pend *p)
{
	return p->nc && pcoll(p, p->nc - 1)->state != FR_ST_COMPLETED;
}

/* the cluster's member on p's host that waits in a collective and was placed solidly, -1 */
static int host_anchor(const struct fr_analysis *a, const struct cluster *cl, const struct pend *p)
{
	for (int k = 0; k < cl->pends.n; k++) {
		const struct pend *q = &a->pends[cl->pends.v[k]];

		if (q != p && q->solid && pend_waits(q) && same_host(a, p, q))
			return cl->pends.v[k];
	}
	return -1;
}

/* A member aligned across hosts on a short or ambiguous history, once every member is
 * placed: where its cluster holds a member of its host that waits in a collective and was
 * placed solidly, one clock aligns it to that one exactly (whatever the file order: a culprit
 * first on its host is placed before its host's waiting ranks are) */
static void anchor_to_host(struct fr_analysis *a)
{
	for (int i = 0; i < a->nr_pends; i++) {
		struct pend *p = &a->pends[i];
		const struct cluster *cl = &a->clusters[p->cluster];
		const struct pend *q;
		struct align aq;
		int qi;

		/* on the reference's host it was aligned on one clock already */
		if (p->solid || !cl->anchor_host || same_host(a, p, &a->pends[cl->ref]) ||
		    (qi = host_anchor(a, cl, p)) < 0)
			continue;
		q = &a->pends[qi];
		aq = align_to(p, a->procs[p->proc].dump_time_ns, q, a->procs[q->proc].dump_time_ns,
			      true);
		if (aq.ok && !refuted(&aq)) {
			p->d = aq.d + q->d;
			p->clock = aq.clk + q->clock;
			p->ambiguous = false;
		}
	}
}

/* what an alignment's history shows: its matches, less those that cannot be one collective,
 * the pending mismatch at its end, and one for a contradiction later on */
static int align_net(const struct align *al)
{
	return al->prefix - al->impossible - al->fault_end - (al->later_bad > 0);
}

/* A member placed weakly across hosts (by fewer than ALIGN_SOLID matches, or ambiguously)
 * whose host holds, in another cluster, a member placed solidly or on one clock that it aligns
 * to on one clock by at least as much history: it joins that one. Greedy in file order, a rank with a short or
 * late ring is aligned to its cluster's reference only; where the reference's ring does not
 * reach back to its true seqs (dumped before the others ran far), or holds a single
 * collective, only a shift by a period overlaps, while its host's others (one clock: creation
 * times agree to the microsecond) formed their cluster after it. */
static int rehome_to_host(struct fr_analysis *a)
{
	for (int i = 0; i < a->nr_pends; i++) {
		struct pend *p = &a->pends[i];
		struct cluster *from = &a->clusters[p->cluster];
		struct align best = { 0 };
		int bq = -1;

		if (p->solid || from->ref == i || same_host(a, p, &a->pends[from->ref]))
			continue;
		for (int k = 0; k < a->nr_pends; k++) {
			const struct pend *q = &a->pends[k];
			const struct cluster *to = &a->clusters[q->cluster];
			struct align aq;
			/* q placed solidly, or on one clock to its reference */
			bool compat = k != i && q->cluster != p->cluster &&
				      (q->solid || same_host(a, q, &a->pends[to->ref])) &&
				      same_host(a, p, q) && !cluster_has_proc(a, to, p->proc);

			for (int j = 0; compat && j < to->pends.n; j++)
				compat = pend_compatible(p, &a->pends[to->pends.v[j]]);
			if (compat && p->ci.nranks != FR_UNK && to->pends.n >= p->ci.nranks)
				compat = false;
			if (!compat)
				continue;
			aq = align_to(p, a->procs[p->proc].dump_time_ns, q,
				      a->procs[q->proc].dump_time_ns, true);
			if (!aq.ok || refuted(&aq) || align_net(&aq) < p->place_net)
				continue;
			if (bq < 0 || align_better(&aq, &best)) {
				best = aq;
				bq = k;
			}
		}
		if (bq < 0)
			continue;
		for (int j = 0; j < from->pends.n; j++)
			if (from->pends.v[j] == i) {
				memmove(&from->pends.v[j], &from->pends.v[j + 1],
					(from->pends.n - j - 1) * sizeof(*from->pends.v));
				from->pends.n--;
				break;
			}
		p->cluster = a->pends[bq].cluster;
		p->d = best.d + a->pends[bq].d;
		p->clock = best.clk + a->pends[bq].clock;
		p->ambiguous = false;
		p->place_net = align_net(&best);
		if (ivec_push(&a->clusters[p->cluster].pends, i))
			return -ENOMEM;
	}
	return 0;
}

/* Greedy, in file order: each comm joins the cluster it aligns best with, or starts one. */
static int cluster_pends(struct fr_analysis *a)
{
	for (int i = 0; i < a->nr_pends; i++) {
		struct pend *p = &a->pends[i];
		struct align best = { 0 }, al;
		int bc = -1;

		for (int c = 0; c < a->nr_clusters; c++) {
			struct cluster *cl = &a->clusters[c];
			bool compat = !cluster_has_proc(a, cl, p->proc);

			for (int k = 0; compat && k < cl->pends.n; k++)
				compat = pend_compatible(p, &a->pends[cl->pends.v[k]]);
			/* a comm of known size that has all its members is full */
			if (compat && p->ci.nranks != FR_UNK && cl->pends.n >= p->ci.nranks)
				compat = false;
			if (!compat)
				continue;
			/* a member on p's host that waits in a collective was placed already
			 * (by its state and a long history, across hosts): one clock aligns p
			 * to it exactly (creation and completion times, causality), where
			 * across hosts a rank with nothing pending fits a shift by a period as
			 * well */
			al.ok = false;
			if (!same_host(a, p, &a->pends[cl->ref]) && cl->anchor_host) {
				int q = host_anchor(a, cl, p);

				if (q >= 0) {
					al = align_to(p, a->procs[p->proc].dump_time_ns, &a->pends[q],
						      a->procs[a->pends[q].proc].dump_time_ns, true);
					if (al.ok && !refuted(&al)) {
						al.d += a->pends[q].d;
						al.clk += a->pends[q].clock;
						al.ambiguous = false;
					} else {
						al.ok = false;
					}
				}
			}
			if (!al.ok)
				al = align_to(p, a->procs[p->proc].dump_time_ns, &a->pends[cl->ref],
					      a->procs[a->pends[cl->ref].proc].dump_time_ns,
					      same_host(a, p, &a->pends[cl->ref]));
			if (align_better(&al, &best)) {
				best = al;
				bc = c;
			}
		}
		if (bc < 0) {
			struct cluster *cl;

			if (ARRAY_RESERVE(a->clusters, a->cap_clusters, a->nr_clusters + 1, 16))
				return -ENOMEM;
			bc = a->nr_clusters++;
			cl = &a->clusters[bc];
			memset(cl, 0, sizeof(*cl));
			cl->ref = i;
			cl->comm = -1;
			best.d = 0;
			best.dt = 0;
		}
		p->cluster = bc;
		p->solid = a->clusters[bc].ref == i ||
			   (best.prefix >= ALIGN_SOLID && !best.ambiguous && !best.impossible);
		if (p->solid && pend_waits(p))
			a->clusters[bc].anchor_host = true;
		p->d = best.d;		/* its seq x is the reference's x + d */
		p->clock = best.clk;
		p->ambiguous = best.ambiguous;
		p->place_net = align_net(&best);
		if (ivec_push(&a->clusters[bc].pends, i))
			return -ENOMEM;
	}
	if (rehome_to_host(a))
		return -ENOMEM;
	anchor_to_host(a);
	for (int i = 0; i < a->nr_pends; i++)
		if (a->pends[i].ambiguous)
			a->clusters[a->pends[i].cluster].ambiguous = true;
	return 0;
}

/* A common origin for the cluster's members: the reference's, moved so no rebased seq is below
 * 1. */
static void cluster_rebase(struct fr_analysis *a, const struct cluster *cl)
{
	int64_t lo = INT64_MAX, plo = INT64_MAX;

	for (int k = 0; k < cl->pends.n; k++) {
		struct pend *p = &a->pends[cl->pends.v[k]];

		for (int e = 0; e < p->n; e++) {
			const struct fr_entry *x = &p->e[e];

			if (fr_op_is_p2p(x->op)) {
				if (x->p2p_seq != FR_UNK && x->p2p_seq + p->dp < plo)
					plo = x->p2p_seq + p->dp;
			}
		}
		if (p->nc && pcoll(p, 0)->coll_seq + p->d < lo)
			lo = pcoll(p, 0)->coll_seq + p->d;
	}
	for (int k = 0; k < cl->pends.n; k++) {
		struct pend *p = &a->pends[cl->pends.v[k]];

		if (lo != INT64_MAX && lo < 1) {
			p->d += 1 - lo;
			if (p->hole_len)
				p->hole_seq += 1 - lo;
		}
		if (plo != INT64_MAX && plo < 1)
			p->dp += 1 - plo;
	}
}

/* A stable name from the members' local ids (sorted in place). */
static void cluster_name(char **ids, int n, char *id, size_t size)
{
	uint64_t h = 0x6a09e667f3bcc909ULL;

	qsort(ids, n, sizeof(char *), cmp_str_ptr);
	for (int k = 0; k < n; k++)
		h = u64_mix(h ^ str_hash(ids[k]));
	if (n == 1)
		snprintf(id, size, "%s", ids[0]);
	else
		snprintf(id, size, "inferred:%016" PRIx64, h);
}

/* What a cluster's members are folded with: its comm, and where the comm was seen exactly by
 * some recorders, the offset to their seqs and the ranks they do not hold. */
struct unify_target {
	int ci;
	bool exact;
	bool any_attach;	/* a member was attached late: its comm's members are partial */
	int64_t nranks, exoff;
	/* the reference's collectives up to this seq of its own (FR_UNK: none) are counted
	 * without entries its recorder lost: left out */
	int64_t lost_upto;
	int64_t *absent;
	int nabsent;
	bool identity;		/* every exact member's rank is its global rank (the world, or
				 * a comm PyTorch ordered so): an absent rank is its global rank */
	uint8_t *is_absent;	/* [nranks]: no exact recorder holds this rank */
};

/* The ranks of exact comm ex that no exact recorder holds, in u->absent. */
static int absent_ranks(struct fr_analysis *a, int ex, struct unify_target *u)
{
	struct comm *c = &a->comms[ex];
	uint8_t *held = calloc(c->nranks + 1, 1);

	if (!held)
		return -ENOMEM;
	u->identity = true;
	for (int i = 0; i < c->members.n; i++) {
		const struct member *m = &a->members[c->members.v[i]];

		held[m->rank] = 1;
		if (a->procs[m->proc].global_rank != m->rank)
			u->identity = false;
	}
	u->absent = malloc((c->nranks + 1) * sizeof(*u->absent));
	u->nabsent = 0;
	for (int64_t rk = 0; u->absent && rk < c->nranks; rk++) {
		held[rk] = !held[rk];
		if (held[rk])
			u->absent[u->nabsent++] = rk;
	}
	u->is_absent = held;
	return u->absent ? 0 : -ENOMEM;
}

/* Pend pi, the k-th of its cluster by rank, becomes a member of u->ci with its entries
 * folded in, rebased. */
static int fold_pend(struct fr_analysis *a, const struct cluster *cl, int pi, int k,
		     const struct unify_target *u)
{
	struct pend *p = &a->pends[pi];
	struct fr_comm_info info = p->ci;
	struct member *m;
	struct proc *pr;
	int mi, err = 0, left_out = 0;

	if (u->exact) {
		int64_t g = a->procs[p->proc].global_rank;

		/* where the exact comm's ranks are global ranks, an absent rank whose process
		 * is here is that process's: taking the absent ranks in order would misplace
		 * every member after a process whose comm could not be matched (no collective
		 * since attach) */
		if (info.rank == FR_UNK && u->identity &&
		    g != FR_UNK && g >= 0 && g < u->nranks && u->is_absent[g]) {
			info.rank = g;
			u->is_absent[g] = 0;	/* one process per rank */
		}
		if (info.rank == FR_UNK && !u->identity)
			info.rank = k < u->nabsent ? u->absent[k] : FR_UNK;
		info.nranks = u->nranks;
	} else if (cl->pends.n > 1 || info.nranks == FR_UNK) {
		if (info.rank == FR_UNK)
			info.rank = k;
		if (info.nranks == FR_UNK)
			info.nranks = u->nranks != FR_UNK ? u->nranks : cl->pends.n;
	}
	if (info.rank != FR_UNK && info.nranks != FR_UNK && info.rank >= info.nranks)
		info.rank = FR_UNK;
	if (info.last_enqueued != FR_UNK && info.last_enqueued > 0)
		info.last_enqueued = rebase_coll(p, info.last_enqueued) + u->exoff;
	if (info.last_completed != FR_UNK && info.last_completed > 0)
		info.last_completed = rebase_coll(p, info.last_completed) + u->exoff;
	if (info.last_enqueued != FR_UNK && info.last_enqueued < 0)
		info.last_enqueued = FR_UNK;
	if (info.last_completed != FR_UNK && info.last_completed < 0)
		info.last_completed = FR_UNK;
	mi = member_new(a, u->ci, p->proc, &info);
	if (mi < 0)
		return mi;
	m = &a->members[mi];
	m->partial = u->any_attach;
	m->place_ambiguous = p->ambiguous;
	if (p->hole_len) {
		m->hole_seq = p->hole_seq + u->exoff;
		m->hole_len = p->hole_len;
	}
	for (int e = 0; e < p->n; e++) {
		struct fr_entry x = p->e[e];

		if (fr_op_is_p2p(x.op)) {
			if (x.p2p_seq != FR_UNK)
				x.p2p_seq += p->dp;
			err = fold_p2p(a, mi, &x);
		} else if (x.coll_seq != FR_UNK && x.coll_seq >= 0) {
			if (u->exact && pi == cl->ref && u->lost_upto != FR_UNK &&
			    x.coll_seq <= u->lost_upto) {
				left_out++;	/* numbered without entries lost after it */
				continue;
			}
			x.coll_seq = rebase_coll(p, x.coll_seq) + u->exoff;
			if (u->exact && x.coll_seq < 1)
				continue;	/* before the exact comm's first: misplaced */
			m = &a->members[mi];
			if (m->hole_len && m->hole_next_seq == FR_UNK &&
			    x.coll_seq >= m->hole_seq + m->hole_len) {
				m->hole_next_seq = x.coll_seq;
				m->hole_next_op = x.op;
				m->hole_next_state = x.state;
			}
			err = fold_collective(a, mi, &x);
		}
		if (err)
			return err;
	}
	pr = &a->procs[p->proc];
	if (left_out) {
		char *line;

		if (asprintf(&line, "comm %s: %s %" PRId64 "'s %d oldest collective%s left out: its "
			     "recorder attached after the comm was made and dropped %" PRId64
			     " events, and %s not fit where its newer ones place it (counted "
			     "without entries it lost)", short_id(a->comms[u->ci].id),
			     pr->global_rank != FR_UNK ? "rank" : "pid",
			     pr->global_rank != FR_UNK ? pr->global_rank : pr->pid, left_out,
			     left_out == 1 ? "" : "s", pr->events_dropped,
			     left_out == 1 ? "it does" : "they do") < 0)
			line = NULL;
		if (analysis_note(a, line))
			return -ENOMEM;
	}
	/* the newest entry of the dump, when on this comm */
	if (pr->last_comm == -(pi + 2)) {
		pr->last_comm = u->ci;
		if (fr_op_is_p2p(pr->last_op))
			pr->last_seq = pr->last_seq == FR_UNK ? FR_UNK : pr->last_seq + p->dp;
		else if (pr->last_seq != FR_UNK)
			pr->last_seq = rebase_coll(p, pr->last_seq) + u->exoff;
	}
	return 0;
}

/* One cluster becomes one comm: an exact one it matches, or one named after its members. */
static int unify_cluster(struct fr_analysis *a, struct cluster *cl, int nr_exact)
{
	char **ids = malloc(cl->pends.n * sizeof(char *)), id[FR_ID_LEN];
	int *order = malloc(cl->pends.n * sizeof(int));
	struct unify_target u = { .nranks = FR_UNK };
	int ex, err = 0;

	if (!ids || !order) {
		free(ids);
		free(order);
		return -ENOMEM;
	}
	for (int k = 0; k < cl->pends.n; k++) {
		struct pend *p = &a->pends[cl->pends.v[k]];

		p->dp = cl->pends.v[k] == cl->ref ? 0 : p2p_offset(p, &a->pends[cl->ref]);
		ids[k] = p->ci.id;
		order[k] = cl->pends.v[k];
		u.any_attach |= p->ci.seq_attach;
		if (p->ci.nranks != FR_UNK && (u.nranks == FR_UNK || p->ci.nranks > u.nranks))
			u.nranks = p->ci.nranks;
	}
	if ((err = find_skips(a, cl))) {
		free(ids);
		free(order);
		return err;
	}
	cluster_rebase(a, cl);
	cluster_name(ids, cl->pends.n, id, sizeof(id));
	free(ids);
	u.lost_upto = FR_UNK;
	ex = exact_match(a, cl, nr_exact, &u.exoff, &u.lost_upto);
	if (ex >= 0) {
		/* one comm, seen exactly by some recorders: the ranks they do not hold */
		if ((err = absent_ranks(a, ex, &u)))
			goto out;
		u.ci = ex;
		u.exact = true;
		u.nranks = a->comms[ex].nranks;
		a->comms[u.ci].inferred = true;
		a->comms[u.ci].nr_expected = (int)a->comms[ex].nranks;
	} else {
		u.exoff = 0;
		u.ci = comm_get(a, id);
		if (u.ci < 0) {
			err = u.ci;
			goto out;
		}
		a->comms[u.ci].inferred = cl->pends.n > 1;
		a->comms[u.ci].nr_expected = (int)(u.nranks != FR_UNK ? u.nranks :
						   a->world_size != FR_UNK ? a->world_size : 0);
	}
	cl->comm = u.ci;
	a->comms[u.ci].align_ambiguous |= cl->ambiguous;
	/* PyTorch orders a process group's ranks by global rank */
	qsort_r(order, cl->pends.n, sizeof(int), cmp_pend_rank, a);
	for (int k = 0; k < cl->pends.n && !err; k++)
		err = fold_pend(a, cl, order[k], k, &u);
out:
	free(order);
	free(u.absent);
	free(u.is_absent);
	return err;
}

int unify_local(struct fr_analysis *a)
{
	int err, nr_exact = a->nr_comms;

	if ((err = index_collectives(a)) || (err = cluster_pends(a)))
		return err;
	for (int c = 0; c < a->nr_clusters; c++)
		if ((err = unify_cluster(a, &a->clusters[c], nr_exact)))
			return err;
	return 0;
}

/* Split children with null rank/nranks: nranks is the number of dumps holding the comm, the
 * rank the order by (split_key, rank in the parent) as ncclCommSplit assigns it. */
static int64_t parent_rank(struct fr_analysis *a, const struct split_pend *sp)
{
	struct member *m = &a->members[sp->member];
	int ci = sp->parent[0] ? comm_find(a, sp->parent) : -1;

	if (ci < 0)
		return FR_UNK;
	for (int i = 0; i < a->comms[ci].members.n; i++)
		if (a->members[a->comms[ci].members.v[i]].proc == m->proc)
			return a->members[a->comms[ci].members.v[i]].rank;
	return FR_UNK;
}

struct split_sort {
	int64_t key, prank, grank;
	int member;
};

static int cmp_split_sort(const void *x, const void *y)
{
	const struct split_sort *p = x, *q = y;

	if (p->key != q->key)
		return p->key < q->key ? -1 : 1;
	if (p->prank != q->prank)
		return p->prank < q->prank ? -1 : 1;
	if (p->grank != q->grank)
		return p->grank < q->grank ? -1 : 1;
	return p->member - q->member;
}

int resolve_splits(struct fr_analysis *a)
{
	/* parents first: a split of a split needs its parent's ranks; a few passes do */
	for (int pass = 0; pass < 4; pass++) {
		bool changed = false;

		for (int i = 0; i < a->nr_splits; i++) {
			struct member *m = &a->members[a->splits[i].member];
			struct comm *c = &a->comms[m->comm];
			struct split_sort *ss;
			int n = 0;
			bool ready = true;

			if (m->rank != FR_UNK)
				continue;
			ss = malloc(c->members.n * sizeof(*ss));
			if (!ss)
				return -ENOMEM;
			for (int k = 0; k < c->members.n; k++) {
				int mk = c->members.v[k];
				const struct split_pend *sp = a->members[mk].split >= 0 ?
							      &a->splits[a->members[mk].split] : NULL;
				ss[n].member = mk;
				ss[n].key = sp ? sp->key : FR_UNK;
				ss[n].prank = sp ? parent_rank(a, sp) : FR_UNK;
				ss[n].grank = a->procs[a->members[mk].proc].global_rank;
				if (ss[n].prank == FR_UNK && sp && sp->parent[0] && pass < 3)
					ready = false;	/* its parent's rank may come in a later pass */
				n++;
			}
			if (ready) {
				qsort(ss, n, sizeof(*ss), cmp_split_sort);
				if (c->nranks == FR_UNK)
					c->nranks = n;
				for (int k = 0; k < n; k++)
					if (a->members[ss[k].member].rank == FR_UNK) {
						a->members[ss[k].member].rank = k;
						a->members[ss[k].member].placed = true;
					}
				changed = true;
			}
			free(ss);
		}
		if (!changed)
			break;
	}
	/* now that the ranks are known, the p2p entries that waited */
	for (int i = 0; i < a->nr_splits; i++) {
		int mi = a->splits[i].member;

		for (int k = 0; k < a->members[mi].nr_dents; k++) {
			int err = fold_p2p(a, mi, &a->members[mi].dents[k]);

			if (err)
				return err;
		}
		free(a->members[mi].dents);
		a->members[mi].dents = NULL;
		a->members[mi].nr_dents = 0;
	}
	return 0;
}
