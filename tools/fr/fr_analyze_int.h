/* SPDX-License-Identifier: MIT */
/* fr_analyze internal state, shared by the analyzer's modules (see docs/ARCHITECTURE.md):
 *   fr_tables.c  index tables over comms, (comm, seq) aggregates and p2p channels
 *   fr_fold.c    folding each parsed dump into procs, comms, members, aggregates
 *   fr_infer.c   identity inference: comms created before attach, split children
 *   fr_rules.c   the rules: structured findings (rule, ranks, comm, seq, op, evidence)
 *   fr_finding.c building findings: culprits, confidence, order, roles (caused_by)
 *   fr_timing.c  what the dumps' own times prove when they are not from one moment
 *   fr_stacks.c  stack snapshots (dump version 2) per proc; odd_stack, no_progress,
 *                attached_after_hang
 *   fr_partition.c  the dumps' TCP connections ("net"); partitioned_host
 *   fr_text.c    the one place that words a finding (text report and --json alike);
 *                fr_text_stacks.c the stack rules' words
 *   fr_report.c  the text and --json reports
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
#ifndef TPTRACE_FR_ANALYZE_INT_H
#define TPTRACE_FR_ANALYZE_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "fr_analyze.h"
#include "hashmap.h"


#define SIG_GROUPS	4	/* distinct signatures tracked per (comm, seq); more are counted */
#define SIG_LIST	32	/* members listed per signature / unfinished list */
#define P2P_KEEP	4	/* newest ops kept per p2p channel side */
#define MAX_P2P_CHANS	(1 << 20)
#define MAX_AGGS	(1 << 26)
#define PROC_IN_CALLS	4
#define MAX_P2P_VERDICTS_PER_COMM 16

/* In causal order: the report lists verdicts in this order. partitioned_host sits before
 * missing_rank: ranks cut off with their host before they could enter a collective are
 * "missing" because of it (it runs last, from what the others found). The stack rules sit after the
 * ring rules that say the same with more evidence: odd_stack (one rank not in the wait the
 * others are in) right after missing_rank, no_progress (everyone in one call: NCCL or the
 * network) before stuck_in_call which it explains, attached_after_hang (why the rings cannot
 * tell) last but for corrupt dumps. */
enum rule {
	RULE_INIT_FAILED, RULE_DEAD_RANK, RULE_MISSING_DUMP, RULE_PARTITION, RULE_MISSING_RANK,
	RULE_ODD_STACK, RULE_ASYNC_ERROR, RULE_TYPE, RULE_SIZE, RULE_DTYPE, RULE_REDOP, RULE_ROOT,
	RULE_P2P, RULE_NO_PROGRESS, RULE_STUCK, RULE_LATE, RULE_STRAGGLER, RULE_STATE, RULE_NOT_ONE_MOMENT,
	RULE_RANKS_UNKNOWN,
	RULE_ATTACHED_AFTER, RULE_CORRUPT, RULE__COUNT
};
extern const char *const rule_names[RULE__COUNT];

struct ivec {
	int *v;
	int n, cap;
};

/* One frame as the analysis keeps it: strings interned in fr_analysis.strs (offsets). */
struct kframe {
	uint32_t func, file, module;	/* 0: "" */
	int32_t line;
	int64_t module_off;
	uint8_t kind;
	bool unrecoverable;	/* fr_frame's */
};

/* An entry's Python frames ("frames", --py-stacks) as the analysis keeps them: one per
 * distinct stack over all dumps (ranks share call sites), frames in fr_analysis.frames. */
struct kpystack {
	uint64_t hash;		/* fr_parse's, of the kept frames */
	int first;		/* in fr_analysis.frames */
	uint8_t nr;
	bool more;
};

/* A snapshot of a process as the stack rules use it: its issuing thread and counts. */
struct psnap {
	bool present;
	uint8_t taken;		/* enum fr_taken */
	bool exited;
	int64_t time_ns, samples;
	int64_t tid;		/* issuing thread; FR_UNK when none */
	char name[16];
	char state;
	uint8_t where, progress;
	bool main;
	char api[48];
	int nr_threads, nr_waits;	/* threads, and those in an NCCL/CUDA wait, not progressing */
	char ptrace_error[96];
	char python[16];
	int frames, nr_frames;	/* in fr_analysis.frames (newest snapshot only) */
	bool more_frames;
	/* the wait as a call path (STAT's equivalence class): where, api and the kept frames
	 * from the outermost api frame outwards (frames inside the api vary with timing) */
	uint64_t sig;
	int api_frame;		/* index (in frames) of the outermost api frame, -1 */
};

struct proc {
	char host[FR_NAME_LEN];
	char *path;
	int64_t pid, global_rank, world_size, dump_time_ns, dump_mono_ns, exit_code, signal;
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
	/* stacks: the attach snapshot and the newest one (the same when only one exists) */
	struct psnap snap_attach, snap;
	char stacks_error[96];
	bool stacks_pending;	/* a state-first dump: its stacks unknown (still being taken) */
	int net_source;		/* enum fr_net_src: its "net" */
	char net_error[96];
	bool torch;		/* a PyTorch flight-recorder dump (fr_torch.c) */
	bool py_stacks;		/* recorded with --py-stacks; py_why: why it has no frames */
	char py_why[128];
	char torch_version[16];
	int host_id;		/* finish: procs of one host (one clock) share it */
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
	bool align_ambiguous;	/* inferred across hosts: another seq offset was as likely */
	struct ivec aggs;	/* filled by finish: its seq aggregates in seq order */
	/* finish (timing_comm_skews): how long a rank may wait in a collective of this comm, or
	 * be behind its peers, before it counts as a hang: --skew-ms, raised for a comm whose
	 * completed collectives kept ranks waiting longer (twice their median, at most
	 * half --stuck-ms); usual_wait that percentile, FR_UNK when too few completed */
	int64_t skew_ns, usual_wait;
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
	bool place_ambiguous;	/* inferred: its seqs placed across hosts by times that cannot
				 * tell (struct pend's ambiguous): a step off is as likely */
	/* inferred comms: it skipped hole_len collectives at hole_seq and went on (its later
	 * seqs were rebased past the hole); the first one it went on to */
	int64_t hole_seq, hole_len, hole_next_seq;
	uint8_t hole_next_op, hole_next_state;
	/* split children with an unknown rank: p2p entries wait for finish to know it */
	struct fr_entry *dents;
	int nr_dents, cap_dents;
	int split;		/* index in a->splits, -1 */
	/* its communicator init failed ("state": "init_failed"): the comm never existed here */
	bool init_failed;
	int64_t init_rc;	/* ncclResult_t of the failed init, FR_UNK */
	char created_by[48];	/* the API that created (or failed to create) it */
	/* --py-stacks: the Python frames (fr_analysis.pystacks index + 1, 0 none) of its newest
	 * collective and of its oldest one not completed, with their seqs */
	uint32_t py_newest, py_stuck;
	int64_t py_newest_seq, py_stuck_seq;
	uint8_t py_newest_op, py_stuck_op;
	/* times on its host's clock (FR_UNK: unknown) for what the dumps' own times prove
	 * (fr_timing.c): the collective folded before the current one; the newest completed one
	 * (lc_prev_created: its predecessor's creation when that is seq lc_seq - 1); the oldest
	 * one not completed (st_prev_*: its predecessor's, when that is seq st_seq - 1) */
	int64_t prev_seq, prev_created, prev_done;
	int64_t lc_seq, lc_created, lc_done, lc_prev_created;
	int64_t st_seq, st_created, st_prev_created, st_prev_done;
	int64_t first_created;	/* its oldest collective's, for its step length */
	int nr_last;		/* straggler: collectives it entered last by the margin */
	/* late_arrival: separate occasions it entered a collective every rank completed past
	 * the threshold (a run of consecutive late entries is one), the first one's agg */
	int nr_late_eps, late_first_agg;
	/* its own waits (completion - creation, µs) in its newest MEMBER_WAITS completed
	 * collectives, a ring, with their aggregates: the straggler rule's medians */
	struct member_wait { int32_t agg, wait_us; } *waits;
	uint32_t waits_next;
};

#define MEMBER_WAITS	64

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
	bool solid;		/* placed by a long agreeing history (or the reference) */
	bool ambiguous;		/* placed by times that cannot tell (across hosts) */
	int place_net;		/* its placement's matches, less refuted and contradicted ones */
};

struct cluster {
	int ref;		/* pend all others were aligned to */
	struct ivec pends;
	int comm;
	bool ambiguous;		/* a member's offset was decided by times that cannot tell */
	bool anchor_host;	/* a member waits and was placed solidly (host_anchor) */
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
	/* completed entries' own waits, completion - creation on their host's clock (FR_UNK):
	 * the last to enter waits least (late_arrival, straggler across hosts) */
	int64_t min_wait, min2_wait, max_wait;
	int32_t minw_m;
	int32_t nr_waits;
	int32_t comm;
	int32_t entered, completed;
	int32_t min_m, max_m;
	int32_t n0;
	int32_t first0[2];
	int32_t extra;		/* index into a->extras or -1 */
	struct sig sig0;
};

struct p2p_op {
	int64_t k, seq, count, created;
	int64_t done;		/* discovered completed, FR_UNK */
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

/* A hash index over an array of elements: u64map from a 64-bit hash to the newest element
 * with that hash, chained through next[] to the older ones (hashes may collide; callers
 * compare the element itself). */
struct fr_index {
	struct u64map heads;	/* hash -> element index + 1 */
	int *next;		/* element -> older element with the same hash, + 1 (0: none) */
	int cap;
};

/* Why a finding may be wrong (fr_text words it); the first one found is kept. */
enum low_why {
	LOW_NONE,
	LOW_ATTACHED_AFTER,	/* proc low_proc was attached after seq low_seq of the comm */
	LOW_WRAPPED,		/* proc low_proc's ring wrapped past seq low_seq */
	LOW_DROPPED,		/* proc low_proc dropped events */
	LOW_POSITION_UNKNOWN,	/* proc low_proc's position on the comm is unknown */
	LOW_STACK_UNKNOWN,	/* proc low_proc's stack could not be read (or it has none) */
	LOW_ONE_SAMPLE,		/* one stack sample: a busy moment looks like a hang */
	LOW_RANKS_UNKNOWN,	/* the dumps do not give the comm's members' ranks */
	LOW_STACK_DISAGREES,	/* proc low_proc's stack is in the NCCL call its ring lacks */
	LOW_ALIGN_AMBIGUOUS,	/* an inferred comm's seq alignment across hosts is ambiguous */
	LOW_NET,		/* partitioned_host: ev.part.why says */
};

/* a signature group as a finding keeps it (copied: the aggregate's lists are not stable) */
struct sig_group_ev {
	struct sig sig;
	int n, nr_listed;
	int members[2 + SIG_LIST];
};

struct stuck_call {
	const char *api;
	int proc, call;
	int64_t dur;
};

/* A finding: what a rule found, as data. fr_text.c words it for both reports. */
struct verdict {
	int rule;
	int comm;
	int64_t seq;
	char op[48];
	/* culprits as (global rank, comm rank, proc) triples */
	int nr_who, cap_who;
	int64_t (*who)[3];
	int low;		/* enum low_why */
	int low_proc;
	int64_t low_seq;
	bool medium;		/* inferred identity: below high, above low */
	int64_t also_seqs, also_last;	/* coalesced later occurrences */
	int order;
	/* evidence; lists hold member indexes */
	int agg;		/* the (comm, seq) aggregate, -1 */
	struct ivec culprits, waiting, behind, dead;
	union {
		/* lag: how long after others entered seq its dump is proven to have come (the
		 * smallest over the culprits; FR_UNK: the times do not say), how: which bound */
		struct { bool hole; int64_t newest; int unknown; int64_t lag; int how; } missing;
		struct { int proc; } dead_rank;
		struct { bool world; bool identity; } missing_dump;
		struct { int64_t err; bool aborted; } async;
		struct {
			int field, ng, other_n, entered;
			bool tie;
			struct sig_group_ev gv[SIG_GROUPS];
		} sig;
		struct {
			int chan, sm, rm, suppressed;
			bool absolute, bad, has_lone, lone_send;
			struct p2p_op s, r, lone;
			int64_t max_s, max_r;
		} p2p;
		struct { struct stuck_call *calls; int n, nprocs; int64_t mind, maxd; } stuck;
		/* eps: separate occasions the rank entered late where that, recurring, is the
		 * evidence (0: the lateness left ranks stuck, or the job did not go past it) */
		struct { int64_t skew; bool stuck; int nr_over; bool waits; int eps; } late;
		/* lag: median margin by which it entered last; step: its median interval
		 * between collectives on the comm; last/of: collectives it was last in */
		struct {
			int64_t lag, step;
			int last, of;
			/* by_median: found by its median wait (below its peers' by lag, which
			 * is median_peers - median_own), not by being last in most */
			bool by_median;
			int64_t median_own, median_peers, median_next;
		} straggler;
		struct { int completed, incomplete; int64_t before; int how; } state;
		struct { int idx; } corrupt;
		struct { int64_t rc; char api[48]; bool all_failed; } init;
		/* odd_stack: the wait the majority is in; no_progress: the call (api "" when the
		 * ranks are in different calls) */
		struct {
			char api[48];
			uint8_t where;
			int nr_in, nr_known;	/* ranks in that wait / with a readable stack */
			int unknown;	/* a proc whose stack is unknown, -1 */
			bool tie, one_sample;
			/* no_progress from the rings (rule_ring_hang): the waits at the dumps */
			bool from_rings;
			int64_t wait_min, wait_max;
		} stk;
		struct { int64_t newest; } attached;
		/* partitioned_host (fr_partition.c): kind PART_*; owner: the host named, or the
		 * link's two ends (PART_LINKS: in a->owners, those with on_stuck set) */
		struct {
			int kind, owner[2];
			int how;	/* PART_BY_*: what named the host */
			int nr_stuck, nr_views, nr_alive, alive_owner;
			int example;	/* a stuck view (a->nsocks) */
			int64_t silent_min, silent_max, retrans_max;	/* ms; FR_UNK */
			int why;	/* PART_WHY_*: why below high */
			int nr_unknown, unknown_proc;	/* comm members whose sockets are unknown */
		} part;
	} ev;
	/* the stack rules found it from stacks alone (no ring entry shows it) */
	bool stacks_only;
	int caused_by;		/* link_roles: the cause's index in a->verdicts, -1: a cause */
	struct ivec others;	/* procs: odd_stack the majority; attached_after_hang unused */
};

enum { PART_HOST = 1, PART_LINK, PART_LINKS };
/* how a host was named: every stuck connection touches it alone (and it keeps others that
 * are not stuck: several hosts may be cut off instead); its own interface is down;
 * of the two every stuck connection joins, the other keeps connections to third hosts that
 * are not stuck (idle ones too: weaker, see fr_partition.c) */
enum { PART_BY_ONLY = 1, PART_BY_ONLY_ALIVE, PART_BY_LINK_DOWN, PART_BY_PEERS };
enum { PART_WHY_NONE, PART_WHY_NO_DUMP, PART_WHY_TWO_SIDES, PART_WHY_MANY, PART_WHY_NO_AGES,
       PART_WHY_AFTER_WAIT, PART_WHY_UNKNOWN, PART_WHY_PEERS, PART_WHY_ALIVE };

/* fr_partition.c: one socket of a dump (only established ones to a non-loopback address) */
struct nsock {
	int proc;
	uint8_t local[16], remote[16];
	uint16_t lport, rport;
	bool stuck;		/* this side holds data it keeps trying to send, with no ack since */
	int64_t retrans;	/* its tries: retransmits, window probes or backoffs, the most */
	int64_t last_ack_ms, unacked;	/* unacked: data queued (unacked or unsent), bytes or segments */
};
/* an address a dump's host holds (its interfaces, its sockets' local ends) */
struct haddr {
	uint8_t a[16];
	int proc;		/* the first dump that holds it */
	bool conflict;		/* dumps of different hosts hold it: it names none */
	bool down;		/* its interface is not running (down, or no carrier) */
};
/* a host (by name) or an address no dump's host holds */
struct powner {
	char name[FR_NAME_LEN];
	bool addr_only;
	bool on_stuck;		/* an end of a stuck connection */
};

/* a dump older than the moment the others show (fr_timing.c) */
struct redump {
	int proc, comm;
	int64_t seq;		/* the collective it had not entered (or completed); p2p: the
				 * lone op's p2p seq */
	bool completed;		/* others completed it: proven older */
	bool p2p, lacks_recv;	/* p2p: it lacks the recv (else the send) matching src->dst */
	int src, dst;
};

/* fr_timing.c: a comm's waiting members, sorted for the lag bounds */
struct timing_comm {
	struct wrow *rows;
	int n;
};
enum { TIMING_SAME_HOST = 1, TIMING_CAUSAL };

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
	struct fr_index comm_index;
	struct member *members;
	int nr_members, cap_members;
	struct seq_agg *aggs;
	int nr_aggs, cap_aggs;
	struct fr_index agg_index;
	struct agg_extra *extras;
	int nr_extras, cap_extras;
	struct p2p_chan *chans;
	int nr_chans, cap_chans;
	struct fr_index chan_index;
	bool chans_full, aggs_full;
	int *local_member;	/* scratch: member per local comm of the dump being folded */
	size_t local_cap;
	int64_t out_of_order;
	struct corrupt *corrupt;
	int nr_corrupt, cap_corrupt;
	struct fr_read read;
	int64_t skipped;	/* entries left out of the dumps that say how many they held */
	int dumps_cut;		/* dumps with entries left out */
	int dumps_cut_unknown;	/* tail-read dumps whose left-out count is unknown */
	struct pend *pends;
	int nr_pends, cap_pends;
	struct cluster *clusters;
	int nr_clusters, cap_clusters;
	struct split_pend *splits;
	int nr_splits, cap_splits;

	/* stacks: frames of each proc's newest snapshot and their interned strings */
	struct kframe *frames;
	int nr_frames, cap_frames;
	char *strs;
	int nr_strs, cap_strs;
	struct u64map str_index;	/* hash -> offset in strs */
	int nr_with_stacks;
	/* entries' Python frames: distinct stacks, and the dump being folded's map to them */
	struct kpystack *pystacks;
	int nr_pystacks, cap_pystacks;
	struct u64map pystack_index;	/* hash -> index + 1 */
	uint32_t *py_map;
	int py_map_cap;
	int nr_with_pyframes;	/* dumps whose entries carry frames */
	struct fr_trigger_sel trigger;
	int nr_hosts;		/* distinct host ids (timing_hosts) */
	/* said in one line each (analysis_note): bad input (fr_timing.c: a host name held by
	 * machines of different boots; a host clock far from the others'; dumps of several
	 * jobs), and what is seen but blames nobody (a one-off late arrival, fr_rules.c) */
	char *notes[8];
	int nr_notes;
	bool host_split;
	char *bad_input;	/* why nothing can be judged (dumps of several jobs); NULL */	/* a host name held by machines of different boots */
	struct redump *redumps;
	int nr_redumps, cap_redumps;
	bool hang_seen;		/* some rank waited past the threshold at its own dump */

	/* fr_partition.c: the dumps' sockets and their hosts' addresses; the owners a verdict
	 * names */
	struct nsock *nsocks;
	int nr_nsocks, cap_nsocks;
	struct haddr *haddrs;
	int nr_haddrs, cap_haddrs;
	struct u64map haddr_index;	/* address hash -> index + 1 */
	struct powner *owners;
	int nr_owners, cap_owners;

	struct verdict *verdicts;
	int nr_verdicts, cap_verdicts;
	int *comm_order;	/* comms sorted by id */
	int64_t world_size;
	bool finished;
};

/* fr_tables.c */
int ivec_push(struct ivec *iv, int x);
int64_t ns_diff(int64_t a, int64_t b);
uint64_t str_hash(const char *s);
void fr_index__free(struct fr_index *x);
int comm_find(const struct fr_analysis *a, const char *id);
int comm_get(struct fr_analysis *a, const char *id);
int agg_find(const struct fr_analysis *a, int comm, int64_t seq);
int agg_get(struct fr_analysis *a, int comm, int64_t seq);
int chan_get(struct fr_analysis *a, int comm, int src, int dst);

/* fr_fold.c */
int member_new(struct fr_analysis *a, int comm, int proc, const struct fr_comm_info *ci);
int fold_collective(struct fr_analysis *a, int mi, const struct fr_entry *e);
int fold_p2p(struct fr_analysis *a, int mi, const struct fr_entry *e);
bool size_eq(int64_t x, int64_t y);

/* fr_infer.c */
int resolve_splits(struct fr_analysis *a);
int unify_local(struct fr_analysis *a);

/* fr_finding.c */
/* How long member mi had waited in collective seq at its dump (seq its oldest collective not
 * completed, both times known on its host's clock); FR_UNK otherwise. */
int64_t member_open_wait(const struct fr_analysis *a, int mi, int64_t seq);
struct verdict *verdict_new(struct fr_analysis *a, int rule, int comm, int64_t seq,
			    const char *op);
void who_add(struct verdict *v, int64_t grank, int64_t crank, int proc);
void who_member(struct fr_analysis *a, struct verdict *v, int mi);
void who_proc(struct fr_analysis *a, struct verdict *v, int pi);
void who_sort(struct verdict *v);
void set_low(struct verdict *v, int why, int proc, int64_t seq);
void check_wrap(struct fr_analysis *a, struct verdict *v, int comm, int64_t seq);
void check_dropped(struct fr_analysis *a, struct verdict *v);
void mark_inferred(struct fr_analysis *a);
void sort_verdicts(struct fr_analysis *a);
/* after sort_verdicts: ties each consequence to its cause and orders every cause before its
 * consequences; -ENOMEM */
int link_roles(struct fr_analysis *a);
/* the ranks that wait on cause v (members), with the shortest and longest own wait (ns,
 * FR_UNK unknown); malloc'ed list in *out, its length returned, -ENOMEM */
int verdict_waiters(const struct fr_analysis *a, const struct verdict *v, int **out,
		    int64_t *minw, int64_t *maxw);
int nr_causes(const struct fr_analysis *a);
void verdict_free(struct verdict *v);

/* fr_stacks.c: stack snapshots folded per proc, and the stack rules */
int fold_stacks(struct fr_analysis *a, int pi, const struct fr_dump *d);
/* the dump's entry stacks into a->pystacks; a->py_map[i] = index + 1 of d's stack i */
int fold_pystacks(struct fr_analysis *a, const struct fr_dump *d);
const char *kstr(const struct fr_analysis *a, uint32_t off);
int rule_stacks(struct fr_analysis *a);
/* the input note naming the ranks whose dumps are state-first files (stacks pending) */
int stacks_pending_note(struct fr_analysis *a);
bool any_stacks_pending(const struct fr_analysis *a);
int rule_ring_hang(struct fr_analysis *a);
int rule_attached_after(struct fr_analysis *a);

/* fr_partition.c */
int fold_net(struct fr_analysis *a, int pi, const struct fr_dump *d);
int rule_partition(struct fr_analysis *a);
/* link_roles: the procs that follow from partitioned_host c besides its waiters: those of the
 * hosts at an end of a stuck connection */
void partition_mark(const struct fr_analysis *a, const struct verdict *c, uint8_t *mark);
void net_free(struct fr_analysis *a);
/* fr_text_net.c */
void headline_partition(FILE *f, const struct fr_analysis *a, const struct verdict *v);
void detail_partition(FILE *f, const struct fr_analysis *a, const struct verdict *v);
void partition_reason(FILE *f, const struct fr_analysis *a, const struct verdict *v);

/* fr_timing.c */
/* adds line (malloc'ed, taken; NULL: -ENOMEM) to a->notes, dropped past their room */
int analysis_note(struct fr_analysis *a, char *line);
int timing_hosts(struct fr_analysis *a);
int timing_comm_build(struct fr_analysis *a, int cid, struct timing_comm *t);
int timing_comm_skews(struct fr_analysis *a);
/* the hang threshold of comm cid (struct comm's skew_ns) */
static inline int64_t comm_skew(const struct fr_analysis *a, int cid)
{
	return cid >= 0 && cid < a->nr_comms && a->comms[cid].skew_ns > 0 ? a->comms[cid].skew_ns :
	       a->opts.skew_ns;
}
int64_t timing_max_skew(const struct fr_analysis *a, int64_t *usual);
void timing_comm_free(struct timing_comm *t);
int64_t timing_lag(const struct fr_analysis *a, const struct timing_comm *t, int mi, int64_t s,
		   int64_t *waited, int *how);
int64_t timing_done_before(const struct fr_analysis *a, int cid, int mi, int64_t s, int *how);
int timing_redump_p2p(struct fr_analysis *a, int pi, int cid, int64_t p2p_seq, int src, int dst,
		      bool lacks_recv);
int timing_redump(struct fr_analysis *a, int pi, int cid, int64_t seq, bool completed);
int rule_not_one_moment(struct fr_analysis *a);

/* fr_rules.c */
int64_t comm_absent(const struct comm *c, int64_t *vals, int cap);
#define ABSENT_LIST 1024

/* fr_text.c: headline and detail (may be multi-line, no trailing newline) and the reason
 * for a confidence below high; malloc'ed, NULL on ENOMEM. */
char *verdict_headline(const struct fr_analysis *a, const struct verdict *v);
char *verdict_detail(const struct fr_analysis *a, const struct verdict *v);
char *verdict_confidence_reason(const struct fr_analysis *a, const struct verdict *v);
const char *short_id(const char *id);
/* --py-stacks: the culprit's (who[0]) Python frames on the verdict's comm: those of the
 * oldest collective it has not completed (stuck on), else of its newest one. The stack's
 * index + 1 in a->pystacks (0: none) and which collective it is. */
struct py_pick {
	int member;
	uint32_t stack;
	int64_t seq;
	uint8_t op;
	bool stuck;
};
bool verdict_pyframes(const struct fr_analysis *a, const struct verdict *v, struct py_pick *out);
/* why the culprit's dump, recorded with --py-stacks, has no Python frames; NULL: not known */
const char *verdict_pyframes_missing(const struct fr_analysis *a, const struct verdict *v);
/* the frames (index + 1) of a rank waiting in the verdict's seq, *member set; 0 none */
uint32_t verdict_waiting_pyframes(const struct fr_analysis *a, const struct verdict *v, int *member);
void print_stacks_health(FILE *f, const struct fr_analysis *a);

/* fr_text.c and fr_text_stacks.c: the wording helpers they share (FILE * writers) */
void print_who(FILE *f, const struct fr_analysis *a, const struct verdict *v, bool detail1);
void print_proc_label(FILE *f, const struct proc *p);
void print_last_entry(FILE *f, const struct fr_analysis *a, const struct proc *p);
void print_stack(FILE *f, const struct fr_analysis *a, const struct proc *p);
void print_unknown_why(FILE *f, const struct proc *p);
void headline_odd_stack(FILE *f, const struct fr_analysis *a, const struct verdict *v);
void detail_odd_stack(FILE *f, const struct fr_analysis *a, const struct verdict *v);
void headline_no_progress(FILE *f, const struct fr_analysis *a, const struct verdict *v);
void detail_no_progress(FILE *f, const struct fr_analysis *a, const struct verdict *v);
void headline_attached(FILE *f, const struct fr_analysis *a, const struct verdict *v);
void detail_attached(FILE *f, const struct fr_analysis *a, const struct verdict *v);

/* A text built with stdio on open_memstream: text_close returns the text without its trailing
 * newline (the buffer, still owned by t: free(t->buf)), "" strdup'ed when the open failed. */
struct text {
	char *buf;
	size_t len;
	FILE *f;
};
FILE *text_open(struct text *t);
char *text_close(struct text *t);

#endif
