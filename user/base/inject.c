// SPDX-License-Identifier: MIT
/* ptrace injection into a running x86-64 process; see inject.h for the contract. */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "elfsym.h"
#include "inject.h"
#include "procmaps.h"

#define RED_ZONE 128
#define SCRATCH 4096		/* stack bytes below the red zone used for strings + return slot */
#define XSTATE_MAX 16384
#define CALL_TIMEOUT_MS 30000
#define RTLD_NOW_ 2

struct injector {
	int tid;
	int mem_fd;			/* /proc/<tid>/mem */
	struct user_regs_struct saved;
	uint8_t *xstate;		/* NT_X86_XSTATE (FPU/SSE/AVX), or fxsave when absent */
	size_t xstate_len;
	bool xstate_is_fx;
	int pending_sig;		/* a signal the target was about to get at attach */
	uint64_t scratch_lo;		/* [scratch_lo, scratch_lo + SCRATCH) saved in scratch_saved */
	uint8_t scratch_saved[SCRATCH];
	bool scratch_dirty;
	uint64_t dlopen_fn, dlsym_fn, dlclose_fn, dlerror_fn;
	int call_timeout_ms;
	char err[256];
};

__attribute__((format(printf, 2, 3)))
static int fail(struct injector *inj, const char *fmt, ...)
{
	va_list ap;
	int saved = errno;

	va_start(ap, fmt);
	vsnprintf(inj->err, sizeof(inj->err), fmt, ap);
	va_end(ap);
	errno = saved;
	return -1;
}

const char *injector__error(const struct injector *inj)
{
	return inj ? inj->err : "no injector";
}

/* /proc/sys/kernel/yama/ptrace_scope, or -1 when Yama is absent. */
static int inject_ptrace_scope(void)
{
	FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "re");
	int v = -1;

	if (!f)
		return -1;
	if (fscanf(f, "%d", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

/* TracerPid from /proc/<tid>/status, 0 when untraced or unknown. */
static int tracer_of(int tid)
{
	char path[64], line[256];
	int tracer = 0;
	FILE *f;

	if (procmaps__path(path, sizeof(path), tid, "status"))
		return 0;
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "TracerPid: %d", &tracer) == 1)
			break;
	fclose(f);
	return tracer;
}

/* ---- target memory ------------------------------------------------------------------- */

static int mem_write(struct injector *inj, uint64_t addr, const void *buf, size_t len)
{
	ssize_t n = pwrite(inj->mem_fd, buf, len, (off_t)addr);

	if (n != (ssize_t)len)
		return n < 0 ? -errno : -EFAULT;
	return 0;
}

static int mem_read(struct injector *inj, uint64_t addr, void *buf, size_t len)
{
	ssize_t n = pread(inj->mem_fd, buf, len, (off_t)addr);

	if (n != (ssize_t)len)
		return n < 0 ? -errno : -EFAULT;
	return 0;
}

/* ---- symbols ------------------------------------------------------------------------- */

static bool base_has_prefix(const char *path, const char *prefix)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	return !strncmp(base, prefix, strlen(prefix));
}

int injector__find_func(int pid, const char *lib, const char *name, uint64_t *addr)
{
	struct procmaps *maps = procmaps__load(pid);
	const struct elfsym_sym *sym;
	struct elfsym *es = NULL;
	const char *path = NULL;
	char fpath[4096];
	uint64_t off;
	int err = -ENOENT;

	if (!maps)
		return -errno;
	for (size_t i = 0; i < maps->nr && !path; i++)
		if (maps->vmas[i].path && maps->vmas[i].path[0] == '/' &&
		    base_has_prefix(maps->vmas[i].path, lib))
			path = maps->vmas[i].path;
	if (!path || procmaps__target_path(fpath, sizeof(fpath), pid, path))
		goto out;
	es = elfsym__open(fpath);
	if (!es)
		goto out;
	sym = elfsym__find_func(es, name);
	if (!sym || !sym->global || elfsym__vaddr_to_off(es, sym->vaddr, &off))
		goto out;
	/* the mapping of this file that holds the symbol's file offset */
	for (size_t i = 0; i < maps->nr; i++) {
		const struct vma *v = &maps->vmas[i];

		if (v->path && !strcmp(v->path, path) && off >= v->offset &&
		    off - v->offset < v->end - v->start) {
			*addr = v->start + (off - v->offset);
			err = 0;
			break;
		}
	}
out:
	elfsym__free(es);
	procmaps__free(maps);
	return err;
}

/* dlopen & co: libc exports them since glibc 2.34; older ones have libdl. */
static int find_dl_funcs(struct injector *inj)
{
	static const char *const libs[] = { "libc.so.6", "libdl.so.2" };
	struct { const char *name; uint64_t *addr; } fns[] = {
		{ "dlopen", &inj->dlopen_fn }, { "dlsym", &inj->dlsym_fn },
		{ "dlclose", &inj->dlclose_fn }, { "dlerror", &inj->dlerror_fn },
	};

	for (size_t f = 0; f < sizeof(fns) / sizeof(fns[0]); f++)
		for (size_t l = 0; l < 2 && !*fns[f].addr; l++)
			injector__find_func(inj->tid, libs[l], fns[f].name, fns[f].addr);
	if (!inj->dlopen_fn || !inj->dlsym_fn || !inj->dlclose_fn)
		return fail(inj, "no dlopen/dlsym/dlclose in libc.so.6 or libdl.so.2 of process %d "
			    "(statically linked?)", inj->tid), -ENOENT;
	return 0;
}

/* ---- attach / detach ----------------------------------------------------------------- */

static int save_xstate(struct injector *inj)
{
	struct iovec iov;

	inj->xstate = calloc(1, XSTATE_MAX);
	if (!inj->xstate)
		return -ENOMEM;
	iov.iov_base = inj->xstate;
	iov.iov_len = XSTATE_MAX;
	if (ptrace(PTRACE_GETREGSET, inj->tid, (void *)NT_X86_XSTATE, &iov) == 0) {
		inj->xstate_len = iov.iov_len;
		return 0;
	}
	if (ptrace(PTRACE_GETFPREGS, inj->tid, NULL, inj->xstate) == 0) {
		inj->xstate_is_fx = true;
		inj->xstate_len = sizeof(struct user_fpregs_struct);
		return 0;
	}
	return -errno;
}

static int restore_xstate(struct injector *inj)
{
	struct iovec iov = { inj->xstate, inj->xstate_len };

	if (!inj->xstate_len)
		return 0;
	if (inj->xstate_is_fx)
		return ptrace(PTRACE_SETFPREGS, inj->tid, NULL, inj->xstate) ? -errno : 0;
	return ptrace(PTRACE_SETREGSET, inj->tid, (void *)NT_X86_XSTATE, &iov) ? -errno : 0;
}

static int wait_stop(int tid, int *status, int timeout_ms)
{
	struct timespec ts = { 0, 200000 };

	for (int waited_us = 0;; waited_us += 200) {
		int r = waitpid(tid, status, __WALL | WNOHANG);

		if (r == tid)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
		if (waited_us / 1000 >= timeout_ms)
			return -ETIMEDOUT;
		nanosleep(&ts, NULL);
	}
}

/* Makes sure tid is in a ptrace stop, whatever became of it since it stopped for us. Running
 * (a call that did not return even to PTRACE_INTERRUPT): interrupted again. Dead (its process
 * killed while we held it): reaped, since a traced thread that died is a zombie only its
 * tracer can reap, and its process's parent (torchrun, a scheduler) would wait for it as
 * long as the recorder runs. 0 stopped (*sig: a signal on its way in, to give back), 1 gone,
 * or a negative errno. */
static int ensure_stopped(int tid, int *sig)
{
	struct user_regs_struct r;
	int status, e, dead;

	if (!ptrace(PTRACE_GETREGS, tid, NULL, &r))
		return 0;
	if (errno != ESRCH)
		return -errno;
	/* an exiting thread (a zombie: PTRACE_INTERRUPT still succeeds on it) is reaped once its
	 * process's other threads are gone, which a CUDA process's teardown on a loaded host
	 * may take a while for */
	dead = ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) != 0 || procmaps__gone(tid);
	e = wait_stop(tid, &status, dead ? 60000 : 5000);
	if (e == -ECHILD)
		return 1;	/* not ours any more */
	if (e)
		return e;
	if (WIFEXITED(status) || WIFSIGNALED(status))
		return 1;
	if (status >> 16 != PTRACE_EVENT_STOP && !*sig)
		*sig = WSTOPSIG(status);
	return 0;
}

/* Detaches tid with sig, or reaps it if it died meanwhile. 0 or a negative errno. */
static int release(int tid, int sig)
{
	for (int tries = 0; tries < 3; tries++) {
		int e;

		if (!ptrace(PTRACE_DETACH, tid, NULL, (void *)(long)sig))
			return 0;
		if (errno != ESRCH)
			return -errno;
		e = ensure_stopped(tid, &sig);
		if (e)
			return e > 0 ? 0 : e;
	}
	return -ESRCH;
}

struct injector *injector__attach(int tid, char *err, size_t errlen)
{
	struct injector *inj = calloc(1, sizeof(*inj));
	char path[64];
	const char *hold;
	int status, scope = inject_ptrace_scope(), e, tracer;

	if (!inj) {
		snprintf(err, errlen, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	inj->tid = tid;
	inj->mem_fd = -1;
	inj->call_timeout_ms = CALL_TIMEOUT_MS;
	if (scope == 3) {
		snprintf(err, errlen, "ptrace_scope=3 forbids attaching to any process "
			 "(/proc/sys/kernel/yama/ptrace_scope; only a reboot lowers it)");
		free(inj);
		errno = EPERM;
		return NULL;
	}
	tracer = tracer_of(tid);
	if (tracer) {
		snprintf(err, errlen, "process %d is already traced by pid %d (a debugger or strace?)",
			 tid, tracer);
		free(inj);
		errno = EBUSY;
		return NULL;
	}
	if (ptrace(PTRACE_SEIZE, tid, NULL, NULL)) {
		e = errno;
		if (e == EPERM && scope >= 1)
			snprintf(err, errlen, "cannot ptrace process %d: %s (ptrace_scope=%d%s)", tid,
				 strerror(e), scope, scope == 2 ? ": only CAP_SYS_PTRACE may attach" :
				 ": needs CAP_SYS_PTRACE or to be the parent");
		else
			snprintf(err, errlen, "cannot ptrace process %d: %s%s", tid, strerror(e),
				 e == EPERM ? " (needs root or CAP_SYS_PTRACE)" : "");
		free(inj);
		errno = e;
		return NULL;
	}
	if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL)) {
		e = errno;
		snprintf(err, errlen, "PTRACE_INTERRUPT of %d: %s", tid, strerror(e));
		goto fail_detach;
	}
	for (;;) {
		e = -wait_stop(tid, &status, 5000);
		if (e) {
			snprintf(err, errlen, "waiting for %d to stop: %s", tid, strerror(e));
			goto fail_detach;
		}
		if (WIFEXITED(status) || WIFSIGNALED(status)) {
			snprintf(err, errlen, "process %d exited while attaching", tid);
			free(inj);
			errno = ESRCH;
			return NULL;
		}
		if (status >> 16 == PTRACE_EVENT_STOP)
			break;	/* our interrupt (or a group stop): the thread is parked */
		/* signal-delivery-stop: keep the signal for the detach, stop here */
		inj->pending_sig = WSTOPSIG(status);
		break;
	}
	if (ptrace(PTRACE_GETREGS, tid, NULL, &inj->saved)) {
		e = errno;
		snprintf(err, errlen, "PTRACE_GETREGS of %d: %s", tid, strerror(e));
		goto fail_detach;
	}
	e = -save_xstate(inj);
	if (e) {
		snprintf(err, errlen, "saving FPU state of %d: %s", tid, strerror(e));
		goto fail_detach;
	}
	if (procmaps__path(path, sizeof(path), tid, "mem") ||
	    (inj->mem_fd = open(path, O_RDWR | O_CLOEXEC)) < 0) {
		e = errno;
		snprintf(err, errlen, "opening /proc/%d/mem: %s", tid, strerror(e));
		goto fail_detach;
	}
	inj->scratch_lo = (inj->saved.rsp - RED_ZONE - SCRATCH) & ~15ULL;
	if (mem_read(inj, inj->scratch_lo, inj->scratch_saved, SCRATCH)) {
		e = EFAULT;
		snprintf(err, errlen, "reading the stack of %d at 0x%" PRIx64 ": no room", tid,
			 inj->scratch_lo);
		goto fail_detach;
	}
	if (find_dl_funcs(inj)) {
		e = ENOENT;
		snprintf(err, errlen, "%s", inj->err);
		goto fail_detach;
	}
	/* a test's handshake: the thread stays stopped while that file exists */
	hold = getenv("TPTRACE_TEST_INJECT_HOLD_WHILE");
	while (hold && !access(hold, F_OK))
		nanosleep(&(struct timespec){ 0, 5000000 }, NULL);
	return inj;
fail_detach:
	release(tid, inj->pending_sig);
	if (inj->mem_fd >= 0)
		close(inj->mem_fd);
	free(inj->xstate);
	free(inj);
	errno = e;
	return NULL;
}

int injector__detach(struct injector *inj)
{
	int err = 0, e;

	if (!inj)
		return 0;
	e = ensure_stopped(inj->tid, &inj->pending_sig);
	if (e < 0)
		err = e;
	if (!e) {
		if (inj->scratch_dirty && mem_write(inj, inj->scratch_lo, inj->scratch_saved, SCRATCH))
			err = -EFAULT;
		/* orig_rax and rax as they were: an interrupted syscall is restarted by the kernel */
		if (ptrace(PTRACE_SETREGS, inj->tid, NULL, &inj->saved) && !err)
			err = -errno;
		if (restore_xstate(inj) && !err)
			err = -errno;
		e = release(inj->tid, inj->pending_sig);
		if (e && !err)
			err = e;
	}
	close(inj->mem_fd);
	free(inj->xstate);
	free(inj);
	return err;
}

/* ---- calls --------------------------------------------------------------------------- */

static int run_call(struct injector *inj, uint64_t func, const uint64_t a[6], uint64_t sp,
		    uint64_t *ret)
{
	struct user_regs_struct regs = inj->saved;
	uint64_t zero = 0;
	int status, err, sig = 0;

	/* at function entry rsp + 8 is 16-byte aligned; [rsp] is the return address 0 */
	sp = (sp & ~15ULL) - 8;
	err = mem_write(inj, sp, &zero, sizeof(zero));
	if (err)
		return fail(inj, "writing the stack of %d: %s", inj->tid, strerror(-err)), err;
	inj->scratch_dirty = true;
	regs.rip = func;
	regs.rsp = sp;
	regs.rdi = a[0], regs.rsi = a[1], regs.rdx = a[2];
	regs.rcx = a[3], regs.r8 = a[4], regs.r9 = a[5];
	regs.rax = 0;		/* no vector registers for variadic callees */
	regs.orig_rax = -1;	/* not in a syscall: no restart while the call runs */
	if (ptrace(PTRACE_SETREGS, inj->tid, NULL, &regs))
		return fail(inj, "PTRACE_SETREGS: %s", strerror(errno)), -errno;
	for (;;) {
		if (ptrace(PTRACE_CONT, inj->tid, NULL, (void *)(long)sig))
			return fail(inj, "PTRACE_CONT: %s", strerror(errno)), -errno;
		sig = 0;
		err = wait_stop(inj->tid, &status, inj->call_timeout_ms);
		if (err == -ETIMEDOUT) {
			/* cannot safely unwind a call in progress: stop it where it is */
			ptrace(PTRACE_INTERRUPT, inj->tid, NULL, NULL);
			wait_stop(inj->tid, &status, 5000);
			return fail(inj, "call at 0x%" PRIx64 " in %d did not return in %.1f s", func,
				    inj->tid, inj->call_timeout_ms / 1000.0), -ETIMEDOUT;
		}
		if (err)
			return fail(inj, "waitpid(%d): %s", inj->tid, strerror(-err)), err;
		if (WIFEXITED(status) || WIFSIGNALED(status))
			return fail(inj, "process %d died during the injected call", inj->tid), -ESRCH;
		if (status >> 16 == PTRACE_EVENT_STOP)
			continue;	/* group stop (SIGSTOP to the process): keep going */
		sig = WSTOPSIG(status);
		if (sig == SIGSEGV) {
			if (ptrace(PTRACE_GETREGS, inj->tid, NULL, &regs))
				return fail(inj, "PTRACE_GETREGS: %s", strerror(errno)), -errno;
			if (regs.rip == 0) {
				*ret = regs.rax;
				return 0;
			}
			return fail(inj, "injected call at 0x%" PRIx64 " crashed in %d at rip 0x%llx",
				    func, inj->tid, regs.rip), -EFAULT;
		}
		/* any other signal belongs to the target: deliver it, its handler runs on our frame */
	}
}

int injector__call_str(struct injector *inj, uint64_t func, const char *s0, const char *s1,
		       const uint64_t args[6], uint64_t *ret)
{
	uint64_t a[6] = { 0 }, top = inj->scratch_lo + SCRATCH;
	const char *strs[2] = { s0, s1 };
	int err;

	if (args)
		memcpy(a, args, sizeof(a));
	for (int i = 0; i < 2; i++) {
		size_t len;

		if (!strs[i])
			continue;
		len = strlen(strs[i]) + 1;
		if (top - len < inj->scratch_lo + 256)
			return fail(inj, "argument string too long (%zu bytes)", len), -E2BIG;
		top -= len;
		err = mem_write(inj, top, strs[i], len);
		if (err)
			return fail(inj, "writing the stack of %d: %s", inj->tid, strerror(-err)), err;
		inj->scratch_dirty = true;
		a[i] = top;
	}
	return run_call(inj, func, a, top, ret);
}

int injector__call_out(struct injector *inj, uint64_t func, const uint64_t args[6], int out_arg,
		       void *out, size_t out_len, uint64_t *ret)
{
	uint64_t a[6] = { 0 }, top = inj->scratch_lo + SCRATCH - ((out_len + 15) & ~(size_t)15);
	int err;

	if (out_arg < 0 || out_arg > 5 || out_len > 1024)
		return -EINVAL;
	if (args)
		memcpy(a, args, sizeof(a));
	memset(out, 0, out_len);
	err = mem_write(inj, top, out, out_len);
	if (err)
		return fail(inj, "writing the stack of %d: %s", inj->tid, strerror(-err)), err;
	inj->scratch_dirty = true;
	a[out_arg] = top;
	err = run_call(inj, func, a, top, ret);
	if (err)
		return err;
	err = mem_read(inj, top, out, out_len);
	return err ? (fail(inj, "reading the result: %s", strerror(-err)), err) : 0;
}

int injector__write(struct injector *inj, uint64_t addr, const void *buf, size_t len)
{
	int err = mem_write(inj, addr, buf, len);

	return err ? (fail(inj, "writing 0x%" PRIx64 " in %d: %s", addr, inj->tid,
			   strerror(-err)), err) : 0;
}

uint64_t injector__pc(const struct injector *inj)
{
	return inj->saved.rip;
}

long injector__syscall(const struct injector *inj)
{
	return (long)inj->saved.orig_rax;
}

void injector__set_call_timeout(struct injector *inj, int ms)
{
	inj->call_timeout_ms = ms > 0 ? ms : CALL_TIMEOUT_MS;
}

int injector__call(struct injector *inj, uint64_t func, const uint64_t args[6], uint64_t *ret)
{
	return injector__call_str(inj, func, NULL, NULL, args, ret);
}

/* The target's dlerror() text, or a generic line. */
static void dl_error(struct injector *inj, const char *what, const char *arg)
{
	uint64_t zero[6] = { 0 }, msg = 0;
	char text[200] = "";

	if (inj->dlerror_fn && !injector__call(inj, inj->dlerror_fn, zero, &msg) && msg) {
		/* read up to the end of the page at most: the string may end a mapping */
		size_t n = sizeof(text) - 1, to_page = 4096 - (msg & 4095);

		if (n > to_page)
			n = to_page;
		if (mem_read(inj, msg, text, n))
			text[0] = '\0';
		text[n] = '\0';
	}
	fail(inj, "%s(%s) in process %d failed: %s", what, arg, inj->tid,
	     text[0] ? text : "no dlerror() text");
}

int injector__dlopen(struct injector *inj, const char *path, int flags, uint64_t *handle)
{
	uint64_t a[6] = { 0, (uint64_t)(flags ? flags : RTLD_NOW_) };
	int err = injector__call_str(inj, inj->dlopen_fn, path, NULL, a, handle);

	if (err)
		return err;
	if (!*handle) {
		dl_error(inj, "dlopen", path);
		return -ENOENT;
	}
	return 0;
}

int injector__dlsym(struct injector *inj, uint64_t handle, const char *name, uint64_t *addr)
{
	uint64_t a[6] = { handle };
	int err;

	/* name goes second: injector__call_str puts s1 in rsi */
	err = injector__call_str(inj, inj->dlsym_fn, NULL, name, a, addr);
	if (err)
		return err;
	if (!*addr) {
		dl_error(inj, "dlsym", name);
		return -ENOENT;
	}
	return 0;
}

int injector__dlclose(struct injector *inj, uint64_t handle)
{
	uint64_t a[6] = { handle }, ret = 0;
	int err = injector__call(inj, inj->dlclose_fn, a, &ret);

	if (err)
		return err;
	if ((int)ret != 0) {
		dl_error(inj, "dlclose", "handle");
		return -EINVAL;
	}
	return 0;
}
