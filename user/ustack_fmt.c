// SPDX-License-Identifier: MIT
/* The text forms of a resolved user stack (user/ustack.h): the one-line compact stack the
 * trace writes on each event, and the names of the status ids. Pure formatting, apart from
 * the resolution in ustack.c, so the sinks and their tests need nothing else. */
#include <stdarg.h>
#include <stdio.h>
#include "ustack.h"

/* snprintf into buf at *len, counting what did not fit as snprintf does */
static void append(char *buf, size_t size, size_t *len, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(*len < size ? buf + *len : NULL, *len < size ? size - *len : 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		*len += n;
}

/* "file:line func;file:line func | module+0xoff sym;..." outermost first on both sides: read
 * left to right it follows the calls down to the probed function. A code object that could
 * not be read is "<unresolved code 0x...>": its name and line are not guessed. */
int ustack__compact(const struct ustack *s, char *buf, size_t size)
{
	size_t len = 0;

	if (size)
		buf[0] = '\0';
	for (int i = s->nr_py - 1; i >= 0; i--) {
		const struct ustack_frame *f = &s->py[i];
		const char *sep = i == s->nr_py - 1 ? "" : ";";

		if (f->unresolved || !f->func)
			append(buf, size, &len, "%s<unresolved code 0x%llx>", sep,
			       (unsigned long long)f->code);
		else
			append(buf, size, &len, "%s%s:%d %s", sep, f->file ? f->file : "?", f->line,
			       f->func);
	}
	if (s->nr_native)
		append(buf, size, &len, s->nr_py ? " | " : "| ");
	for (int i = s->nr_native - 1; i >= 0; i--) {
		const struct ustack_frame *f = &s->native[i];
		const char *sep = i == s->nr_native - 1 ? "" : ";";

		if (f->file)
			append(buf, size, &len, "%s%s+0x%llx%s%s", sep, f->file,
			       (unsigned long long)f->module_off, f->func ? " " : "",
			       f->func ? f->func : "");
		else
			append(buf, size, &len, "%s0x%llx", sep, (unsigned long long)f->pc);
	}
	return (int)len;
}

const char *ustacks__status_name(uint64_t id)
{
	switch (id) {
	case TP_USTACK_NONE:
		return "stack not captured";
	case TP_USTACK_NOPY:
		return "no Python thread state";
	case TP_USTACK_LOST:
		return "stack lost: the stack map was full";
	case TP_USTACK_FAULT:
		return "Python thread state unreadable";
	default:
		return id < TP_USTACK_FIRST_ID ? "unknown stack status" : NULL;
	}
}
