// SPDX-License-Identifier: MIT
/* Tier 1: the flight recorder fed with synthetic ring records (as bpf/cuda.bpf.c emits
 * them), dumped, and the dump read back with cJSON: exact states, seqs, sizes, identity. */
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "api_id.h"
#include "check.h"
#include "json_file.h"
#include "cuda.h"
#include "cuda_api.h"
#include "flightrec.h"
#include "session.h"
#include "core_sinks.h"
#include "fr_records.h"
#include "nccl_api.h"
#include "target.h"

static int pid, tid;
static uint64_t ts = 1000000;

static void call(struct flightrec *fr, const char *sym, uint64_t a0, uint64_t a1, uint64_t a2,
		 uint64_t a3, uint64_t a4, uint64_t a5, uint64_t s1, uint64_t s2, const void *deref,
		 size_t dlen)
{
	fr_rec_call(fr, pid, tid, &ts, sym, (uint64_t[6]){ a0, a1, a2, a3, a4, a5 }, s1, s2, deref,
		    dlen, 0);
}

static void ret(struct flightrec *fr, const char *sym, int64_t rc, bool has_out, uint64_t out)
{
	fr_rec_ret(fr, pid, tid, &ts, sym, rc, has_out, out);
}

static cJSON *load_dump(const char *dir, const char *host)
{
	char path[512];
	struct stat st;

	flightrec__dump_path(path, sizeof(path), dir, host, pid);
	CHECK(stat(path, &st) == 0, "dump %s exists", path);
	CHECK((st.st_mode & 0777) == 0600, "dump mode 0%o, want 0600", st.st_mode & 0777);
	return check_load_json(path);
}

static cJSON *get(cJSON *o, const char *k)
{
	return cJSON_GetObjectItemCaseSensitive(o, k);
}

static double num(cJSON *o, const char *k)
{
	cJSON *v = get(o, k);

	return cJSON_IsNumber(v) ? v->valuedouble : -12345;
}

static const char *str(cJSON *o, const char *k)
{
	cJSON *v = get(o, k);

	return cJSON_IsString(v) ? v->valuestring : "(not a string)";
}

int main(void)
{
	char dir[] = "/tmp/tptrace-frtest.XXXXXX", host[256] = "";
	uint8_t id[128], excl[8] = { 0 };
	struct flightrec_opts fo = { .ring_size = 6, .stall_timeout_ns = 5000000000ULL };
	struct flightrec *fr;
	struct target *t;
	cJSON *d, *comms, *entries, *e, *incall;
	char want_id[24];
	const uint64_t comm = 0xc0ffee00, stream = 0x5100, ev = 0xe1;

	pid = getpid();
	tid = pid;
	gethostname(host, sizeof(host) - 1);
	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	fo.dump_dir = dir;
	fr = test_fr_new(&fo);
	t = target__new(pid);
	CHECK(fr && t, "new");
	CHECK(flightrec__add_process(fr, t) == 0, "add");

	for (int i = 0; i < 128; i++)
		id[i] = (uint8_t)i;
	/* ncclCommInitRank(&comm, 4, id, 2) */
	call(fr, "ncclCommInitRank", 0x7ffd0000, 4, 2, 0, 0, 0, 0, 0, id, sizeof(id));
	ret(fr, "ncclCommInitRank", 0, true, comm);
	/* ncclAllReduce(send, recv, 1024, float32, sum, comm, stream) */
	call(fr, "ncclAllReduce", 0x1000, 0x2000, 1024, 7, 0, comm, stream, 0, NULL, 0);
	ret(fr, "ncclAllReduce", 0, false, 0);
	call(fr, "cudaEventRecord", ev, stream, 0, 0, 0, 0, 0, 0, NULL, 0);
	/* ncclAllGather(send, recv, 16, int32, comm, stream) */
	call(fr, "ncclAllGather", 0x3000, 0x4000, 16, 2, comm, stream, 0, 0, NULL, 0);
	ret(fr, "ncclAllGather", 0, false, 0);
	/* the application's own poll: not ready, then ready */
	call(fr, "cudaEventQuery", ev, 0, 0, 0, 0, 0, 0, 0, NULL, 0);
	ret(fr, "cudaEventQuery", 600, false, 0);
	call(fr, "cudaEventQuery", ev, 0, 0, 0, 0, 0, 0, 0, NULL, 0);
	ret(fr, "cudaEventQuery", 0, false, 0);
	/* ring p2p in a group; GroupEnd not yet returned */
	call(fr, "ncclGroupStart", 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0);
	ret(fr, "ncclGroupStart", 0, false, 0);
	call(fr, "ncclSend", 0x5000, 256, 7, 3, comm, stream, 0, 0, NULL, 0);
	ret(fr, "ncclSend", 0, false, 0);
	call(fr, "ncclRecv", 0x6000, 256, 7, 1, comm, stream, 0, 0, NULL, 0);
	ret(fr, "ncclRecv", 0, false, 0);
	call(fr, "ncclGroupEnd", 0, 0, 0, 0, 0, 0, 0, 0, NULL, 0);
	/* ncclBroadcast(send, recv, 8, float16, root 1, comm, stream) */
	call(fr, "ncclBroadcast", 0x7000, 0x8000, 8, 6, 1, comm, stream, 0, NULL, 0);

	CHECK(flightrec__dump_all(fr, "signal") == 1, "one dump");
	d = load_dump(dir, host);
	if (!d)
		return check_done();
	CHECK_STR(str(d, "schema"), "tptrace-fr");
	CHECK(num(d, "version") == 2, "version");
	CHECK(num(d, "pid") == pid, "pid");
	CHECK_STR(str(d, "dump_reason"), "signal");
	CHECK_STR(str(get(d, "process"), "state"), "running");
	CHECK(num(d, "entries_recorded") == 5, "entries_recorded %g", num(d, "entries_recorded"));
	CHECK(num(d, "entries_overwritten") == 0, "not wrapped");
	comms = get(d, "comms");
	CHECK(cJSON_GetArraySize(comms) == 1, "one comm");
	snprintf(want_id, sizeof(want_id), "%016llx", (unsigned long long)nccl_hash(id, 128, 0));
	CHECK_STR(str(cJSON_GetArrayItem(comms, 0), "comm_id"), want_id);
	CHECK(num(cJSON_GetArrayItem(comms, 0), "rank") == 2, "rank");
	CHECK(num(cJSON_GetArrayItem(comms, 0), "nranks") == 4, "nranks");
	CHECK_STR(str(get(cJSON_GetArrayItem(comms, 0), "learned"), "rank"), "init_call");
	CHECK(num(cJSON_GetArrayItem(comms, 0), "last_enqueued_seq") == 3, "3 collectives");
	CHECK(num(cJSON_GetArrayItem(comms, 0), "last_completed_seq") == 1, "allreduce completed");
	CHECK(num(cJSON_GetArrayItem(comms, 0), "last_started_seq") == 2, "allgather started");
	CHECK(num(cJSON_GetArrayItem(comms, 0), "last_p2p_seq") == 2, "2 p2p");

	entries = get(d, "entries");
	CHECK(cJSON_GetArraySize(entries) == 5, "5 entries");
	e = cJSON_GetArrayItem(entries, 0);
	CHECK_STR(str(e, "op"), "all_reduce");
	CHECK_STR(str(e, "profiling_name"), "nccl:all_reduce");
	CHECK(num(e, "collective_seq_id") == 1 && num(e, "p2p_seq_id") == 0, "seq");
	CHECK_STR(str(e, "state"), "completed");
	CHECK_STR(str(e, "reduce_op"), "sum");
	CHECK_STR(str(e, "dtype"), "float32");
	CHECK(num(e, "count") == 1024, "count");
	CHECK(num(e, "rc") == 0, "rc");
	CHECK(cJSON_IsNumber(get(e, "time_discovered_completed_ns")), "completed time");
	CHECK(cJSON_IsNull(get(e, "root")) && cJSON_IsNull(get(e, "peer")), "no root/peer");
	e = cJSON_GetArrayItem(entries, 1);
	CHECK_STR(str(e, "op"), "all_gather");
	CHECK_STR(str(e, "state"), "started");
	CHECK(cJSON_GetArrayItem(cJSON_GetArrayItem(get(e, "output_sizes"), 0), 0)->valuedouble == 64,
	      "all_gather output = count x nranks");
	CHECK(cJSON_GetArrayItem(cJSON_GetArrayItem(get(e, "input_sizes"), 0), 0)->valuedouble == 16,
	      "all_gather input = count");
	CHECK_STR(cJSON_GetArrayItem(get(e, "input_dtypes"), 0)->valuestring, "Int");
	CHECK(cJSON_IsNull(get(e, "reduce_op")), "all_gather has no reduce op");
	e = cJSON_GetArrayItem(entries, 2);
	CHECK_STR(str(e, "profiling_name"), "nccl:send 2->3");
	CHECK(num(e, "p2p_seq_id") == 1 && num(e, "collective_seq_id") == 0, "send seq");
	CHECK(num(e, "group_id") == 1 && num(e, "peer") == 3, "send group/peer");
	CHECK_STR(str(e, "state"), "enqueued");
	e = cJSON_GetArrayItem(entries, 3);
	CHECK_STR(str(e, "profiling_name"), "nccl:recv 2<-1");
	CHECK(num(e, "group_id") == 1, "recv in the same group");
	e = cJSON_GetArrayItem(entries, 4);
	CHECK_STR(str(e, "op"), "broadcast");
	CHECK(num(e, "root") == 1 && num(e, "collective_seq_id") == 3, "broadcast root/seq");
	CHECK(cJSON_IsNull(get(e, "api_exit_ns")) && cJSON_IsNull(get(e, "rc")), "still inside");
	CHECK(num(e, "group_id") == 0, "after GroupEnd: no group");
	incall = get(d, "in_call");
	CHECK(cJSON_GetArraySize(incall) == 2, "GroupEnd and Broadcast in call: %d",
	      cJSON_GetArraySize(incall));
	CHECK_STR(str(cJSON_GetArrayItem(incall, 0), "api"), "ncclGroupEnd");
	CHECK_STR(str(cJSON_GetArrayItem(incall, 1), "api"), "ncclBroadcast");
	CHECK(num(cJSON_GetArrayItem(incall, 1), "seq") == 3, "in-call seq");
	CHECK(!get(cJSON_GetArrayItem(incall, 1), "events_dropped_since"),
	      "no events dropped since it entered: no count");
	cJSON_Delete(d);
	/* events lost after the broadcast entered: its return may be one of them */
	flightrec__set_drops(fr, 0, 9);

	/* progress newer than now (a round held records and handed them on after now was
	 * read): progress, not a stall of 2^64 ns */
	CHECK(flightrec__check_stalls(fr, ts - 1000000ULL) == 0, "progress newer than now");
	/* no progress: a stall dump; progress re-arms it */
	CHECK(flightrec__check_stalls(fr, ts + 1000000000ULL) == 0, "not yet stalled");
	CHECK(flightrec__check_stalls(fr, ts + 6000000000ULL) == 1, "stalled");
	CHECK(flightrec__check_stalls(fr, ts + 7000000000ULL) == 0, "once per stall");
	d = load_dump(dir, host);
	CHECK_STR(str(d, "dump_reason"), "stall");
	incall = get(d, "in_call");
	CHECK(num(cJSON_GetArrayItem(incall, 1), "events_dropped_since") == 9,
	      "9 events dropped since the broadcast entered");
	cJSON_Delete(d);
	flightrec__set_drops(fr, 0, 0);

	ret(fr, "ncclBroadcast", 0, false, 0);
	ret(fr, "ncclGroupEnd", 0, false, 0);
	/* cudaStreamSynchronize(stream) returning 0: everything on it has completed */
	call(fr, "cudaStreamSynchronize", stream, 0, 0, 0, 0, 0, 0, 0, NULL, 0);
	ret(fr, "cudaStreamSynchronize", 0, false, 0);
	/* ncclCommSplit(comm, color 1, key 5, &newcomm) and a shrink excluding rank 0 */
	call(fr, "ncclCommSplit", comm, 1, 5, 0x7ffd0010, 0, 0, 0, 0, NULL, 0);
	ret(fr, "ncclCommSplit", 0, true, 0xc1);
	call(fr, "ncclCommShrink", comm, 0x7ffd0020, 1, 0x7ffd0028, 0, 0, 0, 0, excl, sizeof(excl));
	ret(fr, "ncclCommShrink", 0, true, 0xc2);
	/* two more collectives wrap the 6-entry ring */
	call(fr, "ncclAllReduce", 0x1000, 0x2000, 1024, 7, 2, comm, stream, 0, NULL, 0);
	ret(fr, "ncclAllReduce", 0, false, 0);
	call(fr, "ncclReduce", 0x1000, 0x2000, 4, 8, 3, 2, comm, stream, NULL, 0);
	ret(fr, "ncclReduce", 0, false, 0);
	{
		struct tp_rec_exit x = { .type = TP_REC_EXIT, .pid = pid, .tid = pid, .exit_code = 9,
					 .ts = ts += 1000 };

		test_fr_ring_cb(fr, &x, sizeof(x));
	}
	CHECK(flightrec__take_exits(fr) == 1, "exit dump");
	d = load_dump(dir, host);
	CHECK_STR(str(d, "dump_reason"), "exit");
	CHECK_STR(str(get(d, "process"), "state"), "killed");
	CHECK(num(get(d, "process"), "signal") == 9, "SIGKILL");
	CHECK(num(d, "entries_recorded") == 7 && num(d, "entries_overwritten") == 1, "wrapped");
	entries = get(d, "entries");
	CHECK(cJSON_GetArraySize(entries) == 6, "ring holds 6");
	CHECK(num(cJSON_GetArrayItem(entries, 0), "record_id") == 2, "oldest kept is 2");
	for (int i = 0; i < 4; i++)
		CHECK_STR(str(cJSON_GetArrayItem(entries, i), "state"), "completed");
	e = cJSON_GetArrayItem(entries, 5);
	CHECK_STR(str(e, "op"), "reduce");
	CHECK(num(e, "root") == 2 && num(e, "collective_seq_id") == 5, "reduce decoded");
	CHECK_STR(str(e, "reduce_op"), "min");
	CHECK_STR(str(e, "dtype"), "float64");
	comms = get(d, "comms");
	CHECK(cJSON_GetArraySize(comms) == 3, "parent, split child, shrink child");
	e = cJSON_GetArrayItem(comms, 1);
	CHECK_STR(str(e, "parent"), want_id);
	CHECK(num(e, "split_color") == 1 && num(e, "split_key") == 5, "split args");
	CHECK_STR(str(get(e, "learned"), "comm_id"), "split_call");
	CHECK(cJSON_IsNull(get(e, "rank")), "split child rank unknown to one process");
	e = cJSON_GetArrayItem(comms, 2);
	CHECK(num(e, "nranks") == 3 && num(e, "rank") == 1, "shrink: 4-1 ranks, rank 2-1");
	CHECK(strcmp(str(e, "comm_id"), str(cJSON_GetArrayItem(comms, 1), "comm_id")), "distinct ids");
	CHECK(cJSON_GetArraySize(get(d, "in_call")) == 0, "no calls in a dead process");
	cJSON_Delete(d);
	/* an exited process keeps its final exit dump */
	CHECK(flightrec__dump_all(fr, "final") == 0, "exit dump is final");

	test_fr_free(fr);
	target__free(t);

	/* a stall dumps the stalled process's job in one set, the culprit with nothing pending
	 * too: A (us) and B (a child) share a comm, B stopped calling NCCL; C (another child) is
	 * in another comm of no known job and stalls on its own */
	{
		struct flightrec_opts fo3 = { .ring_size = 6, .stall_timeout_ns = 5000000000ULL,
					      .dump_dir = dir, .no_stacks = true };
		struct flightrec *fr3 = test_fr_new(&fo3);
		int pids[3] = { getpid(), fork(), -1 };
		struct target *t3[3] = {};
		uint8_t id2[128];
		cJSON *dd[3];

		if (pids[1] == 0) {
			pause();
			_exit(0);
		}
		pids[2] = fork();
		if (pids[2] == 0) {
			pause();
			_exit(0);
		}
		memcpy(id2, id, sizeof(id2));
		id2[0] ^= 0xff;
		for (int k = 0; k < 3; k++) {
			t3[k] = target__new(pids[k]);
			CHECK(fr3 && t3[k] && flightrec__add_process(fr3, t3[k]) == 0, "add %d", k);
			pid = tid = pids[k];
			call(fr3, "ncclCommInitRank", 0x7ffd0000, 2, k == 2 ? 0 : k, 0, 0, 0, 0, 0,
			     k == 2 ? id2 : id, sizeof(id));
			ret(fr3, "ncclCommInitRank", 0, true, comm);
			if (k == 1)
				continue;	/* B: nothing pending */
			call(fr3, "ncclAllReduce", 0x1000, 0x2000, 1024, 7, 0, comm, stream, 0, NULL, 0);
			ret(fr3, "ncclAllReduce", 0, false, 0);
		}
		CHECK(flightrec__check_stalls(fr3, ts + 6000000000ULL) == 3, "A and B, then C");
		for (int k = 0; k < 3; k++) {
			pid = pids[k];
			dd[k] = load_dump(dir, host);
		}
		if (dd[0] && dd[1] && dd[2]) {
			cJSON *s0 = get(dd[0], "dump_set"), *s1 = get(dd[1], "dump_set"),
			      *s2 = get(dd[2], "dump_set");

			CHECK_STR(str(dd[1], "dump_reason"), "stall");
			CHECK_STR(str(s0, "id"), str(s1, "id"));
			CHECK(num(s0, "count") == 2 && num(s1, "count") == 2, "A and B: one set of 2");
			CHECK(num(s0, "index") + num(s1, "index") == 1, "indices 0 and 1");
			CHECK(num(dd[0], "dump_mono_ns") == num(dd[1], "dump_mono_ns"), "one instant");
			CHECK(num(s2, "count") == 1 && strcmp(str(s2, "id"), str(s0, "id")),
			      "C: a set of its own");
		}
		for (int k = 0; k < 3; k++)
			cJSON_Delete(dd[k]);
		CHECK(flightrec__check_stalls(fr3, ts + 7000000000ULL) == 0, "once per stall");
		kill(pids[1], SIGKILL);
		kill(pids[2], SIGKILL);
		waitpid(pids[1], NULL, 0);
		waitpid(pids[2], NULL, 0);
		test_fr_free(fr3);
		for (int k = 0; k < 3; k++)
			target__free(t3[k]);
	}
	{
		char cmd[600];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		system(cmd);
	}
	return check_done();
}
