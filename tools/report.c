// SPDX-License-Identifier: MIT
/* `tptrace report`: the command line. A subcommand of ./tptrace (user/tptrace.c dispatches
 * "report" here): it reads files only and needs no privilege. */
#include <argp.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "report.h"
#include "util.h"

#ifndef TPTRACE_VERSION
#define TPTRACE_VERSION "dev"
#endif

struct report_args {
	const char **traces;
	size_t nr;
	const char *html, *step_func;
	bool json;
};

enum { OPT_JSON = 0x100, OPT_STEP };

static const struct argp_option opts[] = {
	{ "json", OPT_JSON, NULL, 0, "Write the report object (docs/report-schema.md) to stdout "
	  "instead of the summary", 0 },
	{ "output", 'o', "FILE", 0, "Also write the report as one self-contained HTML page", 0 },
	{ "step", OPT_STEP, "FUNC", 0, "A step is one call of the Python function FUNC (needs a "
	  "trace made with --py-stacks); default: found from the repeating syncs/collectives", 0 },
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
	"Usage: tptrace report TRACE [TRACE...] [--json] [-o report.html] [--step FUNC]\n\n"
	"Examples:\n"
	"  tptrace report step.json.gz                  # the summary\n"
	"  tptrace report rank*.json.gz -o report.html  # all ranks, and plots\n"
	"  tptrace report py.json.gz --step train_step  # a step = train_step()\n"
	"  tptrace report t.json --json | jq .findings\v"
	"Exit status: 0 report written, 1 an input could not be read (one line says which and "
	"why), 2 usage.";

static error_t parse(int key, char *arg, struct argp_state *state)
{
	struct report_args *a = state->input;

	switch (key) {
	case OPT_JSON:
		a->json = true;
		break;
	case 'o':
		a->html = arg;
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
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

int report_main(int argc, char **argv)
{
	static const struct argp argp = { .options = opts, .parser = parse, .args_doc = "TRACE...",
					  .doc = doc };
	struct report_args a = {};
	struct report_opts o = { .idle_frac_min = 0.2 };
	struct rstrings strs = {};
	struct rinput *in = NULL;
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
	if (argp_parse(&argp, argc, argv, 0, NULL, &a)) {
		free(a.traces);
		return 2;
	}
	o.step_func = a.step_func;
	in = calloc(a.nr, sizeof(*in));
	if (!in)
		goto cleanup;
	for (size_t i = 0; i < a.nr; i++) {
		if (report_read(&in[i], &strs, a.traces[i], err, sizeof(err))) {
			fprintf(stderr, "tptrace report: %s: %s\n", a.traces[i], err);
			goto cleanup;
		}
	}
	report = report_analyze(in, a.nr, &strs, &o, err, sizeof(err));
	if (!report) {
		fprintf(stderr, "tptrace report: %s\n", err);
		goto cleanup;
	}
	if (a.html) {
		int r = report_html__write(report, a.html, err, sizeof(err));

		if (r) {
			fprintf(stderr, "tptrace report: %s\n", err);
			goto cleanup;
		}
	}
	if (a.json) {
		char *s = cJSON_PrintUnformatted(report);

		if (!s) {
			fprintf(stderr, "tptrace report: out of memory\n");
			goto cleanup;
		}
		puts(s);
		free(s);
	} else {
		report_text(report, stdout);
		if (a.html)
			printf("\nwrote %s\n", a.html);
	}
	if (fflush(stdout)) {
		fprintf(stderr, "tptrace report: writing stdout: %s\n", strerror(errno));
		goto cleanup;
	}
	ret = 0;
cleanup:
	cJSON_Delete(report);
	for (size_t i = 0; in && i < a.nr; i++)
		rinput__free(&in[i]);
	free(in);
	for (uint32_t i = 0; i < strs.nr; i++)
		free(strs.str[i]);
	free(strs.str);
	free(strs.slots);
	free(a.traces);
	return ret;
}
