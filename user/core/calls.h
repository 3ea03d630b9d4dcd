/* SPDX-License-Identifier: MIT */
/* The one ring consumer (retsnoop's handle_event shape). Every record that crosses a ring
 * passes here first: it is validated (type tag, size for its type, api id range) before any
 * field is read, entries are paired with their returns per (pid, tid) under one depth limit,
 * dlopen, exit, map and exec records are dispatched, and every record that cannot become a
 * complete call is counted by kind. Its one user is the session (session.c, the acquisition
 * core), which hands what comes out to its sinks (decode.c: the trace writer, flightrec.c:
 * the recorder, memtrace.c: the memory tracer, gpu_sink.c: the --gpu join): they only ever see
 * valid records and complete calls.
 *
 * Two ring layouts exist: bpf/cuda.h (entry and return records, paired here) and bpf/mem.h
 * (entry and return already combined by the BPF side, plus USDT records). */
#ifndef TPTRACE_CALLS_H
#define TPTRACE_CALLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "cuda.h"

/* Calls nested deeper than this on one thread are delivered at once without their return
 * (CALL_OVERFLOW) and counted: NCCL nests a few levels (InitRank -> InitRankConfig), 16 is far
 * more than any real chain. */
#define CALLS_MAX_DEPTH 16
/* Bytes per open call that a sink keeps for itself (what its return needs). */
#define CALLS_USER_BYTES 128

enum call_end {
	CALL_RETURNED,		/* ret holds the return record */
	CALL_NO_RETURN,		/* the api has no return probe: entry only */
	CALL_UNWOUND,		/* a caller's return came first (longjmp, exception): ended at end_ns */
	CALL_EXITED,		/* the process exited inside it: ended at end_ns (its exit time) */
	CALL_UNFINISHED,	/* still open when the consumer finished: ended at end_ns */
	CALL_OVERFLOW,		/* nested beyond CALLS_MAX_DEPTH: its return will not be matched */
};

/* An entry record (short records zero-filled to the full size) and the sink's own state. */
struct call_frame {
	struct tp_rec_call rec;
	uint64_t user[CALLS_USER_BYTES / 8];
};

struct call {
	struct call_frame *frame;
	const struct tp_rec_ret *ret;	/* CALL_RETURNED only, else NULL */
	enum call_end end;
	uint64_t end_ns;		/* UNWOUND/EXITED/UNFINISHED; 0 otherwise */
	/* set by the session for the sinks that consume a stage's output when that stage holds
	 * the call back: it comes to them again, decided, through the stage (session.h) */
	bool held;
};

struct calls_stats {
	uint64_t records;		/* valid call and return records (mem rings: all) */
	uint64_t dlopens, exits;	/* valid dlopen and exit records */
	uint64_t maps, execs;		/* valid map and exec records (tptrace fr -a) */
	uint64_t bad_records;		/* sum of the three below */
	uint64_t bad_type;		/* unknown type tag (or too short to hold one) */
	uint64_t bad_size;		/* shorter than its type needs */
	uint64_t bad_api;		/* api id outside every table */
	uint64_t depth_overflows;	/* calls delivered as CALL_OVERFLOW */
	uint64_t orphan_returns;	/* returns whose entry was not seen (attached mid-call) */
	uint64_t unwound;		/* calls closed by a caller's return */
	uint64_t exited_in_call;	/* calls open when their process exited */
	uint64_t unfinished;		/* calls open at calls__finish */
};

struct calls_sink {
	void *ctx;
	/* bpf/cuda.h rings. entry: every call, before it is pushed (fill frame->user); may be
	 * NULL. call: a complete call (entry + return, or the reason it has none). */
	void (*entry)(void *ctx, struct call_frame *f);
	void (*call)(void *ctx, const struct call *c);
	/* whether a return record will follow this api's entry (NULL: per the api tables) */
	bool (*has_return)(void *ctx, uint32_t api);
	void (*dlopen)(void *ctx, const struct tp_rec_dlopen *r);
	/* after the process's open calls were delivered as CALL_EXITED */
	void (*exit)(void *ctx, const struct tp_rec_exit *r);
	/* tptrace fr -a (fr_exec.c): a library file mapped, a recorded process's exec; name is
	 * NUL-terminated here */
	void (*map)(void *ctx, const struct tp_rec_map *r);
	void (*exec)(void *ctx, const struct tp_rec_exec *r);

	/* bpf/mem.h rings: a combined call record (api < mem_api_count) or a USDT record. */
	void (*mem_call)(void *ctx, const void *rec);	/* struct mem_rec_call */
	void (*mem_usdt)(void *ctx, const void *rec);	/* struct mem_rec_usdt */
	uint32_t mem_api_count;
};

enum calls_ring {
	CALLS_RING_CUDA,	/* bpf/cuda.h records, CUDA and NCCL api ids */
	CALLS_RING_MEM,		/* bpf/mem.h records */
};

struct calls;

struct calls *calls__new(enum calls_ring ring, const struct calls_sink *sink);
void calls__free(struct calls *c);	/* open calls are dropped, not delivered */

/* libbpf ring_buffer callback: ctx is the struct calls. Always returns 0 (a bad record is
 * counted, never fatal). */
int calls__ring_cb(void *ctx, void *data, size_t size);
/* Delivers every call still open as CALL_UNFINISHED ending at end_ns. */
void calls__finish(struct calls *c, uint64_t end_ns);
const struct calls_stats *calls__stats(const struct calls *c);

/* Open calls of one process (pid 0: all), outermost first per thread; *it starts zeroed.
 * No call may be consumed during the walk. */
struct calls_iter {
	size_t slot;		/* u64map cursor */
	void *thread;		/* the thread being walked */
	int depth;
};
struct call_frame *calls__next_open(struct calls *c, int pid, struct calls_iter *it);

/* api id in the CUDA or NCCL table (bpf/cuda.h rings) */
bool calls__api_valid(uint32_t api);

#endif
