// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * sim_records: the simulated CUDA stack checked on its own (tests/e2e/test_sim.py, no tptrace).
 * Subscribes to the sim CUPTI like a profiler, runs known calls, and prints every activity
 * record and a mark around each phase as JSON lines on stdout:
 *   {"mark":PHASE,"tid":T,"t0":NS,"t1":NS, ...}   t0/t1: CLOCK_MONOTONIC around the phase
 *   {"rec":"runtime"|"driver","cbid":N,"corr":C,"tid":T,"start":NS,"end":NS}
 *   {"rec":"kernel","name":S,"corr":C,"graph":G,"stream":N,"grid":[..],"block":[..],...}
 *   {"rec":"memcpy"|"memset","corr":C,"bytes":N,"copy_kind":K,"graph":G}
 * The timestamp callback is CLOCK_MONOTONIC, so API records and marks share one clock (GPU
 * records are on CUPTI's clock of the device, which drifts: compared among themselves only).
 *
 * Phases (each on the main thread unless said):
 *   rt_launch   3x cudaLaunchKernel(k_rt) on a created stream, cudaGetLastError after each
 *   unprobed    cudaPeekAtLastError, cudaGetDevice, cudaStreamGetCaptureInfo
 *   copies      cudaMemcpyAsync HtoD 4096, cudaMemsetAsync 1024, cudaMemcpy DtoH 4096
 *   handle      __cudaRegisterFunction(stub "k_stub" as "_Z6k_stubv"), __cudaGetKernel,
 *               __cudaLaunchKernel(handle) (mark: "handle"=the cudaKernel_t, "stub"=address)
 *   drv_launch  cuModuleLoadData(PTX) + cuModuleGetFunction("triton_poi_fused_add_0") +
 *               cuLaunchKernelEx (grid 4,1,1 block 128,1,1, cluster attribute 2,1,1)
 *   graph       capture 3 launches (k_g0, k_g1, k_g2) on the stream, instantiate, 2 launches
 *   threads     T threads x N cudaLaunchKernel(k_thr) + cudaGetLastError back to back
 *               (PyTorch's launch check); one mark per thread
 * Usage: sim_records [--threads T (3)] [--launches N (200)]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>

extern void CUDARTAPI __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun,
					     char *deviceFun, const char *deviceName,
					     int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim,
					     dim3 *gDim, int *wSize);
extern cudaError_t CUDARTAPI __cudaGetKernel(cudaKernel_t *, const void *);
extern cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
						void **args, size_t sharedMem, cudaStream_t stream);

#define CHECK(x) do { int _r = (int)(x); if (_r) { fprintf(stderr, "%s:%d: %s = %d\n", \
	__FILE__, __LINE__, #x, _r); exit(1); } } while (0)

static const char ptx[] =
	".version 8.8\n.target sm_90\n.address_size 64\n\n"
	".visible .entry triton_poi_fused_add_0(\n\t.param .u64 p0\n)\n{\n\tret;\n}\n";

void k_rt(void) {}
void k_stub(void) {}
void k_g0(void) {}
void k_g1(void) {}
void k_g2(void) {}
void k_thr(void) {}

static uint64_t now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static uint64_t CUPTIAPI timestamp(void)
{
	return now();
}

static long tid(void)
{
	return syscall(SYS_gettid);
}

/* 1 if this process can read a byte at p (write() from it into a pipe), else 0 */
static int readable(const void *p)
{
	int fd[2], r;

	if (pipe(fd))
		exit(1);
	r = write(fd[1], p, 1) == 1;
	close(fd[0]);
	close(fd[1]);
	return r;
}

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static void CUPTIAPI buf_requested(uint8_t **buf, size_t *size, size_t *max)
{
	*size = 1 << 20;
	*buf = aligned_alloc(8, *size);
	*max = 0;
}

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
				   size_t valid)
{
	CUpti_Activity *r = NULL;

	pthread_mutex_lock(&out_lock);
	while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
		switch (r->kind) {
		case CUPTI_ACTIVITY_KIND_RUNTIME:
		case CUPTI_ACTIVITY_KIND_DRIVER: {
			CUpti_ActivityAPI *a = (CUpti_ActivityAPI *)r;

			printf("{\"rec\":\"%s\",\"cbid\":%u,\"corr\":%u,\"tid\":%u,\"start\":%llu,"
			       "\"end\":%llu}\n", r->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? "runtime" :
			       "driver", a->cbid, a->correlationId, a->threadId,
			       (unsigned long long)a->start, (unsigned long long)a->end);
			break;
		}
		case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
			CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)r;

			printf("{\"rec\":\"kernel\",\"name\":\"%s\",\"corr\":%u,\"graph\":%u,"
			       "\"stream\":%u,\"grid\":[%d,%d,%d],\"block\":[%d,%d,%d],\"start\":%llu,"
			       "\"end\":%llu}\n", k->name, k->correlationId, k->graphId, k->streamId,
			       k->gridX, k->gridY, k->gridZ, k->blockX, k->blockY, k->blockZ,
			       (unsigned long long)k->start, (unsigned long long)k->end);
			break;
		}
		case CUPTI_ACTIVITY_KIND_MEMCPY: {
			CUpti_ActivityMemcpy6 *m = (CUpti_ActivityMemcpy6 *)r;

			printf("{\"rec\":\"memcpy\",\"corr\":%u,\"bytes\":%llu,\"copy_kind\":%u,"
			       "\"graph\":%u}\n", m->correlationId, (unsigned long long)m->bytes,
			       m->copyKind, m->graphId);
			break;
		}
		case CUPTI_ACTIVITY_KIND_MEMSET: {
			CUpti_ActivityMemset4 *m = (CUpti_ActivityMemset4 *)r;

			printf("{\"rec\":\"memset\",\"corr\":%u,\"bytes\":%llu,\"graph\":%u}\n",
			       m->correlationId, (unsigned long long)m->bytes, m->graphId);
			break;
		}
		default:
			break;
		}
	}
	pthread_mutex_unlock(&out_lock);
	free(buf);
}

static void mark(const char *phase, uint64_t t0, uint64_t t1, const char *extra)
{
	pthread_mutex_lock(&out_lock);
	printf("{\"mark\":\"%s\",\"tid\":%ld,\"t0\":%llu,\"t1\":%llu%s%s}\n", phase, tid(),
	       (unsigned long long)t0, (unsigned long long)t1, extra ? "," : "", extra ? extra : "");
	pthread_mutex_unlock(&out_lock);
}

static int nr_launches = 200;
static cudaStream_t stream;

static void *thread_main(void *arg)
{
	dim3 g = { 8, 1, 1 }, b = { 64, 1, 1 };
	uint64_t t0, t1;

	/* first call of the thread: context made current (not part of the measured run) */
	CHECK(cudaGetLastError());
	t0 = now();
	for (int i = 0; i < nr_launches; i++) {
		CHECK(cudaLaunchKernel((const void *)k_thr, g, b, NULL, 0, NULL));
		CHECK(cudaGetLastError());
	}
	t1 = now();
	mark("threads", t0, t1, NULL);
	return NULL;
}

int main(int argc, char **argv)
{
	dim3 g = { 2, 1, 1 }, b = { 32, 1, 1 };
	int nr_threads = 3;
	uint64_t t0, t1;
	char extra[256];

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--threads"))
			nr_threads = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--launches"))
			nr_launches = atoi(argv[i + 1]);
		else
			return 2;
	}
	setvbuf(stdout, NULL, _IOFBF, 1 << 20);
	/* threadId = gettid(), what the marks carry (CUPTI's default is pthread_self()) */
	CHECK(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM));
	CHECK(cuptiActivityRegisterTimestampCallback(timestamp));
	CHECK(cuptiActivityRegisterCallbacks(buf_requested, buf_completed));
	CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME));
	CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER));
	CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
	CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY));
	CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET));
	CHECK(cudaStreamCreate(&stream));
	/* kernels loaded before the measured phases: first use loads them (driver calls) */
	CHECK(cudaLaunchKernel((const void *)k_rt, g, b, NULL, 0, stream));
	CHECK(cudaStreamSynchronize(stream));

	t0 = now();
	for (int i = 0; i < 3; i++) {
		CHECK(cudaLaunchKernel((const void *)k_rt, g, b, NULL, 0, stream));
		CHECK(cudaGetLastError());
	}
	t1 = now();
	mark("rt_launch", t0, t1, NULL);

	{
		enum cudaStreamCaptureStatus st;
		int dev;

		t0 = now();
		CHECK(cudaPeekAtLastError());
		CHECK(cudaGetDevice(&dev));
		CHECK(cudaStreamGetCaptureInfo(stream, &st, NULL, NULL, NULL, NULL, NULL));
		t1 = now();
		mark("unprobed", t0, t1, NULL);
	}

	{
		void *dev;
		static char host[4096];

		CHECK(cudaMalloc(&dev, 4096));
		t0 = now();
		CHECK(cudaMemcpyAsync(dev, host, 4096, cudaMemcpyHostToDevice, stream));
		CHECK(cudaMemsetAsync(dev, 0, 1024, stream));
		CHECK(cudaMemcpy(host, dev, 4096, cudaMemcpyDeviceToHost));
		t1 = now();
		mark("copies", t0, t1, NULL);
		CHECK(cudaFree(dev));
	}

	{
		cudaKernel_t k;
		uint3 u = { 0, 0, 0 };

		__cudaRegisterFunction(NULL, (const char *)k_stub, (char *)"k_stub", "_Z6k_stubv",
				       -1, &u, &u, NULL, NULL, NULL);
		CHECK(__cudaGetKernel(&k, (const void *)k_stub));
		CHECK(cudaStreamSynchronize(stream));
		t0 = now();
		CHECK(__cudaLaunchKernel(k, g, b, NULL, 0, stream));
		t1 = now();
		snprintf(extra, sizeof(extra), "\"handle\":%llu,\"stub\":%llu,\"readable\":%d",
			 (unsigned long long)(uintptr_t)k, (unsigned long long)(uintptr_t)k_stub,
			 readable(k));
		mark("handle", t0, t1, extra);
	}

	{
		CUmodule mod;
		CUfunction f;
		CUlaunchAttribute attr = { .id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION };
		CUlaunchConfig cfg = { .gridDimX = 4, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 128,
				       .blockDimY = 1, .blockDimZ = 1, .sharedMemBytes = 0,
				       .hStream = (CUstream)stream, .attrs = &attr, .numAttrs = 1 };
		void *params[] = { &mod };

		attr.value.clusterDim.x = 2;
		attr.value.clusterDim.y = 1;
		attr.value.clusterDim.z = 1;
		CHECK(cuModuleLoadData(&mod, ptx));
		CHECK(cuModuleGetFunction(&f, mod, "triton_poi_fused_add_0"));
		t0 = now();
		CHECK(cuLaunchKernelEx(&cfg, f, params, NULL));
		t1 = now();
		snprintf(extra, sizeof(extra), "\"function\":%llu,\"readable\":%d,"
			 "\"stream_readable\":%d,\"module_readable\":%d",
			 (unsigned long long)(uintptr_t)f, readable(f), readable(stream), readable(mod));
		mark("drv_launch", t0, t1, extra);
		/* not kinder than the real one: a cluster that does not divide the grid */
		attr.value.clusterDim.x = 3;
		if (cuLaunchKernelEx(&cfg, f, params, NULL) != CUDA_ERROR_INVALID_CLUSTER_SIZE)
			return 3;
		if (cuModuleGetFunction(&f, mod, "no_such_kernel") != CUDA_ERROR_NOT_FOUND)
			return 3;
	}

	{
		cudaGraph_t graph;
		cudaGraphExec_t exec;

		CHECK(cudaStreamSynchronize(stream));
		CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
		CHECK(cudaLaunchKernel((const void *)k_g0, g, b, NULL, 0, stream));
		CHECK(cudaLaunchKernel((const void *)k_g1, g, b, NULL, 0, stream));
		CHECK(cudaLaunchKernel((const void *)k_g2, g, b, NULL, 0, stream));
		CHECK(cudaStreamEndCapture(stream, &graph));
		CHECK(cudaGraphInstantiate(&exec, graph, 0));
		t0 = now();
		CHECK(cudaGraphLaunch(exec, stream));
		CHECK(cudaGraphLaunch(exec, stream));
		t1 = now();
		mark("graph", t0, t1, NULL);
		CHECK(cudaStreamSynchronize(stream));
	}

	{
		pthread_t th[64];
		cudaKernel_t k;

		CHECK(cudaGetKernel(&k, (const void *)k_thr));	/* loaded before the threads */
		if (nr_threads > 64)
			nr_threads = 64;
		for (int i = 0; i < nr_threads; i++)
			CHECK(pthread_create(&th[i], NULL, thread_main, NULL));
		for (int i = 0; i < nr_threads; i++)
			pthread_join(th[i], NULL);
	}

	CHECK(cudaDeviceSynchronize());
	CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
	fflush(stdout);
	return 0;
}
