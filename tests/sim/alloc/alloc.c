// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The simulated caching allocator (see tpsim_alloc.h for the policy). One lock, linked lists:
 * tests allocate tens of blocks, not millions. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* USDT probes with semaphores, as PyTorch's TORCH_SDT_WITH_SEMAPHORE: the probe site is skipped
 * unless a tracer raised the semaphore (the kernel does it for uprobes with a ref_ctr_offset). */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
#include "tpsim_alloc.h"

__attribute__((visibility("default"))) unsigned short pytorch_malloc_semaphore
	__attribute__((section(".probes")));
__attribute__((visibility("default"))) unsigned short pytorch_free_semaphore
	__attribute__((section(".probes")));

#define MIN_BLOCK	512ULL
#define SMALL_SIZE	(1ULL << 20)	/* largest request of the small pool */
#define SMALL_BUFFER	(2ULL << 20)	/* small pool segment */
#define LARGE_BUFFER	(20ULL << 20)	/* large pool segment for requests below MIN_LARGE_ALLOC */
#define MIN_LARGE_ALLOC	(10ULL << 20)
#define ROUND_LARGE	(2ULL << 20)
#define C10_DEVICE_CUDA	1

struct segment;

struct block {
	uintptr_t ptr;
	size_t size;		/* rounded */
	size_t requested;	/* 0 when free */
	bool allocated;
	struct segment *seg;
	struct block *prev, *next;	/* neighbours in the segment, by address */
};

struct segment {
	uintptr_t ptr;
	size_t size;
	int device;
	bool small;
	cudaStream_t stream;
	struct block *blocks;	/* by address */
	struct segment *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct segment *segments;

static size_t round_size(size_t size)
{
	return size < MIN_BLOCK ? MIN_BLOCK : (size + MIN_BLOCK - 1) / MIN_BLOCK * MIN_BLOCK;
}

static size_t segment_size(size_t rounded)
{
	if (rounded <= SMALL_SIZE)
		return SMALL_BUFFER;
	if (rounded < MIN_LARGE_ALLOC)
		return LARGE_BUFFER;
	return (rounded + ROUND_LARGE - 1) / ROUND_LARGE * ROUND_LARGE;
}

/* Smallest free block of the right pool, device and stream that fits. */
static struct block *find_free(size_t rounded, int device, cudaStream_t stream, bool small)
{
	struct block *best = NULL;

	for (struct segment *s = segments; s; s = s->next) {
		if (s->small != small || s->device != device || s->stream != stream)
			continue;
		for (struct block *b = s->blocks; b; b = b->next)
			if (!b->allocated && b->size >= rounded && (!best || b->size < best->size))
				best = b;
	}
	return best;
}

static int release_free_segments(void)
{
	struct segment **pp = &segments, *s;
	int n = 0;

	while ((s = *pp)) {
		if (s->blocks && !s->blocks->allocated && !s->blocks->next) {
			*pp = s->next;
			cudaFree((void *)s->ptr);
			free(s->blocks);
			free(s);
			n++;
			continue;
		}
		pp = &s->next;
	}
	return n;
}

static struct block *new_segment(size_t rounded, int device, cudaStream_t stream, bool small)
{
	size_t size = segment_size(rounded);
	struct segment *s;
	struct block *b;
	void *p = NULL;

	if (cudaMalloc(&p, size) != cudaSuccess) {
		/* like PyTorch: give the cached segments back and try once more */
		if (!release_free_segments() || cudaMalloc(&p, size) != cudaSuccess)
			return NULL;
	}
	s = calloc(1, sizeof(*s));
	b = calloc(1, sizeof(*b));
	if (!s || !b) {
		cudaFree(p);
		free(s);
		free(b);
		return NULL;
	}
	s->ptr = (uintptr_t)p;
	s->size = size;
	s->device = device;
	s->small = small;
	s->stream = stream;
	s->blocks = b;
	b->ptr = s->ptr;
	b->size = size;
	b->seg = s;
	s->next = segments;
	segments = s;
	return b;
}

/* Splits b so that it is exactly rounded bytes when enough would remain. */
static void maybe_split(struct block *b, size_t rounded)
{
	size_t rest = b->size - rounded;
	struct block *r;

	if (b->seg->small ? rest < MIN_BLOCK : rest <= SMALL_SIZE)
		return;
	r = calloc(1, sizeof(*r));
	if (!r)
		return;
	r->ptr = b->ptr + rounded;
	r->size = rest;
	r->seg = b->seg;
	r->prev = b;
	r->next = b->next;
	if (b->next)
		b->next->prev = r;
	b->next = r;
	b->size = rounded;
}

void *tpsim_alloc_malloc(size_t size, int device, cudaStream_t stream)
{
	size_t rounded = round_size(size);
	bool small = rounded <= SMALL_SIZE;
	struct block *b;

	pthread_mutex_lock(&lock);
	b = find_free(rounded, device, stream, small);
	if (!b)
		b = new_segment(rounded, device, stream, small);
	if (!b) {
		pthread_mutex_unlock(&lock);
		return NULL;
	}
	maybe_split(b, rounded);
	b->allocated = true;
	b->requested = size;
	pthread_mutex_unlock(&lock);
	if (pytorch_malloc_semaphore) {
		uint16_t dev = (uint16_t)(C10_DEVICE_CUDA | (unsigned)(uint8_t)device << 8);
		int64_t stream_id = (int64_t)(uintptr_t)stream;

		STAP_PROBE4(pytorch, malloc, (void *)b->ptr, dev, size, stream_id);
	}
	return (void *)b->ptr;
}

static struct block *find_allocated(uintptr_t p)
{
	for (struct segment *s = segments; s; s = s->next) {
		if (p < s->ptr || p >= s->ptr + s->size)
			continue;
		for (struct block *b = s->blocks; b; b = b->next)
			if (b->ptr == p && b->allocated)
				return b;
	}
	return NULL;
}

void tpsim_alloc_free(void *ptr)
{
	struct block *b, *n;

	if (!ptr)
		return;
	if (pytorch_free_semaphore)
		STAP_PROBE1(pytorch, free, ptr);
	pthread_mutex_lock(&lock);
	b = find_allocated((uintptr_t)ptr);
	if (!b) {
		pthread_mutex_unlock(&lock);
		return;
	}
	b->allocated = false;
	b->requested = 0;
	/* merge with free neighbours */
	if ((n = b->next) && !n->allocated) {
		b->size += n->size;
		b->next = n->next;
		if (n->next)
			n->next->prev = b;
		free(n);
	}
	if ((n = b->prev) && !n->allocated) {
		n->size += b->size;
		n->next = b->next;
		if (b->next)
			b->next->prev = n;
		free(b);
	}
	pthread_mutex_unlock(&lock);
}

int tpsim_alloc_empty_cache(void)
{
	int n;

	pthread_mutex_lock(&lock);
	n = release_free_segments();
	pthread_mutex_unlock(&lock);
	return n;
}

void tpsim_alloc_get_stats(struct tpsim_alloc_stats *st)
{
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&lock);
	for (struct segment *s = segments; s; s = s->next) {
		st->segments++;
		st->reserved += s->size;
		for (struct block *b = s->blocks; b; b = b->next) {
			if (!b->allocated)
				continue;
			st->live_blocks++;
			st->allocated += b->size;
			st->requested += b->requested;
		}
	}
	pthread_mutex_unlock(&lock);
}
