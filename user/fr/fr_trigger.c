// SPDX-License-Identifier: MIT
/* Cross-host dump triggers: see fr_trigger.h and docs/fr-schema.md "Triggers". */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "atomic_file.h"
#include "fr_trigger.h"
#include "growbuf.h"
#include "log.h"
#include "procmaps.h"
#include "util.h"

#define TRIGGER_PREFIX "tptrace-trigger."
#define TRIGGER_SUFFIX ".json"
#define SCAN_INTERVAL_NS 1000000000ULL	/* the ≤ 1 s poll for file systems without inotify */
#define MAX_NEW_PER_SCAN 64		/* a flood of files cannot stall the recorder */

/* printable ASCII without quotes, backslash or '/': safe in logs, JSON and file names */
static bool id_chars_ok(const char *s, size_t max, bool allow_colon)
{
	size_t n = strnlen(s, max + 1);

	if (!n || n > max)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '-' || c == '_' || c == '@' || (allow_colon && c == ':')))
			return false;
	}
	return true;
}

bool fr_job_valid(const char *job)
{
	return job && id_chars_ok(job, FR_JOB_MAX, true);
}

bool fr_host_valid(const char *host)
{
	return host && id_chars_ok(host, FR_HOST_MAX, false) && host[0] != '.';
}

static bool hex_id_ok(const char *s)
{
	if (strlen(s) != FR_TRIGGER_ID_LEN)
		return false;
	for (const char *p = s; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

int fr_job_of_environ(const char *env, size_t len, char *job, size_t size)
{
	const char *p = env, *end = env + len, *run = NULL, *slurm = NULL, *addr = NULL, *port = NULL;
	int n;

	while (p < end && *p) {
		size_t l = strnlen(p, end - p);

		if (l > 20 && !strncmp(p, "TORCHELASTIC_RUN_ID=", 20))
			run = p + 20;
		else if (l > 13 && !strncmp(p, "SLURM_JOB_ID=", 13))
			slurm = p + 13;
		else if (l > 12 && !strncmp(p, "MASTER_ADDR=", 12))
			addr = p + 12;
		else if (l > 12 && !strncmp(p, "MASTER_PORT=", 12))
			port = p + 12;
		if (l == (size_t)(end - p))
			return -EINVAL;	/* unterminated: a truncated read */
		p += l + 1;
	}
	if (run)
		n = snprintf(job, size, "%s", run);
	else if (slurm)
		n = snprintf(job, size, "%s", slurm);
	else if (addr && port)
		n = snprintf(job, size, "%s:%s", addr, port);
	else
		return -ENOENT;
	if (n < 0 || (size_t)n >= size || !fr_job_valid(job)) {
		job[0] = '\0';
		return -EINVAL;
	}
	return 0;
}

int fr_job_of_pid(int pid, char *job, size_t size)
{
	size_t cap = 1 << 20, len = 0;
	char path[64], *env;
	int fd, err;

	procmaps__path(path, sizeof(path), pid, "environ");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	env = malloc(cap);
	if (!env) {
		close(fd);
		return -ENOMEM;
	}
	while (len < cap - 1) {
		ssize_t r = read(fd, env + len, cap - 1 - len);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		len += r;
	}
	close(fd);
	env[len] = '\0';
	err = fr_job_of_environ(env, len + (len && env[len - 1] ? 1 : 0), job, size);
	/* the environment may hold tokens: wipe it before handing the memory back */
	memset(env, 0, len);
	free(env);
	return err;
}

int fr_trigger__write(const char *dir, const char *job, const char *host, const char *reason,
		      struct fr_trigger_rec *out)
{
	unsigned char rnd[FR_TRIGGER_ID_LEN / 2];
	char name[NAME_MAX + 1], *text;
	struct fr_trigger_rec t = {};
	size_t len;
	cJSON *o;
	int dirfd, err = 0;

	if (!fr_job_valid(job) || !fr_host_valid(host))
		return -EINVAL;
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
		return -errno;
	for (size_t i = 0; i < sizeof(rnd); i++)
		sprintf(t.id + 2 * i, "%02x", rnd[i]);
	snprintf(t.job, sizeof(t.job), "%s", job);
	snprintf(t.origin_host, sizeof(t.origin_host), "%s", host);
	snprintf(t.reason, sizeof(t.reason), "%s", reason);
	t.time_ns = (int64_t)clock_ns(CLOCK_REALTIME);

	o = cJSON_CreateObject();
	if (!o)
		return -ENOMEM;
	cJSON_AddStringToObject(o, "schema", "tptrace-fr-trigger");
	cJSON_AddNumberToObject(o, "version", 1);
	cJSON_AddStringToObject(o, "id", t.id);
	cJSON_AddStringToObject(o, "job", t.job);
	cJSON_AddStringToObject(o, "origin_host", t.origin_host);
	cJSON_AddStringToObject(o, "reason", t.reason);
	{
		char num[24];	/* exact: a double would round the nanoseconds */

		snprintf(num, sizeof(num), "%lld", (long long)t.time_ns);
		cJSON_AddRawToObject(o, "time_ns", num);
	}
	text = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	if (!text)
		return -ENOMEM;
	len = strlen(text);
	/* the temp name starts with '.': never taken for a trigger by a scan */
	if (snprintf(name, sizeof(name), TRIGGER_PREFIX "%s" TRIGGER_SUFFIX, t.id) >= (int)sizeof(name)) {
		free(text);
		return -ENAMETOOLONG;
	}
	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0) {
		err = -errno;
		free(text);
		return err;
	}
	err = atomic_file__write(dirfd, name, text, len, 0644, true);
	close(dirfd);
	free(text);
	if (!err && out)
		*out = t;
	return err;
}

static int str_member(const cJSON *o, const char *key, char *buf, size_t size)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	if (!cJSON_IsString(v) || strlen(v->valuestring) >= size)
		return -EINVAL;
	strcpy(buf, v->valuestring);
	return 0;
}

int fr_trigger__parse(const char *buf, size_t len, const char *expect_id,
		      struct fr_trigger_rec *t, char *err, size_t err_size)
{
	static const char *const reasons[] = { "stall", "signal", "command", NULL };
	const cJSON *v;
	cJSON *o;
	const char *why = NULL;
	bool reason_ok = false;

	memset(t, 0, sizeof(*t));
	if (len > FR_TRIGGER_MAX_BYTES) {
		snprintf(err, err_size, "larger than %d bytes", FR_TRIGGER_MAX_BYTES);
		return -EINVAL;
	}
	o = cJSON_ParseWithLength(buf, len);
	if (!cJSON_IsObject(o)) {
		why = "not a JSON object";
		goto out;
	}
	v = cJSON_GetObjectItemCaseSensitive(o, "schema");
	if (!cJSON_IsString(v) || strcmp(v->valuestring, "tptrace-fr-trigger")) {
		why = "schema is not \"tptrace-fr-trigger\"";
		goto out;
	}
	v = cJSON_GetObjectItemCaseSensitive(o, "version");
	if (!cJSON_IsNumber(v) || v->valuedouble != 1) {
		why = "unsupported version (this reads 1)";
		goto out;
	}
	if (str_member(o, "id", t->id, sizeof(t->id)) || !hex_id_ok(t->id)) {
		why = "id is not 32 lowercase hex digits";
		goto out;
	}
	if (expect_id && strcmp(t->id, expect_id)) {
		why = "id differs from the file name";
		goto out;
	}
	if (str_member(o, "job", t->job, sizeof(t->job)) || !fr_job_valid(t->job)) {
		why = "invalid job";
		goto out;
	}
	if (str_member(o, "origin_host", t->origin_host, sizeof(t->origin_host)) ||
	    !fr_host_valid(t->origin_host)) {
		why = "invalid origin_host";
		goto out;
	}
	if (!str_member(o, "reason", t->reason, sizeof(t->reason)))
		for (int i = 0; reasons[i]; i++)
			reason_ok |= !strcmp(t->reason, reasons[i]);
	if (!reason_ok) {
		why = "invalid reason";
		goto out;
	}
	v = cJSON_GetObjectItemCaseSensitive(o, "time_ns");
	if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9.2e18) {
		why = "invalid time_ns";
		goto out;
	}
	t->time_ns = (int64_t)v->valuedouble;
out:
	cJSON_Delete(o);
	if (why) {
		snprintf(err, err_size, "%s", why);
		return -EINVAL;
	}
	return 0;
}

struct fr_watch {
	char *dir;
	int inotify_fd;			/* -1: polling only */
	uint64_t last_scan;
	bool scanned;
	char (*seen)[FR_TRIGGER_ID_LEN + 1];	/* ids acted on or rejected, each once */
	size_t nr_seen, cap_seen;
	struct fr_trigger_rec *queue;	/* valid new triggers of the last scan */
	size_t nr_queue, next_queue;
};

static bool is_seen(struct fr_watch *w, const char *id)
{
	for (size_t i = 0; i < w->nr_seen; i++)
		if (!strcmp(w->seen[i], id))
			return true;
	return false;
}

void fr_watch__mark_seen(struct fr_watch *w, const char *id)
{
	if (!w || is_seen(w, id))
		return;
	if (ARRAY_RESERVE(w->seen, w->cap_seen, w->nr_seen + 1, 64))
		return;	/* worst case: a trigger is looked at again */
	snprintf(w->seen[w->nr_seen++], FR_TRIGGER_ID_LEN + 1, "%s", id);
}

/* "tptrace-trigger.<32 hex>.json" -> the id; false for any other name */
static bool trigger_name(const char *name, char *id)
{
	size_t plen = strlen(TRIGGER_PREFIX), slen = strlen(TRIGGER_SUFFIX);

	if (strlen(name) != plen + FR_TRIGGER_ID_LEN + slen || strncmp(name, TRIGGER_PREFIX, plen) ||
	    strcmp(name + plen + FR_TRIGGER_ID_LEN, TRIGGER_SUFFIX))
		return false;
	memcpy(id, name + plen, FR_TRIGGER_ID_LEN);
	id[FR_TRIGGER_ID_LEN] = '\0';
	return hex_id_ok(id);
}

/* Reads one trigger file: regular, not a link, bounded. 0 or -errno, why in err. */
static int read_trigger(int dir_fd, const char *name, const char *id, struct fr_trigger_rec *t,
			char *err, size_t err_size)
{
	char buf[FR_TRIGGER_MAX_BYTES + 1];
	struct stat st;
	size_t len = 0;
	int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0) {
		snprintf(err, err_size, "%s", errno == ELOOP ? "a symbolic link" : strerror(errno));
		return -errno;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		snprintf(err, err_size, "not a regular file");
		return -EINVAL;
	}
	while (len < sizeof(buf)) {
		ssize_t r = read(fd, buf + len, sizeof(buf) - len);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		len += r;
	}
	close(fd);
	return fr_trigger__parse(buf, len, id, t, err, err_size);
}

int fr_trigger__read(int dir_fd, const char *name, struct fr_trigger_rec *t, char *err,
		     size_t err_size)
{
	char id[FR_TRIGGER_ID_LEN + 1];

	if (!trigger_name(name, id)) {
		snprintf(err, err_size, "not a trigger file name");
		return -EINVAL;
	}
	return read_trigger(dir_fd, name, id, t, err, err_size);
}

/* Looks at every trigger file not seen yet; new valid ones are queued. */
static void scan(struct fr_watch *w, bool initial)
{
	int dir_fd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *de;
	int new = 0;
	DIR *d;

	if (dir_fd < 0 || !(d = fdopendir(dir_fd))) {
		if (dir_fd >= 0)
			close(dir_fd);
		return;	/* gone for now (shared storage): the next scan tries again */
	}
	w->nr_queue = w->next_queue = 0;
	while ((de = readdir(d)) && new < MAX_NEW_PER_SCAN) {
		char id[FR_TRIGGER_ID_LEN + 1], err[128];
		struct fr_trigger_rec t;

		if (!trigger_name(de->d_name, id) || is_seen(w, id))
			continue;
		fr_watch__mark_seen(w, id);
		if (initial)
			continue;	/* older than this recorder */
		new++;
		if (read_trigger(dirfd(d), de->d_name, id, &t, err, sizeof(err))) {
			log_error("ignoring trigger file %s/%s: %s\n", w->dir, de->d_name, err);
			continue;
		}
		if (w->nr_queue % 16 == 0) {
			void *p = realloc(w->queue, (w->nr_queue + 16) * sizeof(*w->queue));

			if (!p)
				break;
			w->queue = p;
		}
		w->queue[w->nr_queue++] = t;
	}
	closedir(d);
}

struct fr_watch *fr_watch__new(const char *dir, bool use_inotify)
{
	struct fr_watch *w = calloc(1, sizeof(*w));

	if (!w || !(w->dir = strdup(dir))) {
		free(w);
		errno = ENOMEM;
		return NULL;
	}
	w->inotify_fd = use_inotify ? inotify_init1(IN_NONBLOCK | IN_CLOEXEC) : -1;
	if (w->inotify_fd >= 0 &&
	    inotify_add_watch(w->inotify_fd, dir, IN_MOVED_TO | IN_CLOSE_WRITE | IN_ONLYDIR) < 0) {
		log_verbose("no inotify on %s (%s): polling it every second\n", dir, strerror(errno));
		close(w->inotify_fd);
		w->inotify_fd = -1;
	}
	scan(w, true);
	return w;
}

void fr_watch__free(struct fr_watch *w)
{
	if (!w)
		return;
	if (w->inotify_fd >= 0)
		close(w->inotify_fd);
	free(w->seen);
	free(w->queue);
	free(w->dir);
	free(w);
}

int fr_watch__next(struct fr_watch *w, uint64_t now, struct fr_trigger_rec *t)
{
	bool want_scan = now - w->last_scan >= SCAN_INTERVAL_NS;

	if (w->next_queue < w->nr_queue) {
		*t = w->queue[w->next_queue++];
		return 1;
	}
	if (w->inotify_fd >= 0) {
		/* the events only say "look now"; the scan decides what is new */
		char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));

		while (read(w->inotify_fd, buf, sizeof(buf)) > 0)
			want_scan = true;
	}
	if (!want_scan)
		return 0;
	w->last_scan = now;
	scan(w, false);
	if (w->next_queue < w->nr_queue) {
		*t = w->queue[w->next_queue++];
		return 1;
	}
	return 0;
}
