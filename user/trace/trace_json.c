// SPDX-License-Identifier: MIT
/* The JSON backend of the trace writer (trace_writer.h): Chrome trace events with Kineto's
 * conventions, formatted straight into the sink's chunk (trace_sink.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trace_json.h"
#include "trace_sink.h"
#include "trace_writer.h"

struct json_w {
	struct trace_buf out;
	uint64_t base_mono_ns;
	bool first_event;
	bool first_arg;
	bool in_args;
	bool events_ended;
};

static inline void put(struct json_w *tj, const char *s, size_t n)
{
	trace_buf__put(&tj->out, s, n);
}

static inline void puts_(struct json_w *tj, const char *s)
{
	put(tj, s, strlen(s));
}

__attribute__((format(printf, 2, 3)))
static void putf(struct json_w *tj, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(tmp)) {
		char *big = malloc(n + 1);

		if (!big) {
			trace_sink__set_error(tj->out.sink, -ENOMEM);
			return;
		}
		va_start(ap, fmt);
		vsnprintf(big, n + 1, fmt, ap);
		va_end(ap);
		put(tj, big, n);
		free(big);
		return;
	}
	put(tj, tmp, n);
}

int json_escape(char *buf, int size, const char *s)
{
	int n = 0;

#define EMIT(c) do { if (n < size - 1) buf[n] = (c); n++; } while (0)
	EMIT('"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"': EMIT('\\'); EMIT('"'); break;
		case '\\': EMIT('\\'); EMIT('\\'); break;
		case '\n': EMIT('\\'); EMIT('n'); break;
		case '\r': EMIT('\\'); EMIT('r'); break;
		case '\t': EMIT('\\'); EMIT('t'); break;
		default:
			if (*p < 0x20) {
				char u[8];

				snprintf(u, sizeof(u), "\\u%04x", *p);
				for (int i = 0; u[i]; i++)
					EMIT(u[i]);
			} else {
				EMIT(*p);
			}
		}
	}
	EMIT('"');
#undef EMIT
	if (size > 0)
		buf[n < size ? n : size - 1] = '\0';
	return n;
}

static void put_str_escaped(struct json_w *tj, const char *s)
{
	char tmp[1024];
	int n = json_escape(tmp, sizeof(tmp), s);

	if (n < (int)sizeof(tmp)) {
		put(tj, tmp, n);
		return;
	}
	char *big = malloc(n + 1);

	if (!big) {
		trace_sink__set_error(tj->out.sink, -ENOMEM);
		return;
	}
	json_escape(big, n + 1, s);
	put(tj, big, n);
	free(big);
}

/* 1: the byte ends a string or needs escaping (JSON: '"', '\\', and below 0x20) */
static const unsigned char str_stop[256] = {
	[0 ... 0x1f] = 1, ['"'] = 1, ['\\'] = 1,
};

#define STR_FAST_MAX 256

static void put_str(struct json_w *tj, const char *s)
{
	const unsigned char *p;
	char *o;
	size_t i;

	if (!s)
		s = "";
	p = (const unsigned char *)s;
	/* names and keys almost never need escaping: copy them while checking, in one pass,
	 * into the buffer itself; anything else (escapes, long strings, a full buffer) goes the
	 * slow way */
	if (__builtin_expect(tj->out.len + STR_FAST_MAX + 2 <= TRACE_SINK_CHUNK, 1)) {
		o = tj->out.buf + tj->out.len;
		*o++ = '"';
		for (i = 0; i < STR_FAST_MAX && !str_stop[p[i]]; i++)
			o[i] = p[i];
		if (i < STR_FAST_MAX && !p[i]) {
			o[i] = '"';
			tj->out.len += i + 2;
			return;
		}
	}
	for (; *p; p++)
		if (str_stop[*p]) {
			put_str_escaped(tj, s);
			return;
		}
	i = p - (const unsigned char *)s;
	if (tj->out.len + i + 2 > TRACE_SINK_CHUNK) {
		put_str_escaped(tj, s);
		return;
	}
	tj->out.buf[tj->out.len] = '"';
	memcpy(tj->out.buf + tj->out.len + 1, s, i);
	tj->out.buf[tj->out.len + 1 + i] = '"';
	tj->out.len += i + 2;
}

static int json_begin(void *ctx, uint64_t base_mono_ns, uint64_t base_real_ns)
{
	struct json_w *tj = ctx;

	tj->base_mono_ns = base_mono_ns;
	putf(tj, "{\n  \"schemaVersion\": 1,\n  \"displayTimeUnit\": \"ms\",\n"
		 "  \"baseTimeNanoseconds\": %" PRIu64 ",\n  \"traceEvents\": [\n", base_real_ns);
	return trace_sink__error(tj->out.sink);
}

/* Integers without printf: formatting is most of the writer's time otherwise. */
static const char digits2[201] =
	"00010203040506070809101112131415161718192021222324252627282930313233343536373839"
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879"
	"8081828384858687888990919293949596979899";

static char *fmt_u64(char *end, uint64_t v)
{
	/* two digits a division: addresses and stream handles have 14-15 */
	while (v >= 100) {
		unsigned d = v % 100;

		v /= 100;
		*--end = digits2[2 * d + 1];
		*--end = digits2[2 * d];
	}
	if (v >= 10) {
		*--end = digits2[2 * v + 1];
		*--end = digits2[2 * v];
	} else {
		*--end = (char)('0' + v);
	}
	return end;
}

static void put_u64(struct json_w *tj, uint64_t v)
{
	char buf[24], *p = fmt_u64(buf + sizeof(buf), v);

	put(tj, p, buf + sizeof(buf) - p);
}

static void put_i64(struct json_w *tj, int64_t v)
{
	if (v < 0) {
		put(tj, "-", 1);
		put_u64(tj, -(uint64_t)v);
	} else {
		put_u64(tj, (uint64_t)v);
	}
}

static void put_ts(struct json_w *tj, const char *key, uint64_t ns)
{
	char buf[32], *end = buf + sizeof(buf), *p;
	uint64_t frac = ns % 1000;

	/* "<us>.<3 digits of ns>" */
	*--end = (char)('0' + frac % 10);
	*--end = (char)('0' + frac / 10 % 10);
	*--end = (char)('0' + frac / 100);
	*--end = '.';
	p = fmt_u64(end, ns / 1000);
	put(tj, ",\"", 2);
	puts_(tj, key);
	put(tj, "\":", 2);
	put(tj, p, buf + sizeof(buf) - p);
}

static void json_event(void *ctx, const char *ph, const char *cat, const char *name,
		       int pid, int tid, uint64_t ts_mono_ns, uint64_t dur_ns)
{
	struct json_w *tj = ctx;
	uint64_t rel = ts_mono_ns > tj->base_mono_ns ? ts_mono_ns - tj->base_mono_ns : 0;

	if (ph[0] == 'E')
		ph = "X";	/* the end of a slice_begin's slice: written whole, now */
	puts_(tj, tj->first_event ? "    {\"ph\":\"" : ",\n    {\"ph\":\"");
	tj->first_event = false;
	puts_(tj, ph);
	puts_(tj, "\"");
	if (cat) {
		puts_(tj, ",\"cat\":");
		put_str(tj, cat);
	}
	puts_(tj, ",\"name\":");
	put_str(tj, name);
	put(tj, ",\"pid\":", 7);
	put_i64(tj, pid);
	put(tj, ",\"tid\":", 7);
	put_i64(tj, tid);
	if (ph[0] != 'M') {
		put_ts(tj, "ts", rel);
		if (ph[0] == 'X')
			put_ts(tj, "dur", dur_ns);
	}
	tj->first_arg = true;
	tj->in_args = false;
}

static void arg_key(struct json_w *tj, const char *key)
{
	if (!tj->in_args) {
		puts_(tj, ",\"args\":{");
		tj->in_args = true;
	}
	if (!tj->first_arg)
		puts_(tj, ",");
	tj->first_arg = false;
	put_str(tj, key);
	puts_(tj, ":");
}

static void json_arg_u64(void *ctx, const char *key, uint64_t v)
{
	struct json_w *tj = ctx;

	arg_key(tj, key);
	put_u64(tj, v);
}

static void json_arg_i64(void *ctx, const char *key, int64_t v)
{
	struct json_w *tj = ctx;

	arg_key(tj, key);
	put_i64(tj, v);
}

static void json_arg_f64(void *ctx, const char *key, double v)
{
	struct json_w *tj = ctx;

	arg_key(tj, key);
	putf(tj, "%.3f", v);
}

static void json_arg_str(void *ctx, const char *key, const char *v)
{
	struct json_w *tj = ctx;

	arg_key(tj, key);
	put_str(tj, v);
}

static void json_arg_raw(void *ctx, const char *key, const char *json)
{
	struct json_w *tj = ctx;

	arg_key(tj, key);
	puts_(tj, json);
}

static void json_arg_bool(void *ctx, const char *key, bool v)
{
	struct json_w *tj = ctx;

	arg_key(tj, key);
	puts_(tj, v ? "true" : "false");
}

static void json_arg_hex(void *ctx, const char *key, uint64_t v)
{
	struct json_w *tj = ctx;
	static const char digits[] = "0123456789abcdef";
	char buf[24], *end = buf + sizeof(buf), *p = end;

	arg_key(tj, key);
	*--p = '"';
	do {
		*--p = digits[v & 15];
		v >>= 4;
	} while (v);
	*--p = 'x';
	*--p = '0';
	*--p = '"';
	put(tj, p, end - p);
}

static void json_arg_dim3(void *ctx, const char *key, uint32_t x, uint32_t y, uint32_t z)
{
	struct json_w *tj = ctx;

	arg_key(tj, key);
	put(tj, "[", 1);
	put_u64(tj, x);
	put(tj, ", ", 2);
	put_u64(tj, y);
	put(tj, ", ", 2);
	put_u64(tj, z);
	put(tj, "]", 1);
}

static void json_field_raw(void *ctx, const char *key, const char *json)
{
	struct json_w *tj = ctx;

	if (tj->in_args) {
		puts_(tj, "}");
		tj->in_args = false;
		tj->first_arg = true;	/* args already closed; later args would reopen */
	}
	puts_(tj, ",");
	put_str(tj, key);
	puts_(tj, ":");
	puts_(tj, json);
}

static void json_event_end(void *ctx)
{
	struct json_w *tj = ctx;

	if (tj->in_args)
		puts_(tj, "}");
	puts_(tj, "}");
	tj->in_args = false;
	trace_buf__boundary(&tj->out);
}

/* Nothing yet: the slice is written whole by its "E" (as an "X"). */
static void json_slice_begin(void *ctx, const char *cat, const char *name, int pid, int tid,
			     uint64_t ts_mono_ns)
{
	(void)ctx, (void)cat, (void)name, (void)pid, (void)tid, (void)ts_mono_ns;
}

static void json_meta(void *ctx, enum trace_meta what, int pid, int tid, const char *sval,
		      int64_t ival)
{
	static const struct { const char *event, *key; bool is_int; } kinds[] = {
		[TRACE_META_PROCESS_NAME] = { "process_name", "name", false },
		[TRACE_META_PROCESS_LABEL] = { "process_labels", "labels", false },
		[TRACE_META_PROCESS_SORT] = { "process_sort_index", "sort_index", true },
		[TRACE_META_THREAD_NAME] = { "thread_name", "name", false },
		[TRACE_META_THREAD_SORT] = { "thread_sort_index", "sort_index", true },
	};

	json_event(ctx, "M", NULL, kinds[what].event, pid, tid, 0, 0);
	if (kinds[what].is_int)
		json_arg_i64(ctx, kinds[what].key, ival);
	else
		json_arg_str(ctx, kinds[what].key, sval);
	json_event_end(ctx);
}

static void json_end_events(void *ctx)
{
	struct json_w *tj = ctx;

	if (tj->events_ended)
		return;
	puts_(tj, "\n  ]");
	tj->events_ended = true;
}

static void json_top_raw(void *ctx, const char *key, const char *json)
{
	struct json_w *tj = ctx;

	json_end_events(tj);
	puts_(tj, ",\n  ");
	put_str(tj, key);
	puts_(tj, ": ");
	puts_(tj, json);
}

static int json_error(const void *ctx)
{
	const struct json_w *tj = ctx;

	return trace_sink__error(tj->out.sink);
}

static int json_close(void *ctx)
{
	struct json_w *tj = ctx;

	int err;

	json_end_events(tj);
	puts_(tj, "\n}\n");
	err = trace_buf__close(&tj->out);
	free(tj);
	return err;
}

static void json_free(void *ctx)
{
	struct json_w *tj = ctx;

	trace_sink__free(tj->out.sink);
	free(tj);
}

static const struct trace_writer_ops json_ops = {
	.begin = json_begin, .event = json_event, .arg_u64 = json_arg_u64,
	.arg_i64 = json_arg_i64, .arg_f64 = json_arg_f64, .arg_str = json_arg_str,
	.arg_bool = json_arg_bool, .arg_raw = json_arg_raw, .arg_hex = json_arg_hex,
	.arg_dim3 = json_arg_dim3, .field_raw = json_field_raw, .event_end = json_event_end,
	.slice_begin = json_slice_begin, .meta = json_meta, .end_events = json_end_events,
	.top_raw = json_top_raw,
	.error = json_error, .close = json_close, .free = json_free,
};

void *trace_json_backend__new(struct trace_sink *sink, const struct trace_writer_ops **ops)
{
	struct json_w *tj = calloc(1, sizeof(*tj));

	if (!tj)
		return NULL;
	trace_buf__init(&tj->out, sink);
	tj->first_event = true;
	*ops = &json_ops;
	return tj;
}

