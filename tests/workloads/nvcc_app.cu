// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * nvcc_app: <<<>>> launches as CUDA 13 nvcc compiles them (__cudaGetKernel once per stub, then
 * __cudaLaunchKernel). Built twice:
 *   nvcc_shared  nvcc -cudart shared, rpath to the sim lib dir: runs on the simulated runtime
 *   nvcc_static  plain nvcc (static cudart): __cudaGetKernel & co. are local symbols of the
 *                executable; with no driver every call fails (35) and is ignored
 * and both again with --default-stream per-thread (nvcc_shared_pt, nvcc_static_pt): <<<>>>
 * calls __cudaLaunchKernel_ptsz and cudaStreamSynchronize becomes cudaStreamSynchronize_ptsz.
 *
 * Usage: nvcc_{shared,static} [--iters N (2)] [--hold]
 *
 * Before READY (so these handles exist before a tracer attaches):
 *   cudaStreamCreate(&s); cudaMalloc x2
 *   scale_vec<<<dim3(3,5,7), dim3(32,2,1), 128, s>>>   -> __cudaGetKernel(scale_vec stub),
 *                                                        __cudaLaunchKernel
 *   ns::tk<int><<<4, 64>>>                              -> __cudaGetKernel(tk stub),
 *                                                        __cudaLaunchKernel (legacy stream)
 *   cudaDeviceSynchronize()
 *
 * After GO, EXACTLY these calls per iteration, in this order:
 *   1. scale_vec<<<dim3(3,5,7), dim3(32,2,1), 128, s>>>  __cudaLaunchKernel(h_scale_vec,
 *        grid (3,5,7), block (32,2,1), args, 128, s)
 *   2. ns::tk<int><<<4, 64, 0, s>>>                      __cudaLaunchKernel(h_tk, grid (4,1,1),
 *        block (64,1,1), args, 0, s)
 *   3. late_kernel<<<dim3(2,2,2), dim3(8,8,1)>>>         __cudaLaunchKernel(h_late,
 *        grid (2,2,2), block (8,8,1), args, 0, 0 = legacy stream); the FIRST iteration is
 *        preceded by __cudaGetKernel(&h_late, late_kernel stub): the only __cudaGetKernel
 *        after GO
 *   4. cudaStreamSynchronize(s)
 * and once after the loop:
 *   5. cudaDeviceSynchronize()
 * Each <<<>>> also calls __cudaPushCallConfiguration / __cudaPopCallConfiguration once.
 * Device names: _Z9scale_vecPffi, _ZN2ns2tkIiEEvPT_i, _Z11late_kernelPi.
 * No other runtime calls (no cudaGetLastError). Before DONE: "# errors=E first=F": failed
 * syncs (5 and 4) after GO and the first error code (0 if none; 35 on the static build).
 */
#include <cuda_runtime.h>
#include "handshake.h"

__global__ void scale_vec(float *v, float factor, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		v[i] *= factor;
}

namespace ns {
template <typename T> __global__ void tk(T *v, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		v[i] += 1;
}
template __global__ void tk<int>(int *, int);
} // namespace ns

__global__ void late_kernel(int *flag)
{
	if (threadIdx.x == 0 && blockIdx.x == 0)
		*flag = 1;
}

static int errors;
static int first_error;

static void note(cudaError_t err)
{
	if (err == cudaSuccess)
		return;
	if (!errors++)
		first_error = (int)err;
}

int main(int argc, char **argv)
{
	int iters = 2, hold = 0;
	cudaStream_t s = 0;
	float *vec = nullptr;
	int *ints = nullptr;
	const int n = 1024;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iters")) {
			iters = (int)hs_parse_long(argv[i], argv[i + 1]);
			i++;
		} else if (!strcmp(argv[i], "--hold")) {
			hold = 1;
		} else {
			fprintf(stderr, "usage: %s [--iters N] [--hold]\n", argv[0]);
			return 2;
		}
	}

	/* Errors before GO are expected on the static build (no driver) and not counted. */
	cudaStreamCreate(&s);
	cudaMalloc((void **)&vec, n * sizeof(float));
	cudaMalloc((void **)&ints, n * sizeof(int));
	scale_vec<<<dim3(3, 5, 7), dim3(32, 2, 1), 128, s>>>(vec, 2.0f, n);
	ns::tk<int><<<4, 64>>>(ints, n);
	cudaDeviceSynchronize();

	hs_ready_wait_go();
	for (int it = 0; it < iters; it++) {
		scale_vec<<<dim3(3, 5, 7), dim3(32, 2, 1), 128, s>>>(vec, 2.0f, n);
		ns::tk<int><<<4, 64, 0, s>>>(ints, n);
		late_kernel<<<dim3(2, 2, 2), dim3(8, 8, 1)>>>(ints);
		note(cudaStreamSynchronize(s));
	}
	note(cudaDeviceSynchronize());
	hs_info("errors=%d first=%d", errors, first_error);
	hs_done(hold);
	return 0;
}
