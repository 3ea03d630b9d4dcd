/* SPDX-License-Identifier: MIT */
/* What the --gpu join says about a host call: the words shared by the join (gpu_join.h), which
 * decides, and the sinks that consume its output (gpu_sink.h), which write the call with it. */
#ifndef TPTRACE_GPU_RESULT_H
#define TPTRACE_GPU_RESULT_H

#include <stdbool.h>
#include <stdint.h>

enum gpu_join_status {
	GPU_JOIN_JOINED,
	GPU_JOIN_BEFORE_ENABLE,	/* the call came before CUPTI was enabled: no record can exist */
	GPU_JOIN_AFTER_DISABLE,	/* it ended after tptrace began turning CUPTI off (the end of the
				 * trace): its record may never be written */
	GPU_JOIN_NO_RECORD,	/* CUPTI was on, but no record of this API in the window */
	GPU_JOIN_AMBIGUOUS,	/* more than one record fits: none taken */
};

struct gpu_join_result {
	enum gpu_join_status status;
	const char *status_str;	/* the status in words (gpu_join__status_str) */
	uint32_t correlation;	/* JOINED: CUPTI's correlation id */
	/* JOINED: the CUPTI API record's times. An entry-only call has no duration of its own:
	 * it is drawn from api_start to api_end, and its arrow starts at api_start. */
	uint64_t api_start, api_end;
	const char *kernel;	/* JOINED: the demangled name of its first kernel, NULL if none
				 * arrived yet; valid during the callback */
	bool has_work;		/* JOINED: its first GPU work arrived: the three below are set */
	uint32_t device, context, stream;	/* that work's (CUPTI's ids: the GPU track's) */
	int candidates;		/* AMBIGUOUS: how many records fitted */
};

#endif
