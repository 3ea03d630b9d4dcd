/* SPDX-License-Identifier: MIT */
/* One traced process: its mapped objects, the uprobes attached to them (through attach.h), and
 * what is known about its kernels (handle -> name, code address -> symbol). Objects are found in
 * /proc/<pid>/maps and opened through /proc/<pid>/root so processes in other mount
 * namespaces work; rescans pick up libraries loaded after attach. */
#ifndef TPTRACE_TARGET_H
#define TPTRACE_TARGET_H

#include <stdbool.h>
#include <stdint.h>
#include "attach.h"
#include "hashmap.h"

struct bpf_program;
struct bpf_link;
struct elfsym_cache;
struct procmaps;

enum probe_class {
	PROBE_CUDA_ALL = 1,	/* every CUDA runtime API of cuda_api.c (tracing) */
	PROBE_CUDA_SYNC = 2,	/* events and syncs only (flight recorder: GPU-side progress) */
	PROBE_NCCL = 4,		/* every NCCL API of nccl_api.c, entry and return */
};

struct target_probes {
	struct bpf_program *entry;	/* generic entry program (cookie-driven) */
	struct bpf_program *ret;	/* generic return program */
	struct bpf_program *dl_hook;	/* _dl_debug_state */
	/* uprobe_multi flavours (kernel >= 6.6), NULL when unavailable: one link per object */
	struct bpf_program *entry_multi, *ret_multi, *dl_hook_multi;
	/* entry and return in one program on session links (kernel >= 6.13; tptrace fr -a),
	 * used instead of entry_multi/ret_multi; NULL: none */
	struct bpf_program *session;
	bool all_returns;		/* --durations: return probes on every API */
	/* tptrace fr -a: objects probed for every process already (target__add_file) are left
	 * alone by target__scan; NULL: none */
	bool (*covered)(void *ctx, uint64_t dev, uint64_t ino);
	void *covered_ctx;
	unsigned classes;		/* enum probe_class bits; 0 means PROBE_CUDA_ALL */
};

struct target_obj {
	uint64_t dev, ino;
	char *path;		/* path as the target sees it */
	char *open_path;	/* path we opened (/proc/<pid>/root/... or map_files) */
	struct elfsym *es;	/* owned by the cache; NULL if not ELF */
	uint64_t bias;		/* runtime address = bias + symbol vaddr */
	bool bias_known;
	bool cudart;		/* holds a CUDA runtime (shared or static) */
	bool cudart_shared;	/* is a shared libcudart: all of its code is the runtime */
	bool driver;		/* the CUDA driver, libcuda.so.1 */
	bool nccl;		/* holds NCCL */
	bool ld_so;		/* the dynamic linker */
	int nr_probes;
};

/* One traced process; its fields are target.c's, read through the functions below. */
struct target;

/* What target__new read from /proc: the pid, comm ("" when unreadable), the command line
 * (NULL when unreadable), the job's ranks from the environment (-1 when not set) and
 * PYTORCH_CUDA_ALLOC_CONF (or PYTORCH_ALLOC_CONF; NULL if unset). Strings live as long as
 * the target. */
int target__pid(const struct target *t);
const char *target__comm(const struct target *t);
const char *target__cmdline(const struct target *t);
int target__rank(const struct target *t);
int target__world_size(const struct target *t);
int target__local_rank(const struct target *t);
const char *target__alloc_conf(const struct target *t);
/* The process's maps as of the last scan; NULL before the first. */
struct procmaps *target__maps(const struct target *t);
/* The objects scanned so far, in the order they were found (an index stays valid as more
 * are found; the pointer is valid until the next scan). */
int target__nr_objs(const struct target *t);
const struct target_obj *target__obj(const struct target *t, int i);
/* What the scans attached: uprobes (entry + return), objects holding a CUDA runtime, NCCL,
 * the CUDA driver, and probes that failed to attach. */
struct target_counts {
	int probes;
	int cudart;
	int nccl;
	int driver;
	int attach_errors;
};
void target__counts(const struct target *t, struct target_counts *out);
/* The process's exit as the exit tracepoint saw it: wait status (-1 unknown) and time (0:
 * not given). */
void target__set_exit(struct target *t, int exit_code, uint64_t exit_ns);
/* The process replaced its image (exec): this target is over at ns. */
void target__end(struct target *t, uint64_t ns);
/* Whether the target was seen gone (target__gone or target__end), without asking again. */
bool target__exited(const struct target *t);
int target__exit_code(const struct target *t);	/* wait status, -1 unknown */

/* Opens the pid (no attach yet). NULL and errno: ESRCH no such process, EACCES. */
struct target *target__new(int pid);
void target__free(struct target *t);
/* target__free of n targets, their probes removed together first (removals wait for grace
 * periods; one target after another, a recorder of many processes took seconds to stop). */
void target__free_all(struct target **ts, int n);

/* Reads maps, attaches probes to every new object holding a CUDA runtime and to the dynamic
 * linker's r_brk, and reads pre-existing kernel handles. Returns the number of new uprobes
 * (>= 0) or a negative errno (ESRCH when the process is gone). Errors attaching a single
 * probe are counted in attach_errors and reported with -v. */
int target__scan(struct target *t, struct elfsym_cache *cache, const struct target_probes *p);

/* tptrace fr -a: a pseudo-target (pid -1) whose objects are library files probed for every
 * process that maps them, now and later (one uprobe per inode). */
struct target *target__new_global(void);
/* Adds the file dev:ino (path as a process sees it, open_path openable here) to a global target
 * and attaches what it holds (NCCL, a shared CUDA runtime, the driver) system-wide. Probes
 * attached (0: nothing to probe in it), -EEXIST when known, or a negative errno. */
int target__add_file(struct target *t, struct elfsym_cache *cache, const struct target_probes *p,
		     const char *path, const char *open_path, uint64_t dev, uint64_t ino);

/* Kernel name for a code address in the target (a stub or a function pointer): demangled,
 * NULL if unknown. The string lives as long as the target. */
const char *target__symbolize(struct target *t, uint64_t addr);
/* The function holding a code address (stack frames). */
struct target_sym {
	const struct target_obj *obj;	/* the object mapping addr */
	const char *name;		/* demangled function, NULL when no symbol covers addr */
	uint64_t offset;		/* addr - the function's start (valid with name) */
};
/* 0, or -ENOENT when addr lies in no object the target scanned (sym->obj NULL). Strings live
 * as long as the target. */
int target__sym_at(struct target *t, uint64_t addr, struct target_sym *sym);
/* Runtime address of a function of the target's NCCL library. 0 or -ENOENT. */
int target__nccl_func(struct target *t, const char *name, uint64_t *addr);
/* Whether a code address lies inside a CUDA runtime: anywhere in a shared libcudart, or, in
 * an object with a static cudart (an nvcc binary, libnccl.so.2), in one of its functions
 * (cuda*, __cuda*, libcudart_static_<hash>). A driver call returning there is nested in a
 * runtime call. */
bool target__addr_in_cudart(struct target *t, uint64_t addr);
/* Whether a code address lies in a library holding NCCL (a call made by NCCL itself). */
bool target__addr_in_nccl(struct target *t, uint64_t addr);
/* The nested-call rule, one for every sink of bpf/cuda.h records (the trace writer, the
 * flight recorder): who made a driver call, as its return address (rec->stack[0]) tells. A
 * runtime call that made a driver call (cudaLaunchKernel -> cuLaunchKernel) is the call the
 * program made: the driver call is part of it. Not a driver call, or a return address that
 * could not be read (TP_CALL_STACK_FAULT): CALL_OWN. bpf/mem.bpf.c decides the same question
 * in the kernel for the memory APIs (its twin; see there). */
enum call_nesting {
	CALL_OWN,		/* made by the program (or by code none of the below) */
	CALL_IN_RUNTIME,	/* a driver call made by a CUDA runtime (target__addr_in_cudart) */
	CALL_IN_NCCL,		/* a driver call made by NCCL's own code */
};
struct tp_rec_call;
enum call_nesting target__call_nesting(struct target *t, const struct tp_rec_call *rec);
/* The kernel whose nvcc device stub contains addr (a return address), NULL otherwise. */
const char *target__stub_kernel(struct target *t, uint64_t addr);
/* Name for a CUDA 13 kernel handle, NULL if unknown; *source says how it was learned. */
const char *target__handle_name(struct target *t, uint64_t handle, const char **source);
void target__set_handle(struct target *t, uint64_t handle, const char *name, const char *source);
/* The kernel a launch runs (see target.c for the order names are tried in). */
struct cuda_launch;
struct kernel_name {
	const char *name;	/* NULL: unknown; lives as long as the target */
	const char *source;	/* how it was learned: "getkernel", "static", "symbol", "caller" */
	uint64_t func;		/* the launch passed a host function: its address */
	uint64_t handle;	/* the launch passed a cudaKernel_t: the handle */
};
void target__kernel_name(struct target *t, struct elfsym_cache *cache,
			 const struct cuda_launch *l, uint64_t now_ns, struct kernel_name *out);

/* True when the process is gone (pidfd readable or kill(pid,0) == ESRCH). */
bool target__gone(struct target *t);

#endif
