/* SPDX-License-Identifier: MIT */
/* Cross-host dump triggers (docs/fr-schema.md "Triggers"): a recorder that sees a stall, or
 * `tptrace fr --trigger DIR`, drops a small JSON record for the job into the dump directory
 * (which may be shared storage); every recorder of that job watching the directory dumps
 * once per trigger id. Trigger files are untrusted input: bounded, validated, and only ever
 * compared by id, never by time (hosts' clocks differ). */
#ifndef TPTRACE_FR_TRIGGER_H
#define TPTRACE_FR_TRIGGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FR_TRIGGER_ID_LEN	32	/* lowercase hex digits */
#define FR_JOB_MAX		128
#define FR_HOST_MAX		64
#define FR_TRIGGER_MAX_BYTES	4096

struct fr_trigger_rec {
	char id[FR_TRIGGER_ID_LEN + 1];
	char job[FR_JOB_MAX + 1];
	char origin_host[FR_HOST_MAX + 1];
	char reason[16];		/* "stall", "signal", "command" */
	int64_t time_ns;		/* origin's CLOCK_REALTIME: informational only */
};

/* The job id of an environ blob ("K=V\0..."): TORCHELASTIC_RUN_ID, else SLURM_JOB_ID, else
 * MASTER_ADDR:MASTER_PORT. 0, or -ENOENT (none) / -EINVAL (a value not fit for an id). */
int fr_job_of_environ(const char *env, size_t len, char *job, size_t size);
/* The same from /proc/PID/environ; nothing else of the environment is kept. */
int fr_job_of_pid(int pid, char *job, size_t size);
bool fr_job_valid(const char *job);
bool fr_host_valid(const char *host);

/* Writes a new trigger for job into dir (O_EXCL temp file, rename). 0 or -errno. */
int fr_trigger__write(const char *dir, const char *job, const char *host, const char *reason,
		      struct fr_trigger_rec *out);
/* Parses and validates a trigger file's text; expect_id (from its name) must match.
 * 0, or -EINVAL with why in err. */
int fr_trigger__parse(const char *buf, size_t len, const char *expect_id,
		      struct fr_trigger_rec *t, char *err, size_t err_size);

/* Reads the trigger file dir_fd/name (a trigger's name, regular, not a link, bounded, parsed
 * and validated). 0, or -errno with why in err. */
int fr_trigger__read(int dir_fd, const char *name, struct fr_trigger_rec *t, char *err,
		     size_t err_size);

/* Watches dir for new trigger files: inotify where the file system has it, and a scan every
 * second since NFS and other shared file systems report no remote writes. Triggers already
 * in dir when the watch starts are old news: never acted on. */
struct fr_watch;
/* use_inotify false: the scan alone, as on NFS (tests) */
struct fr_watch *fr_watch__new(const char *dir, bool use_inotify);
void fr_watch__free(struct fr_watch *w);
/* A trigger this recorder wrote itself (already acted on). */
void fr_watch__mark_seen(struct fr_watch *w, const char *id);
/* 1 with *t: a new valid trigger (each id once); 0: none now. Malformed files are reported
 * once (one line) and skipped. */
int fr_watch__next(struct fr_watch *w, uint64_t now_mono_ns, struct fr_trigger_rec *t);

#endif
