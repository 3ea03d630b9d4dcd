// SPDX-License-Identifier: MIT
/* PyTorch's own instruments through user/py/pyrun.h (see torchprof.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "growbuf.h"
#include "pyrun.h"
#include "session.h"
#include "torchprof.h"
#include "util.h"
#include "trace_json.h"
#include "py_snippets.h"	/* py_torch_profile, py_torch_instr: from user/py, generated */

/* Profiler threads other than the main one have no known OS tid: their tracks get tids from
 * here, above any real tid (pid_max is at most 2^22), so they never collide with one. */
#define TORCH_TID_UNKNOWN_BASE	0x40000000
#define MAX_THREADS		64
/* The stop snippet turns every event into a line in the target: it may take seconds for a
 * long window, so its wait is at least this (the main thread reached safe points all along) */
#define STOP_TIMEOUT_MIN_MS	30000

/* A clock marker: its span starts between the reads m[0] and m[1] and ends between m[2] and
 * m[3] (CLOCK_MONOTONIC ns). The snippet makes MARKERS of them at start and as many at stop. */
#define MARKERS		4
struct marker {
	int64_t m[4];
	double start_us, end_us;	/* its span in the profiler's time */
	double thread;
};

/* The offsets (tptrace ns - profiler ns) a set of markers allows: [lo, hi]. */
struct bound {
	int64_t lo, hi;
};

struct torchprof {
	int pid;
	struct pyrun *door;
	int timeout_ms;
	char events_host[4096], events_target[4096];
	cJSON *start_res, *stop_res;
	char error[512];		/* why there are no events ("" when there are) */
	bool stopped;
	/* read from the results: MARKERS at start, then MARKERS at stop */
	struct marker mark[2 * MARKERS];
	int main_tid;
	char snippet_file[128];		/* frames of tptrace's own snippet, in stacks */
	bool derive_steps;		/* 1.13: ProfilerStep#N from Optimizer.step spans */
	/* clock */
	int64_t offset_ns, residual_ns;
	double drift_ppm;
	struct bound bound[2];		/* what the start and the stop markers allow */
	bool clock_ok, clock_agree;
	/* merge */
	double threads[MAX_THREADS];
	int nr_threads;
	uint64_t events, merged, dropped_own, dropped_early, dropped_threads, steps;
	uint64_t dropped_open_step, python, profiler_steps;	/* 2.x */
	bool written;
};

/* nearest integer, as llround, without libm */
static int64_t round_i64(double x)
{
	return (int64_t)(x < 0 ? x - 0.5 : x + 0.5);
}

static bool whole(double x)
{
	return x == (double)(int64_t)x;
}

static double num(const cJSON *o, const char *key, double dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static const char *str(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The snippet's own refusal, or the exception the wrapper caught. */
static const char *snippet_error(const cJSON *res)
{
	return str(res, "error");
}

/* The brackets of a result's "clock": [[m0, ma, mb, m1], ...] in CLOCK_MONOTONIC ns, exact
 * through cJSON's double up to 2^53 ns (104 days since boot; past that they round to a few ns,
 * far below the residual). */
static int read_brackets(const cJSON *res, struct marker *mark)
{
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(res, "clock");

	if (cJSON_GetArraySize(c) != MARKERS)
		return -EINVAL;
	for (int i = 0; i < MARKERS; i++) {
		const cJSON *b = cJSON_GetArrayItem(c, i);

		if (cJSON_GetArraySize(b) != 4)
			return -EINVAL;
		for (int j = 0; j < 4; j++) {
			const cJSON *v = cJSON_GetArrayItem(b, j);

			if (!cJSON_IsNumber(v))
				return -EINVAL;
			mark[i].m[j] = round_i64(v->valuedouble);
			if (j && mark[i].m[j] < mark[i].m[j - 1])
				return -EINVAL;
		}
	}
	return 0;
}

/*
 * The offsets one phase's markers allow. The profiler writes whole µs (1.13 truncates: the
 * true start is in [s, s + 1 µs)), so a span started between m0 and ma gives
 * m0 - (s + res) <= offset <= ma - s, and its end the same with mb, m1; the phase's bound is
 * the intersection over its markers. Empty (lo > hi) when the clocks disagree.
 */
static struct bound phase_bound(const struct marker *mk)
{
	struct bound b = { INT64_MIN, INT64_MAX };

	for (int i = 0; i < MARKERS; i++) {
		const struct marker *m = &mk[i];
		double res = (whole(m->start_us) && whole(m->end_us)) ?
			     1000.0 : 1.0;
		int64_t s = round_i64(m->start_us * 1000.0);
		int64_t e = round_i64(m->end_us * 1000.0);
		int64_t lo[2] = { m->m[0] - s - (int64_t)res, m->m[2] - e - (int64_t)res };
		int64_t hi[2] = { m->m[1] - s, m->m[3] - e };

		for (int k = 0; k < 2; k++) {
			if (lo[k] > b.lo)
				b.lo = lo[k];
			if (hi[k] < b.hi)
				b.hi = hi[k];
		}
	}
	return b;
}

static int64_t mid(struct bound b)
{
	return b.lo + (b.hi - b.lo) / 2;
}

static int64_t half(struct bound b)
{
	return (b.hi > b.lo ? b.hi - b.lo : b.lo - b.hi) / 2;
}

/*
 * The offset (tptrace ns = profiler µs * 1000 + offset). When the bounds of the start and the
 * stop markers meet, the clocks agree over the window: the offset is the middle of the common
 * bound and the residual its half-width, so every merged time is within the residual of the
 * truth. When they do not (the clocks drift apart, or a bracket lied), the offset is the mean
 * of the two middles and the residual the wider half-bound plus half their disagreement. The
 * drift (ppm) is the two middles' difference over the window.
 */
static void align_clock(struct torchprof *tp)
{
	struct bound a = phase_bound(&tp->mark[0]), b = phase_bound(&tp->mark[MARKERS]);
	struct bound both = { a.lo > b.lo ? a.lo : b.lo, a.hi < b.hi ? a.hi : b.hi };
	double span_us = tp->mark[MARKERS].start_us - tp->mark[0].start_us;

	if (a.lo <= a.hi && b.lo <= b.hi && both.lo <= both.hi) {
		tp->offset_ns = mid(both);
		tp->residual_ns = half(both);
		tp->clock_agree = true;
	} else {
		tp->offset_ns = mid(a) + (mid(b) - mid(a)) / 2;
		tp->residual_ns = (half(a) > half(b) ? half(a) : half(b)) +
				  llabs(mid(b) - mid(a)) / 2;
	}
	tp->bound[0] = a;
	tp->bound[1] = b;
	tp->drift_ppm = span_us > 0 ? (double)(mid(b) - mid(a)) / (span_us * 1000.0) * 1e6 : 0;
	tp->clock_ok = true;
}

/* Both results in hand: the markers (the stop snippet found them in the events, in time
 * order), the main thread, the step method; then the clock. */
static int read_results(struct torchprof *tp, char *err, size_t errlen)
{
	const cJSON *marks = cJSON_GetObjectItemCaseSensitive(tp->stop_res, "markers");
	const char *steps = str(tp->start_res, "steps"), *file = str(tp->start_res, "snippet_file");
	int n = cJSON_GetArraySize(marks);

	if (read_brackets(tp->start_res, &tp->mark[0]) ||
	    read_brackets(tp->stop_res, &tp->mark[MARKERS])) {
		set_err(err, errlen, "the profiler snippet returned no clock brackets");
		return -EINVAL;
	}
	/* exactly ours: MARKERS made at start, MARKERS at stop */
	if (!cJSON_IsArray(marks) || n != 2 * MARKERS) {
		set_err(err, errlen, "the profiler recorded %d tptrace#clock markers, not %d: its "
			"clock cannot be aligned", n, 2 * MARKERS);
		return -EINVAL;
	}
	for (int i = 0; i < n; i++) {
		const cJSON *m = cJSON_GetArrayItem(marks, i);

		if (cJSON_GetArraySize(m) != 3) {
			set_err(err, errlen, "bad marker in the profiler snippet's result");
			return -EINVAL;
		}
		tp->mark[i].start_us = cJSON_GetArrayItem(m, 0)->valuedouble;
		tp->mark[i].end_us = cJSON_GetArrayItem(m, 1)->valuedouble;
		tp->mark[i].thread = cJSON_GetArrayItem(m, 2)->valuedouble;
		if (tp->mark[i].thread != tp->mark[0].thread) {
			set_err(err, errlen, "the clock markers ran on different profiler threads");
			return -EINVAL;
		}
	}
	tp->main_tid = (int)num(tp->start_res, "tid", 0);
	if (tp->main_tid <= 0) {
		set_err(err, errlen, "the profiler snippet returned no main thread id");
		return -EINVAL;
	}
	tp->derive_steps = steps && !strcmp(steps, "Optimizer.step spans");
	snprintf(tp->snippet_file, sizeof(tp->snippet_file), "%s", file ? file : "");
	align_clock(tp);
	return 0;
}

struct torchprof *torchprof__start(int pid, const struct torchprof_opts *o, char *err,
				   size_t errlen)
{
	struct torchprof *tp = calloc(1, sizeof(*tp));
	cJSON *args = NULL;
	const char *why;
	int e;

	if (!tp) {
		set_err(err, errlen, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	tp->pid = pid;
	tp->timeout_ms = o->timeout_ms;
	tp->door = pyrun__open(pid, err, errlen);
	if (!tp->door) {
		e = errno ? errno : EINVAL;
		goto fail;
	}
	e = -pyrun__file(tp->door, "torch_events.jsonl", tp->events_host, sizeof(tp->events_host),
			 tp->events_target, sizeof(tp->events_target));
	if (e) {
		set_err(err, errlen, "creating the events file: %s", strerror(e));
		goto fail;
	}
	args = cJSON_CreateObject();
	if (!args || !cJSON_AddStringToObject(args, "op", "start") ||
	    !cJSON_AddBoolToObject(args, "cuda", o->cuda)) {
		e = ENOMEM;
		set_err(err, errlen, "out of memory");
		goto fail;
	}
	e = -pyrun__exec(tp->door, py_torch_profile, args, o->timeout_ms, 0, &tp->start_res, err,
			 errlen);
	if (e)
		goto fail;
	why = snippet_error(tp->start_res);
	if (why) {
		set_err(err, errlen, "%s", why);
		e = EPERM;
		goto fail;
	}
	cJSON_Delete(args);
	return tp;
fail:
	cJSON_Delete(args);
	tp->stopped = true;	/* nothing was started */
	torchprof__free(tp);
	errno = e;
	return NULL;
}

int torchprof__stop(struct torchprof *tp, char *err, size_t errlen)
{
	int timeout = tp->timeout_ms > STOP_TIMEOUT_MIN_MS ? tp->timeout_ms : STOP_TIMEOUT_MIN_MS;
	cJSON *args = cJSON_CreateObject();
	const char *why;
	int e;

	tp->stopped = true;
	if (!args || !cJSON_AddStringToObject(args, "op", "stop") ||
	    !cJSON_AddStringToObject(args, "path", tp->events_target)) {
		cJSON_Delete(args);
		set_err(err, errlen, "out of memory");
		snprintf(tp->error, sizeof(tp->error), "out of memory");
		return -ENOMEM;
	}
	e = pyrun__exec(tp->door, py_torch_profile, args, timeout, PYRUN_KEEP_QUEUED,
			&tp->stop_res, err, errlen);
	cJSON_Delete(args);
	if (e) {
		char why[512];

		/* the stop stays queued: say what that leaves in the process meanwhile */
		snprintf(why, sizeof(why), "%s", err);
		set_err(err, errlen, "stopping the profiler: %s%s", why, e == -ETIMEDOUT ?
			"; torch.profiler records until then" : "");
		snprintf(tp->error, sizeof(tp->error), "%s", err);
		return e;
	}
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tp->stop_res, "exiting"))) {
		/* the stop ran during the job's exit, after the profiler's exit hook */
		set_err(err, errlen, "the process exited before the profiler was stopped: its "
			"events are lost");
		snprintf(tp->error, sizeof(tp->error), "%s", err);
		return -ESRCH;
	}
	why = snippet_error(tp->stop_res);
	if (why) {
		set_err(err, errlen, "stopping the profiler: %s", why);
		snprintf(tp->error, sizeof(tp->error), "%s", err);
		return -EPERM;
	}
	e = read_results(tp, err, errlen);
	if (e)
		snprintf(tp->error, sizeof(tp->error), "%s", err);
	return e;
}

/* ---- the merge ----------------------------------------------------------------------- */

/* The events file, one JSON array a line (user/py/torch_profile.py):
 *   ["s", 0, ["<built-in method addmm ...>", "train.py(12): step", ...]]   a stack, innermost
 *   ["e", "aten::addmm", 1, 1358, 1465, false, 0, [[32], [8, 16], [16, 32], [], []]]
 *        name, profiler thread, start µs, end µs, record_function span, stack id, input dims
 * and on 2.x a ninth item: {"types": ["float", ...]} (an op's input types), or
 * {"py": true, "id": 55, "parent": 53, "own": false} (a frame of the Python tracer; own: one
 * of tptrace's snippets or called from one). 1.13's stacks are per event; 2.x's are the
 * python_function events' tree. */
struct stacks {
	char **joined;			/* "frame;frame;..." innermost first, by id */
	bool *own;			/* a frame of tptrace's snippet: the event is ours */
	int nr, cap;
};

static int stacks_add(struct stacks *s, const cJSON *line, const char *snippet_file)
{
	int id = (int)cJSON_GetArrayItem(line, 1)->valuedouble;
	const cJSON *frames = cJSON_GetArrayItem(line, 2), *f;
	size_t len = 1;
	char *j, *p;

	if (id != s->nr || !cJSON_IsArray(frames))
		return -EINVAL;	/* ids are written in order, 0, 1, ... */
	if (id == s->cap) {
		int cap = s->cap ? s->cap * 2 : 64;
		char **nj = realloc(s->joined, cap * sizeof(*nj));
		bool *no;

		if (!nj)
			return -ENOMEM;
		s->joined = nj;
		no = realloc(s->own, cap * sizeof(*no));
		if (!no)
			return -ENOMEM;
		s->own = no;
		s->cap = cap;
	}
	cJSON_ArrayForEach(f, frames)
		if (cJSON_IsString(f))
			len += strlen(f->valuestring) + 1;
	j = p = malloc(len);
	if (!j)
		return -ENOMEM;
	*p = '\0';
	s->own[id] = false;
	cJSON_ArrayForEach(f, frames) {
		if (!cJSON_IsString(f))
			continue;
		/* "<tptrace snippet>(12): marker": file(line): function */
		if (snippet_file[0] && !strncmp(f->valuestring, snippet_file, strlen(snippet_file)) &&
		    f->valuestring[strlen(snippet_file)] == '(')
			s->own[id] = true;
		p += sprintf(p, "%s%s", p == j ? "" : ";", f->valuestring);
	}
	s->joined[id] = j;
	s->nr++;
	return 0;
}

static void stacks_free(struct stacks *s)
{
	for (int i = 0; i < s->nr; i++)
		free(s->joined[i]);
	free(s->joined);
	free(s->own);
}

static int64_t to_mono(const struct torchprof *tp, double us)
{
	return round_i64(us * 1000.0) + tp->offset_ns;
}

/* The trace tid of a profiler thread: the main thread's OS tid for the markers' thread, else
 * a labelled track of its own. -1 when there are too many threads to label. */
static int tid_of(struct torchprof *tp, struct trace_json *tj, double thread)
{
	char name[96];
	int i;

	if (thread == tp->mark[0].thread)
		return tp->main_tid;
	for (i = 0; i < tp->nr_threads; i++)
		if (tp->threads[i] == thread)
			return TORCH_TID_UNKNOWN_BASE + i;
	if (i == MAX_THREADS)
		return -1;
	tp->threads[tp->nr_threads++] = thread;
	snprintf(name, sizeof(name), "torch thread %.0f, OS tid unknown", thread);
	trace_json__thread_name(tj, tp->pid, TORCH_TID_UNKNOWN_BASE + i, name);
	return TORCH_TID_UNKNOWN_BASE + i;
}

/* 1.13 has no global optimizer hook: ProfilerStep#N is the stretch that ends with the N-th
 * Optimizer.step span of the window, from the end of the one before (the first from the
 * window's start), as torch.profiler's prof.step() after each step would mark it. */
struct step_end { int64_t end_ns; int tid; };

static int cmp_step(const void *a, const void *b)
{
	const struct step_end *x = a, *y = b;

	return x->end_ns < y->end_ns ? -1 : x->end_ns > y->end_ns;
}

static int write_event(struct torchprof *tp, struct trace_json *tj, const cJSON *line,
		       const struct stacks *st, uint64_t base, struct step_end **steps,
		       size_t *nr_steps, size_t *cap_steps)
{
	const cJSON *name = cJSON_GetArrayItem(line, 1), *dims = cJSON_GetArrayItem(line, 7);
	const cJSON *x = cJSON_GetArrayItem(line, 8);	/* 2.x, or NULL */
	double thread = cJSON_GetArrayItem(line, 2)->valuedouble;
	double s_us = cJSON_GetArrayItem(line, 3)->valuedouble;
	double e_us = cJSON_GetArrayItem(line, 4)->valuedouble;
	bool user = cJSON_IsTrue(cJSON_GetArrayItem(line, 5));
	int sid = (int)cJSON_GetArrayItem(line, 6)->valuedouble;
	bool main_thread = thread == tp->mark[0].thread;
	bool py = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(x, "py"));
	const cJSON *types = cJSON_GetObjectItemCaseSensitive(x, "types");
	int64_t ts, te, w0, w1;
	int tid;

	if (!cJSON_IsString(name) || sid < 0 || sid >= st->nr || (x && !cJSON_IsObject(x)))
		return -EINVAL;
	tp->events++;
	/* tptrace's own: the markers, and on the main thread whatever the snippets ran (their
	 * frame is in its stack, or 2.x's Python tracer has it under one of their frames; before
	 * the start marker or after the stop marker there is nothing else there, the snippet
	 * holds the thread) */
	if (!strcmp(name->valuestring, "tptrace#clock") || st->own[sid] ||
	    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(x, "own")) ||
	    (main_thread && (e_us <= tp->mark[MARKERS - 1].end_us ||
			     s_us >= tp->mark[MARKERS].start_us))) {
		tp->dropped_own++;
		return 0;
	}
	ts = to_mono(tp, s_us);
	te = to_mono(tp, e_us);
	if (ts < (int64_t)base || te < ts) {
		tp->dropped_early++;
		return 0;
	}
	if (main_thread) {
		/* 2.x: what spans a snippet (the job's frames the Python tracer found open, the
		 * ProfilerStep prof.start() opened) is cut at the window's edges; the step still
		 * open at the stop is no step: prof.stop() closed it */
		w0 = to_mono(tp, tp->mark[MARKERS - 1].end_us);
		w1 = to_mono(tp, tp->mark[MARKERS].start_us);
		if (user && !tp->derive_steps && te > w1 &&
		    !strncmp(name->valuestring, "ProfilerStep#", 13)) {
			tp->dropped_open_step++;
			return 0;
		}
		ts = ts < w0 ? w0 : ts;
		te = te > w1 ? w1 : te;
	}
	tid = tid_of(tp, tj, thread);
	if (tid < 0) {
		tp->dropped_threads++;
		return 0;
	}
	trace_json__event(tj, "X", py ? "python_function" : user ? "user_annotation" : "cpu_op",
			  name->valuestring, tp->pid, tid, ts, te - ts);
	if (cJSON_GetArraySize(dims) > 0) {
		char *d = cJSON_PrintUnformatted(dims);

		if (d)
			trace_json__arg_raw(tj, "Input Dims", d);	/* a list, as Kineto's */
		free(d);
	}
	if (cJSON_GetArraySize(types) > 0) {
		char *d = cJSON_PrintUnformatted(types);

		if (d)
			trace_json__arg_raw(tj, "Input type", d);	/* Kineto's name */
		free(d);
	}
	if (py) {
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(x, "id");
		const cJSON *parent = cJSON_GetObjectItemCaseSensitive(x, "parent");

		/* Kineto's args: the parent null at a root (-1 in the profiler's events) */
		if (cJSON_IsNumber(id))
			trace_json__arg_i64(tj, "Python id", (int64_t)id->valuedouble);
		if (cJSON_IsNumber(parent) && parent->valuedouble >= 0)
			trace_json__arg_i64(tj, "Python parent id", (int64_t)parent->valuedouble);
		else
			trace_json__arg_raw(tj, "Python parent id", "null");
		tp->python++;
	}
	if (st->joined[sid][0])
		trace_json__arg_str(tj, "Call stack", st->joined[sid]);
	trace_json__event_end(tj);
	tp->merged++;
	if (user && !tp->derive_steps && !strncmp(name->valuestring, "ProfilerStep#", 13))
		tp->profiler_steps++;
	if (tp->derive_steps && user && !strncmp(name->valuestring, "Optimizer.step#", 15)) {
		if (ARRAY_RESERVE(*steps, *cap_steps, *nr_steps + 1, 64))
			return -ENOMEM;
		(*steps)[(*nr_steps)++] = (struct step_end){ .end_ns = te, .tid = tid };
	}
	return 0;
}

int torchprof__write(struct torchprof *tp, struct trace_json *tj, uint64_t base_mono_ns,
		     char *err, size_t errlen)
{
	struct stacks st = {};
	struct step_end *steps = NULL;
	size_t nr_steps = 0, cap_steps = 0, len = 0;
	char *buf = NULL;
	int64_t prev;
	int e = 0;
	FILE *f;

	if (!tp->clock_ok) {
		set_err(err, errlen, "%s", tp->error[0] ? tp->error : "the profiler was not stopped");
		return -EINVAL;
	}
	f = fopen(tp->events_host, "re");
	if (!f) {
		e = -errno;
		set_err(err, errlen, "reading the profiler's events: %s", strerror(-e));
		return e;
	}
	tp->written = true;
	while (getline(&buf, &len, f) > 0) {
		cJSON *line = cJSON_Parse(buf);
		const cJSON *kind = cJSON_GetArrayItem(line, 0);

		if (!cJSON_IsString(kind)) {
			e = -EINVAL;
		} else if (!strcmp(kind->valuestring, "s") && cJSON_GetArraySize(line) == 3) {
			e = stacks_add(&st, line, tp->snippet_file);
		} else if (!strcmp(kind->valuestring, "e") && (cJSON_GetArraySize(line) == 8 ||
							       cJSON_GetArraySize(line) == 9)) {
			e = write_event(tp, tj, line, &st, base_mono_ns, &steps, &nr_steps,
					&cap_steps);
		} else {
			e = -EINVAL;
		}
		cJSON_Delete(line);
		if (e) {
			set_err(err, errlen, "the profiler's events file is malformed at event "
				"%llu: %s", (unsigned long long)tp->events, strerror(-e));
			goto out;
		}
	}
	if (ferror(f)) {
		e = -EIO;
		set_err(err, errlen, "reading the profiler's events: %s", strerror(EIO));
		goto out;
	}
	qsort(steps, nr_steps, sizeof(*steps), cmp_step);
	prev = to_mono(tp, tp->mark[MARKERS - 1].end_us);
	for (size_t i = 0; i < nr_steps; i++) {
		char name[48];

		snprintf(name, sizeof(name), "ProfilerStep#%zu", i);
		trace_json__event(tj, "X", "user_annotation", name, tp->pid, steps[i].tid, prev,
				  steps[i].end_ns - prev);
		trace_json__event_end(tj);
		prev = steps[i].end_ns;
	}
	tp->steps = tp->derive_steps ? nr_steps : tp->profiler_steps;
out:
	free(buf);
	free(steps);
	stacks_free(&st);
	fclose(f);
	return e;
}

static void add_i64_raw(cJSON *o, const char *key, int64_t v)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%lld", (long long)v);
	cJSON_AddItemToObject(o, key, cJSON_CreateRaw(buf));
}

cJSON *torchprof__meta(const struct torchprof *tp)
{
	cJSON *o = cJSON_CreateObject(), *c, *a, *t;
	const char *steps = str(tp->start_res, "steps");

	if (!o)
		return NULL;
	cJSON_AddNumberToObject(o, "pid", tp->pid);
	if (tp->door)
		cJSON_AddStringToObject(o, "python", pyrun__version(tp->door));
	if (str(tp->start_res, "torch"))
		cJSON_AddStringToObject(o, "torch_version", str(tp->start_res, "torch"));
	cJSON_AddBoolToObject(o, "kineto", cJSON_IsTrue(cJSON_GetObjectItem(tp->start_res,
								     "kineto")));
	cJSON_AddBoolToObject(o, "cuda_activity", cJSON_IsTrue(cJSON_GetObjectItem(tp->start_res,
									    "cuda")));
	if (tp->error[0])
		cJSON_AddStringToObject(o, "error", tp->error);
	if (!tp->clock_ok)
		return o;
	c = cJSON_AddObjectToObject(o, "clock");
	cJSON_AddStringToObject(c, "method", "record_function(\"tptrace#clock\") spans, each "
				"start and end bracketed by CLOCK_MONOTONIC reads in the target "
				"(time.monotonic_ns), 4 at start and 4 at stop; the offset is the "
				"middle of the offsets all of them allow");
	add_i64_raw(c, "offset_ns", tp->offset_ns);
	cJSON_AddNumberToObject(c, "residual_ns", (double)tp->residual_ns);
	cJSON_AddBoolToObject(c, "start_stop_agree", tp->clock_agree);
	cJSON_AddNumberToObject(c, "drift_ppm", tp->drift_ppm);
	a = cJSON_AddArrayToObject(c, "bounds_ns");
	for (int i = 0; i < 2; i++) {
		cJSON *m = cJSON_CreateArray();

		cJSON_AddItemToArray(m, cJSON_CreateNumber((double)tp->bound[i].lo));
		cJSON_AddItemToArray(m, cJSON_CreateNumber((double)tp->bound[i].hi));
		cJSON_AddItemToArray(a, m);
	}
	/* the window the profiler saw, between tptrace's snippets: CLOCK_MONOTONIC ns */
	a = cJSON_AddArrayToObject(o, "window_mono_ns");
	cJSON_AddItemToArray(a, cJSON_CreateNumber((double)to_mono(tp, tp->mark[MARKERS - 1].end_us)));
	cJSON_AddItemToArray(a, cJSON_CreateNumber((double)to_mono(tp, tp->mark[MARKERS].start_us)));
	cJSON_AddStringToObject(o, "steps_method", !steps ? "unknown" : tp->derive_steps ?
				"derived from Optimizer.step#<Class>.step spans (no global optimizer "
				"hook in this torch)" : "torch.optim.optimizer."
				"register_optimizer_step_post_hook calling prof.step()");
	if (tp->derive_steps && tp->written)
		cJSON_AddNumberToObject(o, "steps", (double)tp->steps);
	else if (cJSON_IsNumber(cJSON_GetObjectItem(tp->stop_res, "steps")))
		cJSON_AddNumberToObject(o, "steps", num(tp->stop_res, "steps", 0));
	t = cJSON_AddArrayToObject(o, "threads");
	{
		cJSON *m = cJSON_CreateObject();

		cJSON_AddNumberToObject(m, "torch_thread", tp->mark[0].thread);
		cJSON_AddNumberToObject(m, "os_tid", tp->main_tid);
		cJSON_AddItemToArray(t, m);
	}
	for (int i = 0; i < tp->nr_threads; i++) {
		cJSON *m = cJSON_CreateObject();

		cJSON_AddNumberToObject(m, "torch_thread", tp->threads[i]);
		cJSON_AddNullToObject(m, "os_tid");
		cJSON_AddNumberToObject(m, "track_tid", TORCH_TID_UNKNOWN_BASE + i);
		cJSON_AddItemToArray(t, m);
	}
	if (tp->written) {
		cJSON *d;

		cJSON_AddNumberToObject(o, "events", (double)tp->events);
		cJSON_AddNumberToObject(o, "events_merged", (double)tp->merged);
		d = cJSON_AddObjectToObject(o, "events_dropped");
		/* what tptrace's own snippets ran on the main thread, and the markers */
		cJSON_AddNumberToObject(d, "tptrace_own", (double)tp->dropped_own);
		cJSON_AddNumberToObject(d, "before_trace_start", (double)tp->dropped_early);
		cJSON_AddNumberToObject(d, "too_many_threads", (double)tp->dropped_threads);
		/* 2.x: the ProfilerStep prof.step() had opened when the window ended */
		cJSON_AddNumberToObject(d, "step_open_at_stop", (double)tp->dropped_open_step);
		cJSON_AddNumberToObject(o, "python_functions", (double)tp->python);
	}
	return o;
}

void torchprof__free(struct torchprof *tp)
{
	char err[256];

	if (!tp)
		return;
	/* started and never stopped (tptrace failed in between): the profiler goes off all the
	 * same, its events unread */
	if (tp->start_res && !tp->stopped && tp->door)
		torchprof__stop(tp, err, sizeof(err));
	pyrun__close(tp->door);	/* removes the events file with its directory */
	cJSON_Delete(tp->start_res);
	cJSON_Delete(tp->stop_res);
	free(tp);
}

struct torchprof *torchprof__replay(int pid, const cJSON *start_res, const cJSON *stop_res,
				    const char *events_path)
{
	struct torchprof *tp = calloc(1, sizeof(*tp));
	char err[256];

	if (!tp)
		return NULL;
	tp->pid = pid;
	tp->stopped = true;
	tp->start_res = cJSON_Duplicate(start_res, true);
	tp->stop_res = cJSON_Duplicate(stop_res, true);
	snprintf(tp->events_host, sizeof(tp->events_host), "%s", events_path);
	if (!tp->start_res || !tp->stop_res || read_results(tp, err, sizeof(err))) {
		torchprof__free(tp);
		errno = EINVAL;
		return NULL;
	}
	return tp;
}

/* ---- the other instruments ----------------------------------------------------------- */

struct torch_instr_run {
	struct pyrun *door;
	enum torch_instr what;
	int timeout_ms;
	char out_host[4096], out_target[4096];
	cJSON *logs;
	bool on;			/* started, not stopped yet */
};

static const char *const instr_name[] = {
	[TORCH_MEM_HISTORY] = "mem", [TORCH_FR_DUMP] = "fr", [TORCH_LOGS] = "logs",
	[TORCH_TRACE] = "trace",
};

static const char *const log_names[] = { "recompiles", "graph_breaks", NULL };

int torch_logs__check(const char *list)
{
	char buf[256], *save = NULL, *tok;
	int n = 0;

	if (snprintf(buf, sizeof(buf), "%s", list) >= (int)sizeof(buf))
		return -EINVAL;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int i;

		for (i = 0; log_names[i] && strcmp(log_names[i], tok); i++)
			;
		if (!log_names[i])
			return -EINVAL;
		n++;
	}
	return n ? 0 : -EINVAL;
}

static cJSON *instr_args(const struct torch_instr_run *r, const char *op)
{
	cJSON *a = cJSON_CreateObject();

	if (!a || !cJSON_AddStringToObject(a, "what", instr_name[r->what]) ||
	    !cJSON_AddStringToObject(a, "op", op) ||
	    !cJSON_AddStringToObject(a, "path", r->out_target) ||
	    (r->logs && !cJSON_AddItemReferenceToObject(a, "logs", r->logs))) {
		cJSON_Delete(a);
		return NULL;
	}
	return a;
}

static int instr_call_res(struct torch_instr_run *r, const char *op, int timeout_ms,
			  cJSON **out, char *err, size_t errlen)
{
	cJSON *args = instr_args(r, op), *res = NULL;
	const char *why;
	int e;

	if (!args) {
		set_err(err, errlen, "out of memory");
		return -ENOMEM;
	}
	e = pyrun__exec(r->door, py_torch_instr, args, timeout_ms,
			!strcmp(op, "stop") ? PYRUN_KEEP_QUEUED : 0, &res, err, errlen);
	cJSON_Delete(args);
	if (e)
		return e;
	why = snippet_error(res);
	if (why) {
		set_err(err, errlen, "%s", why);
		e = -EPERM;
	}
	if (out && !e)
		*out = res;
	else
		cJSON_Delete(res);
	return e;
}

static int instr_call(struct torch_instr_run *r, const char *op, int timeout_ms, char *err,
		      size_t errlen)
{
	return instr_call_res(r, op, timeout_ms, NULL, err, errlen);
}

struct torch_instr_run *torch_instr__start(int pid, enum torch_instr what, const char *arg,
					   int timeout_ms, char *err, size_t errlen)
{
	struct torch_instr_run *r = calloc(1, sizeof(*r));
	int e;

	if (!r) {
		set_err(err, errlen, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	r->what = what;
	r->timeout_ms = timeout_ms;
	if (what == TORCH_LOGS) {
		char buf[256], *save = NULL, *tok;

		r->logs = cJSON_CreateArray();
		snprintf(buf, sizeof(buf), "%s", arg ? arg : "");
		for (tok = strtok_r(buf, ",", &save); tok && r->logs;
		     tok = strtok_r(NULL, ",", &save))
			cJSON_AddItemToArray(r->logs, cJSON_CreateString(tok));
	}
	r->door = pyrun__open(pid, err, errlen);
	if (!r->door) {
		e = errno ? errno : EINVAL;
		goto fail;
	}
	e = -pyrun__file(r->door, "torch_out", r->out_host, sizeof(r->out_host), r->out_target,
			 sizeof(r->out_target));
	if (e) {
		set_err(err, errlen, "creating the output file: %s", strerror(e));
		goto fail;
	}
	e = -instr_call(r, "start", timeout_ms, err, errlen);
	if (e)
		goto fail;
	r->on = what != TORCH_FR_DUMP;	/* the dump switches nothing on */
	return r;
fail:
	torch_instr__free(r);
	errno = e;
	return NULL;
}

/* out_path gets what the snippet wrote (created 0600; replaced if there). */
static int copy_out(const char *from, const char *to, char *err, size_t errlen)
{
	char buf[65536];
	int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, e = 0;
	ssize_t n;

	if (in < 0) {
		e = -errno;
		set_err(err, errlen, "reading what PyTorch wrote: %s", strerror(-e));
		return e;
	}
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out < 0) {
		e = -errno;
		set_err(err, errlen, "cannot write %s: %s", to, strerror(-e));
		goto out;
	}
	while ((n = read(in, buf, sizeof(buf))) > 0) {
		if (write(out, buf, n) != n) {
			e = errno ? -errno : -EIO;
			set_err(err, errlen, "writing %s: %s", to, strerror(-e));
			goto out;
		}
	}
	if (n < 0) {
		e = -errno;
		set_err(err, errlen, "reading what PyTorch wrote: %s", strerror(-e));
	}
out:
	if (out >= 0 && close(out) && !e) {
		e = -errno;
		set_err(err, errlen, "writing %s: %s", to, strerror(-e));
	}
	close(in);
	return e;
}

int torch_instr__stop(struct torch_instr_run *r, const char *out_path, char *err, size_t errlen)
{
	int timeout = r->timeout_ms > STOP_TIMEOUT_MIN_MS ? r->timeout_ms : STOP_TIMEOUT_MIN_MS;
	int e = instr_call(r, "stop", timeout, err, errlen);

	r->on = false;
	if (e)
		return e;
	return out_path ? copy_out(r->out_host, out_path, err, errlen) : 0;
}

int torch_trace__stop(struct torch_instr_run *r, const char *dir, char *wrote, size_t wlen,
		      char *err, size_t errlen)
{
	int timeout = r->timeout_ms > STOP_TIMEOUT_MIN_MS ? r->timeout_ms : STOP_TIMEOUT_MIN_MS;
	char from[4096 + 256], *slash;
	const char *file;
	cJSON *res = NULL;
	int e = instr_call_res(r, "stop", timeout, &res, err, errlen);

	r->on = false;
	wrote[0] = '\0';
	if (e)
		return e;
	file = str(res, "file");
	if (!file) {	/* nothing was logged in the window: torch opened no file */
		cJSON_Delete(res);
		return 0;
	}
	/* torch's name for it, in the directory tptrace gave (the output file's) */
	if (strncmp(file, "dedicated_log_torch_trace_", 26) || strchr(file, '/') ||
	    strlen(file) > 200) {
		set_err(err, errlen, "PyTorch named its trace file '%.200s', not "
			"dedicated_log_torch_trace_*", file);
		cJSON_Delete(res);
		return -EINVAL;
	}
	snprintf(from, sizeof(from), "%s", r->out_host);
	slash = strrchr(from, '/');
	snprintf(slash + 1, sizeof(from) - (slash + 1 - from), "%s", file);
	if (mkdir(dir, 0700) && errno != EEXIST) {
		e = -errno;
		set_err(err, errlen, "cannot make %s: %s", dir, strerror(-e));
		cJSON_Delete(res);
		return e;
	}
	if (snprintf(wrote, wlen, "%s/%s", dir, file) >= (int)wlen) {
		set_err(err, errlen, "the path %s/%s is too long", dir, file);
		cJSON_Delete(res);
		wrote[0] = '\0';
		return -ENAMETOOLONG;
	}
	cJSON_Delete(res);
	e = copy_out(from, wrote, err, errlen);
	if (e)
		wrote[0] = '\0';
	return e;
}

void torch_instr__free(struct torch_instr_run *r)
{
	char err[256];

	if (!r)
		return;
	/* switched on and never off (tptrace failed in between): off it goes, output unread */
	if (r->on)
		instr_call(r, "stop", r->timeout_ms, err, sizeof(err));
	pyrun__close(r->door);
	cJSON_Delete(r->logs);
	free(r);
}

const char *torch__err_line(int pid, const char *err)
{
	static __thread char buf[1024];
	char own[32];

	snprintf(own, sizeof(own), "process %d", pid);
	if (strstr(err, own))
		snprintf(buf, sizeof(buf), "%s", err);
	else
		snprintf(buf, sizeof(buf), "pid %d: %s", pid, err);
	return buf;
}

int torch__parse_timeout(const char *arg, double *sec)
{
	double v;

	if (session__parse_seconds(arg, &v) || v > 3600)
		return -EINVAL;
	*sec = v;
	return 0;
}
