/* SPDX-License-Identifier: MIT */
/*
 * The fit between CUPTI's GPU-record clock and the host's CLOCK_MONOTONIC. CUPTI converts the
 * device's timestamps into its own clock from a calibration of its own, and the device clock
 * drifts (tens of ppm): a GPU record's time is off the host's by an offset plus a drift that
 * grows with time (50 ppm is 3 ms after a minute). The agent samples cuptiGetTimestamp between
 * two CLOCK_MONOTONIC reads; this fits cupti = offset + rate * host over the recent samples
 * (weighted least squares, a sample weighed by its read window) and maps GPU record times back
 * to the host clock.
 */
#ifndef TPTRACE_CLOCK_FIT_H
#define TPTRACE_CLOCK_FIT_H

#include <stdbool.h>
#include <stdint.h>

struct clock_fit;

struct clock_fit_stats {
	uint32_t samples;		/* taken into the fit so far */
	uint32_t used;			/* in the current fit (the window, less preempted ones) */
	double ppm;			/* the fitted drift: (rate - 1) * 1e6 */
	int64_t offset_ns;		/* cupti - host at the newest sample, by the fit */
	uint64_t residual_ns;		/* max |sample - fit| over the samples used */
	uint64_t window_ns;		/* max read window of the samples used */
};

struct clock_fit *clock_fit__new(void);
void clock_fit__free(struct clock_fit *f);
/* One sample: cupti read between host_before and host_after (CLOCK_MONOTONIC ns). */
void clock_fit__add(struct clock_fit *f, uint64_t host_before, uint64_t host_after, uint64_t cupti);
/* The host time of a time in CUPTI's GPU-record clock; the input unchanged without a fit. */
uint64_t clock_fit__to_host(const struct clock_fit *f, uint64_t cupti);
void clock_fit__stats(const struct clock_fit *f, struct clock_fit_stats *out);

#endif
