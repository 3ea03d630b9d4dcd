// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * cudart_uninit: the simulated libcudart.so.13 linked in but CUDA not initialised at READY
 * (the runtime dlopens libcuda.so.1 at its first call), for tptrace --gpu's refusal.
 * After GO: cudaFree(NULL) (now libcuda.so.1 is mapped), "# initialised", then DONE; with
 * --hold it waits for stdin to close, so a test can attach after initialisation.
 */
#include <string.h>
#include <cuda_runtime_api.h>
#include "handshake.h"

int main(int argc, char **argv)
{
	int hold = argc > 1 && !strcmp(argv[1], "--hold");

	hs_ready_wait_go();
	if (cudaFree(NULL))
		return 1;
	hs_info("initialised");
	hs_done(hold);
	return 0;
}
