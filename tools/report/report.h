/* SPDX-License-Identifier: MIT */
/* `tptrace report TRACE...`: what to fix in a job, from tptrace's own traces.
 *
 * Three stages, one file each: report_read.c streams a trace (.json or .json.gz) into a
 * compact array of events (struct rev, ~64 bytes each, names interned); report_analyze.c
 * turns the inputs into the report object of docs/report-schema.md (cJSON, small: tens of
 * KiB whatever the trace size); report_text.c renders the terminal summary from that object,
 * report_html.c (its own module) the HTML page. `--json` prints the object itself, so both
 * renderers show nothing that is not in it.
 */
#ifndef TPTRACE_REPORT_H
#define TPTRACE_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cjson/cJSON.h>
#include "hashmap.h"

/* What an event is, decided once while reading (cat + name). */
enum rev_kind {
	RK_API,			/* any other CUDA runtime/driver call */
	RK_LAUNCH,		/* kernel or graph launch (runtime or driver) */
	RK_SYNC,		/* stream/device/context/event synchronize */
	RK_COPY,		/* host side of a copy (sync or async) */
	RK_MEMSET,		/* host side of a memset */
	RK_NCCL,		/* an NCCL collective or p2p call */
	RK_NCCL_OTHER,		/* group start/end, comm calls */
	RK_PYFUNC,		/* python_function slice (--py-stacks) */
	RK_KERNEL,		/* GPU: cat kernel */
	RK_GPU_COPY,		/* GPU: cat gpu_memcpy */
	RK_GPU_SET,		/* GPU: cat gpu_memset */
	RK_GPU_SYNC,		/* GPU: cat cuda_sync (a stream waiting: not busy) */
	RK_OOM,			/* cuda_memory OOM instant */
	RK_MEM_COUNTER,		/* counter "bytes allocated/reserved (cuda:N)": bytes = value */
	RK_CPU_OP,		/* --torch: torch.profiler's cpu_op slice (aten::addmm, ...) */
	RK_USER_ANN,		/* --torch: user_annotation (record_function, ProfilerStep#N) */
};

enum rev_dir { RD_NONE, RD_HTOD, RD_DTOH, RD_DTOD, RD_OTHER };

#define RF_ASYNC	0x01	/* host copy/memset: the Async variant */
#define RF_PAGEABLE	0x02	/* GPU copy: host side pageable */
#define RF_PINNED	0x04	/* GPU copy: host side pinned */
#define RF_NCCL_KERNEL	0x08	/* GPU kernel named nccl* (HTA's rule for communication) */
#define RF_HAS_DUR	0x10	/* host call with a measured duration (return probe or CUPTI) */
#define RF_RESERVED	0x20	/* memory counter: reserved (else allocated) */
#define RF_UNFINISHED	0x40	/* host call with no end ("unfinished": its return was not seen,
				 * the trace draws it up to its own end): dur 0, end unknown */

struct rev {
	uint64_t ts, dur;	/* ns, CLOCK_MONOTONIC (trace base + ts) */
	uint64_t corr;		/* args.correlation (0 none) */
	uint64_t stream;	/* host: the cudaStream_t value; GPU: the stream id */
	uint64_t bytes;		/* copies, memsets, NCCL bytes, OOM size, counter value */
	uint32_t pid, tid;	/* GPU events: pid = device, tid = stream */
	uint32_t name;		/* interned */
	uint32_t where;		/* interned innermost Python frame ("file.py:42 fn"), 0 none */
	uint32_t stack;		/* interned python_function depth marker: unused 0 */
	int32_t rc;		/* host calls: rc (INT32_MIN unknown) */
	uint8_t kind, dir, flags;
	int8_t device;		/* GPU events, counters, OOM: device; -1 unknown */
};

/* Strings interned once: kernel and API names repeat a million times. */
struct rstrings {
	char **str;
	uint32_t nr, cap;
	uint32_t *slots;	/* open addressing on the hash, value = index + 1 */
	uint32_t slot_cap;
};

uint32_t rstrings__intern(struct rstrings *s, const char *str, size_t len);
static inline const char *rstrings__get(const struct rstrings *s, uint32_t id)
{
	return id < s->nr ? s->str[id] : "?";
}

struct rproc {
	uint32_t pid;
	int rank;		/* -1 unknown */
	char name[64];
};

/* One trace file. */
struct rinput {
	const char *path;
	struct rev *ev;
	size_t nr, cap;
	struct rproc *procs;	/* host processes (metadata and events) */
	size_t nr_procs;
	/* GPU tracks whose labels name their host process ("pid P comm, context C"): trace
	 * pid + 1 -> host pid. A track's work is that process's, whatever its correlation ids
	 * (each process's CUPTI counts its own) */
	struct u64map gpu_host;
	uint64_t base_mono_ns;	/* tptrace.base_mono_ns: trace ts 0 on CLOCK_MONOTONIC */
	bool have_base;
	char hostname[64];
	int dist_rank;		/* distributedInfo.rank, -1 none */
	bool gpu, mem, py_stacks;	/* what the trace was made with (metadata, else events) */
	bool torch;		/* it has torch.profiler's cpu_op/user_annotation slices (--torch) */
	uint64_t span_ns;
	size_t events_read;	/* every element of traceEvents (ev keeps what the analysis uses) */
	long long events_dropped;	/* -1 unknown */
};

/* Reads one trace. 0, or -1 with one line (no "tptrace: ", no newline) in err. */
int report_read(struct rinput *in, struct rstrings *strs, const char *path, char *err,
		size_t errsz);
void rinput__free(struct rinput *in);

struct report_opts {
	const char *step_func;		/* --step FUNC: python_function slices named FUNC */
	double idle_frac_min;		/* gpu_idle fires above this (0.2) */
};

/* The report object of docs/report-schema.md, or NULL with err set. */
cJSON *report_analyze(struct rinput *in, size_t nr_in, struct rstrings *strs,
		      const struct report_opts *o, char *err, size_t errsz);

/* The terminal summary (fits 100 columns). */
void report_text(const cJSON *report, FILE *out);

/* tools/report/report_html.c: the page. 0, or -errno with one line in err. */
int report_html__write(const cJSON *report, const char *path, char *err, size_t errsz);

/* tools/report/report_compare.c: two report objects (before, after; each from its own traces) side
 * by side with their deltas, and that object in the terminal (fits 100 columns). */
cJSON *report_compare(const cJSON *before, const char *const *bpaths, size_t nb,
		      const cJSON *after, const char *const *apaths, size_t na);
void report_compare_text(const cJSON *cmp, FILE *out);

/* `tptrace report ...` (argv[0] = "report"). */
int report_main(int argc, char **argv);

#endif
