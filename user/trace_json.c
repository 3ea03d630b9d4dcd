// SPDX-License-Identifier: MIT
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include "trace_json.h"

#define BUF_SIZE (256 * 1024)

struct trace_json {
	FILE *file;		/* plain output */
	gzFile gz;		/* or gzip output */
	char *buf;
	size_t len;
	int err;		/* first write error, sticky */
	uint64_t base_mono_ns;
	bool first_event;
	bool first_arg;
	bool in_args;
	bool events_ended;
	bool first_top;
};

static void flush(struct trace_json *tj)
{
	if (!tj->len || tj->err) {
		tj->len = 0;
		return;
	}
	if (tj->gz) {
		if (gzwrite(tj->gz, tj->buf, tj->len) != (int)tj->len) {
			int zerr;

			gzerror(tj->gz, &zerr);
			tj->err = zerr == Z_ERRNO && errno ? -errno : -EIO;
		}
	} else if (fwrite(tj->buf, 1, tj->len, tj->file) != tj->len) {
		tj->err = errno ? -errno : -EIO;
	}
	tj->len = 0;
}

static void put_slow(struct trace_json *tj, const char *s, size_t n)
{
	flush(tj);
	if (n > BUF_SIZE) {
		/* larger than the buffer: write through */
		char *save = tj->buf;

		tj->buf = (char *)s;
		tj->len = n;
		flush(tj);
		tj->buf = save;
		return;
	}
	memcpy(tj->buf + tj->len, s, n);
	tj->len += n;
}

/* Inline, so that the many short constant pieces become a few stores each, not a call to
 * memcpy: per event, these calls were a third of the writer's time. */
static inline void put(struct trace_json *tj, const char *s, size_t n)
{
	if (__builtin_expect(tj->len + n > BUF_SIZE, 0)) {
		put_slow(tj, s, n);
		return;
	}
	memcpy(tj->buf + tj->len, s, n);
	tj->len += n;
}

static inline void puts_(struct trace_json *tj, const char *s)
{
	put(tj, s, strlen(s));
}

__attribute__((format(printf, 2, 3)))
static void putf(struct trace_json *tj, const char *fmt, ...)
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
			tj->err = tj->err ?: -ENOMEM;
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

static void put_str_escaped(struct trace_json *tj, const char *s)
{
	char tmp[1024];
	int n = json_escape(tmp, sizeof(tmp), s);

	if (n < (int)sizeof(tmp)) {
		put(tj, tmp, n);
		return;
	}
	char *big = malloc(n + 1);

	if (!big) {
		tj->err = tj->err ?: -ENOMEM;
		return;
	}
	json_escape(big, n + 1, s);
	put(tj, big, n);
	free(big);
}

static void put_str(struct trace_json *tj, const char *s)
{
	const unsigned char *p;
	size_t n;

	if (!s)
		s = "";
	/* names and keys almost never need escaping: find the length and check in one pass,
	 * then copy them as they are */
	for (p = (const unsigned char *)s; *p; p++)
		if (*p < 0x20 || *p == '"' || *p == '\\') {
			put_str_escaped(tj, s);
			return;
		}
	n = p - (const unsigned char *)s;
	if (__builtin_expect(tj->len + n + 2 > BUF_SIZE, 0)) {
		put_str_escaped(tj, s);
		return;
	}
	tj->buf[tj->len] = '"';
	memcpy(tj->buf + tj->len + 1, s, n);
	tj->buf[tj->len + 1 + n] = '"';
	tj->len += n + 2;
}

struct trace_json *trace_json__open(const char *path)
{
	struct trace_json *tj = calloc(1, sizeof(*tj));
	size_t plen = strlen(path);
	int fd;

	if (!tj)
		return NULL;
	tj->buf = malloc(BUF_SIZE);
	if (!tj->buf)
		goto err;
	tj->file = fopen(path, "w");
	if (!tj->file)
		goto err;
	if (plen > 3 && !strcmp(path + plen - 3, ".gz")) {
		fd = dup(fileno(tj->file));
		if (fd < 0)
			goto err;
		tj->gz = gzdopen(fd, "wb1");
		if (!tj->gz) {
			close(fd);
			errno = ENOMEM;
			goto err;
		}
	}
	tj->first_event = true;
	tj->first_top = true;
	return tj;
err:
	{
		int saved = errno;

		if (tj->file)
			fclose(tj->file);
		free(tj->buf);
		free(tj);
		errno = saved;
	}
	return NULL;
}

int trace_json__begin(struct trace_json *tj, uint64_t base_mono_ns, uint64_t base_real_ns)
{
	tj->base_mono_ns = base_mono_ns;
	putf(tj, "{\n  \"schemaVersion\": 1,\n  \"displayTimeUnit\": \"ms\",\n"
		 "  \"baseTimeNanoseconds\": %" PRIu64 ",\n  \"traceEvents\": [\n", base_real_ns);
	return tj->err;
}

/* Integers without printf: formatting is most of the writer's time otherwise. */
static char *fmt_u64(char *end, uint64_t v)
{
	do {
		*--end = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	return end;
}

static void put_u64(struct trace_json *tj, uint64_t v)
{
	char buf[24], *p = fmt_u64(buf + sizeof(buf), v);

	put(tj, p, buf + sizeof(buf) - p);
}

static void put_i64(struct trace_json *tj, int64_t v)
{
	if (v < 0) {
		put(tj, "-", 1);
		put_u64(tj, -(uint64_t)v);
	} else {
		put_u64(tj, (uint64_t)v);
	}
}

static void put_ts(struct trace_json *tj, const char *key, uint64_t ns)
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

void trace_json__event(struct trace_json *tj, const char *ph, const char *cat, const char *name,
		       int pid, int tid, uint64_t ts_mono_ns, uint64_t dur_ns)
{
	uint64_t rel = ts_mono_ns > tj->base_mono_ns ? ts_mono_ns - tj->base_mono_ns : 0;

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

static void arg_key(struct trace_json *tj, const char *key)
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

void trace_json__arg_u64(struct trace_json *tj, const char *key, uint64_t v)
{
	arg_key(tj, key);
	put_u64(tj, v);
}

void trace_json__arg_i64(struct trace_json *tj, const char *key, int64_t v)
{
	arg_key(tj, key);
	put_i64(tj, v);
}

void trace_json__arg_f64(struct trace_json *tj, const char *key, double v)
{
	arg_key(tj, key);
	putf(tj, "%.3f", v);
}

void trace_json__arg_str(struct trace_json *tj, const char *key, const char *v)
{
	arg_key(tj, key);
	put_str(tj, v);
}

void trace_json__arg_bool(struct trace_json *tj, const char *key, bool v)
{
	arg_key(tj, key);
	puts_(tj, v ? "true" : "false");
}

void trace_json__arg_hex(struct trace_json *tj, const char *key, uint64_t v)
{
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

void trace_json__arg_dim3(struct trace_json *tj, const char *key, uint32_t x, uint32_t y, uint32_t z)
{
	arg_key(tj, key);
	put(tj, "[", 1);
	put_u64(tj, x);
	put(tj, ", ", 2);
	put_u64(tj, y);
	put(tj, ", ", 2);
	put_u64(tj, z);
	put(tj, "]", 1);
}

void trace_json__field_raw(struct trace_json *tj, const char *key, const char *json)
{
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

void trace_json__event_end(struct trace_json *tj)
{
	if (tj->in_args)
		puts_(tj, "}");
	puts_(tj, "}");
	tj->in_args = false;
	if (tj->len > BUF_SIZE / 2)
		flush(tj);
}

static void meta(struct trace_json *tj, const char *what, int pid, int tid, const char *key,
		 const char *sval, int64_t ival, bool is_int)
{
	trace_json__event(tj, "M", NULL, what, pid, tid, 0, 0);
	if (is_int)
		trace_json__arg_i64(tj, key, ival);
	else
		trace_json__arg_str(tj, key, sval);
	trace_json__event_end(tj);
}

void trace_json__process_name(struct trace_json *tj, int pid, const char *name)
{
	meta(tj, "process_name", pid, 0, "name", name, 0, false);
}

void trace_json__process_label(struct trace_json *tj, int pid, const char *label)
{
	meta(tj, "process_labels", pid, 0, "labels", label, 0, false);
}

void trace_json__process_sort(struct trace_json *tj, int pid, int64_t index)
{
	meta(tj, "process_sort_index", pid, 0, "sort_index", NULL, index, true);
}

void trace_json__thread_name(struct trace_json *tj, int pid, int tid, const char *name)
{
	meta(tj, "thread_name", pid, tid, "name", name, 0, false);
}

void trace_json__thread_sort(struct trace_json *tj, int pid, int tid, int64_t index)
{
	meta(tj, "thread_sort_index", pid, tid, "sort_index", NULL, index, true);
}

void trace_json__end_events(struct trace_json *tj)
{
	if (tj->events_ended)
		return;
	puts_(tj, "\n  ]");
	tj->events_ended = true;
}

void trace_json__top_raw(struct trace_json *tj, const char *key, const char *json)
{
	trace_json__end_events(tj);
	puts_(tj, ",\n  ");
	put_str(tj, key);
	puts_(tj, ": ");
	puts_(tj, json);
}

int trace_json__error(const struct trace_json *tj)
{
	return tj->err;
}


int trace_json__close(struct trace_json *tj)
{
	int err;

	if (!tj)
		return 0;
	trace_json__end_events(tj);
	puts_(tj, "\n}\n");
	flush(tj);
	if (tj->gz) {
		int zr = gzclose(tj->gz);

		tj->gz = NULL;
		if (zr != Z_OK && !tj->err)
			tj->err = zr == Z_ERRNO && errno ? -errno : -EIO;
	}
	if (fflush(tj->file) && !tj->err)
		tj->err = -errno;
	if (fsync(fileno(tj->file)) && !tj->err && errno != EINVAL && errno != EROFS)
		tj->err = -errno;
	if (fclose(tj->file) && !tj->err)
		tj->err = -errno;
	tj->file = NULL;
	err = tj->err;
	free(tj->buf);
	free(tj);
	return err;
}

void trace_json__free(struct trace_json *tj)
{
	if (!tj)
		return;
	if (tj->gz)
		gzclose(tj->gz);
	if (tj->file)
		fclose(tj->file);
	free(tj->buf);
	free(tj);
}
