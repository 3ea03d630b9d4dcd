// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * triton_app: a torch.compile-shaped process. The runtime (libcudart) allocates, copies and
 * synchronizes, as PyTorch does; the "compiled" kernels go through the DRIVER API, the way
 * Triton's launcher calls them: the launcher dlopens libcuda.so.1 (already mapped under the
 * runtime), loads each compiled kernel's image with cuModuleLoadData, gets its CUfunction with
 * cuModuleGetFunction(&f, mod, "triton_…"), and launches with cuLaunchKernelEx (launch attributes)
 * or cuLaunchKernel. One kernel comes through the library API instead (cuLibraryLoadData +
 * cuLibraryGetKernel + cuKernelGetFunction), as CUDA 12+ JIT paths do.
 *
 * Usage: triton_app [--steps N (3)] [--load-before] [--hold]
 *   Before READY: cudaStreamCreate, cudaMalloc x3 (1 MiB), the driver's entry points (dlsym).
 *   --load-before: the modules are loaded and the functions looked up BEFORE READY, so a tracer
 *   attached later never sees their names (it must learn them from CUPTI, or say "unresolved").
 *   After GO (modules loaded now unless --load-before), per step, on the created stream:
 *     1. cuLaunchKernelEx(triton_poi_fused_add_0, grid (256,1,1), block (128,1,1), shmem 0,
 *        attrs: CLUSTER_DIMENSION (1,1,1), PRIORITY 0)
 *     2. cuLaunchKernel(triton_red_fused_sum_1, grid (64,1,1), block (256,1,1), shmem 1024)
 *     3. cuLaunchKernelEx(triton_per_fused_softmax_2, grid (32,4,1), block (64,2,1), shmem 2048,
 *        no attributes)  [library path]
 *     4. cudaGetLastError (PyTorch checks every launch)
 *   then cudaMemcpyAsync DtoH 4096 B and cudaStreamSynchronize.
 *   Each kernel's geometry is printed before READY as
 *   "# kernel=<name> grid=x,y,z block=x,y,z shmem=N api=<launch function>".
 */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include "handshake.h"

#define NR_KERNELS 3

static const struct {
	const char *name;
	unsigned grid[3], block[3], shmem;
	const char *api;
	int library;		/* looked up through cuLibraryGetKernel + cuKernelGetFunction */
} kernels[NR_KERNELS] = {
	{ "triton_poi_fused_add_0", { 256, 1, 1 }, { 128, 1, 1 }, 0, "cuLaunchKernelEx", 0 },
	{ "triton_red_fused_sum_1", { 64, 1, 1 }, { 256, 1, 1 }, 1024, "cuLaunchKernel", 0 },
	{ "triton_per_fused_softmax_2", { 32, 4, 1 }, { 64, 2, 1 }, 2048, "cuLaunchKernelEx", 1 },
};

/* The driver as Triton's launcher reaches it: dlsym on libcuda.so.1. */
static struct {
	CUresult (*module_load_data)(CUmodule *, const void *);
	CUresult (*module_get_function)(CUfunction *, CUmodule, const char *);
	CUresult (*library_load_data)(CUlibrary *, const void *, CUjit_option *, void **,
				      unsigned int, CUlibraryOption *, void **, unsigned int);
	CUresult (*library_get_kernel)(CUkernel *, CUlibrary, const char *);
	CUresult (*kernel_get_function)(CUfunction *, CUkernel);
	CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
				  unsigned, unsigned, CUstream, void **, void **);
	CUresult (*launch_kernel_ex)(const CUlaunchConfig *, CUfunction, void **, void **);
} drv;

/* A compiled kernel's image: PTX text with one .entry per kernel (Triton hands the driver a
 * cubin; PTX is the form both the real driver and the simulated one accept without a GPU
 * compiler behind it; the simulated driver rejects images that are neither). */
#define PTX_ENTRY(name) ".visible .entry " name "(.param .u64 p0)\n{\n\tret;\n}\n"
static const char image[] = ".version 8.8\n.target sm_90\n.address_size 64\n"
	PTX_ENTRY("triton_poi_fused_add_0") PTX_ENTRY("triton_red_fused_sum_1")
	PTX_ENTRY("triton_per_fused_softmax_2");

static void check_rt(cudaError_t err, const char *what)
{
	if (err != cudaSuccess) {
		fprintf(stderr, "triton_app: %s: %s\n", what, cudaGetErrorString(err));
		exit(1);
	}
}

static void check_drv(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS) {
		fprintf(stderr, "triton_app: %s: CUresult %d\n", what, (int)r);
		exit(1);
	}
}

static void *need(void *lib, const char *sym)
{
	void *p = dlsym(lib, sym);

	if (!p) {
		fprintf(stderr, "triton_app: libcuda.so.1 has no %s\n", sym);
		exit(1);
	}
	return p;
}

static void load_driver(void)
{
	/* the runtime has mapped it already: this finds that copy by its soname */
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);

	if (!lib)
		lib = dlopen("libcuda.so.1", RTLD_NOW);
	if (!lib) {
		fprintf(stderr, "triton_app: dlopen libcuda.so.1: %s\n", dlerror());
		exit(1);
	}
	*(void **)&drv.module_load_data = need(lib, "cuModuleLoadData");
	*(void **)&drv.module_get_function = need(lib, "cuModuleGetFunction");
	*(void **)&drv.library_load_data = need(lib, "cuLibraryLoadData");
	*(void **)&drv.library_get_kernel = need(lib, "cuLibraryGetKernel");
	*(void **)&drv.kernel_get_function = need(lib, "cuKernelGetFunction");
	*(void **)&drv.launch_kernel = need(lib, "cuLaunchKernel");
	*(void **)&drv.launch_kernel_ex = need(lib, "cuLaunchKernelEx");
}

static void load_kernels(CUfunction *f)
{
	CUmodule mod;
	CUlibrary lib;
	CUkernel k;

	check_drv(drv.module_load_data(&mod, image), "cuModuleLoadData");
	check_drv(drv.library_load_data(&lib, image, NULL, NULL, 0, NULL, NULL, 0),
		  "cuLibraryLoadData");
	for (int i = 0; i < NR_KERNELS; i++) {
		if (kernels[i].library) {
			check_drv(drv.library_get_kernel(&k, lib, kernels[i].name), "cuLibraryGetKernel");
			check_drv(drv.kernel_get_function(&f[i], k), "cuKernelGetFunction");
		} else {
			check_drv(drv.module_get_function(&f[i], mod, kernels[i].name),
				  "cuModuleGetFunction");
		}
	}
}

static void launch(CUfunction f, int i, CUstream s, void **params)
{
	CUlaunchAttribute attrs[2];
	CUlaunchConfig cfg = {
		.gridDimX = kernels[i].grid[0], .gridDimY = kernels[i].grid[1],
		.gridDimZ = kernels[i].grid[2], .blockDimX = kernels[i].block[0],
		.blockDimY = kernels[i].block[1], .blockDimZ = kernels[i].block[2],
		.sharedMemBytes = kernels[i].shmem, .hStream = s,
	};

	if (!strcmp(kernels[i].api, "cuLaunchKernel")) {
		check_drv(drv.launch_kernel(f, kernels[i].grid[0], kernels[i].grid[1],
					    kernels[i].grid[2], kernels[i].block[0],
					    kernels[i].block[1], kernels[i].block[2],
					    kernels[i].shmem, s, params, NULL), "cuLaunchKernel");
		return;
	}
	if (i == 0) {
		/* what Triton's launcher sets: cluster dims, and a priority here for a second id */
		memset(attrs, 0, sizeof(attrs));
		attrs[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
		attrs[0].value.clusterDim.x = 1;
		attrs[0].value.clusterDim.y = 1;
		attrs[0].value.clusterDim.z = 1;
		attrs[1].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
		attrs[1].value.priority = 0;
		cfg.attrs = attrs;
		cfg.numAttrs = 2;
	}
	check_drv(drv.launch_kernel_ex(&cfg, f, params, NULL), "cuLaunchKernelEx");
}

int main(int argc, char **argv)
{
	CUfunction f[NR_KERNELS];
	void *x, *y, *out, *params[3];
	static char host[4096];
	cudaStream_t s;
	int steps = 3, hold = 0, load_before = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--steps") && i + 1 < argc)
			steps = (int)hs_parse_long(argv[i], argv[i + 1]), i++;
		else if (!strcmp(argv[i], "--load-before"))
			load_before = 1;
		else if (!strcmp(argv[i], "--hold"))
			hold = 1;
		else {
			fprintf(stderr, "usage: triton_app [--steps N] [--load-before] [--hold]\n");
			return 2;
		}
	}
	check_rt(cudaSetDevice(0), "cudaSetDevice");
	check_rt(cudaStreamCreate(&s), "cudaStreamCreate");
	check_rt(cudaMalloc(&x, 1 << 20), "cudaMalloc");
	check_rt(cudaMalloc(&y, 1 << 20), "cudaMalloc");
	check_rt(cudaMalloc(&out, 1 << 20), "cudaMalloc");
	params[0] = &x;
	params[1] = &y;
	params[2] = &out;
	load_driver();
	if (load_before)
		load_kernels(f);
	for (int i = 0; i < NR_KERNELS; i++)
		hs_info("kernel=%s grid=%u,%u,%u block=%u,%u,%u shmem=%u api=%s", kernels[i].name,
			kernels[i].grid[0], kernels[i].grid[1], kernels[i].grid[2],
			kernels[i].block[0], kernels[i].block[1], kernels[i].block[2],
			kernels[i].shmem, kernels[i].api);
	hs_info("stream=0x%llx", (unsigned long long)(uintptr_t)s);
	hs_ready_wait_go();
	if (!load_before)
		load_kernels(f);
	for (int step = 0; step < steps; step++) {
		for (int i = 0; i < NR_KERNELS; i++) {
			launch(f[i], i, (CUstream)s, params);
			check_rt(cudaGetLastError(), "launch check");
		}
		check_rt(cudaMemcpyAsync(host, out, sizeof(host), cudaMemcpyDeviceToHost, s),
			 "cudaMemcpyAsync");
		check_rt(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	}
	hs_done(hold);
	return 0;
}
