// SPDX-License-Identifier: MIT
/* Whole-or-nothing files (atomic_file.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "atomic_file.h"

int atomic_file__open(struct atomic_file *af, int dirfd, const char *name, mode_t mode)
{
	static unsigned int counter;
	struct timespec ts;

	af->dirfd = dirfd;
	af->fd = -1;
	af->tmp[0] = '\0';
	if (!*name || strchr(name, '/') ||
	    snprintf(af->name, sizeof(af->name), "%s", name) >= (int)sizeof(af->name))
		return -EINVAL;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	/* pid, counter and clock: unique among our writers; O_EXCL settles the rest */
	for (int tries = 0; af->fd < 0 && tries < 100; tries++) {
		if (snprintf(af->tmp, sizeof(af->tmp), ".%s.tmp%d.%u.%lx", name, getpid(),
			     __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED),
			     (unsigned long)ts.tv_nsec) >= (int)sizeof(af->tmp)) {
			af->tmp[0] = '\0';
			return -ENAMETOOLONG;
		}
		af->fd = openat(dirfd, af->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
				mode);
		if (af->fd < 0 && errno != EEXIST) {
			int err = -errno;

			af->tmp[0] = '\0';
			return err;
		}
	}
	if (af->fd < 0) {
		af->tmp[0] = '\0';
		return -EEXIST;
	}
	/* the mode as asked, whatever the umask (the callers chose it knowingly) */
	if (fchmod(af->fd, mode)) {
		int err = -errno;

		atomic_file__abort(af);
		return err;
	}
	return 0;
}

void atomic_file__abort(struct atomic_file *af)
{
	if (af->fd >= 0)
		close(af->fd);
	af->fd = -1;
	if (af->tmp[0])
		unlinkat(af->dirfd, af->tmp, 0);
	af->tmp[0] = '\0';
}

int atomic_file__commit(struct atomic_file *af, bool sync)
{
	int err = 0;

	if (af->fd >= 0) {
		if (sync && fsync(af->fd))
			err = -errno;
		if (close(af->fd) && !err)
			err = -errno;
		af->fd = -1;
	}
	if (!err && renameat(af->dirfd, af->tmp, af->dirfd, af->name))
		err = -errno;
	if (err)
		atomic_file__abort(af);
	af->tmp[0] = '\0';
	return err;
}

int atomic_file__write(int dirfd, const char *name, const void *data, size_t len, mode_t mode,
		       bool sync)
{
	struct atomic_file af;
	size_t off = 0;
	int err = atomic_file__open(&af, dirfd, name, mode);

	if (err)
		return err;
	while (off < len) {
		ssize_t n = write(af.fd, (const char *)data + off, len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = -errno;
			atomic_file__abort(&af);
			return err;
		}
		off += n;
	}
	return atomic_file__commit(&af, sync);
}

int atomic_file__dir_of(const char *path, const char **base)
{
	const char *slash = strrchr(path, '/');
	char dir[PATH_MAX];
	int dirfd;

	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else if (slash - path >= (long)sizeof(dir))
		return -ENAMETOOLONG;
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return -errno;
	*base = slash ? slash + 1 : path;
	return dirfd;
}

int atomic_file__write_path(const char *path, const void *data, size_t len, mode_t mode,
			    bool sync)
{
	const char *base;
	int dirfd = atomic_file__dir_of(path, &base), err;

	if (dirfd < 0)
		return dirfd;
	err = atomic_file__write(dirfd, base, data, len, mode, sync);
	close(dirfd);
	return err;
}
