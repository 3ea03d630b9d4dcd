// SPDX-License-Identifier: MIT
/* libnfp_strip.so: frame pointers, but stripped (strip -s): strip_hidden has no symbol, its
 * .eh_frame entry remains. Built with -DNFP_BARE as libnfp_bare.so: no unwind tables either. */
#include "native_fp.h"

#ifdef NFP_BARE
#define strip_entry bare_entry
#endif

static volatile int sink;

__attribute__((noinline)) static int strip_hidden(int n)
{
	nfp_probed();
	return sink + n;
}

__attribute__((noinline)) int strip_entry(int n)
{
	return strip_hidden(n) + 3;
}
