/* SPDX-License-Identifier: MIT */
/* Minimal assertions for the tier-1 unit tests: each failed check prints one line and the
 * run goes on, so one broken parser field does not hide the next. */
#ifndef TPTRACE_CHECK_H
#define TPTRACE_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int check_total, check_failed;

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

/* A skipped part says why, on stdout with the result. */
#define SKIP(fmt, ...) printf("skip: " fmt "\n", ##__VA_ARGS__)

/* main's return value: "ok <n> checks", or how many failed. */
static inline int check_done(void)
{
	if (check_failed) {
		printf("FAILED %d of %d checks\n", check_failed, check_total);
		return 1;
	}
	if (check_total == 0) {
		printf("FAILED: no checks ran\n");
		return 1;
	}
	printf("ok %d checks\n", check_total);
	return 0;
}

#endif
