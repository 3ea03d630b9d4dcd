// SPDX-License-Identifier: MIT
/* report_html_render REPORT.json OUT.html: the HTML page of a saved `tptrace report --json`
 * object, through the same report_html__write that `tptrace report -o` calls. Lets the
 * browser test (tests/tools/test_report_html.py) render hand-written reports without running
 * the analysis. Exit 0, or 1 with one line on stderr. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "report_html.h"

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *data = NULL;
	size_t cap = 0, n;

	*len = 0;
	if (!f)
		return NULL;
	for (;;) {
		if (*len + 65536 + 1 > cap) {
			char *p = realloc(data, cap = cap ? cap * 2 : 131072);

			if (!p) {
				free(data);
				fclose(f);
				errno = ENOMEM;
				return NULL;
			}
			data = p;
		}
		n = fread(data + *len, 1, cap - *len - 1, f);
		*len += n;
		if (n == 0)
			break;
	}
	if (ferror(f)) {
		free(data);
		fclose(f);
		errno = EIO;
		return NULL;
	}
	fclose(f);
	data[*len] = '\0';
	return data;
}

int main(int argc, char **argv)
{
	char err[512] = "";
	cJSON *report;
	size_t len;
	char *text;
	int ret;

	if (argc != 3) {
		fprintf(stderr, "usage: report_html_render REPORT.json OUT.html\n");
		return 2;
	}
	text = read_file(argv[1], &len);
	if (!text) {
		fprintf(stderr, "report_html_render: cannot read %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	report = cJSON_ParseWithLength(text, len);
	if (!report) {
		const char *at = cJSON_GetErrorPtr();

		fprintf(stderr, "report_html_render: %s: not JSON (at byte %ld)\n", argv[1],
			at ? (long)(at - text) : -1L);
		free(text);
		return 1;
	}
	ret = report_html__write(report, argv[2], err, sizeof(err));
	if (ret)
		fprintf(stderr, "report_html_render: %s\n", err);
	cJSON_Delete(report);
	free(text);
	return ret ? 1 : 0;
}
