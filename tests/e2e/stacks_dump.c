// SPDX-License-Identifier: MIT
/* Test driver of the snapshot engine (user/stacks/stacks.h): prints stacks__json() of each pid on
 * stdout, one JSON object per line, in the order given. The processes are snapshotted in
 * parallel, one thread each (their samples then overlap in time, as a whole-job snapshot
 * must: 8 processes x 3 samples 200 ms apart take ~0.4 s, not 3.2 s). The real command line
 * is `tptrace stacks`.
 * Usage: stacks_dump [--samples N] [--interval MS] [--timeout MS] [--max-frames N]
 *                    [--no-python] PID... */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "stacks.h"

struct job {
	int pid;
	const struct stack_opts *opts;
	char *json;		/* NULL: err */
	char err[256];
};

static void *take(void *arg)
{
	struct job *j = arg;
	struct stack_proc *sp = stacks__take(j->pid, j->opts, j->err, sizeof(j->err));
	cJSON *o;

	if (!sp)
		return NULL;
	o = stacks__json(sp);
	j->json = o ? cJSON_PrintUnformatted(o) : NULL;
	if (!j->json)
		snprintf(j->err, sizeof(j->err), "%s", strerror(ENOMEM));
	cJSON_Delete(o);
	stacks__free(sp);
	return NULL;
}

int main(int argc, char **argv)
{
	struct stack_opts opts = { 0 };
	struct job *jobs;
	pthread_t *tids;
	int rc = 0, n = 0;

	jobs = calloc(argc, sizeof(*jobs));
	tids = calloc(argc, sizeof(*tids));
	if (!jobs || !tids)
		return 1;
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
			jobs[n++].pid = atoi(argv[i]);
	}
	if (!n) {
		fprintf(stderr, "usage: stacks_dump [--samples N] [--interval MS] [--timeout MS] PID...\n");
		return 2;
	}
	for (int i = 0; i < n; i++) {
		jobs[i].opts = &opts;
		if (pthread_create(&tids[i], NULL, take, &jobs[i])) {
			take(&jobs[i]);
			tids[i] = 0;
		}
	}
	for (int i = 0; i < n; i++) {
		if (tids[i])
			pthread_join(tids[i], NULL);
		if (jobs[i].json) {
			printf("%s\n", jobs[i].json);
		} else {
			fprintf(stderr, "stacks_dump: %s\n", jobs[i].err);
			rc = 1;
		}
		free(jobs[i].json);
	}
	free(jobs);
	free(tids);
	return rc;
}
