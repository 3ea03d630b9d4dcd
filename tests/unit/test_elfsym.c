// SPDX-License-Identifier: MIT
/* elfsym against the real libcudart.so.13, against fixtures built by unit.mk (a C executable and
 * a versioned shared object, and an nvcc-built executable with static cudart), and the cache.
 * Expected cudart values are from `objdump -T` / `readelf -lnW` of CUDA 13.0's libcudart.so.13. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "demangle.h"
#include "elfsym.h"

#define CUDART_BUILD_ID		"2a12a4a442f0edf6eab8241fdeedb40019c4256c"
#define CUDART_LAUNCH_VADDR	0x74370
#define CUDART_LAUNCH_SIZE	0x2e4
/* LOAD 0x0a6000 0x2a6000 filesz 0x551c memsz 0x7320: the RW segment */
#define CUDART_RW_VADDR		0x2a6000
#define CUDART_RW_OFF		0xa6000
#define CUDART_RW_FILESZ	0x551c

struct prefix_walk {
	int nr;
	const char *want;
	const struct elfsym_sym *found;
};

static int note_sym(const struct elfsym_sym *sym, void *ctx)
{
	struct prefix_walk *walk = ctx;

	walk->nr++;
	/* the lowest of several with that name */
	if (walk->want && strcmp(sym->name, walk->want) == 0 &&
	    (!walk->found || sym->vaddr < walk->found->vaddr))
		walk->found = sym;
	return 0;
}

/* want as a substring: compilers decorate function-local statics differently */
static int note_containing(const struct elfsym_sym *sym, void *ctx)
{
	struct prefix_walk *walk = ctx;

	if (strstr(sym->name, walk->want)) {
		walk->nr++;
		walk->found = sym;
	}
	return 0;
}

static int stop_at_first(const struct elfsym_sym *sym, void *ctx)
{
	return 1;
}

static void test_cudart(void)
{
	const struct elfsym_sym *sym, *launch;
	struct elfsym *es;
	uint64_t v;

	if (access(CUDART_PATH, R_OK)) {
		SKIP("%s: %s; the real-library checks need CUDA 13", CUDART_PATH, strerror(errno));
		return;
	}
	es = elfsym__open(CUDART_PATH);
	CHECK(es, "open %s: %s", CUDART_PATH, strerror(errno));
	if (!es)
		return;
	CHECK_STR(elfsym__build_id(es), CUDART_BUILD_ID);
	CHECK(!elfsym__is_exec(es), "libcudart is ET_DYN");

	launch = elfsym__find_func(es, "cudaLaunchKernel");
	CHECK(launch, "cudaLaunchKernel not found");
	if (launch) {
		CHECK_STR(launch->name, "cudaLaunchKernel");
		CHECK_U64(launch->vaddr, CUDART_LAUNCH_VADDR);
		CHECK_U64(launch->size, CUDART_LAUNCH_SIZE);
		CHECK(launch->kind == ELFSYM_FUNC && launch->global && launch->dynamic,
		      "cudaLaunchKernel kind %d global %d dynamic %d", launch->kind, launch->global,
		      launch->dynamic);
	}
	CHECK(elfsym__find(es, "cudaLaunchKernel") == launch, "find == find_func");
	CHECK(elfsym__find_func(es, "cudaLaunchKerne") == NULL, "prefix is not a match");
	CHECK(elfsym__find_func(es, "cudaLaunchKernelX") == NULL, "longer name is not a match");
	CHECK(elfsym__find_func(es, "") == NULL, "empty name");
	/* cudart's .dynsym names carry no version in the string, and they come back as is */
	sym = elfsym__find_func(es, "cudaMalloc");
	CHECK(sym && sym->global && sym->dynamic, "cudaMalloc");

	CHECK(elfsym__func_at(es, CUDART_LAUNCH_VADDR) == launch, "func_at start");
	CHECK(elfsym__func_at(es, CUDART_LAUNCH_VADDR + 5) == launch, "func_at +5");
	CHECK(elfsym__func_at(es, CUDART_LAUNCH_VADDR + CUDART_LAUNCH_SIZE - 1) == launch,
	      "func_at last byte");
	sym = elfsym__func_at(es, CUDART_LAUNCH_VADDR + CUDART_LAUNCH_SIZE);
	CHECK(sym != launch, "func_at one past the end");
	CHECK(elfsym__func_at(es, 0x10) == NULL, "func_at in the ELF header");
	CHECK(elfsym__func_at(es, UINT64_MAX) == NULL, "func_at far away");

	/* text is at offset == vaddr in the first LOAD */
	CHECK(elfsym__vaddr_to_off(es, CUDART_LAUNCH_VADDR, &v) == 0, "vaddr_to_off text");
	CHECK_U64(v, CUDART_LAUNCH_VADDR);
	CHECK(elfsym__vaddr_to_off(es, CUDART_RW_VADDR + 0x100, &v) == 0, "vaddr_to_off data");
	CHECK_U64(v, CUDART_RW_OFF + 0x100);
	CHECK(elfsym__off_to_vaddr(es, CUDART_RW_OFF + 0x100, &v) == 0, "off_to_vaddr data");
	CHECK_U64(v, CUDART_RW_VADDR + 0x100);
	CHECK(elfsym__vaddr_to_off(es, CUDART_RW_VADDR + CUDART_RW_FILESZ - 1, &v) == 0,
	      "last file byte of the RW segment");
	CHECK_U64(v, CUDART_RW_OFF + CUDART_RW_FILESZ - 1);
	CHECK(elfsym__vaddr_to_off(es, CUDART_RW_VADDR + CUDART_RW_FILESZ, &v) == -ENOENT,
	      ".bss has no file offset");
	CHECK(elfsym__vaddr_to_off(es, 0x100000, &v) == -ENOENT, "gap between segments");
	CHECK(elfsym__off_to_vaddr(es, 0x10000000, &v) == -ENOENT, "offset past the file");

	CHECK(elfsym__each_prefix(es, "cudaLaunchKernel", stop_at_first, NULL) == 1,
	      "each_prefix stops when cb says so");
	elfsym__free(es);
}

static void test_symfix_common(struct elfsym *es, const char *what)
{
	const struct elfsym_sym *fn, *sym, *impl, *resolver;
	struct prefix_walk walk = { 0 };

	fn = elfsym__find_func(es, "symfix_static_fn");
	CHECK(fn && !fn->global && !fn->dynamic && fn->kind == ELFSYM_FUNC && fn->size > 0,
	      "%s: static function as a local FUNC", what);
	if (fn) {
		CHECK(elfsym__func_at(es, fn->vaddr + fn->size - 1) == fn, "%s: func_at static fn", what);
		CHECK(elfsym__func_at(es, fn->vaddr + fn->size) != fn, "%s: func_at past static fn", what);
		CHECK(elfsym__find(es, "symfix_static_fn") == fn, "%s: find", what);
	}
	sym = elfsym__find(es, "symfix_static_table");
	CHECK(sym && !sym->global && sym->kind == ELFSYM_OBJECT && sym->size == 16,
	      "%s: static array as a 16-byte local OBJECT", what);
	CHECK(elfsym__find_func(es, "symfix_static_table") == NULL, "%s: OBJECT is no FUNC", what);

	/* GCC says "symfix_local_counter.0", clang "symfix_bump.symfix_local_counter" */
	walk.want = "symfix_local_counter";
	elfsym__each_prefix(es, "", note_containing, &walk);
	CHECK(walk.nr == 1, "%s: one function-local static, found %d", what, walk.nr);
	sym = walk.found;
	CHECK(sym && !sym->global && sym->kind == ELFSYM_OBJECT && sym->size == 4,
	      "%s: function-local static as a 4-byte local OBJECT", what);

	sym = elfsym__find(es, "symfix_global_counter");
	CHECK(sym && sym->global && sym->kind == ELFSYM_OBJECT && sym->size == 4,
	      "%s: global OBJECT", what);

	/* the IFUNC shares its address with its local resolver; both FUNC, the global wins */
	sym = elfsym__find_func(es, "symfix_ifunc");
	resolver = elfsym__find_func(es, "symfix_choose_impl");
	impl = elfsym__find_func(es, "symfix_impl");
	CHECK(sym && sym->global && sym->kind == ELFSYM_FUNC, "%s: IFUNC as FUNC", what);
	CHECK(sym && resolver && sym->vaddr == resolver->vaddr && !resolver->global,
	      "%s: IFUNC at its resolver", what);
	CHECK(sym && elfsym__func_at(es, sym->vaddr) == sym, "%s: func_at prefers the global", what);
	CHECK(impl && !impl->global, "%s: symfix_impl", what);

	/* symfix_dup: a local (symfix2.c, lower) and a global (symfix.c); the global wins */
	walk = (struct prefix_walk){ .want = "symfix_dup" };
	elfsym__each_prefix(es, "symfix_dup", note_sym, &walk);
	CHECK(walk.nr == 2, "%s: two symfix_dup, found %d", what, walk.nr);
	sym = elfsym__find_func(es, "symfix_dup");
	CHECK(sym && sym->global && walk.found && walk.found != sym && !walk.found->global,
	      "%s: find_func prefers the global symfix_dup over the lower local", what);
	CHECK(elfsym__find(es, "symfix_dup") == sym, "%s: find prefers the global too", what);
	/* symfix_twin: two locals; the first (lowest vaddr, symfix2.c's) wins */
	walk = (struct prefix_walk){ .want = "symfix_twin" };
	elfsym__each_prefix(es, "symfix_twin", note_sym, &walk);
	CHECK(walk.nr == 2, "%s: two symfix_twin, found %d", what, walk.nr);
	sym = elfsym__find_func(es, "symfix_twin");
	CHECK(sym && !sym->global && sym == walk.found,
	      "%s: find_func takes the first of two local symfix_twin", what);

	sym = elfsym__find_func(es, "symfix_outer");
	resolver = elfsym__find_func(es, "symfix_inner");
	CHECK(sym && sym->global && sym->size == 4 && resolver && !resolver->global &&
	      resolver->vaddr == sym->vaddr + 2 && resolver->size == 2, "%s: nested FUNCs", what);
	if (sym && resolver) {
		CHECK(elfsym__func_at(es, sym->vaddr + 1) == sym, "%s: func_at outer", what);
		CHECK(elfsym__func_at(es, sym->vaddr + 3) == resolver, "%s: func_at inner", what);
		CHECK(elfsym__func_at(es, sym->vaddr + 4) != sym, "%s: func_at past outer", what);
	}

	CHECK(elfsym__find(es, "main") ? elfsym__is_exec(es) : !elfsym__is_exec(es),
	      "%s: main only in the executable", what);
	CHECK(elfsym__find(es, "symfix.c") == NULL, "%s: FILE symbols dropped", what);
}

static void test_symfix_exec(void)
{
	const char *path = UNIT_OUT_DIR "/symfix";
	struct elfsym *es = elfsym__open(path);

	CHECK(es, "open %s: %s", path, strerror(errno));
	if (!es)
		return;
	CHECK(elfsym__is_exec(es), "symfix is ET_EXEC");
	CHECK(strlen(elfsym__build_id(es)) == 40, "symfix has a sha1 build-id: \"%s\"",
	      elfsym__build_id(es));
	test_symfix_common(es, "symfix");
	elfsym__free(es);
}

/* USDT providers read from .note.stapsdt with the symbols (the memory tracer's pytorch:*). */
static void test_usdt_providers(void)
{
	const char *paths[] = { UNIT_OUT_DIR "/symfix", UNIT_OUT_DIR "/libsymfix.so" };

	for (int i = 0; i < 2; i++) {
		struct elfsym *es = elfsym__open(paths[i]);

		CHECK(es, "open %s: %s", paths[i], strerror(errno));
		if (!es)
			continue;
		CHECK(elfsym__has_usdt_provider(es, "tpfix"), "%s: provider tpfix", paths[i]);
		CHECK(elfsym__has_usdt_provider(es, "tpfix_other"), "%s: provider tpfix_other", paths[i]);
		CHECK(!elfsym__has_usdt_provider(es, "tpfi"), "%s: no prefix match", paths[i]);
		CHECK(!elfsym__has_usdt_provider(es, "pytorch"), "%s: no pytorch probes", paths[i]);
		elfsym__free(es);
	}
}

static void test_symfix_shared(void)
{
	const char *path = UNIT_OUT_DIR "/libsymfix.so";
	const struct elfsym_sym *v1, *v2, *sym;
	struct prefix_walk walk = { .want = "symfix_versioned" };
	struct elfsym *es = elfsym__open(path);

	CHECK(es, "open %s: %s", path, strerror(errno));
	if (!es)
		return;
	CHECK(!elfsym__is_exec(es), "libsymfix.so is ET_DYN");
	test_symfix_common(es, "libsymfix.so");

	/* .symtab: symfix_versioned@VER_1 and symfix_versioned@@VER_2, aliases of _v1 and _v2;
	 * .dynsym has the same two without the suffix: deduplicated into two symbols */
	v1 = elfsym__find_func(es, "symfix_versioned_v1");
	v2 = elfsym__find_func(es, "symfix_versioned_v2");
	CHECK(v1 && v2 && v1->vaddr != v2->vaddr, "the two versions");
	CHECK(elfsym__each_prefix(es, "symfix_versioned", note_sym, &walk) == 4,
	      "symfix_versioned, _v1, _v2 and the second version: %d", walk.nr);
	CHECK(elfsym__each_prefix(es, "symfix_versioned@", note_sym, &walk) == 0,
	      "no name keeps its version");
	sym = elfsym__find_func(es, "symfix_versioned");
	CHECK(sym && v1 && sym->vaddr == v1->vaddr && sym->global && sym->dynamic,
	      "versioned name: the first (VER_1) global, merged with its .dynsym copy");
	if (v2) {
		sym = elfsym__func_at(es, v2->vaddr);
		CHECK(sym && strcmp(sym->name, "symfix_versioned") == 0 && sym->global && sym->dynamic,
		      "func_at on @@VER_2: %s", sym ? sym->name : "(null)");
	}
	elfsym__free(es);
}

static void test_stubfix(void)
{
	const char *path = UNIT_OUT_DIR "/stubfix";
	const char *handle = "_ZZ30__device_stub__Z9scale_vecPffiPffiE8__handle";
	struct prefix_walk walk = { .want = handle };
	const struct elfsym_sym *sym;
	struct elfsym *es;
	char kernel[128];

	if (access(path, R_OK)) {
		SKIP("%s: %s; unit.mk builds it only where nvcc is installed", path, strerror(errno));
		return;
	}
	es = elfsym__open(path);
	CHECK(es, "open %s: %s", path, strerror(errno));
	if (!es)
		return;

	/* static cudart: the launch path is a local in .symtab, invisible to .dynsym */
	sym = elfsym__find_func(es, "__cudaLaunchKernel");
	CHECK(sym && !sym->global && !sym->dynamic && sym->kind == ELFSYM_FUNC,
	      "local __cudaLaunchKernel in .symtab");

	CHECK(elfsym__each_prefix(es, "_ZZ", note_sym, &walk) >= 6,
	      "__f, __handle, __tmp for each of two kernels: %d", walk.nr);
	sym = walk.found;
	CHECK(sym && sym->kind == ELFSYM_OBJECT && !sym->global && sym->size == 8,
	      "%s as an 8-byte local OBJECT", handle);
	CHECK(sym && cuda_stub_kernel_name(sym->name, "__handle", kernel, sizeof(kernel)) == 0 &&
	      strcmp(kernel, "_Z9scale_vecPffi") == 0, "kernel name from the __handle static");

	sym = elfsym__find_func(es, "_ZL32__device_stub__ZN2ns2tkIiEEvPT_iPii");
	CHECK(sym && !sym->global, "internal-linkage stub of the template kernel");
	CHECK(sym && cuda_stub_kernel_name(sym->name, NULL, kernel, sizeof(kernel)) == 0 &&
	      strcmp(kernel, "_ZN2ns2tkIiEEvPT_i") == 0, "template kernel name from its stub");
	elfsym__free(es);
}

static void test_errors(void)
{
	errno = 0;
	CHECK(!elfsym__open("/nonexistent/libx.so") && errno == ENOENT, "missing: errno %d", errno);
	errno = 0;
	CHECK(!elfsym__open(UNIT_DATA_DIR "/maps_cuda_job.txt") && errno == ENOEXEC,
	      "text file: errno %d", errno);
	errno = 0;
	CHECK(!elfsym__open(UNIT_OUT_DIR "/symfix2.o") && errno == ENOEXEC,
	      "relocatable object: errno %d", errno);
	errno = 0;
	CHECK(!elfsym__open(UNIT_DATA_DIR) && errno == EISDIR, "directory: errno %d", errno);
	elfsym__free(NULL);
	elfsym_cache__free(NULL);
}

/* A copy of path in a fresh temporary directory, or NULL. */
static char *copy_file(const char *path, char *dir, size_t dir_size)
{
	static char copy[4096];
	char buf[65536];
	int in, out;
	ssize_t n;

	snprintf(dir, dir_size, "/tmp/tptrace-elfsym-XXXXXX");
	if (!mkdtemp(dir))
		return NULL;
	snprintf(copy, sizeof(copy), "%s/copy.so", dir);
	in = open(path, O_RDONLY);
	out = open(copy, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, n) != n)
			break;
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	return in >= 0 && out >= 0 ? copy : NULL;
}

static void test_cache(void)
{
	struct elfsym_cache *cache = elfsym_cache__new();
	struct elfsym *a, *b, *c;
	char dir[64], *copy;

	CHECK(cache, "cache new");
	if (!cache)
		return;
	a = elfsym_cache__get(cache, UNIT_OUT_DIR "/symfix");
	CHECK(a && elfsym__find_func(a, "symfix_static_fn"), "cache get symfix");
	CHECK_U64(elfsym_cache__nr_opened(cache), 1);
	b = elfsym_cache__get(cache, UNIT_OUT_DIR "/symfix");
	CHECK(a == b, "same path: same entry");
	CHECK_U64(elfsym_cache__nr_opened(cache), 1);
	b = elfsym_cache__get(cache, UNIT_OUT_DIR "/../unit/symfix");
	CHECK(a == b, "other spelling of the path: same entry");
	CHECK_U64(elfsym_cache__nr_opened(cache), 1);

	/* same build-id, another inode: found without reading the symbols again */
	copy = copy_file(UNIT_OUT_DIR "/symfix", dir, sizeof(dir));
	CHECK(copy, "copy symfix: %s", strerror(errno));
	if (copy) {
		c = elfsym_cache__get(cache, copy);
		CHECK(c == a, "copy: same entry by build-id");
		CHECK_U64(elfsym_cache__nr_opened(cache), 1);
		unlink(copy);
		rmdir(dir);
	}

	b = elfsym_cache__get(cache, UNIT_OUT_DIR "/libsymfix.so");
	CHECK(b && b != a, "second file");
	CHECK_U64(elfsym_cache__nr_opened(cache), 2);

	/* failures are remembered */
	errno = 0;
	c = elfsym_cache__get(cache, UNIT_DATA_DIR "/maps_cuda_job.txt");
	CHECK(!c && errno == ENOEXEC, "not ELF: errno %d", errno);
	CHECK_U64(elfsym_cache__nr_opened(cache), 3);
	errno = 0;
	c = elfsym_cache__get(cache, UNIT_DATA_DIR "/maps_cuda_job.txt");
	CHECK(!c && errno == ENOEXEC, "not ELF again: errno %d", errno);
	CHECK_U64(elfsym_cache__nr_opened(cache), 3);
	errno = 0;
	c = elfsym_cache__get(cache, "/nonexistent/libx.so");
	CHECK(!c && errno == ENOENT, "missing: errno %d", errno);
	CHECK_U64(elfsym_cache__nr_opened(cache), 3);

	elfsym_cache__free(cache);
}

int main(void)
{
	test_cudart();
	test_symfix_exec();
	test_symfix_shared();
	test_usdt_providers();
	test_stubfix();
	test_errors();
	test_cache();
	return check_done();
}
