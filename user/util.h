/* SPDX-License-Identifier: MIT */
/* Small helpers shared by user/: one error line into a caller's buffer, CLOCK_MONOTONIC in ns
 * and ms, a sleep that survives signals. */
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

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
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

#endif
