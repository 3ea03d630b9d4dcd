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
#include <time.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include <bpf/bpf.h>
#include <cjson/cJSON.h>
#include "cuda.skel.h"
#include "cuda.h"
#include "decode.h"
#include "gpu.h"
#include "elfsym.h"
#include "log.h"
#include "memtrace.h"
#include "session.h"
#include "target.h"
#include "trace_json.h"

#ifndef TPTRACE_VERSION
#define TPTRACE_VERSION "0.0.0"
#endif



#define MAX_PIDS 64

static struct env {
	int pids[MAX_PIDS];
	int nr_pids;
	double duration;	/* seconds; 0 = until Ctrl-C or all targets exit */
	const char *output;
	bool wait;
	bool durations;
	bool mem;
	bool gpu;
	const char *cupti;
	int ring_mb;
} env = {
	.output = "tptrace.json.gz",
	.ring_mb = 4,
};

const char *argp_program_version = "tptrace " TPTRACE_VERSION;
const char *argp_program_bug_address = "<tptrace issues>";
static const char doc[] =
"tptrace: trace CUDA runtime and NCCL calls of running processes,\n"
"with no restart, environment variable or preload.\n"
"\n"
"USAGE: tptrace -p PID [-p PID ...] [-d SEC] [-o FILE] [--gpu] [--mem]\n"
"       tptrace fr ...    NCCL flight recorder (tptrace fr --help)\n"
"       tptrace mem ...   GPU memory snapshot, leaks (tptrace mem --help)\n"
"\n"
"Probes the CUDA runtime each process uses (libcudart.so.* anywhere, or\n"
"linked statically), follows libraries loaded later, and writes a\n"
"Chrome-trace JSON (Kineto conventions) that Perfetto opens and HTA\n"
"analyses. Ends on -d expiry, SIGINT/SIGTERM, or when every target exited.\n"
"\n"
"EXAMPLES:\n"
"  sudo tptrace -p 4242 -d 10 -o step.json.gz  # trace pid 4242 for 10 s\n"
"  sudo tptrace -p 4242 -p 4243 -o two.json     # two pids; Ctrl-C ends it\n"
"  sudo tptrace -p 4242 --wait -o run.json      # wait for CUDA to load\n"
"  sudo tptrace -p 4242 --gpu -o gpu.json.gz    # plus the GPU timeline\n"
"  sudo tptrace -p 4242 --mem -o mem.json.gz    # plus GPU memory counters\n"
"  sudo tptrace fr -a --dump-dir /var/tmp/tptrace  # flight recorder\n"
"  sudo tptrace mem -p 4242 -o snapshot.json    # memory_viz snapshot\n";

enum { OPT_DURATIONS = 1000, OPT_RING_MB, OPT_GPU, OPT_CUPTI, OPT_MEM };

static const struct argp_option opts[] = {
	{ "pid", 'p', "PID", 0, "Process to trace (repeat for several)", 0 },
	{ "duration", 'd', "SEC", 0, "Stop after SEC seconds (default: until Ctrl-C or exit)", 0 },
	{ "output", 'o', "FILE", 0, "Trace file; .json plain, .json.gz gzip (default tptrace.json.gz)", 0 },
	{ "wait", 'w', NULL, 0, "Wait for a target to load a CUDA runtime instead of failing", 0 },
	{ "durations", OPT_DURATIONS, NULL, 0,
	  "Also probe returns of async calls (launch durations; one more trap per call)", 0 },
	{ "gpu", OPT_GPU, NULL, 0,
	  "GPU timeline: inject an agent that enables CUPTI activity, merge kernels/copies "
	  "(with flows from their launches), take it out at the end", 0 },
	{ "cupti", OPT_CUPTI, "PATH", 0, "libcupti to load with --gpu (default: next to the "
	  "process's libcudart, then by name)", 0 },
	{ "mem", OPT_MEM, NULL, 0, "Also trace GPU memory (allocator USDT, cudaMalloc & co, cuMem*): "
	  "counters, OOM events", 0 },
	{ "ring-mb", OPT_RING_MB, "MB", 0, "Ring buffer size in MiB, power of two (default 4)", 0 },
	{},
};

static error_t parse_arg(int key, char *arg, struct argp_state *state)
{
	int pid;

	switch (key) {
	case 'p':
		if (session__parse_pid(arg, &pid))
			argp_error(state, "invalid pid '%s'", arg);
		if (env.nr_pids == MAX_PIDS)
			argp_error(state, "at most %d pids", MAX_PIDS);
		env.pids[env.nr_pids++] = pid;
		break;
	case 'd':
		if (session__parse_seconds(arg, &env.duration))
			argp_error(state, "invalid duration '%s' (seconds > 0)", arg);
		break;
	case 'o':
		env.output = arg;
		break;
	case 'w':
		env.wait = true;
		break;
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
	case OPT_RING_MB:
		if (session__parse_ring_mb(arg, &env.ring_mb))
			argp_error(state, "invalid --ring-mb '%s' (a power of two, 1..4096)", arg);
		break;
	case ARGP_KEY_ARG:
		argp_error(state, "unexpected argument '%s'", arg);
		break;
	case ARGP_KEY_END:
		if (!env.nr_pids)
			argp_error(state, "no process given: use -p PID");
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

static cJSON *gpu_json(const struct gpu_stats *g, bool attached, const struct decoder *dec)
{
	cJSON *o = cJSON_CreateObject();
	uint64_t matched, unmatched, flows;

	if (!attached) {
		cJSON_AddBoolToObject(o, "attached", false);
		return o;
	}
	decoder__gpu_stats(dec, &matched, &unmatched, &flows);
	cJSON_AddBoolToObject(o, "attached", true);
	cJSON_AddStringToObject(o, "cupti", g->cupti_path);
	cJSON_AddBoolToObject(o, "injected", g->injected);
	cJSON_AddBoolToObject(o, "agent_unloaded", g->unloaded);
	cJSON_AddNumberToObject(o, "records", (double)g->records);
	cJSON_AddNumberToObject(o, "kernels", (double)g->kernels);
	cJSON_AddNumberToObject(o, "memcpys", (double)g->memcpys);
	cJSON_AddNumberToObject(o, "memsets", (double)g->memsets);
	cJSON_AddNumberToObject(o, "records_dropped", (double)(g->dropped_ring + g->dropped_cupti));
	cJSON_AddNumberToObject(o, "clock_samples", g->clock_samples);
	/* CUPTI timestamps come from our CLOCK_MONOTONIC callback: how far a CUPTI time read
	 * was from the monotonic clock read around it */
	cJSON_AddNumberToObject(o, "clock_residual_ns", (double)g->clock_residual_ns);
	cJSON_AddNumberToObject(o, "clock_window_ns", (double)g->clock_window_ns);
	cJSON_AddNumberToObject(o, "launches_joined", (double)matched);
	cJSON_AddNumberToObject(o, "host_calls_unjoined", (double)unmatched);
	cJSON_AddNumberToObject(o, "flows", (double)flows);
	return o;
}

static uint64_t meta_base_mono;
static const struct gpu_stats *meta_gstats;
static struct gpu_session **meta_gpus;
static const struct decoder *meta_dec;

static char *metadata_json(struct target **targets, int nr, const struct decoder_stats *st,
			   uint64_t drops, uint64_t start_real, uint64_t end_real, int argc, char **argv)
{
	cJSON *root = cJSON_CreateObject(), *arr, *cmd;
	int probes = 0, attach_errors = 0;
	char *out;

	cJSON_AddStringToObject(root, "version", TPTRACE_VERSION);
	cmd = cJSON_AddArrayToObject(root, "command");
	for (int i = 0; i < argc; i++)
		cJSON_AddItemToArray(cmd, cJSON_CreateString(argv[i]));
	{
		char buf[32];

		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)start_real);
		cJSON_AddItemToObject(root, "start_unix_ns", cJSON_CreateRaw(buf));
	}
	cJSON_AddNumberToObject(root, "duration_s", (end_real - start_real) / 1e9);
	cJSON_AddStringToObject(root, "clock", "CLOCK_MONOTONIC (bpf_ktime_get_ns)");
	{
		char buf[32];

		/* ts 0 in CLOCK_MONOTONIC ns: maps trace times back to the host clock */
		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)meta_base_mono);
		cJSON_AddItemToObject(root, "base_mono_ns", cJSON_CreateRaw(buf));
	}
	arr = cJSON_AddArrayToObject(root, "targets");
	for (int i = 0; i < nr; i++) {
		struct target *t = targets[i];
		cJSON *o = cJSON_CreateObject(), *libs;

		cJSON_AddNumberToObject(o, "pid", t->pid);
		cJSON_AddStringToObject(o, "comm", t->comm);
		cJSON_AddStringToObject(o, "cmdline", t->cmdline ? t->cmdline : "");
		if (t->rank >= 0)
			cJSON_AddNumberToObject(o, "rank", t->rank);
		if (t->world_size >= 0)
			cJSON_AddNumberToObject(o, "world_size", t->world_size);
		libs = cJSON_AddArrayToObject(o, "cuda_runtimes");
		for (int j = 0; j < t->nr_objs; j++)
			if (t->objs[j].cudart)
				cJSON_AddItemToArray(libs, cJSON_CreateString(t->objs[j].path));
		cJSON_AddNumberToObject(o, "probes_attached", t->nr_probes);
		if (meta_gpus)
			cJSON_AddItemToObject(o, "gpu", gpu_json(&meta_gstats[i], meta_gpus[i] != NULL,
								 meta_dec));
		cJSON_AddNumberToObject(o, "attach_errors", t->attach_errors);
		cJSON_AddBoolToObject(o, "exited", t->exited);
		if (t->exit_code >= 0 && (t->exit_code & 0x7f))
			cJSON_AddNumberToObject(o, "killed_by_signal", t->exit_code & 0x7f);
		else if (t->exit_code >= 0)
			cJSON_AddNumberToObject(o, "exit_code", (t->exit_code >> 8) & 0xff);
		cJSON_AddItemToArray(arr, o);
		probes += t->nr_probes;
		attach_errors += t->attach_errors;
	}
	cJSON_AddNumberToObject(root, "probes_attached", probes);
	cJSON_AddNumberToObject(root, "attach_errors", attach_errors);
	cJSON_AddNumberToObject(root, "events_recorded", (double)st->records);
	cJSON_AddNumberToObject(root, "events_dropped", (double)drops);
	cJSON_AddNumberToObject(root, "calls", (double)st->calls);
	cJSON_AddNumberToObject(root, "launches", (double)st->launches);
	cJSON_AddNumberToObject(root, "launches_named", (double)st->launches_named);
	cJSON_AddNumberToObject(root, "unfinished_calls", (double)st->unfinished);
	cJSON_AddNumberToObject(root, "orphan_returns", (double)st->orphan_returns);
	cJSON_AddNumberToObject(root, "bad_records", (double)st->bad_records);
	cJSON_AddNumberToObject(root, "depth_overflows", (double)st->depth_overflows);
	cJSON_AddNumberToObject(root, "unwound_calls", (double)st->unwound);
	out = cJSON_Print(root);
	cJSON_Delete(root);
	return out;
}

static bool has_lib(struct target *t, const char *needle)
{
	for (int j = 0; j < t->nr_objs; j++)
		if (strstr(t->objs[j].path, needle))
			return true;
	return false;
}

static void write_process_meta(struct trace_json *tj, struct target *t)
{
	char label[64];

	trace_json__process_name(tj, t->pid, t->comm[0] ? t->comm : "process");
	trace_json__process_sort(tj, t->pid, t->pid);
	if (t->rank >= 0) {
		snprintf(label, sizeof(label), "rank %d", t->rank);
		trace_json__process_label(tj, t->pid, label);
	}
}

int fr_main(int argc, char **argv);
int mem_main(int argc, char **argv);

int main(int argc, char **argv)
{
	static const struct argp_child children[] = { { &session_common_argp, 0, NULL, 0 }, {} };
	static const struct argp argp = { .options = opts, .parser = parse_arg, .doc = doc,
					  .children = children };
	struct target *targets[MAX_PIDS] = {};
	struct memtrace *mts[MAX_PIDS] = {};
	struct gpu_session *gpus[MAX_PIDS] = {};
	struct gpu_stats gstats[MAX_PIDS] = {};
	struct target_probes probes = {};
	struct elfsym_cache *cache = NULL;
	struct ring_buffer *rb = NULL;
	struct trace_json *tj = NULL;
	struct decoder *dec = NULL;
	struct cuda_bpf *skel = NULL;
	uint64_t start_mono, start_real, deadline = 0, last_rescan;
	bool output_created = false;
	int err, ret = 1;

	if (argc > 1 && !strcmp(argv[1], "fr"))
		return fr_main(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "mem"))
		return mem_main(argc - 1, argv + 1);
	argp_err_exit_status = 2;
	err = argp_parse(&argp, argc, argv, 0, NULL, NULL);
	if (err)
		return 2;
	session__libbpf_print_setup();
	signal(SIGPIPE, SIG_IGN);

	for (int i = 0; i < env.nr_pids; i++) {
		for (int j = 0; j < i; j++) {
			if (env.pids[j] == env.pids[i]) {
				log_error("tptrace: pid %d given twice\n", env.pids[i]);
				goto cleanup;
			}
		}
		targets[i] = session__open_target(env.pids[i]);
		if (!targets[i])
			goto cleanup;
	}

	skel = session__load_bpf(env.ring_mb);
	if (!skel)
		goto cleanup;
	session__probes(skel, &probes);
	probes.all_returns = env.durations;
	probes.classes = PROBE_CUDA_ALL | PROBE_NCCL;
	for (int i = 0; i < env.nr_pids; i++)
		session__watch_exit(skel, env.pids[i]);

	{
		struct stat st;

		/* only a regular file we create ourselves may be removed on failure (not /dev/...) */
		output_created = stat(env.output, &st) && errno == ENOENT;
	}
	tj = trace_json__open(env.output);
	if (!tj) {
		log_error("tptrace: cannot write %s: %s\n", env.output, strerror(errno));
		output_created = false;
		goto cleanup;
	}
	cache = elfsym_cache__new();
	if (!cache) {
		log_error("tptrace: out of memory\n");
		goto cleanup;
	}
	dec = decoder__new(tj, cache, &probes);
	if (!dec) {
		log_error("tptrace: out of memory\n");
		goto cleanup;
	}
	rb = ring_buffer__new(bpf_map__fd(skel->maps.events), decoder__ring_cb, dec, NULL);
	if (!rb) {
		log_error("tptrace: failed to create ring buffer: %s\n", strerror(errno));
		goto cleanup;
	}

	start_mono = session__clock_ns(CLOCK_MONOTONIC);
	start_real = session__clock_ns(CLOCK_REALTIME);
	trace_json__begin(tj, start_mono, start_real);
	meta_base_mono = start_mono;
	for (int i = 0; i < env.nr_pids; i++) {
		struct target *t = targets[i];

		decoder__add_target(dec, t);
		err = target__scan(t, cache, &probes);
		if (err == -ESRCH) {
			log_error("tptrace: pid %d exited before it could be traced\n", t->pid);
			goto cleanup;
		}
		if (err < 0) {
			log_error("tptrace: attaching to pid %d (%s): %s\n", t->pid, t->comm,
				  strerror(-err));
			goto cleanup;
		}
		if (!t->nr_cudart && !env.wait) {
			log_error("tptrace: pid %d (%s) has no CUDA runtime loaded (no libcudart.so.* and "
				  "no static cudart); use --wait to wait for it\n", t->pid, t->comm);
			goto cleanup;
		}
		if (!t->nr_cudart)
			log_info("tptrace: waiting for pid %d (%s) to load a CUDA runtime\n", t->pid, t->comm);
		write_process_meta(tj, t);
		/* the trace shows counters and events, not call sites: no user stacks (their
		 * frame walk is most of an allocation probe's cost; tptrace mem keeps them) */
		if (env.mem && !(mts[i] = memtrace__attach(t, tj, &(struct memtrace_opts){
								 .no_stacks = true })))
			goto cleanup;
		log_verbose("tptrace: pid %d (%s): %d probes in %d CUDA runtime(s)\n", t->pid, t->comm,
			    t->nr_probes, t->nr_cudart);
	}

	if (env.gpu) {
		struct gpu_opts go = { .cupti_path = env.cupti };

		decoder__enable_gpu(dec);
		for (int i = 0; i < env.nr_pids; i++) {
			char msg[512] = "";

			gpus[i] = gpu__attach(env.pids[i], &go, msg, sizeof(msg));
			if (!gpus[i]) {
				log_error("tptrace: --gpu: pid %d: %s\n", env.pids[i],
					  msg[0] ? msg : strerror(errno));
				goto cleanup;
			}
		}
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if (env.duration > 0)
		deadline = start_mono + (uint64_t)(env.duration * 1e9);
	log_info("tptrace: tracing %d process%s to %s%s\n", env.nr_pids, env.nr_pids > 1 ? "es" : "",
		 env.output, deadline ? "" : "; Ctrl-C to stop");
	last_rescan = start_mono;
	while (!stop_signal) {
		int alive = 0;
		uint64_t now;

		/* probes submit without waking us (a wake-up per call costs more than the
		 * trap): wait a little, then drain whatever is there */
		err = ring_buffer__poll(rb, 20);
		if (err >= 0)
			err = ring_buffer__consume(rb);
		if (err < 0 && err != -EINTR) {
			log_error("tptrace: reading ring buffer: %s\n", strerror(-err));
			break;
		}
		for (int i = 0; i < env.nr_pids; i++)
			if (mts[i])
				memtrace__poll(mts[i]);
		if (trace_json__error(tj))
			break;
		now = session__clock_ns(CLOCK_MONOTONIC);
		/* the agent's ring is our memory: it can be drained after the target died */
		for (int i = 0; i < env.nr_pids; i++)
			if (gpus[i])
				gpu__poll(gpus[i], decoder__gpu_cb, dec);
		if (env.gpu)
			decoder__gpu_flush(dec, now, 2000000000ULL);
		for (int i = 0; i < env.nr_pids; i++) {
			struct target *t = targets[i];
			bool was_gone = t->exited;

			if (!target__gone(t)) {
				alive++;
				continue;
			}
			if (!was_gone)
				log_info("tptrace: pid %d (%s) exited\n", t->pid, t->comm);
		}
		if (!alive)
			break;
		if (deadline && now >= deadline)
			break;
		/* backstop for objects mapped without the dynamic linker's notice */
		if (now - last_rescan > (uint64_t)(env.wait ? 100 : 1000) * 1000000ULL) {
			last_rescan = now;
			for (int i = 0; i < env.nr_pids; i++) {
				bool had = targets[i]->nr_cudart;

				if (targets[i]->exited)
					continue;
				target__scan(targets[i], cache, &probes);
				if (!had && targets[i]->nr_cudart)
					log_info("tptrace: pid %d loaded a CUDA runtime; tracing\n",
						 targets[i]->pid);
			}
		}
	}
	/* drain what is already in the ring before writing the end of the trace */
	ring_buffer__consume(rb);
	for (int i = 0; i < env.nr_pids; i++) {
		if (!gpus[i])
			continue;
		/* flush, disable and unsubscribe CUPTI, then unload the agent */
		if (targets[i]->exited || target__gone(targets[i]))
			gpu__poll(gpus[i], decoder__gpu_cb, dec);
		else if (gpu__detach(gpus[i], decoder__gpu_cb, dec))
			log_error("tptrace: --gpu: pid %d: detaching the agent: %s\n", env.pids[i],
				  gpu__error(gpus[i]));
		gpu__stats(gpus[i], &gstats[i]);
	}
	ring_buffer__consume(rb);
	{
		uint64_t end_mono = session__clock_ns(CLOCK_MONOTONIC);
		uint64_t end_real = start_real + (end_mono - start_mono);
		uint64_t drops = session__drops(skel);
		const struct decoder_stats *st;
		char *meta, dist[160];
		int ranks = 0, rank = -1, world = -1;
		bool nccl = false;

		for (int i = 0; i < env.nr_pids; i++)
			if (mts[i])
				memtrace__finish(mts[i], end_mono);
		decoder__finish(dec, end_mono);
		if (env.gpu)
			decoder__gpu_flush(dec, end_mono, 0);
		st = decoder__stats(dec);
		if (env.gpu) {
			meta_gstats = gstats;
			meta_gpus = gpus;
			meta_dec = dec;
		}
		meta = metadata_json(targets, env.nr_pids, st, drops, start_real, end_real, argc, argv);
		trace_json__end_events(tj);
		trace_json__top_raw(tj, "deviceProperties", "[]");
		for (int i = 0; i < env.nr_pids; i++) {
			if (targets[i]->rank >= 0) {
				ranks++;
				rank = targets[i]->rank;
				world = targets[i]->world_size;
			}
			nccl |= has_lib(targets[i], "libnccl");
		}
		if (ranks == 1 && env.nr_pids == 1) {
			/* HTA reads the rank with the regex "rank":\s+(\d+): keep the space */
			snprintf(dist, sizeof(dist), "{\"backend\": \"%s\", \"rank\": %d, \"world_size\": %d}",
				 nccl ? "nccl" : "unknown", rank, world);
			trace_json__top_raw(tj, "distributedInfo", dist);
		}
		if (meta)
			trace_json__top_raw(tj, "tptrace", meta);
		free(meta);
		for (int i = 0; i < env.nr_pids; i++) {
			char *mm = mts[i] ? memtrace__meta_json(mts[i]) : NULL;
			char key[48];

			snprintf(key, sizeof(key), i ? "tptrace_memory_%d" : "tptrace_memory", targets[i]->pid);
			if (mm)
				trace_json__top_raw(tj, key, mm);
			free(mm);
		}
		err = trace_json__close(tj);
		tj = NULL;
		if (err) {
			log_error("tptrace: writing %s failed: %s; the trace is incomplete\n", env.output,
				  strerror(-err));
			goto cleanup;
		}
		if (drops)
			log_error("tptrace: %llu events dropped (ring buffer full); raise --ring-mb\n",
				  (unsigned long long)drops);
		log_info("tptrace: wrote %s: %llu calls (%llu launches, %llu named), %llu dropped\n",
			 env.output, (unsigned long long)st->calls, (unsigned long long)st->launches,
			 (unsigned long long)st->launches_named, (unsigned long long)drops);
	}
	ret = 0;
cleanup:
	if (tj) {
		/* failed before the trace was complete: leave no half-written file behind */
		trace_json__free(tj);
		if (output_created)
			unlink(env.output);
	}
	ring_buffer__free(rb);
	for (int i = 0; i < env.nr_pids; i++)
		memtrace__free(mts[i]);	/* before its target */
	for (int i = 0; i < env.nr_pids; i++)
		gpu__free(gpus[i]);		/* detaches the agent if still there */
	for (int i = 0; i < env.nr_pids; i++)
		target__free(targets[i]);	/* detaches the uprobes */
	decoder__free(dec);
	cuda_bpf__destroy(skel);
	elfsym_cache__free(cache);
	return ret;
}
