// SPDX-License-Identifier: MIT
/* tptrace side of the CUPTI agent: injection, control protocol, ring draining (gpu.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock_fit.h"
#include "gpu.h"
#include "inject.h"
#include "procmaps.h"
#include "util.h"

#define AGENT_SO_NAME "libtptrace_agent.so"
#define RTLD_NOW_ 2

struct gpu_session {
	int pid;
	struct agent_control *ctl;
	size_t map_size;
	bool injected, detached;
	uint64_t handle;		/* dlopen handle in the target */
	uint64_t stop_fn;		/* tptrace_agent_stop in the target */
	int timeout_ms;
	struct gpu_stats st;
	uint64_t delivered_ns;		/* activity that ended before this is drained */
	struct clock_fit *clock;	/* CUPTI's GPU-record clock -> CLOCK_MONOTONIC */
	uint32_t clock_taken;		/* agent clock samples fed to it */
	uint32_t clock_lost;		/* overwritten in the agent before they were read */
	char *long_name;		/* assembled name of the record being delivered */
	size_t long_cap;
	char err[512];
};

/* What gpu__poll hands out: the record, then what gpu__record_name needs. */
struct gpu_record_ext {
	struct agent_record r;
	const char *long_name;
};


/* ---- target inspection --------------------------------------------------------------- */

static bool maps_have(int pid, const char *const *needles, size_t n)
{
	struct procmaps *maps = procmaps__load(pid);
	bool found = false;

	if (!maps)
		return false;
	for (size_t i = 0; i < maps->nr && !found; i++) {
		const char *p = maps->vmas[i].path, *base;

		if (!p)
			continue;
		base = strrchr(p, '/');
		base = base ? base + 1 : p;
		for (size_t k = 0; k < n && !found; k++)
			found = strstr(base, needles[k]) != NULL;
	}
	procmaps__free(maps);
	return found;
}

/* Whether pid maps the agent (the "unloaded" check). */
static bool maps_have_agent(int pid)
{
	/* memfd copies show as "/memfd:libtptrace_agent.so (deleted)", file copies as
	 * /dev/shm/tptrace-agent-<pid>.so, the resident one under its own name */
	static const char *const agent[] = { "libtptrace_agent", "tptrace-agent-" };

	return maps_have(pid, agent, 2);
}

/* CUPTI works through the driver: without libcuda.so.1 mapped (no CUDA at all, or a runtime
 * that has not initialised CUDA yet: libcudart dlopens the driver at its first call) the
 * agent's cuptiSubscribe fails, after it has loaded libcupti and its dependencies for good. */
int gpu__precheck(int pid, char *err, size_t errlen)
{
	static const char *const runtime[] = { "libcudart.so" };
	static const char *const driver[] = { "libcuda.so.1" };
	char maps[64];

	if (procmaps__path(maps, sizeof(maps), pid, "maps"))
		return -ENAMETOOLONG;
	if (access(maps, R_OK)) {
		int r = -errno;

		set_err(err, errlen, "%s: %s", maps, strerror(-r));
		return r;
	}
	if (maps_have(pid, driver, 1) || maps_have_agent(pid))
		return 0;
	if (maps_have(pid, runtime, 1))
		set_err(err, errlen, "process %d has not initialised CUDA (libcudart.so is loaded, "
			"libcuda.so.1 is not in %s) and CUPTI needs the driver: attach after its first "
			"CUDA call; nothing was done to the process", pid, maps);
	else
		set_err(err, errlen, "process %d uses no CUDA (no libcudart.so* or libcuda.so.1 in "
			"%s): no GPU activity to trace; nothing was done to the process", pid, maps);
	return -ENODEV;
}

/* Appends to err which objects the failed attempt left mapped in pid that were not in
 * before (the agent's dependencies stay: the dynamic linker does not unload libraries that
 * libcupti pulled in, and libcupti itself stays loaded once it started). */
static void say_what_stays(int pid, const struct procmaps *before, char *err, size_t errlen)
{
	struct procmaps *after = procmaps__load(pid);
	size_t len = strlen(err);
	int n = 0;

	if (!before || !after) {
		snprintf(err + len, errlen - len, "; what stays mapped in process %d is unknown "
			 "(%s)", pid, strerror(errno ? errno : EIO));
		procmaps__free(after);
		return;
	}
	for (size_t i = 0; i < after->nr; i++) {
		const char *p = after->vmas[i].path;
		bool seen = false;

		if (!p || p[0] == '[')
			continue;
		for (size_t k = 0; k < before->nr && !seen; k++)
			seen = before->vmas[k].path && !strcmp(before->vmas[k].path, p);
		for (size_t k = 0; k < i && !seen; k++)
			seen = after->vmas[k].path && !strcmp(after->vmas[k].path, p);
		if (seen)
			continue;
		len = strlen(err);
		snprintf(err + len, errlen - len, "%s%s", n++ ? ", " : "; left mapped in the "
			 "process (not there before): ", p);
	}
	if (!n) {
		len = strlen(err);
		snprintf(err + len, errlen - len, "; nothing stays mapped in process %d that was "
			 "not there before", pid);
	}
	procmaps__free(after);
}

static int target_uid_gid(int pid, uid_t *uid, gid_t *gid)
{
	char path[64];
	struct stat st;

	if (procmaps__path(path, sizeof(path), pid, ""))
		return -ENAMETOOLONG;
	if (stat(path, &st))
		return -errno;
	*uid = st.st_uid;
	*gid = st.st_gid;
	return 0;
}

static bool same_pid_ns(int pid)
{
	char a[64], b[64], path[64];
	ssize_t na, nb;

	na = readlink("/proc/self/ns/pid", a, sizeof(a));
	if (procmaps__path(path, sizeof(path), pid, "ns/pid"))
		return false;
	nb = readlink(path, b, sizeof(b));
	return na > 0 && na == nb && !memcmp(a, b, na);
}

/* $TPTRACE_AGENT_SO, or next to the running binary (installed, ./tptrace, .output/e2e/x). */
static int find_agent(const char *given, char *out, size_t len)
{
	static const char *const rel[] = {
		"/" AGENT_SO_NAME, "/.output/" AGENT_SO_NAME, "/../" AGENT_SO_NAME,
		"/../lib/tptrace/" AGENT_SO_NAME,
	};
	const char *env = getenv("TPTRACE_AGENT_SO");
	char exe[PATH_MAX - 64], *slash;
	ssize_t n;

	if (given || (env && env[0])) {
		snprintf(out, len, "%s", given ? given : env);
		return access(out, R_OK) ? -errno : 0;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return -errno;
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (slash)
		*slash = '\0';
	for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
		snprintf(out, len, "%s%s", exe, rel[i]);
		if (!access(out, R_OK))
			return 0;
	}
	snprintf(out, len, "%s/%s", exe, AGENT_SO_NAME);
	return -ENOENT;
}

/* ---- control block ------------------------------------------------------------------- */

static void ctl_init(struct agent_control *ctl, uint32_t ring_records, const struct gpu_opts *o)
{
	agent_ctl_init(ctl, ring_records, getpid());
	ctl->flush_period_ms = o->flush_ms;
	if (o->cupti_path)
		snprintf(ctl->cupti_path, sizeof(ctl->cupti_path), "%s", o->cupti_path);
}

static void request(struct gpu_session *s, uint32_t req)
{
	s->ctl->request = req;
	__atomic_store_n(&s->ctl->request_gen, s->ctl->request_gen + 1, __ATOMIC_RELEASE);
}

/* Waits until the agent handled the last request; drains the ring meanwhile when cb is set. */
/* The process exited (gone, or a zombie not reaped yet): its agent will never answer. */
static int wait_ack(struct gpu_session *s, gpu_record_cb cb, void *ctx)
{
	uint64_t end = now_ms() + s->timeout_ms;
	struct agent_control *ctl = s->ctl;

	for (;;) {
		uint32_t st = __atomic_load_n(&ctl->status, __ATOMIC_ACQUIRE);

		if (cb)
			gpu__poll(s, cb, ctx);
		if (__atomic_load_n(&ctl->ack_gen, __ATOMIC_ACQUIRE) == ctl->request_gen ||
		    st == AGENT_ST_REFUSED || st == AGENT_ST_ERROR)
			return 0;
		if (now_ms() > end)
			return -ETIMEDOUT;
		/* waiting for a dead process's agent held every exited target's teardown for
		 * the whole timeout (8 exited targets: 80 s) */
		if (procmaps__gone(s->pid))
			return -ESRCH;
		sleep_ms(5);
	}
}

static int map_fd(struct gpu_session *s, int fd, size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	if (p == MAP_FAILED)
		return -errno;
	s->ctl = p;
	s->map_size = size;
	return 0;
}

/* Feeds the agent's new clock samples to the fit. The agent keeps the last
 * AGENT_CLOCK_SAMPLES: older ones not read in time are lost (counted). */
static void take_clock(struct gpu_session *s)
{
	struct agent_control *ctl = s->ctl;
	uint32_t n = __atomic_load_n(&ctl->nr_clock_samples, __ATOMIC_ACQUIRE);

	if (n - s->clock_taken > AGENT_CLOCK_SAMPLES) {
		s->clock_lost += n - s->clock_taken - AGENT_CLOCK_SAMPLES;
		s->clock_taken = n - AGENT_CLOCK_SAMPLES;
	}
	for (; s->clock_taken < n; s->clock_taken++) {
		struct agent_clock_sample c = ctl->clock[s->clock_taken % AGENT_CLOCK_SAMPLES];

		clock_fit__add(s->clock, c.mono_before_ns, c.mono_after_ns, c.cupti_ns);
	}
}

/* GPU work is timed on the device and converted by CUPTI into its own clock: back to
 * CLOCK_MONOTONIC through the fit; so are stream-wait synchronization records (the sim times
 * them on the stream, tests/gpu/check.sh asks the real one). API records are taken on the
 * CPU through the agent's CLOCK_MONOTONIC callback and stay as they are. */
static void to_host_clock(const struct gpu_session *s, struct agent_record *r)
{
	switch (r->type) {
	case AGENT_REC_KERNEL:
	case AGENT_REC_MEMCPY:
	case AGENT_REC_MEMSET:
	case AGENT_REC_SYNC:
		r->start_ns = clock_fit__to_host(s->clock, r->start_ns);
		r->end_ns = clock_fit__to_host(s->clock, r->end_ns);
		break;
	default:
		break;
	}
}

static void take_stats(struct gpu_session *s)
{
	struct agent_control *ctl = s->ctl;
	struct clock_fit_stats f;

	if (!ctl)
		return;
	s->st.dropped_ring = __atomic_load_n(&ctl->records_dropped, __ATOMIC_RELAXED);
	s->st.dropped_cupti = ctl->cupti_dropped;
	s->st.buffers = ctl->buffers_completed;
	s->st.cupti_version = ctl->cupti_api_version;
	snprintf(s->st.cupti_path, sizeof(s->st.cupti_path), "%s", ctl->cupti_loaded);
	s->st.records_incomplete = ctl->records_incomplete;
	s->st.buffers_cut = ctl->buffers_cut;
	s->st.flushes = ctl->flushes;
	s->st.flushes_partial = ctl->flushes_partial;
	take_clock(s);
	clock_fit__stats(s->clock, &f);
	s->st.clock_samples = f.samples;
	s->st.clock_used = f.used;
	s->st.clock_lost = s->clock_lost;
	s->st.clock_ppm = f.ppm;
	s->st.clock_offset_ns = f.offset_ns;
	s->st.clock_residual_ns = f.residual_ns;
	s->st.clock_window_ns = f.window_ns;
}

/* ---- injection ----------------------------------------------------------------------- */

/* Copies src into a fresh memfd (or, with path, into that file owned by uid/gid). */
static int copy_file(const char *src, const char *dst_path, uid_t uid, gid_t gid)
{
	int in = open(src, O_RDONLY | O_CLOEXEC), out, err = 0;
	struct stat st;
	off_t off = 0;

	if (in < 0)
		return -errno;
	if (fstat(in, &st)) {
		err = -errno;
		close(in);
		return err;
	}
	out = dst_path ? open(dst_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0500) :
			 memfd_create(AGENT_SO_NAME, MFD_CLOEXEC);
	if (out < 0) {
		err = -errno;
		close(in);
		return err;
	}
	while (off < st.st_size) {
		ssize_t n = sendfile(out, in, &off, st.st_size - off);

		if (n <= 0) {
			err = n < 0 ? -errno : -EIO;
			break;
		}
	}
	if (!err && dst_path && fchown(out, uid, gid))
		err = -errno;
	close(in);
	if (err) {
		close(out);
		if (dst_path)
			unlink(dst_path);
		return err;
	}
	return out;
}

/* stop + dlclose the injected agent; checks maps afterwards. */
static int unload(struct gpu_session *s)
{
	struct injector *inj;
	uint64_t ret = 0, zero[6] = { 0 };
	char err[256];
	int r = 0;

	inj = injector__attach(s->pid, err, sizeof(err));
	if (!inj) {
		set_err(s->err, sizeof(s->err), "cannot unload the agent: %s", err);
		return -errno;
	}
	if (s->stop_fn && (r = injector__call(inj, s->stop_fn, zero, &ret)))
		set_err(s->err, sizeof(s->err), "tptrace_agent_stop: %s", injector__error(inj));
	if (!r && (r = injector__dlclose(inj, s->handle)))
		set_err(s->err, sizeof(s->err), "%s", injector__error(inj));
	injector__detach(inj);
	s->handle = 0;
	s->st.unloaded = !maps_have_agent(s->pid);
	if (!r && !s->st.unloaded) {
		set_err(s->err, sizeof(s->err), "agent still mapped in process %d after dlclose",
			s->pid);
		r = -EBUSY;
	}
	return r;
}

static int inject(struct gpu_session *s, const struct gpu_opts *o, const char *agent,
		  char *err, size_t errlen)
{
	uint32_t ring = o->ring_records ? o->ring_records : AGENT_RING_DEFAULT;
	char ctl_target[PATH_MAX] = "", so_target[PATH_MAX] = "";
	char ctl_file[PATH_MAX] = "", so_file[PATH_MAX] = "";
	int ctl_fd = -1, so_fd = -1, r = 0;
	struct injector *inj = NULL;
	uint64_t start_fn = 0, ret = 0;
	bool files = o->file_transport;
	uid_t uid = 0;
	gid_t gid = 0;

	if (ring & (ring - 1)) {
		set_err(err, errlen, "ring size %u is not a power of two", ring);
		return -EINVAL;
	}
	r = target_uid_gid(s->pid, &uid, &gid);
	if (r) {
		set_err(err, errlen, "process %d: %s", s->pid, strerror(-r));
		return r;
	}
	/* the target opens /proc/<us>/fd/N only in our pid namespace and with access to us */
	if (!same_pid_ns(s->pid) || (uid != geteuid() && uid != 0))
		files = true;
	if (files) {
		snprintf(so_target, sizeof(so_target), "/dev/shm/tptrace-agent-%d.so", (int)getpid());
		snprintf(ctl_target, sizeof(ctl_target), "/dev/shm/tptrace-gpu-ctl-%d", (int)getpid());
		procmaps__target_path(so_file, sizeof(so_file), s->pid, so_target);
		procmaps__target_path(ctl_file, sizeof(ctl_file), s->pid, ctl_target);
		unlink(so_file);
		unlink(ctl_file);
		so_fd = copy_file(agent, so_file, uid, gid);
		ctl_fd = open(ctl_file, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (ctl_fd >= 0 && fchown(ctl_fd, uid, gid))
			r = -errno;
	} else {
		so_fd = copy_file(agent, NULL, 0, 0);
		ctl_fd = memfd_create("tptrace-gpu-ctl", MFD_CLOEXEC);
		snprintf(so_target, sizeof(so_target), "/proc/%d/fd/%d", (int)getpid(), so_fd);
		snprintf(ctl_target, sizeof(ctl_target), "/proc/%d/fd/%d", (int)getpid(), ctl_fd);
	}
	if (so_fd < 0 || ctl_fd < 0 || r) {
		r = so_fd < 0 ? so_fd : ctl_fd < 0 ? -errno : r;
		set_err(err, errlen, "preparing the agent for process %d: %s", s->pid, strerror(-r));
		goto out;
	}
	if (ftruncate(ctl_fd, agent_shm_size(ring)) || (r = map_fd(s, ctl_fd, agent_shm_size(ring)))) {
		r = r ?: -errno;
		set_err(err, errlen, "control block: %s", strerror(-r));
		goto out;
	}
	ctl_init(s->ctl, ring, o);
	s->ctl->tracer_pid = getpid();
	request(s, AGENT_REQ_ENABLE);

	inj = injector__attach(s->pid, err, errlen);
	if (!inj) {
		r = -errno;
		goto out;
	}
	r = injector__dlopen(inj, so_target, RTLD_NOW_, &s->handle);
	if (!r)
		r = injector__dlsym(inj, s->handle, "tptrace_agent_start", &start_fn);
	if (!r)
		r = injector__dlsym(inj, s->handle, "tptrace_agent_stop", &s->stop_fn);
	if (!r)
		r = injector__call_str(inj, start_fn, ctl_target, o->cupti_path, NULL, &ret);
	if (r) {
		set_err(err, errlen, "%s", injector__error(inj));
	} else if ((int)ret != 0) {
		r = (int)ret;
		set_err(err, errlen, "tptrace_agent_start in process %d: %s", s->pid, strerror(-r));
	}
	if (r && s->handle) {
		injector__dlclose(inj, s->handle);
		s->handle = 0;
	}
	injector__detach(inj);
	s->injected = !r;
out:
	/* the target holds its own references now (mapping, open file) */
	if (so_file[0])
		unlink(so_file);
	if (ctl_file[0])
		unlink(ctl_file);
	if (so_fd >= 0)
		close(so_fd);
	if (ctl_fd >= 0)
		close(ctl_fd);
	return r;
}

/* The agent is already in the target (CUDA_INJECTION64_PATH): use its control block. */
static int join_resident(struct gpu_session *s, const struct gpu_opts *o, char *err, size_t errlen)
{
	char name[64], path[PATH_MAX];
	struct stat st;
	int fd, r;

	snprintf(name, sizeof(name), "/dev/shm" AGENT_SHM_PREFIX "%d", s->pid);
	procmaps__target_path(path, sizeof(path), s->pid, name);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		set_err(err, errlen, "process %d has the agent loaded but %s: %s", s->pid, path,
			strerror(-r));
		return r;
	}
	r = fstat(fd, &st) ? -errno : 0;
	if (!r)
		r = map_fd(s, fd, st.st_size);
	close(fd);
	if (r) {
		set_err(err, errlen, "mapping %s: %s", path, strerror(-r));
		return r;
	}
	if (!agent_ctl_valid(s->ctl, s->map_size)) {
		set_err(err, errlen, "%s: not a version %d tptrace agent control block", path,
			AGENT_SHM_VERSION);
		return -EPROTO;
	}
	if (s->ctl->tracer_pid && kill(s->ctl->tracer_pid, 0) == 0) {
		set_err(err, errlen, "the agent in process %d is in use by tptrace pid %u", s->pid,
			s->ctl->tracer_pid);
		return -EBUSY;
	}
	s->ctl->tracer_pid = getpid();
	s->ctl->flush_period_ms = o->flush_ms;
	if (o->cupti_path)
		snprintf(s->ctl->cupti_path, sizeof(s->ctl->cupti_path), "%s", o->cupti_path);
	/* records of an earlier session are not ours */
	__atomic_store_n(&s->ctl->tail, __atomic_load_n(&s->ctl->head, __ATOMIC_ACQUIRE),
			 __ATOMIC_RELEASE);
	request(s, AGENT_REQ_ENABLE);
	return 0;
}

struct gpu_session *gpu__attach(int pid, const struct gpu_opts *opts, char *err, size_t errlen)
{
	struct gpu_opts none = { 0 };
	const struct gpu_opts *o = opts ? opts : &none;
	struct procmaps *before = NULL;
	struct gpu_session *s;
	char agent[PATH_MAX];
	int r, e;

	s = calloc(1, sizeof(*s));
	if (s)
		s->clock = clock_fit__new();
	if (!s || !s->clock) {
		free(s);
		set_err(err, errlen, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	s->pid = pid;
	s->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 10000;
	if (kill(pid, 0) && errno == ESRCH) {
		set_err(err, errlen, "no process %d", pid);
		e = ESRCH;
		goto fail;
	}
	if (maps_have_agent(pid)) {
		r = join_resident(s, o, err, errlen);
	} else {
		if (!o->no_cuda_precheck && (r = gpu__precheck(pid, err, errlen))) {
			e = -r;
			goto fail;
		}
		r = find_agent(o->agent_path, agent, sizeof(agent));
		if (r) {
			set_err(err, errlen, "GPU agent %s: %s (set TPTRACE_AGENT_SO)", agent,
				strerror(-r));
			e = -r;
			goto fail;
		}
		/* what the target maps before we touch it: said on failure, see say_what_stays */
		before = procmaps__load(pid);
		r = inject(s, o, agent, err, errlen);
	}
	if (r) {
		e = -r;
		goto fail;
	}
	r = wait_ack(s, NULL, NULL);
	take_stats(s);
	if (r || s->ctl->status != AGENT_ST_ENABLED) {
		uint32_t code = s->ctl->error_code;

		if (r == -ESRCH)
			set_err(err, errlen, "process %d exited before its GPU agent answered",
				pid);
		else if (r)
			set_err(err, errlen, "the GPU agent in process %d did not answer in %d ms "
				"(status %u: %s)", pid, s->timeout_ms, s->ctl->status, s->ctl->message);
		else
			set_err(err, errlen, "GPU agent in process %d %s: %s", pid,
				s->ctl->status == AGENT_ST_REFUSED ? "refused" : "failed",
				s->ctl->message);
		e = r == -ESRCH ? ESRCH : r ? ETIMEDOUT : code == AGENT_E_NO_CUDA ? ENODEV : code == AGENT_E_NO_CUPTI ?
		    ENOENT : code == AGENT_E_OTHER_SUBSCRIBER ? EBUSY : EPERM;
		if (s->injected && !r)
			unload(s);
		else if (!s->injected)
			s->ctl->tracer_pid = 0;
		goto fail;
	}
	s->st.injected = s->injected;
	s->delivered_ns = now_ns();
	procmaps__free(before);
	return s;
fail:
	if (before)	/* the injection was tried: the target was touched */
		say_what_stays(pid, before, err, errlen);
	procmaps__free(before);
	if (s->ctl)
		munmap(s->ctl, s->map_size);
	clock_fit__free(s->clock);
	free(s);
	errno = e;
	return NULL;
}

/* ---- records ------------------------------------------------------------------------- */

const char *gpu__record_name(const struct agent_record *r)
{
	if (r->type == AGENT_REC_KERNEL && (r->flags & AGENT_RECF_NAME_CONT)) {
		const struct gpu_record_ext *x = (const struct gpu_record_ext *)r;

		if (x->long_name)
			return x->long_name;
	}
	return r->name;
}

static void count(struct gpu_session *s, const struct agent_record *r)
{
	s->st.records++;
	switch (r->type) {
	case AGENT_REC_KERNEL: s->st.kernels++; break;
	case AGENT_REC_MEMCPY: s->st.memcpys++; break;
	case AGENT_REC_MEMSET: s->st.memsets++; break;
	case AGENT_REC_SYNC: s->st.syncs++; break;
	case AGENT_REC_RUNTIME_API: s->st.runtime_api++; break;
	case AGENT_REC_DRIVER_API: s->st.driver_api++; break;
	}
}

int gpu__poll(struct gpu_session *s, gpu_record_cb cb, void *ctx)
{
	struct agent_control *ctl = s ? s->ctl : NULL;
	struct agent_record *ring;
	uint64_t head, tail, mask, upto;
	int n = 0;

	if (!ctl)
		return -EINVAL;
	/* read before the head: what that flush delivered is drained below */
	upto = __atomic_load_n(&ctl->flushed_upto_ns, __ATOMIC_ACQUIRE);
	if (upto > s->delivered_ns)
		s->delivered_ns = upto;
	/* samples first: the records below were converted by CUPTI before they were taken */
	take_clock(s);
	ring = agent_ring(ctl);
	mask = ctl->ring_records - 1;
	head = __atomic_load_n(&ctl->head, __ATOMIC_ACQUIRE);
	tail = ctl->tail;
	while (tail < head) {
		struct gpu_record_ext x = { .r = ring[tail & mask] };

		tail++;
		x.r.name[AGENT_NAME_LEN - 1] = '\0';
		if (x.r.type == AGENT_REC_KERNEL_NAME)
			continue;	/* orphan continuation (its kernel was consumed): skip */
		if (x.r.type == AGENT_REC_KERNEL && (x.r.flags & AGENT_RECF_NAME_CONT)) {
			size_t len = strnlen(x.r.name, AGENT_NAME_LEN - 1);

			if (s->long_cap < x.r.name_len + 1) {
				char *p = realloc(s->long_name, x.r.name_len + 1);

				if (!p)
					return -ENOMEM;
				s->long_name = p;
				s->long_cap = x.r.name_len + 1;
			}
			memcpy(s->long_name, x.r.name, len);
			/* continuations were pushed in the same batch: they are below head */
			while (tail < head && ring[tail & mask].type == AGENT_REC_KERNEL_NAME) {
				const struct agent_record *c = &ring[tail & mask];
				size_t part = c->name_len < AGENT_NAME_LEN ? c->name_len : AGENT_NAME_LEN - 1;

				if (len + part > x.r.name_len)
					part = x.r.name_len - len;
				memcpy(s->long_name + len, c->name, part);
				len += part;
				tail++;
			}
			s->long_name[len] = '\0';
			x.long_name = s->long_name;
		}
		to_host_clock(s, &x.r);
		count(s, &x.r);
		if (cb)
			cb(ctx, &x.r);
		n++;
	}
	__atomic_store_n(&ctl->tail, tail, __ATOMIC_RELEASE);
	return n;
}

int gpu__detach(struct gpu_session *s, gpu_record_cb cb, void *ctx)
{
	int r, r2 = 0;

	if (!s || !s->ctl)
		return -EINVAL;
	if (s->detached)
		return 0;
	s->detached = true;
	request(s, AGENT_REQ_DISABLE);
	r = wait_ack(s, cb, ctx);
	if (r == -ESRCH)
		set_err(s->err, sizeof(s->err), "process %d exited before its GPU agent "
			"disabled", s->pid);
	else if (r)
		set_err(s->err, sizeof(s->err), "the GPU agent in process %d did not disable in "
			"%d ms (status %u)", s->pid, s->timeout_ms, s->ctl->status);
	gpu__poll(s, cb, ctx);
	take_stats(s);
	if (s->injected) {
		r2 = unload(s);
	} else {
		s->ctl->tracer_pid = 0;
		s->st.unloaded = false;	/* resident: stays by design */
	}
	munmap(s->ctl, s->map_size);
	s->ctl = NULL;
	return r ? r : r2;
}

uint64_t gpu__delivered_ns(const struct gpu_session *s)
{
	return s->delivered_ns;
}

void gpu__stats(const struct gpu_session *s, struct gpu_stats *out)
{
	if (s->ctl)
		take_stats((struct gpu_session *)s);
	*out = s->st;
}

const char *gpu__error(const struct gpu_session *s)
{
	return s ? s->err : "";
}

void gpu__free(struct gpu_session *s)
{
	if (!s)
		return;
	if (s->ctl && !s->detached)
		gpu__detach(s, NULL, NULL);
	free(s->long_name);
	clock_fit__free(s->clock);
	free(s);
}
