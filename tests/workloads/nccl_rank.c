// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * nccl_rank: one rank of a simulated NCCL job (tests/sim/nccl on tests/sim/cudart), linked with
 * -lnccl -lcudart and an rpath to the sim's lib dir. Start N of them (any order, any delay);
 * they rendezvous through the id file and /dev/shm.
 *
 * Usage: nccl_rank --rank R --nranks N --id-file PATH [--steps S (5)] [--scenario NAME
 *                  (healthy)] [--culprit C (1)] [--fault-step K (S-1)] [--fault-every E]
 *                  [--late-ms MS (3000)]
 *                  [--split] [--init-before-ready (default) | --init-after-go] [--hold]
 *                  [--bad-init] [--announce] [--start-delay-ms MS (0)]
 *
 * Setup, before READY (not counted below; with --init-after-go the part marked * runs right
 * after GO instead, before step 0):
 *   cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); cudaEventCreateWithFlags(&ev,
 *   cudaEventDisableTiming); cudaMalloc x9 (allreduce send/recv (1<<20)+1 floats, allgather
 *   send 4096 / recv 4096*N floats, broadcast send/recv 1024 ints, p2p send/recv 256 floats,
 *   split recv 65536 floats);
 *   cudaMemcpy(allreduce send <- R+1.0f everywhere, HostToDevice); the watchdog thread starts;
 *   [stuck scenario, culprit only: cudaStreamCreate(&s_stuck), tpsim_set_kernel_us(fake_stuck,
 *   3600000000)];
 *   * rank 0: ncclGetUniqueId, id written as 256 hex chars to PATH.tmp.<pid>, renamed to PATH;
 *     others poll PATH every 10 ms (up to 120 s);
 *   * [--bad-init] ncclCommInitRank(&bad, N, id', N) with id' = id with its last byte ^ 0x5a:
 *     rank N of N fails with ncclInvalidArgument (4), as real NCCL does; logged "bad init rc=4";
 *   * ncclCommInitRank(&comm, N, id, R);
 *   * [--split] ncclCommSplit(comm, R % 2, R, &split_comm, NULL).
 *
 * After GO, EXACTLY these calls per step on the main thread, in this order:
 *   1. ncclAllReduce(ar_send, ar_recv, 1048576, ncclFloat32, ncclSum, comm, s)
 *   2. ncclAllGather(ag_send, ag_recv, 4096, ncclFloat32, comm, s)
 *   3. ncclBroadcast(bc_send, bc_recv, 1024, ncclInt32, 0, comm, s)
 *   4. ncclGroupStart()
 *   5. ncclSend(p2p_send, 256, ncclFloat32, (R+1)%N, comm, s)
 *   6. ncclRecv(p2p_recv, 256, ncclFloat32, (R-1+N)%N, comm, s)
 *   7. ncclGroupEnd()
 *   8. [--split only] ncclAllReduce(ar_send, split_recv, 65536, ncclFloat32, ncclSum,
 *      split_comm, s)
 *   9. cudaEventRecord(ev, s)
 *  10. hands ev to the WATCHDOG THREAD (created before READY), which calls cudaEventQuery(ev)
 *      every 1 ms until it returns cudaSuccess (0): per step >= 0 calls returning
 *      cudaErrorNotReady (600), then exactly one returning 0 (like PyTorch's watchdog);
 *  11. cudaStreamSynchronize(s) in step_sync()       (main thread, right after 9)
 *  12. waits (pthread only) until the watchdog saw this step's success
 *  13. ncclCommGetAsyncError(comm, &err); err != ncclSuccess -> "# async_error ..." info line,
 *      ncclCommAbort(comm), exit(4) without DONE.
 * Once after the last step (main thread): cudaMemcpy(&v, ar_recv, 4, DeviceToHost) and the info
 * line "# allreduce_check got=V want=N*(N+1)/2" (V is the want value when the last allreduce
 * really reduced: float32 sum, all ranks same args); [--split] ncclCommDestroy(split_comm);
 * ncclCommDestroy(comm); "DONE".
 * Collective sequence numbers per step k (0-based): world comm 3k (allreduce), 3k+1
 * (allgather), 3k+2 (broadcast); split comm k. P2p: step k is send/recv #k+1 of each ring pair.
 * In the sim each NCCL op (the group: one) is one kernel on s lasting TPSIM_NCCL_US (200 µs) +
 * bytes / TPSIM_NCCL_GBPS once all ranks arrived; a healthy 5-step 4-rank run takes ~20 ms.
 *
 * Benchmark shape (not used by the fault tests): --kernels K --compute-us US launches K
 * kernels of US µs each (cudaLaunchKernel of fake_compute on s) before call 1 of every step;
 * --poll-ms P makes the watchdog poll every P ms instead of 1 ms (PyTorch's sleeps 100 ms).
 * --slow-us US (tptrace report's straggler test): the culprit alone sleeps US µs on the host
 * before the compute launches of every step, so the others wait for it in the allreduce.
 * --slow-pct P (the fleet's straggler): the culprit's steps take P % longer than its own:
 * before each step it sleeps P % of its previous step's duration less that step's sleep
 * (the first step: P % of --compute-us). A fixed --slow-us is a small share of a step that a
 * loaded host stretches (256 ranks on 2 cores: 0.8 s steps of a 200 ms compute); this is
 * "30 % slower every step" whatever the step takes.
 *
 * Scenarios: only the culprit (default rank 1) misbehaves, only at step K (default S-1), and
 * with --fault-every E also at every E-th step before it (K-E, K-2E, ...).
 * Outcomes are for the sim's default TPSIM_NCCL_HANG_ON=kind.
 *   healthy      nothing; all ranks DONE.
 *   skip         culprit omits call 1. Its allgather meets the others' allreduce at the same
 *                seq: kind mismatch, every rank (culprit too) hangs in call 11 of step K while
 *                its watchdog sees 600 forever. Nobody prints DONE.
 *   late         culprit sleeps --late-ms before call 1; all ranks wait in step K's call 11,
 *                then all DONE.
 *   size         culprit's call 1 has count 1048577; completes (no data moved); all DONE.
 *   dtype        culprit's call 1 has ncclFloat16 (ncclHalf); completes; all DONE.
 *   op           culprit's call 1 has ncclMax; completes; all DONE.
 *   root         culprit's call 3 has root 1; completes; all DONE (needs N >= 2).
 *   p2p          culprit's call 5 has count 128; completes; all DONE.
 *   stuck        before call 1 the culprit launches fake_stuck (1 hour) on s_stuck with
 *                cudaLaunchKernel(grid 1, block 1, shmem 0) and calls
 *                cudaStreamSynchronize(s_stuck): it blocks inside that host call. The others
 *                hang in call 11 of step K (their allreduce waits for the culprit).
 *                (the culprit's sync is in stuck_sync(), the others' in step_sync(): the same
 *                API reached from different functions)
 *   idle         culprit prints "# culprit idle" and sleeps forever in culprit_idle()
 *                (clock_nanosleep) before call 1: it stops calling NCCL; the others hang in
 *                call 11 of step K.
 *   spin         the same, spinning on the CPU in culprit_spin().
 *   exit         culprit prints "# culprit exit", exit(3) before call 1; others hang in step K.
 *   kill         culprit raise(SIGKILL) before call 1; others hang in step K.
 *   async_error  after call 12 of step K the culprit calls the sim hook
 *                tpsim_nccl_set_async_error(comm, ncclRemoteError); its call 13 then reports
 *                ncclRemoteError (6): "# async_error 6", ncclCommAbort(comm), exit(4). Step K
 *                completed on every rank, so with K = S-1 the others print DONE; with K < S-1
 *                they hang in call 11 of step K+1.
 * --announce: every rank prints "# step K" before call 1 of each step (a test that attaches
 * after the job hung knows every rank got there). TPSIM_NCCL_US=3600000000 in the environment
 * makes every collective last an hour: all ranks enter and hang in call 11 (no_progress).
 * The functions named here are noinline and exported (-rdynamic) so stacks show them.
 * Exit codes: 0 DONE, 1 an unexpected API error, 2 usage/id file, 3 exit scenario, 4 async error.
 * Stdout info lines: "# nccl_rank rank=R comm=/tpsim-nccl-<hex> split=<name>|-" (right after
 * comm setup), "# nccl_rank rank=R nranks=N steps=S scenario=... culprit=C fault_step=K split=0|1
 * init_after_go=0|1" (before READY), then the ones named above.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include "tpsim.h"
#include "tpsim_nccl.h"
#include "handshake.h"

#define AR_COUNT	(1 << 20)
#define AG_COUNT	4096
#define BC_COUNT	1024
#define P2P_COUNT	256
#define SPLIT_COUNT	65536
#define STUCK_US	3600000000u

enum scenario {
	SC_HEALTHY, SC_SKIP, SC_LATE, SC_SIZE, SC_DTYPE, SC_OP, SC_ROOT, SC_P2P, SC_STUCK,
	SC_EXIT, SC_KILL, SC_ASYNC_ERROR, SC_IDLE, SC_SPIN,
};

static const char *scenario_names[] = {
	"healthy", "skip", "late", "size", "dtype", "op", "root", "p2p", "stuck", "exit", "kill",
	"async_error", "idle", "spin",
};

struct opts {
	int rank, nranks, steps, culprit, fault_step, fault_every, late_ms;
	int kernels, compute_us, poll_ms;	/* benchmark shape: compute before the collectives */
	int slow_us;		/* the culprit sleeps this long on the host before each step's work */
	int slow_pct;		/* ... or this share of its own previous step's duration */
	int start_delay_ms;	/* sleep at the start of main: init this long after exec */
	const char *id_file;
	enum scenario scenario;
	bool split, init_after_go, hold, bad_init, announce;
};

/* The watchdog's mailbox: main posts a step, the watchdog acks it once ev completed. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	cudaEvent_t ev;
	int posted, acked;		/* step + 1 */
	bool quit;
	long not_ready;
} wd = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

/* "Device code" of the stuck scenario: never run on the host. */
static int poll_us = 1000;

/* --kernels K --compute-us US: K launches of this before each step's collectives, US each */
__attribute__((noinline)) void fake_compute(int *flag)
{
	*flag = 2;
}

__attribute__((noinline)) void fake_stuck(int *flag)
{
	*flag = 1;
}

/* The hang scenarios' host functions: a stack names them. */
__attribute__((noinline)) void culprit_idle(void)
{
	struct timespec ts = { 1000000, 0 };	/* one call: it never returns */

	for (;;)
		clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
}

__attribute__((noinline)) void culprit_spin(void)
{
	volatile unsigned long n = 0;

	for (;;)
		n++;
}

__attribute__((noinline)) cudaError_t step_sync(cudaStream_t s)
{
	cudaError_t err = cudaStreamSynchronize(s);

	__asm__ volatile("" ::: "memory");	/* not a tail call: step_sync stays on the stack */
	return err;
}

__attribute__((noinline)) cudaError_t stuck_sync(cudaStream_t s)
{
	cudaError_t err = cudaStreamSynchronize(s);

	__asm__ volatile("" ::: "memory");
	return err;
}

static void cuda_check(cudaError_t err, const char *what)
{
	if (err == cudaSuccess)
		return;
	fprintf(stderr, "nccl_rank: %s failed: %s (%d)\n", what, cudaGetErrorName(err), (int)err);
	exit(1);
}

static void nccl_check(ncclResult_t err, const char *what)
{
	if (err == ncclSuccess)
		return;
	fprintf(stderr, "nccl_rank: %s failed: %s (%d)\n", what, ncclGetErrorString(err),
		(int)err);
	exit(1);
}

static void *watchdog_main(void *arg)
{
	cudaError_t err;
	int step;

	for (;;) {
		pthread_mutex_lock(&wd.lock);
		while (wd.posted == wd.acked && !wd.quit)
			pthread_cond_wait(&wd.cond, &wd.lock);
		if (wd.quit) {
			pthread_mutex_unlock(&wd.lock);
			return NULL;
		}
		step = wd.posted;
		pthread_mutex_unlock(&wd.lock);
		while ((err = cudaEventQuery(wd.ev)) == cudaErrorNotReady) {
			wd.not_ready++;
			usleep(poll_us);
		}
		cuda_check(err, "cudaEventQuery");
		pthread_mutex_lock(&wd.lock);
		wd.acked = step;
		pthread_cond_broadcast(&wd.cond);
		pthread_mutex_unlock(&wd.lock);
	}
}

static void write_id(const char *path, const ncclUniqueId *id)
{
	char tmp[4096];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	f = fopen(tmp, "w");
	if (!f) {
		fprintf(stderr, "nccl_rank: cannot write %s: %s\n", tmp, strerror(errno));
		exit(2);
	}
	for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
		fprintf(f, "%02x", (unsigned char)id->internal[i]);
	fputc('\n', f);
	if (fclose(f) != 0 || rename(tmp, path) != 0) {
		fprintf(stderr, "nccl_rank: cannot publish %s: %s\n", path, strerror(errno));
		exit(2);
	}
}

static void read_id(const char *path, ncclUniqueId *id)
{
	char hex[2 * NCCL_UNIQUE_ID_BYTES + 2];
	unsigned byte;
	FILE *f;

	for (int waited_ms = 0; !(f = fopen(path, "r")); waited_ms += 10) {
		if (waited_ms >= 120000) {
			fprintf(stderr, "nccl_rank: no id file %s after 120 s\n", path);
			exit(2);
		}
		usleep(10000);
	}
	if (!fgets(hex, sizeof(hex), f) || strlen(hex) < 2 * NCCL_UNIQUE_ID_BYTES) {
		fprintf(stderr, "nccl_rank: bad id file %s\n", path);
		exit(2);
	}
	fclose(f);
	for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) {
		if (sscanf(hex + 2 * i, "%2x", &byte) != 1) {
			fprintf(stderr, "nccl_rank: bad id file %s\n", path);
			exit(2);
		}
		id->internal[i] = (char)byte;
	}
}

static void comm_setup(const struct opts *o, ncclComm_t *comm, ncclComm_t *split_comm)
{
	ncclUniqueId id;

	if (o->rank == 0) {
		nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
		write_id(o->id_file, &id);
	} else {
		read_id(o->id_file, &id);
	}
	if (o->bad_init) {
		ncclUniqueId bad_id = id;
		ncclComm_t bad = NULL;

		bad_id.internal[NCCL_UNIQUE_ID_BYTES - 1] ^= 0x5a;	/* a comm nobody joins */
		hs_info("nccl_rank bad init rc=%d",
			(int)ncclCommInitRank(&bad, o->nranks, bad_id, o->nranks));
	}
	nccl_check(ncclCommInitRank(comm, o->nranks, id, o->rank), "ncclCommInitRank");
	if (o->split)
		nccl_check(ncclCommSplit(*comm, o->rank % 2, o->rank, split_comm, NULL),
			   "ncclCommSplit");
	hs_info("nccl_rank rank=%d comm=%s split=%s", o->rank, tpsim_nccl_comm_name(*comm),
		o->split ? tpsim_nccl_comm_name(*split_comm) : "-");
}

static void usage(void)
{
	fprintf(stderr, "usage: nccl_rank --rank R --nranks N --id-file PATH [--steps S] "
		"[--scenario healthy|skip|late|size|dtype|op|root|p2p|stuck|exit|kill|async_error|"
		"idle|spin] [--announce] "
		"[--culprit C] [--fault-step K] [--fault-every E] [--late-ms MS] [--split] [--init-before-ready|"
		"--init-after-go] [--hold] [--bad-init] [--kernels K --compute-us US] [--poll-ms P] [--slow-us US | --slow-pct P] [--start-delay-ms MS]\n");
	exit(2);
}

static void parse(int argc, char **argv, struct opts *o)
{
	const char *scenario = "healthy";
	bool found = false;

	*o = (struct opts){ .rank = -1, .nranks = -1, .steps = 5, .culprit = 1,
			    .fault_step = -1, .late_ms = 3000 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = argv[i + 1];

		if (!strcmp(a, "--rank"))
			o->rank = (int)hs_parse_long(a, v), i++;
		else if (!strcmp(a, "--nranks"))
			o->nranks = (int)hs_parse_long(a, v), i++;
		else if (!strcmp(a, "--id-file") && v)
			o->id_file = v, i++;
		else if (!strcmp(a, "--steps"))
			o->steps = (int)hs_parse_long(a, v), i++;
		else if (!strcmp(a, "--scenario") && v)
			scenario = v, i++;
		else if (!strcmp(a, "--culprit"))
			o->culprit = (int)hs_parse_long(a, v), i++;
		else if (!strcmp(a, "--fault-step"))
			o->fault_step = (int)hs_parse_long(a, v), i++;
		else if (!strcmp(a, "--fault-every"))
			o->fault_every = (int)hs_parse_long(a, v), i++;
		else if (!strcmp(a, "--late-ms"))
			o->late_ms = (int)hs_parse_long(a, v), i++;
		else if (!strcmp(a, "--split"))
			o->split = true;
		else if (!strcmp(a, "--init-before-ready"))
			o->init_after_go = false;
		else if (!strcmp(a, "--init-after-go"))
			o->init_after_go = true;
		else if (!strcmp(a, "--hold"))
			o->hold = true;
		else if (!strcmp(a, "--bad-init"))
			o->bad_init = true;
		else if (!strcmp(a, "--announce"))
			o->announce = true;
		else if (!strcmp(a, "--kernels"))
			o->kernels = (int)hs_parse_long(a, v), i++;
		else if (!strcmp(a, "--compute-us"))
			o->compute_us = (int)hs_parse_long(a, v), i++;
		else if (!strcmp(a, "--slow-us"))
			o->slow_us = (int)hs_parse_long(a, v), i++;
		else if (!strcmp(a, "--slow-pct"))
			o->slow_pct = (int)hs_parse_long(a, v), i++;
		else if (!strcmp(a, "--poll-ms"))
			o->poll_ms = (int)hs_parse_long(a, v), i++;
		else if (!strcmp(a, "--start-delay-ms"))
			o->start_delay_ms = (int)hs_parse_long(a, v), i++;
		else
			usage();
	}
	for (size_t i = 0; i < sizeof(scenario_names) / sizeof(*scenario_names); i++)
		if (!strcmp(scenario, scenario_names[i])) {
			o->scenario = (enum scenario)i;
			found = true;
		}
	if (!found || o->rank < 0 || o->nranks < 1 || o->rank >= o->nranks || !o->id_file ||
	    o->steps < 1 || o->fault_every < 0)
		usage();
	if (o->fault_step < 0)
		o->fault_step = o->steps - 1;
}

static long mono_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000L + t.tv_nsec / 1000;
}

int main(int argc, char **argv)
{
	long step_start = 0, slow_us, slept_us = 0, prev_work_us = 0;
	void *ar_send, *ar_recv, *ag_send, *ag_recv, *bc_send, *bc_recv, *p2p_send, *p2p_recv;
	void *split_recv;
	ncclComm_t comm = NULL, split_comm = NULL;
	cudaStream_t s, s_stuck = NULL;
	pthread_t watchdog;
	ncclResult_t async_err;
	float *host, v = 0;
	struct opts o;
	int stuck_flag = 0;

	parse(argc, argv, &o);
	/* --start-delay-ms: the communicator comes this long after exec (tptrace fr -a's
	 * exact-from-exec test); 0 by default */
	if (o.start_delay_ms > 0)
		usleep((useconds_t)o.start_delay_ms * 1000);
	cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
	cuda_check(cudaEventCreateWithFlags(&wd.ev, cudaEventDisableTiming),
		   "cudaEventCreateWithFlags");
	cuda_check(cudaMalloc(&ar_send, (AR_COUNT + 1) * 4), "cudaMalloc");
	cuda_check(cudaMalloc(&ar_recv, (AR_COUNT + 1) * 4), "cudaMalloc");
	cuda_check(cudaMalloc(&ag_send, AG_COUNT * 4), "cudaMalloc");
	cuda_check(cudaMalloc(&ag_recv, (size_t)AG_COUNT * 4 * o.nranks), "cudaMalloc");
	cuda_check(cudaMalloc(&bc_send, BC_COUNT * 4), "cudaMalloc");
	cuda_check(cudaMalloc(&bc_recv, BC_COUNT * 4), "cudaMalloc");
	cuda_check(cudaMalloc(&p2p_send, P2P_COUNT * 4), "cudaMalloc");
	cuda_check(cudaMalloc(&p2p_recv, P2P_COUNT * 4), "cudaMalloc");
	cuda_check(cudaMalloc(&split_recv, SPLIT_COUNT * 4), "cudaMalloc");
	host = malloc((AR_COUNT + 1) * 4);
	for (int i = 0; i < AR_COUNT + 1; i++)
		host[i] = (float)(o.rank + 1);
	cuda_check(cudaMemcpy(ar_send, host, (AR_COUNT + 1) * 4, cudaMemcpyHostToDevice),
		   "cudaMemcpy");
	free(host);
	if (pthread_create(&watchdog, NULL, watchdog_main, NULL)) {
		fprintf(stderr, "nccl_rank: pthread_create failed\n");
		return 1;
	}
	if (o.scenario == SC_STUCK && o.rank == o.culprit) {
		cuda_check(cudaStreamCreate(&s_stuck), "cudaStreamCreate");
		tpsim_set_kernel_us((const void *)fake_stuck, STUCK_US);
	}
	if (o.kernels > 0)
		tpsim_set_kernel_us((const void *)fake_compute, o.compute_us > 0 ? o.compute_us : 100);
	if (o.poll_ms > 0)
		poll_us = o.poll_ms * 1000;
	if (!o.init_after_go)
		comm_setup(&o, &comm, &split_comm);
	hs_info("nccl_rank rank=%d nranks=%d steps=%d scenario=%s culprit=%d fault_step=%d "
		"split=%d init_after_go=%d", o.rank, o.nranks, o.steps, scenario_names[o.scenario],
		o.culprit, o.fault_step, o.split, o.init_after_go);

	hs_ready_wait_go();
	if (o.init_after_go)
		comm_setup(&o, &comm, &split_comm);

	for (int step = 0; step < o.steps; step++) {
		bool fault = o.rank == o.culprit &&
			     (step == o.fault_step ||
			      (o.fault_every && step < o.fault_step &&
			       (o.fault_step - step) % o.fault_every == 0));
		enum scenario sc = fault ? o.scenario : SC_HEALTHY;
		size_t ar_count = sc == SC_SIZE ? AR_COUNT + 1 : AR_COUNT;
		ncclDataType_t ar_type = sc == SC_DTYPE ? ncclFloat16 : ncclFloat32;
		ncclRedOp_t ar_op = sc == SC_OP ? ncclMax : ncclSum;

		if (o.announce)
			hs_info("step %d", step);
		switch (sc) {
		case SC_LATE:
			usleep((useconds_t)o.late_ms * 1000);
			break;
		case SC_STUCK: {
			dim3 one = { 1, 1, 1 };
			int *flag = &stuck_flag;
			void *args[] = { &flag };

			cuda_check(cudaLaunchKernel((const void *)fake_stuck, one, one, args, 0,
						    s_stuck), "cudaLaunchKernel");
			cuda_check(stuck_sync(s_stuck), "cudaStreamSynchronize");
			break;
		}
		case SC_IDLE:
			hs_info("culprit idle");
			culprit_idle();
			break;
		case SC_SPIN:
			hs_info("culprit spin");
			culprit_spin();
			break;
		case SC_EXIT:
			hs_info("culprit exit");
			exit(3);
		case SC_KILL:
			raise(SIGKILL);
			break;
		default:
			break;
		}
		step_start = mono_us();
		if (o.slow_pct > 0 && o.rank == o.culprit)
			slow_us = (long)((prev_work_us > 0 ? prev_work_us : o.compute_us) *
					 (long long)o.slow_pct / 100);
		else
			slow_us = o.rank == o.culprit ? o.slow_us : 0;
		if (slow_us > 0) {
			/* a sleep, not a spin: on a 2-CPU test host a spinning rank would starve
			 * the others' simulated GPUs and stretch their kernels */
			struct timespec d = { slow_us / 1000000, (slow_us % 1000000) * 1000L };

			nanosleep(&d, NULL);
		}
		slept_us = slow_us > 0 ? mono_us() - step_start : 0;
		for (int k = 0; k < o.kernels; k++) {
			dim3 grid = { 108, 1, 1 }, block = { 256, 1, 1 };
			int *flag = &stuck_flag;
			void *args[] = { &flag };

			cuda_check(cudaLaunchKernel((const void *)fake_compute, grid, block, args, 0, s),
				   "cudaLaunchKernel");
		}
		if (sc != SC_SKIP)
			nccl_check(ncclAllReduce(ar_send, ar_recv, ar_count, ar_type, ar_op, comm, s),
				   "ncclAllReduce");
		nccl_check(ncclAllGather(ag_send, ag_recv, AG_COUNT, ncclFloat32, comm, s),
			   "ncclAllGather");
		nccl_check(ncclBroadcast(bc_send, bc_recv, BC_COUNT, ncclInt32,
					 sc == SC_ROOT ? 1 : 0, comm, s), "ncclBroadcast");
		nccl_check(ncclGroupStart(), "ncclGroupStart");
		nccl_check(ncclSend(p2p_send, sc == SC_P2P ? P2P_COUNT / 2 : P2P_COUNT, ncclFloat32,
				    (o.rank + 1) % o.nranks, comm, s), "ncclSend");
		nccl_check(ncclRecv(p2p_recv, P2P_COUNT, ncclFloat32,
				    (o.rank - 1 + o.nranks) % o.nranks, comm, s), "ncclRecv");
		nccl_check(ncclGroupEnd(), "ncclGroupEnd");
		if (o.split)
			nccl_check(ncclAllReduce(ar_send, split_recv, SPLIT_COUNT, ncclFloat32, ncclSum,
						 split_comm, s), "ncclAllReduce(split)");
		cuda_check(cudaEventRecord(wd.ev, s), "cudaEventRecord");

		pthread_mutex_lock(&wd.lock);
		wd.posted = step + 1;
		pthread_cond_broadcast(&wd.cond);
		pthread_mutex_unlock(&wd.lock);

		cuda_check(step_sync(s), "cudaStreamSynchronize");

		pthread_mutex_lock(&wd.lock);
		while (wd.acked != step + 1)
			pthread_cond_wait(&wd.cond, &wd.lock);
		pthread_mutex_unlock(&wd.lock);

		prev_work_us = mono_us() - step_start - slept_us;
		if (sc == SC_ASYNC_ERROR)
			tpsim_nccl_set_async_error(comm, ncclRemoteError);
		nccl_check(ncclCommGetAsyncError(comm, &async_err), "ncclCommGetAsyncError");
		if (async_err != ncclSuccess) {
			hs_info("async_error %d", (int)async_err);
			ncclCommAbort(comm);
			exit(4);
		}
	}

	cuda_check(cudaMemcpy(&v, ar_recv, sizeof(v), cudaMemcpyDeviceToHost), "cudaMemcpy");
	hs_info("allreduce_check got=%g want=%g eventquery_not_ready=%ld", v,
		o.nranks * (o.nranks + 1) / 2.0, wd.not_ready);
	if (split_comm)
		nccl_check(ncclCommDestroy(split_comm), "ncclCommDestroy(split)");
	nccl_check(ncclCommDestroy(comm), "ncclCommDestroy");

	pthread_mutex_lock(&wd.lock);
	wd.quit = true;
	pthread_cond_broadcast(&wd.cond);
	pthread_mutex_unlock(&wd.lock);
	pthread_join(watchdog, NULL);
	hs_done(o.hold);
	return 0;
}
