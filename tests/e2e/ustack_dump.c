// SPDX-License-Identifier: MIT
/* Test driver for the BPF stack walker (bpf/ustack.bpf.h) and user/core/ustack.c, without the
 * decoder: loads tptrace's own BPF object with stack capture on, attaches its entry program
 * to LIB:SYMBOL of PID with tptrace's cookie for that API, and prints one JSON line per call:
 *   ustack_dump PID LIB SYMBOL SECONDS [--native] [--bench] [--late] [--no-stacks]
 *   {"python":"3.11.7"} or {"python":null,"why":"..."}      (first line, after setup)
 *   READY                                                   (attached)
 *   {"tid":T,"arg0":A,"id":ID,"status":"...","flags":F,"py":[[func,file,line,firstlineno],...],
 *    "native":[[func,module,pc],...],"native_stop":"..."}   (per call, innermost first;
 *                                                             unresolved frames: [null,null,0,0])
 *   {"counters":{"captured":N,...},"resolved":N,"map_misses":N,"resolve_ns":X}   (at the end)
 * It ends after SECONDS, at SIGINT/SIGTERM, or when PID exits. --bench: no per-call lines, only the summary
 * (resolve_ns: mean user-space cost of ustacks__get per event, stacks cached).
 * --late: records are kept and resolved only at the end (the target must still run): code
 * objects freed meanwhile must come out unresolved, never wrong. --no-stacks: the same probe
 * with stack capture off (the benchmark's baseline). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <bpf/libbpf.h>
#include <cjson/cJSON.h>

#include "cuda.skel.h"
#include "cuda.h"
#include "cuda_api.h"
#include "session.h"
#include "ustack.h"
#include "util.h"

static struct ustacks *g_u;
static int g_pid;
static bool g_bench;
static uint64_t g_events, g_resolve_ns;
static bool g_late, g_flushing;
static volatile sig_atomic_t g_stop;

static void on_sigint(int sig)
{
	(void)sig;
	g_stop = 1;
}
static struct tp_rec_call *g_kept;
static size_t g_nr_kept, g_cap_kept;

static int on_rec(void *ctx, void *data, size_t size)
{
	const struct tp_rec_call *r = data;
	const struct ustack *s;
	uint64_t t0;
	cJSON *o, *py, *nat;

	(void)ctx;
	if (size < TP_REC_CALL_SHORT_SIZE || r->type != TP_REC_CALL)
		return 0;
	if (g_late && !g_flushing) {
		if (g_nr_kept == g_cap_kept) {
			g_cap_kept = g_cap_kept ? 2 * g_cap_kept : 1024;
			g_kept = realloc(g_kept, g_cap_kept * sizeof(*g_kept));
			if (!g_kept)
				exit(1);
		}
		memcpy(&g_kept[g_nr_kept++], r, TP_REC_CALL_SHORT_SIZE);
		return 0;
	}
	t0 = now_ns();
	s = ustacks__get(g_u, r->pid, r->ustack);
	g_resolve_ns += now_ns() - t0;
	g_events++;
	if (g_bench)
		return 0;
	o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "tid", r->tid);
	cJSON_AddNumberToObject(o, "arg0", (double)r->args[0]);
	cJSON_AddNumberToObject(o, "id", (double)r->ustack);
	cJSON_AddStringToObject(o, "status", ustacks__status_name(r->ustack));
	if (s) {
		cJSON_AddNumberToObject(o, "flags", s->flags);
		if (s->nr_py)	/* the innermost code object's address */
			cJSON_AddNumberToObject(o, "code", (double)s->py[0].code);
		py = cJSON_AddArrayToObject(o, "py");
		for (int i = 0; i < s->nr_py; i++) {
			const struct ustack_frame *f = &s->py[i];
			cJSON *a = cJSON_CreateArray();

			cJSON_AddItemToArray(a, f->func ? cJSON_CreateString(f->func) : cJSON_CreateNull());
			cJSON_AddItemToArray(a, f->file ? cJSON_CreateString(f->file) : cJSON_CreateNull());
			cJSON_AddItemToArray(a, cJSON_CreateNumber(f->line));
			cJSON_AddItemToArray(a, cJSON_CreateNumber(f->firstlineno));
			cJSON_AddItemToArray(py, a);
		}
		nat = cJSON_AddArrayToObject(o, "native");
		for (int i = 0; i < s->nr_native; i++) {
			const struct ustack_frame *f = &s->native[i];
			cJSON *a = cJSON_CreateArray();

			cJSON_AddItemToArray(a, f->func ? cJSON_CreateString(f->func) : cJSON_CreateNull());
			cJSON_AddItemToArray(a, f->file ? cJSON_CreateString(f->file) : cJSON_CreateNull());
			cJSON_AddItemToArray(a, cJSON_CreateNumber((double)f->pc));
			cJSON_AddItemToArray(nat, a);
		}
		if (s->native_stop)
			cJSON_AddStringToObject(o, "native_stop", s->native_stop);
	}
	{
		char *txt = cJSON_PrintUnformatted(o);

		printf("%s\n", txt);
		free(txt);
	}
	cJSON_Delete(o);
	return 0;
}

int main(int argc, char **argv)
{
	struct session_load_opts lo = { .ustacks = true };
	struct ring_buffer *rb = NULL;
	struct session_bpf *b;
	struct bpf_link *link;
	const char *python = NULL;
	char why[256];
	uint64_t cookie = 0, end;
	double secs;
	int id, ret;
	cJSON *o, *c;

	if (argc < 5) {
		fprintf(stderr, "usage: ustack_dump PID LIB SYMBOL SECONDS [--native] [--bench]\n");
		return 2;
	}
	g_pid = atoi(argv[1]);
	secs = atof(argv[4]);
	for (int i = 5; i < argc; i++) {
		if (!strcmp(argv[i], "--native"))
			lo.ustacks_native = true;
		else if (!strcmp(argv[i], "--bench"))
			g_bench = true;
		else if (!strcmp(argv[i], "--late"))
			g_late = true;
		else if (!strcmp(argv[i], "--no-stacks"))
			lo.ustacks = false;
	}
	for (id = 0; id < cuda_api_count; id++)
		if (!strcmp(cuda_apis[id].symbol, argv[3]))
			break;
	if (id == cuda_api_count) {
		fprintf(stderr, "ustack_dump: %s is not a probed CUDA API\n", argv[3]);
		return 2;
	}
	cookie = cuda_api_cookie(id, false);
	b = session__load_bpf(4, &lo);
	if (!b)
		return 1;
	g_u = b->ustacks;
	ret = g_u ? ustacks__add_pid(g_u, g_pid, &python, why, sizeof(why)) : -ENOTSUP;
	if (!g_u)
		snprintf(why, sizeof(why), "stack capture off");
	o = cJSON_CreateObject();
	if (python)
		cJSON_AddStringToObject(o, "python", python);
	else
		cJSON_AddNullToObject(o, "python");
	if (ret)
		cJSON_AddStringToObject(o, "why", why);
	{
		char *txt = cJSON_PrintUnformatted(o);

		printf("%s\n", txt);
		free(txt);
	}
	cJSON_Delete(o);
	{
		LIBBPF_OPTS(bpf_uprobe_opts, opts, .bpf_cookie = cookie, .func_name = argv[3]);

		link = bpf_program__attach_uprobe_opts(b->skel->progs.cuda_entry, g_pid, argv[2], 0,
							&opts);
	}
	if (!link) {
		fprintf(stderr, "ustack_dump: attach %s:%s: %s\n", argv[2], argv[3], strerror(errno));
		return 1;
	}
	rb = ring_buffer__new(bpf_map__fd(b->skel->maps.events), on_rec, NULL, NULL);
	if (!rb)
		return 1;
	/* before READY: a SIGINT sent right after it (a loaded host can keep this process off
	 * the CPU until the target has finished) must end the loop, not kill the dumper */
	signal(SIGINT, on_sigint);
	signal(SIGTERM, on_sigint);
	printf("READY\n");
	fflush(stdout);
	end = now_ns() + (uint64_t)(secs * 1e9);
	while (!g_stop && now_ns() < end) {
		ring_buffer__poll(rb, 20);
		ring_buffer__consume(rb);	/* records are submitted without wake-ups */
		fflush(stdout);
		if (kill(g_pid, 0) && errno == ESRCH)
			break;
	}
	ring_buffer__consume(rb);
	g_flushing = true;
	for (size_t i = 0; i < g_nr_kept; i++)
		on_rec(NULL, &g_kept[i], TP_REC_CALL_SHORT_SIZE);
	o = cJSON_CreateObject();
	c = cJSON_AddObjectToObject(o, "counters");
	{
		static const char *names[] = { "captured", "new", "lost", "nopy", "walks" };

		for (int i = 0; i < TP_USTACK_NR_COUNTERS; i++) {
			uint64_t v;

			if (ustacks__counter(g_u, i, &v))
				cJSON_AddStringToObject(c, names[i], "unknown");
			else
				cJSON_AddNumberToObject(c, names[i], (double)v);
		}
	}
	cJSON_AddNumberToObject(o, "events", (double)g_events);
	cJSON_AddNumberToObject(o, "resolved", (double)ustacks__stats(g_u)->resolved);
	cJSON_AddNumberToObject(o, "map_misses", (double)ustacks__stats(g_u)->map_misses);
	cJSON_AddNumberToObject(o, "unresolved_frames",
				(double)ustacks__stats(g_u)->unresolved_frames);
	cJSON_AddNumberToObject(o, "resolve_ns", g_events ? (double)g_resolve_ns / g_events : 0);
	{
		char *txt = cJSON_PrintUnformatted(o);

		printf("%s\n", txt);
		free(txt);
	}
	cJSON_Delete(o);
	ring_buffer__free(rb);
	bpf_link__destroy(link);
	session__free_bpf(b);
	return 0;
}
