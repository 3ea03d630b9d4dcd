// SPDX-License-Identifier: MIT
/* --py-stacks in the trace: a call's captured stack as "stack" args (trace_stacks.h). */
#include <stdio.h>
#include "trace_json.h"
#include "trace_stacks.h"

enum ustack_arg ustack__write_args(struct trace_json *tj, ustack_lookup_fn lookup, void *ctx,
				   int pid, uint64_t id)
{
	const struct ustack *s;
	char buf[4096];

	if (!lookup || id == TP_USTACK_NONE)
		return USTACK_ARG_NONE;
	if (id < TP_USTACK_FIRST_ID) {
		snprintf(buf, sizeof(buf), "<%s>", ustacks__status_name(id));
		trace_json__arg_str(tj, "stack", buf);
		return USTACK_ARG_STATUS;
	}
	s = lookup(ctx, pid, id);
	if (!s) {
		trace_json__arg_str(tj, "stack", "<stack not found>");
		return USTACK_ARG_MISSING;
	}
	ustack__compact(s, buf, sizeof(buf));
	trace_json__arg_str(tj, "stack", buf);
	/* the walk stops innermost-out: what is missing is the outer end */
	if (s->flags & TP_USTACK_PY_TRUNCATED)
		trace_json__arg_str(tj, "stack truncated", "more Python frames than recorded "
				    "(depth limit or a looping frame chain)");
	else if (s->flags & TP_USTACK_PY_FAULT)
		trace_json__arg_str(tj, "stack truncated", "a Python frame could not be read");
	if (s->native_stop)
		trace_json__arg_str(tj, "native stack end", s->native_stop);
	return USTACK_ARG_STACK;
}
