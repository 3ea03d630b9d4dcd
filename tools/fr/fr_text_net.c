// SPDX-License-Identifier: MIT
/* fr_text_net: the words of partitioned_host (fr_partition.c), for the text report and --json
 * alike (fr_text.c's table points here). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include "fr_analyze_int.h"

static void owner_name(FILE *f, const struct fr_analysis *a, int o)
{
	if (a->owners[o].addr_only)
		fprintf(f, "%s (no dump holds this address)", a->owners[o].name);
	else
		fprintf(f, "%s", a->owners[o].name);
}

static void seconds_range(FILE *f, int64_t lo_ms, int64_t hi_ms)
{
	if (lo_ms == FR_UNK)
		fprintf(f, "an unknown time (no ages in /proc/net/tcp)");
	else if (hi_ms - lo_ms < 100)
		fprintf(f, "%.1f s", hi_ms / 1e3);
	else
		fprintf(f, "%.1f-%.1f s", lo_ms / 1e3, hi_ms / 1e3);
}

static void evidence_words(FILE *f, const struct verdict *v)
{
	fprintf(f, "%d stuck connection%s (data queued, up to %" PRId64 " unanswered tr%s to send "
		   "it, no ack for ", v->ev.part.nr_stuck, v->ev.part.nr_stuck == 1 ? "" : "s",
		v->ev.part.retrans_max, v->ev.part.retrans_max == 1 ? "y" : "ies");
	seconds_range(f, v->ev.part.silent_min, v->ev.part.silent_max);
	fprintf(f, ")");
}

void headline_partition(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	switch (v->ev.part.kind) {
	case PART_HOST:
		fprintf(f, "host ");
		owner_name(f, a, v->ev.part.owner[0]);
		fprintf(f, " is cut off from the network: ");
		evidence_words(f, v);
		fprintf(f, ", all to or from it");
		break;
	case PART_LINK:
		fprintf(f, "the link between %s and %s is down: ", a->owners[v->ev.part.owner[0]].name,
			a->owners[v->ev.part.owner[1]].name);
		evidence_words(f, v);
		fprintf(f, ", all between them; which side lost the network cannot be told");
		break;
	default: {
		int n = 0;

		fprintf(f, "connections between hosts ");
		for (const char *last = "", *next = ""; next; last = next) {
			next = NULL;
			for (int i = 0; i < a->nr_owners; i++)
				if (a->owners[i].on_stuck && strcmp(a->owners[i].name, last) > 0 &&
				    (!next || strcmp(a->owners[i].name, next) < 0))
					next = a->owners[i].name;
			if (next)
				fprintf(f, "%s%s", n++ ? ", " : "", next);
		}
		fprintf(f, " are stuck and no single host or link explains them: ");
		evidence_words(f, v);
	}
	}
}

void detail_partition(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	const struct nsock *n = v->ev.part.example >= 0 ? &a->nsocks[v->ev.part.example] : NULL;
	char la[64], ra[64];

	if (n) {
		fr_net_addr_str(n->local, la, sizeof(la));
		fr_net_addr_str(n->remote, ra, sizeof(ra));
		fprintf(f, "e.g. ");
		print_proc_label(f, &a->procs[n->proc]);
		fprintf(f, " on %s: %s:%u -> %s:%u, %" PRId64 " queued, %" PRId64 " tr%s",
			a->procs[n->proc].host, la, n->lport, ra, n->rport, n->unacked, n->retrans,
			n->retrans == 1 ? "y" : "ies");
		if (n->last_ack_ms != FR_UNK)
			fprintf(f, ", last ack %.1f s ago", n->last_ack_ms / 1e3);
		fprintf(f, " (%d stuck view%s in the dumps)", v->ev.part.nr_views,
			v->ev.part.nr_views == 1 ? "" : "s");
	}
	if (v->ev.part.kind == PART_HOST && v->ev.part.how == PART_BY_LINK_DOWN) {
		const char *name = a->owners[v->ev.part.owner[0]].name;

		for (int i = 0; i < a->nr_haddrs; i++) {
			const struct haddr *x = &a->haddrs[i];
			char buf[64];

			if (!x->down || x->conflict || strcmp(a->procs[x->proc].host, name))
				continue;
			fr_net_addr_str(x->a, buf, sizeof(buf));
			fprintf(f, "\n%s's own interface at %s is down (no carrier, or set down)", name,
				buf);
			break;
		}
	}
	if (v->ev.part.kind == PART_HOST && v->ev.part.alive_owner >= 0)
		fprintf(f, "\n%s, at the other end, keeps %d connection%s to other hosts (%s%s) that "
			   "%s not stuck: it is on the network", a->owners[v->ev.part.owner[1]].name,
			v->ev.part.nr_alive, v->ev.part.nr_alive == 1 ? "" : "s",
			a->owners[v->ev.part.alive_owner].name, v->ev.part.nr_alive > 1 ? ", ..." : "",
			v->ev.part.nr_alive == 1 ? "is" : "are");
	if (v->ev.part.kind != PART_HOST || a->owners[v->ev.part.owner[0]].addr_only)
		fprintf(f, "\nno rank is blamed: the ranks wait in %s seq %" PRId64 " on comm %s",
			v->op[0] ? v->op : "a collective", v->seq, short_id(a->comms[v->comm].id));
	if (v->ev.part.nr_unknown) {
		const struct proc *p = &a->procs[v->ev.part.unknown_proc];

		fprintf(f, "\nthe sockets of %d dump%s are unknown (", v->ev.part.nr_unknown,
			v->ev.part.nr_unknown == 1 ? "" : "s");
		print_proc_label(f, p);
		fprintf(f, ": %s)", p->net_error[0] ? p->net_error : "the dump has no \"net\"");
	}
}

void partition_reason(FILE *f, const struct fr_analysis *a, const struct verdict *v)
{
	switch (v->ev.part.why) {
	case PART_WHY_NO_DUMP:
		fprintf(f, "no dump holds that address: its own side is not seen");
		break;
	case PART_WHY_TWO_SIDES:
		fprintf(f, "every stuck connection joins these two hosts and neither keeps a "
			   "working connection to a third one");
		break;
	case PART_WHY_MANY:
		fprintf(f, "the stuck connections join several hosts that no single one explains");
		break;
	case PART_WHY_NO_AGES:
		fprintf(f, "sockets read from /proc/net/tcp: no time since the last ack, only the "
			   "retransmits");
		break;
	case PART_WHY_AFTER_WAIT:
		fprintf(f, "a stuck connection heard an ack after its rank began to wait: the link "
			   "may have gone down after the hang began");
		break;
	case PART_WHY_PEERS:
		fprintf(f, "named because the other end keeps connections to other hosts that are "
			   "not stuck, but idle ones: a cut of the other end after they last carried "
			   "data looks the same");
		break;
	case PART_WHY_ALIVE:
		fprintf(f, "it keeps connections to other hosts that are not stuck: the hosts at "
			   "the other ends of the stuck ones may be cut off instead");
		break;
	case PART_WHY_UNKNOWN:
		fprintf(f, "the sockets of %d dump%s are unknown", v->ev.part.nr_unknown,
			v->ev.part.nr_unknown == 1 ? "" : "s");
		break;
	}
	(void)a;
}
