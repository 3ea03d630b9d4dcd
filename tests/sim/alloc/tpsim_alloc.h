/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * libtpsim_alloc.so: a tiny caching allocator on top of the simulated runtime (tests/sim/cudart),
 * shaped like PyTorch's CUDA caching allocator so tptrace's memory tracing can be tested without
 * PyTorch. It carries the same USDT probes, semaphore-gated, provider "pytorch":
 *
 *   pytorch:malloc(devPtr, device, size, stream)   after a block was handed out
 *   pytorch:free(ptr)                              when the caller frees the block
 *
 * with PyTorch's argument encoding: device is a c10::Device (2 bytes: DeviceType in the low byte,
 * CUDA = 1, index in the high byte), size the bytes requested, stream an integer stream id (the
 * cudaStream_t value here).
 *
 * Policy (PyTorch's defaults, without roundup_power2_divisions or expandable segments):
 *   - block sizes are the request rounded up to 512 bytes;
 *   - requests <= 1 MiB come from the small pool, carved from 2 MiB segments;
 *   - larger ones from the large pool: a 20 MiB segment below 10 MiB, otherwise a segment of the
 *     request rounded up to 2 MiB; a free block is split when more than 1 MiB (small pool: 512 B)
 *     would remain;
 *   - segments come from cudaMalloc on the current device and only go back to cudaFree in
 *     tpsim_alloc_empty_cache(), or when a cudaMalloc fails: then every fully free segment is
 *     released and the cudaMalloc retried once;
 *   - freed blocks are cached (merged with free neighbours), reused for the same stream only.
 */
#ifndef TPSIM_ALLOC_H
#define TPSIM_ALLOC_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A device pointer of at least size bytes, or NULL when cudaMalloc fails (out of memory). */
void *tpsim_alloc_malloc(size_t size, int device, cudaStream_t stream);
void tpsim_alloc_free(void *ptr);
/* Releases every fully free segment (cudaFree). Returns how many. */
int tpsim_alloc_empty_cache(void);

struct tpsim_alloc_stats {
	size_t requested;	/* bytes requested by live blocks */
	size_t allocated;	/* bytes of live blocks (rounded) */
	size_t reserved;	/* bytes of segments */
	int segments;
	int live_blocks;
};
void tpsim_alloc_get_stats(struct tpsim_alloc_stats *st);

#ifdef __cplusplus
}
#endif

#endif
