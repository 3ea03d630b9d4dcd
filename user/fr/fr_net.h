/* SPDX-License-Identifier: MIT */
/* fr_net: a recorded process's TCP connections and its host's addresses, for the dump's "net"
 * (docs/fr-schema.md "Network"): what tells a partitioned host from a hang inside NCCL.
 *
 * Read in the target's network namespace: netlink inet_diag with tcp_info (a short-lived
 * thread enters the namespace, asks, and ends), the process's sockets picked by the inodes
 * of /proc/PID/fd; /proc/PID/net/tcp{,6} when netlink cannot be had. One read per namespace
 * per dump round (struct fr_net caches it): the processes of a host share it.
 */
#ifndef TPTRACE_FR_NET_H
#define TPTRACE_FR_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cJSON;

/* one TCP socket; -1 in a number: unknown (the source does not give it) */
struct fr_sock {
	uint8_t family;			/* AF_INET, AF_INET6 */
	uint8_t local[16], remote[16];	/* network order; IPv4 in the first 4 bytes */
	uint16_t lport, rport;
	uint8_t state;			/* TCP_ESTABLISHED ... (netinet/tcp.h) */
	uint8_t timer;			/* 0 none, 1 retransmit, 2 keepalive, 3 time_wait, 4 probe */
	uint64_t inode;
	int64_t tx_queue, rx_queue, retransmits, probes, backoff, unacked, total_retrans;
	int64_t last_data_sent_ms, last_ack_recv_ms, last_data_recv_ms;
};

enum fr_net_source { FR_NET_NONE, FR_NET_INET_DIAG, FR_NET_PROC };

struct fr_net;

/* A reader for one dump round. NULL (errno) on ENOMEM. */
struct fr_net *fr_net__new(void);
/* The "net" object of pid, read now (the namespace's sockets at most once per reader):
 * {"source", "error", "netns", "read_ns", "host_addresses", "sockets"}; unreadable sockets
 * are "sockets": null with "error" saying why, never an empty list. NULL on ENOMEM. */
struct cJSON *fr_net__json(struct fr_net *n, int pid);
void fr_net__free(struct fr_net *n);

/* /proc/net/tcp or tcp6 text (family AF_INET or AF_INET6) into socks[0..cap): the sockets
 * read, or -EINVAL when a line does not parse. Split from the path so tests run it on text. */
int fr_net__parse_proc(const char *text, int family, struct fr_sock *socks, int cap);
/* "10.0.0.1:29500", "[fe80::1]:22" */
void fr_net__endpoint(char *buf, size_t size, int family, const uint8_t *addr, uint16_t port);

#endif
