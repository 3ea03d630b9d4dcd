// SPDX-License-Identifier: MIT
/* Which functions a thread may be borrowed in by the Python door (user/py/pyrun.c): never in the
 * allocator, the loader, a lock primitive, the interpreter's GIL, pending-call or lifecycle
 * code; anywhere else, the eval loop included (else a single-threaded Python loop could never
 * be entered). */
#include <stdbool.h>

#include "check.h"
#include "pyrun.h"

int main(void)
{
	static const char *const unsafe[] = {
		"malloc", "free", "__libc_malloc", "_int_malloc", "_int_free", "realloc", "calloc",
		"tcache_init", "__lll_lock_wait", "pthread_mutex_lock", "__pthread_mutex_unlock_usercnt",
		"pthread_cond_wait", "pthread_create", "_dl_runtime_resolve_xsave", "dlopen",
		"sem_wait", "PyThread_acquire_lock_timed", "Py_AddPendingCall",
		"_PyEval_AddPendingCall", "make_pending_calls", "_Py_HandlePending", "take_gil",
		"drop_gil", "PyEval_RestoreThread", "PyEval_SaveThread", "PyEval_AcquireThread",
		"Py_FinalizeEx", "_Py_InitializeMain", "PyThreadState_New", "_PyThreadState_DeleteCurrent",
		"PyGILState_Ensure", "PyMem_Malloc", "_PyObject_Malloc", "PyObject_Free",
		"_PyObject_GC_New", "PyMutex_Lock", "_PyMutex_LockTimed", "_PyParkingLot_Park",
		"fork", "_Fork", "exit",
	};
	static const char *const safe[] = {
		"_PyEval_EvalFrameDefault", "PyEval_EvalCode", "_PyEval_Vector",
		"PyObject_GetAttr", "PyLong_FromLong", "clock_nanosleep", "__read", "epoll_wait",
		"poll", "select", "busy_malloc", "at::native::add_kernel", "ncclAllReduce",
		"cudaStreamSynchronize", "PyRun_SimpleString",
	};

	for (size_t i = 0; i < sizeof(unsafe) / sizeof(unsafe[0]); i++)
		CHECK(pyrun__unsafe_function(unsafe[i]), "%s should not be borrowed in", unsafe[i]);
	for (size_t i = 0; i < sizeof(safe) / sizeof(safe[0]); i++)
		CHECK(!pyrun__unsafe_function(safe[i]), "%s should be safe", safe[i]);
	return check_done();
}
