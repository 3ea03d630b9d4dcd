/* SPDX-License-Identifier: MIT */
/* Ring records built by hand and fed to the flight recorder, for its unit tests
 * (test_flightrec, test_fr_metrics, test_fr_pystacks): an entry record with the given
 * arguments, stack slots, deref bytes and stack id, and its return; *ts advances 1 us per
 * record. Include after api_id.h, cuda.h and flightrec.h. */
#ifndef TPTRACE_TEST_FR_RECORDS_H
#define TPTRACE_TEST_FR_RECORDS_H

#include <stdbool.h>
#include <string.h>

static inline void fr_rec_call(struct flightrec *fr, int pid, int tid, uint64_t *ts,
			       const char *sym, const uint64_t args[6], uint64_t s1, uint64_t s2,
			       const void *deref, size_t dlen, uint64_t ustack)
{
	struct tp_rec_call c = { .type = TP_REC_CALL, .pid = pid, .tid = tid, .ts = *ts += 1000 };

	c.api = api_id(sym);
	memcpy(c.args, args, sizeof(c.args));
	c.stack[0] = 0x401000;
	c.stack[1] = s1;
	c.stack[2] = s2;
	if (deref)
		memcpy(c.deref, deref, dlen);
	c.ustack = ustack;
	test_fr_ring_cb(fr, &c, sizeof(c));
}

static inline void fr_rec_ret(struct flightrec *fr, int pid, int tid, uint64_t *ts,
			      const char *sym, int64_t rc, bool has_out, uint64_t out)
{
	struct tp_rec_ret r = { .type = TP_REC_RET, .pid = pid, .tid = tid, .ts = *ts += 1000 };

	r.api = api_id(sym);
	r.rc = (uint64_t)rc;
	r.flags = has_out;
	r.out_val = out;
	test_fr_ring_cb(fr, &r, sizeof(r));
}

#endif
