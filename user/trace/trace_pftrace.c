// SPDX-License-Identifier: MIT
/* The Perfetto protobuf backend of the trace writer (trace_writer.h), written as Perfetto's
 * own SDK writes track events:
 * - One trusted packet sequence per track that has events: each thread, each GPU stream, and
 *   a process's own track (its instants and counters). A sequence starts with a packet that
 *   sets SEQ_INCREMENTAL_STATE_CLEARED, its TracePacketDefaults (timestamps on clock 64, the
 *   sequence's track as the events' default track) and a ClockSnapshot that makes clock 64 an
 *   incremental clock tied to CLOCK_MONOTONIC; every later packet sets
 *   SEQ_NEEDS_INCREMENTAL_STATE.
 * - Timestamps are deltas on clock 64 from the sequence's previous delta-coded packet; a
 *   packet earlier than that (a parent written after its children, GPU records delivered out
 *   of order) carries its absolute CLOCK_MONOTONIC time and timestamp_clock_id instead, as
 *   the SDK does when time goes backwards.
 * - Event names, categories, annotation names and string values (hex values too, as the
 *   JSON's text) are interned: iids are one table's for the whole trace, and each sequence
 *   defines an iid in the InternedData of the first packet that uses it there.
 * - Track descriptors go on sequence 1 (with the trace's ClockSnapshot of BOOTTIME, MONOTONIC
 *   and REALTIME) before a track's first event, again when its metadata changes, and at the
 *   end for tracks that only had metadata.
 * Mapping from the writer's calls:
 *   slice_begin ... E: SLICE_BEGIN when the slice opens, SLICE_END (with the args) when it
 *                       closes: --py-stacks' Python frames, known at the call that enters them
 *   call_open ... X: SLICE_BEGIN (with the entry's args) when the call enters, SLICE_END
 *                    at ts + dur with the args the BEGIN did not carry with the same value
 *                    (the trace processor merges an END's args into its slice)
 *   X -> (not opened) SLICE_BEGIN (with the args) + SLICE_END at ts + dur; with no duration
 *        one INSTANT (the trace processor's slice of dur 0 either way)
 *   i -> INSTANT on the thread track ("s":"t") or the process track ("s":"p"/"g")
 *   C -> one COUNTER event per arg on a counter track (pid, name, key), child of the process
 *   s/f (flows, "id") -> INSTANT with flow_ids / terminating_flow_ids at the same place
 *   M -> process/thread TrackDescriptors; a pid whose sort index is a GPU's
 *        (>= GPU_TRACE_SORT_BASE) is a GPU: a plain named track with one child per stream.
 * Events are encoded by hand (the varints and length prefixes of the fields below, as
 * Perfetto's protozero does); the few descriptor and clock packets by protobuf-c from
 * proto/perfetto_trace.proto. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "gpu_trace.h"
#include "growbuf.h"
#include "hashmap.h"
#include "trace_sink.h"
#include "trace_writer.h"
#include "perfetto_trace.pb-c.h"
#include "util.h"

#define GLOBAL_SEQ	1
#define SEQ_CLEARED	1	/* TracePacket.SequenceFlags */
#define SEQ_NEEDS	2
#define CLOCK_MONO	3	/* BuiltinClock */
#define CLOCK_SEQ	64	/* the first sequence-scoped clock id */
#define MAX_ARGS	32
#define MAX_INTERNED_STRS (1 << 16)

/* TracePacket, TrackEvent, DebugAnnotation, InternedData field numbers (Perfetto's) */
enum {
	PKT_TIMESTAMP = 8, PKT_CLOCK_SNAPSHOT = 6, PKT_SEQ_ID = 10, PKT_TRACK_EVENT = 11,
	PKT_INTERNED = 12, PKT_FLAGS = 13, PKT_CLOCK_ID = 58, PKT_DEFAULTS = 59,
	TE_CATEGORY_IIDS = 3, TE_ANNOTATIONS = 4, TE_TYPE = 9, TE_NAME_IID = 10,
	TE_TRACK_UUID = 11, TE_NAME = 23, TE_COUNTER = 30, TE_DOUBLE_COUNTER = 44,
	TE_FLOW_IDS = 47, TE_TERMINATING_FLOW_IDS = 48,
	DA_NAME_IID = 1, DA_BOOL = 2, DA_UINT = 3, DA_INT = 4, DA_DOUBLE = 5, DA_STRING = 6,
	DA_POINTER = 7, DA_NAME = 10, DA_STRING_IID = 17,
	IN_CATEGORIES = 1, IN_NAMES = 2, IN_ANNOTATION_NAMES = 3, IN_STRING_VALUES = 29,
};
enum { TYPE_SLICE_BEGIN = 1, TYPE_SLICE_END = 2, TYPE_INSTANT = 3, TYPE_COUNTER = 4 };
enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2 };

/* The interned tables: names, categories, annotation names, annotation string values. */
enum { IN_NAME, IN_CAT, IN_KEY, IN_STR, IN_KINDS };
static const uint32_t in_field[IN_KINDS] = { IN_NAMES, IN_CATEGORIES, IN_ANNOTATION_NAMES,
					      IN_STRING_VALUES };

/* String -> iid, open addressing; strings are copied (callers pass stack buffers). */
#define PCACHE 256
struct intern {
	/* callers mostly pass the same literals: by pointer first, content checked (the iid,
	 * not a slot of the table: slots move when it grows) */
	const char *pc_ptr[PCACHE];
	uint64_t pc_iid[PCACHE];
	char **keys;
	uint64_t *iids;
	uint32_t *hashes;
	char **by_iid;		/* iid -> its string */
	size_t cap, n, by_iid_cap;
};

/* One trusted packet sequence. */
struct seq {
	uint32_t id;
	uint64_t last_ts;		/* clock 64's value: the last delta-coded packet's time */
	uint64_t *defined[IN_KINDS];	/* bit per iid: defined on this sequence */
	size_t defined_words[IN_KINDS];
};

struct track {
	uint64_t uuid, parent;
	int pid, tid;
	char *name;
	char *label;
	int64_t sort;
	bool has_sort, is_thread, is_counter, gpu;
	bool emitted;
	struct seq *seq;	/* the sequence of its events (counters: their process's) */
	/* calls opened (call_open: BEGIN written) whose "X" has not come yet, oldest first;
	 * their args in open_args, each call's after the previous one's */
	struct open_call *opens;
	size_t nr_opens, opens_cap;
	struct arg *open_args;
	size_t nr_open_args, open_args_cap;
};

/* A_HEX: a handle seen once so far, written inline as its text (a string) */
enum arg_kind { A_UINT, A_INT, A_DOUBLE, A_BOOL, A_PTR, A_STR_IID, A_STR, A_HEX };

struct arg {
	enum arg_kind kind;
	bool owned;		/* s is a copy of the caller's string: freed after the event */
	uint64_t key_iid;	/* 0: key inline (not interned) */
	const char *key;
	union {
		uint64_t u;
		int64_t i;
		double d;
		const char *s;	/* A_STR */
	};
};

/* A call whose BEGIN is written: what its END is matched by, and the args the BEGIN carried
 * (the END leaves out those it would repeat). */
struct open_call {
	uint64_t ts;
	uint64_t name_iid;
	size_t nargs;
};

struct pf {
	struct trace_buf out;
	struct intern in[IN_KINDS];
	uint64_t next_uuid;
	uint32_t next_seq;
	struct u64map tracks;		/* key -> struct track * */
	uint64_t last_key;		/* the last track looked up (events come in runs) */
	struct track *last_track;
	struct track **counters;	/* counter tracks, by (pid, name, key), few */
	size_t nr_counters;
	/* the event being built */
	bool in_event;
	char ph;
	char scope;
	int pid, tid;
	uint64_t ts, dur;
	const char *name, *cat;
	uint64_t flow_id;
	bool has_flow;
	struct arg args[MAX_ARGS];
	size_t nargs;
	/* encoding scratch: the TrackEvent and the InternedData of one packet */
	uint8_t *te, *interned;
	size_t te_cap, interned_cap, interned_len;
	uint8_t *pb_scratch;		/* protobuf-c's packets */
	struct { uint32_t x, y, z; uint64_t iid; } dim3_memo[64];	/* grids repeat */
	struct { uint64_t v, iid; } hex_memo[256];	/* handles repeat: value -> text's iid */
	uint64_t hex_seen[4096];	/* value + 1 of handles seen once (pf_arg_hex) */
	size_t pb_scratch_cap;
};

bool trace_pf__path(const char *path)
{
	size_t n = strlen(path);

	return (n > 8 && !strcmp(path + n - 8, ".pftrace")) ||
	       (n > 11 && !strcmp(path + n - 11, ".pftrace.gz"));
}

/* ---- wire format ---- */

static inline uint8_t *put_varint(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

static inline uint8_t *put_tag(uint8_t *p, uint32_t field, int wire_type)
{
	return put_varint(p, (uint64_t)field << 3 | wire_type);
}

static inline uint8_t *put_field_varint(uint8_t *p, uint32_t field, uint64_t v)
{
	return put_varint(put_tag(p, field, WT_VARINT), v);
}

static inline uint8_t *put_field_fixed64(uint8_t *p, uint32_t field, uint64_t v)
{
	p = put_tag(p, field, WT_I64);
	memcpy(p, &v, 8);	/* little-endian hosts (x86-64, arm64) */
	return p + 8;
}

static inline uint8_t *put_field_bytes(uint8_t *p, uint32_t field, const void *b, size_t n)
{
	p = put_varint(put_tag(p, field, WT_LEN), n);
	memcpy(p, b, n);
	return p + n;
}

static size_t varint_len(uint64_t v)
{
	size_t n = 1;

	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

/* room for n more bytes in a scratch buffer; false on ENOMEM */
static bool reserve(uint8_t **buf, size_t *cap, size_t n)
{
	if (n > *cap) {
		size_t c = n < 4096 ? 4096 : n * 2;
		uint8_t *p = realloc(*buf, c);

		if (!p)
			return false;
		*buf = p;
		*cap = c;
	}
	return true;
}

/* ---- interning ---- */

static uint32_t str_hash(const char *s)
{
	uint32_t h = 2166136261u;	/* FNV-1a */

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h ? h : 1;
}

static int intern_grow(struct intern *t)
{
	size_t cap = t->cap ? t->cap * 2 : 256;
	char **keys = calloc(cap, sizeof(*keys));
	uint64_t *iids = calloc(cap, sizeof(*iids));
	uint32_t *hashes = calloc(cap, sizeof(*hashes));
	char **by_iid = realloc(t->by_iid, (cap / 2 + 1) * sizeof(*by_iid));

	if (by_iid)
		t->by_iid = by_iid;
	if (!keys || !iids || !hashes || !by_iid) {
		free(keys);
		free(iids);
		free(hashes);
		return -ENOMEM;
	}
	for (size_t i = 0; i < t->cap; i++) {
		size_t j;

		if (!t->keys[i])
			continue;
		for (j = t->hashes[i] & (cap - 1); keys[j]; j = (j + 1) & (cap - 1))
			;
		keys[j] = t->keys[i];
		iids[j] = t->iids[i];
		hashes[j] = t->hashes[i];
	}
	free(t->keys);
	free(t->iids);
	free(t->hashes);
	t->keys = keys;
	t->iids = iids;
	t->hashes = hashes;
	t->cap = cap;
	return 0;
}

/* The program's read-only image, from its start to its writable data (the linker's
 * symbols): string literals live there and never change, so a pointer seen before names the
 * same string. Anything else (stack buffers, heap) is compared. */
extern const char __executable_start[], __data_start[];

static inline bool immutable(const char *s)
{
	return s >= __executable_start && s < __data_start;
}

static inline size_t pc_slot(const char *s)
{
	/* literals sit a few bytes apart: every bit of the address counts */
	return (size_t)(((uintptr_t)s * 0x9e3779b97f4a7c15ULL) >> 56) & (PCACHE - 1);
}

/* The pointer cache is two-way (slots pc and pc ^ 1): the newest in pc, the one it replaces
 * moved to pc ^ 1, so two strings used in turn both stay. */
static void pc_set(struct intern *t, size_t pc, const char *s, uint64_t iid)
{
	if (t->pc_ptr[pc] != s) {
		t->pc_ptr[pc ^ 1] = t->pc_ptr[pc];
		t->pc_iid[pc ^ 1] = t->pc_iid[pc];
	}
	t->pc_ptr[pc] = s;
	t->pc_iid[pc] = iid;
}

/* intern() past its pointer cache; !insert: 0 for a string not in the table */
static uint64_t intern_slow(struct intern *t, const char *s, size_t pc, bool insert)
{
	uint32_t h;
	size_t i;

	/* the same buffer, still the same string */
	if (t->pc_ptr[pc] == s && !strcmp(t->by_iid[t->pc_iid[pc]], s))
		return t->pc_iid[pc];
	if (t->pc_ptr[pc ^ 1] == s && !strcmp(t->by_iid[t->pc_iid[pc ^ 1]], s))
		return t->pc_iid[pc ^ 1];
	h = str_hash(s);
	if (t->cap) {
		for (i = h & (t->cap - 1); t->keys[i]; i = (i + 1) & (t->cap - 1))
			if (t->hashes[i] == h && !strcmp(t->keys[i], s)) {
				pc_set(t, pc, s, t->iids[i]);
				return t->iids[i];
			}
	}
	if (!insert || ((t->n + 1) * 2 > t->cap && intern_grow(t)))
		return 0;
	for (i = h & (t->cap - 1); t->keys[i]; i = (i + 1) & (t->cap - 1))
		;
	t->keys[i] = strdup(s);
	if (!t->keys[i])
		return 0;
	t->hashes[i] = h;
	t->iids[i] = ++t->n;
	t->by_iid[t->n] = t->keys[i];
	pc_set(t, pc, s, t->n);
	return t->n;
}

/* iid of s (from 1); 0 on ENOMEM. A literal seen before: one compare. */
static inline uint64_t intern(struct intern *t, const char *s)
{
	size_t pc = pc_slot(s);

	if (t->pc_ptr[pc] == s && immutable(s))
		return t->pc_iid[pc];
	if (t->pc_ptr[pc ^ 1] == s && immutable(s))
		return t->pc_iid[pc ^ 1];
	return intern_slow(t, s, pc, true);
}

/* iid of s when it is in the table already, else 0 */
static uint64_t intern_find(struct intern *t, const char *s)
{
	size_t pc = pc_slot(s);

	if (t->pc_ptr[pc] == s && immutable(s))
		return t->pc_iid[pc];
	return intern_slow(t, s, pc, false);
}

static void intern_free(struct intern *t)
{
	for (size_t i = 0; i < t->cap; i++)
		free(t->keys[i]);
	free(t->keys);
	free(t->iids);
	free(t->hashes);
	free(t->by_iid);
}

/* use_iid() for an iid not defined on s yet */
static bool define_iid(struct pf *pf, struct seq *s, int kind, uint64_t iid)
{
	size_t word = iid / 64;
	uint64_t bit = 1ULL << (iid % 64);
	const char *str;
	size_t len, entry;
	uint8_t *p;

	if (word >= s->defined_words[kind]) {
		size_t n = (word + 1) * 2;
		uint64_t *d = realloc(s->defined[kind], n * sizeof(*d));

		if (!d)
			return false;
		memset(d + s->defined_words[kind], 0, (n - s->defined_words[kind]) * sizeof(*d));
		s->defined[kind] = d;
		s->defined_words[kind] = n;
	}
	str = pf->in[kind].by_iid[iid];
	len = strlen(str);
	entry = 1 + varint_len(iid) + 1 + varint_len(len) + len;
	if (!reserve(&pf->interned, &pf->interned_cap, pf->interned_len + entry + 16))
		return false;
	/* {iid = 1, name (str for string values) = 2} */
	p = pf->interned + pf->interned_len;
	p = put_varint(put_tag(p, in_field[kind], WT_LEN), entry);
	p = put_field_varint(p, 1, iid);
	p = put_field_bytes(p, 2, str, len);
	pf->interned_len = p - pf->interned;
	s->defined[kind][word] |= bit;
	return true;
}

/* Makes iid (of table kind) usable on seq: the first use there defines it in the packet's
 * InternedData. false on ENOMEM (the caller then writes the string inline). */
static inline bool use_iid(struct pf *pf, struct seq *s, int kind, uint64_t iid)
{
	size_t word = iid / 64;

	if (word < s->defined_words[kind] && (s->defined[kind][word] >> (iid % 64) & 1))
		return true;
	return define_iid(pf, s, kind, iid);
}

/* ---- packets ---- */

/* A packet made by protobuf-c, on sequence 1 (descriptors, the trace's clocks). */
static void write_pb_packet(struct pf *pf, Perfetto__Protos__TracePacket *pkt)
{
	Perfetto__Protos__Trace trace = PERFETTO__PROTOS__TRACE__INIT;
	size_t len;

	pkt->has_trusted_packet_sequence_id = true;
	pkt->trusted_packet_sequence_id = GLOBAL_SEQ;
	trace.n_packet = 1;
	trace.packet = &pkt;
	len = perfetto__protos__trace__get_packed_size(&trace);
	if (!reserve(&pf->pb_scratch, &pf->pb_scratch_cap, len)) {
		trace_sink__set_error(pf->out.sink, -ENOMEM);
		return;
	}
	perfetto__protos__trace__pack(&trace, pf->pb_scratch);
	trace_buf__put(&pf->out, pf->pb_scratch, len);
}

/* One TracePacket of the sequence around the TrackEvent in pf->te (te_len bytes) and the
 * InternedData gathered for it; ts: CLOCK_MONOTONIC. */
static void write_event_packet(struct pf *pf, struct seq *s, uint64_t ts, size_t te_len)
{
	uint8_t hdr[48], *h = hdr, *p;
	size_t len, total;

	if (ts >= s->last_ts) {
		h = put_field_varint(h, PKT_TIMESTAMP, ts - s->last_ts);
		s->last_ts = ts;
	} else {
		/* earlier than the sequence's clock: absolute, on the clock itself */
		h = put_field_varint(h, PKT_TIMESTAMP, ts);
		h = put_field_varint(h, PKT_CLOCK_ID, CLOCK_MONO);
	}
	h = put_field_varint(h, PKT_SEQ_ID, s->id);
	h = put_field_varint(h, PKT_FLAGS, SEQ_NEEDS);
	len = (h - hdr) + 1 + varint_len(te_len) + te_len;
	if (pf->interned_len)
		len += 1 + varint_len(pf->interned_len) + pf->interned_len;
	total = 1 + varint_len(len) + len;
	if (total > TRACE_SINK_CHUNK / 2) {
		trace_sink__set_error(pf->out.sink, -E2BIG);	/* cannot happen: args bounded */
		pf->interned_len = 0;
		return;
	}
	p = (uint8_t *)trace_buf__room(&pf->out, total);
	p = put_varint(put_tag(p, 1, WT_LEN), len);	/* Trace.packet */
	memcpy(p, hdr, h - hdr);
	p += h - hdr;
	if (pf->interned_len) {
		p = put_field_bytes(p, PKT_INTERNED, pf->interned, pf->interned_len);
		pf->interned_len = 0;
	}
	p = put_field_bytes(p, PKT_TRACK_EVENT, pf->te, te_len);
	pf->out.len += total;
}

/* The sequence's first packet: incremental state cleared, its defaults and its clock. */
static void start_seq(struct pf *pf, struct seq *s, uint64_t default_track, uint64_t ts)
{
	uint8_t body[128], defs[32], ted[16], snap[64], clk[32], *p, *d, *t, *c, *k;

	t = put_field_varint(ted, 11, default_track);		/* TrackEventDefaults.track_uuid */
	d = put_field_varint(defs, 58, CLOCK_SEQ);		/* TracePacketDefaults.clock id */
	d = put_field_bytes(d, 11, ted, t - ted);		/* .track_event_defaults */
	k = put_field_varint(clk, 1, CLOCK_SEQ);		/* Clock{clock_id, timestamp, */
	k = put_field_varint(k, 2, ts);				/*   is_incremental} */
	k = put_field_varint(k, 3, 1);
	c = put_field_bytes(snap, 1, clk, k - clk);		/* ClockSnapshot.clocks */
	k = put_field_varint(clk, 1, CLOCK_MONO);
	k = put_field_varint(k, 2, ts);
	c = put_field_bytes(c, 1, clk, k - clk);
	p = put_field_varint(body, PKT_TIMESTAMP, ts);
	p = put_field_varint(p, PKT_CLOCK_ID, CLOCK_MONO);
	p = put_field_varint(p, PKT_SEQ_ID, s->id);
	p = put_field_varint(p, PKT_FLAGS, SEQ_CLEARED | SEQ_NEEDS);
	p = put_field_bytes(p, PKT_DEFAULTS, defs, d - defs);
	p = put_field_bytes(p, PKT_CLOCK_SNAPSHOT, snap, c - snap);
	p = put_field_varint(p, 87, 1);				/* first_packet_on_sequence */
	{
		uint8_t head[8], *e = put_varint(put_tag(head, 1, WT_LEN), p - body);

		trace_buf__put(&pf->out, head, e - head);
		trace_buf__put(&pf->out, body, p - body);
	}
	s->last_ts = ts;
}

/* ---- tracks ---- */

static uint64_t track_key(int pid, int tid, bool thread)
{
	if (thread)
		return 1ULL << 63 | (uint64_t)(pid & 0x7fffffff) << 32 | (uint32_t)tid;
	return 1ULL << 62 | (uint32_t)pid;
}

static struct track *get_track(struct pf *pf, int pid, int tid, bool thread)
{
	uint64_t key = track_key(pid, tid, thread);
	bool created;
	struct track *t;

	if (pf->last_track && pf->last_key == key)
		return pf->last_track;
	t = u64map__get_or_alloc(&pf->tracks, key, sizeof(*t), &created);
	if (t && !created) {
		pf->last_key = key;
		pf->last_track = t;
	}
	if (t && created) {
		/* uuids numbered from 1: short varints in every event */
		t->uuid = ++pf->next_uuid;
		t->pid = pid;
		t->tid = tid;
		t->is_thread = thread;
		if (thread) {
			struct track *proc = get_track(pf, pid, 0, false);

			t->parent = proc ? proc->uuid : 0;
		}
	}
	return t;
}

static void emit_track(struct pf *pf, struct track *t)
{
	Perfetto__Protos__TracePacket p;
	Perfetto__Protos__TrackDescriptor td = PERFETTO__PROTOS__TRACK_DESCRIPTOR__INIT;
	Perfetto__Protos__ProcessDescriptor pd = PERFETTO__PROTOS__PROCESS_DESCRIPTOR__INIT;
	Perfetto__Protos__ThreadDescriptor thd = PERFETTO__PROTOS__THREAD_DESCRIPTOR__INIT;
	Perfetto__Protos__CounterDescriptor cd = PERFETTO__PROTOS__COUNTER_DESCRIPTOR__INIT;
	struct track *proc = NULL;

	if (t->parent) {
		proc = get_track(pf, t->pid, 0, false);
		if (proc && !proc->emitted)
			emit_track(pf, proc);
	}
	td.has_uuid = true;
	td.uuid = t->uuid;
	if (t->is_counter) {
		td.has_parent_uuid = true;
		td.parent_uuid = t->parent;
		td.name = t->name;
		td.counter = &cd;
		if (t->label) {		/* the counter's arg key */
			cd.has_unit = !strcmp(t->label, "bytes");
			cd.unit = PERFETTO__PROTOS__COUNTER_DESCRIPTOR__UNIT__UNIT_SIZE_BYTES;
		}
	} else if (t->gpu || (proc && proc->gpu)) {
		/* a GPU: no such pid on the host, so a plain named track (streams its children) */
		td.name = t->name;
		if (t->is_thread) {
			td.has_parent_uuid = true;
			td.parent_uuid = t->parent;
		} else {
			td.has_child_ordering = true;
			td.child_ordering = PERFETTO__PROTOS__TRACK_DESCRIPTOR__CHILD_TRACKS_ORDERING__EXPLICIT;
		}
	} else if (t->is_thread) {
		thd.has_pid = thd.has_tid = true;
		thd.pid = t->pid;
		thd.tid = t->tid;
		thd.thread_name = t->name;
		td.thread = &thd;
	} else {
		pd.has_pid = true;
		pd.pid = t->pid;
		pd.process_name = t->name;
		if (t->label) {
			pd.n_process_labels = 1;
			pd.process_labels = &t->label;
		}
		td.process = &pd;
	}
	if (t->has_sort) {
		td.has_sibling_order_rank = true;
		td.sibling_order_rank = (int32_t)t->sort;
	}
	perfetto__protos__trace_packet__init(&p);
	p.track_descriptor = &td;
	write_pb_packet(pf, &p);
	t->emitted = true;
}

/* The sequence of t's events, started (its descriptor written first) at ts. */
static struct seq *track_seq(struct pf *pf, struct track *t, uint64_t ts)
{
	struct track *owner = t;

	if (!t->emitted)
		emit_track(pf, t);
	if (t->is_counter) {
		owner = get_track(pf, t->pid, 0, false);
		if (!owner)
			return NULL;
		if (!owner->emitted)
			emit_track(pf, owner);
	}
	if (!owner->seq) {
		owner->seq = calloc(1, sizeof(*owner->seq));
		if (!owner->seq)
			return NULL;
		owner->seq->id = ++pf->next_seq;
		start_seq(pf, owner->seq, owner->uuid, ts);
	}
	return owner->seq;
}

static void free_track(struct track *t)
{
	for (size_t i = 0; i < t->nr_open_args; i++)
		if (t->open_args[i].owned)
			free((char *)t->open_args[i].s);
	free(t->open_args);
	free(t->opens);
	free(t->name);
	free(t->label);
	if (t->seq)
		for (int k = 0; k < IN_KINDS; k++)
			free(t->seq->defined[k]);
	free(t->seq);
	free(t);
}

/* ---- events ---- */

/* The value of an annotation (not a string) after its name. */
static inline uint8_t *put_arg_value(uint8_t *p, const struct arg *a)
{
	switch (a->kind) {
	case A_UINT: return put_field_varint(p, DA_UINT, a->u);
	case A_INT: return put_field_varint(p, DA_INT, (uint64_t)a->i);
	case A_BOOL: return put_field_varint(p, DA_BOOL, a->u);
	case A_PTR: return put_field_varint(p, DA_POINTER, a->u);
	case A_STR_IID: return put_field_varint(p, DA_STRING_IID, a->u);
	case A_DOUBLE: {
		uint64_t bits;

		memcpy(&bits, &a->d, 8);
		return put_field_fixed64(p, DA_DOUBLE, bits);
	}
	case A_STR:
	case A_HEX:
		break;	/* put_arg_long */
	}
	return p;
}

/* "0x..." of v into buf (20 bytes at least): its length */
static size_t hex_text(char *buf, uint64_t v)
{
	static const char digits[] = "0123456789abcdef";
	char tmp[16];
	size_t n = 0, len = 0;

	do {
		tmp[n++] = digits[v & 15];
		v >>= 4;
	} while (v);
	buf[len++] = '0';
	buf[len++] = 'x';
	while (n)
		buf[len++] = tmp[--n];
	buf[len] = '\0';
	return len;
}

/* One annotation, the general way: its length computed first (a string value, a handle's
 * text, a key not interned). The caller made room for it: 32 bytes and the strings. */
static uint8_t *put_arg_long(uint8_t *p, const struct arg *a)
{
	char hex[24];
	const char *str = a->kind == A_STR ? a->s : hex;
	size_t klen = a->key_iid ? 0 : strlen(a->key);
	size_t slen = a->kind == A_STR ? strlen(a->s) : a->kind == A_HEX ? hex_text(hex, a->u) : 0;
	size_t inner = a->key_iid ? 1 + varint_len(a->key_iid) : 1 + varint_len(klen) + klen;
	uint8_t val[24];

	if (a->kind == A_STR || a->kind == A_HEX)
		inner += 1 + varint_len(slen) + slen;
	else
		inner += put_arg_value(val, a) - val;
	p = put_varint(put_tag(p, TE_ANNOTATIONS, WT_LEN), inner);
	if (a->key_iid)
		p = put_field_varint(p, DA_NAME_IID, a->key_iid);
	else
		p = put_field_bytes(p, DA_NAME, a->key, klen);
	if (a->kind == A_STR || a->kind == A_HEX)
		return put_field_bytes(p, DA_STRING, str, slen);
	return put_arg_value(p, a);
}

/* Room for n more bytes at pos of pf->te and the event's last fields: false on ENOMEM. Out of
 * line: only strings and keys written inline need it. */
static __attribute__((noinline)) bool te_room(struct pf *pf, size_t pos, size_t n)
{
	return reserve(&pf->te, &pf->te_cap, pos + n + 64);
}

/* The TrackEvent of the event being built, into pf->te: its length, 0 on ENOMEM. The args'
 * iids are made usable on s as they are written (defined there on first use); where that
 * fails (ENOMEM), the key or the string is written inline instead. */
static size_t encode_event(struct pf *pf, struct seq *s, int type, uint64_t track_uuid,
			   bool with_args, bool with_name)
{
	/* 32 bytes hold any annotation but a string or a key written inline (put_arg_room);
	 * 64 the event's other fields */
	uint64_t name_iid = 0, cat_iid = 0;
	const char *name = pf->name ? pf->name : "";
	uint8_t *p;

	if (!reserve(&pf->te, &pf->te_cap, 64 + (with_args ? pf->nargs * 32 : 0)))
		return 0;
	p = pf->te;
	if (with_name && pf->cat) {
		cat_iid = intern(&pf->in[IN_CAT], pf->cat);
		if (cat_iid && use_iid(pf, s, IN_CAT, cat_iid))
			p = put_field_varint(p, TE_CATEGORY_IIDS, cat_iid);
	}
	for (size_t i = 0; with_args && i < pf->nargs; i++) {
		struct arg *a = &pf->args[i];
		uint8_t *len;

		if (a->key_iid && !use_iid(pf, s, IN_KEY, a->key_iid))
			a->key_iid = 0;
		if (a->kind == A_STR_IID && !use_iid(pf, s, IN_STR, a->u)) {
			a->kind = A_STR;
			a->s = pf->in[IN_STR].by_iid[a->u];
		}
		if (a->kind == A_STR || a->kind == A_HEX || !a->key_iid) {
			size_t pos = (size_t)(p - pf->te);

			if (!te_room(pf, pos, 32 + (a->key_iid ? 0 : strlen(a->key)) +
					      (a->kind == A_STR ? strlen(a->s) : 0)))
				return 0;
			p = put_arg_long(pf->te + pos, a);
			continue;
		}
		/* name_iid and a number: under 128 bytes, a one-byte length set after */
		*p++ = TE_ANNOTATIONS << 3 | WT_LEN;
		len = p++;
		p = put_arg_value(put_field_varint(p, DA_NAME_IID, a->key_iid), a);
		*len = (uint8_t)(p - len - 1);
	}
	p = put_field_varint(p, TE_TYPE, type);
	if (track_uuid)
		p = put_field_varint(p, TE_TRACK_UUID, track_uuid);
	if (with_name) {
		name_iid = intern(&pf->in[IN_NAME], name);
		if (name_iid && use_iid(pf, s, IN_NAME, name_iid)) {
			p = put_field_varint(p, TE_NAME_IID, name_iid);
		} else {
			size_t pos = (size_t)(p - pf->te);

			if (!te_room(pf, pos, 16 + strlen(name)))
				return 0;
			p = put_field_bytes(pf->te + pos, TE_NAME, name, strlen(name));
		}
	}
	if (pf->has_flow && (pf->ph == 's' || pf->ph == 'f'))
		p = put_field_fixed64(p, pf->ph == 's' ? TE_FLOW_IDS : TE_TERMINATING_FLOW_IDS,
				      pf->flow_id);
	return p - pf->te;
}

static void free_args(struct pf *pf)
{
	for (size_t i = 0; i < pf->nargs; i++)
		if (pf->args[i].owned)
			free((char *)pf->args[i].s);
	pf->nargs = 0;
}

/* ---- calls opened at entry (BEGIN at entry, END at return) ---- */

/* Whether b repeats a (same interned key, same value): the END leaves it out. */
static bool arg_same(const struct pf *pf, const struct arg *a, const struct arg *b)
{
	if (!a->key_iid || a->key_iid != b->key_iid)
		return false;
	if (a->kind != b->kind) {
		/* a handle inline the first time (A_HEX), interned after: the same text */
		const struct arg *h = a->kind == A_HEX ? a : b, *o = a->kind == A_HEX ? b : a;
		char text[24];

		if (h->kind != A_HEX || o->kind != A_STR_IID)
			return false;
		hex_text(text, h->u);
		return !strcmp(pf->in[IN_STR].by_iid[o->u], text);
	}
	if (a->kind == A_STR)
		return !strcmp(a->s, b->s);
	if (a->kind == A_DOUBLE)
		return !memcmp(&a->d, &b->d, sizeof(a->d));
	return a->u == b->u;
}

/* The call whose BEGIN was just written on t: remembered with the args it carried. Without
 * memory for it (ENOMEM, a sticky error) its "X" is written as a slice of its own. */
static void push_open(struct pf *pf, struct track *t, uint64_t name_iid)
{
	struct open_call *o;

	if (ARRAY_RESERVE(t->opens, t->opens_cap, t->nr_opens + 1, 8) ||
	    ARRAY_RESERVE(t->open_args, t->open_args_cap, t->nr_open_args + pf->nargs, 32)) {
		trace_sink__set_error(pf->out.sink, -ENOMEM);
		return;
	}
	o = &t->opens[t->nr_opens++];
	o->ts = pf->ts;
	o->name_iid = name_iid;
	o->nargs = pf->nargs;
	for (size_t i = 0; i < pf->nargs; i++) {
		struct arg *a = &t->open_args[t->nr_open_args++];

		*a = pf->args[i];
		a->key = NULL;	/* the caller's, gone after event_end: matched by iid */
		a->owned = false;
		if (a->kind == A_STR) {
			a->s = strdup(pf->args[i].s);
			a->owned = a->s != NULL;
			if (!a->s) {
				a->s = "";
				a->key_iid = 0;	/* never matches: the END repeats it */
			}
		}
	}
}

/* The open call an "X" (ts, name) completes, or -1; searched from the newest (calls nest). */
static ssize_t find_open(const struct track *t, uint64_t ts, uint64_t name_iid)
{
	for (size_t i = t->nr_opens; i-- > 0;)
		if (t->opens[i].ts == ts && t->opens[i].name_iid == name_iid)
			return (ssize_t)i;
	return -1;
}

/* Closes open call k of t: the event's args that its BEGIN carried with the same value are
 * dropped (the END adds the others: the trace processor merges them into the slice, a key
 * on both taking the END's value). */
static void take_open(struct pf *pf, struct track *t, size_t k)
{
	size_t off = 0, n, kept = 0;
	struct arg *oa;

	for (size_t i = 0; i < k; i++)
		off += t->opens[i].nargs;
	n = t->opens[k].nargs;
	oa = t->open_args + off;
	for (size_t i = 0; i < pf->nargs; i++) {
		struct arg *a = &pf->args[i];
		/* usually in the same order: the same index first */
		bool same = i < n && arg_same(pf, &oa[i], a);

		for (size_t j = 0; !same && j < n; j++)
			same = arg_same(pf, &oa[j], a);
		if (!same)
			pf->args[kept++] = *a;
		else if (a->owned)
			free((char *)a->s);
	}
	pf->nargs = kept;
	for (size_t j = 0; j < n; j++)
		if (oa[j].owned)
			free((char *)oa[j].s);
	memmove(oa, oa + n, (t->nr_open_args - off - n) * sizeof(*oa));
	t->nr_open_args -= n;
	memmove(&t->opens[k], &t->opens[k + 1], (t->nr_opens - k - 1) * sizeof(*t->opens));
	t->nr_opens--;
}

static void pf_event(void *ctx, const char *ph, const char *cat, const char *name, int pid,
		     int tid, uint64_t ts_mono_ns, uint64_t dur_ns)
{
	struct pf *pf = ctx;

	free_args(pf);
	pf->in_event = true;
	pf->ph = ph[0];
	pf->scope = 't';
	pf->pid = pid;
	pf->tid = tid;
	pf->ts = ts_mono_ns;
	pf->dur = dur_ns;
	pf->has_flow = false;
	pf->name = name;
	pf->cat = cat;
}

static struct arg *new_arg(struct pf *pf, const char *key, enum arg_kind kind)
{
	struct arg *a;

	if (!pf->in_event || pf->nargs >= MAX_ARGS)
		return NULL;
	a = &pf->args[pf->nargs++];
	a->kind = kind;
	a->key = key;	/* callers' keys live until event_end */
	a->key_iid = intern(&pf->in[IN_KEY], key);
	a->owned = false;
	a->u = 0;
	return a;
}

static void pf_arg_u64(void *ctx, const char *key, uint64_t v)
{
	struct arg *a = new_arg(ctx, key, A_UINT);

	if (a)
		a->u = v;
}

static void pf_arg_i64(void *ctx, const char *key, int64_t v)
{
	struct arg *a = new_arg(ctx, key, A_INT);

	if (a)
		a->i = v;
}

static void pf_arg_f64(void *ctx, const char *key, double v)
{
	struct arg *a = new_arg(ctx, key, A_DOUBLE);

	if (a)
		a->d = v;
}

static void pf_arg_bool(void *ctx, const char *key, bool v)
{
	struct arg *a = new_arg(ctx, key, A_BOOL);

	if (a)
		a->u = v;
}

static void pf_arg_str(void *ctx, const char *key, const char *v)
{
	struct pf *pf = ctx;
	struct arg *a = new_arg(pf, key, A_STR_IID);

	if (!a)
		return;
	if (!v)
		v = "";
	/* Values repeat (kernel names, sources): interned while the table is not huge, so
	 * a trace of unique strings does not keep them all in memory; once it is, the values
	 * it holds keep their iids, only new ones are written inline. */
	a->u = pf->in[IN_STR].n < MAX_INTERNED_STRS ? intern(&pf->in[IN_STR], v) :
						       intern_find(&pf->in[IN_STR], v);
	if (a->u)
		return;
	/* copied: callers may pass a buffer they reuse before event_end */
	a->kind = A_STR;
	a->s = strdup(v);
	a->owned = a->s != NULL;
	if (!a->s)
		a->s = "";
}

/* As the JSON's text ("0x5100"), a string. Handles (streams, events, functions,
 * communicators) repeat: from its second use a value is interned (3 bytes a use where a
 * pointer_value takes up to 10); the first time it is written inline, so addresses seen once
 * (copies' buffers) neither fill the table nor pay for a definition. */
static void pf_arg_hex(void *ctx, const char *key, uint64_t v)
{
	struct pf *pf = ctx;
	uint64_t mix = v * 0x9e3779b97f4a7c15ULL;
	unsigned slot = (unsigned)(mix >> 56);				/* of 256 */
	unsigned seen = (unsigned)(mix >> 52);				/* of 4096 */
	size_t n = pf->nargs;
	struct arg *a;
	char buf[24];

	if (pf->hex_memo[slot].iid && pf->hex_memo[slot].v == v) {
		a = new_arg(pf, key, A_STR_IID);
		if (a)
			a->u = pf->hex_memo[slot].iid;
	} else if (pf->hex_seen[seen] != v + 1) {
		pf->hex_seen[seen] = v + 1;
		a = new_arg(pf, key, A_HEX);
		if (a)
			a->u = v;
	} else {
		hex_text(buf, v);
		pf_arg_str(ctx, key, buf);
		if (pf->nargs > n && pf->args[n].kind == A_STR_IID) {
			pf->hex_memo[slot].v = v;
			pf->hex_memo[slot].iid = pf->args[n].u;
		}
	}
}

/* Perfetto's annotations have no JSON value of their own: the text */
static void pf_arg_raw(void *ctx, const char *key, const char *json)
{
	pf_arg_str(ctx, key, json);
}

/* As the JSON's text ("[64, 2, 1]"), interned: grids repeat. */
static char *put_u32(char *p, uint32_t v)
{
	char tmp[10];
	int n = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		*p++ = tmp[--n];
	return p;
}

static void pf_arg_dim3(void *ctx, const char *key, uint32_t x, uint32_t y, uint32_t z)
{
	struct pf *pf = ctx;
	char buf[48], *p = buf;	/* "[x, y, z]" without printf: a launch has two */
	unsigned slot = (unsigned)(((x * 0x9e3779b97f4a7c15ULL) ^ (y * 0xff51afd7ed558ccdULL) ^
				    (z * 0xc4ceb9fe1a85ec53ULL)) >> 58);	/* of 64 */
	struct arg *a;

	if (pf->dim3_memo[slot].iid && pf->dim3_memo[slot].x == x && pf->dim3_memo[slot].y == y &&
	    pf->dim3_memo[slot].z == z) {
		a = new_arg(pf, key, A_STR_IID);
		if (a)
			a->u = pf->dim3_memo[slot].iid;
		return;
	}

	*p++ = '[';
	p = put_u32(p, x);
	*p++ = ',';
	*p++ = ' ';
	p = put_u32(p, y);
	*p++ = ',';
	*p++ = ' ';
	p = put_u32(p, z);
	*p++ = ']';
	*p = '\0';
	pf_arg_str(ctx, key, buf);
	a = pf->nargs ? &pf->args[pf->nargs - 1] : NULL;
	if (a && a->kind == A_STR_IID && a->key == key)
		pf->dim3_memo[slot] = (typeof(pf->dim3_memo[0])){ x, y, z, a->u };
}

/* The Chrome-JSON extras the writers use: a flow's "id", an instant's scope "s". */
static void pf_field_raw(void *ctx, const char *key, const char *json)
{
	struct pf *pf = ctx;

	if (!strcmp(key, "id")) {
		pf->flow_id = strtoull(json + (json[0] == '"'), NULL, 0);
		pf->has_flow = true;
	} else if (!strcmp(key, "s") && json[0] == '"') {
		pf->scope = json[1];
	}
}

static struct track *counter_track(struct pf *pf, const char *key)
{
	struct track *t, **grown;
	struct track *proc;

	for (size_t i = 0; i < pf->nr_counters; i++) {
		t = pf->counters[i];
		if (t->pid == pf->pid && !strcmp(t->name, pf->name ? pf->name : "") &&
		    !strcmp(t->label, key))
			return t;
	}
	grown = realloc(pf->counters, (pf->nr_counters + 1) * sizeof(*grown));
	if (!grown)
		return NULL;
	pf->counters = grown;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->name = strdup(pf->name ? pf->name : "");
	t->label = strdup(key);
	if (!t->name || !t->label) {
		free_track(t);
		return NULL;
	}
	t->pid = pf->pid;
	t->is_counter = true;
	proc = get_track(pf, pf->pid, 0, false);
	t->parent = proc ? proc->uuid : 0;
	t->uuid = ++pf->next_uuid;
	pf->counters[pf->nr_counters++] = t;
	return t;
}

static void counter_events(struct pf *pf)
{
	size_t nargs = pf->nargs;

	for (size_t i = 0; i < nargs; i++) {
		struct arg *a = &pf->args[i];
		struct track *t = counter_track(pf, a->key);
		struct seq *s;
		uint8_t *p;

		if (!t || !(s = track_seq(pf, t, pf->ts)))
			continue;
		if (a->kind != A_DOUBLE && a->kind != A_INT && a->kind != A_UINT)
			continue;	/* not a number: not a counter value */
		if (!reserve(&pf->te, &pf->te_cap, 64))
			continue;
		p = put_field_varint(pf->te, TE_TYPE, TYPE_COUNTER);
		p = put_field_varint(p, TE_TRACK_UUID, t->uuid);
		if (a->kind == A_DOUBLE) {
			uint64_t bits;

			memcpy(&bits, &a->d, 8);
			p = put_field_fixed64(p, TE_DOUBLE_COUNTER, bits);
		} else {
			p = put_field_varint(p, TE_COUNTER, a->u);
		}
		write_event_packet(pf, s, pf->ts, p - pf->te);
	}
}

static void pf_event_end(void *ctx)
{
	struct pf *pf = ctx;
	struct track *t;
	struct seq *s;
	size_t len;
	int type;

	if (!pf->in_event)
		return;
	pf->in_event = false;
	if (pf->ph == 'M')
		goto out;	/* metadata comes through pf_meta */
	if (pf->ph == 'C') {
		counter_events(pf);
		goto out;
	}
	t = get_track(pf, pf->pid, pf->tid, pf->scope == 't');
	if (!t || !(s = track_seq(pf, t, pf->ts)))
		goto out;
	if (pf->ph == 'X' && t->nr_opens) {
		/* a call opened at its entry: its END, with what the BEGIN did not say */
		uint64_t name_iid = intern(&pf->in[IN_NAME], pf->name ? pf->name : "");
		ssize_t k = find_open(t, pf->ts, name_iid);

		if (k >= 0) {
			take_open(pf, t, (size_t)k);
			pf->ph = 'E';
		}
	}
	if (pf->ph == 'E') {
		/* the end of a slice pf_slice_begin or pf_call_open opened: args on the END */
		len = encode_event(pf, s, TYPE_SLICE_END, 0, true, false);
		if (len)
			write_event_packet(pf, s, pf->ts + pf->dur, len);
		else
			trace_sink__set_error(pf->out.sink, -ENOMEM);
		goto out;
	}
	/* a slice of no duration is an INSTANT: the trace processor makes both the same slice
	 * (dur 0, nested under the slice around it), in one packet instead of two */
	type = pf->ph == 'B' || (pf->ph == 'X' && pf->dur) ? TYPE_SLICE_BEGIN : TYPE_INSTANT;
	len = encode_event(pf, s, type, 0, true, true);
	if (!len) {
		trace_sink__set_error(pf->out.sink, -ENOMEM);
		goto out;
	}
	write_event_packet(pf, s, pf->ts, len);
	if (pf->ph == 'B') {
		push_open(pf, t, intern(&pf->in[IN_NAME], pf->name ? pf->name : ""));
		goto out;
	}
	if (type == TYPE_SLICE_BEGIN) {
		uint8_t *p = put_field_varint(pf->te, TE_TYPE, TYPE_SLICE_END);

		write_event_packet(pf, s, pf->ts + pf->dur, p - pf->te);
	}
out:
	free_args(pf);
}

static void pf_slice_begin(void *ctx, const char *cat, const char *name, int pid, int tid,
			   uint64_t ts_mono_ns)
{
	struct pf *pf = ctx;
	struct track *t;
	struct seq *s;
	size_t len;

	pf_event(pf, "B", cat, name, pid, tid, ts_mono_ns, 0);
	pf->in_event = false;
	t = get_track(pf, pid, tid, true);
	if (!t || !(s = track_seq(pf, t, ts_mono_ns)))
		return;
	len = encode_event(pf, s, TYPE_SLICE_BEGIN, 0, false, true);
	if (len)
		write_event_packet(pf, s, ts_mono_ns, len);
}

/* A call entered: its BEGIN, with the args that follow (pf_event_end writes it). */
static void pf_call_open(void *ctx, const char *cat, const char *name, int pid, int tid,
			 uint64_t ts_mono_ns)
{
	pf_event(ctx, "B", cat, name, pid, tid, ts_mono_ns, 0);
}

static uint64_t mono_to(clockid_t clk, uint64_t mono_ns)
{
	uint64_t mono_now = now_ns();

	return clock_ns(clk) - (mono_now - mono_ns);
}

/* Sequence 1's first packet: the trace's clocks (BOOTTIME, the trace processor's timeline;
 * MONOTONIC, the probes'; REALTIME, wall time), its timestamps on MONOTONIC. */
static int pf_begin(void *ctx, uint64_t base_mono_ns, uint64_t base_real_ns)
{
	struct pf *pf = ctx;
	Perfetto__Protos__TracePacket p;
	Perfetto__Protos__TracePacketDefaults defs = PERFETTO__PROTOS__TRACE_PACKET_DEFAULTS__INIT;
	Perfetto__Protos__ClockSnapshot snap = PERFETTO__PROTOS__CLOCK_SNAPSHOT__INIT;
	Perfetto__Protos__ClockSnapshot__Clock c[3], *cp[3] = { &c[0], &c[1], &c[2] };
	uint32_t ids[3] = { PERFETTO__PROTOS__BUILTIN_CLOCK__BUILTIN_CLOCK_BOOTTIME,
			    PERFETTO__PROTOS__BUILTIN_CLOCK__BUILTIN_CLOCK_MONOTONIC,
			    PERFETTO__PROTOS__BUILTIN_CLOCK__BUILTIN_CLOCK_REALTIME };
	uint64_t ts[3] = { mono_to(CLOCK_BOOTTIME, base_mono_ns), base_mono_ns, base_real_ns };

	for (int i = 0; i < 3; i++) {
		perfetto__protos__clock_snapshot__clock__init(&c[i]);
		c[i].has_clock_id = c[i].has_timestamp = true;
		c[i].clock_id = ids[i];
		c[i].timestamp = ts[i];
	}
	snap.n_clocks = 3;
	snap.clocks = cp;
	defs.has_timestamp_clock_id = true;
	defs.timestamp_clock_id = PERFETTO__PROTOS__BUILTIN_CLOCK__BUILTIN_CLOCK_MONOTONIC;
	perfetto__protos__trace_packet__init(&p);
	p.has_sequence_flags = true;
	p.sequence_flags = SEQ_CLEARED | SEQ_NEEDS;
	p.has_first_packet_on_sequence = p.first_packet_on_sequence = true;
	p.trace_packet_defaults = &defs;
	p.clock_snapshot = &snap;
	/* the snapshot's own timestamp, on BOOTTIME */
	p.has_timestamp = true;
	p.timestamp = ts[0];
	p.has_timestamp_clock_id = true;
	p.timestamp_clock_id = ids[0];
	write_pb_packet(pf, &p);
	return trace_sink__error(pf->out.sink);
}

static void set_str(char **dst, const char *s)
{
	char *c = strdup(s ? s : "");

	if (c) {
		free(*dst);
		*dst = c;
	}
}

static void pf_meta(void *ctx, enum trace_meta what, int pid, int tid, const char *sval,
		    int64_t ival)
{
	struct pf *pf = ctx;
	bool thread = what == TRACE_META_THREAD_NAME || what == TRACE_META_THREAD_SORT;
	struct track *t = get_track(pf, pid, tid, thread);

	if (!t)
		return;
	switch (what) {
	case TRACE_META_PROCESS_NAME:
	case TRACE_META_THREAD_NAME:
		set_str(&t->name, sval);
		break;
	case TRACE_META_PROCESS_LABEL:
		set_str(&t->label, sval);
		break;
	case TRACE_META_PROCESS_SORT:
		t->gpu = ival >= GPU_TRACE_SORT_BASE;
		if (t->gpu)
			ival -= GPU_TRACE_SORT_BASE;
		/* fallthrough */
	case TRACE_META_THREAD_SORT:
		t->has_sort = true;
		t->sort = ival;
		break;
	}
	if (t->emitted)
		emit_track(pf, t);	/* the descriptor again, changed */
}

static void pf_end_events(void *ctx)
{
	(void)ctx;
}

static void pf_top_raw(void *ctx, const char *key, const char *json)
{
	(void)ctx, (void)key, (void)json;	/* JSON document members: no Perfetto place */
}

static int pf_error(const void *ctx)
{
	const struct pf *pf = ctx;

	return trace_sink__error(pf->out.sink);
}

static void pf_free(void *ctx)
{
	struct pf *pf = ctx;
	size_t it = 0;
	uint64_t v;

	if (!pf)
		return;
	free_args(pf);
	for (int k = 0; k < IN_KINDS; k++)
		intern_free(&pf->in[k]);
	while (u64map__next(&pf->tracks, &it, NULL, &v))
		free_track((struct track *)(uintptr_t)v);
	u64map__clear(&pf->tracks);
	for (size_t i = 0; i < pf->nr_counters; i++)
		free_track(pf->counters[i]);
	free(pf->counters);
	free(pf->te);
	free(pf->interned);
	free(pf->pb_scratch);
	trace_sink__free(pf->out.sink);
	free(pf);
}

static int pf_close(void *ctx)
{
	struct pf *pf = ctx;
	size_t it = 0;
	uint64_t v;
	int err;

	/* calls opened whose "X" never came (the writer's contract says it comes): ended where
	 * their thread's last event is, so BEGIN and END still balance */
	while (u64map__next(&pf->tracks, &it, NULL, &v)) {
		struct track *t = (struct track *)(uintptr_t)v;

		for (; t->nr_opens && t->seq; t->nr_opens--) {
			uint8_t *p = put_field_varint(pf->te, TE_TYPE, TYPE_SLICE_END);

			write_event_packet(pf, t->seq, t->seq->last_ts, p - pf->te);
		}
	}
	it = 0;
	/* descriptors of the tracks that only had metadata; processes first, so a thread's
	 * parent is described before it */
	while (u64map__next(&pf->tracks, &it, NULL, &v)) {
		struct track *t = (struct track *)(uintptr_t)v;

		if (!t->is_thread && !t->emitted)
			emit_track(pf, t);
	}
	it = 0;
	while (u64map__next(&pf->tracks, &it, NULL, &v)) {
		struct track *t = (struct track *)(uintptr_t)v;

		if (!t->emitted)
			emit_track(pf, t);
	}
	err = trace_buf__close(&pf->out);
	pf->out.sink = NULL;
	pf_free(pf);
	return err;
}

static const struct trace_writer_ops pf_ops = {
	.begin = pf_begin, .event = pf_event, .arg_u64 = pf_arg_u64, .arg_i64 = pf_arg_i64,
	.arg_f64 = pf_arg_f64, .arg_str = pf_arg_str, .arg_bool = pf_arg_bool,
	.arg_raw = pf_arg_raw, .arg_hex = pf_arg_hex, .arg_dim3 = pf_arg_dim3,
	.field_raw = pf_field_raw, .event_end = pf_event_end, .slice_begin = pf_slice_begin,
	.call_open = pf_call_open,
	.meta = pf_meta, .end_events = pf_end_events, .top_raw = pf_top_raw,
	.error = pf_error, .close = pf_close, .free = pf_free,
};

void *trace_pf_backend__new(struct trace_sink *sink, const struct trace_writer_ops **ops)
{
	struct pf *pf = calloc(1, sizeof(*pf));

	if (!pf)
		return NULL;
	trace_buf__init(&pf->out, sink);
	pf->next_seq = GLOBAL_SEQ;
	*ops = &pf_ops;
	return pf;
}
