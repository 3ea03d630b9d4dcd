// SPDX-License-Identifier: MIT
/* tptrace fr -a: library files probed for every process, learnt from the kernel (fr_exec.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "cuda.h"
#include "cuda.skel.h"
#include "flightrec.h"
#include "fr_exec.h"
#include "log.h"
#include "procmaps.h"
#include "session.h"
#include "target.h"
#include "util.h"

/* One library file (an inode), probed for every process or, when that failed, per process. */
struct fr_file {
	uint64_t dev, ino;		/* as /proc/PID/maps shows them (target.c's form) */
	char *path;			/* as the first process to map it saw it */
	uint64_t attached;		/* CLOCK_MONOTONIC ns its probes were in place (or failed) */
	bool covered;			/* probed for every process (or nothing to probe) */
	int fd;				/* the file, open: probes are attached through
					 * /proc/self/fd/N, which stays valid when the process
					 * that mapped it exits; -1 none */
};

struct fr_exec {
	struct session_bpf *bpf;
	struct elfsym_cache *cache;
	struct target_probes *probes;
	struct flightrec *fr;
	struct fr_exec_ops ops;
	struct target *global;		/* pid -1: the objects are the files probed system-wide */
	struct fr_file *files;
	int nr_files;
	struct fr_exec_stats st;
};

static struct fr_file *find_file(struct fr_exec *x, uint64_t dev, uint64_t ino)
{
	for (int i = 0; i < x->nr_files; i++)
		if (x->files[i].dev == dev && x->files[i].ino == ino)
			return &x->files[i];
	return NULL;
}

/* target.c leaves an object alone when this says it is probed for every process already */
static bool covered(void *ctx, uint64_t dev, uint64_t ino)
{
	struct fr_file *f = find_file(ctx, dev, ino);

	return f && f->covered;
}

/* The same names bpf/cuda.bpf.c's fr_map takes (lib_kind there). */
static uint32_t lib_kind(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	if (!strncmp(base, "libnccl", 7))
		return TP_MAP_NCCL;
	if (!strncmp(base, "libcudart", 9))
		return TP_MAP_CUDART;
	if (!strncmp(base, "libcuda.so", 10))
		return TP_MAP_DRIVER;
	return 0;
}

static void on_map_cb(void *ctx, const struct tp_rec_map *m);
static void on_exec_cb(void *ctx, const struct tp_rec_exec *e);

static const struct session_sink_ops sink_ops = { .on_map = on_map_cb, .on_exec = on_exec_cb };

struct fr_exec *fr_exec__new(struct session_bpf *b, struct elfsym_cache *cache,
			     struct target_probes *p, struct session *s, struct flightrec *fr,
			     const struct fr_exec_ops *ops)
{
	struct fr_exec *x = calloc(1, sizeof(*x));

	if (!x || !(x->global = target__new_global())) {
		free(x);
		log_error("out of memory\n");
		return NULL;
	}
	x->bpf = b;
	x->cache = cache;
	x->probes = p;
	x->fr = fr;
	x->ops = *ops;
	if (session__add_sink(s, &sink_ops, x, NULL)) {
		target__free(x->global);
		free(x);
		log_error("out of memory\n");
		return NULL;
	}
	p->covered = covered;
	p->covered_ctx = x;
	return x;
}

void fr_exec__free(struct fr_exec *x)
{
	if (!x)
		return;
	target__free(x->global);	/* detaches the system-wide probes */
	for (int i = 0; i < x->nr_files; i++) {
		free(x->files[i].path);
		if (x->files[i].fd >= 0)
			close(x->files[i].fd);
	}
	free(x->files);
	free(x);
}

/* The file v maps in pid, opened: through the process's root (its mount namespace), or by the
 * mapping itself when the file was replaced or deleted, or, once the process has exited (a
 * short-lived process: the kernel's record outlives it), by the same path in ours if that is
 * the same inode. -1 when none of these is it. */
static int open_mapped(int pid, const struct vma *v)
{
	char path[PATH_MAX + 64], rel[64];
	struct stat st;
	int fd = -1;

	if (!v->deleted && !procmaps__target_path(path, sizeof(path), pid, v->path))
		fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		/* replaced or deleted since it was mapped: the mapping still names the inode */
		snprintf(rel, sizeof(rel), "map_files/%llx-%llx", (unsigned long long)v->start,
			 (unsigned long long)v->end);
		if (!procmaps__path(path, sizeof(path), pid, rel))
			fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	if (fd < 0 && !v->deleted && v->path && v->path[0] == '/') {
		fd = open(v->path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0 && (fstat(fd, &st) || st.st_ino != v->inode ||
				major(st.st_dev) != v->dev_major || minor(st.st_dev) != v->dev_minor)) {
			close(fd);
			fd = -1;
		}
	}
	return fd;
}

/* The file behind v (mapped by pid): known, or probed for every process now. mapped_ns: when
 * the kernel saw it mapped (0: found by a /proc scan). NULL when out of memory. */
static struct fr_file *learn_file(struct fr_exec *x, int pid, const struct vma *v, uint64_t mapped_ns)
{
	uint64_t dev = ((uint64_t)v->dev_major << 32) | v->dev_minor;
	struct fr_file *f = find_file(x, dev, v->inode), *n;
	char open_path[PATH_MAX + 64];
	const char *fail;
	uint64_t now;
	int r, fd;

	if (f)
		return f;
	fd = open_mapped(pid, v);
	if (fd >= 0)
		snprintf(open_path, sizeof(open_path), "/proc/self/fd/%d", fd);
	else	/* gone: the attach below fails and says so */
		procmaps__target_path(open_path, sizeof(open_path), pid, v->path);
	n = realloc(x->files, (x->nr_files + 1) * sizeof(*n));
	if (!n) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	x->files = n;
	f = &x->files[x->nr_files];
	memset(f, 0, sizeof(*f));
	f->fd = fd;
	f->dev = dev;
	f->ino = v->inode;
	f->path = strdup(v->path);
	if (!f->path)
		return NULL;
	x->nr_files++;
	/* tests: a file whose path holds this string is refused, as a kernel refusal would be */
	fail = getenv("TPTRACE_TEST_FR_FILE_FAIL");
	if (fail && *fail && strstr(v->path, fail))
		r = -EPERM;
	else
		r = target__add_file(x->global, x->cache, x->probes, v->path, open_path, dev,
				     v->inode);
	now = now_ns();
	f->attached = now;
	if (r < 0) {
		x->st.files_failed++;
		log_error("cannot probe %s for every process: %s; processes mapping it are probed "
			  "one by one\n", v->path, strerror(-r));
		return f;
	}
	f->covered = true;
	if (!r) {
		log_verbose("%s: nothing to probe in it\n", v->path);
		return f;
	}
	x->st.files++;
	if (mapped_ns && now > mapped_ns) {
		x->st.last_attach_ns = now - mapped_ns;
		if (x->st.last_attach_ns > x->st.max_attach_ns)
			x->st.max_attach_ns = x->st.last_attach_ns;
		log_info("probing %s for every process: %d probes, %.1f ms after pid %d mapped it\n",
			 v->path, r, (now - mapped_ns) / 1e6, pid);
	} else {
		log_info("probing %s for every process: %d probes\n", v->path, r);
	}
	return f;
}

int fr_exec__learn_pid(struct fr_exec *x, int pid)
{
	struct procmaps *maps = procmaps__load(pid);
	int added = 0;

	if (!maps)
		return errno == ENOENT ? -ESRCH : -errno;
	for (size_t i = 0; i < maps->nr; i++) {
		const struct vma *v = &maps->vmas[i];
		int before = x->nr_files;

		if (!v->path || v->path[0] != '/' || v->perms[2] != 'x' || !lib_kind(v->path))
			continue;
		learn_file(x, pid, v, 0);
		added += x->nr_files - before;
	}
	procmaps__free(maps);
	return added;
}

void fr_exec__allow_pid(struct fr_exec *x, int pid, bool allow)
{
	int fd = bpf_map__fd(x->bpf->skel->maps.fr_pids);
	__u32 key = pid;
	__u8 one = 1;

	if (allow && bpf_map_update_elem(fd, &key, &one, BPF_ANY))
		log_error("pid %d: cannot let its calls through the filter: %s\n", pid,
			  strerror(errno));
	else if (!allow)
		bpf_map_delete_elem(fd, &key);
}

static void on_map(struct fr_exec *x, const struct tp_rec_map *m)
{
	struct procmaps *maps;
	const struct vma *v;
	struct fr_file *f;
	long fi;

	x->st.maps_seen++;
	maps = procmaps__load(m->pid);
	if (!maps) {
		log_verbose("pid %d mapped %.64s but exited before it was read\n", m->pid, m->name);
		return;
	}
	v = procmaps__find(maps, m->start);
	if (!v || !v->path || v->path[0] != '/' || lib_kind(v->path) != m->kind) {
		/* unmapped again already (a probe of the file by the dynamic linker) */
		log_verbose("pid %d: no mapping of %.64s at 0x%llx any more\n", m->pid, m->name,
			    (unsigned long long)m->start);
		procmaps__free(maps);
		return;
	}
	f = learn_file(x, m->pid, v, m->ts);
	procmaps__free(maps);
	fi = f ? f - x->files : -1;	/* mapped() may learn more files: x->files moves */
	x->ops.mapped(x->ops.ctx, m->pid, m->kind);
	/* mapped before its probes were in place (the first process to map a new file, or
	 * processes that mapped it meanwhile): say what may be missing */
	if (fi >= 0 && x->files[fi].covered && x->files[fi].attached > m->ts)
		flightrec__probes_late(x->fr, m->pid, x->files[fi].path, m->ts, x->files[fi].attached);
}

static void on_map_cb(void *ctx, const struct tp_rec_map *m)
{
	on_map(ctx, m);
}

static void on_exec_cb(void *ctx, const struct tp_rec_exec *e)
{
	struct fr_exec *x = ctx;

	if (flightrec__exec(x->fr, e->pid)) {
		log_info("pid %d called exec: its recording ends here\n", e->pid);
		x->ops.execd(x->ops.ctx, e->pid);
	}
}

void fr_exec__stats(const struct fr_exec *x, struct fr_exec_stats *st)
{
	*st = x->st;
}
