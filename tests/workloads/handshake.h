/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Handshake shared by every test workload, so a tracer can attach to a process that is already
 * running and set up:
 *
 *   workload                         test
 *   setup (streams, buffers, ...)
 *   "READY <pid>\n" on stdout  --->  attach tptrace to <pid>
 *   block reading a line       <---  "GO\n" on stdin
 *   the measured work
 *   "DONE\n" on stdout         --->  stop / dump / assert
 *   --hold: block until stdin EOF
 *   exit 0
 *
 * Stdout carries nothing else except info lines starting with "# ". Diagnostics go to stderr.
 * C and C++ (nvcc) both include this file.
 */
#ifndef TPTRACE_TESTS_HANDSHAKE_H
#define TPTRACE_TESTS_HANDSHAKE_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* An info line; a workload's only other output on stdout. */
static inline void hs_info(const char *fmt, ...)
{
	va_list ap;

	fputs("# ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
}

/* Prints READY and waits for GO; EOF before GO means the test gave up, so exit. */
static inline void hs_ready_wait_go(void)
{
	char line[64];

	printf("READY %d\n", (int)getpid());
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin)) {
		fprintf(stderr, "workload: stdin closed before GO\n");
		exit(2);
	}
	if (strncmp(line, "GO", 2) != 0)
		fprintf(stderr, "workload: expected GO, got '%.*s'; going anyway\n",
			(int)strcspn(line, "\n"), line);
}

/* Prints DONE; with hold, keeps the process alive (still attachable) until stdin reaches EOF. */
static inline void hs_done(int hold)
{
	char line[64];

	printf("DONE\n");
	fflush(stdout);
	if (hold)
		while (fgets(line, sizeof(line), stdin))
			;
}

/* Parses a non-negative integer option value or exits with a one-line error. */
static inline long hs_parse_long(const char *opt, const char *val)
{
	char *end;
	long x;

	if (!val) {
		fprintf(stderr, "workload: %s needs a value\n", opt);
		exit(2);
	}
	x = strtol(val, &end, 10);
	if (*val == '\0' || *end || x < 0) {
		fprintf(stderr, "workload: bad value '%s' for %s\n", val, opt);
		exit(2);
	}
	return x;
}

#endif /* TPTRACE_TESTS_HANDSHAKE_H */
