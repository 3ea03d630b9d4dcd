/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Internals shared by the simulated runtime's engine (engine.c: streams, workers, events,
 * kernels) and its CUDA API entry points (api.c). Nothing here is exported: the version script
 * (libcudart.map) keeps only cuda*, __cuda* and tpsim_* global.
 */
#ifndef TPSIM_SIM_H
#define TPSIM_SIM_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include "tpsim.h"

/*
 * nvcc's host-code entry points. <crt/host_runtime.h> and <crt/device_functions.h> declare them
 * only for C++ under __CUDACC__, so these prototypes are copied from the CUDA 13.0 headers
 * (crt/host_runtime.h: __cudaRegister*, __cudaUnregisterFatBinary, __cudaPopCallConfiguration;
 * crt/device_functions.h: __cudaPushCallConfiguration, __cudaGetKernel, __cudaLaunchKernel*),
 * with C++ default arguments removed.
 */
extern void **CUDARTAPI __cudaRegisterFatBinary(void *fatCubin);
extern void CUDARTAPI __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
extern void CUDARTAPI __cudaUnregisterFatBinary(void **fatCubinHandle);
extern void CUDARTAPI __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
					const char *deviceName, int ext, size_t size, int constant,
					int global);
extern void CUDARTAPI __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress,
					       char *deviceAddress, const char *deviceName, int ext,
					       size_t size, int constant, int global);
extern char CUDARTAPI __cudaInitModule(void **fatCubinHandle);
extern void CUDARTAPI __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun,
					     char *deviceFun, const char *deviceName,
					     int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim,
					     dim3 *gDim, int *wSize);
extern unsigned CUDARTAPI __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim,
						      size_t sharedMem, struct CUstream_st *stream);
extern cudaError_t CUDARTAPI __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim,
							size_t *sharedMem, void *stream);
extern cudaError_t CUDARTAPI __cudaGetKernel(cudaKernel_t *, const void *);
extern cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
						void **args, size_t sharedMem, cudaStream_t stream);
extern cudaError_t CUDARTAPI __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim,
						     dim3 blockDim, void **args, size_t sharedMem,
						     cudaStream_t stream);

#define SIM_MAX_DEVICES 16

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
	int value;			/* memset */
	struct sim_event *event;	/* record / wait; holds a reference */
	uint64_t event_gen;
	struct sim_stream *wait_stream;
	uint64_t wait_seq;
	void (*fn)(void *arg);		/* host fn, or body of tpsim_enqueue_kernel */
	void *arg;
};

struct sim_stream {
	uint64_t magic;
	uint64_t id;
	int device;
	unsigned int flags;		/* cudaStreamNonBlocking */
	int priority;
	bool legacy, per_thread, destroyed;
	struct sim_item *head, *tail;
	uint64_t submitted, completed;	/* seq of last enqueued / finished item */
	pthread_cond_t has_work;
	struct sim_stream *next_live;
};

struct sim_event {
	uint64_t magic;
	unsigned int flags;
	int refs;			/* the handle + each pending record/wait item */
	bool destroyed;
	uint64_t record_gen;		/* bumped by every cudaEventRecord */
	uint64_t done_gen;		/* gen of the last record a worker completed */
	uint64_t time_ns;		/* completion time of done_gen */
};

/* Simulated device code: one per host stub / function pointer; its address is the cudaKernel_t. */
struct sim_kernel {
	uint64_t magic;
	const void *func;
	char *name;
	long long us_override;		/* tpsim_set_kernel_us, or -1 */
	struct sim_kernel *next;
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

/* Streams. sim_stream_resolve maps 0 / cudaStreamLegacy / cudaStreamPerThread / a handle. */
cudaError_t sim_stream_resolve(cudaStream_t handle, bool ptsz, struct sim_stream **out);
struct sim_stream *sim_stream_new(int device, unsigned int flags, int priority);
void sim_stream_destroy(struct sim_stream *s);
cudaStream_t sim_stream_handle(struct sim_stream *s);
struct sim_item *sim_item_new(int kind);
/* Append to s (taking sim_lock), adding legacy-stream implicit waits; returns the item's seq. */
uint64_t sim_submit(struct sim_stream *s, struct sim_item *it);
void sim_stream_wait_seq(struct sim_stream *s, uint64_t seq);
void sim_stream_sync(struct sim_stream *s);
bool sim_stream_idle(struct sim_stream *s);
void sim_device_sync(int device);
uint64_t sim_next_correlation(void);

/* Events. */
struct sim_event *sim_event_get(cudaEvent_t handle);
struct sim_event *sim_event_new(unsigned int flags);
void sim_event_put(struct sim_event *ev);	/* drop a reference; caller holds sim_lock */

/* Kernels. sim_kernel_get creates the entry for an unknown func. */
struct sim_kernel *sim_kernel_get(const void *func);
struct sim_kernel *sim_kernel_from_handle(const void *handle);
void sim_kernel_register(const void *func, const char *name);
uint64_t sim_kernel_ns(const struct sim_kernel *k);

#endif /* TPSIM_SIM_H */
