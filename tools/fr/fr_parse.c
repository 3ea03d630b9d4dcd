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

#define KEY(s) (klen == (int)sizeof(s) - 1 && !memcmp(key, s, sizeof(s) - 1))

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
static bool learned_obj(struct jlex *j, struct fr_comm_info *c)
{
	char key[32], buf[16];
	int klen;
	bool first = true;

	jl_ws(j);
	if (j->p < j->end && *j->p != '{')
		return jl_skip(j, 0);
	while (jl_next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY(FRK_SEQ_ORIGIN)) {
			ok = jl_str_field(j, buf, sizeof(buf));
			c->seq_attach = ok && !strcmp(buf, "attach");
		} else {
			ok = jl_skip(j, 0);
		}
		if (!ok)
			return false;
	}
	return !j->failed;
}

static bool comm_obj(struct jlex *j)
{
	struct fr_dump *d;
	struct fr_comm_info c = { 0 };
	char key[32];
	int klen, idx;
	int64_t cross = FR_UNK;
	bool first = true;

	c.rank = c.nranks = FR_UNK;
	c.last_enqueued = c.last_started = c.last_completed = c.last_p2p = FR_UNK;
	c.async_error = c.init_rc = FR_UNK;
	c.split_color = c.split_key = FR_UNK;
	while (jl_next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY(FRK_COMM_ID))
			ok = jl_str_field(j, c.id, sizeof(c.id));
		else if (KEY(FRK_CROSS_RANK_ID))
			ok = jl_int(j, &cross);
		else if (KEY(FRK_PARENT))
			ok = jl_str_field(j, c.parent, sizeof(c.parent));
		else if (KEY(FRK_SPLIT_COLOR))
			ok = jl_int(j, &c.split_color);
		else if (KEY(FRK_SPLIT_KEY))
			ok = jl_int(j, &c.split_key);
		else if (KEY(FRK_LEARNED))
			ok = learned_obj(j, &c);
		else if (KEY(FRK_RANK))
			ok = jl_int(j, &c.rank);
		else if (KEY(FRK_NRANKS))
			ok = jl_int(j, &c.nranks);
		else if (KEY(FRK_STATE))
			ok = jl_str_field(j, c.state, sizeof(c.state));
		else if (KEY(FRK_ASYNC_ERROR))
			ok = jl_int(j, &c.async_error);
		else if (KEY(FRK_INIT_RC))
			ok = jl_int(j, &c.init_rc);
		else if (KEY(FRK_CREATED_BY))
			ok = jl_str_field(j, c.created_by, sizeof(c.created_by));
		else if (KEY(FRK_LAST_ENQUEUED_SEQ))
			ok = jl_int(j, &c.last_enqueued);
		else if (KEY(FRK_LAST_STARTED_SEQ))
			ok = jl_int(j, &c.last_started);
		else if (KEY(FRK_LAST_COMPLETED_SEQ))
			ok = jl_int(j, &c.last_completed);
		else if (KEY(FRK_LAST_P2P_SEQ))
			ok = jl_int(j, &c.last_p2p);
		else
			ok = jl_skip(j, 0);
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

static bool in_call_obj(struct jlex *j)
{
	struct fr_in_call ic = { 0 };
	char key[32];
	int klen;
	bool first = true;
	struct fr_dump *d = jp_of(j)->d;

	ic.tid = ic.entered_ns = ic.seq = FR_UNK;
	while (jl_next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY(FRK_TID))
			ok = jl_int(j, &ic.tid);
		else if (KEY(FRK_API))
			ok = jl_str_field(j, ic.api, sizeof(ic.api));
		else if (KEY(FRK_THREAD_NAME))
			ok = jl_str_field(j, ic.thread_name, sizeof(ic.thread_name));
		else if (KEY(FRK_ENTERED_NS))
			ok = jl_int(j, &ic.entered_ns);
		else if (KEY(FRK_COMM_ID))
			ok = jl_str_field(j, ic.comm_id, sizeof(ic.comm_id));
		else if (KEY(FRK_SEQ))
			ok = jl_int(j, &ic.seq);
		else
			ok = jl_skip(j, 0);
		if (!ok)
			return false;
	}
	if (j->failed)
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

static bool pyframe_obj(struct jlex *j, struct fr_pyframe *f)
{
	char key[32];
	int klen;
	int64_t v;
	bool first = true;

	memset(f, 0, sizeof(*f));
	jl_ws(j);
	if (j->p < j->end && *j->p != '{')
		return jl_skip(j, 0);
	while (jl_next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY(FRK_NAME)) {
			ok = jl_is_null(j) ? jl_skip(j, 0) :
					     jl_str_field(j, f->name, sizeof(f->name));
		} else if (KEY(FRK_FILENAME)) {
			ok = jl_is_null(j) ? jl_skip(j, 0) :
					     jl_str_field(j, f->file, sizeof(f->file));
		} else if (KEY(FRK_LINE)) {
			ok = jl_int(j, &v);
			f->line = v > 0 && v < INT32_MAX ? (int32_t)v : 0;
		} else {
			ok = jl_skip(j, 0);
		}
		if (!ok)
			return false;
	}
	return !j->failed;
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

static bool frame_obj(struct jlex *j, struct fr_frame *f)
{
	char key[32], buf[16];
	int klen;
	int64_t v;
	bool first = true;

	memset(f, 0, sizeof(*f));
	f->module_off = FR_UNK;
	jl_ws(j);
	if (j->p < j->end && *j->p != '{')
		return jl_skip(j, 0);
	while (jl_next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY(FRK_KIND)) {
			ok = jl_str_field(j, buf, sizeof(buf));
			f->kind = !strcmp(buf, "native") ? FR_FRAME_NATIVE :
				  !strcmp(buf, "python") ? FR_FRAME_PYTHON : FR_FRAME_UNKNOWN;
		} else if (KEY(FRK_FUNC)) {
			ok = jl_str_field(j, f->func, sizeof(f->func));
		} else if (KEY(FRK_FILE)) {
			ok = jl_str_field(j, f->file, sizeof(f->file));
		} else if (KEY(FRK_MODULE)) {
			ok = jl_str_field(j, f->module, sizeof(f->module));
		} else if (KEY(FRK_MODULE_OFF)) {
			ok = hex_field(j, &f->module_off);
		} else if (KEY(FRK_UNRECOVERABLE)) {
			f->unrecoverable = !jl_is_null(j);
			ok = jl_skip(j, 0);
		} else if (KEY(FRK_LINE)) {
			ok = jl_int(j, &v);
			f->line = v > 0 && v < INT32_MAX ? (int32_t)v : 0;
		} else {
			ok = jl_skip(j, 0);
		}
		if (!ok)
			return false;
	}
	return !j->failed;
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

/* One thread. Its frames are read only while it may be the issuing thread (the writer puts
 * "issuing" before "frames"; when it does not, the top frames are read into scratch). */
static bool thread_obj(struct jlex *j, struct fr_snapshot *sn, struct fr_frame *scratch)
{
	struct fr_dump *d = jp_of(j)->d;
	struct fr_stack_thread t = { 0 };
	char key[32], buf[48];
	int klen, nr_frames = 0, len;
	int64_t v, issuing = FR_UNK;
	bool first = true, more = false;

	t.tid = FR_UNK;
	while (jl_next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY(FRK_TID)) {
			ok = jl_int(j, &t.tid);
		} else if (KEY(FRK_NAME)) {
			ok = jl_str_field(j, t.name, sizeof(t.name));
		} else if (KEY(FRK_STATE)) {
			ok = jl_str_field(j, buf, sizeof(buf));
			t.state = ok && strchr("RSDTtZXIWPK", buf[0]) && buf[0] ? buf[0] : 0;
		} else if (KEY(FRK_WHERE)) {
			if (jl_is_null(j)) {
				ok = jl_skip(j, 0);
			} else if ((ok = (len = jl_str(j, buf, sizeof(buf))) >= 0)) {
				t.where = (uint8_t)lookup_where(buf, (size_t)len);
			}
		} else if (KEY(FRK_API)) {
			ok = jl_str_field(j, t.api, sizeof(t.api));
		} else if (KEY(FRK_PROGRESS)) {
			ok = jl_str_field(j, buf, sizeof(buf));
			t.progress = !strcmp(buf, "none") ? FR_PROG_NONE :
				     !strcmp(buf, "yes") ? FR_PROG_YES : FR_PROG_UNKNOWN;
		} else if (KEY(FRK_MAIN)) {
			ok = jl_int(j, &v);
			t.main = v == 1;
		} else if (KEY(FRK_ISSUING)) {
			ok = jl_int(j, &issuing);
			t.issuing = issuing == 1;
		} else if (KEY(FRK_PYTHON)) {
			ok = jl_int(j, &v);
			t.python = v == 1;
		} else if (KEY(FRK_FRAMES)) {
			/* another thread already is the issuing one, or this one is not */
			if (sn->issuing >= 0 || (issuing != FR_UNK && issuing != 1))
				ok = jl_skip(j, 0);
			else
				ok = frames_array(j, scratch, &nr_frames, &more);
		} else {
			ok = jl_skip(j, 0);
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
		return jl_fail(j, "out of memory");
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

static bool snapshot_obj(struct jlex *j)
{
	struct fr_dump *d = jp_of(j)->d;
	struct fr_snapshot *sn;
	struct fr_frame *scratch;
	char key[32], buf[16];
	int klen;
	int64_t v;
	bool first = true, ok = true;

	if (d->nr_snaps >= FR_MAX_SNAPSHOTS)
		return jl_skip(j, 0);
	if (ARRAY_RESERVE(d->snaps, d->cap_snaps, d->nr_snaps + 1, 2))
		return jl_fail(j, "out of memory");
	scratch = malloc(FR_STACK_FRAMES * sizeof(*scratch));
	if (!scratch)
		return jl_fail(j, "out of memory");
	sn = &d->snaps[d->nr_snaps];
	memset(sn, 0, offsetof(struct fr_snapshot, frames));
	sn->time_ns = sn->samples = sn->interval_ms = FR_UNK;
	sn->issuing = -1;
	sn->nr_frames = 0;
	sn->more_frames = false;
	sn->first_thread = d->nr_threads;
	jl_ws(j);
	if (j->p < j->end && *j->p != '{') {
		free(scratch);
		return jl_skip(j, 0);
	}
	while (ok && jl_next_key(j, &first, key, sizeof(key), &klen)) {
		if (KEY(FRK_TAKEN)) {
			ok = jl_str_field(j, buf, sizeof(buf));
			sn->taken = !strcmp(buf, "attach") ? FR_TAKEN_ATTACH :
				    !strcmp(buf, "dump") ? FR_TAKEN_DUMP :
				    !strcmp(buf, "request") ? FR_TAKEN_REQUEST : FR_TAKEN_OTHER;
		} else if (KEY(FRK_TIME_NS)) {
			ok = jl_int(j, &sn->time_ns);
		} else if (KEY(FRK_SAMPLES)) {
			ok = jl_int(j, &sn->samples);
		} else if (KEY(FRK_INTERVAL_MS)) {
			ok = jl_int(j, &sn->interval_ms);
		} else if (KEY(FRK_EXITED)) {
			ok = jl_int(j, &v);
			sn->exited = v == 1;
		} else if (KEY(FRK_PTRACE_ERROR)) {
			ok = jl_str_field(j, sn->ptrace_error, sizeof(sn->ptrace_error));
		} else if (KEY(FRK_PYTHON)) {
			ok = jl_str_field(j, sn->python, sizeof(sn->python));
		} else if (KEY(FRK_THREADS)) {
			bool f2 = true;

			if (jl_is_null(j)) {
				ok = jl_skip(j, 0);
				continue;
			}
			while (ok && jl_next_elem(j, &f2))
				ok = thread_obj(j, sn, scratch);
			ok = ok && !j->failed;
		} else {
			ok = jl_skip(j, 0);
		}
	}
	free(scratch);
	if (!ok || j->failed)
		return false;
	d->nr_snaps++;
	return true;
}

static bool stacks_array(struct jlex *j)
{
	bool first = true;

	if (jl_is_null(j))
		return jl_skip(j, 0);
	while (jl_next_elem(j, &first))
		if (!snapshot_obj(j))
			return false;
	return !j->failed;
}

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

static bool process_obj(struct jlex *j)
{
	struct fr_dump *d = jp_of(j)->d;
	char key[32], buf[16];
	int klen;
	bool first = true;

	if (jl_is_null(j))
		return jl_skip(j, 0);
	while (jl_next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY(FRK_STATE)) {
			ok = jl_str_field(j, buf, sizeof(buf));
			d->proc_state = !strcmp(buf, "running") ? FR_PROC_RUNNING :
					!strcmp(buf, "exited")  ? FR_PROC_EXITED :
					!strcmp(buf, "killed")  ? FR_PROC_KILLED : FR_PROC_UNKNOWN;
		} else if (KEY(FRK_EXIT_CODE)) {
			ok = jl_int(j, &d->exit_code);
		} else if (KEY(FRK_SIGNAL)) {
			ok = jl_int(j, &d->signal);
		} else {
			ok = jl_skip(j, 0);
		}
		if (!ok)
			return false;
	}
	return !j->failed;
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

/* a "sockets" element; one whose endpoints do not parse is left out */
static bool net_sock_obj(struct jlex *j)
{
	struct fr_dump *d = jp_of(j)->d;
	struct fr_net_sock s = { .tx_queue = FR_UNK, .unacked = FR_UNK, .retransmits = FR_UNK,
				 .probes = FR_UNK, .backoff = FR_UNK, .last_ack_ms = FR_UNK };
	char key[32], buf[80];
	int klen;
	bool first = true, lok = false, rok = false;

	while (jl_next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY(FRK_LOCAL)) {
			ok = jl_str_field(j, buf, sizeof(buf));
			lok = ok && endpoint(buf, s.local, &s.lport);
		} else if (KEY(FRK_REMOTE)) {
			ok = jl_str_field(j, buf, sizeof(buf));
			rok = ok && endpoint(buf, s.remote, &s.rport);
		} else if (KEY(FRK_STATE)) {
			ok = jl_str_field(j, buf, sizeof(buf));
			s.established = !strcmp(buf, "established");
		} else if (KEY(FRK_TIMER)) {
			ok = jl_str_field(j, buf, sizeof(buf));
			s.timer = !strcmp(buf, "retransmit") ? FR_TIMER_RETRANSMIT :
				  !strcmp(buf, "probe") ? FR_TIMER_PROBE : FR_TIMER_OTHER;
		} else if (KEY(FRK_TX_QUEUE)) {
			ok = jl_int(j, &s.tx_queue);
		} else if (KEY(FRK_UNACKED)) {
			ok = jl_int(j, &s.unacked);
		} else if (KEY(FRK_RETRANSMITS)) {
			ok = jl_int(j, &s.retransmits);
		} else if (KEY(FRK_PROBES)) {
			ok = jl_int(j, &s.probes);
		} else if (KEY(FRK_BACKOFF)) {
			ok = jl_int(j, &s.backoff);
		} else if (KEY(FRK_LAST_ACK_RECV_MS)) {
			ok = jl_int(j, &s.last_ack_ms);
		} else {
			ok = jl_skip(j, 0);
		}
		if (!ok)
			return false;
	}
	if (j->failed || !lok || !rok)
		return !j->failed;
	if (d->nr_socks >= FR_MAX_NET_SOCKS) {
		d->net_truncated = true;
		return true;
	}
	if (ARRAY_RESERVE(d->socks, d->cap_socks, d->nr_socks + 1, 16))
		return jl_fail(j, "out of memory");
	d->socks[d->nr_socks++] = s;
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

/* an "interfaces" element: {"name", "address", "up", "running"}; its address is kept when
 * the interface is not running */
static bool iface_obj(struct jlex *j)
{
	struct fr_dump *d = jp_of(j)->d;
	char key[32], addr[64] = "";
	int klen;
	bool first = true, running = true, ok;

	while (jl_next_key(j, &first, key, sizeof(key), &klen)) {
		if (KEY(FRK_ADDRESS)) {
			ok = jl_str_field(j, addr, sizeof(addr));
		} else if (KEY(FRK_UP) || KEY(FRK_RUNNING)) {
			jl_ws(j);
			running &= j->p < j->end && *j->p == 't';
			ok = jl_skip(j, 0);
		} else {
			ok = jl_skip(j, 0);
		}
		if (!ok)
			return false;
	}
	if (!j->failed && !running && d->nr_down_addrs < FR_MAX_HOST_ADDRS &&
	    fr_net_addr(addr, d->down_addrs[d->nr_down_addrs]))
		d->nr_down_addrs++;
	return !j->failed;
}

/* "net": {"source": "inet_diag" | "proc_net_tcp" | null, "error", "host_addresses": [...],
 * "sockets": [...] | null, ...}; null or a null "sockets" is unknown */
static bool net_obj(struct jlex *j)
{
	struct fr_dump *d = jp_of(j)->d;
	char key[32], buf[16];
	int klen, src = FR_NET_UNKNOWN;
	bool first = true, have_socks = false;

	d->net_source = FR_NET_UNKNOWN;
	if (jl_is_null(j))
		return jl_skip(j, 0);
	while (jl_next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY(FRK_SOURCE)) {
			ok = jl_str_field(j, buf, sizeof(buf));
			src = !strcmp(buf, "inet_diag") ? FR_NET_INET_DIAG :
			      !strcmp(buf, "proc_net_tcp") ? FR_NET_PROC : FR_NET_UNKNOWN;
		} else if (KEY(FRK_ERROR)) {
			ok = jl_str_field(j, d->net_error, sizeof(d->net_error));
		} else if (KEY(FRK_HOST_ADDRESSES)) {
			ok = jl_is_null(j) ? jl_skip(j, 0) : array_of(j, host_addr);
		} else if (KEY(FRK_INTERFACES)) {
			ok = jl_is_null(j) ? jl_skip(j, 0) : array_of(j, iface_obj);
		} else if (KEY(FRK_SOCKETS)) {
			have_socks = !jl_is_null(j);
			ok = have_socks ? array_of(j, net_sock_obj) : jl_skip(j, 0);
		} else {
			ok = jl_skip(j, 0);
		}
		if (!ok)
			return false;
	}
	d->net_source = have_socks ? src : FR_NET_UNKNOWN;
	if (!have_socks && !d->net_error[0])
		snprintf(d->net_error, sizeof(d->net_error), "no sockets in the dump");
	return !j->failed;
}

/* "trigger": {"id", "origin_host", "reason", "time_ns"} or null (docs/fr-schema.md) */
/* "py_stacks": {"python": "3.11.2" | null, "why_no_frames": null | "..."}, or null */
static bool py_stacks_obj(struct jlex *j)
{
	struct fr_dump *d = jp_of(j)->d;
	char key[32];
	int klen;
	bool first = true;

	if (jl_is_null(j))
		return jl_skip(j, 0);
	jl_ws(j);
	if (j->p < j->end && *j->p != '{')
		return jl_skip(j, 0);
	d->py_stacks = true;
	while (jl_next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY(FRK_PYTHON))
			ok = jl_str_field(j, d->py_python, sizeof(d->py_python));
		else if (KEY(FRK_WHY_NO_FRAMES))
			ok = jl_str_field(j, d->py_why, sizeof(d->py_why));
		else
			ok = jl_skip(j, 0);
		if (!ok)
			return false;
	}
	return !j->failed;
}

static bool trigger_obj(struct jlex *j)
{
	struct fr_dump *d = jp_of(j)->d;
	char key[32];
	int klen;
	bool first = true;

	if (jl_is_null(j))
		return jl_skip(j, 0);
	while (jl_next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY(FRK_ID))
			ok = jl_str_field(j, d->trigger_id, sizeof(d->trigger_id));
		else if (KEY(FRK_ORIGIN_HOST))
			ok = jl_str_field(j, d->trigger_origin, sizeof(d->trigger_origin));
		else if (KEY(FRK_REASON))
			ok = jl_str_field(j, d->trigger_reason, sizeof(d->trigger_reason));
		else if (KEY(FRK_TIME_NS))
			ok = jl_int(j, &d->trigger_time_ns);
		else
			ok = jl_skip(j, 0);
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
	d->net_source = FR_NET_ABSENT;
	d->net_error[0] = 0;
	d->nr_host_addrs = d->nr_down_addrs = 0;
	d->nr_socks = 0;
	d->net_truncated = false;
}

/* The top-level members from j->p on (first: the opening '{' is still ahead). With
 * stop_at_entries, returns at the "entries" key with j->p at its value. */
static bool top_level(struct jlex *j, bool first, bool stop_at_entries, bool *at_entries)
{
	struct fr_dump *d = jp_of(j)->d;
	char key[32];
	int klen;

	while (jl_next_key(j, &first, key, sizeof(key), &klen)) {
		bool ok;

		if (KEY(FRK_ENTRIES)) {
			if (stop_at_entries) {
				*at_entries = true;
				return true;
			}
			ok = entries_array(j);
		} else if (KEY(FRK_SCHEMA))
			ok = jl_str_field(j, d->schema, sizeof(d->schema));
		else if (KEY(FRK_VERSION))
			ok = jl_int(j, &d->version);
		else if (KEY(FRK_HOST))
			ok = jl_str_field(j, d->host, sizeof(d->host));
		else if (KEY(FRK_PID))
			ok = jl_int(j, &d->pid);
		else if (KEY(FRK_GLOBAL_RANK))
			ok = jl_int(j, &d->global_rank);
		else if (KEY(FRK_WORLD_SIZE))
			ok = jl_int(j, &d->world_size);
		else if (KEY(FRK_LOCAL_RANK))
			ok = jl_int(j, &d->local_rank);
		else if (KEY(FRK_DUMP_REASON))
			ok = jl_str_field(j, d->dump_reason, sizeof(d->dump_reason));
		else if (KEY(FRK_DUMP_TIME_NS))
			ok = jl_int(j, &d->dump_time_ns);
		else if (KEY(FRK_DUMP_MONO_NS))
			ok = jl_int(j, &d->dump_mono_ns);
		else if (KEY(FRK_PROCESS))
			ok = process_obj(j);
		else if (KEY(FRK_TRIGGER))
			ok = trigger_obj(j);
		else if (KEY(FRK_PY_STACKS))
			ok = py_stacks_obj(j);
		else if (KEY(FRK_RING_SIZE))
			ok = jl_int(j, &d->ring_size);
		else if (KEY(FRK_ENTRIES_RECORDED))
			ok = jl_int(j, &d->entries_recorded);
		else if (KEY(FRK_ENTRIES_OVERWRITTEN))
			ok = jl_int(j, &d->entries_overwritten);
		else if (KEY(FRK_EVENTS_DROPPED))
			ok = jl_int(j, &d->events_dropped);
		else if (KEY(FRK_COMMS))
			ok = array_of(j, comm_obj);
		else if (KEY(FRK_IN_CALL))
			ok = array_of(j, in_call_obj);
		else if (KEY(FRK_STACKS))
			ok = stacks_array(j);
		else if (KEY(FRK_NCCL_VERSION))
			ok = jl_str_field(j, d->nccl_version, sizeof(d->nccl_version));
		else if (KEY(FRK_STACKS_ERROR))
			ok = jl_str_field(j, d->stacks_error, sizeof(d->stacks_error));
		else if (KEY(FRK_NET))
			ok = net_obj(j);
		else
			ok = jl_skip(j, 0);
		if (!ok)
			return false;
	}
	return !j->failed;
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
