// SPDX-License-Identifier: MIT
#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include "attach.h"
#include "cuda.h"
#include "cuda_api.h"
#include "demangle.h"
#include "elfsym.h"
#include "growbuf.h"
#include "nccl_api.h"
#include "log.h"
#include "procmaps.h"
#include "target.h"
#include "util.h"

/* Libraries that never hold a CUDA runtime or kernel stubs: not worth reading their symbols. */
static const char *const skip_libs[] = {
	"libc.so", "libm.so", "libstdc++.so", "libgcc_s.so", "libpthread.so", "libdl.so",
	"librt.so", "libz.so", "libpython", "libutil.so", "libffi.so", "libexpat.so",
	"libcrypto.so", "libssl.so", "libbz2.so", "liblzma.so", "libuuid.so", "libtinfo.so",
	"libncursesw.so", "libreadline.so", "libsqlite3.so", "libgomp.so", "libelf.so",
	"libbpf.so", "libcap.so", "libselinux.so", "libpcre",
};

struct handle_static {
	uint64_t addr;		/* runtime address of the stub's __handle static */
	char *name;		/* demangled kernel name */
};

struct target {
	int pid;
	int pidfd;		/* -1 when pidfd_open is unavailable */
	char comm[32];
	char *cmdline;
	int rank, world_size, local_rank;	/* -1 when not in the environment */
	char *alloc_conf;	/* PYTORCH_CUDA_ALLOC_CONF (or PYTORCH_ALLOC_CONF), NULL if unset */
	struct procmaps *maps;
	struct target_obj *objs;
	int nr_objs;
	struct probe_links links;	/* the probes of target__scan */
	int nr_probes;		/* uprobes attached (entry + return) */
	int nr_cudart;		/* objects with a CUDA runtime */
	int nr_nccl;		/* objects with NCCL */
	int nr_driver;		/* objects that are the CUDA driver */
	int exit_code;		/* wait status from the exit tracepoint, -1 unknown */
	int attach_errors;
	int nr_stub_funcs;	/* nvcc device stub functions seen in the symbol tables */
	bool want_caller2;	/* some stubs have no readable __handle static */
	int nr_aliased;		/* APIs left unprobed: a tail jump to another probed API */
	bool exited;
	uint64_t exit_ns;
	struct u64map handle_names;	/* cudaKernel_t -> char* (demangled) */
	struct u64map handle_src;	/* cudaKernel_t -> const char* source tag */
	struct u64map addr_names;	/* code address -> struct sym_entry* */
	uint64_t last_static_scan_ns;
};

struct target_priv {
	struct handle_static *statics;
	int nr_statics, cap_statics;
};

static struct target_priv *priv(struct target *t);

static uint64_t makedev_of(const struct vma *v)
{
	return ((uint64_t)v->dev_major << 32) | v->dev_minor;
}

/* What a code address resolved to, cached per address. */
struct sym_entry {
	uint64_t start;		/* runtime address of the function */
	const char *kernel;	/* an nvcc device stub's kernel (in name[]), NULL otherwise */
	char name[];		/* demangled function; "" when unknown */
};

static int read_file(const char *path, char *buf, size_t size, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t n = 0;
	ssize_t r;

	if (fd < 0)
		return -errno;
	while (n < size - 1 && (r = read(fd, buf + n, size - 1 - n)) > 0)
		n += r;
	if (r < 0 && n == 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	close(fd);
	buf[n] = '\0';
	if (len)
		*len = n;
	return 0;
}

/* RANK/WORLD_SIZE/LOCAL_RANK and the allocator's settings from an environ blob
 * ("K=V\0K=V\0..."). PYTORCH_CUDA_ALLOC_CONF wins over the newer PYTORCH_ALLOC_CONF. */
static void parse_environ(struct target *t, const char *env, size_t len)
{
	const char *p = env, *end = env + len, *conf = NULL;

	while (p < end && *p) {
		size_t l = strnlen(p, end - p);

		if (!strncmp(p, "RANK=", 5))
			t->rank = atoi(p + 5);
		else if (!strncmp(p, "WORLD_SIZE=", 11))
			t->world_size = atoi(p + 11);
		else if (!strncmp(p, "LOCAL_RANK=", 11))
			t->local_rank = atoi(p + 11);
		else if (!strncmp(p, "PYTORCH_CUDA_ALLOC_CONF=", 24))
			conf = p + 24;
		else if (!strncmp(p, "PYTORCH_ALLOC_CONF=", 19) && !conf)
			conf = p + 19;
		p += l + 1;
	}
	if (conf)
		t->alloc_conf = strndup(conf, end - conf);
}

struct target *target__new(int pid)
{
	struct target *t;
	char path[64], buf[4096];
	size_t len;

	if (pid <= 0) {
		errno = ESRCH;
		return NULL;
	}
	if (kill(pid, 0) && errno == ESRCH)
		return NULL;
	procmaps__path(path, sizeof(path), pid, "maps");
	{
		/* open, not access(): the ptrace-mode check happens at open */
		int fd = open(path, O_RDONLY | O_CLOEXEC);

		if (fd < 0) {
			if (errno == ENOENT)
				errno = ESRCH;
			return NULL;
		}
		close(fd);
	}
	t = calloc(1, sizeof(*t) + sizeof(struct target_priv));
	if (!t)
		return NULL;
	t->pid = pid;
	t->rank = t->world_size = t->local_rank = -1;
	t->exit_code = -1;
	t->pidfd = syscall(SYS_pidfd_open, pid, 0);
	procmaps__path(path, sizeof(path), pid, "comm");
	if (!read_file(path, buf, sizeof(buf), &len)) {
		buf[strcspn(buf, "\n")] = '\0';
		snprintf(t->comm, sizeof(t->comm), "%.31s", buf);
	}
	procmaps__path(path, sizeof(path), pid, "cmdline");
	if (!read_file(path, buf, sizeof(buf), &len)) {
		for (size_t i = 0; i + 1 < len; i++)
			if (!buf[i])
				buf[i] = ' ';
		t->cmdline = strdup(buf);
	}
	{
		char *env = malloc(1 << 20);

		procmaps__path(path, sizeof(path), pid, "environ");
		if (env && !read_file(path, env, 1 << 20, &len))
			parse_environ(t, env, len);
		free(env);
	}
	return t;
}

static struct target_priv *priv(struct target *t)
{
	return (struct target_priv *)(t + 1);
}

void target__free(struct target *t)
{
	struct target_priv *p;

	if (!t)
		return;
	p = priv(t);
	probe_links__destroy(&t->links);
	for (int i = 0; i < t->nr_objs; i++) {
		free(t->objs[i].path);
		free(t->objs[i].open_path);
	}
	free(t->objs);
	for (int i = 0; i < p->nr_statics; i++)
		free(p->statics[i].name);
	free(p->statics);
	u64map__free_values(&t->handle_names);
	u64map__clear(&t->handle_src);
	u64map__free_values(&t->addr_names);
	procmaps__free(t->maps);
	if (t->pidfd >= 0)
		close(t->pidfd);
	free(t->cmdline);
	free(t->alloc_conf);
	free(t);
}

void target__free_all(struct target **ts, int n)
{
	struct probe_links all = {};

	for (int i = 0; i < n; i++)
		if (ts[i])
			probe_links__move(&all, &ts[i]->links);	/* ENOMEM: freed by its target */
	probe_links__destroy(&all);
	for (int i = 0; i < n; i++)
		target__free(ts[i]);
}

bool target__gone(struct target *t)
{
	if (t->exited)
		return true;
	if (t->pidfd >= 0) {
		/* a pidfd polls readable once the process has exited; poll, not select: a
		 * recorder of many processes holds thousands of fds (links), and FD_SET of an
		 * fd >= FD_SETSIZE writes past the fd_set on the stack */
		struct pollfd pfd = { .fd = t->pidfd, .events = POLLIN };

		if (poll(&pfd, 1, 0) > 0)
			t->exited = true;
	} else if (kill(t->pid, 0) && errno == ESRCH) {
		t->exited = true;
	}
	if (t->exited && !t->exit_ns)
		t->exit_ns = now_ns();
	return t->exited;
}

static bool skip_lib(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	for (size_t i = 0; i < sizeof(skip_libs) / sizeof(skip_libs[0]); i++)
		if (!strncmp(base, skip_libs[i], strlen(skip_libs[i])))
			return true;
	return false;
}

static bool is_ld_so(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	return !strncmp(base, "ld-linux", 8) || !strncmp(base, "ld64.so", 7) || !strncmp(base, "ld-musl", 7);
}

/* CUDA 13's __cudaLaunchKernel is `push rbp; mov rbp,rsp; pop rbp; jmp cudaLaunchKernel`:
 * probing both would trap twice per launch and record it twice. A function whose body is
 * only a tail jump to another probed function is left to that function's probe, which sees
 * the same arguments and the same return address. */
static bool tail_jumps_to_probed(struct target_obj *obj, const struct elfsym_sym *sym)
{
	static const uint8_t endbr64[] = { 0xf3, 0x0f, 0x1e, 0xfa };
	static const uint8_t frame[] = { 0x55, 0x48, 0x89, 0xe5, 0x5d };
	uint8_t code[24];
	uint64_t off, target;
	size_t i = 0;
	int32_t rel;
	int fd;

	if (elfsym__vaddr_to_off(obj->es, sym->vaddr, &off))
		return false;
	fd = open(obj->open_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	if (pread(fd, code, sizeof(code), off) != sizeof(code)) {
		close(fd);
		return false;
	}
	close(fd);
	if (!memcmp(code + i, endbr64, sizeof(endbr64)))
		i += sizeof(endbr64);
	if (!memcmp(code + i, frame, sizeof(frame)))
		i += sizeof(frame);
	if (code[i] != 0xe9)
		return false;
	memcpy(&rel, code + i + 1, sizeof(rel));
	target = sym->vaddr + i + 5 + (int64_t)rel;
	for (int id = 0; id < cuda_api_count; id++) {
		const struct elfsym_sym *other = elfsym__find_func(obj->es, cuda_apis[id].symbol);

		if (other && other != sym && other->vaddr == target)
			return true;
	}
	return false;
}

/* The driver: libcuda.so.1, found by file name (the soname is the file's name where the
 * driver is installed, libcuda.so.<version> behind the libcuda.so.1 link) and by what it
 * defines, so libraries that merely import cu* symbols (or dlsym them) are never taken. */
static bool is_driver(const char *path, const struct elfsym *es)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	if (strncmp(base, "libcuda.so", 10) || (base[10] && base[10] != '.'))
		return false;
	/* a driver with something to probe (one of the driver rows) */
	for (int id = 0; id < cuda_api_count; id++)
		if (cuda_apis[id].domain == CUDA_DOM_DRIVER &&
		    elfsym__find_func(es, cuda_apis[id].symbol))
			return true;
	return false;
}

/* A shared libcudart (libcudart.so.13, a wheel's libcudart-<hash>.so.12): every function in it
 * is the runtime. */
static bool is_shared_cudart(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	return !strncmp(base, "libcudart", 9) && strstr(base, ".so");
}

static bool fr_cuda_api(const struct cuda_api *api)
{
	switch (api->kind) {
	case API_EVENT_RECORD:
	case API_EVENT_RECORD_FLAGS:
	case API_EVENT_QUERY:
	case API_EVENT_SYNC:
	case API_STREAM_SYNC:
	case API_DEVICE_SYNC:
		return true;
	default:
		return false;
	}
}

static unsigned classes_of(const struct target_probes *p)
{
	return p->classes ? p->classes : PROBE_CUDA_ALL;
}

/* Attaches a plan with the programs of p, counting into t. Probes added or a negative errno. */
static int attach_plan(struct target *t, struct target_obj *obj, const struct probe_plan *plan,
		       const struct probe_progs *progs)
{
	struct probe_counts counts = {};
	int r = probe_plan__attach(plan, t->pid, progs, &t->links, &counts);

	t->attach_errors += counts.errors;
	if (r > 0) {
		t->nr_probes += r;
		obj->nr_probes += r;
	}
	return r;
}

/* Adds a probe to a plan; an API absent from the object is no error, an unmappable one is. */
static void plan_add(struct target *t, struct probe_plan *plan, const char *symbol,
		     uint64_t cookie, bool ret)
{
	int err = probe_plan__add(plan, symbol, cookie, ret);

	if (err == -ERANGE)
		t->attach_errors++;
}

static int attach_nccl(struct target *t, struct target_obj *obj, const struct target_probes *p)
{
	struct probe_plan *plan = probe_plan__new(obj);
	int n;

	if (!plan)
		return -ENOMEM;
	/* NCCL calls: the return code, and whether a thread is still inside */
	for (int i = 0; i < nccl_api_count; i++)
		plan_add(t, plan, nccl_apis[i].symbol, nccl_api_cookie(i), nccl_api_has_return(i));
	n = attach_plan(t, obj, plan, &(struct probe_progs){ p->entry, p->ret, p->entry_multi,
							p->ret_multi, p->session });
	probe_plan__free(plan);
	return n;
}

static bool want_cuda_api(const struct target_probes *p, const struct cuda_api *api)
{
	unsigned classes = classes_of(p);

	return (classes & PROBE_CUDA_ALL) || ((classes & PROBE_CUDA_SYNC) && fr_cuda_api(api));
}

static int attach_cudart(struct target *t, struct target_obj *obj, const struct target_probes *p)
{
	struct probe_plan *plan = probe_plan__new(obj);
	int n;

	if (!plan)
		return -ENOMEM;
	for (int id = 0; id < cuda_api_count; id++) {
		const struct cuda_api *api = &cuda_apis[id];
		const struct elfsym_sym *sym;

		/* runtime rows in a runtime, driver rows in the driver */
		if ((api->domain == CUDA_DOM_DRIVER) != obj->driver || !want_cuda_api(p, api))
			continue;
		sym = elfsym__find_func(obj->es, api->symbol);
		if (!sym)
			continue;
		if (tail_jumps_to_probed(obj, sym)) {
			t->nr_aliased++;
			continue;
		}
		plan_add(t, plan, api->symbol, cuda_api_cookie(id, t->want_caller2),
			 api->ret || p->all_returns);
	}
	n = attach_plan(t, obj, plan, &(struct probe_progs){ p->entry, p->ret, p->entry_multi,
							p->ret_multi, p->session });
	probe_plan__free(plan);
	return n;
}

static int read_target_u64(struct target *t, uint64_t addr, uint64_t *val)
{
	struct iovec local = { val, sizeof(*val) }, remote = { (void *)(uintptr_t)addr, sizeof(*val) };

	if (process_vm_readv(t->pid, &local, 1, &remote, 1, 0) != sizeof(*val))
		return -errno;
	return 0;
}

struct statics_ctx {
	struct target *t;
	struct target_obj *obj;
};

/* nvcc puts each kernel's handle in a function-local static of its host stub:
 * _ZZ30__device_stub__Z9scale_vecPffiPffiE8__handle. Its symbol names the kernel, its
 * memory holds the handle once __cudaGetKernel ran, before or after we attached. */
static int collect_static(const struct elfsym_sym *sym, void *ctx)
{
	struct statics_ctx *c = ctx;
	struct target_priv *p = priv(c->t);
	char mangled[1024];
	char *name;

	if (!strstr(sym->name, "__device_stub__"))
		return 0;
	if (sym->kind == ELFSYM_FUNC) {
		/* NCCL's own kernels are not launched through cudaLaunchKernel by the app */
		if (!c->obj->nccl)
			c->t->nr_stub_funcs++;
		return 0;
	}
	if (sym->kind != ELFSYM_OBJECT)
		return 0;
	if (cuda_stub_kernel_name(sym->name, "__handle", mangled, sizeof(mangled)))
		return 0;
	name = demangle(mangled);
	if (!name)
		return 0;
	if (ARRAY_RESERVE(p->statics, p->cap_statics, p->nr_statics + 1, 32)) {
		free(name);
		return 1;
	}
	p->statics[p->nr_statics].addr = c->obj->bias + sym->vaddr;
	p->statics[p->nr_statics].name = name;
	p->nr_statics++;
	return 0;
}

/* Re-reads the device stubs' __handle statics from the target's memory (rate limited). */
static int target__scan_handle_statics(struct target *t, struct elfsym_cache *cache, uint64_t now)
{
	struct target_priv *p = priv(t);
	int found = 0;

	if (now && now - t->last_static_scan_ns < 50 * 1000000ULL)
		return 0;
	t->last_static_scan_ns = now ? now : now_ns();
	for (int i = 0; i < p->nr_statics; i++) {
		uint64_t handle = 0;

		if (read_target_u64(t, p->statics[i].addr, &handle) || !handle)
			continue;
		if (u64map__get(&t->handle_names, handle, NULL))
			continue;
		target__set_handle(t, handle, p->statics[i].name, "stub_static");
		found++;
	}
	return found;
}

/* What an ELF object holds (obj->es and obj->path set): the dynamic linker, NCCL, the
 * driver, a CUDA runtime. Counted into t. */
static void classify(struct target *t, struct target_obj *obj)
{
	obj->ld_so = is_ld_so(obj->path) && elfsym__find_func(obj->es, "_dl_debug_state");
	if (obj->ld_so)
		return;
	for (int k = 0; k < nccl_api_count; k++) {
		if (nccl_api_is_marker(nccl_apis[k].symbol) &&
		    elfsym__find_func(obj->es, nccl_apis[k].symbol)) {
			obj->nccl = true;
			break;
		}
	}
	obj->driver = is_driver(obj->path, obj->es);
	if (obj->driver) {
		t->nr_driver++;
		return;
	}
	for (int id = 0; id < cuda_api_count; id++) {
		if (cuda_api_is_marker(cuda_apis[id].symbol) &&
		    elfsym__find_func(obj->es, cuda_apis[id].symbol)) {
			obj->cudart = true;
			break;
		}
	}
	obj->cudart_shared = obj->cudart && is_shared_cudart(obj->path);
	if (obj->cudart)
		t->nr_cudart++;
	if (obj->nccl)
		t->nr_nccl++;
}

static struct target_obj *find_obj(struct target *t, uint64_t dev, uint64_t ino)
{
	for (int i = 0; i < t->nr_objs; i++)
		if (t->objs[i].dev == dev && t->objs[i].ino == ino)
			return &t->objs[i];
	return NULL;
}

static void compute_bias(struct target_obj *obj, const struct procmaps *maps)
{
	for (size_t i = 0; i < maps->nr && !obj->bias_known; i++) {
		const struct vma *v = &maps->vmas[i];
		uint64_t vaddr;

		if (!v->path || makedev_of(v) != obj->dev || v->inode != obj->ino)
			continue;
		if (!elfsym__off_to_vaddr(obj->es, v->offset, &vaddr)) {
			obj->bias = v->start - vaddr;
			obj->bias_known = true;
		}
	}
}

/* Attaches the probes one new object needs. 0.. probes added or a negative errno. */
static int attach_obj(struct target *t, struct target_obj *obj, const struct target_probes *p)
{
	int added = 0, r;

	if (obj->ld_so) {
		struct probe_plan *plan = probe_plan__new(obj);

		if (!plan)
			return -ENOMEM;
		plan_add(t, plan, "_dl_debug_state", 0, false);
		r = attach_plan(t, obj, plan, &(struct probe_progs){ .entry = p->dl_hook,
								.entry_multi = p->dl_hook_multi });
		probe_plan__free(plan);
		return r;
	}
	/* libnccl carries its own static cudart: tracing shows NCCL's CUDA calls inside the
	 * collectives, but the flight recorder must only learn GPU progress from the
	 * application's own event and sync calls, not NCCL's internal ones */
	if (obj->cudart && ((classes_of(p) & PROBE_CUDA_ALL) ||
			    ((classes_of(p) & PROBE_CUDA_SYNC) && !obj->nccl))) {
		r = attach_cudart(t, obj, p);
		if (r < 0)
			return r;
		added += r;
	}
	/* the driver: launches and copies made through it directly (Triton, CUDA graphs from
	 * torch.compile); calls the runtime makes into it are told apart by their return
	 * address (target__addr_in_cudart) */
	if (obj->driver && (classes_of(p) & (PROBE_CUDA_ALL | PROBE_CUDA_SYNC))) {
		r = attach_cudart(t, obj, p);
		if (r < 0)
			return r;
		added += r;
	}
	if (obj->nccl && (classes_of(p) & PROBE_NCCL)) {
		r = attach_nccl(t, obj, p);
		if (r < 0)
			return r;
		added += r;
	}
	return added;
}

int target__scan(struct target *t, struct elfsym_cache *cache, const struct target_probes *p)
{
	struct procmaps *maps = procmaps__load(t->pid);
	int added = 0, err = 0, first_new = t->nr_objs;

	if (!maps)
		return errno == ENOENT ? -ESRCH : -errno;
	/* pass 1: new objects, what they hold, their kernel stubs and __handle statics */
	for (size_t i = 0; i < maps->nr; i++) {
		const struct vma *v = &maps->vmas[i];
		struct target_obj *obj, *objs;
		char path[PATH_MAX + 64];

		if (!v->path || v->path[0] != '/' || v->perms[2] != 'x')
			continue;
		if (find_obj(t, makedev_of(v), v->inode))
			continue;
		objs = realloc(t->objs, (t->nr_objs + 1) * sizeof(*objs));
		if (!objs) {
			err = -ENOMEM;
			break;
		}
		t->objs = objs;
		obj = &t->objs[t->nr_objs++];
		memset(obj, 0, sizeof(*obj));
		obj->dev = makedev_of(v);
		obj->ino = v->inode;
		obj->path = strdup(v->path);
		procmaps__target_path(path, sizeof(path), t->pid, v->path);
		if (v->deleted || access(path, R_OK)) {
			char rel[64];

			snprintf(rel, sizeof(rel), "map_files/%llx-%llx",
				 (unsigned long long)v->start, (unsigned long long)v->end);
			procmaps__path(path, sizeof(path), t->pid, rel);
		}
		obj->open_path = strdup(path);
		if (!obj->path || !obj->open_path) {
			err = -ENOMEM;
			break;
		}
		if (skip_lib(v->path))
			continue;
		obj->es = elfsym_cache__get(cache, obj->open_path);
		if (!obj->es)
			continue;
		compute_bias(obj, maps);
		classify(t, obj);
		if (obj->ld_so || obj->driver)
			continue;
		if (obj->bias_known) {
			struct statics_ctx ctx = { t, obj };

			elfsym__each_prefix(obj->es, "_Z", collect_static, &ctx);
		}
	}
	/* stubs without their __handle statics: names must come from the calling stub, which a
	 * non-inlined launch helper hides one frame up, so launches copy the caller's frame */
	t->want_caller2 = t->nr_stub_funcs > priv(t)->nr_statics;
	/* pass 2: probes */
	for (int i = first_new; i < t->nr_objs && !err; i++) {
		int r;

		/* tptrace fr -a: probed for every process already (target__add_file) */
		if (p->covered && p->covered(p->covered_ctx, t->objs[i].dev, t->objs[i].ino))
			continue;
		r = attach_obj(t, &t->objs[i], p);

		if (r < 0)
			err = r;
		else
			added += r;
	}
	/* a process inside exit() has released its memory: its maps read empty, or, read while
	 * exit() tears them down (the kernel reads them without the mmap lock), in part. The
	 * code mapped before and not replaced since stays: events still in the ring from before
	 * are decoded with it (a driver call inside libcudart is still nested, a kernel still
	 * named) */
	if (maps->nr || !t->maps) {
		if (procmaps__keep_vacated(maps, t->maps)) {
			procmaps__free(maps);
		} else {
			procmaps__free(t->maps);
			t->maps = maps;
		}
	} else {
		procmaps__free(maps);
	}
	target__scan_handle_statics(t, cache, 0);
	return err ? err : added;
}

struct target *target__new_global(void)
{
	struct target *t = calloc(1, sizeof(*t) + sizeof(struct target_priv));

	if (!t)
		return NULL;
	t->pid = -1;
	t->pidfd = -1;
	t->rank = t->world_size = t->local_rank = -1;
	t->exit_code = -1;
	snprintf(t->comm, sizeof(t->comm), "(every process)");
	return t;
}

int target__add_file(struct target *t, struct elfsym_cache *cache, const struct target_probes *p,
		     const char *path, const char *open_path, uint64_t dev, uint64_t ino)
{
	struct target_obj *obj, *objs;
	int r;

	if (find_obj(t, dev, ino))
		return -EEXIST;
	objs = realloc(t->objs, (t->nr_objs + 1) * sizeof(*objs));
	if (!objs)
		return -ENOMEM;
	t->objs = objs;
	obj = &t->objs[t->nr_objs];
	memset(obj, 0, sizeof(*obj));
	obj->dev = dev;
	obj->ino = ino;
	obj->path = strdup(path);
	obj->open_path = strdup(open_path);
	if (!obj->path || !obj->open_path) {
		free(obj->path);
		free(obj->open_path);
		return -ENOMEM;
	}
	t->nr_objs++;
	obj->es = elfsym_cache__get(cache, open_path);
	if (!obj->es)
		return -ENOEXEC;
	classify(t, obj);
	/* never the dynamic linker: its hook would fire in every process on the host */
	if (obj->ld_so || (!obj->nccl && !obj->driver && !obj->cudart_shared))
		return 0;
	r = attach_obj(t, obj, p);
	return r;
}

void target__set_handle(struct target *t, uint64_t handle, const char *name, const char *source)
{
	uint64_t old;
	char *copy;

	if (!handle || !name)
		return;
	copy = strdup(name);
	if (!copy)
		return;
	if (u64map__get(&t->handle_names, handle, &old))
		free((char *)(uintptr_t)old);
	u64map__set(&t->handle_names, handle, (uint64_t)(uintptr_t)copy);
	u64map__set(&t->handle_src, handle, (uint64_t)(uintptr_t)source);
}

const char *target__handle_name(struct target *t, uint64_t handle, const char **source)
{
	uint64_t v, s;

	if (!u64map__get(&t->handle_names, handle, &v))
		return NULL;
	if (source)
		*source = u64map__get(&t->handle_src, handle, &s) ? (const char *)(uintptr_t)s : "";
	return (const char *)(uintptr_t)v;
}

static const struct target_obj *obj_at(struct target *t, uint64_t addr)
{
	const struct vma *v = t->maps ? procmaps__find(t->maps, addr) : NULL;

	if (!v || !v->path)
		return NULL;
	return find_obj(t, makedev_of(v), v->inode);
}

/* The one address -> symbol lookup (kernel names, memory stacks): the object mapping addr, its
 * function there, demangled, cached per address for the target's life. */
static const struct sym_entry *resolve(struct target *t, uint64_t addr)
{
	const struct target_obj *obj;
	const struct elfsym_sym *sym;
	char *name = NULL, *kernel = NULL;
	struct sym_entry *e;
	char mangled[1024];
	size_t len, klen;
	uint64_t v;

	if (!addr)
		return NULL;
	if (u64map__get(&t->addr_names, addr, &v))
		return (const struct sym_entry *)(uintptr_t)v;
	obj = obj_at(t, addr);
	if (!obj || !obj->es || !obj->bias_known)
		return NULL;	/* not cached: the library may be scanned later */
	sym = elfsym__func_at(obj->es, addr - obj->bias);
	if (sym) {
		name = demangle(sym->name);
		if (strstr(sym->name, "__device_stub__") &&
		    !cuda_stub_kernel_name(sym->name, NULL, mangled, sizeof(mangled)))
			kernel = demangle(mangled);
	}
	len = name ? strlen(name) : 0;
	klen = kernel ? strlen(kernel) : 0;
	e = malloc(sizeof(*e) + len + 1 + (kernel ? klen + 1 : 0));
	if (!e) {
		free(name);
		free(kernel);
		return NULL;
	}
	e->start = sym ? obj->bias + sym->vaddr : addr;
	memcpy(e->name, name ? name : "", len + 1);
	e->kernel = NULL;
	if (kernel) {
		memcpy(e->name + len + 1, kernel, klen + 1);
		e->kernel = e->name + len + 1;
	}
	free(name);
	free(kernel);
	u64map__set(&t->addr_names, addr, (uint64_t)(uintptr_t)e);
	return e;
}

int target__sym_at(struct target *t, uint64_t addr, struct target_sym *out)
{
	const struct sym_entry *e;

	memset(out, 0, sizeof(*out));
	out->obj = addr ? obj_at(t, addr) : NULL;
	if (!out->obj)
		return -ENOENT;
	e = resolve(t, addr);
	if (e && e->name[0]) {
		out->name = e->name;
		out->offset = addr - e->start;
	}
	return 0;
}

int target__nccl_func(struct target *t, const char *name, uint64_t *addr)
{
	for (int i = 0; i < t->nr_objs; i++) {
		const struct target_obj *o = &t->objs[i];
		const struct elfsym_sym *sym;

		if (!o->nccl || !o->es || !o->bias_known)
			continue;
		sym = elfsym__find_func(o->es, name);
		if (sym && sym->global) {
			*addr = o->bias + sym->vaddr;
			return 0;
		}
	}
	return -ENOENT;
}

bool target__addr_in_cudart(struct target *t, uint64_t addr)
{
	const struct target_obj *obj = addr ? obj_at(t, addr) : NULL;
	const struct sym_entry *e;

	if (!obj || !obj->cudart)
		return false;
	if (obj->cudart_shared)
		return true;
	/* a static cudart: its API functions keep their names (cuda*, __cuda*), its internals
	 * are local functions named libcudart_static_<hash>. Resolved once per return address
	 * (cached): a process makes its driver calls from a handful of call sites. */
	e = resolve(t, addr);
	if (!e)
		return false;
	return !strncmp(e->name, "cuda", 4) || !strncmp(e->name, "__cuda", 6) ||
	       !strncmp(e->name, "libcudart_static_", 17);
}

bool target__addr_in_nccl(struct target *t, uint64_t addr)
{
	const struct target_obj *obj = addr ? obj_at(t, addr) : NULL;

	return obj && obj->nccl;
}

enum call_nesting target__call_nesting(struct target *t, const struct tp_rec_call *rec)
{
	/* a static cudart inside libnccl.so.2 is the runtime: asked first */
	if (!cuda_api_is_driver(rec->api) || (rec->flags & TP_CALL_STACK_FAULT))
		return CALL_OWN;
	if (target__addr_in_cudart(t, rec->stack[0]))
		return CALL_IN_RUNTIME;
	if (target__addr_in_nccl(t, rec->stack[0]))
		return CALL_IN_NCCL;
	return CALL_OWN;
}

const char *target__symbolize(struct target *t, uint64_t addr)
{
	const struct sym_entry *e = resolve(t, addr);

	if (!e)
		return NULL;
	if (e->kernel && e->kernel[0])
		return e->kernel;
	return e->name[0] ? e->name : NULL;
}

const char *target__stub_kernel(struct target *t, uint64_t addr)
{
	const struct sym_entry *e = resolve(t, addr);

	return e && e->kernel && e->kernel[0] ? e->kernel : NULL;
}

/* cudaLaunchKernel takes a host function or, since CUDA 13, a cudaKernel_t handle
 * (__cudaLaunchKernel tail-jumps into it, see target__scan). Names, best first: a handle seen
 * in __cudaGetKernel or read from a stub's __handle static; the symbol of a host function;
 * the device stub that made the call (its return address, or the caller's when a non-inlined
 * launch helper sits in between). A name found through the caller is remembered for the
 * handle, so later launches of it resolve at the first step. */
void target__kernel_name(struct target *t, struct elfsym_cache *cache,
			 const struct cuda_launch *l, uint64_t now_ns, struct kernel_name *out)
{
	uint64_t first = l->func_or_handle;
	bool maybe_func = !l->by_handle && !l->has_config;

	memset(out, 0, sizeof(*out));
	if (l->driver) {
		/* a CUfunction (or a CUkernel used as one): named by the cuModuleGetFunction,
		 * cuLibraryGetKernel or cuKernelGetFunction call that returned it; a driver
		 * handle is never a host function or a stub's static */
		out->handle = first;
		if (t && first)
			out->name = target__handle_name(t, first, &out->source);
		return;
	}
	if (l->has_config) {
		/* cudaLaunchKernelExC: a function or, like cudaLaunchKernel, a handle */
		out->func = first;
		if (!t || !first)
			return;
		out->name = target__handle_name(t, first, &out->source);
		if (out->name) {
			out->handle = first;
			out->func = 0;
			return;
		}
		out->name = target__stub_kernel(t, first);
		if (!out->name)
			out->name = target__symbolize(t, first);
		out->source = "symbol";
		return;
	}
	if (!t)
		return;
	out->name = target__handle_name(t, first, &out->source);
	if (!out->name && first && l->by_handle) {
		target__scan_handle_statics(t, cache, now_ns);
		out->name = target__handle_name(t, first, &out->source);
	}
	if (out->name) {
		out->handle = first;
	} else if (first && maybe_func) {
		out->name = target__stub_kernel(t, first);
		if (!out->name)
			out->name = target__symbolize(t, first);
		out->source = "symbol";
	}
	if (!out->name && first && maybe_func) {
		/* a handle whose stub ran after the last static scan */
		target__scan_handle_statics(t, cache, now_ns);
		out->name = target__handle_name(t, first, &out->source);
		if (out->name)
			out->handle = first;
	}
	if (!out->name) {
		out->name = target__stub_kernel(t, l->ret_addr);
		if (!out->name)
			out->name = target__stub_kernel(t, l->caller2);
		if (out->name) {
			out->source = "caller";
			out->handle = first;
			if (first)
				target__set_handle(t, first, out->name, "caller");
		}
	}
	if (!out->handle && maybe_func)
		out->func = first;
}

int target__pid(const struct target *t)
{
	return t->pid;
}

const char *target__comm(const struct target *t)
{
	return t->comm;
}

const char *target__cmdline(const struct target *t)
{
	return t->cmdline;
}

int target__rank(const struct target *t)
{
	return t->rank;
}

int target__world_size(const struct target *t)
{
	return t->world_size;
}

int target__local_rank(const struct target *t)
{
	return t->local_rank;
}

const char *target__alloc_conf(const struct target *t)
{
	return t->alloc_conf;
}

struct procmaps *target__maps(const struct target *t)
{
	return t->maps;
}

int target__nr_objs(const struct target *t)
{
	return t->nr_objs;
}

const struct target_obj *target__obj(const struct target *t, int i)
{
	return i >= 0 && i < t->nr_objs ? &t->objs[i] : NULL;
}

void target__counts(const struct target *t, struct target_counts *out)
{
	out->probes = t->nr_probes;
	out->cudart = t->nr_cudart;
	out->nccl = t->nr_nccl;
	out->driver = t->nr_driver;
	out->attach_errors = t->attach_errors;
}

void target__set_exit(struct target *t, int exit_code, uint64_t exit_ns)
{
	t->exit_code = exit_code;
	if (exit_ns)
		t->exit_ns = exit_ns;
}

void target__end(struct target *t, uint64_t ns)
{
	t->exited = true;
	t->exit_ns = ns;
}

bool target__exited(const struct target *t)
{
	return t->exited;
}

int target__exit_code(const struct target *t)
{
	return t->exit_code;
}

