// SPDX-License-Identifier: MIT
/* stacktree (the cross-rank merged view) on synthetic snapshots: the exact text for a job with
 * one odd rank, two classes of equal size, processes without RANK (named by pid), deep stacks
 * cut at max_depth, Python and native frames, stripped code (module + offset), a truncated
 * unwind, a process whose stack could not be read (never merged as if healthy), every thread,
 * and the rank-set notation. */
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "stacks.h"
#include "stacktree.h"

#define MAX_FRAMES 64

static struct stack_frame nat(const char *func, const char *module, uint64_t off)
{
	return (struct stack_frame){ .kind = STACK_NATIVE, .func = func, .module = module,
				     .module_off = off, .pc = 0x7f0000000000ULL + off,
				     .func_off = off & 0xff, .build_id = "" };
}

static struct stack_frame py(const char *func, const char *file, int line)
{
	return (struct stack_frame){ .kind = STACK_PYTHON, .func = func, .file = file, .line = line };
}

#define PYBIN "/usr/bin/python3.11"
#define LIBC "/lib/x86_64-linux-gnu/libc.so.6"
#define NCCL "/opt/nccl/lib/libnccl.so.2"
#define CUDART "/usr/local/cuda/lib64/libcudart.so.13"

/* A training process's main thread as the snapshot gives it (innermost first): its Python
 * frames sit inside the eval loop's native frames. */
static int python_main(struct stack_frame *f, int seed)
{
	int n = 0;

	f[n++] = py("main", "/opt/app/train.py", 120);
	f[n++] = nat("_PyEval_EvalFrameDefault", PYBIN, 0x1200 + seed);
	f[n++] = nat("Py_RunMain", PYBIN, 0x3000);
	f[n++] = nat("__libc_start_call_main", LIBC, 0x271ca);
	f[n++] = nat("_start", PYBIN, 0x500);
	return n;
}

/* rank r waits in ncclAllReduce called through ctypes from train.py:80 step() */
static int in_allreduce(struct stack_frame *f, int seed)
{
	int n = 0;

	f[n++] = nat("__futex_abstimed_wait_common", LIBC, 0x8a000 + seed);
	f[n++] = nat("sim_wait", NCCL, 0x4000 + seed);
	f[n++] = nat("ncclAllReduce", NCCL, 0x2000 + seed);
	f[n++] = nat("ffi_call", "/usr/lib/x86_64-linux-gnu/libffi.so.8", 0x700);
	f[n++] = nat("_ctypes_callproc", "/usr/lib/python3.11/lib-dynload/_ctypes.so", 0x900);
	f[n++] = py("step", "/opt/app/train.py", 80);
	f[n++] = nat("_PyEval_EvalFrameDefault", PYBIN, 0x1100 + seed);
	return n + python_main(f + n, seed);
}

struct proc_spec {
	int pid, rank;
	struct stack_frame frames[MAX_FRAMES];
	int nr_frames;
	enum stack_where where;
	const char *api;
	enum stack_progress progress;
	bool truncated;
};

/* One process: its issuing main thread and an idle helper thread. */
static struct stack_proc *make_proc(const struct proc_spec *s)
{
	struct stack_proc *sp = calloc(1, sizeof(*sp));
	struct stack_thread *t = calloc(2, sizeof(*t));
	static struct stack_frame helper[2];

	helper[0] = nat("epoll_wait", LIBC, 0x12000);
	helper[1] = nat("start_thread", LIBC, 0x89000);
	sp->pid = s->pid;
	sp->rank = s->rank;
	sp->world_size = -1;
	sp->local_rank = -1;
	strcpy(sp->comm, "python3");
	sp->samples = 3;
	sp->threads = t;
	sp->nr_threads = 2;
	t[0].tid = s->pid;
	t[0].main = t[0].issuing = true;
	t[0].state = 'S';
	t[0].frames = malloc(sizeof(s->frames));
	memcpy(t[0].frames, s->frames, sizeof(s->frames));
	t[0].nr_frames = s->nr_frames;
	t[0].where = s->where;
	t[0].api = s->api;
	t[0].progress = s->progress;
	t[0].truncated = s->truncated;
	t[0].python = true;
	t[1].tid = s->pid + 1;
	strcpy(t[1].name, "pt_elastic");
	t[1].state = 'S';
	t[1].frames = helper;
	t[1].nr_frames = 2;
	t[1].where = WHERE_IDLE;
	t[1].progress = PROGRESS_NONE;
	return sp;
}

static void free_procs(struct stack_proc **procs, int n)
{
	for (int i = 0; i < n; i++) {
		free(procs[i]->threads[0].frames);
		free(procs[i]->threads);
		free(procs[i]);
	}
}

static char *render(struct stack_proc **procs, int n, int max_depth, bool all_threads)
{
	struct stacktree_opts opts = { .max_depth = max_depth, .all_threads = all_threads };
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	int err = stacktree__print(f, procs, n, &opts);

	fclose(f);
	CHECK(err == 0, "stacktree__print: %d", err);
	return text;
}

#define CHECK_TEXT(got, want) do {							\
	CHECK(!strcmp(got, want), "text differs:\n--- got\n%s--- want\n%s---", got, want); \
} while (0)

/* 8 ranks in ncclAllReduce, rank 6 still in Python at train.py:88: the outlier. Processes come
 * in a scrambled order with different offsets (ASLR, other call sites): the text is the same. */
static void test_one_odd_rank(void)
{
	static const int order[8] = { 3, 6, 0, 7, 1, 5, 2, 4 };
	struct stack_proc *procs[8];
	char *text;

	for (int i = 0; i < 8; i++) {
		struct proc_spec s = { .pid = 1000 + order[i] * 10, .rank = order[i],
				       .progress = PROGRESS_NONE };

		if (order[i] == 6) {
			s.frames[0] = py("step", "/opt/app/train.py", 88);
			s.frames[1] = nat("_PyEval_EvalFrameDefault", PYBIN, 0x1100);
			s.nr_frames = 2 + python_main(s.frames + 2, i);
			s.where = WHERE_PYTHON;
			s.progress = PROGRESS_YES;
		} else {
			s.nr_frames = in_allreduce(s.frames, i);
			s.where = WHERE_NCCL;
			s.api = "ncclAllReduce";
		}
		procs[i] = make_proc(&s);
	}
	text = render(procs, 8, 0, false);
	CHECK_TEXT(text,
"merged stacks: issuing thread of 8 processes, outermost frame first\n"
"[ranks 0-7] 8 processes\n"
"  __libc_start_call_main (libc.so.6)\n"
"  train.py:120 main()\n"
"  [ranks 0-5,7] 7 processes\n"
"    train.py:80 step()\n"
"    _ctypes_callproc (_ctypes.so)\n"
"    ffi_call (libffi.so.8)\n"
"    ncclAllReduce (libnccl.so.2)\n"
"    sim_wait (libnccl.so.2)\n"
"    __futex_abstimed_wait_common (libc.so.6)\n"
"  [rank 6] 1 process\n"
"    train.py:88 step()\n"
"\n"
"equivalence classes (issuing thread: same frames, where, api, progress): 2\n"
"  1. ranks 0-5,7: in ncclAllReduce (no progress)\n"
"    top: __futex_abstimed_wait_common (libc.so.6) <- sim_wait (libnccl.so.2) <- ncclAllReduce (libnccl.so.2)\n"
"  2. rank 6: in Python train.py:88 step() (progressing)\n"
"    top: train.py:88 step() <- train.py:120 main() <- __libc_start_call_main (libc.so.6)\n"
"\n"
"outlier: rank 6: in Python train.py:88 step(), the others in ncclAllReduce (no progress)\n");
	free(text);
	free_procs(procs, 8);
}


/* a process stuck in cudaStreamSynchronize from train.py:95 sync() */
static int in_sync(struct stack_frame *f, int seed)
{
	int n = 0;

	f[n++] = nat("ioctl", LIBC, 0x11000 + seed);
	f[n++] = nat("cuStreamSynchronize", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x5000);
	f[n++] = nat("cudaStreamSynchronize", CUDART, 0x6000 + seed);
	f[n++] = nat("ffi_call", "/usr/lib/x86_64-linux-gnu/libffi.so.8", 0x700);
	f[n++] = nat("_ctypes_callproc", "/usr/lib/python3.11/lib-dynload/_ctypes.so", 0x900);
	f[n++] = py("sync", "/opt/app/train.py", 95);
	f[n++] = nat("_PyEval_EvalFrameDefault", PYBIN, 0x1100 + seed);
	return n + python_main(f + n, seed);
}

static struct stack_proc *allreduce_proc(int pid, int rank)
{
	struct proc_spec s = { .pid = pid, .rank = rank, .where = WHERE_NCCL, .api = "ncclAllReduce",
			       .progress = PROGRESS_NONE };

	s.nr_frames = in_allreduce(s.frames, rank);
	return make_proc(&s);
}

static struct stack_proc *sync_proc(int pid, int rank)
{
	struct proc_spec s = { .pid = pid, .rank = rank, .where = WHERE_CUDA,
			       .api = "cudaStreamSynchronize", .progress = PROGRESS_NONE };

	s.nr_frames = in_sync(s.frames, rank);
	return make_proc(&s);
}

/* 2 + 2: no class is smaller, so no rank is singled out */
static void test_two_equal_classes(void)
{
	struct stack_proc *procs[4] = { sync_proc(300, 2), allreduce_proc(100, 0), sync_proc(400, 3),
					allreduce_proc(200, 1) };
	char *text = render(procs, 4, 0, false);

	CHECK_TEXT(text,
"merged stacks: issuing thread of 4 processes, outermost frame first\n"
"[ranks 0-3] 4 processes\n"
"  __libc_start_call_main (libc.so.6)\n"
"  train.py:120 main()\n"
"  [ranks 0-1] 2 processes\n"
"    train.py:80 step()\n"
"    _ctypes_callproc (_ctypes.so)\n"
"    ffi_call (libffi.so.8)\n"
"    ncclAllReduce (libnccl.so.2)\n"
"    sim_wait (libnccl.so.2)\n"
"    __futex_abstimed_wait_common (libc.so.6)\n"
"  [ranks 2-3] 2 processes\n"
"    train.py:95 sync()\n"
"    _ctypes_callproc (_ctypes.so)\n"
"    ffi_call (libffi.so.8)\n"
"    cudaStreamSynchronize (libcudart.so.13)\n"
"    cuStreamSynchronize (libcuda.so.1)\n"
"    ioctl (libc.so.6)\n"
"\n"
"equivalence classes (issuing thread: same frames, where, api, progress): 2\n"
"  1. ranks 0-1: in ncclAllReduce (no progress)\n"
"    top: __futex_abstimed_wait_common (libc.so.6) <- sim_wait (libnccl.so.2) <- ncclAllReduce (libnccl.so.2)\n"
"  2. ranks 2-3: in cudaStreamSynchronize (no progress)\n"
"    top: ioctl (libc.so.6) <- cuStreamSynchronize (libcuda.so.1) <- cudaStreamSynchronize (libcudart.so.13)\n"
"\n"
"no outlier: 2 classes of 2 processes each\n");
	free(text);
	free_procs(procs, 4);
}

/* no RANK in the environment: processes are named by pid */
static void test_pids(void)
{
	struct stack_proc *procs[3] = { allreduce_proc(510, -1), sync_proc(520, -1),
					allreduce_proc(500, -1) };
	char *text = render(procs, 3, 0, false);

	CHECK_TEXT(text,
"merged stacks: issuing thread of 3 processes, outermost frame first\n"
"(RANK is not set, or not unique, in every process: processes are named by pid)\n"
"[pids 500,510,520] 3 processes\n"
"  __libc_start_call_main (libc.so.6)\n"
"  train.py:120 main()\n"
"  [pids 500,510] 2 processes\n"
"    train.py:80 step()\n"
"    _ctypes_callproc (_ctypes.so)\n"
"    ffi_call (libffi.so.8)\n"
"    ncclAllReduce (libnccl.so.2)\n"
"    sim_wait (libnccl.so.2)\n"
"    __futex_abstimed_wait_common (libc.so.6)\n"
"  [pid 520] 1 process\n"
"    train.py:95 sync()\n"
"    _ctypes_callproc (_ctypes.so)\n"
"    ffi_call (libffi.so.8)\n"
"    cudaStreamSynchronize (libcudart.so.13)\n"
"    cuStreamSynchronize (libcuda.so.1)\n"
"    ioctl (libc.so.6)\n"
"\n"
"equivalence classes (issuing thread: same frames, where, api, progress): 2\n"
"  1. pids 500,510: in ncclAllReduce (no progress)\n"
"    top: __futex_abstimed_wait_common (libc.so.6) <- sim_wait (libnccl.so.2) <- ncclAllReduce (libnccl.so.2)\n"
"  2. pid 520: in cudaStreamSynchronize (no progress)\n"
"    top: ioctl (libc.so.6) <- cuStreamSynchronize (libcuda.so.1) <- cudaStreamSynchronize (libcudart.so.13)\n"
"\n"
"outlier: pid 520: in cudaStreamSynchronize, the others in ncclAllReduce (no progress)\n");
	free(text);
	free_procs(procs, 3);
	/* a repeated RANK (two jobs on one host) names processes by pid too */
	procs[0] = allreduce_proc(510, 0);
	procs[1] = allreduce_proc(520, 0);
	text = render(procs, 2, 0, false);
	CHECK_TEXT(text,
"merged stacks: issuing thread of 2 processes, outermost frame first\n"
"(RANK is not set, or not unique, in every process: processes are named by pid)\n"
"[pids 510,520] 2 processes\n"
"  __libc_start_call_main (libc.so.6)\n"
"  train.py:120 main()\n"
"  train.py:80 step()\n"
"  _ctypes_callproc (_ctypes.so)\n"
"  ffi_call (libffi.so.8)\n"
"  ncclAllReduce (libnccl.so.2)\n"
"  sim_wait (libnccl.so.2)\n"
"  __futex_abstimed_wait_common (libc.so.6)\n"
"\n"
"equivalence classes (issuing thread: same frames, where, api, progress): 1\n"
"  1. pids 510,520: in ncclAllReduce (no progress)\n"
"    top: __futex_abstimed_wait_common (libc.so.6) <- sim_wait (libnccl.so.2) <- ncclAllReduce (libnccl.so.2)\n"
"\n"
"no outlier: pids 510,520 all in ncclAllReduce (no progress)\n");
	free(text);
	free_procs(procs, 2);
}

/* one process: nothing to compare it with */
static void test_one_process(void)
{
	struct stack_proc *procs[1] = { sync_proc(42, 0) };
	char *text = render(procs, 1, 0, false);
	const char *last = strstr(text, "\n\nno outlier");

	CHECK_STR(last, "\n\nno outlier (one process): rank 0 in cudaStreamSynchronize (no progress)\n");
	free(text);
	free_procs(procs, 1);
}

/* 30 levels of recursion; the two ranks differ only at the bottom, below the depth printed */
static void test_deep(void)
{
	struct stack_proc *procs[2];

	for (int r = 0; r < 2; r++) {
		struct proc_spec s = { .pid = 700 + r, .rank = r, .where = WHERE_RUNNING,
				       .progress = PROGRESS_YES };

		s.frames[s.nr_frames++] = nat(r ? "leaf_b" : "leaf_a", "/opt/app/solver", 0x100 + r);
		for (int i = 0; i < 30; i++)
			s.frames[s.nr_frames++] = nat("recurse", "/opt/app/solver", 0x200 + i);
		s.frames[s.nr_frames++] = nat("main", "/opt/app/solver", 0x300);
		procs[r] = make_proc(&s);
	}
	char *text = render(procs, 2, 4, false);

	CHECK_TEXT(text,
"merged stacks: issuing thread of 2 processes, outermost frame first\n"
"[ranks 0-1] 2 processes\n"
"  main (solver)\n"
"  recurse (solver)\n"
"  recurse (solver)\n"
"  recurse (solver)\n"
"  ... (deeper frames not shown: depth 4)\n"
"\n"
"equivalence classes (issuing thread: same frames, where, api, progress): 2\n"
"  1. rank 0: running leaf_a (solver) (progressing)\n"
"    top: leaf_a (solver) <- recurse (solver) <- recurse (solver)\n"
"  2. rank 1: running leaf_b (solver) (progressing)\n"
"    top: leaf_b (solver) <- recurse (solver) <- recurse (solver)\n"
"\n"
"no outlier: 2 classes of 1 process each\n");
	free(text);
	free_procs(procs, 2);
}

/* rank 2 could not be stopped (ptrace denied): shown, never merged as if healthy */
static void test_unknown_stack(void)
{
	struct stack_proc *procs[4] = { allreduce_proc(100, 0), allreduce_proc(110, 1),
					allreduce_proc(120, 2), allreduce_proc(130, 3) };
	char *text;

	procs[2]->ptrace_err = "ptrace: Operation not permitted";
	for (int t = 0; t < procs[2]->nr_threads; t++) {
		procs[2]->threads[t].nr_frames = 0;
		procs[2]->threads[t].where = WHERE_UNKNOWN;
		procs[2]->threads[t].progress = PROGRESS_UNKNOWN;
	}
	text = render(procs, 4, 0, false);
	CHECK_TEXT(text,
"merged stacks: issuing thread of 4 processes, outermost frame first\n"
"[ranks 0-1,3] 3 processes\n"
"  __libc_start_call_main (libc.so.6)\n"
"  train.py:120 main()\n"
"  train.py:80 step()\n"
"  _ctypes_callproc (_ctypes.so)\n"
"  ffi_call (libffi.so.8)\n"
"  ncclAllReduce (libnccl.so.2)\n"
"  sim_wait (libnccl.so.2)\n"
"  __futex_abstimed_wait_common (libc.so.6)\n"
"not merged: rank 2 (pid 120): no frames: ptrace: Operation not permitted\n"
"\n"
"equivalence classes (issuing thread: same frames, where, api, progress): 1\n"
"  1. ranks 0-1,3: in ncclAllReduce (no progress)\n"
"    top: __futex_abstimed_wait_common (libc.so.6) <- sim_wait (libnccl.so.2) <- ncclAllReduce (libnccl.so.2)\n"
"  rank 2: stack unknown (ptrace: Operation not permitted), not compared\n"
"\n"
"no outlier: ranks 0-1,3 all in ncclAllReduce (no progress)\n"
"unknown: rank 2: stack not read (ptrace: Operation not permitted), not compared\n");
	free(text);
	text = render(procs, 4, 0, true);
	CHECK_TEXT(text,
"merged stacks: 6 threads of 4 processes, outermost frame first\n"
"[ranks 0-1,3] 3 threads\n"
"  __libc_start_call_main (libc.so.6)\n"
"  train.py:120 main()\n"
"  train.py:80 step()\n"
"  _ctypes_callproc (_ctypes.so)\n"
"  ffi_call (libffi.so.8)\n"
"  ncclAllReduce (libnccl.so.2)\n"
"  sim_wait (libnccl.so.2)\n"
"  __futex_abstimed_wait_common (libc.so.6)\n"
"[ranks 0-1,3] 3 threads\n"
"  start_thread (libc.so.6)\n"
"  epoll_wait (libc.so.6)\n"
"not merged: rank 2 (pid 120): no frames: ptrace: Operation not permitted\n"
"\n"
"equivalence classes (issuing thread: same frames, where, api, progress): 1\n"
"  1. ranks 0-1,3: in ncclAllReduce (no progress)\n"
"    top: __futex_abstimed_wait_common (libc.so.6) <- sim_wait (libnccl.so.2) <- ncclAllReduce (libnccl.so.2)\n"
"  rank 2: stack unknown (ptrace: Operation not permitted), not compared\n"
"\n"
"no outlier: ranks 0-1,3 all in ncclAllReduce (no progress)\n"
"unknown: rank 2: stack not read (ptrace: Operation not permitted), not compared\n");
	free(text);
	free_procs(procs, 4);
}

/* stripped code (module + offset, no invented name), a truncated unwind, two outliers */
static void test_stripped_truncated(void)
{
	struct stack_proc *procs[6];
	char *text;

	for (int r = 0; r < 6; r++) {
		struct proc_spec s = { .pid = 900 + r, .rank = r, .where = WHERE_RUNNING,
				       .progress = PROGRESS_NONE };

		s.frames[s.nr_frames++] = nat(NULL, "/opt/app/libstripped.so", r == 4 ? 0x1250 : 0x1234);
		s.frames[s.nr_frames++] = nat(NULL, "/opt/app/libstripped.so", 0x2000);
		s.frames[s.nr_frames++] = nat("main", "/opt/app/app", 0x300);
		if (r == 5) {
			s.frames[1] = nat(NULL, NULL, 0);
			s.nr_frames = 2;
			s.truncated = true;
		}
		procs[r] = make_proc(&s);
	}
	text = render(procs, 6, 0, false);
	CHECK_TEXT(text,
"merged stacks: issuing thread of 6 processes, outermost frame first\n"
"[ranks 0-4] 5 processes\n"
"  main (app)\n"
"  libstripped.so+0x2000\n"
"  [ranks 0-3] 4 processes\n"
"    libstripped.so+0x1234\n"
"  [rank 4] 1 process\n"
"    libstripped.so+0x1250\n"
"[rank 5] 1 process\n"
"  ... (outer frames not unwound)\n"
"  ?? (no mapped object)\n"
"  libstripped.so+0x1234\n"
"\n"
"equivalence classes (issuing thread: same frames, where, api, progress): 3\n"
"  1. ranks 0-3: running libstripped.so+0x1234 (no progress)\n"
"    top: libstripped.so+0x1234 <- libstripped.so+0x2000 <- main (app)\n"
"  2. rank 4: running libstripped.so+0x1250 (no progress)\n"
"    top: libstripped.so+0x1250 <- libstripped.so+0x2000 <- main (app)\n"
"  3. rank 5: running libstripped.so+0x1234 (no progress)\n"
"    top: libstripped.so+0x1234 <- ?? (no mapped object) <- ... (outer frames not unwound)\n"
"\n"
"outlier: rank 4: running libstripped.so+0x1250, the others: ranks 0-3 running libstripped.so+0x1234 (no progress); rank 5 running libstripped.so+0x1234 (no progress)\n"
"outlier: rank 5: running libstripped.so+0x1234, the others: ranks 0-3 running libstripped.so+0x1234 (no progress); rank 4 running libstripped.so+0x1250 (no progress)\n");
	free(text);
	free_procs(procs, 6);
}

static void test_format_ranks(void)
{
	static const int ranks[] = { 0, 1, 2, 3, 4, 5, 7, 9, 10, 11, 12 };
	char buf[64];

	stacktree__format_ranks(ranks, 11, buf, sizeof(buf));
	CHECK_STR(buf, "0-5,7,9-12");
	stacktree__format_ranks(ranks + 6, 1, buf, sizeof(buf));
	CHECK_STR(buf, "7");
	stacktree__format_ranks(ranks, 0, buf, sizeof(buf));
	CHECK_STR(buf, "");
	stacktree__format_ranks(ranks, 2, buf, sizeof(buf));
	CHECK_STR(buf, "0-1");
	/* cut: "0-5,7" needs 6 bytes with its NUL, "..." more */
	stacktree__format_ranks(ranks, 11, buf, 10);
	CHECK_STR(buf, "0-5,7...");
	stacktree__format_ranks(ranks, 11, buf, 9);
	CHECK_STR(buf, "0-5,7...");
	stacktree__format_ranks(ranks, 11, buf, 8);
	CHECK_STR(buf, "0-5...");
	stacktree__format_ranks(ranks, 11, buf, 7);
	CHECK_STR(buf, "0-5...");
	stacktree__format_ranks(ranks, 11, buf, 6);
	CHECK_STR(buf, "...");
	stacktree__format_ranks(ranks, 11, buf, 3);
	CHECK_STR(buf, "");
	/* exactly the size of the whole list and its NUL: not cut */
	stacktree__format_ranks(ranks, 11, buf, 11);
	CHECK_STR(buf, "0-5,7,9-12");
	stacktree__format_ranks(ranks, 11, buf, 10);
	CHECK_STR(buf, "0-5,7...");
}

int main(void)
{
	test_one_odd_rank();
	test_two_equal_classes();
	test_pids();
	test_one_process();
	test_deep();
	test_unknown_stack();
	test_stripped_truncated();
	test_format_ranks();
	return check_done();
}
