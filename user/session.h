/* SPDX-License-Identifier: MIT */
/* What `tptrace` and `tptrace fr` share: loading the BPF object, opening targets, reading
 * the drop counter. Every failure prints its one error line here. */
#ifndef TPTRACE_SESSION_H
#define TPTRACE_SESSION_H

#include <stdbool.h>
#include <stdint.h>

struct cuda_bpf;
struct ustacks;
struct target;
struct target_probes;

/* The tracing BPF object (bpf/cuda.bpf.c), loaded once in the flavour this kernel supports:
 * its features are probed before the load, not guessed from load failures. */
struct session_bpf {
	struct cuda_bpf *skel;
	bool uprobe_multi;	/* the *_multi programs are loaded: one link per object */
	bool exit_tp;		/* exit codes come from the sched_process_exit tracepoint */
	struct ustacks *ustacks;	/* --py-stacks: stack capture on (user/ustack.h); else NULL */
};

struct session_load_opts {
	bool fr_exec;		/* as session__load_bpf_fr_exec */
	bool ustacks;		/* --py-stacks: capture each call's Python stack (bpf/ustacks.h) */
	bool ustacks_native;	/* ... and its native frames (frame pointers) */
	const struct fr_scope *scope;	/* fr -a --scope (fr_scope.h); NULL: every process */
};

/* Opens and loads the BPF object with a ring of ring_mb MiB. NULL after an error line. */
struct session_bpf *session__load_bpf(int ring_mb);
/* The same for tptrace fr -a: also loads and attaches the exec-mapping and exec programs and
 * turns on the fr_pids filter of the entry and return programs (user/fr_exec.c). */
struct session_bpf *session__load_bpf_fr_exec(int ring_mb);
/* Either of the above, with the options of o. */
struct session_bpf *session__load_bpf_opts(int ring_mb, const struct session_load_opts *o);
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
 * at most max pids into pids, in /proc order. Processes that vanish or cannot be read are
 * skipped. Returns how many were found. */
int session__find_procs(const char *const *needles, bool (*also)(int pid, void *ctx), void *ctx,
			int *pids, int max);
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
uint64_t session__clock_ns(int clockid);
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
