// SPDX-License-Identifier: MIT
/* Tier 1: the flight recorder's metrics text (fr_metrics.c) rendered from a recorder fed with
 * synthetic ring records: the values per (comm, rank), threads in a call, drops unknown ->
 * absent sample + *_unknown 1, dumps by reason, stall state, the job label (validated as for triggers)
 * from the environment and nothing else from it, and ADDR:PORT parsing. */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "api_id.h"
#include "check.h"
#include "cuda.h"
#include "flightrec.h"
#include "fr_metrics.h"
#include "session.h"
#include "core_sinks.h"
#include "fr_records.h"
#include "nccl_api.h"
#include "target.h"

static int pid;
static uint64_t ts = 1000000;

static void call(struct flightrec *fr, const char *sym, uint64_t a0, uint64_t a1, uint64_t a2,
		 uint64_t a3, uint64_t a4, uint64_t a5, uint64_t s1, const void *deref, size_t dlen)
{
	fr_rec_call(fr, pid, pid, &ts, sym, (uint64_t[6]){ a0, a1, a2, a3, a4, a5 }, s1, 0, deref,
		    dlen, 0);
}

static void ret(struct flightrec *fr, const char *sym, int64_t rc, bool has_out, uint64_t out)
{
	fr_rec_ret(fr, pid, pid, &ts, sym, rc, has_out, out);
}

/* the value of the one sample whose line starts with prefix; -1 when absent */
static double sample(const char *text, const char *prefix)
{
	const char *p = text;
	size_t n = strlen(prefix);

	while (p && *p) {
		if (!strncmp(p, prefix, n))
			return strtod(strchr(p + n, ' ') + 1, NULL);
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return -1;
}

int main(int argc, char **argv)
{
	char dir[] = "/tmp/tptrace-frmtest.XXXXXX", host[256] = "", pfx[512], lbl[384];
	struct flightrec_opts fo = { .ring_size = 16, .stall_timeout_ns = 5000000000ULL };
	const uint64_t comm = 0xc0ffee00, stream = 0x5100;
	struct sockaddr_storage sa;
	struct flightrec *fr;
	struct target *t;
	uint8_t id[128];
	unsigned salen;
	char *text;

	/* the job id and a secret in our own initial environment (what /proc/self/environ shows) */
	if (!getenv("TORCHELASTIC_RUN_ID")) {
		setenv("TORCHELASTIC_RUN_ID", "run-1:x@y", 1);
		setenv("SLURM_JOB_ID", "999", 1);
		setenv("MY_SECRET_TOKEN", "hunter2", 1);
		setenv("RANK", "5", 1);
		execv("/proc/self/exe", argv);
		CHECK(0, "re-exec: %s", strerror(errno));
		return check_done();
	}
	pid = getpid();
	gethostname(host, sizeof(host) - 1);
	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	fo.dump_dir = dir;
	fo.no_stacks = true;
	fr = test_fr_new(&fo);
	t = target__new(pid);
	CHECK(fr && t, "new");
	CHECK(flightrec__add_process(fr, t) == 0, "add");

	for (int i = 0; i < 128; i++)
		id[i] = (uint8_t)i;
	call(fr, "ncclCommInitRank", 0x7ffd0000, 4, 2, 0, 0, 0, 0, id, sizeof(id));
	ret(fr, "ncclCommInitRank", 0, true, comm);
	call(fr, "ncclAllReduce", 0x1000, 0x2000, 1024, 7, 0, comm, stream, NULL, 0);
	ret(fr, "ncclAllReduce", 0, false, 0);
	call(fr, "ncclAllGather", 0x3000, 0x4000, 16, 2, comm, stream, 0, NULL, 0);
	ret(fr, "ncclAllGather", 0, false, 0);
	/* the application waits for both: inside cudaStreamSynchronize, which has not returned */
	call(fr, "cudaStreamSynchronize", stream, 0, 0, 0, 0, 0, 0, NULL, 0);

	flightrec__set_drops(fr, -EPERM, 0);
	CHECK(flightrec__dump_all(fr, "signal") == 1, "one dump");
	text = fr_metrics__render(fr, ts + 6000000000ULL);
	CHECK(text != NULL, "render");
	if (!text)
		return check_done();

	/* labels: the comm's rank (2), not the environment's RANK (5) where the comm is known */
	snprintf(lbl, sizeof(lbl), "host=\"%s\",pid=\"%d\",rank=\"2\",comm=\"%016llx\",job=\"run-1:x@y\"}",
		 host, pid, (unsigned long long)nccl_hash(id, 128, 0));
	snprintf(pfx, sizeof(pfx), "tptrace_fr_coll_seq_enqueued{%s", lbl);
	CHECK(sample(text, pfx) == 2, "enqueued 2: %s", text);
	snprintf(pfx, sizeof(pfx), "tptrace_fr_coll_seq_completed{%s", lbl);
	CHECK(sample(text, pfx) == 0, "none completed");
	snprintf(pfx, sizeof(pfx), "tptrace_fr_pending_collectives{%s", lbl);
	CHECK(sample(text, pfx) == 2, "2 pending");
	snprintf(pfx, sizeof(pfx), "tptrace_fr_oldest_pending_age_seconds{%s", lbl);
	CHECK(sample(text, pfx) >= 6.0 && sample(text, pfx) < 6.1, "age %g", sample(text, pfx));
	/* per process: the environment's RANK */
	snprintf(lbl, sizeof(lbl), "host=\"%s\",pid=\"%d\",rank=\"5\",job=\"run-1:x@y\"", host, pid);
	snprintf(pfx, sizeof(pfx), "tptrace_fr_threads_in_call{%s}", lbl);
	CHECK(sample(text, pfx) == 1, "one thread in a call");
	snprintf(pfx, sizeof(pfx), "tptrace_fr_thread_in_call_seconds{%s,tid=\"%d\",api=\"cudaStreamSynchronize\"}",
		 lbl, pid);
	CHECK(sample(text, pfx) > 5.9 && sample(text, pfx) < 6.1, "in call %g", sample(text, pfx));
	snprintf(pfx, sizeof(pfx), "tptrace_fr_stalled{%s}", lbl);
	CHECK(sample(text, pfx) == 1, "stalled after 6 s > 5 s");
	/* drops unknown: no sample, and the *_unknown gauge says so */
	CHECK(!strstr(text, "tptrace_fr_events_dropped_total{"), "no drop sample when unknown");
	snprintf(pfx, sizeof(pfx), "tptrace_fr_events_dropped_unknown{host=\"%s\"}", host);
	CHECK(sample(text, pfx) == 1, "drops unknown");
	snprintf(pfx, sizeof(pfx), "tptrace_fr_dumps_total{host=\"%s\",reason=\"signal\"}", host);
	CHECK(sample(text, pfx) == 1, "one signal dump");
	CHECK(!strstr(text, "hunter2") && !strstr(text, "999") && !strstr(text, "test_fr_metrics"),
	      "no environment value but the job id, no command line");
	free(text);

	/* progress (the sync returned, completing both) and a readable drop counter */
	ret(fr, "cudaStreamSynchronize", 0, false, 0);
	flightrec__set_drops(fr, 0, 7);
	text = fr_metrics__render(fr, ts + 1000);
	snprintf(pfx, sizeof(pfx), "tptrace_fr_stalled{%s}", lbl);
	CHECK(sample(text, pfx) == 0, "not stalled after progress");
	snprintf(pfx, sizeof(pfx), "tptrace_fr_threads_in_call{%s}", lbl);
	CHECK(sample(text, pfx) == 0, "no thread in a call");
	snprintf(pfx, sizeof(pfx), "tptrace_fr_events_dropped_total{host=\"%s\"}", host);
	CHECK(sample(text, pfx) == 7, "7 dropped");
	snprintf(pfx, sizeof(pfx), "tptrace_fr_events_dropped_unknown{host=\"%s\"}", host);
	CHECK(sample(text, pfx) == 0, "drops known");
	CHECK(!strstr(text, "tptrace_fr_oldest_pending_age_seconds{"), "nothing pending: no age");
	/* each completed collective's wait, call to completion: allreduce 5 us, allgather 3 us;
	 * the straggler alert's peer group: the comm's size within the job */
	snprintf(lbl, sizeof(lbl), "host=\"%s\",pid=\"%d\",rank=\"2\",comm=\"%016llx\",job=\"run-1:x@y\","
		 "comm_group=\"size:4\"",
		 host, pid, (unsigned long long)nccl_hash(id, 128, 0));
	snprintf(pfx, sizeof(pfx), "tptrace_fr_collective_wait_seconds_count{%s}", lbl);
	CHECK(sample(text, pfx) == 2, "2 waits: %s", text);
	snprintf(pfx, sizeof(pfx), "tptrace_fr_collective_wait_seconds_sum{%s}", lbl);
	CHECK(sample(text, pfx) == 0.000008, "8 us in all");
	snprintf(pfx, sizeof(pfx), "tptrace_fr_collective_wait_seconds{%s,quantile=\"0.5\"}", lbl);
	CHECK(sample(text, pfx) == 0.000003, "median 3 us (nearest rank)");
	snprintf(pfx, sizeof(pfx), "tptrace_fr_collective_wait_seconds{%s,quantile=\"0.9\"}", lbl);
	CHECK(sample(text, pfx) == 0.000005, "p90 5 us");
	snprintf(pfx, sizeof(pfx), "tptrace_fr_collective_waits_recent{%s}", lbl);
	CHECK(sample(text, pfx) == 2, "2 recent");
	CHECK(!strstr(text, "tptrace_fr_last_to_enter_ratio{"), "one member here: no last-to-enter");
	free(text);
	/* 31 s later the quantiles' window is empty: no quantile, the counts stay */
	text = fr_metrics__render(fr, ts + 31000000000ULL);
	snprintf(pfx, sizeof(pfx), "tptrace_fr_collective_wait_seconds{%s,quantile=\"0.5\"}", lbl);
	CHECK(sample(text, pfx) == -1, "no recent wait: no quantile");
	snprintf(pfx, sizeof(pfx), "tptrace_fr_collective_wait_seconds_count{%s}", lbl);
	CHECK(sample(text, pfx) == 2, "count stays");
	snprintf(pfx, sizeof(pfx), "tptrace_fr_collective_waits_recent{%s}", lbl);
	CHECK(sample(text, pfx) == 0, "0 recent");
	free(text);

	/* ADDR:PORT: numeric, port 1..65535, an address always given */
	CHECK(fr_metrics__parse_listen("127.0.0.1:9464", &sa, &salen) == 0 && sa.ss_family == AF_INET &&
	      ntohs(((struct sockaddr_in *)&sa)->sin_port) == 9464, "ipv4");
	CHECK(fr_metrics__parse_listen("[::1]:9464", &sa, &salen) == 0 && sa.ss_family == AF_INET6,
	      "ipv6");
	CHECK(fr_metrics__parse_listen(":9464", &sa, &salen) == -EINVAL, "no address");
	CHECK(fr_metrics__parse_listen("9464", &sa, &salen) == -EINVAL, "port only");
	CHECK(fr_metrics__parse_listen("localhost:9464", &sa, &salen) == -EINVAL, "a name");
	CHECK(fr_metrics__parse_listen("127.0.0.1:65536", &sa, &salen) == -EINVAL, "port range");
	CHECK(fr_metrics__parse_listen("::1:9464", &sa, &salen) == -EINVAL, "ipv6 without []");

	/* an exited process's series expire (2 s here, 5 min by default); the page stays bounded */
	{
		struct fr_metrics *m = fr_metrics__new(NULL, NULL);
		uint64_t t0 = ts + 10000000000ULL;
		char pidlbl[64];

		CHECK(m != NULL, "metrics new");
		if (!m)
			return check_done();
		fr_metrics__set_expiry(m, 2000000000ULL);
		snprintf(pidlbl, sizeof(pidlbl), "pid=\"%d\"", pid);
		CHECK(fr_metrics__update(m, fr, t0) == 0 && strstr(fr_metrics__text(m), pidlbl),
		      "alive: shown");
		flightrec__mark_gone(fr, pid);
		flightrec__take_exits(fr);
		CHECK(fr_metrics__update(m, fr, t0 + 1000000000ULL) == 0, "update");
		snprintf(pfx, sizeof(pfx), "tptrace_fr_process_exited{host=\"%s\",%s", host, pidlbl);
		CHECK(sample(fr_metrics__text(m), pfx) == 1, "exited: still shown: %s",
		      fr_metrics__text(m));
		fr_metrics__update(m, fr, t0 + 2900000000ULL);
		CHECK(strstr(fr_metrics__text(m), pidlbl) != NULL, "1.9 s after the exit: shown");
		fr_metrics__update(m, fr, t0 + 3100000000ULL);
		CHECK(strstr(fr_metrics__text(m), pidlbl) == NULL, "2.1 s after the exit: gone: %s",
		      fr_metrics__text(m));
		snprintf(pfx, sizeof(pfx), "tptrace_fr_processes{host=\"%s\"}", host);
		CHECK(sample(fr_metrics__text(m), pfx) == 0, "no process left");
		snprintf(pfx, sizeof(pfx), "tptrace_fr_dumps_total{host=\"%s\",reason=\"signal\"}", host);
		CHECK(sample(fr_metrics__text(m), pfx) == 1, "host-wide counters stay");
		fr_metrics__update(m, fr, t0 + 9000000000ULL);
		CHECK(strstr(fr_metrics__text(m), pidlbl) == NULL, "stays gone");
		fr_metrics__free(m);
	}

	test_fr_free(fr);
	target__free(t);

	/* two members of one comm here (this process and a child): 3 steps in which the child
	 * enters the allreduce 41 us after us, and both learn its completion 1 us apart. It waits
	 * 42 us less every step and entered last every time. */
	{
		struct flightrec_opts fo2 = { .ring_size = 16, .no_stacks = true, .dump_dir = dir };
		struct flightrec *fr2 = test_fr_new(&fo2);
		int child = fork(), me = getpid(), pids[2];
		struct target *t2[2];
		uint64_t h[2] = { 0xa000, 0xb000 };
		char lbl2[2][384];

		if (child == 0) {
			pause();
			_exit(0);
		}
		pids[0] = me;
		pids[1] = child;
		t2[0] = target__new(me);
		t2[1] = target__new(child);
		CHECK(fr2 && t2[0] && t2[1] && child > 0, "two processes");
		if (!fr2 || !t2[0] || !t2[1] || child <= 0)
			return check_done();
		for (int k = 0; k < 2; k++) {
			CHECK(flightrec__add_process(fr2, t2[k]) == 0, "add %d", k);
			pid = pids[k];
			call(fr2, "ncclCommInitRank", 0x7ffd0000, 2, k, 0, 0, 0, 0, id, sizeof(id));
			ret(fr2, "ncclCommInitRank", 0, true, h[k]);
			snprintf(lbl2[k], sizeof(lbl2[k]),
				 "host=\"%s\",pid=\"%d\",rank=\"%d\",comm=\"%016llx\",job=\"run-1:x@y\","
				 "comm_group=\"size:2\"",
				 host, pids[k], k, (unsigned long long)nccl_hash(id, 128, 0));
		}
		for (int step = 0; step < 3; step++) {
			pid = me;
			call(fr2, "ncclAllReduce", 0x1000, 0x2000, 1024, 7, 0, h[0], stream, NULL, 0);
			ret(fr2, "ncclAllReduce", 0, false, 0);
			call(fr2, "cudaStreamSynchronize", stream, 0, 0, 0, 0, 0, 0, NULL, 0);
			ts += 38000;
			pid = child;
			call(fr2, "ncclAllReduce", 0x1000, 0x2000, 1024, 7, 0, h[1], stream, NULL, 0);
			ret(fr2, "ncclAllReduce", 0, false, 0);
			call(fr2, "cudaStreamSynchronize", stream, 0, 0, 0, 0, 0, 0, NULL, 0);
			ret(fr2, "cudaStreamSynchronize", 0, false, 0);	/* child: 3 us */
			pid = me;
			ret(fr2, "cudaStreamSynchronize", 0, false, 0);	/* us: 45 us */
		}
		text = fr_metrics__render(fr2, ts + 1000);
		snprintf(pfx, sizeof(pfx), "tptrace_fr_collective_wait_seconds{%s,quantile=\"0.5\"}",
			 lbl2[0]);
		CHECK(sample(text, pfx) == 0.000045, "rank 0 waits 45 us: %s", text);
		snprintf(pfx, sizeof(pfx), "tptrace_fr_collective_wait_seconds{%s,quantile=\"0.5\"}",
			 lbl2[1]);
		CHECK(sample(text, pfx) == 0.000003, "rank 1 waits 3 us");
		/* the last-to-enter ratio has no comm_group (one host's members only) */
		for (int k = 0; k < 2; k++)
			*strstr(lbl2[k], ",comm_group=") = 0;
		snprintf(pfx, sizeof(pfx), "tptrace_fr_last_to_enter_ratio{%s}", lbl2[0]);
		CHECK(sample(text, pfx) == 0, "rank 0 never last");
		snprintf(pfx, sizeof(pfx), "tptrace_fr_last_to_enter_ratio{%s}", lbl2[1]);
		CHECK(sample(text, pfx) == 1, "rank 1 always last");
		free(text);
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		test_fr_free(fr2);
		target__free(t2[0]);
		target__free(t2[1]);
	}
	return check_done();
}
