/* SPDX-License-Identifier: MIT */
/* The trace file's bytes: a plain file, or one gzip member (".gz" suffix) compressed in
 * parallel by a pool of threads the way pigz does it. Trace writer backends fill the sink's
 * chunk buffer themselves (struct trace_buf below: a few stores per piece, no call) and hand
 * each filled chunk over; the sink writes, or compresses and writes, chunks in order. Write
 * errors are sticky and come back from trace_sink__error() and trace_sink__close(). */
#ifndef TPTRACE_TRACE_SINK_H
#define TPTRACE_TRACE_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* Bytes per chunk; a backend hands a chunk over once it is half full at a record boundary
 * (trace_buf__boundary), so a chunk's 32 KiB dictionary costs little and several are in
 * flight. */
#define TRACE_SINK_CHUNK (2 * 1024 * 1024)

struct trace_sink;

/* Creates/truncates path; ".gz": gzip. NULL and errno. */
struct trace_sink *trace_sink__open(const char *path);
/* The buffer to fill next (TRACE_SINK_CHUNK bytes); it changes at every submit. */
char *trace_sink__chunk(struct trace_sink *s);
/* Hands over the first len bytes of the current chunk (nothing once an error was seen: the
 * producer starts the same chunk again). */
void trace_sink__submit(struct trace_sink *s, size_t len);
/* First write error (negative errno), 0 if none. */
int trace_sink__error(const struct trace_sink *s);
/* Records an error of the producer (e.g. -ENOMEM), kept if it is the first. */
void trace_sink__set_error(struct trace_sink *s, int err);
/* Writes the current chunk's first len bytes as the last, finishes the file (gzip trailer,
 * fsync) and closes it: 0 or the first error. Frees s. */
int trace_sink__close(struct trace_sink *s, size_t len);
/* Abandons the file unfinished. NULL is fine. */
void trace_sink__free(struct trace_sink *s);

/* A backend's write position in the sink's current chunk. */
struct trace_buf {
	struct trace_sink *sink;
	char *buf;
	size_t len;
};

static inline void trace_buf__init(struct trace_buf *b, struct trace_sink *s)
{
	b->sink = s;
	b->buf = trace_sink__chunk(s);
	b->len = 0;
}

/* Hands the chunk over (even partly filled). */
static inline void trace_buf__flush(struct trace_buf *b)
{
	if (b->len && !trace_sink__error(b->sink))
		trace_sink__submit(b->sink, b->len);
	b->buf = trace_sink__chunk(b->sink);
	b->len = 0;
}

void trace_buf__put_slow(struct trace_buf *b, const void *p, size_t n);

/* Finishes the file with what is in the buffer: trace_sink__close()'s result. */
static inline int trace_buf__close(struct trace_buf *b)
{
	int err = trace_sink__close(b->sink, b->len);

	b->sink = NULL;
	b->buf = NULL;
	b->len = 0;
	return err;
}

/* Inline, so that the many short constant pieces become a few stores each, not a call to
 * memcpy: per event, these calls were a third of the JSON writer's time. */
static inline void trace_buf__put(struct trace_buf *b, const void *p, size_t n)
{
	if (__builtin_expect(b->len + n > TRACE_SINK_CHUNK, 0)) {
		trace_buf__put_slow(b, p, n);
		return;
	}
	memcpy(b->buf + b->len, p, n);
	b->len += n;
}

/* Room for n bytes written directly at b->buf + b->len (n <= TRACE_SINK_CHUNK). */
static inline char *trace_buf__room(struct trace_buf *b, size_t n)
{
	if (__builtin_expect(b->len + n > TRACE_SINK_CHUNK, 0))
		trace_buf__flush(b);
	return b->buf + b->len;
}

/* The end of a record: hands the chunk over once it is more than half full. */
static inline void trace_buf__boundary(struct trace_buf *b)
{
	if (b->len > TRACE_SINK_CHUNK / 2)
		trace_buf__flush(b);
}

#endif
