// SPDX-License-Identifier: MIT
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include "trace_json.h"
#include "trace_pftrace.h"

/* 1 MiB chunks of JSON (event_end hands the buffer over once half full): large enough that
 * each chunk's 32 KiB dictionary costs little, small enough to keep several in flight */
#define BUF_SIZE (2 * 1024 * 1024)
#define GZ_DICT (32 * 1024)
#define GZ_MAX_WORKERS 4

/*
 * .gz output: one standard gzip member, compressed in parallel the way pigz does it. Each
 * chunk the writer fills is a job: a worker deflates it as raw deflate primed with the 32 KiB
 * before it (so it compresses as well as one serial stream), ending on a byte boundary
 * (Z_SYNC_FLUSH), and computes its CRC; the writer writes the finished jobs in order and
 * combines the CRCs (crc32_combine). zlib level 1 ran at ~500 ns per event on one core, as
 * much as everything else together: it was the pipeline's cost.
 */
struct gz_job {
	char *in;		/* BUF_SIZE: the writer fills it */
	size_t len;
	unsigned char *out;
	size_t out_cap, out_len;
	unsigned char dict[GZ_DICT];
	size_t dict_len;
	uLong crc;
	bool last;
	int err;
	enum { JOB_FREE, JOB_QUEUED, JOB_BUSY, JOB_DONE } state;
};

struct gz {
	pthread_mutex_t lock;
	pthread_cond_t work, done;
	struct gz_job *jobs;	/* nslots, used round robin in submission order */
	unsigned nslots;
	unsigned long head;	/* oldest job not yet written */
	unsigned long next;	/* next queued job for a worker */
	unsigned long tail;	/* next job the writer fills */
	pthread_t workers[GZ_MAX_WORKERS];
	int nworkers;		/* started so far; 0: compress in the writer's thread */
	int want_workers;
	bool stop;
	z_stream inline_z;	/* the writer's own, when there are no workers */
	bool inline_z_ok;
	unsigned char dict[GZ_DICT];	/* the stream's last 32 KiB so far */
	size_t dict_len;
	uLong crc;
	uint64_t total;
};

struct trace_json {
	FILE *file;		/* plain output */
	struct gz *gz;		/* or gzip output */
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

static int gz_deflate(z_stream *z, struct gz_job *j)
{
	int flush = j->last ? Z_FINISH : Z_SYNC_FLUSH;

	if (deflateReset(z) != Z_OK)
		return -EIO;
	if (j->dict_len && deflateSetDictionary(z, j->dict, j->dict_len) != Z_OK)
		return -EIO;
	j->crc = crc32(0, (const Bytef *)j->in, j->len);
	z->next_in = (Bytef *)j->in;
	z->avail_in = j->len;
	j->out_len = 0;
	for (;;) {
		int rc;

		if (j->out_len == j->out_cap) {
			size_t cap = j->out_cap ? j->out_cap * 2 : deflateBound(z, j->len) + 64;
			unsigned char *o = realloc(j->out, cap);

			if (!o)
				return -ENOMEM;
			j->out = o;
			j->out_cap = cap;
		}
		z->next_out = j->out + j->out_len;
		z->avail_out = j->out_cap - j->out_len;
		rc = deflate(z, flush);
		j->out_len = j->out_cap - z->avail_out;
		if (rc == Z_STREAM_ERROR)
			return -EIO;
		if (flush == Z_FINISH ? rc == Z_STREAM_END : !z->avail_in && z->avail_out)
			return 0;
	}
}

static int gz_z_init(z_stream *z)
{
	memset(z, 0, sizeof(*z));
	/* raw deflate: the gzip header, CRC and size are ours */
	return deflateInit2(z, 1, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) == Z_OK ? 0 : -ENOMEM;
}

static void *gz_worker(void *arg)
{
	struct gz *gz = arg;
	z_stream z;
	int zerr = gz_z_init(&z);

	pthread_mutex_lock(&gz->lock);
	for (;;) {
		struct gz_job *j;

		while (!gz->stop && gz->next == gz->tail)
			pthread_cond_wait(&gz->work, &gz->lock);
		if (gz->next == gz->tail)
			break;	/* stopping, and nothing queued */
		j = &gz->jobs[gz->next++ % gz->nslots];
		j->state = JOB_BUSY;
		pthread_mutex_unlock(&gz->lock);
		j->err = zerr ?: gz_deflate(&z, j);
		pthread_mutex_lock(&gz->lock);
		j->state = JOB_DONE;
		pthread_cond_broadcast(&gz->done);
	}
	pthread_mutex_unlock(&gz->lock);
	if (!zerr)
		deflateEnd(&z);
	return NULL;
}

static void put_le32(unsigned char *p, uint32_t v)
{
	p[0] = v, p[1] = v >> 8, p[2] = v >> 16, p[3] = v >> 24;
}

/* Writes the finished jobs at the head, in order; with wait, at least the oldest one. */
static void gz_write_done(struct trace_json *tj, bool wait)
{
	struct gz *gz = tj->gz;

	pthread_mutex_lock(&gz->lock);
	while (gz->head != gz->tail) {
		struct gz_job *j = &gz->jobs[gz->head % gz->nslots];

		if (j->state != JOB_DONE) {
			if (!wait)
				break;
			pthread_cond_wait(&gz->done, &gz->lock);
			continue;
		}
		pthread_mutex_unlock(&gz->lock);
		if (j->err && !tj->err)
			tj->err = j->err;
		if (!tj->err && fwrite(j->out, 1, j->out_len, tj->file) != j->out_len)
			tj->err = errno ? -errno : -EIO;
		gz->crc = crc32_combine(gz->crc, j->crc, j->len);
		gz->total += j->len;
		pthread_mutex_lock(&gz->lock);
		j->state = JOB_FREE;
		gz->head++;
		wait = false;
	}
	pthread_mutex_unlock(&gz->lock);
}

/* Hands the filled buffer to a worker and gives the writer the next free one. */
static void gz_submit(struct trace_json *tj, bool last)
{
	struct gz *gz = tj->gz;
	struct gz_job *j = &gz->jobs[gz->tail % gz->nslots];
	size_t len = tj->len;

	j->len = len;
	j->last = last;
	memcpy(j->dict, gz->dict, gz->dict_len);
	j->dict_len = gz->dict_len;
	/* the next chunk's dictionary: the stream's last 32 KiB after this one */
	if (len >= GZ_DICT) {
		memcpy(gz->dict, j->in + len - GZ_DICT, GZ_DICT);
		gz->dict_len = GZ_DICT;
	} else if (len) {
		size_t keep = gz->dict_len + len > GZ_DICT ? GZ_DICT - len : gz->dict_len;

		memmove(gz->dict, gz->dict + gz->dict_len - keep, keep);
		memcpy(gz->dict + keep, j->in, len);
		gz->dict_len = keep + len;
	}
	/* workers start with the first chunk, not at open: tptrace may fork before that. They
	 * block every signal, so that SIGINT and friends still reach (and interrupt) the
	 * thread that polls the rings. */
	if (gz->nworkers < gz->want_workers) {
		sigset_t all, old;

		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		while (gz->nworkers < gz->want_workers &&
		       !pthread_create(&gz->workers[gz->nworkers], NULL, gz_worker, gz))
			gz->nworkers++;
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		gz->want_workers = gz->nworkers;	/* could not start more: do with these */
	}
	if (!gz->nworkers) {
		if (!gz->inline_z_ok) {
			j->err = gz_z_init(&gz->inline_z);
			gz->inline_z_ok = !j->err;
		}
		if (gz->inline_z_ok)
			j->err = gz_deflate(&gz->inline_z, j);
		j->state = JOB_DONE;
		gz->tail++;
	} else {
		pthread_mutex_lock(&gz->lock);
		j->state = JOB_QUEUED;
		gz->tail++;
		pthread_cond_signal(&gz->work);
		pthread_mutex_unlock(&gz->lock);
	}
	gz_write_done(tj, false);
	if (gz->tail - gz->head == gz->nslots)
		gz_write_done(tj, true);	/* all slots in flight: wait for the oldest */
	tj->buf = gz->jobs[gz->tail % gz->nslots].in;
	tj->len = 0;
}

static void gz_free(struct gz *gz)
{
	if (!gz)
		return;
	pthread_mutex_lock(&gz->lock);
	gz->stop = true;
	pthread_cond_broadcast(&gz->work);
	pthread_mutex_unlock(&gz->lock);
	for (int i = 0; i < gz->nworkers; i++)
		pthread_join(gz->workers[i], NULL);
	if (gz->inline_z_ok)
		deflateEnd(&gz->inline_z);
	for (unsigned i = 0; i < gz->nslots; i++) {
		free(gz->jobs[i].in);
		free(gz->jobs[i].out);
	}
	free(gz->jobs);
	pthread_cond_destroy(&gz->work);
	pthread_cond_destroy(&gz->done);
	pthread_mutex_destroy(&gz->lock);
	free(gz);
}

static struct gz *gz_new(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	struct gz *gz = calloc(1, sizeof(*gz));

	if (!gz)
		return NULL;
	pthread_mutex_init(&gz->lock, NULL);
	pthread_cond_init(&gz->work, NULL);
	pthread_cond_init(&gz->done, NULL);
	/* one worker per CPU, up to 4 (~2 GB/s of JSON together, past what one reader makes) */
	gz->want_workers = cpus < 1 ? 1 : cpus > GZ_MAX_WORKERS ? GZ_MAX_WORKERS : cpus;
	gz->nslots = 2 * gz->want_workers + 1;
	gz->jobs = calloc(gz->nslots, sizeof(*gz->jobs));
	if (!gz->jobs)
		goto err;
	for (unsigned i = 0; i < gz->nslots; i++)
		if (!(gz->jobs[i].in = malloc(BUF_SIZE)))
			goto err;
	gz->crc = crc32(0, NULL, 0);
	return gz;
err:
	gz_free(gz);
	errno = ENOMEM;
	return NULL;
}

/* The gzip trailer once every job is written: CRC-32 and size mod 2^32 (RFC 1952). */
static int gz_finish(struct trace_json *tj)
{
	struct gz *gz = tj->gz;
	unsigned char trailer[8];

	gz_submit(tj, true);
	while (gz->head != gz->tail)
		gz_write_done(tj, true);
	put_le32(trailer, gz->crc);
	put_le32(trailer + 4, (uint32_t)gz->total);
	if (!tj->err && fwrite(trailer, 1, sizeof(trailer), tj->file) != sizeof(trailer))
		tj->err = errno ? -errno : -EIO;
	return tj->err;
}

static void flush(struct trace_json *tj)
{
	if (!tj->len || tj->err) {
		tj->len = 0;
		return;
	}
	if (tj->gz)
		gz_submit(tj, false);
	else if (fwrite(tj->buf, 1, tj->len, tj->file) != tj->len)
		tj->err = errno ? -errno : -EIO;
	tj->len = 0;
}

static void put_slow(struct trace_json *tj, const char *s, size_t n)
{
	/* through the buffer in pieces: with gzip the buffer is a job that changes per flush */
	while (n) {
		size_t k = BUF_SIZE - tj->len;

		if (!k) {
			flush(tj);
			continue;
		}
		if (k > n)
			k = n;
		memcpy(tj->buf + tj->len, s, k);
		tj->len += k;
		s += k;
		n -= k;
	}
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

/* 1: the byte ends a string or needs escaping (JSON: '"', '\\', and below 0x20) */
static const unsigned char str_stop[256] = {
	[0 ... 0x1f] = 1, ['"'] = 1, ['\\'] = 1,
};

#define STR_FAST_MAX 256

static void put_str(struct trace_json *tj, const char *s)
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
	if (__builtin_expect(tj->len + STR_FAST_MAX + 2 <= BUF_SIZE, 1)) {
		o = tj->buf + tj->len;
		*o++ = '"';
		for (i = 0; i < STR_FAST_MAX && !str_stop[p[i]]; i++)
			o[i] = p[i];
		if (i < STR_FAST_MAX && !p[i]) {
			o[i] = '"';
			tj->len += i + 2;
			return;
		}
	}
	for (; *p; p++)
		if (str_stop[*p]) {
			put_str_escaped(tj, s);
			return;
		}
	i = p - (const unsigned char *)s;
	if (tj->len + i + 2 > BUF_SIZE) {
		put_str_escaped(tj, s);
		return;
	}
	tj->buf[tj->len] = '"';
	memcpy(tj->buf + tj->len + 1, s, i);
	tj->buf[tj->len + 1 + i] = '"';
	tj->len += i + 2;
}

struct trace_json *trace_json__open(const char *path)
{
	/* gzip header: no name, no mtime, "fastest" (level 1), Unix (RFC 1952) */
	static const unsigned char gz_header[10] = { 0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 3 };
	struct trace_json *tj = calloc(1, sizeof(*tj));
	size_t plen = strlen(path);

	if (!tj)
		return NULL;
	tj->file = fopen(path, "w");
	if (!tj->file)
		goto err;
	if (plen > 3 && !strcmp(path + plen - 3, ".gz")) {
		tj->gz = gz_new();
		if (!tj->gz)
			goto err;
		if (fwrite(gz_header, 1, sizeof(gz_header), tj->file) != sizeof(gz_header))
			goto err;
		tj->buf = tj->gz->jobs[0].in;
	} else {
		tj->buf = malloc(BUF_SIZE);
		if (!tj->buf)
			goto err;
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
		if (tj->file)
			fclose(tj->file);
		if (!tj->gz)
			free(tj->buf);
		gz_free(tj->gz);
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

void trace_json__arg_raw(struct trace_json *tj, const char *key, const char *json)
{
	if (tj->tee)
		trace_json__arg_raw(tj->tee, key, json);
	if (tj->pf) {
		/* Perfetto's annotations have no JSON value of their own: the text */
		trace_pf__arg_str(tj->pf, key, json);
		return;
	}
	arg_key(tj, key);
	puts_(tj, json);
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
	if (tj->gz) {
		gz_finish(tj);
		gz_free(tj->gz);
		tj->gz = NULL;
		tj->buf = NULL;
	} else {
		flush(tj);
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
		gz_free(tj->gz);	/* the trace is abandoned: unfinished, unreadable */
	else
		free(tj->buf);
	if (tj->file)
		fclose(tj->file);
	free(tj);
}
