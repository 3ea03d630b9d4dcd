// SPDX-License-Identifier: MIT
/* The HTML page of `tptrace report`. The page is the report JSON plus a script that draws it:
 * one renderer for every subset of the report (no --gpu, one rank, no findings), written once
 * in JS instead of once per layout in C. The script and style are tools/report_html.{js,css},
 * turned into C string literals at build time (tools/tools.mk), so the binary carries them
 * and the page needs nothing but itself. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "atomic_file.h"
#include "growbuf.h"
#include "report_html.h"

static const char report_css[] =
#include "tools/report_html_css.h"
;

static const char report_js[] =
#include "tools/report_html_js.h"
;

/* the highest report version this page knows (docs/report-schema.md) */
#define REPORT_HTML_VERSION 1

/* Installed before anything else runs: an exception anywhere on the page (a syntax error in
 * the renderer included) is shown to the reader instead of a half-drawn page, and counted on
 * <html data-js-errors> where the browser test looks for it. */
static const char error_hook_js[] =
	"window.__tptraceErrors=[];"
	"window.addEventListener('error',function(e){"
	"var m=(e.message||'error')+(e.lineno?' (line '+e.lineno+')':'');"
	"window.__tptraceErrors.push(m);"
	"document.documentElement.setAttribute('data-js-errors',window.__tptraceErrors.length);"
	"var b=document.getElementById('js-error');"
	"if(b){b.hidden=false;b.textContent='This page failed to render: '+"
	"window.__tptraceErrors.join('; ');}});";

/* The JSON as the text of a <script type="application/json">. Inside a script element the
 * HTML parser ends the element at the first "</script" and treats "<!--" specially, whatever
 * the JSON means; a kernel or file name can hold either. In JSON '<', '>' and '&' occur only
 * inside strings, where \u003c, \u003e and \u0026 mean the same characters, so writing every
 * one of them escaped leaves no '<' in the element at all and JSON.parse reads back the
 * same object. U+2028/U+2029 are escaped too: valid in JSON strings but line terminators
 * to an older JS parser, should anyone eval the text. */
static void add_json_for_script(struct growbuf *b, const char *json)
{
	const char *run = json, *p;

	for (p = json; *p; p++) {
		const char *esc = NULL;
		size_t skip = 1;

		if (*p == '<')
			esc = "\\u003c";
		else if (*p == '>')
			esc = "\\u003e";
		else if (*p == '&')
			esc = "\\u0026";
		else if ((unsigned char)p[0] == 0xe2 && (unsigned char)p[1] == 0x80 &&
			 ((unsigned char)p[2] == 0xa8 || (unsigned char)p[2] == 0xa9)) {
			esc = (unsigned char)p[2] == 0xa8 ? "\\u2028" : "\\u2029";
			skip = 3;
		}
		if (!esc)
			continue;
		growbuf__add(b, run, p - run);
		growbuf__puts(b, esc);
		p += skip - 1;
		run = p + 1;
	}
	growbuf__add(b, run, p - run);
}

static int check_report(const cJSON *report, char *err, size_t errsz)
{
	const cJSON *version;

	if (!cJSON_IsObject(report)) {
		snprintf(err, errsz, "the report is not a JSON object");
		return -EINVAL;
	}
	version = cJSON_GetObjectItemCaseSensitive(report, "tptrace_report");
	if (!version)	/* tptrace report --compare's object: the same page draws it */
		version = cJSON_GetObjectItemCaseSensitive(report, "tptrace_compare");
	if (!cJSON_IsNumber(version)) {
		snprintf(err, errsz, "not a tptrace report (no \"tptrace_report\" version)");
		return -EINVAL;
	}
	if (version->valuedouble != REPORT_HTML_VERSION) {
		snprintf(err, errsz, "report version %g is not one this page renders (%d)",
			 version->valuedouble, REPORT_HTML_VERSION);
		return -EINVAL;
	}
	return 0;
}

int report_html__write(const cJSON *report, const char *path, char *err, size_t errsz)
{
	struct growbuf page = {};
	char *json = NULL;
	int ret;

	if (!path || !*path) {
		snprintf(err, errsz, "no path to write the HTML report to");
		return -EINVAL;
	}
	ret = check_report(report, err, errsz);
	if (ret)
		return ret;
	json = cJSON_PrintUnformatted(report);
	if (!json) {
		ret = -ENOMEM;
		goto cleanup;
	}
	growbuf__puts(&page, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
			     "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
			     "<title>tptrace report</title>\n<style>\n");
	growbuf__puts(&page, report_css);
	growbuf__puts(&page, "</style>\n</head>\n<body>\n<script>");
	growbuf__puts(&page, error_hook_js);
	growbuf__puts(&page, "</script>\n<div id=\"js-error\" class=\"js-error\" hidden></div>\n"
			     "<noscript><p class=\"js-error\">This report draws its tables and "
			     "plots with JavaScript; enable it for this file, or read the same "
			     "numbers with <code>tptrace report --json</code>.</p></noscript>\n"
			     "<main id=\"app\"></main>\n"
			     "<script type=\"application/json\" id=\"report-data\">");
	add_json_for_script(&page, json);
	growbuf__puts(&page, "</script>\n<script>\n");
	growbuf__puts(&page, report_js);
	growbuf__puts(&page, "</script>\n</body>\n</html>\n");
	ret = growbuf__error(&page);
	if (ret)
		goto cleanup;
	ret = atomic_file__write_path(path, page.p, page.len, 0644, true);
	if (ret)
		snprintf(err, errsz, "cannot write %s: %s", path, strerror(-ret));
cleanup:
	if (ret == -ENOMEM)
		snprintf(err, errsz, "out of memory writing %s", path);
	free(json);
	growbuf__free(&page);
	return ret;
}
