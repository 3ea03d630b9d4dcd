/* SPDX-License-Identifier: MIT */
/* Pending uretprobe returns of one process's threads (bpf/uretinst.h), and the original
 * return address of a stack slot that holds the [uprobes] trampoline.
 *
 * While any tool has return probes on a process, each call into a probed function replaces
 * the word at the function's entry SP (its return address) with the trampoline's address
 * until the call returns. The kernel keeps, per thread, the list of such pending returns:
 * { func, stack (the slot), orig_ret_vaddr, chained }, newest first. A BPF task iterator
 * reads the lists of any process, whoever placed the probes (CAP_BPF + CAP_PERFMON, or
 * root). An unwinder reading the trampoline from slot S of thread T asks
 * uretinst__resolve(T, S) for the word to use instead.
 *
 * A read is a snapshot: consistent for threads that are stopped while it runs (a thread
 * pushes and pops only its own list), racy for running ones; the caller re-checks that a
 * slot still holds the trampoline before it substitutes. */
#ifndef TPTRACE_URETINST_H_USER
#define TPTRACE_URETINST_H_USER

#include <stddef.h>
#include <stdint.h>

struct uretinst;

/* Loads the iterator program once per tptrace process (the verifier's work: ~20 ms), so a
 * read while the threads are stopped pays only for the walk. 0 or a negative errno. */
int uretinst__prepare(void);

/* The pending instances of every thread of pid, read now through the iterator. NULL with
 * errno set and one line in err when they cannot be read (no BPF privilege, a kernel
 * without task iterators or BTF). */
struct uretinst *uretinst__read(int pid, char *err, size_t errsz);

/* The same from the iterator's raw output (bpf/uretinst.h records), for saved data: records
 * of other processes than pid are skipped. NULL with errno EINVAL and err on a malformed
 * buffer, ENOMEM. */
struct uretinst *uretinst__parse(const void *buf, size_t len, int pid, char *err, size_t errsz);

/* The trampoline's address in pid (slot 0 of the [uprobes] area); 0 when no thread was
 * seen with an area (no uprobe ever hit the process). */
uint64_t uretinst__trampoline(const struct uretinst *ui);

/* The original return address for the slot at address `slot` of thread tid, which holds the
 * trampoline: the instance run (a chained run counts as one return: every chained instance
 * and the unchained one below it) whose slot is `slot`, the newest such run when a stale one
 * (left by a longjmp) has the same slot. 0 and *orig set; -ENOENT when no pending instance of
 * tid has that slot (the thread is unknown, its list was cut, or the slot is not one). */
int uretinst__resolve(const struct uretinst *ui, int tid, uint64_t slot, uint64_t *orig);

/* Threads seen and instances read, for diagnostics and tests. */
int uretinst__nr_threads(const struct uretinst *ui);
int uretinst__nr_instances(const struct uretinst *ui);

void uretinst__free(struct uretinst *ui);

#endif
