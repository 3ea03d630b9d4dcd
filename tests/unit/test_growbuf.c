// SPDX-License-Identifier: MIT
/* The one growable-array helper (user/base/growbuf.h: ARRAY_RESERVE, array__reserve) and the
 * one clock helper (user/base/util.h: clock_ns, now_ns): capacities double from the first size
 * until the need fits, contents survive each move, a capacity type that cannot hold the next
 * size refuses with -ENOMEM and leaves the array and its capacity as they were, and so does a
 * size that overflows. Built with ASan/UBSan, so a write one past the room given fails too. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include "check.h"
#include "growbuf.h"
#include "util.h"

struct item {
	int id;
	char name[13];
};

static void test_doubling_keeps_contents(void)
{
	struct item *v = NULL;
	int nr = 0, cap = 0, fails = 0, moves = 0;
	int caps_seen[16], nr_caps = 0;

	for (int i = 0; i < 1000; i++) {
		int before = cap;

		if (ARRAY_RESERVE(v, cap, nr + 1, 16)) {
			fails++;
			break;
		}
		if (cap != before && nr_caps < 16)
			caps_seen[nr_caps++] = cap;
		moves += cap != before;
		v[nr].id = i;
		snprintf(v[nr].name, sizeof(v[nr].name), "item %d", i);
		nr++;
	}
	CHECK(fails == 0, "1000 adds: %d refused", fails);
	CHECK(cap == 1024, "capacity %d after 1000 adds from 16, want 1024", cap);
	CHECK(moves == 7, "%d reallocations, want 7 (16, 32, ..., 1024)", moves);
	CHECK(nr_caps >= 2 && caps_seen[0] == 16 && caps_seen[1] == 32,
	      "first capacities %d, %d, want 16, 32", nr_caps ? caps_seen[0] : -1,
	      nr_caps > 1 ? caps_seen[1] : -1);
	for (int i = 0; i < nr; i++) {
		char want[13];

		snprintf(want, sizeof(want), "item %d", i);
		if (v[i].id != i || strcmp(v[i].name, want)) {
			CHECK(0, "item %d came back as %d \"%s\"", i, v[i].id, v[i].name);
			break;
		}
	}
	/* room already there: nothing moves */
	{
		struct item *was = v;

		CHECK(ARRAY_RESERVE(v, cap, 1000, 16) == 0 && v == was && cap == 1024,
		      "a need within the capacity moved the array");
	}
	free(v);
}

static void test_need_of_many(void)
{
	size_t cap = 0;
	char *s = NULL;

	/* several elements at once: doubles until they fit, from the first size */
	CHECK(ARRAY_RESERVE(s, cap, 100, 16) == 0 && cap == 128, "need 100 from 16: cap %zu", cap);
	memset(s, 'x', 100);
	CHECK(ARRAY_RESERVE(s, cap, 129, 16) == 0 && cap == 256, "need 129 from 128: cap %zu",
	      cap);
	CHECK(s[0] == 'x' && s[99] == 'x', "contents lost on a multi-element grow");
	free(s);
}

static void test_capacity_type_limit(void)
{
	unsigned char *b = NULL, cap8 = 0;
	int n = 0, err;

	/* a uint8_t capacity holds 128 but not 256: the 129th add is refused, and the array keeps
	 * what it had with the capacity that describes it */
	while (n < 1000 && !(err = ARRAY_RESERVE(b, cap8, n + 1, 16))) {
		b[n] = (unsigned char)n;
		n++;
	}
	CHECK(err == -ENOMEM, "capacity overflow: err %d, want -ENOMEM", err);
	CHECK(n == 128 && cap8 == 128, "stopped at %d with capacity %u, want 128, 128", n, cap8);
	CHECK(b && b[0] == 0 && b[127] == 127, "contents lost at the capacity limit");
	free(b);
}

static void test_size_overflow(void)
{
	uint64_t *v = NULL;
	size_t cap = 0;

	CHECK(ARRAY_RESERVE(v, cap, SIZE_MAX / 4, 16) == -ENOMEM && v == NULL && cap == 0,
	      "an element count whose bytes overflow size_t was not refused");
	CHECK(array__reserve(&v, &cap, SIZE_MAX, sizeof(*v), 16) == -ENOMEM && !v && !cap,
	      "a count past SIZE_MAX / 2 was not refused");
}

static void test_clock(void)
{
	struct timespec ts;
	uint64_t a, b, real, want;

	a = now_ns();
	b = clock_ns(CLOCK_MONOTONIC);
	CHECK(a > 0 && b >= a, "CLOCK_MONOTONIC went back: %llu then %llu",
	      (unsigned long long)a, (unsigned long long)b);
	clock_gettime(CLOCK_REALTIME, &ts);
	want = (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
	real = clock_ns(CLOCK_REALTIME);
	/* the same clock read right after: not before it, and the same second's neighbourhood
	 * (not the monotonic clock, which is hours or days behind) */
	CHECK(real >= want && real - want < 60ULL * 1000000000ULL,
	      "clock_ns(CLOCK_REALTIME) %llu, clock_gettime said %llu",
	      (unsigned long long)real, (unsigned long long)want);
}

int main(void)
{
	test_doubling_keeps_contents();
	test_need_of_many();
	test_capacity_type_limit();
	test_size_overflow();
	test_clock();
	return check_done();
}
