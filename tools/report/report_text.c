// SPDX-License-Identifier: MIT
/* report_text: the terminal summary, from the report object only (nothing it does not hold).
 * Every line fits 100 columns: long names and titles are cut with "...", prose is wrapped. */
#include <math.h>
#include <string.h>
#include "report.h"

#define WIDTH 100

static const cJSON *get(const cJSON *o, const char *k)
{
	return cJSON_GetObjectItemCaseSensitive(o, k);
}

static double numv(const cJSON *o, const char *k, bool *ok)
{
	const cJSON *v = get(o, k);

	*ok = cJSON_IsNumber(v);
	return *ok ? v->valuedouble : 0;
}

/* "1.234 ms", "56.7 us", "12 ns"; "unknown" for null */
static const char *dur(char *buf, size_t n, const cJSON *o, const char *k)
{
	bool ok;
	double v = numv(o, k, &ok);

	if (!ok)
		snprintf(buf, n, "unknown");
	else if (v >= 1e9)
		snprintf(buf, n, "%.3f s", v / 1e9);
	else if (v >= 1e6)
		snprintf(buf, n, "%.3f ms", v / 1e6);
	else if (v >= 1e3)
		snprintf(buf, n, "%.1f us", v / 1e3);
	else
		snprintf(buf, n, "%.0f ns", v);
	return buf;
}

/* s cut to width columns (bytes: names are ASCII after demangling) */
static void cut(char *out, size_t n, const char *s, size_t width)
{
	size_t l = strlen(s);

	if (width >= n)
		width = n - 1;
	if (l <= width) {
		memcpy(out, s, l + 1);
		return;
	}
	memcpy(out, s, width - 3);
	memcpy(out + width - 3, "...", 4);
}

/* prose wrapped at WIDTH with an indent */
static void wrap(FILE *f, const char *indent, const char *s)
{
	size_t ind = strlen(indent), col = 0;

	while (*s) {
		const char *w = s;
		size_t l;

		while (*w == ' ')
			w++;
		l = strcspn(w, " ");
		if (!l)
			break;
		if (col && col + 1 + l > WIDTH) {
			fputc('\n', f);
			col = 0;
		}
		if (!col) {
			fputs(indent, f);
			col = ind;
		} else {
			fputc(' ', f);
			col++;
		}
		if (col + l > WIDTH)
			l = WIDTH - col;	/* one word longer than a line */
		fwrite(w, 1, l, f);
		col += l;
		s = w + strcspn(w, " ");
	}
	if (col)
		fputc('\n', f);
}

static void inputs(FILE *f, const cJSON *r)
{
	const cJSON *in;
	char path[48];

	fprintf(f, "tptrace report: %d trace%s\n", cJSON_GetArraySize(get(r, "inputs")),
		cJSON_GetArraySize(get(r, "inputs")) == 1 ? "" : "s");
	cJSON_ArrayForEach(in, get(r, "inputs")) {
		bool ok, ok2;
		double rank = numv(in, "rank", &ok);
		double events = numv(in, "events", &ok2);
		char span[24], who[24];

		cut(path, sizeof(path), cJSON_GetStringValue(get(in, "path")), 36);
		if (ok)
			snprintf(who, sizeof(who), "rank %.0f", rank);
		else
			snprintf(who, sizeof(who), "rank ?");
		fprintf(f, "  %-36s %-9s %8.0f events %12s  gpu:%s mem:%s py:%s\n", path, who, events,
			dur(span, sizeof(span), in, "span_ns"),
			cJSON_IsTrue(get(in, "gpu")) ? "yes" : "no",
			cJSON_IsTrue(get(in, "mem")) ? "yes" : "no",
			cJSON_IsTrue(get(in, "py_stacks")) ? "yes" : "no");
	}
}

static void steps(FILE *f, const cJSON *r)
{
	const cJSON *s = get(r, "steps"), *pr;

	fprintf(f, "\nSteps (%s)\n", cJSON_GetStringValue(get(s, "method")));
	wrap(f, "  ", cJSON_GetStringValue(get(s, "method_detail")));
	fprintf(f, "  %-10s %5s %10s %10s %10s %7s %10s %10s %8s %5s\n", "rank", "steps", "wall mean",
		"wall p50", "wall p99", "GPU idle", "compute", "comm", "launches", "syncs");
	cJSON_ArrayForEach(pr, get(s, "per_rank")) {
		const cJSON *st, *sw = get(pr, "step_wall_ns");
		double busy = 0, idle = 0, comp = 0, comm = 0, la = 0, sy = 0;
		bool known = true, ok;
		int n = cJSON_GetArraySize(get(pr, "steps"));
		char who[16], a[24], b[24], c[24], idle_s[16], comp_s[24], comm_s[24], la_s[16],
		     sy_s[16];
		double rank = numv(pr, "rank", &ok);

		if (ok)
			snprintf(who, sizeof(who), "%.0f", rank);
		else
			snprintf(who, sizeof(who), "pid %.0f", numv(pr, "pid", &ok));
		int bad = (int)numv(pr, "steps_invalid", &ok);

		n -= bad;	/* steps that end before they start: a bug, said below */
		cJSON_ArrayForEach(st, get(pr, "steps")) {
			if (!cJSON_IsNumber(get(st, "wall_ns")))
				continue;
			busy += numv(st, "gpu_busy_ns", &known);
			idle += numv(st, "gpu_idle_ns", &ok);
			comp += numv(st, "compute_ns", &ok);
			comm += numv(st, "comm_ns", &ok);
			la += numv(st, "launches", &ok);
			sy += numv(st, "syncs", &ok);
		}
		if (n && known && busy + idle > 0)
			snprintf(idle_s, sizeof(idle_s), "%.1f%%", 100 * idle / (busy + idle));
		else
			snprintf(idle_s, sizeof(idle_s), "%s", n ? "unknown" : "-");
		if (n && known) {
			snprintf(comp_s, sizeof(comp_s), "%.3f ms", comp / n / 1e6);
			snprintf(comm_s, sizeof(comm_s), "%.3f ms", comm / n / 1e6);
		} else {
			snprintf(comp_s, sizeof(comp_s), "%s", n ? "unknown" : "-");
			snprintf(comm_s, sizeof(comm_s), "%s", n ? "unknown" : "-");
		}
		/* per step: no steps, no numbers ("-", as the columns before) */
		if (n) {
			snprintf(la_s, sizeof(la_s), "%.1f", la / n);
			snprintf(sy_s, sizeof(sy_s), "%.1f", sy / n);
		} else {
			snprintf(la_s, sizeof(la_s), "-");
			snprintf(sy_s, sizeof(sy_s), "-");
		}
		fprintf(f, "  %-10s %5d %10s %10s %10s %7s %10s %10s %8s %5s\n", who, n,
			dur(a, sizeof(a), sw, "mean"), dur(b, sizeof(b), sw, "p50"),
			dur(c, sizeof(c), sw, "p99"), idle_s, comp_s, comm_s, la_s, sy_s);
		if (bad)
			fprintf(f, "  %-10s %d step%s ends before it starts: a tptrace bug, left out "
				"(please report it with the trace)\n", who, bad, bad > 1 ? "s" : "");
	}
	fprintf(f, "  (compute, comm, launches and syncs are per step)\n");
}

static void findings(FILE *f, const cJSON *r)
{
	const cJSON *fi, *c;
	int n = cJSON_GetArraySize(get(r, "findings")), i = 0;
	char line[WIDTH + 1];

	fprintf(f, "\nFindings (%d)\n", n);
	if (!n)
		fprintf(f, "  none: nothing above the thresholds\n");
	cJSON_ArrayForEach(fi, get(r, "findings")) {
		const cJSON *ev;
		char title[WIDTH * 2];

		snprintf(title, sizeof(title), "%d. [%s] %s", ++i,
			 cJSON_GetStringValue(get(fi, "severity")), cJSON_GetStringValue(get(fi, "title")));
		fprintf(f, "\n");
		wrap(f, "  ", title);
		cJSON_ArrayForEach(ev, get(fi, "evidence")) {
			char d[24], dd[32] = "", tid[32] = "", what[WIDTH * 2];
			const char *where = cJSON_GetStringValue(get(ev, "where"));
			bool ok;

			/* an instant (an OOM, a counter) has no duration; a counter no thread */
			if (numv(ev, "dur_ns", &ok) > 0)
				snprintf(dd, sizeof(dd), " (%s)", dur(d, sizeof(d), ev, "dur_ns"));
			if (numv(ev, "tid", &ok) > 0)
				snprintf(tid, sizeof(tid), " tid %.0f", numv(ev, "tid", &ok));
			snprintf(what, sizeof(what), "%s%s%s%s%s", cJSON_GetStringValue(get(ev, "name")),
				 dd, tid, where ? " at " : "", where ? where : "");
			cut(line, sizeof(line), what, WIDTH - 8);
			fprintf(f, "       - %s\n", line);
		}
		{
			char fix[2048];

			snprintf(fix, sizeof(fix), "Fix: %s", cJSON_GetStringValue(get(fi, "fix")));
			wrap(f, "     ", fix);
		}
	}
	if (cJSON_GetArraySize(get(r, "cannot_judge"))) {
		fprintf(f, "\nCannot judge from these traces\n");
		cJSON_ArrayForEach(c, get(r, "cannot_judge")) {
			char what[WIDTH * 3];

			snprintf(what, sizeof(what), "- %s: %s", cJSON_GetStringValue(get(c, "what")),
				 cJSON_GetStringValue(get(c, "why")));
			wrap(f, "  ", what);
		}
	}
}

static void kernels(FILE *f, const cJSON *r)
{
	const cJSON *k = get(r, "kernels"), *t, *l = get(k, "launch");
	char name[40], a[24], b[24], c[24], d[24];
	bool ok;

	if (cJSON_GetArraySize(get(k, "top"))) {
		fprintf(f, "\nTop kernels by GPU time\n");
		fprintf(f, "  %-38s %7s %10s %10s %10s %10s %6s\n", "kernel", "count", "total", "mean",
			"p50", "p99", "share");
		cJSON_ArrayForEach(t, get(k, "top")) {
			cut(name, sizeof(name), cJSON_GetStringValue(get(t, "name")), 38);
			fprintf(f, "  %-38s %7.0f %10s %10s %10s %10s %5.1f%%\n", name,
				numv(t, "count", &ok), dur(a, sizeof(a), t, "total_ns"),
				dur(b, sizeof(b), t, "mean_ns"), dur(c, sizeof(c), t, "p50_ns"),
				dur(d, sizeof(d), t, "p99_ns"), 100 * numv(t, "share", &ok));
		}
	}
	{
		double per_s = numv(l, "per_s", &ok);
		char rate[32];

		if (ok)
			snprintf(rate, sizeof(rate), "%.0f/s", per_s);
		else
			snprintf(rate, sizeof(rate), "unknown");
		fprintf(f, "\nLaunches: %.0f (%s), CPU per launch %s (p50 %s), kernel mean %s\n",
			numv(l, "count", &ok), rate, dur(a, sizeof(a), l, "cpu_ns_mean"),
			dur(b, sizeof(b), l, "cpu_ns_p50"), dur(c, sizeof(c), l, "kernel_ns_mean"));
	}
}

static void ranks(FILE *f, const cJSON *r)
{
	const cJSON *k;
	char a[24], b[24], who[24];
	bool ok;

	if (cJSON_GetArraySize(get(r, "ranks")) < 2)
		return;
	fprintf(f, "\nRanks\n  %-10s %10s %14s %16s\n", "rank", "pid", "step wall mean",
		"collective wait");
	cJSON_ArrayForEach(k, get(r, "ranks")) {
		double rank = numv(k, "rank", &ok);

		snprintf(who, sizeof(who), ok ? "%.0f" : "?", rank);
		fprintf(f, "  %-10s %10.0f %14s %16s\n", who, numv(k, "pid", &ok),
			dur(a, sizeof(a), k, "step_wall_ns_mean"),
			dur(b, sizeof(b), k, "collective_wait_ns"));
	}
}

/* --torch: the top ops by self CPU time, as torch's key_averages().table() sorts them */
#define TEXT_OPS 12
#define OP_NAME 36

static void ops(FILE *f, const cJSON *r)
{
	const cJSON *o = get(r, "ops"), *t;
	char a[24], b[24], c[24], d[24], why[WIDTH * 2];
	int i = 0;
	bool ok;

	if (!cJSON_IsObject(o)) {
		snprintf(why, sizeof(why), "Operators: unknown (%s)",
			 cJSON_GetStringValue(get(r, "ops_unknown")) ?: "no operator data");
		fprintf(f, "\n");
		wrap(f, "", why);
		return;
	}
	fprintf(f, "\nOperators by self CPU time (torch.profiler, --torch): %.0f slices, self CPU %s\n",
		numv(o, "count", &ok), dur(a, sizeof(a), o, "self_cpu_ns"));
	fprintf(f, "  %-*s %6s %10s %6s %10s %10s %10s\n", OP_NAME, "op", "count", "self CPU",
		"self%", "total CPU", "GPU self", "GPU total");
	cJSON_ArrayForEach(t, get(o, "top")) {
		const char *name = cJSON_GetStringValue(get(t, "name"));

		if (i++ == TEXT_OPS)
			break;
		/* a long name on its own line, the numbers under it: never cut */
		if (strlen(name) > OP_NAME) {
			wrap(f, "  ", name);
			name = "";
		}
		fprintf(f, "  %-*s %6.0f %10s %5.1f%% %10s %10s %10s\n", OP_NAME, name,
			numv(t, "count", &ok), dur(a, sizeof(a), t, "self_cpu_ns"),
			100 * numv(t, "self_cpu_share", &ok), dur(b, sizeof(b), t, "total_cpu_ns"),
			dur(c, sizeof(c), t, "gpu_self_ns"), dur(d, sizeof(d), t, "gpu_total_ns"));
	}
	if (cJSON_GetArraySize(get(o, "top")) > TEXT_OPS)
		fprintf(f, "  (%d more in --json and the HTML page)\n",
			cJSON_GetArraySize(get(o, "top")) - TEXT_OPS);
	if (!cJSON_IsTrue(get(o, "gpu")))
		fprintf(f, "  (GPU time unknown: no --gpu data in the trace)\n");
}

void report_text(const cJSON *r, FILE *f)
{
	inputs(f, r);
	steps(f, r);
	findings(f, r);
	ops(f, r);
	kernels(f, r);
	ranks(f, r);
}
