// SPDX-License-Identifier: MIT
#include <stdbool.h>
#include <string.h>
#include "textwrap.h"

void text_wrap(FILE *f, const char *prefix, size_t cont, const char *s, size_t len, size_t cols)
{
	size_t in = strlen(prefix), lead = strspn(s, " ");
	bool first = true;

	while (len) {
		size_t pad = first ? 0 : cont, room = cols > in + pad ? cols - in - pad : 1;
		size_t take = len;

		if (take > room) {
			size_t k = room;

			while (k > lead && s[k] != ' ')
				k--;
			if (k <= lead) {	/* one long word: up to its end */
				k = room;
				while (k < len && s[k] != ' ')
					k++;
			}
			take = k;
		}
		fprintf(f, "%s%*s%.*s\n", prefix, (int)pad, "", (int)take, s);
		s += take;
		len -= take;
		while (len && *s == ' ') {
			s++;
			len--;
		}
		first = false;
	}
}
