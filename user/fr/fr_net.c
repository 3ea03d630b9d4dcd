// SPDX-License-Identifier: MIT
/* fr_net: a recorded process's TCP connections for its dump's "net" (see fr_net.h).
 *
 * A socket holding unacked data is not stuck by itself: a busy link has data in flight at
 * any instant. What tells them apart is in tcp_info: the head segment retransmitted
 * (tcpi_retransmits, the backoff) and no ack for a long time (tcpi_last_ack_recv); the
 * analyzer (tools/fr/fr_net.c) judges, this only reads. /proc/PID/net/tcp has the queues, the
 * timer and the retransmits but no ages: the dump says which source it came from.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <cjson/cJSON.h>
#include "fr_keys.h"
#include "fr_net.h"
#include "growbuf.h"

#define MAX_SOCKS	(1 << 16)	/* per namespace: more are left out (said) */
#define MAX_ADDRS	64

/* one namespace's read, shared by the processes of a round that live in it */
struct ns_read {
	uint64_t netns;			/* inode of /proc/PID/ns/net */
	enum fr_net_source source;
	char error[160];		/* why nothing was read ("" read) */
	struct fr_sock *socks;
	int nr, cap;
	bool truncated;
	char addrs[MAX_ADDRS][INET6_ADDRSTRLEN];
	char ifname[MAX_ADDRS][IF_NAMESIZE];
	bool up[MAX_ADDRS], running[MAX_ADDRS];	/* IFF_UP, IFF_RUNNING (carrier) */
	int nr_addrs;
	bool have_addrs;		/* from the interfaces (else the sockets' local ones) */
	int64_t read_ns;		/* CLOCK_REALTIME */
};

struct fr_net {
	struct ns_read *reads;
	int nr, cap;
};

static const char *const state_names[] = {
	"unknown", "established", "syn_sent", "syn_recv", "fin_wait1", "fin_wait2",
	"time_wait", "close", "close_wait", "last_ack", "listen", "closing", "new_syn_recv",
};
static const char *const timer_names[] = { "none", "retransmit", "keepalive", "time_wait",
					    "probe" };

static int64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void fr_net__endpoint(char *buf, size_t size, int family, const uint8_t *addr, uint16_t port)
{
	char a[INET6_ADDRSTRLEN];

	if (!inet_ntop(family, addr, a, sizeof(a)))
		snprintf(a, sizeof(a), "?");
	if (family == AF_INET6)
		snprintf(buf, size, "[%s]:%u", a, port);
	else
		snprintf(buf, size, "%s:%u", a, port);
}

static struct fr_sock *sock_add(struct ns_read *r)
{
	struct fr_sock *s;

	if (r->nr >= MAX_SOCKS) {
		r->truncated = true;
		return NULL;
	}
	if (ARRAY_RESERVE(r->socks, r->cap, r->nr + 1, 64))
		return NULL;
	s = &r->socks[r->nr++];
	memset(s, 0, sizeof(*s));
	s->tx_queue = s->rx_queue = s->retransmits = s->probes = s->backoff = s->unacked = -1;
	s->total_retrans = s->last_data_sent_ms = s->last_ack_recv_ms = s->last_data_recv_ms = -1;
	return s;
}

/* ------------------------------------------------------------------ netlink inet_diag */

static void diag_fill(struct fr_sock *s, const struct inet_diag_msg *m, int len)
{
	const struct rtattr *at = (const struct rtattr *)(m + 1);

	s->family = m->idiag_family;
	memcpy(s->local, m->id.idiag_src, 16);
	memcpy(s->remote, m->id.idiag_dst, 16);
	s->lport = ntohs(m->id.idiag_sport);
	s->rport = ntohs(m->id.idiag_dport);
	s->state = m->idiag_state;
	s->timer = m->idiag_timer;
	s->inode = m->idiag_inode;
	s->tx_queue = m->idiag_wqueue;
	s->rx_queue = m->idiag_rqueue;
	/* the timer's count: retransmits of the head (retransmit timer) or probes sent
	 * (zero-window probe, keepalive) */
	if (m->idiag_timer == 1)
		s->retransmits = m->idiag_retrans;
	else if (m->idiag_timer == 2 || m->idiag_timer == 4)
		s->probes = m->idiag_retrans;
	for (; RTA_OK(at, len); at = RTA_NEXT(at, len)) {
		struct tcp_info ti;
		size_t n = RTA_PAYLOAD(at);

		if (at->rta_type != INET_DIAG_INFO)
			continue;
		memset(&ti, 0, sizeof(ti));
		memcpy(&ti, RTA_DATA(at), n < sizeof(ti) ? n : sizeof(ti));
		if (n < offsetof(struct tcp_info, tcpi_total_retrans) + sizeof(ti.tcpi_total_retrans))
			continue;	/* an old kernel's short tcp_info: leave them unknown */
		s->retransmits = ti.tcpi_retransmits;
		s->probes = ti.tcpi_probes;
		s->backoff = ti.tcpi_backoff;
		s->unacked = ti.tcpi_unacked;
		s->total_retrans = ti.tcpi_total_retrans;
		s->last_data_sent_ms = ti.tcpi_last_data_sent;
		s->last_ack_recv_ms = ti.tcpi_last_ack_recv;
		s->last_data_recv_ms = ti.tcpi_last_data_recv;
	}
}

/* every TCP socket of family in the calling thread's namespace but listeners; 0 or -errno */
static int diag_dump(int fd, int family, struct ns_read *r)
{
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 req;
	} q = {
		.nlh = { .nlmsg_len = sizeof(q), .nlmsg_type = SOCK_DIAG_BY_FAMILY,
			 .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = 1 },
		.req = { .sdiag_family = family, .sdiag_protocol = IPPROTO_TCP,
			 .idiag_ext = 1 << (INET_DIAG_INFO - 1),
			 .idiag_states = 0xfff & ~(1u << TCP_LISTEN) },
	};
	struct sockaddr_nl nl = { .nl_family = AF_NETLINK };
	static __thread char buf[32768] __attribute__((aligned(8)));

	if (sendto(fd, &q, sizeof(q), 0, (struct sockaddr *)&nl, sizeof(nl)) < 0)
		return -errno;
	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		struct nlmsghdr *h;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		for (h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
			struct fr_sock *s;

			if (h->nlmsg_type == NLMSG_DONE)
				return 0;
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(h);

				return e->error ? e->error : -EIO;
			}
			if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
			    h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
				continue;
			if (!(s = sock_add(r))) {
				if (!r->truncated)
					return -ENOMEM;
				continue;
			}
			diag_fill(s, NLMSG_DATA(h),
				  h->nlmsg_len - NLMSG_LENGTH(sizeof(struct inet_diag_msg)));
		}
	}
}

/* the namespace's own addresses, loopback and IPv6 link-local left out (every host has
 * them alike: they name no host) */
static void read_addrs(struct ns_read *r)
{
	struct ifaddrs *ifa, *i;

	if (getifaddrs(&ifa))
		return;
	r->have_addrs = true;
	for (i = ifa; i && r->nr_addrs < MAX_ADDRS; i = i->ifa_next) {
		const void *a;
		int fam;

		if (!i->ifa_addr || (i->ifa_flags & IFF_LOOPBACK))
			continue;
		fam = i->ifa_addr->sa_family;
		if (fam == AF_INET) {
			a = &((struct sockaddr_in *)i->ifa_addr)->sin_addr;
		} else if (fam == AF_INET6) {
			a = &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
			if (IN6_IS_ADDR_LINKLOCAL(a))
				continue;
		} else {
			continue;
		}
		inet_ntop(fam, a, r->addrs[r->nr_addrs], INET6_ADDRSTRLEN);
		snprintf(r->ifname[r->nr_addrs], IF_NAMESIZE, "%s", i->ifa_name);
		r->up[r->nr_addrs] = i->ifa_flags & IFF_UP;
		r->running[r->nr_addrs] = i->ifa_flags & IFF_RUNNING;
		r->nr_addrs++;
	}
	freeifaddrs(ifa);
}

struct diag_job {
	int nsfd;		/* -1: already in it */
	struct ns_read *r;
	int err;
	const char *what;
};

/* In a thread of its own: it enters the namespace, reads, and ends there (a thread's
 * namespace is its own: the recorder's other threads stay where they are). */
static void *diag_thread(void *arg)
{
	struct diag_job *j = arg;
	int fd;

	if (j->nsfd >= 0 && setns(j->nsfd, CLONE_NEWNET)) {
		j->err = -errno;
		j->what = "cannot enter its network namespace";
		return NULL;
	}
	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (fd < 0) {
		j->err = -errno;
		j->what = "netlink sock_diag";
		return NULL;
	}
	/* never hold the dump up: a kernel that does not answer in a second is a read failed */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){ .tv_sec = 1 },
		   sizeof(struct timeval));
	if (!(j->err = diag_dump(fd, AF_INET, j->r)))
		j->err = diag_dump(fd, AF_INET6, j->r);
	if (j->err)
		j->what = "netlink sock_diag";
	close(fd);
	if (!j->err)
		read_addrs(j->r);
	return NULL;
}

static int read_diag(struct ns_read *r, int pid, bool own_ns, char *why, size_t size)
{
	struct diag_job j = { .nsfd = -1, .r = r };
	char path[64];
	pthread_t t;
	int err;

	if (!own_ns) {
		snprintf(path, sizeof(path), "/proc/%d/ns/net", pid);
		if ((j.nsfd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
			err = -errno;
			snprintf(why, size, "%s: %s", path, strerror(-err));
			return err;
		}
	}
	if ((err = -pthread_create(&t, NULL, diag_thread, &j))) {
		snprintf(why, size, "thread: %s", strerror(-err));
	} else {
		pthread_join(t, NULL);
		if ((err = j.err))
			snprintf(why, size, "%s: %s", j.what, strerror(-err));
	}
	if (j.nsfd >= 0)
		close(j.nsfd);
	return err;
}

/* ------------------------------------------------------------------ /proc/PID/net/tcp */

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 :
	       c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* the kernel prints each 32-bit word of the address as %08X of its value in memory */
static bool hex_addr(const char *s, size_t len, uint8_t *out)
{
	for (size_t w = 0; w < len / 8; w++) {
		uint32_t v = 0;

		for (int k = 0; k < 8; k++) {
			int d = hexval(s[w * 8 + k]);

			if (d < 0)
				return false;
			v = v << 4 | d;
		}
		memcpy(out + w * 4, &v, 4);
	}
	return true;
}

/*   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
 *    0: 0100007F:0CEA 0100007F:A2B4 01 00000000:00000000 00:00000000 00000000     0        0 22633 1 ...
 * (tcp6: 32 hex digits per address) */
int fr_net__parse_proc(const char *text, int family, struct fr_sock *socks, int cap)
{
	size_t alen = family == AF_INET6 ? 32 : 8;
	const char *line = strchr(text, '\n');
	int n = 0;

	for (line = line ? line + 1 : NULL; line && *line && n < cap;
	     line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
		char la[40], ra[40];
		unsigned lport, rport, st, tx, rx, tr, retr;
		unsigned long long when, inode;
		int uid, timeout;	/* the column after uid: icsk_probes_out */
		struct fr_sock *s = &socks[n];

		if (sscanf(line, " %*d: %39[0-9A-Fa-f]:%x %39[0-9A-Fa-f]:%x %x %x:%x %x:%llx %x %d %d %llu",
			   la, &lport, ra, &rport, &st, &tx, &rx, &tr, &when, &retr, &uid, &timeout,
			   &inode) != 13 || strlen(la) != alen || strlen(ra) != alen)
			return -EINVAL;
		memset(s, 0, sizeof(*s));
		s->family = family;
		if (!hex_addr(la, alen, s->local) || !hex_addr(ra, alen, s->remote))
			return -EINVAL;
		s->lport = lport;
		s->rport = rport;
		s->state = st;
		s->timer = tr;
		s->inode = inode;
		s->tx_queue = tx;
		s->rx_queue = rx;
		s->retransmits = retr;
		s->probes = timeout;	/* that column is icsk_probes_out */
		s->backoff = s->unacked = s->total_retrans = -1;
		s->last_data_sent_ms = s->last_ack_recv_ms = s->last_data_recv_ms = -1;
		n++;
	}
	return n;
}

static int read_file(const char *path, char **out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), err = 0;
	size_t len = 0, cap = 0;
	char *buf = NULL;

	if (fd < 0)
		return -errno;
	for (;;) {
		ssize_t n;

		if (ARRAY_RESERVE(buf, cap, len + 65536 + 1, 65536 + 1)) {
			err = -ENOMEM;
			break;
		}
		n = read(fd, buf + len, 65536);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			err = n < 0 ? -errno : 0;
			break;
		}
		len += n;
	}
	close(fd);
	if (err) {
		free(buf);
		return err;
	}
	buf[len] = '\0';
	*out = buf;
	return 0;
}

static int read_proc(struct ns_read *r, int pid, char *why, size_t size)
{
	static const struct { const char *name; int family; } files[] = {
		{ "tcp", AF_INET }, { "tcp6", AF_INET6 },
	};

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		char path[64], *text = NULL;
		int lines = 0, n, err;

		snprintf(path, sizeof(path), "/proc/%d/net/%s", pid, files[i].name);
		if ((err = read_file(path, &text))) {
			if (err == -ENOENT && files[i].family == AF_INET6)
				continue;	/* no IPv6 in this kernel */
			snprintf(why, size, "%s: %s", path, strerror(-err));
			return err;
		}
		for (const char *c = text; *c; c++)
			lines += *c == '\n';
		if (r->nr + lines > MAX_SOCKS)
			r->truncated = true;
		lines = r->nr + lines > MAX_SOCKS ? MAX_SOCKS - r->nr : lines;
		if (ARRAY_RESERVE(r->socks, r->cap, r->nr + lines + 1, 64)) {
			free(text);
			snprintf(why, size, "out of memory");
			return -ENOMEM;
		}
		n = fr_net__parse_proc(text, files[i].family, r->socks + r->nr, lines);
		free(text);
		if (n < 0) {
			snprintf(why, size, "%s: a line does not parse", path);
			return n;
		}
		r->nr += n;
	}
	return 0;
}

/* ------------------------------------------------------------------ per namespace, per pid */

static int netns_of(int pid, uint64_t *ino)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d/ns/net", pid);
	if (stat(path, &st))
		return -errno;
	*ino = st.st_ino;
	return 0;
}

static struct ns_read *ns_read_get(struct fr_net *n, int pid, uint64_t netns)
{
	char why_diag[160] = "", why_proc[160] = "";
	uint64_t own = 0;
	struct ns_read *r;

	for (int i = 0; i < n->nr; i++)
		if (n->reads[i].netns == netns)
			return &n->reads[i];
	if (ARRAY_RESERVE(n->reads, n->cap, n->nr + 1, 4))
		return NULL;
	r = &n->reads[n->nr++];
	memset(r, 0, sizeof(*r));
	r->netns = netns;
	r->read_ns = realtime_ns();
	if (!read_diag(r, pid, !netns_of(getpid(), &own) && own == netns, why_diag,
		       sizeof(why_diag))) {
		r->source = FR_NET_INET_DIAG;
		return r;
	}
	/* the kernel's own table, seen through the process: no ages, but queues and timers */
	r->nr = 0;
	r->truncated = false;
	r->read_ns = realtime_ns();
	if (!read_proc(r, pid, why_proc, sizeof(why_proc))) {
		r->source = FR_NET_PROC;
		snprintf(r->error, sizeof(r->error), "inet_diag: %s", why_diag);
		return r;
	}
	r->nr = 0;
	snprintf(r->error, sizeof(r->error), "%s; %s", why_diag, why_proc);
	return r;
}

struct fr_net *fr_net__new(void)
{
	return calloc(1, sizeof(struct fr_net));
}

void fr_net__free(struct fr_net *n)
{
	if (!n)
		return;
	for (int i = 0; i < n->nr; i++)
		free(n->reads[i].socks);
	free(n->reads);
	free(n);
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

/* the inodes of pid's sockets, sorted; count or -errno */
static int socket_inodes(int pid, uint64_t **out)
{
	char path[64];
	uint64_t *v = NULL;
	int n = 0, cap = 0;
	struct dirent *de;
	DIR *d;

	*out = NULL;
	snprintf(path, sizeof(path), "/proc/%d/fd", pid);
	if (!(d = opendir(path)))
		return -errno;
	while ((de = readdir(d))) {
		char link[96], target[64];
		unsigned long long ino;
		ssize_t len;

		if (de->d_name[0] == '.')
			continue;
		snprintf(link, sizeof(link), "%s/%.20s", path, de->d_name);
		len = readlink(link, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = '\0';
		if (sscanf(target, "socket:[%llu]", &ino) != 1)
			continue;
		if (ARRAY_RESERVE(v, cap, n + 1, 64)) {
			closedir(d);
			free(v);
			return -ENOMEM;
		}
		v[n++] = ino;
	}
	closedir(d);
	if (n > 1)
		qsort(v, n, sizeof(*v), cmp_u64);
	*out = v;
	return n;
}

static void num(cJSON *o, const char *key, int64_t v)
{
	if (v < 0)
		cJSON_AddNullToObject(o, key);
	else
		cJSON_AddNumberToObject(o, key, (double)v);
}

static cJSON *sock_json(const struct fr_sock *s)
{
	cJSON *o = cJSON_CreateObject();
	char buf[64];

	if (!o)
		return NULL;
	fr_net__endpoint(buf, sizeof(buf), s->family, s->local, s->lport);
	cJSON_AddStringToObject(o, FRK_LOCAL, buf);
	fr_net__endpoint(buf, sizeof(buf), s->family, s->remote, s->rport);
	cJSON_AddStringToObject(o, FRK_REMOTE, buf);
	cJSON_AddStringToObject(o, FRK_STATE, s->state < sizeof(state_names) / sizeof(*state_names) ?
				state_names[s->state] : "unknown");
	cJSON_AddNumberToObject(o, FRK_INODE, (double)s->inode);
	num(o, FRK_TX_QUEUE, s->tx_queue);
	num(o, FRK_RX_QUEUE, s->rx_queue);
	cJSON_AddStringToObject(o, FRK_TIMER, s->timer < sizeof(timer_names) / sizeof(*timer_names) ?
				timer_names[s->timer] : "unknown");
	num(o, FRK_RETRANSMITS, s->retransmits);
	num(o, FRK_PROBES, s->probes);
	num(o, FRK_BACKOFF, s->backoff);
	num(o, FRK_UNACKED, s->unacked);
	num(o, FRK_TOTAL_RETRANS, s->total_retrans);
	num(o, FRK_LAST_DATA_SENT_MS, s->last_data_sent_ms);
	num(o, FRK_LAST_ACK_RECV_MS, s->last_ack_recv_ms);
	num(o, FRK_LAST_DATA_RECV_MS, s->last_data_recv_ms);
	return o;
}

static bool in_sorted(const uint64_t *v, int n, uint64_t x)
{
	return bsearch(&x, v, n, sizeof(*v), cmp_u64) != NULL;
}

static void addrs_json(cJSON *root, const struct ns_read *r, const uint64_t *inodes, int nino)
{
	cJSON *arr = cJSON_AddArrayToObject(root, FRK_HOST_ADDRESSES);
	char seen[MAX_ADDRS][INET6_ADDRSTRLEN];
	int n = 0;

	if (r->have_addrs) {
		cJSON *ifs = cJSON_AddArrayToObject(root, FRK_INTERFACES);

		for (int i = 0; arr && i < r->nr_addrs; i++) {
			cJSON *o = cJSON_CreateObject();

			cJSON_AddItemToArray(arr, cJSON_CreateString(r->addrs[i]));
			if (!o || !ifs) {
				cJSON_Delete(o);
				continue;
			}
			cJSON_AddStringToObject(o, FRK_NAME, r->ifname[i]);
			cJSON_AddStringToObject(o, FRK_ADDRESS, r->addrs[i]);
			cJSON_AddBoolToObject(o, FRK_UP, r->up[i]);
			cJSON_AddBoolToObject(o, FRK_RUNNING, r->running[i]);
			cJSON_AddItemToArray(ifs, o);
		}
		return;
	}
	cJSON_AddNullToObject(root, FRK_INTERFACES);
	/* no interface list (the namespace could not be entered): the local addresses its
	 * sockets use, loopback left out */
	for (int i = 0; arr && i < r->nr && n < MAX_ADDRS; i++) {
		const struct fr_sock *s = &r->socks[i];
		char a[INET6_ADDRSTRLEN];
		bool dup = false;

		if (!in_sorted(inodes, nino, s->inode) || !inet_ntop(s->family, s->local, a, sizeof(a)))
			continue;
		if (!strncmp(a, "127.", 4) || !strcmp(a, "::1") || !strcmp(a, "0.0.0.0") ||
		    !strcmp(a, "::") || !strncmp(a, "::ffff:127.", 11))
			continue;
		for (int k = 0; k < n && !dup; k++)
			dup = !strcmp(seen[k], a);
		if (dup)
			continue;
		snprintf(seen[n++], INET6_ADDRSTRLEN, "%s", a);
		cJSON_AddItemToArray(arr, cJSON_CreateString(a));
	}
}

static cJSON *unknown_json(cJSON *o, const char *why, ...) __attribute__((format(printf, 2, 3)));
static cJSON *unknown_json(cJSON *o, const char *why, ...)
{
	char buf[320];
	va_list ap;

	va_start(ap, why);
	vsnprintf(buf, sizeof(buf), why, ap);
	va_end(ap);
	cJSON_AddNullToObject(o, FRK_SOURCE);
	cJSON_AddStringToObject(o, FRK_ERROR, buf);
	cJSON_AddNullToObject(o, FRK_SOCKETS);
	return o;
}

cJSON *fr_net__json(struct fr_net *n, int pid)
{
	cJSON *o = cJSON_CreateObject(), *arr;
	uint64_t netns, *inodes = NULL;
	struct ns_read *r;
	int err, nino;

	if (!o)
		return NULL;
	if ((err = netns_of(pid, &netns))) {
		cJSON_AddNullToObject(o, FRK_NETNS);
		return unknown_json(o, "/proc/%d/ns/net: %s", pid, strerror(-err));
	}
	cJSON_AddNumberToObject(o, FRK_NETNS, (double)netns);
	if (!(r = ns_read_get(n, pid, netns))) {
		cJSON_Delete(o);
		return NULL;
	}
	if (r->source == FR_NET_NONE)
		return unknown_json(o, "%s", r->error);
	if ((nino = socket_inodes(pid, &inodes)) < 0)
		return unknown_json(o, "/proc/%d/fd: %s", pid, strerror(-nino));
	cJSON_AddStringToObject(o, FRK_SOURCE, r->source == FR_NET_INET_DIAG ? "inet_diag" :
				"proc_net_tcp");
	if (r->error[0])
		cJSON_AddStringToObject(o, FRK_ERROR, r->error);	/* why not inet_diag */
	else if (r->truncated)
		cJSON_AddStringToObject(o, FRK_ERROR, "over 65536 sockets in the namespace: some left out");
	else
		cJSON_AddNullToObject(o, FRK_ERROR);
	{
		char num_buf[24];	/* exact: a double would round the nanoseconds */

		snprintf(num_buf, sizeof(num_buf), "%" PRId64, r->read_ns);
		cJSON_AddRawToObject(o, FRK_READ_NS, num_buf);
	}
	addrs_json(o, r, inodes, nino);
	arr = cJSON_AddArrayToObject(o, FRK_SOCKETS);
	for (int i = 0; arr && i < r->nr; i++) {
		const struct fr_sock *s = &r->socks[i];
		cJSON *so;

		if (s->state == TCP_LISTEN || !s->inode || !in_sorted(inodes, nino, s->inode))
			continue;
		if ((so = sock_json(s)))
			cJSON_AddItemToArray(arr, so);
	}
	free(inodes);
	return o;
}
