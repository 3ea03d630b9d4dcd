// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Engine of the simulated CUDA driver (libcuda.so.1): a GPU is a set of streams, each a FIFO drained in order
 * by its own worker thread, on the device's own clock (see execute()): a kernel lasts its
 * duration, a copy memcpy's and lasts bytes/bandwidth, an event record stamps the time the
 * stream's earlier work ended, a wait blocks the worker. Enqueueing
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
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "sim.h"

#define STREAM_MAGIC 0x7470736d73747265ULL	/* "tpsmstre" */
#define STREAM_DEAD  0x7470736d64656164ULL
#define EVENT_MAGIC  0x7470736d6576656eULL
#define KERNEL_MAGIC 0x7470736d6b65726eULL
#define GRAPH_MAGIC  0x7470736d67726170ULL

struct sim_config sim_cfg;
pthread_mutex_t sim_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t sim_progress = PTHREAD_COND_INITIALIZER;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static struct sim_stream *live_streams;		/* includes destroyed ones until drained */
static struct sim_stream *legacy_streams[SIM_MAX_CONTEXTS];	/* per context */
static uint64_t next_stream_id = 1;
static uint32_t next_graph_id = 1;
static uint64_t correlation_counter;
static tpsim_observer_fn observer;
static void *observer_ctx;
static tpsim_api_observer_fn api_observer;
static void *api_observer_ctx;
static tpsim_issue_fn issue_observer;
static void *issue_observer_ctx;

#define API_DEPTH 16
static __thread struct tpsim_api_call api_stack[API_DEPTH];
static __thread int api_depth;
static __thread uint64_t submitted_ns;	/* this thread's last submission in its current call */

static __thread int current_device;
static __thread uint32_t current_context;	/* 0: the current device's primary context */
static __thread struct sim_stream *per_thread_streams[SIM_MAX_CONTEXTS];	/* per context */

uint64_t sim_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* Cached per thread: API calls are microseconds apart, a syscall each would be a third. */
uint32_t sim_gettid(void)
{
	static __thread uint32_t tid;

	if (!tid)
		tid = (uint32_t)syscall(SYS_gettid);
	return tid;
}

int sim_current_device(void)
{
	return current_device;
}

void sim_set_current_device(int device)
{
	current_device = device;
	current_context = 0;
}

uint32_t sim_current_context(void)
{
	return current_context ? current_context : (uint32_t)current_device + 1;
}

void sim_set_current_context(int device, uint32_t context)
{
	current_device = device;
	current_context = context;
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

static int handles_init(void);

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
	if (handles_init()) {
		fprintf(stderr, "tpsim: cannot reserve handle space\n");
		abort();
	}
}

void sim_init(void)
{
	pthread_once(&init_once, do_init);
}

/* ---- opaque handles ------------------------------------------------------------------ */

/* 1M handles per type, 16 bytes apart, in address space that is reserved and never readable. */
#define HANDLE_SLOTS (1u << 20)
#define HANDLE_STRIDE 16

static struct {
	uintptr_t base;
	void **objs;
	uint32_t next;
} handles[H_NR];
static pthread_mutex_t handle_lock = PTHREAD_MUTEX_INITIALIZER;

static int handles_init(void)
{
	size_t span = (size_t)HANDLE_SLOTS * HANDLE_STRIDE;
	char *area = mmap(NULL, span * H_NR, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			  -1, 0);

	if (area == MAP_FAILED)
		return -errno;
	for (int t = 0; t < H_NR; t++) {
		handles[t].base = (uintptr_t)area + t * span;
		handles[t].objs = calloc(HANDLE_SLOTS, sizeof(void *));
		handles[t].next = 1;	/* slot 0 unused: a handle is never the region's start */
		if (!handles[t].objs)
			return -ENOMEM;
	}
	return 0;
}

void *sim_handle_new(enum sim_htype type, void *obj)
{
	uint32_t slot;

	pthread_mutex_lock(&handle_lock);
	slot = handles[type].next < HANDLE_SLOTS ? handles[type].next++ : 0;
	if (slot)
		__atomic_store_n(&handles[type].objs[slot], obj, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&handle_lock);
	if (!slot) {
		fprintf(stderr, "tpsim: out of handles of type %d\n", type);
		abort();
	}
	return (void *)(handles[type].base + (uintptr_t)slot * HANDLE_STRIDE);
}

static uint32_t handle_slot(enum sim_htype type, const void *handle)
{
	uintptr_t h = (uintptr_t)handle, base = handles[type].base;

	if (!base || h <= base || h >= base + (uintptr_t)HANDLE_SLOTS * HANDLE_STRIDE ||
	    (h - base) % HANDLE_STRIDE)
		return 0;
	return (uint32_t)((h - base) / HANDLE_STRIDE);
}

void *sim_handle_get(enum sim_htype type, const void *handle)
{
	uint32_t slot = handle_slot(type, handle);

	return slot ? __atomic_load_n(&handles[type].objs[slot], __ATOMIC_ACQUIRE) : NULL;
}

/* Slots are never reused: a stale handle stays invalid. */
void sim_handle_drop(enum sim_htype type, const void *handle)
{
	uint32_t slot = handle_slot(type, handle);

	if (slot)
		__atomic_store_n(&handles[type].objs[slot], NULL, __ATOMIC_RELEASE);
}

/* ---- API calls ------------------------------------------------------------------------- */

void sim_api_enter(int domain, uint32_t cbid)
{
	struct tpsim_api_call *c;
	tpsim_api_observer_fn obs;

	if (api_depth >= API_DEPTH) {
		api_depth++;	/* deeper than any real nesting: not reported */
		return;
	}
	if (!api_depth)
		submitted_ns = 0;	/* work enqueued outside any call (NCCL's) */
	c = &api_stack[api_depth];
	c->domain = domain;
	c->cbid = cbid;
	c->correlation = sim_next_correlation();
	c->tid = sim_gettid();
	c->depth = api_depth++;
	obs = __atomic_load_n(&api_observer, __ATOMIC_ACQUIRE);
	if (obs)
		obs(c, 0, api_observer_ctx);
}

/*
 * A launch does not return the moment its work is queued: the driver still has bookkeeping to
 * do (TPSIM_LAUNCH_RETURN_NS, default 4000, after the submission), while an idle device starts
 * the work LAUNCH_LATENCY_NS (2000) after it: so a kernel can start before its launch call
 * returns, as on a real GPU. The outermost call of the thread waits it out before it returns
 * (and before CUPTI stamps its end).
 */

static void launch_return_tail(void)
{
	static long long tail_ns = -1;
	uint64_t until;

	if (!submitted_ns)
		return;
	if (tail_ns < 0)
		tail_ns = (long long)env_ull("TPSIM_LAUNCH_RETURN_NS", 4000);
	until = submitted_ns + (uint64_t)tail_ns;
	submitted_ns = 0;
	while (sim_now_ns() < until)
		;
}

void sim_api_exit(void)
{
	tpsim_api_observer_fn obs;

	if (api_depth-- > API_DEPTH)
		return;
	if (!api_depth)
		launch_return_tail();
	obs = __atomic_load_n(&api_observer, __ATOMIC_ACQUIRE);
	if (obs)
		obs(&api_stack[api_depth], 1, api_observer_ctx);
}

uint64_t sim_work_correlation(void)
{
	return api_depth ? api_stack[0].correlation : sim_next_correlation();
}

/* ---- modules and kernels --------------------------------------------------------------- */

/* Entry names of a PTX image: ".entry NAME(" (after .visible/.weak, if any). A cubin or
 * fatbin is not understood: CUDA_ERROR_INVALID_IMAGE, never a kernel made up. */
struct sim_module *sim_module_load(const void *image, bool library, CUresult *err)
{
	const char *p = image, *q;
	struct sim_module *m;

	*err = CUDA_ERROR_INVALID_IMAGE;
	if (!p || !strstr(p, ".version") || !strstr(p, ".target"))
		return NULL;
	m = calloc(1, sizeof(*m));
	if (!m) {
		*err = CUDA_ERROR_OUT_OF_MEMORY;
		return NULL;
	}
	m->library = library;
	while ((q = strstr(p, ".entry")) != NULL) {
		struct sim_kernel *k;
		const char *name = q + 6, *end;

		p = name;
		if (*name != ' ' && *name != '\t')
			continue;
		while (*name == ' ' || *name == '\t')
			name++;
		for (end = name; *end && *end != '(' && *end != ' ' && *end != '\n' && *end != '\t'; end++)
			;
		if (end == name)
			continue;
		k = calloc(1, sizeof(*k));
		if (!k) {
			sim_module_unload(m);
			*err = CUDA_ERROR_OUT_OF_MEMORY;
			return NULL;
		}
		k->magic = KERNEL_MAGIC;
		k->name = strndup(name, end - name);
		k->us_override = -1;
		k->module = m;
		k->kernel_handle = sim_handle_new(H_KERNEL, k);
		k->function_handle = sim_handle_new(H_FUNCTION, k);
		k->next = m->kernels;
		m->kernels = k;
		p = end;
	}
	m->handle = sim_handle_new(library ? H_LIBRARY : H_MODULE, m);
	*err = CUDA_SUCCESS;
	return m;
}

/* Kernel structs stay (queued items point at their names); their handles die. */
void sim_module_unload(struct sim_module *m)
{
	for (struct sim_kernel *k = m->kernels; k; k = k->next) {
		if (k->kernel_handle)
			sim_handle_drop(H_KERNEL, k->kernel_handle);
		if (k->function_handle)
			sim_handle_drop(H_FUNCTION, k->function_handle);
	}
	if (m->handle)
		sim_handle_drop(m->library ? H_LIBRARY : H_MODULE, m->handle);
}

struct sim_kernel *sim_module_find(struct sim_module *m, const char *name)
{
	for (struct sim_kernel *k = m->kernels; k; k = k->next)
		if (!strcmp(k->name, name))
			return k;
	return NULL;
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

/* ---- graphs ------------------------------------------------------------------------------ */

struct sim_graph *sim_graph_new(bool exec)
{
	struct sim_graph *g = calloc(1, sizeof(*g));

	if (!g)
		return NULL;
	g->magic = GRAPH_MAGIC;
	g->exec = exec;
	if (!exec)
		g->graph_id = __atomic_fetch_add(&next_graph_id, 1, __ATOMIC_RELAXED);
	g->handle = sim_handle_new(exec ? H_GRAPH_EXEC : H_GRAPH, g);
	return g;
}

void sim_graph_free(struct sim_graph *g)
{
	sim_handle_drop(g->exec ? H_GRAPH_EXEC : H_GRAPH, g->handle);
	for (size_t i = 0; i < g->nr_nodes; i++)
		free(g->nodes[i]);
	free(g->nodes);
	g->magic = 0;
	free(g);
}

struct sim_item *sim_item_clone(const struct sim_item *it)
{
	struct sim_item *c = malloc(sizeof(*c));

	if (!c) {
		fprintf(stderr, "tpsim: out of memory\n");
		abort();
	}
	*c = *it;
	c->next = NULL;
	c->seq = 0;
	return c;
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
	ev->handle = sim_handle_new(H_EVENT, ev);
	return ev;
}

struct sim_event *sim_event_get(cudaEvent_t handle)
{
	struct sim_event *ev = sim_handle_get(H_EVENT, handle);

	if (!ev || ev->magic != EVENT_MAGIC || ev->destroyed)
		return NULL;
	return ev;
}

void sim_event_put(struct sim_event *ev)
{
	if (--ev->refs == 0) {
		sim_handle_drop(H_EVENT, ev->handle);
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
	it->rec.correlation = sim_work_correlation();
	it->height = 1;
	it->elem = 1;
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
		snprintf(what, sizeof(what), " dir=%s bytes=%zu host=%s", copy_kind_name(r->copy_kind),
			 r->bytes, r->host_pageable ? "pageable" : "pinned");
		break;
	case TPSIM_MEMSET:
		snprintf(what, sizeof(what), " bytes=%zu", r->bytes);
		break;
	default:
		what[0] = '\0';
	}
	fprintf(stderr, "tpsim: %s%s stream=%" PRIu64 " dev=%d corr=%" PRIu64 " tid=%u start=%" PRIu64
		" end=%" PRIu64 " dur_us=%.1f ctx=%u\n", kind_name(r->kind), what, r->stream_id,
		r->device, r->correlation, r->host_tid, r->start_ns, r->end_ns,
		(r->end_ns - r->start_ns) / 1000.0, r->context);
}

/* The device's own clock. A GPU runs its queue whatever the host's CPUs do, so the times an
 * item reports are the device's: it starts when its stream is free and its launch has
 * reached the device (LAUNCH_LATENCY_NS after the API call returned, as a real GPU's launch
 * takes a few microseconds), and a kernel or copy ends its modelled duration later. The
 * worker sleeps until that end before it completes the item, so a sync never returns before
 * the work it waits for has ended; a worker that the host scheduler runs late completes late
 * but reports the same times (it used to stretch the item instead, and a loaded test host
 * read as a slow GPU). Work whose time is real stays real: a kernel body
 * (tpsim_set_function_body: NCCL's collectives, which wait for their peers; its start is
 * the device's, when the stream was free), a host function,
 * and the waits for other streams and events. */
#define LAUNCH_LATENCY_NS 2000ULL

static uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/* Runs one item on the worker, sim_lock not held. free_ns: when the stream's previous item
 * ended on the device clock. */
static void execute(struct sim_item *it, uint64_t free_ns)
{
	uint64_t ready = max_u64(it->rec.api_end_ns + LAUNCH_LATENCY_NS, free_ns);
	uint64_t start, real;
	size_t row;

	switch (it->kind) {
	case TPSIM_KERNEL:
	case TPSIM_GRAPH:
		if (it->fn)
			break;	/* a body: real time, as a host function */
		it->rec.start_ns = ready;
		it->rec.end_ns = ready + it->dur_ns;
		sleep_until(it->rec.end_ns);
		return;
	case TPSIM_MEMCPY:
		sleep_until(ready);
		for (row = 0; row < it->height; row++)
			memmove((char *)it->dst + row * it->dpitch,
				(const char *)it->src + row * it->spitch, it->width);
		it->rec.start_ns = ready;
		it->rec.end_ns = ready + (uint64_t)(it->rec.bytes / sim_cfg.copy_gbps *
						    (it->rec.host_pageable ? 4 : 1));
		sleep_until(it->rec.end_ns);
		return;
	case TPSIM_MEMSET:
		sleep_until(ready);
		real = sim_now_ns();
		for (row = 0; row < it->height; row++) {
			char *d = (char *)it->dst + row * it->dpitch;

			if (it->elem == 1) {
				memset(d, (int)it->value, it->width);
				continue;
			}
			for (size_t i = 0; i + it->elem <= it->width; i += it->elem)
				memcpy(d + i, &it->value, it->elem);	/* little-endian low bytes */
		}
		it->rec.start_ns = ready;
		it->rec.end_ns = ready + (sim_now_ns() - real);
		sleep_until(it->rec.end_ns);
		return;
	case TPSIM_EVENT_RECORD:
	case TPSIM_FREE:
		/* the event's time: when all earlier work of the stream ended */
		sleep_until(ready);
		if (it->kind == TPSIM_FREE)
			free(it->dst);
		it->rec.start_ns = it->rec.end_ns = ready;
		return;
	case TPSIM_WAIT_EVENT:
		it->rec.start_ns = ready;
		pthread_mutex_lock(&sim_lock);
		while (it->event->done_gen < it->event_gen)
			pthread_cond_wait(&sim_progress, &sim_lock);
		it->rec.end_ns = max_u64(ready, it->event->time_ns);
		pthread_mutex_unlock(&sim_lock);
		return;
	case SIM_WAIT_STREAM:
		it->rec.start_ns = ready;
		pthread_mutex_lock(&sim_lock);
		while (it->wait_stream->completed < it->wait_seq)
			pthread_cond_wait(&sim_progress, &sim_lock);
		it->rec.end_ns = max_u64(ready, it->wait_stream->free_ns);
		pthread_mutex_unlock(&sim_lock);
		return;
	case TPSIM_HOST_FN:
		break;
	default:
		return;
	}
	/* a kernel body or a host function: it runs when the stream reaches it, for as long
	 * as it takes; a kernel started on the device when its stream was free, however late
	 * the host runs the worker that plays it */
	start = max_u64(ready, sim_now_ns());
	sleep_until(start);
	it->rec.start_ns = it->kind == TPSIM_KERNEL ? ready : start;
	it->fn(it->arg);
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

		execute(it, s->free_ns);
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
		s->free_ns = it->rec.end_ns;
		pthread_cond_broadcast(&sim_progress);
		free(it);
	}
	/* Destroyed and drained: leave the list; the struct stays so stale handles stay invalid. */
	s->completed = it->seq;
	free(it);
	s->magic = STREAM_DEAD;
	sim_handle_drop(H_STREAM, s->handle);
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
static struct sim_stream *stream_new_locked(int device, uint32_t context, unsigned int flags,
					    int priority, bool legacy, bool per_thread)
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
	s->context = context;
	s->flags = flags;
	s->priority = priority;
	s->legacy = legacy;
	s->per_thread = per_thread;
	s->handle = legacy ? NULL : sim_handle_new(H_STREAM, s);
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

struct sim_stream *sim_stream_new(unsigned int flags, int priority)
{
	struct sim_stream *s;

	pthread_mutex_lock(&sim_lock);
	s = stream_new_locked(current_device, sim_current_context(), flags, priority, false,
			      false);
	pthread_mutex_unlock(&sim_lock);
	return s;
}

cudaError_t sim_stream_resolve(cudaStream_t handle, bool ptsz, struct sim_stream **out)
{
	struct sim_stream *s = NULL;
	int dev = current_device;
	uint32_t ctx = sim_current_context();

	if (ctx >= SIM_MAX_CONTEXTS)
		return cudaErrorInvalidResourceHandle;
	if (!handle && ptsz)
		handle = cudaStreamPerThread;
	/* the default streams are the current context's */
	if (!handle || handle == cudaStreamLegacy) {
		pthread_mutex_lock(&sim_lock);
		if (!legacy_streams[ctx])
			legacy_streams[ctx] = stream_new_locked(dev, ctx, 0, 0, true, false);
		s = legacy_streams[ctx];
		pthread_mutex_unlock(&sim_lock);
	} else if (handle == cudaStreamPerThread) {
		if (!per_thread_streams[ctx]) {
			pthread_mutex_lock(&sim_lock);
			per_thread_streams[ctx] = stream_new_locked(dev, ctx, 0, 0, false, true);
			pthread_mutex_unlock(&sim_lock);
		}
		s = per_thread_streams[ctx];
	} else {
		s = sim_handle_get(H_STREAM, handle);
		if (!s || s->magic != STREAM_MAGIC || s->destroyed)
			return cudaErrorInvalidResourceHandle;
	}
	if (!s)
		return cudaErrorMemoryAllocation;
	*out = s;
	return cudaSuccess;
}

cudaStream_t sim_stream_handle(struct sim_stream *s)
{
	return s->legacy ? NULL : (cudaStream_t)s->handle;
}

static int64_t ops_stream_id(cudaStream_t handle)
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
	submitted_ns = it->rec.api_end_ns;
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

	tpsim_issue_fn issue = __atomic_load_n(&issue_observer, __ATOMIC_ACQUIRE);

	it->rec.stream_id = s->id;	/* a stream's id, device and context never change */
	it->rec.stream = sim_stream_handle(s);
	it->rec.device = s->device;
	it->rec.context = s->context;
	/* the item is not queued yet: only this thread sees it */
	if (issue && it->kind < SIM_WAIT_STREAM)
		issue(&it->rec, issue_observer_ctx);
	pthread_mutex_lock(&sim_lock);
	/* the legacy stream synchronises with its own context's blocking streams */
	if (s->legacy) {
		for (o = live_streams; o; o = o->next_live)
			if (o->context == s->context && !(o->flags & cudaStreamNonBlocking))
				add_wait_locked(s, o);
	} else if (!(s->flags & cudaStreamNonBlocking) && legacy_streams[s->context]) {
		add_wait_locked(s, legacy_streams[s->context]);
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

/* Waits for everything submitted before the call to the streams of a device (context 0) or
 * of one context. */
static void sync_streams(int device, uint32_t context)
{
	struct { struct sim_stream *s; uint64_t target; } *snap = NULL;
	struct sim_stream *s;
	size_t n = 0, i;

	pthread_mutex_lock(&sim_lock);
	for (s = live_streams; s; s = s->next_live) {
		if ((context ? s->context != context : s->device != device) ||
		    s->completed >= s->submitted)
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

void sim_device_sync(int device)
{
	sync_streams(device, 0);
}

void sim_context_sync(uint32_t context)
{
	sync_streams(-1, context);
}

void sim_stream_destroy(struct sim_stream *s)
{
	pthread_mutex_lock(&sim_lock);
	s->destroyed = true;
	append_locked(s, sim_item_new(SIM_EXIT));
	pthread_mutex_unlock(&sim_lock);
}

/* While a stream captures, its work becomes graph nodes (replayed by cuGraphLaunch). */
uint64_t sim_submit_or_capture(struct sim_stream *s, struct sim_item *it)
{
	struct sim_graph *g;

	pthread_mutex_lock(&sim_lock);
	g = s->capture;
	if (g) {
		struct sim_item **n = realloc(g->nodes, (g->nr_nodes + 1) * sizeof(*n));

		if (!n) {
			pthread_mutex_unlock(&sim_lock);
			fprintf(stderr, "tpsim: out of memory\n");
			abort();
		}
		g->nodes = n;
		g->nodes[g->nr_nodes++] = it;
		pthread_mutex_unlock(&sim_lock);
		return 0;
	}
	pthread_mutex_unlock(&sim_lock);
	return sim_submit(s, it);
}

/* ---- private interface (tpsim_driver.h), through cuGetExportTable ---------------------- */

static void ops_set_observer(tpsim_observer_fn fn, void *ctx)
{
	observer_ctx = ctx;
	__atomic_store_n(&observer, fn, __ATOMIC_RELEASE);
}

static void ops_set_issue_observer(tpsim_issue_fn fn, void *ctx)
{
	issue_observer_ctx = ctx;
	__atomic_store_n(&issue_observer, fn, __ATOMIC_RELEASE);
}

static void ops_set_api_observer(tpsim_api_observer_fn fn, void *ctx)
{
	api_observer_ctx = ctx;
	__atomic_store_n(&api_observer, fn, __ATOMIC_RELEASE);
}

static uint64_t ops_now_ns(void)
{
	return sim_now_ns();
}

/* Not an API call: work NCCL's sim puts on a stream gets a fresh correlation id, unless it
 * runs inside one (then the outermost call's, as real CUPTI would attribute it). */
static int ops_enqueue(cudaStream_t stream, void (*fn)(void *arg), void *arg)
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
	sim_submit(s, it);
	return cudaSuccess;
}

static int ops_enqueue_kernel(cudaStream_t stream, const char *name, dim3 grid, dim3 block,
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
	sim_submit(s, it);
	return cudaSuccess;
}

static int ops_set_kernel_us(CUfunction f, unsigned us)
{
	struct sim_kernel *k;

	sim_init();
	k = sim_handle_get(H_FUNCTION, f);
	if (!k)
		k = sim_handle_get(H_KERNEL, f);
	if (!k)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&sim_lock);
	k->us_override = us;
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

static int ops_set_function_body(CUfunction f, void (*fn)(void *arg))
{
	struct sim_kernel *k;

	sim_init();
	k = sim_handle_get(H_FUNCTION, f);
	if (!k)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&sim_lock);
	k->body = fn;
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

static int ops_device_count(void)
{
	sim_init();
	return sim_cfg.devices;
}

size_t sim_device_bytes_live(void);
int sim_ctx_current_device(void);

const struct tpsim_driver_ops sim_driver_ops = {
	.size = sizeof(struct tpsim_driver_ops),
	.set_observer = ops_set_observer,
	.set_api_observer = ops_set_api_observer,
	.api_enter = sim_api_enter,
	.api_exit = sim_api_exit,
	.enqueue = ops_enqueue,
	.enqueue_kernel = ops_enqueue_kernel,
	.set_kernel_us = ops_set_kernel_us,
	.stream_id = ops_stream_id,
	.now_ns = ops_now_ns,
	.device_count = ops_device_count,
	.device_bytes_live = sim_device_bytes_live,
	.set_function_body = ops_set_function_body,
	.current_device = sim_ctx_current_device,
	.set_issue_observer = ops_set_issue_observer,
};
