/* SPDX-License-Identifier: MIT */
/* Open-addressing map from a nonzero u64 key to a u64 value (often a pointer). Small and
 * single-threaded; grows at 50% load. */
#ifndef TPTRACE_HASHMAP_H
#define TPTRACE_HASHMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct u64map {
	uint64_t *keys;		/* 0 = empty slot */
	uint64_t *vals;
	size_t cap;		/* power of two */
	size_t nr;
};

/* Keys must be nonzero; callers fold a zero key to another value. */
int u64map__set(struct u64map *m, uint64_t key, uint64_t val);
bool u64map__get(const struct u64map *m, uint64_t key, uint64_t *val);
void u64map__clear(struct u64map *m);	/* frees storage; the map stays usable */
/* The value of key as a pointer; when absent, a zeroed allocation of size is stored first
 * (*created says so). NULL on ENOMEM. */
void *u64map__get_or_alloc(struct u64map *m, uint64_t key, size_t size, bool *created);
/* free() on every value (each a malloc'ed pointer), then u64map__clear(). */
void u64map__free_values(struct u64map *m);

/* Walks the entries in slot order: `for (size_t it = 0; u64map__next(m, &it, &k, &v);)`.
 * key or val may be NULL. The map must not grow during the walk (setting an existing key is
 * fine). */
static inline bool u64map__next(const struct u64map *m, size_t *it, uint64_t *key, uint64_t *val)
{
	for (; *it < m->cap; (*it)++) {
		if (!m->keys[*it])
			continue;
		if (key)
			*key = m->keys[*it];
		if (val)
			*val = m->vals[*it];
		(*it)++;
		return true;
	}
	return false;
}

static inline uint64_t u64_mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

#endif
