// SPDX-License-Identifier: MIT
/* Tier 1: ring records -> the calls core -> the flight recorder (flightrec.c) -> its real dump
 * writer (flightrec_dump.c) -> tools/fr/fr_parse.c, the analyzer's reader. The rest of the tools
 * tier reads fr_gen.c's dumps; this one pins the writer and the reader to each other: exact
 * comm ids, seqs, states, sizes, the in-call thread and a failed comm init. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "api_id.h"
#include "check.h"
#include "cuda.h"
#include "cuda_api.h"
#include "flightrec.h"
#include "fr_parse.h"
#include "nccl_api.h"
#include "target.h"
#include "session.h"
#include "core_sinks.h"

/* calls.h's CALLS_MAX_DEPTH, restated: the limit is part of what the dump reports */
#define CALLS_DEPTH_FOR_TEST 16

static int pid, tid;
static uint64_t ts = 1000000;

/* an entry record as bpf/cuda.bpf.c sends it: short unless the api copies a struct */
static void call(struct flightrec *fr, const char *sym, const uint64_t a[6], uint64_t s1,
		 const void *deref, size_t dlen)
{
	struct tp_rec_call c = { .type = TP_REC_CALL, .pid = pid, .tid = tid, .ts = ts += 1000 };

	c.api = api_id(sym);
	memcpy(c.args, a, sizeof(c.args));
	c.stack[0] = 0x401000;	/* called from the application, not from inside NCCL */
	c.stack[1] = s1;
	if (deref)
		memcpy(c.deref, deref, dlen);
	test_fr_ring_cb(fr, &c, deref ? TP_REC_CALL_FULL_SIZE : TP_REC_CALL_SHORT_SIZE);
}

static void ret(struct flightrec *fr, const char *sym, int64_t rc, uint64_t out)
{
	struct tp_rec_ret r = { .type = TP_REC_RET, .pid = pid, .tid = tid, .ts = ts += 1000 };

	r.api = api_id(sym);
	r.rc = (uint64_t)rc;
	r.flags = out ? TP_RET_OUT_VALID : 0;
	r.out_val = out;
	test_fr_ring_cb(fr, &r, sizeof(r));
}

/* FNV-1a 64, as docs/fr-schema.md defines comm ids (written here, not taken from nccl_api.c) */
static void comm_id(char out[24], const void *data, size_t len, uint64_t seed)
{
	const uint8_t *p = data;
	uint64_t h = 0xcbf29ce484222325ULL ^ seed;

	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ULL;
	snprintf(out, 24, "%016" PRIx64, h);
}

static char *slurp(const char *path, size_t *len)
{
	struct stat st;
	char *buf;
	FILE *f = fopen(path, "r");

	if (!f || fstat(fileno(f), &st))
		return NULL;
	buf = malloc(st.st_size + 1);
	*len = fread(buf, 1, st.st_size, f);
	buf[*len] = '\0';
	fclose(f);
	return buf;
}

int main(void)
{
	char dir[] = "/tmp/tptrace-frwriter.XXXXXX", host[256] = "", path[512];
	char id_failed[24], id_world[24], id_child[24];
	struct flightrec_opts fo = { .ring_size = 16 };
	const uint64_t comm = 0xc0ffee00, child = 0xc0ffee10, s = 0x5100, ev = 0xe1;
	uint8_t uid_a[NCCL_UNIQUE_ID_BYTES], uid_b[NCCL_UNIQUE_ID_BYTES];
	const struct fr_entry *e;
	struct flightrec *fr;
	struct target *t;
	struct fr_dump d;
	char *text;
	size_t len;
	uint8_t junk[3] = { TP_REC_CALL };

	pid = tid = getpid();
	gethostname(host, sizeof(host) - 1);
	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	fo.dump_dir = dir;
	fr = test_fr_new(&fo);
	t = target__new(pid);
	CHECK(fr && t && flightrec__add_process(fr, t) == 0, "recorder for this process");
	for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) {
		uid_a[i] = (uint8_t)i;
		uid_b[i] = (uint8_t)(255 - i);
	}

	/* ncclCommInitRank(&c, 2, A, 2): rank 2 of 2, ncclInvalidArgument */
	call(fr, "ncclCommInitRank", (uint64_t[6]){ 0x7ffd0000, 2, 2 }, 0, uid_a, sizeof(uid_a));
	ret(fr, "ncclCommInitRank", 4, 0);
	/* ncclCommInitRank(&comm, 2, B, 1) */
	call(fr, "ncclCommInitRank", (uint64_t[6]){ 0x7ffd0000, 2, 1 }, 0, uid_b, sizeof(uid_b));
	ret(fr, "ncclCommInitRank", 0, comm);
	/* ncclAllReduce(send, recv, 1024, ncclFloat32, ncclMax, comm, s) */
	call(fr, "ncclAllReduce", (uint64_t[6]){ 0x1000, 0x2000, 1024, 7, 2, comm }, s, NULL, 0);
	ret(fr, "ncclAllReduce", 0, 0);
	/* ncclBroadcast(send, recv, 16, ncclInt32, root 1, comm, s) */
	call(fr, "ncclBroadcast", (uint64_t[6]){ 0x3000, 0x4000, 16, 2, 1, comm }, s, NULL, 0);
	ret(fr, "ncclBroadcast", 0, 0);
	/* cudaEventRecord(ev, s): the event completes with the two entries above */
	call(fr, "cudaEventRecord", (uint64_t[6]){ ev, s }, 0, NULL, 0);
	/* a send/recv pair with rank 0 in one group */
	call(fr, "ncclGroupStart", (uint64_t[6]){ 0 }, 0, NULL, 0);
	call(fr, "ncclSend", (uint64_t[6]){ 0x5000, 8, 7, 0, comm, s }, 0, NULL, 0);
	ret(fr, "ncclSend", 0, 0);
	call(fr, "ncclRecv", (uint64_t[6]){ 0x6000, 8, 7, 0, comm, s }, 0, NULL, 0);
	ret(fr, "ncclRecv", 0, 0);
	call(fr, "ncclGroupEnd", (uint64_t[6]){ 0 }, 0, NULL, 0);
	ret(fr, "ncclGroupEnd", 0, 0);
	/* the application polls its event: done. The send after it is now at the head. */
	call(fr, "cudaEventQuery", (uint64_t[6]){ ev }, 0, NULL, 0);
	ret(fr, "cudaEventQuery", 0, 0);
	/* ncclCommSplit(comm, color 1, key 0, &child, NULL), then an all_gather on the child */
	call(fr, "ncclCommSplit", (uint64_t[6]){ comm, 1, 0, 0x7ffd0100 }, 0, NULL, 0);
	ret(fr, "ncclCommSplit", 0, child);
	call(fr, "ncclAllGather", (uint64_t[6]){ 0x7000, 0x8000, 4, 7, child, s }, 0, NULL, 0);
	ret(fr, "ncclAllGather", 0, 0);
	/* a thread nested deeper than the core keeps (the recorder used to drop such calls
	 * silently), and a return whose entry was never seen */
	tid = pid + 200000;
	for (int i = 0; i < CALLS_DEPTH_FOR_TEST + 1; i++)
		call(fr, "cudaStreamSynchronize", (uint64_t[6]){ 0x9900 }, 0, NULL, 0);
	for (int i = 0; i < CALLS_DEPTH_FOR_TEST + 2; i++)
		ret(fr, "cudaStreamSynchronize", 0, 0);
	/* another thread is inside an all_reduce */
	tid = pid + 100000;
	call(fr, "ncclAllReduce", (uint64_t[6]){ 0x1000, 0x2000, 1024, 7, 2, comm }, s, NULL, 0);
	test_fr_ring_cb(fr, junk, sizeof(junk));	/* a record the core rejects */

	CHECK(flightrec__dump_all(fr, "request") == 1, "one dump");
	CHECK(flightrec__dump_path(path, sizeof(path), dir, host, pid) == 0, "path");
	text = slurp(path, &len);
	CHECK(text != NULL, "read %s", path);
	if (!text)
		return check_done();
	CHECK(strstr(text, "\"records\":{\"consumed\":") && strstr(text, "\"bad_records\":1,") &&
	      strstr(text, "\"depth_overflows\":1,") && strstr(text, "\"orphan_returns\":1,"),
	      "the core's counters are in the dump");
	fr_dump__init(&d);
	CHECK(fr_dump__parse(&d, text, len) == 0, "fr_parse reads the writer's dump: %s", d.err);

	CHECK_STR(d.schema, "tptrace-fr");
	CHECK_U64(d.version, 2);
	CHECK_U64(d.pid, pid);
	CHECK_STR(d.host, host);
	CHECK_STR(d.dump_reason, "request");
	CHECK(d.proc_state == FR_PROC_RUNNING, "running");
	CHECK_U64(d.ring_size, 16);
	CHECK_U64(d.entries_recorded, 7);
	CHECK_U64(d.entries_overwritten, 0);

	comm_id(id_failed, uid_a, sizeof(uid_a), 0);
	comm_id(id_world, uid_b, sizeof(uid_b), 0);
	{
		/* split child: parent id, the parent's first split, the color */
		uint64_t parent = strtoull(id_world, NULL, 16), seed[4] = { parent, 1, 1, 0 };

		comm_id(id_child, seed, sizeof(seed), 1);
	}
	CHECK(d.nr_comms == 3, "comms: %zu", d.nr_comms);
	if (d.nr_comms == 3) {
		CHECK_STR(d.comms[0].id, id_failed);
		CHECK_STR(d.comms[0].state, "init_failed");
		/* the dump holds the call's arguments (rank 2 of 2); the reader drops a rank that
		 * cannot be one, which is why NCCL refused the init */
		CHECK(d.comms[0].rank == FR_UNK && d.comms[0].nranks == 2, "failed init's nranks");
		CHECK(strstr(text, "\"rank\":2,\"nranks\":2,") != NULL, "written as called");
		CHECK(d.comms[0].in_header && !d.comms[0].local_id, "cross-rank id");
		CHECK_STR(d.comms[1].id, id_world);
		CHECK_STR(d.comms[1].state, "active");
		CHECK(d.comms[1].rank == 1 && d.comms[1].nranks == 2, "world rank/nranks");
		CHECK(d.comms[1].last_enqueued == 3 && d.comms[1].last_started == 2 &&
		      d.comms[1].last_completed == 2 && d.comms[1].last_p2p == 2,
		      "world seqs %" PRId64 "/%" PRId64 "/%" PRId64 "/%" PRId64,
		      d.comms[1].last_enqueued, d.comms[1].last_started, d.comms[1].last_completed,
		      d.comms[1].last_p2p);
		CHECK_STR(d.comms[2].id, id_child);
		CHECK_STR(d.comms[2].parent, id_world);
		CHECK(d.comms[2].split_color == 1 && d.comms[2].split_key == 0, "split color/key");
		CHECK(d.comms[2].rank == FR_UNK && d.comms[2].nranks == FR_UNK, "split rank unknown");
	}

	CHECK(d.nr_entries == 7, "entries: %zu", d.nr_entries);
	if (d.nr_entries == 7) {
		for (size_t i = 0; i < 7; i++)
			CHECK_U64(d.entries[i].record_id, i + 1);
		e = &d.entries[0];	/* the failed init */
		CHECK(e->comm == 0 && e->coll_seq == 0 && e->p2p_seq == 0 && e->count == 0,
		      "comm_init entry on the failed comm");
		CHECK(e->state != FR_ST_ENQUEUED && e->state != FR_ST_STARTED &&
		      e->state != FR_ST_COMPLETED, "a failed init is no pending or done collective");
		e = &d.entries[1];
		CHECK(e->comm == 1 && e->op == FR_OP_ALL_REDUCE && e->coll_seq == 1 &&
		      e->count == 1024 && e->dtype == FR_DT_FLOAT32 && e->redop == FR_RED_MAX &&
		      e->in_size == 1024 && e->out_size == 1024 && e->state == FR_ST_COMPLETED,
		      "all_reduce");
		e = &d.entries[2];
		CHECK(e->op == FR_OP_BROADCAST && e->coll_seq == 2 && e->root == 1 &&
		      e->dtype == FR_DT_INT32 && e->state == FR_ST_COMPLETED, "broadcast");
		e = &d.entries[3];
		CHECK(e->op == FR_OP_SEND && e->p2p_seq == 1 && e->coll_seq == 0 && e->peer == 0 &&
		      e->count == 8 && e->state == FR_ST_STARTED, "send, at the stream's head");
		e = &d.entries[4];
		CHECK(e->op == FR_OP_RECV && e->p2p_seq == 2 && e->peer == 0 &&
		      e->state == FR_ST_ENQUEUED, "recv");
		e = &d.entries[5];
		CHECK(e->comm == 2 && e->op == FR_OP_ALL_GATHER && e->coll_seq == 1 &&
		      e->in_size == 4 && e->out_size == FR_UNK && e->state == FR_ST_ENQUEUED,
		      "all_gather on the child: its size unknown, so the output is");
		e = &d.entries[6];
		CHECK(e->comm == 1 && e->coll_seq == 3 && e->state == FR_ST_ENQUEUED, "in-call one");
	}
	CHECK(d.nr_in_calls == 1, "in_call: %zu", d.nr_in_calls);
	if (d.nr_in_calls == 1) {
		CHECK_STR(d.in_calls[0].api, "ncclAllReduce");
		CHECK_U64(d.in_calls[0].tid, pid + 100000);
		CHECK_STR(d.in_calls[0].comm_id, id_world);
		CHECK_U64(d.in_calls[0].seq, 3);
	}
	fr_dump__release(&d);
	free(text);
	unlink(path);
	rmdir(dir);
	test_fr_free(fr);
	target__free(t);
	return check_done();
}
