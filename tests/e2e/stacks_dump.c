// SPDX-License-Identifier: MIT
/* Test driver of the snapshot engine (user/stacks.h): prints stacks__json() of each pid on
 * stdout, one JSON object per line. The real command line is `tptrace stacks`.
 * Usage: stacks_dump [--samples N] [--interval MS] [--timeout MS] [--no-python] PID... */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "stacks.h"

int main(int argc, char **argv)
{
	struct stack_opts opts = { 0 };
	int rc = 0, npids = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--samples") && i + 1 < argc)
			opts.samples = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--interval") && i + 1 < argc)
			opts.interval_ms = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
			opts.stop_timeout_ms = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--max-frames") && i + 1 < argc)
			opts.max_frames = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--no-python"))
			opts.no_python = true;
		else
			argv[++npids] = argv[i];
	}
	if (!npids) {
		fprintf(stderr, "usage: stacks_dump [--samples N] [--interval MS] [--timeout MS] PID...\n");
		return 2;
	}
	for (int i = 1; i <= npids; i++) {
		char err[256] = "";
		struct stack_proc *sp = stacks__take(atoi(argv[i]), &opts, err, sizeof(err));
		cJSON *j;
		char *s;

		if (!sp) {
			fprintf(stderr, "stacks_dump: %s\n", err);
			rc = 1;
			continue;
		}
		j = stacks__json(sp);
		s = j ? cJSON_PrintUnformatted(j) : NULL;
		if (!s) {
			fprintf(stderr, "stacks_dump: %s\n", strerror(ENOMEM));
			rc = 1;
		} else {
			printf("%s\n", s);
		}
		free(s);
		cJSON_Delete(j);
		stacks__free(sp);
	}
	return rc;
}
