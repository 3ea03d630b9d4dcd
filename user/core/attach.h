/* SPDX-License-Identifier: MIT */
/* The one uprobe attacher, used by the tracer and the flight recorder (target.c) and by the
 * memory tracer (memtrace.c). A probe plan lists the probes one object needs, resolved once
 * (symbol -> file offset, aliases merged); attaching it makes one uprobe_multi link for the
 * entries and one for the returns where the kernel has them (>= 6.6), else one link per probe;
 * USDT probes go through libbpf's USDT support. Every link lands in a struct probe_links,
 * which detaches them all in one place. */
#ifndef TPTRACE_ATTACH_H
#define TPTRACE_ATTACH_H

#include <stdbool.h>
#include <stdint.h>

struct bpf_link;
struct bpf_program;
struct target_obj;

/* BPF_TRACE_UPROBE_MULTI, spelled out: the system's linux/bpf.h may predate it. A program
 * loaded with this expected attach type serves uprobe_multi links. */
#define TP_BPF_TRACE_UPROBE_MULTI	48

/* Whether this kernel has uprobe_multi links: probed (a throwaway program and link), not
 * guessed from a load failure. Call once up front. TPTRACE_NO_UPROBE_MULTI says no (tests). */
bool uprobe_multi__supported(void);
/* BPF_TRACE_UPROBE_SESSION (linux >= 6.13): one program for the entry and the return of each
 * probe of a uprobe_multi link; the entry's result says whether the return runs. */
#define TP_BPF_TRACE_UPROBE_SESSION	57
/* Whether this kernel has uprobe session links (probed like uprobe_multi__supported).
 * TPTRACE_NO_UPROBE_SESSION (or TPTRACE_NO_UPROBE_MULTI) says no (tests, benchmarks). */
bool uprobe_session__supported(void);

/* The links of one owner (a target's probes, a memory tracer's), detached together. */
struct probe_links {
	struct bpf_link **links;	/* single uprobes and USDT probes */
	int nr_links, cap_links;
	int *fds;			/* uprobe_multi links */
	int nr_fds;
};

/* Detaches every link (removals run concurrently: each waits for an RCU grace period) and
 * empties l. */
void probe_links__destroy(struct probe_links *l);
/* Moves every link of src to the end of dst (src emptied), so that links of many owners are
 * removed in one probe_links__destroy. 0, or -ENOMEM (nothing moved). */
int probe_links__move(struct probe_links *dst, struct probe_links *src);

/* The programs a plan attaches. The *_multi ones are NULL without uprobe_multi; all may be
 * NULL to resolve only (offline replay, benchmarks). */
struct probe_progs {
	struct bpf_program *entry, *ret;
	struct bpf_program *entry_multi, *ret_multi;
	/* a session program (entry and return in one, TP_COOKIE_RET in the cookie of probes
	 * whose return it wants), used instead of the multi pair where set; NULL: none */
	struct bpf_program *session;
};

struct probe_plan;

/* A plan for obj (its symbols and open path are used; obj must outlive the plan). NULL and
 * errno on ENOMEM. */
struct probe_plan *probe_plan__new(const struct target_obj *obj);
void probe_plan__free(struct probe_plan *plan);
/* An entry probe on symbol (and a return probe when ret) with cookie. 0; -ENOENT when obj has
 * no such function; -EEXIST when its address is planned already (an alias: probing it twice
 * would record every call twice); -ERANGE when no segment maps it; -ENOSPC when full. */
int probe_plan__add(struct probe_plan *plan, const char *symbol, uint64_t cookie, bool ret);
/* USDT probe provider:name attached to prog. 0 or -ENOSPC. */
int probe_plan__add_usdt(struct probe_plan *plan, struct bpf_program *prog, const char *provider,
			 const char *name);

struct probe_counts {
	int entries, returns, usdt;	/* attached */
	int errors;			/* probes that would not attach (-v says why) */
};

/* Attaches plan in process pid (-1: every process mapping the file, now and later) into links and adds to counts: entries and returns as one uprobe_multi session link
 * where progs has a session program, else entries as one uprobe_multi link and returns as
 * another where progs has the multi programs, one link per probe otherwise (or when the kernel
 * refuses the multi link); a return probe only where its entry attached.
 * Probes attached (>= 0), or a negative errno that makes attaching pointless (EPERM). */
int probe_plan__attach(const struct probe_plan *plan, int pid, const struct probe_progs *progs,
		       struct probe_links *links, struct probe_counts *counts);

#endif
