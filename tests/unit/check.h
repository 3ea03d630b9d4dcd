/* SPDX-License-Identifier: MIT */
/* Minimal assertions for the tier-1 unit tests: each failed check prints one line and the
 * run goes on, so one broken parser field does not hide the next. */
#ifndef TPTRACE_CHECK_H
#define TPTRACE_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_total, check_failed, check_skipped;
static char check_skip_reason[256];

/* tests/run.py reports exit 77 as a skip, with the last stdout line as the reason */
#define CHECK_EXIT_SKIP 77

#define CHECK(cond, fmt, ...) do {							\
	check_total++;									\
	if (!(cond)) {									\
		check_failed++;								\
		fprintf(stderr, "FAIL %s:%d: " fmt "\n", __FILE__, __LINE__, ##__VA_ARGS__); \
	}										\
} while (0)

#define CHECK_U64(got, want) do {							\
	uint64_t got_ = (got), want_ = (want);						\
	CHECK(got_ == want_, "%s == 0x%" PRIx64 ", want 0x%" PRIx64, #got, got_, want_); \
} while (0)

#define CHECK_STR(got, want) do {							\
	const char *got_ = (got), *want_ = (want);					\
	CHECK(got_ && want_ ? strcmp(got_, want_) == 0 : got_ == want_,			\
	      "%s == \"%s\", want \"%s\"", #got, got_ ? got_ : "(null)",		\
	      want_ ? want_ : "(null)");						\
} while (0)

/* A part that cannot run says why; the whole test then ends as a skip (a test that checked
 * less than it names must not read as passed), unless a check failed. */
#define SKIP(fmt, ...) do {								\
	check_skipped++;								\
	snprintf(check_skip_reason, sizeof(check_skip_reason), fmt, ##__VA_ARGS__);	\
	printf("skip: %s\n", check_skip_reason);					\
} while (0)

/* main's return value: 0 and "ok <n> checks", 77 and the skip's reason last, or 1 and how
 * many failed. */
static inline int check_done(void)
{
	if (check_failed) {
		printf("FAILED %d of %d checks\n", check_failed, check_total);
		return 1;
	}
	if (check_skipped) {
		printf("%d checks ok, %d part%s skipped: %s\n", check_total, check_skipped,
		       check_skipped > 1 ? "s" : "", check_skip_reason);
		return CHECK_EXIT_SKIP;
	}
	if (check_total == 0) {
		printf("FAILED: no checks ran\n");
		return 1;
	}
	printf("ok %d checks\n", check_total);
	return 0;
}

/* A whole file in memory (NUL-terminated, *len its size), NULL when unreadable. */
static inline char *check_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n = -1;

	if (f && !fseek(f, 0, SEEK_END))
		n = ftell(f);
	if (n >= 0 && (buf = malloc(n + 1))) {
		rewind(f);
		if (fread(buf, 1, n, f) != (size_t)n) {
			free(buf);
			buf = NULL;
		} else {
			buf[n] = '\0';
		}
	}
	if (f)
		fclose(f);
	*len = n < 0 ? 0 : n;
	return buf;
}

#endif
