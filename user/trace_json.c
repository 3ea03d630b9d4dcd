// SPDX-License-Identifier: MIT
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include "trace_json.h"
#include "trace_pftrace.h"

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
	struct trace_pf *pf;	/* ".pftrace[.gz]": the Perfetto protobuf backend writes instead */
	struct trace_json *tee;	/* a second output fed the same calls (TPTRACE_TRACE_TEE) */
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

static void put(struct trace_json *tj, const char *s, size_t n)
{
	if (tj->len + n > BUF_SIZE) {
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
	}
	memcpy(tj->buf + tj->len, s, n);
	tj->len += n;
}

static void puts_(struct trace_json *tj, const char *s)
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

static void put_str(struct trace_json *tj, const char *s)
{
	char tmp[1024];
	int n = json_escape(tmp, sizeof(tmp), s ? s : "");

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
	if (trace_pf__path(path)) {
		tj->pf = trace_pf__new(tj);
		if (!tj->pf) {
			errno = ENOMEM;
			goto err;
		}
	}
	/* Tests only: one run writes a second trace (e.g. .json and .pftrace of the same
	 * events), so the two formats can be compared event by event. */
	const char *tee = getenv("TPTRACE_TRACE_TEE");

	if (tee && *tee && strcmp(tee, path)) {
		tj->tee = trace_json__open(tee);
		if (!tj->tee)
			goto err;
	}
	return tj;
err:
	{
		int saved = errno;

		trace_pf__free(tj->pf);
		if (tj->gz)
			gzclose(tj->gz);
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
	if (tj->tee)
		trace_json__begin(tj->tee, base_mono_ns, base_real_ns);
	if (tj->pf) {
		trace_pf__begin(tj->pf, base_mono_ns, base_real_ns);
		return trace_json__error(tj);
	}
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

	if (tj->tee)
		trace_json__event(tj->tee, ph, cat, name, pid, tid, ts_mono_ns, dur_ns);
	if (tj->pf) {
		trace_pf__event(tj->pf, ph, cat, name, pid, tid, ts_mono_ns, dur_ns);
		return;
	}
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
	if (tj->tee)
		trace_json__arg_u64(tj->tee, key, v);
	if (tj->pf) {
		trace_pf__arg_u64(tj->pf, key, v);
		return;
	}
	arg_key(tj, key);
	put_u64(tj, v);
}

void trace_json__arg_i64(struct trace_json *tj, const char *key, int64_t v)
{
	if (tj->tee)
		trace_json__arg_i64(tj->tee, key, v);
	if (tj->pf) {
		trace_pf__arg_i64(tj->pf, key, v);
		return;
	}
	arg_key(tj, key);
	put_i64(tj, v);
}

void trace_json__arg_f64(struct trace_json *tj, const char *key, double v)
{
	if (tj->tee)
		trace_json__arg_f64(tj->tee, key, v);
	if (tj->pf) {
		trace_pf__arg_f64(tj->pf, key, v);
		return;
	}
	arg_key(tj, key);
	putf(tj, "%.3f", v);
}

void trace_json__arg_str(struct trace_json *tj, const char *key, const char *v)
{
	if (tj->tee)
		trace_json__arg_str(tj->tee, key, v);
	if (tj->pf) {
		trace_pf__arg_str(tj->pf, key, v);
		return;
	}
	arg_key(tj, key);
	put_str(tj, v);
}

void trace_json__arg_bool(struct trace_json *tj, const char *key, bool v)
{
	if (tj->tee)
		trace_json__arg_bool(tj->tee, key, v);
	if (tj->pf) {
		trace_pf__arg_bool(tj->pf, key, v);
		return;
	}
	arg_key(tj, key);
	puts_(tj, v ? "true" : "false");
}

void trace_json__arg_hex(struct trace_json *tj, const char *key, uint64_t v)
{
	static const char digits[] = "0123456789abcdef";
	char buf[24], *end = buf + sizeof(buf), *p = end;

	if (tj->tee)
		trace_json__arg_hex(tj->tee, key, v);
	if (tj->pf) {
		trace_pf__arg_ptr(tj->pf, key, v);
		return;
	}
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
	if (tj->tee)
		trace_json__arg_dim3(tj->tee, key, x, y, z);
	if (tj->pf) {
		trace_pf__arg_dim3(tj->pf, key, x, y, z);
		return;
	}
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
	if (tj->tee)
		trace_json__field_raw(tj->tee, key, json);
	if (tj->pf) {
		trace_pf__field_raw(tj->pf, key, json);
		return;
	}
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
	if (tj->tee)
		trace_json__event_end(tj->tee);
	if (tj->pf) {
		trace_pf__event_end(tj->pf);
		return;
	}
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
	struct trace_json *tee = tj->tee;

	tj->tee = NULL;		/* the public caller fed the tee already */
	trace_json__event(tj, "M", NULL, what, pid, tid, 0, 0);
	if (is_int)
		trace_json__arg_i64(tj, key, ival);
	else
		trace_json__arg_str(tj, key, sval);
	trace_json__event_end(tj);
	tj->tee = tee;
}

void trace_json__process_name(struct trace_json *tj, int pid, const char *name)
{
	if (tj->tee)
		trace_json__process_name(tj->tee, pid, name);
	if (tj->pf) {
		trace_pf__meta(tj->pf, PF_META_PROCESS_NAME, pid, 0, name, 0);
		return;
	}
	meta(tj, "process_name", pid, 0, "name", name, 0, false);
}

void trace_json__process_label(struct trace_json *tj, int pid, const char *label)
{
	if (tj->tee)
		trace_json__process_label(tj->tee, pid, label);
	if (tj->pf) {
		trace_pf__meta(tj->pf, PF_META_PROCESS_LABEL, pid, 0, label, 0);
		return;
	}
	meta(tj, "process_labels", pid, 0, "labels", label, 0, false);
}

void trace_json__process_sort(struct trace_json *tj, int pid, int64_t index)
{
	if (tj->tee)
		trace_json__process_sort(tj->tee, pid, index);
	if (tj->pf) {
		trace_pf__meta(tj->pf, PF_META_PROCESS_SORT, pid, 0, NULL, index);
		return;
	}
	meta(tj, "process_sort_index", pid, 0, "sort_index", NULL, index, true);
}

void trace_json__thread_name(struct trace_json *tj, int pid, int tid, const char *name)
{
	if (tj->tee)
		trace_json__thread_name(tj->tee, pid, tid, name);
	if (tj->pf) {
		trace_pf__meta(tj->pf, PF_META_THREAD_NAME, pid, tid, name, 0);
		return;
	}
	meta(tj, "thread_name", pid, tid, "name", name, 0, false);
}

void trace_json__thread_sort(struct trace_json *tj, int pid, int tid, int64_t index)
{
	if (tj->tee)
		trace_json__thread_sort(tj->tee, pid, tid, index);
	if (tj->pf) {
		trace_pf__meta(tj->pf, PF_META_THREAD_SORT, pid, tid, NULL, index);
		return;
	}
	meta(tj, "thread_sort_index", pid, tid, "sort_index", NULL, index, true);
}

void trace_json__end_events(struct trace_json *tj)
{
	if (tj->tee)
		trace_json__end_events(tj->tee);
	if (tj->pf) {
		(void)0;
		return;
	}
	if (tj->events_ended)
		return;
	puts_(tj, "\n  ]");
	tj->events_ended = true;
}

void trace_json__top_raw(struct trace_json *tj, const char *key, const char *json)
{
	if (tj->tee)
		trace_json__top_raw(tj->tee, key, json);
	if (tj->pf) {
		(void)0	/* JSON document members: no Perfetto equivalent */;
		return;
	}
	trace_json__end_events(tj);
	puts_(tj, ",\n  ");
	put_str(tj, key);
	puts_(tj, ": ");
	puts_(tj, json);
}

int trace_json__error(const struct trace_json *tj)
{
	return tj->err ?: tj->tee ? trace_json__error(tj->tee) : 0;
}

void trace_json__put_bytes(struct trace_json *tj, const void *p, size_t n)
{
	put(tj, p, n);
}


int trace_json__close(struct trace_json *tj)
{
	int err;

	if (!tj)
		return 0;
	if (tj->tee) {
		int terr = trace_json__close(tj->tee);

		tj->tee = NULL;
		tj->err = tj->err ?: terr;
	}
	if (tj->pf) {
		trace_pf__finish(tj->pf);
		trace_pf__free(tj->pf);
		tj->pf = NULL;
	} else {
		trace_json__end_events(tj);
		puts_(tj, "\n}\n");
	}
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
	trace_json__free(tj->tee);
	trace_pf__free(tj->pf);
	if (tj->gz)
		gzclose(tj->gz);
	if (tj->file)
		fclose(tj->file);
	free(tj->buf);
	free(tj);
}
