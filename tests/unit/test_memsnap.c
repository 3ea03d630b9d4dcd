// SPDX-License-Identifier: MIT
/* memsnap on synthetic events: counters, unknown frees, segments and their blocks, VMM
 * handles and maps, the memory_viz snapshot, leak groups, the pickle encoding. Every snapshot
 * goes through tests/tools/memsnap_check.py, which replays it as memory_viz does. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <cjson/cJSON.h>
#include "check.h"
#include "memsnap.h"

#define MIB (1ULL << 20)
#define CHECKER UNIT_DATA_DIR "/../../tools/memsnap_check.py"

/* The checker's exit status on snap (written to UNIT_OUT_DIR/<name>.json): 0 valid, 1 not. */
static int replay_status(const cJSON *snap, const char *name)
{
	char path[512], cmd[1200];
	char *text = cJSON_PrintUnformatted(snap);
	FILE *f;
	int rc;

	snprintf(path, sizeof(path), UNIT_OUT_DIR "/%s.json", name);
	f = fopen(path, "w");
	if (!f || !text) {
		free(text);
		if (f)
			fclose(f);
		return -1;
	}
	fputs(text, f);
	fclose(f);
	free(text);
	snprintf(cmd, sizeof(cmd), "python3 %s %s", CHECKER, path);
	fflush(stdout);
	rc = system(cmd);
	return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

#define CHECK_REPLAYS(snap, name) \
	CHECK(replay_status(snap, name) == 0, "%s: memory_viz cannot replay the snapshot", name)

static int fake_stack(void *ctx, int32_t stack_id, struct mem_frame *frames, int max)
{
	static const char *const names[] = { "alloc_impl+0x10", "site_a+0x4", "site_b+0x8", "main+0x20" };

	if (max < 2)
		return 0;
	frames[0] = (struct mem_frame){ names[0], "/lib/liballoc.so", 0x1000, true, 0, false };
	frames[1] = (struct mem_frame){ names[stack_id == 1 ? 1 : 2], "/bin/app", 0x2000, false, 0, false };
	frames[2] = (struct mem_frame){ names[3], "/bin/app", 0x3000, false, 0, false };
	return 3;
}

static uint64_t num(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	if (cJSON_IsRaw(v))
		return strtoull(v->valuestring, NULL, 10);
	return cJSON_IsNumber(v) ? (uint64_t)v->valuedouble : (uint64_t)-1;
}

static const char *str(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void test_counters_and_snapshot(void)
{
	struct memsnap *ms = memsnap__new(0);
	struct memsnap_info info = { .pid = 7, .comm = "app", .version = "t", .stack_fn = fake_stack,
				     .alloc_conf = "expandable_segments:True" };
	const struct mem_device_bytes *d;
	struct mem_leak_group *g;
	cJSON *snap, *segs, *traces, *s, *blocks, *b;
	int n;

	memsnap__set_clock(ms, 1000000, 5000000000ULL);
	/* a 2 MiB segment, two blocks in it, one freed */
	CHECK(memsnap__segment_alloc(ms, 2000000, MEM_SEG_DEVICE, 0, 0x10000000, 2 * MIB, 0, 1) == 0, "seg");
	CHECK(memsnap__block_alloc(ms, 3000000, 0, 0x10000000, 1000, 0x55, 1) == 0, "alloc a");
	CHECK(memsnap__block_alloc(ms, 4000000, 0, 0x10000400, 1000, 0x55, 1) == 0, "alloc b");
	CHECK(memsnap__block_alloc(ms, 4500000, 0, 0x10000800, 4096, 0x55, 2) == 0, "alloc c");
	CHECK(memsnap__block_free(ms, 5000000, 0x10000400) == 0, "free b");
	/* unknown frees: counted, nothing changes */
	CHECK(memsnap__block_free(ms, 5100000, 0xdead) == -1, "free unknown");
	CHECK(memsnap__segment_free(ms, 5200000, 0xbeef) == -1, "segment free unknown");
	/* a block in memory allocated before attach, on device 1 */
	CHECK(memsnap__block_alloc(ms, 5300000, 1, 0x90000000, 600, 0, -1) == 1, "orphan");
	/* expandable segments: 20 MiB handle mapped, on device 0 */
	CHECK(memsnap__handle_create(ms, 6000000, 0, 0xabc, 20 * MIB) == 0, "create");
	CHECK(memsnap__map(ms, 6100000, 0x20000000, 20 * MIB, 0xabc, -1) == 0, "map");
	CHECK(memsnap__oom(ms, 6200000, 0, 64 * MIB, 0x55, -1) == 0, "oom");
	/* pinned host memory: counted apart */
	CHECK(memsnap__segment_alloc(ms, 6300000, MEM_SEG_HOST, 0, 0x30000000, 4096, 0, -1) == -1, "host");

	d = memsnap__device(ms, 0);
	CHECK_U64(d->allocated, 1000 + 4096);
	CHECK_U64(d->peak_allocated, 1000 + 1000 + 4096);
	CHECK_U64(d->reserved, 2 * MIB + 20 * MIB);
	CHECK_U64(memsnap__device(ms, 1)->allocated, 600);
	CHECK_U64(memsnap__nr_devices(ms), 2);
	CHECK_U64(memsnap__stats(ms)->frees_unknown, 1);
	CHECK_U64(memsnap__stats(ms)->segment_frees_unknown, 1);
	CHECK_U64(memsnap__stats(ms)->host_bytes, 4096);
	CHECK_U64(memsnap__stats(ms)->ooms, 1);

	snap = memsnap__snapshot(ms, &info);
	CHECK(snap != NULL, "snapshot");
	segs = cJSON_GetObjectItem(snap, "segments");
	CHECK_U64(cJSON_GetArraySize(segs), 3);	/* 2 MiB, mapped 20 MiB, inferred */
	s = cJSON_GetArrayItem(segs, 0);
	CHECK_U64(num(s, "address"), 0x10000000);
	CHECK_STR(str(s, "segment_type"), "small");
	CHECK_U64(num(s, "allocated_size"), 1024 + 4096);
	CHECK_U64(num(s, "requested_size"), 1000 + 4096);
	blocks = cJSON_GetObjectItem(s, "blocks");
	CHECK_U64(cJSON_GetArraySize(blocks), 4);	/* a, gap where b was, c, rest */
	b = cJSON_GetArrayItem(blocks, 0);
	CHECK_STR(str(b, "state"), "active_allocated");
	CHECK_U64(num(b, "size"), 1024);
	CHECK_STR(str(cJSON_GetArrayItem(cJSON_GetObjectItem(b, "frames"), 1), "name"), "site_a+0x4");
	b = cJSON_GetArrayItem(blocks, 1);
	CHECK_STR(str(b, "state"), "inactive");
	CHECK_U64(num(b, "address"), 0x10000400);
	CHECK_U64(num(b, "size"), 0x400);
	b = cJSON_GetArrayItem(blocks, 3);
	CHECK_U64(num(b, "address"), 0x10001800);
	CHECK_U64(num(b, "size"), 2 * MIB - 0x1800);
	s = cJSON_GetArrayItem(segs, 1);
	CHECK(cJSON_IsTrue(cJSON_GetObjectItem(s, "is_expandable")), "mapped segment is expandable");
	CHECK_U64(num(s, "total_size"), 20 * MIB);
	s = cJSON_GetArrayItem(segs, 2);
	CHECK(cJSON_IsTrue(cJSON_GetObjectItem(s, "tptrace_inferred")), "orphan block: inferred segment");
	CHECK_U64(num(s, "device"), 1);
	CHECK_U64(num(s, "total_size"), 600);	/* what was seen of it, no more */

	traces = cJSON_GetObjectItem(snap, "device_traces");
	CHECK_U64(cJSON_GetArraySize(traces), 2);
	{
		static const char *const want[] = { "segment_alloc", "alloc", "alloc", "alloc",
			"free_requested", "free_completed", "segment_map", "oom" };
		cJSON *t0 = cJSON_GetArrayItem(traces, 0);

		CHECK_U64(cJSON_GetArraySize(t0), 8);
		for (int i = 0; i < 8 && i < cJSON_GetArraySize(t0); i++)
			CHECK_STR(str(cJSON_GetArrayItem(t0, i), "action"), want[i]);
		/* time_us = real base + (ts - mono base), in µs */
		CHECK_U64(num(cJSON_GetArrayItem(t0, 1), "time_us"), 5000000 + 2000);
		CHECK_U64(num(cJSON_GetArrayItem(t0, 7), "size"), 64 * MIB);
	}
	CHECK(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(snap, "allocator_settings"),
					       "expandable_segments")), "settings from the conf");
	CHECK_REPLAYS(snap, "counters");
	cJSON_Delete(snap);

	n = memsnap__leak_groups(ms, &info, &g);
	/* mapped 20 MiB, 2 MiB segment, then blocks 4096 (site_b), 1000 (site_a), 600 */
	CHECK_U64(n, 6);
	if (n == 6) {
		char site[64];

		CHECK_STR(g[0].what, "cuMemMap");
		CHECK_STR(g[1].what, "cudaMalloc");
		CHECK_STR(g[2].what, "pytorch:malloc");
		CHECK_U64(g[2].total, 4096);
		CHECK_STR(memsnap__call_site(ms, &info, g[2].stack_id, site, sizeof(site)), "site_b+0x8 (app)");
		CHECK_U64(g[3].total, 4096);	/* pinned host */
		CHECK_STR(g[3].what, "cudaMallocHost");
		CHECK_U64(g[4].size, 1000);
	}
	free(g);

	/* unmap and release bring reserved back */
	CHECK(memsnap__unmap(ms, 7000000, 0x20000000, 20 * MIB) == 0, "unmap");
	CHECK(memsnap__handle_release(ms, 7100000, 0xabc) == 0, "release");
	CHECK(memsnap__segment_free(ms, 7200000, 0x10000000) == 0, "segment free");
	CHECK_U64(memsnap__device(ms, 0)->reserved, 0);
	CHECK_U64(memsnap__device(ms, 0)->peak_reserved, 22 * MIB);
	memsnap__free(ms);
	memsnap__free(NULL);
}

static cJSON *seg_at(cJSON *snap, uint64_t addr)
{
	cJSON *s;

	cJSON_ArrayForEach(s, cJSON_GetObjectItem(snap, "segments"))
		if (num(s, "address") == addr)
			return s;
	return NULL;
}

static uint64_t left_out(cJSON *snap, const char *why)
{
	return num(cJSON_GetObjectItem(cJSON_GetObjectItem(snap, "tptrace"), "left_out"), why);
}

static uint64_t left_out_total(cJSON *snap)
{
	cJSON *v;
	uint64_t n = 0;

	cJSON_ArrayForEach(v, cJSON_GetObjectItem(cJSON_GetObjectItem(snap, "tptrace"), "left_out"))
		n += (uint64_t)v->valuedouble;
	return n;
}

/* The actions of device 0's trace, joined by spaces. */
static const char *actions(cJSON *snap, char *buf, size_t size)
{
	cJSON *e;
	size_t n = 0;

	buf[0] = '\0';
	cJSON_ArrayForEach(e, cJSON_GetArrayItem(cJSON_GetObjectItem(snap, "device_traces"), 0))
		n += snprintf(buf + n, n < size ? size - n : 0, "%s%s%s", n ? " " : "", str(e, "action"),
			      cJSON_IsTrue(cJSON_GetObjectItem(e, "tptrace_inferred")) ? "*" : "");
	return buf;
}

/* Memory allocated before attach: blocks come and go in segments tptrace never saw. The
 * inferred segment holds the freed ones too, for the whole history (no segment events). */
static void test_pre_attach(void)
{
	struct memsnap *ms = memsnap__new(0);
	char buf[512];
	cJSON *snap, *s, *blocks;

	memsnap__block_alloc(ms, 100, 0, 0x7000000, 4096, 0x55, 1);	/* freed while tracing */
	memsnap__block_alloc(ms, 200, 0, 0x7001000, 1000, 0x55, 1);	/* live */
	memsnap__block_free(ms, 300, 0x7000000);
	memsnap__block_free(ms, 310, 0x7100000);			/* allocated before attach */
	memsnap__block_alloc(ms, 400, 0, 0x7000400, 512, 0x55, 2);	/* live, where the first was */
	memsnap__block_alloc(ms, 500, 0, 0x9000000, 8192, 0x55, 2);	/* far away: its own segment */
	memsnap__block_free(ms, 600, 0x9000000);
	snap = memsnap__snapshot(ms, NULL);
	CHECK_U64(cJSON_GetArraySize(cJSON_GetObjectItem(snap, "segments")), 2);
	s = seg_at(snap, 0x7000000);
	CHECK(s != NULL, "an inferred segment from the first block seen");
	CHECK(cJSON_IsTrue(cJSON_GetObjectItem(s, "tptrace_inferred")), "inferred");
	CHECK_U64(num(s, "total_size"), 0x1000 + 1000);
	CHECK_U64(num(s, "allocated_size"), 512 + 1000);
	CHECK_U64(num(s, "requested_size"), 512 + 1000);
	blocks = cJSON_GetObjectItem(s, "blocks");
	CHECK_U64(cJSON_GetArraySize(blocks), 4);	/* gap, 512 at 0x400, gap, 1000 at 0x1000 */
	CHECK_STR(str(cJSON_GetArrayItem(blocks, 0), "state"), "inactive");
	CHECK_U64(num(cJSON_GetArrayItem(blocks, 1), "address"), 0x7000400);
	s = seg_at(snap, 0x9000000);
	CHECK(s != NULL && num(s, "allocated_size") == 0, "a segment for a block freed while tracing");
	CHECK_STR(actions(snap, buf, sizeof(buf)), "alloc alloc free_requested free_completed alloc "
		  "alloc free_requested free_completed");
	CHECK_U64(left_out(snap, "blocks_overlapping_live_blocks"), 0);
	CHECK_REPLAYS(snap, "pre_attach");
	cJSON_Delete(snap);
	memsnap__free(ms);
}

/* A segment allocated before attach goes (cudaFree of an unknown pointer) and a new one is
 * allocated over the same addresses: the inferred segment must end before the known one
 * starts, and one inferred after a known segment went must start after it. */
static void test_inferred_bounds(void)
{
	struct memsnap *ms = memsnap__new(0);
	char buf[512];
	cJSON *snap, *e;

	memsnap__block_alloc(ms, 100, 0, 0x5000000, 4096, 0, -1);
	memsnap__block_free(ms, 200, 0x5000000);
	memsnap__segment_free(ms, 300, 0x5000000);			/* unknown: counted */
	memsnap__segment_alloc(ms, 400, MEM_SEG_DEVICE, 0, 0x5000000, 2 * MIB, 0, -1);
	memsnap__block_alloc(ms, 500, 0, 0x5000000, 1000, 0, -1);
	/* a known segment freed, then blocks at its addresses with no segment seen */
	memsnap__segment_alloc(ms, 600, MEM_SEG_DEVICE, 0, 0x6000000, 2 * MIB, 0, -1);
	memsnap__segment_free(ms, 700, 0x6000000);
	memsnap__block_alloc(ms, 800, 0, 0x6000200, 512, 0, -1);
	snap = memsnap__snapshot(ms, NULL);
	CHECK_STR(actions(snap, buf, sizeof(buf)), "alloc free_requested free_completed segment_free* "
		  "segment_alloc alloc segment_alloc segment_free segment_alloc* alloc");
	e = cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetObjectItem(snap, "device_traces"), 0), 3);
	CHECK_U64(num(e, "addr"), 0x5000000);
	CHECK_U64(num(e, "size"), 4096);
	CHECK_U64(cJSON_GetArraySize(cJSON_GetObjectItem(snap, "segments")), 2);
	CHECK(seg_at(snap, 0x6000200) && cJSON_IsTrue(cJSON_GetObjectItem(seg_at(snap, 0x6000200),
	      "tptrace_inferred")), "inferred after the known segment went");
	CHECK_U64(num(cJSON_GetObjectItem(snap, "tptrace"), "inferred_segment_events"), 2);
	CHECK_REPLAYS(snap, "inferred_bounds");
	cJSON_Delete(snap);
	memsnap__free(ms);
}

/* empty_cache() on memory allocated before attach: cudaFree of a pointer never seen. It ends
 * the inferred segment that starts there once its blocks are gone, and only then. */
static void test_unknown_free_ends_inferred(void)
{
	struct memsnap *ms = memsnap__new(0);
	char buf[512];
	cJSON *snap;

	memsnap__block_alloc(ms, 100, 0, 0xa000000, 4096, 0, -1);
	memsnap__block_alloc(ms, 110, 0, 0xa001000, 4096, 0, -1);
	memsnap__block_free(ms, 200, 0xa000000);
	memsnap__block_free(ms, 210, 0xa001000);
	memsnap__block_alloc(ms, 220, 0, 0xb000000, 512, 0, -1);	/* still live at the free */
	memsnap__segment_free(ms, 300, 0xa000000);
	memsnap__segment_free(ms, 310, 0xb000000);
	memsnap__segment_free(ms, 320, 0xa001000);			/* not a segment start seen */
	snap = memsnap__snapshot(ms, NULL);
	CHECK_STR(actions(snap, buf, sizeof(buf)), "alloc alloc free_requested free_completed "
		  "free_requested free_completed alloc segment_free*");
	CHECK_U64(cJSON_GetArraySize(cJSON_GetObjectItem(snap, "segments")), 1);
	CHECK(seg_at(snap, 0xb000000) != NULL, "the segment with a live block stays");
	CHECK_U64(memsnap__stats(ms)->segment_frees_unknown, 3);
	CHECK_REPLAYS(snap, "unknown_free");
	cJSON_Delete(snap);
	memsnap__free(ms);
}

/* What no allocator can do is left out and counted, not drawn. */
static void test_inconsistent_input(void)
{
	struct memsnap *ms = memsnap__new(0);
	char buf[512];
	cJSON *snap, *s;

	memsnap__segment_alloc(ms, 100, MEM_SEG_DEVICE, 0, 0x10000000, 2 * MIB, 0, -1);
	memsnap__block_alloc(ms, 200, 0, 0x10000000, 4096, 0, -1);
	memsnap__block_alloc(ms, 300, 0, 0x10000400, 4096, 0, -1);	/* overlaps the live one */
	memsnap__block_alloc(ms, 400, 0, 0x10100000, 512, 0, -1);
	memsnap__block_alloc(ms, 500, 0, 0x10100000, 2048, 0, -1);	/* again, no free seen */
	memsnap__block_alloc(ms, 600, 0, 0x101ffe00, 4096, 0, -1);	/* past the segment's end */
	memsnap__segment_alloc(ms, 700, MEM_SEG_DEVICE, 0, 0x10100000, 2 * MIB, 0, -1);	/* overlaps */
	memsnap__block_alloc(ms, 750, 0, 0x30000000, 1000, 0, -1);	/* no segment seen: */
	memsnap__block_alloc(ms, 760, 0, 0x30000200, 1000, 0, -1);	/* overlaps it */
	memsnap__segment_alloc(ms, 800, MEM_SEG_DEVICE, 0, 0, 0, 0, -1);	/* cudaMalloc(0) */
	memsnap__block_alloc(ms, 900, 0, 0x10000800, 0, 0, -1);		/* 0 bytes */
	memsnap__block_free(ms, 950, 0x10000800);
	snap = memsnap__snapshot(ms, NULL);
	CHECK_U64(left_out(snap, "empty_allocations"), 2);
	CHECK_U64(left_out(snap, "blocks_overlapping_live_blocks"), 2);
	CHECK_U64(left_out(snap, "blocks_reallocated_without_free"), 1);
	s = seg_at(snap, 0x30000000);	/* the inferred one holds the first block only */
	CHECK(s && num(s, "total_size") == 1000 && num(s, "requested_size") == 1000,
	      "inferred segment around overlapping input");
	CHECK_U64(left_out(snap, "blocks_crossing_a_segment"), 1);
	CHECK_U64(left_out(snap, "segments_overlapping_live_segments"), 1);
	CHECK_STR(actions(snap, buf, sizeof(buf)), "segment_alloc alloc alloc alloc");
	s = seg_at(snap, 0x10000000);
	CHECK(s != NULL, "the first segment");
	CHECK_U64(num(s, "requested_size"), 4096 + 2048);
	CHECK_U64(cJSON_GetArraySize(cJSON_GetObjectItem(snap, "segments")), 2);
	CHECK_REPLAYS(snap, "inconsistent");
	cJSON_Delete(snap);
	memsnap__free(ms);
}

/* Expandable segments: contiguous cuMemMap ranges are one segment; a block may span two. */
static void test_expandable(void)
{
	struct memsnap *ms = memsnap__new(0);
	char buf[512];
	cJSON *snap, *s;

	memsnap__handle_create(ms, 100, 0, 0xa1, 20 * MIB);
	memsnap__handle_create(ms, 100, 0, 0xa2, 20 * MIB);
	memsnap__handle_create(ms, 100, 0, 0xa3, 20 * MIB);
	memsnap__map(ms, 200, 0x40000000, 20 * MIB, 0xa1, -1);
	memsnap__block_alloc(ms, 300, 0, 0x40000000, 8 * MIB, 0, -1);
	memsnap__map(ms, 400, 0x41400000, 20 * MIB, 0xa2, -1);
	memsnap__block_alloc(ms, 500, 0, 0x41000000, 16 * MIB, 0, -1);	/* spans both maps */
	memsnap__map(ms, 600, 0x42800000, 20 * MIB, 0xa3, -1);
	memsnap__block_alloc(ms, 700, 0, 0x42800000, 1 * MIB, 0, -1);
	memsnap__block_free(ms, 800, 0x42800000);
	memsnap__unmap(ms, 900, 0x42800000, 20 * MIB);
	memsnap__handle_release(ms, 950, 0xa3);
	snap = memsnap__snapshot(ms, NULL);
	CHECK_U64(cJSON_GetArraySize(cJSON_GetObjectItem(snap, "segments")), 1);
	s = seg_at(snap, 0x40000000);
	CHECK(s && cJSON_IsTrue(cJSON_GetObjectItem(s, "is_expandable")), "one expandable segment");
	CHECK_U64(num(s, "total_size"), 40 * MIB);
	CHECK_U64(num(s, "allocated_size"), 24 * MIB);
	CHECK_STR(actions(snap, buf, sizeof(buf)), "segment_map alloc segment_map alloc segment_map "
		  "alloc free_requested free_completed segment_unmap");
	CHECK_REPLAYS(snap, "expandable");
	cJSON_Delete(snap);
	memsnap__free(ms);
}

/* The history keeps the newest entries: what it lost still replays. */
static void test_history_cut(void)
{
	struct memsnap *ms = memsnap__new(5);
	cJSON *snap;

	memsnap__segment_alloc(ms, 100, MEM_SEG_DEVICE, 0, 0x20000000, 2 * MIB, 0, -1);
	memsnap__block_alloc(ms, 200, 0, 0x20000000, 512, 0, -1);
	memsnap__block_alloc(ms, 300, 0, 0x20000200, 512, 0, -1);
	memsnap__block_free(ms, 400, 0x20000000);
	memsnap__block_free(ms, 500, 0x20000200);
	memsnap__segment_free(ms, 600, 0x20000000);
	memsnap__block_alloc(ms, 700, 0, 0x30000000, 512, 0, -1);
	snap = memsnap__snapshot(ms, NULL);
	CHECK_U64(memsnap__stats(ms)->history_dropped, 4);
	CHECK_REPLAYS(snap, "history_cut");
	cJSON_Delete(snap);
	memsnap__free(ms);
}

/* The checker itself fails on what memory_viz cannot draw. */
static void test_checker_fails(void)
{
	struct memsnap *ms = memsnap__new(0);
	cJSON *snap, *s, *b;

	memsnap__segment_alloc(ms, 100, MEM_SEG_DEVICE, 0, 0x10000000, 2 * MIB, 0, -1);
	memsnap__block_alloc(ms, 200, 0, 0x10000000, 1000, 0, -1);
	memsnap__block_alloc(ms, 300, 0, 0x10000400, 1000, 0, -1);
	memsnap__block_free(ms, 400, 0x10000000);
	snap = memsnap__snapshot(ms, NULL);
	CHECK_REPLAYS(snap, "checker_base");
	/* a block freed while tracing in no segment: the bug of the old snapshots */
	s = cJSON_DetachItemFromArray(cJSON_GetObjectItem(snap, "segments"), 0);
	CHECK_U64(replay_status(snap, "checker_no_segment"), 1);
	cJSON_AddItemToArray(cJSON_GetObjectItem(snap, "segments"), s);
	/* blocks that do not tile: the second drawn elsewhere than its address */
	b = cJSON_GetArrayItem(cJSON_GetObjectItem(s, "blocks"), 0);
	cJSON_ReplaceItemInObject(b, "size", cJSON_CreateNumber(0x800));
	CHECK_U64(replay_status(snap, "checker_tiling"), 1);
	cJSON_ReplaceItemInObject(b, "size", cJSON_CreateNumber(0x400));
	CHECK_U64(replay_status(snap, "checker_restored"), 0);
	/* requested above size */
	b = cJSON_GetArrayItem(cJSON_GetObjectItem(s, "blocks"), 1);
	cJSON_ReplaceItemInObject(b, "requested_size", cJSON_CreateNumber(5000));
	CHECK_U64(replay_status(snap, "checker_requested"), 1);
	cJSON_Delete(snap);
	memsnap__free(ms);
}

/* Random input, consistent or not (overlaps, missed frees, frees of unknown pointers, maps,
 * a history that drops its oldest entries): every snapshot must replay. */
static uint64_t rnd_state;

static uint64_t rnd(uint64_t n)
{
	rnd_state = rnd_state * 6364136223846793005ULL + 1442695040888963407ULL;
	return (rnd_state >> 33) % n;
}

static void test_random(void)
{
	for (int seed = 1; seed <= 12; seed++) {
		struct memsnap *ms = memsnap__new(seed % 3 ? 0 : 700);
		uint64_t live[64] = {}, segs[16] = {}, ts = 1;
		char name[32];
		cJSON *snap;

		rnd_state = seed;
		for (int i = 0; i < 2000; i++) {
			/* 4 regions of 8 MiB, 64 MiB apart: blocks and segments meet only inside one */
			uint64_t region = 0x100000000ULL + rnd(4) * (64 * MIB);
			uint64_t addr = region + rnd(8 * MIB / 512) * 512;
			int op = rnd(100), slot = rnd(64), sslot = rnd(16);

			ts += 1 + rnd(5);
			if (op < 40) {
				if (live[slot] && rnd(8))
					memsnap__block_free(ms, ts, live[slot]);
				live[slot] = addr;
				memsnap__block_alloc(ms, ts, 0, addr, 1 + rnd(rnd(4) ? 8192 : 1 * MIB),
						     rnd(3), -1);
			} else if (op < 75) {
				memsnap__block_free(ms, ts, live[slot] ? live[slot] : addr);
				live[slot] = 0;
			} else if (op < 85) {
				addr = region + rnd(8) * MIB;
				if (segs[sslot] && rnd(4))
					memsnap__segment_free(ms, ts, segs[sslot]);
				segs[sslot] = addr;
				memsnap__segment_alloc(ms, ts, MEM_SEG_DEVICE, 0, addr, (1 + rnd(2)) * MIB, 0, -1);
			} else if (op < 92) {
				memsnap__segment_free(ms, ts, segs[sslot] ? segs[sslot] : addr);
				segs[sslot] = 0;
			} else if (op < 97) {
				addr = region + rnd(8) * MIB;
				memsnap__handle_create(ms, ts, 0, 0x100 + i, 2 * MIB);
				memsnap__map(ms, ts, addr, 2 * MIB, 0x100 + i, -1);
			} else {
				memsnap__unmap(ms, ts, region + rnd(8) * MIB, 2 * MIB);
			}
		}
		snap = memsnap__snapshot(ms, NULL);
		snprintf(name, sizeof(name), "random_%d", seed);
		CHECK_REPLAYS(snap, name);
		cJSON_Delete(snap);
		memsnap__free(ms);
	}
}

/* Random input as an allocator makes it: 6 regions of 4 MiB, each at any time without a
 * segment, in one allocated before attach (never seen), in a cudaMalloc one or in a cuMemMap
 * range; blocks only in 8 KiB slots of a region with a segment; a segment goes only when its
 * blocks have. Nothing may be left out, and every snapshot replays. */
static void test_random_consistent(void)
{
	for (int seed = 1; seed <= 8; seed++) {
		enum { NONE, BEFORE, KNOWN, MAPPED } kind[6];
		uint64_t slot[6][512] = {}, ts = 1;
		int used[6] = {};
		struct memsnap *ms = memsnap__new(seed % 4 ? 0 : 900);
		char name[40];
		cJSON *snap;

		rnd_state = seed * 7919;
		for (int r = 0; r < 6; r++)
			kind[r] = rnd(2) ? BEFORE : NONE;
		for (int i = 0; i < 3000; i++) {
			int r = rnd(6), k = rnd(512);
			uint64_t base = 0x200000000ULL + r * (64 * MIB), addr = base + k * 8192;

			ts += 1 + rnd(3);
			if (kind[r] == NONE) {
				kind[r] = rnd(2) ? KNOWN : MAPPED;
				if (kind[r] == KNOWN) {
					memsnap__segment_alloc(ms, ts, MEM_SEG_DEVICE, 0, base, 4 * MIB, 0, -1);
				} else {
					memsnap__handle_create(ms, ts, 0, 0x1000 + i, 4 * MIB);
					memsnap__map(ms, ts, base, 4 * MIB, 0x1000 + i, -1);
				}
			} else if (!used[r] && rnd(20) == 0) {
				if (kind[r] == MAPPED)
					memsnap__unmap(ms, ts, base, 4 * MIB);
				else
					memsnap__segment_free(ms, ts, base);	/* BEFORE: unknown */
				kind[r] = NONE;
			} else if (slot[r][k]) {
				memsnap__block_free(ms, ts, addr);
				slot[r][k] = 0;
				used[r]--;
			} else {
				slot[r][k] = 1 + rnd(8192);
				memsnap__block_alloc(ms, ts, 0, addr, slot[r][k], rnd(2), -1);
				used[r]++;
			}
		}
		snap = memsnap__snapshot(ms, NULL);
		CHECK_U64(left_out_total(snap), 0);
		snprintf(name, sizeof(name), "random_consistent_%d", seed);
		CHECK_REPLAYS(snap, name);
		cJSON_Delete(snap);
		memsnap__free(ms);
	}
}

static void test_history_ring(void)
{
	struct memsnap *ms = memsnap__new(4);

	for (int i = 0; i < 6; i++)
		memsnap__block_alloc(ms, i, 0, 0x1000 + i * 0x1000, 10, 0, -1);
	CHECK_U64(memsnap__stats(ms)->history_dropped, 2);
	memsnap__free(ms);
}

static void test_pickle(void)
{
	static const unsigned char want[] = {
		0x80, 0x02, '}', '(',
		'X', 1, 0, 0, 0, 'a', ']', '(',
		0x8a, 1, 1, 0x8a, 1, 0xff, 0x8a, 2, 0x2c, 0x01, 0x88, 'X', 1, 0, 0, 0, 'x', 'e',
		'X', 1, 0, 0, 0, 'b', 'G', 0x3f, 0xf8, 0, 0, 0, 0, 0, 0,
		'X', 1, 0, 0, 0, 'c', 0x8a, 6, 0x00, 0x41, 0x1e, 0x02, 0x44, 0x7f,
		'u', '.',
	};
	cJSON *root = cJSON_Parse("{\"a\": [1, -1, 300, true, \"x\"], \"b\": 1.5}");
	unsigned char got[256];
	size_t len;
	FILE *f;

	cJSON_AddItemToObject(root, "c", cJSON_CreateRaw("139930070040832"));	/* 0x7f44021e4100: Python's pickle.dumps gives the same LONG1 bytes */
	f = fopen(UNIT_OUT_DIR "/snap.pickle", "w+");
	CHECK(f != NULL, "open");
	if (!f)
		return;
	CHECK(memsnap__write_pickle(root, f) == 0, "write");
	rewind(f);
	len = fread(got, 1, sizeof(got), f);
	fclose(f);
	CHECK_U64(len, sizeof(want));
	for (size_t i = 0; i < len && i < sizeof(want); i++)
		CHECK(got[i] == want[i], "byte %zu: 0x%02x, want 0x%02x", i, got[i], want[i]);
	cJSON_Delete(root);
}

/* --py-stacks: a fake stack map. Stack 100: model.py's Linear.forward under train.py; 101: the
 * same innermost line reached from another caller (one Python call site, two stacks); 102:
 * another line. */
static struct ustack_frame py_a[] = {
	{ .func = "Linear.forward", .file = "/job/model.py", .line = 31, .code = 0xc1 },
	{ .func = "train_step", .file = "/job/train.py", .line = 12, .code = 0xc2 },
};
static struct ustack_frame py_b[] = {
	{ .func = "Linear.forward", .file = "/job/model.py", .line = 31, .code = 0xc1 },
	{ .func = "eval_step", .file = "/job/train.py", .line = 20, .code = 0xc3 },
};
static struct ustack_frame py_c[] = {
	{ .func = "make_cache", .file = "/job/train.py", .line = 5, .code = 0xc4 },
};
static struct ustack py_stacks[] = {
	{ .id = 100, .nr_py = 2, .py = py_a },
	{ .id = 101, .nr_py = 2, .py = py_b },
	{ .id = 102, .nr_py = 1, .py = py_c },
};

static const struct ustack *fake_ustack(void *ctx, int pid, uint64_t id)
{
	CHECK(ctx == py_stacks && pid == 7, "lookup ctx and pid");
	for (size_t i = 0; i < sizeof(py_stacks) / sizeof(py_stacks[0]); i++)
		if (py_stacks[i].id == id)
			return &py_stacks[i];
	return NULL;
}

static void test_py_stacks(void)
{
	struct memsnap *ms = memsnap__new(0);
	struct memsnap_info info = { .pid = 7, .comm = "app", .version = "t", .stack_fn = fake_stack,
				     .ustack_lookup = fake_ustack, .ustack_ctx = py_stacks };
	struct mem_leak_group *g;
	cJSON *snap, *fr, *t0;
	char site[128], *text = NULL;
	size_t len = 0;
	FILE *f;
	int32_t s100 = memsnap__stack_with_py(ms, 1, 100);
	int32_t s101 = memsnap__stack_with_py(ms, 2, 101);
	int32_t s102 = memsnap__stack_with_py(ms, 1, 102);
	int n;

	CHECK(memsnap__stack_with_py(ms, 1, 100) == s100, "one id per (native, python) pair");
	CHECK(s100 != s101 && s100 != s102 && s101 != s102, "distinct pairs, distinct ids");
	CHECK(memsnap__stack_with_py(ms, 2, 1) == 2, "a status id (no Python stack): native id");
	CHECK(memsnap__stack_with_py(ms, 2, 0) == 2, "no capture: native id");

	memsnap__segment_alloc(ms, 100, MEM_SEG_DEVICE, 0, 0x10000000, 2 * MIB, 0, 1);
	memsnap__block_alloc(ms, 110, 0, 0x10000000, 512, 0, s100);
	memsnap__block_alloc(ms, 120, 0, 0x10000200, 512, 0, s101);
	memsnap__block_alloc(ms, 130, 0, 0x10000400, 512, 0, s100);
	memsnap__block_alloc(ms, 140, 0, 0x10000600, 512, 0, s102);
	memsnap__block_alloc(ms, 150, 0, 0x10000800, 512, 0, 2);	/* no Python stack */

	snap = memsnap__snapshot(ms, &info);
	t0 = cJSON_GetArrayItem(cJSON_GetObjectItem(snap, "device_traces"), 0);
	/* the first alloc: Python innermost first, then the native frames */
	fr = cJSON_GetObjectItem(cJSON_GetArrayItem(t0, 1), "frames");
	CHECK_U64(cJSON_GetArraySize(fr), 5);
	CHECK_STR(str(cJSON_GetArrayItem(fr, 0), "name"), "Linear.forward");
	CHECK_STR(str(cJSON_GetArrayItem(fr, 0), "filename"), "/job/model.py");
	CHECK_U64(num(cJSON_GetArrayItem(fr, 0), "line"), 31);
	CHECK_STR(str(cJSON_GetArrayItem(fr, 1), "name"), "train_step");
	CHECK_U64(num(cJSON_GetArrayItem(fr, 1), "line"), 12);
	CHECK_STR(str(cJSON_GetArrayItem(fr, 2), "name"), "alloc_impl+0x10");
	CHECK_U64(num(cJSON_GetArrayItem(fr, 2), "line"), 0);
	CHECK_STR(str(cJSON_GetArrayItem(fr, 3), "name"), "site_a+0x4");
	/* the block in the segment carries the same frames */
	fr = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(
		cJSON_GetObjectItem(snap, "segments"), 0), "blocks"), 0), "frames");
	CHECK_STR(str(cJSON_GetArrayItem(fr, 0), "name"), "Linear.forward");
	/* no Python stack: native only */
	fr = cJSON_GetObjectItem(cJSON_GetArrayItem(t0, 5), "frames");
	CHECK_U64(cJSON_GetArraySize(fr), 3);
	CHECK_STR(str(cJSON_GetArrayItem(fr, 0), "name"), "alloc_impl+0x10");
	CHECK_REPLAYS(snap, "py_stacks");
	cJSON_Delete(snap);

	/* --leaks: s100 and s101 share their innermost Python frame: one call site */
	n = memsnap__leak_groups(ms, &info, &g);
	CHECK_U64(n, 4);	/* model.py:31 (3 blocks), train.py:5, native site_b, the segment */
	if (n == 4) {
		CHECK_STR(g[0].what, "cudaMalloc");
		CHECK_U64(g[1].count, 3);
		CHECK_U64(g[1].total, 1536);
		CHECK(g[1].nr_stacks > 1, "the model.py group came from two stacks");
		CHECK_STR(memsnap__call_site(ms, &info, g[1].stack_id, site, sizeof(site)),
			  "Linear.forward (/job/model.py:31)");
		CHECK_U64(g[2].count, 1);
		CHECK(g[2].py_site != 0, "Python groups have a site");
	}
	free(g);
	f = open_memstream(&text, &len);
	memsnap__leak_report(ms, &info, f);
	fclose(f);
	CHECK(text && strstr(text, "1.5 KiB: 3 x 512 B  cuda:0  pytorch:malloc  at "
			     "Linear.forward (/job/model.py:31)"), "report line: %s", text);
	CHECK(text && strstr(text, "#0  /job/model.py:31 Linear.forward\n"
			     "      #1  /job/train.py:12 train_step\n"), "Python chain in detail");
	CHECK(text && strstr(text, "at make_cache (/job/train.py:5)"), "second site");
	CHECK(text && strstr(text, "at site_b+0x8 (app)"), "native site without Python");
	free(text);
	/* without a lookup the same stacks group by native stack */
	info.ustack_lookup = NULL;
	n = memsnap__leak_groups(ms, &info, &g);
	CHECK_U64(n, 5);	/* s100 x2, s101, s102, native 2 (s102 has native 1 but its own id) */
	free(g);
	memsnap__free(ms);
}

int main(void)
{
	test_counters_and_snapshot();
	test_pre_attach();
	test_inferred_bounds();
	test_unknown_free_ends_inferred();
	test_inconsistent_input();
	test_expandable();
	test_history_cut();
	test_checker_fails();
	test_random();
	test_random_consistent();
	test_history_ring();
	test_pickle();
	test_py_stacks();
	return check_done();
}
