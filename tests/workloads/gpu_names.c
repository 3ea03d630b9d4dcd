// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * gpu_names: kernels with long mangled names on the simulated runtime, for the CUPTI agent's
 * name continuation records (names longer than an agent_record's inline 127 characters).
 *
 * Usage: gpu_names [--reps N (3)] [--hold]
 * After GO, N times on the legacy default stream: tpsim_enqueue_kernel(LONG_NAME) then
 * tpsim_enqueue_kernel(SHORT_NAME), grid (2,1,1) block (32,1,1); then cudaDeviceSynchronize.
 * The names are printed as "# long=<name>" and "# short=<name>" before READY; CUDA is
 * initialised before READY (cudaFree(NULL): libcuda.so.1 mapped), as tptrace --gpu requires.
 */
#include <string.h>
#include <cuda_runtime_api.h>
#include "tpsim.h"
#include "handshake.h"

/* ns::deep<outer::very_long_type_name_for_testing<1..30> >::kernel(float*, int): 413 characters mangled */
#define LONG_NAME \
	 "_ZN2ns4deepIJN5outer31very_long_type_name_for_testingILi1EEENS2_ILi2EEENS2_ILi3EEENS2_ILi4EEENS2_ILi5EEENS2_ILi6EEENS2_ILi7EEENS2_ILi8EEENS2_ILi9EEENS2_ILi10EEENS2_ILi11EEENS2_ILi12EEENS2_ILi13EEENS2_ILi14EEENS2_ILi15EEENS2_ILi16EEENS2_ILi17EEENS2_ILi18EEENS2_ILi19EEENS2_ILi20EEENS2_ILi21EEENS2_ILi22EEENS2_ILi23EEENS2_ILi24EEENS2_ILi25EEENS2_ILi26EEENS2_ILi27EEENS2_ILi28EEENS2_ILi29EEENS2_ILi30EEEEE6kernelEPfi"
#define SHORT_NAME "_Z5scalePffi"

static void body(void *arg)
{
}

int main(int argc, char **argv)
{
	dim3 grid = { 2, 1, 1 }, block = { 32, 1, 1 };
	int reps = 3, hold = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--reps"))
			reps = (int)hs_parse_long(argv[i], argv[i + 1]), i++;
		else if (!strcmp(argv[i], "--hold"))
			hold = 1;
		else
			return 2;
	}
	hs_info("long=%s", LONG_NAME);
	hs_info("short=%s", SHORT_NAME);
	if (cudaFree(NULL))
		return 1;
	hs_ready_wait_go();
	for (int i = 0; i < reps; i++) {
		tpsim_enqueue_kernel(0, LONG_NAME, grid, block, body, NULL);
		tpsim_enqueue_kernel(0, SHORT_NAME, grid, block, body, NULL);
	}
	cudaDeviceSynchronize();
	hs_done(hold);
	return 0;
}
