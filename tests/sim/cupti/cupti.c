// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Simulated libcupti.so.13 (soname, version node and prototypes of CUDA 13.0's CUPTI; cupti.h
 * is included so the compiler checks every signature). It implements the activity API that
 * tptrace's agent uses, fed by the simulated driver's two observers, reached like the real
 * CUPTI reaches the driver: dlopen("libcuda.so.1") and its private table (cuGetExportTable,
 * tests/sim/cuda_driver/tpsim_driver.h).
 *
 * API records, as real CUPTI writes them with RUNTIME and DRIVER activity enabled: one
 * CUpti_ActivityAPI per API CALL, not per piece of work. Every sim runtime call (also those
 * tptrace does not probe: cudaGetLastError, cudaPeekAtLastError, cudaStreamGetCaptureInfo,
 * cudaGetDevice, __cudaPushCallConfiguration, ...) is a RUNTIME record; every driver call,
 * nested inside a runtime call or made directly, is a DRIVER record. Each has its own
 * correlationId from one process-wide counter, cbid = the CUPTI_*_TRACE_CBID_* of exactly the
 * symbol called, threadId as cuptiSetThreadIdType says (below), start/end read from the
 * client's timestamp callback inside the call (after entry, before return). A nested record is
 * written before the record of the call around it (it ends first).
 *
 * GPU records, one per item a stream worker executes, carrying the correlationId of the
 * OUTERMOST API call that enqueued it (a runtime launch's runtime record; a direct driver
 * launch's driver record), as real CUPTI does:
 *   TPSIM_KERNEL        CUpti_ActivityKernel10 (CONCURRENT_KERNEL or KERNEL); replayed from a
 *                       CUDA graph: the cuGraphLaunch/cudaGraphLaunch's correlationId, graphId
 *   TPSIM_MEMCPY        CUpti_ActivityMemcpy6
 *   TPSIM_MEMSET        CUpti_ActivityMemset4
 *   TPSIM_WAIT_EVENT    CUpti_ActivitySynchronization2, type STREAM_WAIT_EVENT
 *
 * Sim limitations (documented, asserted nowhere as real behaviour):
 *  - no SYNCHRONIZATION records for host-side syncs (stream, event, context synchronize).
 *  - host memory in copies is PAGEABLE when the driver did not allocate it (tpsim_record's
 *    host_pageable), else PINNED;
 *    registersPerThread is 0; staticSharedMemory 0 and dynamicSharedMemory the launch's shmem;
 *    contextId = the sim driver's context id (primary: device + 1); streamId = the sim's
 *    stream id (0 = legacy default stream).
 *
 * Behaviours of the real CUPTI a client has to cope with, on by default:
 *  - thread ids: API records carry CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT's id unless the client
 *    calls cuptiSetThreadIdType(SYSTEM): on Linux that is pthread_self() (cut to the record's
 *    32 bits), not gettid(). SYSTEM gives gettid().
 *  - dropped records: a record for which the client's request callback gave no buffer, or one
 *    too small for it, is dropped and counted. Since CUDA 6.0 every buffer is global, so every
 *    drop is counted on the global queue: cuptiActivityGetNumDroppedRecords(NULL, 0, &n)
 *    returns the drops since the last call and resets the count; a non-NULL context's queue
 *    holds none. maxNumRecords > 0 from the request callback completes a buffer after that many
 *    records. TPSIM_VERBOSE=1 prints the totals at cuptiFinalize and exit ("tpsim: cupti
 *    dropped N records, returned M buffers before an older one").
 *  - a device clock: GPU work is timed on the device, and CUPTI converts its times into its
 *    own clock (the registered timestamp callback's, else CLOCK_REALTIME) from a calibration
 *    taken when the first record needs it (again if the callback changes), off by
 *    TPSIM_GPU_CLOCK_OFFSET_NS (default 3000: a PCIe read of the GPU clock is not free). The
 *    device clock may run TPSIM_GPU_CLOCK_PPM parts per million fast (default 0: CUPTI's
 *    header says it interpolates GPU times linearly against the CPU clock, which takes out
 *    most of a real drift; the knob is the drift a coarser conversion leaves):
 *      gpu_record_ts = cb_at_calibration + offset + (host_true - host_at_calibration) * (1+ppm)
 *    so kernel, copy, memset and (the sim's stream-side) wait records drift against the host. API records are taken on
 *    the CPU and read the callback directly. cuptiGetTimestamp returns the GPU records' clock
 *    (the header: "normalized to correspond with the start and end timestamps reported in the
 *    CUPTI activity records"), so a client that samples it against its own clock can fit
 *    offset and drift; one that trusts the callback to make GPU times host times is off by
 *    offset + ppm * elapsed. The sim's own log (TPSIM_VERBOSE=1) has the true host times.
 *  - buffers late and out of order: CUPTI's completion hands every other full buffer back
 *    late, after the buffer filled after it and only when the next one fills (2, 1, 4, 3, ...);
 *    a flush returns the buffer in progress, then the held one, and returns only once every
 *    buffer completed before it is back with the client. So a consumer must not take a
 *    thread's newest record as proof that its older ones have arrived, only a completed
 *    flush. TPSIM_CUPTI_REORDER=0: in order (default 1).
 *  - a GPU record is reserved at its launch, in launch order among the API records of the
 *    buffer in progress, and timed when its work ends. A buffer holding an open record is not
 *    complete: a full one waits for it, a default flush leaves it with CUPTI (the header: "It
 *    doesn't return buffers which have one or more incomplete records"), so the API records
 *    beside it arrive late too. A forced flush hands every buffer back, open records with
 *    both times 0 (CUPTI_TIMESTAMP_UNKNOWN), and cuptiActivityGetNextRecord returns
 *    CUPTI_ERROR_INVALID_KIND on each ("either incomplete or invalid"; *record is left on
 *    it, so a client can go on to the next; TPSIM_CUPTI_INCOMPLETE=zero: a success instead).
 *    The work's end is then written nowhere. Work launched while its kind is off is never
 *    recorded.
 *  - TPSIM_CUPTI_OTHER_SUBSCRIBER=1 in the environment: behave as if another tool (nsys,
 *    torch.profiler) had subscribed first: cuptiSubscribe returns
 *    CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED.
 *  - TPSIM_CUPTI_BUF_RECORDS=N: deliver a buffer once it holds N records (default: when full).
 *  - TPSIM_CUPTI_FLUSH_DELAY_MS=N: an unforced cuptiActivityFlushAll takes N ms before it
 *    delivers anything (what a starved thread or a slow CUPTI does to a tool's flush loop).
 *
 * Buffers are completed on the thread that fills them (a stream worker) or that flushes; CUPTI
 * uses its own thread, so the client must already cope with callbacks on foreign threads.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cupti.h>
#include "tpsim.h"
#include "tpsim_driver.h"

#define MAX_KIND 128
#define MAX_PENDING 64

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bool subscribed;
static bool kind_on[MAX_KIND];
static int nr_kinds_on;
static CUpti_BuffersCallbackRequestFunc buf_request;
static CUpti_BuffersCallbackCompleteFunc buf_complete;
static CUpti_TimestampCallbackFunc ts_callback;
static CUpti_ActivityThreadIdType tid_type;
static uint8_t *cur_buf;
static size_t cur_size, cur_used, cur_records;
/* A buffer from the client's request callback, while CUPTI holds it or records reserved in
 * it are still open: records reserved at a launch are open until the work ends. */
struct sbuf {
	uint8_t *buf;
	size_t size, used;
	int pending;		/* records reserved and not yet timed */
	bool closed;		/* full, waiting for its open records (on closed_list) */
	bool gone;		/* handed back with open records (forced flush, finalize):
				 * their ends are written nowhere; freed at pending 0 */
	struct sbuf *next;
};
static struct sbuf *cur_sb;		/* cur_buf's */
static struct sbuf *closed_list;	/* oldest first */
static size_t incomplete_total;		/* records handed back open, for the sim's own log */
static size_t buf_records_limit;	/* TPSIM_CUPTI_BUF_RECORDS */
static size_t cur_max_records;		/* the request callback's maxNumRecords */
static size_t dropped_global;		/* since the last cuptiActivityGetNumDroppedRecords */
static size_t dropped_total;		/* for the sim's own log */
static int reorder = -1;		/* TPSIM_CUPTI_REORDER */
static size_t reordered;		/* buffers handed back before an older one */
static bool held_passed;		/* a newer buffer went back before the held one */
static int in_flight;			/* observers running client callbacks */
static pthread_cond_t idle = PTHREAD_COND_INITIALIZER;
static int delivering;			/* batches of buffers being handed back */
static pthread_cond_t delivered = PTHREAD_COND_INITIALIZER;

static const struct tpsim_driver_ops *drv_ops;

/* The driver's private table, as the real CUPTI gets at the driver; NULL without a driver. */
static const struct tpsim_driver_ops *driver_ops(void)
{
	static const CUuuid uuid = { TPSIM_DRIVER_UUID };
	CUresult (*get_proc)(const char *, void **, int, cuuint64_t,
			     CUdriverProcAddressQueryResult *);
	CUresult (*get_table)(const void **, const CUuuid *) = NULL;
	const struct tpsim_driver_ops *t = NULL;
	void *lib;

	if (drv_ops)
		return drv_ops;
	lib = dlopen("libcuda.so.1", RTLD_NOW);
	if (!lib)
		return NULL;
	get_proc = (__typeof__(get_proc))dlsym(lib, "cuGetProcAddress_v2");
	if (!get_proc || get_proc("cuGetExportTable", (void **)&get_table, 13000, 0, NULL) ||
	    !get_table || get_table((const void **)&t, &uuid) || t->size < sizeof(*t))
		return NULL;
	drv_ops = t;
	return t;
}

/* Per thread: the start times of the API calls it is inside, in CUPTI's clock. */
#define API_DEPTH 16
static __thread uint64_t api_start[API_DEPTH];

struct full_buf {
	uint8_t *buf;
	size_t size, used;
};

/* Full buffers CUPTI's completion has not handed back yet (oldest first). */
static struct full_buf held[MAX_PENDING];
static int nr_held;

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* CUPTI's CPU clock: the client's callback, else CLOCK_REALTIME as on Linux. */
static uint64_t cupti_now(void)
{
	CUpti_TimestampCallbackFunc cb = __atomic_load_n(&ts_callback, __ATOMIC_ACQUIRE);

	return cb ? cb() : clock_ns(CLOCK_REALTIME);
}

static int64_t env_i64(const char *name, int64_t def)
{
	const char *v = getenv(name);

	return v && *v ? strtoll(v, NULL, 10) : def;
}

/* The device clock and CUPTI's conversion of it (header comment): one calibration per
 * timestamp callback, then offset + drift. Caller holds lock or calls it for reading only
 * after the first calibration (the fields change only when the callback does). */
static struct {
	CUpti_TimestampCallbackFunc cb;
	bool calibrated;
	double rate;		/* 1 + ppm / 1e6 */
	int64_t offset;		/* the calibration's error */
	uint64_t host_mono;	/* host CLOCK_MONOTONIC at calibration */
	uint64_t cupti;		/* CUPTI's CPU clock at calibration */
} gclk;
static pthread_mutex_t clock_lock = PTHREAD_MUTEX_INITIALIZER;

static void gpu_clock_calibrate(void)
{
	CUpti_TimestampCallbackFunc cb = __atomic_load_n(&ts_callback, __ATOMIC_ACQUIRE);

	pthread_mutex_lock(&clock_lock);
	if (!gclk.calibrated || gclk.cb != cb) {
		uint64_t m1 = clock_ns(CLOCK_MONOTONIC), c = cupti_now();
		uint64_t m2 = clock_ns(CLOCK_MONOTONIC);

		gclk.rate = 1.0 + (double)env_i64("TPSIM_GPU_CLOCK_PPM", 0) / 1e6;
		gclk.offset = env_i64("TPSIM_GPU_CLOCK_OFFSET_NS", 3000);
		gclk.host_mono = m1 + (m2 - m1) / 2;
		gclk.cupti = c;
		gclk.cb = cb;
		__atomic_store_n(&gclk.calibrated, true, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&clock_lock);
}

/* A device time (the sim's true host CLOCK_MONOTONIC time of it) in CUPTI's GPU records. */
static uint64_t gpu_to_cupti(uint64_t host_mono)
{
	double d;

	gpu_clock_calibrate();
	d = (double)(int64_t)(host_mono - gclk.host_mono) * gclk.rate;
	return gclk.cupti + gclk.offset + (int64_t)(d < 0 ? d - 0.5 : d + 0.5);
}

static bool env_is(const char *name, const char *val)
{
	const char *v = getenv(name);

	return v && !strcmp(v, val);
}

/* ---- records ------------------------------------------------------------------------- */

static size_t record_size(CUpti_ActivityKind kind)
{
	switch (kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
		return sizeof(CUpti_ActivityKernel10);
	case CUPTI_ACTIVITY_KIND_MEMCPY:
		return sizeof(CUpti_ActivityMemcpy6);
	case CUPTI_ACTIVITY_KIND_MEMSET:
		return sizeof(CUpti_ActivityMemset4);
	case CUPTI_ACTIVITY_KIND_RUNTIME:
	case CUPTI_ACTIVITY_KIND_DRIVER:
		return sizeof(CUpti_ActivityAPI);
	case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
		return sizeof(CUpti_ActivitySynchronization2);
	default:
		return 0;
	}
}

/* A buffer whose records are all complete goes back to the client (caller holds lock).
 * CUPTI's completion returns every other such buffer late: one is held until the buffer
 * completed after it has been handed back and the next one completes, so the order is 2, 1,
 * 4, 3, ... (TPSIM_CUPTI_REORDER=0: in order). */
static void ready_locked(struct sbuf *b, struct full_buf *full, int *nr_full)
{
	struct full_buf now = { b->buf, b->size, b->used };

	free(b);
	if (reorder < 0)
		reorder = (int)env_i64("TPSIM_CUPTI_REORDER", 1);
	if (!reorder) {
		full[(*nr_full)++] = now;
		return;
	}
	if (!nr_held) {
		held[nr_held++] = now;
		held_passed = false;
	} else if (!held_passed) {
		full[(*nr_full)++] = now;	/* overtakes the held one */
		held_passed = true;
		reordered++;
	} else {
		full[(*nr_full)++] = held[0];
		held[0] = now;
		held_passed = false;
	}
}

/* The buffer in progress is full (caller holds lock): complete now, or once its open records
 * are timed. */
static void complete_locked(struct full_buf *full, int *nr_full)
{
	struct sbuf *b = cur_sb, **pp;

	b->size = cur_size;
	b->used = cur_used;
	cur_buf = NULL;
	cur_sb = NULL;
	if (!b->pending) {
		ready_locked(b, full, nr_full);
		return;
	}
	b->closed = true;
	for (pp = &closed_list; *pp; pp = &(*pp)->next)
		;
	*pp = b;
}

/* A closed buffer's last open record was timed (caller holds lock). */
static void closed_ready_locked(struct sbuf *b, struct full_buf *full, int *nr_full)
{
	for (struct sbuf **pp = &closed_list; *pp; pp = &(*pp)->next)
		if (*pp == b) {
			*pp = b->next;
			break;
		}
	ready_locked(b, full, nr_full);
}

/* Room for one record in the current buffer (caller holds lock); a full buffer goes to *full. */
static void *reserve(CUpti_ActivityKind kind, struct full_buf *full, int *nr_full)
{
	size_t size = record_size(kind);
	void *p;

	if (cur_buf && (cur_used + size > cur_size ||
			(buf_records_limit && cur_records >= buf_records_limit) ||
			(cur_max_records && cur_records >= cur_max_records))) {
		complete_locked(full, nr_full);
	}
	if (!cur_buf) {
		size_t max_records = 0;

		cur_size = 0;
		buf_request(&cur_buf, &cur_size, &max_records);
		cur_used = cur_records = 0;
		cur_max_records = max_records;
		if (cur_buf && !(cur_sb = calloc(1, sizeof(*cur_sb)))) {
			free(cur_buf);
			cur_buf = NULL;
		}
		if (cur_sb)
			cur_sb->buf = cur_buf;
		if (cur_buf && cur_size < size) {
			/* too small for this record: CUPTI hands it back empty and drops the record */
			if (*nr_full < MAX_PENDING)
				full[(*nr_full)++] = (struct full_buf){ cur_buf, cur_size, 0 };
			cur_buf = NULL;
			free(cur_sb);
			cur_sb = NULL;
		}
		if (!cur_buf) {
			dropped_global++;
			dropped_total++;
			return NULL;
		}
	}
	p = cur_buf + cur_used;
	memset(p, 0, size);
	cur_used += size;
	cur_records++;
	return p;
}

static void deliver(CUpti_BuffersCallbackCompleteFunc done, struct full_buf *full, int nr_full)
{
	for (int i = 0; i < nr_full; i++)
		if (done)
			done(NULL, 0, full[i].buf, full[i].size, full[i].used);
}

static uint8_t host_kind(int cuda_kind, bool src, bool pageable)
{
	/* cudaMemcpyKind: 0 HtoH, 1 HtoD, 2 DtoH, 3 DtoD, 4 default */
	bool host = cuda_kind == 0 || (src ? cuda_kind == 1 : cuda_kind == 2);

	if (cuda_kind == 4)
		return CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN;
	if (!host)
		return CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
	return pageable ? CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE : CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
}

static uint8_t copy_kind(int cuda_kind)
{
	switch (cuda_kind) {
	case 0: return CUPTI_ACTIVITY_MEMCPY_KIND_HTOH;
	case 1: return CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
	case 2: return CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
	case 3: return CUPTI_ACTIVITY_MEMCPY_KIND_DTOD;
	default: return CUPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN;
	}
}

/* The CUPTI kind a driver item is written as, 0 when that kind is off (caller holds lock). */
static CUpti_ActivityKind item_kind(const struct tpsim_record *rec)
{
	switch (rec->kind) {
	case TPSIM_KERNEL:
		return kind_on[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL] ?
		       CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL :
		       kind_on[CUPTI_ACTIVITY_KIND_KERNEL] ? CUPTI_ACTIVITY_KIND_KERNEL : 0;
	case TPSIM_MEMCPY:
		return kind_on[CUPTI_ACTIVITY_KIND_MEMCPY] ? CUPTI_ACTIVITY_KIND_MEMCPY : 0;
	case TPSIM_MEMSET:
		return kind_on[CUPTI_ACTIVITY_KIND_MEMSET] ? CUPTI_ACTIVITY_KIND_MEMSET : 0;
	case TPSIM_WAIT_EVENT:
		return kind_on[CUPTI_ACTIVITY_KIND_SYNCHRONIZATION] ?
		       CUPTI_ACTIVITY_KIND_SYNCHRONIZATION : 0;
	default:
		return 0;
	}
}

/* A GPU record's fields known at the launch; its times (0: CUPTI_TIMESTAMP_UNKNOWN) come when
 * the work ends (set_times). */
static void fill_static(void *p, CUpti_ActivityKind kind, const struct tpsim_record *rec)
{
	switch (kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
		CUpti_ActivityKernel10 *r = p;

		r->kind = kind;
		r->deviceId = rec->device;
		r->contextId = rec->context;
		r->streamId = (uint32_t)rec->stream_id;
		r->gridX = rec->grid[0], r->gridY = rec->grid[1], r->gridZ = rec->grid[2];
		r->blockX = rec->block[0], r->blockY = rec->block[1], r->blockZ = rec->block[2];
		r->dynamicSharedMemory = (int32_t)rec->shmem;
		r->correlationId = (uint32_t)rec->correlation;
		r->name = rec->name;	/* sim kernel names live as long as the process */
		r->gridId = (int64_t)rec->correlation;
		r->graphId = rec->graph_id;
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY: {
		CUpti_ActivityMemcpy6 *r = p;

		r->kind = kind;
		r->copyKind = copy_kind(rec->copy_kind);
		r->srcKind = host_kind(rec->copy_kind, true, rec->host_pageable);
		r->dstKind = host_kind(rec->copy_kind, false, rec->host_pageable);
		r->bytes = rec->bytes;
		r->deviceId = rec->device;
		r->contextId = rec->context;
		r->streamId = (uint32_t)rec->stream_id;
		r->correlationId = (uint32_t)rec->correlation;
		r->graphId = rec->graph_id;
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMSET: {
		CUpti_ActivityMemset4 *r = p;

		r->kind = kind;
		r->bytes = rec->bytes;
		r->deviceId = rec->device;
		r->contextId = rec->context;
		r->streamId = (uint32_t)rec->stream_id;
		r->correlationId = (uint32_t)rec->correlation;
		r->memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
		r->graphId = rec->graph_id;
		break;
	}
	case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
		CUpti_ActivitySynchronization2 *r = p;

		r->kind = kind;
		r->type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT;
		r->correlationId = (uint32_t)rec->correlation;
		r->contextId = rec->context;
		r->streamId = (uint32_t)rec->stream_id;
		break;
	}
	default:
		break;
	}
}

static void set_times(void *p, uint64_t start, uint64_t end)
{
	switch (((CUpti_Activity *)p)->kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
		((CUpti_ActivityKernel10 *)p)->start = start;
		((CUpti_ActivityKernel10 *)p)->end = end;
		((CUpti_ActivityKernel10 *)p)->completed = end;
		break;
	case CUPTI_ACTIVITY_KIND_MEMCPY:
		((CUpti_ActivityMemcpy6 *)p)->start = start;
		((CUpti_ActivityMemcpy6 *)p)->end = end;
		break;
	case CUPTI_ACTIVITY_KIND_MEMSET:
		((CUpti_ActivityMemset4 *)p)->start = start;
		((CUpti_ActivityMemset4 *)p)->end = end;
		break;
	case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
		/* the sim's waits are stream items, timed on the device like the rest */
		((CUpti_ActivitySynchronization2 *)p)->start = start;
		((CUpti_ActivitySynchronization2 *)p)->end = end;
		break;
	default:
		break;
	}
}

/* Hands back the buffers made ready under the lock (outside it), then drops the in-flight
 * mark taken with the lock. Called with lock held; returns with it released. */
static void deliver_unlock(struct full_buf *full, int nr_full)
{
	CUpti_BuffersCallbackCompleteFunc done = buf_complete;

	if (nr_full) {
		delivering++;
		pthread_mutex_unlock(&lock);
		deliver(done, full, nr_full);
		pthread_mutex_lock(&lock);
		if (--delivering == 0)
			pthread_cond_broadcast(&delivered);
	}
	/* the common case, no buffer full: one lock round trip per record */
	if (--in_flight == 0)
		pthread_cond_broadcast(&idle);
	pthread_mutex_unlock(&lock);
}

/* A launch (any GPU item), on the submitting thread inside its API call: like real CUPTI, the
 * record is reserved in the buffer in progress now, in launch order among the API records, and
 * its times are written when the work ends. Until then the buffer cannot be completed: a
 * default flush leaves it, a forced one hands it back with the record's times 0
 * (CUPTI_TIMESTAMP_UNKNOWN) and the work's end is then written nowhere. Work launched while
 * its kind was off is never recorded. */
static void observe_issue(struct tpsim_record *rec, void *ctx)
{
	struct full_buf full[MAX_PENDING];
	int nr_full = 0;
	CUpti_ActivityKind kind;
	void *r;

	rec->tool_buf = NULL;
	pthread_mutex_lock(&lock);
	kind = nr_kinds_on && buf_request ? item_kind(rec) : 0;
	if (!kind) {
		pthread_mutex_unlock(&lock);
		return;
	}
	in_flight++;
	r = reserve(kind, full, &nr_full);
	if (r) {
		fill_static(r, kind, rec);
		rec->tool_buf = cur_sb;
		rec->tool_off = (size_t)((uint8_t *)r - cur_buf);
		cur_sb->pending++;
	}
	deliver_unlock(full, nr_full);
}

/* The work of a launch ended (its stream's worker): its times go into the record reserved at
 * the launch, if that buffer is still CUPTI's; a full buffer whose last open record this was
 * is complete. */
static void observe(const struct tpsim_record *rec, void *ctx)
{
	struct full_buf full[MAX_PENDING];
	int nr_full = 0;
	struct sbuf *b = rec->tool_buf;

	if (!b)
		return;		/* launched while its kind was off, or dropped at the launch */
	pthread_mutex_lock(&lock);
	in_flight++;
	if (!b->gone)
		set_times(b->buf + rec->tool_off, gpu_to_cupti(rec->start_ns),
			  gpu_to_cupti(rec->end_ns));
	if (--b->pending == 0) {
		if (b->gone)
			free(b);
		else if (b->closed)
			closed_ready_locked(b, full, &nr_full);
	}
	deliver_unlock(full, nr_full);
}

/* One CUpti_ActivityAPI per API call: the start is read at entry (phase 0), the record is
 * written at return (phase 1), on the calling thread. */
static void observe_api(const struct tpsim_api_call *c, int phase, void *ctx)
{
	struct full_buf full[MAX_PENDING];
	int nr_full = 0;
	CUpti_ActivityKind kind = c->domain == TPSIM_DOMAIN_RUNTIME ? CUPTI_ACTIVITY_KIND_RUNTIME
								    : CUPTI_ACTIVITY_KIND_DRIVER;
	CUpti_ActivityAPI *r;
	uint64_t now;

	static __thread uint32_t pid;	/* getpid() is a syscall; calls are µs apart */

	if (c->depth >= API_DEPTH)
		return;
	if (!pid)
		pid = getpid();
	now = cupti_now();
	if (phase == 0) {
		api_start[c->depth] = now;
		return;
	}
	pthread_mutex_lock(&lock);
	if (!kind_on[kind] || !buf_request) {
		pthread_mutex_unlock(&lock);
		return;
	}
	in_flight++;
	r = reserve(kind, full, &nr_full);
	if (r) {
		r->kind = kind;
		r->cbid = c->cbid;
		/* enabled while this call ran: its start was not read */
		r->start = api_start[c->depth] ? api_start[c->depth] : now;
		r->end = now;
		r->processId = pid;
		/* DEFAULT is pthread_self() on Linux, in 32 bits; SYSTEM is gettid() */
		r->threadId = tid_type == CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM ?
			c->tid : (uint32_t)(uintptr_t)pthread_self();
		r->correlationId = (uint32_t)c->correlation;
	}
	api_start[c->depth] = 0;
	deliver_unlock(full, nr_full);
}

static void observers_set(bool on)
{
	const struct tpsim_driver_ops *o = driver_ops();

	if (!o)
		return;
	if (o->size >= offsetof(struct tpsim_driver_ops, set_issue_observer) +
		       sizeof(o->set_issue_observer))
		o->set_issue_observer(on ? observe_issue : NULL, NULL);
	o->set_observer(on ? observe : NULL, NULL);
	o->set_api_observer(on ? observe_api : NULL, NULL);
}

/* ---- API ----------------------------------------------------------------------------- */

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char **str)
{
	static const struct { CUptiResult r; const char *s; } names[] = {
		{ CUPTI_SUCCESS, "CUPTI_SUCCESS" },
		{ CUPTI_ERROR_INVALID_PARAMETER, "CUPTI_ERROR_INVALID_PARAMETER" },
		{ CUPTI_ERROR_INVALID_KIND, "CUPTI_ERROR_INVALID_KIND" },
		{ CUPTI_ERROR_MAX_LIMIT_REACHED, "CUPTI_ERROR_MAX_LIMIT_REACHED" },
		{ CUPTI_ERROR_NOT_INITIALIZED, "CUPTI_ERROR_NOT_INITIALIZED" },
		{ CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED,
		  "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED" },
		{ CUPTI_ERROR_INVALID_OPERATION, "CUPTI_ERROR_INVALID_OPERATION" },
	};

	if (!str)
		return CUPTI_ERROR_INVALID_PARAMETER;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].r == result) {
			*str = names[i].s;
			return CUPTI_SUCCESS;
		}
	*str = "CUPTI_ERROR_UNKNOWN";
	return CUPTI_ERROR_INVALID_PARAMETER;
}

CUptiResult CUPTIAPI cuptiGetVersion(uint32_t *version)
{
	if (!version)
		return CUPTI_ERROR_INVALID_PARAMETER;
	*version = CUPTI_API_VERSION;
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle *subscriber,
				    CUpti_CallbackFunc callback, void *userdata)
{
	CUptiResult r = CUPTI_SUCCESS;

	if (!subscriber)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&lock);
	if (subscribed || env_is("TPSIM_CUPTI_OTHER_SUBSCRIBER", "1"))
		r = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
	else
		subscribed = true;
	pthread_mutex_unlock(&lock);
	*subscriber = r == CUPTI_SUCCESS ? (CUpti_SubscriberHandle)&subscribed : NULL;
	return r;
}

CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle subscriber)
{
	CUptiResult r = CUPTI_SUCCESS;

	pthread_mutex_lock(&lock);
	if (!subscribed || subscriber != (CUpti_SubscriberHandle)&subscribed)
		r = CUPTI_ERROR_INVALID_PARAMETER;
	else
		subscribed = false;
	pthread_mutex_unlock(&lock);
	return r;
}

CUptiResult CUPTIAPI cuptiSetThreadIdType(CUpti_ActivityThreadIdType type)
{
	if (type != CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT && type != CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&lock);
	tid_type = type;
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc funcTimestamp)
{
	if (!funcTimestamp)
		return CUPTI_ERROR_INVALID_PARAMETER;
	__atomic_store_n(&ts_callback, funcTimestamp, __ATOMIC_RELEASE);
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t *timestamp)
{
	if (!timestamp)
		return CUPTI_ERROR_INVALID_PARAMETER;
	/* the clock of the GPU records, not the callback's (header comment) */
	*timestamp = gpu_to_cupti(clock_ns(CLOCK_MONOTONIC));
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc funcBufferRequested,
						    CUpti_BuffersCallbackCompleteFunc funcBufferCompleted)
{
	const char *v = getenv("TPSIM_CUPTI_BUF_RECORDS");

	if (!funcBufferRequested || !funcBufferCompleted)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&lock);
	buf_request = funcBufferRequested;
	buf_complete = funcBufferCompleted;
	buf_records_limit = v ? strtoul(v, NULL, 10) : 0;
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind)
{
	if ((unsigned)kind >= MAX_KIND || kind == CUPTI_ACTIVITY_KIND_INVALID)
		return CUPTI_ERROR_INVALID_KIND;
	pthread_mutex_lock(&lock);
	if (!kind_on[kind]) {
		kind_on[kind] = true;
		if (nr_kinds_on++ == 0)
			observers_set(true);
	}
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind)
{
	if ((unsigned)kind >= MAX_KIND || kind == CUPTI_ACTIVITY_KIND_INVALID)
		return CUPTI_ERROR_INVALID_KIND;
	pthread_mutex_lock(&lock);
	if (kind_on[kind]) {
		kind_on[kind] = false;
		if (--nr_kinds_on == 0)
			observers_set(false);
	}
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag)
{
	bool forced = flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED;
	const char *delay = getenv("TPSIM_CUPTI_FLUSH_DELAY_MS");
	CUpti_BuffersCallbackCompleteFunc done;
	struct full_buf *full;
	int nr_full = 0, cap = MAX_PENDING + 1;

	if (delay && !forced)
		usleep(strtoul(delay, NULL, 10) * 1000);
	pthread_mutex_lock(&lock);
	if (!buf_complete) {
		pthread_mutex_unlock(&lock);
		return CUPTI_ERROR_INVALID_OPERATION;
	}
	for (struct sbuf *b = closed_list; b; b = b->next)
		cap++;
	full = calloc(cap, sizeof(*full));
	if (!full) {
		pthread_mutex_unlock(&lock);
		return CUPTI_ERROR_OUT_OF_MEMORY;
	}
	/* newest first: the buffer in progress, the full ones still waiting for their open
	 * records, then the held complete ones. A default flush returns only buffers whose
	 * records are all complete (the header); a forced one returns every buffer, open
	 * records and all (their times 0), and their work's ends are then written nowhere. */
	if (cur_buf && (forced || (cur_used && !cur_sb->pending))) {
		full[nr_full++] = (struct full_buf){ cur_buf, cur_size, cur_used };
		if (cur_sb->pending) {
			incomplete_total += cur_sb->pending;
			cur_sb->gone = true;
		} else {
			free(cur_sb);
		}
		cur_buf = NULL;
		cur_sb = NULL;
	}
	while (forced && closed_list) {
		struct sbuf *b = closed_list;

		closed_list = b->next;
		full[nr_full++] = (struct full_buf){ b->buf, b->size, b->used };
		incomplete_total += b->pending;
		b->closed = false;
		b->gone = true;
	}
	while (nr_held)
		full[nr_full++] = held[--nr_held];
	in_flight++;
	done = buf_complete;
	pthread_mutex_unlock(&lock);
	deliver(done, full, nr_full);
	free(full);
	pthread_mutex_lock(&lock);
	/* returns once every buffer completed before it is back with the client, also those
	 * another thread is handing back */
	while (delivering)
		pthread_cond_wait(&delivered, &lock);
	if (--in_flight == 0)
		pthread_cond_broadcast(&idle);
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

/* An incomplete record (a forced flush handed it back before its work ended): both times
 * CUPTI_TIMESTAMP_UNKNOWN. */
static bool record_open(const CUpti_Activity *a)
{
	switch (a->kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
		return !((const CUpti_ActivityKernel10 *)a)->end;
	case CUPTI_ACTIVITY_KIND_MEMCPY:
		return !((const CUpti_ActivityMemcpy6 *)a)->end;
	case CUPTI_ACTIVITY_KIND_MEMSET:
		return !((const CUpti_ActivityMemset4 *)a)->end;
	case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
		return !((const CUpti_ActivitySynchronization2 *)a)->end;
	default:
		return false;
	}
}

CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t *buffer, size_t validBufferSizeBytes,
						CUpti_Activity **record)
{
	uint8_t *p;
	size_t size;

	if (!buffer || !record)
		return CUPTI_ERROR_INVALID_PARAMETER;
	if (!*record) {
		p = buffer;
	} else {
		size = record_size((*record)->kind);
		if (!size)
			return CUPTI_ERROR_INVALID_KIND;
		p = (uint8_t *)*record + size;
	}
	if (p >= buffer + validBufferSizeBytes) {
		*record = NULL;
		return CUPTI_ERROR_MAX_LIMIT_REACHED;
	}
	*record = (CUpti_Activity *)p;
	/* the header: CUPTI_ERROR_INVALID_KIND "if activity record is either incomplete or
	 * invalid". *record is left on it, so a client that goes on gets the next one; one that
	 * stops at the first error loses the rest of the buffer. TPSIM_CUPTI_INCOMPLETE=zero:
	 * returned as a success, times 0, for the client to tell by itself. */
	if (record_open(*record) && !env_is("TPSIM_CUPTI_INCOMPLETE", "zero"))
		return CUPTI_ERROR_INVALID_KIND;
	return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t streamId,
						       size_t *dropped)
{
	if (!dropped)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&lock);
	/* every buffer is global since CUDA 6.0: a context's queue holds no drops */
	*dropped = context ? 0 : dropped_global;
	if (!context)
		dropped_global = 0;
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

static bool verbose(void)
{
	return env_is("TPSIM_VERBOSE", "1");
}

static void report_drops_locked(void)
{
	static size_t reported = (size_t)-1;

	if (verbose() && reported != dropped_total + reordered + incomplete_total) {
		fprintf(stderr, "tpsim: cupti dropped %zu records, returned %zu buffers before an "
			"older one\n", dropped_total, reordered);
		if (incomplete_total)
			fprintf(stderr, "tpsim: cupti handed back %zu incomplete records\n",
				incomplete_total);
		reported = dropped_total + reordered + incomplete_total;
	}
}

__attribute__((destructor)) static void report_drops_at_exit(void)
{
	pthread_mutex_lock(&lock);
	if (dropped_total || reordered || incomplete_total)
		report_drops_locked();
	pthread_mutex_unlock(&lock);
}

/* Detach: everything off, pending records discarded (the client flushed first), callbacks
 * forgotten so nothing calls into a library that may be unloaded next. */
CUptiResult CUPTIAPI cuptiFinalize(void)
{
	pthread_mutex_lock(&lock);
	if (nr_kinds_on)
		observers_set(false);
	memset(kind_on, 0, sizeof(kind_on));
	nr_kinds_on = 0;
	free(cur_buf);	/* allocated by the client's callback with malloc-compatible memory */
	cur_buf = NULL;
	if (cur_sb && cur_sb->pending)
		cur_sb->gone = true;	/* its open records' ends come later: freed then */
	else
		free(cur_sb);
	cur_sb = NULL;
	while (closed_list) {
		struct sbuf *b = closed_list;

		closed_list = b->next;
		free(b->buf);
		b->closed = false;
		b->gone = true;
	}
	while (nr_held)
		free(held[--nr_held].buf);
	report_drops_locked();
	buf_request = NULL;
	buf_complete = NULL;
	__atomic_store_n(&ts_callback, NULL, __ATOMIC_RELEASE);
	subscribed = false;
	/* a worker may still be inside the client's buffer callback */
	while (in_flight)
		pthread_cond_wait(&idle, &lock);
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}
