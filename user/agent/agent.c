// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libtptrace_agent.so: the part of `tptrace --gpu` that runs inside the traced process. CUPTI
 * only works in-process, so this library loads it there, turns on activity records with
 * CLOCK_MONOTONIC timestamps (bpf_ktime_get_ns()'s domain) and streams compact records to
 * tptrace through shared memory (agent_shm.h).
 *
 * Two ways in:
 *  1. Attach (tptrace -p PID --gpu): tptrace ptrace-injects dlopen() of this library, then
 *     calls tptrace_agent_start(shm_path, cupti_path) on the hijacked thread. shm_path is a file
 *     tptrace created and filled (a memfd reached as /proc/<tptrace>/fd/<n>, or a file under
 *     /dev/shm); the agent maps it, returns at once and does everything else on its own thread.
 *     At the end tptrace requests DISABLE, waits for DETACHED, calls tptrace_agent_stop() (joins
 *     the thread, unmaps) and dlclose()s the library: the process keeps running without it.
 *  2. CUDA_INJECTION64_PATH=/path/libtptrace_agent.so: the driver calls InitializeInjection() at
 *     cuInit. The agent creates /dev/shm/tptrace-gpu.<pid> and stays idle (no CUPTI loaded, no
 *     activity) until a tptrace writes ENABLE there; DISABLE (or the tracer's death) turns
 *     activity off again. It is never unloaded. TPTRACE_AGENT_AUTOSTART=1 makes the library's
 *     constructor call InitializeInjection(), for LD_PRELOAD and tests.
 *
 * Depends on libc only: CUPTI is dlopen'ed at run time (cupti.h supplies types and checks the
 * prototypes of the function pointers). libcupti stays loaded after detach: CUPTI keeps
 * internal threads and driver hooks, and cuptiFinalize() is what detaches it; unloading the
 * library underneath them is not safe.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <cupti.h>
#include "agent_shm.h"

#define EXPORT __attribute__((visibility("default")))
#define BUF_SIZE (1 << 20)
#define MAX_NAME_FORWARD 4096	/* longer kernel names are cut (AGENT_RECF_NAME_CUT) */
#define CLOCK_SAMPLE_NS 1000000000ULL
/* the first samples come faster, so the drift fit (user/gpu/gpu.c) has a slope from the start */
#define CLOCK_FAST_SAMPLES 48
#define CLOCK_FAST_NS 1000000ULL
#define POLL_NS 10000000ULL

/* CUPTI entry points, typed from cupti.h so a prototype change breaks the build. */
struct cupti_fns {
	__typeof__(cuptiSubscribe) *Subscribe;
	__typeof__(cuptiUnsubscribe) *Unsubscribe;
	__typeof__(cuptiActivityEnable) *ActivityEnable;
	__typeof__(cuptiActivityDisable) *ActivityDisable;
	__typeof__(cuptiActivityRegisterCallbacks) *ActivityRegisterCallbacks;
	__typeof__(cuptiActivityRegisterTimestampCallback) *ActivityRegisterTimestampCallback;
	__typeof__(cuptiActivityFlushAll) *ActivityFlushAll;
	__typeof__(cuptiActivityGetNextRecord) *ActivityGetNextRecord;
	__typeof__(cuptiActivityGetNumDroppedRecords) *ActivityGetNumDroppedRecords;
	__typeof__(cuptiGetTimestamp) *GetTimestamp;
	__typeof__(cuptiSetThreadIdType) *SetThreadIdType;
	__typeof__(cuptiGetResultString) *GetResultString;
	__typeof__(cuptiGetVersion) *GetVersion;		/* optional */
	__typeof__(cuptiFinalize) *Finalize;			/* optional */
};

static struct {
	struct agent_control *ctl;
	size_t map_size;
	bool resident;
	void *cupti_lib;
	struct cupti_fns f;
	CUpti_SubscriberHandle subscriber;
	bool subscribed, enabled, finalized;
	pthread_t thread;
	bool thread_started;
	volatile int stop;
	size_t buf_size;		/* CUPTI buffer size (TPTRACE_AGENT_BUF_BYTES for tests) */
	bool default_tid;		/* TPTRACE_AGENT_DEFAULT_TID=1 (tests): keep CUPTI's
					 * default thread id type, which tptrace cannot join */
	pthread_mutex_t ring_lock;	/* CUPTI may complete buffers on several threads */
	pthread_mutex_t start_lock;
} ag = {
	.ring_lock = PTHREAD_MUTEX_INITIALIZER,
	.start_lock = PTHREAD_MUTEX_INITIALIZER,
};

static const CUpti_ActivityKind enabled_kinds[] = {
	CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
	CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
	CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER,
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* CUPTI's clock: every activity timestamp is taken or converted through this. */
static uint64_t CUPTIAPI cupti_clock(void)
{
	return mono_ns();
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { ns / 1000000000ULL, ns % 1000000000ULL };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

__attribute__((format(printf, 4, 5)))
static void set_status(uint32_t status, uint32_t code, CUptiResult res, const char *fmt, ...)
{
	struct agent_control *ctl = ag.ctl;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(ctl->message, sizeof(ctl->message), fmt, ap);
	va_end(ap);
	ctl->error_code = code;
	ctl->cupti_result = res;
	__atomic_store_n(&ctl->status, status, __ATOMIC_RELEASE);
}

static const char *result_str(CUptiResult res)
{
	const char *s = NULL;

	if (ag.f.GetResultString && ag.f.GetResultString(res, &s) == CUPTI_SUCCESS && s)
		return s;
	return "unknown CUPTI error";
}

/* ---- ring ---------------------------------------------------------------------------- */

/* Pushes n records as one batch (a kernel and its name continuations), or drops them all. */
static void ring_push(const struct agent_record *recs, uint32_t n)
{
	struct agent_control *ctl = ag.ctl;
	struct agent_record *ring = agent_ring(ctl);
	uint64_t head, tail;

	pthread_mutex_lock(&ag.ring_lock);
	head = ctl->head;
	tail = __atomic_load_n(&ctl->tail, __ATOMIC_ACQUIRE);
	if (head - tail + n > ctl->ring_records) {
		__atomic_fetch_add(&ctl->records_dropped, n, __ATOMIC_RELAXED);
	} else {
		for (uint32_t i = 0; i < n; i++)
			ring[(head + i) & (ctl->ring_records - 1)] = recs[i];
		__atomic_store_n(&ctl->head, head + n, __ATOMIC_RELEASE);
		__atomic_fetch_add(&ctl->records_written, n, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&ag.ring_lock);
}

static void push_kernel(struct agent_record *r, const char *name)
{
	size_t len = name ? strnlen(name, MAX_NAME_FORWARD + 1) : 0;
	uint32_t chunk = AGENT_NAME_LEN - 1, n = 1;
	struct agent_record batch[1 + MAX_NAME_FORWARD / (AGENT_NAME_LEN - 1) + 1];

	if (len > MAX_NAME_FORWARD) {
		len = MAX_NAME_FORWARD;
		r->flags |= AGENT_RECF_NAME_CUT;
	}
	r->name_len = len;
	memcpy(r->name, name ? name : "", len < chunk ? len : chunk);
	if (len > chunk)
		r->flags |= AGENT_RECF_NAME_CONT;
	batch[0] = *r;
	for (size_t off = chunk; off < len; off += chunk, n++) {
		struct agent_record *c = &batch[n];
		size_t part = len - off < chunk ? len - off : chunk;

		memset(c, 0, sizeof(*c));
		c->type = AGENT_REC_KERNEL_NAME;
		c->correlation = r->correlation;
		c->name_len = part;
		memcpy(c->name, name + off, part);
	}
	ring_push(batch, n);
}

/* ---- CUPTI records -> agent records --------------------------------------------------- */

/* The fields every GPU-work record has under the same names, whatever its struct version. */
#define GPU_WORK_FIELDS(r, x)							\
	do {									\
		(r).start_ns = (x)->start;					\
		(r).end_ns = (x)->end;						\
		(r).device = (x)->deviceId;					\
		(r).context = (x)->contextId;					\
		(r).stream = (x)->streamId;					\
		(r).correlation = (x)->correlationId;				\
		(r).graph_id = (x)->graphId;					\
	} while (0)

/* A copy's, the same for device copies and peer copies (two record kinds). */
#define MEMCPY_FIELDS(r, m)							\
	do {									\
		GPU_WORK_FIELDS(r, m);						\
		(r).type = AGENT_REC_MEMCPY;					\
		(r).copy_kind = (m)->copyKind;					\
		(r).src_kind = (m)->srcKind;					\
		(r).dst_kind = (m)->dstKind;					\
		(r).bytes = (m)->bytes;						\
	} while (0)

/* A GPU record a forced flush returned before its work ended: its times are unknown. */
static bool incomplete(const struct agent_record *r)
{
	if (r->start_ns != CUPTI_TIMESTAMP_UNKNOWN && r->end_ns != CUPTI_TIMESTAMP_UNKNOWN)
		return false;
	__atomic_fetch_add(&ag.ctl->records_incomplete, 1, __ATOMIC_RELAXED);
	return true;
}

static void convert(const CUpti_Activity *a)
{
	struct agent_record r;

	memset(&r, 0, sizeof(r));
	switch (a->kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
		const CUpti_ActivityKernel10 *k = (const void *)a;

		r.type = AGENT_REC_KERNEL;
		GPU_WORK_FIELDS(r, k);
		r.grid[0] = k->gridX, r.grid[1] = k->gridY, r.grid[2] = k->gridZ;
		r.block[0] = k->blockX, r.block[1] = k->blockY, r.block[2] = k->blockZ;
		r.registers = k->registersPerThread;
		r.static_shmem = k->staticSharedMemory;
		r.dynamic_shmem = k->dynamicSharedMemory;
		if (incomplete(&r))
			return;
		push_kernel(&r, k->name);
		return;
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY: {
		const CUpti_ActivityMemcpy6 *m = (const void *)a;

		MEMCPY_FIELDS(r, m);
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY2: {
		const CUpti_ActivityMemcpyPtoP4 *m = (const void *)a;

		MEMCPY_FIELDS(r, m);
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMSET: {
		const CUpti_ActivityMemset4 *m = (const void *)a;

		r.type = AGENT_REC_MEMSET;
		GPU_WORK_FIELDS(r, m);
		r.bytes = m->bytes;
		r.value = m->value;
		r.dst_kind = m->memoryKind;
		break;
	}
	case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
		const CUpti_ActivitySynchronization2 *s = (const void *)a;

		r.type = AGENT_REC_SYNC;
		r.start_ns = s->start;
		r.end_ns = s->end;
		r.context = s->contextId;
		r.stream = s->streamId;
		r.correlation = s->correlationId;
		r.cbid = s->type;
		r.value = s->cudaEventId;
		r.return_value = s->returnValue;
		break;
	}
	case CUPTI_ACTIVITY_KIND_RUNTIME:
	case CUPTI_ACTIVITY_KIND_DRIVER: {
		const CUpti_ActivityAPI *api = (const void *)a;

		r.type = a->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? AGENT_REC_RUNTIME_API :
								   AGENT_REC_DRIVER_API;
		r.start_ns = api->start;
		r.end_ns = api->end;
		r.tid = api->threadId;
		r.cbid = api->cbid;
		r.correlation = api->correlationId;
		r.return_value = api->returnValue;
		ring_push(&r, 1);
		return;
	}
	default:
		__atomic_fetch_add(&ag.ctl->records_unknown, 1, __ATOMIC_RELAXED);
		return;
	}
	if (incomplete(&r))
		return;
	ring_push(&r, 1);
}

/* CUPTI's drop count since the last read (the read resets it) into the shared total. */
static void take_dropped(CUcontext ctx, uint32_t stream_id)
{
	size_t dropped = 0;

	if (ag.f.ActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS && dropped)
		__atomic_fetch_add(&ag.ctl->cupti_dropped, dropped, __ATOMIC_RELAXED);
}

/* Buffers with CUPTI: each carries its request's sequence number in a header in front of
 * what CUPTI sees. A flush proves that what ended before it began is delivered only once every
 * buffer requested before then is back: CUPTI keeps a buffer holding an open GPU record
 * (work still running) through a default flush, with the API records written beside it. */
struct buf_hdr {
	uint64_t seq;
	struct buf_hdr *prev, *next;	/* outstanding, oldest first */
} __attribute__((aligned(ACTIVITY_RECORD_ALIGNMENT)));

static pthread_mutex_t bufs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct buf_hdr *bufs_head, *bufs_tail;
static uint64_t bufs_seq;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
	size_t want = ag.buf_size ?: BUF_SIZE;
	struct buf_hdr *h;

	/* aligned_alloc wants a multiple of the alignment */
	h = aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, sizeof(*h) +
			  ((want + ACTIVITY_RECORD_ALIGNMENT - 1) &
			   ~(size_t)(ACTIVITY_RECORD_ALIGNMENT - 1)));
	*buffer = h ? (uint8_t *)(h + 1) : NULL;
	*size = h ? want : 0;
	*max_records = 0;
	if (!h)
		return;
	pthread_mutex_lock(&bufs_lock);
	h->seq = ++bufs_seq;
	h->next = NULL;
	h->prev = bufs_tail;
	if (bufs_tail)
		bufs_tail->next = h;
	else
		bufs_head = h;
	bufs_tail = h;
	pthread_mutex_unlock(&bufs_lock);
}

/* The request sequence number the next buffer will get. */
static uint64_t bufs_next_seq(void)
{
	uint64_t v;

	pthread_mutex_lock(&bufs_lock);
	v = bufs_seq + 1;
	pthread_mutex_unlock(&bufs_lock);
	return v;
}

/* Every buffer requested before sequence number `before` is back with us. */
static bool bufs_back_before(uint64_t before)
{
	bool back;

	pthread_mutex_lock(&bufs_lock);
	back = !bufs_head || bufs_head->seq >= before;
	pthread_mutex_unlock(&bufs_lock);
	return back;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer,
				      size_t size, size_t valid_size)
{
	struct buf_hdr *h = buffer ? (struct buf_hdr *)buffer - 1 : NULL;
	CUpti_Activity *rec = NULL, *prev = NULL;
	CUptiResult r;

	/* CUPTI_ERROR_INVALID_KIND: "either incomplete or invalid" (a forced flush hands back
	 * records of work still running); it leaves *record on that record, so the walk goes
	 * on from it. One it cannot step past ends the walk: the rest of the buffer is lost,
	 * and counted as such. */
	while (buffer) {
		r = ag.f.ActivityGetNextRecord(buffer, valid_size, &rec);
		if (r == CUPTI_SUCCESS) {
			convert(rec);
		} else if (r == CUPTI_ERROR_INVALID_KIND && rec && rec != prev) {
			__atomic_fetch_add(&ag.ctl->records_incomplete, 1, __ATOMIC_RELAXED);
		} else {
			if (r != CUPTI_ERROR_MAX_LIMIT_REACHED)
				__atomic_fetch_add(&ag.ctl->buffers_cut, 1, __ATOMIC_RELAXED);
			break;
		}
		prev = rec;
	}
	/* ctx and stream_id are always NULL/0 since CUDA 6.0 (global buffers): the global queue */
	take_dropped(ctx, stream_id);
	__atomic_fetch_add(&ag.ctl->buffers_completed, 1, __ATOMIC_RELAXED);
	if (!h)
		return;
	pthread_mutex_lock(&bufs_lock);
	if (h->prev)
		h->prev->next = h->next;
	else
		bufs_head = h->next;
	if (h->next)
		h->next->prev = h->prev;
	else
		bufs_tail = h->prev;
	pthread_mutex_unlock(&bufs_lock);
	free(h);
}

static void CUPTIAPI no_callback(void *userdata, CUpti_CallbackDomain domain,
				 CUpti_CallbackId cbid, const void *cbdata)
{
}

static void clock_sample(void)
{
	struct agent_control *ctl = ag.ctl;
	struct agent_clock_sample s;
	uint64_t cupti = 0;

	/* the narrowest of a few read pairs: a pair the scheduler split is worth nothing */
	s.mono_before_ns = 0;
	s.mono_after_ns = UINT64_MAX;
	for (int i = 0; i < 3; i++) {
		uint64_t before = mono_ns(), after;

		if (ag.f.GetTimestamp(&cupti) != CUPTI_SUCCESS)
			return;
		after = mono_ns();
		if (after - before < s.mono_after_ns - s.mono_before_ns) {
			s.mono_before_ns = before;
			s.mono_after_ns = after;
			s.cupti_ns = cupti;
		}
	}
	ctl->clock[ctl->nr_clock_samples % AGENT_CLOCK_SAMPLES] = s;
	__atomic_store_n(&ctl->nr_clock_samples, ctl->nr_clock_samples + 1, __ATOMIC_RELEASE);
}

/* ---- finding CUDA and CUPTI ---------------------------------------------------------- */

/* Directory of the first mapped file whose base name starts with prefix, into dir. */
static bool mapped_lib_dir(const char *prefix, char *dir, size_t size)
{
	char line[PATH_MAX + 256];
	bool found = false;
	FILE *f = fopen("/proc/self/maps", "re");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		char *path = strchr(line, '/'), *base, *nl;

		if (!path)
			continue;
		nl = strchr(path, '\n');
		if (nl)
			*nl = '\0';
		base = strrchr(path, '/') + 1;
		if (strncmp(base, prefix, strlen(prefix)))
			continue;
		if (dir) {
			base[-1] = '\0';
			snprintf(dir, size, "%s", path);
		}
		found = true;
	}
	fclose(f);
	return found;
}

static bool try_cupti(const char *path)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);

	if (!h)
		return false;
	char real[PATH_MAX];
	const char *shown = path;

	ag.cupti_lib = h;
	/* for the report: the file, not the relative way we found it */
	if (strchr(path, '/') && realpath(path, real) && strlen(real) < AGENT_PATH_LEN)
		shown = real;
	snprintf(ag.ctl->cupti_loaded, sizeof(ag.ctl->cupti_loaded), "%.*s", AGENT_PATH_LEN - 1,
		 shown);
	return true;
}

/* First libcupti.so* matching dir/pattern (highest version first: glob sorts, walk back). */
static bool try_cupti_glob(const char *dir, const char *rel)
{
	char pat[PATH_MAX];
	glob_t g;
	bool ok = false;

	if (snprintf(pat, sizeof(pat), "%s/%s/libcupti.so*", dir, rel) >= (int)sizeof(pat))
		return false;
	if (glob(pat, 0, NULL, &g))
		return false;
	for (size_t i = g.gl_pathc; i-- > 0 && !ok;)
		ok = try_cupti(g.gl_pathv[i]);
	globfree(&g);
	return ok;
}

/* Explicit path; else next to the libcudart the process uses; else by soname. */
static bool load_cupti(void)
{
	static const char *const rel[] = {
		"../lib", "../extras/CUPTI/lib64", ".", "../../cuda_cupti/lib", "../lib64",
	};
	char dir[PATH_MAX];

	if (ag.ctl->cupti_path[0]) {
		char path[AGENT_PATH_LEN];

		snprintf(path, sizeof(path), "%s", ag.ctl->cupti_path);
		return try_cupti(path);
	}
	if (mapped_lib_dir("libcudart.so", dir, sizeof(dir)))
		for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++)
			if (try_cupti_glob(dir, rel[i]))
				return true;
	return try_cupti("libcupti.so.13") || try_cupti("libcupti.so");
}

static bool resolve_cupti(void)
{
#define SYM(field, name, required)							\
	do {										\
		*(void **)&ag.f.field = dlsym(ag.cupti_lib, name);			\
		if (required && !ag.f.field) {						\
			set_status(AGENT_ST_REFUSED, AGENT_E_NO_CUPTI, 0,		\
				   "%s has no %s", ag.ctl->cupti_loaded, name);		\
			return false;							\
		}									\
	} while (0)
	SYM(Subscribe, "cuptiSubscribe", 1);
	SYM(Unsubscribe, "cuptiUnsubscribe", 1);
	SYM(ActivityEnable, "cuptiActivityEnable", 1);
	SYM(ActivityDisable, "cuptiActivityDisable", 1);
	SYM(ActivityRegisterCallbacks, "cuptiActivityRegisterCallbacks", 1);
	SYM(ActivityRegisterTimestampCallback, "cuptiActivityRegisterTimestampCallback", 1);
	SYM(ActivityFlushAll, "cuptiActivityFlushAll", 1);
	SYM(ActivityGetNextRecord, "cuptiActivityGetNextRecord", 1);
	SYM(ActivityGetNumDroppedRecords, "cuptiActivityGetNumDroppedRecords", 1);
	SYM(GetTimestamp, "cuptiGetTimestamp", 1);
	SYM(SetThreadIdType, "cuptiSetThreadIdType", 1);
	SYM(GetResultString, "cuptiGetResultString", 1);
	SYM(GetVersion, "cuptiGetVersion", 0);
	SYM(Finalize, "cuptiFinalize", 0);
#undef SYM
	if (ag.f.GetVersion) {
		uint32_t v = 0;

		if (ag.f.GetVersion(&v) == CUPTI_SUCCESS)
			ag.ctl->cupti_api_version = v;
	}
	return true;
}

/* ---- enable / disable ---------------------------------------------------------------- */

#define CUPTI_CALL(call, what)									\
	do {											\
		CUptiResult _r = (call);							\
		if (_r != CUPTI_SUCCESS) {							\
			set_status(AGENT_ST_ERROR, AGENT_E_CUPTI, _r, "%s failed: %s (%d) in %s",	\
				   what, result_str(_r), (int)_r, ag.ctl->cupti_loaded);	\
			goto fail;								\
		}										\
	} while (0)

/* A flush that began at began (the next buffer then was number seq) is done: what it
 * delivered is in the ring before either store. It bounds what has arrived only when it got
 * back every buffer requested before it began. */
static void flushed(struct agent_control *ctl, uint64_t began, uint64_t seq, int n)
{
	if (bufs_back_before(seq))
		__atomic_store_n(&ctl->flushed_upto_ns, began, __ATOMIC_RELEASE);
	else
		__atomic_fetch_add(&ctl->flushes_partial, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&ctl->flushes, n, __ATOMIC_RELEASE);
}

static void cupti_off(void)
{
	if (ag.enabled) {
		uint64_t began = mono_ns(), seq = bufs_next_seq();

		ag.f.ActivityFlushAll(0);
		for (size_t i = 0; i < sizeof(enabled_kinds) / sizeof(enabled_kinds[0]); i++)
			ag.f.ActivityDisable(enabled_kinds[i]);
		ag.f.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
		/* records dropped after the last buffer came back */
		take_dropped(NULL, 0);
		flushed(ag.ctl, began, seq, 2);
		clock_sample();
		ag.enabled = false;
	}
	if (ag.subscribed) {
		ag.f.Unsubscribe(ag.subscriber);
		ag.subscribed = false;
	}
}

/* Subscribe, clock first, then the kinds. Sets ENABLED, or REFUSED/ERROR with the reason. */
static bool cupti_on(void)
{
	CUptiResult r;

	r = ag.f.Subscribe(&ag.subscriber, (CUpti_CallbackFunc)no_callback, NULL);
	if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
		set_status(AGENT_ST_REFUSED, AGENT_E_OTHER_SUBSCRIBER, r,
			   "another CUPTI client is active in this process (torch.profiler, nsys, "
			   "ncu, DCGM?): CUPTI allows one subscriber");
		return false;
	}
	CUPTI_CALL(r, "cuptiSubscribe");
	ag.subscribed = true;
	/* API records must carry gettid(), the id the probes see: CUPTI's default on Linux is
	 * pthread_self(), which nothing outside the process can match */
	if (!ag.default_tid)
		CUPTI_CALL(ag.f.SetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM),
			   "cuptiSetThreadIdType(SYSTEM)");
	/* before any kind is enabled, or early records keep CUPTI's default CLOCK_REALTIME */
	CUPTI_CALL(ag.f.ActivityRegisterTimestampCallback(cupti_clock),
		   "cuptiActivityRegisterTimestampCallback");
	CUPTI_CALL(ag.f.ActivityRegisterCallbacks(buffer_requested, buffer_completed),
		   "cuptiActivityRegisterCallbacks");
	ag.enabled = true;
	for (size_t i = 0; i < sizeof(enabled_kinds) / sizeof(enabled_kinds[0]); i++) {
		r = ag.f.ActivityEnable(enabled_kinds[i]);
		/* kernels are the point; the other kinds are best effort */
		if (r != CUPTI_SUCCESS && enabled_kinds[i] == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
			CUPTI_CALL(r, "cuptiActivityEnable(CONCURRENT_KERNEL)");
	}
	clock_sample();
	ag.ctl->generation++;
	set_status(AGENT_ST_ENABLED, AGENT_OK, 0, "CUPTI activity enabled (%s)",
		   ag.ctl->cupti_loaded);
	return true;
fail:
	cupti_off();
	return false;
}

/* ---- the agent thread ---------------------------------------------------------------- */

static bool tracer_alive(void)
{
	uint32_t pid = __atomic_load_n(&ag.ctl->tracer_pid, __ATOMIC_ACQUIRE);

	return !pid || kill(pid, 0) == 0 || errno == EPERM;
}

static void *agent_main(void *arg)
{
	struct agent_control *ctl = ag.ctl;
	uint64_t last_flush = mono_ns(), last_clock = last_flush, flush_ns;
	bool exit_after_disable = !ag.resident;
	const char *v;

	/* test hooks: how a client too careless for CUPTI fares (tests/e2e/test_gpu.py) */
	v = getenv("TPTRACE_AGENT_BUF_BYTES");
	ag.buf_size = v ? strtoul(v, NULL, 10) : 0;
	v = getenv("TPTRACE_AGENT_DEFAULT_TID");
	ag.default_tid = v && !strcmp(v, "1");

	if (!ag.resident) {
		if (!mapped_lib_dir("libcudart.so", NULL, 0) && !mapped_lib_dir("libcuda.so", NULL, 0)) {
			set_status(AGENT_ST_REFUSED, AGENT_E_NO_CUDA, 0,
				   "process %d uses no CUDA (neither libcudart.so* nor libcuda.so* "
				   "is mapped)", (int)getpid());
			return NULL;
		}
	}
	for (;;) {
		uint32_t gen = __atomic_load_n(&ctl->request_gen, __ATOMIC_ACQUIRE);

		if (ag.stop)
			break;
		if (gen != ctl->ack_gen) {
			uint32_t req = ctl->request;

			if (req == AGENT_REQ_ENABLE && !ag.enabled) {
				if (!ag.cupti_lib && !load_cupti()) {
					set_status(AGENT_ST_REFUSED, AGENT_E_NO_CUPTI, 0,
						   "no libcupti found (%s; next to libcudart; "
						   "libcupti.so.13 by name): %s",
						   ctl->cupti_path[0] ? ctl->cupti_path : "no path given",
						   dlerror() ?: "not found");
				} else if (ag.f.Subscribe || resolve_cupti()) {
					cupti_on();
				}
				last_flush = last_clock = mono_ns();
			} else if (req == AGENT_REQ_DISABLE) {
				cupti_off();
				/* detach CUPTI before saying DETACHED: the library may go next */
				if (!ag.resident && ag.f.Finalize && ag.cupti_lib && !ag.finalized) {
					ag.f.Finalize();
					ag.finalized = true;
				}
				if (ctl->status == AGENT_ST_ENABLED || ctl->status == AGENT_ST_STARTING)
					set_status(ag.resident ? AGENT_ST_IDLE : AGENT_ST_DETACHED,
						   AGENT_OK, 0, "CUPTI activity disabled");
			}
			__atomic_store_n(&ctl->ack_gen, gen, __ATOMIC_RELEASE);
			if (ctl->status == AGENT_ST_REFUSED || ctl->status == AGENT_ST_ERROR ||
			    ctl->status == AGENT_ST_DETACHED) {
				if (exit_after_disable)
					break;
			}
		}
		if (ag.enabled) {
			uint64_t now = mono_ns();

			flush_ns = (ctl->flush_period_ms ?: 200) * 1000000ULL;
			if (now - last_flush >= flush_ns) {
				uint64_t seq = bufs_next_seq();

				ag.f.ActivityFlushAll(0);
				flushed(ctl, now, seq, 1);
				last_flush = now;
			}
			if (now - last_clock >= (ctl->nr_clock_samples < CLOCK_FAST_SAMPLES ?
						 CLOCK_FAST_NS : CLOCK_SAMPLE_NS)) {
				clock_sample();
				last_clock = now;
				/* a tracer that died without DISABLE must not leave CUPTI running */
				if (!tracer_alive()) {
					cupti_off();
					set_status(ag.resident ? AGENT_ST_IDLE : AGENT_ST_DETACHED,
						   AGENT_OK, 0, "tracer %u is gone; disabled",
						   ctl->tracer_pid);
					ctl->tracer_pid = 0;
					if (exit_after_disable)
						break;
				}
			}
		}
		/* the first clock samples come every millisecond */
		sleep_ns(ag.enabled && ctl->nr_clock_samples < CLOCK_FAST_SAMPLES ? CLOCK_FAST_NS
									   : POLL_NS);
	}
	if (!ag.resident && ag.f.Finalize && ag.cupti_lib && !ag.finalized) {
		cupti_off();
		ag.f.Finalize();
		ag.finalized = true;
	}
	return NULL;
}

static int start_thread(void)
{
	sigset_t all, old;
	int err;

	/* the agent thread takes no signals: the process's handlers expect its own threads */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&ag.thread, NULL, agent_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err)
		return -err;
	ag.thread_started = true;
	return 0;
}

static int map_ctl(int fd, bool create, uint32_t ring_records)
{
	struct agent_control *ctl;
	struct stat st;
	size_t size;

	if (create) {
		size = agent_shm_size(ring_records);
		if (ftruncate(fd, size))
			return -errno;
	} else {
		if (fstat(fd, &st))
			return -errno;
		size = st.st_size;
		if (size < AGENT_CTL_SIZE)
			return -EINVAL;
	}
	ctl = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (ctl == MAP_FAILED)
		return -errno;
	if (create) {
		agent_ctl_init(ctl, ring_records, getpid());
	} else if (!agent_ctl_valid(ctl, size)) {
		munmap(ctl, size);
		return -EPROTO;
	}
	ctl->agent_pid = getpid();
	ag.ctl = ctl;
	ag.map_size = size;
	return 0;
}

/*
 * Attach entry, called by tptrace on a ptrace-hijacked thread right after dlopen: map the
 * control block tptrace prepared (shm_path), start the agent thread and return at once.
 * cupti_path (may be NULL or "") overrides the one in the control block.
 * Returns 0 or a negative errno (-EBUSY: already started, -EPROTO: bad header).
 */
EXPORT int tptrace_agent_start(const char *shm_path, const char *cupti_path)
{
	int fd, err;

	pthread_mutex_lock(&ag.start_lock);
	if (ag.ctl) {
		err = -EBUSY;
		goto out;
	}
	fd = open(shm_path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		goto out;
	}
	err = map_ctl(fd, false, 0);
	close(fd);
	if (err)
		goto out;
	if (cupti_path && cupti_path[0])
		snprintf(ag.ctl->cupti_path, sizeof(ag.ctl->cupti_path), "%s", cupti_path);
	set_status(AGENT_ST_STARTING, AGENT_OK, 0, "agent started in pid %d", (int)getpid());
	err = start_thread();
	if (err) {
		set_status(AGENT_ST_ERROR, AGENT_E_BAD_SHM, 0, "pthread_create: %s", strerror(-err));
		munmap(ag.ctl, ag.map_size);
		ag.ctl = NULL;
	}
out:
	pthread_mutex_unlock(&ag.start_lock);
	return err;
}

/* Stops the agent thread (disabling CUPTI if still on) and unmaps; safe to dlclose after. */
EXPORT int tptrace_agent_stop(void)
{
	pthread_mutex_lock(&ag.start_lock);
	if (ag.resident) {
		pthread_mutex_unlock(&ag.start_lock);
		return -EPERM;
	}
	if (ag.thread_started) {
		ag.stop = 1;
		pthread_join(ag.thread, NULL);
		ag.thread_started = false;
	}
	if (ag.ctl) {
		cupti_off();
		munmap(ag.ctl, ag.map_size);
		ag.ctl = NULL;
	}
	pthread_mutex_unlock(&ag.start_lock);
	return 0;
}

/* CUDA_INJECTION64_PATH entry: called by the driver at cuInit; must not block. */
EXPORT int InitializeInjection(void)
{
	char name[64];
	int fd, err = 0;

	pthread_mutex_lock(&ag.start_lock);
	if (ag.ctl)
		goto out;
	snprintf(name, sizeof(name), AGENT_SHM_PREFIX "%d", (int)getpid());
	fd = shm_open(name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		err = -errno;
		goto out;
	}
	err = map_ctl(fd, true, AGENT_RING_DEFAULT);
	close(fd);
	if (err) {
		shm_unlink(name);
		goto out;
	}
	ag.resident = true;
	ag.ctl->resident = 1;
	set_status(AGENT_ST_IDLE, AGENT_OK, 0, "resident agent in pid %d, waiting for tptrace",
		   (int)getpid());
	err = start_thread();
out:
	pthread_mutex_unlock(&ag.start_lock);
	if (err)
		fprintf(stderr, "tptrace agent: cannot set up %s%d: %s\n", AGENT_SHM_PREFIX,
			(int)getpid(), strerror(-err));
	return err ? 0 : 1;	/* the driver's convention: nonzero is success */
}

__attribute__((constructor)) static void agent_ctor(void)
{
	const char *v = getenv("TPTRACE_AGENT_AUTOSTART");

	if (v && v[0] == '1')
		InitializeInjection();
}

__attribute__((destructor)) static void agent_dtor(void)
{
	/* dlclose without tptrace_agent_stop(): never leave a thread running unmapped code */
	if (!ag.resident)
		tptrace_agent_stop();
}
