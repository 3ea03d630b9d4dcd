/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * tptrace fr -a --scope: which processes one recorder owns when several share a machine, as a
 * DaemonSet pod per node does (tests/fleet: hosts as network namespaces). Decided in BPF where
 * -a's calls are filtered (bpf/cuda.bpf.c fr_map: a process out of scope never enters fr_pids)
 * and here for the /proc scans.
 *   pidns[=PATH]   processes whose pid namespace is PATH (a namespace file, e.g.
 *                  /proc/PID/ns/pid); default: tptrace's own. Exactly that namespace, not its
 *                  children.
 *   netns[=PATH]   the same for network namespaces (/run/netns/NAME, /proc/PID/ns/net).
 *   cgroup=PATH    processes in the cgroup v2 directory PATH or below it.
 */
#ifndef TPTRACE_FR_SCOPE_H
#define TPTRACE_FR_SCOPE_H

#include <stdbool.h>
#include <stdint.h>

enum fr_scope_kind { FR_SCOPE_NONE = 0, FR_SCOPE_PIDNS, FR_SCOPE_NETNS, FR_SCOPE_CGROUP };

struct fr_scope {
	enum fr_scope_kind kind;
	uint64_t dev, ino;	/* namespace file; cgroup: ino is the cgroup id */
	uint32_t level;		/* cgroup: depth below the cgroup2 root */
	char cgpath[512];	/* cgroup: path relative to the cgroup2 root ("/a/b") */
};

/* Parses a --scope argument; 0, or -EINVAL after one error line. */
int fr_scope__parse(const char *arg, struct fr_scope *out);
/* Whether pid is in scope (always with FR_SCOPE_NONE; false when pid is gone). */
bool fr_scope__has(const struct fr_scope *sc, int pid);
/* "netns 4026532289" etc., for the start line. */
const char *fr_scope__describe(const struct fr_scope *sc, char *buf, int size);

#endif /* TPTRACE_FR_SCOPE_H */
