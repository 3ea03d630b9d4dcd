/* SPDX-License-Identifier: MIT */
/* Python frames of a running CPython 3.9-3.13 process, read from outside it with
 * process_vm_readv (shared/REFERENCE-2.md section 1): the interpreter is found in the
 * executable or in libpython3.X.so (static or shared; .PyRuntime section or _PyRuntime
 * symbol), its version from Py_Version or the version string, thread states by native thread
 * id (3.11+) or by pthread id = the thread's fs_base (3.9/3.10); frames walked per version
 * (3.13 through _Py_DebugOffsets), lines from each code object's line table. The caller keeps
 * the threads stopped while it reads (stacks.c does). */
#ifndef TPTRACE_PYFRAMES_H
#define TPTRACE_PYFRAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pyproc;

struct py_frame {
	const char *func;	/* co_qualname (3.11+) or co_name; owned by the pyproc */
	const char *file;	/* co_filename; owned by the pyproc */
	int line;		/* 0 unknown */
	bool entry;		/* the outermost Python frame of one eval-loop activation: the native
				 * _PyEval_EvalFrameDefault frame just outside it runs this frame
				 * and every frame inside it up to the previous entry frame */
};

/* NULL when pid runs no CPython (err "") or runs one we cannot read (err says why, e.g.
 * "Python 3.8.18: unsupported (3.9-3.13)"); strings in err are one line. */
struct pyproc *pyframes__open(int pid, char *err, size_t errsz);
void pyframes__free(struct pyproc *py);
const char *pyframes__version(const struct pyproc *py);	/* "3.11.7" */

/* The Python frames of thread tid, innermost first, at most max. fs_base is the thread's
 * (PTRACE_GETREGS) and is needed before 3.11 to match a thread state to tid; 0 when unknown.
 * Returns the count (0: the thread runs no Python code now), or -ENOENT when no thread state
 * belongs to tid, or another negative errno (-EFAULT: the memory moved under us). */
int pyframes__thread(struct pyproc *py, int tid, uint64_t fs_base, struct py_frame *out, int max);

/* Frames captured by the BPF walker (bpf/ustacks.h, --py-stacks). */
struct tp_ustack_config;
/* The layout for the walker: 0, or -EINVAL when it does not fit the walker's reads. */
int pyframes__bpf_config(const struct pyproc *py, struct tp_ustack_config *c);
/* One captured frame: its code object's address, raw instruction position and stamp as
 * tp_ustack.py[] holds them. 1: *out filled (firstlineno too, when not NULL); 0: a frame
 * CPython does not show (incomplete, a non-code executable); -EMEDIUMTYPE / -EFAULT: the
 * code object cannot be read now (freed), -ESTALE: another code object is there now (its
 * stamp differs): unresolved; -ESRCH: the process is gone. Code objects are cached and
 * checked again once after each pyframes__recheck(). */
int pyframes__resolve(struct pyproc *py, uint64_t code, uint64_t lasti, uint64_t stamp,
		      struct py_frame *out, int *firstlineno);
void pyframes__recheck(struct pyproc *py);
/* The address of the code type's deallocator (PyCode_Type.tp_dealloc) in the target: found
 * through the exported type object, so stripped interpreters have it too. 0 or -errno. */
int pyframes__code_dealloc(const struct pyproc *py, uint64_t *addr);

#endif
