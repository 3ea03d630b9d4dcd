// SPDX-License-Identifier: MIT
/* jsonlex: the one JSON lexer of the offline readers (tptrace-fr's dump parser, fr_parse.c,
 * and tptrace report's trace reader, report_read.c).
 *
 * A cursor over bytes in memory (struct jlex: not opaque on purpose, the readers keep it on
 * their stack and these functions inline into their per-object loops: reading 16k ranks'
 * dumps is bound by this code). The input is untrusted: every access checks j->p < j->end,
 * nesting is bounded by JL_MAX_DEPTH, strings are copied with a cap, integers saturate. The
 * first error sets j->failed and writes one line, "<what> at byte N" (or "unexpected end of
 * input at byte N"), into j->err; later errors keep the first.
 *
 * Values are pulled, never built into a tree: jl_next_key / jl_next_elem walk a container,
 * jl_str / jl_int / jl_number read a scalar, jl_skip passes over anything. jl_extent finds
 * where a value ends in a buffer that may hold only its beginning (streamed input).
 */
#ifndef TPTRACE_JSONLEX_H
#define TPTRACE_JSONLEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define JL_MAX_DEPTH 64
/* what jl_int stores for null, a string or a container: unknown, never 0 */
#define JL_UNK INT64_MIN

struct jlex {
	const char *p, *end;	/* cursor, end of the input */
	const char *base;	/* byte 0 of the input, for error offsets */
	size_t off0;		/* file offset of base (a reader that starts mid-file) */
	bool failed;
	char *err;		/* the first error's line (errsz bytes, NUL-terminated) */
	size_t errsz;
};

/* A cursor over buf[0, len) whose errors go to err[0, errsz). */
static inline void jl_init(struct jlex *j, const char *buf, size_t len, char *err, size_t errsz)
{
	*j = (struct jlex){ .p = buf, .end = buf + len, .base = buf, .err = err, .errsz = errsz };
}

/* Records the first error: what and the cursor's byte offset (past the end: "unexpected end
 * of input"). Returns false, for `return jl_fail(j, "...")`. */
bool jl_fail(struct jlex *j, const char *what);

/* End (exclusive) of the JSON value at b[0, n): 0 when b holds only its beginning (unless
 * at_eof: then a scalar ends at n), -1 malformed nesting. Strings and nesting are tracked,
 * scalars end at a delimiter; the value's content is not checked (jl_skip does that). */
long jl_extent(const char *b, size_t n, bool at_eof);

static inline void jl_ws(struct jlex *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t'))
		j->p++;
}

static inline bool jl_eat(struct jlex *j, char c)
{
	jl_ws(j);
	if (j->p < j->end && *j->p == c) {
		j->p++;
		return true;
	}
	return false;
}

/* First '"' or '\\' at or after p (end if none), 8 bytes at a time: the classic
 * "has zero byte" test on the input xor the byte; the lowest flagged byte is exact. */
static inline const char *jl_scan_quote(const char *p, const char *end)
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

static inline int jl_hexval(char c)
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
static inline void jl_copy_short(char *out, const char *src, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		memcpy(out + i, src + i, 8);
	for (; i < n; i++)
		out[i] = src[i];
}

/* Reads a JSON string at j->p into out (NUL-terminated, truncated to cap-1; out may be NULL to
 * skip). Returns the decoded length kept, or -1 on error. Non-ASCII \u escapes become '?'. */
static inline int jl_str(struct jlex *j, char *out, size_t cap)
{
	size_t n = 0;
	const char *q;

	jl_ws(j);
	if (j->p >= j->end || *j->p != '"')
		return jl_fail(j, "expected a string"), -1;
	j->p++;
	/* fast path, nearly every string: no escape before the closing quote (strings are
	 * short: a byte loop beats memchr's call overhead) */
	q = jl_scan_quote(j->p, j->end);
	if (q < j->end && *q == '"') {
		n = q - j->p;
		if (out) {
			if (n >= cap)
				n = cap - 1;
			jl_copy_short(out, j->p, n);
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
				return j->p = j->end, jl_fail(j, ""), -1;
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
					return j->p = j->end, jl_fail(j, ""), -1;
				for (int i = 0; i < 4; i++) {
					int h = jl_hexval(j->p[i]);

					if (h < 0)
						return jl_fail(j, "bad \\u escape"), -1;
					v = v * 16 + h;
				}
				j->p += 4;
				c = v > 0 && v < 0x80 ? (char)v : '?';
				break;
			}
			default:
				j->p--;
				return jl_fail(j, "bad escape"), -1;
			}
		}
		if (n + 1 < cap)
			out[n] = c;
		n++;
	}
	return jl_fail(j, ""), -1;
}

static inline bool jl_literal(struct jlex *j, const char *lit, size_t len)
{
	if ((size_t)(j->end - j->p) < len)
		return j->p = j->end, jl_fail(j, "");
	if (memcmp(j->p, lit, len))
		return jl_fail(j, "bad literal");
	j->p += len;
	return true;
}

/* the characters a JSON number is made of, as a table: skipped numbers are most of a dump */
static const bool jl_num_chars[256] = {
	['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
	['8'] = 1, ['9'] = 1, ['-'] = 1, ['+'] = 1, ['.'] = 1, ['e'] = 1, ['E'] = 1,
};

static inline bool jl_is_num_char(char c)
{
	return jl_num_chars[(unsigned char)c];
}

/* Reads a number, null, true or false into *out (null -> JL_UNK, booleans -> 0/1, fractions
 * truncated, out-of-range saturated). Strings and containers are skipped and read as JL_UNK:
 * a field of the wrong type is unknown, not fatal. */
static inline bool jl_skip(struct jlex *j, int depth);

/* all 8 bytes are ASCII digits: every high nibble is 3, and adding 6 keeps it 3 (no byte
 * reaches 0x3a); a non-digit fails one test or the other */
static inline bool jl_digits8(uint64_t w)
{
	return ((w & 0xf0f0f0f0f0f0f0f0ULL) | (((w + 0x0606060606060606ULL) &
		0xf0f0f0f0f0f0f0f0ULL) >> 4)) == 0x3333333333333333ULL;
}

/* the value of 8 ASCII digits, the first in the lowest byte: pairs, then quads, then both */
static inline uint64_t jl_digits8_value(uint64_t w)
{
	w -= 0x3030303030303030ULL;
	w = w * 10 + (w >> 8);
	return (((w & 0x000000ff000000ffULL) * (100 + (1000000ULL << 32))) +
		(((w >> 16) & 0x000000ff000000ffULL) * (1 + (10000ULL << 32)))) >> 32;
}

static inline bool jl_int(struct jlex *j, int64_t *out)
{
	const char *s;
	bool neg = false, frac = false;
	uint64_t v = 0;
	bool overflow = false;

	jl_ws(j);
	*out = JL_UNK;
	if (j->p >= j->end)
		return jl_fail(j, "");
	switch (*j->p) {
	case 'n': return jl_literal(j, "null", 4);
	case 't': *out = 1; return jl_literal(j, "true", 4);
	case 'f': *out = 0; return jl_literal(j, "false", 5);
	case '"': case '[': case '{': return jl_skip(j, 0);
	}
	s = j->p;
	if (*j->p == '-') {
		neg = true;
		j->p++;
	}
	if (j->p >= j->end || *j->p < '0' || *j->p > '9')
		return jl_fail(j, "bad number");
	/* up to 16 digits 8 at a time (a nanosecond time has 19), then up to 19 digits cannot
	 * overflow 64 bits: check only past them */
	int nd = 0;

	while (nd < 16 && j->end - j->p >= 8) {
		uint64_t w;

		memcpy(&w, j->p, 8);
		if (!jl_digits8(w))
			break;
		v = v * 100000000ULL + jl_digits8_value(w);
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
		while (j->p < j->end && jl_is_num_char(*j->p))
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
			*out = JL_UNK;
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

static inline bool jl_skip(struct jlex *j, int depth)
{
	int64_t dummy;

	jl_ws(j);
	if (j->p >= j->end)
		return jl_fail(j, "");
	if (depth > JL_MAX_DEPTH)
		return jl_fail(j, "nesting too deep");
	switch (*j->p) {
	case '"':
		return jl_str(j, NULL, 0) >= 0;
	case '{':
		j->p++;
		if (jl_eat(j, '}'))
			return true;
		do {
			if (jl_str(j, NULL, 0) < 0)
				return false;
			if (!jl_eat(j, ':'))
				return jl_fail(j, "expected ':'");
			if (!jl_skip(j, depth + 1))
				return false;
		} while (jl_eat(j, ','));
		return jl_eat(j, '}') ? true : jl_fail(j, "expected ',' or '}'");
	case '[':
		j->p++;
		if (jl_eat(j, ']'))
			return true;
		do {
			if (!jl_skip(j, depth + 1))
				return false;
		} while (jl_eat(j, ','));
		return jl_eat(j, ']') ? true : jl_fail(j, "expected ',' or ']'");
	case 't': case 'f': case 'n':
		return jl_int(j, &dummy);
	default:
		/* a number nobody reads: check its shape, do not convert it */
		if (*j->p == '-')
			j->p++;
		if (j->p >= j->end || *j->p < '0' || *j->p > '9')
			return jl_fail(j, "bad number");
		while (j->p < j->end && jl_is_num_char(*j->p))
			j->p++;
		return true;
	}
}

/* Iterates the members of an object: call with *first = true; returns true with the key in
 * key[] while there is one, false at '}' or on error (check j->failed). */
static inline bool jl_next_key(struct jlex *j, bool *first, char *key, size_t cap, int *klen)
{
	const char *q;

	jl_ws(j);
	if (*first) {
		*first = false;
		if (!jl_eat(j, '{'))
			return jl_fail(j, "expected an object");
		if (jl_eat(j, '}'))
			return false;
	} else {
		if (jl_eat(j, '}'))
			return false;
		if (!jl_eat(j, ','))
			return jl_fail(j, "expected ',' or '}'");
	}
	/* keys are plain ASCII in practice: copy only up to cap, decode escapes the slow way */
	jl_ws(j);
	if (j->p < j->end && *j->p == '"') {
		q = jl_scan_quote(j->p + 1, j->end);
		if (q < j->end && *q == '"') {
			size_t n = q - (j->p + 1);

			*klen = n < cap ? (int)n : (int)cap - 1;
			memcpy(key, j->p + 1, *klen);
			j->p = q + 1;
			goto colon;
		}
	}
	*klen = jl_str(j, key, cap);
	if (*klen < 0)
		return false;
colon:
	if (j->p < j->end && *j->p == ':') {
		j->p++;
		return true;
	}
	if (!jl_eat(j, ':'))
		return jl_fail(j, "expected ':'");
	return true;
}

/* Same for array elements: true when an element follows (j->p at it). */
static inline bool jl_next_elem(struct jlex *j, bool *first)
{
	if (*first) {
		*first = false;
		if (!jl_eat(j, '['))
			return jl_fail(j, "expected an array");
		return !jl_eat(j, ']');
	}
	if (jl_eat(j, ']'))
		return false;
	if (!jl_eat(j, ','))
		return jl_fail(j, "expected ',' or ']'");
	return true;
}

static inline bool jl_is_null(struct jlex *j)
{
	jl_ws(j);
	return j->p < j->end && *j->p == 'n';
}

/* A string field that may be null (stays "" then) or of another type (skipped). */
static inline bool jl_str_field(struct jlex *j, char *out, size_t cap)
{
	jl_ws(j);
	out[0] = 0;
	if (j->p < j->end && *j->p == '"')
		return jl_str(j, out, cap) >= 0;
	return jl_skip(j, 0);
}

/* A number token at the cursor, checked for JSON's shape (a sign, digits, a fraction, an
 * exponent) and passed: [*s, *s + *n). False with the error set when there is none. */
static inline bool jl_number(struct jlex *j, const char **s, size_t *n)
{
	const char *q;

	jl_ws(j);
	q = j->p;
	if (q < j->end && *q == '-')
		q++;
	if (q >= j->end || *q < '0' || *q > '9') {
		if (q >= j->end)
			j->p = q;
		return jl_fail(j, "bad number");
	}
	while (q < j->end && jl_is_num_char(*q))
		q++;
	*s = j->p;
	*n = (size_t)(q - j->p);
	j->p = q;
	return true;
}

#endif
