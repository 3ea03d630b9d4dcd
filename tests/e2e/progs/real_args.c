// SPDX-License-Identifier: MIT
/* Calls the REAL libcudart.so.13 with distinct, known arguments after a handshake, so a tracer
 * attached in between can check every decoded argument. Without a driver each call fails
 * with cudaErrorInsufficientDriver (35); the entry is what is observed. The values below are
 * asserted by tests/e2e/test_real_cudart.py — keep them in sync. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cuda_runtime_api.h>

__attribute__((noinline)) void real_kernel_stub(float *p, int n)
{
	(void)p;
	(void)n;
}

static void handshake(void)
{
	char line[64];

	printf("READY %d\n", getpid());
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		_exit(1);
}

int main(void)
{
	cudaStream_t stream = (cudaStream_t)0x5100;
	cudaEvent_t event = (cudaEvent_t)0xe7e7;
	void *args[2] = { 0 };
	char host[64], host2[64];
	cudaLaunchConfig_t cfg;

	handshake();
	cudaLaunchKernel((const void *)real_kernel_stub, dim3(11, 12, 13), dim3(32, 4, 2), args, 4096, stream);
	cudaLaunchCooperativeKernel((const void *)real_kernel_stub, dim3(70000, 3, 1), dim3(1024, 1, 1), args, 1 << 20, (cudaStream_t)0x2);
	memset(&cfg, 0, sizeof(cfg));
	cfg.gridDim = dim3(21, 22, 23);
	cfg.blockDim = dim3(64, 2, 3);
	cfg.dynamicSmemBytes = 777;
	cfg.stream = (cudaStream_t)0x5200;
	cudaLaunchKernelExC(&cfg, (const void *)real_kernel_stub, args);
	cudaMemcpy(host, host2, 48, cudaMemcpyHostToDevice);
	cudaMemcpyAsync(host, host2, 40, cudaMemcpyDeviceToHost, stream);
	cudaMemcpy2D(host, 16, host2, 32, 8, 3, cudaMemcpyDeviceToDevice);
	cudaMemcpy2DAsync(host, 24, host2, 40, 12, 2, cudaMemcpyHostToHost, stream);
	cudaMemset(host, 0x5a, 33);
	cudaMemsetAsync(host, -1, 34, stream);
	cudaEventRecord(event, stream);
	cudaStreamWaitEvent(stream, event, 0);
	cudaEventQuery(event);
	cudaEventSynchronize(event);
	cudaStreamSynchronize(stream);
	cudaDeviceSynchronize();
	{
		cudaKernel_t k = 0;

		cudaGetKernel(&k, (const void *)real_kernel_stub);
	}
	printf("DONE\n");
	fflush(stdout);
	return 0;
}
