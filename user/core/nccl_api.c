// SPDX-License-Identifier: MIT
#include <errno.h>
#include <string.h>
#include "cuda.h"
#include "nccl_api.h"

#define COLL(sym, o) { .symbol = sym, .kind = NAPI_COLL, .op = o }
#define CALL(sym, k) { .symbol = sym, .kind = k, .op = NCCL_OP_NONE }

const struct nccl_api nccl_apis[] = {
	COLL("ncclAllReduce", NCCL_OP_ALL_REDUCE),
	COLL("ncclAllGather", NCCL_OP_ALL_GATHER),
	COLL("ncclReduceScatter", NCCL_OP_REDUCE_SCATTER),
	COLL("ncclBroadcast", NCCL_OP_BROADCAST),
	COLL("ncclBcast", NCCL_OP_BROADCAST),
	COLL("ncclReduce", NCCL_OP_REDUCE),
	COLL("ncclAlltoAll", NCCL_OP_ALL_TO_ALL),
	COLL("ncclGather", NCCL_OP_GATHER),
	COLL("ncclScatter", NCCL_OP_SCATTER),
	COLL("ncclSend", NCCL_OP_SEND),
	COLL("ncclRecv", NCCL_OP_RECV),
	CALL("ncclGroupStart", NAPI_GROUP_START),
	CALL("ncclGroupEnd", NAPI_GROUP_END),
	CALL("ncclGetUniqueId", NAPI_GET_UNIQUE_ID),
	CALL("ncclCommInitRank", NAPI_INIT_RANK),
	CALL("ncclCommInitRankConfig", NAPI_INIT_RANK_CONFIG),
	CALL("ncclCommInitRankScalable", NAPI_INIT_SCALABLE),
	CALL("ncclCommInitAll", NAPI_INIT_ALL),
	CALL("ncclCommSplit", NAPI_SPLIT),
	CALL("ncclCommShrink", NAPI_SHRINK),
	CALL("ncclCommFinalize", NAPI_FINALIZE),
	CALL("ncclCommDestroy", NAPI_DESTROY),
	CALL("ncclCommAbort", NAPI_ABORT),
	CALL("ncclCommRevoke", NAPI_REVOKE),
	CALL("ncclCommGetAsyncError", NAPI_ASYNC_ERROR),
	CALL("ncclCommCount", NAPI_COUNT),
	CALL("ncclCommUserRank", NAPI_USER_RANK),
	CALL("ncclCommCuDevice", NAPI_CU_DEVICE),
};
const int nccl_api_count = sizeof(nccl_apis) / sizeof(nccl_apis[0]);

static uint64_t out_arg(int idx)
{
	return TP_COOKIE_SAVE_OUT | ((uint64_t)idx << TP_COOKIE_OUT_SHIFT);
}

static uint64_t deref(int arg1, int len)
{
	return TP_COOKIE_MAKE_DEREF(arg1, len);
}

uint64_t nccl_api_cookie(int index)
{
	const struct nccl_api *api = &nccl_apis[index];
	uint64_t cookie = NCCL_API_BASE + index;
	uint64_t nstack = 0;

	switch (api->kind) {
	case NAPI_COLL:
		/* 7th and 8th integer arguments are on the stack */
		switch (api->op) {
		case NCCL_OP_ALL_REDUCE:
		case NCCL_OP_REDUCE_SCATTER:
		case NCCL_OP_GATHER:
		case NCCL_OP_SCATTER:
			nstack = 2;	/* stream */
			break;
		case NCCL_OP_REDUCE:
			nstack = 3;	/* comm, stream */
			break;
		case NCCL_OP_BROADCAST:
			/* ncclBroadcast has 7 arguments, ncclBcast 6 */
			nstack = strcmp(api->symbol, "ncclBcast") ? 2 : 1;
			break;
		default:
			nstack = 1;	/* the return address: calls from inside NCCL are nested */
			break;
		}
		break;
	case NAPI_GET_UNIQUE_ID:
		cookie |= out_arg(0);
		break;
	case NAPI_INIT_RANK:
	case NAPI_INIT_RANK_CONFIG:
		cookie |= out_arg(0) | deref(TP_DEREF_STACK, NCCL_UNIQUE_ID_BYTES);
		break;
	case NAPI_INIT_SCALABLE:
		cookie |= out_arg(0) | deref(5, NCCL_UNIQUE_ID_BYTES);
		break;
	case NAPI_INIT_ALL:
		cookie |= out_arg(0) | deref(3, NCCL_INIT_ALL_DEV_MAX * 4);	/* devlist */
		break;
	case NAPI_SPLIT:
		cookie |= out_arg(3);
		break;
	case NAPI_SHRINK:
		cookie |= out_arg(3) | deref(2, NCCL_SHRINK_EXCLUDE_MAX * 4);
		break;
	case NAPI_ASYNC_ERROR:
	case NAPI_COUNT:
	case NAPI_USER_RANK:
	case NAPI_CU_DEVICE:
		cookie |= out_arg(1);
		break;
	default:
		break;
	}
	return cookie | TP_COOKIE_MAKE_STACK(nstack);
}

bool nccl_api_has_return(int index)
{
	return nccl_apis[index].kind != NAPI_GROUP_START;
}

bool nccl_api_is_marker(const char *symbol)
{
	return !strcmp(symbol, "ncclAllReduce") || !strcmp(symbol, "ncclCommInitRank");
}

_Static_assert(NCCL_UNIQUE_ID_BYTES <= TP_DEREF_MAX, "a unique id fits deref[]");
_Static_assert(NCCL_SHRINK_EXCLUDE_MAX * 4 <= TP_DEREF_MAX, "excluded ranks fit deref[]");

/* n int32 values the probe copied to deref[] (at most max) into out */
static int copy_list(const struct tp_rec_call *c, int32_t *out, int n, int max)
{
	if (n <= 0 || (c->flags & TP_CALL_DEREF_FAULT))
		return 0;
	if (n > max)
		n = max;
	memcpy(out, c->deref, n * sizeof(int32_t));
	return n;
}

int nccl_api_decode_init(const struct nccl_api *api, const struct tp_rec_call *c,
			 struct nccl_init *o)
{
	const __u64 *a = c->args;

	memset(o, 0, sizeof(*o));
	o->nranks = o->rank = o->color = o->key = -1;
	switch (api->kind) {
	case NAPI_INIT_RANK:
	case NAPI_INIT_RANK_CONFIG:
	case NAPI_INIT_SCALABLE:
		/* the id travels in memory ([rsp+8], or commIds[0] for Scalable), so rank is the
		 * third integer argument (rdx) in all three signatures */
		o->nranks = (int32_t)a[1];
		o->rank = (int32_t)a[2];
		if (api->kind == NAPI_INIT_SCALABLE) {
			o->nid = (int32_t)a[3];
			o->config = a[5];
		} else if (api->kind == NAPI_INIT_RANK_CONFIG) {
			o->config = a[3];
		}
		o->has_id = !(c->flags & TP_CALL_DEREF_FAULT);
		if (o->has_id)
			o->id_hash = nccl_hash(c->deref, NCCL_UNIQUE_ID_BYTES, 0);
		return 0;
	case NAPI_INIT_ALL:		/* (comm *comms, ndev, const int *devlist) */
		o->nranks = (int32_t)a[1];
		if (a[2])
			o->nlist = copy_list(c, o->list, o->nranks, NCCL_INIT_ALL_DEV_MAX);
		return 0;
	case NAPI_SPLIT:		/* (comm, color, key, comm *newcomm, config *) */
		o->parent = a[0];
		o->color = (int32_t)a[1];
		o->key = (int32_t)a[2];
		o->config = a[4];
		return 0;
	case NAPI_SHRINK:		/* (comm, int *exclude, nexclude, comm *newcomm, config *, flags) */
		o->parent = a[0];
		o->nexclude = (int32_t)a[2];
		o->nlist = copy_list(c, o->list, o->nexclude, NCCL_SHRINK_EXCLUDE_MAX);
		o->config = a[4];
		o->shrink_flags = (int32_t)a[5];
		return 0;
	default:
		return -EINVAL;
	}
}

void nccl_api_decode_coll(const struct nccl_api *api, const struct tp_rec_call *c,
			  struct nccl_coll *o)
{
	const __u64 *a = c->args, *st = c->stack;

	memset(o, 0, sizeof(*o));
	o->op = api->op;
	o->redop = o->root = o->peer = -1;
	switch (api->op) {
	case NCCL_OP_ALL_REDUCE:	/* send, recv, count, dtype, op, comm, [stream] */
	case NCCL_OP_REDUCE_SCATTER:
		o->sendbuff = a[0]; o->recvbuff = a[1]; o->count = a[2]; o->dtype = (int)a[3];
		o->redop = (int)a[4]; o->comm = a[5]; o->stream = st[1];
		break;
	case NCCL_OP_REDUCE:		/* send, recv, count, dtype, op, root, [comm], [stream] */
		o->sendbuff = a[0]; o->recvbuff = a[1]; o->count = a[2]; o->dtype = (int)a[3];
		o->redop = (int)a[4]; o->root = (int)a[5]; o->comm = st[1]; o->stream = st[2];
		break;
	case NCCL_OP_BROADCAST:
		if (!strcmp(api->symbol, "ncclBcast")) {	/* buff, count, dtype, root, comm, stream */
			o->sendbuff = o->recvbuff = a[0]; o->count = a[1]; o->dtype = (int)a[2];
			o->root = (int)a[3]; o->comm = a[4]; o->stream = a[5];
		} else {		/* send, recv, count, dtype, root, comm, [stream] */
			o->sendbuff = a[0]; o->recvbuff = a[1]; o->count = a[2]; o->dtype = (int)a[3];
			o->root = (int)a[4]; o->comm = a[5]; o->stream = st[1];
		}
		break;
	case NCCL_OP_ALL_GATHER:	/* send, recv, count, dtype, comm, stream */
	case NCCL_OP_ALL_TO_ALL:
		o->sendbuff = a[0]; o->recvbuff = a[1]; o->count = a[2]; o->dtype = (int)a[3];
		o->comm = a[4]; o->stream = a[5];
		break;
	case NCCL_OP_GATHER:		/* send, recv, count, dtype, root, comm, [stream] */
	case NCCL_OP_SCATTER:
		o->sendbuff = a[0]; o->recvbuff = a[1]; o->count = a[2]; o->dtype = (int)a[3];
		o->root = (int)a[4]; o->comm = a[5]; o->stream = st[1];
		break;
	case NCCL_OP_SEND:		/* buff, count, dtype, peer, comm, stream */
		o->sendbuff = a[0]; o->count = a[1]; o->dtype = (int)a[2]; o->peer = (int)a[3];
		o->comm = a[4]; o->stream = a[5];
		break;
	case NCCL_OP_RECV:
		o->recvbuff = a[0]; o->count = a[1]; o->dtype = (int)a[2]; o->peer = (int)a[3];
		o->comm = a[4]; o->stream = a[5];
		break;
	default:
		break;
	}
}

const char *nccl_op_name(enum nccl_op op)
{
	static const char *const names[] = {
		"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all",
		"gather", "scatter", "send", "recv",
	};
	return op < NCCL_OP_NONE ? names[op] : "none";
}

static const char *const dtype_names[] = {
	"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64",
	"bfloat16", "float8e4m3", "float8e5m2",
};
static const char *const dtype_torch[] = {
	"Char", "Byte", "Int", "UInt32", "Long", "UInt64", "Half", "Float", "Double", "BFloat16",
	"Float8_e4m3fn", "Float8_e5m2",
};

int nccl_dtype_size(int dtype)
{
	static const int sizes[] = { 1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1 };

	return dtype >= 0 && dtype < 12 ? sizes[dtype] : 0;
}

const char *nccl_dtype_name(int dtype)
{
	return dtype >= 0 && dtype < 12 ? dtype_names[dtype] : "unknown";
}

const char *nccl_dtype_torch(int dtype)
{
	return dtype >= 0 && dtype < 12 ? dtype_torch[dtype] : "Unknown";
}

const char *nccl_redop_name(int redop)
{
	static const char *const names[] = { "sum", "prod", "max", "min", "avg" };

	if (redop < 0)
		return NULL;
	return redop < 5 ? names[redop] : "premul_sum";
}

bool nccl_op_has_redop(enum nccl_op op)
{
	return op == NCCL_OP_ALL_REDUCE || op == NCCL_OP_REDUCE_SCATTER || op == NCCL_OP_REDUCE;
}

bool nccl_op_has_root(enum nccl_op op)
{
	return op == NCCL_OP_BROADCAST || op == NCCL_OP_REDUCE || op == NCCL_OP_GATHER ||
	       op == NCCL_OP_SCATTER;
}

bool nccl_op_is_p2p(enum nccl_op op)
{
	return op == NCCL_OP_SEND || op == NCCL_OP_RECV;
}

void nccl_op_sizes(enum nccl_op op, uint64_t count, int nranks, int64_t *in, int64_t *out)
{
	int64_t all = nranks > 0 ? (int64_t)count * nranks : -1;

	*in = *out = (int64_t)count;
	switch (op) {
	case NCCL_OP_ALL_GATHER:
	case NCCL_OP_GATHER:
		*out = all;
		break;
	case NCCL_OP_REDUCE_SCATTER:
	case NCCL_OP_SCATTER:
		*in = all;
		break;
	case NCCL_OP_ALL_TO_ALL:
		*in = *out = all;
		break;
	default:
		break;
	}
}

uint64_t nccl_hash(const void *data, size_t len, uint64_t seed)
{
	const uint8_t *p = data;
	uint64_t h = 0xcbf29ce484222325ULL ^ seed;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}
