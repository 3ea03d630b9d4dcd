/* SPDX-License-Identifier: MIT */
/* The trace writer: one interface, a backend per format, chosen by the output's name.
 *   FILE.json[.gz]     Chrome trace events, Kineto's conventions (trace_json.c)
 *   FILE.pftrace[.gz]  Perfetto protobuf track events, the SDK's way (trace_pftrace.c)
 * Callers describe events in the Chrome trace's terms (what the decoder, the GPU tracks, the
 * memory tracer and the profiler bridge need): a slice ("X", with its duration), an instant
 * ("i", scope field "s"), a counter ("C", one series per argument), a flow end ("s"/"f",
 * field "id"), metadata (process/thread names, labels, sort order) and document members.
 * Events are written as they complete so a long trace never sits in memory; bytes go through
 * trace_sink.c (plain or parallel gzip). Write errors are sticky and reported by
 * trace_writer__error() and trace_writer__close(). */
#ifndef TPTRACE_TRACE_WRITER_H
#define TPTRACE_TRACE_WRITER_H

#include <stdbool.h>
#include <stdint.h>

struct trace_sink;

enum trace_meta {
	TRACE_META_PROCESS_NAME,
	TRACE_META_PROCESS_LABEL,
	TRACE_META_PROCESS_SORT,
	TRACE_META_THREAD_NAME,
	TRACE_META_THREAD_SORT,
};

/* A backend: ctx is its own state; every op may assume the calls come in the documented
 * order (begin, then events each opened by event and closed by event_end, end). */
struct trace_writer_ops {
	int (*begin)(void *ctx, uint64_t base_mono_ns, uint64_t base_real_ns);
	void (*event)(void *ctx, const char *ph, const char *cat, const char *name, int pid,
		      int tid, uint64_t ts_mono_ns, uint64_t dur_ns);
	void (*arg_u64)(void *ctx, const char *key, uint64_t v);
	void (*arg_i64)(void *ctx, const char *key, int64_t v);
	void (*arg_f64)(void *ctx, const char *key, double v);
	void (*arg_str)(void *ctx, const char *key, const char *v);
	void (*arg_bool)(void *ctx, const char *key, bool v);
	void (*arg_raw)(void *ctx, const char *key, const char *json);
	void (*arg_hex)(void *ctx, const char *key, uint64_t v);
	void (*arg_dim3)(void *ctx, const char *key, uint32_t x, uint32_t y, uint32_t z);
	void (*field_raw)(void *ctx, const char *key, const char *json);
	void (*event_end)(void *ctx);
	void (*slice_begin)(void *ctx, const char *cat, const char *name, int pid, int tid,
			    uint64_t ts_mono_ns);
	/* NULL: the backend writes calls when they complete (the front drops the open and
	 * its args) */
	void (*call_open)(void *ctx, const char *cat, const char *name, int pid, int tid,
			  uint64_t ts_mono_ns);
	void (*meta)(void *ctx, enum trace_meta what, int pid, int tid, const char *sval,
		     int64_t ival);
	void (*end_events)(void *ctx);
	void (*top_raw)(void *ctx, const char *key, const char *json);
	int (*error)(const void *ctx);
	int (*close)(void *ctx);	/* finishes the file; frees ctx */
	void (*free)(void *ctx);	/* abandons it; frees ctx */
};

struct trace_writer;

/* Creates/truncates path; the backend by its name (".pftrace[.gz]": Perfetto, else JSON;
 * ".gz": gzip). NULL and errno. */
struct trace_writer *trace_writer__open(const char *path);
/* Starts the trace; base_mono_ns is the CLOCK_MONOTONIC time that ts 0 stands for,
 * base_real_ns the CLOCK_REALTIME time of the same instant. */
int trace_writer__begin(struct trace_writer *w, uint64_t base_mono_ns, uint64_t base_real_ns);

/* One event: open, add args, close. ph "X" and "E" take dur_ns; other phases ignore it. */
void trace_writer__event(struct trace_writer *w, const char *ph, const char *cat,
			 const char *name, int pid, int tid, uint64_t ts_mono_ns, uint64_t dur_ns);
void trace_writer__arg_u64(struct trace_writer *w, const char *key, uint64_t v);
void trace_writer__arg_i64(struct trace_writer *w, const char *key, int64_t v);
void trace_writer__arg_f64(struct trace_writer *w, const char *key, double v);
void trace_writer__arg_str(struct trace_writer *w, const char *key, const char *v);
void trace_writer__arg_bool(struct trace_writer *w, const char *key, bool v);
/* json: a complete JSON value the caller made (e.g. by cJSON), written as is; Perfetto gets
 * it as text */
void trace_writer__arg_raw(struct trace_writer *w, const char *key, const char *json);
void trace_writer__arg_hex(struct trace_writer *w, const char *key, uint64_t v);
void trace_writer__arg_dim3(struct trace_writer *w, const char *key, uint32_t x, uint32_t y,
			    uint32_t z);
/* Extra member of the event itself ("id" of a flow, "s" of an instant, "bp"), raw JSON. */
void trace_writer__field_raw(struct trace_writer *w, const char *key, const char *json);
void trace_writer__event_end(struct trace_writer *w);

/* A slice whose start is known when it opens (--py-stacks' Python frames): opened on the
 * thread at ts_mono_ns, closed later by an event of phase "E" that repeats its category,
 * name, start and duration, with the args (the JSON writes that one as its "X"; Perfetto
 * writes SLICE_BEGIN now and SLICE_END then). Slices opened this way nest properly on their
 * thread with every slice written at its completion ("X") inside them. */
void trace_writer__slice_begin(struct trace_writer *w, const char *cat, const char *name,
			       int pid, int tid, uint64_t ts_mono_ns);

/* A call entered (BEGIN at entry): a backend that writes slices as they open (Perfetto)
 * writes the call's start now, with the args that follow up to event_end (what is known at
 * entry); the JSON backend writes nothing (the front drops the open and its args). The call's
 * complete event comes later as an "X" of the same category, name (the same string), pid,
 * tid and start, with every arg: Perfetto then writes only its END, carrying the args the
 * open did not already carry with the same value (return value, join results). Each open is
 * followed by exactly one such "X" (opens and their "X" on a thread may interleave with
 * other events of the thread). */
void trace_writer__call_open(struct trace_writer *w, const char *cat, const char *name,
			     int pid, int tid, uint64_t ts_mono_ns);
/* Whether a backend (or the tee) writes call opens: without one, callers skip the work. */
bool trace_writer__wants_open(const struct trace_writer *w);

/* Metadata: names, labels and sort order of processes and threads. */
void trace_writer__meta(struct trace_writer *w, enum trace_meta what, int pid, int tid,
			const char *sval, int64_t ival);

/* Ends the events; then document members may follow (raw JSON values, e.g. cJSON output;
 * Perfetto has no place for them). */
void trace_writer__end_events(struct trace_writer *w);
void trace_writer__top_raw(struct trace_writer *w, const char *key, const char *json);
/* Finishes the trace and closes the file. 0 or the first error (negative errno). Frees w in
 * every case; NULL is fine. */
int trace_writer__close(struct trace_writer *w);
int trace_writer__error(const struct trace_writer *w);
void trace_writer__free(struct trace_writer *w);	/* abandon without finishing */

/* The backends (trace_json.c, trace_pftrace.c): ctx over the sink, which they own. */
void *trace_json_backend__new(struct trace_sink *sink, const struct trace_writer_ops **ops);
void *trace_pf_backend__new(struct trace_sink *sink, const struct trace_writer_ops **ops);
/* true when path names a Perfetto protobuf trace */
bool trace_pf__path(const char *path);

#endif
