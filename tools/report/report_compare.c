// SPDX-License-Identifier: MIT
/* report_compare: `tptrace report --compare BEFORE AFTER`, "profile before and after a
 * change". Each side is analysed on its own (report_analyze, one report object per side, from
 * one or several traces: the ranks of one run); this module sets the two objects side by side:
 * the step time, each finding (matched by id and rank: new, gone, or in both), the top kernels
 * and the top torch ops, every number with its delta (after - before) and its delta in % of
 * before. A number one side cannot know stays unknown (null with why), and so does its delta;
 * a % of a before of 0 is unknown, never infinite or 0. Rendered by compare_text (the terminal,
 * 100 columns) and the HTML page (tools/report/report_html.js draws a compare object too).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "report.h"

#define CMP_KERNELS 15
#define CMP_OPS 20
#define WIDTH 100
#define ABSENT_BEFORE "not in the before traces"
#define ABSENT_AFTER "not in the after traces"

static const cJSON *get(const cJSON *o, const char *k)
{
	return cJSON_GetObjectItemCaseSensitive(o, k);
}

static bool numv(const cJSON *o, const char *k, double *v)
{
	const cJSON *x = get(o, k);

	if (!cJSON_IsNumber(x))
		return false;
	*v = x->valuedouble;
	return true;
}

static void unknown(cJSON *o, const char *k, const char *why)
{
	char key[96];

	cJSON_AddNullToObject(o, k);
	snprintf(key, sizeof(key), "%s_unknown", k);
	cJSON_AddStringToObject(o, key, why);
}

/* {"before", "after", "delta", "delta_pct"}; a side's null and its why are kept */
static cJSON *delta(cJSON *parent, const char *key, bool kb, double b, bool ka, double a,
		    const char *why_b, const char *why_a)
{
	cJSON *o = cJSON_AddObjectToObject(parent, key);

	if (kb)
		cJSON_AddNumberToObject(o, "before", b);
	else
		unknown(o, "before", why_b ? why_b : ABSENT_BEFORE);
	if (ka)
		cJSON_AddNumberToObject(o, "after", a);
	else
		unknown(o, "after", why_a ? why_a : ABSENT_AFTER);
	if (kb && ka) {
		cJSON_AddNumberToObject(o, "delta", a - b);
		if (b != 0)
			cJSON_AddNumberToObject(o, "delta_pct", 100 * (a - b) / b);
		else
			unknown(o, "delta_pct", "before is 0");
	} else {
		const char *w = kb ? (why_a ? why_a : ABSENT_AFTER) : (why_b ? why_b : ABSENT_BEFORE);

		unknown(o, "delta", w);
		unknown(o, "delta_pct", w);
	}
	return o;
}

static const char *why_of(const cJSON *o, const char *k)
{
	char key[96];

	snprintf(key, sizeof(key), "%s_unknown", k);
	return cJSON_GetStringValue(get(o, key));
}

/* a number of two objects (either may be NULL: absent on that side) */
static void delta_key(cJSON *parent, const char *key, const cJSON *b, const cJSON *a)
{
	double x = 0, y = 0;
	bool kb = b && numv(b, key, &x), ka = a && numv(a, key, &y);

	delta(parent, key, kb, x, ka, y, b ? why_of(b, key) : NULL, a ? why_of(a, key) : NULL);
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

/* every valid step of every rank of one side: mean and p50 */
static void step_stats(const cJSON *r, double *mean, double *p50, size_t *n)
{
	const cJSON *pr, *st;
	double *w = NULL, sum = 0;
	size_t cap = 0;

	*n = 0;
	cJSON_ArrayForEach(pr, get(get(r, "steps"), "per_rank"))
		cap += cJSON_GetArraySize(get(pr, "steps"));
	w = calloc(cap + 1, sizeof(*w));
	if (!w)
		return;
	cJSON_ArrayForEach(pr, get(get(r, "steps"), "per_rank"))
		cJSON_ArrayForEach(st, get(pr, "steps")) {
			double v;

			if (numv(st, "wall_ns", &v) && *n < cap) {
				w[(*n)++] = v;
				sum += v;
			}
		}
	if (*n) {
		qsort(w, *n, sizeof(*w), cmp_double);
		*mean = sum / *n;
		*p50 = w[(*n - 1) / 2];
	}
	free(w);
}

static cJSON *side(const cJSON *r, const char *const *paths, size_t nr)
{
	cJSON *o = cJSON_CreateObject(), *in = cJSON_AddArrayToObject(o, "inputs");
	const cJSON *s = get(r, "steps");
	size_t n;
	double m, p;

	for (size_t i = 0; i < nr; i++)
		cJSON_AddItemToArray(in, cJSON_CreateString(paths[i]));
	cJSON_AddStringToObject(o, "step_method", cJSON_GetStringValue(get(s, "method")) ?: "none");
	cJSON_AddStringToObject(o, "step_method_detail",
				cJSON_GetStringValue(get(s, "method_detail")) ?: "");
	step_stats(r, &m, &p, &n);
	cJSON_AddNumberToObject(o, "steps", (double)n);
	cJSON_AddNumberToObject(o, "findings", cJSON_GetArraySize(get(r, "findings")));
	return o;
}

static bool same_rank(const cJSON *a, const cJSON *b)
{
	const cJSON *x = get(get(a, "numbers"), "rank"), *y = get(get(b, "numbers"), "rank");

	if (cJSON_IsNumber(x) != cJSON_IsNumber(y))
		return false;
	return !cJSON_IsNumber(x) || x->valuedouble == y->valuedouble;
}

static void add_finding(cJSON *arr, const cJSON *b, const cJSON *a)
{
	const cJSON *any = b ? b : a, *k, *rank;
	cJSON *o = cJSON_CreateObject(), *nums;

	cJSON_AddStringToObject(o, "id", cJSON_GetStringValue(get(any, "id")));
	rank = get(get(any, "numbers"), "rank");
	if (cJSON_IsNumber(rank))
		cJSON_AddNumberToObject(o, "rank", rank->valuedouble);
	else
		unknown(o, "rank", "the finding names no rank");
	cJSON_AddStringToObject(o, "status", b && a ? "both" : b ? "gone" : "new");
	if (b)
		cJSON_AddStringToObject(o, "severity_before", cJSON_GetStringValue(get(b, "severity")));
	else
		cJSON_AddNullToObject(o, "severity_before");
	if (a)
		cJSON_AddStringToObject(o, "severity_after", cJSON_GetStringValue(get(a, "severity")));
	else
		cJSON_AddNullToObject(o, "severity_after");
	cJSON_AddStringToObject(o, "title_before", b ? cJSON_GetStringValue(get(b, "title")) : "");
	cJSON_AddStringToObject(o, "title_after", a ? cJSON_GetStringValue(get(a, "title")) : "");
	nums = cJSON_AddObjectToObject(o, "numbers");
	/* every number either side states, in the order the finding states them */
	for (int pass = 0; pass < 2; pass++) {
		const cJSON *from = pass ? a : b;

		cJSON_ArrayForEach(k, get(from, "numbers")) {
			if (!strcmp(k->string, "rank") || !strcmp(k->string, "pid") ||
			    strstr(k->string, "_unknown") ||
			    get(nums, k->string))
				continue;
			if (!cJSON_IsNumber(k) && !cJSON_IsNull(k))
				continue;
			delta_key(nums, k->string, b ? get(b, "numbers") : NULL,
				  a ? get(a, "numbers") : NULL);
		}
	}
	cJSON_AddItemToArray(arr, o);
}

/* rows of two "top" lists matched by name: the union, the largest on either side first */
struct row {
	const char *name;
	const cJSON *b, *a;
	double key;
};

static int cmp_row(const void *x, const void *y)
{
	const struct row *p = x, *q = y;

	if (p->key != q->key)
		return p->key > q->key ? -1 : 1;
	return strcmp(p->name, q->name);
}

static void table(cJSON *arr, const cJSON *tb, const cJSON *ta, const char *sort_key,
		  const char *const *keys, size_t nr_keys, size_t max)
{
	size_t n = cJSON_GetArraySize(tb) + cJSON_GetArraySize(ta), nr = 0;
	struct row *rows = calloc(n + 1, sizeof(*rows));
	const cJSON *t;

	if (!rows)
		return;
	cJSON_ArrayForEach(t, tb) {
		rows[nr++] = (struct row){ cJSON_GetStringValue(get(t, "name")) ?: "?", t, NULL, 0 };
	}
	cJSON_ArrayForEach(t, ta) {
		const char *name = cJSON_GetStringValue(get(t, "name")) ?: "?";
		size_t i;

		for (i = 0; i < nr; i++)
			if (!strcmp(rows[i].name, name) && !rows[i].a)
				break;
		if (i == nr)
			rows[nr++] = (struct row){ name, NULL, t, 0 };
		else
			rows[i].a = t;
	}
	for (size_t i = 0; i < nr; i++) {
		double x = 0, y = 0;

		if (rows[i].b)
			numv(rows[i].b, sort_key, &x);
		if (rows[i].a)
			numv(rows[i].a, sort_key, &y);
		rows[i].key = x > y ? x : y;
	}
	qsort(rows, nr, sizeof(*rows), cmp_row);
	for (size_t i = 0; i < nr && i < max; i++) {
		cJSON *o = cJSON_CreateObject();

		cJSON_AddStringToObject(o, "name", rows[i].name);
		cJSON_AddStringToObject(o, "status", rows[i].b && rows[i].a ? "both" :
					rows[i].b ? "gone" : "new");
		for (size_t k = 0; k < nr_keys; k++)
			delta_key(o, keys[k], rows[i].b, rows[i].a);
		cJSON_AddItemToArray(arr, o);
	}
	free(rows);
}

cJSON *report_compare(const cJSON *before, const char *const *bpaths, size_t nb,
		      const cJSON *after, const char *const *apaths, size_t na)
{
	static const char *const kkeys[] = { "count", "total_ns", "mean_ns", "p50_ns", "share" };
	static const char *const okeys[] = { "count", "self_cpu_ns", "total_cpu_ns", "gpu_self_ns",
					     "gpu_total_ns" };
	cJSON *c = cJSON_CreateObject(), *st, *fs, *arr;
	const cJSON *f, *g;
	double mb = 0, pb = 0, ma = 0, pa = 0;
	size_t sb, sa;

	cJSON_AddNumberToObject(c, "tptrace_compare", 1);
	cJSON_AddItemToObject(c, "before", side(before, bpaths, nb));
	cJSON_AddItemToObject(c, "after", side(after, apaths, na));
	st = cJSON_AddObjectToObject(c, "step_wall_ns");
	step_stats(before, &mb, &pb, &sb);
	step_stats(after, &ma, &pa, &sa);
	delta(st, "mean", sb, mb, sa, ma, "no steps found before", "no steps found after");
	delta(st, "p50", sb, pb, sa, pa, "no steps found before", "no steps found after");
	/* findings: in the before order, then the new ones */
	fs = cJSON_AddArrayToObject(c, "findings");
	cJSON_ArrayForEach(f, get(before, "findings")) {
		const cJSON *match = NULL;

		cJSON_ArrayForEach(g, get(after, "findings"))
			if (!strcmp(cJSON_GetStringValue(get(f, "id")) ?: "",
				    cJSON_GetStringValue(get(g, "id")) ?: "") && same_rank(f, g)) {
				match = g;
				break;
			}
		add_finding(fs, f, match);
	}
	cJSON_ArrayForEach(g, get(after, "findings")) {
		bool seen = false;

		cJSON_ArrayForEach(f, get(before, "findings"))
			seen |= !strcmp(cJSON_GetStringValue(get(f, "id")) ?: "",
					cJSON_GetStringValue(get(g, "id")) ?: "") && same_rank(f, g);
		if (!seen)
			add_finding(fs, NULL, g);
	}
	arr = cJSON_AddArrayToObject(c, "kernels");
	table(arr, get(get(before, "kernels"), "top"), get(get(after, "kernels"), "top"), "total_ns",
	      kkeys, sizeof(kkeys) / sizeof(kkeys[0]), CMP_KERNELS);
	if (!cJSON_IsObject(get(before, "ops")) && !cJSON_IsObject(get(after, "ops"))) {
		unknown(c, "ops", "no torch.profiler events on either side: trace with --torch");
	} else {
		arr = cJSON_AddArrayToObject(c, "ops");
		table(arr, get(get(before, "ops"), "top"), get(get(after, "ops"), "top"),
		      "self_cpu_ns", okeys, sizeof(okeys) / sizeof(okeys[0]), CMP_OPS);
	}
	return c;
}

/* --- the terminal ---------------------------------------------------------------------- */

static void fmt_ns(char *buf, size_t n, double v, bool sign)
{
	const char *s = sign && v > 0 ? "+" : "";
	double a = fabs(v);

	if (a >= 1e9)
		snprintf(buf, n, "%s%.3f s", s, v / 1e9);
	else if (a >= 1e6)
		snprintf(buf, n, "%s%.3f ms", s, v / 1e6);
	else if (a >= 1e3)
		snprintf(buf, n, "%s%.1f us", s, v / 1e3);
	else
		snprintf(buf, n, "%s%.0f ns", s, v);
}

/* a number of a delta object as text: times with units, counts and fractions as they are */
static void cell(char *buf, size_t n, const cJSON *d, const char *k, bool is_ns, bool sign)
{
	double v;

	if (!numv(d, k, &v)) {
		const char *why = why_of(d, k);

		/* a row or finding one side does not have: nothing there, not an unknown */
		snprintf(buf, n, "%s", why && (!strcmp(why, ABSENT_BEFORE) ||
					       !strcmp(why, ABSENT_AFTER)) ? "-" : "unknown");
		return;
	}
	if (!strcmp(k, "delta_pct"))
		snprintf(buf, n, "%+.1f%%", v);
	else if (is_ns)
		fmt_ns(buf, n, v, sign);
	else if (v == floor(v) && fabs(v) < 1e15)
		snprintf(buf, n, sign ? "%+.0f" : "%.0f", v);
	else
		snprintf(buf, n, sign ? "%+.4g" : "%.4g", v);
}

static bool key_is_ns(const char *k)
{
	size_t l = strlen(k);

	return l > 3 && !strcmp(k + l - 3, "_ns");
}

static void line4(FILE *f, const char *indent, int w, const char *name, const cJSON *d,
		  bool is_ns)
{
	char b[32], a[32], dd[32], p[32];

	cell(b, sizeof(b), d, "before", is_ns, false);
	cell(a, sizeof(a), d, "after", is_ns, false);
	cell(dd, sizeof(dd), d, "delta", is_ns, true);
	cell(p, sizeof(p), d, "delta_pct", false, true);
	if ((int)strlen(name) > w) {
		fprintf(f, "%s%s\n", indent, name);
		name = "";
	}
	fprintf(f, "%s%-*s %12s %12s %12s %9s\n", indent, w, name, b, a, dd, p);
}

static void rows_text(FILE *f, const char *title, const cJSON *arr, const char *const *keys,
		      size_t nr)
{
	const cJSON *r;

	fprintf(f, "\n%s\n", title);
	if (!cJSON_GetArraySize(arr)) {
		fprintf(f, "  none on either side\n");
		return;
	}
	cJSON_ArrayForEach(r, arr) {
		const char *st = cJSON_GetStringValue(get(r, "status"));
		char name[WIDTH * 2];

		snprintf(name, sizeof(name), "%s%s", cJSON_GetStringValue(get(r, "name")),
			 !strcmp(st, "new") ? " (new)" : !strcmp(st, "gone") ? " (gone)" : "");
		fprintf(f, "  %s\n", name);
		for (size_t k = 0; k < nr; k++)
			line4(f, "    ", 36, keys[k], get(r, keys[k]), key_is_ns(keys[k]));
	}
}

void report_compare_text(const cJSON *c, FILE *f)
{
	static const char *const kkeys[] = { "count", "total_ns", "mean_ns" };
	static const char *const okeys[] = { "count", "self_cpu_ns", "total_cpu_ns", "gpu_total_ns" };
	const cJSON *fi, *st = get(c, "step_wall_ns");
	const char *sides[] = { "before", "after" };

	fprintf(f, "tptrace report --compare\n");
	for (int i = 0; i < 2; i++) {
		const cJSON *s = get(c, sides[i]), *p;
		double n = 0, nf = 0;
		int ni = cJSON_GetArraySize(get(s, "inputs"));

		numv(s, "steps", &n);
		numv(s, "findings", &nf);
		fprintf(f, "  %-6s %d trace%s, %.0f steps (%s), %.0f finding%s\n", sides[i], ni,
			ni == 1 ? "" : "s", n, cJSON_GetStringValue(get(s, "step_method")), nf,
			nf == 1 ? "" : "s");
		cJSON_ArrayForEach(p, get(s, "inputs"))
			fprintf(f, "         %s\n", cJSON_GetStringValue(p));
	}
	fprintf(f, "\n  %-36s %12s %12s %12s %9s\n", "", "before", "after", "delta", "delta%");
	line4(f, "  ", 36, "step wall mean", get(st, "mean"), true);
	line4(f, "  ", 36, "step wall p50", get(st, "p50"), true);
	fprintf(f, "\nFindings (%d)\n", cJSON_GetArraySize(get(c, "findings")));
	if (!cJSON_GetArraySize(get(c, "findings")))
		fprintf(f, "  none on either side\n");
	cJSON_ArrayForEach(fi, get(c, "findings")) {
		const cJSON *k;
		char head[WIDTH * 4], rank[24] = "";
		double r;
		const char *sb = cJSON_GetStringValue(get(fi, "severity_before"));
		const char *sa = cJSON_GetStringValue(get(fi, "severity_after"));

		if (numv(fi, "rank", &r))
			snprintf(rank, sizeof(rank), " (rank %.0f)", r);
		snprintf(head, sizeof(head), "%s%s: %s -> %s: %s", cJSON_GetStringValue(get(fi, "id")),
			 rank, sb ? sb : "none", sa ? sa : "gone",
			 cJSON_GetStringValue(get(fi, sa ? "title_after" : "title_before")));
		fprintf(f, "  ");
		/* the head wrapped at 100 columns, under itself */
		{
			const char *s = head;
			size_t col = 2;

			while (*s) {
				size_t l = strcspn(s, " ");

				if (col > 4 && col + 1 + l > WIDTH) {
					fprintf(f, "\n    ");
					col = 4;
				} else if (col > 2) {
					fputc(' ', f);
					col++;
				}
				if (col + l > WIDTH)
					l = WIDTH - col;
				fwrite(s, 1, l, f);
				col += l;
				s += l;
				while (*s == ' ')
					s++;
			}
			fputc('\n', f);
		}
		cJSON_ArrayForEach(k, get(fi, "numbers"))
			if (cJSON_IsObject(k))
				line4(f, "    ", 34, k->string, k, key_is_ns(k->string));
	}
	rows_text(f, "Top kernels (by GPU time on either side)", get(c, "kernels"), kkeys, 3);
	if (cJSON_IsArray(get(c, "ops")))
		rows_text(f, "Top ops (by self CPU time on either side, torch.profiler)", get(c, "ops"),
			  okeys, 4);
	else
		fprintf(f, "\nOps: unknown (%s)\n", cJSON_GetStringValue(get(c, "ops_unknown")));
}
