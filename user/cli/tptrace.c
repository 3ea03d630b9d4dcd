// SPDX-License-Identifier: MIT
/* tptrace: attach to running CUDA processes with uprobes and write a Chrome/Kineto trace. */
#include <argp.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include <cjson/cJSON.h>
#include "cuda.skel.h"
#include "decode.h"
#include "gpu.h"
#include "gpu_join.h"
#include "gpu_sink.h"
#include "elfsym.h"
#include "log.h"
#include "util.h"
#include "memtrace.h"
#include "cli_opts.h"
#include "cli_output.h"
#include "session.h"
#include "target.h"
#include "torchprof.h"
#include "trace_json.h"
#include "ustack.h"

#ifndef TPTRACE_VERSION
#define TPTRACE_VERSION "0.0.0"
#endif

#define MAX_PIDS 64

/* -p, -w, -d, --ring-mb, --py-stacks, --torch-timeout: cli_opts (cli_opts.h); -o: cli_output */
static int target_pids[MAX_PIDS];

static struct env {
	bool durations;
	bool mem;
	bool gpu;
	const char *cupti;
	bool native_stacks;	/* --py-stacks' Python stacks and their native frames */
	bool torch;		/* torch.profiler in the target for the window (torchprof.h) */
	const char *torch_logs;	/* torch._logging.set_logs for the window: "recompiles,..." */
	const char *torch_trace;	/* torch's structured trace for the window, into this dir */
} env;

const char *argp_program_version = "tptrace " TPTRACE_VERSION;
static const char doc[] =
"tptrace: trace CUDA runtime and NCCL calls of running processes,\n"
"with no restart, environment variable or preload.\n"
"\n"
"USAGE: tptrace -p PID [-p PID ...] [-d SEC] [-o FILE] [--gpu] [--mem]\n"
"               [--py-stacks] [--torch] [--torch-logs LIST] [--torch-trace DIR]\n"
"               [--torch-timeout SEC]\n"
"       tptrace fr ...        NCCL flight recorder (tptrace fr --help)\n"
"       tptrace mem ...       GPU memory snapshot, leaks (tptrace mem --help)\n"
"       tptrace stacks ...    where a hung job waits (tptrace stacks --help)\n"
"       tptrace report ...    what to fix, from traces (tptrace report --help)\n"
"\n"
"Probes the CUDA runtime each process uses (libcudart.so.* anywhere, or\n"
"linked statically), follows libraries loaded later, and writes a\n"
"Chrome-trace JSON (Kineto conventions) that Perfetto opens and HTA\n"
"analyses. Ends on -d expiry, SIGINT/SIGTERM, or when every target exited.\n"
"\n"
"-o FILE is the trace: .json plain, .json.gz gzip, .pftrace[.gz] Perfetto\n"
"protobuf (default tptrace.json.gz). -w waits for a target that has not\n"
"loaded a CUDA runtime yet. --py-stacks adds each call's Python stack:\n"
"python_function slices above the calls, as torch.profiler's with_stack,\n"
"and a \"stack\" arg on each call.\n"
"\n"
"EXAMPLES:\n"
"  sudo tptrace -p 4242 -d 10 -o step.json.gz  # trace pid 4242 for 10 s\n"
"  sudo tptrace -p 4242 -p 4243 -o two.json     # two pids; Ctrl-C ends it\n"
"  sudo tptrace -p 4242 --wait -o run.json      # wait for CUDA to load\n"
"  sudo tptrace -p 4242 --gpu -o gpu.json.gz    # plus the GPU timeline\n"
"  sudo tptrace -p 4242 --mem -o mem.json.gz    # plus GPU memory counters\n"
"  sudo tptrace -p 4242 --py-stacks -o py.json.gz  # each call's Python line\n"
"  sudo tptrace -p 4242 --torch -d 5 -o step.json.gz  # + torch.profiler ops\n"
"  sudo tptrace fr -a --dump-dir /var/lib/tptrace  # flight recorder\n"
"  sudo tptrace mem -p 4242 -o snapshot.json    # memory_viz snapshot\n"
"  sudo tptrace stacks -a                       # who is stuck where, by rank\n"
"  tptrace report step.json.gz -o report.html   # what to fix, with plots\n";

enum { OPT_DURATIONS = 1000, OPT_GPU, OPT_CUPTI, OPT_MEM, OPT_NATIVE_STACKS, OPT_TORCH,
       OPT_TORCH_LOGS, OPT_TORCH_TRACE };

static const struct argp_option opts[] = {
	{ "durations", OPT_DURATIONS, NULL, 0,
	  "Also probe returns of async calls (launch durations; one more trap per call)", 0 },
	{ "gpu", OPT_GPU, NULL, 0,
	  "GPU timeline: inject an agent that enables CUPTI activity, merge kernels/copies "
	  "(with flows from their launches), take it out at the end", 0 },
	{ "cupti", OPT_CUPTI, "PATH", 0, "libcupti to load with --gpu (default: next to the "
	  "process's libcudart, then by name)", 0 },
	{ "mem", OPT_MEM, NULL, 0, "Also trace GPU memory (allocator USDT, cudaMalloc & co, cuMem*): "
	  "counters, OOM events", 0 },
	{ "native-stacks", OPT_NATIVE_STACKS, NULL, 0, "--py-stacks plus the native frames "
	  "(through frame pointers, where the code keeps them)", 0 },
	{ "torch", OPT_TORCH, NULL, 0, "torch.profiler inside the process for the window "
	  "(CPython 3.9-3.13 with torch imported): aten ops with input shapes and stacks, "
	  "record_function spans, ProfilerStep#N, merged on tptrace's clock and threads", 0 },
	{ "torch-logs", OPT_TORCH_LOGS, "LIST", 0, "torch._logging (PyTorch 2.1+) for the window: "
	  "recompiles,graph_breaks; written to FILE.PID.torch_logs.txt next to -o", 0 },
	{ "torch-trace", OPT_TORCH_TRACE, "DIR", 0, "torch's structured trace (what TORCH_TRACE=DIR "
	  "turns on at start; tlparse reads it) for the window: torch's own "
	  "dedicated_log_torch_trace_*.log per process, into DIR", 0 },
	{},
};

static error_t parse_arg(int key, char *arg, struct argp_state *state)
{
	switch (key) {
	case OPT_DURATIONS:
		env.durations = true;
		break;
	case OPT_GPU:
		env.gpu = true;
		break;
	case OPT_CUPTI:
		env.cupti = arg;
		env.gpu = true;
		break;
	case OPT_MEM:
		env.mem = true;
		break;
	case OPT_NATIVE_STACKS:
		env.native_stacks = true;
		cli_opts.py_stacks = true;
		break;
	case OPT_TORCH:
		env.torch = true;
		break;
	case OPT_TORCH_LOGS:
		if (torch_logs__check(arg))
			argp_error(state, "invalid --torch-logs '%s' (recompiles, graph_breaks, "
				   "comma separated)", arg);
		env.torch_logs = arg;
		break;
	case OPT_TORCH_TRACE:
		if (!arg[0])
			argp_error(state, "invalid --torch-trace '' (a directory)");
		env.torch_trace = arg;
		break;
	case ARGP_KEY_END:
		cli_opts__check(state);
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

/* One traced process and what is attached to it. */
struct traced {
	struct target *t;
	struct memtrace *mt;		/* --mem */
	struct gpu_session *gpu;	/* --gpu */
	struct gpu_sink_proc *gsrc;	/* --gpu: its records' way into the join */
	struct gpu_stats gstats;	/* taken when the agent is detached */
	int watch_err;			/* session__watch_exit failed: exit code unknown */
	struct torchprof *torch;	/* --torch: the profiler started in it */
	char torch_err[512];		/* --torch: why it has no torch events ("" if none) */
	struct torch_instr_run *torch_logs;	/* --torch-logs */
	struct torch_instr_run *torch_trace;	/* --torch-trace */
	bool waiting;			/* --wait: no CUDA runtime yet, "tracing" not said yet */
};

/* One `tptrace -p ...` run: what it opened, in the order it is torn down. */
struct trace_session {
	int argc;
	char **argv;			/* recorded in the metadata */
	struct traced procs[MAX_PIDS];
	int nr_procs;
	struct session_bpf *bpf;
	struct target_probes probes;
	struct elfsym_cache *cache;
	struct trace_json *tj;
	bool output_created;		/* we created the output file: remove it on failure */
	struct session *core;		/* the ring's consumer, library discovery and attach */
	struct gpu_sink *gsink;		/* --gpu: the join, a sink of core */
	struct decoder *dec;
	struct ring_buffer *rb;
	uint64_t start_mono, start_real, end_mono;
	uint64_t drops;
	int drops_err;			/* < 0: the drop count is unknown */
};

static cJSON *gpu_json(const struct traced *p)
{
	const struct gpu_stats *g = &p->gstats;
	cJSON *o = cJSON_CreateObject();

	if (!p->gpu) {
		cJSON_AddBoolToObject(o, "attached", false);
		return o;
	}
	cJSON_AddBoolToObject(o, "attached", true);
	cJSON_AddStringToObject(o, "cupti", g->cupti_path);
	cJSON_AddBoolToObject(o, "injected", g->injected);
	cJSON_AddBoolToObject(o, "agent_unloaded", g->unloaded);
	cJSON_AddNumberToObject(o, "records", (double)g->records);
	cJSON_AddNumberToObject(o, "kernels", (double)g->kernels);
	cJSON_AddNumberToObject(o, "memcpys", (double)g->memcpys);
	cJSON_AddNumberToObject(o, "memsets", (double)g->memsets);
	cJSON_AddNumberToObject(o, "records_dropped", (double)(g->dropped_ring + g->dropped_cupti));
	cJSON_AddNumberToObject(o, "records_dropped_cupti", (double)g->dropped_cupti);
	cJSON_AddNumberToObject(o, "records_dropped_ring", (double)g->dropped_ring);
	cJSON_AddNumberToObject(o, "records_incomplete", (double)g->records_incomplete);
	cJSON_AddNumberToObject(o, "buffers_cut", (double)g->buffers_cut);
	/* flushes that did not get every older buffer back (GPU work still running held one):
	 * the join waited for a later one before it called a record missing */
	cJSON_AddNumberToObject(o, "flushes", (double)g->flushes);
	cJSON_AddNumberToObject(o, "flushes_partial", (double)g->flushes_partial);
	cJSON_AddNumberToObject(o, "clock_samples", g->clock_samples);
	cJSON_AddNumberToObject(o, "clock_samples_lost", g->clock_lost);
	/* GPU records are on CUPTI's clock, fitted to CLOCK_MONOTONIC (user/gpu/clock_fit.h): the
	 * fit's drift and offset, and how far the samples sit from it */
	cJSON_AddNumberToObject(o, "clock_ppm", g->clock_ppm);
	cJSON_AddNumberToObject(o, "clock_offset_ns", (double)g->clock_offset_ns);
	cJSON_AddNumberToObject(o, "clock_residual_ns", (double)g->clock_residual_ns);
	cJSON_AddNumberToObject(o, "clock_window_ns", (double)g->clock_window_ns);
	return o;
}

/* --gpu: how host calls were joined with CUPTI's API records (gpu_join.h), for all targets
 * (pid < 0) or one. */
static cJSON *gpu_join_json(const struct gpu_sink *g, int pid)
{
	struct gpu_join_stats j;
	cJSON *o = cJSON_CreateObject(), *u;

	if (pid < 0 ? gpu_sink__stats(g, &j) : gpu_sink__stats_pid(g, pid, &j)) {
		cJSON_AddNullToObject(o, "calls");
		cJSON_AddStringToObject(o, "calls_unknown", pid < 0 ? "the join was not set up" :
					"no CUPTI agent in this process");
		return o;
	}
	cJSON_AddNumberToObject(o, "calls", (double)j.calls);
	cJSON_AddNumberToObject(o, "joined", (double)j.joined);
	u = cJSON_AddObjectToObject(o, "unjoined");
	cJSON_AddNumberToObject(u, "before_enable", (double)j.before_enable);
	cJSON_AddNumberToObject(u, "after_disable", (double)j.after_disable);
	cJSON_AddNumberToObject(u, "no_record", (double)j.no_record);
	cJSON_AddNumberToObject(u, "ambiguous", (double)j.ambiguous);
	cJSON_AddNumberToObject(o, "flows", (double)j.flows);
	cJSON_AddNumberToObject(o, "api_records", (double)j.records);
	u = cJSON_AddObjectToObject(o, "api_records_unclaimed");
	cJSON_AddNumberToObject(u, "nested", (double)j.records_nested);
	cJSON_AddNumberToObject(u, "unprobed", (double)j.records_unprobed);
	cJSON_AddNumberToObject(u, "ambiguous", (double)j.records_ambiguous);
	cJSON_AddNumberToObject(o, "gpu_work_records", (double)j.work_records);
	cJSON_AddNumberToObject(o, "gpu_work_unclaimed", (double)j.work_unclaimed);
	cJSON_AddNumberToObject(o, "slack_ns", (double)j.slack_ns);
	return o;
}

/* --py-stacks: the process's Python version, or why its calls carry no Python frames. */
static void python_json(cJSON *o, const struct trace_session *s, int pid)
{
	const struct ustacks *u = s->bpf->ustacks;
	const char *python = u ? ustacks__python(u, pid) : NULL;
	const char *why = u ? ustacks__why(u, pid) : "stack capture was not set up";

	if (python)
		cJSON_AddStringToObject(o, "python", python);
	else
		cJSON_AddNullToObject(o, "python");
	if (why)
		cJSON_AddStringToObject(o, "python_frames_missing", why);
}

/* --py-stacks: the BPF side's stack counters (a count that cannot be read is null with the
 * reason, never 0), and what the trace writer made of the stacks. */
static cJSON *ustacks_json(const struct trace_session *s, const struct decoder_stats *st)
{
	static const struct { int idx; const char *key; } counters[] = {
		{ TP_USTACK_CNT_CAPTURED, "captured" },	/* calls given a stack id */
		{ TP_USTACK_CNT_NEW, "new" },		/* distinct stacks stored */
		{ TP_USTACK_CNT_LOST, "lost" },		/* stack map full */
		{ TP_USTACK_CNT_NOPY, "nopy" },		/* calls on threads without Python */
	};
	const struct ustacks *u = s->bpf->ustacks;
	cJSON *o = cJSON_CreateObject();
	char key[48];

	cJSON_AddBoolToObject(o, "native_frames", env.native_stacks);
	for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++) {
		uint64_t v;
		int err = u ? ustacks__counter(u, counters[i].idx, &v) : -ENOENT;

		if (err) {
			cJSON_AddNullToObject(o, counters[i].key);
			snprintf(key, sizeof(key), "%s_unknown", counters[i].key);
			cJSON_AddStringToObject(o, key, strerror(-err));
		} else {
			cJSON_AddNumberToObject(o, counters[i].key, (double)v);
		}
	}
	if (u) {
		const struct ustack_stats *us = ustacks__stats(u);

		cJSON_AddNumberToObject(o, "stacks_resolved", (double)us->resolved);
		cJSON_AddNumberToObject(o, "stacks_not_in_map", (double)us->map_misses);
		cJSON_AddNumberToObject(o, "unresolved_frames", (double)us->unresolved_frames);
	}
	/* calls written with a stack arg: frames, a status (no Python thread state, lost...),
	 * or an id no longer found */
	cJSON_AddNumberToObject(o, "calls_with_stack", (double)st->stacks);
	cJSON_AddNumberToObject(o, "calls_with_stack_status", (double)st->stacks_status);
	cJSON_AddNumberToObject(o, "calls_stack_not_found", (double)st->stacks_missing);
	cJSON_AddNumberToObject(o, "python_function_slices", (double)st->python_slices);
	return o;
}

/* A u64 as a JSON number without the double's rounding (ns since the epoch need 61 bits). */
static void add_u64_raw(cJSON *o, const char *key, uint64_t v)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
	cJSON_AddItemToObject(o, key, cJSON_CreateRaw(buf));
}

static cJSON *target_json(const struct trace_session *s, const struct traced *p)
{
	const struct target *t = p->t;
	cJSON *o = cJSON_CreateObject(), *libs;
	struct target_counts n;

	cJSON_AddNumberToObject(o, "pid", target__pid(t));
	cJSON_AddStringToObject(o, "comm", target__comm(t));
	cJSON_AddStringToObject(o, "cmdline", target__cmdline(t) ? target__cmdline(t) : "");
	if (target__rank(t) >= 0)
		cJSON_AddNumberToObject(o, "rank", target__rank(t));
	if (target__world_size(t) >= 0)
		cJSON_AddNumberToObject(o, "world_size", target__world_size(t));
	target__counts(t, &n);
	libs = cJSON_AddArrayToObject(o, "cuda_runtimes");
	for (int j = 0; j < target__nr_objs(t); j++)
		if (target__obj(t, j)->cudart)
			cJSON_AddItemToArray(libs, cJSON_CreateString(target__obj(t, j)->path));
	libs = cJSON_AddArrayToObject(o, "cuda_drivers");
	for (int j = 0; j < target__nr_objs(t); j++)
		if (target__obj(t, j)->driver)
			cJSON_AddItemToArray(libs, cJSON_CreateString(target__obj(t, j)->path));
	cJSON_AddNumberToObject(o, "probes_attached", n.probes);
	if (env.gpu) {
		cJSON *g = gpu_json(p);

		/* the join's counts of this process's calls and CUPTI records */
		if (g && p->gpu)
			cJSON_AddItemToObject(g, "join", gpu_join_json(s->gsink, target__pid(t)));
		cJSON_AddItemToObject(o, "gpu", g);
	}
	if (cli_opts.py_stacks)
		python_json(o, s, target__pid(t));
	if (env.torch) {
		cJSON *tm = p->torch ? torchprof__meta(p->torch) : cJSON_CreateObject();

		if (tm && !p->torch)
			cJSON_AddStringToObject(tm, "error", p->torch_err[0] ? p->torch_err :
						"not started");
		if (tm)
			cJSON_AddItemToObject(o, "torch", tm);
	}
	cJSON_AddNumberToObject(o, "attach_errors", n.attach_errors);
	cJSON_AddBoolToObject(o, "exited", target__exited(t));
	/* exit_code is the kernel's wait status (task->exit_code) */
	if (target__exit_code(t) >= 0 && WIFSIGNALED(target__exit_code(t))) {
		cJSON_AddNumberToObject(o, "killed_by_signal", WTERMSIG(target__exit_code(t)));
	} else if (target__exit_code(t) >= 0) {
		cJSON_AddNumberToObject(o, "exit_code", WEXITSTATUS(target__exit_code(t)));
	} else if (target__exited(t)) {
		cJSON_AddNullToObject(o, "exit_code");
		cJSON_AddStringToObject(o, "exit_code_unknown",
					p->watch_err ? "its exit could not be watched" :
					!s->bpf->exit_tp ? "no exit tracepoint in this kernel" :
					"no exit record seen");
	}
	return o;
}

static char *metadata_json(const struct trace_session *s)
{
	const struct decoder_stats *st = decoder__stats(s->dec);
	uint64_t end_real = s->start_real + (s->end_mono - s->start_mono);
	cJSON *root = cJSON_CreateObject(), *arr, *cmd;
	int probes = 0, attach_errors = 0;
	char *out;

	cJSON_AddStringToObject(root, "version", TPTRACE_VERSION);
	cmd = cJSON_AddArrayToObject(root, "command");
	for (int i = 0; i < s->argc; i++)
		cJSON_AddItemToArray(cmd, cJSON_CreateString(s->argv[i]));
	add_u64_raw(root, "start_unix_ns", s->start_real);
	cJSON_AddNumberToObject(root, "duration_s", (end_real - s->start_real) / 1e9);
	cJSON_AddStringToObject(root, "clock", "CLOCK_MONOTONIC (bpf_ktime_get_ns)");
	/* ts 0 in CLOCK_MONOTONIC ns: maps trace times back to the host clock */
	add_u64_raw(root, "base_mono_ns", s->start_mono);
	arr = cJSON_AddArrayToObject(root, "targets");
	for (int i = 0; i < s->nr_procs; i++) {
		cJSON_AddItemToArray(arr, target_json(s, &s->procs[i]));
		struct target_counts n;

		target__counts(s->procs[i].t, &n);
		probes += n.probes;
		attach_errors += n.attach_errors;
	}
	cJSON_AddNumberToObject(root, "probes_attached", probes);
	cJSON_AddNumberToObject(root, "attach_errors", attach_errors);
	cJSON_AddNumberToObject(root, "events_recorded", (double)st->records);
	if (s->drops_err) {
		cJSON_AddNullToObject(root, "events_dropped");
		cJSON_AddStringToObject(root, "events_dropped_unknown", strerror(-s->drops_err));
	} else {
		cJSON_AddNumberToObject(root, "events_dropped", (double)s->drops);
	}
	cJSON_AddNumberToObject(root, "calls", (double)st->calls);
	cJSON_AddNumberToObject(root, "launches", (double)st->launches);
	cJSON_AddNumberToObject(root, "launches_named", (double)st->launches_named);
	cJSON_AddNumberToObject(root, "unfinished_calls", (double)st->unfinished);
	cJSON_AddNumberToObject(root, "orphan_returns", (double)st->orphan_returns);
	cJSON_AddNumberToObject(root, "bad_records", (double)st->bad_records);
	cJSON_AddNumberToObject(root, "depth_overflows", (double)st->depth_overflows);
	cJSON_AddNumberToObject(root, "unwound_calls", (double)st->unwound);
	/* driver calls a runtime call made: not written (the runtime call shows them) */
	cJSON_AddNumberToObject(root, "nested_driver_calls", (double)st->nested_driver_calls);
	/* without --gpu there is no join: no counts at all */
	if (env.gpu)
		cJSON_AddItemToObject(root, "gpu_join", gpu_join_json(s->gsink, -1));
	if (cli_opts.py_stacks)
		cJSON_AddItemToObject(root, "python_stacks", ustacks_json(s, st));
	out = cJSON_Print(root);
	cJSON_Delete(root);
	return out;
}

static bool has_lib(struct target *t, const char *needle)
{
	for (int j = 0; j < target__nr_objs(t); j++)
		if (strstr(target__obj(t, j)->path, needle))
			return true;
	return false;
}

static void write_process_meta(struct trace_json *tj, struct target *t)
{
	char label[64];

	trace_json__process_name(tj, target__pid(t), target__comm(t)[0] ? target__comm(t) : "process");
	trace_json__process_sort(tj, target__pid(t), target__pid(t));
	if (target__rank(t) >= 0) {
		snprintf(label, sizeof(label), "rank %d", target__rank(t));
		trace_json__process_label(tj, target__pid(t), label);
	}
}

/* Every -p pid, opened before anything is loaded so a typo costs nothing. */
static int open_targets(struct trace_session *s)
{
	for (int i = 0; i < cli_opts.nr_pids; i++) {
		for (int j = 0; j < i; j++) {
			if (cli_opts.pids[j] == cli_opts.pids[i]) {
				log_error("pid %d given twice\n", cli_opts.pids[i]);
				return -EINVAL;
			}
		}
		s->procs[i].t = session__open_target(cli_opts.pids[i]);
		if (!s->procs[i].t)
			return -ESRCH;	/* its error line is out */
		s->nr_procs++;
	}
	return 0;
}

/* The BPF object, the output file, the decoder and the ring that feeds it. */
static int open_pipeline(struct trace_session *s)
{
	struct stat st;

	s->bpf = session__load_bpf(cli_opts.ring_mb, &(struct session_load_opts){
		.ustacks = cli_opts.py_stacks, .ustacks_native = env.native_stacks });
	if (!s->bpf)
		return -EINVAL;
	session__probes(s->bpf, &s->probes);
	s->probes.all_returns = env.durations;
	s->probes.classes = PROBE_CUDA_ALL | PROBE_NCCL;
	for (int i = 0; i < s->nr_procs; i++)
		s->procs[i].watch_err = session__watch_exit(s->bpf, target__pid(s->procs[i].t));

	/* only a regular file we create ourselves may be removed on failure (not /dev/...) */
	s->output_created = stat(cli_output.file, &st) && errno == ENOENT;
	s->tj = trace_json__open(cli_output.file);
	if (!s->tj) {
		int err = -errno;

		log_error("cannot write %s: %s\n", cli_output.file, strerror(-err));
		s->output_created = false;
		return err ? err : -EIO;
	}
	s->cache = elfsym_cache__new();
	if (s->cache)
		s->core = session__new(s->cache, &s->probes);
	if (s->core)
		s->dec = decoder__new(s->core, s->tj, s->cache);
	if (!s->cache || !s->core || !s->dec ||
	    (s->bpf->ustacks && decoder__set_ustacks(s->dec, ustacks__lookup, s->bpf->ustacks))) {
		log_error("out of memory\n");
		return -ENOMEM;
	}
	s->rb = ring_buffer__new(bpf_map__fd(s->bpf->skel->maps.events), session__ring_cb, s->core,
				 NULL);
	if (!s->rb) {
		int err = -errno;

		log_error("failed to create ring buffer: %s\n", strerror(-err));
		return err ? err : -EINVAL;
	}
	return 0;
}

/* Probes every target (and its memory with --mem); the trace starts here. */
static int attach_targets(struct trace_session *s)
{
	int err;

	s->start_mono = clock_ns(CLOCK_MONOTONIC);
	s->start_real = clock_ns(CLOCK_REALTIME);
	err = trace_json__begin(s->tj, s->start_mono, s->start_real);
	if (err) {
		log_error("cannot write %s: %s\n", cli_output.file, strerror(-err));
		return err;
	}
	for (int i = 0; i < s->nr_procs; i++) {
		struct traced *p = &s->procs[i];
		struct target *t = p->t;
		struct target_counts n;

		err = session__add_target(s->core, t);
		if (err) {
			log_error("pid %d (%s): %s\n", target__pid(t), target__comm(t), strerror(-err));
			return err;
		}
		/* before the probes, so the first call has its stack; a process whose Python
		 * cannot be read is traced all the same (its notice line is out, the reason
		 * goes in the metadata) */
		err = session__ustacks_add(s->bpf, target__pid(t));
		if (err == -ENOMEM) {
			log_error("out of memory\n");
			return err;
		}
		err = session__scan(s->core, t);
		if (getenv("TPTRACE_TEST_ATTACH_HOLD_MS"))	/* a slow scan, for tests */
			usleep(atoi(getenv("TPTRACE_TEST_ATTACH_HOLD_MS")) * 1000);
		if (err == -ESRCH) {
			log_error("pid %d exited before it could be traced\n", target__pid(t));
			return err;
		}
		if (err < 0) {
			log_error("attaching to pid %d (%s): %s\n", target__pid(t), target__comm(t),
				  strerror(-err));
			return err;
		}
		/* a program may use the driver alone (cuLaunchKernel, as Triton does) */
		/* --torch*: a CPU-only PyTorch job still has its ops, logs, trace to show */
		target__counts(t, &n);
		if (!n.cudart && !n.driver && !cli_opts.wait && !env.torch && !env.torch_logs &&
		    !env.torch_trace) {
			log_error("pid %d (%s) has no CUDA runtime loaded (no libcudart.so.*, "
				  "no static cudart, no libcuda.so.1); use --wait to wait for it\n",
				  target__pid(t), target__comm(t));
			return -ENOENT;
		}
		if (!n.cudart && !n.driver) {
			if (cli_opts.wait)
				log_info("waiting for pid %d (%s) to load a CUDA runtime\n", target__pid(t),
					 target__comm(t));
			else
				log_info("pid %d (%s) has no CUDA runtime loaded (yet): --torch "
					 "events only until it does\n", target__pid(t), target__comm(t));
			p->waiting = true;
		}
		write_process_meta(s->tj, t);
		/* the trace shows counters and events, not native call sites: no native user
		 * stacks (their frame walk is most of an allocation probe's cost; tptrace mem
		 * keeps them); --py-stacks gives the events their Python stack */
		if (env.mem) {
			struct memtrace_opts mo = { .no_stacks = true, .py_stacks = cli_opts.py_stacks,
						    .uprobe_multi = s->bpf->uprobe_multi };

			p->mt = memtrace__attach(t, s->tj, &mo);
			if (!p->mt)
				return -EINVAL;
		}
		log_verbose("pid %d (%s): %d probes in %d CUDA runtime(s)\n", target__pid(t), target__comm(t),
			    n.probes, n.cudart);
	}
	return 0;
}

/* --gpu: the CUPTI agent into every target. */
static int attach_gpus(struct trace_session *s)
{
	struct gpu_opts go = { .cupti_path = env.cupti };
	int err;

	/* the join, a sink of the session whose output the trace writer consumes */
	s->gsink = gpu_sink__new(s->core);
	err = s->gsink ? decoder__enable_gpu(s->dec, s->gsink) : -ENOMEM;
	if (err) {
		log_error("out of memory\n");
		return err;
	}
	/* every process first: how many there are names the GPU tracks */
	for (int i = 0; i < s->nr_procs; i++) {
		struct traced *p = &s->procs[i];

		p->gsrc = gpu_sink__add_process(s->gsink, target__pid(p->t), target__comm(p->t));
		if (!p->gsrc) {
			log_error("out of memory\n");
			return -ENOMEM;
		}
	}
	/* tests: held here, probes attached and no agent in yet, until a line is written to
	 * this FIFO (calls made meanwhile are "before CUPTI was enabled", by construction) */
	if (getenv("TPTRACE_TEST_GPU_GATE")) {
		FILE *gate = fopen(getenv("TPTRACE_TEST_GPU_GATE"), "r");
		char line[16];

		if (gate) {
			if (!fgets(line, sizeof(line), gate))
				line[0] = '\0';
			fclose(gate);
		}
	}
	for (int i = 0; i < s->nr_procs; i++) {
		struct traced *p = &s->procs[i];
		char msg[512] = "";

		p->gpu = gpu__attach(target__pid(p->t), &go, msg, sizeof(msg));
		if (!p->gpu) {
			err = errno ? -errno : -EINVAL;
			log_error("--gpu: pid %d: %s\n", target__pid(p->t), msg[0] ? msg : strerror(-err));
			return err;
		}
		/* the agent answered ENABLED: its calls from here on have CUPTI records */
		gpu_sink__attached(p->gsrc, p->gpu, clock_ns(CLOCK_MONOTONIC));
	}
	return 0;
}

/* --gpu: refuse before any probe or injection when the agent cannot work in a target (one
 * line saying why and what to do, from gpu__precheck); the processes are left untouched. */
static int precheck_gpus(struct trace_session *s)
{
	for (int i = 0; i < s->nr_procs; i++) {
		char msg[512] = "";
		int err = gpu__precheck(target__pid(s->procs[i].t), msg, sizeof(msg));

		if (err) {
			log_error("--gpu: pid %d: %s\n", target__pid(s->procs[i].t), msg);
			return err;
		}
	}
	return 0;
}

/* --wait: says once that a target's runtime is traced, whichever scan found it (a dlopen
 * record's or the periodic one). */
static void announce_loaded(struct trace_session *s)
{
	for (int i = 0; i < s->nr_procs; i++) {
		struct traced *p = &s->procs[i];

		struct target_counts n;

		target__counts(p->t, &n);
		if (p->waiting && (n.cudart || n.driver)) {
			p->waiting = false;
			log_info("pid %d loaded a CUDA runtime; tracing\n", target__pid(p->t));
		}
	}
}

/* Number of targets still running; says once when one exited. */
static int count_alive(struct trace_session *s)
{
	int alive = 0;

	for (int i = 0; i < s->nr_procs; i++) {
		struct target *t = s->procs[i].t;
		bool was_gone = target__exited(t);

		if (!target__gone(t))
			alive++;
		else if (!was_gone)
			log_info("pid %d (%s) exited\n", target__pid(t), target__comm(t));
	}
	return alive;
}

/* Until -d, a signal, every target gone, or a write error. */
static void run_loop(struct trace_session *s)
{
	uint64_t deadline = 0, last_rescan = s->start_mono;
	int err;

	/* -d counts from here: attaching (reading the symbols of a 500 MiB libtorch, starting
	 * torch.profiler) may take seconds, and the user asked for SEC seconds of tracing */
	if (cli_opts.duration > 0)
		deadline = clock_ns(CLOCK_MONOTONIC) + (uint64_t)(cli_opts.duration * 1e9);
	log_info("tracing %d process%s to %s%s\n", s->nr_procs, s->nr_procs > 1 ? "es" : "",
		 cli_output.file, deadline ? "" : "; Ctrl-C to stop");
	while (!stop_signal) {
		uint64_t now;

		/* probes submit without waking us (a wake-up per call costs more than the
		 * trap): wait a little, then drain whatever is there */
		err = ring_buffer__poll(s->rb, 20);
		if (err >= 0)
			err = ring_buffer__consume(s->rb);
		if (err < 0 && err != -EINTR) {
			log_error("reading ring buffer: %s\n", strerror(-err));
			break;
		}
		for (int i = 0; i < s->nr_procs; i++)
			if (s->procs[i].mt)
				memtrace__poll(s->procs[i].mt);
		if (trace_json__error(s->tj))
			break;
		announce_loaded(s);
		now = clock_ns(CLOCK_MONOTONIC);
		/* the agents' records, and the calls the join can decide now */
		if (s->gsink)
			gpu_sink__poll(s->gsink, now);
		if (!count_alive(s))
			break;
		if (deadline && now >= deadline)
			break;
		if (now - last_rescan > (uint64_t)(cli_opts.wait ? 100 : 1000) * 1000000ULL) {
			last_rescan = now;
			session__rescan(s->core);	/* code mapped without the linker's notice */
		}
	}
}

/* --torch-logs: FILE.PID.torch_logs.txt next to the trace. */
static void torch_logs_path(char *buf, size_t len, int pid)
{
	snprintf(buf, len, "%s.%d.torch_logs.txt", cli_output.file, pid);
}

/* --torch, --torch-logs: PyTorch's instruments on in every target, once tptrace's probes are
 * live. 0, or a negative errno after one line: the window is then not run (the processes
 * already switched on are switched off again by stop_torch). */
static int start_torch(struct trace_session *s)
{
	int timeout_ms = (int)(cli_opts.torch_timeout * 1000);

	for (int i = 0; i < s->nr_procs; i++) {
		struct traced *p = &s->procs[i];
		int pid = target__pid(p->t);
		char err[512] = "";

		if (env.torch) {
			struct torchprof_opts o = { .cuda = !env.gpu, .timeout_ms = timeout_ms };

			p->torch = torchprof__start(pid, &o, err, sizeof(err));
			if (!p->torch) {
				int e = errno ? -errno : -EINVAL;

				snprintf(p->torch_err, sizeof(p->torch_err), "%s", err);
				log_error("--torch: %s\n", torch__err_line(pid, err));
				return e;
			}
		}
		if (env.torch_logs) {
			p->torch_logs = torch_instr__start(pid, TORCH_LOGS, env.torch_logs,
							  timeout_ms, err, sizeof(err));
			if (!p->torch_logs) {
				log_error("--torch-logs: %s\n", torch__err_line(pid, err));
				return errno ? -errno : -EINVAL;
			}
		}
		/* after --torch-logs: its set_logs() resets torch.__trace's own handlers */
		if (env.torch_trace) {
			p->torch_trace = torch_instr__start(pid, TORCH_TRACE, NULL, timeout_ms, err,
							   sizeof(err));
			if (!p->torch_trace) {
				log_error("--torch-trace: %s\n", torch__err_line(pid, err));
				return errno ? -errno : -EINVAL;
			}
			log_info("--torch-trace: pid %d: torch's structured trace on\n", pid);
		}
	}
	return 0;
}

/* The end of the window in every target that has an instrument on, while it still runs.
 * 0, or -1 when one of them gave no result (its line is out). */
static int stop_torch(struct trace_session *s)
{
	int ret = 0;

	for (int i = 0; i < s->nr_procs; i++) {
		struct traced *p = &s->procs[i];
		char err[512] = "", path[4200];

		if (!p->torch && !p->torch_logs && !p->torch_trace)
			continue;
		int e = 0;

		/* the main thread stops the profiler at its next safe point, then exports every
		 * event: seconds on a large window; say what is being waited for */
		if (p->torch && !target__exited(p->t))
			log_info("--torch: pid %d: stopping torch.profiler (the job's main thread "
				 "exports its events)...\n", target__pid(p->t));

		if (target__exited(p->t) || target__gone(p->t) ||
		    (p->torch && (e = torchprof__stop(p->torch, err, sizeof(err))) == -ESRCH)) {
			/* gone, or exiting: the stop found the profiler stopped by the job's exit */
			snprintf(p->torch_err, sizeof(p->torch_err), "the process exited before "
				 "the profiler was stopped: its events are lost");
			log_error("--torch: pid %d exited before PyTorch's instruments were "
				  "stopped: their output is lost\n", target__pid(p->t));
			torchprof__free(p->torch);
			p->torch = NULL;
			ret = -1;
			continue;
		}
		if (e) {
			snprintf(p->torch_err, sizeof(p->torch_err), "%s", err);
			log_error("--torch: %s\n", torch__err_line(target__pid(p->t), err));
			ret = -1;
		}
		if (p->torch_trace) {
			if (torch_trace__stop(p->torch_trace, env.torch_trace, path, sizeof(path),
					      err, sizeof(err))) {
				log_error("--torch-trace: %s\n", torch__err_line(target__pid(p->t), err));
				ret = -1;
			} else if (path[0]) {
				log_info("--torch-trace: pid %d: wrote %s\n", target__pid(p->t), path);
			} else {
				log_info("--torch-trace: pid %d: torch logged no structured trace "
					 "entry in the window (nothing compiled): no file\n",
					 target__pid(p->t));
			}
		}
		if (p->torch_logs) {
			torch_logs_path(path, sizeof(path), target__pid(p->t));
			if (torch_instr__stop(p->torch_logs, path, err, sizeof(err))) {
				log_error("--torch-logs: %s\n", torch__err_line(target__pid(p->t), err));
				ret = -1;
			} else {
				log_info("--torch-logs: pid %d: wrote %s\n", target__pid(p->t), path);
			}
		}
	}
	return ret;
}

/* --torch: one line on what was merged, from the metadata. */
static void log_torch_merged(const struct traced *p)
{
	cJSON *m = torchprof__meta(p->torch);
	const cJSON *c = cJSON_GetObjectItem(m, "clock");

	log_info("--torch: pid %d: %.0f torch.profiler events merged, %.0f steps, clock residual "
		 "%.0f ns\n", target__pid(p->t),
		 cJSON_GetNumberValue(cJSON_GetObjectItem(m, "events_merged")),
		 cJSON_GetNumberValue(cJSON_GetObjectItem(m, "steps")),
		 cJSON_GetNumberValue(cJSON_GetObjectItem(c, "residual_ns")));
	cJSON_Delete(m);
}

/* --torch: the profiler's events into the trace, after tptrace's own. 0 or -1 (one line). */
static int merge_torch(struct trace_session *s)
{
	int ret = 0;

	for (int i = 0; i < s->nr_procs; i++) {
		struct traced *p = &s->procs[i];
		char err[512] = "";

		if (!p->torch)
			continue;
		if (torchprof__write(p->torch, s->tj, s->start_mono, err, sizeof(err))) {
			/* stop's failure already has its line */
			if (!p->torch_err[0])
				log_error("--torch: %s\n", torch__err_line(target__pid(p->t), err));
			ret = -1;
			continue;
		}
		log_torch_merged(p);
	}
	return ret;
}

/* --gpu: records lost on the way are said, never left to a count in the metadata. */
static void gpu_say_losses(const struct traced *p)
{
	const struct gpu_stats *g = &p->gstats;

	if (g->dropped_cupti)
		log_error("--gpu: pid %d: CUPTI dropped %llu activity records (its buffers were "
			  "full): their kernels, copies or API calls are missing from the trace\n",
			  target__pid(p->t), (unsigned long long)g->dropped_cupti);
	if (g->dropped_ring)
		log_error("--gpu: pid %d: the agent dropped %llu records (tptrace read its ring too "
			  "slowly): their kernels, copies or API calls are missing from the trace\n",
			  target__pid(p->t), (unsigned long long)g->dropped_ring);
	if (g->records_incomplete)
		log_error("--gpu: pid %d: %llu GPU records came back from CUPTI before their work "
			  "ended (times unknown): left out\n", target__pid(p->t),
			  (unsigned long long)g->records_incomplete);
	if (g->buffers_cut)
		log_error("--gpu: pid %d: %llu CUPTI buffers had a record that could not be read "
			  "or stepped over: the records after it in those buffers are missing\n",
			  target__pid(p->t), (unsigned long long)g->buffers_cut);
}

/* Takes the agents out (their last records into the trace) and drains the rings. */
static void drain(struct trace_session *s)
{
	/* what is already in the ring goes before the end of the trace */
	ring_buffer__consume(s->rb);
	for (int i = 0; i < s->nr_procs; i++) {
		struct traced *p = &s->procs[i];

		if (!p->gpu)
			continue;
		/* flush, disable and unsubscribe CUPTI, then unload the agent; calls that end
		 * from here on may have no record */
		gpu_sink__disabling(p->gsrc, clock_ns(CLOCK_MONOTONIC));
		if (target__exited(p->t) || target__gone(p->t))
			gpu__poll(p->gpu, gpu_sink__record, p->gsrc);
		else if (gpu__detach(p->gpu, gpu_sink__record, p->gsrc))
			log_error("--gpu: pid %d: detaching the agent: %s\n", target__pid(p->t),
				  gpu__error(p->gpu));
		gpu__stats(p->gpu, &p->gstats);
		gpu_say_losses(p);
	}
	ring_buffer__consume(s->rb);
	s->end_mono = clock_ns(CLOCK_MONOTONIC);
	s->drops_err = session__drops(s->bpf, &s->drops);
	for (int i = 0; i < s->nr_procs; i++)
		if (s->procs[i].mt)
			memtrace__finish(s->procs[i].mt, s->end_mono);
	decoder__finish(s->dec, s->end_mono);
	if (s->gsink)
		gpu_sink__finish(s->gsink, s->end_mono);
}

/* HTA reads distributedInfo for a single-rank trace. */
static void write_distributed_info(struct trace_session *s)
{
	int ranks = 0, rank = -1, world = -1;
	bool nccl = false;
	char dist[160], world_str[16];

	for (int i = 0; i < s->nr_procs; i++) {
		struct target *t = s->procs[i].t;

		if (target__rank(t) >= 0) {
			ranks++;
			rank = target__rank(t);
			world = target__world_size(t);
		}
		nccl |= has_lib(t, "libnccl");
	}
	if (ranks != 1 || s->nr_procs != 1)
		return;
	/* an unknown world size is written unknown (null), never as a number */
	if (world > 0)
		snprintf(world_str, sizeof(world_str), "%d", world);
	else
		snprintf(world_str, sizeof(world_str), "null");
	/* HTA reads the rank with the regex "rank":\s+(\d+): keep the space */
	snprintf(dist, sizeof(dist), "{\"backend\": \"%s\", \"rank\": %d, \"world_size\": %s}",
		 nccl ? "nccl" : "unknown", rank, world_str);
	trace_json__top_raw(s->tj, "distributedInfo", dist);
}

/* --gpu: the join's numbers in full (-v), and a line for each real problem. */
static void log_gpu_join(const struct trace_session *s)
{
	struct gpu_join_stats j;

	if (!env.gpu || gpu_sink__stats(s->gsink, &j))
		return;
	log_verbose("--gpu: %llu of %llu host calls joined with CUPTI (%llu before CUPTI was "
		    "enabled, %llu after it was disabled, %llu without a record, %llu ambiguous), "
		    "%llu arrows; CUPTI API records no call claimed: %llu nested driver calls, %llu "
		    "unprobed calls, %llu ambiguous; %llu GPU work records no written call carries\n",
		    (unsigned long long)j.joined, (unsigned long long)j.calls,
		    (unsigned long long)j.before_enable, (unsigned long long)j.after_disable,
		    (unsigned long long)j.no_record,
		    (unsigned long long)j.ambiguous, (unsigned long long)j.flows,
		    (unsigned long long)j.records_nested, (unsigned long long)j.records_unprobed,
		    (unsigned long long)j.records_ambiguous, (unsigned long long)j.work_unclaimed);
	/* several processes: each one's own (their sum is the line above) */
	for (int i = 0; s->nr_procs > 1 && i < s->nr_procs; i++) {
		const struct traced *p = &s->procs[i];
		struct gpu_join_stats pj;

		if (!p->gpu || gpu_sink__stats_pid(s->gsink, target__pid(p->t), &pj))
			continue;
		log_verbose("--gpu: pid %d: %llu of %llu host calls joined (%llu before CUPTI was "
			    "enabled, %llu without a record, %llu ambiguous), %llu arrows\n",
			    target__pid(p->t), (unsigned long long)pj.joined, (unsigned long long)pj.calls,
			    (unsigned long long)pj.before_enable, (unsigned long long)pj.no_record,
			    (unsigned long long)pj.ambiguous, (unsigned long long)pj.flows);
	}
	/* the real problems: calls made while CUPTI was on whose GPU side is missing */
	if (j.no_record)
		log_error("--gpu: %llu of %llu calls made with CUPTI on have no CUPTI record: their "
			  "GPU work has no arrow (records dropped, or CUPTI late)\n",
			  (unsigned long long)j.no_record,
			  (unsigned long long)(j.calls - j.before_enable - j.after_disable));
	if (j.ambiguous)
		log_error("--gpu: %llu calls fit more than one CUPTI record: left unjoined, never "
			  "guessed\n", (unsigned long long)j.ambiguous);
}

/* The one line on what was captured: "wrote FILE: 3.0 s of pid 42 (train): 21570 CUDA calls
 * (8628 launches), 12885 launch->kernel arrows, 0 events dropped". */
static void log_summary(const struct trace_session *s, const struct decoder_stats *st)
{
	char who[96], gpu[64] = "", dropped[32];
	struct gpu_join_stats j;

	if (s->nr_procs == 1)
		snprintf(who, sizeof(who), "pid %d (%s)", target__pid(s->procs[0].t),
			 target__comm(s->procs[0].t));
	else
		snprintf(who, sizeof(who), "%d processes", s->nr_procs);
	if (env.gpu && !gpu_sink__stats(s->gsink, &j))
		snprintf(gpu, sizeof(gpu), ", %llu launch->kernel arrows",
			 (unsigned long long)j.flows);
	if (s->drops_err)
		snprintf(dropped, sizeof(dropped), "drops unknown");
	else
		snprintf(dropped, sizeof(dropped), "%llu events dropped",
			 (unsigned long long)s->drops);
	log_info("wrote %s: %.1f s of %s: %llu CUDA/NCCL calls (%llu launches)%s, %s\n",
		 cli_output.file, (s->end_mono - s->start_mono) / 1e9, who,
		 (unsigned long long)st->calls, (unsigned long long)st->launches, gpu, dropped);
	log_verbose("%llu launches named, %llu driver calls nested in runtime calls (written once, "
		    "as the runtime call)\n", (unsigned long long)st->launches_named,
		    (unsigned long long)st->nested_driver_calls);
	if (st->launches_named < st->launches)
		log_error("%llu of %llu launches have no kernel name (their function is in no "
			  "symbol table read)\n",
			  (unsigned long long)(st->launches - st->launches_named),
			  (unsigned long long)st->launches);
}

/* The end of the trace: metadata, then the file is closed. 0 or a negative errno. */
static int write_trace_end(struct trace_session *s)
{
	const struct decoder_stats *st = decoder__stats(s->dec);
	char *meta = metadata_json(s);
	int err;

	trace_json__end_events(s->tj);
	trace_json__top_raw(s->tj, "deviceProperties", "[]");
	write_distributed_info(s);
	if (meta)
		trace_json__top_raw(s->tj, "tptrace", meta);
	free(meta);
	for (int i = 0; i < s->nr_procs; i++) {
		char *mm = s->procs[i].mt ? memtrace__meta_json(s->procs[i].mt) : NULL;
		char key[48];

		snprintf(key, sizeof(key), i ? "tptrace_memory_%d" : "tptrace_memory",
			 target__pid(s->procs[i].t));
		if (mm)
			trace_json__top_raw(s->tj, key, mm);
		free(mm);
	}
	err = trace_json__close(s->tj);
	s->tj = NULL;
	if (err) {
		log_error("writing %s failed: %s; the trace is incomplete\n", cli_output.file,
			  strerror(-err));
		return err;
	}
	log_summary(s, st);
	if (s->drops_err)
		log_error("the drop counter could not be read (%s): events may be missing\n",
			  strerror(-s->drops_err));
	else if (s->drops)
		log_error("%llu events dropped (ring buffer full); raise --ring-mb\n",
			  (unsigned long long)s->drops);
	log_gpu_join(s);
	return 0;
}

static void trace_session__free(struct trace_session *s)
{
	if (s->tj) {
		/* failed before the trace was complete: leave no half-written file behind */
		trace_json__free(s->tj);
		if (s->output_created)
			unlink(cli_output.file);
	}
	ring_buffer__free(s->rb);
	for (int i = 0; i < s->nr_procs; i++)
		memtrace__free(s->procs[i].mt);	/* before its target */
	for (int i = 0; i < s->nr_procs; i++)
		gpu__free(s->procs[i].gpu);	/* detaches the agent if still there */
	for (int i = 0; i < s->nr_procs; i++) {
		torchprof__free(s->procs[i].torch);
		torch_instr__free(s->procs[i].torch_logs);
		torch_instr__free(s->procs[i].torch_trace);
	}
	for (int i = 0; i < s->nr_procs; i++)
		target__free(s->procs[i].t);	/* detaches the uprobes */
	gpu_sink__free(s->gsink);
	decoder__free(s->dec);
	session__free(s->core);
	session__free_bpf(s->bpf);
	elfsym_cache__free(s->cache);
}

int fr_main(int argc, char **argv);
int mem_main(int argc, char **argv);
int stacks_main(int argc, char **argv);
int report_main(int argc, char **argv);	/* tools/report/report.c */

/* The commands of tptrace, beside tracing itself (tptrace -p PID). */
static const struct {
	const char *name;
	int (*main)(int argc, char **argv);
} commands[] = {
	{ "fr", fr_main }, { "mem", mem_main }, { "stacks", stacks_main },
	{ "report", report_main },
};

/* Edit distance of a and b when at most 2 (a typo), else 3. */
static int near(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	int d[16][16];

	if (la > 14 || lb > 14)
		return 3;
	for (size_t i = 0; i <= la; i++)
		d[i][0] = (int)i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = (int)j;
	for (size_t i = 1; i <= la; i++)
		for (size_t j = 1; j <= lb; j++) {
			int x = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);

			if (d[i - 1][j] + 1 < x)
				x = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < x)
				x = d[i][j - 1] + 1;
			d[i][j] = x;
		}
	return d[la][lb] < 3 ? d[la][lb] : 3;
}

/* A first argument that is no option and no command: name the real ones (exit 2). */
static int unknown_command(const char *arg)
{
	const char *best = NULL;
	int best_d = 3;

	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		int d = near(arg, commands[i].name);

		if (d < best_d) {
			best_d = d;
			best = commands[i].name;
		}
	}
	fprintf(stderr, "tptrace: unknown command '%.30s'%s%s%s; commands: fr mem stacks report, or "
		"-p PID\n", arg, best ? " (did you mean " : "", best ? best : "",
		best ? "?)" : "");
	return 2;
}

int main(int argc, char **argv)
{
	struct argp argp = { .options = opts, .parser = parse_arg, .doc = doc };
	struct trace_session s = { .argc = argc, .argv = argv };
	bool torch_ok = true;
	int ret = 1;

	for (size_t i = 0; argc > 1 && i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].main(argc - 1, argv + 1);
	if (argc > 1 && argv[1][0] != '-')
		return unknown_command(argv[1]);
	argp_err_exit_status = 2;
	argp_help_width();
	cli_opts.takes = CLI_PID | CLI_WAIT | CLI_DURATION | CLI_RING_MB |
			 CLI_PY_STACKS | CLI_TORCH_TIMEOUT;
	cli_opts.pids = target_pids;
	cli_opts.max_pids = MAX_PIDS;
	cli_output.takes = CLI_OUT_FILE;
	cli_output.file = "tptrace.json.gz";
	argp.children = cli_opts__children(NULL);
	if (argp_parse(&argp, argc, argv, 0, NULL, NULL))
		return 2;
	session__libbpf_print_setup();
	signal(SIGPIPE, SIG_IGN);

	if (open_targets(&s) || (env.gpu && precheck_gpus(&s)) || open_pipeline(&s) ||
	    attach_targets(&s) ||
	    (env.gpu && attach_gpus(&s)))
		goto cleanup;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	/* a refusal ends the window before it starts; the trace of what is there is written */
	if ((env.torch || env.torch_logs || env.torch_trace) && start_torch(&s))
		torch_ok = false;
	else
		run_loop(&s);
	if ((env.torch || env.torch_logs || env.torch_trace) && stop_torch(&s))
		torch_ok = false;
	drain(&s);
	if (env.torch && merge_torch(&s))
		torch_ok = false;
	if (!write_trace_end(&s) && torch_ok)
		ret = 0;
cleanup:
	trace_session__free(&s);
	return ret;
}
