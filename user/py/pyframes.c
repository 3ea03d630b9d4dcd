// SPDX-License-Identifier: MIT
/* Python frames of a running CPython 3.9-3.13, read from outside with process_vm_readv:
 * thread states by native thread id (3.11+) or pthread id = fs_base, the frame chain per
 * version, names and lines from each code object (cached by address).
 *
 * Every address read from the target is untrusted: a read that comes back short is -EFAULT,
 * every chain walk is bounded, every length is capped. */
#include <limits.h>
#include <stdlib.h>

#include "growbuf.h"
#include "pyframes_int.h"
#include "ustacks.h"

/* ---- strings and code objects ---- */

/* A copy owned by py, deduplicated by content; NULL on ENOMEM. */
static const char *intern(struct pyproc *py, const char *s)
{
	uint64_t h = 1469598103934665603ULL, val;
	const char *p;
	char *copy, **grown;

	for (p = s; *p; p++)
		h = (h ^ (uint8_t)*p) * 1099511628211ULL;
	if (!h)
		h = 1;
	if (u64map__get(&py->strings, h, &val) && !strcmp((char *)(uintptr_t)val, s))
		return (const char *)(uintptr_t)val;
	copy = strdup(s);
	if (!copy)
		return NULL;
	if (!u64map__get(&py->strings, h, &val)) {
		if (u64map__set(&py->strings, h, (uintptr_t)copy)) {
			free(copy);
			return NULL;
		}
		return copy;
	}
	grown = realloc(py->extra_strings, (py->nr_extra + 1) * sizeof(*grown));
	if (!grown) {
		free(copy);
		return NULL;
	}
	py->extra_strings = grown;
	grown[py->nr_extra++] = copy;
	return copy;
}

static void put_utf8(char *out, size_t *n, size_t cap, uint32_t c)
{
	uint8_t b[4];
	size_t len, i;

	if (c < 0x80)
		b[0] = c, len = 1;
	else if (c < 0x800)
		b[0] = 0xc0 | c >> 6, b[1] = 0x80 | (c & 0x3f), len = 2;
	else if (c < 0x10000)
		b[0] = 0xe0 | c >> 12, b[1] = 0x80 | (c >> 6 & 0x3f), b[2] = 0x80 | (c & 0x3f), len = 3;
	else if (c < 0x110000)
		b[0] = 0xf0 | c >> 18, b[1] = 0x80 | (c >> 12 & 0x3f), b[2] = 0x80 | (c >> 6 & 0x3f),
		b[3] = 0x80 | (c & 0x3f), len = 4;
	else
		b[0] = '?', len = 1;
	if (*n + len >= cap)
		return;
	for (i = 0; i < len; i++)
		out[(*n)++] = b[i];
}

/* A str object (PEP 393 compact form) as UTF-8, cut at MAX_STR_BYTES. */
static int read_str(struct pyproc *py, uint64_t addr, const char **out)
{
	const struct py_layout *L = &py->L;
	uint8_t hdr[64], data[MAX_STR_BYTES * 4];
	char text[MAX_STR_BYTES + 4];
	uint32_t state, kind;
	int64_t length;
	size_t n = 0, i, count;
	int ret;

	if ((ret = rd(py, addr, hdr, L->str_state + 4)))
		return ret;
	memcpy(&length, hdr + L->str_length, sizeof(length));
	memcpy(&state, hdr + L->str_state, sizeof(state));
	kind = state >> 2 & 7;
	/* bit 5 compact, bit 6 ascii; legacy (non-compact) strings never name code */
	if (length < 0 || !(state & 1u << 5) || (kind != 1 && kind != 2 && kind != 4))
		return -EFAULT;
	count = (size_t)length < MAX_STR_BYTES ? (size_t)length : MAX_STR_BYTES;
	if (count && (ret = rd(py, addr + ((state & 1u << 6) ? L->str_ascii_size : L->str_compact_size),
			       data, count * kind)))
		return ret;
	for (i = 0; i < count; i++) {
		uint32_t c = kind == 1 ? data[i] : kind == 2 ? (uint32_t)(data[2 * i] | data[2 * i + 1] << 8) :
			     (uint32_t)u64_at(data, 4 * i) & 0xffffffffu;

		put_utf8(text, &n, MAX_STR_BYTES, c ? c : '?');
	}
	text[n] = 0;
	*out = intern(py, text);
	return *out ? 0 : -ENOMEM;
}

/* The code object at addr, from the cache when it still has the same name, file and line
 * table pointers (a freed code object's address can be reused by another). Within one burst
 * of calls (the target stopped) nothing is freed, so one check per burst is enough.
 * -EMEDIUMTYPE: addr is no code object (its type is not PyCode_Type). */
static int code_info(struct pyproc *py, uint64_t addr, struct code_info **out)
{
	const struct py_layout *L = &py->L;
	uint8_t co[256];
	uint64_t filename, name, qualname = 0, linetable, val;
	struct code_info *ci = NULL;
	int64_t table_len;
	int ret;

	if (u64map__get(&py->codes, addr, &val)) {
		ci = (struct code_info *)(uintptr_t)val;
		if (ci->func && ci->checked_gen == py->walk_gen) {
			*out = ci;
			return 0;
		}
	}
	if ((ret = rd(py, addr, co, L->co_size)))
		return ret;
	if (py->code_type && u64_at(co, L->ob_type) != py->code_type)
		return -EMEDIUMTYPE;
	/* a freed object keeps its type but not its reference count: pymalloc and the C heap put
	 * a free-list pointer there (or 0). Live counts are small; 3.12+ immortal ones are
	 * UINT32_MAX. A freed code object's strings may be another's by now: never read them. */
	if (!u64_at(co, 0) || u64_at(co, 0) > 0xffffffffULL)
		return -ESTALE;
	filename = u64_at(co, L->co_filename);
	name = u64_at(co, L->co_name);
	if (L->co_qualname >= 0)
		qualname = u64_at(co, L->co_qualname);
	linetable = u64_at(co, L->co_linetable);
	if (u64map__get(&py->codes, addr, &val)) {
		ci = (struct code_info *)(uintptr_t)val;
		if (ci->filename == filename && ci->name == (qualname ? qualname : name) &&
		    ci->linetable == linetable && ci->firstlineno == i32_at(co, L->co_firstlineno) &&
		    ci->func) {
			ci->checked_gen = py->walk_gen;
			*out = ci;
			return 0;
		}
	} else {
		ci = calloc(1, sizeof(*ci));
		if (!ci || u64map__set(&py->codes, addr, (uintptr_t)ci)) {
			free(ci);
			return -ENOMEM;
		}
	}
	/* (re)build; on failure the entry stays, marked unusable by zero pointers */
	free(ci->table);
	memset(ci, 0, sizeof(*ci));
	if ((ret = read_str(py, qualname ? qualname : name, &ci->func)) ||
	    (ret = read_str(py, filename, &ci->file)))
		return ret;
	if ((ret = rd(py, linetable + L->bytes_size, &table_len, sizeof(table_len))))
		return ret;
	if (table_len < 0 || table_len > MAX_LINETABLE)
		return -EFAULT;
	ci->table = malloc(table_len + 1);
	if (!ci->table)
		return -ENOMEM;
	if (table_len && (ret = rd(py, linetable + L->bytes_sval, ci->table, table_len))) {
		free(ci->table);
		ci->table = NULL;
		return ret;
	}
	ci->table_len = table_len;
	ci->firstlineno = i32_at(co, L->co_firstlineno);
	ci->firsttraceable = L->co_firsttraceable >= 0 ? i32_at(co, L->co_firsttraceable) : 0;
	ci->filename = filename;
	ci->name = qualname ? qualname : name;
	ci->linetable = linetable;
	ci->checked_gen = py->walk_gen;
	*out = ci;
	return 0;
}

/* ---- line tables (Objects/lnotab_notes.txt, Objects/locations.md) ---- */

/* 3.9: (address increment, signed line increment) byte pairs. */
static int line_lnotab(const uint8_t *t, size_t len, int line, int addr)
{
	size_t i;
	int at = 0;

	for (i = 0; i + 1 < len; i += 2) {
		at += t[i];
		if (at > addr)
			break;
		line += (int8_t)t[i + 1];
	}
	return line;
}

/* 3.10: (unsigned start delta, signed line delta; -128 = no line) pairs. */
static int line_310(const uint8_t *t, size_t len, int line, int addr)
{
	int start, end = 0;
	size_t i;

	for (i = 0; i + 1 < len; i += 2) {
		int8_t delta = (int8_t)t[i + 1];

		start = end;
		end += t[i];
		if (delta != -128)
			line += delta;
		if (start <= addr && addr < end)
			return delta == -128 ? -1 : line;
	}
	return -1;
}

static void varint(const uint8_t *t, size_t len, size_t i, unsigned *val)
{
	unsigned v = 0, shift = 0;

	while (i < len && shift < 32) {
		v |= (unsigned)(t[i] & 63) << shift;
		shift += 6;
		if (!(t[i++] & 64))
			break;
	}
	*val = v;
}

/* 3.11+ location table: entries of 1-8 code units, each led by a byte with bit 7 set. */
static int line_locations(const uint8_t *t, size_t len, int line, int addr)
{
	size_t i = 0;
	int end = 0;

	while (i < len) {
		uint8_t first = t[i];
		int code = first >> 3 & 15, start = end, delta = 0;
		unsigned v;

		if (!(first & 0x80))
			return -1;	/* not at an entry start: corrupt */
		end += ((first & 7) + 1) * 2;
		if (code == 13 || code == 14) {	/* no columns / long form: svarint line delta */
			varint(t, len, i + 1, &v);
			delta = (v & 1) ? -(int)(v >> 1) : (int)(v >> 1);
		} else if (code >= 10 && code <= 12) {	/* one-line forms */
			delta = code - 10;
		}
		line += delta;
		if (start <= addr && addr < end)
			return code == 15 ? -1 : line;	/* 15: no location */
		for (i++; i < len && !(t[i] & 0x80); i++)
			;
	}
	return -1;
}

int pyframes_line(enum line_format format, const uint8_t *table, size_t len, int firstlineno,
		  int addr)
{
	int line;

	if (addr < 0)
		return firstlineno > 0 ? firstlineno : 0;
	switch (format) {
	case LNOTAB_39:
		line = line_lnotab(table, len, firstlineno, addr);
		break;
	case LINETABLE_310:
		line = line_310(table, len, firstlineno, addr);
		break;
	default:
		line = line_locations(table, len, firstlineno, addr);
	}
	return line > 0 ? line : 0;
}

/* ---- thread states ---- */

static int walk_tstates(struct pyproc *py)
{
	const struct py_layout *L = &py->L;
	uint64_t interp, ts;
	size_t nr = 0, cap = 0;
	struct tstate_ref *list = NULL;
	int ret, ni, nt;

	if ((ret = rd(py, py->runtime + L->rt_interp_head, &interp, sizeof(interp))))
		return ret;
	for (ni = 0; interp && ni < MAX_INTERPRETERS; ni++) {
		if ((ret = rd(py, interp + L->is_threads_head, &ts, sizeof(ts))))
			goto fail;
		for (nt = 0; ts && nt < MAX_THREADS_WALKED; nt++) {
			uint8_t buf[256];
			int need = (L->ts_native_tid > L->ts_thread_id ? L->ts_native_tid : L->ts_thread_id) + 8;

			if (need < L->ts_next + 8)
				need = L->ts_next + 8;
			if ((ret = rd(py, ts, buf, need)))
				goto fail;
			if (ARRAY_RESERVE(list, cap, nr + 1, 16)) {
				ret = -ENOMEM;
				goto fail;
			}
			list[nr].addr = ts;
			list[nr].thread_id = u64_at(buf, L->ts_thread_id);
			list[nr].native_tid = L->ts_native_tid >= 0 ? u64_at(buf, L->ts_native_tid) : 0;
			nr++;
			ts = u64_at(buf, L->ts_next);
		}
		if (ts)
			goto loop;
		if ((ret = rd(py, interp + L->is_next, &interp, sizeof(interp))))
			goto fail;
	}
	if (interp)
		goto loop;
	free(py->tstates);
	py->tstates = list;
	py->nr_tstates = nr;
	py->tstates_at = now_ns();
	py->walk_gen++;
	return 0;
loop:
	ret = -EFAULT;	/* a chain longer than any real one: torn or corrupt */
fail:
	free(list);
	return ret;
}

/* native_thread_id is gettid() inside the target's pid namespace (a container): the last
 * field of "NSpid:" in /proc/PID/task/TID/status; tid itself when there is none. */
static int ns_tid(struct pyproc *py, int tid)
{
	char path[64], line[256];
	uint64_t cached;
	int nstid = tid;
	FILE *f;

	if (u64map__get(&py->ns_tids, (uint64_t)tid, &cached))
		return (int)cached;
	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", py->pid, tid);
	f = fopen(path, "re");
	if (!f)
		return tid;
	while (fgets(line, sizeof(line), f)) {
		char *p, *end;

		if (strncmp(line, "NSpid:", 6))
			continue;
		for (p = line + 6;; p = end) {
			long v = strtol(p, &end, 10);

			if (end == p)
				break;
			nstid = (int)v;
		}
		break;
	}
	fclose(f);
	u64map__set(&py->ns_tids, (uint64_t)tid, (uint64_t)nstid);
	return nstid;
}

/* The thread state of tid: by native_thread_id from 3.11, by pthread id = fs_base before.
 * The list is walked once per burst of calls; a miss walks again once per burst (a thread
 * started since), so the many threads without Python (CUDA, NCCL) cost one walk, not one
 * each. */
static int find_tstate(struct pyproc *py, int tid, uint64_t fs_base, uint64_t *addr)
{
	bool walked = false;
	int attempt, ret;
	size_t i;

	if (py->L.ts_native_tid < 0 && !fs_base)
		return -ENOENT;
	for (attempt = 0; attempt < 2; attempt++) {
		if (!py->tstates_at || now_ns() - py->tstates_at > TSTATE_CACHE_NS || attempt) {
			if ((ret = walk_tstates(py)))
				return ret;
			walked = true;
		}
		for (i = 0; i < py->nr_tstates; i++) {
			const struct tstate_ref *t = &py->tstates[i];

			if (py->L.ts_native_tid >= 0 ? t->native_tid == (uint64_t)tid :
			    t->thread_id == fs_base) {
				*addr = t->addr;
				return 0;
			}
		}
		if (walked || py->rewalked_gen == py->walk_gen)
			return -ENOENT;
		py->rewalked_gen = py->walk_gen + 1;	/* the generation the walk below makes */
	}
	return -ENOENT;
}

/* ---- frames ---- */

/* The first frame of the tstate; 0 when the thread runs no Python code. */
static int first_frame(struct pyproc *py, uint64_t ts, int tid, uint64_t fs_base,
		       uint64_t *frame)
{
	const struct py_layout *L = &py->L;
	uint8_t buf[256];
	int need = L->ts_frame, ret;
	uint64_t p;

	/* one read for the ids and the frame; the ids say whether a cached address still
	 * holds this thread's state */
	need = L->ts_thread_id > need ? L->ts_thread_id : need;
	need = L->ts_native_tid > need ? L->ts_native_tid : need;
	if ((ret = rd(py, ts, buf, need + 8)))
		return ret;
	if (L->ts_native_tid >= 0 ? u64_at(buf, L->ts_native_tid) != (uint64_t)tid :
	    u64_at(buf, L->ts_thread_id) != fs_base)
		return -ESTALE;
	p = u64_at(buf, L->ts_frame);
	if (L->cf_current >= 0 && p)
		ret = rd(py, p + L->cf_current, &p, sizeof(p));
	*frame = p;
	return ret;
}

/* 3.11+ frames live next to each other on the thread's data stack, 3.9/3.10 frame objects
 * often share a pymalloc pool: one page read serves several. Valid for one
 * pyframes__thread call only (the target is stopped). */
struct page_cache {
	uint64_t base;	/* 0: empty */
	uint8_t data[4096];
};

static int rd_cached(const struct pyproc *py, struct page_cache *pc, uint64_t addr, void *buf,
		     size_t len)
{
	uint64_t base = addr & ~4095ULL;

	if ((addr & 4095) + len > sizeof(pc->data))
		return rd(py, addr, buf, len);	/* crosses a page */
	if (pc->base != base) {
		pc->base = 0;
		if (rd(py, base, pc->data, sizeof(pc->data)))
			return rd(py, addr, buf, len);
		pc->base = base;
	}
	memcpy(buf, pc->data + (addr - base), len);
	return 0;
}

/* The byte offset of a frame's instruction in its code object (INT32_MIN: unknown), from the
 * raw f_lasti (an int before 3.11: raw holds its 32 bits) or instruction pointer; *skip when
 * the frame is not shown (3.11+: incomplete, not yet at its RESUME). */
static int frame_addr(const struct pyproc *py, const struct code_info *ci, uint64_t code,
		      uint64_t raw, int owner, bool *skip)
{
	const struct py_layout *L = &py->L;
	int64_t off;
	int addr;

	switch (L->lasti) {
	case LASTI_BYTES:
		return (int32_t)(uint32_t)raw;
	case LASTI_UNITS:
		addr = (int32_t)(uint32_t)raw;
		return addr < 0 ? addr : addr * 2;
	default:
		/* byte offset from the first instruction; prev_instr may sit one unit before */
		off = (int64_t)(raw - (code + L->co_code_adaptive));
		if (py->minor >= 11 && owner != OWNED_BY_GENERATOR &&
		    off < (int64_t)ci->firsttraceable * 2)
			*skip = true;	/* incomplete: not yet at RESUME (_PyFrame_IsIncomplete) */
		if (off > (1LL << 30) || off < -(1LL << 30))
			return INT32_MIN;	/* garbage pointer: line unknown */
		return (int)off;
	}
}

int pyframes__resolve(struct pyproc *py, uint64_t code, uint64_t lasti, uint64_t stamp,
		      struct py_frame *out, int *firstlineno)
{
	struct code_info *ci;
	bool skip = false;
	int owner = -1, addr, ret;

	if (py->L.lasti != LASTI_BYTES && py->L.lasti != LASTI_UNITS) {
		owner = (int)(lasti >> 56);
		lasti &= 0x00ffffffffffffffULL;
	}
	ret = code_info(py, code, &ci);
	if (ret == -EMEDIUMTYPE && py->minor >= 13)
		return 0;	/* not a code object: 3.13 allows other executables */
	if (ret)
		return ret;
	if (stamp != TP_PY_STAMP(ci->filename, ci->firstlineno))
		return -ESTALE;	/* another code object now: never its name and line */
	addr = frame_addr(py, ci, code, lasti, owner, &skip);
	if (skip)
		return 0;
	out->func = ci->func;
	out->file = ci->file;
	out->line = addr == INT32_MIN ? 0 : pyframes_line(py->L.lines, ci->table, ci->table_len,
							  ci->firstlineno, addr);
	out->entry = false;
	if (firstlineno)
		*firstlineno = ci->firstlineno;
	return 1;
}

int pyframes__code_dealloc(const struct pyproc *py, uint64_t *addr)
{
	uint64_t fn;
	int ret;

	if (!py->code_type)
		return -ENOENT;
	/* PyTypeObject: ob_refcnt, ob_type, ob_size, tp_name, tp_basicsize, tp_itemsize,
	 * tp_dealloc: 48 in every 3.9-3.13 release build */
	if ((ret = rd(py, py->code_type + 48, &fn, sizeof(fn))))
		return ret;
	if (!fn)
		return -ENOENT;
	*addr = fn;
	return 0;
}

void pyframes__recheck(struct pyproc *py)
{
	py->walk_gen++;
}

int pyframes__bpf_config(const struct pyproc *py, struct tp_ustack_config *c)
{
	const struct py_layout *L = &py->L;
	int ts_max = TP_PY_TSTATE_READ - 8, f_max = L->f_size - 8;

	if (L->ts_thread_id > ts_max || L->ts_frame > ts_max || L->ts_next > ts_max ||
	    L->f_size > TP_PY_FRAME_READ || L->f_back > f_max || L->f_code > f_max ||
	    L->f_lasti > f_max || L->f_owner >= L->f_size)
		return -EINVAL;
	memset(c, 0, sizeof(*c));
	c->runtime = py->runtime;
	c->rt_interp_head = L->rt_interp_head;
	c->is_next = L->is_next;
	c->is_threads_head = L->is_threads_head;
	c->ts_next = L->ts_next;
	c->ts_thread_id = L->ts_thread_id;
	c->ts_frame = L->ts_frame;
	c->cf_current = L->cf_current;
	c->f_back = L->f_back;
	c->f_code = L->f_code;
	c->f_lasti = L->f_lasti;
	c->f_owner = L->f_owner;
	c->f_size = L->f_size;
	c->co_filename = L->co_filename;
	c->co_firstlineno = L->co_firstlineno;
	c->lasti_is_ptr = L->lasti != LASTI_BYTES && L->lasti != LASTI_UNITS;
	c->skip_owner = py->minor >= 12 ? OWNED_BY_CSTACK : 0;
	return 0;
}

int pyframes__thread(struct pyproc *py, int tid, uint64_t fs_base, struct py_frame *out, int max)
{
	struct page_cache pc = { 0 };
	const struct py_layout *L;
	uint64_t ts, frame;
	int n = 0, walked, ret, boundary_n = 0;

	if (!py || tid <= 0 || max < 0 || (max && !out))
		return -EINVAL;
	L = &py->L;
	if (L->ts_native_tid >= 0)
		tid = ns_tid(py, tid);
	ret = find_tstate(py, tid, fs_base, &ts);
	if (!ret)
		ret = first_frame(py, ts, tid, fs_base, &frame);
	if (ret == -ESTALE) {	/* the cached list is older than the thread's state: walk again */
		py->tstates_at = 0;
		ret = find_tstate(py, tid, fs_base, &ts);
		if (!ret)
			ret = first_frame(py, ts, tid, fs_base, &frame);
		if (ret == -ESTALE)
			ret = -EFAULT;
	}
	if (ret)
		return ret;
	for (walked = 0; frame && n < max; walked++) {
		uint8_t f[128];
		struct code_info *ci;
		uint64_t code, next;
		int owner = -1, addr;
		bool boundary = false, skip = false;

		if (walked >= MAX_FRAMES_WALKED)
			return -EFAULT;
		if ((ret = rd_cached(py, &pc, frame, f, L->f_size)))
			return ret;
		code = u64_at(f, L->f_code);
		next = u64_at(f, L->f_back);
		if (L->f_owner >= 0)
			owner = f[L->f_owner];
		if (owner == OWNED_BY_CSTACK && py->minor >= 12) {
			/* the shim of one _PyEval_EvalFrameDefault: the frame inside it is the entry */
			if (n > boundary_n)
				out[n - 1].entry = true;
			boundary_n = n;
			frame = next;
			continue;
		}
		ret = code_info(py, code, &ci);
		if (ret == -EMEDIUMTYPE && py->minor >= 13) {
			frame = next;
			continue;	/* not a code object: 3.13 allows other executables */
		}
		if (ret == -EMEDIUMTYPE || ret == -ESTALE)
			ret = -EFAULT;	/* before 3.13 f_code is always code, and a frame's code
					 * object is alive while it runs: torn */
		if (ret)
			return ret;
		if (L->lasti == LASTI_BYTES || L->lasti == LASTI_UNITS)
			addr = frame_addr(py, ci, code, (uint32_t)i32_at(f, L->f_lasti), owner, &skip);
		else
			addr = frame_addr(py, ci, code, u64_at(f, L->f_lasti), owner, &skip);
		if (py->minor == 11 && f[L->f_is_entry])
			boundary = true;
		if (!skip) {
			out[n].func = ci->func;
			out[n].file = ci->file;
			out[n].line = addr == INT32_MIN ? 0 : pyframes_line(L->lines, ci->table, ci->table_len,
									   ci->firstlineno, addr);
			out[n].entry = py->minor <= 10;
			n++;
		}
		if (boundary) {
			if (n > boundary_n)
				out[n - 1].entry = true;
			boundary_n = n;
		}
		frame = next;
	}
	return n;
}
