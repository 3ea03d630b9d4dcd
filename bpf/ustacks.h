/* SPDX-License-Identifier: MIT */
/* User stacks captured in BPF at a probed call (--py-stacks): the Python frames of the calling
 * thread (CPython 3.9-3.13, walked with the per-process layout in tp_ustack_config) and, when
 * asked, its native frames through frame pointers, bounded to the thread's stack so no read
 * can fault. A stack is stored once in the "ustacks" hash map, keyed by a hash of its
 * content; records carry only that 64-bit id (bpf/cuda.h tp_rec_call.ustack, bpf/mem.h).
 * User space (user/core/ustack.c) resolves code objects to function, file and line.
 * __u32/__u64 only; no vmlinux.h, no libc. */
#ifndef TPTRACE_USTACKS_H
#define TPTRACE_USTACKS_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define TP_PY_MAX_FRAMES	64	/* depth limit: deeper stacks are cut (TP_USTACK_PY_TRUNCATED),
					 * a looping or corrupt chain ends here too */
#define TP_NATIVE_MAX_FRAMES	32
#define TP_PY_FRAME_READ	112	/* bytes read per frame: the largest f_size (3.9/3.10) */
#define TP_PY_TSTATE_READ	192	/* bytes read per thread state: thread_id and frame */

/* Stack ids below TP_USTACK_FIRST_ID are statuses: nothing was stored in the map. */
enum tp_ustack_status {
	TP_USTACK_NONE = 0,	/* not captured (--py-stacks off, or the process is not set up) */
	TP_USTACK_NOPY = 1,	/* the thread has no Python thread state (a C++ thread) and no
				 * native frames were asked for */
	TP_USTACK_LOST = 2,	/* the stack map was full: the stack is lost (counted) */
	TP_USTACK_FAULT = 3,	/* the thread state or first frame could not be read */
	TP_USTACK_FIRST_ID = 16,
};

/* Per process (map "ustack_procs", key: tgid), written by user space from user/pyframes's
 * layout. Offsets are bytes into the structure named; -1 = absent in this version. */
struct tp_ustack_config {
	__u64 runtime;		/* &_PyRuntime; 0: no Python (native frames only) */
	__u64 code_gen;		/* code objects freed since setup: counted by a probe on the
				 * code type's deallocator (ustack_code_free) and part of every
				 * stack's hash, so a freed code object's address reused by
				 * another cannot give an old stack's id (and its resolution) */
	__s16 rt_interp_head;	/* _PyRuntime.interpreters.head */
	__s16 is_next;		/* PyInterpreterState.next */
	__s16 is_threads_head;	/* PyInterpreterState.threads.head */
	__s16 ts_next;		/* PyThreadState.next */
	__s16 ts_thread_id;	/* PyThreadState.thread_id: pthread_self() = the thread's fs_base */
	__s16 ts_frame;		/* ->frame (3.9/3.10), ->cframe (3.11/3.12), ->current_frame (3.13) */
	__s16 cf_current;	/* _PyCFrame.current_frame (3.11/3.12); -1: ts_frame is the frame */
	__s16 f_back;		/* f_back / previous */
	__s16 f_code;		/* f_code / f_executable */
	__s16 f_lasti;		/* f_lasti (int, 3.9/3.10) / prev_instr / instr_ptr (pointer) */
	__s16 f_owner;		/* _PyInterpreterFrame.owner (char); -1 before 3.11 */
	__s16 f_size;		/* bytes to read per frame, <= TP_PY_FRAME_READ */
	__s16 co_filename;	/* PyCodeObject.co_filename, co_firstlineno: the stamp below */
	__s16 co_firstlineno;
	__u8 lasti_is_ptr;	/* f_lasti holds a pointer (3.11+), else an int */
	__u8 skip_owner;	/* frames with this owner are not recorded (3.12+: 3, the C-stack
				 * shim of each eval-loop activation); 0 none */
	__u8 native;		/* also walk native frames through frame pointers */
	__u8 pad[7];
};

/* The value of the "ustacks" map. py[i] is innermost first: code object address, the raw
 * instruction position with the frame's owner in the top byte:
 *   lasti_is_ptr: (prev_instr or instr_ptr) & TP_PY_LASTI_MASK | owner << 56
 *   else: (__u32)f_lasti (may be -1 = 0xffffffff: not started)
 * and the code object's stamp, read when the stack was first stored:
 *   TP_PY_STAMP(co_filename pointer, co_firstlineno)
 * User space resolves a code object only if it still has that stamp: one freed and replaced
 * by another code object before user space read it gives an unresolved frame, not the other
 * function's name and line. (0: the stamp could not be read.)
 * native[i] innermost first: native[0] is the probed function's address (the uprobe's ip),
 * native[1] the return address at [rsp], then the frame-pointer chain's return addresses. */
#define TP_PY_LASTI_MASK	0x00ffffffffffffffULL
#define TP_PY_OWNER_SHIFT	56
#define TP_PY_STAMP(filename, firstlineno) \
	((__u64)(filename) ^ ((__u64)(__u32)(firstlineno) << 40) ^ 0x5bd1e995ULL)

enum tp_ustack_flags {
	TP_USTACK_PY_TRUNCATED = 1,	/* more than TP_PY_MAX_FRAMES Python frames (or a loop) */
	TP_USTACK_PY_FAULT = 2,		/* a frame could not be read: the walk stopped there */
	TP_USTACK_PY_NOSTATE = 4,	/* no Python thread state for this thread */
	TP_USTACK_NATIVE_TRUNCATED = 8,	/* more than TP_NATIVE_MAX_FRAMES native frames */
	TP_USTACK_NATIVE_LEFT_STACK = 16,	/* the frame-pointer chain left the thread's stack
						 * (a frame without frame pointer, or the end) */
	TP_USTACK_NATIVE_FAULT = 32,	/* a read inside the stack failed */
};

struct tp_ustack {
	__u32 pid;		/* tgid: part of the hashed content (addresses are per process) */
	__u16 nr_py;
	__u16 nr_native;
	__u32 flags;		/* enum tp_ustack_flags */
	__u32 code_gen;		/* the process's code_gen (low bits) when the stack was stored: user
				 * space reads code objects only while it has not moved since, as
				 * none of them can have been freed and replaced then */
	__u64 py[TP_PY_MAX_FRAMES][3];
	__u64 native[TP_NATIVE_MAX_FRAMES];
};

/* Index of per-CPU counters in the "ustack_counters" map. */
enum tp_ustack_counter {
	TP_USTACK_CNT_CAPTURED = 0,	/* events given a stack id */
	TP_USTACK_CNT_NEW = 1,		/* stacks stored (first sight) */
	TP_USTACK_CNT_LOST = 2,		/* stacks lost: the map was full */
	TP_USTACK_CNT_NOPY = 3,		/* events on threads without a Python thread state */
	TP_USTACK_CNT_WALKS = 4,	/* thread-state list walks (a thread not yet cached) */
	TP_USTACK_NR_COUNTERS,
};

#endif
