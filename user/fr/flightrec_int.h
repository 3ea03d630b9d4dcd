/* SPDX-License-Identifier: MIT */
/* The flight recorder's state, shared by its two halves: flightrec.c records (calls ->
 * entries, comms, stream progress) and flightrec_dump.c writes it out (docs/fr-schema.md).
 * Not an interface: only those two files and the metrics (fr_metrics.c) include it. */
#ifndef TPTRACE_FLIGHTREC_INT_H
#define TPTRACE_FLIGHTREC_INT_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include "calls.h"
#include "flightrec.h"
#include "hashmap.h"
#include "nccl_api.h"

#define NO_RC INT64_MIN

enum fr_state { FR_ENQUEUED, FR_STARTED, FR_COMPLETED, FR_FAILED };

enum fr_entry_kind {
	FR_ENTRY_COLL,			/* a collective or p2p call */
	FR_ENTRY_COMM_INIT,		/* a communicator init that failed (state FR_FAILED) */
};

struct fr_entry {
	uint64_t record_id;
	enum fr_entry_kind kind;
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
	/* --py-stacks: the call's stack id (bpf/ustack.h); its frames are in proc->pystacks,
	 * resolved when the entry was recorded (the BPF stack map may lose the id later) */
	uint64_t ustack;
};

/* The Python frames of one stack id as an entry's "frames" (innermost first), resolved once
 * per (process, id): entries of the same call site share it. */
struct fr_pyframe {
	char *name, *file;	/* NULL: unresolved (the code object was gone) */
	int line;		/* 0 unknown */
};

struct fr_pystack {
	int nr;
	struct fr_pyframe *frames;
	const char *missing;	/* nr == 0: why (static string) */
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
	const char *state;		/* "active", "init_failed", "finalized", ... */
	int64_t init_rc;		/* init_failed: the ncclResult_t the init returned */
	uint64_t init_record;		/* init_failed: record id of its comm_init entry */
	int64_t async_error;		/* NO_RC: never asked */
	uint64_t coll_seq, p2p_seq;	/* last assigned */
	uint64_t last_started_seq, last_completed_seq;
	uint64_t splits;		/* splits/shrinks of this comm so far: child identity */
	bool pre_existing;		/* created before attach: seqs count from attach */
	bool queried;			/* handed out to ask NCCL's getters */
	/* each completed collective's wait, the call's entry to its completion as the process
	 * learnt it, on this host's clock (fr_metrics.c: straggler series); never compared
	 * across hosts, only as durations */
	uint64_t waits, waits_sum_ns;	/* every completed collective so far */
	struct fr_wait *recent;		/* the newest FR_WAITS_RECENT, a ring; NULL: none yet */
	uint64_t recent_next;		/* waits recorded into it so far */
};

#define FR_WAITS_RECENT 512

struct fr_wait {
	uint64_t seq;
	uint64_t entered, completed;	/* CLOCK_MONOTONIC ns */
};

struct fr_stream {
	uint64_t handle;
	uint64_t enqueued;		/* NCCL entries enqueued so far */
	uint64_t completed;		/* entries known complete */
};

/* What a call leaves for its return, kept in the calls core's frame (call_frame.user). */
struct fr_call {
	bool known;			/* a call of a recorded process */
	uint32_t api;
	uint64_t entered;
	uint64_t dropped_at;		/* the recorder's dropped-events count when it entered */
	uint64_t ustack;		/* --py-stacks: the call's stack id (a failed init's entry) */
	uint64_t record_id;		/* the entry a collective call created, or 0 */
	uint64_t group_id;		/* the ncclGroupStart/End group it was called in, 0 none */
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

_Static_assert(sizeof(struct fr_call) <= CALLS_USER_BYTES, "fr_call fits a call frame");

struct flightrec;
/* The recorder's bytes of an open call (session__add_sink gave them their place). */
static inline struct fr_call *fr_call_of(const struct flightrec *fr, const struct call_frame *f);

struct fr_thread {
	int tid;
	char name[32];
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
	struct u64map events;		/* cudaEvent_t -> event_pos(): stream and position */
	struct u64map threads;		/* tid -> struct fr_thread* */
	uint64_t next_group_id;
	uint64_t last_progress;
	bool stall_dumped;
	bool exited, exit_dumped;
	int exit_code;			/* wait status */
	char nccl_version[32];
	char nccl_library[PATH_MAX];
	char job[129];			/* fr_trigger.h job id; "" unknown */
	/* --py-stacks: stack id -> struct fr_pystack *; python / why for the metadata */
	struct u64map pystacks;
	char python[32];		/* "" none */
	char python_why[160];		/* "" when Python frames are captured (or not asked) */
	bool execd;			/* -a: replaced by exec; a new fr_proc records the new image */
	/* -a: library files this process mapped before their probes were attached */
	struct fr_late {
		char path[256];
		uint64_t mapped, attached;	/* CLOCK_MONOTONIC ns */
	} late[4];
	int nr_late;
	/* hang snapshots (flightrec_stacks.c): the attach one is taken by snap_thread */
	pthread_t snap_thread;
	bool snap_running;		/* snap_thread not joined yet */
	struct cJSON *snap_attach, *snap_dump;
	uint64_t snap_attach_ns;	/* how long the attach snapshot took */
	char snap_attach_err[160], snap_dump_err[160];
	/* the round's "net" (fr_net.c), read with its state before the slow parts; the dump
	 * takes it over, dump_set frees what a failed write left */
	struct cJSON *net;
};

struct flightrec {
	struct flightrec_opts opts;
	struct session *session;	/* the acquisition core that hands calls over */
	struct calls *calls;		/* its consumer: the open calls (calls__next_open) */
	size_t user_off;		/* where struct fr_call lies in a call_frame's user */
	struct fr_proc **procs;
	int nr_procs;
	char host[256];
	int64_t realtime_offset;	/* CLOCK_REALTIME - CLOCK_MONOTONIC */
	uint64_t events_dropped;
	int events_dropped_err;		/* < 0: the count is unknown (counter unreadable) */
	int pending_exits;
	uint64_t dumps_removed;		/* by --max-dump-mb retention */
	bool dump_dir_opened;		/* a round opened it: gone later is worth a line */
	/* dumps written per reason, for the metrics (fr_metrics.c) */
	struct fr_dump_count {
		char reason[32];
		uint64_t n;
	} dump_counts[16];
	int nr_dump_reasons;
};


/* The job id a stall of a process whose environment names no job writes its trigger for:
 * "nccl-comm:<16 hex>", the cross-rank identity of the communicator it waits on; a process
 * with a communicator of that identity is of that job (flightrec__has_job, dump_job). */
#define FR_COMM_JOB "nccl-comm:"
bool fr_proc_in_job(const struct fr_proc *p, const char *job);

/* flightrec_dump.c: a comm's id as dumps write it (cross-rank id or local:host:pid:handle) */
void comm_id_str(struct flightrec *fr, const struct fr_proc *p, const struct fr_comm *c,
		 char *buf, size_t size);

/* flightrec_stacks.c */
struct cJSON;
int fr_stacks__attach(struct flightrec *fr, struct fr_proc *p);
bool fr_stacks__busy(struct fr_proc *p);
/* dump snapshots of procs[0..n), in parallel; each is used by the next dump of its proc */
int fr_stacks__take_dumps(struct flightrec *fr, struct fr_proc **procs, int n);
/* "stacks" and "stacks_error" of a dump of p (takes the dump snapshot when none is ready) */
void fr_stacks__add(struct flightrec *fr, struct fr_proc *p, struct cJSON *root);
/* whether a dump of p now would take a snapshot (fr_stacks__take_dumps): its state is
 * written first, with fr_stacks__add_pending */
bool fr_stacks__will_take(const struct flightrec *fr, const struct fr_proc *p);
/* "stacks" (empty), "stacks_error" and "stacks_pending" of a state-first dump */
void fr_stacks__add_pending(struct cJSON *root);
void fr_stacks__free(struct fr_proc *p);
/* flightrec.c: the frames of stack id in p (resolved and cached on first use), NULL: no memory */
struct fr_pystack *fr_pystack_get(struct flightrec *fr, struct fr_proc *p, uint64_t id);
/* The ring entry with this record id, NULL when it fell out of the ring. */
struct fr_entry *fr_entry_by_id(struct flightrec *fr, struct fr_proc *p, uint64_t id);

static inline struct fr_call *fr_call_of(const struct flightrec *fr, const struct call_frame *f)
{
	return (struct fr_call *)((char *)f->user + fr->user_off);
}

#endif
