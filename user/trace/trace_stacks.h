/* SPDX-License-Identifier: MIT */
/* --py-stacks in the trace: a call's captured stack (user/core/ustack.h) as its event's args. */
#ifndef TPTRACE_TRACE_STACKS_H
#define TPTRACE_TRACE_STACKS_H

#include <stdint.h>
#include "ustack.h"

/* The `stack` arg (and `stack truncated`, `native stack end`) of one trace event from its
 * record's stack id: a status id or an id the lookup does not know is written as what it is
 * ("<no Python thread state>", "<stack not found>"), never left out. Says which it wrote. */
struct trace_writer;
enum ustack_arg { USTACK_ARG_NONE, USTACK_ARG_STACK, USTACK_ARG_STATUS, USTACK_ARG_MISSING };
enum ustack_arg ustack__write_args(struct trace_writer *tj, ustack_lookup_fn lookup, void *ctx,
				   int pid, uint64_t id);


#endif
