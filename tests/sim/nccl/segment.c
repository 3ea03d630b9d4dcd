// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The shared segment of one simulated communicator: creation race, join/leave, the robust
 * process-shared lock and the futex every waiter sleeps on. A rank killed while holding the
 * lock leaves it EOWNERDEAD; the next locker marks it consistent and goes on (the state it
 * guarded is counters only, each update complete before the unlock).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "nccl_sim.h"

static __thread bool need_wake;

void simnccl_log(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	n = snprintf(line, sizeof(line), "tpsim-nccl[%d]: ", (int)getpid());
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	va_end(ap);
	strcat(line, "\n");
	fputs(line, stderr);
}

void seg_name_from_id(const ncclUniqueId *id, char *name, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = (size_t)snprintf(name, len, "/tpsim-nccl-");

	for (int i = 0; i < 20 && n + 2 < len; i++) {
		name[n++] = hex[(unsigned char)id->internal[i] >> 4];
		name[n++] = hex[(unsigned char)id->internal[i] & 15];
	}
	name[n] = '\0';
}

static long futex(uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
	/* Not FUTEX_PRIVATE: waiters live in several processes mapping the same object. */
	return syscall(SYS_futex, word, op, val, ts, NULL, 0);
}

void seg_lock(struct seg *g)
{
	if (pthread_mutex_lock(&g->hdr->lock) == EOWNERDEAD)
		pthread_mutex_consistent(&g->hdr->lock);
}

void seg_changed(struct seg *g)
{
	__atomic_add_fetch(&g->hdr->progress, 1, __ATOMIC_RELEASE);
	need_wake = true;
}

void seg_unlock(struct seg *g)
{
	pthread_mutex_unlock(&g->hdr->lock);
	if (need_wake) {
		need_wake = false;
		futex(&g->hdr->progress, FUTEX_WAKE, INT_MAX, NULL);
	}
}

void seg_wait(struct seg *g, uint32_t gen, int timeout_ms)
{
	struct timespec ts = { timeout_ms / 1000, (timeout_ms % 1000) * 1000000L };

	seg_unlock(g);
	futex(&g->hdr->progress, FUTEX_WAIT, gen, &ts);
	seg_lock(g);
}

static size_t seg_layout(struct seg_hdr *h, int nranks, uint64_t data_max)
{
	size_t off = (sizeof(*h) + 63) & ~(size_t)63;

	h->ranks_off = off;
	off += sizeof(struct seg_rank) * nranks;
	h->xchg_off = off = (off + 63) & ~(size_t)63;
	off += sizeof(struct seg_xchg) * 4 * nranks;
	h->slots_off = off = (off + 63) & ~(size_t)63;
	h->slot_stride = (sizeof(struct seg_slot) + sizeof(struct op_desc) * nranks + 63) &
			 ~(size_t)63;
	off += h->slot_stride * SEG_NSLOTS;
	h->chans_off = off;
	off += sizeof(struct seg_chan) * (size_t)nranks * nranks;
	h->data_off = off = (off + 4095) & ~(size_t)4095;
	h->data_max = data_max;
	off += data_max * SEG_NSLOTS;
	return off;
}

static int seg_map(struct seg *g, const char *name, int nranks)
{
	struct seg_hdr layout = { 0 };
	pthread_mutexattr_t attr;
	struct seg_hdr *h;
	size_t size;
	uint32_t fresh = 0;
	int fd;

	size = seg_layout(&layout, nranks, simnccl_cfg.data_max);
	snprintf(g->name, sizeof(g->name), "%s", name);
	fd = shm_open(name, O_RDWR | O_CREAT, 0600);
	if (fd < 0) {
		simnccl_log("shm_open %s: %s", name, strerror(errno));
		return ncclSystemError;
	}
	/* Every rank sizes it the same (if nranks agree); shrinking never happens. */
	struct stat st;
	if (fstat(fd, &st) == 0 && (size_t)st.st_size < size && ftruncate(fd, size) < 0) {
		simnccl_log("ftruncate %s: %s", name, strerror(errno));
		close(fd);
		return ncclSystemError;
	}
	if (fstat(fd, &st) == 0 && (size_t)st.st_size > size)
		size = st.st_size;
	h = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (h == MAP_FAILED) {
		simnccl_log("mmap %s: %s", name, strerror(errno));
		return ncclSystemError;
	}
	if (__atomic_compare_exchange_n(&h->state, &fresh, 1, false, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE)) {
		layout.state = 1;
		layout.magic = SEG_MAGIC;
		layout.nranks = nranks;
		layout.size = size;
		memcpy(h, &layout, offsetof(struct seg_hdr, lock));
		pthread_mutexattr_init(&attr);
		pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
		pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
		pthread_mutex_init(&h->lock, &attr);
		pthread_mutexattr_destroy(&attr);
		__atomic_store_n(&h->state, 2, __ATOMIC_RELEASE);
	} else {
		while (__atomic_load_n(&h->state, __ATOMIC_ACQUIRE) != 2)
			usleep(200);
	}
	g->hdr = h;
	g->size = size;
	if (h->magic != SEG_MAGIC || h->nranks != (uint32_t)nranks) {
		simnccl_log("%s: segment has nranks %u, this rank says %d", name, h->nranks, nranks);
		munmap(h, size);
		g->hdr = NULL;
		return ncclInvalidArgument;
	}
	return ncclSuccess;
}

static uint64_t mono_ns(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec * 1000000000ull + now.tv_nsec;
}

int seg_join(struct seg *g, const char *name, int nranks, int rank, int timeout_s)
{
	uint64_t deadline = mono_ns() + (uint64_t)timeout_s * 1000000000ull;
	struct seg_rank *me;
	int err;

	err = seg_map(g, name, nranks);
	if (err)
		return err;
	seg_lock(g);
	me = &seg_ranks(g)[rank];
	if (me->present) {
		seg_unlock(g);
		simnccl_log("%s: rank %d joined twice", name, rank);
		munmap(g->hdr, g->size);
		g->hdr = NULL;
		return ncclInvalidArgument;
	}
	me->present = 1;
	me->pid = getpid();
	g->hdr->joined++;
	g->hdr->attached++;
	seg_changed(g);
	while (g->hdr->joined < g->hdr->nranks) {
		if (mono_ns() >= deadline) {
			simnccl_log("%s: rank %d: only %u of %u ranks joined in %d s", name, rank,
				    g->hdr->joined, g->hdr->nranks, timeout_s);
			me->present = 0;
			g->hdr->joined--;
			seg_unlock(g);
			seg_leave(g);
			return ncclSystemError;
		}
		seg_wait(g, __atomic_load_n(&g->hdr->progress, __ATOMIC_ACQUIRE), 100);
	}
	seg_unlock(g);
	if (simnccl_cfg.verbose)
		simnccl_log("%s: rank %d of %d joined", name, rank, nranks);
	return ncclSuccess;
}

void seg_leave(struct seg *g)
{
	bool last;

	if (!g->hdr)
		return;
	seg_lock(g);
	last = --g->hdr->attached == 0;
	seg_changed(g);
	seg_unlock(g);
	if (last)
		shm_unlink(g->name);
	munmap(g->hdr, g->size);
	g->hdr = NULL;
}

/* A segment is stale when it is initialised, someone joined, and every joined pid is gone. */
static bool seg_is_stale(const char *path)
{
	struct seg_hdr *h;
	struct seg_rank *ranks;
	struct stat st;
	bool stale = false;
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		return false;
	if (fstat(fd, &st) < 0 || (size_t)st.st_size < sizeof(*h)) {
		close(fd);
		return false;
	}
	h = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (h == MAP_FAILED)
		return false;
	if (__atomic_load_n(&h->state, __ATOMIC_ACQUIRE) == 2 && h->magic == SEG_MAGIC &&
	    h->size <= (uint64_t)st.st_size && h->nranks <= SEG_MAX_RANKS && h->joined > 0) {
		ranks = (struct seg_rank *)((char *)h + h->ranks_off);
		stale = true;
		for (uint32_t r = 0; r < h->nranks && stale; r++)
			if (ranks[r].present && (kill(ranks[r].pid, 0) == 0 || errno != ESRCH))
				stale = false;
	}
	munmap(h, st.st_size);
	return stale;
}

void seg_reap_stale(void)
{
	char path[512];
	struct dirent *de;
	DIR *dir = opendir("/dev/shm");

	if (!dir)
		return;
	while ((de = readdir(dir))) {
		if (strncmp(de->d_name, "tpsim-nccl-", 11) != 0)
			continue;
		snprintf(path, sizeof(path), "/dev/shm/%s", de->d_name);
		if (seg_is_stale(path)) {
			if (simnccl_cfg.verbose)
				simnccl_log("removing stale %s", path);
			unlink(path);
		}
	}
	closedir(dir);
}
