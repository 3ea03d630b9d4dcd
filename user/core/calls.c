// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "calls.h"
#include "cuda_api.h"
#include "hashmap.h"
#include "mem.h"
#include "nccl_api.h"

struct calls_thread {
	int pid, tid;
	int depth;
	/* calls pushed past CALLS_MAX_DEPTH (already delivered as CALL_OVERFLOW): the next
	 * returns on this thread are theirs, innermost first */
	int overflowed;
	struct call_frame stack[CALLS_MAX_DEPTH];
};

struct calls {
	enum calls_ring ring;
	struct calls_sink sink;
	struct u64map threads;		/* pid << 32 | tid -> struct calls_thread* */
	struct calls_stats stats;
};

struct calls *calls__new(enum calls_ring ring, const struct calls_sink *sink)
{
	struct calls *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->ring = ring;
	c->sink = *sink;
	return c;
}

void calls__free(struct calls *c)
{
	if (!c)
		return;
	u64map__free_values(&c->threads);
	free(c);
}

const struct calls_stats *calls__stats(const struct calls *c)
{
	return &c->stats;
}

bool calls__api_valid(uint32_t api)
{
	return api < (uint32_t)cuda_api_count ||
	       (api >= NCCL_API_BASE && api < NCCL_API_BASE + (uint32_t)nccl_api_count);
}

static bool api_has_return(struct calls *c, uint32_t api)
{
	if (c->sink.has_return)
		return c->sink.has_return(c->sink.ctx, api);
	if (api >= NCCL_API_BASE)
		return nccl_api_has_return(api - NCCL_API_BASE);
	return cuda_apis[api].ret;
}

static uint64_t thread_key(uint32_t pid, uint32_t tid)
{
	uint64_t key = (uint64_t)pid << 32 | tid;

	return key ? key : 1;	/* u64map keys are nonzero; pid 0 tid 0 is the idle task */
}

static struct calls_thread *get_thread(struct calls *c, uint32_t pid, uint32_t tid, bool create)
{
	struct calls_thread *th;
	bool created;
	uint64_t v;

	if (!create)
		return u64map__get(&c->threads, thread_key(pid, tid), &v) ?
		       (struct calls_thread *)(uintptr_t)v : NULL;
	th = u64map__get_or_alloc(&c->threads, thread_key(pid, tid), sizeof(*th), &created);
	if (th && created) {
		th->pid = (int)pid;
		th->tid = (int)tid;
	}
	return th;
}

static void deliver(struct calls *c, struct call_frame *f, const struct tp_rec_ret *ret,
		    enum call_end end, uint64_t end_ns)
{
	struct call call = { .frame = f, .ret = ret, .end = end, .end_ns = end_ns };

	switch (end) {
	case CALL_UNWOUND: c->stats.unwound++; break;
	case CALL_EXITED: c->stats.exited_in_call++; break;
	case CALL_UNFINISHED: c->stats.unfinished++; break;
	case CALL_OVERFLOW: c->stats.depth_overflows++; break;
	default: break;
	}
	if (c->sink.call)
		c->sink.call(c->sink.ctx, &call);
}

/* Short records carry no deref[]: a frame is the record, zeroed past what came, and zeroed
 * user[]. Filled in place (not built on the stack and copied): 520 bytes a call, twice, were
 * a tenth of the pipeline's time. */
static void frame_fill(struct call_frame *f, const void *data, size_t size)
{
	size_t n = size < sizeof(f->rec) ? size : sizeof(f->rec);

	memcpy(&f->rec, data, n);
	memset((char *)f + n, 0, sizeof(*f) - n);
}

static void on_entry(struct calls *c, const void *data, size_t size)
{
	const struct tp_rec_call *rec = data;
	struct calls_thread *th;
	struct call_frame frame, *f;

	if (!api_has_return(c, rec->api)) {
		frame_fill(&frame, data, size);
		if (c->sink.entry)
			c->sink.entry(c->sink.ctx, &frame);
		deliver(c, &frame, NULL, CALL_NO_RETURN, 0);
		return;
	}
	th = get_thread(c, rec->pid, rec->tid, true);
	if (!th || th->depth == CALLS_MAX_DEPTH) {
		if (th)
			th->overflowed++;
		frame_fill(&frame, data, size);
		if (c->sink.entry)
			c->sink.entry(c->sink.ctx, &frame);
		deliver(c, &frame, NULL, CALL_OVERFLOW, 0);
		return;
	}
	f = &th->stack[th->depth++];
	frame_fill(f, data, size);
	if (c->sink.entry)
		c->sink.entry(c->sink.ctx, f);
}

static void on_return(struct calls *c, const struct tp_rec_ret *r)
{
	struct calls_thread *th = get_thread(c, r->pid, r->tid, false);
	int top;

	if (th && th->overflowed) {
		/* returns come innermost first: this one is an overflowed call's (counted when
		 * its entry overflowed) */
		th->overflowed--;
		return;
	}
	for (int i = th ? th->depth - 1 : -1; i >= 0; i--) {
		if (th->stack[i].rec.api != r->api)
			continue;
		/* frames above i lost their returns (longjmp, exceptions): they end here. The
		 * depth drops before delivery so a sink that walks open calls sees them closed. */
		top = th->depth;
		th->depth = i;
		for (int j = top - 1; j > i; j--)
			deliver(c, &th->stack[j], NULL, CALL_UNWOUND, r->ts);
		deliver(c, &th->stack[i], r, CALL_RETURNED, 0);
		return;
	}
	c->stats.orphan_returns++;
}

/* Closes every open call of pid (0: all) innermost first. */
static void close_open(struct calls *c, uint32_t pid, enum call_end end, uint64_t end_ns)
{
	uint64_t v;

	for (size_t it = 0; u64map__next(&c->threads, &it, NULL, &v);) {
		struct calls_thread *th = (struct calls_thread *)(uintptr_t)v;

		if (pid && (uint32_t)th->pid != pid)
			continue;
		th->overflowed = 0;
		while (th->depth > 0) {
			th->depth--;
			deliver(c, &th->stack[th->depth], NULL, end, end_ns);
		}
	}
}

void calls__finish(struct calls *c, uint64_t end_ns)
{
	close_open(c, 0, CALL_UNFINISHED, end_ns);
}

struct call_frame *calls__next_open(struct calls *c, int pid, struct calls_iter *it)
{
	uint64_t v;

	for (;;) {
		struct calls_thread *th = it->thread;

		if (th && it->depth < th->depth)
			return &th->stack[it->depth++];
		it->thread = NULL;
		it->depth = 0;
		if (!u64map__next(&c->threads, &it->slot, NULL, &v))
			return NULL;
		th = (struct calls_thread *)(uintptr_t)v;
		if (!pid || th->pid == pid)
			it->thread = th;
	}
}

static void bad(struct calls *c, uint64_t *kind)
{
	(*kind)++;
	c->stats.bad_records++;
}

static void cuda_record(struct calls *c, uint32_t type, void *data, size_t size)
{
	switch (type) {
	case TP_REC_CALL: {
		const struct tp_rec_call *rec = data;

		if (size < TP_REC_CALL_SHORT_SIZE || size > TP_REC_CALL_FULL_SIZE) {
			bad(c, &c->stats.bad_size);
			return;
		}
		if (!calls__api_valid(rec->api)) {
			bad(c, &c->stats.bad_api);
			return;
		}
		c->stats.records++;
		on_entry(c, data, size);
		return;
	}
	case TP_REC_RET: {
		const struct tp_rec_ret *r = data;

		if (size < sizeof(*r)) {
			bad(c, &c->stats.bad_size);
			return;
		}
		if (!calls__api_valid(r->api)) {
			bad(c, &c->stats.bad_api);
			return;
		}
		c->stats.records++;
		on_return(c, r);
		return;
	}
	case TP_REC_DLOPEN:
		if (size < sizeof(struct tp_rec_dlopen)) {
			bad(c, &c->stats.bad_size);
			return;
		}
		c->stats.dlopens++;
		if (c->sink.dlopen)
			c->sink.dlopen(c->sink.ctx, data);
		return;
	case TP_REC_EXIT: {
		const struct tp_rec_exit *x = data;

		if (size < sizeof(*x)) {
			bad(c, &c->stats.bad_size);
			return;
		}
		c->stats.exits++;
		/* a process that died inside a call was inside it until it died */
		close_open(c, x->pid, CALL_EXITED, x->ts);
		if (c->sink.exit)
			c->sink.exit(c->sink.ctx, x);
		return;
	}
	case TP_REC_MAP: {
		struct tp_rec_map m;

		if (size < sizeof(m)) {
			bad(c, &c->stats.bad_size);
			return;
		}
		memcpy(&m, data, sizeof(m));
		m.name[TP_MAP_NAME_MAX - 1] = '\0';
		c->stats.maps++;
		if (c->sink.map)
			c->sink.map(c->sink.ctx, &m);
		return;
	}
	case TP_REC_EXEC:
		if (size < sizeof(struct tp_rec_exec)) {
			bad(c, &c->stats.bad_size);
			return;
		}
		c->stats.execs++;
		if (c->sink.exec)
			c->sink.exec(c->sink.ctx, data);
		return;
	default: {
		bad(c, &c->stats.bad_type);
		return;
	}
	}
}

static void mem_record(struct calls *c, uint32_t type, void *data, size_t size)
{
	switch (type) {
	case MEM_REC_MALLOC:
	case MEM_REC_FREE:
		if (size < sizeof(struct mem_rec_usdt)) {
			bad(c, &c->stats.bad_size);
			return;
		}
		c->stats.records++;
		if (c->sink.mem_usdt)
			c->sink.mem_usdt(c->sink.ctx, data);
		return;
	case MEM_REC_CALL: {
		const struct mem_rec_call *rec = data;

		if (size < sizeof(*rec)) {
			bad(c, &c->stats.bad_size);
			return;
		}
		if (rec->api >= c->sink.mem_api_count) {
			bad(c, &c->stats.bad_api);
			return;
		}
		c->stats.records++;
		if (c->sink.mem_call)
			c->sink.mem_call(c->sink.ctx, data);
		return;
	}
	default: {
		bad(c, &c->stats.bad_type);
		return;
	}
	}
}

int calls__ring_cb(void *ctx, void *data, size_t size)
{
	struct calls *c = ctx;
	uint32_t type;

	if (size < sizeof(type)) {
		bad(c, &c->stats.bad_type);
		return 0;
	}
	memcpy(&type, data, sizeof(type));
	if (c->ring == CALLS_RING_MEM)
		mem_record(c, type, data, size);
	else
		cuda_record(c, type, data, size);
	return 0;
}
