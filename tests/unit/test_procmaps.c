// SPDX-License-Identifier: MIT
/* procmaps on a saved /proc/<pid>/maps of a CUDA job, on malformed text, and on this process. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "procmaps.h"

static void test_paths(void)
{
	char buf[64], tiny[12];

	CHECK(procmaps__path(buf, sizeof(buf), 4242, "maps") == 0, "path maps");
	CHECK_STR(buf, "/proc/4242/maps");
	CHECK(procmaps__path(buf, sizeof(buf), 7, "task/123/comm") == 0, "path task comm");
	CHECK_STR(buf, "/proc/7/task/123/comm");
	/* "/proc/4242/maps" is 15 chars: 15 bytes is one short for the NUL */
	CHECK(procmaps__path(tiny, 12, 4242, "maps") == -ENAMETOOLONG, "path too long");
	CHECK(procmaps__path(buf, 16, 4242, "maps") == 0, "path exact fit");

	CHECK(procmaps__target_path(buf, sizeof(buf), 4242, "/usr/lib/x.so") == 0, "target path");
	CHECK_STR(buf, "/proc/4242/root/usr/lib/x.so");
	CHECK(procmaps__target_path(buf, 20, 4242, "/usr/lib/x.so") == -ENAMETOOLONG,
	      "target path too long");
	CHECK(procmaps__target_path(buf, sizeof(buf), 4242, "x.so") == -EINVAL, "relative path");
}

static void check_vma(const struct vma *vma, uint64_t start, uint64_t end, const char *perms,
		      uint64_t offset, uint32_t major, uint32_t minor, uint64_t inode,
		      const char *path, bool deleted)
{
	CHECK_U64(vma->start, start);
	CHECK_U64(vma->end, end);
	CHECK_STR(vma->perms, perms);
	CHECK_U64(vma->offset, offset);
	CHECK_U64(vma->dev_major, major);
	CHECK_U64(vma->dev_minor, minor);
	CHECK_U64(vma->inode, inode);
	CHECK_STR(vma->path, path);
	CHECK(vma->deleted == deleted, "vma %" PRIx64 " deleted == %d", start, vma->deleted);
}

static void test_saved(const char *data_dir)
{
	struct procmaps *maps;
	const struct vma *vma;
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "%s/maps_cuda_job.txt", data_dir);
	f = fopen(path, "r");
	CHECK(f, "open %s: %s", path, strerror(errno));
	if (!f)
		return;
	maps = procmaps__parse(f);
	fclose(f);
	CHECK(maps, "parse %s: %s", path, strerror(errno));
	if (!maps)
		return;
	CHECK_U64(maps->nr, 20);
	if (maps->nr != 20)
		goto cleanup;

	check_vma(&maps->vmas[0], 0x55dbaa901000, 0x55dbaa903000, "r--p", 0, 0xfe, 0, 247134,
		  "/opt/job/bin/train", false);
	check_vma(&maps->vmas[5], 0x55dbcaeb6000, 0x55dbcaed7000, "rw-p", 0, 0, 0, 0, "[heap]", false);
	/* anonymous: the kernel prints a trailing space after the inode */
	check_vma(&maps->vmas[6], 0x7fe300000000, 0x7fe300021000, "rw-p", 0, 0, 0, 0, NULL, false);
	check_vma(&maps->vmas[8], 0x7fe31c074000, 0x7fe31c0a6000, "r-xp", 0x74000, 0xfd, 1, 1234567,
		  "/usr/local/cuda/lib/libcudart.so.13", false);
	check_vma(&maps->vmas[11], 0x7fe320000000, 0x7fe320200000, "r-xp", 0x1000, 0, 0x2a, 98765,
		  "/home/user/my project/libkern (v2).so", false);
	check_vma(&maps->vmas[12], 0x7fe320400000, 0x7fe320401000, "r-xp", 0, 0, 0x2a, 98766,
		  "/tmp/jit cache/libjit.so", true);
	check_vma(&maps->vmas[14], 0x7fe32a662000, 0x7fe32a669000, "r--s", 0, 0xfe, 0, 332280,
		  "/usr/lib/x86_64-linux-gnu/gconv/gconv-modules.cache", false);
	check_vma(&maps->vmas[16], 0x7fe32a672000, 0x7fe32a674000, "r-xp", 0, 0, 0, 0, "[vdso]", false);
	check_vma(&maps->vmas[17], 0x7fe32a680000, 0x7fe32a690000, "rw-s", 0, 0, 1, 4096,
		  "/dev/shm/nccl-Xq3v1a", true);
	check_vma(&maps->vmas[19], 0xffffffffff600000, 0xffffffffff601000, "--xp", 0, 0, 0, 0,
		  "[vsyscall]", false);

	/* start inclusive, end exclusive */
	CHECK(procmaps__find(maps, 0x7fe31c074000) == &maps->vmas[8], "find at start");
	CHECK(procmaps__find(maps, 0x7fe31c0a5fff) == &maps->vmas[8], "find at end - 1");
	CHECK(procmaps__find(maps, 0x7fe31c0a6000) == NULL, "find at end (gap follows)");
	CHECK(procmaps__find(maps, 0x7fe31c073fff) == &maps->vmas[7], "find before start");
	CHECK(procmaps__find(maps, 0x55dbaa903000) == &maps->vmas[1], "adjacent vmas: next one");
	CHECK(procmaps__find(maps, 0x55dbaa900fff) == NULL, "below the first");
	CHECK(procmaps__find(maps, 0x55dbaa901000) == &maps->vmas[0], "the first");
	CHECK(procmaps__find(maps, 0xffffffffff600fff) == &maps->vmas[19], "the last");
	CHECK(procmaps__find(maps, 0xffffffffff601000) == NULL, "above the last");
	CHECK(procmaps__find(maps, 0x7fe32a67ffff) == NULL, "in a gap");
	vma = procmaps__find(maps, 0x7fe3201234ab);
	CHECK(vma && vma->path && strcmp(vma->path, "/home/user/my project/libkern (v2).so") == 0,
	      "find in path with spaces");

cleanup:
	procmaps__free(maps);
}

/* NULL and EINVAL, never a half-parsed table. */
static void check_rejects(const char *text, const char *what)
{
	struct procmaps *maps;
	FILE *f = fmemopen((void *)text, strlen(text), "r");

	if (!f) {
		CHECK(f, "fmemopen: %s", strerror(errno));
		return;
	}
	errno = 0;
	maps = procmaps__parse(f);
	CHECK(!maps && errno == EINVAL, "%s: maps %p errno %d", what, (void *)maps, errno);
	procmaps__free(maps);
	fclose(f);
}

static void test_malformed(void)
{
	static const char empty[] = "";
	struct procmaps *maps;
	FILE *f;

	check_rejects("7f00-7f10 r-xp 00000000 fd:01 1\ngarbage\n", "garbage line");
	check_rejects("7f10-7f00 r-xp 00000000 fd:01 1 /x\n", "end before start");
	check_rejects("7f00-7f10 r-xp 00000000 fd:01\n", "no inode");
	check_rejects("7f00-7f10 r-xpq 00000000 fd:01 1 /x\n", "perms too long");
	check_rejects("7f00-7f10 r-xp 00000000 fd:01 12/x\n", "no space before path");
	check_rejects("7f00-7f20 r-xp 00000000 fd:01 1 /a\n7f10-7f30 r-xp 00000000 fd:01 1 /b\n",
		      "overlapping");

	f = fmemopen((void *)empty, 1, "r");	/* a lone NUL: a line that is not a vma */
	if (f) {
		maps = procmaps__parse(f);
		CHECK(!maps, "NUL line parsed");
		procmaps__free(maps);
		fclose(f);
	}
	f = fopen("/dev/null", "r");
	if (f) {
		maps = procmaps__parse(f);
		CHECK(maps && maps->nr == 0, "empty input: %p", (void *)maps);
		CHECK(maps && procmaps__find(maps, 0x1000) == NULL, "find in empty");
		procmaps__free(maps);
		fclose(f);
	}
	procmaps__free(NULL);
}

static void test_self(void)
{
	char exe[PATH_MAX];
	struct procmaps *maps;
	const struct vma *vma;
	ssize_t n;

	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	CHECK(n > 0, "readlink /proc/self/exe: %s", strerror(errno));
	if (n <= 0)
		return;
	exe[n] = '\0';

	maps = procmaps__load(getpid());
	CHECK(maps, "load self: %s", strerror(errno));
	if (!maps)
		return;
	vma = procmaps__find(maps, (uint64_t)(uintptr_t)&test_self);
	CHECK(vma && vma->perms[2] == 'x', "own code is in an executable vma");
	CHECK(vma && vma->path && strcmp(vma->path, exe) == 0, "own code maps %s, got %s", exe,
	      vma && vma->path ? vma->path : "(null)");
	procmaps__free(maps);

	errno = 0;
	maps = procmaps__load(INT_MAX);	/* above pid_max: never a live pid */
	CHECK(!maps && errno == ENOENT, "load of a missing pid: errno %d", errno);
}

static struct procmaps *parse_text(const char *text)
{
	FILE *f = fmemopen((void *)text, strlen(text), "r");
	struct procmaps *m;

	if (!f)
		return NULL;
	m = procmaps__parse(f);
	fclose(f);
	return m;
}

/* A read of a process inside exit() (or after a dlclose) lacks code mapped before: that code
 * stays known where nothing new overlaps it; what was replaced, and anonymous memory, go. */
static void test_keep_vacated(void)
{
	struct procmaps *old = parse_text(
		"55d000000000-55d000001000 r-xp 00000000 fe:00 11 /opt/bin/train\n"
		"7f0000000000-7f0000100000 rw-p 00000000 00:00 0 \n"
		"7f1000000000-7f1000200000 r-xp 00010000 fe:00 22 /usr/lib/libcudart.so.13\n"
		"7f2000000000-7f2000100000 r-xp 00000000 fe:00 33 /usr/lib/libold.so\n"
		"7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0 [stack]\n");
	/* read half torn down: the binary and a new library over part of libold's range */
	struct procmaps *now = parse_text(
		"55d000000000-55d000001000 r-xp 00000000 fe:00 11 /opt/bin/train\n"
		"7f2000080000-7f2000090000 r-xp 00000000 fe:00 44 /usr/lib/libnew.so\n");
	const struct vma *v;

	CHECK(old && now, "parse");
	if (!old || !now)
		goto out;
	CHECK(procmaps__keep_vacated(now, old) == 0, "keep_vacated");
	CHECK_U64(now->nr, 3);
	v = procmaps__find(now, 0x7f1000000123);
	CHECK(v && v->path && !strcmp(v->path, "/usr/lib/libcudart.so.13") && v->inode == 22 &&
	      v->offset == 0x10000, "libcudart kept");
	CHECK(!procmaps__find(now, 0x7f2000000010), "libold replaced in part: not kept");
	v = procmaps__find(now, 0x7f2000080010);
	CHECK(v && !strcmp(v->path, "/usr/lib/libnew.so"), "libnew found");
	CHECK(!procmaps__find(now, 0x7f0000000010), "anonymous memory not kept");
	CHECK(!procmaps__find(now, 0x7ffc00000010), "[stack] not kept");
	for (size_t i = 1; i < now->nr; i++)
		CHECK(now->vmas[i - 1].end <= now->vmas[i].start, "sorted and disjoint at %zu", i);
	CHECK(procmaps__keep_vacated(now, NULL) == 0 && now->nr == 3, "no old maps");
out:
	procmaps__free(old);
	procmaps__free(now);
}

int main(void)
{
	test_keep_vacated();
	test_paths();
	test_saved(UNIT_DATA_DIR);
	test_malformed();
	test_self();
	return check_done();
}
