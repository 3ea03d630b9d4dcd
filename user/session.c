// SPDX-License-Identifier: MIT
#include <argp.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "cuda.skel.h"
#include "cuda.h"
#include "log.h"
#include "session.h"
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

#define TP_BPF_TRACE_UPROBE_MULTI 48

static bool multi_available;

static struct cuda_bpf *open_skel(int ring_mb, bool multi, bool exit_tp)
{
	struct cuda_bpf *skel = cuda_bpf__open();
	struct bpf_program *progs[3];

	if (!skel)
		return NULL;
	progs[0] = skel->progs.cuda_entry_multi;
	progs[1] = skel->progs.cuda_return_multi;
	progs[2] = skel->progs.dl_debug_state_multi;
	for (int i = 0; i < 3; i++) {
		if (multi)
			bpf_program__set_expected_attach_type(progs[i],
				(enum bpf_attach_type)TP_BPF_TRACE_UPROBE_MULTI);
		else
			bpf_program__set_autoload(progs[i], false);
	}
	if (!exit_tp)
		bpf_program__set_autoload(skel->progs.proc_exit, false);
	bpf_map__set_max_entries(skel->maps.events, (uint32_t)ring_mb << 20);
	/* wake the reader once an eighth of the ring waits; it also drains every 20 ms */
	skel->rodata->wakeup_bytes = ((uint64_t)ring_mb << 20) / 8;
	return skel;
}

struct cuda_bpf *session__load_bpf(int ring_mb)
{
	struct cuda_bpf *skel = open_skel(ring_mb, true, true);
	int err;

	if (!skel) {
		log_error("tptrace: failed to open BPF object: %s\n", strerror(errno));
		return NULL;
	}
	err = cuda_bpf__load(skel);
	multi_available = !err;
	if (err && err != -EPERM && err != -EACCES) {
		/* a kernel before 6.6: load the single-probe flavour only */
		log_verbose("tptrace: uprobe_multi unavailable (%s); one link per probe\n",
			    strerror(-err));
		cuda_bpf__destroy(skel);
		skel = open_skel(ring_mb, false, true);
		if (!skel) {
			log_error("tptrace: failed to open BPF object: %s\n", strerror(errno));
			return NULL;
		}
		err = cuda_bpf__load(skel);
		if (err && err != -EPERM && err != -EACCES) {
			/* no BTF-enabled sched_process_exit: exit codes come from the pidfd only */
			log_verbose("tptrace: exit tracepoint unavailable (%s)\n", strerror(-err));
			cuda_bpf__destroy(skel);
			skel = open_skel(ring_mb, false, false);
			if (!skel) {
				log_error("tptrace: failed to open BPF object: %s\n", strerror(errno));
				return NULL;
			}
			err = cuda_bpf__load(skel);
		}
	}
	if (err) {
		if (err == -EPERM || err == -EACCES)
			log_error("tptrace: loading BPF programs: %s (run as root: needs CAP_BPF and "
				  "CAP_PERFMON, or CAP_SYS_ADMIN)\n", strerror(-err));
		else
			log_error("tptrace: loading BPF programs: %s (kernel >= 5.15 with BTF "
				  "needed)\n", strerror(-err));
		cuda_bpf__destroy(skel);
		return NULL;
	}
	/* exit codes of watched processes; harmless when it cannot attach */
	if (bpf_program__fd(skel->progs.proc_exit) >= 0) {
		skel->links.proc_exit = bpf_program__attach(skel->progs.proc_exit);
		if (!skel->links.proc_exit)
			log_verbose("tptrace: exit tracepoint unavailable: %s\n", strerror(errno));
	}
	return skel;
}

void session__probes(struct cuda_bpf *skel, struct target_probes *probes)
{
	probes->entry = skel->progs.cuda_entry;
	probes->ret = skel->progs.cuda_return;
	probes->dl_hook = skel->progs.dl_debug_state;
	if (multi_available && !getenv("TPTRACE_NO_UPROBE_MULTI")) {
		probes->entry_multi = skel->progs.cuda_entry_multi;
		probes->ret_multi = skel->progs.cuda_return_multi;
		probes->dl_hook_multi = skel->progs.dl_debug_state_multi;
	}
}

struct target *session__open_target(int pid)
{
	struct target *t = target__new(pid);

	if (t)
		return t;
	if (errno == ESRCH)
		log_error("tptrace: pid %d: no such process\n", pid);
	else
		log_error("tptrace: pid %d: cannot read /proc/%d/maps: %s (run as root)\n", pid, pid,
			  strerror(errno));
	return NULL;
}

int session__watch_exit(struct cuda_bpf *skel, int pid)
{
	__u32 key = pid;
	__u8 one = 1;

	return bpf_map_update_elem(bpf_map__fd(skel->maps.watch_pids), &key, &one, BPF_ANY);
}

uint64_t session__drops(struct cuda_bpf *skel)
{
	int ncpu = libbpf_num_possible_cpus();
	__u32 key = TP_CNT_DROPPED;
	uint64_t sum = 0;
	uint64_t *vals;

	if (ncpu <= 0)
		return 0;
	vals = calloc(ncpu, sizeof(*vals));
	if (!vals)
		return 0;
	if (!bpf_map_lookup_elem(bpf_map__fd(skel->maps.counters), &key, vals))
		for (int i = 0; i < ncpu; i++)
			sum += vals[i];
	free(vals);
	return sum;
}

uint64_t session__clock_ns(int clockid)
{
	struct timespec ts;

	clock_gettime(clockid, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

int session__parse_pid(const char *arg, int *pid)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(arg, &end, 10);
	if (errno || end == arg || *end || v <= 0 || v > 0x7fffffff)
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

int session__parse_seconds(const char *arg, double *sec)
{
	char *end;
	double v = strtod(arg, &end);

	if (end == arg || *end || !(v > 0))
		return -EINVAL;
	*sec = v;
	return 0;
}
