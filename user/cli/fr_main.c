// SPDX-License-Identifier: MIT
/* tptrace fr: the always-on NCCL flight recorder (see flightrec.h, docs/fr-schema.md). */
#include <argp.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include "cuda.h"
#include "cuda.skel.h"
#include "elfsym.h"
#include "flightrec.h"
#include "growbuf.h"
#include "fr_exec.h"
#include "ustack.h"
#include "fr_metrics.h"
#include "fr_claim.h"
#include "fr_scope.h"
#include "fr_trigger.h"
#include "inject.h"
#include "log.h"
#include "util.h"
#include "procmaps.h"
#include "cli_opts.h"
#include "session.h"
#include "target.h"
#include "torchprof.h"

#define MAX_TARGETS 1024
#define MAX_PIDS 256		/* -p given on the command line */

/* -p, -a, -d, --ring-mb, --py-stacks (Python frames per entry), --no-stacks, --torch-timeout:
 * cli_opts (cli_opts.h) */
static int target_pids[MAX_PIDS];

static struct fr_env {
	const char *dump_dir;
	size_t ring;
	double stall_timeout;
	const char *dump_on;
	bool no_query;
	int stack_samples, stack_interval_ms;
	const char *metrics, *metrics_file;
	/* cross-host triggers */
	const char *host_id;
	struct fr_scope scope;
	const char *trigger_dir;	/* --trigger: write one and exit */
	const char *job;
	bool torch_dump;	/* -p: PyTorch's own flight recorder dump at the final dump */
	int nice;		/* the recorder's CPU priority (set_priority) */
} env = {
	.nice = -10,
	.dump_dir = "/var/lib/tptrace",
	.ring = 2000,
	.stall_timeout = 60,
	.stack_samples = 3,
	.stack_interval_ms = 200,
};

static const char doc[] =
"tptrace fr: NCCL flight recorder for running processes, kept outside them.\n"
"\n"
"USAGE: tptrace fr (-p PID [-p PID ...] | -a) [--dump-dir DIR] [--ring N]\n"
"                  [--stall-timeout SEC] [--dump-on FIFO] [-d SEC]\n"
"                  [--stack-samples N] [--stack-interval MS] [--no-stacks]\n"
"                  [--metrics ADDR:PORT] [--metrics-file PATH]\n"
"                  [--host-id ID] [--py-stacks] [--nice N]\n"
"                  [--torch-dump [--torch-timeout SEC]]\n"
"       tptrace fr --trigger DIR (--job ID | -p PID) [--host-id ID]\n"
"\n"
"Records every NCCL collective and p2p call (and the CUDA event and sync\n"
"calls that tell when they finish on the GPU) into a ring per process held\n"
"by tptrace, so it survives the job crashing or hanging. Dumps one JSON file\n"
"per process (docs/fr-schema.md): on SIGUSR2, on SIGINT/SIGTERM (then\n"
"exits), when pending work makes no progress for --stall-timeout seconds,\n"
"when a process exits, and on each write to the --dump-on fifo. Read the\n"
"dumps of all ranks with tptrace-fr.\n"
"\n"
"-a records every process on the host that uses NCCL, including ones that\n"
"start later. -d SEC stops after SEC seconds, with a final dump.\n"
"\n"
"Each process's threads are snapshotted (native and Python frames, the\n"
"NCCL/CUDA call each is in, --stack-samples samples to tell progress) when\n"
"recording starts and for every dump, so a job that was already hung when\n"
"tptrace attached still names its culprit. The process is stopped a few ms\n"
"per sample; --no-stacks takes no snapshot and never stops a process.\n"
"\n"
"--py-stacks gives every entry the Python frames of the line that called\n"
"NCCL (PyTorch FR's \"frames\"; CPython 3.9-3.13), captured in BPF at the\n"
"call without stopping the process; tptrace-fr names the culprit's line.\n"
"\n"
"--metrics serves Prometheus metrics on http://ADDR:PORT/metrics (only that\n"
"address; a port in use refuses the start); --metrics-file writes the same\n"
"text each second for node_exporter's textfile collector.\n"
"Triggers: every process's job id is read from its environment\n"
"(TORCHELASTIC_RUN_ID, SLURM_JOB_ID, else MASTER_ADDR:MASTER_PORT). A stall\n"
"or SIGUSR2 writes a trigger record for the job into the dump directory, and\n"
"every recorder of that job watching it (shared storage: one directory for\n"
"all hosts) dumps once per trigger; --trigger DIR writes one by hand.\n"
"\n"
"The recorder runs at nice -10 (--nice): on a host whose CPUs are saturated\n"
"(data loaders, a runaway process) a recorder at the job's priority takes\n"
"seconds to write the dumps a trigger asks for; its own CPU use is small.\n"
"\n"
"EXAMPLES:\n"
"  sudo tptrace fr -p 4242 --dump-dir /var/lib/tptrace  # one job process\n"
"  sudo tptrace fr -a --dump-dir /var/lib/tptrace       # all NCCL processes\n"
"  sudo kill -USR2 $(pgrep -f 'tptrace fr')             # dump now\n"
"  sudo tptrace fr -a --no-stacks                       # never stop a process\n"
"  sudo tptrace fr -a --py-stacks                       # + their Python lines\n"
"  sudo tptrace fr -a --dump-dir /shared/fr --host-id n17  # one of many hosts\n"
"  tptrace fr --trigger /shared/fr --job 81234          # all its hosts dump\n"
"  tptrace-fr /var/lib/tptrace                          # the verdict\n";

enum { OPT_DUMP_DIR = 1000, OPT_RING, OPT_STALL, OPT_DUMP_ON, OPT_NO_QUERY,
       OPT_STACK_SAMPLES, OPT_STACK_INTERVAL, OPT_METRICS, OPT_METRICS_FILE, OPT_HOST_ID,
       OPT_TRIGGER, OPT_JOB, OPT_TORCH_DUMP, OPT_SCOPE, OPT_NICE };

static const struct argp_option opts[] = {
	{ "scope", OPT_SCOPE, "KIND", 0, "-a: only processes in pidns[=PATH], netns[=PATH] (default: "
	  "tptrace's own) or cgroup=PATH", 0 },
	{ "dump-dir", OPT_DUMP_DIR, "DIR", 0, "Where dumps go (default /var/lib/tptrace)", 0 },
	{ "ring", OPT_RING, "N", 0, "Entries kept per process (default 2000)", 0 },
	{ "stall-timeout", OPT_STALL, "SEC", 0, "Dump when pending work makes no progress this long (default 60; 0 off)", 0 },
	{ "dump-on", OPT_DUMP_ON, "FIFO", 0, "Dump all processes on every write to this fifo (created if missing)", 0 },
	{ "no-query-comms", OPT_NO_QUERY, NULL, 0,
	  "Never stop a thread to ask NCCL the rank/size of communicators made before attach", 0 },
	{ "stack-samples", OPT_STACK_SAMPLES, "N", 0,
	  "Samples per stack snapshot, to tell progress (default 3, 1..100)", 0 },
	{ "stack-interval", OPT_STACK_INTERVAL, "MS", 0,
	  "Between stack samples (default 200, 1..10000)", 0 },
	{ "metrics", OPT_METRICS, "ADDR:PORT", 0,
	  "Serve Prometheus metrics on http://ADDR:PORT/metrics (bound to ADDR only)", 0 },
	{ "metrics-file", OPT_METRICS_FILE, "PATH", 0,
	  "Write the metrics to PATH every second (atomically; textfile collector)", 0 },
	{ "host-id", OPT_HOST_ID, "ID", 0, "Names this recorder in dumps and triggers (default: the hostname)", 0 },
	{ "trigger", OPT_TRIGGER, "DIR", 0, "Write a dump trigger for the job into DIR and exit", 0 },
	{ "job", OPT_JOB, "ID", 0, "--trigger: the job id (default: that of the -p processes)", 0 },
	{ "nice", OPT_NICE, "N", 0, "The recorder's CPU priority, a nice value (-20..19; default -10, "
	  "0 keeps the one it was started with)", 0 },
	{ "torch-dump", OPT_TORCH_DUMP, NULL, 0, "-p: at the final dump, also PyTorch's own NCCL "
	  "flight recorder dump (torch._C._distributed_c10d._dump_nccl_trace, where enabled) to "
	  "DIR/torch_fr.PID.pickle", 0 },
	{},
};

static error_t parse_arg(int key, char *arg, struct argp_state *state)
{
	char *end;
	int ring;

	switch (key) {
	case OPT_SCOPE:
		if (fr_scope__parse(arg, &env.scope))
			argp_usage(state);
		break;
	case OPT_DUMP_DIR:
		env.dump_dir = arg;
		break;
	case OPT_RING:
		if (session__parse_int(arg, 1, 10000000, &ring))
			argp_error(state, "invalid --ring '%s' (1..10000000)", arg);
		env.ring = ring;
		break;
	case OPT_STALL:
		env.stall_timeout = strtod(arg, &end);
		if (*end || env.stall_timeout < 0)
			argp_error(state, "invalid --stall-timeout '%s' (seconds >= 0)", arg);
		break;
	case OPT_DUMP_ON:
		env.dump_on = arg;
		break;
	case OPT_NO_QUERY:
		env.no_query = true;
		break;
	case OPT_STACK_SAMPLES:
		if (session__parse_int(arg, 1, 100, &env.stack_samples))
			argp_error(state, "invalid --stack-samples '%s' (1..100)", arg);
		break;
	case OPT_STACK_INTERVAL:
		if (session__parse_int(arg, 1, 10000, &env.stack_interval_ms))
			argp_error(state, "invalid --stack-interval '%s' (1..10000 ms)", arg);
		break;
	case OPT_METRICS:
		env.metrics = arg;
		break;
	case OPT_METRICS_FILE:
		if (!*arg)
			argp_error(state, "empty --metrics-file");
		env.metrics_file = arg;
		break;
	case OPT_HOST_ID:
		if (!fr_host_valid(arg))
			argp_error(state, "invalid --host-id '%s' (1..64 of A-Z a-z 0-9 . - _ @)", arg);
		env.host_id = arg;
		break;
	case OPT_TRIGGER:
		env.trigger_dir = arg;
		break;
	case OPT_JOB:
		if (!fr_job_valid(arg))
			argp_error(state, "invalid --job '%s' (1..128 of A-Z a-z 0-9 . - _ @ :)", arg);
		env.job = arg;
		break;
	case OPT_TORCH_DUMP:
		env.torch_dump = true;
		break;
	case OPT_NICE:
		if (session__parse_int(arg, -20, 19, &env.nice))
			argp_error(state, "invalid --nice '%s' (-20..19)", arg);
		break;
	case ARGP_KEY_END:
		if (env.torch_dump && (cli_opts.all || !cli_opts.nr_pids))
			argp_error(state, "--torch-dump needs -p PID (not -a)");
		if (env.job && !env.trigger_dir)
			argp_error(state, "--job goes with --trigger");
		if (env.trigger_dir) {
			if (cli_opts.all || (!env.job && !cli_opts.nr_pids))
				argp_error(state, "--trigger needs --job ID or -p PID of a rank");
			break;
		}
		cli_opts__check(state);
		if (env.scope.kind && !cli_opts.all)
			argp_error(state, "--scope needs -a");
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

/* Dump retention and format: their own argp child, so they read (and merge) as one block. */
static struct fr_dump_env {
	int max_dump_mb;	/* 0: no limit */
	bool gzip;
} dump_env;

enum { OPT_MAX_DUMP_MB = 1100, OPT_GZIP };

static const struct argp_option dump_opts[] = {
	{ NULL, 0, NULL, 0, "Dump retention and format:", 5 },
	{ "max-dump-mb", OPT_MAX_DUMP_MB, "MB", 0,
	  "After each round of dumps, remove this host's oldest dumps until they total at most MB "
	  "MiB (the newest round is always kept; default no limit)", 5 },
	{ "gzip", OPT_GZIP, NULL, 0, "Write dumps gzip-compressed (tptrace-fr.<host>.<pid>.json.gz)", 5 },
	{},
};

static error_t parse_dump_arg(int key, char *arg, struct argp_state *state)
{
	switch (key) {
	case OPT_MAX_DUMP_MB:
		if (session__parse_int(arg, 1, 1 << 20, &dump_env.max_dump_mb))
			argp_error(state, "invalid --max-dump-mb '%s' (1..1048576 MiB)", arg);
		break;
	case OPT_GZIP:
		dump_env.gzip = true;
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

static const struct argp dump_argp = { .options = dump_opts, .parser = parse_dump_arg };

static volatile sig_atomic_t stop_signal, dump_request;

static void on_stop(int sig)
{
	stop_signal = sig;
}

static void on_usr2(int sig)
{
	dump_request = 1;
}

struct fr_session {
	struct session_bpf *bpf;
	struct elfsym_cache *cache;
	struct target_probes probes;
	struct session *core;		/* the ring's consumer, library discovery and attach */
	struct flightrec *fr;
	struct target *targets[MAX_TARGETS];
	int nr_targets;
	struct fr_watch *watch;		/* trigger files in the dump directory */
	char host[FR_HOST_MAX + 1];
	struct fr_exec *exec;		/* -a: libraries probed per file, for every process */
	struct ring_buffer *rb;		/* the drain of a round of dumps */
	/* records consumed while a round of dumps runs (flightrec_opts.hold): [u32 size][data]
	 * each, handed on when it ends; past HOLD_MAX they are lost and counted as drops */
	struct growbuf held;
	bool holding;
	uint64_t held_lost;
};

#define HOLD_MAX	(256u << 20)

/* The ring's reader: records go to the acquisition core, or wait while a round holds. */
static int fr_ring_cb(void *ctx, void *data, size_t size)
{
	struct fr_session *s = ctx;
	uint32_t sz = (uint32_t)size;

	if (!s->holding)
		return session__ring_cb(s->core, data, size);
	if (s->held.len + sizeof(sz) + size > HOLD_MAX) {
		s->held_lost++;
		return 0;
	}
	growbuf__add(&s->held, &sz, sizeof(sz));
	growbuf__add(&s->held, data, size);
	if (growbuf__error(&s->held))
		s->held_lost++;
	return 0;
}

static void hold_ring(void *ctx, bool on)
{
	struct fr_session *s = ctx;
	size_t off = 0;

	if (on) {
		s->holding = true;
		return;
	}
	/* what the round held, in the order it came: as if read now (out of memory, the records
	 * held before it: those after were counted lost). Handing on tens of MB takes seconds:
	 * the ring is still emptied behind them, into the hold, every 1024 records */
	for (unsigned k = 1; off + sizeof(uint32_t) <= s->held.len; k++) {
		uint32_t sz;

		memcpy(&sz, s->held.p + off, sizeof(sz));
		off += sizeof(sz);
		if (off + sz > s->held.len)
			break;
		session__ring_cb(s->core, s->held.p + off, sz);
		off += sz;
		if (!(k % 1024) && s->rb)
			ring_buffer__consume(s->rb);
	}
	s->holding = false;
	if (s->held.failed)
		log_error("out of memory holding ring records during a round of dumps: the "
			  "records that came after are lost (counted as dropped)\n");
	log_verbose("round over: %zu bytes of records held, handed on\n", s->held.len);
	/* a daemon keeps no round's peak (up to HOLD_MAX) for the rest of its life */
	if (s->held.cap > (16u << 20))
		growbuf__free(&s->held);
	s->held.len = 0;
	s->held.failed = false;
}

static int pump_ring(void *ctx, int timeout_ms)
{
	struct fr_session *s = ctx;
	int err;

	if (!s->rb)
		return 0;
	err = timeout_ms > 0 ? ring_buffer__poll(s->rb, timeout_ms) : 0;
	if (err >= 0)
		err = ring_buffer__consume(s->rb);
	return err < 0 && err != -EINTR ? err : 0;
}

/* A round of dumps starts here: every record written so far is taken in first. */
static int drain_ring(void *ctx)
{
	struct fr_session *s = ctx;
	int err;

	if (!s->rb)
		return 0;
	err = ring_buffer__consume(s->rb);
	return err < 0 ? err : 0;
}

static void set_drops(struct fr_session *s)
{
	uint64_t drops = 0;
	int err = session__drops(s->bpf, &drops);

	flightrec__set_drops(s->fr, err, drops + s->held_lost);
}

/* ---- cross-host triggers (fr_trigger.h) ---- */

static int host_id(char *buf, size_t size)
{
	if (env.host_id) {
		snprintf(buf, size, "%s", env.host_id);
		return 0;
	}
	if (gethostname(buf, size - 1) || !fr_host_valid(buf)) {
		log_error("the hostname is not usable as a host id: give --host-id\n");
		return -EINVAL;
	}
	return 0;
}

static void learn_job(struct fr_session *s, int pid)
{
	char job[FR_JOB_MAX + 1];
	int err = fr_job_of_pid(pid, job, sizeof(job));

	if (err) {
		log_verbose("pid %d: no job id (%s): its stalls trigger by communicator identity\n", pid,
			    err == -ENOENT ? "none of TORCHELASTIC_RUN_ID, SLURM_JOB_ID, "
			    "MASTER_ADDR:MASTER_PORT" : strerror(-err));
		return;
	}
	flightrec__set_job(s->fr, pid, job);
	log_verbose("pid %d: job %s\n", pid, job);
}

/* Writes a trigger for job and dumps this recorder's processes of it; the other recorders
 * of the job see the file. False when the trigger could not be written (said why). */
static bool fire_trigger(struct fr_session *s, const char *job, const char *reason)
{
	struct fr_trigger_rec t;
	int err = fr_trigger__write(env.dump_dir, job, s->host, reason, &t);

	if (err) {
		log_error("cannot write a trigger for job %s to %s: %s\n", job, env.dump_dir,
			  strerror(-err));
		return false;
	}
	fr_watch__mark_seen(s->watch, t.id);
	log_info("trigger %s for job %s (%s) written to %s\n", t.id, job, reason, env.dump_dir);
	flightrec__dump_job(s->fr, job, &t);
	return true;
}

static bool stall_trigger(void *ctx, const char *job)
{
	return fire_trigger(ctx, job, "stall");
}

/* SIGUSR2: one trigger per job recorded here; processes of no known job dump alone. */
static void signal_triggers(struct fr_session *s)
{
	char done[16][FR_JOB_MAX + 1];
	int nr_done = 0;

	for (int i = 0; i < s->nr_targets; i++) {
		char job[FR_JOB_MAX + 1];
		bool seen = false;

		if (fr_job_of_pid(target__pid(s->targets[i]), job, sizeof(job)) ||
		    !flightrec__has_job(s->fr, job))
			continue;
		for (int k = 0; k < nr_done; k++)
			seen |= !strcmp(done[k], job);
		if (seen || nr_done == 16)
			continue;
		strcpy(done[nr_done++], job);
		if (!fire_trigger(s, job, "signal"))
			flightrec__dump_job(s->fr, job, NULL);
	}
	flightrec__dump_job(s->fr, NULL, NULL);
}

/* New trigger files of other recorders (or of --trigger): dump the job's processes once. */
static void take_triggers(struct fr_session *s, uint64_t now)
{
	struct fr_trigger_rec t;

	while (fr_watch__next(s->watch, now, &t) == 1) {
		if (!flightrec__has_job(s->fr, t.job)) {
			log_verbose("ignoring trigger %s for job %s from %s: no process of that job here\n",
				    t.id, t.job, t.origin_host);
			continue;
		}
		log_info("trigger %s for job %s from %s (%s)\n", t.id, t.job, t.origin_host, t.reason);
		log_verbose("trigger %s seen %.0f ms after its origin wrote it (by this host's clock)\n",
			    t.id, (clock_ns(CLOCK_REALTIME) - (double)t.time_ns) / 1e6);
		flightrec__dump_job(s->fr, t.job, &t);
	}
}

/* --nice, before any thread is made (each inherits it; on Linux the nice value is a
 * thread's). Not fatal: the recording is the same, its dumps slower on a busy host. */
static void set_priority(void)
{
	if (!env.nice)
		return;
	errno = 0;
	if (setpriority(PRIO_PROCESS, 0, env.nice))
		log_error("cannot run at nice %d: %s (recording goes on; its dumps may come late "
			  "on a busy host)\n", env.nice, strerror(errno));
	else
		log_verbose("running at nice %d\n", getpriority(PRIO_PROCESS, 0));
}

/* tptrace fr --trigger DIR: one trigger record, then exit. */
static int trigger_command(void)
{
	char job[FR_JOB_MAX + 1], host[FR_HOST_MAX + 1];
	struct fr_trigger_rec t;
	int err;

	if (host_id(host, sizeof(host)))
		return 1;
	if (env.job) {
		snprintf(job, sizeof(job), "%s", env.job);
	} else {
		for (int i = 0; i < cli_opts.nr_pids; i++) {
			char other[FR_JOB_MAX + 1];

			err = fr_job_of_pid(cli_opts.pids[i], i ? other : job, sizeof(job));
			if (err) {
				log_error("pid %d: no job id in its environment (%s): give --job\n",
					  cli_opts.pids[i], err == -ENOENT ? "none set" : strerror(-err));
				return 1;
			}
			if (i && strcmp(job, other)) {
				log_error("pids of two jobs (%s, %s): give --job\n", job, other);
				return 1;
			}
		}
	}
	/* the same rules as for a dump directory: nobody else may steer where it goes */
	err = flightrec__open_dump_dir(env.trigger_dir);
	if (err < 0)
		return 1;	/* said in one line */
	close(err);
	err = fr_trigger__write(env.trigger_dir, job, host, "command", &t);
	if (err) {
		log_error("cannot write a trigger to %s: %s\n", env.trigger_dir, strerror(-err));
		return 1;
	}
	printf("%s\n", t.id);
	log_info("trigger %s for job %s written to %s\n", t.id, job, env.trigger_dir);
	return 0;
}

/* The target recording pid now (not one an exec or exit ended). */
static struct target *live_target(struct fr_session *s, int pid)
{
	for (int i = 0; i < s->nr_targets; i++)
		if (target__pid(s->targets[i]) == pid && !target__exited(s->targets[i]))
			return s->targets[i];
	return NULL;
}

/* One recorder per process (fr_claim.h): -EBUSY when another holds pid (said once). */
static int claim_pid(int pid)
{
	bool first;
	int owner, err = fr_claim__pid(pid, &owner, &first);

	if (err != -EBUSY)
		return 0;	/* ours, or no claim possible (said why): record */
	if (first && owner)
		log_error("pid %d is already recorded by another flight recorder (pid %d): not recording it twice\n",
			  pid, owner);
	else if (first)
		log_error("pid %d is already recorded by another flight recorder: not recording it twice\n",
			  pid);
	return -EBUSY;
}

/* Starts recording pid. Returns 1 when it uses NCCL and is now recorded, 0 when it has no
 * NCCL (yet), negative errno on failure. */
static int add_target(struct fr_session *s, int pid, bool quiet)
{
	struct target_counts n;
	struct target *t;
	int err;

	if (s->nr_targets == MAX_TARGETS)
		return -ENOSPC;
	/* -a --scope: another host's process is not ours (not an error) */
	if (cli_opts.all && !fr_scope__has(&env.scope, pid))
		return 0;
	err = claim_pid(pid);
	if (err)
		return err;
	t = quiet ? target__new(pid) : session__open_target(pid);
	if (!t) {
		err = -errno;
		fr_claim__release(pid);
		return err;
	}
	/* -a: its library files are probed for every process (a file no event taught yet,
	 * e.g. one whose mapping record was dropped, is learnt here) */
	if (s->exec)
		fr_exec__learn_pid(s->exec, pid);
	err = session__scan(s->core, t);
	if (err < 0) {
		if (!quiet)
			log_error("attaching to pid %d (%s): %s\n", pid, target__comm(t), strerror(-err));
		target__free(t);
		fr_claim__release(pid);
		return err;
	}
	target__counts(t, &n);
	if (!n.nccl) {
		target__free(t);
		fr_claim__release(pid);
		return 0;
	}
	err = session__add_target(s->core, t);
	if (!err)
		err = flightrec__add_process(s->fr, t);
	if (err) {
		session__remove_target(s->core, t);
		target__free(t);
		fr_claim__release(pid);
		return err;
	}
	session__watch_exit(s->bpf, pid);
	/* --py-stacks: its Python (read anew after an exec: another interpreter may run now) */
	if (s->bpf->ustacks) {
		session__ustacks_add(s->bpf, pid);
		flightrec__set_python(s->fr, pid, ustacks__python(s->bpf->ustacks, pid),
				      ustacks__why(s->bpf->ustacks, pid));
	}
	if (s->exec)
		fr_exec__allow_pid(s->exec, pid, true);
	s->targets[s->nr_targets++] = t;
	learn_job(s, pid);
	if (target__rank(t) >= 0)
		log_info("recording pid %d (%s, rank %d): %d probes\n", pid, target__comm(t), target__rank(t),
			 n.probes);
	else
		log_info("recording pid %d (%s): %d probes\n", pid, target__comm(t), n.probes);
	return 1;
}

/* A process the scan reads: in --scope and not recorded already (a host's recorder reads
 * none of the other hosts' processes, and none of its own that it records) */
static bool scan_wants(int pid, void *ctx)
{
	return !live_target(ctx, pid) && fr_scope__has(&env.scope, pid);
}

/* -a: every process whose maps show a libnccl; processes without it are looked at again on
 * later scans, since they may load it later. */
static void scan_all(struct fr_session *s)
{
	static const char *const nccl[] = { "libnccl", NULL };
	static int pids[MAX_TARGETS];
	int n = session__find_procs(nccl, scan_wants, NULL, s, pids, MAX_TARGETS);

	for (int k = 0; k < n; k++)
		add_target(s, pids[k], true);
}

/* ---- -a: exact from exec (fr_exec.h) ---- */

/* A process mapped a library: an NCCL one starts its recording, any other one of a recorded
 * process is looked at (objects not probed for every process get per-process probes). */
static void exec_mapped(void *ctx, int pid, uint32_t kind)
{
	struct fr_session *s = ctx;
	struct target *t = live_target(s, pid);

	if (t) {
		session__scan(s->core, t);
		return;
	}
	if (kind == TP_MAP_NCCL && add_target(s, pid, true) != 1)
		fr_exec__allow_pid(s->exec, pid, false);	/* not NCCL after all */
}

/* The process replaced its image: its target is over (the new image gets a new one). */
static void exec_execd(void *ctx, int pid)
{
	struct target *t = live_target(ctx, pid);

	if (t) {
		target__end(t, clock_ns(CLOCK_MONOTONIC));
	}
}

/* flightrec: the first call of a process not recorded yet (its mapping record was missed,
 * or its recording ended at an exec). 0 when it is recorded now. */
static int exec_new_proc(void *ctx, int pid)
{
	struct fr_session *s = ctx;

	if (add_target(s, pid, true) == 1)
		return 0;
	log_verbose("pid %d: calls of a process without NCCL; dropped in BPF from now on\n", pid);
	fr_exec__allow_pid(s->exec, pid, false);	/* its calls stop at the BPF filter */
	return -1;
}

/* Communicators made before attach: ask NCCL's own getters (ncclCommUserRank, ncclCommCount,
 * ncclCommCuDevice) inside the process, on its main thread stopped for a moment with ptrace
 * and restored exactly. These getters only read the communicator. Without ptrace rights the
 * fields stay unknown and tptrace-fr infers them. */
static void query_comms(struct fr_session *s)
{
	static const char *const getters[] = { "ncclCommUserRank", "ncclCommCount", "ncclCommCuDevice" };
	uint64_t handles[16];
	int pid, n;

	while ((n = flightrec__comms_to_query(s->fr, &pid, handles, 16)) > 0) {
		struct target *t = NULL;
		struct injector *inj;
		uint64_t fn[3];
		char err[256];

		for (int i = 0; i < s->nr_targets; i++)
			if (target__pid(s->targets[i]) == pid)
				t = s->targets[i];
		if (!t)
			continue;
		for (int g = 0; g < 3; g++)
			if (target__nccl_func(t, getters[g], &fn[g]))
				fn[g] = 0;
		inj = injector__attach(pid, err, sizeof(err));
		if (!inj) {
			log_verbose("cannot ask NCCL about pid %d's communicators: %s\n", pid, err);
			continue;
		}
		for (int i = 0; i < n; i++) {
			int vals[3] = { -1, -1, -1 };

			for (int g = 0; g < 3; g++) {
				uint64_t args[6] = { handles[i] }, rc = 1;
				int32_t out = -1;

				if (fn[g] && !injector__call_out(inj, fn[g], args, 1, &out, sizeof(out), &rc) &&
				    (int32_t)rc == 0)
					vals[g] = out;
			}
			flightrec__comm_learned(s->fr, pid, handles[i], vals[0], vals[1], vals[2],
						"nccl_query");
			log_verbose("pid %d comm 0x%llx: rank %d of %d, device %d\n", pid,
				    (unsigned long long)handles[i], vals[0], vals[1], vals[2]);
		}
		injector__detach(inj);
		/* one process a pass: a trigger waits for no more than one injection (seconds
		 * for a process of hundreds of threads on a loaded host) */
		break;
	}
}

/* --torch-dump: each process's PyTorch is asked now whether it can, so a refusal comes before
 * anything is attached. 0, or -1 after an error line. */
static int torch_dump_start(struct torch_instr_run **torch)
{
	for (int i = 0; env.torch_dump && i < cli_opts.nr_pids; i++) {
		char terr[512];

		torch[i] = torch_instr__start(cli_opts.pids[i], TORCH_FR_DUMP, NULL,
					      (int)(cli_opts.torch_timeout * 1000), terr, sizeof(terr));
		if (!torch[i]) {
			log_error("--torch-dump: %s\n", torch__err_line(cli_opts.pids[i], terr));
			return -1;
		}
	}
	return 0;
}

/* The dump directory checked (and created), and --dump-on's fifo opened (*fifo_fd), now, so a
 * refused one stops tptrace before it attaches. 0, or -1 after an error line. */
static int open_dump_dir_and_fifo(int *fifo_fd)
{
	int err = flightrec__open_dump_dir(env.dump_dir);

	if (err < 0)
		return -1;
	if (faccessat(err, ".", W_OK, AT_EACCESS)) {
		log_error("cannot write dumps to %s: %s\n", env.dump_dir, strerror(errno));
		close(err);
		return -1;
	}
	close(err);
	if (env.dump_on) {
		struct stat st;

		if (stat(env.dump_on, &st) && mkfifo(env.dump_on, 0600)) {
			log_error("cannot create fifo %s: %s\n", env.dump_on, strerror(errno));
			return -1;
		}
		/* read-write: the fifo never reports hang-up between writers */
		*fifo_fd = open(env.dump_on, O_RDWR | O_NONBLOCK | O_CLOEXEC);
		if (*fifo_fd < 0) {
			log_error("cannot open %s: %s\n", env.dump_on, strerror(errno));
			return -1;
		}
	}
	return 0;
}

/* The BPF object, the session, the recorder, the trigger watch, -a's exec following and the
 * ring, then the -p processes attached. 0, or -1 after an error line; what was made is in s
 * for fr_session_free. */
static int fr_session_start(struct fr_session *s)
{
	struct flightrec_opts fo = {};
	int err;

	s->bpf = session__load_bpf(cli_opts.ring_mb, &(struct session_load_opts){
		.fr_exec = cli_opts.all, .ustacks = cli_opts.py_stacks,
		.scope = env.scope.kind ? &env.scope : NULL });
	if (!s->bpf)
		return -1;
	session__probes(s->bpf, &s->probes);
	s->probes.classes = PROBE_CUDA_SYNC | PROBE_NCCL;
	s->cache = elfsym_cache__new();
	fo.ring_size = env.ring;
	fo.dump_dir = env.dump_dir;
	fo.stall_timeout_ns = (uint64_t)(env.stall_timeout * 1e9);
	fo.no_stacks = cli_opts.no_stacks;
	if (s->bpf->ustacks) {
		fo.ustack_lookup = ustacks__lookup;
		fo.ustack_ctx = s->bpf->ustacks;
	}
	fo.stack_samples = env.stack_samples;
	fo.stack_interval_ms = env.stack_interval_ms;
	fo.max_dump_bytes = (uint64_t)dump_env.max_dump_mb << 20;
	fo.gzip_dumps = dump_env.gzip;
	fo.host_id = s->host;
	fo.stall_trigger = stall_trigger;
	fo.stall_trigger_ctx = s;
	fo.drain = drain_ring;
	fo.hold = hold_ring;
	fo.pump = pump_ring;
	fo.drain_ctx = s;
	if (cli_opts.all) {
		fo.new_proc = exec_new_proc;
		fo.new_proc_ctx = s;
	}
	s->core = s->cache ? session__new(s->cache, &s->probes) : NULL;
	s->fr = s->core ? flightrec__new(s->core, &fo) : NULL;
	s->watch = fr_watch__new(env.dump_dir, true);
	if (!s->cache || !s->core || !s->fr || !s->watch) {
		log_error("out of memory\n");
		return -1;
	}
	if (cli_opts.all && s->fr && s->cache) {
		struct fr_exec_ops ops = { .ctx = s, .mapped = exec_mapped, .execd = exec_execd };

		s->exec = fr_exec__new(s->bpf, s->cache, &s->probes, s->core, s->fr, &ops);
		if (!s->exec)
			return -1;
	}
	s->rb = ring_buffer__new(bpf_map__fd(s->bpf->skel->maps.events), fr_ring_cb, s, NULL);
	if (!s->rb) {
		log_error("failed to create ring buffer: %s\n", strerror(errno));
		return -1;
	}
	for (int i = 0; i < cli_opts.nr_pids; i++) {
		err = add_target(s, cli_opts.pids[i], false);
		if (err < 0)
			return -1;
		if (err == 0) {
			log_error("pid %d has no NCCL loaded (no libnccl.so.* mapped)\n",
				  cli_opts.pids[i]);
			return -1;
		}
	}
	if (cli_opts.all)
		scan_all(s);
	return 0;
}

static void fr_session_free(struct fr_session *s)
{
	ring_buffer__free(s->rb);
	growbuf__free(&s->held);
	target__free_all(s->targets, s->nr_targets);
	fr_exec__free(s->exec);
	flightrec__free(s->fr);
	session__free(s->core);
	fr_watch__free(s->watch);
	session__free_bpf(s->bpf);
	elfsym_cache__free(s->cache);
}

/* One look at the targets: those gone are marked so (their claims released); the number
 * still alive. */
static int check_targets(struct fr_session *s)
{
	int alive = 0;

	for (int i = 0; i < s->nr_targets; i++) {
		struct target *t = s->targets[i];
		bool was = target__exited(t);

		if (!target__gone(t)) {
			alive++;
			continue;
		}
		if (!was) {
			/* the exit record may still be in the ring */
			ring_buffer__consume(s->rb);
			flightrec__mark_gone(s->fr, target__pid(t));
		}
		/* also after an exec ended this target: the claim is the process's */
		if (!live_target(s, target__pid(t)))
			fr_claim__release(target__pid(t));
	}
	return alive;
}

/* Records until a signal, the end of --duration, or (-p) every target gone. */
static void record(struct fr_session *s, struct fr_metrics *metrics, int fifo_fd)
{
	uint64_t start, deadline = 0, last_scan = 0, last_metrics = 0;
	int err;

	start = clock_ns(CLOCK_MONOTONIC);
	if (cli_opts.duration > 0)
		deadline = start + (uint64_t)(cli_opts.duration * 1e9);
	while (!stop_signal) {
		uint64_t now, t_pass[8];
		int alive;

		t_pass[0] = clock_ns(CLOCK_MONOTONIC);
		err = ring_buffer__poll(s->rb, 50);
		if (err >= 0)
			err = ring_buffer__consume(s->rb);
		if (err < 0 && err != -EINTR) {
			log_error("reading ring buffer: %s\n", strerror(-err));
			break;
		}
		set_drops(s);
		t_pass[1] = clock_ns(CLOCK_MONOTONIC);
		/* a trigger first: asking NCCL about a comm stops a process (ptrace), seconds for
		 * one with hundreds of threads, and other hosts wait for this one's dumps */
		take_triggers(s, t_pass[1]);
		t_pass[2] = clock_ns(CLOCK_MONOTONIC);
		if (!env.no_query)
			query_comms(s);
		t_pass[3] = clock_ns(CLOCK_MONOTONIC);
		if (dump_request) {
			dump_request = 0;
			signal_triggers(s);
		}
		if (fifo_fd >= 0) {
			char buf[256];
			bool req = false;

			while (read(fifo_fd, buf, sizeof(buf)) > 0)
				req = true;
			if (req)
				flightrec__dump_all(s->fr, "request");
		}
		alive = check_targets(s);
		flightrec__take_exits(s->fr);
		now = t_pass[4] = clock_ns(CLOCK_MONOTONIC);
		/* before the stall check: a trigger already there covers our stall too */
		take_triggers(s, now);
		/* a round of dumps just now held records and handed them on: their progress is
		 * newer than the now read before it */
		now = clock_ns(CLOCK_MONOTONIC);
		flightrec__check_stalls(s->fr, now);
		t_pass[5] = clock_ns(CLOCK_MONOTONIC);
		if (metrics && now - last_metrics >= 1000000000ULL) {
			last_metrics = now;
			fr_metrics__update(metrics, s->fr, now);
		}
		t_pass[6] = clock_ns(CLOCK_MONOTONIC);
		/* -a: processes come from the kernel's mapping records; the scan is only a safety
		 * net for records the ring dropped */
		if (cli_opts.all && now - last_scan > 5000000000ULL) {
			last_scan = now;
			scan_all(s);
		}
		/* a trigger waits for at most one pass: say what made a pass slow */
		t_pass[7] = clock_ns(CLOCK_MONOTONIC);
		if (t_pass[7] - t_pass[0] > 500000000ULL)
			log_verbose("slow pass of the recording loop: %.0f ms (ring %.0f, triggers %.0f, "
				    "NCCL queries %.0f, targets and requests %.0f, stalls %.0f, metrics "
				    "%.0f, scan %.0f)\n", (t_pass[7] - t_pass[0]) / 1e6,
				    (t_pass[1] - t_pass[0]) / 1e6, (t_pass[2] - t_pass[1]) / 1e6,
				    (t_pass[3] - t_pass[2]) / 1e6, (t_pass[4] - t_pass[3]) / 1e6,
				    (t_pass[5] - t_pass[4]) / 1e6, (t_pass[6] - t_pass[5]) / 1e6,
				    (t_pass[7] - t_pass[6]) / 1e6);
		if (!cli_opts.all && !alive)
			break;
		if (deadline && now >= deadline)
			break;
	}
}

/* --torch-dump: each process's PyTorch recorder written beside our dumps. 0, or 1 when one
 * failed (each said why). */
static int torch_dump_finish(struct torch_instr_run **torch)
{
	int ret = 0;

	for (int i = 0; env.torch_dump && i < cli_opts.nr_pids; i++) {
		char terr[512], path[4200];

		snprintf(path, sizeof(path), "%s/torch_fr.%d.pickle", env.dump_dir, cli_opts.pids[i]);
		if (torch_instr__stop(torch[i], path, terr, sizeof(terr))) {
			log_error("--torch-dump: %s\n", torch__err_line(cli_opts.pids[i], terr));
			ret = 1;
		} else {
			log_info("--torch-dump: pid %d: wrote %s\n", cli_opts.pids[i], path);
		}
	}
	return ret;
}

int fr_main(int argc, char **argv)
{
	static const struct argp_child dump_child[] = { { &dump_argp, 0, NULL, 0 }, {} };
	struct argp argp = { .options = opts, .parser = parse_arg, .doc = doc };
	struct fr_session s = {};
	struct torch_instr_run *torch[MAX_PIDS] = {};
	struct fr_metrics *metrics = NULL;
	int fifo_fd = -1, ret = 1;

	argp_err_exit_status = 2;
	argv[0] = (char *)"tptrace fr";	/* "Usage: tptrace fr ..." in argp's messages */
	argp_help_width();
	cli_opts.takes = CLI_PID | CLI_ALL | CLI_DURATION | CLI_RING_MB | CLI_PY_STACKS |
			 CLI_NO_STACKS | CLI_TORCH_TIMEOUT;
	cli_opts.pids = target_pids;
	cli_opts.max_pids = MAX_PIDS;
	argp.children = cli_opts__children(dump_child);
	if (argp_parse(&argp, argc, argv, 0, NULL, NULL))
		return 2;
	session__libbpf_print_setup();
	if (env.trigger_dir)
		return trigger_command();
	if (host_id(s.host, sizeof(s.host)))
		return 1;
	set_priority();

	for (int i = 0; i < cli_opts.nr_pids; i++) {
		struct target *t = session__open_target(cli_opts.pids[i]);

		if (!t)
			return 1;
		target__free(t);
	}
	if (torch_dump_start(torch) || open_dump_dir_and_fifo(&fifo_fd))
		goto cleanup;
	/* before recording starts: a metrics port in use refuses the start, so a service
	 * manager sees the failure instead of a recorder nobody can scrape */
	if (env.metrics || env.metrics_file) {
		metrics = fr_metrics__new(env.metrics, env.metrics_file);
		if (!metrics)
			goto cleanup;
	}
	if (fr_session_start(&s))
		goto cleanup;

	signal(SIGINT, on_stop);
	signal(SIGTERM, on_stop);
	signal(SIGUSR2, on_usr2);
	signal(SIGPIPE, SIG_IGN);
	if (env.scope.kind) {
		char what[600];

		log_info("-a scoped to %s\n", fr_scope__describe(&env.scope, what, sizeof(what)));
	}
	log_info("flight recorder on %s%d process%s, dumps to %s\n",
		 cli_opts.all ? "all NCCL processes, now " : "", s.nr_targets,
		 s.nr_targets == 1 ? "" : "es", env.dump_dir);
	record(&s, metrics, fifo_fd);
	ring_buffer__consume(s.rb);
	set_drops(&s);
	flightrec__take_exits(s.fr);
	if (s.exec) {
		struct fr_exec_stats st;

		fr_exec__stats(s.exec, &st);
		log_verbose("-a: %d library files probed for every process (%d refused), %llu "
			    "mappings seen; mapping to probes attached: last %.1f ms, max %.1f ms\n",
			    st.files, st.files_failed, (unsigned long long)st.maps_seen,
			    st.last_attach_ns / 1e6, st.max_attach_ns / 1e6);
	}
	/* a final dump that could not be written is a failed run (each said why) */
	ret = flightrec__dump_all(s.fr, "final") < 0 ? 1 : 0;
	if (torch_dump_finish(torch))
		ret = 1;
	if (metrics)	/* the file keeps the final state (final dumps counted) */
		fr_metrics__update(metrics, s.fr, clock_ns(CLOCK_MONOTONIC));
cleanup:
	for (int i = 0; i < cli_opts.nr_pids; i++)
		torch_instr__free(torch[i]);
	fr_metrics__free(metrics);
	fr_session_free(&s);
	if (fifo_fd >= 0)
		close(fifo_fd);
	return ret;
}
