// SPDX-License-Identifier: MIT
/* The door into a running CPython: see pyrun.h for the contract. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "elfsym.h"
#include "growbuf.h"
#include "inject.h"
#include "procmaps.h"
#include "pyframes.h"
#include "pyrun.h"
#include "util.h"

#define MAX_PAGES	16		/* code pages waiting to be unmapped */
#define PICK_MS		1000		/* how long to look for a thread safe to stop */
#define RUN_MAX_MS	(10 * 60 * 1000)	/* a claimed snippet may run this long */
#define ADD_CALL_MS	2000		/* Py_AddPendingCall / mmap must return in this */

struct pyrun {
	int pid;
	uid_t uid;
	gid_t gid;
	char version[32];
	char exe_base[NAME_MAX + 1];
	uint64_t add_pending, run_simple, mmap_fn, munmap_fn;
	char dir_target[128];		/* the private directory as the target sees it */
	char dir_host[PATH_MAX];	/* the same through /proc/PID/root */
	unsigned int seq;
	struct { uint64_t addr, len; } pages[MAX_PAGES];	/* claimed: parsed, free to unmap */
	int nr_pages;
	struct elfsym_cache *syms;
};

static bool alive(int pid)
{
	char path[64];
	FILE *f;
	char state = '?';

	if (kill(pid, 0) && errno == ESRCH)
		return false;
	/* a zombie runs nothing */
	if (procmaps__path(path, sizeof(path), pid, "stat"))
		return false;
	f = fopen(path, "re");
	if (!f)
		return false;
	if (fscanf(f, "%*d (%*[^)]) %c", &state) != 1)
		state = '?';
	fclose(f);
	return state != 'Z' && state != 'X';
}

/* A process inside exit(): its files and root are already released (/proc/PID/root reads
 * ENOENT) while it is not a zombie yet; what it was to run will never run. */
static bool exiting(int pid)
{
	char path[64], buf[8];

	if (!alive(pid))
		return true;
	if (procmaps__path(path, sizeof(path), pid, "root"))
		return false;
	return readlink(path, buf, sizeof(buf)) < 0 && errno == ENOENT;
}

/* ---- the interpreter's entry points ------------------------------------------------- */

static int find_python_funcs(struct pyrun *r, char *err, size_t errlen)
{
	static const char *const libs[] = { NULL /* the executable */, "libpython3" };
	char path[64], exe[PATH_MAX];
	ssize_t n;

	if (procmaps__path(path, sizeof(path), r->pid, "exe"))
		return -ENAMETOOLONG;
	n = readlink(path, exe, sizeof(exe) - 1);
	if (n > 0) {
		const char *base;

		exe[n] = '\0';
		base = strrchr(exe, '/');
		base = base ? base + 1 : exe;
		if (strlen(base) < sizeof(r->exe_base))
			memcpy(r->exe_base, base, strlen(base) + 1);
	}
	for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); i++) {
		const char *lib = libs[i] ? libs[i] : r->exe_base;

		if (!lib[0])
			continue;
		if (!r->add_pending)
			injector__find_func(r->pid, lib, "Py_AddPendingCall", &r->add_pending);
		if (!r->run_simple)
			injector__find_func(r->pid, lib, "PyRun_SimpleString", &r->run_simple);
	}
	if (!r->add_pending || !r->run_simple) {
		set_err(err, errlen, "process %d (Python %s): no exported %s in its interpreter",
			r->pid, r->version, r->add_pending ? "PyRun_SimpleString" : "Py_AddPendingCall");
		return -ENOENT;
	}
	injector__find_func(r->pid, "libc.so.6", "mmap", &r->mmap_fn);
	injector__find_func(r->pid, "libc.so.6", "munmap", &r->munmap_fn);
	if (!r->mmap_fn || !r->munmap_fn) {
		set_err(err, errlen, "process %d: no mmap/munmap in its libc.so.6 (statically "
			"linked?)", r->pid);
		return -ENOENT;
	}
	return 0;
}

static int target_owner(struct pyrun *r)
{
	char path[64];
	struct stat st;

	if (procmaps__path(path, sizeof(path), r->pid, ""))
		return -ENAMETOOLONG;
	if (stat(path, &st))
		return -errno;
	r->uid = st.st_uid;
	r->gid = st.st_gid;
	return 0;
}

/* A directory of ours in the target's /tmp (its mount namespace), owned by its user. */
static int make_dir(struct pyrun *r)
{
	for (int tries = 0; tries < 16; tries++) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		snprintf(r->dir_target, sizeof(r->dir_target), "/tmp/tptrace-py-%d-%lx", (int)getpid(),
			 (unsigned long)(ts.tv_nsec ^ (ts.tv_sec << 20) ^ tries));
		if (procmaps__target_path(r->dir_host, sizeof(r->dir_host), r->pid, r->dir_target))
			return -ENAMETOOLONG;
		if (mkdir(r->dir_host, 0700)) {
			if (errno == EEXIST)
				continue;
			return -errno;
		}
		if (chown(r->dir_host, r->uid, r->gid)) {
			int e = -errno;

			rmdir(r->dir_host);
			return e;
		}
		return 0;
	}
	return -EEXIST;
}

struct pyrun *pyrun__open(int pid, char *err, size_t errlen)
{
	struct pyrun *r;
	struct pyproc *py;
	char why[256] = "";
	int e;

	if (pid <= 0 || !alive(pid)) {
		set_err(err, errlen, "no process %d", pid);
		errno = ESRCH;
		return NULL;
	}
	py = pyframes__open(pid, why, sizeof(why));
	if (!py) {
		if (why[0])
			set_err(err, errlen, "process %d: %s", pid, why);
		else
			set_err(err, errlen, "process %d runs no CPython interpreter", pid);
		errno = why[0] ? ENOTSUP : ENOENT;
		return NULL;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		pyframes__free(py);
		set_err(err, errlen, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	r->pid = pid;
	snprintf(r->version, sizeof(r->version), "%s", pyframes__version(py));
	pyframes__free(py);
	e = find_python_funcs(r, err, errlen);
	if (!e && (e = target_owner(r)))
		set_err(err, errlen, "process %d: %s", pid, strerror(-e));
	if (!e && (e = make_dir(r)))
		set_err(err, errlen, "process %d: cannot make a private directory in its /tmp: %s",
			pid, strerror(-e));
	if (!e && !(r->syms = elfsym_cache__new()))
		e = -ENOMEM, set_err(err, errlen, "out of memory");
	if (e) {
		if (r->dir_host[0])
			rmdir(r->dir_host);
		free(r);
		errno = -e;
		return NULL;
	}
	return r;
}

const char *pyrun__version(const struct pyrun *r)
{
	return r->version;
}

int pyrun__file(struct pyrun *r, const char *name, char *host_path, size_t hlen,
		char *target_path, size_t tlen)
{
	char hp[PATH_MAX];
	int fd;

	if (!name[0] || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
		return -EINVAL;
	if ((size_t)snprintf(hp, sizeof(hp), "%s/%s", r->dir_host, name) >= sizeof(hp))
		return -ENAMETOOLONG;
	unlink(hp);
	fd = open(hp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	if (fchown(fd, r->uid, r->gid)) {
		int e = -errno;

		close(fd);
		unlink(hp);
		return e;
	}
	close(fd);
	if (host_path)
		snprintf(host_path, hlen, "%s", hp);
	if (target_path)
		snprintf(target_path, tlen, "%s/%s", r->dir_target, name);
	return 0;
}

/* ---- choosing a thread that is safe to borrow -------------------------------------- */

/*
 * The borrowed thread runs mmap, munmap and Py_AddPendingCall. Py_AddPendingCall takes the
 * interpreter's pending-call lock, so the thread must not be holding it (inside the
 * pending-call code or a lock primitive); nor may it be inside the allocator, the dynamic
 * loader, or an interpreter/thread lifecycle call. Judged by the function the thread was
 * stopped in: a named function on the list below, anything in ld.so, or a running thread at
 * a place of the C library no symbol names, is refused. Should the call block anyway, it is
 * stopped after ADD_CALL_MS and the thread restored: it never acquired the lock.
 */
static const char *const unsafe_prefix[] = {
	/* glibc allocator */
	"malloc", "free", "calloc", "realloc", "cfree", "memalign", "posix_memalign",
	"aligned_alloc", "valloc", "pvalloc", "__libc_malloc", "__libc_free", "__libc_calloc",
	"__libc_realloc", "__libc_memalign", "_int_", "tcache", "arena", "sysmalloc", "__malloc",
	"__free", "_mid_memalign",
	/* locks, thread and process lifecycle */
	"pthread_mutex", "__pthread_mutex", "__lll_", "lll_", "pthread_cond", "__pthread_cond",
	"pthread_rwlock", "__pthread_rwlock", "pthread_create", "__pthread_create",
	"pthread_exit", "__pthread_exit", "pthread_join", "__pthread_join", "start_thread",
	"fork", "__libc_fork", "_Fork", "__run_exit_handlers", "exit", "_exit", "_dl_", "dl",
	"__libc_dl", "sem_", "__new_sem", "__sem",
	/* CPython: locks, GIL, pending calls, interpreter and thread-state lifecycle, memory */
	"PyThread_", "Py_AddPendingCall", "_PyEval_AddPendingCall", "_push_pending_call",
	"_pop_pending_call", "make_pending_calls", "_Py_HandlePending", "Py_MakePendingCalls",
	"_PyEval_MakePendingCalls", "PyMutex", "_PyMutex", "_PyParkingLot", "_PySemaphore",
	"take_gil", "drop_gil", "PyEval_Acquire", "PyEval_Release", "PyEval_Restore",
	"PyEval_Save", "PyEval_InitThreads", "_PyEval_AddPendingCall", "_PyEval_InitGIL",
	"_PyEval_FiniGIL", "_PyEval_ReInitThreads", "_PyEval_Fini", "Py_Initialize", "_Py_Initialize",
	"Py_Finalize", "_Py_Finalize", "Py_Exit", "Py_NewInterpreter", "Py_EndInterpreter",
	"PyThreadState_", "_PyThreadState_", "PyGILState_", "_PyGILState_", "PyInterpreterState_",
	"_PyInterpreterState_", "PyMem_", "_PyMem_", "PyObject_Malloc", "PyObject_Free",
	"PyObject_Realloc", "PyObject_Calloc", "_PyObject_Malloc", "_PyObject_Free",
	"pymalloc", "_PyObject_GC_", "PyObject_GC_", "gc_collect", "_PyGC_",
};

bool pyrun__unsafe_function(const char *name)
{
	for (size_t i = 0; i < sizeof(unsafe_prefix) / sizeof(unsafe_prefix[0]); i++)
		if (!strncmp(name, unsafe_prefix[i], strlen(unsafe_prefix[i])))
			return true;
	return false;
}

/* "func (file)" for addr in pid, or why not; *unsafe set by the list above. */
static void place_of(struct pyrun *r, uint64_t addr, bool in_syscall, char *buf, size_t len,
		     bool *unsafe)
{
	struct procmaps *maps = procmaps__load(r->pid);
	const struct vma *v = maps ? procmaps__find(maps, addr) : NULL;
	const struct elfsym_sym *sym = NULL;
	const char *base = "?";
	char fpath[PATH_MAX];
	struct elfsym *es = NULL;
	uint64_t vaddr;

	*unsafe = !in_syscall;
	if (!v || !v->path || v->path[0] != '/') {
		snprintf(buf, len, "0x%" PRIx64 " (%s)", addr, v && v->path ? v->path : "anonymous");
		goto out;
	}
	base = strrchr(v->path, '/') + 1;
	if (!strncmp(base, "ld-linux", 8) || !strncmp(base, "ld-", 3)) {
		snprintf(buf, len, "the dynamic loader (%s)", base);
		*unsafe = true;
		goto out;
	}
	if (!procmaps__target_path(fpath, sizeof(fpath), r->pid, v->path))
		es = elfsym_cache__get(r->syms, fpath);
	if (es && !elfsym__off_to_vaddr(es, addr - v->start + v->offset, &vaddr))
		sym = elfsym__func_at(es, vaddr);
	if (!sym) {
		/* No symbol names the place (stripped static functions). In the C library it may
		 * be the allocator's internals; elsewhere (a stripped interpreter's static code,
		 * a library's) it cannot be inside the allocator or hold the pending-call lock,
		 * which only named interpreter functions take. */
		snprintf(buf, len, "%s+0x%" PRIx64, base, addr - v->start + v->offset);
		*unsafe = !in_syscall && (!strncmp(base, "libc.so", 7) || !strncmp(base, "libc-", 5) ||
					  !strncmp(base, "libpthread", 10));
		goto out;
	}
	snprintf(buf, len, "%s (%s)", sym->name, base);
	*unsafe = pyrun__unsafe_function(sym->name);
out:
	procmaps__free(maps);
}

static int list_threads(int pid, int *tids, int max)
{
	char path[64];
	struct dirent *de;
	DIR *d;
	int n = 0;

	tids[n++] = pid;	/* the main thread first */
	if (procmaps__path(path, sizeof(path), pid, "task"))
		return n;
	d = opendir(path);
	if (!d)
		return n;
	while ((de = readdir(d)) && n < max) {
		int tid = atoi(de->d_name);

		if (tid > 0 && tid != pid)
			tids[n++] = tid;
	}
	closedir(d);
	return n;
}

/* Stop a thread of the target that is safe to borrow; NULL and err when none was in time. */
static struct injector *borrow_thread(struct pyrun *r, char *err, size_t errlen)
{
	uint64_t deadline = now_ms() + PICK_MS;
	char last[256] = "", where[200];
	int tids[64], n;

	for (;;) {
		n = list_threads(r->pid, tids, 64);
		for (int i = 0; i < n; i++) {
			struct injector *inj = injector__attach(tids[i], err, errlen);
			bool unsafe;

			if (!inj) {
				if (errno == EPERM || errno == EBUSY)
					return NULL;
				if (!alive(r->pid)) {
					set_err(err, errlen, "process %d exited", r->pid);
					errno = ESRCH;
					return NULL;
				}
				continue;	/* the thread ended meanwhile */
			}
			place_of(r, injector__pc(inj), injector__syscall(inj) >= 0, where,
				 sizeof(where), &unsafe);
			if (getenv("TPTRACE_PYRUN_DEBUG"))	/* tests/e2e/test_pyrun.py */
				fprintf(stderr, "pyrun: %s thread %d in %s (syscall %ld)\n",
					unsafe ? "skipped" : "borrowed", tids[i], where,
					injector__syscall(inj));
			if (!unsafe)
				return inj;
			snprintf(last, sizeof(last), "thread %d in %s", tids[i], where);
			injector__detach(inj);
		}
		if (now_ms() >= deadline)
			break;
		sleep_ms(2);
	}
	set_err(err, errlen, "process %d: no thread could be stopped outside the allocator, the "
		"loader, locks or the interpreter's lifecycle within %.1f s (last: %s)", r->pid,
		PICK_MS / 1000.0, last[0] ? last : "none");
	errno = EBUSY;
	return NULL;
}

/* Unmap the code pages of snippets that started (they were parsed before they ran). */
static void unmap_pages(struct pyrun *r, struct injector *inj)
{
	for (int i = 0; i < r->nr_pages; i++) {
		uint64_t a[6] = { r->pages[i].addr, r->pages[i].len }, ret;

		injector__call(inj, r->munmap_fn, a, &ret);
	}
	r->nr_pages = 0;
}

void pyrun__close(struct pyrun *r)
{
	char err[256];
	DIR *d;

	if (!r)
		return;
	if (r->nr_pages && alive(r->pid)) {
		struct injector *inj = borrow_thread(r, err, sizeof(err));

		if (inj) {
			injector__set_call_timeout(inj, ADD_CALL_MS);
			unmap_pages(r, inj);
			injector__detach(inj);
		}
	}
	d = opendir(r->dir_host);
	if (d) {
		struct dirent *de;

		while ((de = readdir(d))) {
			char p[PATH_MAX];

			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			if ((size_t)snprintf(p, sizeof(p), "%s/%s", r->dir_host, de->d_name) < sizeof(p))
				unlink(p);
		}
		closedir(d);
	}
	rmdir(r->dir_host);
	elfsym_cache__free(r->syms);
	free(r);
}

/* ---- the text run in the target ---------------------------------------------------- */

/* A Python expression for the exact UTF-8 text s: b'...'.decode(), every byte that is not a
 * plain printable character escaped, so no text can end the literal. */
static void sb_pystr(struct growbuf *b, const char *s)
{
	static const char hex[] = "0123456789abcdef";

	growbuf__puts(b, "b'");
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		if (*c >= 0x20 && *c < 0x7f && *c != '\'' && *c != '\\') {
			growbuf__add(b, (const char *)c, 1);
		} else {
			char e[4] = { '\\', 'x', hex[*c >> 4], hex[*c & 15] };

			growbuf__add(b, e, 4);
		}
	}
	growbuf__puts(b, "'.decode('utf-8')");
}

/* A Python literal of a cJSON value (the snippet's args). */
static int sb_pyval(struct growbuf *b, const cJSON *v, int depth)
{
	char num[64];
	const cJSON *c;

	if (depth > 16)
		return -EINVAL;
	if (!v || cJSON_IsNull(v)) {
		growbuf__puts(b, "None");
	} else if (cJSON_IsBool(v)) {
		growbuf__puts(b, cJSON_IsTrue(v) ? "True" : "False");
	} else if (cJSON_IsNumber(v)) {
		double d = v->valuedouble;

		if (!isfinite(d))
			return -EINVAL;
		if (d == floor(d) && fabs(d) < 9007199254740992.0)
			snprintf(num, sizeof(num), "%lld", (long long)d);
		else
			snprintf(num, sizeof(num), "%.17g", d);
		growbuf__puts(b, num);
	} else if (cJSON_IsString(v)) {
		sb_pystr(b, v->valuestring);
	} else if (cJSON_IsArray(v)) {
		growbuf__puts(b, "[");
		cJSON_ArrayForEach(c, v) {
			if (sb_pyval(b, c, depth + 1))
				return -EINVAL;
			growbuf__puts(b, ",");
		}
		growbuf__puts(b, "]");
	} else if (cJSON_IsObject(v)) {
		growbuf__puts(b, "{");
		cJSON_ArrayForEach(c, v) {
			sb_pystr(b, c->string);
			growbuf__puts(b, ":");
			if (sb_pyval(b, c, depth + 1))
				return -EINVAL;
			growbuf__puts(b, ",");
		}
		growbuf__puts(b, "}");
	} else {
		return -EINVAL;
	}
	return 0;
}

/*
 * The wrapper, run by PyRun_SimpleString in __main__'s namespace: one expression statement,
 * so it binds no name there. Its body runs in a namespace of its own. It must never raise: an
 * exception escaping a pending call would be printed in the target, and a failing pending
 * call makes the interpreter raise in whatever code the main thread was running.
 */
static const char wrapper_body[] =
"def _tp_json(v):\n"
"    if v is None or v is True or v is False:\n"
"        return {None: 'null', True: 'true', False: 'false'}[v]\n"
"    if isinstance(v, int):\n"
"        return str(int(v))\n"
"    if isinstance(v, float):\n"
"        return repr(v) if v == v and v not in (float('inf'), float('-inf')) else 'null'\n"
"    if isinstance(v, str):\n"
"        out = ['\"']\n"
"        for ch in v:\n"
"            o = ord(ch)\n"
"            if ch == '\"' or ch == '\\\\':\n"
"                out.append('\\\\' + ch)\n"
"            elif o < 0x20 or o == 0x7f or 0xd800 <= o < 0xe000:\n"
"                out.append('\\\\u%04x' % o)\n"
"            else:\n"
"                out.append(ch)\n"
"        out.append('\"')\n"
"        return ''.join(out)\n"
"    if isinstance(v, dict):\n"
"        return '{' + ','.join(_tp_json(str(k)) + ':' + _tp_json(x) for k, x in v.items()) + '}'\n"
"    if isinstance(v, (list, tuple)):\n"
"        return '[' + ','.join(_tp_json(x) for x in v) + ']'\n"
"    return _tp_json(str(v))\n"
"def _tp_main():\n"
"    import os, sys\n"
"    try:\n"
"        os.rename(_tp_req, _tp_req + '.run')\n"
"    except OSError:\n"
"        if not _tp_keep:\n"
"            return\n"
"    try:\n"
"        ns = {'__name__': '__tptrace__'}\n"
"        exec(compile(_tp_src, '<tptrace snippet>', 'exec'), ns)\n"
"        states = getattr(sys, '_tptrace_state', None)\n"
"        if not isinstance(states, dict):\n"
"            states = {}\n"
"        st = states.get(_tp_key)\n"
"        if not isinstance(st, dict):\n"
"            st = {}\n"
"        try:\n"
"            out = ns['run'](_tp_args, st)\n"
"        finally:\n"
"            if st:\n"
"                states[_tp_key] = st\n"
"            else:\n"
"                states.pop(_tp_key, None)\n"
"            if states:\n"
"                sys._tptrace_state = states\n"
"            elif hasattr(sys, '_tptrace_state'):\n"
"                del sys._tptrace_state\n"
"        if not isinstance(out, dict):\n"
"            out = {'result': out}\n"
"    except BaseException as e:\n"
"        out = {'error': '%s: %s' % (type(e).__name__, e)}\n"
"    data = (_tp_json(out) + '\\n').encode('utf-8', 'replace')\n"
"    fd = os.open(_tp_res, os.O_WRONLY | os.O_TRUNC)\n"
"    try:\n"
"        while data:\n"
"            data = data[os.write(fd, data):]\n"
"    finally:\n"
"        os.close(fd)\n"
"try:\n"
"    _tp_main()\n"
"except BaseException:\n"
"    pass\n";

static char *build_text(struct pyrun *r, const char *snippet, const cJSON *args,
			const char *req, const char *res, bool keep)
{
	struct growbuf b = {};
	char key[64];

	snprintf(key, sizeof(key), "%d-%p", (int)getpid(), (void *)r);
	growbuf__puts(&b, "exec(compile(");
	sb_pystr(&b, wrapper_body);
	growbuf__puts(&b, ", '<tptrace>', 'exec'), {'__builtins__': __builtins__, '_tp_req': ");
	sb_pystr(&b, req);
	growbuf__puts(&b, ", '_tp_res': ");
	sb_pystr(&b, res);
	growbuf__puts(&b, keep ? ", '_tp_keep': True" : ", '_tp_keep': False");
	growbuf__puts(&b, ", '_tp_key': ");
	sb_pystr(&b, key);
	growbuf__puts(&b, ", '_tp_src': ");
	sb_pystr(&b, snippet);
	growbuf__puts(&b, ", '_tp_args': ");
	if (sb_pyval(&b, args, 0)) {
		growbuf__free(&b);
		errno = EINVAL;
		return NULL;
	}
	growbuf__puts(&b, "})\n");
	if (b.failed) {
		growbuf__free(&b);
		errno = ENOMEM;
		return NULL;
	}
	return b.p;
}

/* ---- queueing and waiting ---------------------------------------------------------- */

/* Where the main thread is, from /proc (no stop needed): "clock_nanosleep (libc.so.6)". */
static void main_thread_place(struct pyrun *r, char *buf, size_t len)
{
	char path[64], line[512];
	unsigned long long pc = 0;
	long nr;
	FILE *f;
	bool unsafe;

	snprintf(buf, len, "C code");
	if (procmaps__path(path, sizeof(path), r->pid, "syscall"))
		return;
	f = fopen(path, "re");
	if (!f)
		return;
	if (!fgets(line, sizeof(line), f))
		line[0] = '\0';
	fclose(f);
	if (!strncmp(line, "running", 7)) {
		snprintf(buf, len, "C code (running, not in the eval loop)");
		return;
	}
	if (sscanf(line, "%ld %*s %*s %*s %*s %*s %*s %*s %llx", &nr, &pc) != 2 || nr < 0)
		return;
	place_of(r, pc, true, buf, len, &unsafe);
}

static int read_result(const char *path, cJSON **result)
{
	char *data = NULL;
	size_t len = 0;
	struct stat st;
	FILE *f = fopen(path, "re");

	if (!f)
		return -errno;
	if (fstat(fileno(f), &st) || st.st_size <= 0) {
		fclose(f);
		return -EAGAIN;
	}
	data = malloc(st.st_size + 1);
	if (!data) {
		fclose(f);
		return -ENOMEM;
	}
	len = fread(data, 1, st.st_size, f);
	fclose(f);
	data[len] = '\0';
	if (!len || data[len - 1] != '\n') {
		free(data);
		return -EAGAIN;	/* still being written */
	}
	*result = cJSON_Parse(data);
	free(data);
	if (!*result || !cJSON_IsObject(*result)) {
		cJSON_Delete(*result);
		*result = NULL;
		return -EPROTO;
	}
	return 0;
}

int pyrun__exec(struct pyrun *r, const char *snippet, const cJSON *args, int timeout_ms,
		unsigned int flags, cJSON **result, char *err, size_t errlen)
{
	char req_h[PATH_MAX], req_t[PATH_MAX], res_h[PATH_MAX], res_t[PATH_MAX], name[32];
	char run_h[PATH_MAX + 8];
	struct injector *inj = NULL;
	uint64_t page = 0, page_len = 0, a[6], ret = 0, t0, deadline;
	bool claimed = false, queued = false;
	char *text;
	int e;

	*result = NULL;
	r->seq++;
	snprintf(name, sizeof(name), "req-%u", r->seq);
	e = pyrun__file(r, name, req_h, sizeof(req_h), req_t, sizeof(req_t));
	snprintf(name, sizeof(name), "res-%u", r->seq);
	if (!e)
		e = pyrun__file(r, name, res_h, sizeof(res_h), res_t, sizeof(res_t));
	if (e) {
		set_err(err, errlen, "process %d: request files in %s: %s", r->pid, r->dir_host,
			strerror(-e));
		return e;
	}
	snprintf(run_h, sizeof(run_h), "%s.run", req_h);
	text = build_text(r, snippet, args, req_t, res_t, flags & PYRUN_KEEP_QUEUED);
	if (!text) {
		e = -errno;
		set_err(err, errlen, "building the snippet's text: %s", strerror(-e));
		goto out;
	}
	page_len = (strlen(text) + 1 + 4095) & ~4095ULL;

	inj = borrow_thread(r, err, errlen);
	if (!inj) {
		e = -errno;
		goto out;
	}
	injector__set_call_timeout(inj, ADD_CALL_MS);
	unmap_pages(r, inj);
	a[0] = 0, a[1] = page_len, a[2] = PROT_READ | PROT_WRITE;
	a[3] = MAP_PRIVATE | MAP_ANONYMOUS, a[4] = (uint64_t)-1, a[5] = 0;
	e = injector__call(inj, r->mmap_fn, a, &page);
	if (!e && (int64_t)page < 0 && (int64_t)page > -4096) {
		e = (int)(int64_t)page;
		set_err(err, errlen, "mmap in process %d: %s", r->pid, strerror(-e));
		page = 0;
		goto out;
	}
	if (!e && getenv("TPTRACE_PYRUN_DEBUG"))
		fprintf(stderr, "pyrun: code page 0x%" PRIx64 "-0x%" PRIx64 "\n", page,
			page + page_len);
	if (!e)
		e = injector__write(inj, page, text, strlen(text) + 1);
	if (!e) {
		a[0] = r->run_simple, a[1] = page, a[2] = a[3] = a[4] = a[5] = 0;
		e = injector__call(inj, r->add_pending, a, &ret);
	}
	if (e) {
		set_err(err, errlen, "process %d: %s", r->pid, injector__error(inj));
		goto out;
	}
	if ((int)ret != 0) {
		e = -EAGAIN;
		set_err(err, errlen, "process %d: Py_AddPendingCall refused the call (its queue is "
			"full or the interpreter is finalizing)", r->pid);
		goto out;
	}
	injector__detach(inj);
	inj = NULL;
	queued = true;

	/* queued: wait for the main thread to claim it, then for the result */
	t0 = now_ms();
	deadline = t0 + (timeout_ms > 0 ? timeout_ms : 5000);
	for (;;) {
		e = read_result(res_h, result);
		if (e == 0 || e == -EPROTO) {
			claimed = true;		/* it ran: its text was parsed long ago */
			break;
		}
		if (!claimed && !access(run_h, F_OK)) {
			claimed = true;
			deadline = now_ms() + RUN_MAX_MS;
		}
		if (e != -EAGAIN && e != -EPROTO && !exiting(r->pid)) {
			set_err(err, errlen, "process %d: reading the snippet's result %s: %s", r->pid,
				res_h, strerror(-e));
			break;
		}
		if (exiting(r->pid)) {
			e = -ESRCH;
			set_err(err, errlen, "process %d exited before the snippet %s", r->pid,
				claimed ? "finished" : "ran");
			break;
		}
		if (now_ms() >= deadline) {
			char where[256];

			if (claimed) {
				e = -ETIMEDOUT;
				set_err(err, errlen, "process %d: the snippet started but did not finish "
					"in %d s", r->pid, RUN_MAX_MS / 1000);
				break;
			}
			if (flags & PYRUN_KEEP_QUEUED) {
				main_thread_place(r, where, sizeof(where));
				e = -ETIMEDOUT;
				set_err(err, errlen, "process %d: the main thread reached no safe point "
					"of the Python eval loop in %.1f s (it is in %s): the request "
					"stays queued and runs when it returns to Python", r->pid,
					(now_ms() - t0) / 1000.0, where);
				break;
			}
			/* withdraw; a failed unlink means the snippet claimed it just now */
			if (unlink(req_h) && errno == ENOENT) {
				claimed = true;
				deadline = now_ms() + RUN_MAX_MS;
				continue;
			}
			main_thread_place(r, where, sizeof(where));
			e = -ETIMEDOUT;
			set_err(err, errlen, "process %d: the main thread reached no safe point of the "
				"Python eval loop in %.1f s (it is in %s): request withdrawn", r->pid,
				(now_ms() - t0) / 1000.0, where);
			break;
		}
		sleep_ms(claimed ? 5 : 2);
	}
	if (e == -EPROTO)
		set_err(err, errlen, "process %d: the snippet's result is not a JSON object", r->pid);
out:
	if (queued && !claimed)
		page = 0;	/* still queued in the interpreter: never unmapped */
	if (page && r->nr_pages < MAX_PAGES) {
		r->pages[r->nr_pages].addr = page;
		r->pages[r->nr_pages].len = page_len;
		r->nr_pages++;
	}
	if (inj)
		injector__detach(inj);
	free(text);
	unlink(req_h);
	unlink(run_h);
	unlink(res_h);
	return e;
}
