// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * NCCL 2.28.9 host API of the simulated libnccl.so.2: communicators on shared segments
 * (segment.c), operations as kernels launched with cuLaunchKernelEx on each comm's own stream,
 * through the library's static copy of the sim runtime (tests/sim/sim.mk).
 * Behaviour and environment: tpsim_nccl.h.
 *
 * Every API function is defined as pnccl<Name> with nccl<Name> a weak alias, as in the real
 * library, so a uprobe on either name hits the same code.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include "tpsim.h"
#include "nccl_sim.h"

#define NCCL_API(ret, name, ...)						\
	ret name(__VA_ARGS__) __attribute__((weak, alias("p" #name)));		\
	ret p##name(__VA_ARGS__)

#define COMM_MAGIC 0x6e63636c636f6d6dull	/* "ncclcomm" */

struct ncclComm {
	uint64_t magic;
	struct seg seg;
	int rank, nranks, device;
	pthread_mutex_t lock;		/* sequence counters, pending, running, aborting */
	pthread_cond_t idle;		/* pending or running reached 0 */
	uint64_t collective_seq;	/* next collective's seq */
	uint64_t *send_seq, *recv_seq;	/* [peer]: last p2p pair seq issued */
	uint64_t split_count, shrink_count;
	/*
	 * The struct lives while the handle is open or ops are pending (they point at it); the
	 * segment only while the handle is open: an aborted comm's queued ops see `aborting`
	 * under the lock and never touch it.
	 */
	int pending;			/* ops enqueued and not finished */
	int running;			/* ops inside run_work that may touch the segment */
	int aborting;			/* atomic: abort or revoke in progress */
	int async_error;		/* atomic ncclResult_t */
	bool revoked, handle_closed;
	struct tcp_link *link;		/* TCP transport: this rank is remote from the root */
	struct ncclComm *next_live;
	/* The device side (none on the root's proxy comms): NCCL's own stream, and the events
	 * that order it after the user's stream and the user's stream after it. */
	cudaStream_t stream;
	cudaEvent_t ev_user, ev_done;
	pthread_mutex_t launch_lock;	/* one event sequence at a time */
};

/* One kernel on one stream: the ops of a group on that stream, or a single op. */
struct work {
	int nops;
	struct op ops[];
};

struct simnccl_config simnccl_cfg;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm *live_comms;
static char last_error[256];

/* Group state is per thread, as in NCCL. */
static __thread int group_depth;
static __thread struct op *group_ops;
static __thread int group_nops, group_cap;

static void cfg_read(void)
{
	const char *v;

	v = getenv("TPSIM_NCCL_US");
	simnccl_cfg.op_ns = (v ? strtoull(v, NULL, 10) : 200) * 1000;
	v = getenv("TPSIM_NCCL_GBPS");
	simnccl_cfg.gbps = v ? strtod(v, NULL) : 50.0;
	if (simnccl_cfg.gbps <= 0)
		simnccl_cfg.gbps = 50.0;
	v = getenv("TPSIM_NCCL_INIT_TIMEOUT_S");
	simnccl_cfg.init_timeout_s = v ? atoi(v) : 60;
	v = getenv("TPSIM_NCCL_DATA_MAX");
	simnccl_cfg.data_max = ((v ? strtoull(v, NULL, 10) : 65536) + 4095) & ~4095ull;
	v = getenv("TPSIM_NCCL_VERBOSE");
	simnccl_cfg.verbose = v ? atoi(v) : 0;
	v = getenv("TPSIM_NCCL_HANG_ON");
	if (!v)
		v = "kind";
	simnccl_cfg.hang_kind = strstr(v, "kind");
	simnccl_cfg.hang_count = strstr(v, "count");
	simnccl_cfg.hang_dtype = strstr(v, "dtype");
	simnccl_cfg.hang_op = strstr(v, "op");
	simnccl_cfg.hang_root = strstr(v, "root");
	simnccl_cfg.hang_p2p = strstr(v, "p2p");
}

void simnccl_cfg_init(void)
{
	pthread_once(&cfg_once, cfg_read);
}

static ncclResult_t fail(ncclResult_t err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	if (simnccl_cfg.verbose)
		simnccl_log("%s", last_error);
	return err;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void sleep_until_ns(uint64_t t)
{
	struct timespec ts = { t / 1000000000ull, t % 1000000000ull };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

/* ---- names ---- */

static const char *kind_name(int kind)
{
	static const char *names[] = {
		[OP_ALLREDUCE] = "AllReduce", [OP_ALLGATHER] = "AllGather",
		[OP_REDUCESCATTER] = "ReduceScatter", [OP_BROADCAST] = "Broadcast",
		[OP_REDUCE] = "Reduce", [OP_ALLTOALL] = "AlltoAll", [OP_GATHER] = "Gather",
		[OP_SCATTER] = "Scatter", [OP_SEND] = "Send", [OP_RECV] = "Recv",
	};
	return kind > 0 && kind <= OP_RECV ? names[kind] : "?";
}

static const char *dtype_name(int dtype)
{
	static const char *names[] = { "i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32",
				       "f64", "bf16", "f8e4m3", "f8e5m2" };
	return dtype >= 0 && dtype < ncclNumTypes ? names[dtype] : "?";
}

static const char *redop_name(int op)
{
	static const char *names[] = { "Sum", "Prod", "MinMax", "MinMax", "SumPostDiv" };
	return op >= 0 && op < ncclNumOps ? names[op] : "PreMulSum";
}

static size_t dtype_size(int dtype)
{
	static const size_t sizes[] = { 1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1 };
	return dtype >= 0 && dtype < ncclNumTypes ? sizes[dtype] : 1;
}

static bool is_reduction(int kind)
{
	return kind == OP_ALLREDUCE || kind == OP_REDUCE || kind == OP_REDUCESCATTER;
}

static bool has_root(int kind)
{
	return kind == OP_BROADCAST || kind == OP_REDUCE || kind == OP_GATHER ||
	       kind == OP_SCATTER;
}

/* Kernel names must outlive the record (tpsim keeps the pointer): interned, never freed. */
static const char *kernel_name(const struct op_desc *d)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static struct interned { struct interned *next; char name[]; } *names;
	struct interned *it;
	char buf[128];

	switch (d->kind) {
	case OP_ALLREDUCE:
	case OP_REDUCE:
	case OP_REDUCESCATTER:
		snprintf(buf, sizeof(buf), "ncclDevKernel_%s_%s_%s_RING_LL", kind_name(d->kind),
			 redop_name(d->redop), dtype_name(d->dtype));
		break;
	case OP_ALLGATHER:
	case OP_BROADCAST:
		snprintf(buf, sizeof(buf), "ncclDevKernel_%s_RING_LL", kind_name(d->kind));
		break;
	default:
		return "ncclDevKernel_SendRecv";
	}
	pthread_mutex_lock(&lock);
	for (it = names; it; it = it->next)
		if (!strcmp(it->name, buf))
			break;
	if (!it) {
		it = malloc(sizeof(*it) + strlen(buf) + 1);
		strcpy(it->name, buf);
		it->next = names;
		names = it;
	}
	pthread_mutex_unlock(&lock);
	return it->name;
}

/* ---- the device side: NCCL's kernels, launched through the driver ---- */

/*
 * As real NCCL, the sim gets the driver's entry points itself (cuGetProcAddress) and launches
 * its kernels with cuLaunchKernelEx; its runtime calls go to its own static copy of the sim
 * runtime (sim.mk), never through the application's libcudart.so. Its kernels are the entries
 * of one PTX module loaded at the first communicator's creation; each function's body (the
 * collective: wait for the peers, reduce, wire time) is given to the sim driver with
 * tpsim_set_function_body and gets the launch's first parameter, the work.
 */
static struct {
	pthread_once_t once;
	ncclResult_t err;
	CUresult (*launch_ex)(const CUlaunchConfig *, CUfunction, void **, void **);
	CUresult (*module_load)(CUmodule *, const void *);
	CUresult (*get_function)(CUfunction *, CUmodule, const char *);
	CUmodule module;
	pthread_mutex_t lock;
	struct kfunc { struct kfunc *next; const char *name; CUfunction f; } *funcs;
} dev = { .once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER };

static void run_work(void *arg);

/* Every kernel name kernel_name() can return, as `.entry` lines (names are < 128 bytes). */
static char *module_ptx(void)
{
	static const int kinds[] = { OP_ALLREDUCE, OP_REDUCE, OP_REDUCESCATTER };
	static const char *entry = ".entry %s(.param .u64 args)\n{\n\tret;\n}\n";
	size_t cap = (3 * (ncclNumOps + 1) * ncclNumTypes + 4) * 200, len = 0;
	char *ptx = malloc(cap), name[128];

	if (!ptx)
		return NULL;
	len += snprintf(ptx, cap, ".version 8.0\n.target sm_90\n.address_size 64\n");
	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
		for (int op = 0; op <= ncclNumOps; op++)	/* ncclNumOps: "PreMulSum" */
			for (int t = 0; t < ncclNumTypes; t++) {
				if (op && !strcmp(redop_name(op), redop_name(op - 1)))
					continue;	/* ncclMax and ncclMin share one */
				snprintf(name, sizeof(name), "ncclDevKernel_%s_%s_%s_RING_LL",
					 kind_name(kinds[k]), redop_name(op), dtype_name(t));
				len += snprintf(ptx + len, cap - len, entry, name);
			}
	len += snprintf(ptx + len, cap - len, entry, "ncclDevKernel_AllGather_RING_LL");
	len += snprintf(ptx + len, cap - len, entry, "ncclDevKernel_Broadcast_RING_LL");
	snprintf(ptx + len, cap - len, entry, "ncclDevKernel_SendRecv");
	return ptx;
}

/* Once per process, with a context current (after the comm's stream was created). */
static void dev_load(void)
{
	__typeof__(&cuGetProcAddress_v2) get;
	CUdriverProcAddressQueryResult st;
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);
	char *ptx;

	dev.err = ncclSystemError;
	if (!lib || !(get = (__typeof__(get))dlsym(lib, "cuGetProcAddress_v2")))
		return;
	if (get("cuLaunchKernelEx", (void **)&dev.launch_ex, 12000, CU_GET_PROC_ADDRESS_DEFAULT,
		&st) ||
	    get("cuModuleLoadData", (void **)&dev.module_load, 12000,
		CU_GET_PROC_ADDRESS_DEFAULT, &st) ||
	    get("cuModuleGetFunction", (void **)&dev.get_function, 12000,
		CU_GET_PROC_ADDRESS_DEFAULT, &st))
		return;
	ptx = module_ptx();
	dev.err = ptx && !dev.module_load(&dev.module, ptx) ? ncclSuccess : ncclUnhandledCudaError;
	free(ptx);
}

/* The CUfunction of a kernel name (looked up at its first launch, as NCCL's lazy loading). */
static CUfunction dev_function(const char *name)
{
	struct kfunc *k;

	pthread_mutex_lock(&dev.lock);
	for (k = dev.funcs; k; k = k->next)
		if (k->name == name)
			break;
	if (!k && (k = calloc(1, sizeof(*k)))) {
		k->name = name;
		if (dev.get_function(&k->f, dev.module, name) ||
		    tpsim_set_function_body(k->f, run_work)) {
			free(k);
			k = NULL;
		} else {
			k->next = dev.funcs;
			dev.funcs = k;
		}
	}
	pthread_mutex_unlock(&dev.lock);
	return k ? k->f : NULL;
}

/* Destroying a stream or event with work pending is deferred by the runtime: NCCL's queued
 * kernels still run (and see `aborting`). */
static void comm_dev_fini(struct ncclComm *comm)
{
	if (comm->ev_user)
		cudaEventDestroy(comm->ev_user);
	if (comm->ev_done)
		cudaEventDestroy(comm->ev_done);
	if (comm->stream)
		cudaStreamDestroy(comm->stream);
	comm->ev_user = comm->ev_done = NULL;
	comm->stream = NULL;
}

/* NCCL's stream and events for a comm of this process, on the comm's device. */
static ncclResult_t comm_dev_init(struct ncclComm *comm)
{
	int cur = -1;

	pthread_mutex_init(&comm->launch_lock, NULL);
	if (cudaGetDevice(&cur) || (cur != comm->device && cudaSetDevice(comm->device)))
		return fail(ncclUnhandledCudaError, "cannot use device %d", comm->device);
	if (cudaStreamCreateWithFlags(&comm->stream, cudaStreamNonBlocking))
		return fail(ncclUnhandledCudaError, "cudaStreamCreateWithFlags failed");
	if (cudaEventCreateWithFlags(&comm->ev_user, cudaEventDisableTiming) ||
	    cudaEventCreateWithFlags(&comm->ev_done, cudaEventDisableTiming)) {
		comm_dev_fini(comm);
		return fail(ncclUnhandledCudaError, "cudaEventCreateWithFlags failed");
	}
	pthread_once(&dev.once, dev_load);
	if (dev.err) {
		comm_dev_fini(comm);
		return fail(dev.err, "cannot load NCCL's kernels into the driver");
	}
	return ncclSuccess;
}

/* ---- communicators ---- */

static struct ncclComm *comm_live(ncclComm_t handle)
{
	struct ncclComm *c;

	pthread_mutex_lock(&live_lock);
	for (c = live_comms; c && c != handle; c = c->next_live)
		;
	pthread_mutex_unlock(&live_lock);
	return c;
}

static void comm_unlink_live(struct ncclComm *comm)
{
	struct ncclComm **p;

	pthread_mutex_lock(&live_lock);
	for (p = &live_comms; *p; p = &(*p)->next_live)
		if (*p == comm) {
			*p = comm->next_live;
			break;
		}
	pthread_mutex_unlock(&live_lock);
}

static void comm_release(struct ncclComm *comm)
{
	comm->magic = 0;
	if (comm->link)
		tcp_link_free(comm->link);
	free(comm->send_seq);
	free(comm->recv_seq);
	free(comm);
}

/* Closes the handle: leaves the segment; frees now or when the last pending op finishes. */
static void comm_close(struct ncclComm *comm)
{
	bool release;

	comm_unlink_live(comm);
	comm_dev_fini(comm);
	if (comm->link)
		tcp_link_close(comm->link);
	seg_leave(&comm->seg);
	pthread_mutex_lock(&comm->lock);
	comm->handle_closed = true;
	release = comm->pending == 0;
	pthread_mutex_unlock(&comm->lock);
	if (release)
		comm_release(comm);
}

/* shadow: the root's proxy for a remote rank (tcp.c), which has no device side. */
static ncclResult_t comm_create_id(struct ncclComm **out, const char *name, int nranks,
				   int rank, int device, const ncclUniqueId *id, bool shadow)
{
	struct ncclComm *comm;
	int err;

	simnccl_cfg_init();
	if (nranks < 1 || nranks > SEG_MAX_RANKS || rank < 0 || rank >= nranks)
		return fail(ncclInvalidArgument, "invalid rank %d or nranks %d", rank, nranks);
	comm = calloc(1, sizeof(*comm));
	if (!comm)
		return fail(ncclSystemError, "out of memory");
	comm->send_seq = calloc(nranks, sizeof(uint64_t));
	comm->recv_seq = calloc(nranks, sizeof(uint64_t));
	if (!comm->send_seq || !comm->recv_seq) {
		free(comm->send_seq);
		free(comm->recv_seq);
		free(comm);
		return fail(ncclSystemError, "out of memory");
	}
	comm->device = device;
	if (!shadow) {
		err = comm_dev_init(comm);
		if (err) {
			free(comm->send_seq);
			free(comm->recv_seq);
			free(comm);
			return err;
		}
	}
	if (id) {
		/* the segment lives on the root's host: joined there by our proxy */
		snprintf(comm->seg.name, sizeof(comm->seg.name), "%s", name);
		err = tcp_link_open(&comm->link, comm, id, name, nranks, rank,
				    simnccl_cfg.init_timeout_s);
	} else {
		err = seg_join(&comm->seg, name, nranks, rank, simnccl_cfg.init_timeout_s);
	}
	if (err) {
		comm_dev_fini(comm);
		free(comm->send_seq);
		free(comm->recv_seq);
		free(comm);
		return fail(err, "%s: rank %d of %d failed to join", name, rank, nranks);
	}
	comm->magic = COMM_MAGIC;
	comm->rank = rank;
	comm->nranks = nranks;
	comm->device = device;
	pthread_mutex_init(&comm->lock, NULL);
	pthread_cond_init(&comm->idle, NULL);
	pthread_mutex_lock(&live_lock);
	comm->next_live = live_comms;
	live_comms = comm;
	pthread_mutex_unlock(&live_lock);
	*out = comm;
	return ncclSuccess;
}

static ncclResult_t comm_create(struct ncclComm **out, const char *name, int nranks, int rank,
				int device)
{
	return comm_create_id(out, name, nranks, rank, device, NULL, false);
}

int simnccl_comm_create(struct ncclComm **out, const char *name, int nranks, int rank)
{
	return comm_create_id(out, name, nranks, rank, 0, NULL, true);
}

static int current_device(void)
{
	int dev = 0;

	if (cudaGetDevice(&dev) != cudaSuccess)
		dev = 0;
	return dev;
}

/* Blocks until every op of comm that was enqueued has finished (or was abandoned). */
static void comm_drain(struct ncclComm *comm)
{
	pthread_mutex_lock(&comm->lock);
	while (comm->pending > 0)
		pthread_cond_wait(&comm->idle, &comm->lock);
	pthread_mutex_unlock(&comm->lock);
}

static bool comm_aborting(struct ncclComm *comm)
{
	return __atomic_load_n(&comm->aborting, __ATOMIC_ACQUIRE);
}

/*
 * Abandons pending ops: running ones see `aborting` at their next wake-up (woken now), queued
 * ones skip when the stream reaches them. Waits only for the running ones, so an abort returns
 * even when the stream is stuck behind something else.
 */
static void comm_stop_pending(struct ncclComm *comm)
{
	pthread_mutex_lock(&comm->lock);
	__atomic_store_n(&comm->aborting, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&comm->lock);
	if (comm->link) {
		tcp_link_wake(comm->link);
	} else {
		seg_lock(&comm->seg);
		seg_changed(&comm->seg);
		seg_unlock(&comm->seg);
	}
	pthread_mutex_lock(&comm->lock);
	while (comm->running > 0)
		pthread_cond_wait(&comm->idle, &comm->lock);
	pthread_mutex_unlock(&comm->lock);
}

/* ---- running ops on the stream worker ---- */

static bool desc_equal(const struct op_desc *a, const struct op_desc *b)
{
	return a->kind == b->kind && a->count == b->count && a->dtype == b->dtype &&
	       (!is_reduction(a->kind) || a->redop == b->redop) &&
	       (!has_root(a->kind) || a->root == b->root);
}

/* Compares every rank's args with rank 0's; logs; returns whether the op must hang. */
static bool coll_mismatch_hangs(struct ncclComm *comm, struct seg_slot *slot, uint64_t seq)
{
	const struct op_desc *ref = &slot->desc[0];
	bool hang = false;

	for (int r = 1; r < comm->nranks; r++) {
		const struct op_desc *d = &slot->desc[r];
		char what[128] = "";
		bool h = false;

		if (d->kind != ref->kind) {
			snprintf(what, sizeof(what), "kind %s != %s", kind_name(d->kind),
				 kind_name(ref->kind));
			h = simnccl_cfg.hang_kind;
		} else if (d->count != ref->count) {
			snprintf(what, sizeof(what), "count %llu != %llu",
				 (unsigned long long)d->count, (unsigned long long)ref->count);
			h = simnccl_cfg.hang_count;
		} else if (d->dtype != ref->dtype) {
			snprintf(what, sizeof(what), "dtype %s != %s", dtype_name(d->dtype),
				 dtype_name(ref->dtype));
			h = simnccl_cfg.hang_dtype;
		} else if (is_reduction(d->kind) && d->redop != ref->redop) {
			snprintf(what, sizeof(what), "op %d != %d", d->redop, ref->redop);
			h = simnccl_cfg.hang_op;
		} else if (has_root(d->kind) && d->root != ref->root) {
			snprintf(what, sizeof(what), "root %d != %d", d->root, ref->root);
			h = simnccl_cfg.hang_root;
		} else {
			continue;
		}
		if (simnccl_cfg.verbose)
			simnccl_log("%s: rank %d sees mismatch at collective_seq %llu: rank %d %s "
				 "(rank 0): %s", comm->seg.name, comm->rank,
				 (unsigned long long)seq, r, what, h ? "hanging" : "completing");
		hang |= h;
	}
	return hang;
}

/* Elements of a float32-sum allreduce really reduced: the first data_max bytes' worth. */
static uint64_t allreduce_moved(const struct op *op)
{
	uint64_t cap = simnccl_cfg.data_max / 4;

	if (op->desc.kind != OP_ALLREDUCE || op->desc.dtype != ncclFloat32 ||
	    op->desc.redop != ncclSum)
		return 0;
	return op->desc.count < cap ? op->desc.count : cap;
}

/* Waits on the comm's segment until done(arg) (checked under the lock) or abort; lock held. */
static bool wait_locked(struct ncclComm *comm, bool (*done)(struct op *op), struct op *op)
{
	while (!done(op)) {
		if (comm_aborting(comm))
			return false;
		seg_wait(&comm->seg, __atomic_load_n(&comm->seg.hdr->progress, __ATOMIC_ACQUIRE),
			 50);
	}
	return true;
}

static bool slot_free_or_ours(struct op *op)
{
	struct seg_slot *slot = seg_slot(&op->comm->seg, op->desc.seq);

	return slot->occupant == 0 || slot->occupant == op->desc.seq + 1;
}

static bool slot_full(struct op *op)
{
	return seg_slot(&op->comm->seg, op->desc.seq)->arrived == (uint32_t)op->comm->nranks;
}

static bool never(struct op *op)
{
	return false;
}

static bool peer_posted(struct op *op)
{
	struct seg *g = &op->comm->seg;

	if (op->desc.kind == OP_SEND)
		return seg_chan(g, op->comm->rank, op->peer)->recv_posted >= op->desc.seq;
	return seg_chan(g, op->peer, op->comm->rank)->send_posted >= op->desc.seq;
}

static void op_arrive(struct op *op)
{
	struct ncclComm *comm = op->comm;
	struct seg *g = &comm->seg;
	struct seg_slot *slot;
	struct seg_chan *ch;

	seg_lock(g);
	if (op->desc.kind == OP_SEND || op->desc.kind == OP_RECV) {
		bool send = op->desc.kind == OP_SEND;

		ch = send ? seg_chan(g, comm->rank, op->peer) : seg_chan(g, op->peer, comm->rank);
		(send ? ch->send_desc : ch->recv_desc)[op->desc.seq % SEG_P2P_RING] = op->desc;
		if (send && ch->send_posted < op->desc.seq)
			ch->send_posted = op->desc.seq;
		if (!send && ch->recv_posted < op->desc.seq)
			ch->recv_posted = op->desc.seq;
	} else {
		if (!wait_locked(comm, slot_free_or_ours, op)) {
			seg_unlock(g);
			return;
		}
		slot = seg_slot(g, op->desc.seq);
		if (slot->occupant == 0) {
			slot->occupant = op->desc.seq + 1;
			slot->arrived = slot->departed = slot->accumulated = 0;
		}
		slot->desc[comm->rank] = op->desc;
		slot->arrived++;
		if (allreduce_moved(op) && op->sendbuff) {
			float *acc = seg_data(g, op->desc.seq);
			const float *in = op->sendbuff;
			uint64_t n = allreduce_moved(op);

			if (slot->accumulated++ == 0)
				memcpy(acc, in, n * 4);
			else
				for (uint64_t i = 0; i < n; i++)
					acc[i] += in[i];
		}
	}
	seg_changed(g);
	seg_unlock(g);
}

/* Returns false when the op was abandoned (abort/revoke). */
static bool op_wait(struct op *op)
{
	struct ncclComm *comm = op->comm;
	struct seg *g = &comm->seg;
	bool ok = true;

	seg_lock(g);
	if (op->desc.kind == OP_SEND || op->desc.kind == OP_RECV) {
		bool send = op->desc.kind == OP_SEND;
		struct seg_chan *ch;
		const struct op_desc *peer;

		ok = wait_locked(comm, peer_posted, op);
		ch = send ? seg_chan(g, comm->rank, op->peer) : seg_chan(g, op->peer, comm->rank);
		peer = &(send ? ch->recv_desc : ch->send_desc)[op->desc.seq % SEG_P2P_RING];
		if (ok && peer->seq == op->desc.seq &&
		    (peer->count != op->desc.count || peer->dtype != op->desc.dtype)) {
			if (simnccl_cfg.verbose)
				simnccl_log("%s: rank %d sees p2p mismatch: %s #%llu %s peer %d count "
					 "%llu %s, peer's %s count %llu %s: %s", g->name, comm->rank,
					 kind_name(op->desc.kind), (unsigned long long)op->desc.seq,
					 send ? "to" : "from", op->peer,
					 (unsigned long long)op->desc.count,
					 dtype_name(op->desc.dtype), kind_name(peer->kind),
					 (unsigned long long)peer->count, dtype_name(peer->dtype),
					 simnccl_cfg.hang_p2p ? "hanging" : "completing");
			if (simnccl_cfg.hang_p2p)
				ok = wait_locked(comm, never, op);
		}
	} else {
		struct seg_slot *slot = seg_slot(g, op->desc.seq);

		ok = slot->occupant == op->desc.seq + 1 && wait_locked(comm, slot_full, op);
		if (ok && coll_mismatch_hangs(comm, slot, op->desc.seq))
			ok = wait_locked(comm, never, op);
	}
	seg_unlock(g);
	return ok;
}

static void op_depart(struct op *op)
{
	struct seg *g = &op->comm->seg;
	struct seg_slot *slot;
	bool same = true;

	if (op->desc.kind == OP_SEND || op->desc.kind == OP_RECV)
		return;
	slot = seg_slot(g, op->desc.seq);
	/* After the last arrival nothing writes the slot until every rank departed. */
	if (allreduce_moved(op) && op->recvbuff && slot->accumulated == slot->arrived) {
		for (int r = 1; r < op->comm->nranks; r++)
			same &= desc_equal(&slot->desc[r], &slot->desc[0]);
		if (same) {
			memcpy(op->recvbuff, seg_data(g, op->desc.seq), allreduce_moved(op) * 4);
			op->moved = true;
		}
	}
	seg_lock(g);
	if (++slot->departed == (uint32_t)op->comm->nranks)
		slot->occupant = 0;
	seg_changed(g);
	seg_unlock(g);
}

/* Counts op as running unless its comm is being aborted; false: do not touch the segment. */
static bool op_start(struct op *op)
{
	struct ncclComm *comm = op->comm;

	pthread_mutex_lock(&comm->lock);
	op->running = !comm_aborting(comm);
	if (op->running)
		comm->running++;
	pthread_mutex_unlock(&comm->lock);
	return op->running;
}

static void op_finished(struct op *op)
{
	struct ncclComm *comm = op->comm;
	bool release;

	pthread_mutex_lock(&comm->lock);
	if (op->running)
		comm->running--;
	op->running = false;
	comm->pending--;
	pthread_cond_broadcast(&comm->idle);
	release = comm->pending == 0 && comm->handle_closed;
	pthread_mutex_unlock(&comm->lock);
	if (release)
		comm_release(comm);
}

/* The body of the kernel: post everything, wait for everything, then take the wire time. */
static void run_work(void *arg)
{
	struct work *w = arg;
	uint64_t start, bytes = 0;
	bool *ok = calloc(w->nops, sizeof(bool));
	bool all_ok = true;

	for (int i = 0; i < w->nops; i++) {
		struct op *op = &w->ops[i];

		if (op_start(op)) {
			if (op->comm->link)
				tcp_op_arrive(op->comm->link, op);
			else
				op_arrive(op);
		}
	}
	for (int i = 0; i < w->nops; i++) {
		struct op *op = &w->ops[i];

		ok[i] = op->running && (op->comm->link ? tcp_op_wait(op->comm->link, op)
						       : op_wait(op));
		all_ok &= ok[i];
	}
	start = now_ns();
	for (int i = 0; i < w->nops; i++) {
		if (ok[i] && !w->ops[i].comm->link)
			op_depart(&w->ops[i]);
		bytes += w->ops[i].bytes;
	}
	if (all_ok)
		sleep_until_ns(start + simnccl_cfg.op_ns + (uint64_t)(bytes / simnccl_cfg.gbps));
	for (int i = 0; i < w->nops; i++) {
		if (simnccl_cfg.verbose >= 2)
			simnccl_log("rank %d %s seq %llu %s",
				 w->ops[i].comm->rank, kind_name(w->ops[i].desc.kind),
				 (unsigned long long)w->ops[i].desc.seq,
				 ok[i] ? "done" : "abandoned");
		op_finished(&w->ops[i]);
	}
	free(ok);
	free(w);
}

/* ---- the root's side of the TCP transport (tcp.c) ---- */

bool simnccl_run_proxied(struct op *op)
{
	struct ncclComm *comm = op->comm;
	bool ok = false;

	pthread_mutex_lock(&comm->lock);
	comm->pending++;
	pthread_mutex_unlock(&comm->lock);
	if (op_start(op)) {
		op_arrive(op);
		ok = op_wait(op);
		if (ok)
			op_depart(op);
	}
	op_finished(op);
	return ok;
}

void simnccl_comm_abort(struct ncclComm *comm)
{
	comm_stop_pending(comm);
	comm_close(comm);
}

bool simnccl_comm_aborting(struct ncclComm *comm)
{
	return comm_aborting(comm);
}

void simnccl_comm_set_async(struct ncclComm *comm, int err)
{
	__atomic_store_n(&comm->async_error, err, __ATOMIC_RELEASE);
}

uint64_t simnccl_moved_elems(const struct op *op)
{
	return allreduce_moved(op);
}

/*
 * One kernel for ops (all of one comm, one user stream), on the comm's own stream, ordered as
 * real NCCL orders it: an event recorded on the user's stream that NCCL's stream waits for,
 * the kernel (cuLaunchKernelEx), an event recorded on NCCL's stream that the user's stream
 * waits for. Work the user queues on that stream afterwards waits for the collective; work on
 * other streams runs beside it.
 */
static ncclResult_t enqueue_work(struct op *ops, int nops)
{
	struct ncclComm *comm = ops[0].comm;
	cudaStream_t user = ops[0].stream;
	struct work *w = malloc(sizeof(*w) + nops * sizeof(*ops));
	const char *name = "ncclDevKernel_SendRecv", *what = NULL;
	CUlaunchConfig cfg = { .gridDimX = 2, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 512,
			       .blockDimY = 1, .blockDimZ = 1, .hStream = (CUstream)comm->stream };
	void *params[1] = { &w };
	CUfunction f;
	int err = 0;

	if (!w) {
		for (int i = 0; i < nops; i++)
			op_finished(&ops[i]);
		return fail(ncclSystemError, "out of memory");
	}
	w->nops = nops;
	memcpy(w->ops, ops, nops * sizeof(*ops));
	for (int i = 0; i < nops; i++)
		if (ops[i].desc.kind != OP_SEND && ops[i].desc.kind != OP_RECV &&
		    ops[i].desc.kind != OP_ALLTOALL && ops[i].desc.kind != OP_GATHER &&
		    ops[i].desc.kind != OP_SCATTER) {
			name = kernel_name(&ops[i].desc);
			break;
		}
	f = dev_function(name);
	pthread_mutex_lock(&comm->launch_lock);
	if (!f)
		what = "cuModuleGetFunction", err = CUDA_ERROR_NOT_FOUND;
	else if ((err = cudaEventRecord(comm->ev_user, user)))
		what = "cudaEventRecord";
	else if ((err = cudaStreamWaitEvent(comm->stream, comm->ev_user, 0)))
		what = "cudaStreamWaitEvent";
	else if ((err = dev.launch_ex(&cfg, f, params, NULL)))
		what = "cuLaunchKernelEx";
	if (err) {
		pthread_mutex_unlock(&comm->launch_lock);
		for (int i = 0; i < nops; i++)
			op_finished(&ops[i]);
		free(w);
		return fail(ncclUnhandledCudaError, "%s %s on stream %p: cuda error %d", name, what,
			    (void *)user, err);
	}
	/* the kernel owns w from here */
	if ((err = cudaEventRecord(comm->ev_done, comm->stream)))
		what = "cudaEventRecord";
	else if ((err = cudaStreamWaitEvent(user, comm->ev_done, 0)))
		what = "cudaStreamWaitEvent";
	pthread_mutex_unlock(&comm->launch_lock);
	if (err)
		return fail(ncclUnhandledCudaError, "%s %s on stream %p: cuda error %d", name, what,
			    (void *)user, err);
	return ncclSuccess;
}

/* Host side of every operation: validate, number, then enqueue or stash in the group. */
static ncclResult_t submit(const char *api, struct op *op)
{
	struct ncclComm *comm = comm_live(op->comm);
	int kind = op->desc.kind;

	simnccl_cfg_init();
	if (!comm)
		return fail(ncclInvalidArgument, "%s: invalid comm %p", api, (void *)op->comm);
	if (comm->revoked || comm_aborting(comm))
		return fail(ncclInvalidUsage, "%s: comm %p was revoked or aborted", api,
			    (void *)comm);
	if (op->desc.dtype < 0 || op->desc.dtype >= ncclNumTypes)
		return fail(ncclInvalidArgument, "%s: invalid datatype %d", api, op->desc.dtype);
	if (is_reduction(kind) && (op->desc.redop < 0 || op->desc.redop >= ncclMaxRedOp))
		return fail(ncclInvalidArgument, "%s: invalid reduction op %d", api,
			    op->desc.redop);
	if (has_root(kind) && (op->desc.root < 0 || op->desc.root >= comm->nranks))
		return fail(ncclInvalidArgument, "%s: invalid root %d (nranks %d)", api,
			    op->desc.root, comm->nranks);
	if ((kind == OP_SEND || kind == OP_RECV) && (op->peer < 0 || op->peer >= comm->nranks))
		return fail(ncclInvalidArgument, "%s: invalid peer %d (nranks %d)", api, op->peer,
			    comm->nranks);
	if (op->desc.count && ((kind != OP_RECV && kind != OP_BROADCAST && !op->sendbuff) ||
			       (kind != OP_SEND && !op->recvbuff && kind != OP_REDUCE &&
				kind != OP_GATHER)))
		return fail(ncclInvalidArgument, "%s: NULL buffer", api);
	if (tpsim_stream_id(op->stream) < 0)
		return fail(ncclInvalidArgument, "%s: invalid stream %p", api,
			    (void *)op->stream);

	op->bytes = op->desc.count * dtype_size(op->desc.dtype);
	if (kind == OP_ALLGATHER || kind == OP_REDUCESCATTER || kind == OP_ALLTOALL ||
	    kind == OP_GATHER || kind == OP_SCATTER)
		op->bytes *= comm->nranks;
	pthread_mutex_lock(&comm->lock);
	if (kind == OP_SEND)
		op->desc.seq = ++comm->send_seq[op->peer];
	else if (kind == OP_RECV)
		op->desc.seq = ++comm->recv_seq[op->peer];
	else
		op->desc.seq = comm->collective_seq++;
	comm->pending++;
	pthread_mutex_unlock(&comm->lock);

	if (group_depth > 0) {
		if (group_nops == group_cap) {
			int cap = group_cap ? group_cap * 2 : 16;
			struct op *ops = realloc(group_ops, cap * sizeof(*ops));

			if (!ops) {
				op_finished(op);
				return fail(ncclSystemError, "out of memory");
			}
			group_ops = ops;
			group_cap = cap;
		}
		group_ops[group_nops++] = *op;
		return ncclSuccess;
	}
	return enqueue_work(op, 1);
}

static struct op coll(int kind, const void *sendbuff, void *recvbuff, size_t count,
		      ncclDataType_t dtype, ncclRedOp_t redop, int root, ncclComm_t comm,
		      cudaStream_t stream)
{
	struct op op = {
		.comm = comm, .sendbuff = sendbuff, .recvbuff = recvbuff, .stream = stream,
		.desc = { .count = count, .kind = kind, .dtype = dtype, .redop = redop,
			  .root = root },
	};
	return op;
}

/* ---- API: collectives and p2p ---- */

NCCL_API(ncclResult_t, ncclAllReduce, const void *sendbuff, void *recvbuff, size_t count,
	 ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	struct op o = coll(OP_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, -1, comm, stream);
	return submit("ncclAllReduce", &o);
}

NCCL_API(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff, size_t sendcount,
	 ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
	struct op o = coll(OP_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, 0, -1, comm,
			   stream);
	return submit("ncclAllGather", &o);
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff,
	 size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
	 cudaStream_t stream)
{
	struct op o = coll(OP_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, -1,
			   comm, stream);
	return submit("ncclReduceScatter", &o);
}

NCCL_API(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff, size_t count,
	 ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
	struct op o = coll(OP_BROADCAST, sendbuff, recvbuff, count, datatype, 0, root, comm,
			   stream);
	return submit("ncclBroadcast", &o);
}

NCCL_API(ncclResult_t, ncclBcast, void *buff, size_t count, ncclDataType_t datatype, int root,
	 ncclComm_t comm, cudaStream_t stream)
{
	struct op o = coll(OP_BROADCAST, buff, buff, count, datatype, 0, root, comm, stream);
	return submit("ncclBcast", &o);
}

NCCL_API(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff, size_t count,
	 ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
	struct op o = coll(OP_REDUCE, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
	return submit("ncclReduce", &o);
}

NCCL_API(ncclResult_t, ncclAlltoAll, const void *sendbuff, void *recvbuff, size_t count,
	 ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
	struct op o = coll(OP_ALLTOALL, sendbuff, recvbuff, count, datatype, 0, -1, comm, stream);
	return submit("ncclAlltoAll", &o);
}

NCCL_API(ncclResult_t, ncclGather, const void *sendbuff, void *recvbuff, size_t count,
	 ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
	struct op o = coll(OP_GATHER, sendbuff, recvbuff, count, datatype, 0, root, comm, stream);
	return submit("ncclGather", &o);
}

NCCL_API(ncclResult_t, ncclScatter, const void *sendbuff, void *recvbuff, size_t count,
	 ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
	struct op o = coll(OP_SCATTER, sendbuff, recvbuff, count, datatype, 0, root, comm, stream);
	return submit("ncclScatter", &o);
}

NCCL_API(ncclResult_t, ncclSend, const void *sendbuff, size_t count, ncclDataType_t datatype,
	 int peer, ncclComm_t comm, cudaStream_t stream)
{
	struct op o = coll(OP_SEND, sendbuff, NULL, count, datatype, 0, -1, comm, stream);

	o.peer = peer;
	return submit("ncclSend", &o);
}

NCCL_API(ncclResult_t, ncclRecv, void *recvbuff, size_t count, ncclDataType_t datatype,
	 int peer, ncclComm_t comm, cudaStream_t stream)
{
	struct op o = coll(OP_RECV, NULL, recvbuff, count, datatype, 0, -1, comm, stream);

	o.peer = peer;
	return submit("ncclRecv", &o);
}

NCCL_API(ncclResult_t, ncclGroupStart, void)
{
	simnccl_cfg_init();
	group_depth++;
	return ncclSuccess;
}

/* One kernel per (stream, comm), in order of their first op, ops in call order. */
static ncclResult_t group_flush(void)
{
	ncclResult_t ret = ncclSuccess, err;
	struct op *ops = group_ops, *batch;
	int nops = group_nops, n;
	bool *taken;

	group_ops = NULL;
	group_nops = group_cap = 0;
	if (!nops)
		return ncclSuccess;
	taken = calloc(nops, sizeof(bool));
	batch = malloc(nops * sizeof(*batch));
	for (int i = 0; i < nops; i++) {
		if (taken[i])
			continue;
		n = 0;
		for (int j = i; j < nops; j++)
			if (!taken[j] && ops[j].stream == ops[i].stream &&
			    ops[j].comm == ops[i].comm) {
				batch[n++] = ops[j];
				taken[j] = true;
			}
		err = enqueue_work(batch, n);
		if (err && !ret)
			ret = err;
	}
	free(batch);
	free(taken);
	free(ops);
	return ret;
}

NCCL_API(ncclResult_t, ncclGroupEnd, void)
{
	simnccl_cfg_init();
	if (group_depth <= 0)
		return fail(ncclInvalidUsage, "ncclGroupEnd: not in a group");
	if (--group_depth > 0)
		return ncclSuccess;
	return group_flush();
}

NCCL_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t *simInfo)
{
	float us = (float)(simnccl_cfg.op_ns / 1000);

	if (simInfo)
		simInfo->estimatedTime = us;
	return pncclGroupEnd();
}

/* ---- API: communicators ---- */

NCCL_API(ncclResult_t, ncclGetVersion, int *version)
{
	if (!version)
		return ncclInvalidArgument;
	*version = NCCL_VERSION_CODE;
	return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId *uniqueId)
{
	size_t got = 0;
	ssize_t n;

	simnccl_cfg_init();
	if (!uniqueId)
		return fail(ncclInvalidArgument, "ncclGetUniqueId: NULL id");
	memcpy(uniqueId->internal, "TPSN", 4);
	if (getenv("TPSIM_NCCL_SOCKET_ADDR") && *getenv("TPSIM_NCCL_SOCKET_ADDR")) {
		ncclResult_t r = tcp_id_new(uniqueId, getenv("TPSIM_NCCL_SOCKET_ADDR"));

		if (r)
			return fail(r, "ncclGetUniqueId: no listener on %s",
				    getenv("TPSIM_NCCL_SOCKET_ADDR"));
		seg_reap_stale();
		return ncclSuccess;
	}
	while (got < NCCL_UNIQUE_ID_BYTES - 4) {
		n = getrandom(uniqueId->internal + 4 + got, NCCL_UNIQUE_ID_BYTES - 4 - got, 0);
		if (n < 0 && errno != EINTR)
			return fail(ncclSystemError, "getrandom: %s", strerror(errno));
		if (n > 0)
			got += n;
	}
	seg_reap_stale();
	return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *comm, int nranks,
	 ncclUniqueId commId, int rank, ncclConfig_t *config)
{
	char name[SEG_NAME_MAX];

	simnccl_cfg_init();
	if (!comm)
		return fail(ncclInvalidArgument, "ncclCommInitRank: NULL comm");
	seg_name_from_id(&commId, name, sizeof(name));
	return comm_create_id(comm, name, nranks, rank, current_device(),
			      tcp_id_is_tcp(&commId) && tcp_id_remote(&commId) ? &commId : NULL,
			      false);
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t *comm, int nranks, ncclUniqueId commId,
	 int rank)
{
	return pncclCommInitRankConfig(comm, nranks, commId, rank, NULL);
}

NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t *newcomm, int nranks, int myrank,
	 int nId, ncclUniqueId *commIds, ncclConfig_t *config)
{
	if (nId < 1 || !commIds)
		return fail(ncclInvalidArgument, "ncclCommInitRankScalable: no ids");
	return pncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config);
}

struct init_all_arg {
	ncclComm_t *comm;
	int ndev, rank, device;
	ncclUniqueId id;
	ncclResult_t ret;
};

static void *init_all_thread(void *p)
{
	struct init_all_arg *a = p;
	char name[SEG_NAME_MAX];

	seg_name_from_id(&a->id, name, sizeof(name));
	a->ret = comm_create(a->comm, name, a->ndev, a->rank, a->device);
	return NULL;
}

NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t *comm, int ndev, const int *devlist)
{
	struct init_all_arg *args;
	pthread_t *threads;
	ncclUniqueId id;
	ncclResult_t ret;

	simnccl_cfg_init();
	if (!comm || ndev < 1)
		return fail(ncclInvalidArgument, "ncclCommInitAll: invalid arguments");
	ret = pncclGetUniqueId(&id);
	if (ret)
		return ret;
	args = calloc(ndev, sizeof(*args));
	threads = calloc(ndev, sizeof(*threads));
	if (!args || !threads) {
		free(args);
		free(threads);
		return fail(ncclSystemError, "out of memory");
	}
	/* Each rank's init blocks until all joined, so they run side by side. */
	for (int i = 0; i < ndev; i++) {
		args[i] = (struct init_all_arg){ &comm[i], ndev, i, devlist ? devlist[i] : i, id,
						 ncclSuccess };
		pthread_create(&threads[i], NULL, init_all_thread, &args[i]);
	}
	for (int i = 0; i < ndev; i++) {
		pthread_join(threads[i], NULL);
		if (args[i].ret && !ret)
			ret = args[i].ret;
	}
	free(args);
	free(threads);
	return ret;
}

/*
 * Host rendezvous on the parent for split/shrink number n: publish (color, key), wait for
 * every participant (not excluded), copy out all entries.
 */
static ncclResult_t xchg(struct ncclComm *comm, int area, uint64_t n, int color, int key,
			 const bool *excluded, struct seg_xchg *out)
{
	struct seg *g = &comm->seg;
	uint64_t deadline = now_ns() + (uint64_t)simnccl_cfg.init_timeout_s * 1000000000ull;
	bool all;

	seg_lock(g);
	*seg_xchg(g, area, n, comm->rank) = (struct seg_xchg){ n + 1, color, key };
	seg_changed(g);
	for (;;) {
		all = true;
		for (int r = 0; r < comm->nranks && all; r++)
			if (!excluded[r] && seg_xchg(g, area, n, r)->tag != n + 1)
				all = false;
		if (all || now_ns() >= deadline)
			break;
		seg_wait(g, __atomic_load_n(&g->hdr->progress, __ATOMIC_ACQUIRE), 100);
	}
	for (int r = 0; r < comm->nranks; r++)
		out[r] = *seg_xchg(g, area, n, r);
	seg_unlock(g);
	if (!all)
		return fail(ncclSystemError, "%s: rank %d: %s rendezvous timed out", g->name,
			    comm->rank, area == XCHG_SPLIT ? "split" : "shrink");
	return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
	 ncclConfig_t *config)
{
	struct ncclComm *parent = comm_live(comm);
	struct seg_xchg *all;
	bool *excluded;
	char name[SEG_NAME_MAX + 48];
	int new_rank = 0, new_nranks = 0;
	uint64_t n;
	ncclResult_t ret;

	simnccl_cfg_init();
	if (!parent || !newcomm)
		return fail(ncclInvalidArgument, "ncclCommSplit: invalid comm %p", (void *)comm);
	if (parent->link)
		return fail(ncclInvalidUsage, "ncclCommSplit: not simulated over TCP");
	if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
		return fail(ncclInvalidArgument, "ncclCommSplit: invalid color %d", color);
	all = calloc(parent->nranks, sizeof(*all));
	excluded = calloc(parent->nranks, sizeof(*excluded));
	if (!all || !excluded) {
		free(all);
		free(excluded);
		return fail(ncclSystemError, "out of memory");
	}
	n = parent->split_count++;
	ret = xchg(parent, XCHG_SPLIT, n, color, key, excluded, all);
	if (ret)
		goto cleanup;
	*newcomm = NULL;
	if (color == NCCL_SPLIT_NOCOLOR)
		goto cleanup;
	/* New rank: members ordered by (key, parent rank). */
	for (int r = 0; r < parent->nranks; r++) {
		if (all[r].color != color)
			continue;
		new_nranks++;
		if (all[r].key < key || (all[r].key == key && r < parent->rank))
			new_rank++;
	}
	if (snprintf(name, sizeof(name), "%s-s%llu-c%d", parent->seg.name,
		     (unsigned long long)n, color) >= SEG_NAME_MAX) {
		ret = fail(ncclInvalidUsage, "ncclCommSplit: splits nested too deep");
		goto cleanup;
	}
	if (simnccl_cfg.verbose)
		simnccl_log("%s: rank %d split color %d key %d -> rank %d of %d", parent->seg.name,
			 parent->rank, color, key, new_rank, new_nranks);
	ret = comm_create(newcomm, name, new_nranks, new_rank, parent->device);
cleanup:
	free(all);
	free(excluded);
	return ret;
}

NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int *excludeRanksList,
	 int excludeRanksCount, ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags)
{
	struct ncclComm *parent = comm_live(comm);
	struct seg_xchg *all;
	bool *excluded;
	char name[SEG_NAME_MAX + 48];
	int new_rank = 0, new_nranks;
	uint64_t n;
	ncclResult_t ret;

	simnccl_cfg_init();
	if (!parent || !newcomm || excludeRanksCount < 0 ||
	    (excludeRanksCount && !excludeRanksList))
		return fail(ncclInvalidArgument, "ncclCommShrink: invalid arguments");
	if (parent->link)
		return fail(ncclInvalidUsage, "ncclCommShrink: not simulated over TCP");
	all = calloc(parent->nranks, sizeof(*all));
	excluded = calloc(parent->nranks, sizeof(*excluded));
	if (!all || !excluded) {
		free(all);
		free(excluded);
		return fail(ncclSystemError, "out of memory");
	}
	ret = ncclInvalidArgument;
	for (int i = 0; i < excludeRanksCount; i++) {
		if (excludeRanksList[i] < 0 || excludeRanksList[i] >= parent->nranks) {
			fail(ret, "ncclCommShrink: invalid excluded rank %d", excludeRanksList[i]);
			goto cleanup;
		}
		excluded[excludeRanksList[i]] = true;
	}
	if (excluded[parent->rank]) {
		fail(ret, "ncclCommShrink: rank %d excludes itself", parent->rank);
		goto cleanup;
	}
	/* The parent is unusable afterwards: its pending ops are abandoned, new ones refused,
	 * but the shrink rendezvous on its segment still works. */
	if (shrinkFlags & NCCL_SHRINK_ABORT) {
		parent->revoked = true;
		comm_stop_pending(parent);
	}
	n = parent->shrink_count++;
	ret = xchg(parent, XCHG_SHRINK, n, 0, 0, excluded, all);
	if (ret)
		goto cleanup;
	new_nranks = parent->nranks;
	for (int r = 0; r < parent->nranks; r++) {
		if (!excluded[r])
			continue;
		new_nranks--;
		if (r < parent->rank)
			new_rank--;
	}
	new_rank += parent->rank;
	if (snprintf(name, sizeof(name), "%s-k%llu", parent->seg.name, (unsigned long long)n) >=
	    SEG_NAME_MAX) {
		ret = fail(ncclInvalidUsage, "ncclCommShrink: shrinks nested too deep");
		goto cleanup;
	}
	ret = comm_create(newcomm, name, new_nranks, new_rank, parent->device);
cleanup:
	free(all);
	free(excluded);
	return ret;
}

NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm)
{
	struct ncclComm *c = comm_live(comm);

	if (!c)
		return fail(ncclInvalidArgument, "ncclCommFinalize: invalid comm %p", (void *)comm);
	comm_drain(c);
	return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm)
{
	struct ncclComm *c = comm_live(comm);

	if (!comm)
		return ncclSuccess;
	if (!c)
		return fail(ncclInvalidArgument, "ncclCommDestroy: invalid comm %p", (void *)comm);
	comm_drain(c);
	comm_close(c);
	return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm)
{
	struct ncclComm *c = comm_live(comm);

	if (!comm)
		return ncclSuccess;
	if (!c)
		return fail(ncclInvalidArgument, "ncclCommAbort: invalid comm %p", (void *)comm);
	if (simnccl_cfg.verbose)
		simnccl_log("%s: rank %d aborting (%d ops pending)", c->seg.name, c->rank, c->pending);
	comm_stop_pending(c);
	comm_close(c);
	return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags)
{
	struct ncclComm *c = comm_live(comm);

	if (!c)
		return fail(ncclInvalidArgument, "ncclCommRevoke: invalid comm %p", (void *)comm);
	if (revokeFlags != NCCL_REVOKE_DEFAULT)
		return fail(ncclInvalidArgument, "ncclCommRevoke: flags %d", revokeFlags);
	c->revoked = true;
	comm_stop_pending(c);
	return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t *asyncError)
{
	struct ncclComm *c = comm_live(comm);
	int pending;

	if (!c || !asyncError)
		return fail(ncclInvalidArgument, "ncclCommGetAsyncError: invalid arguments");
	*asyncError = __atomic_load_n(&c->async_error, __ATOMIC_ACQUIRE);
	if (*asyncError == ncclSuccess && c->revoked) {
		pthread_mutex_lock(&c->lock);
		pending = c->pending;
		pthread_mutex_unlock(&c->lock);
		if (pending)
			*asyncError = ncclInProgress;
	}
	return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count)
{
	struct ncclComm *c = comm_live(comm);

	if (!c || !count)
		return fail(ncclInvalidArgument, "ncclCommCount: invalid arguments");
	*count = c->nranks;
	return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int *device)
{
	struct ncclComm *c = comm_live(comm);

	if (!c || !device)
		return fail(ncclInvalidArgument, "ncclCommCuDevice: invalid arguments");
	*device = c->device;
	return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int *rank)
{
	struct ncclComm *c = comm_live(comm);

	if (!c || !rank)
		return fail(ncclInvalidArgument, "ncclCommUserRank: invalid arguments");
	*rank = c->rank;
	return ncclSuccess;
}

NCCL_API(const char *, ncclGetErrorString, ncclResult_t result)
{
	switch (result) {
	case ncclSuccess: return "no error";
	case ncclUnhandledCudaError:
		return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
	case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
	case ncclInternalError:
		return "internal error - please report this issue to the NCCL developers";
	case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	case ncclRemoteError: return "remote process exited or there was a network error";
	case ncclInProgress: return "NCCL operation in progress";
	default: return "unknown result code";
	}
}

NCCL_API(const char *, ncclGetLastError, ncclComm_t comm)
{
	return last_error;
}

/* ---- API: memory, registration, custom ops (accepted, no effect) ---- */

NCCL_API(ncclResult_t, ncclMemAlloc, void **ptr, size_t size)
{
	return cudaMalloc(ptr, size) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

NCCL_API(ncclResult_t, ncclMemFree, void *ptr)
{
	return cudaFree(ptr) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void *buff, size_t size,
	 void **handle)
{
	if (!comm_live(comm) || !handle)
		return fail(ncclInvalidArgument, "ncclCommRegister: invalid arguments");
	*handle = buff;
	return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void *handle)
{
	return comm_live(comm) ? ncclSuccess : ncclInvalidArgument;
}

NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void *buff, size_t size,
	 ncclWindow_t *win, int winFlags)
{
	if (!comm_live(comm) || !win)
		return fail(ncclInvalidArgument, "ncclCommWindowRegister: invalid arguments");
	*win = (ncclWindow_t)buff;
	return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win)
{
	return comm_live(comm) ? ncclSuccess : ncclInvalidArgument;
}

NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t *op, void *scalar,
	 ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm)
{
	static int next = ncclNumOps;

	if (!op || !comm_live(comm))
		return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: invalid arguments");
	*op = (ncclRedOp_t)__atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
	return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm)
{
	return comm_live(comm) ? ncclSuccess : ncclInvalidArgument;
}

/* ---- sim-only ---- */

ncclResult_t tpsim_nccl_set_async_error(ncclComm_t comm, ncclResult_t err)
{
	struct ncclComm *c = comm_live(comm);

	if (!c)
		return ncclInvalidArgument;
	__atomic_store_n(&c->async_error, err, __ATOMIC_RELEASE);
	if (simnccl_cfg.verbose)
		simnccl_log("%s: rank %d async error set to %d", c->seg.name, c->rank, (int)err);
	return ncclSuccess;
}

const char *tpsim_nccl_comm_name(ncclComm_t comm)
{
	struct ncclComm *c = comm_live(comm);

	return c ? c->seg.name : NULL;
}
