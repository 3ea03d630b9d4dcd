// SPDX-License-Identifier: MIT
/* CUPTI GPU clock -> CLOCK_MONOTONIC (clock_fit.h). */
#include <stdlib.h>
#include "clock_fit.h"

/* The window: at one sample a second, four minutes of them; a drift that changes with the
 * device's temperature is followed, a constant one is fitted over many samples. */
#define FIT_SAMPLES	256
/* A slope needs samples this far apart; before that the rate is taken as 1 (no drift). */
#define FIT_MIN_SPAN_NS	5000000ULL
/* A sample whose read window is this much wider than the median one was preempted between
 * the reads: left out. */
#define WINDOW_OUTLIER	4
/* The reads' own cost: the floor of a sample's weight. */
#define WINDOW_FLOOR_NS	50.0

/* A fitted drift is taken only when it is this many standard errors from none. */
#define DRIFT_SIGMAS	5.0

/* sqrt without libm (Newton; the argument is a variance, >= 0) */
static double sqrt_d(double v)
{
	double x = v > 1 ? v : 1;

	if (v <= 0)
		return 0;
	for (int i = 0; i < 200; i++) {
		double nx = 0.5 * (x + v / x);

		if (nx == x)
			break;
		x = nx;
	}
	return x;
}

/* llround/fabs without libm (the unit tests link without it) */
static int64_t round_i64(double d)
{
	return (int64_t)(d < 0 ? d - 0.5 : d + 0.5);
}

struct sample {
	uint64_t host;		/* midpoint of the two reads */
	uint64_t window;
	uint64_t cupti;
};

struct clock_fit {
	struct sample s[FIT_SAMPLES];
	uint32_t nr;		/* total added; sample i at s[i % FIT_SAMPLES] */
	/* cupti = c0 + rate * (host - h0) */
	uint64_t h0, c0;
	double rate;
	uint32_t used;
	uint64_t residual, window;
};

struct clock_fit *clock_fit__new(void)
{
	struct clock_fit *f = calloc(1, sizeof(*f));

	if (f)
		f->rate = 1.0;
	return f;
}

void clock_fit__free(struct clock_fit *f)
{
	free(f);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void refit(struct clock_fit *f)
{
	uint32_t n = f->nr < FIT_SAMPLES ? f->nr : FIT_SAMPLES;
	const struct sample *ref = &f->s[(f->nr - 1) % FIT_SAMPLES];
	uint64_t windows[FIT_SAMPLES], median, limit, lo = UINT64_MAX, hi = 0;
	double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0, mx, my, rate = 1.0;
	uint32_t used = 0;

	for (uint32_t i = 0; i < n; i++)
		windows[i] = f->s[i].window;
	qsort(windows, n, sizeof(*windows), cmp_u64);
	median = windows[n / 2];
	limit = WINDOW_OUTLIER * median + 2 * (uint64_t)WINDOW_FLOOR_NS;
	/* sums relative to the newest sample keep the doubles exact enough */
	for (uint32_t i = 0; i < n; i++) {
		const struct sample *p = &f->s[i];
		double w, x, y;

		if (p->window > limit)
			continue;
		w = 1.0 / ((p->window + WINDOW_FLOOR_NS) * (p->window + WINDOW_FLOOR_NS));
		x = (double)(int64_t)(p->host - ref->host);
		y = (double)(int64_t)(p->cupti - ref->cupti);
		sw += w, sx += w * x, sy += w * y;
		sxx += w * x * x, sxy += w * x * y;
		if (p->host < lo)
			lo = p->host;
		if (p->host > hi)
			hi = p->host;
		used++;
	}
	mx = sx / sw;
	my = sy / sw;
	if (hi - lo >= FIT_MIN_SPAN_NS && used >= 3) {
		double vxx = sxx / sw - mx * mx, vxy = sxy / sw - mx * my, rss = 0, se;

		if (vxx > 0)
			rate = vxy / vxx;
		/* a drift the samples cannot tell from their jitter is none: a rate fitted to
		 * noise would stretch every duration by it */
		for (uint32_t i = 0; vxx > 0 && i < n; i++) {
			const struct sample *p = &f->s[i];
			double w, r;

			if (p->window > limit)
				continue;
			w = 1.0 / ((p->window + WINDOW_FLOOR_NS) * (p->window + WINDOW_FLOOR_NS));
			r = (double)(int64_t)(p->cupti - ref->cupti) - my -
			    rate * ((double)(int64_t)(p->host - ref->host) - mx);
			rss += w * r * r;
		}
		se = vxx > 0 ? sqrt_d(rss / (used - 2) / (sw * vxx)) : 0;
		if (vxx <= 0 || (rate - 1.0 <= DRIFT_SIGMAS * se && 1.0 - rate <= DRIFT_SIGMAS * se))
			rate = 1.0;
	}
	/* the line through the weighted means; with no drift, an offset that moved by less than
	 * a sample can tell (half the typical read window) is kept: a mapping that changed by a
	 * ns or two between two records' conversions would make work that ran back to back
	 * overlap (or part) by that much */
	{
		uint64_t h0 = ref->host + (int64_t)round_i64(mx), c0 = ref->cupti + (int64_t)round_i64(my);
		int64_t moved = (int64_t)(c0 - h0) - (int64_t)(f->c0 - f->h0);
		double tol = median / 2.0 + WINDOW_FLOOR_NS;

		if (f->nr > 1 && f->rate == 1.0 && rate == 1.0 && (moved < 0 ? -moved : moved) <= tol)
			h0 = f->h0, c0 = f->c0;
		f->rate = rate;
		f->h0 = h0;
		f->c0 = c0;
	}
	f->used = 0;
	f->residual = f->window = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct sample *p = &f->s[i];
		double pred, d;

		if (p->window > limit)
			continue;
		f->used++;
		pred = (double)(int64_t)(f->c0 - ref->cupti) +
		       rate * (double)(int64_t)(p->host - f->h0);
		d = ((double)(int64_t)(p->cupti - ref->cupti) - pred);
		if (d < 0)
			d = -d;
		if (d > f->residual)
			f->residual = (uint64_t)round_i64(d);
		if (p->window > f->window)
			f->window = p->window;
	}
}

void clock_fit__add(struct clock_fit *f, uint64_t host_before, uint64_t host_after, uint64_t cupti)
{
	struct sample *p = &f->s[f->nr % FIT_SAMPLES];

	if (host_after < host_before)
		return;
	p->host = host_before + (host_after - host_before) / 2;
	p->window = host_after - host_before;
	p->cupti = cupti;
	f->nr++;
	refit(f);
}

uint64_t clock_fit__to_host(const struct clock_fit *f, uint64_t cupti)
{
	double d;

	if (!f->nr)
		return cupti;
	d = (double)(int64_t)(cupti - f->c0) / f->rate;
	return f->h0 + (int64_t)round_i64(d);
}

void clock_fit__stats(const struct clock_fit *f, struct clock_fit_stats *out)
{
	const struct sample *last = f->nr ? &f->s[(f->nr - 1) % FIT_SAMPLES] : NULL;

	out->samples = f->nr;
	out->used = f->used;
	out->ppm = (f->rate - 1.0) * 1e6;
	out->offset_ns = last ? (int64_t)(f->c0 - f->h0) +
				(int64_t)round_i64((f->rate - 1.0) * (double)(int64_t)(last->host - f->h0))
			      : 0;
	out->residual_ns = f->residual;
	out->window_ns = f->window;
}
