/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Internals of the simulated NCCL: the shared segment every rank of a communicator maps
 * (segment.c) and the NCCL API on top of it (api.c). Nothing here is exported (libnccl.map).
 *
 * Segment layout (one POSIX shm object per communicator; all offsets from the header):
 *   seg_hdr | seg_rank[nranks] | seg_xchg[2 areas][2 buffers][nranks] |
 *   NSLOTS x (seg_slot + op_desc[nranks]) | seg_chan[nranks * nranks] | NSLOTS x data_max
 * Every field after the header's `state` is guarded by hdr->lock (robust, process-shared).
 * hdr->progress is a futex word bumped under the lock on every change; waiters sleep on it.
 */
#ifndef TPSIM_NCCL_SIM_H
#define TPSIM_NCCL_SIM_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include "tpsim_nccl.h"

#define SEG_MAGIC	0x4c43434eu	/* "NCCL" */
#define SEG_NSLOTS	8		/* collectives in flight per comm before a rank waits */
#define SEG_P2P_RING	16		/* p2p descriptors kept per (src,dst) for mismatch checks */
#define SEG_MAX_RANKS	512
#define SEG_NAME_MAX	200

enum op_kind {
	OP_ALLREDUCE = 1, OP_ALLGATHER, OP_REDUCESCATTER, OP_BROADCAST, OP_REDUCE,
	OP_ALLTOALL, OP_GATHER, OP_SCATTER, OP_SEND, OP_RECV,
};

/* What one rank passed to one op; compared across ranks for mismatches. */
struct op_desc {
	uint64_t seq;		/* collective_seq, or p2p pair seq (from 1) */
	uint64_t count;
	uint32_t kind;		/* enum op_kind */
	int32_t dtype, redop, root;
};

struct seg_rank {
	int32_t present;
	int32_t pid;
};

/* Split/shrink exchange entry; tag = n + 1 for the parent's n-th split (shrink). */
struct seg_xchg {
	uint64_t tag;
	int32_t color, key;
};

struct seg_slot {
	uint64_t occupant;	/* collective_seq + 1, 0 when free */
	uint32_t arrived, departed, accumulated;
	uint32_t pad;
	struct op_desc desc[];	/* [nranks] */
};

struct seg_chan {
	uint64_t send_posted, recv_posted;	/* highest pair seq posted by each side */
	struct op_desc send_desc[SEG_P2P_RING], recv_desc[SEG_P2P_RING];
};

struct seg_hdr {
	uint32_t state;		/* 0 fresh, 1 being initialised, 2 ready (atomic) */
	uint32_t magic;
	uint32_t progress;	/* futex word */
	uint32_t nranks;
	uint32_t joined;	/* ranks that ever joined (init completes at nranks) */
	uint32_t attached;	/* comms still mapped; the last one out unlinks */
	uint64_t size, data_max;
	uint64_t ranks_off, xchg_off, slots_off, slot_stride, chans_off, data_off;
	pthread_mutex_t lock;
};

struct seg {
	char name[SEG_NAME_MAX];
	struct seg_hdr *hdr;
	size_t size;
};

enum xchg_area { XCHG_SPLIT = 0, XCHG_SHRINK = 1 };

struct simnccl_config {
	uint64_t op_ns;
	double gbps;
	int init_timeout_s;
	uint64_t data_max;
	int verbose;
	bool hang_kind, hang_count, hang_dtype, hang_op, hang_root, hang_p2p;
};

extern struct simnccl_config simnccl_cfg;
void simnccl_cfg_init(void);
void simnccl_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static inline struct seg_rank *seg_ranks(struct seg *g)
{
	return (struct seg_rank *)((char *)g->hdr + g->hdr->ranks_off);
}

static inline struct seg_xchg *seg_xchg(struct seg *g, int area, uint64_t n, int rank)
{
	return (struct seg_xchg *)((char *)g->hdr + g->hdr->xchg_off) +
	       ((area * 2 + n % 2) * g->hdr->nranks + rank);
}

static inline struct seg_slot *seg_slot(struct seg *g, uint64_t seq)
{
	return (struct seg_slot *)((char *)g->hdr + g->hdr->slots_off +
				   (seq % SEG_NSLOTS) * g->hdr->slot_stride);
}

static inline void *seg_data(struct seg *g, uint64_t seq)
{
	return (char *)g->hdr + g->hdr->data_off + (seq % SEG_NSLOTS) * g->hdr->data_max;
}

static inline struct seg_chan *seg_chan(struct seg *g, int src, int dst)
{
	return (struct seg_chan *)((char *)g->hdr + g->hdr->chans_off) +
	       ((size_t)src * g->hdr->nranks + dst);
}

/*
 * Maps (creating if needed) the segment `name` for nranks and joins it as rank; waits until
 * all ranks joined or timeout_s passed. Returns an ncclResult_t.
 */
int seg_join(struct seg *g, const char *name, int nranks, int rank, int timeout_s);
/* Leaves: unmaps; the last comm attached unlinks the name. */
void seg_leave(struct seg *g);
void seg_lock(struct seg *g);
/* Bumps the progress word; call with the lock held, then seg_unlock wakes all waiters. */
void seg_changed(struct seg *g);
void seg_unlock(struct seg *g);
/* Unlocks, sleeps until progress moves past gen or timeout_ms, relocks. */
void seg_wait(struct seg *g, uint32_t gen, int timeout_ms);
/* Unlinks /dev/shm/tpsim-nccl-* segments whose joined members are all dead processes. */
void seg_reap_stale(void);

/* Id bytes -> "/tpsim-nccl-<hex>". */
void seg_name_from_id(const ncclUniqueId *id, char *name, size_t len);

/*
 * TCP transport (tcp.c), for ranks on other hosts (network namespaces) than the process that
 * made the id. With TPSIM_NCCL_SOCKET_ADDR=IPv4 set, ncclGetUniqueId starts a listener on
 * that address (the "root", as NCCL's bootstrap root) and puts it in the id:
 *   bytes 0-3 "TPST", 4-19 random (the segment name), 20-23 IPv4, 24-25 port (network
 *   order), 26-33 the root's network namespace inode, 34-127 random.
 * A rank in the root's network namespace joins the shared segment as usual; a rank elsewhere
 * connects to the root, where one proxy thread per connection joins the segment as that rank
 * (a "shadow" comm) and runs each of its operations there, one thread per operation (the
 * rank's collective blocks until the proxy's does). Nothing ever times out: a rank cut off by
 * a partition waits forever, as a real NCCL kernel does; a connection that breaks (a peer
 * process died) sets the comm's async error to ncclRemoteError and leaves its pending
 * operations hanging. Split/shrink of a remote comm: ncclInvalidUsage (not simulated).
 */
#define TCP_ID_MAGIC "TPST"

struct ncclComm;
struct tcp_link;

/* One operation as the host call saw it (api.c); moved: op_depart copied reduced data. */
struct op {
	struct ncclComm *comm;
	struct op_desc desc;
	const void *sendbuff;
	void *recvbuff;
	int peer;
	cudaStream_t stream;
	size_t bytes;
	bool running;			/* counted in comm->running */
	bool moved;
};

/* api.c, for the proxy: create a shadow comm (blocks like init); run one op on it from start
 * to departure (false: abandoned); abort and close it. */
int simnccl_comm_create(struct ncclComm **out, const char *name, int nranks, int rank);
bool simnccl_run_proxied(struct op *op);
void simnccl_comm_abort(struct ncclComm *comm);
bool simnccl_comm_aborting(struct ncclComm *comm);
void simnccl_comm_set_async(struct ncclComm *comm, int err);
/* Float32 elements of a sum allreduce really reduced for this op (0: none). */
uint64_t simnccl_moved_elems(const struct op *op);

bool tcp_id_is_tcp(const ncclUniqueId *id);
/* Fills a TCP id (TPSIM_NCCL_SOCKET_ADDR set): 0, or an ncclResult_t. */
int tcp_id_new(ncclUniqueId *id, const char *addr);
/* Whether the id's root is in another network namespace than this process. */
bool tcp_id_remote(const ncclUniqueId *id);
/* Connects to the root and joins as rank (blocks until every rank joined): ncclResult_t. */
int tcp_link_open(struct tcp_link **out, struct ncclComm *comm, const ncclUniqueId *id,
		  const char *name, int nranks, int rank, int timeout_s);
void tcp_op_arrive(struct tcp_link *l, struct op *op);
/* Waits for the op's completion at the root; false when the comm is aborted meanwhile. */
bool tcp_op_wait(struct tcp_link *l, struct op *op);
/* Wakes waiters (abort). */
void tcp_link_wake(struct tcp_link *l);
/* Closes the connection (the root's proxy leaves the segment); waiters must be gone. */
void tcp_link_close(struct tcp_link *l);
void tcp_link_free(struct tcp_link *l);

#endif /* TPSIM_NCCL_SIM_H */
