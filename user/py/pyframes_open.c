// SPDX-License-Identifier: MIT
/* Finding CPython in a process: the executable or a mapped libpython3.X.so (opened through
 * /proc/PID/map_files, else /proc/PID/root), _PyRuntime by symbol or .PyRuntime section,
 * the version from Py_Version (3.11+) or PY_VERSION in .rodata, and the per-version layout.
 * Offsets are x86-64, default (GIL, non-debug) builds; 3.9-3.12 were checked with gdb
 * `ptype /o` against pyenv's libpython builds (which carry DWARF); 3.13 reads the target's
 * own _Py_DebugOffsets. */
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include "elfsym.h"
#include "procmaps.h"
#include "pyframes_int.h"

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

		if ((ret = rd(py, ver->vaddr + bias, &hex, sizeof(hex)))) {
			set_err(err, errsz, "pid %d: cannot read Py_Version: %s", py->pid, strerror(-ret));
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
	/* Py_DEBUG builds put two more pointers in every object header: other offsets */
	if (elfsym__find(es, "_Py_NegativeRefcount")) {
		set_err(err, errsz, "Python %s: debug build (Py_DEBUG): unsupported", py->version);
		ret = -ENOTSUP;
		goto cleanup;
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
	if (!ret) {
		uint64_t head;

		/* readable at all? (Yama, another user: say so now rather than per thread) */
		ret = rd(py, py->runtime + py->L.rt_interp_head, &head, sizeof(head));
		if (ret)
			set_err(err, errsz, "Python %s: cannot read pid %d: %s", py->version, py->pid,
				strerror(-ret));
	}
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
	u64map__clear(&py->ns_tids);
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

