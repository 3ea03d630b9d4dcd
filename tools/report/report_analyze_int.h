// SPDX-License-Identifier: MIT
/* report_analyze internal state, shared by the report's analysis modules:
 *   report_analyze.c  the helpers below, the processes and their GPU work, steps, per-process
 *                     measures and the analysis window; report_analyze() runs the rest
 *   report_rules.c    the rules: each returns a finding with its numbers and evidence, or
 *                     adds a cannot_judge entry when its data is missing
 *   report_tables.c   the kernel breakdown, the utilization timeline, the ranks table, the
 *                     inputs, and the findings' order
 *   report_ops.c      the operator breakdown of --torch traces (torch's key_averages)
 */
#ifndef TPTRACE_REPORT_ANALYZE_INT_H
#define TPTRACE_REPORT_ANALYZE_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "report.h"
#include "hashmap.h"

#define TINY_KERNEL_NS	10000	/* "tiny": shorter than 10 µs */
#define MAX_EVIDENCE	5
#define UTIL_BINS	100

struct ival {
	uint64_t a, b;
	size_t first;		/* index (in proc->gpu) of the item that opened the interval */
};

struct step {
	uint64_t a, b;
};

struct proc {
	struct rinput *in;
	const struct rproc *rp;
	int rank;
	size_t *host, nr_host;	/* indices into in->ev, by ts */
	bool mem;		/* it has memory counters (--mem) */
	size_t *gpu, nr_gpu;	/* GPU work (kernels, copies, memsets, syncs), by ts */
	struct ival *busy;	/* merged busy intervals (kernels, copies, memsets) */
	size_t nr_busy;
	struct step *steps;
	size_t nr_steps;
	char method[32], method_detail[256];
	uint64_t win_a, win_b;	/* the analysis window: the steps, else the whole process */
	/* idle split */
	uint64_t idle_ns, idle_sync_ns, idle_launch_ns, idle_data_ns, idle_other_ns;
	size_t nr_launches, nr_syncs;
	struct u64map corr;	/* correlation -> index + 1 of the host call carrying it */
	struct u64map pinned_calls;	/* ev index of host copy calls whose GPU copy was pinned */
	size_t *blk, nr_blk;	/* blocking host calls (is_blocking), by end time */
	double collective_wait_ns;	/* NAN unknown */
	uint64_t comm_ns, comm_overlap_ns;
};

struct ctx {
	struct rinput *in;
	size_t nr_in;
	struct rstrings *strs;
	const struct report_opts *o;
	struct proc *procs;
	size_t nr_procs;
	bool any_gpu, all_gpu, any_mem, any_py;
	cJSON *report, *findings, *cannot;
	uint64_t gap_counts[8];
};

extern const uint64_t gap_edges[7];

struct gap {
	uint64_t a, b;
	int cause;		/* 0 sync, 1 launch, 2 data, 3 other */
	const struct rev *by;	/* the blocking call, or the late launch */
};

/* report_analyze.c */
int cmp_u64(const void *a, const void *b);
uint64_t pct(const uint64_t *sorted, size_t n, double p);
cJSON *num(cJSON *o, const char *k, double v);
void unknown(cJSON *o, const char *k, const char *why);
void num_or_unknown(cJSON *o, const char *k, bool known, double v, const char *why);
const char *S(const struct ctx *c, uint32_t id);
bool is_busy_kind(int k);
const char *rank_label(const struct proc *p, char *buf, size_t n);
uint64_t busy_in(const struct proc *p, uint64_t a, uint64_t b);
cJSON *evidence(const struct ctx *c, const struct proc *p, const struct rev *e,
		uint64_t ts, uint64_t dur, const char *name);
/* a new finding in the report; p: the process it is about (its rank, or why the rank is
 * unknown, comes first in its numbers), NULL for one about the whole job */
cJSON *finding(struct ctx *c, const struct proc *p, const char *id, double share,
	       const char *title, const char *fix);
const struct rev *launch_of(const struct proc *p, const struct rev *g);
bool is_blocking(const struct proc *p, const struct rev *e);
int cmp_gap_len(const void *x, const void *y);
struct gap *idle_gaps(struct ctx *c, struct proc *p, size_t *nr);

/* report_rules.c */
void rule_idle(struct ctx *c, struct proc *p);
void rule_dtoh(struct ctx *c, struct proc *p);
void rule_copies(struct ctx *c);
void rule_tiny(struct ctx *c);
void rule_comm(struct ctx *c, struct proc *p);
void rule_straggler(struct ctx *c);
void rule_memory(struct ctx *c, struct proc *p);

/* report_tables.c */
void table_kernels(struct ctx *c);
void table_timeline(struct ctx *c);
void table_ranks(struct ctx *c);
void table_inputs(struct ctx *c);
void sort_findings(cJSON *arr);

/* report_ops.c: the operator breakdown of --torch traces */
void table_ops(struct ctx *c);

#endif
