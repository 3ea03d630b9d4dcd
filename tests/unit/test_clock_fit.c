// SPDX-License-Identifier: MIT
/* The fit of CUPTI's GPU-record clock to CLOCK_MONOTONIC (user/gpu/clock_fit.c) on synthetic
 * samples: a device clock 50 ppm fast and 250 µs off, sampled as the agent does (48 samples
 * 1 ms apart, then one a second) for 60 s, each cuptiGetTimestamp read at a random point of
 * its read window (40-400 ns), one in twenty preempted (a window of 50-500 µs). Records are
 * converted as tptrace converts them, with the fit of the moment: work that ran after the
 * newest sample, up to the next one (1 s later) and 10 ms beyond (tptrace drains the ring
 * before the agent's next sample reaches it): every one must land within 1 µs of its true
 * host time. The same records through an
 * offset-only model miss by far more (the test can tell the difference). */
#include <stdint.h>
#include <stdlib.h>
#include "check.h"
#include "clock_fit.h"

#define SEC	1000000000ULL
#define MS	1000000ULL
#define PPM	50.0
#define OFFSET	250000.0
#define BOUND	1000

static uint64_t rng = 88172645463325252ULL;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static uint64_t uniform(uint64_t lo, uint64_t hi)
{
	return lo + next_rand() % (hi - lo + 1);
}

/* The GPU record time CUPTI writes for true host time t. */
static uint64_t cupti_of(uint64_t t0, uint64_t t)
{
	return t0 + (uint64_t)(OFFSET + (double)(t - t0) * (1.0 + PPM / 1e6) + 0.5);
}

static uint64_t absdiff(uint64_t a, uint64_t b)
{
	return a > b ? a - b : b - a;
}

static void test_drift_60s(void)
{
	struct clock_fit *f = clock_fit__new();
	struct clock_fit_stats st;
	uint64_t t0 = 5000 * SEC, t = t0, worst = 0, worst_end = 0, naive_worst = 0;
	uint64_t naive_off = 0, last = t0, worst_at = 0;
	int records = 0;

	CHECK(f != NULL, "clock_fit__new");
	if (!f)
		return;
	CHECK(clock_fit__to_host(f, 12345) == 12345, "no fit: unchanged");
	for (int i = 0; t < t0 + 60 * SEC + 1; i++) {
		uint64_t window = next_rand() % 20 == 0 ? uniform(50000, 500000) : uniform(40, 400);
		uint64_t read = t + uniform(0, window);
		uint64_t next = t + (i < 48 ? MS : SEC);

		clock_fit__add(f, t, t + window, cupti_of(t0, read));
		last = t + window / 2;
		if (i == 0)
			naive_off = cupti_of(t0, read) - (t + window / 2);
		/* the records tptrace drains before it reads the next sample */
		for (int r = 0; r < 50; r++) {
			uint64_t truth = uniform(t, next + 10 * MS);
			uint64_t c = cupti_of(t0, truth), host = clock_fit__to_host(f, c);
			uint64_t d = absdiff(host, truth);

			if (d > worst) {
				worst = d;
				worst_at = truth - t0;
			}
			if (t >= t0 + 59 * SEC && d > worst_end)
				worst_end = d;
			d = absdiff(c - naive_off, truth);
			if (d > naive_worst)
				naive_worst = d;
			records++;
		}
		t = next;
	}
	clock_fit__stats(f, &st);
	printf("    %d records over 60 s: worst %llu ns at %.3f s (%llu ns in the last second); "
	       "fit %.3f ppm, offset %lld ns, %u samples (%u used), residual %llu ns; "
	       "offset only: %llu ns\n", records, (unsigned long long)worst,
	       worst_at / 1e9, (unsigned long long)worst_end, st.ppm, (long long)st.offset_ns, st.samples, st.used,
	       (unsigned long long)st.residual_ns, (unsigned long long)naive_worst);
	CHECK(worst <= BOUND, "a record %llu ns from its true time, bound %d",
	      (unsigned long long)worst, BOUND);
	CHECK(worst_end <= BOUND, "after 60 s: %llu ns", (unsigned long long)worst_end);
	CHECK(st.ppm > PPM - 0.1 && st.ppm < PPM + 0.1, "drift %.3f ppm, want %.1f", st.ppm, PPM);
	/* at the newest sample: the calibration's offset plus the drift since */
	CHECK(absdiff((uint64_t)st.offset_ns, cupti_of(t0, last) - last) < 100,
	      "offset %lld ns, want %llu", (long long)st.offset_ns,
	      (unsigned long long)(cupti_of(t0, last) - last));
	CHECK(st.used < st.samples, "preempted samples left out (%u of %u used)", st.used,
	      st.samples);
	/* the model the test tells apart: the first sample's offset, no drift */
	CHECK(naive_worst > 100 * BOUND, "offset only is %llu ns off: the test cannot tell",
	      (unsigned long long)naive_worst);
	clock_fit__free(f);
}

/* One sample: an offset, no rate yet; samples closer than the minimum span: still rate 1. */
static void test_first_samples(void)
{
	struct clock_fit *f = clock_fit__new();
	struct clock_fit_stats st;

	clock_fit__add(f, 1000 * SEC, 1000 * SEC + 100, 1000 * SEC + 50 + 7000);
	CHECK(clock_fit__to_host(f, 1001 * SEC + 7000) == 1001 * SEC, "offset from one sample");
	clock_fit__add(f, 1000 * SEC + MS, 1000 * SEC + MS + 100, 1000 * SEC + MS + 50 + 9000);
	clock_fit__stats(f, &st);
	CHECK(st.ppm == 0, "no rate from 1 ms of samples: %.3f ppm", st.ppm);
	CHECK(st.samples == 2 && st.used == 2, "%u samples %u used", st.samples, st.used);
	clock_fit__free(f);
}

/* No drift (CUPTI's own interpolation took it out), jittered samples: once the offset is
 * known, more samples of the same offset do not move the mapping by the ns or two of their
 * jitter, so two records that ran back to back, converted a poll apart, never overlap. */
static void test_no_drift_stable(void)
{
	struct clock_fit *f = clock_fit__new();
	uint64_t t0 = 500 * SEC, t = t0, probe = 0, first = 0;
	int moved = 0, off = 0;

	for (int i = 0; i < 48 + 60; i++) {
		uint64_t w = uniform(40, 400), at = uniform(0, w);
		uint64_t c = t0 + 3000 + (t + at - t0);

		clock_fit__add(f, t, t + w, c);
		if (i == 48) {
			probe = c;
			first = clock_fit__to_host(f, probe);
		} else if (i > 48) {
			uint64_t h = clock_fit__to_host(f, probe);

			moved += h != first;
			off += absdiff(h, probe - 3000) > BOUND;
		}
		t += i < 48 ? MS : SEC;
	}
	CHECK(moved == 0, "the mapping moved %d times over 60 s of jittered samples", moved);
	CHECK(off == 0, "%d conversions off by more than %d ns", off, BOUND);
	clock_fit__free(f);
}

int main(void)
{
	test_first_samples();
	test_no_drift_stable();
	test_drift_60s();
	return check_done();
}
