// SPDX-License-Identifier: MIT
/* Probe plans attached as uprobe_multi links or one by one (attach.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "attach.h"
#include "cuda.h"
#include "elfsym.h"
#include "growbuf.h"
#include "log.h"
#include "target.h"

#define PLAN_MAX	256	/* uprobes per plan: every API of the largest table fits */
#define PLAN_USDT_MAX	8

struct probe_plan {
	const struct target_obj *obj;
	int n;
	struct {
		const char *symbol;
		uint64_t offset;
		uint64_t cookie;
		bool ret;	/* a return probe too */
	} items[PLAN_MAX];
	int nr_usdt;
	struct {
		struct bpf_program *prog;
		const char *provider, *name;
	} usdt[PLAN_USDT_MAX];
};

/* The offsets and cookies of one uprobe_multi link. */
struct probe_batch {
	uint64_t offsets[PLAN_MAX];
	uint64_t cookies[PLAN_MAX];
	int n;
};

#define TP_BPF_LINK_CREATE		28
#define TP_BPF_F_UPROBE_MULTI_RETURN	1

/* union bpf_attr's link_create for uprobe_multi (linux >= 6.6), spelled out because the
 * system's linux/bpf.h and libbpf may predate it. */
struct tp_link_create_uprobe_multi {
	uint32_t prog_fd;
	uint32_t target_fd;
	uint32_t attach_type;
	uint32_t flags;
	uint64_t path;
	uint64_t offsets;
	uint64_t ref_ctr_offsets;
	uint64_t cookies;
	uint32_t cnt;
	uint32_t multi_flags;
	uint32_t pid;
	uint32_t pad[9];
};

/* An empty program of the attach type linked to "/" (not a regular file): a kernel with the
 * link type rejects the path (EBADF), one without rejects the attach type. */
static bool link_type_supported(uint32_t attach_type)
{
	const struct bpf_insn prog[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	LIBBPF_OPTS(bpf_prog_load_opts, load,
		    .expected_attach_type = (enum bpf_attach_type)attach_type);
	struct tp_link_create_uprobe_multi link;
	uint64_t offset = 0;
	int prog_fd, link_fd, err;

	prog_fd = bpf_prog_load(BPF_PROG_TYPE_KPROBE, NULL, "GPL", prog, 2, &load);
	if (prog_fd < 0)
		return false;
	memset(&link, 0, sizeof(link));
	link.prog_fd = prog_fd;
	link.attach_type = attach_type;
	link.path = (uint64_t)(uintptr_t)"/";
	link.offsets = (uint64_t)(uintptr_t)&offset;
	link.cnt = 1;
	link_fd = syscall(__NR_bpf, TP_BPF_LINK_CREATE, &link, sizeof(link));
	err = link_fd < 0 ? errno : 0;
	if (link_fd >= 0)
		close(link_fd);
	close(prog_fd);
	return err == EBADF;
}

bool uprobe_multi__supported(void)
{
	return !getenv("TPTRACE_NO_UPROBE_MULTI") && link_type_supported(TP_BPF_TRACE_UPROBE_MULTI);
}

bool uprobe_session__supported(void)
{
	return !getenv("TPTRACE_NO_UPROBE_MULTI") && !getenv("TPTRACE_NO_UPROBE_SESSION") &&
	       link_type_supported(TP_BPF_TRACE_UPROBE_SESSION);
}

/* ---- links ------------------------------------------------------------------------------ */

static int add_link(struct probe_links *l, struct bpf_link *link)
{
	if (ARRAY_RESERVE(l->links, l->cap_links, l->nr_links + 1, 64))
		return -ENOMEM;
	l->links[l->nr_links++] = link;
	return 0;
}

static int add_fd(struct probe_links *l, int fd)
{
	int *n = realloc(l->fds, (l->nr_fds + 1) * sizeof(*n));

	if (!n)
		return -ENOMEM;
	l->fds = n;
	l->fds[l->nr_fds++] = fd;
	return 0;
}

/* One thread's share of a teardown: items [from, to) of fds (uprobe_multi links) then links. */
struct destroy_slice {
	struct bpf_link **links;
	int *fds;
	int nr_fds, from, to;
};

static void *destroy_slice(void *arg)
{
	struct destroy_slice *s = arg;

	for (int i = s->from; i < s->to; i++) {
		if (i < s->nr_fds)
			close(s->fds[i]);
		else
			bpf_link__destroy(s->links[i - s->nr_fds]);
	}
	return NULL;
}

/* Removing a uprobe waits for an RCU grace period (~tens of ms here), and closing a
 * uprobe_multi link waits for RCU tasks trace and SRCU grace periods (100-170 ms each on this
 * machine, more under load): one after another, a recorder's links took a second to remove
 * (tests/bench/fleet_attach.py, docs/benchmarks.md "Many recorders on one kernel").
 * Concurrent removals share grace periods. */
static void destroy_parallel(struct bpf_link **links, int nr_links, int *fds, int nr_fds)
{
	enum { MAX_THREADS = 64 };
	struct destroy_slice slices[MAX_THREADS];
	pthread_t threads[MAX_THREADS];
	int n = nr_links + nr_fds, nthreads = n < MAX_THREADS ? n : MAX_THREADS, started = 0;

	if (n <= 1) {
		struct destroy_slice all = { links, fds, nr_fds, 0, n };

		destroy_slice(&all);
		return;
	}
	for (int i = 0; i < nthreads; i++) {
		slices[i] = (struct destroy_slice){ links, fds, nr_fds, (int)((long)n * i / nthreads),
						    (int)((long)n * (i + 1) / nthreads) };
		if (pthread_create(&threads[started], NULL, destroy_slice, &slices[i]))
			destroy_slice(&slices[i]);	/* no thread: do it here */
		else
			started++;
	}
	for (int i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
}

void probe_links__destroy(struct probe_links *l)
{
	if (!l)
		return;
	/* a multi link is removed in one go (one grace period for all its probes); the links
	 * together, in parallel */
	destroy_parallel(l->links, l->nr_links, l->fds, l->nr_fds);
	free(l->fds);
	free(l->links);
	memset(l, 0, sizeof(*l));
}

int probe_links__move(struct probe_links *dst, struct probe_links *src)
{
	int *fds;

	if (!src->nr_links && !src->nr_fds)
		return 0;
	if (ARRAY_RESERVE(dst->links, dst->cap_links, dst->nr_links + src->nr_links, 64))
		return -ENOMEM;
	fds = realloc(dst->fds, (dst->nr_fds + src->nr_fds + 1) * sizeof(*fds));
	if (!fds)
		return -ENOMEM;
	dst->fds = fds;
	memcpy(dst->links + dst->nr_links, src->links, src->nr_links * sizeof(*src->links));
	dst->nr_links += src->nr_links;
	memcpy(dst->fds + dst->nr_fds, src->fds, src->nr_fds * sizeof(*src->fds));
	dst->nr_fds += src->nr_fds;
	free(src->links);
	free(src->fds);
	memset(src, 0, sizeof(*src));
	return 0;
}

/* ---- plans ------------------------------------------------------------------------------ */

struct probe_plan *probe_plan__new(const struct target_obj *obj)
{
	struct probe_plan *plan = calloc(1, sizeof(*plan));

	if (plan)
		plan->obj = obj;
	return plan;
}

void probe_plan__free(struct probe_plan *plan)
{
	free(plan);
}

int probe_plan__add(struct probe_plan *plan, const char *symbol, uint64_t cookie, bool ret)
{
	const struct elfsym_sym *sym = plan->obj->es ? elfsym__find_func(plan->obj->es, symbol) : NULL;
	uint64_t off;

	if (!sym)
		return -ENOENT;
	if (elfsym__vaddr_to_off(plan->obj->es, sym->vaddr, &off))
		return -ERANGE;
	for (int i = 0; i < plan->n; i++)
		if (plan->items[i].offset == off)
			return -EEXIST;
	if (plan->n == PLAN_MAX)
		return -ENOSPC;
	plan->items[plan->n].symbol = symbol;
	plan->items[plan->n].offset = off;
	plan->items[plan->n].cookie = cookie;
	plan->items[plan->n].ret = ret;
	plan->n++;
	return 0;
}

int probe_plan__add_usdt(struct probe_plan *plan, struct bpf_program *prog, const char *provider,
			 const char *name)
{
	if (plan->nr_usdt == PLAN_USDT_MAX)
		return -ENOSPC;
	plan->usdt[plan->nr_usdt].prog = prog;
	plan->usdt[plan->nr_usdt].provider = provider;
	plan->usdt[plan->nr_usdt].name = name;
	plan->nr_usdt++;
	return 0;
}

/* The entries (or only the probes with a return: returns); session: every probe, those with a
 * return marked TP_COOKIE_RET. */
static void batch_of(const struct probe_plan *plan, bool returns, bool session,
		     struct probe_batch *b)
{
	b->n = 0;
	for (int i = 0; i < plan->n; i++) {
		if (returns && !plan->items[i].ret)
			continue;
		b->offsets[b->n] = plan->items[i].offset;
		b->cookies[b->n] = plan->items[i].cookie |
				   (session && plan->items[i].ret ? TP_COOKIE_RET : 0);
		b->n++;
	}
}

/* One uprobe_multi link for the batch (session: prog is a session program): its size, or a
 * negative errno. */
static int attach_batch(const struct probe_plan *plan, int pid, struct bpf_program *prog,
			const struct probe_batch *b, bool retprobe, bool session,
			struct probe_links *links)
{
	struct tp_link_create_uprobe_multi attr;
	int fd, err;

	if (!b->n)
		return 0;
	memset(&attr, 0, sizeof(attr));
	attr.prog_fd = bpf_program__fd(prog);
	attr.attach_type = session ? TP_BPF_TRACE_UPROBE_SESSION : TP_BPF_TRACE_UPROBE_MULTI;
	attr.path = (uint64_t)(uintptr_t)plan->obj->open_path;
	attr.offsets = (uint64_t)(uintptr_t)b->offsets;
	attr.cookies = (uint64_t)(uintptr_t)b->cookies;
	attr.cnt = b->n;
	attr.multi_flags = retprobe ? TP_BPF_F_UPROBE_MULTI_RETURN : 0;
	attr.pid = pid > 0 ? pid : 0;	/* 0: every process (a system-wide link) */
	fd = syscall(__NR_bpf, TP_BPF_LINK_CREATE, &attr, sizeof(attr));
	if (fd < 0)
		return -errno;
	err = add_fd(links, fd);
	if (err) {
		close(fd);
		return err;
	}
	return b->n;
}

/* Whether pid has exited (or is exiting: its /proc/PID/root is gone once it is a zombie). A
 * probe that fails then is no attach error: there is nothing left to probe. */
static bool pid_gone(int pid)
{
	char root[64];

	if (pid <= 0)	/* system-wide probes belong to no process */
		return false;
	snprintf(root, sizeof(root), "/proc/%d/root/", pid);
	return access(root, F_OK) != 0 && (errno == ENOENT || errno == ESRCH);
}

/* One perf-event uprobe: 1 attached, 0 failed (counted), or a negative errno (EPERM: none
 * will attach; ESRCH: the process exited meanwhile). */
static int attach_single(const struct probe_plan *plan, int pid, struct bpf_program *prog, int i,
			 bool retprobe, struct probe_links *links, struct probe_counts *counts)
{
	LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = retprobe, .bpf_cookie = plan->items[i].cookie);
	struct bpf_link *link;
	int err;

	if (!prog)	/* no program: resolve only */
		return 0;
	link = bpf_program__attach_uprobe_opts(prog, pid, plan->obj->open_path,
					       plan->items[i].offset, &opts);
	if (!link) {
		err = -errno;
		if ((err == -ESRCH || err == -ENOENT) && pid_gone(pid))
			return -ESRCH;
		counts->errors++;
		if (err == -EPERM || err == -EACCES)
			return err;
		log_verbose("failed to attach %s%s in %s (pid %d): %s\n",
			    retprobe ? "return of " : "", plan->items[i].symbol, plan->obj->path, pid,
			    strerror(-err));
		return 0;
	}
	err = add_link(links, link);
	if (err) {
		bpf_link__destroy(link);
		return err;
	}
	return 1;
}

/* The multi links, returns first; < 0 when the kernel refused them and the probes go one by one
 * (the returns may already be attached: *rets_done; then not the entries: *entries_done). */
static int attach_multi(const struct probe_plan *plan, int pid, const struct probe_progs *progs,
			struct probe_links *links, struct probe_counts *counts, bool *entries_done,
			bool *rets_done)
{
	struct probe_batch *b = malloc(sizeof(*b));
	int r;

	if (!b)
		return -ENOMEM;
	/* one session link: each probe's entry and return come in together (a return runs only
	 * after its entry did) */
	if (progs->session) {
		batch_of(plan, false, true, b);
		r = attach_batch(plan, pid, progs->session, b, false, true, links);
		if (r >= 0) {
			*entries_done = *rets_done = true;
			counts->entries += r;
			batch_of(plan, true, false, b);
			counts->returns += b->n;
			free(b);
			return r;
		}
		log_verbose("uprobe session link on %s: %s; entry and return links instead\n",
			    plan->obj->path, strerror(-r));
	}
	/* returns first: a call entered between the two attaches then has a return and no entry
	 * (ignored), never an entry whose return is never seen (a call "stuck" forever, which
	 * the flight recorder would report as a hang) */
	batch_of(plan, true, false, b);
	r = !b->n ? 0 : progs->ret_multi ? attach_batch(plan, pid, progs->ret_multi, b, true,
							false, links)
					 : -ENOTSUP;
	if (r >= 0) {
		counts->returns += r;
		*rets_done = true;
		batch_of(plan, false, false, b);
		r = attach_batch(plan, pid, progs->entry_multi, b, false, false, links);
		if (r >= 0) {
			*entries_done = true;
			counts->entries += r;
		}
	}
	free(b);
	return r;
}

static int attach_usdt(const struct probe_plan *plan, int pid, struct probe_links *links,
		       struct probe_counts *counts)
{
	int n = 0;

	for (int i = 0; i < plan->nr_usdt; i++) {
		struct bpf_link *link;
		int err;

		link = bpf_program__attach_usdt(plan->usdt[i].prog, pid, plan->obj->open_path,
						plan->usdt[i].provider, plan->usdt[i].name, NULL);
		if (!link) {
			err = -errno;
			counts->errors++;
			if (err == -EPERM || err == -EACCES)
				return err;
			log_verbose("failed to attach USDT %s:%s in %s (pid %d): %s\n",
				    plan->usdt[i].provider, plan->usdt[i].name, plan->obj->path, pid,
				    strerror(-err));
			continue;
		}
		err = add_link(links, link);
		if (err) {
			bpf_link__destroy(link);
			return err;
		}
		counts->usdt++;
		n++;
	}
	return n;
}

int probe_plan__attach(const struct probe_plan *plan, int pid, const struct probe_progs *progs,
		       struct probe_links *links, struct probe_counts *counts)
{
	int before = counts->entries + counts->returns + counts->usdt, r;
	bool entries_done = false, returns_done = false, rets_multi = false;

	if ((progs->entry_multi || progs->session) && plan->n) {
		r = attach_multi(plan, pid, progs, links, counts, &entries_done, &rets_multi);
		returns_done = r >= 0;
		if (r == -EPERM || r == -ENOMEM)
			return r;
		if ((r == -ESRCH || r == -ENOENT) && pid_gone(pid))
			return -ESRCH;
		if (r < 0)
			log_verbose("uprobe_multi on %s: %s; attaching one by one\n",
				    plan->obj->path, strerror(-r));
	}
	for (int i = 0; i < plan->n && !returns_done; i++) {
		int rr = 0;

		/* the return probe before the entry probe (attach_multi says why) */
		if (plan->items[i].ret && !rets_multi) {
			rr = attach_single(plan, pid, progs->ret, i, true, links, counts);
			if (rr < 0)
				return rr;
			counts->returns += rr;
		}
		r = entries_done ? 1 : attach_single(plan, pid, progs->entry, i, false, links, counts);
		if (r < 0)
			return r;
		counts->entries += entries_done ? 0 : r;
	}
	r = attach_usdt(plan, pid, links, counts);
	if (r < 0)
		return r;
	return counts->entries + counts->returns + counts->usdt - before;
}
