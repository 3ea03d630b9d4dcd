// SPDX-License-Identifier: MIT
/* The pending-return substitution (user/stacks/uretinst.c) on saved iterator output: records laid
 * out as bpf/uretinst.bpf.c writes them, for the cases a live test cannot set up at will:
 * chained runs (a tail call into a probed function, two probes returning through one slot),
 * recursion, a stale instance left by a longjmp, instances asked for out of list order,
 * other processes' records, a cut list, and malformed buffers. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "uretinst.h"
#include "../../bpf/uretinst.h"

#define TRAMP	0x7fffffffe000ULL
#define PID	4242

static unsigned char buf[16384];
static size_t len;

static void thread_rec(__u32 type, __u32 tid, __u32 tgid, __u32 depth)
{
	struct uretinst_thread th = { .type = type, .tid = tid, .tgid = tgid, .depth = depth,
				      .xol_vaddr = TRAMP };

	memcpy(buf + len, &th, sizeof(th));
	len += sizeof(th);
}

static void inst_rec(__u32 tid, __u64 func, __u64 stack, __u64 orig, int chained)
{
	struct uretinst_inst ri = { .type = URETINST_INST, .tid = tid, .func = func,
				    .stack = stack, .orig_ret_vaddr = orig, .chained = chained };

	memcpy(buf + len, &ri, sizeof(ri));
	len += sizeof(ri);
}

static struct uretinst *parse(void)
{
	char err[256] = "";
	struct uretinst *ui = uretinst__parse(buf, len, PID, err, sizeof(err));

	CHECK(ui != NULL, "parse: %s", err);
	return ui;
}

static uint64_t resolve(const struct uretinst *ui, int tid, uint64_t slot)
{
	uint64_t orig = 0;
	int ret = uretinst__resolve(ui, tid, slot, &orig);

	return ret ? (uint64_t)ret : orig;
}

/* main -> step_sync -> cudaStreamSynchronize -> cuStreamSynchronize, the three probed
 * (the recorder on the APIs, bpftrace on step_sync): newest first, slots ascending */
static void test_nested_any_order(void)
{
	struct uretinst *ui;

	len = 0;
	thread_rec(URETINST_THREAD, PID, PID, 3);
	inst_rec(PID, 0x7f0000001000, 0x7ffc00000f08, 0x7f0000002222, 0);	/* cuStreamSynchronize */
	inst_rec(PID, 0x7f0000002200, 0x7ffc00000f58, 0x55550000101a, 0);	/* cudaStreamSynchronize */
	inst_rec(PID, 0x555500001010, 0x7ffc00000f78, 0x5555000019d4, 0);	/* step_sync */
	thread_rec(URETINST_THREAD, PID + 1, PID, 0);	/* a thread with nothing pending */
	ui = parse();
	CHECK_U64(uretinst__trampoline(ui), TRAMP);
	CHECK(uretinst__nr_threads(ui) == 2 && uretinst__nr_instances(ui) == 3, "%d threads %d inst",
	      uretinst__nr_threads(ui), uretinst__nr_instances(ui));
	/* asked outermost first: matched by slot, not by the order of the asks */
	CHECK_U64(resolve(ui, PID, 0x7ffc00000f78), 0x5555000019d4);
	CHECK_U64(resolve(ui, PID, 0x7ffc00000f08), 0x7f0000002222);
	CHECK_U64(resolve(ui, PID, 0x7ffc00000f58), 0x55550000101a);
	/* a slot that is none of them, another thread, an unknown thread */
	CHECK_U64(resolve(ui, PID, 0x7ffc00000f10), (uint64_t)-ENOENT);
	CHECK_U64(resolve(ui, PID + 1, 0x7ffc00000f08), (uint64_t)-ENOENT);
	CHECK_U64(resolve(ui, PID + 2, 0x7ffc00000f08), (uint64_t)-ENOENT);
	uretinst__free(ui);
}

/* mid -> tail -(jmp)-> leaf, all three probed: leaf's entry SP is tail's, whose word already
 * held the trampoline, so leaf's instance is chained to tail's (same slot, orig copied). One
 * return through that slot consumes both: the next slot up (mid's) must get mid's own
 * address, which an order-only fixer (one instance per trampoline, in list order) would give
 * tail's instead. */
static void test_chained_tail_call(void)
{
	struct uretinst *ui;

	len = 0;
	thread_rec(URETINST_THREAD, PID, PID, 3);
	inst_rec(PID, 0x401300, 0x7ffc00001f18, 0x4011a9, 1);	/* leaf, chained */
	inst_rec(PID, 0x401200, 0x7ffc00001f18, 0x4011a9, 0);	/* tail */
	inst_rec(PID, 0x401100, 0x7ffc00001f38, 0x401055, 0);	/* mid */
	ui = parse();
	CHECK_U64(resolve(ui, PID, 0x7ffc00001f18), 0x4011a9);
	CHECK_U64(resolve(ui, PID, 0x7ffc00001f38), 0x401055);
	uretinst__free(ui);

	/* two chained on one run (three probes through one slot), then recursion below */
	len = 0;
	thread_rec(URETINST_THREAD, PID, PID, 5);
	inst_rec(PID, 0x401500, 0x7ffc00001e00, 0x401777, 1);
	inst_rec(PID, 0x401400, 0x7ffc00001e00, 0x401777, 1);
	inst_rec(PID, 0x401300, 0x7ffc00001e00, 0x401777, 0);
	inst_rec(PID, 0x401700, 0x7ffc00001e40, 0x401790, 0);	/* rec, inner call */
	inst_rec(PID, 0x401700, 0x7ffc00001e80, 0x401010, 0);	/* rec, outer call */
	ui = parse();
	CHECK_U64(resolve(ui, PID, 0x7ffc00001e00), 0x401777);
	CHECK_U64(resolve(ui, PID, 0x7ffc00001e40), 0x401790);
	CHECK_U64(resolve(ui, PID, 0x7ffc00001e80), 0x401010);
	uretinst__free(ui);
}

/* A longjmp left an instance whose frame is gone; a new call put its own at the same
 * address (the kernel drops the stale one only at the next push): the newest is the live
 * one. A chained instance with nothing below it (the list was cut there) answers nothing,
 * and neither does an instance whose saved word is the trampoline itself. */
static void test_stale_cut_and_bad_words(void)
{
	struct uretinst *ui;

	len = 0;
	thread_rec(URETINST_THREAD, PID, PID, 2);
	inst_rec(PID, 0x401100, 0x7ffc00002f00, 0x401abc, 0);	/* new */
	inst_rec(PID, 0x401800, 0x7ffc00002f00, 0x401def, 0);	/* stale */
	inst_rec(PID, 0x401900, 0x7ffc00002f80, TRAMP, 0);	/* torn read */
	thread_rec(URETINST_THREAD, PID + 1, PID, 64);
	inst_rec(PID + 1, 0x401300, 0x7ffc10000100, 0x401111, 0);
	inst_rec(PID + 1, 0x401300, 0x7ffc10000200, 0x401222, 1);
	thread_rec(URETINST_CUT, PID + 1, PID, 64);
	ui = parse();
	CHECK_U64(resolve(ui, PID, 0x7ffc00002f00), 0x401abc);
	CHECK_U64(resolve(ui, PID, 0x7ffc00002f80), (uint64_t)-ENOENT);
	CHECK_U64(resolve(ui, PID + 1, 0x7ffc10000100), 0x401111);
	CHECK_U64(resolve(ui, PID + 1, 0x7ffc10000200), (uint64_t)-ENOENT);
	uretinst__free(ui);
}

/* Without the pid filter (kernels before 6.1) the iterator walks every task: other
 * processes' records are skipped, their instances never answer for ours. */
static void test_other_processes_skipped(void)
{
	struct uretinst *ui;

	len = 0;
	thread_rec(URETINST_THREAD, 77, 77, 1);
	inst_rec(77, 0x401100, 0x7ffc00003f00, 0x409999, 0);
	thread_rec(URETINST_CUT, 77, 77, 1);
	thread_rec(URETINST_THREAD, PID, PID, 1);
	inst_rec(PID, 0x401100, 0x7ffc00003f08, 0x401234, 0);
	thread_rec(URETINST_THREAD, 78, 77, 1);
	inst_rec(78, 0x401100, 0x7ffc00003f10, 0x409998, 0);
	ui = parse();
	CHECK(uretinst__nr_threads(ui) == 1 && uretinst__nr_instances(ui) == 1, "%d threads %d inst",
	      uretinst__nr_threads(ui), uretinst__nr_instances(ui));
	CHECK_U64(resolve(ui, PID, 0x7ffc00003f08), 0x401234);
	CHECK_U64(resolve(ui, 77, 0x7ffc00003f00), (uint64_t)-ENOENT);
	CHECK_U64(resolve(ui, 78, 0x7ffc00003f10), (uint64_t)-ENOENT);
	uretinst__free(ui);

	/* nothing read: no area, no answer */
	len = 0;
	ui = parse();
	CHECK_U64(uretinst__trampoline(ui), 0);
	CHECK_U64(resolve(ui, PID, 0x7ffc00003f08), (uint64_t)-ENOENT);
	uretinst__free(ui);
	CHECK_U64(resolve(NULL, PID, 0x7ffc00003f08), (uint64_t)-ENOENT);
}

static void bad(const char *what, const char *want)
{
	char err[256] = "";
	struct uretinst *ui;

	errno = 0;
	ui = uretinst__parse(buf, len, PID, err, sizeof(err));
	CHECK(!ui && errno == EINVAL, "%s: parsed (errno %d)", what, errno);
	CHECK(!strcmp(err, want), "%s: err \"%s\", want \"%s\"", what, err, want);
	uretinst__free(ui);
}

static void test_malformed(void)
{
	struct uretinst_thread th = { .type = URETINST_THREAD, .tid = PID, .tgid = PID,
				      .xol_vaddr = TRAMP + 0x1000 };

	len = 0;
	thread_rec(URETINST_THREAD, PID, PID, 1);
	len -= 4;
	bad("short thread record", "malformed return-instance record at byte 0 of 20");
	len = 0;
	inst_rec(PID, 0x401100, 0x7ffc00003f08, 0x401234, 0);
	bad("instance before its thread", "malformed return-instance record at byte 0 of 40");
	len = 0;
	thread_rec(URETINST_THREAD, PID, PID, 1);
	inst_rec(PID + 1, 0x401100, 0x7ffc00003f08, 0x401234, 0);
	bad("instance of another thread", "malformed return-instance record at byte 24 of 64");
	len = 0;
	thread_rec(URETINST_THREAD, PID, PID, 1);
	buf[len] = 9;
	memset(buf + len + 1, 0, 7);
	len += 8;
	bad("unknown type", "malformed return-instance record at byte 24 of 32");
	len = 0;
	thread_rec(URETINST_CUT, PID, PID, 1);
	bad("cut of no thread", "malformed return-instance record at byte 0 of 24");
	len = 0;
	thread_rec(URETINST_THREAD, PID, PID, 1);
	memcpy(buf + len, &th, sizeof(th));
	len += sizeof(th);
	bad("two areas in one mm", "malformed return-instance record at byte 24 of 48");
}

int main(void)
{
	test_nested_any_order();
	test_chained_tail_call();
	test_stale_cut_and_bad_words();
	test_other_processes_skipped();
	test_malformed();
	return check_done();
}
