// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Engine of the simulated CUDA runtime: a GPU is a set of streams, each a FIFO drained in order
 * by its own worker thread. A kernel sleeps for its duration, a copy memcpy's and then sleeps
 * bytes/bandwidth, an event record stamps CLOCK_MONOTONIC, a wait blocks the worker. Enqueueing
 * never blocks the caller; syncs wait for a stream's completed seq to reach a target.
 *
 * One mutex (sim_lock) guards all state and one condition (sim_progress) is broadcast on every
 * completion: simple, and fast enough for tests that run a few thousand items.
 */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "sim.h"

#define STREAM_MAGIC 0x7470736d73747265ULL	/* "tpsmstre" */
#define STREAM_DEAD  0x7470736d64656164ULL
#define EVENT_MAGIC  0x7470736d6576656eULL
#define KERNEL_MAGIC 0x7470736d6b65726eULL

struct sim_config sim_cfg;
pthread_mutex_t sim_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t sim_progress = PTHREAD_COND_INITIALIZER;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static struct sim_stream *live_streams;		/* includes destroyed ones until drained */
static struct sim_stream *legacy_streams[SIM_MAX_DEVICES];
static struct sim_kernel *kernels;
static uint64_t next_stream_id = 1;
static uint64_t correlation_counter;
static tpsim_observer_fn observer;
static void *observer_ctx;

static __thread int current_device;
static __thread struct sim_stream *per_thread_streams[SIM_MAX_DEVICES];

uint64_t sim_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

uint32_t sim_gettid(void)
{
	return (uint32_t)syscall(SYS_gettid);
}

int sim_current_device(void)
{
	return current_device;
}

void sim_set_current_device(int device)
{
	current_device = device;
}

uint64_t sim_next_correlation(void)
{
	return __atomic_add_fetch(&correlation_counter, 1, __ATOMIC_RELAXED);
}

static unsigned long long env_ull(const char *name, unsigned long long def)
{
	const char *v = getenv(name);
	char *end;
	unsigned long long x;

	if (!v || !*v)
		return def;
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno || *end) {
		fprintf(stderr, "tpsim: ignoring bad %s='%s'\n", name, v);
		return def;
	}
	return x;
}

/* TPSIM_KERNEL_TIMES="scale_vec=500,tk=200": µs per kernel whose name contains the pattern. */
static void parse_kernel_times(const char *spec)
{
	char *copy = strdup(spec), *save = NULL, *tok;

	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '='), *end;
		unsigned long long us;

		if (!eq || eq == tok) {
			fprintf(stderr, "tpsim: ignoring bad TPSIM_KERNEL_TIMES entry '%s'\n", tok);
			continue;
		}
		*eq = '\0';
		us = strtoull(eq + 1, &end, 10);
		if (*end || end == eq + 1) {
			fprintf(stderr, "tpsim: ignoring bad TPSIM_KERNEL_TIMES entry '%s'\n", tok);
			continue;
		}
		sim_cfg.times = realloc(sim_cfg.times, (sim_cfg.n_times + 1) * sizeof(*sim_cfg.times));
		sim_cfg.times[sim_cfg.n_times].pattern = strdup(tok);
		sim_cfg.times[sim_cfg.n_times].ns = us * 1000ULL;
		sim_cfg.n_times++;
	}
	free(copy);
}

static void do_init(void)
{
	const char *v;

	sim_cfg.verbose = env_ull("TPSIM_VERBOSE", 0) != 0;
	sim_cfg.kernel_ns = env_ull("TPSIM_KERNEL_US", 100) * 1000ULL;
	sim_cfg.spin_ns = env_ull("TPSIM_SPIN_US", 200) * 1000ULL;
	sim_cfg.devices = (int)env_ull("TPSIM_DEVICES", 1);
	if (sim_cfg.devices > SIM_MAX_DEVICES)
		sim_cfg.devices = SIM_MAX_DEVICES;
	sim_cfg.copy_gbps = 10.0;
	v = getenv("TPSIM_COPY_GBPS");
	if (v && *v) {
		char *end;
		double g = strtod(v, &end);

		if (*end || g <= 0)
			fprintf(stderr, "tpsim: ignoring bad TPSIM_COPY_GBPS='%s'\n", v);
		else
			sim_cfg.copy_gbps = g;
	}
	v = getenv("TPSIM_KERNEL_TIMES");
	if (v && *v)
		parse_kernel_times(v);
}

void sim_init(void)
{
	pthread_once(&init_once, do_init);
}

/* ---- kernels ---------------------------------------------------------------------------- */

static struct sim_kernel *kernel_find_locked(const void *func)
{
	struct sim_kernel *k;

	for (k = kernels; k; k = k->next)
		if (k->func == func)
			return k;
	return NULL;
}

static struct sim_kernel *kernel_add_locked(const void *func)
{
	struct sim_kernel *k = calloc(1, sizeof(*k));
	Dl_info info;
	char buf[32];

	k->magic = KERNEL_MAGIC;
	k->func = func;
	k->us_override = -1;
	/* A plain C function launched with cudaLaunchKernel has no device name: use its symbol. */
	if (dladdr(func, &info) && info.dli_sname && info.dli_saddr == func) {
		k->name = strdup(info.dli_sname);
	} else {
		snprintf(buf, sizeof(buf), "%p", func);
		k->name = strdup(buf);
	}
	k->next = kernels;
	kernels = k;
	return k;
}

struct sim_kernel *sim_kernel_get(const void *func)
{
	struct sim_kernel *k;

	pthread_mutex_lock(&sim_lock);
	k = kernel_find_locked(func);
	if (!k)
		k = kernel_add_locked(func);
	pthread_mutex_unlock(&sim_lock);
	return k;
}

struct sim_kernel *sim_kernel_from_handle(const void *handle)
{
	struct sim_kernel *k;

	pthread_mutex_lock(&sim_lock);
	for (k = kernels; k; k = k->next)
		if ((const void *)k == handle)
			break;
	pthread_mutex_unlock(&sim_lock);
	return k;
}

void sim_kernel_register(const void *func, const char *name)
{
	struct sim_kernel *k;

	pthread_mutex_lock(&sim_lock);
	k = kernel_find_locked(func);
	if (!k)
		k = kernel_add_locked(func);
	if (name) {
		free(k->name);
		k->name = strdup(name);
	}
	pthread_mutex_unlock(&sim_lock);
}

/* Precedence: tpsim_set_kernel_us, then TPSIM_KERNEL_TIMES (first match), then TPSIM_KERNEL_US. */
uint64_t sim_kernel_ns(const struct sim_kernel *k)
{
	int i;

	if (k->us_override >= 0)
		return (uint64_t)k->us_override * 1000ULL;
	for (i = 0; i < sim_cfg.n_times; i++)
		if (strstr(k->name, sim_cfg.times[i].pattern))
			return sim_cfg.times[i].ns;
	return sim_cfg.kernel_ns;
}

void tpsim_set_kernel_us(const void *func, unsigned us)
{
	struct sim_kernel *k;

	sim_init();
	k = sim_kernel_get(func);
	pthread_mutex_lock(&sim_lock);
	k->us_override = us;
	pthread_mutex_unlock(&sim_lock);
}

/* ---- events ----------------------------------------------------------------------------- */

struct sim_event *sim_event_new(unsigned int flags)
{
	struct sim_event *ev = calloc(1, sizeof(*ev));

	if (!ev)
		return NULL;
	ev->magic = EVENT_MAGIC;
	ev->flags = flags;
	ev->refs = 1;
	return ev;
}

struct sim_event *sim_event_get(cudaEvent_t handle)
{
	struct sim_event *ev = (struct sim_event *)handle;

	if (!ev || ev->magic != EVENT_MAGIC || ev->destroyed)
		return NULL;
	return ev;
}

void sim_event_put(struct sim_event *ev)
{
	if (--ev->refs == 0) {
		ev->magic = 0;
		free(ev);
	}
}

/* ---- items and workers ------------------------------------------------------------------ */

struct sim_item *sim_item_new(int kind)
{
	struct sim_item *it = calloc(1, sizeof(*it));

	if (!it) {
		fprintf(stderr, "tpsim: out of memory\n");
		abort();
	}
	it->kind = kind;
	it->rec.kind = kind;
	it->rec.host_tid = sim_gettid();
	it->rec.api_start_ns = sim_now_ns();
	it->height = 1;
	return it;
}

/*
 * Timer wakeups in VMs run 50-150 us late, which would stretch a 100 us kernel by half. Sleep
 * until deadline - (learned wakeup latency), then yield-spin the rest: durations stay within a
 * few us while the CPU burnt per item is bounded by TPSIM_SPIN_US.
 */
static uint64_t wakeup_latency_ns = 50000;

static void sleep_until(uint64_t deadline_ns)
{
	uint64_t est = __atomic_load_n(&wakeup_latency_ns, __ATOMIC_RELAXED);
	uint64_t now = sim_now_ns(), target, late;
	struct timespec ts;

	if (est > sim_cfg.spin_ns)
		est = sim_cfg.spin_ns;
	if (deadline_ns > now + est) {
		target = deadline_ns - est;
		ts.tv_sec = target / 1000000000ULL;
		ts.tv_nsec = target % 1000000000ULL;
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
		now = sim_now_ns();
		late = now > target ? now - target : 0;
		/* EWMA with 25% headroom, so most wakeups land before the deadline. */
		__atomic_store_n(&wakeup_latency_ns, (7 * est + late + late / 4) / 8,
				 __ATOMIC_RELAXED);
	}
	while (sim_now_ns() < deadline_ns)
		sched_yield();
}

static const char *copy_kind_name(int kind)
{
	switch (kind) {
	case cudaMemcpyHostToHost: return "HtoH";
	case cudaMemcpyHostToDevice: return "HtoD";
	case cudaMemcpyDeviceToHost: return "DtoH";
	case cudaMemcpyDeviceToDevice: return "DtoD";
	default: return "Default";
	}
}

static const char *kind_name(int kind)
{
	switch (kind) {
	case TPSIM_KERNEL: return "kernel";
	case TPSIM_MEMCPY: return "memcpy";
	case TPSIM_MEMSET: return "memset";
	case TPSIM_EVENT_RECORD: return "event_record";
	case TPSIM_WAIT_EVENT: return "wait_event";
	case TPSIM_GRAPH: return "graph";
	case TPSIM_HOST_FN: return "host_fn";
	case TPSIM_FREE: return "free";
	default: return "?";
	}
}

static void log_item(const struct tpsim_record *r)
{
	char what[512];

	switch (r->kind) {
	case TPSIM_KERNEL:
	case TPSIM_GRAPH:
		snprintf(what, sizeof(what), " name=%s grid=%u,%u,%u block=%u,%u,%u shmem=%zu",
			 r->name ? r->name : "?", r->grid[0], r->grid[1], r->grid[2],
			 r->block[0], r->block[1], r->block[2], r->shmem);
		break;
	case TPSIM_MEMCPY:
		snprintf(what, sizeof(what), " dir=%s bytes=%zu", copy_kind_name(r->copy_kind),
			 r->bytes);
		break;
	case TPSIM_MEMSET:
		snprintf(what, sizeof(what), " bytes=%zu", r->bytes);
		break;
	default:
		what[0] = '\0';
	}
	fprintf(stderr, "tpsim: %s%s stream=%" PRIu64 " dev=%d corr=%" PRIu64 " tid=%u start=%" PRIu64
		" end=%" PRIu64 " dur_us=%.1f\n", kind_name(r->kind), what, r->stream_id, r->device,
		r->correlation, r->host_tid, r->start_ns, r->end_ns,
		(r->end_ns - r->start_ns) / 1000.0);
}

/* Runs one item on the worker, sim_lock not held. */
static void execute(struct sim_item *it)
{
	uint64_t start = sim_now_ns();
	size_t row;

	it->rec.start_ns = start;
	switch (it->kind) {
	case TPSIM_KERNEL:
	case TPSIM_GRAPH:
		if (it->fn)
			it->fn(it->arg);
		else
			sleep_until(start + it->dur_ns);
		break;
	case TPSIM_MEMCPY:
		for (row = 0; row < it->height; row++)
			memmove((char *)it->dst + row * it->dpitch,
				(const char *)it->src + row * it->spitch, it->width);
		sleep_until(start + (uint64_t)(it->rec.bytes / sim_cfg.copy_gbps));
		break;
	case TPSIM_MEMSET:
		for (row = 0; row < it->height; row++)
			memset((char *)it->dst + row * it->dpitch, it->value, it->width);
		break;
	case TPSIM_EVENT_RECORD:
		break;	/* completion is stamped under the lock by the worker */
	case TPSIM_WAIT_EVENT:
		pthread_mutex_lock(&sim_lock);
		while (it->event->done_gen < it->event_gen)
			pthread_cond_wait(&sim_progress, &sim_lock);
		pthread_mutex_unlock(&sim_lock);
		break;
	case SIM_WAIT_STREAM:
		pthread_mutex_lock(&sim_lock);
		while (it->wait_stream->completed < it->wait_seq)
			pthread_cond_wait(&sim_progress, &sim_lock);
		pthread_mutex_unlock(&sim_lock);
		break;
	case TPSIM_HOST_FN:
		it->fn(it->arg);
		break;
	case TPSIM_FREE:
		free(it->dst);
		break;
	}
	it->rec.end_ns = sim_now_ns();
}

static void *worker_main(void *arg)
{
	struct sim_stream *s = arg;
	struct sim_item *it;
	tpsim_observer_fn obs;
	void *obs_ctx;

	prctl(PR_SET_TIMERSLACK, 1UL);
	pthread_mutex_lock(&sim_lock);
	for (;;) {
		while (!s->head)
			pthread_cond_wait(&s->has_work, &sim_lock);
		it = s->head;
		s->head = it->next;
		if (!s->head)
			s->tail = NULL;
		if (it->kind == SIM_EXIT)
			break;
		pthread_mutex_unlock(&sim_lock);

		execute(it);
		obs = __atomic_load_n(&observer, __ATOMIC_ACQUIRE);
		obs_ctx = observer_ctx;
		/* Report before completing, so a sync that returns has its records delivered. */
		if (it->kind < SIM_WAIT_STREAM) {
			if (sim_cfg.verbose)
				log_item(&it->rec);
			if (obs)
				obs(&it->rec, obs_ctx);
		}

		pthread_mutex_lock(&sim_lock);
		if (it->kind == TPSIM_EVENT_RECORD && it->event_gen > it->event->done_gen) {
			it->event->done_gen = it->event_gen;
			it->event->time_ns = it->rec.end_ns;
		}
		if (it->event)
			sim_event_put(it->event);
		s->completed = it->seq;
		pthread_cond_broadcast(&sim_progress);
		free(it);
	}
	/* Destroyed and drained: leave the list; the struct stays so stale handles stay invalid. */
	s->completed = it->seq;
	free(it);
	s->magic = STREAM_DEAD;
	for (struct sim_stream **pp = &live_streams; *pp; pp = &(*pp)->next_live) {
		if (*pp == s) {
			*pp = s->next_live;
			break;
		}
	}
	pthread_cond_broadcast(&sim_progress);
	pthread_mutex_unlock(&sim_lock);
	return NULL;
}

/* Caller holds sim_lock. */
static struct sim_stream *stream_new_locked(int device, unsigned int flags, int priority,
					    bool legacy, bool per_thread)
{
	struct sim_stream *s = calloc(1, sizeof(*s));
	pthread_attr_t attr;
	pthread_t worker;
	sigset_t all, old;
	char name[16];
	int err;

	if (!s)
		return NULL;
	s->magic = STREAM_MAGIC;
	s->id = legacy ? 0 : next_stream_id++;
	s->device = device;
	s->flags = flags;
	s->priority = priority;
	s->legacy = legacy;
	s->per_thread = per_thread;
	pthread_cond_init(&s->has_work, NULL);

	/* Workers take no signals: the application's handlers must run on its own threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	err = pthread_create(&worker, &attr, worker_main, s);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		pthread_cond_destroy(&s->has_work);
		free(s);
		return NULL;
	}
	snprintf(name, sizeof(name), "tpsim-d%ds%" PRIu64, device, s->id);
	pthread_setname_np(worker, name);
	s->next_live = live_streams;
	live_streams = s;
	return s;
}

struct sim_stream *sim_stream_new(int device, unsigned int flags, int priority)
{
	struct sim_stream *s;

	pthread_mutex_lock(&sim_lock);
	s = stream_new_locked(device, flags, priority, false, false);
	pthread_mutex_unlock(&sim_lock);
	return s;
}

cudaError_t sim_stream_resolve(cudaStream_t handle, bool ptsz, struct sim_stream **out)
{
	struct sim_stream *s = (struct sim_stream *)handle;
	int dev = current_device;

	if (!handle && ptsz)
		handle = cudaStreamPerThread;
	if (!handle || handle == cudaStreamLegacy) {
		pthread_mutex_lock(&sim_lock);
		if (!legacy_streams[dev])
			legacy_streams[dev] = stream_new_locked(dev, 0, 0, true, false);
		s = legacy_streams[dev];
		pthread_mutex_unlock(&sim_lock);
	} else if (handle == cudaStreamPerThread) {
		if (!per_thread_streams[dev]) {
			pthread_mutex_lock(&sim_lock);
			per_thread_streams[dev] = stream_new_locked(dev, 0, 0, false, true);
			pthread_mutex_unlock(&sim_lock);
		}
		s = per_thread_streams[dev];
	} else if (s->magic != STREAM_MAGIC || s->destroyed) {
		return cudaErrorInvalidResourceHandle;
	}
	if (!s)
		return cudaErrorMemoryAllocation;
	*out = s;
	return cudaSuccess;
}

cudaStream_t sim_stream_handle(struct sim_stream *s)
{
	return s->legacy ? NULL : (cudaStream_t)s;
}

int64_t tpsim_stream_id(cudaStream_t handle)
{
	struct sim_stream *s;

	sim_init();
	if (sim_stream_resolve(handle, false, &s))
		return -1;
	return (int64_t)s->id;
}

static void append_locked(struct sim_stream *s, struct sim_item *it)
{
	it->rec.api_end_ns = sim_now_ns();
	it->seq = ++s->submitted;
	if (s->tail)
		s->tail->next = it;
	else
		s->head = it;
	s->tail = it;
	pthread_cond_signal(&s->has_work);
}

static void add_wait_locked(struct sim_stream *s, struct sim_stream *on)
{
	struct sim_item *w;

	if (on == s || on->destroyed || on->completed >= on->submitted)
		return;
	w = sim_item_new(SIM_WAIT_STREAM);
	w->wait_stream = on;
	w->wait_seq = on->submitted;
	append_locked(s, w);
}

/*
 * The legacy default stream waits for all prior work of the device's blocking streams, and
 * blocking streams wait for the legacy stream's prior work (cudaStreamNonBlocking opts out).
 */
uint64_t sim_submit(struct sim_stream *s, struct sim_item *it)
{
	struct sim_stream *o;
	uint64_t seq;

	pthread_mutex_lock(&sim_lock);
	it->rec.stream_id = s->id;
	it->rec.stream = sim_stream_handle(s);
	it->rec.device = s->device;
	if (s->legacy) {
		for (o = live_streams; o; o = o->next_live)
			if (o->device == s->device && !(o->flags & cudaStreamNonBlocking))
				add_wait_locked(s, o);
	} else if (!(s->flags & cudaStreamNonBlocking) && legacy_streams[s->device]) {
		add_wait_locked(s, legacy_streams[s->device]);
	}
	append_locked(s, it);
	seq = it->seq;
	pthread_mutex_unlock(&sim_lock);
	return seq;
}

void sim_stream_wait_seq(struct sim_stream *s, uint64_t seq)
{
	pthread_mutex_lock(&sim_lock);
	while (s->completed < seq)
		pthread_cond_wait(&sim_progress, &sim_lock);
	pthread_mutex_unlock(&sim_lock);
}

void sim_stream_sync(struct sim_stream *s)
{
	uint64_t target;

	pthread_mutex_lock(&sim_lock);
	target = s->submitted;
	while (s->completed < target)
		pthread_cond_wait(&sim_progress, &sim_lock);
	pthread_mutex_unlock(&sim_lock);
}

bool sim_stream_idle(struct sim_stream *s)
{
	bool idle;

	pthread_mutex_lock(&sim_lock);
	idle = s->completed >= s->submitted;
	pthread_mutex_unlock(&sim_lock);
	return idle;
}

/* Waits for everything submitted to the device's streams before the call. */
void sim_device_sync(int device)
{
	struct { struct sim_stream *s; uint64_t target; } *snap = NULL;
	struct sim_stream *s;
	size_t n = 0, i;

	pthread_mutex_lock(&sim_lock);
	for (s = live_streams; s; s = s->next_live) {
		if (s->device != device || s->completed >= s->submitted)
			continue;
		snap = realloc(snap, (n + 1) * sizeof(*snap));
		snap[n].s = s;
		snap[n].target = s->submitted;
		n++;
	}
	/* Streams are never freed, so a snapshot entry survives its stream's destruction. */
	for (i = 0; i < n; i++)
		while (snap[i].s->completed < snap[i].target)
			pthread_cond_wait(&sim_progress, &sim_lock);
	pthread_mutex_unlock(&sim_lock);
	free(snap);
}

void sim_stream_destroy(struct sim_stream *s)
{
	pthread_mutex_lock(&sim_lock);
	s->destroyed = true;
	append_locked(s, sim_item_new(SIM_EXIT));
	pthread_mutex_unlock(&sim_lock);
}

/* ---- sim-only exported API -------------------------------------------------------------- */

void tpsim_set_observer(tpsim_observer_fn fn, void *ctx)
{
	observer_ctx = ctx;
	__atomic_store_n(&observer, fn, __ATOMIC_RELEASE);
}

uint64_t tpsim_now_ns(void)
{
	return sim_now_ns();
}

int tpsim_enqueue(cudaStream_t stream, void (*fn)(void *arg), void *arg)
{
	struct sim_stream *s;
	struct sim_item *it;
	cudaError_t err;

	sim_init();
	if (!fn)
		return cudaErrorInvalidValue;
	err = sim_stream_resolve(stream, false, &s);
	if (err)
		return err;
	it = sim_item_new(TPSIM_HOST_FN);
	it->fn = fn;
	it->arg = arg;
	it->rec.correlation = sim_next_correlation();
	sim_submit(s, it);
	return cudaSuccess;
}

int tpsim_enqueue_kernel(cudaStream_t stream, const char *name, dim3 grid, dim3 block,
			 void (*fn)(void *arg), void *arg)
{
	struct sim_stream *s;
	struct sim_item *it;
	cudaError_t err;

	sim_init();
	if (!fn || !name)
		return cudaErrorInvalidValue;
	err = sim_stream_resolve(stream, false, &s);
	if (err)
		return err;
	it = sim_item_new(TPSIM_KERNEL);
	it->fn = fn;
	it->arg = arg;
	it->rec.name = name;
	it->rec.grid[0] = grid.x;
	it->rec.grid[1] = grid.y;
	it->rec.grid[2] = grid.z;
	it->rec.block[0] = block.x;
	it->rec.block[1] = block.y;
	it->rec.block[2] = block.z;
	it->rec.correlation = sim_next_correlation();
	sim_submit(s, it);
	return cudaSuccess;
}
