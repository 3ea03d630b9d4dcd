// SPDX-License-Identifier: MIT
/* fr_net (the dump's "net"): the /proc/net/tcp{,6} parser on saved text, then a live read of
 * this process's own loopback connection through inet_diag, data queued on one end. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "check.h"
#include "fr_net.h"

/* from a real /proc/net/tcp of a fleet host (header, an established one with data queued and
 * the probe timer, a listener) */
static const char tcp_text[] =
"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
"   0: 0337E70A:9F70 0137E70A:BD41 01 00010038:00000000 04:00000113 00000000     0        4 3846975 2 0000000000000000 20 4 1 10 -1\n"
"   1: 00000000:2328 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3844001 1 0000000000000000 100 0 0 10 0\n";
static const char tcp6_text[] =
"  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
"   0: 0000000000000000FFFF00000100007F:1F90 0000000000000000FFFF00000100007F:C350 01 00000000:00000000 01:00000014 00000003     0        0 777 1 0000000000000000 20 4 30 10 -1\n";

static void test_parse(void)
{
	struct fr_sock s[4];
	char buf[64];
	int n;

	n = fr_net__parse_proc(tcp_text, AF_INET, s, 4);
	CHECK(n == 2, "tcp: %d sockets", n);
	if (n == 2) {
		fr_net__endpoint(buf, sizeof(buf), s[0].family, s[0].local, s[0].lport);
		CHECK_STR(buf, "10.231.55.3:40816");
		fr_net__endpoint(buf, sizeof(buf), s[0].family, s[0].remote, s[0].rport);
		CHECK_STR(buf, "10.231.55.1:48449");
		CHECK_U64(s[0].state, 1);
		CHECK_U64(s[0].tx_queue, 65592);
		CHECK_U64(s[0].timer, 4);
		CHECK_U64(s[0].probes, 4);
		CHECK_U64(s[0].retransmits, 0);
		CHECK_U64(s[0].inode, 3846975);
		CHECK(s[0].last_ack_recv_ms == -1 && s[0].unacked == -1, "no ages in /proc/net/tcp");
		CHECK_U64(s[1].state, 10);
	}
	n = fr_net__parse_proc(tcp6_text, AF_INET6, s, 4);
	CHECK(n == 1, "tcp6: %d sockets", n);
	if (n == 1) {
		fr_net__endpoint(buf, sizeof(buf), s[0].family, s[0].local, s[0].lport);
		CHECK_STR(buf, "[::ffff:127.0.0.1]:8080");
		CHECK_U64(s[0].retransmits, 3);
		CHECK_U64(s[0].timer, 1);
	}
	CHECK(fr_net__parse_proc("hdr\n   0: zz:1 00:0 01\n", AF_INET, s, 4) == -EINVAL,
	      "a broken line is an error, not a socket");
	CHECK(fr_net__parse_proc("hdr\n", AF_INET, s, 4) == 0, "no socket");
}

/* a connected pair on loopback; the server never reads, the client writes until its
 * buffers fill: data queued on the client's end */
static void test_live(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0), s = -1;
	char local[64], junk[65536] = { 0 };
	struct fr_net *net;
	cJSON *o, *socks, *it;
	bool found = false;

	CHECK(l >= 0 && c >= 0, "sockets");
	CHECK(!bind(l, (struct sockaddr *)&a, sizeof(a)) && !listen(l, 1) &&
	      !getsockname(l, (struct sockaddr *)&a, &len), "listen: %s", strerror(errno));
	CHECK(!connect(c, (struct sockaddr *)&a, sizeof(a)), "connect: %s", strerror(errno));
	s = accept(l, NULL, NULL);
	CHECK(s >= 0, "accept");
	while (send(c, junk, sizeof(junk), MSG_DONTWAIT) > 0)
		;
	len = sizeof(a);
	getsockname(c, (struct sockaddr *)&a, &len);
	snprintf(local, sizeof(local), "127.0.0.1:%u", ntohs(a.sin_port));

	net = fr_net__new();
	o = net ? fr_net__json(net, getpid()) : NULL;
	CHECK(o, "fr_net__json");
	if (o) {
		cJSON *src = cJSON_GetObjectItem(o, "source");

		if (!cJSON_IsString(src)) {
			char *t = cJSON_PrintUnformatted(o);

			/* unknown is said, never an empty list */
			CHECK(cJSON_IsNull(cJSON_GetObjectItem(o, "sockets")) &&
			      cJSON_IsString(cJSON_GetObjectItem(o, "error")), "unknown: %s", t);
			free(t);
			SKIP("neither inet_diag nor /proc/net/tcp readable here");
		} else {
			CHECK_STR(src->valuestring, "inet_diag");
			socks = cJSON_GetObjectItem(o, "sockets");
			cJSON_ArrayForEach(it, socks) {
				cJSON *lo = cJSON_GetObjectItem(it, "local");

				if (!cJSON_IsString(lo) || strcmp(lo->valuestring, local))
					continue;
				found = true;
				CHECK_STR(cJSON_GetObjectItem(it, "state")->valuestring, "established");
				CHECK(cJSON_GetObjectItem(it, "tx_queue")->valuedouble > 0,
				      "the client's queue holds what the server did not read");
				CHECK(cJSON_IsNumber(cJSON_GetObjectItem(it, "last_ack_recv_ms")),
				      "tcp_info ages read");
			}
			CHECK(found, "the client's socket %s among the process's sockets", local);
			/* the listener is left out */
			cJSON_ArrayForEach(it, socks)
				CHECK(strcmp(cJSON_GetObjectItem(it, "state")->valuestring, "listen"),
				      "a listener listed");
		}
		cJSON_Delete(o);
	}
	fr_net__free(net);
	close(s);
	close(c);
	close(l);
}

int main(void)
{
	test_parse();
	test_live();
	return check_done();
}
