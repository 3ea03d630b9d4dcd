// SPDX-License-Identifier: MIT
/* report_read: one tptrace trace (.json or .json.gz) into struct rinput, streamed.
 *
 * A 1 M-event trace is ~250 MB of JSON: it is never held whole, nor turned into a cJSON tree.
 * zlib's gzread (which passes plain files through unchanged) fills a buffer; the top-level
 * object is walked key by key, "traceEvents" element by element: each element's extent is
 * found (refilling the buffer when the element runs past its end), then a small pull parser
 * reads the fields the analysis needs into a struct rev and the bytes are dropped. Only the
 * small top-level values (the "tptrace" metadata, "distributedInfo") go through cJSON.
 *
 *   {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":27228,"tid":27233,
 *    "ts":37012.658,"dur":33.06,"args":{"kernel":"fake_gemm",...,"stream":"0x7f6...",
 *    "correlation":124}}
 *
 * The input is untrusted: every scan is bounded by the buffer, nesting by JL_MAX_DEPTH,
 * strings by their buffer (the lexer is tptrace-fr's, user/base/jsonlex.h); the first error
 * ends the read with one line naming the byte offset.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "growbuf.h"
#include "jsonlex.h"
#include "report.h"

#define CHUNK (1 << 20)
#define MAX_ELEMENT (64 << 20)	/* one event or top-level value; beyond: not a trace */

/* --- string interning ------------------------------------------------------------------ */

static uint32_t hash_str(const char *s, size_t len)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h;
}

static int rstrings_grow(struct rstrings *s)
{
	uint32_t cap = s->slot_cap ? s->slot_cap * 2 : 1024;
	uint32_t *slots = calloc(cap, sizeof(*slots));

	if (!slots)
		return -1;
	for (uint32_t i = 0; i < s->nr; i++) {
		uint32_t h = hash_str(s->str[i], strlen(s->str[i])) & (cap - 1);

		while (slots[h])
			h = (h + 1) & (cap - 1);
		slots[h] = i + 1;
	}
	free(s->slots);
	s->slots = slots;
	s->slot_cap = cap;
	return 0;
}

/* Index of str (len bytes, no NUL needed); id 0 is always "" so 0 can mean "none". On ENOMEM
 * returns 0 (the name is lost, never another's). */
uint32_t rstrings__intern(struct rstrings *s, const char *str, size_t len)
{
	uint32_t h;

	if ((s->nr + 1) * 2 > s->slot_cap && rstrings_grow(s))
		return 0;
	if (!s->nr && len) {
		if (rstrings__intern(s, "", 0))
			return 0;
	}
	h = hash_str(str, len) & (s->slot_cap - 1);
	while (s->slots[h]) {
		const char *c = s->str[s->slots[h] - 1];

		if (!strncmp(c, str, len) && c[len] == 0)
			return s->slots[h] - 1;
		h = (h + 1) & (s->slot_cap - 1);
	}
	if (ARRAY_RESERVE(s->str, s->cap, s->nr + 1, 1024))
		return 0;
	s->str[s->nr] = strndup(str, len);
	if (!s->str[s->nr])
		return 0;
	s->slots[h] = ++s->nr;
	return s->nr - 1;
}

/* --- the buffered input ------------------------------------------------------------------ */

struct rd {
	gzFile gz;
	const char *path;
	char *buf;
	size_t len, cap, p;	/* valid bytes [0, len); cursor p */
	size_t consumed;	/* bytes dropped before buf[0]: for error offsets */
	bool eof;
	char *err;
	size_t errsz;
};

static int rd_fail(struct rd *r, const char *what)
{
	if (!r->err[0])
		snprintf(r->err, r->errsz, "%s at byte %zu", what, r->consumed + r->p);
	return -1;
}

/* zlib's message without the "path: " it puts first */
static const char *zmsg(struct rd *r, int *zerr)
{
	const char *m = gzerror(r->gz, zerr);
	size_t n = strlen(r->path);

	if (!m || !*m)
		return "unexpected end of file";
	if (!strncmp(m, r->path, n) && !strncmp(m + n, ": ", 2))
		m += n + 2;
	return m;
}

/* Drops what is before p, reads more. 1 read something, 0 at the end, -1 error (err set). */
static int rd_more(struct rd *r)
{
	int n, zerr;

	if (r->eof)
		return 0;
	if (r->p) {
		memmove(r->buf, r->buf + r->p, r->len - r->p);
		r->consumed += r->p;
		r->len -= r->p;
		r->p = 0;
	}
	if (r->cap - r->len < CHUNK / 2) {
		size_t cap = r->cap ? r->cap * 2 : CHUNK;
		char *b;

		if (cap > MAX_ELEMENT + CHUNK) {
			snprintf(r->err, r->errsz, "one JSON value over %d MiB at byte %zu: not a "
				 "tptrace trace", MAX_ELEMENT >> 20, r->consumed);
			return -1;
		}
		b = realloc(r->buf, cap);
		if (!b) {
			snprintf(r->err, r->errsz, "out of memory");
			return -1;
		}
		r->buf = b;
		r->cap = cap;
	}
	n = gzread(r->gz, r->buf + r->len, (unsigned)(r->cap - r->len));
	if (n < 0) {
		const char *m = zmsg(r, &zerr);

		if (zerr == Z_ERRNO)
			snprintf(r->err, r->errsz, "read error after %zu bytes: %s",
				 r->consumed + r->len, strerror(errno));
		else
			snprintf(r->err, r->errsz, "damaged compressed input after %zu bytes (%s)",
				 r->consumed + r->len, m);
		return -1;
	}
	if (n == 0) {
		/* gzread returns 0 and sets Z_BUF_ERROR when the gzip stream ends early */
		const char *m = zmsg(r, &zerr);

		if (zerr == Z_BUF_ERROR || (zerr != Z_OK && zerr != Z_STREAM_END)) {
			snprintf(r->err, r->errsz, "truncated compressed input after %zu bytes (%s)",
				 r->consumed + r->len, m);
			return -1;
		}
		r->eof = true;
		return 0;
	}
	r->len += n;
	return 1;
}

static inline bool is_ws(char c)
{
	return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* Skips whitespace; the next byte, or -1 at the end, -2 on a read error. */
static int rd_peek(struct rd *r)
{
	for (;;) {
		while (r->p < r->len && is_ws(r->buf[r->p]))
			r->p++;
		if (r->p < r->len)
			return (unsigned char)r->buf[r->p];
		int m = rd_more(r);

		if (m < 0)
			return -2;
		if (m == 0)
			return -1;
	}
}

/* The whole value at the cursor, in the buffer: [*s, *s + *n). 0 or -1. */
static int rd_value(struct rd *r, const char **s, size_t *n)
{
	for (;;) {
		int c = rd_peek(r);
		long e;

		if (c == -2)
			return -1;
		if (c == -1)
			return rd_fail(r, "unexpected end of input");
		e = jl_extent(r->buf + r->p, r->len - r->p, r->eof);
		if (e < 0)
			return rd_fail(r, "malformed JSON");
		if (e > 0) {
			*s = r->buf + r->p;
			*n = (size_t)e;
			r->p += e;
			return 0;
		}
		c = rd_more(r);
		if (c < 0)
			return -1;
		if (c == 0)
			return rd_fail(r, "unexpected end of input");
	}
}

static int rd_expect(struct rd *r, char want, const char *what)
{
	int c = rd_peek(r);

	if (c == -2)
		return -1;
	if (c != want)
		return rd_fail(r, c == -1 ? "unexpected end of input" : what);
	r->p++;
	return 0;
}

/* --- one event ----------------------------------------------------------------------------
 * Pulled from a complete value in memory with the lexer (jsonlex.h); its error line is not
 * used: the caller reports "malformed event" at the event's offset. */

/* A string field (cap, NUL-terminated, truncated); another type is skipped. 0, -1 malformed. */
static int jstr_field(struct jlex *j, char *out, size_t cap)
{
	jl_ws(j);
	if (j->p < j->end && *j->p == '"')
		return jl_str(j, out, cap) < 0 ? -1 : 0;
	return jl_skip(j, 0) ? 0 : -1;
}

/* A number: *d as double, *u as unsigned when it is a plain non-negative integer. 1 read,
 * 0 not a number (skipped), -1 malformed. */
static int jnum(struct jlex *j, double *d, uint64_t *u, bool *is_int)
{
	char tmp[40];
	const char *s = NULL;
	size_t n = 0;

	jl_ws(j);
	if (j->p < j->end && *j->p != '-' && (*j->p < '0' || *j->p > '9'))
		return jl_skip(j, 0) ? 0 : -1;
	if (!jl_number(j, &s, &n))
		return -1;
	if (n >= sizeof(tmp))
		n = sizeof(tmp) - 1;
	memcpy(tmp, s, n);
	tmp[n] = 0;
	*d = strtod(tmp, NULL);
	*is_int = !strpbrk(tmp, ".eE-");
	*u = *is_int ? strtoull(tmp, NULL, 10) : (*d > 0 ? (uint64_t)*d : 0);
	return 1;
}

struct ev_fields {
	char ph[4], cat[24], name[1024], kind[16], stack[256], label[64];
	double ts, dur;
	uint64_t pid, tid, stream, corr, bytes, size, device;
	long long rc;
	bool has_ts, has_dur, has_pid, has_rc, has_device, has_bytes, unfinished;
};

#define KEY(s) (klen == (int)sizeof(s) - 1 && !memcmp(key, s, sizeof(s) - 1))

static int jargs(struct jlex *j, struct ev_fields *f)
{
	char key[64];
	int klen;

	jl_ws(j);
	if (j->p >= j->end || *j->p != '{')
		return jl_skip(j, 0) ? 0 : -1;
	for (bool first = true; jl_next_key(j, &first, key, sizeof(key), &klen);) {
		double d;
		uint64_t u;
		bool is_int;

		if (KEY("stream") || KEY("correlation") || KEY("bytes") || KEY("rc") ||
		    KEY("size") || KEY("device") || KEY("Device Id")) {
			jl_ws(j);
			if (j->p < j->end && (*j->p == '-' || (*j->p >= '0' && *j->p <= '9'))) {
				if (jnum(j, &d, &u, &is_int) < 0)
					return -1;
				if (key[0] == 's' && key[1] == 't')
					f->stream = u;
				else if (key[0] == 'c')
					f->corr = u;
				else if (key[0] == 'b')
					f->bytes = u, f->has_bytes = true;
				else if (key[0] == 'r')
					f->rc = (long long)d, f->has_rc = true;
				else if (key[0] == 's')
					f->size = u;
				else
					f->device = u, f->has_device = true;
			} else if (key[0] == 's' && key[1] == 't' && j->p < j->end && *j->p == '"') {
				/* a host call's cudaStream_t, written as a handle: "0x5100" */
				char hex[24];

				if (jl_str(j, hex, sizeof(hex)) < 0)
					return -1;
				f->stream = strtoull(hex, NULL, 16);
			} else if (!jl_skip(j, 0)) {
				return -1;
			}
		} else if (KEY("kind") || KEY("stack") || KEY("labels") || KEY("name")) {
			char *out = key[0] == 'k' ? f->kind : key[0] == 's' ? f->stack : f->label;
			size_t cap = key[0] == 'k' ? sizeof(f->kind) :
				     key[0] == 's' ? sizeof(f->stack) : sizeof(f->label);

			if (jstr_field(j, out, cap))
				return -1;
		} else if (KEY("unfinished")) {
			jl_ws(j);
			f->unfinished = j->end - j->p >= 4 && !memcmp(j->p, "true", 4);
			if (!jl_skip(j, 0))
				return -1;
		} else if (!jl_skip(j, 0)) {
			return -1;
		}
	}
	return j->failed ? -1 : 0;
}

static int parse_event(const char *s, size_t n, struct ev_fields *f)
{
	struct jlex j;
	char key[16], err[80];
	int klen;

	memset(f, 0, offsetof(struct ev_fields, ts));
	f->has_ts = f->has_dur = f->has_pid = f->has_rc = f->has_device = f->has_bytes = false;
	f->unfinished = false;
	f->stream = f->corr = f->bytes = f->size = f->device = 0;
	jl_init(&j, s, n, err, sizeof(err));
	for (bool first = true; jl_next_key(&j, &first, key, sizeof(key), &klen);) {
		double d;
		uint64_t u;
		bool is_int;

		if (KEY("ph") || KEY("cat") || KEY("name")) {
			char *out = key[0] == 'p' ? f->ph : key[0] == 'c' ? f->cat : f->name;
			size_t cap = key[0] == 'p' ? sizeof(f->ph) :
				     key[0] == 'c' ? sizeof(f->cat) : sizeof(f->name);

			if (jstr_field(&j, out, cap))
				return -1;
		} else if (KEY("ts") || KEY("dur") || KEY("pid") || KEY("tid")) {
			int r = jnum(&j, &d, &u, &is_int);

			if (r < 0)
				return -1;
			if (r && key[0] == 'd')
				f->dur = d, f->has_dur = true;
			else if (r && key[1] == 's')
				f->ts = d, f->has_ts = true;
			else if (r && key[0] == 'p')
				f->pid = u, f->has_pid = true;
			else if (r)
				f->tid = u;
		} else if (KEY("args")) {
			if (jargs(&j, f))
				return -1;
		} else if (!jl_skip(&j, 0)) {
			return -1;
		}
	}
	return j.failed ? -1 : 0;
}

/* --- classification ------------------------------------------------------------------------ */

static bool starts(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

static int api_kind(const char *name, uint8_t *flags)
{
	if (strstr(name, "LaunchKernel") || strstr(name, "LaunchCooperativeKernel") ||
	    strstr(name, "GraphLaunch"))
		return RK_LAUNCH;
	if (!strcmp(name, "cudaStreamSynchronize") || !strcmp(name, "cudaDeviceSynchronize") ||
	    !strcmp(name, "cudaEventSynchronize") || !strcmp(name, "cuStreamSynchronize") ||
	    !strcmp(name, "cuCtxSynchronize") || !strcmp(name, "cuEventSynchronize"))
		return RK_SYNC;
	if (starts(name, "cudaMemcpy") || starts(name, "cuMemcpy")) {
		if (strstr(name, "Async"))
			*flags |= RF_ASYNC;
		return RK_COPY;
	}
	if (starts(name, "cudaMemset") || starts(name, "cuMemset")) {
		if (strstr(name, "Async"))
			*flags |= RF_ASYNC;
		return RK_MEMSET;
	}
	return RK_API;
}

static bool nccl_is_collective(const char *name)
{
	static const char *const ops[] = { "AllReduce", "AllGather", "ReduceScatter", "Broadcast",
					   "Bcast", "Reduce", "Send", "Recv", "AllToAll",
					   "AlltoAll", "Gather", "Scatter" };

	if (!starts(name, "nccl"))
		return false;
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		if (!strcmp(name + 4, ops[i]))
			return true;
	return false;
}

static uint8_t dir_of(const char *kind)
{
	if (!strcmp(kind, "HtoD"))
		return RD_HTOD;
	if (!strcmp(kind, "DtoH"))
		return RD_DTOH;
	if (!strcmp(kind, "DtoD"))
		return RD_DTOD;
	return kind[0] ? RD_OTHER : RD_NONE;
}

/* "file.py:42 fn < caller.py:7 main | native" -> "file.py:42 fn"; markers ("<no Python ...>",
 * "<lost: ...>") are no place in the code. */
static uint32_t where_of(struct rstrings *strs, const char *stack)
{
	const char *e;

	if (!stack[0] || stack[0] == '<' || stack[0] == '|')
		return 0;
	e = strstr(stack, " < ");
	if (!e)
		e = strstr(stack, " | ");
	if (!e)
		e = stack + strlen(stack);
	return rstrings__intern(strs, stack, e - stack);
}

static struct rproc *proc_get(struct rinput *in, uint32_t pid)
{
	struct rproc *p;

	for (size_t i = 0; i < in->nr_procs; i++)
		if (in->procs[i].pid == pid)
			return &in->procs[i];
	p = realloc(in->procs, (in->nr_procs + 1) * sizeof(*p));
	if (!p)
		return NULL;
	in->procs = p;
	p = &in->procs[in->nr_procs++];
	memset(p, 0, sizeof(*p));
	p->pid = pid;
	p->rank = -1;
	return p;
}

static int64_t us_to_ns(double us)
{
	return (int64_t)llround(us * 1000.0);
}

/* Metadata events: host process names and "rank N" labels. GPU tracks are named "GPU N..."
 * and are not host processes; tptrace labels each with its host process ("pid P comm,
 * context C"). */
static void take_metadata(struct rinput *in, const struct ev_fields *f)
{
	struct rproc *p;
	unsigned int host;
	int rank;

	if (!strcmp(f->name, "process_labels") && sscanf(f->label, "pid %u", &host) == 1 &&
	    f->has_pid) {
		u64map__set(&in->gpu_host, f->pid + 1, host);
	} else if (!strcmp(f->name, "process_labels") && sscanf(f->label, "rank %d", &rank) == 1) {
		p = proc_get(in, (uint32_t)f->pid);
		if (p)
			p->rank = rank;
	} else if (!strcmp(f->name, "process_name") && f->label[0] &&
		   strncmp(f->label, "GPU ", 4)) {
		p = proc_get(in, (uint32_t)f->pid);
		if (p)
			snprintf(p->name, sizeof(p->name), "%s", f->label);
	}
}

static int take_event(struct rinput *in, struct rstrings *strs, const struct ev_fields *f)
{
	struct rev *e;
	uint8_t flags = 0;
	int kind;
	int dev = -1;

	if (f->ph[0] == 'M' && !f->ph[1]) {
		take_metadata(in, f);
		return 0;
	}
	if (!f->has_ts || !f->has_pid)
		return 0;
	if (!strcmp(f->cat, "cuda_runtime") || !strcmp(f->cat, "cuda_driver")) {
		if (f->ph[0] != 'X')
			return 0;
		kind = api_kind(f->name, &flags);
		if (f->unfinished)
			flags |= RF_UNFINISHED;
		else if (f->has_dur && f->dur > 0)
			flags |= RF_HAS_DUR;
	} else if (!strcmp(f->cat, "nccl")) {
		if (f->ph[0] != 'X')
			return 0;
		kind = nccl_is_collective(f->name) ? RK_NCCL : RK_NCCL_OTHER;
		flags |= f->unfinished ? RF_UNFINISHED : RF_HAS_DUR;
	} else if (!strcmp(f->cat, "python_function")) {
		kind = RK_PYFUNC;
	} else if (!strcmp(f->cat, "cpu_op") || !strcmp(f->cat, "user_annotation")) {
		if (f->ph[0] != 'X')
			return 0;
		kind = f->cat[0] == 'c' ? RK_CPU_OP : RK_USER_ANN;
	} else if (!strcmp(f->cat, "kernel")) {
		kind = RK_KERNEL;
		if (starts(f->name, "nccl"))
			flags |= RF_NCCL_KERNEL;
	} else if (!strcmp(f->cat, "gpu_memcpy")) {
		kind = RK_GPU_COPY;
		if (strstr(f->name, "Pageable"))
			flags |= RF_PAGEABLE;
		else if (strstr(f->name, "Pinned"))
			flags |= RF_PINNED;
	} else if (!strcmp(f->cat, "gpu_memset")) {
		kind = RK_GPU_SET;
	} else if (!strcmp(f->cat, "cuda_sync")) {
		kind = RK_GPU_SYNC;
	} else if (!strcmp(f->cat, "cuda_memory")) {
		int d;

		if (!strcmp(f->name, "OOM")) {
			kind = RK_OOM;
		} else if (f->ph[0] == 'C' && (sscanf(f->name, "bytes allocated (cuda:%d)", &d) == 1 ||
					       sscanf(f->name, "bytes reserved (cuda:%d)", &d) == 1)) {
			kind = RK_MEM_COUNTER;
			dev = d;
			if (starts(f->name, "bytes reserved"))
				flags |= RF_RESERVED;
		} else {
			return 0;
		}
	} else {
		return 0;
	}
	if (ARRAY_RESERVE(in->ev, in->cap, in->nr + 1, 4096))
		return -1;
	e = &in->ev[in->nr++];
	memset(e, 0, sizeof(*e));
	e->ts = (uint64_t)us_to_ns(f->ts);
	/* an unfinished call's slice runs to wherever the trace ended: no end of the call's */
	e->dur = f->has_dur && f->dur > 0 && !f->unfinished ? (uint64_t)us_to_ns(f->dur) : 0;
	e->corr = f->corr;
	e->stream = f->stream;
	e->bytes = kind == RK_OOM ? f->size : f->bytes;
	e->pid = (uint32_t)f->pid;
	e->tid = (uint32_t)f->tid;
	e->name = rstrings__intern(strs, f->name, strlen(f->name));
	e->where = where_of(strs, f->stack);
	e->rc = f->has_rc ? (int32_t)f->rc : INT32_MIN;
	e->kind = (uint8_t)kind;
	e->dir = dir_of(f->kind);
	e->flags = flags;
	if (kind == RK_GPU_COPY) {
		/* the name says it: "Memcpy HtoD (Pinned -> Device)" */
		e->dir = strstr(f->name, "HtoD") ? RD_HTOD : strstr(f->name, "DtoH") ? RD_DTOH :
			 strstr(f->name, "DtoD") ? RD_DTOD : RD_OTHER;
	}
	if (dev < 0 && f->has_device)
		dev = (int)f->device;
	if (dev < 0 && kind >= RK_KERNEL && kind <= RK_GPU_SYNC)
		dev = (int)f->pid;
	e->device = (int8_t)(dev > 127 ? 127 : dev);
	if (((kind < RK_KERNEL && kind != RK_PYFUNC) || kind >= RK_CPU_OP) && !proc_get(in, e->pid))
		return -1;
	return 0;
}

/* --- the top-level object ---------------------------------------------------------------- */

static void take_tptrace(struct rinput *in, const cJSON *t)
{
	const cJSON *v, *tg;

	v = cJSON_GetObjectItemCaseSensitive(t, "base_mono_ns");
	if (cJSON_IsNumber(v)) {
		in->base_mono_ns = (uint64_t)v->valuedouble;
		in->have_base = true;
	}
	v = cJSON_GetObjectItemCaseSensitive(t, "events_dropped");
	in->events_dropped = cJSON_IsNumber(v) ? (long long)v->valuedouble : -1;
	if (cJSON_GetObjectItemCaseSensitive(t, "python_stacks"))
		in->py_stacks = true;
	cJSON_ArrayForEach(tg, cJSON_GetObjectItemCaseSensitive(t, "targets")) {
		const cJSON *pid = cJSON_GetObjectItemCaseSensitive(tg, "pid");
		const cJSON *rank = cJSON_GetObjectItemCaseSensitive(tg, "rank");
		const cJSON *comm = cJSON_GetObjectItemCaseSensitive(tg, "comm");
		const cJSON *gpu = cJSON_GetObjectItemCaseSensitive(tg, "gpu");
		struct rproc *p;

		if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(gpu, "attached")))
			in->gpu = true;
		if (!cJSON_IsNumber(pid))
			continue;
		p = proc_get(in, (uint32_t)pid->valuedouble);
		if (!p)
			continue;
		if (cJSON_IsNumber(rank) && p->rank < 0)
			p->rank = (int)rank->valuedouble;
		if (cJSON_IsString(comm) && !p->name[0])
			snprintf(p->name, sizeof(p->name), "%s", comm->valuestring);
	}
}

static int read_top(struct rd *r, struct rinput *in, struct rstrings *strs, bool *have_meta,
		    bool *have_events)
{
	struct ev_fields *f = malloc(sizeof(*f));
	int ret = -1, c;

	if (!f) {
		snprintf(r->err, r->errsz, "out of memory");
		return -1;
	}
	c = rd_peek(r);
	if (c == -1) {
		snprintf(r->err, r->errsz, "empty file: not a tptrace trace");
		goto cleanup;
	}
	if (c != '{') {
		if (c != -2)
			rd_fail(r, "not a JSON object (not a trace)");
		goto cleanup;
	}
	r->p++;
	for (bool first = true;; first = false) {
		const char *s;
		size_t n;
		char key[64];
		struct jlex j;
		char jerr[80];

		c = rd_peek(r);
		if (c == '}') {
			r->p++;
			break;
		}
		if (!first) {
			if (rd_expect(r, ',', "expected ',' between keys"))
				goto cleanup;
		}
		if (rd_value(r, &s, &n))
			goto cleanup;
		jl_init(&j, s, n, jerr, sizeof(jerr));
		if (*s != '"' || jl_str(&j, key, sizeof(key)) < 0) {
			r->p -= n;
			rd_fail(r, "expected a key");
			goto cleanup;
		}
		if (rd_expect(r, ':', "expected ':'"))
			goto cleanup;
		if (!strcmp(key, "traceEvents")) {
			if (rd_expect(r, '[', "traceEvents is not an array"))
				goto cleanup;
			*have_events = true;
			for (bool efirst = true;; efirst = false) {
				c = rd_peek(r);
				if (c == ']') {
					r->p++;
					break;
				}
				if (!efirst && rd_expect(r, ',', "expected ',' between events"))
					goto cleanup;
				if (rd_value(r, &s, &n))
					goto cleanup;
				if (*s != '{' || parse_event(s, n, f)) {
					r->p -= n;
					rd_fail(r, "malformed event");
					goto cleanup;
				}
				in->events_read++;
				if (take_event(in, strs, f)) {
					snprintf(r->err, r->errsz, "out of memory");
					goto cleanup;
				}
			}
		} else if (!strcmp(key, "tptrace") || !strcmp(key, "distributedInfo") ||
			   !strcmp(key, "tptrace_memory")) {
			cJSON *v;

			if (rd_value(r, &s, &n))
				goto cleanup;
			v = cJSON_ParseWithLength(s, n);
			if (!v) {
				r->p -= n;
				rd_fail(r, "malformed metadata");
				goto cleanup;
			}
			if (key[0] == 'd') {
				const cJSON *rk = cJSON_GetObjectItemCaseSensitive(v, "rank");

				if (cJSON_IsNumber(rk))
					in->dist_rank = (int)rk->valuedouble;
			} else if (!strcmp(key, "tptrace_memory")) {
				in->mem = true;
			} else if (cJSON_IsObject(v)) {
				*have_meta = true;
				take_tptrace(in, v);
			}
			cJSON_Delete(v);
		} else if (rd_value(r, &s, &n)) {
			goto cleanup;
		}
	}
	c = rd_peek(r);
	if (c == -2)
		goto cleanup;
	if (c != -1) {
		rd_fail(r, "data after the trace object");
		goto cleanup;
	}
	ret = 0;
cleanup:
	free(f);
	return ret;
}

void rinput__free(struct rinput *in)
{
	if (!in)
		return;
	free(in->ev);
	free(in->procs);
	u64map__clear(&in->gpu_host);
	memset(in, 0, sizeof(*in));
}

int report_read(struct rinput *in, struct rstrings *strs, const char *path, char *err,
		size_t errsz)
{
	struct rd r = { .err = err, .errsz = errsz, .path = path };
	struct stat st = { 0 };
	bool have_meta = false, have_events = false;
	uint64_t lo = UINT64_MAX, hi = 0;
	int ret = -1;

	memset(in, 0, sizeof(*in));
	in->path = path;
	in->dist_rank = -1;
	in->events_dropped = -1;
	err[0] = 0;
	if (!stat(path, &st) && S_ISDIR(st.st_mode)) {
		snprintf(err, errsz, "a directory, not a trace file");
		return -1;
	}
	r.gz = gzopen(path, "rb");
	if (!r.gz) {
		snprintf(err, errsz, "cannot open: %s", strerror(errno ? errno : ENOMEM));
		return -1;
	}
	/* a large trace takes seconds to read (~100 MiB/s): said on a terminal, not on a pipe */
	if (st.st_size > (64 << 20) && isatty(STDERR_FILENO))
		fprintf(stderr, "tptrace report: reading %s (%.0f MiB)...\n", path,
			st.st_size / 1048576.0);
	gzbuffer(r.gz, 256 << 10);
	if (read_top(&r, in, strs, &have_meta, &have_events))
		goto cleanup;
	if (!have_events) {
		snprintf(err, errsz, "no \"traceEvents\": not a Chrome/Kineto trace");
		goto cleanup;
	}
	if (!have_meta) {
		snprintf(err, errsz, "no \"tptrace\" metadata: a trace made by another tool "
			 "(tptrace report reads tptrace's own traces)");
		goto cleanup;
	}
	if (!in->nr) {
		snprintf(err, errsz, "no CUDA, NCCL or GPU events recorded (nor torch.profiler's; "
			 "%zu other events)", in->events_read);
		goto cleanup;
	}
	for (size_t i = 0; i < in->nr; i++) {
		struct rev *e = &in->ev[i];

		e->ts += in->base_mono_ns;
		if (e->ts < lo)
			lo = e->ts;
		if (e->ts + e->dur > hi)
			hi = e->ts + e->dur;
		if (e->kind >= RK_KERNEL && e->kind <= RK_GPU_SYNC)
			in->gpu = true;
		if (e->kind == RK_PYFUNC)
			in->py_stacks = true;
		if (e->kind == RK_MEM_COUNTER || e->kind == RK_OOM)
			in->mem = true;
		if (e->kind == RK_CPU_OP || e->kind == RK_USER_ANN)
			in->torch = true;
	}
	in->span_ns = hi - lo;
	if (in->dist_rank >= 0 && in->nr_procs == 1 && in->procs[0].rank < 0)
		in->procs[0].rank = in->dist_rank;
	ret = 0;
cleanup:
	free(r.buf);
	gzclose(r.gz);
	if (ret)
		rinput__free(in);
	return ret;
}
