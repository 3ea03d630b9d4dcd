// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* tptrace fr -a --scope: see fr_scope.h. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>
#include "fr_scope.h"
#include "log.h"

/* Where cgroup v2 is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host). */
static int cgroup2_root(char *buf, size_t size)
{
	char line[4096], mnt[PATH_MAX], fstype[64];
	FILE *f = fopen("/proc/self/mountinfo", "r");
	int err = -ENOENT;

	if (!f)
		return -errno;
	while (err && fgets(line, sizeof(line), f)) {
		/* "36 35 0:30 / /sys/fs/cgroup rw,... - cgroup2 cgroup2 rw" */
		const char *dash = strstr(line, " - ");

		if (!dash || sscanf(dash, " - %63s", fstype) != 1 || strcmp(fstype, "cgroup2") ||
		    sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1 || strlen(mnt) >= size)
			continue;
		strcpy(buf, mnt);
		err = 0;
	}
	fclose(f);
	return err;
}

static int ns_file(const char *path, struct fr_scope *out)
{
	struct stat st;

	if (stat(path, &st) < 0) {
		log_error("--scope: %s: %s\n", path, strerror(errno));
		return -EINVAL;
	}
	out->dev = st.st_dev;
	out->ino = st.st_ino;
	return 0;
}

static int cgroup_dir(const char *path, struct fr_scope *out)
{
	char real[PATH_MAX], root[PATH_MAX];
	struct statfs sf;
	struct stat st;
	const char *rel;
	size_t rlen;

	if (cgroup2_root(root, sizeof(root))) {
		log_error("--scope cgroup=%s: no cgroup v2 hierarchy mounted\n", path);
		return -EINVAL;
	}
	rlen = strlen(root);

	errno = 0;
	if (!realpath(path, real) || stat(real, &st) < 0 || !S_ISDIR(st.st_mode)) {
		log_error("--scope cgroup=%s: not a directory: %s\n", path,
			  errno ? strerror(errno) : "not a directory");
		return -EINVAL;
	}
	if (statfs(real, &sf) < 0 || sf.f_type != CGROUP2_SUPER_MAGIC || strncmp(real, root, rlen) ||
	    (real[rlen] && real[rlen] != '/')) {
		log_error("--scope cgroup=%s: not a cgroup v2 directory under %s\n", path, root);
		return -EINVAL;
	}
	rel = real + rlen;
	if (strlen(rel) >= sizeof(out->cgpath)) {
		log_error("--scope cgroup=%s: path too long\n", path);
		return -EINVAL;
	}
	memcpy(out->cgpath, *rel ? rel : "/", strlen(*rel ? rel : "/") + 1);
	out->ino = st.st_ino;	/* the cgroup id of a cgroup v2 directory */
	out->level = 0;
	for (const char *p = rel; *p; p++)
		if (*p == '/' && p[1])
			out->level++;
	return 0;
}

int fr_scope__parse(const char *arg, struct fr_scope *out)
{
	const char *eq = strchr(arg, '=');
	size_t klen = eq ? (size_t)(eq - arg) : strlen(arg);
	const char *path = eq ? eq + 1 : NULL;

	memset(out, 0, sizeof(*out));
	if (path && !*path) {
		log_error("--scope %s: empty path\n", arg);
		return -EINVAL;
	}
	if (klen == 5 && !strncmp(arg, "pidns", 5)) {
		out->kind = FR_SCOPE_PIDNS;
		return ns_file(path ? path : "/proc/self/ns/pid", out);
	}
	if (klen == 5 && !strncmp(arg, "netns", 5)) {
		out->kind = FR_SCOPE_NETNS;
		return ns_file(path ? path : "/proc/self/ns/net", out);
	}
	if (klen == 6 && !strncmp(arg, "cgroup", 6)) {
		out->kind = FR_SCOPE_CGROUP;
		if (!path) {
			log_error("--scope cgroup needs a directory: cgroup=PATH\n");
			return -EINVAL;
		}
		return cgroup_dir(path, out);
	}
	log_error("invalid --scope '%s' (pidns[=PATH], netns[=PATH] or cgroup=PATH)\n", arg);
	return -EINVAL;
}

static bool in_cgroup(const struct fr_scope *sc, int pid)
{
	char path[64], line[1024];
	size_t n = strlen(sc->cgpath);
	bool in = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", pid);
	f = fopen(path, "r");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		char *p;

		if (strncmp(line, "0::", 3))
			continue;
		p = line + 3;
		p[strcspn(p, "\n")] = '\0';
		in = !strcmp(sc->cgpath, "/") ||
		     (!strncmp(p, sc->cgpath, n) && (p[n] == '\0' || p[n] == '/'));
	}
	fclose(f);
	return in;
}

bool fr_scope__has(const struct fr_scope *sc, int pid)
{
	char path[64];
	struct stat st;

	switch (sc->kind) {
	case FR_SCOPE_NONE:
		return true;
	case FR_SCOPE_PIDNS:
	case FR_SCOPE_NETNS:
		snprintf(path, sizeof(path), "/proc/%d/ns/%s", pid,
			 sc->kind == FR_SCOPE_PIDNS ? "pid" : "net");
		return stat(path, &st) == 0 && (uint64_t)st.st_dev == sc->dev &&
		       (uint64_t)st.st_ino == sc->ino;
	case FR_SCOPE_CGROUP:
		return in_cgroup(sc, pid);
	}
	return false;
}

const char *fr_scope__describe(const struct fr_scope *sc, char *buf, int size)
{
	switch (sc->kind) {
	case FR_SCOPE_PIDNS:
		snprintf(buf, size, "pid namespace %llu", (unsigned long long)sc->ino);
		break;
	case FR_SCOPE_NETNS:
		snprintf(buf, size, "network namespace %llu", (unsigned long long)sc->ino);
		break;
	case FR_SCOPE_CGROUP:
		snprintf(buf, size, "cgroup %s", sc->cgpath);
		break;
	default:
		snprintf(buf, size, "the whole machine");
	}
	return buf;
}
