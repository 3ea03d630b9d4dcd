/* SPDX-License-Identifier: MIT */
/*
 * PyTorch's own instruments, switched on from outside through the door of user/py/pyrun.h: the
 * snippets in user/py/ run on the target's main thread.
 *
 * torchprof: torch.profiler for a trace window (tptrace --torch). Started after tptrace's
 * probes are live, stopped at the end of the window; its events (aten ops with their input
 * shapes and Python stacks, record_function spans, steps) are merged into tptrace's trace on
 * the target's pid, on the OS thread that ran them, on tptrace's clock.
 *
 * Clock: at start and at stop the snippet runs a record_function("tptrace#clock") span between
 * two CLOCK_MONOTONIC reads (time.monotonic_ns). The span's profiler-relative times lie inside
 * that bracket, which bounds the offset between the two clocks; the two markers give the offset
 * (their mean), the drift between them and a residual (the bracket's slack plus the markers'
 * disagreement) that every merged time is within.
 *
 * Threads: the profiler numbers threads itself. The markers' number is the main thread (whose
 * OS tid the snippet reads); any other number goes on a track of its own, labelled "torch
 * thread N, OS tid unknown": never guessed.
 */
#ifndef TPTRACE_TORCHPROF_H
#define TPTRACE_TORCHPROF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct torchprof;
struct trace_writer;
struct cJSON;

struct torchprof_opts {
	bool cuda;		/* CUDA activity too, where torch.cuda.is_available(): tptrace's
				 * --gpu is off (CUPTI takes one subscriber) */
	int timeout_ms;		/* the main thread must reach a safe point in this time */
};

/* Opens pid's Python and starts the profiler in it. NULL and one line in err: not a Python
 * process or an unsupported version (pyrun__open's line), torch not imported, a profiler
 * already running, a main thread blocked in C (errno ETIMEDOUT). */
struct torchprof *torchprof__start(int pid, const struct torchprof_opts *o, char *err,
				   size_t errlen);
/* Stops the profiler and reads its events. 0, or a negative errno and one line in err (the
 * process exited: -ESRCH). Either way the hook and state in the target are gone when the
 * snippet ran. */
int torchprof__stop(struct torchprof *tp, char *err, size_t errlen);
/* Writes the events read by stop into tj (pid's events; times before base_mono_ns, the
 * trace's ts 0, are counted and left out). 0 or a negative errno and one line in err. */
int torchprof__write(struct torchprof *tp, struct trace_writer *tj, uint64_t base_mono_ns,
		     char *err, size_t errlen);
/* What the trace's metadata says about it ("torch"): clock alignment, versions, counts, or
 * the error. Caller frees. */
struct cJSON *torchprof__meta(const struct torchprof *tp);
void torchprof__free(struct torchprof *tp);

/* The merge on saved inputs (tests): the start and stop snippets' results and the events
 * file the stop snippet wrote. NULL and errno. */
struct torchprof *torchprof__replay(int pid, const struct cJSON *start_res,
				    const struct cJSON *stop_res, const char *events_path);

/* The other instruments: one snippet call at the start of a window and one at its end. */
enum torch_instr {
	TORCH_MEM_HISTORY,	/* tptrace mem --torch-history: _record_memory_history + _snapshot */
	TORCH_FR_DUMP,		/* tptrace fr --torch-dump: _dump_nccl_trace (one call, at the end) */
	TORCH_LOGS,		/* --torch-logs LIST: torch._logging.set_logs for the window */
	TORCH_TRACE,		/* --torch-trace DIR: torch's structured trace (TORCH_TRACE's
				 * trace_structured entries, for tlparse) for the window */
};
struct torch_instr_run;
/* Opens pid's Python and switches the instrument on (TORCH_LOGS: arg is the comma list;
 * TORCH_FR_DUMP only checks that the API is there). NULL and one line in err when refused. */
struct torch_instr_run *torch_instr__start(int pid, enum torch_instr what, const char *arg,
					   int timeout_ms, char *err, size_t errlen);
/* Switches it off and writes what it produced to out_path (0600). 0, or a negative errno
 * and one line in err. TORCH_TRACE: out_path is a directory (made 0700 if absent) that gets
 * torch's own file, dedicated_log_torch_trace_<random>.log (rank_<R>_ after the prefix in a
 * torch.distributed job), as TORCH_TRACE names it; its path in wrote (or "" when torch
 * logged nothing in the window: no file). */
int torch_instr__stop(struct torch_instr_run *r, const char *out_path, char *err, size_t errlen);
int torch_trace__stop(struct torch_instr_run *r, const char *dir, char *wrote, size_t wlen,
		      char *err, size_t errlen);
void torch_instr__free(struct torch_instr_run *r);

/* --torch-logs LIST: "recompiles", "graph_breaks", comma separated. 0 or -EINVAL. */
int torch_logs__check(const char *list);

/* "pid N: ERR", or ERR alone where it already names the process (the door's lines do):
 * what the callers' one error line carries after the flag's name. In a per-thread buffer,
 * valid until the next call. */
const char *torch__err_line(int pid, const char *err);

/* --torch-timeout SEC of every command: seconds > 0, at most an hour. 0 or -EINVAL. */
int torch__parse_timeout(const char *arg, double *sec);
#define TORCH_TIMEOUT_INVALID "invalid --torch-timeout '%s' (seconds > 0, at most 3600)"

#endif
