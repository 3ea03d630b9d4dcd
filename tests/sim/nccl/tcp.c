// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * TCP transport of the simulated NCCL between hosts (network namespaces): the root's listener
 * and proxies, and the remote rank's link. The protocol and what it promises: nccl_sim.h.
 *
 * Messages: a header { u32 type, u32 len, u64 tag } then len bytes.
 *   rank -> root  MSG_INIT  { i32 nranks, i32 rank, char name[SEG_NAME_MAX] }
 *   root -> rank  MSG_INITR { i32 result }
 *   rank -> root  MSG_OP    tag, { op_desc, i32 peer, u32 nfloats } + nfloats float32 (the
 *                           part of a sum allreduce's sendbuff really reduced)
 *   root -> rank  MSG_DONE  tag, { i32 ok, u32 nfloats } + nfloats float32 (reduced data)
 * The rank's end of the connection closing is its comm leaving; the root's closing is the
 * root process gone (ncclRemoteError, operations hang).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "nccl_sim.h"

enum { MSG_INIT = 1, MSG_INITR, MSG_OP, MSG_DONE };

struct msg_hdr {
	uint32_t type, len;
	uint64_t tag;
};

struct msg_init {
	int32_t nranks, rank;
	char name[SEG_NAME_MAX];
};

struct msg_op {
	struct op_desc desc;
	int32_t peer;
	uint32_t nfloats;
};

struct msg_done {
	int32_t ok;
	uint32_t nfloats;
};

/* ---- sockets ---- */

static int send_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= n;
	}
	return 0;
}

static int recv_all(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = recv(fd, p, len, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= n;
	}
	return 0;
}

/* Reads and drops len bytes. */
static int recv_skip(int fd, size_t len)
{
	char buf[4096];

	while (len) {
		size_t n = len < sizeof(buf) ? len : sizeof(buf);

		if (recv_all(fd, buf, n))
			return -1;
		len -= n;
	}
	return 0;
}

static int send_msg(int fd, uint32_t type, uint64_t tag, const void *a, size_t alen,
		    const void *b, size_t blen)
{
	struct msg_hdr h = { type, (uint32_t)(alen + blen), tag };

	if (send_all(fd, &h, sizeof(h)) || (alen && send_all(fd, a, alen)) ||
	    (blen && send_all(fd, b, blen)))
		return -1;
	return 0;
}

static void nodelay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static uint64_t netns_ino(void)
{
	struct stat st;

	return stat("/proc/self/ns/net", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* ---- ids ---- */

bool tcp_id_is_tcp(const ncclUniqueId *id)
{
	return !memcmp(id->internal, TCP_ID_MAGIC, 4);
}

bool tcp_id_remote(const ncclUniqueId *id)
{
	uint64_t ino;

	memcpy(&ino, id->internal + 26, sizeof(ino));
	return ino != netns_ino();
}

/* ---- the root: listener and proxies ---- */

struct proxy_conn {
	int fd;
	pthread_mutex_t send_lock;
	int refs;			/* reader + one per operation in flight */
	struct ncclComm *shadow;
};

struct proxy_op {
	struct proxy_conn *conn;
	uint64_t tag;
	struct op op;
	float *data;			/* sendbuff, then recvbuff */
	uint32_t nfloats;
};

static void conn_unref(struct proxy_conn *c)
{
	if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL))
		return;
	close(c->fd);
	pthread_mutex_destroy(&c->send_lock);
	free(c);
}

static void *proxy_op_thread(void *arg)
{
	struct proxy_op *p = arg;
	struct msg_done d;
	bool ok = simnccl_run_proxied(&p->op);

	d.ok = ok;
	d.nfloats = ok && p->op.moved ? p->nfloats : 0;
	pthread_mutex_lock(&p->conn->send_lock);
	send_msg(p->conn->fd, MSG_DONE, p->tag, &d, sizeof(d), p->data, d.nfloats * 4ull);
	pthread_mutex_unlock(&p->conn->send_lock);
	conn_unref(p->conn);
	free(p->data);
	free(p);
	return NULL;
}

static void spawn(void *(*fn)(void *), void *arg)
{
	pthread_attr_t attr;
	pthread_t t;

	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 << 10);
	while (pthread_create(&t, &attr, fn, arg) == EAGAIN)
		usleep(1000);
	pthread_attr_destroy(&attr);
}

/* One connection: the remote rank's init, then its operations, until it closes. */
static void *proxy_thread(void *arg)
{
	struct proxy_conn *c = arg;
	struct msg_init in;
	struct msg_hdr h;
	int32_t res;

	if (recv_all(c->fd, &h, sizeof(h)) || h.type != MSG_INIT || h.len != sizeof(in) ||
	    recv_all(c->fd, &in, sizeof(in)))
		goto out;
	in.name[sizeof(in.name) - 1] = '\0';
	res = simnccl_comm_create(&c->shadow, in.name, in.nranks, in.rank);
	if (send_msg(c->fd, MSG_INITR, 0, &res, sizeof(res), NULL, 0) || res)
		goto out;
	for (;;) {
		struct proxy_op *p;
		struct msg_op m;

		if (recv_all(c->fd, &h, sizeof(h)) || h.type != MSG_OP || h.len < sizeof(m) ||
		    recv_all(c->fd, &m, sizeof(m)) || h.len != sizeof(m) + m.nfloats * 4ull)
			break;
		p = calloc(1, sizeof(*p));
		if (!p)
			break;
		p->data = m.nfloats ? malloc(m.nfloats * 4ull) : NULL;
		if (m.nfloats && (!p->data || recv_all(c->fd, p->data, m.nfloats * 4ull))) {
			free(p->data);
			free(p);
			break;
		}
		p->conn = c;
		p->tag = h.tag;
		p->nfloats = m.nfloats;
		p->op.comm = c->shadow;
		p->op.desc = m.desc;
		p->op.peer = m.peer;
		p->op.sendbuff = p->data;
		p->op.recvbuff = p->data;
		__atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
		spawn(proxy_op_thread, p);
	}
out:
	/* the rank left (or died): its operations here are abandoned, the segment left */
	if (c->shadow)
		simnccl_comm_abort(c->shadow);
	conn_unref(c);
	return NULL;
}

static int listen_fd = -1;
static struct sockaddr_in listen_addr;
static pthread_mutex_t listen_lock = PTHREAD_MUTEX_INITIALIZER;

static void *accept_thread(void *arg)
{
	for (;;) {
		int fd = accept(listen_fd, NULL, NULL);
		struct proxy_conn *c;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE)
				continue;
			simnccl_log("accept: %s", strerror(errno));
			return NULL;
		}
		nodelay(fd);
		c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->fd = fd;
		c->refs = 1;
		pthread_mutex_init(&c->send_lock, NULL);
		spawn(proxy_thread, c);
	}
	return NULL;
}

/* One listener per process, on the first TCP id. */
static int root_listen(const char *addr)
{
	socklen_t len = sizeof(listen_addr);
	int fd, err = ncclSuccess;

	pthread_mutex_lock(&listen_lock);
	if (listen_fd >= 0)
		goto out;
	memset(&listen_addr, 0, sizeof(listen_addr));
	listen_addr.sin_family = AF_INET;
	if (inet_pton(AF_INET, addr, &listen_addr.sin_addr) != 1) {
		simnccl_log("TPSIM_NCCL_SOCKET_ADDR '%s' is not an IPv4 address", addr);
		err = ncclInvalidArgument;
		goto out;
	}
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&listen_addr, sizeof(listen_addr)) ||
	    listen(fd, 1024) || getsockname(fd, (struct sockaddr *)&listen_addr, &len)) {
		simnccl_log("listen on %s: %s", addr, strerror(errno));
		if (fd >= 0)
			close(fd);
		err = ncclSystemError;
		goto out;
	}
	listen_fd = fd;
	spawn(accept_thread, NULL);
out:
	pthread_mutex_unlock(&listen_lock);
	return err;
}

int tcp_id_new(ncclUniqueId *id, const char *addr)
{
	uint64_t ino = netns_ino();
	size_t got = 0;
	int err = root_listen(addr);

	if (err)
		return err;
	while (got < NCCL_UNIQUE_ID_BYTES - 4) {
		ssize_t n = getrandom(id->internal + 4 + got, NCCL_UNIQUE_ID_BYTES - 4 - got, 0);

		if (n < 0 && errno != EINTR)
			return ncclSystemError;
		if (n > 0)
			got += n;
	}
	memcpy(id->internal, TCP_ID_MAGIC, 4);
	memcpy(id->internal + 20, &listen_addr.sin_addr.s_addr, 4);
	memcpy(id->internal + 24, &listen_addr.sin_port, 2);
	memcpy(id->internal + 26, &ino, sizeof(ino));
	return ncclSuccess;
}

/* ---- the remote rank's link ---- */

struct tcp_wait {
	uint64_t tag;
	struct op *op;
	bool done, ok;
	struct tcp_wait *next;
};

struct tcp_link {
	int fd;
	struct ncclComm *comm;
	pthread_mutex_t lock;		/* waits, closing */
	pthread_mutex_t send_lock;	/* one message at a time; never held with lock */
	pthread_cond_t cond;
	struct tcp_wait *waits;
	uint64_t next_tag;
	bool closing, broken, reader_started;
	pthread_t reader;
};

static struct tcp_wait *find_wait(struct tcp_link *l, uint64_t tag)
{
	for (struct tcp_wait *w = l->waits; w; w = w->next)
		if (w->tag == tag)
			return w;
	return NULL;
}

static struct tcp_wait *take_wait(struct tcp_link *l, uint64_t tag)
{
	for (struct tcp_wait **p = &l->waits; *p; p = &(*p)->next)
		if ((*p)->tag == tag) {
			struct tcp_wait *w = *p;

			*p = w->next;
			return w;
		}
	return NULL;
}

static void *reader_thread(void *arg)
{
	struct tcp_link *l = arg;
	struct msg_hdr h;
	struct msg_done d;

	for (;;) {
		struct tcp_wait *w;
		int rc = 0;

		if (recv_all(l->fd, &h, sizeof(h)) || h.type != MSG_DONE || h.len < sizeof(d) ||
		    recv_all(l->fd, &d, sizeof(d)) || h.len != sizeof(d) + d.nfloats * 4ull)
			break;
		pthread_mutex_lock(&l->lock);
		w = find_wait(l, h.tag);
		if (w && w->done)
			w = NULL;	/* a duplicate answer: never sent */
		if (w && d.nfloats && w->op->recvbuff &&
		    d.nfloats <= simnccl_moved_elems(w->op))
			rc = recv_all(l->fd, w->op->recvbuff, d.nfloats * 4ull);
		else
			rc = recv_skip(l->fd, d.nfloats * 4ull);
		if (w) {
			w->done = true;
			w->ok = d.ok;
			pthread_cond_broadcast(&l->cond);
		}
		pthread_mutex_unlock(&l->lock);
		if (rc)
			break;
	}
	pthread_mutex_lock(&l->lock);
	if (!l->closing) {
		/* the root is gone: as NCCL's proxy reports a remote failure; the kernels of the
		 * pending operations never finish */
		l->broken = true;
		simnccl_comm_set_async(l->comm, ncclRemoteError);
		if (simnccl_cfg.verbose)
			simnccl_log("connection to the root lost: ncclRemoteError");
	}
	pthread_mutex_unlock(&l->lock);
	return NULL;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000ull + ts.tv_nsec / 1000000;
}

int tcp_link_open(struct tcp_link **out, struct ncclComm *comm, const ncclUniqueId *id,
		  const char *name, int nranks, int rank, int timeout_s)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	uint64_t deadline = mono_ms() + (uint64_t)timeout_s * 1000;
	struct msg_init in = { nranks, rank, "" };
	struct tcp_link *l;
	struct msg_hdr h;
	int32_t res;
	char ip[INET_ADDRSTRLEN];

	memcpy(&sa.sin_addr.s_addr, id->internal + 20, 4);
	memcpy(&sa.sin_port, id->internal + 24, 2);
	inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof(ip));
	l = calloc(1, sizeof(*l));
	if (!l)
		return ncclSystemError;
	l->comm = comm;
	pthread_mutex_init(&l->lock, NULL);
	pthread_mutex_init(&l->send_lock, NULL);
	pthread_cond_init(&l->cond, NULL);
	/* the root may not listen yet only if its id was copied early; retry like NCCL's
	 * bootstrap until the init timeout */
	for (;;) {
		l->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (l->fd >= 0 && connect(l->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			break;
		if (l->fd >= 0)
			close(l->fd);
		l->fd = -1;
		if (mono_ms() >= deadline) {
			simnccl_log("%s: rank %d: cannot reach the root at %s:%d: %s", name, rank, ip,
				    ntohs(sa.sin_port), strerror(errno));
			tcp_link_free(l);
			return ncclSystemError;
		}
		usleep(100000);
	}
	nodelay(l->fd);
	snprintf(in.name, sizeof(in.name), "%s", name);
	/* the root's proxy joins for us and answers once every rank joined (or its timeout) */
	if (send_msg(l->fd, MSG_INIT, 0, &in, sizeof(in), NULL, 0) ||
	    recv_all(l->fd, &h, sizeof(h)) || h.type != MSG_INITR || h.len != sizeof(res) ||
	    recv_all(l->fd, &res, sizeof(res))) {
		simnccl_log("%s: rank %d: the root at %s:%d closed the connection during init",
			    name, rank, ip, ntohs(sa.sin_port));
		tcp_link_free(l);
		return ncclSystemError;
	}
	if (res) {
		tcp_link_free(l);
		return res;
	}
	if (pthread_create(&l->reader, NULL, reader_thread, l)) {
		tcp_link_free(l);
		return ncclSystemError;
	}
	l->reader_started = true;
	if (simnccl_cfg.verbose)
		simnccl_log("%s: rank %d of %d joined through the root at %s:%d", name, rank, nranks,
			    ip, ntohs(sa.sin_port));
	*out = l;
	return ncclSuccess;
}

void tcp_op_arrive(struct tcp_link *l, struct op *op)
{
	struct tcp_wait *w = calloc(1, sizeof(*w));
	struct msg_op m = { op->desc, op->peer, 0 };

	if (op->sendbuff)
		m.nfloats = (uint32_t)simnccl_moved_elems(op);
	pthread_mutex_lock(&l->lock);
	if (!w) {
		/* cannot wait for it: never completes, as a lost message */
		pthread_mutex_unlock(&l->lock);
		return;
	}
	w->tag = ++l->next_tag;
	w->op = op;
	w->next = l->waits;
	l->waits = w;
	pthread_mutex_unlock(&l->lock);
	/* a partition only fills the socket buffer: the send then blocks, as NCCL's proxy;
	 * the reader goes on delivering answers meanwhile */
	pthread_mutex_lock(&l->send_lock);
	send_msg(l->fd, MSG_OP, w->tag, &m, sizeof(m), op->sendbuff, m.nfloats * 4ull);
	pthread_mutex_unlock(&l->send_lock);
}

bool tcp_op_wait(struct tcp_link *l, struct op *op)
{
	struct tcp_wait *w = NULL;
	bool ok = false;

	pthread_mutex_lock(&l->lock);
	for (;;) {
		struct tcp_wait *it;

		if (!w)
			for (it = l->waits; it; it = it->next)
				if (it->op == op)
					w = it;
		if (w && w->done)
			break;
		if (simnccl_comm_aborting(op->comm))
			break;
		pthread_cond_wait(&l->cond, &l->lock);
	}
	if (w) {
		/* done, or abandoned: an answer that comes later is dropped */
		ok = w->done && w->ok;
		take_wait(l, w->tag);
		free(w);
	}
	pthread_mutex_unlock(&l->lock);
	return ok;
}

void tcp_link_wake(struct tcp_link *l)
{
	pthread_mutex_lock(&l->lock);
	pthread_cond_broadcast(&l->cond);
	pthread_mutex_unlock(&l->lock);
}

void tcp_link_close(struct tcp_link *l)
{
	pthread_mutex_lock(&l->lock);
	l->closing = true;
	pthread_mutex_unlock(&l->lock);
	if (l->fd >= 0)
		shutdown(l->fd, SHUT_RDWR);
	if (l->reader_started) {
		pthread_join(l->reader, NULL);
		l->reader_started = false;
	}
}

void tcp_link_free(struct tcp_link *l)
{
	if (l->reader_started)
		tcp_link_close(l);
	if (l->fd >= 0)
		close(l->fd);
	pthread_cond_destroy(&l->cond);
	pthread_mutex_destroy(&l->send_lock);
	pthread_mutex_destroy(&l->lock);
	free(l);
}
