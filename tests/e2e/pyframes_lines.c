// SPDX-License-Identifier: MIT
/* Test driver for pyframes_line(): reads tests/workloads/py_linetables.py's output on stdin
 * (FORMAT FIRSTLINENO HEXTABLE ADDR:LINE...), decodes each table and compares every
 * instruction's line with CPython's. Prints "codes N instructions N mismatches N" and the
 * first mismatches; exits 1 on any mismatch or malformed input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pyframes_int.h"

int main(void)
{
	static char buf[1 << 24];
	static uint8_t table[1 << 22];
	long codes = 0, insns = 0, bad = 0;

	while (fgets(buf, sizeof(buf), stdin)) {
		char fmt[16], *hex, *p, *save = NULL;
		enum line_format format;
		int firstlineno;
		size_t len = 0;

		p = strtok_r(buf, " \n", &save);
		if (!p || snprintf(fmt, sizeof(fmt), "%s", p) >= (int)sizeof(fmt))
			goto malformed;
		format = !strcmp(fmt, "lnotab") ? LNOTAB_39 : !strcmp(fmt, "lt310") ? LINETABLE_310 :
			 LOCATIONS_311;
		if (!(p = strtok_r(NULL, " \n", &save)))
			goto malformed;
		firstlineno = atoi(p);
		if (!(hex = strtok_r(NULL, " \n", &save)))
			goto malformed;
		if (strcmp(hex, "-"))
			for (; hex[0] && hex[1] && len < sizeof(table); hex += 2, len++)
				sscanf(hex, "%2hhx", &table[len]);
		codes++;
		while ((p = strtok_r(NULL, " \n", &save))) {
			int addr, want, got;

			if (sscanf(p, "%d:%d", &addr, &want) != 2)
				goto malformed;
			got = pyframes_line(format, table, len, firstlineno, addr);
			insns++;
			if (got != want && bad++ < 10)
				printf("%s firstlineno %d addr %d: got %d, CPython says %d\n", fmt,
				       firstlineno, addr, got, want);
		}
	}
	printf("codes %ld instructions %ld mismatches %ld\n", codes, insns, bad);
	return bad || !codes ? 1 : 0;
malformed:
	printf("malformed input at code %ld\n", codes);
	return 1;
}
