// SPDX-License-Identifier: MIT
/* libnfp_strip.so: frame pointers, but stripped (strip -s): strip_hidden has no symbol. */
#include "native_fp.h"

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
