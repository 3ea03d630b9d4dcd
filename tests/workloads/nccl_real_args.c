// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * nccl_real_args: calls the host API of the REAL libnccl.so.2 (NCCL 2.28.9, $(CUDA_HOME)/lib,
 * linked with an rpath; real libcudart.so.13 too) once each with distinct, known arguments, so
 * a test can check that tptrace decodes every argument of every probed NCCL function. There is
 * no GPU and no driver: every call fails (or crashes, see below) — only the entry (and, where
 * it returns, the return value) matters.
 *
 * Usage: nccl_real_args [--skip-crashing] [--hold]
 *
 * Before READY: nothing but filling the ids below (no NCCL or CUDA call).
 *
 * Constants: C = (ncclComm_t)0xc0ffee, S = (cudaStream_t)0x5100; ID = ncclUniqueId with
 * internal[i] = i (i = 0..127); ID2 = internal[i] = 128 + i; cfg = NCCL_CONFIG_INITIALIZER with
 * blocking = 0, commName = "tptrace-cfg", netName = "tptrace-net".
 *
 * After GO, EXACTLY these calls on the main thread, in this order (return value on this machine
 * in brackets; "crash" = SIGSEGV inside NCCL, see below):
 *   1. ncclGetVersion(&version)                                      [0, version 22809]
 *   2. ncclGetUniqueId(&uid)                                          [0]
 *   3. ncclCommInitRank(&comm, 4, ID, 2)                              [1 ncclUnhandledCudaError]
 *   4. ncclCommInitRankConfig(&comm, 6, ID, 5, &cfg)                  [1]
 *   5. ncclCommInitRankScalable(&comm, 8, 7, 2, {ID, ID2}, &cfg)      [1]
 *   6. ncclCommInitAll(comms, 3, {0, 1, 2})                           [1]
 *   7. ncclGroupStart()                                               [0]
 *   8. ncclGroupEnd()                                                 [0]
 *   9. ncclCommSplit(C, 7, 9, &newcomm, NULL)                         [1]
 *  10. ncclAllReduce((void*)0x1000, (void*)0x2000, 12345, ncclFloat16, ncclMax, NULL, S)
 *                                                                    [4 ncclInvalidArgument]
 *  11. ncclGetErrorString(ncclRemoteError)   ["remote process exited or there was a network error"]
 *  12. ncclGetLastError(NULL)                                         [a string]
 * Then the calls that dereference the bogus comm C and crash in NCCL 2.28.9 (its comm checks
 * only test for NULL, then read comm->abortFlag etc.):
 *  13. ncclAllReduce((void*)0x1000, (void*)0x2000, 12345, ncclFloat16, ncclMax, C, S)
 *  14. ncclAllGather((void*)0x1100, (void*)0x2100, 2222, ncclBfloat16, C, S)
 *  15. ncclReduceScatter((void*)0x1200, (void*)0x2200, 3333, ncclInt32, ncclMin, C, S)
 *  16. ncclBroadcast((void*)0x1300, (void*)0x2300, 4444, ncclUint8, 5, C, S)
 *  17. ncclBcast((void*)0x1400, 5555, ncclInt64, 6, C, S)
 *  18. ncclReduce((void*)0x1500, (void*)0x2500, 6666, ncclFloat64, ncclProd, 2, C, S)
 *  19. ncclAlltoAll((void*)0x1600, (void*)0x2600, 7777, ncclUint32, C, S)
 *  20. ncclGather((void*)0x1700, (void*)0x2700, 8888, ncclFloat32, 1, C, S)
 *  21. ncclScatter((void*)0x1800, (void*)0x2800, 9999, ncclUint64, 3, C, S)
 *  22. ncclSend((void*)0x1900, 256, ncclFloat32, 3, C, S)
 *  23. ncclRecv((void*)0x2900, 512, ncclInt8, 4, C, S)
 *  24. ncclCommShrink(C, {1, 2}, 2, &newcomm, NULL, 0)
 *  25. ncclCommGetAsyncError(C, &async_error)
 *  26. ncclCommCount(C, &count)
 *  27. ncclCommUserRank(C, &rank)
 *  28. ncclCommCuDevice(C, &device)
 *  29. ncclCommRevoke(C, 0)
 *  30. ncclCommFinalize(C)
 *  31. ncclCommAbort(C)
 *  32. ncclCommDestroy(C)
 * Each of 13-32 runs under a SIGSEGV/SIGBUS handler that siglongjmps back, so the entry (all
 * arguments) is observable but the function never returns (no uretprobe hit for it). With
 * --skip-crashing, 13-32 are not called at all. After each call an info line
 * "# <n> <function> rc=<value>" or "# <n> <function> crashed" goes to stdout; then DONE.
 * (ncclMemAlloc/ncclMemFree/ncclCommRegister/... are not called: not probed by tptrace.)
 */
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include "handshake.h"

#define C ((ncclComm_t)0xc0ffee)
#define S ((cudaStream_t)0x5100)
#define P(x) ((void *)(x))

static sigjmp_buf crash_env;
static volatile sig_atomic_t in_guard;
static bool skip_crashing;
static int hold;

static void on_crash(int sig)
{
	if (!in_guard) {
		signal(sig, SIG_DFL);
		raise(sig);
	}
	siglongjmp(crash_env, sig);
}

/* Runs one call that returns ncclResult_t (or a pointer as long), logging its number. */
#define CALL(n, name, expr) \
	hs_info("%d %s rc=%ld", (n), (name), (long)(expr))

/* Runs a call that is expected to crash; recovers. Must be a macro: the jump target frame. */
#define CRASHY(n, name, expr)							\
	do {									\
		if (skip_crashing)						\
			break;							\
		if (sigsetjmp(crash_env, 1) == 0) {				\
			in_guard = 1;						\
			long rc_ = (long)(expr);				\
			in_guard = 0;						\
			hs_info("%d %s rc=%ld", (n), (name), rc_);		\
		} else {							\
			in_guard = 0;						\
			hs_info("%d %s crashed", (n), (name));			\
		}								\
	} while (0)

int main(int argc, char **argv)
{
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	ncclUniqueId id, ids[2], uid;
	ncclComm_t comm = NULL, comms[3], newcomm = NULL;
	ncclResult_t async_error;
	struct sigaction sa = { 0 };
	int version = 0, count, rank, device, devlist[3] = { 0, 1, 2 };
	int exclude[2] = { 1, 2 };

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--skip-crashing"))
			skip_crashing = true;
		else if (!strcmp(argv[i], "--hold"))
			hold = 1;
		else {
			fprintf(stderr, "usage: nccl_real_args [--skip-crashing] [--hold]\n");
			return 2;
		}
	}
	for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) {
		id.internal[i] = (char)i;
		ids[1].internal[i] = (char)(128 + i);
	}
	ids[0] = id;
	cfg.blocking = 0;
	cfg.commName = "tptrace-cfg";
	cfg.netName = "tptrace-net";
	sa.sa_handler = on_crash;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, NULL);
	sigaction(SIGBUS, &sa, NULL);
	hs_info("nccl_real_args comm=%p stream=%p skip_crashing=%d", (void *)C, (void *)S,
		skip_crashing);

	hs_ready_wait_go();
	CALL(1, "ncclGetVersion", ncclGetVersion(&version));
	hs_info("version %d", version);
	CALL(2, "ncclGetUniqueId", ncclGetUniqueId(&uid));
	CALL(3, "ncclCommInitRank", ncclCommInitRank(&comm, 4, id, 2));
	CALL(4, "ncclCommInitRankConfig", ncclCommInitRankConfig(&comm, 6, id, 5, &cfg));
	CALL(5, "ncclCommInitRankScalable", ncclCommInitRankScalable(&comm, 8, 7, 2, ids, &cfg));
	CALL(6, "ncclCommInitAll", ncclCommInitAll(comms, 3, devlist));
	CALL(7, "ncclGroupStart", ncclGroupStart());
	CALL(8, "ncclGroupEnd", ncclGroupEnd());
	CALL(9, "ncclCommSplit", ncclCommSplit(C, 7, 9, &newcomm, NULL));
	CALL(10, "ncclAllReduce", ncclAllReduce(P(0x1000), P(0x2000), 12345, ncclFloat16, ncclMax,
					       NULL, S));
	hs_info("11 ncclGetErrorString \"%s\"", ncclGetErrorString(ncclRemoteError));
	hs_info("12 ncclGetLastError \"%s\"", ncclGetLastError(NULL));

	CRASHY(13, "ncclAllReduce", ncclAllReduce(P(0x1000), P(0x2000), 12345, ncclFloat16,
						  ncclMax, C, S));
	CRASHY(14, "ncclAllGather", ncclAllGather(P(0x1100), P(0x2100), 2222, ncclBfloat16, C, S));
	CRASHY(15, "ncclReduceScatter", ncclReduceScatter(P(0x1200), P(0x2200), 3333, ncclInt32,
							  ncclMin, C, S));
	CRASHY(16, "ncclBroadcast", ncclBroadcast(P(0x1300), P(0x2300), 4444, ncclUint8, 5, C, S));
	CRASHY(17, "ncclBcast", ncclBcast(P(0x1400), 5555, ncclInt64, 6, C, S));
	CRASHY(18, "ncclReduce", ncclReduce(P(0x1500), P(0x2500), 6666, ncclFloat64, ncclProd, 2,
					    C, S));
	CRASHY(19, "ncclAlltoAll", ncclAlltoAll(P(0x1600), P(0x2600), 7777, ncclUint32, C, S));
	CRASHY(20, "ncclGather", ncclGather(P(0x1700), P(0x2700), 8888, ncclFloat32, 1, C, S));
	CRASHY(21, "ncclScatter", ncclScatter(P(0x1800), P(0x2800), 9999, ncclUint64, 3, C, S));
	CRASHY(22, "ncclSend", ncclSend(P(0x1900), 256, ncclFloat32, 3, C, S));
	CRASHY(23, "ncclRecv", ncclRecv(P(0x2900), 512, ncclInt8, 4, C, S));
	CRASHY(24, "ncclCommShrink", ncclCommShrink(C, exclude, 2, &newcomm, NULL, 0));
	CRASHY(25, "ncclCommGetAsyncError", ncclCommGetAsyncError(C, &async_error));
	CRASHY(26, "ncclCommCount", ncclCommCount(C, &count));
	CRASHY(27, "ncclCommUserRank", ncclCommUserRank(C, &rank));
	CRASHY(28, "ncclCommCuDevice", ncclCommCuDevice(C, &device));
	CRASHY(29, "ncclCommRevoke", ncclCommRevoke(C, 0));
	CRASHY(30, "ncclCommFinalize", ncclCommFinalize(C));
	CRASHY(31, "ncclCommAbort", ncclCommAbort(C));
	CRASHY(32, "ncclCommDestroy", ncclCommDestroy(C));

	hs_done(hold);
	return 0;
}
