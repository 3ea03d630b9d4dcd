// SPDX-License-Identifier: MIT
/* Reads the pending uretprobe returns of a process through bpf/uretinst.bpf.c (an iter/task
 * program) and answers, per thread and slot, the return address the trampoline replaced.
 *
 * The program is loaded once per tptrace process (the verifier's work is paid once, not per
 * snapshot) and attached per read with a pid filter (kernel >= 6.1), so one read() walks only
 * that process's threads; on an older kernel the filter is refused and every task is
 * walked, the other processes' records skipped here. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "growbuf.h"
#include "uretinst.h"	/* user/stacks/uretinst.h: the include path puts user/ first */
#include "../../bpf/uretinst.h"
#include "uretinst.skel.h"

struct ui_inst {
	uint64_t func, stack, orig_ret_vaddr;
	bool chained;
};

struct ui_thread {
	int tid;
	uint32_t depth;
	bool cut;
	struct ui_inst *inst;	/* head (newest) first */
	int nr, cap;
};

struct uretinst {
	uint64_t trampoline;
	struct ui_thread *threads;
	int nr_threads, cap_threads;
};

static pthread_mutex_t prog_lock = PTHREAD_MUTEX_INITIALIZER;
static struct uretinst_bpf *prog_skel;
static int prog_err;	/* the load's negative errno, once it failed */

static struct uretinst_bpf *prog_get(void)
{
	struct uretinst_bpf *skel;

	pthread_mutex_lock(&prog_lock);
	if (!prog_skel && !prog_err) {
		prog_skel = uretinst_bpf__open_and_load();
		if (!prog_skel)
			prog_err = errno ? -errno : -EINVAL;
	}
	skel = prog_skel;
	pthread_mutex_unlock(&prog_lock);
	if (!skel)
		errno = -prog_err;
	return skel;
}

static struct ui_thread *add_thread(struct uretinst *ui, int tid)
{
	if (ARRAY_RESERVE(ui->threads, ui->cap_threads, ui->nr_threads + 1, 16))
		return NULL;
	memset(&ui->threads[ui->nr_threads], 0, sizeof(ui->threads[0]));
	ui->threads[ui->nr_threads].tid = tid;
	return &ui->threads[ui->nr_threads++];
}

static int add_inst(struct ui_thread *t, const struct uretinst_inst *r)
{
	if (ARRAY_RESERVE(t->inst, t->cap, t->nr + 1, 8))
		return -ENOMEM;
	t->inst[t->nr++] = (struct ui_inst){ .func = r->func, .stack = r->stack,
					     .orig_ret_vaddr = r->orig_ret_vaddr,
					     .chained = r->chained };
	return 0;
}

struct uretinst *uretinst__parse(const void *buf, size_t len, int pid, char *err, size_t errsz)
{
	struct uretinst *ui = calloc(1, sizeof(*ui));
	struct ui_thread *cur = NULL;	/* the thread the instances belong to; NULL: skip */
	bool cur_other = false;		/* the current thread is another process's */
	const char *p = buf;
	size_t off = 0, rec_off = 0;	/* rec_off: where the record being read starts */
	int ret = 0;

	if (!ui) {
		snprintf(err, errsz, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	while (off < len) {
		struct uretinst_thread th;
		struct uretinst_inst ri;
		uint32_t type;

		rec_off = off;
		if (len - off < sizeof(type))
			goto bad;
		memcpy(&type, p + off, sizeof(type));
		switch (type) {
		case URETINST_THREAD:
		case URETINST_CUT:
			if (len - off < sizeof(th))
				goto bad;
			memcpy(&th, p + off, sizeof(th));
			off += sizeof(th);
			if (type == URETINST_CUT) {
				if (!cur_other && (!cur || cur->tid != (int)th.tid))
					goto bad;
				if (cur)
					cur->cut = true;
				continue;
			}
			cur_other = (int)th.tgid != pid;
			cur = NULL;
			if (cur_other)
				continue;
			if (ui->trampoline && th.xol_vaddr != ui->trampoline)
				goto bad;	/* one mm, one area */
			ui->trampoline = th.xol_vaddr;
			cur = add_thread(ui, th.tid);
			if (!cur) {
				ret = -ENOMEM;
				goto fail;
			}
			cur->depth = th.depth;
			break;
		case URETINST_INST:
			if (len - off < sizeof(ri))
				goto bad;
			memcpy(&ri, p + off, sizeof(ri));
			off += sizeof(ri);
			if (cur_other)
				continue;
			if (!cur || cur->tid != (int)ri.tid)
				goto bad;
			if (add_inst(cur, &ri)) {
				ret = -ENOMEM;
				goto fail;
			}
			break;
		default:
			goto bad;
		}
	}
	return ui;
bad:
	snprintf(err, errsz, "malformed return-instance record at byte %zu of %zu", rec_off, len);
	ret = -EINVAL;
fail:
	if (ret == -ENOMEM)
		snprintf(err, errsz, "out of memory");
	uretinst__free(ui);
	errno = -ret;
	return NULL;
}

int uretinst__prepare(void)
{
	return prog_get() ? 0 : -errno;
}

struct uretinst *uretinst__read(int pid, char *err, size_t errsz)
{
	struct uretinst_bpf *skel = prog_get();
	union bpf_iter_link_info linfo = { .task.pid = pid };
	LIBBPF_OPTS(bpf_iter_attach_opts, opts, .link_info = &linfo,
		    .link_info_len = sizeof(linfo));
	struct bpf_link *link;
	struct uretinst *ui = NULL;
	char *buf = NULL;
	size_t len = 0, cap = 0;
	int fd = -1, ret = 0;

	if (!skel) {
		ret = -errno;
		snprintf(err, errsz, "return instances unreadable: loading the task iterator: %s",
			 strerror(errno));
		errno = -ret;
		return NULL;
	}
	link = bpf_program__attach_iter(skel->progs.uretinst_dump, &opts);
	if (!link && errno == EINVAL)	/* no pid filter before 6.1: every task */
		link = bpf_program__attach_iter(skel->progs.uretinst_dump, NULL);
	if (!link) {
		ret = -errno;
		snprintf(err, errsz, "return instances unreadable: attaching the task iterator: %s",
			 strerror(errno));
		goto out;
	}
	fd = bpf_iter_create(bpf_link__fd(link));
	if (fd < 0) {
		ret = -errno;
		snprintf(err, errsz, "return instances unreadable: bpf_iter_create: %s",
			 strerror(errno));
		goto out;
	}
	for (;;) {
		ssize_t n;

		if (cap - len < 4096) {
			char *nb = realloc(buf, cap ? 2 * cap : 16384);

			if (!nb) {
				ret = -ENOMEM;
				snprintf(err, errsz, "out of memory");
				goto out;
			}
			buf = nb;
			cap = cap ? 2 * cap : 16384;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = -errno;
			snprintf(err, errsz, "return instances unreadable: reading the iterator: %s",
				 strerror(errno));
			goto out;
		}
		if (!n)
			break;
		len += n;
	}
	ui = uretinst__parse(buf, len, pid, err, errsz);
	if (!ui)
		ret = -errno;
out:
	if (fd >= 0)
		close(fd);
	bpf_link__destroy(link);
	free(buf);
	if (ret) {
		uretinst__free(ui);
		errno = -ret;
		return NULL;
	}
	return ui;
}

uint64_t uretinst__trampoline(const struct uretinst *ui)
{
	return ui ? ui->trampoline : 0;
}

int uretinst__resolve(const struct uretinst *ui, int tid, uint64_t slot, uint64_t *orig)
{
	const struct ui_thread *t = NULL;

	if (!ui)
		return -ENOENT;
	for (int i = 0; i < ui->nr_threads && !t; i++)
		if (ui->threads[i].tid == tid)
			t = &ui->threads[i];
	if (!t)
		return -ENOENT;
	/* Runs, head first: a chained instance was pushed while its slot already held the
	 * trampoline, and shares the return of the instances below it down to the first
	 * unchained one, whose orig_ret_vaddr is the caller's address (the kernel copied it
	 * into the chained ones). The run's slot is that unchained instance's. */
	for (int i = 0; i < t->nr;) {
		int end = i;

		while (end < t->nr - 1 && t->inst[end].chained)
			end++;
		/* a chained instance with nothing below it: the list was cut under it */
		if (t->inst[end].chained)
			break;
		if (t->inst[end].stack == slot) {
			uint64_t ret_to = t->inst[end].orig_ret_vaddr;

			/* the trampoline itself is no answer (a corrupt or torn read) */
			if (!ret_to || ret_to == ui->trampoline)
				return -ENOENT;
			*orig = ret_to;
			return 0;
		}
		i = end + 1;
	}
	return -ENOENT;
}

int uretinst__nr_threads(const struct uretinst *ui)
{
	return ui ? ui->nr_threads : 0;
}

int uretinst__nr_instances(const struct uretinst *ui)
{
	int n = 0;

	for (int i = 0; ui && i < ui->nr_threads; i++)
		n += ui->threads[i].nr;
	return n;
}

void uretinst__free(struct uretinst *ui)
{
	if (!ui)
		return;
	for (int i = 0; i < ui->nr_threads; i++)
		free(ui->threads[i].inst);
	free(ui->threads);
	free(ui);
}
