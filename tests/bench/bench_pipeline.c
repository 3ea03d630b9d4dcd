// SPDX-License-Identifier: MIT
/*
 * bench_pipeline: the user-space half of tptrace without the kernel. Fabricates the ring
 * records bpf/cuda.bpf.c would produce for sim_train's call mix (tests/workloads/sim_train.c:
 * per step 4 launches, 2 memcpyAsync, eventRecord, streamWaitEvent, eventQuery+return,
 * streamSynchronize+return) and pushes them through session__ring_cb into a .json.gz trace,
 * with this very process as the target (target__scan with NULL programs: resolve only), so
 * kernel naming from the .symtab runs for real.
 *
 * Usage: bench_pipeline --cudart LIB [--steps N (100000)] [--reps R (5)] [-o FILE]
 * Prints: pipeline_ns_per_event, pipeline_events_per_s, trace_bytes_per_event,
 *         pipeline_records_per_event (one "event" = one traced API call = one trace slice),
 *         pipeline_cpu_ns_per_event (CPU time of every thread, the gzip workers included),
 *         pipeline_reader_cpu_ns_per_event (CPU time of the thread that decodes and formats:
 *         the one that must keep up with the rings);
 *         with -o FILE.pftrace also trace_arg_bytes_per_event: what the calls' arguments take
 *         of it (the TrackEvents' debug annotations and the InternedData entries of their
 *         names and string values), read back with protobuf-c.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "cuda.h"
#include "cuda_api.h"
#include "decode.h"
#include "elfsym.h"
#include "session.h"
#include "target.h"
#include "trace_json.h"
#include "perfetto_trace.pb-c.h"

/* tptrace_verbosity: user/core/session.c's (the library defines it since the ustack work); quiet here */
extern int tptrace_verbosity;

__attribute__((noinline)) void fake_gemm(float *a, int n)
{
	for (int i = 0; i < n; i++)
		a[i] *= 2.0f;
}

__attribute__((noinline)) void fake_relu(float *a, int n)
{
	for (int i = 0; i < n; i++)
		a[i] = a[i] > 0 ? a[i] : 0;
}

static uint64_t now_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static size_t varint_size(uint64_t v)
{
	size_t n = 1;

	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

/* Bytes of a .pftrace that carry arguments: annotations and the interned entries of their
 * names and values (each with its tag and length). -1 when it cannot be read. */
static double pftrace_arg_bytes(const char *path)
{
	FILE *f = fopen(path, "rb");
	Perfetto__Protos__Trace *t;
	uint8_t *buf;
	long len;
	double n = 0;

	if (!f || fseek(f, 0, SEEK_END) || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		if (f)
			fclose(f);
		return -1;
	}
	buf = malloc(len ? len : 1);
	if (!buf || fread(buf, 1, len, f) != (size_t)len) {
		free(buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	t = perfetto__protos__trace__unpack(NULL, len, buf);
	free(buf);
	if (!t)
		return -1;
	for (size_t i = 0; i < t->n_packet; i++) {
		const Perfetto__Protos__TracePacket *p = t->packet[i];
		const Perfetto__Protos__InternedData *in = p->interned_data;
		size_t sz;

		for (size_t k = 0; p->track_event && k < p->track_event->n_debug_annotations; k++) {
			sz = perfetto__protos__debug_annotation__get_packed_size(
				p->track_event->debug_annotations[k]);
			n += 1 + varint_size(sz) + sz;
		}
		for (size_t k = 0; in && k < in->n_debug_annotation_names; k++) {
			sz = perfetto__protos__debug_annotation_name__get_packed_size(
				in->debug_annotation_names[k]);
			n += 1 + varint_size(sz) + sz;
		}
		for (size_t k = 0; in && k < in->n_debug_annotation_string_values; k++) {
			sz = perfetto__protos__interned_string__get_packed_size(
				in->debug_annotation_string_values[k]);
			n += 2 + varint_size(sz) + sz;	/* field 29: a two-byte tag */
		}
	}
	perfetto__protos__trace__free_unpacked(t, NULL);
	return n;
}

static int api_id(const char *symbol)
{
	for (int i = 0; i < cuda_api_count; i++)
		if (!strcmp(cuda_apis[i].symbol, symbol))
			return i;
	fprintf(stderr, "bench_pipeline: %s not in the API table\n", symbol);
	exit(1);
}

static void sort_doubles(double *v, long n)
{
	for (long i = 0; i < n; i++)
		for (long j = i + 1; j < n; j++)
			if (v[j] < v[i]) {
				double x = v[i];

				v[i] = v[j];
				v[j] = x;
			}
}

struct gen {
	struct session *core;
	int pid, tid;
	uint64_t ts;
	uint64_t records;
	uint64_t rng;
};

/* call spacing varies like a real loop's does (so the trace compresses realistically) */
static uint64_t jitter(struct gen *g)
{
	g->rng = g->rng * 6364136223846793005ULL + 1442695040888963407ULL;
	return (g->rng >> 33) & 1023;
}

static void call(struct gen *g, int api, uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3,
		 uint64_t a4, uint64_t a5, uint64_t s1, uint64_t s2)
{
	struct tp_rec_call c;

	memset(&c, 0, sizeof(c));
	c.type = TP_REC_CALL;
	c.api = api;
	c.pid = g->pid;
	c.tid = g->tid;
	c.ts = g->ts += 1500 + jitter(g);
	c.args[0] = a0, c.args[1] = a1, c.args[2] = a2;
	c.args[3] = a3, c.args[4] = a4, c.args[5] = a5;
	c.stack[0] = (uint64_t)(uintptr_t)__builtin_return_address(0);
	c.stack[1] = s1;
	c.stack[2] = s2;
	session__ring_cb(g->core, &c, sizeof(c));
	g->records++;
}

static void ret(struct gen *g, int api, uint64_t rc)
{
	struct tp_rec_ret r;

	memset(&r, 0, sizeof(r));
	r.type = TP_REC_RET;
	r.api = api;
	r.pid = g->pid;
	r.tid = g->tid;
	r.ts = g->ts += 4000 + 4 * jitter(g);
	r.rc = rc;
	session__ring_cb(g->core, &r, sizeof(r));
	g->records++;
}

int main(int argc, char **argv)
{
	const char *cudart = NULL, *out = "/tmp/tptrace-bench-pipeline.json.gz";
	long steps = 100000, reps = 5;
	struct target_probes probes = {};	/* no programs: resolve only */
	struct elfsym_cache *cache;
	struct target *t;
	double best_ns[64], cpu_ns[64], reader_ns[64];
	uint64_t calls = 0, records = 0, bytes = 0;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--cudart"))
			cudart = argv[i + 1];
		else if (!strcmp(argv[i], "--steps"))
			steps = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--reps"))
			reps = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "-o"))
			out = argv[i + 1];
	}
	tptrace_verbosity = -1;
	if (reps < 1 || reps > 64 || steps < 1) {
		fprintf(stderr, "usage: bench_pipeline --cudart LIB [--steps N] [--reps R] [-o FILE]\n");
		return 2;
	}
	if (cudart && !dlopen(cudart, RTLD_NOW | RTLD_GLOBAL)) {
		fprintf(stderr, "bench_pipeline: %s\n", dlerror());
		return 1;
	}
	cache = elfsym_cache__new();
	t = target__new(getpid());
	if (!cache || !t || target__scan(t, cache, &probes) < 0) {
		fprintf(stderr, "bench_pipeline: cannot scan own process: %s\n", strerror(errno));
		return 1;
	}

	int launch = api_id("cudaLaunchKernel"), memcpy_async = api_id("cudaMemcpyAsync");
	int ev_record = api_id("cudaEventRecord"), wait_event = api_id("cudaStreamWaitEvent");
	int ev_query = api_id("cudaEventQuery"), stream_sync = api_id("cudaStreamSynchronize");
	uint64_t gemm = (uintptr_t)fake_gemm, relu = (uintptr_t)fake_relu;
	uint64_t sa = 0x55550000a000, sb = 0x55550000b000, ev = 0x55550000e000;

	for (long rep = 0; rep < reps; rep++) {
		struct trace_json *tj = trace_json__open(out);
		struct session *core;
		struct decoder *dec;
		struct gen g = { .pid = getpid(), .tid = gettid(), .rng = 42 };
		uint64_t t0, t1, c0, c1, r0, r1;
		struct stat st;

		if (!tj) {
			fprintf(stderr, "bench_pipeline: %s: %s\n", out, strerror(errno));
			return 1;
		}
		c0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
		r0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
		t0 = now_ns(CLOCK_MONOTONIC);
		trace_json__begin(tj, t0, now_ns(CLOCK_REALTIME));
		g.ts = t0;
		core = session__new(cache, &probes);
		session__add_target(core, t);
		dec = decoder__new(core, tj, cache);
		g.core = core;
		for (long s = 0; s < steps; s++) {
			for (int k = 0; k < 3; k++)	/* grid (64,2,1) block (256,1,1) shmem 4096 on A */
				call(&g, launch, gemm, 64 | 2ULL << 32, 1, 256 | 1ULL << 32, 1, 0x7ffd0000,
				     4096, sa);
			call(&g, launch, relu, 128 | 1ULL << 32, 1, 128 | 1ULL << 32, 1, 0x7ffd0000, 0, sb);
			call(&g, memcpy_async, 0x7f0000000000, 0x7f1000000000, 1 << 20, 1, sa, 0, 0, 0);
			call(&g, ev_record, ev, sa, 0, 0, 0, 0, 0, 0);
			call(&g, wait_event, sb, ev, 0, 0, 0, 0, 0, 0);
			call(&g, memcpy_async, 0x7f2000000000, 0x7f3000000000, 4096, 2, sb, 0, 0, 0);
			call(&g, ev_query, ev, 0, 0, 0, 0, 0, 0, 0);
			ret(&g, ev_query, 600);
			call(&g, stream_sync, sb, 0, 0, 0, 0, 0, 0, 0);
			ret(&g, stream_sync, 0);
		}
		decoder__finish(dec, g.ts);
		trace_json__end_events(tj);
		if (trace_json__close(tj)) {
			fprintf(stderr, "bench_pipeline: writing %s failed\n", out);
			return 1;
		}
		t1 = now_ns(CLOCK_MONOTONIC);
		r1 = now_ns(CLOCK_THREAD_CPUTIME_ID);
		c1 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
		calls = decoder__stats(dec)->calls;
		if (decoder__stats(dec)->launches_named != (uint64_t)steps * 4) {
			fprintf(stderr, "bench_pipeline: %llu of %ld launches named\n",
				(unsigned long long)decoder__stats(dec)->launches_named, steps * 4);
			return 1;
		}
		records = g.records;
		decoder__free(dec);
		session__free(core);
		best_ns[rep] = (double)(t1 - t0) / calls;
		cpu_ns[rep] = (double)(c1 - c0) / calls;
		reader_ns[rep] = (double)(r1 - r0) / calls;
		if (!stat(out, &st))
			bytes = st.st_size;
	}
	sort_doubles(best_ns, reps);
	sort_doubles(cpu_ns, reps);
	sort_doubles(reader_ns, reps);
	printf("pipeline_ns_per_event: %.1f\n", best_ns[reps / 2]);
	printf("pipeline_events_per_s: %.0f\n", 1e9 / best_ns[reps / 2]);
	printf("trace_bytes_per_event: %.1f\n", (double)bytes / calls);
	printf("pipeline_records_per_event: %.2f\n", (double)records / calls);
	printf("pipeline_cpu_ns_per_event: %.1f\n", cpu_ns[reps / 2]);
	printf("pipeline_reader_cpu_ns_per_event: %.1f\n", reader_ns[reps / 2]);
	{
		size_t n = strlen(out);

		if (n > 8 && !strcmp(out + n - 8, ".pftrace")) {
			double arg_bytes = pftrace_arg_bytes(out);

			if (arg_bytes < 0) {
				fprintf(stderr, "bench_pipeline: %s does not read back\n", out);
				return 1;
			}
			printf("trace_arg_bytes_per_event: %.1f\n", arg_bytes / calls);
		}
	}
	target__free(t);
	elfsym_cache__free(cache);
	return 0;
}
