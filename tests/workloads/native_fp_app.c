// SPDX-License-Identifier: MIT
/* The native-frames fixture's executable (-fno-omit-frame-pointer -fcf-protection: endbr64
 * before push %rbp). After GO it walks main -> wl_outer -> wl_inner -> fp_a (libnfp_fp.so) and
 * on down each path of enum nfp_path in turn; each stops in nfp_probed, which prints
 * "# PCS <flags> <n> <pc>..." and waits for a line on stdin. */
#include "handshake.h"
#include "native_fp.h"

static volatile int sink;

__attribute__((noinline)) int wl_inner(int path)
{
	return fp_a(path, 8 + sink) + 1;
}

__attribute__((noinline)) int wl_outer(int path)
{
	return wl_inner(path) + 1;
}

int main(void)
{
	hs_ready_wait_go();
	for (int path = NFP_VIA_NOFP; path <= NFP_VIA_BARE; path++)
		sink += wl_outer(path);
	hs_done(0);
	return 0;
}
