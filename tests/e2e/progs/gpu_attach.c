// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * gpu_attach: drives user/gpu/gpu.c and user/trace/gpu_trace.c against a running process without the
 * uprobe side of `tptrace -p PID --gpu`: the agent's records alone, and its stats.
 *
 * Usage: gpu_attach -p PID -o TRACE.json [--cupti PATH] [--agent PATH] [--no-precheck]
 *                   [--files] [--ring N] [--api] [-d SECONDS]
 * Attaches, prints "ATTACHED <pid>" on stdout, drains the ring every 20 ms until -d SECONDS
 * passed or a line "STOP" (or EOF) arrives on stdin, detaches, writes the trace and prints one
 * line "STATS {json}". Attach failures: "gpu_attach: <reason>" on stderr, exit 2 (3 when the
 * agent refused: no CUDA, no CUPTI, another subscriber).
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu.h"
#include "gpu_trace.h"
#include "trace_json.h"

int tptrace_verbosity;

struct sink {
	struct trace_json *tj;
	struct gpu_trace *gt;
	int pid;
	int api;
};

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void on_record(void *ctx, const struct agent_record *r)
{
	struct sink *k = ctx;

	if (!gpu_trace__record(k->gt, k->pid, r) && k->api)
		gpu_trace__api(k->gt, r, k->pid);
}

int main(int argc, char **argv)
{
	struct gpu_opts opts = { 0 };
	const char *out = NULL;
	double seconds = -1;
	struct gpu_session *s;
	struct gpu_stats st;
	struct sink sink = { 0 };
	char err[512], buf[2048];
	uint64_t base_mono, end_ns = 0;
	int rc = 0, r;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "-p") && v)
			sink.pid = atoi(v), i++;
		else if (!strcmp(a, "-o") && v)
			out = v, i++;
		else if (!strcmp(a, "-d") && v)
			seconds = atof(v), i++;
		else if (!strcmp(a, "--cupti") && v)
			opts.cupti_path = v, i++;
		else if (!strcmp(a, "--agent") && v)
			opts.agent_path = v, i++;
		else if (!strcmp(a, "--ring") && v)
			opts.ring_records = strtoul(v, NULL, 0), i++;
		else if (!strcmp(a, "--no-precheck"))
			opts.no_cuda_precheck = true;
		else if (!strcmp(a, "--files"))
			opts.file_transport = true;
		else if (!strcmp(a, "--api"))
			sink.api = 1;
		else {
			fprintf(stderr, "usage: gpu_attach -p PID -o TRACE [--cupti P] [--agent P] "
				"[--no-precheck] [--files] [--ring N] [--api] [-d S]\n");
			return 64;
		}
	}
	if (sink.pid <= 0 || !out) {
		fprintf(stderr, "gpu_attach: -p PID and -o TRACE are required\n");
		return 64;
	}
	sink.tj = trace_json__open(out);
	if (!sink.tj) {
		fprintf(stderr, "gpu_attach: %s: %s\n", out, strerror(errno));
		return 1;
	}
	base_mono = clock_ns(CLOCK_MONOTONIC);
	sink.gt = gpu_trace__new(sink.tj);
	if (!sink.gt || gpu_trace__set_process(sink.gt, sink.pid, NULL) ||
	    trace_json__begin(sink.tj, base_mono, clock_ns(CLOCK_REALTIME))) {
		fprintf(stderr, "gpu_attach: %s: cannot start the trace\n", out);
		trace_json__free(sink.tj);
		unlink(out);
		return 1;
	}

	s = gpu__attach(sink.pid, &opts, err, sizeof(err));
	if (!s) {
		int e = errno;

		fprintf(stderr, "gpu_attach: %s\n", err);
		gpu_trace__free(sink.gt);
		trace_json__free(sink.tj);
		unlink(out);
		return e == ENODEV || e == ENOENT || e == EBUSY || e == EPERM ? 3 : 2;
	}
	printf("ATTACHED %d\n", sink.pid);
	fflush(stdout);
	if (seconds >= 0)
		end_ns = clock_ns(CLOCK_MONOTONIC) + (uint64_t)(seconds * 1e9);
	for (;;) {
		struct pollfd pfd = { .fd = 0, .events = POLLIN };

		r = gpu__poll(s, on_record, &sink);
		if (r < 0) {
			fprintf(stderr, "gpu_attach: poll: %s\n", strerror(-r));
			rc = 1;
			break;
		}
		if (end_ns && clock_ns(CLOCK_MONOTONIC) >= end_ns)
			break;
		if (poll(&pfd, 1, 20) > 0) {
			if (!fgets(buf, sizeof(buf), stdin) || !strncmp(buf, "STOP", 4))
				break;
		}
	}
	r = gpu__detach(s, on_record, &sink);
	if (r) {
		fprintf(stderr, "gpu_attach: detach: %s (%s)\n", gpu__error(s), strerror(-r));
		rc = 1;
	}
	gpu__stats(s, &st);
	snprintf(buf, sizeof(buf),
		 "{\"records\": %" PRIu64 ", \"kernels\": %" PRIu64 ", \"memcpys\": %" PRIu64
		 ", \"memsets\": %" PRIu64 ", \"syncs\": %" PRIu64 ", \"runtime_api\": %" PRIu64
		 ", \"driver_api\": %" PRIu64 ", \"dropped_ring\": %" PRIu64
		 ", \"dropped_cupti\": %" PRIu64 ", \"buffers\": %" PRIu64
		 ", \"clock_samples\": %u, \"clock_residual_ns\": %" PRIu64
		 ", \"clock_window_ns\": %" PRIu64 ", \"injected\": %s, \"unloaded\": %s"
		 ", \"cupti_version\": %u, \"base_mono_ns\": %" PRIu64 ", \"cupti_path\": \"%s\"}",
		 st.records, st.kernels, st.memcpys, st.memsets, st.syncs, st.runtime_api,
		 st.driver_api, st.dropped_ring, st.dropped_cupti, st.buffers, st.clock_samples,
		 st.clock_residual_ns, st.clock_window_ns, st.injected ? "true" : "false",
		 st.unloaded ? "true" : "false", st.cupti_version, base_mono, st.cupti_path);
	gpu__free(s);
	gpu_trace__free(sink.gt);
	trace_json__top_raw(sink.tj, "tptrace_gpu", buf);
	if (trace_json__close(sink.tj)) {
		fprintf(stderr, "gpu_attach: writing %s failed\n", out);
		rc = 1;
	}
	printf("STATS %s\n", buf);
	return rc;
}
