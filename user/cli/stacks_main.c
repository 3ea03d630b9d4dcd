// SPDX-License-Identifier: MIT
/* tptrace stacks: what every thread of a (hung) job is doing right now, native and Python
 * frames (stacks.h), and the ranks merged into one tree of equivalence classes whose
 * outliers name the culprit (stacktree.h). Needs no BPF: ptrace and /proc only. */
#include <argp.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "atomic_file.h"
#include "textwrap.h"
#include "elfsym.h"
#include "log.h"
#include "util.h"
#include "procmaps.h"
#include "cli_opts.h"
#include "cli_output.h"
#include "session.h"
#include "stacks.h"
#include "stacktree.h"

#define MAX_TARGETS 4096
#define MAX_WORKERS 64

/* -p (a pid given twice counts once), -a: cli_opts (cli_opts.h); -o, --json: cli_output */
static int target_pids[MAX_TARGETS];

static struct stacks_env {
	int samples;
	int interval_ms;
	int max_frames;
	bool all_threads;
	bool no_python;
} env = {
	.samples = 3,
	.interval_ms = 200,
	.max_frames = 128,
};

static const char doc[] =
"tptrace stacks: what every thread of a running (or hung) process is doing:\n"
"native and Python frames, and the ranks of a job merged into one tree.\n"
"\n"
"USAGE: tptrace stacks (-p PID [-p PID ...] | -a) [--samples N] [--interval MS]\n"
"                      [--json] [-o FILE] [--all-threads] [--max-frames N]\n"
"\n"
"For each thread: state (R S D T), kernel wait channel, native frames\n"
"unwound with CFI (code without frame pointers too) as function+offset\n"
"(module), or module+offset [build-id] when stripped, Python frames\n"
"(file:line function, CPython 3.9-3.13) at the interpreter frames running\n"
"them, and where it is: inside which NCCL, CUDA runtime or driver API, in\n"
"the caching allocator, in Python code, idle in a wait, or running. Taking\n"
"--samples snapshots --interval ms apart tells a thread that makes no\n"
"progress from one that does. Each process is stopped a few milliseconds\n"
"per sample (ptrace, then restored; never left stopped, even if tptrace is\n"
"killed). Without ptrace rights a process is shown from /proc only (states,\n"
"wait channels, kernel stacks) and a line says so.\n"
"\n"
"Then the issuing thread of every process (the one in NCCL/CUDA, else the\n"
"Python main thread) is merged into one tree, outermost frame first, with\n"
"the ranks (RANK in the environment, else pids) that share each frame;\n"
"processes with the same stack, place and progress form a class, and the\n"
"classes with the fewest ranks are named: \"outlier: rank 6: in Python\n"
"train.py:88 step(), the others in ncclAllReduce (no progress)\".\n"
"\n"
"-p takes any process; -a every process that maps a CUDA runtime (shared or\n"
"linked statically), libcuda or NCCL. All targets are sampled at once.\n"
"\n"
"--json writes {\"processes\": [...]} (docs/fr-schema.md, stacks) instead of\n"
"the text; -o FILE writes it there (atomically) instead of stdout.\n"
"\n"
"EXIT STATUS: 0 every target was read (some perhaps from /proc only, as\n"
"said); 1 no target could be read, -a found none, or the output could not\n"
"be written; 2 bad usage; 3 some targets could not be read (each said why),\n"
"the others are in the output.\n"
"\n"
"EXAMPLES:\n"
"  sudo tptrace stacks -a                      # every CUDA/NCCL process here\n"
"  sudo tptrace stacks -p 4242 -p 4243         # two ranks, text\n"
"  sudo tptrace stacks -a --json -o hang.json  # the snapshots as JSON\n"
"  sudo tptrace stacks -p 4242 --samples 5 --interval 500 --all-threads\n";

enum { OPT_SAMPLES = 1000, OPT_INTERVAL, OPT_ALL_THREADS, OPT_MAX_FRAMES, OPT_NO_PYTHON };

static const struct argp_option opts[] = {
	{ "samples", OPT_SAMPLES, "N", 0, "Snapshots per process, to tell progress (default 3)", 0 },
	{ "interval", OPT_INTERVAL, "MS", 0, "Milliseconds between samples (default 200)", 0 },
	{ "all-threads", OPT_ALL_THREADS, NULL, 0, "Merge every thread into the tree, not only the issuing one", 0 },
	{ "max-frames", OPT_MAX_FRAMES, "N", 0, "Frames per thread, innermost first (default 128)", 0 },
	{ "no-python", OPT_NO_PYTHON, NULL, 0, "Native frames only (do not read Python frames)", 0 },
	{},
};

static error_t parse_arg(int key, char *arg, struct argp_state *state)
{
	switch (key) {
	case OPT_SAMPLES:
		if (session__parse_int(arg, 1, 100, &env.samples))
			argp_error(state, "invalid --samples '%s' (1..100)", arg);
		break;
	case OPT_INTERVAL:
		if (session__parse_int(arg, 1, 60000, &env.interval_ms))
			argp_error(state, "invalid --interval '%s' (milliseconds, 1..60000)", arg);
		break;
	case OPT_ALL_THREADS:
		env.all_threads = true;
		break;
	case OPT_MAX_FRAMES:
		if (session__parse_int(arg, 1, 4096, &env.max_frames))
			argp_error(state, "invalid --max-frames '%s' (1..4096)", arg);
		break;
	case OPT_NO_PYTHON:
		env.no_python = true;
		break;
	case ARGP_KEY_END:
		cli_opts__check(state);
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

/* ---- -a: the processes that use CUDA or NCCL ---- */

/* cudart linked statically into the executable (nvcc's default): nothing in the maps names
 * it until it loads libcuda, so the executable's symbols are looked at */
static bool static_cudart(int pid, void *ctx)
{
	struct elfsym_cache *cache = ctx;
	struct elfsym *es;
	char path[64];

	procmaps__path(path, sizeof(path), pid, "exe");
	es = elfsym_cache__get(cache, path);
	if (!es)
		return false;
	return elfsym__find_func(es, "cudaLaunchKernel") || elfsym__find_func(es, "cudaStreamSynchronize");
}

static int find_cuda_procs(void)
{
	static const char *const libs[] = { "/libcudart.so", "/libcuda.so", "/libnccl.so", NULL };
	struct elfsym_cache *cache = elfsym_cache__new();

	if (!cache)
		return -ENOMEM;
	cli_opts.nr_pids = session__find_procs(libs, NULL, static_cudart, cache, cli_opts.pids, MAX_TARGETS);
	elfsym_cache__free(cache);
	return 0;
}

/* ---- snapshots: every target at once, so N processes take the time of one ---- */

struct job {
	int pid;
	struct stack_proc *sp;
	char err[256];
	int errnum;
};

struct pool {
	struct job *jobs;
	int nr;
	int next;
	pthread_mutex_t lock;
	struct stack_opts opts;
};

static void *worker(void *arg)
{
	struct pool *p = arg;

	for (;;) {
		struct job *j;

		pthread_mutex_lock(&p->lock);
		j = p->next < p->nr ? &p->jobs[p->next++] : NULL;
		pthread_mutex_unlock(&p->lock);
		if (!j)
			return NULL;
		j->sp = stacks__take(j->pid, &p->opts, j->err, sizeof(j->err));
		j->errnum = j->sp ? 0 : errno;
	}
}

static void take_all(struct job *jobs, int nr)
{
	struct pool p = { .jobs = jobs, .nr = nr, .lock = PTHREAD_MUTEX_INITIALIZER,
			  .opts = { .samples = env.samples, .interval_ms = env.interval_ms,
				    .max_frames = env.max_frames, .no_python = env.no_python } };
	pthread_t tids[MAX_WORKERS];
	int nr_workers = nr < MAX_WORKERS ? nr : MAX_WORKERS, started = 0;

	for (int i = 0; i < nr_workers; i++) {
		if (pthread_create(&tids[i], NULL, worker, &p))
			break;
		started++;
	}
	if (!started)	/* no thread to spare: one after the other, here */
		worker(&p);
	for (int i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
}

/* ---- text ---- */

static void print_frame(FILE *f, const struct stack_frame *fr)
{
	if (fr->kind == STACK_PYTHON) {
		fprintf(f, "      %s:", fr->file ? fr->file : "?");
		if (fr->line > 0)
			fprintf(f, "%d", fr->line);
		else
			fprintf(f, "?");
		fprintf(f, " %s\n", fr->func ? fr->func : "?");
	} else if (fr->unrecoverable) {
		fprintf(f, "      0x%llx unrecoverable: %s\n", (unsigned long long)fr->pc,
			fr->unrecoverable);
	} else if (fr->func) {
		fprintf(f, "      %s+0x%llx (%s)\n", fr->func, (unsigned long long)fr->func_off,
			fr->module ? fr->module : "?");
	} else if (fr->module) {
		fprintf(f, "      %s+0x%llx", fr->module, (unsigned long long)fr->module_off);
		if (fr->build_id && fr->build_id[0])
			fprintf(f, " [%s]", fr->build_id);
		else if (!fr->build_id)
			fprintf(f, " [build-id not read]");
		else
			fprintf(f, " [no build-id]");
		fprintf(f, "\n");
	} else {
		fprintf(f, "      0x%llx (in no mapped object)\n", (unsigned long long)fr->pc);
	}
}

static void print_thread(FILE *f, const struct stack_proc *sp, const struct stack_thread *t)
{
	fprintf(f, "  thread %d (%s) state %c", t->tid, t->name[0] ? t->name : "?",
		t->state ? t->state : '?');
	if (t->wchan[0])
		fprintf(f, " wchan %s", t->wchan);
	fprintf(f, ": where %s", stacks__where_name(t->where));
	if (t->api)
		fprintf(f, " api %s", t->api);
	fprintf(f, " progress %s", stacks__progress_name(t->progress));
	if (t->main || t->issuing || t->python)
		fprintf(f, " [%s%s%s]", t->main ? "main" : "",
			t->issuing ? (t->main ? " issuing" : "issuing") : "",
			t->python ? (t->main || t->issuing ? " python" : "python") : "");
	fprintf(f, "\n");
	for (int i = 0; i < t->nr_frames; i++)
		print_frame(f, &t->frames[i]);
	if (!t->nr_frames)
		fprintf(f, "      (no frames: %s)\n", sp->ptrace_err ? sp->ptrace_err :
			t->unwind_err ? t->unwind_err : "none read");
	else if (t->truncated)
		fprintf(f, "      ... (truncated: %s)\n", t->unwind_err ? t->unwind_err :
			"--max-frames reached");
	/* the kernel's side matters when user frames say nothing, or the thread cannot stop */
	if (!t->nr_frames || t->state == 'D') {
		if (t->nr_kstack > 0) {
			fprintf(f, "      kernel:");
			for (int i = 0; i < t->nr_kstack; i++)
				fprintf(f, "%s %s", i ? " <-" : "", t->kstack[i]);
			fprintf(f, "\n");
		} else if (t->nr_kstack < 0) {
			fprintf(f, "      kernel stack unreadable: %s\n",
				t->kstack_err ? t->kstack_err : "unknown reason");
		}
	}
}

static void print_proc(FILE *f, const struct stack_proc *sp)
{
	fprintf(f, "pid %d (%s)", sp->pid, sp->comm);
	if (sp->rank >= 0) {
		fprintf(f, " rank %d", sp->rank);
		if (sp->world_size >= 0)
			fprintf(f, " of %d", sp->world_size);
	} else {
		fprintf(f, " rank unknown (no RANK in its environment)");
	}
	if (sp->samples == 1)
		fprintf(f, ": 1 sample");
	else
		fprintf(f, ": %d samples %d ms apart", sp->samples, sp->interval_ms);
	fprintf(f, ", stopped %.1f ms at most\n", sp->stopped_ns_max / 1e6);
	if (sp->uret_resolved || sp->uret_unrecoverable || sp->uret_stepped_out) {
		fprintf(f, "  return probes: %d return address%s recovered, %d unrecoverable "
			"(pending returns read in %.2f ms)", sp->uret_resolved,
			sp->uret_resolved == 1 ? "" : "es", sp->uret_unrecoverable,
			sp->uret_read_ns / 1e6);
		if (sp->uret_stepped_out)
			fprintf(f, "; %d thread%s stepped out of the trampoline", sp->uret_stepped_out,
				sp->uret_stepped_out == 1 ? "" : "s");
		fputc('\n', f);
	}
	if (sp->cmdline)
		fprintf(f, "  cmdline: %s\n", sp->cmdline);
	if (sp->python)
		fprintf(f, "  python: %s\n", sp->python);
	if (sp->python_err)
		fprintf(f, "  python frames not read: %s\n", sp->python_err);
	if (sp->ptrace_err)
		fprintf(f, "  degraded to /proc (states, wait channels, kernel stacks): %s\n",
			sp->ptrace_err);
	if (sp->exited)
		fprintf(f, "  exited during the snapshot\n");
	for (int i = 0; i < sp->nr_threads; i++)
		print_thread(f, sp, &sp->threads[i]);
	fprintf(f, "\n");
}

#define TEXT_COLS 100

static int write_text(FILE *f, struct stack_proc **procs, int n)
{
	struct stacktree_opts o = { .max_depth = 0, .all_threads = env.all_threads };
	char *buf = NULL;
	size_t size = 0;
	FILE *m = open_memstream(&buf, &size);
	int err;

	if (!m)
		return -ENOMEM;
	for (int i = 0; i < n; i++)
		print_proc(m, procs[i]);
	err = stacktree__print(m, procs, n, &o);
	if (fclose(m)) {
		free(buf);
		return -ENOMEM;
	}
	for (char *l = buf, *nl; l && *l; l = nl ? nl + 1 : NULL) {
		size_t len;

		nl = strchr(l, '\n');
		len = nl ? (size_t)(nl - l) : strlen(l);
		if (len <= TEXT_COLS)
			fprintf(f, "%.*s\n", (int)len, l);
		else
			/* continuations 8 deeper than the line: deeper than any frame or
			 * tree level below it, so a reader can tell them apart */
			text_wrap(f, "", strspn(l, " ") + 8, l, len, TEXT_COLS);
	}
	free(buf);
	return err;
}

static int write_json(FILE *f, struct stack_proc **procs, int n)
{
	cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "processes");
	char *text = NULL;
	int err = 0;

	if (!root || !arr) {
		err = -ENOMEM;
		goto out;
	}
	for (int i = 0; i < n; i++) {
		cJSON *o = stacks__json(procs[i]);

		if (!o) {
			err = -ENOMEM;
			goto out;
		}
		cJSON_AddItemToArray(arr, o);
	}
	text = cJSON_PrintUnformatted(root);
	if (!text)
		err = -ENOMEM;
	else if (fputs(text, f) < 0 || fputc('\n', f) < 0)
		err = -EIO;
out:
	free(text);
	cJSON_Delete(root);
	return err;
}

/* ---- output: stdout, or FILE replaced atomically (a temp file renamed over it) ---- */

struct out {
	FILE *f;
	struct atomic_file af;	/* the temp file in the output's directory */
	int dirfd;
	bool direct;	/* stdout, or a FILE that is not a regular file (a fifo, /dev/...) */
};

/* the temp file while it exists: Ctrl-C during a long snapshot leaves nothing behind (the
 * targets themselves are released by the kernel when our tracer threads die) */
static char interrupted_tmp[256];
static int interrupted_dirfd = -1;

static void on_signal(int sig)
{
	if (interrupted_tmp[0])
		unlinkat(interrupted_dirfd, interrupted_tmp, 0);
	signal(sig, SIG_DFL);
	raise(sig);
}

static int out_open(struct out *o)
{
	const char *base;
	struct stat st;
	mode_t mask;
	int err;

	o->dirfd = -1;
	if (!cli_output.file) {
		o->f = stdout;
		o->direct = true;
		return 0;
	}
	if (!stat(cli_output.file, &st) && !S_ISREG(st.st_mode)) {
		o->f = fopen(cli_output.file, "w");
		o->direct = true;
		return o->f ? 0 : -errno;
	}
	o->dirfd = atomic_file__dir_of(cli_output.file, &base);
	if (o->dirfd < 0)
		return o->dirfd;
	mask = umask(0);
	umask(mask);
	err = atomic_file__open(&o->af, o->dirfd, base, 0666 & ~mask);
	if (err)
		goto fail;
	interrupted_dirfd = o->dirfd;
	snprintf(interrupted_tmp, sizeof(interrupted_tmp), "%s", o->af.tmp);
	o->f = fdopen(o->af.fd, "w");
	if (!o->f) {
		err = -errno;
		interrupted_tmp[0] = 0;
		atomic_file__abort(&o->af);
		goto fail;
	}
	return 0;
fail:
	close(o->dirfd);
	o->dirfd = -1;
	return err;
}

static int out_close(struct out *o, int err)
{
	if (o->f == stdout) {
		if (fflush(stdout) && !err)
			err = -errno;
		return err;
	}
	if (fflush(o->f) && !err)
		err = -errno;
	if (!err && ferror(o->f))
		err = -EIO;
	if (!err && !o->direct && fsync(fileno(o->f)))
		err = -errno;
	if (fclose(o->f) && !err)
		err = -errno;
	o->f = NULL;
	if (o->direct)
		return err;
	o->af.fd = -1;		/* fclose closed it */
	if (err)
		atomic_file__abort(&o->af);
	else
		err = atomic_file__commit(&o->af, false);
	interrupted_tmp[0] = 0;
	close(o->dirfd);
	o->dirfd = -1;
	return err;
}

int stacks_main(int argc, char **argv)
{
	struct argp argp = { .options = opts, .parser = parse_arg, .doc = doc };
	struct stack_proc **procs = NULL;
	struct job *jobs = NULL;
	struct out out = {};
	int nr = 0, failed = 0, err, ret = 1;

	argp_err_exit_status = 2;
	argv[0] = (char *)"tptrace stacks";	/* "Usage: tptrace stacks ..." in argp's messages */
	argp_help_width();
	cli_opts.takes = CLI_PID | CLI_ALL;
	cli_opts.pids = target_pids;
	cli_opts.max_pids = MAX_TARGETS;
	cli_opts.unique_pids = true;
	cli_output.takes = CLI_OUT_FILE | CLI_OUT_JSON;
	argp.children = cli_opts__children(NULL);
	if (argp_parse(&argp, argc, argv, 0, NULL, NULL))
		return 2;
	/* the return-instance iterator (stacks through uretprobes) is loaded when a process has
	 * return probes: libbpf says why a load failed only with -v, the frames say it anyway */
	session__libbpf_print_setup();
	signal(SIGPIPE, SIG_IGN);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	if (cli_opts.all) {
		if (find_cuda_procs()) {
			log_error("out of memory\n");
			return 1;
		}
		if (!cli_opts.nr_pids) {
			log_error("no process on this host uses CUDA or NCCL (none maps libcudart, "
				  "libcuda or libnccl, or has cudart linked in)\n");
			return 1;
		}
		log_verbose("%d CUDA/NCCL process%s found\n", cli_opts.nr_pids, cli_opts.nr_pids == 1 ? "" : "es");
	}
	/* fail on an unwritable output before stopping anything */
	err = out_open(&out);
	if (err) {
		log_error("cannot write %s: %s\n", cli_output.file, strerror(-err));
		return 1;
	}
	jobs = calloc(cli_opts.nr_pids, sizeof(*jobs));
	procs = calloc(cli_opts.nr_pids, sizeof(*procs));
	if (!jobs || !procs) {
		log_error("out of memory\n");
		goto cleanup;
	}
	for (int i = 0; i < cli_opts.nr_pids; i++)
		jobs[i].pid = cli_opts.pids[i];
	take_all(jobs, cli_opts.nr_pids);
	for (int i = 0; i < cli_opts.nr_pids; i++) {
		struct stack_proc *sp = jobs[i].sp;

		if (!sp) {
			if (jobs[i].errnum == ESRCH)
				log_error("pid %d: no such process (gone?)\n", jobs[i].pid);
			else
				log_error("cannot read %s\n", jobs[i].err[0] ? jobs[i].err : strerror(jobs[i].errnum));
			failed++;
			continue;
		}
		if (sp->ptrace_err)
			log_error("pid %d (%s): %s: states, wait channels and kernel stacks only "
				  "(run as root, or with CAP_SYS_PTRACE)\n", sp->pid, sp->comm, sp->ptrace_err);
		procs[nr++] = sp;
	}
	if (!nr)	/* each said why; nothing is written */
		goto cleanup;
	err = cli_output.json ? write_json(out.f, procs, nr) : write_text(out.f, procs, nr);
	err = out_close(&out, err);
	if (err) {
		log_error("writing %s failed: %s; nothing written\n",
			  cli_output.file ? cli_output.file : "stdout", strerror(-err));
		goto cleanup;
	}
	ret = failed ? 3 : 0;
cleanup:
	if (out.f)
		out_close(&out, -ECANCELED);
	for (int i = 0; jobs && i < cli_opts.nr_pids; i++)
		stacks__free(jobs[i].sp);
	free(jobs);
	free(procs);
	return ret;
}
