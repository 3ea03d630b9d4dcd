/* SPDX-License-Identifier: MIT */
/* Streaming Chrome-trace JSON writer (Kineto conventions), plain or gzip by file name.
 * Events are written as they complete so a long trace never sits in memory; the file is
 * valid JSON once trace_json__close() returned 0. Write errors (full disk, EIO) are sticky
 * and reported by trace_json__error() and trace_json__close(). */
#ifndef TPTRACE_TRACE_JSON_H
#define TPTRACE_TRACE_JSON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

struct trace_json;

/* Creates/truncates path (".gz" suffix: gzip). NULL and errno. */
struct trace_json *trace_json__open(const char *path);
/* Starts the document; base_mono_ns is the CLOCK_MONOTONIC time that ts 0 stands for,
 * base_real_ns the CLOCK_REALTIME time of the same instant. */
int trace_json__begin(struct trace_json *tj, uint64_t base_mono_ns, uint64_t base_real_ns);

/* One event: open, add args, close. ph "X" takes dur_ns; other phases ignore it. */
void trace_json__event(struct trace_json *tj, const char *ph, const char *cat, const char *name,
		       int pid, int tid, uint64_t ts_mono_ns, uint64_t dur_ns);
void trace_json__arg_u64(struct trace_json *tj, const char *key, uint64_t v);
void trace_json__arg_i64(struct trace_json *tj, const char *key, int64_t v);
void trace_json__arg_f64(struct trace_json *tj, const char *key, double v);
void trace_json__arg_str(struct trace_json *tj, const char *key, const char *v);
void trace_json__arg_bool(struct trace_json *tj, const char *key, bool v);
/* json: a complete JSON value the caller made (e.g. by cJSON), written as is; .pftrace gets
 * it as text */
void trace_json__arg_raw(struct trace_json *tj, const char *key, const char *json);
void trace_json__arg_hex(struct trace_json *tj, const char *key, uint64_t v);
void trace_json__arg_dim3(struct trace_json *tj, const char *key, uint32_t x, uint32_t y, uint32_t z);
/* Extra top-level member of the event itself (e.g. "id", "bp"), raw JSON value. */
void trace_json__field_raw(struct trace_json *tj, const char *key, const char *json);
void trace_json__event_end(struct trace_json *tj);

/* Metadata events (ph "M"). */
void trace_json__process_name(struct trace_json *tj, int pid, const char *name);
void trace_json__process_label(struct trace_json *tj, int pid, const char *label);
void trace_json__process_sort(struct trace_json *tj, int pid, int64_t index);
void trace_json__thread_name(struct trace_json *tj, int pid, int tid, const char *name);
/* thread_sort_index: viewers list a process's threads by it (else by first appearance). */
void trace_json__thread_sort(struct trace_json *tj, int pid, int tid, int64_t index);

/* Closes traceEvents; then top-level members may follow (raw JSON values, e.g. cJSON output). */
void trace_json__end_events(struct trace_json *tj);
void trace_json__top_raw(struct trace_json *tj, const char *key, const char *json);
/* Finishes the document and closes the file. 0 or the first write error (negative errno).
 * Frees tj in every case. */
int trace_json__close(struct trace_json *tj);
int trace_json__error(const struct trace_json *tj);
void trace_json__free(struct trace_json *tj);	/* abandon without finishing */

/* JSON string escaping into buf (with quotes); returns the length that would be written. */
int json_escape(char *buf, int size, const char *s);

#endif
