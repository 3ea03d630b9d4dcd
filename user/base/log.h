/* SPDX-License-Identifier: MIT */
/* Diagnostics go to stderr, one line each, prefixed "tptrace: ". -v raises verbosity. */
#ifndef TPTRACE_LOG_H
#define TPTRACE_LOG_H

#include <stdio.h>

extern int tptrace_verbosity;

/* fmt is a string literal: the prefix is pasted onto it */
#define log_error(fmt, ...) fprintf(stderr, "tptrace: " fmt, ##__VA_ARGS__)
#define log_info(fmt, ...) \
	do { if (tptrace_verbosity >= 0) fprintf(stderr, "tptrace: " fmt, ##__VA_ARGS__); } while (0)
#define log_verbose(fmt, ...) \
	do { if (tptrace_verbosity >= 1) fprintf(stderr, "tptrace: " fmt, ##__VA_ARGS__); } while (0)

#endif
