/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Internals of the simulated driver libcuda.so.1: its engine (engine.c: streams, workers,
 * events, kernels, modules, graphs, opaque handles, the API-call stack) and its cu* entry
 * points (driver.c). Nothing here is exported: the version script (libcuda.map) keeps only cu*.
 * Engine types are the runtime's (cudaStream_t is struct CUstream_st *, as CUstream).
 */
#ifndef TPSIM_SIM_H
#define TPSIM_SIM_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <cuda.h>
#include "tpsim.h"
#include "tpsim_driver.h"

#define SIM_MAX_DEVICES 16
/* context ids are 1..SIM_MAX_CONTEXTS - 1: the devices' primary contexts first (id = device
 * + 1), then cuCtxCreate's */
#define SIM_MAX_CONTEXTS 64

/* Internal item kinds, never reported. */
enum {
	SIM_WAIT_STREAM = 100,	/* legacy-stream implicit synchronisation */
	SIM_EXIT = 101,		/* last item of a destroyed stream */
};

struct sim_event;
struct sim_stream;

struct sim_item {
	struct sim_item *next;
	int kind;			/* enum tpsim_kind or SIM_* */
	uint64_t seq;			/* position in its stream, from 1 */
	uint64_t dur_ns;		/* kernel, graph */
	struct tpsim_record rec;
	void *dst;
	const void *src;
	size_t dpitch, spitch, width, height;	/* memcpy (1D: height 1, width = bytes) */
	uint32_t value;			/* memset: element value */
	unsigned elem;			/* memset: element size (1, 2, 4) */
	struct sim_event *event;	/* record / wait; holds a reference */
	uint64_t event_gen;
	struct sim_stream *wait_stream;
	uint64_t wait_seq;
	void (*fn)(void *arg);		/* host fn, or body of tpsim_enqueue_kernel */
	void *arg;
};

struct sim_graph;

struct sim_stream {
	uint64_t magic;
	void *handle;			/* opaque CUstream (sim_handle_new) */
	uint64_t id;
	int device;
	uint32_t context;		/* its context's id (a stream belongs to one context) */
	unsigned int flags;		/* cudaStreamNonBlocking */
	int priority;
	bool legacy, per_thread, destroyed;
	struct sim_item *head, *tail;
	uint64_t submitted, completed;	/* seq of last enqueued / finished item */
	uint64_t free_ns;		/* device clock: when the last finished item ended */
	pthread_cond_t has_work;
	struct sim_stream *next_live;
	struct sim_graph *capture;	/* cuStreamBeginCapture: work goes here, not to the FIFO */
	uint32_t capture_mode;
};

struct sim_event {
	uint64_t magic;
	void *handle;			/* opaque CUevent */
	unsigned int flags;
	int refs;			/* the handle + each pending record/wait item */
	bool destroyed;
	uint64_t record_gen;		/* bumped by every cudaEventRecord */
	uint64_t done_gen;		/* gen of the last record a worker completed */
	uint64_t time_ns;		/* completion time of done_gen */
};

/* Simulated device code: one per entry of a loaded module or library. CUkernel and CUfunction
 * are two opaque handles of it (the real driver's are context-independent and per-context). */
struct sim_kernel {
	uint64_t magic;
	char *name;
	long long us_override;		/* tpsim_set_kernel_us, or -1 */
	void (*body)(void *arg);	/* tpsim_set_function_body: runs as the kernel, for as long
					 * as it takes, given the launch's first parameter */
	void *kernel_handle, *function_handle;
	struct sim_module *module;
	struct sim_kernel *next;
};

/* cuModuleLoadData / cuLibraryLoadData: the entries (.entry) of a PTX image. */
struct sim_module {
	void *handle;			/* CUmodule or CUlibrary */
	bool library;
	struct sim_kernel *kernels;
};

/* A captured graph: the work items captured from a stream, replayed by every launch. */
struct sim_graph {
	uint64_t magic;
	void *handle;			/* CUgraph or CUgraphExec */
	bool exec;
	uint32_t graph_id;		/* CUPTI's graphId: the graph's id; an exec keeps its graph's */
	struct sim_item **nodes;
	size_t nr_nodes;
	int capture_status;		/* a capture that failed (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) */
};

struct sim_config {
	bool verbose;
	uint64_t kernel_ns;
	uint64_t spin_ns;		/* most a worker yield-spins per item */
	double copy_gbps;
	int devices;
	struct { char *pattern; uint64_t ns; } *times;	/* TPSIM_KERNEL_TIMES */
	int n_times;
};

extern struct sim_config sim_cfg;
extern pthread_mutex_t sim_lock;	/* guards every stream, event, kernel and the lists */
extern pthread_cond_t sim_progress;	/* broadcast when any item or event completes */

void sim_init(void);
uint64_t sim_now_ns(void);
uint32_t sim_gettid(void);
int sim_current_device(void);
void sim_set_current_device(int device);
/* The calling thread's current context id: the one cuCtxSetCurrent/cuCtxCreate made current,
 * else the current device's primary context (device + 1). */
uint32_t sim_current_context(void);
void sim_set_current_context(int device, uint32_t context);

/* Streams. sim_stream_resolve maps 0 / CU_STREAM_LEGACY / CU_STREAM_PER_THREAD / a handle. */
cudaError_t sim_stream_resolve(cudaStream_t handle, bool ptsz, struct sim_stream **out);
/* A stream of the calling thread's current context (and its device). */
struct sim_stream *sim_stream_new(unsigned int flags, int priority);
void sim_stream_destroy(struct sim_stream *s);
cudaStream_t sim_stream_handle(struct sim_stream *s);
struct sim_item *sim_item_new(int kind);
/* Append to s (taking sim_lock), adding legacy-stream implicit waits; returns the item's seq. */
uint64_t sim_submit(struct sim_stream *s, struct sim_item *it);
void sim_stream_wait_seq(struct sim_stream *s, uint64_t seq);
void sim_stream_sync(struct sim_stream *s);
bool sim_stream_idle(struct sim_stream *s);
void sim_device_sync(int device);
void sim_context_sync(uint32_t context);	/* the context's streams only */
uint64_t sim_next_correlation(void);

/* Events. */
struct sim_event *sim_event_get(cudaEvent_t handle);	/* caller holds sim_lock */
struct sim_event *sim_event_new(unsigned int flags);
void sim_event_put(struct sim_event *ev);	/* drop a reference; caller holds sim_lock */

/* Kernels, modules, graphs. */
struct sim_module *sim_module_load(const void *image, bool library, CUresult *err);
void sim_module_unload(struct sim_module *m);
struct sim_kernel *sim_module_find(struct sim_module *m, const char *name);
uint64_t sim_kernel_ns(const struct sim_kernel *k);
struct sim_graph *sim_graph_new(bool exec);
void sim_graph_free(struct sim_graph *g);
struct sim_item *sim_item_clone(const struct sim_item *it);

/*
 * Opaque handles: addresses in a PROT_NONE reservation, one per handle type, never the address
 * of a sim struct (the product under test could read those). sim_handle_get returns the
 * object of a live handle of that type, NULL for anything else.
 */
enum sim_htype { H_STREAM, H_EVENT, H_MODULE, H_LIBRARY, H_KERNEL, H_FUNCTION, H_GRAPH,
		 H_GRAPH_EXEC, H_CONTEXT, H_MEMHANDLE, H_NR };
void *sim_handle_new(enum sim_htype type, void *obj);
void *sim_handle_get(enum sim_htype type, const void *handle);
void sim_handle_drop(enum sim_htype type, const void *handle);

/* The calling thread's API stack (tpsim_api_enter/exit): GPU work gets the OUTERMOST call's
 * correlation id, a fresh one when no API call is active (tpsim_enqueue). */
uint64_t sim_work_correlation(void);
void sim_api_enter(int domain, uint32_t cbid);
void sim_api_exit(void);

/* Items: copies, memsets, kernels, event records go either to the stream or, while it
 * captures, to its graph. Returns the seq to wait for (0 if captured). */
uint64_t sim_submit_or_capture(struct sim_stream *s, struct sim_item *it);

#endif /* TPSIM_SIM_H */
