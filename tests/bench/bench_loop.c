// SPDX-License-Identifier: MIT
/*
 * bench_loop: calls one probed function in a tight loop and reports the per-call time, so a
 * driver (tests/bench/run.py) can attach and detach tracers between repetitions of one
 * long-lived process.
 *
 * The library is dlopen'ed (default: the REAL /usr/local/cuda/lib/libcudart.so.13; without a
 * driver its calls fail fast with error 35 but a uprobe on the entry still fires).
 *
 * Protocol (stdin/stdout, one line each):
 *   -> "READY <pid>"
 *   -> "SYM <op> <path> <file offset hex>"   one per op whose function was found
 *   <- "RUN <op> <calls>"    -> "NS <op> <ns per call>"
 *   <- "QUIT" or EOF          exit 0
 * Ops: launch  cudaLaunchKernel(func, grid, block, args, shmem, stream)  (6 args + 2 stack)
 *      sync    cudaStreamSynchronize(stream)
 *      alloc   cudaMalloc(&ptr, 1 MiB)
 *      nccl    ncclAllReduce(...) from --nccl LIB (NULL comm: fails fast, entry observable)
 *      syscall getppid(2) through syscall(): what a host-wide syscall hook costs every process
 *      launch_2threads  launch from two threads at once, the second pinned to the CPU below
 *              --cpu's (or CPU 0): each runs <calls>; NS is the mean of the two threads' ns
 *              per call (what a ring shared by CPUs costs when both write at once)
 *
 * Usage: bench_loop [--cudart LIB] [--nccl LIB] [--cpu N] [--dlopen-list FILE]
 *   --dlopen-list  dlopen every path listed in FILE (one per line) before READY: the
 *                  attach-latency benchmark's "process with hundreds of libraries"
 */
#include <dlfcn.h>
#include <pthread.h>
#include <inttypes.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct { unsigned x, y, z; } dim3_t;
typedef int (*launch_fn)(const void *, dim3_t, dim3_t, void **, size_t, void *);
typedef int (*sync_fn)(void *);
typedef int (*malloc_fn)(void **, size_t);
typedef int (*allreduce_fn)(const void *, void *, size_t, int, int, void *, void *);

static int loop_cpu = -1;	/* --cpu: the main thread's; launch_2threads' second one runs beside it */
static launch_fn launch;
static sync_fn stream_sync;
static malloc_fn dev_malloc;
static allreduce_fn allreduce;

__attribute__((noinline)) void bench_kernel(float *p, int n)
{
	(void)p;
	(void)n;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* File offset of a code address, from our own maps: what a uprobe is attached at. */
static int file_offset(void *addr, char *path, size_t size, uint64_t *off)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4096];
	int found = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long start, end, offset;
		char p[4096] = "";

		if (sscanf(line, "%llx-%llx %*4s %llx %*s %*u %4095s", &start, &end, &offset, p) < 3)
			continue;
		if ((uintptr_t)addr < start || (uintptr_t)addr >= end)
			continue;
		snprintf(path, size, "%s", p);
		*off = (uintptr_t)addr - start + offset;
		found = 0;
		break;
	}
	fclose(f);
	return found;
}

static void announce(const char *op, void *fn)
{
	char path[4096];
	uint64_t off;

	if (fn && !file_offset(fn, path, sizeof(path), &off))
		printf("SYM %s %s 0x%" PRIx64 "\n", op, path, off);
}

static int run(const char *op, long calls, double *ns)
{
	dim3_t grid = { 64, 2, 1 }, block = { 256, 1, 1 };
	void *stream = (void *)0x5100, *ptr;
	float *data = NULL;
	int n = 1024;
	void *args[] = { &data, &n };
	uint64_t t0, t1;

	if (!strcmp(op, "launch") && launch) {
		t0 = now_ns();
		for (long i = 0; i < calls; i++)
			launch((const void *)bench_kernel, grid, block, args, 4096, stream);
		t1 = now_ns();
	} else if (!strcmp(op, "sync") && stream_sync) {
		t0 = now_ns();
		for (long i = 0; i < calls; i++)
			stream_sync(stream);
		t1 = now_ns();
	} else if (!strcmp(op, "alloc") && dev_malloc) {
		t0 = now_ns();
		for (long i = 0; i < calls; i++)
			dev_malloc(&ptr, 1 << 20);
		t1 = now_ns();
	} else if (!strcmp(op, "nccl") && allreduce) {
		t0 = now_ns();
		for (long i = 0; i < calls; i++)	/* ncclFloat32 = 7, ncclSum = 0, comm NULL */
			allreduce(data, data, 1024, 7, 0, NULL, stream);
		t1 = now_ns();
	} else if (!strcmp(op, "syscall")) {
		t0 = now_ns();
		for (long i = 0; i < calls; i++)
			syscall(SYS_getppid);
		t1 = now_ns();
	} else {
		return -1;
	}
	*ns = (double)(t1 - t0) / calls;
	return 0;
}

struct launcher {
	pthread_barrier_t *start;
	long calls;
	double ns;
};

static void *launcher_main(void *arg)
{
	struct launcher *l = arg;

	pthread_barrier_wait(l->start);
	run("launch", l->calls, &l->ns);
	return NULL;
}

/* Both threads cross the barrier, then each times its own loop: the figure is per call of
 * one thread while the other launches too (threads created outside the timed part). */
static int run_2threads(long calls, double *ns)
{
	struct launcher mine = { .calls = calls }, other = { .calls = calls };
	pthread_barrier_t start;
	pthread_attr_t attr;
	pthread_t th;
	int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN), r;

	if (!launch || ncpu < 2)
		return -1;
	pthread_barrier_init(&start, NULL, 2);
	mine.start = other.start = &start;
	pthread_attr_init(&attr);
	if (loop_cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(loop_cpu > 0 ? loop_cpu - 1 : 1, &set);
		pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
	}
	r = pthread_create(&th, &attr, launcher_main, &other);
	pthread_attr_destroy(&attr);
	if (r) {
		pthread_barrier_destroy(&start);
		return -1;
	}
	launcher_main(&mine);
	pthread_join(th, NULL);
	pthread_barrier_destroy(&start);
	*ns = (mine.ns + other.ns) / 2;
	return 0;
}

int main(int argc, char **argv)
{
	const char *cudart = "/usr/local/cuda/lib/libcudart.so.13", *nccl = NULL;
	char line[256];
	void *h;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--cudart") && i + 1 < argc) {
			cudart = argv[++i];
		} else if (!strcmp(argv[i], "--nccl") && i + 1 < argc) {
			nccl = argv[++i];
		} else if (!strcmp(argv[i], "--dlopen-list") && i + 1 < argc) {
			FILE *f = fopen(argv[++i], "r");
			char path[4096];

			while (f && fgets(path, sizeof(path), f)) {
				path[strcspn(path, "\n")] = '\0';
				if (path[0] && !dlopen(path, RTLD_NOW | RTLD_LOCAL))
					fprintf(stderr, "bench_loop: %s\n", dlerror());
			}
			if (f)
				fclose(f);
			else
				perror(argv[i]);
		} else if (!strcmp(argv[i], "--cpu") && i + 1 < argc) {
			cpu_set_t set;

			CPU_ZERO(&set);
			loop_cpu = atoi(argv[++i]);
			CPU_SET(loop_cpu, &set);
			if (sched_setaffinity(0, sizeof(set), &set))
				perror("bench_loop: sched_setaffinity");
		} else {
			fprintf(stderr, "usage: bench_loop [--cudart LIB] [--nccl LIB] [--cpu N] [--dlopen-list FILE]\n");
			return 2;
		}
	}
	h = dlopen(cudart, RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		fprintf(stderr, "bench_loop: %s\n", dlerror());
		return 1;
	}
	launch = (launch_fn)dlsym(h, "cudaLaunchKernel");
	stream_sync = (sync_fn)dlsym(h, "cudaStreamSynchronize");
	dev_malloc = (malloc_fn)dlsym(h, "cudaMalloc");
	if (nccl) {
		void *hn = dlopen(nccl, RTLD_NOW | RTLD_GLOBAL);

		if (hn)
			allreduce = (allreduce_fn)dlsym(hn, "ncclAllReduce");
		else
			fprintf(stderr, "bench_loop: %s\n", dlerror());
	}
	/* first calls initialise the runtime (and fail, without a driver): not measured */
	for (const char *const *op = (const char *const[]){ "launch", "sync", "alloc", "nccl", NULL };
	     *op; op++) {
		double ns;

		run(*op, 100, &ns);
	}
	printf("READY %d\n", (int)getpid());
	announce("launch", (void *)launch);
	announce("sync", (void *)stream_sync);
	announce("alloc", (void *)dev_malloc);
	announce("nccl", (void *)allreduce);
	printf("END\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		char op[32];
		long calls;
		double ns;

		if (!strncmp(line, "QUIT", 4))
			break;
		if (sscanf(line, "RUN %31s %ld", op, &calls) != 2 || calls <= 0) {
			printf("ERR bad command\n");
		} else if (!strcmp(op, "launch_2threads") ? run_2threads(calls, &ns) :
			   run(op, calls, &ns)) {
			printf("ERR %s unavailable\n", op);
		} else {
			printf("NS %s %.3f\n", op, ns);
		}
		fflush(stdout);
	}
	return 0;
}
