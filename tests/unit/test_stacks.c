// SPDX-License-Identifier: MIT
/* The root-free parts of the snapshot (user/stacks/stacks_class.c) on synthetic frames: Python frames
 * merged at the eval-loop frames, classification (where / api / issuing), the progress
 * comparison, the wait heuristics and the JSON of docs/fr-schema.md "Stacks (version 2)". */
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "pyframes.h"
#include "stacks_int.h"

static struct strpool pool;

static struct stack_frame nat(const char *func, const char *module, uint64_t off)
{
	return (struct stack_frame){ .kind = STACK_NATIVE, .func = func, .module = module,
				     .build_id = "ab12", .module_off = off, .pc = 0x7f0000000000 + off,
				     .func_off = 4 };
}

static const char *kinds(const struct stack_frame *f, int n)
{
	static char buf[256];
	int k = 0;

	for (int i = 0; i < n && k < (int)sizeof(buf) - 2; i++) {
		const char *name = f[i].func ? f[i].func : "?";

		k += snprintf(buf + k, sizeof(buf) - k, "%s%s%s", i ? " " : "",
			      f[i].kind == STACK_PYTHON ? "py:" : "", name);
	}
	return buf;
}

static void test_merge(void)
{
	/* innermost first: a C call from Python, two eval activations (3.11 style) */
	struct stack_frame native[] = {
		nat("pause", "libc", 1), nat("ffi_call", "ffi", 2),
		nat("_PyEval_EvalFrameDefault", "py", 3), nat("PyEval_EvalCode", "py", 4),
		nat("_PyEval_EvalFrameDefault", "py", 3), nat("main", "py", 5),
	};
	struct py_frame py[] = {
		{ "inner", "a.py", 10, false }, { "outer", "a.py", 20, true },
		{ "gen", "b.py", 30, true },
	};
	struct stack_frame out[16];
	uint8_t api[16];
	bool cut, no_eval, left;
	int n;

	n = stacks__merge_python(native, NULL, 6, py, 3, &pool, out, api, 16, &cut, &no_eval, &left);
	CHECK(n == 9, "merged %d frames", n);
	CHECK_STR(kinds(out, n), "pause ffi_call py:inner py:outer _PyEval_EvalFrameDefault "
		  "PyEval_EvalCode py:gen _PyEval_EvalFrameDefault main");
	CHECK(!cut && !no_eval && !left, "flags %d %d %d", cut, no_eval, left);
	CHECK_STR(out[2].file, "a.py");
	CHECK(out[2].line == 10, "line %d", out[2].line);

	/* no eval frame unwound: Python first, said so */
	n = stacks__merge_python(native, NULL, 2, py, 2, &pool, out, api, 16, &cut, &no_eval, &left);
	CHECK_STR(kinds(out, n), "py:inner py:outer pause ffi_call");
	CHECK(no_eval && !left, "no_eval %d left %d", no_eval, left);

	/* more activations than eval frames (cut native stack): the rest outermost */
	n = stacks__merge_python(native, NULL, 3, py, 3, &pool, out, api, 16, &cut, &no_eval, &left);
	CHECK_STR(kinds(out, n), "pause ffi_call py:inner py:outer _PyEval_EvalFrameDefault py:gen");
	CHECK(left && !no_eval, "left %d", left);

	/* max reached */
	n = stacks__merge_python(native, NULL, 6, py, 3, &pool, out, api, 4, &cut, &no_eval, &left);
	CHECK(n == 4 && cut, "n %d cut %d", n, cut);
}

static struct stack_thread thread_of(struct stack_frame *f, int n, char state, const char *wchan)
{
	struct stack_thread t = { .tid = 7, .state = state, .frames = f, .nr_frames = n };

	snprintf(t.wchan, sizeof(t.wchan), "%s", wchan);
	return t;
}

static void test_classify(void)
{
	struct stack_frame f[6];
	uint8_t api[6] = { 0 };
	struct stack_thread t;

	/* ncclAllReduce -> cudaStreamSynchronize -> cuStreamSynchronize: NCCL wins */
	f[0] = nat("futex_wait", "libc", 1);
	f[1] = nat("cuStreamSynchronize", "libcuda.so.1", 2);
	f[2] = nat("cudaStreamSynchronize", "libcudart.so.13", 3);
	f[3] = nat("pncclAllReduce", "libnccl.so.2", 4);
	f[4] = nat("main", "app", 5);
	api[1] = FRAME_API_DRIVER, api[2] = FRAME_API_CUDA, api[3] = FRAME_API_NCCL;
	t = thread_of(f, 5, 'S', "futex_wait_queue");
	stacks__classify(&t, api);
	CHECK(t.where == WHERE_NCCL, "where %s", stacks__where_name(t.where));
	CHECK_STR(t.api, "ncclAllReduce");
	api[3] = 0;
	stacks__classify(&t, api);
	CHECK(t.where == WHERE_CUDA, "where %s", stacks__where_name(t.where));
	CHECK_STR(t.api, "cudaStreamSynchronize");
	api[2] = 0;
	stacks__classify(&t, api);
	CHECK(t.where == WHERE_DRIVER, "where %s", stacks__where_name(t.where));
	CHECK_STR(t.api, "cuStreamSynchronize");
	/* outermost of a kind: cudaMemcpy calling cudaStreamSynchronize is cudaMemcpy */
	f[3] = nat("cudaMemcpy", "libcudart.so.13", 4);
	api[2] = api[3] = FRAME_API_CUDA;
	stacks__classify(&t, api);
	CHECK_STR(t.api, "cudaMemcpy");

	memset(api, 0, sizeof(api));
	f[1] = nat("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(int)",
		   "libc10_cuda.so", 2);
	stacks__classify(&t, api);
	CHECK(t.where == WHERE_ALLOCATOR && !t.api, "where %s", stacks__where_name(t.where));

	f[1] = nat("do_work", "app", 2);
	f[2] = (struct stack_frame){ .kind = STACK_PYTHON, .func = "step", .file = "t.py", .line = 3 };
	stacks__classify(&t, api);
	CHECK(t.where == WHERE_PYTHON, "where %s", stacks__where_name(t.where));

	/* idle by the top frame, whatever the state */
	t = thread_of(f, 2, 'R', "");
	f[0] = nat("__GI___libc_read", "libc", 1);
	stacks__classify(&t, api);
	CHECK(t.where == WHERE_IDLE, "read: where %s", stacks__where_name(t.where));
	f[0] = nat("readdir", "libc", 1);
	stacks__classify(&t, api);
	CHECK(t.where == WHERE_RUNNING, "readdir: where %s", stacks__where_name(t.where));
	/* idle by a sleeping wait channel */
	t = thread_of(f, 2, 'S', "do_epoll_wait");
	stacks__classify(&t, api);
	CHECK(t.where == WHERE_IDLE, "epoll wchan: where %s", stacks__where_name(t.where));
	t = thread_of(f, 0, 'D', "kernel_clone");
	stacks__classify(&t, api);
	CHECK(t.where == WHERE_UNKNOWN, "no frames: where %s", stacks__where_name(t.where));

	CHECK(stacks__is_wait_func("pthread_cond_wait") && stacks__is_wait_func("__futex_abstimed_wait_common") &&
	      stacks__is_wait_func("clock_nanosleep") && stacks__is_wait_func("epoll_wait") &&
	      stacks__is_wait_func("__lll_lock_wait") && stacks__is_wait_func("__new_sem_wait_slow64"),
	      "wait funcs");
	CHECK(!stacks__is_wait_func("readlink") && !stacks__is_wait_func("spin_loop") &&
	      !stacks__is_wait_func(NULL), "not wait funcs");
	CHECK(!stacks__is_wait_wchan("0") && !stacks__is_wait_wchan("") &&
	      stacks__is_wait_wchan("futex_wait_queue"), "wchans");
}

static void test_issuing(void)
{
	struct stack_thread th[3] = { { .tid = 10, .main = true, .where = WHERE_IDLE },
				      { .tid = 11, .where = WHERE_CUDA },
				      { .tid = 12, .where = WHERE_NCCL } };
	struct stack_proc sp = { .pid = 10, .threads = th, .nr_threads = 3 };

	stacks__pick_issuing(&sp);
	CHECK(!th[0].issuing && !th[1].issuing && th[2].issuing, "nccl thread issues");
	th[0].where = WHERE_NCCL;
	stacks__pick_issuing(&sp);
	CHECK(th[0].issuing && !th[2].issuing, "main first");
	th[0].where = th[1].where = th[2].where = WHERE_IDLE;
	th[1].python = true;
	stacks__pick_issuing(&sp);
	CHECK(th[1].issuing && !th[0].issuing, "a Python thread when the main one is not");
	th[1].python = false;
	stacks__pick_issuing(&sp);
	CHECK(th[0].issuing, "else main");
}

static void test_same(void)
{
	struct stack_frame a[] = { nat("f", "m", 1), nat("g", "m", 2) };
	struct stack_frame b[] = { nat("f", "m", 1), nat("g", "m", 2) };

	b[0].pc += 0x1000;	/* another load address, same code */
	CHECK(stacks__same_stack(a, 2, "x", b, 2, "x"), "same");
	CHECK(!stacks__same_stack(a, 2, "x", b, 2, "y"), "api differs");
	CHECK(!stacks__same_stack(a, 2, NULL, b, 1, NULL), "depth differs");
	b[1].module_off = 3;
	CHECK(!stacks__same_stack(a, 2, NULL, b, 2, NULL), "offset differs");
}

static void test_json(void)
{
	const char *kstack[] = { "futex_wait_queue", "do_futex" };
	struct stack_frame f[4] = {
		nat("cudaStreamSynchronize", "/lib/libcudart.so.13", 0x6f12a),
		{ .kind = STACK_NATIVE, .pc = 0x7f3a1a001234, .module = "/opt/s.so", .build_id = "9c0e",
		  .module_off = 0x1234 },
		{ .kind = STACK_PYTHON, .func = "Trainer.step", .file = "/t.py", .line = 42 },
		/* the ELF file was not read: no offset */
		{ .kind = STACK_NATIVE, .pc = 0x7f3a1a009999, .module = "/gone.so" },
	};
	struct stack_thread th = { .tid = 4242, .name = "python3", .state = 'S',
				   .wchan = "futex_wait_queue", .kstack = kstack, .nr_kstack = 2,
				   .frames = f, .nr_frames = 4, .where = WHERE_CUDA,
				   .api = "cudaStreamSynchronize", .progress = PROGRESS_NONE,
				   .main = true, .issuing = true, .python = true };
	struct stack_thread th2 = { .tid = 4243, .nr_kstack = -1, .kstack_err = "EACCES",
				    .unwind_err = "did not stop" };
	struct stack_thread threads[2] = { th, th2 };
	struct stack_proc sp = { .pid = 4242, .comm = "python3", .rank = 3, .world_size = -1,
				 .local_rank = -1, .real_ns = 1795940186369426561ULL,
				 .mono_ns = 941645312, .samples = 3, .interval_ms = 200,
				 .stopped_ns_max = 3100000, .python = "3.11.7", .threads = threads,
				 .nr_threads = 2 };
	cJSON *j = stacks__json(&sp);
	char *s = j ? cJSON_PrintUnformatted(j) : NULL;
	cJSON *t, *fr;

	CHECK(s != NULL, "json");
	if (!s)
		return;
	CHECK(strstr(s, "\"time_ns\":1795940186369426561,") != NULL, "time_ns exact: %s", s);
	CHECK(strstr(s, "\"stopped_ms_max\":3.1,") != NULL, "stopped_ms_max: %s", s);
	CHECK(strstr(s, "\"rank\":3,\"world_size\":null") != NULL, "rank: %s", s);
	CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "ptrace_error")), "ptrace_error null");
	CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(j, "python")), "3.11.7");
	t = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "threads"), 0);
	CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(t, "state")), "S");
	CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(t, "where")), "cuda");
	CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(t, "progress")), "none");
	CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(t, "kernel_stack")) == 2, "kstack");
	fr = cJSON_GetObjectItem(t, "frames");
	CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(fr, 0), "module_off")), "0x6f12a");
	CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(fr, 0), "func_off")), "0x4");
	CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(fr, 0), "pc")), "0x7f000006f12a");
	CHECK(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(fr, 1), "func")) &&
	      cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(fr, 1), "func_off")), "stripped: nulls");
	CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(fr, 1), "build_id")), "9c0e");
	CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(fr, 2), "kind")), "python");
	CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(fr, 2), "line")) == 42, "line");
	CHECK(cJSON_GetObjectItem(cJSON_GetArrayItem(fr, 2), "module") == NULL, "python: no module");
	CHECK(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(fr, 3), "module_off")) &&
	      cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(fr, 3), "build_id")) &&
	      cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(fr, 3), "func")), "no ELF: nulls");
	t = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "threads"), 1);
	CHECK(cJSON_IsNull(cJSON_GetObjectItem(t, "kernel_stack")) &&
	      cJSON_IsNull(cJSON_GetObjectItem(t, "state")) &&
	      cJSON_IsNull(cJSON_GetObjectItem(t, "wchan")), "unknowns are null");
	CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(t, "kernel_stack_error")), "EACCES");
	CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(t, "progress")), "unknown");
	CHECK_STR(stacks__progress_name(PROGRESS_YES), "yes");
	free(s);
	cJSON_Delete(j);
}

int main(void)
{
	test_merge();
	test_classify();
	test_issuing();
	test_same();
	test_json();
	strpool__free(&pool);
	return check_done();
}
