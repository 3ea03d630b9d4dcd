// SPDX-License-Identifier: MIT
/* fr_text_stacks: the words of the stack rules (odd_stack, no_progress, attached_after_hang)
 * and of a rank's stack in any verdict's detail; fr_text.c holds the rest and the table. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "fr_analyze_int.h"

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

static void print_where(FILE *f, const struct psnap *s)
{
	switch (s->where) {
	case FR_WHERE_NCCL: case FR_WHERE_CUDA: case FR_WHERE_DRIVER:
		fprintf(f, "inside %s", s->api[0] ? s->api : fr_where_name(s->where));
		break;
	case FR_WHERE_ALLOCATOR:
		fprintf(f, "in the CUDA caching allocator");
		break;
	case FR_WHERE_PYTHON:
		fprintf(f, "running Python code, not in NCCL/CUDA");
		break;
	case FR_WHERE_IDLE:
		fprintf(f, "idle in a wait outside NCCL/CUDA");
		break;
	case FR_WHERE_RUNNING:
		fprintf(f, "running native code outside NCCL/CUDA");
		break;
	default:
		fprintf(f, "somewhere unknown");
	}
}

static void print_progress(FILE *f, const struct psnap *s)
{
	if (s->progress == FR_PROG_NONE)
		fprintf(f, "no progress over %" PRId64 " samples", s->samples);
	else if (s->progress == FR_PROG_YES)
		fprintf(f, "progressing");
	else
		fprintf(f, "progress unknown");
}

/* "Python frames: f (file:line) < g (...); native frames: h (libx.so+0x12) < ..." (innermost
 * first; at most py Python and nat native frames) */
static void print_frames(FILE *f, const struct fr_analysis *a, const struct psnap *s, int py,
			 int nat)
{
	int np = 0, nn = 0;

	for (int i = 0; i < s->nr_frames && np < py; i++) {
		const struct kframe *k = &a->frames[s->frames + i];

		if (k->kind != FR_FRAME_PYTHON)
			continue;
		fprintf(f, "%s%s (%s:", np ? " < " : "Python frames: ",
			k->func ? kstr(a, k->func) : "?", k->file ? kstr(a, k->file) : "?");
		if (k->line > 0)
			fprintf(f, "%d)", k->line);
		else
			fprintf(f, "?)");
		np++;
	}
	for (int i = 0; i < s->nr_frames && nn < nat; i++) {
		const struct kframe *k = &a->frames[s->frames + i];

		if (k->kind != FR_FRAME_NATIVE)
			continue;
		if (k->unrecoverable) {
			fprintf(f, "%sunrecoverable: uretprobe trampoline", nn ? " < " :
				np ? "; native frames: " : "native frames: ");
			nn++;
			continue;
		}
		fprintf(f, "%s%s (%s", nn ? " < " : np ? "; native frames: " : "native frames: ",
			k->func ? kstr(a, k->func) : "??",
			k->module ? base_name(kstr(a, k->module)) : "?");
		if (k->module_off != FR_UNK)
			fprintf(f, "+0x%" PRIx64, (uint64_t)k->module_off);
		fprintf(f, ")");
		nn++;
	}
	if (!np && !nn)
		fprintf(f, "no frames");
}

/* "thread "python3" tid 10001 (main) is idle in a wait outside NCCL/CUDA, no progress over 3
 * samples; Python frames: ..." */
void print_stack(FILE *f, const struct fr_analysis *a, const struct proc *p)
{
	const struct psnap *s = &p->snap;

	if (!s->present) {
		fprintf(f, "no stacks in its dump%s%s", p->stacks_error[0] ? ": " : "",
			p->stacks_error);
		return;
	}
	if (s->tid == FR_UNK) {
		fprintf(f, "its stack names no issuing thread");
		if (s->ptrace_error[0])
			fprintf(f, " (%s)", s->ptrace_error);
		return;
	}
	fprintf(f, "thread \"%s\" tid %" PRId64 "%s is ", s->name, s->tid, s->main ? " (main)" : "");
	print_where(f, s);
	fprintf(f, ", ");
	print_progress(f, s);
	if (s->ptrace_error[0]) {
		fprintf(f, "; frames not read (%s)", s->ptrace_error);
		return;
	}
	fprintf(f, "; ");
	print_frames(f, a, s, 3, 6);
	if (s->exited || s->taken == FR_TAKEN_ATTACH)
		fprintf(f, " (the snapshot at attach: the process exited before the dump)");
}

static void print_procs(FILE *f, const struct fr_analysis *a, const int *pis, int n)
{
	struct verdict tmp = { 0 };

	for (int i = 0; i < n; i++)
		who_proc((struct fr_analysis *)a, &tmp, pis[i]);
	who_sort(&tmp);
	print_who(f, a, &tmp, false);
	free(tmp.who);
}

/* why a proc's stack says nothing: "ptrace: Operation not permitted" */
void print_unknown_why(FILE *f, const struct proc *p)
{
	if (!p->snap.present)
		fprintf(f, "no stacks in its dump%s%s", p->stacks_error[0] ? ": " : "",
			p->stacks_error);
	else if (p->snap.exited)
		fprintf(f, "it exited during the snapshot");
	else if (p->snap.ptrace_error[0])
		fprintf(f, "%s", p->snap.ptrace_error);
	else
		fprintf(f, "where its issuing thread is could not be told");
}

/* "inside ncclAllReduce from all_reduce (distributed_c10d.py:2050)": the api and its first
 * caller (the first Python one when there is one) */
static void print_wait(FILE *f, const struct fr_analysis *a, const struct psnap *s)
{
	const struct kframe *caller = NULL;

	fprintf(f, "inside %s", s->api[0] ? s->api : fr_where_name(s->where));
	for (int i = s->api_frame + 1; s->api_frame >= 0 && i < s->nr_frames; i++) {
		const struct kframe *k = &a->frames[s->frames + i];

		if (!caller)
			caller = k;
		if (k->kind == FR_FRAME_PYTHON) {
			caller = k;
			break;
		}
	}
	if (!caller)
		return;
	fprintf(f, " from %s", caller->func ? kstr(a, caller->func) : "??");
	if (caller->kind == FR_FRAME_PYTHON)
		fprintf(f, " (%s:%d)", base_name(kstr(a, caller->file)), caller->line);
	else if (caller->module_off != FR_UNK)
		fprintf(f, " (%s+0x%" PRIx64 ")", base_name(kstr(a, caller->module)),
			(uint64_t)caller->module_off);
}

void headline_odd_stack(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	print_who(f, a, v, true);
	fprintf(f, " %s not where %s%d of %d ranks wait%s: ", v->nr_who == 1 ? "is" : "are",
		v->ev.stk.tie ? "only " : "", v->ev.stk.nr_in, v->ev.stk.nr_known,
		v->ev.stk.tie ? " (a tie)" : "");
	if (v->others.n)
		print_wait(f, a, &a->procs[v->others.v[0]].snap);
	else
		fprintf(f, "inside %s", v->ev.stk.api);
}

void detail_odd_stack(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	const struct proc *rep = v->others.n ? &a->procs[v->others.v[0]] : NULL;

	for (int i = 0; i < v->nr_who && i < 8; i++) {
		const struct proc *p = &a->procs[v->who[i][2]];

		print_proc_label(f, p);
		fprintf(f, ": ");
		print_stack(f, a, p);
		fprintf(f, "; ");
		print_last_entry(f, a, p);
		fprintf(f, "\n");
	}
	if (v->nr_who > 8)
		fprintf(f, "... and %d more ranks outside it\n", v->nr_who - 8);
	if (rep) {
		print_procs(f, a, v->others.v, v->others.n);
		fprintf(f, " %s ", v->others.n == 1 ? "is" : "are");
		print_wait(f, a, &rep->snap);
		fprintf(f, ", ");
		print_progress(f, &rep->snap);
		fprintf(f, "; ");
		print_proc_label(f, rep);
		fprintf(f, "'s ");
		print_frames(f, a, &rep->snap, 2, 3);
		fprintf(f, "\n");
	}
}

void headline_no_progress(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	const struct proc *p = &a->procs[v->who[0][2]];

	print_who(f, a, v, false);
	if (v->ev.stk.from_rings) {
		fprintf(f, " all entered %s seq %" PRId64 " on comm %s and none completed it: a hang "
			   "inside NCCL, the GPU or the network (nothing in the dumps says which rank)",
			v->op[0] ? v->op : "the collective", v->seq, short_id(a->comms[v->comm].id));
		return;
	}
	if (v->ev.stk.one_sample)
		fprintf(f, " %s all inside %s (progress unknown: one stack sample)",
			v->nr_who == 1 ? "is" : "are", v->ev.stk.api[0] ? v->ev.stk.api :
			"NCCL/CUDA calls");
	else if (v->ev.stk.api[0])
		fprintf(f, " %s all inside %s and none progressed over %" PRId64 " samples: a hang "
			   "inside NCCL or the network", v->nr_who == 1 ? "is" : "are",
			v->ev.stk.api, p->snap.samples);
	else
		fprintf(f, " %s all blocked in NCCL/CUDA calls and none progressed over %" PRId64
			   " samples", v->nr_who == 1 ? "is" : "are", p->snap.samples);
}

void detail_no_progress(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	int shown = 0;

	if (v->ev.stk.from_rings) {
		fprintf(f, "they had waited in it %.1f-%.1f s at their own dumps (threshold %.1f s); ",
			v->ev.stk.wait_min / 1e9, v->ev.stk.wait_max / 1e9, a->opts.stuck_ns / 1e9);
		if (a->nr_with_stacks)
			fprintf(f, "their stacks name no wait that tells them apart");
		else
			fprintf(f, "no stacks in the dumps to show where each waits (%s)",
				any_stacks_pending(a) ? "pending: the recorder was still taking them" :
				"recorded with --no-stacks?");
		return;
	}

	/* the calls, one line per distinct one (first ranks only) */
	for (int i = 0; i < v->nr_who && shown < 8; i++) {
		const struct proc *p = &a->procs[v->who[i][2]];
		bool seen = false;

		for (int k = 0; k < i && !seen; k++)
			seen = !strcmp(a->procs[v->who[k][2]].snap.api, p->snap.api);
		if (seen)
			continue;
		shown++;
		print_proc_label(f, p);
		fprintf(f, "%s: ", v->ev.stk.api[0] ? " (as every rank)" : "");
		print_stack(f, a, p);
		fprintf(f, "\n");
	}
	if (v->ev.stk.unknown >= 0) {
		print_proc_label(f, &a->procs[v->ev.stk.unknown]);
		fprintf(f, ": its stack is unknown (");
		print_unknown_why(f, &a->procs[v->ev.stk.unknown]);
		fprintf(f, ")\n");
	}
}

void headline_attached(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	print_who(f, a, v, false);
	fprintf(f, " %s already blocked in NCCL/CUDA calls when tptrace attached and %s "
		   "no call made since: the rings cannot tell who hung the job, the stacks can",
		v->nr_who == 1 ? "was" : "were", v->nr_who == 1 ? "its ring holds" : "their rings hold");
}

void detail_attached(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	for (int i = 0; i < v->nr_who && i < 4; i++) {
		const struct proc *p = &a->procs[v->who[i][2]];

		print_proc_label(f, p);
		fprintf(f, ": %d thread%s in NCCL/CUDA waits at attach\n", p->snap_attach.nr_waits,
			p->snap_attach.nr_waits == 1 ? "" : "s");
	}
	if (v->nr_who > 4)
		fprintf(f, "... and %d more ranks\n", v->nr_who - 4);
}

/* the healthy report's word on the stacks: what they show, counted */
void print_stacks_health(FILE *f, const struct fr_analysis *a)
{
	int prog = 0, blocked = 0, known = 0;

	if (!a->nr_with_stacks) {
		fprintf(f, "; no stacks in the dumps");
		return;
	}
	for (int pi = 0; pi < a->nr_procs; pi++) {
		const struct psnap *s = &a->procs[pi].snap;

		if (!s->present || s->where == FR_WHERE_UNKNOWN)
			continue;
		known++;
		prog += s->progress == FR_PROG_YES;
		blocked += fr_where_is_wait(s->where) && s->progress == FR_PROG_NONE;
	}
	fprintf(f, "; stacks of %d rank%s: %d progressing, %d blocked in NCCL/CUDA without "
		   "progress", known, known == 1 ? "" : "s", prog, blocked);
}
