/* SPDX-License-Identifier: MIT */
/* Records that cross the ring buffer from bpf/cuda.bpf.c to user/ (calls.c, then decode.c or
 * flightrec.c).
 * __u32/__u64 only; no vmlinux.h, no libc. Every record starts with a type tag. */
#ifndef TPTRACE_CUDA_H
#define TPTRACE_CUDA_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

enum tp_rec_type {
	TP_REC_CALL = 1,	/* entry of a probed function */
	TP_REC_RET = 2,		/* return of a probed function */
	TP_REC_DLOPEN = 3,	/* the dynamic linker's r_brk (_dl_debug_state): maps changed */
	TP_REC_EXIT = 4,	/* the last thread of a watched process exited */
	/* tptrace fr -a only (fr_exec.c), read before the calls core sees the ring */
	TP_REC_MAP = 5,		/* a process mapped a libnccl/libcudart/libcuda file executable */
	TP_REC_EXEC = 6,	/* a recorded process called exec */
};

/* The attach cookie tells the one generic entry program what to copy, so the BPF side
 * stays free of per-API logic and user space decodes (see user/core/cuda_api.c):
 *   bits  0..15  api id (index into the user-side table)
 *   bits 16..19  stack qwords to copy from [rsp]: [rsp] is the return address, [rsp+8] the
 *                7th integer argument, ... (x86-64 SysV)
 *   bits 20..23  1 + index of the pointer argument whose target is copied to deref[]; 0 = none;
 *                TP_DEREF_STACK = copy from [rsp+8] (a struct passed by value in memory, e.g.
 *                ncclUniqueId)
 *   bits 24..31  bytes to copy from there (<= TP_DEREF_MAX)
 *   bit  32      copy the caller's return address [rbp+8] (frame-pointer builds put a
 *                static-inline launch helper between the kernel stub and cudart)
 *   bit  33      remember an out-pointer argument per thread; the return program copies the
 *                pointed-to u64 into out_val (__cudaGetKernel's handle, ncclCommInitRank's comm)
 *   bits 34..36  index of that out-pointer argument
 *   bit  37      the deref argument is a NUL-terminated string (cuModuleGetFunction's name):
 *                copied with bpf_probe_read_user_str, at most TP_DEREF_MAX bytes
 *   bit  38      the deref is a launch config (CUlaunchConfig / cudaLaunchConfig_t): also copy
 *                its attribute array (pointer at +40, count at +48), at most
 *                TP_LAUNCH_ATTRS_MAX entries, to deref[TP_LAUNCH_CONFIG_SIZE..]
 *   bit  39      session links only (cuda_session): the API's return is probed too
 */
#define TP_COOKIE_STACK_SHIFT	16
#define TP_COOKIE_DEREF_ARG_SHIFT 20
#define TP_COOKIE_DEREF_LEN_SHIFT 24
#define TP_COOKIE_API(c)	((__u32)((c) & 0xffff))
#define TP_COOKIE_STACK(c)	((__u32)(((c) >> TP_COOKIE_STACK_SHIFT) & 0xf))
#define TP_COOKIE_DEREF_ARG(c)	((__u32)(((c) >> TP_COOKIE_DEREF_ARG_SHIFT) & 0xf))
#define TP_COOKIE_DEREF_LEN(c)	((__u32)(((c) >> TP_COOKIE_DEREF_LEN_SHIFT) & 0xff))
/* builders for user space: arg is the 1-based deref argument field (TP_DEREF_STACK: [rsp+8]) */
#define TP_COOKIE_MAKE_STACK(n)		((__u64)(n) << TP_COOKIE_STACK_SHIFT)
#define TP_COOKIE_MAKE_DEREF(arg, len)	(((__u64)(arg) << TP_COOKIE_DEREF_ARG_SHIFT) | \
					 ((__u64)(len) << TP_COOKIE_DEREF_LEN_SHIFT))
#define TP_COOKIE_CALLER2	(1ULL << 32)
#define TP_COOKIE_SAVE_OUT	(1ULL << 33)
#define TP_COOKIE_OUT_ARG(c)	((__u32)(((c) >> 34) & 0x7))
#define TP_COOKIE_OUT_SHIFT	34
#define TP_COOKIE_DEREF_STR	(1ULL << 37)
#define TP_COOKIE_DEREF_ATTRS	(1ULL << 38)
#define TP_COOKIE_RET		(1ULL << 39)
#define TP_DEREF_STACK		7

/* CUlaunchConfig and cudaLaunchConfig_t share one layout (56 bytes, attrs pointer at +40,
 * numAttrs at +48), as do CUlaunchAttribute and cudaLaunchAttribute (72 bytes: id, pad, a
 * 64-byte value union). tests/unit/test_cuda_layout.c checks these against the toolkit. */
#define TP_LAUNCH_CONFIG_SIZE	56
#define TP_LAUNCH_CONFIG_ATTRS	40
#define TP_LAUNCH_CONFIG_NATTRS	48
#define TP_LAUNCH_ATTR_SIZE	72
#define TP_LAUNCH_ATTRS_MAX	3

#define TP_STACK_MAX	4
#define TP_DEREF_MAX	(TP_LAUNCH_CONFIG_SIZE + TP_LAUNCH_ATTRS_MAX * TP_LAUNCH_ATTR_SIZE)

struct tp_rec_call {
	__u32 type;		/* TP_REC_CALL */
	__u16 api;
	__u16 flags;		/* TP_CALL_* */
	__u32 pid;		/* tgid, init pid namespace */
	__u32 tid;
	__u64 ts;		/* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 args[6];		/* rdi rsi rdx rcx r8 r9 */
	__u64 stack[TP_STACK_MAX];	/* [rsp], [rsp+8], ... */
	__u64 caller2;		/* [rbp+8] when TP_COOKIE_CALLER2 and rbp points into the stack */
	__u64 ustack;		/* --py-stacks: the caller's stack id (bpf/ustacks.h), else 0 */
	__u8 deref[TP_DEREF_MAX];	/* present only in records of TP_REC_CALL_FULL_SIZE */
};

/* Calls that copy no pointed-to struct send the record without deref[]: smaller records
 * mean fewer ring bytes per call. */
#define TP_REC_CALL_SHORT_SIZE	(sizeof(struct tp_rec_call) - TP_DEREF_MAX)
#define TP_REC_CALL_FULL_SIZE	sizeof(struct tp_rec_call)

enum tp_call_flags {
	TP_CALL_STACK_FAULT = 1,	/* stack copy failed */
	TP_CALL_DEREF_FAULT = 2,	/* deref copy failed */
	TP_CALL_CALLER2_FAULT = 4,
	TP_CALL_ATTRS_FAULT = 8,	/* the launch attribute array could not be read */
};

struct tp_rec_ret {
	__u32 type;		/* TP_REC_RET */
	__u16 api;
	__u16 flags;		/* TP_RET_* */
	__u32 pid;
	__u32 tid;
	__u64 ts;
	__u64 rc;		/* rax */
	__u64 out_val;
};

enum tp_ret_flags {
	TP_RET_OUT_VALID = 1,	/* out_val holds the u64 the out-pointer argument points to */
};

struct tp_rec_dlopen {
	__u32 type;		/* TP_REC_DLOPEN */
	__u32 pid;
	__u32 tid;
	__u32 pad;
	__u64 ts;
};

struct tp_rec_exit {
	__u32 type;		/* TP_REC_EXIT */
	__u32 pid;
	__u32 tid;		/* the last thread to exit */
	__u32 exit_code;	/* wait status: code << 8, or the fatal signal in the low 7 bits */
	__u64 ts;
};

/* tptrace fr -a: a library the recorder probes was mapped PROT_EXEC (seen at the mmap
 * syscall's exit, so the mapping exists in /proc/PID/maps when user space reads it). */
#define TP_MAP_NAME_MAX	64
enum tp_map_kind {
	TP_MAP_NCCL = 1,	/* basename libnccl* */
	TP_MAP_CUDART = 2,	/* libcudart* */
	TP_MAP_DRIVER = 3,	/* libcuda.so* */
};

struct tp_rec_map {
	__u32 type;		/* TP_REC_MAP */
	__u32 pid;
	__u32 tid;
	__u32 kind;		/* enum tp_map_kind */
	__u64 ts;
	__u64 dev;		/* the kernel's dev_t: major << 20 | minor */
	__u64 ino;
	__u64 start;		/* the mapping's address */
	char name[TP_MAP_NAME_MAX];	/* basename, NUL-terminated */
};

struct tp_rec_exec {
	__u32 type;		/* TP_REC_EXEC */
	__u32 pid;
	__u64 ts;
};

/* Index of the per-CPU counters in the "counters" map; TP_NR_COUNTERS sizes the map. */
enum tp_counter {
	TP_CNT_DROPPED = 0,	/* bpf_ringbuf_reserve failed: the record is lost */
	TP_NR_COUNTERS,
};

#endif
