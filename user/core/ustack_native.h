/* SPDX-License-Identifier: MIT */
/* Native frames of a BPF-captured user stack (bpf/ustack.h tp_ustack.native[]), resolved in
 * user space: module, ELF address and demangled symbol of each return address, and where the
 * frame-pointer chain stops being trustworthy.
 *
 * The BPF walker runs at a uprobe on a function's first instruction: native[0] is that
 * function's address, native[1] the return address at [rsp] (into its caller F1), then
 * native[k+1] = [rbp_k + 8], rbp_{k+1} = [rbp_k], starting from the rbp the probed function
 * found on entry. rbp_k is F_k's frame base only if F_1..F_k all set up a frame pointer: past
 * a function without one, the chain silently skips frames (rbp still holds an older caller's
 * value) or wanders into garbage. So frame k >= 2 is kept only when rbp was the frame pointer
 * at each call holding native[1..k-1]. That is decided
 *   1. once per (file, function) from the function's first bytes in the ELF file (not the
 *      target's memory: a uprobe there has replaced the first byte with int3): [endbr64]
 *      push %rbp ... mov %rsp,%rbp (native_prologue_sets_fp);
 *   2. where that says no, or no symbol names the function, once per address from the CFI
 *      (.eh_frame) at the call: CFA = rbp + 16 with rbp saved at CFA - 16. This keeps
 *      shrink-wrapped functions (an argument tested before push %rbp: 22% of GCC's and 8%
 *      of Clang's frame-pointer functions in our own tree at -O2), GCC's "name.cold" parts
 *      (no prologue of their own) and nameless functions in stripped files.
 * The first call that fails both ends the kept frames, and *stop says where and why. */
#ifndef TPTRACE_USTACK_NATIVE_H
#define TPTRACE_USTACK_NATIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ustack.h"

struct native_resolver;
struct elfsym_cache;

/* cache: the session's ELF symbol cache, so a big library is parsed once for every user;
 * NULL: the resolver keeps its own. NULL and errno on ENOMEM. */
struct native_resolver *native_resolver__new(struct elfsym_cache *cache);
void native_resolver__free(struct native_resolver *r);

/* Drops what is cached for pid (its mappings and resolved addresses): on exec, on exit once
 * its stacks are written. Strings handed out for pid are invalid afterwards. */
void native_resolver__forget(struct native_resolver *r, int pid);

/* pcs: tp_ustack.native[0..n-1] of a stack of pid (innermost first); flags: tp_ustack.flags.
 * Fills out[0..ret-1] (out holds n entries): func = demangled symbol or NULL (no symbol
 * covers the address), file = the module's path as the target sees it, pc, module_off = the
 * ELF virtual address of pc in that module; the Python fields are zeroed.
 * Returns the number of frames kept, or a negative errno (-ESRCH: pid's mappings could not be
 * read; -EINVAL). *stop: why the kept frames end there, e.g.
 *   "no frame pointer in libfoo.so (bar)"			(the CFI says so at the call)
 *   "no frame pointer in libc.so.6+0x2724a (no symbol)"
 *   "no frame-pointer prologue in libfoo.so (bar)"		(and no CFI covers the call)
 *   "no symbol covers libfoo.so+0x1120: cannot tell whether it keeps a frame pointer"
 *   "0x7f.. is in anonymous executable memory (JIT code?): no symbols tell whether ..."
 *   "return address 0x10 outside any executable mapping"
 *   "the frame-pointer chain left the thread's stack"
 *   "more than 32 native frames: cut at the depth limit"
 * or NULL when the chain reached the thread's first function (its CFI leaves the return
 * address undefined, as _start's and clone3's do; or by name) or the walker ended without a
 * flag. Strings (func, file, *stop) are owned by r: valid until
 * native_resolver__forget(pid) or native_resolver__free. An address seen before costs one
 * hash lookup: everything is cached per (pid, address) and per (file, function). */
int native_resolver__resolve(struct native_resolver *r, int pid, const uint64_t *pcs, int n,
			     uint32_t flags, struct ustack_frame *out, const char **stop);

/* Counters for the metadata and tests. */
struct native_resolver_stats {
	uint64_t functions_checked;	/* prologues read from files */
	uint64_t functions_with_fp;	/* ... of which set up a frame pointer */
	uint64_t cfi_checked;		/* addresses whose CFI was read (no prologue; the last) */
	uint64_t cfi_with_fp;		/* ... of which the CFI says rbp is the frame pointer */
	uint64_t cfi_ends;		/* ... of which the CFI marks the thread's first frame */
	uint64_t maps_reads;		/* /proc/<pid>/maps (re)reads */
};
const struct native_resolver_stats *native_resolver__stats(const struct native_resolver *r);

/* Whether code (a function's first len bytes, x86-64) sets up a frame pointer on entry:
 * [endbr64] push %rbp, then mov %rsp,%rbp, with at most a few instructions between them that
 * neither move rsp nor write rbp (GCC schedules argument moves there). Anything this does not
 * recognise is "no": a missed frame pointer ends the stack early, a wrongly assumed one would
 * give wrong frames. */
bool native_prologue_sets_fp(const uint8_t *code, size_t len);

#endif
