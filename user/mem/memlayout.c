// SPDX-License-Identifier: MIT
/* See memlayout.h for what memory_viz needs and the rules this follows. Times below are
 * indices into the history: an instance (one lifetime of a block or segment) runs from its
 * first event to its last, -1 standing for "before the history" and nr_events for "still
 * live at the end". Two instances clash when their extents and their lifetimes overlap. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "growbuf.h"
#include "hashmap.h"
#include "memlayout.h"

/* PyTorch rounds blocks up to 512 bytes (kMinBlockSize): the slot a block takes in a
 * segment, and how close two blocks must lie to be taken for one inferred segment. */
#define BLOCK_ROUND 512ULL

enum { INST_BLOCK, INST_SEGMENT, INST_MAP };

struct inst {
	uint64_t lo, hi;		/* [lo, hi): requested bytes for blocks */
	uint64_t stream;
	int64_t start, end;		/* -1: before the history; nr: live at the end */
	int64_t ev[3];			/* alloc, free_requested, free_completed; -1 none */
	int32_t stack_id;
	int device;
	uint8_t what;
	bool dropped;
	bool live;			/* matched with what is live at the end */
	const char *source;
	int64_t comp;			/* inferred segment holding it, -1 */
};

struct insts {
	struct inst *v;
	size_t nr, cap;
};

/* An inferred segment: an extent and a lifetime on one device. */
struct infer {
	uint64_t lo, hi, stream;
	int64_t start, end;
	int64_t last;		/* the last event of its last block */
	int device;
};

static uint64_t round_up(uint64_t size)
{
	if (size < BLOCK_ROUND)
		return BLOCK_ROUND;
	return (size + BLOCK_ROUND - 1) / BLOCK_ROUND * BLOCK_ROUND;
}

/* The end of the slot a block takes: its request rounded up. */
static uint64_t slot_end(const struct inst *b)
{
	return b->lo + round_up(b->hi - b->lo);
}

static bool is_segment_action(uint8_t action)
{
	return action >= MEM_ACT_SEGMENT_ALLOC && action <= MEM_ACT_SEGMENT_UNMAP;
}

static uint8_t inst_kind(uint8_t action)
{
	if (!is_segment_action(action))
		return INST_BLOCK;
	if (action == MEM_ACT_SEGMENT_MAP || action == MEM_ACT_SEGMENT_UNMAP)
		return INST_MAP;
	return INST_SEGMENT;
}

/* Addresses are unique across devices (unified addressing), the device in the key keeps two
 * tables apart anyway; never 0 (the map's empty key). */
static uint64_t key_of(int device, uint64_t addr)
{
	return (addr & ((1ULL << 56) - 1)) | ((uint64_t)(device + 1) << 56);
}

static struct inst *inst_new(struct insts *s, uint8_t what, int device, uint64_t lo, uint64_t size)
{
	struct inst *in;

	if (ARRAY_RESERVE(s->v, s->cap, s->nr + 1, 256))
		return NULL;
	in = &s->v[s->nr++];
	memset(in, 0, sizeof(*in));
	in->what = what;
	in->device = device;
	in->lo = lo;
	in->hi = lo + size;
	in->start = -1;
	in->ev[0] = in->ev[1] = in->ev[2] = -1;
	in->stack_id = -1;
	in->comp = -1;
	return in;
}

static bool times_overlap(const struct inst *a, const struct inst *b)
{
	return a->start <= b->end && b->start <= a->end;
}

static bool extents_overlap(uint64_t lo1, uint64_t hi1, uint64_t lo2, uint64_t hi2)
{
	return lo1 < hi2 && lo2 < hi1;
}

/* ---- instances from the history and the live state ---------------------------------------- */

/* Pairs every event with the instance it belongs to (ev_inst[i], index + 1; 0: none; -1: an
 * empty allocation, left out). A block
 * allocated again at its address without a free leaves its first lifetime out: memory_viz
 * would remove one block twice. Likewise segments. */
static int pair_events(const struct mem_event *ev, size_t n, struct insts *blocks,
		       struct insts *segs, int64_t *ev_inst, struct memlayout_issues *iss)
{
	struct u64map open_blocks = {}, open_segs = {};
	int err = 0;

	for (size_t i = 0; i < n; i++) {
		const struct mem_event *e = &ev[i];
		bool seg = is_segment_action(e->action);
		struct u64map *open = seg ? &open_segs : &open_blocks;
		struct insts *set = seg ? segs : blocks;
		uint64_t key = key_of(e->device, e->addr), cur = 0;
		struct inst *in;

		ev_inst[i] = 0;
		if (e->action == MEM_ACT_OOM)
			continue;
		if (e->action == MEM_ACT_SEGMENT_FREE_UNKNOWN) {
			ev_inst[i] = -1;	/* not drawn; may end an inferred segment */
			continue;
		}
		if (!e->addr || !e->size) {	/* cudaMalloc(0) and the like: nothing to draw */
			ev_inst[i] = -1;
			if (e->action == MEM_ACT_ALLOC || e->action == MEM_ACT_SEGMENT_ALLOC ||
			    e->action == MEM_ACT_SEGMENT_MAP)
				iss->empty++;
			continue;
		}
		u64map__get(open, key, &cur);
		switch (e->action) {
		case MEM_ACT_ALLOC:
		case MEM_ACT_SEGMENT_ALLOC:
		case MEM_ACT_SEGMENT_MAP:
			if (cur) {	/* its free was not seen */
				set->v[cur - 1].dropped = true;
				set->v[cur - 1].end = i - 1;
				if (seg)
					iss->segment_realloc++;
				else
					iss->block_realloc++;
			}
			in = inst_new(set, inst_kind(e->action), e->device, e->addr, e->size);
			if (!in)
				goto nomem;
			in->start = i;
			in->end = n;
			in->ev[0] = i;
			in->stack_id = e->stack_id;
			in->stream = e->stream;
			cur = set->nr;
			break;
		case MEM_ACT_FREE_REQUESTED:
		case MEM_ACT_FREE_COMPLETED:
		case MEM_ACT_SEGMENT_FREE:
		case MEM_ACT_SEGMENT_UNMAP:
			if (!cur) {	/* allocated before the oldest entry kept */
				in = inst_new(set, inst_kind(e->action), e->device, e->addr,
					      e->size);
				if (!in)
					goto nomem;
				in->stream = e->stream;
				cur = set->nr;
			}
			in = &set->v[cur - 1];
			in->ev[e->action == MEM_ACT_FREE_REQUESTED ? 1 : 2] = i;
			in->end = i;
			break;
		default:
			continue;
		}
		ev_inst[i] = cur;
		if (e->action == MEM_ACT_FREE_REQUESTED)
			err = u64map__set(open, key, cur);
		else
			err = u64map__set(open, key, set->v[cur - 1].end == (int64_t)n ? cur : 0);
		if (err)
			goto out;
	}
	goto out;
nomem:
	err = -ENOMEM;
out:
	u64map__clear(&open_blocks);
	u64map__clear(&open_segs);
	return err;
}

/* Links what is live at the end to the open instances; what the history does not show (its
 * allocation dropped from the ring) gets an instance over the whole history. */
static int match_live(struct insts *set, const struct memlayout_item *items, size_t nr, bool seg,
		      int64_t n, uint64_t *mismatch)
{
	struct u64map open = {};
	int err = 0;

	for (size_t i = 0; i < set->nr && !err; i++)
		if (set->v[i].end == n && !set->v[i].dropped)
			err = u64map__set(&open, key_of(set->v[i].device, set->v[i].lo), i + 1);
	for (size_t i = 0; i < nr && !err; i++) {
		const struct memlayout_item *it = &items[i];
		uint64_t cur = 0;
		struct inst *in;

		if (!it->addr || !it->size)
			continue;	/* counted with its event, or its event is gone */

		if (u64map__get(&open, key_of(it->device, it->addr), &cur) && cur) {
			in = &set->v[cur - 1];
			in->hi = in->lo + it->size;
		} else {
			uint8_t kind = seg ? (it->mapped ? INST_MAP : INST_SEGMENT) : INST_BLOCK;

			in = inst_new(set, kind, it->device, it->addr, it->size);
			if (!in) {
				err = -ENOMEM;
				break;
			}
			in->end = n;
			in->stream = it->stream;
			in->stack_id = it->stack_id;
		}
		in->live = true;
		in->source = it->source;
		err = u64map__set(&open, key_of(it->device, it->addr), 0);
	}
	/* open in the history but not live: the state and the history disagree */
	for (size_t i = 0; i < set->nr; i++) {
		if (set->v[i].end == n && !set->v[i].live && !set->v[i].dropped) {
			set->v[i].dropped = true;
			(*mismatch)++;
		}
	}
	u64map__clear(&open);
	return err;
}

/* ---- clashes ------------------------------------------------------------------------------ */

/* A live set ordered by (device, lo), for the sweep below. */
struct sweep {
	struct inst **v;
	size_t nr, cap;
};

static int cmp_pos(const struct inst *a, int device, uint64_t lo)
{
	if (a->device != device)
		return a->device < device ? -1 : 1;
	return a->lo < lo ? -1 : a->lo > lo;
}

static size_t sweep_find(const struct sweep *s, int device, uint64_t lo)
{
	size_t l = 0, r = s->nr;

	while (l < r) {
		size_t m = (l + r) / 2;

		if (cmp_pos(s->v[m], device, lo) < 0)
			l = m + 1;
		else
			r = m;
	}
	return l;
}

/* Inserts in unless it overlaps a member; false then. */
static int sweep_insert(struct sweep *s, struct inst *in, bool *clash)
{
	size_t at = sweep_find(s, in->device, in->lo);

	*clash = (at < s->nr && s->v[at]->device == in->device && s->v[at]->lo < in->hi) ||
		 (at > 0 && s->v[at - 1]->device == in->device && s->v[at - 1]->hi > in->lo);
	if (*clash)
		return 0;
	if (ARRAY_RESERVE(s->v, s->cap, s->nr + 1, 256))
		return -ENOMEM;
	memmove(&s->v[at + 1], &s->v[at], (s->nr - at) * sizeof(*s->v));
	s->v[at] = in;
	s->nr++;
	return 0;
}

static void sweep_remove(struct sweep *s, struct inst *in)
{
	size_t at = sweep_find(s, in->device, in->lo);

	for (; at < s->nr && s->v[at]->device == in->device && s->v[at]->lo == in->lo; at++) {
		if (s->v[at] == in) {
			memmove(&s->v[at], &s->v[at + 1], (s->nr - at - 1) * sizeof(*s->v));
			s->nr--;
			return;
		}
	}
}

/* Replays the lifetimes in order and leaves out an instance that overlaps one live at the
 * same time (the later one: the earlier was seen first). */
static int drop_clashes(struct insts *set, const int64_t *ev_inst, size_t n, uint64_t *count)
{
	struct sweep live = {};
	bool clash;
	int err = 0;

	for (size_t i = 0; i < set->nr && !err; i++) {
		struct inst *in = &set->v[i];

		if (in->start < 0 && !in->dropped) {
			err = sweep_insert(&live, in, &clash);
			if (clash) {
				in->dropped = true;
				(*count)++;
			}
		}
	}
	for (size_t i = 0; i < n && !err; i++) {
		struct inst *in;

		if (!ev_inst[i])
			continue;
		in = &set->v[ev_inst[i] - 1];
		if ((int64_t)i != in->start && (int64_t)i != in->end)
			continue;
		if (in->dropped) {
			if ((int64_t)i == in->end)
				sweep_remove(&live, in);	/* a no-op unless it was in */
			continue;
		}
		if ((int64_t)i == in->start) {
			err = sweep_insert(&live, in, &clash);
			if (clash) {
				in->dropped = true;
				(*count)++;
			}
		} else {
			sweep_remove(&live, in);
		}
	}
	free(live.v);
	return err;
}

/* ---- which segment holds each block -------------------------------------------------------- */

static int cmp_inst_ptr(const void *a, const void *b)
{
	const struct inst *x = *(const struct inst *const *)a, *y = *(const struct inst *const *)b;

	if (x->device != y->device)
		return x->device < y->device ? -1 : 1;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Known segments by (device, lo), with the highest end so far, to find those overlapping an
 * extent. */
struct seg_index {
	struct inst **v;
	uint64_t *max_hi;
	size_t nr;
};

static int seg_index_build(struct seg_index *x, struct insts *segs)
{
	x->v = malloc((segs->nr + 1) * sizeof(*x->v));
	x->max_hi = malloc((segs->nr + 1) * sizeof(*x->max_hi));
	x->nr = 0;
	if (!x->v || !x->max_hi)
		return -ENOMEM;
	for (size_t i = 0; i < segs->nr; i++)
		if (!segs->v[i].dropped)
			x->v[x->nr++] = &segs->v[i];
	qsort(x->v, x->nr, sizeof(*x->v), cmp_inst_ptr);
	for (size_t i = 0; i < x->nr; i++)
		x->max_hi[i] = (i && x->v[i - 1]->device == x->v[i]->device &&
				x->max_hi[i - 1] > x->v[i]->hi) ? x->max_hi[i - 1] : x->v[i]->hi;
	return 0;
}

/* Calls fn for each known segment overlapping [lo, hi) on device; stops when fn returns
 * false. */
static void seg_index_each(const struct seg_index *x, int device, uint64_t lo, uint64_t hi,
			   bool (*fn)(struct inst *seg, void *ctx), void *ctx)
{
	size_t l = 0, r = x->nr;

	while (l < r) {		/* first with (device, lo) >= (device, hi) */
		size_t m = (l + r) / 2;

		if (cmp_pos(x->v[m], device, hi) < 0)
			l = m + 1;
		else
			r = m;
	}
	while (l-- > 0) {
		if (x->v[l]->device != device || x->max_hi[l] <= lo)
			break;
		if (x->v[l]->hi > lo && !fn(x->v[l], ctx))
			return;
	}
}

struct cover {
	const struct inst *blk;
	struct inst *runs[64];	/* segments alive over all of its lifetime */
	int nr_runs;
	bool crossed;		/* one overlaps it for part of its lifetime only */
};

static bool contains_lifetime(const struct inst *seg, const struct inst *blk)
{
	return seg->start <= blk->start && blk->end <= seg->end &&
	       (seg->start < blk->start || blk->start < 0) &&
	       (blk->end < seg->end || seg->end == blk->end);
}

static bool cover_fn(struct inst *seg, void *ctx)
{
	struct cover *c = ctx;

	if (!times_overlap(seg, c->blk))
		return true;
	if (!contains_lifetime(seg, c->blk) || c->nr_runs == 64) {
		c->crossed = true;
		return false;
	}
	c->runs[c->nr_runs++] = seg;
	return true;
}

/* 1: inside known segments over all of its life; 0: in none (an inferred one must hold it);
 * -1: crosses a known segment's edge or lifetime. Contiguous cuMemMap ranges hold a block
 * together (memory_viz merges them, as the allocator's expandable segments do). */
static int covered(const struct seg_index *x, const struct inst *blk)
{
	struct cover c = { .blk = blk };
	uint64_t at = blk->lo;

	seg_index_each(x, blk->device, blk->lo, blk->hi, cover_fn, &c);
	if (c.crossed)
		return -1;
	if (!c.nr_runs)
		return 0;
	qsort(c.runs, c.nr_runs, sizeof(c.runs[0]), cmp_inst_ptr);
	for (int i = 0; i < c.nr_runs; i++) {
		if (c.runs[i]->lo > at || (c.nr_runs > 1 && c.runs[i]->what != INST_MAP))
			return -1;
		at = c.runs[i]->hi;
	}
	return at >= blk->hi ? 1 : -1;
}

/* ---- inferred segments --------------------------------------------------------------------- */

struct forbid {
	int64_t *lo, *hi;	/* lifetimes of known segments over a component, merged */
	size_t nr;
};

static bool forbid_fn(struct inst *seg, void *ctx)
{
	struct forbid *f = ctx;

	f->lo[f->nr] = seg->start;
	f->hi[f->nr++] = seg->end;
	return true;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

/* Merges overlapping intervals (lo[] and hi[] sorted on their own: a union of intervals has
 * the same boundaries whichever lo goes with whichever hi). */
static void forbid_merge(struct forbid *f)
{
	size_t k = 0;

	qsort(f->lo, f->nr, sizeof(*f->lo), cmp_i64);
	qsort(f->hi, f->nr, sizeof(*f->hi), cmp_i64);
	for (size_t i = 0; i < f->nr; i++) {
		if (k && f->lo[i] <= f->hi[k - 1]) {
			if (f->hi[i] > f->hi[k - 1])
				f->hi[k - 1] = f->hi[i];
			continue;
		}
		f->lo[k] = f->lo[i];
		f->hi[k++] = f->hi[i];
	}
	f->nr = k;
}

/* The window (gap between forbidden intervals) holding [start, end], or -1. */
static int64_t window_of(const struct forbid *f, int64_t start, int64_t end)
{
	size_t w = 0;

	while (w < f->nr && f->hi[w] < start)
		w++;
	if (w < f->nr && f->lo[w] <= end)
		return -1;
	return w;
}

struct inferset {
	struct infer *v;
	size_t nr, cap;
};

static struct infer *infer_new(struct inferset *s)
{
	if (ARRAY_RESERVE(s->v, s->cap, s->nr + 1, 64))
		return NULL;
	memset(&s->v[s->nr], 0, sizeof(s->v[0]));
	return &s->v[s->nr++];
}

static int cmp_window_lo(const void *a, const void *b)
{
	const struct inst *x = *(const struct inst *const *)a, *y = *(const struct inst *const *)b;

	if (x->comp != y->comp)		/* comp holds the window while grouping */
		return x->comp < y->comp ? -1 : 1;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Groups of members (one window, blocks within 512 bytes of each other) become inferred
 * segments over [first lo, last hi): alive from the start of the history in the first window,
 * to its end in the last; in between, bounded by the members' own lifetimes. */
static int infer_groups(struct inst **m, size_t nr, const struct forbid *f, int64_t n,
			struct inferset *out)
{
	size_t i = 0;

	qsort(m, nr, sizeof(*m), cmp_window_lo);
	while (i < nr) {
		int64_t window = m[i]->comp;
		struct infer *g = infer_new(out);
		uint64_t reach;

		if (!g)
			return -ENOMEM;
		g->device = m[i]->device;
		g->lo = m[i]->lo;
		g->hi = m[i]->hi;
		g->stream = m[i]->stream;
		g->start = m[i]->start;
		g->end = m[i]->end;
		reach = slot_end(m[i]);
		for (; i < nr && m[i]->comp == window && m[i]->lo <= reach; i++) {
			if (m[i]->hi > g->hi)
				g->hi = m[i]->hi;
			if (m[i]->lo + round_up(m[i]->hi - m[i]->lo) > reach)
				reach = slot_end(m[i]);
			if (m[i]->start < g->start)
				g->start = m[i]->start;
			if (m[i]->end > g->end)
				g->end = m[i]->end;
			m[i]->comp = out->nr - 1;
		}
		g->last = g->end;
		if (window == 0)
			g->start = -1;
		if (window == (int64_t)f->nr)
			g->end = n;
	}
	return 0;
}

/* Uncovered blocks (sorted by device, lo) into inferred segments, component by component:
 * blocks within 512 bytes of each other over the whole history form a component; the known
 * segments that overlap it at some time cut its time into windows. A block whose lifetime
 * spans such a cut goes in a segment of its own if its slot touches no other block of the
 * component, else it is left out. */
static int infer_segments(struct inst **u, size_t nr, const struct seg_index *x, int64_t n,
			  struct inferset *out, struct memlayout_issues *iss)
{
	struct forbid f = {};
	size_t i = 0;
	int err = 0;

	f.lo = malloc((x->nr + 1) * sizeof(*f.lo));
	f.hi = malloc((x->nr + 1) * sizeof(*f.hi));
	if (!f.lo || !f.hi) {
		err = -ENOMEM;
		goto out;
	}
	while (i < nr && !err) {
		size_t j = i + 1, fit = i;
		uint64_t lo = u[i]->lo, hi = u[i]->hi, reach = slot_end(u[i]);

		while (j < nr && u[j]->device == u[i]->device && u[j]->lo <= reach) {
			if (u[j]->hi > hi)
				hi = u[j]->hi;
			if (slot_end(u[j]) > reach)
				reach = slot_end(u[j]);
			j++;
		}
		f.nr = 0;
		seg_index_each(x, u[i]->device, lo, hi, forbid_fn, &f);
		forbid_merge(&f);
		/* members that fit a window first, in u[i..fit) */
		for (size_t k = i; k < j; k++) {
			u[k]->comp = window_of(&f, u[k]->start, u[k]->end);
			if (u[k]->comp >= 0) {
				struct inst *t = u[fit];

				u[fit++] = u[k];
				u[k] = t;
			}
		}
		err = infer_groups(u + i, fit - i, &f, n, out);
		for (size_t k = fit; k < j && !err; k++) {
			uint64_t slot_hi = slot_end(u[k]);
			struct forbid own = { f.lo, f.hi, 0 };
			bool alone = true;

			for (size_t o = i; o < j && alone; o++)
				if (o != k &&
				    extents_overlap(u[k]->lo, slot_hi, u[o]->lo, slot_end(u[o])))
					alone = false;
			if (alone) {
				seg_index_each(x, u[k]->device, u[k]->lo, u[k]->hi, forbid_fn,
					       &own);
				forbid_merge(&own);
				u[k]->comp = window_of(&own, u[k]->start, u[k]->end);
			}
			if (!alone || u[k]->comp < 0) {
				u[k]->dropped = true;
				u[k]->comp = -1;
				iss->block_unplaced++;
				continue;
			}
			err = infer_groups(&u[k], 1, &own, n, out);
		}
		i = j;
	}
out:
	free(f.lo);
	free(f.hi);
	return err;
}

/* A cudaFree of a pointer never seen allocated, at the first address of an inferred segment
 * that would last to the end and whose blocks are all gone by then: that segment, returned.
 * (A free elsewhere in it may be another segment's: then nothing is assumed.) */
static int end_at_unknown_frees(const struct mem_event *ev, size_t n, struct inferset *inf)
{
	struct u64map by_lo = {};
	int err = 0;

	for (size_t i = 0; i < inf->nr && !err; i++)
		if (inf->v[i].end == (int64_t)n)
			err = u64map__set(&by_lo, inf->v[i].lo, i + 1);
	for (size_t i = 0; i < n && !err; i++) {
		uint64_t g = 0;

		if (ev[i].action != MEM_ACT_SEGMENT_FREE_UNKNOWN || !ev[i].addr ||
		    !u64map__get(&by_lo, ev[i].addr, &g) || !g)
			continue;
		if (inf->v[g - 1].last < (int64_t)i && inf->v[g - 1].end == (int64_t)n) {
			inf->v[g - 1].end = i;
			err = u64map__set(&by_lo, ev[i].addr, 0);
		}
	}
	u64map__clear(&by_lo);
	return err;
}

/* ---- output -------------------------------------------------------------------------------- */

struct final_seg {
	uint64_t lo, hi, stream;
	int device;
	int32_t stack_id;
	const char *source;
	bool inferred, mapped;
};

static int cmp_final(const void *a, const void *b)
{
	const struct final_seg *x = a, *y = b;

	if (x->device != y->device)
		return x->device < y->device ? -1 : 1;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static int push_block(struct memlayout *l, size_t *cap, uint64_t addr, uint64_t size,
		      uint64_t requested, int32_t stack_id, bool active)
{
	if (ARRAY_RESERVE(l->blocks, *cap, l->nr_blocks + 1, 256))
		return -ENOMEM;
	l->blocks[l->nr_blocks++] = (struct memlayout_block){ addr, size, requested, stack_id,
							      active };
	return 0;
}

/* Final segments (cuMemMap ranges that touch merged into one, as memory_viz shows an
 * expandable segment) tiled by the live blocks in address order. */
static int build_final(struct memlayout *l, struct insts *segs, struct inferset *inf,
		       struct inst **live_blocks, size_t nr_live, int64_t n)
{
	struct final_seg *f = malloc((segs->nr + inf->nr + 1) * sizeof(*f));
	size_t nr = 0, bi = 0, cap = 0;
	int err = 0;

	if (!f)
		return -ENOMEM;
	for (size_t i = 0; i < segs->nr; i++) {
		struct inst *s = &segs->v[i];

		if (s->dropped || s->end != n)
			continue;
		f[nr++] = (struct final_seg){ s->lo, s->hi,
			s->what == INST_MAP ? MEMLAYOUT_STREAM_UNKNOWN : s->stream, s->device,
			s->stack_id,
			s->source ? s->source : (s->what == INST_MAP ? "cuMemMap" : "cudaMalloc"),
			false, s->what == INST_MAP };
	}
	for (size_t i = 0; i < inf->nr; i++)
		if (inf->v[i].end == n)
			f[nr++] = (struct final_seg){ inf->v[i].lo, inf->v[i].hi, inf->v[i].stream,
				inf->v[i].device, -1, "before_attach", true, false };
	qsort(f, nr, sizeof(*f), cmp_final);
	l->segs = calloc(nr + 1, sizeof(*l->segs));
	if (!l->segs) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < nr && !err; i++) {
		struct memlayout_segment *s = &l->segs[l->nr_segs++];
		uint64_t cursor;

		*s = (struct memlayout_segment){ .addr = f[i].lo, .size = f[i].hi - f[i].lo,
			.stream = f[i].stream, .device = f[i].device, .stack_id = f[i].stack_id,
			.source = f[i].source, .inferred = f[i].inferred, .expandable = f[i].mapped,
			.first_block = l->nr_blocks };
		while (f[i].mapped && i + 1 < nr && f[i + 1].mapped &&
		       f[i + 1].device == s->device && f[i + 1].lo == s->addr + s->size) {
			i++;
			s->size += f[i].hi - f[i].lo;
		}
		while (bi < nr_live && (live_blocks[bi]->device < s->device ||
		       (live_blocks[bi]->device == s->device && live_blocks[bi]->lo < s->addr)))
			bi++;	/* not reached: every live block lies in a segment */
		cursor = s->addr;
		for (; bi < nr_live && !err && live_blocks[bi]->device == s->device &&
		       live_blocks[bi]->lo < s->addr + s->size; bi++) {
			struct inst *b = live_blocks[bi];
			uint64_t next = s->addr + s->size, slot = round_up(b->hi - b->lo);

			if (bi + 1 < nr_live && live_blocks[bi + 1]->device == s->device &&
			    live_blocks[bi + 1]->lo < next)
				next = live_blocks[bi + 1]->lo;
			/* never below the request: live blocks do not overlap */
			if (b->lo + slot > next)
				slot = next - b->lo;
			if (b->lo > cursor)
				err = push_block(l, &cap, cursor, b->lo - cursor, 0, -1, false);
			if (!err)
				err = push_block(l, &cap, b->lo, slot, b->hi - b->lo, b->stack_id,
						 true);
			s->allocated += slot;
			s->requested += b->hi - b->lo;
			cursor = b->lo + slot;
		}
		if (!err && cursor < s->addr + s->size)
			err = push_block(l, &cap, cursor, s->addr + s->size - cursor, 0, -1, false);
		s->nr_blocks = l->nr_blocks - s->first_block;
	}
out:
	free(f);
	return err;
}

/* The history minus what was left out, with the bounds of inferred segments that do not span
 * all of it: segment_alloc just before their first block, segment_free just after their last. */
static int build_events(struct memlayout *l, const struct mem_event *ev, size_t n,
			const int64_t *ev_inst, struct insts *blocks, struct insts *segs,
			struct inferset *inf)
{
	size_t cap = n + 2 * inf->nr + 1;
	int64_t *before = calloc(n + 1, sizeof(*before)), *after = calloc(n + 1, sizeof(*after));
	int err = 0;

	l->events = calloc(cap, sizeof(*l->events));
	if (!l->events || !before || !after) {
		err = -ENOMEM;
		goto out;
	}
	/* at most one bound per event: it starts or ends one block, in one inferred segment */
	for (size_t i = 0; i < inf->nr; i++) {
		if (inf->v[i].start >= 0)
			before[inf->v[i].start] = i + 1;
		if (inf->v[i].end < (int64_t)n)
			after[inf->v[i].end] = i + 1;
	}
	for (size_t i = 0; i < n; i++) {
		const struct mem_event *e = &ev[i];
		struct inst *in = NULL;

		if (ev_inst[i] > 0)
			in = is_segment_action(e->action) ? &segs->v[ev_inst[i] - 1] :
							    &blocks->v[ev_inst[i] - 1];
		if (ev_inst[i] < 0 || (in && in->dropped))
			goto bound_after;	/* not drawn; an inferred segment may end here */
		if (before[i]) {
			const struct infer *g = &inf->v[before[i] - 1];

			l->events[l->nr_events++] = (struct memlayout_event){
				{ MEM_ACT_SEGMENT_ALLOC, g->device, -1, g->lo, g->hi - g->lo,
				  g->stream, e->ts }, true };
			l->inferred_bounds++;
		}
		l->events[l->nr_events] = (struct memlayout_event){ *e, false };
		/* an unmap of part of a range is recorded as the whole range going */
		if (in && e->action == MEM_ACT_SEGMENT_UNMAP)
			l->events[l->nr_events].ev.size = in->hi - in->lo;
		if (e->action == MEM_ACT_SEGMENT_MAP || e->action == MEM_ACT_SEGMENT_UNMAP)
			l->events[l->nr_events].ev.stream = MEMLAYOUT_STREAM_UNKNOWN;
		l->nr_events++;
bound_after:
		if (after[i]) {
			const struct infer *g = &inf->v[after[i] - 1];

			l->events[l->nr_events++] = (struct memlayout_event){
				{ MEM_ACT_SEGMENT_FREE, g->device, -1, g->lo, g->hi - g->lo,
				  g->stream, e->ts }, true };
			l->inferred_bounds++;
		}
	}
out:
	free(before);
	free(after);
	return err;
}

struct memlayout *memlayout__build(const struct mem_event *events, size_t n,
				   const struct memlayout_item *live_blocks, size_t nr_live_blocks,
				   const struct memlayout_item *live_segs, size_t nr_live_segs)
{
	struct memlayout *l = calloc(1, sizeof(*l));
	struct insts blocks = {}, segs = {};
	struct inferset inf = {};
	struct seg_index x = {};
	struct inst **unc = NULL, **final = NULL;
	int64_t *ev_inst = malloc((n + 1) * sizeof(*ev_inst));
	size_t nr_unc = 0, nr_final = 0;
	int err = 0;

	if (!l || !ev_inst) {
		err = -ENOMEM;
		goto out;
	}
	err = pair_events(events, n, &blocks, &segs, ev_inst, &l->issues);
	if (!err)
		err = match_live(&blocks, live_blocks, nr_live_blocks, false, n,
				 &l->issues.state_mismatch);
	if (!err)
		err = match_live(&segs, live_segs, nr_live_segs, true, n,
				 &l->issues.state_mismatch);
	if (!err) {
		/* ev_inst indexes blocks and segments apart: each pass sees its own events */
		int64_t *only = calloc(n + 1, sizeof(*only));

		if (!only) {
			err = -ENOMEM;
			goto out;
		}
		for (size_t i = 0; i < n; i++)
			only[i] = is_segment_action(events[i].action) ? ev_inst[i] : 0;
		err = drop_clashes(&segs, only, n, &l->issues.segment_overlap);
		for (size_t i = 0; i < n; i++)
			only[i] = events[i].action <= MEM_ACT_FREE_COMPLETED ? ev_inst[i] : 0;
		if (!err)
			err = drop_clashes(&blocks, only, n, &l->issues.block_overlap);
		free(only);
	}
	if (!err)
		err = seg_index_build(&x, &segs);
	unc = malloc((blocks.nr + 1) * sizeof(*unc));
	final = malloc((blocks.nr + 1) * sizeof(*final));
	if (!err && (!unc || !final))
		err = -ENOMEM;
	for (size_t i = 0; i < blocks.nr && !err; i++) {
		struct inst *b = &blocks.v[i];
		int c;

		if (b->dropped)
			continue;
		c = covered(&x, b);
		if (c < 0) {
			b->dropped = true;
			l->issues.block_outside++;
		} else if (c == 0) {
			unc[nr_unc++] = b;
		}
	}
	if (!err) {
		qsort(unc, nr_unc, sizeof(*unc), cmp_inst_ptr);
		err = infer_segments(unc, nr_unc, &x, n, &inf, &l->issues);
	}
	if (!err)
		err = end_at_unknown_frees(events, n, &inf);
	for (size_t i = 0; i < blocks.nr && !err; i++)
		if (!blocks.v[i].dropped && blocks.v[i].end == (int64_t)n)
			final[nr_final++] = &blocks.v[i];
	if (!err) {
		qsort(final, nr_final, sizeof(*final), cmp_inst_ptr);
		err = build_final(l, &segs, &inf, final, nr_final, n);
	}
	if (!err)
		err = build_events(l, events, n, ev_inst, &blocks, &segs, &inf);
out:
	free(ev_inst);
	free(blocks.v);
	free(segs.v);
	free(inf.v);
	free(x.v);
	free(x.max_hi);
	free(unc);
	free(final);
	if (err) {
		memlayout__free(l);
		errno = -err;
		return NULL;
	}
	return l;
}

void memlayout__free(struct memlayout *l)
{
	if (!l)
		return;
	free(l->segs);
	free(l->blocks);
	free(l->events);
	free(l);
}

uint64_t memlayout__issues_total(const struct memlayout_issues *i)
{
	return i->block_realloc + i->block_overlap + i->block_outside + i->block_unplaced +
	       i->segment_realloc + i->segment_overlap + i->state_mismatch + i->empty;
}
