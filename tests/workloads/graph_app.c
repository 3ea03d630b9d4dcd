// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * graph_app: CUDA-graph replay, as torch.cuda.CUDAGraph does it. Before READY, three kernels
 * launched with cudaLaunchKernel on a capturing stream are captured into a graph (stream capture
 * through the driver: cuStreamBeginCapture_v2 / cuStreamEndCapture, then
 * cuGraphInstantiateWithFlags). After GO, each step replays the graph twice: once through the
 * runtime (cudaGraphLaunch, which calls cuGraphLaunch underneath) and once straight through the
 * driver (cuGraphLaunch, as a driver-API user would), then cudaStreamSynchronize. A replay runs
 * the captured kernels in capture order; their GPU records carry the replaying call's
 * correlation id.
 *
 * Usage: graph_app [--steps N (3)] [--hold]
 * Kernels (real .symtab symbols, -rdynamic): graph_gemm grid (8,1,1) block (128,1,1),
 * graph_bias grid (4,1,1) block (64,1,1), graph_relu grid (4,1,1) block (64,1,1); each 50 µs.
 * Info lines before READY: "# graph=<exec handle>" and "# stream=<handle>".
 */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include "tpsim.h"
#include "handshake.h"

void graph_gemm(float *x) { (void)x; }
void graph_bias(float *x) { (void)x; }
void graph_relu(float *x) { (void)x; }

static struct {
	CUresult (*begin_capture)(CUstream, CUstreamCaptureMode);
	CUresult (*end_capture)(CUstream, CUgraph *);
	CUresult (*instantiate)(CUgraphExec *, CUgraph, unsigned long long);
	CUresult (*graph_launch)(CUgraphExec, CUstream);
} drv;

static void check_rt(cudaError_t err, const char *what)
{
	if (err != cudaSuccess) {
		fprintf(stderr, "graph_app: %s: %s\n", what, cudaGetErrorString(err));
		exit(1);
	}
}

static void check_drv(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS) {
		fprintf(stderr, "graph_app: %s: CUresult %d\n", what, (int)r);
		exit(1);
	}
}

static void *need(void *lib, const char *sym)
{
	void *p = dlsym(lib, sym);

	if (!p) {
		fprintf(stderr, "graph_app: libcuda.so.1 has no %s\n", sym);
		exit(1);
	}
	return p;
}

int main(int argc, char **argv)
{
	void (*const fns[3])(float *) = { graph_gemm, graph_bias, graph_relu };
	const dim3 grids[3] = { { 8, 1, 1 }, { 4, 1, 1 }, { 4, 1, 1 } };
	const dim3 blocks[3] = { { 128, 1, 1 }, { 64, 1, 1 }, { 64, 1, 1 } };
	int steps = 3, hold = 0;
	float *buf;
	void *args[1] = { &buf }, *lib;
	cudaStream_t s;
	CUgraph graph;
	CUgraphExec exec;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--steps") && i + 1 < argc)
			steps = (int)hs_parse_long(argv[i], argv[i + 1]), i++;
		else if (!strcmp(argv[i], "--hold"))
			hold = 1;
		else {
			fprintf(stderr, "usage: graph_app [--steps N] [--hold]\n");
			return 2;
		}
	}
	check_rt(cudaSetDevice(0), "cudaSetDevice");
	check_rt(cudaStreamCreate(&s), "cudaStreamCreate");
	check_rt(cudaMalloc((void **)&buf, 1 << 20), "cudaMalloc");
	for (int i = 0; i < 3; i++)
		tpsim_set_kernel_us((const void *)fns[i], 50);
	lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (!lib) {
		fprintf(stderr, "graph_app: libcuda.so.1 is not mapped under the runtime\n");
		return 1;
	}
	*(void **)&drv.begin_capture = need(lib, "cuStreamBeginCapture_v2");
	*(void **)&drv.end_capture = need(lib, "cuStreamEndCapture");
	*(void **)&drv.instantiate = need(lib, "cuGraphInstantiateWithFlags");
	*(void **)&drv.graph_launch = need(lib, "cuGraphLaunch");

	check_drv(drv.begin_capture((CUstream)s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
		  "cuStreamBeginCapture");
	for (int i = 0; i < 3; i++)
		check_rt(cudaLaunchKernel((const void *)fns[i], grids[i], blocks[i], args, 0, s),
			 "cudaLaunchKernel (captured)");
	check_drv(drv.end_capture((CUstream)s, &graph), "cuStreamEndCapture");
	check_drv(drv.instantiate(&exec, graph, 0), "cuGraphInstantiateWithFlags");
	hs_info("graph=0x%llx", (unsigned long long)(uintptr_t)exec);
	hs_info("stream=0x%llx", (unsigned long long)(uintptr_t)s);
	hs_ready_wait_go();
	for (int step = 0; step < steps; step++) {
		check_rt(cudaGraphLaunch((cudaGraphExec_t)exec, s), "cudaGraphLaunch");
		check_drv(drv.graph_launch(exec, (CUstream)s), "cuGraphLaunch");
		check_rt(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	}
	hs_done(hold);
	return 0;
}
