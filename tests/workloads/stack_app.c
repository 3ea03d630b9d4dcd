// SPDX-License-Identifier: MIT
/* A process with known stacks for the snapshot engine's tests (tests/e2e/test_stacks.py).
 * Built with -O2 -fomit-frame-pointer: only CFI unwinds it.
 *
 *   main thread    main -> level_a -> level_b -> level_c -> read(stdin)   (blocked until GO)
 *   --threads N    N threads parked in idle_park -> pthread_cond_wait
 *   --spin         a thread in spin_loop -> spin_depth (recursion depth varies) forever
 *   --dstate S     a thread in vfork_wait -> vfork(); the child sleeps S seconds without
 *                  exec'ing, so the parent thread waits uninterruptibly (state D)
 *   --work N       a thread printing N deterministic lines, 2 ms apart (stdout compared
 *                  with and without snapshots)
 *   --churn        a thread creating short-lived threads without pause (threads appear and
 *                  vanish mid-snapshot)
 *   --zombie       a child that exits at once and is never reaped (prints "# zombie PID")
 *   --exit-after MS  exits (status 0) MS after READY without waiting for GO
 *   --tail         after READY the main thread first waits for one line on stdin (the test's
 *                  tools attach meanwhile), then runs main -> tail_mid -> tail_jump, which
 *                  tail-calls (jmp) tail_leaf -> read(stdin), printing "# tail" before the
 *                  read: a return probe on tail_jump and tail_leaf chains two instances on one
 *                  slot
 * Prints "READY <pid>" when every thread is in place; exits after a line on stdin ("GO"). */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "handshake.h"

#define NOINLINE __attribute__((noinline))
/* keeps a call from becoming a tail call, so the caller's frame stays on the stack */
#define KEEP_FRAME() __asm__ volatile("" ::: "memory")

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static pthread_cond_t started_cv = PTHREAD_COND_INITIALIZER;
static int started;
static volatile uint64_t sink;
static long dstate_secs;
static long work_lines;
static pthread_t work_thread;

static void mark_started(void)
{
	pthread_mutex_lock(&lock);
	started++;
	pthread_cond_broadcast(&started_cv);
	pthread_mutex_unlock(&lock);
}

NOINLINE int level_c(void)
{
	char buf[64];
	ssize_t n = read(0, buf, sizeof(buf));

	KEEP_FRAME();
	return (int)n + 1;
}

NOINLINE int level_b(void)
{
	int r = level_c();

	KEEP_FRAME();
	return r + 1;
}

NOINLINE int level_a(void)
{
	int r = level_b();

	KEEP_FRAME();
	return r + 1;
}

NOINLINE int tail_leaf(void)
{
	char buf[64];
	ssize_t n;

	printf("# tail\n");
	fflush(stdout);
	n = read(0, buf, sizeof(buf));
	KEEP_FRAME();
	return (int)n + 2;
}

/* no frame of its own on the stack while tail_leaf runs: -O2 makes the call a jmp */
NOINLINE int tail_jump(int x)
{
	sink += x;
	return tail_leaf();
}

NOINLINE int tail_mid(void)
{
	int r = tail_jump(1);

	KEEP_FRAME();
	return r + 1;
}

NOINLINE void *idle_park(void *arg)
{
	pthread_mutex_lock(&lock);
	started++;
	pthread_cond_broadcast(&started_cv);
	for (;;)
		pthread_cond_wait(&never, &lock);
	return arg;
}

NOINLINE uint64_t spin_depth(int depth, uint64_t x)
{
	if (depth > 0)
		x = spin_depth(depth - 1, x * 6364136223846793005ULL + 1);
	for (int i = 0; i < 200; i++)
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
	KEEP_FRAME();
	return x;
}

NOINLINE void *spin_loop(void *arg)
{
	uint64_t x = 1;

	mark_started();
	for (unsigned i = 0;; i++)
		sink = x = spin_depth(i % 7, x);
	return arg;
}

NOINLINE void *vfork_wait(void *arg)
{
	pid_t child;

	mark_started();
	child = vfork();
	if (child == 0) {
		/* only raw system calls in a vfork child: it runs on the parent's stack */
		struct timespec ts = { dstate_secs, 0 };

		syscall(SYS_nanosleep, &ts, NULL);
		_exit(0);
	}
	KEEP_FRAME();
	if (child > 0)
		waitpid(child, NULL, 0);
	return arg;
}

NOINLINE void *work(void *arg)
{
	uint64_t x = 88172645463325252ULL;

	for (long i = 0; i < work_lines; i++) {
		struct timespec ts = { 0, 2000000 };

		for (int k = 0; k < 1000; k++)
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		printf("line %ld %016llx\n", i, (unsigned long long)x);
		fflush(stdout);
		nanosleep(&ts, NULL);
	}
	return arg;
}

NOINLINE void *short_lived(void *arg)
{
	sink += 1;
	return arg;
}

NOINLINE void *churn(void *arg)
{
	mark_started();
	for (;;) {
		pthread_t t;

		if (!pthread_create(&t, NULL, short_lived, NULL))
			pthread_join(t, NULL);
	}
	return arg;
}

static void start(void *(*fn)(void *))
{
	pthread_t t;

	if (pthread_create(&t, NULL, fn, NULL)) {
		fprintf(stderr, "stack_app: pthread_create failed\n");
		exit(1);
	}
}

int main(int argc, char **argv)
{
	long threads = 0, exit_after = -1;
	int want = 0, spin = 0, zombie = 0, churning = 0, tail = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads"))
			threads = hs_parse_long(argv[i], argv[i + 1]), i++;
		else if (!strcmp(argv[i], "--spin"))
			spin = 1;
		else if (!strcmp(argv[i], "--tail"))
			tail = 1;
		else if (!strcmp(argv[i], "--dstate"))
			dstate_secs = hs_parse_long(argv[i], argv[i + 1]), i++;
		else if (!strcmp(argv[i], "--work"))
			work_lines = hs_parse_long(argv[i], argv[i + 1]), i++;
		else if (!strcmp(argv[i], "--churn"))
			churning = 1;
		else if (!strcmp(argv[i], "--zombie"))
			zombie = 1;
		else if (!strcmp(argv[i], "--exit-after"))
			exit_after = hs_parse_long(argv[i], argv[i + 1]), i++;
		else {
			fprintf(stderr, "stack_app: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	for (long i = 0; i < threads; i++, want++)
		start(idle_park);
	if (spin)
		start(spin_loop), want++;
	if (dstate_secs)
		start(vfork_wait), want++;
	if (churning)
		start(churn), want++;
	pthread_mutex_lock(&lock);
	while (started < want)
		pthread_cond_wait(&started_cv, &lock);
	pthread_mutex_unlock(&lock);
	if (zombie) {
		pid_t c = fork();

		if (c == 0)
			_exit(0);
		hs_info("zombie %d", (int)c);
	}
	/* the vfork child must be asleep (the parent in D) before READY */
	if (dstate_secs)
		usleep(100000);
	printf("READY %d\n", (int)getpid());
	fflush(stdout);
	if (work_lines && pthread_create(&work_thread, NULL, work, NULL))
		return 1;
	if (exit_after >= 0) {
		usleep(exit_after * 1000);
		_exit(0);
	}
	if (tail) {
		char line[64];

		if (!fgets(line, sizeof(line), stdin))
			return 1;
		tail_mid();
	} else {
		level_a();
	}
	if (work_lines)
		pthread_join(work_thread, NULL);
	printf("DONE\n");
	fflush(stdout);
	return 0;
}
