// SPDX-License-Identifier: MIT
/* C++ names through the C++ ABI demangler, and CUDA kernel names from nvcc's host stubs.
 *
 * For `__global__ void scale_vec(float *, float, int)` nvcc emits a host stub function
 *   _Z30__device_stub__Z9scale_vecPffiPffi            __device_stub__Z9scale_vecPffi(float*, float, int)
 * and function-local statics in it
 *   _ZZ30__device_stub__Z9scale_vecPffiPffiE8__handle  ...::__handle
 * The stub's name is "__device_stub_" followed by the kernel's mangled name "_Z9scale_vecPffi".
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demangle.h"

extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

#define STUB_PREFIX "__device_stub_"	/* the kernel's "_Z..." follows */

char *demangle(const char *name)
{
	char *out;
	int status = 0;

	/* __cxa_demangle also decodes bare types ("f" -> "float"): only try symbol names */
	if (strncmp(name, "_Z", 2) != 0)
		return strdup(name);
	out = __cxa_demangle(name, NULL, NULL, &status);
	if (out)
		return out;
	if (status == -1) {
		errno = ENOMEM;
		return NULL;
	}
	return strdup(name);	/* -2: not a valid mangled name, -3: cannot happen here */
}

/* <number> at *s: no sign, no leading zero, at most max. Advances *s. */
static int parse_len(const char **s, size_t max, size_t *len)
{
	const char *p = *s;
	size_t v = 0;

	if (*p < '1' || *p > '9')
		return -EINVAL;
	while (*p >= '0' && *p <= '9') {
		v = v * 10 + (size_t)(*p - '0');
		if (v > max)
			return -EINVAL;
		p++;
	}
	*s = p;
	*len = v;
	return 0;
}

/* Itanium <discriminator> := _ <digit> | __ <number> _ ; or nothing. */
static bool is_discriminator(const char *s)
{
	if (*s == '\0')
		return true;
	if (s[0] != '_')
		return false;
	if (s[1] >= '0' && s[1] <= '9')
		return s[2] == '\0';
	if (s[1] != '_' || s[2] < '0' || s[2] > '9')
		return false;
	s += 2;
	while (*s >= '0' && *s <= '9')
		s++;
	return s[0] == '_' && s[1] == '\0';
}

/* The local-name tail "E<len><want_static>[discriminator]" of a static, searched from the
 * right: the stub's parameter encoding before it may itself contain "E<digits>". */
static bool has_static_tail(const char *rest, const char *want_static)
{
	char tag[128];
	const char *hit = NULL, *p = rest;
	int n;

	n = snprintf(tag, sizeof(tag), "E%zu%s", strlen(want_static), want_static);
	if (n < 0 || (size_t)n >= sizeof(tag) || want_static[0] == '\0')
		return false;
	while ((p = strstr(p, tag))) {
		hit = p;
		p++;
	}
	/* the stub takes the kernel's parameters: at least "v" precedes the tail */
	return hit && hit > rest && is_discriminator(hit + n);
}

int cuda_stub_kernel_name(const char *sym, const char *want_static, char *buf, int size)
{
	const char *p = sym, *name, *rest;
	bool is_static;
	size_t len, kernel_len;

	if (strncmp(p, "_Z", 2) != 0)
		return -EINVAL;
	p += 2;
	is_static = *p == 'Z';
	if (is_static)
		p++;
	if (is_static != (want_static != NULL))
		return -EINVAL;
	if (*p == 'L')	/* internal linkage: the stub of a kernel in an anonymous namespace or a template */
		p++;
	if (parse_len(&p, strlen(p), &len))
		return -EINVAL;
	name = p;
	rest = p + len;
	if (len <= strlen(STUB_PREFIX "_Z") || strncmp(name, STUB_PREFIX "_Z", strlen(STUB_PREFIX "_Z")) != 0)
		return -EINVAL;

	if (is_static) {
		if (!has_static_tail(rest, want_static))
			return -EINVAL;
	} else if (*rest == '\0') {
		return -EINVAL;	/* no parameter encoding: not a function */
	}

	kernel_len = len - strlen(STUB_PREFIX);
	if (size <= 0 || kernel_len >= (size_t)size)
		return -ENAMETOOLONG;
	memcpy(buf, name + strlen(STUB_PREFIX), kernel_len);
	buf[kernel_len] = '\0';
	return 0;
}
