// SPDX-License-Identifier: MIT
/* Frame pointers through a pending return probe (tests/e2e/test_stacks_uret.py): built with
 * -fno-omit-frame-pointer against the simulated libcudart. After GO: main -> fp_outer ->
 * fp_mid -> cudaStreamSynchronize(0), then "DONE" (it stays until stdin closes). With a uretprobe on fp_mid, the word at
 * fp_mid's return slot is the [uprobes] trampoline while cudaStreamSynchronize runs: a
 * frame-pointer walk at cudaStreamSynchronize's entry reads it as fp_mid's return address. */
#include <cuda_runtime_api.h>

#include "handshake.h"

static volatile int sink;

__attribute__((noinline)) int fp_mid(int x)
{
	int r = (int)cudaStreamSynchronize(0);

	sink += x;
	return r + sink;
}

__attribute__((noinline)) int fp_outer(int x)
{
	int r = fp_mid(x + 1);

	sink += r;
	return r + 1;
}

int main(void)
{
	hs_ready_wait_go();
	sink += fp_outer(1);
	hs_done(1);	/* still mapped while the test resolves its stacks */
	return 0;
}
