// SPDX-License-Identifier: MIT
/* One hang snapshot of a process (stacks.h): per sample, /proc for every thread (state, wchan,
 * comm, kernel stack), then every thread ptrace-stopped, unwound and its Python frames read,
 * then detached; samples compared for progress.
 *
 * The stop runs in a short-lived thread of ours, the tracer, created per sample. ptrace ties a
 * tracee to the tracer *thread*, and the kernel detaches every tracee of a thread when it
 * exits (exit_ptrace): a thread we could not stop in time (D state) stays attached only
 * until the sample's tracer thread exits, so nothing is ever left traced or stopped, and a
 * `kill -9` of tptrace releases the target the same way. PTRACE_SEIZE + PTRACE_INTERRUPT
 * (not PTRACE_ATTACH) sends no SIGSTOP, so the target sees no signal and a stopped (T)
 * process stays as it was. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "growbuf.h"
#include "pyframes.h"
#include "stacks_int.h"
#include "util.h"

struct snap {
	struct stack_proc pub;	/* first: stacks__free() gets it back */
	struct strpool pool;
};

/* One thread in one sample. */
struct tsample {
	int tid;
	char state;
	char name[16];
	char wchan[64];
	const char **kstack;
	int nr_kstack;
	const char *kstack_err;
	/* from the stop */
	bool seized, stopped, gone;
	bool group_stop;	/* stopped with its process (SIGSTOP), not by our interrupt */
	int stop_sig;		/* a signal the stop intercepted: given back at detach */
	const char *unwind_err;
	struct stack_frame *frames;
	uint8_t *api;
	int nr_frames;
	bool truncated;
	bool python;
	uint64_t wake_by;	/* its timed wait ends by then (CLOCK_MONOTONIC ns); 0: none */
	uint64_t read_ns;	/* when /proc was read for it (CLOCK_MONOTONIC) */
};

struct sample {
	int pid;
	const struct stack_opts *opts;
	struct strpool *pool;
	struct unwinder *uw;	/* NULL: no native frames (unwind_err says why) */
	const char *uw_err;
	struct pyproc *py;
	struct tsample *ts;
	int nr;
	uint64_t stopped_ns;
	const char *ptrace_err;
	int hold_ms;		/* TPTRACE_TEST_SNAPSHOT_HOLD_MS */
	const char *hold_while;	/* TPTRACE_TEST_SNAPSHOT_HOLD_WHILE: a path */
};

/* A thread across samples. */
struct tacc {
	struct stack_thread t;
	const uint8_t *first_api;	/* per frame of t.frames */
	int seen;		/* samples it was in */
	int compared;		/* samples whose frames were compared with the first */
	bool changed;
	uint64_t wake_by;	/* a timed call it was seen in ended by then; 0: none */
};


static void copy_str(char *dst, size_t size, const char *src)
{
	size_t n = strnlen(src, size - 1);

	memcpy(dst, src, n);
	dst[n] = 0;
}

/* ---- /proc: paths built here, parsed by the functions below ---- */

static ssize_t read_file(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n, got = 0;

	if (fd < 0)
		return -errno;
	while ((size_t)got < size - 1 && (n = read(fd, buf + got, size - 1 - got)) > 0)
		got += n;
	if (n < 0 && !got)
		got = -errno;
	close(fd);
	if (got >= 0)
		buf[got] = 0;
	return got;
}

/* "4242 (python3) S 1 ..." -> 'S'; the comm may hold spaces and ')' */
static char parse_stat_state(const char *stat)
{
	const char *p = strrchr(stat, ')');

	return p && p[1] == ' ' && p[2] ? p[2] : 0;
}

/* "[<0>] futex_wait_queue+0x60/0xa0\n[<0>] futex_wait+0x175/0x260\n" -> names */
static int parse_kstack(char *text, struct strpool *pool, const char ***out)
{
	const char **v = NULL;
	int n = 0;

	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		char *name = strchr(line, ']');
		const char **nv;

		name = name ? name + 1 : line;
		while (*name == ' ')
			name++;
		name[strcspn(name, "+ ")] = 0;
		if (!*name)
			continue;
		nv = realloc(v, (n + 1) * sizeof(*v));
		if (!nv)
			break;
		v = nv;
		v[n] = strpool__add(pool, name);
		if (v[n])
			n++;
	}
	*out = v;
	return n;
}

static bool read_mem(int pid, uint64_t addr, void *buf, size_t len)
{
	char path[64];
	int fd;
	bool ok;

	snprintf(path, sizeof(path), "/proc/%d/mem", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ok = pread(fd, buf, len, (off_t)addr) == (ssize_t)len;
	close(fd);
	return ok;
}

/* A timeout of the thread's blocking call as an end time on clk: relative ones from now (the
 * call began before now, so it ends no later), absolute ones as given. 0: none or unreadable. */
static uint64_t ts_end(int pid, uint64_t addr, bool absolute, clockid_t clk, bool timeval)
{
	struct timespec t;
	uint64_t now = clock_ns(CLOCK_MONOTONIC), ns;

	if (!addr)
		return 0;
	if (timeval) {
		struct { int64_t sec, usec; } tv;

		if (!read_mem(pid, addr, &tv, sizeof(tv)) || tv.sec < 0 || tv.usec < 0)
			return 0;
		t.tv_sec = tv.sec;
		t.tv_nsec = tv.usec * 1000;
	} else if (!read_mem(pid, addr, &t, sizeof(t)) || t.tv_sec < 0 || t.tv_nsec < 0) {
		return 0;
	}
	if (t.tv_sec > 100000000)
		t.tv_sec = 100000000;	/* no overflow; ends "never" as far as samples go */
	ns = (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
	if (!absolute)
		return now + ns;
	if (clk != CLOCK_MONOTONIC) {
		uint64_t c = clock_ns(clk);

		return ns > c ? now + (ns - c) : now;
	}
	return ns;
}

/*
 * When the thread sleeps in a call with a timeout (/proc/PID/task/TID/syscall, read before
 * the stop), the time by which that call returns: time.sleep (clock_nanosleep, or select in
 * CPython < 3.11), Event.wait(t) and Condition waits (futex with a timeout), poll/epoll. A
 * thread seen in such a call, and in the same place after the call's end, returned and called
 * again: a loop, not a hang. x86-64 syscall numbers.
 */
static uint64_t timed_wait_end(int pid, int tid)
{
	char path[96], buf[256];
	unsigned long long a[7] = {};
	long nr;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall", pid, tid);
	if (read_file(path, buf, sizeof(buf)) <= 0 || buf[0] < '0' || buf[0] > '9')
		return 0;
	if (sscanf(buf, "%ld %llx %llx %llx %llx %llx %llx", &nr, &a[1], &a[2], &a[3], &a[4],
		   &a[5], &a[6]) != 7)
		return 0;
	switch (nr) {
	case 35:	/* nanosleep(req, rem) */
		return ts_end(pid, a[1], false, CLOCK_MONOTONIC, false);
	case 230:	/* clock_nanosleep(clk, flags, req, rem) */
		return ts_end(pid, a[3], a[2] & 1, (clockid_t)a[1], false);
	case 23:	/* select(n, r, w, e, timeval) */
		return ts_end(pid, a[5], false, CLOCK_MONOTONIC, true);
	case 270:	/* pselect6(n, r, w, e, timespec, sig) */
	case 271:	/* ppoll(fds, n, timespec, sig) */
		return ts_end(pid, nr == 270 ? a[5] : a[3], false, CLOCK_MONOTONIC, false);
	case 7:		/* poll(fds, n, ms) */
	case 232:	/* epoll_wait(fd, ev, n, ms) */
	case 281: {	/* epoll_pwait(fd, ev, n, ms, sig) */
		int ms = (int)(nr == 7 ? a[3] : a[4]);

		return ms >= 0 ? clock_ns(CLOCK_MONOTONIC) + (uint64_t)ms * 1000000ULL : 0;
	}
	case 202: {	/* futex(uaddr, op, val, timeout, ...) */
		int op = (int)a[2] & 127, rt = (int)a[2] & 256;

		if (op == 0)		/* FUTEX_WAIT: relative */
			return ts_end(pid, a[4], false, CLOCK_MONOTONIC, false);
		if (op == 9)		/* FUTEX_WAIT_BITSET: absolute */
			return ts_end(pid, a[4], true, rt ? CLOCK_REALTIME : CLOCK_MONOTONIC, false);
		return 0;
	}
	default:
		return 0;
	}
}

static void read_thread_proc(int pid, struct tsample *ts, struct strpool *pool)
{
	char path[96], buf[8192];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, ts->tid);
	if (read_file(path, buf, sizeof(buf)) > 0)
		ts->state = parse_stat_state(buf);
	else
		ts->gone = true;
	ts->read_ns = clock_ns(CLOCK_MONOTONIC);
	/* stopped by someone else (SIGSTOP, a debugger): its timeouts do not run out for it;
	 * a running one reads "running", a runnable one still shows its call */
	if (ts->state == 'S' || ts->state == 'D' || ts->state == 'R')
		ts->wake_by = timed_wait_end(pid, ts->tid);
	snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", pid, ts->tid);
	if (read_file(path, buf, sizeof(buf)) > 0) {
		buf[strcspn(buf, "\n")] = 0;
		copy_str(ts->name, sizeof(ts->name), buf);
	}
	snprintf(path, sizeof(path), "/proc/%d/task/%d/wchan", pid, ts->tid);
	if (read_file(path, buf, sizeof(buf)) > 0 && strcmp(buf, "0"))
		copy_str(ts->wchan, sizeof(ts->wchan), buf);
	snprintf(path, sizeof(path), "/proc/%d/task/%d/stack", pid, ts->tid);
	n = read_file(path, buf, sizeof(buf));
	if (n >= 0) {
		ts->nr_kstack = parse_kstack(buf, pool, &ts->kstack);
	} else {
		ts->nr_kstack = -1;
		ts->kstack_err = strpool__addf(pool, "%s: %s", path, strerror((int)-n));
	}
}

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

/* Thread ids of pid, sorted. -errno when the process cannot be listed. */
static int list_tids(int pid, int **out)
{
	char path[64];
	struct dirent *de;
	int *v = NULL, n = 0, cap = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	d = opendir(path);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		int tid = atoi(de->d_name);

		if (tid <= 0)
			continue;
		if (ARRAY_RESERVE(v, cap, n + 1, 64)) {
			closedir(d);
			free(v);
			return -ENOMEM;
		}
		v[n++] = tid;
	}
	closedir(d);
	qsort(v, n, sizeof(*v), cmp_int);
	*out = v;
	return n;
}

/* The value after key in the thread's /proc/.../status (in buf), or NULL. */
static const char *status_field(int pid, int tid, const char *key, char *buf, size_t size)
{
	char path[96];
	const char *p;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", pid, tid);
	if (read_file(path, buf, size) <= 0)
		return NULL;
	p = strstr(buf, key);
	return p ? p + strlen(key) : NULL;
}

static int status_int(int pid, int tid, const char *key)
{
	char buf[4096];
	const char *v = status_field(pid, tid, key, buf, sizeof(buf));

	return v ? atoi(v) : -1;
}

/* Whether a SIGTRAP waits in the thread's own pending set ("SigPnd", hex). */
static bool sigtrap_pending(int pid, int tid)
{
	char buf[4096];
	const char *v = status_field(pid, tid, "\nSigPnd:", buf, sizeof(buf));

	return v && (strtoull(v, NULL, 16) & (1ULL << (SIGTRAP - 1)));
}

/* Why PTRACE_SEIZE said EPERM, in one line. */
static const char *seize_error(int pid, int tid, struct strpool *pool)
{
	int tracer = status_int(pid, tid, "TracerPid:");
	char path[64], comm[64] = "";

	if (tracer > 0) {
		snprintf(path, sizeof(path), "/proc/%d/comm", tracer);
		if (read_file(path, comm, sizeof(comm)) > 0)
			comm[strcspn(comm, "\n")] = 0;
		return strpool__addf(pool, "already traced by pid %d (%s)", tracer,
				     comm[0] ? comm : "?");
	}
	/* Yama's ptrace_scope 1-3 forbids what root-less (or, at 3, any) tracers may attach */
	if (read_file("/proc/sys/kernel/yama/ptrace_scope", comm, sizeof(comm)) > 0 &&
	    atoi(comm) > 0)
		return strpool__addf(pool, "ptrace: %s (kernel.yama.ptrace_scope = %d)",
				     strerror(EPERM), atoi(comm));
	return strpool__addf(pool, "ptrace: %s", strerror(EPERM));
}

/* Whether tid's tracer is one of our own threads, or one that just ended: a thread of ours
 * that ended lets go of its tracees only late in its exit (pthread_join returns before),
 * and TracerPid names that thread, not our pid. */
static bool traced_by_us(int pid, int tid)
{
	int tracer = status_int(pid, tid, "TracerPid:");
	char path[64];

	if (tracer <= 0 || tracer == getpid())
		return tracer > 0;
	snprintf(path, sizeof(path), "/proc/self/task/%d", tracer);
	if (!access(path, F_OK))
		return true;
	/* gone already, whoever it was: its tracees are being let go */
	snprintf(path, sizeof(path), "/proc/%d", tracer);
	return access(path, F_OK) && errno == ENOENT;
}

/* ---- the stop: runs in its own thread, the tracer ---- */

static void seize(struct sample *s, struct tsample *t)
{
	for (int tries = 0;; tries++) {
		int e;

		if (!ptrace(PTRACE_SEIZE, t->tid, 0, 0)) {
			t->seized = true;
			return;
		}
		e = errno;
		if (e == ESRCH) {
			t->gone = true;
			t->unwind_err = strpool__add(s->pool, "thread exited before it stopped");
			return;
		}
		/* the previous sample's tracer thread may still be on its way out of the kernel
		 * (a loaded machine: up to 200 ms) */
		if (e == EPERM && tries < 200 && traced_by_us(s->pid, t->tid)) {
			sleep_ms(1);
			continue;
		}
		if (e == EPERM) {
			t->unwind_err = seize_error(s->pid, t->tid, s->pool);
			if (!s->ptrace_err)
				s->ptrace_err = t->unwind_err;
		} else {
			t->unwind_err = strpool__addf(s->pool, "ptrace: %s", strerror(e));
		}
		return;
	}
}

/* Between two looks for a stop: yield the CPU for the first 20, then sleep 50 us each. */
static void pause_spin(int spins)
{
	if (spins > 20)
		usleep(50);
	else
		sched_yield();
}

/* Waits (bounded) until every interrupted thread reports its stop. */
static void wait_stops(struct sample *s)
{
	uint64_t deadline = clock_ns(CLOCK_MONOTONIC) + s->opts->stop_timeout_ms * 1000000ULL;
	int spins = 0;

	for (;;) {
		int pending = 0;

		for (int i = 0; i < s->nr; i++) {
			struct tsample *t = &s->ts[i];
			int st, r;

			if (!t->seized || t->stopped || t->gone)
				continue;
			r = waitpid(t->tid, &st, __WALL | WNOHANG);
			if (r == 0) {
				pending++;
			} else if (r < 0 || WIFEXITED(st) || WIFSIGNALED(st)) {
				t->gone = true;
				t->unwind_err = strpool__add(s->pool, "thread exited before it stopped");
			} else if (WIFSTOPPED(st)) {
				t->stopped = true;
				/* our interrupt or a group stop: nothing to give back; any other
				 * stop intercepted a signal on its way in */
				if ((st >> 16) != PTRACE_EVENT_STOP)
					t->stop_sig = WSTOPSIG(st);
				else if (WSTOPSIG(st) != SIGTRAP)
					t->group_stop = true;	/* its process was stopped */
			}
		}
		if (!pending || clock_ns(CLOCK_MONOTONIC) > deadline)
			break;
		pause_spin(++spins);
	}
}

/* Waits (bounded by the stop timeout) for t's next stop after a single step; false when it
 * exited or did not stop (then marked so, as wait_stops does). */
static bool wait_step(struct sample *s, struct tsample *t, int *status)
{
	uint64_t deadline = clock_ns(CLOCK_MONOTONIC) + s->opts->stop_timeout_ms * 1000000ULL;
	bool interrupted = false;

	for (int spins = 0;; spins++) {
		int r = waitpid(t->tid, status, __WALL | WNOHANG);

		if (r == t->tid && WIFSTOPPED(*status))
			return true;
		if (r < 0 || r == t->tid) {
			t->stopped = false;
			t->gone = true;
			t->unwind_err = strpool__add(s->pool, "thread exited while it stopped");
			return false;
		}
		if (clock_ns(CLOCK_MONOTONIC) > deadline) {
			if (interrupted) {
				/* stays attached until this thread exits, which detaches it */
				t->stopped = false;
				t->unwind_err = strpool__add(s->pool, "did not stop again after a single "
							     "step out of the uretprobe trampoline");
				return false;
			}
			/* a loaded host may not have run the step yet: the interrupt stops it
			 * as soon as it does (it cannot block in the trampoline), so it gets ten
			 * times the stop timeout (a thread left running stepped is killed by its
			 * trap once this tracer is gone) */
			ptrace(PTRACE_INTERRUPT, t->tid, 0, 0);
			interrupted = true;
			deadline = clock_ns(CLOCK_MONOTONIC) + 10ULL * s->opts->stop_timeout_ms * 1000000ULL;
		}
		pause_spin(spins);
	}
}

/* After a single step that reported another stop (our interrupt after the stop timeout, a
 * group stop, another signal) the step's trap may have fired all the same: its SIGTRAP then
 * waits in the thread's pending set, reported after that stop, and a detach would leave it
 * to kill the process (a rank of a healthy 32 x 8 job died so, on a host at load 170). It is
 * taken here: resumed, the thread stops at once to deliver it (nothing runs before a pending
 * signal), and it is dropped like the step's own. A signal the thread stops for on the way
 * is kept for the detach (one only). False: it could not be taken (the thread did not stop
 * again, or two signals would need giving back); a thread still stopped is then detached with
 * the trap pending, as before this existed. */
static bool take_step_trap(struct sample *s, struct tsample *t)
{
	for (int tries = 0; tries < 4 && sigtrap_pending(s->pid, t->tid); tries++) {
		int status;

		/* resumed with no signal: a signal stop's own signal is in stop_sig */
		if (ptrace(PTRACE_CONT, t->tid, 0, 0) || !wait_step(s, t, &status))
			return false;
		if (status >> 16 == 0 && WSTOPSIG(status) == SIGTRAP)
			return true;
		if (status >> 16 == 0) {
			if (t->stop_sig && t->stop_sig != WSTOPSIG(status))
				return false;	/* two signals to give back: cannot */
			t->stop_sig = WSTOPSIG(status);
		}
	}
	return !sigtrap_pending(s->pid, t->tid);
}

/* A thread stopped inside the uretprobe return trampoline (it is returning from a probed
 * call: the pending instance half handed back, the return address in a register or a stack
 * word no CFI describes) cannot be unwound there. It is single-stepped out, through the few
 * instructions it was about to run anyway (x86-64: three pushes, the uretprobe syscall, two
 * pops and a ret), and unwound in the caller it returns to. Only from our own interrupt stop:
 * a stop that intercepted a signal keeps it for the detach, and the frame stays marked
 * unrecoverable. */
static void step_out_of_trampoline(struct sample *s, struct tsample *t)
{
	bool stepped = false;

	/* a thread of a process stopped (SIGSTOP) stays where it is */
	for (int i = 0; i <= 16 && t->stopped && !t->stop_sig && !t->group_stop; i++) {
		struct user_regs_struct regs;
		int status;

		if (ptrace(PTRACE_GETREGS, t->tid, 0, &regs))
			break;
		if (!unwinder__in_trampoline(s->uw, regs.rip)) {
			/* counted once out: one that stays in is an unrecoverable frame */
			if (stepped)
				unwinder__stepped_out(s->uw);
			break;
		}
		if (i == 16 || ptrace(PTRACE_SINGLESTEP, t->tid, 0, 0) || !wait_step(s, t, &status))
			break;
		stepped = true;
		/* tests: the race's outcome made at will, a step trap left pending behind the
		 * stop reported (the interrupt of a step the stop timeout gave up on) */
		if (getenv("TPTRACE_TEST_STEP_TRAP_PENDING") && status >> 16 == 0 &&
		    WSTOPSIG(status) == SIGTRAP && !syscall(SYS_tgkill, s->pid, t->tid, SIGTRAP))
			status = PTRACE_EVENT_STOP << 16 | SIGTRAP << 8 | 0x7f;
		/* the step's own SIGTRAP is dropped (never given back at the detach); another
		 * signal that came in meanwhile is kept for it */
		if (status >> 16 == 0 && WSTOPSIG(status) != SIGTRAP)
			t->stop_sig = WSTOPSIG(status);
		if (!(status >> 16 == 0 && WSTOPSIG(status) == SIGTRAP) && !take_step_trap(s, t))
			break;
	}
}

static void read_stopped(struct sample *s, struct tsample *t, struct py_frame *pybuf)
{
	int max = s->opts->max_frames;
	struct native_stack ns = { 0 };
	struct user_regs_struct regs;
	uint64_t fs_base = 0;
	int nr_py = 0;
	bool cut, no_eval, leftover;

	bool regs_ok = !ptrace(PTRACE_GETREGS, t->tid, 0, &regs);

	if (regs_ok)
		fs_base = regs.fs_base;
	/* libdwfl 0.188 asserts (aborting tptrace) on the next thread after one whose registers
	 * it could not read (pid_set_initial_registers leaves tid_attached set): a thread that
	 * is gone (its process exiting) is never handed to it */
	if (s->uw && regs_ok) {
		unwinder__thread(s->uw, t->tid, max, &ns);
	} else {
		ns.err = s->uw ? "registers unreadable: the thread is gone" : s->uw_err;
	}
	if (s->py) {
		nr_py = pyframes__thread(s->py, t->tid, fs_base, pybuf, max);
		t->python = nr_py >= 0;
		if (nr_py < 0)
			nr_py = 0;
	}
	t->unwind_err = ns.err;
	t->truncated = ns.truncated;
	if (!nr_py) {
		t->frames = ns.frames;
		t->api = ns.api;
		t->nr_frames = ns.nr;
		return;
	}
	t->frames = calloc(max, sizeof(*t->frames));
	t->api = calloc(max, 1);
	if (t->frames && t->api)
		t->nr_frames = stacks__merge_python(ns.frames, ns.api, ns.nr, pybuf, nr_py, s->pool,
						    t->frames, t->api, max, &cut, &no_eval, &leftover);
	t->truncated |= cut;
	if (no_eval)
		t->unwind_err = strpool__add(s->pool, ns.err ? ns.err :
					     "no _PyEval_EvalFrame frame unwound: Python frames put innermost");
	else if (leftover && !t->unwind_err)
		t->unwind_err = strpool__add(s->pool,
					     "native stack cut short: outer Python frames put outermost");
	free(ns.frames);
	free(ns.api);
}

static void *stop_and_read(void *arg)
{
	struct sample *s = arg;
	struct py_frame *pybuf = s->py ? calloc(s->opts->max_frames, sizeof(*pybuf)) : NULL;
	uint64_t t0, t1;

	for (int i = 0; i < s->nr; i++) {
		struct tsample *t = &s->ts[i];

		if (t->gone)
			continue;
		if (t->state == 'Z' || t->state == 'X') {
			t->unwind_err = strpool__add(s->pool, "zombie: the thread has exited");
			continue;
		}
		seize(s, t);
	}
	t0 = clock_ns(CLOCK_MONOTONIC);
	for (int i = 0; i < s->nr; i++) {
		struct tsample *t = &s->ts[i];

		if (t->seized && ptrace(PTRACE_INTERRUPT, t->tid, 0, 0)) {
			t->gone = true;
			t->unwind_err = strpool__add(s->pool, "thread exited before it stopped");
		}
	}
	wait_stops(s);
	unwinder__sample_begin(s->uw);
	for (int i = 0; s->uw && i < s->nr; i++)
		step_out_of_trampoline(s, &s->ts[i]);
	for (int i = 0; i < s->nr; i++) {
		struct tsample *t = &s->ts[i];

		if (t->stopped)
			read_stopped(s, t, pybuf);
		else if (t->seized && !t->gone && !t->unwind_err)
			/* stays attached until this thread exits, which detaches it */
			t->unwind_err = strpool__addf(s->pool,
						      "did not stop within %d ms (state %c): kernel stack only",
						      s->opts->stop_timeout_ms, t->state ? t->state : '?');
	}
	if (s->hold_ms)
		sleep_ms(s->hold_ms);
	/* a test's handshake: the threads stay stopped while that file exists */
	while (s->hold_while && !access(s->hold_while, F_OK))
		sleep_ms(5);
	for (int i = 0; i < s->nr; i++) {
		struct tsample *t = &s->ts[i];

		if (t->stopped)
			ptrace(PTRACE_DETACH, t->tid, 0, (void *)(long)t->stop_sig);
	}
	t1 = clock_ns(CLOCK_MONOTONIC);
	s->stopped_ns = t1 - t0;
	free(pybuf);
	return NULL;
}

/* ---- the snapshot ---- */

static void read_proc_info(struct stack_proc *sp)
{
	char path[64], buf[65536];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/comm", sp->pid);
	if (read_file(path, buf, sizeof(buf)) > 0) {
		buf[strcspn(buf, "\n")] = 0;
		copy_str(sp->comm, sizeof(sp->comm), buf);
	}
	snprintf(path, sizeof(path), "/proc/%d/cmdline", sp->pid);
	n = read_file(path, buf, sizeof(buf));
	if (n > 0) {
		for (ssize_t i = 0; i < n - 1; i++)
			if (!buf[i])
				buf[i] = ' ';
		sp->cmdline = strdup(buf);
	}
	sp->rank = sp->world_size = sp->local_rank = -1;
	snprintf(path, sizeof(path), "/proc/%d/environ", sp->pid);
	n = read_file(path, buf, sizeof(buf));
	for (ssize_t i = 0; i < n; i += strlen(buf + i) + 1) {
		if (!strncmp(buf + i, "RANK=", 5))
			sp->rank = atoi(buf + i + 5);
		else if (!strncmp(buf + i, "WORLD_SIZE=", 11))
			sp->world_size = atoi(buf + i + 11);
		else if (!strncmp(buf + i, "LOCAL_RANK=", 11))
			sp->local_rank = atoi(buf + i + 11);
	}
}

static void tsample_free(struct tsample *t)
{
	free(t->kstack);
	free(t->frames);
	free(t->api);
}

static struct tacc *find_acc(struct tacc *acc, int nr, int tid)
{
	for (int i = 0; i < nr; i++)
		if (acc[i].t.tid == tid)
			return &acc[i];
	return NULL;
}

static bool loop_can_progress(const struct stack_thread *t)
{
	return t->where == WHERE_PYTHON || t->where == WHERE_IDLE || t->where == WHERE_RUNNING ||
	       t->where == WHERE_UNKNOWN;
}

/* Folds one sample into the threads seen so far: a new thread takes this sample's record; a
 * known one compares its frames with its first sample. Takes what it keeps from t. */
static int fold_sample(struct stack_proc *sp, struct tacc **accp, int *nr_acc, struct tsample *t)
{
	struct stack_thread cur = {
		.tid = t->tid, .state = t->state, .frames = t->frames, .nr_frames = t->nr_frames,
	};
	struct tacc *a = find_acc(*accp, *nr_acc, t->tid);

	copy_str(cur.wchan, sizeof(cur.wchan), t->wchan);
	stacks__classify(&cur, t->api);
	if (a) {
		a->seen++;
		if (t->stopped && a->t.nr_frames) {
			a->compared++;
			if (!stacks__same_stack(a->t.frames, a->t.nr_frames, a->t.api,
						cur.frames, cur.nr_frames, cur.api))
				a->changed = true;
			/* the same place, but a timed call it was seen in has ended since: it
			 * returned and called again (time.sleep(0.01) in a loop), not stuck. Not
			 * inside a CUDA, driver, NCCL or allocator call: one that never returns
			 * makes no progress, whatever it polls on inside */
			else if (a->wake_by && a->wake_by < t->read_ns && loop_can_progress(&cur))
				a->changed = true;
		}
		if (t->wake_by && (!a->wake_by || t->wake_by < a->wake_by))
			a->wake_by = t->wake_by;
		tsample_free(t);
		return 0;
	}
	a = realloc(*accp, (*nr_acc + 1) * sizeof(*a));
	if (!a)
		return -ENOMEM;
	*accp = a;
	a = &a[(*nr_acc)++];
	memset(a, 0, sizeof(*a));
	a->t = cur;
	memcpy(a->t.name, t->name, sizeof(a->t.name));
	a->t.kstack = t->kstack;
	a->t.nr_kstack = t->nr_kstack;
	a->t.kstack_err = t->kstack_err;
	a->t.truncated = t->truncated;
	a->t.unwind_err = t->unwind_err;
	a->t.main = t->tid == sp->pid;
	a->t.python = t->python;
	a->first_api = t->api;
	a->seen = 1;
	a->wake_by = t->wake_by;
	a->compared = t->stopped && t->nr_frames ? 1 : 0;
	return 0;
}

static int take_sample(struct stack_proc *sp, struct sample *s, struct tacc **acc, int *nr_acc)
{
	int *tids = NULL, n = list_tids(sp->pid, &tids), ret = 0;
	pthread_t tracer;

	if (n <= 0) {
		free(tids);
		return n < 0 ? n : -ESRCH;
	}
	s->ts = calloc(n, sizeof(*s->ts));
	if (!s->ts) {
		free(tids);
		return -ENOMEM;
	}
	s->nr = n;
	for (int i = 0; i < n; i++) {
		s->ts[i].tid = tids[i];
		read_thread_proc(sp->pid, &s->ts[i], s->pool);
	}
	free(tids);
	s->stopped_ns = 0;
	if (pthread_create(&tracer, NULL, stop_and_read, s)) {
		s->ptrace_err = strpool__add(s->pool, "cannot start the tracer thread");
	} else {
		pthread_join(tracer, NULL);
	}
	if (s->stopped_ns > sp->stopped_ns_max)
		sp->stopped_ns_max = s->stopped_ns;
	bool any = false;

	for (int i = 0; i < n; i++) {
		if (s->ts[i].gone && !s->ts[i].state) {
			tsample_free(&s->ts[i]);
			continue;
		}
		any |= !s->ts[i].gone && s->ts[i].state != 'Z' && s->ts[i].state != 'X';
		if (!ret)
			ret = fold_sample(sp, acc, nr_acc, &s->ts[i]);
		else
			tsample_free(&s->ts[i]);
	}
	free(s->ts);
	s->ts = NULL;
	if (!any)
		sp->exited = true;
	return ret;
}

static int cmp_tacc(const void *a, const void *b)
{
	return ((const struct tacc *)a)->t.tid - ((const struct tacc *)b)->t.tid;
}

struct stack_proc *stacks__take(int pid, const struct stack_opts *opts, char *err, size_t errsz)
{
	struct stack_opts o = opts ? *opts : (struct stack_opts){ 0 };
	struct snap *snap = calloc(1, sizeof(*snap));
	struct stack_proc *sp = &snap->pub;
	struct sample s = { .pid = pid, .opts = &o };
	struct tacc *acc = NULL;
	int nr_acc = 0, ret = 0;
	char path[64], uerr[256] = "", perr[256] = "";
	const char *hold;
	DIR *d;

	if (!snap) {
		snprintf(err, errsz, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	o.samples = o.samples > 0 ? o.samples : 1;
	o.interval_ms = o.interval_ms > 0 ? o.interval_ms : 200;
	o.max_frames = o.max_frames > 0 ? o.max_frames : 128;
	o.stop_timeout_ms = o.stop_timeout_ms > 0 ? o.stop_timeout_ms : 100;
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	d = opendir(path);
	if (!d) {
		ret = errno == ENOENT ? ESRCH : errno;
		snprintf(err, errsz, "pid %d: %s", pid, strerror(ret));
		free(snap);
		errno = ret;
		return NULL;
	}
	closedir(d);

	sp->pid = pid;
	sp->interval_ms = o.interval_ms;
	s.pool = &snap->pool;
	hold = getenv("TPTRACE_TEST_SNAPSHOT_HOLD_MS");
	s.hold_ms = hold ? atoi(hold) : 0;
	s.hold_while = getenv("TPTRACE_TEST_SNAPSHOT_HOLD_WHILE");
	read_proc_info(sp);
	/* the slow part (maps, ELF files) happens here, before anything is stopped */
	s.uw = unwinder__new(pid, s.pool, uerr, sizeof(uerr));
	if (!s.uw)
		s.uw_err = strpool__add(s.pool, uerr);
	if (!o.no_python) {
		s.py = pyframes__open(pid, perr, sizeof(perr));
		if (s.py)
			sp->python = strpool__add(s.pool, pyframes__version(s.py));
		else if (perr[0])
			sp->python_err = strpool__add(s.pool, perr);
	}

	for (int i = 0; i < o.samples; i++) {
		if (i)
			sleep_ms(o.interval_ms);
		if (!i) {
			sp->mono_ns = clock_ns(CLOCK_MONOTONIC);
			sp->real_ns = clock_ns(CLOCK_REALTIME);
		}
		ret = take_sample(sp, &s, &acc, &nr_acc);
		if (ret == -ENOMEM)
			break;
		if (ret) {
			/* gone between samples: what was read is kept */
			sp->exited = true;
			ret = 0;
			break;
		}
		sp->samples++;
		if (sp->exited)
			break;
	}
	sp->ptrace_err = s.ptrace_err;
	if (s.uw) {
		struct unwind_stats st;

		unwinder__stats(s.uw, &st);
		sp->uret_resolved = st.resolved;
		sp->uret_unrecoverable = st.unrecoverable;
		sp->uret_reads = st.uret_reads;
		sp->uret_instances = st.instances;
		sp->uret_read_ns = st.uret_ns;
		sp->uret_stepped_out = st.stepped_out;
	}
	unwinder__free(s.uw);
	pyframes__free(s.py);
	if (ret == -ENOMEM) {
		snprintf(err, errsz, "out of memory");
		goto fail;
	}
	if (!nr_acc && !sp->samples) {
		snprintf(err, errsz, "pid %d: %s", pid, strerror(ESRCH));
		ret = -ESRCH;
		goto fail;
	}

	qsort(acc, nr_acc, sizeof(*acc), cmp_tacc);
	sp->threads = calloc(nr_acc ? nr_acc : 1, sizeof(*sp->threads));
	if (!sp->threads) {
		ret = -ENOMEM;
		snprintf(err, errsz, "out of memory");
		goto fail;
	}
	for (int i = 0; i < nr_acc; i++) {
		struct tacc *a = &acc[i];

		if (sp->samples < 2 || a->seen < sp->samples || a->compared < sp->samples)
			a->t.progress = PROGRESS_UNKNOWN;
		else
			a->t.progress = a->changed ? PROGRESS_YES : PROGRESS_NONE;
		free((void *)a->first_api);
		sp->threads[i] = a->t;
	}
	sp->nr_threads = nr_acc;
	free(acc);
	stacks__pick_issuing(sp);
	return sp;
fail:
	for (int i = 0; i < nr_acc; i++) {
		free(acc[i].t.frames);
		free(acc[i].t.kstack);
		free((void *)acc[i].first_api);
	}
	free(acc);
	stacks__free(sp);
	errno = -ret;
	return NULL;
}

void stacks__free(struct stack_proc *sp)
{
	struct snap *snap = (struct snap *)sp;

	if (!sp)
		return;
	for (int i = 0; i < sp->nr_threads; i++) {
		free(sp->threads[i].frames);
		free(sp->threads[i].kstack);
	}
	free(sp->threads);
	free(sp->cmdline);
	strpool__free(&snap->pool);
	free(snap);
}
