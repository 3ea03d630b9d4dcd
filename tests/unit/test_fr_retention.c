// SPDX-License-Identifier: MIT
/* Tier 1: --max-dump-mb retention (flightrec_dump.c) over dumps and trigger records: this
 * host's oldest dumps go first, and so do the trigger records this host wrote (oldest first,
 * and any older than every dump left), never the newest trigger, one younger than a minute
 * (other recorders may still be answering it), other hosts' triggers or other files. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "check.h"
#include "flightrec.h"
#include "fr_trigger.h"
#include "target.h"
#include "session.h"
#include "core_sinks.h"

static char dir[] = "/tmp/tptrace-frret.XXXXXX";

static void age(const char *name, int seconds)
{
	char path[512];
	struct timespec ts[2];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	clock_gettime(CLOCK_REALTIME, &ts[0]);
	ts[0].tv_sec -= seconds;
	ts[1] = ts[0];
	CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0, "utime %s", name);
}

static void filler(const char *name, size_t size, int seconds)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	CHECK(f != NULL, "create %s", name);
	if (!f)
		return;
	for (size_t i = 0; i < size; i++)
		fputc(' ', f);
	fclose(f);
	age(name, seconds);
}

/* writes a trigger by host, aged; its file name in name */
static void trigger(const char *host, int seconds, char *name, size_t size)
{
	struct fr_trigger_rec t;

	CHECK(fr_trigger__write(dir, "job-1", host, "stall", &t) == 0, "trigger");
	snprintf(name, size, "tptrace-trigger.%s.json", t.id);
	age(name, seconds);
}

static bool exists(const char *name)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return access(path, F_OK) == 0;
}

int main(void)
{
	struct flightrec_opts fo = { .no_stacks = true, .host_id = "hosta",
				     .max_dump_bytes = 1 << 20 };
	char t_oldest[128], t_mid[128], t_young[128], t_other[128];
	struct flightrec *fr;
	struct target *t;

	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	fo.dump_dir = dir;
	trigger("hosta", 400, t_oldest, sizeof(t_oldest));	/* older than every dump */
	filler("tptrace-fr.hosta.900001.json", 600 << 10, 300);
	trigger("hosta", 250, t_mid, sizeof(t_mid));		/* its dump went: goes too */
	filler("tptrace-fr.hosta.900002.json", 600 << 10, 200);
	trigger("hosta", 10, t_young, sizeof(t_young));		/* may still be answered */
	trigger("hostb", 500, t_other, sizeof(t_other));	/* not ours */
	filler("notes.txt", 10, 1000);

	fr = test_fr_new(&fo);
	t = target__new(getpid());
	CHECK(fr && t && flightrec__add_process(fr, t) == 0, "new");
	CHECK(flightrec__dump_all(fr, "signal") == 1, "one dump");

	CHECK(!exists("tptrace-fr.hosta.900001.json"), "the oldest dump went");
	CHECK(exists("tptrace-fr.hosta.900002.json"), "1.2 MiB -> 0.6 MiB: the next one stays");
	CHECK(!exists(t_oldest), "the oldest trigger went");
	CHECK(!exists(t_mid), "a trigger older than every dump left went");
	CHECK(exists(t_young), "a trigger of the last minute stays");
	CHECK(exists(t_other), "another host's trigger stays");
	CHECK(exists("notes.txt"), "other files stay");

	/* the newest trigger of ours stays however old, even when space is short */
	age(t_young, 5000);
	filler("tptrace-fr.hosta.900003.json", 2 << 20, 4000);
	CHECK(flightrec__dump_all(fr, "signal") == 1, "second dump");
	CHECK(!exists("tptrace-fr.hosta.900003.json"), "the oldest dump went");
	CHECK(exists(t_young), "the newest trigger of ours stays");

	/* two newer triggers of the last minute: the old one may go now, they may not */
	{
		char t_y2[128], t_y3[128];

		trigger("hosta", 30, t_y2, sizeof(t_y2));
		trigger("hosta", 20, t_y3, sizeof(t_y3));
		filler("tptrace-fr.hosta.900004.json", 3 << 20, 10);
		CHECK(flightrec__dump_all(fr, "signal") == 1, "third dump");
		CHECK(!exists("tptrace-fr.hosta.900004.json"), "over the limit: dumps went");
		CHECK(!exists(t_young), "no longer the newest: went");
		CHECK(exists(t_y2) && exists(t_y3), "triggers of the last minute stay");
	}

	test_fr_free(fr);
	target__free(t);
	{
		char cmd[600];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		CHECK(system(cmd) == 0, "cleanup");
	}
	return check_done();
}
