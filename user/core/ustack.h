/* SPDX-License-Identifier: MIT */
/* User stacks of probed calls (--py-stacks), resolved in user space. The BPF side
 * (bpf/ustack.bpf.h, included by bpf/cuda.bpf.c and bpf/mem.bpf.c) stores each distinct stack
 * once in its object's "ustacks" map and puts the stack's id in every record; this module
 * fills the per-process layout ("ustack_procs", from user/pyframes) and turns ids into
 * frames: Python code objects into function, file and line (read from the target's memory,
 * cached per (pid, code object)), native return addresses into module + symbol (elfsym),
 * cached per id, so an event whose stack was seen before costs one hash lookup.
 *
 * Never a wrong line: a code object that is gone by the time it is read (freed, not a code
 * object any more) gives an unresolved frame (func NULL, unresolved set), not a guess. */
#ifndef TPTRACE_USTACK_USER_H
#define TPTRACE_USTACK_USER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ustacks.h"	/* bpf/ustacks.h: the map layout, status ids, flags */

struct ustacks;

struct ustack_frame {
	const char *func;	/* Python: co_qualname (co_name before 3.11); native: symbol;
				 * NULL when unresolved / no symbol covers pc */
	const char *file;	/* Python: co_filename; native: the module's path */
	int line;		/* Python: line of the instruction; 0 unknown */
	int firstlineno;	/* Python: co_firstlineno (Kineto's python_function name) */
	uint64_t code;		/* Python: the code object's address (identity within pid) */
	uint64_t pc;		/* native: absolute address */
	uint64_t module_off;	/* native: pc as an ELF address of the module */
	bool unresolved;	/* Python: the code object could not be read (freed) */
};

struct ustack {
	uint64_t id;
	int pid;
	int nr_py;		/* Python frames, innermost first */
	struct ustack_frame *py;
	int nr_native;		/* native frames, innermost first (0 when not captured) */
	struct ustack_frame *native;
	uint32_t flags;		/* bpf/ustacks.h enum tp_ustack_flags */
	const char *native_stop;	/* why the native frames end where they end: NULL (the
					 * chain reached its end), or e.g. "no frame pointer in
					 * libfoo.so (bar)"; owned by the ustacks */
};

struct ustack_stats {
	uint64_t resolved;	/* distinct stacks resolved */
	uint64_t map_misses;	/* ids not (or no longer) in the map */
	uint64_t unresolved_frames;	/* Python frames whose code object could not be read */
};

/* stacks_fd, procs_fd, counters_fd: the BPF object's "ustacks", "ustack_procs" and
 * "ustack_counters" maps. native: capture native frames too (tp_ustack_config.native). */
struct ustacks *ustacks__new(int stacks_fd, int procs_fd, int counters_fd, bool native);
void ustacks__free(struct ustacks *u);
/* The object's ustack_code_free program: add_pid attaches it to each process's code object
 * deallocator, so that stacks made after a code object was freed get new ids (bpf/ustacks.h
 * code_gen). Without it, a code object freed and another made at its address while the same
 * stack ids repeat could be named by the old one's resolution. */
struct bpf_program;
void ustacks__set_code_free_prog(struct ustacks *u, struct bpf_program *prog);

/* Sets up capture for pid. 0: its Python was found (version in *python, owned by u);
 * otherwise a negative errno and one line in why (e.g. "no CPython in the process",
 * "Python 3.8.18: unsupported (3.9-3.13)"); native frames are still captured when asked,
 * and its events carry TP_USTACK_NONE (traced as without --py-stacks). Calling it again for the same pid (after an exec)
 * reads the interpreter anew and forgets the pid's cached stacks. */
int ustacks__add_pid(struct ustacks *u, int pid, const char **python, char *why, size_t whysz);
/* For the trace's / dump's metadata: the Python version ("3.11.7") of pid, NULL when none;
 * why its Python frames are missing (the add_pid line), NULL when they are captured. */
const char *ustacks__python(const struct ustacks *u, int pid);
const char *ustacks__why(const struct ustacks *u, int pid);
/* The BPF side's counters (enum tp_ustack_counter), summed over CPUs: 0 or a negative errno
 * (then the count is unknown, never 0). */
int ustacks__counter(const struct ustacks *u, int idx, uint64_t *out);

/* The stack of id (a record's ustack field) in pid; NULL for a status id (< 16) or when the
 * id is not in the map. Owned by u, valid until ustacks__free or remove_pid. */
const struct ustack *ustacks__get(struct ustacks *u, int pid, uint64_t id);

/* How sinks look stacks up (decode.c, flightrec.c, memtrace.c): ustacks__get with ctx = the
 * struct ustacks, or a test's own table. */
typedef const struct ustack *(*ustack_lookup_fn)(void *ctx, int pid, uint64_t id);
/* ustacks__get as a ustack_lookup_fn (ctx: the struct ustacks). */
const struct ustack *ustacks__lookup(void *ctx, int pid, uint64_t id);

/* What a status id means, for the trace's metadata: "no Python thread state", ... */
const char *ustacks__status_name(uint64_t id);
/* Why a status id has no frames, as a sentence ("frames_missing" of flight-recorder entries). */
const char *ustacks__status_why(uint64_t id);

/* The `stack` arg of an event, one line: the innermost USTACK_COMPACT_FRAMES Python frames,
 * innermost first, as "basename:line func < basename:line func < ...(N more)" (unresolved:
 * "<unresolved code 0x...>"), "<no Python thread state>" when the thread has none, then the
 * innermost native frames after " | " (symbol, else module+0xoff, else the address).
 * Returns the length it needed (snprintf). */
#define USTACK_COMPACT_FRAMES 6
int ustack__compact(const struct ustack *s, char *buf, size_t size);

const struct ustack_stats *ustacks__stats(const struct ustacks *u);

#endif
