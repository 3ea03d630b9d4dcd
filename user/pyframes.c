// SPDX-License-Identifier: MIT
/* Python frames of a running CPython 3.9-3.13, read from outside with process_vm_readv.
 *
 * Every address read from the target is untrusted: a read that comes back short is -EFAULT,
 * every chain walk is bounded, every length is capped. Offsets are x86-64, default (GIL,
 * non-debug) builds; they were checked with gdb `ptype /o` against pyenv's libpython builds
 * (which carry DWARF) and, for 3.13, come from the target's own _Py_DebugOffsets. */
#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "elfsym.h"
#include "hashmap.h"
#include "procmaps.h"
#include "pyframes.h"

#define MAX_FRAMES_WALKED	4096	/* a longer chain is a loop or garbage */
#define MAX_THREADS_WALKED	4096
#define MAX_INTERPRETERS	256
#define MAX_STR_BYTES		512	/* names and paths are cut there */
#define MAX_LINETABLE		(1 << 20)
#define TSTATE_CACHE_NS		20000000ULL	/* one burst of calls while the threads are stopped */

enum line_format { LNOTAB_39, LINETABLE_310, LOCATIONS_311 };
enum lasti_kind { LASTI_BYTES, LASTI_UNITS, LASTI_PREV_INSTR, LASTI_INSTR_PTR };

/* Owner values of _PyInterpreterFrame.owner (3.11+). */
#define OWNED_BY_GENERATOR	1
#define OWNED_BY_CSTACK		3	/* 3.12+: the shim frame each _PyEval_EvalFrameDefault pushes */

struct py_layout {
	int rt_interp_head;	/* _PyRuntime.interpreters.head */
	int is_next, is_threads_head;
	int ts_next, ts_thread_id, ts_native_tid;	/* native_thread_id: -1 before 3.11 */
	int ts_frame;		/* tstate->frame (3.9/3.10), ->cframe (3.11/3.12), ->current_frame */
	int cf_current;		/* _PyCFrame.current_frame; -1 when ts_frame is the frame itself */
	int f_back, f_code, f_lasti;	/* f_lasti: f_lasti / prev_instr / instr_ptr */
	int f_is_entry, f_owner;	/* -1 when absent */
	int f_size;		/* bytes read per frame */
	int co_firstlineno, co_filename, co_name, co_qualname, co_linetable;
	int co_code_adaptive, co_firsttraceable;	/* -1 before 3.11 */
	int co_size;		/* bytes read per code object header */
	int ob_type;
	int bytes_size, bytes_sval;	/* PyBytesObject ob_size, ob_sval */
	int str_length, str_state, str_ascii_size, str_compact_size;
	enum line_format lines;
	enum lasti_kind lasti;
};

struct code_info {
	uint64_t filename, name, linetable;	/* the pointers this entry was built from */
	int firstlineno, firsttraceable;
	const char *func, *file;
	uint8_t *table;
	size_t table_len;
};

struct tstate_ref {
	uint64_t addr;
	uint64_t thread_id, native_tid;
};

struct pyproc {
	int pid;
	char version[32];
	int minor;
	struct py_layout L;
	uint64_t runtime;	/* &_PyRuntime in the target */
	uint64_t code_type;	/* &PyCode_Type; 0 unknown */
	struct u64map codes;	/* code object address -> struct code_info * */
	struct u64map strings;	/* fnv hash -> char * (interned, freed at the end) */
	char **extra_strings;	/* strings that collided in the map: kept until free */
	size_t nr_extra;
	struct tstate_ref *tstates;
	size_t nr_tstates;
	uint64_t tstates_at;	/* CLOCK_MONOTONIC ns of the walk, 0 never */
};

static void set_err(char *err, size_t errsz, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errsz)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errsz, fmt, ap);
	va_end(ap);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* 0, -EFAULT on a short or failed read (unmapped, torn), -ESRCH when the process is gone. */
static int rd(const struct pyproc *py, uint64_t addr, void *buf, size_t len)
{
	struct iovec local = { buf, len }, remote = { (void *)(uintptr_t)addr, len };
	ssize_t n;

	if (!addr)
		return -EFAULT;
	n = process_vm_readv(py->pid, &local, 1, &remote, 1, 0);
	if (n == (ssize_t)len)
		return 0;
	if (n < 0 && errno == ESRCH)
		return -ESRCH;
	return -EFAULT;
}

static uint64_t u64_at(const uint8_t *buf, int off)
{
	uint64_t v;

	memcpy(&v, buf + off, sizeof(v));
	return v;
}

static int32_t i32_at(const uint8_t *buf, int off)
{
	int32_t v;

	memcpy(&v, buf + off, sizeof(v));
	return v;
}

/* ---- layouts ---- */

static void layout_common(struct py_layout *L)
{
	L->ob_type = 8;
	L->bytes_size = 16;
	L->bytes_sval = 32;
	L->str_length = 16;
	L->str_state = 32;
	L->ts_next = 8;
	L->is_next = 0;
	L->f_is_entry = -1;
	L->f_owner = -1;
	L->co_qualname = -1;
	L->co_code_adaptive = -1;
	L->co_firsttraceable = -1;
	L->ts_native_tid = -1;
	L->cf_current = -1;
}

/* 3.9-3.12: fixed offsets (checked with gdb ptype /o on pyenv's 3.9.18, 3.10.13, 3.11.7,
 * 3.12.1 and matching py-spy's bindgen structs). */
static void layout_fixed(struct py_layout *L, int minor)
{
	layout_common(L);
	if (minor <= 10) {
		L->rt_interp_head = 32;
		L->is_threads_head = 8;
		L->ts_thread_id = 176;
		L->ts_frame = 24;
		L->f_back = 24;
		L->f_code = 32;
		L->f_lasti = minor == 9 ? 104 : 96;
		L->f_size = 112;
		L->co_firstlineno = 40;
		L->co_filename = 104;
		L->co_name = 112;
		L->co_linetable = 120;
		L->co_size = 128;
		L->str_ascii_size = 48;
		L->str_compact_size = 72;
		L->lines = minor == 9 ? LNOTAB_39 : LINETABLE_310;
		L->lasti = minor == 9 ? LASTI_BYTES : LASTI_UNITS;
		return;
	}
	L->rt_interp_head = 40;
	L->ts_frame = 56;	/* cframe */
	L->co_filename = 112;
	L->co_name = 120;
	L->co_qualname = 128;
	L->co_linetable = 136;
	L->lines = LOCATIONS_311;
	L->lasti = LASTI_PREV_INSTR;
	L->f_lasti = 56;
	L->f_size = 72;
	if (minor == 11) {
		L->is_threads_head = 16;
		L->ts_thread_id = 152;
		L->ts_native_tid = 160;
		L->cf_current = 8;
		L->f_code = 32;
		L->f_back = 48;
		L->f_is_entry = 68;
		L->f_owner = 69;
		L->co_firstlineno = 72;
		L->co_firsttraceable = 168;
		L->co_code_adaptive = 184;
		L->str_ascii_size = 48;
		L->str_compact_size = 72;
	} else {
		L->is_threads_head = 72;
		L->ts_thread_id = 136;
		L->ts_native_tid = 144;
		L->cf_current = 0;
		L->f_code = 0;
		L->f_back = 8;
		L->f_owner = 70;
		L->co_firstlineno = 68;
		L->co_firsttraceable = 176;
		L->co_code_adaptive = 192;
		L->str_ascii_size = 40;
		L->str_compact_size = 56;
	}
	L->co_size = L->co_code_adaptive;
}

/* 3.13: _Py_DebugOffsets sits at &_PyRuntime (its first member). Field positions inside it
 * as generated from v3.13.0's pycore_runtime.h (checked with gdb ptype /o). */
#define DBG_SIZE 584
static int layout_313(struct pyproc *py, char *err, size_t errsz)
{
	uint8_t d[DBG_SIZE];
	struct py_layout *L = &py->L;
	uint64_t version;
	int i, offs[] = { 40, 64, 72, 168, 192, 200, 184, 232, 240, 248, 264, 280, 288, 296, 304,
			  312, 344, 360, 520, 528, 544, 552, 560 };

	if (rd(py, py->runtime, d, sizeof(d))) {
		set_err(err, errsz, "Python 3.13: cannot read _Py_DebugOffsets at 0x%llx",
			(unsigned long long)py->runtime);
		return -EFAULT;
	}
	version = u64_at(d, 8);
	if (memcmp(d, "xdebugpy", 8) || (version >> 16) != 0x030d) {
		set_err(err, errsz, "Python %s: _Py_DebugOffsets not found (cookie or version mismatch)",
			py->version);
		return -EINVAL;
	}
	if (u64_at(d, 16)) {
		set_err(err, errsz, "Python %s: free-threaded build: unsupported", py->version);
		return -ENOTSUP;
	}
	/* every offset must fit the buffers we read into: a garbage table must not send reads
	 * past them (the interpreter state is big: its fields sit ~7 KiB in) */
	for (i = 0; i < (int)(sizeof(offs) / sizeof(offs[0])); i++) {
		if (u64_at(d, offs[i]) > (i < 3 ? (1u << 20) : 240)) {
			set_err(err, errsz, "Python %s: implausible _Py_DebugOffsets", py->version);
			return -EINVAL;
		}
	}
	layout_common(L);
	L->rt_interp_head = u64_at(d, 40);
	L->is_next = u64_at(d, 64);
	L->is_threads_head = u64_at(d, 72);
	L->ts_next = u64_at(d, 168);
	L->ts_frame = u64_at(d, 184);
	L->ts_thread_id = u64_at(d, 192);
	L->ts_native_tid = u64_at(d, 200);
	L->f_back = u64_at(d, 232);
	L->f_code = u64_at(d, 240);
	L->f_lasti = u64_at(d, 248);
	L->f_owner = u64_at(d, 264);
	L->f_size = 72;
	L->co_filename = u64_at(d, 280);
	L->co_name = u64_at(d, 288);
	L->co_qualname = u64_at(d, 296);
	L->co_linetable = u64_at(d, 304);
	L->co_firstlineno = u64_at(d, 312);
	L->co_code_adaptive = u64_at(d, 344);
	/* not in the debug offsets: int _co_firsttraceable sits 16 bytes before the bytecode in
	 * 3.11, 3.12 and 3.13 alike (184 in v3.13.0) */
	L->co_firsttraceable = L->co_code_adaptive - 16;
	L->co_size = L->co_code_adaptive;
	L->ob_type = u64_at(d, 360);
	L->bytes_size = u64_at(d, 520);
	L->bytes_sval = u64_at(d, 528);
	L->str_state = u64_at(d, 544);
	L->str_length = u64_at(d, 552);
	L->str_ascii_size = u64_at(d, 560);
	L->str_compact_size = L->str_ascii_size + 16;	/* + utf8_length, utf8 */
	L->lines = LOCATIONS_311;
	L->lasti = LASTI_INSTR_PTR;
	if (L->f_size < L->f_owner + 1 || L->f_size < L->f_lasti + 8)
		L->f_size = (L->f_owner > L->f_lasti ? L->f_owner + 1 : L->f_lasti + 8);
	return 0;
}

/* ---- finding the interpreter ---- */

/* The address of section `name` and its file offset/size; -ENOENT when absent. */
static int elf_section(const char *path, const char *name, uint64_t *addr, uint64_t *off,
		       uint64_t *size)
{
	Elf *elf = NULL;
	Elf_Scn *scn = NULL;
	size_t shstrndx;
	int fd, ret = -ENOENT;

	elf_version(EV_CURRENT);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf || elf_getshdrstrndx(elf, &shstrndx))
		goto cleanup;
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		const char *n;

		if (!gelf_getshdr(scn, &sh))
			continue;
		n = elf_strptr(elf, shstrndx, sh.sh_name);
		if (n && !strcmp(n, name)) {
			*addr = sh.sh_addr;
			*off = sh.sh_offset;
			*size = sh.sh_size;
			ret = sh.sh_type == SHT_NOBITS ? -ENODATA : 0;
			break;
		}
	}
cleanup:
	if (elf)
		elf_end(elf);
	close(fd);
	return ret;
}

/* Before 3.11 there is no Py_Version: PY_VERSION ("3.9.18") is a string literal in .rodata,
 * NUL-terminated but possibly tail-merged into a longer one ("/root/.pyenv/versions/3.9.18").
 * Takes the first one whose minor matches want_minor (from the file name), or with an
 * unknown name (-1) the first 3.6-3.10 (3.11+ have Py_Version). */
static int rodata_version(const char *path, int want_minor, int *major, int *minor, int *micro)
{
	uint64_t addr, off, size;
	char *buf = NULL;
	int fd = -1, ret = -ENOENT;
	size_t i;

	if (elf_section(path, ".rodata", &addr, &off, &size) || size > (256u << 20))
		return -ENOENT;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	buf = malloc(size + 1);
	if (fd < 0 || !buf || pread(fd, buf, size, off) != (ssize_t)size)
		goto cleanup;
	buf[size] = 0;
	for (i = 1; i + 6 < size; i++) {
		int a, b, c, n = 0;

		if (buf[i] != '3' || buf[i + 1] != '.' || buf[i - 1] == '.' ||
		    (buf[i - 1] >= '0' && buf[i - 1] <= '9'))
			continue;
		if (sscanf(buf + i, "%1d.%2d.%2d%n", &a, &b, &c, &n) != 3 || buf[i + n] != 0)
			continue;
		if (want_minor >= 0 ? b != want_minor : (b < 6 || b > 10))
			continue;
		*major = a, *minor = b, *micro = c;
		ret = 0;
		break;
	}
cleanup:
	free(buf);
	if (fd >= 0)
		close(fd);
	return ret;
}

/* "libpython3.10.so.1.0" or "python3.10" -> 10; -1 when the name says nothing. */
static int minor_from_name(const char *path)
{
	const char *base = strrchr(path, '/');
	int major, minor;

	base = base ? base + 1 : path;
	if (!strncmp(base, "lib", 3))
		base += 3;
	if (sscanf(base, "python%d.%d", &major, &minor) == 2 && major == 3)
		return minor;
	return -1;
}

/* The load bias of the file mapped by vma (start - the vaddr at file offset 0). */
static int load_bias(const struct procmaps *maps, const struct vma *file_vma,
		     const struct elfsym *es, uint64_t *bias)
{
	uint64_t vaddr0;
	size_t i;

	if (elfsym__off_to_vaddr(es, 0, &vaddr0))
		return -ENOENT;
	for (i = 0; i < maps->nr; i++) {
		const struct vma *v = &maps->vmas[i];

		if (v->path && !strcmp(v->path, file_vma->path) && v->inode == file_vma->inode &&
		    v->offset == 0) {
			*bias = v->start - vaddr0;
			return 0;
		}
	}
	return -ENOENT;
}

static void format_version(struct pyproc *py, uint32_t hex)
{
	unsigned major = hex >> 24 & 0xff, minor = hex >> 16 & 0xff, micro = hex >> 8 & 0xff;
	unsigned level = hex >> 4 & 0xf, serial = hex & 0xf;
	const char *lv = level == 0xa ? "a" : level == 0xb ? "b" : level == 0xc ? "rc" : "";

	if (*lv)
		snprintf(py->version, sizeof(py->version), "%u.%u.%u%s%u", major, minor, micro, lv, serial);
	else
		snprintf(py->version, sizeof(py->version), "%u.%u.%u", major, minor, micro);
	py->minor = major == 3 ? (int)minor : -1;
}

/* Looks for _PyRuntime in the file vma maps. 1 found (py filled), 0 not a Python binary,
 * negative errno with err set when it is one we cannot read. */
static int try_file(struct pyproc *py, const struct procmaps *maps, const struct vma *vma,
		    char *err, size_t errsz)
{
	char path[PATH_MAX];
	struct elfsym *es;
	const struct elfsym_sym *rt, *ver, *code_type;
	uint64_t bias, sec_addr, sec_off, sec_size, rt_vaddr = 0;
	int ret = 0;

	/* map_files works for deleted files and other mount namespaces; root as a fallback */
	snprintf(path, sizeof(path), "/proc/%d/map_files/%llx-%llx", py->pid,
		 (unsigned long long)vma->start, (unsigned long long)vma->end);
	es = elfsym__open(path);
	if (!es && !procmaps__target_path(path, sizeof(path), py->pid, vma->path))
		es = elfsym__open(path);
	if (!es)
		return 0;
	rt = elfsym__find(es, "_PyRuntime");
	if (rt)
		rt_vaddr = rt->vaddr;
	else if (!elf_section(path, ".PyRuntime", &sec_addr, &sec_off, &sec_size))
		rt_vaddr = sec_addr;	/* stripped of symbols: the section says where */
	if (!rt_vaddr)
		goto cleanup;
	if (load_bias(maps, vma, es, &bias)) {
		set_err(err, errsz, "%s: cannot find its load address", vma->path);
		ret = -ENOENT;
		goto cleanup;
	}
	py->runtime = rt_vaddr + bias;
	code_type = elfsym__find(es, "PyCode_Type");
	py->code_type = code_type ? code_type->vaddr + bias : 0;

	ver = elfsym__find(es, "Py_Version");
	if (ver) {
		uint64_t hex;

		if (rd(py, ver->vaddr + bias, &hex, sizeof(hex))) {
			set_err(err, errsz, "%s: cannot read Py_Version", vma->path);
			ret = -EFAULT;
			goto cleanup;
		}
		format_version(py, (uint32_t)hex);
	} else {
		int major, minor, micro;

		if (rodata_version(path, minor_from_name(vma->path), &major, &minor, &micro)) {
			set_err(err, errsz, "%s: has _PyRuntime but no version string", vma->path);
			ret = -ENOENT;
			goto cleanup;
		}
		snprintf(py->version, sizeof(py->version), "%d.%d.%d", major, minor, micro);
		py->minor = major == 3 ? minor : -1;
	}
	if (py->minor < 9 || py->minor > 13) {
		set_err(err, errsz, "Python %s: unsupported (3.9-3.13)", py->version);
		ret = -ENOTSUP;
		goto cleanup;
	}
	if (py->minor == 13)
		ret = layout_313(py, err, errsz);
	else
		layout_fixed(&py->L, py->minor);
	if (!ret)
		ret = 1;
cleanup:
	elfsym__free(es);
	return ret;
}

/* Candidates: the main executable and any libpython3.X; the first that holds _PyRuntime. */
static bool is_candidate(const struct vma *v, const char *exe)
{
	const char *base;

	if (!v->path || v->path[0] != '/' || v->offset != 0)
		return false;
	base = strrchr(v->path, '/') + 1;
	return !strncmp(base, "libpython3", 10) || (exe && !strcmp(v->path, exe));
}

struct pyproc *pyframes__open(int pid, char *err, size_t errsz)
{
	struct pyproc *py;
	struct procmaps *maps;
	char exe[PATH_MAX], link[64];
	ssize_t n;
	size_t i;
	int ret = 0;

	set_err(err, errsz, "%s", "");
	maps = procmaps__load(pid);
	if (!maps) {
		set_err(err, errsz, "pid %d: cannot read its maps: %s", pid, strerror(errno));
		return NULL;
	}
	py = calloc(1, sizeof(*py));
	if (!py) {
		procmaps__free(maps);
		set_err(err, errsz, "out of memory");
		return NULL;
	}
	py->pid = pid;
	snprintf(link, sizeof(link), "/proc/%d/exe", pid);
	n = readlink(link, exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = 0;
	if (n > 10 && !strcmp(exe + n - 10, " (deleted)"))
		exe[n - 10] = 0;
	/* libpython before the executable: pyenv's python is a stub linked to it */
	for (int pass = 0; pass < 2 && ret == 0; pass++) {
		for (i = 0; i < maps->nr && ret == 0; i++) {
			const struct vma *v = &maps->vmas[i];
			bool lib;

			if (!is_candidate(v, n > 0 ? exe : NULL))
				continue;
			lib = !strncmp(strrchr(v->path, '/') + 1, "libpython3", 10);
			if (lib != (pass == 0))
				continue;
			ret = try_file(py, maps, v, err, errsz);
		}
	}
	procmaps__free(maps);
	if (ret <= 0) {
		if (ret == 0)
			set_err(err, errsz, "%s", "");
		free(py);
		errno = ret ? -ret : ENOENT;
		return NULL;
	}
	return py;
}

void pyframes__free(struct pyproc *py)
{
	size_t it = 0, i;
	uint64_t val;

	if (!py)
		return;
	while (u64map__next(&py->codes, &it, NULL, &val)) {
		struct code_info *ci = (struct code_info *)(uintptr_t)val;

		free(ci->table);
		free(ci);
	}
	u64map__clear(&py->codes);
	u64map__free_values(&py->strings);
	for (i = 0; i < py->nr_extra; i++)
		free(py->extra_strings[i]);
	free(py->extra_strings);
	free(py->tstates);
	free(py);
}

const char *pyframes__version(const struct pyproc *py)
{
	return py ? py->version : NULL;
}

/* ---- strings and code objects ---- */

/* A copy owned by py, deduplicated by content; NULL on ENOMEM. */
static const char *intern(struct pyproc *py, const char *s)
{
	uint64_t h = 1469598103934665603ULL, val;
	const char *p;
	char *copy, **grown;

	for (p = s; *p; p++)
		h = (h ^ (uint8_t)*p) * 1099511628211ULL;
	if (!h)
		h = 1;
	if (u64map__get(&py->strings, h, &val) && !strcmp((char *)(uintptr_t)val, s))
		return (const char *)(uintptr_t)val;
	copy = strdup(s);
	if (!copy)
		return NULL;
	if (!u64map__get(&py->strings, h, &val)) {
		if (u64map__set(&py->strings, h, (uintptr_t)copy)) {
			free(copy);
			return NULL;
		}
		return copy;
	}
	grown = realloc(py->extra_strings, (py->nr_extra + 1) * sizeof(*grown));
	if (!grown) {
		free(copy);
		return NULL;
	}
	py->extra_strings = grown;
	grown[py->nr_extra++] = copy;
	return copy;
}

static void put_utf8(char *out, size_t *n, size_t cap, uint32_t c)
{
	uint8_t b[4];
	size_t len, i;

	if (c < 0x80)
		b[0] = c, len = 1;
	else if (c < 0x800)
		b[0] = 0xc0 | c >> 6, b[1] = 0x80 | (c & 0x3f), len = 2;
	else if (c < 0x10000)
		b[0] = 0xe0 | c >> 12, b[1] = 0x80 | (c >> 6 & 0x3f), b[2] = 0x80 | (c & 0x3f), len = 3;
	else if (c < 0x110000)
		b[0] = 0xf0 | c >> 18, b[1] = 0x80 | (c >> 12 & 0x3f), b[2] = 0x80 | (c >> 6 & 0x3f),
		b[3] = 0x80 | (c & 0x3f), len = 4;
	else
		b[0] = '?', len = 1;
	if (*n + len >= cap)
		return;
	for (i = 0; i < len; i++)
		out[(*n)++] = b[i];
}

/* A str object (PEP 393 compact form) as UTF-8, cut at MAX_STR_BYTES. */
static int read_str(struct pyproc *py, uint64_t addr, const char **out)
{
	const struct py_layout *L = &py->L;
	uint8_t hdr[64], data[MAX_STR_BYTES * 4];
	char text[MAX_STR_BYTES + 4];
	uint32_t state, kind;
	int64_t length;
	size_t n = 0, i, count;
	int ret;

	if ((ret = rd(py, addr, hdr, L->str_state + 4)))
		return ret;
	memcpy(&length, hdr + L->str_length, sizeof(length));
	memcpy(&state, hdr + L->str_state, sizeof(state));
	kind = state >> 2 & 7;
	/* bit 5 compact, bit 6 ascii; legacy (non-compact) strings never name code */
	if (length < 0 || !(state & 1u << 5) || (kind != 1 && kind != 2 && kind != 4))
		return -EFAULT;
	count = (size_t)length < MAX_STR_BYTES ? (size_t)length : MAX_STR_BYTES;
	if (count && (ret = rd(py, addr + ((state & 1u << 6) ? L->str_ascii_size : L->str_compact_size),
			       data, count * kind)))
		return ret;
	for (i = 0; i < count; i++) {
		uint32_t c = kind == 1 ? data[i] : kind == 2 ? (uint32_t)(data[2 * i] | data[2 * i + 1] << 8) :
			     (uint32_t)u64_at(data, 4 * i) & 0xffffffffu;

		put_utf8(text, &n, MAX_STR_BYTES, c ? c : '?');
	}
	text[n] = 0;
	*out = intern(py, text);
	return *out ? 0 : -ENOMEM;
}

/* The code object at addr, from the cache when it still has the same name, file and line
 * table pointers (a freed code object's address can be reused by another). */
static int code_info(struct pyproc *py, uint64_t addr, struct code_info **out)
{
	const struct py_layout *L = &py->L;
	uint8_t co[256];
	uint64_t filename, name, qualname = 0, linetable, val;
	struct code_info *ci = NULL;
	int64_t table_len;
	int ret;

	if ((ret = rd(py, addr, co, L->co_size)))
		return ret;
	filename = u64_at(co, L->co_filename);
	name = u64_at(co, L->co_name);
	if (L->co_qualname >= 0)
		qualname = u64_at(co, L->co_qualname);
	linetable = u64_at(co, L->co_linetable);
	if (u64map__get(&py->codes, addr, &val)) {
		ci = (struct code_info *)(uintptr_t)val;
		if (ci->filename == filename && ci->name == (qualname ? qualname : name) &&
		    ci->linetable == linetable && ci->firstlineno == i32_at(co, L->co_firstlineno)) {
			*out = ci;
			return 0;
		}
	} else {
		ci = calloc(1, sizeof(*ci));
		if (!ci || u64map__set(&py->codes, addr, (uintptr_t)ci)) {
			free(ci);
			return -ENOMEM;
		}
	}
	/* (re)build; on failure the entry stays, marked unusable by zero pointers */
	free(ci->table);
	memset(ci, 0, sizeof(*ci));
	if ((ret = read_str(py, qualname ? qualname : name, &ci->func)) ||
	    (ret = read_str(py, filename, &ci->file)))
		return ret;
	if ((ret = rd(py, linetable + L->bytes_size, &table_len, sizeof(table_len))))
		return ret;
	if (table_len < 0 || table_len > MAX_LINETABLE)
		return -EFAULT;
	ci->table = malloc(table_len + 1);
	if (!ci->table)
		return -ENOMEM;
	if (table_len && (ret = rd(py, linetable + L->bytes_sval, ci->table, table_len))) {
		free(ci->table);
		ci->table = NULL;
		return ret;
	}
	ci->table_len = table_len;
	ci->firstlineno = i32_at(co, L->co_firstlineno);
	ci->firsttraceable = L->co_firsttraceable >= 0 ? i32_at(co, L->co_firsttraceable) : 0;
	ci->filename = filename;
	ci->name = qualname ? qualname : name;
	ci->linetable = linetable;
	*out = ci;
	return 0;
}

/* ---- line tables (Objects/lnotab_notes.txt, Objects/locations.md) ---- */

/* 3.9: (address increment, signed line increment) byte pairs; addr in bytes. */
static int line_lnotab(const struct code_info *ci, int addr)
{
	int line = ci->firstlineno, at = 0;
	size_t i;

	for (i = 0; i + 1 < ci->table_len; i += 2) {
		at += ci->table[i];
		if (at > addr)
			break;
		line += (int8_t)ci->table[i + 1];
	}
	return line;
}

/* 3.10: (unsigned start delta, signed line delta; -128 = no line) pairs; addr in bytes. */
static int line_310(const struct code_info *ci, int addr)
{
	int line = ci->firstlineno, start, end = 0, range_line = -1;
	size_t i;

	for (i = 0; i + 1 < ci->table_len; i += 2) {
		int8_t delta = (int8_t)ci->table[i + 1];

		start = end;
		end += ci->table[i];
		if (delta != -128)
			line += delta;
		range_line = delta == -128 ? -1 : line;
		if (start <= addr && addr < end)
			return range_line;
	}
	return -1;
}

static size_t varint(const uint8_t *t, size_t len, size_t i, unsigned *val)
{
	unsigned v = 0, shift = 0;

	while (i < len && shift < 32) {
		v |= (unsigned)(t[i] & 63) << shift;
		shift += 6;
		if (!(t[i++] & 64))
			break;
	}
	*val = v;
	return i;
}

/* 3.11+ location table; addr in bytes (code units x 2). */
static int line_locations(const struct code_info *ci, int addr)
{
	const uint8_t *t = ci->table;
	size_t i = 0, len = ci->table_len;
	int line = ci->firstlineno, end = 0;

	while (i < len) {
		uint8_t first = t[i];
		int code = first >> 3 & 15, start = end, delta = 0;
		unsigned v;

		if (!(first & 0x80))
			return -1;	/* not at an entry start: corrupt */
		end += ((first & 7) + 1) * 2;
		if (code == 13 || code == 14) {
			varint(t, len, i + 1, &v);
			delta = (v & 1) ? -(int)(v >> 1) : (int)(v >> 1);
		} else if (code >= 10 && code <= 12) {
			delta = code - 10;
		}
		line += delta;
		if (start <= addr && addr < end)
			return code == 15 ? -1 : line;
		/* the next entry starts at the next byte with bit 7 set */
		for (i++; i < len && !(t[i] & 0x80); i++)
			;
	}
	return -1;
}

static int code_line(const struct pyproc *py, const struct code_info *ci, int addr)
{
	int line;

	if (addr < 0)
		return ci->firstlineno;
	switch (py->L.lines) {
	case LNOTAB_39:
		line = line_lnotab(ci, addr);
		break;
	case LINETABLE_310:
		line = line_310(ci, addr);
		break;
	default:
		line = line_locations(ci, addr);
	}
	return line > 0 ? line : 0;
}

/* ---- thread states ---- */

static int walk_tstates(struct pyproc *py)
{
	const struct py_layout *L = &py->L;
	uint64_t interp, ts;
	size_t nr = 0, cap = 0;
	struct tstate_ref *list = NULL;
	int ret, ni, nt;

	if ((ret = rd(py, py->runtime + L->rt_interp_head, &interp, sizeof(interp))))
		return ret;
	for (ni = 0; interp && ni < MAX_INTERPRETERS; ni++) {
		if ((ret = rd(py, interp + L->is_threads_head, &ts, sizeof(ts))))
			goto fail;
		for (nt = 0; ts && nt < MAX_THREADS_WALKED; nt++) {
			uint8_t buf[256];
			int need = (L->ts_native_tid > L->ts_thread_id ? L->ts_native_tid : L->ts_thread_id) + 8;

			if (need < L->ts_next + 8)
				need = L->ts_next + 8;
			if ((ret = rd(py, ts, buf, need)))
				goto fail;
			if (nr == cap) {
				struct tstate_ref *grown;

				cap = cap ? cap * 2 : 16;
				grown = realloc(list, cap * sizeof(*list));
				if (!grown) {
					ret = -ENOMEM;
					goto fail;
				}
				list = grown;
			}
			list[nr].addr = ts;
			list[nr].thread_id = u64_at(buf, L->ts_thread_id);
			list[nr].native_tid = L->ts_native_tid >= 0 ? u64_at(buf, L->ts_native_tid) : 0;
			nr++;
			ts = u64_at(buf, L->ts_next);
		}
		if (ts)
			goto loop;
		if ((ret = rd(py, interp + L->is_next, &interp, sizeof(interp))))
			goto fail;
	}
	if (interp)
		goto loop;
	free(py->tstates);
	py->tstates = list;
	py->nr_tstates = nr;
	py->tstates_at = now_ns();
	return 0;
loop:
	ret = -EFAULT;	/* a chain longer than any real one: torn or corrupt */
fail:
	free(list);
	return ret;
}

/* The thread state of tid: by native_thread_id from 3.11, by pthread id = fs_base before. */
static int find_tstate(struct pyproc *py, int tid, uint64_t fs_base, uint64_t *addr)
{
	int attempt, ret;
	size_t i;

	for (attempt = 0; attempt < 2; attempt++) {
		if (!py->tstates_at || now_ns() - py->tstates_at > TSTATE_CACHE_NS || attempt) {
			if ((ret = walk_tstates(py)))
				return ret;
		}
		for (i = 0; i < py->nr_tstates; i++) {
			const struct tstate_ref *t = &py->tstates[i];

			if (py->L.ts_native_tid >= 0 ? t->native_tid == (uint64_t)tid :
			    (fs_base && t->thread_id == fs_base)) {
				*addr = t->addr;
				return 0;
			}
		}
		if (py->L.ts_native_tid < 0 && !fs_base)
			return -ENOENT;
	}
	return -ENOENT;
}

/* ---- frames ---- */

/* The first frame of the tstate; 0 when the thread runs no Python code. */
static int first_frame(struct pyproc *py, uint64_t ts, uint64_t *frame)
{
	const struct py_layout *L = &py->L;
	uint64_t p;
	int ret;

	if ((ret = rd(py, ts + L->ts_frame, &p, sizeof(p))))
		return ret;
	if (L->cf_current >= 0 && p)
		ret = rd(py, p + L->cf_current, &p, sizeof(p));
	*frame = p;
	return ret;
}

int pyframes__thread(struct pyproc *py, int tid, uint64_t fs_base, struct py_frame *out, int max)
{
	const struct py_layout *L;
	uint64_t ts, frame;
	int n = 0, walked, ret, boundary_n = 0;

	if (!py || tid <= 0 || max < 0 || (max && !out))
		return -EINVAL;
	L = &py->L;
	if ((ret = find_tstate(py, tid, fs_base, &ts)))
		return ret;
	if ((ret = first_frame(py, ts, &frame)))
		return ret;
	for (walked = 0; frame && n < max; walked++) {
		uint8_t f[128];
		struct code_info *ci;
		uint64_t code, ip, next;
		int owner = -1, addr;
		bool boundary = false, skip = false;

		if (walked >= MAX_FRAMES_WALKED)
			return -EFAULT;
		if ((ret = rd(py, frame, f, L->f_size)))
			return ret;
		code = u64_at(f, L->f_code);
		next = u64_at(f, L->f_back);
		if (L->f_owner >= 0)
			owner = f[L->f_owner];
		if (owner == OWNED_BY_CSTACK && py->minor >= 12) {
			/* the shim of one _PyEval_EvalFrameDefault: the frame inside it is the entry */
			if (n > boundary_n)
				out[n - 1].entry = true;
			boundary_n = n;
			frame = next;
			continue;
		}
		if (py->minor >= 13 && py->code_type) {
			uint64_t type;

			if ((ret = rd(py, code + L->ob_type, &type, sizeof(type))))
				return ret;
			if (type != py->code_type) {
				frame = next;
				continue;	/* not a code object (3.13 allows other executables) */
			}
		}
		if ((ret = code_info(py, code, &ci)))
			return ret;
		switch (L->lasti) {
		case LASTI_BYTES:
			addr = i32_at(f, L->f_lasti);
			break;
		case LASTI_UNITS:
			addr = i32_at(f, L->f_lasti);
			addr = addr < 0 ? addr : addr * 2;
			break;
		default:
			ip = u64_at(f, L->f_lasti);
			/* byte offset from the first instruction; prev_instr may sit one unit before */
			addr = (int)((int64_t)(ip - (code + L->co_code_adaptive)));
			if (py->minor >= 11 && owner != OWNED_BY_GENERATOR &&
			    (int64_t)(ip - (code + L->co_code_adaptive)) < (int64_t)ci->firsttraceable * 2)
				skip = true;	/* incomplete: not yet at RESUME (_PyFrame_IsIncomplete) */
			if ((int64_t)(ip - code) > (1LL << 30) || (int64_t)(ip - code) < -(1LL << 30))
				addr = INT32_MIN;	/* garbage pointer: line unknown */
		}
		if (py->minor == 11 && f[L->f_is_entry])
			boundary = true;
		if (!skip) {
			out[n].func = ci->func;
			out[n].file = ci->file;
			out[n].line = addr == INT32_MIN ? 0 : code_line(py, ci, addr);
			out[n].entry = py->minor <= 10;
			n++;
		}
		if (boundary) {
			if (n > boundary_n)
				out[n - 1].entry = true;
			boundary_n = n;
		}
		frame = next;
	}
	return n;
}
