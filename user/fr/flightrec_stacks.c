// SPDX-License-Identifier: MIT
/* The flight recorder's hang snapshots (stacks.h): one of each process when recording starts
 * and one for every dump, written as the dump's "stacks" array (docs/fr-schema.md, version 2).
 * A job that was already hung when tptrace attached leaves the rings empty; the snapshots
 * still say who is where.
 *
 * The attach snapshot runs in a thread of its own per process (samples × interval, ~0.5 s by
 * default): recording goes on meanwhile, and the processes of a host are snapshotted in
 * parallel. The dump snapshots of a round run in parallel the same way, after the round's
 * state files are written (flightrec_dump.c: dump_set); a dump waits for the attach snapshot
 * still in flight. */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "flightrec_int.h"
#include "fr_keys.h"
#include "log.h"
#include "stacks.h"
#include "util.h"

static struct stack_opts snap_opts(const struct flightrec *fr)
{
	return (struct stack_opts){
		.samples = fr->opts.stack_samples,
		.interval_ms = fr->opts.stack_interval_ms,
	};
}

/* A snapshot as the dump writes it ("taken" set), or NULL with err said in one line. */
static cJSON *take(const struct flightrec *fr, int pid, const char *taken, char *err, size_t size,
		   uint64_t *took_ns)
{
	struct stack_opts o = snap_opts(fr);
	uint64_t t0 = now_ns();
	struct stack_proc *sp;
	cJSON *j;

	err[0] = 0;
	sp = stacks__take(pid, &o, err, size);
	*took_ns = now_ns() - t0;
	if (!sp) {
		if (!err[0])
			snprintf(err, size, "snapshot of pid %d: %s", pid, strerror(errno));
		return NULL;
	}
	j = stacks__json(sp);
	stacks__free(sp);
	if (!j || !cJSON_ReplaceItemInObject(j, "taken", cJSON_CreateString(taken))) {
		cJSON_Delete(j);
		snprintf(err, size, "snapshot of pid %d: %s", pid, strerror(ENOMEM));
		return NULL;
	}
	return j;
}

struct snap_job {
	const struct flightrec *fr;
	struct fr_proc *p;
	bool attach;
};

static void *snap_thread(void *arg)
{
	struct snap_job *job = arg;
	struct fr_proc *p = job->p;
	uint64_t took;
	cJSON *j;

	if (job->attach) {
		j = take(job->fr, p->pid, "attach", p->snap_attach_err, sizeof(p->snap_attach_err),
			 &took);
		p->snap_attach = j;
		p->snap_attach_ns = took;
	} else {
		j = take(job->fr, p->pid, "dump", p->snap_dump_err, sizeof(p->snap_dump_err), &took);
		p->snap_dump = j;
	}
	if (j)
		log_verbose("pid %d: %s snapshot in %.0f ms\n", p->pid,
			    job->attach ? "attach" : "dump", took / 1e6);
	else
		log_info("pid %d: no %s snapshot: %s\n", p->pid, job->attach ? "attach" : "dump",
			 job->attach ? p->snap_attach_err : p->snap_dump_err);
	free(job);
	return NULL;
}

static int start_job(struct flightrec *fr, struct fr_proc *p, bool attach, pthread_t *tid)
{
	struct snap_job *job = malloc(sizeof(*job));
	int err;

	if (!job)
		return -ENOMEM;
	*job = (struct snap_job){ fr, p, attach };
	err = pthread_create(tid, NULL, snap_thread, job);
	if (err) {
		free(job);
		return -err;
	}
	return 0;
}

int fr_stacks__attach(struct flightrec *fr, struct fr_proc *p)
{
	int err;

	if (fr->opts.no_stacks)
		return 0;
	err = start_job(fr, p, true, &p->snap_thread);
	if (err) {
		/* said in the dump; recording goes on without it */
		snprintf(p->snap_attach_err, sizeof(p->snap_attach_err),
			 "snapshot at attach not started: %s", strerror(-err));
		return 0;
	}
	p->snap_running = true;
	return 0;
}

/* A snapshot thread allocates megabytes (thread lists, stacks, symbols) in its own malloc
 * arena, which glibc keeps after the thread ends: 64 attach snapshots left ~2 MiB each in a
 * daemon that then idles for days. Hand the free pages back. */
static void snap_ended(void)
{
	malloc_trim(0);
}

static void fr_stacks__wait_attach(struct fr_proc *p)
{
	if (!p->snap_running)
		return;
	pthread_join(p->snap_thread, NULL);
	p->snap_running = false;
	snap_ended();
}

/* Joined here as soon as it ended: the attach snapshot must not hold off what waits for it
 * (the NCCL query) until the first dump joins it. */
bool fr_stacks__busy(struct fr_proc *p)
{
	if (p->snap_running && !pthread_tryjoin_np(p->snap_thread, NULL)) {
		p->snap_running = false;
		snap_ended();
	}
	return p->snap_running;
}

int fr_stacks__take_dumps(struct flightrec *fr, struct fr_proc **procs, int n)
{
	pthread_t *tids;
	bool *started;

	if (fr->opts.no_stacks || !n)
		return 0;
	tids = calloc(n, sizeof(*tids));
	started = calloc(n, sizeof(*started));
	if (!tids || !started) {
		free(tids);
		free(started);
		return -ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		/* a process being stopped for its attach snapshot cannot be stopped again */
		fr_stacks__wait_attach(procs[i]);
		if (procs[i]->exited || procs[i]->snap_dump)
			continue;
		started[i] = !start_job(fr, procs[i], false, &tids[i]);
	}
	/* joined as they end; meanwhile the ring is read as usual (the hold ended with the state
	 * files), so a snapshot of hundreds of processes on a busy host, seconds long, loses
	 * nothing to it */
	for (int left = n; left; ) {
		left = 0;
		for (int i = 0; i < n; i++) {
			if (!started[i])
				continue;
			if (fr->opts.pump && pthread_tryjoin_np(tids[i], NULL)) {
				left++;
				continue;
			}
			if (!fr->opts.pump)
				pthread_join(tids[i], NULL);
			started[i] = false;
		}
		if (left && fr->opts.pump(fr->opts.drain_ctx, 10) < 0)
			usleep(10000);	/* the ring failed (said by its reader): wait anyway */
	}
	free(tids);
	free(started);
	snap_ended();
	return 0;
}

void fr_stacks__add(struct flightrec *fr, struct fr_proc *p, cJSON *root)
{
	cJSON *arr = cJSON_AddArrayToObject(root, FRK_STACKS);
	const char *why = NULL;
	uint64_t took;

	if (fr->opts.no_stacks) {
		cJSON_AddStringToObject(root, FRK_STACKS_ERROR, "disabled (--no-stacks)");
		return;
	}
	fr_stacks__wait_attach(p);
	if (!p->exited && !p->snap_dump)
		p->snap_dump = take(fr, p->pid, "dump", p->snap_dump_err, sizeof(p->snap_dump_err),
				    &took);
	/* the attach snapshot stays for every dump; the dump one is this dump's own */
	if (p->snap_attach)
		cJSON_AddItemReferenceToArray(arr, p->snap_attach);
	if (p->snap_dump) {
		cJSON_AddItemToArray(arr, p->snap_dump);
		p->snap_dump = NULL;
	} else if (p->exited) {
		why = p->snap_attach ? "the process exited: only the snapshot at attach" :
				       "the process exited: no snapshot";
	} else {
		why = p->snap_dump_err[0] ? p->snap_dump_err : "no snapshot at dump time";
	}
	if (!why && !p->snap_attach && p->snap_attach_err[0])
		why = p->snap_attach_err;
	if (why)
		cJSON_AddStringToObject(root, FRK_STACKS_ERROR, why);
	else
		cJSON_AddNullToObject(root, FRK_STACKS_ERROR);
}

bool fr_stacks__will_take(const struct flightrec *fr, const struct fr_proc *p)
{
	return !fr->opts.no_stacks && !p->exited && !p->snap_dump;
}

/* No snapshot at all, not even the attach one: a reader that knows nothing of
 * "stacks_pending" sees a dump without stacks (stacks unknown), never an old snapshot it
 * would take for the threads' state at the dump. */
void fr_stacks__add_pending(cJSON *root)
{
	cJSON_AddArrayToObject(root, FRK_STACKS);
	cJSON_AddStringToObject(root, FRK_STACKS_ERROR,
				"pending: the snapshot was being taken when this file was written");
	cJSON_AddBoolToObject(root, FRK_STACKS_PENDING, true);
}

void fr_stacks__free(struct fr_proc *p)
{
	fr_stacks__wait_attach(p);
	cJSON_Delete(p->snap_attach);
	cJSON_Delete(p->snap_dump);
	p->snap_attach = p->snap_dump = NULL;
}
