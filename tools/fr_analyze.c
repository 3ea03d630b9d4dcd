// SPDX-License-Identifier: MIT
/* fr_analyze: fold flight-recorder dumps into aggregates and derive verdicts.
 *
 * State kept, all bounded by ranks × comms or by distinct (comm, seq) pairs:
 *   proc     one per dump: identity, process state, drops, in-flight calls, newest entry
 *   comm     one per comm_id: nranks, which proc holds each comm rank
 *   member   one per (comm, proc): header seqs and what its entries say (newest/oldest seq)
 *   seq_agg  one per (comm, collective_seq_id): how many entered/completed, arrival extremes,
 *            the first signature with its count and, only when a second signature or an
 *            unfinished entry shows up, a side record with the other signatures and short
 *            member lists
 *   p2p_chan one per (comm, sender, receiver): the last few sends and recvs of each side
 * Ranks are aligned by sequence numbers, never by record_id: rings wrap at different points.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "fr_analyze.h"

#define SIG_GROUPS	4	/* distinct signatures tracked per (comm, seq); more are counted */
#define SIG_LIST	32	/* members listed per signature / unfinished list */
#define P2P_KEEP	4	/* newest ops kept per p2p channel side */
#define MAX_P2P_CHANS	(1 << 20)
#define MAX_AGGS	(1 << 26)
#define PROC_IN_CALLS	4
#define MAX_P2P_VERDICTS_PER_COMM 16

enum rule {	/* in causal order: the report lists verdicts in this order */
	RULE_DEAD_RANK, RULE_MISSING_DUMP, RULE_MISSING_RANK, RULE_ASYNC_ERROR,
	RULE_TYPE, RULE_SIZE, RULE_DTYPE, RULE_REDOP, RULE_ROOT, RULE_P2P,
	RULE_STUCK, RULE_LATE, RULE_STATE, RULE_CORRUPT, RULE__COUNT
};
static const char *const rule_names[RULE__COUNT] = {
	"dead_rank", "missing_dump", "missing_rank", "nccl_async_error",
	"type_mismatch", "size_mismatch", "dtype_mismatch", "op_mismatch", "root_mismatch",
	"p2p_mismatch", "stuck_in_call", "late_arrival", "state_divergence", "corrupt_dump",
};

struct ivec {
	int *v;
	int n, cap;
};

struct proc {
	char host[FR_NAME_LEN];
	char *path;
	int64_t pid, global_rank, world_size, dump_time_ns, exit_code, signal;
	int64_t entries_overwritten, events_dropped;
	int state;
	bool wrapped;
	int nr_in_calls;
	struct fr_in_call in_calls[PROC_IN_CALLS];
	/* newest entry on any comm */
	bool has_last;
	int64_t last_record, last_seq, last_created;
	int last_comm;
	uint8_t last_op, last_state;
	/* filled by finish */
	bool dead;
	struct ivec missed;	/* missing_rank findings folded into dead_rank: agg-less triples */
};

struct comm {
	char id[FR_ID_LEN];
	int64_t nranks;		/* largest seen; FR_UNK */
	int64_t (*placed)[2];	/* finish: (comm rank, member) sorted, one per rank */
	int nr_placed;
	struct ivec members;	/* every member, placed or not */
	int dup_ranks;		/* two dumps claiming one comm rank */
	bool aborted;
	bool inferred;		/* members matched across dumps by their collective sequences */
	int nr_expected;	/* inferred: world size, or the nranks a member learned */
	struct ivec aggs;	/* filled by finish: its seq aggregates in seq order */
};

struct member {
	int comm, proc;
	int64_t rank;
	bool placed;
	int64_t hdr_enqueued, hdr_completed, async_error;
	int64_t newest_seq, oldest_seq, newest_completed;
	uint8_t newest_op, newest_state;
	int64_t eff_last;	/* finish: last collective seq it entered, FR_UNK if unknowable */
	bool partial;		/* history starts at attach, not at comm init */
	/* inferred comms: it skipped hole_len collectives at hole_seq and went on (its later
	 * seqs were rebased past the hole); the first one it went on to */
	int64_t hole_seq, hole_len, hole_next_seq;
	uint8_t hole_next_op, hole_next_state;
	/* split children with an unknown rank: p2p entries wait for finish to know it */
	struct fr_entry *dents;
	int nr_dents, cap_dents;
	int split;		/* index in a->splits, -1 */
};

/* a split child whose rank and size come from all its members */
struct split_pend {
	int member;
	int64_t key;
	char parent[FR_ID_LEN];
};

/* A comm created before attach: its id is local to the dump and its seqs count from attach.
 * Kept whole until finish matches it with the same comm in other dumps. */
struct pend {
	int proc;
	struct fr_comm_info ci;
	struct fr_entry *e;
	int n, cap;
	int *coll, nc;		/* indexes of its collectives in e */
	int cluster;
	int64_t d, dp;		/* collective / p2p seq offset to the cluster's origin */
	int64_t clock;		/* its clock minus the reference's (median over matches) */
	int64_t hole_seq, hole_len;
};

struct cluster {
	int ref;		/* pend all others were aligned to */
	struct ivec pends;
	int comm;
};

struct sig {
	int64_t count, in_size, out_size;
	int32_t root;
	uint8_t op, dtype, redop;
};

struct sig_group {
	struct sig sig;
	int32_t n, nr_listed;
	int32_t members[SIG_LIST];
};

struct agg_extra {
	struct sig_group groups[SIG_GROUPS - 1];	/* signatures 1..3 */
	int32_t nr_groups;		/* used in groups[] */
	int32_t other_n;		/* members with yet more signatures */
	int32_t nr_list0;		/* signature-0 members seen after this was allocated */
	int32_t list0[SIG_LIST];
	int32_t nr_incomplete;
	int32_t incomplete[SIG_LIST];
};

struct seq_agg {
	int64_t seq;
	int64_t min_created, max_created;
	int32_t comm;
	int32_t entered, completed;
	int32_t min_m, max_m;
	int32_t n0;
	int32_t first0[2];
	int32_t extra;		/* index into a->extras or -1 */
	struct sig sig0;
};

struct p2p_op {
	int64_t k, seq, count;
	uint8_t dtype, state;
};

struct p2p_side {
	int32_t member;
	int64_t total, done;
	int nr_kept;		/* ring of the newest P2P_KEEP */
	struct p2p_op kept[P2P_KEEP];
};

struct p2p_chan {
	int32_t comm;
	int32_t src, dst;	/* comm ranks */
	struct p2p_side send, recv;
};

struct verdict {
	int rule;
	int comm;
	int64_t seq;
	char op[48];
	/* culprits as (global rank, comm rank, proc) triples */
	int nr_who, cap_who;
	int64_t (*who)[3];
	bool low;
	char *low_reason;
	bool medium;		/* inferred identity: below high, above low */
	char *medium_reason;
	char *headline;
	char *detail;
	int64_t also_seqs, also_last;	/* coalesced later occurrences */
	int order;
};

struct corrupt {
	char *path;
	char *why;
	int64_t global_rank, pid;
	char host[FR_NAME_LEN];
};

struct fr_analysis {
	struct fr_opts opts;
	struct proc *procs;
	int nr_procs, cap_procs;
	struct comm *comms;
	int nr_comms, cap_comms;
	int *comm_hash;
	size_t comm_hash_cap;
	struct member *members;
	int nr_members, cap_members;
	struct seq_agg *aggs;
	int nr_aggs, cap_aggs;
	int *agg_hash;
	size_t agg_hash_cap;
	struct agg_extra *extras;
	int nr_extras, cap_extras;
	struct p2p_chan *chans;
	int nr_chans, cap_chans;
	int *chan_hash;
	size_t chan_hash_cap;
	bool chans_full, aggs_full;
	int *local_member;	/* scratch: member per local comm of the dump being folded */
	size_t local_cap;
	int64_t out_of_order;
	struct corrupt *corrupt;
	int nr_corrupt, cap_corrupt;
	struct pend *pends;
	int nr_pends, cap_pends;
	struct cluster *clusters;
	int nr_clusters, cap_clusters;
	struct split_pend *splits;
	int nr_splits, cap_splits;

	struct verdict *verdicts;
	int nr_verdicts, cap_verdicts;
	int *comm_order;	/* comms sorted by id */
	int64_t world_size;
	bool finished;
};

/* ---------------------------------------------------------------- small helpers */

static int grow(void **arr, int *cap, int need, size_t elem)
{
	void *p;
	int ncap;

	if (need <= *cap)
		return 0;
	ncap = *cap ? *cap : 16;
	while (ncap < need) {
		if (ncap > INT32_MAX / 2)
			return -ENOMEM;
		ncap *= 2;
	}
	p = realloc(*arr, (size_t)ncap * elem);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = ncap;
	return 0;
}

static int ivec_push(struct ivec *iv, int x)
{
	if (grow((void **)&iv->v, &iv->cap, iv->n + 1, sizeof(int)))
		return -ENOMEM;
	iv->v[iv->n++] = x;
	return 0;
}

/* a - b for timestamps from untrusted dumps: saturates instead of overflowing */
static int64_t ns_diff(int64_t a, int64_t b)
{
	int64_t r;

	if (__builtin_sub_overflow(a, b, &r))
		return a > b ? INT64_MAX : INT64_MIN + 1;
	return r;
}

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb3fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static uint64_t str_hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL;

	while (*s)
		h = (h ^ (unsigned char)*s++) * 1099511628211ULL;
	return mix64(h);
}

/* Open-addressing index tables: slots hold element index + 1 (0 = empty). */
static int rehash(int **tab, size_t *cap, int n, uint64_t (*key)(struct fr_analysis *, int),
		  struct fr_analysis *a)
{
	size_t ncap = *cap ? *cap * 2 : 1024;
	int *t = calloc(ncap, sizeof(int));

	if (!t)
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		size_t s = key(a, i) & (ncap - 1);

		while (t[s])
			s = (s + 1) & (ncap - 1);
		t[s] = i + 1;
	}
	free(*tab);
	*tab = t;
	*cap = ncap;
	return 0;
}

static uint64_t comm_key(struct fr_analysis *a, int i) { return str_hash(a->comms[i].id); }

static uint64_t agg_hash_of(int comm, int64_t seq)
{
	return mix64(((uint64_t)comm << 40) ^ (uint64_t)seq ^ ((uint64_t)comm * 0x9e3779b97f4a7c15ULL));
}

static uint64_t agg_key(struct fr_analysis *a, int i)
{
	return agg_hash_of(a->aggs[i].comm, a->aggs[i].seq);
}

static uint64_t chan_hash_of(int comm, int src, int dst)
{
	return mix64(((uint64_t)comm << 42) ^ ((uint64_t)src << 21) ^ (uint64_t)dst ^
		     0x5bd1e995ULL * (uint64_t)(comm + 1));
}

static uint64_t chan_key(struct fr_analysis *a, int i)
{
	return chan_hash_of(a->chans[i].comm, a->chans[i].src, a->chans[i].dst);
}

static int comm_get(struct fr_analysis *a, const char *id)
{
	size_t s;
	int i;

	if ((size_t)(a->nr_comms + 1) * 2 > a->comm_hash_cap &&
	    rehash(&a->comm_hash, &a->comm_hash_cap, a->nr_comms, comm_key, a))
		return -ENOMEM;
	s = str_hash(id) & (a->comm_hash_cap - 1);
	while (a->comm_hash[s]) {
		i = a->comm_hash[s] - 1;
		if (!strcmp(a->comms[i].id, id))
			return i;
		s = (s + 1) & (a->comm_hash_cap - 1);
	}
	if (grow((void **)&a->comms, &a->cap_comms, a->nr_comms + 1, sizeof(*a->comms)))
		return -ENOMEM;
	i = a->nr_comms++;
	memset(&a->comms[i], 0, sizeof(a->comms[i]));
	snprintf(a->comms[i].id, sizeof(a->comms[i].id), "%s", id);
	a->comms[i].nranks = FR_UNK;
	a->comm_hash[s] = i + 1;
	return i;
}

static int agg_find(const struct fr_analysis *a, int comm, int64_t seq)
{
	size_t s;

	if (!a->agg_hash_cap)
		return -1;
	s = agg_hash_of(comm, seq) & (a->agg_hash_cap - 1);
	while (a->agg_hash[s]) {
		int i = a->agg_hash[s] - 1;

		if (a->aggs[i].comm == comm && a->aggs[i].seq == seq)
			return i;
		s = (s + 1) & (a->agg_hash_cap - 1);
	}
	return -1;
}

/* -1: table full (counted, the entry is skipped), -ENOMEM */
static int agg_get(struct fr_analysis *a, int comm, int64_t seq)
{
	size_t s;
	int i;

	if ((size_t)(a->nr_aggs + 1) * 2 > a->agg_hash_cap &&
	    rehash(&a->agg_hash, &a->agg_hash_cap, a->nr_aggs, agg_key, a))
		return -ENOMEM;
	s = agg_hash_of(comm, seq) & (a->agg_hash_cap - 1);
	while (a->agg_hash[s]) {
		i = a->agg_hash[s] - 1;
		if (a->aggs[i].comm == comm && a->aggs[i].seq == seq)
			return i;
		s = (s + 1) & (a->agg_hash_cap - 1);
	}
	if (a->nr_aggs >= MAX_AGGS) {
		a->aggs_full = true;
		return -1;
	}
	if (grow((void **)&a->aggs, &a->cap_aggs, a->nr_aggs + 1, sizeof(*a->aggs)))
		return -ENOMEM;
	i = a->nr_aggs++;
	memset(&a->aggs[i], 0, sizeof(a->aggs[i]));
	a->aggs[i].comm = comm;
	a->aggs[i].seq = seq;
	a->aggs[i].extra = -1;
	a->aggs[i].min_m = a->aggs[i].max_m = -1;
	a->aggs[i].first0[0] = a->aggs[i].first0[1] = -1;
	a->agg_hash[s] = i + 1;
	return i;
}

static int chan_get(struct fr_analysis *a, int comm, int src, int dst)
{
	size_t s;
	int i;

	if ((size_t)(a->nr_chans + 1) * 2 > a->chan_hash_cap &&
	    rehash(&a->chan_hash, &a->chan_hash_cap, a->nr_chans, chan_key, a))
		return -ENOMEM;
	s = chan_hash_of(comm, src, dst) & (a->chan_hash_cap - 1);
	while (a->chan_hash[s]) {
		i = a->chan_hash[s] - 1;
		if (a->chans[i].comm == comm && a->chans[i].src == src && a->chans[i].dst == dst)
			return i;
		s = (s + 1) & (a->chan_hash_cap - 1);
	}
	if (a->nr_chans >= MAX_P2P_CHANS) {
		a->chans_full = true;
		return -1;
	}
	if (grow((void **)&a->chans, &a->cap_chans, a->nr_chans + 1, sizeof(*a->chans)))
		return -ENOMEM;
	i = a->nr_chans++;
	memset(&a->chans[i], 0, sizeof(a->chans[i]));
	a->chans[i].comm = comm;
	a->chans[i].src = src;
	a->chans[i].dst = dst;
	a->chans[i].send.member = a->chans[i].recv.member = -1;
	a->chan_hash[s] = i + 1;
	return i;
}

/* ---------------------------------------------------------------- folding */

struct fr_analysis *fr_analysis__new(const struct fr_opts *opts)
{
	struct fr_analysis *a = calloc(1, sizeof(*a));

	if (!a)
		return NULL;
	a->opts = *opts;
	a->world_size = FR_UNK;
	return a;
}

static int member_new(struct fr_analysis *a, int comm, int proc, const struct fr_comm_info *ci)
{
	struct comm *c = &a->comms[comm];
	struct member *m;
	int i;

	if (grow((void **)&a->members, &a->cap_members, a->nr_members + 1, sizeof(*a->members)))
		return -ENOMEM;
	i = a->nr_members++;
	m = &a->members[i];
	memset(m, 0, sizeof(*m));
	m->comm = comm;
	m->proc = proc;
	m->rank = ci->rank;
	m->hdr_enqueued = ci->last_enqueued;
	m->hdr_completed = ci->last_completed;
	m->async_error = ci->async_error;
	m->newest_seq = m->oldest_seq = m->newest_completed = FR_UNK;
	m->eff_last = FR_UNK;
	m->hole_seq = m->hole_next_seq = FR_UNK;
	m->partial = ci->seq_attach;
	m->split = -1;
	if (!strcmp(ci->state, "aborted") || !strcmp(ci->state, "revoked"))
		c->aborted = true;
	if (ci->nranks != FR_UNK && (c->nranks == FR_UNK || ci->nranks > c->nranks))
		c->nranks = ci->nranks;
	if (ivec_push(&c->members, i))
		return -ENOMEM;
	/* placed in finish: the first dump (in file order) holding a comm rank owns it */
	m->placed = m->rank != FR_UNK;
	return i;
}

static struct agg_extra *agg_extra(struct fr_analysis *a, struct seq_agg *g)
{
	if (g->extra < 0) {
		if (grow((void **)&a->extras, &a->cap_extras, a->nr_extras + 1, sizeof(*a->extras)))
			return NULL;
		g->extra = a->nr_extras++;
		memset(&a->extras[g->extra], 0, sizeof(*a->extras));
	}
	return &a->extras[g->extra];
}

/* Sizes only agree when they are known on both sides: a rank whose recorder did not know the
 * communicator's size writes -1 for sizes that depend on it, and the NCCL count argument is
 * what must match anyway. */
static bool size_eq(int64_t x, int64_t y)
{
	return x < 0 || y < 0 || x == y;
}

static bool sig_eq(const struct sig *x, const struct sig *y)
{
	return x->op == y->op && x->count == y->count && x->dtype == y->dtype &&
	       x->redop == y->redop && x->root == y->root && size_eq(x->in_size, y->in_size) &&
	       size_eq(x->out_size, y->out_size);
}

static int fold_collective(struct fr_analysis *a, int mi, const struct fr_entry *e)
{
	struct member *m = &a->members[mi];
	struct seq_agg *g;
	struct agg_extra *x;
	struct sig s = {
		.count = e->count, .in_size = e->in_size, .out_size = e->out_size,
		.root = fr_op_has_root(e->op) ? e->root : -1,
		.op = e->op, .dtype = e->dtype,
		.redop = fr_op_has_redop(e->op) ? e->redop : FR_RED_NONE,
	};
	int gi;

	/* entries are in record order, so a comm's seqs rise; anything else is a duplicate or
	 * a writer bug and would be counted twice */
	if (m->newest_seq != FR_UNK && e->coll_seq <= m->newest_seq) {
		a->out_of_order++;
		return 0;
	}
	gi = agg_get(a, m->comm, e->coll_seq);
	if (gi == -ENOMEM)
		return gi;
	if (m->oldest_seq == FR_UNK)
		m->oldest_seq = e->coll_seq;
	m->newest_seq = e->coll_seq;
	m->newest_op = e->op;
	m->newest_state = e->state;
	if (e->state == FR_ST_COMPLETED)
		m->newest_completed = e->coll_seq;
	if (gi < 0)
		return 0;
	g = &a->aggs[gi];
	if (g->entered == 0) {
		g->sig0 = s;
		g->min_created = g->max_created = e->created_ns;
		g->min_m = g->max_m = mi;
	} else if (e->created_ns != FR_UNK) {
		if (g->min_created == FR_UNK || e->created_ns < g->min_created) {
			g->min_created = e->created_ns;
			g->min_m = mi;
		}
		if (g->max_created == FR_UNK || e->created_ns > g->max_created) {
			g->max_created = e->created_ns;
			g->max_m = mi;
		}
	}
	g->entered++;
	if (e->state == FR_ST_COMPLETED) {
		g->completed++;
	} else {
		if (!(x = agg_extra(a, g)))
			return -ENOMEM;
		if (x->nr_incomplete < SIG_LIST)
			x->incomplete[x->nr_incomplete] = mi;
		x->nr_incomplete++;
	}
	if (g->entered == 1 || sig_eq(&s, &g->sig0)) {
		if (g->n0 < 2)
			g->first0[g->n0] = mi;
		else if (g->extra >= 0 && a->extras[g->extra].nr_list0 < SIG_LIST)
			a->extras[g->extra].list0[a->extras[g->extra].nr_list0++] = mi;
		g->n0++;
		return 0;
	}
	if (!(x = agg_extra(a, g)))
		return -ENOMEM;
	for (int i = 0; i < x->nr_groups; i++) {
		struct sig_group *sg = &x->groups[i];

		if (sig_eq(&s, &sg->sig)) {
			if (sg->nr_listed < SIG_LIST)
				sg->members[sg->nr_listed++] = mi;
			sg->n++;
			return 0;
		}
	}
	if (x->nr_groups < SIG_GROUPS - 1) {
		struct sig_group *sg = &x->groups[x->nr_groups++];

		sg->sig = s;
		sg->n = 1;
		sg->nr_listed = 1;
		sg->members[0] = mi;
	} else {
		x->other_n++;
	}
	return 0;
}

static int fold_p2p(struct fr_analysis *a, int mi, const struct fr_entry *e)
{
	struct member *m = &a->members[mi];
	struct p2p_side *side;
	struct p2p_op *op;
	int ci;

	if (m->rank == FR_UNK || e->peer < 0)
		return 0;
	if (e->op == FR_OP_SEND)
		ci = chan_get(a, m->comm, (int)m->rank, e->peer);
	else
		ci = chan_get(a, m->comm, e->peer, (int)m->rank);
	if (ci < 0)
		return ci == -ENOMEM ? ci : 0;
	side = e->op == FR_OP_SEND ? &a->chans[ci].send : &a->chans[ci].recv;
	if (side->member >= 0 && side->member != mi)
		return 0;	/* a duplicate rank: the first dump owns the channel side */
	side->member = mi;
	op = &side->kept[side->total % P2P_KEEP];
	op->k = side->total;
	op->seq = e->p2p_seq;
	op->count = e->count;
	op->dtype = e->dtype;
	op->state = e->state;
	if (side->nr_kept < P2P_KEEP)
		side->nr_kept++;
	side->total++;
	if (e->state == FR_ST_COMPLETED)
		side->done++;
	return 0;
}

static bool member_is_split_pending(const struct fr_analysis *a, int mi)
{
	return a->members[mi].split >= 0;
}

int fr_analysis__add_dump(struct fr_analysis *a, const struct fr_dump *d, const char *path)
{
	struct proc *p;
	int pi, err;

	if (grow((void **)&a->procs, &a->cap_procs, a->nr_procs + 1, sizeof(*a->procs)))
		return -ENOMEM;
	pi = a->nr_procs++;
	p = &a->procs[pi];
	memset(p, 0, sizeof(*p));
	snprintf(p->host, sizeof(p->host), "%s", d->host[0] ? d->host : "?");
	p->path = strdup(path ? path : "");
	p->pid = d->pid;
	p->global_rank = d->global_rank;
	p->world_size = d->world_size;
	p->dump_time_ns = d->dump_time_ns;
	p->exit_code = d->exit_code;
	p->signal = d->signal;
	p->entries_overwritten = d->entries_overwritten;
	p->events_dropped = d->events_dropped;
	p->state = d->proc_state;
	p->wrapped = (d->entries_overwritten != FR_UNK && d->entries_overwritten > 0) ||
		     (d->entries_recorded != FR_UNK && d->entries_recorded > (int64_t)d->nr_entries);
	p->last_comm = -1;
	p->nr_in_calls = d->nr_in_calls < PROC_IN_CALLS ? (int)d->nr_in_calls : PROC_IN_CALLS;
	if (p->nr_in_calls)
		memcpy(p->in_calls, d->in_calls, p->nr_in_calls * sizeof(*p->in_calls));
	if (!p->path)
		return -ENOMEM;
	if (d->world_size != FR_UNK && (a->world_size == FR_UNK || d->world_size > a->world_size))
		a->world_size = d->world_size;

	if (d->nr_comms > a->local_cap) {
		int *lm = realloc(a->local_member, d->nr_comms * sizeof(int));

		if (!lm)
			return -ENOMEM;
		a->local_member = lm;
		a->local_cap = d->nr_comms;
	}
	for (size_t i = 0; i < d->nr_comms; i++) {
		const struct fr_comm_info *ci = &d->comms[i];
		int c;

		if (ci->local_id) {
			/* matched with its peers in finish: local member -(pend + 2) */
			struct pend *pd;

			if (grow((void **)&a->pends, &a->cap_pends, a->nr_pends + 1,
				 sizeof(*a->pends)))
				return -ENOMEM;
			pd = &a->pends[a->nr_pends];
			memset(pd, 0, sizeof(*pd));
			pd->proc = pi;
			pd->ci = *ci;
			pd->cluster = -1;
			a->local_member[i] = -(a->nr_pends++ + 2);
			continue;
		}
		c = comm_get(a, ci->id);
		if (c < 0)
			return c;
		a->local_member[i] = member_new(a, c, pi, ci);
		if (a->local_member[i] < 0)
			return a->local_member[i];
		if (ci->split_color != FR_UNK && a->members[a->local_member[i]].rank == FR_UNK) {
			struct split_pend *sp;

			if (grow((void **)&a->splits, &a->cap_splits, a->nr_splits + 1,
				 sizeof(*a->splits)))
				return -ENOMEM;
			a->members[a->local_member[i]].split = a->nr_splits;
			sp = &a->splits[a->nr_splits++];
			sp->member = a->local_member[i];
			sp->key = ci->split_key;
			snprintf(sp->parent, sizeof(sp->parent), "%s", ci->parent);
		}
	}
	p = &a->procs[pi];
	for (size_t i = 0; i < d->nr_entries; i++) {
		const struct fr_entry *e = &d->entries[i];
		int mi;

		if (e->comm >= d->nr_comms)
			continue;
		mi = a->local_member[e->comm];
		if (!p->has_last || (e->record_id != FR_UNK && e->record_id >= p->last_record) ||
		    e->record_id == FR_UNK) {
			p->has_last = true;
			p->last_record = e->record_id == FR_UNK ? INT64_MIN + 1 : e->record_id;
			p->last_comm = mi >= 0 ? a->members[mi].comm : mi;
			p->last_op = e->op;
			p->last_state = e->state;
			p->last_seq = fr_op_is_p2p(e->op) ? e->p2p_seq : e->coll_seq;
			p->last_created = e->created_ns;
		}
		if (mi < 0) {
			struct pend *pd = &a->pends[-mi - 2];

			if (grow((void **)&pd->e, &pd->cap, pd->n + 1, sizeof(*pd->e)))
				return -ENOMEM;
			pd->e[pd->n++] = *e;
			continue;
		}
		if (fr_op_is_p2p(e->op) && a->members[mi].rank == FR_UNK &&
		    member_is_split_pending(a, mi)) {
			struct member *m = &a->members[mi];

			if (grow((void **)&m->dents, &m->cap_dents, m->nr_dents + 1,
				 sizeof(*m->dents)))
				return -ENOMEM;
			m->dents[m->nr_dents++] = *e;
			continue;
		}
		if (fr_op_is_p2p(e->op))
			err = fold_p2p(a, mi, e);
		else if (e->coll_seq != FR_UNK && e->coll_seq >= 0)
			err = fold_collective(a, mi, e);
		else
			err = 0;
		if (err)
			return err;
	}
	return 0;
}

int fr_analysis__add_corrupt(struct fr_analysis *a, const char *path, const struct fr_dump *d,
			     const char *why)
{
	struct corrupt *c;

	if (grow((void **)&a->corrupt, &a->cap_corrupt, a->nr_corrupt + 1, sizeof(*a->corrupt)))
		return -ENOMEM;
	c = &a->corrupt[a->nr_corrupt++];
	memset(c, 0, sizeof(*c));
	c->path = strdup(path ? path : "");
	c->why = strdup(why ? why : "unreadable");
	c->global_rank = d ? d->global_rank : FR_UNK;
	c->pid = d ? d->pid : FR_UNK;
	snprintf(c->host, sizeof(c->host), "%s", d ? d->host : "");
	return c->path && c->why ? 0 : -ENOMEM;
}

/* ---------------------------------------------------------------- verdict building */

static struct verdict *verdict_new(struct fr_analysis *a, int rule, int comm, int64_t seq,
				   const char *op)
{
	struct verdict *v;

	if (grow((void **)&a->verdicts, &a->cap_verdicts, a->nr_verdicts + 1,
		 sizeof(*a->verdicts)))
		return NULL;
	v = &a->verdicts[a->nr_verdicts];
	memset(v, 0, sizeof(*v));
	v->rule = rule;
	v->comm = comm;
	v->seq = seq;
	v->order = a->nr_verdicts++;
	snprintf(v->op, sizeof(v->op), "%s", op ? op : "");
	return v;
}

#define MAX_WHO (1 << 16)	/* culprits listed per verdict */

static void who_add(struct verdict *v, int64_t grank, int64_t crank, int proc)
{
	if (v->nr_who >= MAX_WHO)
		return;
	if (v->nr_who == v->cap_who) {
		int cap = v->cap_who ? v->cap_who * 2 : 8;
		void *p = realloc(v->who, cap * sizeof(*v->who));

		if (!p)
			return;
		v->who = p;
		v->cap_who = cap;
	}
	v->who[v->nr_who][0] = grank == FR_UNK ? -1 : grank;
	v->who[v->nr_who][1] = crank == FR_UNK ? -1 : crank;
	v->who[v->nr_who][2] = proc;
	v->nr_who++;
}

static void who_member(struct fr_analysis *a, struct verdict *v, int mi)
{
	struct member *m = &a->members[mi];

	who_add(v, a->procs[m->proc].global_rank, m->rank, m->proc);
}

static void who_proc(struct fr_analysis *a, struct verdict *v, int pi)
{
	who_add(v, a->procs[pi].global_rank, FR_UNK, pi);
}

static int cmp_who(const void *x, const void *y)
{
	const int64_t *p = x, *q = y;

	/* known global ranks first, ascending; unknown ones by comm rank, then dump order */
	if ((p[0] < 0) != (q[0] < 0))
		return p[0] < 0 ? 1 : -1;
	for (int i = 0; i < 3; i++)
		if (p[i] != q[i])
			return p[i] < q[i] ? -1 : 1;
	return 0;
}

static void who_sort(struct verdict *v)
{
	int n = 0;

	if (v->nr_who > 1)
		qsort(v->who, v->nr_who, sizeof(*v->who), cmp_who);
	for (int i = 0; i < v->nr_who; i++)
		if (!n || memcmp(v->who[i], v->who[n - 1], sizeof(*v->who)))
			memcpy(v->who[n++], v->who[i], sizeof(*v->who));
	v->nr_who = n;
}

static void set_low(struct verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_low(struct verdict *v, const char *fmt, ...)
{
	va_list ap;
	char *s;

	if (v->low)
		return;	/* the first reason is the one that matters */
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	v->low = true;
	v->low_reason = s;
}

/* text builder on open_memstream */
struct text {
	char *buf;
	size_t len;
	FILE *f;
};

static FILE *text_open(struct text *t)
{
	t->buf = NULL;
	t->len = 0;
	t->f = open_memstream(&t->buf, &t->len);
	return t->f;
}

static char *text_close(struct text *t)
{
	if (!t->f)
		return strdup("");
	fclose(t->f);
	t->f = NULL;
	/* drop a trailing newline */
	if (t->len && t->buf[t->len - 1] == '\n')
		t->buf[--t->len] = 0;
	return t->buf;
}

/* the first 8 hex digits name a comm in prose, as git names commits */
static const char *short_id(const char *id)
{
	static __thread char bufs[4][FR_ID_LEN];
	static __thread unsigned next;
	char *b = bufs[next++ & 3];
	/* "inferred:" + 8 hex digits; a local id whole (it names host, pid and handle) */
	size_t n = !strncmp(id, "inferred:", 9) ? strnlen(id, 17) :
		   !strncmp(id, "local:", 6) ? strnlen(id, FR_ID_LEN - 1) : strnlen(id, 8);

	memcpy(b, id, n);
	b[n] = 0;
	return b;
}

/* "0-4,6-7" from a sorted list; returns the count printed */
static void print_range_list(FILE *f, const int64_t *vals, int n)
{
	int i = 0;
	bool first = true;

	while (i < n) {
		int j = i;

		while (j + 1 < n && vals[j + 1] == vals[j] + 1)
			j++;
		fprintf(f, "%s%" PRId64, first ? "" : ",", vals[i]);
		if (j > i)
			fprintf(f, "%s%" PRId64, j == i + 1 ? "," : "-", vals[j]);
		first = false;
		i = j + 1;
	}
}

static void print_proc_label(FILE *f, const struct proc *p)
{
	if (p->global_rank != FR_UNK)
		fprintf(f, "rank %" PRId64, p->global_rank);
	else
		fprintf(f, "pid %" PRId64 " on %s", p->pid == FR_UNK ? -1 : p->pid, p->host);
}

/* "rank 5 (host node2 pid 777)" or "ranks 0-4,6-7" (+ pids of rank-less dumps) */
static void print_who(FILE *f, const struct fr_analysis *a, const struct verdict *v, bool detail1)
{
	int64_t *vals = malloc((v->nr_who + 1) * sizeof(int64_t));
	int n = 0, unknown = 0;

	if (!vals)
		return;
	for (int i = 0; i < v->nr_who; i++) {
		if (v->who[i][0] >= 0) {
			if (!n || vals[n - 1] != v->who[i][0])
				vals[n++] = v->who[i][0];
		} else {
			unknown++;
		}
	}
	if (v->nr_who == 1 && detail1 && v->who[0][2] >= 0) {
		const struct proc *p = &a->procs[v->who[0][2]];

		if (p->global_rank != FR_UNK)
			fprintf(f, "rank %" PRId64 " (host %s pid %" PRId64 ")", p->global_rank,
				p->host, p->pid == FR_UNK ? -1 : p->pid);
		else
			print_proc_label(f, p);
	} else {
		if (n) {
			fprintf(f, "rank%s ", n > 1 ? "s" : "");
			print_range_list(f, vals, n);
		}
		if (unknown) {
			int shown = 0;

			fprintf(f, "%s", n ? " and " : "");
			for (int i = 0; i < v->nr_who && shown < 4; i++) {
				if (v->who[i][0] >= 0)
					continue;
				fprintf(f, "%s", shown ? ", " : "");
				if (v->who[i][2] >= 0)
					print_proc_label(f, &a->procs[v->who[i][2]]);
				else
					fprintf(f, "an unknown rank");
				shown++;
			}
			if (unknown > shown)
				fprintf(f, " and %d more rank-less dumps", unknown - shown);
		}
	}
	free(vals);
}

/* global ranks of a member list, compressed */
static void print_members(FILE *f, const struct fr_analysis *a, const int *mis, int n)
{
	struct verdict tmp = { 0 };

	for (int i = 0; i < n; i++)
		who_add(&tmp, a->procs[a->members[mis[i]].proc].global_rank,
			a->members[mis[i]].rank, a->members[mis[i]].proc);
	who_sort(&tmp);
	print_who(f, a, &tmp, false);
	free(tmp.who);
}

static const char *signal_name(int64_t sig)
{
	switch (sig) {
	case 1: return "SIGHUP";
	case 2: return "SIGINT";
	case 3: return "SIGQUIT";
	case 4: return "SIGILL";
	case 6: return "SIGABRT";
	case 7: return "SIGBUS";
	case 8: return "SIGFPE";
	case 9: return "SIGKILL";
	case 11: return "SIGSEGV";
	case 13: return "SIGPIPE";
	case 15: return "SIGTERM";
	default: return "signal";
	}
}

static const char *nccl_result_name(int64_t r)
{
	static const char *const names[] = {
		"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
		"ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress",
	};
	return r >= 0 && r < 8 ? names[r] : "unknown ncclResult_t";
}

static void table_sizes(const struct sig *s, int64_t n, int64_t *in, int64_t *out)
{
	int64_t c = s->count, cn;

	*in = s->in_size;
	*out = s->out_size;
	if (c == FR_UNK)
		return;
	cn = (n != FR_UNK && n > 0 && c <= INT64_MAX / n) ? c * n : FR_UNK;
	if (*in == FR_UNK)
		*in = (s->op == FR_OP_REDUCE_SCATTER || s->op == FR_OP_ALL_TO_ALL ||
		       s->op == FR_OP_SCATTER) ? cn : c;
	if (*out == FR_UNK)
		*out = (s->op == FR_OP_ALL_GATHER || s->op == FR_OP_ALL_TO_ALL ||
			s->op == FR_OP_GATHER) ? cn : c;
}

static void print_i64(FILE *f, int64_t v)
{
	if (v == FR_UNK)
		fputs("?", f);
	else
		fprintf(f, "%" PRId64, v);
}

static void print_sig(FILE *f, const struct sig *s, int64_t nranks)
{
	int64_t in, out;

	table_sizes(s, nranks, &in, &out);
	fprintf(f, "%s count ", fr_op_name(s->op));
	print_i64(f, s->count);
	fprintf(f, " %s", fr_dtype_name(s->dtype));
	if (fr_op_has_redop(s->op))
		fprintf(f, " %s", fr_redop_name(s->redop));
	if (fr_op_has_root(s->op)) {
		fprintf(f, " root ");
		print_i64(f, s->root < 0 ? FR_UNK : s->root);
	}
	fprintf(f, ", input_sizes [[");
	print_i64(f, in);
	fprintf(f, "]] output_sizes [[");
	print_i64(f, out);
	fprintf(f, "]]");
}

static void print_in_calls(FILE *f, const struct proc *p)
{
	for (int i = 0; i < p->nr_in_calls; i++) {
		const struct fr_in_call *ic = &p->in_calls[i];

		fprintf(f, "%s inside %s (tid %" PRId64 "%s%s%s", i ? ";" : "",
			ic->api[0] ? ic->api : "?", ic->tid == FR_UNK ? -1 : ic->tid,
			ic->thread_name[0] ? " \"" : "", ic->thread_name,
			ic->thread_name[0] ? "\"" : "");
		if (ic->entered_ns != FR_UNK && p->dump_time_ns != FR_UNK)
			fprintf(f, ") for %.1f s", ns_diff(p->dump_time_ns, ic->entered_ns) / 1e9);
		else
			fprintf(f, ")");
	}
}

static void print_last_entry(FILE *f, const struct fr_analysis *a, const struct proc *p)
{
	if (!p->has_last) {
		fprintf(f, "no entries in its ring");
		return;
	}
	fprintf(f, "its newest entry is %s seq ", fr_op_name(p->last_op));
	print_i64(f, p->last_seq);
	fprintf(f, " on comm %s (%s)", p->last_comm >= 0 ? short_id(a->comms[p->last_comm].id) : "?",
		fr_state_name(p->last_state));
}

static bool proc_dropped(const struct proc *p)
{
	return p->events_dropped != FR_UNK && p->events_dropped > 0;
}

/* ---------------------------------------------------------------- rules */

static int cmp_placed(const void *x, const void *y)
{
	const int64_t *p = x, *q = y;

	if (p[0] != q[0])
		return p[0] < q[0] ? -1 : 1;
	return p[1] < q[1] ? -1 : p[1] > q[1];
}

/* Sorts each comm's members by comm rank; a second dump claiming a rank is not placed. */
static int place_members(struct fr_analysis *a)
{
	for (int ci = 0; ci < a->nr_comms; ci++) {
		struct comm *c = &a->comms[ci];
		int n = 0;

		c->placed = malloc((c->members.n + 1) * sizeof(*c->placed));
		if (!c->placed)
			return -ENOMEM;
		for (int i = 0; i < c->members.n; i++) {
			struct member *m = &a->members[c->members.v[i]];

			if (m->rank == FR_UNK || (c->nranks != FR_UNK && m->rank >= c->nranks)) {
				m->placed = false;
				continue;
			}
			c->placed[n][0] = m->rank;
			c->placed[n][1] = c->members.v[i];
			n++;
		}
		qsort(c->placed, n, sizeof(*c->placed), cmp_placed);
		c->nr_placed = 0;
		for (int i = 0; i < n; i++) {
			if (c->nr_placed && c->placed[c->nr_placed - 1][0] == c->placed[i][0]) {
				a->members[c->placed[i][1]].placed = false;
				c->dup_ranks++;
				continue;
			}
			memmove(c->placed[c->nr_placed++], c->placed[i], sizeof(*c->placed));
		}
	}
	return 0;
}

static int comm_member_at(const struct fr_analysis *a, const struct comm *c, int64_t rank)
{
	int lo = 0, hi = c->nr_placed - 1;

	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2;

		if (c->placed[mid][0] == rank)
			return (int)c->placed[mid][1];
		if (c->placed[mid][0] < rank)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

/* Absent comm ranks: the first up to cap of them into vals; returns how many there are. */
static int64_t comm_absent(const struct comm *c, int64_t *vals, int cap)
{
	int64_t n = 0, r = 0;

	if (c->nranks == FR_UNK)
		return 0;
	for (int i = 0; i <= c->nr_placed; i++) {
		int64_t upto = i < c->nr_placed ? c->placed[i][0] : c->nranks;

		for (; r < upto && n < cap; r++)
			vals[n++] = r;
		if (r < upto) {
			n += upto - r;
			r = upto;
		}
		r = upto + 1;
	}
	return n;
}

static int cmp_comm_id(const void *x, const void *y, void *arg)
{
	const struct fr_analysis *a = arg;

	return strcmp(a->comms[*(const int *)x].id, a->comms[*(const int *)y].id);
}

static int cmp_agg_seq(const void *x, const void *y, void *arg)
{
	const struct fr_analysis *a = arg;
	int64_t s = a->aggs[*(const int *)x].seq, t = a->aggs[*(const int *)y].seq;

	return s < t ? -1 : s > t;
}

static const char *agg_op(const struct fr_analysis *a, int ai)
{
	return ai >= 0 ? fr_op_name(a->aggs[ai].sig0.op) : "collective";
}

/* Why a verdict at (comm, seq) might be wrong because some member's ring no longer holds seq. */
static void check_wrap(struct fr_analysis *a, struct verdict *v, int comm, int64_t seq)
{
	struct comm *c = &a->comms[comm];

	for (int i = 0; i < c->members.n; i++) {
		struct member *m = &a->members[c->members.v[i]];
		struct proc *p = &a->procs[m->proc];

		if (!m->placed)
			continue;
		if (m->partial && m->oldest_seq != FR_UNK && m->oldest_seq > seq && !p->wrapped) {
			struct text t;
			FILE *f = text_open(&t);

			if (!f)
				return;
			print_proc_label(f, p);
			fprintf(f, " was attached after seq %" PRId64 " of this comm", seq);
			set_low(v, "%s", text_close(&t));
			free(t.buf);
			return;
		}
		if ((m->oldest_seq != FR_UNK && m->oldest_seq > seq && p->wrapped) ||
		    (m->oldest_seq == FR_UNK && p->wrapped)) {
			struct text t;
			FILE *f = text_open(&t);

			if (!f)
				return;
			print_proc_label(f, p);
			fprintf(f, "'s ring wrapped past seq %" PRId64 " of this comm", seq);
			set_low(v, "%s", text_close(&t));
			free(t.buf);
			return;
		}
	}
}

static void check_dropped(struct fr_analysis *a, struct verdict *v)
{
	for (int i = 0; i < v->nr_who; i++) {
		struct proc *p = &a->procs[v->who[i][2]];

		if (proc_dropped(p)) {
			struct text t;
			FILE *f = text_open(&t);

			if (!f)
				return;
			print_proc_label(f, p);
			fprintf(f, " dropped %" PRId64 " events: entries may be missing from its dump",
				p->events_dropped);
			set_low(v, "%s", text_close(&t));
			free(t.buf);
			return;
		}
	}
}

static bool proc_is_dead(const struct proc *p, bool any_running)
{
	if (p->state == FR_PROC_KILLED)
		return true;
	if (p->state == FR_PROC_EXITED)
		return (p->exit_code != FR_UNK && p->exit_code != 0) || any_running;
	return false;
}

/* Ranks of an inferred comm that skipped a collective and went on (find_skips): the
 * earliest such hole is the collective the others wait in. 1 when it made a verdict. */
static int missing_hole(struct fr_analysis *a, int cid)
{
	struct comm *c = &a->comms[cid];
	int64_t s = FR_UNK;
	struct ivec culprits = { 0 }, waiting = { 0 };
	struct verdict *v;
	struct text t;
	FILE *f;
	int ai, ret = 0;

	for (int i = 0; i < c->members.n; i++) {
		struct member *m = &a->members[c->members.v[i]];

		if (m->placed && m->hole_len && (s == FR_UNK || m->hole_seq < s))
			s = m->hole_seq;
	}
	if (s == FR_UNK)
		return 0;
	for (int i = 0; i < c->members.n; i++) {
		int mi = c->members.v[i];
		struct member *m = &a->members[mi];

		if (!m->placed)
			continue;
		if (m->hole_len && m->hole_seq == s)
			ivec_push(&culprits, mi);
		else if (m->newest_seq != FR_UNK && m->newest_seq >= s &&
			 (m->oldest_seq == FR_UNK || m->oldest_seq <= s))
			ivec_push(&waiting, mi);
	}
	ai = agg_find(a, cid, s);
	if (!culprits.n || !(v = verdict_new(a, RULE_MISSING_RANK, cid, s, agg_op(a, ai))))
		goto out;
	ret = 1;
	for (int i = 0; i < culprits.n; i++)
		who_member(a, v, culprits.v[i]);
	who_sort(v);
	if (!(f = text_open(&t)))
		goto out;
	print_who(f, a, v, true);
	fprintf(f, " never entered %s seq %" PRId64 " on comm %s (", agg_op(a, ai), s,
		short_id(c->id));
	print_i64(f, c->nranks);
	fprintf(f, " ranks) and went on to later collectives; ");
	print_members(f, a, waiting.v, waiting.n);
	if (ai >= 0 && a->aggs[ai].completed == 0)
		fprintf(f, " %s waiting in it", waiting.n == 1 ? "is" : "are");
	else
		fprintf(f, " entered it");
	v->headline = text_close(&t);
	if (!(f = text_open(&t)))
		goto out;
	for (int i = 0; i < v->nr_who && i < 8; i++) {
		struct member *m = &a->members[culprits.v[0]];
		const struct proc *p;

		for (int k = 0; k < culprits.n; k++)
			if (a->members[culprits.v[k]].proc == v->who[i][2])
				m = &a->members[culprits.v[k]];
		p = &a->procs[m->proc];
		print_proc_label(f, p);
		fprintf(f, " (comm rank %" PRId64 "): skipped %" PRId64 " collective%s at seq %" PRId64,
			m->rank, m->hole_len, m->hole_len == 1 ? "" : "s", s);
		if (m->hole_next_seq != FR_UNK)
			fprintf(f, " and went on to %s seq %" PRId64 " (%s)",
				fr_op_name(m->hole_next_op), m->hole_next_seq,
				fr_state_name(m->hole_next_state));
		fprintf(f, "; its collectives from there on match the others' shifted by %" PRId64
			   ";", m->hole_len);
		print_in_calls(f, p);
		fprintf(f, "%s ", p->nr_in_calls ? ";" : "");
		print_last_entry(f, a, p);
		fprintf(f, "\n");
	}
	if (ai >= 0) {
		struct seq_agg *g = &a->aggs[ai];

		fprintf(f, "%d ranks entered seq %" PRId64 ", %d completed it", g->entered, s,
			g->completed);
		if (g->min_created != FR_UNK && g->max_created != FR_UNK)
			fprintf(f, "; they entered within %.3f s of each other",
				ns_diff(g->max_created, g->min_created) / 1e9);
		fprintf(f, "\n");
	}
	v->detail = text_close(&t);
	check_dropped(a, v);
out:
	free(culprits.v);
	free(waiting.v);
	return ret;
}

static int rule_missing_rank(struct fr_analysis *a)
{
	for (int ci = 0; ci < a->nr_comms; ci++) {
		int cid = a->comm_order[ci];
		struct comm *c = &a->comms[cid];
		int64_t maxeff = FR_UNK, mineff = FR_UNK;
		struct ivec culprits = { 0 }, behind = { 0 }, waiting = { 0 }, dead = { 0 };
		int unknown = -1, ai;
		struct verdict *v;
		struct text t;
		FILE *f;
		int64_t s;

		if (c->inferred && missing_hole(a, cid))
			continue;

		for (int i = 0; i < c->members.n; i++) {
			struct member *m = &a->members[c->members.v[i]];
			struct proc *p = &a->procs[m->proc];
			int64_t eff = m->hdr_enqueued;

			if (!m->placed)
				continue;
			if (m->newest_seq != FR_UNK && (eff == FR_UNK || m->newest_seq > eff))
				eff = m->newest_seq;
			if (eff == FR_UNK && !p->wrapped)
				eff = 0;	/* whole history in the ring: it never ran one */
			m->eff_last = eff;
			if (eff == FR_UNK) {
				unknown = c->members.v[i];
				continue;
			}
			if (maxeff == FR_UNK || eff > maxeff)
				maxeff = eff;
		}
		if (maxeff == FR_UNK || maxeff <= 0)
			continue;
		for (int i = 0; i < c->members.n; i++) {
			struct member *m = &a->members[c->members.v[i]];

			if (m->placed && m->eff_last != FR_UNK && m->eff_last < maxeff &&
			    (mineff == FR_UNK || m->eff_last < mineff))
				mineff = m->eff_last;
		}
		if (mineff == FR_UNK)
			continue;
		s = mineff + 1;
		for (int i = 0; i < c->members.n; i++) {
			int mi = c->members.v[i];
			struct member *m = &a->members[mi];

			if (!m->placed || m->eff_last == FR_UNK)
				continue;
			if (m->eff_last == mineff) {
				if (a->procs[m->proc].dead)
					ivec_push(&dead, mi);
				else
					ivec_push(&culprits, mi);
			} else if (m->eff_last < maxeff) {
				ivec_push(&behind, mi);
			}
			if (m->eff_last >= s)
				ivec_push(&waiting, mi);
		}
		ai = agg_find(a, cid, s);
		/* a dead rank that never entered: told in its dead_rank verdict */
		for (int i = 0; i < dead.n; i++) {
			struct proc *p = &a->procs[a->members[dead.v[i]].proc];

			ivec_push(&p->missed, cid);
			ivec_push(&p->missed, (int)(s > INT32_MAX ? INT32_MAX : s));
			ivec_push(&p->missed, waiting.n);
		}
		if (!culprits.n)
			goto next;
		v = verdict_new(a, RULE_MISSING_RANK, cid, s, agg_op(a, ai));
		if (!v)
			goto next;
		for (int i = 0; i < culprits.n; i++)
			who_member(a, v, culprits.v[i]);
		who_sort(v);
		if (!(f = text_open(&t)))
			goto next;
		print_who(f, a, v, true);
		fprintf(f, " never entered %s seq %" PRId64 " on comm %s (", agg_op(a, ai), s,
			short_id(c->id));
		print_i64(f, c->nranks);
		fprintf(f, " ranks); ");
		print_members(f, a, waiting.v, waiting.n);
		if (ai >= 0 && a->aggs[ai].completed == 0)
			fprintf(f, " %s waiting in it", waiting.n == 1 ? "is" : "are");
		else
			fprintf(f, " entered it");
		v->headline = text_close(&t);

		if (!(f = text_open(&t)))
			goto next;
		for (int i = 0; i < v->nr_who && i < 8; i++) {
			struct member *m = &a->members[culprits.v[0]];
			const struct proc *p;

			/* who[] is sorted by rank; find this proc's member on this comm */
			for (int k = 0; k < culprits.n; k++)
				if (a->members[culprits.v[k]].proc == v->who[i][2])
					m = &a->members[culprits.v[k]];
			p = &a->procs[m->proc];
			print_proc_label(f, p);
			fprintf(f, " (comm rank %" PRId64 "): ", m->rank);
			if (m->eff_last == 0)
				fprintf(f, "no collective on this comm yet");
			else if (m->newest_seq == m->eff_last)
				fprintf(f, "last collective on this comm is %s seq %" PRId64 " (%s)",
					fr_op_name(m->newest_op), m->newest_seq,
					fr_state_name(m->newest_state));
			else
				fprintf(f, "last enqueued collective on this comm is seq %" PRId64,
					m->eff_last);
			fprintf(f, ";");
			print_in_calls(f, p);
			fprintf(f, "%s ", p->nr_in_calls ? ";" : "");
			print_last_entry(f, a, p);
			fprintf(f, "\n");
		}
		if (culprits.n > 8)
			fprintf(f, "... and %d more ranks that never entered it\n", culprits.n - 8);
		if (ai >= 0) {
			struct seq_agg *g = &a->aggs[ai];

			fprintf(f, "%d ranks entered seq %" PRId64 ", %d completed it", g->entered, s,
				g->completed);
			if (g->min_created != FR_UNK && g->max_created != FR_UNK)
				fprintf(f, "; they entered within %.3f s of each other",
					ns_diff(g->max_created, g->min_created) / 1e9);
			fprintf(f, "\n");
		}
		if (behind.n) {
			fprintf(f, "also behind the newest seq %" PRId64 ": ", maxeff);
			print_members(f, a, behind.v, behind.n);
			fprintf(f, " (probably waiting on the ranks above)\n");
		}
		if (dead.n) {
			print_members(f, a, dead.v, dead.n);
			fprintf(f, " never entered it either; the process is dead (see dead_rank)\n");
		}
		v->detail = text_close(&t);
		check_dropped(a, v);
		if (unknown >= 0) {
			if (!(f = text_open(&t)))
				goto next;
			print_proc_label(f, &a->procs[a->members[unknown].proc]);
			fprintf(f, "'s position on this comm is unknown: its ring wrapped past every "
				   "entry of the comm and the header has no last_enqueued_seq");
			set_low(v, "%s", text_close(&t));
			free(t.buf);
		}
next:
		free(culprits.v);
		free(behind.v);
		free(waiting.v);
		free(dead.v);
	}
	return 0;
}

static int rule_dead_rank(struct fr_analysis *a)
{
	for (int pi = 0; pi < a->nr_procs; pi++) {
		struct proc *p = &a->procs[pi];
		struct verdict *v;
		struct text t;
		FILE *f;

		if (!p->dead)
			continue;
		if (!(v = verdict_new(a, RULE_DEAD_RANK, -1, FR_UNK, NULL)))
			return -ENOMEM;
		who_proc(a, v, pi);
		if (!(f = text_open(&t)))
			return -ENOMEM;
		print_who(f, a, v, true);
		if (p->state == FR_PROC_KILLED) {
			fprintf(f, " was killed");
			if (p->signal != FR_UNK)
				fprintf(f, " by %s (%" PRId64 ")", signal_name(p->signal), p->signal);
		} else {
			fprintf(f, " exited");
			if (p->exit_code != FR_UNK)
				fprintf(f, " with code %" PRId64, p->exit_code);
			fprintf(f, " while other ranks still run");
		}
		v->headline = text_close(&t);
		if (!(f = text_open(&t)))
			return -ENOMEM;
		for (int i = 0; i + 2 < p->missed.n; i += 3) {
			int cid = p->missed.v[i];
			int ai = agg_find(a, cid, p->missed.v[i + 1]);

			if (i == 0) {
				/* the first comm the death blocks names the op */
				if (ai >= 0)
					snprintf(v->op, sizeof(v->op), "%s", agg_op(a, ai));
				v->comm = cid;
				v->seq = p->missed.v[i + 1];
			}
			fprintf(f, "it never entered %s seq %d on comm %s; %d ranks entered it\n",
				agg_op(a, ai), p->missed.v[i + 1], short_id(a->comms[cid].id),
				p->missed.v[i + 2]);
		}
		print_last_entry(f, a, p);
		fprintf(f, "\n");
		v->detail = text_close(&t);
		check_dropped(a, v);
	}
	return 0;
}

#define ABSENT_LIST 1024

static void print_absent(FILE *f, const struct comm *c, const int64_t *absent, int64_t n)
{
	print_range_list(f, absent, (int)(n < ABSENT_LIST ? n : ABSENT_LIST));
	if (n > ABSENT_LIST)
		fprintf(f, " and %" PRId64 " more", n - ABSENT_LIST);
}

static int rule_missing_dump(struct fr_analysis *a)
{
	uint8_t *present = NULL;
	int64_t absent[ABSENT_LIST];
	struct verdict *v = NULL;
	struct text t;
	FILE *f;
	int nr_missing = 0;

	if (a->world_size != FR_UNK) {
		present = calloc(a->world_size, 1);
		if (!present)
			return -ENOMEM;
		for (int pi = 0; pi < a->nr_procs; pi++)
			if (a->procs[pi].global_rank != FR_UNK &&
			    a->procs[pi].global_rank < a->world_size)
				present[a->procs[pi].global_rank] = 1;
		for (int64_t r = 0; r < a->world_size; r++)
			if (!present[r])
				nr_missing++;
	}
	if (nr_missing) {
		int shown = 0;

		if (!(v = verdict_new(a, RULE_MISSING_DUMP, -1, FR_UNK, NULL)))
			goto nomem;
		for (int64_t r = 0; r < a->world_size; r++)
			if (!present[r])
				who_add(v, r, FR_UNK, -1);
		if (!(f = text_open(&t)))
			goto nomem;
		fprintf(f, "no dump for ");
		print_who(f, a, v, false);
		fprintf(f, " (world size %" PRId64 ", %d dumps read)", a->world_size, a->nr_procs);
		v->headline = text_close(&t);
		if (!(f = text_open(&t)))
			goto nomem;
		for (int i = 0; i < a->nr_corrupt; i++)
			if (a->corrupt[i].global_rank != FR_UNK &&
			    a->corrupt[i].global_rank < a->world_size &&
			    !present[a->corrupt[i].global_rank])
				fprintf(f, "rank %" PRId64 "'s dump %s is corrupt (see corrupt_dump)\n",
					a->corrupt[i].global_rank, a->corrupt[i].path);
		for (int ci = 0; ci < a->nr_comms; ci++) {
			struct comm *c = &a->comms[a->comm_order[ci]];
			int64_t n = comm_absent(c, absent, ABSENT_LIST);

			if (n && shown < 8) {
				fprintf(f, "comm %s (%" PRId64 " ranks) has no dump for comm rank%s ",
					short_id(c->id), c->nranks, n > 1 ? "s" : "");
				print_absent(f, c, absent, n);
				fprintf(f, "\n");
			}
			shown += n > 0;
		}
		if (shown > 8)
			fprintf(f, "... and %d more comms lack members\n", shown - 8);
		v->detail = text_close(&t);
		free(present);
		return 0;
	}
	free(present);
	/* no world size to go by: say it per comm */
	for (int ci = 0; ci < a->nr_comms; ci++) {
		int cid = a->comm_order[ci];
		struct comm *c = &a->comms[cid];
		int64_t n = comm_absent(c, absent, ABSENT_LIST);
		bool identity = true;

		if (!n)
			continue;
		for (int i = 0; i < c->nr_placed; i++) {
			struct member *m = &a->members[c->placed[i][1]];

			if (a->procs[m->proc].global_rank != m->rank)
				identity = false;
		}
		if (!(v = verdict_new(a, RULE_MISSING_DUMP, cid, FR_UNK, NULL)))
			return -ENOMEM;
		for (int64_t i = 0; i < n && i < ABSENT_LIST; i++)
			who_add(v, identity ? absent[i] : FR_UNK, absent[i], -1);
		if (!(f = text_open(&t)))
			return -ENOMEM;
		fprintf(f, "comm %s has %" PRId64 " ranks but no dump holds comm rank%s ",
			short_id(c->id), c->nranks, n > 1 ? "s" : "");
		print_absent(f, c, absent, n);
		v->headline = text_close(&t);
		v->detail = strdup(identity ? "its ranks equal the global ranks in every dump "
				   "present, so the missing global ranks are the same" :
				   "the global ranks of the missing members are unknown");
	}
	return 0;
nomem:
	free(present);
	return -ENOMEM;
}

static int rule_async_error(struct fr_analysis *a)
{
	for (int ci = 0; ci < a->nr_comms; ci++) {
		int cid = a->comm_order[ci];
		struct comm *c = &a->comms[cid];
		struct verdict *v = NULL;
		int64_t err = 0;
		struct text t;
		FILE *f;

		for (int i = 0; i < c->members.n; i++) {
			struct member *m = &a->members[c->members.v[i]];

			/* ncclInProgress (7) is the normal state of a nonblocking comm */
			if (m->async_error == FR_UNK || m->async_error == 0 || m->async_error == 7)
				continue;
			if (!v && !(v = verdict_new(a, RULE_ASYNC_ERROR, cid, FR_UNK, NULL)))
				return -ENOMEM;
			who_member(a, v, c->members.v[i]);
			if (!err)
				err = m->async_error;
		}
		if (!v)
			continue;
		who_sort(v);
		if (!(f = text_open(&t)))
			return -ENOMEM;
		print_who(f, a, v, true);
		fprintf(f, " report%s NCCL async error %" PRId64 " (%s) on comm %s",
			v->nr_who == 1 ? "s" : "", err, nccl_result_name(err), short_id(c->id));
		v->headline = text_close(&t);
		v->detail = strdup(c->aborted ? "the comm was aborted or revoked" :
				   "ncclCommGetAsyncError returned it; collectives on this comm will "
				   "not complete");
	}
	return 0;
}

/* which rule a signature difference falls under, most significant field first */
static int sig_rule(const struct sig *x, const struct sig *y)
{
	if (x->op != y->op)
		return RULE_TYPE;
	if (x->count != y->count || !size_eq(x->in_size, y->in_size) ||
	    !size_eq(x->out_size, y->out_size))
		return RULE_SIZE;
	if (x->dtype != y->dtype)
		return RULE_DTYPE;
	if (x->redop != y->redop)
		return RULE_REDOP;
	if (x->root != y->root)
		return RULE_ROOT;
	return -1;
}

static const char *const rule_field[RULE__COUNT] = {
	[RULE_TYPE] = "the collective type", [RULE_SIZE] = "the count",
	[RULE_DTYPE] = "the dtype", [RULE_REDOP] = "the reduce op", [RULE_ROOT] = "the root",
};

struct group_view {
	struct sig sig;
	int n, nr_listed;
	int *members;
};

static int cmp_group_view(const void *x, const void *y)
{
	const struct group_view *p = x, *q = y;

	if (p->n != q->n)
		return p->n > q->n ? -1 : 1;
	/* equal sizes: a stable, input-order-free order */
	if (p->sig.op != q->sig.op)
		return p->sig.op - q->sig.op;
	if (p->sig.count != q->sig.count)
		return p->sig.count < q->sig.count ? -1 : 1;
	if (p->sig.dtype != q->sig.dtype)
		return p->sig.dtype - q->sig.dtype;
	if (p->sig.redop != q->sig.redop)
		return p->sig.redop - q->sig.redop;
	return p->sig.root - q->sig.root;
}

static int rule_signatures(struct fr_analysis *a)
{
	for (int ci = 0; ci < a->nr_comms; ci++) {
		int cid = a->comm_order[ci];
		struct comm *c = &a->comms[cid];
		struct verdict *first[RULE__COUNT] = { 0 };
		int first_idx[RULE__COUNT];

		for (int r = 0; r < RULE__COUNT; r++)
			first_idx[r] = -1;
		for (int k = 0; k < c->aggs.n; k++) {
			int ai = c->aggs.v[k];
			struct seq_agg *g = &a->aggs[ai];
			struct agg_extra *x;
			struct group_view gv[SIG_GROUPS];
			int members0[2 + SIG_LIST], n0 = 0, ng, rule = RULE__COUNT;
			bool tie;
			struct verdict *v;
			struct text t;
			FILE *f;

			if (g->extra < 0)
				continue;
			x = &a->extras[g->extra];
			if (!x->nr_groups)
				continue;
			for (int i = 0; i < 2 && i < g->n0; i++)
				members0[n0++] = g->first0[i];
			for (int i = 0; i < x->nr_list0; i++)
				members0[n0++] = x->list0[i];
			gv[0] = (struct group_view){ g->sig0, g->n0, n0, members0 };
			for (int i = 0; i < x->nr_groups; i++)
				gv[i + 1] = (struct group_view){ x->groups[i].sig, x->groups[i].n,
								 x->groups[i].nr_listed,
								 x->groups[i].members };
			ng = x->nr_groups + 1;
			qsort(gv, ng, sizeof(gv[0]), cmp_group_view);
			tie = gv[1].n == gv[0].n;
			for (int i = 1; i < ng; i++) {
				int r = sig_rule(&gv[i].sig, &gv[0].sig);

				if (r >= 0 && r < rule)
					rule = r;
			}
			if (rule == RULE__COUNT)
				continue;
			/* one verdict per (comm, rule): later seqs are counted in it */
			if (first[rule]) {
				a->verdicts[first_idx[rule]].also_seqs++;
				a->verdicts[first_idx[rule]].also_last = g->seq;
				continue;
			}
			if (!(v = verdict_new(a, rule, cid, g->seq, fr_op_name(gv[0].sig.op))))
				return -ENOMEM;
			first[rule] = v;
			first_idx[rule] = v->order;
			/* the minority is the culprit; on a tie every side is listed */
			for (int i = tie ? 0 : 1; i < ng; i++) {
				for (int j = 0; j < gv[i].nr_listed; j++)
					who_member(a, v, gv[i].members[j]);
			}
			who_sort(v);
			if (!(f = text_open(&t)))
				return -ENOMEM;
			if (tie) {
				fprintf(f, "ranks disagree on %s at %s seq %" PRId64 " on comm %s with no "
					   "majority: ", rule_field[rule], fr_op_name(gv[0].sig.op),
					g->seq, short_id(c->id));
				print_who(f, a, v, false);
				fprintf(f, " (a tie: cannot tell which side is wrong)");
			} else {
				print_who(f, a, v, true);
				fprintf(f, " disagree%s on %s at %s seq %" PRId64 " on comm %s: ",
					v->nr_who == 1 ? "s" : "", rule_field[rule],
					fr_op_name(gv[0].sig.op), g->seq, short_id(c->id));
				fprintf(f, "%d of %d ranks agree", gv[0].n, g->entered);
			}
			v->headline = text_close(&t);
			if (!(f = text_open(&t)))
				return -ENOMEM;
			for (int i = 0; i < ng; i++) {
				fprintf(f, "%s (%d rank%s): ", tie ? "tied" : i == 0 ? "majority" : "minority",
					gv[i].n, gv[i].n == 1 ? "" : "s");
				print_members(f, a, gv[i].members, gv[i].nr_listed);
				if (gv[i].nr_listed < gv[i].n)
					fprintf(f, " and %d more", gv[i].n - gv[i].nr_listed);
				fprintf(f, " %s ", gv[i].n == 1 ? "uses" : "use");
				print_sig(f, &gv[i].sig, c->nranks);
				fprintf(f, "\n");
			}
			if (x->other_n)
				fprintf(f, "%d more ranks use yet other signatures\n", x->other_n);
			v->detail = text_close(&t);
			check_dropped(a, v);
			check_wrap(a, v, cid, g->seq);
		}
	}
	return 0;
}

static void p2p_side_idx(const struct p2p_side *s, bool absolute, int64_t *maxidx)
{
	*maxidx = absolute ? s->total - 1 : s->total - s->done - 1;
}

static const struct p2p_op *p2p_at(const struct p2p_side *s, bool absolute, int64_t idx)
{
	int64_t k = absolute ? idx : idx + s->done;

	for (int i = 0; i < s->nr_kept; i++)
		if (s->kept[i].k == k)
			return &s->kept[i];
	return NULL;
}

static int cmp_chan(const void *x, const void *y, void *arg)
{
	const struct fr_analysis *a = arg;
	const struct p2p_chan *p = &a->chans[*(const int *)x], *q = &a->chans[*(const int *)y];
	int c = strcmp(a->comms[p->comm].id, a->comms[q->comm].id);

	if (c)
		return c;
	if (p->src != q->src)
		return p->src - q->src;
	return p->dst - q->dst;
}

static int rule_p2p(struct fr_analysis *a)
{
	int *order = malloc((a->nr_chans + 1) * sizeof(int));
	int last_comm = -1, per_comm = 0, suppressed = 0;

	if (!order)
		return -ENOMEM;
	for (int i = 0; i < a->nr_chans; i++)
		order[i] = i;
	qsort_r(order, a->nr_chans, sizeof(int), cmp_chan, a);
	for (int oi = 0; oi < a->nr_chans; oi++) {
		struct p2p_chan *ch = &a->chans[order[oi]];
		struct comm *c = &a->comms[ch->comm];
		struct p2p_side *S = &ch->send, *R = &ch->recv;
		int sm, rm;
		bool absolute;
		int64_t maxS, maxR, common;
		const struct p2p_op *bad_s = NULL, *bad_r = NULL, *lone = NULL;
		bool lone_send = false;
		struct verdict *v;
		struct text t;
		FILE *f;

		if (ch->comm != last_comm) {
			last_comm = ch->comm;
			per_comm = 0;
		}
		/* both ends must have a dump, or missing_dump already says it */
		sm = comm_member_at(a, c, ch->src);
		rm = comm_member_at(a, c, ch->dst);
		/* a side with no ops has no member yet: the rank never posted one */
		if (sm < 0 || rm < 0 || (S->member >= 0 && S->member != sm) ||
		    (R->member >= 0 && R->member != rm))
			continue;
		/* whole histories: pair by absolute index; else the newest completed ops pair */
		absolute = !a->procs[a->members[sm].proc].wrapped &&
			   !a->procs[a->members[rm].proc].wrapped &&
			   !a->members[sm].partial && !a->members[rm].partial;
		p2p_side_idx(S, absolute, &maxS);
		p2p_side_idx(R, absolute, &maxR);
		common = maxS < maxR ? maxS : maxR;
		for (int64_t idx = common; idx > common - P2P_KEEP && !bad_s; idx--) {
			const struct p2p_op *s = p2p_at(S, absolute, idx), *r = p2p_at(R, absolute, idx);

			if (s && r && (s->count != r->count || s->dtype != r->dtype)) {
				bad_s = s;
				bad_r = r;
			}
		}
		if (!bad_s && maxS != maxR) {
			lone_send = maxS > maxR;
			lone = lone_send ? p2p_at(S, absolute, maxR + 1) : p2p_at(R, absolute, maxS + 1);
		}
		if (!bad_s && maxS == maxR)
			continue;
		if (++per_comm > MAX_P2P_VERDICTS_PER_COMM) {
			suppressed++;
			continue;
		}
		if (!(v = verdict_new(a, RULE_P2P, ch->comm,
				      bad_s ? bad_s->seq : lone ? lone->seq : FR_UNK,
				      bad_s ? "send" : lone_send ? "send" : "recv")))
			goto nomem;
		if (bad_s) {
			who_member(a, v, sm);
			who_member(a, v, rm);
		} else {
			who_member(a, v, lone_send ? rm : sm);
		}
		who_sort(v);
		if (!(f = text_open(&t)))
			goto nomem;
		if (bad_s) {
			fprintf(f, "send %d->%d and the matching recv at %d from %d disagree on comm %s: "
				   "count %" PRId64 " %s vs %" PRId64 " %s", ch->src, ch->dst, ch->dst,
				ch->src, short_id(c->id), bad_s->count, fr_dtype_name(bad_s->dtype),
				bad_r->count, fr_dtype_name(bad_r->dtype));
		} else {
			int64_t extra = lone_send ? maxS - maxR : maxR - maxS;

			print_who(f, a, v, true);
			fprintf(f, " never posted the %s matching %s %d->%d on comm %s",
				lone_send ? "recv" : "send", lone_send ? "send" : "recv",
				ch->src, ch->dst, short_id(c->id));
			if (lone) {
				fprintf(f, " (count ");
				print_i64(f, lone->count);
				fprintf(f, " %s, p2p seq ", fr_dtype_name(lone->dtype));
				print_i64(f, lone->seq);
				fprintf(f, ", %s)", fr_state_name(lone->state));
			}
			if (extra > 1)
				fprintf(f, "; %" PRId64 " unmatched", extra);
		}
		v->headline = text_close(&t);
		if (!(f = text_open(&t)))
			goto nomem;
		fprintf(f, "comm ranks %d (", ch->src);
		print_proc_label(f, &a->procs[a->members[sm].proc]);
		fprintf(f, ") sent %" PRId64 " to %d (", S->total, ch->dst);
		print_proc_label(f, &a->procs[a->members[rm].proc]);
		fprintf(f, ") which received %" PRId64 " from %d in the dumped rings", R->total,
			ch->src);
		if (!absolute)
			fprintf(f, " (a ring wrapped: ops paired from the newest completed ones)");
		fprintf(f, "\n");
		v->detail = text_close(&t);
		check_dropped(a, v);
	}
	if (suppressed && a->nr_verdicts) {
		/* say it in the last p2p verdict rather than adding noise */
		for (int i = a->nr_verdicts - 1; i >= 0; i--)
			if (a->verdicts[i].rule == RULE_P2P) {
				char *d;

				if (asprintf(&d, "%s\n%d more p2p channels disagree (not listed)",
					     a->verdicts[i].detail ? a->verdicts[i].detail : "",
					     suppressed) >= 0) {
					free(a->verdicts[i].detail);
					a->verdicts[i].detail = d;
				}
				break;
			}
	}
	free(order);
	return 0;
nomem:
	free(order);
	return -ENOMEM;
}

struct stuck_call {
	const char *api;
	int proc, call;
	int64_t dur;
};

static int cmp_stuck(const void *x, const void *y)
{
	const struct stuck_call *p = x, *q = y;
	int c = strcmp(p->api, q->api);

	if (c)
		return c;
	if (p->proc != q->proc)
		return p->proc - q->proc;
	return p->call - q->call;
}

static int rule_stuck(struct fr_analysis *a)
{
	struct stuck_call *calls = NULL;
	int n = 0, cap = 0, first_v = a->nr_verdicts;

	for (int pi = 0; pi < a->nr_procs; pi++) {
		struct proc *p = &a->procs[pi];

		for (int i = 0; i < p->nr_in_calls; i++) {
			struct fr_in_call *ic = &p->in_calls[i];
			int64_t dur;

			if (ic->entered_ns == FR_UNK || p->dump_time_ns == FR_UNK)
				continue;
			dur = ns_diff(p->dump_time_ns, ic->entered_ns);
			if (dur <= a->opts.stuck_ns)
				continue;
			if (grow((void **)&calls, &cap, n + 1, sizeof(*calls)))
				goto nomem;
			calls[n++] = (struct stuck_call){ ic->api, pi, i, dur };
		}
	}
	if (n > 1)
		qsort(calls, n, sizeof(*calls), cmp_stuck);
	for (int i = 0; i < n;) {
		int j = i, nprocs = 0;
		int64_t mind = calls[i].dur, maxd = calls[i].dur;
		const struct fr_in_call *ic0 = &a->procs[calls[i].proc].in_calls[calls[i].call];
		bool same_site = true;
		struct verdict *v;
		struct text t;
		FILE *f;

		while (j < n && !strcmp(calls[j].api, calls[i].api)) {
			const struct fr_in_call *ic = &a->procs[calls[j].proc].in_calls[calls[j].call];

			if (calls[j].dur < mind)
				mind = calls[j].dur;
			if (calls[j].dur > maxd)
				maxd = calls[j].dur;
			if (strcmp(ic->comm_id, ic0->comm_id) || ic->seq != ic0->seq)
				same_site = false;
			if (j == i || calls[j].proc != calls[j - 1].proc)
				nprocs++;
			j++;
		}
		v = verdict_new(a, RULE_STUCK, -1, FR_UNK, calls[i].api[0] ? calls[i].api : "?");
		if (!v)
			goto nomem;
		if (same_site && ic0->comm_id[0]) {
			for (int ci = 0; ci < a->nr_comms; ci++)
				if (!strcmp(a->comms[ci].id, ic0->comm_id))
					v->comm = ci;
			v->seq = ic0->seq;
		}
		for (int k = i; k < j; k++) {
			/* the comm rank when the call names a comm this proc is in */
			int64_t crank = FR_UNK;
			const struct fr_in_call *ic = &a->procs[calls[k].proc].in_calls[calls[k].call];

			if (v->comm >= 0 && ic->comm_id[0]) {
				struct comm *c = &a->comms[v->comm];

				for (int m = 0; m < c->members.n; m++)
					if (a->members[c->members.v[m]].proc == calls[k].proc)
						crank = a->members[c->members.v[m]].rank;
			}
			who_add(v, a->procs[calls[k].proc].global_rank, crank, calls[k].proc);
		}
		who_sort(v);
		/* the longest stuck call first among this rule's verdicts */
		v->also_last = -maxd;
		v->also_seqs = nprocs;
		if (!(f = text_open(&t)))
			goto nomem;
		print_who(f, a, v, true);
		if (mind == maxd || v->nr_who == 1)
			fprintf(f, " %s been inside %s for %.1f s", v->nr_who == 1 ? "has" : "have",
				v->op, maxd / 1e9);
		else
			fprintf(f, " have been inside %s for %.1f-%.1f s", v->op, mind / 1e9,
				maxd / 1e9);
		fprintf(f, " (threshold %.1f s)", a->opts.stuck_ns / 1e9);
		v->headline = text_close(&t);
		if (!(f = text_open(&t)))
			goto nomem;
		for (int k = i; k < j && k < i + 8; k++) {
			const struct proc *p = &a->procs[calls[k].proc];
			const struct fr_in_call *ic = &p->in_calls[calls[k].call];

			print_proc_label(f, p);
			fprintf(f, " (host %s pid %" PRId64 "): tid %" PRId64 "%s%s%s for %.1f s",
				p->host, p->pid == FR_UNK ? -1 : p->pid,
				ic->tid == FR_UNK ? -1 : ic->tid, ic->thread_name[0] ? " \"" : "",
				ic->thread_name, ic->thread_name[0] ? "\"" : "", calls[k].dur / 1e9);
			if (ic->comm_id[0]) {
				fprintf(f, " on comm %s seq ", short_id(ic->comm_id));
				print_i64(f, ic->seq);
			}
			fprintf(f, "; ");
			print_last_entry(f, a, p);
			fprintf(f, "\n");
		}
		if (j - i > 8)
			fprintf(f, "... and %d more threads\n", j - i - 8);
		v->detail = text_close(&t);
		check_dropped(a, v);
		i = j;
	}
	/* fewest ranks first (a lone stuck rank is the suspect), then the longest */
	for (int i = first_v; i < a->nr_verdicts; i++)
		for (int k = i + 1; k < a->nr_verdicts; k++) {
			struct verdict *x = &a->verdicts[i], *y = &a->verdicts[k];

			if (y->also_seqs < x->also_seqs ||
			    (y->also_seqs == x->also_seqs && y->also_last < x->also_last)) {
				struct verdict tmp = *x;
				int ox = x->order, oy = y->order;

				*x = *y;
				*y = tmp;
				x->order = ox;
				y->order = oy;
			}
		}
	for (int i = first_v; i < a->nr_verdicts; i++)
		a->verdicts[i].also_seqs = a->verdicts[i].also_last = 0;
	free(calls);
	return 0;
nomem:
	free(calls);
	return -ENOMEM;
}

static int placed_count(const struct fr_analysis *a, const struct comm *c)
{
	int n = 0;

	for (int i = 0; i < c->members.n; i++)
		n += a->members[c->members.v[i]].placed;
	return n;
}

static int rule_late(struct fr_analysis *a)
{
	for (int ci = 0; ci < a->nr_comms; ci++) {
		int cid = a->comm_order[ci];
		struct comm *c = &a->comms[cid];
		int placed = placed_count(a, c), best = -1, nr_over = 0;
		bool best_stuck = false;
		int64_t best_skew = 0;
		struct verdict *v;
		struct text t;
		FILE *f;

		if (placed < 2)
			continue;
		for (int k = 0; k < c->aggs.n; k++) {
			struct seq_agg *g = &a->aggs[c->aggs.v[k]];
			int64_t skew;
			bool stuck;

			if (g->entered < placed || g->min_created == FR_UNK || g->max_created == FR_UNK)
				continue;
			skew = ns_diff(g->max_created, g->min_created);
			if (skew <= a->opts.skew_ns)
				continue;
			nr_over++;
			stuck = g->completed < g->entered;
			/* a late arrival that leaves others stuck explains the hang: prefer it */
			if (best < 0 || (stuck && !best_stuck) ||
			    (stuck == best_stuck && skew > best_skew)) {
				best = c->aggs.v[k];
				best_skew = skew;
				best_stuck = stuck;
			}
		}
		if (best < 0)
			continue;
		struct seq_agg *g = &a->aggs[best];

		if (!(v = verdict_new(a, RULE_LATE, cid, g->seq, fr_op_name(g->sig0.op))))
			return -ENOMEM;
		who_member(a, v, g->max_m);
		if (!(f = text_open(&t)))
			return -ENOMEM;
		print_who(f, a, v, true);
		fprintf(f, " entered %s seq %" PRId64 " on comm %s %.3f s after the first rank "
			   "(threshold %.3f s)", fr_op_name(g->sig0.op), g->seq, short_id(c->id),
			best_skew / 1e9, a->opts.skew_ns / 1e9);
		v->headline = text_close(&t);
		if (!(f = text_open(&t)))
			return -ENOMEM;
		fprintf(f, "first to enter: ");
		print_proc_label(f, &a->procs[a->members[g->min_m].proc]);
		fprintf(f, "; %d of %d ranks completed it", g->completed, g->entered);
		if (best_stuck)
			fprintf(f, "; the others are still waiting in it");
		fprintf(f, "\n");
		if (nr_over > 1)
			fprintf(f, "%d seqs on this comm have an arrival skew above the threshold\n",
				nr_over);
		if (strcmp(a->procs[a->members[g->min_m].proc].host,
			   a->procs[a->members[g->max_m].proc].host))
			fprintf(f, "the ranks are on different hosts: clock offsets add to the skew\n");
		v->detail = text_close(&t);
		check_dropped(a, v);
	}
	return 0;
}

static int rule_state(struct fr_analysis *a)
{
	for (int ci = 0; ci < a->nr_comms; ci++) {
		int cid = a->comm_order[ci];
		struct comm *c = &a->comms[cid];
		struct verdict *v = NULL;
		int nr_more = 0;
		int64_t last_more = 0;

		for (int k = 0; k < c->aggs.n; k++) {
			struct seq_agg *g = &a->aggs[c->aggs.v[k]];
			struct agg_extra *x;
			struct ivec stuck = { 0 };
			int incomplete = g->entered - g->completed;
			struct text t;
			FILE *f;

			if (!g->completed || !incomplete || g->extra < 0)
				continue;
			x = &a->extras[g->extra];
			if (v) {
				nr_more++;
				last_more = g->seq;
				continue;
			}
			if (x->nr_incomplete <= SIG_LIST) {
				for (int i = 0; i < x->nr_incomplete; i++)
					ivec_push(&stuck, x->incomplete[i]);
			} else {
				/* too many to have listed: members whose newest completed seq is
				 * below this one while they hold it (completion is in order) */
				for (int i = 0; i < c->members.n; i++) {
					struct member *m = &a->members[c->members.v[i]];

					if (m->placed && m->newest_seq != FR_UNK && m->newest_seq >= g->seq &&
					    (m->newest_completed == FR_UNK || m->newest_completed < g->seq))
						ivec_push(&stuck, c->members.v[i]);
				}
			}
			/* a dead process never completes anything: dead_rank says it */
			int alive = 0;

			for (int i = 0; i < stuck.n; i++)
				if (!a->procs[a->members[stuck.v[i]].proc].dead)
					stuck.v[alive++] = stuck.v[i];
			stuck.n = alive;
			if (!stuck.n) {
				free(stuck.v);
				continue;
			}
			if (!(v = verdict_new(a, RULE_STATE, cid, g->seq, fr_op_name(g->sig0.op)))) {
				free(stuck.v);
				return -ENOMEM;
			}
			for (int i = 0; i < stuck.n; i++)
				who_member(a, v, stuck.v[i]);
			who_sort(v);
			free(stuck.v);
			if (!(f = text_open(&t)))
				return -ENOMEM;
			print_who(f, a, v, true);
			fprintf(f, " did not complete %s seq %" PRId64 " on comm %s while %d rank%s "
				   "completed it", fr_op_name(g->sig0.op), g->seq, short_id(c->id),
				g->completed, g->completed == 1 ? "" : "s");
			if (incomplete > g->completed)
				fprintf(f, " (most ranks are stuck in it)");
			v->headline = text_close(&t);
			if (!(f = text_open(&t)))
				return -ENOMEM;
			fprintf(f, "the GPU side of the collective never finished on %s\n",
				v->nr_who == 1 ? "that rank" : "those ranks");
			for (int i = 0; i < v->nr_who && i < 4; i++) {
				const struct proc *p = &a->procs[v->who[i][2]];

				print_proc_label(f, p);
				fprintf(f, ":");
				print_in_calls(f, p);
				fprintf(f, "%s ", p->nr_in_calls ? ";" : "");
				print_last_entry(f, a, p);
				fprintf(f, "\n");
			}
			v->detail = text_close(&t);
			check_dropped(a, v);
		}
		if (v && nr_more) {
			v->also_seqs = nr_more;
			v->also_last = last_more;
		}
	}
	return 0;
}

static int rule_corrupt(struct fr_analysis *a)
{
	for (int i = 0; i < a->nr_corrupt; i++) {
		struct corrupt *c = &a->corrupt[i];
		struct verdict *v = verdict_new(a, RULE_CORRUPT, -1, FR_UNK, NULL);
		struct text t;
		FILE *f;

		if (!v)
			return -ENOMEM;
		who_add(v, c->global_rank, FR_UNK, -1);
		if (!(f = text_open(&t)))
			return -ENOMEM;
		fprintf(f, "dump %s is corrupt (%s); skipped", c->path, c->why);
		v->headline = text_close(&t);
		if (!(f = text_open(&t)))
			return -ENOMEM;
		if (c->global_rank != FR_UNK)
			fprintf(f, "it is rank %" PRId64 "'s (host %s pid %" PRId64 ")", c->global_rank,
				c->host, c->pid == FR_UNK ? -1 : c->pid);
		else
			fprintf(f, "its rank could not be read");
		v->detail = text_close(&t);
	}
	return 0;
}

/* ---------------------------------------------------------------- identity inference */

static struct sig entry_sig(const struct fr_entry *e)
{
	struct sig s = {
		.count = e->count, .in_size = e->in_size, .out_size = e->out_size,
		.root = fr_op_has_root(e->op) ? e->root : -1,
		.op = e->op, .dtype = e->dtype,
		.redop = fr_op_has_redop(e->op) ? e->redop : FR_RED_NONE,
	};
	return s;
}

/* Signatures that must agree on every rank of a comm whatever its size: in/out sizes scale
 * with nranks per op, and nranks is what is not known yet. */
static bool sig_match(const struct fr_entry *x, const struct fr_entry *y)
{
	struct sig p = entry_sig(x), q = entry_sig(y);

	return p.op == q.op && p.count == q.count && p.dtype == q.dtype && p.redop == q.redop &&
	       p.root == q.root;
}

static int64_t i64_abs(int64_t v) { return v < 0 ? (v == INT64_MIN ? INT64_MAX : -v) : v; }

static int cmp_i64(const void *x, const void *y)
{
	int64_t p = *(const int64_t *)x, q = *(const int64_t *)y;

	return p < q ? -1 : p > q;
}

static const struct fr_entry *pcoll(const struct pend *p, int i) { return &p->e[p->coll[i]]; }

/* index of p's collective with seq, -1 */
static int pend_find_seq(const struct pend *p, int64_t seq)
{
	int lo = 0, hi = p->nc - 1;

	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2;
		int64_t s = pcoll(p, mid)->coll_seq;

		if (s == seq)
			return mid;
		if (s < seq)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

/* index of p's collective created nearest to t (creation times rise with record order) */
static int pend_near_time(const struct pend *p, int64_t t)
{
	int lo = 0, hi = p->nc - 1;

	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		int64_t c = pcoll(p, mid)->created_ns;

		if (c != FR_UNK && c < t)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo > 0 && pcoll(p, lo)->created_ns != FR_UNK && pcoll(p, lo - 1)->created_ns != FR_UNK &&
	    i64_abs(ns_diff(t, pcoll(p, lo - 1)->created_ns)) <
	    i64_abs(ns_diff(pcoll(p, lo)->created_ns, t)))
		lo--;
	return lo;
}

#define ALIGN_CANDS	64
#define ALIGN_NEAR	8	/* candidate offsets: this many collectives either side in time */
#define ALIGN_SAT	16	/* a prefix this long is as good as any longer one; time decides */
#define ALIGN_MAX_DT	30000000000LL	/* matched collectives further apart than this: no */

struct align {
	bool ok;
	int64_t d;		/* m's seq x is r's x + d */
	int prefix;		/* matching collectives from the start of the overlap */
	int64_t dt;		/* median creation-time difference over the first matches */
};

static bool align_better(const struct align *x, const struct align *y)
{
	int px = x->prefix < ALIGN_SAT ? x->prefix : ALIGN_SAT;
	int py = y->prefix < ALIGN_SAT ? y->prefix : ALIGN_SAT;

	if (!y->ok)
		return x->ok;
	if (!x->ok)
		return false;
	if (px != py)
		return px > py;
	if (i64_abs(x->dt) != i64_abs(y->dt))
		return i64_abs(x->dt) < i64_abs(y->dt);
	return x->prefix > y->prefix;
}

/* Aligns m's collective sequence to r's: the seq offset with the longest matching history
 * from where the two overlap (so a rank that skipped a collective later is not "fixed" by a
 * shift that matches its tail), ties to the one whose matches were created closest in time.
 * Comms whose seqs count from comm init on both sides can only be at offset 0. */
static struct align align_to(const struct pend *m, const struct pend *r)
{
	struct align best = { 0 };
	int64_t cands[ALIGN_CANDS], dts[ALIGN_SAT];
	int nc = 0, taken = 0;

	if (!m->nc || !r->nc)
		return best;
	if (!m->ci.seq_attach && !r->ci.seq_attach) {
		cands[nc++] = 0;
	} else {
		int64_t r0 = pcoll(r, 0)->created_ns, r1 = pcoll(r, r->nc - 1)->created_ns;

		for (int pass = 0; pass < 2 && !taken; pass++) {
			for (int i = 0; i < m->nc && taken < 4; i++) {
				const struct fr_entry *e = pcoll(m, i);
				int j;

				if (e->created_ns == FR_UNK)
					continue;
				/* first pass: m's collectives created while r was recording */
				if (!pass && (r0 == FR_UNK || r1 == FR_UNK || e->created_ns < r0 ||
					      e->created_ns > r1))
					continue;
				taken++;
				j = pend_near_time(r, e->created_ns);
				for (int k = j - ALIGN_NEAR; k <= j + ALIGN_NEAR; k++) {
					int64_t d;
					bool dup = false;

					if (k < 0 || k >= r->nc || !sig_match(e, pcoll(r, k)))
						continue;
					d = pcoll(r, k)->coll_seq - e->coll_seq;
					for (int c = 0; c < nc; c++)
						dup |= cands[c] == d;
					if (!dup && nc < ALIGN_CANDS)
						cands[nc++] = d;
				}
			}
		}
	}
	for (int c = 0; c < nc; c++) {
		struct align al = { .d = cands[c] };
		int nd = 0;

		for (int i = 0; i < m->nc; i++) {
			const struct fr_entry *e = pcoll(m, i), *f;
			int j = pend_find_seq(r, e->coll_seq + al.d);

			if (j < 0)
				continue;
			f = pcoll(r, j);
			if (!sig_match(e, f))
				break;
			al.prefix++;
			if (nd < ALIGN_SAT && e->created_ns != FR_UNK && f->created_ns != FR_UNK)
				dts[nd++] = ns_diff(e->created_ns, f->created_ns);
			if (al.prefix >= 4 * ALIGN_SAT)
				break;
		}
		if (!al.prefix)
			continue;
		if (nd) {
			qsort(dts, nd, sizeof(*dts), cmp_i64);
			al.dt = dts[nd / 2];
		}
		if (i64_abs(al.dt) > ALIGN_MAX_DT)
			continue;
		/* one matching collective of many is chance, not evidence */
		al.ok = al.prefix >= 2 || m->nc == 1 || r->nc == 1;
		if (align_better(&al, &best))
			best = al;
	}
	return best;
}

static bool cluster_has_proc(const struct fr_analysis *a, const struct cluster *c, int proc)
{
	for (int i = 0; i < c->pends.n; i++)
		if (a->pends[c->pends.v[i]].proc == proc)
			return true;
	return false;
}

/* hard reasons two pre-attach comms are not the same communicator */
static bool pend_compatible(const struct pend *x, const struct pend *y)
{
	if (x->ci.split_color != FR_UNK && y->ci.split_color != FR_UNK &&
	    x->ci.split_color != y->ci.split_color)
		return false;
	if (x->ci.nranks != FR_UNK && y->ci.nranks != FR_UNK && x->ci.nranks != y->ci.nranks)
		return false;
	if (x->ci.rank != FR_UNK && y->ci.rank != FR_UNK && x->ci.rank == y->ci.rank)
		return false;
	return true;
}

struct cslot {
	struct fr_entry rep[3];	/* a representative entry per distinct signature */
	int cnt[3], n, total;
};

/* the majority entry at a consensus slot, NULL when none has more than half */
static const struct fr_entry *cslot_major(const struct cslot *c)
{
	int best = -1;

	for (int i = 0; i < c->n; i++)
		if (best < 0 || c->cnt[i] > c->cnt[best])
			best = i;
	if (best < 0 || c->cnt[best] < 2 || c->cnt[best] * 2 <= c->total)
		return NULL;
	return &c->rep[best];
}

static int64_t rebase_coll(const struct pend *p, int64_t seq)
{
	int64_t x = seq + p->d;

	if (p->hole_len && x >= p->hole_seq)
		x += p->hole_len;
	return x;
}

/* A rank that skipped k collectives and went on has, from the skip on, the majority's
 * sequence shifted by k: find it (its history before stays as aligned) and record the hole. */
static int find_skips(struct fr_analysis *a, struct cluster *cl)
{
	int64_t lo = INT64_MAX, hi = INT64_MIN;
	struct cslot *cs;

	for (int i = 0; i < cl->pends.n; i++) {
		struct pend *p = &a->pends[cl->pends.v[i]];

		if (!p->nc)
			continue;
		if (pcoll(p, 0)->coll_seq + p->d < lo)
			lo = pcoll(p, 0)->coll_seq + p->d;
		if (pcoll(p, p->nc - 1)->coll_seq + p->d > hi)
			hi = pcoll(p, p->nc - 1)->coll_seq + p->d;
	}
	if (cl->pends.n < 3 || lo > hi || hi - lo >= (1 << 22))
		return 0;
	cs = calloc(hi - lo + 1, sizeof(*cs));
	if (!cs)
		return -ENOMEM;
	for (int i = 0; i < cl->pends.n; i++) {
		struct pend *p = &a->pends[cl->pends.v[i]];

		for (int k = 0; k < p->nc; k++) {
			const struct fr_entry *e = pcoll(p, k);
			struct cslot *c = &cs[e->coll_seq + p->d - lo];
			int g;

			for (g = 0; g < c->n; g++)
				if (sig_match(e, &c->rep[g]))
					break;
			if (g == c->n && c->n < 3)
				c->rep[c->n++] = *e;
			if (g < c->n)
				c->cnt[g]++;
			c->total++;
		}
	}
	for (int i = 0; i < cl->pends.n; i++) {
		struct pend *p = &a->pends[cl->pends.v[i]];
		int first = -1;

		for (int k = 0; k < p->nc && first < 0; k++) {
			const struct fr_entry *e = pcoll(p, k);
			const struct fr_entry *maj = cslot_major(&cs[e->coll_seq + p->d - lo]);

			if (maj && !sig_match(e, maj))
				first = k;
		}
		if (first < 0)
			continue;
		for (int64_t skip = 1; skip <= 4; skip++) {
			int cmp = 0;
			bool ok = true;

			for (int k = first; k < p->nc && ok; k++) {
				int64_t x = pcoll(p, k)->coll_seq + p->d + skip;
				const struct fr_entry *maj = x <= hi ? cslot_major(&cs[x - lo]) : NULL;

				ok = maj && sig_match(pcoll(p, k), maj);
				cmp++;
			}
			if (ok && cmp) {
				p->hole_seq = pcoll(p, first)->coll_seq + p->d;
				p->hole_len = skip;
				break;
			}
		}
	}
	free(cs);
	return 0;
}

/* p2p seqs count per rank, so they are aligned by time: the offset most of m's sends/recvs
 * have to the reference's op of the same kind created nearest (clock offset removed) */
static int64_t p2p_offset(const struct pend *m, const struct pend *r)
{
	int64_t cand[64];
	int n = 0, best = 0, best_n = 0;

	if (!m->ci.seq_attach && !r->ci.seq_attach)
		return 0;
	for (int i = m->n - 1; i >= 0 && n < 64; i--) {
		const struct fr_entry *e = &m->e[i], *near = NULL;
		int64_t t;

		if (!fr_op_is_p2p(e->op) || e->created_ns == FR_UNK || e->p2p_seq == FR_UNK)
			continue;
		t = ns_diff(e->created_ns, m->clock);
		for (int j = 0; j < r->n; j++) {
			const struct fr_entry *f = &r->e[j];

			if (f->op != e->op || f->created_ns == FR_UNK || f->p2p_seq == FR_UNK)
				continue;
			if (!near || i64_abs(ns_diff(f->created_ns, t)) <
				     i64_abs(ns_diff(near->created_ns, t)))
				near = f;
		}
		if (near)
			cand[n++] = near->p2p_seq - e->p2p_seq;
	}
	for (int i = 0; i < n; i++) {
		int c = 0;

		for (int j = 0; j < n; j++)
			c += cand[j] == cand[i];
		if (c > best_n || (c == best_n && i64_abs(cand[i]) < i64_abs(cand[best])))
			best = i, best_n = c;
	}
	return n ? cand[best] : 0;
}

static int cmp_pend_rank(const void *x, const void *y, void *arg)
{
	const struct fr_analysis *a = arg;
	const struct pend *p = &a->pends[*(const int *)x], *q = &a->pends[*(const int *)y];
	int64_t gp = a->procs[p->proc].global_rank, gq = a->procs[q->proc].global_rank;

	if ((gp == FR_UNK) != (gq == FR_UNK))
		return gp == FR_UNK ? 1 : -1;
	if (gp != gq)
		return gp < gq ? -1 : 1;
	return p->proc - q->proc;
}

static int cmp_str_ptr(const void *x, const void *y)
{
	return strcmp(*(char *const *)x, *(char *const *)y);
}

/* Comms created before attach: cluster the local comms of different dumps that are the same
 * communicator, rebase their seqs to a common origin, infer ranks, then fold them. */
static int unify_local(struct fr_analysis *a)
{
	int err = 0;

	for (int i = 0; i < a->nr_pends; i++) {
		struct pend *p = &a->pends[i];

		p->coll = malloc((p->n + 1) * sizeof(int));
		if (!p->coll)
			return -ENOMEM;
		for (int k = 0; k < p->n; k++) {
			const struct fr_entry *e = &p->e[k];

			if (fr_op_is_p2p(e->op) || e->coll_seq == FR_UNK || e->coll_seq < 0)
				continue;
			if (p->nc && e->coll_seq <= pcoll(p, p->nc - 1)->coll_seq)
				continue;	/* out of order: folding would drop it too */
			p->coll[p->nc++] = k;
			/* sizes that scale with nranks tell it when the recorder knew it */
			if (p->ci.nranks == FR_UNK && e->count > 0) {
				int64_t big = e->op == FR_OP_ALL_GATHER || e->op == FR_OP_GATHER ||
					      e->op == FR_OP_ALL_TO_ALL ? e->out_size :
					      e->op == FR_OP_REDUCE_SCATTER || e->op == FR_OP_SCATTER ?
					      e->in_size : FR_UNK;

				if (big != FR_UNK && big > 0 && big % e->count == 0 &&
				    big / e->count <= FR_MAX_NRANKS)
					p->ci.nranks = big / e->count;
			}
		}
	}
	/* greedy, in file order: each comm joins the cluster it aligns best with */
	for (int i = 0; i < a->nr_pends; i++) {
		struct pend *p = &a->pends[i];
		struct align best = { 0 }, al;
		int bc = -1;

		for (int c = 0; c < a->nr_clusters; c++) {
			struct cluster *cl = &a->clusters[c];
			bool compat = !cluster_has_proc(a, cl, p->proc);

			for (int k = 0; compat && k < cl->pends.n; k++)
				compat = pend_compatible(p, &a->pends[cl->pends.v[k]]);
			/* a comm of known size that has all its members is full */
			if (compat && p->ci.nranks != FR_UNK && cl->pends.n >= p->ci.nranks)
				compat = false;
			if (!compat)
				continue;
			al = align_to(p, &a->pends[cl->ref]);
			if (align_better(&al, &best)) {
				best = al;
				bc = c;
			}
		}
		if (bc < 0) {
			struct cluster *cl;

			if (grow((void **)&a->clusters, &a->cap_clusters, a->nr_clusters + 1,
				 sizeof(*a->clusters)))
				return -ENOMEM;
			bc = a->nr_clusters++;
			cl = &a->clusters[bc];
			memset(cl, 0, sizeof(*cl));
			cl->ref = i;
			cl->comm = -1;
			best.d = 0;
			best.dt = 0;
		}
		p->cluster = bc;
		p->d = best.d;		/* its seq x is the reference's x + d */
		p->clock = best.dt;
		if (ivec_push(&a->clusters[bc].pends, i))
			return -ENOMEM;
	}
	for (int c = 0; c < a->nr_clusters; c++) {
		struct cluster *cl = &a->clusters[c];
		int64_t lo = INT64_MAX, plo = INT64_MAX;
		uint64_t h = 0x6a09e667f3bcc909ULL;
		char **ids = malloc(cl->pends.n * sizeof(char *)), id[FR_ID_LEN];
		int *order = malloc(cl->pends.n * sizeof(int));
		int64_t nranks = FR_UNK;
		bool any_attach = false;
		int ci;

		if (!ids || !order) {
			free(ids);
			free(order);
			return -ENOMEM;
		}
		for (int k = 0; k < cl->pends.n; k++) {
			struct pend *p = &a->pends[cl->pends.v[k]];

			p->dp = cl->pends.v[k] == cl->ref ? 0 : p2p_offset(p, &a->pends[cl->ref]);
			ids[k] = p->ci.id;
			order[k] = cl->pends.v[k];
			any_attach |= p->ci.seq_attach;
			if (p->ci.nranks != FR_UNK && (nranks == FR_UNK || p->ci.nranks > nranks))
				nranks = p->ci.nranks;
		}
		if ((err = find_skips(a, cl))) {
			free(ids);
			free(order);
			return err;
		}
		/* a common origin: the reference's, moved so no rebased seq is below 1 */
		for (int k = 0; k < cl->pends.n; k++) {
			struct pend *p = &a->pends[cl->pends.v[k]];

			for (int e = 0; e < p->n; e++) {
				const struct fr_entry *x = &p->e[e];

				if (fr_op_is_p2p(x->op)) {
					if (x->p2p_seq != FR_UNK && x->p2p_seq + p->dp < plo)
						plo = x->p2p_seq + p->dp;
				}
			}
			if (p->nc && pcoll(p, 0)->coll_seq + p->d < lo)
				lo = pcoll(p, 0)->coll_seq + p->d;
		}
		for (int k = 0; k < cl->pends.n; k++) {
			struct pend *p = &a->pends[cl->pends.v[k]];

			if (lo != INT64_MAX && lo < 1) {
				p->d += 1 - lo;
				if (p->hole_len)
					p->hole_seq += 1 - lo;
			}
			if (plo != INT64_MAX && plo < 1)
				p->dp += 1 - plo;
		}
		/* a stable name from the members' local ids */
		qsort(ids, cl->pends.n, sizeof(char *), cmp_str_ptr);
		for (int k = 0; k < cl->pends.n; k++)
			h = mix64(h ^ str_hash(ids[k]));
		if (cl->pends.n == 1)
			snprintf(id, sizeof(id), "%s", ids[0]);
		else
			snprintf(id, sizeof(id), "inferred:%016" PRIx64, h);
		free(ids);
		ci = comm_get(a, id);
		if (ci < 0) {
			free(order);
			return ci;
		}
		cl->comm = ci;
		a->comms[ci].inferred = cl->pends.n > 1;
		a->comms[ci].nr_expected = (int)(nranks != FR_UNK ? nranks : a->world_size != FR_UNK ?
						 a->world_size : 0);
		/* PyTorch orders a process group's ranks by global rank */
		qsort_r(order, cl->pends.n, sizeof(int), cmp_pend_rank, a);
		for (int k = 0; k < cl->pends.n; k++) {
			struct pend *p = &a->pends[order[k]];
			struct fr_comm_info info = p->ci;
			struct member *m;
			int mi;

			if (cl->pends.n > 1 || info.nranks == FR_UNK) {
				if (info.rank == FR_UNK)
					info.rank = k;
				if (info.nranks == FR_UNK)
					info.nranks = nranks != FR_UNK ? nranks : cl->pends.n;
			}
			if (info.rank != FR_UNK && info.nranks != FR_UNK && info.rank >= info.nranks)
				info.rank = FR_UNK;
			if (info.last_enqueued != FR_UNK && info.last_enqueued > 0)
				info.last_enqueued = rebase_coll(p, info.last_enqueued);
			if (info.last_completed != FR_UNK && info.last_completed > 0)
				info.last_completed = rebase_coll(p, info.last_completed);
			mi = member_new(a, ci, p->proc, &info);
			if (mi < 0) {
				free(order);
				return mi;
			}
			m = &a->members[mi];
			m->partial = any_attach;
			if (p->hole_len) {
				m->hole_seq = p->hole_seq;
				m->hole_len = p->hole_len;
			}
			for (int e = 0; e < p->n; e++) {
				struct fr_entry x = p->e[e];

				if (fr_op_is_p2p(x.op)) {
					if (x.p2p_seq != FR_UNK)
						x.p2p_seq += p->dp;
					err = fold_p2p(a, mi, &x);
				} else if (x.coll_seq != FR_UNK && x.coll_seq >= 0) {
					x.coll_seq = rebase_coll(p, x.coll_seq);
					m = &a->members[mi];
					if (m->hole_len && m->hole_next_seq == FR_UNK &&
					    x.coll_seq >= m->hole_seq + m->hole_len) {
						m->hole_next_seq = x.coll_seq;
						m->hole_next_op = x.op;
						m->hole_next_state = x.state;
					}
					err = fold_collective(a, mi, &x);
				}
				if (err) {
					free(order);
					return err;
				}
			}
			/* the newest entry of the dump, when on this comm */
			struct proc *pr = &a->procs[p->proc];

			if (pr->last_comm == -(order[k] + 2)) {
				pr->last_comm = ci;
				if (fr_op_is_p2p(pr->last_op))
					pr->last_seq = pr->last_seq == FR_UNK ? FR_UNK : pr->last_seq + p->dp;
				else if (pr->last_seq != FR_UNK)
					pr->last_seq = rebase_coll(p, pr->last_seq);
			}
		}
		free(order);
	}
	return 0;
}

/* Split children with null rank/nranks: nranks is the number of dumps holding the comm, the
 * rank the order by (split_key, rank in the parent) as ncclCommSplit assigns it. */
static int64_t parent_rank(struct fr_analysis *a, const struct split_pend *sp)
{
	struct member *m = &a->members[sp->member];
	size_t s;

	if (!sp->parent[0] || !a->comm_hash_cap)
		return FR_UNK;
	s = str_hash(sp->parent) & (a->comm_hash_cap - 1);
	while (a->comm_hash[s]) {
		struct comm *c = &a->comms[a->comm_hash[s] - 1];

		if (!strcmp(c->id, sp->parent)) {
			for (int i = 0; i < c->members.n; i++)
				if (a->members[c->members.v[i]].proc == m->proc)
					return a->members[c->members.v[i]].rank;
			return FR_UNK;
		}
		s = (s + 1) & (a->comm_hash_cap - 1);
	}
	return FR_UNK;
}

struct split_sort {
	int64_t key, prank, grank;
	int member;
};

static int cmp_split_sort(const void *x, const void *y)
{
	const struct split_sort *p = x, *q = y;

	if (p->key != q->key)
		return p->key < q->key ? -1 : 1;
	if (p->prank != q->prank)
		return p->prank < q->prank ? -1 : 1;
	if (p->grank != q->grank)
		return p->grank < q->grank ? -1 : 1;
	return p->member - q->member;
}

static int resolve_splits(struct fr_analysis *a)
{
	/* parents first: a split of a split needs its parent's ranks; a few passes do */
	for (int pass = 0; pass < 4; pass++) {
		bool changed = false;

		for (int i = 0; i < a->nr_splits; i++) {
			struct member *m = &a->members[a->splits[i].member];
			struct comm *c = &a->comms[m->comm];
			struct split_sort *ss;
			int n = 0;
			bool ready = true;

			if (m->rank != FR_UNK)
				continue;
			ss = malloc(c->members.n * sizeof(*ss));
			if (!ss)
				return -ENOMEM;
			for (int k = 0; k < c->members.n; k++) {
				int mk = c->members.v[k];
				const struct split_pend *sp = a->members[mk].split >= 0 ?
							      &a->splits[a->members[mk].split] : NULL;
				ss[n].member = mk;
				ss[n].key = sp ? sp->key : FR_UNK;
				ss[n].prank = sp ? parent_rank(a, sp) : FR_UNK;
				ss[n].grank = a->procs[a->members[mk].proc].global_rank;
				if (ss[n].prank == FR_UNK && sp && sp->parent[0] && pass < 3)
					ready = false;	/* its parent's rank may come in a later pass */
				n++;
			}
			if (ready) {
				qsort(ss, n, sizeof(*ss), cmp_split_sort);
				if (c->nranks == FR_UNK)
					c->nranks = n;
				for (int k = 0; k < n; k++)
					if (a->members[ss[k].member].rank == FR_UNK) {
						a->members[ss[k].member].rank = k;
						a->members[ss[k].member].placed = true;
					}
				changed = true;
			}
			free(ss);
		}
		if (!changed)
			break;
	}
	/* now that the ranks are known, the p2p entries that waited */
	for (int i = 0; i < a->nr_splits; i++) {
		int mi = a->splits[i].member;

		for (int k = 0; k < a->members[mi].nr_dents; k++) {
			int err = fold_p2p(a, mi, &a->members[mi].dents[k]);

			if (err)
				return err;
		}
		free(a->members[mi].dents);
		a->members[mi].dents = NULL;
		a->members[mi].nr_dents = 0;
	}
	return 0;
}

static void set_medium(struct verdict *v, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void set_medium(struct verdict *v, const char *fmt, ...)
{
	va_list ap;
	char *s;

	if (v->medium)
		return;
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	v->medium = true;
	v->medium_reason = s;
}

/* Verdicts on comms matched across dumps by their collective sequences rest on that match. */
static void mark_inferred(struct fr_analysis *a)
{
	for (int i = 0; i < a->nr_verdicts; i++) {
		struct verdict *v = &a->verdicts[i];
		struct comm *c;

		if (v->comm < 0 || !a->comms[v->comm].inferred)
			continue;
		c = &a->comms[v->comm];
		if (c->nr_expected > c->members.n)
			set_medium(v, "communicator created before attach: identity and seq alignment "
				   "inferred from the collective sequence (%d dumps matched; %d expected)",
				   c->members.n, c->nr_expected);
		else
			set_medium(v, "communicator created before attach: identity and seq alignment "
				   "inferred from the collective sequence (%d dumps matched)",
				   c->members.n);
	}
}

static int cmp_verdict(const void *x, const void *y)
{
	const struct verdict *p = x, *q = y;

	if (p->rule != q->rule)
		return p->rule - q->rule;
	return p->order - q->order;
}

int fr_analysis__finish(struct fr_analysis *a)
{
	bool any_running = false;
	int err;

	if (a->finished)
		return 0;
	a->finished = true;
	a->comm_order = malloc((a->nr_comms + 1) * sizeof(int));
	if (!a->comm_order)
		return -ENOMEM;
	for (int i = 0; i < a->nr_comms; i++)
		a->comm_order[i] = i;
	qsort_r(a->comm_order, a->nr_comms, sizeof(int), cmp_comm_id, a);
	if ((err = resolve_splits(a)) || (err = unify_local(a)))
		return err;
	/* inferred comms were added: order again */
	free(a->comm_order);
	a->comm_order = malloc((a->nr_comms + 1) * sizeof(int));
	if (!a->comm_order)
		return -ENOMEM;
	for (int i = 0; i < a->nr_comms; i++)
		a->comm_order[i] = i;
	qsort_r(a->comm_order, a->nr_comms, sizeof(int), cmp_comm_id, a);
	for (int i = 0; i < a->nr_aggs; i++)
		if (ivec_push(&a->comms[a->aggs[i].comm].aggs, i))
			return -ENOMEM;
	for (int i = 0; i < a->nr_comms; i++)
		if (a->comms[i].aggs.n > 1)
			qsort_r(a->comms[i].aggs.v, a->comms[i].aggs.n, sizeof(int), cmp_agg_seq, a);
	for (int pi = 0; pi < a->nr_procs; pi++)
		if (a->procs[pi].state == FR_PROC_RUNNING || a->procs[pi].state == FR_PROC_UNKNOWN)
			any_running = true;
	for (int pi = 0; pi < a->nr_procs; pi++)
		a->procs[pi].dead = proc_is_dead(&a->procs[pi], any_running);
	if ((err = place_members(a)))
		return err;

	if ((err = rule_missing_rank(a)) || (err = rule_dead_rank(a)) ||
	    (err = rule_missing_dump(a)) || (err = rule_async_error(a)) ||
	    (err = rule_signatures(a)) || (err = rule_p2p(a)) || (err = rule_stuck(a)) ||
	    (err = rule_late(a)) || (err = rule_state(a)) || (err = rule_corrupt(a)))
		return err;
	mark_inferred(a);
	if (a->nr_verdicts > 1)
		qsort(a->verdicts, a->nr_verdicts, sizeof(*a->verdicts), cmp_verdict);
	return 0;
}

int fr_analysis__nr_verdicts(const struct fr_analysis *a)
{
	return a->nr_verdicts;
}

/* ---------------------------------------------------------------- output */

static void append_caveats(const struct fr_analysis *a, const struct verdict *v, FILE *f)
{
	if (v->also_seqs)
		fprintf(f, "\nalso at %" PRId64 " later seq%s on this comm (up to seq %" PRId64 ")",
			v->also_seqs, v->also_seqs == 1 ? "" : "s", v->also_last);
}

int fr_analysis__print_json(const struct fr_analysis *a, FILE *out)
{
	cJSON *root = cJSON_CreateObject(), *arr;
	char *s;

	if (!root)
		return -ENOMEM;
	cJSON_AddNumberToObject(root, "version", 1);
	cJSON_AddNumberToObject(root, "ranks", a->nr_procs);
	cJSON_AddNumberToObject(root, "comms", a->nr_comms);
	cJSON_AddNumberToObject(root, "dumps", a->nr_procs + a->nr_corrupt);
	arr = cJSON_AddArrayToObject(root, "verdicts");
	for (int i = 0; arr && i < a->nr_verdicts; i++) {
		const struct verdict *v = &a->verdicts[i];
		cJSON *o = cJSON_CreateObject(), *ranks, *cranks;
		struct text t;
		FILE *f;

		if (!o)
			break;
		cJSON_AddItemToArray(arr, o);
		cJSON_AddStringToObject(o, "rule", rule_names[v->rule]);
		if (v->comm >= 0)
			cJSON_AddStringToObject(o, "comm", a->comms[v->comm].id);
		else
			cJSON_AddNullToObject(o, "comm");
		if (v->seq != FR_UNK)
			cJSON_AddNumberToObject(o, "seq", (double)v->seq);
		else
			cJSON_AddNullToObject(o, "seq");
		ranks = cJSON_AddArrayToObject(o, "ranks");
		cranks = cJSON_AddArrayToObject(o, "comm_ranks");
		for (int k = 0; k < v->nr_who; k++) {
			cJSON_AddItemToArray(ranks, cJSON_CreateNumber((double)v->who[k][0]));
			if (v->who[k][1] >= 0)
				cJSON_AddItemToArray(cranks, cJSON_CreateNumber((double)v->who[k][1]));
		}
		if (v->op[0])
			cJSON_AddStringToObject(o, "op", v->op);
		else
			cJSON_AddNullToObject(o, "op");
		cJSON_AddStringToObject(o, "confidence", v->low ? "low" : v->medium ? "medium" :
					"high");
		if (v->low)
			cJSON_AddStringToObject(o, "confidence_reason",
						v->low_reason ? v->low_reason : "");
		else if (v->medium)
			cJSON_AddStringToObject(o, "confidence_reason",
						v->medium_reason ? v->medium_reason : "");
		if ((f = text_open(&t))) {
			fprintf(f, "%s", v->headline ? v->headline : "");
			if (v->detail && v->detail[0])
				fprintf(f, ". %s", v->detail);
			append_caveats(a, v, f);
			text_close(&t);
			/* one line: newlines become "; " */
			char *line = malloc(t.len * 2 + 1), *q = line;

			for (char *p = t.buf; line && p && *p; p++) {
				if (*p == '\n') {
					*q++ = ';';
					*q++ = ' ';
				} else {
					*q++ = *p;
				}
			}
			if (line)
				*q = 0;
			cJSON_AddStringToObject(o, "detail", line ? line : "");
			free(line);
			free(t.buf);
		}
	}
	s = cJSON_Print(root);
	cJSON_Delete(root);
	if (!s)
		return -ENOMEM;
	fprintf(out, "%s\n", s);
	free(s);
	return 0;
}

int fr_analysis__print_human(const struct fr_analysis *a, FILE *out)
{
	if (!a->nr_verdicts) {
		int64_t common = FR_UNK;
		bool same = true;
		int shown = 0;

		fprintf(out, "no problem found: %d rank%s, %d comm%s, ", a->nr_procs,
			a->nr_procs == 1 ? "" : "s", a->nr_comms, a->nr_comms == 1 ? "" : "s");
		for (int ci = 0; ci < a->nr_comms; ci++) {
			const struct comm *c = &a->comms[a->comm_order[ci]];
			int64_t last = c->aggs.n ? a->aggs[c->aggs.v[c->aggs.n - 1]].seq : 0;

			if (ci && last != common)
				same = false;
			common = last;
		}
		if (!a->nr_comms) {
			fprintf(out, "no collectives recorded\n");
		} else if (same) {
			fprintf(out, "all completed seq %" PRId64 "\n", common);
		} else {
			fprintf(out, "all completed the same seqs (last seq per comm:");
			for (int ci = 0; ci < a->nr_comms && shown < 6; ci++, shown++) {
				const struct comm *c = &a->comms[a->comm_order[ci]];

				fprintf(out, " %s %" PRId64, short_id(c->id),
					c->aggs.n ? a->aggs[c->aggs.v[c->aggs.n - 1]].seq : 0);
			}
			fprintf(out, "%s)\n", a->nr_comms > shown ? " ..." : "");
		}
		return 0;
	}
	fprintf(out, "%d problem%s found (%d ranks, %d comm%s, %d dumps), most causal first:\n\n",
		a->nr_verdicts, a->nr_verdicts == 1 ? "" : "s", a->nr_procs, a->nr_comms,
		a->nr_comms == 1 ? "" : "s", a->nr_procs + a->nr_corrupt);
	for (int i = 0; i < a->nr_verdicts; i++) {
		const struct verdict *v = &a->verdicts[i];
		const char *d = v->detail ? v->detail : "";

		fprintf(out, "[%s] %s\n", rule_names[v->rule], v->headline ? v->headline : "");
		while (*d) {
			size_t len = strcspn(d, "\n");

			fprintf(out, "    %.*s\n", (int)len, d);
			d += len + (d[len] == '\n');
		}
		if (v->also_seqs)
			fprintf(out, "    also at %" PRId64 " later seq%s on this comm (up to seq %" PRId64
				")\n", v->also_seqs, v->also_seqs == 1 ? "" : "s", v->also_last);
		if (v->low)
			fprintf(out, "    confidence: low (%s)\n", v->low_reason ? v->low_reason : "");
		else if (v->medium)
			fprintf(out, "    confidence: medium (%s)\n",
				v->medium_reason ? v->medium_reason : "");
		fprintf(out, "\n");
	}
	return 0;
}

void fr_analysis__free(struct fr_analysis *a)
{
	if (!a)
		return;
	for (int i = 0; i < a->nr_procs; i++) {
		free(a->procs[i].path);
		free(a->procs[i].missed.v);
	}
	for (int i = 0; i < a->nr_comms; i++) {
		free(a->comms[i].placed);
		free(a->comms[i].members.v);
		free(a->comms[i].aggs.v);
	}
	for (int i = 0; i < a->nr_verdicts; i++) {
		free(a->verdicts[i].who);
		free(a->verdicts[i].low_reason);
		free(a->verdicts[i].medium_reason);
		free(a->verdicts[i].headline);
		free(a->verdicts[i].detail);
	}
	for (int i = 0; i < a->nr_corrupt; i++) {
		free(a->corrupt[i].path);
		free(a->corrupt[i].why);
	}
	free(a->procs);
	free(a->comms);
	free(a->comm_hash);
	for (int i = 0; i < a->nr_members; i++)
		free(a->members[i].dents);
	free(a->members);
	free(a->aggs);
	free(a->agg_hash);
	free(a->extras);
	free(a->chans);
	free(a->chan_hash);
	free(a->local_member);
	free(a->corrupt);
	for (int i = 0; i < a->nr_pends; i++) {
		free(a->pends[i].e);
		free(a->pends[i].coll);
	}
	free(a->pends);
	for (int i = 0; i < a->nr_clusters; i++)
		free(a->clusters[i].pends.v);
	free(a->clusters);
	free(a->splits);
	free(a->verdicts);
	free(a->comm_order);
	free(a);
}
