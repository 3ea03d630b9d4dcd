/* SPDX-License-Identifier: MIT */
/* Hang snapshot of one running process: for every thread its state, kernel wait channel and
 * kernel stack (/proc), native frames unwound with CFI (elfutils libdwfl on ptrace-stopped
 * threads; .eh_frame/.debug_frame, so code without frame pointers unwinds), Python frames
 * (pyframes.h) merged in at the interpreter's eval-loop frames, and what the thread is doing:
 * inside which NCCL / CUDA runtime / driver API, in the allocator, in Python, idle in a wait.
 * Several samples tell a thread that makes no progress from one that does.
 *
 * The process is stopped as briefly as possible per sample (PTRACE_SEIZE + PTRACE_INTERRUPT
 * on every thread, registers and stacks read, PTRACE_DETACH): if tptrace dies mid-snapshot
 * the kernel detaches and the threads run on. Without ptrace rights, or with another tracer
 * attached, the snapshot degrades to what /proc gives (ptrace_err says why). A thread that
 * cannot be stopped (D state) is reported with its kernel stack, never waited on past
 * stop_timeout_ms. The schema of stacks__json() is in docs/fr-schema.md ("stacks"). */
#ifndef TPTRACE_STACKS_H
#define TPTRACE_STACKS_H

#include <stdbool.h>
#include <stdint.h>

struct cJSON;

enum stack_frame_kind { STACK_NATIVE, STACK_PYTHON };

/* Strings are owned by the snapshot and live until stacks__free(). */
struct stack_frame {
	enum stack_frame_kind kind;
	/* native */
	uint64_t pc;		/* absolute address in the target (a return address minus 1 for
				 * callers, as eu-stack looks them up) */
	const char *module;	/* path of the mapped object as the target sees it; NULL unknown */
	const char *build_id;	/* hex; "" when the object has none; NULL when it was not read */
	uint64_t module_off;	/* pc as an ELF virtual address of module (addr2line -e module);
				 * valid when build_id != NULL (the ELF file was read) */
	/* both: native demangled symbol or Python co_qualname (co_name before 3.11); NULL when
	 * no symbol covers pc (stripped: module + build_id + module_off identify it, no name is
	 * ever invented) */
	const char *func;
	uint64_t func_off;	/* native: pc - symbol start */
	/* Python */
	const char *file;	/* co_filename */
	int line;		/* 0 unknown */
	/* native: NULL, or why this return address could not be recovered ("uretprobe
	 * trampoline": a return probe replaced it and no pending return instance of the thread
	 * gave it back); pc is the address read, module/func NULL, and the stack ends here */
	const char *unrecoverable;
};

/* What a thread is doing, from its frames (outermost matching frame wins, in this order). */
enum stack_where {
	WHERE_UNKNOWN,		/* no frames could be read */
	WHERE_NCCL,		/* inside an exported NCCL entry point (api names it) */
	WHERE_CUDA,		/* inside a CUDA runtime API: libcudart or static cudart (api) */
	WHERE_DRIVER,		/* inside a CUDA driver API (libcuda.so.1, cu*) not under the above */
	WHERE_ALLOCATOR,	/* in PyTorch's CUDA caching allocator (c10::cuda::...Allocator) */
	WHERE_PYTHON,		/* running Python code (not blocked in any of the above) */
	WHERE_IDLE,		/* blocked in a wait (futex, poll, epoll, select, nanosleep, read...)
				 * outside all of the above */
	WHERE_RUNNING,		/* native code, running */
};

enum stack_progress {
	PROGRESS_UNKNOWN,	/* one sample, or the thread was not seen in every sample */
	PROGRESS_NONE,		/* the same frames and the same api in every sample */
	PROGRESS_YES,		/* the stack changed between samples */
};

struct stack_thread {
	int tid;
	char name[16];		/* /proc/PID/task/TID/comm */
	char state;		/* /proc state letter at the first sample: R S D T t Z; 0 unknown */
	char wchan[64];		/* kernel wait channel; "" when none or unreadable */
	const char **kstack;	/* /proc/PID/task/TID/stack function names, innermost first */
	int nr_kstack;		/* -1: unreadable (kstack_err says why) */
	const char *kstack_err;
	struct stack_frame *frames;	/* innermost first; Python frames merged in, each group
					 * just inside the _PyEval_EvalFrame* native frame running it */
	int nr_frames;
	bool truncated;		/* max_frames reached, or the unwind stopped early */
	const char *unwind_err;	/* NULL, or why native frames are missing or cut short */
	enum stack_where where;
	const char *api;	/* the API symbol for WHERE_NCCL/CUDA/DRIVER, else NULL */
	enum stack_progress progress;
	bool main;		/* tid == pid */
	bool issuing;		/* the thread that issues collectives: the one in NCCL/CUDA (the
				 * main thread first when several are), else the Python main
				 * thread, else the main thread; exactly one per process */
	bool python;		/* has a Python thread state */
};

struct stack_proc {
	int pid;
	char comm[16];
	char *cmdline;
	int rank, world_size, local_rank;	/* RANK, WORLD_SIZE, LOCAL_RANK; -1 unknown */
	uint64_t mono_ns;	/* CLOCK_MONOTONIC at the first sample */
	uint64_t real_ns;	/* CLOCK_REALTIME at the first sample */
	int samples;		/* samples taken (may be fewer than asked when it exited) */
	int interval_ms;
	uint64_t stopped_ns_max;	/* longest stop of the process for one sample */
	/* return addresses replaced by uretprobe trampolines (any tool's return probes) */
	int uret_resolved;	/* put back from the threads' pending return instances */
	int uret_unrecoverable;	/* frames marked unrecoverable */
	int uret_reads;		/* reads of the pending return instances, one per sample at most */
	int uret_instances;	/* instances those reads held, summed (a chained run is several
				 * instances for one slot) */
	uint64_t uret_read_ns;	/* their time, added to the stops */
	int uret_stepped_out;	/* threads stopped in the return trampoline, single-stepped out
				 * to the caller they were returning to before their unwind */
	const char *ptrace_err;	/* degraded to /proc only: why (NULL: frames were read) */
	const char *python;	/* "3.11.7"; NULL when the process runs no Python */
	const char *python_err;	/* Python found but its frames not read: why */
	bool exited;		/* the process exited during the snapshot */
	struct stack_thread *threads;	/* ordered by tid */
	int nr_threads;
};

struct stack_opts {
	int samples;		/* >= 1; 0 means 1 */
	int interval_ms;	/* between samples; 0 means 200 */
	int max_frames;		/* per thread; 0 means 128 */
	int stop_timeout_ms;	/* how long a thread may take to stop; 0 means 100 */
	bool no_python;		/* native frames only */
};

/* A snapshot of pid. NULL (errno set, one line in err) only when the process cannot be read at
 * all (ESRCH gone, EACCES); everything less is degraded inside the snapshot and said there. */
struct stack_proc *stacks__take(int pid, const struct stack_opts *opts, char *err, size_t errsz);
void stacks__free(struct stack_proc *sp);

/* The snapshot as JSON (docs/fr-schema.md "stacks"). NULL on ENOMEM. "taken" is written as
 * "request"; the flight recorder replaces it ("attach" / "dump"). */
struct cJSON *stacks__json(const struct stack_proc *sp);

const char *stacks__where_name(enum stack_where w);	/* "nccl", "cuda", ... "unknown" */
const char *stacks__progress_name(enum stack_progress p);	/* "none", "yes", "unknown" */

#endif
