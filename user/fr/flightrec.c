// SPDX-License-Identifier: MIT
/* The flight recorder's sink of the calls core: NCCL calls become ring entries, comm inits,
 * splits and teardowns update the comm table, and the application's own stream and event
 * waits move entries to started/completed. The dump writer is flightrec_dump.c. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "cuda.h"
#include "cuda_api.h"
#include "flightrec_int.h"
#include "ustack.h"
#include "log.h"
#include "procmaps.h"
#include "session.h"
#include "target.h"
#include "util.h"


static void fr_entry_cb(void *ctx, struct call_frame *f, void *user);
static void fr_call_cb(void *ctx, const struct call *c, void *user);
static void fr_exit_cb(void *ctx, const struct tp_rec_exit *x);
static void fr_library_cb(void *ctx, struct target *t, int new_probes);

struct flightrec *flightrec__new(struct session *s, const struct flightrec_opts *opts)
{
	static const struct session_sink_ops ops = {
		.user_bytes = sizeof(struct fr_call),
		.on_entry = fr_entry_cb, .on_call = fr_call_cb, .on_exit = fr_exit_cb,
		.on_library = fr_library_cb,
	};
	struct flightrec *fr = calloc(1, sizeof(*fr));
	uint64_t real;
	int err;

	if (!fr)
		return NULL;
	err = session__add_sink(s, &ops, fr, &fr->user_off);
	if (err) {
		free(fr);
		errno = -err;
		return NULL;
	}
	fr->session = s;
	fr->calls = session__calls(s);
	fr->opts = *opts;
	if (!fr->opts.ring_size)
		fr->opts.ring_size = 2000;
	if (fr->opts.host_id)
		snprintf(fr->host, sizeof(fr->host), "%s", fr->opts.host_id);
	else if (gethostname(fr->host, sizeof(fr->host) - 1))
		strcpy(fr->host, "unknown");
	real = clock_ns(CLOCK_REALTIME);
	fr->realtime_offset = (int64_t)real - (int64_t)now_ns();
	return fr;
}

static void pystack_free(struct fr_pystack *s)
{
	for (int i = 0; s && i < s->nr; i++) {
		free(s->frames[i].name);
		free(s->frames[i].file);
	}
	if (s)
		free(s->frames);
	free(s);
}

static void proc_free(struct fr_proc *p)
{
	uint64_t id, val;

	if (!p)
		return;
	for (size_t it = 0; u64map__next(&p->pystacks, &it, &id, &val);)
		pystack_free((struct fr_pystack *)(uintptr_t)val);
	u64map__clear(&p->pystacks);
	fr_stacks__free(p);
	u64map__free_values(&p->threads);
	u64map__clear(&p->events);
	for (int i = 0; i < p->nr_comms; i++)
		free(p->comms[i].recent);
	free(p->ring);
	free(p->comms);
	free(p->streams);
	free(p);
}

void flightrec__free(struct flightrec *fr)
{
	if (!fr)
		return;
	for (int i = 0; i < fr->nr_procs; i++)
		proc_free(fr->procs[i]);
	free(fr->procs);
	free(fr);
}

/* "NCCL version 2.28.9+cuda13.0" is compiled into the library's read-only data. */
static void find_nccl_version(struct fr_proc *p)
{
	struct target *t = p->t;

	for (int i = 0; i < target__nr_objs(t); i++) {
		const struct target_obj *o = target__obj(t, i);
		struct stat st;
		const char *hit;
		void *map;
		int fd;

		if (!o->nccl)
			continue;
		snprintf(p->nccl_library, sizeof(p->nccl_library), "%s", o->path);
		fd = open(o->open_path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return;
		if (fstat(fd, &st) || !st.st_size) {
			close(fd);
			return;
		}
		map = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		close(fd);
		if (map == MAP_FAILED)
			return;
		hit = memmem(map, st.st_size, "NCCL version ", 13);
		if (hit) {
			size_t n = 0;

			hit += 13;
			while (n < sizeof(p->nccl_version) - 1 && hit + n < (char *)map + st.st_size &&
			       ((hit[n] >= '0' && hit[n] <= '9') || hit[n] == '.'))
				n++;
			memcpy(p->nccl_version, hit, n);
			p->nccl_version[n] = '\0';
		}
		munmap(map, st.st_size);
		return;
	}
}

int flightrec__add_process(struct flightrec *fr, struct target *t)
{
	struct fr_proc *p, **n;

	for (int i = 0; i < fr->nr_procs; i++)
		if (fr->procs[i]->pid == target__pid(t))
			return 0;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->ring = calloc(fr->opts.ring_size, sizeof(*p->ring));
	n = realloc(fr->procs, (fr->nr_procs + 1) * sizeof(*n));
	if (!p->ring || !n) {
		free(p->ring);
		free(p);
		if (n)
			fr->procs = n;
		return -ENOMEM;
	}
	fr->procs = n;
	p->t = t;
	p->pid = target__pid(t);
	p->next_record_id = 1;
	p->last_progress = now_ns();
	find_nccl_version(p);
	fr->procs[fr->nr_procs++] = p;
	/* in the background: the recording of this and the other processes goes on */
	return fr_stacks__attach(fr, p);
}

void flightrec__set_job(struct flightrec *fr, int pid, const char *job)
{
	for (int i = 0; i < fr->nr_procs; i++)
		if (fr->procs[i]->pid == pid)
			snprintf(fr->procs[i]->job, sizeof(fr->procs[i]->job), "%s", job ? job : "");
}

bool fr_proc_in_job(const struct fr_proc *p, const char *job)
{
	const char *hex = job + sizeof(FR_COMM_JOB) - 1;
	uint64_t id;
	char *end;

	if (p->job[0] && !strcmp(p->job, job))
		return true;
	if (strncmp(job, FR_COMM_JOB, sizeof(FR_COMM_JOB) - 1) || strlen(hex) != 16)
		return false;
	id = strtoull(hex, &end, 16);
	for (int i = 0; id && !*end && i < p->nr_comms; i++)
		if (p->comms[i].id == id)
			return true;
	return false;
}

bool flightrec__has_job(const struct flightrec *fr, const char *job)
{
	for (int i = 0; i < fr->nr_procs; i++)
		if (fr_proc_in_job(fr->procs[i], job))
			return true;
	return false;
}

void flightrec__set_python(struct flightrec *fr, int pid, const char *python, const char *why)
{
	for (int i = 0; i < fr->nr_procs; i++) {
		struct fr_proc *p = fr->procs[i];

		if (p->pid != pid || p->execd)
			continue;
		snprintf(p->python, sizeof(p->python), "%s", python ? python : "");
		snprintf(p->python_why, sizeof(p->python_why), "%s", why ? why : "");
	}
}

void flightrec__set_drops(struct flightrec *fr, int err, uint64_t dropped)
{
	fr->events_dropped = dropped;
	fr->events_dropped_err = err;
}

/* The process recording pid now: not one whose image an exec replaced. */
static struct fr_proc *find_proc(struct flightrec *fr, int pid)
{
	for (int i = 0; i < fr->nr_procs; i++)
		if (fr->procs[i]->pid == pid && !fr->procs[i]->execd)
			return fr->procs[i];
	return NULL;
}

bool flightrec__exec(struct flightrec *fr, int pid)
{
	struct fr_proc *p = find_proc(fr, pid);

	if (!p)
		return false;
	if (!p->exited) {
		p->exited = true;
		p->exit_code = -1;	/* no exit: the process lives on as another program */
		fr->pending_exits++;
	}
	p->execd = true;
	return true;
}

void flightrec__probes_late(struct flightrec *fr, int pid, const char *path, uint64_t mapped_ns,
			    uint64_t attached_ns)
{
	struct fr_proc *p = find_proc(fr, pid);
	struct fr_late *l;

	if (!p || p->nr_late == (int)(sizeof(p->late) / sizeof(p->late[0])))
		return;
	for (int i = 0; i < p->nr_late; i++)
		if (!strcmp(p->late[i].path, path))
			return;		/* another segment of the same file */
	l = &p->late[p->nr_late++];
	snprintf(l->path, sizeof(l->path), "%s", path);
	l->mapped = mapped_ns;
	l->attached = attached_ns;
}

static struct fr_thread *get_thread(struct fr_proc *p, int tid)
{
	bool created;
	struct fr_thread *th = u64map__get_or_alloc(&p->threads, (uint64_t)tid, sizeof(*th),
						    &created);

	if (th && created) {
		th->tid = tid;
		procmaps__thread_name(p->pid, tid, th->name, sizeof(th->name));
	}
	return th;
}

static int find_comm(struct fr_proc *p, uint64_t handle)
{
	for (int i = p->nr_comms - 1; i >= 0; i--)
		if (p->comms[i].handle == handle && strcmp(p->comms[i].state, "destroyed"))
			return i;
	return -1;
}

static int new_comm(struct fr_proc *p, uint64_t handle, const char *created_by)
{
	struct fr_comm *n = realloc(p->comms, (p->nr_comms + 1) * sizeof(*n));
	struct fr_comm *c;

	if (!n)
		return -1;
	p->comms = n;
	c = &p->comms[p->nr_comms];
	memset(c, 0, sizeof(*c));
	c->handle = handle;
	c->rank = c->nranks = c->device = -1;
	c->split_color = c->split_key = -1;
	c->created_by = created_by;
	c->learned_id = c->learned_rank = c->learned_nranks = "unknown";
	c->state = "active";
	c->async_error = NO_RC;
	return p->nr_comms++;
}

/* A communicator first seen in a call, created before tptrace attached. Its identity across
 * ranks is unknown; rank and size are learned later from ncclCommUserRank/Count calls, and
 * tptrace-fr matches such comms across ranks by their collective sequence. */
static int comm_for_call(struct fr_proc *p, uint64_t handle)
{
	int i = find_comm(p, handle);

	if (i >= 0)
		return i;
	i = new_comm(p, handle, "before attach");
	if (i >= 0)
		p->comms[i].pre_existing = true;
	return i;
}

static struct fr_stream *get_stream(struct fr_proc *p, uint64_t handle, int *index)
{
	struct fr_stream *n;

	for (int i = 0; i < p->nr_streams; i++) {
		if (p->streams[i].handle == handle) {
			if (index)
				*index = i;
			return &p->streams[i];
		}
	}
	n = realloc(p->streams, (p->nr_streams + 1) * sizeof(*n));
	if (!n)
		return NULL;
	p->streams = n;
	memset(&n[p->nr_streams], 0, sizeof(*n));
	n[p->nr_streams].handle = handle;
	if (index)
		*index = p->nr_streams;
	return &p->streams[p->nr_streams++];
}

/* The Python frames of stack id in p, resolved now and kept per (process, id): the id may
 * leave the BPF map later, and entries of one call site share one copy. NULL: out of memory
 * (the entry then has no "frames"). */
struct fr_pystack *fr_pystack_get(struct flightrec *fr, struct fr_proc *p, uint64_t id)
{
	const struct ustack *u;
	struct fr_pystack *s;
	uint64_t val;

	/* a status id stores nothing: one shared record per status (and u64map keys are never
	 * 0, TP_USTACK_NONE) */
	if (id < TP_USTACK_FIRST_ID) {
		static struct fr_pystack statuses[TP_USTACK_FIRST_ID];

		statuses[id].missing = ustacks__status_why(id);
		return &statuses[id];
	}
	if (u64map__get(&p->pystacks, id, &val))
		return (struct fr_pystack *)(uintptr_t)val;
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	u = fr->opts.ustack_lookup(fr->opts.ustack_ctx, p->pid, id);
	if (!u)
		s->missing = "stack id not in the BPF stack map";
	else if (!u->nr_py)
		s->missing = u->flags & TP_USTACK_PY_NOSTATE ?
			     "no Python thread state on the calling thread" :
			     u->flags & TP_USTACK_PY_FAULT ? "the first Python frame could not be read" :
			     "no Python frames";
	if (u && u->nr_py) {
		s->frames = calloc(u->nr_py, sizeof(*s->frames));
		if (!s->frames) {
			free(s);
			return NULL;
		}
		for (int i = 0; i < u->nr_py; i++) {
			const struct ustack_frame *f = &u->py[i];

			/* unresolved (the code object was gone): no name, never a guess */
			s->frames[i].name = f->func && !f->unresolved ? strdup(f->func) : NULL;
			s->frames[i].file = f->file && !f->unresolved ? strdup(f->file) : NULL;
			s->frames[i].line = f->unresolved ? 0 : f->line;
			s->nr++;
		}
	}
	if (u64map__set(&p->pystacks, id, (uint64_t)(uintptr_t)s)) {
		pystack_free(s);
		return NULL;
	}
	return s;
}

struct fr_entry *fr_entry_by_id(struct flightrec *fr, struct fr_proc *p, uint64_t id)
{
	struct fr_entry *e;

	if (!id || id >= p->next_record_id || p->next_record_id - id > fr->opts.ring_size)
		return NULL;
	e = &p->ring[id % fr->opts.ring_size];
	return e->record_id == id ? e : NULL;
}

/* A collective completed: how long this rank waited in it (entry to completion). A rank
 * the others wait for enters last and waits least: the straggler metrics compare these. */
static void record_wait(struct fr_comm *c, const struct fr_entry *e, uint64_t ts)
{
	struct fr_wait *w;

	if (e->kind != FR_ENTRY_COLL || nccl_op_is_p2p(e->c.op) || !e->created || ts < e->created)
		return;
	c->waits++;
	c->waits_sum_ns += ts - e->created;
	if (!c->recent && !(c->recent = calloc(FR_WAITS_RECENT, sizeof(*c->recent))))
		return;		/* no memory: the cumulative counts stay right */
	w = &c->recent[c->recent_next++ % FR_WAITS_RECENT];
	w->seq = e->coll_seq;
	w->entered = e->created;
	w->completed = ts;
}

/* Everything on `stream` up to position `pos` has finished on the GPU; the entry right after
 * it is now at the head of the stream: started. */
static void complete_upto(struct flightrec *fr, struct fr_proc *p, int stream_idx, uint64_t pos,
			  uint64_t ts)
{
	struct fr_stream *s = &p->streams[stream_idx];
	uint64_t first = p->next_record_id > fr->opts.ring_size ?
			 p->next_record_id - fr->opts.ring_size : 1;

	for (uint64_t id = first; id < p->next_record_id; id++) {
		struct fr_entry *e = &p->ring[id % fr->opts.ring_size];
		struct fr_comm *c;

		if (e->record_id != id || e->c.stream != s->handle)
			continue;
		c = &p->comms[e->comm];
		if (e->stream_pos <= pos && e->state != FR_COMPLETED) {
			e->state = FR_COMPLETED;
			e->completed = ts;
			record_wait(c, e, ts);
			if (!nccl_op_is_p2p(e->c.op)) {
				if (e->coll_seq > c->last_completed_seq)
					c->last_completed_seq = e->coll_seq;
				if (e->coll_seq > c->last_started_seq)
					c->last_started_seq = e->coll_seq;
			}
			p->last_progress = ts;
			p->stall_dumped = false;
		} else if (e->stream_pos == pos + 1 && e->state == FR_ENQUEUED) {
			e->state = FR_STARTED;
			e->started = ts;
			if (!nccl_op_is_p2p(e->c.op) && e->coll_seq > c->last_started_seq)
				c->last_started_seq = e->coll_seq;
		}
	}
	if (pos > s->completed)
		s->completed = pos;
}

static void complete_all(struct flightrec *fr, struct fr_proc *p, const uint64_t *upto, uint64_t ts)
{
	for (int i = 0; i < p->nr_streams; i++)
		complete_upto(fr, p, i, upto ? upto[i] : p->streams[i].enqueued, ts);
}

static void record_coll(struct flightrec *fr, struct fr_proc *p, struct fr_thread *th,
			const struct nccl_api *api, const struct tp_rec_call *rec, struct fr_call *call)
{
	struct fr_entry *e;
	struct fr_stream *s;
	struct fr_comm *c;
	int ci;

	struct nccl_coll coll;

	/* ncclBcast is built on ncclBroadcast: a collective called from NCCL's own code is the
	 * same operation, not a new entry */
	if (target__addr_in_nccl(p->t, rec->stack[0]))
		return;
	nccl_api_decode_coll(api, rec, &coll);
	ci = comm_for_call(p, coll.comm);
	if (ci < 0)
		return;
	c = &p->comms[ci];
	s = get_stream(p, coll.stream, NULL);
	if (!s)
		return;
	e = &p->ring[p->next_record_id % fr->opts.ring_size];
	memset(e, 0, sizeof(*e));
	e->record_id = p->next_record_id++;
	e->comm = ci;
	e->c = coll;
	if (nccl_op_is_p2p(coll.op))
		e->p2p_seq = ++c->p2p_seq;
	else
		e->coll_seq = ++c->coll_seq;
	e->group_id = th->group_depth ? th->group_id : 0;
	e->nranks = c->nranks;
	e->state = FR_ENQUEUED;
	e->stream_pos = ++s->enqueued;
	e->created = rec->ts;
	e->rc = NO_RC;
	e->tid = rec->tid;
	e->in_call = true;
	if (fr->opts.ustack_lookup) {
		e->ustack = rec->ustack;
		fr_pystack_get(fr, p, rec->ustack);
	}
	call->record_id = e->record_id;
	call->has_entry = true;
	p->last_progress = rec->ts;
	p->stall_dumped = false;
}

static void on_nccl_call(struct flightrec *fr, struct fr_proc *p, struct fr_thread *th,
			 const struct tp_rec_call *rec, struct fr_call *call)
{
	const struct nccl_api *api = &nccl_apis[rec->api - NCCL_API_BASE];
	struct nccl_init init;

	switch (api->kind) {
	case NAPI_COLL:
		record_coll(fr, p, th, api, rec, call);
		break;
	case NAPI_GROUP_START:
		if (th->group_depth++ == 0)
			th->group_id = ++p->next_group_id;
		break;
	case NAPI_GROUP_END:
		if (th->group_depth > 0)
			th->group_depth--;
		break;
	case NAPI_INIT_RANK:
	case NAPI_INIT_RANK_CONFIG:
	case NAPI_INIT_SCALABLE:
		/* every rank passes the same unique id: its hash names the comm on all of them */
		nccl_api_decode_init(api, rec, &init);
		call->arg_nranks = init.nranks;
		call->arg_rank = init.rank;
		call->id_hash = init.id_hash;
		break;
	case NAPI_INIT_ALL:
		nccl_api_decode_init(api, rec, &init);
		call->arg_nranks = init.nranks;
		break;
	case NAPI_SPLIT:
		nccl_api_decode_init(api, rec, &init);
		call->arg_comm = init.parent;
		call->arg_color = init.color;
		call->arg_key = init.key;
		break;
	case NAPI_SHRINK: {
		int ci;

		nccl_api_decode_init(api, rec, &init);
		ci = find_comm(p, init.parent);
		call->arg_comm = init.parent;
		call->arg_nexclude = init.nexclude;
		call->excluded_below = 0;
		if (ci >= 0 && p->comms[ci].rank >= 0 && !(rec->flags & TP_CALL_DEREF_FAULT)) {
			/* the excluded set is the same on every survivor: the child's identity */
			for (int i = 0; i < init.nlist; i++)
				if (init.list[i] < p->comms[ci].rank)
					call->excluded_below++;
			call->id_hash = nccl_hash(init.list, init.nlist * sizeof(int32_t), 0);
		}
		break;
	}
	case NAPI_FINALIZE:
	case NAPI_DESTROY:
	case NAPI_ABORT:
	case NAPI_REVOKE:
	case NAPI_ASYNC_ERROR:
	case NAPI_COUNT:
	case NAPI_USER_RANK:
	case NAPI_CU_DEVICE:
		call->arg_comm = rec->args[0];
		break;
	default:
		break;
	}
}

/* Stands in for the color in a shrunk child's identity seed ("SHRN"): a split's color is a
 * non-negative int, so no split child can collide with a shrink child. */
#define SHRINK_SEED_TAG 0x5348524eULL

/* The child of a split or shrink. handle 0 on success: NCCL_SPLIT_NOCOLOR, this rank is in no
 * child. failed: the call returned an error; the child is recorded as "init_failed" with the
 * identity it would have had, so the other ranks' dumps name the same comm. */
static int split_child(struct fr_proc *p, const struct fr_call *call, uint64_t handle,
		       bool shrink, bool failed)
{
	int pi = find_comm(p, call->arg_comm);
	struct fr_comm *parent, *c;
	uint64_t seed[4];
	int ci;

	if (pi < 0)
		pi = comm_for_call(p, call->arg_comm);
	if (pi < 0)
		return -1;
	parent = &p->comms[pi];
	parent->splits++;
	if (!handle && !failed)
		return -1;
	ci = new_comm(p, handle, shrink ? "ncclCommShrink" : "ncclCommSplit");
	if (ci < 0)
		return -1;
	parent = &p->comms[pi];
	c = &p->comms[ci];
	c->has_parent = true;
	c->parent_id = parent->id;
	c->device = parent->device;
	/* the same on every member: parent identity, the how-many-th split, color (or the
	 * excluded set for shrink) */
	seed[0] = parent->id;
	seed[1] = parent->splits;
	seed[2] = shrink ? SHRINK_SEED_TAG : (uint64_t)(uint32_t)call->arg_color;
	seed[3] = shrink ? call->id_hash : 0;
	if (parent->id) {
		c->id = nccl_hash(seed, sizeof(seed), 1);
		c->learned_id = shrink ? "shrink_call" : "split_call";
	}
	if (shrink) {
		if (parent->nranks > 0) {
			c->nranks = parent->nranks - call->arg_nexclude;
			c->learned_nranks = "shrink_call";
		}
		if (parent->rank >= 0) {
			c->rank = parent->rank - call->excluded_below;
			c->learned_rank = "shrink_call";
		}
	} else {
		/* rank and size depend on every member's color and key: tptrace-fr computes them
		 * from the parent's members unless the process asks NCCL itself */
		c->split = true;
		c->split_color = call->arg_color;
		c->split_key = call->arg_key;
	}
	return ci;
}

/* Whether a communicator-creating call encloses this one on the same thread: NCCL's
 * ncclCommInitRank may be built on the exported ncclCommInitRankConfig, and the outer call
 * is the one the application made. */
static bool inside_comm_init(struct flightrec *fr, int pid, int tid)
{
	struct calls_iter it = {};
	struct call_frame *f;

	while ((f = calls__next_open(fr->calls, pid, &it))) {
		uint32_t api = f->rec.api;

		if (f->rec.tid != (uint32_t)tid || api < NCCL_API_BASE)
			continue;
		switch (nccl_apis[api - NCCL_API_BASE].kind) {
		case NAPI_INIT_RANK:
		case NAPI_INIT_RANK_CONFIG:
		case NAPI_INIT_SCALABLE:
		case NAPI_INIT_ALL:
		case NAPI_SPLIT:
		case NAPI_SHRINK:
			return true;
		default:
			break;
		}
	}
	return false;
}

/* A communicator init that returned an error: the comm it would have created, in state
 * "init_failed" with the rc, and one "comm_init" entry in the ring (docs/fr-schema.md). */
static void record_init_failure(struct flightrec *fr, struct fr_proc *p,
				const struct nccl_api *api, const struct tp_rec_ret *r,
				const struct fr_call *call)
{
	int32_t rc = (int32_t)r->rc;
	struct fr_comm *c;
	struct fr_entry *e;
	int ci;

	if (inside_comm_init(fr, p->pid, r->tid))
		return;		/* the enclosing call records it when it returns */
	switch (api->kind) {
	case NAPI_INIT_RANK:
	case NAPI_INIT_RANK_CONFIG:
	case NAPI_INIT_SCALABLE:
		ci = new_comm(p, 0, api->symbol);
		if (ci < 0)
			return;
		c = &p->comms[ci];
		c->id = call->id_hash;
		c->learned_id = call->id_hash ? "init_call" : "unknown";
		c->rank = call->arg_rank;
		c->nranks = call->arg_nranks;
		c->learned_rank = c->learned_nranks = "init_call";
		break;
	case NAPI_INIT_ALL: {
		/* process-local identity, as for a successful ncclCommInitAll; the comm handle
		 * is unknown, the failure's record id keeps it distinct */
		uint64_t seed[2] = { (uint64_t)p->pid, p->next_record_id };

		ci = new_comm(p, 0, api->symbol);
		if (ci < 0)
			return;
		c = &p->comms[ci];
		c->id = nccl_hash(seed, sizeof(seed), 2);
		c->rank = 0;
		c->nranks = call->arg_nranks;
		c->learned_id = "init_all_local";
		c->learned_rank = c->learned_nranks = "init_call";
		break;
	}
	case NAPI_SPLIT:
	case NAPI_SHRINK:
		ci = split_child(p, call, 0, api->kind == NAPI_SHRINK, true);
		if (ci < 0)
			return;
		c = &p->comms[ci];
		break;
	default:
		return;
	}
	c->created_by = api->symbol;
	c->state = "init_failed";
	c->init_rc = rc;
	c->init_record = p->next_record_id;

	e = &p->ring[p->next_record_id % fr->opts.ring_size];
	memset(e, 0, sizeof(*e));
	e->record_id = p->next_record_id++;
	e->kind = FR_ENTRY_COMM_INIT;
	e->comm = ci;
	e->nranks = c->nranks;
	e->state = FR_FAILED;
	e->created = call->entered;
	e->exited = r->ts;
	e->rc = rc;
	e->tid = r->tid;
	e->group_id = call->group_id;
	if (fr->opts.ustack_lookup) {
		e->ustack = call->ustack;
		fr_pystack_get(fr, p, call->ustack);
	}
	p->last_progress = r->ts;
	p->stall_dumped = false;
}

static void on_nccl_return(struct flightrec *fr, struct fr_proc *p, const struct tp_rec_ret *r,
			   struct fr_call *call)
{
	const struct nccl_api *api = &nccl_apis[r->api - NCCL_API_BASE];
	int32_t rc = (int32_t)r->rc;
	bool out_ok = r->flags & TP_RET_OUT_VALID;
	int ci;

	if (call->has_entry) {
		struct fr_entry *e = fr_entry_by_id(fr, p, call->record_id);

		if (e) {
			e->in_call = false;
			e->exited = r->ts;
			e->rc = rc;
		}
	}
	switch (api->kind) {
	case NAPI_INIT_RANK:
	case NAPI_INIT_RANK_CONFIG:
	case NAPI_INIT_SCALABLE:
		if (rc) {
			record_init_failure(fr, p, api, r, call);
			break;
		}
		if (!out_ok || !r->out_val)
			break;
		/* ncclCommInitRank may be built on the exported InitRankConfig: the inner call
		 * returns first, the outer one names the comm */
		ci = find_comm(p, r->out_val);
		if (ci < 0)
			ci = new_comm(p, r->out_val, api->symbol);
		if (ci < 0)
			break;
		p->comms[ci].created_by = api->symbol;
		p->comms[ci].pre_existing = false;
		p->comms[ci].id = call->id_hash;
		p->comms[ci].rank = call->arg_rank;
		p->comms[ci].nranks = call->arg_nranks;
		p->comms[ci].learned_id = call->id_hash ? "init_call" : "unknown";
		p->comms[ci].learned_rank = p->comms[ci].learned_nranks = "init_call";
		break;
	case NAPI_INIT_ALL:
		/* ncclCommInitAll builds comms inside one process: identity is process-local */
		if (rc) {
			record_init_failure(fr, p, api, r, call);
			break;
		}
		if (!out_ok || !r->out_val)
			break;
		ci = new_comm(p, r->out_val, api->symbol);
		if (ci < 0)
			break;
		{
			uint64_t seed[2] = { (uint64_t)p->pid, r->out_val };

			p->comms[ci].id = nccl_hash(seed, sizeof(seed), 2);
		}
		p->comms[ci].rank = 0;
		p->comms[ci].nranks = call->arg_nranks;
		p->comms[ci].learned_id = "init_all_local";
		p->comms[ci].learned_rank = p->comms[ci].learned_nranks = "init_call";
		break;
	case NAPI_SPLIT:
	case NAPI_SHRINK:
		if (rc)
			record_init_failure(fr, p, api, r, call);
		else if (out_ok)
			split_child(p, call, r->out_val, api->kind == NAPI_SHRINK, false);
		break;
	case NAPI_FINALIZE:
	case NAPI_DESTROY:
	case NAPI_ABORT:
	case NAPI_REVOKE:
		ci = find_comm(p, call->arg_comm);
		if (ci >= 0)
			p->comms[ci].state = api->kind == NAPI_FINALIZE ? "finalized" :
					     api->kind == NAPI_DESTROY ? "destroyed" :
					     api->kind == NAPI_ABORT ? "aborted" : "revoked";
		break;
	case NAPI_ASYNC_ERROR:
		if (rc || !out_ok)
			break;
		ci = comm_for_call(p, call->arg_comm);
		if (ci >= 0)
			p->comms[ci].async_error = (int32_t)r->out_val;
		break;
	case NAPI_COUNT:
	case NAPI_USER_RANK:
	case NAPI_CU_DEVICE:
		if (rc || !out_ok)
			break;
		ci = comm_for_call(p, call->arg_comm);
		if (ci < 0)
			break;
		if (api->kind == NAPI_COUNT) {
			p->comms[ci].nranks = (int32_t)r->out_val;
			if (!strcmp(p->comms[ci].learned_nranks, "unknown"))
				p->comms[ci].learned_nranks = "api_query";
		} else if (api->kind == NAPI_USER_RANK) {
			p->comms[ci].rank = (int32_t)r->out_val;
			if (!strcmp(p->comms[ci].learned_rank, "unknown"))
				p->comms[ci].learned_rank = "api_query";
		} else {
			p->comms[ci].device = (int32_t)r->out_val;
		}
		break;
	default:
		break;
	}
}

/* A recorded cudaEvent_t: the stream it was recorded on (index + 1, so the value is never 0)
 * and how many NCCL entries that stream had enqueued then, packed in one map value. */
#define EVENT_POS_BITS 40
#define EVENT_POS_MASK ((1ULL << EVENT_POS_BITS) - 1)

static uint64_t event_pos_pack(int stream_idx, uint64_t pos)
{
	return (uint64_t)(stream_idx + 1) << EVENT_POS_BITS | (pos & EVENT_POS_MASK);
}

static void event_pos_unpack(uint64_t v, int *stream_idx, uint64_t *pos)
{
	*stream_idx = (int)(v >> EVENT_POS_BITS) - 1;
	*pos = v & EVENT_POS_MASK;
}

static void on_cuda_call(struct fr_proc *p, const struct tp_rec_call *rec, struct fr_call *call)
{
	struct cuda_sync sync;
	struct fr_stream *s;
	int si;

	if (cuda_api_decode_sync(rec, &sync))
		return;
	switch (cuda_apis[rec->api].kind) {
	case API_EVENT_RECORD:
	case API_EVENT_RECORD_FLAGS:
		/* the event completes once every NCCL entry enqueued on its stream so far has */
		s = get_stream(p, sync.stream, &si);
		if (s && sync.event)
			u64map__set(&p->events, sync.event, event_pos_pack(si, s->enqueued));
		break;
	case API_EVENT_QUERY:
	case API_EVENT_SYNC:
		call->event = sync.event;
		break;
	case API_STREAM_SYNC:
		s = get_stream(p, sync.stream, &si);
		if (s) {
			call->sync_stream = si + 1;
			call->sync_pos = s->enqueued;
		}
		call->device_sync = sync.device_sync;
		break;
	case API_DEVICE_SYNC:
		call->device_sync = true;
		break;
	default:
		break;
	}
}

static void on_cuda_return(struct flightrec *fr, struct fr_proc *p, const struct tp_rec_ret *r,
			   struct fr_call *call)
{
	const struct cuda_api *api = &cuda_apis[r->api];
	uint64_t v, pos;
	int si;

	if ((int32_t)r->rc != 0)	/* cudaErrorNotReady (600) or an error: nothing learned */
		return;
	switch (api->kind) {
	case API_EVENT_QUERY:
	case API_EVENT_SYNC:
		if (call->event && u64map__get(&p->events, call->event, &v)) {
			event_pos_unpack(v, &si, &pos);
			complete_upto(fr, p, si, pos, r->ts);
		}
		break;
	case API_STREAM_SYNC:
		if (call->device_sync)
			complete_all(fr, p, NULL, r->ts);
		else if (call->sync_stream)
			complete_upto(fr, p, (int)call->sync_stream - 1, call->sync_pos, r->ts);
		break;
	case API_DEVICE_SYNC:
		complete_all(fr, p, NULL, r->ts);
		break;
	default:
		break;
	}
}

/* ---- the calls core's sink ---- */

static void fr_entry_cb(void *ctx, struct call_frame *f, void *user)
{
	struct flightrec *fr = ctx;
	const struct tp_rec_call *rec = &f->rec;
	struct fr_call *call = user;
	struct fr_proc *p = find_proc(fr, rec->pid);
	struct fr_thread *th;

	/* -a: the first event of a process creates its recording (fr_exec.c) */
	if (!p && fr->opts.new_proc && !fr->opts.new_proc(fr->opts.new_proc_ctx, rec->pid))
		p = find_proc(fr, rec->pid);
	if (!p || !(th = get_thread(p, rec->tid)))
		return;		/* call->known stays false: its return is ignored */
	/* a driver call made by a runtime call (cudaEventQuery -> cuEventQuery) is that call,
	 * already counted; one made by NCCL is NCCL's own business, as its runtime calls are */
	if (target__call_nesting(p->t, rec) != CALL_OWN)
		return;
	call->known = true;
	call->api = rec->api;
	call->entered = rec->ts;
	call->dropped_at = fr->events_dropped;
	call->ustack = rec->ustack;
	call->group_id = th->group_depth ? th->group_id : 0;
	if (rec->api >= NCCL_API_BASE)
		on_nccl_call(fr, p, th, rec, call);
	else
		on_cuda_call(p, rec, call);
}

static void fr_call_cb(void *ctx, const struct call *c, void *user)
{
	struct flightrec *fr = ctx;
	struct fr_call *call = user;
	struct fr_proc *p;

	/* a call without its return taught nothing (an entry it created stays in the call) */
	if (c->end != CALL_RETURNED || !call->known)
		return;
	p = find_proc(fr, c->ret->pid);
	if (!p)
		return;
	if (c->ret->api >= NCCL_API_BASE)
		on_nccl_return(fr, p, c->ret, call);
	else
		on_cuda_return(fr, p, c->ret, call);
}

static void fr_exit_cb(void *ctx, const struct tp_rec_exit *x)
{
	struct flightrec *fr = ctx;
	struct fr_proc *p = find_proc(fr, x->pid);

	if (!p || p->exited)
		return;
	p->exited = true;
	p->exit_code = (int)x->exit_code;
	target__set_exit(p->t, (int)x->exit_code, 0);
	fr->pending_exits++;
}

/* The core attached what the process loaded: NCCL may be among it. */
static void fr_library_cb(void *ctx, struct target *t, int new_probes)
{
	struct flightrec *fr = ctx;
	struct fr_proc *p = find_proc(fr, target__pid(t));

	(void)new_probes;
	if (p && p->t == t && !p->exited && !p->nccl_library[0])
		find_nccl_version(p);
}

/* Processes that vanished without an exit record (the tracepoint missed them): mark exited. */
void flightrec__mark_gone(struct flightrec *fr, int pid)
{
	struct fr_proc *p = find_proc(fr, pid);

	if (!p || p->exited)
		return;
	p->exited = true;
	p->exit_code = -1;
	fr->pending_exits++;
}

/* A thread inside a call that creates or tears down communicators: asking NCCL about a comm
 * now could race with its destruction. */
static bool lifecycle_in_progress(struct flightrec *fr, struct fr_proc *p)
{
	struct calls_iter it = {};
	struct call_frame *f;

	while ((f = calls__next_open(fr->calls, p->pid, &it))) {
		uint32_t api = f->rec.api;

		if (api >= NCCL_API_BASE &&
		    nccl_apis[api - NCCL_API_BASE].kind != NAPI_COLL &&
		    nccl_apis[api - NCCL_API_BASE].kind != NAPI_GROUP_END)
			return true;
	}
	return false;
}

int flightrec__comms_to_query(struct flightrec *fr, int *pid, uint64_t *handles, int max)
{
	for (int i = 0; i < fr->nr_procs; i++) {
		struct fr_proc *p = fr->procs[i];
		int n = 0;

		/* a process stopped for its snapshot cannot be stopped for a query: later */
		if (p->exited || fr_stacks__busy(p) || lifecycle_in_progress(fr, p))
			continue;
		for (int c = 0; c < p->nr_comms && n < max; c++) {
			struct fr_comm *cm = &p->comms[c];

			/* only live communicators: a destroyed one is freed memory in NCCL */
			if (!cm->pre_existing || cm->queried || cm->rank >= 0 || !cm->handle ||
			    strcmp(cm->state, "active"))
				continue;
			cm->queried = true;
			handles[n++] = cm->handle;
		}
		if (n) {
			*pid = p->pid;
			return n;
		}
	}
	return 0;
}

void flightrec__comm_learned(struct flightrec *fr, int pid, uint64_t handle, int rank,
			     int nranks, int device, const char *how)
{
	struct fr_proc *p = find_proc(fr, pid);
	struct fr_comm *c;
	int ci;

	if (!p || (ci = find_comm(p, handle)) < 0)
		return;
	c = &p->comms[ci];
	if (rank >= 0 && c->rank < 0) {
		c->rank = rank;
		c->learned_rank = how;
	}
	if (nranks > 0 && c->nranks <= 0) {
		c->nranks = nranks;
		c->learned_nranks = how;
	}
	if (device >= 0 && c->device < 0)
		c->device = device;
}
