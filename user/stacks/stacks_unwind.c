// SPDX-License-Identifier: MIT
/* Native frames of a ptrace-stopped thread, unwound with elfutils' libdwfl (.eh_frame /
 * .debug_frame CFI, so -fomit-frame-pointer code unwinds), and symbolized: module path,
 * build-id, ELF vaddr, demangled symbol + offset, and whether the symbol is an exported
 * NCCL / CUDA runtime / driver entry point.
 *
 * One Dwfl per snapshot: dwfl_linux_proc_report() reads /proc/PID/maps once, the ELF files
 * are opened lazily (our find_elf: through /proc/PID/root so a container's files are found,
 * else /proc/PID/map_files for deleted ones) and stay open for every sample. We attach with
 * our own thread callbacks (not dwfl_linux_proc_attach): stacks.c stops every thread itself,
 * we read registers (PTRACE_GETREGS) and memory as the tracer thread, and the memory
 * callback is where a return address replaced by a uretprobe trampoline is put back.
 *
 * Return probes (any tool's) replace the word at a probed function's entry SP with the
 * address of the [uprobes] trampoline while the call is pending: every return address
 * libdwfl reads goes through uw_memory_read, which, for a word that is the trampoline,
 * substitutes the original from the thread's pending return instances (uretinst.h, read
 * once per sample while the threads are stopped, and only when a trampoline is met), keyed
 * by the slot's address. A trampoline that cannot be resolved ends the stack with a frame
 * marked unrecoverable; it is never symbolized as an offset into whatever module is near. */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <time.h>
#include <unistd.h>

#include <elfutils/libdwfl.h>

#include "demangle.h"
#include "elfsym.h"
#include "stacks_int.h"
#include "uretinst.h"
#include "util.h"

struct maprange {
	char *path;
	uint64_t start, end;
};

struct modinfo {
	const char *path;	/* interned */
	const char *build_id;	/* interned; "" none; NULL not read */
	uint64_t bias;
	bool have_elf;
	bool is_exe;
	int lib;		/* enum frame_api the library's exports give */
	struct elfsym *es;	/* its symbols, sorted (NULL: libdwfl's lookup instead); owned
				 * by sym_cache */
};

struct unwinder {
	int pid;
	Dwfl *dwfl;
	Dwfl_Callbacks callbacks;
	char *debuginfo_path;
	struct strpool *pool;
	char exe[PATH_MAX];	/* /proc/PID/exe target, " (deleted)" cut */
	struct maprange *maps;	/* first mapping of every file, for map_files */
	int nr_maps;
	struct u64map mods;	/* Dwfl_Module * -> struct modinfo * */
	struct u64map names;	/* Dwfl_Module * ^ vaddr of symbol -> interned demangled name */
	bool attached;
	const char *attach_err;
	/* return probes: the [uprobes] area (its slot 0 is the trampoline); 0 0 none mapped */
	uint64_t uprobes_start, uprobes_end;
	int cur_tid;		/* the thread being unwound, for the memory callback */
	struct uretinst *uret;	/* this sample's pending instances; read when first needed */
	bool uret_tried;	/* read (or failed) in this sample */
	const char *uret_err;	/* interned: why they could not be read */
	uint64_t unresolved_slot;	/* the last slot holding the trampoline with no instance */
	/* executable mappings when the maps were read: a pc outside all of them, with no
	 * [uprobes] area known, may be a trampoline of an area created since (the first uprobe
	 * hit of the process came after unwinder__new): the maps are read again, once a sample */
	struct maprange *xmaps;	/* path unused */
	int nr_xmaps;
	bool maps_rescanned;	/* in this sample */
	struct unwind_stats stats;
};

static void cut_deleted(char *path)
{
	size_t n = strlen(path);
	static const char sfx[] = " (deleted)";

	if (n > sizeof(sfx) - 1 && !strcmp(path + n - (sizeof(sfx) - 1), sfx))
		path[n - (sizeof(sfx) - 1)] = 0;
}

/* The first mapping of every file in /proc/PID/maps: map_files/<start>-<end> opens it even
 * when it was deleted or lives in another mount namespace. */
static int read_maps(struct unwinder *uw)
{
	char path[64], line[PATH_MAX + 128];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", uw->pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long start, end;
		int name_at = 0;
		char *name;

		char perms[8] = "";
		bool perms_x;

		if (sscanf(line, "%llx-%llx %7s %*s %*s %*s %n", &start, &end, perms, &name_at) < 3 ||
		    !name_at)
			continue;
		perms_x = perms[2] == 'x';
		name = line + name_at;
		name[strcspn(name, "\n")] = 0;
		if (!strcmp(name, "[uprobes]")) {
			/* tests: as if the area came after this read */
			if (getenv("TPTRACE_TEST_UPROBES_UNSEEN"))
				continue;
			uw->uprobes_start = start;
			uw->uprobes_end = end;
		}
		if (perms_x) {
			struct maprange *x = realloc(uw->xmaps, (uw->nr_xmaps + 1) * sizeof(*x));

			if (x) {
				uw->xmaps = x;
				x[uw->nr_xmaps++] = (struct maprange){ .start = start, .end = end };
			}
		}
		if (name[0] != '/')
			continue;
		cut_deleted(name);
		if (uw->nr_maps && !strcmp(uw->maps[uw->nr_maps - 1].path, name))
			continue;
		struct maprange *m = realloc(uw->maps, (uw->nr_maps + 1) * sizeof(*m));
		if (!m)
			break;
		uw->maps = m;
		m[uw->nr_maps].path = strdup(name);
		if (!m[uw->nr_maps].path)
			break;
		m[uw->nr_maps].start = start;
		m[uw->nr_maps].end = end;
		uw->nr_maps++;
	}
	fclose(f);
	return 0;
}

static int find_elf(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
		    char **file_name, Elf **elfp)
{
	struct unwinder *uw = *userdata;
	char path[PATH_MAX + 64], name[PATH_MAX];
	int fd;

	if (!uw || modname[0] != '/')
		return dwfl_linux_proc_find_elf(mod, userdata, modname, base, file_name, elfp);
	snprintf(name, sizeof(name), "%s", modname);
	cut_deleted(name);
	snprintf(path, sizeof(path), "/proc/%d/root%s", uw->pid, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	for (int i = 0; fd < 0 && i < uw->nr_maps; i++) {
		if (strcmp(uw->maps[i].path, name))
			continue;
		snprintf(path, sizeof(path), "/proc/%d/map_files/%llx-%llx", uw->pid,
			 (unsigned long long)uw->maps[i].start, (unsigned long long)uw->maps[i].end);
		fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	if (fd < 0)
		return -1;
	*file_name = strdup(path);
	*elfp = NULL;
	return fd;
}

static int set_userdata(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr start,
			void *arg)
{
	*userdata = arg;
	return DWARF_CB_OK;
}

/* Opens every module's ELF file and reads its symbol table and CFI now, while the process
 * runs: done lazily, the first sample's stop would pay for it (libc alone: ~ms). */
static struct modinfo *mod_info(struct unwinder *uw, Dwfl_Module *mod);

static int warm_module(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr start,
		       void *arg)
{
	struct modinfo *mi = mod_info(arg, mod);
	Dwarf_Addr bias;

	if (mi && mi->have_elf && !dwfl_module_eh_cfi(mod, &bias))
		dwfl_module_dwarf_cfi(mod, &bias);
	return DWARF_CB_OK;
}

static pthread_once_t no_debuginfod_once = PTHREAD_ONCE_INIT;

static void no_debuginfod(void)
{
	unsetenv("DEBUGINFOD_URLS");
}

/* ---- thread callbacks: registers and memory of the ptrace-stopped threads ---- */

static pid_t uw_next_thread(Dwfl *dwfl, void *dwfl_arg, void **thread_argp)
{
	/* only dwfl_getthread_frames is used, through uw_get_thread */
	return 0;
}

static bool uw_get_thread(Dwfl *dwfl, pid_t tid, void *dwfl_arg, void **thread_argp)
{
	*thread_argp = (void *)(intptr_t)tid;
	return true;
}

/* The pending return instances of the process, read at most once per sample, while its
 * threads are stopped: their lists cannot change under the read. */
static void read_uret(struct unwinder *uw)
{
	char err[256];
	uint64_t t0 = now_ns();

	uw->uret_tried = true;
	uw->uret = uretinst__read(uw->pid, err, sizeof(err));
	uw->stats.uret_reads++;
	uw->stats.uret_ns += now_ns() - t0;
	if (!uw->uret)
		uw->uret_err = strpool__add(uw->pool, err);
	uw->stats.instances += uretinst__nr_instances(uw->uret);
}

static bool uw_memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *dwfl_arg)
{
	struct unwinder *uw = dwfl_arg;
	uint64_t word, orig;
	struct iovec local = { &word, sizeof(word) };
	struct iovec remote = { (void *)(uintptr_t)addr, sizeof(word) };

	if (process_vm_readv(uw->pid, &local, 1, &remote, 1, 0) != sizeof(word)) {
		long v;

		errno = 0;
		v = ptrace(PTRACE_PEEKDATA, uw->cur_tid, (void *)(uintptr_t)addr, NULL);
		if (errno)
			return false;
		word = (uint64_t)v;
	}
	/* read now, from a stopped thread: the slot still holds the trampoline */
	if (uw->uprobes_end && word == uw->uprobes_start) {
		if (!uw->uret_tried)
			read_uret(uw);
		if (uw->uret && !uretinst__resolve(uw->uret, uw->cur_tid, addr, &orig)) {
			uw->stats.resolved++;
			word = orig;
		} else {
			uw->unresolved_slot = addr;
		}
	}
	*result = word;
	return true;
}

#if defined(__x86_64__)
static bool uw_set_initial_registers(Dwfl_Thread *thread, void *thread_arg)
{
	struct user_regs_struct r;
	Dwarf_Word regs[17];
	pid_t tid = (pid_t)(intptr_t)thread_arg;

	if (ptrace(PTRACE_GETREGS, tid, NULL, &r))
		return false;
	/* the x86-64 DWARF numbering: rax rdx rcx rbx rsi rdi rbp rsp r8-r15, 16 = the return
	 * address column, which holds the pc of the innermost frame */
	regs[0] = r.rax;
	regs[1] = r.rdx;
	regs[2] = r.rcx;
	regs[3] = r.rbx;
	regs[4] = r.rsi;
	regs[5] = r.rdi;
	regs[6] = r.rbp;
	regs[7] = r.rsp;
	regs[8] = r.r8;
	regs[9] = r.r9;
	regs[10] = r.r10;
	regs[11] = r.r11;
	regs[12] = r.r12;
	regs[13] = r.r13;
	regs[14] = r.r14;
	regs[15] = r.r15;
	regs[16] = r.rip;
	if (!dwfl_thread_state_registers(thread, 0, 17, regs))
		return false;
	dwfl_thread_state_register_pc(thread, r.rip);
	return true;
}

static const Dwfl_Thread_Callbacks thread_callbacks = {
	.next_thread = uw_next_thread,
	.get_thread = uw_get_thread,
	.memory_read = uw_memory_read,
	.set_initial_registers = uw_set_initial_registers,
};
#endif

/* A 64-bit process: our register mapping is x86-64's (a 32-bit one has i386's numbering,
 * which libdwfl's own reader knows). */
static bool is_elf64(int pid)
{
	unsigned char ident[EI_NIDENT];
	char path[64];
	int fd;
	bool yes;

	snprintf(path, sizeof(path), "/proc/%d/exe", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return true;	/* unreadable: taken as x86-64, the common case */
	yes = read(fd, ident, sizeof(ident)) != (ssize_t)sizeof(ident) ||
	      ident[EI_CLASS] != ELFCLASS32;
	close(fd);
	return yes;
}

/* The threads are stopped by stacks.c, not by libdwfl. */
static int attach_state(struct unwinder *uw)
{
#if defined(__x86_64__)
	if (!is_elf64(uw->pid))
		return dwfl_linux_proc_attach(uw->dwfl, uw->pid, true);
	if (!dwfl_attach_state(uw->dwfl, NULL, uw->pid, &thread_callbacks, uw))
		return -1;
	return 0;
#else
	/* no register mapping of ours: libdwfl's own reader, without trampoline recovery */
	return dwfl_linux_proc_attach(uw->dwfl, uw->pid, true);
#endif
}

struct unwinder *unwinder__new(int pid, struct strpool *pool, char *err, size_t errsz)
{
	struct unwinder *uw = calloc(1, sizeof(*uw));
	char path[64];
	ssize_t n;
	int ret;

	if (!uw) {
		snprintf(err, errsz, "out of memory");
		return NULL;
	}
	uw->pid = pid;
	uw->pool = pool;
	/* no network lookups of debug info in the middle of a stop; once per process, as
	 * unsetenv races with getenv in other threads */
	pthread_once(&no_debuginfod_once, no_debuginfod);
	uw->callbacks.find_elf = find_elf;
	uw->callbacks.find_debuginfo = dwfl_standard_find_debuginfo;
	uw->callbacks.debuginfo_path = &uw->debuginfo_path;
	snprintf(path, sizeof(path), "/proc/%d/exe", pid);
	n = readlink(path, uw->exe, sizeof(uw->exe) - 1);
	uw->exe[n > 0 ? n : 0] = 0;
	cut_deleted(uw->exe);
	read_maps(uw);

	uw->dwfl = dwfl_begin(&uw->callbacks);
	if (!uw->dwfl) {
		snprintf(err, errsz, "libdwfl: %s", dwfl_errmsg(-1));
		goto fail;
	}
	dwfl_report_begin(uw->dwfl);
	ret = dwfl_linux_proc_report(uw->dwfl, pid);
	if (ret) {
		snprintf(err, errsz, "reading /proc/%d/maps: %s", pid,
			 ret > 0 ? strerror(ret) : dwfl_errmsg(-1));
		goto fail;
	}
	if (dwfl_report_end(uw->dwfl, NULL, NULL)) {
		snprintf(err, errsz, "libdwfl: %s", dwfl_errmsg(-1));
		goto fail;
	}
	dwfl_getmodules(uw->dwfl, set_userdata, uw, 0);
	ret = attach_state(uw);
	if (ret) {
		snprintf(err, errsz, "libdwfl attach: %s", ret > 0 ? strerror(ret) : dwfl_errmsg(-1));
		goto fail;
	}
	uw->attached = true;
	dwfl_getmodules(uw->dwfl, warm_module, uw, 0);
	/* return probes on the process: the iterator is loaded now, not inside a stop (a failed
	 * load is said again, per frame, when a trampoline is met) */
	if (uw->uprobes_end)
		uretinst__prepare();
	return uw;
fail:
	unwinder__free(uw);
	return NULL;
}

void unwinder__free(struct unwinder *uw)
{
	if (!uw)
		return;
	if (uw->dwfl)
		dwfl_end(uw->dwfl);
	for (int i = 0; i < uw->nr_maps; i++)
		free(uw->maps[i].path);
	free(uw->maps);
	u64map__free_values(&uw->mods);
	u64map__clear(&uw->names);
	uretinst__free(uw->uret);
	free(uw->xmaps);
	free(uw->debuginfo_path);
	free(uw);
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

/* nvcc links cudart statically by default; its entry points then are LOCAL symbols of the
 * executable (the archive hides them), recognized by the archive's own symbols beside them. */
static int found(const struct elfsym_sym *sym, void *ctx)
{
	return 1;
}

static bool has_static_cudart(const struct modinfo *mi, Dwfl_Module *mod)
{
	int n;
	GElf_Sym sym;

	if (mi->es)
		return elfsym__each_prefix(mi->es, "libcudart_static_", found, NULL) > 0;
	n = dwfl_module_getsymtab(mod);
	for (int i = 1; i < n; i++) {
		const char *name = dwfl_module_getsym(mod, i, &sym, NULL);

		if (name && !strncmp(name, "libcudart_static_", 17))
			return true;
	}
	return false;
}

/* Symbol tables shared by every snapshot of this process (the flight recorder takes one per
 * dump; a 1 GB library's table is read once), keyed by build-id. Entries are read-only once
 * opened, so only the lookup is locked. */
static pthread_mutex_t sym_lock = PTHREAD_MUTEX_INITIALIZER;
static struct elfsym_cache *sym_cache;

static struct elfsym *symbols_of(const char *path)
{
	struct elfsym *es = NULL;

	pthread_mutex_lock(&sym_lock);
	if (!sym_cache)
		sym_cache = elfsym_cache__new();
	if (sym_cache)
		es = elfsym_cache__get(sym_cache, path);
	pthread_mutex_unlock(&sym_lock);
	return es;
}

static struct modinfo *mod_info(struct unwinder *uw, Dwfl_Module *mod)
{
	bool created;
	struct modinfo *mi = u64map__get_or_alloc(&uw->mods, (uint64_t)(uintptr_t)mod,
						  sizeof(*mi), &created);
	const unsigned char *bits;
	GElf_Addr vaddr;
	Dwarf_Addr bias = 0;
	const char *name;
	char hex[2 * 64 + 1];
	int len;

	if (!mi || !created)
		return mi;
	name = dwfl_module_info(mod, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
	if (name) {
		char buf[PATH_MAX];

		snprintf(buf, sizeof(buf), "%s", name);
		cut_deleted(buf);
		mi->path = strpool__add(uw->pool, buf);
		mi->is_exe = uw->exe[0] && !strcmp(buf, uw->exe);
	}
	mi->have_elf = dwfl_module_getelf(mod, &bias) != NULL;
	mi->bias = bias;
	if (mi->have_elf) {
		const char *file = NULL, *debug = NULL;

		/* libdwfl's symbol lookup is a linear scan per address (0.188): ours is sorted.
		 * getsymtab makes libdwfl find the separate debug file (libc6-dbg's, by build-id),
		 * whose .symtab names the local functions the stripped file lacks. */
		dwfl_module_getsymtab(mod);
		dwfl_module_info(mod, NULL, NULL, NULL, NULL, NULL, &file, &debug);
		if (debug)
			mi->es = symbols_of(debug);
		if (!mi->es && file)
			mi->es = symbols_of(file);
	}
	if (mi->have_elf) {
		len = dwfl_module_build_id(mod, &bits, &vaddr);
		if (len >= 0) {
			if (len > 64)
				len = 64;
			for (int i = 0; i < len; i++)
				sprintf(hex + 2 * i, "%02x", bits[i]);
			hex[2 * len] = 0;
			mi->build_id = strpool__add(uw->pool, hex);
		}
	}
	mi->lib = FRAME_API_NONE;
	if (mi->path) {
		const char *b = base_name(mi->path);

		if (!strncmp(b, "libnccl", 7))
			mi->lib = FRAME_API_NCCL;
		else if (!strncmp(b, "libcudart", 9))
			mi->lib = FRAME_API_CUDA;
		else if (!strncmp(b, "libcuda.so", 10))
			mi->lib = FRAME_API_DRIVER;
		else if (mi->is_exe && mi->have_elf && has_static_cudart(mi, mod))
			mi->lib = FRAME_API_CUDA;
	}
	return mi;
}

/* The exported entry point a symbol is: a global (or weak) FUNC of the right library whose
 * raw (unmangled C) name has the API's prefix. */
static enum frame_api api_of(const struct modinfo *mi, const char *raw, bool func, bool global)
{
	if (!func)
		return FRAME_API_NONE;
	if (mi->is_exe && mi->lib == FRAME_API_CUDA)
		return !strncmp(raw, "cuda", 4) ? FRAME_API_CUDA : FRAME_API_NONE;
	if (!global)
		return FRAME_API_NONE;
	switch (mi->lib) {
	case FRAME_API_NCCL:
		return !strncmp(raw, "nccl", 4) || !strncmp(raw, "pnccl", 5) ? FRAME_API_NCCL
									     : FRAME_API_NONE;
	case FRAME_API_CUDA:
		return !strncmp(raw, "cuda", 4) ? FRAME_API_CUDA : FRAME_API_NONE;
	case FRAME_API_DRIVER:
		return !strncmp(raw, "cu", 2) ? FRAME_API_DRIVER : FRAME_API_NONE;
	default:
		return FRAME_API_NONE;
	}
}

static void symbolize(struct unwinder *uw, uint64_t pc, struct stack_frame *f, uint8_t *api)
{
	Dwfl_Module *mod = dwfl_addrmodule(uw->dwfl, pc);
	struct modinfo *mi;
	GElf_Off off = 0;
	GElf_Sym sym;
	const char *raw;
	bool is_func, global;

	f->kind = STACK_NATIVE;
	f->pc = pc;
	*api = FRAME_API_NONE;
	if (!mod)
		return;
	mi = mod_info(uw, mod);
	if (!mi)
		return;
	f->module = mi->path;
	f->build_id = mi->build_id;
	/* without the ELF file the load bias is unknown: so is the offset (build_id NULL) */
	if (!mi->have_elf)
		return;
	f->module_off = pc - mi->bias;
	if (mi->es) {
		const struct elfsym_sym *es = elfsym__func_at(mi->es, f->module_off);

		if (!es || !es->name[0])
			return;
		raw = es->name;
		off = f->module_off - es->vaddr;
		is_func = true;
		global = es->global;
	} else {
		raw = dwfl_module_addrinfo(mod, pc, &off, &sym, NULL, NULL, NULL);
		/* a sized symbol that ends before pc is the nearest preceding one, not ours */
		if (!raw || !raw[0] || (sym.st_size && off >= sym.st_size))
			return;
		is_func = GELF_ST_TYPE(sym.st_info) == STT_FUNC;
		global = GELF_ST_BIND(sym.st_info) == STB_GLOBAL || GELF_ST_BIND(sym.st_info) == STB_WEAK;
	}
	uint64_t key = ((uint64_t)(uintptr_t)mod * 31) ^ (pc - off);
	uint64_t val;

	if (!key)
		key = 1;
	if (u64map__get(&uw->names, key, &val)) {
		f->func = (const char *)(uintptr_t)val;
	} else {
		char plain[1024], *dem;

		/* "pthread_cond_wait@@GLIBC_2.3.2" -> "pthread_cond_wait": the name, not the version */
		snprintf(plain, sizeof(plain), "%.*s", (int)strcspn(raw, "@"), raw);
		dem = demangle(plain);
		f->func = strpool__add(uw->pool, dem ? dem : plain);
		free(dem);
		if (f->func)
			u64map__set(&uw->names, key, (uint64_t)(uintptr_t)f->func);
	}
	f->func_off = off;
	*api = api_of(mi, raw, is_func, global);
}

struct walk {
	struct unwinder *uw;
	struct native_stack *ns;
	int max;
	bool stopped;		/* ended on purpose (an unrecoverable frame), err set */
	bool rescan;		/* a pc outside every executable mapping known */
};

static bool in_xmaps(const struct unwinder *uw, uint64_t pc)
{
	for (int i = 0; i < uw->nr_xmaps; i++)
		if (pc >= uw->xmaps[i].start && pc < uw->xmaps[i].end)
			return true;
	return false;
}

/* Looks for a [uprobes] area created since the maps were read (threads stopped: the maps
 * read now are the ones the stacks were built with), and when found gets the reader of its
 * pending returns ready. 0 found, -ENOENT none. */
static int rescan_uprobes(struct unwinder *uw)
{
	char path[64], line[PATH_MAX + 128];
	FILE *f;
	int ret = -ENOENT;

	uw->maps_rescanned = true;
	uw->stats.maps_rescans++;
	snprintf(path, sizeof(path), "/proc/%d/maps", uw->pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long start, end;
		int name_at = 0;

		if (sscanf(line, "%llx-%llx %*s %*s %*s %*s %n", &start, &end, &name_at) < 2 ||
		    !name_at || strncmp(line + name_at, "[uprobes]", 9))
			continue;
		uw->uprobes_start = start;
		uw->uprobes_end = end;
		ret = 0;
		break;
	}
	fclose(f);
	if (!ret)
		uretinst__prepare();
	return ret;
}

/* x86's UPROBE_XOL_SLOT_BYTES: the area's slot 0 is the return trampoline, the others
 * single-step slots */
#define TRAMPOLINE_SLOT_BYTES 128

bool unwinder__in_trampoline(struct unwinder *uw, uint64_t pc)
{
	if (!uw)
		return false;
	if (!uw->uprobes_end && !uw->maps_rescanned && !in_xmaps(uw, pc))
		rescan_uprobes(uw);
	return uw->uprobes_end && pc >= uw->uprobes_start &&
	       pc < uw->uprobes_start + TRAMPOLINE_SLOT_BYTES;
}

void unwinder__stepped_out(struct unwinder *uw)
{
	if (uw)
		uw->stats.stepped_out++;
}

/* A return address the memory callback could not put back (or the thread executing the
 * trampoline itself): one frame says so, and the stack ends there, since every frame past it
 * would be unwound from the wrong code. */
static void unrecoverable_frame(struct walk *w, uint64_t pc, bool activation)
{
	struct unwinder *uw = w->uw;
	struct stack_frame *f = &w->ns->frames[w->ns->nr];

	memset(f, 0, sizeof(*f));
	f->kind = STACK_NATIVE;
	f->pc = pc;
	f->unrecoverable = "uretprobe trampoline";
	w->ns->api[w->ns->nr] = FRAME_API_NONE;
	w->ns->nr++;
	w->ns->truncated = true;
	w->stopped = true;
	uw->stats.unrecoverable++;
	if (activation)
		w->ns->err = strpool__add(uw->pool, "unwind stopped: the thread is in the uretprobe "
					  "trampoline");
	else if (uw->uret_err)
		w->ns->err = strpool__addf(uw->pool, "unwind stopped at a uretprobe trampoline: %s",
					   uw->uret_err);
	else
		w->ns->err = strpool__addf(uw->pool, "unwind stopped at a uretprobe trampoline: no "
					   "pending return instance of thread %d for slot 0x%llx",
					   uw->cur_tid, (unsigned long long)uw->unresolved_slot);
}

static int frame_cb(Dwfl_Frame *state, void *arg)
{
	struct walk *w = arg;
	Dwarf_Addr pc;
	bool activation;

	if (w->ns->nr >= w->max) {
		w->ns->truncated = true;
		return DWARF_CB_ABORT;
	}
	if (!dwfl_frame_pc(state, &pc, &activation))
		return DWARF_CB_ABORT;
	if (!w->uw->uprobes_end && !w->uw->maps_rescanned && !in_xmaps(w->uw, pc)) {
		w->rescan = true;	/* unwinder__thread looks and starts again */
		return DWARF_CB_ABORT;
	}
	if (w->uw->uprobes_end && pc >= w->uw->uprobes_start && pc < w->uw->uprobes_end) {
		unrecoverable_frame(w, pc, activation);
		return DWARF_CB_ABORT;
	}
	/* a return address points after the call: look up the call itself, as eu-stack does */
	if (!activation && pc)
		pc--;
	symbolize(w->uw, pc, &w->ns->frames[w->ns->nr], &w->ns->api[w->ns->nr]);
	w->ns->nr++;
	return DWARF_CB_OK;
}

int unwinder__thread(struct unwinder *uw, int tid, int max, struct native_stack *ns)
{
	struct walk w = { .uw = uw, .ns = ns, .max = max };
	int ret;

	memset(ns, 0, sizeof(*ns));
	ns->frames = calloc(max, sizeof(*ns->frames));
	ns->api = calloc(max, 1);
	if (!ns->frames || !ns->api) {
		ns->err = strpool__add(uw->pool, "out of memory");
		return -ENOMEM;
	}
	uw->cur_tid = tid;
	uw->unresolved_slot = 0;
	ret = dwfl_getthread_frames(uw->dwfl, tid, frame_cb, &w);
	if (w.rescan) {
		/* a trampoline of a [uprobes] area newer than our maps, or just a bad pc: either
		 * way the thread is unwound again, through the area if there is one now */
		rescan_uprobes(uw);
		memset(ns->frames, 0, max * sizeof(*ns->frames));
		memset(ns->api, 0, max);
		ns->nr = 0;
		ns->truncated = false;
		ns->err = NULL;
		w = (struct walk){ .uw = uw, .ns = ns, .max = max };
		uw->unresolved_slot = 0;
		ret = dwfl_getthread_frames(uw->dwfl, tid, frame_cb, &w);
	}
	if (ret == -1 && !ns->truncated && !w.stopped) {
		/* 0 is the end of the stack (the CFI of _start / clone marks no caller); -1 after
		 * some frames means the unwind could not find a caller: cut short */
		const char *msg = dwfl_errmsg(-1);

		if (ns->nr == 0) {
			ns->err = strpool__addf(uw->pool, "unwind failed: %s", msg ? msg : "unknown");
			return -EIO;
		}
		ns->truncated = true;
		ns->err = strpool__addf(uw->pool, "unwind stopped: %s", msg ? msg : "unknown");
	}
	if (ns->truncated && !ns->err)
		ns->err = strpool__addf(uw->pool, "cut at %d frames", max);
	return 0;
}

void unwinder__sample_begin(struct unwinder *uw)
{
	if (!uw)
		return;
	uretinst__free(uw->uret);
	uw->uret = NULL;
	uw->uret_tried = false;
	uw->uret_err = NULL;
	uw->maps_rescanned = false;
}

void unwinder__stats(const struct unwinder *uw, struct unwind_stats *st)
{
	if (uw)
		*st = uw->stats;
	else
		memset(st, 0, sizeof(*st));
}
