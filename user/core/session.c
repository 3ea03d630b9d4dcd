// SPDX-License-Identifier: MIT
#include <argp.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include "cuda.skel.h"
#include "cuda_api.h"
#include "nccl_api.h"
#include "ustack.h"
#include "cuda.h"
#include "log.h"
#include "session.h"
#include "fr_scope.h"
#include "target.h"

int tptrace_verbosity;

static const struct argp_option common_opts[] = {
	{ "verbose", 'v', NULL, 0, "More diagnostics (repeat for libbpf debug output)", -1 },
	{ "quiet", 'q', NULL, 0, "Only errors on stderr", -1 },
	{},
};

static error_t common_parse(int key, char *arg, struct argp_state *state)
{
	switch (key) {
	case 'v':
		tptrace_verbosity++;
		return 0;
	case 'q':
		tptrace_verbosity = -1;
		return 0;
	default:
		return ARGP_ERR_UNKNOWN;
	}
}

const struct argp session_common_argp = { .options = common_opts, .parser = common_parse };

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (tptrace_verbosity < 1 || (level == LIBBPF_DEBUG && tptrace_verbosity < 2))
		return 0;
	return vfprintf(stderr, fmt, args);
}

void session__libbpf_print_setup(void)
{
	libbpf_set_print(libbpf_print);
}

/* Whether the running kernel has a BTF-enabled sched_process_exit tracepoint (tp_btf needs
 * the btf_trace_<name> typedef in vmlinux BTF). TPTRACE_NO_EXIT_TP forces the fallback
 * (exit codes unknown, exits seen through the pidfd only) for tests. */
static bool exit_tp_supported(void)
{
	struct btf *vmlinux;
	bool found;

	if (getenv("TPTRACE_NO_EXIT_TP"))
		return false;
	vmlinux = btf__load_vmlinux_btf();
	if (!vmlinux)
		return false;
	found = btf__find_by_name_kind(vmlinux, "btf_trace_sched_process_exit", BTF_KIND_TYPEDEF) >= 0;
	btf__free(vmlinux);
	return found;
}

int session__ustacks_add(struct session_bpf *b, int pid)
{
	char why[256];
	const char *python;
	int ret;

	if (!b || !b->ustacks)
		return 0;
	ret = ustacks__add_pid(b->ustacks, pid, &python, why, sizeof(why));
	if (ret)
		log_info("pid %d: no Python stacks: %s\n", pid, why);
	else
		log_verbose("pid %d: Python %s: stacks on\n", pid, python);
	return ret;
}

struct session_bpf *session__load_bpf(int ring_mb, const struct session_load_opts *o)
{
	bool fr_exec = o->fr_exec;
	struct bpf_program *multi_progs[3];
	struct session_bpf *b = calloc(1, sizeof(*b));
	struct cuda_bpf *skel;
	int err;

	if (!b) {
		log_error("out of memory\n");
		return NULL;
	}
	b->uprobe_multi = uprobe_multi__supported();
	b->exit_tp = exit_tp_supported();
	if (!b->uprobe_multi)
		log_verbose("uprobe_multi unavailable; one link per probe\n");
	if (!b->exit_tp)
		log_verbose("exit tracepoint unavailable; exit codes will be unknown\n");
	b->skel = skel = cuda_bpf__open();
	if (!skel) {
		log_error("failed to open BPF object: %s\n", strerror(errno));
		goto err;
	}
	multi_progs[0] = skel->progs.cuda_entry_multi;
	multi_progs[1] = skel->progs.cuda_return_multi;
	multi_progs[2] = skel->progs.dl_debug_state_multi;
	for (int i = 0; i < 3; i++) {
		if (b->uprobe_multi)
			bpf_program__set_expected_attach_type(multi_progs[i],
				(enum bpf_attach_type)TP_BPF_TRACE_UPROBE_MULTI);
		else
			bpf_program__set_autoload(multi_progs[i], false);
	}
	/* -a: entry and return on one session link where the kernel has them (cuda_session) */
	b->uprobe_session = fr_exec && b->uprobe_multi && uprobe_session__supported();
	if (b->uprobe_session)
		bpf_program__set_expected_attach_type(skel->progs.cuda_session,
			(enum bpf_attach_type)TP_BPF_TRACE_UPROBE_SESSION);
	else
		bpf_program__set_autoload(skel->progs.cuda_session, false);
	if (fr_exec && !b->uprobe_session)
		log_verbose("uprobe sessions unavailable; entry and return links\n");
	if (!b->exit_tp)
		bpf_program__set_autoload(skel->progs.proc_exit, false);
	bpf_program__set_autoload(skel->progs.fr_map, fr_exec);
	bpf_program__set_autoload(skel->progs.ustack_code_free, o->ustacks || o->ustacks_native);
	bpf_program__set_autoload(skel->progs.fr_exec, fr_exec);
	skel->rodata->fr_filter = fr_exec;
	if (o->scope) {
		skel->rodata->fr_scope = o->scope->kind;
		skel->rodata->fr_scope_dev = o->scope->dev;
		skel->rodata->fr_scope_ino = o->scope->ino;
		skel->rodata->fr_scope_level = o->scope->level;
	}
	skel->rodata->ustacks_on = o->ustacks || o->ustacks_native;
	if (!skel->rodata->ustacks_on)
		bpf_map__set_max_entries(skel->maps.ustacks, 1);
	bpf_map__set_max_entries(skel->maps.events, (uint32_t)ring_mb << 20);
	/* wake the reader once an eighth of the ring waits; it also drains every 20 ms */
	skel->rodata->wakeup_bytes = ((uint64_t)ring_mb << 20) / 8;
	err = cuda_bpf__load(skel);
	if (err) {
		if (err == -EPERM || err == -EACCES)
			log_error("loading BPF programs: %s (run as root: needs CAP_BPF and "
				  "CAP_PERFMON, or CAP_SYS_ADMIN)\n", strerror(-err));
		else
			log_error("loading BPF programs: %s (kernel >= 5.15 with BTF "
				  "needed)\n", strerror(-err));
		goto err;
	}
	if (skel->rodata->ustacks_on) {
		b->ustacks = ustacks__new(bpf_map__fd(skel->maps.ustacks),
					  bpf_map__fd(skel->maps.ustack_procs),
					  bpf_map__fd(skel->maps.ustack_counters), o->ustacks_native);
		if (!b->ustacks) {
			log_error("out of memory\n");
			goto err;
		}
		ustacks__set_code_free_prog(b->ustacks, skel->progs.ustack_code_free);
	}
	if (b->exit_tp) {
		skel->links.proc_exit = bpf_program__attach(skel->progs.proc_exit);
		if (!skel->links.proc_exit) {
			log_verbose("exit tracepoint unavailable: %s\n", strerror(errno));
			b->exit_tp = false;
		}
	}
	if (fr_exec) {
		skel->links.fr_map = bpf_program__attach(skel->progs.fr_map);
		skel->links.fr_exec = bpf_program__attach(skel->progs.fr_exec);
		if (!skel->links.fr_map || !skel->links.fr_exec) {
			log_error("cannot watch library mappings and execs (tp_btf sys_exit, "
				  "sched_process_exec): %s\n", strerror(errno));
			goto err;
		}
	}
	return b;
err:
	session__free_bpf(b);
	return NULL;
}

void session__free_bpf(struct session_bpf *b)
{
	if (!b)
		return;
	ustacks__free(b->ustacks);
	cuda_bpf__destroy(b->skel);
	free(b);
}

void session__probes(const struct session_bpf *b, struct target_probes *probes)
{
	probes->entry = b->skel->progs.cuda_entry;
	probes->ret = b->skel->progs.cuda_return;
	probes->dl_hook = b->skel->progs.dl_debug_state;
	if (b->uprobe_multi) {
		probes->entry_multi = b->skel->progs.cuda_entry_multi;
		probes->ret_multi = b->skel->progs.cuda_return_multi;
		probes->dl_hook_multi = b->skel->progs.dl_debug_state_multi;
	}
	if (b->uprobe_session)
		probes->session = b->skel->progs.cuda_session;
}

struct target *session__open_target(int pid)
{
	struct target *t = target__new(pid);

	if (t)
		return t;
	if (errno == ESRCH)
		log_error("pid %d: no such process\n", pid);
	else
		log_error("pid %d: cannot read /proc/%d/maps: %s (run as root)\n", pid, pid,
			  strerror(errno));
	return NULL;
}

static bool maps_mention(int pid, const char *const *needles)
{
	char path[64], line[4096];
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	f = fopen(path, "r");
	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		for (int i = 0; needles[i] && !found; i++)
			found = strstr(line, needles[i]);
	fclose(f);
	return found;
}

int session__find_procs(const char *const *needles, bool (*want)(int pid, void *ctx),
			bool (*also)(int pid, void *ctx), void *ctx, int *pids, int max)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int self = getpid(), n = 0;

	if (!d)
		return 0;
	while (n < max && (de = readdir(d))) {
		int pid = atoi(de->d_name);

		if (pid <= 0 || pid == self || (want && !want(pid, ctx)))
			continue;
		if (maps_mention(pid, needles) || (also && also(pid, ctx)))
			pids[n++] = pid;
	}
	closedir(d);
	return n;
}

int session__watch_exit(struct session_bpf *b, int pid)
{
	__u32 key = pid;
	__u8 one = 1;
	int err;

	if (!bpf_map_update_elem(bpf_map__fd(b->skel->maps.watch_pids), &key, &one, BPF_ANY))
		return 0;
	err = -errno;
	log_error("pid %d: cannot watch its exit, its exit code will be unknown: %s\n", pid,
		  strerror(-err));
	return err;
}

int session__percpu_sum(int map_fd, uint32_t key, uint64_t *sum)
{
	int ncpu = libbpf_num_possible_cpus(), err = 0;
	uint64_t *vals;

	if (getenv("TPTRACE_TEST_COUNTERS_UNREADABLE"))
		return -EBADF;
	if (ncpu <= 0)
		return ncpu ? ncpu : -EINVAL;
	vals = calloc(ncpu, sizeof(*vals));
	if (!vals)
		return -ENOMEM;
	*sum = 0;
	if (bpf_map_lookup_elem(map_fd, &key, vals))
		err = -errno;
	else
		for (int i = 0; i < ncpu; i++)
			*sum += vals[i];
	free(vals);
	return err;
}

int session__drops(const struct session_bpf *b, uint64_t *drops)
{
	return session__percpu_sum(bpf_map__fd(b->skel->maps.counters), TP_CNT_DROPPED, drops);
}

int session__parse_pid(const char *arg, int *pid)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(arg, &end, 10);
	if (errno || end == arg || *end || v <= 0 || v > INT_MAX)
		return -EINVAL;
	*pid = (int)v;
	return 0;
}

int session__parse_ring_mb(const char *arg, int *mb)
{
	char *end;
	long v = strtol(arg, &end, 10);

	if (end == arg || *end || v < 1 || v > 4096 || (v & (v - 1)))
		return -EINVAL;
	*mb = (int)v;
	return 0;
}

int session__parse_int(const char *arg, int min, int max, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(arg, &end, 10);
	if (errno || end == arg || *end || v < min || v > max)
		return -EINVAL;
	*out = (int)v;
	return 0;
}

int session__parse_seconds(const char *arg, double *sec)
{
	char *end;
	double v = strtod(arg, &end);

	if (end == arg || *end || !(v > 0))
		return -EINVAL;
	*sec = v;
	return 0;
}

/* ---- the acquisition core ---- */

struct session_sink {
	struct session_sink_ops ops;
	void *ctx;
	size_t user_off;
	int source;		/* the stage whose output it consumes (an index); -1 none */
	bool held;		/* a stage: it holds the call being delivered */
};

struct session {
	struct calls *calls;
	struct elfsym_cache *cache;
	const struct target_probes *probes;
	struct session_sink *sinks;
	int nr_sinks;
	size_t user_used;
	struct target **targets;
	int nr_targets;
};

static void *sink_user(const struct session_sink *k, const struct call_frame *f)
{
	return (char *)f->user + k->user_off;
}

static void core_entry(void *ctx, struct call_frame *f)
{
	struct session *s = ctx;

	for (int i = 0; i < s->nr_sinks; i++)
		if (s->sinks[i].ops.on_entry)
			s->sinks[i].ops.on_entry(s->sinks[i].ctx, f, sink_user(&s->sinks[i], f));
}

static void core_call(void *ctx, const struct call *c)
{
	struct session *s = ctx;
	struct call held = *c;

	held.held = true;
	/* the stages first: whether one keeps the call is how its consumers see it */
	for (int i = 0; i < s->nr_sinks; i++) {
		struct session_sink *k = &s->sinks[i];

		k->held = k->ops.hold && k->ops.hold(k->ctx, c, sink_user(k, c->frame));
	}
	for (int i = 0; i < s->nr_sinks; i++) {
		struct session_sink *k = &s->sinks[i];
		bool of_stage = k->source >= 0 && s->sinks[k->source].held;

		if (k->ops.on_call)
			k->ops.on_call(k->ctx, of_stage ? &held : c, sink_user(k, c->frame));
	}
}

/* A return record follows an entry when the api's return is probed: always where the table
 * says so, on every api with --durations. */
bool session__has_return(const struct session *s, uint32_t api)
{
	if (api >= NCCL_API_BASE)
		return nccl_api_has_return(api - NCCL_API_BASE);
	return cuda_apis[api].ret || (s->probes && s->probes->all_returns);
}

static bool core_has_return(void *ctx, uint32_t api)
{
	return session__has_return(ctx, api);
}

static void core_dlopen(void *ctx, const struct tp_rec_dlopen *r)
{
	struct session *s = ctx;
	struct target *t = session__target(s, (int)r->pid);

	int n;

	if (!t || target__exited(t))
		return;
	n = session__scan(s, t);
	if (n > 0)
		log_verbose("pid %d loaded new code: %d probes attached\n", target__pid(t), n);
}

static void core_exit(void *ctx, const struct tp_rec_exit *x)
{
	struct session *s = ctx;

	for (int i = 0; i < s->nr_sinks; i++)
		if (s->sinks[i].ops.on_exit)
			s->sinks[i].ops.on_exit(s->sinks[i].ctx, x);
}

static void core_map(void *ctx, const struct tp_rec_map *m)
{
	struct session *s = ctx;

	for (int i = 0; i < s->nr_sinks; i++)
		if (s->sinks[i].ops.on_map)
			s->sinks[i].ops.on_map(s->sinks[i].ctx, m);
}

static void core_exec(void *ctx, const struct tp_rec_exec *e)
{
	struct session *s = ctx;

	for (int i = 0; i < s->nr_sinks; i++)
		if (s->sinks[i].ops.on_exec)
			s->sinks[i].ops.on_exec(s->sinks[i].ctx, e);
}

static void core_mem_call(void *ctx, const void *rec)
{
	struct session *s = ctx;

	for (int i = 0; i < s->nr_sinks; i++)
		if (s->sinks[i].ops.on_mem_call)
			s->sinks[i].ops.on_mem_call(s->sinks[i].ctx, rec);
}

static void core_mem_usdt(void *ctx, const void *rec)
{
	struct session *s = ctx;

	for (int i = 0; i < s->nr_sinks; i++)
		if (s->sinks[i].ops.on_mem_usdt)
			s->sinks[i].ops.on_mem_usdt(s->sinks[i].ctx, rec);
}

static struct session *core_new(enum calls_ring ring, struct elfsym_cache *cache,
				const struct target_probes *probes, uint32_t mem_api_count)
{
	struct session *s = calloc(1, sizeof(*s));
	struct calls_sink sink = {
		.entry = core_entry, .call = core_call, .has_return = core_has_return,
		.dlopen = core_dlopen, .exit = core_exit, .map = core_map, .exec = core_exec,
		.mem_call = core_mem_call,
		.mem_usdt = core_mem_usdt, .mem_api_count = mem_api_count,
	};

	if (!s)
		return NULL;
	sink.ctx = s;
	s->cache = cache;
	s->probes = probes;
	s->calls = calls__new(ring, &sink);
	if (!s->calls) {
		free(s);
		return NULL;
	}
	return s;
}

struct session *session__new(struct elfsym_cache *cache, const struct target_probes *probes)
{
	return core_new(CALLS_RING_CUDA, cache, probes, 0);
}

struct session *session__new_mem(uint32_t mem_api_count)
{
	return core_new(CALLS_RING_MEM, NULL, NULL, mem_api_count);
}

void session__free(struct session *s)
{
	if (!s)
		return;
	calls__free(s->calls);
	free(s->sinks);
	free(s->targets);
	free(s);
}

int session__add_sink(struct session *s, const struct session_sink_ops *ops, void *ctx,
		      size_t *user_off)
{
	size_t bytes = (ops->user_bytes + 7) & ~(size_t)7;
	struct session_sink *n;

	if (s->user_used + bytes > CALLS_USER_BYTES)
		return -ENOSPC;
	n = realloc(s->sinks, (s->nr_sinks + 1) * sizeof(*n));
	if (!n)
		return -ENOMEM;
	s->sinks = n;
	n[s->nr_sinks] = (struct session_sink){ .ops = *ops, .ctx = ctx, .user_off = s->user_used,
						.source = -1 };
	if (user_off)
		*user_off = s->user_used;
	s->user_used += bytes;
	s->nr_sinks++;
	return 0;
}

static int sink_index(const struct session *s, const void *ctx)
{
	for (int i = 0; i < s->nr_sinks; i++)
		if (s->sinks[i].ctx == ctx)
			return i;
	return -1;
}

int session__consume(struct session *s, const void *sink, const void *stage)
{
	int si = sink_index(s, sink), st = sink_index(s, stage);

	if (si < 0 || st < 0 || !s->sinks[st].ops.hold)
		return -ENOENT;
	if (si == st)
		return -EINVAL;
	s->sinks[si].source = st;
	return 0;
}

size_t session__user_used(const struct session *s)
{
	return s->user_used;
}

int session__add_target(struct session *s, struct target *t)
{
	struct target **n = realloc(s->targets, (s->nr_targets + 1) * sizeof(*n));

	if (!n)
		return -ENOMEM;
	s->targets = n;
	s->targets[s->nr_targets++] = t;
	return 0;
}

void session__remove_target(struct session *s, struct target *t)
{
	for (int i = 0; i < s->nr_targets; i++) {
		if (s->targets[i] != t)
			continue;
		memmove(&s->targets[i], &s->targets[i + 1],
			(s->nr_targets - i - 1) * sizeof(*s->targets));
		s->nr_targets--;
		return;
	}
}

struct target *session__target(struct session *s, int pid)
{
	for (int i = s->nr_targets - 1; i >= 0; i--)
		if (target__pid(s->targets[i]) == pid)
			return s->targets[i];
	return NULL;
}

bool session__driver_call_in_runtime(struct session *s, const struct tp_rec_call *rec)
{
	struct target *t = session__target(s, (int)rec->pid);

	return t && target__call_nesting(t, rec) == CALL_IN_RUNTIME;
}

int session__scan(struct session *s, struct target *t)
{
	int n = target__scan(t, s->cache, s->probes);

	if (n < 0)
		return n;
	for (int i = 0; i < s->nr_sinks; i++)
		if (s->sinks[i].ops.on_library)
			s->sinks[i].ops.on_library(s->sinks[i].ctx, t, n);
	return n;
}

void session__rescan(struct session *s)
{
	for (int i = 0; i < s->nr_targets; i++)
		if (!target__exited(s->targets[i]))
			session__scan(s, s->targets[i]);
}

int session__ring_cb(void *ctx, void *data, size_t size)
{
	struct session *s = ctx;

	return calls__ring_cb(s->calls, data, size);
}

void session__finish(struct session *s, uint64_t end_ns)
{
	calls__finish(s->calls, end_ns);
}

const struct calls_stats *session__stats(const struct session *s)
{
	return calls__stats(s->calls);
}

struct calls *session__calls(struct session *s)
{
	return s->calls;
}
