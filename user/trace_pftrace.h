/* SPDX-License-Identifier: MIT */
/* Perfetto protobuf backend of the trace writer (user/trace_json.h's API; chosen by the
 * ".pftrace" / ".pftrace.gz" output name). Not for the writers: they call trace_json__*,
 * which forwards here. Packets go out through trace_json__put_bytes(), so plain/gzip output,
 * sticky write errors and close/fsync are trace_json's. */
#ifndef TPTRACE_TRACE_PFTRACE_H
#define TPTRACE_TRACE_PFTRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct trace_json;
struct trace_pf;

enum trace_pf_meta {
	PF_META_PROCESS_NAME,
	PF_META_PROCESS_LABEL,
	PF_META_PROCESS_SORT,
	PF_META_THREAD_NAME,
	PF_META_THREAD_SORT,
};

/* true when path names a Perfetto protobuf trace */
bool trace_pf__path(const char *path);

struct trace_pf *trace_pf__new(struct trace_json *out);
void trace_pf__free(struct trace_pf *pf);
void trace_pf__begin(struct trace_pf *pf, uint64_t base_mono_ns, uint64_t base_real_ns);
void trace_pf__event(struct trace_pf *pf, const char *ph, const char *cat, const char *name,
		     int pid, int tid, uint64_t ts_mono_ns, uint64_t dur_ns);
void trace_pf__arg_u64(struct trace_pf *pf, const char *key, uint64_t v);
void trace_pf__arg_i64(struct trace_pf *pf, const char *key, int64_t v);
void trace_pf__arg_f64(struct trace_pf *pf, const char *key, double v);
void trace_pf__arg_str(struct trace_pf *pf, const char *key, const char *v);
void trace_pf__arg_bool(struct trace_pf *pf, const char *key, bool v);
void trace_pf__arg_ptr(struct trace_pf *pf, const char *key, uint64_t v);
void trace_pf__arg_dim3(struct trace_pf *pf, const char *key, uint32_t x, uint32_t y, uint32_t z);
void trace_pf__field_raw(struct trace_pf *pf, const char *key, const char *json);
void trace_pf__event_end(struct trace_pf *pf);
void trace_pf__meta(struct trace_pf *pf, enum trace_pf_meta what, int pid, int tid,
		    const char *sval, int64_t ival);
/* Writes descriptors of tracks that only had metadata; before trace_json closes the file. */
void trace_pf__finish(struct trace_pf *pf);

/* trace_json.c: raw bytes into the output (buffered, plain or gzip, errors sticky) */
void trace_json__put_bytes(struct trace_json *tj, const void *p, size_t n);

#endif
