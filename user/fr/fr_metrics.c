// SPDX-License-Identifier: MIT
/* Prometheus metrics of the flight recorder (see fr_metrics.h, README "Metrics"). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <microhttpd.h>
#include "atomic_file.h"
#include "cuda_api.h"
#include "flightrec_int.h"
#include "fr_metrics.h"
#include "fr_trigger.h"
#include "growbuf.h"
#include "log.h"
#include "procmaps.h"
#include "target.h"

#define JOB_CACHE 1024

struct job_entry {
	int pid;
	char job[128];			/* "" when the environment names no job */
};

struct gone_entry {
	int pid;
	uint64_t since;			/* the `now` of the first update that saw it exited */
	bool expired;
};

struct fr_metrics {
	struct MHD_Daemon *httpd;
	int sock;
	char *file;
	bool file_failing;		/* said once per failing streak */
	pthread_mutex_t lock;
	char *text;			/* last rendering, served by the HTTP thread */
	size_t len;
	struct job_entry jobs[JOB_CACHE];
	int nr_jobs;
	uint64_t expiry_ns;		/* an exited process's series live this long */
	struct gone_entry *gone;	/* exited processes: when first seen exited */
	int nr_gone, cap_gone;
};

/* ---- rendering ---- */

/* Label values escape \, " and newline (exposition format). */
static void put_label(FILE *f, bool *first, const char *name, const char *val)
{
	if (!val || !*val)
		return;		/* an empty value equals an absent label */
	fprintf(f, "%s%s=\"", *first ? "" : ",", name);
	*first = false;
	for (const char *c = val; *c; c++) {
		if (*c == '\\')
			fputs("\\\\", f);
		else if (*c == '"')
			fputs("\\\"", f);
		else if (*c == '\n')
			fputs("\\n", f);
		else
			fputc(*c, f);
	}
	fputc('"', f);
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The job id (fr_trigger.h: TORCHELASTIC_RUN_ID, else SLURM_JOB_ID, else
 * MASTER_ADDR:MASTER_PORT, validated; nothing else is taken from the environment); "" when
 * none is set or it cannot be read. */
static void read_job(int pid, char *job, size_t size)
{
	if (fr_job_of_pid(pid, job, size))
		job[0] = '\0';
}

/* cached per pid: the environment a process started with does not change */
static const char *job_of(struct fr_metrics *m, int pid, char *tmp, size_t size)
{
	if (!m) {
		read_job(pid, tmp, size);
		return tmp;
	}
	for (int i = 0; i < m->nr_jobs; i++)
		if (m->jobs[i].pid == pid)
			return m->jobs[i].job;
	read_job(pid, tmp, size);
	if (m->nr_jobs < JOB_CACHE) {
		m->jobs[m->nr_jobs].pid = pid;
		snprintf(m->jobs[m->nr_jobs].job, sizeof(m->jobs[0].job), "%s", tmp);
		return m->jobs[m->nr_jobs++].job;
	}
	return tmp;
}

/* An exited process's series stay for m->expiry_ns after its exit was first seen, then
 * vanish, so a daemon recording short jobs for months exports a bounded page; its job label
 * leaves the cache with it (the pid may be reused by another job). Without m (a one-off
 * rendering) nothing expires. */
static bool expired(struct fr_metrics *m, struct fr_proc *p, uint64_t now)
{
	struct gone_entry *g = NULL;

	if (!m || !p->exited)
		return false;
	for (int i = 0; i < m->nr_gone; i++)
		if (m->gone[i].pid == p->pid)
			g = &m->gone[i];
	if (!g) {
		if (ARRAY_RESERVE(m->gone, m->cap_gone, m->nr_gone + 1, 16))
			return false;	/* shown a while longer: nothing lost */
		g = &m->gone[m->nr_gone++];
		*g = (struct gone_entry){ .pid = p->pid, .since = now };
	}
	if (g->expired)
		return true;
	if (now - g->since < m->expiry_ns)
		return false;
	g->expired = true;
	for (int i = 0; i < m->nr_jobs; i++) {
		if (m->jobs[i].pid == p->pid) {
			m->jobs[i] = m->jobs[--m->nr_jobs];
			break;
		}
	}
	return true;
}

struct proc_labels {
	char pid[16], rank[16];
	const char *job;
};

/* {host,pid,rank[,comm][,job][,comm_group]}: rank is the comm's rank when known, else the
 * process's */
static void labels_group(FILE *f, struct flightrec *fr, const struct proc_labels *pl,
			 const char *rank, const char *comm, const char *group,
			 const char *extra_name, const char *extra)
{
	bool first = true;

	fputc('{', f);
	put_label(f, &first, "host", fr->host);
	put_label(f, &first, "pid", pl->pid);
	put_label(f, &first, "rank", rank ? rank : pl->rank);
	put_label(f, &first, "comm", comm);
	put_label(f, &first, "job", pl->job);
	put_label(f, &first, "comm_group", group);
	if (extra_name)
		put_label(f, &first, extra_name, extra);
	fputc('}', f);
}

static void labels(FILE *f, struct flightrec *fr, const struct proc_labels *pl,
		   const char *rank, const char *comm, const char *extra_name, const char *extra)
{
	labels_group(f, fr, pl, rank, comm, NULL, extra_name, extra);
}

/* The straggler alert's peer group: the same on every rank of one communicator, whether its
 * recorder saw the init (the cross-rank id) or attached after it (a local id per rank): within
 * a job, its size ("size:8", once the rank knows it, from the init or NCCL's own query).
 * Communicators of one size in one job are one group (a job's groups of one size, TP or DP
 * groups, run alike). Without a job id or a size: the comm's id. */
static void comm_group(const struct proc_labels *pl, const struct fr_comm *cm, const char *id,
		       char *out, size_t size)
{
	if (pl->job && *pl->job && cm->nranks > 0)
		snprintf(out, size, "size:%d", cm->nranks);
	else
		snprintf(out, size, "%s", id);
}

static const char *call_name(uint32_t api)
{
	if (api >= NCCL_API_BASE)
		return nccl_apis[api - NCCL_API_BASE].symbol;
	return cuda_apis[api].symbol;
}

static double secs(uint64_t ns)
{
	return (double)ns / 1e9;
}

/* The oldest entry of comm ci not completed (enqueued or started), and how many there are. */
static const struct fr_entry *oldest_pending(struct flightrec *fr, struct fr_proc *p, int ci,
					     int *pending)
{
	uint64_t ring = fr->opts.ring_size;
	uint64_t first = p->next_record_id > ring ? p->next_record_id - ring : 1;
	const struct fr_entry *old = NULL;

	*pending = 0;
	for (uint64_t id = first; id < p->next_record_id; id++) {
		const struct fr_entry *e = &p->ring[id % ring];

		if (e->record_id != id || e->kind != FR_ENTRY_COLL || e->comm != ci)
			continue;
		if (e->state != FR_ENQUEUED && e->state != FR_STARTED)
			continue;
		(*pending)++;
		if (!old)
			old = e;
	}
	return old;
}

static bool proc_has_pending(struct flightrec *fr, struct fr_proc *p)
{
	for (int c = 0; c < p->nr_comms; c++) {
		int n;

		if (oldest_pending(fr, p, c, &n))
			return true;
	}
	return false;
}

/* ---- stragglers: each rank's own waits (durations on its own clock, never absolute times
 * of two hosts) ---- */

/* Waits completed this recently make the window of the quantiles and the last-to-enter
 * share; older ones describe a job that may have changed since. */
#define WAIT_WINDOW_NS (30ULL * 1000000000ULL)

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

/* The waits (ns) of cm's recent window into out (FR_WAITS_RECENT), sorted; returns how many. */
static int recent_waits(const struct fr_comm *cm, uint64_t now, uint64_t *out)
{
	uint64_t have = cm->recent_next < FR_WAITS_RECENT ? cm->recent_next : FR_WAITS_RECENT;
	int n = 0;

	for (uint64_t i = 0; cm->recent && i < have; i++) {
		const struct fr_wait *w = &cm->recent[i];

		if (now >= w->completed && now - w->completed <= WAIT_WINDOW_NS)
			out[n++] = w->completed - w->entered;
	}
	qsort(out, n, sizeof(*out), cmp_u64);
	return n;
}

/* nearest-rank quantile of sorted v[0..n) */
static double quantile(const uint64_t *v, int n, double q)
{
	int i = (int)(q * n + 0.999999) - 1;

	return secs(v[i < 0 ? 0 : i >= n ? n - 1 : i]);
}

static const struct fr_wait *wait_of_seq(const struct fr_comm *cm, uint64_t seq)
{
	uint64_t have = cm->recent_next < FR_WAITS_RECENT ? cm->recent_next : FR_WAITS_RECENT;
	const struct fr_wait *newest;

	if (!cm->recent || !have)
		return NULL;
	/* collectives complete in seq order, one wait each: where seq should be, else a scan */
	newest = &cm->recent[(cm->recent_next - 1) % FR_WAITS_RECENT];
	if (newest->seq >= seq && newest->seq - seq < have) {
		const struct fr_wait *w = &cm->recent[(cm->recent_next - 1 - (newest->seq - seq)) %
						      FR_WAITS_RECENT];

		if (w->seq == seq)
			return w;
	}
	for (uint64_t i = 0; i < have; i++)
		if (cm->recent[i].seq == seq)
			return &cm->recent[i];
	return NULL;
}

/* A communicator whose seqs mean the same on every member here: made while recorded (a comm
 * made before attach counts its seqs from each recorder's attach) with a cross-rank id. */
static bool seqs_comparable(const struct fr_proc *p, const struct fr_comm *cm)
{
	return !p->exited && cm->id && !cm->pre_existing && cm->recent && !strcmp(cm->state, "active");
}

struct comm_member {
	int proc;		/* index into render's procs */
	const struct fr_comm *cm;
	int common, last;	/* recent seqs every member here completed; ones it entered last */
};

/* tptrace_fr_last_to_enter_ratio: among this host's members of one communicator (one clock),
 * the share of recent collectives that each one entered last. Needs two members here; the
 * first 64 comms of each process are looked at. */
static void last_to_enter(FILE *f, struct flightrec *fr, struct fr_proc **procs,
			  struct proc_labels *pl, int n, uint64_t now)
{
	struct comm_member *mem = calloc(n ? n : 1, sizeof(*mem));
	bool *done;

	done = calloc(n ? n : 1, sizeof(*done) * 64);
	if (!mem || !done) {
		free(mem);
		free(done);
		return;
	}
	for (int i = 0; i < n; i++) {
		for (int c = 0; c < procs[i]->nr_comms && c < 64; c++) {
			const struct fr_comm *cm = &procs[i]->comms[c];
			uint64_t have;
			int nm = 0;

			if (done[i * 64 + c] || !seqs_comparable(procs[i], cm))
				continue;
			/* the members here: one comm of this id per process */
			for (int k = i; k < n; k++) {
				for (int d = 0; d < procs[k]->nr_comms && d < 64; d++) {
					const struct fr_comm *o = &procs[k]->comms[d];

					if (done[k * 64 + d] || o->id != cm->id || !seqs_comparable(procs[k], o))
						continue;
					done[k * 64 + d] = true;
					mem[nm++] = (struct comm_member){ k, o, 0, 0 };
					break;
				}
			}
			if (nm < 2)
				continue;
			have = cm->recent_next < FR_WAITS_RECENT ? cm->recent_next : FR_WAITS_RECENT;
			for (uint64_t w = 0; w < have; w++) {
				const struct fr_wait *w0 = &cm->recent[w];
				uint64_t latest = 0;
				int last = -1, m;

				if (now < w0->completed || now - w0->completed > WAIT_WINDOW_NS)
					continue;
				for (m = 0; m < nm; m++) {
					const struct fr_wait *x = m ? wait_of_seq(mem[m].cm, w0->seq) : w0;

					if (!x)
						break;
					if (x->entered > latest) {
						latest = x->entered;
						last = m;
					} else if (x->entered == latest) {
						last = -1;	/* a tie: nobody was last */
					}
				}
				if (m < nm)
					continue;	/* not every member here has it (yet, or any more) */
				for (m = 0; m < nm; m++)
					mem[m].common++;
				if (last >= 0)
					mem[last].last++;
			}
			for (int m = 0; m < nm && mem[0].common; m++) {
				const struct fr_proc *p = procs[mem[m].proc];
				char id[160], rank[16];

				comm_id_str(fr, p, mem[m].cm, id, sizeof(id));
				snprintf(rank, sizeof(rank), "%d", mem[m].cm->rank);
				fprintf(f, "tptrace_fr_last_to_enter_ratio");
				labels(f, fr, &pl[mem[m].proc], mem[m].cm->rank >= 0 ? rank : NULL, id,
				       NULL, NULL);
				fprintf(f, " %.4f\n", (double)mem[m].last / mem[m].common);
			}
		}
	}
	free(mem);
	free(done);
}

static void straggler_series(FILE *f, struct flightrec *fr, struct fr_proc **procs,
			     struct proc_labels *pl, int n, uint64_t now)
{
	static const double qs[] = { 0.1, 0.5, 0.9 };
	uint64_t waits[FR_WAITS_RECENT];

	family(f, "tptrace_fr_collective_wait_seconds", "summary",
	       "How long this rank waited in a collective, from its call to its completion (its own "
	       "clock); quantiles over its recent ones (30 s, at most 512). The rank the others wait "
	       "for waits least.");
	for (int i = 0; i < n; i++) {
		struct fr_proc *p = procs[i];

		for (int c = 0; c < p->nr_comms; c++) {
			const struct fr_comm *cm = &p->comms[c];
			char id[160], grp[160], rank[16], q[16];
			int nw;

			if (!cm->handle || !cm->waits)
				continue;
			comm_id_str(fr, p, cm, id, sizeof(id));
			comm_group(&pl[i], cm, id, grp, sizeof(grp));
			snprintf(rank, sizeof(rank), "%d", cm->rank);
			nw = p->exited ? 0 : recent_waits(cm, now, waits);
			for (int k = 0; k < 3 && nw; k++) {
				snprintf(q, sizeof(q), "%g", qs[k]);
				fprintf(f, "tptrace_fr_collective_wait_seconds");
				labels_group(f, fr, &pl[i], cm->rank >= 0 ? rank : NULL, id, grp,
					     "quantile", q);
				fprintf(f, " %.6f\n", quantile(waits, nw, qs[k]));
			}
			fprintf(f, "tptrace_fr_collective_wait_seconds_sum");
			labels_group(f, fr, &pl[i], cm->rank >= 0 ? rank : NULL, id, grp, NULL, NULL);
			fprintf(f, " %.6f\n", secs(cm->waits_sum_ns));
			fprintf(f, "tptrace_fr_collective_wait_seconds_count");
			labels_group(f, fr, &pl[i], cm->rank >= 0 ? rank : NULL, id, grp, NULL, NULL);
			fprintf(f, " %" PRIu64 "\n", cm->waits);
		}
	}
	family(f, "tptrace_fr_collective_waits_recent", "gauge",
	       "Collectives in the wait quantiles' window (completed in the last 30 s, at most 512).");
	for (int i = 0; i < n; i++) {
		struct fr_proc *p = procs[i];

		for (int c = 0; c < p->nr_comms; c++) {
			const struct fr_comm *cm = &p->comms[c];
			char id[160], grp[160], rank[16];

			if (!cm->handle || !cm->waits || p->exited)
				continue;
			comm_id_str(fr, p, cm, id, sizeof(id));
			comm_group(&pl[i], cm, id, grp, sizeof(grp));
			snprintf(rank, sizeof(rank), "%d", cm->rank);
			fprintf(f, "tptrace_fr_collective_waits_recent");
			labels_group(f, fr, &pl[i], cm->rank >= 0 ? rank : NULL, id, grp, NULL, NULL);
			fprintf(f, " %d\n", recent_waits(cm, now, waits));
		}
	}
	family(f, "tptrace_fr_last_to_enter_ratio", "gauge",
	       "Share of the recent collectives (30 s) that every member of the communicator on this "
	       "host completed which this rank entered last (one clock: only this host's members; "
	       "absent with fewer than two here).");
	last_to_enter(f, fr, procs, pl, n, now);
}

/* processes recorded and exited */
static void process_series(FILE *f, struct flightrec *fr, struct fr_proc **procs,
			   struct proc_labels *pl, int n, uint64_t now)
{
	int live = 0;

	for (int i = 0; i < n; i++)
		live += !procs[i]->exited;
	family(f, "tptrace_fr_processes", "gauge", "Processes being recorded (not exited).");
	fprintf(f, "tptrace_fr_processes");
	{
		bool first = true;

		fputc('{', f);
		put_label(f, &first, "host", fr->host);
		fputc('}', f);
	}
	fprintf(f, " %d\n", live);

	family(f, "tptrace_fr_process_exited", "gauge",
	       "1 when the recorded process exited (its exit dump is its last).");
	for (int i = 0; i < n; i++) {
		fprintf(f, "tptrace_fr_process_exited");
		labels(f, fr, &pl[i], NULL, NULL, NULL, NULL);
		fprintf(f, " %d\n", procs[i]->exited ? 1 : 0);
	}
}

/* per (comm, rank): sequence numbers and pending work */
static void comm_series(FILE *f, struct flightrec *fr, struct fr_proc **procs,
			struct proc_labels *pl, int n, uint64_t now)
{
	static const struct {
		const char *name, *help;
	} seqs[] = {
		{ "tptrace_fr_coll_seq_enqueued", "Last collective sequence number enqueued on the communicator by this rank." },
		{ "tptrace_fr_coll_seq_started", "Last collective sequence number known started on the GPU." },
		{ "tptrace_fr_coll_seq_completed", "Last collective sequence number known completed on the GPU." },
	};

	for (int s = 0; s < 3; s++) {
		family(f, seqs[s].name, "gauge", seqs[s].help);
		for (int i = 0; i < n; i++) {
			struct fr_proc *p = procs[i];

			for (int c = 0; c < p->nr_comms; c++) {
				struct fr_comm *cm = &p->comms[c];
				char id[160], rank[16];
				uint64_t v = s == 0 ? cm->coll_seq : s == 1 ? cm->last_started_seq :
					     cm->last_completed_seq;

				if (!cm->handle)
					continue;	/* a failed init: no collectives */
				comm_id_str(fr, p, cm, id, sizeof(id));
				snprintf(rank, sizeof(rank), "%d", cm->rank);
				fprintf(f, "%s", seqs[s].name);
				labels(f, fr, &pl[i], cm->rank >= 0 ? rank : NULL, id, NULL, NULL);
				fprintf(f, " %" PRIu64 "\n", v);
			}
		}
	}
	family(f, "tptrace_fr_pending_collectives", "gauge",
	       "Collectives of the communicator enqueued or started but not completed.");
	for (int i = 0; i < n; i++) {
		struct fr_proc *p = procs[i];

		for (int c = 0; c < p->nr_comms; c++) {
			struct fr_comm *cm = &p->comms[c];
			char id[160], rank[16];
			int pending;

			if (!cm->handle)
				continue;
			oldest_pending(fr, p, c, &pending);
			comm_id_str(fr, p, cm, id, sizeof(id));
			snprintf(rank, sizeof(rank), "%d", cm->rank);
			fprintf(f, "tptrace_fr_pending_collectives");
			labels(f, fr, &pl[i], cm->rank >= 0 ? rank : NULL, id, NULL, NULL);
			fprintf(f, " %d\n", pending);
		}
	}
	family(f, "tptrace_fr_oldest_pending_age_seconds", "gauge",
	       "Age of the communicator's oldest pending collective (absent: none pending).");
	for (int i = 0; i < n; i++) {
		struct fr_proc *p = procs[i];

		for (int c = 0; c < p->nr_comms; c++) {
			struct fr_comm *cm = &p->comms[c];
			const struct fr_entry *e;
			char id[160], rank[16];
			int pending;

			if (!cm->handle || p->exited)
				continue;
			e = oldest_pending(fr, p, c, &pending);
			if (!e || !e->created)
				continue;
			comm_id_str(fr, p, cm, id, sizeof(id));
			snprintf(rank, sizeof(rank), "%d", cm->rank);
			fprintf(f, "tptrace_fr_oldest_pending_age_seconds");
			labels(f, fr, &pl[i], cm->rank >= 0 ? rank : NULL, id, NULL, NULL);
			fprintf(f, " %.3f\n", now > e->created ? secs(now - e->created) : 0.0);
		}
	}
}

/* threads inside a CUDA/NCCL call: the outermost open call of each thread */
static void thread_series(FILE *f, struct flightrec *fr, struct fr_proc **procs,
			  struct proc_labels *pl, int n, uint64_t now)
{
	family(f, "tptrace_fr_threads_in_call", "gauge",
	       "Threads of the process inside a probed CUDA/NCCL call.");
	for (int i = 0; i < n; i++) {
		struct fr_proc *p = procs[i];
		struct calls_iter it = {};
		struct call_frame *cf;
		int threads = 0;
		uint32_t last_tid = 0;

		while (!p->exited && (cf = calls__next_open(fr->calls, p->pid, &it))) {
			const struct fr_call *call = fr_call_of(fr, cf);

			if (!call->known || (threads && cf->rec.tid == last_tid))
				continue;
			threads++;
			last_tid = cf->rec.tid;
		}
		fprintf(f, "tptrace_fr_threads_in_call");
		labels(f, fr, &pl[i], NULL, NULL, NULL, NULL);
		fprintf(f, " %d\n", threads);
	}
	family(f, "tptrace_fr_thread_in_call_seconds", "gauge",
	       "How long the thread has been inside its outermost CUDA/NCCL call (api label).");
	for (int i = 0; i < n; i++) {
		struct fr_proc *p = procs[i];
		struct calls_iter it = {};
		struct call_frame *cf;
		uint32_t last_tid = 0;
		bool any = false;

		while (!p->exited && (cf = calls__next_open(fr->calls, p->pid, &it))) {
			const struct fr_call *call = fr_call_of(fr, cf);
			char tid[16];
			bool first = true;

			if (!call->known || (any && cf->rec.tid == last_tid))
				continue;
			any = true;
			last_tid = cf->rec.tid;
			snprintf(tid, sizeof(tid), "%u", cf->rec.tid);
			fprintf(f, "tptrace_fr_thread_in_call_seconds{");
			put_label(f, &first, "host", fr->host);
			put_label(f, &first, "pid", pl[i].pid);
			put_label(f, &first, "rank", pl[i].rank);
			put_label(f, &first, "job", pl[i].job);
			put_label(f, &first, "tid", tid);
			put_label(f, &first, "api", call_name(call->api));
			fprintf(f, "} %.3f\n", now > call->entered ? secs(now - call->entered) : 0.0);
		}
	}
}

/* drops (a count that could not be read is absent, and *_unknown says so) and dumps */
static void drop_and_dump_series(FILE *f, struct flightrec *fr, struct fr_proc **procs,
				 struct proc_labels *pl, int n, uint64_t now)
{
	family(f, "tptrace_fr_events_dropped_total", "counter",
	       "Events the BPF side could not hand over (ring full); absent when unknown.");
	if (fr->events_dropped_err >= 0) {
		bool first = true;

		fprintf(f, "tptrace_fr_events_dropped_total{");
		put_label(f, &first, "host", fr->host);
		fprintf(f, "} %" PRIu64 "\n", fr->events_dropped);
	}
	family(f, "tptrace_fr_events_dropped_unknown", "gauge",
	       "1 when the dropped-events counter could not be read (the count is unknown).");
	{
		bool first = true;

		fprintf(f, "tptrace_fr_events_dropped_unknown{");
		put_label(f, &first, "host", fr->host);
		fprintf(f, "} %d\n", fr->events_dropped_err < 0 ? 1 : 0);
	}

	family(f, "tptrace_fr_dumps_total", "counter", "Dumps written, by reason.");
	for (int r = 0; r < fr->nr_dump_reasons; r++) {
		bool first = true;

		fprintf(f, "tptrace_fr_dumps_total{");
		put_label(f, &first, "host", fr->host);
		put_label(f, &first, "reason", fr->dump_counts[r].reason);
		fprintf(f, "} %" PRIu64 "\n", fr->dump_counts[r].n);
	}
}

/* stall state: what flightrec__check_stalls acts on, without its once-per-stall latch */
static void stall_series(FILE *f, struct flightrec *fr, struct fr_proc **procs,
			 struct proc_labels *pl, int n, uint64_t now)
{
	family(f, "tptrace_fr_stall_timeout_seconds", "gauge",
	       "The recorder's --stall-timeout (0: stall detection off).");
	{
		bool first = true;

		fprintf(f, "tptrace_fr_stall_timeout_seconds{");
		put_label(f, &first, "host", fr->host);
		fprintf(f, "} %.3f\n", secs(fr->opts.stall_timeout_ns));
	}
	family(f, "tptrace_fr_seconds_since_progress", "gauge",
	       "Time since the process's last recorded progress (a call, a completion).");
	for (int i = 0; i < n; i++) {
		struct fr_proc *p = procs[i];

		if (p->exited)
			continue;
		fprintf(f, "tptrace_fr_seconds_since_progress");
		labels(f, fr, &pl[i], NULL, NULL, NULL, NULL);
		fprintf(f, " %.3f\n", now > p->last_progress ? secs(now - p->last_progress) : 0.0);
	}
	family(f, "tptrace_fr_stalled", "gauge",
	       "1 when the process has pending collectives and made no progress for the stall timeout (absent: detection off).");
	for (int i = 0; fr->opts.stall_timeout_ns && i < n; i++) {
		struct fr_proc *p = procs[i];
		bool stalled = !p->exited && now > p->last_progress &&
			       now - p->last_progress >= fr->opts.stall_timeout_ns &&
			       proc_has_pending(fr, p);

		fprintf(f, "tptrace_fr_stalled");
		labels(f, fr, &pl[i], NULL, NULL, NULL, NULL);
		fprintf(f, " %d\n", stalled ? 1 : 0);
	}
}

static char *render(struct flightrec *fr, uint64_t now, struct fr_metrics *m)
{
	struct proc_labels *pl = NULL;
	struct fr_proc **procs;
	char *text = NULL, jobtmp[128];
	size_t len = 0;
	int n = 0;
	FILE *f;

	procs = calloc(fr->nr_procs ? fr->nr_procs : 1, sizeof(*procs));
	pl = calloc(fr->nr_procs ? fr->nr_procs : 1, sizeof(*pl));
	f = pl && procs ? open_memstream(&text, &len) : NULL;
	if (!f) {
		free(procs);
		free(pl);
		return NULL;
	}
	for (int i = 0; i < fr->nr_procs; i++)
		if (!expired(m, fr->procs[i], now))
			procs[n++] = fr->procs[i];
	for (int i = 0; i < n; i++) {
		struct fr_proc *p = procs[i];

		snprintf(pl[i].pid, sizeof(pl[i].pid), "%d", p->pid);
		if (p->t && target__rank(p->t) >= 0)
			snprintf(pl[i].rank, sizeof(pl[i].rank), "%d", target__rank(p->t));
		pl[i].job = strdup(job_of(m, p->pid, jobtmp, sizeof(jobtmp)));
	}

	process_series(f, fr, procs, pl, n, now);
	comm_series(f, fr, procs, pl, n, now);
	thread_series(f, fr, procs, pl, n, now);
	drop_and_dump_series(f, fr, procs, pl, n, now);
	straggler_series(f, fr, procs, pl, n, now);
	stall_series(f, fr, procs, pl, n, now);

	for (int i = 0; i < n; i++)
		free((char *)pl[i].job);
	free(pl);
	free(procs);
	if (fclose(f)) {
		free(text);
		return NULL;
	}
	return text;
}

char *fr_metrics__render(struct flightrec *fr, uint64_t now)
{
	return render(fr, now, NULL);
}

/* ---- the file: temp file in the same directory, then rename (textfile collector) ---- */

static int write_file(const char *path, const char *text, size_t len)
{
	/* no fsync: rewritten every second, and a crash loses nothing a scrape needs */
	return atomic_file__write_path(path, text, len, 0644, false);
}

/* ---- the HTTP side (libmicrohttpd's thread) ---- */

static enum MHD_Result serve(void *cls, struct MHD_Connection *conn, const char *url,
			     const char *method, const char *version, const char *upload,
			     size_t *upload_size, void **con_cls)
{
	static const char not_found[] = "not found: try /metrics\n";
	struct fr_metrics *m = cls;
	struct MHD_Response *resp;
	enum MHD_Result ret;
	unsigned code = MHD_HTTP_OK;

	if (strcmp(method, "GET") && strcmp(method, "HEAD"))
		return MHD_NO;
	if (strcmp(url, "/metrics")) {
		code = MHD_HTTP_NOT_FOUND;
		resp = MHD_create_response_from_buffer(sizeof(not_found) - 1, (void *)not_found,
						       MHD_RESPMEM_PERSISTENT);
	} else {
		pthread_mutex_lock(&m->lock);
		resp = MHD_create_response_from_buffer(m->len, m->text ? m->text : (char *)"",
						       MHD_RESPMEM_MUST_COPY);
		pthread_mutex_unlock(&m->lock);
	}
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type",
				code == MHD_HTTP_OK ? "text/plain; version=0.0.4; charset=utf-8" :
						      "text/plain");
	ret = MHD_queue_response(conn, code, resp);
	MHD_destroy_response(resp);
	return ret;
}

int fr_metrics__parse_listen(const char *s, struct sockaddr_storage *sa, unsigned *len)
{
	char host[128];
	const char *colon;
	char *end;
	long port;

	memset(sa, 0, sizeof(*sa));
	colon = strrchr(s, ':');
	if (!colon || colon == s)
		return -EINVAL;		/* no default address: it must be given */
	port = strtol(colon + 1, &end, 10);
	if (!colon[1] || *end || port < 1 || port > 65535)
		return -EINVAL;
	if (s[0] == '[') {
		struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)sa;

		if (colon[-1] != ']' || colon - s - 2 <= 0 || colon - s - 2 >= (long)sizeof(host))
			return -EINVAL;
		snprintf(host, sizeof(host), "%.*s", (int)(colon - s - 2), s + 1);
		if (inet_pton(AF_INET6, host, &a6->sin6_addr) != 1)
			return -EINVAL;
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons(port);
		*len = sizeof(*a6);
	} else {
		struct sockaddr_in *a4 = (struct sockaddr_in *)sa;

		if (colon - s >= (long)sizeof(host))
			return -EINVAL;
		snprintf(host, sizeof(host), "%.*s", (int)(colon - s), s);
		if (inet_pton(AF_INET, host, &a4->sin_addr) != 1)
			return -EINVAL;
		a4->sin_family = AF_INET;
		a4->sin_port = htons(port);
		*len = sizeof(*a4);
	}
	return 0;
}

struct fr_metrics *fr_metrics__new(const char *listen_at, const char *file)
{
	struct fr_metrics *m = calloc(1, sizeof(*m));
	struct sockaddr_storage sa;
	unsigned salen;
	int one = 1, err;

	if (!m)
		return NULL;
	m->sock = -1;
	m->expiry_ns = FR_METRICS_EXPIRY_NS;
	pthread_mutex_init(&m->lock, NULL);
	if (file && !(m->file = strdup(file)))
		goto fail;
	if (!listen_at)
		return m;
	if (fr_metrics__parse_listen(listen_at, &sa, &salen)) {
		log_error("invalid --metrics '%s': want ADDR:PORT (e.g. 127.0.0.1:9464 or [::1]:9464)\n",
			  listen_at);
		errno = EINVAL;
		goto fail;
	}
	/* our own socket: bound to exactly this address, and bind's errno told as it is */
	m->sock = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (m->sock < 0 ||
	    setsockopt(m->sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    (sa.ss_family == AF_INET6 &&
	     setsockopt(m->sock, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one))) ||
	    bind(m->sock, (struct sockaddr *)&sa, salen) || listen(m->sock, 64)) {
		err = errno;
		log_error("cannot serve metrics on %s: %s\n", listen_at, strerror(err));
		errno = err;
		goto fail;
	}
	m->httpd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD |
				    (sa.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0),
				    0, NULL, NULL, serve, m,
				    MHD_OPTION_LISTEN_SOCKET, m->sock,
				    MHD_OPTION_CONNECTION_LIMIT, 16u,
				    MHD_OPTION_CONNECTION_TIMEOUT, 10u,
				    MHD_OPTION_END);
	if (!m->httpd) {
		err = errno ? errno : EIO;
		log_error("cannot serve metrics on %s: libmicrohttpd failed to start\n", listen_at);
		errno = err;
		goto fail;
	}
	return m;
fail:
	err = errno;
	fr_metrics__free(m);
	errno = err;
	return NULL;
}

void fr_metrics__free(struct fr_metrics *m)
{
	if (!m)
		return;
	if (m->httpd)
		MHD_stop_daemon(m->httpd);	/* does not close a socket it was given */
	if (m->sock >= 0)
		close(m->sock);
	free(m->text);
	free(m->file);
	free(m->gone);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

void fr_metrics__set_expiry(struct fr_metrics *m, uint64_t ns)
{
	m->expiry_ns = ns;
}

const char *fr_metrics__text(struct fr_metrics *m)
{
	return m->text;
}

int fr_metrics__update(struct fr_metrics *m, struct flightrec *fr, uint64_t now)
{
	char *text = render(fr, now, m), *old;
	size_t len;
	int err = 0;

	if (!text)
		return -ENOMEM;
	len = strlen(text);
	if (m->file) {
		err = write_file(m->file, text, len);
		if (err && !m->file_failing)
			log_error("cannot write metrics file %s: %s (recording goes on)\n", m->file,
				  strerror(-err));
		else if (!err && m->file_failing)
			log_info("metrics file %s written again\n", m->file);
		m->file_failing = err != 0;
	}
	pthread_mutex_lock(&m->lock);
	old = m->text;
	m->text = text;
	m->len = len;
	pthread_mutex_unlock(&m->lock);
	free(old);
	return err;
}
