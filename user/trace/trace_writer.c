// SPDX-License-Identifier: MIT
/* The trace writer's front: the backend's ops behind one set of calls, and a tee. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "trace_sink.h"
#include "trace_writer.h"

struct trace_writer {
	const struct trace_writer_ops *ops;
	void *ctx;
	struct trace_writer *tee;	/* a second output fed the same calls (TPTRACE_TRACE_TEE) */
	bool dropping;		/* inside a call open the backend does not write: args and
				 * event_end are not passed on */
};

struct trace_writer *trace_writer__open(const char *path)
{
	struct trace_writer *w = calloc(1, sizeof(*w));
	struct trace_sink *sink;
	const char *tee;
	int saved;

	if (!w)
		return NULL;
	sink = trace_sink__open(path);
	if (!sink)
		goto err;
	w->ctx = trace_pf__path(path) ? trace_pf_backend__new(sink, &w->ops) :
					trace_json_backend__new(sink, &w->ops);
	if (!w->ctx) {
		trace_sink__free(sink);
		errno = ENOMEM;
		goto err;
	}
	/* Tests only: one run writes a second trace (e.g. .json and .pftrace of the same
	 * events), so the two formats can be compared event by event. */
	tee = getenv("TPTRACE_TRACE_TEE");
	if (tee && *tee && strcmp(tee, path)) {
		w->tee = trace_writer__open(tee);
		if (!w->tee)
			goto err;
	}
	return w;
err:
	saved = errno;
	trace_writer__free(w);
	errno = saved;
	return NULL;
}

int trace_writer__begin(struct trace_writer *w, uint64_t base_mono_ns, uint64_t base_real_ns)
{
	if (w->tee)
		trace_writer__begin(w->tee, base_mono_ns, base_real_ns);
	return w->ops->begin(w->ctx, base_mono_ns, base_real_ns);
}

void trace_writer__event(struct trace_writer *w, const char *ph, const char *cat,
			 const char *name, int pid, int tid, uint64_t ts_mono_ns, uint64_t dur_ns)
{
	if (w->tee)
		trace_writer__event(w->tee, ph, cat, name, pid, tid, ts_mono_ns, dur_ns);
	w->ops->event(w->ctx, ph, cat, name, pid, tid, ts_mono_ns, dur_ns);
}

#define FORWARD(op, ...)					\
	do {							\
		if (w->tee)					\
			trace_writer__##op(w->tee, __VA_ARGS__);	\
		if (!w->dropping)				\
			w->ops->op(w->ctx, __VA_ARGS__);	\
	} while (0)

void trace_writer__arg_u64(struct trace_writer *w, const char *key, uint64_t v)
{
	FORWARD(arg_u64, key, v);
}

void trace_writer__arg_i64(struct trace_writer *w, const char *key, int64_t v)
{
	FORWARD(arg_i64, key, v);
}

void trace_writer__arg_f64(struct trace_writer *w, const char *key, double v)
{
	FORWARD(arg_f64, key, v);
}

void trace_writer__arg_str(struct trace_writer *w, const char *key, const char *v)
{
	FORWARD(arg_str, key, v);
}

void trace_writer__arg_bool(struct trace_writer *w, const char *key, bool v)
{
	FORWARD(arg_bool, key, v);
}

void trace_writer__arg_raw(struct trace_writer *w, const char *key, const char *json)
{
	FORWARD(arg_raw, key, json);
}

void trace_writer__arg_hex(struct trace_writer *w, const char *key, uint64_t v)
{
	FORWARD(arg_hex, key, v);
}

void trace_writer__arg_dim3(struct trace_writer *w, const char *key, uint32_t x, uint32_t y,
			    uint32_t z)
{
	FORWARD(arg_dim3, key, x, y, z);
}

void trace_writer__field_raw(struct trace_writer *w, const char *key, const char *json)
{
	FORWARD(field_raw, key, json);
}

void trace_writer__event_end(struct trace_writer *w)
{
	if (w->tee)
		trace_writer__event_end(w->tee);
	if (w->dropping)
		w->dropping = false;
	else
		w->ops->event_end(w->ctx);
}

void trace_writer__call_open(struct trace_writer *w, const char *cat, const char *name,
			     int pid, int tid, uint64_t ts_mono_ns)
{
	if (w->tee)
		trace_writer__call_open(w->tee, cat, name, pid, tid, ts_mono_ns);
	if (w->ops->call_open)
		w->ops->call_open(w->ctx, cat, name, pid, tid, ts_mono_ns);
	else
		w->dropping = true;
}

bool trace_writer__wants_open(const struct trace_writer *w)
{
	return w->ops->call_open || (w->tee && trace_writer__wants_open(w->tee));
}

void trace_writer__slice_begin(struct trace_writer *w, const char *cat, const char *name,
			       int pid, int tid, uint64_t ts_mono_ns)
{
	FORWARD(slice_begin, cat, name, pid, tid, ts_mono_ns);
}

void trace_writer__meta(struct trace_writer *w, enum trace_meta what, int pid, int tid,
			const char *sval, int64_t ival)
{
	FORWARD(meta, what, pid, tid, sval, ival);
}

void trace_writer__end_events(struct trace_writer *w)
{
	if (w->tee)
		trace_writer__end_events(w->tee);
	w->ops->end_events(w->ctx);
}

void trace_writer__top_raw(struct trace_writer *w, const char *key, const char *json)
{
	FORWARD(top_raw, key, json);
}

int trace_writer__error(const struct trace_writer *w)
{
	return w->ops->error(w->ctx) ?: w->tee ? trace_writer__error(w->tee) : 0;
}

int trace_writer__close(struct trace_writer *w)
{
	int err, terr = 0;

	if (!w)
		return 0;
	if (w->tee)
		terr = trace_writer__close(w->tee);
	err = w->ops->close(w->ctx);
	free(w);
	return err ?: terr;
}

void trace_writer__free(struct trace_writer *w)
{
	if (!w)
		return;
	trace_writer__free(w->tee);
	if (w->ctx)
		w->ops->free(w->ctx);
	free(w);
}
