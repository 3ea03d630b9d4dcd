// SPDX-License-Identifier: MIT
/* Flight-recorder dumps: the recorder's state as JSON (docs/fr-schema.md), written atomically,
 * and the triggers that write them (request, stall, exit). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#include <cjson/cJSON.h>
#include "atomic_file.h"
#include "cuda_api.h"
#include "fr_trigger.h"
#include "flightrec_int.h"
#include "fr_keys.h"
#include "fr_net.h"
#include "growbuf.h"
#include "log.h"
#include "target.h"
#include "util.h"

#define FR_SCHEMA_VERSION 2	/* 2: "stacks" (docs/fr-schema.md) */

/* A round of dumps: one set of processes whose state was captured at one instant. */
struct fr_round {
	int dirfd;			/* the dump directory, < 0: refused (said) */
	uint64_t drain_start;		/* CLOCK_MONOTONIC: the ring's drain began */
	uint64_t captured;		/* ... and ended: the instant every dump of the set shows */
	bool drained;			/* opts.drain ran and succeeded */
	char id[17];			/* "dump_set" id */
	int index, count;
};

static cJSON *num_or_null(int64_t v, bool known)
{
	return known ? cJSON_CreateNumber((double)v) : cJSON_CreateNull();
}

static void add_ns(cJSON *o, const char *key, struct flightrec *fr, uint64_t mono)
{
	if (mono) {
		char buf[32];

		/* ns since the epoch exceed a double's 53 bits: write the integer exactly */
		snprintf(buf, sizeof(buf), "%" PRId64, (int64_t)mono + fr->realtime_offset);
		cJSON_AddItemToObject(o, key, cJSON_CreateRaw(buf));
	} else {
		cJSON_AddNullToObject(o, key);
	}
}

static void add_hex(cJSON *o, const char *key, uint64_t v)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "0x%" PRIx64, v);
	cJSON_AddStringToObject(o, key, buf);
}

static void add_id(cJSON *o, const char *key, uint64_t id, bool known)
{
	char buf[24];

	if (!known) {
		cJSON_AddNullToObject(o, key);
		return;
	}
	snprintf(buf, sizeof(buf), "%016" PRIx64, id);
	cJSON_AddStringToObject(o, key, buf);
}

/* A comm without a cross-rank identity still needs a stable local name in the dump. */
void comm_id_str(struct flightrec *fr, const struct fr_proc *p, const struct fr_comm *c,
		 char *buf, size_t size)
{
	if (c->id)
		snprintf(buf, size, "%016" PRIx64, c->id);
	else if (!c->handle)	/* a failed init has no handle: its entry names it */
		snprintf(buf, size, "local:%.64s:%d:init%" PRIu64, fr->host, p->pid, c->init_record);
	else
		snprintf(buf, size, "local:%.64s:%d:%" PRIx64, fr->host, p->pid, c->handle);
}

static const char *state_name(enum fr_state s)
{
	return s == FR_FAILED ? "failed" : s == FR_COMPLETED ? "completed" :
	       s == FR_STARTED ? "started" : "enqueued";
}

/* The fields of a "comm_init" entry that a collective's would fill: it moved no data. */
static void comm_init_fields(cJSON *o)
{
	cJSON_AddStringToObject(o, FRK_OP, "comm_init");
	cJSON_AddStringToObject(o, FRK_PROFILING_NAME, "nccl:comm_init");
	cJSON_AddBoolToObject(o, FRK_IS_P2P, false);
	cJSON_AddNumberToObject(o, FRK_COUNT, 0);
	cJSON_AddNullToObject(o, FRK_DTYPE);
	cJSON_AddArrayToObject(o, FRK_INPUT_SIZES);
	cJSON_AddArrayToObject(o, FRK_OUTPUT_SIZES);
	cJSON_AddArrayToObject(o, FRK_INPUT_DTYPES);
	cJSON_AddArrayToObject(o, FRK_OUTPUT_DTYPES);
	cJSON_AddNullToObject(o, FRK_REDUCE_OP);
	cJSON_AddNullToObject(o, FRK_ROOT);
	cJSON_AddNullToObject(o, FRK_PEER);
	cJSON_AddNullToObject(o, FRK_STREAM);
	cJSON_AddNullToObject(o, FRK_SENDBUFF);
	cJSON_AddNullToObject(o, FRK_RECVBUFF);
}

/* What a collective or p2p call moved: op, sizes, dtypes, peers, stream and buffers. */
static void coll_fields(cJSON *o, const struct fr_comm *c, const struct fr_entry *e)
{
	int nranks = c->nranks > 0 ? c->nranks : e->nranks;
	cJSON *a, *inner;
	int64_t in, out;
	char buf[64];

	cJSON_AddStringToObject(o, FRK_OP, nccl_op_name(e->c.op));
	if (e->c.op == NCCL_OP_SEND)
		snprintf(buf, sizeof(buf), "nccl:send %d->%d", c->rank, e->c.peer);
	else if (e->c.op == NCCL_OP_RECV)
		snprintf(buf, sizeof(buf), "nccl:recv %d<-%d", c->rank, e->c.peer);
	else
		snprintf(buf, sizeof(buf), "nccl:%s", nccl_op_name(e->c.op));
	cJSON_AddStringToObject(o, FRK_PROFILING_NAME, buf);
	cJSON_AddBoolToObject(o, FRK_IS_P2P, nccl_op_is_p2p(e->c.op));
	cJSON_AddNumberToObject(o, FRK_COUNT, (double)e->c.count);
	cJSON_AddStringToObject(o, FRK_DTYPE, nccl_dtype_name(e->c.dtype));
	nccl_op_sizes(e->c.op, e->c.count, nranks, &in, &out);
	a = cJSON_AddArrayToObject(o, FRK_INPUT_SIZES);
	inner = cJSON_CreateArray();
	cJSON_AddItemToArray(inner, cJSON_CreateNumber((double)in));
	cJSON_AddItemToArray(a, inner);
	a = cJSON_AddArrayToObject(o, FRK_OUTPUT_SIZES);
	inner = cJSON_CreateArray();
	cJSON_AddItemToArray(inner, cJSON_CreateNumber((double)out));
	cJSON_AddItemToArray(a, inner);
	a = cJSON_AddArrayToObject(o, FRK_INPUT_DTYPES);
	cJSON_AddItemToArray(a, cJSON_CreateString(nccl_dtype_torch(e->c.dtype)));
	a = cJSON_AddArrayToObject(o, FRK_OUTPUT_DTYPES);
	cJSON_AddItemToArray(a, cJSON_CreateString(nccl_dtype_torch(e->c.dtype)));
	if (nccl_op_has_redop(e->c.op))
		cJSON_AddStringToObject(o, FRK_REDUCE_OP, nccl_redop_name(e->c.redop));
	else
		cJSON_AddNullToObject(o, FRK_REDUCE_OP);
	cJSON_AddItemToObject(o, FRK_ROOT, num_or_null(e->c.root, nccl_op_has_root(e->c.op)));
	cJSON_AddItemToObject(o, FRK_PEER, num_or_null(e->c.peer, nccl_op_is_p2p(e->c.op)));
	add_hex(o, FRK_STREAM, e->c.stream);
	add_hex(o, FRK_SENDBUFF, e->c.sendbuff);
	add_hex(o, FRK_RECVBUFF, e->c.recvbuff);
}

/* --py-stacks: "frames" as PyTorch's FR entries have them ({"name", "filename", "line"},
 * innermost first); [] with "frames_missing" when the call had none. PyTorch's readers take
 * [] (its own dumps without stack traces, our --export-torch); null fields are unresolved
 * frames (the code object was gone), never guessed. */
static void frames_json(struct flightrec *fr, struct fr_proc *p, cJSON *o, const struct fr_entry *e)
{
	struct fr_pystack *s = fr_pystack_get(fr, p, e->ustack);
	cJSON *arr = cJSON_AddArrayToObject(o, FRK_FRAMES);

	if (!s) {
		cJSON_AddStringToObject(o, FRK_FRAMES_MISSING, "out of memory");
		return;
	}
	for (int i = 0; arr && i < s->nr; i++) {
		const struct fr_pyframe *f = &s->frames[i];
		cJSON *fo = cJSON_CreateObject();

		if (!fo)
			return;
		if (f->name)
			cJSON_AddStringToObject(fo, FRK_NAME, f->name);
		else
			cJSON_AddNullToObject(fo, FRK_NAME);
		if (f->file)
			cJSON_AddStringToObject(fo, FRK_FILENAME, f->file);
		else
			cJSON_AddNullToObject(fo, FRK_FILENAME);
		cJSON_AddItemToObject(fo, FRK_LINE, num_or_null(f->line, f->line > 0));
		cJSON_AddItemToArray(arr, fo);
	}
	if (!s->nr)
		cJSON_AddStringToObject(o, FRK_FRAMES_MISSING, s->missing ? s->missing : "unknown");
}

static cJSON *entry_json(struct flightrec *fr, struct fr_proc *p, const struct fr_entry *e)
{
	const struct fr_comm *c = &p->comms[e->comm];
	cJSON *o = cJSON_CreateObject();
	char buf[128];
	struct fr_thread *th;
	uint64_t v;

	cJSON_AddNumberToObject(o, FRK_RECORD_ID, (double)e->record_id);
	comm_id_str(fr, p, c, buf, sizeof(buf));
	cJSON_AddStringToObject(o, FRK_COMM_ID, buf);
	cJSON_AddNumberToObject(o, FRK_COLLECTIVE_SEQ_ID, (double)e->coll_seq);
	cJSON_AddNumberToObject(o, FRK_P2P_SEQ_ID, (double)e->p2p_seq);
	cJSON_AddNumberToObject(o, FRK_GROUP_ID, (double)e->group_id);
	if (e->kind == FR_ENTRY_COMM_INIT)
		comm_init_fields(o);
	else
		coll_fields(o, c, e);
	cJSON_AddStringToObject(o, FRK_STATE, state_name(e->state));
	add_ns(o, FRK_TIME_CREATED_NS, fr, e->created);
	add_ns(o, FRK_TIME_DISCOVERED_STARTED_NS, fr, e->started);
	add_ns(o, FRK_TIME_DISCOVERED_COMPLETED_NS, fr, e->completed);
	if (e->started && e->completed && e->completed >= e->started)
		cJSON_AddNumberToObject(o, FRK_DURATION_MS, (e->completed - e->started) / 1e6);
	else
		cJSON_AddNullToObject(o, FRK_DURATION_MS);
	add_ns(o, FRK_API_ENTER_NS, fr, e->created);
	add_ns(o, FRK_API_EXIT_NS, fr, e->in_call ? 0 : e->exited);
	cJSON_AddItemToObject(o, FRK_RC, num_or_null(e->rc, e->rc != NO_RC));
	cJSON_AddNumberToObject(o, FRK_THREAD_ID, e->tid);
	th = u64map__get(&p->threads, (uint64_t)e->tid, &v) ? (struct fr_thread *)(uintptr_t)v : NULL;
	cJSON_AddStringToObject(o, FRK_THREAD_NAME, th && th->name[0] ? th->name : "");
	if (fr->opts.ustack_lookup)
		frames_json(fr, p, o, e);
	return o;
}

static cJSON *comm_json(struct flightrec *fr, struct fr_proc *p, const struct fr_comm *c)
{
	cJSON *o = cJSON_CreateObject(), *l;
	char buf[128];

	comm_id_str(fr, p, c, buf, sizeof(buf));
	cJSON_AddStringToObject(o, FRK_COMM_ID, buf);
	cJSON_AddBoolToObject(o, FRK_CROSS_RANK_ID, c->id != 0);
	if (c->handle)
		add_hex(o, FRK_COMM_HANDLE, c->handle);
	else
		cJSON_AddNullToObject(o, FRK_COMM_HANDLE);	/* init failed: NCCL made none */
	cJSON_AddItemToObject(o, FRK_RANK, num_or_null(c->rank, c->rank >= 0));
	cJSON_AddItemToObject(o, FRK_NRANKS, num_or_null(c->nranks, c->nranks > 0));
	cJSON_AddItemToObject(o, FRK_DEVICE, num_or_null(c->device, c->device >= 0));
	add_id(o, FRK_PARENT, c->parent_id, c->has_parent && c->parent_id);
	cJSON_AddItemToObject(o, FRK_SPLIT_COLOR, num_or_null(c->split_color, c->split));
	cJSON_AddItemToObject(o, FRK_SPLIT_KEY, num_or_null(c->split_key, c->split));
	cJSON_AddStringToObject(o, FRK_CREATED_BY, c->created_by);
	l = cJSON_AddObjectToObject(o, FRK_LEARNED);
	cJSON_AddStringToObject(l, FRK_COMM_ID, c->learned_id);
	cJSON_AddStringToObject(l, FRK_RANK, c->learned_rank);
	cJSON_AddStringToObject(l, FRK_NRANKS, c->learned_nranks);
	cJSON_AddStringToObject(l, FRK_SEQ_ORIGIN, c->pre_existing ? "attach" : "comm_init");
	cJSON_AddStringToObject(o, FRK_STATE, c->state);
	if (!strcmp(c->state, "init_failed"))
		cJSON_AddNumberToObject(o, FRK_INIT_RC, (double)c->init_rc);
	cJSON_AddItemToObject(o, FRK_ASYNC_ERROR,
			      num_or_null(c->async_error, c->async_error != NO_RC));
	cJSON_AddNumberToObject(o, FRK_LAST_ENQUEUED_SEQ, (double)c->coll_seq);
	cJSON_AddNumberToObject(o, FRK_LAST_STARTED_SEQ, (double)c->last_started_seq);
	cJSON_AddNumberToObject(o, FRK_LAST_COMPLETED_SEQ, (double)c->last_completed_seq);
	cJSON_AddNumberToObject(o, FRK_LAST_P2P_SEQ, (double)c->p2p_seq);
	return o;
}

static const char *call_name(uint32_t api)
{
	if (api >= NCCL_API_BASE)
		return nccl_apis[api - NCCL_API_BASE].symbol;
	return cuda_apis[api].symbol;
}

/* What the calls core could not turn into complete calls (all processes of this tptrace). */
static void calls_json(cJSON *root, const struct calls_stats *st)
{
	cJSON *o = cJSON_AddObjectToObject(root, FRK_RECORDS);

	cJSON_AddNumberToObject(o, FRK_CONSUMED, (double)st->records);
	cJSON_AddNumberToObject(o, FRK_BAD_RECORDS, (double)st->bad_records);
	cJSON_AddNumberToObject(o, FRK_DEPTH_OVERFLOWS, (double)st->depth_overflows);
	cJSON_AddNumberToObject(o, FRK_ORPHAN_RETURNS, (double)st->orphan_returns);
	cJSON_AddNumberToObject(o, FRK_UNWOUND_CALLS, (double)st->unwound);
}

/* "probes_late" (tptrace fr -a): library files this process mapped before their system-wide
 * probes were attached; its calls into them in that window were not recorded. Always written
 * (an empty list: nothing missed this way). */
static void late_json(cJSON *root, struct flightrec *fr, const struct fr_proc *p)
{
	cJSON *arr = cJSON_AddArrayToObject(root, FRK_PROBES_LATE);

	for (int i = 0; arr && i < p->nr_late; i++) {
		const struct fr_late *l = &p->late[i];
		cJSON *o = cJSON_CreateObject();

		if (!o)
			return;
		cJSON_AddStringToObject(o, FRK_LIBRARY, l->path);
		add_ns(o, FRK_MAPPED_NS, fr, l->mapped);
		add_ns(o, FRK_ATTACHED_NS, fr, l->attached);
		cJSON_AddNumberToObject(o, FRK_UNRECORDED_MS,
					(double)(l->attached - l->mapped) / 1e6);
		cJSON_AddStringToObject(o, FRK_NOTE, "calls into this library between mapped_ns "
					"and attached_ns were not recorded");
		cJSON_AddItemToArray(arr, o);
	}
}

/* "job" and "trigger" (docs/fr-schema.md "Triggers"): early in the dump, so a reader of its
 * head can group dumps by trigger without parsing the entries */
static void trigger_fields(cJSON *root, const struct fr_proc *p, const struct fr_trigger_rec *t)
{
	cJSON *o;

	if (p->job[0])
		cJSON_AddStringToObject(root, FRK_JOB, p->job);
	else
		cJSON_AddNullToObject(root, FRK_JOB);
	if (!t) {
		cJSON_AddNullToObject(root, FRK_TRIGGER);
		return;
	}
	o = cJSON_AddObjectToObject(root, FRK_TRIGGER);
	cJSON_AddStringToObject(o, FRK_ID, t->id);
	cJSON_AddStringToObject(o, FRK_ORIGIN_HOST, t->origin_host);
	cJSON_AddStringToObject(o, FRK_REASON, t->reason);
	{
		char num[24];	/* exact: a double would round the nanoseconds */

		snprintf(num, sizeof(num), "%lld", (long long)t->time_ns);
		cJSON_AddRawToObject(o, FRK_TIME_NS, num);
	}
}

/* "dump_set": the dumps of one round, whose state was captured at one instant (see
 * round_capture); index/count tell a reader which of them it has. */
static void dump_set_json(cJSON *root, struct flightrec *fr, const struct fr_round *r)
{
	cJSON *o = cJSON_AddObjectToObject(root, FRK_DUMP_SET);

	cJSON_AddStringToObject(o, FRK_ID, r->id);
	cJSON_AddNumberToObject(o, FRK_INDEX, r->index);
	cJSON_AddNumberToObject(o, FRK_COUNT, r->count);
	add_ns(o, FRK_CAPTURED_NS, fr, r->captured);
	cJSON_AddNumberToObject(o, FRK_CAPTURED_MONO_NS, (double)r->captured);
	cJSON_AddNumberToObject(o, FRK_CAPTURE_SPREAD_NS, (double)(r->captured - r->drain_start));
	cJSON_AddBoolToObject(o, FRK_RING_DRAINED, r->drained);
}

/* "net": read by net_capture with the round's state; an exited process has no sockets left
 * to read (unknown, said) */
static void net_json(cJSON *root, struct fr_proc *p)
{
	cJSON *o;

	if (p->net) {
		cJSON_AddItemToObject(root, FRK_NET, p->net);
		p->net = NULL;
		return;
	}
	o = cJSON_AddObjectToObject(root, FRK_NET);
	cJSON_AddNullToObject(o, FRK_SOURCE);
	cJSON_AddStringToObject(o, FRK_ERROR, p->exited ? "the process exited: its sockets are gone" :
				"not read (out of memory)");
	cJSON_AddNullToObject(o, FRK_SOCKETS);
}

/* Every process's TCP connections, right after the round's capture and before the stack
 * snapshots: a cheap read (one per network namespace) that describes the same moment. */
static void net_capture(struct flightrec *fr, struct fr_proc **procs, int n)
{
	struct fr_net *net = fr_net__new();

	for (int i = 0; net && i < n; i++) {
		if (!procs[i]->exited)
			procs[i]->net = fr_net__json(net, procs[i]->pid);
		/* sockets of hundreds of processes take a while: the ring is emptied meanwhile */
		if (fr->opts.pump)
			fr->opts.pump(fr->opts.drain_ctx, 0);
	}
	fr_net__free(net);
}

static cJSON *dump_json(struct flightrec *fr, struct fr_proc *p, const char *reason,
			const struct fr_trigger_rec *trig, const struct fr_round *r)
{
	struct target *t = p->t;
	cJSON *root = cJSON_CreateObject(), *arr, *proc;
	uint64_t now = r->captured, first, v;
	struct calls_iter it = {};
	struct call_frame *f;
	int rank, world, local;

	cJSON_AddStringToObject(root, FRK_SCHEMA, "tptrace-fr");
	cJSON_AddNumberToObject(root, FRK_VERSION, FR_SCHEMA_VERSION);
	cJSON_AddStringToObject(root, FRK_HOST, fr->host);
	cJSON_AddNumberToObject(root, FRK_PID, p->pid);
	cJSON_AddStringToObject(root, FRK_COMM, target__comm(t));
	cJSON_AddStringToObject(root, FRK_CMDLINE, target__cmdline(t) ? target__cmdline(t) : "");
	rank = target__rank(t);
	world = target__world_size(t);
	local = target__local_rank(t);
	cJSON_AddItemToObject(root, FRK_GLOBAL_RANK, num_or_null(rank, rank >= 0));
	cJSON_AddItemToObject(root, FRK_WORLD_SIZE, num_or_null(world, world > 0));
	cJSON_AddItemToObject(root, FRK_LOCAL_RANK, num_or_null(local, local >= 0));
	if (p->nccl_version[0])
		cJSON_AddStringToObject(root, FRK_NCCL_VERSION, p->nccl_version);
	else
		cJSON_AddNullToObject(root, FRK_NCCL_VERSION);
	if (p->nccl_library[0])
		cJSON_AddStringToObject(root, FRK_NCCL_LIBRARY, p->nccl_library);
	else
		cJSON_AddNullToObject(root, FRK_NCCL_LIBRARY);
	cJSON_AddStringToObject(root, FRK_DUMP_REASON, reason);
	trigger_fields(root, p, trig);
	/* the instant the state below describes (not when the file was written: the stack
	 * snapshots and the other dumps of the round come between) */
	add_ns(root, FRK_DUMP_TIME_NS, fr, now);
	cJSON_AddNumberToObject(root, FRK_DUMP_MONO_NS, (double)now);
	dump_set_json(root, fr, r);
	proc = cJSON_AddObjectToObject(root, FRK_PROCESS);
	if (!p->exited) {
		cJSON_AddStringToObject(proc, FRK_STATE, "running");
		cJSON_AddNullToObject(proc, FRK_EXIT_CODE);
		cJSON_AddNullToObject(proc, FRK_SIGNAL);
	} else if (p->exit_code >= 0 && (p->exit_code & 0x7f)) {
		cJSON_AddStringToObject(proc, FRK_STATE, "killed");
		cJSON_AddNullToObject(proc, FRK_EXIT_CODE);
		cJSON_AddNumberToObject(proc, FRK_SIGNAL, p->exit_code & 0x7f);
	} else {
		cJSON_AddStringToObject(proc, FRK_STATE, "exited");
		cJSON_AddItemToObject(proc, FRK_EXIT_CODE,
				      num_or_null((p->exit_code >> 8) & 0xff, p->exit_code >= 0));
		cJSON_AddNullToObject(proc, FRK_SIGNAL);
	}
	if (p->execd)	/* the pid lives on as another program: no exit code */
		cJSON_AddBoolToObject(proc, FRK_REPLACED_BY_EXEC, true);
	late_json(root, fr, p);
	if (fr->opts.ustack_lookup) {
		cJSON *py = cJSON_AddObjectToObject(root, FRK_PY_STACKS);

		if (p->python[0])
			cJSON_AddStringToObject(py, FRK_PYTHON, p->python);
		else
			cJSON_AddNullToObject(py, FRK_PYTHON);
		if (p->python_why[0] || !p->python[0])
			cJSON_AddStringToObject(py, FRK_WHY_NO_FRAMES,
						p->python_why[0] ? p->python_why :
						"unknown (the process's Python was not looked at)");
		else
			cJSON_AddNullToObject(py, FRK_WHY_NO_FRAMES);
	} else {
		cJSON_AddNullToObject(root, FRK_PY_STACKS);	/* --py-stacks off */
	}
	cJSON_AddNumberToObject(root, FRK_RING_SIZE, (double)fr->opts.ring_size);
	cJSON_AddNumberToObject(root, FRK_ENTRIES_RECORDED, (double)(p->next_record_id - 1));
	cJSON_AddNumberToObject(root, FRK_ENTRIES_OVERWRITTEN,
				(double)(p->next_record_id - 1 > fr->opts.ring_size ?
					 p->next_record_id - 1 - fr->opts.ring_size : 0));
	cJSON_AddItemToObject(root, FRK_EVENTS_DROPPED,
			      num_or_null(fr->events_dropped, !fr->events_dropped_err));
	if (fr->events_dropped_err)
		cJSON_AddStringToObject(root, FRK_EVENTS_DROPPED_UNKNOWN,
					strerror(-fr->events_dropped_err));
	calls_json(root, calls__stats(fr->calls));

	arr = cJSON_AddArrayToObject(root, FRK_COMMS);
	for (int i = 0; i < p->nr_comms; i++)
		cJSON_AddItemToArray(arr, comm_json(fr, p, &p->comms[i]));

	arr = cJSON_AddArrayToObject(root, FRK_IN_CALL);
	while (!p->exited && (f = calls__next_open(fr->calls, p->pid, &it))) {
		const struct fr_call *call = fr_call_of(fr, f);
		struct fr_thread *th;
		cJSON *o;
		struct fr_entry *e;

		if (!call->known)
			continue;
		th = u64map__get(&p->threads, f->rec.tid, &v) ? (struct fr_thread *)(uintptr_t)v : NULL;
		e = call->has_entry ? fr_entry_by_id(fr, p, call->record_id) : NULL;
		o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, FRK_TID, f->rec.tid);
		cJSON_AddStringToObject(o, FRK_THREAD_NAME, th ? th->name : "");
		cJSON_AddStringToObject(o, FRK_API, call_name(call->api));
		add_ns(o, FRK_ENTERED_NS, fr, call->entered);
		/* events lost since it entered: its return may be one of them (the call may
		 * have ended long ago) */
		if (!fr->events_dropped_err && fr->events_dropped > call->dropped_at)
			cJSON_AddNumberToObject(o, FRK_EVENTS_DROPPED_SINCE,
						(double)(fr->events_dropped - call->dropped_at));
		if (e) {
			char buf[128];

			comm_id_str(fr, p, &p->comms[e->comm], buf, sizeof(buf));
			cJSON_AddStringToObject(o, FRK_COMM_ID, buf);
			cJSON_AddNumberToObject(o, FRK_SEQ,
						(double)(e->coll_seq ? e->coll_seq : e->p2p_seq));
		} else {
			cJSON_AddNullToObject(o, FRK_COMM_ID);
			cJSON_AddNullToObject(o, FRK_SEQ);
		}
		cJSON_AddItemToArray(arr, o);
	}

	net_json(root, p);
	/* "stacks" go here, before the entries (a reader of the newest entries finds them in
	 * the head): dump_text puts them in */

	arr = cJSON_AddArrayToObject(root, FRK_ENTRIES);
	first = p->next_record_id > fr->opts.ring_size ? p->next_record_id - fr->opts.ring_size : 1;
	for (uint64_t id = first; id < p->next_record_id; id++) {
		struct fr_entry *e = &p->ring[id % fr->opts.ring_size];

		if (e->record_id == id)
			cJSON_AddItemToArray(arr, entry_json(fr, p, e));
	}
	return root;
}

int flightrec__dump_path(char *buf, size_t size, const char *dir, const char *host, int pid)
{
	int n = snprintf(buf, size, "%s/tptrace-fr.%s.%d.json", dir, host, pid);

	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* The dump directory of a root daemon must not be steerable by other users: one who can
 * write it (or who owns it) can swap dumps to mislead triage or plant symlinks. So it must
 * be ours and writable by nobody else, its last component is never a symlink, and every file
 * in it is reached through the directory's fd (openat/renameat never follow a symlink at the
 * name they create or replace). A missing one is created 0700. */
int flightrec__open_dump_dir(const char *dir)
{
	char buf[PATH_MAX];
	struct stat st;
	int fd;

	if (snprintf(buf, sizeof(buf), "%s", dir) >= (int)sizeof(buf))
		return -ENAMETOOLONG;
	for (char *p = buf + 1; *p; p++) {	/* parents as needed, the same 0700 */
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0700) && errno != EEXIST) {
			fd = -errno;
			log_error("cannot create dump directory %s: %s\n", buf, strerror(-fd));
			return fd;
		}
		*p = '/';
	}
	if (mkdir(dir, 0700) && errno != EEXIST) {
		fd = -errno;
		log_error("cannot create dump directory %s: %s\n", dir, strerror(-fd));
		return fd;
	}
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		int err = -errno;

		if (err == -ELOOP || (err == -ENOTDIR && !lstat(dir, &st) && S_ISLNK(st.st_mode)))
			log_error("refusing dump directory %s: it is a symbolic link\n", dir);
		else
			log_error("cannot open dump directory %s: %s\n", dir, strerror(-err));
		return err;
	}
	if (fstat(fd, &st)) {
		int err = -errno;

		close(fd);
		log_error("cannot stat dump directory %s: %s\n", dir, strerror(-err));
		return err;
	}
	if (st.st_uid != geteuid()) {
		log_error("refusing dump directory %s: owned by uid %u, not by uid %u that tptrace runs as\n",
			  dir, (unsigned)st.st_uid, (unsigned)geteuid());
		close(fd);
		return -EPERM;
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		log_error("refusing dump directory %s: writable by %s (mode %04o); use one only its owner can write\n",
			  dir, st.st_mode & S_IWOTH ? "others" : "its group", (unsigned)(st.st_mode & 07777));
		close(fd);
		return -EPERM;
	}
	return fd;
}

/* gzip (not raw zlib) so that zcat and tptrace-fr read it alike */
static int gzip_buf(const char *text, size_t len, unsigned char **out, size_t *out_len)
{
	z_stream z = {};
	size_t cap;
	int ret;

	if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return -ENOMEM;
	cap = deflateBound(&z, len) + 32;
	*out = malloc(cap);
	if (!*out) {
		deflateEnd(&z);
		return -ENOMEM;
	}
	z.next_in = (unsigned char *)text;
	z.avail_in = len;
	z.next_out = *out;
	z.avail_out = cap;
	ret = deflate(&z, Z_FINISH);
	*out_len = z.total_out;
	deflateEnd(&z);
	if (ret != Z_STREAM_END) {
		free(*out);
		*out = NULL;
		return -EIO;
	}
	return 0;
}

/* counted per reason for the metrics; reasons beyond the table's size are not counted */
static void count_dump(struct flightrec *fr, const char *reason)
{
	int i;

	for (i = 0; i < fr->nr_dump_reasons; i++)
		if (!strcmp(fr->dump_counts[i].reason, reason))
			break;
	if (i == fr->nr_dump_reasons) {
		if (i == (int)(sizeof(fr->dump_counts) / sizeof(fr->dump_counts[0])))
			return;
		snprintf(fr->dump_counts[i].reason, sizeof(fr->dump_counts[i].reason), "%s", reason);
		fr->nr_dump_reasons++;
	}
	fr->dump_counts[i].n++;
}

/* One of this host's dumps: tptrace-fr.<host>.<...>.json or .json.gz (temp files start with
 * a dot; other hosts' dumps in a shared directory are theirs to keep). */
static bool our_dump_name(const struct flightrec *fr, const char *name)
{
	size_t len = strlen(name), hl = strlen(fr->host);

	if (strncmp(name, "tptrace-fr.", 11) || strncmp(name + 11, fr->host, hl) || name[11 + hl] != '.')
		return false;
	return (len > 5 && !strcmp(name + len - 5, ".json")) ||
	       (len > 8 && !strcmp(name + len - 8, ".json.gz"));
}

struct dump_file {
	char name[NAME_MAX + 1];
	off_t size;
	struct timespec mtime;
	bool trigger;			/* a trigger record this host wrote */
	bool removed;
};

static int cmp_mtime(const void *x, const void *y)
{
	const struct dump_file *a = x, *b = y;

	if (a->mtime.tv_sec != b->mtime.tv_sec)
		return a->mtime.tv_sec < b->mtime.tv_sec ? -1 : 1;
	if (a->mtime.tv_nsec != b->mtime.tv_nsec)
		return a->mtime.tv_nsec < b->mtime.tv_nsec ? -1 : 1;
	return strcmp(a->name, b->name);
}

/* A trigger record this host wrote (origin_host is ours; the directory is root's alone, see
 * flightrec__open_dump_dir), so a restarted recorder cleans up its predecessor's too. */
static bool our_trigger(const struct flightrec *fr, int dirfd, const char *name)
{
	struct fr_trigger_rec t;
	char err[128];

	if (strncmp(name, "tptrace-trigger.", 16))
		return false;
	return !fr_trigger__read(dirfd, name, &t, err, sizeof(err)) &&
	       !strcmp(t.origin_host, fr->host);
}

/* Still being answered: the other recorders of the job see a trigger within ~2 s (inotify or
 * their 1 s scan); a minute covers a slow shared file system. */
#define TRIGGER_ANSWER_S 60

static bool trigger_protected(const struct dump_file *files, int n, int i, time_t now)
{
	if (now - files[i].mtime.tv_sec < TRIGGER_ANSWER_S)
		return true;
	for (int j = i + 1; j < n; j++)
		if (files[j].trigger)
			return false;
	return true;		/* the newest trigger of ours is kept */
}

static bool retention_remove(struct flightrec *fr, int dirfd, struct dump_file *f)
{
	if (unlinkat(dirfd, f->name, 0)) {
		log_error("retention: cannot remove %s: %s\n", f->name, strerror(errno));
		return false;
	}
	f->removed = true;
	return true;
}

/* --max-dump-mb: removes this host's oldest dumps until they total at most the limit. The
 * newest `keep` (the round just written, at least one) are never removed: a round is one
 * moment of the job, and cutting it would lose the evidence the limit exists to keep.
 * The trigger records this host wrote count too and go oldest first, and so does every one
 * older than the oldest dump left (the moment it named is gone); never the newest, nor one
 * other recorders may still be answering. */
static void enforce_retention(struct flightrec *fr, int dirfd, int keep)
{
	struct dump_file *files = NULL;
	uint64_t total = 0, freed = 0;
	int n = 0, cap = 0, removed = 0, triggers_removed = 0, dfd, ndumps = 0, dumps_seen = 0;
	time_t now = time(NULL);
	struct dirent *de;
	DIR *d;

	if (!fr->opts.max_dump_bytes)
		return;
	dfd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		log_error("retention: cannot list the dump directory: %s\n", strerror(errno));
		if (dfd >= 0)
			close(dfd);
		return;
	}
	while ((de = readdir(d))) {
		bool trigger = false;
		struct stat st;

		if (!our_dump_name(fr, de->d_name) && !(trigger = our_trigger(fr, dirfd, de->d_name)))
			continue;
		if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
			continue;
		if (ARRAY_RESERVE(files, cap, n + 1, 64))
			goto out;
		snprintf(files[n].name, sizeof(files[n].name), "%s", de->d_name);
		files[n].size = st.st_size;
		files[n].mtime = st.st_mtim;
		files[n].trigger = trigger;
		files[n].removed = false;
		total += st.st_size;
		ndumps += !trigger;
		n++;
	}
	qsort(files, n, sizeof(*files), cmp_mtime);
	if (keep < 1)
		keep = 1;
	for (int i = 0; i < n && total > fr->opts.max_dump_bytes; i++) {
		if (files[i].trigger ? trigger_protected(files, n, i, now) : dumps_seen++ >= ndumps - keep)
			continue;
		if (!retention_remove(fr, dirfd, &files[i]))
			continue;
		total -= files[i].size;
		freed += files[i].size;
		if (files[i].trigger)
			triggers_removed++;
		else
			removed++;
	}
	/* triggers older than every dump left: their moment is gone */
	for (int i = 0; i < n && (files[i].trigger || files[i].removed); i++) {
		if (files[i].removed || trigger_protected(files, n, i, now))
			continue;
		if (retention_remove(fr, dirfd, &files[i])) {
			total -= files[i].size;
			triggers_removed++;
		}
	}
	if (removed) {
		fr->dumps_removed += removed;
		log_info("retention: removed %d oldest dump%s (%.1f MiB; %" PRIu64 " in all) to stay under %.1f MiB\n",
			 removed, removed == 1 ? "" : "s", freed / 1048576.0, fr->dumps_removed,
			 fr->opts.max_dump_bytes / 1048576.0);
	}
	if (triggers_removed)
		log_info("retention: removed %d old trigger record%s this host wrote\n",
			 triggers_removed, triggers_removed == 1 ? "" : "s");
	if (total > fr->opts.max_dump_bytes)
		log_error("retention: the newest dumps alone take %.1f MiB, over --max-dump-mb %.1f; kept\n",
			  total / 1048576.0, fr->opts.max_dump_bytes / 1048576.0);
out:
	free(files);
	closedir(d);
}

/* A dump's text in two parts around its stacks, which come last (after the round's state
 * files, see dump_set): head, every key before "stacks" without the closing brace, and tail,
 * the rest from "entries" on without the opening one. head + "," + the stacks' keys + ","
 * + tail is the text cJSON prints for the whole object. */
struct dump_text {
	char *head, *tail;
	char path[PATH_MAX];
	const char *name;		/* in path: the file in the dump directory */
	const char *reason;
	bool pending;			/* a state-first file is written, the stacks to follow */
	uint64_t state_written;		/* CLOCK_MONOTONIC: its state-first file was in place */
};

static void dump_text_free(struct dump_text *dt)
{
	free(dt->head);
	free(dt->tail);
	dt->head = dt->tail = NULL;
}

static int dump_text_make(struct flightrec *fr, struct fr_round *r, struct fr_proc *p,
			  const struct fr_trigger_rec *trig, struct dump_text *dt)
{
	cJSON *root = dump_json(fr, p, dt->reason, trig, r), *rest, *entries;

	r->index++;
	if (!root)
		return -ENOMEM;
	entries = cJSON_DetachItemFromObjectCaseSensitive(root, FRK_ENTRIES);
	rest = cJSON_CreateObject();
	if (entries && rest)
		cJSON_AddItemToObject(rest, FRK_ENTRIES, entries);
	else
		cJSON_Delete(entries);
	dt->head = cJSON_PrintUnformatted(root);
	dt->tail = entries && rest ? cJSON_PrintUnformatted(rest) : NULL;
	cJSON_Delete(root);
	cJSON_Delete(rest);
	if (!dt->head || !dt->tail) {
		dump_text_free(dt);
		return -ENOMEM;
	}
	dt->head[strlen(dt->head) - 1] = 0;	/* its '}' */
	return 0;
}

/* The file of dt with these stacks keys (an object: its keys go in, in order), gzipped with
 * --gzip-dumps, written atomically over whatever the dump directory holds under its name: an
 * O_EXCL temp file in the directory (fsync'ed first when sync), renamed over name, so a reader
 * (or a crash of tptrace) sees the previous dump or the new one, never half of one; a symlink
 * planted at either name is replaced, never followed. */
static int dump_text_write(struct flightrec *fr, int dirfd, const struct dump_text *dt,
			   cJSON *stacks, bool sync)
{
	char *keys = cJSON_PrintUnformatted(stacks), *text = NULL;
	unsigned char *gz = NULL;
	size_t gz_len = 0, klen;
	int err = 0;

	if (!keys)
		return -ENOMEM;
	klen = strlen(keys);
	keys[klen - 1] = 0;
	if (asprintf(&text, "%s,%s,%s", dt->head, keys + 1, dt->tail + 1) < 0)
		text = NULL;
	free(keys);
	if (!text)
		return -ENOMEM;
	if (fr->opts.gzip_dumps)
		err = gzip_buf(text, strlen(text), &gz, &gz_len);
	if (!err)
		err = gz ? atomic_file__write(dirfd, dt->name, gz, gz_len, 0600, sync) :
			   atomic_file__write(dirfd, dt->name, text, strlen(text), 0600, sync);
	free(text);
	free(gz);
	return err;
}

/* The dump of p said and counted: once, when complete (or when its state file is all it
 * will have). */
static void dump_done(struct flightrec *fr, struct fr_proc *p, const struct dump_text *dt,
		      const struct fr_trigger_rec *trig)
{
	if (trig)
		log_info("dumped pid %d (%s %s from %s, %s) to %s\n", p->pid, dt->reason, trig->id,
			 trig->origin_host, trig->reason, dt->path);
	else
		log_info("dumped pid %d (%s) to %s\n", p->pid, dt->reason, dt->path);
	count_dump(fr, dt->reason);
}

/* The first file of p's dump: the state, without the stacks when a snapshot is to be taken
 * (dt->pending, "stacks_pending": true; dump_complete replaces it), else the whole dump. */
static int dump_state(struct flightrec *fr, struct fr_round *r, struct fr_proc *p,
		      const struct fr_trigger_rec *trig, struct dump_text *dt)
{
	char other[NAME_MAX + 1];
	cJSON *stacks;
	int err;

	err = flightrec__dump_path(dt->path, sizeof(dt->path), fr->opts.dump_dir, fr->host, p->pid);
	if (!err && fr->opts.gzip_dumps && strlen(dt->path) + 3 < sizeof(dt->path))
		strcat(dt->path, ".gz");
	if (err)
		return err;
	dt->name = strrchr(dt->path, '/') ? strrchr(dt->path, '/') + 1 : dt->path;
	if (r->dirfd < 0)
		return r->dirfd;	/* the directory was refused: said once per round */
	err = dump_text_make(fr, r, p, trig, dt);
	if (err)
		return err;
	dt->pending = fr_stacks__will_take(fr, p);
	stacks = cJSON_CreateObject();
	if (!stacks) {
		err = -ENOMEM;
	} else {
		if (dt->pending)
			fr_stacks__add_pending(stacks);
		else
			fr_stacks__add(fr, p, stacks);
		/* in place (seen by every reader of the directory) first: synced once the round's
		 * other state files are in place too (sync_states) */
		err = dump_text_write(fr, r->dirfd, dt, stacks, false);
	}
	cJSON_Delete(stacks);
	if (err) {
		log_error("writing flight-recorder dump %s: %s\n", dt->path, strerror(-err));
		dump_text_free(dt);
		return err;
	}
	dt->state_written = now_ns();
	/* one dump per process: the other format's file from an earlier run is stale */
	snprintf(other, sizeof(other), "%.*s%s", (int)(strlen(dt->name) - (fr->opts.gzip_dumps ? 3 : 0)),
		 dt->name, fr->opts.gzip_dumps ? "" : ".gz");
	unlinkat(r->dirfd, other, 0);
	if (dt->pending) {
		log_verbose("pid %d: state written to %s, its stacks to follow\n", p->pid, dt->path);
	} else {
		dump_done(fr, p, dt, trig);
		dump_text_free(dt);
	}
	return 0;
}

/* The complete dump of p, its snapshot taken: replaces the state-first file. The same text
 * with its stacks, and when that file was in place ("state_written_ns"). Fails (said by the
 * caller) leaving the state file as the dump. */
static int dump_complete(struct flightrec *fr, struct fr_round *r, struct fr_proc *p,
			 struct dump_text *dt)
{
	cJSON *stacks = cJSON_CreateObject();
	int err = -ENOMEM;

	if (stacks) {
		fr_stacks__add(fr, p, stacks);
		add_ns(stacks, FRK_STATE_WRITTEN_NS, fr, dt->state_written);
		err = dump_text_write(fr, r->dirfd, dt, stacks, true);
	}
	cJSON_Delete(stacks);
	dump_text_free(dt);
	return err;
}

/* A round of dumps: the directory is opened (and checked) afresh, so one removed or swapped
 * while recording is found again or refused, never written through a stale handle. */
static int open_round_dir(struct flightrec *fr)
{
	struct stat st;
	int fd;

	/* shared storage unmounted or the directory removed under us: said, and made again
	 * (0700, ours) so this round's evidence is still written */
	if (fr->dump_dir_opened && lstat(fr->opts.dump_dir, &st) && errno == ENOENT)
		log_error("dump directory %s is gone: creating it again (recording goes on)\n",
			  fr->opts.dump_dir);
	fd = flightrec__open_dump_dir(fr->opts.dump_dir);
	if (fd >= 0)
		fr->dump_dir_opened = true;
	return fd;
}

/* The capture of a round: every record the BPF side wrote so far is consumed (opts.drain),
 * and from then until round_end nothing consumes the ring, so the state of every process of
 * the round stays the state at r->captured while the slow parts (stack snapshots, JSON,
 * gzip, writing) run. A process's state holds every record written before drain_start and
 * none written after captured: captured - drain_start bounds how far apart two processes'
 * states of the round can be (the set's capture spread). Called before the round's
 * process list is made: the drain may start recording new processes (-a). */
static void round_capture(struct flightrec *fr, struct fr_round *r)
{
	uint64_t rnd[2];

	memset(r, 0, sizeof(*r));
	r->dirfd = -1;
	r->drain_start = now_ns();
	if (fr->opts.drain)
		r->drained = fr->opts.drain(fr->opts.drain_ctx) >= 0;
	r->captured = now_ns();
	/* unique across this host's rounds and hosts: the analyzer groups dumps by it */
	if (getrandom(rnd, sizeof(rnd), GRND_NONBLOCK) != sizeof(rnd)) {
		rnd[0] = r->captured ^ ((uint64_t)getpid() << 32);
		rnd[1] = (uint64_t)(uintptr_t)fr;
	}
	snprintf(r->id, sizeof(r->id), "%016" PRIx64, (uint64_t)(rnd[0] ^ (rnd[1] * 0x9e3779b97f4a7c15ULL)));
}

static void round_begin(struct flightrec *fr, struct fr_round *r, int count)
{
	r->count = count;
	r->dirfd = open_round_dir(fr);
}

static void round_end(struct flightrec *fr, struct fr_round *r, int written)
{
	if (r->dirfd < 0)
		return;
	if (written > 0)
		enforce_retention(fr, r->dirfd, written);
	close(r->dirfd);
	r->dirfd = -1;
}

/* The round's state files (written without fsync, so every host's state is seen as soon as
 * it can be) reach the disk: each is opened by its name and synced, then the directory (their
 * renames). A file a later round replaced meanwhile is synced all the same (the newer one). */
static void sync_states(int dirfd, const struct dump_text *dts, int n)
{
	bool any = false;

	for (int i = 0; dirfd >= 0 && i < n; i++) {
		int fd;

		if (!dts[i].state_written)
			continue;	/* not written */
		fd = openat(dirfd, dts[i].name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (fsync(fd))
			log_verbose("fsync of %s: %s\n", dts[i].path, strerror(errno));
		close(fd);
		any = true;
	}
	if (any)
		fsync(dirfd);
}

/* Dumps procs[0..n) as one set captured at r: every process's state file first (cheap:
 * JSON and a write), then their stack snapshots in parallel, then each state file is
 * replaced by the complete dump. A process without a snapshot to take (exited, --no-stacks)
 * is written once. reason NULL: "exit" or "exec" per process. Returns dumps written (a state
 * file counts: it is a dump) or the first negative errno. */
static int dump_set(struct flightrec *fr, struct fr_round *r, struct fr_proc **procs, int n,
		    const char *reason, const struct fr_trigger_rec *t)
{
	int written = 0, first_err = 0, nr_pending = 0, failed = 0, fail_err = 0;
	struct dump_text *dts = calloc(n ? n : 1, sizeof(*dts));
	struct fr_proc **pending = calloc(n ? n : 1, sizeof(*pending));
	const char *fail_path = NULL;
	uint64_t t_net, t_state, t_sync, t_snap;

	if (!dts || !pending) {
		free(dts);
		free(pending);
		log_error("dump: out of memory\n");
		return -ENOMEM;
	}
	/* until the state files are written the state stays the capture's: the ring is emptied
	 * into a hold meanwhile (opts.hold), handed on before the snapshots, whose files take
	 * the text already made */
	if (fr->opts.hold)
		fr->opts.hold(fr->opts.drain_ctx, true);
	t_net = now_ns();
	net_capture(fr, procs, n);
	t_state = now_ns();
	round_begin(fr, r, n);
	for (int i = 0; i < n; i++) {
		struct fr_proc *p = procs[i];
		int err;

		if (fr->opts.pump)
			fr->opts.pump(fr->opts.drain_ctx, 0);
		dts[i].reason = reason ? reason : p->execd ? "exec" : "exit";
		err = dump_state(fr, r, p, t, &dts[i]);
		if (err && !first_err)
			first_err = err;
		else if (!err)
			written++;
		if (!err && dts[i].pending)
			pending[nr_pending++] = p;
		cJSON_Delete(p->net);	/* not taken over by a dump that failed */
		p->net = NULL;
	}
	t_sync = now_ns();
	if (fr->opts.hold)
		fr->opts.hold(fr->opts.drain_ctx, false);
	sync_states(r->dirfd, dts, n);
	t_snap = now_ns();
	/* every process's dump snapshot at once, not one after the other */
	fr_stacks__take_dumps(fr, pending, nr_pending);
	for (int i = 0; i < n; i++) {
		int err;

		if (!dts[i].pending || !dts[i].head)
			continue;
		if (fr->opts.pump)
			fr->opts.pump(fr->opts.drain_ctx, 0);
		err = dump_complete(fr, r, procs[i], &dts[i]);
		if (err && !failed++) {
			fail_err = err;
			fail_path = dts[i].path;
		}
		/* a dump either way: the state file stays when its replacement failed */
		dump_done(fr, procs[i], &dts[i], t);
	}
	if (failed)
		log_error("writing flight-recorder dump %s with its stacks: %s%s; %s state file%s stay%s, stacks pending\n",
			  fail_path, strerror(-fail_err),
			  failed > 1 ? " (and the other dumps of the round)" : "",
			  failed > 1 ? "their" : "its", failed > 1 ? "s" : "", failed > 1 ? "" : "s");
	round_end(fr, r, written);
	log_verbose("round of %d dump%s: capture to start %.0f ms, sockets %.0f ms, state files "
		    "%.0f ms, records held handed on and state files synced %.0f ms, snapshots and "
		    "files %.0f ms\n", n, n == 1 ? "" : "s", (t_net - r->captured) / 1e6,
		    (t_state - t_net) / 1e6, (t_sync - t_state) / 1e6, (t_snap - t_sync) / 1e6,
		    (now_ns() - t_snap) / 1e6);
	free(dts);
	free(pending);
	return first_err ? first_err : written;
}

/* The processes a round dumps: match(p, ctx) true and not already final (an exit dump is a
 * process's last). NULL (said) when out of memory. */
static struct fr_proc **select_procs(struct flightrec *fr, bool (*match)(const struct fr_proc *,
				     const void *), const void *ctx, int *n)
{
	struct fr_proc **procs = calloc(fr->nr_procs ? fr->nr_procs : 1, sizeof(*procs));

	*n = 0;
	if (!procs) {
		log_error("dump: out of memory\n");
		return NULL;
	}
	for (int i = 0; i < fr->nr_procs; i++) {
		struct fr_proc *p = fr->procs[i];

		if (!(p->exited && p->exit_dumped) && match(p, ctx))
			procs[(*n)++] = p;
	}
	return procs;
}

static bool match_any(const struct fr_proc *p, const void *ctx)
{
	return true;
}

int flightrec__dump_all(struct flightrec *fr, const char *reason)
{
	struct fr_round r;
	struct fr_proc **procs;
	int n, ret;

	round_capture(fr, &r);
	procs = select_procs(fr, match_any, NULL, &n);
	if (!procs)
		return -ENOMEM;
	ret = dump_set(fr, &r, procs, n, reason, NULL);
	free(procs);
	return ret;
}

/* job NULL: the processes whose job is unknown */
static bool same_job(const struct fr_proc *p, const void *job)
{
	return job ? fr_proc_in_job(p, job) : !p->job[0];
}

int flightrec__dump_job(struct flightrec *fr, const char *job, const struct fr_trigger_rec *t)
{
	struct fr_round r;
	struct fr_proc **procs;
	int n, ret;

	round_capture(fr, &r);
	procs = select_procs(fr, same_job, job, &n);
	if (!procs)
		return -ENOMEM;
	for (int i = 0; t && i < n; i++)
		procs[i]->stall_dumped = true;	/* this stall is dumped: no second trigger for it */
	ret = dump_set(fr, &r, procs, n, t ? "trigger" : "signal", t);
	free(procs);
	return ret;
}

static bool has_pending(struct flightrec *fr, struct fr_proc *p)
{
	uint64_t first = p->next_record_id > fr->opts.ring_size ? p->next_record_id - fr->opts.ring_size : 1;

	for (uint64_t id = first; id < p->next_record_id; id++) {
		struct fr_entry *e = &p->ring[id % fr->opts.ring_size];

		if (e->record_id == id && e->state != FR_COMPLETED)
			return true;
	}
	return false;
}

/* Whether q belongs to the job of the stalled process p: the same job id, or a communicator
 * of the same cross-rank identity (a rank whose environment names no job, or another
 * spelling of it). When neither p's job nor any of its comms' identities is known (comms
 * made before attach), every process of no known job: nothing tells them apart, and
 * leaving the culprit out is worse than one dump too many. */
static bool job_peer(const struct fr_proc *q, const void *ctx)
{
	const struct fr_proc *p = ctx;
	bool p_ids = false;

	if (q == p || (p->job[0] && !strcmp(p->job, q->job)))
		return true;
	for (int i = 0; i < p->nr_comms; i++) {
		if (!p->comms[i].id)
			continue;
		p_ids = true;
		for (int k = 0; k < q->nr_comms; k++)
			if (q->comms[k].id == p->comms[i].id)
				return true;
	}
	return !p->job[0] && !p_ids && !q->job[0];
}

/* The job a stall of p triggers dumps for: its environment's, else the identity of the
 * communicator of its oldest pending collective (FR_COMM_JOB), so the recorders of the other
 * hosts, whose processes have a communicator of that identity, answer even without a job id.
 * False: neither is known (the stall dumps this host only). */
static bool stall_job(struct flightrec *fr, const struct fr_proc *p, char *job, size_t size)
{
	uint64_t first = p->next_record_id > fr->opts.ring_size ? p->next_record_id - fr->opts.ring_size : 1;

	if (p->job[0]) {
		snprintf(job, size, "%s", p->job);
		return true;
	}
	for (uint64_t id = first; id < p->next_record_id; id++) {
		const struct fr_entry *e = &p->ring[id % fr->opts.ring_size];

		if (e->record_id != id || e->state == FR_COMPLETED || e->kind != FR_ENTRY_COLL)
			continue;
		if (!p->comms[e->comm].id)
			return false;
		snprintf(job, size, FR_COMM_JOB "%016" PRIx64, p->comms[e->comm].id);
		return true;
	}
	return false;
}

/* A stalled process: every process of its job recorded here is dumped in one set, the
 * culprit too (it often has nothing pending: it stopped calling NCCL). A known job goes
 * through a trigger (opts.stall_trigger) so every other recorder of the job dumps as well. */
int flightrec__check_stalls(struct flightrec *fr, uint64_t now)
{
	int n = 0;

	if (!fr->opts.stall_timeout_ns)
		return 0;
	for (int i = 0; i < fr->nr_procs; i++) {
		struct fr_proc *p = fr->procs[i], **procs;
		char job[FR_JOB_MAX + 1];
		struct fr_round r;
		int nr, ret;

		/* progress newer than now: records a round held, handed on since now was read */
		if (p->exited || p->stall_dumped || p->last_progress >= now ||
		    now - p->last_progress < fr->opts.stall_timeout_ns)
			continue;
		if (!has_pending(fr, p))
			continue;
		p->stall_dumped = true;	/* once per stall; progress re-arms it */
		/* a known job: every recorder of it dumps, through a trigger */
		if (fr->opts.stall_trigger && stall_job(fr, p, job, sizeof(job)) &&
		    fr->opts.stall_trigger(fr->opts.stall_trigger_ctx, job)) {
			n++;
			continue;
		}
		round_capture(fr, &r);
		procs = select_procs(fr, job_peer, p, &nr);
		if (!procs)
			continue;
		for (int k = 0; k < nr; k++)
			procs[k]->stall_dumped = true;	/* dumped with this stall */
		ret = dump_set(fr, &r, procs, nr, "stall", NULL);
		free(procs);
		if (ret > 0)
			n += ret;
	}
	return n;
}

static bool match_exited(const struct fr_proc *p, const void *ctx)
{
	return p->exited;
}

int flightrec__take_exits(struct flightrec *fr)
{
	struct fr_proc **procs;
	struct fr_round r;
	int n, ret;

	if (!fr->pending_exits)
		return 0;
	round_capture(fr, &r);
	fr->pending_exits = 0;
	procs = select_procs(fr, match_exited, NULL, &n);
	if (!procs)
		return 0;
	ret = n ? dump_set(fr, &r, procs, n, NULL, NULL) : 0;
	for (int i = 0; i < n; i++)
		procs[i]->exit_dumped = true;
	free(procs);
	return ret > 0 ? ret : 0;
}
