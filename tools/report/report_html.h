/* SPDX-License-Identifier: MIT */
/* `tptrace report -o report.html`: one self-contained page (no network at view time) rendered
 * from the report object of docs/report-schema.md. The object goes into the page as JSON and
 * the page's own script (tools/report/report_html.js, compiled in) draws the plots from it, so the
 * page shows nothing that is not in `--json`. */
#ifndef TPTRACE_REPORT_HTML_H
#define TPTRACE_REPORT_HTML_H

#include <stddef.h>
#include <cjson/cJSON.h>

/* Writes the page for report to path, whole or not at all (temp file and rename). 0, or
 * -errno and one line in err (without "tptrace: " and without a newline). A report that is
 * not an object with "tptrace_report": 1 is -EINVAL. */
int report_html__write(const cJSON *report, const char *path, char *err, size_t errsz);

#endif
