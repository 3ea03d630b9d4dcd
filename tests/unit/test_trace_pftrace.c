// SPDX-License-Identifier: MIT
/* The Perfetto protobuf backend of the trace writer (user/trace/trace_pftrace.c) without BPF: a
 * few events written through the writer's API under a .pftrace name, read back with the
 * generated perfetto__protos__trace__unpack and resolved as the trace processor does, one
 * sequence at a time: the trace's clock snapshot; each sequence's first packet (incremental
 * state cleared, its defaults, clock 64 incremental) and every later one needing that state;
 * timestamps as deltas on clock 64 or absolute on MONOTONIC; interned ids defined on their own
 * sequence before use (each string once per sequence); descriptors before a track's first
 * event; slices as BEGIN/END pairs on their track, nested ones opened by slice_begin; a GPU
 * stream track under its device; flows; counters; debug annotations of every kind; and the
 * JSON tee written in the same run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "check.h"
#include "gpu_trace.h"
#include "trace_json.h"
#include "perfetto_trace.pb-c.h"

#define BASE 1000000000ull

typedef Perfetto__Protos__TracePacket Pkt;
typedef Perfetto__Protos__TrackEvent Ev;

static uint8_t *slurp(const char *path, size_t *len)
{
	gzFile f = gzopen(path, "rb");	/* reads plain files as they are */
	size_t cap = 1 << 20;
	uint8_t *buf = malloc(cap);
	int n;

	*len = 0;
	if (!f || !buf)
		return NULL;
	while ((n = gzread(f, buf + *len, (unsigned)(cap - *len))) > 0) {
		*len += n;
		if (*len == cap)
			buf = realloc(buf, cap *= 2);
	}
	gzclose(f);
	return buf;
}

#define MAX_SEQ 64

/* A sequence as the reader keeps it: its defaults, clock 64, and interned data. */
struct seqst {
	uint32_t id;
	bool cleared;
	uint64_t def_track, last;
	Perfetto__Protos__InternedData **ins;
	size_t nins;
	uint64_t last_name_iid;	/* the last event's: its "interned once" already checked */
};

static struct seqst seqs[MAX_SEQ];
static size_t nseqs;

static struct seqst *seq_of(uint32_t id)
{
	for (size_t i = 0; i < nseqs; i++)
		if (seqs[i].id == id)
			return &seqs[i];
	if (nseqs == MAX_SEQ)
		return NULL;
	seqs[nseqs] = (struct seqst){ .id = id };
	return &seqs[nseqs++];
}

static const char *iname_scan(const struct seqst *sq, int table, uint64_t iid);
static struct { const struct seqst *sq; int table; uint64_t iid; const char *r; } memo[256];

/* table: 0 names, 1 categories, 2 annotation names, 3 string values; defined on sq only.
 * Names and keys found are remembered (a definition never changes; a sequence with 65536
 * InternedData packets is scanned once per name, not once per event). */
static const char *iname(const struct seqst *sq, int table, uint64_t iid)
{
	unsigned h = (unsigned)(iid * 4 + table) & 255;
	const char *r;

	if (table != 3 && memo[h].r && memo[h].sq == sq && memo[h].table == table &&
	    memo[h].iid == iid)
		return memo[h].r;
	r = iname_scan(sq, table, iid);
	if (r && table != 3)
		memo[h].sq = sq, memo[h].table = table, memo[h].iid = iid, memo[h].r = r;
	return r;
}

static const char *iname_scan(const struct seqst *sq, int table, uint64_t iid)
{
	for (size_t i = 0; i < sq->nins; i++) {
		Perfetto__Protos__InternedData *in = sq->ins[i];

		if (table == 0)
			for (size_t j = 0; j < in->n_event_names; j++)
				if (in->event_names[j]->iid == iid)
					return in->event_names[j]->name;
		if (table == 1)
			for (size_t j = 0; j < in->n_event_categories; j++)
				if (in->event_categories[j]->iid == iid)
					return in->event_categories[j]->name;
		if (table == 2)
			for (size_t j = 0; j < in->n_debug_annotation_names; j++)
				if (in->debug_annotation_names[j]->iid == iid)
					return in->debug_annotation_names[j]->name;
		if (table == 3)
			for (size_t j = 0; j < in->n_debug_annotation_string_values; j++)
				if (in->debug_annotation_string_values[j]->iid == iid) {
					/* bytes: not NUL-terminated */
					static char buf[256];
					ProtobufCBinaryData *b = &in->debug_annotation_string_values[j]->str;

					snprintf(buf, sizeof(buf), "%.*s", (int)b->len, (const char *)b->data);
					return buf;
				}
	}
	return NULL;
}

/* A string annotation's value: inline, or its interned iid's string on sq; "" if neither. */
static const char *aval(const struct seqst *sq, const Perfetto__Protos__DebugAnnotation *a)
{
	if (a->string_value)
		return a->string_value;
	return iname(sq, 3, a->string_value_iid) ?: "";
}

/* How many times str is defined in table on sq. */
static int defined(const struct seqst *sq, int table, const char *str)
{
	int n = 0;

	for (size_t i = 0; i < sq->nins; i++) {
		Perfetto__Protos__InternedData *in = sq->ins[i];

		if (table == 0)
			for (size_t j = 0; j < in->n_event_names; j++)
				n += !strcmp(in->event_names[j]->name, str);
	}
	return n;
}

static void write_trace(const char *path, bool opens)
{
	struct trace_json *tj = trace_json__open(path);

	CHECK(tj != NULL, "open %s", path);
	if (!tj)
		exit(1);
	CHECK(trace_json__begin(tj, BASE, 1700000000000000000ull) == 0, "begin");
	trace_json__process_name(tj, 42, "python3");
	trace_json__process_label(tj, 42, "rank 3");
	trace_json__thread_name(tj, 42, 43, "worker");
	/* a GPU, as gpu_trace.c writes it: process metadata on the device number */
	trace_json__process_name(tj, 0, "GPU 0");
	trace_json__process_label(tj, 0, "GPU 0");
	trace_json__process_sort(tj, 0, GPU_TRACE_SORT_BASE);
	trace_json__thread_name(tj, 0, 7, "stream 7");
	trace_json__thread_sort(tj, 0, 7, 7);
	for (int i = 0; i < 2; i++) {
		trace_json__event(tj, "X", "cuda_runtime", "cudaLaunchKernel", 42, 43,
				  BASE + 1000 + i * 10000, 500);
		trace_json__arg_str(tj, "kernel", "gemm");
		trace_json__arg_u64(tj, "correlation", 100 + i);
		trace_json__arg_i64(tj, "rc", -1);
		trace_json__arg_f64(tj, "GB/s", 1.5);
		trace_json__arg_bool(tj, "per-thread stream", true);
		trace_json__arg_hex(tj, "func", 0xdeadbeef);
		trace_json__arg_dim3(tj, "grid", 64, 2, 1);
		trace_json__event_end(tj);
		trace_json__event(tj, "X", "kernel", "gemm", 0, 7, BASE + 3000 + i * 10000, 2000);
		trace_json__event_end(tj);
		trace_json__event(tj, "s", "ac2g", "ac2g", 42, 43, BASE + 1000 + i * 10000, 0);
		trace_json__field_raw(tj, "id", i ? "101" : "100");
		trace_json__event_end(tj);
		trace_json__event(tj, "f", "ac2g", "ac2g", 0, 7, BASE + 3000 + i * 10000, 0);
		trace_json__field_raw(tj, "id", i ? "101" : "100");
		trace_json__field_raw(tj, "bp", "\"e\"");
		trace_json__event_end(tj);
	}
	/* more values than the annotation memo has slots: collisions must not mix them up */
	for (int i = 0; i < 5000; i++) {
		trace_json__event(tj, "X", "cuda_runtime", "cudaEventQuery", 42, 43, BASE + 100000 + i * 10, 5);
		trace_json__arg_u64(tj, "correlation", i);
		trace_json__arg_i64(tj, "rc", i % 3);
		trace_json__event_end(tj);
	}
	/* --py-stacks: two frames opened at a call's entry (the same time as the call), the call
	 * completes, then the frames close innermost first */
	trace_writer__slice_begin(tj, "python_function", "train.py(1): main", 42, 43, BASE + 200000);
	trace_writer__slice_begin(tj, "python_function", "train.py(9): step", 42, 43, BASE + 200000);
	trace_json__event(tj, "X", "cuda_runtime", "cudaDeviceSynchronize", 42, 43, BASE + 200000, 50);
	trace_json__event_end(tj);
	trace_json__event(tj, "E", "python_function", "train.py(9): step", 42, 43, BASE + 200000, 70);
	trace_json__arg_u64(tj, "Python id", 2);
	trace_json__event_end(tj);
	trace_json__event(tj, "E", "python_function", "train.py(1): main", 42, 43, BASE + 200000, 90);
	trace_json__arg_u64(tj, "Python id", 1);
	trace_json__event_end(tj);
	/* names and keys from one reused buffer (as memtrace.c's counter names are): each time
	 * its own string, never the first one's iid */
	for (int i = 0; i < 3; i++) {
		char name[32], key[32];

		snprintf(name, sizeof(name), "dyn%d", i);
		snprintf(key, sizeof(key), "key%d", i);
		trace_json__event(tj, "i", "dyn", name, 42, 43, BASE + 300000 + i, 0);
		trace_json__arg_u64(tj, key, i);
		trace_json__event_end(tj);
	}
	trace_json__event(tj, "C", "cuda_memory", "bytes allocated (cuda:0)", 42, 0, BASE + 5000, 0);
	trace_json__arg_u64(tj, "bytes", 4096);
	trace_json__event_end(tj);
	/* BEGIN at entry (trace_writer__call_open): a call opened with what its entry says, a
	 * call inside it opened and completed, then the outer one completes with its return
	 * value and a value that changed since (the --gpu join's correlation). Without opens
	 * (the JSON's own run) the same events come only as "X". */
	if (opens) {
		trace_writer__call_open(tj, "cuda_runtime", "cudaStreamSynchronize", 42, 43,
					BASE + 400000);
		trace_json__arg_hex(tj, "stream", 0x5100);
		trace_json__arg_u64(tj, "correlation", 7);
		trace_json__event_end(tj);
		trace_writer__call_open(tj, "nccl", "ncclAllReduce", 42, 43, BASE + 400100);
		trace_json__arg_u64(tj, "count", 1024);
		trace_json__event_end(tj);
	}
	trace_json__event(tj, "X", "nccl", "ncclAllReduce", 42, 43, BASE + 400100, 200);
	trace_json__arg_u64(tj, "count", 1024);
	trace_json__arg_i64(tj, "rc", 0);
	trace_json__event_end(tj);
	trace_json__event(tj, "X", "cuda_runtime", "cudaStreamSynchronize", 42, 43, BASE + 400000,
			  1000);
	trace_json__arg_hex(tj, "stream", 0x5100);
	trace_json__arg_u64(tj, "correlation", 8);
	trace_json__arg_i64(tj, "rc", 0);
	trace_json__event_end(tj);
	/* an entry-only call: no duration, one INSTANT; its handle the same text as the
	 * stream's, one iid */
	trace_json__event(tj, "X", "cuda_runtime", "cudaEventRecord", 42, 43, BASE + 401000, 0);
	trace_json__arg_hex(tj, "event", 0x5100);
	trace_json__event_end(tj);
	/* a literal string value seen before the value table grows (600 handles interned as
	 * their text at their second use) and after it: each time itself */
	for (int i = 0; i < 2; i++) {
		trace_json__event(tj, "i", "grow", "grow", 42, 43, BASE + 500000 + i * 2000, 0);
		trace_json__arg_str(tj, "kernel source", "symbol");
		trace_json__event_end(tj);
		for (int j = 0; !i && j < 1200; j++) {
			trace_json__event(tj, "i", "grow", "handles", 42, 43, BASE + 500001 + j, 0);
			trace_json__arg_hex(tj, "handle", 0x1000 + j % 600);
			trace_json__event_end(tj);
		}
	}
	/* the value table full (1 << 16 values): a value it holds keeps its iid, a new one is
	 * written inline */
	for (int j = 0; j < (1 << 16); j++) {
		char v[16];

		snprintf(v, sizeof(v), "v%d", j);
		trace_json__event(tj, "i", "grow", "fill", 42, 43, BASE + 600000 + j, 0);
		trace_json__arg_str(tj, "value", v);
		trace_json__event_end(tj);
	}
	trace_json__event(tj, "i", "grow", "full", 42, 43, BASE + 700000, 0);
	trace_json__arg_str(tj, "kernel source", "symbol");
	trace_json__arg_str(tj, "value", "brand new");
	trace_json__event_end(tj);
	trace_json__event(tj, "i", "cuda_memory", "OOM", 42, 43, BASE + 6000, 0);
	trace_json__field_raw(tj, "s", "\"p\"");
	trace_json__event_end(tj);
	trace_json__end_events(tj);
	trace_json__top_raw(tj, "tptrace", "{}");
	CHECK(trace_json__close(tj) == 0, "close %s", path);
}

/* An open slice on a track, as the reader stacks them. */
struct open_slice {
	uint64_t track, ts;
	const char *name;
};

static void check_trace(const char *path)
{
	size_t len;
	uint8_t *data = slurp(path, &len);
	Perfetto__Protos__Trace *t = data ? perfetto__protos__trace__unpack(NULL, len, data) : NULL;
	size_t slices = 0, kernels = 0, ends = 0, flows_s = 0, flows_f = 0, counters = 0;
	size_t instants = 0, queries = 0, py_ends = 0, absolute = 0, dyn = 0;
	size_t opened = 0, opened_ends = 0, grow = 0, handles = 0, full = 0;
	uint64_t thread_uuid = 0, stream_uuid = 0, gpu_uuid = 0, proc_uuid = 0, counter_uuid = 0;
	uint64_t declared[64];
	size_t ndeclared = 0;
	struct open_slice open[16];
	size_t nopen = 0;

	nseqs = 0;
	memset(memo, 0, sizeof(memo));	/* the last trace's strings are freed */
	CHECK(t != NULL, "%s unpacks as perfetto.protos.Trace", path);
	if (!t)
		return;
	Pkt *p0 = t->packet[0];

	CHECK(p0->clock_snapshot && p0->clock_snapshot->n_clocks == 3, "clock snapshot first");
	for (size_t i = 0; p0->clock_snapshot && i < p0->clock_snapshot->n_clocks; i++) {
		Perfetto__Protos__ClockSnapshot__Clock *c = p0->clock_snapshot->clocks[i];

		if (c->clock_id == 3)
			CHECK_U64(c->timestamp, BASE);
		if (c->clock_id == 1)
			CHECK_U64(c->timestamp, 1700000000000000000ull);
	}
	CHECK_U64(p0->sequence_flags, 3);
	CHECK_U64(p0->trusted_packet_sequence_id, 1);
	CHECK(p0->trace_packet_defaults && p0->trace_packet_defaults->timestamp_clock_id == 3,
	      "MONOTONIC is sequence 1's clock");
	for (size_t i = 0; i < t->n_packet; i++) {
		Pkt *p = t->packet[i];
		Perfetto__Protos__TrackDescriptor *d = p->track_descriptor;
		Ev *e = p->track_event;
		struct seqst *sq = seq_of(p->trusted_packet_sequence_id);
		uint64_t ts = 0, track;
		const char *name = NULL;
		bool known = false;

		CHECK(sq != NULL && p->trusted_packet_sequence_id, "sequence id");
		if (!sq)
			break;
		if (p->sequence_flags & 1) {
			/* a sequence's first packet: nothing before it on the sequence */
			CHECK(!sq->cleared && sq->nins == 0, "seq %u cleared once, first", sq->id);
			sq->cleared = true;
			if (sq->id != 1) {
				Perfetto__Protos__TracePacketDefaults *df = p->trace_packet_defaults;
				Perfetto__Protos__ClockSnapshot *cs = p->clock_snapshot;

				CHECK(df && df->timestamp_clock_id == 64 && df->track_event_defaults &&
				      df->track_event_defaults->track_uuid, "seq %u defaults", sq->id);
				CHECK(cs && cs->n_clocks == 2 && cs->clocks[0]->clock_id == 64 &&
				      cs->clocks[0]->is_incremental && cs->clocks[1]->clock_id == 3 &&
				      cs->clocks[1]->timestamp == cs->clocks[0]->timestamp,
				      "seq %u: clock 64 incremental, tied to MONOTONIC", sq->id);
				if (df && df->track_event_defaults)
					sq->def_track = df->track_event_defaults->track_uuid;
				if (cs && cs->n_clocks)
					sq->last = cs->clocks[0]->timestamp;
			}
		}
		if (p->interned_data) {
			sq->ins = realloc(sq->ins, (sq->nins + 1) * sizeof(*sq->ins));
			sq->ins[sq->nins++] = p->interned_data;
		}
		if (d) {
			CHECK_U64(p->trusted_packet_sequence_id, 1);
			if (ndeclared < 64)
				declared[ndeclared++] = d->uuid;
			if (d->thread && d->thread->tid == 43) {
				thread_uuid = d->uuid;
				CHECK_STR(d->thread->thread_name, "worker");
				CHECK_U64(d->thread->pid, 42);
			}
			if (d->process && d->process->pid == 42) {
				proc_uuid = d->uuid;
				CHECK_STR(d->process->process_name, "python3");
				CHECK(d->process->n_process_labels == 1 &&
				      !strcmp(d->process->process_labels[0], "rank 3"), "rank label");
			}
			if (!d->process && !d->thread && !d->counter && d->name &&
			    !strcmp(d->name, "GPU 0"))
				gpu_uuid = d->uuid;
			if (!d->thread && d->name && !strcmp(d->name, "stream 7")) {
				stream_uuid = d->uuid;
				CHECK(d->has_parent_uuid && d->parent_uuid == gpu_uuid && gpu_uuid,
				      "the stream is under its GPU");
				CHECK(d->has_sibling_order_rank && d->sibling_order_rank == 7,
				      "stream order");
			}
			if (d->counter) {
				counter_uuid = d->uuid;
				CHECK_STR(d->name, "bytes allocated (cuda:0)");
				CHECK(d->parent_uuid == proc_uuid, "counter under its process");
				CHECK_U64(d->counter->unit,
					  PERFETTO__PROTOS__COUNTER_DESCRIPTOR__UNIT__UNIT_SIZE_BYTES);
			}
			continue;
		}
		if (!e)
			continue;
		CHECK(sq->cleared && sq->id != 1, "event on a started sequence %u", sq->id);
		CHECK_U64(p->sequence_flags, 2);
		if (p->has_timestamp_clock_id) {
			CHECK_U64(p->timestamp_clock_id, 3);	/* earlier than clock 64: absolute */
			ts = p->timestamp;
			CHECK(ts < sq->last, "absolute only when time went back");
			absolute++;
		} else {
			ts = sq->last += p->timestamp;
		}
		track = e->has_track_uuid ? e->track_uuid : sq->def_track;
		for (size_t k = 0; k < ndeclared; k++)
			known |= declared[k] == track;
		CHECK(known, "track %llu declared before use", (unsigned long long)track);
		if (e->type == PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_END) {
			ends++;
			CHECK(nopen > 0 && open[nopen - 1].track == track, "END on its open slice");
			if (!nopen)
				continue;
			nopen--;
			if (!strncmp(open[nopen].name, "train.py", 8)) {
				/* Python frames: closed innermost first, with their args */
				py_ends++;
				CHECK(e->n_debug_annotations == 1 &&
				      e->debug_annotations[0]->uint_value == 3 - py_ends,
				      "%s: Python id on its END", open[nopen].name);
				CHECK_U64(ts - open[nopen].ts, py_ends == 1 ? 70 : 90);
			} else if (!strcmp(open[nopen].name, "cudaLaunchKernel")) {
				CHECK_U64(ts - open[nopen].ts, 500);
			} else if (!strcmp(open[nopen].name, "cudaStreamSynchronize")) {
				/* what the BEGIN did not say: the changed correlation, the rc */
				opened_ends++;
				CHECK_U64(ts, BASE + 401000);
				CHECK(e->n_debug_annotations == 2 &&
				      !strcmp(iname(sq, 2, e->debug_annotations[0]->name_iid) ?: "",
					      "correlation") &&
				      e->debug_annotations[0]->uint_value == 8 &&
				      !strcmp(iname(sq, 2, e->debug_annotations[1]->name_iid) ?: "",
					      "rc") &&
				      e->debug_annotations[1]->has_int_value &&
				      e->debug_annotations[1]->int_value == 0,
				      "sync END: correlation 8 and rc, not the stream again");
			} else if (!strcmp(open[nopen].name, "ncclAllReduce")) {
				opened_ends++;
				CHECK_U64(ts, BASE + 400300);
				CHECK(e->n_debug_annotations == 1 &&
				      !strcmp(iname(sq, 2, e->debug_annotations[0]->name_iid) ?: "",
					      "rc"), "allreduce END: its rc only");
			}
			continue;
		}
		if (e->type == PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_COUNTER) {
			counters++;
			CHECK_U64(track, counter_uuid);
			CHECK(e->has_counter_value && e->counter_value == 4096, "counter value");
			CHECK_U64(ts, BASE + 5000);
			continue;
		}
		name = iname(sq, 0, e->name_iid);
		CHECK(name != NULL, "name iid %llu defined on seq %u",
		      (unsigned long long)e->name_iid, sq->id);
		if (!name)
			continue;
		if (e->name_iid != sq->last_name_iid)
			CHECK(defined(sq, 0, name) == 1, "%s interned once on seq %u", name, sq->id);
		sq->last_name_iid = e->name_iid;
		if (e->type == PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN) {
			CHECK(nopen == 0 || open[nopen - 1].track != track ||
			      open[nopen - 1].ts <= ts, "nested BEGIN after its parent's");
			if (nopen < 16)
				open[nopen++] = (struct open_slice){ track, ts, name };
		}
		if (!strcmp(name, "cudaLaunchKernel")) {
			slices++;
			CHECK_U64(track, thread_uuid);
			CHECK_U64(ts, BASE + 1000 + (slices - 1) * 10000);
			CHECK_STR(iname(sq, 1, e->category_iids[0]), "cuda_runtime");
			CHECK_U64(e->n_debug_annotations, 7);
			for (size_t k = 0; k < e->n_debug_annotations; k++) {
				Perfetto__Protos__DebugAnnotation *a = e->debug_annotations[k];
				const char *key = iname(sq, 2, a->name_iid);

				if (!key) {
					CHECK(0, "annotation name iid %llu", (unsigned long long)a->name_iid);
				} else if (!strcmp(key, "kernel")) {
					CHECK_STR(iname(sq, 3, a->string_value_iid), "gemm");
				} else if (!strcmp(key, "correlation")) {
					CHECK(a->has_uint_value && a->uint_value == 100 + slices - 1, "corr");
				} else if (!strcmp(key, "rc")) {
					CHECK(a->has_int_value && a->int_value == -1, "rc");
				} else if (!strcmp(key, "GB/s")) {
					CHECK(a->has_double_value && a->double_value == 1.5, "double");
				} else if (!strcmp(key, "per-thread stream")) {
					CHECK(a->has_bool_value && a->bool_value, "bool");
				} else if (!strcmp(key, "func")) {
					/* a handle: the JSON's text, inline the first time,
					 * interned from the second */
					CHECK_STR(aval(sq, a), "0xdeadbeef");
					CHECK(slices == 1 ? a->string_value && !a->string_value_iid :
					      !a->string_value && a->string_value_iid,
					      "launch %zu: func inline, then interned", slices);
				} else if (!strcmp(key, "grid")) {
					CHECK_STR(iname(sq, 3, a->string_value_iid), "[64, 2, 1]");
				} else {
					CHECK(0, "unexpected annotation %s", key);
				}
			}
		} else if (!strcmp(name, "cudaEventQuery")) {
			CHECK(e->n_debug_annotations == 2 && e->debug_annotations[0]->uint_value == queries &&
			      e->debug_annotations[1]->int_value == (int64_t)(queries % 3),
			      "query %zu: its own correlation and rc", queries);
			CHECK_U64(ts, BASE + 100000 + queries * 10);
			queries++;
		} else if (!strcmp(name, "gemm")) {
			kernels++;
			CHECK_U64(track, stream_uuid);
		} else if (!strcmp(name, "cudaDeviceSynchronize")) {
			/* under both Python frames, which opened at the same time before it */
			CHECK(nopen == 3 && !strcmp(open[1].name, "train.py(9): step") &&
			      !strcmp(open[0].name, "train.py(1): main"), "the call inside its frames");
		} else if (!strcmp(name, "ac2g")) {
			if (e->n_flow_ids) {
				flows_s++;
				CHECK_U64(track, thread_uuid);
				CHECK_U64(e->flow_ids[0], 99 + flows_s);
			} else {
				flows_f++;
				CHECK_U64(track, stream_uuid);
				CHECK(e->n_terminating_flow_ids == 1 &&
				      e->terminating_flow_ids[0] == 99 + flows_f, "flow end");
			}
		} else if (!strncmp(name, "dyn", 3)) {
			char want[8];

			snprintf(want, sizeof(want), "key%c", name[3]);
			CHECK(e->n_debug_annotations == 1 &&
			      !strcmp(iname(sq, 2, e->debug_annotations[0]->name_iid) ?: "", want) &&
			      e->debug_annotations[0]->uint_value == (uint64_t)(name[3] - '0'),
			      "%s: its own key %s", name, want);
			dyn++;
		} else if (!strcmp(name, "cudaStreamSynchronize")) {
			/* its BEGIN, written at its entry (before the call inside it) with what the
			 * entry said */
			opened++;
			CHECK_U64(e->type, PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN);
			CHECK_U64(ts, BASE + 400000);
			CHECK(e->n_debug_annotations == 2 &&
			      !strcmp(aval(sq, e->debug_annotations[0]), "0x5100") &&
			      e->debug_annotations[1]->uint_value == 7,
			      "sync BEGIN: the stream and the entry's correlation");
		} else if (!strcmp(name, "ncclAllReduce")) {
			opened++;
			CHECK(nopen == 2 && !strcmp(open[0].name, "cudaStreamSynchronize"),
			      "allreduce opened inside the sync");
			CHECK(e->n_debug_annotations == 1 &&
			      e->debug_annotations[0]->uint_value == 1024, "allreduce BEGIN: count");
		} else if (!strcmp(name, "cudaEventRecord")) {
			instants++;
			CHECK_U64(e->type, PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_INSTANT);
			/* the value's third use (the sync's BEGIN and "X" before): interned, its
			 * definition made when the "X" used it (the END did not repeat it) */
			CHECK(e->n_debug_annotations == 1 &&
			      e->debug_annotations[0]->string_value_iid &&
			      !strcmp(aval(sq, e->debug_annotations[0]), "0x5100"),
			      "the event handle: the stream's text, interned");
		} else if (!strcmp(name, "grow")) {
			grow++;
			CHECK(e->n_debug_annotations == 1 &&
			      !strcmp(iname(sq, 3, e->debug_annotations[0]->string_value_iid) ?: "",
				      "symbol"), "grow %zu: the literal value is itself", grow);
		} else if (!strcmp(name, "full")) {
			full++;
			CHECK(e->n_debug_annotations == 2 &&
			      e->debug_annotations[0]->string_value_iid &&
			      !strcmp(aval(sq, e->debug_annotations[0]), "symbol") &&
			      !e->debug_annotations[1]->string_value_iid &&
			      !strcmp(aval(sq, e->debug_annotations[1]), "brand new"),
			      "table full: the old value by its iid, the new one inline");
		} else if (!strcmp(name, "handles")) {
			char want[16];

			/* each value twice: inline, then interned */
			snprintf(want, sizeof(want), "0x%zx", 0x1000 + handles % 600);
			CHECK(e->n_debug_annotations == 1 &&
			      !strcmp(aval(sq, e->debug_annotations[0]), want) &&
			      !e->debug_annotations[0]->string_value_iid == (handles < 600),
			      "handle %zu: %s, %s", handles, want,
			      handles < 600 ? "inline" : "interned");
			handles++;
		} else if (!strcmp(name, "OOM")) {
			instants++;
			CHECK_U64(track, proc_uuid);	/* "s":"p" */
			CHECK_U64(e->type, PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_INSTANT);
		}
	}
	CHECK(thread_uuid && stream_uuid && gpu_uuid && proc_uuid && counter_uuid,
	      "tracks: thread %llu stream %llu gpu %llu process %llu counter %llu",
	      (unsigned long long)thread_uuid, (unsigned long long)stream_uuid,
	      (unsigned long long)gpu_uuid, (unsigned long long)proc_uuid,
	      (unsigned long long)counter_uuid);
	/* sequences: 1 (clocks, descriptors), the thread, the stream, the process */
	CHECK_U64(nseqs, 4);
	CHECK_U64(dyn, 3);
	CHECK(full == 1, "%zu events past the value table's cap", full);
	CHECK(grow == 2 && handles == 1200, "%zu grow, %zu handles", grow, handles);
	CHECK(opened == 2 && opened_ends == 2, "%zu calls opened, %zu of them ended", opened,
	      opened_ends);
	CHECK(slices == 2 && kernels == 2 && ends == 5009 && flows_s == 2 && flows_f == 2 &&
	      counters == 1 && instants == 2 && queries == 5000 && py_ends == 2 && nopen == 0,
	      "events: %zu slices %zu kernels %zu ends %zu/%zu flows %zu counters %zu instants "
	      "%zu Python ends %zu open", slices, kernels, ends, flows_s, flows_f, counters,
	      instants, py_ends, nopen);
	/* the flows' ends, written after the slices they start or end in (at those slices'
	 * starts), go back in time: those four, and nothing else, are absolute */
	CHECK(absolute == 4, "%zu absolute timestamps, want the 4 flow ends", absolute);
	for (size_t i = 0; i < nseqs; i++)
		free(seqs[i].ins);
	perfetto__protos__trace__free_unpacked(t, NULL);
	free(data);
}

/* A call opened whose "X" never comes (the writer's contract says it does): the close still
 * ends it, at its sequence's last time, so BEGIN and END balance. */
static void check_open_never_completed(const char *path)
{
	struct trace_json *tj = trace_json__open(path);
	Perfetto__Protos__Trace *t;
	size_t len, begins = 0, ends = 0;
	uint64_t ts[2] = { 0, 0 };
	uint8_t *data;

	CHECK(tj != NULL, "open %s", path);
	if (!tj)
		return;
	trace_json__begin(tj, BASE, 1700000000000000000ull);
	trace_writer__call_open(tj, "cuda_runtime", "cudaStreamSynchronize", 42, 43, BASE + 100);
	trace_json__arg_u64(tj, "correlation", 1);
	trace_json__event_end(tj);
	trace_json__event(tj, "X", "cuda_runtime", "cudaEventQuery", 42, 43, BASE + 200, 10);
	trace_json__event_end(tj);
	CHECK(trace_json__close(tj) == 0, "close %s", path);
	data = slurp(path, &len);
	t = data ? perfetto__protos__trace__unpack(NULL, len, data) : NULL;
	CHECK(t != NULL, "%s unpacks", path);
	for (size_t i = 0; t && i < t->n_packet; i++) {
		Ev *e = t->packet[i]->track_event;

		if (!e)
			continue;
		if (!t->packet[i]->has_timestamp_clock_id)
			ts[1] += t->packet[i]->timestamp;
		begins += e->type == PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN;
		ends += e->type == PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_END;
		if (e->type == PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_END)
			ts[0] = ts[1];
	}
	/* the sync and the query: two BEGINs, the query's END, the sync's at the query's end */
	CHECK(begins == 2 && ends == 2, "%zu BEGINs, %zu ENDs", begins, ends);
	CHECK_U64(ts[0], 110);	/* BASE + 210: deltas from the sequence's start, BASE + 100 */
	if (t)
		perfetto__protos__trace__free_unpacked(t, NULL);
	free(data);
}

int main(void)
{
	char pf[512], gz[512], js[512], js2[512];
	char *a, *b;
	size_t alen, blen;
	FILE *f;
	char head[16] = "";

	snprintf(pf, sizeof(pf), "%s/test_trace_pftrace.pftrace", UNIT_OUT_DIR);
	snprintf(gz, sizeof(gz), "%s/test_trace_pftrace.pftrace.gz", UNIT_OUT_DIR);
	snprintf(js, sizeof(js), "%s/test_trace_pftrace.json", UNIT_OUT_DIR);
	snprintf(js2, sizeof(js2), "%s/test_trace_pftrace.noopen.json", UNIT_OUT_DIR);
	unsetenv("TPTRACE_TRACE_TEE");
	write_trace(pf, true);
	check_trace(pf);
	/* .pftrace.gz, with the JSON tee: one run, both files */
	setenv("TPTRACE_TRACE_TEE", js, 1);
	write_trace(gz, true);
	unsetenv("TPTRACE_TRACE_TEE");
	check_trace(gz);
	f = fopen(gz, "rb");
	CHECK(f && fread(head, 1, 2, f) == 2 && (uint8_t)head[0] == 0x1f, "gzip");
	if (f)
		fclose(f);
	f = fopen(js, "r");
	CHECK(f && fread(head, 1, 15, f) == 15 && !strncmp(head, "{\n  \"schemaVers", 15),
	      "the tee wrote JSON");
	if (f)
		fclose(f);
	snprintf(pf, sizeof(pf), "%s/test_trace_pftrace.unended.pftrace", UNIT_OUT_DIR);
	check_open_never_completed(pf);
	/* the JSON does not see the opens: byte for byte the trace of the same events without */
	write_trace(js2, false);
	a = (char *)slurp(js, &alen);
	b = (char *)slurp(js2, &blen);
	CHECK(a && b && alen == blen && !memcmp(a, b, alen), "JSON with opens = JSON without");
	free(a);
	free(b);
	return check_done();
}
