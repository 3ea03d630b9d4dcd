/* SPDX-License-Identifier: MIT */
/*
 * A door into a running CPython 3.9-3.13 process: run one of tptrace's own Python snippets on
 * the interpreter's main thread, at its next safe point, holding the GIL.
 *
 * How: one thread of the target is stopped with ptrace (user/base/inject.c) while it is not inside
 * the allocator, the dynamic loader, a lock or the interpreter's pending-call or lifecycle
 * code; a private page is mapped in the target (mmap called there) and the snippet's text
 * written into it; then Py_AddPendingCall(PyRun_SimpleString, page) queues it, and the thread
 * resumes exactly where it was. The eval loop runs the call on the main thread at its next
 * safe point. Nothing else in the process changes.
 *
 * The text run is a fixed wrapper of tptrace's (never user text) around a fixed snippet;
 * parameters travel as data (a Python literal built from escaped strings and integers). The
 * wrapper:
 *   - claims the request by renaming a file tptrace created; when the claim fails (tptrace
 *     gave up waiting and withdrew the request) it does nothing at all;
 *   - runs the snippet in a fresh namespace (nothing lands in __main__), catching every
 *     exception (nothing is printed in the target);
 *   - writes the snippet's result (a dict, plus "error" when it raised) as one JSON line into
 *     a file tptrace created (0600, owned by the target's user, in a private directory inside
 *     the target's mount namespace);
 *   - keeps state between calls (e.g. a running profiler) in one attribute of the `sys`
 *     module, removed as soon as it is empty.
 * A main thread that never reaches a safe point (blocked in C, with or without the GIL) gets
 * -ETIMEDOUT and the request is withdrawn: the call stays queued in the interpreter, and when
 * it runs one day it only finds the claim gone (its page, one per withdrawn request, stays).
 *
 * The snippet's source defines `def run(args, state):` returning a dict of JSON-able values
 * (str, int, float, bool, None, list, dict). `args` is the dict given to pyrun__exec, `state`
 * a dict that persists across calls of one process (per tptrace session).
 */
#ifndef TPTRACE_PYRUN_H
#define TPTRACE_PYRUN_H

#include <stdbool.h>
#include <stddef.h>

struct pyrun;
struct cJSON;

/* Find pid's CPython (3.9-3.13), its Py_AddPendingCall and PyRun_SimpleString, and make the
 * private directory. NULL + one line in err: not a Python process, an unsupported version
 * ("Python 3.8.18 is not supported (3.9-3.13)"), no ptrace permission, a vanished pid. */
struct pyrun *pyrun__open(int pid, char *err, size_t errlen);
/* Removes the private directory and everything in it. NULL is safe. */
void pyrun__close(struct pyrun *r);
const char *pyrun__version(const struct pyrun *r);	/* "3.11.2" */

/* A new empty file NAME (no slashes) in the private directory, 0600, owned by the target's
 * user: host_path is where tptrace reads it (through /proc/PID/root), target_path the path the
 * snippet uses. 0 or -errno. */
int pyrun__file(struct pyrun *r, const char *name, char *host_path, size_t hlen,
		char *target_path, size_t tlen);

/* Run SNIPPET (see above) with ARGS (a cJSON object; strings, numbers, bools, arrays and
 * objects; may be NULL) on the main thread; wait up to timeout_ms for its result. 0 and
 * *result (the returned dict as a cJSON object, the caller frees it; "error" holds the
 * exception's type and message when the snippet raised); or -errno and one line in err:
 * -ETIMEDOUT (the main thread reached no safe point in time; the request is withdrawn, or
 * with PYRUN_KEEP_QUEUED left queued), -ESRCH (the process exited), -EBUSY (no
 * thread could be stopped outside the allocator/loader/locks in time), -EPERM. */
int pyrun__exec(struct pyrun *r, const char *snippet, const struct cJSON *args, int timeout_ms,
		unsigned int flags, struct cJSON **result, char *err, size_t errlen);
/* flags: a request that must run some day (a cleanup: stopping a profiler tptrace started) is
 * not withdrawn at the timeout; it stays queued and runs when the main thread next reaches
 * the eval loop, after tptrace has gone (its result then has nowhere to go, and is dropped). */
#define PYRUN_KEEP_QUEUED	1u

/* Whether a thread stopped in the function NAME may not be borrowed (allocator, loader, locks,
 * the interpreter's GIL, pending-call and lifecycle code). For tests/unit/test_pyrun. */
bool pyrun__unsafe_function(const char *name);

#endif
