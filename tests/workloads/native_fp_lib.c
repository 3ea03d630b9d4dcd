// SPDX-License-Identifier: MIT
/* libnfp_fp.so, built with -fno-omit-frame-pointer: fp_a, fp_vla, fp_c and the probed function.
 *
 * How the entry state is reproduced: nfp_probed is a naked assembly function. At its first
 * instruction, as at a uprobe on it, [rsp] is the return address into its caller and rbp is
 * still the caller's register. It hands its own address, [rsp] and rbp to nfp_walk with a
 * jmp (not a call), so no frame of ours lies between the state captured and the caller's
 * frames, and nfp_walk then follows rbp exactly as bpf/ustack.bpf.h does: native[0] = ip,
 * native[1] = [rsp], native[k+1] = [rbp+8], rbp = [rbp], while rbp stays in this thread's
 * stack and below the depth limit. nfp_walk prints the addresses and waits for a line on
 * stdin before returning (straight into the caller of nfp_probed), so a test can resolve
 * them, and look at the live stack with eu-stack, while every frame still exists. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "native_fp.h"

__attribute__((visibility("hidden"), used))
void nfp_walk(void *unused, uint64_t ip, uint64_t ret, uint64_t rbp);

__asm__(
	".text\n"
	".globl nfp_probed\n"
	".type nfp_probed, @function\n"
	"nfp_probed:\n"
	".Lnfp_probed:\n"
	"	movq (%rsp), %rdx\n"		/* [rsp]: the return address */
	"	leaq .Lnfp_probed(%rip), %rsi\n"	/* the probed function's address: the uprobe's ip */
	"	movq %rbp, %rcx\n"		/* rbp as found on entry */
	"	jmp nfp_walk\n"
	".size nfp_probed, .-nfp_probed\n");

void nfp_walk(void *unused __attribute__((unused)), uint64_t ip, uint64_t ret, uint64_t rbp)
{
	uint64_t pcs[NFP_MAX_FRAMES], lo = 0, hi = 0;
	unsigned flags = 0;
	pthread_attr_t attr;
	char line[64];
	void *addr;
	size_t size;
	int n = 0;

	if (!pthread_getattr_np(pthread_self(), &attr)) {
		if (!pthread_attr_getstack(&attr, &addr, &size)) {
			lo = (uintptr_t)addr;
			hi = lo + size;
		}
		pthread_attr_destroy(&attr);
	}
	pcs[n++] = ip;
	pcs[n++] = ret;
	for (;;) {
		if (rbp < lo || rbp + 16 > hi || rbp & 7) {
			flags |= NFP_LEFT_STACK;
			break;
		}
		if (n == NFP_MAX_FRAMES) {
			flags |= NFP_TRUNCATED;
			break;
		}
		pcs[n++] = ((uint64_t *)rbp)[1];
		rbp = ((uint64_t *)rbp)[0];
	}
	printf("# PCS 0x%x %d", flags, n);
	for (int i = 0; i < n; i++)
		printf(" 0x%llx", (unsigned long long)pcs[i]);
	printf("\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		exit(2);
}

/* Each calls the next and uses the result, so no call becomes a tail jump. */
static volatile int sink;

__attribute__((noinline)) int fp_c(int n)
{
	nfp_probed();
	return sink + n;
}

/* A VLA: GCC schedules argument arithmetic between push %rbp and mov %rsp,%rbp here, the
 * prologue shape the recogniser must accept (the test checks the bytes say so). */
__attribute__((noinline)) int fp_vla(int n)
{
	char buf[n];

	memset(buf, n, n);
	return fp_c(buf[n - 1]) + 1;
}

/* Shrink-wrapped: GCC tests n before push %rbp (the early exit needs no frame), so the
 * prologue is not at the entry and only the CFI says rbp is the frame pointer at the call
 * (the test checks the bytes still start that way). */
__attribute__((noinline)) int fp_shrink(int n)
{
	if (n < 0)
		return -1;
	return fp_vla(n) + 1;
}

__attribute__((noinline)) int fp_a(int path, int depth)
{
	int r;

	if (path == NFP_VIA_NOFP)
		r = nofp_b(depth);
	else if (path == NFP_ALL_FP)
		r = fp_shrink(depth);
	else if (path == NFP_VIA_STRIPPED)
		r = strip_entry(depth);
	else
		r = bare_entry(depth);
	return r + 1;
}
