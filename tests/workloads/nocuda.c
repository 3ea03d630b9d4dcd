// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * nocuda: the handshake and nothing else; never loads or calls CUDA. For "attach to a process
 * without CUDA" tests.
 *
 * Usage: nocuda [--work-ms MS (20)] [--hold]
 * After GO it sleeps MS milliseconds, then prints DONE.
 */
#include <string.h>
#include <time.h>
#include "handshake.h"

int main(int argc, char **argv)
{
	long work_ms = 20;
	int hold = 0;
	struct timespec ts;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--work-ms")) {
			work_ms = hs_parse_long(argv[i], argv[i + 1]);
			i++;
		} else if (!strcmp(argv[i], "--hold")) {
			hold = 1;
		} else {
			fprintf(stderr, "usage: nocuda [--work-ms MS] [--hold]\n");
			return 2;
		}
	}
	hs_ready_wait_go();
	ts.tv_sec = work_ms / 1000;
	ts.tv_nsec = (work_ms % 1000) * 1000000L;
	while (nanosleep(&ts, &ts))
		;
	hs_done(hold);
	return 0;
}
