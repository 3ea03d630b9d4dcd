// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * CUDA 13 runtime API entry points of the simulated libcudart.so.13, on top of the simulated
 * driver as the real runtime is: at first use it dlopens "libcuda.so.1" (found through this
 * library's RUNPATH, $ORIGIN/../driver, never on a path a real libcudart searches), gets
 * cuGetProcAddress_v2 with dlsym and every other driver entry point through it, calls cuInit,
 * and makes each runtime call run the driver call the real runtime runs underneath:
 *   cudaLaunchKernel -> cuLaunchKernel        cudaLaunchKernelExC -> cuLaunchKernelEx
 *   cudaMemcpyAsync -> cuMemcpyAsync          cudaMemcpy -> cuMemcpyHtoD_v2/DtoH_v2/DtoD_v2/cuMemcpy
 *   cudaMemsetAsync -> cuMemsetD8Async        cudaDeviceSynchronize -> cuCtxSynchronize
 *   cudaEventRecord/Query/Synchronize, cudaStreamSynchronize, cudaStreamWaitEvent,
 *   cudaGraphLaunch, cudaStreamBeginCapture... -> their cu* counterparts
 *   cudaMalloc -> cuMemAlloc_v2, cudaFree -> cuMemFree_v2 (and the host/managed/async forms)
 * (_ptsz/_ptds entry points reach the driver's _ptsz/_ptds forms.) Prototypes come from the
 * real <cuda_runtime_api.h>, included with __CUDA_API_VERSION_INTERNAL like the real library
 * is built, so both plain and _ptds/_ptsz names are declared and checked by the compiler.
 *
 * Every entry point but module registration (nvcc's static constructors, which run before any
 * tool attaches), cudaGetErrorName/String and cudaRuntime/DriverGetVersion (they must work
 * without a driver) is one API call for the sim CUPTI (RT_API: opened after entry, closed before
 * return, with CUPTI_RUNTIME_TRACE_CBID_* of the symbol called), so real CUPTI's record stream
 * is reproduced: a runtime record per call, a driver record per driver call nested in it.
 *
 * Kernels: __cudaRegisterFunction only remembers (host stub, device name). At first use of a
 * kernel the runtime loads a one-entry PTX library into the driver (cuLibraryLoadData +
 * cuLibraryGetKernel, driver records nested in that first runtime call, like CUDA's lazy
 * loading). __cudaGetKernel hands out that CUkernel, an opaque driver handle, never the stub
 * address; cudaLaunchKernel takes either a host function or such a handle (nvcc's CUDA 13
 * stubs pass the handle: __cudaLaunchKernel is a tail jump into cudaLaunchKernel, bytes as in
 * the real library) and launches it with cuLaunchKernel.
 *
 * Return values follow the real runtime where it is observable. One deliberate difference:
 * cudaLaunchKernel accepts any host function pointer, registered or not, so C workloads can
 * launch plain functions (named after their ELF symbol when dladdr finds one).
 * Limits: each kernel gets a library of its own (the real runtime loads one per fatbin); the
 * first runtime call of a thread makes the device's primary context current with
 * cuDevicePrimaryCtxRetain + cuCtxSetCurrent (driver records nested in that call);
 * cudaGetDeviceProperties, cudaGetLastError, cudaPeekAtLastError, cudaGetDevice and the
 * call-configuration calls have no driver call underneath.
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti_runtime_cbid.h>
#include "tpsim.h"
#include "tpsim_driver.h"

/*
 * nvcc's host-code entry points. <crt/host_runtime.h> and <crt/device_functions.h> declare them
 * only for C++ under __CUDACC__, so these prototypes are copied from the CUDA 13.0 headers
 * (crt/host_runtime.h: __cudaRegister*, __cudaUnregisterFatBinary, __cudaPopCallConfiguration;
 * crt/device_functions.h: __cudaPushCallConfiguration, __cudaGetKernel, __cudaLaunchKernel*),
 * with C++ default arguments removed.
 */
extern void **CUDARTAPI __cudaRegisterFatBinary(void *fatCubin);
extern void CUDARTAPI __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
extern void CUDARTAPI __cudaUnregisterFatBinary(void **fatCubinHandle);
extern void CUDARTAPI __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
					const char *deviceName, int ext, size_t size, int constant,
					int global);
extern void CUDARTAPI __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress,
					       char *deviceAddress, const char *deviceName, int ext,
					       size_t size, int constant, int global);
extern char CUDARTAPI __cudaInitModule(void **fatCubinHandle);
extern void CUDARTAPI __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun,
					     char *deviceFun, const char *deviceName,
					     int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim,
					     dim3 *gDim, int *wSize);
extern unsigned CUDARTAPI __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim,
						      size_t sharedMem, struct CUstream_st *stream);
extern cudaError_t CUDARTAPI __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim,
							size_t *sharedMem, void *stream);
extern cudaError_t CUDARTAPI __cudaGetKernel(cudaKernel_t *, const void *);
extern cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
						void **args, size_t sharedMem, cudaStream_t stream);
extern cudaError_t CUDARTAPI __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim,
						     dim3 blockDim, void **args, size_t sharedMem,
						     cudaStream_t stream);

#define DEVICE_MEM_BYTES (80ULL << 30)
#define MAX_DEVICES 16

/* ---- the driver underneath ---------------------------------------------------------------- */

#define DRV_FN(name) __typeof__(&name) name
static struct {
	DRV_FN(cuInit);
	DRV_FN(cuDeviceGetCount);
	DRV_FN(cuDevicePrimaryCtxRetain);
	DRV_FN(cuCtxSetCurrent);
	DRV_FN(cuCtxSynchronize);
	DRV_FN(cuGetExportTable);
	DRV_FN(cuMemAlloc_v2);
	DRV_FN(cuMemAllocManaged);
	DRV_FN(cuMemAllocHost_v2);
	DRV_FN(cuMemHostAlloc);
	DRV_FN(cuMemFree_v2);
	DRV_FN(cuMemFreeHost);
	DRV_FN(cuMemAllocAsync);
	DRV_FN(cuMemFreeAsync);
	DRV_FN(cuMemcpy);
	DRV_FN(cuMemcpyAsync);
	DRV_FN(cuMemcpyHtoD_v2);
	DRV_FN(cuMemcpyDtoH_v2);
	DRV_FN(cuMemcpyDtoD_v2);
	DRV_FN(cuMemcpy2D_v2);
	DRV_FN(cuMemcpy2DAsync_v2);
	DRV_FN(cuMemsetD8_v2);
	DRV_FN(cuMemsetD8Async);
	DRV_FN(cuStreamCreateWithPriority);
	DRV_FN(cuStreamDestroy_v2);
	DRV_FN(cuStreamSynchronize);
	DRV_FN(cuStreamQuery);
	DRV_FN(cuStreamGetId);
	DRV_FN(cuStreamWaitEvent);
	DRV_FN(cuLaunchHostFunc);
	DRV_FN(cuEventCreate);
	DRV_FN(cuEventDestroy_v2);
	DRV_FN(cuEventRecord);
	DRV_FN(cuEventRecordWithFlags);
	DRV_FN(cuEventQuery);
	DRV_FN(cuEventSynchronize);
	DRV_FN(cuEventElapsedTime_v2);
	DRV_FN(cuLibraryLoadData);
	DRV_FN(cuLibraryGetKernel);
	DRV_FN(cuLaunchKernel);
	DRV_FN(cuLaunchKernelEx);
	DRV_FN(cuLaunchCooperativeKernel);
	DRV_FN(cuStreamBeginCapture_v2);
	DRV_FN(cuStreamEndCapture);
	DRV_FN(cuStreamIsCapturing);
	DRV_FN(cuStreamGetCaptureInfo);
	DRV_FN(cuGraphCreate);
	DRV_FN(cuGraphDestroy);
	DRV_FN(cuGraphInstantiateWithFlags);
	DRV_FN(cuGraphExecDestroy);
	DRV_FN(cuGraphLaunch);
} drv, drv_pt;	/* drv_pt: the per-thread-default-stream forms (_ptsz/_ptds) */

/* Names as cuGetProcAddress_v2 takes them, in the order of the struct above. */
static const char *const drv_names[] = {
	"cuInit", "cuDeviceGetCount", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent",
	"cuCtxSynchronize", "cuGetExportTable", "cuMemAlloc", "cuMemAllocManaged",
	"cuMemAllocHost", "cuMemHostAlloc", "cuMemFree", "cuMemFreeHost", "cuMemAllocAsync",
	"cuMemFreeAsync", "cuMemcpy", "cuMemcpyAsync", "cuMemcpyHtoD", "cuMemcpyDtoH",
	"cuMemcpyDtoD", "cuMemcpy2D", "cuMemcpy2DAsync", "cuMemsetD8", "cuMemsetD8Async",
	"cuStreamCreateWithPriority", "cuStreamDestroy", "cuStreamSynchronize", "cuStreamQuery",
	"cuStreamGetId", "cuStreamWaitEvent", "cuLaunchHostFunc", "cuEventCreate",
	"cuEventDestroy", "cuEventRecord", "cuEventRecordWithFlags", "cuEventQuery",
	"cuEventSynchronize", "cuEventElapsedTime", "cuLibraryLoadData", "cuLibraryGetKernel",
	"cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel",
	"cuStreamBeginCapture", "cuStreamEndCapture", "cuStreamIsCapturing",
	"cuStreamGetCaptureInfo", "cuGraphCreate", "cuGraphDestroy",
	"cuGraphInstantiateWithFlags", "cuGraphExecDestroy", "cuGraphLaunch",
};

static const struct tpsim_driver_ops *ops;
static cudaError_t load_error = cudaErrorInitializationError;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int nr_devices;
static __thread cudaError_t last_error;
static __thread int cur_device;
static __thread bool ctx_current;

static void load_driver(void)
{
	static const CUuuid uuid = { TPSIM_DRIVER_UUID };
	__typeof__(&cuGetProcAddress_v2) get;
	void **slots = (void **)&drv, **slots_pt = (void **)&drv_pt;
	CUdriverProcAddressQueryResult st;
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);

	_Static_assert(sizeof(drv) == sizeof(drv_names) / sizeof(drv_names[0]) * sizeof(void *),
		       "drv_names matches struct drv");
	if (!lib) {
		load_error = cudaErrorInsufficientDriver;
		return;
	}
	get = (__typeof__(get))dlsym(lib, "cuGetProcAddress_v2");
	if (!get) {
		load_error = cudaErrorInsufficientDriver;
		return;
	}
	for (size_t i = 0; i < sizeof(drv_names) / sizeof(drv_names[0]); i++) {
		if (get(drv_names[i], &slots[i], CUDART_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st) ||
		    get(drv_names[i], &slots_pt[i], CUDART_VERSION,
			CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st)) {
			load_error = cudaErrorInsufficientDriver;
			return;
		}
	}
	if (drv.cuGetExportTable((const void **)&ops, &uuid) || ops->size < sizeof(*ops)) {
		ops = NULL;
		load_error = cudaErrorInsufficientDriver;
		return;
	}
	if (drv.cuInit(0) || drv.cuDeviceGetCount(&nr_devices)) {
		load_error = cudaErrorNoDevice;
		return;
	}
	load_error = cudaSuccess;
}

static cudaError_t rt_load(void)
{
	pthread_once(&load_once, load_driver);
	return load_error;
}

/* Records err as the thread's last error, like every runtime call does. */
static cudaError_t ret(cudaError_t err)
{
	if (err != cudaSuccess && err != cudaErrorNotReady)
		last_error = err;
	return err;
}

/* CUresult and cudaError_t share their numbers for everything the sim driver returns, except
 * a launch's bad configuration (the runtime checks that itself) and a missing context. */
static cudaError_t rt(CUresult r)
{
	switch (r) {
	case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
	case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
	case CUDA_ERROR_NOT_FOUND: return cudaErrorSymbolNotFound;
	case CUDA_ERROR_INVALID_IMAGE: return cudaErrorInvalidKernelImage;
	default: return (cudaError_t)r;
	}
}

#define R(call) ret(rt(call))

/* The calling thread's current device as a current context (the runtime's primary context). */
static cudaError_t make_current(int device)
{
	CUcontext ctx;
	CUresult r = drv.cuDevicePrimaryCtxRetain(&ctx, device);

	if (!r)
		r = drv.cuCtxSetCurrent(ctx);
	if (r)
		return rt(r);
	cur_device = device;
	ctx_current = true;
	return cudaSuccess;
}

/* A thread's first call: the context another runtime in the process (the application's, when
 * this is NCCL's static copy) or the application made current is kept, as the real runtime
 * keeps it (asked through the driver's private table: no API record); else the device's
 * primary context is made current. */
static void adopt_or_make_current(void)
{
	int d = ops->current_device();

	if (d >= 0) {
		cur_device = d;
		ctx_current = true;
		return;
	}
	make_current(cur_device);
}

/* Opens the call's API record; 1 if one was opened. */
static int rt_api_enter(uint32_t cbid)
{
	if (rt_load())
		return 0;
	ops->api_enter(TPSIM_DOMAIN_RUNTIME, cbid);
	if (!ctx_current)
		adopt_or_make_current();
	return 1;
}

static void rt_api_exit(int *opened)
{
	if (*opened)
		ops->api_exit();
}

/* First statement of every runtime entry point: the API record, the driver loaded, the
 * thread's context current; a call without a driver fails like the real one. */
#define RT_API(cbid)								\
	__attribute__((cleanup(rt_api_exit))) int rt_scope_ =			\
		rt_api_enter(CUPTI_RUNTIME_TRACE_CBID_##cbid);			\
	if (!rt_scope_)								\
		return ret(rt_load())

/* ---- kernels ------------------------------------------------------------------------------ */

struct rt_kernel {
	const void *func;		/* host stub / function pointer */
	char *name;			/* device name: registered, else the ELF symbol */
	CUkernel kernel;		/* from the driver; NULL until first use */
	long long us;			/* tpsim_set_kernel_us before the kernel was loaded, or -1 */
	struct rt_kernel *next;
};

static struct rt_kernel *rt_kernels;
static pthread_mutex_t kernels_lock = PTHREAD_MUTEX_INITIALIZER;

static struct rt_kernel *kernel_find_locked(const void *func)
{
	for (struct rt_kernel *k = rt_kernels; k; k = k->next)
		if (k->func == func)
			return k;
	return NULL;
}

static struct rt_kernel *kernel_add_locked(const void *func, const char *name)
{
	struct rt_kernel *k = calloc(1, sizeof(*k));
	Dl_info info;
	char buf[32];

	if (!k)
		return NULL;
	k->func = func;
	k->us = -1;
	if (name) {
		k->name = strdup(name);
	} else if (dladdr(func, &info) && info.dli_sname && info.dli_saddr == func) {
		/* a plain C function launched with cudaLaunchKernel has no device name */
		k->name = strdup(info.dli_sname);
	} else {
		snprintf(buf, sizeof(buf), "fn_%p", func);
		k->name = strdup(buf);
	}
	k->next = rt_kernels;
	rt_kernels = k;
	return k;
}

/* The driver kernel of a host function, loading it at first use (driver calls nested in the
 * runtime call that needed it). */
static cudaError_t kernel_of_func(const void *func, CUkernel *out)
{
	static const char fmt[] = ".version 8.8\n.target sm_90\n.address_size 64\n\n"
				  ".visible .entry %s()\n{\n\tret;\n}\n";
	struct rt_kernel *k;
	CUlibrary lib;
	CUresult r;
	char *ptx;

	pthread_mutex_lock(&kernels_lock);
	k = kernel_find_locked(func);
	if (!k)
		k = kernel_add_locked(func, NULL);
	if (!k) {
		pthread_mutex_unlock(&kernels_lock);
		return cudaErrorMemoryAllocation;
	}
	if (k->kernel) {
		*out = k->kernel;
		pthread_mutex_unlock(&kernels_lock);
		return cudaSuccess;
	}
	if (asprintf(&ptx, fmt, k->name) < 0) {
		pthread_mutex_unlock(&kernels_lock);
		return cudaErrorMemoryAllocation;
	}
	r = drv.cuLibraryLoadData(&lib, ptx, NULL, NULL, 0, NULL, NULL, 0);
	free(ptx);
	if (!r)
		r = drv.cuLibraryGetKernel(&k->kernel, lib, k->name);
	if (!r && k->us >= 0)
		ops->set_kernel_us((CUfunction)k->kernel, (unsigned)k->us);
	*out = k->kernel;
	pthread_mutex_unlock(&kernels_lock);
	return r ? cudaErrorInvalidDeviceFunction : cudaSuccess;
}

/* func: a CUkernel handed out by __cudaGetKernel/cudaGetKernel (nvcc's CUDA 13 stubs), else a
 * host function. */
static cudaError_t resolve_launch(const void *func, CUfunction *out)
{
	CUkernel kernel = NULL;
	cudaError_t err;

	if (!func)
		return cudaErrorInvalidDeviceFunction;
	pthread_mutex_lock(&kernels_lock);
	for (struct rt_kernel *k = rt_kernels; k; k = k->next)
		if (k->kernel && (const void *)k->kernel == func)
			kernel = k->kernel;
	pthread_mutex_unlock(&kernels_lock);
	if (!kernel) {
		err = kernel_of_func(func, &kernel);
		if (err)
			return err;
	}
	*out = (CUfunction)kernel;	/* cuLaunchKernel takes a CUkernel too (CUDA 12+) */
	return cudaSuccess;
}

static bool bad_config(dim3 grid, dim3 block)
{
	return !grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z ||
	       (unsigned long long)block.x * block.y * block.z > 1024 || block.z > 64 ||
	       grid.y > 65535 || grid.z > 65535;
}

static cudaError_t launch(const void *func, dim3 grid, dim3 block, void **args, size_t shmem,
			  cudaStream_t stream, bool ptsz, bool coop)
{
	CUfunction f;
	cudaError_t err;

	if (bad_config(grid, block))
		return ret(cudaErrorInvalidConfiguration);
	err = resolve_launch(func, &f);
	if (err)
		return ret(err);
	if (coop)
		return R((ptsz ? drv_pt : drv).cuLaunchCooperativeKernel(f, grid.x, grid.y, grid.z,
				block.x, block.y, block.z, (unsigned)shmem, stream, args));
	return R((ptsz ? drv_pt : drv).cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y,
						      block.z, (unsigned)shmem, stream, args, NULL));
}

cudaError_t CUDARTAPI cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
				       size_t sharedMem, cudaStream_t stream)
{
	RT_API(cudaLaunchKernel_v7000);
	return launch(func, gridDim, blockDim, args, sharedMem, stream, false, false);
}

cudaError_t CUDARTAPI cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
					    void **args, size_t sharedMem, cudaStream_t stream)
{
	RT_API(cudaLaunchKernel_ptsz_v7000);
	return launch(func, gridDim, blockDim, args, sharedMem, stream, true, false);
}

cudaError_t CUDARTAPI cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim,
						  void **args, size_t sharedMem,
						  cudaStream_t stream)
{
	RT_API(cudaLaunchCooperativeKernel_v9000);
	return launch(func, gridDim, blockDim, args, sharedMem, stream, false, true);
}

cudaError_t CUDARTAPI cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 gridDim,
						       dim3 blockDim, void **args,
						       size_t sharedMem, cudaStream_t stream)
{
	RT_API(cudaLaunchCooperativeKernel_ptsz_v9000);
	return launch(func, gridDim, blockDim, args, sharedMem, stream, true, true);
}

/* cudaLaunchAttribute and CUlaunchAttribute share ids and layout. */
static cudaError_t launch_ex(const cudaLaunchConfig_t *config, const void *func, void **args,
			     bool ptsz)
{
	CUlaunchConfig c;
	CUfunction f;
	cudaError_t err;

	_Static_assert(sizeof(cudaLaunchAttribute) == sizeof(CUlaunchAttribute),
		       "launch attributes share their layout");
	if (!config)
		return ret(cudaErrorInvalidValue);
	if (bad_config(config->gridDim, config->blockDim))
		return ret(cudaErrorInvalidConfiguration);
	err = resolve_launch(func, &f);
	if (err)
		return ret(err);
	c = (CUlaunchConfig){
		.gridDimX = config->gridDim.x, .gridDimY = config->gridDim.y,
		.gridDimZ = config->gridDim.z, .blockDimX = config->blockDim.x,
		.blockDimY = config->blockDim.y, .blockDimZ = config->blockDim.z,
		.sharedMemBytes = (unsigned)config->dynamicSmemBytes, .hStream = config->stream,
		.attrs = (CUlaunchAttribute *)config->attrs, .numAttrs = config->numAttrs,
	};
	return R((ptsz ? drv_pt : drv).cuLaunchKernelEx(&c, f, args, NULL));
}

cudaError_t CUDARTAPI cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
					  void **args)
{
	RT_API(cudaLaunchKernelExC_v11060);
	return launch_ex(config, func, args, false);
}

cudaError_t CUDARTAPI cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func,
					       void **args)
{
	RT_API(cudaLaunchKernelExC_ptsz_v11060);
	return launch_ex(config, func, args, true);
}

static cudaError_t get_kernel(cudaKernel_t *kernel, const void *func)
{
	cudaError_t err;

	if (!kernel || !func)
		return ret(cudaErrorInvalidValue);
	err = kernel_of_func(func, (CUkernel *)kernel);
	return ret(err);
}

/* The handle is the driver's CUkernel, never the stub address. */
cudaError_t CUDARTAPI __cudaGetKernel(cudaKernel_t *kernel, const void *func)
{
	RT_API(__cudaGetKernel_v13000);
	return get_kernel(kernel, func);
}

cudaError_t CUDARTAPI cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr)
{
	RT_API(cudaGetKernel_v12000);
	return get_kernel(kernelPtr, entryFuncAddr);
}

/*
 * As in the real libcudart.so.13: `push rbp; mov rbp,rsp; pop rbp; jmp cudaLaunchKernel`, a
 * tail jump with a 32-bit displacement straight to cudaLaunchKernel's own address (a hidden
 * alias: no PLT), so a tool sees one call, in cudaLaunchKernel, with the CUkernel as `func`.
 */
extern __typeof__(cudaLaunchKernel) rt_cudaLaunchKernel_local
	__attribute__((alias("cudaLaunchKernel"), visibility("hidden")));
extern __typeof__(cudaLaunchKernel_ptsz) rt_cudaLaunchKernel_ptsz_local
	__attribute__((alias("cudaLaunchKernel_ptsz"), visibility("hidden")));

__asm__(".text\n"
	".globl __cudaLaunchKernel\n"
	".type __cudaLaunchKernel, @function\n"
	".p2align 4\n"
	"__cudaLaunchKernel:\n"
	"\tpush %rbp\n"
	"\tmov %rsp, %rbp\n"
	"\tpop %rbp\n"
	"\t{disp32} jmp rt_cudaLaunchKernel_local\n"
	".size __cudaLaunchKernel, .-__cudaLaunchKernel\n"
	".globl __cudaLaunchKernel_ptsz\n"
	".type __cudaLaunchKernel_ptsz, @function\n"
	".p2align 4\n"
	"__cudaLaunchKernel_ptsz:\n"
	"\tpush %rbp\n"
	"\tmov %rsp, %rbp\n"
	"\tpop %rbp\n"
	"\t{disp32} jmp rt_cudaLaunchKernel_ptsz_local\n"
	".size __cudaLaunchKernel_ptsz, .-__cudaLaunchKernel_ptsz\n");

/* ---- allocations --------------------------------------------------------------------------- */

cudaError_t CUDARTAPI cudaMalloc(void **devPtr, size_t size)
{
	RT_API(cudaMalloc_v3020);
	if (!devPtr)
		return ret(cudaErrorInvalidValue);
	if (!size) {
		*devPtr = NULL;
		return cudaSuccess;
	}
	return R(drv.cuMemAlloc_v2((CUdeviceptr *)devPtr, size));
}

cudaError_t CUDARTAPI cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
	RT_API(cudaMallocManaged_v6000);
	if (!devPtr)
		return ret(cudaErrorInvalidValue);
	if (!size) {
		*devPtr = NULL;
		return cudaSuccess;
	}
	return R(drv.cuMemAllocManaged((CUdeviceptr *)devPtr, size, flags));
}

cudaError_t CUDARTAPI cudaMallocHost(void **ptr, size_t size)
{
	RT_API(cudaMallocHost_v3020);
	if (!ptr)
		return ret(cudaErrorInvalidValue);
	if (!size) {
		*ptr = NULL;
		return cudaSuccess;
	}
	return R(drv.cuMemAllocHost_v2(ptr, size));
}

cudaError_t CUDARTAPI cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	RT_API(cudaHostAlloc_v3020);
	if (!pHost)
		return ret(cudaErrorInvalidValue);
	if (!size) {
		*pHost = NULL;
		return cudaSuccess;
	}
	return R(drv.cuMemHostAlloc(pHost, size, flags));
}

cudaError_t CUDARTAPI cudaFree(void *devPtr)
{
	RT_API(cudaFree_v3020);
	if (!devPtr)
		return cudaSuccess;
	return R(drv.cuMemFree_v2((CUdeviceptr)devPtr));
}

cudaError_t CUDARTAPI cudaFreeHost(void *ptr)
{
	RT_API(cudaFreeHost_v3020);
	if (!ptr)
		return cudaSuccess;
	return R(drv.cuMemFreeHost(ptr));
}

cudaError_t CUDARTAPI cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
	RT_API(cudaMallocAsync_v11020);
	if (!devPtr)
		return ret(cudaErrorInvalidValue);
	if (!size) {
		*devPtr = NULL;
		return cudaSuccess;
	}
	return R(drv.cuMemAllocAsync((CUdeviceptr *)devPtr, size, hStream));
}

cudaError_t CUDARTAPI cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
	RT_API(cudaMallocAsync_ptsz_v11020);
	if (!devPtr)
		return ret(cudaErrorInvalidValue);
	if (!size) {
		*devPtr = NULL;
		return cudaSuccess;
	}
	return R(drv_pt.cuMemAllocAsync((CUdeviceptr *)devPtr, size, hStream));
}

cudaError_t CUDARTAPI cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
	RT_API(cudaFreeAsync_v11020);
	return R(drv.cuMemFreeAsync((CUdeviceptr)devPtr, hStream));
}

cudaError_t CUDARTAPI cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
	RT_API(cudaFreeAsync_ptsz_v11020);
	return R(drv_pt.cuMemFreeAsync((CUdeviceptr)devPtr, hStream));
}

/* ---- errors and versions ------------------------------------------------------------------ */

static const struct {
	int code;
	const char *name, *string;
} error_table[] = {
#include "errors.inc"
};

cudaError_t CUDARTAPI cudaGetLastError(void)
{
	cudaError_t err;

	RT_API(cudaGetLastError_v3020);
	err = last_error;
	last_error = cudaSuccess;
	return err;
}

cudaError_t CUDARTAPI cudaPeekAtLastError(void)
{
	RT_API(cudaPeekAtLastError_v3020);
	return last_error;
}

/* No driver needed, no record: they must work when the driver is missing. */
const char *CUDARTAPI cudaGetErrorName(cudaError_t error)
{
	for (size_t i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++)
		if (error_table[i].code == (int)error)
			return error_table[i].name;
	return "unrecognized error code";
}

const char *CUDARTAPI cudaGetErrorString(cudaError_t error)
{
	for (size_t i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++)
		if (error_table[i].code == (int)error)
			return error_table[i].string;
	return "unrecognized error code";
}

cudaError_t CUDARTAPI cudaRuntimeGetVersion(int *runtimeVersion)
{
	if (!runtimeVersion)
		return ret(cudaErrorInvalidValue);
	*runtimeVersion = CUDART_VERSION;
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDriverGetVersion(int *driverVersion)
{
	if (!driverVersion)
		return ret(cudaErrorInvalidValue);
	*driverVersion = rt_load() ? 0 : 13000;
	return cudaSuccess;
}

/* ---- devices ------------------------------------------------------------------------------ */

cudaError_t CUDARTAPI cudaGetDeviceCount(int *count)
{
	RT_API(cudaGetDeviceCount_v3020);
	if (!count)
		return ret(cudaErrorInvalidValue);
	*count = nr_devices;
	return nr_devices ? cudaSuccess : ret(cudaErrorNoDevice);
}

cudaError_t CUDARTAPI cudaSetDevice(int device)
{
	RT_API(cudaSetDevice_v3020);
	if (device < 0 || device >= nr_devices)
		return ret(cudaErrorInvalidDevice);
	return ret(make_current(device));
}

cudaError_t CUDARTAPI cudaGetDevice(int *device)
{
	RT_API(cudaGetDevice_v3020);
	if (!device)
		return ret(cudaErrorInvalidValue);
	*device = cur_device;
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceSynchronize(void)
{
	RT_API(cudaDeviceSynchronize_v3020);
	return R(drv.cuCtxSynchronize());
}

cudaError_t CUDARTAPI cudaDeviceReset(void)
{
	RT_API(cudaDeviceReset_v3020);
	return R(drv.cuCtxSynchronize());
}

/* An H100-like device; only what tools commonly read is filled. */
cudaError_t CUDARTAPI cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
	RT_API(cudaGetDeviceProperties_v12000);
	if (!prop)
		return ret(cudaErrorInvalidValue);
	if (device < 0 || device >= nr_devices)
		return ret(cudaErrorInvalidDevice);
	memset(prop, 0, sizeof(*prop));
	snprintf(prop->name, sizeof(prop->name), "TPSIM Simulated GPU");
	memcpy(prop->uuid.bytes, "TPSIM-GPU-UUID-", 15);
	prop->uuid.bytes[15] = (char)device;
	prop->totalGlobalMem = DEVICE_MEM_BYTES;
	prop->sharedMemPerBlock = 48 << 10;
	prop->sharedMemPerBlockOptin = 227 << 10;
	prop->sharedMemPerMultiprocessor = 228 << 10;
	prop->regsPerBlock = 65536;
	prop->regsPerMultiprocessor = 65536;
	prop->warpSize = 32;
	prop->memPitch = 2147483647;
	prop->maxThreadsPerBlock = 1024;
	prop->maxThreadsDim[0] = 1024;
	prop->maxThreadsDim[1] = 1024;
	prop->maxThreadsDim[2] = 64;
	prop->maxGridSize[0] = 2147483647;
	prop->maxGridSize[1] = 65535;
	prop->maxGridSize[2] = 65535;
	prop->totalConstMem = 64 << 10;
	prop->major = 9;
	prop->minor = 0;
	prop->multiProcessorCount = 132;
	prop->maxThreadsPerMultiProcessor = 2048;
	prop->maxBlocksPerMultiProcessor = 32;
	prop->memoryBusWidth = 5120;
	prop->l2CacheSize = 50 << 20;
	prop->pciBusID = 0x10 + device;
	prop->concurrentKernels = 1;
	prop->asyncEngineCount = 2;
	prop->unifiedAddressing = 1;
	prop->managedMemory = 1;
	prop->canMapHostMemory = 1;
	prop->cooperativeLaunch = 1;
	prop->streamPrioritiesSupported = 1;
	prop->memoryPoolsSupported = 1;
	return cudaSuccess;
}


/* ---- streams -------------------------------------------------------------------------------- */

static cudaError_t stream_create(cudaStream_t *pStream, unsigned int flags, int priority)
{
	if (!pStream || (flags & ~(unsigned int)cudaStreamNonBlocking))
		return ret(cudaErrorInvalidValue);
	return R(drv.cuStreamCreateWithPriority(pStream, flags, priority));
}

cudaError_t CUDARTAPI cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
						    int priority)
{
	RT_API(cudaStreamCreateWithPriority_v5050);
	return stream_create(pStream, flags, priority);
}

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	RT_API(cudaStreamCreateWithFlags_v5000);
	return stream_create(pStream, flags, 0);
}

cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *pStream)
{
	RT_API(cudaStreamCreate_v3020);
	return stream_create(pStream, cudaStreamDefault, 0);
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream)
{
	RT_API(cudaStreamDestroy_v5050);
	return R(drv.cuStreamDestroy_v2(stream));
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream)
{
	RT_API(cudaStreamSynchronize_v3020);
	return R(drv.cuStreamSynchronize(stream));
}

cudaError_t CUDARTAPI cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
	RT_API(cudaStreamSynchronize_ptsz_v7000);
	return R(drv_pt.cuStreamSynchronize(stream));
}

cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream)
{
	RT_API(cudaStreamQuery_v3020);
	return R(drv.cuStreamQuery(stream));
}

cudaError_t CUDARTAPI cudaStreamQuery_ptsz(cudaStream_t stream)
{
	RT_API(cudaStreamQuery_ptsz_v7000);
	return R(drv_pt.cuStreamQuery(stream));
}

cudaError_t CUDARTAPI cudaStreamGetId(cudaStream_t hStream, unsigned long long *streamId)
{
	RT_API(cudaStreamGetId_v12000);
	return R(drv.cuStreamGetId(hStream, streamId));
}

cudaError_t CUDARTAPI cudaStreamGetId_ptsz(cudaStream_t hStream, unsigned long long *streamId)
{
	RT_API(cudaStreamGetId_ptsz_v12000);
	return R(drv_pt.cuStreamGetId(hStream, streamId));
}

cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
	RT_API(cudaLaunchHostFunc_v10000);
	return R(drv.cuLaunchHostFunc(stream, fn, userData));
}

cudaError_t CUDARTAPI cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn,
					      void *userData)
{
	RT_API(cudaLaunchHostFunc_ptsz_v10000);
	return R(drv_pt.cuLaunchHostFunc(stream, fn, userData));
}

/* ---- events --------------------------------------------------------------------------------- */

static cudaError_t event_create(cudaEvent_t *event, unsigned int flags)
{
	if (!event || (flags & ~(unsigned int)(cudaEventBlockingSync | cudaEventDisableTiming |
					       cudaEventInterprocess)))
		return ret(cudaErrorInvalidValue);
	return R(drv.cuEventCreate(event, flags));
}

cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	RT_API(cudaEventCreateWithFlags_v3020);
	return event_create(event, flags);
}

cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t *event)
{
	RT_API(cudaEventCreate_v3020);
	return event_create(event, cudaEventDefault);
}

cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event)
{
	RT_API(cudaEventDestroy_v3020);
	return R(drv.cuEventDestroy_v2(event));
}

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	RT_API(cudaEventRecord_v3020);
	return R(drv.cuEventRecord(event, stream));
}

cudaError_t CUDARTAPI cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream)
{
	RT_API(cudaEventRecord_ptsz_v7000);
	return R(drv_pt.cuEventRecord(event, stream));
}

cudaError_t CUDARTAPI cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
					       unsigned int flags)
{
	RT_API(cudaEventRecordWithFlags_v11010);
	return R(drv.cuEventRecordWithFlags(event, stream, flags));
}

cudaError_t CUDARTAPI cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream,
						    unsigned int flags)
{
	RT_API(cudaEventRecordWithFlags_ptsz_v11010);
	return R(drv_pt.cuEventRecordWithFlags(event, stream, flags));
}

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
					  unsigned int flags)
{
	RT_API(cudaStreamWaitEvent_v3020);
	return R(drv.cuStreamWaitEvent(stream, event, flags));
}

cudaError_t CUDARTAPI cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event,
					       unsigned int flags)
{
	RT_API(cudaStreamWaitEvent_ptsz_v7000);
	return R(drv_pt.cuStreamWaitEvent(stream, event, flags));
}

cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event)
{
	RT_API(cudaEventQuery_v3020);
	return R(drv.cuEventQuery(event));
}

cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event)
{
	RT_API(cudaEventSynchronize_v3020);
	return R(drv.cuEventSynchronize(event));
}

cudaError_t CUDARTAPI cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
	RT_API(cudaEventElapsedTime_v12080);
	return R(drv.cuEventElapsedTime_v2(ms, start, end));
}

/* ---- copies and memsets ----------------------------------------------------------------------- */

static cudaError_t copy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
			bool ptsz)
{
	CUdeviceptr d = (CUdeviceptr)dst, s = (CUdeviceptr)src;
	__typeof__(drv) *t = ptsz ? &drv_pt : &drv;

	if ((unsigned int)kind > cudaMemcpyDefault)
		return ret(cudaErrorInvalidMemcpyDirection);
	switch (kind) {
	case cudaMemcpyHostToDevice: return R(t->cuMemcpyHtoD_v2(d, src, count));
	case cudaMemcpyDeviceToHost: return R(t->cuMemcpyDtoH_v2(dst, s, count));
	case cudaMemcpyDeviceToDevice: return R(t->cuMemcpyDtoD_v2(d, s, count));
	default: return R(t->cuMemcpy(d, s, count));
	}
}

cudaError_t CUDARTAPI cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	RT_API(cudaMemcpy_v3020);
	return copy(dst, src, count, kind, false);
}

cudaError_t CUDARTAPI cudaMemcpy_ptds(void *dst, const void *src, size_t count,
				      enum cudaMemcpyKind kind)
{
	RT_API(cudaMemcpy_ptds_v7000);
	return copy(dst, src, count, kind, true);
}

static cudaError_t copy_async(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
			      cudaStream_t stream, bool ptsz)
{
	if ((unsigned int)kind > cudaMemcpyDefault)
		return ret(cudaErrorInvalidMemcpyDirection);
	return R((ptsz ? drv_pt : drv).cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, count,
						     stream));
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void *dst, const void *src, size_t count,
				      enum cudaMemcpyKind kind, cudaStream_t stream)
{
	RT_API(cudaMemcpyAsync_v3020);
	return copy_async(dst, src, count, kind, stream, false);
}

cudaError_t CUDARTAPI cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count,
					   enum cudaMemcpyKind kind, cudaStream_t stream)
{
	RT_API(cudaMemcpyAsync_ptsz_v7000);
	return copy_async(dst, src, count, kind, stream, true);
}

static cudaError_t copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
			  size_t height, enum cudaMemcpyKind kind, cudaStream_t stream, bool ptsz,
			  bool async)
{
	bool sdev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
	bool ddev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
	CUDA_MEMCPY2D c = {
		.srcMemoryType = kind == cudaMemcpyDefault ? CU_MEMORYTYPE_UNIFIED :
				 sdev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST,
		.srcHost = src, .srcDevice = (CUdeviceptr)src, .srcPitch = spitch,
		.dstMemoryType = kind == cudaMemcpyDefault ? CU_MEMORYTYPE_UNIFIED :
				 ddev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST,
		.dstHost = dst, .dstDevice = (CUdeviceptr)dst, .dstPitch = dpitch,
		.WidthInBytes = width, .Height = height,
	};

	if ((unsigned int)kind > cudaMemcpyDefault)
		return ret(cudaErrorInvalidMemcpyDirection);
	if (height > 1 && (width > dpitch || width > spitch))
		return ret(cudaErrorInvalidPitchValue);
	if (async)
		return R((ptsz ? drv_pt : drv).cuMemcpy2DAsync_v2(&c, stream));
	return R((ptsz ? drv_pt : drv).cuMemcpy2D_v2(&c));
}

cudaError_t CUDARTAPI cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch,
				   size_t width, size_t height, enum cudaMemcpyKind kind)
{
	RT_API(cudaMemcpy2D_v3020);
	return copy2d(dst, dpitch, src, spitch, width, height, kind, NULL, false, false);
}

cudaError_t CUDARTAPI cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch,
					size_t width, size_t height, enum cudaMemcpyKind kind)
{
	RT_API(cudaMemcpy2D_ptds_v7000);
	return copy2d(dst, dpitch, src, spitch, width, height, kind, NULL, true, false);
}

cudaError_t CUDARTAPI cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
					size_t width, size_t height, enum cudaMemcpyKind kind,
					cudaStream_t stream)
{
	RT_API(cudaMemcpy2DAsync_v3020);
	return copy2d(dst, dpitch, src, spitch, width, height, kind, stream, false, true);
}

cudaError_t CUDARTAPI cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src,
					     size_t spitch, size_t width, size_t height,
					     enum cudaMemcpyKind kind, cudaStream_t stream)
{
	RT_API(cudaMemcpy2DAsync_ptsz_v7000);
	return copy2d(dst, dpitch, src, spitch, width, height, kind, stream, true, true);
}

cudaError_t CUDARTAPI cudaMemset(void *devPtr, int value, size_t count)
{
	RT_API(cudaMemset_v3020);
	return R(drv.cuMemsetD8_v2((CUdeviceptr)devPtr, (unsigned char)value, count));
}

cudaError_t CUDARTAPI cudaMemset_ptds(void *devPtr, int value, size_t count)
{
	RT_API(cudaMemset_ptds_v7000);
	return R(drv_pt.cuMemsetD8_v2((CUdeviceptr)devPtr, (unsigned char)value, count));
}

cudaError_t CUDARTAPI cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	RT_API(cudaMemsetAsync_v3020);
	return R(drv.cuMemsetD8Async((CUdeviceptr)devPtr, (unsigned char)value, count, stream));
}

cudaError_t CUDARTAPI cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count,
					   cudaStream_t stream)
{
	RT_API(cudaMemsetAsync_ptsz_v7000);
	return R(drv_pt.cuMemsetD8Async((CUdeviceptr)devPtr, (unsigned char)value, count, stream));
}

/* <<<grid, block, shmem, stream>>> pushes its configuration, the host stub pops it. */
#define CALL_CONFIG_DEPTH 16
static __thread struct {
	dim3 grid, block;
	size_t shmem;
	cudaStream_t stream;
} call_config[CALL_CONFIG_DEPTH];
static __thread int call_config_top;

unsigned CUDARTAPI __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
					       struct CUstream_st *stream)
{
	RT_API(__cudaPushCallConfiguration_v13000);
	if (call_config_top >= CALL_CONFIG_DEPTH)
		return 1;
	call_config[call_config_top].grid = gridDim;
	call_config[call_config_top].block = blockDim;
	call_config[call_config_top].shmem = sharedMem;
	call_config[call_config_top].stream = stream;
	call_config_top++;
	return 0;
}

cudaError_t CUDARTAPI __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
						 void *stream)
{
	RT_API(__cudaPopCallConfiguration_v13000);
	if (call_config_top == 0)
		return ret(cudaErrorMissingConfiguration);
	call_config_top--;
	*gridDim = call_config[call_config_top].grid;
	*blockDim = call_config[call_config_top].block;
	*sharedMem = call_config[call_config_top].shmem;
	*(cudaStream_t *)stream = call_config[call_config_top].stream;
	return cudaSuccess;
}

/* ---- module registration (nvcc's static constructors): remembered, loaded at first use ---- */

void **CUDARTAPI __cudaRegisterFatBinary(void *fatCubin)
{
	void **handle = malloc(sizeof(*handle));

	if (handle)
		*handle = fatCubin;
	return handle;
}

void CUDARTAPI __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
}

void CUDARTAPI __cudaUnregisterFatBinary(void **fatCubinHandle)
{
	free(fatCubinHandle);
}

char CUDARTAPI __cudaInitModule(void **fatCubinHandle)
{
	return 1;
}

void CUDARTAPI __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
				      const char *deviceName, int thread_limit, uint3 *tid,
				      uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize)
{
	struct rt_kernel *k;

	pthread_mutex_lock(&kernels_lock);
	k = kernel_find_locked(hostFun);
	if (!k) {
		kernel_add_locked(hostFun, deviceName);
	} else if (deviceName && !k->kernel) {
		free(k->name);
		k->name = strdup(deviceName);
	}
	pthread_mutex_unlock(&kernels_lock);
}

void CUDARTAPI __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
				 const char *deviceName, int ext, size_t size, int constant,
				 int global)
{
	/* Device memory is host memory: the host shadow is the variable. */
}

void CUDARTAPI __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress,
					char *deviceAddress, const char *deviceName, int ext,
					size_t size, int constant, int global)
{
	/* Host code reaches a __managed__ variable through this pointer. Not the driver's
	 * managed memory: this runs in a constructor, before any driver is loaded. */
	if (hostVarPtrAddress)
		*hostVarPtrAddress = calloc(1, size ? size : 1);
}

/* ---- stream capture and graphs ----------------------------------------------------------------- */

cudaError_t CUDARTAPI cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
	RT_API(cudaStreamBeginCapture_v10000);
	return R(drv.cuStreamBeginCapture_v2(stream, (CUstreamCaptureMode)mode));
}

cudaError_t CUDARTAPI cudaStreamBeginCapture_ptsz(cudaStream_t stream,
						  enum cudaStreamCaptureMode mode)
{
	RT_API(cudaStreamBeginCapture_ptsz_v10000);
	return R(drv_pt.cuStreamBeginCapture_v2(stream, (CUstreamCaptureMode)mode));
}

cudaError_t CUDARTAPI cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
	RT_API(cudaStreamEndCapture_v10000);
	return R(drv.cuStreamEndCapture(stream, (CUgraph *)pGraph));
}

cudaError_t CUDARTAPI cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph)
{
	RT_API(cudaStreamEndCapture_ptsz_v10000);
	return R(drv_pt.cuStreamEndCapture(stream, (CUgraph *)pGraph));
}

cudaError_t CUDARTAPI cudaStreamIsCapturing(cudaStream_t stream,
					    enum cudaStreamCaptureStatus *pCaptureStatus)
{
	RT_API(cudaStreamIsCapturing_v10000);
	return R(drv.cuStreamIsCapturing(stream, (CUstreamCaptureStatus *)pCaptureStatus));
}

cudaError_t CUDARTAPI cudaStreamIsCapturing_ptsz(cudaStream_t stream,
						 enum cudaStreamCaptureStatus *pCaptureStatus)
{
	RT_API(cudaStreamIsCapturing_ptsz_v10000);
	return R(drv_pt.cuStreamIsCapturing(stream, (CUstreamCaptureStatus *)pCaptureStatus));
}

/* CUDA 13's cudaStreamGetCaptureInfo (the 12.3 signature): the graph and dependencies out
 * parameters are not simulated (NULL when asked for). */
static cudaError_t capture_info(cudaStream_t stream, enum cudaStreamCaptureStatus *status,
				unsigned long long *id, cudaGraph_t *graph,
				const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
				size_t *nr_deps, bool ptsz)
{
	cuuint64_t cid = 0;
	CUresult r = (ptsz ? drv_pt : drv).cuStreamGetCaptureInfo(stream,
							(CUstreamCaptureStatus *)status, &cid);

	if (r)
		return R(r);
	if (id)
		*id = cid;
	if (graph)
		*graph = NULL;
	if (deps)
		*deps = NULL;
	if (edges)
		*edges = NULL;
	if (nr_deps)
		*nr_deps = 0;
	return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamGetCaptureInfo(cudaStream_t stream,
					       enum cudaStreamCaptureStatus *captureStatus_out,
					       unsigned long long *id_out, cudaGraph_t *graph_out,
					       const cudaGraphNode_t **dependencies_out,
					       const cudaGraphEdgeData **edgeData_out,
					       size_t *numDependencies_out)
{
	RT_API(cudaStreamGetCaptureInfo_v12030);
	return capture_info(stream, captureStatus_out, id_out, graph_out, dependencies_out,
			    edgeData_out, numDependencies_out, false);
}

cudaError_t CUDARTAPI cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream,
						    enum cudaStreamCaptureStatus *captureStatus_out,
						    unsigned long long *id_out,
						    cudaGraph_t *graph_out,
						    const cudaGraphNode_t **dependencies_out,
						    const cudaGraphEdgeData **edgeData_out,
						    size_t *numDependencies_out)
{
	RT_API(cudaStreamGetCaptureInfo_ptsz_v12030);
	return capture_info(stream, captureStatus_out, id_out, graph_out, dependencies_out,
			    edgeData_out, numDependencies_out, true);
}

cudaError_t CUDARTAPI cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags)
{
	RT_API(cudaGraphCreate_v10000);
	return R(drv.cuGraphCreate((CUgraph *)pGraph, flags));
}

cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t graph)
{
	RT_API(cudaGraphDestroy_v10000);
	return R(drv.cuGraphDestroy((CUgraph)graph));
}

cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
					   unsigned long long flags)
{
	RT_API(cudaGraphInstantiate_v12000);
	return R(drv.cuGraphInstantiateWithFlags((CUgraphExec *)pGraphExec, (CUgraph)graph, flags));
}

cudaError_t CUDARTAPI cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
						    unsigned long long flags)
{
	RT_API(cudaGraphInstantiateWithFlags_v11040);
	return R(drv.cuGraphInstantiateWithFlags((CUgraphExec *)pGraphExec, (CUgraph)graph, flags));
}

cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
	RT_API(cudaGraphExecDestroy_v10000);
	return R(drv.cuGraphExecDestroy((CUgraphExec)graphExec));
}

cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	RT_API(cudaGraphLaunch_v10000);
	return R(drv.cuGraphLaunch((CUgraphExec)graphExec, stream));
}

cudaError_t CUDARTAPI cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	RT_API(cudaGraphLaunch_ptsz_v10000);
	return R(drv_pt.cuGraphLaunch((CUgraphExec)graphExec, stream));
}

/* ---- sim-only API (tpsim.h): forwarded to the driver's private table ------------------------ */

void tpsim_set_observer(tpsim_observer_fn fn, void *ctx)
{
	if (!rt_load())
		ops->set_observer(fn, ctx);
}

void tpsim_set_api_observer(tpsim_api_observer_fn fn, void *ctx)
{
	if (!rt_load())
		ops->set_api_observer(fn, ctx);
}

uint64_t tpsim_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

int tpsim_enqueue(cudaStream_t s, void (*fn)(void *arg), void *arg)
{
	return rt_load() ? (int)rt_load() : ops->enqueue(s, fn, arg);
}

int tpsim_enqueue_kernel(cudaStream_t s, const char *name, dim3 grid, dim3 block,
			 void (*fn)(void *arg), void *arg)
{
	return rt_load() ? (int)rt_load() : ops->enqueue_kernel(s, name, grid, block, fn, arg);
}

int64_t tpsim_stream_id(cudaStream_t s)
{
	return rt_load() ? -1 : ops->stream_id(s);
}

int tpsim_set_function_body(void *function, void (*fn)(void *arg))
{
	return rt_load() ? CUDA_ERROR_NOT_INITIALIZED : ops->set_function_body(function, fn);
}

/* Before the kernel is loaded the duration waits in the runtime's entry (no driver call). */
void tpsim_set_kernel_us(const void *func, unsigned us)
{
	struct rt_kernel *k;

	if (rt_load())
		return;
	pthread_mutex_lock(&kernels_lock);
	k = kernel_find_locked(func);
	if (!k)
		k = kernel_add_locked(func, NULL);
	if (k) {
		k->us = us;
		if (k->kernel)
			ops->set_kernel_us((CUfunction)k->kernel, us);
	}
	pthread_mutex_unlock(&kernels_lock);
}
