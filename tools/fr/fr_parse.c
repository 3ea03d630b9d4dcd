// SPDX-License-Identifier: MIT
/* fr_parse: pull parser for tptrace-fr dumps. See fr_parse.h for why it is not cJSON.
 *
 * The input is untrusted bytes: every access checks j->p < j->end, nesting is bounded,
 * strings are copied with a cap, numbers saturate. The first error stops the parse and is
 * described in d->err with its byte offset.
 *
 * One file on purpose (over 1,000 lines): the lexer (ws, eat, str, num, next_key) inlines into
 * the per-object readers below it, and reading 16k ranks' dumps is bound by this loop.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fr_parse.h"
#include "growbuf.h"

#define MAX_DEPTH 64

/* Entries' "frames" arrays seen last, as raw text: the entries of one call site repeat the
 * same bytes, so most arrays are matched by length and memcmp instead of being parsed */
#define PY_RAW_CACHE 8
struct py_raw {
	const char *p;		/* into the buffer being parsed (valid for this parse) */
	size_t len;
	uint32_t pystack;
};

struct jp {
	const char *p, *end, *base;
	struct fr_dump *d;
	bool failed;
	size_t off0;		/* file offset of base (tail mode) */
	struct py_raw py_raw[PY_RAW_CACHE];
	int py_raw_next;
};

static const char *const op_names[FR_OP__COUNT] = {
	"unknown", "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
	"all_to_all", "gather", "scatter", "send", "recv", "comm_init", "other",
};
static const char *const dtype_names[FR_DT__COUNT] = {
	"unknown", "int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32",
	"float64", "bfloat16", "float8e4m3", "float8e5m2", "other",
};
static const char *const redop_names[FR_RED__COUNT] = {
	"none", "sum", "prod", "max", "min", "avg", "premul_sum", "dynamic", "other",
};
static const char *const state_names[] = {
	"unknown", "enqueued", "started", "completed", "failed",
};

static const char *const where_names[FR_WHERE__COUNT] = {
	"unknown", "nccl", "cuda", "driver", "allocator", "python", "idle", "running",
};

const char *fr_where_name(int w) { return w >= 0 && w < FR_WHERE__COUNT ? where_names[w] : "?"; }
bool fr_where_is_wait(int w)
{
	return w == FR_WHERE_NCCL || w == FR_WHERE_CUDA || w == FR_WHERE_DRIVER;
}

const char *fr_op_name(int op) { return op >= 0 && op < FR_OP__COUNT ? op_names[op] : "?"; }
const char *fr_dtype_name(int t) { return t >= 0 && t < FR_DT__COUNT ? dtype_names[t] : "?"; }
const char *fr_redop_name(int r) { return r >= 0 && r < FR_RED__COUNT ? redop_names[r] : "?"; }
const char *fr_state_name(int s) { return s >= 0 && s <= FR_ST_FAILED ? state_names[s] : "?"; }
bool fr_op_is_p2p(int op) { return op == FR_OP_SEND || op == FR_OP_RECV; }
bool fr_op_has_redop(int op)
{
	return op == FR_OP_ALL_REDUCE || op == FR_OP_REDUCE_SCATTER || op == FR_OP_REDUCE;
}
bool fr_op_has_root(int op)
{
	return op == FR_OP_BROADCAST || op == FR_OP_REDUCE || op == FR_OP_GATHER ||
	       op == FR_OP_SCATTER;
}

static int lookup(const char *const *names, int n, const char *s, size_t len, int other)
{
	for (int i = 1; i < n; i++)
		/* s may hold NUL bytes (raw in the input): compare lengths, then bytes */
		if (names[i][0] == s[0] && strnlen(names[i], len + 1) == len &&
		    !memcmp(names[i], s, len))
			return i;
	return other;
}

static bool fail(struct jp *j, const char *what)
{
	if (!j->failed) {
		j->failed = true;
		if (j->p >= j->end)
			snprintf(j->d->err, sizeof(j->d->err), "unexpected end of input at byte %zu",
				 j->off0 + (size_t)(j->end - j->base));
		else
			snprintf(j->d->err, sizeof(j->d->err), "%s at byte %zu", what,
				 j->off0 + (size_t)(j->p - j->base));
	}
	return false;
}

static inline void ws(struct jp *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t'))
		j->p++;
}

static inline bool eat(struct jp *j, char c)
{
	ws(j);
	if (j->p < j->end && *j->p == c) {
		j->p++;
		return true;
	}
	return false;
}

/* First '"' or '\\' at or after p (end if none), 8 bytes at a time: the classic
 * "has zero byte" test on the input xor the byte; the lowest flagged byte is exact. */
static inline const char *scan_quote(const char *p, const char *end)
{
	const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;

	while (end - p >= 8) {
		uint64_t w, q, b, hit;

		memcpy(&w, p, 8);
		q = w ^ 0x2222222222222222ULL;
		b = w ^ 0x5c5c5c5c5c5c5c5cULL;
		hit = ((q - ones) & ~q & highs) | ((b - ones) & ~b & highs);
		if (hit)
			return p + (__builtin_ctzll(hit) >> 3);
		p += 8;
	}
	while (p < end && *p != '"' && *p != '\\')
		p++;
	return p;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Copies n bytes of short strings word by word: a variable-size memcpy here costs more than
 * the string (ids, op names) */
static inline void copy_short(char *out, const char *src, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		memcpy(out + i, src + i, 8);
	for (; i < n; i++)
		out[i] = src[i];
}

/* Reads a JSON string at j->p into out (NUL-terminated, truncated to cap-1; out may be NULL to
 * skip). Returns the decoded length kept, or -1 on error. Non-ASCII \u escapes become '?'. */
static int str(struct jp *j, char *out, size_t cap)
{
	size_t n = 0;
	const char *q;

	ws(j);
	if (j->p >= j->end || *j->p != '"')
		return fail(j, "expected a string"), -1;
	j->p++;
	/* fast path, nearly every string: no escape before the closing quote (strings are
	 * short: a byte loop beats memchr's call overhead) */
	q = scan_quote(j->p, j->end);
	if (q < j->end && *q == '"') {
		n = q - j->p;
		if (out) {
			if (n >= cap)
				n = cap - 1;
			copy_short(out, j->p, n);
			out[n] = 0;
		}
		j->p = q + 1;
		return (int)n;
	}
	if (!out) {
		/* fast skip: find the closing quote not preceded by an odd run of backslashes */
		for (;;) {
			const char *q = memchr(j->p, '"', j->end - j->p);
			const char *b;

			if (!q)
				return j->p = j->end, fail(j, ""), -1;
			for (b = q; b > j->p && b[-1] == '\\'; b--)
				;
			j->p = q + 1;
			if (((q - b) & 1) == 0)
				return 0;
		}
	}
	while (j->p < j->end) {
		char c = *j->p++;

		if (c == '"') {
			out[n < cap ? n : cap - 1] = 0;
			return (int)(n < cap ? n : cap - 1);
		}
		if (c == '\\') {
			if (j->p >= j->end)
				break;
			c = *j->p++;
			switch (c) {
			case 'n': c = '\n'; break;
			case 't': c = '\t'; break;
			case 'r': c = '\r'; break;
			case 'b': c = '\b'; break;
			case 'f': c = '\f'; break;
			case '"': case '\\': case '/': break;
			case 'u': {
				int v = 0;

				if (j->end - j->p < 4)
					return j->p = j->end, fail(j, ""), -1;
				for (int i = 0; i < 4; i++) {
					int h = hexval(j->p[i]);

					if (h < 0)
						return fail(j, "bad \\u escape"), -1;
					v = v * 16 + h;
				}
				j->p += 4;
				c = v > 0 && v < 0x80 ? (char)v : '?';
				break;
			}
			default:
				j->p--;
				return fail(j, "bad escape"), -1;
			}
		}
		if (n + 1 < cap)
			out[n] = c;
		n++;
	}
	return fail(j, ""), -1;
}

static bool literal(struct jp *j, const char *lit, size_t len)
{
	if ((size_t)(j->end - j->p) < len)
		return j->p = j->end, fail(j, "");
	if (memcmp(j->p, lit, len))
		return fail(j, "bad literal");
	j->p += len;
	return true;
}

/* the characters a JSON number is made of, as a table: skipped numbers are most of a dump */
static const bool num_chars[256] = {
	['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
	['8'] = 1, ['9'] = 1, ['-'] = 1, ['+'] = 1, ['.'] = 1, ['e'] = 1, ['E'] = 1,
};

static inline bool is_num_char(char c)
{
	return num_chars[(unsigned char)c];
}

/* Reads a number, null, true or false into *out (null -> FR_UNK, booleans -> 0/1, fractions
 * truncated, out-of-range saturated). Strings and containers are skipped and read as FR_UNK:
 * a field of the wrong type is unknown, not fatal. */
static bool skip_value(struct jp *j, int depth);

/* all 8 bytes are ASCII digits: every high nibble is 3, and adding 6 keeps it 3 (no byte
 * reaches 0x3a); a non-digit fails one test or the other */
static inline bool digits8(uint64_t w)
{
	return ((w & 0xf0f0f0f0f0f0f0f0ULL) | (((w + 0x0606060606060606ULL) &
		0xf0f0f0f0f0f0f0f0ULL) >> 4)) == 0x3333333333333333ULL;
}

/* the value of 8 ASCII digits, the first in the lowest byte: pairs, then quads, then both */
static inline uint64_t digits8_value(uint64_t w)
{
	w -= 0x3030303030303030ULL;
	w = w * 10 + (w >> 8);
	return (((w & 0x000000ff000000ffULL) * (100 + (1000000ULL << 32))) +
		(((w >> 16) & 0x000000ff000000ffULL) * (1 + (10000ULL << 32)))) >> 32;
}

static bool num(struct jp *j, int64_t *out)
{
	const char *s;
	bool neg = false, frac = false;
	uint64_t v = 0;
	bool overflow = false;

	ws(j);
	*out = FR_UNK;
	if (j->p >= j->end)
		return fail(j, "");
	switch (*j->p) {
	case 'n': return literal(j, "null", 4);
	case 't': *out = 1; return literal(j, "true", 4);
	case 'f': *out = 0; return literal(j, "false", 5);
	case '"': case '[': case '{': return skip_value(j, 0);
	}
	s = j->p;
	if (*j->p == '-') {
		neg = true;
		j->p++;
	}
	if (j->p >= j->end || *j->p < '0' || *j->p > '9')
		return fail(j, "bad number");
	/* up to 16 digits 8 at a time (a nanosecond time has 19), then up to 19 digits cannot
	 * overflow 64 bits: check only past them */
	int nd = 0;

	while (nd < 16 && j->end - j->p >= 8) {
		uint64_t w;

		memcpy(&w, j->p, 8);
		if (!digits8(w))
			break;
		v = v * 100000000ULL + digits8_value(w);
		j->p += 8;
		nd += 8;
	}
	for (const char *stop = j->end - j->p > 19 - nd ? j->p + 19 - nd : j->end;
	     j->p < stop && *j->p >= '0' && *j->p <= '9'; j->p++)
		v = v * 10 + (unsigned)(*j->p - '0');
	while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
		unsigned d = *j->p++ - '0';

		overflow |= __builtin_mul_overflow(v, 10, &v);
		overflow |= __builtin_add_overflow(v, d, &v);
	}
	if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E')) {
		frac = true;
		while (j->p < j->end && is_num_char(*j->p))
			j->p++;
	}
	if (frac) {
		char tmp[64];
		size_t len = j->p - s;
		double dv;

		if (len >= sizeof(tmp))
			len = sizeof(tmp) - 1;
		memcpy(tmp, s, len);
		tmp[len] = 0;
		dv = strtod(tmp, NULL);
		if (dv != dv)
			*out = FR_UNK;
		else if (dv >= 9.2e18)
			*out = INT64_MAX;
		else if (dv <= -9.2e18)
			*out = INT64_MIN + 1;
		else
			*out = (int64_t)dv;
		return true;
	}
	if (overflow || v > (uint64_t)INT64_MAX)
		*out = neg ? INT64_MIN + 1 : INT64_MAX;
	else
		*out = neg ? -(int64_t)v : (int64_t)v;
	return true;
}

static bool skip_value(struct jp *j, int depth)
{
	int64_t dummy;

	ws(j);
	if (j->p >= j->end)
		return fail(j, "");
	if (depth > MAX_DEPTH)
		return fail(j, "nesting too deep");
	switch (*j->p) {
	case '"':
		return str(j, NULL, 0) >= 0;
	case '{':
		j->p++;
		if (eat(j, '}'))
			return true;
		do {
			if (str(j, NULL, 0) < 0)
				return false;
			if (!eat(j, ':'))
				return fail(j, "expected ':'");
			if (!skip_value(j, depth + 1))
				return false;
		} while (eat(j, ','));
		return eat(j, '}') ? true : fail(j, "expected ',' or '}'");
	case '[':
		j->p++;
		if (eat(j, ']'))
			return true;
		do {
			if (!skip_value(j, depth + 1))
				return false;
		} while (eat(j, ','));
		return eat(j, ']') ? true : fail(j, "expected ',' or ']'");
	case 't': case 'f': case 'n':
		return num(j, &dummy);
	default:
		/* a number nobody reads: check its shape, do not convert it */
		if (*j->p == '-')
			j->p++;
		if (j->p >= j->end || *j->p < '0' || *j->p > '9')
			return fail(j, "bad number");
		while (j->p < j->end && is_num_char(*j->p))
			j->p++;
		return true;
	}
}

/* Iterates the members of an object: call with *first = true; returns true with the key in
 * key[] while there is one, false at '}' or on error (check j->failed). */
static bool next_key(struct jp *j, bool *first, char *key, size_t cap, int *klen)
{
	const char *q;

	ws(j);
	if (*first) {
		*first = false;
		if (!eat(j, '{'))
			return fail(j, "expected an object");
		if (eat(j, '}'))
			return false;
	} else {
		if (eat(j, '}'))
			return false;
		if (!eat(j, ','))
			return fail(j, "expected ',' or '}'");
	}
	/* keys are plain ASCII in practice: copy only up to cap, decode escapes the slow way */
	ws(j);
	if (j->p < j->end && *j->p == '"') {
		q = scan_quote(j->p + 1, j->end);
		if (q < j->end && *q == '"') {
			size_t n = q - (j->p + 1);

			*klen = n < cap ? (int)n : (int)cap - 1;
			memcpy(key, j->p + 1, *klen);
			j->p = q + 1;
			goto colon;
		}
	}
	*klen = str(j, key, cap);
	if (*klen < 0)
		return false;
colon:
	if (j->p < j->end && *j->p == ':') {
		j->p++;
		return true;
	}
	if (!eat(j, ':'))
		return fail(j, "expected ':'");
	return true;
}

/* Same for array elements: true when an element follows (j->p at it). */
static bool next_elem(struct jp *j, bool *first)
{
	if (*first) {
		*first = false;
		if (!eat(j, '['))
			return fail(j, "expected an array");
		return !eat(j, ']');
	}
	if (eat(j, ']'))
		return false;
	if (!eat(j, ','))
		return fail(j, "expected ',' or ']'");
	return true;
}

static bool is_null(struct jp *j)
{
	ws(j);
	return j->p < j->end && *j->p == 'n';
}

/* A string field that may be null (stays "" then) or of another type (skipped). */
static bool str_field(struct jp *j, char *out, size_t cap)
{
	ws(j);
	out[0] = 0;
	if (j->p < j->end && *j->p == '"')
		return str(j, out, cap) >= 0;
	return skip_value(j, 0);
}

#define KEY(s) (klen == (int)sizeof(s) - 1 && !memcmp(key, s, sizeof(s) - 1))

/* input_sizes/output_sizes: [[d0, d1, ...], ...] -> sum over tensors of the product of dims */
static bool sizes(struct jp *j, int64_t *out)
{
	bool first = true;
	int64_t total = 0;

	*out = FR_UNK;
	if (is_null(j))
		return skip_value(j, 0);
	while (next_elem(j, &first)) {
		bool f2 = true;
		int64_t prod = 1, v;

		ws(j);
		if (j->p < j->end && *j->p != '[') {
			if (!skip_value(j, 0))
				return false;
			continue;
		}
		while (next_elem(j, &f2)) {
			if (!num(j, &v))
				return false;
			if (v == FR_UNK || v < 0)
				prod = FR_UNK;
			else if (prod != FR_UNK)
				prod = (v && prod > INT64_MAX / v) ? INT64_MAX : prod * v;
		}
		if (j->failed)
			return false;
		if (prod == FR_UNK || total == FR_UNK)
			total = FR_UNK;
		else
			total = total > INT64_MAX - prod ? INT64_MAX : total + prod;
	}
	if (j->failed)
		return false;
	*out = total;
	return true;
}

static int find_comm(struct fr_dump *d, const char *id, bool create)
{
	size_t i;

	for (i = 0; i < d->nr_comms; i++)
		if (!strcmp(d->comms[i].id, id))
			return (int)i;
	if (!create)
		return -1;
	if (d->nr_comms >= FR_MAX_COMMS_PER_DUMP)
		return -2;
	if (ARRAY_RESERVE(d->comms, d->cap_comms, d->nr_comms + 1, 8))
		return -3;
	struct fr_comm_info *c = &d->comms[d->nr_comms];

	memset(c, 0, sizeof(*c));
	snprintf(c->id, sizeof(c->id), "%s", id);
	c->rank = c->nranks = FR_UNK;
	c->last_enqueued = c->last_started = c->last_completed = c->last_p2p = FR_UNK;
	c->async_error = FR_UNK;
	c->split_color = c->split_key = FR_UNK;
	c->local_id = !strncmp(c->id, "local:", 6);
	return (int)d->nr_comms++;
}

/* comm.learned: only seq_origin matters to the analysis */
static bool learned_obj(struct jp *j, struct fr_comm_info *c)
{
	char key[32], buf[16];
	int klen;
	bool first = true;

	ws(j);
	if (j->p < j->end && *j->p != '{')
		return skip_value(j, 0);
	while (next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY("seq_origin")) {
			ok = str_field(j, buf, sizeof(buf));
			c->seq_attach = ok && !strcmp(buf, "attach");
		} else {
			ok = skip_value(j, 0);
		}
		if (!ok)
			return false;
	}
	return !j->failed;
}

static bool comm_obj(struct jp *j)
{
	struct fr_comm_info c = { 0 };
	char key[32];
	int klen, idx;
	int64_t cross = FR_UNK;
	bool first = true;

	c.rank = c.nranks = FR_UNK;
	c.last_enqueued = c.last_started = c.last_completed = c.last_p2p = FR_UNK;
	c.async_error = c.init_rc = FR_UNK;
	c.split_color = c.split_key = FR_UNK;
	while (next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY("comm_id"))
			ok = str_field(j, c.id, sizeof(c.id));
		else if (KEY("cross_rank_id"))
			ok = num(j, &cross);
		else if (KEY("parent"))
			ok = str_field(j, c.parent, sizeof(c.parent));
		else if (KEY("split_color"))
			ok = num(j, &c.split_color);
		else if (KEY("split_key"))
			ok = num(j, &c.split_key);
		else if (KEY("learned"))
			ok = learned_obj(j, &c);
		else if (KEY("rank"))
			ok = num(j, &c.rank);
		else if (KEY("nranks"))
			ok = num(j, &c.nranks);
		else if (KEY("state"))
			ok = str_field(j, c.state, sizeof(c.state));
		else if (KEY("async_error"))
			ok = num(j, &c.async_error);
		else if (KEY("init_rc"))
			ok = num(j, &c.init_rc);
		else if (KEY("created_by"))
			ok = str_field(j, c.created_by, sizeof(c.created_by));
		else if (KEY("last_enqueued_seq"))
			ok = num(j, &c.last_enqueued);
		else if (KEY("last_started_seq"))
			ok = num(j, &c.last_started);
		else if (KEY("last_completed_seq"))
			ok = num(j, &c.last_completed);
		else if (KEY("last_p2p_seq"))
			ok = num(j, &c.last_p2p);
		else
			ok = skip_value(j, 0);
		if (!ok)
			return false;
	}
	if (j->failed)
		return false;
	if (!c.id[0])
		return true;	/* a comm without identity cannot be aligned: ignore it */
	c.local_id = cross == 0 || !strncmp(c.id, "local:", 6);
	if (c.nranks != FR_UNK && (c.nranks <= 0 || c.nranks > FR_MAX_NRANKS))
		c.nranks = FR_UNK;
	if (c.rank != FR_UNK && (c.rank < 0 || c.rank >= FR_MAX_NRANKS ||
				 (c.nranks != FR_UNK && c.rank >= c.nranks)))
		c.rank = FR_UNK;
	idx = find_comm(j->d, c.id, true);
	if (idx == -3)
		return fail(j, "out of memory");
	if (idx < 0)
		return fail(j, "too many comms");
	if (j->d->comms[idx].in_header)
		return true;	/* duplicate comm_id in one dump: the first wins */
	c.in_header = true;
	j->d->comms[idx] = c;
	return true;
}

static bool in_call_obj(struct jp *j)
{
	struct fr_in_call ic = { 0 };
	char key[32];
	int klen;
	bool first = true;
	struct fr_dump *d = j->d;

	ic.tid = ic.entered_ns = ic.seq = FR_UNK;
	while (next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY("tid"))
			ok = num(j, &ic.tid);
		else if (KEY("api"))
			ok = str_field(j, ic.api, sizeof(ic.api));
		else if (KEY("thread_name"))
			ok = str_field(j, ic.thread_name, sizeof(ic.thread_name));
		else if (KEY("entered_ns"))
			ok = num(j, &ic.entered_ns);
		else if (KEY("comm_id"))
			ok = str_field(j, ic.comm_id, sizeof(ic.comm_id));
		else if (KEY("seq"))
			ok = num(j, &ic.seq);
		else
			ok = skip_value(j, 0);
		if (!ok)
			return false;
	}
	if (j->failed)
		return false;
	if (d->nr_in_calls >= FR_MAX_IN_CALLS)
		return true;
	if (ARRAY_RESERVE(d->in_calls, d->cap_in_calls, d->nr_in_calls + 1, 4))
		return fail(j, "out of memory");
	d->in_calls[d->nr_in_calls++] = ic;
	return true;
}

static int op_from_profiling_name(const char *s)
{
	/* "nccl:all_reduce", "nccl:send 3->5", "nccl:recv 3<-5" */
	const char *colon = strchr(s, ':');
	size_t len;

	s = colon ? colon + 1 : s;
	len = strcspn(s, " ");
	return lookup(op_names, FR_OP__COUNT, s, len, FR_OP_OTHER);
}

enum entry_key {
	EK_OTHER, EK_RECORD_ID, EK_COMM_ID, EK_COLL_SEQ, EK_P2P_SEQ, EK_OP, EK_PROF, EK_COUNT,
	EK_DTYPE, EK_IN_SIZES, EK_OUT_SIZES, EK_REDOP, EK_ROOT, EK_PEER, EK_STATE, EK_CREATED,
	EK_COMPLETED,
	EK_FRAMES,
};

/* An entry's keys in the order the writer (user/fr/flightrec_dump.c) emits them, quoted and with
 * the colon: the next key is nearly always the one after the last, and matching it as one
 * block saves scanning, copying and comparing it against every known key (reading every
 * entry of 16k ranks is bound by this loop). Keys in another order or spelling still go
 * the generic way, to the same fields. */
#define EKEY(s, id) { "\"" s "\":", sizeof(s) + 2, id }
static const struct ekey {
	const char *k;
	uint8_t len;
	uint8_t id;
} entry_keys[] = {
	EKEY("record_id", EK_RECORD_ID), EKEY("comm_id", EK_COMM_ID),
	EKEY("collective_seq_id", EK_COLL_SEQ), EKEY("p2p_seq_id", EK_P2P_SEQ),
	EKEY("group_id", EK_OTHER), EKEY("op", EK_OP), EKEY("profiling_name", EK_PROF),
	EKEY("is_p2p", EK_OTHER), EKEY("count", EK_COUNT), EKEY("dtype", EK_DTYPE),
	EKEY("input_sizes", EK_IN_SIZES), EKEY("output_sizes", EK_OUT_SIZES),
	EKEY("input_dtypes", EK_OTHER), EKEY("output_dtypes", EK_OTHER),
	EKEY("reduce_op", EK_REDOP), EKEY("root", EK_ROOT), EKEY("peer", EK_PEER),
	EKEY("stream", EK_OTHER), EKEY("sendbuff", EK_OTHER), EKEY("recvbuff", EK_OTHER),
	EKEY("state", EK_STATE), EKEY("time_created_ns", EK_CREATED),
	EKEY("time_discovered_started_ns", EK_OTHER),
	EKEY("time_discovered_completed_ns", EK_COMPLETED), EKEY("duration_ms", EK_OTHER),
	EKEY("api_enter_ns", EK_OTHER), EKEY("api_exit_ns", EK_OTHER), EKEY("rc", EK_OTHER),
	EKEY("thread_id", EK_OTHER), EKEY("thread_name", EK_OTHER), EKEY("frames", EK_FRAMES),
	EKEY("frames_missing", EK_OTHER),
};
#define NR_ENTRY_KEYS ((int)(sizeof(entry_keys) / sizeof(entry_keys[0])))

/* a[0..n) == b[0..n) for 4 <= n, in a few word compares (overlapping at the end) rather than
 * a memcmp call per key */
static inline bool eq_n(const char *a, const char *b, size_t n)
{
	uint64_t x, y;
	uint32_t u, v;

	if (n >= 8) {
		for (size_t i = 0; i + 8 < n; i += 8) {
			memcpy(&x, a + i, 8);
			memcpy(&y, b + i, 8);
			if (x != y)
				return false;
		}
		memcpy(&x, a + n - 8, 8);
		memcpy(&y, b + n - 8, 8);
		return x == y;
	}
	memcpy(&u, a, 4);
	memcpy(&v, b, 4);
	if (u != v)
		return false;
	memcpy(&u, a + n - 4, 4);
	memcpy(&v, b + n - 4, 4);
	return u == v;
}

/* The fields nobody reads are half of every entry: a plain string or a number starting at
 * j->p (no whitespace, no escape) is stepped over here, inline; anything else returns false
 * with j->p unchanged, for skip_value to read (and judge) it. */
static inline bool skip_scalar(struct jp *j)
{
	const char *p = j->p;

	if (p >= j->end)
		return false;
	if (*p == '"') {
		const char *q = scan_quote(p + 1, j->end);

		if (q < j->end && *q == '"') {
			j->p = q + 1;
			return true;
		}
		return false;
	}
	if (*p < '0' || *p > '9')
		return false;
	/* 8 digits at a time (nanosecond times are 19) */
	while (j->end - p >= 8) {
		uint64_t w;

		memcpy(&w, p, 8);
		if (!digits8(w))
			break;
		p += 8;
	}
	while (p < j->end && is_num_char(*p))
		p++;
	j->p = p;
	return true;
}

/* next_key for an entry, as an enum entry_key: -1 at the end or on error (check j->failed).
 * *expect: the index in entry_keys of the key that should come next. */
static inline int entry_next_key(struct jp *j, bool *first, int *expect)
{
	char key[32];
	int klen;

	if (*expect < NR_ENTRY_KEYS && j->p < j->end && *j->p == (*first ? '{' : ',')) {
		const struct ekey *k = &entry_keys[*expect];

		if ((size_t)(j->end - j->p) > k->len && eq_n(j->p + 1, k->k, k->len)) {
			*first = false;
			j->p += 1 + k->len;
			(*expect)++;
			return k->id;
		}
	}
	if (!next_key(j, first, key, sizeof(key), &klen))
		return -1;
	for (int i = 0; i < NR_ENTRY_KEYS; i++) {
		const struct ekey *k = &entry_keys[i];

		if (klen == k->len - 3 && !memcmp(key, k->k + 1, klen)) {
			*expect = i + 1;
			return k->id;
		}
	}
	return EK_OTHER;
}

static bool pyframe_obj(struct jp *j, struct fr_pyframe *f)
{
	char key[32];
	int klen;
	int64_t v;
	bool first = true;

	memset(f, 0, sizeof(*f));
	ws(j);
	if (j->p < j->end && *j->p != '{')
		return skip_value(j, 0);
	while (next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY("name")) {
			ok = is_null(j) ? skip_value(j, 0) : str_field(j, f->name, sizeof(f->name));
		} else if (KEY("filename")) {
			ok = is_null(j) ? skip_value(j, 0) : str_field(j, f->file, sizeof(f->file));
		} else if (KEY("line")) {
			ok = num(j, &v);
			f->line = v > 0 && v < INT32_MAX ? (int32_t)v : 0;
		} else {
			ok = skip_value(j, 0);
		}
		if (!ok)
			return false;
	}
	return !j->failed;
}

/* An entry's "frames": the innermost FR_ENTRY_FRAMES kept as a stack of the dump */
static bool pyframes_array(struct jp *j, uint32_t *pystack)
{
	struct fr_dump *d = j->d;
	bool first = true, more = false;
	int n = 0;
	int64_t idx;

	const char *start;
	size_t len;

	*pystack = 0;
	if (is_null(j))
		return skip_value(j, 0);
	start = j->p;
	if (!skip_value(j, 0))
		return false;
	len = (size_t)(j->p - start);
	for (int i = 0; i < PY_RAW_CACHE; i++) {
		const struct py_raw *r = &j->py_raw[i];

		if (r->p && r->len == len && !memcmp(r->p, start, len)) {
			*pystack = r->pystack;
			return true;
		}
	}
	j->p = start;
	while (next_elem(j, &first)) {
		bool ok;

		if (n < FR_ENTRY_FRAMES) {
			ok = pyframe_obj(j, &d->py_scratch[n++]);
		} else {
			more = true;
			ok = skip_value(j, 0);
		}
		if (!ok)
			return false;
	}
	if (j->failed)
		return false;
	idx = fr_dump__pystack(d, n, more);
	if (idx < 0)
		return fail(j, "out of memory");
	*pystack = (uint32_t)idx;
	j->py_raw[j->py_raw_next] = (struct py_raw){ start, len, *pystack };
	j->py_raw_next = (j->py_raw_next + 1) % PY_RAW_CACHE;
	return true;
}

static uint64_t pyframes_hash(const struct fr_pyframe *f, int n, bool more)
{
	uint64_t h = 14695981039346656037ULL ^ (uint64_t)n ^ (more ? 0x100 : 0);

	for (int i = 0; i < n; i++) {
		for (const char *c = f[i].name; *c; c++)
			h = (h ^ (uint8_t)*c) * 1099511628211ULL;
		h = (h ^ 0xff) * 1099511628211ULL;
		for (const char *c = f[i].file; *c; c++)
			h = (h ^ (uint8_t)*c) * 1099511628211ULL;
		h = (h ^ (uint64_t)(uint32_t)f[i].line) * 1099511628211ULL;
	}
	return h;
}

int64_t fr_dump__pystack(struct fr_dump *d, int nr, bool more)
{
	uint64_t h;
	struct fr_pystack *s;

	if (nr <= 0)
		return 0;
	h = pyframes_hash(d->py_scratch, nr, more);
	/* newest first: consecutive entries mostly come from one call site */
	for (size_t i = d->nr_pystacks; i-- > 0;) {
		s = &d->pystacks[i];
		if (s->hash == h && s->nr == nr && s->more == more &&
		    !memcmp(&d->pyframes[s->first], d->py_scratch, nr * sizeof(*d->py_scratch)))
			return (int64_t)i + 1;
	}
	if (d->nr_pystacks >= FR_MAX_PYSTACKS) {
		d->pystacks_dropped++;
		return 0;
	}
	if (ARRAY_RESERVE(d->pystacks, d->cap_pystacks, d->nr_pystacks + 1, 16) ||
	    ARRAY_RESERVE(d->pyframes, d->cap_pyframes, d->nr_pyframes + nr, 64))
		return -ENOMEM;
	s = &d->pystacks[d->nr_pystacks++];
	s->hash = h;
	s->first = (uint32_t)d->nr_pyframes;
	s->nr = (uint8_t)nr;
	s->more = more;
	memcpy(&d->pyframes[d->nr_pyframes], d->py_scratch, nr * sizeof(*d->py_scratch));
	d->nr_pyframes += nr;
	return (int64_t)d->nr_pystacks;
}

static bool entry_obj(struct jp *j, int *last_comm)
{
	struct fr_dump *d = j->d;
	struct fr_entry e;
	char buf[FR_ID_LEN], comm_id[FR_ID_LEN] = "";
	char prof[48] = "";
	int idx, kid, expect = 0;
	int64_t v;
	bool first = true, have_op = false;

	memset(&e, 0, sizeof(e));
	e.record_id = e.coll_seq = e.p2p_seq = e.count = FR_UNK;
	e.in_size = e.out_size = e.created_ns = e.completed_ns = FR_UNK;
	e.root = e.peer = -1;
	while ((kid = entry_next_key(j, &first, &expect)) >= 0) {
		bool ok = true;
		int len;

		switch (kid) {
		case EK_RECORD_ID:
			ok = num(j, &e.record_id);
			break;
		case EK_COMM_ID:
			ok = str_field(j, comm_id, sizeof(comm_id));
			break;
		case EK_COLL_SEQ:
			ok = num(j, &e.coll_seq);
			break;
		case EK_P2P_SEQ:
			ok = num(j, &e.p2p_seq);
			break;
		case EK_OP:
			if (is_null(j)) {
				ok = skip_value(j, 0);
			} else if ((ok = (len = str(j, buf, sizeof(buf))) >= 0)) {
				e.op = lookup(op_names, FR_OP__COUNT, buf, len, FR_OP_OTHER);
				have_op = true;
			}
			break;
		case EK_PROF:
			ok = str_field(j, prof, sizeof(prof));
			break;
		case EK_COUNT:
			ok = num(j, &e.count);
			if (e.count != FR_UNK && e.count < 0)
				e.count = FR_UNK;
			break;
		case EK_DTYPE:
			if (is_null(j))
				ok = skip_value(j, 0);
			else if ((ok = (len = str(j, buf, sizeof(buf))) >= 0))
				e.dtype = lookup(dtype_names, FR_DT__COUNT, buf, len, FR_DT_OTHER);
			break;
		case EK_IN_SIZES:
			ok = sizes(j, &e.in_size);
			break;
		case EK_OUT_SIZES:
			ok = sizes(j, &e.out_size);
			break;
		case EK_REDOP:
			if (is_null(j))
				ok = skip_value(j, 0);
			else if ((ok = (len = str(j, buf, sizeof(buf))) >= 0))
				e.redop = lookup(redop_names, FR_RED__COUNT, buf, len, FR_RED_OTHER);
			break;
		case EK_ROOT:
		case EK_PEER:
			ok = num(j, &v);
			if (ok && v != FR_UNK && v >= 0 && v < FR_MAX_NRANKS)
				*(kid == EK_ROOT ? &e.root : &e.peer) = (int32_t)v;
			break;
		case EK_STATE:
			if (is_null(j)) {
				ok = skip_value(j, 0);
			} else if ((ok = (len = str(j, buf, sizeof(buf))) >= 0)) {
				if (!strcmp(buf, "completed"))
					e.state = FR_ST_COMPLETED;
				else if (!strcmp(buf, "started"))
					e.state = FR_ST_STARTED;
				else if (!strcmp(buf, "enqueued") || !strcmp(buf, "scheduled"))
					e.state = FR_ST_ENQUEUED;
				else if (!strcmp(buf, "failed"))
					e.state = FR_ST_FAILED;
			}
			break;
		case EK_CREATED:
			ok = num(j, &e.created_ns);
			break;
		case EK_COMPLETED:
			ok = num(j, &e.completed_ns);
			break;
		case EK_FRAMES:
			ok = pyframes_array(j, &e.pystack);
			break;
		default:
			ok = skip_scalar(j) || skip_value(j, 0);
		}
		if (!ok)
			return false;
	}
	if (j->failed)
		return false;
	if (!have_op && prof[0])
		e.op = op_from_profiling_name(prof);
	if (!comm_id[0])
		return true;	/* not attributable to a communicator: nothing to align */
	if (*last_comm >= 0 && !strcmp(d->comms[*last_comm].id, comm_id)) {
		idx = *last_comm;
	} else {
		idx = find_comm(d, comm_id, true);
		if (idx == -3)
			return fail(j, "out of memory");
		if (idx < 0)
			return fail(j, "too many comms");
		*last_comm = idx;
	}
	e.comm = (uint16_t)idx;
	switch (fr_dump__add_entry(d, &e)) {
	case 0:
		return true;
	case -E2BIG:
		return fail(j, "too many entries");
	default:
		return fail(j, "out of memory");
	}
}

int fr_dump__add_entry(struct fr_dump *d, struct fr_entry *e)
{
	/* NCCL's count is the input's elements, except where the input is a per-rank share */
	if (e->count == FR_UNK && e->in_size != FR_UNK && !fr_op_is_p2p(e->op) &&
	    e->op != FR_OP_ALL_GATHER && e->op != FR_OP_GATHER && e->op != FR_OP_ALL_TO_ALL &&
	    e->op != FR_OP_REDUCE_SCATTER && e->op != FR_OP_SCATTER)
		e->count = e->in_size;
	if (fr_op_is_p2p(e->op) && e->count == FR_UNK && e->in_size != FR_UNK)
		e->count = e->in_size;
	if (d->nr_entries >= FR_MAX_ENTRIES)
		return -E2BIG;
	if (ARRAY_RESERVE(d->entries, d->cap_entries, d->nr_entries + 1, 256))
		return -ENOMEM;
	d->entries[d->nr_entries++] = *e;
	return 0;
}

/* "0x6f12a" (the writer's hex strings) or a plain number; anything else is unknown */
static bool hex_field(struct jp *j, int64_t *out)
{
	char buf[24];
	uint64_t v = 0;
	int len;

	ws(j);
	*out = FR_UNK;
	if (j->p >= j->end || *j->p != '"')
		return num(j, out);
	if ((len = str(j, buf, sizeof(buf))) < 0)
		return false;
	if (len < 3 || buf[0] != '0' || (buf[1] != 'x' && buf[1] != 'X') || len > 18)
		return true;
	for (int i = 2; i < len; i++) {
		int h = hexval(buf[i]);

		if (h < 0)
			return true;
		v = v * 16 + (uint64_t)h;
	}
	*out = v > (uint64_t)INT64_MAX ? FR_UNK : (int64_t)v;
	return true;
}

static bool frame_obj(struct jp *j, struct fr_frame *f)
{
	char key[32], buf[16];
	int klen;
	int64_t v;
	bool first = true;

	memset(f, 0, sizeof(*f));
	f->module_off = FR_UNK;
	ws(j);
	if (j->p < j->end && *j->p != '{')
		return skip_value(j, 0);
	while (next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY("kind")) {
			ok = str_field(j, buf, sizeof(buf));
			f->kind = !strcmp(buf, "native") ? FR_FRAME_NATIVE :
				  !strcmp(buf, "python") ? FR_FRAME_PYTHON : FR_FRAME_UNKNOWN;
		} else if (KEY("func")) {
			ok = str_field(j, f->func, sizeof(f->func));
		} else if (KEY("file")) {
			ok = str_field(j, f->file, sizeof(f->file));
		} else if (KEY("module")) {
			ok = str_field(j, f->module, sizeof(f->module));
		} else if (KEY("module_off")) {
			ok = hex_field(j, &f->module_off);
		} else if (KEY("unrecoverable")) {
			f->unrecoverable = !is_null(j);
			ok = skip_value(j, 0);
		} else if (KEY("line")) {
			ok = num(j, &v);
			f->line = v > 0 && v < INT32_MAX ? (int32_t)v : 0;
		} else {
			ok = skip_value(j, 0);
		}
		if (!ok)
			return false;
	}
	return !j->failed;
}

/* the top FR_STACK_FRAMES frames into out; the rest skipped (counted in *more) */
static bool frames_array(struct jp *j, struct fr_frame *out, int *n, bool *more)
{
	bool first = true;

	*n = 0;
	*more = false;
	if (is_null(j))
		return skip_value(j, 0);
	while (next_elem(j, &first)) {
		bool ok;

		if (*n < FR_STACK_FRAMES) {
			ok = frame_obj(j, &out[*n]);
			(*n)++;
		} else {
			*more = true;
			ok = skip_value(j, 0);
		}
		if (!ok)
			return false;
	}
	return !j->failed;
}

static int lookup_where(const char *s, size_t len)
{
	return lookup(where_names, FR_WHERE__COUNT, s, len, FR_WHERE_UNKNOWN);
}

/* One thread. Its frames are read only while it may be the issuing thread (the writer puts
 * "issuing" before "frames"; when it does not, the top frames are read into scratch). */
static bool thread_obj(struct jp *j, struct fr_snapshot *sn, struct fr_frame *scratch)
{
	struct fr_dump *d = j->d;
	struct fr_stack_thread t = { 0 };
	char key[32], buf[48];
	int klen, nr_frames = 0, len;
	int64_t v, issuing = FR_UNK;
	bool first = true, more = false;

	t.tid = FR_UNK;
	while (next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY("tid")) {
			ok = num(j, &t.tid);
		} else if (KEY("name")) {
			ok = str_field(j, t.name, sizeof(t.name));
		} else if (KEY("state")) {
			ok = str_field(j, buf, sizeof(buf));
			t.state = ok && strchr("RSDTtZXIWPK", buf[0]) && buf[0] ? buf[0] : 0;
		} else if (KEY("where")) {
			if (is_null(j)) {
				ok = skip_value(j, 0);
			} else if ((ok = (len = str(j, buf, sizeof(buf))) >= 0)) {
				t.where = (uint8_t)lookup_where(buf, (size_t)len);
			}
		} else if (KEY("api")) {
			ok = str_field(j, t.api, sizeof(t.api));
		} else if (KEY("progress")) {
			ok = str_field(j, buf, sizeof(buf));
			t.progress = !strcmp(buf, "none") ? FR_PROG_NONE :
				     !strcmp(buf, "yes") ? FR_PROG_YES : FR_PROG_UNKNOWN;
		} else if (KEY("main")) {
			ok = num(j, &v);
			t.main = v == 1;
		} else if (KEY("issuing")) {
			ok = num(j, &issuing);
			t.issuing = issuing == 1;
		} else if (KEY("python")) {
			ok = num(j, &v);
			t.python = v == 1;
		} else if (KEY("frames")) {
			/* another thread already is the issuing one, or this one is not */
			if (sn->issuing >= 0 || (issuing != FR_UNK && issuing != 1))
				ok = skip_value(j, 0);
			else
				ok = frames_array(j, scratch, &nr_frames, &more);
		} else {
			ok = skip_value(j, 0);
		}
		if (!ok)
			return false;
	}
	if (j->failed)
		return false;
	sn->nr_threads_all++;
	if (sn->nr_threads >= FR_MAX_THREADS)
		return true;
	if (ARRAY_RESERVE(d->threads, d->cap_threads, d->nr_threads + 1, 64))
		return fail(j, "out of memory");
	if (t.issuing && sn->issuing < 0) {
		sn->issuing = (int64_t)d->nr_threads;
		memcpy(sn->frames, scratch, nr_frames * sizeof(*scratch));
		sn->nr_frames = nr_frames;
		sn->more_frames = more;
	} else {
		t.issuing = false;	/* exactly one per process: the first one wins */
	}
	d->threads[d->nr_threads++] = t;
	sn->nr_threads++;
	return true;
}

static bool snapshot_obj(struct jp *j)
{
	struct fr_dump *d = j->d;
	struct fr_snapshot *sn;
	struct fr_frame *scratch;
	char key[32], buf[16];
	int klen;
	int64_t v;
	bool first = true, ok = true;

	if (d->nr_snaps >= FR_MAX_SNAPSHOTS)
		return skip_value(j, 0);
	if (ARRAY_RESERVE(d->snaps, d->cap_snaps, d->nr_snaps + 1, 2))
		return fail(j, "out of memory");
	scratch = malloc(FR_STACK_FRAMES * sizeof(*scratch));
	if (!scratch)
		return fail(j, "out of memory");
	sn = &d->snaps[d->nr_snaps];
	memset(sn, 0, offsetof(struct fr_snapshot, frames));
	sn->time_ns = sn->samples = sn->interval_ms = FR_UNK;
	sn->issuing = -1;
	sn->nr_frames = 0;
	sn->more_frames = false;
	sn->first_thread = d->nr_threads;
	ws(j);
	if (j->p < j->end && *j->p != '{') {
		free(scratch);
		return skip_value(j, 0);
	}
	while (ok && next_key(j, &first, key, sizeof(key), &klen)) {
		if (KEY("taken")) {
			ok = str_field(j, buf, sizeof(buf));
			sn->taken = !strcmp(buf, "attach") ? FR_TAKEN_ATTACH :
				    !strcmp(buf, "dump") ? FR_TAKEN_DUMP :
				    !strcmp(buf, "request") ? FR_TAKEN_REQUEST : FR_TAKEN_OTHER;
		} else if (KEY("time_ns")) {
			ok = num(j, &sn->time_ns);
		} else if (KEY("samples")) {
			ok = num(j, &sn->samples);
		} else if (KEY("interval_ms")) {
			ok = num(j, &sn->interval_ms);
		} else if (KEY("exited")) {
			ok = num(j, &v);
			sn->exited = v == 1;
		} else if (KEY("ptrace_error")) {
			ok = str_field(j, sn->ptrace_error, sizeof(sn->ptrace_error));
		} else if (KEY("python")) {
			ok = str_field(j, sn->python, sizeof(sn->python));
		} else if (KEY("threads")) {
			bool f2 = true;

			if (is_null(j)) {
				ok = skip_value(j, 0);
				continue;
			}
			while (ok && next_elem(j, &f2))
				ok = thread_obj(j, sn, scratch);
			ok = ok && !j->failed;
		} else {
			ok = skip_value(j, 0);
		}
	}
	free(scratch);
	if (!ok || j->failed)
		return false;
	d->nr_snaps++;
	return true;
}

static bool stacks_array(struct jp *j)
{
	bool first = true;

	if (is_null(j))
		return skip_value(j, 0);
	while (next_elem(j, &first))
		if (!snapshot_obj(j))
			return false;
	return !j->failed;
}

static bool array_of(struct jp *j, bool (*fn)(struct jp *))
{
	bool first = true;

	if (is_null(j))
		return skip_value(j, 0);
	while (next_elem(j, &first))
		if (!fn(j))
			return false;
	return !j->failed;
}

static bool entries_array(struct jp *j)
{
	bool first = true;
	int last_comm = -1;

	if (is_null(j))
		return skip_value(j, 0);
	while (next_elem(j, &first))
		if (!entry_obj(j, &last_comm))
			return false;
	return !j->failed;
}

static bool process_obj(struct jp *j)
{
	char key[32], buf[16];
	int klen;
	bool first = true;

	if (is_null(j))
		return skip_value(j, 0);
	while (next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY("state")) {
			ok = str_field(j, buf, sizeof(buf));
			j->d->proc_state = !strcmp(buf, "running") ? FR_PROC_RUNNING :
					   !strcmp(buf, "exited")  ? FR_PROC_EXITED :
					   !strcmp(buf, "killed")  ? FR_PROC_KILLED : FR_PROC_UNKNOWN;
		} else if (KEY("exit_code")) {
			ok = num(j, &j->d->exit_code);
		} else if (KEY("signal")) {
			ok = num(j, &j->d->signal);
		} else {
			ok = skip_value(j, 0);
		}
		if (!ok)
			return false;
	}
	return !j->failed;
}

/* "trigger": {"id", "origin_host", "reason", "time_ns"} or null (docs/fr-schema.md) */
/* "py_stacks": {"python": "3.11.2" | null, "why_no_frames": null | "..."}, or null */
static bool py_stacks_obj(struct jp *j)
{
	struct fr_dump *d = j->d;
	char key[32];
	int klen;
	bool first = true;

	if (is_null(j))
		return skip_value(j, 0);
	ws(j);
	if (j->p < j->end && *j->p != '{')
		return skip_value(j, 0);
	d->py_stacks = true;
	while (next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY("python"))
			ok = str_field(j, d->py_python, sizeof(d->py_python));
		else if (KEY("why_no_frames"))
			ok = str_field(j, d->py_why, sizeof(d->py_why));
		else
			ok = skip_value(j, 0);
		if (!ok)
			return false;
	}
	return !j->failed;
}

static bool trigger_obj(struct jp *j)
{
	struct fr_dump *d = j->d;
	char key[32];
	int klen;
	bool first = true;

	if (is_null(j))
		return skip_value(j, 0);
	while (next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY("id"))
			ok = str_field(j, d->trigger_id, sizeof(d->trigger_id));
		else if (KEY("origin_host"))
			ok = str_field(j, d->trigger_origin, sizeof(d->trigger_origin));
		else if (KEY("reason"))
			ok = str_field(j, d->trigger_reason, sizeof(d->trigger_reason));
		else if (KEY("time_ns"))
			ok = num(j, &d->trigger_time_ns);
		else
			ok = skip_value(j, 0);
		if (!ok)
			return false;
	}
	return !j->failed;
}

void fr_dump__init(struct fr_dump *d)
{
	memset(d, 0, sizeof(*d));
}

static void reset(struct fr_dump *d)
{
	d->schema[0] = d->host[0] = d->dump_reason[0] = d->err[0] = 0;
	d->version = d->pid = d->global_rank = d->world_size = d->local_rank = FR_UNK;
	d->dump_time_ns = d->dump_mono_ns = d->exit_code = d->signal = FR_UNK;
	d->ring_size = d->entries_recorded = d->entries_overwritten = d->events_dropped = FR_UNK;
	d->proc_state = FR_PROC_UNKNOWN;
	d->nr_comms = d->nr_in_calls = d->nr_entries = 0;
	d->nr_snaps = d->nr_threads = 0;
	d->nr_pystacks = d->nr_pyframes = 0;
	d->pystacks_dropped = 0;
	d->py_stacks = false;
	d->py_python[0] = d->py_why[0] = 0;
	d->stacks_error[0] = 0;
	d->trigger_id[0] = d->trigger_origin[0] = d->trigger_reason[0] = 0;
	d->trigger_time_ns = FR_UNK;
	d->nccl_version[0] = d->torch_version[0] = 0;
	d->torch = false;
}

/* The top-level members from j->p on (first: the opening '{' is still ahead). With
 * stop_at_entries, returns at the "entries" key with j->p at its value. */
static bool top_level(struct jp *j, bool first, bool stop_at_entries, bool *at_entries)
{
	struct fr_dump *d = j->d;
	char key[32];
	int klen;

	while (next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY("entries")) {
			if (stop_at_entries) {
				*at_entries = true;
				return true;
			}
			ok = entries_array(j);
		} else if (KEY("schema"))
			ok = str_field(j, d->schema, sizeof(d->schema));
		else if (KEY("version"))
			ok = num(j, &d->version);
		else if (KEY("host"))
			ok = str_field(j, d->host, sizeof(d->host));
		else if (KEY("pid"))
			ok = num(j, &d->pid);
		else if (KEY("global_rank"))
			ok = num(j, &d->global_rank);
		else if (KEY("world_size"))
			ok = num(j, &d->world_size);
		else if (KEY("local_rank"))
			ok = num(j, &d->local_rank);
		else if (KEY("dump_reason"))
			ok = str_field(j, d->dump_reason, sizeof(d->dump_reason));
		else if (KEY("dump_time_ns"))
			ok = num(j, &d->dump_time_ns);
		else if (KEY("dump_mono_ns"))
			ok = num(j, &d->dump_mono_ns);
		else if (KEY("process"))
			ok = process_obj(j);
		else if (KEY("trigger"))
			ok = trigger_obj(j);
		else if (KEY("py_stacks"))
			ok = py_stacks_obj(j);
		else if (KEY("ring_size"))
			ok = num(j, &d->ring_size);
		else if (KEY("entries_recorded"))
			ok = num(j, &d->entries_recorded);
		else if (KEY("entries_overwritten"))
			ok = num(j, &d->entries_overwritten);
		else if (KEY("events_dropped"))
			ok = num(j, &d->events_dropped);
		else if (KEY("comms"))
			ok = array_of(j, comm_obj);
		else if (KEY("in_call"))
			ok = array_of(j, in_call_obj);
		else if (KEY("stacks"))
			ok = stacks_array(j);
		else if (KEY("nccl_version"))
			ok = str_field(j, d->nccl_version, sizeof(d->nccl_version));
		else if (KEY("stacks_error"))
			ok = str_field(j, d->stacks_error, sizeof(d->stacks_error));
		else
			ok = skip_value(j, 0);
		if (!ok)
			return false;
	}
	return !j->failed;
}

static int finish_parse(struct fr_dump *d, struct jp *j)
{
	if (!j->failed) {
		ws(j);
		if (j->p != j->end)
			fail(j, "trailing data after the dump");
	}
	if (!j->failed && strcmp(d->schema, "tptrace-fr")) {
		snprintf(d->err, sizeof(d->err), "not a tptrace-fr dump (schema \"%s\")", d->schema);
		j->failed = true;
	}
	if (!j->failed && d->version != 1 && d->version != 2) {
		snprintf(d->err, sizeof(d->err), "unsupported dump version %lld (this reads 1-2)",
			 (long long)d->version);
		j->failed = true;
	}
	/* sanity of what the analysis indexes with */
	if (d->global_rank != FR_UNK && (d->global_rank < 0 || d->global_rank >= FR_MAX_NRANKS))
		d->global_rank = FR_UNK;
	if (d->world_size != FR_UNK && (d->world_size <= 0 || d->world_size > FR_MAX_NRANKS))
		d->world_size = FR_UNK;
	if (j->failed)
		return strstr(d->err, "out of memory") ? -ENOMEM : -EINVAL;
	return 0;
}

int fr_dump__parse(struct fr_dump *d, const char *buf, size_t len)
{
	struct jp j = { .p = buf, .end = buf + len, .base = buf, .d = d };

	reset(d);
	/* a UTF-8 byte order mark is tolerated */
	if (len >= 3 && !memcmp(buf, "\xef\xbb\xbf", 3))
		j.p += 3;
	top_level(&j, true, false, NULL);
	return finish_parse(d, &j);
}

int fr_dump__parse_head(struct fr_dump *d, const char *buf, size_t len, size_t *entries_off)
{
	struct jp j = { .p = buf, .end = buf + len, .base = buf, .d = d };
	bool at = false;

	reset(d);
	if (len >= 3 && !memcmp(buf, "\xef\xbb\xbf", 3))
		j.p += 3;
	if (!top_level(&j, true, true, &at) || !at) {
		if (j.p >= j.end)
			return 1;	/* the head chunk ends before "entries" */
		return finish_parse(d, &j);
	}
	ws(&j);
	if (j.p >= j.end)
		return 1;
	if (*j.p != '[') {
		fail(&j, "expected an array");
		return finish_parse(d, &j);
	}
	*entries_off = (size_t)(j.p + 1 - buf);
	return 0;
}

static const char entry_mark[] = "{\"record_id\":";

int fr_dump__parse_tail(struct fr_dump *d, const char *tail, size_t len, size_t file_off,
			size_t keep_last)
{
	const char *m = memmem(tail, len, entry_mark, sizeof(entry_mark) - 1);
	struct jp j = { .end = tail + len, .base = tail, .d = d, .off0 = file_off };
	int last_comm = -1;

	if (!m)
		return 1;
	j.p = m;
	d->nr_entries = 0;
	/* entries up to the array's end, then the rest of the top-level object */
	for (;;) {
		if (!entry_obj(&j, &last_comm))
			break;
		if (eat(&j, ','))
			continue;
		if (!eat(&j, ']'))
			fail(&j, "expected ',' or ']'");
		break;
	}
	if (!j.failed)
		top_level(&j, false, false, NULL);
	if (!j.failed && keep_last && d->nr_entries > keep_last) {
		memmove(d->entries, d->entries + (d->nr_entries - keep_last),
			keep_last * sizeof(*d->entries));
		d->nr_entries = keep_last;
	}
	return finish_parse(d, &j);
}

void fr_dump__release(struct fr_dump *d)
{
	if (!d)
		return;
	free(d->comms);
	free(d->in_calls);
	free(d->entries);
	free(d->snaps);
	free(d->threads);
	free(d->pystacks);
	free(d->pyframes);
	memset(d, 0, sizeof(*d));
}

/* ---- for readers of other formats (fr_torch.c) ---- */
void fr_dump__reset(struct fr_dump *d)
{
	reset(d);
}

int fr_dump__comm(struct fr_dump *d, const char *id)
{
	int idx = find_comm(d, id, true);

	return idx == -3 ? -ENOMEM : idx < 0 ? -E2BIG : idx;
}

int fr_op_from_name(const char *s, size_t len)
{
	return lookup(op_names, FR_OP__COUNT, s, len, FR_OP_OTHER);
}
