/* SPDX-License-Identifier: MIT */
/* Records that cross the ring buffer from bpf/mem.bpf.c to user/mem/memtrace.c.
 * __u32/__u64 only; no vmlinux.h, no libc. Every record starts with a type tag. */
#ifndef TPTRACE_MEM_H
#define TPTRACE_MEM_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

enum mem_rec_type {
	MEM_REC_MALLOC = 1,	/* USDT pytorch:malloc(devPtr, device, size, stream) */
	MEM_REC_FREE = 2,	/* USDT pytorch:free(ptr) */
	MEM_REC_CALL = 3,	/* an allocation API (cudart or driver), entry and return in one */
};

/* The attach cookie of the generic uprobe pair (mem_entry/mem_return):
 *   bits  0..15  api id (index into memtrace.c's table)
 *   bit  16      runtime-level call: driver calls made inside it are its own implementation
 *                (cudaMalloc -> cuMemAlloc_v2) and are not recorded a second time
 *   bit  17      driver-level call: skipped while a runtime-level call is open on the thread
 *   bit  18      capture the user stack at entry (allocations)
 *   bits 20..22  1 + index of the out-pointer argument read at return (0: none)
 *   bits 24..26  1 + index of a pointer argument whose u64 at the offset below is copied at
 *                entry (cuMemCreate's prop->location.id: the device)
 *   bits 32..39  that offset in bytes
 */
#define MEM_COOKIE_API(c)	((__u32)((c) & 0xffff))
#define MEM_COOKIE_RUNTIME	(1ULL << 16)
#define MEM_COOKIE_DRIVER	(1ULL << 17)
#define MEM_COOKIE_STACK	(1ULL << 18)
#define MEM_COOKIE_OUT_ARG(c)	((__u32)(((c) >> 20) & 0x7))
#define MEM_COOKIE_DEREF_ARG(c)	((__u32)(((c) >> 24) & 0x7))
#define MEM_COOKIE_DEREF_OFF(c)	((__u32)(((c) >> 32) & 0xff))
#define MEM_COOKIE_OUT_SHIFT	20
#define MEM_COOKIE_DEREF_SHIFT	24
#define MEM_COOKIE_OFF_SHIFT	32

/* User stacks kept per allocation (bpf_get_stackid, BPF_F_USER_STACK). */
#define MEM_STACK_DEPTH		64

struct mem_rec_usdt {
	__u32 type;		/* MEM_REC_MALLOC or MEM_REC_FREE */
	__u32 pid;		/* tgid */
	__u32 tid;
	__s32 stack_id;		/* < 0: none (not captured, or the stack map was full) */
	__u64 ts;		/* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 ptr;
	__u64 device;		/* malloc: the raw argument (c10::Device: type | index << 8) */
	__u64 size;		/* malloc: bytes requested */
	__u64 stream;		/* malloc: the raw stream argument */
	__u64 ustack;		/* --py-stacks: the caller's stack id (bpf/ustacks.h), else 0 */
};

enum mem_call_flags {
	MEM_CALL_OUT_OK = 1,		/* out_val read from the out-pointer at return */
	MEM_CALL_DEREF_OK = 2,		/* deref_val read at entry */
};

struct mem_rec_call {
	__u32 type;		/* MEM_REC_CALL */
	__u16 api;
	__u16 flags;		/* enum mem_call_flags */
	__u32 pid;
	__u32 tid;
	__u64 ts_entry;
	__u64 ts_return;
	__u64 args[6];		/* rdi rsi rdx rcx r8 r9 at entry */
	__u64 rc;		/* rax at return */
	__u64 out_val;		/* *(u64 *)args[out] at return */
	__u64 deref_val;
	__s32 stack_id;
	__u32 pad;
	/* [rsp] at entry: the return address into the caller. A stack walked from a function's
	 * first instruction misses its caller (rbp is still the caller's frame) unless the
	 * kernel knows the function starts with push %rbp or endbr64. */
	__u64 caller;
	__u64 ustack;		/* --py-stacks: the caller's stack id (bpf/ustacks.h), else 0 */
};

/* Index of the per-CPU counters in the "mem_counters" map. */
enum mem_counter {
	MEM_CNT_DROPPED = 0,	/* bpf_ringbuf_reserve failed: the record is lost */
	MEM_CNT_NESTED = 1,	/* driver calls inside a runtime call, not recorded twice */
	MEM_CNT_ORPHAN = 2,	/* returns whose entry was not seen (attached mid-call) */
	MEM_CNT_STACK_FAIL = 3,	/* bpf_get_stackid failed (map full or collision) */
	MEM_CNT_MAX = 4,
};

#endif
