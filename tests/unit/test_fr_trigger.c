// SPDX-License-Identifier: MIT
/* Cross-host trigger records (user/fr/fr_trigger.c): job ids from an environment, the trigger
 * file parser on valid, malformed and mutated input (trigger files are untrusted), and a
 * watch that acts on each new trigger once. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "check.h"
#include "fr_trigger.h"

int tptrace_verbosity = -1;	/* the watch's "ignoring" lines stay quiet here */

static int job_of(const char *env, size_t len, char *job)
{
	return fr_job_of_environ(env, len, job, FR_JOB_MAX + 1);
}

static void test_job(void)
{
	static const char all[] = "PATH=/bin\0MASTER_ADDR=10.0.0.1\0SLURM_JOB_ID=81234\0"
				  "MASTER_PORT=29500\0TORCHELASTIC_RUN_ID=run-7\0";
	static const char slurm[] = "MASTER_ADDR=10.0.0.1\0SLURM_JOB_ID=81234\0MASTER_PORT=29500\0";
	static const char master[] = "MASTER_PORT=29500\0HOME=/root\0MASTER_ADDR=node-1.ib\0";
	static const char addr_only[] = "MASTER_ADDR=10.0.0.1\0TOKEN=secret\0";
	static const char bad[] = "SLURM_JOB_ID=a b\"c\0";
	static const char empty[] = "SLURM_JOB_ID=\0";
	char job[FR_JOB_MAX + 1];

	CHECK(job_of(all, sizeof(all) - 1, job) == 0, "all");
	CHECK_STR(job, "run-7");
	CHECK(job_of(slurm, sizeof(slurm) - 1, job) == 0, "slurm");
	CHECK_STR(job, "81234");
	CHECK(job_of(master, sizeof(master) - 1, job) == 0, "master");
	CHECK_STR(job, "node-1.ib:29500");
	CHECK(job_of(addr_only, sizeof(addr_only) - 1, job) == -ENOENT, "no port: no job");
	CHECK(job_of(bad, sizeof(bad) - 1, job) == -EINVAL, "quotes and spaces refused");
	CHECK(job_of(empty, sizeof(empty) - 1, job) == -ENOENT, "empty value: no job");
	/* a value cut off by a short read */
	CHECK(job_of("SLURM_JOB_ID=8123", 17, job) == -EINVAL, "unterminated");
	CHECK(fr_job_valid("a:b@c_d-e.f") && !fr_job_valid("") && !fr_job_valid("a/b"), "job chars");
	CHECK(fr_host_valid("node17") && !fr_host_valid("..") && !fr_host_valid("a:b") &&
	      !fr_host_valid("a/b"), "host chars");
}

#define ID "0123456789abcdef0123456789abcdef"
#define VALID "{\"schema\":\"tptrace-fr-trigger\",\"version\":1,\"id\":\"" ID "\"," \
	      "\"job\":\"81234\",\"origin_host\":\"n17\",\"reason\":\"stall\"," \
	      "\"time_ns\":1795940186369426561}"

static int parse(const char *text, const char *id)
{
	struct fr_trigger_rec t;
	char err[128];

	return fr_trigger__parse(text, strlen(text), id, &t, err, sizeof(err));
}

static void test_parse(void)
{
	static const char *const bad[] = {
		"", "[]", "{}", "null", "{\"schema\":\"tptrace-fr\"}",
		"{\"schema\":\"tptrace-fr-trigger\",\"version\":2,\"id\":\"" ID "\",\"job\":\"j\","
		"\"origin_host\":\"h\",\"reason\":\"stall\",\"time_ns\":1}",
		"{\"schema\":\"tptrace-fr-trigger\",\"version\":1,\"id\":\"0123\",\"job\":\"j\","
		"\"origin_host\":\"h\",\"reason\":\"stall\",\"time_ns\":1}",
		"{\"schema\":\"tptrace-fr-trigger\",\"version\":1,\"id\":\"" ID "\",\"job\":\"../x\","
		"\"origin_host\":\"h\",\"reason\":\"stall\",\"time_ns\":1}",
		"{\"schema\":\"tptrace-fr-trigger\",\"version\":1,\"id\":\"" ID "\",\"job\":\"j\","
		"\"origin_host\":\"h\\n\",\"reason\":\"stall\",\"time_ns\":1}",
		"{\"schema\":\"tptrace-fr-trigger\",\"version\":1,\"id\":\"" ID "\",\"job\":\"j\","
		"\"origin_host\":\"h\",\"reason\":\"rm -rf\",\"time_ns\":1}",
		"{\"schema\":\"tptrace-fr-trigger\",\"version\":1,\"id\":\"" ID "\",\"job\":\"j\","
		"\"origin_host\":\"h\",\"reason\":\"stall\",\"time_ns\":-5}",
		"{\"schema\":\"tptrace-fr-trigger\",\"version\":1,\"id\":\"" ID "\",\"job\":7,"
		"\"origin_host\":\"h\",\"reason\":\"stall\",\"time_ns\":1}",
	};
	struct fr_trigger_rec t;
	char err[128], big[FR_TRIGGER_MAX_BYTES + 64];

	CHECK(fr_trigger__parse(VALID, strlen(VALID), ID, &t, err, sizeof(err)) == 0, "valid: %s", err);
	CHECK_STR(t.id, ID);
	CHECK_STR(t.job, "81234");
	CHECK_STR(t.origin_host, "n17");
	CHECK_STR(t.reason, "stall");
	CHECK(t.time_ns > 1795940186000000000LL, "time");
	CHECK(parse(VALID, "ffffffffffffffffffffffffffffffff") == -EINVAL, "id must match the name");
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		CHECK(parse(bad[i], NULL) == -EINVAL, "bad[%zu] refused", i);
	/* bounded: the valid record padded past 4 KiB is refused */
	memset(big, ' ', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	memcpy(big, VALID, strlen(VALID));
	CHECK(parse(big, NULL) == -EINVAL, "over 4 KiB refused");
	/* mutations: every truncation and every single-byte change parses or fails cleanly,
	 * and what parses still holds valid fields */
	for (size_t len = 0; len < strlen(VALID); len++) {
		CHECK(fr_trigger__parse(VALID, len, NULL, &t, err, sizeof(err)) == -EINVAL,
		      "truncated at %zu refused", len);
	}
	for (size_t i = 0; i < strlen(VALID); i++) {
		static const char subst[] = { 0, '"', '\\', '/', 'x', '9', '}', '\n', (char)0xff };

		for (size_t k = 0; k < sizeof(subst); k++) {
			char m[sizeof(VALID)];

			memcpy(m, VALID, sizeof(VALID));
			m[i] = subst[k];
			if (!fr_trigger__parse(m, sizeof(VALID) - 1, NULL, &t, err, sizeof(err)))
				CHECK(fr_job_valid(t.job) && fr_host_valid(t.origin_host) &&
				      strlen(t.id) == FR_TRIGGER_ID_LEN, "mutation %zu/%zu fields", i, k);
		}
	}
}

static void test_watch(void)
{
	char dir[] = UNIT_OUT_DIR "/trigger.XXXXXX", path[512];
	struct fr_trigger_rec old, t1, t2, got;
	struct fr_watch *w;
	uint64_t now = 1000000000000ULL;
	int fd, n = 0;

	if (!mkdtemp(dir)) {
		CHECK(0, "mkdtemp: %s", strerror(errno));
		return;
	}
	CHECK(fr_trigger__write(dir, "job-1", "hostA", "command", &old) == 0, "write old");
	w = fr_watch__new(dir, true);
	CHECK(w != NULL, "watch");
	if (!w)
		return;
	CHECK(fr_watch__next(w, now, &got) == 0, "a trigger older than the watch is not acted on");
	CHECK(fr_trigger__write(dir, "job-1", "hostB", "stall", &t1) == 0, "write t1");
	CHECK(fr_trigger__write(dir, "job-2", "hostC", "signal", &t2) == 0, "write t2");
	snprintf(path, sizeof(path), "%s/tptrace-trigger.%032x.json", dir, 0xbad);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	CHECK(fd >= 0 && write(fd, "{", 1) == 1, "malformed");
	close(fd);
	/* within the scan interval but inotify said "look": both new ones, once each */
	while (fr_watch__next(w, now + 1, &got) == 1) {
		n++;
		CHECK(!strcmp(got.id, t1.id) || !strcmp(got.id, t2.id), "a new id");
		CHECK(strcmp(got.id, old.id), "never the old one");
	}
	CHECK(n == 2, "two new triggers, got %d", n);
	CHECK(fr_watch__next(w, now + 5000000000ULL, &got) == 0, "nothing twice (rescan)");
	fr_watch__free(w);
	/* no inotify (NFS): the scan every second finds it, not before */
	w = fr_watch__new(dir, false);
	CHECK(w != NULL, "polling watch");
	if (!w)
		return;
	CHECK(fr_trigger__write(dir, "job-1", "hostA", "command", &t1) == 0, "write t3");
	CHECK(fr_watch__next(w, now, &got) == 1 && !strcmp(got.id, t1.id), "t3 found by the scan");
	CHECK(fr_trigger__write(dir, "job-1", "hostA", "command", &t2) == 0, "write t4");
	CHECK(fr_watch__next(w, now + 500000000ULL, &got) == 0, "no scan within the second");
	CHECK(fr_watch__next(w, now + 1000000000ULL, &got) == 1 && !strcmp(got.id, t2.id),
	      "t4 found a second later");
	CHECK(fr_watch__next(w, now + 3000000000ULL, &got) == 0, "once");
	fr_watch__free(w);
	{
		DIR *d = opendir(dir);
		struct dirent *de;

		while (d && (de = readdir(d)))
			if (de->d_name[0] != '.' || strchr(de->d_name, 't')) {
				char p[600];

				snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
				unlink(p);
			}
		if (d)
			closedir(d);
		rmdir(dir);
	}
}

int main(void)
{
	test_job();
	test_parse();
	test_watch();
	return check_done();
}
