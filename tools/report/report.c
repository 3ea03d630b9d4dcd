// SPDX-License-Identifier: MIT
/* `tptrace report`: the command line. A subcommand of ./tptrace (user/cli/tptrace.c dispatches
 * "report" here): it reads files only and needs no privilege. */
#include <argp.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cli_output.h"
#include "report.h"
#include "util.h"

#ifndef TPTRACE_VERSION
#define TPTRACE_VERSION "dev"
#endif

/* --json, -o (the HTML page): cli_output (user/base/cli_output.h) */
struct report_args {
	const char **traces;
	size_t nr;
	const char *step_func;
	bool compare;
};

enum { OPT_STEP = 0x100, OPT_COMPARE };

static const struct argp_option opts[] = {
	{ "step", OPT_STEP, "FUNC", 0, "A step is one call of the Python function FUNC (needs a "
	  "trace made with --py-stacks); default: torch.profiler's ProfilerStep#N (--torch), else "
	  "found from the repeating syncs/collectives", 0 },
	{ "compare", OPT_COMPARE, NULL, 0, "Two runs side by side: the arguments are BEFORE and "
	  "AFTER, each one trace, a comma-separated list of traces (the ranks of one run) or a "
	  "directory of them (*.json, *.json.gz)", 0 },
	{},
};

static const char doc[] =
	"What to fix in a PyTorch/CUDA job, from tptrace traces (.json, .json.gz; one per rank or "
	"process, several at once).\n\n"
	"Finds the training steps, then reports per step the wall time, GPU busy/idle, compute, "
	"communication, copy and memset time and launches, and findings with their numbers, "
	"evidence and fix: GPU idle and why (host syncs, launch-bound, waiting on data), tiny "
	"kernels, blocking device-to-host copies, pageable copies, NCCL not overlapped with "
	"compute, straggler ranks, memory peaks and OOMs. What the traces cannot show (no --gpu, "
	"no --mem) is listed, not guessed.\n\n"
	"--json writes the report object (docs/report-schema.md) to stdout instead of the "
	"summary; -o FILE also writes the report as one self-contained HTML page.\n\n"
	"Usage: tptrace report TRACE [TRACE...] [--json] [-o report.html] [--step FUNC]\n"
	"       tptrace report --compare BEFORE AFTER [--json] [-o compare.html] [--step FUNC]\n\n"
	"Examples:\n"
	"  tptrace report step.json.gz                  # the summary\n"
	"  tptrace report rank*.json.gz -o report.html  # all ranks, and plots\n"
	"  tptrace report py.json.gz --step train_step  # a step = train_step()\n"
	"  tptrace report t.json --json | jq .findings\n"
	"  tptrace report --compare before.json.gz after.json.gz   # the deltas of a change\n"
	"  tptrace report --compare r0.json,r1.json runs/after/ -o diff.html\v"
	"Exit status: 0 report written, 1 an input could not be read (one line says which and "
	"why), 2 usage.";

static error_t parse(int key, char *arg, struct argp_state *state)
{
	struct report_args *a = state->input;

	switch (key) {
	case OPT_COMPARE:
		a->compare = true;
		break;
	case OPT_STEP:
		if (!*arg)
			argp_error(state, "--step needs a function name");
		a->step_func = arg;
		break;
	case ARGP_KEY_ARG:
		a->traces[a->nr++] = arg;
		break;
	case ARGP_KEY_END:
		if (!a->nr)
			argp_error(state, "no trace given");
		if (a->compare && a->nr != 2)
			argp_error(state, "--compare takes BEFORE and AFTER (a trace, a comma list, "
				   "a directory), not %zu", a->nr);
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

struct side {
	char **paths;
	size_t nr;
	struct rinput *in;
	cJSON *report;
};

static int cmp_str(const void *x, const void *y)
{
	return strcmp(*(char *const *)x, *(char *const *)y);
}

static int side_add(struct side *s, const char *path, size_t len)
{
	char **n = realloc(s->paths, (s->nr + 1) * sizeof(*n));

	if (!n)
		return -ENOMEM;
	s->paths = n;
	s->paths[s->nr] = strndup(path, len);
	if (!s->paths[s->nr])
		return -ENOMEM;
	s->nr++;
	return 0;
}

static bool is_trace_name(const char *n)
{
	size_t l = strlen(n);

	return (l > 5 && !strcmp(n + l - 5, ".json")) || (l > 8 && !strcmp(n + l - 8, ".json.gz"));
}

/* --compare's BEFORE or AFTER: a directory (its *.json, *.json.gz, sorted), a comma list, or
 * one trace. 0, or -1 with one line on stderr. */
static int side_expand(struct side *s, const char *arg)
{
	struct stat st;

	if (!stat(arg, &st) && S_ISDIR(st.st_mode)) {
		DIR *d = opendir(arg);
		struct dirent *de;
		size_t first = s->nr;

		if (!d) {
			fprintf(stderr, "tptrace report: %s: cannot open the directory: %s\n", arg,
				strerror(errno));
			return -1;
		}
		while ((de = readdir(d))) {
			char p[4096];
			int n;

			if (de->d_name[0] == '.' || !is_trace_name(de->d_name))
				continue;
			n = snprintf(p, sizeof(p), "%s%s%s", arg,
				     arg[strlen(arg) - 1] == '/' ? "" : "/", de->d_name);
			if (n < 0 || (size_t)n >= sizeof(p) || side_add(s, p, (size_t)n)) {
				closedir(d);
				fprintf(stderr, "tptrace report: %s: out of memory\n", arg);
				return -1;
			}
		}
		closedir(d);
		if (s->nr == first) {
			fprintf(stderr, "tptrace report: %s: no trace (*.json, *.json.gz) in this "
				"directory\n", arg);
			return -1;
		}
		qsort(s->paths + first, s->nr - first, sizeof(*s->paths), cmp_str);
		return 0;
	}
	for (const char *p = arg;;) {
		size_t l = strcspn(p, ",");

		if (!l) {
			fprintf(stderr, "tptrace report: --compare: an empty name in \"%s\"\n", arg);
			return -1;
		}
		if (side_add(s, p, l)) {
			fprintf(stderr, "tptrace report: out of memory\n");
			return -1;
		}
		if (!p[l])
			return 0;
		p += l + 1;
	}
}

/* reads the side's traces and analyses them: 0, or -1 with one line on stderr */
static int side_analyze(struct side *s, struct rstrings *strs, const struct report_opts *o)
{
	char err[512];

	s->in = calloc(s->nr, sizeof(*s->in));
	if (!s->in) {
		fprintf(stderr, "tptrace report: out of memory\n");
		return -1;
	}
	for (size_t i = 0; i < s->nr; i++) {
		if (report_read(&s->in[i], strs, s->paths[i], err, sizeof(err))) {
			fprintf(stderr, "tptrace report: %s: %s\n", s->paths[i], err);
			return -1;
		}
	}
	s->report = report_analyze(s->in, s->nr, strs, o, err, sizeof(err));
	if (!s->report) {
		fprintf(stderr, "tptrace report: %s\n", err);
		return -1;
	}
	return 0;
}

static void side_free(struct side *s)
{
	cJSON_Delete(s->report);
	for (size_t i = 0; s->in && i < s->nr; i++)
		rinput__free(&s->in[i]);
	free(s->in);
	for (size_t i = 0; i < s->nr; i++)
		free(s->paths[i]);
	free(s->paths);
}

int report_main(int argc, char **argv)
{
	struct argp_child children[] = { { NULL, 0, NULL, 0 }, {} };
	struct argp argp = { .options = opts, .parser = parse, .args_doc = "TRACE...",
			     .doc = doc, .children = children };
	struct report_args a = {};
	struct report_opts o = { .idle_frac_min = 0.2 };
	struct rstrings strs = {};
	struct side sides[2] = {};
	cJSON *report = NULL;
	char err[512];
	int ret = 1;

	argp_program_version = "tptrace report " TPTRACE_VERSION;
	a.traces = calloc(argc + 1, sizeof(*a.traces));
	if (!a.traces)
		return 1;
	argp_err_exit_status = 2;
	argv[0] = (char *)"tptrace report";	/* argp's "Usage:" and error lines */
	argp_help_width();
	cli_output.takes = CLI_OUT_FILE | CLI_OUT_JSON;
	children[0].argp = cli_output__argp();
	if (argp_parse(&argp, argc, argv, 0, NULL, &a)) {
		free(a.traces);
		return 2;
	}
	o.step_func = a.step_func;
	if (a.compare) {
		for (int i = 0; i < 2; i++)
			if (side_expand(&sides[i], a.traces[i]))
				goto cleanup;
		for (int i = 0; i < 2; i++)
			if (side_analyze(&sides[i], &strs, &o))
				goto cleanup;
		report = report_compare(sides[0].report, (const char *const *)sides[0].paths,
					sides[0].nr, sides[1].report,
					(const char *const *)sides[1].paths, sides[1].nr);
	} else {
		for (size_t i = 0; i < a.nr; i++)
			if (side_add(&sides[0], a.traces[i], strlen(a.traces[i]))) {
				fprintf(stderr, "tptrace report: out of memory\n");
				goto cleanup;
			}
		if (side_analyze(&sides[0], &strs, &o))
			goto cleanup;
		report = sides[0].report;
		sides[0].report = NULL;
	}
	if (!report) {
		fprintf(stderr, "tptrace report: out of memory\n");
		goto cleanup;
	}
	if (cli_output.file) {
		int r = report_html__write(report, cli_output.file, err, sizeof(err));

		if (r) {
			fprintf(stderr, "tptrace report: %s\n", err);
			goto cleanup;
		}
	}
	if (cli_output.json) {
		char *s = cJSON_PrintUnformatted(report);

		if (!s) {
			fprintf(stderr, "tptrace report: out of memory\n");
			goto cleanup;
		}
		puts(s);
		free(s);
	} else {
		if (a.compare)
			report_compare_text(report, stdout);
		else
			report_text(report, stdout);
		if (cli_output.file)
			printf("\nwrote %s\n", cli_output.file);
	}
	if (fflush(stdout)) {
		fprintf(stderr, "tptrace report: writing stdout: %s\n", strerror(errno));
		goto cleanup;
	}
	ret = 0;
cleanup:
	cJSON_Delete(report);
	side_free(&sides[0]);
	side_free(&sides[1]);
	for (uint32_t i = 0; i < strs.nr; i++)
		free(strs.str[i]);
	free(strs.str);
	free(strs.slots);
	free(a.traces);
	return ret;
}
