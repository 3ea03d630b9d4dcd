// SPDX-License-Identifier: MIT
/* One call of every probed CUDA runtime API with distinct, known arguments, after the
 * handshake. Built four ways by e2e.mk:
 *   api_calls_real, api_calls_real_pt   the REAL libcudart.so.13 (rpath /usr/local/cuda/lib);
 *                                       without a driver each call fails with 35 and only the
 *                                       entry (and the return code) is observable
 *   api_calls_sim,  api_calls_sim_pt    the simulated runtime (rpath to the sim's lib dir):
 *                                       every call does its work
 * The _pt builds define CUDA_API_PER_THREAD_DEFAULT_STREAM, as nvcc --default-stream per-thread
 * does: cuda_runtime_api.h then maps the calls marked (pt) below to their _ptsz/_ptds symbols.
 *
 * Before READY: streams, events, a graph exec and buffers are created; where that fails (the
 * real runtime without a driver) fixed fake values stand in. Then one line
 *   "# handles stream=0x.. stream2=0x.. ev=0x.. ev2=0x.. graph=0x.. dev=0x.. host=0x.."
 * gives the values the calls below pass. After GO, EXACTLY, in this order:
 *   1.  cudaLaunchKernel(api_kernel, grid (2,3,4), block (32,2,1), args, 256, stream)   (pt)
 *   2.  cudaLaunchCooperativeKernel(api_kernel, (5,1,1), (64,1,1), args, 0, stream)     (pt)
 *   3.  cudaLaunchKernelExC({(6,1,1), (128,1,1), smem 512, stream2}, api_kernel, args)  (pt)
 *   4.  cudaMemcpy(dev, host, 4096, HtoD)                                               (pt)
 *   5.  cudaMemcpyAsync(host, dev, 2048, DtoH, stream)                                  (pt)
 *   6.  cudaMemcpy2D(dev, dpitch 64, host, spitch 128, width 48, height 4, HtoD)       (pt)
 *   7.  cudaMemcpy2DAsync(host, 128, dev, 64, 32, 3, DtoH, stream)                      (pt)
 *   8.  cudaMemset(dev, 0x11, 1000)                                                     (pt)
 *   9.  cudaMemsetAsync(dev, 0x22, 500, stream)                                         (pt)
 *   10. cudaMemsetAsync(dev, 0x33, 100, cudaStreamPerThread)                            (pt)
 *   11. cudaGraphLaunch(graph, stream)                                                  (pt)
 *   12. cudaEventRecord(ev, stream)                                                     (pt)
 *   13. cudaEventRecordWithFlags(ev2, stream, cudaEventRecordExternal)                  (pt)
 *   14. cudaStreamWaitEvent(stream2, ev2, 0)                                            (pt)
 *   15. cudaEventQuery(ev)
 *   16. cudaEventSynchronize(ev)
 *   17. cudaStreamSynchronize(stream)                                                   (pt)
 *   18. cudaDeviceSynchronize()
 * On the sim with TPSIM_KERNEL_US=300000 (the graph's duration) and TPSIM_KERNEL_TIMES=
 * api_kernel=1000, ev is recorded behind a 300 ms graph: the query returns 600 and the
 * event sync blocks until the graph is done. Before DONE: "# rc=a,b,..." the 18 return codes.
 * The values are asserted by tests/e2e/test_trace_opts.py: keep them in sync. */
#include <stdio.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "handshake.h"

#define NR_CALLS 18

__attribute__((noinline)) void api_kernel(float *p, int n)
{
	(void)p;
	(void)n;
}

static char host_buf[8192], dev_buf[8192];

int main(void)
{
	cudaStream_t stream = (cudaStream_t)0x5100, stream2 = (cudaStream_t)0x5200;
	cudaEvent_t ev = (cudaEvent_t)0xe7e7, ev2 = (cudaEvent_t)0xe8e8;
	cudaGraphExec_t graph = (cudaGraphExec_t)0x6a6a;
	void *dev = dev_buf, *host = host_buf;
	float *kernel_arg = NULL;
	int n = 16, rc[NR_CALLS], i = 0;
	void *args[] = { &kernel_arg, &n };
	cudaLaunchConfig_t cfg;
	cudaGraph_t g;

	if (cudaStreamCreate(&stream) || cudaStreamCreate(&stream2)) {
		stream = (cudaStream_t)0x5100;
		stream2 = (cudaStream_t)0x5200;
	}
	if (cudaEventCreate(&ev) || cudaEventCreate(&ev2)) {
		ev = (cudaEvent_t)0xe7e7;
		ev2 = (cudaEvent_t)0xe8e8;
	}
	if (cudaGraphCreate(&g, 0) || cudaGraphInstantiate(&graph, g, 0))
		graph = (cudaGraphExec_t)0x6a6a;
	if (cudaMalloc(&dev, sizeof(dev_buf)))
		dev = dev_buf;
	kernel_arg = dev;
	printf("# handles stream=%p stream2=%p ev=%p ev2=%p graph=%p dev=%p host=%p\n",
	       (void *)stream, (void *)stream2, (void *)ev, (void *)ev2, (void *)graph, dev, host);
	fflush(stdout);
	hs_ready_wait_go();

	rc[i++] = cudaLaunchKernel((const void *)api_kernel, (dim3){ 2, 3, 4 }, (dim3){ 32, 2, 1 },
				   args, 256, stream);
	rc[i++] = cudaLaunchCooperativeKernel((const void *)api_kernel, (dim3){ 5, 1, 1 },
					      (dim3){ 64, 1, 1 }, args, 0, stream);
	memset(&cfg, 0, sizeof(cfg));
	cfg.gridDim = (dim3){ 6, 1, 1 };
	cfg.blockDim = (dim3){ 128, 1, 1 };
	cfg.dynamicSmemBytes = 512;
	cfg.stream = stream2;
	rc[i++] = cudaLaunchKernelExC(&cfg, (const void *)api_kernel, args);
	rc[i++] = cudaMemcpy(dev, host, 4096, cudaMemcpyHostToDevice);
	rc[i++] = cudaMemcpyAsync(host, dev, 2048, cudaMemcpyDeviceToHost, stream);
	rc[i++] = cudaMemcpy2D(dev, 64, host, 128, 48, 4, cudaMemcpyHostToDevice);
	rc[i++] = cudaMemcpy2DAsync(host, 128, dev, 64, 32, 3, cudaMemcpyDeviceToHost, stream);
	rc[i++] = cudaMemset(dev, 0x11, 1000);
	rc[i++] = cudaMemsetAsync(dev, 0x22, 500, stream);
	rc[i++] = cudaMemsetAsync(dev, 0x33, 100, cudaStreamPerThread);
	rc[i++] = cudaGraphLaunch(graph, stream);
	rc[i++] = cudaEventRecord(ev, stream);
	rc[i++] = cudaEventRecordWithFlags(ev2, stream, cudaEventRecordExternal);
	rc[i++] = cudaStreamWaitEvent(stream2, ev2, 0);
	rc[i++] = cudaEventQuery(ev);
	rc[i++] = cudaEventSynchronize(ev);
	rc[i++] = cudaStreamSynchronize(stream);
	rc[i++] = cudaDeviceSynchronize();

	printf("# rc=");
	for (i = 0; i < NR_CALLS; i++)
		printf("%s%d", i ? "," : "", rc[i]);
	printf("\n");
	hs_done(0);
	return 0;
}
