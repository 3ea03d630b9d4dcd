// SPDX-License-Identifier: MIT
/* Tier 1: the trigger-record fuzz target (fr_trigger_fuzz.c) under a seeded mutation loop, so
 * it runs in every `make test`, libFuzzer or not: the seed corpus, then 100,000 mutants
 * (byte flips, JSON-ish bytes, inserts, deletes, duplicated ranges, splices of two seeds,
 * growth past the 4 KiB bound). No crash, no contract violation (the target aborts), no
 * memory growth; and through the directory watch, one error line per bad record file, once. */
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include "check.h"
#include "fr_trigger_fuzz.c"

int tptrace_verbosity;

#define MAX_SEEDS 64
#define MAX_LEN 8192

static struct {
	uint8_t *data;
	size_t len;
} seeds[MAX_SEEDS];
static int nr_seeds;
static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void load_seeds(void)
{
	DIR *d = opendir(TRIGGER_CORPUS);
	struct dirent *de;

	CHECK(d != NULL, "corpus %s", TRIGGER_CORPUS);
	while (d && (de = readdir(d)) && nr_seeds < MAX_SEEDS) {
		char path[512];
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", TRIGGER_CORPUS, de->d_name);
		f = fopen(path, "rb");
		if (!f)
			continue;
		seeds[nr_seeds].data = malloc(MAX_LEN);
		seeds[nr_seeds].len = fread(seeds[nr_seeds].data, 1, MAX_LEN, f);
		fclose(f);
		nr_seeds++;
	}
	if (d)
		closedir(d);
}

/* one mutant of a seed into buf; its length */
static size_t mutate(uint8_t *buf)
{
	static const char dict[] = "{}[]\",:\\0123456789eE-+.tfnu \n\xff";
	int s = next() % nr_seeds, rounds = 1 + next() % 4;
	size_t len = seeds[s].len;

	memcpy(buf, seeds[s].data, len);
	while (rounds--) {
		size_t at = len ? next() % len : 0, n = 1 + next() % 16;

		switch (next() % 7) {
		case 0:		/* flip a bit */
			if (len)
				buf[at] ^= 1 << (next() % 8);
			break;
		case 1:		/* a JSON-ish byte */
			if (len)
				buf[at] = dict[next() % (sizeof(dict) - 1)];
			break;
		case 2:		/* insert bytes */
			if (len + n > MAX_LEN)
				break;
			memmove(buf + at + n, buf + at, len - at);
			for (size_t i = 0; i < n; i++)
				buf[at + i] = dict[next() % (sizeof(dict) - 1)];
			len += n;
			break;
		case 3:		/* delete bytes */
			if (at + n > len)
				n = len - at;
			memmove(buf + at, buf + at + n, len - at - n);
			len -= n;
			break;
		case 4:		/* duplicate a range (nesting, repeated keys) */
			if (at + n > len)
				n = len - at;
			if (len + n <= MAX_LEN) {
				memmove(buf + at + n, buf + at, len - at);
				len += n;
			}
			break;
		case 5: {	/* splice: our head, another seed's tail */
			int o = next() % nr_seeds;
			size_t from = seeds[o].len ? next() % seeds[o].len : 0;

			if (at + seeds[o].len - from <= MAX_LEN) {
				memcpy(buf + at, seeds[o].data + from, seeds[o].len - from);
				len = at + seeds[o].len - from;
			}
			break;
		}
		case 6:		/* pad past the 4 KiB bound */
			if (next() % 8 == 0 && len + 5000 <= MAX_LEN) {
				memset(buf + len, ' ', 5000);
				len += 5000;
			}
			break;
		}
	}
	return len;
}

static long maxrss_kb(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_maxrss;
}

/* bad records as files in a watched directory: one "ignoring trigger file" line each, once */
static void test_watch_lines(void)
{
	char dir[] = "/tmp/tptrace-trfuzz.XXXXXX", errpath[600], line[1024];
	uint8_t buf[MAX_LEN];
	int bad = 0, good = 0, lines = 0, saved = dup(2), fd;
	struct fr_trigger_rec t;
	struct fr_watch *w;
	FILE *f;

	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	w = fr_watch__new(dir, false);
	CHECK(w != NULL, "watch");
	for (int i = 0; i < 40; i++) {
		char name[600], err[128];
		size_t len = mutate(buf);
		struct fr_trigger_rec p;

		/* the file name carries the id the record must repeat */
		snprintf(name, sizeof(name), "%s/tptrace-trigger.%032x.json", dir, i);
		if (fr_trigger__parse((char *)buf, len, NULL, &p, err, sizeof(err)) == 0)
			continue;	/* keep the bad ones (a valid one's id would not match) */
		f = fopen(name, "wb");
		fwrite(buf, 1, len, f);
		fclose(f);
		bad++;
	}
	snprintf(errpath, sizeof(errpath), "%s.err", dir);
	fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	dup2(fd, 2);
	close(fd);
	for (uint64_t now = 2000000000ULL; now < 6000000000ULL; now += 1000000000ULL)
		while (fr_watch__next(w, now, &t) == 1)
			good++;
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	f = fopen(errpath, "r");
	while (f && fgets(line, sizeof(line), f)) {
		CHECK(!strncmp(line, "tptrace: ignoring trigger file ", 31) && strchr(line, '\n'),
		      "one line: %s", line);
		lines++;
	}
	if (f)
		fclose(f);
	CHECK(bad > 10 && lines == bad && good == 0, "%d bad records, %d lines, %d taken", bad,
	      lines, good);
	fr_watch__free(w);
	snprintf(line, sizeof(line), "rm -rf %s %s", dir, errpath);
	CHECK(system(line) == 0, "cleanup");
}

int main(void)
{
	static uint8_t buf[MAX_LEN];
	long rss0 = 0;
	int parsed = 0;

	load_seeds();
	CHECK(nr_seeds >= 4, "seeds: %d", nr_seeds);
	if (nr_seeds < 1)
		return check_done();
	for (int i = 0; i < nr_seeds; i++)
		LLVMFuzzerTestOneInput(seeds[i].data, seeds[i].len);
	for (int i = 0; i < 100000; i++) {
		size_t len = mutate(buf);
		struct fr_trigger_rec t;
		char err[128];

		if (i == 10000)
			rss0 = maxrss_kb();
		LLVMFuzzerTestOneInput(buf, len);
		parsed += !fr_trigger__parse((char *)buf, len, NULL, &t, err, sizeof(err));
	}
	CHECK(parsed > 100, "some mutants still parse (%d): the loop reaches the field checks",
	      parsed);
	CHECK(maxrss_kb() - rss0 < 4096, "no memory growth: %ld KiB", maxrss_kb() - rss0);
	test_watch_lines();
	for (int i = 0; i < nr_seeds; i++)
		free(seeds[i].data);
	return check_done();
}
