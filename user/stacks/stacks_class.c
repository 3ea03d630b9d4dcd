// SPDX-License-Identifier: MIT
/* What a snapshot's frames mean: Python frames merged in at the interpreter's eval-loop
 * frames, each thread classified (where / api / issuing), stacks compared across samples,
 * and the snapshot written as JSON (docs/fr-schema.md "Stacks (version 2)"). No I/O here, so
 * all of it runs in unit tests on synthetic frames. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "fr_keys.h"
#include "growbuf.h"
#include "pyframes.h"
#include "stacks_int.h"

/* ---- interned strings ---- */

static uint64_t str_hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h ? h : 1;
}

const char *strpool__add(struct strpool *pool, const char *s)
{
	uint64_t h, idx;
	char *copy;

	if (!s)
		return NULL;
	h = str_hash(s);
	if (u64map__get(&pool->index, h, &idx) && !strcmp(pool->strs[idx - 1], s))
		return pool->strs[idx - 1];
	if (ARRAY_RESERVE(pool->strs, pool->cap, pool->nr + 1, 64))
		return NULL;
	copy = strdup(s);
	if (!copy)
		return NULL;
	pool->strs[pool->nr++] = copy;
	/* on a hash collision the first string keeps the slot; the second is simply not shared */
	if (!u64map__get(&pool->index, h, &idx))
		u64map__set(&pool->index, h, pool->nr);
	return copy;
}

const char *strpool__addf(struct strpool *pool, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return strpool__add(pool, buf);
}

void strpool__free(struct strpool *pool)
{
	for (int i = 0; i < pool->nr; i++)
		free(pool->strs[i]);
	free(pool->strs);
	u64map__clear(&pool->index);
	memset(pool, 0, sizeof(*pool));
}

/* ---- Python frames merged into native ones ---- */

static bool is_eval_frame(const struct stack_frame *f)
{
	return f->kind == STACK_NATIVE && f->func && !strncmp(f->func, "_PyEval_EvalFrame", 17);
}

static bool put(struct stack_frame *out, uint8_t *out_api, int *n, int max,
		const struct stack_frame *f, uint8_t api)
{
	if (*n >= max)
		return false;
	out[*n] = *f;
	out_api[*n] = api;
	(*n)++;
	return true;
}

static void py_to_frame(const struct py_frame *p, struct strpool *pool, struct stack_frame *f)
{
	memset(f, 0, sizeof(*f));
	f->kind = STACK_PYTHON;
	f->func = strpool__add(pool, p->func);
	f->file = strpool__add(pool, p->file);
	f->line = p->line;
}

int stacks__merge_python(const struct stack_frame *native, const uint8_t *native_api, int nr_native,
			 const struct py_frame *py, int nr_py, struct strpool *pool,
			 struct stack_frame *out, uint8_t *out_api, int max,
			 bool *truncated, bool *no_eval, bool *leftover)
{
	struct stack_frame pf;
	int n = 0, pi = 0, evals = 0;

	*truncated = *no_eval = *leftover = false;
	for (int i = 0; i < nr_native; i++)
		evals += is_eval_frame(&native[i]);
	if (nr_py && !evals) {
		/* nothing to anchor them: Python first, innermost-first, then the native stack */
		*no_eval = true;
		for (; pi < nr_py; pi++) {
			py_to_frame(&py[pi], pool, &pf);
			if (!put(out, out_api, &n, max, &pf, 0))
				goto full;
		}
	}
	for (int i = 0; i < nr_native; i++) {
		if (is_eval_frame(&native[i])) {
			/* this activation runs the frames up to and including the next entry frame */
			for (; pi < nr_py; pi++) {
				py_to_frame(&py[pi], pool, &pf);
				if (!put(out, out_api, &n, max, &pf, 0))
					goto full;
				if (py[pi].entry) {
					pi++;
					break;
				}
			}
		}
		if (!put(out, out_api, &n, max, &native[i], native_api ? native_api[i] : 0))
			goto full;
	}
	if (pi < nr_py) {
		/* more activations than eval frames unwound (a cut native stack): outermost */
		*leftover = true;
		for (; pi < nr_py; pi++) {
			py_to_frame(&py[pi], pool, &pf);
			if (!put(out, out_api, &n, max, &pf, 0))
				goto full;
		}
	}
	return n;
full:
	*truncated = true;
	return n;
}

/* ---- classification ---- */

/* The name without glibc's decorations: "__GI___libc_read" -> "read",
 * "___pthread_cond_timedwait64" -> "pthread_cond_timedwait64". */
static const char *plain_name(const char *s)
{
	for (;;) {
		while (*s == '_')
			s++;
		if (!strncmp(s, "GI_", 3))
			s += 3;
		else if (!strncmp(s, "libc_", 5))
			s += 5;
		else if (!strncmp(s, "new_", 4))
			s += 4;
		else
			return s;
	}
}

bool stacks__is_wait_func(const char *func)
{
	/* prefixes of glibc's blocking wrappers, decorations stripped */
	static const char *const waits[] = {
		"futex", "lll_lock_wait", "pthread_cond_wait", "pthread_cond_timedwait",
		"pthread_cond_clockwait", "pthread_join", "pthread_clockjoin", "pthread_timedjoin",
		"sem_wait", "sem_timedwait", "sem_clockwait", "do_futex_wait", "poll", "ppoll",
		"epoll_wait", "epoll_pwait", "select", "pselect", "nanosleep", "clock_nanosleep",
		"thrd_sleep", "usleep", "sleep", "read", "pread", "readv", "recv", "recvfrom",
		"recvmsg", "recvmmsg", "accept", "accept4", "wait4", "waitpid", "waitid", "pause",
		"sigsuspend", "sigtimedwait", "sigwait", "sigwaitinfo", "msgrcv", "semop",
		"semtimedop", "io_getevents", "connect",
	};
	const char *p;

	if (!func)
		return false;
	p = plain_name(func);
	for (size_t i = 0; i < sizeof(waits) / sizeof(waits[0]); i++) {
		size_t n = strlen(waits[i]);

		/* "read" must not match "readdir": after the prefix only a size suffix or a
		 * decoration may follow */
		if (!strncmp(p, waits[i], n) &&
		    (!p[n] || p[n] == '_' || p[n] == '6' || p[n] == '3' || p[n] == '@' ||
		     !strcmp(waits[i], "futex") || !strcmp(waits[i], "lll_lock_wait")))
			return true;
	}
	return false;
}

bool stacks__is_wait_wchan(const char *wchan)
{
	static const char *const waits[] = {
		"futex", "poll", "select", "nanosleep", "pipe_read", "pipe_wait", "wait_woken",
		"sk_wait", "inet_csk_accept", "unix_stream", "skb_wait", "do_wait", "sigsuspend",
		"sigtimedwait", "hrtimer", "msgrcv", "sem", "wait_for_completion", "n_tty_read",
		"io_schedule", "ep_poll", "schedule_timeout",
	};

	if (!wchan || !wchan[0] || !strcmp(wchan, "0"))
		return false;
	for (size_t i = 0; i < sizeof(waits) / sizeof(waits[0]); i++)
		if (strstr(wchan, waits[i]))
			return true;
	return false;
}

static bool is_allocator(const struct stack_frame *f)
{
	return f->kind == STACK_NATIVE && f->func &&
	       (strstr(f->func, "CUDACachingAllocator") || strstr(f->func, "c10::cuda::"));
}

void stacks__classify(struct stack_thread *t, const uint8_t *api)
{
	static const uint8_t order[] = { FRAME_API_NCCL, FRAME_API_CUDA, FRAME_API_DRIVER };
	const struct stack_frame *top = NULL;
	int nr_native = 0;
	bool python = false;

	t->api = NULL;
	for (int i = 0; i < t->nr_frames; i++) {
		if (t->frames[i].kind == STACK_PYTHON) {
			python = true;
			continue;
		}
		if (!top)
			top = &t->frames[i];
		nr_native++;
	}
	/* the outermost frame of the first kind present wins: ncclAllReduce calling
	 * cudaStreamSynchronize is "nccl ncclAllReduce" */
	for (size_t k = 0; k < sizeof(order); k++) {
		for (int i = t->nr_frames - 1; i >= 0; i--) {
			if (api[i] != order[k])
				continue;
			t->where = k == 0 ? WHERE_NCCL : k == 1 ? WHERE_CUDA : WHERE_DRIVER;
			t->api = t->frames[i].func;
			/* NCCL's pnccl* are its profiling aliases of the same entry points */
			if (t->api && !strncmp(t->api, "pnccl", 5))
				t->api++;
			return;
		}
	}
	for (int i = t->nr_frames - 1; i >= 0; i--) {
		if (is_allocator(&t->frames[i])) {
			t->where = WHERE_ALLOCATOR;
			return;
		}
	}
	if (python) {
		t->where = WHERE_PYTHON;
		return;
	}
	if ((top && stacks__is_wait_func(top->func)) ||
	    (t->state == 'S' && stacks__is_wait_wchan(t->wchan))) {
		t->where = WHERE_IDLE;
		return;
	}
	t->where = nr_native ? WHERE_RUNNING : WHERE_UNKNOWN;
}

void stacks__pick_issuing(struct stack_proc *sp)
{
	static const enum stack_where busy[] = { WHERE_NCCL, WHERE_CUDA, WHERE_DRIVER };
	struct stack_thread *main_thread = NULL, *pick = NULL;

	for (int i = 0; i < sp->nr_threads; i++) {
		sp->threads[i].issuing = false;
		if (sp->threads[i].main)
			main_thread = &sp->threads[i];
	}
	/* the thread inside NCCL, else CUDA, else the driver; the main thread first */
	for (size_t k = 0; k < sizeof(busy) / sizeof(busy[0]) && !pick; k++) {
		if (main_thread && main_thread->where == busy[k])
			pick = main_thread;
		for (int i = 0; i < sp->nr_threads && !pick; i++)
			if (sp->threads[i].where == busy[k])
				pick = &sp->threads[i];
	}
	if (!pick && main_thread && main_thread->python)
		pick = main_thread;
	for (int i = 0; i < sp->nr_threads && !pick; i++)
		if (sp->threads[i].python)
			pick = &sp->threads[i];
	if (!pick)
		pick = main_thread;
	if (!pick && sp->nr_threads)
		pick = &sp->threads[0];
	if (pick)
		pick->issuing = true;
}

static bool str_eq(const char *a, const char *b)
{
	return a == b || (a && b && !strcmp(a, b));
}

bool stacks__same_stack(const struct stack_frame *a, int nr_a, const char *api_a,
			const struct stack_frame *b, int nr_b, const char *api_b)
{
	if (nr_a != nr_b || !str_eq(api_a, api_b))
		return false;
	for (int i = 0; i < nr_a; i++) {
		if (a[i].kind != b[i].kind)
			return false;
		if (a[i].kind == STACK_NATIVE) {
			/* module + offset, not pc: the same code in every sample */
			if (!str_eq(a[i].module, b[i].module) || a[i].module_off != b[i].module_off)
				return false;
			if ((!a[i].module || !a[i].build_id) && a[i].pc != b[i].pc)
				return false;
		} else if (!str_eq(a[i].func, b[i].func) || !str_eq(a[i].file, b[i].file) ||
			   a[i].line != b[i].line) {
			return false;
		}
	}
	return true;
}

/* ---- names and JSON ---- */

const char *stacks__where_name(enum stack_where w)
{
	switch (w) {
	case WHERE_NCCL: return "nccl";
	case WHERE_CUDA: return "cuda";
	case WHERE_DRIVER: return "driver";
	case WHERE_ALLOCATOR: return "allocator";
	case WHERE_PYTHON: return "python";
	case WHERE_IDLE: return "idle";
	case WHERE_RUNNING: return "running";
	default: return "unknown";
	}
}

const char *stacks__progress_name(enum stack_progress p)
{
	switch (p) {
	case PROGRESS_NONE: return "none";
	case PROGRESS_YES: return "yes";
	default: return "unknown";
	}
}

static cJSON *str_or_null(const char *s)
{
	return s ? cJSON_CreateString(s) : cJSON_CreateNull();
}

static cJSON *hex(uint64_t v)
{
	char buf[24];

	snprintf(buf, sizeof(buf), "0x%llx", (unsigned long long)v);
	return cJSON_CreateString(buf);
}

static bool add(cJSON *obj, const char *key, cJSON *item)
{
	if (!item)
		return false;
	cJSON_AddItemToObject(obj, key, item);
	return true;
}

static cJSON *frame_json(const struct stack_frame *f)
{
	cJSON *o = cJSON_CreateObject();
	bool ok;

	if (!o)
		return NULL;
	if (f->kind == STACK_PYTHON) {
		ok = add(o, FRK_KIND, cJSON_CreateString("python")) &&
		     add(o, FRK_FUNC, str_or_null(f->func)) &&
		     add(o, FRK_FILE, str_or_null(f->file)) &&
		     add(o, FRK_LINE, f->line ? cJSON_CreateNumber(f->line) : cJSON_CreateNull());
	} else {
		ok = add(o, FRK_KIND, cJSON_CreateString("native")) &&
		     add(o, FRK_FUNC, str_or_null(f->func)) &&
		     add(o, FRK_FUNC_OFF, f->func ? hex(f->func_off) : cJSON_CreateNull()) &&
		     add(o, FRK_MODULE, str_or_null(f->module)) &&
		     add(o, FRK_BUILD_ID, str_or_null(f->build_id)) &&
		     add(o, FRK_MODULE_OFF, f->module && f->build_id ? hex(f->module_off)
							       : cJSON_CreateNull()) &&
		     add(o, FRK_PC, hex(f->pc));
		if (ok && f->unrecoverable)
			ok = add(o, FRK_UNRECOVERABLE, cJSON_CreateString(f->unrecoverable));
	}
	if (!ok) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/* Return addresses a return probe had replaced: how many were put back, how many not, and
 * what reading the pending instances cost (the threads stopped meanwhile). */
static cJSON *uret_json(const struct stack_proc *sp)
{
	cJSON *o = cJSON_CreateObject();

	if (!o)
		return NULL;
	if (!add(o, FRK_RECOVERED, cJSON_CreateNumber(sp->uret_resolved)) ||
	    !add(o, FRK_UNRECOVERABLE, cJSON_CreateNumber(sp->uret_unrecoverable)) ||
	    !add(o, FRK_INSTANCE_READS, cJSON_CreateNumber(sp->uret_reads)) ||
	    !add(o, FRK_INSTANCES, cJSON_CreateNumber(sp->uret_instances)) ||
	    !add(o, FRK_INSTANCE_READ_MS, cJSON_CreateNumber((double)sp->uret_read_ns / 1e6)) ||
	    !add(o, FRK_STEPPED_OUT, cJSON_CreateNumber(sp->uret_stepped_out))) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

static cJSON *thread_json(const struct stack_thread *t)
{
	cJSON *o = cJSON_CreateObject(), *arr;
	char state[2] = { t->state, 0 };
	bool ok;

	if (!o)
		return NULL;
	ok = add(o, FRK_TID, cJSON_CreateNumber(t->tid)) &&
	     add(o, FRK_NAME, cJSON_CreateString(t->name)) &&
	     add(o, FRK_STATE, t->state ? cJSON_CreateString(state) : cJSON_CreateNull()) &&
	     add(o, FRK_WCHAN, str_or_null(t->wchan[0] ? t->wchan : NULL));
	if (!ok)
		goto fail;
	if (t->nr_kstack >= 0) {
		arr = cJSON_CreateArray();
		if (!add(o, FRK_KERNEL_STACK, arr))
			goto fail;
		for (int i = 0; i < t->nr_kstack; i++) {
			cJSON *s = cJSON_CreateString(t->kstack[i]);

			if (!s)
				goto fail;
			cJSON_AddItemToArray(arr, s);
		}
	} else if (!add(o, FRK_KERNEL_STACK, cJSON_CreateNull())) {
		goto fail;
	}
	ok = add(o, FRK_KERNEL_STACK_ERROR, str_or_null(t->kstack_err)) &&
	     add(o, FRK_WHERE, cJSON_CreateString(stacks__where_name(t->where))) &&
	     add(o, FRK_API, str_or_null(t->api)) &&
	     add(o, FRK_PROGRESS, cJSON_CreateString(stacks__progress_name(t->progress))) &&
	     add(o, FRK_MAIN, cJSON_CreateBool(t->main)) &&
	     add(o, FRK_ISSUING, cJSON_CreateBool(t->issuing)) &&
	     add(o, FRK_PYTHON, cJSON_CreateBool(t->python)) &&
	     add(o, FRK_TRUNCATED, cJSON_CreateBool(t->truncated)) &&
	     add(o, FRK_UNWIND_ERROR, str_or_null(t->unwind_err));
	if (!ok)
		goto fail;
	arr = cJSON_CreateArray();
	if (!add(o, FRK_FRAMES, arr))
		goto fail;
	for (int i = 0; i < t->nr_frames; i++) {
		cJSON *f = frame_json(&t->frames[i]);

		if (!f)
			goto fail;
		cJSON_AddItemToArray(arr, f);
	}
	return o;
fail:
	cJSON_Delete(o);
	return NULL;
}

/* ns values exceed a double's 53 bits: the integer, exactly */
static cJSON *u64_raw(uint64_t v)
{
	char buf[24];

	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
	return cJSON_CreateRaw(buf);
}

static cJSON *int_or_null(int v)
{
	return v >= 0 ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}

cJSON *stacks__json(const struct stack_proc *sp)
{
	cJSON *o = cJSON_CreateObject(), *arr;
	bool ok;

	if (!o)
		return NULL;
	/* "taken" is the caller's to set (attach / dump); a plain snapshot is a request */
	ok = add(o, FRK_TAKEN, cJSON_CreateString("request")) &&
	     add(o, FRK_PID, cJSON_CreateNumber(sp->pid)) &&
	     add(o, FRK_COMM, cJSON_CreateString(sp->comm)) &&
	     add(o, FRK_CMDLINE, str_or_null(sp->cmdline)) &&
	     add(o, FRK_RANK, int_or_null(sp->rank)) &&
	     add(o, FRK_WORLD_SIZE, int_or_null(sp->world_size)) &&
	     add(o, FRK_LOCAL_RANK, int_or_null(sp->local_rank)) &&
	     add(o, FRK_TIME_NS, u64_raw(sp->real_ns)) &&
	     add(o, FRK_MONO_NS, u64_raw(sp->mono_ns)) &&
	     add(o, FRK_SAMPLES, cJSON_CreateNumber(sp->samples)) &&
	     add(o, FRK_INTERVAL_MS, cJSON_CreateNumber(sp->interval_ms)) &&
	     add(o, FRK_STOPPED_MS_MAX, cJSON_CreateNumber((double)sp->stopped_ns_max / 1e6)) &&
	     add(o, FRK_PTRACE_ERROR, str_or_null(sp->ptrace_err)) &&
	     add(o, FRK_URETPROBE_FRAMES, uret_json(sp)) &&
	     add(o, FRK_PYTHON, str_or_null(sp->python)) &&
	     add(o, FRK_PYTHON_ERROR, str_or_null(sp->python_err)) &&
	     add(o, FRK_EXITED, cJSON_CreateBool(sp->exited));
	if (!ok)
		goto fail;
	arr = cJSON_CreateArray();
	if (!add(o, FRK_THREADS, arr))
		goto fail;
	for (int i = 0; i < sp->nr_threads; i++) {
		cJSON *t = thread_json(&sp->threads[i]);

		if (!t)
			goto fail;
		cJSON_AddItemToArray(arr, t);
	}
	return o;
fail:
	cJSON_Delete(o);
	errno = ENOMEM;
	return NULL;
}
