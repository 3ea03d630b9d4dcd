/* SPDX-License-Identifier: MIT */
/* Files that appear whole or not at all: written under a temp name in the target's own
 * directory, then renamed over the name. The temp name starts with '.' (no reader's glob
 * takes it for the real file) and is created O_EXCL|O_NOFOLLOW relative to a directory fd:
 * nothing planted in the directory (a link, a file of the same name) is written through,
 * and rename replaces a link at the final name instead of following it. Used by the dumps,
 * trigger records, the metrics file and `tptrace stacks -o`. */
#ifndef TPTRACE_ATOMIC_FILE_H
#define TPTRACE_ATOMIC_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct atomic_file {
	int dirfd;			/* not owned */
	int fd;				/* the temp file; -1 once closed */
	char name[256];			/* final name, relative to dirfd */
	char tmp[256];			/* temp name, relative to dirfd; "" when none */
};

/* Creates the temp file for dirfd/name with mode. 0 or -errno. */
int atomic_file__open(struct atomic_file *af, int dirfd, const char *name, mode_t mode);
/* fsync (sync), close (unless the caller closed af->fd and set it to -1), rename over name.
 * On failure the temp file is removed. 0 or -errno. */
int atomic_file__commit(struct atomic_file *af, bool sync);
/* Drops the temp file (a failed write). */
void atomic_file__abort(struct atomic_file *af);
/* The whole of data as dirfd/name. 0 or -errno. */
int atomic_file__write(int dirfd, const char *name, const void *data, size_t len, mode_t mode,
		       bool sync);
/* The directory of path, opened O_DIRECTORY (the fd), and its last component in *base (a
 * pointer into path). -errno on failure. */
int atomic_file__dir_of(const char *path, const char **base);
/* The same for a path: its directory opened (O_DIRECTORY) for the call. */
int atomic_file__write_path(const char *path, const void *data, size_t len, mode_t mode,
			    bool sync);

#endif
