/* SPDX-License-Identifier: MIT */
/*
 * Run functions inside a running process with ptrace (x86-64): dlopen a library, look a symbol
 * up, call it, dlclose. One thread of the target (the main thread by default) is seized and
 * interrupted; its registers (general, orig_rax, FPU/SSE/AVX state) and the stack bytes used
 * for arguments are saved and restored exactly, so the interrupted code, including a blocking
 * syscall, resumes as if nothing happened: the syscall is restarted by the kernel with the
 * original registers (calls run with orig_rax = -1 so no restart happens in between). The
 * other threads keep running.
 *
 * Each call returns into address 0; the SIGSEGV at rip 0 is the "call done" signal and is
 * never delivered. Signals that arrive during a call are passed on to the target's handlers.
 * Caveat common to every injector: the interrupted thread must not hold a lock the injected
 * code needs (malloc arena, loader lock); a thread blocked in a syscall holds none of those.
 */
#ifndef TPTRACE_INJECT_H
#define TPTRACE_INJECT_H

#include <stddef.h>
#include <stdint.h>

struct injector;

/* Seize thread tid (a thread of the target; its pid for the main thread) and stop it.
 * NULL and errno; err gets one line (Yama ptrace_scope, another tracer, EPERM, ...). */
struct injector *injector__attach(int tid, char *err, size_t errlen);
/* Restores registers and memory exactly and detaches; frees inj. 0 or -errno. NULL is safe. */
int injector__detach(struct injector *inj);
/* Last error of a failed call, one line. */
const char *injector__error(const struct injector *inj);

/* func(args[0..5]) in the target; *ret = rax. 0 or -errno (-ETIMEDOUT, -ESRCH, -EFAULT when
 * the call crashed: the thread is then restored and the crash signal dropped). */
int injector__call(struct injector *inj, uint64_t func, const uint64_t args[6], uint64_t *ret);
/* Like injector__call, with s0/s1 (either may be NULL) copied onto the target's stack and
 * passed as the first two arguments; args[2..5] as given (args may be NULL). */
int injector__call_str(struct injector *inj, uint64_t func, const char *s0, const char *s1,
		       const uint64_t args[6], uint64_t *ret);
/* Like injector__call, with args[out_arg] pointing at out_len zeroed bytes of scratch on the
 * target's stack, copied back into out after the call (a function's out-parameter). */
int injector__call_out(struct injector *inj, uint64_t func, const uint64_t args[6], int out_arg,
		       void *out, size_t out_len, uint64_t *ret);
/* Write len bytes at addr in the target (memory the caller owns there). 0 or -errno. */
int injector__write(struct injector *inj, uint64_t addr, const void *buf, size_t len);
/* Where the stopped thread was when seized (its saved rip), and the syscall it was in
 * (orig_rax; -1 when it was running user code). */
uint64_t injector__pc(const struct injector *inj);
long injector__syscall(const struct injector *inj);
/* How long one call may run before it is stopped where it is (default 30 s). */
void injector__set_call_timeout(struct injector *inj, int ms);
/* Address of a function exported by a file mapped in pid whose base name starts with lib
 * (e.g. "libc.so.6", "libpython3", "python3.11"). 0 or -ENOENT; no ptrace needed. */
int injector__find_func(int pid, const char *lib, const char *name, uint64_t *addr);

/* dlopen(path, flags) in the target; on failure the target's dlerror() text is the error. */
int injector__dlopen(struct injector *inj, const char *path, int flags, uint64_t *handle);
int injector__dlsym(struct injector *inj, uint64_t handle, const char *name, uint64_t *addr);
int injector__dlclose(struct injector *inj, uint64_t handle);

#endif
