// SPDX-License-Identifier: MIT
/* fr_parse: pull parser for tptrace-fr dumps. See fr_parse.h for why it is not cJSON.
 *
 * The input is untrusted bytes: the lexer (user/base/jsonlex.h, shared with tptrace report)
 * bounds every access, nesting, string and number. The first error stops the parse and is
 * described in d->err with its byte offset.
 *
 * One file on purpose (over 1,000 lines): the lexer (jl_ws, jl_eat, jl_str, jl_int,
 * jl_next_key) inlines from its header into the per-object readers here, and reading 16k
 * ranks' dumps is bound by this loop.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fr_keys.h"
#include "fr_parse.h"
#include "growbuf.h"
#include "jsonlex.h"

_Static_assert(FR_UNK == JL_UNK, "an unknown number reads as FR_UNK");

/* Entries' "frames" arrays seen last, as raw text: the entries of one call site repeat the
 * same bytes, so most arrays are matched by length and memcmp instead of being parsed */
#define PY_RAW_CACHE 8
struct py_raw {
	const char *p;		/* into the buffer being parsed (valid for this parse) */
	size_t len;
	uint32_t pystack;
};

/* the lexer's cursor (first, so the readers pass a struct jlex *) and what the readers keep */
struct jp {
	struct jlex l;
	struct fr_dump *d;
	struct py_raw py_raw[PY_RAW_CACHE];
	int py_raw_next;
	bool stop_at_entries;		/* fr_dump__parse_head: top_level stops at "entries" */
	struct fr_snapshot *sn;		/* the snapshot being read */
	struct fr_frame *scratch;	/* its threads' frames, until the issuing one is known */
};

static inline struct jp *jp_of(struct jlex *j)
{
	return (struct jp *)j;
}

/* a cursor over buf[0, len), file offset off0 of buf, errors into d->err */
static struct jlex *jp_init(struct jp *P, struct fr_dump *d, const char *buf, size_t len,
			    size_t off0)
{
	*P = (struct jp){ .d = d };
	jl_init(&P->l, buf, len, d->err, sizeof(d->err));
	P->l.off0 = off0;
	return &P->l;
}

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

/* input_sizes/output_sizes: [[d0, d1, ...], ...] -> sum over tensors of the product of dims */
static bool sizes(struct jlex *j, int64_t *out)
{
	bool first = true;
	int64_t total = 0;

	*out = FR_UNK;
	if (jl_is_null(j))
		return jl_skip(j, 0);
	while (jl_next_elem(j, &first)) {
		bool f2 = true;
		int64_t prod = 1, v;

		jl_ws(j);
		if (j->p < j->end && *j->p != '[') {
			if (!jl_skip(j, 0))
				return false;
			continue;
		}
		while (jl_next_elem(j, &f2)) {
			if (!jl_int(j, &v))
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

/* ---- objects read through a table of their keys ----
 *
 * Each kind of object has a table: its keys (fr_keys.h's names) in the order the writer emits
 * them and, for each, what the value becomes and where it goes in the object being read (an
 * offset), or the handler that reads it. One loop (read_keys) reads any of them: a key not
 * in the table is passed over, a value of another type reads as unknown. Entries, the hot
 * loop, have their own (entry_next_key). */

enum fk_kind {
	FK_INT,		/* int64_t: a number; null and anything else FR_UNK (jl_int) */
	FK_STR,		/* char[size]: a string, truncated; anything else "" */
	FK_STR_OPT,	/* char[size]: as FK_STR, but null leaves the field as it was */
	FK_LINE,	/* int32_t: a line number (1..INT32_MAX-1), else 0 */
	FK_ONE,		/* bool: the number 1 */
	FK_WORD,	/* an enum of size 1 or 4: the index of the string in words[] (from 1),
			 * 0 for any other string or value */
	FK_HEX,		/* int64_t: "0x6f12a" or a number (hex_field) */
	FK_ARRAY,	/* an array (or null), each element read by elem(j) */
	FK_FN,		/* fn(j, object) reads it */
	FK_OBJECT,	/* null, or an object whose keys sub[] reads into the same object */
	FK_PASS,	/* a key the writer emits that nothing here reads: passed over, as an
			 * unknown key is (listed so that the key after it is found at once) */
};

/* what a handler tells the loop */
enum { FK_FAIL, FK_OK, FK_STOP };

struct fr_key {
	const char *name;
	const char *quoted;	/* "\"name\":", as the writer puts it (len + 3 bytes) */
	uint64_t head;		/* FK_HEAD(name): its first 8 bytes, zero-padded (the whole
				 * name of most keys) */
	uint8_t len, kind;
	uint16_t size;		/* the field's bytes */
	uint32_t off;		/* the field's offset in the object */
	const char *const *words;	/* FK_WORD: NULL-terminated, words[0] unused */
	int (*fn)(struct jlex *j, void *obj);	/* FK_FN: FK_FAIL, FK_OK or FK_STOP */
	bool (*elem)(struct jlex *j);		/* FK_ARRAY */
	const struct fr_key *sub;		/* FK_OBJECT: its keys, nsub of them */
	int nsub;
};

/* the first 8 bytes of the string literal s as a little-endian word, zero-padded */
#define FK_B(s, i)	((uint64_t)(sizeof(s) > (i) + 1 ? (uint8_t)(s)[(i) < sizeof(s) ? (i) : 0] : 0) \
			 << 8 * (i))
#define FK_HEAD(s)	(FK_B(s, 0) | FK_B(s, 1) | FK_B(s, 2) | FK_B(s, 3) | FK_B(s, 4) |	\
			 FK_B(s, 5) | FK_B(s, 6) | FK_B(s, 7))
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "FK_HEAD is little-endian");
#define FK_NAME(key)							\
	.name = key, .quoted = "\"" key "\":", .head = FK_HEAD(key), .len = sizeof(key) - 1
#define FK_SIZE(type, field)	sizeof(((type *)0)->field)
#define FK_FIELD(key, K, type, field)						\
	FK_NAME(key), .kind = K, .size = FK_SIZE(type, field), .off = offsetof(type, field)
/* a field of type T read as kind K; the build fails where the field is not a T */
#define FK_T(key, K, type, field, T)						\
	{ FK_FIELD(key, K, type, field)						\
	  + 0 * sizeof(char[FK_SIZE(type, field) == sizeof(T) ? 1 : -1]) }
#define FK_I64(key, type, field)	FK_T(key, FK_INT, type, field, int64_t)
#define FK_HEX64(key, type, field)	FK_T(key, FK_HEX, type, field, int64_t)
#define FK_LINE32(key, type, field)	FK_T(key, FK_LINE, type, field, int32_t)
#define FK_IS_ONE(key, type, field)	FK_T(key, FK_ONE, type, field, bool)
#define FK_CHARS(key, type, field)	{ FK_FIELD(key, FK_STR, type, field) }
#define FK_CHARS_OPT(key, type, field)	{ FK_FIELD(key, FK_STR_OPT, type, field) }
/* an enum of 1 or 4 bytes */
#define FK_ENUM(key, type, field, w)						\
	{ FK_FIELD(key, FK_WORD, type, field) + 0 * sizeof(char[FK_SIZE(type, field) == 1 ||	\
						     FK_SIZE(type, field) == 4 ? 1 : -1]),	\
	  .words = w }
#define FK_CALL(key, f)		{ FK_NAME(key), .kind = FK_FN, .fn = f }
#define FK_ARRAY_OF(key, e)	{ FK_NAME(key), .kind = FK_ARRAY, .elem = e }
#define FK_OBJECT_OF(key, tab)	{ FK_NAME(key), .kind = FK_OBJECT, .sub = tab, .nsub = FK_NR(tab) }
#define FK_PASSED(key)		{ FK_NAME(key), .kind = FK_PASS }
#define FK_NR(tab)		((int)(sizeof(tab) / sizeof(tab[0])))

static bool hex_field(struct jlex *j, int64_t *out);

/* an array (or null), each element read by fn */
static bool array_of(struct jlex *j, bool (*fn)(struct jlex *))
{
	bool first = true;

	if (jl_is_null(j))
		return jl_skip(j, 0);
	while (jl_next_elem(j, &first))
		if (!fn(j))
			return false;
	return !j->failed;
}

/* FK_WORD: a short string among words[1..] (all shorter than the buffer) */
static bool word_field(struct jlex *j, const struct fr_key *k, char *field)
{
	char buf[16];
	int v = 0;

	if (!jl_str_field(j, buf, sizeof(buf)))
		return false;
	for (int i = 1; k->words[i]; i++)
		if (!strcmp(buf, k->words[i])) {
			v = i;
			break;
		}
	if (k->size == 1)
		*(uint8_t *)field = (uint8_t)v;
	else
		*(int *)field = v;
	return true;
}

static int read_keys(struct jlex *j, bool first, const struct fr_key *tab, int nr, void *obj);

/* one value, as k says, into obj */
static inline int read_field(struct jlex *j, const struct fr_key *k, void *obj)
{
	char *field = (char *)obj + k->off;
	int64_t v;
	bool ok;

	switch (k->kind) {
	case FK_INT:
		ok = jl_int(j, (int64_t *)field);
		break;
	case FK_STR:
		ok = jl_str_field(j, field, k->size);
		break;
	case FK_STR_OPT:
		ok = jl_is_null(j) ? jl_skip(j, 0) : jl_str_field(j, field, k->size);
		break;
	case FK_LINE:
		ok = jl_int(j, &v);
		*(int32_t *)field = v > 0 && v < INT32_MAX ? (int32_t)v : 0;
		break;
	case FK_ONE:
		ok = jl_int(j, &v);
		*(bool *)field = v == 1;
		break;
	case FK_WORD:
		ok = word_field(j, k, field);
		break;
	case FK_HEX:
		ok = hex_field(j, (int64_t *)field);
		break;
	case FK_ARRAY:
		ok = array_of(j, k->elem);
		break;
	case FK_PASS:
		ok = jl_skip(j, 0);
		break;
	case FK_OBJECT:
		if (!jl_is_null(j))
			return read_keys(j, true, k->sub, k->nsub, obj);
		ok = jl_skip(j, 0);
		break;
	default:
		return k->fn(j, obj);
	}
	return ok ? FK_OK : FK_FAIL;
}

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

/* k is key[0..klen), whose first 8 bytes (zero-padded) are head */
static inline bool key_is(const struct fr_key *k, uint64_t head, const char *key, int klen)
{
	return k->head == head && k->len == klen &&
	       (klen <= 8 || !memcmp(k->name + 8, key + 8, klen - 8));
}

/* key[0..klen) (in a buffer of at least 8 bytes) in tab, or NULL; tab[hint] first (the key
 * after the last one found) */
static inline const struct fr_key *find_key(const struct fr_key *tab, int nr, int hint,
					    const char *key, int klen)
{
	uint64_t head;

	memcpy(&head, key, 8);
	if (klen < 8)
		head &= (1ULL << 8 * klen) - 1;
	if (hint < nr && key_is(&tab[hint], head, key, klen))
		return &tab[hint];
	for (int i = 0; i < nr; i++)
		if (key_is(&tab[i], head, key, klen))
			return &tab[i];
	return NULL;
}

/* The members of the object at j->p (first: its '{' is still ahead) through tab into obj.
 * FK_OK at its end, FK_FAIL on an error (in j), FK_STOP where a handler stopped (j->p at
 * that member's value). The tables list their keys in the order the writer emits them: the key
 * after the last one found is matched first, in place, as the writer spells it (as entries
 * are, entry_next_key); any other spelling or order goes the generic way, to the same field. */
static int read_keys(struct jlex *j, bool first, const struct fr_key *tab, int nr, void *obj)
{
	char key[32] = "";
	int klen, r, next = 0;

	for (;;) {
		const struct fr_key *k = NULL;

		if (next < nr && j->p < j->end && *j->p == (first ? '{' : ',')) {
			const struct fr_key *e = &tab[next];

			if ((size_t)(j->end - j->p) > e->len + 3u &&
			    eq_n(j->p + 1, e->quoted, e->len + 3)) {
				first = false;
				j->p += 1 + e->len + 3;
				k = e;
			}
		}
		if (!k) {
			if (!jl_next_key(j, &first, key, sizeof(key), &klen))
				break;
			k = find_key(tab, nr, next, key, klen);
		}
		if (k)
			next = (int)(k - tab) + 1;
		r = k ? read_field(j, k, obj) : jl_skip(j, 0) ? FK_OK : FK_FAIL;
		if (r != FK_OK)
			return r;
	}
	return j->failed ? FK_FAIL : FK_OK;
}

/* an object read through tab, or anything else passed over */
static bool read_obj_or_skip(struct jlex *j, const struct fr_key *tab, int nr, void *obj)
{
	jl_ws(j);
	if (j->p < j->end && *j->p != '{')
		return jl_skip(j, 0);
	return read_keys(j, true, tab, nr, obj) == FK_OK;
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
static const char *const seq_origin_words[] = { NULL, "attach", NULL };
static const struct fr_key learned_keys[] = {
	FK_ENUM(FRK_SEQ_ORIGIN, struct fr_comm_info, seq_attach, seq_origin_words),
};

/* a comm as read: the comm and what decides whether its id is local */
struct comm_rd {
	struct fr_comm_info c;
	int64_t cross;
};

static int comm_learned(struct jlex *j, void *obj)
{
	struct comm_rd *r = obj;

	return read_obj_or_skip(j, learned_keys, FK_NR(learned_keys), &r->c) ? FK_OK : FK_FAIL;
}

static const struct fr_key comm_keys[] = {
	FK_CHARS(FRK_COMM_ID, struct comm_rd, c.id),
	FK_I64(FRK_CROSS_RANK_ID, struct comm_rd, cross),
	FK_PASSED(FRK_COMM_HANDLE),
	FK_I64(FRK_RANK, struct comm_rd, c.rank),
	FK_I64(FRK_NRANKS, struct comm_rd, c.nranks),
	FK_PASSED(FRK_DEVICE),
	FK_CHARS(FRK_PARENT, struct comm_rd, c.parent),
	FK_I64(FRK_SPLIT_COLOR, struct comm_rd, c.split_color),
	FK_I64(FRK_SPLIT_KEY, struct comm_rd, c.split_key),
	FK_CHARS(FRK_CREATED_BY, struct comm_rd, c.created_by),
	FK_CALL(FRK_LEARNED, comm_learned),
	FK_CHARS(FRK_STATE, struct comm_rd, c.state),
	FK_I64(FRK_ASYNC_ERROR, struct comm_rd, c.async_error),
	FK_I64(FRK_INIT_RC, struct comm_rd, c.init_rc),
	FK_I64(FRK_LAST_ENQUEUED_SEQ, struct comm_rd, c.last_enqueued),
	FK_I64(FRK_LAST_STARTED_SEQ, struct comm_rd, c.last_started),
	FK_I64(FRK_LAST_COMPLETED_SEQ, struct comm_rd, c.last_completed),
	FK_I64(FRK_LAST_P2P_SEQ, struct comm_rd, c.last_p2p),
};

static bool comm_obj(struct jlex *j)
{
	struct fr_dump *d;
	struct comm_rd r = { .cross = FR_UNK };
	struct fr_comm_info c;
	int idx;

	r.c.rank = r.c.nranks = FR_UNK;
	r.c.last_enqueued = r.c.last_started = r.c.last_completed = r.c.last_p2p = FR_UNK;
	r.c.async_error = r.c.init_rc = FR_UNK;
	r.c.split_color = r.c.split_key = FR_UNK;
	if (read_keys(j, true, comm_keys, FK_NR(comm_keys), &r) != FK_OK)
		return false;
	c = r.c;
	if (!c.id[0])
		return true;	/* a comm without identity cannot be aligned: ignore it */
	c.local_id = r.cross == 0 || !strncmp(c.id, "local:", 6);
	if (c.nranks != FR_UNK && (c.nranks <= 0 || c.nranks > FR_MAX_NRANKS))
		c.nranks = FR_UNK;
	if (c.rank != FR_UNK && (c.rank < 0 || c.rank >= FR_MAX_NRANKS ||
				 (c.nranks != FR_UNK && c.rank >= c.nranks)))
		c.rank = FR_UNK;
	d = jp_of(j)->d;
	idx = find_comm(d, c.id, true);
	if (idx == -3)
		return jl_fail(j, "out of memory");
	if (idx < 0)
		return jl_fail(j, "too many comms");
	if (d->comms[idx].in_header)
		return true;	/* duplicate comm_id in one dump: the first wins */
	c.in_header = true;
	d->comms[idx] = c;
	return true;
}

static const struct fr_key in_call_keys[] = {
	FK_I64(FRK_TID, struct fr_in_call, tid),
	FK_CHARS(FRK_THREAD_NAME, struct fr_in_call, thread_name),
	FK_CHARS(FRK_API, struct fr_in_call, api),
	FK_I64(FRK_ENTERED_NS, struct fr_in_call, entered_ns),
	FK_CHARS(FRK_COMM_ID, struct fr_in_call, comm_id),
	FK_I64(FRK_SEQ, struct fr_in_call, seq),
	FK_I64(FRK_EVENTS_DROPPED_SINCE, struct fr_in_call, dropped_since),
};

static bool in_call_obj(struct jlex *j)
{
	struct fr_in_call ic = { 0 };
	struct fr_dump *d = jp_of(j)->d;

	ic.tid = ic.entered_ns = ic.seq = FR_UNK;
	if (read_keys(j, true, in_call_keys, FK_NR(in_call_keys), &ic) != FK_OK)
		return false;
	if (d->nr_in_calls >= FR_MAX_IN_CALLS)
		return true;
	if (ARRAY_RESERVE(d->in_calls, d->cap_in_calls, d->nr_in_calls + 1, 4))
		return jl_fail(j, "out of memory");
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
	EKEY(FRK_RECORD_ID, EK_RECORD_ID), EKEY(FRK_COMM_ID, EK_COMM_ID),
	EKEY(FRK_COLLECTIVE_SEQ_ID, EK_COLL_SEQ), EKEY(FRK_P2P_SEQ_ID, EK_P2P_SEQ),
	EKEY(FRK_GROUP_ID, EK_OTHER), EKEY(FRK_OP, EK_OP), EKEY(FRK_PROFILING_NAME, EK_PROF),
	EKEY(FRK_IS_P2P, EK_OTHER), EKEY(FRK_COUNT, EK_COUNT), EKEY(FRK_DTYPE, EK_DTYPE),
	EKEY(FRK_INPUT_SIZES, EK_IN_SIZES), EKEY(FRK_OUTPUT_SIZES, EK_OUT_SIZES),
	EKEY(FRK_INPUT_DTYPES, EK_OTHER), EKEY(FRK_OUTPUT_DTYPES, EK_OTHER),
	EKEY(FRK_REDUCE_OP, EK_REDOP), EKEY(FRK_ROOT, EK_ROOT), EKEY(FRK_PEER, EK_PEER),
	EKEY(FRK_STREAM, EK_OTHER), EKEY(FRK_SENDBUFF, EK_OTHER), EKEY(FRK_RECVBUFF, EK_OTHER),
	EKEY(FRK_STATE, EK_STATE), EKEY(FRK_TIME_CREATED_NS, EK_CREATED),
	EKEY(FRK_TIME_DISCOVERED_STARTED_NS, EK_OTHER),
	EKEY(FRK_TIME_DISCOVERED_COMPLETED_NS, EK_COMPLETED), EKEY(FRK_DURATION_MS, EK_OTHER),
	EKEY(FRK_API_ENTER_NS, EK_OTHER), EKEY(FRK_API_EXIT_NS, EK_OTHER), EKEY(FRK_RC, EK_OTHER),
	EKEY(FRK_THREAD_ID, EK_OTHER), EKEY(FRK_THREAD_NAME, EK_OTHER), EKEY(FRK_FRAMES, EK_FRAMES),
	EKEY(FRK_FRAMES_MISSING, EK_OTHER),
};
#define NR_ENTRY_KEYS ((int)(sizeof(entry_keys) / sizeof(entry_keys[0])))

/* The fields nobody reads are half of every entry: a plain string or a number starting at
 * j->p (no whitespace, no escape) is stepped over here, inline; anything else returns false
 * with j->p unchanged, for jl_skip to read (and judge) it. */
static inline bool skip_scalar(struct jlex *j)
{
	const char *p = j->p;

	if (p >= j->end)
		return false;
	if (*p == '"') {
		const char *q = jl_scan_quote(p + 1, j->end);

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
		if (!jl_digits8(w))
			break;
		p += 8;
	}
	while (p < j->end && jl_is_num_char(*p))
		p++;
	j->p = p;
	return true;
}

/* next_key for an entry, as an enum entry_key: -1 at the end or on error (check j->failed).
 * *expect: the index in entry_keys of the key that should come next. */
static inline int entry_next_key(struct jlex *j, bool *first, int *expect)
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
	if (!jl_next_key(j, first, key, sizeof(key), &klen))
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

/* an entry's Python frame: {name, filename, line}; null name or file: unresolved ("") */
static const struct fr_key pyframe_keys[] = {
	FK_CHARS_OPT(FRK_NAME, struct fr_pyframe, name),
	FK_CHARS_OPT(FRK_FILENAME, struct fr_pyframe, file),
	FK_LINE32(FRK_LINE, struct fr_pyframe, line),
};

static bool pyframe_obj(struct jlex *j, struct fr_pyframe *f)
{
	memset(f, 0, sizeof(*f));
	return read_obj_or_skip(j, pyframe_keys, FK_NR(pyframe_keys), f);
}

/* An entry's "frames": the innermost FR_ENTRY_FRAMES kept as a stack of the dump */
static bool pyframes_array(struct jlex *j, uint32_t *pystack)
{
	struct jp *P = jp_of(j);
	struct fr_dump *d = P->d;
	bool first = true, more = false;
	int n = 0;
	int64_t idx;

	const char *start;
	size_t len;

	*pystack = 0;
	if (jl_is_null(j))
		return jl_skip(j, 0);
	start = j->p;
	if (!jl_skip(j, 0))
		return false;
	len = (size_t)(j->p - start);
	for (int i = 0; i < PY_RAW_CACHE; i++) {
		const struct py_raw *r = &P->py_raw[i];

		if (r->p && r->len == len && !memcmp(r->p, start, len)) {
			*pystack = r->pystack;
			return true;
		}
	}
	j->p = start;
	while (jl_next_elem(j, &first)) {
		bool ok;

		if (n < FR_ENTRY_FRAMES) {
			ok = pyframe_obj(j, &d->py_scratch[n++]);
		} else {
			more = true;
			ok = jl_skip(j, 0);
		}
		if (!ok)
			return false;
	}
	if (j->failed)
		return false;
	idx = fr_dump__pystack(d, n, more);
	if (idx < 0)
		return jl_fail(j, "out of memory");
	*pystack = (uint32_t)idx;
	P->py_raw[P->py_raw_next] = (struct py_raw){ start, len, *pystack };
	P->py_raw_next = (P->py_raw_next + 1) % PY_RAW_CACHE;
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

static bool entry_obj(struct jlex *j, int *last_comm)
{
	struct fr_dump *d = jp_of(j)->d;
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
			ok = jl_int(j, &e.record_id);
			break;
		case EK_COMM_ID:
			ok = jl_str_field(j, comm_id, sizeof(comm_id));
			break;
		case EK_COLL_SEQ:
			ok = jl_int(j, &e.coll_seq);
			break;
		case EK_P2P_SEQ:
			ok = jl_int(j, &e.p2p_seq);
			break;
		case EK_OP:
			if (jl_is_null(j)) {
				ok = jl_skip(j, 0);
			} else if ((ok = (len = jl_str(j, buf, sizeof(buf))) >= 0)) {
				e.op = lookup(op_names, FR_OP__COUNT, buf, len, FR_OP_OTHER);
				have_op = true;
			}
			break;
		case EK_PROF:
			ok = jl_str_field(j, prof, sizeof(prof));
			break;
		case EK_COUNT:
			ok = jl_int(j, &e.count);
			if (e.count != FR_UNK && e.count < 0)
				e.count = FR_UNK;
			break;
		case EK_DTYPE:
			if (jl_is_null(j))
				ok = jl_skip(j, 0);
			else if ((ok = (len = jl_str(j, buf, sizeof(buf))) >= 0))
				e.dtype = lookup(dtype_names, FR_DT__COUNT, buf, len, FR_DT_OTHER);
			break;
		case EK_IN_SIZES:
			ok = sizes(j, &e.in_size);
			break;
		case EK_OUT_SIZES:
			ok = sizes(j, &e.out_size);
			break;
		case EK_REDOP:
			if (jl_is_null(j))
				ok = jl_skip(j, 0);
			else if ((ok = (len = jl_str(j, buf, sizeof(buf))) >= 0))
				e.redop = lookup(redop_names, FR_RED__COUNT, buf, len, FR_RED_OTHER);
			break;
		case EK_ROOT:
		case EK_PEER:
			ok = jl_int(j, &v);
			if (ok && v != FR_UNK && v >= 0 && v < FR_MAX_NRANKS)
				*(kid == EK_ROOT ? &e.root : &e.peer) = (int32_t)v;
			break;
		case EK_STATE:
			if (jl_is_null(j)) {
				ok = jl_skip(j, 0);
			} else if ((ok = (len = jl_str(j, buf, sizeof(buf))) >= 0)) {
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
			ok = jl_int(j, &e.created_ns);
			break;
		case EK_COMPLETED:
			ok = jl_int(j, &e.completed_ns);
			break;
		case EK_FRAMES:
			ok = pyframes_array(j, &e.pystack);
			break;
		default:
			ok = skip_scalar(j) || jl_skip(j, 0);
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
			return jl_fail(j, "out of memory");
		if (idx < 0)
			return jl_fail(j, "too many comms");
		*last_comm = idx;
	}
	e.comm = (uint16_t)idx;
	switch (fr_dump__add_entry(d, &e)) {
	case 0:
		return true;
	case -E2BIG:
		return jl_fail(j, "too many entries");
	default:
		return jl_fail(j, "out of memory");
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
static bool hex_field(struct jlex *j, int64_t *out)
{
	char buf[24];
	uint64_t v = 0;
	int len;

	jl_ws(j);
	*out = FR_UNK;
	if (j->p >= j->end || *j->p != '"')
		return jl_int(j, out);
	if ((len = jl_str(j, buf, sizeof(buf))) < 0)
		return false;
	if (len < 3 || buf[0] != '0' || (buf[1] != 'x' && buf[1] != 'X') || len > 18)
		return true;
	for (int i = 2; i < len; i++) {
		int h = jl_hexval(buf[i]);

		if (h < 0)
			return true;
		v = v * 16 + (uint64_t)h;
	}
	*out = v > (uint64_t)INT64_MAX ? FR_UNK : (int64_t)v;
	return true;
}

static const char *const frame_kind_words[] = { NULL, "native", "python", NULL };

static int frame_unrecoverable(struct jlex *j, void *obj)
{
	((struct fr_frame *)obj)->unrecoverable = !jl_is_null(j);
	return jl_skip(j, 0) ? FK_OK : FK_FAIL;
}

static const struct fr_key frame_keys[] = {
	FK_ENUM(FRK_KIND, struct fr_frame, kind, frame_kind_words),
	FK_CHARS(FRK_FUNC, struct fr_frame, func),
	FK_CHARS(FRK_FILE, struct fr_frame, file),
	FK_CHARS(FRK_MODULE, struct fr_frame, module),
	FK_HEX64(FRK_MODULE_OFF, struct fr_frame, module_off),
	FK_CALL(FRK_UNRECOVERABLE, frame_unrecoverable),
	FK_LINE32(FRK_LINE, struct fr_frame, line),
};

static bool frame_obj(struct jlex *j, struct fr_frame *f)
{
	memset(f, 0, sizeof(*f));
	f->module_off = FR_UNK;
	return read_obj_or_skip(j, frame_keys, FK_NR(frame_keys), f);
}

/* the top FR_STACK_FRAMES frames into out; the rest skipped (counted in *more) */
static bool frames_array(struct jlex *j, struct fr_frame *out, int *n, bool *more)
{
	bool first = true;

	*n = 0;
	*more = false;
	if (jl_is_null(j))
		return jl_skip(j, 0);
	while (jl_next_elem(j, &first)) {
		bool ok;

		if (*n < FR_STACK_FRAMES) {
			ok = frame_obj(j, &out[*n]);
			(*n)++;
		} else {
			*more = true;
			ok = jl_skip(j, 0);
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

/* a thread as read: the thread, its "issuing" as written, and its frames when read */
struct thread_rd {
	struct fr_stack_thread t;
	int64_t issuing;
	int nr_frames;
	bool more;
};

static int thread_state(struct jlex *j, void *obj)
{
	struct fr_stack_thread *t = &((struct thread_rd *)obj)->t;
	char buf[48];
	bool ok = jl_str_field(j, buf, sizeof(buf));

	t->state = ok && strchr("RSDTtZXIWPK", buf[0]) && buf[0] ? buf[0] : 0;
	return ok ? FK_OK : FK_FAIL;
}

static int thread_where(struct jlex *j, void *obj)
{
	struct fr_stack_thread *t = &((struct thread_rd *)obj)->t;
	char buf[48];
	int len;

	if (jl_is_null(j))
		return jl_skip(j, 0) ? FK_OK : FK_FAIL;
	if ((len = jl_str(j, buf, sizeof(buf))) < 0)
		return FK_FAIL;
	t->where = (uint8_t)lookup_where(buf, (size_t)len);
	return FK_OK;
}

/* Its frames are read only while it may be the issuing thread (the writer puts "issuing"
 * before "frames"; when it does not, the top frames are read into scratch). */
static int thread_frames(struct jlex *j, void *obj)
{
	struct jp *P = jp_of(j);
	struct thread_rd *r = obj;

	/* another thread already is the issuing one, or this one is not */
	if (P->sn->issuing >= 0 || (r->issuing != FR_UNK && r->issuing != 1))
		return jl_skip(j, 0) ? FK_OK : FK_FAIL;
	return frames_array(j, P->scratch, &r->nr_frames, &r->more) ? FK_OK : FK_FAIL;
}

static const char *const progress_words[] = { NULL, "none", "yes", NULL };
static const struct fr_key thread_keys[] = {
	FK_I64(FRK_TID, struct thread_rd, t.tid),
	FK_CHARS(FRK_NAME, struct thread_rd, t.name),
	FK_CALL(FRK_STATE, thread_state),
	FK_PASSED(FRK_WCHAN),
	FK_PASSED(FRK_KERNEL_STACK),
	FK_PASSED(FRK_KERNEL_STACK_ERROR),
	FK_CALL(FRK_WHERE, thread_where),
	FK_CHARS(FRK_API, struct thread_rd, t.api),
	FK_ENUM(FRK_PROGRESS, struct thread_rd, t.progress, progress_words),
	FK_IS_ONE(FRK_MAIN, struct thread_rd, t.main),
	FK_I64(FRK_ISSUING, struct thread_rd, issuing),
	FK_IS_ONE(FRK_PYTHON, struct thread_rd, t.python),
	FK_PASSED(FRK_TRUNCATED),
	FK_PASSED(FRK_UNWIND_ERROR),
	FK_CALL(FRK_FRAMES, thread_frames),
};

/* one thread of the snapshot P->sn */
static bool thread_obj(struct jlex *j)
{
	struct jp *P = jp_of(j);
	struct fr_dump *d = P->d;
	struct fr_snapshot *sn = P->sn;
	struct thread_rd r = { .issuing = FR_UNK };
	struct fr_stack_thread t;

	r.t.tid = FR_UNK;
	if (read_keys(j, true, thread_keys, FK_NR(thread_keys), &r) != FK_OK)
		return false;
	t = r.t;
	t.issuing = r.issuing == 1;
	sn->nr_threads_all++;
	if (sn->nr_threads >= FR_MAX_THREADS)
		return true;
	if (ARRAY_RESERVE(d->threads, d->cap_threads, d->nr_threads + 1, 64))
		return jl_fail(j, "out of memory");
	if (t.issuing && sn->issuing < 0) {
		sn->issuing = (int64_t)d->nr_threads;
		memcpy(sn->frames, P->scratch, r.nr_frames * sizeof(*P->scratch));
		sn->nr_frames = r.nr_frames;
		sn->more_frames = r.more;
	} else {
		t.issuing = false;	/* exactly one per process: the first one wins */
	}
	d->threads[d->nr_threads++] = t;
	sn->nr_threads++;
	return true;
}

static const char *const taken_words[] = { NULL, "attach", "dump", "request", NULL };
static const struct fr_key snapshot_keys[] = {
	FK_ENUM(FRK_TAKEN, struct fr_snapshot, taken, taken_words),
	FK_I64(FRK_TIME_NS, struct fr_snapshot, time_ns),
	FK_PASSED(FRK_MONO_NS),
	FK_I64(FRK_SAMPLES, struct fr_snapshot, samples),
	FK_I64(FRK_INTERVAL_MS, struct fr_snapshot, interval_ms),
	FK_PASSED(FRK_STOPPED_MS_MAX),
	FK_CHARS(FRK_PTRACE_ERROR, struct fr_snapshot, ptrace_error),
	FK_CHARS(FRK_PYTHON, struct fr_snapshot, python),
	FK_PASSED(FRK_PYTHON_ERROR),
	FK_IS_ONE(FRK_EXITED, struct fr_snapshot, exited),
	FK_ARRAY_OF(FRK_THREADS, thread_obj),
};

static bool snapshot_obj(struct jlex *j)
{
	struct jp *P = jp_of(j);
	struct fr_dump *d = P->d;
	struct fr_snapshot *sn;
	bool ok;

	if (d->nr_snaps >= FR_MAX_SNAPSHOTS)
		return jl_skip(j, 0);
	if (ARRAY_RESERVE(d->snaps, d->cap_snaps, d->nr_snaps + 1, 2))
		return jl_fail(j, "out of memory");
	P->scratch = malloc(FR_STACK_FRAMES * sizeof(*P->scratch));
	if (!P->scratch)
		return jl_fail(j, "out of memory");
	sn = P->sn = &d->snaps[d->nr_snaps];
	memset(sn, 0, offsetof(struct fr_snapshot, frames));
	sn->time_ns = sn->samples = sn->interval_ms = FR_UNK;
	sn->issuing = -1;
	sn->nr_frames = 0;
	sn->more_frames = false;
	sn->first_thread = d->nr_threads;
	jl_ws(j);
	if (j->p < j->end && *j->p != '{') {
		ok = jl_skip(j, 0);	/* not a snapshot: passed over */
	} else {
		ok = read_keys(j, true, snapshot_keys, FK_NR(snapshot_keys), sn) == FK_OK;
		d->nr_snaps += ok;
	}
	free(P->scratch);
	P->scratch = NULL;
	P->sn = NULL;
	return ok;
}

static bool entries_array(struct jlex *j)
{
	bool first = true;
	int last_comm = -1;

	if (jl_is_null(j))
		return jl_skip(j, 0);
	while (jl_next_elem(j, &first))
		if (!entry_obj(j, &last_comm))
			return false;
	return !j->failed;
}

static const char *const proc_state_words[] = { NULL, "running", "exited", "killed", NULL };
static const struct fr_key process_keys[] = {
	FK_ENUM(FRK_STATE, struct fr_dump, proc_state, proc_state_words),
	FK_I64(FRK_EXIT_CODE, struct fr_dump, exit_code),
	FK_I64(FRK_SIGNAL, struct fr_dump, signal),
};

/* "py_stacks": {"python": "3.11.2" | null, "why_no_frames": null | "..."}, or null */
static const struct fr_key py_stacks_keys[] = {
	FK_CHARS(FRK_PYTHON, struct fr_dump, py_python),
	FK_CHARS(FRK_WHY_NO_FRAMES, struct fr_dump, py_why),
};

static int top_py_stacks(struct jlex *j, void *obj)
{
	struct fr_dump *d = obj;

	if (jl_is_null(j))
		return jl_skip(j, 0) ? FK_OK : FK_FAIL;
	jl_ws(j);
	if (j->p < j->end && *j->p != '{')
		return jl_skip(j, 0) ? FK_OK : FK_FAIL;
	d->py_stacks = true;
	return read_keys(j, true, py_stacks_keys, FK_NR(py_stacks_keys), d);
}

/* "stacks_pending": true in a state-first dump (its stacks were still being taken); any
 * other value, or the key absent: not pending */
static int top_stacks_pending(struct jlex *j, void *obj)
{
	struct fr_dump *d = obj;

	jl_ws(j);
	if ((size_t)(j->end - j->p) >= 4 && !memcmp(j->p, "true", 4)) {
		d->stacks_pending = true;
		return jl_literal(j, "true", 4) ? FK_OK : FK_FAIL;
	}
	return jl_skip(j, 0) ? FK_OK : FK_FAIL;
}

bool fr_net_addr(const char *s, uint8_t out[16])
{
	uint8_t v4[4];

	if (inet_pton(AF_INET, s, v4) == 1) {
		memset(out, 0, 10);
		out[10] = out[11] = 0xff;
		memcpy(out + 12, v4, 4);
		return true;
	}
	return inet_pton(AF_INET6, s, out) == 1;
}

void fr_net_addr_str(const uint8_t a[16], char *out, size_t size)
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	char buf[64];

	if (!memcmp(a, mapped, 12) ? !inet_ntop(AF_INET, a + 12, buf, sizeof(buf)) :
	    !inet_ntop(AF_INET6, a, buf, sizeof(buf)))
		snprintf(buf, sizeof(buf), "?");
	snprintf(out, size, "%s", buf);
}

/* "10.0.0.1:29500" or "[fe80::1]:22" */
static bool endpoint(const char *s, uint8_t addr[16], uint16_t *port)
{
	char a[64];
	const char *colon;
	unsigned long p;
	char *end;

	if (s[0] == '[') {
		const char *close = strchr(s, ']');

		if (!close || close[1] != ':' || close - s - 1 >= (long)sizeof(a))
			return false;
		memcpy(a, s + 1, close - s - 1);
		a[close - s - 1] = '\0';
		colon = close + 1;
	} else {
		if (!(colon = strrchr(s, ':')) || colon - s >= (long)sizeof(a))
			return false;
		memcpy(a, s, colon - s);
		a[colon - s] = '\0';
	}
	p = strtoul(colon + 1, &end, 10);
	if (*end || end == colon + 1 || p > 65535)
		return false;
	*port = (uint16_t)p;
	return fr_net_addr(a, addr);
}

/* a "sockets" element being read: the socket, and whether both endpoints parsed */
struct net_sock_rd {
	struct fr_net_sock s;
	bool lok, rok;
};

/* "local" or "remote": address and port, ok when they parse */
static int sock_endpoint(struct jlex *j, uint8_t addr[16], uint16_t *port, bool *ok)
{
	char buf[80];

	if (!jl_str_field(j, buf, sizeof(buf)))
		return FK_FAIL;
	*ok = endpoint(buf, addr, port);
	return FK_OK;
}

static int sock_local(struct jlex *j, void *obj)
{
	struct net_sock_rd *r = obj;

	return sock_endpoint(j, r->s.local, &r->s.lport, &r->lok);
}

static int sock_remote(struct jlex *j, void *obj)
{
	struct net_sock_rd *r = obj;

	return sock_endpoint(j, r->s.remote, &r->s.rport, &r->rok);
}

static int sock_state(struct jlex *j, void *obj)
{
	struct net_sock_rd *r = obj;
	char buf[80];

	if (!jl_str_field(j, buf, sizeof(buf)))
		return FK_FAIL;
	r->s.established = !strcmp(buf, "established");
	return FK_OK;
}

/* FR_TIMER_* from 1: FR_TIMER_OTHER is 0, any other string */
static const char *const timer_words[] = { "", "retransmit", "probe", NULL };
_Static_assert(FR_TIMER_RETRANSMIT == 1 && FR_TIMER_PROBE == 2 && FR_TIMER_OTHER == 0,
	       "timer_words follows enum fr_net_timer");

/* the writer's order (user/fr/fr_net.c sock_json) */
static const struct fr_key sock_keys[] = {
	FK_CALL(FRK_LOCAL, sock_local),
	FK_CALL(FRK_REMOTE, sock_remote),
	FK_CALL(FRK_STATE, sock_state),
	FK_PASSED(FRK_INODE),
	FK_I64(FRK_TX_QUEUE, struct net_sock_rd, s.tx_queue),
	FK_PASSED(FRK_RX_QUEUE),
	FK_ENUM(FRK_TIMER, struct net_sock_rd, s.timer, timer_words),
	FK_I64(FRK_RETRANSMITS, struct net_sock_rd, s.retransmits),
	FK_I64(FRK_PROBES, struct net_sock_rd, s.probes),
	FK_I64(FRK_BACKOFF, struct net_sock_rd, s.backoff),
	FK_I64(FRK_UNACKED, struct net_sock_rd, s.unacked),
	FK_PASSED(FRK_TOTAL_RETRANS),
	FK_PASSED(FRK_LAST_DATA_SENT_MS),
	FK_I64(FRK_LAST_ACK_RECV_MS, struct net_sock_rd, s.last_ack_ms),
	FK_PASSED(FRK_LAST_DATA_RECV_MS),
};

/* a "sockets" element; one whose endpoints do not parse is left out */
static bool net_sock_obj(struct jlex *j)
{
	struct fr_dump *d = jp_of(j)->d;
	struct net_sock_rd r = { .s = { .tx_queue = FR_UNK, .unacked = FR_UNK,
					.retransmits = FR_UNK, .probes = FR_UNK,
					.backoff = FR_UNK, .last_ack_ms = FR_UNK } };

	if (!read_obj_or_skip(j, sock_keys, FK_NR(sock_keys), &r))
		return false;
	if (j->failed || !r.lok || !r.rok)
		return !j->failed;
	if (d->nr_socks >= FR_MAX_NET_SOCKS) {
		d->net_truncated = true;
		return true;
	}
	if (ARRAY_RESERVE(d->socks, d->cap_socks, d->nr_socks + 1, 16))
		return jl_fail(j, "out of memory");
	d->socks[d->nr_socks++] = r.s;
	return true;
}

static bool host_addr(struct jlex *j)
{
	struct fr_dump *d = jp_of(j)->d;
	char buf[64];

	if (!jl_str_field(j, buf, sizeof(buf)))
		return false;
	if (d->nr_host_addrs < FR_MAX_HOST_ADDRS && fr_net_addr(buf, d->host_addrs[d->nr_host_addrs]))
		d->nr_host_addrs++;
	return true;
}

/* an "interfaces" element being read */
struct iface_rd {
	char addr[64];
	bool running;
};

/* "up" and "running": the interface runs when both are true */
static int iface_flag(struct jlex *j, void *obj)
{
	struct iface_rd *r = obj;

	jl_ws(j);
	r->running &= j->p < j->end && *j->p == 't';
	return jl_skip(j, 0) ? FK_OK : FK_FAIL;
}

/* the writer's order (user/fr/fr_net.c addrs_json) */
static const struct fr_key iface_keys[] = {
	FK_PASSED(FRK_NAME),
	FK_CHARS(FRK_ADDRESS, struct iface_rd, addr),
	FK_CALL(FRK_UP, iface_flag),
	FK_CALL(FRK_RUNNING, iface_flag),
};

/* an "interfaces" element: {"name", "address", "up", "running"}; its address is kept when
 * the interface is not running */
static bool iface_obj(struct jlex *j)
{
	struct fr_dump *d = jp_of(j)->d;
	struct iface_rd r = { .running = true };

	if (!read_obj_or_skip(j, iface_keys, FK_NR(iface_keys), &r))
		return false;
	if (!j->failed && !r.running && d->nr_down_addrs < FR_MAX_HOST_ADDRS &&
	    fr_net_addr(r.addr, d->down_addrs[d->nr_down_addrs]))
		d->nr_down_addrs++;
	return !j->failed;
}

/* "net" being read */
struct net_rd {
	struct fr_dump *d;
	int src;
	bool have_socks;
};

static int net_source(struct jlex *j, void *obj)
{
	struct net_rd *r = obj;
	char buf[16];

	if (!jl_str_field(j, buf, sizeof(buf)))
		return FK_FAIL;
	r->src = !strcmp(buf, "inet_diag") ? FR_NET_INET_DIAG :
		 !strcmp(buf, "proc_net_tcp") ? FR_NET_PROC : FR_NET_UNKNOWN;
	return FK_OK;
}

static int net_error(struct jlex *j, void *obj)
{
	struct net_rd *r = obj;

	return jl_str_field(j, r->d->net_error, sizeof(r->d->net_error)) ? FK_OK : FK_FAIL;
}

static int net_sockets(struct jlex *j, void *obj)
{
	struct net_rd *r = obj;

	r->have_socks = !jl_is_null(j);
	return (r->have_socks ? array_of(j, net_sock_obj) : jl_skip(j, 0)) ? FK_OK : FK_FAIL;
}

/* the writer's order (user/fr/fr_net.c fr_net__json) */
static const struct fr_key net_keys[] = {
	FK_PASSED(FRK_NETNS),
	FK_CALL(FRK_SOURCE, net_source),
	FK_CALL(FRK_ERROR, net_error),
	FK_PASSED(FRK_READ_NS),
	FK_ARRAY_OF(FRK_HOST_ADDRESSES, host_addr),
	FK_ARRAY_OF(FRK_INTERFACES, iface_obj),
	FK_CALL(FRK_SOCKETS, net_sockets),
};

/* "net": {"source": "inet_diag" | "proc_net_tcp" | null, "error", "host_addresses": [...],
 * "sockets": [...] | null, ...}; null or a null "sockets" is unknown */
static int top_net(struct jlex *j, void *obj)
{
	struct net_rd r = { .d = obj, .src = FR_NET_UNKNOWN };
	struct fr_dump *d = obj;

	d->net_source = FR_NET_UNKNOWN;
	if (jl_is_null(j))
		return jl_skip(j, 0) ? FK_OK : FK_FAIL;
	if (!read_obj_or_skip(j, net_keys, FK_NR(net_keys), &r))
		return FK_FAIL;
	d->net_source = r.have_socks ? r.src : FR_NET_UNKNOWN;
	if (!r.have_socks && !d->net_error[0])
		snprintf(d->net_error, sizeof(d->net_error), "no sockets in the dump");
	return j->failed ? FK_FAIL : FK_OK;
}

/* "trigger": {"id", "origin_host", "reason", "time_ns"} or null (docs/fr-schema.md) */
static const struct fr_key trigger_keys[] = {
	FK_CHARS(FRK_ID, struct fr_dump, trigger_id),
	FK_CHARS(FRK_ORIGIN_HOST, struct fr_dump, trigger_origin),
	FK_CHARS(FRK_REASON, struct fr_dump, trigger_reason),
	FK_I64(FRK_TIME_NS, struct fr_dump, trigger_time_ns),
};

/* "entries": read, or (fr_dump__parse_head) where the head stops */
static int top_entries(struct jlex *j, void *obj)
{
	if (jp_of(j)->stop_at_entries)
		return FK_STOP;
	return entries_array(j) ? FK_OK : FK_FAIL;
}

static const struct fr_key top_keys[] = {
	FK_CALL(FRK_ENTRIES, top_entries),
	FK_CHARS(FRK_SCHEMA, struct fr_dump, schema),
	FK_I64(FRK_VERSION, struct fr_dump, version),
	FK_CHARS(FRK_HOST, struct fr_dump, host),
	FK_I64(FRK_PID, struct fr_dump, pid),
	FK_I64(FRK_GLOBAL_RANK, struct fr_dump, global_rank),
	FK_I64(FRK_WORLD_SIZE, struct fr_dump, world_size),
	FK_I64(FRK_LOCAL_RANK, struct fr_dump, local_rank),
	FK_CHARS(FRK_DUMP_REASON, struct fr_dump, dump_reason),
	FK_I64(FRK_DUMP_TIME_NS, struct fr_dump, dump_time_ns),
	FK_I64(FRK_DUMP_MONO_NS, struct fr_dump, dump_mono_ns),
	FK_OBJECT_OF(FRK_PROCESS, process_keys),
	FK_OBJECT_OF(FRK_TRIGGER, trigger_keys),
	FK_CALL(FRK_PY_STACKS, top_py_stacks),
	FK_I64(FRK_RING_SIZE, struct fr_dump, ring_size),
	FK_I64(FRK_ENTRIES_RECORDED, struct fr_dump, entries_recorded),
	FK_I64(FRK_ENTRIES_OVERWRITTEN, struct fr_dump, entries_overwritten),
	FK_I64(FRK_EVENTS_DROPPED, struct fr_dump, events_dropped),
	FK_ARRAY_OF(FRK_COMMS, comm_obj),
	FK_ARRAY_OF(FRK_IN_CALL, in_call_obj),
	FK_CALL(FRK_NET, top_net),
	FK_ARRAY_OF(FRK_STACKS, snapshot_obj),
	FK_CHARS(FRK_NCCL_VERSION, struct fr_dump, nccl_version),
	FK_CHARS(FRK_STACKS_ERROR, struct fr_dump, stacks_error),
	FK_CALL(FRK_STACKS_PENDING, top_stacks_pending),
	FK_PASSED(FRK_STATE_WRITTEN_NS),
};

/* The top-level members from j->p on (first: the opening '{' is still ahead). With
 * stop_at_entries, returns at the "entries" key with j->p at its value. */
static bool top_level(struct jlex *j, bool first, bool stop_at_entries, bool *at_entries)
{
	struct jp *P = jp_of(j);
	int r;

	P->stop_at_entries = stop_at_entries;
	r = read_keys(j, first, top_keys, FK_NR(top_keys), P->d);
	if (r == FK_STOP)
		*at_entries = true;
	return r != FK_FAIL;
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
	d->stacks_pending = false;
	d->trigger_id[0] = d->trigger_origin[0] = d->trigger_reason[0] = 0;
	d->trigger_time_ns = FR_UNK;
	d->nccl_version[0] = d->torch_version[0] = 0;
	d->torch = false;
	d->net_source = FR_NET_ABSENT;
	d->net_error[0] = 0;
	d->nr_host_addrs = d->nr_down_addrs = 0;
	d->nr_socks = 0;
	d->net_truncated = false;
}

static int finish_parse(struct fr_dump *d, struct jlex *j)
{
	if (!j->failed) {
		jl_ws(j);
		if (j->p != j->end)
			jl_fail(j, "trailing data after the dump");
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
	struct jp P;
	struct jlex *j = jp_init(&P, d, buf, len, 0);

	reset(d);
	/* a UTF-8 byte order mark is tolerated */
	if (len >= 3 && !memcmp(buf, "\xef\xbb\xbf", 3))
		j->p += 3;
	top_level(j, true, false, NULL);
	return finish_parse(d, j);
}

int fr_dump__parse_head(struct fr_dump *d, const char *buf, size_t len, size_t *entries_off)
{
	struct jp P;
	struct jlex *j = jp_init(&P, d, buf, len, 0);
	bool at = false;

	reset(d);
	if (len >= 3 && !memcmp(buf, "\xef\xbb\xbf", 3))
		j->p += 3;
	if (!top_level(j, true, true, &at) || !at) {
		if (j->p >= j->end)
			return 1;	/* the head chunk ends before "entries" */
		return finish_parse(d, j);
	}
	jl_ws(j);
	if (j->p >= j->end)
		return 1;
	if (*j->p != '[') {
		jl_fail(j, "expected an array");
		return finish_parse(d, j);
	}
	*entries_off = (size_t)(j->p + 1 - buf);
	return 0;
}

static const char entry_mark[] = "{\"record_id\":";

int fr_dump__parse_tail(struct fr_dump *d, const char *tail, size_t len, size_t file_off,
			size_t keep_last)
{
	const char *m = memmem(tail, len, entry_mark, sizeof(entry_mark) - 1);
	struct jp P;
	struct jlex *j = jp_init(&P, d, tail, len, file_off);
	int last_comm = -1;

	if (!m)
		return 1;
	j->p = m;
	d->nr_entries = 0;
	/* entries up to the array's end, then the rest of the top-level object */
	for (;;) {
		if (!entry_obj(j, &last_comm))
			break;
		if (jl_eat(j, ','))
			continue;
		if (!jl_eat(j, ']'))
			jl_fail(j, "expected ',' or ']'");
		break;
	}
	if (!j->failed)
		top_level(j, false, false, NULL);
	if (!j->failed && keep_last && d->nr_entries > keep_last) {
		memmove(d->entries, d->entries + (d->nr_entries - keep_last),
			keep_last * sizeof(*d->entries));
		d->nr_entries = keep_last;
	}
	return finish_parse(d, j);
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
	free(d->socks);
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
