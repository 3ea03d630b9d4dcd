// SPDX-License-Identifier: MIT
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
#include <cjson/cJSON.h>
#include "cuda.h"
#include "cuda_api.h"
#include "flightrec.h"
#include "hashmap.h"
#include "log.h"
#include "nccl_api.h"
#include "procmaps.h"
#include "target.h"

#define FR_SCHEMA_VERSION 1
#define MAX_DEPTH 8
#define NO_RC INT64_MIN

enum fr_state { FR_ENQUEUED, FR_STARTED, FR_COMPLETED };

struct fr_entry {
	uint64_t record_id;
	int comm;			/* index into proc->comms */
	uint64_t coll_seq, p2p_seq;
	uint64_t group_id;
	struct nccl_coll c;
	int nranks;			/* comm size when recorded, -1 unknown */
	enum fr_state state;
	uint64_t stream_pos;		/* position among the NCCL entries of its stream */
	uint64_t created, started, completed, exited;	/* CLOCK_MONOTONIC ns, 0 unknown */
	int64_t rc;
	int tid;
	bool in_call;
};

struct fr_comm {
	uint64_t handle;		/* ncclComm_t in this process */
	uint64_t id;			/* cross-rank identity, 0 = unknown */
	uint64_t parent_id;
	bool has_parent;
	int rank, nranks, device;	/* -1 unknown */
	int split_color, split_key;
	bool split;
	const char *created_by;
	const char *learned_id, *learned_rank, *learned_nranks;
	const char *state;
	int64_t async_error;		/* NO_RC: never asked */
	uint64_t coll_seq, p2p_seq;	/* last assigned */
	uint64_t last_started_seq, last_completed_seq;
	uint64_t splits;		/* splits/shrinks of this comm so far: child identity */
	bool pre_existing;		/* created before attach: seqs count from attach */
	bool queried;			/* handed out to ask NCCL's getters */
};

struct fr_stream {
	uint64_t handle;
	uint64_t enqueued;		/* NCCL entries enqueued so far */
	uint64_t completed;		/* entries known complete */
};

struct fr_call {
	uint32_t api;
	uint64_t entered;
	uint64_t record_id;		/* the entry a collective call created, or 0 */
	bool has_entry;
	/* what the return needs to finish the call */
	uint64_t arg_comm;
	int arg_rank, arg_nranks, arg_color, arg_key, arg_nexclude;
	int excluded_below;		/* shrink: excluded ranks below ours */
	uint64_t id_hash;
	uint64_t sync_stream;
	uint64_t sync_pos;
	uint64_t event;
	bool device_sync;
};

struct fr_thread {
	int tid;
	char name[32];
	int depth;
	struct fr_call stack[MAX_DEPTH];
	int group_depth;
	uint64_t group_id;
};

struct fr_proc {
	struct target *t;
	int pid;
	struct fr_entry *ring;
	uint64_t next_record_id;	/* record ids start at 1 */
	struct fr_comm *comms;
	int nr_comms;
	struct fr_stream *streams;
	int nr_streams;
	struct u64map events;		/* cudaEvent_t -> (stream index + 1) << 40 | pos */
	struct u64map threads;		/* tid -> struct fr_thread* */
	uint64_t next_group_id;
	uint64_t last_progress;
	bool stall_dumped;
	bool exited, exit_dumped;
	int exit_code;			/* wait status */
	char nccl_version[32];
	char nccl_library[PATH_MAX];
};

struct flightrec {
	struct flightrec_opts opts;
	struct fr_proc **procs;
	int nr_procs;
	char host[256];
	int64_t realtime_offset;	/* CLOCK_REALTIME - CLOCK_MONOTONIC */
	uint64_t events_dropped;
	int events_dropped_err;		/* < 0: the count is unknown (counter unreadable) */
	uint64_t nr_entries;
	int pending_exits;
};

static uint64_t mono_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

struct flightrec *flightrec__new(const struct flightrec_opts *opts)
{
	struct flightrec *fr = calloc(1, sizeof(*fr));
	struct timespec rt, mt;

	if (!fr)
		return NULL;
	fr->opts = *opts;
	if (!fr->opts.ring_size)
		fr->opts.ring_size = 2000;
	if (gethostname(fr->host, sizeof(fr->host) - 1))
		strcpy(fr->host, "unknown");
	clock_gettime(CLOCK_REALTIME, &rt);
	clock_gettime(CLOCK_MONOTONIC, &mt);
	fr->realtime_offset = (int64_t)(rt.tv_sec * 1000000000LL + rt.tv_nsec) -
			      (int64_t)(mt.tv_sec * 1000000000LL + mt.tv_nsec);
	return fr;
}

static void proc_free(struct fr_proc *p)
{
	if (!p)
		return;
	u64map__free_values(&p->threads);
	u64map__clear(&p->events);
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

	for (int i = 0; i < t->nr_objs; i++) {
		const struct target_obj *o = &t->objs[i];
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
		if (fr->procs[i]->pid == t->pid)
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
	p->pid = t->pid;
	p->next_record_id = 1;
	p->last_progress = mono_now();
	find_nccl_version(p);
	fr->procs[fr->nr_procs++] = p;
	return 0;
}

int flightrec__nr_processes(const struct flightrec *fr)
{
	return fr->nr_procs;
}

uint64_t flightrec__nr_entries(const struct flightrec *fr)
{
	return fr->nr_entries;
}

void flightrec__set_drops(struct flightrec *fr, int err, uint64_t dropped)
{
	fr->events_dropped = dropped;
	fr->events_dropped_err = err;
}

static struct fr_proc *find_proc(struct flightrec *fr, int pid)
{
	for (int i = 0; i < fr->nr_procs; i++)
		if (fr->procs[i]->pid == pid)
			return fr->procs[i];
	return NULL;
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

static struct fr_entry *entry_by_id(struct flightrec *fr, struct fr_proc *p, uint64_t id)
{
	struct fr_entry *e;

	if (!id || id >= p->next_record_id || p->next_record_id - id > fr->opts.ring_size)
		return NULL;
	e = &p->ring[id % fr->opts.ring_size];
	return e->record_id == id ? e : NULL;
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
	call->record_id = e->record_id;
	call->has_entry = true;
	p->last_progress = rec->ts;
	p->stall_dumped = false;
	fr->nr_entries++;
}

static void on_nccl_call(struct flightrec *fr, struct fr_proc *p, struct fr_thread *th,
			 const struct tp_rec_call *rec, struct fr_call *call)
{
	const struct nccl_api *api = &nccl_apis[rec->api - NCCL_API_BASE];

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
		/* every rank passes the same unique id: its hash names the comm on all of them.
		 * The id is passed in memory, so rank is the third integer argument (rdx) in all
		 * three signatures. */
		call->arg_nranks = (int)rec->args[1];
		call->arg_rank = (int)rec->args[2];
		call->id_hash = (rec->flags & TP_CALL_DEREF_FAULT) ? 0 :
				nccl_hash(rec->deref, 128, 0);
		break;
	case NAPI_INIT_ALL:
		call->arg_nranks = (int)rec->args[1];
		break;
	case NAPI_SPLIT:
		call->arg_comm = rec->args[0];
		call->arg_color = (int)rec->args[1];
		call->arg_key = (int)rec->args[2];
		break;
	case NAPI_SHRINK: {
		int ci = find_comm(p, rec->args[0]);
		int n = (int)rec->args[2];

		call->arg_comm = rec->args[0];
		call->arg_nexclude = n;
		call->excluded_below = 0;
		if (ci >= 0 && p->comms[ci].rank >= 0 && !(rec->flags & TP_CALL_DEREF_FAULT)) {
			const int32_t *ex = (const int32_t *)rec->deref;

			for (int i = 0; i < n && i < 32; i++)
				if (ex[i] < p->comms[ci].rank)
					call->excluded_below++;
			call->id_hash = nccl_hash(ex, (n < 32 ? n : 32) * sizeof(int32_t), 0);
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

static void split_child(struct fr_proc *p, const struct fr_call *call, uint64_t handle,
			bool shrink)
{
	int pi = find_comm(p, call->arg_comm);
	struct fr_comm *parent, *c;
	uint64_t seed[4];
	int ci;

	if (pi < 0)
		pi = comm_for_call(p, call->arg_comm);
	if (pi < 0)
		return;
	parent = &p->comms[pi];
	parent->splits++;
	if (!handle)
		return;		/* NCCL_SPLIT_NOCOLOR: this rank is in no child */
	ci = new_comm(p, handle, shrink ? "ncclCommShrink" : "ncclCommSplit");
	if (ci < 0)
		return;
	parent = &p->comms[pi];
	c = &p->comms[ci];
	c->has_parent = true;
	c->parent_id = parent->id;
	c->device = parent->device;
	/* the same on every member: parent identity, the how-many-th split, color (or the
	 * excluded set for shrink) */
	seed[0] = parent->id;
	seed[1] = parent->splits;
	seed[2] = shrink ? 0x5348524eULL : (uint64_t)(uint32_t)call->arg_color;
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
}

static void on_nccl_return(struct flightrec *fr, struct fr_proc *p, const struct tp_rec_ret *r,
			   struct fr_call *call)
{
	const struct nccl_api *api = &nccl_apis[r->api - NCCL_API_BASE];
	int32_t rc = (int32_t)r->rc;
	bool out_ok = r->flags & 1;
	int ci;

	if (call->has_entry) {
		struct fr_entry *e = entry_by_id(fr, p, call->record_id);

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
		if (rc || !out_ok || !r->out_val)
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
		if (rc || !out_ok || !r->out_val)
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
		if (!rc && out_ok)
			split_child(p, call, r->out_val, api->kind == NAPI_SHRINK);
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

static void on_cuda_call(struct fr_proc *p, const struct tp_rec_call *rec, struct fr_call *call)
{
	const struct cuda_api *api = &cuda_apis[rec->api];
	int si;

	switch (api->kind) {
	case API_EVENT_RECORD:
	case API_EVENT_RECORD_FLAGS: {
		/* the event completes once every NCCL entry enqueued on its stream so far has */
		struct fr_stream *s = get_stream(p, rec->args[1], &si);

		if (s && rec->args[0])
			u64map__set(&p->events, rec->args[0], ((uint64_t)(si + 1) << 40) | s->enqueued);
		break;
	}
	case API_EVENT_QUERY:
	case API_EVENT_SYNC:
		call->event = rec->args[0];
		break;
	case API_STREAM_SYNC: {
		struct fr_stream *s = get_stream(p, rec->args[0], &si);

		if (s) {
			call->sync_stream = si + 1;
			call->sync_pos = s->enqueued;
		}
		/* the legacy default stream waits for all blocking streams */
		call->device_sync = rec->args[0] == 0 || rec->args[0] == 1;
		break;
	}
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
	uint64_t v;

	if ((int32_t)r->rc != 0)	/* cudaErrorNotReady (600) or an error: nothing learned */
		return;
	switch (api->kind) {
	case API_EVENT_QUERY:
	case API_EVENT_SYNC:
		if (call->event && u64map__get(&p->events, call->event, &v))
			complete_upto(fr, p, (int)(v >> 40) - 1, v & ((1ULL << 40) - 1), r->ts);
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

static bool api_has_return(uint32_t api)
{
	if (api >= NCCL_API_BASE)
		return nccl_api_has_return(api - NCCL_API_BASE);
	return cuda_apis[api].ret;
}

static void on_call(struct flightrec *fr, const struct tp_rec_call *rec)
{
	struct fr_proc *p = find_proc(fr, rec->pid);
	struct fr_thread *th;
	struct fr_call call = { .api = rec->api, .entered = rec->ts };

	if (!p)
		return;
	th = get_thread(p, rec->tid);
	if (!th)
		return;
	if (rec->api >= NCCL_API_BASE)
		on_nccl_call(fr, p, th, rec, &call);
	else
		on_cuda_call(p, rec, &call);
	if (api_has_return(rec->api) && th->depth < MAX_DEPTH)
		th->stack[th->depth++] = call;
}

static void on_return(struct flightrec *fr, const struct tp_rec_ret *r)
{
	struct fr_proc *p = find_proc(fr, r->pid);
	struct fr_thread *th;

	if (!p)
		return;
	th = get_thread(p, r->tid);
	if (!th)
		return;
	for (int i = th->depth - 1; i >= 0; i--) {
		struct fr_call call;

		if (th->stack[i].api != r->api)
			continue;
		call = th->stack[i];
		th->depth = i;
		if (r->api >= NCCL_API_BASE)
			on_nccl_return(fr, p, r, &call);
		else
			on_cuda_return(fr, p, r, &call);
		return;
	}
}

static void on_exit_rec(struct flightrec *fr, const struct tp_rec_exit *x)
{
	struct fr_proc *p = find_proc(fr, x->pid);

	if (!p || p->exited)
		return;
	p->exited = true;
	p->exit_code = (int)x->exit_code;
	p->t->exit_code = (int)x->exit_code;
	fr->pending_exits++;
}

int flightrec__ring_cb(void *ctx, void *data, size_t size)
{
	struct flightrec *fr = ctx;
	uint32_t type;

	if (size < sizeof(type))
		return 0;
	memcpy(&type, data, sizeof(type));
	switch (type) {
	case TP_REC_CALL: {
		struct tp_rec_call c = {};

		if (size < TP_REC_CALL_SHORT_SIZE)
			return 0;
		memcpy(&c, data, size < sizeof(c) ? size : sizeof(c));
		if (c.api < cuda_api_count ||
		    (c.api >= NCCL_API_BASE && c.api < NCCL_API_BASE + nccl_api_count))
			on_call(fr, &c);
		return 0;
	}
	case TP_REC_RET: {
		const struct tp_rec_ret *r = data;

		if (size < sizeof(*r))
			return 0;
		if (r->api < cuda_api_count ||
		    (r->api >= NCCL_API_BASE && r->api < NCCL_API_BASE + nccl_api_count))
			on_return(fr, r);
		return 0;
	}
	case TP_REC_EXIT:
		if (size >= sizeof(struct tp_rec_exit))
			on_exit_rec(fr, data);
		return 0;
	case TP_REC_DLOPEN: {
		const struct tp_rec_dlopen *d = data;
		struct fr_proc *p;

		if (size < sizeof(*d))
			return 0;
		p = find_proc(fr, d->pid);
		if (p && !p->exited) {
			if (fr->opts.rescan)
				fr->opts.rescan(fr->opts.rescan_ctx, p->t);
			if (!p->nccl_library[0])
				find_nccl_version(p);
		}
		return 0;
	}
	}
	return 0;
}

/* ---- dumps ---- */

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
static void comm_id_str(struct flightrec *fr, const struct fr_proc *p, const struct fr_comm *c,
			char *buf, size_t size)
{
	if (c->id)
		snprintf(buf, size, "%016" PRIx64, c->id);
	else
		snprintf(buf, size, "local:%.64s:%d:%" PRIx64, fr->host, p->pid, c->handle);
}

static const char *state_name(enum fr_state s)
{
	return s == FR_COMPLETED ? "completed" : s == FR_STARTED ? "started" : "enqueued";
}

static cJSON *entry_json(struct flightrec *fr, struct fr_proc *p, const struct fr_entry *e)
{
	const struct fr_comm *c = &p->comms[e->comm];
	cJSON *o = cJSON_CreateObject(), *a, *inner;
	int64_t in, out;
	int nranks = c->nranks > 0 ? c->nranks : e->nranks;
	char buf[128];
	struct fr_thread *th;
	uint64_t v;

	cJSON_AddNumberToObject(o, "record_id", (double)e->record_id);
	comm_id_str(fr, p, c, buf, sizeof(buf));
	cJSON_AddStringToObject(o, "comm_id", buf);
	cJSON_AddNumberToObject(o, "collective_seq_id", (double)e->coll_seq);
	cJSON_AddNumberToObject(o, "p2p_seq_id", (double)e->p2p_seq);
	cJSON_AddNumberToObject(o, "group_id", (double)e->group_id);
	cJSON_AddStringToObject(o, "op", nccl_op_name(e->c.op));
	if (e->c.op == NCCL_OP_SEND)
		snprintf(buf, sizeof(buf), "nccl:send %d->%d", c->rank, e->c.peer);
	else if (e->c.op == NCCL_OP_RECV)
		snprintf(buf, sizeof(buf), "nccl:recv %d<-%d", c->rank, e->c.peer);
	else
		snprintf(buf, sizeof(buf), "nccl:%s", nccl_op_name(e->c.op));
	cJSON_AddStringToObject(o, "profiling_name", buf);
	cJSON_AddBoolToObject(o, "is_p2p", nccl_op_is_p2p(e->c.op));
	cJSON_AddNumberToObject(o, "count", (double)e->c.count);
	cJSON_AddStringToObject(o, "dtype", nccl_dtype_name(e->c.dtype));
	nccl_op_sizes(e->c.op, e->c.count, nranks, &in, &out);
	a = cJSON_AddArrayToObject(o, "input_sizes");
	inner = cJSON_CreateArray();
	cJSON_AddItemToArray(inner, cJSON_CreateNumber((double)in));
	cJSON_AddItemToArray(a, inner);
	a = cJSON_AddArrayToObject(o, "output_sizes");
	inner = cJSON_CreateArray();
	cJSON_AddItemToArray(inner, cJSON_CreateNumber((double)out));
	cJSON_AddItemToArray(a, inner);
	a = cJSON_AddArrayToObject(o, "input_dtypes");
	cJSON_AddItemToArray(a, cJSON_CreateString(nccl_dtype_torch(e->c.dtype)));
	a = cJSON_AddArrayToObject(o, "output_dtypes");
	cJSON_AddItemToArray(a, cJSON_CreateString(nccl_dtype_torch(e->c.dtype)));
	if (nccl_op_has_redop(e->c.op))
		cJSON_AddStringToObject(o, "reduce_op", nccl_redop_name(e->c.redop));
	else
		cJSON_AddNullToObject(o, "reduce_op");
	cJSON_AddItemToObject(o, "root", num_or_null(e->c.root, nccl_op_has_root(e->c.op)));
	cJSON_AddItemToObject(o, "peer", num_or_null(e->c.peer, nccl_op_is_p2p(e->c.op)));
	add_hex(o, "stream", e->c.stream);
	add_hex(o, "sendbuff", e->c.sendbuff);
	add_hex(o, "recvbuff", e->c.recvbuff);
	cJSON_AddStringToObject(o, "state", state_name(e->state));
	add_ns(o, "time_created_ns", fr, e->created);
	add_ns(o, "time_discovered_started_ns", fr, e->started);
	add_ns(o, "time_discovered_completed_ns", fr, e->completed);
	if (e->started && e->completed && e->completed >= e->started)
		cJSON_AddNumberToObject(o, "duration_ms", (e->completed - e->started) / 1e6);
	else
		cJSON_AddNullToObject(o, "duration_ms");
	add_ns(o, "api_enter_ns", fr, e->created);
	add_ns(o, "api_exit_ns", fr, e->in_call ? 0 : e->exited);
	cJSON_AddItemToObject(o, "rc", num_or_null(e->rc, e->rc != NO_RC));
	cJSON_AddNumberToObject(o, "thread_id", e->tid);
	th = u64map__get(&p->threads, (uint64_t)e->tid, &v) ? (struct fr_thread *)(uintptr_t)v : NULL;
	cJSON_AddStringToObject(o, "thread_name", th && th->name[0] ? th->name : "");
	return o;
}

static cJSON *comm_json(struct flightrec *fr, struct fr_proc *p, const struct fr_comm *c)
{
	cJSON *o = cJSON_CreateObject(), *l;
	char buf[128];

	comm_id_str(fr, p, c, buf, sizeof(buf));
	cJSON_AddStringToObject(o, "comm_id", buf);
	cJSON_AddBoolToObject(o, "cross_rank_id", c->id != 0);
	add_hex(o, "comm_handle", c->handle);
	cJSON_AddItemToObject(o, "rank", num_or_null(c->rank, c->rank >= 0));
	cJSON_AddItemToObject(o, "nranks", num_or_null(c->nranks, c->nranks > 0));
	cJSON_AddItemToObject(o, "device", num_or_null(c->device, c->device >= 0));
	add_id(o, "parent", c->parent_id, c->has_parent && c->parent_id);
	cJSON_AddItemToObject(o, "split_color", num_or_null(c->split_color, c->split));
	cJSON_AddItemToObject(o, "split_key", num_or_null(c->split_key, c->split));
	cJSON_AddStringToObject(o, "created_by", c->created_by);
	l = cJSON_AddObjectToObject(o, "learned");
	cJSON_AddStringToObject(l, "comm_id", c->learned_id);
	cJSON_AddStringToObject(l, "rank", c->learned_rank);
	cJSON_AddStringToObject(l, "nranks", c->learned_nranks);
	cJSON_AddStringToObject(l, "seq_origin", c->pre_existing ? "attach" : "comm_init");
	cJSON_AddStringToObject(o, "state", c->state);
	cJSON_AddItemToObject(o, "async_error", num_or_null(c->async_error, c->async_error != NO_RC));
	cJSON_AddNumberToObject(o, "last_enqueued_seq", (double)c->coll_seq);
	cJSON_AddNumberToObject(o, "last_started_seq", (double)c->last_started_seq);
	cJSON_AddNumberToObject(o, "last_completed_seq", (double)c->last_completed_seq);
	cJSON_AddNumberToObject(o, "last_p2p_seq", (double)c->p2p_seq);
	return o;
}

static const char *call_name(uint32_t api)
{
	if (api >= NCCL_API_BASE)
		return nccl_apis[api - NCCL_API_BASE].symbol;
	return cuda_apis[api].symbol;
}

static cJSON *dump_json(struct flightrec *fr, struct fr_proc *p, const char *reason)
{
	struct target *t = p->t;
	cJSON *root = cJSON_CreateObject(), *arr, *proc;
	uint64_t now = mono_now(), first;

	cJSON_AddStringToObject(root, "schema", "tptrace-fr");
	cJSON_AddNumberToObject(root, "version", FR_SCHEMA_VERSION);
	cJSON_AddStringToObject(root, "host", fr->host);
	cJSON_AddNumberToObject(root, "pid", p->pid);
	cJSON_AddStringToObject(root, "comm", t->comm);
	cJSON_AddStringToObject(root, "cmdline", t->cmdline ? t->cmdline : "");
	cJSON_AddItemToObject(root, "global_rank", num_or_null(t->rank, t->rank >= 0));
	cJSON_AddItemToObject(root, "world_size", num_or_null(t->world_size, t->world_size > 0));
	cJSON_AddItemToObject(root, "local_rank", num_or_null(t->local_rank, t->local_rank >= 0));
	if (p->nccl_version[0])
		cJSON_AddStringToObject(root, "nccl_version", p->nccl_version);
	else
		cJSON_AddNullToObject(root, "nccl_version");
	if (p->nccl_library[0])
		cJSON_AddStringToObject(root, "nccl_library", p->nccl_library);
	else
		cJSON_AddNullToObject(root, "nccl_library");
	cJSON_AddStringToObject(root, "dump_reason", reason);
	add_ns(root, "dump_time_ns", fr, now);
	cJSON_AddNumberToObject(root, "dump_mono_ns", (double)now);
	proc = cJSON_AddObjectToObject(root, "process");
	if (!p->exited) {
		cJSON_AddStringToObject(proc, "state", "running");
		cJSON_AddNullToObject(proc, "exit_code");
		cJSON_AddNullToObject(proc, "signal");
	} else if (p->exit_code >= 0 && (p->exit_code & 0x7f)) {
		cJSON_AddStringToObject(proc, "state", "killed");
		cJSON_AddNullToObject(proc, "exit_code");
		cJSON_AddNumberToObject(proc, "signal", p->exit_code & 0x7f);
	} else {
		cJSON_AddStringToObject(proc, "state", "exited");
		cJSON_AddItemToObject(proc, "exit_code",
				      num_or_null((p->exit_code >> 8) & 0xff, p->exit_code >= 0));
		cJSON_AddNullToObject(proc, "signal");
	}
	cJSON_AddNumberToObject(root, "ring_size", (double)fr->opts.ring_size);
	cJSON_AddNumberToObject(root, "entries_recorded", (double)(p->next_record_id - 1));
	cJSON_AddNumberToObject(root, "entries_overwritten",
				(double)(p->next_record_id - 1 > fr->opts.ring_size ?
					 p->next_record_id - 1 - fr->opts.ring_size : 0));
	cJSON_AddItemToObject(root, "events_dropped",
			      num_or_null(fr->events_dropped, !fr->events_dropped_err));
	if (fr->events_dropped_err)
		cJSON_AddStringToObject(root, "events_dropped_unknown", strerror(-fr->events_dropped_err));

	arr = cJSON_AddArrayToObject(root, "comms");
	for (int i = 0; i < p->nr_comms; i++)
		cJSON_AddItemToArray(arr, comm_json(fr, p, &p->comms[i]));

	arr = cJSON_AddArrayToObject(root, "in_call");
	for (size_t i = 0; i < p->threads.cap; i++) {
		struct fr_thread *th;

		if (!p->threads.keys[i])
			continue;
		th = (struct fr_thread *)(uintptr_t)p->threads.vals[i];
		for (int d = 0; d < th->depth && !p->exited; d++) {
			const struct fr_call *call = &th->stack[d];
			cJSON *o = cJSON_CreateObject();
			struct fr_entry *e = call->has_entry ? entry_by_id(fr, p, call->record_id) : NULL;

			cJSON_AddNumberToObject(o, "tid", th->tid);
			cJSON_AddStringToObject(o, "thread_name", th->name);
			cJSON_AddStringToObject(o, "api", call_name(call->api));
			add_ns(o, "entered_ns", fr, call->entered);
			if (e) {
				char buf[128];

				comm_id_str(fr, p, &p->comms[e->comm], buf, sizeof(buf));
				cJSON_AddStringToObject(o, "comm_id", buf);
				cJSON_AddNumberToObject(o, "seq", (double)(e->coll_seq ? e->coll_seq : e->p2p_seq));
			} else {
				cJSON_AddNullToObject(o, "comm_id");
				cJSON_AddNullToObject(o, "seq");
			}
			cJSON_AddItemToArray(arr, o);
		}
	}

	arr = cJSON_AddArrayToObject(root, "entries");
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

/* Written to a temp file in the same directory, fsync'ed and renamed: a reader (or a crash of
 * tptrace) sees the previous complete dump or the new one, never half of one. */
static int write_atomic(const char *path, const char *text)
{
	char tmp[PATH_MAX];
	size_t len = strlen(text), off = 0;
	int fd, err = 0;

	if (snprintf(tmp, sizeof(tmp), "%s.tmpXXXXXX", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = mkstemp(tmp);	/* mode 0600 */
	if (fd < 0)
		return -errno;
	while (off < len) {
		ssize_t n = write(fd, text + off, len - off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			err = -errno;
			break;
		}
		off += n;
	}
	if (!err && fsync(fd))
		err = -errno;
	if (close(fd) && !err)
		err = -errno;
	if (!err && rename(tmp, path))
		err = -errno;
	if (err)
		unlink(tmp);
	return err;
}

static int dump_proc(struct flightrec *fr, struct fr_proc *p, const char *reason)
{
	char path[PATH_MAX];
	cJSON *root;
	char *text;
	int err;

	err = flightrec__dump_path(path, sizeof(path), fr->opts.dump_dir, fr->host, p->pid);
	if (err)
		return err;
	root = dump_json(fr, p, reason);
	text = root ? cJSON_PrintUnformatted(root) : NULL;
	cJSON_Delete(root);
	if (!text)
		return -ENOMEM;
	err = write_atomic(path, text);
	free(text);
	if (err) {
		log_error("tptrace: writing flight-recorder dump %s: %s\n", path, strerror(-err));
		return err;
	}
	log_info("tptrace: dumped pid %d (%s) to %s\n", p->pid, reason, path);
	return 0;
}

int flightrec__dump_all(struct flightrec *fr, const char *reason)
{
	int n = 0, first_err = 0;

	for (int i = 0; i < fr->nr_procs; i++) {
		struct fr_proc *p = fr->procs[i];
		int err;

		if (p->exited && p->exit_dumped)
			continue;	/* its exit dump is final */
		err = dump_proc(fr, p, reason);
		if (err && !first_err)
			first_err = err;
		else if (!err)
			n++;
	}
	return first_err ? first_err : n;
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

int flightrec__check_stalls(struct flightrec *fr, uint64_t now)
{
	int n = 0;

	if (!fr->opts.stall_timeout_ns)
		return 0;
	for (int i = 0; i < fr->nr_procs; i++) {
		struct fr_proc *p = fr->procs[i];

		if (p->exited || p->stall_dumped || now - p->last_progress < fr->opts.stall_timeout_ns)
			continue;
		if (!has_pending(fr, p))
			continue;
		p->stall_dumped = true;	/* once per stall; progress re-arms it */
		if (!dump_proc(fr, p, "stall"))
			n++;
	}
	return n;
}

int flightrec__take_exits(struct flightrec *fr)
{
	int n = 0;

	if (!fr->pending_exits)
		return 0;
	fr->pending_exits = 0;
	for (int i = 0; i < fr->nr_procs; i++) {
		struct fr_proc *p = fr->procs[i];

		if (!p->exited || p->exit_dumped)
			continue;
		if (!dump_proc(fr, p, "exit"))
			n++;
		p->exit_dumped = true;
	}
	return n;
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
static bool lifecycle_in_progress(struct fr_proc *p)
{
	for (size_t i = 0; i < p->threads.cap; i++) {
		struct fr_thread *th;

		if (!p->threads.keys[i])
			continue;
		th = (struct fr_thread *)(uintptr_t)p->threads.vals[i];
		for (int d = 0; d < th->depth; d++) {
			uint32_t api = th->stack[d].api;

			if (api >= NCCL_API_BASE &&
			    nccl_apis[api - NCCL_API_BASE].kind != NAPI_COLL &&
			    nccl_apis[api - NCCL_API_BASE].kind != NAPI_GROUP_END)
				return true;
		}
	}
	return false;
}

int flightrec__comms_to_query(struct flightrec *fr, int *pid, uint64_t *handles, int max)
{
	for (int i = 0; i < fr->nr_procs; i++) {
		struct fr_proc *p = fr->procs[i];
		int n = 0;

		if (p->exited || lifecycle_in_progress(p))
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
