// SPDX-License-Identifier: MIT
/* The Perfetto protobuf backend of trace_json (user/trace_pftrace.c) without BPF: a few
 * events written through the trace_json API under a .pftrace name, read back with the
 * generated perfetto__protos__trace__unpack (the reader's schema, not the writer's twins):
 * clock snapshot and defaults, interning (each string once, iids resolved), slices as
 * BEGIN/END pairs on their track, a GPU stream track under its device, flows, counters,
 * debug annotations of every kind, and the JSON tee written in the same run. */
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

static const char *iname(Perfetto__Protos__InternedData **ins, size_t n, int table, uint64_t iid)
{
	for (size_t i = 0; i < n; i++) {
		Perfetto__Protos__InternedData *in = ins[i];

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

static void write_trace(const char *path)
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
	trace_json__event(tj, "C", "cuda_memory", "bytes allocated (cuda:0)", 42, 0, BASE + 5000, 0);
	trace_json__arg_u64(tj, "bytes", 4096);
	trace_json__event_end(tj);
	trace_json__event(tj, "i", "cuda_memory", "OOM", 42, 43, BASE + 6000, 0);
	trace_json__field_raw(tj, "s", "\"p\"");
	trace_json__event_end(tj);
	trace_json__end_events(tj);
	trace_json__top_raw(tj, "tptrace", "{}");
	CHECK(trace_json__close(tj) == 0, "close %s", path);
}

static void check_trace(const char *path)
{
	size_t len;
	uint8_t *data = slurp(path, &len);
	Perfetto__Protos__Trace *t = data ? perfetto__protos__trace__unpack(NULL, len, data) : NULL;
	Perfetto__Protos__InternedData *ins[64];
	size_t nins = 0, slices = 0, kernels = 0, ends = 0, flows_s = 0, flows_f = 0, counters = 0;
	size_t names_gemm = 0, instants = 0, queries = 0;
	uint64_t thread_uuid = 0, stream_uuid = 0, gpu_uuid = 0, proc_uuid = 0, counter_uuid = 0;

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
	CHECK(p0->trace_packet_defaults && p0->trace_packet_defaults->timestamp_clock_id == 3,
	      "MONOTONIC is the packets' clock");
	for (size_t i = 0; i < t->n_packet; i++) {
		Pkt *p = t->packet[i];
		Perfetto__Protos__TrackDescriptor *d = p->track_descriptor;

		CHECK_U64(p->trusted_packet_sequence_id, 1);
		if (p->interned_data && nins < 64)
			ins[nins++] = p->interned_data;
		if (!d)
			continue;
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
		if (!d->process && !d->thread && !d->counter && d->name && !strcmp(d->name, "GPU 0"))
			gpu_uuid = d->uuid;
		if (!d->thread && d->name && !strcmp(d->name, "stream 7")) {
			stream_uuid = d->uuid;
			CHECK(d->has_parent_uuid && d->parent_uuid == gpu_uuid && gpu_uuid,
			      "the stream is under its GPU");
			CHECK(d->has_sibling_order_rank && d->sibling_order_rank == 7, "stream order");
		}
		if (d->counter) {
			counter_uuid = d->uuid;
			CHECK_STR(d->name, "bytes allocated (cuda:0)");
			CHECK(d->parent_uuid == proc_uuid, "counter under its process");
			CHECK_U64(d->counter->unit, PERFETTO__PROTOS__COUNTER_DESCRIPTOR__UNIT__UNIT_SIZE_BYTES);
		}
	}
	CHECK(thread_uuid && stream_uuid && gpu_uuid && proc_uuid && counter_uuid,
	      "tracks: thread %llu stream %llu gpu %llu process %llu counter %llu",
	      (unsigned long long)thread_uuid, (unsigned long long)stream_uuid,
	      (unsigned long long)gpu_uuid, (unsigned long long)proc_uuid,
	      (unsigned long long)counter_uuid);
	for (size_t i = 0; i < nins; i++)
		for (size_t j = 0; j < ins[i]->n_event_names; j++)
			names_gemm += !strcmp(ins[i]->event_names[j]->name, "gemm");
	CHECK_U64(names_gemm, 1);	/* interned once, used four times */
	for (size_t i = 0; i < t->n_packet; i++) {
		Pkt *p = t->packet[i];
		Ev *e = p->track_event;

		if (!e)
			continue;
		CHECK(p->sequence_flags == 0 || p->sequence_flags == 2, "flags %u", p->sequence_flags);
		if (e->type == PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_END) {
			ends++;
			continue;
		}
		if (e->type == PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_COUNTER) {
			counters++;
			CHECK_U64(e->track_uuid, counter_uuid);
			CHECK(e->has_counter_value && e->counter_value == 4096, "counter value");
			CHECK_U64(p->timestamp, BASE + 5000);
			continue;
		}
		const char *name = iname(ins, nins, 0, e->name_iid);

		CHECK(name != NULL, "name iid %llu resolves", (unsigned long long)e->name_iid);
		if (!name)
			continue;
		if (!strcmp(name, "cudaLaunchKernel")) {
			Pkt *end = t->packet[i + 1];

			slices++;
			CHECK_U64(e->track_uuid, thread_uuid);
			CHECK_STR(iname(ins, nins, 1, e->category_iids[0]), "cuda_runtime");
			CHECK(end->track_event && end->track_event->type ==
			      PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_END &&
			      end->track_event->track_uuid == thread_uuid &&
			      end->timestamp == p->timestamp + 500, "the slice's END, dur 500");
			CHECK_U64(e->n_debug_annotations, 7);
			for (size_t k = 0; k < e->n_debug_annotations; k++) {
				Perfetto__Protos__DebugAnnotation *a = e->debug_annotations[k];
				const char *key = iname(ins, nins, 2, a->name_iid);

				if (!key) {
					CHECK(0, "annotation name iid %llu", (unsigned long long)a->name_iid);
				} else if (!strcmp(key, "kernel")) {
					CHECK_STR(iname(ins, nins, 3, a->string_value_iid), "gemm");
				} else if (!strcmp(key, "correlation")) {
					CHECK(a->has_uint_value && a->uint_value == 100 + slices - 1, "corr");
				} else if (!strcmp(key, "rc")) {
					CHECK(a->has_int_value && a->int_value == -1, "rc");
				} else if (!strcmp(key, "GB/s")) {
					CHECK(a->has_double_value && a->double_value == 1.5, "double");
				} else if (!strcmp(key, "per-thread stream")) {
					CHECK(a->has_bool_value && a->bool_value, "bool");
				} else if (!strcmp(key, "func")) {
					CHECK(a->has_pointer_value && a->pointer_value == 0xdeadbeef, "ptr");
				} else if (!strcmp(key, "grid")) {
					CHECK_STR(iname(ins, nins, 3, a->string_value_iid), "[64, 2, 1]");
				} else {
					CHECK(0, "unexpected annotation %s", key);
				}
			}
		} else if (!strcmp(name, "cudaEventQuery")) {
			CHECK(e->n_debug_annotations == 2 && e->debug_annotations[0]->uint_value == queries &&
			      e->debug_annotations[1]->int_value == (int64_t)(queries % 3),
			      "query %zu: its own correlation and rc", queries);
			queries++;
		} else if (!strcmp(name, "gemm")) {
			kernels++;
			CHECK_U64(e->track_uuid, stream_uuid);
		} else if (!strcmp(name, "ac2g")) {
			if (e->n_flow_ids) {
				flows_s++;
				CHECK_U64(e->track_uuid, thread_uuid);
				CHECK_U64(e->flow_ids[0], 99 + flows_s);
			} else {
				flows_f++;
				CHECK_U64(e->track_uuid, stream_uuid);
				CHECK(e->n_terminating_flow_ids == 1 &&
				      e->terminating_flow_ids[0] == 99 + flows_f, "flow end");
			}
		} else if (!strcmp(name, "OOM")) {
			instants++;
			CHECK_U64(e->track_uuid, proc_uuid);	/* "s":"p" */
			CHECK_U64(e->type, PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_INSTANT);
		}
	}
	CHECK(slices == 2 && kernels == 2 && ends == 5004 && flows_s == 2 && flows_f == 2 &&
	      counters == 1 && instants == 1 && queries == 5000,
	      "events: %zu slices %zu kernels %zu ends %zu/%zu flows %zu counters %zu instants",
	      slices, kernels, ends, flows_s, flows_f, counters, instants);
	perfetto__protos__trace__free_unpacked(t, NULL);
	free(data);
}

int main(void)
{
	char pf[512], gz[512], js[512];
	FILE *f;
	char head[16] = "";

	snprintf(pf, sizeof(pf), "%s/test_trace_pftrace.pftrace", UNIT_OUT_DIR);
	snprintf(gz, sizeof(gz), "%s/test_trace_pftrace.pftrace.gz", UNIT_OUT_DIR);
	snprintf(js, sizeof(js), "%s/test_trace_pftrace.json", UNIT_OUT_DIR);
	unsetenv("TPTRACE_TRACE_TEE");
	write_trace(pf);
	check_trace(pf);
	/* .pftrace.gz, with the JSON tee: one run, both files */
	setenv("TPTRACE_TRACE_TEE", js, 1);
	write_trace(gz);
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
	return check_done();
}
