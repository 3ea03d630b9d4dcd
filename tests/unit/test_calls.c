// SPDX-License-Identifier: MIT
/* Tier 1: the ring consumer core (user/core/calls.c) fed with synthetic records. Built with
 * AddressSanitizer: every record is handed over in a buffer of exactly its size, so a field
 * read before the size was checked is an out-of-bounds read and fails the test. */
#include <stdlib.h>
#include "calls.h"
#include "api_id.h"
#include "check.h"
#include "cuda.h"
#include "cuda_api.h"
#include "mem.h"
#include "nccl_api.h"

#define MAGIC 0x5eed0000ULL

/* what the sink saw, in order */
struct seen {
	char kind;		/* 'C' call, 'D' dlopen, 'X' exit, 'M' mem call, 'U' usdt */
	uint32_t api, pid, tid;
	enum call_end end;
	uint64_t entry_ts, ret_ts, end_ns, user, rc;
	uint8_t deref0;
};
static struct seen seen[256];
static int nr_seen, nr_entries;

static void sink_entry(void *ctx, struct call_frame *f)
{
	f->user[0] = MAGIC + f->rec.ts;	/* must come back with the complete call */
	nr_entries++;
}

static void sink_call(void *ctx, const struct call *c)
{
	struct seen *s = &seen[nr_seen++];

	s->kind = 'C';
	s->api = c->frame->rec.api;
	s->pid = c->frame->rec.pid;
	s->tid = c->frame->rec.tid;
	s->end = c->end;
	s->entry_ts = c->frame->rec.ts;
	s->ret_ts = c->ret ? c->ret->ts : 0;
	s->rc = c->ret ? c->ret->rc : 0;
	s->end_ns = c->end_ns;
	s->user = c->frame->user[0];
	s->deref0 = c->frame->rec.deref[0];
}

static void sink_dlopen(void *ctx, const struct tp_rec_dlopen *r)
{
	seen[nr_seen++] = (struct seen){ .kind = 'D', .pid = r->pid, .tid = r->tid };
}

static void sink_exit(void *ctx, const struct tp_rec_exit *x)
{
	seen[nr_seen++] = (struct seen){ .kind = 'X', .pid = x->pid, .end_ns = x->ts };
}

static void sink_mem_call(void *ctx, const void *rec)
{
	const struct mem_rec_call *r = rec;

	seen[nr_seen++] = (struct seen){ .kind = 'M', .api = r->api, .pid = r->pid };
}

static void sink_mem_usdt(void *ctx, const void *rec)
{
	const struct mem_rec_usdt *r = rec;

	seen[nr_seen++] = (struct seen){ .kind = 'U', .pid = r->pid, .rc = r->type };
}

/* Hands a copy of exactly size bytes to the core (ASan catches reads past it). */
static void feed(struct calls *c, const void *rec, size_t size)
{
	void *buf = malloc(size ? size : 1);

	memcpy(buf, rec, size);
	calls__ring_cb(c, buf, size);
	free(buf);
}

static uint64_t ts = 1000;

static void entry(struct calls *c, const char *sym, uint32_t pid, uint32_t tid)
{
	struct tp_rec_call r = { .type = TP_REC_CALL, .pid = pid, .tid = tid, .ts = ts += 10 };

	r.api = api_id(sym);
	r.deref[0] = 0xee;	/* not sent in a short record */
	feed(c, &r, TP_REC_CALL_SHORT_SIZE);
}

static void ret(struct calls *c, const char *sym, uint32_t pid, uint32_t tid, uint64_t rc)
{
	struct tp_rec_ret r = { .type = TP_REC_RET, .pid = pid, .tid = tid, .ts = ts += 10, .rc = rc };

	r.api = api_id(sym);
	feed(c, &r, sizeof(r));
}

static struct calls *new_core(void)
{
	struct calls_sink sink = {
		.entry = sink_entry, .call = sink_call, .dlopen = sink_dlopen, .exit = sink_exit,
	};

	nr_seen = nr_entries = 0;
	return calls__new(CALLS_RING_CUDA, &sink);
}

static void test_malformed(void)
{
	struct calls *c = new_core();
	const struct calls_stats *st = calls__stats(c);
	struct tp_rec_call call = { .type = TP_REC_CALL, .pid = 7, .tid = 7, .ts = 1 };
	struct tp_rec_ret r = { .type = TP_REC_RET, .pid = 7, .tid = 7, .ts = 2 };
	struct tp_rec_dlopen dl = { .type = TP_REC_DLOPEN, .pid = 7 };
	struct tp_rec_exit x = { .type = TP_REC_EXIT, .pid = 7 };
	uint32_t junk = 99;

	feed(c, &junk, 2);				/* too short for a type tag */
	feed(c, &junk, sizeof(junk));			/* unknown type */
	CHECK_U64(st->bad_type, 2);
	call.api = api_id("cudaStreamSynchronize");
	feed(c, &call, TP_REC_CALL_SHORT_SIZE - 1);	/* short call */
	{
		uint8_t big[TP_REC_CALL_FULL_SIZE + 8] = {};

		memcpy(big, &call, sizeof(call));
		feed(c, big, sizeof(big));		/* longer than any call record */
	}
	r.api = call.api;
	feed(c, &r, sizeof(r) - 8);			/* short return */
	feed(c, &r, 6);					/* a type and an api id */
	feed(c, &r, 4);					/* only a type */
	feed(c, &dl, sizeof(dl) - 1);
	feed(c, &x, sizeof(x) - 1);
	CHECK_U64(st->bad_size, 7);
	call.api = cuda_api_count;			/* between the tables */
	feed(c, &call, TP_REC_CALL_SHORT_SIZE);
	call.api = NCCL_API_BASE + nccl_api_count;	/* past NCCL's */
	feed(c, &call, TP_REC_CALL_FULL_SIZE);
	r.api = 0xffff;
	feed(c, &r, sizeof(r));
	CHECK_U64(st->bad_api, 3);
	CHECK_U64(st->bad_records, 12);
	CHECK_U64(st->records, 0);
	CHECK(nr_seen == 0 && nr_entries == 0, "no bad record reaches the sink (%d, %d)", nr_seen,
	      nr_entries);
	CHECK(!calls__api_valid(cuda_api_count) && calls__api_valid(NCCL_API_BASE) &&
	      calls__api_valid(0), "api ranges");
	calls__free(c);
}

static void test_pairing(void)
{
	struct calls *c = new_core();
	const struct calls_stats *st = calls__stats(c);
	struct calls_iter it = {};

	entry(c, "cudaLaunchKernel", 10, 11);		/* entry only */
	CHECK(nr_seen == 1 && seen[0].end == CALL_NO_RETURN, "entry-only call delivered at once");
	CHECK_U64(seen[0].user, MAGIC + seen[0].entry_ts);
	entry(c, "cudaStreamSynchronize", 10, 11);
	entry(c, "cudaStreamSynchronize", 10, 12);	/* another thread */
	entry(c, "cudaStreamSynchronize", 20, 11);	/* same tid, another process */
	CHECK(nr_seen == 1, "calls with a return wait for it");
	CHECK(calls__next_open(c, 10, &it) && calls__next_open(c, 10, &it) &&
	      !calls__next_open(c, 10, &it), "two calls open in pid 10");
	ret(c, "cudaStreamSynchronize", 20, 11, 0);
	CHECK(nr_seen == 2 && seen[1].pid == 20 && seen[1].end == CALL_RETURNED, "pid 20's");
	ret(c, "cudaStreamSynchronize", 10, 12, 600);
	CHECK(nr_seen == 3 && seen[2].tid == 12 && seen[2].rc == 600, "tid 12's with its rc");
	CHECK_U64(seen[2].user, MAGIC + seen[2].entry_ts);
	CHECK(seen[2].deref0 == 0, "a short record's deref[] is zeroed");
	ret(c, "cudaEventQuery", 10, 11, 0);		/* no such call open */
	CHECK_U64(st->orphan_returns, 1);
	CHECK(nr_seen == 3, "an orphan return delivers nothing");
	CHECK_U64(st->records, 7);
	calls__free(c);
}

static void test_depth_overflow(void)
{
	struct calls *c = new_core();
	const struct calls_stats *st = calls__stats(c);
	int extra = 3;
	uint64_t first_ts = ts + 10;

	for (int i = 0; i < CALLS_MAX_DEPTH + extra; i++)
		entry(c, "cudaStreamSynchronize", 30, 31);
	CHECK(nr_seen == extra, "%d calls past the limit delivered at once, got %d", extra, nr_seen);
	for (int i = 0; i < nr_seen; i++)
		CHECK(seen[i].end == CALL_OVERFLOW && !seen[i].ret_ts, "overflow %d", i);
	CHECK_U64(st->depth_overflows, extra);
	/* the innermost returns belong to the overflowed calls: not orphans, not matched to
	 * the frames below */
	for (int i = 0; i < extra; i++)
		ret(c, "cudaStreamSynchronize", 30, 31, 0);
	CHECK(nr_seen == extra, "overflowed calls' returns are consumed");
	for (int i = 0; i < CALLS_MAX_DEPTH; i++)
		ret(c, "cudaStreamSynchronize", 30, 31, 0);
	CHECK(nr_seen == extra + CALLS_MAX_DEPTH, "the %d stacked calls returned", CALLS_MAX_DEPTH);
	CHECK(seen[extra].end == CALL_RETURNED &&
	      seen[extra].entry_ts < seen[nr_seen - 1].ret_ts, "innermost first");
	CHECK_U64(seen[nr_seen - 1].entry_ts, first_ts);	/* the outermost: first entry */
	CHECK_U64(st->orphan_returns, 0);
	ret(c, "cudaStreamSynchronize", 30, 31, 0);
	CHECK_U64(st->orphan_returns, 1);
	calls__free(c);
}

static void test_unwind_exit_finish(void)
{
	struct calls *c = new_core();
	const struct calls_stats *st = calls__stats(c);
	struct tp_rec_exit x = { .type = TP_REC_EXIT, .pid = 40, .tid = 41, .exit_code = 9 };
	struct tp_rec_dlopen dl = { .type = TP_REC_DLOPEN, .pid = 40, .tid = 42 };
	struct calls_iter it = {};
	uint64_t ret_ts;

	/* longjmp: the outer call returns while two inner ones never will */
	entry(c, "ncclCommInitRank", 40, 41);
	entry(c, "ncclCommInitRankConfig", 40, 41);
	entry(c, "cudaStreamSynchronize", 40, 41);
	entry(c, "cudaDeviceSynchronize", 40, 41);
	ret(c, "ncclCommInitRankConfig", 40, 41, 3);
	ret_ts = ts;
	CHECK(nr_seen == 3, "two unwound + one returned, got %d", nr_seen);
	CHECK(seen[0].api == (uint32_t)api_id("cudaDeviceSynchronize") &&
	      seen[0].end == CALL_UNWOUND && seen[0].end_ns == ret_ts, "innermost unwound first");
	CHECK(seen[1].api == (uint32_t)api_id("cudaStreamSynchronize") && seen[1].end == CALL_UNWOUND,
	      "then the next");
	CHECK(seen[2].end == CALL_RETURNED && seen[2].rc == 3, "then the returned call");
	CHECK_U64(st->unwound, 2);
	CHECK(calls__next_open(c, 40, &it) && !calls__next_open(c, 40, &it), "the outer stays open");

	feed(c, &dl, sizeof(dl));
	CHECK(nr_seen == 4 && seen[3].kind == 'D' && seen[3].pid == 40 && seen[3].tid == 42,
	      "dlopen dispatched");

	entry(c, "cudaEventSynchronize", 40, 43);	/* another thread of pid 40 */
	entry(c, "cudaEventSynchronize", 50, 51);	/* another process */
	x.ts = ts += 10;
	feed(c, &x, sizeof(x));
	CHECK(nr_seen == 7, "two exited calls and the exit, got %d", nr_seen);
	for (int i = 4; i < 6; i++)
		CHECK(seen[i].kind == 'C' && seen[i].pid == 40 && seen[i].end == CALL_EXITED &&
		      seen[i].end_ns == x.ts, "pid 40's call %d ended at its exit", i);
	CHECK(seen[6].kind == 'X' && seen[6].pid == 40, "exit after its calls");
	CHECK_U64(st->exited_in_call, 2);
	memset(&it, 0, sizeof(it));
	CHECK(!calls__next_open(c, 40, &it), "nothing open in the exited process");
	memset(&it, 0, sizeof(it));
	CHECK(calls__next_open(c, 0, &it) && !calls__next_open(c, 0, &it), "pid 50's open");

	calls__finish(c, 99999);
	CHECK(nr_seen == 8 && seen[7].pid == 50 && seen[7].end == CALL_UNFINISHED &&
	      seen[7].end_ns == 99999, "finish closes the rest");
	CHECK_U64(st->unfinished, 1);
	CHECK_U64(st->dlopens, 1);
	CHECK_U64(st->exits, 1);
	calls__finish(c, 100000);
	CHECK(nr_seen == 8, "finish twice delivers nothing more");
	calls__free(c);
}

static void test_mem_ring(void)
{
	struct calls_sink sink = {
		.mem_call = sink_mem_call, .mem_usdt = sink_mem_usdt, .mem_api_count = 5,
	};
	struct calls *c = calls__new(CALLS_RING_MEM, &sink);
	const struct calls_stats *st = calls__stats(c);
	struct mem_rec_call mc = { .type = MEM_REC_CALL, .api = 4, .pid = 60 };
	struct mem_rec_usdt mu = { .type = MEM_REC_FREE, .pid = 61 };
	struct tp_rec_dlopen dl = { .type = TP_REC_DLOPEN };	/* not a mem ring type */

	nr_seen = 0;
	feed(c, &mc, sizeof(mc));
	feed(c, &mu, sizeof(mu));
	CHECK(nr_seen == 2 && seen[0].kind == 'M' && seen[0].api == 4 && seen[1].kind == 'U' &&
	      seen[1].rc == MEM_REC_FREE, "mem call and usdt dispatched");
	mc.api = 5;
	feed(c, &mc, sizeof(mc));
	CHECK_U64(st->bad_api, 1);
	feed(c, &mc, sizeof(mc) - 1);
	feed(c, &mu, sizeof(mu) - 1);
	CHECK_U64(st->bad_size, 2);
	dl.type = 7;
	feed(c, &dl, sizeof(dl));
	CHECK_U64(st->bad_type, 1);
	CHECK(nr_seen == 2, "no bad mem record reaches the sink");
	CHECK_U64(st->records, 2);
	calls__free(c);
}

/* tptrace fr -a's records: dispatched in ring order, the file's name ends in the record even
 * when the BPF side filled it to the last byte; a short one is bad, not read. */
static struct tp_rec_map got_map;
static int nr_maps, nr_execs;
static uint32_t exec_pid;

static void sink_map(void *ctx, const struct tp_rec_map *m)
{
	got_map = *m;
	nr_maps++;
}

static void sink_exec(void *ctx, const struct tp_rec_exec *e)
{
	exec_pid = e->pid;
	nr_execs++;
}

static void test_map_exec(void)
{
	struct calls_sink sink = { .map = sink_map, .exec = sink_exec };
	struct calls *c = calls__new(CALLS_RING_CUDA, &sink);
	const struct calls_stats *st = calls__stats(c);
	struct tp_rec_map m = { .type = TP_REC_MAP, .pid = 31, .kind = 1, .start = 0x7f0000 };
	struct tp_rec_exec e = { .type = TP_REC_EXEC, .pid = 32 };

	memset(m.name, 'x', sizeof(m.name));	/* no NUL of its own */
	feed(c, &m, sizeof(m));
	CHECK(nr_maps == 1 && got_map.pid == 31 && got_map.start == 0x7f0000, "map dispatched");
	CHECK(strlen(got_map.name) == TP_MAP_NAME_MAX - 1, "name ends: %zu", strlen(got_map.name));
	feed(c, &e, sizeof(e));
	CHECK(nr_execs == 1 && exec_pid == 32, "exec dispatched");
	feed(c, &m, sizeof(m) - 1);
	feed(c, &e, sizeof(e) - 1);
	CHECK(nr_maps == 1 && nr_execs == 1, "short ones not handed on");
	CHECK_U64(st->bad_size, 2);
	CHECK_U64(st->maps, 1);
	CHECK_U64(st->execs, 1);
	CHECK_U64(st->records, 0);	/* not calls: "records consumed" stays the calls' */
	calls__free(c);
}

int main(void)
{
	calls__free(NULL);
	test_malformed();
	test_map_exec();
	test_pairing();
	test_depth_overflow();
	test_unwind_exit_finish();
	test_mem_ring();
	return check_done();
}
