/* SPDX-License-Identifier: MIT */
/* What `tptrace` and `tptrace fr` share: loading the BPF object, opening targets, reading
 * the drop counter. Every failure prints its one error line here. */
#ifndef TPTRACE_SESSION_H
#define TPTRACE_SESSION_H

#include <stdint.h>

struct cuda_bpf;
struct target;
struct target_probes;

/* Opens and loads the BPF object with a ring of ring_mb MiB. NULL after an error line. */
struct cuda_bpf *session__load_bpf(int ring_mb);
/* Fills probes from the loaded object. */
void session__probes(struct cuda_bpf *skel, struct target_probes *probes);
/* target__new() with the error line for a vanished or unreadable pid. */
struct target *session__open_target(int pid);
/* Watches the exits of pid (exit code in the trace / dump). */
int session__watch_exit(struct cuda_bpf *skel, int pid);
/* Sum of the per-CPU drop counters. */
uint64_t session__drops(struct cuda_bpf *skel);
uint64_t session__clock_ns(int clockid);
/* -v/-q for every subcommand (an argp child) and libbpf's messages gated by -v. */
struct argp;
extern const struct argp session_common_argp;
void session__libbpf_print_setup(void);

/* Option values shared by the subcommands: 0, or -EINVAL for a bad value. */
int session__parse_pid(const char *arg, int *pid);
int session__parse_ring_mb(const char *arg, int *mb);		/* power of two, 1..4096 */
int session__parse_seconds(const char *arg, double *sec);	/* > 0 */

#endif
