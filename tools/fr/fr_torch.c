// SPDX-License-Identifier: MIT
/* fr_torch: PyTorch's flight-recorder dumps, read into the structures fr_parse.c fills and
 * written from them (docs/fr-torch.md).
 *
 * A PyTorch dump (torch/csrc/distributed/c10d/FlightRecorder*.cpp, version "2.x"):
 *   {"version": "2.10", "comm_lib_version": "2.21.5",
 *    "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
 *    "pg_status": {"0": {"last_enqueued_collective": 3, "last_started_collective": 3,
 *                        "last_completed_collective": 2}},
 *    "entries": [{"record_id": 0, "pg_id": 0, "process_group": ("0", "default_pg"),
 *                 "collective_seq_id": 1, "p2p_seq_id": 0, "op_id": 1,
 *                 "profiling_name": "nccl:all_reduce", "time_created_ns": ...,
 *                 "input_sizes": [[1024]], "input_dtypes": ["Float"], "output_sizes": ...,
 *                 "state": "completed", "time_discovered_started_ns": ... or None,
 *                 "time_discovered_completed_ns": ..., "retired": True, "timeout_ms": 600000,
 *                 "is_p2p": False, "frames": [{"name", "filename", "line"}], ...}]}
 * The file holds no rank: PyTorch names it <prefix><global rank>. A pg's name is the same on
 * every member, so it is the comm id; its "ranks" (global ranks, as a string) give nranks and
 * this rank's place.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "fr_pickle.h"
#include "fr_torch.h"
#include "atomic_file.h"
#include "growbuf.h"

/* c10::ScalarType names (toString) <-> enum fr_dtype */
static const struct {
	const char *torch;
	uint8_t dtype;
} dtypes[] = {
	{ "Char", FR_DT_INT8 }, { "Byte", FR_DT_UINT8 }, { "Int", FR_DT_INT32 },
	{ "UInt32", FR_DT_UINT32 }, { "Long", FR_DT_INT64 }, { "UInt64", FR_DT_UINT64 },
	{ "Half", FR_DT_FLOAT16 }, { "Float", FR_DT_FLOAT32 }, { "Double", FR_DT_FLOAT64 },
	{ "BFloat16", FR_DT_BFLOAT16 }, { "Float8_e4m3fn", FR_DT_FLOAT8E4M3 },
	{ "Float8_e5m2", FR_DT_FLOAT8E5M2 },
};
#define NR_DTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

/* ProcessGroupNCCL's profiling names (after "nccl:") that are not our op names */
static const struct {
	const char *torch;
	uint8_t op;
} op_alias[] = {
	{ "allreduce", FR_OP_ALL_REDUCE }, { "_allgather_base", FR_OP_ALL_GATHER },
	{ "_all_gather_base", FR_OP_ALL_GATHER }, { "allgather", FR_OP_ALL_GATHER },
	{ "_reduce_scatter_base", FR_OP_REDUCE_SCATTER }, { "_broadcast_oop", FR_OP_BROADCAST },
	{ "_reduce_oop", FR_OP_REDUCE }, { "all_to_allv", FR_OP_ALL_TO_ALL },
	{ "alltoall_base", FR_OP_ALL_TO_ALL }, { "alltoall", FR_OP_ALL_TO_ALL },
	{ "all_gather_single", FR_OP_ALL_GATHER }, { "reduce_scatter_single", FR_OP_REDUCE_SCATTER },
	{ "all_to_all_single", FR_OP_ALL_TO_ALL }, { "all_to_all_v_single", FR_OP_ALL_TO_ALL },
};

int64_t fr_torch_rank_from_name(const char *name)
{
	size_t len = strlen(name), i = len;
	int64_t r = 0;

	while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9')
		i--;
	if (i == len || len - i > 7)
		return FR_UNK;
	for (; i < len; i++)
		r = r * 10 + (name[i] - '0');
	return r < FR_MAX_NRANKS ? r : FR_UNK;
}

bool fr_torch_is_dump(const void *buf, size_t len)
{
	return pk_is_pickle(buf, len);
}

static int64_t int_of(const struct pk_val *v)
{
	return v && v->type == PK_INT ? v->i : FR_UNK;
}

static int torch_op(const struct pk_val *prof, int32_t *peer)
{
	char name[64];
	const char *s, *arrow;
	size_t len;

	*peer = -1;
	if (!pk_str_copy(prof, name, sizeof(name)))
		return FR_OP_UNKNOWN;
	s = strchr(name, ':');
	s = s ? s + 1 : name;
	len = strcspn(s, " ");
	/* "send 1->2": 2 is the peer; "recv 3<-0": 0 is */
	arrow = strstr(s + len, "->");
	if (!arrow)
		arrow = strstr(s + len, "<-");
	if (arrow) {
		char *end;
		long p = strtol(arrow + 2, &end, 10);

		if (end != arrow + 2 && !*end && p >= 0 && p < FR_MAX_NRANKS)
			*peer = (int32_t)p;
	}
	for (size_t i = 0; i < sizeof(op_alias) / sizeof(op_alias[0]); i++)
		if (strlen(op_alias[i].torch) == len && !memcmp(op_alias[i].torch, s, len))
			return op_alias[i].op;
	return fr_op_from_name(s, len);
}

static int torch_dtype(const struct pk_val *list, const struct pk_doc *doc)
{
	const struct pk_val *v = pk_item(doc, list, 0);

	if (!v || v->type != PK_STR)
		return FR_DT_UNKNOWN;
	for (size_t i = 0; i < NR_DTYPES; i++)
		if (pk_str_eq(v, dtypes[i].torch))
			return dtypes[i].dtype;
	return FR_DT_OTHER;
}

/* [[d0, d1], [d2]] -> d0*d1 + d2 elements; FR_UNK when any part is not a number */
static int64_t torch_sizes(const struct pk_doc *doc, const struct pk_val *list)
{
	int64_t total = 0;

	if (!list || list->type != PK_LIST)
		return FR_UNK;
	for (uint32_t i = 0; i < list->n; i++) {
		const struct pk_val *t = pk_item(doc, list, i);
		int64_t prod = 1;

		if (!t || (t->type != PK_LIST && t->type != PK_TUPLE))
			return FR_UNK;
		for (uint32_t k = 0; k < t->n; k++) {
			int64_t dim = int_of(pk_item(doc, t, k));

			if (dim == FR_UNK || dim < 0 || (dim && prod > INT64_MAX / 4 / dim))
				return FR_UNK;
			prod *= dim;
		}
		if (total > INT64_MAX / 2 - prod)
			return FR_UNK;
		total += prod;
	}
	return total;
}

/* pg_config's "ranks": "[0, 1, 2]" (or "[0,1,2]"). *nranks and *mine (the index of rank in
 * it, FR_UNK when absent); false when it is not such a list. */
/* An entry's "frames" ([{"name", "filename", "line"}], innermost first) as a stack of d:
 * fr_entry.pystack, 0 when there are none (PyTorch dumps without stack traces: []) */
static int torch_frames(struct fr_dump *d, const struct pk_doc *doc, const struct pk_val *list,
			uint32_t *pystack)
{
	int n = 0;
	int64_t idx;

	*pystack = 0;
	if (!list || list->type != PK_LIST)
		return 0;
	for (uint32_t i = 0; i < list->n && n < FR_ENTRY_FRAMES; i++) {
		const struct pk_val *fv = pk_item(doc, list, i), *line;
		struct fr_pyframe *f = &d->py_scratch[n];

		if (!fv || fv->type != PK_DICT)
			continue;
		memset(f, 0, sizeof(*f));
		pk_str_copy(pk_get(doc, fv, "name"), f->name, sizeof(f->name));
		pk_str_copy(pk_get(doc, fv, "filename"), f->file, sizeof(f->file));
		line = pk_get(doc, fv, "line");
		if (line && line->type == PK_INT && int_of(line) > 0 && int_of(line) < INT32_MAX)
			f->line = (int32_t)int_of(line);
		n++;
	}
	idx = fr_dump__pystack(d, n, list->n > FR_ENTRY_FRAMES);
	if (idx < 0)
		return (int)idx;
	*pystack = (uint32_t)idx;
	return 0;
}

static bool parse_ranks(const struct pk_val *v, int64_t rank, int64_t *nranks, int64_t *mine)
{
	const char *p, *end;
	int64_t n = 0;

	*mine = FR_UNK;
	if (!v || v->type != PK_STR || v->n < 2)
		return false;
	p = v->s;
	end = v->s + v->n;
	while (p < end && *p == ' ')
		p++;
	if (p >= end || *p++ != '[')
		return false;
	for (;;) {
		int64_t r = 0;
		int digits = 0;

		while (p < end && *p == ' ')
			p++;
		if (p < end && *p == ']' && n == 0) {
			p++;
			break;
		}
		while (p < end && *p >= '0' && *p <= '9' && digits < 8) {
			r = r * 10 + (*p++ - '0');
			digits++;
		}
		if (!digits || r >= FR_MAX_NRANKS || n >= FR_MAX_NRANKS)
			return false;
		if (r == rank && *mine == FR_UNK)
			*mine = n;
		n++;
		while (p < end && *p == ' ')
			p++;
		if (p < end && *p == ',') {
			p++;
			continue;
		}
		if (p < end && *p == ']') {
			p++;
			break;
		}
		return false;
	}
	*nranks = n;
	return true;
}

static int fail(struct fr_dump *d, const char *what)
{
	snprintf(d->err, sizeof(d->err), "PyTorch dump: %s", what);
	return -EINVAL;
}

struct pg_map {
	int64_t pg_id;
	int comm;
};

struct pg_maps {
	struct pg_map *map;
	size_t nr, cap;
};

/* pg_config: {name: {"name", "desc", "ranks"}} -> comms */
static int parse_pg_config(struct fr_dump *d, const struct pk_doc *doc, const struct pk_val *cfg,
			   int64_t grank)
{
	char id[FR_ID_LEN];
	int idx;

	for (uint32_t i = 0; i < cfg->n; i++) {
		const struct pk_val *key = pk_at(doc, cfg->kids[2 * i]);
		const struct pk_val *pg = pk_at(doc, cfg->kids[2 * i + 1]);
		struct fr_comm_info *c;
		int64_t nranks = FR_UNK, mine = FR_UNK;
		char desc[32] = "";

		if (!pk_str_copy(key, id, sizeof(id)) || !id[0] || pg->type != PK_DICT)
			continue;	/* a pg without a name cannot be matched across ranks */
		idx = fr_dump__comm(d, id);
		if (idx < 0)
			return idx == -ENOMEM ? -ENOMEM : fail(d, "too many process groups");
		c = &d->comms[idx];
		c->in_header = true;
		if (parse_ranks(pk_get(doc, pg, "ranks"), grank, &nranks, &mine)) {
			c->nranks = nranks;
			c->rank = mine;
		}
		snprintf(c->state, sizeof(c->state), "active");
		pk_str_copy(pk_get(doc, pg, "desc"), desc, sizeof(desc));
		snprintf(c->created_by, sizeof(c->created_by), "%s", "ProcessGroupNCCL");
		if (!strcmp(desc, "default_pg") && nranks != FR_UNK)
			d->world_size = nranks;
	}
	return 0;
}

/* One pass over an entry's keys (a lookup per field would compare each of ~20 keys a dozen
 * times: this loop is what reading 16k ranks costs): its fields into e, and where its pg is
 * named (*pg_id, *pgv) and its stack (*frames). */
static void entry_fields(const struct pk_doc *doc, const struct pk_val *en, struct fr_entry *e,
			 int64_t *pg_id, const struct pk_val **pgv, const struct pk_val **frames)
{
	char state[16] = "";

	for (uint32_t k = 0; k < en->n; k++) {
		const struct pk_val *key = pk_at(doc, en->kids[2 * k]);
		const struct pk_val *val = pk_at(doc, en->kids[2 * k + 1]);

#define KEY_IS(lit) (key->n == sizeof(lit) - 1 && !memcmp(key->s, lit, sizeof(lit) - 1))
		if (key->type != PK_STR)
			continue;
		if (KEY_IS("record_id"))
			e->record_id = int_of(val);
		else if (KEY_IS("pg_id"))
			*pg_id = int_of(val);
		else if (KEY_IS("process_group"))
			*pgv = val;
		else if (KEY_IS("collective_seq_id"))
			e->coll_seq = int_of(val);
		else if (KEY_IS("p2p_seq_id"))
			e->p2p_seq = int_of(val);
		else if (KEY_IS("time_created_ns"))
			e->created_ns = int_of(val);
		else if (KEY_IS("time_discovered_completed_ns"))
			e->completed_ns = int_of(val);
		else if (KEY_IS("input_sizes"))
			e->in_size = torch_sizes(doc, val);
		else if (KEY_IS("output_sizes"))
			e->out_size = torch_sizes(doc, val);
		else if (KEY_IS("input_dtypes"))
			e->dtype = torch_dtype(val, doc);
		else if (KEY_IS("profiling_name"))
			e->op = torch_op(val, &e->peer);
		else if (KEY_IS("frames"))
			*frames = val;
		else if (KEY_IS("state") && pk_str_copy(val, state, sizeof(state)))
			e->state = !strcmp(state, "completed") ? FR_ST_COMPLETED :
				   !strcmp(state, "started") ? FR_ST_STARTED :
				   !strcmp(state, "scheduled") ? FR_ST_ENQUEUED : FR_ST_UNKNOWN;
#undef KEY_IS
	}
}

/* "entries": each entry added to its pg's comm (by name, else by pg_id through the map this
 * builds, m) */
static int parse_entries(struct fr_dump *d, const struct pk_doc *doc, const struct pk_val *entries,
			 int64_t grank, struct pg_maps *m)
{
	char id[FR_ID_LEN];
	int err, idx;

	if (entries && entries->type != PK_LIST && entries->type != PK_NONE)
		return fail(d, "\"entries\" is not a list");
	for (uint32_t i = 0; entries && entries->type == PK_LIST && i < entries->n; i++) {
		const struct pk_val *en = pk_item(doc, entries, i), *pgv, *name, *frames;
		struct fr_entry e;
		int64_t pg_id;

		if (en->type != PK_DICT)
			return fail(d, "an entry is not a dict");
		memset(&e, 0, sizeof(e));
		e.record_id = e.coll_seq = e.p2p_seq = e.created_ns = FR_UNK;
		e.count = e.in_size = e.out_size = e.completed_ns = FR_UNK;
		e.root = e.peer = -1;
		pg_id = FR_UNK;
		pgv = NULL;
		frames = NULL;
		entry_fields(doc, en, &e, &pg_id, &pgv, &frames);
		e.redop = FR_RED_NONE;	/* PyTorch records none */
		if ((err = torch_frames(d, doc, frames, &e.pystack)))
			return err;
		/* the pg: its name from "process_group" (name, desc), else by pg_id */
		name = pk_item(doc, pgv, 0);
		idx = -1;
		if (pk_str_copy(name, id, sizeof(id)) && id[0]) {
			idx = fr_dump__comm(d, id);
			if (idx < 0)
				return idx == -ENOMEM ? -ENOMEM : fail(d, "too many process groups");
		} else {
			for (size_t k = 0; k < m->nr; k++)
				if (m->map[k].pg_id == pg_id)
					idx = m->map[k].comm;
		}
		if (idx < 0)
			continue;	/* not attributable to a pg: nothing to align */
		if (d->comms[idx].rank == FR_UNK && grank != FR_UNK) {
			char desc[32] = "";

			/* the default group is the world, in global-rank order: its rank is the
			 * global rank even where pg_config does not say (2.13's gloo recorder
			 * writes pg_config under the name "" with "[]" for a rank's other groups) */
			if (pk_str_copy(pk_item(doc, pgv, 1), desc, sizeof(desc)) &&
			    !strcmp(desc, "default_pg"))
				d->comms[idx].rank = grank;
		}
		if (pg_id != FR_UNK) {
			bool known = false;

			for (size_t k = 0; k < m->nr && !known; k++)
				known = m->map[k].pg_id == pg_id;
			if (!known && m->nr < FR_MAX_COMMS_PER_DUMP) {
				if (ARRAY_RESERVE(m->map, m->cap, m->nr + 1, 8))
					return -ENOMEM;
				m->map[m->nr++] = (struct pg_map){ pg_id, idx };
			}
		}
		e.comm = (uint16_t)idx;
		err = fr_dump__add_entry(d, &e);
		if (err) {
			if (err == -E2BIG)
				err = fail(d, "too many entries");
			return err;
		}
	}
	return 0;
}

/* pg_status: {str(pg_id): {"last_*_collective": n or -1}} */
static void parse_pg_status(struct fr_dump *d, const struct pk_doc *doc,
			    const struct pk_val *status, const struct pg_maps *m)
{
	char id[FR_ID_LEN];
	int idx;

	for (uint32_t i = 0; status && status->type == PK_DICT && i < status->n; i++) {
		const struct pk_val *key = pk_at(doc, status->kids[2 * i]);
		const struct pk_val *st = pk_at(doc, status->kids[2 * i + 1]);
		static const char *const names[3] = { "last_enqueued_collective",
			"last_started_collective", "last_completed_collective" };
		struct fr_comm_info *c;
		char *end;
		long pg_id;

		idx = -1;
		if (!pk_str_copy(key, id, sizeof(id)) || st->type != PK_DICT)
			continue;
		pg_id = strtol(id, &end, 10);
		for (size_t k = 0; k < m->nr && end != id && !*end; k++)
			if (m->map[k].pg_id == pg_id)
				idx = m->map[k].comm;
		if (idx < 0)	/* no entry names it: PyTorch names unnamed pgs str(pg_id) */
			for (size_t k = 0; k < d->nr_comms && idx < 0; k++)
				if (!strcmp(d->comms[k].id, id))
					idx = (int)k;
		if (idx < 0)
			continue;
		c = &d->comms[idx];
		for (int k = 0; k < 3; k++) {
			const struct pk_val *n = pk_get(doc, st, names[k]);
			int64_t val = n && n->type == PK_INT ? (n->i < 0 ? 0 : n->i) : FR_UNK;

			/* the JSON forms write these as strings */
			if (n && n->type == PK_STR) {
				char b[24];
				long long l;

				pk_str_copy(n, b, sizeof(b));
				if (sscanf(b, "%lld", &l) == 1)
					val = l < 0 ? 0 : l;
			}
			*(k == 0 ? &c->last_enqueued : k == 1 ? &c->last_started :
			  &c->last_completed) = val;
		}
	}
}

static int parse_doc(struct fr_dump *d, const struct pk_doc *doc, int64_t grank)
{
	const struct pk_val *top = pk_at(doc, doc->root), *cfg, *v;
	struct pg_maps m = {};
	int err;

	if (top->type != PK_DICT)
		return fail(d, "the top level is not a dict");
	v = pk_get(doc, top, "version");
	if (!pk_str_copy(v, d->torch_version, sizeof(d->torch_version)))
		return fail(d, "no \"version\" string (not a flight-recorder dump)");
	cfg = pk_get(doc, top, "pg_config");
	if (!cfg || cfg->type != PK_DICT)
		return fail(d, "no \"pg_config\" dict (not a flight-recorder dump)");
	v = pk_get(doc, top, "comm_lib_version");
	if (!v)
		v = pk_get(doc, top, "nccl_version");	/* 2.7 */
	pk_str_copy(v, d->nccl_version, sizeof(d->nccl_version));
	if ((err = parse_pg_config(d, doc, cfg, grank)))
		return err;
	err = parse_entries(d, doc, pk_get(doc, top, "entries"), grank, &m);
	if (!err)
		parse_pg_status(d, doc, pk_get(doc, top, "pg_status"), &m);
	free(m.map);
	return err;
}

int fr_dump__parse_torch(struct fr_dump *d, const char *buf, size_t len, int64_t global_rank)
{
	struct pk_doc doc;
	int err;

	fr_dump__reset(d);
	d->torch = true;
	snprintf(d->schema, sizeof(d->schema), "pytorch-fr");
	d->global_rank = global_rank;
	err = pk_doc__parse(&doc, buf, len);
	if (err == -EINVAL)
		snprintf(d->err, sizeof(d->err), "PyTorch dump: %.140s", doc.err);
	else if (err)
		snprintf(d->err, sizeof(d->err), "out of memory");
	else
		err = parse_doc(d, &doc, global_rank);
	pk_doc__free(&doc);
	return err;
}

/* ---- export ---- */
struct xcomm {
	char id[FR_ID_LEN];
	int64_t nranks;
	int64_t *global;	/* [nranks]: comm rank -> global rank, FR_UNK unknown */
	bool conflict;		/* two dumps disagree on a member or the size */
};

struct fr_torch_export {
	struct xcomm *comms;
	size_t nr, cap;
	bool sorted;
};

struct fr_torch_export *fr_torch_export__new(void)
{
	return calloc(1, sizeof(struct fr_torch_export));
}

void fr_torch_export__free(struct fr_torch_export *x)
{
	if (!x)
		return;
	for (size_t i = 0; i < x->nr; i++)
		free(x->comms[i].global);
	free(x->comms);
	free(x);
}

static struct xcomm *xcomm_find(struct fr_torch_export *x, const char *id)
{
	for (size_t i = 0; i < x->nr; i++)
		if (!strcmp(x->comms[i].id, id))
			return &x->comms[i];
	return NULL;
}

int fr_torch_export__add(struct fr_torch_export *x, const struct fr_dump *d)
{
	for (size_t i = 0; i < d->nr_comms; i++) {
		const struct fr_comm_info *ci = &d->comms[i];
		struct xcomm *c = xcomm_find(x, ci->id);

		if (!c) {
			if (ARRAY_RESERVE(x->comms, x->cap, x->nr + 1, 16))
				return -ENOMEM;
			c = &x->comms[x->nr++];
			memset(c, 0, sizeof(*c));
			snprintf(c->id, sizeof(c->id), "%s", ci->id);
			c->nranks = FR_UNK;
		}
		if (ci->nranks == FR_UNK)
			continue;
		if (c->nranks == FR_UNK) {
			c->global = malloc(ci->nranks * sizeof(*c->global));
			if (!c->global)
				return -ENOMEM;
			for (int64_t r = 0; r < ci->nranks; r++)
				c->global[r] = FR_UNK;
			c->nranks = ci->nranks;
		} else if (c->nranks != ci->nranks) {
			c->conflict = true;
			continue;
		}
		if (ci->rank != FR_UNK && d->global_rank != FR_UNK) {
			if (c->global[ci->rank] != FR_UNK && c->global[ci->rank] != d->global_rank)
				c->conflict = true;
			else
				c->global[ci->rank] = d->global_rank;
		}
	}
	x->sorted = false;
	return 0;
}

static int cmp_xcomm(const void *a, const void *b)
{
	return strcmp(((const struct xcomm *)a)->id, ((const struct xcomm *)b)->id);
}

/* pg_id: the comm's place among every comm of the job, so all ranks agree on it */
static int64_t pg_id_of(const struct fr_torch_export *x, const char *id)
{
	size_t lo = 0, hi = x->nr;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(x->comms[mid].id, id);

		if (!c)
			return (int64_t)mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return FR_UNK;
}

static void out_int_or_none(struct pk_out *o, int64_t v)
{
	if (v == FR_UNK)
		pk_out_none(o);
	else
		pk_out_int(o, v);
}

static const char *torch_dtype_name(int dt)
{
	for (size_t i = 0; i < NR_DTYPES; i++)
		if (dtypes[i].dtype == dt)
			return dtypes[i].torch;
	return NULL;
}

/* "[0, 1, 2]": the comm's global ranks in comm-rank order. A member whose dump is missing
 * is filled only where the comm is the world in rank order (every known member has comm
 * rank = global rank); otherwise the list holds the known members and a line says so. */
static void ranks_string(const struct xcomm *c, int64_t world, char **out)
{
	bool identity = c->nranks == world && !c->conflict, complete = true;
	size_t cap = 16 + (size_t)c->nranks * 9, n = 0;
	char *s = malloc(cap);

	*out = s;
	if (!s)
		return;
	for (int64_t r = 0; r < c->nranks; r++) {
		if (c->global[r] == FR_UNK)
			complete = false;
		else if (c->global[r] != r)
			identity = false;
	}
	n += snprintf(s + n, cap - n, "[");
	for (int64_t r = 0, k = 0; r < c->nranks; r++) {
		int64_t g = c->global[r] != FR_UNK ? c->global[r] : identity ? r : FR_UNK;

		if (g == FR_UNK)
			continue;
		n += snprintf(s + n, cap - n, "%s%" PRId64, k++ ? ", " : "", g);
	}
	snprintf(s + n, cap - n, "]");
	if (!complete && !identity)
		fprintf(stderr, "tptrace-fr: comm %s: the global ranks of some of its %" PRId64
			" members are unknown (no dump); pg_config lists the known ones only\n",
			c->id, c->nranks);
}

/* fr_trace asserts that every profiling name is one of its collectives or send/recv: a failed
 * comm init and an op tptrace could not name are left out (their seq ids stay on the rest) */
bool fr_torch_exportable(const struct fr_entry *e)
{
	return e->op != FR_OP_COMM_INIT && e->op != FR_OP_OTHER && e->op != FR_OP_UNKNOWN;
}

static void entry_out(struct pk_out *o, const struct fr_torch_export *x, const struct fr_dump *d,
		      const struct fr_entry *e)
{
	const struct fr_comm_info *ci = &d->comms[e->comm];
	const char *dt = torch_dtype_name(e->dtype);
	bool p2p = fr_op_is_p2p(e->op);
	char prof[96];

	if (p2p && ci->rank != FR_UNK && e->peer >= 0)
		snprintf(prof, sizeof(prof), "nccl:%s %" PRId64 "%s%d", fr_op_name(e->op), ci->rank,
			 e->op == FR_OP_SEND ? "->" : "<-", e->peer);
	else
		snprintf(prof, sizeof(prof), "nccl:%s", fr_op_name(e->op));
	pk_out_dict(o);
	pk_out_mark(o);
	pk_out_str(o, "record_id");
	out_int_or_none(o, e->record_id);
	pk_out_str(o, "pg_id");
	out_int_or_none(o, pg_id_of(x, ci->id));
	pk_out_str(o, "process_group");
	pk_out_str(o, ci->id);
	pk_out_str(o, ci->nranks != FR_UNK && ci->nranks == d->world_size ? "default_pg" :
		   "undefined");
	pk_out_tuple2(o);
	pk_out_str(o, "collective_seq_id");
	out_int_or_none(o, e->coll_seq);
	pk_out_str(o, "p2p_seq_id");
	out_int_or_none(o, e->p2p_seq);
	pk_out_str(o, "op_id");	/* PyTorch's per-pg op counter: tptrace has none */
	pk_out_none(o);
	pk_out_str(o, "profiling_name");
	pk_out_str(o, prof);
	pk_out_str(o, "time_created_ns");
	out_int_or_none(o, e->created_ns);
	for (int k = 0; k < 2; k++) {
		int64_t size = k ? e->out_size : e->in_size;

		pk_out_str(o, k ? "output_sizes" : "input_sizes");
		if (size == FR_UNK) {
			pk_out_none(o);
		} else {	/* the elements as one flat tensor: the product is what is compared */
			pk_out_list(o);
			pk_out_mark(o);
			pk_out_list(o);
			pk_out_mark(o);
			pk_out_int(o, size);
			pk_out_appends(o);
			pk_out_appends(o);
		}
		pk_out_str(o, k ? "output_dtypes" : "input_dtypes");
		if (!dt) {
			pk_out_none(o);
		} else {
			pk_out_list(o);
			pk_out_mark(o);
			pk_out_str(o, dt);
			pk_out_appends(o);
		}
	}
	pk_out_str(o, "state");
	switch (e->state) {
	case FR_ST_COMPLETED:
		pk_out_str(o, "completed");
		break;
	case FR_ST_STARTED:
	case FR_ST_FAILED:	/* PyTorch has no failed state: it never completed */
		pk_out_str(o, "started");
		break;
	case FR_ST_ENQUEUED:
		pk_out_str(o, "scheduled");
		break;
	default:
		pk_out_none(o);
	}
	pk_out_str(o, "time_discovered_started_ns");
	pk_out_none(o);	/* not kept by the reader */
	pk_out_str(o, "time_discovered_completed_ns");
	out_int_or_none(o, e->completed_ns);
	pk_out_str(o, "retired");
	pk_out_bool(o, e->state == FR_ST_COMPLETED);
	pk_out_str(o, "timeout_ms");
	pk_out_none(o);
	pk_out_str(o, "is_p2p");
	pk_out_bool(o, p2p);
	/* --py-stacks dumps: the entry's Python frames (innermost first, as PyTorch's), [] when
	 * it has none, as PyTorch writes an entry recorded without stack traces */
	pk_out_str(o, "frames");
	pk_out_list(o);
	if (e->pystack && e->pystack <= d->nr_pystacks) {
		const struct fr_pystack *ps = &d->pystacks[e->pystack - 1];

		pk_out_mark(o);
		for (int i = 0; i < ps->nr; i++) {
			const struct fr_pyframe *f = &d->pyframes[ps->first + i];

			pk_out_dict(o);
			pk_out_mark(o);
			pk_out_str(o, "name");
			pk_out_str(o, f->name);
			pk_out_str(o, "filename");
			pk_out_str(o, f->file);
			pk_out_str(o, "line");
			pk_out_int(o, f->line);
			pk_out_setitems(o);
		}
		pk_out_appends(o);
	}
	pk_out_str(o, "thread_id");
	pk_out_none(o);
	pk_out_str(o, "thread_name");
	pk_out_none(o);
	pk_out_setitems(o);
}

static void dump_out(struct pk_out *o, const struct fr_torch_export *x, const struct fr_dump *d)
{
	pk_out_begin(o);
	pk_out_dict(o);
	pk_out_mark(o);
	pk_out_str(o, "version");
	pk_out_str(o, FR_TORCH_VERSION);
	pk_out_str(o, "comm_lib_version");
	if (d->nccl_version[0])
		pk_out_str(o, d->nccl_version);
	else
		pk_out_none(o);
	pk_out_str(o, "pg_config");
	pk_out_dict(o);
	pk_out_mark(o);
	for (size_t i = 0; i < d->nr_comms; i++) {
		const struct fr_comm_info *ci = &d->comms[i];
		const struct xcomm *c = xcomm_find((struct fr_torch_export *)x, ci->id);
		char *ranks = NULL;

		if (!c || c->nranks == FR_UNK)
			continue;	/* size unknown: PyTorch's ranks cannot be written */
		ranks_string(c, d->world_size, &ranks);
		if (!ranks) {
			o->b.failed = true;
			return;
		}
		pk_out_str(o, ci->id);
		pk_out_dict(o);
		pk_out_mark(o);
		pk_out_str(o, "name");
		pk_out_str(o, ci->id);
		pk_out_str(o, "desc");
		pk_out_str(o, ci->nranks == d->world_size ? "default_pg" : "undefined");
		pk_out_str(o, "ranks");
		pk_out_str(o, ranks);
		pk_out_setitems(o);
		free(ranks);
	}
	pk_out_setitems(o);
	pk_out_str(o, "pg_status");
	pk_out_dict(o);
	pk_out_mark(o);
	for (size_t i = 0; i < d->nr_comms; i++) {
		const struct fr_comm_info *ci = &d->comms[i];
		int64_t vals[3] = { ci->last_enqueued, ci->last_started, ci->last_completed };
		static const char *const names[3] = { "last_enqueued_collective",
			"last_started_collective", "last_completed_collective" };
		char key[24];

		snprintf(key, sizeof(key), "%" PRId64, pg_id_of(x, ci->id));
		pk_out_str(o, key);
		pk_out_dict(o);
		pk_out_mark(o);
		for (int k = 0; k < 3; k++) {
			pk_out_str(o, names[k]);
			/* tptrace's 0 and PyTorch's -1 both mean "none yet" */
			out_int_or_none(o, vals[k] == 0 ? -1 : vals[k]);
		}
		pk_out_setitems(o);
	}
	pk_out_setitems(o);
	pk_out_str(o, "entries");
	pk_out_list(o);
	pk_out_mark(o);
	for (size_t i = 0; i < d->nr_entries; i++)
		if (fr_torch_exportable(&d->entries[i]))
			entry_out(o, x, d, &d->entries[i]);
	pk_out_appends(o);
	pk_out_setitems(o);
	pk_out_end(o);
}

int fr_torch_export__write(struct fr_torch_export *x, const struct fr_dump *d,
			   const char *outdir, char *path, size_t path_cap)
{
	struct pk_out o = { 0 };
	int err;

	if (!x->sorted) {
		qsort(x->comms, x->nr, sizeof(*x->comms), cmp_xcomm);
		x->sorted = true;
	}
	if (d->global_rank == FR_UNK)
		return -EINVAL;
	snprintf(path, path_cap, "%s/" FR_TORCH_PREFIX "%" PRId64, outdir, d->global_rank);
	dump_out(&o, x, d);
	if (o.b.failed) {
		pk_out_free(&o);
		return -ENOMEM;
	}
	/* a fresh temp file, never one found there (a link planted in a shared OUT), renamed
	 * over the name; 0600 like tptrace's own dumps */
	err = atomic_file__write_path(path, o.b.p, o.b.len, 0600, false);
	pk_out_free(&o);
	return err;
}
