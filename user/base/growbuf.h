/* SPDX-License-Identifier: MIT */
/* The growable arrays of user/ and tools/: ARRAY_RESERVE below for an array of any type, and
 * struct growbuf for bytes.
 *
 * A growable byte buffer whose failure is sticky: after an allocation fails every later add
 * is dropped and `failed` stays set, so a writer adds freely and checks once at the end. The
 * bytes are always NUL-terminated (p[len] == 0 once anything was added), so text built in it
 * is a C string. Header-only: tools/ link it without pulling libtptrace.a. Used by the
 * snippet text of user/py/pyrun.c, the HTML page of tools/report/report_html.c, the pickles of
 * tools/fr/fr_pickle.c and the corpora of tests/tools/fr_gen.c. */
#ifndef TPTRACE_GROWBUF_H
#define TPTRACE_GROWBUF_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Room for need elements of elem bytes in the array whose pointer is at arrp (any object
 * pointer type) and whose capacity, in elements, is *cap: the capacity doubles from first (or
 * from *cap) until it holds need. 0, or -ENOMEM with the array and *cap unchanged. */
static inline int array__reserve(void *arrp, size_t *cap, size_t need, size_t elem, size_t first)
{
	size_t c = *cap ? *cap : first;
	void *old, *p;

	if (need <= *cap)
		return 0;
	while (c < need) {
		if (c > SIZE_MAX / 2)
			return -ENOMEM;
		c *= 2;
	}
	if (c > SIZE_MAX / elem)
		return -ENOMEM;
	memcpy(&old, arrp, sizeof(old));
	p = realloc(old, c * elem);
	if (!p)
		return -ENOMEM;
	memcpy(arrp, &p, sizeof(p));
	*cap = c;
	return 0;
}

/* array__reserve for an array arr (an lvalue: T *) and its capacity cap (an lvalue of any
 * unsigned or int type): ARRAY_RESERVE(v, cap_v, nr_v + 1, 64) before v[nr_v++] = x. 0, or
 * -ENOMEM (cap unchanged, and still true of arr) when memory or cap's type runs out. */
#define ARRAY_RESERVE(arr, cap, need, first) __extension__ ({				\
	size_t cap_ = (size_t)(cap);							\
	int err_ = (size_t)(need) <= cap_ ? 0 :						\
		   array__reserve(&(arr), &cap_, (need), sizeof(*(arr)), (first));	\
											\
	if (!err_ && cap_ != (size_t)(__typeof__(cap))cap_)				\
		err_ = -ENOMEM;								\
	if (!err_)									\
		(cap) = (__typeof__(cap))cap_;						\
	err_;										\
})

struct growbuf {
	char *p;
	size_t len, cap;
	bool failed;		/* out of memory: the contents are incomplete */
};

/* Room for n more bytes (and the NUL) at p + len; NULL (and failed set) when there is none.
 * The caller writes them and adds n to len itself. */
static inline char *growbuf__reserve(struct growbuf *b, size_t n)
{
	if (b->failed)
		return NULL;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p) {
			b->failed = true;
			return NULL;
		}
		b->p = p;
		b->cap = cap;
	}
	return b->p + b->len;
}

static inline void growbuf__add(struct growbuf *b, const void *s, size_t n)
{
	char *d = growbuf__reserve(b, n);

	if (!d)
		return;
	memcpy(d, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static inline void growbuf__puts(struct growbuf *b, const char *s)
{
	growbuf__add(b, s, strlen(s));
}

/* 0, or -ENOMEM when some add was dropped */
static inline int growbuf__error(const struct growbuf *b)
{
	return b->failed ? -ENOMEM : 0;
}

static inline void growbuf__free(struct growbuf *b)
{
	free(b->p);
	*b = (struct growbuf){};
}

#endif
