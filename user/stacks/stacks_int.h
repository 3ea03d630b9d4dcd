/* SPDX-License-Identifier: MIT */
/* Internals shared by the snapshot's three files:
 *   stacks.c         one snapshot: /proc per thread, ptrace stop/detach per sample, progress
 *   stacks_unwind.c  native frames of a stopped thread (libdwfl), symbolized
 *   stacks_class.c   Python merge, classification (where/api/issuing), names, JSON */
#ifndef TPTRACE_STACKS_INT_H
#define TPTRACE_STACKS_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "hashmap.h"
#include "stacks.h"

struct py_frame;

/* Interned strings owned by one snapshot: module paths and names repeat in every frame. */
struct strpool {
	char **strs;
	int nr, cap;
	struct u64map index;	/* hash of the string -> index + 1 of its first copy */
};

const char *strpool__add(struct strpool *pool, const char *s);	/* NULL in: NULL out; ENOMEM: NULL */
const char *strpool__addf(struct strpool *pool, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void strpool__free(struct strpool *pool);

/* Which exported entry point a native frame's symbol is (classification needs the raw ELF
 * symbol: binding, type, mangled name; the frame keeps only the demangled name). */
enum frame_api {
	FRAME_API_NONE,
	FRAME_API_NCCL,		/* global FUNC nccl* / pnccl* in libnccl* */
	FRAME_API_CUDA,		/* global FUNC cuda* in libcudart*, or in the executable (static) */
	FRAME_API_DRIVER,	/* global FUNC cu* in libcuda.so* */
};

/* Native frames of one thread as the unwinder gives them, innermost first. */
struct native_stack {
	struct stack_frame *frames;
	uint8_t *api;		/* enum frame_api per frame */
	int nr;
	bool truncated;
	const char *err;	/* interned: why the unwind stopped early or failed */
};

/* libdwfl session of one process, kept for every sample of a snapshot (reporting the modules
 * is the slow part). Modules are reported from /proc/PID/maps; ELF files are opened through
 * /proc/PID/root, else /proc/PID/map_files, so containers and deleted files work. */
struct unwinder;
struct unwinder *unwinder__new(int pid, struct strpool *pool, char *err, size_t errsz);
void unwinder__free(struct unwinder *uw);
/* Unwinds tid, which the calling thread holds ptrace-stopped, into ns (max frames; ns->frames
 * and ns->api are allocated here and owned by the caller). 0, or a negative errno with
 * ns->err set; ns->nr frames are valid either way. */
int unwinder__thread(struct unwinder *uw, int tid, int max, struct native_stack *ns);
/* A new sample: the threads were stopped again, so the pending uretprobe returns read for
 * the last one are stale (they are read again when a trampoline is met). */
void unwinder__sample_begin(struct unwinder *uw);
/* Whether pc is in the uretprobe return trampoline of the process (reads the maps again,
 * once a sample, for a [uprobes] area created since). */
bool unwinder__in_trampoline(struct unwinder *uw, uint64_t pc);
/* Counts a thread stepped out of the trampoline before its unwind. */
void unwinder__stepped_out(struct unwinder *uw);

/* Return addresses replaced by uretprobe trampolines, over every sample so far. */
struct unwind_stats {
	int uret_reads;		/* reads of the pending return instances (one per sample at most) */
	uint64_t uret_ns;	/* time spent in them, the threads stopped */
	int instances;		/* pending return instances they held, summed */
	int resolved;		/* trampolines replaced by the original return address */
	int unrecoverable;	/* frames marked unrecoverable */
	int maps_rescans;	/* maps read again for a [uprobes] area created since */
	int stepped_out;	/* threads stopped in the trampoline, stepped out to their caller */
};
void unwinder__stats(const struct unwinder *uw, struct unwind_stats *st);

/* Merges py[0..npy) (innermost first, `entry` closing each eval-loop activation) into the
 * native frames: each group goes just inside (before) the next _PyEval_EvalFrame* native
 * frame, walking innermost -> outermost. Writes at most max frames to out (api to out_api,
 * 0 for Python frames) and returns the count. *truncated when max cut it; *no_eval when there
 * were Python frames but no eval frame (they then go first, innermost-first); *leftover when
 * more groups than eval frames (the rest go outermost). */
int stacks__merge_python(const struct stack_frame *native, const uint8_t *native_api, int nr_native,
			 const struct py_frame *py, int nr_py, struct strpool *pool,
			 struct stack_frame *out, uint8_t *out_api, int max,
			 bool *truncated, bool *no_eval, bool *leftover);

/* where and api of t from its merged frames (api per frame in api[]), its state and wchan. */
void stacks__classify(struct stack_thread *t, const uint8_t *api);
/* Marks exactly one thread of sp as issuing (stacks.h). */
void stacks__pick_issuing(struct stack_proc *sp);
/* Same frames (native: module + module_off; Python: func, file, line) and the same api. */
bool stacks__same_stack(const struct stack_frame *a, int nr_a, const char *api_a,
			const struct stack_frame *b, int nr_b, const char *api_b);

/* A blocking system call wrapper (futex, poll, nanosleep, read, pthread_cond_wait, ...). */
bool stacks__is_wait_func(const char *func);
/* A kernel wait channel of a thread sleeping in such a wait. */
bool stacks__is_wait_wchan(const char *wchan);

#endif
