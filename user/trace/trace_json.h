/* SPDX-License-Identifier: MIT */
/* The trace writer under its first names. The writer is trace_writer.h's interface now (the
 * JSON backend is trace_json.c, the Perfetto one trace_pftrace.c); the callers outside the
 * writer keep these names until the tree is split into folders (issue 25 item 2), which
 * renames them in one go. Every name here is the trace_writer__ call of the same meaning. */
#ifndef TPTRACE_TRACE_JSON_H
#define TPTRACE_TRACE_JSON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "trace_writer.h"

#define trace_json trace_writer		/* struct trace_json: struct trace_writer */

#define trace_json__open	trace_writer__open
#define trace_json__begin	trace_writer__begin
#define trace_json__event	trace_writer__event
#define trace_json__arg_u64	trace_writer__arg_u64
#define trace_json__arg_i64	trace_writer__arg_i64
#define trace_json__arg_f64	trace_writer__arg_f64
#define trace_json__arg_str	trace_writer__arg_str
#define trace_json__arg_bool	trace_writer__arg_bool
#define trace_json__arg_raw	trace_writer__arg_raw
#define trace_json__arg_hex	trace_writer__arg_hex
#define trace_json__arg_dim3	trace_writer__arg_dim3
#define trace_json__field_raw	trace_writer__field_raw
#define trace_json__event_end	trace_writer__event_end
#define trace_json__end_events	trace_writer__end_events
#define trace_json__top_raw	trace_writer__top_raw
#define trace_json__close	trace_writer__close
#define trace_json__error	trace_writer__error
#define trace_json__free	trace_writer__free

static inline void trace_json__process_name(struct trace_writer *w, int pid, const char *name)
{
	trace_writer__meta(w, TRACE_META_PROCESS_NAME, pid, 0, name, 0);
}

static inline void trace_json__process_label(struct trace_writer *w, int pid, const char *label)
{
	trace_writer__meta(w, TRACE_META_PROCESS_LABEL, pid, 0, label, 0);
}

static inline void trace_json__process_sort(struct trace_writer *w, int pid, int64_t index)
{
	trace_writer__meta(w, TRACE_META_PROCESS_SORT, pid, 0, NULL, index);
}

static inline void trace_json__thread_name(struct trace_writer *w, int pid, int tid,
					   const char *name)
{
	trace_writer__meta(w, TRACE_META_THREAD_NAME, pid, tid, name, 0);
}

/* thread_sort_index: viewers list a process's threads by it (else by first appearance). */
static inline void trace_json__thread_sort(struct trace_writer *w, int pid, int tid,
					   int64_t index)
{
	trace_writer__meta(w, TRACE_META_THREAD_SORT, pid, tid, NULL, index);
}

/* JSON string escaping into buf (with quotes); returns the length that would be written. */
int json_escape(char *buf, int size, const char *s);

#endif
