// SPDX-License-Identifier: MIT
/* tptrace mem: what holds GPU memory in a running process, from outside it (memtrace.h,
 * memsnap.h): a memory_viz snapshot, a report of live allocations by call site, and a trace
 * with memory counters. */
#include <argp.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include <cjson/cJSON.h>
#include "elfsym.h"
#include "atomic_file.h"
#include "log.h"
#include "util.h"
#include "memsnap.h"
#include "memtrace.h"
#include "cli_opts.h"
#include "cli_output.h"
#include "session.h"
#include "target.h"
#include "torchprof.h"
#include "trace_json.h"

/* -p, -w, -d, --ring-mb, --py-stacks, --no-stacks, --torch-timeout: cli_opts (cli_opts.h);
 * -o: cli_output */
static int target_pid;

static struct mem_env {
	const char *trace;
	bool leaks;
	bool pickle;
	long history;
	bool torch_history;	/* PyTorch's own _record_memory_history for the window */
} env;

static const char doc[] =
"tptrace mem: what holds GPU memory in a running process, over time, from\n"
"outside it.\n"
"\n"
"USAGE: tptrace mem -p PID [-d SEC] [-o SNAPSHOT] [--pickle] [--leaks]\n"
"                   [--trace FILE] [--no-stacks | --py-stacks] [--wait]\n"
"                   [--torch-history [--torch-timeout SEC]]\n"
"\n"
"Probes PyTorch's caching allocator (USDT pytorch:malloc/free, tensor level)\n"
"and the CUDA runtime and driver allocation calls (cudaMalloc & co,\n"
"cuMemAlloc, cuMemCreate/Map: segment level), with no restart. At the end\n"
"(-d expiry, Ctrl-C, or exit of the process) writes a snapshot that\n"
"https://docs.pytorch.org/memory_viz opens (-o: JSON, or a pickle with\n"
"--pickle) and/or prints the allocations still live, by call site (--leaks).\n"
"Only what happens after attach is known. Without -o, --leaks and --trace:\n"
"-o tptrace-mem.json.\n"
"\n"
"--py-stacks puts the Python frames of the allocating line first in each\n"
"allocation's frames (as PyTorch's own snapshots; CPython 3.9-3.13), and\n"
"--leaks then groups by Python call site. --no-stacks takes no user stack\n"
"per allocation (cheaper; no call sites). -w waits for the process to load\n"
"CUDA or PyTorch.\n"
"\n"
"EXAMPLES:\n"
"  sudo tptrace mem -p 4242 -d 30 -o snapshot.json    # open in memory_viz\n"
"  sudo tptrace mem -p 4242 --leaks                    # Ctrl-C: what is live\n"
"  sudo tptrace mem -p 4242 --py-stacks --leaks        # ... by line of Python\n"
"  sudo tptrace mem -p 4242 -d 10 --trace mem.json.gz  # counters, Perfetto\n";

enum { OPT_PICKLE = 1000, OPT_LEAKS, OPT_TRACE, OPT_HISTORY, OPT_TORCH_HISTORY };

static const struct argp_option opts[] = {
	{ "pickle", OPT_PICKLE, NULL, 0, "Write the snapshot as a Python pickle (protocol 2)", 0 },
	{ "leaks", OPT_LEAKS, NULL, 0, "Print live allocations by size and call site on stdout", 0 },
	{ "trace", OPT_TRACE, "FILE", 0, "Also write a trace with memory counters (.json, .json.gz, .pftrace[.gz])", 0 },
	{ "max-entries", OPT_HISTORY, "N", 0, "Snapshot history entries kept (default 200000)", 0 },
	{ "torch-history", OPT_TORCH_HISTORY, NULL, 0, "Also PyTorch's own memory history for the "
	  "window (torch.cuda.memory._record_memory_history, CUDA builds): its _snapshot() "
	  "pickled to SNAPSHOT.torch.pickle", 0 },
	{},
};

static error_t parse_arg(int key, char *arg, struct argp_state *state)
{
	char *end;
	long v;

	switch (key) {
	case OPT_PICKLE:
		env.pickle = true;
		break;
	case OPT_LEAKS:
		env.leaks = true;
		break;
	case OPT_TRACE:
		env.trace = arg;
		break;
	case OPT_HISTORY:
		v = strtol(arg, &end, 10);
		if (*end || v < 1 || v > 100000000)
			argp_error(state, "invalid --max-entries '%s' (1..100000000)", arg);
		env.history = v;
		break;
	case OPT_TORCH_HISTORY:
		env.torch_history = true;
		break;
	case ARGP_KEY_END:
		cli_opts__check(state);
		if (env.pickle && !cli_output.file)
			argp_error(state, "--pickle needs -o FILE");
		if (!cli_output.file && !env.leaks && !env.trace)
			cli_output.file = "tptrace-mem.json";
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

/* -o FILE: its temp file is made before attaching (an unwritable path is refused at once,
 * not after the whole trace) and renamed over FILE once the snapshot is written. */
struct snap_out {
	int dirfd;
	struct atomic_file af;
	bool open;
};

static int snap_out__open(struct snap_out *o, const char *path)
{
	const char *base;
	mode_t mask = umask(0);
	int err;

	umask(mask);
	o->dirfd = atomic_file__dir_of(path, &base);
	if (o->dirfd < 0)
		return o->dirfd;
	err = atomic_file__open(&o->af, o->dirfd, base, 0666 & ~mask);
	if (err) {
		close(o->dirfd);
		o->dirfd = -1;
		return err;
	}
	o->open = true;
	return 0;
}

static void snap_out__close(struct snap_out *o)
{
	if (o->open)
		atomic_file__abort(&o->af);
	o->open = false;
	if (o->dirfd >= 0)
		close(o->dirfd);
	o->dirfd = -1;
}

static int write_snapshot(struct memtrace *mt, const struct memsnap_info *info,
			  struct snap_out *o)
{
	cJSON *root = memsnap__snapshot(memtrace__snap(mt), info);
	char *text = NULL;
	FILE *f = NULL;
	int err = 0, fd;

	if (!root)
		return -ENOMEM;
	fd = dup(o->af.fd);
	f = fd < 0 ? NULL : fdopen(fd, "w");
	if (!f) {
		err = -errno;
		if (fd >= 0)
			close(fd);
		goto out;
	}
	if (env.pickle) {
		err = memsnap__write_pickle(root, f);
	} else {
		text = cJSON_PrintUnformatted(root);
		if (!text)
			err = -ENOMEM;
		else if (fputs(text, f) < 0 || fputc('\n', f) < 0)
			err = -errno ? -errno : -EIO;
	}
	if (fclose(f) && !err)
		err = -errno;
	if (!err) {
		err = atomic_file__commit(&o->af, false);
		o->open = false;
	}
out:
	free(text);
	cJSON_Delete(root);
	return err;
}

static bool nothing_to_probe(struct memtrace *mt)
{
	const struct memtrace_stats *st = memtrace__stats(mt);

	return !st->usdt_probes && !st->runtime_probes && !st->driver_probes;
}

/* --output's snapshot and --trace's file opened before anything is attached; *trace_created:
 * the trace file is ours to remove when the run fails. 0, or -1 after an error line. */
static int open_outputs(struct snap_out *out, struct trace_json **tj, bool *trace_created)
{
	int err;

	if (cli_output.file) {
		err = snap_out__open(out, cli_output.file);
		if (err) {
			log_error("cannot write %s: %s\n", cli_output.file, strerror(-err));
			return -1;
		}
	}
	if (env.trace) {
		struct stat st;

		*trace_created = stat(env.trace, &st) && errno == ENOENT;
		*tj = trace_json__open(env.trace);
		if (!*tj) {
			log_error("cannot write %s: %s\n", env.trace, strerror(errno));
			*trace_created = false;
			return -1;
		}
	}
	return 0;
}

/* Events until a signal, the end of --duration, the target's exit or a trace write error;
 * waiting: nothing is probed yet (--wait), so libraries are looked for more often. */
static void record(struct session *core, struct memtrace *mt, struct target *t,
		   struct trace_json *tj, uint64_t start_mono, uint64_t deadline, bool waiting)
{
	uint64_t last_scan = start_mono;
	int err;

	while (!stop_signal) {
		uint64_t now;

		usleep(20000);
		err = memtrace__poll(mt);
		if (err < 0) {
			log_error("reading memory events: %s\n", strerror(-err));
			break;
		}
		if (tj && trace_json__error(tj))
			break;
		now = clock_ns(CLOCK_MONOTONIC);
		if (target__gone(t)) {
			log_info("pid %d (%s) exited\n", target__pid(t), target__comm(t));
			break;
		}
		if (deadline && now >= deadline)
			break;
		/* libraries loaded since (no dynamic-linker hook here: a rescan is cheap) */
		if (now - last_scan > (waiting ? 100 : 500) * 1000000ULL) {
			last_scan = now;
			session__rescan(core);
			memtrace__poll(mt);
			if (waiting && !nothing_to_probe(mt)) {
				waiting = false;
				log_info("pid %d loaded CUDA or PyTorch; tracing\n", target__pid(t));
			}
		}
	}
}

/* --torch-history: PyTorch's own snapshot written beside ours. 0, or -1 after an error line. */
static int torch_history_finish(struct torch_instr_run *torch, struct target *t)
{
	char torch_err[512], torch_path[4200];

	snprintf(torch_path, sizeof(torch_path), "%s.torch.pickle",
		 cli_output.file ? cli_output.file : env.trace ? env.trace : "tptrace-mem");
	if (target__gone(t)) {
		log_error("--torch-history: pid %d exited before PyTorch's snapshot was "
			  "taken\n", target__pid(t));
		return -1;
	}
	if (torch_instr__stop(torch, torch_path, torch_err, sizeof(torch_err))) {
		log_error("--torch-history: %s\n", torch__err_line(target__pid(t), torch_err));
		return -1;
	}
	log_info("--torch-history: wrote PyTorch's own snapshot to %s\n", torch_path);
	return 0;
}

/* The trace's end: its metadata, then the file closed (tj freed in any case). 0, or a
 * negative errno after an error line. */
static int trace_end(struct memtrace *mt, struct trace_json *tj, const struct memsnap_info *info)
{
	char *meta = memtrace__meta_json(mt);
	int err;

	trace_json__end_events(tj);
	trace_json__top_raw(tj, "deviceProperties", "[]");
	if (meta) {
		char *wrapped = malloc(strlen(meta) + 64);

		if (wrapped) {
			sprintf(wrapped, "{\"version\": \"%s\", \"memory\": %s}",
				info->version, meta);
			trace_json__top_raw(tj, "tptrace", wrapped);
		}
		free(wrapped);
	}
	free(meta);
	err = trace_json__close(tj);
	if (err)
		log_error("writing %s failed: %s; the trace is incomplete\n",
			  env.trace, strerror(-err));
	return err;
}

/* The drop warnings and the run's one summary line. */
static void log_summary(struct memtrace *mt, struct target *t)
{
	const struct memtrace_stats *st = memtrace__stats(mt);
	char dropped[24];

	if (st->counters_err)
		log_error("the memory drop counter could not be read (%s): events may "
			  "be missing\n", strerror(-st->counters_err));
	else if (st->dropped)
		log_error("%llu memory events dropped (ring buffer full); raise --ring-mb\n",
			  (unsigned long long)st->dropped);
	snprintf(dropped, sizeof(dropped), st->counters_err ? "unknown" : "%llu",
		 (unsigned long long)st->dropped);
	log_info("pid %d: %llu allocator events, %llu allocation calls (%llu OOM), "
		 "%s dropped%s%s\n", target__pid(t),
		 (unsigned long long)(memsnap__stats(memtrace__snap(mt))->allocs +
				      memsnap__stats(memtrace__snap(mt))->frees),
		 (unsigned long long)st->calls, (unsigned long long)st->ooms, dropped,
		 cli_output.file ? "; wrote " : "", cli_output.file ? cli_output.file : "");
}

int mem_main(int argc, char **argv)
{
	struct argp argp = { .options = opts, .parser = parse_arg, .doc = doc };
	/* no programs: the session's scans only find libraries (memtrace.c probes them) */
	struct target_probes resolve_only = {};
	struct session *core = NULL;	/* library discovery; the records come by memtrace's */
	struct memtrace_opts mo = {};
	struct elfsym_cache *cache = NULL;
	struct trace_json *tj = NULL;
	struct memtrace *mt = NULL;
	struct target *t = NULL;
	struct memsnap_info info;
	struct torch_instr_run *torch = NULL;
	char torch_err[512];
	uint64_t start_mono, start_real, end_mono, deadline = 0;
	bool trace_created = false, waiting;
	struct snap_out out = { .dirfd = -1 };
	int err, ret = 1;

	argp_err_exit_status = 2;
	argv[0] = (char *)"tptrace mem";	/* "Usage: tptrace mem ..." in argp's messages */
	argp_help_width();
	cli_opts.takes = CLI_PID | CLI_WAIT | CLI_DURATION | CLI_RING_MB |
			 CLI_PY_STACKS | CLI_NO_STACKS | CLI_TORCH_TIMEOUT;
	cli_opts.pids = &target_pid;
	cli_opts.max_pids = 1;
	cli_opts.py_needs_stacks = true;
	cli_output.takes = CLI_OUT_FILE;
	argp.children = cli_opts__children(NULL);
	if (argp_parse(&argp, argc, argv, 0, NULL, NULL))
		return 2;
	session__libbpf_print_setup();
	signal(SIGPIPE, SIG_IGN);

	t = session__open_target(target_pid);
	if (!t)
		goto cleanup;
	cache = elfsym_cache__new();
	core = cache ? session__new(cache, &resolve_only) : NULL;
	if (!core || session__add_target(core, t)) {
		log_error("out of memory\n");
		goto cleanup;
	}
	err = session__scan(core, t);
	if (err < 0) {
		log_error("reading pid %d (%s): %s\n", target__pid(t), target__comm(t), strerror(-err));
		goto cleanup;
	}
	/* --torch-history: asked first, so a process whose PyTorch cannot is refused before
	 * anything is attached */
	if (env.torch_history) {
		torch = torch_instr__start(target__pid(t), TORCH_MEM_HISTORY, NULL,
					   (int)(cli_opts.torch_timeout * 1000), torch_err,
					   sizeof(torch_err));
		if (!torch) {
			log_error("--torch-history: %s\n", torch__err_line(target__pid(t), torch_err));
			goto cleanup;
		}
	}
	if (open_outputs(&out, &tj, &trace_created))
		goto cleanup;
	start_mono = clock_ns(CLOCK_MONOTONIC);
	start_real = clock_ns(CLOCK_REALTIME);
	if (tj) {
		err = trace_json__begin(tj, start_mono, start_real);
		if (err) {
			log_error("cannot write %s: %s\n", env.trace, strerror(-err));
			goto cleanup;
		}
		trace_json__process_name(tj, target__pid(t), target__comm(t)[0] ? target__comm(t) : "process");
	}
	mo.uprobe_multi = uprobe_multi__supported();
	mo.no_stacks = cli_opts.no_stacks;
	mo.py_stacks = cli_opts.py_stacks;
	mo.ring_mb = cli_opts.ring_mb;
	mo.history = env.history;
	mt = memtrace__attach(t, tj, &mo);
	if (!mt)
		goto cleanup;
	waiting = nothing_to_probe(mt);
	if (waiting && !cli_opts.wait) {
		log_error("pid %d (%s) has no CUDA runtime, CUDA driver or PyTorch allocator "
			  "probes loaded; use --wait to wait for them\n", target__pid(t), target__comm(t));
		goto cleanup;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if (cli_opts.duration > 0)
		deadline = start_mono + (uint64_t)(cli_opts.duration * 1e9);
	if (waiting)
		log_info("waiting for pid %d (%s) to load CUDA or PyTorch\n", target__pid(t), target__comm(t));
	else
		log_info("tracing GPU memory of pid %d (%s): %d USDT probes, %d runtime and %d driver "
			 "functions%s\n", target__pid(t), target__comm(t), memtrace__stats(mt)->usdt_probes,
			 memtrace__stats(mt)->runtime_probes, memtrace__stats(mt)->driver_probes,
			 deadline ? "" : "; Ctrl-C to stop");
	record(core, mt, t, tj, start_mono, deadline, waiting);
	memtrace__poll(mt);
	if (torch && torch_history_finish(torch, t))
		goto cleanup;
	end_mono = clock_ns(CLOCK_MONOTONIC);
	memtrace__finish(mt, end_mono);
	memtrace__info(mt, &info);
	info.attach_real_ns = start_real;
	info.end_real_ns = start_real + (end_mono - start_mono);
	if (tj) {
		err = trace_end(mt, tj, &info);
		tj = NULL;
		if (err)
			goto cleanup;
	}
	if (cli_output.file) {
		err = write_snapshot(mt, &info, &out);
		if (err) {
			log_error("cannot write %s: %s\n", cli_output.file, strerror(-err));
			goto cleanup;
		}
	}
	if (env.leaks) {
		memsnap__leak_report(memtrace__snap(mt), &info, stdout);
		fflush(stdout);
	}
	log_summary(mt, t);
	ret = 0;
cleanup:
	snap_out__close(&out);
	if (tj) {
		trace_json__free(tj);
		if (trace_created)
			unlink(env.trace);
	}
	memtrace__free(mt);
	torch_instr__free(torch);	/* a history left on by a failed run is switched off */
	session__free(core);
	target__free(t);
	elfsym_cache__free(cache);
	return ret;
}
