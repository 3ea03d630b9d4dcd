/* SPDX-License-Identifier: MIT */
/* The native-frames fixture (tests/unit/test_ustack_native.c): an executable and three shared
 * libraries built with different frame-pointer settings (tests/workloads/workloads.mk), calling
 * each other down to nfp_probed(), the function a uprobe would sit on. */
#ifndef TPTRACE_TESTS_NATIVE_FP_H
#define TPTRACE_TESTS_NATIVE_FP_H

#include <stdint.h>

#define NFP_MAX_FRAMES	32	/* bpf/ustack.h TP_NATIVE_MAX_FRAMES */
#define NFP_LEFT_STACK	16	/* bpf/ustack.h TP_USTACK_NATIVE_LEFT_STACK */
#define NFP_TRUNCATED	8	/* bpf/ustack.h TP_USTACK_NATIVE_TRUNCATED */

enum nfp_path {
	NFP_VIA_NOFP = 1,	/* fp_a -> nofp_b (libnfp_nofp.so, -fomit-frame-pointer) -> fp_c */
	NFP_ALL_FP = 2,		/* fp_a -> fp_shrink -> fp_vla -> fp_c: frame pointers all the way
				 * to main (fp_shrink's only after an early exit: CFI tells) */
	NFP_VIA_STRIPPED = 3,	/* strip_entry -> a static function of a stripped library that
				 * keeps its .eh_frame */
	NFP_VIA_BARE = 4,	/* bare_entry -> the same, stripped and without unwind tables */
};

/* libnfp_fp.so (-fno-omit-frame-pointer) */
int fp_a(int path, int depth);
int fp_shrink(int n);
int fp_vla(int n);
int fp_c(int n);
/* The probed function: written in assembly so that its first instruction sees exactly what
 * the uprobe sees (rsp at the return address, rbp still the caller's). It records the stack
 * as the BPF walker does, prints it, waits for a line on stdin, and returns. */
void nfp_probed(void);

/* libnfp_nofp.so (-fomit-frame-pointer) */
int nofp_b(int n);

/* libnfp_strip.so (-fno-omit-frame-pointer, then strip -s: .dynsym only) and libnfp_bare.so
 * (the same source without unwind tables: no .eh_frame either) */
int strip_entry(int n);
int bare_entry(int n);

#endif
