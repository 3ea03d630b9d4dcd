// SPDX-License-Identifier: MIT
/* User stacks of probed calls: per-process setup of the BPF walker and resolution of stack
 * ids into frames (user/core/ustack.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "hashmap.h"
#include "log.h"
#include "procmaps.h"
#include "pyframes.h"
#include "session.h"
#include "ustack.h"
#include "ustack_native.h"

struct ustack_proc {
	int pid;
	struct pyproc *py;	/* NULL: no Python frames (why says why) */
	char python[32];
	char why[200];
	struct bpf_link *code_free;	/* on the code type's deallocator; NULL: not attached */
	struct u64map stacks;	/* id -> struct ustack * */
};

struct ustacks {
	int stacks_fd, procs_fd, counters_fd;
	bool native;
	struct bpf_program *code_free_prog;
	struct native_resolver *nr;	/* native frames: module, symbol, where the chain stops */
	struct u64map procs;	/* pid -> struct ustack_proc * */
	struct ustack_stats stats;
};

struct ustacks *ustacks__new(int stacks_fd, int procs_fd, int counters_fd, bool native)
{
	struct ustacks *u = calloc(1, sizeof(*u));

	if (!u)
		return NULL;
	u->stacks_fd = stacks_fd;
	u->procs_fd = procs_fd;
	u->counters_fd = counters_fd;
	u->native = native;
	if (native && !(u->nr = native_resolver__new(NULL))) {
		free(u);
		return NULL;
	}
	return u;
}

static void free_stack(struct ustack *s)
{
	if (!s)
		return;
	free(s->py);
	free(s->native);
	free(s);
}

static void proc_free(struct ustack_proc *p)
{
	uint64_t v;

	if (!p)
		return;
	for (size_t it = 0; u64map__next(&p->stacks, &it, NULL, &v);)
		free_stack((struct ustack *)(uintptr_t)v);
	u64map__clear(&p->stacks);
	bpf_link__destroy(p->code_free);
	pyframes__free(p->py);
	free(p);
}

static struct ustack_proc *proc_of(const struct ustacks *u, int pid)
{
	uint64_t v;

	if (!u || pid <= 0 || !u64map__get(&u->procs, (uint64_t)pid, &v))
		return NULL;
	return (struct ustack_proc *)(uintptr_t)v;
}

static void ustacks__remove_pid(struct ustacks *u, int pid)
{
	struct ustack_proc *p = proc_of(u, pid);
	uint32_t key = pid;

	if (!p)
		return;
	bpf_map_delete_elem(u->procs_fd, &key);
	if (u->nr)
		native_resolver__forget(u->nr, pid);
	proc_free(p);
	u64map__set(&u->procs, (uint64_t)pid, 0);
}

void ustacks__free(struct ustacks *u)
{
	uint64_t v;

	if (!u)
		return;
	for (size_t it = 0; u64map__next(&u->procs, &it, NULL, &v);)
		proc_free((struct ustack_proc *)(uintptr_t)v);
	u64map__clear(&u->procs);
	native_resolver__free(u->nr);
	free(u);
}

void ustacks__set_code_free_prog(struct ustacks *u, struct bpf_program *prog)
{
	if (u)
		u->code_free_prog = prog;
}

/* Probes the code type's deallocator of p (see ustacks__set_code_free_prog). */
static void watch_code_frees(struct ustacks *u, struct ustack_proc *p)
{
	struct procmaps *maps;
	const struct vma *v;
	char path[4096];
	uint64_t addr;
	int err;

	if (!u->code_free_prog || !p->py)
		return;
	if ((err = pyframes__code_dealloc(p->py, &addr))) {
		log_verbose("pid %d: code deallocator not found (%s): stack ids do not see code "
			    "objects freed\n", p->pid, strerror(-err));
		return;
	}
	maps = procmaps__load(p->pid);
	v = maps ? procmaps__find(maps, addr) : NULL;
	if (v && v->path && procmaps__target_path(path, sizeof(path), p->pid, v->path) >= 0)
		p->code_free = bpf_program__attach_uprobe(u->code_free_prog, false, p->pid, path,
							  addr - v->start + v->offset);
	else if (maps)
		errno = ENOENT;	/* not in a mapped file: the line below must not name a stale errno */
	if (!p->code_free)
		log_verbose("pid %d: cannot probe the code deallocator at 0x%llx: %s\n", p->pid,
			    (unsigned long long)addr, strerror(errno));
	procmaps__free(maps);
}

int ustacks__add_pid(struct ustacks *u, int pid, const char **python, char *why, size_t whysz)
{
	struct tp_ustack_config cfg = { 0 };
	struct ustack_proc *p;
	uint32_t key = pid;
	char err[200] = "";
	int ret = 0;

	if (python)
		*python = NULL;
	if (!u || pid <= 0)
		return -EINVAL;
	ustacks__remove_pid(u, pid);	/* again after an exec: everything anew */
	p = calloc(1, sizeof(*p));
	if (!p || u64map__set(&u->procs, (uint64_t)pid, (uintptr_t)p)) {
		free(p);
		return -ENOMEM;
	}
	p->pid = pid;
	p->py = pyframes__open(pid, err, sizeof(err));
	if (!p->py) {
		/* ENOENT: no CPython; else why err says (unsupported version, unreadable) */
		ret = errno ? -errno : -ENOENT;
		snprintf(p->why, sizeof(p->why), "%s", *err ? err : "no CPython in the process");
		if (ret == -ESRCH)
			goto out;
	} else if (pyframes__bpf_config(p->py, &cfg)) {
		snprintf(p->why, sizeof(p->why), "Python %s: its layout does not fit the BPF walker",
			 pyframes__version(p->py));
		pyframes__free(p->py);
		p->py = NULL;
		memset(&cfg, 0, sizeof(cfg));
		ret = -ENOTSUP;
	} else {
		snprintf(p->python, sizeof(p->python), "%s", pyframes__version(p->py));
		if (python)
			*python = p->python;
	}
	cfg.native = u->native;
	if ((p->py || u->native) && bpf_map_update_elem(u->procs_fd, &key, &cfg, BPF_ANY)) {
		int e = -errno;

		snprintf(p->why, sizeof(p->why), "cannot set up stack capture: %s", strerror(-e));
		ret = e;
	} else {
		watch_code_frees(u, p);
	}
out:
	if (why)
		snprintf(why, whysz, "%s", p->why);
	return ret;
}

const char *ustacks__python(const struct ustacks *u, int pid)
{
	struct ustack_proc *p = proc_of(u, pid);

	return p && p->py ? p->python : NULL;
}

const char *ustacks__why(const struct ustacks *u, int pid)
{
	struct ustack_proc *p = proc_of(u, pid);

	return p && *p->why ? p->why : NULL;
}

/* Python frames of a captured stack, innermost first. */
/* stale: a code object was freed since the stack was stored (the process's code_gen moved):
 * any of its code objects may be another by now, with the same stamp even (its file name
 * string freed and reused too), so none is read. */
static int resolve_py(struct ustacks *u, struct ustack_proc *p, const struct tp_ustack *raw,
		      struct ustack *s, bool stale)
{
	int i, n = raw->nr_py < TP_PY_MAX_FRAMES ? raw->nr_py : TP_PY_MAX_FRAMES;

	if (!n || !p->py)
		return 0;
	s->py = calloc(n, sizeof(*s->py));
	if (!s->py)
		return -ENOMEM;
	pyframes__recheck(p->py);	/* code objects may have been freed and reused since */
	for (i = 0; i < n; i++) {
		struct ustack_frame *f = &s->py[s->nr_py];
		struct py_frame pf;
		int ret = stale ? -ESTALE :
			  pyframes__resolve(p->py, raw->py[i][0], raw->py[i][1], raw->py[i][2], &pf,
					    &f->firstlineno);

		if (ret == 0)
			continue;	/* a frame CPython does not show */
		f->code = raw->py[i][0];
		if (ret < 0) {
			f->unresolved = true;	/* never a guessed name or line */
			u->stats.unresolved_frames++;
		} else {
			f->func = pf.func;
			f->file = pf.file;
			f->line = pf.line;
		}
		s->nr_py++;
	}
	return 0;
}

static int resolve_native(struct ustacks *u, struct ustack_proc *p, const struct tp_ustack *raw,
			  struct ustack *s)
{
	int n = raw->nr_native < TP_NATIVE_MAX_FRAMES ? raw->nr_native : TP_NATIVE_MAX_FRAMES;
	int kept;

	if (!n || !u->nr)
		return 0;
	s->native = calloc(n, sizeof(*s->native));
	if (!s->native)
		return -ENOMEM;
	kept = native_resolver__resolve(u->nr, p->pid, (const uint64_t *)raw->native, n,
					raw->flags, s->native, &s->native_stop);
	if (kept < 0) {	/* the maps cannot be read (gone): addresses only */
		for (int i = 0; i < n; i++) {
			memset(&s->native[i], 0, sizeof(s->native[i]));
			s->native[i].pc = raw->native[i];
		}
		s->native_stop = "the process's mappings could not be read: addresses only";
		kept = n;
	}
	s->nr_native = kept;
	return 0;
}

/* Whether a code object of p was freed since raw was stored. Known only while the
 * deallocator is probed; without the probe the stamps alone guard. */
static bool code_freed_since(const struct ustacks *u, const struct ustack_proc *p,
			     const struct tp_ustack *raw)
{
	struct tp_ustack_config cfg;
	uint32_t key = p->pid;

	if (!p->code_free)
		return false;
	return bpf_map_lookup_elem(u->procs_fd, &key, &cfg) || (uint32_t)cfg.code_gen != raw->code_gen;
}

const struct ustack *ustacks__get(struct ustacks *u, int pid, uint64_t id)
{
	struct ustack_proc *p = proc_of(u, pid);
	struct tp_ustack raw;
	struct ustack *s;
	uint64_t v;

	if (!p || id < TP_USTACK_FIRST_ID)
		return NULL;
	if (u64map__get(&p->stacks, id, &v))
		return (const struct ustack *)(uintptr_t)v;
	if (bpf_map_lookup_elem(u->stacks_fd, &id, &raw) || raw.pid != (uint32_t)pid) {
		u->stats.map_misses++;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->id = id;
	s->pid = pid;
	s->flags = raw.flags;
	if (resolve_py(u, p, &raw, s, code_freed_since(u, p, &raw)) || resolve_native(u, p, &raw, s) ||
	    u64map__set(&p->stacks, id, (uintptr_t)s)) {
		free_stack(s);
		return NULL;
	}
	u->stats.resolved++;
	return s;
}

const struct ustack *ustacks__lookup(void *ctx, int pid, uint64_t id)
{
	return ustacks__get(ctx, pid, id);
}

/* The statuses' two wordings, one table: the short name (the trace's `stack` arg, its
 * metadata) and why frames are missing (the flight recorder's "frames_missing"). */
static const struct {
	const char *name, *why;
} statuses[] = {
	[TP_USTACK_NONE] = { "not captured",
			     "not captured (the process was not set up for Python stacks)" },
	[TP_USTACK_NOPY] = { "no Python thread state",
			     "no Python thread state on the calling thread" },
	[TP_USTACK_LOST] = { "lost: the stack map was full",
			     "stack lost: the BPF stack map was full" },
	[TP_USTACK_FAULT] = { "unreadable: the thread state or first frame could not be read",
			      "the thread state or first frame could not be read" },
};

const char *ustacks__status_name(uint64_t id)
{
	if (id < sizeof(statuses) / sizeof(statuses[0]))
		return statuses[id].name;
	return id < TP_USTACK_FIRST_ID ? "unknown status" : "stack";
}

const char *ustacks__status_why(uint64_t id)
{
	if (id < sizeof(statuses) / sizeof(statuses[0]))
		return statuses[id].why;
	return "unknown stack status";
}

static const char *base_name(const char *path)
{
	const char *b = path ? strrchr(path, '/') : NULL;

	return b ? b + 1 : path ? path : "?";
}

/* Innermost first, at most USTACK_COMPACT_FRAMES Python frames (the python_function slices
 * carry the whole chain), then the innermost native frames after " | ". */
int ustack__compact(const struct ustack *s, char *buf, size_t size)
{
	size_t n = 0;
	int i, shown;

#define PUT(...) do { \
		int w_ = snprintf(buf + (n < size ? n : size), n < size ? size - n : 0, __VA_ARGS__); \
		if (w_ > 0) \
			n += w_; \
	} while (0)
	if (size)
		*buf = 0;
	if (!s)
		return 0;
	shown = s->nr_py < USTACK_COMPACT_FRAMES ? s->nr_py : USTACK_COMPACT_FRAMES;
	for (i = 0; i < shown; i++) {
		const struct ustack_frame *f = &s->py[i];

		if (f->unresolved)
			PUT("%s<unresolved code 0x%llx>", i ? " < " : "", (unsigned long long)f->code);
		else if (f->line <= 0)	/* line unknown: never printed as a line number */
			PUT("%s%s:? %s", i ? " < " : "", base_name(f->file), f->func ? f->func : "?");
		else
			PUT("%s%s:%d %s", i ? " < " : "", base_name(f->file), f->line,
			    f->func ? f->func : "?");
	}
	if (s->nr_py > shown)
		PUT(" < ...(%d more)", s->nr_py - shown);
	if (s->flags & TP_USTACK_PY_TRUNCATED)
		PUT(" < ...(cut at %d)", TP_PY_MAX_FRAMES);
	if (!s->nr_py && (s->flags & TP_USTACK_PY_NOSTATE))
		PUT("<no Python thread state>");
	shown = s->nr_native < USTACK_COMPACT_FRAMES ? s->nr_native : USTACK_COMPACT_FRAMES;
	for (i = 0; i < shown; i++) {
		const struct ustack_frame *f = &s->native[i];

		PUT("%s", i ? " < " : " | ");
		if (f->func)
			PUT("%s", f->func);
		else if (f->file)
			PUT("%s+0x%llx", base_name(f->file), (unsigned long long)f->module_off);
		else
			PUT("0x%llx", (unsigned long long)f->pc);
	}
#undef PUT
	return (int)n;
}

const struct ustack_stats *ustacks__stats(const struct ustacks *u)
{
	static const struct ustack_stats none;

	return u ? &u->stats : &none;
}

int ustacks__counter(const struct ustacks *u, int idx, uint64_t *out)
{
	if (!u || idx < 0 || idx >= TP_USTACK_NR_COUNTERS)
		return -EINVAL;
	return session__percpu_sum(u->counters_fd, (uint32_t)idx, out);
}
