// SPDX-License-Identifier: MIT
/* fr_text: the one place that words a finding — headline, detail and the reason for a
 * confidence below high — for the text report and --json alike. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "fr_analyze_int.h"

FILE *text_open(struct text *t)
{
	t->buf = NULL;
	t->len = 0;
	t->f = open_memstream(&t->buf, &t->len);
	return t->f;
}

char *text_close(struct text *t)
{
	if (!t->f)
		return strdup("");
	fclose(t->f);
	t->f = NULL;
	/* drop a trailing newline */
	if (t->len && t->buf[t->len - 1] == '\n')
		t->buf[--t->len] = 0;
	return t->buf;
}

/* the first 8 hex digits name a comm in prose, as git names commits */
const char *short_id(const char *id)
{
	static __thread char bufs[4][FR_ID_LEN];
	static __thread unsigned next;
	char *b = bufs[next++ & 3];
	/* "inferred:" + 8 hex digits; a local id whole (it names host, pid and handle) */
	size_t n = !strncmp(id, "inferred:", 9) ? strnlen(id, 17) :
		   !strncmp(id, "local:", 6) ? strnlen(id, FR_ID_LEN - 1) : strnlen(id, 8);

	memcpy(b, id, n);
	b[n] = 0;
	return b;
}

/* "0-4,6-7" from a sorted list; returns the count printed */
static void print_range_list(FILE *f, const int64_t *vals, int n)
{
	int i = 0;
	bool first = true;

	while (i < n) {
		int j = i;

		while (j + 1 < n && vals[j + 1] == vals[j] + 1)
			j++;
		fprintf(f, "%s%" PRId64, first ? "" : ",", vals[i]);
		if (j > i)
			fprintf(f, "%s%" PRId64, j == i + 1 ? "," : "-", vals[j]);
		first = false;
		i = j + 1;
	}
}


void print_proc_label(FILE *f, const struct proc *p)
{
	if (p->global_rank != FR_UNK)
		fprintf(f, "rank %" PRId64, p->global_rank);
	else
		fprintf(f, "pid %" PRId64 " on %s", p->pid == FR_UNK ? -1 : p->pid, p->host);
}

/* "rank 5 (host node2 pid 777)" or "ranks 0-4,6-7" (+ pids of rank-less dumps) */
void print_who(FILE *f, const struct fr_analysis *a, const struct verdict *v, bool detail1)
{
	int64_t *vals = malloc((v->nr_who + 1) * sizeof(int64_t));
	int n = 0, unknown = 0;

	if (!vals)
		return;
	for (int i = 0; i < v->nr_who; i++) {
		if (v->who[i][0] >= 0) {
			if (!n || vals[n - 1] != v->who[i][0])
				vals[n++] = v->who[i][0];
		} else {
			unknown++;
		}
	}
	if (v->nr_who == 1 && detail1 && v->who[0][2] >= 0) {
		const struct proc *p = &a->procs[v->who[0][2]];

		if (p->global_rank != FR_UNK && p->torch)	/* no host or pid in that format */
			fprintf(f, "rank %" PRId64 " (PyTorch dump %s)", p->global_rank,
				strrchr(p->path, '/') ? strrchr(p->path, '/') + 1 : p->path);
		else if (p->global_rank != FR_UNK)
			fprintf(f, "rank %" PRId64 " (host %s pid %" PRId64 ")", p->global_rank,
				p->host, p->pid == FR_UNK ? -1 : p->pid);
		else
			print_proc_label(f, p);
	} else {
		if (n) {
			fprintf(f, "rank%s ", n > 1 ? "s" : "");
			print_range_list(f, vals, n);
		}
		if (unknown) {
			int shown = 0;

			fprintf(f, "%s", n ? " and " : "");
			for (int i = 0; i < v->nr_who && shown < 4; i++) {
				if (v->who[i][0] >= 0)
					continue;
				fprintf(f, "%s", shown ? ", " : "");
				if (v->who[i][2] >= 0)
					print_proc_label(f, &a->procs[v->who[i][2]]);
				else
					fprintf(f, "an unknown rank");
				shown++;
			}
			if (unknown > shown)
				fprintf(f, " and %d more rank-less dumps", unknown - shown);
		}
	}
	free(vals);
}

/* global ranks of a member list, compressed */
static void print_members(FILE *f, const struct fr_analysis *a, const int *mis, int n)
{
	struct verdict tmp = { 0 };

	for (int i = 0; i < n; i++)
		who_add(&tmp, a->procs[a->members[mis[i]].proc].global_rank,
			a->members[mis[i]].rank, a->members[mis[i]].proc);
	who_sort(&tmp);
	print_who(f, a, &tmp, false);
	free(tmp.who);
}

static const char *signal_name(int64_t sig)
{
	switch (sig) {
	case 1: return "SIGHUP";
	case 2: return "SIGINT";
	case 3: return "SIGQUIT";
	case 4: return "SIGILL";
	case 6: return "SIGABRT";
	case 7: return "SIGBUS";
	case 8: return "SIGFPE";
	case 9: return "SIGKILL";
	case 11: return "SIGSEGV";
	case 13: return "SIGPIPE";
	case 15: return "SIGTERM";
	default: return "signal";
	}
}

static const char *nccl_result_name(int64_t r)
{
	static const char *const names[] = {
		"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
		"ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress",
	};
	return r >= 0 && r < 8 ? names[r] : "unknown ncclResult_t";
}

static void table_sizes(const struct sig *s, int64_t n, int64_t *in, int64_t *out)
{
	int64_t c = s->count, cn;

	*in = s->in_size;
	*out = s->out_size;
	if (c == FR_UNK)
		return;
	cn = (n != FR_UNK && n > 0 && c <= INT64_MAX / n) ? c * n : FR_UNK;
	if (*in == FR_UNK)
		*in = (s->op == FR_OP_REDUCE_SCATTER || s->op == FR_OP_ALL_TO_ALL ||
		       s->op == FR_OP_SCATTER) ? cn : c;
	if (*out == FR_UNK)
		*out = (s->op == FR_OP_ALL_GATHER || s->op == FR_OP_ALL_TO_ALL ||
			s->op == FR_OP_GATHER) ? cn : c;
}

static void print_i64(FILE *f, int64_t v)
{
	if (v == FR_UNK)
		fputs("?", f);
	else
		fprintf(f, "%" PRId64, v);
}

static void print_sig(FILE *f, const struct sig *s, int64_t nranks)
{
	int64_t in, out;

	table_sizes(s, nranks, &in, &out);
	fprintf(f, "%s count ", fr_op_name(s->op));
	print_i64(f, s->count);
	fprintf(f, " %s", fr_dtype_name(s->dtype));
	if (fr_op_has_redop(s->op))
		fprintf(f, " %s", fr_redop_name(s->redop));
	if (fr_op_has_root(s->op)) {
		fprintf(f, " root ");
		print_i64(f, s->root < 0 ? FR_UNK : s->root);
	}
	fprintf(f, ", input_sizes [[");
	print_i64(f, in);
	fprintf(f, "]] output_sizes [[");
	print_i64(f, out);
	fprintf(f, "]]");
}

static void print_in_calls(FILE *f, const struct proc *p)
{
	for (int i = 0; i < p->nr_in_calls; i++) {
		const struct fr_in_call *ic = &p->in_calls[i];

		fprintf(f, "%s inside %s (tid %" PRId64 "%s%s%s", i ? ";" : "",
			ic->api[0] ? ic->api : "?", ic->tid == FR_UNK ? -1 : ic->tid,
			ic->thread_name[0] ? " \"" : "", ic->thread_name,
			ic->thread_name[0] ? "\"" : "");
		if (ic->entered_ns != FR_UNK && p->dump_time_ns != FR_UNK)
			fprintf(f, ") for %.1f s", ns_diff(p->dump_time_ns, ic->entered_ns) / 1e9);
		else
			fprintf(f, ")");
	}
}

void print_last_entry(FILE *f, const struct fr_analysis *a, const struct proc *p)
{
	if (!p->has_last) {
		fprintf(f, "no entries in its ring");
		return;
	}
	fprintf(f, "its newest entry is %s seq ", fr_op_name(p->last_op));
	print_i64(f, p->last_seq);
	fprintf(f, " on comm %s (%s)", p->last_comm >= 0 ? short_id(a->comms[p->last_comm].id) : "?",
		fr_state_name(p->last_state));
}

/* the culprit's member on the verdict's comm for who[i] (who[] is sorted by rank) */
static const struct member *culprit_of(const struct fr_analysis *a, const struct verdict *v,
				       int i)
{
	const struct member *m = &a->members[v->culprits.v[0]];

	for (int k = 0; k < v->culprits.n; k++)
		if (a->members[v->culprits.v[k]].proc == v->who[i][2])
			m = &a->members[v->culprits.v[k]];
	return m;
}

static void print_entered(FILE *f, const struct fr_analysis *a, int ai)
{
	const struct seq_agg *g;

	if (ai < 0)
		return;
	g = &a->aggs[ai];
	fprintf(f, "%d ranks entered seq %" PRId64 ", %d completed it", g->entered, g->seq,
		g->completed);
	/* creation times compare on one host's clock only */
	if (g->min_created != FR_UNK && g->max_created != FR_UNK && g->min_m >= 0 &&
	    g->max_m >= 0 && a->procs[a->members[g->min_m].proc].host_id ==
	    a->procs[a->members[g->max_m].proc].host_id)
		fprintf(f, "; they entered within %.3f s of each other",
			ns_diff(g->max_created, g->min_created) / 1e9);
	fprintf(f, "\n");
}

static void print_proc_state(FILE *f, const struct fr_analysis *a, const struct proc *p)
{
	print_in_calls(f, p);
	fprintf(f, "%s ", p->nr_in_calls ? ";" : "");
	print_last_entry(f, a, p);
}

/* "ranks 0,2,3 are waiting in it" / "... entered it" */
static void print_waiting(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	print_members(f, a, v->waiting.v, v->waiting.n);
	if (v->agg >= 0 && a->aggs[v->agg].completed == 0)
		fprintf(f, " %s waiting in it", v->waiting.n == 1 ? "is" : "are");
	else
		fprintf(f, " entered it");
}

static void headline_init_failed(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	const struct comm *c = &a->comms[v->comm];
	int64_t rc = v->ev.init.rc;

	print_who(f, a, v, true);
	fprintf(f, " failed %s on comm %s (", v->ev.init.api[0] ? v->ev.init.api : "comm init",
		short_id(c->id));
	print_i64(f, c->nranks);
	if (rc == FR_UNK)
		fprintf(f, " ranks): rc unknown");
	else
		fprintf(f, " ranks): rc %" PRId64 " %s", rc, nccl_result_name(rc));
	if (v->waiting.n) {
		fprintf(f, "; ");
		print_members(f, a, v->waiting.v, v->waiting.n);
		fprintf(f, " %s waiting on it in %s seq %" PRId64, v->waiting.n == 1 ? "is" : "are",
			fr_op_name(a->aggs[v->agg].sig0.op), v->seq);
	}
}

static void detail_init_failed(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	for (int i = 0; i < v->nr_who && i < 8; i++) {
		const struct member *m = culprit_of(a, v, i);
		const struct proc *p = &a->procs[m->proc];

		print_proc_label(f, p);
		fprintf(f, " (comm rank ");
		print_i64(f, m->rank);
		fprintf(f, "): %s ", m->created_by[0] ? m->created_by : "comm init");
		if (m->init_rc == FR_UNK)
			fprintf(f, "failed (rc unknown)");
		else
			fprintf(f, "returned %" PRId64 " (%s)", m->init_rc,
				nccl_result_name(m->init_rc));
		fprintf(f, "; the communicator does not exist on it;");
		print_proc_state(f, a, p);
		fprintf(f, "\n");
	}
	if (v->culprits.n > 8)
		fprintf(f, "... and %d more ranks whose init failed\n", v->culprits.n - 8);
	if (v->ev.init.all_failed)
		fprintf(f, "no dump holds a working member of this comm\n");
	else if (v->waiting.n)
		print_entered(f, a, v->agg);
	else
		fprintf(f, "no other rank is waiting in a collective on this comm\n");
}

/* what the dumps' times prove (fr_timing.c): "its dump came at least 60.0 s after others
 * had entered it (same host's clock)" */
static void print_lag(FILE *f, int64_t lag, int how, const char *whose, const char *what)
{
	if (lag == FR_UNK)
		return;
	fprintf(f, "%s came at least %.1f s after others %s (%s)\n", whose, lag / 1e9, what,
		how == TIMING_SAME_HOST ? "one host's clock" :
		"from each rank's own clock and the order a collective imposes, whatever the "
		"hosts' clocks");
}

static void headline_missing(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	const struct comm *c = &a->comms[v->comm];

	print_who(f, a, v, true);
	fprintf(f, " never entered %s seq %" PRId64 " on comm %s (", v->op, v->seq,
		short_id(c->id));
	print_i64(f, c->nranks);
	fprintf(f, " ranks)%s; ", v->ev.missing.hole ? " and went on to later collectives" : "");
	print_waiting(f, a, v);
}

static void detail_missing(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	for (int i = 0; i < v->nr_who && i < 8; i++) {
		const struct member *m = culprit_of(a, v, i);
		const struct proc *p = &a->procs[m->proc];

		print_proc_label(f, p);
		fprintf(f, " (comm rank %" PRId64 "): ", m->rank);
		if (v->ev.missing.hole) {
			fprintf(f, "skipped %" PRId64 " collective%s at seq %" PRId64, m->hole_len,
				m->hole_len == 1 ? "" : "s", v->seq);
			if (m->hole_next_seq != FR_UNK)
				fprintf(f, " and went on to %s seq %" PRId64 " (%s)",
					fr_op_name(m->hole_next_op), m->hole_next_seq,
					fr_state_name(m->hole_next_state));
			fprintf(f, "; its collectives from there on match the others' shifted by %"
				   PRId64, m->hole_len);
		} else if (m->eff_last == 0) {
			fprintf(f, "no collective on this comm yet");
		} else if (m->newest_seq == m->eff_last) {
			fprintf(f, "last collective on this comm is %s seq %" PRId64 " (%s)",
				fr_op_name(m->newest_op), m->newest_seq,
				fr_state_name(m->newest_state));
		} else {
			fprintf(f, "last enqueued collective on this comm is seq %" PRId64,
				m->eff_last);
		}
		fprintf(f, ";");
		print_proc_state(f, a, p);
		fprintf(f, "\n");
		if (p->snap.present) {
			fprintf(f, "its stack: ");
			print_stack(f, a, p);
			fprintf(f, "\n");
		}
	}
	if (v->culprits.n > 8 && !v->ev.missing.hole)
		fprintf(f, "... and %d more ranks that never entered it\n", v->culprits.n - 8);
	print_entered(f, a, v->agg);
	print_lag(f, v->ev.missing.lag, v->ev.missing.how, v->nr_who == 1 ? "its dump" :
		  "their dumps", "had entered it");
	if (v->behind.n) {
		fprintf(f, "also behind the newest seq %" PRId64 ": ", v->ev.missing.newest);
		print_members(f, a, v->behind.v, v->behind.n);
		fprintf(f, " (probably waiting on the ranks above)\n");
	}
	if (v->dead.n) {
		print_members(f, a, v->dead.v, v->dead.n);
		fprintf(f, " never entered it either; the process is dead (see dead_rank)\n");
	}
}

static void headline_dead(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	const struct proc *p = &a->procs[v->ev.dead_rank.proc];

	print_who(f, a, v, true);
	if (p->state == FR_PROC_KILLED) {
		fprintf(f, " was killed");
		if (p->signal != FR_UNK)
			fprintf(f, " by %s (%" PRId64 ")", signal_name(p->signal), p->signal);
	} else {
		fprintf(f, " exited");
		if (p->exit_code != FR_UNK)
			fprintf(f, " with code %" PRId64, p->exit_code);
		fprintf(f, " while other ranks still run");
	}
}

static const char *agg_op_name(const struct fr_analysis *a, int ai)
{
	return ai >= 0 ? fr_op_name(a->aggs[ai].sig0.op) : "collective";
}

static void detail_dead(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	const struct proc *p = &a->procs[v->ev.dead_rank.proc];

	for (int i = 0; i + 2 < p->missed.n; i += 3) {
		int cid = p->missed.v[i];

		fprintf(f, "it never entered %s seq %d on comm %s; %d ranks entered it\n",
			agg_op_name(a, agg_find(a, cid, p->missed.v[i + 1])), p->missed.v[i + 1],
			short_id(a->comms[cid].id), p->missed.v[i + 2]);
	}
	print_last_entry(f, a, p);
}

static void print_absent(FILE *f, const int64_t *absent, int64_t n)
{
	print_range_list(f, absent, (int)(n < ABSENT_LIST ? n : ABSENT_LIST));
	if (n > ABSENT_LIST)
		fprintf(f, " and %" PRId64 " more", n - ABSENT_LIST);
}

static void headline_missing_dump(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	int64_t absent[ABSENT_LIST], n;
	const struct comm *c;

	if (v->ev.missing_dump.world) {
		fprintf(f, "no dump for ");
		print_who(f, a, v, false);
		fprintf(f, " (world size %" PRId64 ", %d dumps read)", a->world_size, a->nr_procs);
		return;
	}
	c = &a->comms[v->comm];
	n = comm_absent(c, absent, ABSENT_LIST);
	fprintf(f, "comm %s has %" PRId64 " ranks but no dump holds comm rank%s ",
		short_id(c->id), c->nranks, n > 1 ? "s" : "");
	print_absent(f, absent, n);
}

static void detail_missing_dump(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	int64_t absent[ABSENT_LIST];
	int shown = 0;

	if (!v->ev.missing_dump.world) {
		fprintf(f, "%s", v->ev.missing_dump.identity ?
			"its ranks equal the global ranks in every dump present, so the missing "
			"global ranks are the same" : "the global ranks of the missing members are "
			"unknown");
		return;
	}
	for (int i = 0; i < a->nr_corrupt; i++) {
		int64_t r = a->corrupt[i].global_rank;
		bool missing = false;

		for (int k = 0; k < v->nr_who; k++)
			missing |= v->who[k][0] == r;
		if (r != FR_UNK && missing)
			fprintf(f, "rank %" PRId64 "'s dump %s is corrupt (see corrupt_dump)\n", r,
				a->corrupt[i].path);
	}
	for (int ci = 0; ci < a->nr_comms; ci++) {
		const struct comm *c = &a->comms[a->comm_order[ci]];
		int64_t n = comm_absent(c, absent, ABSENT_LIST);

		if (n && shown < 8) {
			fprintf(f, "comm %s (%" PRId64 " ranks) has no dump for comm rank%s ",
				short_id(c->id), c->nranks, n > 1 ? "s" : "");
			print_absent(f, absent, n);
			fprintf(f, "\n");
		}
		shown += n > 0;
	}
	if (shown > 8)
		fprintf(f, "... and %d more comms lack members\n", shown - 8);
}

static void headline_async(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	print_who(f, a, v, true);
	fprintf(f, " report%s NCCL async error %" PRId64 " (%s) on comm %s",
		v->nr_who == 1 ? "s" : "", v->ev.async.err, nccl_result_name(v->ev.async.err),
		short_id(a->comms[v->comm].id));
}

static void detail_async(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	fprintf(f, "%s", v->ev.async.aborted ? "the comm was aborted or revoked" :
		"ncclCommGetAsyncError returned it; collectives on this comm will not complete");
}

static const char *const rule_field[RULE__COUNT] = {
	[RULE_TYPE] = "the collective type", [RULE_SIZE] = "the count",
	[RULE_DTYPE] = "the dtype", [RULE_REDOP] = "the reduce op", [RULE_ROOT] = "the root",
};

static void headline_sig(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	const char *op = fr_op_name(v->ev.sig.gv[0].sig.op), *comm = short_id(a->comms[v->comm].id);

	if (v->ev.sig.tie) {
		fprintf(f, "ranks disagree on %s at %s seq %" PRId64 " on comm %s with no "
			   "majority: ", rule_field[v->ev.sig.field], op, v->seq, comm);
		print_who(f, a, v, false);
		fprintf(f, " (a tie: cannot tell which side is wrong)");
	} else {
		print_who(f, a, v, true);
		fprintf(f, " disagree%s on %s at %s seq %" PRId64 " on comm %s: ",
			v->nr_who == 1 ? "s" : "", rule_field[v->ev.sig.field], op, v->seq, comm);
		fprintf(f, "%d of %d ranks agree", v->ev.sig.gv[0].n, v->ev.sig.entered);
	}
}

static void detail_sig(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	for (int i = 0; i < v->ev.sig.ng; i++) {
		const struct sig_group_ev *g = &v->ev.sig.gv[i];

		fprintf(f, "%s (%d rank%s): ", v->ev.sig.tie ? "tied" : i == 0 ? "majority" :
			"minority", g->n, g->n == 1 ? "" : "s");
		print_members(f, a, g->members, g->nr_listed);
		if (g->nr_listed < g->n)
			fprintf(f, " and %d more", g->n - g->nr_listed);
		fprintf(f, " %s ", g->n == 1 ? "uses" : "use");
		print_sig(f, &g->sig, a->comms[v->comm].nranks);
		fprintf(f, "\n");
	}
	if (v->ev.sig.other_n)
		fprintf(f, "%d more ranks use yet other signatures\n", v->ev.sig.other_n);
}

static void headline_p2p(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	const struct p2p_chan *ch = &a->chans[v->ev.p2p.chan];
	const char *comm = short_id(a->comms[ch->comm].id);
	bool lone_send = v->ev.p2p.lone_send;

	if (v->ev.p2p.bad) {
		fprintf(f, "send %d->%d and the matching recv at %d from %d disagree on comm %s: "
			   "count %" PRId64 " %s vs %" PRId64 " %s", ch->src, ch->dst, ch->dst,
			ch->src, comm, v->ev.p2p.s.count, fr_dtype_name(v->ev.p2p.s.dtype),
			v->ev.p2p.r.count, fr_dtype_name(v->ev.p2p.r.dtype));
		return;
	}
	print_who(f, a, v, true);
	fprintf(f, " never posted the %s matching %s %d->%d on comm %s",
		lone_send ? "recv" : "send", lone_send ? "send" : "recv", ch->src, ch->dst, comm);
	if (v->ev.p2p.has_lone) {
		const struct p2p_op *lone = &v->ev.p2p.lone;

		fprintf(f, " (count ");
		print_i64(f, lone->count);
		fprintf(f, " %s, p2p seq ", fr_dtype_name(lone->dtype));
		print_i64(f, lone->seq);
		fprintf(f, ", %s)", fr_state_name(lone->state));
	}
	int64_t extra = lone_send ? v->ev.p2p.max_s - v->ev.p2p.max_r :
				    v->ev.p2p.max_r - v->ev.p2p.max_s;

	if (extra > 1)
		fprintf(f, "; %" PRId64 " unmatched", extra);
}

static void detail_p2p(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	const struct p2p_chan *ch = &a->chans[v->ev.p2p.chan];

	fprintf(f, "comm ranks %d (", ch->src);
	print_proc_label(f, &a->procs[a->members[v->ev.p2p.sm].proc]);
	fprintf(f, ") sent %" PRId64 " to %d (", ch->send.total, ch->dst);
	print_proc_label(f, &a->procs[a->members[v->ev.p2p.rm].proc]);
	fprintf(f, ") which received %" PRId64 " from %d in the dumped rings", ch->recv.total,
		ch->src);
	if (!v->ev.p2p.absolute)
		fprintf(f, " (a ring wrapped: ops paired from the newest completed ones)");
	fprintf(f, "\n");
	if (v->ev.p2p.suppressed)
		fprintf(f, "%d more p2p channels disagree (not listed)", v->ev.p2p.suppressed);
}

static void headline_stuck(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	int64_t mind = v->ev.stuck.mind, maxd = v->ev.stuck.maxd;

	print_who(f, a, v, true);
	/* one figure when the two read the same at 0.1 s ("for 13.5-13.5 s" said nothing) */
	if ((int64_t)(mind / 1e8 + 0.5) == (int64_t)(maxd / 1e8 + 0.5) || v->nr_who == 1)
		fprintf(f, " %s been inside %s for %.1f s", v->nr_who == 1 ? "has" : "have",
			v->op, maxd / 1e9);
	else
		fprintf(f, " have been inside %s for %.1f-%.1f s", v->op, mind / 1e9, maxd / 1e9);
	fprintf(f, " (threshold %.1f s)", a->opts.stuck_ns / 1e9);
}

static void detail_stuck(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	for (int k = 0; k < v->ev.stuck.n && k < 8; k++) {
		const struct stuck_call *sc = &v->ev.stuck.calls[k];
		const struct proc *p = &a->procs[sc->proc];
		const struct fr_in_call *ic = &p->in_calls[sc->call];

		print_proc_label(f, p);
		/* a rank-less label already is "pid N on HOST" */
		if (p->global_rank != FR_UNK)
			fprintf(f, " (host %s pid %" PRId64 ")", p->host, p->pid == FR_UNK ? -1 : p->pid);
		fprintf(f, ": tid %" PRId64 "%s%s%s for %.1f s", ic->tid == FR_UNK ? -1 : ic->tid,
			ic->thread_name[0] ? " \"" : "", ic->thread_name,
			ic->thread_name[0] ? "\"" : "", sc->dur / 1e9);
		if (ic->comm_id[0]) {
			fprintf(f, " on comm %s seq ", short_id(ic->comm_id));
			print_i64(f, ic->seq);
		}
		fprintf(f, "; ");
		print_last_entry(f, a, p);
		fprintf(f, "\n");
	}
	if (v->ev.stuck.n > 8)
		fprintf(f, "... and %d more threads\n", v->ev.stuck.n - 8);
}

static void headline_late(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	print_who(f, a, v, true);
	fprintf(f, " entered %s seq %" PRId64 " on comm %s %.3f s after the %s rank "
		   "(threshold %.3f s)", v->op, v->seq, short_id(a->comms[v->comm].id),
		v->ev.late.skew / 1e9, v->ev.late.waits ? "earliest" : "first",
		comm_skew(a, v->comm) / 1e9);
}

static void detail_late(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	const struct seq_agg *g = &a->aggs[v->agg];

	if (v->ev.late.waits) {
		fprintf(f, "from each rank's own wait in it (completion - entry on its clock): it "
			   "waited %.3f s, another rank %.3f s; %d of %d ranks completed it\n",
			g->min_wait / 1e9, g->max_wait / 1e9, g->completed, g->entered);
	} else {
		fprintf(f, "first to enter: ");
		print_proc_label(f, &a->procs[a->members[g->min_m].proc]);
		fprintf(f, " on the same host; %d of %d ranks completed it", g->completed,
			g->entered);
		if (v->ev.late.stuck)
			fprintf(f, "; the others are still waiting in it");
		fprintf(f, "\n");
	}
	if (v->ev.late.nr_over > 1)
		fprintf(f, "%d seqs on this comm have an arrival skew above the threshold\n",
			v->ev.late.nr_over);
	if (v->ev.late.eps)
		fprintf(f, "it entered late on %d separate occasions (from seq %" PRId64 "), each "
			   "into a collective every rank completed: a rank that stalls again and "
			   "again\n", v->ev.late.eps, v->seq);
}

static void headline_straggler(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	print_who(f, a, v, true);
	if (v->ev.straggler.by_median) {
		fprintf(f, " is a straggler on comm %s: it waits %.1f ms in a collective (median), "
			   "its peers %.1f ms (%.1f ms more); the next-lowest rank %.1f ms. Last to "
			   "enter %d of %d collectives (on a loaded host the others are late in turns)",
			short_id(a->comms[v->comm].id), v->ev.straggler.median_own / 1e6,
			v->ev.straggler.median_peers / 1e6, v->ev.straggler.lag / 1e6,
			v->ev.straggler.median_next / 1e6, v->ev.straggler.last, v->ev.straggler.of);
		return;
	}
	fprintf(f, " is a straggler on comm %s: last to enter %d of %d collectives, %.1f ms after "
		   "the next-last rank (median)", short_id(a->comms[v->comm].id),
		v->ev.straggler.last, v->ev.straggler.of, v->ev.straggler.lag / 1e6);
}

static void detail_straggler(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	(void)a;
	fprintf(f, "every peer waits for it %s%.1f ms per collective%s: %.0f %% of its step "
		   "of %.1f ms between collectives on this comm\n",
		v->ev.straggler.by_median ? "" : "at least ", v->ev.straggler.lag / 1e6,
		v->ev.straggler.by_median ? " (medians)" : "",
		100.0 * v->ev.straggler.lag / v->ev.straggler.step, v->ev.straggler.step / 1e6);
	fprintf(f, "from each rank's own wait (completion - entry on its clock): the last to "
		   "enter waits least; no clocks of different hosts compared");
}

static void headline_state(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	print_who(f, a, v, true);
	fprintf(f, " did not complete %s seq %" PRId64 " on comm %s while %d rank%s completed it",
		v->op, v->seq, short_id(a->comms[v->comm].id), v->ev.state.completed,
		v->ev.state.completed == 1 ? "" : "s");
	if (v->ev.state.incomplete > v->ev.state.completed)
		fprintf(f, " (most ranks are stuck in it)");
}

static void detail_state(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	fprintf(f, "the GPU side of the collective never finished on %s\n",
		v->nr_who == 1 ? "that rank" : "those ranks");
	print_lag(f, v->ev.state.before, v->ev.state.how, v->nr_who == 1 ? "its dump" :
		  "their dumps", "had completed it");
	for (int i = 0; i < v->nr_who && i < 4; i++) {
		const struct proc *p = &a->procs[v->who[i][2]];

		print_proc_label(f, p);
		fprintf(f, ":");
		print_proc_state(f, a, p);
		fprintf(f, "\n");
	}
}

/* the hosts of the redump list, "node1,node3" (each once) */
static void print_redump_hosts(FILE *f, const struct fr_analysis *a)
{
	int shown = 0, n = 0, nh = 0;

	for (int i = 0; i < a->nr_redumps; i++) {
		bool seen = false;

		for (int k = 0; k < i && !seen; k++)
			seen = a->procs[a->redumps[k].proc].host_id ==
			       a->procs[a->redumps[i].proc].host_id;
		nh += !seen;
	}
	fprintf(f, "host%s ", nh == 1 ? "" : "s");
	for (int i = 0; i < a->nr_redumps; i++) {
		const struct proc *p = &a->procs[a->redumps[i].proc];
		bool seen = false;

		for (int k = 0; k < i && !seen; k++)
			seen = a->procs[a->redumps[k].proc].host_id == p->host_id;
		if (seen)
			continue;
		if (shown < 16)
			fprintf(f, "%s%s", shown++ ? "," : "", p->host[0] ? p->host : "?");
		n++;
	}
	if (n > shown)
		fprintf(f, " and %d more hosts", n - shown);
}

static void headline_not_one_moment(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	struct verdict tmp = { 0 };

	for (int i = 0; i < a->nr_redumps; i++)
		who_proc((struct fr_analysis *)a, &tmp, a->redumps[i].proc);
	who_sort(&tmp);
	fprintf(f, "the dumps are not from one moment: ");
	print_who(f, a, &tmp, false);
	free(tmp.who);
	fprintf(f, " may have been dumped before the others waited; dump ");
	print_redump_hosts(f, a);
	fprintf(f, " again");
}

static void detail_not_one_moment(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	(void)v;
	for (int i = 0; i < a->nr_redumps && i < 8; i++) {
		const struct redump *r = &a->redumps[i];
		const struct proc *p = &a->procs[r->proc];

		print_proc_label(f, p);
		fprintf(f, " (host %s): ", p->host[0] ? p->host : "?");
		if (r->p2p)
			fprintf(f, "its dump does not show the %s matching %s %d->%d (p2p seq %" PRId64
				   ") on comm %s that its peer had posted, and its times cannot show it "
				   "was taken after that", r->lacks_recv ? "recv" : "send",
				r->lacks_recv ? "send" : "recv", r->src, r->dst, r->seq,
				short_id(a->comms[r->comm].id));
		else if (r->completed)
			fprintf(f, "never entered seq %" PRId64 " on comm %s, which others completed: "
				   "every rank had entered it, so its dump is older", r->seq,
				short_id(a->comms[r->comm].id));
		else
			fprintf(f, "its dump does not show seq %" PRId64 " on comm %s as others do, "
				   "and its times cannot show it was taken after they waited in it",
				r->seq, short_id(a->comms[r->comm].id));
		fprintf(f, "; ");
		print_last_entry(f, a, p);
		fprintf(f, "\n");
	}
	if (a->nr_redumps > 8)
		fprintf(f, "... and %d more dumps\n", a->nr_redumps - 8);
	fprintf(f, "no rank is blamed: a rank is missing only when its own dump shows it had not "
		   "entered a collective well after the others had");
}

static void procs_of(FILE *f, const struct fr_analysis *a, const struct ivec *members)
{
	struct verdict tmp = { 0 };

	for (int i = 0; i < members->n; i++)
		who_proc((struct fr_analysis *)a, &tmp, a->members[members->v[i]].proc);
	who_sort(&tmp);
	print_who(f, a, &tmp, false);
	free(tmp.who);
}

static void headline_ranks_unknown(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	fprintf(f, "comm %s: %s seq %" PRId64 " was entered by %d dump%s and completed by none, "
		   "%d dump%s stopped before it; the dumps do not give the comm's ranks, so who is "
		   "missing cannot be judged", short_id(a->comms[v->comm].id),
		v->op[0] ? v->op : "collective", v->seq, v->waiting.n, v->waiting.n == 1 ? "" : "s",
		v->behind.n, v->behind.n == 1 ? "" : "s");
}

static void detail_ranks_unknown(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	fprintf(f, "entered seq %" PRId64 ": ", v->seq);
	procs_of(f, a, &v->waiting);
	fprintf(f, "\nstopped before it: ");
	procs_of(f, a, &v->behind);
	fprintf(f, "\nno rank is blamed: the rules place each dump on the comm by its rank there "
		   "(PyTorch: pg_config, which PyTorch 2.13's gloo recorder writes under the name \"\")");
}

static void headline_corrupt(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	const struct corrupt *c = &a->corrupt[v->ev.corrupt.idx];

	fprintf(f, "dump %s is corrupt (%s); skipped", c->path, c->why);
}

static void detail_corrupt(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	const struct corrupt *c = &a->corrupt[v->ev.corrupt.idx];

	if (c->global_rank != FR_UNK)
		fprintf(f, "it is rank %" PRId64 "'s (host %s pid %" PRId64 ")", c->global_rank,
			c->host, c->pid == FR_UNK ? -1 : c->pid);
	else
		fprintf(f, "its rank could not be read");
}

typedef void (*text_fn)(FILE *f, const struct fr_analysis *a, const struct verdict *v);

static const struct {
	text_fn headline, detail;
} rule_text[RULE__COUNT] = {
	[RULE_INIT_FAILED] = { headline_init_failed, detail_init_failed },
	[RULE_DEAD_RANK] = { headline_dead, detail_dead },
	[RULE_MISSING_DUMP] = { headline_missing_dump, detail_missing_dump },
	[RULE_MISSING_RANK] = { headline_missing, detail_missing },
	[RULE_ODD_STACK] = { headline_odd_stack, detail_odd_stack },
	[RULE_PARTITION] = { headline_partition, detail_partition },
	[RULE_NO_PROGRESS] = { headline_no_progress, detail_no_progress },
	[RULE_ATTACHED_AFTER] = { headline_attached, detail_attached },
	[RULE_ASYNC_ERROR] = { headline_async, detail_async },
	[RULE_TYPE] = { headline_sig, detail_sig },
	[RULE_SIZE] = { headline_sig, detail_sig },
	[RULE_DTYPE] = { headline_sig, detail_sig },
	[RULE_REDOP] = { headline_sig, detail_sig },
	[RULE_ROOT] = { headline_sig, detail_sig },
	[RULE_P2P] = { headline_p2p, detail_p2p },
	[RULE_STUCK] = { headline_stuck, detail_stuck },
	[RULE_LATE] = { headline_late, detail_late },
	[RULE_STATE] = { headline_state, detail_state },
	[RULE_STRAGGLER] = { headline_straggler, detail_straggler },
	[RULE_NOT_ONE_MOMENT] = { headline_not_one_moment, detail_not_one_moment },
	[RULE_RANKS_UNKNOWN] = { headline_ranks_unknown, detail_ranks_unknown },
	[RULE_CORRUPT] = { headline_corrupt, detail_corrupt },
};

static char *render(const struct fr_analysis *a, const struct verdict *v, text_fn fn)
{
	struct text t;
	FILE *f = text_open(&t);

	if (!f)
		return NULL;
	fn(f, a, v);
	return text_close(&t);
}

char *verdict_headline(const struct fr_analysis *a, const struct verdict *v)
{
	return render(a, v, rule_text[v->rule].headline);
}

bool verdict_pyframes(const struct fr_analysis *a, const struct verdict *v, struct py_pick *out)
{
	const struct comm *c;

	memset(out, 0, sizeof(*out));
	if (!v->nr_who || v->who[0][2] < 0 || v->comm < 0 || v->comm >= a->nr_comms)
		return false;
	c = &a->comms[v->comm];
	for (int i = 0; i < c->members.n; i++) {
		const struct member *m = &a->members[c->members.v[i]];

		if (m->proc != v->who[0][2])
			continue;
		out->member = c->members.v[i];
		if (m->py_stuck) {
			out->stack = m->py_stuck;
			out->seq = m->py_stuck_seq;
			out->op = m->py_stuck_op;
			out->stuck = true;
		} else if (m->py_newest) {
			out->stack = m->py_newest;
			out->seq = m->py_newest_seq;
			out->op = m->py_newest_op;
		}
		return out->stack != 0;
	}
	return false;
}

/* the innermost few frames of a->pystacks[stack - 1] as a traceback reads them,
 * "file:line func", one per line */
#define PY_SHOWN 5
static void print_pystack(FILE *f, const struct fr_analysis *a, uint32_t stack)
{
	const struct kpystack *k = &a->pystacks[stack - 1];

	for (int i = 0; i < k->nr && i < PY_SHOWN; i++) {
		const struct kframe *fr = &a->frames[k->first + i];

		fprintf(f, "\n  %s:", fr->file ? kstr(a, fr->file) : "<unresolved>");
		if (fr->line > 0)
			fprintf(f, "%d", fr->line);
		else
			fprintf(f, "?");
		fprintf(f, " %s", fr->func ? kstr(a, fr->func) : "<unresolved>");
	}
	if (k->nr > PY_SHOWN || k->more)
		fprintf(f, "\n  ... (outer frames in the dump's \"frames\")");
}

const char *verdict_pyframes_missing(const struct fr_analysis *a, const struct verdict *v)
{
	const struct proc *p;

	if (!v->nr_who || v->who[0][2] < 0 || v->comm < 0)
		return NULL;
	p = &a->procs[v->who[0][2]];
	return p->py_stacks && p->py_why[0] ? p->py_why : NULL;
}

/* A waiting member's frames of the verdict's seq (where the others are), 0 none */
uint32_t verdict_waiting_pyframes(const struct fr_analysis *a, const struct verdict *v, int *member)
{
	for (int i = 0; v->seq != FR_UNK && i < v->waiting.n; i++) {
		const struct member *m = &a->members[v->waiting.v[i]];

		if (m->py_stuck && m->py_stuck_seq == v->seq) {
			*member = v->waiting.v[i];
			return m->py_stuck;
		}
	}
	return 0;
}

/* --py-stacks: "rank 3 (...) is in all_reduce seq 7 (not completed), called from:" and its
 * frames (or why it has none); for a rank missing from a collective, also where the others
 * called the one they wait in */
static void print_pyframes(FILE *f, struct text *t, const struct fr_analysis *a,
			   const struct verdict *v)
{
	const char *why = NULL;
	struct py_pick pick;
	bool have = verdict_pyframes(a, v, &pick);
	uint32_t waiting;
	int wm = -1;

	if (!have)
		why = verdict_pyframes_missing(a, v);
	waiting = verdict_waiting_pyframes(a, v, &wm);
	if (have && pick.stuck && pick.seq == v->seq)
		waiting = 0;	/* the culprit's own frames are of that collective */
	if (!have && !why && !waiting)
		return;
	fflush(f);
	if (t->len && t->buf[t->len - 1] != '\n')
		fprintf(f, "\n");
	if (have) {
		print_proc_label(f, &a->procs[v->who[0][2]]);
		if (pick.stuck)
			fprintf(f, " is in %s seq %" PRId64 " (not completed), called from:",
				fr_op_name(pick.op), pick.seq);
		else
			fprintf(f, " last entered %s seq %" PRId64 " (completed), called from:",
				fr_op_name(pick.op), pick.seq);
		print_pystack(f, a, pick.stack);
	} else if (why) {
		print_proc_label(f, &a->procs[v->who[0][2]]);
		fprintf(f, " has no Python frames: %s", why);
	}
	if (waiting) {
		if (have || why)
			fprintf(f, "\n");
		print_proc_label(f, &a->procs[a->members[wm].proc]);
		fprintf(f, ", one of the ranks waiting in seq %" PRId64 ", called it from:", v->seq);
		print_pystack(f, a, waiting);
	}
}

char *verdict_detail(const struct fr_analysis *a, const struct verdict *v)
{
	struct text t;
	FILE *f = text_open(&t);

	if (!f)
		return NULL;
	rule_text[v->rule].detail(f, a, v);
	print_pyframes(f, &t, a, v);
	return text_close(&t);
}

static void confidence_reason(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	const struct comm *c;

	if (v->rule == RULE_PARTITION && v->ev.part.why && (!v->low || v->low == LOW_NET)) {
		partition_reason(f, a, v);
		return;
	}
	if (v->low == LOW_STACK_DISAGREES) {
		print_proc_label(f, &a->procs[v->low_proc]);
		fprintf(f, "'s own stack shows it blocked in %s like the waiting ranks: its ring "
			   "does not show that call (older than the stack, or lost)",
			a->procs[v->low_proc].snap.api[0] ? a->procs[v->low_proc].snap.api :
			"an NCCL call");
		return;
	}
	if (v->low == LOW_RANKS_UNKNOWN) {
		fprintf(f, "the dumps do not give this comm's ranks, so neither who is missing nor "
			   "whether a member left no dump can be told");
		return;
	}
	if (v->low == LOW_ALIGN_AMBIGUOUS) {
		fprintf(f, "communicator created before attach, its ranks' seqs aligned across "
			   "hosts whose clocks differ and whose dumps are not from one moment: "
			   "another alignment fits as well");
		return;
	}
	if (v->low == LOW_ONE_SAMPLE) {
		fprintf(f, "one stack sample: a busy moment looks like a hang (take more with "
			   "--stack-samples)");
		return;
	}
	if (v->low == LOW_STACK_UNKNOWN) {
		print_proc_label(f, &a->procs[v->low_proc]);
		fprintf(f, "'s stack is unknown (");
		print_unknown_why(f, &a->procs[v->low_proc]);
		fprintf(f, ")");
		return;
	}
	if (v->low) {
		const struct proc *p = &a->procs[v->low_proc];

		print_proc_label(f, p);
		switch (v->low) {
		case LOW_ATTACHED_AFTER:
			fprintf(f, " was attached after seq %" PRId64 " of this comm", v->low_seq);
			break;
		case LOW_WRAPPED:
			fprintf(f, "'s ring wrapped past seq %" PRId64 " of this comm", v->low_seq);
			break;
		case LOW_DROPPED:
			fprintf(f, " dropped %" PRId64 " events: entries may be missing from its dump",
				p->events_dropped);
			break;
		case LOW_POSITION_UNKNOWN:
			fprintf(f, "'s position on this comm is unknown: its ring wrapped past every "
				   "entry of the comm and the header has no last_enqueued_seq");
			break;
		}
		return;
	}
	if (!v->medium)
		return;
	if (v->rule == RULE_LATE && v->ev.late.eps) {
		fprintf(f, "late on %d separate occasions while the job went on past each: a slow "
			   "rank, its lateness not shown to hold anyone up now", v->ev.late.eps);
		return;
	}
	if (v->stacks_only || v->comm < 0) {
		fprintf(f, "from stacks only");
		return;
	}
	c = &a->comms[v->comm];
	fprintf(f, "communicator created before attach: identity and seq alignment inferred "
		   "from the collective sequence (%d dumps matched", c->members.n);
	if (c->nr_expected > c->members.n)
		fprintf(f, "; %d expected", c->nr_expected);
	fprintf(f, ")");
}

char *verdict_confidence_reason(const struct fr_analysis *a, const struct verdict *v)
{
	return render(a, v, confidence_reason);
}
