/* SPDX-License-Identifier: MIT */
/* /proc/<pid>/maps: parse once, look addresses up many times. Paths are built in
 * procmaps__path() and parsing takes a FILE*, so tests run the parser on saved files. */
#ifndef TPTRACE_PROCMAPS_H
#define TPTRACE_PROCMAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct vma {
	uint64_t start, end;	/* [start, end) virtual addresses */
	uint64_t offset;	/* file offset of start */
	uint64_t inode;
	uint32_t dev_major, dev_minor;
	char perms[5];		/* "r-xp" */
	char *path;		/* NULL for anonymous mappings; "[heap]" etc. kept as is */
	bool deleted;		/* path ended in " (deleted)"; the suffix is stripped from path */
};

struct procmaps {
	struct vma *vmas;	/* sorted by start, as the kernel prints them */
	size_t nr;
};

/* "/proc/<pid>/<file>" into buf; file may be "maps", "root", "environ", "comm", "task/123/comm" ...
 * Returns 0 or -ENAMETOOLONG. */
int procmaps__path(char *buf, size_t size, int pid, const char *file);

/* Parse maps text. NULL and errno on a malformed line or ENOMEM. */
struct procmaps *procmaps__parse(FILE *f);
/* procmaps__parse(/proc/<pid>/maps). NULL and errno (ENOENT/ESRCH when the pid is gone). */
struct procmaps *procmaps__load(int pid);
void procmaps__free(struct procmaps *maps);

/* Adds to maps the file mappings of old whose range no vma of maps overlaps (code unmapped
 * since old was read: a library closed, or a process inside exit() read half torn down), so
 * records taken while old was current still find their object. 0 or -ENOMEM (maps as it was). */
int procmaps__keep_vacated(struct procmaps *maps, const struct procmaps *old);

/* The vma holding addr, or NULL. Binary search. */
const struct vma *procmaps__find(const struct procmaps *maps, uint64_t addr);

/* Path through which this process can open a file the target maps, honouring the target's
 * mount namespace: "/proc/<pid>/root<path>". */
int procmaps__target_path(char *buf, size_t size, int pid, const char *path);

/* The name of thread tid of pid (/proc/<pid>/task/<tid>/comm) into buf; "" when the thread
 * is gone. Returns 0 or a negative errno. */
int procmaps__thread_name(int pid, int tid, char *buf, size_t size);

/* Whether process or thread id is gone or exiting: no /proc/<id>/stat (ENOENT, ESRCH), or its
 * state Z (a zombie) or X. Any other error to open it says no. */
bool procmaps__gone(int id);

#endif
