// SPDX-License-Identifier: MIT
/* fr_report: the text report and the --json report, both worded by fr_text. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "textwrap.h"
#include "fr_analyze_int.h"

/* the culprit's frames as the dump has them (the fields the analysis keeps), or null: the
 * first culprit's newest snapshot, when the process was alive to take it */
static void add_stack(cJSON *o, const struct fr_analysis *a, const struct verdict *v)
{
	const struct proc *p;
	cJSON *arr;

	if (!v->nr_who || v->who[0][2] < 0 || v->rule == RULE_ATTACHED_AFTER ||
	    v->rule == RULE_DEAD_RANK || v->rule == RULE_CORRUPT) {
		cJSON_AddNullToObject(o, "stack");
		return;
	}
	p = &a->procs[v->who[0][2]];
	if (!p->snap.present || p->snap.exited || p->snap.tid == FR_UNK) {
		cJSON_AddNullToObject(o, "stack");
		return;
	}
	arr = cJSON_AddArrayToObject(o, "stack");
	for (int i = 0; arr && i < p->snap.nr_frames; i++) {
		const struct kframe *k = &a->frames[p->snap.frames + i];
		cJSON *fo = cJSON_CreateObject();
		char buf[32];

		if (!fo)
			return;
		cJSON_AddItemToArray(arr, fo);
		cJSON_AddStringToObject(fo, "kind", k->kind == FR_FRAME_PYTHON ? "python" :
					k->kind == FR_FRAME_NATIVE ? "native" : "unknown");
		if (k->func)
			cJSON_AddStringToObject(fo, "func", kstr(a, k->func));
		else
			cJSON_AddNullToObject(fo, "func");
		if (k->kind == FR_FRAME_PYTHON) {
			if (k->file)
				cJSON_AddStringToObject(fo, "file", kstr(a, k->file));
			else
				cJSON_AddNullToObject(fo, "file");
			if (k->line > 0)
				cJSON_AddNumberToObject(fo, "line", k->line);
			else
				cJSON_AddNullToObject(fo, "line");
			continue;
		}
		if (k->module)
			cJSON_AddStringToObject(fo, "module", kstr(a, k->module));
		else
			cJSON_AddNullToObject(fo, "module");
		if (k->module_off != FR_UNK) {
			snprintf(buf, sizeof(buf), "0x%" PRIx64, (uint64_t)k->module_off);
			cJSON_AddStringToObject(fo, "module_off", buf);
		} else {
			cJSON_AddNullToObject(fo, "module_off");
		}
		if (k->unrecoverable)
			cJSON_AddStringToObject(fo, "unrecoverable", "uretprobe trampoline");
	}
}

/* --py-stacks: the culprit's Python frames ("frames" of its entry, PyTorch's shape) of the
 * collective it is stuck on, else of its newest one; null when its dump has none */
static void add_pystack(cJSON *po, const struct fr_analysis *a, uint32_t stack)
{
	const struct kpystack *k = &a->pystacks[stack - 1];
	cJSON *arr;

	cJSON_AddBoolToObject(po, "truncated", k->more);
	arr = cJSON_AddArrayToObject(po, "frames");
	for (int i = 0; arr && i < k->nr; i++) {
		const struct kframe *fr = &a->frames[k->first + i];
		cJSON *fo = cJSON_CreateObject();

		if (!fo)
			return;
		if (fr->func)
			cJSON_AddStringToObject(fo, "name", kstr(a, fr->func));
		else
			cJSON_AddNullToObject(fo, "name");
		if (fr->file)
			cJSON_AddStringToObject(fo, "filename", kstr(a, fr->file));
		else
			cJSON_AddNullToObject(fo, "filename");
		if (fr->line > 0)
			cJSON_AddNumberToObject(fo, "line", fr->line);
		else
			cJSON_AddNullToObject(fo, "line");
		cJSON_AddItemToArray(arr, fo);
	}
}

/* --py-stacks: the culprit's Python frames ("frames" of its entry, PyTorch's shape) of the
 * collective it is stuck on, else of its newest one; and where a waiting rank called the
 * verdict's collective. null when the dumps have none. */
static void add_py_frames(cJSON *o, const struct fr_analysis *a, const struct verdict *v)
{
	struct py_pick pick;
	bool have = verdict_pyframes(a, v, &pick);
	uint32_t waiting;
	int wm = -1;
	cJSON *po;

	if (have) {
		po = cJSON_AddObjectToObject(o, "py_frames");
		if (!po)
			return;
		cJSON_AddNumberToObject(po, "global_rank", (double)v->who[0][0]);
		cJSON_AddStringToObject(po, "op", fr_op_name(pick.op));
		cJSON_AddNumberToObject(po, "collective_seq_id", (double)pick.seq);
		cJSON_AddStringToObject(po, "entry", pick.stuck ? "oldest_not_completed" : "newest");
		add_pystack(po, a, pick.stack);
	} else {
		const char *why = verdict_pyframes_missing(a, v);

		cJSON_AddNullToObject(o, "py_frames");
		if (why)
			cJSON_AddStringToObject(o, "py_frames_missing", why);
	}
	waiting = verdict_waiting_pyframes(a, v, &wm);
	if (!waiting || (have && pick.stuck && pick.seq == v->seq)) {
		cJSON_AddNullToObject(o, "py_frames_waiting");
		return;
	}
	po = cJSON_AddObjectToObject(o, "py_frames_waiting");
	if (!po)
		return;
	cJSON_AddNumberToObject(po, "global_rank", (double)a->procs[a->members[wm].proc].global_rank);
	cJSON_AddNumberToObject(po, "collective_seq_id", (double)v->seq);
	add_pystack(po, a, waiting);
}

static void append_caveats(const struct fr_analysis *a, const struct verdict *v, FILE *f)
{
	if (v->also_seqs)
		fprintf(f, "\nalso at %" PRId64 " later seq%s on this comm (up to seq %" PRId64 ")",
			v->also_seqs, v->also_seqs == 1 ? "" : "s", v->also_last);
}

static bool read_cut(const struct fr_analysis *a)
{
	return a->read.tail && (a->dumps_cut || a->dumps_cut_unknown);
}

static void print_size(FILE *f, int64_t b)
{
	if (b >= 1LL << 30)
		fprintf(f, "%.1f GiB", (double)b / (1LL << 30));
	else if (b >= 1LL << 20)
		fprintf(f, "%.1f MiB", (double)b / (1LL << 20));
	else if (b >= 1LL << 10)
		fprintf(f, "%.1f KiB", (double)b / (1LL << 10));
	else
		fprintf(f, "%" PRId64 " bytes", b);
}

/* one line: what the tail read left out, and why it was a tail read */
static void read_note(const struct fr_analysis *a, FILE *f)
{
	int dumps = a->nr_procs + a->nr_corrupt;

	fprintf(f, "read only the newest %ld entries of each dump (", a->read.tail);
	if (a->read.forced) {
		fprintf(f, "--tail %ld", a->read.tail);
	} else {
		fprintf(f, "the %d dumps hold ", dumps);
		print_size(f, a->read.total_bytes);
		fprintf(f, ", over the full-read limit of ");
		print_size(f, a->read.max_bytes);
	}
	fprintf(f, "): skipped %" PRId64 " older entr%s in %d dump%s", a->skipped,
		a->skipped == 1 ? "y" : "ies", a->dumps_cut, a->dumps_cut == 1 ? "" : "s");
	if (a->dumps_cut_unknown)
		fprintf(f, " and an unknown number in %d dump%s that do not say how many they held",
			a->dumps_cut_unknown, a->dumps_cut_unknown == 1 ? "" : "s");
	fprintf(f, "; an older mismatch could be among them (--tail all reads every entry)");
}

static void add_read(cJSON *root, const struct fr_analysis *a)
{
	cJSON *o = cJSON_AddObjectToObject(root, "read");
	struct text t;
	FILE *f;

	if (!o)
		return;
	cJSON_AddStringToObject(o, "mode", a->read.tail ? "tail" : "all");
	if (a->read.tail)
		cJSON_AddNumberToObject(o, "tail", (double)a->read.tail);
	else
		cJSON_AddNullToObject(o, "tail");
	cJSON_AddStringToObject(o, "chosen_by", a->read.forced ? "option" : "size");
	cJSON_AddNumberToObject(o, "total_bytes", (double)a->read.total_bytes);
	cJSON_AddNumberToObject(o, "full_read_max_bytes", (double)a->read.max_bytes);
	/* a dump that does not say how many entries it held makes the sum unknown */
	if (a->dumps_cut_unknown) {
		cJSON_AddNullToObject(o, "entries_skipped");
		cJSON_AddStringToObject(o, "entries_skipped_reason", "dumps without entries_recorded "
					"were tail-read");
	} else {
		cJSON_AddNumberToObject(o, "entries_skipped", (double)a->skipped);
	}
	cJSON_AddNumberToObject(o, "dumps_cut", a->dumps_cut + a->dumps_cut_unknown);
	if (read_cut(a) && (f = text_open(&t))) {
		read_note(a, f);
		text_close(&t);
		cJSON_AddStringToObject(o, "note", t.buf ? t.buf : "");
		free(t.buf);
	} else {
		cJSON_AddNullToObject(o, "note");
	}
}

void fr_analysis__set_trigger(struct fr_analysis *a, const struct fr_trigger_sel *t)
{
	a->trigger = *t;
}

/* "trigger": which moment was analysed; null when no dump came from a trigger */
static void trigger_json(cJSON *root, const struct fr_analysis *a)
{
	const struct fr_trigger_sel *t = &a->trigger;
	cJSON *o;

	if (!t->present) {
		cJSON_AddNullToObject(root, "trigger");
		return;
	}
	o = cJSON_AddObjectToObject(root, "trigger");
	cJSON_AddBoolToObject(o, "consistent", t->consistent);
	if (t->consistent) {
		cJSON_AddStringToObject(o, "id", t->id);
		cJSON_AddStringToObject(o, "origin_host", t->origin);
		cJSON_AddStringToObject(o, "reason", t->reason);
	} else {
		cJSON_AddNullToObject(o, "id");
		cJSON_AddNullToObject(o, "origin_host");
		cJSON_AddNullToObject(o, "reason");
	}
	cJSON_AddNumberToObject(o, "triggers", t->nr_triggers);
	cJSON_AddNumberToObject(o, "hosts", t->nr_hosts);
	cJSON_AddNumberToObject(o, "dumps_skipped", t->nr_skipped);
}

static void trigger_human(FILE *out, const struct fr_analysis *a)
{
	const struct fr_trigger_sel *t = &a->trigger;

	if (!t->present)
		return;
	if (t->consistent)
		fprintf(out, "trigger %s (%s on %s), answered by all %d host%s", t->id, t->reason,
			t->origin, t->nr_hosts, t->nr_hosts == 1 ? "" : "s");
	else
		fprintf(out, "no consistent moment: none of the %d triggers in the dumps was answered "
			"by all %d hosts;\n    analysing every dump as found", t->nr_triggers,
			t->nr_hosts);
	if (t->nr_skipped)
		fprintf(out, "; %d dump%s of other triggers left out", t->nr_skipped,
			t->nr_skipped == 1 ? "" : "s");
	fprintf(out, "\n");
}

/* which dumps were PyTorch's own (fr_torch.c): their verdicts rest on what that format
 * records (no reduce op, no root, no host or pid) */
static void torch_json(cJSON *root, const struct fr_analysis *a)
{
	cJSON *arr = NULL;

	for (int i = 0; i < a->nr_procs; i++) {
		const struct proc *p = &a->procs[i];
		cJSON *o;

		if (!p->torch)
			continue;
		if (!arr && !(arr = cJSON_AddArrayToObject(root, "pytorch_dumps")))
			return;
		if (!(o = cJSON_CreateObject()))
			return;
		cJSON_AddItemToArray(arr, o);
		cJSON_AddStringToObject(o, "path", p->path);
		if (p->global_rank != FR_UNK)
			cJSON_AddNumberToObject(o, "global_rank", (double)p->global_rank);
		else
			cJSON_AddNullToObject(o, "global_rank");
		cJSON_AddStringToObject(o, "format_version", p->torch_version);
	}
}

static void torch_human(FILE *out, const struct fr_analysis *a)
{
	int n = 0, shown = 0;

	for (int i = 0; i < a->nr_procs; i++)
		n += a->procs[i].torch;
	if (!n)
		return;
	fprintf(out, "%d of %d dumps are PyTorch flight-recorder dumps (no reduce op, root, host "
		"or pid in that format):", n, a->nr_procs);
	for (int i = 0; i < a->nr_procs && shown < 8; i++) {
		const char *b;

		if (!a->procs[i].torch)
			continue;
		b = strrchr(a->procs[i].path, '/');
		fprintf(out, "%s %s", shown++ ? "," : "", b ? b + 1 : a->procs[i].path);
	}
	if (n > shown)
		fprintf(out, " and %d more", n - shown);
	fprintf(out, "\n");
}

static int cmp_int(const void *x, const void *y)
{
	int p = *(const int *)x, q = *(const int *)y;

	return p < q ? -1 : p > q;
}

/* "waiting": the ranks that wait on a cause (never blamed) and their own waits */
static void add_waiting(cJSON *o, const struct fr_analysis *a, const struct verdict *v)
{
	int *w = NULL, n = v->caused_by < 0 ? verdict_waiters(a, v, &w, &(int64_t){ 0 },
							     &(int64_t){ 0 }) : 0;
	int64_t lo, hi;
	cJSON *wo, *arr;

	if (n <= 0) {
		free(w);
		cJSON_AddNullToObject(o, "waiting");
		return;
	}
	free(w);
	n = verdict_waiters(a, v, &w, &lo, &hi);
	if (n < 0)
		return;
	/* by rank, as "ranks" */
	for (int i = 0; i < n; i++)
		w[i] = a->procs[a->members[w[i]].proc].global_rank == FR_UNK ? -1 :
		       (int)a->procs[a->members[w[i]].proc].global_rank;
	qsort(w, n, sizeof(*w), cmp_int);
	wo = cJSON_AddObjectToObject(o, "waiting");
	arr = wo ? cJSON_AddArrayToObject(wo, "ranks") : NULL;
	for (int i = 0; arr && i < n; i++)	/* null: a dump that says no rank */
		cJSON_AddItemToArray(arr, w[i] < 0 ? cJSON_CreateNull() : cJSON_CreateNumber(w[i]));
	if (wo && lo != FR_UNK) {
		cJSON_AddNumberToObject(wo, "min_s", lo / 1e9);
		cJSON_AddNumberToObject(wo, "max_s", hi / 1e9);
	} else if (wo) {
		cJSON_AddNullToObject(wo, "min_s");
		cJSON_AddNullToObject(wo, "max_s");
	}
	free(w);
}

/* dumps_not_simultaneous: the hosts to dump again; partitioned_host: the host cut off, or
 * the ends of the links (an address where no dump's host holds it) */
static void add_hosts(cJSON *o, const struct fr_analysis *a, const struct verdict *v)
{
	cJSON *arr;

	if (v->rule == RULE_PARTITION) {
		arr = cJSON_AddArrayToObject(o, "hosts");
		if (v->ev.part.kind != PART_LINKS) {
			for (int i = 0; arr && i < (v->ev.part.kind == PART_LINK ? 2 : 1); i++)
				cJSON_AddItemToArray(arr, cJSON_CreateString(
						     a->owners[v->ev.part.owner[i]].name));
			return;
		}
		/* every end of a stuck connection, by name */
		for (const char *last = ""; arr; ) {
			const char *next = NULL;

			for (int i = 0; i < a->nr_owners; i++)
				if (a->owners[i].on_stuck && strcmp(a->owners[i].name, last) > 0 &&
				    (!next || strcmp(a->owners[i].name, next) < 0))
					next = a->owners[i].name;
			if (!next)
				break;
			cJSON_AddItemToArray(arr, cJSON_CreateString(next));
			last = next;
		}
		return;
	}
	if (v->rule != RULE_NOT_ONE_MOMENT)
		return;
	arr = cJSON_AddArrayToObject(o, "hosts");
	for (int i = 0; arr && i < a->nr_redumps; i++) {
		const struct proc *p = &a->procs[a->redumps[i].proc];
		bool seen = false;

		for (int k = 0; k < i && !seen; k++)
			seen = a->procs[a->redumps[k].proc].host_id == p->host_id;
		if (!seen)
			cJSON_AddItemToArray(arr, cJSON_CreateString(p->host));
	}
}

int fr_analysis__print_json(const struct fr_analysis *a, FILE *out)
{
	cJSON *root = cJSON_CreateObject(), *arr;
	char *s;

	if (!root)
		return -ENOMEM;
	cJSON_AddNumberToObject(root, "version", 1);
	cJSON_AddNumberToObject(root, "ranks", a->nr_procs);
	cJSON_AddNumberToObject(root, "comms", a->nr_comms);
	cJSON_AddNumberToObject(root, "dumps", a->nr_procs + a->nr_corrupt);
	add_read(root, a);
	trigger_json(root, a);
	torch_json(root, a);
	arr = cJSON_AddArrayToObject(root, "input_notes");
	for (int i = 0; arr && i < a->nr_notes; i++)
		cJSON_AddItemToArray(arr, cJSON_CreateString(a->notes[i]));
	arr = cJSON_AddArrayToObject(root, "verdicts");
	for (int i = 0; arr && i < a->nr_verdicts; i++) {
		const struct verdict *v = &a->verdicts[i];
		cJSON *o = cJSON_CreateObject(), *ranks, *cranks, *procs;
		char *headline, *detail, *reason;
		struct text t;
		FILE *f;

		if (!o)
			break;
		cJSON_AddItemToArray(arr, o);
		cJSON_AddStringToObject(o, "rule", rule_names[v->rule]);
		if (v->comm >= 0)
			cJSON_AddStringToObject(o, "comm", a->comms[v->comm].id);
		else
			cJSON_AddNullToObject(o, "comm");
		if (v->seq != FR_UNK)
			cJSON_AddNumberToObject(o, "seq", (double)v->seq);
		else
			cJSON_AddNullToObject(o, "seq");
		ranks = cJSON_AddArrayToObject(o, "ranks");
		cranks = cJSON_AddArrayToObject(o, "comm_ranks");
		procs = cJSON_AddArrayToObject(o, "processes");
		for (int k = 0; k < v->nr_who; k++) {
			/* null: a dump that says no rank; "processes" still names it */
			cJSON_AddItemToArray(ranks, v->who[k][0] < 0 ? cJSON_CreateNull() :
					     cJSON_CreateNumber((double)v->who[k][0]));
			if (v->who[k][1] >= 0)
				cJSON_AddItemToArray(cranks, cJSON_CreateNumber((double)v->who[k][1]));
			if (v->who[k][2] >= 0 && procs) {
				const struct proc *p = &a->procs[v->who[k][2]];
				cJSON *po = cJSON_CreateObject();

				if (!po)
					continue;
				cJSON_AddItemToArray(procs, po);
				cJSON_AddStringToObject(po, "host", p->host);
				if (p->pid == FR_UNK)
					cJSON_AddNullToObject(po, "pid");
				else
					cJSON_AddNumberToObject(po, "pid", (double)p->pid);
				if (p->global_rank == FR_UNK)
					cJSON_AddNullToObject(po, "rank");
				else
					cJSON_AddNumberToObject(po, "rank", (double)p->global_rank);
			}
		}
		if (v->op[0])
			cJSON_AddStringToObject(o, "op", v->op);
		else
			cJSON_AddNullToObject(o, "op");
		if (v->caused_by >= 0)
			cJSON_AddNumberToObject(o, "caused_by", v->caused_by);
		else
			cJSON_AddNullToObject(o, "caused_by");
		add_waiting(o, a, v);
		add_hosts(o, a, v);
		cJSON_AddStringToObject(o, "confidence", v->low ? "low" : v->medium ? "medium" :
					"high");
		if (v->low || v->medium) {
			reason = verdict_confidence_reason(a, v);
			cJSON_AddStringToObject(o, "confidence_reason", reason ? reason : "");
			free(reason);
		}
		add_stack(o, a, v);
		add_py_frames(o, a, v);
		headline = verdict_headline(a, v);
		detail = verdict_detail(a, v);
		if ((f = text_open(&t))) {
			fprintf(f, "%s", headline ? headline : "");
			if (detail && detail[0])
				fprintf(f, ". %s", detail);
			append_caveats(a, v, f);
			text_close(&t);
			/* one line: newlines become "; " */
			char *line = malloc(t.len * 2 + 1), *q = line;

			for (char *p = t.buf; line && p && *p; p++) {
				if (*p == '\n') {
					*q++ = ';';
					*q++ = ' ';
				} else {
					*q++ = *p;
				}
			}
			if (line)
				*q = 0;
			cJSON_AddStringToObject(o, "detail", line ? line : "");
			free(line);
			free(t.buf);
		}
		free(headline);
		free(detail);
	}
	s = cJSON_Print(root);
	cJSON_Delete(root);
	if (!s)
		return -ENOMEM;
	fprintf(out, "%s\n", s);
	free(s);
	return 0;
}

/* One report line under 100 columns: words wrapped at spaces, each continuation indented by
 * 4 more than the line; a word longer than the room (a path) is never cut. */
#define REPORT_COLS 100
/* one verdict: "[rule] headline", its detail indented; a consequence under its cause */
static void print_verdict(FILE *out, const struct fr_analysis *a, const struct verdict *v,
			  const char *in)
{
	char *headline = verdict_headline(a, v), *detail = verdict_detail(a, v);
	char *reason = v->low || v->medium ? verdict_confidence_reason(a, v) : NULL;
	const char *d = detail ? detail : "";

	char *head = NULL, ind[32];

	if (asprintf(&head, "%s[%s] %s", in[0] ? "follows: " : "", rule_names[v->rule],
		     headline ? headline : "") < 0)
		head = NULL;
	if (head)
		text_wrap(out, in, 4, head, strlen(head), REPORT_COLS);
	free(head);
	snprintf(ind, sizeof(ind), "%s    ", in);
	while (*d) {
		size_t len = strcspn(d, "\n");

		text_wrap(out, ind, 4, d, len, REPORT_COLS);
		d += len + (d[len] == '\n');
	}
	if (v->also_seqs)
		fprintf(out, "%s    also at %" PRId64 " later seq%s on this comm (up to seq %" PRId64
			")\n", in, v->also_seqs, v->also_seqs == 1 ? "" : "s", v->also_last);
	if (v->low || v->medium) {
		char *c = NULL;

		if (asprintf(&c, "confidence: %s (%s)", v->low ? "low" : "medium",
			     reason ? reason : "") >= 0) {
			text_wrap(out, ind, 4, c, strlen(c), REPORT_COLS);
			free(c);
		}
	}
	free(headline);
	free(detail);
	free(reason);
}

/* "    ranks 0-12,14-31 wait for it in all_reduce seq 40 for 13.6-13.9 s" */
static void print_waiters(FILE *out, const struct fr_analysis *a, const struct verdict *v)
{
	struct verdict tmp = { 0 };
	char *buf = NULL;
	size_t size = 0;
	FILE *line;
	int *w = NULL, n;
	int64_t lo, hi;

	n = verdict_waiters(a, v, &w, &lo, &hi);
	if (n <= 0) {
		free(w);
		return;
	}
	for (int i = 0; i < n; i++)
		who_add(&tmp, a->procs[a->members[w[i]].proc].global_rank, a->members[w[i]].rank,
			a->members[w[i]].proc);
	who_sort(&tmp);
	/* one line, wrapped: a long list of ranks runs past the report's width */
	if ((line = open_memstream(&buf, &size))) {
		fprintf(line, "follows: ");
		print_who(line, a, &tmp, false);
		fprintf(line, " wait%s for it in %s seq %" PRId64, n == 1 ? "s" : "",
			v->agg >= 0 ? fr_op_name(a->aggs[v->agg].sig0.op) :
			v->op[0] ? v->op : "collective", v->seq);
		if (lo != FR_UNK && (int64_t)(lo / 1e8 + 0.5) != (int64_t)(hi / 1e8 + 0.5))
			fprintf(line, " for %.1f-%.1f s", lo / 1e9, hi / 1e9);	/* distinct once rounded */
		else if (lo != FR_UNK)
			fprintf(line, " for %.1f s", hi / 1e9);
		if (!fclose(line) && buf)
			text_wrap(out, "    ", 4, buf, strlen(buf), REPORT_COLS);
		free(buf);
	}
	free(tmp.who);
	free(w);
}

/* Whether comm cid's (every comm's, cid -1) newest collective is not completed by every
 * dump that entered it. */
static bool in_flight(const struct fr_analysis *a, int cid)
{
	for (int ci = 0; ci < a->nr_comms; ci++) {
		const struct comm *c = &a->comms[a->comm_order[ci]];
		const struct seq_agg *g;

		if ((cid >= 0 && a->comm_order[ci] != cid) || !c->aggs.n)
			continue;
		g = &a->aggs[c->aggs.v[c->aggs.n - 1]];
		if (g->completed < g->entered)
			return true;
	}
	return false;
}

/* the one line of a report without a problem (wrapped by the caller) */
static int print_healthy(const struct fr_analysis *a, FILE *out)
{
	int64_t common = FR_UNK, usual, skew = timing_max_skew(a, &usual);
	char usual_words[96] = "";
	bool same = true;
	int shown = 0;

	/* a threshold raised for a job whose collectives take long: said, with why */
	if (usual != FR_UNK)
		snprintf(usual_words, sizeof(usual_words), " (twice the %.1f s its collectives "
			 "usually kept ranks waiting)", usual / 1e9);
	/* no collective and no stack: nothing says the job is healthy */
	if (!a->nr_comms && !a->nr_with_stacks) {
		fprintf(out, "nothing to judge: %d rank%s, no collectives recorded and no stacks "
			"in the dumps (%s)\n", a->nr_procs, a->nr_procs == 1 ? "" : "s",
			any_stacks_pending(a) ? "pending: the recorder was still taking them" :
			"recorded with --no-stacks, or by a tptrace before dump version 2");
		return 0;
	}
	fprintf(out, "no problem found: %d rank%s, %d comm%s, ", a->nr_procs,
		a->nr_procs == 1 ? "" : "s", a->nr_comms, a->nr_comms == 1 ? "" : "s");
	for (int ci = 0; ci < a->nr_comms; ci++) {
		const struct comm *c = &a->comms[a->comm_order[ci]];
		int64_t last = c->aggs.n ? a->aggs[c->aggs.v[c->aggs.n - 1]].seq : 0;

		if (ci && last != common)
			same = false;
		common = last;
	}
	if (!a->nr_comms) {
		fprintf(out, "no collectives recorded");
	} else if (a->nr_redumps) {
		/* healthy, but the dumps show different seqs: say so, not "all completed" */
		fprintf(out, "the dumps are from different moments (%d older than others, the "
			"job ran on) and no rank waited past %.1f s%s at its own dump; newest "
			"seq %" PRId64, a->nr_redumps, skew / 1e9, usual_words, common);
	} else if (!in_flight(a, -1) && same) {
		fprintf(out, "all completed seq %" PRId64, common);
	} else if (!in_flight(a, -1)) {
		fprintf(out, "all completed the same seqs (last seq per comm:");
		for (int ci = 0; ci < a->nr_comms && shown < 6; ci++, shown++) {
			const struct comm *c = &a->comms[a->comm_order[ci]];

			fprintf(out, " %s %" PRId64, short_id(c->id),
				c->aggs.n ? a->aggs[c->aggs.v[c->aggs.n - 1]].seq : 0);
		}
		fprintf(out, "%s)", a->nr_comms > shown ? " ..." : "");
	} else {
		/* the newest collectives still run somewhere: never "all completed" */
		fprintf(out, "no rank waited past %.1f s%s at its own dump (newest seq per comm:",
			skew / 1e9, usual_words);
		for (int ci = 0; ci < a->nr_comms && shown < 6; ci++, shown++) {
			const struct comm *c = &a->comms[a->comm_order[ci]];

			fprintf(out, " %s %" PRId64 "%s", short_id(c->id),
				c->aggs.n ? a->aggs[c->aggs.v[c->aggs.n - 1]].seq : 0,
				in_flight(a, a->comm_order[ci]) ? " in flight" : "");
		}
		fprintf(out, "%s)", a->nr_comms > shown ? " ..." : "");
	}
	print_stacks_health(out, a);
	fprintf(out, "\n");
	return 0;
}

static int print_human(const struct fr_analysis *a, FILE *out)
{
	trigger_human(out, a);
	torch_human(out, a);
	for (int i = 0; i < a->nr_notes; i++) {
		char *line = NULL;

		/* under 100 columns, as every report line */
		if (asprintf(&line, "note: %s", a->notes[i]) < 0)
			return -ENOMEM;
		text_wrap(out, "", 4, line, strlen(line), REPORT_COLS);
		free(line);
	}
	if (!a->nr_verdicts) {
		struct text t;
		FILE *real = out;
		int err;

		if (!(out = text_open(&t)))
			return -ENOMEM;
		err = print_healthy(a, out);
		text_close(&t);
		if (t.buf)
			text_wrap(real, "", 4, t.buf, t.len, REPORT_COLS);
		free(t.buf);
		return err;
	}
	fprintf(out, "%d problem%s found (%d ranks, %d comm%s, %d dumps), most causal first:\n\n",
		nr_causes(a), nr_causes(a) == 1 ? "" : "s", a->nr_procs, a->nr_comms,
		a->nr_comms == 1 ? "" : "s", a->nr_procs + a->nr_corrupt);
	for (int i = 0; i < a->nr_verdicts; i++) {
		const struct verdict *v = &a->verdicts[i];

		if (v->caused_by >= 0)
			continue;
		print_verdict(out, a, v, "");
		print_waiters(out, a, v);
		for (int k = i + 1; k < a->nr_verdicts && a->verdicts[k].caused_by == i; k++)
			print_verdict(out, a, &a->verdicts[k], "    ");
		fprintf(out, "\n");
	}
	return 0;
}

int fr_analysis__print_human(const struct fr_analysis *a, FILE *out)
{
	int err = print_human(a, out);

	if (!err && read_cut(a)) {
		fprintf(out, "%snote: ", a->nr_verdicts ? "" : "\n");
		read_note(a, out);
		fprintf(out, "\n");
	}
	return err;
}
