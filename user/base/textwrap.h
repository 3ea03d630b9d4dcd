/* SPDX-License-Identifier: MIT */
/* Human output at a width: one line wrapped at spaces, a word longer than the room (a path,
 * a build id) never cut. Used by tptrace stacks and tptrace-fr. */
#ifndef TPTRACE_TEXTWRAP_H
#define TPTRACE_TEXTWRAP_H

#include <stddef.h>
#include <stdio.h>

/* s[0..len) after prefix on its first line; each continuation after prefix and cont more
 * spaces. No break falls inside s's own leading spaces. */
void text_wrap(FILE *f, const char *prefix, size_t cont, const char *s, size_t len, size_t cols);

#endif
