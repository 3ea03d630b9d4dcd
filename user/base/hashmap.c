// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdlib.h>
#include "hashmap.h"

static int grow(struct u64map *m)
{
	size_t ncap = m->cap ? m->cap * 2 : 64;
	uint64_t *nk = calloc(ncap, sizeof(*nk));
	uint64_t *nv = calloc(ncap, sizeof(*nv));

	if (!nk || !nv) {
		free(nk);
		free(nv);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->cap; i++) {
		if (!m->keys[i])
			continue;
		size_t j = u64_mix(m->keys[i]) & (ncap - 1);

		while (nk[j])
			j = (j + 1) & (ncap - 1);
		nk[j] = m->keys[i];
		nv[j] = m->vals[i];
	}
	free(m->keys);
	free(m->vals);
	m->keys = nk;
	m->vals = nv;
	m->cap = ncap;
	return 0;
}

int u64map__set(struct u64map *m, uint64_t key, uint64_t val)
{
	size_t i;

	if (!key)
		return -EINVAL;
	if ((m->nr + 1) * 2 > m->cap) {
		int err = grow(m);

		if (err)
			return err;
	}
	i = u64_mix(key) & (m->cap - 1);
	while (m->keys[i] && m->keys[i] != key)
		i = (i + 1) & (m->cap - 1);
	if (!m->keys[i]) {
		m->keys[i] = key;
		m->nr++;
	}
	m->vals[i] = val;
	return 0;
}

bool u64map__get(const struct u64map *m, uint64_t key, uint64_t *val)
{
	size_t i;

	if (!m->cap || !key)
		return false;
	i = u64_mix(key) & (m->cap - 1);
	while (m->keys[i]) {
		if (m->keys[i] == key) {
			if (val)
				*val = m->vals[i];
			return true;
		}
		i = (i + 1) & (m->cap - 1);
	}
	return false;
}

void u64map__clear(struct u64map *m)
{
	free(m->keys);
	free(m->vals);
	m->keys = m->vals = NULL;
	m->cap = m->nr = 0;
}

void *u64map__get_or_alloc(struct u64map *m, uint64_t key, size_t size, bool *created)
{
	uint64_t v;
	void *p;

	*created = false;
	if (u64map__get(m, key, &v))
		return (void *)(uintptr_t)v;
	p = calloc(1, size);
	if (!p)
		return NULL;
	if (u64map__set(m, key, (uint64_t)(uintptr_t)p)) {
		free(p);
		return NULL;
	}
	*created = true;
	return p;
}

void u64map__free_values(struct u64map *m)
{
	for (size_t i = 0; i < m->cap; i++)
		if (m->keys[i])
			free((void *)(uintptr_t)m->vals[i]);
	u64map__clear(m);
}
