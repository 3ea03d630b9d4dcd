/* SPDX-License-Identifier: MIT */
/* The flight recorder's Prometheus metrics (text exposition format 0.0.4): rendered from the
 * recorder's state by its own thread (fr_metrics__update), served on /metrics by libmicrohttpd
 * from the last rendering, and written atomically to a file for node_exporter's textfile
 * collector. The HTTP thread never touches the recorder: it copies the last text under a lock.
 * No command line or environment value is exported; the job label is the job id only. */
#ifndef TPTRACE_FR_METRICS_H
#define TPTRACE_FR_METRICS_H

#include <stddef.h>
#include <stdint.h>

struct flightrec;
struct fr_metrics;

/* listen: "ADDR:PORT" (IPv4 or [IPv6], numeric, no default address) or NULL; file: a path
 * or NULL. NULL and errno on failure, with one line on stderr (e.g. the port is in use). */
struct fr_metrics *fr_metrics__new(const char *listen, const char *file);
void fr_metrics__free(struct fr_metrics *m);

/* Renders the metrics of fr at now (CLOCK_MONOTONIC ns), serves them from now on and writes
 * the file. A file that cannot be written is said once (until it works again); returns 0 or
 * the negative errno of the file write. */
int fr_metrics__update(struct fr_metrics *m, struct flightrec *fr, uint64_t now);

/* The text of fr's metrics at now; malloc'd, NULL and errno on failure. */
/* An exited process's series are exported this long after the first update that saw it
 * exited, then dropped (the daemon's page stays bounded). */
#define FR_METRICS_EXPIRY_NS (300ULL * 1000000000ULL)
void fr_metrics__set_expiry(struct fr_metrics *m, uint64_t ns);
/* The text of the last update (owned by m; NULL before the first). */
const char *fr_metrics__text(struct fr_metrics *m);

char *fr_metrics__render(struct flightrec *fr, uint64_t now);

/* "ADDR:PORT" -> a sockaddr for bind; 0 or -EINVAL. */
struct sockaddr_storage;
int fr_metrics__parse_listen(const char *s, struct sockaddr_storage *sa, unsigned *len);

#endif
