// SPDX-License-Identifier: MIT
/* tptrace-fr: offline analyzer of tptrace flight-recorder dumps (docs/fr-schema.md).
 *
 * Reads every tptrace-fr.*.json of a directory, and every PyTorch flight-recorder dump found
 * there by content (fr_torch.c), with a few parser threads; dumps are folded
 * into the analysis in file-name order (whatever thread parsed them) so the verdicts do not
 * depend on scheduling. Exit 0: no problem found, 1: problems found, 2: usage or input error.
 */
#include <argp.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#include "cli_output.h"
#include "fr_analyze.h"
#include "fr_parse.h"
#include "fr_torch.h"
#include "growbuf.h"
#include "util.h"

#ifndef TPTRACE_VERSION
#define TPTRACE_VERSION "0.0.0"
#endif

/* Dumps that together hold at most this many bytes are read whole: on a small job a mismatch
 * anywhere in the rings is found without asking. Beyond it only the newest FR_TAIL_DEFAULT
 * entries of each dump are read (and the report says how many were skipped). */
#define FR_FULL_READ_MAX_BYTES (1LL << 30)
#define FR_TAIL_DEFAULT 256
#define FR_TAIL_AUTO (-1L)

/* --json: cli_output (user/base/cli_output.h) */
static struct env {
	const char *dir;
	double skew_ms;
	double stuck_ms;
	int jobs;
	int verbose;
	long tail;		/* 0: every entry; FR_TAIL_AUTO: by the dumps' total size */
	int64_t full_max;	/* auto: read every entry up to this many bytes in all */
	const char *export_torch;	/* --export-torch OUT */
} env = {
	.tail = FR_TAIL_AUTO,
	.full_max = FR_FULL_READ_MAX_BYTES,
	.skew_ms = 1000,
	.stuck_ms = 10000,
	.jobs = 8,	/* reading is latency-bound (seeks, cold cache): more than the CPUs */
};

const char *argp_program_version = "tptrace-fr " TPTRACE_VERSION;
static const char doc[] =
"tptrace-fr: find the rank that hung a CUDA/NCCL job from tptrace\n"
"flight-recorder dumps.\n"
"\n"
"USAGE: tptrace-fr [--json] [--skew-ms MS] [--stuck-ms MS] [--tail N] DIR\n"
"       tptrace-fr --export-torch OUT DIR\n"
"\n"
"Reads every tptrace-fr.<host>.<pid>.json in DIR (all ranks, all hosts),\n"
"and PyTorch flight-recorder dumps (pickles, found by content; named\n"
"<prefix><rank>, e.g. nccl_trace_rank_0) alone or mixed with them,\n"
"aligns the ranks of each communicator by collective/p2p sequence number,\n"
"and reports, most causal first: failed communicator inits, dead ranks,\n"
"missing dumps, ranks that never entered a collective the others wait in,\n"
"mismatched collectives (type, count, dtype, reduce op, root; the minority\n"
"is the culprit), unmatched send/recv, threads stuck in a CUDA/NCCL call,\n"
"late arrivals and ranks whose GPU never finished a collective. Exit status:\n"
"0 no problem found, 1 problems found, 2 bad input. --json prints the\n"
"verdicts as one JSON object instead of the text.\n"
"\n"
"Communicators created before tptrace attached have no cross-rank id in the\n"
"dumps: they are matched across ranks by their collective sequences\n"
"(reported as inferred:<hash>). Every entry of every dump is read while the\n"
"dumps hold at most 1 GiB in all (--full-read-max); beyond that only the\n"
"header and the newest 256 entries of each dump are read, and the report\n"
"says how many older entries were skipped (a mismatch further back could be\n"
"among them). --tail N reads the newest N whatever the size.\n"
"\n"
"EXAMPLES:\n"
"  tptrace-fr /var/lib/tptrace               # human verdict\n"
"  tptrace-fr --json /var/lib/tptrace        # machine-readable verdicts\n"
"  tptrace-fr --skew-ms 200 --stuck-ms 60000 /var/lib/tptrace\n"
"  tptrace-fr --tail all /var/lib/tptrace    # every entry, however large\n"
"  tptrace-fr --export-torch /tmp/fr /var/lib/tptrace   # for torch's fr_trace\n";

enum { OPT_SKEW = 1000, OPT_STUCK, OPT_TAIL, OPT_FULL_MAX, OPT_EXPORT_TORCH };

static const struct argp_option opts[] = {
	{ "skew-ms", OPT_SKEW, "MS", 0, "late_arrival threshold (default 1000)", 0 },
	{ "stuck-ms", OPT_STUCK, "MS", 0, "stuck_in_call threshold (default 10000)", 0 },
	{ "jobs", 'j', "N", 0, "Reader/parser threads (default 8)", 0 },
	{ "tail", OPT_TAIL, "auto|all|N", 0, "auto (default): every entry while the dumps hold "
	  "at most --full-read-max bytes, else the newest 256 of each dump; all or 0: every "
	  "entry; N: the newest N entries of each dump", 0 },
	{ "full-read-max", OPT_FULL_MAX, "SIZE", 0, "--tail auto reads every entry up to this "
	  "total dump size (bytes, or with K/M/G; default 1G)", 0 },
	{ "export-torch", OPT_EXPORT_TORCH, "OUT", 0, "Write each tptrace dump of DIR in PyTorch's "
	  "flight-recorder format to OUT/nccl_trace_rank_<rank> (for torchfrtrace) instead of "
	  "analysing", 0 },
	{ "verbose", 'v', NULL, 0, "More diagnostics on stderr", 0 },
	{},
};

static error_t parse_arg(int key, char *arg, struct argp_state *state)
{
	char *end;
	double d;
	long l;

	switch (key) {
	case OPT_EXPORT_TORCH:
		if (!*arg)
			argp_error(state, "empty --export-torch directory");
		env.export_torch = arg;
		break;
	case OPT_SKEW:
	case OPT_STUCK:
		errno = 0;
		d = strtod(arg, &end);
		if (errno || end == arg || *end || d < 0 || d > 1e9)
			argp_error(state, "invalid --%s '%s' (milliseconds >= 0)",
				   key == OPT_SKEW ? "skew-ms" : "stuck-ms", arg);
		*(key == OPT_SKEW ? &env.skew_ms : &env.stuck_ms) = d;
		break;
	case 'j':
		errno = 0;
		l = strtol(arg, &end, 10);
		if (errno || end == arg || *end || l < 1 || l > 64)
			argp_error(state, "invalid --jobs '%s' (1..64)", arg);
		env.jobs = (int)l;
		break;
	case 'v':
		env.verbose++;
		break;
	case OPT_FULL_MAX:
		errno = 0;
		l = strtol(arg, &end, 10);
		if (!errno && end != arg && l >= 0) {
			int sh = !strcmp(end, "K") ? 10 : !strcmp(end, "M") ? 20 :
				 !strcmp(end, "G") ? 30 : *end ? -1 : 0;

			if (sh >= 0 && l <= (INT64_MAX >> sh)) {
				env.full_max = (int64_t)l << sh;
				break;
			}
		}
		argp_error(state, "invalid --full-read-max '%s' (bytes, or a number with K, M or G)",
			   arg);
		break;
	case OPT_TAIL:
		if (!strcmp(arg, "auto")) {
			env.tail = FR_TAIL_AUTO;
			break;
		}
		if (!strcmp(arg, "all")) {
			env.tail = 0;
			break;
		}
		errno = 0;
		l = strtol(arg, &end, 10);
		if (errno || end == arg || *end || l < 0 || l > (1L << 22))
			argp_error(state, "invalid --tail '%s' (0..%ld entries, all or auto)", arg, 1L << 22);
		env.tail = l;
		break;
	case ARGP_KEY_ARG:
		if (env.dir)
			argp_error(state, "unexpected argument '%s' (one directory)", arg);
		env.dir = arg;
		break;
	case ARGP_KEY_END:
		if (!env.dir)
			argp_error(state, "no dump directory given");
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

static bool is_dump_name(const char *name)
{
	size_t len = strlen(name);

	/* tptrace-fr.<host>.<pid>.json or .json.gz (--gzip); the writer's temp files start with
	 * a dot */
	return len > 16 && !strncmp(name, "tptrace-fr.", 11) &&
	       (!strcmp(name + len - 5, ".json") || !strcmp(name + len - 8, ".json.gz"));
}

#define FR_GZ_MAX (16ULL << 30)	/* inflated bytes of one dump */

static bool is_gz_name(const char *path)
{
	size_t len = strlen(path);

	return len > 3 && !strcmp(path + len - 3, ".gz");
}

/* A .json.gz dump, inflated whole into *buf (grown as needed); 0 or -errno (-EINVAL: not
 * valid gzip). Tail mode reads these whole: a gzip stream has no random access. */
static int slurp_gz(const char *path, char **buf, size_t *cap, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), zerr;
	size_t n = 0;
	gzFile gz;

	if (fd < 0)
		return -errno;
	gz = gzdopen(fd, "rb");
	if (!gz) {
		close(fd);
		return -ENOMEM;
	}
	gzbuffer(gz, 256 << 10);
	for (;;) {
		int r;

		if (*cap - n < 2) {
			size_t ncap = *cap ? *cap * 2 : 1 << 20;
			char *p = realloc(*buf, ncap);

			if (!p) {
				gzclose(gz);
				return -ENOMEM;
			}
			*buf = p;
			*cap = ncap;
		}
		r = gzread(gz, *buf + n, (unsigned)((*cap - n - 1) > (1u << 30) ? 1u << 30 : *cap - n - 1));
		if (r < 0) {
			gzerror(gz, &zerr);
			gzclose(gz);
			return zerr == Z_ERRNO ? -EIO : -EINVAL;
		}
		if (r == 0)
			break;
		n += r;
		if (n > FR_GZ_MAX) {	/* a decompression bomb is not a dump */
			gzclose(gz);
			return -EFBIG;
		}
	}
	gzclose(gz);
	*len = n;
	return 0;
}

/* ---- PyTorch flight-recorder dumps (tools/fr/fr_torch.c) ----
 * Found by content, whatever their name: a regular file (never a FIFO such as PyTorch's
 * <prefix><rank>.pipe, never a symlink) that starts as a pickle does. */
static bool is_torch_file(int dirfd, const char *name)
{
	unsigned char magic[2];
	struct stat st;
	ssize_t n;
	int fd;

	if (name[0] == '.' || fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
		return false;
	fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return false;
	n = pread(fd, magic, sizeof(magic), 0);
	close(fd);
	return n == 2 && fr_torch_is_dump(magic, 2);
}

static const char *base_name(const char *path)
{
	const char *b = strrchr(path, '/');

	return b ? b + 1 : path;
}

static int cmp_str(const void *x, const void *y)
{
	return strcmp(*(char *const *)x, *(char *const *)y);
}

struct shared {
	char **paths;
	int nr_paths;
	int next_file;		/* next to parse */
	int next_fold;		/* next to fold: folds happen in path order */
	pthread_mutex_t lock;
	pthread_cond_t turn;
	struct fr_analysis *an;
	int err;
	int nr_corrupt;
};

/* Reading thousands of dumps takes seconds: past 2 s, a line on a terminal's stderr says how
 * far it got (rewritten in place, cleared at the end); never on a pipe or file. */
struct progress {
	struct shared *sh;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	bool done, shown;
};

static void *progress_thread(void *arg)
{
	struct progress *pr = arg;
	uint64_t t0 = now_ns();

	pthread_mutex_lock(&pr->lock);
	while (!pr->done) {
		struct timespec until;
		uint64_t now = now_ns();
		int n;

		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += 250000000;
		if (until.tv_nsec >= 1000000000) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&pr->cv, &pr->lock, &until);
		if (pr->done || now - t0 < 2000000000ULL)
			continue;
		pthread_mutex_lock(&pr->sh->lock);
		n = pr->sh->next_fold;
		pthread_mutex_unlock(&pr->sh->lock);
		fprintf(stderr, "\rtptrace-fr: read %d of %d dumps (%.0f s)...", n, pr->sh->nr_paths,
			(now - t0) / 1e9);
		pr->shown = true;
	}
	if (pr->shown)
		fprintf(stderr, "\r\033[K");
	pthread_mutex_unlock(&pr->lock);
	return NULL;
}

/* reads a whole file into *buf (grown as needed); 0 or -errno */
static int slurp(const char *path, char **buf, size_t *cap, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	size_t n = 0;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) == 0 && st.st_size > 0 && (size_t)st.st_size + 1 > *cap) {
		char *p = realloc(*buf, st.st_size + 1);

		if (!p) {
			close(fd);
			return -ENOMEM;
		}
		*buf = p;
		*cap = st.st_size + 1;
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	for (;;) {
		ssize_t r;

		if (n == *cap) {
			size_t ncap = *cap ? *cap * 2 : 1 << 20;
			char *p = realloc(*buf, ncap);

			if (!p) {
				close(fd);
				return -ENOMEM;
			}
			*buf = p;
			*cap = ncap;
		}
		r = read(fd, *buf + n, *cap - n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			close(fd);
			return (int)r;
		}
		if (r == 0)
			break;
		n += r;
	}
	close(fd);
	*len = n;
	return 0;
}

/* pread of [off, off+n) into *buf (grown as needed); 0 or -errno; *got may be short at EOF */
static int read_at(int fd, off_t off, size_t n, char **buf, size_t *cap, size_t *got)
{
	size_t have = 0;

	if (n + 1 > *cap) {
		char *p = realloc(*buf, n + 1);

		if (!p)
			return -ENOMEM;
		*buf = p;
		*cap = n + 1;
	}
	while (have < n) {
		ssize_t r = pread(fd, *buf + have, n - have, off + (off_t)have);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			break;
		have += r;
	}
	*got = have;
	return 0;
}

/* Tail mode: the header from the file's start, the newest env.tail entries from its end.
 * Falls back to reading the whole file when the entries would not save anything. Returns 0
 * (parsed, or *perr set by the parser), or -errno for I/O. *skipped: the entries left out,
 * or FR_UNK when the dump does not say how many it held. */
static int parse_tail(const char *path, struct fr_dump *d, char **buf, size_t *cap,
		      char **tbuf, size_t *tcap, int *perr, int64_t *skipped)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), err = 0, r;
	size_t head = 64 << 10, got = 0, eoff = 0, len;
	int64_t nr_file = FR_UNK;
	struct stat st;
	off_t size;
	double per;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st)) {
		err = -errno;
		goto out;
	}
	size = st.st_size;
	*skipped = 0;
	for (;;) {
		if ((err = read_at(fd, 0, head, buf, cap, &got)))
			goto out;
		r = fr_dump__parse_head(d, *buf, got, &eoff);
		if (r != 1 || got < head)
			break;
		head *= 4;	/* a header with many comms */
	}
	if (r != 0) {
		/* an error in the header, or no "entries" before the end: the whole file, so that
		 * the report names the same error as a full read */
		goto full;
	}
	if (d->entries_recorded != FR_UNK && d->entries_recorded >= 0) {
		nr_file = d->entries_recorded;
		if (d->entries_overwritten != FR_UNK && d->entries_overwritten > 0 &&
		    d->entries_overwritten <= nr_file)
			nr_file -= d->entries_overwritten;
	}
	if (nr_file != FR_UNK && nr_file <= env.tail)
		goto full;
	/* bytes per entry from the file itself; unknown counts start from 1 KiB each */
	per = nr_file > 0 ? (double)(size - (off_t)eoff) / (double)nr_file : 1024;
	len = (size_t)(per * env.tail * 1.25) + 4096;
	for (;;) {
		off_t start = size - (off_t)len;

		if (start <= (off_t)eoff)
			goto full;
		if ((err = read_at(fd, start, (size_t)(size - start), tbuf, tcap, &got)))
			goto out;
		r = fr_dump__parse_tail(d, *tbuf, got, (size_t)start, (size_t)env.tail);
		if (r < 0) {
			*perr = r;
			goto out;
		}
		if (r == 0 && d->nr_entries >= (size_t)env.tail) {
			*skipped = nr_file == FR_UNK ? FR_UNK :
				   nr_file > (int64_t)d->nr_entries ? nr_file - (int64_t)d->nr_entries : 0;
			goto out;
		}
		len *= 2;	/* too few entries (bigger ones at the end): reach further back */
	}
full:
	if ((err = read_at(fd, 0, (size_t)size, buf, cap, &got)))
		goto out;
	*perr = fr_dump__parse(d, *buf, got);
	if (!*perr && d->nr_entries > (size_t)env.tail) {
		/* the same newest N whichever way the file was read */
		memmove(d->entries, d->entries + (d->nr_entries - env.tail),
			env.tail * sizeof(*d->entries));
		*skipped = (int64_t)(d->nr_entries - env.tail);
		d->nr_entries = env.tail;
	}
out:
	close(fd);
	return err;
}

/* --tail auto: every entry while the dumps together are small, else the newest
 * FR_TAIL_DEFAULT of each. A dump that cannot be stat'ed counts as nothing here; reading it
 * names the error. */
static void choose_read(struct shared *sh)
{
	struct fr_read r = { .tail = env.tail, .forced = env.tail != FR_TAIL_AUTO,
			     .max_bytes = env.full_max };
	struct stat st;

	for (int i = 0; i < sh->nr_paths; i++)
		if (!stat(sh->paths[i], &st) && st.st_size > 0)
			r.total_bytes += st.st_size;
	if (env.tail == FR_TAIL_AUTO)
		env.tail = r.total_bytes <= env.full_max ? 0 : FR_TAIL_DEFAULT;
	r.tail = env.tail;
	if (env.verbose)
		fprintf(stderr, "tptrace-fr: %d dumps, %lld bytes: %s\n", sh->nr_paths,
			(long long)r.total_bytes, env.tail ? "tail read" : "reading every entry");
	fr_analysis__set_read(sh->an, &r);
}

static void *worker(void *arg)
{
	struct shared *sh = arg;
	struct fr_dump d;
	char *buf = NULL, *tbuf = NULL;
	size_t cap = 0, tcap = 0;

	fr_dump__init(&d);
	for (;;) {
		size_t len = 0;
		int i, err, perr = 0;
		int64_t skipped = 0;
		char why[200];

		pthread_mutex_lock(&sh->lock);
		i = sh->next_file++;
		pthread_mutex_unlock(&sh->lock);
		if (i >= sh->nr_paths)
			break;
		if (!is_dump_name(base_name(sh->paths[i]))) {
			/* admitted by content: a PyTorch dump, read whole (a pickle has no tail to
			 * seek to; PyTorch's rings are small), then cut like a tail read */
			if (!(err = slurp(sh->paths[i], &buf, &cap, &len)))
				perr = fr_dump__parse_torch(&d, buf, len,
					fr_torch_rank_from_name(base_name(sh->paths[i])));
			if (!err && !perr && env.tail && d.nr_entries > (size_t)env.tail) {
				memmove(d.entries, d.entries + (d.nr_entries - env.tail),
					env.tail * sizeof(*d.entries));
				skipped = (int64_t)(d.nr_entries - env.tail);
				d.nr_entries = env.tail;
			}
		} else if (is_gz_name(sh->paths[i])) {
			if (!(err = slurp_gz(sh->paths[i], &buf, &cap, &len)))
				perr = fr_dump__parse(&d, buf, len);
		} else if (env.tail)
			err = parse_tail(sh->paths[i], &d, &buf, &cap, &tbuf, &tcap, &perr, &skipped);
		else if (!(err = slurp(sh->paths[i], &buf, &cap, &len)))
			perr = fr_dump__parse(&d, buf, len);
		if (err == -ENOMEM || perr == -ENOMEM)
			perr = -ENOMEM;
		else if (err == -EINVAL)
			snprintf(why, sizeof(why), "unreadable: not valid gzip");
		else if (err)
			snprintf(why, sizeof(why), "unreadable: %s", strerror(-err));
		else if (perr == -EINVAL)
			snprintf(why, sizeof(why), "%s", d.err);

		pthread_mutex_lock(&sh->lock);
		while (sh->next_fold != i)
			pthread_cond_wait(&sh->turn, &sh->lock);
		if (perr == -ENOMEM) {
			sh->err = -ENOMEM;
		} else if (err || perr) {
			fprintf(stderr, "tptrace-fr: %s: %s; skipped\n", sh->paths[i], why);
			sh->nr_corrupt++;
			if (fr_analysis__add_corrupt(sh->an, sh->paths[i], err ? NULL : &d, why))
				sh->err = -ENOMEM;
		} else if (!sh->err) {
			if (fr_analysis__add_dump(sh->an, &d, sh->paths[i]))
				sh->err = -ENOMEM;
			fr_analysis__note_skipped(sh->an, skipped);
		}
		sh->next_fold++;
		pthread_cond_broadcast(&sh->turn);
		pthread_mutex_unlock(&sh->lock);
	}
	free(buf);
	free(tbuf);
	fr_dump__release(&d);
	return NULL;
}

/* ---- cross-host triggers (docs/fr-schema.md "Triggers") ----
 * Every host's recorder dumps when one of them writes a trigger, and each dump names the
 * trigger it answered. One moment is analysed: the newest trigger (by its origin's clock,
 * only to order triggers) that every host with trigger dumps answered; dumps of other
 * triggers are left out, dumps of no trigger (exit, final) stay. */
struct head_info {
	char host[FR_NAME_LEN];
	char trigger_id[40], origin[FR_NAME_LEN], reason[16];
	int64_t time_ns;
};

static void read_head_info(const char *path, struct fr_dump *d, struct head_info *h)
{
	char *buf = malloc(64 << 10);
	size_t off;
	int n = -1;
	gzFile gz = gzopen(path, "rb");	/* a .json.gz dump, or a plain one read as is */

	memset(h, 0, sizeof(*h));
	if (gz && buf)
		n = gzread(gz, buf, 64 << 10);
	if (gz)
		gzclose(gz);
	if (n > 0) {
		/* "host" and "trigger" come before the big arrays: the head has them even when
		 * it ends mid-dump */
		fr_dump__parse_head(d, buf, (size_t)n, &off);
		snprintf(h->host, sizeof(h->host), "%s", d->host);
		snprintf(h->trigger_id, sizeof(h->trigger_id), "%s", d->trigger_id);
		snprintf(h->origin, sizeof(h->origin), "%s", d->trigger_origin);
		snprintf(h->reason, sizeof(h->reason), "%s", d->trigger_reason);
		h->time_ns = d->trigger_time_ns;
	}
	free(buf);
}

static bool host_answered(const struct head_info *hi, int n, const char *host, const char *id)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(hi[i].host, host) && !strcmp(hi[i].trigger_id, id))
			return true;
	return false;
}

static int select_trigger(struct shared *sh, struct fr_trigger_sel *sel)
{
	struct head_info *hi = calloc(sh->nr_paths, sizeof(*hi));
	int best = -1, kept = 0;
	struct fr_dump d;

	memset(sel, 0, sizeof(*sel));
	if (!hi)
		return -ENOMEM;
	fr_dump__init(&d);
	for (int i = 0; i < sh->nr_paths; i++)
		read_head_info(sh->paths[i], &d, &hi[i]);
	fr_dump__release(&d);
	for (int i = 0; i < sh->nr_paths; i++) {
		bool first_id = true, first_host = true, all = true;

		if (!hi[i].trigger_id[0])
			continue;
		sel->present = true;
		for (int k = 0; k < i; k++) {
			if (!strcmp(hi[k].trigger_id, hi[i].trigger_id))
				first_id = false;
			if (hi[k].trigger_id[0] && !strcmp(hi[k].host, hi[i].host))
				first_host = false;
		}
		sel->nr_hosts += first_host;
		if (!first_id)
			continue;
		sel->nr_triggers++;
		for (int k = 0; k < sh->nr_paths && all; k++)
			if (hi[k].trigger_id[0] &&
			    !host_answered(hi, sh->nr_paths, hi[k].host, hi[i].trigger_id))
				all = false;
		if (all && (best < 0 || hi[i].time_ns > hi[best].time_ns ||
			    (hi[i].time_ns == hi[best].time_ns &&
			     strcmp(hi[i].trigger_id, hi[best].trigger_id) > 0)))
			best = i;
	}
	if (best >= 0) {
		sel->consistent = true;
		snprintf(sel->id, sizeof(sel->id), "%s", hi[best].trigger_id);
		snprintf(sel->origin, sizeof(sel->origin), "%s", hi[best].origin);
		snprintf(sel->reason, sizeof(sel->reason), "%s", hi[best].reason);
		for (int i = 0; i < sh->nr_paths; i++) {
			if (hi[i].trigger_id[0] && strcmp(hi[i].trigger_id, sel->id)) {
				if (env.verbose)
					fprintf(stderr, "tptrace-fr: %s answered trigger %s, not %s: "
						"left out\n", sh->paths[i], hi[i].trigger_id, sel->id);
				free(sh->paths[i]);
				sel->nr_skipped++;
				continue;
			}
			sh->paths[kept++] = sh->paths[i];
		}
		sh->nr_paths = kept;
	}
	free(hi);
	return 0;
}

/* a whole tptrace dump (plain or .json.gz) into d; 0 or the one-line reason in why */
static int read_whole(const char *path, struct fr_dump *d, char **buf, size_t *cap, char *why,
		      size_t why_cap)
{
	size_t len = 0;
	int err = is_gz_name(path) ? slurp_gz(path, buf, cap, &len) : slurp(path, buf, cap, &len);

	if (err) {
		snprintf(why, why_cap, "unreadable: %s", err == -EINVAL ? "not valid gzip" :
			 strerror(-err));
		return err;
	}
	err = fr_dump__parse(d, *buf, len);
	if (err)
		snprintf(why, why_cap, "%s", err == -ENOMEM ? "out of memory" : d->err);
	return err;
}

/* --export-torch OUT: every tptrace dump of DIR as PyTorch's <prefix><rank> pickle. Two
 * passes: the first learns each comm's members from all ranks (pg_config lists them), the
 * second writes. Exit 0: every dump written; 2: some could not be. */
static int export_torch(struct shared *sh)
{
	struct fr_torch_export *x = fr_torch_export__new();
	char *buf = NULL, why[200], path[4096];
	int ret = 0, written = 0;
	size_t cap = 0;
	struct fr_dump d;
	struct stat st;

	fr_dump__init(&d);
	if (!x)
		goto nomem;
	if (mkdir(env.export_torch, 0755) && errno != EEXIST) {
		fprintf(stderr, "tptrace-fr: cannot create %s: %s\n", env.export_torch,
			strerror(errno));
		ret = 2;
		goto out;
	}
	if (lstat(env.export_torch, &st) || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "tptrace-fr: --export-torch %s is not a directory\n",
			env.export_torch);
		ret = 2;
		goto out;
	}
	for (int i = 0; i < sh->nr_paths; i++) {
		int err = read_whole(sh->paths[i], &d, &buf, &cap, why, sizeof(why));

		if (err == -ENOMEM || (!err && fr_torch_export__add(x, &d)))
			goto nomem;
	}
	for (int i = 0; i < sh->nr_paths; i++) {
		int err = read_whole(sh->paths[i], &d, &buf, &cap, why, sizeof(why));

		if (err == -ENOMEM)
			goto nomem;
		if (err) {
			fprintf(stderr, "tptrace-fr: %s: %s; not exported\n", sh->paths[i], why);
			ret = 2;
			continue;
		}
		err = fr_torch_export__write(x, &d, env.export_torch, path, sizeof(path));
		if (err == -ENOMEM)
			goto nomem;
		if (err == -EINVAL) {
			fprintf(stderr, "tptrace-fr: %s: no global rank, which PyTorch's file name "
				"needs; not exported\n", sh->paths[i]);
			ret = 2;
		} else if (err) {
			fprintf(stderr, "tptrace-fr: cannot write %s: %s\n", path, strerror(-err));
			ret = 2;
		} else {
			size_t kept = 0;

			for (size_t k = 0; k < d.nr_entries; k++)
				kept += fr_torch_exportable(&d.entries[k]);
			printf("%s -> %s (%zu entries", sh->paths[i], path, kept);
			if (kept < d.nr_entries)
				printf("; %zu left out: comm inits and ops fr_trace has no name for",
				       d.nr_entries - kept);
			printf(")\n");
			written++;
		}
	}
	if (env.verbose)
		fprintf(stderr, "tptrace-fr: exported %d of %d dumps\n", written, sh->nr_paths);
	goto out;
nomem:
	fprintf(stderr, "tptrace-fr: out of memory\n");
	ret = 2;
out:
	free(buf);
	fr_dump__release(&d);
	fr_torch_export__free(x);
	return ret;
}

int main(int argc, char **argv)
{
	struct argp_child children[] = { { NULL, 0, NULL, 0 }, {} };
	struct argp argp = { .options = opts, .parser = parse_arg, .doc = doc,
			     .children = children };
	struct fr_opts fo;
	struct shared sh = {
		.lock = PTHREAD_MUTEX_INITIALIZER,
		.turn = PTHREAD_COND_INITIALIZER,
	};
	pthread_t tids[64], prog_tid;
	struct progress prog = { .sh = &sh, .lock = PTHREAD_MUTEX_INITIALIZER,
				 .cv = PTHREAD_COND_INITIALIZER };
	bool prog_on = false;
	int nr_threads = 0, cap = 0, ret = 2, err;
	struct dirent *de;
	DIR *dir;

	argp_err_exit_status = 2;	/* usage errors share the bad-input status */
	argp_help_width();
	cli_output.takes = CLI_OUT_JSON;
	children[0].argp = cli_output__argp();
	err = argp_parse(&argp, argc, argv, 0, NULL, NULL);
	if (err)
		return 2;
	fo.skew_ns = (int64_t)(env.skew_ms * 1e6);
	fo.stuck_ns = (int64_t)(env.stuck_ms * 1e6);

	dir = opendir(env.dir);
	if (!dir) {
		fprintf(stderr, "tptrace-fr: cannot read directory %s: %s\n", env.dir,
			strerror(errno));
		return 2;
	}
	while ((de = readdir(dir))) {
		char *path;

		if (!is_dump_name(de->d_name) &&
		    (env.export_torch || !is_torch_file(dirfd(dir), de->d_name)))
			continue;
		if (ARRAY_RESERVE(sh.paths, cap, sh.nr_paths + 1, 256))
			goto nomem;
		if (asprintf(&path, "%s/%s", env.dir, de->d_name) < 0)
			goto nomem;
		sh.paths[sh.nr_paths++] = path;
	}
	closedir(dir);
	dir = NULL;
	if (!sh.nr_paths) {
		fprintf(stderr, "tptrace-fr: no tptrace-fr.*.json dumps%s in %s\n",
			env.export_torch ? "" : " or PyTorch flight-recorder dumps", env.dir);
		goto cleanup;
	}
	qsort(sh.paths, sh.nr_paths, sizeof(char *), cmp_str);
	if (env.export_torch) {
		ret = export_torch(&sh);
		goto cleanup;
	}

	sh.an = fr_analysis__new(&fo);
	if (!sh.an)
		goto nomem;
	{
		struct fr_trigger_sel sel;

		/* one moment first (dumps of other triggers leave), then how to read what is left */
		if (select_trigger(&sh, &sel))
			goto nomem;
		fr_analysis__set_trigger(sh.an, &sel);
	}
	choose_read(&sh);
	if (isatty(STDERR_FILENO) && !pthread_create(&prog_tid, NULL, progress_thread, &prog))
		prog_on = true;
	for (int i = 0; i < env.jobs && i < sh.nr_paths; i++) {
		if (pthread_create(&tids[i], NULL, worker, &sh))
			break;
		nr_threads++;
	}
	if (!nr_threads)
		worker(&sh);
	for (int i = 0; i < nr_threads; i++)
		pthread_join(tids[i], NULL);
	if (prog_on) {
		pthread_mutex_lock(&prog.lock);
		prog.done = true;
		pthread_cond_signal(&prog.cv);
		pthread_mutex_unlock(&prog.lock);
		pthread_join(prog_tid, NULL);
		if (prog.shown)
			fprintf(stderr, "tptrace-fr: analysing %d dumps...\n", sh.nr_paths);
	}
	if (sh.err)
		goto nomem;
	if (env.verbose)
		fprintf(stderr, "tptrace-fr: read %d dumps (%d corrupt)\n", sh.nr_paths,
			sh.nr_corrupt);
	if (fr_analysis__finish(sh.an))
		goto nomem;
	if (fr_analysis__bad_input(sh.an)) {
		fprintf(stderr, "tptrace-fr: %s\n", fr_analysis__bad_input(sh.an));
		ret = 2;
		goto cleanup;
	}
	if (cli_output.json)
		err = fr_analysis__print_json(sh.an, stdout);
	else
		err = fr_analysis__print_human(sh.an, stdout);
	if (err || fflush(stdout)) {
		fprintf(stderr, "tptrace-fr: cannot write the report: %s\n",
			strerror(err ? -err : errno));
		goto cleanup;
	}
	ret = fr_analysis__nr_verdicts(sh.an) ? 1 : 0;
	goto cleanup;
nomem:
	fprintf(stderr, "tptrace-fr: out of memory\n");
	ret = 2;
cleanup:
	if (dir)
		closedir(dir);
	fr_analysis__free(sh.an);
	for (int i = 0; i < sh.nr_paths; i++)
		free(sh.paths[i]);
	free(sh.paths);
	return ret;
}
