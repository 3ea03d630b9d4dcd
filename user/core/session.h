/* SPDX-License-Identifier: MIT */
/* What `tptrace` and `tptrace fr` share: loading the BPF object, opening targets, reading
 * the drop counter. Every failure prints its one error line here. */
#ifndef TPTRACE_SESSION_H
#define TPTRACE_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "calls.h"

struct cuda_bpf;
struct ustacks;
struct target;
struct target_probes;

/* The tracing BPF object (bpf/cuda.bpf.c), loaded once in the flavour this kernel supports:
 * its features are probed before the load, not guessed from load failures. */
struct session_bpf {
	struct cuda_bpf *skel;
	bool uprobe_multi;	/* the *_multi programs are loaded: one link per object */
	bool uprobe_session;	/* cuda_session is loaded (fr -a on kernels >= 6.13) */
	bool exit_tp;		/* exit codes come from the sched_process_exit tracepoint */
	struct ustacks *ustacks;	/* --py-stacks: stack capture on (user/core/ustack.h); else NULL */
};

struct session_load_opts {
	bool fr_exec;		/* tptrace fr -a: also loads and attaches the exec-mapping and exec
				 * programs and turns on the fr_pids filter of the entry and return
				 * programs (user/fr/fr_exec.c) */
	bool ustacks;		/* --py-stacks: capture each call's Python stack (bpf/ustacks.h) */
	bool ustacks_native;	/* ... and its native frames (frame pointers) */
	const struct fr_scope *scope;	/* fr -a --scope (fr_scope.h); NULL: every process */
};

/* Opens and loads the BPF object with a ring of ring_mb MiB and the options of o. NULL after an
 * error line. */
struct session_bpf *session__load_bpf(int ring_mb, const struct session_load_opts *o);
/* --py-stacks: starts stack capture for pid (b->ustacks set). One notice line when its
 * Python cannot be read (ustacks__why then says why; its events carry no Python frames).
 * 0, or a negative errno; a no-op returning 0 when capture is off. */
int session__ustacks_add(struct session_bpf *b, int pid);
/* Destroys the object (programs, maps, the exit tracepoint link). NULL is fine. */
void session__free_bpf(struct session_bpf *b);
/* Fills probes from the loaded object. */
void session__probes(const struct session_bpf *b, struct target_probes *probes);
/* target__new() with the error line for a vanished or unreadable pid. */
struct target *session__open_target(int pid);
/* Processes on the host, other than this one, that map a file whose path contains one of
 * needles (a NULL-terminated list), or, when also is given, for which also(pid, ctx) is true:
 * at most max pids into pids, in /proc order. want, when given, is asked first and a pid it
 * refuses is not read at all (reading maps takes each process's mmap lock: hundreds of them
 * every few seconds cost a loaded host seconds). Processes that vanish or cannot be read are
 * skipped. Returns how many were found. */
int session__find_procs(const char *const *needles, bool (*want)(int pid, void *ctx),
			bool (*also)(int pid, void *ctx), void *ctx, int *pids, int max);
/* Watches the exits of pid (exit code in the trace / dump). 0, or a negative errno after an
 * error line: tracing goes on, the exit code is then unknown. */
int session__watch_exit(struct session_bpf *b, int pid);
/* Sum of the per-CPU drop counters into *drops: 0, or a negative errno when the counter
 * cannot be read (the count is then unknown, never 0). */
int session__drops(const struct session_bpf *b, uint64_t *drops);
/* Sum over CPUs of one slot of a per-CPU u64 array map: 0 or a negative errno. The test knob
 * TPTRACE_TEST_COUNTERS_UNREADABLE makes every read fail (-EBADF), as a map that cannot be
 * read would: the tests check that unknown counts are written as unknown. */
int session__percpu_sum(int map_fd, uint32_t key, uint64_t *sum);
/* ---- the acquisition core ----
 * One session owns the ring's one consumer (calls.c: validation, pairing, the record switch),
 * the traced processes, and library discovery: a dlopen record, or a periodic rescan,
 * attaches the probes of newly loaded code (target__scan) and tells the sinks. Sinks (the
 * trace writer decode.c, the flight recorder flightrec.c, the --gpu join gpu_sink.c) register
 * ops and receive complete calls; none consumes records or attaches probes itself. A sink may
 * consume another's output (session__consume): the --gpu join holds the calls it must decide
 * and hands them to the trace writer decided. */
struct elfsym_cache;

struct session_sink_ops {
	/* bytes of each open call's call_frame.user this sink keeps (what its return needs);
	 * user below points at them, session__user finds them again */
	size_t user_bytes;
	/* every entry, before it is pushed (session__has_return says whether its return
	 * record will follow, or the call comes at once as CALL_NO_RETURN) */
	void (*on_entry)(void *ctx, struct call_frame *f, void *user);
	/* a paired call: entry + return, or the reason it has none (calls.h) */
	void (*on_call)(void *ctx, const struct call *c, void *user);
	/* t (live, known to the session) loaded code, as a dlopen record or a rescan said; its
	 * new probes (>= 0) are attached already */
	void (*on_library)(void *ctx, struct target *t, int new_probes);
	/* after the process's open calls were delivered as CALL_EXITED */
	void (*on_exit)(void *ctx, const struct tp_rec_exit *x);
	/* tptrace fr -a: a process mapped a library file, a recorded process called exec */
	void (*on_map)(void *ctx, const struct tp_rec_map *m);
	void (*on_exec)(void *ctx, const struct tp_rec_exec *e);
	/* bpf/mem.h rings */
	void (*on_mem_call)(void *ctx, const void *rec);
	void (*on_mem_usdt)(void *ctx, const void *rec);
	/* A stage: a sink whose output other sinks consume (session__consume), the --gpu join
	 * (user/gpu/gpu_sink.h). Asked about every paired call before any sink's on_call: true
	 * when it keeps the call (a copy: the frame's user bytes as the entries left them) to
	 * hand it to its consumers later, decided, through an interface of its own; its
	 * consumers' on_call then sees the call with held set, the other sinks' as usual. */
	bool (*hold)(void *ctx, const struct call *c, void *user);
};

struct session;

/* A session of bpf/cuda.h records. probes: what target__scan attaches (its all_returns says
 * which apis return records follow); cache and probes outlive the session. NULL and errno. */
struct session *session__new(struct elfsym_cache *cache, const struct target_probes *probes);
/* A session of bpf/mem.h records (api ids below mem_api_count): no targets of its own, the
 * memory tracer attaches its probes itself (memtrace.c). */
struct session *session__new_mem(uint32_t mem_api_count);
void session__free(struct session *s);	/* not its targets: their owner frees them */
/* 0, -ENOSPC when the sinks' user bytes pass CALLS_USER_BYTES, -ENOMEM. *user_off (may be
 * NULL): where the sink's bytes start in call_frame.user. */
int session__add_sink(struct session *s, const struct session_sink_ops *ops, void *ctx,
		      size_t *user_off);
/* sink (a registered sink's ctx) consumes the output of stage (another's, with a hold op):
 * the calls stage holds reach sink's on_call with held set (one stage per sink). 0, -ENOENT
 * when either is not registered or stage holds nothing, -EINVAL when they are one. */
int session__consume(struct session *s, const void *sink, const void *stage);
/* Bytes of call_frame.user the sinks registered so far use, from its start. */
size_t session__user_used(const struct session *s);
/* The processes the session discovers libraries for (owned by the caller; 0 or -ENOMEM). A
 * pid may come back as a new target (after exec): the newest one is the pid's. */
int session__add_target(struct session *s, struct target *t);
void session__remove_target(struct session *s, struct target *t);	/* before freeing it */
struct target *session__target(struct session *s, int pid);
/* A driver call a runtime call of its process made (cudaLaunchKernel -> cuLaunchKernel;
 * target__call_nesting): the runtime call is the one the sinks write and join. */
bool session__driver_call_in_runtime(struct session *s, const struct tp_rec_call *rec);
/* Attaches what t loaded since its last scan and tells the sinks when the scan found
 * anything to do: target__scan's result (new probes, or a negative errno). */
int session__scan(struct session *s, struct target *t);
/* Every live target rescanned: a backstop for code mapped without the linker's notice. */
void session__rescan(struct session *s);
/* libbpf ring_buffer callback: ctx is the session. Always 0 (bad records are counted). */
int session__ring_cb(void *ctx, void *data, size_t size);
/* Whether an entry of api is followed by its return record (the api tables, or every api
 * with --durations): a sink's on_entry may then start what the return ends. */
bool session__has_return(const struct session *s, uint32_t api);
/* Delivers every call still open as CALL_UNFINISHED ending at end_ns. */
void session__finish(struct session *s, uint64_t end_ns);
/* The consumer's counts, and its open calls (calls__next_open) for a sink's own walks. */
const struct calls_stats *session__stats(const struct session *s);
struct calls *session__calls(struct session *s);

/* -v/-q for every subcommand (an argp child) and libbpf's messages gated by -v. */
struct argp;
extern const struct argp session_common_argp;
void session__libbpf_print_setup(void);

/* Option values shared by the subcommands: 0, or -EINVAL for a bad value. */
int session__parse_pid(const char *arg, int *pid);
int session__parse_ring_mb(const char *arg, int *mb);		/* power of two, 1..4096 */
int session__parse_seconds(const char *arg, double *sec);	/* > 0 */
int session__parse_int(const char *arg, int min, int max, int *out);	/* decimal, min..max */

#endif
