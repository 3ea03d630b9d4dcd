// SPDX-License-Identifier: MIT
/* jsonlex: the lexer's cold paths (see jsonlex.h; the hot ones inline from the header). */
#include <stdio.h>
#include "jsonlex.h"

bool jl_fail(struct jlex *j, const char *what)
{
	if (!j->failed) {
		j->failed = true;
		if (j->p >= j->end)
			snprintf(j->err, j->errsz, "unexpected end of input at byte %zu",
				 j->off0 + (size_t)(j->end - j->base));
		else
			snprintf(j->err, j->errsz, "%s at byte %zu", what,
				 j->off0 + (size_t)(j->p - j->base));
	}
	return false;
}

static inline bool is_ws(char c)
{
	return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

long jl_extent(const char *b, size_t n, bool at_eof)
{
	int depth = 0;
	size_t i = 0;
	char stack[JL_MAX_DEPTH];

	if (!n)
		return 0;
	if (b[0] != '{' && b[0] != '[' && b[0] != '"') {
		while (i < n && b[i] != ',' && b[i] != '}' && b[i] != ']' && !is_ws(b[i]))
			i++;
		return i < n || at_eof ? (long)i : 0;
	}
	for (; i < n; i++) {
		char c = b[i];

		if (c == '"') {
			for (i++; i < n && b[i] != '"'; i++)
				if (b[i] == '\\')
					i++;
			if (i >= n)
				return 0;
			if (!depth)
				return (long)i + 1;
		} else if (c == '{' || c == '[') {
			if (depth == JL_MAX_DEPTH)
				return -1;
			stack[depth++] = c == '{' ? '}' : ']';
		} else if (c == '}' || c == ']') {
			if (!depth || stack[depth - 1] != c)
				return -1;
			if (!--depth)
				return (long)i + 1;
		}
	}
	return 0;
}
