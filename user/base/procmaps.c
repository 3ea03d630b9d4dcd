// SPDX-License-Identifier: MIT
/* /proc/<pid>/maps parser. A line looks like
 *   7f3a1c000000-7f3a1c021000 r-xp 00001000 fd:01 1234567   /usr/lib/x86_64-linux-gnu/libc.so.6
 *   7ffd2a1f0000-7ffd2a1f2000 r-xp 00000000 00:00 0          [vdso]
 *   7f3a1c400000-7f3a1c600000 rw-p 00000000 00:00 0
 *   7f3a1d000000-7f3a1d200000 r-xp 00000000 fd:01 42         /tmp/my lib.so (deleted)
 * The path is everything after the inode and its padding, spaces included.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "growbuf.h"
#include "procmaps.h"

#define DELETED_SUFFIX " (deleted)"

int procmaps__path(char *buf, size_t size, int pid, const char *file)
{
	int n = snprintf(buf, size, "/proc/%d/%s", pid, file);

	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	return 0;
}

int procmaps__target_path(char *buf, size_t size, int pid, const char *path)
{
	int n;

	/* the target's root is prepended as is: only absolute paths make sense */
	if (!path || path[0] != '/')
		return -EINVAL;
	n = snprintf(buf, size, "/proc/%d/root%s", pid, path);
	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	return 0;
}

/* One line without its '\n' into vma; vma->path is malloc'ed. */
static int parse_line(const char *line, struct vma *vma)
{
	const char *path;
	size_t len;
	int pos = -1;

	memset(vma, 0, sizeof(*vma));
	if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %" SCNx32 ":%" SCNx32 " %" SCNu64 "%n",
		   &vma->start, &vma->end, vma->perms, &vma->offset, &vma->dev_major, &vma->dev_minor,
		   &vma->inode, &pos) != 7 || pos < 0)
		return -EINVAL;
	if (vma->start >= vma->end || strlen(vma->perms) != 4)
		return -EINVAL;
	if (line[pos] != '\0' && line[pos] != ' ' && line[pos] != '\t')
		return -EINVAL;

	path = line + pos;
	while (*path == ' ' || *path == '\t')
		path++;
	len = strlen(path);
	if (len == 0)
		return 0;	/* anonymous */

	if (len > strlen(DELETED_SUFFIX) &&
	    strcmp(path + len - strlen(DELETED_SUFFIX), DELETED_SUFFIX) == 0) {
		vma->deleted = true;
		len -= strlen(DELETED_SUFFIX);
	}
	vma->path = strndup(path, len);
	if (!vma->path)
		return -ENOMEM;
	return 0;
}

struct procmaps *procmaps__parse(FILE *f)
{
	struct procmaps *maps;
	char *line = NULL;
	size_t line_cap = 0, cap = 0;
	ssize_t n;
	int err = 0;

	maps = calloc(1, sizeof(*maps));
	if (!maps)
		return NULL;

	errno = 0;
	while ((n = getline(&line, &line_cap, f)) >= 0) {
		struct vma *vma;

		if (n > 0 && line[n - 1] == '\n')
			line[--n] = '\0';
		if (n == 0)
			continue;
		if (ARRAY_RESERVE(maps->vmas, cap, maps->nr + 1, 64)) {
			err = -ENOMEM;
			goto cleanup;
		}
		vma = &maps->vmas[maps->nr];
		err = parse_line(line, vma);
		if (err)
			goto cleanup;
		maps->nr++;
		/* procmaps__find() binary-searches: the kernel prints vmas sorted and disjoint */
		if (maps->nr > 1 && vma[-1].end > vma->start) {
			err = -EINVAL;
			goto cleanup;
		}
		errno = 0;
	}
	/* getline() gives -1 on EOF and on error (ESRCH when the target exits mid-read) */
	if (ferror(f))
		err = errno ? -errno : -EIO;

cleanup:
	free(line);
	if (err) {
		procmaps__free(maps);
		errno = -err;
		return NULL;
	}
	return maps;
}

struct procmaps *procmaps__load(int pid)
{
	struct procmaps *maps;
	char path[64];
	FILE *f;
	int err;

	err = procmaps__path(path, sizeof(path), pid, "maps");
	if (err) {
		errno = -err;
		return NULL;
	}
	f = fopen(path, "re");
	if (!f)
		return NULL;
	maps = procmaps__parse(f);
	err = errno;
	fclose(f);
	errno = err;
	return maps;
}

void procmaps__free(struct procmaps *maps)
{
	size_t i;

	if (!maps)
		return;
	for (i = 0; i < maps->nr; i++)
		free(maps->vmas[i].path);
	free(maps->vmas);
	free(maps);
}

/* whether a vma of maps overlaps [start, end) */
static bool overlaps(const struct procmaps *maps, uint64_t start, uint64_t end)
{
	size_t lo = 0, hi = maps->nr;

	/* the first vma ending past start */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (maps->vmas[mid].end <= start)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < maps->nr && maps->vmas[lo].start < end;
}

static int vma_cmp(const void *a, const void *b)
{
	const struct vma *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

int procmaps__keep_vacated(struct procmaps *maps, const struct procmaps *old)
{
	size_t n = maps->nr, cap = maps->nr;

	for (size_t i = 0; old && i < old->nr; i++) {
		const struct vma *v = &old->vmas[i];
		struct vma *c;

		if (!v->path || v->path[0] == '[' || overlaps(maps, v->start, v->end))
			continue;
		/* the added ones are appended past maps->nr: overlaps() sees only the new read */
		if (ARRAY_RESERVE(maps->vmas, cap, n + 1, 16))
			goto nomem;
		c = &maps->vmas[n];
		*c = *v;
		if (!(c->path = strdup(v->path)))
			goto nomem;
		n++;
	}
	if (n != maps->nr) {
		maps->nr = n;
		qsort(maps->vmas, maps->nr, sizeof(*maps->vmas), vma_cmp);
	}
	return 0;
nomem:
	for (size_t i = maps->nr; i < n; i++)
		free(maps->vmas[i].path);
	return -ENOMEM;
}

const struct vma *procmaps__find(const struct procmaps *maps, uint64_t addr)
{
	size_t lo = 0, hi = maps->nr;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct vma *vma = &maps->vmas[mid];

		if (addr < vma->start)
			hi = mid;
		else if (addr >= vma->end)
			lo = mid + 1;
		else
			return vma;
	}
	return NULL;
}

int procmaps__thread_name(int pid, int tid, char *buf, size_t size)
{
	char path[64], rel[48];
	FILE *f;
	int err = 0;

	if (!size)
		return -EINVAL;
	buf[0] = '\0';
	snprintf(rel, sizeof(rel), "task/%d/comm", tid);
	err = procmaps__path(path, sizeof(path), pid, rel);
	if (err)
		return err;
	f = fopen(path, "r");
	if (!f)
		return -errno;
	if (fgets(buf, (int)size, f))
		buf[strcspn(buf, "\n")] = '\0';
	else
		err = -EIO;
	fclose(f);
	return err;
}

bool procmaps__gone(int id)
{
	char path[64], buf[256], *p;
	FILE *f;
	bool gone = true;

	snprintf(path, sizeof(path), "/proc/%d/stat", id);
	f = fopen(path, "re");
	if (!f)
		return errno == ENOENT || errno == ESRCH;
	/* "4242 (comm) S ...": the comm may hold spaces and ')' */
	if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')) && p[1] == ' ')
		gone = p[2] == 'Z' || p[2] == 'X';
	fclose(f);
	return gone;
}
