/* SPDX-License-Identifier: MIT */
/* The NCCL 2.28 entry points the flight recorder probes and where their arguments sit at
 * function entry (x86-64 SysV). Api ids start at NCCL_API_BASE so one ring carries CUDA and
 * NCCL records and the generic BPF programs serve both. */
#ifndef TPTRACE_NCCL_API_H
#define TPTRACE_NCCL_API_H

#include <stdbool.h>
#include <stdint.h>

#define NCCL_API_BASE 0x100
/* sizeof(ncclUniqueId): every rank of a communicator passes the same bytes */
#define NCCL_UNIQUE_ID_BYTES 128
/* ncclCommShrink: excluded ranks copied by the probe (int32 each, TP_DEREF_MAX bytes) */
#define NCCL_SHRINK_EXCLUDE_MAX 32

enum nccl_op {
	NCCL_OP_ALL_REDUCE, NCCL_OP_ALL_GATHER, NCCL_OP_REDUCE_SCATTER, NCCL_OP_BROADCAST,
	NCCL_OP_REDUCE, NCCL_OP_ALL_TO_ALL, NCCL_OP_GATHER, NCCL_OP_SCATTER, NCCL_OP_SEND,
	NCCL_OP_RECV,
	NCCL_OP_NONE,
};

enum nccl_api_kind {
	NAPI_COLL,		/* collective or p2p: decoded by nccl_api_decode_coll() */
	NAPI_GROUP_START,
	NAPI_GROUP_END,
	NAPI_GET_UNIQUE_ID,	/* (ncclUniqueId *out) */
	NAPI_INIT_RANK,		/* (comm *out, nranks, ncclUniqueId by value [rsp+8], rank) */
	NAPI_INIT_RANK_CONFIG,	/* (comm *out, nranks, id [rsp+8], rank, config *) */
	NAPI_INIT_SCALABLE,	/* (comm *out, nranks, myrank, nId, ncclUniqueId *ids, config *) */
	NAPI_INIT_ALL,		/* (comm *comms, ndev, const int *devlist) */
	NAPI_SPLIT,		/* (comm, color, key, comm *newcomm, config *) */
	NAPI_SHRINK,		/* (comm, int *exclude, nexclude, comm *newcomm, config *, flags) */
	NAPI_FINALIZE,		/* (comm) */
	NAPI_DESTROY,
	NAPI_ABORT,
	NAPI_REVOKE,		/* (comm, flags) */
	NAPI_ASYNC_ERROR,	/* (comm, ncclResult_t *out) */
	NAPI_COUNT,		/* (comm, int *out) */
	NAPI_USER_RANK,		/* (comm, int *out) */
	NAPI_CU_DEVICE,		/* (comm, int *out) */
};

struct nccl_api {
	const char *symbol;
	enum nccl_api_kind kind;
	enum nccl_op op;	/* NAPI_COLL only */
};

extern const struct nccl_api nccl_apis[];
extern const int nccl_api_count;

uint64_t nccl_api_cookie(int index);	/* api id = NCCL_API_BASE + index */
/* Whether the call gets a return probe: all but ncclGroupStart, which only marks a group
 * and cannot block (one trap fewer per group). */
bool nccl_api_has_return(int index);
bool nccl_api_is_marker(const char *symbol);

/* One collective or p2p call, decoded from the entry record's registers and stack. */
struct nccl_coll {
	enum nccl_op op;
	uint64_t sendbuff, recvbuff, count, comm, stream;
	int dtype;		/* ncclDataType_t */
	int redop;		/* ncclRedOp_t, -1 when the op has none */
	int root;		/* -1 when none */
	int peer;		/* -1 when none */
};

struct tp_rec_call;
void nccl_api_decode_coll(const struct nccl_api *api, const struct tp_rec_call *c,
			  struct nccl_coll *out);

/* A communicator-creating call (NAPI_INIT_*, NAPI_SPLIT, NAPI_SHRINK), decoded from its
 * entry record. Fields a signature lacks are -1 / 0 / false. */
#define NCCL_INIT_ALL_DEV_MAX 8		/* ncclCommInitAll: devlist entries copied */
struct nccl_init {
	int nranks, rank;		/* the arguments (InitAll: ndev, rank -1) */
	int nid;			/* InitRankScalable: ids passed */
	bool has_id;			/* the unique id was copied (no fault) */
	uint64_t id_hash;		/* FNV-1a of the (first) ncclUniqueId: the comm's identity */
	uint64_t config;		/* ncclConfig_t *, 0 none */
	int nlist;			/* entries of list[] filled: devlist or excluded ranks */
	int32_t list[NCCL_SHRINK_EXCLUDE_MAX];
	uint64_t parent;		/* Split/Shrink: the comm split */
	int color, key;			/* Split */
	int nexclude, shrink_flags;	/* Shrink: excluded ranks passed (list[] holds the copied
					 * ones), flags */
};
/* 0, or -EINVAL when api does not create a communicator. */
int nccl_api_decode_init(const struct nccl_api *api, const struct tp_rec_call *c,
			 struct nccl_init *out);

const char *nccl_op_name(enum nccl_op op);		/* "all_reduce" */
const char *nccl_dtype_name(int dtype);			/* "float32" */
const char *nccl_dtype_torch(int dtype);		/* "Float" */
int nccl_dtype_size(int dtype);				/* bytes per element, 0 unknown */
const char *nccl_redop_name(int redop);			/* "sum"; "premul_sum" for user ops */
bool nccl_op_has_redop(enum nccl_op op);
bool nccl_op_has_root(enum nccl_op op);
bool nccl_op_is_p2p(enum nccl_op op);
/* Element counts of the input and output per PyTorch FR's sizes, for nranks ranks
 * (nranks <= 0: unknown, sizes that depend on it are reported as -1). */
void nccl_op_sizes(enum nccl_op op, uint64_t count, int nranks, int64_t *in, int64_t *out);

/* 64-bit FNV-1a, the communicator identity hash. */
uint64_t nccl_hash(const void *data, size_t len, uint64_t seed);

#endif
