// SPDX-License-Identifier: MIT
/* tptrace-fr-gen: write a synthetic directory of flight-recorder dumps (docs/fr-schema.md),
 * healthy or with one planted fault, for tptrace-fr's tests and benchmarks.
 *
 * Every rank runs the same schedule of steps. Step t uses comm slot t % C: slot 0 is the
 * world comm, slot j >= 1 splits the world into groups (of --group G ranks, default N >> j),
 * each group its own comm_id. Every 16th step of slot 0 is a ring exchange (send to rank+1,
 * recv from rank-1). The last step is the scenario's target on slot --comm (and the group
 * holding --culprit); signature scenarios can target an older seq with --at. The output is
 * deterministic for given arguments.
 *
 * One file (over 1,000 lines): a test and benchmark generator, not product code; its schedule,
 * its JSON writer and its stack snapshots share the options and the schedule as file state.
 */
#include <argp.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "fr_keys.h"
#include "growbuf.h"

/* a key of the dump and its colon, quoted: KQ(FRK_PID) is "\"pid\":" */
#define KQ(key) "\"" key "\":"

#ifndef TPTRACE_VERSION
#define TPTRACE_VERSION "0.0.0"
#endif

enum scenario {
	SC_HEALTHY, SC_SKIP, SC_LATE, SC_SIZE, SC_DTYPE, SC_OP, SC_ROOT, SC_TYPE, SC_P2P,
	SC_P2P_COUNT, SC_STUCK, SC_KILLED, SC_MISSING_DUMP, SC_CORRUPT, SC_ASYNC, SC_SKIP_ON,
	SC_INIT_FAIL, SC_INIT_FAIL_ALL,
	/* hung before tptrace attached: empty rings, the stacks tell (imply --stacks) */
	SC_HUNG_MISSING, SC_HUNG_SPIN, SC_STUCK_SYNC, SC_NO_PROGRESS, SC_STRAGGLER, SC_PARTITION,
	SC__COUNT
};
static const char *const scenario_names[SC__COUNT] = {
	"healthy", "skip", "late", "size", "dtype", "op", "root", "type", "p2p", "p2p_count",
	"stuck", "killed", "missing_dump", "corrupt", "async", "skip_on", "init_fail",
	"init_fail_all", "hung_before_attach_missing", "hung_before_attach_spin", "stuck_sync",
	"no_progress", "straggler", "partition",
};

static struct env {
	int ranks, entries, comms, culprit, comm_slot, group, ring, wrap, dropped, jobs;
	bool preexisting, split_null;
	bool stacks;		/* version 2 dumps with an attach and a dump snapshot */
	int stack_unknown;	/* this rank's snapshots could not read frames (ptrace denied) */
	bool py_frames;		/* entries carry Python "frames" (tptrace fr --py-stacks) */
	int py_none;		/* with py_frames: this rank's Python is unsupported (no frames) */
	int attach_skew;	/* rank r starts recording (r * 7) % (K + 1) steps late */
	int late_every;		/* --scenario late: also late at every K-th step before --at */
	int64_t host_offset_ns;	/* host h's clock is off by (h odd ? -1 : 1) * h * this */
	int per_host;		/* ranks per host: host h holds ranks h*per_host.. */
	/* dumps taken at different instants while the job runs on (0: every rank's dump holds
	 * the whole schedule): hosts dump up to spread apart, a host's ranks 3 ms one after
	 * another; a step takes step_ns (a collective of 0.9 ms, then the rank sleeps) */
	int64_t spread_ns, step_ns;
	int pre_from;		/* ranks from this one on attached after init (-1: none) */
	bool culprit_in_nccl;	/* skip: the culprit's stack waits in NCCL too (its ring lost it) */
	bool sleep_between;	/* healthy ranks sleep between steps: their dump stacks sleep or
				 * wait in the step's collective, neither progressing */
	int clock_off_host;	/* this host's clock is 3 years behind (-1: none) */
	int period;		/* signatures repeat every this many collectives (0: off) */
	int alias_host;		/* host alias_host + 1 dumps under host alias_host's name */
	int stale_host;		/* this host dumped stale_ns before the hang (-1: none) */
	int64_t stale_ns;
	int64_t jitter_ns;	/* each rank enters each step up to this late (pseudo-random) */
	int64_t at;
	int init_rc;		/* ncclResult_t of a failed comm init */
	const char *init_api;	/* the API whose init failed (default by slot) */
	/* "net" (--net, partition): ranks of other hosts reach the hub host's first rank over
	 * TCP (a star, as the simulated NCCL's); part_host: the host cut off, PART_NONE (links
	 * busy, nothing stuck), PART_EXT (an address outside the job, 192.0.2.77, that every
	 * host's first rank talks to) */
	bool net, net_unknown, net_proc, net_unsent;
	bool part_mid;		/* cut while the hub sent the results of the collective before
				 * the last: the ranks it could not reach never completed it */
	int part_host, net_hub;
	uint64_t net_linkdown;	/* hosts (bits, < 64) whose interface is down (no carrier) */
	int part_also;		/* a second host cut off (-1 none) */
	int net_unknown_rank;	/* this rank's sockets are unknown (-1 none) */
	int64_t net_silent_ms;	/* stuck views heard no ack for this long (0: since the hang) */
	enum scenario sc;
	const char *out;
	uint64_t seed;
} env = {
	.py_none = -1,
	.ranks = 8, .entries = 100, .comms = 1, .culprit = -1, .group = 0, .ring = 2000,
	.wrap = -2, .dropped = -2, .jobs = 2, .at = -1, .init_rc = 2, .sc = SC_HEALTHY, .seed = 1,
	.stack_unknown = -1, .per_host = 8, .step_ns = 1000000, .stale_host = -1, .pre_from = -1, .clock_off_host = -1, .alias_host = -2, .stale_ns = 5000000000LL,
	.part_host = -3, .part_also = -1, .net_unknown_rank = -1,
};
enum { PART_NONE = -1, PART_EXT = -2, PART_ZEROWIN = -4 };

const char *argp_program_version = "tptrace-fr-gen " TPTRACE_VERSION;
static const char doc[] =
"tptrace-fr-gen: write synthetic tptrace flight-recorder dumps, one file per rank.\n"
"\n"
"USAGE: tptrace-fr-gen --ranks N --entries E [--comms C] [--scenario S] [--culprit R] -o DIR\n"
"\n"
"Scenarios (the fault sits at the last collective of the job unless --at says otherwise):\n"
"healthy skip late size dtype op root type p2p p2p_count stuck killed missing_dump\n"
"corrupt async skip_on (the culprit skips the collective at --at and goes on: every later\n"
"collective is left unfinished) init_fail (the culprit's init of comm slot --comm failed\n"
"with --init-rc: the others of its group wait in their first collective on it and the job\n"
"stops there) init_fail_all (every rank of that group failed it).\n"
"Hung before tptrace attached (empty rings; stacks only): hung_before_attach_missing (the\n"
"culprit sleeps in Python, the others wait in ncclAllReduce), hung_before_attach_spin (it\n"
"spins in Python), stuck_sync (it waits in cudaStreamSynchronize), no_progress (every rank\n"
"waits in ncclAllReduce). straggler: the culprit enters every step 30 % of --step-ms after\n"
"the others (a collective completes 0.9 ms after its last rank). partition: every rank\n"
"waits in the last collective and --part-host's link is down (implies --net: its\n"
"connections hold data retransmitted with no ack). --stacks adds snapshots to any scenario: healthy ranks progress,\n"
"the culprit of a hang sleeps in Python while the others wait in the collective.\n"
"\n"
"EXAMPLES:\n"
"    tptrace-fr-gen --ranks 8 --entries 40 --scenario skip --culprit 5 -o /tmp/fr-skip\n"
"    tptrace-fr-gen --ranks 16384 --entries 2000 --comms 4 -o /tmp/fr-big   # benchmark\n"
"    tptrace-fr-gen --ranks 4 --entries 30 --scenario size --culprit 1 --at 3 \\\n"
"                   --ring 10 --wrap 2 -o /tmp/fr-wrap    # rank 2's ring lost seq 3\n";

enum { OPT_SC = 1000, OPT_COMM, OPT_GROUP, OPT_RING, OPT_WRAP, OPT_DROPPED, OPT_AT, OPT_SEED,
       OPT_PRE, OPT_ATTACH, OPT_HOSTOFF, OPT_SPLITNULL, OPT_INIT_RC, OPT_INIT_API, OPT_STACKS,
       OPT_STACK_UNKNOWN, OPT_PY_FRAMES, OPT_PY_NONE, OPT_PER_HOST, OPT_SPREAD, OPT_STEP,
       OPT_STALE, OPT_JITTER, OPT_STALE_MS, OPT_LATE_EVERY, OPT_PRE_FROM, OPT_CLOCK_OFF, OPT_ALIAS,
       OPT_CULPRIT_NCCL, OPT_SLEEP_BETWEEN, OPT_PERIOD, OPT_NET, OPT_NET_UNKNOWN, OPT_NET_PROC,
       OPT_PART_HOST, OPT_NET_HUB, OPT_NET_UNSENT, OPT_PART_MID, OPT_NET_LINKDOWN, OPT_PART_ALSO,
       OPT_NET_UNKNOWN_RANK, OPT_NET_SILENT };

static const struct argp_option opts[] = {
	{ "ranks", 'n', "N", 0, "World size (default 8)", 0 },
	{ "entries", 'e', "E", 0, "Entries per rank (default 100)", 0 },
	{ "comms", 'c', "C", 0, "Comm slots per rank: world + C-1 split levels (default 1)", 0 },
	{ "scenario", OPT_SC, "S", 0, "Fault to plant (default healthy)", 0 },
	{ "culprit", 'r', "R", 0, "Global rank at fault (default N/2)", 0 },
	{ "comm", OPT_COMM, "J", 0, "Comm slot of the fault (default 0, the world)", 0 },
	{ "group", OPT_GROUP, "G", 0, "Group size of split comms (default N>>slot)", 0 },
	{ "at", OPT_AT, "SEQ", 0, "Signature/late fault at this collective seq (default last)", 0 },
	{ "late-every", OPT_LATE_EVERY, "K", 0, "--scenario late: the culprit is also 5 s late at "
	  "every K-th collective step before --at (the job waits for it each time)", 0 },
	{ "ring", OPT_RING, "K", 0, "Ring size of wrapped ranks (default 2000)", 0 },
	{ "wrap", OPT_WRAP, "R", 0, "This rank's ring keeps only the last --ring entries (-1: all)", 0 },
	{ "dropped", OPT_DROPPED, "R", 0, "This rank reports dropped events", 0 },
	{ "seed", OPT_SEED, "S", 0, "Seed for comm ids (default 1)", 0 },
	{ "jobs", 'j', "J", 0, "Writer threads (default 2)", 0 },
	{ "preexisting", OPT_PRE, NULL, 0, "Comms created before attach: local ids, null "
	  "rank/nranks, seqs from attach", 0 },
	{ "preexisting-from", OPT_PRE_FROM, "R", 0, "Like --preexisting for ranks R and up only: "
	  "their recorders attached after the comms were made, the others' saw the init", 0 },
	{ "attach-skew", OPT_ATTACH, "K", 0, "With --preexisting: rank r attached (r*7)%(K+1) "
	  "steps late", 0 },
	{ "host-offset-us", OPT_HOSTOFF, "US", 0, "Clock of host h off by +-h*US microseconds", 0 },
	{ "split-null", OPT_SPLITNULL, NULL, 0, "Split comms (slots >= 1) as ncclCommSplit "
	  "children with null rank/nranks; split_key reverses the parent order", 0 },
	{ "init-rc", OPT_INIT_RC, "RC", 0, "ncclResult_t of the failed init (default 2)", 0 },
	{ "init-api", OPT_INIT_API, "NAME", 0, "API whose init failed (default ncclCommInitRank, "
	  "ncclCommSplit for split slots)", 0 },
	{ "stacks", OPT_STACKS, NULL, 0, "Version 2 dumps with stack snapshots (attach + dump)", 0 },
	{ "stack-unknown", OPT_STACK_UNKNOWN, "R", 0, "Rank R's snapshots have no frames "
	  "(ptrace denied)", 0 },
	{ "py-frames", OPT_PY_FRAMES, NULL, 0, "Entries carry Python frames (--py-stacks): "
	  "c10d's wrapper, then train.py's line per op, then <module>", 0 },
	{ "py-unsupported", OPT_PY_NONE, "R", 0, "With --py-frames: rank R's Python is not "
	  "supported (entries: frames [], frames_missing; py_stacks says why)", 0 },
	{ "per-host", OPT_PER_HOST, "H", 0, "Ranks per host (default 8)", 0 },
	{ "dump-spread-ms", OPT_SPREAD, "MS", 0, "Hosts dump up to MS ms apart while the job "
	  "runs on, a host's ranks 3 ms one after another (default 0: all at the end)", 0 },
	{ "step-ms", OPT_STEP, "MS", 0, "A step takes MS ms: a 0.9 ms collective, then the "
	  "rank sleeps (default 1)", 0 },
	{ "stale-host", OPT_STALE, "H", 0, "Host H dumped --stale-ms before the hang (its dumps "
	  "are from an older moment)", 0 },
	{ "sleep-between", OPT_SLEEP_BETWEEN, NULL, 0, "With --stacks: a healthy rank's dump "
	  "snapshot sleeps in Python (its step done) or waits in the step's collective", 0 },
	{ "culprit-in-nccl", OPT_CULPRIT_NCCL, NULL, 0, "skip with --stacks: the culprit's stack "
	  "waits in ncclAllReduce like the others' (its ring does not show the call)", 0 },
	{ "clock-off-host", OPT_CLOCK_OFF, "H", 0, "Host H's clock is 3 years behind", 0 },
	{ "alias-host", OPT_ALIAS, "H", 0, "Host H+1's recorder was given host H's --host-id "
	  "(another machine, another boot, one name)", 0 },
	{ "stale-ms", OPT_STALE_MS, "MS", 0, "--stale-host dumped MS ms before the hang "
	  "(default 5000)", 0 },
	{ "jitter-us", OPT_JITTER, "US", 0, "Each rank enters each step up to US us late, "
	  "pseudo-randomly; a collective completes 0.9 ms after its last rank entered", 0 },
	{ "period", OPT_PERIOD, "P", 0, "A training loop: the collectives' signatures repeat "
	  "every P collectives of a comm, no p2p (default: aperiodic within 120)", 0 },
	{ "net", OPT_NET, NULL, 0, "Dumps hold the processes' sockets: ranks of other hosts reach host --net-hub's "
	  "first rank over TCP (10.1.0.H+1); links busy, data in flight, acks coming", 0 },
	{ "net-hub", OPT_NET_HUB, "H", 0, "The host every other host's ranks connect to (default 0)", 0 },
	{ "part-host", OPT_PART_HOST, "H", 0, "partition: host H is cut off; 'none': no link is down "
	  "(busy links); 'ext': 192.0.2.77, no host of the job, is; 'zerowin': no link is down, "
	  "the hub reads nothing (its peers' data waits on a zero window) (default 1)", 0 },
	{ "part-mid", OPT_PART_MID, NULL, 0, "partition: the link went down while the hub sent "
	  "the results of the collective before the last: the ranks it could not reach never "
	  "completed it, the others wait in the last one", 0 },
	{ "net-linkdown", OPT_NET_LINKDOWN, "H", 0, "Host H's interface is down (no carrier; "
	  "repeatable, H < 64); without it every interface runs (a switch failed)", 0 },
	{ "part-also", OPT_PART_ALSO, "H", 0, "partition: host H (a leaf) is cut off too", 0 },
	{ "net-unknown-rank", OPT_NET_UNKNOWN_RANK, "R", 0, "Rank R's sockets are unknown", 0 },
	{ "net-silent-ms", OPT_NET_SILENT, "MS", 0, "The stuck connections heard their last ack MS "
	  "ms before the dump (default: since the ranks began to wait)", 0 },
	{ "net-unsent", OPT_NET_UNSENT, NULL, 0, "The cut connections' data was never sent (the "
	  "link refused it: window-probe timer) instead of retransmitted", 0 },
	{ "net-unknown", OPT_NET_UNKNOWN, NULL, 0, "Sockets unknown in every dump (the namespace "
	  "could not be entered)", 0 },
	{ "net-proc", OPT_NET_PROC, NULL, 0, "Sockets read from /proc/net/tcp: no ack ages", 0 },
	{ "output", 'o', "DIR", 0, "Directory to write (created)", 0 },
	{},
};

static bool hung_before_attach(void);

static long num_arg(struct argp_state *state, const char *name, const char *arg, long lo, long hi)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(arg, &end, 10);
	if (errno || end == arg || *end || v < lo || v > hi)
		argp_error(state, "invalid --%s '%s' (%ld..%ld)", name, arg, lo, hi);
	return v;
}

static error_t parse_arg(int key, char *arg, struct argp_state *state)
{
	switch (key) {
	case 'n': env.ranks = num_arg(state, "ranks", arg, 1, 1 << 20); break;
	case 'e': env.entries = num_arg(state, "entries", arg, 1, 1 << 22); break;
	case 'c': env.comms = num_arg(state, "comms", arg, 1, 16); break;
	case 'r': env.culprit = num_arg(state, "culprit", arg, 0, 1 << 20); break;
	case 'j': env.jobs = num_arg(state, "jobs", arg, 1, 64); break;
	case OPT_COMM: env.comm_slot = num_arg(state, "comm", arg, 0, 15); break;
	case OPT_GROUP: env.group = num_arg(state, "group", arg, 1, 1 << 20); break;
	case OPT_RING: env.ring = num_arg(state, "ring", arg, 1, 1 << 22); break;
	case OPT_WRAP: env.wrap = num_arg(state, "wrap", arg, -1, 1 << 20); break;
	case OPT_DROPPED: env.dropped = num_arg(state, "dropped", arg, -1, 1 << 20); break;
	case OPT_AT: env.at = num_arg(state, "at", arg, 1, 1L << 40); break;
	case OPT_SEED: env.seed = num_arg(state, "seed", arg, 0, 1L << 40); break;
	case 'o': env.out = arg; break;
	case OPT_INIT_RC: env.init_rc = num_arg(state, "init-rc", arg, 1, 1 << 20); break;
	case OPT_INIT_API: env.init_api = arg; break;
	case OPT_PRE: env.preexisting = true; break;
	case OPT_PRE_FROM: env.pre_from = num_arg(state, "preexisting-from", arg, 0, 1 << 20); break;
	case OPT_SPLITNULL: env.split_null = true; break;
	case OPT_STACKS: env.stacks = true; break;
	case OPT_PY_FRAMES: env.py_frames = true; break;
	case OPT_PY_NONE: env.py_none = num_arg(state, "py-unsupported", arg, 0, 1 << 20); break;
	case OPT_STACK_UNKNOWN:
		env.stack_unknown = num_arg(state, "stack-unknown", arg, 0, 1 << 20);
		break;
	case OPT_PER_HOST: env.per_host = num_arg(state, "per-host", arg, 1, 1 << 20); break;
	case OPT_SPREAD:
		env.spread_ns = num_arg(state, "dump-spread-ms", arg, 0, 3600000) * 1000000LL;
		break;
	case OPT_STEP: env.step_ns = num_arg(state, "step-ms", arg, 1, 600000) * 1000000LL; break;
	case OPT_JITTER: env.jitter_ns = num_arg(state, "jitter-us", arg, 0, 1 << 30) * 1000LL; break;
	case OPT_CULPRIT_NCCL: env.culprit_in_nccl = true; break;
	case OPT_SLEEP_BETWEEN: env.sleep_between = true; break;
	case OPT_PERIOD: env.period = num_arg(state, "period", arg, 1, 1 << 20); break;
	case OPT_NET: env.net = true; break;
	case OPT_NET_UNKNOWN: env.net = env.net_unknown = true; break;
	case OPT_NET_PROC: env.net = env.net_proc = true; break;
	case OPT_NET_UNSENT: env.net = env.net_unsent = true; break;
	case OPT_PART_MID: env.part_mid = true; break;
	case OPT_NET_LINKDOWN:
		env.net = true;
		env.net_linkdown |= 1ULL << num_arg(state, "net-linkdown", arg, 0, 63);
		break;
	case OPT_PART_ALSO: env.part_also = num_arg(state, "part-also", arg, 0, 250); break;
	case OPT_NET_UNKNOWN_RANK:
		env.net_unknown_rank = num_arg(state, "net-unknown-rank", arg, 0, 1 << 20);
		break;
	case OPT_NET_SILENT: env.net_silent_ms = num_arg(state, "net-silent-ms", arg, 1, 1 << 30); break;
	case OPT_NET_HUB: env.net_hub = num_arg(state, "net-hub", arg, 0, 250); break;
	case OPT_PART_HOST:
		env.part_host = !strcmp(arg, "none") ? PART_NONE : !strcmp(arg, "ext") ? PART_EXT :
				!strcmp(arg, "zerowin") ? PART_ZEROWIN :
				num_arg(state, "part-host", arg, 0, 250);
		break;
	case OPT_CLOCK_OFF: env.clock_off_host = num_arg(state, "clock-off-host", arg, 0, 1 << 20); break;
	case OPT_ALIAS: env.alias_host = num_arg(state, "alias-host", arg, 0, 1 << 20); break;
	case OPT_LATE_EVERY: env.late_every = num_arg(state, "late-every", arg, 1, 1 << 20); break;
	case OPT_STALE_MS:
		env.stale_ns = num_arg(state, "stale-ms", arg, 0, 3600000) * 1000000LL;
		break;
	case OPT_STALE: env.stale_host = num_arg(state, "stale-host", arg, 0, 1 << 20); break;
	case OPT_ATTACH: env.attach_skew = num_arg(state, "attach-skew", arg, 0, 1 << 20); break;
	case OPT_HOSTOFF:
		env.host_offset_ns = num_arg(state, "host-offset-us", arg, 0, 1 << 30) * 1000LL;
		break;
	case OPT_SC:
		for (int i = 0; i < SC__COUNT; i++)
			if (!strcmp(arg, scenario_names[i])) {
				env.sc = i;
				return 0;
			}
		argp_error(state, "unknown --scenario '%s'", arg);
		break;
	case ARGP_KEY_ARG:
		argp_error(state, "unexpected argument '%s'", arg);
		break;
	case ARGP_KEY_END:
		if (!env.out)
			argp_error(state, "no output directory: use -o DIR");
		if (env.culprit < 0)
			env.culprit = env.ranks / 2;
		if (env.culprit >= env.ranks)
			argp_error(state, "--culprit %d is not below --ranks %d", env.culprit, env.ranks);
		if (env.comm_slot >= env.comms)
			argp_error(state, "--comm %d is not below --comms %d", env.comm_slot, env.comms);
		if (hung_before_attach())
			env.stacks = true;
		if ((env.sc == SC_P2P || env.sc == SC_P2P_COUNT) && env.ranks < 2)
			argp_error(state, "p2p scenarios need 2 ranks or more");
		if (env.sc == SC_PARTITION) {
			env.net = true;
			if (env.part_host == -3)
				env.part_host = 1;
		} else if (env.part_host != -3) {
			argp_error(state, "--part-host needs --scenario partition");
		}
		if (env.net && (env.ranks + env.per_host - 1) / env.per_host > 250)
			argp_error(state, "--net: at most 250 hosts");
		if (env.net && (env.net_hub * env.per_host >= env.ranks ||
				(env.part_host >= 0 && env.part_host * env.per_host >= env.ranks)))
			argp_error(state, "--net-hub / --part-host: no such host");
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

/* ------------------------------------------------------------------ the schedule */

enum { OP_ALL_REDUCE, OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_BROADCAST, OP_REDUCE, OP_P2P };
static const char *const op_names[] = {
	"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
};

struct step {
	int slot, op;
	int64_t seq;		/* collective seq on its comm; p2p: the p2p seq of the send */
	int64_t count;
	int dtype;		/* 0 float32, 1 bfloat16, 2 float16 */
	int redop;		/* 0 sum, 1 avg, 2 max */
	int root_k;		/* root = root_k % group size */
};

static struct step *steps;
static int nr_steps;
static int64_t target_step = -1;	/* index of the step the fault sits in */
static int64_t t0 = 1795940000000000000LL;

static int group_size(int slot)
{
	int g;

	if (slot == 0)
		return env.ranks;
	g = env.group ? env.group : env.ranks >> slot;
	if (g < 1 || env.ranks % g)
		g = env.ranks;
	return g;
}

/* rank within the slot's comm: --split-null children order by a reversed split_key */
static int comm_rank(int slot, int r)
{
	int g = group_size(slot);

	return env.split_null && slot > 0 ? g - 1 - r % g : r % g;
}

static uint64_t splitmix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static void comm_id(int slot, int rank, char out[17])
{
	int g = group_size(slot);

	snprintf(out, 17, "%016" PRIx64,
		 splitmix(env.seed * 1000003ULL + slot * 65537ULL + (uint64_t)(rank / g)));
}

static bool init_fail(void)
{
	return env.sc == SC_INIT_FAIL || env.sc == SC_INIT_FAIL_ALL;
}

static int build_schedule(void)
{
	int64_t coll_seq[16] = { 0 }, kstep[16] = { 0 }, p2p_seq = 0, nentries = 0;
	bool p2p_final = env.sc == SC_P2P || env.sc == SC_P2P_COUNT;
	int cap = 1024;

	steps = malloc(cap * sizeof(*steps));
	if (!steps)
		return -ENOMEM;
	for (int t = 0;; t++) {
		struct step s = { 0 };
		int slot = t % env.comms;
		bool last;
		int k;

		last = nentries + (p2p_final ? 2 : 1) >= env.entries;
		if (last)
			slot = p2p_final ? 0 : env.comm_slot;
		k = (int)kstep[slot]++;
		if (env.period)
			k %= env.period;
		s.slot = slot;
		if ((slot == 0 && env.ranks >= 2 && k % 16 == 15 && !last && !env.period) ||
		    (last && p2p_final)) {
			s.op = OP_P2P;
			s.seq = p2p_seq + 1;	/* send's seq; the recv is seq + 1 */
			p2p_seq += 2;
			s.count = 4096 << (k % 3);
			s.dtype = k % 2;
			nentries += 2;
		} else {
			s.op = (k + slot) % 6;
			if (s.op == 5)
				s.op = OP_ALL_REDUCE;
			if ((last && (!env.period || env.sc == SC_ROOT)) ||
			    (env.at > 0 && slot == env.comm_slot && coll_seq[slot] + 1 == env.at)) {
				s.op = env.sc == SC_ROOT ? OP_BROADCAST : OP_ALL_REDUCE;
			}
			s.seq = ++coll_seq[slot];
			s.count = 1024LL << (k % 8);
			s.dtype = k % 3 == 2 ? 1 : 0;
			s.redop = k % 5 == 4 ? 1 : 0;
			s.root_k = k;
			nentries++;
		}
		if (nr_steps == cap) {
			struct step *p = realloc(steps, (cap *= 2) * sizeof(*steps));

			if (!p)
				return -ENOMEM;
			steps = p;
		}
		steps[nr_steps++] = s;
		if (env.at > 0 && s.op != OP_P2P && slot == env.comm_slot && s.seq == env.at)
			target_step = nr_steps - 1;
		if (last)
			break;
	}
	if (env.at <= 0 || target_step < 0)
		target_step = nr_steps - 1;
	if (init_fail()) {
		/* the first collective on the comm whose init failed */
		for (int t = 0; t < nr_steps; t++)
			if (steps[t].slot == env.comm_slot && steps[t].op != OP_P2P) {
				target_step = t;
				break;
			}
	}
	return 0;
}

/* ------------------------------------------------------------------ JSON writer */

/* out of memory ends the generator: a corpus with a hole would be a wrong corpus */
static void need(struct growbuf *o, size_t n)
{
	if (!growbuf__reserve(o, n)) {
		fprintf(stderr, "tptrace-fr-gen: out of memory\n");
		exit(1);
	}
}

static void put(struct growbuf *o, const char *s)
{
	size_t n = strlen(s);

	need(o, n);
	memcpy(o->p + o->len, s, n);
	o->len += n;
}

static void put_i(struct growbuf *o, int64_t v)
{
	char tmp[24];
	int n = 0;
	uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;

	do {
		tmp[n++] = '0' + u % 10;
		u /= 10;
	} while (u);
	need(o, n + 1);
	if (v < 0)
		o->p[o->len++] = '-';
	while (n)
		o->p[o->len++] = tmp[--n];
}

static void put_kv_i(struct growbuf *o, const char *key, int64_t v)
{
	put(o, key);
	put_i(o, v);
}

static void put_kv_s(struct growbuf *o, const char *key, const char *v)
{
	put(o, key);
	put(o, "\"");
	put(o, v);
	put(o, "\"");
}

static const char *const dtype_names[] = { "float32", "bfloat16", "float16" };
static const char *const torch_dtypes[] = { "Float", "BFloat16", "Half" };
static const char *const redop_names[] = { "sum", "avg", "max", "min" };

struct ent {
	int64_t done;		/* completion on its host's clock; 0: created + 0.9 ms */
	int64_t record_id, coll_seq, p2p_seq, count, in, out, created;
	const char *comm;
	const char *op;
	int dtype, redop, root, peer, state;	/* state: 0 enqueued 1 started 2 completed */
	bool p2p;
	bool init_failed;	/* the failed comm init (op comm_init, state failed) */
	int64_t group_id;
};

/* The entry of a failed communicator init, as the recorder writes it. */
static void put_init_entry(struct growbuf *o, const struct ent *e, int64_t tid)
{
	put_kv_i(o, "{" KQ(FRK_RECORD_ID), e->record_id);
	put_kv_s(o, "," KQ(FRK_COMM_ID), e->comm);
	put(o, "," KQ(FRK_COLLECTIVE_SEQ_ID) "0," KQ(FRK_P2P_SEQ_ID) "0," KQ(FRK_GROUP_ID) "0,"
	       KQ(FRK_OP) "\"comm_init\","
	       KQ(FRK_PROFILING_NAME) "\"nccl:comm_init\"," KQ(FRK_IS_P2P) "false,"
	       KQ(FRK_COUNT) "0," KQ(FRK_DTYPE) "null,"
	       KQ(FRK_INPUT_SIZES) "[]," KQ(FRK_OUTPUT_SIZES) "[]," KQ(FRK_INPUT_DTYPES) "[],"
	       KQ(FRK_OUTPUT_DTYPES) "[],"
	       KQ(FRK_REDUCE_OP) "null," KQ(FRK_ROOT) "null," KQ(FRK_PEER) "null,"
	       KQ(FRK_STATE) "\"failed\"");
	put_kv_i(o, "," KQ(FRK_TIME_CREATED_NS), e->created);
	put(o, "," KQ(FRK_TIME_DISCOVERED_STARTED_NS) "null,"
	       KQ(FRK_TIME_DISCOVERED_COMPLETED_NS) "null,"
	       KQ(FRK_DURATION_MS) "null");
	put_kv_i(o, "," KQ(FRK_API_ENTER_NS), e->created);
	put_kv_i(o, "," KQ(FRK_API_EXIT_NS), e->created + 250000000);
	put_kv_i(o, "," KQ(FRK_RC), env.init_rc);
	put_kv_i(o, "," KQ(FRK_THREAD_ID), tid);
	put(o, "," KQ(FRK_THREAD_NAME) "\"python3\"}");
}

/* --py-frames: what tptrace fr --py-stacks writes for a call from train.py (innermost
 * first): torch.distributed's wrapper of the op, the line of train.py that called it, and
 * the module's loop; one line per op so each op has its own call site */
static bool py_none_now;	/* the dump being written is of env.py_none's rank */

static void put_py_frames(struct growbuf *o, const struct ent *e)
{
	static const char *const ops[] = { "all_reduce", "all_gather", "reduce_scatter", "broadcast",
					   "reduce", "all_to_all", "gather", "scatter", "send",
					   "recv" };
	int k = 0;

	if (py_none_now) {
		put(o, "," KQ(FRK_FRAMES) "[],"
		       KQ(FRK_FRAMES_MISSING) "\"not captured (the process was not set "
		       "up for Python stacks)\"");
		return;
	}
	while (k < (int)(sizeof(ops) / sizeof(ops[0])) && strcmp(ops[k], e->op))
		k++;
	put(o, "," KQ(FRK_FRAMES) "[{" KQ(FRK_NAME));
	put_kv_s(o, "", e->op);
	put(o, "," KQ(FRK_FILENAME) "\"/usr/lib/python3/dist-packages/torch/distributed/"
	       "distributed_c10d.py\"");
	put_kv_i(o, "," KQ(FRK_LINE), 2500 + 40 * k);
	put(o, "},{" KQ(FRK_NAME) "\"Trainer.step\"," KQ(FRK_FILENAME) "\"/job/train.py\"");
	put_kv_i(o, "," KQ(FRK_LINE), 40 + k);
	put(o, "},{" KQ(FRK_NAME) "\"<module>\"," KQ(FRK_FILENAME) "\"/job/train.py\","
	       KQ(FRK_LINE) "90}]");
}

static void put_entry(struct growbuf *o, const struct ent *e, int64_t tid)
{
	static const char *const states[] = { "enqueued", "started", "completed" };

	if (e->init_failed) {
		put_init_entry(o, e, tid);
		return;
	}

	put_kv_i(o, "{" KQ(FRK_RECORD_ID), e->record_id);
	put_kv_s(o, "," KQ(FRK_COMM_ID), e->comm);
	put_kv_i(o, "," KQ(FRK_COLLECTIVE_SEQ_ID), e->coll_seq);
	put_kv_i(o, "," KQ(FRK_P2P_SEQ_ID), e->p2p_seq);
	put_kv_i(o, "," KQ(FRK_GROUP_ID), e->group_id);
	put_kv_s(o, "," KQ(FRK_OP), e->op);
	put(o, "," KQ(FRK_PROFILING_NAME) "\"nccl:");
	put(o, e->op);
	if (e->p2p) {
		put(o, " ");
		if (!strcmp(e->op, "send")) {
			put_i(o, e->root);	/* root carries the own rank for the name */
			put(o, "->");
			put_i(o, e->peer);
		} else {
			put_i(o, e->root);
			put(o, "<-");
			put_i(o, e->peer);
		}
	}
	put(o, "\"");
	put(o, e->p2p ? "," KQ(FRK_IS_P2P) "true" : "," KQ(FRK_IS_P2P) "false");
	put_kv_i(o, "," KQ(FRK_COUNT), e->count);
	put_kv_s(o, "," KQ(FRK_DTYPE), dtype_names[e->dtype]);
	put_kv_i(o, "," KQ(FRK_INPUT_SIZES) "[[", e->in);
	put_kv_i(o, "]]," KQ(FRK_OUTPUT_SIZES) "[[", e->out);
	put_kv_s(o, "]]," KQ(FRK_INPUT_DTYPES) "[", torch_dtypes[e->dtype]);
	put_kv_s(o, "]," KQ(FRK_OUTPUT_DTYPES) "[", torch_dtypes[e->dtype]);
	put(o, "]");
	if (e->redop >= 0)
		put_kv_s(o, "," KQ(FRK_REDUCE_OP), redop_names[e->redop]);
	else
		put(o, "," KQ(FRK_REDUCE_OP) "null");
	if (!e->p2p && e->root >= 0)
		put_kv_i(o, "," KQ(FRK_ROOT), e->root);
	else
		put(o, "," KQ(FRK_ROOT) "null");
	if (e->p2p)
		put_kv_i(o, "," KQ(FRK_PEER), e->peer);
	else
		put(o, "," KQ(FRK_PEER) "null");
	put(o, "," KQ(FRK_STREAM) "\"0x7f00c1000000\"," KQ(FRK_SENDBUFF) "\"0x7f0000000000\","
	       KQ(FRK_RECVBUFF) "\"0x7f0000400000\"");
	put_kv_s(o, "," KQ(FRK_STATE), states[e->state]);
	put_kv_i(o, "," KQ(FRK_TIME_CREATED_NS), e->created);
	if (e->state >= 1)
		put_kv_i(o, "," KQ(FRK_TIME_DISCOVERED_STARTED_NS), e->created + 100000);
	else
		put(o, "," KQ(FRK_TIME_DISCOVERED_STARTED_NS) "null");
	if (e->state == 2) {
		put_kv_i(o, "," KQ(FRK_TIME_DISCOVERED_COMPLETED_NS),
			 e->done ? e->done : e->created + 900000);
		put(o, "," KQ(FRK_DURATION_MS) "0.8");
	} else {
		put(o, "," KQ(FRK_TIME_DISCOVERED_COMPLETED_NS) "null," KQ(FRK_DURATION_MS) "null");
	}
	put_kv_i(o, "," KQ(FRK_API_ENTER_NS), e->created);
	put_kv_i(o, "," KQ(FRK_API_EXIT_NS), e->created + 12000);
	put(o, "," KQ(FRK_RC) "0");
	put_kv_i(o, "," KQ(FRK_THREAD_ID), tid);
	put(o, "," KQ(FRK_THREAD_NAME) "\"python3\"");
	if (env.py_frames)
		put_py_frames(o, e);
	put(o, "}");
}

static bool hang_at_end(void)
{
	return (target_step == nr_steps - 1 && env.sc != SC_HEALTHY && env.sc != SC_LATE &&
		env.sc != SC_STUCK && env.sc != SC_STRAGGLER) || env.sc == SC_SKIP_ON;
}

static bool in_target_group(int rank)
{
	int g = group_size(steps[target_step].slot);

	return rank / g == env.culprit / g;
}

/* this rank's init of the target comm failed */
static bool init_failed_on(int rank)
{
	return init_fail() && in_target_group(rank) &&
	       (env.sc == SC_INIT_FAIL_ALL || rank == env.culprit);
}

static const char *init_api(int slot)
{
	if (env.init_api)
		return env.init_api;
	return slot ? "ncclCommSplit" : "ncclCommInitRank";
}

/* how late rank r enters step t after the step began (true clock): its place on the host,
 * --jitter-us, and a straggler's 30 % of the step */
static int64_t entry_delay(int r, int t)
{
	int64_t d = (r % env.per_host) * 10000LL;

	if (env.jitter_ns)
		d += (int64_t)(splitmix(env.seed * 7777ULL + (uint64_t)t * 1000003ULL + r) %
			       (uint64_t)env.jitter_ns);
	if (env.sc == SC_STRAGGLER && r == env.culprit)
		d += env.step_ns * 3 / 10;
	return d;
}

/* the latest entry into step t of the ranks of r's group (its collective completes 0.9 ms
 * after it) */
static int64_t last_entry_delay(int r, int t)
{
	int g = group_size(steps[t].slot), first = r / g * g;
	int64_t m = 0;

	if (!env.jitter_ns && env.sc != SC_STRAGGLER)
		return 0;
	for (int q = first; q < first + g && q < env.ranks; q++)
		if (entry_delay(q, t) > m)
			m = entry_delay(q, t);
	return m;
}

/* host h's clock minus the true time: --host-offset-us, and --clock-off-host's years */
static int64_t host_clock(int h)
{
	return env.host_offset_ns * h * (h % 2 ? -1 : 1) -
	       (h == env.clock_off_host ? 3 * 365 * 86400LL * 1000000000LL : 0);
}

/* the dump being written: its rank's newest collective had completed (--sleep-between) */
static __thread bool last_done;

/* rank r's recorder attached after its comms were made */
static bool pre(int r)
{
	return env.preexisting || (env.pre_from >= 0 && r >= env.pre_from);
}

/* dumps taken at different instants (--dump-spread-ms, --stale-host) */
static bool timed(void)
{
	return env.spread_ns > 0 || env.stale_host >= 0;
}

#define LATE_NS 5000000000LL	/* --scenario late: how late the culprit enters */

/* --scenario late: the culprit is late at step t (--at, and with --late-every every K-th
 * collective step before it) */
static bool late_at(int t)
{
	return env.sc == SC_LATE &&
	       (t == target_step || (env.late_every && t < target_step && steps[t].op != OP_P2P &&
				     steps[t].slot == steps[target_step].slot &&
				     (target_step - t) % env.late_every == 0));
}

/* how much later than scheduled step t begins: the job waited for each late step before it */
static int64_t late_shift(int t)
{
	int64_t d = 0;

	for (int k = 0; env.late_every && k < t && k < nr_steps; k++)
		d += late_at(k) ? LATE_NS : 0;
	return d;
}

/* When rank r's dump was taken, on the true clock. Hosts in a scrambled order up to the
 * spread apart, a host's ranks 3 ms one after another. A healthy job's newest dump is at the
 * end of the schedule (the job runs on past it); a hang's dumps come 60 s after it, but for
 * --stale-host's, taken 5 s before it. */
static int64_t dump_instant(int r)
{
	int h = r / env.per_host, lr = r % env.per_host;
	int nhosts = (env.ranks + env.per_host - 1) / env.per_host;
	int64_t off = nhosts > 1 ? env.spread_ns * ((h * 7919LL) % nhosts) / (nhosts - 1) : 0;
	int64_t hang = t0 + target_step * env.step_ns;
	int64_t mine = lr * 3000000LL;

	if (h == env.stale_host)
		return hang - env.stale_ns + mine;
	if (hang_at_end() || init_fail())
		return hang + 60000000000LL + off + mine;
	/* --scenario late: the job's end waits 5 s for the late rank (a dump taken before its
	 * collective completed cannot hold that completion) */
	return t0 + (int64_t)nr_steps * env.step_ns - env.spread_ns - 3000000LL * env.per_host +
	       (env.sc == SC_LATE ? LATE_NS + late_shift(nr_steps) : 0) + off + mine;
}

struct comm_hdr {
	char id[64];
	int64_t last_enq, last_started, last_done, last_p2p;
};

/* The entries of one rank, the whole history (the ring keeps a suffix). Returns the count. */
/* --part-mid: a rank the hub's results of the collective before the last never reached */
static bool part_behind(int r)
{
	int h = r / env.per_host;

	return env.sc == SC_PARTITION && env.part_mid && env.part_host >= 0 &&
	       (env.part_host == env.net_hub ? h != env.net_hub : h == env.part_host);
}

static int64_t rank_entries(int r, struct ent *ents, struct comm_hdr *hdr, int64_t *dump_time)
{
	int64_t n = 0;
	bool culprit = r == env.culprit;
	int stop = nr_steps;	/* steps this rank reached */
	int start = pre(r) ? (r * 7) % (env.attach_skew + 1) : 0;
	int64_t base[16] = { 0 }, pbase = 0;	/* seqs before attach, per slot / p2p */
	int h = r / env.per_host, lr = r % env.per_host;
	int64_t clock = host_clock(h);
	int64_t dump_true = timed() ? dump_instant(r) : INT64_MAX;

	if (culprit && (env.sc == SC_SKIP || env.sc == SC_KILLED))
		stop = nr_steps - 1;
	if (part_behind(r))
		stop = nr_steps - 1;
	if (init_fail()) {
		/* the job stops at the first collective on the failed comm: its working members
		 * wait in it, the failed ones never enter it */
		stop = init_failed_on(r) ? (int)target_step : (int)target_step + 1;
	}
	for (int j = 0; j < env.comms; j++) {
		if (pre(r))
			snprintf(hdr[j].id, sizeof(hdr[j].id), "local:node%d:%d:55d0c0ff%04x", h,
				 10000 + r, 0xee00 + j * 0x100);
		else
			comm_id(j, r, hdr[j].id);
		hdr[j].last_enq = hdr[j].last_started = hdr[j].last_done = hdr[j].last_p2p = 0;
	}
	if (init_failed_on(r)) {
		struct ent e = { 0 };

		e.init_failed = true;
		e.comm = hdr[env.comm_slot].id;
		e.created = t0 - 300000000 + lr * 10000 + clock;
		e.record_id = n;
		ents[n++] = e;
	}
	for (int t = 0; t < start && t < stop; t++) {
		if (steps[t].op == OP_P2P)
			pbase = steps[t].seq + 1;
		else
			base[steps[t].slot] = steps[t].seq;
	}
	for (int t = start; t < stop; t++) {
		const struct step *s = &steps[t];
		int g = group_size(s->slot), crank = comm_rank(s->slot, r);
		bool target = t == target_step && in_target_group(r);
		bool late = late_at(t) && in_target_group(r);
		int64_t skipped = 0;
		int64_t begin = t0 + (int64_t)t * env.step_ns + late_shift(t);
		int64_t created = begin + entry_delay(r, t) + clock;
		int64_t done = begin + last_entry_delay(r, t) + 900000 + clock;
		int state = 2;
		struct ent e = { 0 };

		/* --scenario late: the culprit enters 5 s late and everyone's completion waits
		 * for it (before the dump checks: a dump holds no time after its own) */
		if (late) {
			if (culprit)
				created += LATE_NS;
			done = begin + LATE_NS + entry_delay(env.culprit, t) + 900000 + clock;
		}
		/* its dump was taken before it entered this step */
		if (created - clock > dump_true)
			break;

		e.comm = hdr[s->slot].id;
		e.created = created;
		if (env.jitter_ns || env.sc == SC_STRAGGLER)
			e.done = done;
		if (target && (hang_at_end() || init_fail()))
			state = 1;
		if (part_behind(r) && t == nr_steps - 2)
			state = 1;	/* the hub's results never reached it */
		/* completed 0.9 ms after the step began: not yet at its dump */
		if (done - clock > dump_true)
			state = 1;
		if (env.sc == SC_SKIP_ON && t >= target_step) {
			/* everything from the skipped collective on waits */
			state = 0;
			if (culprit && t == target_step)
				continue;
			if (culprit && s->slot == steps[target_step].slot && s->op != OP_P2P)
				skipped = 1;
		}
		if (s->op == OP_P2P) {
			int next = (crank + 1) % g, prev = (crank + g - 1) % g;
			int sstate = state, rstate = state;
			int64_t rcount = s->count;
			bool post_recv = true;

			if (target && env.sc == SC_P2P) {
				/* the culprit never posts its recv: its send and the sends
				 * towards it wait */
				sstate = rstate = 2;
				if (culprit) {
					sstate = 1;
					post_recv = false;
				}
				if (next == env.culprit % g)
					sstate = 1;
				if (prev == env.culprit % g)
					rstate = 1;
			} else if (target && env.sc == SC_P2P_COUNT) {
				sstate = rstate = 2;
				if (culprit) {
					rcount = s->count * 2;
					rstate = 1;
				}
				if (next == env.culprit % g)
					sstate = 1;
			}
			e.p2p = true;
			e.op = "send";
			e.coll_seq = 0;
			e.p2p_seq = s->seq - pbase;
			e.count = e.in = e.out = s->count;
			e.dtype = s->dtype;
			e.redop = -1;
			e.root = crank;
			e.peer = next;
			e.state = sstate;
			e.group_id = t + 1;
			e.record_id = n;
			ents[n++] = e;
			hdr[s->slot].last_p2p = s->seq - pbase;
			if (post_recv) {
				e.op = "recv";
				e.p2p_seq = s->seq + 1 - pbase;
				e.count = e.in = e.out = rcount;
				e.peer = prev;
				e.state = rstate;
				e.created += 2000;
				e.record_id = n;
				ents[n++] = e;
				hdr[s->slot].last_p2p = s->seq + 1 - pbase;
			}
			continue;
		}
		e.op = op_names[s->op];
		e.coll_seq = s->seq - base[s->slot] - skipped;
		e.p2p_seq = 0;
		e.count = s->count;
		e.dtype = s->dtype;
		e.redop = (s->op == OP_ALL_REDUCE || s->op == OP_REDUCE_SCATTER || s->op == OP_REDUCE) ?
			  s->redop : -1;
		e.root = (s->op == OP_BROADCAST || s->op == OP_REDUCE) ? s->root_k % g : -1;
		if (target && culprit) {
			switch (env.sc) {
			case SC_SIZE: e.count *= 2; break;
			case SC_DTYPE: e.dtype = (e.dtype + 1) % 3; break;
			case SC_OP: e.redop = 2; break;
			case SC_ROOT: e.root = (e.root + 1) % g; break;
			case SC_TYPE: e.op = "all_gather"; e.redop = -1; break;
			case SC_STUCK: state = 1; break;
			default: break;
			}
		}
		/* everyone's completion waits for the late rank */
		if (late && state == 2)
			e.done = done;
		e.in = e.out = e.count;
		/* the recorder writes -1 for sizes it cannot know: nranks of a comm created
		 * before attach */
		if (!strcmp(e.op, "all_gather"))
			e.out = pre(r) ? -1 : e.count * g;
		else if (!strcmp(e.op, "reduce_scatter"))
			e.in = pre(r) ? -1 : e.count * g;
		e.state = state;
		e.record_id = n;
		ents[n++] = e;
		hdr[s->slot].last_enq = e.coll_seq;
		hdr[s->slot].last_started = e.coll_seq;
		if (state == 2)
			hdr[s->slot].last_done = e.coll_seq;
	}
	last_done = !n || ents[n - 1].state == 2;
	if (timed()) {
		*dump_time = dump_true + clock;
		return n;
	}
	*dump_time = t0 + (int64_t)nr_steps * 1000000 +
		     (hang_at_end() || init_fail() || env.sc == SC_STUCK ? 60000000000LL :
		      1000000000LL) +
		     (env.sc == SC_LATE ? LATE_NS + late_shift(nr_steps) : 0) + clock;
	if (culprit && env.sc == SC_KILLED)
		*dump_time = t0 + (int64_t)nr_steps * 1000000 + clock;
	return n;
}

/* ------------------------------------------------------------------ stacks (version 2) */

static bool hung_before_attach(void)
{
	return env.sc >= SC_HUNG_MISSING && env.sc <= SC_NO_PROGRESS;
}

/* what a rank's issuing thread is doing in a snapshot */
enum doing { DO_PY, DO_NCCL_BUSY, DO_NCCL_WAIT, DO_SYNC_WAIT, DO_SLEEP_PY, DO_SPIN_PY };

struct gframe {
	const char *kind, *func, *where;	/* where: module (native) or file (python) */
	int64_t off_or_line;
};

#define LIBC "/usr/lib/x86_64-linux-gnu/libc.so.6"
#define PY "/usr/bin/python3.11"
#define TRAIN "/opt/app/train.py"
static const struct gframe f_nccl[] = {
	{ "native", "__futex_abstimed_wait_common", LIBC, 0x91d36 },
	{ "native", "ncclAllReduce", "/usr/lib/x86_64-linux-gnu/libnccl.so.2", 0x5e1f0 },
	{ "native", "c10d::ProcessGroupNCCL::allreduce(std::vector<at::Tensor, "
		    "std::allocator<at::Tensor> >&, c10d::AllreduceOptions const&)",
	  "/opt/torch/lib/libtorch_cuda.so", 0x1c2a0f0 },
	{ "python", "all_reduce", "/opt/torch/distributed/distributed_c10d.py", 2050 },
	{ "python", "Trainer.step", TRAIN, 42 },
	{ "python", "main", TRAIN, 88 },
	{ "native", "_PyEval_EvalFrameDefault", PY, 0x1a2b40 },
	{ "native", "main", PY, 0x27c1e0 },
	{ 0 },
};
static const struct gframe f_sync[] = {
	{ "native", "ioctl", LIBC, 0x11b2ab },
	{ "native", NULL, "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x2f4e1a },	/* stripped */
	{ "native", "cudaStreamSynchronize", "/usr/local/cuda/lib64/libcudart.so.13", 0x6f12a },
	{ "python", "Trainer.sync_metrics", TRAIN, 51 },
	{ "python", "Trainer.step", TRAIN, 44 },
	{ "python", "main", TRAIN, 88 },
	{ "native", "_PyEval_EvalFrameDefault", PY, 0x1a2b40 },
	{ "native", "main", PY, 0x27c1e0 },
	{ 0 },
};
static const struct gframe f_sleep[] = {
	{ "native", "clock_nanosleep", LIBC, 0xe5f1a },
	{ "native", "pysleep", PY, 0x2a1b3c },
	{ "python", "load_batch", "/opt/app/data.py", 17 },
	{ "python", "Trainer.step", TRAIN, 40 },
	{ "python", "main", TRAIN, 88 },
	{ "native", "_PyEval_EvalFrameDefault", PY, 0x1a2b40 },
	{ "native", "main", PY, 0x27c1e0 },
	{ 0 },
};
static const struct gframe f_spin[] = {
	{ "python", "spin_wait", "/opt/app/data.py", 23 },
	{ "python", "Trainer.step", TRAIN, 40 },
	{ "python", "main", TRAIN, 88 },
	{ "native", "_PyEval_EvalFrameDefault", PY, 0x1a2b40 },
	{ "native", "main", PY, 0x27c1e0 },
	{ 0 },
};
static const struct gframe f_py[] = {
	{ "python", "Trainer.forward", TRAIN, 30 },
	{ "python", "Trainer.step", TRAIN, 39 },
	{ "python", "main", TRAIN, 88 },
	{ "native", "_PyEval_EvalFrameDefault", PY, 0x1a2b40 },
	{ "native", "main", PY, 0x27c1e0 },
	{ 0 },
};
static const struct gframe f_poll[] = {
	{ "native", "__poll", LIBC, 0x10c1bf },
	{ "native", NULL, "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x31a2c0 },
	{ "native", "start_thread", LIBC, 0x8fb5a },
	{ 0 },
};

static void put_frames(struct growbuf *o, const struct gframe *fr)
{
	char buf[64];

	put(o, "," KQ(FRK_FRAMES) "[");
	for (int i = 0; fr[i].kind; i++) {
		put_kv_s(o, i ? ",{" KQ(FRK_KIND) : "{" KQ(FRK_KIND), fr[i].kind);
		if (fr[i].func)
			put_kv_s(o, "," KQ(FRK_FUNC), fr[i].func);
		else
			put(o, "," KQ(FRK_FUNC) "null");
		if (!strcmp(fr[i].kind, "python")) {
			put_kv_s(o, "," KQ(FRK_FILE), fr[i].where);
			put_kv_i(o, "," KQ(FRK_LINE), fr[i].off_or_line);
		} else {
			put(o, fr[i].func ? "," KQ(FRK_FUNC_OFF) "\"0x2a\"" :
					    "," KQ(FRK_FUNC_OFF) "null");
			put_kv_s(o, "," KQ(FRK_MODULE), fr[i].where);
			put(o, "," KQ(FRK_BUILD_ID) "\"4b1d0c3e9a\"");
			snprintf(buf, sizeof(buf), "0x%" PRIx64, fr[i].off_or_line);
			put_kv_s(o, "," KQ(FRK_MODULE_OFF), buf);
			snprintf(buf, sizeof(buf), "0x7f3a1c%06" PRIx64, fr[i].off_or_line & 0xffffff);
			put_kv_s(o, "," KQ(FRK_PC), buf);
		}
		put(o, "}");
	}
	put(o, "]");
}

static enum doing rank_doing(int r, bool at_attach)
{
	bool culprit = r == env.culprit;

	if (hung_before_attach()) {
		if (!culprit)
			return DO_NCCL_WAIT;
		switch (env.sc) {
		case SC_HUNG_MISSING: return DO_SLEEP_PY;
		case SC_HUNG_SPIN: return DO_SPIN_PY;
		case SC_STUCK_SYNC: return DO_SYNC_WAIT;
		default: return DO_NCCL_WAIT;
		}
	}
	if (at_attach)
		return r % 2 ? DO_NCCL_BUSY : DO_PY;
	/* a skipping culprit is elsewhere; any other fault leaves it in the collective too */
	if (hang_at_end() && !init_fail())
		return culprit && env.sc == SC_SKIP && !env.culprit_in_nccl ? DO_SLEEP_PY :
		       DO_NCCL_WAIT;
	if (env.sc == SC_STUCK && culprit)
		return DO_SYNC_WAIT;
	/* --sleep-between: asleep in Python after a completed step, else waiting in it */
	if (env.sleep_between)
		return last_done ? DO_SLEEP_PY : DO_NCCL_WAIT;
	return r % 2 ? DO_NCCL_BUSY : DO_PY;
}

static void put_snapshot(struct growbuf *o, int r, int64_t pid, bool attach, int64_t time_ns)
{
	static const struct {
		const char *where, *api, *progress, *state, *wchan;
		const struct gframe *frames;
	} d[] = {
		[DO_PY] = { "python", NULL, "yes", "R", NULL, f_py },
		[DO_NCCL_BUSY] = { "nccl", "ncclAllReduce", "yes", "S", "futex_wait_queue", f_nccl },
		[DO_NCCL_WAIT] = { "nccl", "ncclAllReduce", "none", "S", "futex_wait_queue", f_nccl },
		[DO_SYNC_WAIT] = { "cuda", "cudaStreamSynchronize", "none", "S", "nvidia_ioctl",
				   f_sync },
		[DO_SLEEP_PY] = { "idle", NULL, "none", "S", "hrtimer_nanosleep", f_sleep },
		[DO_SPIN_PY] = { "python", NULL, "yes", "R", NULL, f_spin },
	};
	enum doing what = rank_doing(r, attach);
	bool unknown = r == env.stack_unknown;

	put_kv_s(o, "{" KQ(FRK_TAKEN), attach ? "attach" : "dump");
	put_kv_i(o, "," KQ(FRK_TIME_NS), time_ns);
	put_kv_i(o, "," KQ(FRK_MONO_NS), time_ns - t0 + 941645312);
	put(o, "," KQ(FRK_SAMPLES) "3," KQ(FRK_INTERVAL_MS) "200," KQ(FRK_STOPPED_MS_MAX) "2.5");
	if (unknown)
		put(o, "," KQ(FRK_PTRACE_ERROR) "\"ptrace: Operation not permitted\"");
	else
		put(o, "," KQ(FRK_PTRACE_ERROR) "null");
	put(o, "," KQ(FRK_PYTHON) "\"3.11.7\"," KQ(FRK_PYTHON_ERROR) "null," KQ(FRK_EXITED) "false,"
	       KQ(FRK_THREADS) "[");
	for (int t = 0; t < 3; t++) {
		static const char *const names[] = { "python3", "pt_autograd_0", "cuda-EvtHandlr" };
		bool main = t == 0;

		put_kv_i(o, t ? ",{" KQ(FRK_TID) : "{" KQ(FRK_TID), pid + t);
		put_kv_s(o, "," KQ(FRK_NAME), names[t]);
		put_kv_s(o, "," KQ(FRK_STATE), main ? d[what].state : "S");
		if (main && d[what].wchan)
			put_kv_s(o, "," KQ(FRK_WCHAN), d[what].wchan);
		else if (main)
			put(o, "," KQ(FRK_WCHAN) "null");
		else
			put(o, "," KQ(FRK_WCHAN) "\"do_sys_poll\"");
		put(o, "," KQ(FRK_KERNEL_STACK) "[\"do_sys_poll\",\"__x64_sys_poll\"],"
		       KQ(FRK_KERNEL_STACK_ERROR) "null");
		if (unknown) {
			put(o, "," KQ(FRK_WHERE) "\"unknown\"," KQ(FRK_API) "null,"
			       KQ(FRK_PROGRESS) "\"unknown\"");
		} else if (main) {
			put_kv_s(o, "," KQ(FRK_WHERE), d[what].where);
			if (d[what].api)
				put_kv_s(o, "," KQ(FRK_API), d[what].api);
			else
				put(o, "," KQ(FRK_API) "null");
			put_kv_s(o, "," KQ(FRK_PROGRESS), d[what].progress);
		} else {
			put(o, "," KQ(FRK_WHERE) "\"idle\"," KQ(FRK_API) "null,"
			       KQ(FRK_PROGRESS) "\"none\"");
		}
		put(o, main ? "," KQ(FRK_MAIN) "true," KQ(FRK_ISSUING) "true,"
			      KQ(FRK_PYTHON) "true" :
		       "," KQ(FRK_MAIN) "false," KQ(FRK_ISSUING) "false," KQ(FRK_PYTHON) "false");
		put(o, "," KQ(FRK_TRUNCATED) "false");
		if (unknown) {
			put(o, "," KQ(FRK_UNWIND_ERROR) "\"ptrace: Operation not permitted\","
			       KQ(FRK_FRAMES) "[]}");
			continue;
		}
		put(o, "," KQ(FRK_UNWIND_ERROR) "null");
		put_frames(o, main ? d[what].frames : f_poll);
		put(o, "}");
	}
	put(o, "]}");
}

static void put_stacks(struct growbuf *o, int r, int64_t pid, int64_t dump_time)
{
	/* hung before attach: tptrace came 8 s before the dump; else before the first entry */
	int64_t attach = hung_before_attach() ? dump_time - 8000000000LL : t0 - 1000000000LL;

	put(o, ",\n" KQ(FRK_STACKS) "[");
	put_snapshot(o, r, pid, true, attach);
	if (r == env.culprit && env.sc == SC_KILLED) {
		/* an exit dump: the process is gone, only the attach snapshot exists */
		put(o, "],"
		       KQ(FRK_STACKS_ERROR) "\"the process exited: only the snapshot at attach\"");
		return;
	}
	put(o, ",\n");
	put_snapshot(o, r, pid, false, dump_time);
	put(o, "]," KQ(FRK_STACKS_ERROR) "null");
}

/* one socket of "net" (docs/fr-schema.md "Network"), as a link left it: idle since silent_ms;
 * busy (data in flight, acks coming); stuck (data retransmitted, no ack since silent_ms);
 * unsent (a link down refused it: queued under the window-probe timer, backing off); zerowin
 * (a peer alive that reads nothing: queued under the probe timer, each probe acked) */
enum sock_kind { SK_IDLE, SK_BUSY, SK_STUCK, SK_UNSENT, SK_ZEROWIN };

static void put_sock(struct growbuf *o, bool first, const char *local, const char *remote,
		     enum sock_kind k, int64_t silent_ms)
{
	static const struct {
		int tx, unacked, retrans, probes, backoff, total;
		const char *timer;
	} v[] = {
		[SK_IDLE] = { 0, 0, 0, 0, 0, 0, "none" },
		[SK_BUSY] = { 2200, 2, 1, 0, 0, 3, "retransmit" },
		[SK_STUCK] = { 1100, 1, 5, 0, 5, 9, "retransmit" },
		[SK_UNSENT] = { 65592, 0, 0, 4, 4, 0, "probe" },
		[SK_ZEROWIN] = { 65592, 0, 0, 0, 6, 0, "probe" },
	};
	int64_t ack = k == SK_BUSY ? 2 : k == SK_ZEROWIN ? 150 : silent_ms;
	char buf[640];

	if (env.net_proc)
		snprintf(buf, sizeof(buf), "%s{" KQ(FRK_LOCAL) "\"%s\"," KQ(FRK_REMOTE) "\"%s\","
			 KQ(FRK_STATE) "\"established\"," KQ(FRK_INODE) "%d," KQ(FRK_TX_QUEUE) "%d,"
			 KQ(FRK_RX_QUEUE) "0," KQ(FRK_TIMER) "\"%s\"," KQ(FRK_RETRANSMITS) "%d,"
			 KQ(FRK_PROBES) "%d," KQ(FRK_BACKOFF) "null," KQ(FRK_UNACKED) "null,"
			 KQ(FRK_TOTAL_RETRANS) "null," KQ(FRK_LAST_DATA_SENT_MS) "null,"
			 KQ(FRK_LAST_ACK_RECV_MS) "null," KQ(FRK_LAST_DATA_RECV_MS) "null}",
			 first ? "" : ",", local, remote, 700000 + (int)o->len % 1000, v[k].tx,
			 v[k].timer, v[k].retrans, v[k].probes);
	else
		snprintf(buf, sizeof(buf), "%s{" KQ(FRK_LOCAL) "\"%s\"," KQ(FRK_REMOTE) "\"%s\","
			 KQ(FRK_STATE) "\"established\"," KQ(FRK_INODE) "%d," KQ(FRK_TX_QUEUE) "%d,"
			 KQ(FRK_RX_QUEUE) "0," KQ(FRK_TIMER) "\"%s\"," KQ(FRK_RETRANSMITS) "%d,"
			 KQ(FRK_PROBES) "%d," KQ(FRK_BACKOFF) "%d," KQ(FRK_UNACKED) "%d,"
			 KQ(FRK_TOTAL_RETRANS) "%d," KQ(FRK_LAST_DATA_SENT_MS) "%" PRId64 ","
			 KQ(FRK_LAST_ACK_RECV_MS) "%" PRId64 "," KQ(FRK_LAST_DATA_RECV_MS) "%" PRId64 "}",
			 first ? "" : ",", local, remote, 700000 + (int)o->len % 1000, v[k].tx,
			 v[k].timer, v[k].retrans, v[k].probes, v[k].backoff, v[k].unacked, v[k].total,
			 k == SK_IDLE ? silent_ms : k == SK_BUSY ? 1 : 290, ack,
			 k == SK_BUSY ? 1 : silent_ms);
	put(o, buf);
}

/* "net": rank r's connections; wait_ns: how long it has waited at its dump */
static void put_net(struct growbuf *o, int r, int64_t dump_time, int64_t wait_ns)
{
	int h = r / env.per_host, nhosts = (env.ranks + env.per_host - 1) / env.per_host;
	int root = env.net_hub * env.per_host;
	int64_t silent_ms = wait_ns / 1000000 + 50;
	bool first = true, busy = env.sc != SC_PARTITION || env.part_host == PART_NONE;
	enum sock_kind cut = env.net_unsent ? SK_UNSENT : SK_STUCK;
	char local[64], remote[64];

	if (env.net_silent_ms)
		silent_ms = env.net_silent_ms;
	put(o, ",\n" KQ(FRK_NET));
	if (env.net_unknown || r == env.net_unknown_rank) {
		put(o, "{" KQ(FRK_SOURCE) "null," KQ(FRK_ERROR) "\"cannot enter its network namespace: "
		       "Operation not permitted; /proc/1234/net/tcp: Permission denied\","
		       KQ(FRK_NETNS) "4026532001," KQ(FRK_SOCKETS) "null}");
		return;
	}
	put_kv_s(o, "{" KQ(FRK_SOURCE), env.net_proc ? "proc_net_tcp" : "inet_diag");
	put(o, env.net_proc ? "," KQ(FRK_ERROR) "\"inet_diag: cannot enter its network namespace: "
			      "Operation not permitted\"" : "," KQ(FRK_ERROR) "null");
	put_kv_i(o, "," KQ(FRK_NETNS), 4026532001LL + h);
	put_kv_i(o, "," KQ(FRK_READ_NS), dump_time + 200000);
	snprintf(local, sizeof(local), "10.1.0.%d", h + 1);
	put(o, "," KQ(FRK_HOST_ADDRESSES) "[\"");
	put(o, local);
	put(o, "\"]");
	if (env.net_proc) {
		put(o, "," KQ(FRK_INTERFACES) "null");
	} else {
		put(o, "," KQ(FRK_INTERFACES) "[{" KQ(FRK_NAME) "\"eth0\"," KQ(FRK_ADDRESS) "\"");
		put(o, local);
		put(o, h < 64 && (env.net_linkdown >> h & 1) ?
		       "\"," KQ(FRK_UP) "true," KQ(FRK_RUNNING) "false}]" :
		       "\"," KQ(FRK_UP) "true," KQ(FRK_RUNNING) "true}]");
	}
	put(o, "," KQ(FRK_SOCKETS) "[");
	if (r == root) {
		for (int q = 0; q < env.ranks; q++) {
			int hq = q / env.per_host;

			if (hq == env.net_hub)
				continue;
			snprintf(local, sizeof(local), "10.1.0.%d:29500", h + 1);
			snprintf(remote, sizeof(remote), "10.1.0.%d:%d", hq + 1, 40000 + q);
			/* the hub had sent nothing it waits on: idle whichever side is cut; but
			 * the results it could not deliver (--part-mid) */
			put_sock(o, first, local, remote, part_behind(q) ? cut : busy ? SK_BUSY :
				 SK_IDLE, silent_ms);
			first = false;
		}
	} else if (h != env.net_hub) {
		bool stuck = !busy && !env.part_mid &&
			     (env.part_host == h || env.part_host == env.net_hub ||
			      env.part_also == h);

		snprintf(local, sizeof(local), "10.1.0.%d:%d", h + 1, 40000 + r);
		snprintf(remote, sizeof(remote), "10.1.0.%d:29500", env.net_hub + 1);
		put_sock(o, first, local, remote, env.part_host == PART_ZEROWIN ? SK_ZEROWIN :
			 stuck ? cut : busy ? SK_BUSY : SK_IDLE, silent_ms);
		first = false;
	}
	if (env.sc == SC_PARTITION && env.part_host == PART_EXT && r % env.per_host == 0) {
		snprintf(local, sizeof(local), "10.1.0.%d:%d", h + 1, 41000 + r);
		put_sock(o, first, local, "192.0.2.77:2049", cut, silent_ms);
	}
	put(o, "]}");
	(void)nhosts;
}

static int write_rank(int r, struct growbuf *o, struct ent *ents, struct comm_hdr *hdr)
{
	int64_t dump_time, n = rank_entries(r, ents, hdr, &dump_time), first = 0;
	int64_t pid = 10000 + r, ring = 2000;
	bool culprit = r == env.culprit, killed = culprit && env.sc == SC_KILLED;
	char host[32], path[4096];
	int fd;

	if (culprit && env.sc == SC_MISSING_DUMP)
		return 0;
	if (hung_before_attach()) {
		/* tptrace saw no call: no comm, no entry */
		n = 0;
		dump_time = t0 + 60000000000LL + host_clock(r / env.per_host);
	}
	if (env.wrap == -1 || env.wrap == r) {
		ring = env.ring;
		if (n > ring)
			first = n - ring;
	} else if (n > ring) {
		first = n - ring;
	}
	/* --alias-host H: host H+1's recorder was given host H's --host-id */
	snprintf(host, sizeof(host), "node%d", r / env.per_host == env.alias_host + 1 ?
		 env.alias_host : r / env.per_host);
	o->len = 0;
	put(o, env.stacks ? "{" KQ(FRK_SCHEMA) "\"tptrace-fr\"," KQ(FRK_VERSION) "2" :
	       "{" KQ(FRK_SCHEMA) "\"tptrace-fr\"," KQ(FRK_VERSION) "1");
	put_kv_s(o, "," KQ(FRK_HOST), host);
	put_kv_i(o, "," KQ(FRK_PID), pid);
	put(o, "," KQ(FRK_COMM) "\"python3\"," KQ(FRK_CMDLINE) "\"python3 train.py\"");
	put_kv_i(o, "," KQ(FRK_GLOBAL_RANK), r);
	put_kv_i(o, "," KQ(FRK_WORLD_SIZE), env.ranks);
	put_kv_i(o, "," KQ(FRK_LOCAL_RANK), r % env.per_host);
	put(o, "," KQ(FRK_NCCL_VERSION) "\"2.28.9\","
	       KQ(FRK_NCCL_LIBRARY) "\"/usr/lib/x86_64-linux-gnu/libnccl.so.2\"");
	put_kv_s(o, "," KQ(FRK_DUMP_REASON), killed ? "exit" : env.sc == SC_HEALTHY ? "request" :
		 hung_before_attach() ? "signal" : "stall");
	put_kv_i(o, "," KQ(FRK_DUMP_TIME_NS), dump_time);
	/* since the host's boot, host h booted h hours before host 0 */
	put_kv_i(o, "," KQ(FRK_DUMP_MONO_NS), dump_time - host_clock(r / env.per_host) - t0 +
		 941645312 + (int64_t)(r / env.per_host) * 3600000000000LL);
	if (killed)
		put(o, "," KQ(FRK_PROCESS) "{" KQ(FRK_STATE) "\"killed\"," KQ(FRK_EXIT_CODE) "null,"
		       KQ(FRK_SIGNAL) "9}");
	else
		put(o, "," KQ(FRK_PROCESS) "{" KQ(FRK_STATE) "\"running\","
		       KQ(FRK_EXIT_CODE) "null," KQ(FRK_SIGNAL) "null}");
	py_none_now = r == env.py_none;
	if (env.py_frames && py_none_now)
		put(o, "," KQ(FRK_PY_STACKS) "{" KQ(FRK_PYTHON) "null,"
		       KQ(FRK_WHY_NO_FRAMES) "\"Python 3.8.18: "
		       "unsupported (3.9-3.13)\"}");
	else if (env.py_frames)
		put(o, "," KQ(FRK_PY_STACKS) "{" KQ(FRK_PYTHON) "\"3.11.2\","
		       KQ(FRK_WHY_NO_FRAMES) "null}");
	put_kv_i(o, "," KQ(FRK_RING_SIZE), ring);
	put_kv_i(o, "," KQ(FRK_ENTRIES_RECORDED), n);
	put_kv_i(o, "," KQ(FRK_ENTRIES_OVERWRITTEN), first);
	put_kv_i(o, "," KQ(FRK_EVENTS_DROPPED), env.dropped == -1 || env.dropped == r ? 5 : 0);
	put(o, ",\n" KQ(FRK_COMMS) "[");
	for (int j = 0; j < env.comms && !hung_before_attach(); j++) {
		int g = group_size(j);

		put(o, j ? ",\n" : "\n");
		bool failed = j == env.comm_slot && init_failed_on(r);

		put_kv_s(o, "{" KQ(FRK_COMM_ID), hdr[j].id);
		put(o, pre(r) ? "," KQ(FRK_CROSS_RANK_ID) "false" :
				"," KQ(FRK_CROSS_RANK_ID) "true");
		if (failed) {
			/* the agreed schema of a failed init: no handle, rank/nranks from the call */
			put(o, "," KQ(FRK_COMM_HANDLE) "null");
			put_kv_i(o, "," KQ(FRK_RANK), comm_rank(j, r));
			put_kv_i(o, "," KQ(FRK_NRANKS), g);
			put_kv_i(o, "," KQ(FRK_DEVICE), r % env.per_host);
			put(o, "," KQ(FRK_PARENT) "null," KQ(FRK_SPLIT_COLOR) "null,"
			       KQ(FRK_SPLIT_KEY) "null");
			put_kv_s(o, "," KQ(FRK_CREATED_BY), init_api(j));
			put(o, "," KQ(FRK_LEARNED) "{" KQ(FRK_COMM_ID) "\"init_call\","
			       KQ(FRK_RANK) "\"init_call\","
			       KQ(FRK_NRANKS) "\"init_call\"," KQ(FRK_SEQ_ORIGIN) "\"comm_init\"},"
			       KQ(FRK_STATE) "\"init_failed\"");
			put_kv_i(o, "," KQ(FRK_INIT_RC), env.init_rc);
			put(o, "," KQ(FRK_ASYNC_ERROR) "null," KQ(FRK_LAST_ENQUEUED_SEQ) "null,"
			       KQ(FRK_LAST_STARTED_SEQ) "null," KQ(FRK_LAST_COMPLETED_SEQ) "null,"
			       KQ(FRK_LAST_P2P_SEQ) "null}");
			continue;
		}
		put(o, "," KQ(FRK_COMM_HANDLE) "\"0x55d0c0ffee00\"");
		if (pre(r) || (env.split_null && j > 0)) {
			put(o, "," KQ(FRK_RANK) "null," KQ(FRK_NRANKS) "null");
		} else {
			put_kv_i(o, "," KQ(FRK_RANK), comm_rank(j, r));
			put_kv_i(o, "," KQ(FRK_NRANKS), g);
		}
		put_kv_i(o, "," KQ(FRK_DEVICE), r % env.per_host);
		if (pre(r)) {
			put(o, "," KQ(FRK_PARENT) "null," KQ(FRK_SPLIT_COLOR) "null,"
			       KQ(FRK_SPLIT_KEY) "null,"
			       KQ(FRK_CREATED_BY) "\"before attach\"," KQ(FRK_LEARNED) "{"
			       KQ(FRK_COMM_ID) "\"unknown\","
			       KQ(FRK_RANK) "\"unknown\"," KQ(FRK_NRANKS) "\"unknown\","
			       KQ(FRK_SEQ_ORIGIN) "\"attach\"},"
			       KQ(FRK_STATE) "\"active\"");
		} else if (env.split_null && j > 0) {
			char parent[17];

			comm_id(0, r, parent);
			put_kv_s(o, "," KQ(FRK_PARENT), parent);
			put_kv_i(o, "," KQ(FRK_SPLIT_COLOR), r / g);
			put_kv_i(o, "," KQ(FRK_SPLIT_KEY), comm_rank(j, r));
			put(o, "," KQ(FRK_CREATED_BY) "\"ncclCommSplit\"," KQ(FRK_LEARNED) "{"
			       KQ(FRK_COMM_ID) "\"split_call\","
			       KQ(FRK_RANK) "\"unknown\"," KQ(FRK_NRANKS) "\"unknown\","
			       KQ(FRK_SEQ_ORIGIN) "\"comm_init\"},"
			       KQ(FRK_STATE) "\"active\"");
		} else {
			put(o, "," KQ(FRK_PARENT) "null," KQ(FRK_SPLIT_COLOR) "null,"
			       KQ(FRK_SPLIT_KEY) "null,"
			       KQ(FRK_CREATED_BY) "\"ncclCommInitRank\"," KQ(FRK_LEARNED) "{"
			       KQ(FRK_COMM_ID) "\"init_call\","
			       KQ(FRK_RANK) "\"init_call\"," KQ(FRK_NRANKS) "\"init_call\","
			       KQ(FRK_SEQ_ORIGIN) "\"comm_init\"},"
			       KQ(FRK_STATE) "\"active\"");
		}
		put_kv_i(o, "," KQ(FRK_ASYNC_ERROR),
			 culprit && env.sc == SC_ASYNC && j == env.comm_slot ? 6 : 0);
		put_kv_i(o, "," KQ(FRK_LAST_ENQUEUED_SEQ), hdr[j].last_enq);
		put_kv_i(o, "," KQ(FRK_LAST_STARTED_SEQ), hdr[j].last_started);
		put_kv_i(o, "," KQ(FRK_LAST_COMPLETED_SEQ), hdr[j].last_done);
		put_kv_i(o, "," KQ(FRK_LAST_P2P_SEQ), hdr[j].last_p2p);
		put(o, "}");
	}
	put(o, "],\n" KQ(FRK_IN_CALL) "[");
	if (culprit && (env.sc == SC_SKIP || env.sc == SC_STUCK) &&
	    r / env.per_host != env.stale_host) {
		put_kv_i(o, "\n{" KQ(FRK_TID), pid + 1);
		put(o, "," KQ(FRK_THREAD_NAME) "\"pt_main_thread\"");
		put_kv_s(o, "," KQ(FRK_API),
			 env.sc == SC_SKIP ? "cudaMemcpy" : "cudaStreamSynchronize");
		put_kv_i(o, "," KQ(FRK_ENTERED_NS), dump_time - 30000000000LL);
		put(o, "," KQ(FRK_COMM_ID) "null," KQ(FRK_SEQ) "null}");
	}
	put(o, "]");
	if (env.net)
		put_net(o, r, dump_time, n ? dump_time - ents[n - 1].created : 0);
	/* before the entries, so a reader of the newest entries finds them in the head */
	if (env.stacks)
		put_stacks(o, r, pid, dump_time);
	put(o, ",\n" KQ(FRK_ENTRIES) "[");
	for (int64_t i = first; i < n; i++) {
		put(o, i > first ? ",\n" : "\n");
		put_entry(o, &ents[i], pid);
	}
	put(o, "\n]}\n");
	if (culprit && env.sc == SC_CORRUPT)
		o->len = o->len * 3 / 5;	/* the writer died mid-file */

	snprintf(path, sizeof(path), "%s/tptrace-fr.%s.%" PRId64 ".json", env.out, host, pid);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		goto fail;
	for (size_t off = 0; off < o->len;) {
		ssize_t w = write(fd, o->p + off, o->len - off);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			close(fd);
			goto fail;
		}
		off += w;
	}
	if (close(fd))
		goto fail;
	return 0;
fail:
	fprintf(stderr, "tptrace-fr-gen: cannot write %s: %s\n", path, strerror(errno));
	return -errno;
}

static int next_rank;
static pthread_mutex_t next_lock = PTHREAD_MUTEX_INITIALIZER;
static int failed;

static void *writer(void *arg)
{
	struct growbuf o = { 0 };
	struct ent *ents = malloc(((size_t)env.entries + 4) * sizeof(*ents));
	struct comm_hdr hdr[16];

	if (!ents) {
		failed = 1;
		return NULL;
	}
	for (;;) {
		int r;

		pthread_mutex_lock(&next_lock);
		r = failed ? env.ranks : next_rank++;
		pthread_mutex_unlock(&next_lock);
		if (r >= env.ranks)
			break;
		if (write_rank(r, &o, ents, hdr))
			failed = 1;
	}
	growbuf__free(&o);
	free(ents);
	return NULL;
}

int main(int argc, char **argv)
{
	static const struct argp argp = { .options = opts, .parser = parse_arg, .doc = doc };
	pthread_t tids[64];
	int nt = 0;

	argp_err_exit_status = 2;
	if (argp_parse(&argp, argc, argv, 0, NULL, NULL))
		return 2;
	if (mkdir(env.out, 0755) && errno != EEXIST) {
		fprintf(stderr, "tptrace-fr-gen: cannot create %s: %s\n", env.out, strerror(errno));
		return 1;
	}
	if (build_schedule()) {
		fprintf(stderr, "tptrace-fr-gen: out of memory\n");
		return 1;
	}
	for (int i = 0; i < env.jobs && i < env.ranks; i++)
		if (!pthread_create(&tids[i], NULL, writer, NULL))
			nt++;
	if (!nt)
		writer(NULL);
	for (int i = 0; i < nt; i++)
		pthread_join(tids[i], NULL);
	free(steps);
	return failed ? 1 : 0;
}
