// SPDX-License-Identifier: MIT
/* tptrace --torch's merge on saved inputs (user/trace/torchprof.h, torchprof__replay): the clock
 * offset and residual from the markers' brackets, exact; tptrace's own events left out; the
 * main thread on its OS tid and another profiler thread on a labelled track; input dims and
 * stacks as args; ProfilerStep#N derived from 1.13's Optimizer.step spans. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "check.h"
#include "torchprof.h"
#include "trace_json.h"

#define O 1000000000LL	/* the true offset, ns */

/* Marker i of a phase: span [s, s+5] µs, started 200 ns into its µs; the bracket reads are
 * set so that each marker allows offsets [O - lo_slack, O + hi_slack]. */
static void bracket(char *buf, size_t len, const int *s, long ma_extra, long mb_extra)
{
	size_t n = snprintf(buf, len, "[");

	for (int i = 0; i < 4; i++) {
		long long st = s[i] * 1000LL + O, en = (s[i] + 5) * 1000LL + O;

		n += snprintf(buf + n, len - n, "%s[%lld, %lld, %lld, %lld]", i ? ", " : "",
			      st - 2000, st + ma_extra, en - mb_extra, en + 3000);
	}
	snprintf(buf + n, len - n, "]");
}

static const char *events_lines[] = {
	"[\"s\", 0, []]",
	"[\"s\", 1, [\"<tptrace snippet>(8): marker\", \"x.py(1): <module>\"]]",
	"[\"s\", 2, [\"<built-in function linear>\", \"train.py(5): step\"]]",
	"[\"e\", \"aten::zeros\", 1, 90, 95, false, 1, [[]]]",
	"[\"e\", \"tptrace#clock\", 1, 100, 105, true, 1, []]",
	"[\"e\", \"tptrace#clock\", 1, 110, 115, true, 1, []]",
	"[\"e\", \"tptrace#clock\", 1, 120, 125, true, 1, []]",
	"[\"e\", \"tptrace#clock\", 1, 130, 135, true, 1, []]",
	"[\"e\", \"custom_phase\", 1, 200, 300, true, 0, []]",
	"[\"e\", \"aten::addmm\", 1, 210, 250, false, 2, [[32], [8, 16]]]",
	"[\"e\", \"Optimizer.step#SGD.step\", 1, 400, 450, true, 0, []]",
	"[\"e\", \"aten::mm\", 7, 500, 600, false, 0, [[8, 4], [4, 32]]]",
	"[\"e\", \"Optimizer.step#SGD.step\", 1, 900, 950, true, 0, []]",
	/* the stop snippet's own op inside the window: known by its stack alone */
	"[\"e\", \"aten::zeros\", 1, 9990, 9995, false, 1, [[]]]",
	"[\"e\", \"tptrace#clock\", 1, 10000, 10005, true, 1, []]",
	"[\"e\", \"aten::add\", 1, 10001, 10002, false, 0, []]",
	"[\"e\", \"tptrace#clock\", 1, 10010, 10015, true, 1, []]",
	"[\"e\", \"tptrace#clock\", 1, 10020, 10025, true, 1, []]",
	"[\"e\", \"tptrace#clock\", 1, 10030, 10035, true, 1, []]",
};

static const cJSON *find(const cJSON *events, const char *name, int nth)
{
	const cJSON *e;

	cJSON_ArrayForEach(e, events) {
		const cJSON *n = cJSON_GetObjectItem(e, "name");

		if (cJSON_IsString(n) && !strcmp(n->valuestring, name) && nth-- == 0)
			return e;
	}
	return NULL;
}

static double numf(const cJSON *o, const char *key)
{
	return cJSON_GetNumberValue(cJSON_GetObjectItem(o, key));
}

static const char *strf(const cJSON *o, const char *key)
{
	return cJSON_GetStringValue(cJSON_GetObjectItem(o, key));
}

int main(void)
{
	static const int s_start[4] = { 100, 110, 120, 130 }, s_stop[4] = { 10000, 10010, 10020,
									     10030 };
	char b0[512], b1[512], js[4096], path[512], out[512];
	cJSON *start, *stop, *meta, *trace, *events, *clock;
	const cJSON *e;
	struct torchprof *tp;
	struct trace_json *tj;
	char err[256] = "";
	FILE *f;
	char *text;
	long len;

	/* start: each marker allows [O - 1300, O + 500]; stop: [O - 1200, O + 400] */
	bracket(b0, sizeof(b0), s_start, 500, 300);
	bracket(b1, sizeof(b1), s_stop, 400, 200);
	snprintf(js, sizeof(js), "{\"clock\": %s, \"tid\": 4242, \"snippet_file\": "
		 "\"<tptrace snippet>\", \"torch\": \"1.13.0a0\", \"cuda\": false, \"kineto\": false, "
		 "\"steps\": \"Optimizer.step spans\"}", b0);
	start = cJSON_Parse(js);
	snprintf(js, sizeof(js), "{\"clock\": %s, \"events\": 15, \"steps\": null, \"markers\": "
		 "[[100, 105, 1], [110, 115, 1], [120, 125, 1], [130, 135, 1], [10000, 10005, 1], "
		 "[10010, 10015, 1], [10020, 10025, 1], [10030, 10035, 1]]}", b1);
	stop = cJSON_Parse(js);
	CHECK(start && stop, "results parse");
	snprintf(path, sizeof(path), "%s/torchprof_events.jsonl", UNIT_OUT_DIR);
	f = fopen(path, "w");
	for (size_t i = 0; f && i < sizeof(events_lines) / sizeof(events_lines[0]); i++)
		fprintf(f, "%s\n", events_lines[i]);
	if (f)
		fclose(f);

	tp = torchprof__replay(4242, start, stop, path);
	CHECK(tp != NULL, "replay");
	if (!tp)
		return 1;
	snprintf(out, sizeof(out), "%s/torchprof_trace.json", UNIT_OUT_DIR);
	tj = trace_json__open(out);
	CHECK(tj && !trace_json__begin(tj, O, 0), "trace open");
	CHECK(torchprof__write(tp, tj, O, err, sizeof(err)) == 0, "write: %s", err);
	meta = torchprof__meta(tp);
	trace_json__end_events(tj);
	CHECK(trace_json__close(tj) == 0, "trace close");

	/* the common bound [O - 1200, O + 400]: offset O - 400, residual 800, exactly */
	clock = cJSON_GetObjectItem(meta, "clock");
	text = cJSON_PrintUnformatted(cJSON_GetObjectItem(clock, "offset_ns"));
	CHECK_STR(text, "999999600");
	free(text);
	CHECK_U64((uint64_t)numf(clock, "residual_ns"), 800);
	CHECK(cJSON_IsTrue(cJSON_GetObjectItem(clock, "start_stop_agree")), "agree");
	CHECK_U64((uint64_t)numf(meta, "events"), 19 - 3);
	CHECK_U64((uint64_t)numf(meta, "events_merged"), 5);
	CHECK_U64((uint64_t)numf(cJSON_GetObjectItem(meta, "events_dropped"), "tptrace_own"), 11);
	CHECK_U64((uint64_t)numf(meta, "steps"), 2);
	CHECK(strstr(strf(meta, "steps_method"), "Optimizer.step") != NULL, "steps_method");

	f = fopen(out, "r");
	CHECK(f != NULL, "trace written");
	if (!f)
		return 1;
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	rewind(f);
	text = calloc(1, len + 1);
	CHECK(fread(text, 1, len, f) == (size_t)len, "read trace");
	fclose(f);
	trace = cJSON_Parse(text);
	free(text);
	events = cJSON_GetObjectItem(trace, "traceEvents");
	CHECK(cJSON_IsArray(events), "traceEvents");

	e = find(events, "custom_phase", 0);
	CHECK(e && numf(e, "tid") == 4242 && numf(e, "ts") == 199.6 && numf(e, "dur") == 100,
	      "custom_phase on the main thread at 199.6 µs");
	CHECK_STR(strf(e, "cat"), "user_annotation");
	e = find(events, "aten::addmm", 0);
	CHECK(e && numf(e, "tid") == 4242 && numf(e, "ts") == 209.6, "addmm");
	CHECK_STR(strf(e, "cat"), "cpu_op");
	{
		/* a list, as Kineto writes it */
		char *dims = cJSON_PrintUnformatted(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"),
									"Input Dims"));

		CHECK(cJSON_IsArray(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "Input Dims")),
		      "Input Dims is an array");
		CHECK_STR(dims, "[[32],[8,16]]");
		free(dims);
	}
	CHECK_STR(strf(cJSON_GetObjectItem(e, "args"), "Call stack"),
		  "<built-in function linear>;train.py(5): step");
	/* another profiler thread: its own labelled track, never a guessed OS tid */
	e = find(events, "aten::mm", 0);
	CHECK(e && numf(e, "tid") == 0x40000000, "mm on the unknown thread's track");
	e = find(events, "thread_name", 0);
	CHECK(e && numf(e, "tid") == 0x40000000, "thread_name of the unknown thread");
	CHECK_STR(strf(cJSON_GetObjectItem(e, "args"), "name"), "torch thread 7, OS tid unknown");
	/* ours are gone: markers, the snippet's own op, what ran after the stop marker */
	CHECK(!find(events, "tptrace#clock", 0) && !find(events, "aten::zeros", 0) &&
	      !find(events, "aten::add", 0), "own events left out");
	/* steps: from the start markers' end (135 µs) to each Optimizer.step's end */
	e = find(events, "ProfilerStep#0", 0);
	CHECK(e && numf(e, "ts") == 134.6 && numf(e, "dur") == 315, "ProfilerStep#0");
	e = find(events, "ProfilerStep#1", 0);
	CHECK(e && numf(e, "ts") == 449.6 && numf(e, "dur") == 500, "ProfilerStep#1");
	CHECK(!find(events, "ProfilerStep#2", 0), "two steps");

	cJSON_Delete(trace);
	cJSON_Delete(meta);
	cJSON_Delete(start);
	cJSON_Delete(stop);
	torchprof__free(tp);
	return check_done();
}
