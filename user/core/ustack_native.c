// SPDX-License-Identifier: MIT
/* Native frames of BPF-captured stacks: return address -> module + symbol, and the frame-pointer
 * trust rule (user/core/ustack_native.h says why frames past a function without a frame pointer are
 * dropped).
 *
 * Caches, from the hot path outwards:
 *   per pid:  address -> struct nr_frame (module path, ELF address, its function, the CFI's
 *             verdict at the call), so a seen address costs one u64map lookup;
 *             /proc/<pid>/maps read once, again only when an address lies in no mapping (a
 *             library loaded since; a library unmapped and replaced at the same address is not
 *             noticed until native_resolver__forget);
 *   per file (one per parsed ELF, shared by every pid that maps it): function start ->
 *             struct nr_func (demangled name, prologue verdict read from the file once), and
 *             the file's .eh_frame through libdw (opened the first time a prologue says no).
 * Symbols come from elfsym (cached per build-id), paths from procmaps, names from demangle. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <libelf.h>

#include "ustacks.h"	/* bpf/ustacks.h: the BPF walker's flags */
#include "demangle.h"
#include "elfsym.h"
#include "hashmap.h"
#include "procmaps.h"
#include "ustack_native.h"

#define PROLOGUE_READ	64	/* bytes of a function read to judge its prologue */
#define PROLOGUE_MAX_BETWEEN	8	/* instructions between push %rbp and mov %rsp,%rbp */
#define DWARF_RBP	6	/* x86-64 DWARF register numbers */
#define FUNC_KEY_BIT	(1ULL << 63)	/* frame 0: a function address, not a return address */
#define STR_(x)		#x
#define STR(x)		STR_(x)

enum fp_state {
	FP_NOT_READ = 0,
	FP_YES,
	FP_NO,		/* no frame-pointer prologue */
	FP_UNKNOWN,	/* the bytes could not be read; CFI: the file has no .eh_frame entry
			 * for the address */
	FP_END,		/* CFI: the return address is undefined: the thread's first frame
			 * (_start, clone3 mark themselves so) */
};

struct nr_file {
	struct elfsym *es;	/* owned by the elfsym cache */
	char *open_path;	/* how the first pid that mapped it let us open it */
	int fd;			/* for prologues and CFI; -1 not opened yet */
	int open_err;		/* errno of a failed open, 0 none */
	Elf *elf;		/* for cfi */
	Dwarf_CFI *cfi;		/* .eh_frame (.debug_frame); NULL none */
	bool cfi_read;
	struct u64map funcs;	/* sym->vaddr -> struct nr_func * */
};

struct nr_func {
	const struct elfsym_sym *sym;
	char *name;		/* demangled */
	uint8_t fp;		/* enum fp_state */
	bool root;		/* a thread's first function: the chain's real end */
	char *why;		/* the stop line when fp != FP_YES, built on first need */
	char *why_cfi;		/* ... when the CFI confirms: no frame pointer at the call */
};

enum frame_kind {
	FRAME_OK = 1,		/* in a function of an ELF file */
	FRAME_OPAQUE,		/* kept, but nothing tells whether it keeps a frame pointer: no
				 * symbol covers it, anonymous executable memory, unreadable file */
	FRAME_OUTSIDE,		/* in no executable mapping: not a frame */
};

struct nr_frame {
	uint8_t kind;		/* enum frame_kind */
	const char *path;	/* the module's path in the target (owned by the proc's maps) */
	uint64_t module_off;
	struct nr_file *file;
	struct nr_func *func;	/* FRAME_OK */
	uint64_t lookup_vaddr;	/* ELF address of pc - 1 (the call): where the CFI is read */
	uint8_t cfi;		/* enum fp_state of the CFI at the call */
	char *cfi_why;		/* FRAME_OPAQUE with a "no" from the CFI: the stop line */
	char *why;		/* FRAME_OPAQUE, FRAME_OUTSIDE: the stop line */
};

struct nr_proc {
	int pid;
	struct procmaps *maps;
	struct procmaps **old_maps;	/* earlier reads: frames still point at their paths */
	int nr_old_maps;
	struct u64map frames;		/* address (| FUNC_KEY_BIT for frame 0) -> nr_frame * */
	struct u64map vma_files;	/* vma start -> nr_file *: one open per mapping */
};

struct native_resolver {
	struct elfsym_cache *cache;
	bool own_cache;
	struct u64map procs;		/* pid -> struct nr_proc * */
	struct u64map files;		/* (uintptr_t)elfsym -> struct nr_file * */
	struct nr_proc *last;		/* the pid of the previous call */
	struct native_resolver_stats stats;
};

static const char *const roots[] = { "_start", "__clone", "clone", "__clone3", "clone3",
				      "__clone_internal", "thread_start" };

static const char *func_why(const struct nr_func *fn)
{
	return fn->why ? fn->why : "out of memory describing the stop";
}

static const char *frame_why(const struct nr_frame *fr)
{
	return fr->why ? fr->why : "out of memory describing the stop";
}

/* ---- prologue ------------------------------------------------------------------------------ */

/* Length of a ModRM operand (ModRM, SIB, displacement) at p, or 0 when it runs past end. */
static size_t modrm_len(const uint8_t *p, const uint8_t *end)
{
	uint8_t modrm, mod, rm;
	size_t n = 1;

	if (p >= end)
		return 0;
	modrm = p[0];
	mod = modrm >> 6;
	rm = modrm & 7;
	if (mod != 3 && rm == 4) {
		if (p + 1 >= end)
			return 0;
		n++;
		if (mod == 0 && (p[1] & 7) == 5)
			n += 4;
	}
	if (mod == 0 && rm == 5)
		n += 4;		/* rip-relative */
	else if (mod == 1)
		n += 1;
	else if (mod == 2)
		n += 4;
	return p + n <= end ? n : 0;
}

/* The length of the instruction at p when it is one of the forms compilers schedule between
 * push %rbp and mov %rsp,%rbp, and it neither changes rsp nor writes rbp; 0 otherwise. The
 * forms are the register moves and arithmetic GCC emits there for argument setup (-O1..-O3,
 * -Os: movslq, mov, lea, and/add/sub/xor with immediates, mov $imm), seen with objdump. */
static size_t harmless_len(const uint8_t *p, const uint8_t *end)
{
	const uint8_t *start = p;
	uint8_t rex = 0, op, modrm;
	int dest = -1;		/* register written: 0-15, -1 none (or memory) */
	size_t n, imm = 0;

	if (p < end && *p == 0x64)	/* %fs: (the stack protector's canary load) */
		p++;
	if (p < end && (*p & 0xf0) == 0x40)
		rex = *p++;
	if (p >= end)
		return 0;
	op = *p++;
	if (op >= 0xb8 && op <= 0xbf) {		/* mov $imm, reg */
		dest = (op & 7) | (rex & 1) << 3;
		n = rex & 8 ? 8 : 4;
		if (p + n > end || dest == 4 || dest == 5)
			return 0;
		return p + n - start;
	}
	if (op == 0x0f) {
		if (p >= end)
			return 0;
		op = *p++;
		if (op != 0xb6 && op != 0xb7 && op != 0xbe && op != 0xbf)	/* movzx, movsx */
			return 0;
		op = 0x8b;	/* same operand shape: reg <- r/m */
	}
	if (p >= end)
		return 0;
	modrm = *p;
	switch (op) {
	case 0x8b: case 0x03: case 0x2b: case 0x23: case 0x0b: case 0x33: case 0x63:
		dest = (modrm >> 3 & 7) | (rex & 4) << 1;
		break;
	case 0x8d:				/* lea: never a register operand */
		if (modrm >> 6 == 3)
			return 0;
		dest = (modrm >> 3 & 7) | (rex & 4) << 1;
		break;
	case 0x89: case 0x01: case 0x29: case 0x21: case 0x09: case 0x31:
		if (modrm >> 6 == 3)
			dest = (modrm & 7) | (rex & 1) << 3;
		break;
	case 0x85: case 0x39: case 0x3b:	/* test, cmp */
		break;
	case 0x83: case 0x81: case 0xc1: case 0xc7:
		if (op == 0xc7 && (modrm >> 3 & 7) != 0)
			return 0;
		if (op == 0xc1 && (modrm >> 3 & 7) == 6)
			return 0;
		imm = op == 0x81 || op == 0xc7 ? 4 : 1;
		if (modrm >> 6 == 3 && !(op == 0x83 || op == 0x81 ? (modrm >> 3 & 7) == 7 : false))
			dest = (modrm & 7) | (rex & 1) << 3;
		break;
	default:
		return 0;
	}
	if (dest == 4 || dest == 5)
		return 0;
	n = modrm_len(p, end);
	if (!n || p + n + imm > end)
		return 0;
	return p + n + imm - start;
}

static bool is_mov_rsp_rbp(const uint8_t *p, const uint8_t *end)
{
	/* 48 89 e5 (GCC, Clang) or 48 8b ec (the other direction bit, some assemblers) */
	return end - p >= 3 && p[0] == 0x48 &&
	       ((p[1] == 0x89 && p[2] == 0xe5) || (p[1] == 0x8b && p[2] == 0xec));
}

bool native_prologue_sets_fp(const uint8_t *code, size_t len)
{
	const uint8_t *p = code, *end = code + len;
	int between;

	if (len >= 4 && !memcmp(p, "\xf3\x0f\x1e\xfa", 4))	/* endbr64 (-fcf-protection) */
		p += 4;
	if (p >= end || *p != 0x55)				/* push %rbp */
		return false;
	p++;
	for (between = 0; between <= PROLOGUE_MAX_BETWEEN; between++) {
		size_t n;

		if (is_mov_rsp_rbp(p, end))
			return true;
		n = harmless_len(p, end);
		if (!n)
			return false;
		p += n;
	}
	return false;
}

/* ---- files and functions ------------------------------------------------------------------- */

static const char *base_name(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash ? slash + 1 : path;
}

static void file_free(struct nr_file *f)
{
	uint64_t val;

	for (size_t it = 0; u64map__next(&f->funcs, &it, NULL, &val);) {
		struct nr_func *fn = (struct nr_func *)(uintptr_t)val;

		free(fn->name);
		free(fn->why);
		free(fn->why_cfi);
		free(fn);
	}
	u64map__clear(&f->funcs);
	if (f->cfi)
		dwarf_cfi_end(f->cfi);
	if (f->elf)
		elf_end(f->elf);
	if (f->fd >= 0)
		close(f->fd);
	free(f->open_path);
	free(f);
}

static struct nr_file *file_of(struct native_resolver *r, struct elfsym *es, const char *open_path)
{
	struct nr_file *f;
	bool created;

	f = u64map__get_or_alloc(&r->files, (uintptr_t)es, sizeof(*f), &created);
	if (!f || !created)
		return f;
	f->es = es;
	f->fd = -1;
	f->open_path = strdup(open_path);
	if (!f->open_path)
		f->open_err = ENOMEM;
	return f;
}

static int file_open(struct nr_file *f)
{
	if (f->fd < 0 && !f->open_err) {
		f->fd = open(f->open_path, O_RDONLY | O_CLOEXEC);
		if (f->fd < 0)
			f->open_err = errno;
	}
	return f->fd < 0 ? -f->open_err : 0;
}

/* Whether the CFI says rbp is the frame pointer at vaddr: CFA = rbp + 16 and the caller's rbp
 * saved at CFA - 16, i.e. [rbp] = the caller's rbp and [rbp + 8] = the return address, exactly
 * what the walker reads. Exact at every instruction, so it also vouches for functions whose
 * prologue the recogniser does not accept (shrink-wrapped: the push comes after an early
 * exit test) and for functions no symbol names (stripped files keep .eh_frame). */
static enum fp_state read_cfi(struct native_resolver *r, struct nr_file *f, uint64_t vaddr)
{
	Dwarf_Op ops_mem[3], *ops;
	enum fp_state fp = FP_NO;
	Dwarf_Addr start, end;
	Dwarf_Frame *frame;
	bool signalp;
	size_t nops;
	int ra;

	if (!f->cfi_read) {
		f->cfi_read = true;
		if (!file_open(f)) {
			elf_version(EV_CURRENT);
			f->elf = elf_begin(f->fd, ELF_C_READ_MMAP, NULL);
			f->cfi = f->elf ? dwarf_getcfi_elf(f->elf) : NULL;
		}
	}
	if (!f->cfi || dwarf_cfi_addrframe(f->cfi, vaddr, &frame))
		return FP_UNKNOWN;
	r->stats.cfi_checked++;
	ra = dwarf_frame_info(frame, &start, &end, &signalp);
	if (ra >= 0 && !dwarf_frame_register(frame, ra, ops_mem, &ops, &nops) && !nops &&
	    ops == ops_mem) {
		fp = FP_END;
		r->stats.cfi_ends++;
		goto out;
	}
	if (dwarf_frame_cfa(frame, &ops, &nops) || nops != 1 || ops[0].atom != DW_OP_bregx ||
	    ops[0].number != DWARF_RBP || ops[0].number2 != 16)
		goto out;
	/* libdw gives a register saved at CFA + n as [DW_OP_call_frame_cfa, DW_OP_plus_uconst n] */
	if (dwarf_frame_register(frame, DWARF_RBP, ops_mem, &ops, &nops) || nops != 2 ||
	    ops[0].atom != DW_OP_call_frame_cfa || ops[1].atom != DW_OP_plus_uconst ||
	    ops[1].number != (Dwarf_Word)-16)
		goto out;
	fp = FP_YES;
	r->stats.cfi_with_fp++;
out:
	free(frame);
	return fp;
}

static enum fp_state read_prologue(struct native_resolver *r, struct nr_file *f,
				   const struct elfsym_sym *sym)
{
	uint8_t code[PROLOGUE_READ];
	size_t want = sizeof(code);
	uint64_t off;
	ssize_t got;

	if (file_open(f) || elfsym__vaddr_to_off(f->es, sym->vaddr, &off))
		return FP_UNKNOWN;
	if (sym->size && sym->size < want)
		want = sym->size;
	got = pread(f->fd, code, want, off);
	if (got <= 0)
		return FP_UNKNOWN;
	r->stats.functions_checked++;
	if (!native_prologue_sets_fp(code, got))
		return FP_NO;
	r->stats.functions_with_fp++;
	return FP_YES;
}

static struct nr_func *func_of(struct nr_file *f, const struct elfsym_sym *sym)
{
	struct nr_func *fn;
	bool created;

	fn = u64map__get_or_alloc(&f->funcs, sym->vaddr, sizeof(*fn), &created);
	if (!fn || !created)
		return fn;
	fn->sym = sym;
	fn->name = demangle(sym->name);
	for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++)
		fn->root |= !strcmp(sym->name, roots[i]);
	return fn;
}

/* The function's verdict, read once; its stop line built with the first module path seen. */
static enum fp_state func_fp(struct native_resolver *r, struct nr_frame *fr)
{
	struct nr_func *fn = fr->func;
	const char *name = fn->name ? fn->name : fn->sym->name;
	int len;

	if (fn->fp == FP_NOT_READ)
		fn->fp = read_prologue(r, fr->file, fn->sym);
	if (fn->fp == FP_YES || fn->why)
		return fn->fp;
	if (fn->fp == FP_NO)
		len = asprintf(&fn->why, "no frame-pointer prologue in %s (%s)", base_name(fr->path),
			       name);
	else if (fr->file->open_err)
		len = asprintf(&fn->why, "cannot read %s (%s): %s", base_name(fr->path), name,
			       strerror(fr->file->open_err));
	else
		len = asprintf(&fn->why, "cannot tell whether %s (%s) keeps a frame pointer",
			       base_name(fr->path), name);
	if (len < 0)
		fn->why = NULL;
	return fn->fp;
}

/* The CFI's verdict at a frame's call, read once per address. */
static enum fp_state frame_cfi(struct native_resolver *r, struct nr_frame *fr)
{
	if (!fr->file)
		return FP_UNKNOWN;
	if (fr->cfi == FP_NOT_READ)
		fr->cfi = read_cfi(r, fr->file, fr->lookup_vaddr);
	return fr->cfi;
}

/* Why the chain stops after this frame (its function keeps no frame pointer, or nothing
 * tells): the CFI's "no" is the strongest statement, then the prologue's. */
static const char *stop_why(struct nr_frame *fr)
{
	struct nr_func *fn = fr->func;
	char *line = NULL;

	if (fr->cfi != FP_NO)
		return fr->kind == FRAME_OK ? func_why(fn) : frame_why(fr);
	if (fr->kind == FRAME_OK && !fn->why_cfi) {
		if (asprintf(&line, "no frame pointer in %s (%s)", base_name(fr->path),
			     fn->name ? fn->name : fn->sym->name) >= 0)
			fn->why_cfi = line;
	} else if (fr->kind != FRAME_OK && !fr->cfi_why) {
		if (asprintf(&line, "no frame pointer in %s+0x%" PRIx64 " (no symbol)",
			     base_name(fr->path), fr->module_off) >= 0)
			fr->cfi_why = line;
	}
	line = fr->kind == FRAME_OK ? fn->why_cfi : fr->cfi_why;
	return line ? line : "out of memory describing the stop";
}

/* ---- processes ----------------------------------------------------------------------------- */

static void proc_free(struct nr_proc *p)
{
	uint64_t val;

	for (size_t it = 0; u64map__next(&p->frames, &it, NULL, &val);) {
		struct nr_frame *fr = (struct nr_frame *)(uintptr_t)val;

		free(fr->why);
		free(fr->cfi_why);
		free(fr);
	}
	u64map__clear(&p->frames);
	u64map__clear(&p->vma_files);
	for (int i = 0; i < p->nr_old_maps; i++)
		procmaps__free(p->old_maps[i]);
	free(p->old_maps);
	procmaps__free(p->maps);
	free(p);
}

static int proc_read_maps(struct native_resolver *r, struct nr_proc *p)
{
	struct procmaps *maps = procmaps__load(p->pid), **old;

	if (!maps)
		return errno == ENOENT ? -ESRCH : -errno;
	r->stats.maps_reads++;
	if (p->maps) {
		old = realloc(p->old_maps, (p->nr_old_maps + 1) * sizeof(*old));
		if (!old) {
			procmaps__free(maps);
			return -ENOMEM;
		}
		p->old_maps = old;
		old[p->nr_old_maps++] = p->maps;
	}
	p->maps = maps;
	return 0;
}

static struct nr_proc *proc_of(struct native_resolver *r, int pid, int *err)
{
	struct nr_proc *p;
	bool created;

	if (r->last && r->last->pid == pid)
		return r->last;
	p = u64map__get_or_alloc(&r->procs, (uint64_t)pid, sizeof(*p), &created);
	if (!p) {
		*err = -ENOMEM;
		return NULL;
	}
	if (created) {
		p->pid = pid;
		*err = proc_read_maps(r, p);
		if (*err) {
			native_resolver__forget(r, pid);
			return NULL;
		}
	}
	r->last = p;
	return p;
}

/* The file behind an executable mapping, opened through the target's root (its mount
 * namespace), or map_files/ when the file was deleted or is not reachable that way. */
static struct nr_file *file_of_vma(struct native_resolver *r, struct nr_proc *p,
				   const struct vma *v, int *err)
{
	char path[PATH_MAX + 64];
	struct nr_file *f;
	struct elfsym *es;
	uint64_t val;

	if (u64map__get(&p->vma_files, v->start, &val))
		return (struct nr_file *)(uintptr_t)val;
	procmaps__target_path(path, sizeof(path), p->pid, v->path);
	if (v->deleted || access(path, R_OK)) {
		char rel[64];

		snprintf(rel, sizeof(rel), "map_files/%" PRIx64 "-%" PRIx64, v->start, v->end);
		procmaps__path(path, sizeof(path), p->pid, rel);
	}
	es = elfsym_cache__get(r->cache, path);
	if (!es) {
		*err = errno;
		return NULL;
	}
	f = file_of(r, es, path);
	if (f)
		u64map__set(&p->vma_files, v->start, (uint64_t)(uintptr_t)f);
	return f;
}

/* Resolves one address (a return address unless func_addr) of p; cached by address. */
static struct nr_frame *frame_of(struct native_resolver *r, struct nr_proc *p, uint64_t pc,
				 bool func_addr)
{
	/* a return address is looked up at pc - 1, inside its call instruction: a call that ends
	 * a function (to a noreturn callee) must not be given to the next function */
	uint64_t lookup = pc - (func_addr ? 0 : 1), key = func_addr ? pc | FUNC_KEY_BIT : pc;
	const struct elfsym_sym *sym;
	const struct vma *v;
	struct nr_frame *fr;
	uint64_t val, vaddr;
	int err = 0, len;
	bool created;

	if (!key)		/* return address 0: u64map keys are nonzero */
		key = FUNC_KEY_BIT - 1;
	if (u64map__get(&p->frames, key, &val))
		return (struct nr_frame *)(uintptr_t)val;
	fr = u64map__get_or_alloc(&p->frames, key, sizeof(*fr), &created);
	if (!fr)
		return NULL;
	v = procmaps__find(p->maps, lookup);
	if ((!v || v->perms[2] != 'x') && proc_read_maps(r, p) == 0)	/* loaded since? */
		v = procmaps__find(p->maps, lookup);
	if (!v || v->perms[2] != 'x') {
		fr->kind = FRAME_OUTSIDE;
		len = asprintf(&fr->why, "%s 0x%" PRIx64 " outside any executable mapping",
			       func_addr ? "probed address" : "return address", pc);
		goto out;
	}
	fr->path = v->path ? v->path : "[anonymous]";
	fr->module_off = pc - v->start + v->offset;
	if (!v->path || v->path[0] != '/') {
		fr->kind = FRAME_OPAQUE;
		len = asprintf(&fr->why, "0x%" PRIx64 " is in %s executable memory (JIT code?): "
			       "no symbols tell whether it keeps a frame pointer", pc,
			       v->path ? v->path : "anonymous");
		goto out;
	}
	fr->file = file_of_vma(r, p, v, &err);
	if (!fr->file) {
		fr->kind = FRAME_OPAQUE;
		len = asprintf(&fr->why, "cannot read %s: %s", v->path, strerror(err));
		goto out;
	}
	if (!elfsym__off_to_vaddr(fr->file->es, lookup - v->start + v->offset, &vaddr)) {
		fr->module_off = vaddr + (pc - lookup);
		fr->lookup_vaddr = vaddr;
		sym = elfsym__func_at(fr->file->es, vaddr);
	} else {
		sym = NULL;
		fr->cfi = FP_UNKNOWN;	/* no ELF address to read the CFI at */
	}
	if (!sym) {
		fr->kind = FRAME_OPAQUE;
		len = asprintf(&fr->why, "no symbol covers %s+0x%" PRIx64 ": cannot tell whether it "
			       "keeps a frame pointer", base_name(v->path), fr->module_off);
		goto out;
	}
	fr->kind = FRAME_OK;
	fr->func = func_of(fr->file, sym);
	if (!fr->func) {
		fr->kind = FRAME_OPAQUE;
		len = asprintf(&fr->why, "out of memory");
	}
	return fr;
out:
	if (len < 0)
		fr->why = NULL;
	return fr;
}

/* ---- the API ------------------------------------------------------------------------------- */

struct native_resolver *native_resolver__new(struct elfsym_cache *cache)
{
	struct native_resolver *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->cache = cache;
	if (!cache) {
		r->cache = elfsym_cache__new();
		r->own_cache = true;
		if (!r->cache) {
			free(r);
			errno = ENOMEM;
			return NULL;
		}
	}
	return r;
}

void native_resolver__free(struct native_resolver *r)
{
	uint64_t val;

	if (!r)
		return;
	for (size_t it = 0; u64map__next(&r->procs, &it, NULL, &val);)
		proc_free((struct nr_proc *)(uintptr_t)val);
	u64map__clear(&r->procs);
	for (size_t it = 0; u64map__next(&r->files, &it, NULL, &val);)
		file_free((struct nr_file *)(uintptr_t)val);
	u64map__clear(&r->files);
	if (r->own_cache)
		elfsym_cache__free(r->cache);
	free(r);
}

void native_resolver__forget(struct native_resolver *r, int pid)
{
	struct u64map keep = { 0 };
	uint64_t key, val;

	if (!r || pid <= 0)
		return;
	if (r->last && r->last->pid == pid)
		r->last = NULL;
	/* u64map has no delete: rebuild without pid (exec and exit are rare) */
	for (size_t it = 0; u64map__next(&r->procs, &it, &key, &val);) {
		if (key == (uint64_t)pid)
			proc_free((struct nr_proc *)(uintptr_t)val);
		else
			u64map__set(&keep, key, val);
	}
	u64map__clear(&r->procs);
	r->procs = keep;
}

const struct native_resolver_stats *native_resolver__stats(const struct native_resolver *r)
{
	return &r->stats;
}

static void fill(struct ustack_frame *out, const struct nr_frame *fr, uint64_t pc)
{
	memset(out, 0, sizeof(*out));
	out->func = fr->kind == FRAME_OK ? fr->func->name : NULL;
	out->file = fr->path;
	out->pc = pc;
	out->module_off = fr->module_off;
}

int native_resolver__resolve(struct native_resolver *r, int pid, const uint64_t *pcs, int n,
			     uint32_t flags, struct ustack_frame *out, const char **stop)
{
	const char *why = NULL;
	struct nr_proc *p;
	int kept = 0, err = 0;

	*stop = NULL;
	if (!r || pid <= 0 || n < 0 || (n && (!pcs || !out)))
		return -EINVAL;
	if (!n) {
		*stop = flags & TP_USTACK_NATIVE_FAULT ? "the thread's stack could not be read"
						       : "no native frames captured";
		return 0;
	}
	p = proc_of(r, pid, &err);
	if (!p)
		return err;
	for (int k = 0; k < n; k++) {
		struct nr_frame *fr = frame_of(r, p, pcs[k], k == 0);
		enum fp_state fp;

		if (!fr)
			return -ENOMEM;
		if (fr->kind == FRAME_OUTSIDE) {
			why = frame_why(fr);
			break;
		}
		fill(&out[kept++], fr, pcs[k]);
		/* frame 0 is the probed function at its entry, frame 1 the return address at [rsp]:
		 * frame k + 1 >= 2 comes through the rbp of F_k, so F_k must keep a frame pointer */
		if (k == 0) {
			if (n == 1 && (flags & TP_USTACK_NATIVE_FAULT))
				why = "the return address could not be read";
			continue;
		}
		/* the thread's first function (by its CFI, else by name): the real end */
		if (k == n - 1 && (frame_cfi(r, fr) == FP_END ||
				   (fr->kind == FRAME_OK && fr->func->root))) {
			why = NULL;
			break;
		}
		/* the prologue first (read once per function), then the CFI at this call (once
		 * per address): a function without a recognised prologue may still have set rbp
		 * up by the time of the call (shrink-wrapping), and a nameless one may have too */
		fp = fr->kind == FRAME_OK ? func_fp(r, fr) : FP_UNKNOWN;
		if (fp != FP_YES)
			fp = frame_cfi(r, fr);
		if (fp != FP_YES) {
			why = stop_why(fr);
			break;
		}
		if (k < n - 1)
			continue;
		/* the last frame captured, in a function with a frame pointer: the walker's flags
		 * say why it went no further */
		if (flags & TP_USTACK_NATIVE_TRUNCATED) {
			why = "more than " STR(TP_NATIVE_MAX_FRAMES) " native frames: cut at the "
			      "depth limit";
		} else if (flags & TP_USTACK_NATIVE_FAULT) {
			why = "a read of the thread's stack failed";
		} else if (flags & TP_USTACK_NATIVE_LEFT_STACK) {
			why = "the frame-pointer chain left the thread's stack";
		}
	}
	*stop = why;
	return kept;
}
