// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * alloc_app: GPU memory scenarios on the simulated caching allocator (tests/sim/alloc,
 * libtpsim_alloc.so, USDT pytorch:malloc/free) and the simulated runtime (tests/sim/cudart).
 * Built with frame pointers so user stacks walk through the call sites.
 *
 * Usage: alloc_app [--scenario normal|leak|oom|preattach|fragment|packed] [--hold]
 *
 * Before READY: cudaStreamCreate(&S) (S printed as "# stream 0x..."). Nothing is allocated.
 * Every block handed out is printed as "# malloc 0x<ptr> <size>", every direct runtime
 * allocation as "# <api> 0x<ptr> <size>". Sizes below are bytes requested.
 *
 * normal (after GO, in this order, all on device 0, stream S):
 *   1. tpsim_alloc_malloc 1000 x3     -> cudaMalloc(2097152)    (small pool, one 2 MiB segment)
 *   2. tpsim_alloc_malloc 3145728 x2  -> cudaMalloc(20971520)   (large pool, one 20 MiB segment)
 *   3. tpsim_alloc_malloc 16777216 x1 -> cudaMalloc(16777216)   (14 MiB left in the 20 MiB one)
 *   4. tpsim_alloc_free of the 6 blocks, in allocation order (segments stay cached)
 *   5. cudaMallocHost(4096), cudaFreeHost; cudaHostAlloc(8192, cudaHostAllocPortable), cudaFreeHost;
 *      cudaMallocManaged(16384, cudaMemAttachGlobal), cudaFree;
 *      cudaMallocAsync(65536, S), cudaFreeAsync(S), cudaStreamSynchronize(S)
 *   6. tpsim_alloc_empty_cache()      -> cudaFree of the 3 segments
 *   Totals: USDT malloc 6 / free 6; cudaMalloc 3, cudaFree 4, cudaMallocHost 1, cudaHostAlloc 1,
 *   cudaFreeHost 2, cudaMallocManaged 1, cudaMallocAsync 1, cudaFreeAsync 1. Peak device bytes
 *   requested 3*1000 + 2*3145728 + 16777216 = 23071672; peak reserved 2+20+16 MiB = 39845888.
 *
 * leak (after GO):
 *   1. leak_site_a(): tpsim_alloc_malloc 4096 x3, never freed
 *   2. leak_site_b(): tpsim_alloc_malloc 2097152 x2, never freed (one 20 MiB segment)
 *   3. transient():   tpsim_alloc_malloc 8192 x1, freed
 *   Live at DONE: 3 x 4096 from leak_site_a, 2 x 2097152 from leak_site_b.
 *
 * oom (run with TPSIM_MEM_LIMIT_BYTES=67108864; after GO):
 *   1. p1 = malloc 41943040 -> cudaMalloc(41943040) = 0; free p1 (cached)
 *   2. p2 = malloc 50331648 -> cudaMalloc(50331648) = 2 (cudaErrorMemoryAllocation); the
 *      allocator releases the cached 40 MiB segment (cudaFree) and retries: = 0
 *   3. p3 = malloc 33554432 -> cudaMalloc(33554432) = 2, nothing cached: NULL ("# oom 33554432")
 *   4. free p2; tpsim_alloc_empty_cache() -> cudaFree(48 MiB segment)
 *   Totals: USDT malloc 2 / free 2; cudaMalloc 4 (2 failed with 2), cudaFree 2.
 *
 * preattach: memory allocated before attach, used after it (what a long-running job shows).
 *   Before READY: a = malloc 1000 (one 2 MiB small segment), b = malloc 3145728 (one 20 MiB
 *   segment), c = malloc 4096, x = malloc 33554432 (one 32 MiB segment); printed as
 *   "# before 0x<ptr> <size>".
 *   After GO (no cudaMalloc: everything fits the cached segments):
 *   1. free a, free x              (allocated before attach: frees_unknown 2)
 *   2. d = malloc 1000, e = malloc 1000; free d   (in the small segment, d where a was)
 *   3. f = malloc 3145728; free f  (in the 20 MiB segment, after b)
 *   4. g = malloc 2048             (small segment)
 *   5. y = malloc 33554432 (x's segment, at its start); free y
 *   6. tpsim_alloc_empty_cache()   -> cudaFree of the 32 MiB segment, never seen allocated
 *   Live at DONE and seen: e, g. USDT malloc 5 / free 3 seen (+2 unknown); cudaFree 1 unknown.
 *
 * fragment: the caching allocator holds memory no tensor uses (after GO):
 *   1. 32 x malloc 16777216 -> 32 x cudaMalloc(16777216)  (each its own segment: 512 MiB)
 *   2. free 24 of them, every one but each 4th (cached: 128 MiB allocated, 512 reserved)
 *   3. 2 x malloc 20971520 -> 2 x cudaMalloc(20971520)    (no 16 MiB block fits)
 *      peak reserved 552 MiB with 128 + 40 = 168 MiB allocated: 384 MiB unused at the peak;
 *      peak allocated 512 MiB (step 1)
 *   4. free the rest; tpsim_alloc_empty_cache() -> cudaFree of the 34 segments
 * packed: the same allocations without step 2's frees (steps 1, 3, 4): peak reserved 552 MiB,
 *   all of it allocated at the peak.
 * (The sim's device memory is not touched beyond a few MiB: the RAM is not committed.)
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "handshake.h"
#include "tpsim_alloc.h"

static cudaStream_t S;
static void *kept[16];
static int nr_kept;

static void *block(size_t size)
{
	void *p = tpsim_alloc_malloc(size, 0, S);

	if (p)
		hs_info("malloc %p %zu", p, size);
	else
		hs_info("oom %zu", size);
	return p;
}

/* The leak sites call the allocator themselves: they are the first frames outside it. */
__attribute__((noinline)) static void leak_site_a(void)
{
	for (int i = 0; i < 3; i++) {
		kept[nr_kept] = tpsim_alloc_malloc(4096, 0, S);
		hs_info("malloc %p 4096", kept[nr_kept++]);
	}
	__asm__ volatile("" ::: "memory");	/* no tail call: the return address stays here */
}

__attribute__((noinline)) static void leak_site_b(void)
{
	for (int i = 0; i < 2; i++) {
		kept[nr_kept] = tpsim_alloc_malloc(2097152, 0, S);
		hs_info("malloc %p 2097152", kept[nr_kept++]);
	}
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void transient(void)
{
	tpsim_alloc_free(block(8192));
	__asm__ volatile("" ::: "memory");
}

static void check(cudaError_t err, const char *what)
{
	if (err != cudaSuccess) {
		fprintf(stderr, "alloc_app: %s failed: %d\n", what, (int)err);
		exit(1);
	}
}

static void normal(void)
{
	static const size_t sizes[] = { 1000, 1000, 1000, 3145728, 3145728, 16777216 };
	void *p[6], *h = NULL, *m = NULL, *a = NULL;

	for (int i = 0; i < 6; i++)
		p[i] = block(sizes[i]);
	for (int i = 0; i < 6; i++)
		tpsim_alloc_free(p[i]);
	check(cudaMallocHost(&h, 4096), "cudaMallocHost");
	hs_info("cudaMallocHost %p 4096", h);
	check(cudaFreeHost(h), "cudaFreeHost");
	check(cudaHostAlloc(&h, 8192, cudaHostAllocPortable), "cudaHostAlloc");
	hs_info("cudaHostAlloc %p 8192", h);
	check(cudaFreeHost(h), "cudaFreeHost");
	check(cudaMallocManaged(&m, 16384, cudaMemAttachGlobal), "cudaMallocManaged");
	hs_info("cudaMallocManaged %p 16384", m);
	check(cudaFree(m), "cudaFree");
	check(cudaMallocAsync(&a, 65536, S), "cudaMallocAsync");
	hs_info("cudaMallocAsync %p 65536", a);
	check(cudaFreeAsync(a, S), "cudaFreeAsync");
	check(cudaStreamSynchronize(S), "cudaStreamSynchronize");
	hs_info("released %d", tpsim_alloc_empty_cache());
}

static void preattach_before(void)
{
	static const size_t sizes[] = { 1000, 3145728, 4096, 33554432 };

	for (int i = 0; i < 4; i++) {
		kept[nr_kept] = tpsim_alloc_malloc(sizes[i], 0, S);
		hs_info("before %p %zu", kept[nr_kept++], sizes[i]);
	}
}

static void preattach_after(void)
{
	void *d;

	tpsim_alloc_free(kept[0]);
	tpsim_alloc_free(kept[3]);
	d = block(1000);
	block(1000);
	tpsim_alloc_free(d);
	tpsim_alloc_free(block(3145728));
	block(2048);
	tpsim_alloc_free(block(33554432));
	hs_info("released %d", tpsim_alloc_empty_cache());
}

static void fragment(bool free_some)
{
	void *p[34];

	for (int i = 0; i < 32; i++)
		p[i] = block(16777216);
	if (free_some)
		for (int i = 0; i < 32; i++)
			if (i % 4) {
				tpsim_alloc_free(p[i]);
				p[i] = NULL;
			}
	for (int i = 32; i < 34; i++)
		p[i] = block(20971520);
	for (int i = 0; i < 34; i++)
		if (p[i])
			tpsim_alloc_free(p[i]);
	hs_info("released %d", tpsim_alloc_empty_cache());
}

static void oom(void)
{
	void *p1, *p2;

	p1 = block(41943040);
	tpsim_alloc_free(p1);
	p2 = block(50331648);
	block(33554432);
	tpsim_alloc_free(p2);
	hs_info("released %d", tpsim_alloc_empty_cache());
}

int main(int argc, char **argv)
{
	const char *scenario = "normal";
	int hold = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--scenario") && i + 1 < argc)
			scenario = argv[++i];
		else if (!strcmp(argv[i], "--hold"))
			hold = 1;
		else {
			fprintf(stderr, "usage: alloc_app [--scenario normal|leak|oom|preattach|"
				"fragment|packed] [--hold]\n");
			return 2;
		}
	}
	if (strcmp(scenario, "normal") && strcmp(scenario, "leak") && strcmp(scenario, "oom") &&
	    strcmp(scenario, "preattach") && strcmp(scenario, "fragment") &&
	    strcmp(scenario, "packed")) {
		fprintf(stderr, "alloc_app: unknown scenario '%s'\n", scenario);
		return 2;
	}
	check(cudaStreamCreate(&S), "cudaStreamCreate");
	hs_info("stream %p", (void *)S);
	if (!strcmp(scenario, "preattach"))
		preattach_before();
	hs_ready_wait_go();
	if (!strcmp(scenario, "normal")) {
		normal();
	} else if (!strcmp(scenario, "preattach")) {
		preattach_after();
	} else if (!strcmp(scenario, "leak")) {
		leak_site_a();
		leak_site_b();
		transient();
	} else if (!strcmp(scenario, "fragment") || !strcmp(scenario, "packed")) {
		fragment(!strcmp(scenario, "fragment"));
	} else {
		oom();
	}
	hs_done(hold);
	return 0;
}
