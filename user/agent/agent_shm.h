/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Shared memory between tptrace and its in-process CUPTI agent (libtptrace_agent.so).
 *
 *   offset 0                   struct agent_control (AGENT_CTL_SIZE bytes)
 *   offset AGENT_CTL_SIZE      ring of ctl->ring_records struct agent_record
 *
 * The ring is single-producer (the agent, which serialises CUPTI's buffer-completed callbacks
 * with a lock) / single-consumer (tptrace). head and tail are free-running record counters:
 * slot = counter & (ring_records - 1). The producer writes slots then publishes head with a
 * release store; the consumer reads head with acquire, reads the slots, then publishes tail.
 * The producer never waits: when a batch does not fit it is dropped and counted.
 *
 * Control protocol: tptrace writes `request` then bumps `request_gen` (release); the agent
 * acts on it and copies request_gen to `ack_gen` once the request is done (status updated).
 * The same layout serves both ways in: ptrace injection (tptrace creates the memory and
 * fills the header before the agent maps it) and CUDA_INJECTION64_PATH (the agent creates
 * /dev/shm/tptrace-gpu.<pid>, fills the header and waits idle for a tptrace to attach).
 *
 * Fixed-size integer types only (both sides may be built differently); no pointers.
 */
#ifndef TPTRACE_AGENT_SHM_H
#define TPTRACE_AGENT_SHM_H

#include <linux/types.h>

#define AGENT_SHM_MAGIC		0x3155504754505454ULL	/* "TTPTGPU1" little endian */
#define AGENT_SHM_VERSION	4
#define AGENT_CTL_SIZE		8192
#define AGENT_NAME_LEN		128	/* inline kernel name, NUL included */
#define AGENT_MSG_LEN		256
#define AGENT_PATH_LEN		512
#define AGENT_CLOCK_SAMPLES	64
#define AGENT_RING_DEFAULT	65536	/* records (16 MiB); power of two */
#define AGENT_SHM_PREFIX	"/tptrace-gpu."	/* resident mode: shm_open name + pid */

/* ctl->status, written by the agent. */
enum agent_status {
	AGENT_ST_NONE = 0,		/* header written by tptrace, agent not started yet */
	AGENT_ST_STARTING = 1,		/* agent mapped the memory, loading CUPTI */
	AGENT_ST_ENABLED = 2,		/* activity enabled, records flowing */
	AGENT_ST_IDLE = 3,		/* resident (CUDA_INJECTION64_PATH): waiting for a tptrace */
	AGENT_ST_DETACHED = 4,		/* flushed, disabled, unsubscribed: ready to be unloaded */
	AGENT_ST_REFUSED = 5,		/* would not start; see error and message */
	AGENT_ST_ERROR = 6,		/* a CUPTI call failed; see error and message */
};

/* ctl->error_code: why the agent refused or failed. */
enum agent_error {
	AGENT_OK = 0,
	AGENT_E_NO_CUDA = 1,		/* neither libcudart nor libcuda is mapped */
	AGENT_E_NO_CUPTI = 2,		/* no libcupti found / dlopen failed */
	AGENT_E_OTHER_SUBSCRIBER = 3,	/* CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED */
	AGENT_E_CUPTI = 4,		/* another CUPTI call failed; cupti_result holds its code */
	AGENT_E_BAD_SHM = 5,		/* header magic/version/size mismatch */
};

/* ctl->request, written by tptrace. */
enum agent_request {
	AGENT_REQ_NONE = 0,
	AGENT_REQ_ENABLE = 1,		/* subscribe and enable activity */
	AGENT_REQ_DISABLE = 2,		/* flush, disable, unsubscribe (then unload or stay idle) */
};

/* Records in the ring. Every record starts with its type. */
enum agent_record_type {
	AGENT_REC_KERNEL = 1,
	AGENT_REC_MEMCPY = 2,
	AGENT_REC_MEMSET = 3,
	AGENT_REC_SYNC = 4,
	AGENT_REC_RUNTIME_API = 5,
	AGENT_REC_DRIVER_API = 6,
	AGENT_REC_KERNEL_NAME = 7,	/* continuation of the previous KERNEL record's name */
};

/* agent_record.flags */
#define AGENT_RECF_NAME_CONT	0x1	/* KERNEL: name_len > AGENT_NAME_LEN - 1, the rest follows in
					 * KERNEL_NAME records, each AGENT_NAME_LEN - 1 chars */
#define AGENT_RECF_NAME_CUT	0x2	/* KERNEL: name longer than the agent forwards, truncated */

/*
 * One GPU activity or API call. Times are CLOCK_MONOTONIC ns (CUPTI's timestamp callback is
 * the agent's clock_gettime(CLOCK_MONOTONIC)), the domain of bpf_ktime_get_ns().
 * Unused fields are 0.
 */
struct agent_record {
	__u32 type;			/* enum agent_record_type */
	__u32 flags;			/* AGENT_RECF_* */
	__u64 start_ns;
	__u64 end_ns;
	__u32 device;
	__u32 context;
	__u32 stream;			/* CUPTI streamId */
	__u32 correlation;		/* = the launching runtime/driver API record's */
	__u32 tid;			/* API records: gettid() of the caller */
	__u32 cbid;			/* API records: CUpti_CallbackId; SYNC: sync type */
	__u32 grid[3];
	__u32 block[3];
	__u32 registers;		/* per thread */
	__u32 static_shmem;
	__u32 dynamic_shmem;
	__u32 copy_kind;		/* MEMCPY: CUpti_ActivityMemcpyKind */
	__u32 src_kind;			/* MEMCPY: CUpti_ActivityMemoryKind */
	__u32 dst_kind;			/* MEMCPY; MEMSET: memory kind of the destination */
	__u64 bytes;			/* MEMCPY, MEMSET */
	__u32 return_value;		/* API, SYNC */
	__u32 name_len;			/* KERNEL: full length of the name (without NUL) */
	__u32 graph_id;
	__u32 value;			/* MEMSET: value; SYNC: cudaEventId */
	char name[AGENT_NAME_LEN];	/* KERNEL: mangled name; KERNEL_NAME: next chunk */
	__u64 reserved;
};

struct agent_clock_sample {
	__u64 mono_before_ns;		/* clock_gettime(CLOCK_MONOTONIC) */
	__u64 cupti_ns;			/* cuptiGetTimestamp() */
	__u64 mono_after_ns;
};

struct agent_control {
	/* written once by whoever creates the memory */
	__u64 magic;
	__u32 version;
	__u32 record_size;		/* sizeof(struct agent_record) */
	__u32 ctl_size;			/* AGENT_CTL_SIZE: offset of the ring */
	__u32 ring_records;		/* power of two */
	__u32 creator_pid;		/* tptrace (injection) or the target (resident) */
	__u32 resident;			/* 1: created by InitializeInjection, never unloaded */

	/* tptrace -> agent */
	__u32 request;			/* enum agent_request */
	__u32 request_gen;
	__u32 tracer_pid;		/* pid of the attached tptrace, 0 when none */
	__u32 flush_period_ms;		/* 0: 200 */
	char cupti_path[AGENT_PATH_LEN];	/* explicit libcupti path, "" to search */

	/* agent -> tptrace */
	__u32 status;			/* enum agent_status */
	__u32 ack_gen;			/* request_gen of the last request handled */
	__u32 error_code;		/* enum agent_error */
	__s32 cupti_result;		/* CUptiResult of the failed call */
	__u32 agent_pid;
	__u32 cupti_api_version;	/* cuptiGetVersion, 0 if unknown */
	char message[AGENT_MSG_LEN];	/* one line: why refused/failed, or what was loaded */
	char cupti_loaded[AGENT_PATH_LEN];	/* the libcupti the agent uses */
	__u64 generation;		/* bumped by each enable */
	__u64 records_written;		/* pushed into the ring */
	__u64 records_dropped;		/* ring full */
	__u64 cupti_dropped;		/* cuptiActivityGetNumDroppedRecords */
	__u64 buffers_completed;
	__u64 records_unknown;		/* CUPTI records of kinds the agent skips */
	__u64 records_incomplete;	/* GPU records a forced flush returned before their work
					 * ended (a timestamp CUPTI_TIMESTAMP_UNKNOWN): skipped */
	__u64 buffers_cut;		/* buffers CUPTI could not walk to their end (a record
					 * neither readable nor skippable): the rest is lost */
	__u64 flushes;
	__u64 flushes_partial;		/* flushes after which a buffer older than the flush was
					 * still with CUPTI (its open GPU records hold it) */
	__u64 flushed_upto_ns;		/* CLOCK_MONOTONIC at which the last completed flush began
					 * that got back every buffer handed to CUPTI before it:
					 * what ended before it is in the ring (written before
					 * flushes is bumped) */
	__u32 nr_clock_samples;		/* total taken; sample i at clock[i % AGENT_CLOCK_SAMPLES] */
	__u32 pad0;
	struct agent_clock_sample clock[AGENT_CLOCK_SAMPLES];

	/* ring indices, each on its own cache line */
	__u64 head __attribute__((aligned(64)));	/* producer: records written */
	__u64 tail __attribute__((aligned(64)));	/* consumer: records read */
} __attribute__((aligned(64)));

_Static_assert(sizeof(struct agent_record) == 256, "agent_record is 256 bytes");
_Static_assert(sizeof(struct agent_control) <= AGENT_CTL_SIZE, "control block fits");

static inline __u64 agent_shm_size(__u32 ring_records)
{
	return AGENT_CTL_SIZE + (__u64)ring_records * sizeof(struct agent_record);
}

static inline struct agent_record *agent_ring(struct agent_control *ctl)
{
	return (struct agent_record *)((char *)ctl + ctl->ctl_size);
}

/* The header of a new control block, written by whoever creates the memory (tptrace before an
 * injection, the agent when resident); both builds use this one so the layouts cannot drift.
 * Clears the control part: a reused mapping starts with no stale request or status. */
static inline void agent_ctl_init(struct agent_control *ctl, __u32 ring_records, __u32 creator_pid)
{
	__builtin_memset(ctl, 0, AGENT_CTL_SIZE);
	ctl->magic = AGENT_SHM_MAGIC;
	ctl->version = AGENT_SHM_VERSION;
	ctl->record_size = sizeof(struct agent_record);
	ctl->ctl_size = AGENT_CTL_SIZE;
	ctl->ring_records = ring_records;
	ctl->creator_pid = creator_pid;
}

/* Whether a control block someone else created was written by agent_ctl_init of this layout
 * and its ring fits in the map_size bytes mapped. */
static inline int agent_ctl_valid(const struct agent_control *ctl, __u64 map_size)
{
	return map_size >= AGENT_CTL_SIZE && ctl->magic == AGENT_SHM_MAGIC &&
	       ctl->version == AGENT_SHM_VERSION &&
	       ctl->record_size == sizeof(struct agent_record) && ctl->ctl_size == AGENT_CTL_SIZE &&
	       ctl->ring_records && !(ctl->ring_records & (ctl->ring_records - 1)) &&
	       agent_shm_size(ctl->ring_records) <= map_size;
}

#endif /* TPTRACE_AGENT_SHM_H */
