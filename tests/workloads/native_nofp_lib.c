// SPDX-License-Identifier: MIT
/* libnfp_nofp.so, built with -fomit-frame-pointer: nofp_b keeps rbp untouched, so at the call
 * in fp_c the rbp chain still starts from fp_a's frame: the raw walk skips fp_a. */
#include "native_fp.h"

static volatile int sink;

__attribute__((noinline)) int nofp_b(int n)
{
	return fp_c(n + sink) + 2;
}
