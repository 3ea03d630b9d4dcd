/* SPDX-License-Identifier: MIT */
/* Small helpers shared by user/ and tools/: one error line into a caller's buffer, a clock in ns
 * (CLOCK_MONOTONIC in ns and ms), a sleep that survives signals. */
#ifndef TPTRACE_UTIL_H
#define TPTRACE_UTIL_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

/* vsnprintf into err (NULL or errsz 0: nothing) */
__attribute__((format(printf, 3, 4)))
static inline void set_err(char *err, size_t errsz, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errsz)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errsz, fmt, ap);
	va_end(ap);
}

/* The one clock helper: clk (CLOCK_MONOTONIC, the probes' clock; CLOCK_REALTIME; ...) in ns */
static inline uint64_t clock_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static inline uint64_t now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

static inline uint64_t now_ms(void)
{
	return now_ns() / 1000000;
}

static inline void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* --help laid out for the terminal it is read on: argp wraps option texts (and flowing
 * paragraphs) at ARGP_HELP_FMT's rmargin, 79 by default; on a wider terminal, up to 120 columns
 * are used. Hand-laid doc lines stay within 79 columns, so they are never broken. An
 * ARGP_HELP_FMT the user set wins. Call before argp_parse. */
#include <stdlib.h>
#include <sys/ioctl.h>
#include <unistd.h>

static inline void argp_help_width(void)
{
	struct winsize ws;
	char fmt[32];

	if (getenv("ARGP_HELP_FMT") || !isatty(STDOUT_FILENO) ||
	    ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) || ws.ws_col <= 80)
		return;
	snprintf(fmt, sizeof(fmt), "rmargin=%d", (ws.ws_col > 120 ? 120 : ws.ws_col) - 1);
	setenv("ARGP_HELP_FMT", fmt, 0);
}

#endif
