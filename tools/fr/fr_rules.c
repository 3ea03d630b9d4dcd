// SPDX-License-Identifier: MIT
/* fr_rules: the rules. Each one turns the folded state into findings — rule, culprit ranks,
 * comm, seq, op, the evidence and the confidence — and words nothing (fr_text does). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fr_analyze_int.h"
#include "growbuf.h"

const char *const rule_names[RULE__COUNT] = {
	"comm_init_failed", "dead_rank", "missing_dump", "partitioned_host", "missing_rank",
	"odd_stack", "nccl_async_error", "type_mismatch", "size_mismatch", "dtype_mismatch",
	"op_mismatch", "root_mismatch", "p2p_mismatch", "no_progress", "stuck_in_call", "late_arrival", "straggler",
	"state_divergence", "dumps_not_simultaneous", "comm_ranks_unknown", "attached_after_hang",
	"corrupt_dump",
};

static int cmp_placed(const void *x, const void *y)
{
	const int64_t *p = x, *q = y;

	if (p[0] != q[0])
		return p[0] < q[0] ? -1 : 1;
	return p[1] < q[1] ? -1 : p[1] > q[1];
}

/* Sorts each comm's members by comm rank; a second dump claiming a rank is not placed. */
static int place_members(struct fr_analysis *a)
{
	for (int ci = 0; ci < a->nr_comms; ci++) {
		struct comm *c = &a->comms[ci];
		int n = 0;

		c->placed = malloc((c->members.n + 1) * sizeof(*c->placed));
		if (!c->placed)
			return -ENOMEM;
		for (int i = 0; i < c->members.n; i++) {
			struct member *m = &a->members[c->members.v[i]];

			if (m->rank == FR_UNK || (c->nranks != FR_UNK && m->rank >= c->nranks)) {
				m->placed = false;
				continue;
			}
			c->placed[n][0] = m->rank;
			c->placed[n][1] = c->members.v[i];
			n++;
		}
		qsort(c->placed, n, sizeof(*c->placed), cmp_placed);
		c->nr_placed = 0;
		for (int i = 0; i < n; i++) {
			if (c->nr_placed && c->placed[c->nr_placed - 1][0] == c->placed[i][0]) {
				a->members[c->placed[i][1]].placed = false;
				c->dup_ranks++;
				continue;
			}
			memmove(c->placed[c->nr_placed++], c->placed[i], sizeof(*c->placed));
		}
	}
	return 0;
}

static int comm_member_at(const struct fr_analysis *a, const struct comm *c, int64_t rank)
{
	int lo = 0, hi = c->nr_placed - 1;

	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2;

		if (c->placed[mid][0] == rank)
			return (int)c->placed[mid][1];
		if (c->placed[mid][0] < rank)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

/* Absent comm ranks: the first up to cap of them into vals; returns how many there are. */
int64_t comm_absent(const struct comm *c, int64_t *vals, int cap)
{
	int64_t n = 0, r = 0;

	if (c->nranks == FR_UNK)
		return 0;
	for (int i = 0; i <= c->nr_placed; i++) {
		int64_t upto = i < c->nr_placed ? c->placed[i][0] : c->nranks;

		for (; r < upto && n < cap; r++)
			vals[n++] = r;
		if (r < upto) {
			n += upto - r;
			r = upto;
		}
		r = upto + 1;
	}
	return n;
}

static int cmp_comm_id(const void *x, const void *y, void *arg)
{
	const struct fr_analysis *a = arg;

	return strcmp(a->comms[*(const int *)x].id, a->comms[*(const int *)y].id);
}

static int cmp_agg_seq(const void *x, const void *y, void *arg)
{
	const struct fr_analysis *a = arg;
	int64_t s = a->aggs[*(const int *)x].seq, t = a->aggs[*(const int *)y].seq;

	return s < t ? -1 : s > t;
}

static const char *agg_op(const struct fr_analysis *a, int ai)
{
	return ai >= 0 ? fr_op_name(a->aggs[ai].sig0.op) : "collective";
}

static bool proc_is_dead(const struct proc *p, bool any_running)
{
	if (p->state == FR_PROC_KILLED)
		return true;
	if (p->state == FR_PROC_EXITED)
		return (p->exit_code != FR_UNK && p->exit_code != 0) || any_running;
	return false;
}

/* Members whose communicator init failed: the comm never existed on them, so they are
 * culprits of comm_init_failed and nothing else on that comm. */
static int rule_init_failed(struct fr_analysis *a)
{
	for (int ci = 0; ci < a->nr_comms; ci++) {
		int cid = a->comm_order[ci];
		struct comm *c = &a->comms[cid];
		struct verdict *v = NULL;
		int64_t wait_seq = FR_UNK;
		int nr_ok = 0;

		for (int i = 0; i < c->members.n; i++) {
			int mi = c->members.v[i];
			struct member *m = &a->members[mi];

			if (!m->init_failed) {
				nr_ok++;
				continue;
			}
			if (!v && !(v = verdict_new(a, RULE_INIT_FAILED, cid, FR_UNK, "comm_init")))
				return -ENOMEM;
			if (!v->culprits.n) {
				v->ev.init.rc = m->init_rc;
				snprintf(v->ev.init.api, sizeof(v->ev.init.api), "%s", m->created_by);
			}
			if (ivec_push(&v->culprits, mi))
				return -ENOMEM;
			who_member(a, v, mi);
		}
		if (!v)
			continue;
		who_sort(v);
		v->ev.init.all_failed = !nr_ok;
		/* the others wait on it in the oldest collective that never completed */
		for (int k = 0; k < c->aggs.n && wait_seq == FR_UNK; k++) {
			struct seq_agg *g = &a->aggs[c->aggs.v[k]];

			if (g->completed < g->entered) {
				wait_seq = g->seq;
				v->agg = c->aggs.v[k];
			}
		}
		if (wait_seq == FR_UNK)
			continue;
		v->seq = wait_seq;
		for (int i = 0; i < c->members.n; i++) {
			int mi = c->members.v[i];
			struct member *m = &a->members[mi];

			if (!m->init_failed && m->newest_seq != FR_UNK && m->newest_seq >= wait_seq &&
			    (m->newest_completed == FR_UNK || m->newest_completed < wait_seq) &&
			    ivec_push(&v->waiting, mi))
				return -ENOMEM;
		}
		check_dropped(a, v);
	}
	return 0;
}

/* timing_lag's rows hold each member's oldest unfinished collective only. Where the others
 * entered `s` behind an unfinished one (collectives are enqueued ahead of the wait) there is
 * no row at s; when every member of the comm was dumped on member mi's host (one clock),
 * the (comm, s) aggregate's newest entry time gives the same bound: mi's dump came at least
 * that long after every rank that entered s had. FR_UNK otherwise. */
static int64_t lag_one_clock(const struct fr_analysis *a, int cid, int mi, int64_t s,
			     int64_t *waited)
{
	const struct comm *c = &a->comms[cid];
	const struct proc *p = &a->procs[a->members[mi].proc];
	int ai = agg_find((struct fr_analysis *)a, cid, s);
	const struct seq_agg *g;

	if (ai < 0 || p->dump_time_ns == FR_UNK)
		return FR_UNK;
	for (int i = 0; i < c->members.n; i++)
		if (a->procs[a->members[c->members.v[i]].proc].host_id != p->host_id)
			return FR_UNK;
	g = &a->aggs[ai];
	if (g->max_created == FR_UNK || g->min_created == FR_UNK)
		return FR_UNK;
	*waited = ns_diff(p->dump_time_ns, g->min_created);
	return ns_diff(p->dump_time_ns, g->max_created);
}

/* A hole the inference found is blamed only as missing_rank blames: when the dumps' own
 * times prove the rank had not entered it well after the others had (or the dumps have no
 * times). A healthy job dumped mid-step can look like a hole on a comm made before attach:
 * one rank a collective behind, the others in it for a millisecond. */
static bool hole_proven(struct fr_analysis *a, const struct timing_comm *t, int cid, int mi,
			int64_t s)
{
	int64_t lag, waited;
	int how;

	lag = timing_lag(a, t, mi, s, &waited, &how);
	if (lag == FR_UNK && waited == FR_UNK)
		lag = lag_one_clock(a, cid, mi, s, &waited);
	if (waited != FR_UNK && waited > comm_skew(a, cid))
		a->hang_seen = true;
	return (lag != FR_UNK && lag > comm_skew(a, cid)) ||
	       (lag == FR_UNK && waited == FR_UNK &&
		a->procs[a->members[mi].proc].dump_time_ns == FR_UNK);
}

/* Ranks of an inferred comm that skipped a collective and went on (find_skips): the
 * earliest such hole is the collective the others wait in. 1 when it made a verdict. */
static int missing_hole(struct fr_analysis *a, int cid)
{
	struct comm *c = &a->comms[cid];
	struct timing_comm t = { 0 };
	int64_t s = FR_UNK;
	struct verdict *v;
	int ai;

	if (timing_comm_build(a, cid, &t))
		return -ENOMEM;
	for (int i = 0; i < c->members.n; i++) {
		struct member *m = &a->members[c->members.v[i]];

		if (m->placed && m->hole_len && (s == FR_UNK || m->hole_seq < s) &&
		    hole_proven(a, &t, cid, c->members.v[i], m->hole_seq))
			s = m->hole_seq;
	}
	if (s == FR_UNK) {
		timing_comm_free(&t);
		return 0;
	}
	ai = agg_find(a, cid, s);
	if (!(v = verdict_new(a, RULE_MISSING_RANK, cid, s, agg_op(a, ai)))) {
		timing_comm_free(&t);
		return -ENOMEM;
	}
	v->agg = ai;
	v->ev.missing.hole = true;
	v->ev.missing.unknown = -1;
	for (int i = 0; i < c->members.n; i++) {
		int mi = c->members.v[i];
		struct member *m = &a->members[mi];

		if (!m->placed)
			continue;
		if (m->hole_len && m->hole_seq == s && hole_proven(a, &t, cid, mi, s)) {
			if (ivec_push(&v->culprits, mi))
				goto nomem;
			who_member(a, v, mi);
		} else if (m->newest_seq != FR_UNK && m->newest_seq >= s &&
			   (m->oldest_seq == FR_UNK || m->oldest_seq <= s)) {
			if (ivec_push(&v->waiting, mi))
				goto nomem;
		}
	}
	timing_comm_free(&t);
	who_sort(v);
	check_dropped(a, v);
	return 1;
nomem:
	timing_comm_free(&t);
	return -ENOMEM;
}

/* Members behind the newest one: a rank that never entered the next collective is missing
 * only when the dumps' own times prove it had not entered it well after others had
 * (fr_timing.c); a rank whose dump is older than what the others show is never blamed. The
 * lowest such collective is the verdict's. */
/* Each placed member's last collective entered (m->eff_last: the header's, or its newest
 * entry's if newer; 0 when its whole history is in the ring and it ran none); the newest of
 * them, FR_UNK when none is known. *unknown: a member whose position is not known, or -1. */
static int64_t members_last_entered(struct fr_analysis *a, const struct comm *c, int *unknown)
{
	int64_t maxeff = FR_UNK;

	for (int i = 0; i < c->members.n; i++) {
		struct member *m = &a->members[c->members.v[i]];
		struct proc *p = &a->procs[m->proc];
		int64_t eff = m->hdr_enqueued;

		/* a failed init is told by comm_init_failed */
		if (!m->placed || m->init_failed)
			continue;
		if (m->newest_seq != FR_UNK && (eff == FR_UNK || m->newest_seq > eff))
			eff = m->newest_seq;
		if (eff == FR_UNK && !p->wrapped)
			eff = 0;	/* whole history in the ring: it never ran one */
		m->eff_last = eff;
		if (eff == FR_UNK) {
			*unknown = c->members.v[i];
			continue;
		}
		if (maxeff == FR_UNK || eff > maxeff)
			maxeff = eff;
	}
	return maxeff;
}

/* A culprit's own stack must not show it blocked in an NCCL call like the waiting ranks: then
 * its ring is older than its stack (or lost the entry), and the verdict is doubtful. */
static void culprit_stack_check(struct fr_analysis *a, struct verdict *v)
{
	for (int i = 0; i < v->culprits.n; i++) {
		const struct proc *p = &a->procs[a->members[v->culprits.v[i]].proc];

		if (p->snap.present && !p->snap.exited && p->snap.tid != FR_UNK &&
		    p->snap.where == FR_WHERE_NCCL && p->snap.progress != FR_PROG_YES) {
			set_low(v, LOW_STACK_DISAGREES, a->members[v->culprits.v[i]].proc, FR_UNK);
			break;
		}
	}
}

static int missing_rank(struct fr_analysis *a, int cid)
{
	struct comm *c = &a->comms[cid];
	int64_t maxeff, s = FR_UNK, minlag = FR_UNK;
	struct ivec culprits = { 0 }, behind = { 0 }, waiting = { 0 }, dead = { 0 };
	struct timing_comm t = { 0 };
	int unknown = -1, ai, err = -ENOMEM, how = 0;
	int8_t *proven = NULL;
	struct verdict *v;

	maxeff = members_last_entered(a, c, &unknown);
	if (maxeff == FR_UNK || maxeff <= 0)
		return 0;
	if (timing_comm_build(a, cid, &t) ||
	    !(proven = calloc(c->members.n + 1, sizeof(*proven))))
		goto out;
	/* each member behind: proven missing (1), dead (2), waiting where its place is ambiguous
	 * (3), or not evidence against it (0) */
	for (int i = 0; i < c->members.n; i++) {
		int mi = c->members.v[i];
		struct member *m = &a->members[mi];
		int64_t next, lag, waited;
		int k, gi;

		if (!m->placed || m->init_failed || m->eff_last == FR_UNK || m->eff_last >= maxeff)
			continue;
		next = m->eff_last + 1;
		if (a->procs[m->proc].dead) {
			proven[i] = 2;
		} else if (m->place_ambiguous && m->newest_seq != FR_UNK &&
			   m->newest_state != FR_ST_COMPLETED) {
			/* placed across hosts by times that cannot tell, and waiting in a
			 * collective of its own: a step off is as likely as behind (the comm's
			 * note says the alignment is ambiguous); it waits with the others */
			proven[i] = 3;
			continue;
		} else if ((gi = agg_find(a, cid, next)) >= 0 && a->aggs[gi].completed > 0) {
			/* a rank completed it: every rank had entered it, this dump is older */
			if (timing_redump(a, m->proc, cid, next, true))
				goto out;
			continue;
		} else {
			lag = timing_lag(a, &t, mi, next, &waited, &k);
			if (lag == FR_UNK && waited == FR_UNK &&
			    (lag = lag_one_clock(a, cid, mi, next, &waited)) != FR_UNK)
				k = TIMING_SAME_HOST;
			if (waited != FR_UNK && waited > comm_skew(a, cid))
				a->hang_seen = true;
			if (lag != FR_UNK && lag > comm_skew(a, cid)) {
				proven[i] = 1;
				if (s == FR_UNK || next < s || (next == s && (minlag == FR_UNK ||
								  lag < minlag))) {
					minlag = lag;
					how = k;
				}
			} else if (lag == FR_UNK && waited == FR_UNK &&
				   a->procs[m->proc].dump_time_ns == FR_UNK) {
				/* dumps without times (PyTorch's): the sequences alone, as ever. A
				 * dump with times and no bound here means no other rank waits in
				 * `next` as its oldest unfinished collective: they wait in one this
				 * rank entered too, so it is not missing from theirs */
				proven[i] = 1;
			} else {
				/* not behind for long enough to tell: in flight, or its dump older
				 * than the others' wait */
				if (waited != FR_UNK && waited > comm_skew(a, cid) &&
				    timing_redump(a, m->proc, cid, next, false))
					goto out;
				continue;
			}
		}
		if (s == FR_UNK || next < s)
			s = next;
	}
	if (s == FR_UNK) {
		err = 0;
		goto out;
	}
	/* the lag of the culprits at s only */
	minlag = FR_UNK;
	for (int i = 0; i < c->members.n; i++) {
		int mi = c->members.v[i];
		struct member *m = &a->members[mi];
		int64_t lag, waited;
		int k;

		if (!m->placed || m->init_failed || m->eff_last == FR_UNK)
			continue;
		if (proven[i] == 3) {
			if (ivec_push(&waiting, mi))
				goto out;
			continue;
		}
		if (proven[i] && m->eff_last == s - 1) {
			if (ivec_push(proven[i] == 2 ? &dead : &culprits, mi))
				goto out;
			if (proven[i] == 1) {
				lag = timing_lag(a, &t, mi, s, &waited, &k);
				if (lag == FR_UNK && waited == FR_UNK &&
				    (lag = lag_one_clock(a, cid, mi, s, &waited)) != FR_UNK)
					k = TIMING_SAME_HOST;
				if (lag != FR_UNK && (minlag == FR_UNK || lag < minlag)) {
					minlag = lag;
					how = k;
				}
			}
		} else if (m->eff_last < maxeff && proven[i]) {
			if (ivec_push(&behind, mi))
				goto out;
		}
		if (m->eff_last >= s && ivec_push(&waiting, mi))
			goto out;
	}
	ai = agg_find(a, cid, s);
	/* a dead rank that never entered: told in its dead_rank verdict */
	for (int i = 0; i < dead.n; i++) {
		struct proc *p = &a->procs[a->members[dead.v[i]].proc];

		if (ivec_push(&p->missed, cid) ||
		    ivec_push(&p->missed, (int)(s > INT32_MAX ? INT32_MAX : s)) ||
		    ivec_push(&p->missed, waiting.n))
			goto out;
	}
	err = 0;
	if (!culprits.n)
		goto out;
	a->hang_seen = true;
	if (!(v = verdict_new(a, RULE_MISSING_RANK, cid, s, agg_op(a, ai)))) {
		err = -ENOMEM;
		goto out;
	}
	v->agg = ai;
	v->ev.missing.newest = maxeff;
	v->ev.missing.unknown = unknown;
	v->ev.missing.lag = minlag;
	v->ev.missing.how = how;
	for (int i = 0; i < culprits.n; i++)
		who_member(a, v, culprits.v[i]);
	who_sort(v);
	v->culprits = culprits;
	v->waiting = waiting;
	v->behind = behind;
	v->dead = dead;
	check_dropped(a, v);
	if (unknown >= 0)
		set_low(v, LOW_POSITION_UNKNOWN, a->members[unknown].proc, FR_UNK);
	culprit_stack_check(a, v);
	timing_comm_free(&t);
	free(proven);
	return 0;
out:
	timing_comm_free(&t);
	free(proven);
	free(culprits.v);
	free(behind.v);
	free(waiting.v);
	free(dead.v);
	return err;
}

static int rule_missing_rank(struct fr_analysis *a)
{
	for (int ci = 0; ci < a->nr_comms; ci++) {
		int cid = a->comm_order[ci], r = 0;

		if (a->comms[cid].inferred && (r = missing_hole(a, cid)) < 0)
			return r;
		if (!r && (r = missing_rank(a, cid)) < 0)
			return r;
	}
	return 0;
}

/* A comm whose members' ranks the dumps do not give (PyTorch 2.13's gloo dumps: pg_config
 * under the name "") cannot be judged by the rules above, which place each member by its
 * rank. When its members stopped at different seqs and none completed the newest one, the
 * job may be hung there: say so, and that who is missing cannot be told, rather than let the
 * summary call it healthy. Blames no rank; the members behind are named as evidence. */
static int rule_ranks_unknown(struct fr_analysis *a)
{
	for (int ci = 0; ci < a->nr_comms; ci++) {
		int cid = a->comm_order[ci], unplaced = 0, ai;
		struct comm *c = &a->comms[cid];
		int64_t newest = FR_UNK, oldest = FR_UNK;
		struct verdict *v;

		for (int i = 0; i < c->members.n; i++) {
			struct member *m = &a->members[c->members.v[i]];

			if (m->init_failed)
				continue;
			if (!m->placed)
				unplaced++;
			if (m->newest_seq == FR_UNK)
				continue;
			if (newest == FR_UNK || m->newest_seq > newest)
				newest = m->newest_seq;
			if (oldest == FR_UNK || m->newest_seq < oldest)
				oldest = m->newest_seq;
		}
		if (!unplaced || newest == FR_UNK || oldest == newest)
			continue;
		ai = agg_find(a, cid, newest);
		if (ai < 0 || a->aggs[ai].completed > 0)
			continue;	/* someone completed it: every member had entered it */
		for (int i = 0; i < a->nr_verdicts; i++)
			if (a->verdicts[i].comm == cid)
				goto next;
		if (!(v = verdict_new(a, RULE_RANKS_UNKNOWN, cid, newest, agg_op(a, ai))))
			return -ENOMEM;
		v->agg = ai;
		set_low(v, LOW_RANKS_UNKNOWN, -1, FR_UNK);
		for (int i = 0; i < c->members.n; i++) {
			struct member *m = &a->members[c->members.v[i]];

			if (m->init_failed || m->newest_seq == FR_UNK)
				continue;
			if (ivec_push(m->newest_seq < newest ? &v->behind : &v->waiting,
				      c->members.v[i]))
				return -ENOMEM;
		}
next:;
	}
	return 0;
}

static int rule_dead_rank(struct fr_analysis *a)
{
	for (int pi = 0; pi < a->nr_procs; pi++) {
		struct proc *p = &a->procs[pi];
		struct verdict *v;

		if (!p->dead)
			continue;
		if (!(v = verdict_new(a, RULE_DEAD_RANK, -1, FR_UNK, NULL)))
			return -ENOMEM;
		who_proc(a, v, pi);
		v->ev.dead_rank.proc = pi;
		if (p->missed.n >= 3) {
			/* the first comm the death blocks names the op */
			int ai = agg_find(a, p->missed.v[0], p->missed.v[1]);

			if (ai >= 0)
				snprintf(v->op, sizeof(v->op), "%s", agg_op(a, ai));
			v->comm = p->missed.v[0];
			v->seq = p->missed.v[1];
		}
		check_dropped(a, v);
	}
	return 0;
}

static int rule_missing_dump(struct fr_analysis *a)
{
	uint8_t *present = NULL;
	int64_t absent[ABSENT_LIST];
	struct verdict *v = NULL;
	int nr_missing = 0;

	if (a->world_size != FR_UNK) {
		present = calloc(a->world_size, 1);
		if (!present)
			return -ENOMEM;
		for (int pi = 0; pi < a->nr_procs; pi++)
			if (a->procs[pi].global_rank != FR_UNK &&
			    a->procs[pi].global_rank < a->world_size)
				present[a->procs[pi].global_rank] = 1;
		for (int64_t r = 0; r < a->world_size; r++)
			if (!present[r])
				nr_missing++;
	}
	if (nr_missing) {
		if (!(v = verdict_new(a, RULE_MISSING_DUMP, -1, FR_UNK, NULL))) {
			free(present);
			return -ENOMEM;
		}
		v->ev.missing_dump.world = true;
		for (int64_t r = 0; r < a->world_size; r++)
			if (!present[r])
				who_add(v, r, FR_UNK, -1);
		free(present);
		return 0;
	}
	free(present);
	/* no world size to go by: say it per comm */
	for (int ci = 0; ci < a->nr_comms; ci++) {
		int cid = a->comm_order[ci];
		struct comm *c = &a->comms[cid];
		int64_t n = comm_absent(c, absent, ABSENT_LIST);
		bool identity = true;

		if (!n)
			continue;
		for (int i = 0; i < c->nr_placed; i++) {
			struct member *m = &a->members[c->placed[i][1]];

			if (a->procs[m->proc].global_rank != m->rank)
				identity = false;
		}
		/* comm ranks that are global ranks whose dump is here: that dump holds the comm
		 * under another id (joined before the recorder attached: a local id), its dump is
		 * not missing. Never blamed; when none is left, no verdict. */
		if (identity) {
			int64_t k = 0;

			for (int64_t i = 0; i < n && i < ABSENT_LIST; i++) {
				bool here = false;

				for (int pi = 0; pi < a->nr_procs && !here; pi++)
					here = a->procs[pi].global_rank == absent[i];
				if (!here)
					absent[k++] = absent[i];
			}
			if (n > ABSENT_LIST)
				n = ABSENT_LIST;
			if (!k)
				continue;
			n = k;
		}
		if (!(v = verdict_new(a, RULE_MISSING_DUMP, cid, FR_UNK, NULL)))
			return -ENOMEM;
		v->ev.missing_dump.identity = identity;
		for (int64_t i = 0; i < n && i < ABSENT_LIST; i++)
			who_add(v, identity ? absent[i] : FR_UNK, absent[i], -1);
	}
	return 0;
}

static int rule_async_error(struct fr_analysis *a)
{
	for (int ci = 0; ci < a->nr_comms; ci++) {
		int cid = a->comm_order[ci];
		struct comm *c = &a->comms[cid];
		struct verdict *v = NULL;

		for (int i = 0; i < c->members.n; i++) {
			struct member *m = &a->members[c->members.v[i]];

			/* ncclInProgress (7) is the normal state of a nonblocking comm */
			if (m->async_error == FR_UNK || m->async_error == 0 || m->async_error == 7)
				continue;
			if (!v && !(v = verdict_new(a, RULE_ASYNC_ERROR, cid, FR_UNK, NULL)))
				return -ENOMEM;
			who_member(a, v, c->members.v[i]);
			if (!v->ev.async.err)
				v->ev.async.err = m->async_error;
		}
		if (!v)
			continue;
		who_sort(v);
		v->ev.async.aborted = c->aborted;
	}
	return 0;
}

/* which rule a signature difference falls under, most significant field first */
static int sig_rule(const struct sig *x, const struct sig *y)
{
	if (x->op != y->op)
		return RULE_TYPE;
	if (x->count != y->count || !size_eq(x->in_size, y->in_size) ||
	    !size_eq(x->out_size, y->out_size))
		return RULE_SIZE;
	if (x->dtype != y->dtype)
		return RULE_DTYPE;
	if (x->redop != y->redop)
		return RULE_REDOP;
	if (x->root != y->root)
		return RULE_ROOT;
	return -1;
}

static int cmp_group(const void *x, const void *y)
{
	const struct sig_group_ev *p = x, *q = y;

	if (p->n != q->n)
		return p->n > q->n ? -1 : 1;
	/* equal sizes: a stable, input-order-free order */
	if (p->sig.op != q->sig.op)
		return p->sig.op - q->sig.op;
	if (p->sig.count != q->sig.count)
		return p->sig.count < q->sig.count ? -1 : 1;
	if (p->sig.dtype != q->sig.dtype)
		return p->sig.dtype - q->sig.dtype;
	if (p->sig.redop != q->sig.redop)
		return p->sig.redop - q->sig.redop;
	return p->sig.root - q->sig.root;
}

#define LOST_SHIFT_MAX	3	/* entries a dropping recorder may have lost in a row */

static bool sig_same(const struct sig *x, const struct sig *y)
{
	return sig_rule(x, y) < 0;
}

/* member mi's signature at comm c's agg k: that of the group it is listed in; else the
 * first-seen one's (sig0) when every other group is listed in full or it is listed there;
 * NULL when that cannot be told (a list cut) */
static const struct sig *sig_of_member(const struct fr_analysis *a, const struct comm *c, int k,
				       int mi)
{
	const struct seq_agg *g = &a->aggs[c->aggs.v[k]];
	const struct agg_extra *x = g->extra >= 0 ? &a->extras[g->extra] : NULL;
	bool cut = x && x->other_n;

	for (int i = 0; x && i < x->nr_groups; i++) {
		cut |= x->groups[i].nr_listed != x->groups[i].n;
		for (int j = 0; j < x->groups[i].nr_listed; j++)
			if (x->groups[i].members[j] == mi)
				return &x->groups[i].sig;
	}
	if (!cut)
		return &g->sig0;
	for (int i = 0; i < g->n0 && i < 2; i++)
		if (g->first0[i] == mi)
			return &g->sig0;
	for (int i = 0; x && i < x->nr_list0; i++)
		if (x->list0[i] == mi)
			return &g->sig0;
	return NULL;
}

/* the signature most members of agg g used (its first-seen one on a tie); *nr (may be NULL)
 * how many used it */
static const struct sig *majority_sig_n(const struct fr_analysis *a, const struct seq_agg *g,
					int *nr)
{
	const struct agg_extra *x = g->extra >= 0 ? &a->extras[g->extra] : NULL;
	const struct sig *best = &g->sig0;
	int n = g->n0;

	for (int i = 0; x && i < x->nr_groups; i++)
		if (x->groups[i].n > n) {
			n = x->groups[i].n;
			best = &x->groups[i].sig;
		}
	if (nr)
		*nr = n;
	return best;
}

static const struct sig *majority_sig(const struct fr_analysis *a, const struct seq_agg *g)
{
	return majority_sig_n(a, g, NULL);
}

#define LOST_CONFIRM	2	/* later seqs that must show the same shift */

/* mi's signatures from agg k on are the majority's d seqs later, at k and at least
 * LOST_CONFIRM later seqs, none against it; and they differ from the majority's at k and the
 * LOST_CONFIRM seqs after it (in a loop of period d, a one-off mismatch at k would match d
 * seqs later, and the seqs after it anyway: a real shift keeps disagreeing) */
static bool shifted_from(const struct fr_analysis *a, const struct comm *c, int k, int mi, int d,
			 int maj_n)
{
	int seen = 0;

	for (int t = 0; k + t + d < c->aggs.n; t++) {
		const struct seq_agg *g = &a->aggs[c->aggs.v[k + t]];
		const struct sig *sg;
		bool hit = false, ended = false;

		/* past its own newest entry: nothing of it to hold against theirs */
		if (a->members[mi].newest_seq == FR_UNK || g->seq > a->members[mi].newest_seq)
			break;
		/* past the majority's newest entries (its recorder counted ahead of theirs, or its
		 * dump came later): what is left is its own, judged on the seqs before */
		if (g->entered < maj_n)
			break;
		sg = sig_of_member(a, c, k + t, mi);
		if (g->seq != a->aggs[c->aggs.v[k]].seq + t || !sg ||
		    (t <= LOST_CONFIRM && sig_same(sg, majority_sig(a, g))))
			return false;
		/* the shift only grows: more entries lost later (up to LOST_SHIFT_MAX) */
		for (int dd = d; dd <= LOST_SHIFT_MAX && k + t + dd < c->aggs.n && !hit; dd++) {
			const struct seq_agg *later = &a->aggs[c->aggs.v[k + t + dd]];

			if (later->seq != g->seq + dd)
				continue;
			if (later->entered < maj_n) {
				ended = true;
				break;
			}
			if (sig_same(sg, majority_sig(a, later))) {
				hit = true;
				d = dd;
			}
		}
		if (ended)
			break;
		if (!hit)
			return k + t + d >= c->aggs.n && seen > LOST_CONFIRM;
		seen++;
	}
	return seen > LOST_CONFIRM;
}

/* whether agg o's majority signature can be held against a rank's: at least two ranks used
 * it, and more than twice as many as all the others (the newest seqs are held by fewer dumps,
 * those taken later, and then agree) */
static bool comparable(const struct fr_analysis *a, const struct seq_agg *o)
{
	int n;

	majority_sig_n(a, o, &n);
	return n >= 2 && 3 * n > 2 * o->entered;
}

/* mi's signature at agg k is the majority's at a seq at most LOST_SHIFT_MAX away (either way),
 * where enough of the majority's entries are (comparable()): a collective the others ran
 * too, counted at another seq. The distance, or 0. */
static int nearby_shift(const struct fr_analysis *a, const struct comm *c, int k, int mi)
{
	const struct sig *sg = sig_of_member(a, c, k, mi);
	int64_t seq = a->aggs[c->aggs.v[k]].seq;

	for (int d = 1; sg && d <= LOST_SHIFT_MAX; d++)
		for (int sgn = -1; sgn <= 1; sgn += 2) {
			int j = k + sgn * d;
			const struct seq_agg *o;

			if (j < 0 || j >= c->aggs.n)
				continue;
			o = &a->aggs[c->aggs.v[j]];
			if (o->seq == seq + sgn * d && comparable(a, o) &&
			    sig_same(sg, majority_sig(a, o)))
				return d;
		}
	return 0;
}

/* mi's signature at agg k is the majority's at seq + d, or that seq cannot tell (no entries
 * there, too few to hold against it, its list cut) */
static bool shift_holds(const struct fr_analysis *a, const struct comm *c, int k, int mi, int d)
{
	const struct seq_agg *g = &a->aggs[c->aggs.v[k]], *o;
	const struct sig *sg = sig_of_member(a, c, k, mi);

	if (!sg || k + d >= c->aggs.n)
		return true;
	o = &a->aggs[c->aggs.v[k + d]];
	if (o->seq != g->seq + d || !comparable(a, o))
		return true;
	return sig_same(sg, majority_sig(a, o));
}

/* mi still disagrees with the majority at the seq after agg k (entries lost shift every later
 * seq; a one-off mismatch, a real one, agrees again): false when it does not, or when that
 * seq holds no entry of it or too few of the others' (comparable()) */
static bool still_off_after(const struct fr_analysis *a, const struct comm *c, int k, int mi)
{
	const struct seq_agg *g, *next;
	const struct sig *sg;

	if (k + 1 >= c->aggs.n)
		return false;
	g = &a->aggs[c->aggs.v[k]];
	next = &a->aggs[c->aggs.v[k + 1]];
	if (next->seq != g->seq + 1 || !comparable(a, next) || a->members[mi].newest_seq == FR_UNK ||
	    a->members[mi].newest_seq <= g->seq)
		return false;
	sg = sig_of_member(a, c, k + 1, mi);
	return sg && !sig_same(sg, majority_sig(a, next));
}

/* A mismatch that lost entries explain: every minority rank's recorder dropped events (a
 * count it knows), and the collective it disagrees on completed, so it really ran with its
 * peers, which a real mismatch never does: the seqs are counted without the entries the
 * recorder lost (one recorder of a whole host's processes, its ring overflowing, loses
 * different calls of each). Either each minority rank's signatures, from this seq on, are the
 * majority's d seqs later (1 <= d <= 3) at every seq both hold (3 at least): its recorder lost
 * d of its calls, and the shift holds for its later seqs too, also those still in flight
 * (est[member] = d); or, at this seq alone, its collective is one the majority ran at most 3
 * seqs away and it disagrees at the next seq too (the majority lost entries, or it lost some
 * and more were counted since): est[member] = -d, judged again at each later seq (in flight
 * too, once so seen).
 * "Completed": every rank that entered it completed it (needed for a lasting shift); for
 * this seq alone, a majority rank completed it (a collective needs every member: the minority
 * rank took part in the majority's, its own entry was counted at another seq) or the rank
 * itself completed it. A rank that
 * really skipped a collective, or called another one, has shifted seqs too, but then it and
 * its peers do not complete the ones they disagree on. The largest distance, or 0. */
static int lost_entries_shift(const struct fr_analysis *a, const struct comm *c, int k,
			      const struct sig_group_ev *gv, int ng, int8_t *est)
{
	const struct seq_agg *g = &a->aggs[c->aggs.v[k]];
	bool done = g->completed == g->entered;
	/* more completed than all but the majority entered: a majority rank completed it, which
	 * a collective needs every member for */
	bool maj_done = g->completed > g->entered - gv[0].n;
	int shift = 0;

	if (gv[1].n == gv[0].n)
		return 0;
	for (int i = 1; i < ng; i++) {
		if (gv[i].nr_listed != gv[i].n)
			return 0;
		for (int j = 0; j < gv[i].nr_listed; j++) {
			int mi = gv[i].members[j], d = est[mi] > 0 ? est[mi] : 0;
			const struct member *m = &a->members[mi];
			const struct proc *p = &a->procs[m->proc];
			bool own_done = m->newest_completed != FR_UNK && m->newest_completed >= g->seq;

			if (p->events_dropped == FR_UNK || p->events_dropped <= 0)
				return 0;
			/* a lasting shift is held to at each later seq too: its signature the
			 * majority's d seqs on, where that seq can tell */
			if (d && !shift_holds(a, c, k, mi, d))
				d = 0;
			if (!d && done) {
				for (d = 1; d <= LOST_SHIFT_MAX && !shifted_from(a, c, k, mi, d, gv[0].n);
				     d++)
					;
				if (d <= LOST_SHIFT_MAX)
					est[mi] = (int8_t)d;
				else
					d = 0;
			}
			/* a rank already seen counted off by lost entries: its collectives still in
			 * flight are the others' nearby ones as well */
			if (!d && (maj_done || own_done || est[mi] != 0) &&
			    (est[mi] < 0 || still_off_after(a, c, k, mi)) &&
			    (d = nearby_shift(a, c, k, mi)))
				est[mi] = (int8_t)-d;
			if (!d)
				return 0;
			shift = d > shift ? d : shift;
		}
	}
	return shift;
}

/* one note per comm: the ranks whose mismatches lost entries explain, from the first seq */
static int note_lost_entries(struct fr_analysis *a, int cid, int64_t seq, const int8_t *est,
			     int shift)
{
	const struct comm *c = &a->comms[cid];
	char ranks[128] = "";
	int64_t dropped = 0;
	size_t len = 0;
	char *line;
	int n = 0;

	for (int i = 0; i < c->members.n; i++) {
		const struct member *m = &a->members[c->members.v[i]];

		if (!est[c->members.v[i]])
			continue;
		if (n < 8 && len < sizeof(ranks))
			len += snprintf(ranks + len, sizeof(ranks) - len, "%s%" PRId64, n ? "," : "",
					m->rank);
		if (a->procs[m->proc].events_dropped > dropped)
			dropped = a->procs[m->proc].events_dropped;
		n++;
	}
	if (asprintf(&line, "comm %s: rank%s %s%s disagree%s with the others from seq %" PRId64
		     " on, %s entries being the others' %s%d seq%s away, and %s recorder dropped %" PRId64
		     " events: entries lost (the seqs counted without them), not a mismatch (the "
		     "collectives completed); not judged", short_id(c->id), n == 1 ? "" : "s", ranks,
		     n > 8 ? " ..." : "", n == 1 ? "s" : "", seq, n == 1 ? "its" : "their",
		     shift > 1 ? "up to " : "", shift, shift == 1 ? "" : "s",
		     n == 1 ? "its" : "their", dropped) < 0)
		line = NULL;
	return analysis_note(a, line);
}

static int placed_count(const struct fr_analysis *a, const struct comm *c)
{
	int n = 0;

	for (int i = 0; i < c->members.n; i++)
		n += a->members[c->members.v[i]].placed;
	return n;
}

/* A tie at a seq few ranks reached (fewer than half the comm's, none of them done with it),
 * every tied rank's recorder having dropped events: the ranks far ahead of the others whose
 * seqs lost entries put in disagreement, nobody to side with: said, not judged. */
static bool thin_tie(const struct fr_analysis *a, const struct comm *c, const struct seq_agg *g,
		     const struct sig_group_ev *gv, int ng)
{
	if (gv[1].n != gv[0].n || g->completed || 2 * g->entered >= placed_count(a, c))
		return false;
	for (int i = 0; i < ng; i++) {
		if (gv[i].nr_listed != gv[i].n)
			return false;
		for (int j = 0; j < gv[i].nr_listed; j++) {
			const struct proc *p = &a->procs[a->members[gv[i].members[j]].proc];

			if (p->events_dropped == FR_UNK || p->events_dropped <= 0)
				return false;
		}
	}
	return true;
}

static int note_thin_tie(struct fr_analysis *a, const struct comm *c, const struct seq_agg *g)
{
	char *line;

	if (asprintf(&line, "comm %s: the %d ranks that reached seq %" PRId64 " disagree on it, "
		     "none done with it, the others not there yet, and their recorders dropped "
		     "events (entries lost shift seqs): no side to take; not judged",
		     short_id(c->id), g->entered, g->seq) < 0)
		line = NULL;
	return analysis_note(a, line);
}

static int rule_signatures(struct fr_analysis *a)
{
	for (int ci = 0; ci < a->nr_comms; ci++) {
		int cid = a->comm_order[ci];
		struct comm *c = &a->comms[cid];
		int first_idx[RULE__COUNT];
		int64_t lost_seq = FR_UNK;
		int lost_shift = 0, thin_noted = 0;
		int8_t *est = calloc(a->nr_members + 1, 1);	/* lost_entries_shift's */

		if (!est)
			return -ENOMEM;
		for (int r = 0; r < RULE__COUNT; r++)
			first_idx[r] = -1;
		for (int k = 0; k < c->aggs.n; k++) {
			int ai = c->aggs.v[k];
			struct seq_agg *g = &a->aggs[ai];
			struct agg_extra *x;
			struct sig_group_ev gv[SIG_GROUPS], *g0 = &gv[0];
			int ng, rule = RULE__COUNT, shift;
			struct verdict *v;

			if (g->extra < 0)
				continue;
			x = &a->extras[g->extra];
			if (!x->nr_groups)
				continue;
			g0->sig = g->sig0;
			g0->n = g->n0;
			g0->nr_listed = 0;
			for (int i = 0; i < 2 && i < g->n0; i++)
				g0->members[g0->nr_listed++] = g->first0[i];
			for (int i = 0; i < x->nr_list0; i++)
				g0->members[g0->nr_listed++] = x->list0[i];
			for (int i = 0; i < x->nr_groups; i++) {
				gv[i + 1].sig = x->groups[i].sig;
				gv[i + 1].n = x->groups[i].n;
				gv[i + 1].nr_listed = x->groups[i].nr_listed;
				memcpy(gv[i + 1].members, x->groups[i].members,
				       x->groups[i].nr_listed * sizeof(int));
			}
			ng = x->nr_groups + 1;
			qsort(gv, ng, sizeof(gv[0]), cmp_group);
			for (int i = 1; i < ng; i++) {
				int r = sig_rule(&gv[i].sig, &gv[0].sig);

				if (r >= 0 && r < rule)
					rule = r;
			}
			if (rule == RULE__COUNT)
				continue;
			if (thin_tie(a, c, g, gv, ng)) {
				if (!thin_noted++ && note_thin_tie(a, c, g)) {
					free(est);
					return -ENOMEM;
				}
				continue;
			}
			/* said once per comm, at its first such seq */
			if ((shift = lost_entries_shift(a, c, k, gv, ng, est))) {
				lost_seq = lost_seq == FR_UNK ? g->seq : lost_seq;
				lost_shift = shift > lost_shift ? shift : lost_shift;
				continue;
			}
			/* one verdict per (comm, rule): later seqs are counted in it */
			if (first_idx[rule] >= 0) {
				a->verdicts[first_idx[rule]].also_seqs++;
				a->verdicts[first_idx[rule]].also_last = g->seq;
				continue;
			}
			if (!(v = verdict_new(a, rule, cid, g->seq, fr_op_name(gv[0].sig.op)))) {
				free(est);
				return -ENOMEM;
			}
			first_idx[rule] = v->order;
			v->agg = ai;
			v->ev.sig.field = rule;
			v->ev.sig.tie = gv[1].n == gv[0].n;
			v->ev.sig.ng = ng;
			v->ev.sig.other_n = x->other_n;
			v->ev.sig.entered = g->entered;
			memcpy(v->ev.sig.gv, gv, ng * sizeof(gv[0]));
			/* the minority is the culprit; on a tie every side is listed */
			for (int i = v->ev.sig.tie ? 0 : 1; i < ng; i++)
				for (int j = 0; j < gv[i].nr_listed; j++)
					who_member(a, v, gv[i].members[j]);
			who_sort(v);
			check_dropped(a, v);
			check_wrap(a, v, cid, g->seq);
		}
		if (lost_seq != FR_UNK && note_lost_entries(a, cid, lost_seq, est, lost_shift)) {
			free(est);
			return -ENOMEM;
		}
		free(est);
	}
	return 0;
}

static void p2p_side_idx(const struct p2p_side *s, bool absolute, int64_t *maxidx)
{
	*maxidx = absolute ? s->total - 1 : s->total - s->done - 1;
}

static const struct p2p_op *p2p_at(const struct p2p_side *s, bool absolute, int64_t idx)
{
	int64_t k = absolute ? idx : idx + s->done;

	for (int i = 0; i < s->nr_kept; i++)
		if (s->kept[i].k == k)
			return &s->kept[i];
	return NULL;
}

static int cmp_chan(const void *x, const void *y, void *arg)
{
	const struct fr_analysis *a = arg;
	const struct p2p_chan *p = &a->chans[*(const int *)x], *q = &a->chans[*(const int *)y];
	int c = strcmp(a->comms[p->comm].id, a->comms[q->comm].id);

	if (c)
		return c;
	if (p->src != q->src)
		return p->src - q->src;
	return p->dst - q->dst;
}

/* How long the peer's dump (proc pp, the side that never posted the match) is proven to have
 * come after the lone op was posted: one clock on one host; across hosts, causally: the peer
 * completed the channel's op before the lone one (prev_p) no earlier than the lone side had
 * posted that one (prev_l), and the lone side posted the lone op (prev_l's creation + its
 * step) no later than that completion + the step, so the peer's dump came at least (its dump
 * - that completion) - the step after it. FR_UNK: nothing proves it. */
static int64_t p2p_lone_lag(const struct proc *lp, const struct proc *pp,
			    const struct p2p_op *lone,
			    const struct p2p_op *prev_l, const struct p2p_op *prev_p)
{
	int64_t lag = FR_UNK;

	if (pp->dump_time_ns == FR_UNK || lone->created == FR_UNK)
		return FR_UNK;
	if (pp->host_id == lp->host_id)
		lag = ns_diff(pp->dump_time_ns, lone->created);
	if (prev_l && prev_p && prev_p->state == FR_ST_COMPLETED && prev_p->done != FR_UNK &&
	    prev_l->created != FR_UNK) {
		int64_t b = ns_diff(ns_diff(pp->dump_time_ns, prev_p->done),
				    ns_diff(lone->created, prev_l->created));

		if (lag == FR_UNK || b > lag)
			lag = b;
	}
	return lag;
}

static int rule_p2p(struct fr_analysis *a)
{
	int *order = malloc((a->nr_chans + 1) * sizeof(int));
	int last_comm = -1, per_comm = 0, suppressed = 0, last_v = -1;

	if (!order)
		return -ENOMEM;
	for (int i = 0; i < a->nr_chans; i++)
		order[i] = i;
	qsort_r(order, a->nr_chans, sizeof(int), cmp_chan, a);
	for (int oi = 0; oi < a->nr_chans; oi++) {
		struct p2p_chan *ch = &a->chans[order[oi]];
		struct comm *c = &a->comms[ch->comm];
		struct p2p_side *S = &ch->send, *R = &ch->recv;
		int sm, rm;
		bool absolute;
		int64_t maxS, maxR, common;
		const struct p2p_op *bad_s = NULL, *bad_r = NULL, *lone = NULL;
		bool lone_send = false;
		struct verdict *v;

		if (ch->comm != last_comm) {
			last_comm = ch->comm;
			per_comm = 0;
		}
		/* both ends must have a dump, or missing_dump already says it */
		sm = comm_member_at(a, c, ch->src);
		rm = comm_member_at(a, c, ch->dst);
		/* a side with no ops has no member yet: the rank never posted one */
		if (sm < 0 || rm < 0 || (S->member >= 0 && S->member != sm) ||
		    (R->member >= 0 && R->member != rm))
			continue;
		/* an end whose comm init failed never posts anything: comm_init_failed says it */
		if (a->members[sm].init_failed || a->members[rm].init_failed)
			continue;
		/* whole histories: pair by absolute index; else the newest completed ops pair */
		absolute = !a->procs[a->members[sm].proc].wrapped &&
			   !a->procs[a->members[rm].proc].wrapped &&
			   !a->members[sm].partial && !a->members[rm].partial;
		p2p_side_idx(S, absolute, &maxS);
		p2p_side_idx(R, absolute, &maxR);
		common = maxS < maxR ? maxS : maxR;
		/* relative pairing holds for the ops still pending on both sides only: completed
		 * ones pair by their newest only when both dumps are of one moment, and they are
		 * not (fr_timing.c) */
		for (int64_t idx = common; idx > common - P2P_KEEP && !bad_s &&
		     (absolute || idx >= 0); idx--) {
			const struct p2p_op *s = p2p_at(S, absolute, idx), *r = p2p_at(R, absolute, idx);

			if (s && r && (s->count != r->count || s->dtype != r->dtype)) {
				bad_s = s;
				bad_r = r;
			}
		}
		if (!bad_s && maxS != maxR) {
			lone_send = maxS > maxR;
			lone = lone_send ? p2p_at(S, absolute, maxR + 1) : p2p_at(R, absolute, maxS + 1);
		}
		if (!bad_s && maxS == maxR)
			continue;
		/* an unmatched op its peer's dump does not show: completed, the peer had posted
		 * the match (its dump is older); waiting no longer than the threshold on its own
		 * clock, in flight */
		if (!bad_s && !lone && absolute &&
		    (maxS > maxR ? S->done > R->total : R->done > S->total))
			continue;
		if (!bad_s && lone) {
			int pm = lone_send ? rm : sm;
			const struct proc *lp = &a->procs[a->members[lone_send ? sm : rm].proc];
			const struct proc *pp = &a->procs[a->members[pm].proc];
			int64_t lidx = lone_send ? maxR + 1 : maxS + 1, lag;
			int err;

			if (lone->state == FR_ST_COMPLETED)
				continue;
			if (lone->created != FR_UNK && lp->dump_time_ns != FR_UNK &&
			    ns_diff(lp->dump_time_ns, lone->created) <= comm_skew(a, ch->comm))
				continue;
			/* waiting past the threshold at its own dump: the job looks hung here */
			if (lone->created != FR_UNK && lp->dump_time_ns != FR_UNK)
				a->hang_seen = true;
			/* the peer never posted the match only if its dump came after the lone op
			 * was posted (dumps are not of one moment): else its dump may be older, and
			 * its host is to be dumped again; no rank is blamed */
			lag = p2p_lone_lag(lp, pp, lone,
					   p2p_at(lone_send ? S : R, absolute, lidx - 1),
					   p2p_at(lone_send ? R : S, absolute, lidx - 1));
			/* dumps without times (PyTorch's own) cannot be judged so: the rings
			 * decide, as PyTorch's analyzer has them do */
			if ((pp->dump_time_ns != FR_UNK && lone->created != FR_UNK) &&
			    (lag == FR_UNK || lag <= comm_skew(a, ch->comm))) {
				if ((err = timing_redump_p2p(a, a->members[pm].proc, ch->comm,
							     lone->seq, ch->src, ch->dst,
							     lone_send))) {
					free(order);
					return err;
				}
				continue;
			}
		}
		if (++per_comm > MAX_P2P_VERDICTS_PER_COMM) {
			suppressed++;
			continue;
		}
		if (!(v = verdict_new(a, RULE_P2P, ch->comm,
				      bad_s ? bad_s->seq : lone ? lone->seq : FR_UNK,
				      bad_s ? "send" : lone_send ? "send" : "recv"))) {
			free(order);
			return -ENOMEM;
		}
		last_v = v->order;
		v->ev.p2p.chan = order[oi];
		v->ev.p2p.sm = sm;
		v->ev.p2p.rm = rm;
		v->ev.p2p.absolute = absolute;
		v->ev.p2p.max_s = maxS;
		v->ev.p2p.max_r = maxR;
		v->ev.p2p.bad = bad_s != NULL;
		v->ev.p2p.lone_send = lone_send;
		v->ev.p2p.has_lone = lone != NULL;
		if (bad_s) {
			v->ev.p2p.s = *bad_s;
			v->ev.p2p.r = *bad_r;
			who_member(a, v, sm);
			who_member(a, v, rm);
		} else {
			if (lone)
				v->ev.p2p.lone = *lone;
			who_member(a, v, lone_send ? rm : sm);
		}
		who_sort(v);
		check_dropped(a, v);
	}
	/* said in the last p2p verdict rather than adding noise */
	if (suppressed && last_v >= 0)
		a->verdicts[last_v].ev.p2p.suppressed = suppressed;
	free(order);
	return 0;
}

static int cmp_stuck(const void *x, const void *y)
{
	const struct stuck_call *p = x, *q = y;
	int c = strcmp(p->api, q->api);

	if (c)
		return c;
	if (p->proc != q->proc)
		return p->proc - q->proc;
	return p->call - q->call;
}

/* in-calls past the threshold whose return its recorder may have dropped: one note */
static int note_lost_returns(struct fr_analysis *a, int n, int pi, int i, int64_t dur)
{
	const struct proc *p = &a->procs[pi];
	const struct fr_in_call *ic = &p->in_calls[i];
	char who[64], *line;

	if (p->global_rank != FR_UNK)
		snprintf(who, sizeof(who), "rank %" PRId64, p->global_rank);
	else
		snprintf(who, sizeof(who), "pid %" PRId64, p->pid);
	if (asprintf(&line, "%d call%s past the stuck threshold by the rings (%s inside %s for "
		     "%.1f s%s) whose recorder dropped events since %s entered (%" PRId64 "%s): "
		     "%s return may be among them; not judged (the stacks say where the threads "
		     "are)", n, n == 1 ? "" : "s", who, ic->api, dur / 1e9, n > 1 ? ", ..." : "",
		     n == 1 ? "it" : "they", ic->dropped_since, n > 1 ? " for that one" : "",
		     n == 1 ? "its" : "their") < 0)
		line = NULL;
	return analysis_note(a, line);
}

/* The dump's own snapshot, taken after ic entered, shows its thread still inside that API
 * without progress, and the thread has no later open call: the call is open whatever the
 * recorder dropped. */
static bool seen_inside(const struct proc *p, const struct fr_in_call *ic)
{
	const struct psnap *s = &p->snap;

	if (ic->entered_ns == FR_UNK)
		return false;
	/* the process called NCCL since (its newest entry is newer): the call returned, the
	 * stack shows a later one (a process whose other thread issues NCCL calls loses this
	 * evidence, not judged as before) */
	if (p->has_last && p->last_created != FR_UNK && p->last_created > ic->entered_ns)
		return false;
	/* a later call of its thread still open: the stack shows that one (this one's return
	 * is among those dropped) */
	for (int i = 0; i < p->nr_in_calls; i++)
		if (p->in_calls[i].tid == ic->tid && p->in_calls[i].entered_ns != FR_UNK &&
		    p->in_calls[i].entered_ns > ic->entered_ns)
			return false;
	return s->present && s->tid != FR_UNK && s->tid == ic->tid && s->time_ns != FR_UNK &&
	       s->time_ns > ic->entered_ns && s->api[0] && !strcmp(s->api, ic->api) &&
	       s->progress != FR_PROG_YES;
}

static int rule_stuck(struct fr_analysis *a)
{
	struct stuck_call *calls = NULL;
	int n = 0, cap = 0, first_v = a->nr_verdicts, lost = 0, lost_pi = -1, lost_i = -1;
	int64_t lost_dur = 0;

	for (int pi = 0; pi < a->nr_procs; pi++) {
		struct proc *p = &a->procs[pi];

		for (int i = 0; i < p->nr_in_calls; i++) {
			struct fr_in_call *ic = &p->in_calls[i];
			int64_t dur;

			if (ic->entered_ns == FR_UNK || p->dump_time_ns == FR_UNK)
				continue;
			dur = ns_diff(p->dump_time_ns, ic->entered_ns);
			if (dur <= a->opts.stuck_ns)
				continue;
			/* its recorder lost events since it entered: the return may be one of
			 * them, the call long over (said once, not judged), unless the stack
			 * shows the thread still in it */
			if (ic->dropped_since > 0 && !seen_inside(p, ic)) {
				if (!lost++)
					lost_pi = pi, lost_i = i, lost_dur = dur;
				continue;
			}
			if (ARRAY_RESERVE(calls, cap, n + 1, 16))
				goto nomem;
			calls[n++] = (struct stuck_call){ ic->api, pi, i, dur };
		}
	}
	if (lost && note_lost_returns(a, lost, lost_pi, lost_i, lost_dur))
		goto nomem;
	if (n)
		a->hang_seen = true;
	if (n > 1)
		qsort(calls, n, sizeof(*calls), cmp_stuck);
	for (int i = 0; i < n;) {
		int j = i, nprocs = 0;
		int64_t mind = calls[i].dur, maxd = calls[i].dur;
		const struct fr_in_call *ic0 = &a->procs[calls[i].proc].in_calls[calls[i].call];
		bool same_site = true;
		struct verdict *v;

		while (j < n && !strcmp(calls[j].api, calls[i].api)) {
			const struct fr_in_call *ic = &a->procs[calls[j].proc].in_calls[calls[j].call];

			if (calls[j].dur < mind)
				mind = calls[j].dur;
			if (calls[j].dur > maxd)
				maxd = calls[j].dur;
			if (strcmp(ic->comm_id, ic0->comm_id) || ic->seq != ic0->seq)
				same_site = false;
			if (j == i || calls[j].proc != calls[j - 1].proc)
				nprocs++;
			j++;
		}
		v = verdict_new(a, RULE_STUCK, -1, FR_UNK, calls[i].api[0] ? calls[i].api : "?");
		if (!v)
			goto nomem;
		if (same_site && ic0->comm_id[0]) {
			v->comm = comm_find(a, ic0->comm_id);
			v->seq = ic0->seq;
		}
		for (int k = i; k < j; k++) {
			/* the comm rank when the call names a comm this proc is in */
			int64_t crank = FR_UNK;
			const struct fr_in_call *ic = &a->procs[calls[k].proc].in_calls[calls[k].call];

			if (v->comm >= 0 && ic->comm_id[0]) {
				struct comm *c = &a->comms[v->comm];

				for (int m = 0; m < c->members.n; m++)
					if (a->members[c->members.v[m]].proc == calls[k].proc)
						crank = a->members[c->members.v[m]].rank;
			}
			who_add(v, a->procs[calls[k].proc].global_rank, crank, calls[k].proc);
		}
		who_sort(v);
		v->ev.stuck.calls = malloc((j - i) * sizeof(*calls));
		if (!v->ev.stuck.calls)
			goto nomem;
		memcpy(v->ev.stuck.calls, &calls[i], (j - i) * sizeof(*calls));
		v->ev.stuck.n = j - i;
		v->ev.stuck.nprocs = nprocs;
		v->ev.stuck.mind = mind;
		v->ev.stuck.maxd = maxd;
		check_dropped(a, v);
		i = j;
	}
	/* fewest ranks first (a lone stuck rank is the suspect), then the longest */
	for (int i = first_v; i < a->nr_verdicts; i++)
		for (int k = i + 1; k < a->nr_verdicts; k++) {
			struct verdict *x = &a->verdicts[i], *y = &a->verdicts[k];

			if (y->ev.stuck.nprocs < x->ev.stuck.nprocs ||
			    (y->ev.stuck.nprocs == x->ev.stuck.nprocs &&
			     y->ev.stuck.maxd > x->ev.stuck.maxd)) {
				struct verdict tmp = *x;
				int ox = x->order, oy = y->order;

				*x = *y;
				*y = tmp;
				x->order = ox;
				y->order = oy;
			}
		}
	free(calls);
	return 0;
nomem:
	free(calls);
	return -ENOMEM;
}

/* An arrival skew of collective g: from the ranks' own waits (completion - creation, each on
 * its host's clock) when every rank completed it — the last to enter waited least; from
 * creation times only when the first and the last rank share a host (one clock): hosts'
 * clocks are not comparable. FR_UNK when neither tells; *late the member that came last. */
static int64_t agg_skew(const struct fr_analysis *a, const struct seq_agg *g, int placed,
			int *late, bool *waits)
{
	if (g->entered < placed)
		return FR_UNK;
	if (g->completed == g->entered && g->nr_waits == g->entered && g->min_wait != FR_UNK) {
		*late = g->minw_m;
		*waits = true;
		return g->max_wait - g->min_wait;
	}
	if (g->min_created == FR_UNK || g->max_created == FR_UNK || g->min_m < 0 || g->max_m < 0 ||
	    a->procs[a->members[g->min_m].proc].host_id !=
	    a->procs[a->members[g->max_m].proc].host_id)
		return FR_UNK;
	*late = g->max_m;
	*waits = false;
	return ns_diff(g->max_created, g->min_created);
}

#define LATE_RECUR	3	/* separate late entries of one rank that blame it */

/* The longest any rank but late had waited in collective g at its dump, g being its oldest
 * one not completed; FR_UNK when no such rank. A dump taken while the job runs finds the
 * ranks that entered the newest collective last still in it, for a moment: no one was left
 * waiting unless that wait passed the comm's threshold. */
static int64_t left_waiting(const struct fr_analysis *a, const struct comm *c,
			    const struct seq_agg *g, int late)
{
	int64_t longest = FR_UNK;

	for (int i = 0; i < c->members.n; i++) {
		int mi = c->members.v[i];
		int64_t w = mi == late || !a->members[mi].placed ? FR_UNK :
			    member_open_wait(a, mi, g->seq);

		if (w != FR_UNK && (longest == FR_UNK || w > longest))
			longest = w;
	}
	return longest;
}

/* One-off late entries that blame nobody: said in a note (one per comm), never dropped
 * silently. g: the first one; of: late entries on the comm in all. */
static int late_note(struct fr_analysis *a, int cid, const struct seq_agg *g, int m, int64_t skew,
		     bool waits, int of, int64_t went_to)
{
	const struct proc *p = &a->procs[a->members[m].proc];
	char who[96], *line = NULL;

	if (p->global_rank != FR_UNK)
		snprintf(who, sizeof(who), "rank %" PRId64, p->global_rank);
	else
		snprintf(who, sizeof(who), "pid %" PRId64 " on %s", p->pid == FR_UNK ? -1 : p->pid,
			 p->host);
	if (asprintf(&line, "comm %s: %s (host %s) entered %s seq %" PRId64 " %.3f s after the "
		     "%s rank (threshold %.3f s); every rank completed it and the job went on "
		     "(every rank entered seq %" PRId64 "): a stall, not a hang nor a straggler, "
		     "no rank blamed (%d late entr%s on this comm; late_arrival blames a rank "
		     "that leaves others waiting, or one late on %d separate occasions)",
		     short_id(a->comms[cid].id), who, p->host, fr_op_name(g->sig0.op), g->seq,
		     skew / 1e9, waits ? "earliest" : "first", comm_skew(a, cid) / 1e9, went_to, of,
		     of == 1 ? "y" : "ies", LATE_RECUR) < 0)
		line = NULL;
	return analysis_note(a, line);
}

/* A rank that entered a collective past the threshold after the others (skew from each rank's
 * own wait, or one host's clock). It blames that rank when its lateness matters to the job:
 * it left ranks waiting in the collective at their dumps past the threshold (the hang's
 * cause; preferred; the ranks that entered it last are still in it for a moment when the
 * dumps are taken while the job runs), or the job did not go past it (every rank's newest
 * collective, and no rank entered a later one: the dumps were taken on that wait), or the
 * same rank was late on LATE_RECUR separate occasions (a run of consecutive late
 * collectives, which one stall before enqueueing several makes, is one). A one-off
 * stall into a collective every rank completed, in a job that went on past it, is history:
 * said in a note, no rank blamed (a healthy job on an overloaded host has them). */
static int rule_late(struct fr_analysis *a)
{
	for (int ci = 0; ci < a->nr_comms; ci++) {
		int cid = a->comm_order[ci];
		struct comm *c = &a->comms[cid];
		int placed = placed_count(a, c), nr_over = 0, prev_late = -1, ep_first = -1;
		int stuck_k = -1, halt_k = -1, first_k = -1, first_m = -1, rec_m = -1;
		bool first_waits = false;
		int64_t full = INT64_MIN, first_skew = 0;
		int best = -1, best_m = -1;
		bool best_stuck = false, best_waits = false;
		int64_t best_skew = 0;
		struct seq_agg *g;
		struct verdict *v;

		/* the ranks' seqs across hosts fit another alignment as well: which entry of
		 * another host's rank is the same collective is not known, nor who entered it
		 * last (said in input_notes and by dumps_not_simultaneous) */
		if (placed < 2 || c->align_ambiguous)
			continue;
		/* the newest collective every rank entered: the job went past older ones */
		for (int k = 0; k < c->aggs.n; k++) {
			g = &a->aggs[c->aggs.v[k]];
			if (g->entered >= placed && g->seq > full)
				full = g->seq;
		}
		for (int i = 0; i < c->members.n; i++) {
			a->members[c->members.v[i]].nr_late_eps = 0;
			a->members[c->members.v[i]].late_first_agg = -1;
		}
		for (int k = 0; k <= c->aggs.n; k++) {
			int64_t skew = FR_UNK;
			bool waits = false;
			int late = -1;

			if (k < c->aggs.n) {
				g = &a->aggs[c->aggs.v[k]];
				skew = agg_skew(a, g, placed, &late, &waits);
				if (skew != FR_UNK && skew <= comm_skew(a, cid))
					skew = FR_UNK;
			}
			/* the run of late entries by one rank that ended at k - 1 */
			if (ep_first >= 0 && (skew == FR_UNK || late != prev_late)) {
				struct member *m = &a->members[prev_late];

				/* the newest collective of every rank: none went past it */
				if (k == c->aggs.n && a->aggs[c->aggs.v[k - 1]].seq >= full &&
				    halt_k < 0)
					halt_k = ep_first;
				if (!m->nr_late_eps++)
					m->late_first_agg = ep_first;
				ep_first = -1;
			}
			if (skew == FR_UNK) {
				prev_late = -1;
				continue;
			}
			nr_over++;
			if (ep_first < 0)
				ep_first = k;
			prev_late = late;
			if (first_k < 0) {
				first_k = k;
				first_m = late;
				first_skew = skew;
				first_waits = waits;
			}
			/* a late arrival that leaves others stuck explains the hang: prefer it; a
			 * late rank stays late for the collectives it enqueues right after, so the
			 * first one is the cause */
			if (stuck_k < 0 && g->completed < g->entered) {
				int64_t w = left_waiting(a, c, g, late);

				if (w != FR_UNK && w > comm_skew(a, cid))
					stuck_k = k;
			}
		}
		if (first_k < 0)
			continue;
		for (int i = 0; i < c->members.n; i++) {
			int mi = c->members.v[i];

			if (a->members[mi].nr_late_eps >= LATE_RECUR &&
			    (rec_m < 0 || a->members[mi].nr_late_eps > a->members[rec_m].nr_late_eps ||
			     (a->members[mi].nr_late_eps == a->members[rec_m].nr_late_eps &&
			      a->members[mi].late_first_agg < a->members[rec_m].late_first_agg)))
				rec_m = mi;
		}
		best = stuck_k >= 0 ? stuck_k : halt_k >= 0 ? halt_k :
		       rec_m >= 0 ? a->members[rec_m].late_first_agg : -1;
		if (best < 0) {
			if (late_note(a, cid, &a->aggs[c->aggs.v[first_k]], first_m, first_skew,
				      first_waits, nr_over, full))
				return -ENOMEM;
			continue;
		}
		g = &a->aggs[c->aggs.v[best]];
		best_skew = agg_skew(a, g, placed, &best_m, &best_waits);
		best_stuck = g->completed < g->entered;
		if (!(v = verdict_new(a, RULE_LATE, cid, g->seq, fr_op_name(g->sig0.op))))
			return -ENOMEM;
		v->agg = c->aggs.v[best];
		v->ev.late.skew = best_skew;
		v->ev.late.stuck = best_stuck;
		v->ev.late.nr_over = nr_over;
		v->ev.late.waits = best_waits;
		v->ev.late.eps = stuck_k < 0 && halt_k < 0 ? a->members[best_m].nr_late_eps : 0;
		/* lateness that recurs in a job that went on: a slow rank, not a hang's cause */
		v->medium = v->ev.late.eps > 0;
		who_member(a, v, best_m);
		check_dropped(a, v);
	}
	return 0;
}

static int cmp_i64(const void *x, const void *y)
{
	int64_t p = *(const int64_t *)x, q = *(const int64_t *)y;

	return p < q ? -1 : p > q;
}

#define STRAGGLER_MIN_SEQS	8	/* collectives every rank completed, at least */
#define STRAGGLER_SHARE		80	/* % of them it entered last */
#define STRAGGLER_MIN_LAG	1000000	/* ns: its median margin over the next-last rank */
#define STRAGGLER_MIN_STEP_PCT	5	/* ... and that share of its step */

/* its step on a comm: its own interval between collectives, FR_UNK */
static int64_t member_step(const struct member *tm)
{
	if (tm->first_created != FR_UNK && tm->prev_created != FR_UNK &&
	    tm->prev_seq != FR_UNK && tm->oldest_seq != FR_UNK && tm->prev_seq > tm->oldest_seq)
		return ns_diff(tm->prev_created, tm->first_created) /
		       (tm->prev_seq - tm->oldest_seq);
	return FR_UNK;
}

#define STRAGGLER_MEDIAN_PCT	15	/* by median: its median wait this far below its peers' */
#define STRAGGLER_MEDIAN_MIN	2000000	/* ns, and at least this */
#define STRAGGLER_MEDIAN_MADS	7	/* ... and this many times the spread of the medians */
#define STRAGGLER_MEDIAN_RANKS	32	/* ranks a spread is taken from, at least */

static int cmp_i32(const void *x, const void *y)
{
	int32_t p = *(const int32_t *)x, q = *(const int32_t *)y;

	return p < q ? -1 : p > q;
}

/* member mi's median wait (µs) over its kept waits in full aggregates, or -1 when fewer than
 * STRAGGLER_MIN_SEQS */
static int32_t member_median_wait(const struct fr_analysis *a, int mi, const uint8_t *full)
{
	const struct member *m = &a->members[mi];
	int32_t v[MEMBER_WAITS];
	int n = 0;

	for (uint32_t i = 0; m->waits && i < MEMBER_WAITS && i < m->waits_next; i++)
		if (full[m->waits[i].agg])
			v[n++] = m->waits[i].wait_us;
	if (n < STRAGGLER_MIN_SEQS)
		return -1;
	qsort(v, n, sizeof(*v), cmp_i32);
	return n % 2 ? v[n / 2] : (int32_t)(((int64_t)v[n / 2 - 1] + v[n / 2]) / 2);
}

/* A straggler the noise of a loaded machine hides from "last to enter": ranks that wait
 * seconds for a core enter last in turns, but the rank that sleeps before every step still
 * waits least on the median. Named when its median wait over the collectives every rank
 * completed (each rank's newest MEMBER_WAITS) is below the median of its peers' medians by
 * STRAGGLER_MEDIAN_PCT % and STRAGGLER_MEDIAN_MIN, by STRAGGLER_MEDIAN_MADS times the medians'
 * spread (their median absolute deviation; of STRAGGLER_MEDIAN_RANKS ranks at least: a few
 * medians' spread says nothing), and stands apart: the next-lowest rank is less than half as
 * far below. A healthy job whose ranks enter up to 3 steps apart at random has its lowest
 * median 35-50 % below the others' and up to 4.4 spreads (64 ranks, 32 collectives each);
 * 256 ranks on 2 cores with one rank sleeping 30 % of its step: 30 % and 8.9 spreads.
 * Medium: a median, not every step. *who the member, or -1. */
static int straggler_by_median(struct fr_analysis *a, const struct comm *c, int placed,
			       int *who, int64_t *own, int64_t *peers, int64_t *next)
{
	uint8_t *full = calloc(a->nr_aggs + 1, 1);
	int32_t *med = malloc((c->members.n + 1) * sizeof(*med)), *sorted = NULL;
	int n = 0, low = -1, low2 = -1;
	int64_t lag, mad;

	*who = -1;
	if (!full || !med)
		goto nomem;
	for (int k = 0; k < c->aggs.n; k++) {
		const struct seq_agg *g = &a->aggs[c->aggs.v[k]];

		full[c->aggs.v[k]] = g->entered >= placed && g->completed == g->entered &&
				     g->nr_waits == g->entered;
	}
	for (int i = 0; i < c->members.n; i++) {
		int mi = c->members.v[i];

		if (!a->members[mi].placed)
			continue;
		if ((med[n] = member_median_wait(a, mi, full)) < 0)
			goto out;	/* a rank with too few: no median of all */
		if (low < 0 || med[n] < med[low]) {
			low2 = low;
			low = n;
		} else if (low2 < 0 || med[n] < med[low2]) {
			low2 = n;
		}
		n++;
	}
	if (n < STRAGGLER_MEDIAN_RANKS || !(sorted = malloc(n * sizeof(*sorted))))
		goto out;
	memcpy(sorted, med, n * sizeof(*sorted));
	qsort(sorted, n, sizeof(*sorted), cmp_i32);
	*peers = 1000LL * sorted[n / 2];
	*own = 1000LL * med[low];
	*next = 1000LL * med[low2];
	/* the spread of the ranks' medians: median absolute deviation from theirs (sorted[] is
	 * overwritten as it goes: the median is the copy in *peers) */
	for (int i = 0; i < n; i++)
		sorted[i] = (int32_t)(med[i] > *peers / 1000 ? med[i] - *peers / 1000 :
				      *peers / 1000 - med[i]);
	qsort(sorted, n, sizeof(*sorted), cmp_i32);
	mad = 1000LL * (sorted[n / 2] > 0 ? sorted[n / 2] : 1);
	lag = *peers - *own;
	if (lag >= STRAGGLER_MEDIAN_MIN && lag * 100 >= *peers * STRAGGLER_MEDIAN_PCT &&
	    lag >= STRAGGLER_MEDIAN_MADS * mad && 2 * (*peers - *next) <= lag) {
		for (int i = 0, k = 0; i < c->members.n; i++) {
			if (!a->members[c->members.v[i]].placed)
				continue;
			if (k++ == low)
				*who = c->members.v[i];
		}
	}
out:
	free(full);
	free(med);
	free(sorted);
	return 0;
nomem:
	free(full);
	free(med);
	return -ENOMEM;
}

/* A rank that enters last collective after collective by a stable margin: from the ranks'
 * own waits (completion - creation on each one's clock), never comparing hosts' clocks. The
 * margin over the next-last rank is what it costs every peer per collective at least. */
static int rule_straggler(struct fr_analysis *a)
{
	for (int ci = 0; ci < a->nr_comms; ci++) {
		int cid = a->comm_order[ci];
		struct comm *c = &a->comms[cid];
		int placed = placed_count(a, c), of = 0, top = -1;
		int64_t *margins = NULL, *steps = NULL, lag, step = FR_UNK;
		int nm = 0, ns = 0;
		struct member *tm;
		struct verdict *v;

		if (placed < 2)
			continue;
		for (int i = 0; i < c->members.n; i++)
			a->members[c->members.v[i]].nr_last = 0;
		for (int k = 0; k < c->aggs.n; k++) {
			struct seq_agg *g = &a->aggs[c->aggs.v[k]];

			if (g->entered < placed || g->completed != g->entered ||
			    g->nr_waits != g->entered || g->min2_wait == FR_UNK)
				continue;
			of++;
			a->members[g->minw_m].nr_last++;
		}
		if (of < STRAGGLER_MIN_SEQS)
			continue;
		for (int i = 0; i < c->members.n; i++) {
			int mi = c->members.v[i];

			if (top < 0 || a->members[mi].nr_last > a->members[top].nr_last)
				top = mi;
		}
		tm = &a->members[top];
		if (tm->nr_last * 100 < of * STRAGGLER_SHARE) {
			int64_t own, peers, next;
			int err = straggler_by_median(a, c, placed, &top, &own, &peers, &next);

			if (err)
				return err;
			if (top < 0)
				continue;
			tm = &a->members[top];
			step = member_step(tm);
			if (step == FR_UNK || step <= 0 ||
			    (peers - own) * 100 < step * STRAGGLER_MIN_STEP_PCT)
				continue;
			if (!(v = verdict_new(a, RULE_STRAGGLER, cid, FR_UNK, NULL)))
				return -ENOMEM;
			v->ev.straggler.lag = peers - own;
			v->ev.straggler.step = step;
			v->ev.straggler.last = tm->nr_last;
			v->ev.straggler.of = of;
			v->ev.straggler.by_median = true;
			v->ev.straggler.median_own = own;
			v->ev.straggler.median_peers = peers;
			v->ev.straggler.median_next = next;
			v->medium = true;
			who_member(a, v, top);
			check_dropped(a, v);
			continue;
		}
		margins = malloc(of * sizeof(*margins));
		steps = malloc(of * sizeof(*steps));
		if (!margins || !steps) {
			free(margins);
			free(steps);
			return -ENOMEM;
		}
		for (int k = 0; k < c->aggs.n; k++) {
			struct seq_agg *g = &a->aggs[c->aggs.v[k]];

			if (g->entered < placed || g->completed != g->entered ||
			    g->nr_waits != g->entered || g->min2_wait == FR_UNK || g->minw_m != top)
				continue;
			margins[nm++] = g->min2_wait - g->min_wait;
		}
		qsort(margins, nm, sizeof(*margins), cmp_i64);
		lag = margins[nm / 2];
		step = member_step(tm);
		(void)ns;
		free(steps);
		free(margins);
		if (lag < STRAGGLER_MIN_LAG || step == FR_UNK || step <= 0 ||
		    lag * 100 < step * STRAGGLER_MIN_STEP_PCT)
			continue;
		if (!(v = verdict_new(a, RULE_STRAGGLER, cid, FR_UNK, NULL)))
			return -ENOMEM;
		v->ev.straggler.lag = lag;
		v->ev.straggler.step = step;
		v->ev.straggler.last = tm->nr_last;
		v->ev.straggler.of = of;
		who_member(a, v, top);
		check_dropped(a, v);
	}
	return 0;
}

static int rule_state(struct fr_analysis *a)
{
	for (int ci = 0; ci < a->nr_comms; ci++) {
		int cid = a->comm_order[ci];
		struct comm *c = &a->comms[cid];
		struct verdict *v = NULL;
		int nr_more = 0;
		int64_t last_more = 0;

		/* seqs aligned across hosts with another alignment as good: a rank "behind"
		 * may be read a step off (rule_late) */
		if (c->align_ambiguous)
			continue;
		for (int k = 0; k < c->aggs.n; k++) {
			struct seq_agg *g = &a->aggs[c->aggs.v[k]];
			struct agg_extra *x;
			struct ivec stuck = { 0 };
			int incomplete = g->entered - g->completed, alive = 0, best_how = 0;
			int64_t best_before;

			if (!g->completed || !incomplete || g->extra < 0)
				continue;
			x = &a->extras[g->extra];
			/* the ranks do not agree on what seq is (a mismatch, or a seq alignment
			 * inferred wrong): those that completed it did not complete the same
			 * collective, so those that did not are no proven laggards */
			if (x->nr_groups > 0 || x->other_n > 0)
				continue;
			if (v) {
				nr_more++;
				last_more = g->seq;
				continue;
			}
			if (x->nr_incomplete <= SIG_LIST) {
				for (int i = 0; i < x->nr_incomplete; i++)
					if (ivec_push(&stuck, x->incomplete[i]))
						goto nomem;
			} else {
				/* too many to have listed: members whose newest completed seq is
				 * below this one while they hold it (completion is in order) */
				for (int i = 0; i < c->members.n; i++) {
					struct member *m = &a->members[c->members.v[i]];

					if (m->placed && m->newest_seq != FR_UNK && m->newest_seq >= g->seq &&
					    (m->newest_completed == FR_UNK || m->newest_completed < g->seq) &&
					    ivec_push(&stuck, c->members.v[i]))
						goto nomem;
				}
			}
			/* a dead process never completes anything: dead_rank says it. The others
			 * only when the times prove the completion came before their dump
			 * (fr_timing.c); a dump that may be older is to be taken again */
			best_before = FR_UNK;
			for (int i = 0; i < stuck.n; i++) {
				int mi = stuck.v[i], how = 0;
				struct member *m = &a->members[mi];
				struct proc *p = &a->procs[m->proc];
				int64_t before;

				if (p->dead)
					continue;
				before = timing_done_before(a, cid, mi, g->seq, &how);
				/* no times at all (PyTorch's dumps): the states alone, as ever */
				if ((before == FR_UNK && p->dump_time_ns != FR_UNK) ||
				    (before != FR_UNK && before <= comm_skew(a, cid))) {
					int64_t w = m->st_seq == g->seq && m->st_created != FR_UNK &&
						    p->dump_time_ns != FR_UNK ?
						    ns_diff(p->dump_time_ns, m->st_created) : FR_UNK;

					if (w != FR_UNK && w > comm_skew(a, cid)) {
						a->hang_seen = true;
						if (timing_redump(a, m->proc, cid, g->seq, false))
							goto nomem;
					}
					continue;
				}
				if (before != FR_UNK && (best_before == FR_UNK || before < best_before)) {
					best_before = before;
					best_how = how;
				}
				stuck.v[alive++] = mi;
			}
			stuck.n = alive;
			if (!stuck.n) {
				free(stuck.v);
				continue;
			}
			if (!(v = verdict_new(a, RULE_STATE, cid, g->seq, fr_op_name(g->sig0.op))))
				goto nomem;
			v->agg = c->aggs.v[k];
			v->ev.state.completed = g->completed;
			v->ev.state.incomplete = incomplete;
			v->ev.state.before = best_before;
			v->ev.state.how = best_how;
			a->hang_seen = true;
			for (int i = 0; i < stuck.n; i++)
				who_member(a, v, stuck.v[i]);
			who_sort(v);
			free(stuck.v);
			check_dropped(a, v);
			continue;
nomem:
			free(stuck.v);
			return -ENOMEM;
		}
		if (v && nr_more) {
			v->also_seqs = nr_more;
			v->also_last = last_more;
		}
	}
	return 0;
}

static int rule_corrupt(struct fr_analysis *a)
{
	for (int i = 0; i < a->nr_corrupt; i++) {
		struct verdict *v = verdict_new(a, RULE_CORRUPT, -1, FR_UNK, NULL);

		if (!v)
			return -ENOMEM;
		v->ev.corrupt.idx = i;
		who_add(v, a->corrupt[i].global_rank, FR_UNK, -1);
	}
	return 0;
}

static int cmp_proc_rank(const void *x, const void *y, void *arg)
{
	const struct fr_analysis *a = arg;
	int64_t p = a->procs[*(const int *)x].global_rank, q = a->procs[*(const int *)y].global_rank;

	return p < q ? -1 : p > q;
}

/* Dumps of more than one job in one directory: they disagree on the world size, or two
 * processes (host, pid) claim one global rank. Their rules would compare unrelated
 * collectives: said in one line, and no verdict. */
static int several_jobs(struct fr_analysis *a)
{
	int64_t ws = FR_UNK;
	int *order, ws_p = -1;

	for (int pi = 0; pi < a->nr_procs; pi++) {
		const struct proc *p = &a->procs[pi];

		/* PyTorch's dumps of the job sit next to tptrace's: the same ranks */
		if (p->world_size == FR_UNK || p->torch)
			continue;
		if (ws != FR_UNK && p->world_size != ws)
			return asprintf(&a->bad_input, "the dumps are of more than one job: %s says "
					"world size %" PRId64 ", %s says %" PRId64 "; give tptrace-fr "
					"one job's dumps", a->procs[ws_p].path, ws, p->path,
					p->world_size) < 0 ? -ENOMEM : 0;
		ws = p->world_size;
		ws_p = pi;
	}
	if (!(order = malloc((a->nr_procs + 1) * sizeof(int))))
		return -ENOMEM;
	for (int i = 0; i < a->nr_procs; i++)
		order[i] = i;
	qsort_r(order, a->nr_procs, sizeof(int), cmp_proc_rank, a);
	for (int i = 0, last = -1; i < a->nr_procs; i++) {
		const struct proc *p, *q = &a->procs[order[i]];

		/* against the previous tptrace dump (PyTorch's have no host or pid) */
		if (q->torch || q->global_rank == FR_UNK)
			continue;
		p = last >= 0 ? &a->procs[last] : NULL;
		last = order[i];
		if (!p || p->global_rank != q->global_rank ||
		    (p->pid == q->pid && !strcmp(p->host, q->host)))
			continue;
		free(order);
		return asprintf(&a->bad_input, "the dumps are of more than one job (or of a "
				"restarted one): rank %" PRId64 " is %s and %s; give tptrace-fr one "
				"job's dumps", p->global_rank, p->path, q->path) < 0 ? -ENOMEM : 0;
	}
	free(order);
	return 0;
}

static int order_comms(struct fr_analysis *a)
{
	free(a->comm_order);
	a->comm_order = malloc((a->nr_comms + 1) * sizeof(int));
	if (!a->comm_order)
		return -ENOMEM;
	for (int i = 0; i < a->nr_comms; i++)
		a->comm_order[i] = i;
	qsort_r(a->comm_order, a->nr_comms, sizeof(int), cmp_comm_id, a);
	return 0;
}

int fr_analysis__finish(struct fr_analysis *a)
{
	bool any_running = false;
	int err;

	if (a->finished)
		return 0;
	a->finished = true;
	if ((err = order_comms(a)) || (err = resolve_splits(a)) || (err = unify_local(a)))
		return err;
	/* inferred comms were added: order again */
	if ((err = order_comms(a)))
		return err;
	for (int i = 0; i < a->nr_aggs; i++)
		if (ivec_push(&a->comms[a->aggs[i].comm].aggs, i))
			return -ENOMEM;
	for (int i = 0; i < a->nr_comms; i++)
		if (a->comms[i].aggs.n > 1)
			qsort_r(a->comms[i].aggs.v, a->comms[i].aggs.n, sizeof(int), cmp_agg_seq, a);
	for (int pi = 0; pi < a->nr_procs; pi++)
		if (a->procs[pi].state == FR_PROC_RUNNING || a->procs[pi].state == FR_PROC_UNKNOWN)
			any_running = true;
	for (int pi = 0; pi < a->nr_procs; pi++)
		a->procs[pi].dead = proc_is_dead(&a->procs[pi], any_running);
	if ((err = place_members(a)) || (err = timing_hosts(a)) ||
	    (err = stacks_pending_note(a)) || (err = several_jobs(a)) ||
	    (err = timing_comm_skews(a)))
		return err;
	/* dumps of several jobs: nothing is judged (fr_analysis__bad_input says why) */
	if (a->bad_input)
		return 0;

	if ((err = rule_init_failed(a)) || (err = rule_missing_rank(a)) ||
	    (err = rule_dead_rank(a)) || (err = rule_missing_dump(a)) ||
	    (err = rule_async_error(a)) || (err = rule_signatures(a)) || (err = rule_p2p(a)) ||
	    (err = rule_stuck(a)) || (err = rule_late(a)) ||
	    (err = rule_straggler(a)) || (err = rule_state(a)) ||
	    (err = rule_not_one_moment(a)) || (err = rule_ranks_unknown(a)) ||
	    (err = rule_stacks(a)) || (err = rule_partition(a)) ||
	    (err = rule_attached_after(a)) || (err = rule_corrupt(a)) ||
	    (err = rule_ring_hang(a)))
		return err;
	mark_inferred(a);
	sort_verdicts(a);
	return link_roles(a);
}

const char *fr_analysis__bad_input(const struct fr_analysis *a)
{
	return a->bad_input;
}

int fr_analysis__nr_verdicts(const struct fr_analysis *a)
{
	return a->nr_verdicts;
}
