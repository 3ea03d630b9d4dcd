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

int main(void)
{
	test_one_odd_rank();
	return check_done();
}
