// SPDX-License-Identifier: MIT
/* fr_fold: each parsed dump folded into procs, comms, members, (comm, seq) aggregates and p2p
 * channels as soon as it is read; the analysis object's lifetime. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "fr_analyze_int.h"
#include "growbuf.h"

struct fr_analysis *fr_analysis__new(const struct fr_opts *opts)
{
	struct fr_analysis *a = calloc(1, sizeof(*a));

	if (!a)
		return NULL;
	a->opts = *opts;
	a->world_size = FR_UNK;
	return a;
}

void fr_analysis__set_read(struct fr_analysis *a, const struct fr_read *r)
{
	a->read = *r;
}

void fr_analysis__note_skipped(struct fr_analysis *a, int64_t skipped)
{
	if (skipped == FR_UNK) {
		a->dumps_cut_unknown++;
	} else if (skipped > 0) {
		a->skipped += skipped;
		a->dumps_cut++;
	}
}

int member_new(struct fr_analysis *a, int comm, int proc, const struct fr_comm_info *ci)
{
	struct comm *c = &a->comms[comm];
	struct member *m;
	int i;

	if (ARRAY_RESERVE(a->members, a->cap_members, a->nr_members + 1, 16))
		return -ENOMEM;
	i = a->nr_members++;
	m = &a->members[i];
	memset(m, 0, sizeof(*m));
	m->comm = comm;
	m->proc = proc;
	m->rank = ci->rank;
	m->hdr_enqueued = ci->last_enqueued;
	m->hdr_completed = ci->last_completed;
	m->async_error = ci->async_error;
	m->newest_seq = m->oldest_seq = m->newest_completed = FR_UNK;
	m->py_newest_seq = m->py_stuck_seq = FR_UNK;
	m->eff_last = FR_UNK;
	m->hole_seq = m->hole_next_seq = FR_UNK;
	m->prev_seq = m->prev_created = m->prev_done = FR_UNK;
	m->lc_seq = m->lc_created = m->lc_done = m->lc_prev_created = FR_UNK;
	m->st_seq = m->st_created = m->st_prev_created = m->st_prev_done = FR_UNK;
	m->first_created = FR_UNK;
	m->partial = ci->seq_attach;
	m->split = -1;
	m->init_failed = !strcmp(ci->state, "init_failed");
	m->init_rc = m->init_failed ? ci->init_rc : FR_UNK;
	snprintf(m->created_by, sizeof(m->created_by), "%s", ci->created_by);
	if (!strcmp(ci->state, "aborted") || !strcmp(ci->state, "revoked"))
		c->aborted = true;
	if (ci->nranks != FR_UNK && (c->nranks == FR_UNK || ci->nranks > c->nranks))
		c->nranks = ci->nranks;
	if (ivec_push(&c->members, i))
		return -ENOMEM;
	/* placed in finish: the first dump (in file order) holding a comm rank owns it */
	m->placed = m->rank != FR_UNK;
	return i;
}

static struct agg_extra *agg_extra(struct fr_analysis *a, struct seq_agg *g)
{
	if (g->extra < 0) {
		if (ARRAY_RESERVE(a->extras, a->cap_extras, a->nr_extras + 1, 16))
			return NULL;
		g->extra = a->nr_extras++;
		memset(&a->extras[g->extra], 0, sizeof(*a->extras));
	}
	return &a->extras[g->extra];
}

/* Sizes only agree when they are known on both sides: a rank whose recorder did not know the
 * communicator's size writes -1 for sizes that depend on it, and the NCCL count argument is
 * what must match anyway. */
bool size_eq(int64_t x, int64_t y)
{
	return x < 0 || y < 0 || x == y;
}

static bool sig_eq(const struct sig *x, const struct sig *y)
{
	return x->op == y->op && x->count == y->count && x->dtype == y->dtype &&
	       x->redop == y->redop && x->root == y->root && size_eq(x->in_size, y->in_size) &&
	       size_eq(x->out_size, y->out_size);
}

/* The times fr_timing.c reasons with: a collective's creation and completion, and its
 * predecessor's when that is the seq right before it (entries come in seq order). */
static void fold_times(struct member *m, const struct fr_entry *e)
{
	bool adjacent = m->prev_seq != FR_UNK && m->prev_seq == e->coll_seq - 1;

	if (e->state == FR_ST_COMPLETED) {
		m->lc_seq = e->coll_seq;
		m->lc_created = e->created_ns;
		m->lc_done = e->completed_ns;
		m->lc_prev_created = adjacent ? m->prev_created : FR_UNK;
	} else if (m->st_seq == FR_UNK) {
		m->st_seq = e->coll_seq;
		m->st_created = e->created_ns;
		m->st_prev_created = adjacent ? m->prev_created : FR_UNK;
		m->st_prev_done = adjacent ? m->prev_done : FR_UNK;
	}
	if (m->prev_seq == FR_UNK)
		m->first_created = e->created_ns;
	m->prev_seq = e->coll_seq;
	m->prev_created = e->created_ns;
	m->prev_done = e->state == FR_ST_COMPLETED ? e->completed_ns : FR_UNK;
}

int fold_collective(struct fr_analysis *a, int mi, const struct fr_entry *e)
{
	struct member *m = &a->members[mi];
	struct seq_agg *g;
	struct agg_extra *x;
	struct sig s = {
		.count = e->count, .in_size = e->in_size, .out_size = e->out_size,
		.root = fr_op_has_root(e->op) ? e->root : -1,
		.op = e->op, .dtype = e->dtype,
		.redop = fr_op_has_redop(e->op) ? e->redop : FR_RED_NONE,
	};
	int gi;

	/* entries are in record order, so a comm's seqs rise; anything else is a duplicate or
	 * a writer bug and would be counted twice */
	if (m->newest_seq != FR_UNK && e->coll_seq <= m->newest_seq) {
		a->out_of_order++;
		return 0;
	}
	gi = agg_get(a, m->comm, e->coll_seq);
	if (gi == -ENOMEM)
		return gi;
	if (m->oldest_seq == FR_UNK)
		m->oldest_seq = e->coll_seq;
	m->newest_seq = e->coll_seq;
	m->newest_op = e->op;
	m->newest_state = e->state;
	if (e->pystack) {
		m->py_newest = e->pystack;
		m->py_newest_seq = e->coll_seq;
		m->py_newest_op = e->op;
		if (!m->py_stuck && e->state != FR_ST_COMPLETED) {
			m->py_stuck = e->pystack;
			m->py_stuck_seq = e->coll_seq;
			m->py_stuck_op = e->op;
		}
	}
	if (e->state == FR_ST_COMPLETED)
		m->newest_completed = e->coll_seq;
	fold_times(m, e);
	if (gi < 0)
		return 0;
	g = &a->aggs[gi];
	if (g->entered == 0)
		g->min_wait = g->min2_wait = g->max_wait = FR_UNK;
	if (e->state == FR_ST_COMPLETED && e->created_ns != FR_UNK && e->completed_ns != FR_UNK &&
	    e->completed_ns >= e->created_ns) {
		int64_t w = e->completed_ns - e->created_ns;

		if (g->min_wait == FR_UNK || w < g->min_wait) {
			g->min2_wait = g->min_wait;
			g->min_wait = w;
			g->minw_m = mi;
		} else if (g->min2_wait == FR_UNK || w < g->min2_wait) {
			g->min2_wait = w;
		}
		if (g->max_wait == FR_UNK || w > g->max_wait)
			g->max_wait = w;
		g->nr_waits++;
		if (!m->waits && !(m->waits = calloc(MEMBER_WAITS, sizeof(*m->waits))))
			return -ENOMEM;
		m->waits[m->waits_next++ % MEMBER_WAITS] = (struct member_wait){
			gi, (int32_t)(w / 1000 > INT32_MAX ? INT32_MAX : w / 1000) };
	}
	if (g->entered == 0) {
		g->sig0 = s;
		g->min_created = g->max_created = e->created_ns;
		g->min_m = g->max_m = mi;
	} else if (e->created_ns != FR_UNK) {
		if (g->min_created == FR_UNK || e->created_ns < g->min_created) {
			g->min_created = e->created_ns;
			g->min_m = mi;
		}
		if (g->max_created == FR_UNK || e->created_ns > g->max_created) {
			g->max_created = e->created_ns;
			g->max_m = mi;
		}
	}
	g->entered++;
	if (e->state == FR_ST_COMPLETED) {
		g->completed++;
	} else {
		if (!(x = agg_extra(a, g)))
			return -ENOMEM;
		if (x->nr_incomplete < SIG_LIST)
			x->incomplete[x->nr_incomplete] = mi;
		x->nr_incomplete++;
	}
	if (g->entered == 1 || sig_eq(&s, &g->sig0)) {
		if (g->n0 < 2)
			g->first0[g->n0] = mi;
		else if (g->extra >= 0 && a->extras[g->extra].nr_list0 < SIG_LIST)
			a->extras[g->extra].list0[a->extras[g->extra].nr_list0++] = mi;
		g->n0++;
		return 0;
	}
	if (!(x = agg_extra(a, g)))
		return -ENOMEM;
	for (int i = 0; i < x->nr_groups; i++) {
		struct sig_group *sg = &x->groups[i];

		if (sig_eq(&s, &sg->sig)) {
			if (sg->nr_listed < SIG_LIST)
				sg->members[sg->nr_listed++] = mi;
			sg->n++;
			return 0;
		}
	}
	if (x->nr_groups < SIG_GROUPS - 1) {
		struct sig_group *sg = &x->groups[x->nr_groups++];

		sg->sig = s;
		sg->n = 1;
		sg->nr_listed = 1;
		sg->members[0] = mi;
	} else {
		x->other_n++;
	}
	return 0;
}

int fold_p2p(struct fr_analysis *a, int mi, const struct fr_entry *e)
{
	struct member *m = &a->members[mi];
	struct p2p_side *side;
	struct p2p_op *op;
	int ci;

	if (m->rank == FR_UNK || e->peer < 0)
		return 0;
	if (e->op == FR_OP_SEND)
		ci = chan_get(a, m->comm, (int)m->rank, e->peer);
	else
		ci = chan_get(a, m->comm, e->peer, (int)m->rank);
	if (ci < 0)
		return ci == -ENOMEM ? ci : 0;
	side = e->op == FR_OP_SEND ? &a->chans[ci].send : &a->chans[ci].recv;
	if (side->member >= 0 && side->member != mi)
		return 0;	/* a duplicate rank: the first dump owns the channel side */
	side->member = mi;
	op = &side->kept[side->total % P2P_KEEP];
	op->k = side->total;
	op->seq = e->p2p_seq;
	op->count = e->count;
	op->created = e->created_ns;
	op->done = e->state == FR_ST_COMPLETED ? e->completed_ns : FR_UNK;
	op->dtype = e->dtype;
	op->state = e->state;
	if (side->nr_kept < P2P_KEEP)
		side->nr_kept++;
	side->total++;
	if (e->state == FR_ST_COMPLETED)
		side->done++;
	return 0;
}

static bool member_is_split_pending(const struct fr_analysis *a, int mi)
{
	return a->members[mi].split >= 0;
}

int fr_analysis__add_dump(struct fr_analysis *a, const struct fr_dump *d, const char *path)
{
	struct proc *p;
	int pi, err;

	if (ARRAY_RESERVE(a->procs, a->cap_procs, a->nr_procs + 1, 16))
		return -ENOMEM;
	pi = a->nr_procs++;
	p = &a->procs[pi];
	memset(p, 0, sizeof(*p));
	snprintf(p->host, sizeof(p->host), "%s", d->host[0] ? d->host : "?");
	p->path = strdup(path ? path : "");
	p->pid = d->pid;
	p->global_rank = d->global_rank;
	p->world_size = d->world_size;
	p->dump_time_ns = d->dump_time_ns;
	p->dump_mono_ns = d->dump_mono_ns;
	p->exit_code = d->exit_code;
	p->signal = d->signal;
	p->entries_overwritten = d->entries_overwritten;
	p->events_dropped = d->events_dropped;
	p->state = d->proc_state;
	p->torch = d->torch;
	p->py_stacks = d->py_stacks;
	snprintf(p->py_why, sizeof(p->py_why), "%s", d->py_why);
	snprintf(p->torch_version, sizeof(p->torch_version), "%s", d->torch_version);
	p->wrapped = (d->entries_overwritten != FR_UNK && d->entries_overwritten > 0) ||
		     (d->entries_recorded != FR_UNK && d->entries_recorded > (int64_t)d->nr_entries);
	p->last_comm = -1;
	p->nr_in_calls = d->nr_in_calls < PROC_IN_CALLS ? (int)d->nr_in_calls : PROC_IN_CALLS;
	if (p->nr_in_calls)
		memcpy(p->in_calls, d->in_calls, p->nr_in_calls * sizeof(*p->in_calls));
	if (!p->path)
		return -ENOMEM;
	if (d->world_size != FR_UNK && (a->world_size == FR_UNK || d->world_size > a->world_size))
		a->world_size = d->world_size;
	if ((err = fold_stacks(a, pi, d)) || (err = fold_pystacks(a, d)) ||
	    (err = fold_net(a, pi, d)))
		return err;
	p = &a->procs[pi];

	if (d->nr_comms > a->local_cap) {
		int *lm = realloc(a->local_member, d->nr_comms * sizeof(int));

		if (!lm)
			return -ENOMEM;
		a->local_member = lm;
		a->local_cap = d->nr_comms;
	}
	for (size_t i = 0; i < d->nr_comms; i++) {
		const struct fr_comm_info *ci = &d->comms[i];
		int c;

		if (ci->local_id) {
			/* matched with its peers in finish: local member -(pend + 2) */
			struct pend *pd;

			if (ARRAY_RESERVE(a->pends, a->cap_pends, a->nr_pends + 1, 16))
				return -ENOMEM;
			pd = &a->pends[a->nr_pends];
			memset(pd, 0, sizeof(*pd));
			pd->proc = pi;
			pd->ci = *ci;
			pd->cluster = -1;
			a->local_member[i] = -(a->nr_pends++ + 2);
			continue;
		}
		c = comm_get(a, ci->id);
		if (c < 0)
			return c;
		a->local_member[i] = member_new(a, c, pi, ci);
		if (a->local_member[i] < 0)
			return a->local_member[i];
		if (ci->split_color != FR_UNK && a->members[a->local_member[i]].rank == FR_UNK) {
			struct split_pend *sp;

			if (ARRAY_RESERVE(a->splits, a->cap_splits, a->nr_splits + 1, 16))
				return -ENOMEM;
			a->members[a->local_member[i]].split = a->nr_splits;
			sp = &a->splits[a->nr_splits++];
			sp->member = a->local_member[i];
			sp->key = ci->split_key;
			snprintf(sp->parent, sizeof(sp->parent), "%s", ci->parent);
		}
	}
	p = &a->procs[pi];
	for (size_t i = 0; i < d->nr_entries; i++) {
		const struct fr_entry *e = &d->entries[i];
		struct fr_entry renumbered;
		int mi;

		if (e->comm >= d->nr_comms)
			continue;
		/* its frames by the analysis's stack numbers: the dump's go with the dump */
		if (e->pystack) {
			renumbered = *e;
			renumbered.pystack = e->pystack <= d->nr_pystacks ? a->py_map[e->pystack - 1] : 0;
			e = &renumbered;
		}
		mi = a->local_member[e->comm];
		if (!p->has_last || (e->record_id != FR_UNK && e->record_id >= p->last_record) ||
		    e->record_id == FR_UNK) {
			p->has_last = true;
			p->last_record = e->record_id == FR_UNK ? INT64_MIN + 1 : e->record_id;
			p->last_comm = mi >= 0 ? a->members[mi].comm : mi;
			p->last_op = e->op;
			p->last_state = e->state;
			p->last_seq = fr_op_is_p2p(e->op) ? e->p2p_seq : e->coll_seq;
			p->last_created = e->created_ns;
		}
		/* a failed init is no collective: its comm's state says it (comm_init_failed) */
		if (e->op == FR_OP_COMM_INIT)
			continue;
		if (mi < 0) {
			struct pend *pd = &a->pends[-mi - 2];

			if (ARRAY_RESERVE(pd->e, pd->cap, pd->n + 1, 16))
				return -ENOMEM;
			pd->e[pd->n++] = *e;
			continue;
		}
		if (fr_op_is_p2p(e->op) && a->members[mi].rank == FR_UNK &&
		    member_is_split_pending(a, mi)) {
			struct member *m = &a->members[mi];

			if (ARRAY_RESERVE(m->dents, m->cap_dents, m->nr_dents + 1, 16))
				return -ENOMEM;
			m->dents[m->nr_dents++] = *e;
			continue;
		}
		if (fr_op_is_p2p(e->op))
			err = fold_p2p(a, mi, e);
		else if (e->coll_seq != FR_UNK && e->coll_seq >= 0)
			err = fold_collective(a, mi, e);
		else
			err = 0;
		if (err)
			return err;
	}
	return 0;
}

int fr_analysis__add_corrupt(struct fr_analysis *a, const char *path, const struct fr_dump *d,
			     const char *why)
{
	struct corrupt *c;

	if (ARRAY_RESERVE(a->corrupt, a->cap_corrupt, a->nr_corrupt + 1, 16))
		return -ENOMEM;
	c = &a->corrupt[a->nr_corrupt++];
	memset(c, 0, sizeof(*c));
	c->path = strdup(path ? path : "");
	c->why = strdup(why ? why : "unreadable");
	c->global_rank = d ? d->global_rank : FR_UNK;
	c->pid = d ? d->pid : FR_UNK;
	snprintf(c->host, sizeof(c->host), "%s", d ? d->host : "");
	return c->path && c->why ? 0 : -ENOMEM;
}

void fr_analysis__free(struct fr_analysis *a)
{
	if (!a)
		return;
	for (int i = 0; i < a->nr_procs; i++) {
		free(a->procs[i].path);
		free(a->procs[i].missed.v);
	}
	for (int i = 0; i < a->nr_comms; i++) {
		free(a->comms[i].placed);
		free(a->comms[i].members.v);
		free(a->comms[i].aggs.v);
	}
	for (int i = 0; i < a->nr_verdicts; i++) {
		verdict_free(&a->verdicts[i]);
	}
	for (int i = 0; i < a->nr_corrupt; i++) {
		free(a->corrupt[i].path);
		free(a->corrupt[i].why);
	}
	net_free(a);
	free(a->procs);
	free(a->comms);
	fr_index__free(&a->comm_index);
	for (int i = 0; i < a->nr_members; i++) {
		free(a->members[i].dents);
		free(a->members[i].waits);
	}
	free(a->members);
	free(a->aggs);
	fr_index__free(&a->agg_index);
	free(a->extras);
	free(a->chans);
	fr_index__free(&a->chan_index);
	free(a->local_member);
	free(a->corrupt);
	for (int i = 0; i < a->nr_pends; i++) {
		free(a->pends[i].e);
		free(a->pends[i].coll);
	}
	free(a->pends);
	for (int i = 0; i < a->nr_clusters; i++)
		free(a->clusters[i].pends.v);
	free(a->clusters);
	free(a->splits);
	free(a->verdicts);
	free(a->redumps);
	free(a->bad_input);
	for (int i = 0; i < a->nr_notes; i++)
		free(a->notes[i]);
	free(a->comm_order);
	free(a->frames);
	free(a->strs);
	u64map__clear(&a->str_index);
	free(a->pystacks);
	free(a->py_map);
	u64map__clear(&a->pystack_index);
	free(a);
}

