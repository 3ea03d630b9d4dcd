/* SPDX-License-Identifier: MIT */
/* GPU memory of one traced process, from outside it: loads bpf/mem.bpf.c, attaches PyTorch's
 * caching-allocator USDT probes (pytorch:malloc/free, in any library whose .note.stapsdt has
 * them), the allocation calls of the CUDA runtime (cudaMalloc & co, entry + return) and of the
 * driver (cuMemAlloc_v2, cuMemFree_v2, cuMemCreate/Map/Unmap/Release) in the libraries the
 * target (target.h) found, consumes its own ring buffer, keeps the live tables (memsnap.h) and
 * writes memory events and counter tracks into a trace.
 *
 * In a trace (tj != NULL), per target pid:
 *   ph "i" cat "cuda_memory" name <API>          every probed call: size, ptr, stream, rc ...
 *   ph "i" cat "cuda_memory" name "[memory]"     every state change (Kineto's memory events)
 *   ph "C" name "bytes allocated (cuda:N)"       USDT level: bytes requested by live tensors
 *   ph "C" name "bytes reserved (cuda:N)"        segment level: cudaMalloc, cuMemAlloc, cuMemCreate
 *   ph "C" name "bytes pinned host" / "bytes managed"
 *   ph "i" s "p" name "OOM"                      an allocation failed with out-of-memory
 * Counters start at 0 at attach: memory allocated before is not known. */
#ifndef TPTRACE_MEMTRACE_H
#define TPTRACE_MEMTRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct memtrace;
struct memsnap;
struct memsnap_info;
struct target;
struct trace_writer;

struct memtrace_opts {
	bool no_stacks;		/* no user stack per allocation (cheaper; no call sites) */
	int ring_mb;		/* ring buffer MiB, power of two; 0: 4 */
	size_t history;		/* snapshot history entries; 0: memsnap's default */
	bool uprobe_multi;	/* the kernel has uprobe_multi (target__uprobe_multi_supported) */
	bool py_stacks;		/* Python frames per allocation (bpf/ustack.bpf.h); needs stacks */
};

struct memtrace_stats {
	int usdt_probes;		/* pytorch:malloc/free links (one per probe name and library) */
	int runtime_probes;		/* cudart functions probed (entry + return each) */
	int driver_probes;		/* libcuda functions probed (entry + return each) */
	int attach_errors;
	uint64_t records, calls, failed_calls, ooms;
	uint64_t bad_records;		/* malformed ring records (calls.c), not used */
	/* BPF-side counters; unknown (and written as null) when counters_err < 0 */
	uint64_t dropped, nested_driver_calls, orphan_returns, stack_failures;
	int counters_err;
};

/* Loads the memory probes for t (after target__scan found its libraries) and attaches them.
 * tj may be NULL (no trace: snapshot and leak report only). opts may be NULL. NULL after an
 * error line on stderr. Finding nothing to probe is not an error: see memtrace__stats(). */
struct memtrace *memtrace__attach(struct target *t, struct trace_writer *tj,
				  const struct memtrace_opts *opts);
/* Attaches to libraries the target found since (call after target__scan), and drains the
 * ring. Returns records consumed or a negative errno. Call every ~20 ms: probes do not wake
 * the consumer. */
int memtrace__poll(struct memtrace *mt);
/* Drains what is left and writes the final counter values at end_ns (CLOCK_MONOTONIC). */
void memtrace__finish(struct memtrace *mt, uint64_t end_ns);
/* Metadata for the trace's "tptrace" object (cJSON text; caller frees), NULL on ENOMEM. */
char *memtrace__meta_json(struct memtrace *mt);
const struct memtrace_stats *memtrace__stats(struct memtrace *mt);
struct memsnap *memtrace__snap(struct memtrace *mt);
/* Fills info (pid, comm, PYTORCH_CUDA_ALLOC_CONF, stack symbolizer) for memsnap's writers;
 * valid until memtrace__free. */
void memtrace__info(struct memtrace *mt, struct memsnap_info *info);
/* Detaches (the uprobes and USDT semaphores go away) and frees. NULL is fine. */
void memtrace__free(struct memtrace *mt);

#endif
