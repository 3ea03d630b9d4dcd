// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "growbuf.h"
#include "hashmap.h"
#include "log.h"
#include "memlayout.h"
#include "memsnap.h"

/* Ids of memsnap__stack_with_py: above memtrace's synthesized native ids (1 << 30 up). */
#define PY_PAIR_BASE	(3 << 29)
#define PY_PAIR_MAX	(1 << 28)

/* PyTorch's caching allocator carves small requests from 2 MiB segments (kSmallBuffer). */
#define SMALL_SEGMENT	(2ULL << 20)

/* A live block, segment or VMM handle, chained in a table keyed by address (or handle). */
struct live {
	uint64_t key;		/* address, or handle */
	uint64_t size, stream, ts;
	uint64_t handle;	/* mapped segment: its cuMemCreate handle */
	int32_t stack_id;
	int8_t device;
	uint8_t kind;		/* enum mem_seg_kind (segments) */
	struct live *next;
};

struct table {
	struct live **buckets;
	size_t nbuckets, nr;
};

struct memsnap {
	struct table blocks, segments, handles;
	struct mem_event *hist;
	size_t hist_cap, hist_start, hist_nr;
	struct mem_device_bytes dev[MEMSNAP_MAX_DEVICES];
	int nr_devices;
	struct memsnap_stats st;
	uint64_t base_mono, base_real;
	/* --py-stacks: (native stack id, Python stack id) pairs, id PY_PAIR_BASE + index */
	struct py_pair {
		int32_t native;
		uint64_t ustack;
	} *pairs;
	int nr_pairs, cap_pairs;
	struct u64map pair_index;	/* hash -> index + 1 */
};

static const char *const action_names[] = {
	[MEM_ACT_ALLOC] = "alloc",
	[MEM_ACT_FREE_REQUESTED] = "free_requested",
	[MEM_ACT_FREE_COMPLETED] = "free_completed",
	[MEM_ACT_SEGMENT_ALLOC] = "segment_alloc",
	[MEM_ACT_SEGMENT_FREE] = "segment_free",
	[MEM_ACT_SEGMENT_MAP] = "segment_map",
	[MEM_ACT_SEGMENT_UNMAP] = "segment_unmap",
	[MEM_ACT_OOM] = "oom",
	[MEM_ACT_SEGMENT_FREE_UNKNOWN] = "tptrace_segment_free_unknown",
};

static const char *const seg_what[] = {
	[MEM_SEG_DEVICE] = "cudaMalloc",
	[MEM_SEG_ASYNC] = "cudaMallocAsync",
	[MEM_SEG_MAPPED] = "cuMemMap",
	[MEM_SEG_MANAGED] = "cudaMallocManaged",
	[MEM_SEG_HOST] = "cudaMallocHost",
};

/* ---- tables ------------------------------------------------------------------------------ */

static int table_grow(struct table *t)
{
	size_t n = t->nbuckets ? t->nbuckets * 2 : 256;
	struct live **b = calloc(n, sizeof(*b));

	if (!b)
		return -ENOMEM;
	for (size_t i = 0; i < t->nbuckets; i++) {
		struct live *e = t->buckets[i], *next;

		for (; e; e = next) {
			size_t j = u64_mix(e->key) & (n - 1);

			next = e->next;
			e->next = b[j];
			b[j] = e;
		}
	}
	free(t->buckets);
	t->buckets = b;
	t->nbuckets = n;
	return 0;
}

static struct live *table_find(const struct table *t, uint64_t key)
{
	if (!t->nbuckets)
		return NULL;
	for (struct live *e = t->buckets[u64_mix(key) & (t->nbuckets - 1)]; e; e = e->next)
		if (e->key == key)
			return e;
	return NULL;
}

/* Inserts a new entry (replacing one with the same key: the old one was freed unseen). */
static struct live *table_put(struct table *t, uint64_t key)
{
	struct live *e = table_find(t, key);
	size_t i;

	if (e)
		return e;
	if (t->nr >= t->nbuckets && table_grow(t))
		return NULL;
	e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->key = key;
	i = u64_mix(key) & (t->nbuckets - 1);
	e->next = t->buckets[i];
	t->buckets[i] = e;
	t->nr++;
	return e;
}

/* Unlinks the entry for key; the caller frees it. */
static struct live *table_take(struct table *t, uint64_t key)
{
	struct live **pp, *e;

	if (!t->nbuckets)
		return NULL;
	for (pp = &t->buckets[u64_mix(key) & (t->nbuckets - 1)]; (e = *pp); pp = &e->next) {
		if (e->key == key) {
			*pp = e->next;
			t->nr--;
			return e;
		}
	}
	return NULL;
}

static void table_clear(struct table *t)
{
	for (size_t i = 0; i < t->nbuckets; i++) {
		struct live *e = t->buckets[i], *next;

		for (; e; e = next) {
			next = e->next;
			free(e);
		}
	}
	free(t->buckets);
	memset(t, 0, sizeof(*t));
}

/* ---- state ------------------------------------------------------------------------------- */

struct memsnap *memsnap__new(size_t history)
{
	struct memsnap *ms = calloc(1, sizeof(*ms));

	if (!ms)
		return NULL;
	ms->hist_cap = history ? history : MEMSNAP_DEFAULT_HISTORY;
	ms->hist = malloc(ms->hist_cap * sizeof(*ms->hist));
	if (!ms->hist) {
		free(ms);
		return NULL;
	}
	ms->nr_devices = 1;
	return ms;
}

void memsnap__free(struct memsnap *ms)
{
	if (!ms)
		return;
	table_clear(&ms->blocks);
	table_clear(&ms->segments);
	table_clear(&ms->handles);
	free(ms->hist);
	free(ms->pairs);
	u64map__clear(&ms->pair_index);
	free(ms);
}

int32_t memsnap__stack_with_py(struct memsnap *ms, int32_t native_id, uint64_t ustack)
{
	uint64_t key = (ustack * 0x9e3779b97f4a7c15ULL) ^ (uint32_t)native_id, idx;

	if (ustack < TP_USTACK_FIRST_ID)
		return native_id;
	key = key ? key : 1;
	/* one probe slot per hash: a collision makes a second pair, never a wrong one */
	if (u64map__get(&ms->pair_index, key, &idx) && ms->pairs[idx - 1].native == native_id &&
	    ms->pairs[idx - 1].ustack == ustack)
		return PY_PAIR_BASE + (int32_t)(idx - 1);
	if (ms->nr_pairs == PY_PAIR_MAX)
		return native_id;
	if (ARRAY_RESERVE(ms->pairs, ms->cap_pairs, ms->nr_pairs + 1, 64))
		return native_id;
	ms->pairs[ms->nr_pairs] = (struct py_pair){ native_id, ustack };
	u64map__set(&ms->pair_index, key, ms->nr_pairs + 1);
	return PY_PAIR_BASE + ms->nr_pairs++;
}

/* The Python stack of stack_id (NULL: none) and its native id in *native. */
static const struct ustack *py_stack_of(const struct memsnap *ms, const struct memsnap_info *info,
					int32_t stack_id, int32_t *native)
{
	const struct py_pair *pp;

	*native = stack_id;
	if (!ms || stack_id < PY_PAIR_BASE || stack_id - PY_PAIR_BASE >= ms->nr_pairs)
		return NULL;
	pp = &ms->pairs[stack_id - PY_PAIR_BASE];
	*native = pp->native;
	if (!info || !info->ustack_lookup)
		return NULL;
	return info->ustack_lookup(info->ustack_ctx, info->pid, pp->ustack);
}

/* The frames of stack_id, Python first (innermost first), then native: the count written. */
static int memsnap__frames(const struct memsnap *ms, const struct memsnap_info *info,
			   int32_t stack_id, struct mem_frame *frames, int max)
{
	const struct ustack *u = py_stack_of(ms, info, stack_id, &stack_id);
	int n = 0;

	for (int i = 0; u && i < u->nr_py && n < max; i++) {
		const struct ustack_frame *f = &u->py[i];

		/* a code object gone before it was read: unnamed, never a guessed line */
		frames[n++] = (struct mem_frame){
			.name = f->func && !f->unresolved ? f->func : "<unresolved>",
			.filename = f->file && !f->unresolved ? f->file : "",
			.addr = f->code, .line = f->unresolved ? 0 : f->line, .python = true,
		};
	}
	if (info && info->stack_fn && stack_id >= 0 && n < max)
		n += info->stack_fn(info->stack_ctx, stack_id, frames + n, max - n);
	return n;
}

void memsnap__set_clock(struct memsnap *ms, uint64_t mono_ns, uint64_t real_ns)
{
	ms->base_mono = mono_ns;
	ms->base_real = real_ns;
}

static bool valid_device(int device)
{
	return device >= 0 && device < MEMSNAP_MAX_DEVICES;
}

static void record(struct memsnap *ms, enum mem_action action, int device, uint64_t addr,
		   uint64_t size, uint64_t stream, int32_t stack_id, uint64_t ts)
{
	struct mem_event *e;

	if (!valid_device(device))
		return;
	if (device + 1 > ms->nr_devices)
		ms->nr_devices = device + 1;
	if (ms->hist_nr == ms->hist_cap) {
		ms->hist_start = (ms->hist_start + 1) % ms->hist_cap;
		ms->hist_nr--;
		ms->st.history_dropped++;
	}
	e = &ms->hist[(ms->hist_start + ms->hist_nr++) % ms->hist_cap];
	e->action = action;
	e->device = device;
	e->stack_id = stack_id;
	e->addr = addr;
	e->size = size;
	e->stream = stream;
	e->ts = ts;
}

static void add_allocated(struct memsnap *ms, int device, int64_t delta)
{
	struct mem_device_bytes *d = &ms->dev[device];

	d->allocated += delta;
	if (d->allocated > d->peak_allocated)
		d->peak_allocated = d->allocated;
}

static void add_reserved(struct memsnap *ms, int device, int64_t delta)
{
	struct mem_device_bytes *d = &ms->dev[device];

	d->reserved += delta;
	if (d->reserved > d->peak_reserved)
		d->peak_reserved = d->reserved;
}

int memsnap__block_alloc(struct memsnap *ms, uint64_t ts, int device, uint64_t addr, uint64_t size,
		   uint64_t stream, int32_t stack_id)
{
	struct live *b;

	if (!valid_device(device))
		return -1;
	b = table_find(&ms->blocks, addr);
	if (b)		/* handed out again: its free was not seen */
		add_allocated(ms, b->device, -(int64_t)b->size);
	else
		b = table_put(&ms->blocks, addr);
	if (!b)
		return -1;
	b->size = size;
	b->stream = stream;
	b->ts = ts;
	b->device = device;
	b->stack_id = stack_id;
	ms->st.allocs++;
	add_allocated(ms, device, size);
	record(ms, MEM_ACT_ALLOC, device, addr, size, stream, stack_id, ts);
	return device;
}

int memsnap__block_free(struct memsnap *ms, uint64_t ts, uint64_t addr)
{
	struct live *b = table_take(&ms->blocks, addr);
	int device;

	if (!b) {
		ms->st.frees_unknown++;
		return -1;
	}
	device = b->device;
	ms->st.frees++;
	add_allocated(ms, device, -(int64_t)b->size);
	/* the USDT probe fires when the caller frees; the block is reusable once the streams
	 * that used it are done, which no probe tells: both entries carry the same time */
	record(ms, MEM_ACT_FREE_REQUESTED, device, addr, b->size, b->stream, -1, ts);
	record(ms, MEM_ACT_FREE_COMPLETED, device, addr, b->size, b->stream, -1, ts);
	free(b);
	return device;
}

static bool on_device(enum mem_seg_kind kind)
{
	return kind == MEM_SEG_DEVICE || kind == MEM_SEG_ASYNC || kind == MEM_SEG_MAPPED;
}

static void add_kind_bytes(struct memsnap *ms, enum mem_seg_kind kind, int device, int64_t delta)
{
	if (kind == MEM_SEG_HOST)
		ms->st.host_bytes += delta;
	else if (kind == MEM_SEG_MANAGED)
		ms->st.managed_bytes += delta;
	else if (kind != MEM_SEG_MAPPED)	/* mapped memory is counted at cuMemCreate */
		add_reserved(ms, device, delta);
}

int memsnap__segment_alloc(struct memsnap *ms, uint64_t ts, enum mem_seg_kind kind, int device,
			   uint64_t addr, uint64_t size, uint64_t stream, int32_t stack_id)
{
	struct live *s;

	if (on_device(kind) && !valid_device(device))
		return -1;
	if (!on_device(kind))
		device = -1;
	s = table_find(&ms->segments, addr);
	if (s)
		add_kind_bytes(ms, s->kind, s->device, -(int64_t)s->size);
	else
		s = table_put(&ms->segments, addr);
	if (!s)
		return -1;
	s->size = size;
	s->stream = stream;
	s->ts = ts;
	s->device = device;
	s->kind = kind;
	s->stack_id = stack_id;
	s->handle = 0;
	ms->st.segment_allocs++;
	add_kind_bytes(ms, kind, device, size);
	if (on_device(kind))
		record(ms, MEM_ACT_SEGMENT_ALLOC, device, addr, size, stream, stack_id, ts);
	return device;
}

int memsnap__segment_free(struct memsnap *ms, uint64_t ts, uint64_t addr)
{
	struct live *s = table_find(&ms->segments, addr);
	int device;

	if (!s || s->kind == MEM_SEG_MAPPED) {
		ms->st.segment_frees_unknown++;
		/* device unknown: 0 only to keep it in the history */
		record(ms, MEM_ACT_SEGMENT_FREE_UNKNOWN, 0, addr, 0, 0, -1, ts);
		return -1;
	}
	table_take(&ms->segments, addr);
	device = s->device;
	ms->st.segment_frees++;
	add_kind_bytes(ms, s->kind, device, -(int64_t)s->size);
	if (on_device(s->kind))
		record(ms, MEM_ACT_SEGMENT_FREE, device, addr, s->size, s->stream, -1, ts);
	free(s);
	return device;
}

int memsnap__handle_create(struct memsnap *ms, uint64_t ts, int device, uint64_t handle,
			   uint64_t size)
{
	struct live *h;

	if (!valid_device(device) || !handle)
		return -1;
	h = table_put(&ms->handles, handle);
	if (!h)
		return -1;
	h->size = size;
	h->device = device;
	h->ts = ts;
	if (device + 1 > ms->nr_devices)
		ms->nr_devices = device + 1;
	add_reserved(ms, device, size);
	return device;
}

int memsnap__handle_release(struct memsnap *ms, uint64_t ts, uint64_t handle)
{
	struct live *h = table_take(&ms->handles, handle);
	int device;

	if (!h) {
		ms->st.handles_released_unknown++;
		return -1;
	}
	device = h->device;
	add_reserved(ms, device, -(int64_t)h->size);
	free(h);
	return device;
}

int memsnap__map(struct memsnap *ms, uint64_t ts, uint64_t addr, uint64_t size, uint64_t handle,
		 int32_t stack_id)
{
	struct live *h = table_find(&ms->handles, handle), *s;
	int device = h ? h->device : 0;

	s = table_put(&ms->segments, addr);
	if (!s)
		return -1;
	s->size = size;
	s->ts = ts;
	s->device = device;
	s->kind = MEM_SEG_MAPPED;
	s->stack_id = stack_id;
	s->handle = handle;
	s->stream = 0;
	ms->st.maps++;
	record(ms, MEM_ACT_SEGMENT_MAP, device, addr, size, 0, stack_id, ts);
	return device;
}

int memsnap__unmap(struct memsnap *ms, uint64_t ts, uint64_t addr, uint64_t size)
{
	struct live *s = table_find(&ms->segments, addr);
	int device;

	if (!s || s->kind != MEM_SEG_MAPPED) {
		ms->st.unmaps_unknown++;
		return -1;
	}
	table_take(&ms->segments, addr);
	device = s->device;
	ms->st.unmaps++;
	record(ms, MEM_ACT_SEGMENT_UNMAP, device, addr, size ? size : s->size, 0, -1, ts);
	free(s);
	return device;
}

int memsnap__oom(struct memsnap *ms, uint64_t ts, int device, uint64_t size, uint64_t stream,
		 int32_t stack_id)
{
	if (!valid_device(device))
		device = 0;
	ms->st.ooms++;
	record(ms, MEM_ACT_OOM, device, 0, size, stream, stack_id, ts);
	return device;
}

const struct mem_device_bytes *memsnap__device(const struct memsnap *ms, int device)
{
	return valid_device(device) ? &ms->dev[device] : NULL;
}

int memsnap__nr_devices(const struct memsnap *ms)
{
	return ms->nr_devices;
}

const struct memsnap_stats *memsnap__stats(const struct memsnap *ms)
{
	return &ms->st;
}

int memsnap__device_of(const struct memsnap *ms, uint64_t addr, uint64_t *size)
{
	const struct live *e = table_find(&ms->blocks, addr);

	if (!e)
		e = table_find(&ms->segments, addr);
	if (!e)
		return -1;
	if (size)
		*size = e->size;
	return e->device;
}

/* ---- snapshot ---------------------------------------------------------------------------- */

/* memory_viz frames: Python ones first (innermost first), then native ones (line 0), as
 * PyTorch's snapshots order them; its "allocated by" views name the first Python frame. */
static cJSON *frames_json(const struct memsnap *ms, const struct memsnap_info *info,
			  int32_t stack_id)
{
	cJSON *arr = cJSON_CreateArray();
	struct mem_frame frames[64 + TP_PY_MAX_FRAMES];
	int n;

	if (!arr)
		return NULL;
	n = memsnap__frames(ms, info, stack_id, frames, 64 + TP_PY_MAX_FRAMES);
	for (int i = 0; i < n; i++) {
		cJSON *f = cJSON_CreateObject();

		cJSON_AddStringToObject(f, "filename", frames[i].filename);
		cJSON_AddNumberToObject(f, "line", frames[i].line);
		cJSON_AddStringToObject(f, "name", frames[i].name);
		cJSON_AddItemToArray(arr, f);
	}
	return arr;
}

/* Addresses, sizes and times as exact integers (cJSON numbers are doubles). */
static void add_u64(cJSON *o, const char *key, uint64_t v)
{
	char buf[24];

	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
	cJSON_AddItemToObject(o, key, cJSON_CreateRaw(buf));
}

/* A stream handle, or -1 where it is not known (cuMemMap ranges). */
static void add_stream(cJSON *o, uint64_t stream)
{
	if (stream == MEMLAYOUT_STREAM_UNKNOWN)
		cJSON_AddNumberToObject(o, "stream", -1);
	else
		add_u64(o, "stream", stream);
}

static uint64_t time_us(const struct memsnap *ms, uint64_t ts)
{
	int64_t rel = (int64_t)(ts - ms->base_mono);

	return (uint64_t)((int64_t)(ms->base_real / 1000) + rel / 1000);
}

static cJSON *block_json(uint64_t addr, uint64_t size, uint64_t requested, const char *state,
			 cJSON *frames)
{
	cJSON *b = cJSON_CreateObject();

	add_u64(b, "address", addr);
	add_u64(b, "size", size);
	add_u64(b, "requested_size", requested);
	cJSON_AddStringToObject(b, "state", state);
	cJSON_AddItemToObject(b, "frames", frames ? frames : cJSON_CreateArray());
	return b;
}

/* One memory_viz segment from the layout: blocks tile it in address order, gaps "inactive"
 * (cached by the allocator, or never carved). The pool is not known: PyTorch writes (0, 0)
 * for its default pool, and a private pool (CUDA graphs, MemPool) cannot be told apart here. */
static cJSON *segment_json(const struct memsnap *ms, const struct memsnap_info *info,
			   const struct memlayout *l, const struct memlayout_segment *seg)
{
	cJSON *s = cJSON_CreateObject(), *arr, *pool;

	if (!s)
		return NULL;
	cJSON_AddNumberToObject(s, "device", seg->device);
	add_u64(s, "address", seg->addr);
	add_u64(s, "total_size", seg->size);
	add_u64(s, "allocated_size", seg->allocated);
	/* no probe sees a block waiting for its streams (active_pending_free): active = allocated */
	add_u64(s, "active_size", seg->allocated);
	add_u64(s, "requested_size", seg->requested);
	add_stream(s, seg->stream);
	cJSON_AddStringToObject(s, "segment_type", seg->size <= SMALL_SEGMENT ? "small" : "large");
	pool = cJSON_AddArrayToObject(s, "segment_pool_id");
	cJSON_AddItemToArray(pool, cJSON_CreateNumber(0));
	cJSON_AddItemToArray(pool, cJSON_CreateNumber(0));
	cJSON_AddBoolToObject(s, "is_expandable", seg->expandable);
	cJSON_AddStringToObject(s, "tptrace_source", seg->source);
	if (seg->inferred)
		cJSON_AddBoolToObject(s, "tptrace_inferred", true);
	cJSON_AddItemToObject(s, "frames", frames_json(ms, info, seg->stack_id));
	arr = cJSON_AddArrayToObject(s, "blocks");
	for (size_t i = seg->first_block; i < seg->first_block + seg->nr_blocks; i++) {
		const struct memlayout_block *b = &l->blocks[i];

		cJSON_AddItemToArray(arr, block_json(b->addr, b->size, b->requested,
			b->active ? "active_allocated" : "inactive",
			b->active ? frames_json(ms, info, b->stack_id) : NULL));
	}
	return s;
}

static cJSON *segments_json(const struct memsnap *ms, const struct memlayout *l,
			    const struct memsnap_info *info)
{
	cJSON *arr = cJSON_CreateArray();

	for (size_t i = 0; arr && i < l->nr_segs; i++)
		cJSON_AddItemToArray(arr, segment_json(ms, info, l, &l->segs[i]));
	return arr;
}

static cJSON *traces_json(struct memsnap *ms, const struct memlayout *l,
			  const struct memsnap_info *info)
{
	cJSON *traces = cJSON_CreateArray(), *per_dev[MEMSNAP_MAX_DEVICES];

	for (int d = 0; d < ms->nr_devices; d++) {
		per_dev[d] = cJSON_CreateArray();
		cJSON_AddItemToArray(traces, per_dev[d]);
	}
	for (size_t i = 0; i < l->nr_events; i++) {
		const struct mem_event *e = &l->events[i].ev;
		cJSON *o = cJSON_CreateObject();

		cJSON_AddStringToObject(o, "action", action_names[e->action]);
		add_u64(o, "addr", e->addr);
		add_u64(o, "size", e->size);
		add_stream(o, e->stream);
		cJSON_AddItemToObject(o, "frames", frames_json(ms, info, e->stack_id));
		add_u64(o, "time_us", time_us(ms, e->ts));
		/* not known; memory_viz prints it as a number, so null would throw there */
		if (e->action == MEM_ACT_OOM) {
			cJSON_AddNumberToObject(o, "device_free", 0);
			cJSON_AddBoolToObject(o, "tptrace_device_free_known", false);
		}
		if (l->events[i].inferred)
			cJSON_AddBoolToObject(o, "tptrace_inferred", true);
		cJSON_AddItemToArray(per_dev[e->device], o);
	}
	return traces;
}

/* What memlayout needs: the history in order and what is live, as plain arrays. */
static struct memlayout *layout_of(struct memsnap *ms)
{
	struct mem_event *ev = malloc((ms->hist_nr + 1) * sizeof(*ev));
	struct memlayout_item *blocks = malloc((ms->blocks.nr + 1) * sizeof(*blocks));
	struct memlayout_item *segs = malloc((ms->segments.nr + 1) * sizeof(*segs));
	struct memlayout *l = NULL;
	size_t nb = 0, ns = 0;

	if (!ev || !blocks || !segs)
		goto out;
	for (size_t i = 0; i < ms->hist_nr; i++)
		ev[i] = ms->hist[(ms->hist_start + i) % ms->hist_cap];
	for (size_t i = 0; i < ms->blocks.nbuckets; i++)
		for (struct live *e = ms->blocks.buckets[i]; e; e = e->next)
			blocks[nb++] = (struct memlayout_item){ e->key, e->size, e->stream, e->stack_id,
								e->device, false, NULL };
	for (size_t i = 0; i < ms->segments.nbuckets; i++)
		for (struct live *e = ms->segments.buckets[i]; e; e = e->next)
			if (on_device(e->kind))
				segs[ns++] = (struct memlayout_item){ e->key, e->size, e->stream,
					e->stack_id, e->device, e->kind == MEM_SEG_MAPPED, seg_what[e->kind] };
	l = memlayout__build(ev, ms->hist_nr, blocks, nb, segs, ns);
out:
	free(ev);
	free(blocks);
	free(segs);
	return l;
}

static cJSON *settings_json(const struct memsnap_info *info)
{
	cJSON *o = cJSON_CreateObject();
	const char *conf = info ? info->alloc_conf : NULL;

	cJSON_AddStringToObject(o, "PYTORCH_CUDA_ALLOC_CONF", conf ? conf : "");
	cJSON_AddBoolToObject(o, "expandable_segments",
			      conf && strstr(conf, "expandable_segments:True"));
	cJSON_AddStringToObject(o, "tptrace_source", conf ? "environment of the process" :
				"PYTORCH_CUDA_ALLOC_CONF not set in the process: defaults");
	return o;
}

static cJSON *leaks_json(struct memsnap *ms, const struct memsnap_info *info)
{
	struct mem_leak_group *g = NULL;
	cJSON *arr = cJSON_CreateArray();
	int n = memsnap__leak_groups(ms, info, &g);
	char site[512];

	for (int i = 0; i < n; i++) {
		cJSON *o = cJSON_CreateObject();

		cJSON_AddStringToObject(o, "what", g[i].what);
		cJSON_AddNumberToObject(o, "device", g[i].device);
		add_u64(o, "size", g[i].size);
		cJSON_AddNumberToObject(o, "count", (double)g[i].count);
		cJSON_AddNumberToObject(o, "total", (double)g[i].total);
		cJSON_AddStringToObject(o, "call_site",
					memsnap__call_site(ms, info, g[i].stack_id, site, sizeof(site)));
		if (g[i].py_site)	/* the frames below are of one of them */
			cJSON_AddNumberToObject(o, "stacks", g[i].nr_stacks);
		cJSON_AddItemToObject(o, "frames", frames_json(ms, info, g[i].stack_id));
		cJSON_AddItemToArray(arr, o);
	}
	free(g);
	return arr;
}

cJSON *memsnap__snapshot(struct memsnap *ms, const struct memsnap_info *info)
{
	cJSON *root, *tp, *devs, *counts, *left;
	struct memlayout *l = layout_of(ms);
	const struct memlayout_issues *iss;
	char buf[32];

	if (!l)
		return NULL;
	root = cJSON_CreateObject();
	if (!root) {
		memlayout__free(l);
		return NULL;
	}
	iss = &l->issues;
	if (memlayout__issues_total(iss))
		log_error("memory snapshot: %llu allocations or segments that overlap "
			  "others or miss a free left out (see tptrace.left_out)\n",
			  (unsigned long long)memlayout__issues_total(iss));
	cJSON_AddItemToObject(root, "segments", segments_json(ms, l, info));
	cJSON_AddItemToObject(root, "device_traces", traces_json(ms, l, info));
	cJSON_AddItemToObject(root, "allocator_settings", settings_json(info));
	tp = cJSON_AddObjectToObject(root, "tptrace");
	cJSON_AddStringToObject(tp, "version", info && info->version ? info->version : "");
	if (info) {
		cJSON_AddNumberToObject(tp, "pid", info->pid);
		cJSON_AddStringToObject(tp, "comm", info->comm ? info->comm : "");
		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)info->attach_real_ns);
		cJSON_AddItemToObject(tp, "attach_unix_ns", cJSON_CreateRaw(buf));
		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)info->end_real_ns);
		cJSON_AddItemToObject(tp, "end_unix_ns", cJSON_CreateRaw(buf));
	}
	cJSON_AddStringToObject(tp, "unknown",
		"allocations before attach are not known: counters start at 0 at attach; frees of "
		"blocks or segments allocated before attach are counted (frees_unknown, "
		"segment_frees_unknown) but not in device_traces, whose device and size they lack; "
		"blocks (live or freed while tracing) with no segment seen around them lie in "
		"segments marked tptrace_inferred: true, tptrace_source: before_attach, spanning only "
		"the blocks seen (their real extent is unknown), alive from the start of the history "
		"unless a known segment held those addresses earlier and to its end unless one held "
		"them later; where bounded, their segment_alloc / segment_free events are marked "
		"tptrace_inferred and carry the time of the event next to them; an inferred segment "
		"ends at a cudaFree of an unknown pointer (segment_frees_unknown) at its first "
		"address once its blocks are gone, and otherwise stays to the end even if a cudaFree "
		"elsewhere in it returned it; the stream of a cuMemMap range is not known: -1; "
		"segment_pool_id is (0, 0), PyTorch's default pool, for every segment: private pools "
		"(CUDA graphs, MemPool) are not seen; segment_type is taken from the size (2 MiB or "
		"less: small); block sizes are the request rounded up to 512 bytes; free_completed "
		"carries the time of free_requested (no probe tells when the streams using a block "
		"are done); the device_free of an oom event is not known: 0, with "
		"tptrace_device_free_known: false (memory_viz formats it as a number); frames are "
		"Python frames first (with --py-stacks; innermost first, with their line), then "
		"native frames (line 0)");
	left = cJSON_AddObjectToObject(tp, "left_out");
	cJSON_AddNumberToObject(left, "blocks_reallocated_without_free", (double)iss->block_realloc);
	cJSON_AddNumberToObject(left, "blocks_overlapping_live_blocks", (double)iss->block_overlap);
	cJSON_AddNumberToObject(left, "blocks_crossing_a_segment", (double)iss->block_outside);
	cJSON_AddNumberToObject(left, "blocks_unplaceable", (double)iss->block_unplaced);
	cJSON_AddNumberToObject(left, "segments_reallocated_without_free", (double)iss->segment_realloc);
	cJSON_AddNumberToObject(left, "segments_overlapping_live_segments", (double)iss->segment_overlap);
	cJSON_AddNumberToObject(left, "history_and_state_disagree", (double)iss->state_mismatch);
	cJSON_AddNumberToObject(left, "empty_allocations", (double)iss->empty);
	cJSON_AddNumberToObject(tp, "inferred_segment_events", (double)l->inferred_bounds);
	counts = cJSON_AddObjectToObject(tp, "counts");
	cJSON_AddNumberToObject(counts, "allocs", (double)ms->st.allocs);
	cJSON_AddNumberToObject(counts, "frees", (double)ms->st.frees);
	cJSON_AddNumberToObject(counts, "frees_unknown", (double)ms->st.frees_unknown);
	cJSON_AddNumberToObject(counts, "segment_allocs", (double)ms->st.segment_allocs);
	cJSON_AddNumberToObject(counts, "segment_frees", (double)ms->st.segment_frees);
	cJSON_AddNumberToObject(counts, "segment_frees_unknown", (double)ms->st.segment_frees_unknown);
	cJSON_AddNumberToObject(counts, "maps", (double)ms->st.maps);
	cJSON_AddNumberToObject(counts, "unmaps", (double)ms->st.unmaps);
	cJSON_AddNumberToObject(counts, "unmaps_unknown", (double)ms->st.unmaps_unknown);
	cJSON_AddNumberToObject(counts, "handles_released_unknown",
				(double)ms->st.handles_released_unknown);
	cJSON_AddNumberToObject(counts, "ooms", (double)ms->st.ooms);
	cJSON_AddNumberToObject(counts, "history_dropped", (double)ms->st.history_dropped);
	cJSON_AddNumberToObject(tp, "pinned_host_bytes_live", (double)ms->st.host_bytes);
	cJSON_AddNumberToObject(tp, "managed_bytes_live", (double)ms->st.managed_bytes);
	devs = cJSON_AddArrayToObject(tp, "devices");
	for (int d = 0; d < ms->nr_devices; d++) {
		cJSON *o = cJSON_CreateObject();

		cJSON_AddNumberToObject(o, "device", d);
		cJSON_AddNumberToObject(o, "bytes_allocated", (double)ms->dev[d].allocated);
		cJSON_AddNumberToObject(o, "bytes_reserved", (double)ms->dev[d].reserved);
		cJSON_AddNumberToObject(o, "peak_bytes_allocated", (double)ms->dev[d].peak_allocated);
		cJSON_AddNumberToObject(o, "peak_bytes_reserved", (double)ms->dev[d].peak_reserved);
		cJSON_AddItemToArray(devs, o);
	}
	cJSON_AddItemToObject(tp, "live_by_call_site", leaks_json(ms, info));
	memlayout__free(l);
	return root;
}

/* ---- pickle ------------------------------------------------------------------------------ */

/* Protocol 2 opcodes; every reader of protocols 2-4 accepts them. */
static int put_pickle(const cJSON *item, FILE *f)
{
	/* PyTorch writes the pool id as a tuple; readers compare it with (0, 0) */
	if (cJSON_IsArray(item) && item->string && !strcmp(item->string, "segment_pool_id") &&
	    cJSON_GetArraySize(item) == 2) {
		put_pickle(item->child, f);
		put_pickle(item->child->next, f);
		fputc(0x86, f);				/* TUPLE2 */
	} else if (cJSON_IsObject(item) || cJSON_IsArray(item)) {
		bool dict = cJSON_IsObject(item);
		int n = 0;

		fputc(dict ? '}' : ']', f);		/* EMPTY_DICT / EMPTY_LIST */
		for (const cJSON *c = item->child; c; c = c->next) {
			if (n % 1000 == 0)
				fputc('(', f);		/* MARK */
			if (dict) {
				cJSON key = { .type = cJSON_String, .valuestring = c->string };

				put_pickle(&key, f);
			}
			put_pickle(c, f);
			if (++n % 1000 == 0)
				fputc(dict ? 'u' : 'e', f);	/* SETITEMS / APPENDS */
		}
		if (n % 1000)
			fputc(dict ? 'u' : 'e', f);
	} else if (cJSON_IsString(item)) {
		uint32_t len = strlen(item->valuestring);

		fputc('X', f);				/* BINUNICODE: 4-byte LE length, UTF-8 */
		fwrite(&len, 4, 1, f);
		fwrite(item->valuestring, 1, len, f);
	} else if (cJSON_IsBool(item)) {
		fputc(cJSON_IsTrue(item) ? 0x88 : 0x89, f);	/* NEWTRUE / NEWFALSE */
	} else if (cJSON_IsNumber(item) || cJSON_IsRaw(item)) {
		double v = cJSON_IsRaw(item) ? strtod(item->valuestring, NULL) : item->valuedouble;
		long long iv = cJSON_IsRaw(item) ? strtoll(item->valuestring, NULL, 10) : (long long)v;

		if (cJSON_IsRaw(item) || (v == (double)iv && v > -9.2e18 && v < 9.2e18)) {
			unsigned char bytes[8];
			int n = 8;

			/* LONG1: little-endian two's complement, trimmed to the shortest form */
			for (int i = 0; i < 8; i++)
				bytes[i] = (unsigned char)((unsigned long long)iv >> (8 * i));
			while (n > 1 && ((bytes[n - 1] == 0x00 && !(bytes[n - 2] & 0x80)) ||
					 (bytes[n - 1] == 0xff && (bytes[n - 2] & 0x80))))
				n--;
			fputc(0x8a, f);
			fputc(n, f);
			fwrite(bytes, 1, n, f);
		} else {
			unsigned char be[8];
			uint64_t bits;

			memcpy(&bits, &v, 8);
			for (int i = 0; i < 8; i++)
				be[i] = (unsigned char)(bits >> (56 - 8 * i));
			fputc('G', f);			/* BINFLOAT: big-endian double */
			fwrite(be, 1, 8, f);
		}
	} else {
		fputc('N', f);				/* None */
	}
	return ferror(f) ? -EIO : 0;
}

int memsnap__write_pickle(const cJSON *root, FILE *f)
{
	fputc(0x80, f);		/* PROTO 2 */
	fputc(2, f);
	put_pickle(root, f);
	fputc('.', f);		/* STOP */
	return ferror(f) ? -EIO : 0;
}

/* ---- live allocations by call site ------------------------------------------------------- */

const char *memsnap__call_site(const struct memsnap *ms, const struct memsnap_info *info,
			       int32_t stack_id, char *buf, int size)
{
	struct mem_frame frames[64 + TP_PY_MAX_FRAMES];
	int n = memsnap__frames(ms, info, stack_id, frames, 64 + TP_PY_MAX_FRAMES);

	buf[0] = '\0';
	for (int i = 0; i < n; i++) {
		if (frames[i].python) {
			snprintf(buf, size, "%s (%s:%d)", frames[i].name, frames[i].filename,
				 frames[i].line);
			break;
		}
		if (!frames[i].internal) {
			const char *base = strrchr(frames[i].filename, '/');

			snprintf(buf, size, "%s (%s)", frames[i].name, base ? base + 1 : frames[i].filename);
			break;
		}
	}
	return buf;
}

static uint64_t str_hash(const char *s, uint64_t h)
{
	for (; s && *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ULL;
	return h;
}

/* The Python call site of stack_id: a hash of its innermost Python frame (function, file,
 * line), 0 when it has no Python frame. */
static uint64_t py_site_of(const struct memsnap *ms, const struct memsnap_info *info,
			   int32_t stack_id)
{
	int32_t native;
	const struct ustack *u = py_stack_of(ms, info, stack_id, &native);
	const struct ustack_frame *f;
	uint64_t h;

	if (!u || !u->nr_py)
		return 0;
	f = &u->py[0];
	if (f->unresolved)	/* unnamed: only the same code object is the same site */
		h = f->code * 0x9e3779b97f4a7c15ULL;
	else
		h = str_hash(f->file, str_hash(f->func, 14695981039346656037ULL)) ^
		    (uint64_t)f->line * 0x100000001b3ULL;
	return h ? h : 1;
}

static int add_group(struct mem_leak_group **g, int *n, int *cap, const char *what, int device,
		     const struct live *e, uint64_t py_site)
{
	for (int i = 0; i < *n; i++) {
		struct mem_leak_group *x = &(*g)[i];

		if (x->device == device && x->size == e->size && !strcmp(x->what, what) &&
		    (py_site ? x->py_site == py_site : !x->py_site && x->stack_id == e->stack_id)) {
			x->count++;
			x->total += e->size;
			if (e->ts < x->first_ts)
				x->first_ts = e->ts;
			/* counts stacks that differ from the representative one, an upper bound
			 * when they alternate (kept cheap: no set per group) */
			if (py_site && x->stack_id != e->stack_id)
				x->nr_stacks++;
			return 0;
		}
	}
	if (ARRAY_RESERVE(*g, *cap, *n + 1, 32))
		return -ENOMEM;
	(*g)[(*n)++] = (struct mem_leak_group){ what, device, e->stack_id, e->size, 1, e->size, e->ts,
						py_site, 1 };
	return 0;
}

static int cmp_group(const void *a, const void *b)
{
	const struct mem_leak_group *x = a, *y = b;

	if (x->total != y->total)
		return x->total > y->total ? -1 : 1;
	if (x->count != y->count)
		return x->count > y->count ? -1 : 1;
	return x->first_ts < y->first_ts ? -1 : x->first_ts > y->first_ts;
}

/* Grouped by Python call site when the stack has Python frames (the line of the model that
 * allocated, whatever the native path below it), else by full native stack (stack id): two
 * native stacks through one call site stay apart, which keeps this free of symbolization;
 * the report names each group's call site. */
int memsnap__leak_groups(const struct memsnap *ms, const struct memsnap_info *info,
			 struct mem_leak_group **groups)
{
	struct mem_leak_group *g = NULL;
	int n = 0, cap = 0;

	*groups = NULL;
	for (size_t i = 0; i < ms->blocks.nbuckets; i++)
		for (struct live *e = ms->blocks.buckets[i]; e; e = e->next)
			if (add_group(&g, &n, &cap, "pytorch:malloc", e->device, e,
				      py_site_of(ms, info, e->stack_id))) {
				free(g);
				return -ENOMEM;
			}
	for (size_t i = 0; i < ms->segments.nbuckets; i++)
		for (struct live *e = ms->segments.buckets[i]; e; e = e->next)
			if (add_group(&g, &n, &cap, seg_what[e->kind], e->device, e,
				      py_site_of(ms, info, e->stack_id))) {
				free(g);
				return -ENOMEM;
			}
	if (n)
		qsort(g, n, sizeof(*g), cmp_group);
	*groups = g;
	return n;
}

/* A size as people read it: "512 B", "12.0 KiB", "20.0 MiB", "1.50 GiB". */
static const char *size_str(char *buf, size_t len, uint64_t bytes)
{
	if (bytes < 1024)
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	else if (bytes < (1ULL << 20))
		snprintf(buf, len, "%.1f KiB", bytes / 1024.0);
	else if (bytes < (1ULL << 30))
		snprintf(buf, len, "%.1f MiB", bytes / (double)(1ULL << 20));
	else
		snprintf(buf, len, "%.2f GiB", bytes / (double)(1ULL << 30));
	return buf;
}

static void print_group(const struct memsnap *ms, const struct mem_leak_group *g,
			const struct memsnap_info *info, FILE *f)
{
	struct mem_frame frames[64 + TP_PY_MAX_FRAMES];
	char site[512], dev[16], total[24], size[24];
	int n = 0;

	if (g->device >= 0)
		snprintf(dev, sizeof(dev), "cuda:%d", g->device);
	else
		snprintf(dev, sizeof(dev), "host");
	memsnap__call_site(ms, info, g->stack_id, site, sizeof(site));
	fprintf(f, "  %s: %llu x %s  %s  %s  at %s\n", size_str(total, sizeof(total), g->total),
		(unsigned long long)g->count, size_str(size, sizeof(size), g->size), dev, g->what,
		site[0] ? site : "[no stack]");
	if (g->py_site && g->nr_stacks > 1)
		fprintf(f, "    (from more than one path; the first one:)\n");
	n = memsnap__frames(ms, info, g->stack_id, frames, 64 + TP_PY_MAX_FRAMES);
	for (int i = 0; i < n; i++) {
		if (frames[i].python)	/* the Python chain, as a traceback reads: file:line func */
			fprintf(f, "      #%-2d %s:%d %s\n", i, frames[i].filename, frames[i].line,
				frames[i].name);
		else
			fprintf(f, "      #%-2d 0x%llx %s (%s)\n", i, (unsigned long long)frames[i].addr,
				frames[i].name, frames[i].filename[0] ? frames[i].filename : "?");
	}
}

void memsnap__leak_report(const struct memsnap *ms, const struct memsnap_info *info, FILE *f)
{
	struct mem_leak_group *g = NULL;
	uint64_t blocks = 0, block_bytes = 0, segs = 0, seg_bytes = 0;
	int n = memsnap__leak_groups(ms, info, &g);
	char sz[24];

	for (int i = 0; i < n; i++) {
		if (!strcmp(g[i].what, "pytorch:malloc")) {
			blocks += g[i].count;
			block_bytes += g[i].total;
		} else {
			segs += g[i].count;
			seg_bytes += g[i].total;
		}
	}
	fprintf(f, "pid %d (%s): live allocations made since attach, largest first\n",
		info ? info->pid : 0, info && info->comm ? info->comm : "?");
	fprintf(f, "  (allocations made before attach are not known; %s)\n",
		info && info->ustack_lookup ? "grouped by Python call site where the allocating "
		"thread ran Python, else by native stack" : "native stacks only: Python stacks "
		"with --py-stacks");
	fprintf(f, "tensor blocks (pytorch:malloc): %llu live, %s\n", (unsigned long long)blocks,
		size_str(sz, sizeof(sz), block_bytes));
	for (int i = 0; i < n; i++)
		if (!strcmp(g[i].what, "pytorch:malloc"))
			print_group(ms, &g[i], info, f);
	fprintf(f, "segments and direct allocations (cudaMalloc & co): %llu live, %s\n",
		(unsigned long long)segs, size_str(sz, sizeof(sz), seg_bytes));
	for (int i = 0; i < n; i++)
		if (strcmp(g[i].what, "pytorch:malloc"))
			print_group(ms, &g[i], info, f);
	free(g);
}
