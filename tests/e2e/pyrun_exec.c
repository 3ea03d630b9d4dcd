// SPDX-License-Identifier: MIT
/* The pyrun door alone (tests/e2e/test_pyrun.py):
 *   pyrun_exec PID SNIPPET.py ARGS_JSON TIMEOUT_MS [COUNT [keep]]
 * runs the snippet COUNT times (default 1; "keep": PYRUN_KEEP_QUEUED) in PID through user/py/pyrun.c and prints each result
 * as one JSON line, or "error: <errno name>: <line>" and exits 1. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "pyrun.h"

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "re");
	char *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = calloc(1, n + 1);
	if (buf && fread(buf, 1, n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

int main(int argc, char **argv)
{
	char err[512] = "";
	struct pyrun *r;
	cJSON *args, *res;
	char *src;
	int count = argc > 5 ? atoi(argv[5]) : 1, rc = 0;
	unsigned int flags = argc > 6 && !strcmp(argv[6], "keep") ? PYRUN_KEEP_QUEUED : 0;

	if (argc < 5) {
		fprintf(stderr, "usage: pyrun_exec PID SNIPPET.py ARGS_JSON TIMEOUT_MS [COUNT]\n");
		return 2;
	}
	src = slurp(argv[2]);
	args = cJSON_Parse(argv[3]);
	if (!src || !args) {
		fprintf(stderr, "bad snippet file or args\n");
		return 2;
	}
	r = pyrun__open(atoi(argv[1]), err, sizeof(err));
	if (!r) {
		printf("error: open: %s: %s\n", strerrorname_np(errno) ?: "?", err);
		return 1;
	}
	printf("version %s\n", pyrun__version(r));
	fflush(stdout);		/* a test waits for this line: the door is open */
	for (int i = 0; i < count && !rc; i++) {
		int e = pyrun__exec(r, src, args, atoi(argv[4]), flags, &res, err,
				    sizeof(err));
		char *s;

		if (e) {
			printf("error: exec: %s: %s\n", strerrorname_np(-e) ?: "?", err);
			rc = 1;
			break;
		}
		s = cJSON_PrintUnformatted(res);
		printf("%s\n", s);
		fflush(stdout);
		free(s);
		cJSON_Delete(res);
	}
	pyrun__close(r);
	cJSON_Delete(args);
	free(src);
	return rc;
}
