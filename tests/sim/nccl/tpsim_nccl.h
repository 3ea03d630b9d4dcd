/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Sim-only API and behaviour of the simulated libnccl.so.2 (tests/sim/nccl).
 *
 * The simulated library exports the NCCL 2.28.9 host API from <nccl.h> under the real names
 * (unversioned, ncclX a weak alias of pncclX as in the real library). Like the real library it
 * carries its own static copy of the (simulated) CUDA runtime, its cuda* functions local
 * symbols (.symtab only), so its runtime calls never go through the application's
 * libcudart.so.13, and it reaches the driver itself (dlopen libcuda.so.1, cuGetProcAddress).
 * Every communicator of a process has a stream of its own (cudaStreamCreateWithFlags,
 * non-blocking, on the comm's device) and two events. Each operation (or group, below) is one
 * kernel, launched the way real NCCL launches it:
 *   cudaEventRecord(ev_user, user stream); cudaStreamWaitEvent(comm stream, ev_user);
 *   cuLaunchKernelEx(grid (2,1,1), block (512,1,1), comm stream);
 *   cudaEventRecord(ev_done, comm stream); cudaStreamWaitEvent(user stream, ev_done)
 * so the kernel starts after the work queued before it on the caller's stream, work queued on
 * that stream afterwards waits for it, and work on other streams runs beside it (compute
 * overlapping communication). The kernels are the entries of one PTX module the library loads
 * into the driver at the first communicator's creation (cuModuleLoadData; cuModuleGetFunction
 * at each kernel's first launch); their body, the collective below, is given to the simulated
 * driver with tpsim_set_function_body and runs on the comm stream's worker. CUPTI (the sim's)
 * thus sees NCCL's runtime calls as RUNTIME records, its cuLaunchKernelEx as a DRIVER record,
 * and the kernel with that driver record's correlation id, as the real one does. Ranks are
 * separate processes (or threads: ncclCommInitAll) that rendezvous through POSIX shared
 * memory. Limits: one module per process (loaded in the context current at the first comm's
 * creation); a communicator's kernels run in launch order on its one stream.
 *
 * Communicators
 *   ncclGetUniqueId: bytes 0-3 "TPSN", 4-127 random. The shared segment of the communicator is
 *   /dev/shm/tpsim-nccl-<hex of id bytes 0..19> (any 128 bytes work as an id). A split comm
 *   lives in <parent>-s<n>-c<color>, a shrunk one in <parent>-k<n> (n counts splits/shrinks of
 *   the parent, the same on every rank). Init blocks until all nranks joined; after
 *   TPSIM_NCCL_INIT_TIMEOUT_S it gives up with ncclSystemError. The last comm to leave a
 *   segment (destroy/abort) unlinks it; ncclGetUniqueId unlinks stale segments whose members
 *   are all dead processes. Ids are random, so a stale segment never meets a new id.
 *   ncclCommSplit and ncclCommShrink rendezvous on the parent's segment (host side, blocking).
 *   All communicators are blocking (config->blocking is ignored).
 *
 * Operations
 *   The host call validates its arguments, takes the next sequence number and enqueues; it
 *   never blocks. Collectives: one counter per comm (collective_seq, from 0, incremented by
 *   every collective call on that rank, in call order, also inside groups). P2p: one counter
 *   per (comm, direction, peer): the n-th ncclSend from a to b pairs with the n-th ncclRecv on
 *   b from a. When the stream's worker reaches the op it registers its arrival and waits until
 *   every rank arrived at the same collective_seq (or the matching p2p peer posted); then it
 *   lasts TPSIM_NCCL_US + bytes / TPSIM_NCCL_GBPS and completes. A rank that never arrives
 *   (skipped call, dead process) leaves the others' streams blocked forever: their
 *   cudaStreamSynchronize / cudaEventSynchronize hang and cudaEventQuery returns
 *   cudaErrorNotReady, as on a real hang.
 *   Ops between ncclGroupStart/End (nesting counted per thread) are enqueued at the outermost
 *   ncclGroupEnd as ONE kernel per (stream, comm) that first posts all its ops and then waits for all,
 *   so send+recv to the same peer in one group cannot deadlock. Sends/recvs of one (src,dst)
 *   pair must stay in order (one stream), as in practice.
 *   Bytes: allreduce/broadcast/reduce count*size; allgather, alltoall, gather, scatter
 *   count*size*nranks; reducescatter count*size*nranks; send/recv count*size.
 *   Data movement: only ncclAllReduce with ncclFloat32 + ncclSum really reduces, and only
 *   its first TPSIM_NCCL_DATA_MAX bytes (recvbuff[i] = sum over ranks of sendbuff[i]), and
 *   only when every rank passed the same count/dtype/op. The rest of recvbuff and every other
 *   op move no data (a real 4 MiB reduction across processes costs tens of ms on a small VM
 *   and would swamp the simulated time).
 *   Kernel names (the module's entries): ncclDevKernel_<Coll>_<Op>_<type>_RING_LL for
 *   reductions (Op Sum, Prod, MinMax, SumPostDiv, PreMulSum; type i8 u8 i32 u32 i64 u64 f16
 *   f32 f64 bf16 f8e4m3 f8e5m2), ncclDevKernel_<Coll>_RING_LL for AllGather and Broadcast,
 *   ncclDevKernel_SendRecv for send/recv/alltoall/gather/scatter; grid (2,1,1) block
 *   (512,1,1). A group is one kernel named after its first collective, else SendRecv.
 *
 * Mismatches between ranks at the same collective_seq (op kind, count, dtype, reduction op,
 * root) or p2p pair (count, dtype) never crash. Each rank logs what it sees on stderr with
 * TPSIM_NCCL_VERBOSE=1 ("tpsim-nccl: ... mismatch ..."). Whether the op then hangs or
 * completes is per field, TPSIM_NCCL_HANG_ON (comma list of kind,count,dtype,op,root,p2p):
 *   default "kind": a different op kind (allreduce vs allgather, e.g. a skipped call) hangs
 *   every rank of that collective forever, as real NCCL does; count, dtype, op and root
 *   mismatches and p2p count/dtype mismatches complete (no data moved), as real NCCL often
 *   "succeeds" with corrupt data. "p2p" makes p2p mismatches hang.
 *
 * Abort/revoke: ncclCommAbort makes this process's pending ops of that comm complete at once
 * (the rendezvous is abandoned; peers keep waiting), waits for them, frees the comm and leaves
 * the segment. ncclCommRevoke does the same without freeing; ncclCommGetAsyncError then says
 * ncclInProgress until the pending ops drained, then ncclSuccess; new ops get
 * ncclInvalidUsage. ncclCommFinalize and ncclCommDestroy wait for pending ops (so they hang
 * with the stream when a peer is missing, as real NCCL does).
 *
 * Not simulated: ncclDevComm*, ncclTeam*, ncclGin*, ncclLsa*, ncclLLA2A*, ncclResetDebugInit
 * (device API, not in <nccl.h>); non-blocking communicators; user buffer registration (accepted,
 * no effect).
 *
 * Environment (read once, at load):
 *   TPSIM_NCCL_US=200              fixed cost of every op (group: once), in µs
 *   TPSIM_NCCL_GBPS=50             bandwidth for the bytes term
 *   TPSIM_NCCL_INIT_TIMEOUT_S=60   init/split/shrink rendezvous timeout -> ncclSystemError
 *   TPSIM_NCCL_HANG_ON=kind        see above
 *   TPSIM_NCCL_DATA_MAX=65536      bytes of a float32-sum allreduce really reduced (0: none)
 *   TPSIM_NCCL_VERBOSE=1           init/split/abort/mismatch lines on stderr (2: every op)
 *   TPSIM_NCCL_SOCKET_ADDR=IPv4    ncclGetUniqueId makes a TCP id whose root listens there:
 *                                  ranks in other network namespaces (hosts) join over TCP
 *                                  through the root's proxy (nccl_sim.h "TCP transport"); a
 *                                  partition hangs them, a root that dies gives
 *                                  ncclRemoteError. Split/shrink of such a rank's comm:
 *                                  ncclInvalidUsage.
 */
#ifndef TPSIM_NCCL_H
#define TPSIM_NCCL_H

#include <nccl.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Makes ncclCommGetAsyncError(comm) report err from now on, as if the library had seen a
 * network/remote failure (PyTorch's watchdog polls this and aborts the comm). */
ncclResult_t tpsim_nccl_set_async_error(ncclComm_t comm, ncclResult_t err);

/* The comm's shared-memory segment name ("/tpsim-nccl-..."), for tests; NULL if comm is not a
 * live communicator. */
const char *tpsim_nccl_comm_name(ncclComm_t comm);

#ifdef __cplusplus
}
#endif

#endif /* TPSIM_NCCL_H */
