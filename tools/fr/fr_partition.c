// SPDX-License-Identifier: MIT
/* fr_partition: the dumps' TCP connections ("net", docs/fr-schema.md "Network") and the rule
 * partitioned_host (docs/fr-verdicts.md).
 *
 * When a host's link goes down every rank, on both sides of the cut, has entered the
 * collective and none completes: the rings and the stacks cannot tell the sides apart. The
 * sockets can. A connection is stuck when one of its ends holds data it keeps trying to send
 * (retransmitted: the head segment timed out at least once; or never sent: a link that is
 * down refuses it, and the window-probe timer backs off) and has heard no ack for longer than
 * NET_SILENT_MS; data in flight alone is no evidence (a busy healthy link always has some). The host named is the one every stuck connection touches; when two hosts do (every
 * stuck connection joins them), the one whose peers keep connections to third hosts that are
 * not stuck is the one still on the network. Nothing here depends on the job's topology (our
 * simulated NCCL is a star through the root's process; NCCL's rings and trees give each rank
 * connections to several hosts): only "which hosts does each stuck connection join".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fr_analyze_int.h"
#include "growbuf.h"

/* no ack for this long with data retransmitted: not a moment's loss on a busy link (a
 * healthy peer acks within an RTT; the first RTO is 200 ms at least) */
#define NET_SILENT_MS	1000
/* /proc/net/tcp gives no ages: consecutive unanswered retransmits of the head (or window
 * probes) stand for them (200 + 400 + 800 ms at the least without an ack) */
#define NET_PROC_RETRANS 3

static uint64_t addr_hash(const uint8_t a[16])
{
	uint64_t h = 1469598103934665603ULL;

	for (int i = 0; i < 16; i++)
		h = (h ^ a[i]) * 1099511628211ULL;
	return h ? h : 1;
}

static bool loopback(const uint8_t a[16])
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	static const uint8_t v6lo[16] = { [15] = 1 };
	static const uint8_t any[16] = { 0 };

	return (!memcmp(a, mapped, 12) && (a[12] == 127 || !memcmp(a + 12, any, 4))) ||
	       !memcmp(a, v6lo, 16) || !memcmp(a, any, 16);
}

static int haddr_add(struct fr_analysis *a, const uint8_t addr[16], int pi)
{
	uint64_t h = addr_hash(addr), v;
	struct haddr *x;

	if (loopback(addr))
		return 0;
	if (u64map__get(&a->haddr_index, h, &v)) {
		x = &a->haddrs[v - 1];
		/* held by another host's dump (or a hash collision: named by neither) */
		if (memcmp(x->a, addr, 16) ||
		    strcmp(a->procs[x->proc].host, a->procs[pi].host))
			x->conflict = true;
		return 0;
	}
	if (ARRAY_RESERVE(a->haddrs, a->cap_haddrs, a->nr_haddrs + 1, 16))
		return -ENOMEM;
	x = &a->haddrs[a->nr_haddrs++];
	memcpy(x->a, addr, 16);
	x->proc = pi;
	x->conflict = false;
	x->down = false;
	return u64map__set(&a->haddr_index, h, a->nr_haddrs);
}

static struct haddr *haddr_find(const struct fr_analysis *a, const uint8_t addr[16])
{
	uint64_t v;

	if (!u64map__get(&a->haddr_index, addr_hash(addr), &v) || memcmp(a->haddrs[v - 1].a, addr, 16))
		return NULL;
	return &a->haddrs[v - 1];
}

static int64_t at_least(int64_t a, int64_t b)
{
	return a == FR_UNK ? b : b == FR_UNK ? a : a > b ? a : b;
}

/* Whether one side's view of a connection shows it stuck (see the top): data queued, sent
 * and retransmitted (the retransmit timer) or not even sent (a link down refuses it: the
 * zero-window probe timer backs off with every failed try), and no ack for NET_SILENT_MS. A
 * peer that is alive but reads nothing also leaves data queued under the probe timer: it
 * acks each probe, so its last ack is recent. */
static bool view_stuck(const struct fr_net_sock *s, int source)
{
	int64_t queued = at_least(s->unacked, s->tx_queue);
	int64_t tries = at_least(at_least(s->retransmits, s->probes), s->backoff);

	if (!s->established || queued == FR_UNK || queued <= 0 || tries == FR_UNK || tries < 1)
		return false;
	if (s->last_ack_ms != FR_UNK)
		return s->last_ack_ms >= NET_SILENT_MS;
	/* /proc/net/tcp: consecutive unanswered tries of the timer running stand for the age */
	return source == FR_NET_PROC &&
	       ((s->timer == FR_TIMER_RETRANSMIT && s->retransmits != FR_UNK &&
		 s->retransmits >= NET_PROC_RETRANS) ||
		(s->timer == FR_TIMER_PROBE && s->probes != FR_UNK && s->probes >= NET_PROC_RETRANS));
}

int fold_net(struct fr_analysis *a, int pi, const struct fr_dump *d)
{
	struct proc *p = &a->procs[pi];
	int err;

	p->net_source = d->net_source;
	snprintf(p->net_error, sizeof(p->net_error), "%s", d->net_error);
	if (d->net_source != FR_NET_INET_DIAG && d->net_source != FR_NET_PROC)
		return 0;
	for (int i = 0; i < d->nr_host_addrs; i++)
		if ((err = haddr_add(a, d->host_addrs[i], pi)))
			return err;
	for (int i = 0; i < d->nr_down_addrs; i++) {
		struct haddr *x;

		if ((err = haddr_add(a, d->down_addrs[i], pi)))
			return err;
		if ((x = haddr_find(a, d->down_addrs[i])) && !strcmp(a->procs[x->proc].host, p->host))
			x->down = true;
	}
	for (size_t i = 0; i < d->nr_socks; i++) {
		const struct fr_net_sock *s = &d->socks[i];
		struct nsock *n;

		if ((err = haddr_add(a, s->local, pi)))
			return err;
		if (!s->established || loopback(s->remote))
			continue;
		if (ARRAY_RESERVE(a->nsocks, a->cap_nsocks, a->nr_nsocks + 1, 64))
			return -ENOMEM;
		n = &a->nsocks[a->nr_nsocks++];
		n->proc = pi;
		memcpy(n->local, s->local, 16);
		memcpy(n->remote, s->remote, 16);
		n->lport = s->lport;
		n->rport = s->rport;
		n->stuck = view_stuck(s, d->net_source);
		n->retrans = at_least(at_least(s->retransmits, s->probes), s->backoff);
		n->last_ack_ms = s->last_ack_ms;
		n->unacked = at_least(s->unacked, s->tx_queue);
	}
	return 0;
}

void net_free(struct fr_analysis *a)
{
	free(a->nsocks);
	free(a->haddrs);
	u64map__clear(&a->haddr_index);
	free(a->owners);
}

/* ------------------------------------------------------------------ the rule */

/* a connection: both views of it (one per end whose dump holds it) folded together */
struct pconn {
	int owner[2];
	int view;		/* its first view (a->nsocks) */
	bool stuck;
};

struct pstate {
	struct u64map owner_index;	/* name hash -> owner + 1 */
	struct u64map conn_index;	/* 4-tuple hash -> conn + 1 */
	struct pconn *conns;
	int nr_conns, cap_conns;
	int *view_conn;			/* nsock -> conn, -1 intra-host */
};

static int owner_get(struct fr_analysis *a, struct pstate *ps, const char *name, bool addr_only)
{
	uint64_t h = str_hash(name) ^ addr_only, v;
	struct powner *o;

	h = h ? h : 1;
	for (bool hit = u64map__get(&ps->owner_index, h, &v); hit; hit = false)
		if (!strcmp(a->owners[v - 1].name, name) && a->owners[v - 1].addr_only == addr_only)
			return (int)v - 1;
	if (ARRAY_RESERVE(a->owners, a->cap_owners, a->nr_owners + 1, 16))
		return -ENOMEM;
	o = &a->owners[a->nr_owners++];
	snprintf(o->name, sizeof(o->name), "%s", name);
	o->addr_only = addr_only;
	o->on_stuck = false;
	if (u64map__set(&ps->owner_index, h, a->nr_owners))
		return -ENOMEM;
	return a->nr_owners - 1;
}

/* the host whose dumps hold addr, or addr itself */
static int owner_of(struct fr_analysis *a, struct pstate *ps, const uint8_t addr[16])
{
	uint64_t v;
	char buf[64];

	if (u64map__get(&a->haddr_index, addr_hash(addr), &v) && !a->haddrs[v - 1].conflict &&
	    !memcmp(a->haddrs[v - 1].a, addr, 16))
		return owner_get(a, ps, a->procs[a->haddrs[v - 1].proc].host, false);
	fr_net_addr_str(addr, buf, sizeof(buf));
	return owner_get(a, ps, buf, true);
}

static uint64_t conn_hash(const struct nsock *n)
{
	uint64_t x = addr_hash(n->local) ^ ((uint64_t)n->lport << 17);
	uint64_t y = addr_hash(n->remote) ^ ((uint64_t)n->rport << 17);

	/* the same from either end */
	return (x < y ? x * 31 + y : y * 31 + x) | 1;
}

static bool same_conn(const struct nsock *p, const struct nsock *q)
{
	return (!memcmp(p->local, q->local, 16) && p->lport == q->lport &&
		!memcmp(p->remote, q->remote, 16) && p->rport == q->rport) ||
	       (!memcmp(p->local, q->remote, 16) && p->lport == q->rport &&
		!memcmp(p->remote, q->local, 16) && p->rport == q->lport);
}

/* every view into a connection between two owners (views inside one host are left out) */
static int build_conns(struct fr_analysis *a, struct pstate *ps)
{
	int *first = NULL;	/* conn -> its first view */
	int cap_first = 0;

	if (!(ps->view_conn = malloc((a->nr_nsocks + 1) * sizeof(int))))
		return -ENOMEM;
	for (int i = 0; i < a->nr_nsocks; i++) {
		const struct nsock *n = &a->nsocks[i];
		int lo = owner_get(a, ps, a->procs[n->proc].host, false), ro, ci = -1;
		uint64_t h = conn_hash(n), v;

		ro = lo < 0 ? lo : owner_of(a, ps, n->remote);
		if (ro < 0) {
			free(first);
			return ro;
		}
		ps->view_conn[i] = -1;
		if (lo == ro)
			continue;
		if (u64map__get(&ps->conn_index, h, &v) && same_conn(n, &a->nsocks[first[v - 1]]))
			ci = (int)v - 1;
		if (ci < 0) {
			if (ARRAY_RESERVE(ps->conns, ps->cap_conns, ps->nr_conns + 1, 32) ||
			    ARRAY_RESERVE(first, cap_first, ps->nr_conns + 1, 32)) {
				free(first);
				return -ENOMEM;
			}
			ci = ps->nr_conns++;
			ps->conns[ci] = (struct pconn){ .owner = { lo, ro }, .view = i };
			first[ci] = i;
			/* a colliding hash keeps the older connection indexed: this one is still
			 * counted, only not joined with its other end */
			if (!u64map__get(&ps->conn_index, h, &v) &&
			    u64map__set(&ps->conn_index, h, ci + 1)) {
				free(first);
				return -ENOMEM;
			}
		}
		ps->view_conn[i] = ci;
		ps->conns[ci].stuck |= n->stuck;
	}
	free(first);
	return 0;
}

static bool touches(const struct pconn *c, int o)
{
	return c->owner[0] == o || c->owner[1] == o;
}

/* a connection owner o keeps to a host outside {x, y} that is not stuck: o is on the network */
static bool alive(const struct pstate *ps, int o, int x, int y)
{
	for (int i = 0; i < ps->nr_conns; i++) {
		const struct pconn *c = &ps->conns[i];
		int other = c->owner[0] == o ? c->owner[1] : c->owner[0];

		if (!c->stuck && touches(c, o) && other != x && other != y)
			return true;
	}
	return false;
}

static int count_alive(const struct pstate *ps, int o, int x, int y, int *peer)
{
	int n = 0;

	for (int i = 0; i < ps->nr_conns; i++) {
		const struct pconn *c = &ps->conns[i];
		int other = c->owner[0] == o ? c->owner[1] : c->owner[0];

		if (!c->stuck && touches(c, o) && other != x && other != y) {
			if (!n)
				*peer = other;
			n++;
		}
	}
	return n;
}

/* The comm every member of which sits in a collective it has not completed (the partition
 * holds them there: all in one, or, cut while results were on their way, those it did not
 * reach still in the one before), the newest such seq (the one the others wait in) in *seq;
 * -1 when none. */
static int hung_comm(const struct fr_analysis *a, int64_t *seq)
{
	for (int k = 0; k < a->nr_comms; k++) {
		const struct comm *c = &a->comms[a->comm_order[k]];
		int64_t s = FR_UNK;
		int n = 0;
		bool all = true;

		for (int i = 0; i < c->members.n && all; i++) {
			const struct member *m = &a->members[c->members.v[i]];

			if (!m->placed || m->init_failed)
				continue;
			if (a->procs[m->proc].dead || m->st_seq == FR_UNK)
				all = false;
			else if (s == FR_UNK || m->st_seq > s)
				s = m->st_seq;
			n++;
		}
		if (all && n >= 2 && s != FR_UNK) {
			*seq = s;
			return a->comm_order[k];
		}
	}
	return -1;
}

static const char *op_at(const struct fr_analysis *a, int comm, int64_t seq)
{
	int ai = agg_find(a, comm, seq);

	return ai >= 0 ? fr_op_name(a->aggs[ai].sig0.op) : NULL;
}

/* how long a view's process had waited in the collective at its dump (its own clock) */
static int64_t view_wait(const struct fr_analysis *a, int comm, int pi)
{
	const struct comm *c = &a->comms[comm];

	for (int i = 0; i < c->members.n; i++) {
		const struct member *m = &a->members[c->members.v[i]];
		const struct proc *p = &a->procs[pi];

		if (m->proc == pi && m->st_created != FR_UNK && p->dump_time_ns != FR_UNK)
			return ns_diff(p->dump_time_ns, m->st_created);
	}
	return FR_UNK;
}

/* the evidence of the stuck views, and what keeps the verdict below high */
static void evidence(struct fr_analysis *a, struct pstate *ps, struct verdict *v, int comm)
{
	bool no_ages = false, after_wait = false;
	const struct comm *c = &a->comms[comm];

	v->ev.part.silent_min = v->ev.part.silent_max = v->ev.part.retrans_max = FR_UNK;
	v->ev.part.example = -1;
	v->ev.part.unknown_proc = -1;
	for (int i = 0; i < a->nr_nsocks; i++) {
		const struct nsock *n = &a->nsocks[i];
		int64_t w;

		if (!n->stuck || ps->view_conn[i] < 0)
			continue;
		v->ev.part.nr_views++;
		if (v->ev.part.example < 0)
			v->ev.part.example = i;
		if (v->ev.part.retrans_max == FR_UNK || n->retrans > v->ev.part.retrans_max)
			v->ev.part.retrans_max = n->retrans;
		if (n->last_ack_ms == FR_UNK) {
			no_ages = true;
			continue;
		}
		if (v->ev.part.silent_min == FR_UNK || n->last_ack_ms < v->ev.part.silent_min)
			v->ev.part.silent_min = n->last_ack_ms;
		if (v->ev.part.silent_max == FR_UNK || n->last_ack_ms > v->ev.part.silent_max)
			v->ev.part.silent_max = n->last_ack_ms;
		/* silent since before its process began to wait (within --skew-ms): the link
		 * was down when the collective began, so the collective could never complete */
		w = view_wait(a, comm, n->proc);
		if (w != FR_UNK && n->last_ack_ms * 1000000 + a->opts.skew_ns < w)
			after_wait = true;
	}
	for (int i = 0; i < ps->nr_conns; i++)
		v->ev.part.nr_stuck += ps->conns[i].stuck;
	for (int i = 0; i < c->members.n; i++) {
		const struct member *m = &a->members[c->members.v[i]];
		int src = a->procs[m->proc].net_source;

		if (m->placed && src != FR_NET_INET_DIAG && src != FR_NET_PROC) {
			if (v->ev.part.unknown_proc < 0)
				v->ev.part.unknown_proc = m->proc;
			v->ev.part.nr_unknown++;
		}
	}
	if (v->ev.part.kind == PART_LINKS)
		v->ev.part.why = PART_WHY_MANY;
	else if (v->ev.part.kind == PART_LINK)
		v->ev.part.why = PART_WHY_TWO_SIDES;
	else if (a->owners[v->ev.part.owner[0]].addr_only)
		v->ev.part.why = PART_WHY_NO_DUMP;
	else if (no_ages)
		v->ev.part.why = PART_WHY_NO_AGES;
	else if (after_wait)
		v->ev.part.why = PART_WHY_AFTER_WAIT;
	else if (v->ev.part.nr_unknown)
		v->ev.part.why = PART_WHY_UNKNOWN;
	else if (v->ev.part.how == PART_BY_PEERS)
		v->ev.part.why = PART_WHY_PEERS;
	else if (v->ev.part.how == PART_BY_ONLY_ALIVE)
		v->ev.part.why = PART_WHY_ALIVE;
	if (v->ev.part.why == PART_WHY_MANY)
		v->low = LOW_NET;
	else if (v->ev.part.why)
		v->medium = true;
}

/* the owner of an end of stuck connection c whose interface there is down (no carrier, or
 * set down), -1 none; -2 both ends */
static int down_end(struct fr_analysis *a, struct pstate *ps, const struct pconn *c)
{
	const struct nsock *n = &a->nsocks[c->view];
	const struct haddr *l = haddr_find(a, n->local), *r = haddr_find(a, n->remote);
	int lo = l && l->down && !l->conflict ? owner_get(a, ps, a->procs[l->proc].host, false) : -1;
	int ro = r && r->down && !r->conflict ? owner_get(a, ps, a->procs[r->proc].host, false) : -1;

	if (lo >= 0 && ro >= 0 && lo != ro)
		return -2;
	return lo >= 0 ? lo : ro;
}

/* A host whose own interface at an end of a stuck connection is down, and which every stuck
 * connection touches: its link is what failed (a pulled cable, a dead switch port, a link
 * set down). -1 when no such one host. */
static int link_down_host(struct fr_analysis *a, struct pstate *ps)
{
	int d = -1;

	for (int i = 0; i < ps->nr_conns; i++) {
		int e;

		if (!ps->conns[i].stuck || (e = down_end(a, ps, &ps->conns[i])) == -1)
			continue;
		if (e < 0 || (d >= 0 && e != d))
			return -1;
		d = e;
	}
	for (int i = 0; d >= 0 && i < ps->nr_conns; i++)
		if (ps->conns[i].stuck && !touches(&ps->conns[i], d))
			return -1;
	return d;
}

/* which host (or link) every stuck connection touches: PART_* in *kind, owners in out[2],
 * PART_BY_* in *how; 0 when no connection is stuck */
static int name_cut(struct fr_analysis *a, struct pstate *ps, int out[2], int *how)
{
	int cand[2] = { -1, -1 }, nc = -1, d;

	for (int i = 0; i < ps->nr_conns; i++) {
		const struct pconn *c = &ps->conns[i];

		if (!c->stuck)
			continue;
		a->owners[c->owner[0]].on_stuck = a->owners[c->owner[1]].on_stuck = true;
		if (nc < 0) {
			cand[0] = c->owner[0];
			cand[1] = c->owner[1];
			nc = 2;
			continue;
		}
		for (int k = 0; k < 2; k++)
			if (cand[k] >= 0 && !touches(c, cand[k]))
				cand[k] = -1;
	}
	if (nc < 0)
		return 0;
	if ((d = link_down_host(a, ps)) >= 0) {
		out[0] = d;
		out[1] = cand[0] == d ? cand[1] : cand[0];	/* -1 unless two were left */
		*how = PART_BY_LINK_DOWN;
		return PART_HOST;
	}
	/* interfaces down at hosts that no one of them explains: several links failed */
	for (int i = 0; i < ps->nr_conns; i++)
		if (ps->conns[i].stuck && down_end(a, ps, &ps->conns[i]) != -1)
			return PART_LINKS;
	nc = (cand[0] >= 0) + (cand[1] >= 0);
	if (!nc)
		return PART_LINKS;
	if (nc == 1) {
		out[0] = cand[0] >= 0 ? cand[0] : cand[1];
		*how = alive(ps, out[0], out[0], out[0]) ? PART_BY_ONLY_ALIVE : PART_BY_ONLY;
		return PART_HOST;
	}
	/* every stuck connection joins the same two: the one still on the network keeps
	 * connections to third hosts that are not stuck */
	{
		bool a0 = alive(ps, cand[0], cand[0], cand[1]), a1 = alive(ps, cand[1], cand[0], cand[1]);

		if (a0 != a1) {
			out[0] = a0 ? cand[1] : cand[0];
			out[1] = a0 ? cand[0] : cand[1];
			*how = PART_BY_PEERS;
			return PART_HOST;
		}
	}
	/* two hosts only, or both keep others: the link, both ends (by name, not by index) */
	if (strcmp(a->owners[cand[0]].name, a->owners[cand[1]].name) < 0) {
		out[0] = cand[0];
		out[1] = cand[1];
	} else {
		out[0] = cand[1];
		out[1] = cand[0];
	}
	return PART_LINK;
}

static void pstate_free(struct pstate *ps)
{
	u64map__clear(&ps->owner_index);
	u64map__clear(&ps->conn_index);
	free(ps->conns);
	free(ps->view_conn);
}

/* a proc of a host at an end of a stuck connection (name_cut set on_stuck) */
static bool on_stuck_host(const struct fr_analysis *a, int pi)
{
	for (int i = 0; i < a->nr_owners; i++)
		if (a->owners[i].on_stuck && !a->owners[i].addr_only &&
		    !strcmp(a->owners[i].name, a->procs[pi].host))
			return true;
	return false;
}

void partition_mark(const struct fr_analysis *a, const struct verdict *c, uint8_t *mark)
{
	(void)c;
	for (int pi = 0; pi < a->nr_procs; pi++)
		if (on_stuck_host(a, pi))
			mark[pi] = 1;
}

/* Rules that found a cause a partition does not explain: a dead, failed or mismatched rank,
 * a missing dump. missing_rank is left to the rule: a host cut off in the middle of a
 * collective leaves its ranks behind in it, "missing" from the next one (first: -1 none). */
static bool other_cause(const struct fr_analysis *a, int *first_missing)
{
	*first_missing = -1;
	for (int i = 0; i < a->nr_verdicts; i++) {
		int r = a->verdicts[i].rule;

		if (r == RULE_MISSING_RANK) {
			if (*first_missing < 0)
				*first_missing = i;
		} else if (r < RULE_NO_PROGRESS) {
			return true;
		}
	}
	return false;
}

/* every rank named missing sits on a host at an end of a stuck connection */
static bool missing_explained(const struct fr_analysis *a)
{
	for (int i = 0; i < a->nr_verdicts; i++) {
		const struct verdict *v = &a->verdicts[i];

		if (v->rule != RULE_MISSING_RANK)
			continue;
		for (int k = 0; k < v->nr_who; k++)
			if (v->who[k][2] < 0 || !on_stuck_host(a, (int)v->who[k][2]))
				return false;
	}
	return true;
}

int rule_partition(struct fr_analysis *a)
{
	struct pstate ps = { 0 };
	int out[2] = { -1, -1 }, kind, comm, err = 0, missing, how = 0;
	struct verdict *v;
	int64_t seq;

	if (!a->nr_nsocks || !a->hang_seen)
		return 0;
	/* a rule above found who hung the job; a partition is what is left when none did */
	if (other_cause(a, &missing))
		return 0;
	if (missing >= 0) {
		/* the collective the others wait in */
		comm = a->verdicts[missing].comm;
		seq = a->verdicts[missing].seq;
		if (comm < 0 || seq == FR_UNK)
			return 0;
	} else if ((comm = hung_comm(a, &seq)) < 0) {
		return 0;
	}
	if ((err = build_conns(a, &ps)) || !(kind = name_cut(a, &ps, out, &how)))
		goto out;
	if (missing >= 0 && !missing_explained(a))
		goto out;
	if (!(v = verdict_new(a, RULE_PARTITION, comm, seq, op_at(a, comm, seq)))) {
		err = -ENOMEM;
		goto out;
	}
	v->ev.part.kind = kind;
	v->ev.part.how = how;
	v->ev.part.owner[0] = out[0];
	v->ev.part.owner[1] = out[1];
	v->ev.part.alive_owner = -1;
	if (kind == PART_HOST) {
		const struct powner *o = &a->owners[out[0]];
		const struct comm *c = &a->comms[comm];

		/* the named host's ranks on the comm: the ones it blames */
		for (int i = 0; !o->addr_only && i < c->members.n; i++) {
			const struct member *m = &a->members[c->members.v[i]];

			if (m->placed && !strcmp(a->procs[m->proc].host, o->name))
				who_member(a, v, c->members.v[i]);
		}
		who_sort(v);
		if (out[1] >= 0 && how == PART_BY_PEERS)
			v->ev.part.nr_alive = count_alive(&ps, out[1], out[0], out[1],
							  &v->ev.part.alive_owner);
		else
			v->ev.part.nr_alive = 0;
	}
	evidence(a, &ps, v, comm);
	check_dropped(a, v);
out:
	pstate_free(&ps);
	return err;
}
