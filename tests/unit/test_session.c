// SPDX-License-Identifier: MIT
/* Tier 1: the acquisition core (user/core/session.c: session__*) with two sinks registered, fed
 * synthetic records: each sink gets every call with its own bytes of the frame, library
 * notices rescan only the live targets the session knows and tell every sink, the newest
 * target of a pid is the pid's, --durations' return probes pair every api, and a stage (a sink
 * with a hold op) is asked first and its consumer alone sees the calls it keeps held. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include "api_id.h"
#include "check.h"
#include "cuda.h"
#include "elfsym.h"
#include "session.h"
#include "target.h"

struct sink {
	char name;
	int entries, calls, exits, libraries;
	uint64_t last_user[3];		/* what the last call's user bytes held */
	enum call_end last_end;
	struct target *last_library;
	int last_new_probes;
	void *last_user_ptr;
	char order[64];			/* 'e' entry, 'c' call, 'x' exit, 'l' library */
	int nr_order;
};

/* both sinks append to one log, to see the order across them */
static char log_order[128];
static int nr_log;

static void note(struct sink *k, char what)
{
	k->order[k->nr_order++] = what;
	log_order[nr_log++] = k->name;
	log_order[nr_log++] = what;
}

static void on_entry(void *ctx, struct call_frame *f, void *user)
{
	struct sink *k = ctx;
	uint64_t *u = user;

	/* a sink's bytes are its own: fill them all with its mark */
	for (int i = 0; i < 3; i++)
		u[i] = (uint64_t)k->name << 56 | f->rec.ts << 2 | (uint64_t)i;
	k->entries++;
	note(k, 'e');
}

static int held_seen;

static void on_call(void *ctx, const struct call *c, void *user)
{
	struct sink *k = ctx;

	held_seen += c->held;
	memcpy(k->last_user, user, sizeof(k->last_user));
	k->last_user_ptr = user;
	k->last_end = c->end;
	k->calls++;
	note(k, 'c');
}

static void on_exit_rec(void *ctx, const struct tp_rec_exit *x)
{
	struct sink *k = ctx;

	(void)x;
	k->exits++;
	note(k, 'x');
}

static void on_library(void *ctx, struct target *t, int new_probes)
{
	struct sink *k = ctx;

	k->last_library = t;
	k->last_new_probes = new_probes;
	k->libraries++;
	note(k, 'l');
}

static const struct session_sink_ops ops = {
	.user_bytes = 3 * sizeof(uint64_t),
	.on_entry = on_entry, .on_call = on_call, .on_exit = on_exit_rec, .on_library = on_library,
};

static uint64_t ts = 1000;

/* ---- a stage and its consumer ---- */
struct stage {
	uint32_t api;			/* the api it holds */
	int asked, kept;
	uint64_t consumer_mark;		/* the consumer's first user slot, as the stage saw it */
	size_t consumer_off;		/* where the consumer's bytes are, from the stage's */
};

static bool stage_hold(void *ctx, const struct call *c, void *user)
{
	struct stage *st = ctx;

	(void)user;
	st->asked++;
	log_order[nr_log++] = 'S';
	log_order[nr_log++] = 'h';
	if (c->frame->rec.api != st->api)
		return false;
	st->kept++;
	st->consumer_mark = c->frame->user[st->consumer_off / 8];
	return true;
}

struct seen_held {
	int calls, held;
};

static void plain_call(void *ctx, const struct call *c, void *user)
{
	struct seen_held *k = ctx;

	(void)user;
	k->calls++;
	k->held += c->held;
}

static void feed_call(struct session *s, int pid, const char *sym)
{
	struct tp_rec_call c = { .type = TP_REC_CALL, .pid = pid, .tid = pid, .ts = ts += 10 };

	c.api = api_id(sym);
	session__ring_cb(s, &c, TP_REC_CALL_SHORT_SIZE);
}

static void feed_ret(struct session *s, int pid, const char *sym)
{
	struct tp_rec_ret r = { .type = TP_REC_RET, .pid = pid, .tid = pid, .ts = ts += 10 };

	r.api = api_id(sym);
	session__ring_cb(s, &r, sizeof(r));
}

static void feed_dlopen(struct session *s, int pid)
{
	struct tp_rec_dlopen d = { .type = TP_REC_DLOPEN, .pid = pid, .tid = pid };

	session__ring_cb(s, &d, sizeof(d));
}

static bool marked(const struct sink *k, uint64_t entry_ts)
{
	for (int i = 0; i < 3; i++)
		if (k->last_user[i] != ((uint64_t)k->name << 56 | entry_ts << 2 | (uint64_t)i))
			return false;
	return true;
}

/* session__find_procs: want is asked first, and a pid it refuses is never read */
static int find_child, also_child;

static bool want_only_child(int pid, void *ctx)
{
	return pid == find_child;
}

static bool want_not_child(int pid, void *ctx)
{
	return pid != find_child;
}

static bool also_counts(int pid, void *ctx)
{
	also_child += pid == find_child;
	return false;
}

static void check_find_procs(void)
{
	static const char *const libc[] = { "libc.so", NULL };
	static const char *const none[] = { "no-such-library.so", NULL };
	static int pids[8192];
	int n, status;
	bool found = false;

	find_child = fork();
	if (!find_child) {
		pause();
		_exit(0);
	}
	CHECK(find_child > 0, "fork");
	n = session__find_procs(libc, want_only_child, NULL, NULL, pids, 8192);
	CHECK(n == 1 && pids[0] == find_child, "wanted: the child alone (%d found)", n);
	n = session__find_procs(none, want_only_child, also_counts, NULL, pids, 8192);
	CHECK(n == 0 && also_child == 1, "not mapped: also asked once (%d, %d)", n, also_child);
	also_child = 0;
	n = session__find_procs(libc, want_not_child, also_counts, NULL, pids, 8192);
	for (int i = 0; i < n; i++)
		found |= pids[i] == find_child;
	CHECK(!found && also_child == 0, "refused: not read, not asked (%d)", also_child);
	n = session__find_procs(libc, NULL, NULL, NULL, pids, 8192);
	for (int i = 0; i < n; i++)
		found |= pids[i] == find_child;
	CHECK(found, "no want: the child maps libc");
	kill(find_child, SIGKILL);
	waitpid(find_child, &status, 0);
}

int main(void)
{
	struct target_probes probes = {};	/* no programs: a scan only reads the maps */
	struct elfsym_cache *cache = elfsym_cache__new();
	struct sink a = { .name = 'A' }, b = { .name = 'B' };
	struct session_sink_ops big = ops;
	struct session *s = session__new(cache, &probes);
	struct target *t = target__new(getpid()), *t2 = target__new(getpid());
	int pid = getpid();
	size_t off_a = 99, off_b = 99;
	uint64_t entered;

	CHECK(s && cache && t && t2, "setup");
	CHECK(session__add_sink(s, &ops, &a, &off_a) == 0 && off_a == 0, "A at 0: %zu", off_a);
	CHECK(session__add_sink(s, &ops, &b, &off_b) == 0 && off_b == 24, "B at 24: %zu", off_b);
	big.user_bytes = CALLS_USER_BYTES - 48 + 1;
	CHECK(session__add_sink(s, &big, &a, NULL) == -ENOSPC, "no room past the frame");

	/* a call with a return: each sink's bytes come back intact, A's before B's */
	feed_call(s, pid, "cudaStreamSynchronize");
	entered = ts;
	feed_ret(s, pid, "cudaStreamSynchronize");
	CHECK(a.entries == 1 && b.entries == 1 && a.calls == 1 && b.calls == 1, "both saw it");
	CHECK(marked(&a, entered) && marked(&b, entered), "each sink's bytes are its own");
	CHECK((char *)b.last_user_ptr - (char *)a.last_user_ptr == 24, "B's bytes after A's");
	CHECK(a.last_end == CALL_RETURNED, "returned: %d", a.last_end);
	CHECK(!strncmp(log_order, "AeBeAcBc", 8), "order %.*s", nr_log, log_order);

	/* cudaLaunchKernel has no return probe without --durations: delivered at its entry */
	feed_call(s, pid, "cudaLaunchKernel");
	CHECK(a.calls == 2 && a.last_end == CALL_NO_RETURN, "no return: at once (%d)", a.last_end);

	/* a dlopen of a process the session does not know: nothing scanned, nobody told */
	feed_dlopen(s, pid);
	CHECK(a.libraries == 0 && b.libraries == 0, "unknown pid: no rescan");
	/* known: scanned, both sinks told, with the pid's newest target */
	CHECK(session__add_target(s, t) == 0 && session__add_target(s, t2) == 0, "targets");
	CHECK(session__target(s, pid) == t2, "the newest target is the pid's");
	feed_dlopen(s, pid);
	CHECK(a.libraries == 1 && b.libraries == 1 && a.last_library == t2, "rescan told both");
	CHECK(a.last_new_probes == 0, "nothing probed: %d", a.last_new_probes);
	CHECK(target__nr_objs(t2) > 0 && target__nr_objs(t) == 0, "the scan was t2's only");
	/* a target over (exec) is not rescanned */
	target__end(t2, ts);
	feed_dlopen(s, pid);
	CHECK(a.libraries == 1, "ended target: no rescan");
	session__remove_target(s, t2);
	CHECK(session__target(s, pid) == t, "removed: the older one again");
	session__rescan(s);
	CHECK(a.libraries == 2 && b.libraries == 2 && a.last_library == t, "periodic rescan");

	/* an exit: the open call ends as CALL_EXITED first, then both sinks hear of the exit */
	feed_call(s, pid, "cudaDeviceSynchronize");
	{
		struct tp_rec_exit x = { .type = TP_REC_EXIT, .pid = pid, .tid = pid, .ts = ts += 10 };

		nr_log = 0;
		session__ring_cb(s, &x, sizeof(x));
	}
	CHECK(a.last_end == CALL_EXITED && a.exits == 1 && b.exits == 1, "exit");
	CHECK(!strncmp(log_order, "AcBcAxBx", 8), "calls end before the exit: %.*s", nr_log,
	      log_order);
	CHECK(session__stats(s)->exits == 1 && session__stats(s)->dlopens == 3, "counted");

	/* --durations: every api has a return record to wait for */
	{
		struct target_probes durations = { .all_returns = true };
		struct session *s2 = session__new(cache, &durations);
		struct sink c = { .name = 'C' };

		CHECK(s2 && session__add_sink(s2, &ops, &c, NULL) == 0, "second session");
		feed_call(s2, pid, "cudaLaunchKernel");
		CHECK(c.entries == 1 && c.calls == 0, "waits for its return");
		feed_ret(s2, pid, "cudaLaunchKernel");
		CHECK(c.calls == 1 && c.last_end == CALL_RETURNED, "paired");
		session__finish(s2, ts);
		session__free(s2);
	}
	session__free(s);

	/* a stage: asked about every call before any sink's on_call, whatever the order they
	 * registered in; its consumer sees the calls it keeps held, the other sinks plain */
	{
		static const struct session_sink_ops stage_ops = { .hold = stage_hold };
		static const struct session_sink_ops plain_ops = { .on_call = plain_call };
		struct session *s3 = session__new(cache, &probes);
		struct sink cons = { .name = 'K' };
		struct seen_held other = {};
		struct stage st = { .api = api_id("cudaLaunchKernel") };
		size_t off;

		CHECK(s3 && session__add_sink(s3, &ops, &cons, &off) == 0 &&
		      session__add_sink(s3, &plain_ops, &other, NULL) == 0 &&
		      session__add_sink(s3, &stage_ops, &st, NULL) == 0, "third session");
		st.consumer_off = off;
		CHECK(session__consume(s3, &cons, &other) == -ENOENT, "no hold op: not a stage");
		CHECK(session__consume(s3, &st, &st) == -EINVAL, "not its own consumer");
		CHECK(session__consume(s3, &t, &st) == -ENOENT, "not a sink");
		CHECK(session__consume(s3, &cons, &st) == 0, "K consumes the stage");
		CHECK(session__user_used(s3) == 24, "bytes used: %zu", session__user_used(s3));
		nr_log = 0;
		feed_call(s3, pid, "cudaLaunchKernel");
		CHECK(st.asked == 1 && st.kept == 1 && cons.calls == 1 && other.calls == 1,
		      "the launch: kept");
		CHECK(!strncmp(log_order, "KeShKc", 6), "asked before the sinks: %.*s", nr_log,
		      log_order);
		CHECK(st.consumer_mark == ((uint64_t)'K' << 56 | ts << 2),
		      "the stage sees the consumer's bytes as its entry left them");
		CHECK(other.held == 0, "another sink sees it plain");
		feed_call(s3, pid, "cudaStreamSynchronize");
		feed_ret(s3, pid, "cudaStreamSynchronize");
		CHECK(st.asked == 2 && st.kept == 1 && cons.calls == 2 && other.calls == 2,
		      "the sync: not kept");
		session__free(s3);
		CHECK(held_seen == 1, "the consumer saw one call held: %d", held_seen);
	}
	check_find_procs();
	target__free(t);
	target__free(t2);
	elfsym_cache__free(cache);
	return check_done();
}
