/* SPDX-License-Identifier: MIT */
/* Pending uretprobe returns of a process's threads, read by the iter/task program in
 * bpf/uretinst.bpf.c for user/stacks/uretinst.c (whoever placed the probes: the kernel keeps one
 * list per thread, task->utask->return_instances, newest first).
 *
 * While a return probe is pending, the word at the probed function's entry SP (its return
 * address slot) holds the address of the [uprobes] trampoline instead of the caller's
 * address; each instance keeps the slot (`stack`) and the original word (`orig_ret_vaddr`).
 * An unwinder that reads the trampoline from a slot substitutes the original.
 *
 * The iterator writes, for every thread of the iterated tasks whose mm has a [uprobes]
 * area, one uretinst_thread record followed by its uretinst_inst records (head first, in
 * one pass over the list), then a uretinst_thread record of type URETINST_CUT when the list
 * went on past URETINST_MAX. Records are fixed size and start with a type tag.
 * __u32/__u64 only. */
#ifndef TPTRACE_URETINST_H
#define TPTRACE_URETINST_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* The kernel stops pushing instances at MAX_URETPROBE_DEPTH (64); stale ones (left by a
 * longjmp) are dropped at the next push, so a list is never much longer. Past this many
 * the thread record says `cut`. */
#define URETINST_MAX	96

enum uretinst_type {
	URETINST_THREAD = 1,
	URETINST_INST = 2,
	URETINST_CUT = 3,	/* a uretinst_thread: the thread's list was cut here */
};

struct uretinst_thread {
	__u32 type;		/* URETINST_THREAD, URETINST_CUT */
	__u32 tid;
	__u32 tgid;
	__u32 depth;		/* utask->depth: pending instances by the kernel's count */
	__u64 xol_vaddr;	/* mm->uprobes_state.xol_area->vaddr: slot 0 is the trampoline */
};

struct uretinst_inst {
	__u32 type;		/* URETINST_INST */
	__u32 tid;
	__u64 func;		/* the probed function's entry address */
	__u64 stack;		/* its entry SP: the address of the hijacked return slot */
	__u64 orig_ret_vaddr;	/* the word the trampoline replaced there */
	__u32 chained;		/* 1: the slot already held the trampoline at entry (a tail
				 * call into another probed function): one return through the
				 * slot consumes this instance and the ones below it up to the
				 * first unchained one */
	__u32 pad;
};

#endif
