// SPDX-License-Identifier: MIT
/* fr_tables: int vectors and the hash indexes over comms, (comm, seq) aggregates and p2p
 * channels (on user/base/hashmap.h's u64map). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "fr_analyze_int.h"
#include "growbuf.h"

int ivec_push(struct ivec *iv, int x)
{
	if (ARRAY_RESERVE(iv->v, iv->cap, iv->n + 1, 16))
		return -ENOMEM;
	iv->v[iv->n++] = x;
	return 0;
}

/* a - b for timestamps from untrusted dumps: saturates instead of overflowing */
int64_t ns_diff(int64_t a, int64_t b)
{
	int64_t r;

	if (__builtin_sub_overflow(a, b, &r))
		return a > b ? INT64_MAX : INT64_MIN + 1;
	return r;
}

uint64_t str_hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL;

	while (*s)
		h = (h ^ (unsigned char)*s++) * 1099511628211ULL;
	return u64_mix(h);
}

/* u64map keys must be nonzero */
static uint64_t index_key(uint64_t h)
{
	return h ? h : 1;
}

static int index_first(const struct fr_index *x, uint64_t h)
{
	uint64_t v;

	return u64map__get(&x->heads, index_key(h), &v) ? (int)v - 1 : -1;
}

static int index_next(const struct fr_index *x, int i)
{
	return x->next[i] - 1;
}

/* element i (the newest, i >= every index added before) gets hash h */
static int index_add(struct fr_index *x, uint64_t h, int i)
{
	int prev = index_first(x, h);

	if (ARRAY_RESERVE(x->next, x->cap, i + 1, 16))
		return -ENOMEM;
	if (u64map__set(&x->heads, index_key(h), (uint64_t)i + 1))
		return -ENOMEM;
	x->next[i] = prev + 1;
	return 0;
}

void fr_index__free(struct fr_index *x)
{
	u64map__clear(&x->heads);
	free(x->next);
	x->next = NULL;
	x->cap = 0;
}

static uint64_t agg_hash_of(int comm, int64_t seq)
{
	return u64_mix((uint64_t)seq ^ ((uint64_t)comm * 0x9e3779b97f4a7c15ULL));
}

static uint64_t chan_hash_of(int comm, int src, int dst)
{
	return u64_mix(((uint64_t)(uint32_t)src << 32 | (uint32_t)dst) ^
		       ((uint64_t)comm * 0x9e3779b97f4a7c15ULL));
}

int comm_find(const struct fr_analysis *a, const char *id)
{
	for (int i = index_first(&a->comm_index, str_hash(id)); i >= 0;
	     i = index_next(&a->comm_index, i))
		if (!strcmp(a->comms[i].id, id))
			return i;
	return -1;
}

int comm_get(struct fr_analysis *a, const char *id)
{
	int i = comm_find(a, id);

	if (i >= 0)
		return i;
	if (ARRAY_RESERVE(a->comms, a->cap_comms, a->nr_comms + 1, 16))
		return -ENOMEM;
	i = a->nr_comms;
	memset(&a->comms[i], 0, sizeof(a->comms[i]));
	snprintf(a->comms[i].id, sizeof(a->comms[i].id), "%s", id);
	a->comms[i].nranks = FR_UNK;
	if (index_add(&a->comm_index, str_hash(id), i))
		return -ENOMEM;
	a->nr_comms++;
	return i;
}

int agg_find(const struct fr_analysis *a, int comm, int64_t seq)
{
	for (int i = index_first(&a->agg_index, agg_hash_of(comm, seq)); i >= 0;
	     i = index_next(&a->agg_index, i))
		if (a->aggs[i].comm == comm && a->aggs[i].seq == seq)
			return i;
	return -1;
}

/* -1: table full (counted, the entry is skipped), -ENOMEM */
int agg_get(struct fr_analysis *a, int comm, int64_t seq)
{
	int i = agg_find(a, comm, seq);

	if (i >= 0)
		return i;
	if (a->nr_aggs >= MAX_AGGS) {
		a->aggs_full = true;
		return -1;
	}
	if (ARRAY_RESERVE(a->aggs, a->cap_aggs, a->nr_aggs + 1, 16))
		return -ENOMEM;
	i = a->nr_aggs;
	memset(&a->aggs[i], 0, sizeof(a->aggs[i]));
	a->aggs[i].comm = comm;
	a->aggs[i].seq = seq;
	a->aggs[i].extra = -1;
	a->aggs[i].min_m = a->aggs[i].max_m = -1;
	a->aggs[i].first0[0] = a->aggs[i].first0[1] = -1;
	if (index_add(&a->agg_index, agg_hash_of(comm, seq), i))
		return -ENOMEM;
	a->nr_aggs++;
	return i;
}

/* -1: table full (counted), -ENOMEM */
int chan_get(struct fr_analysis *a, int comm, int src, int dst)
{
	uint64_t h = chan_hash_of(comm, src, dst);
	int i;

	for (i = index_first(&a->chan_index, h); i >= 0; i = index_next(&a->chan_index, i))
		if (a->chans[i].comm == comm && a->chans[i].src == src && a->chans[i].dst == dst)
			return i;
	if (a->nr_chans >= MAX_P2P_CHANS) {
		a->chans_full = true;
		return -1;
	}
	if (ARRAY_RESERVE(a->chans, a->cap_chans, a->nr_chans + 1, 16))
		return -ENOMEM;
	i = a->nr_chans;
	memset(&a->chans[i], 0, sizeof(a->chans[i]));
	a->chans[i].comm = comm;
	a->chans[i].src = src;
	a->chans[i].dst = dst;
	a->chans[i].send.member = a->chans[i].recv.member = -1;
	if (index_add(&a->chan_index, h, i))
		return -ENOMEM;
	a->nr_chans++;
	return i;
}
