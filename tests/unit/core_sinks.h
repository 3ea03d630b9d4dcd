/* SPDX-License-Identifier: MIT */
/* The acquisition core (session.h) under the unit tests of its sinks: each trace writer or
 * recorder a test makes gets a session of its own, records go in through that session's
 * consumer (session__ring_cb), and test_core(sink) finds the session again. Include after
 * session.h, decode.h and flightrec.h. */
#ifndef TPTRACE_TEST_CORE_SINKS_H
#define TPTRACE_TEST_CORE_SINKS_H

#include <stdio.h>
#include <stdlib.h>
#include "target.h"

static struct {
	const void *sink;
	struct session *core;
} test_cores[16];

static inline struct session *test_core(const void *sink)
{
	for (size_t i = 0; i < sizeof(test_cores) / sizeof(test_cores[0]); i++)
		if (sink && test_cores[i].sink == sink)
			return test_cores[i].core;
	fprintf(stderr, "no session for sink %p\n", sink);
	abort();
}

static inline void test_core_keep(const void *sink, struct session *core)
{
	for (size_t i = 0; i < sizeof(test_cores) / sizeof(test_cores[0]); i++) {
		if (!test_cores[i].sink) {
			test_cores[i].sink = sink;
			test_cores[i].core = core;
			return;
		}
	}
	abort();
}

static inline void test_core_drop(const void *sink)
{
	for (size_t i = 0; i < sizeof(test_cores) / sizeof(test_cores[0]); i++) {
		if (sink && test_cores[i].sink == sink) {
			session__free(test_cores[i].core);
			test_cores[i].sink = NULL;
			test_cores[i].core = NULL;
		}
	}
}

#ifdef TPTRACE_DECODE_H
/* A trace writer on a session of its own: probes and cache as the session's (target__scan). */
static inline struct decoder *test_decoder_new(struct trace_json *tj, struct elfsym_cache *cache,
					       const struct target_probes *probes)
{
	struct session *core = session__new(cache, probes);
	struct decoder *d = core ? decoder__new(core, tj, cache) : NULL;

	if (d)
		test_core_keep(d, core);
	else
		session__free(core);
	return d;
}

static inline int test_decoder_ring_cb(void *d, void *data, size_t size)
{
	return session__ring_cb(test_core(d), data, size);
}

static inline void test_decoder_free(struct decoder *d)
{
	decoder__free(d);
	test_core_drop(d);
}
#endif

#ifdef TPTRACE_FLIGHTREC_H
static inline struct flightrec *test_fr_new(const struct flightrec_opts *fo)
{
	static const struct target_probes none;
	struct session *core = session__new(NULL, &none);
	struct flightrec *fr = core ? flightrec__new(core, fo) : NULL;

	if (fr)
		test_core_keep(fr, core);
	else
		session__free(core);
	return fr;
}

static inline int test_fr_ring_cb(void *fr, void *data, size_t size)
{
	return session__ring_cb(test_core(fr), data, size);
}

static inline void test_fr_free(struct flightrec *fr)
{
	flightrec__free(fr);
	test_core_drop(fr);
}
#endif

#endif
