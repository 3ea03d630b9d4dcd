/* SPDX-License-Identifier: MIT */
/* Diagnostics go to stderr, one line each, prefixed "tptrace: ". -v raises verbosity. */
#ifndef TPTRACE_LOG_H
#define TPTRACE_LOG_H

#include <stdio.h>

extern int tptrace_verbosity;

#define log_error(...) fprintf(stderr, __VA_ARGS__)
#define log_info(...) do { if (tptrace_verbosity >= 0) fprintf(stderr, __VA_ARGS__); } while (0)
#define log_verbose(...) do { if (tptrace_verbosity >= 1) fprintf(stderr, __VA_ARGS__); } while (0)
#define log_debug(...) do { if (tptrace_verbosity >= 2) fprintf(stderr, __VA_ARGS__); } while (0)

#endif
