/* SPDX-License-Identifier: MIT */
/* The NCCL flight recorder: a ring of the most recent collectives per traced process, kept in
 * tptrace (not in the target) so it survives the target crashing, freezing or being killed.
 * Entries move enqueued -> started -> completed from what the application itself asks the
 * GPU (cudaEventQuery/Synchronize results, stream and device syncs); tptrace adds no CUDA
 * work. Dumps follow docs/fr-schema.md. */
#ifndef TPTRACE_FLIGHTREC_H
#define TPTRACE_FLIGHTREC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ustack.h"

struct flightrec;
struct fr_trigger_rec;
struct target;

struct flightrec_opts {
	size_t ring_size;		/* entries per process (default 2000) */
	const char *dump_dir;
	uint64_t stall_timeout_ns;	/* 0: no stall dumps */
	/* hang snapshots (stacks.h) at attach and per dump */
	bool no_stacks;
	int stack_samples;		/* 0: stacks.h's default (3) */
	int stack_interval_ms;		/* 0: 200 */
	/* dump retention and format (flightrec_dump.c) */
	uint64_t max_dump_bytes;	/* 0: no limit; else this host's oldest dumps are removed */
	bool gzip_dumps;		/* tptrace-fr.<host>.<pid>.json.gz */
	/* cross-host triggers (fr_trigger.h) */
	const char *host_id;		/* names this recorder in dumps; NULL: the hostname */
	/* a process of a known job stalled: write a trigger and dump the job (true), or false
	 * to fall back to a plain stall dump of that process */
	bool (*stall_trigger)(void *ctx, const char *job);
	void *stall_trigger_ctx;
	/* tptrace fr -a: a call from a process not recorded yet (its first event): start recording
	 * it (0) or not (< 0; its calls are dropped). NULL: calls of unknown processes are dropped */
	int (*new_proc)(void *ctx, int pid);
	void *new_proc_ctx;
	/* --py-stacks: turns a call's stack id (tp_rec_call.ustack) into frames (ustacks__get,
	 * or a test's table). Entries then carry "frames" (docs/fr-schema.md); NULL: none. */
	ustack_lookup_fn ustack_lookup;
	void *ustack_ctx;
	/* consumes every record the BPF side has written so far (ring_buffer__consume), called
	 * at the start of each round of dumps: a round shows the state of all its processes at
	 * one instant, as fresh as it can be (docs/fr-schema.md "dump_set"). < 0: failed (the
	 * state is the one of the last consumption). NULL: the state as it is. */
	int (*drain)(void *ctx);
	/* while a round of dumps writes its state files (the state frozen at its capture:
	 * sockets and JSON of hundreds of processes take a second), the BPF ring must still be
	 * emptied or it overflows and records are lost: hold(ctx, true) makes consumed records
	 * wait in memory instead of changing the state, pump(ctx, ms) consumes what arrived
	 * (waiting up to ms for it), hold(ctx, false) hands the held records on, in order, as if
	 * read then. The snapshots and the complete files come after (their text is made):
	 * pump consumes as usual meanwhile. NULL: the ring waits instead. */
	void (*hold)(void *ctx, bool on);
	int (*pump)(void *ctx, int timeout_ms);
	void *drain_ctx;
};

/* Registers with s, the acquisition core that hands it calls and attaches what processes
 * load (session.h). NULL and errno. */
struct session;
struct flightrec *flightrec__new(struct session *s, const struct flightrec_opts *opts);
void flightrec__free(struct flightrec *fr);

/* Starts recording a process (its target holds maps, env, comm). */
int flightrec__add_process(struct flightrec *fr, struct target *t);

/* Dumps every process (reason: "signal", "request", "final", ...). Returns the number of
 * dumps written, or a negative errno of the first failure (reported on stderr). */
int flightrec__dump_all(struct flightrec *fr, const char *reason);
/* Stall check: dumps processes whose pending work made no progress for the stall timeout.
 * Returns the number of dumps written. */
int flightrec__check_stalls(struct flightrec *fr, uint64_t now_mono_ns);
/* Processes that exited since the last call were dumped with reason "exit"; returns how many. */
int flightrec__take_exits(struct flightrec *fr);
/* Communicators created before attach whose rank/size nobody asked NCCL for yet: up to max
 * of one process (returns the count, *pid set); each is handed out once. */
int flightrec__comms_to_query(struct flightrec *fr, int *pid, uint64_t *handles, int max);
/* What NCCL's own getters said about a communicator (-1: not known). */
void flightrec__comm_learned(struct flightrec *fr, int pid, uint64_t handle, int rank,
			     int nranks, int device, const char *how);

/* tptrace fr -a (fr_exec.c) */
/* The recorded process pid called exec: its recording ends (dumped as exited, reason "exec",
 * exit code unknown); calls of the new image start a new one. False when pid is not recorded. */
bool flightrec__exec(struct flightrec *fr, int pid);
/* pid mapped library file path at mapped_ns but its probes were attached only at attached_ns
 * (CLOCK_MONOTONIC): calls into it in between are not recorded; the dump says so. */
void flightrec__probes_late(struct flightrec *fr, int pid, const char *path, uint64_t mapped_ns,
			    uint64_t attached_ns);

/* A process that vanished without an exit record: dumped as exited by take_exits. */
void flightrec__mark_gone(struct flightrec *fr, int pid);
/* Events the BPF side dropped; err < 0 when the counter could not be read (written unknown). */
void flightrec__set_drops(struct flightrec *fr, int err, uint64_t events_dropped);

/* Opens (creating 0700 when missing) a dump directory fit for a root daemon: owned by the
 * user tptrace runs as, writable by nobody else, not a symlink. A directory fd, or -errno
 * after one line on stderr (-EPERM: refused). */
int flightrec__open_dump_dir(const char *dir);

/* --py-stacks: the Python version of pid ("3.11.7"), or NULL and why its entries carry no
 * Python frames (ustacks__python / ustacks__why); written in the dump's metadata. */
void flightrec__set_python(struct flightrec *fr, int pid, const char *python, const char *why);

/* The job a process belongs to (fr_trigger.h: from its environment). */
void flightrec__set_job(struct flightrec *fr, int pid, const char *job);
/* Whether any process of job is recorded here. */
bool flightrec__has_job(const struct flightrec *fr, const char *job);
/* Dumps every process of job for trigger t (reason "trigger"); their stall dumps count as
 * done until they progress again. job NULL: the processes of no known job, t NULL: reason
 * "signal". Returns dumps written or the first negative errno. */
int flightrec__dump_job(struct flightrec *fr, const char *job, const struct fr_trigger_rec *t);

/* Dump file path of a process: <dir>/tptrace-fr.<host>.<pid>.json (".gz" added by gzip_dumps) */
int flightrec__dump_path(char *buf, size_t size, const char *dir, const char *host, int pid);

#endif
