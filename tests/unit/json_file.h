/* SPDX-License-Identifier: MIT */
/* A written JSON file read back whole, for the unit tests that check what a writer produced
 * (traces, dumps). Include after check.h and <cjson/cJSON.h>. */
#ifndef TPTRACE_JSON_FILE_H
#define TPTRACE_JSON_FILE_H

#include <stdio.h>
#include <stdlib.h>

/* The parsed document, or NULL after a failed CHECK saying why. */
static inline cJSON *check_load_json(const char *path)
{
	FILE *f = fopen(path, "r");
	char *text = NULL;
	long n = -1;
	cJSON *j = NULL;

	CHECK(f != NULL, "open %s", path);
	if (!f)
		return NULL;
	if (!fseek(f, 0, SEEK_END))
		n = ftell(f);
	rewind(f);
	if (n >= 0)
		text = calloc(1, n + 1);
	if (text && fread(text, 1, n, f) == (size_t)n)
		j = cJSON_Parse(text);
	fclose(f);
	free(text);
	CHECK(j != NULL, "%s parses as JSON", path);
	return j;
}

#endif
