// SPDX-License-Identifier: MIT
/* fr_stacks: the stack snapshots of each dump (version 2) folded into its proc, and the rules
 * that read them: odd_stack, no_progress, attached_after_hang (findings as data; fr_text words
 * them). A snapshot says what every thread was doing, so a job that was already hung when
 * tptrace attached (empty rings) still names its culprit.
 *
 * Per proc the analysis keeps the attach snapshot's and the newest snapshot's issuing thread
 * (where, api, progress) and the newest one's top frames, their strings interned across ranks:
 * bounded by ranks × FR_STACK_FRAMES, whatever the dumps hold. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fr_analyze_int.h"
#include "growbuf.h"

const char *kstr(const struct fr_analysis *a, uint32_t off)
{
	return off && off < (uint32_t)a->nr_strs ? a->strs + off : "";
}

/* offset of s in a->strs (0 for ""); equal strings share one copy */
static int intern(struct fr_analysis *a, const char *s, uint32_t *out)
{
	uint64_t h, v;
	int len;

	*out = 0;
	if (!s[0])
		return 0;
	h = str_hash(s);
	h = h ? h : 1;
	if (u64map__get(&a->str_index, h, &v) && !strcmp(a->strs + v, s)) {
		*out = (uint32_t)v;
		return 0;
	}
	len = (int)strlen(s) + 1;
	if (a->nr_strs > INT32_MAX / 2 - len)
		return -ENOMEM;
	if (!a->nr_strs) {
		/* offset 0 is "" */
		if (ARRAY_RESERVE(a->strs, a->cap_strs, 1, 16))
			return -ENOMEM;
		a->strs[a->nr_strs++] = 0;
	}
	if (ARRAY_RESERVE(a->strs, a->cap_strs, a->nr_strs + len, 16))
		return -ENOMEM;
	memcpy(a->strs + a->nr_strs, s, len);
	*out = (uint32_t)a->nr_strs;
	a->nr_strs += len;
	/* on a hash collision the first string keeps the slot; the second is not shared */
	if (!u64map__get(&a->str_index, h, &v) && u64map__set(&a->str_index, h, *out))
		return -ENOMEM;
	return 0;
}

static void snap_summary(struct psnap *ps, const struct fr_dump *d, const struct fr_snapshot *sn)
{
	memset(ps, 0, sizeof(*ps));
	ps->present = true;
	ps->taken = sn->taken;
	ps->exited = sn->exited;
	ps->time_ns = sn->time_ns;
	ps->samples = sn->samples;
	ps->tid = FR_UNK;
	ps->api_frame = -1;
	ps->nr_threads = (int)(sn->nr_threads_all > INT32_MAX ? INT32_MAX : sn->nr_threads_all);
	snprintf(ps->ptrace_error, sizeof(ps->ptrace_error), "%s", sn->ptrace_error);
	snprintf(ps->python, sizeof(ps->python), "%s", sn->python);
	for (size_t i = 0; i < sn->nr_threads; i++) {
		const struct fr_stack_thread *t = &d->threads[sn->first_thread + i];

		if (fr_where_is_wait(t->where) && t->progress != FR_PROG_YES)
			ps->nr_waits++;
	}
	if (sn->issuing >= 0) {
		const struct fr_stack_thread *t = &d->threads[sn->issuing];

		ps->tid = t->tid;
		memcpy(ps->name, t->name, sizeof(ps->name));
		ps->state = t->state;
		ps->where = t->where;
		ps->progress = t->progress;
		ps->main = t->main;
		snprintf(ps->api, sizeof(ps->api), "%s", t->api);
	}
}

int fold_stacks(struct fr_analysis *a, int pi, const struct fr_dump *d)
{
	struct proc *p = &a->procs[pi];
	const struct fr_snapshot *att = NULL, *last;
	int err;

	snprintf(p->stacks_error, sizeof(p->stacks_error), "%s", d->stacks_error);
	p->stacks_pending = d->stacks_pending;
	if (!d->nr_snaps)
		return 0;
	for (size_t i = 0; i < d->nr_snaps && !att; i++)
		if (d->snaps[i].taken == FR_TAKEN_ATTACH)
			att = &d->snaps[i];
	last = &d->snaps[d->nr_snaps - 1];
	if (att)
		snap_summary(&p->snap_attach, d, att);
	snap_summary(&p->snap, d, last);
	a->nr_with_stacks++;
	if (last->issuing < 0 || !last->nr_frames)
		return 0;
	if (ARRAY_RESERVE(a->frames, a->cap_frames, a->nr_frames + last->nr_frames, 16))
		return -ENOMEM;
	p->snap.frames = a->nr_frames;
	p->snap.nr_frames = last->nr_frames;
	p->snap.more_frames = last->more_frames;
	p->snap.api_frame = -1;
	for (int i = 0; p->snap.api[0] && i < last->nr_frames; i++)
		if (!strcmp(last->frames[i].func, p->snap.api))
			p->snap.api_frame = i;
	for (int i = p->snap.api_frame + 1; p->snap.api_frame >= 0 && i < last->nr_frames; i++) {
		const struct fr_frame *f = &last->frames[i];

		/* a native caller by its return address (same binary on every rank), a Python
		 * one by function and line */
		p->snap.sig = (p->snap.sig ^ str_hash(f->func) ^ (uint64_t)f->line ^
			       (f->kind == FR_FRAME_NATIVE ? (uint64_t)f->module_off : 0)) *
			      1099511628211ULL;
	}
	for (int i = 0; i < last->nr_frames; i++) {
		const struct fr_frame *f = &last->frames[i];
		struct kframe *k = &a->frames[a->nr_frames++];

		k->kind = f->kind;
		k->line = f->line;
		k->module_off = f->module_off;
		k->unrecoverable = f->unrecoverable;
		if ((err = intern(a, f->func, &k->func)) || (err = intern(a, f->file, &k->file)) ||
		    (err = intern(a, f->module, &k->module)))
			return err;
	}
	return 0;
}

int fold_pystacks(struct fr_analysis *a, const struct fr_dump *d)
{
	int err;

	if (!d->nr_pystacks)
		return 0;
	if ((int)d->nr_pystacks > a->py_map_cap) {
		uint32_t *m = realloc(a->py_map, d->nr_pystacks * sizeof(*m));

		if (!m)
			return -ENOMEM;
		a->py_map = m;
		a->py_map_cap = (int)d->nr_pystacks;
	}
	a->nr_with_pyframes++;
	for (size_t i = 0; i < d->nr_pystacks; i++) {
		const struct fr_pystack *s = &d->pystacks[i];
		uint64_t h = s->hash ? s->hash : 1, v;
		struct kpystack *k;
		bool same = false;

		/* equal content hashes equal in every dump; a collision is checked, then kept
		 * apart (unindexed) */
		if (u64map__get(&a->pystack_index, h, &v)) {
			k = &a->pystacks[v - 1];
			same = k->nr == s->nr && k->more == s->more;
			for (int f = 0; same && f < s->nr; f++) {
				const struct kframe *kf = &a->frames[k->first + f];
				const struct fr_pyframe *pf = &d->pyframes[s->first + f];

				same = kf->line == pf->line && !strcmp(kstr(a, kf->func), pf->name) &&
				       !strcmp(kstr(a, kf->file), pf->file);
			}
			if (same) {
				a->py_map[i] = (uint32_t)v;
				continue;
			}
		}
		if (ARRAY_RESERVE(a->pystacks, a->cap_pystacks, a->nr_pystacks + 1, 16) ||
		    ARRAY_RESERVE(a->frames, a->cap_frames, a->nr_frames + s->nr, 16))
			return -ENOMEM;
		k = &a->pystacks[a->nr_pystacks];
		k->hash = h;
		k->first = a->nr_frames;
		k->nr = s->nr;
		k->more = s->more;
		for (int f = 0; f < s->nr; f++) {
			const struct fr_pyframe *pf = &d->pyframes[s->first + f];
			struct kframe *kf = &a->frames[a->nr_frames++];

			memset(kf, 0, sizeof(*kf));
			kf->kind = FR_FRAME_PYTHON;
			kf->line = pf->line;
			kf->module_off = FR_UNK;
			if ((err = intern(a, pf->name, &kf->func)) || (err = intern(a, pf->file, &kf->file)))
				return err;
		}
		a->nr_pystacks++;
		a->py_map[i] = (uint32_t)a->nr_pystacks;
		if (!u64map__get(&a->pystack_index, h, &v) &&
		    u64map__set(&a->pystack_index, h, (uint64_t)a->nr_pystacks))
			return -ENOMEM;
	}
	return 0;
}

/* ------------------------------------------------------------------ the rules */

/* The proc's newest snapshot can speak for it now: present, issuing thread known, alive. */
static bool snap_known(const struct proc *p)
{
	return p->snap.present && !p->snap.exited && p->snap.tid != FR_UNK &&
	       p->snap.where != FR_WHERE_UNKNOWN;
}

static bool proc_alive(const struct proc *p)
{
	return !p->dead && p->state != FR_PROC_EXITED && p->state != FR_PROC_KILLED;
}

static bool blocked(const struct psnap *s)
{
	return fr_where_is_wait(s->where) && s->progress != FR_PROG_YES;
}

static bool same_call(const struct psnap *x, const struct psnap *y)
{
	return x->where == y->where && !strcmp(x->api, y->api);
}

/* the same call reached the same way */
static bool same_wait(const struct psnap *x, const struct psnap *y)
{
	return same_call(x, y) && x->sig == y->sig;
}

/* culprits named by a ring rule of higher causal rank (the stacks then only refine) */
static bool named_by_ring(const struct fr_analysis *a, int pi, int below_rule)
{
	for (int i = 0; i < a->nr_verdicts; i++) {
		const struct verdict *v = &a->verdicts[i];

		if (v->rule >= below_rule)
			continue;
		for (int k = 0; k < v->nr_who; k++)
			if (v->who[k][2] == pi)
				return true;
	}
	return false;
}

static bool any_ring_verdict_below(const struct fr_analysis *a, int rule)
{
	for (int i = 0; i < a->nr_verdicts; i++)
		if (a->verdicts[i].rule < rule)
			return true;
	return false;
}

/* a collective the rings show unfinished, or a call stuck past --stuck-ms: the rings see the
 * hang too (a thread caught inside a short call by the dump is no such evidence) */
static bool rings_show_unfinished(const struct fr_analysis *a)
{
	for (int i = 0; i < a->nr_aggs; i++)
		if (a->aggs[i].completed < a->aggs[i].entered)
			return true;
	for (int i = 0; i < a->nr_verdicts; i++)
		if (a->verdicts[i].rule == RULE_STUCK)
			return true;
	return false;
}

static bool rings_show_stuck_call(const struct fr_analysis *a)
{
	for (int i = 0; i < a->nr_verdicts; i++)
		if (a->verdicts[i].rule == RULE_STUCK)
			return true;
	return false;
}

/* The most common call (where, api) among the non-progressing waits: the representative proc,
 * its count; ties go to the smaller api name so the verdict does not depend on file order. */
static int majority_wait(const struct fr_analysis *a, int *count)
{
	struct u64map counts = { 0 };
	int best = -1, best_n = 0;

	*count = 0;
	for (int pi = 0; pi < a->nr_procs; pi++) {
		const struct proc *p = &a->procs[pi];
		uint64_t key, v = 0;

		if (!proc_alive(p) || !snap_known(p) || !blocked(&p->snap))
			continue;
		key = str_hash(p->snap.api) ^ ((uint64_t)p->snap.where << 56) ^ p->snap.sig;
		key = key ? key : 1;
		u64map__get(&counts, key, &v);
		/* the value: count in the low 32 bits, first proc + 1 in the high ones */
		if (!v)
			v = (uint64_t)(pi + 1) << 32;
		v++;
		if (u64map__set(&counts, key, v)) {
			u64map__clear(&counts);
			return -ENOMEM;
		}
	}
	for (size_t it = 0; ; ) {
		uint64_t v;
		int n, rep;

		if (!u64map__next(&counts, &it, NULL, &v))
			break;
		n = (int)(v & 0xffffffff);
		rep = (int)(v >> 32) - 1;
		if (n > best_n || (n == best_n && best >= 0 &&
				   strcmp(a->procs[rep].snap.api, a->procs[best].snap.api) < 0)) {
			best = rep;
			best_n = n;
		}
	}
	u64map__clear(&counts);
	*count = best_n;
	return best;
}

static int first_unknown(const struct fr_analysis *a)
{
	for (int pi = 0; pi < a->nr_procs; pi++)
		if (proc_alive(&a->procs[pi]) && !snap_known(&a->procs[pi]))
			return pi;
	return -1;
}

static void stack_confidence(struct fr_analysis *a, struct verdict *v, bool confirmed)
{
	if (v->ev.stk.unknown >= 0)
		set_low(v, LOW_STACK_UNKNOWN, v->ev.stk.unknown, FR_UNK);
	else if (v->ev.stk.one_sample)
		set_low(v, LOW_ONE_SAMPLE, -1, FR_UNK);
	if (!confirmed) {
		v->stacks_only = true;
		v->medium = true;
	}
	(void)a;
}

static int rule_odd_stack(struct fr_analysis *a)
{
	struct ivec odd = { 0 }, in = { 0 };
	int rep, n_in, known = 0, err = -ENOMEM;
	bool odd_waits = false, all_named = true, one_sample = false, confirmed = true;
	struct verdict *v;

	rep = majority_wait(a, &n_in);
	if (rep < -1)
		return rep;
	if (rep < 0)
		return 0;
	for (int pi = 0; pi < a->nr_procs; pi++) {
		const struct proc *p = &a->procs[pi];

		if (!proc_alive(p) || !snap_known(p))
			continue;
		known++;
		if (same_wait(&p->snap, &a->procs[rep].snap)) {
			if (p->snap.progress == FR_PROG_YES)
				continue;	/* running through that call: neither side */
			if (p->snap.progress == FR_PROG_UNKNOWN)
				one_sample = true;
			if (ivec_push(&in, pi))
				goto out;
			continue;
		}
		if (ivec_push(&odd, pi))
			goto out;
		odd_waits |= fr_where_is_wait(p->snap.where);
		all_named &= named_by_ring(a, pi, RULE_ODD_STACK);
	}
	err = 0;
	/* a strict majority waits; on a tie, only when the others are in no wait at all (they
	 * are not waiting on anyone: the waiters wait on them) */
	if (!odd.n || n_in < odd.n || (n_in == odd.n && odd_waits))
		goto out;
	/* a ring rule already names these ranks: their stacks go into its detail instead */
	if (all_named)
		goto out;
	for (int i = 0; i < odd.n; i++)
		confirmed &= named_by_ring(a, odd.v[i], RULE__COUNT) &&
			     !named_by_ring(a, odd.v[i], RULE_ODD_STACK);
	if (!(v = verdict_new(a, RULE_ODD_STACK, -1, FR_UNK, a->procs[rep].snap.api))) {
		err = -ENOMEM;
		goto out;
	}
	for (int i = 0; i < odd.n; i++)
		who_proc(a, v, odd.v[i]);
	who_sort(v);
	snprintf(v->ev.stk.api, sizeof(v->ev.stk.api), "%s", a->procs[rep].snap.api);
	v->ev.stk.where = a->procs[rep].snap.where;
	v->ev.stk.nr_in = n_in;
	v->ev.stk.nr_known = known;
	v->ev.stk.tie = n_in == odd.n;
	v->ev.stk.one_sample = one_sample;
	v->ev.stk.unknown = first_unknown(a);
	v->others = in;
	in = (struct ivec){ 0 };
	stack_confidence(a, v, confirmed);
	check_dropped(a, v);
out:
	free(odd.v);
	free(in.v);
	return err;
}

static int rule_no_progress(struct fr_analysis *a)
{
	struct verdict *v;
	int first = -1, known = 0;
	bool same = true, one_sample = false;

	/* a culprit named before explains why everyone waits */
	if (any_ring_verdict_below(a, RULE_NO_PROGRESS))
		return 0;
	for (int pi = 0; pi < a->nr_procs; pi++) {
		const struct proc *p = &a->procs[pi];

		if (!proc_alive(p) || !snap_known(p))
			continue;
		/* one sample cannot tell: still never healthy, said with low confidence */
		if (!blocked(&p->snap))
			return 0;
		one_sample |= p->snap.progress == FR_PROG_UNKNOWN;
		if (first < 0)
			first = pi;
		else if (!same_call(&p->snap, &a->procs[first].snap))
			same = false;
		known++;
	}
	if (first < 0)
		return 0;
	if (!(v = verdict_new(a, RULE_NO_PROGRESS, -1, FR_UNK, same ? a->procs[first].snap.api :
			      NULL)))
		return -ENOMEM;
	for (int pi = 0; pi < a->nr_procs; pi++)
		if (proc_alive(&a->procs[pi]) && snap_known(&a->procs[pi]))
			who_proc(a, v, pi);
	who_sort(v);
	if (same)
		snprintf(v->ev.stk.api, sizeof(v->ev.stk.api), "%s", a->procs[first].snap.api);
	v->ev.stk.where = a->procs[first].snap.where;
	v->ev.stk.nr_in = known;
	v->ev.stk.nr_known = known;
	v->ev.stk.unknown = first_unknown(a);
	v->ev.stk.one_sample = one_sample;
	stack_confidence(a, v, rings_show_unfinished(a));
	check_dropped(a, v);
	return 0;
}

bool any_stacks_pending(const struct fr_analysis *a)
{
	for (int pi = 0; pi < a->nr_procs; pi++)
		if (a->procs[pi].stacks_pending)
			return true;
	return false;
}

/* "stacks pending in the dumps of ranks 3, 5 (state-first files: the recorder was still
 * taking them): their stacks unknown": one line, the first ranks named */
#define PENDING_NAMED	8
int stacks_pending_note(struct fr_analysis *a)
{
	char *line = NULL, *names = NULL;
	size_t len = 0;
	int n = 0;
	FILE *f;

	for (int pi = 0; pi < a->nr_procs; pi++)
		n += a->procs[pi].stacks_pending;
	if (!n)
		return 0;
	f = open_memstream(&names, &len);
	if (!f)
		return -ENOMEM;
	for (int pi = 0, k = 0; pi < a->nr_procs; pi++) {
		const struct proc *p = &a->procs[pi];

		if (!p->stacks_pending || k++ >= PENDING_NAMED)
			continue;
		if (p->global_rank != FR_UNK)
			fprintf(f, "%s%" PRId64, k > 1 ? ", " : "", p->global_rank);
		else
			fprintf(f, "%s%s:%" PRId64, k > 1 ? ", " : "", p->host, p->pid);
	}
	if (n > PENDING_NAMED)
		fprintf(f, " and %d more", n - PENDING_NAMED);
	if (fclose(f)) {
		free(names);
		return -ENOMEM;
	}
	if (asprintf(&line, "stacks pending in the dump%s of rank%s %s (state-first file%s: the "
		     "recorder was still taking them); %s stacks unknown", n == 1 ? "" : "s",
		     n == 1 ? "" : "s", names, n == 1 ? "" : "s", n == 1 ? "its" : "their") < 0)
		line = NULL;
	free(names);
	return analysis_note(a, line);
}

int rule_stacks(struct fr_analysis *a)
{
	int err;

	if (!a->nr_with_stacks)
		return 0;
	/* rings with collectives whose own times show nobody waiting past the threshold: the
	 * stacks caught a running job (ranks asleep between steps, others briefly in the step's
	 * collective), whatever the moment of each dump */
	if (a->nr_aggs && !a->hang_seen && !rings_show_stuck_call(a))
		return 0;
	if ((err = rule_odd_stack(a)))
		return err;
	return rule_no_progress(a);
}

/* A hang the rings show and nothing else explains: every rank of a comm entered one
 * collective and none completed it, one of them waiting past the stuck threshold at its own
 * dump, and no rule found anything (no stacks in the dumps, no call the rings show inside,
 * no socket stuck). Said as no_progress from the rings, blaming no subset, never "no problem
 * found". One comm: the first in order that shows it. */
int rule_ring_hang(struct fr_analysis *a)
{
	if (!a->hang_seen)
		return 0;
	/* a straggler slows a job, it does not hang it: the hang is still to be said */
	for (int i = 0; i < a->nr_verdicts; i++)
		if (a->verdicts[i].rule != RULE_STRAGGLER)
			return 0;
	for (int k = 0; k < a->nr_comms; k++) {
		int cid = a->comm_order[k], n = 0, ai;
		const struct comm *c = &a->comms[cid];
		int64_t s = FR_UNK, wmin = FR_UNK, wmax = FR_UNK;
		bool same = true;
		struct verdict *v;

		for (int i = 0; i < c->members.n && same; i++) {
			const struct member *m = &a->members[c->members.v[i]];
			const struct proc *p = &a->procs[m->proc];
			int64_t w;

			if (!m->placed || m->init_failed)
				continue;
			if (p->dead || m->st_seq == FR_UNK || (s != FR_UNK && m->st_seq != s)) {
				same = false;
				continue;
			}
			s = m->st_seq;
			n++;
			if (m->st_created == FR_UNK || p->dump_time_ns == FR_UNK)
				continue;
			w = ns_diff(p->dump_time_ns, m->st_created);
			if (wmin == FR_UNK || w < wmin)
				wmin = w;
			if (wmax == FR_UNK || w > wmax)
				wmax = w;
		}
		if (!same || n < 2 || wmax == FR_UNK || wmax <= a->opts.stuck_ns)
			continue;
		ai = agg_find(a, cid, s);
		if (!(v = verdict_new(a, RULE_NO_PROGRESS, cid, s,
				      ai >= 0 ? fr_op_name(a->aggs[ai].sig0.op) : NULL)))
			return -ENOMEM;
		for (int i = 0; i < c->members.n; i++) {
			const struct member *m = &a->members[c->members.v[i]];

			if (m->placed && !m->init_failed)
				who_member(a, v, c->members.v[i]);
		}
		who_sort(v);
		v->ev.stk.from_rings = true;
		v->ev.stk.wait_min = wmin;
		v->ev.stk.wait_max = wmax;
		v->ev.stk.unknown = -1;
		check_dropped(a, v);
		return 0;
	}
	return 0;
}

/* Threads blocked in NCCL/CUDA waits at attach while the ring holds nothing: the job was
 * already hung, and the rings cannot say by whom. Every entry of a ring was made after tptrace
 * started recording (a call already inside at attach makes none), so one entry is progress
 * after attach. The attach snapshot's own time is no boundary: it is taken beside recording,
 * up to its sample time later, and a busy job makes entries meanwhile. */
int rule_attached_after(struct fr_analysis *a)
{
	struct verdict *v = NULL;
	bool hang_shown = a->hang_seen;
	int64_t usual;

	/* a late arrival shows a hang when it left ranks waiting at their dumps */
	for (int i = 0; i < a->nr_verdicts; i++) {
		const struct verdict *x = &a->verdicts[i];

		hang_shown |= x->rule == RULE_LATE ? x->ev.late.stuck :
			      x->rule != RULE_STRAGGLER && x->rule != RULE_NOT_ONE_MOMENT &&
			      x->rule != RULE_RANKS_UNKNOWN;
	}

	for (int pi = 0; pi < a->nr_procs; pi++) {
		const struct proc *p = &a->procs[pi];
		const struct psnap *s = &p->snap_attach;

		if (!s->present || !s->nr_waits || s->time_ns == FR_UNK || p->dead)
			continue;
		if (p->has_last)
			continue;
		/* no call since attach proves a hang only once the job's threshold has passed
		 * since (both times on its host's clock): a healthy rank caught in a second-long
		 * step by a recorder that attached a moment before the dump has none either.
		 * Sooner, it is said only where something else shows the hang */
		if ((p->dump_time_ns == FR_UNK ||
		     ns_diff(p->dump_time_ns, s->time_ns) <= timing_max_skew(a, &usual)) &&
		    !hang_shown)
			continue;
		if (!v && !(v = verdict_new(a, RULE_ATTACHED_AFTER, -1, FR_UNK, NULL)))
			return -ENOMEM;
		who_proc(a, v, pi);
	}
	if (v)
		who_sort(v);
	return 0;
}
