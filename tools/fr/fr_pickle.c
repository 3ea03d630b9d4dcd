// SPDX-License-Identifier: MIT
/* fr_pickle: bounded, data-only pickle reader and a protocol-2 writer (see fr_pickle.h).
 *
 * A PyTorch flight-recorder dump starts like this (TorchScript Pickler, protocol 2):
 *   80 02            PROTO 2
 *   7d               EMPTY_DICT
 *   28               MARK
 *   58 07 00 00 00 "version"  BINUNICODE
 *   58 04 00 00 00 "2.10"     BINUNICODE
 *   ...
 *   75               SETITEMS
 *   2e               STOP
 * Python's own pickle (protocols 2-5) adds FRAME, MEMOIZE/BINPUT and the short forms.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fr_pickle.h"
#include "growbuf.h"

/* the opcodes read here (Python's Lib/pickletools.py names them) */
enum {
	OP_MARK = '(', OP_STOP = '.', OP_POP = '0', OP_POP_MARK = '1', OP_DUP = '2',
	OP_BININT = 'J', OP_BININT1 = 'K', OP_BININT2 = 'M', OP_NONE = 'N',
	OP_BINSTRING = 'T', OP_SHORT_BINSTRING = 'U', OP_BINUNICODE = 'X', OP_BINFLOAT = 'G',
	OP_APPEND = 'a', OP_APPENDS = 'e', OP_DICT = 'd', OP_EMPTY_DICT = '}', OP_LIST = 'l',
	OP_EMPTY_LIST = ']', OP_BINGET = 'h', OP_LONG_BINGET = 'j', OP_BINPUT = 'q',
	OP_LONG_BINPUT = 'r', OP_SETITEM = 's', OP_SETITEMS = 'u', OP_TUPLE = 't',
	OP_EMPTY_TUPLE = ')', OP_BINBYTES = 'B', OP_SHORT_BINBYTES = 'C',
	OP_PROTO = 0x80, OP_TUPLE1 = 0x85, OP_TUPLE2 = 0x86, OP_TUPLE3 = 0x87, OP_NEWTRUE = 0x88,
	OP_NEWFALSE = 0x89, OP_LONG1 = 0x8a, OP_LONG4 = 0x8b, OP_SHORT_BINUNICODE = 0x8c,
	OP_BINUNICODE8 = 0x8d, OP_BINBYTES8 = 0x8e, OP_MEMOIZE = 0x94, OP_FRAME = 0x95,
};

/* opcodes that import, call or reach outside the data: refused by name */
static const char *refused_name(int op)
{
	switch (op) {
	case 'c': return "GLOBAL";
	case 0x93: return "STACK_GLOBAL";
	case 'R': return "REDUCE";
	case 'b': return "BUILD";
	case 'i': return "INST";
	case 'o': return "OBJ";
	case 0x81: return "NEWOBJ";
	case 0x92: return "NEWOBJ_EX";
	case 'P': return "PERSID";
	case 'Q': return "BINPERSID";
	case 0x82: case 0x83: case 0x84: return "EXT";
	case 0x97: return "NEXT_BUFFER";
	case 0x98: return "READONLY_BUFFER";
	default: return NULL;
	}
}

struct pk {
	struct pk_doc *doc;
	const uint8_t *base, *p, *end;
	uint32_t *stack;
	uint32_t nr_stack, cap_stack;
	uint32_t marks[PK_MAX_MARKS];
	uint32_t nr_marks;
	uint32_t *memo;		/* UINT32_MAX: empty slot */
	uint32_t cap_memo, nr_memo;	/* nr_memo: MEMOIZE's next slot */
	bool nomem;
};

static int fail(struct pk *k, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (k->doc->err[0])
		return -EINVAL;
	n = snprintf(k->doc->err, sizeof(k->doc->err), "pickle offset %zu: ",
		     (size_t)(k->p - k->base));
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(k->doc->err))
		vsnprintf(k->doc->err + n, sizeof(k->doc->err) - n, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static int nomem(struct pk *k)
{
	k->nomem = true;
	snprintf(k->doc->err, sizeof(k->doc->err), "out of memory");
	return -ENOMEM;
}

/* a new value; its index, or -1 (error set) */
static int64_t new_val(struct pk *k, uint8_t type)
{
	struct pk_doc *d = k->doc;
	struct pk_val *v;

	if (d->nr_vals >= PK_MAX_OBJECTS) {
		fail(k, "more than %u objects", PK_MAX_OBJECTS);
		return -1;
	}
	if (ARRAY_RESERVE(d->vals, d->cap_vals, d->nr_vals + 1, 16)) {
		nomem(k);
		return -1;
	}
	v = &d->vals[d->nr_vals];
	memset(v, 0, sizeof(*v));
	v->type = type;
	return d->nr_vals++;
}

static int push(struct pk *k, uint32_t idx)
{
	if (k->nr_stack >= PK_MAX_STACK)
		return fail(k, "stack deeper than %u", PK_MAX_STACK);
	if (ARRAY_RESERVE(k->stack, k->cap_stack, k->nr_stack + 1, 16))
		return nomem(k);
	k->stack[k->nr_stack++] = idx;
	return 0;
}

static int push_new(struct pk *k, uint8_t type, struct pk_val **out)
{
	int64_t i = new_val(k, type);

	if (i < 0)
		return k->nomem ? -ENOMEM : -EINVAL;
	if (out)
		*out = &k->doc->vals[i];
	return push(k, (uint32_t)i);
}

/* bytes [p, p+n) exist; else the error names what was cut */
static bool have(struct pk *k, uint64_t n, const char *what)
{
	if ((uint64_t)(k->end - k->p) >= n)
		return true;
	fail(k, "%s runs past the end of the input (%llu bytes, %zu left)", what,
	     (unsigned long long)n, (size_t)(k->end - k->p));
	return false;
}

static uint64_t le(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

#define PK_CHUNK_KIDS (1u << 18)

/* kids of at least need slots for cv (old ones copied): from the current chunk, or a new one */
static int kids_grow(struct pk *k, struct pk_val *cv, uint32_t need)
{
	struct pk_doc *d = k->doc;
	uint32_t ncap = cv->cap ? cv->cap : 4, *p;

	while (ncap < need)
		ncap = ncap > UINT32_MAX / 2 ? need : ncap * 2;
	if (ncap > d->bump_left) {
		size_t sz = ncap > PK_CHUNK_KIDS ? ncap : PK_CHUNK_KIDS;

		if (ARRAY_RESERVE(d->chunks, d->cap_chunks, d->nr_chunks + 1, 16))
			return nomem(k);
		if (!(p = malloc(sz * sizeof(uint32_t))))
			return nomem(k);
		d->chunks[d->nr_chunks++] = p;
		d->bump = p;
		d->bump_left = sz;
	}
	p = d->bump;
	d->bump += ncap;
	d->bump_left -= ncap;
	if (cv->cap)
		memcpy(p, cv->kids, (size_t)cv->cap * sizeof(uint32_t));
	cv->kids = p;
	cv->cap = ncap;
	return 0;
}

/* stores child at kids[pos] of container c; depths follow so a nest of any shape (built
 * inside out, or by memo references) is capped */
static int add_kid(struct pk *k, uint32_t c, uint32_t child, uint32_t pos)
{
	struct pk_val *cv = &k->doc->vals[c];
	uint8_t cd = k->doc->vals[child].depth;

	if (cd + 1 > PK_MAX_DEPTH)
		return fail(k, "containers nested deeper than %d", PK_MAX_DEPTH);
	if (pos >= cv->cap && kids_grow(k, cv, pos + 1))
		return k->nomem ? -ENOMEM : -EINVAL;
	cv->kids[pos] = child;
	if (cd + 1 > cv->depth)
		cv->depth = cd + 1;
	return 0;
}

static int pop_mark(struct pk *k, uint32_t *first)
{
	if (!k->nr_marks)
		return fail(k, "no MARK to close");
	*first = k->marks[--k->nr_marks];
	if (*first > k->nr_stack)
		return fail(k, "MARK above the stack");
	return 0;
}

/* items stack[from..) move into a new list/tuple (or the pairs into a dict) */
static int collect(struct pk *k, uint32_t target, uint32_t from, bool pairs)
{
	uint32_t n = k->nr_stack - from;
	struct pk_val *t;

	if (pairs && n % 2)
		return fail(k, "odd number of items for a dict");
	t = &k->doc->vals[target];
	/* the whole batch at once: one copy, not one per doubling */
	if ((uint64_t)(pairs ? 2 * (uint64_t)t->n : t->n) + n < UINT32_MAX / 2 &&
	    (pairs ? 2 * t->n : t->n) + n > t->cap &&
	    kids_grow(k, t, (pairs ? 2 * t->n : t->n) + n))
		return k->nomem ? -ENOMEM : -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		int err;

		t = &k->doc->vals[target];
		if (t->n >= UINT32_MAX / 2 - 1)
			return fail(k, "container of too many items");
		err = add_kid(k, target, k->stack[from + i], pairs ? 2 * t->n + i % 2 : t->n);
		if (err)
			return err;
		t = &k->doc->vals[target];
		if (!pairs || i % 2)
			t->n++;
	}
	k->nr_stack = from;
	return 0;
}

static int memo_put(struct pk *k, uint64_t slot)
{
	if (!k->nr_stack)
		return fail(k, "memo store from an empty stack");
	if (slot >= PK_MAX_MEMO)
		return fail(k, "memo slot %llu beyond %u", (unsigned long long)slot, PK_MAX_MEMO);
	if (slot >= k->cap_memo) {
		uint32_t old = k->cap_memo;

		if (ARRAY_RESERVE(k->memo, k->cap_memo, (uint32_t)slot + 1, 16))
			return nomem(k);
		memset(k->memo + old, 0xff, (size_t)(k->cap_memo - old) * sizeof(*k->memo));
	}
	k->memo[slot] = k->stack[k->nr_stack - 1];
	return 0;
}

static int memo_get(struct pk *k, uint64_t slot)
{
	if (slot >= k->cap_memo || k->memo[slot] == UINT32_MAX)
		return fail(k, "memo slot %llu read before it was stored", (unsigned long long)slot);
	return push(k, k->memo[slot]);
}

static int text(struct pk *k, uint8_t type, int lenbytes, const char *what)
{
	struct pk_val *v;
	uint64_t n;
	int err;

	if (!have(k, lenbytes, what))
		return -EINVAL;
	n = le(k->p, lenbytes);
	k->p += lenbytes;
	if (n > UINT32_MAX)
		return fail(k, "%s of %llu bytes", what, (unsigned long long)n);
	if (!have(k, n, what))
		return -EINVAL;
	if ((err = push_new(k, type, &v)))
		return err;
	v->s = (const char *)k->p;
	v->n = (uint32_t)n;
	k->p += n;
	return 0;
}

/* NONE, booleans, integers and floats: pushed */
static int op_scalar(struct pk *k, int op)
{
	struct pk_val *v;
	int err = 0;

	switch (op) {
	case OP_NONE:
		err = push_new(k, PK_NONE, NULL);
		break;
	case OP_NEWTRUE:
	case OP_NEWFALSE:
		if (!(err = push_new(k, PK_BOOL, &v)))
			v->i = op == OP_NEWTRUE;
		break;
	case OP_BININT:
		if (!have(k, 4, "BININT"))
			return -EINVAL;
		if (!(err = push_new(k, PK_INT, &v)))
			v->i = (int32_t)(uint32_t)le(k->p, 4);
		k->p += 4;
		break;
	case OP_BININT1:
		if (!have(k, 1, "BININT1"))
			return -EINVAL;
		if (!(err = push_new(k, PK_INT, &v)))
			v->i = *k->p;
		k->p += 1;
		break;
	case OP_BININT2:
		if (!have(k, 2, "BININT2"))
			return -EINVAL;
		if (!(err = push_new(k, PK_INT, &v)))
			v->i = (int64_t)le(k->p, 2);
		k->p += 2;
		break;
	case OP_LONG1:
	case OP_LONG4: {
		int lb = op == OP_LONG1 ? 1 : 4;
		uint64_t n, u;

		if (!have(k, lb, "LONG"))
			return -EINVAL;
		n = le(k->p, lb);
		k->p += lb;
		if (n > 8)
			return fail(k, "integer of %llu bytes (this reads up to 64 bits)",
				    (unsigned long long)n);
		if (!have(k, n, "LONG"))
			return -EINVAL;
		u = le(k->p, (int)n);
		if (n && n < 8 && (k->p[n - 1] & 0x80))	/* two's complement: sign-extend */
			u |= ~0ULL << (8 * n);
		k->p += n;
		if (!(err = push_new(k, PK_INT, &v)))
			v->i = (int64_t)u;
		break;
	}
	case OP_BINFLOAT: {
		uint64_t u = 0;
		double f;

		if (!have(k, 8, "BINFLOAT"))
			return -EINVAL;
		for (int i = 0; i < 8; i++)	/* big-endian */
			u = u << 8 | k->p[i];
		k->p += 8;
		memcpy(&f, &u, sizeof(f));
		if (!(err = push_new(k, PK_FLOAT, &v)))
			v->f = f;
		break;
	}
	}
	return err;
}

/* tuples, lists and dicts: built from the stack, or added to */
static int op_container(struct pk *k, int op)
{
	uint32_t first = 0, a;
	int64_t idx;
	int err = 0;

	switch (op) {
	case OP_TUPLE1:
	case OP_TUPLE2:
	case OP_TUPLE3: {
		uint32_t n = op - OP_TUPLE1 + 1;

		if (k->nr_stack < n)
			return fail(k, "TUPLE%u from %u values", n, k->nr_stack);
		if ((idx = new_val(k, PK_TUPLE)) < 0)
			return k->nomem ? -ENOMEM : -EINVAL;
		if ((err = collect(k, (uint32_t)idx, k->nr_stack - n, false)))
			return err;
		err = push(k, (uint32_t)idx);
		break;
	}
	case OP_TUPLE:
	case OP_LIST:
	case OP_DICT:
		if ((err = pop_mark(k, &first)))
			return err;
		idx = new_val(k, op == OP_TUPLE ? PK_TUPLE : op == OP_LIST ? PK_LIST : PK_DICT);
		if (idx < 0)
			return k->nomem ? -ENOMEM : -EINVAL;
		if ((err = collect(k, (uint32_t)idx, first, op == OP_DICT)))
			return err;
		err = push(k, (uint32_t)idx);
		break;
	case OP_APPEND:
		if (k->nr_stack < 2)
			return fail(k, "APPEND with %u values", k->nr_stack);
		a = k->stack[k->nr_stack - 2];
		if (k->doc->vals[a].type != PK_LIST)
			return fail(k, "APPEND to a non-list");
		if ((err = collect(k, a, k->nr_stack - 1, false)))
			return err;
		break;
	case OP_APPENDS:
		if ((err = pop_mark(k, &first)))
			return err;
		if (!first)
			return fail(k, "APPENDS without a list");
		a = k->stack[first - 1];
		if (k->doc->vals[a].type != PK_LIST)
			return fail(k, "APPENDS to a non-list");
		err = collect(k, a, first, false);
		break;
	case OP_SETITEM:
		if (k->nr_stack < 3)
			return fail(k, "SETITEM with %u values", k->nr_stack);
		a = k->stack[k->nr_stack - 3];
		if (k->doc->vals[a].type != PK_DICT)
			return fail(k, "SETITEM on a non-dict");
		err = collect(k, a, k->nr_stack - 2, true);
		break;
	case OP_SETITEMS:
		if ((err = pop_mark(k, &first)))
			return err;
		if (!first)
			return fail(k, "SETITEMS without a dict");
		a = k->stack[first - 1];
		if (k->doc->vals[a].type != PK_DICT)
			return fail(k, "SETITEMS on a non-dict");
		err = collect(k, a, first, true);
		break;
	}
	return err;
}

/* the memo: PUT and MEMOIZE store the top of the stack, GET pushes it again */
static int op_memo(struct pk *k, int op)
{
	uint32_t b;
	int err = 0;

	switch (op) {
	case OP_BINPUT:
		if (!have(k, 1, "BINPUT"))
			return -EINVAL;
		err = memo_put(k, *k->p++);
		break;
	case OP_LONG_BINPUT:
		if (!have(k, 4, "LONG_BINPUT"))
			return -EINVAL;
		b = (uint32_t)le(k->p, 4);
		k->p += 4;
		err = memo_put(k, b);
		break;
	case OP_MEMOIZE:
		err = memo_put(k, k->nr_memo);
		if (!err)
			k->nr_memo++;
		break;
	case OP_BINGET:
		if (!have(k, 1, "BINGET"))
			return -EINVAL;
		err = memo_get(k, *k->p++);
		break;
	case OP_LONG_BINGET:
		if (!have(k, 4, "LONG_BINGET"))
			return -EINVAL;
		b = (uint32_t)le(k->p, 4);
		k->p += 4;
		err = memo_get(k, b);
		break;
	}
	return err;
}

static int run(struct pk *k)
{
	uint32_t first = 0;
	int err = 0, op;
	const char *bad;

	while (k->p < k->end) {
		op = *k->p++;
		switch (op) {
		case OP_PROTO:
			if (!have(k, 1, "PROTO"))
				return -EINVAL;
			k->doc->proto = *k->p++;
			if (k->doc->proto < 2 || k->doc->proto > 5)
				return fail(k, "pickle protocol %d (this reads 2-5)", k->doc->proto);
			break;
		case OP_FRAME:	/* framing only groups the bytes for the reader: step over */
			if (!have(k, 8, "FRAME"))
				return -EINVAL;
			if (le(k->p, 8) > (uint64_t)(k->end - k->p - 8))
				return fail(k, "FRAME runs past the end of the input");
			k->p += 8;
			break;
		case OP_STOP:
			if (k->nr_stack != 1 || k->nr_marks)
				return fail(k, "STOP with %u values and %u marks left", k->nr_stack,
					    k->nr_marks);
			if (k->p != k->end)
				return fail(k, "%zu bytes of trailing data after STOP",
					    (size_t)(k->end - k->p));
			k->doc->root = k->stack[0];
			return 0;
		case OP_MARK:
			if (k->nr_marks >= PK_MAX_MARKS)
				return fail(k, "more than %d open MARKs", PK_MAX_MARKS);
			k->marks[k->nr_marks++] = k->nr_stack;
			break;
		case OP_POP:
			if (k->nr_marks && k->marks[k->nr_marks - 1] == k->nr_stack)
				k->nr_marks--;	/* POP of a MARK (Python allows it) */
			else if (!k->nr_stack)
				return fail(k, "POP from an empty stack");
			else
				k->nr_stack--;
			break;
		case OP_POP_MARK:
			if ((err = pop_mark(k, &first)))
				return err;
			k->nr_stack = first;
			break;
		case OP_DUP:
			if (!k->nr_stack)
				return fail(k, "DUP of an empty stack");
			err = push(k, k->stack[k->nr_stack - 1]);
			break;
		case OP_NONE:
		case OP_NEWTRUE:
		case OP_NEWFALSE:
		case OP_BININT:
		case OP_BININT1:
		case OP_BININT2:
		case OP_LONG1:
		case OP_LONG4:
		case OP_BINFLOAT:
			err = op_scalar(k, op);
			break;
		case OP_SHORT_BINUNICODE:
			err = text(k, PK_STR, 1, "SHORT_BINUNICODE");
			break;
		case OP_BINUNICODE:
			err = text(k, PK_STR, 4, "BINUNICODE");
			break;
		case OP_BINUNICODE8:
			err = text(k, PK_STR, 8, "BINUNICODE8");
			break;
		case OP_SHORT_BINSTRING:
			err = text(k, PK_STR, 1, "SHORT_BINSTRING");
			break;
		case OP_BINSTRING:
			err = text(k, PK_STR, 4, "BINSTRING");
			break;
		case OP_SHORT_BINBYTES:
			err = text(k, PK_BYTES, 1, "SHORT_BINBYTES");
			break;
		case OP_BINBYTES:
			err = text(k, PK_BYTES, 4, "BINBYTES");
			break;
		case OP_BINBYTES8:
			err = text(k, PK_BYTES, 8, "BINBYTES8");
			break;
		case OP_EMPTY_DICT:
			err = push_new(k, PK_DICT, NULL);
			break;
		case OP_EMPTY_LIST:
			err = push_new(k, PK_LIST, NULL);
			break;
		case OP_EMPTY_TUPLE:
			err = push_new(k, PK_TUPLE, NULL);
			break;
		case OP_TUPLE1:
		case OP_TUPLE2:
		case OP_TUPLE3:
		case OP_TUPLE:
		case OP_LIST:
		case OP_DICT:
		case OP_APPEND:
		case OP_APPENDS:
		case OP_SETITEM:
		case OP_SETITEMS:
			err = op_container(k, op);
			break;
		case OP_BINPUT:
		case OP_LONG_BINPUT:
		case OP_MEMOIZE:
		case OP_BINGET:
		case OP_LONG_BINGET:
			err = op_memo(k, op);
			break;
		default:
			k->p--;
			bad = refused_name(op);
			if (bad)
				return fail(k, "refused opcode %s: a flight-recorder dump holds only "
					    "data, and tptrace-fr never imports or calls anything", bad);
			return fail(k, "unsupported opcode 0x%02x (not one a flight-recorder dump "
				    "uses)", op);
		}
		if (err)
			return err;
	}
	return fail(k, "the input ends before STOP (truncated)");
}

bool pk_is_pickle(const void *buf, size_t len)
{
	const uint8_t *p = buf;

	return len >= 2 && p[0] == OP_PROTO && p[1] >= 2 && p[1] <= 5;
}

int pk_doc__parse(struct pk_doc *doc, const void *buf, size_t len)
{
	struct pk k = { .doc = doc, .base = buf, .p = buf, .end = (const uint8_t *)buf + len };
	int err;

	memset(doc, 0, sizeof(*doc));
	if (!pk_is_pickle(buf, len)) {
		snprintf(doc->err, sizeof(doc->err), "not a pickle of protocol 2-5 (no 0x80 0x02..05 "
			 "at the start)");
		return -EINVAL;
	}
	err = run(&k);
	if (err && k.nomem)
		err = -ENOMEM;
	free(k.stack);
	free(k.memo);
	return err;
}

void pk_doc__free(struct pk_doc *doc)
{
	if (!doc)
		return;
	for (size_t i = 0; i < doc->nr_chunks; i++)
		free(doc->chunks[i]);
	free(doc->chunks);
	doc->chunks = NULL;
	doc->nr_chunks = doc->cap_chunks = doc->bump_left = 0;
	free(doc->vals);
	doc->vals = NULL;
	doc->nr_vals = doc->cap_vals = 0;
}

bool pk_str_eq(const struct pk_val *v, const char *s)
{
	size_t n = strlen(s);

	return v && v->type == PK_STR && v->n == n && !memcmp(v->s, s, n);
}

bool pk_str_copy(const struct pk_val *v, char *out, size_t cap)
{
	size_t n;

	if (!v || v->type != PK_STR || !cap)
		return false;
	n = v->n < cap - 1 ? v->n : cap - 1;
	memcpy(out, v->s, n);
	out[n] = 0;
	return true;
}

const struct pk_val *pk_get(const struct pk_doc *doc, const struct pk_val *dict, const char *key)
{
	if (!dict || dict->type != PK_DICT)
		return NULL;
	for (uint32_t i = 0; i < dict->n; i++)
		if (pk_str_eq(&doc->vals[dict->kids[2 * i]], key))
			return &doc->vals[dict->kids[2 * i + 1]];
	return NULL;
}

const struct pk_val *pk_item(const struct pk_doc *doc, const struct pk_val *seq, uint32_t i)
{
	if (!seq || (seq->type != PK_LIST && seq->type != PK_TUPLE) || i >= seq->n)
		return NULL;
	return &doc->vals[seq->kids[i]];
}

/* ---- writer ---- */
static void out_bytes(struct pk_out *o, const void *p, size_t n)
{
	growbuf__add(&o->b, p, n);
}

static void out_op(struct pk_out *o, uint8_t op)
{
	out_bytes(o, &op, 1);
}

void pk_out_begin(struct pk_out *o)
{
	static const uint8_t proto[2] = { OP_PROTO, 2 };

	out_bytes(o, proto, 2);
}

void pk_out_end(struct pk_out *o) { out_op(o, OP_STOP); }
void pk_out_none(struct pk_out *o) { out_op(o, OP_NONE); }
void pk_out_bool(struct pk_out *o, bool b) { out_op(o, b ? OP_NEWTRUE : OP_NEWFALSE); }
void pk_out_dict(struct pk_out *o) { out_op(o, OP_EMPTY_DICT); }
void pk_out_list(struct pk_out *o) { out_op(o, OP_EMPTY_LIST); }
void pk_out_mark(struct pk_out *o) { out_op(o, OP_MARK); }
void pk_out_setitems(struct pk_out *o) { out_op(o, OP_SETITEMS); }
void pk_out_appends(struct pk_out *o) { out_op(o, OP_APPENDS); }
void pk_out_tuple2(struct pk_out *o) { out_op(o, OP_TUPLE2); }

void pk_out_int(struct pk_out *o, int64_t v)
{
	uint8_t b[10];
	int n = 8;

	if (v >= INT32_MIN && v <= INT32_MAX) {
		uint32_t u = (uint32_t)(int32_t)v;

		b[0] = OP_BININT;
		for (int i = 0; i < 4; i++)
			b[1 + i] = (uint8_t)(u >> (8 * i));
		out_bytes(o, b, 5);
		return;
	}
	/* LONG1: little-endian two's complement, as few bytes as keep the sign */
	while (n > 1) {
		int64_t hi = v >> (8 * (n - 1) - 1);

		if (hi != 0 && hi != -1)
			break;
		n--;
	}
	b[0] = OP_LONG1;
	b[1] = (uint8_t)n;
	for (int i = 0; i < n; i++)
		b[2 + i] = (uint8_t)((uint64_t)v >> (8 * i));
	out_bytes(o, b, 2 + n);
}

void pk_out_str(struct pk_out *o, const char *s)
{
	size_t n = strlen(s);
	uint8_t b[5] = { OP_BINUNICODE, (uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16),
			 (uint8_t)(n >> 24) };

	out_bytes(o, b, 5);
	out_bytes(o, s, n);
}

void pk_out_free(struct pk_out *o)
{
	growbuf__free(&o->b);
	memset(o, 0, sizeof(*o));
}
