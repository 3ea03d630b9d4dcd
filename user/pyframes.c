// SPDX-License-Identifier: MIT
/* Python frames of a running CPython 3.9-3.13, read from outside with process_vm_readv:
 * thread states by native thread id (3.11+) or pthread id = fs_base, the frame chain per
 * version, names and lines from each code object (cached by address).
 *
 * Every address read from the target is untrusted: a read that comes back short is -EFAULT,
 * every chain walk is bounded, every length is capped. */
#include <limits.h>
#include <stdlib.h>

#include "pyframes_int.h"

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
 * of calls (the target stopped) nothing is freed, so one check per burst is enough. */
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
			if (nr == cap) {
				struct tstate_ref *grown;

				cap = cap ? cap * 2 : 16;
				grown = realloc(list, cap * sizeof(*list));
				if (!grown) {
					ret = -ENOMEM;
					goto fail;
				}
				list = grown;
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

/* The thread state of tid: by native_thread_id from 3.11, by pthread id = fs_base before. */
static int find_tstate(struct pyproc *py, int tid, uint64_t fs_base, uint64_t *addr)
{
	int attempt, ret;
	size_t i;

	for (attempt = 0; attempt < 2; attempt++) {
		if (!py->tstates_at || now_ns() - py->tstates_at > TSTATE_CACHE_NS || attempt) {
			if ((ret = walk_tstates(py)))
				return ret;
		}
		for (i = 0; i < py->nr_tstates; i++) {
			const struct tstate_ref *t = &py->tstates[i];

			if (py->L.ts_native_tid >= 0 ? t->native_tid == (uint64_t)tid :
			    (fs_base && t->thread_id == fs_base)) {
				*addr = t->addr;
				return 0;
			}
		}
		if (py->L.ts_native_tid < 0 && !fs_base)
			return -ENOENT;
	}
	return -ENOENT;
}

/* ---- frames ---- */

/* The first frame of the tstate; 0 when the thread runs no Python code. */
static int first_frame(struct pyproc *py, uint64_t ts, uint64_t *frame)
{
	const struct py_layout *L = &py->L;
	uint64_t p;
	int ret;

	if ((ret = rd(py, ts + L->ts_frame, &p, sizeof(p))))
		return ret;
	if (L->cf_current >= 0 && p)
		ret = rd(py, p + L->cf_current, &p, sizeof(p));
	*frame = p;
	return ret;
}

int pyframes__thread(struct pyproc *py, int tid, uint64_t fs_base, struct py_frame *out, int max)
{
	const struct py_layout *L;
	uint64_t ts, frame;
	int n = 0, walked, ret, boundary_n = 0;

	if (!py || tid <= 0 || max < 0 || (max && !out))
		return -EINVAL;
	L = &py->L;
	if ((ret = find_tstate(py, tid, fs_base, &ts)))
		return ret;
	if ((ret = first_frame(py, ts, &frame)))
		return ret;
	for (walked = 0; frame && n < max; walked++) {
		uint8_t f[128];
		struct code_info *ci;
		uint64_t code, ip, next;
		int owner = -1, addr;
		bool boundary = false, skip = false;

		if (walked >= MAX_FRAMES_WALKED)
			return -EFAULT;
		if ((ret = rd(py, frame, f, L->f_size)))
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
		if (py->minor >= 13 && py->code_type) {
			uint64_t type;

			if ((ret = rd(py, code + L->ob_type, &type, sizeof(type))))
				return ret;
			if (type != py->code_type) {
				frame = next;
				continue;	/* not a code object (3.13 allows other executables) */
			}
		}
		if ((ret = code_info(py, code, &ci)))
			return ret;
		switch (L->lasti) {
		case LASTI_BYTES:
			addr = i32_at(f, L->f_lasti);
			break;
		case LASTI_UNITS:
			addr = i32_at(f, L->f_lasti);
			addr = addr < 0 ? addr : addr * 2;
			break;
		default:
			ip = u64_at(f, L->f_lasti);
			/* byte offset from the first instruction; prev_instr may sit one unit before */
			addr = (int)((int64_t)(ip - (code + L->co_code_adaptive)));
			if (py->minor >= 11 && owner != OWNED_BY_GENERATOR &&
			    (int64_t)(ip - (code + L->co_code_adaptive)) < (int64_t)ci->firsttraceable * 2)
				skip = true;	/* incomplete: not yet at RESUME (_PyFrame_IsIncomplete) */
			if ((int64_t)(ip - code) > (1LL << 30) || (int64_t)(ip - code) < -(1LL << 30))
				addr = INT32_MIN;	/* garbage pointer: line unknown */
		}
		if (py->minor == 11 && f[L->f_is_entry])
			boundary = true;
		if (!skip) {
			out[n].func = ci->func;
			out[n].file = ci->file;
			out[n].line = addr == INT32_MIN ? 0 : pyframes_line(L->lines, ci->table, ci->table_len, ci->firstlineno, addr);
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
