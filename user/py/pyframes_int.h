/* SPDX-License-Identifier: MIT */
/* Internals of user/pyframes*.c: the per-version layout, the pyproc, guarded reads.
 * pyframes_open.c finds the interpreter and its layout; pyframes.c walks threads and frames. */
#ifndef TPTRACE_PYFRAMES_INT_H
#define TPTRACE_PYFRAMES_INT_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "hashmap.h"
#include "pyframes.h"
#include "util.h"

#define MAX_FRAMES_WALKED	4096	/* a longer chain is a loop or garbage */
#define MAX_THREADS_WALKED	4096
#define MAX_INTERPRETERS	256
#define MAX_STR_BYTES		512	/* names and paths are cut there */
#define MAX_LINETABLE		(1 << 20)
#define TSTATE_CACHE_NS		20000000ULL	/* one burst of calls while the threads are stopped */

enum line_format { LNOTAB_39, LINETABLE_310, LOCATIONS_311 };
enum lasti_kind { LASTI_BYTES, LASTI_UNITS, LASTI_PREV_INSTR, LASTI_INSTR_PTR };

/* Owner values of _PyInterpreterFrame.owner (3.11+). */
#define OWNED_BY_GENERATOR	1
#define OWNED_BY_CSTACK		3	/* 3.12+: the shim frame each _PyEval_EvalFrameDefault pushes */

struct py_layout {
	int rt_interp_head;	/* _PyRuntime.interpreters.head */
	int is_next, is_threads_head;
	int ts_next, ts_thread_id, ts_native_tid;	/* native_thread_id: -1 before 3.11 */
	int ts_frame;		/* tstate->frame (3.9/3.10), ->cframe (3.11/3.12), ->current_frame */
	int cf_current;		/* _PyCFrame.current_frame; -1 when ts_frame is the frame itself */
	int f_back, f_code, f_lasti;	/* f_lasti: f_lasti / prev_instr / instr_ptr */
	int f_is_entry, f_owner;	/* -1 when absent */
	int f_size;		/* bytes read per frame */
	int co_firstlineno, co_filename, co_name, co_qualname, co_linetable;
	int co_code_adaptive, co_firsttraceable;	/* -1 before 3.11 */
	int co_size;		/* bytes read per code object header */
	int ob_type;
	int bytes_size, bytes_sval;	/* PyBytesObject ob_size, ob_sval */
	int str_length, str_state, str_ascii_size, str_compact_size;
	enum line_format lines;
	enum lasti_kind lasti;
};

struct code_info {
	uint64_t filename, name, linetable;	/* the pointers this entry was built from */
	int firstlineno, firsttraceable;
	uint64_t checked_gen;	/* the thread-state walk during which it was last checked */
	const char *func, *file;
	uint8_t *table;
	size_t table_len;
};

struct tstate_ref {
	uint64_t addr;
	uint64_t thread_id, native_tid;
};

struct pyproc {
	int pid;
	char version[32];
	int minor;
	struct py_layout L;
	uint64_t runtime;	/* &_PyRuntime in the target */
	uint64_t code_type;	/* &PyCode_Type; 0 unknown */
	struct u64map codes;	/* code object address -> struct code_info * */
	struct u64map strings;	/* fnv hash -> char * (interned, freed at the end) */
	struct u64map ns_tids;	/* our tid -> the tid in the target's pid namespace */
	char **extra_strings;	/* strings that collided in the map: kept until free */
	size_t nr_extra;
	struct tstate_ref *tstates;
	size_t nr_tstates;
	uint64_t tstates_at;	/* CLOCK_MONOTONIC ns of the walk, 0 never */
	uint64_t walk_gen;	/* counts walks: one per burst of calls while the target is stopped */
	uint64_t rewalked_gen;	/* the walk made after a miss: at most one per burst */
};

/* 0, -EFAULT on a short or failed read (unmapped, torn), -ESRCH when the process is gone,
 * -EPERM when we may not read it (ptrace access mode check). */
static inline int rd(const struct pyproc *py, uint64_t addr, void *buf, size_t len)
{
	struct iovec local = { buf, len }, remote = { (void *)(uintptr_t)addr, len };
	ssize_t n;

	if (!addr)
		return -EFAULT;
	n = process_vm_readv(py->pid, &local, 1, &remote, 1, 0);
	if (n == (ssize_t)len)
		return 0;
	if (n < 0 && (errno == ESRCH || errno == EPERM))
		return -errno;
	return -EFAULT;
}

static inline uint64_t u64_at(const uint8_t *buf, int off)
{
	uint64_t v;

	memcpy(&v, buf + off, sizeof(v));
	return v;
}

static inline int32_t i32_at(const uint8_t *buf, int off)
{
	int32_t v;

	memcpy(&v, buf + off, sizeof(v));
	return v;
}

/* The line of the instruction at byte offset addr of a code object (addr < 0: before the
 * first instruction), as PyCode_Addr2Line computes it from the line table; 0 unknown. */
int pyframes_line(enum line_format format, const uint8_t *table, size_t len, int firstlineno,
		  int addr);

#endif
