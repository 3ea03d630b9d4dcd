// SPDX-License-Identifier: MIT
/* Perfetto protobuf backend: each trace_json event becomes TrackEvent packets on one
 * sequence, encoded by protobuf-c from proto/perfetto_trace.proto (Perfetto's own field
 * numbers). Names, categories and argument keys are interned (InternedData, iids scoped to the
 * sequence); timestamps are CLOCK_MONOTONIC (the probes' clock, made the packets' default
 * clock), and the first packet's ClockSnapshot ties it to BOOTTIME and REALTIME so the UI
 * shows wall time. Mapping from the Chrome-JSON calls:
 *   X -> SLICE_BEGIN (with the args) + SLICE_END at ts + dur, on the (pid, tid) track
 *   i -> INSTANT on the thread track ("s":"t") or the process track ("s":"p"/"g")
 *   C -> one COUNTER event per arg on a counter track (pid, name, key), child of the process
 *   s/f (flows, "id") -> INSTANT with flow_ids / terminating_flow_ids at the same place
 *   M -> process/thread TrackDescriptors; a pid whose sort index is a GPU's
 *        (>= GPU_TRACE_SORT_BASE) is a GPU: a plain named track with one child per stream.
 * Descriptors are written when a track is first used (metadata comes first for GPU tracks),
 * again when metadata changes afterwards, and at the end for tracks that only had metadata.
 * Each Trace message packed holds the event's packets; concatenated Trace messages are one
 * Trace on the wire, so protobuf-c does all the encoding. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "gpu_trace.h"
#include "hashmap.h"
#include "trace_pftrace.h"
#include "perfetto_trace.pb-c.h"

#define SEQ_ID		1
#define SEQ_CLEARED	PERFETTO__PROTOS__TRACE_PACKET__SEQUENCE_FLAGS__SEQ_INCREMENTAL_STATE_CLEARED
#define SEQ_NEEDS	PERFETTO__PROTOS__TRACE_PACKET__SEQUENCE_FLAGS__SEQ_NEEDS_INCREMENTAL_STATE
#define MAX_ARGS	32
#define MAX_NEW		(2 + MAX_ARGS)	/* interned entries one event can add */
#define MAX_INTERNED_STRS (1 << 16)

/* String -> iid, open addressing; strings are copied (callers pass stack buffers). */
#define PCACHE 256
struct intern {
	/* callers mostly pass the same literals: by pointer first, content checked */
	const char *pc_ptr[PCACHE];
	size_t pc_slot[PCACHE];
	char **keys;
	uint64_t *iids;
	uint32_t *hashes;
	size_t cap, n;
};

typedef Perfetto__Protos__EventName intern_entry;	/* {iid, name}: same shape for all three */

/* An annotation's encoding by (key, kind, value): most repeat (interned strings, streams,
 * sizes, flags), and a lookup is cheaper than protobuf-c walking the message's fields. */
#define DA_MEMO 1024
struct da_memo {
	uint64_t name_iid, value;
	uint8_t kind, len;
	uint8_t bytes[30];
};

struct track {
	uint64_t uuid, parent;
	int pid, tid;
	char *name;
	char *label;
	int64_t sort;
	bool has_sort, is_thread, is_counter, gpu;
	bool emitted, dirty;
};

struct trace_pf {
	struct trace_json *out;
	struct intern names, cats, keys, strs_in;
	uint64_t next_uuid;
	struct u64map tracks;		/* key -> struct track * */
	struct track **counters;	/* counter tracks, by (pid, name, key), few */
	size_t nr_counters;
	/* interned entries the next packet carries */
	intern_entry new_names[MAX_NEW], new_cats[MAX_NEW], new_keys[MAX_NEW], new_strs[MAX_NEW];
	intern_entry *p_names[MAX_NEW], *p_cats[MAX_NEW], *p_keys[MAX_NEW];
	Perfetto__Protos__InternedString istrs[MAX_NEW], *p_istrs[MAX_NEW];
	size_t n_new_names, n_new_cats, n_new_keys, n_new_strs;
	/* the event being built */
	bool in_event;
	char ph;
	char scope;
	int pid, tid;
	uint64_t ts, dur, name_iid, cat_iid, flow_id;
	bool has_flow;
	const char *name;	/* for counters: copied into the intern table */
	Perfetto__Protos__DebugAnnotation args[MAX_ARGS];
	const char *arg_keys[MAX_ARGS];
	char *strs[MAX_ARGS];
	size_t nargs, nstrs;
	uint8_t *scratch;
	size_t scratch_cap;
	uint8_t *te_buf;	/* the event's TrackEvents, encoded */
	size_t te_cap;
	uint8_t *da_buf;	/* its debug annotations, encoded */
	size_t da_cap;
	ProtobufCBinaryData das[MAX_ARGS];
	struct da_memo memo[DA_MEMO];
};

bool trace_pf__path(const char *path)
{
	size_t n = strlen(path);

	return (n > 8 && !strcmp(path + n - 8, ".pftrace")) ||
	       (n > 11 && !strcmp(path + n - 11, ".pftrace.gz"));
}

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

	if (!keys || !iids || !hashes) {
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

/* iid of s; a new one is queued in new[] for the next packet's InternedData. 0 on ENOMEM. */
static uint64_t intern(struct intern *t, const char *s, intern_entry *new, size_t *n_new)
{
	size_t pc = ((uintptr_t)s >> 3 ^ (uintptr_t)s >> 11) & (PCACHE - 1);
	uint32_t h;
	size_t i;

	if (t->pc_ptr[pc] == s) {
		i = t->pc_slot[pc];
		if (i < t->cap && t->keys[i] && !strcmp(t->keys[i], s))
			return t->iids[i];
	}
	h = str_hash(s);
	if (t->cap) {
		for (i = h & (t->cap - 1); t->keys[i]; i = (i + 1) & (t->cap - 1))
			if (t->hashes[i] == h && !strcmp(t->keys[i], s)) {
				t->pc_ptr[pc] = s;
				t->pc_slot[pc] = i;
				return t->iids[i];
			}
	}
	if ((t->n + 1) * 2 > t->cap && intern_grow(t))
		return 0;
	if (*n_new >= MAX_NEW)
		return 0;	/* cannot happen: an event adds at most MAX_NEW */
	for (i = h & (t->cap - 1); t->keys[i]; i = (i + 1) & (t->cap - 1))
		;
	t->keys[i] = strdup(s);
	if (!t->keys[i])
		return 0;
	t->hashes[i] = h;
	t->iids[i] = ++t->n;
	t->pc_ptr[pc] = s;
	t->pc_slot[pc] = i;
	perfetto__protos__event_name__init(&new[*n_new]);
	new[*n_new].has_iid = true;
	new[*n_new].iid = t->n;
	new[*n_new].name = t->keys[i];
	(*n_new)++;
	return t->n;
}

static void intern_free(struct intern *t)
{
	for (size_t i = 0; i < t->cap; i++)
		free(t->keys[i]);
	free(t->keys);
	free(t->iids);
	free(t->hashes);
}

struct trace_pf *trace_pf__new(struct trace_json *out)
{
	struct trace_pf *pf = calloc(1, sizeof(*pf));

	if (!pf)
		return NULL;
	pf->out = out;
	for (int i = 0; i < MAX_ARGS; i++)
		perfetto__protos__debug_annotation__init(&pf->args[i]);
	for (int i = 0; i < MAX_NEW; i++) {
		pf->p_names[i] = &pf->new_names[i];
		pf->p_cats[i] = &pf->new_cats[i];
		pf->p_keys[i] = &pf->new_keys[i];
		pf->p_istrs[i] = &pf->istrs[i];
	}
	return pf;
}

static void free_strs(struct trace_pf *pf)
{
	for (size_t i = 0; i < pf->nstrs; i++)
		free(pf->strs[i]);
	pf->nstrs = 0;
}

void trace_pf__free(struct trace_pf *pf)
{
	size_t it = 0;
	uint64_t v;

	if (!pf)
		return;
	free_strs(pf);
	intern_free(&pf->names);
	intern_free(&pf->cats);
	intern_free(&pf->keys);
	intern_free(&pf->strs_in);
	while (u64map__next(&pf->tracks, &it, NULL, &v)) {
		struct track *t = (struct track *)(uintptr_t)v;

		free(t->name);
		free(t->label);
		free(t);
	}
	u64map__clear(&pf->tracks);
	for (size_t i = 0; i < pf->nr_counters; i++) {
		free(pf->counters[i]->name);
		free(pf->counters[i]);
	}
	free(pf->counters);
	free(pf->scratch);
	free(pf->te_buf);
	free(pf->da_buf);
	free(pf);
}

/* Packs the packets as one Trace message into the output. */
static void write_packets(struct trace_pf *pf, Perfetto__Protos__TracePacket **pkts, size_t n)
{
	Perfetto__Protos__Trace trace = PERFETTO__PROTOS__TRACE__INIT;
	size_t len;

	trace.n_packet = n;
	trace.packet = pkts;
	len = perfetto__protos__trace__get_packed_size(&trace);
	if (len > pf->scratch_cap) {
		size_t cap = len < 4096 ? 4096 : len * 2;
		uint8_t *p = realloc(pf->scratch, cap);

		if (!p)
			return;		/* the trace misses this event; ENOMEM again soon anyway */
		pf->scratch = p;
		pf->scratch_cap = cap;
	}
	perfetto__protos__trace__pack(&trace, pf->scratch);
	trace_json__put_bytes(pf->out, pf->scratch, len);
}

static bool reserve(uint8_t **buf, size_t *cap, size_t len)
{
	if (len > *cap) {
		size_t c = len < 4096 ? 4096 : len * 2;
		uint8_t *p = realloc(*buf, c);

		if (!p)
			return false;
		*buf = p;
		*cap = c;
	}
	return true;
}

/* Room a packed message can take at most: every varint 10 bytes, every tag 3 (field numbers
 * below 2048), every length prefix 5. protobuf-c packs into a buffer of at least that much
 * and returns what it wrote, so no message is sized before it is packed. */
#define FIELD_MAX 13
static size_t str_bound(const char *s)
{
	return s ? 3 + 5 + strlen(s) : 0;
}

static size_t da_bound(const Perfetto__Protos__DebugAnnotation *a)
{
	return 4 * FIELD_MAX + str_bound(a->name) + str_bound(a->string_value);
}

static size_t te_bound(const Perfetto__Protos__TrackEventW *e)
{
	size_t n = 8 * FIELD_MAX + str_bound(e->name) +
		   FIELD_MAX * (e->n_category_iids + e->n_flow_ids + e->n_terminating_flow_ids);

	for (size_t i = 0; i < e->n_debug_annotations; i++)
		n += 8 + e->debug_annotations[i].len;
	return n;
}

/* kind and value of an annotation the memo can hold (0: it cannot) */
static int da_kind(const Perfetto__Protos__DebugAnnotation *a, uint64_t *v)
{
	if (a->name || !a->has_name_iid)
		return 0;
	if (a->has_string_value_iid)
		return *v = a->string_value_iid, 1;
	if (a->has_uint_value)
		return *v = a->uint_value, 2;
	if (a->has_int_value)
		return *v = (uint64_t)a->int_value, 3;
	if (a->has_pointer_value)
		return *v = a->pointer_value, 4;
	if (a->has_bool_value)
		return *v = a->bool_value, 5;
	if (a->has_double_value) {
		memcpy(v, &a->double_value, sizeof(*v));
		return 6;
	}
	return 0;
}

/* The event's annotations, each packed (or found in the memo) into da_buf; das[] point there. */
static bool pack_args(struct trace_pf *pf)
{
	size_t bound = 0, off = 0;

	for (size_t i = 0; i < pf->nargs; i++)
		bound += da_bound(&pf->args[i]);
	if (!reserve(&pf->da_buf, &pf->da_cap, bound))
		return false;
	for (size_t i = 0; i < pf->nargs; i++) {
		const Perfetto__Protos__DebugAnnotation *a = &pf->args[i];
		uint8_t *out = pf->da_buf + off;
		struct da_memo *m = NULL;
		uint64_t v = 0;
		int kind = da_kind(a, &v);

		if (kind) {
			m = &pf->memo[u64_mix((a->name_iid * 8 + kind) ^ v * 0x9e3779b97f4a7c15ull) &
				      (DA_MEMO - 1)];
			if (m->kind == kind && m->name_iid == a->name_iid && m->value == v) {
				memcpy(out, m->bytes, m->len);
				pf->das[i].data = out;
				pf->das[i].len = m->len;
				off += m->len;
				continue;
			}
		}
		pf->das[i].data = out;
		pf->das[i].len = perfetto__protos__debug_annotation__pack(a, out);
		off += pf->das[i].len;
		if (m && pf->das[i].len <= sizeof(m->bytes)) {
			m->kind = (uint8_t)kind;
			m->name_iid = a->name_iid;
			m->value = v;
			m->len = (uint8_t)pf->das[i].len;
			memcpy(m->bytes, out, m->len);
		}
	}
	return true;
}

/* TrackEvent packets: each event packed on its own, then the packets around the bytes. */
static void write_events(struct trace_pf *pf, Perfetto__Protos__TrackEventW **evs,
			 const uint64_t *ts, const uint32_t *flags,
			 Perfetto__Protos__InternedData *in, size_t n)
{
	Perfetto__Protos__TraceW trace = PERFETTO__PROTOS__TRACE_W__INIT;
	Perfetto__Protos__TracePacketW p[2], *pp[2] = { &p[0], &p[1] };
	size_t bound = 0, off = 0, len;

	for (size_t i = 0; i < n; i++)
		bound += te_bound(evs[i]);
	if (!reserve(&pf->te_buf, &pf->te_cap, bound))
		return;
	for (size_t i = 0; i < n; i++) {
		len = perfetto__protos__track_event_w__pack(evs[i], pf->te_buf + off);
		perfetto__protos__trace_packet_w__init(&p[i]);
		p[i].has_timestamp = p[i].has_trusted_packet_sequence_id = true;
		p[i].timestamp = ts[i];
		p[i].trusted_packet_sequence_id = SEQ_ID;
		p[i].has_sequence_flags = flags[i] != 0;
		p[i].sequence_flags = flags[i];
		p[i].has_track_event = true;
		p[i].track_event.data = pf->te_buf + off;
		p[i].track_event.len = len;
		off += len;
	}
	p[0].interned_data = in;
	trace.n_packet = n;
	trace.packet = pp;
	/* a packet is 4 fields around its event, a Trace a tag and a length per packet */
	bound = in ? perfetto__protos__trace_w__get_packed_size(&trace) : off + n * 8 * FIELD_MAX;
	if (!reserve(&pf->scratch, &pf->scratch_cap, bound))
		return;
	len = perfetto__protos__trace_w__pack(&trace, pf->scratch);
	trace_json__put_bytes(pf->out, pf->scratch, len);
}

static void packet_init(struct trace_pf *pf, Perfetto__Protos__TracePacket *p,
			Perfetto__Protos__InternedData *in)
{
	perfetto__protos__trace_packet__init(p);
	p->has_trusted_packet_sequence_id = true;
	p->trusted_packet_sequence_id = SEQ_ID;
	p->has_sequence_flags = true;
	p->sequence_flags = SEQ_NEEDS;
	if (in && pf->n_new_names + pf->n_new_cats + pf->n_new_keys + pf->n_new_strs) {
		perfetto__protos__interned_data__init(in);
		in->n_event_names = pf->n_new_names;
		in->event_names = pf->p_names;
		in->n_event_categories = pf->n_new_cats;
		in->event_categories = (Perfetto__Protos__EventCategory **)pf->p_cats;
		in->n_debug_annotation_names = pf->n_new_keys;
		in->debug_annotation_names = (Perfetto__Protos__DebugAnnotationName **)pf->p_keys;
		for (size_t i = 0; i < pf->n_new_strs; i++) {
			perfetto__protos__interned_string__init(&pf->istrs[i]);
			pf->istrs[i].has_iid = pf->istrs[i].has_str = true;
			pf->istrs[i].iid = pf->new_strs[i].iid;
			pf->istrs[i].str.data = (uint8_t *)pf->new_strs[i].name;
			pf->istrs[i].str.len = strlen(pf->new_strs[i].name);
		}
		in->n_debug_annotation_string_values = pf->n_new_strs;
		in->debug_annotation_string_values = pf->p_istrs;
		p->interned_data = in;
		pf->n_new_names = pf->n_new_cats = pf->n_new_keys = pf->n_new_strs = 0;
	}
}

static uint64_t mono_to(clockid_t clk, uint64_t mono_ns)
{
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	clock_gettime(clk, &b);
	return (uint64_t)b.tv_sec * 1000000000ull + b.tv_nsec -
	       ((uint64_t)a.tv_sec * 1000000000ull + a.tv_nsec - mono_ns);
}

void trace_pf__begin(struct trace_pf *pf, uint64_t base_mono_ns, uint64_t base_real_ns)
{
	Perfetto__Protos__TracePacket p, *pp = &p;
	Perfetto__Protos__TracePacketDefaults defs = PERFETTO__PROTOS__TRACE_PACKET_DEFAULTS__INIT;
	Perfetto__Protos__ClockSnapshot snap = PERFETTO__PROTOS__CLOCK_SNAPSHOT__INIT;
	Perfetto__Protos__ClockSnapshot__Clock c[3], *cp[3] = { &c[0], &c[1], &c[2] };
	/* the trace processor's own timeline is BOOTTIME: give it that one too */
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
	packet_init(pf, &p, NULL);
	p.sequence_flags = SEQ_CLEARED | SEQ_NEEDS;
	p.has_first_packet_on_sequence = p.first_packet_on_sequence = true;
	p.trace_packet_defaults = &defs;
	p.clock_snapshot = &snap;
	/* the snapshot's own timestamp is in the default clock (BOOTTIME) */
	p.has_timestamp = true;
	p.timestamp = ts[0];
	p.has_timestamp_clock_id = true;
	p.timestamp_clock_id = ids[0];
	write_packets(pf, &pp, 1);
}

static uint64_t track_key(int pid, int tid, bool thread)
{
	if (thread)
		return 1ULL << 63 | (uint64_t)(pid & 0x7fffffff) << 32 | (uint32_t)tid;
	return 1ULL << 62 | (uint32_t)pid;
}

static struct track *get_track(struct trace_pf *pf, int pid, int tid, bool thread)
{
	uint64_t key = track_key(pid, tid, thread);
	bool created;
	struct track *t = u64map__get_or_alloc(&pf->tracks, key, sizeof(*t), &created);

	if (t && created) {
		/* uuids numbered from 1: one-byte varints in every event */
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

static void emit_track(struct trace_pf *pf, struct track *t)
{
	Perfetto__Protos__TracePacket p, *pp = &p;
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
	packet_init(pf, &p, NULL);
	p.has_sequence_flags = false;	/* descriptors use no interned data */
	p.track_descriptor = &td;
	write_packets(pf, &pp, 1);
	t->emitted = true;
	t->dirty = false;
}

static void set_str(char **dst, const char *s)
{
	char *c = strdup(s ? s : "");

	if (c) {
		free(*dst);
		*dst = c;
	}
}

void trace_pf__meta(struct trace_pf *pf, enum trace_pf_meta what, int pid, int tid,
		    const char *sval, int64_t ival)
{
	bool thread = what == PF_META_THREAD_NAME || what == PF_META_THREAD_SORT;
	struct track *t = get_track(pf, pid, tid, thread);

	if (!t)
		return;
	switch (what) {
	case PF_META_PROCESS_NAME:
	case PF_META_THREAD_NAME:
		set_str(&t->name, sval);
		break;
	case PF_META_PROCESS_LABEL:
		set_str(&t->label, sval);
		break;
	case PF_META_PROCESS_SORT:
		t->gpu = ival >= GPU_TRACE_SORT_BASE;
		if (t->gpu)
			ival -= GPU_TRACE_SORT_BASE;
		/* fallthrough */
	case PF_META_THREAD_SORT:
		t->has_sort = true;
		t->sort = ival;
		break;
	}
	t->dirty = true;
	if (t->emitted)
		emit_track(pf, t);
}

void trace_pf__event(struct trace_pf *pf, const char *ph, const char *cat, const char *name,
		     int pid, int tid, uint64_t ts_mono_ns, uint64_t dur_ns)
{
	free_strs(pf);
	pf->in_event = true;
	pf->ph = ph[0];
	pf->scope = 't';
	pf->pid = pid;
	pf->tid = tid;
	pf->ts = ts_mono_ns;
	pf->dur = dur_ns;
	pf->nargs = 0;
	pf->has_flow = false;
	pf->name = name;
	pf->name_iid = pf->ph == 'C' ? 0 : intern(&pf->names, name ? name : "", pf->new_names,
						   &pf->n_new_names);
	pf->cat_iid = cat ? intern(&pf->cats, cat, pf->new_cats, &pf->n_new_cats) : 0;
}

static Perfetto__Protos__DebugAnnotation *arg(struct trace_pf *pf, const char *key)
{
	Perfetto__Protos__DebugAnnotation *a;

	if (!pf->in_event || pf->nargs >= MAX_ARGS)
		return NULL;
	a = &pf->args[pf->nargs];
	/* initialized once (trace_pf__new); clearing what an earlier event set is cheaper */
	a->has_bool_value = a->has_uint_value = a->has_int_value = false;
	a->has_double_value = a->has_pointer_value = a->has_string_value_iid = false;
	a->string_value = NULL;
	a->name = NULL;
	a->name_iid = intern(&pf->keys, key, pf->new_keys, &pf->n_new_keys);
	a->has_name_iid = a->name_iid != 0;
	if (!a->has_name_iid)
		a->name = (char *)key;	/* not interned (ENOMEM): inline */
	/* counters: the key names the series (callers' keys live until event_end) */
	pf->arg_keys[pf->nargs] = key;
	pf->nargs++;
	return a;
}

void trace_pf__arg_u64(struct trace_pf *pf, const char *key, uint64_t v)
{
	Perfetto__Protos__DebugAnnotation *a = arg(pf, key);

	if (a) {
		a->has_uint_value = true;
		a->uint_value = v;
	}
}

void trace_pf__arg_i64(struct trace_pf *pf, const char *key, int64_t v)
{
	Perfetto__Protos__DebugAnnotation *a = arg(pf, key);

	if (a) {
		a->has_int_value = true;
		a->int_value = v;
	}
}

void trace_pf__arg_f64(struct trace_pf *pf, const char *key, double v)
{
	Perfetto__Protos__DebugAnnotation *a = arg(pf, key);

	if (a) {
		a->has_double_value = true;
		a->double_value = v;
	}
}

void trace_pf__arg_str(struct trace_pf *pf, const char *key, const char *v)
{
	Perfetto__Protos__DebugAnnotation *a = arg(pf, key);

	if (!a)
		return;
	/* Values repeat (kernel names, sources): interned while the table is not huge, so
	 * a trace of unique strings does not keep them all in memory. */
	if (pf->strs_in.n < MAX_INTERNED_STRS) {
		a->string_value_iid = intern(&pf->strs_in, v ? v : "", pf->new_strs,
					     &pf->n_new_strs);
		if (a->string_value_iid) {
			a->has_string_value_iid = true;
			return;
		}
	}
	{
		/* copied: callers may pass a buffer they reuse before event_end */
		a->string_value = strdup(v ? v : "");
		if (a->string_value)
			pf->strs[pf->nstrs++] = a->string_value;
		else
			a->string_value = "";
	}
}

void trace_pf__arg_bool(struct trace_pf *pf, const char *key, bool v)
{
	Perfetto__Protos__DebugAnnotation *a = arg(pf, key);

	if (a) {
		a->has_bool_value = true;
		a->bool_value = v;
	}
}

void trace_pf__arg_ptr(struct trace_pf *pf, const char *key, uint64_t v)
{
	Perfetto__Protos__DebugAnnotation *a = arg(pf, key);

	if (a) {
		a->has_pointer_value = true;
		a->pointer_value = v;
	}
}

/* As the JSON's text ("[64, 2, 1]"), interned: a nested array of three annotations would cost
 * protobuf-c two more levels of size computation on every launch, and grids repeat. */
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

void trace_pf__arg_dim3(struct trace_pf *pf, const char *key, uint32_t x, uint32_t y, uint32_t z)
{
	char buf[48], *p = buf;	/* "[x, y, z]" without printf: a launch has two */

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
	trace_pf__arg_str(pf, key, buf);
}

/* The Chrome-JSON extras the writers use: a flow's "id", an instant's scope "s". */
void trace_pf__field_raw(struct trace_pf *pf, const char *key, const char *json)
{
	if (!strcmp(key, "id")) {
		pf->flow_id = strtoull(json + (json[0] == '"'), NULL, 0);
		pf->has_flow = true;
	} else if (!strcmp(key, "s") && json[0] == '"') {
		pf->scope = json[1];
	}
}

static struct track *counter_track(struct trace_pf *pf, const char *key)
{
	struct track *t, **grown;

	for (size_t i = 0; i < pf->nr_counters; i++) {
		t = pf->counters[i];
		if (t->pid == pf->pid && !strcmp(t->name, pf->name) && !strcmp(t->label, key))
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
		free(t->name);
		free(t->label);
		free(t);
		return NULL;
	}
	t->pid = pf->pid;
	t->is_counter = true;
	{
		struct track *proc = get_track(pf, pf->pid, 0, false);

		t->parent = proc ? proc->uuid : 0;
	}
	t->uuid = ++pf->next_uuid;
	pf->counters[pf->nr_counters++] = t;
	return t;
}

static void counter_events(struct trace_pf *pf)
{
	Perfetto__Protos__TrackEventW ev, *evp;
	uint32_t noflags = 0;

	for (size_t i = 0; i < pf->nargs; i++) {
		Perfetto__Protos__DebugAnnotation *a = &pf->args[i];
		struct track *t = counter_track(pf, pf->arg_keys[i]);

		if (!t)
			continue;
		if (!t->emitted)
			emit_track(pf, t);
		perfetto__protos__track_event_w__init(&ev);
		ev.has_type = true;
		ev.type = PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_COUNTER;
		ev.has_track_uuid = true;
		ev.track_uuid = t->uuid;
		if (a->has_double_value) {
			ev.has_double_counter_value = true;
			ev.double_counter_value = a->double_value;
		} else if (a->has_int_value || a->has_uint_value) {
			ev.has_counter_value = true;
			ev.counter_value = a->has_int_value ? a->int_value : (int64_t)a->uint_value;
		} else {
			continue;	/* not a number: not a counter value */
		}
		evp = &ev;
		write_events(pf, &evp, &pf->ts, &noflags, NULL, 1);	/* nothing interned */
	}
}

void trace_pf__event_end(struct trace_pf *pf)
{
	Perfetto__Protos__TracePacket p0;
	Perfetto__Protos__InternedData in;
	Perfetto__Protos__TrackEventW ev, end, *evs[2] = { &ev, &end };
	uint64_t ts[2] = { pf->ts, pf->ts + pf->dur };
	uint32_t flags[2] = { SEQ_NEEDS, 0 };
	struct track *t;
	uint64_t flow = pf->flow_id;
	size_t n = 1;

	if (!pf->in_event)
		return;
	pf->in_event = false;
	if (pf->ph == 'M')
		return;		/* metadata comes through trace_pf__meta */
	if (pf->ph == 'C') {
		counter_events(pf);
		goto out;
	}
	t = get_track(pf, pf->pid, pf->tid, pf->scope == 't');
	if (!t)
		goto out;
	if (!t->emitted)
		emit_track(pf, t);
	if (!pack_args(pf))
		goto out;
	perfetto__protos__track_event_w__init(&ev);
	ev.has_type = true;
	ev.has_track_uuid = true;
	ev.track_uuid = t->uuid;
	ev.has_name_iid = pf->name_iid != 0;
	ev.name_iid = pf->name_iid;
	if (!ev.has_name_iid)
		ev.name = (char *)(pf->name ? pf->name : "");	/* not interned (ENOMEM) */
	if (pf->cat_iid) {
		ev.n_category_iids = 1;
		ev.category_iids = &pf->cat_iid;
	}
	ev.n_debug_annotations = pf->nargs;
	ev.debug_annotations = pf->das;
	packet_init(pf, &p0, &in);	/* takes the interned data queued */
	switch (pf->ph) {
	case 'X':
		ev.type = PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN;
		perfetto__protos__track_event_w__init(&end);
		end.has_type = end.has_track_uuid = true;
		end.type = PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_END;
		end.track_uuid = t->uuid;
		n = 2;
		break;
	case 's':
	case 'f':
		ev.type = PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_INSTANT;
		if (pf->has_flow && pf->ph == 's') {
			ev.n_flow_ids = 1;
			ev.flow_ids = &flow;
		} else if (pf->has_flow) {
			ev.n_terminating_flow_ids = 1;
			ev.terminating_flow_ids = &flow;
		}
		break;
	default:
		ev.type = PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_INSTANT;
	}
	write_events(pf, evs, ts, flags, p0.interned_data, n);
out:
	free_strs(pf);
}

void trace_pf__finish(struct trace_pf *pf)
{
	size_t it = 0;
	uint64_t v;

	/* process tracks first, so a thread's parent is described before it */
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
}
