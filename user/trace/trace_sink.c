// SPDX-License-Identifier: MIT
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include "trace_sink.h"

#define BUF_SIZE TRACE_SINK_CHUNK
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

struct trace_sink {
	FILE *file;
	struct gz *gz;		/* gzip output, or */
	char *buf;		/* the plain output's one chunk */
	int err;		/* first error, sticky */
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
static void gz_write_done(struct trace_sink *s, bool wait)
{
	struct gz *gz = s->gz;

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
		if (j->err && !s->err)
			s->err = j->err;
		if (!s->err && fwrite(j->out, 1, j->out_len, s->file) != j->out_len)
			s->err = errno ? -errno : -EIO;
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
static void gz_submit(struct trace_sink *s, size_t len, bool last)
{
	struct gz *gz = s->gz;
	struct gz_job *j = &gz->jobs[gz->tail % gz->nslots];

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
	gz_write_done(s, false);
	if (gz->tail - gz->head == gz->nslots)
		gz_write_done(s, true);	/* all slots in flight: wait for the oldest */
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
static int gz_finish(struct trace_sink *s, size_t len)
{
	struct gz *gz = s->gz;
	unsigned char trailer[8];

	gz_submit(s, len, true);
	while (gz->head != gz->tail)
		gz_write_done(s, true);
	put_le32(trailer, gz->crc);
	put_le32(trailer + 4, (uint32_t)gz->total);
	if (!s->err && fwrite(trailer, 1, sizeof(trailer), s->file) != sizeof(trailer))
		s->err = errno ? -errno : -EIO;
	return s->err;
}



struct trace_sink *trace_sink__open(const char *path)
{
	/* gzip header: no name, no mtime, "fastest" (level 1), Unix (RFC 1952) */
	static const unsigned char gz_header[10] = { 0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 3 };
	struct trace_sink *s = calloc(1, sizeof(*s));
	size_t plen = strlen(path);
	int saved;

	if (!s)
		return NULL;
	s->file = fopen(path, "w");
	if (!s->file)
		goto err;
	if (plen > 3 && !strcmp(path + plen - 3, ".gz")) {
		s->gz = gz_new();
		if (!s->gz)
			goto err;
		if (fwrite(gz_header, 1, sizeof(gz_header), s->file) != sizeof(gz_header))
			goto err;
	} else {
		s->buf = malloc(BUF_SIZE);
		if (!s->buf)
			goto err;
	}
	return s;
err:
	saved = errno;
	trace_sink__free(s);
	errno = saved;
	return NULL;
}

char *trace_sink__chunk(struct trace_sink *s)
{
	return s->gz ? s->gz->jobs[s->gz->tail % s->gz->nslots].in : s->buf;
}

void trace_sink__submit(struct trace_sink *s, size_t len)
{
	if (!len || s->err)
		return;
	if (s->gz)
		gz_submit(s, len, false);
	else if (fwrite(s->buf, 1, len, s->file) != len)
		s->err = errno ? -errno : -EIO;
}

int trace_sink__error(const struct trace_sink *s)
{
	return s->err;
}

void trace_sink__set_error(struct trace_sink *s, int err)
{
	if (!s->err)
		s->err = err;
}

int trace_sink__close(struct trace_sink *s, size_t len)
{
	int err;

	if (!s)
		return 0;
	if (s->gz) {
		gz_finish(s, s->err ? 0 : len);
		gz_free(s->gz);
		s->gz = NULL;
	} else {
		trace_sink__submit(s, len);
	}
	if (fflush(s->file) && !s->err)
		s->err = -errno;
	if (fsync(fileno(s->file)) && !s->err && errno != EINVAL && errno != EROFS)
		s->err = -errno;
	if (fclose(s->file) && !s->err)
		s->err = -errno;
	err = s->err;
	free(s->buf);
	free(s);
	return err;
}

void trace_sink__free(struct trace_sink *s)
{
	if (!s)
		return;
	gz_free(s->gz);		/* the trace is abandoned: unfinished, unreadable */
	free(s->buf);
	if (s->file)
		fclose(s->file);
	free(s);
}

void trace_buf__put_slow(struct trace_buf *b, const void *p, size_t n)
{
	const char *s = p;

	/* through the chunk in pieces: with gzip the chunk changes at every hand-over */
	while (n) {
		size_t k = BUF_SIZE - b->len;

		if (!k) {
			trace_buf__flush(b);
			continue;
		}
		if (k > n)
			k = n;
		memcpy(b->buf + b->len, s, k);
		b->len += k;
		s += k;
		n -= k;
	}
}
