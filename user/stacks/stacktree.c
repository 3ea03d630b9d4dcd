// SPDX-License-Identifier: MIT
/* The cross-process view of a hang snapshot, as LLNL STAT draws it: every process's issuing
 * thread (or every thread) merged root-first into a prefix tree whose nodes carry the set of
 * processes that passed through them, then equivalence classes of identical stacks and the
 * classes with the fewest processes named as outliers.
 *
 * Frames are compared at function granularity: a native frame by its module and function (by
 * module + offset when no symbol covers it), a Python frame by file, line and function. When a
 * thread has Python frames, the interpreter's own native frames (those in the object that runs
 * _PyEval_EvalFrame*) are left out of the tree: they differ with every call depth and say
 * nothing the Python frames do not, and would split ranks that run the same Python code.
 * A stack whose outer frames were not unwound (truncated) starts with a marker node, so it is
 * never merged with complete stacks as if it shared their root. A process without frames is
 * listed apart, never merged as if it were healthy. Output order depends on the input only
 * (processes sorted by rank, children by size then rank), never on addresses. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "growbuf.h"
#include "stacks.h"
#include "stacktree.h"

struct st_node {
	char *key;		/* what frames compare by */
	char *label;		/* what is printed */
	uint64_t *set;		/* bit i: process i (sorted order) passed through */
	int threads;		/* threads through this node */
	struct st_node **kids;
	int nr_kids, cap_kids;
};

/* One frame of a merged path. */
struct st_frame {
	char *key, *label;
};

struct st_path {
	struct st_frame *frames;	/* outermost first */
	int n;
};

struct st_ctx {
	FILE *f;
	struct stack_proc *const *procs;	/* sorted by id */
	int n, words;
	int *ids;		/* rank, or pid when ranks are not usable */
	int *scratch;		/* n ints for set_label */
	bool by_pid;
	int max_depth;
	bool all_threads;
};

static void bits_set(uint64_t *set, int i)
{
	set[i / 64] |= 1ULL << (i % 64);
}

static bool bits_test(const uint64_t *set, int i)
{
	return set[i / 64] >> (i % 64) & 1;
}

static int bits_count(const struct st_ctx *c, const uint64_t *set)
{
	int k = 0;

	for (int w = 0; w < c->words; w++)
		k += __builtin_popcountll(set[w]);
	return k;
}

static int bits_first(const struct st_ctx *c, const uint64_t *set)
{
	for (int i = 0; i < c->n; i++)
		if (bits_test(set, i))
			return i;
	return c->n;
}

void stacktree__format_ranks(const int *ranks, int n, char *buf, size_t size)
{
	size_t len = 0;

	if (!size)
		return;
	buf[0] = 0;
	for (int i = 0; i < n;) {
		char piece[32];
		int j = i;
		int k;

		while (j + 1 < n && ranks[j + 1] == ranks[j] + 1)
			j++;
		if (j == i)
			k = snprintf(piece, sizeof(piece), "%s%d", i ? "," : "", ranks[i]);
		else
			k = snprintf(piece, sizeof(piece), "%s%d-%d", i ? "," : "", ranks[i], ranks[j]);
		i = j + 1;
		/* room for the piece, and for "..." after it unless it is the last */
		if (len + k + (i < n ? 3 : 0) >= size) {
			if (len + 3 < size)
				strcpy(buf + len, "...");
			else if (size > 3)
				strcpy(buf + size - 4, "...");
			return;
		}
		memcpy(buf + len, piece, k + 1);
		len += k;
	}
}

/* "rank 6" / "ranks 0-5,7" (or pids) for the processes in set */
static void set_label(const struct st_ctx *c, const uint64_t *set, char *buf, size_t size)
{
	int k = 0;
	char list[384];

	for (int i = 0; i < c->n; i++)
		if (bits_test(set, i))
			c->scratch[k++] = c->ids[i];
	/* ids are sorted: processes are */
	stacktree__format_ranks(c->scratch, k, list, sizeof(list));
	snprintf(buf, size, "%s%s %s", c->by_pid ? "pid" : "rank", k == 1 ? "" : "s", list);
}

static const char *base_name(const char *path)
{
	const char *s = path ? strrchr(path, '/') : NULL;

	return s ? s + 1 : path;
}

static void frame_text(const struct stack_frame *fr, char **key, char **label)
{
	const char *mod = base_name(fr->module);
	int a, b;

	*key = *label = NULL;
	if (fr->kind == STACK_PYTHON) {
		char line[16];

		if (fr->line > 0)
			snprintf(line, sizeof(line), "%d", fr->line);
		else
			strcpy(line, "?");
		a = asprintf(key, "P|%s|%d|%s", fr->file ? fr->file : "", fr->line,
			     fr->func ? fr->func : "");
		b = asprintf(label, "%s:%s %s()", fr->file ? base_name(fr->file) : "?", line,
			     fr->func ? fr->func : "?");
	} else if (fr->func) {
		a = asprintf(key, "N|%s|%s", mod ? mod : "", fr->func);
		b = mod ? asprintf(label, "%s (%s)", fr->func, mod) : asprintf(label, "%s", fr->func);
	} else if (mod) {
		a = asprintf(key, "O|%s|%llx", mod, (unsigned long long)fr->module_off);
		b = asprintf(label, "%s+0x%llx", mod, (unsigned long long)fr->module_off);
	} else {
		/* an address in no mapped object: its value differs per process (ASLR) */
		a = asprintf(key, "U");
		b = asprintf(label, "?? (no mapped object)");
	}
	if (a < 0 || b < 0) {
		if (a >= 0)
			free(*key);
		if (b >= 0)
			free(*label);
		*key = *label = NULL;
	}
}

static void path_free(struct st_path *p)
{
	for (int i = 0; i < p->n; i++) {
		free(p->frames[i].key);
		free(p->frames[i].label);
	}
	free(p->frames);
	p->frames = NULL;
	p->n = 0;
}

/* The thread's frames outermost first, without the interpreter's own frames when Python
 * frames stand for them. 0 or -ENOMEM. */
static int path_build(const struct stack_thread *t, struct st_path *p)
{
	const char *interp = NULL;
	bool has_py = false;

	p->n = 0;
	p->frames = calloc(t->nr_frames + 1, sizeof(*p->frames));
	if (!p->frames)
		return -ENOMEM;
	for (int i = 0; i < t->nr_frames; i++) {
		const struct stack_frame *fr = &t->frames[i];

		if (fr->kind == STACK_PYTHON)
			has_py = true;
		else if (!interp && fr->func && fr->module && !strncmp(fr->func, "_PyEval_EvalFrame", 17))
			interp = fr->module;
	}
	if (t->truncated) {
		p->frames[0].key = strdup("T");
		p->frames[0].label = strdup("... (outer frames not unwound)");
		if (!p->frames[0].key || !p->frames[0].label)
			goto nomem;
		p->n = 1;
	}
	for (int i = t->nr_frames - 1; i >= 0; i--) {
		const struct stack_frame *fr = &t->frames[i];

		if (has_py && interp && fr->kind == STACK_NATIVE && fr->module &&
		    !strcmp(fr->module, interp))
			continue;
		frame_text(fr, &p->frames[p->n].key, &p->frames[p->n].label);
		if (!p->frames[p->n].key)
			goto nomem;
		p->n++;
	}
	return 0;
nomem:
	path_free(p);
	return -ENOMEM;
}

static struct st_node *node_new(const struct st_ctx *c, const char *key, const char *label)
{
	struct st_node *nd = calloc(1, sizeof(*nd));

	if (!nd)
		return NULL;
	nd->set = calloc(c->words, sizeof(uint64_t));
	nd->key = strdup(key);
	nd->label = strdup(label);
	if (!nd->set || !nd->key || !nd->label) {
		free(nd->set);
		free(nd->key);
		free(nd->label);
		free(nd);
		return NULL;
	}
	return nd;
}

static void node_free(struct st_node *nd)
{
	if (!nd)
		return;
	for (int i = 0; i < nd->nr_kids; i++)
		node_free(nd->kids[i]);
	free(nd->kids);
	free(nd->set);
	free(nd->key);
	free(nd->label);
	free(nd);
}

/* STAT's merge: walk down from the root, OR-ing the process into every node on the path. */
static int tree_add(const struct st_ctx *c, struct st_node *root, const struct st_path *p, int proc)
{
	struct st_node *nd = root;

	bits_set(nd->set, proc);
	nd->threads++;
	for (int i = 0; i < p->n; i++) {
		struct st_node *kid = NULL;

		for (int k = 0; k < nd->nr_kids && !kid; k++)
			if (!strcmp(nd->kids[k]->key, p->frames[i].key))
				kid = nd->kids[k];
		if (!kid) {
			if (ARRAY_RESERVE(nd->kids, nd->cap_kids, nd->nr_kids + 1, 4))
				return -ENOMEM;
			kid = node_new(c, p->frames[i].key, p->frames[i].label);
			if (!kid)
				return -ENOMEM;
			nd->kids[nd->nr_kids++] = kid;
		}
		nd = kid;
		bits_set(nd->set, proc);
		nd->threads++;
	}
	return 0;
}

static const struct st_ctx *sort_ctx;

/* the biggest share first, then the lowest rank, then the frame */
static int kid_cmp(const void *a, const void *b)
{
	const struct st_node *x = *(const struct st_node *const *)a, *y = *(const struct st_node *const *)b;
	int cx = bits_count(sort_ctx, x->set), cy = bits_count(sort_ctx, y->set);
	int fx, fy;

	if (cx != cy)
		return cy - cx;
	if (x->threads != y->threads)
		return y->threads - x->threads;
	fx = bits_first(sort_ctx, x->set);
	fy = bits_first(sort_ctx, y->set);
	if (fx != fy)
		return fx - fy;
	return strcmp(x->key, y->key);
}

static void tree_sort(struct st_node *nd)
{
	qsort(nd->kids, nd->nr_kids, sizeof(*nd->kids), kid_cmp);
	for (int i = 0; i < nd->nr_kids; i++)
		tree_sort(nd->kids[i]);
}

static void print_header(const struct st_ctx *c, const struct st_node *nd, int indent)
{
	char label[512];
	int k = bits_count(c, nd->set);

	set_label(c, nd->set, label, sizeof(label));
	if (c->all_threads)
		fprintf(c->f, "%*s[%s] %d thread%s\n", indent, "", label, nd->threads,
			nd->threads == 1 ? "" : "s");
	else
		fprintf(c->f, "%*s[%s] %d process%s\n", indent, "", label, k, k == 1 ? "" : "es");
}

/* A node shares its parent's header (STAT's Join) when it is the only way on from there and
 * the same processes and threads took it; a new header, indented, marks every split. */
static void print_node(const struct st_ctx *c, const struct st_node *nd, const struct st_node *parent,
		       int indent, int depth)
{
	bool joined = parent && parent->nr_kids == 1 && parent->threads == nd->threads &&
		      !memcmp(parent->set, nd->set, c->words * sizeof(uint64_t));

	if (!joined) {
		if (parent)
			indent += 2;
		print_header(c, nd, indent);
	}
	fprintf(c->f, "%*s%s\n", indent + 2, "", nd->label);
	if (c->max_depth > 0 && depth >= c->max_depth) {
		if (nd->nr_kids)
			fprintf(c->f, "%*s... (deeper frames not shown: depth %d)\n", indent + 2, "",
				c->max_depth);
		return;
	}
	for (int i = 0; i < nd->nr_kids; i++)
		print_node(c, nd->kids[i], nd, indent, depth + 1);
}

/* The thread a process is compared by; NULL when it has none. */
static const struct stack_thread *issuing_thread(const struct stack_proc *sp)
{
	const struct stack_thread *main = NULL;

	for (int i = 0; i < sp->nr_threads; i++) {
		if (sp->threads[i].issuing)
			return &sp->threads[i];
		if (sp->threads[i].main)
			main = &sp->threads[i];
	}
	return main ? main : sp->nr_threads ? &sp->threads[0] : NULL;
}

/* Why a process has no stack to compare. */
static const char *no_stack_reason(const struct stack_proc *sp, const struct stack_thread *t)
{
	if (sp->ptrace_err)
		return sp->ptrace_err;
	if (t && t->unwind_err)
		return t->unwind_err;
	if (sp->exited)
		return "exited during the snapshot";
	if (!t)
		return "no threads read";
	return "no frames read";
}

static const struct stack_frame *innermost(const struct stack_thread *t, enum stack_frame_kind kind)
{
	for (int i = 0; i < t->nr_frames; i++)
		if (t->frames[i].kind == kind)
			return &t->frames[i];
	return NULL;
}

static const char *progress_text(enum stack_progress p)
{
	switch (p) {
	case PROGRESS_NONE: return "no progress";
	case PROGRESS_YES: return "progressing";
	default: return "progress unknown";
	}
}

/* Where a thread is, in words: "ncclAllReduce", "Python train.py:88 step()", ... */
static void where_text(const struct stack_thread *t, char *buf, size_t size)
{
	const struct stack_frame *py = innermost(t, STACK_PYTHON);
	const struct stack_frame *nat = innermost(t, STACK_NATIVE);
	char *pyl = NULL, *natl = NULL, *key;
	char from[256] = "";

	if (py) {
		frame_text(py, &key, &pyl);
		free(key);
	}
	if (nat) {
		frame_text(nat, &key, &natl);
		free(key);
	}
	if (pyl)
		snprintf(from, sizeof(from), ", from Python %s", pyl);
	switch (t->where) {
	case WHERE_NCCL:
		snprintf(buf, size, "in %s", t->api ? t->api : "NCCL");
		break;
	case WHERE_CUDA:
		snprintf(buf, size, "in %s", t->api ? t->api : "the CUDA runtime");
		break;
	case WHERE_DRIVER:
		snprintf(buf, size, "in %s", t->api ? t->api : "the CUDA driver");
		break;
	case WHERE_ALLOCATOR:
		snprintf(buf, size, "in the CUDA caching allocator%s", from);
		break;
	case WHERE_PYTHON:
		snprintf(buf, size, "in Python %s", pyl ? pyl : "(frame unknown)");
		break;
	case WHERE_IDLE:
		snprintf(buf, size, "idle in %s%s", natl ? natl : t->wchan[0] ? t->wchan : "a wait", from);
		break;
	case WHERE_RUNNING:
		snprintf(buf, size, "running %s%s", natl ? natl : "native code", from);
		break;
	default:
		snprintf(buf, size, "somewhere unknown");
		break;
	}
	free(pyl);
	free(natl);
}

struct st_class {
	uint64_t *set;
	int first;		/* lowest process index */
	int size;
	const struct stack_thread *rep;	/* the first member's issuing thread */
	bool unknown;		/* no frames: not compared */
	char *key;		/* path + where + api + progress */
};

static int class_cmp(const void *a, const void *b)
{
	const struct st_class *x = a, *y = b;

	if (x->unknown != y->unknown)
		return x->unknown - y->unknown;
	if (x->size != y->size)
		return y->size - x->size;
	return x->first - y->first;
}

static char *class_key(const struct stack_thread *t, const struct st_path *p)
{
	size_t len = 64 + (t->api ? strlen(t->api) : 0);
	char *key, *s;

	for (int i = 0; i < p->n; i++)
		len += strlen(p->frames[i].key) + 1;
	key = malloc(len);
	if (!key)
		return NULL;
	s = key + sprintf(key, "%d|%d|%s|", t->where, t->progress, t->api ? t->api : "");
	for (int i = 0; i < p->n; i++)
		s += sprintf(s, "%s\n", p->frames[i].key);
	return key;
}

/* the innermost frames of a class, as the tree shows them */
static void print_top_frames(const struct st_ctx *c, const struct st_path *p)
{
	fprintf(c->f, "    top:");
	for (int i = p->n - 1; i >= 0 && i >= p->n - 3; i--)
		fprintf(c->f, "%s %s", i < p->n - 1 ? " <-" : "", p->frames[i].label);
	fprintf(c->f, "\n");
}

static int print_classes(struct st_ctx *c, struct st_path *paths, const struct stack_thread **iss)
{
	struct st_class *cls = calloc(c->n ? c->n : 1, sizeof(*cls));
	int nr = 0, nr_known = 0, err = 0, majority = -1, min_size = 0;
	char label[512], where[512];

	if (!cls)
		return -ENOMEM;
	for (int i = 0; i < c->n; i++) {
		bool unknown = !iss[i] || !iss[i]->nr_frames;
		char *key = unknown ? NULL : class_key(iss[i], &paths[i]);
		int k;

		if (!unknown && !key) {
			err = -ENOMEM;
			goto cleanup;
		}
		/* an unknown stack is a class of its own: it is never like anything */
		for (k = 0; k < nr && (unknown || cls[k].unknown || strcmp(cls[k].key, key)); k++)
			;
		if (k == nr) {
			cls[nr].set = calloc(c->words, sizeof(uint64_t));
			if (!cls[nr].set) {
				free(key);
				err = -ENOMEM;
				goto cleanup;
			}
			cls[nr].first = i;
			cls[nr].rep = iss[i];
			cls[nr].unknown = unknown;
			cls[nr].key = key;
			nr++;
		} else {
			free(key);
		}
		bits_set(cls[k].set, i);
		cls[k].size++;
	}
	qsort(cls, nr, sizeof(*cls), class_cmp);
	for (int k = 0; k < nr; k++)
		if (!cls[k].unknown)
			nr_known++;
	fprintf(c->f, "\nequivalence classes (issuing thread: same frames, where, api, progress): %d\n",
		nr_known);
	for (int k = 0; k < nr; k++) {
		set_label(c, cls[k].set, label, sizeof(label));
		if (cls[k].unknown) {
			fprintf(c->f, "  %s: stack unknown (%s), not compared\n", label,
				no_stack_reason(c->procs[cls[k].first], cls[k].rep));
			continue;
		}
		where_text(cls[k].rep, where, sizeof(where));
		fprintf(c->f, "  %d. %s: %s (%s)\n", k + 1, label, where, progress_text(cls[k].rep->progress));
		print_top_frames(c, &paths[cls[k].first]);
	}

	/* STAT's [Least] Tasks: the classes with the fewest processes, when some have more */
	if (nr_known)
		majority = 0;
	for (int k = 0; k < nr_known; k++)
		if (!min_size || cls[k].size < min_size)
			min_size = cls[k].size;
	fprintf(c->f, "\n");
	if (nr_known == 1) {
		set_label(c, cls[0].set, label, sizeof(label));
		where_text(cls[0].rep, where, sizeof(where));
		if (cls[0].size == 1)
			fprintf(c->f, "no outlier (one process): %s %s (%s)\n", label, where,
				progress_text(cls[0].rep->progress));
		else
			fprintf(c->f, "no outlier: %s all %s (%s)\n", label, where,
				progress_text(cls[0].rep->progress));
	} else if (nr_known > 1 && min_size == cls[majority].size) {
		fprintf(c->f, "no outlier: %d classes of %d process%s each\n", nr_known, min_size,
			min_size == 1 ? "" : "es");
	} else if (nr_known > 1) {
		for (int k = 0; k < nr_known; k++) {
			if (cls[k].size != min_size)
				continue;
			set_label(c, cls[k].set, label, sizeof(label));
			where_text(cls[k].rep, where, sizeof(where));
			fprintf(c->f, "outlier: %s: %s, the others", label, where);
			/* the others: every other class that was compared, biggest first */
			for (int o = 0, nth = 0; o < nr_known; o++) {
				char olabel[512];

				if (o == k)
					continue;
				where_text(cls[o].rep, where, sizeof(where));
				if (nr_known == 2) {
					fprintf(c->f, " %s (%s)", where, progress_text(cls[o].rep->progress));
					continue;
				}
				set_label(c, cls[o].set, olabel, sizeof(olabel));
				fprintf(c->f, "%s %s %s (%s)", nth++ ? ";" : ":", olabel, where,
					progress_text(cls[o].rep->progress));
			}
			fprintf(c->f, "\n");
		}
	}
	for (int k = nr_known; k < nr; k++) {
		set_label(c, cls[k].set, label, sizeof(label));
		fprintf(c->f, "unknown: %s: stack not read (%s), not compared\n", label,
			no_stack_reason(c->procs[cls[k].first], cls[k].rep));
	}
cleanup:
	for (int k = 0; k < nr; k++) {
		free(cls[k].set);
		free(cls[k].key);
	}
	free(cls);
	return err;
}

static struct stack_proc *const *cmp_procs;
static const int *cmp_ids;

static int proc_cmp(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	if (cmp_ids[x] != cmp_ids[y])
		return cmp_ids[x] < cmp_ids[y] ? -1 : 1;
	return cmp_procs[x]->pid - cmp_procs[y]->pid;
}

int stacktree__print(FILE *f, struct stack_proc *const *procs_in, int n,
		     const struct stacktree_opts *opts)
{
	struct st_ctx c = { .f = f, .n = n, .words = (n + 63) / 64 ? (n + 63) / 64 : 1,
			    .max_depth = opts ? opts->max_depth : 0,
			    .all_threads = opts && opts->all_threads };
	struct stack_proc **procs = calloc(n ? n : 1, sizeof(*procs));
	const struct stack_thread **iss = calloc(n ? n : 1, sizeof(*iss));
	struct st_path *paths = calloc(n ? n : 1, sizeof(*paths));
	int *order = calloc(n ? n : 1, sizeof(int)), *ids = calloc(n ? n : 1, sizeof(int));
	int *raw_ids = calloc(n ? n : 1, sizeof(int)), *scratch = calloc(n ? n : 1, sizeof(int));
	struct st_node *root = NULL;
	int err = -ENOMEM, merged = 0;
	char label[512];

	if (!procs || !iss || !paths || !order || !ids || !raw_ids || !scratch)
		goto cleanup;
	/* ranks name processes when every one has its own; otherwise pids do, for all */
	for (int i = 0; i < n; i++) {
		if (procs_in[i]->rank < 0)
			c.by_pid = true;
		for (int j = 0; j < i && !c.by_pid; j++)
			if (procs_in[j]->rank == procs_in[i]->rank)
				c.by_pid = true;
	}
	for (int i = 0; i < n; i++) {
		order[i] = i;
		raw_ids[i] = c.by_pid ? procs_in[i]->pid : procs_in[i]->rank;
	}
	cmp_procs = procs_in;
	cmp_ids = raw_ids;
	qsort(order, n, sizeof(int), proc_cmp);
	for (int i = 0; i < n; i++) {
		procs[i] = procs_in[order[i]];
		ids[i] = raw_ids[order[i]];
	}
	c.procs = procs;
	c.ids = ids;
	c.scratch = scratch;
	sort_ctx = &c;

	root = node_new(&c, "", "");
	if (!root)
		goto cleanup;
	for (int i = 0; i < n; i++) {
		const struct stack_proc *sp = procs[i];

		iss[i] = issuing_thread(sp);
		if (iss[i] && iss[i]->nr_frames && path_build(iss[i], &paths[i]))
			goto cleanup;
		if (!c.all_threads) {
			if (iss[i] && iss[i]->nr_frames) {
				if (tree_add(&c, root, &paths[i], i))
					goto cleanup;
				merged++;
			}
			continue;
		}
		for (int t = 0; t < sp->nr_threads; t++) {
			struct st_path p = {};

			if (!sp->threads[t].nr_frames)
				continue;
			if (path_build(&sp->threads[t], &p))
				goto cleanup;
			err = tree_add(&c, root, &p, i);
			path_free(&p);
			if (err)
				goto cleanup;
			err = -ENOMEM;
			merged++;
		}
	}
	tree_sort(root);

	if (c.all_threads)
		fprintf(f, "merged stacks: %d thread%s of %d process%s, outermost frame first\n",
			merged, merged == 1 ? "" : "s", n, n == 1 ? "" : "es");
	else
		fprintf(f, "merged stacks: issuing thread of %d process%s, outermost frame first\n",
			n, n == 1 ? "" : "es");
	if (c.by_pid && n)
		fprintf(f, "(RANK is not set, or not unique, in every process: processes are named by pid)\n");
	for (int i = 0; i < root->nr_kids; i++)
		print_node(&c, root->kids[i], NULL, 0, 1);
	if (!root->nr_kids)
		fprintf(f, "(no stack could be read)\n");
	/* processes (or threads) without frames: shown, never merged as if healthy */
	for (int i = 0; i < n; i++) {
		const struct stack_proc *sp = procs[i];
		uint64_t one[c.words];
		bool any = false;

		memset(one, 0, sizeof(one));
		bits_set(one, i);
		set_label(&c, one, label, sizeof(label));
		for (int t = 0; t < sp->nr_threads; t++)
			if (sp->threads[t].nr_frames)
				any = true;
		if (!iss[i] || !iss[i]->nr_frames) {
			if (!any || !c.all_threads) {
				if (c.by_pid)
					fprintf(f, "not merged: %s: no frames: %s\n", label,
						no_stack_reason(sp, iss[i]));
				else
					fprintf(f, "not merged: %s (pid %d): no frames: %s\n", label,
						sp->pid, no_stack_reason(sp, iss[i]));
				continue;
			}
		}
		if (!c.all_threads)
			continue;
		for (int t = 0; t < sp->nr_threads; t++)
			if (!sp->threads[t].nr_frames)
				fprintf(f, "not merged: %s thread %d: no frames: %s\n", label,
					sp->threads[t].tid, no_stack_reason(sp, &sp->threads[t]));
	}
	err = print_classes(&c, paths, iss);
	if (!err && ferror(f))
		err = -EIO;
cleanup:
	node_free(root);
	for (int i = 0; paths && i < n; i++)
		path_free(&paths[i]);
	free(paths);
	free(procs);
	free(iss);
	free(order);
	free(ids);
	free(raw_ids);
	free(scratch);
	return err;
}
