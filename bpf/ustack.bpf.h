/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/* The stack of the calling thread at a probed call (--py-stacks), for bpf/cuda.bpf.c and
 * bpf/mem.bpf.c: tp_ustack_capture() walks the thread's Python frames with the layout user
 * space put in ustack_procs for its process (user/core/ustack.c, from user/pyframes), and, when
 * asked, its native frames through frame pointers; stores the stack once in "ustacks" under
 * a hash of its content and returns that id (bpf/ustacks.h). Loaded with ustacks_on 0, every
 * call of it is dead code the verifier removes: without --py-stacks nothing changes.
 *
 * No read here may fault on the hot path (a faulting bpf_probe_read_user costs ~2.5 us here,
 * docs/benchmarks.md): Python frames are read only at addresses the interpreter's own
 * pointers give, thread states are found once per thread and then checked with the read that
 * fetches their frame, and the frame-pointer walk stays inside the thread's stack. */
#ifndef TPTRACE_USTACK_BPF_H
#define TPTRACE_USTACK_BPF_H

#include <bpf/bpf_core_read.h>
#include "ustacks.h"

const volatile bool ustacks_on = 0;

/* How long a thread found without a Python thread state is believed to have none: a C++
 * thread may call into Python later (PyGILState_Ensure), one walk per this interval. */
#define TP_USTACK_NOPY_RECHECK_NS	(200ULL * 1000 * 1000)
#define TP_USTACK_MAX_TSTATES		128	/* thread states looked at per walk */
#define TP_USTACK_MAX_INTERPS		8
#define TP_USTACK_STACK_SPAN		(64ULL << 20)	/* a thread stack is smaller than this */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);	/* tgid */
	__type(value, struct tp_ustack_config);
} ustack_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);	/* resized by the loader */
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct tp_ustack);
} ustacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TP_USTACK_NR_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} ustack_counters SEC(".maps");

/* The thread state of a thread: found by a walk of the interpreter's list, then trusted while
 * the state still names this thread (its thread_id, read with the frame, is the fs_base). */
struct ustack_thread {
	__u64 tstate;		/* 0: none found at checked_ns */
	__u64 fsbase;
	__u64 checked_ns;
};

/* per thread (task local storage: freed with the thread, so a reused tid starts afresh) */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct ustack_thread);
} ustack_threads SEC(".maps");

#define TP_USTACK_PAGE 4096

/* Per-CPU scratch: the stack being built, the bytes of one thread state, of one frame that
 * straddles a page end, and of the page that holds the last frames read. */
struct ustack_scratch {
	struct tp_ustack st;
	__u8 ts[TP_PY_TSTATE_READ];
	__u8 f[TP_PY_FRAME_READ];
	__u8 page[TP_USTACK_PAGE];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ustack_scratch);
} ustack_scratch SEC(".maps");

static __always_inline void ustack_count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&ustack_counters, &idx);

	if (v)
		*v += 1;
}

/* A u64 at a user-space-given offset of a scratch buffer; 0 when it does not fit. */
static __always_inline __u64 ustack_u64(const __u8 *buf, __s32 off, __u32 size)
{
	__u32 o = (__u32)off;

	if (off < 0 || o > size - 8)
		return 0;
	return *(const __u64 *)(buf + o);
}

static __always_inline __u64 ustack_mix(__u64 h, __u64 v)
{
	h ^= v;
	h *= 0x9e3779b97f4a7c15ULL;
	return h ^ (h >> 29);
}

static __always_inline __u64 ustack_fsbase(struct task_struct *task)
{
#if defined(__TARGET_ARCH_x86)
	return task->thread.fsbase;
#elif defined(__TARGET_ARCH_arm64)
	return task->thread.uw.tp_value;
#else
	return 0;
#endif
}

/* Reads the thread state at ts into s->ts; whether it belongs to the thread (fsbase). */
static __always_inline bool ustack_read_ts(struct ustack_scratch *s, const struct tp_ustack_config *c,
					   __u64 ts, __u64 fsbase)
{
	if (!ts || bpf_probe_read_user(s->ts, sizeof(s->ts), (void *)ts))
		return false;
	return ustack_u64(s->ts, c->ts_thread_id, sizeof(s->ts)) == fsbase;
}

/* The walks below run under bpf_loop(): the verifier checks a callback once, where an
 * open-coded loop of reads made it explore more than a million instructions. */
struct ustack_walk {
	struct ustack_scratch *s;
	const struct tp_ustack_config *c;
	__u64 fsbase;
	__u64 h;
	/* thread states */
	__u64 interp, ts, found;
	__u32 interps;
	/* Python frames */
	__u32 n, fsize;
	__u64 frame;
	__u64 page;	/* address of the page in s->page; 0 none */
	__u64 page_len;	/* bytes of it read */
	/* native frames */
	__u64 sp, top, fp;
	__u64 tramp;		/* the [uprobes] trampoline of the mm; 0 none */
	__u64 task;		/* struct task_struct * of the calling thread */
};

static long ustack_ts_cb(__u32 i, void *ctx)
{
	struct ustack_walk *w = ctx;
	struct ustack_scratch *s = w->s;
	const struct tp_ustack_config *c = w->c;

	if (!w->ts) {
		/* the next interpreter's first thread state */
		if (!w->interp || w->interps++ >= TP_USTACK_MAX_INTERPS)
			return 1;
		if (bpf_probe_read_user(&w->ts, sizeof(w->ts), (void *)(w->interp + c->is_threads_head)))
			w->ts = 0;
		if (bpf_probe_read_user(&w->interp, sizeof(w->interp), (void *)(w->interp + c->is_next)))
			w->interp = 0;
		return 0;
	}
	if (ustack_read_ts(s, c, w->ts, w->fsbase)) {
		w->found = w->ts;
		return 1;
	}
	w->ts = ustack_u64(s->ts, c->ts_next, sizeof(s->ts));
	return 0;
}

/* The thread state of the calling thread, left in s->ts; 0 when it has none. */
static __always_inline __u64 ustack_find_ts(struct ustack_walk *w, struct task_struct *task)
{
	struct ustack_thread *t;
	__u64 now;

	t = bpf_task_storage_get(&ustack_threads, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!t)
		return 0;
	if (t->fsbase == w->fsbase) {
		if (t->tstate && ustack_read_ts(w->s, w->c, t->tstate, w->fsbase))
			return t->tstate;
		if (!t->tstate) {
			now = bpf_ktime_get_ns();
			if (now - t->checked_ns < TP_USTACK_NOPY_RECHECK_NS)
				return 0;
		}
	}
	ustack_count(TP_USTACK_CNT_WALKS);
	w->interp = w->ts = w->found = 0;
	w->interps = 0;
	if (bpf_probe_read_user(&w->interp, sizeof(w->interp),
				(void *)(w->c->runtime + w->c->rt_interp_head)))
		w->interp = 0;
	bpf_loop(TP_USTACK_MAX_TSTATES, ustack_ts_cb, w, 0);
	t->tstate = w->found;
	t->fsbase = w->fsbase;
	t->checked_ns = bpf_ktime_get_ns();
	return t->tstate;
}

/* One frame's bytes: frames are read a page at a time, since the frames of one call chain
 * sit next to each other (3.11+: the thread's data stack; 3.9/3.10: pymalloc pools), and one
 * read of a page costs far less than a read per frame. A page that holds a frame is mapped
 * whole, so the page read cannot fault where the frame read would not. */
static __always_inline const __u8 *ustack_frame_bytes(struct ustack_walk *w, __u32 fsize)
{
	struct ustack_scratch *s = w->s;
	__u64 page = w->frame & ~(__u64)(TP_USTACK_PAGE - 1);
	__u64 off = w->frame - page, len;

	if (off <= TP_USTACK_PAGE - TP_PY_FRAME_READ) {
		if (page != w->page || off + TP_PY_FRAME_READ > w->page_len) {
			/* from the page start to this frame's end: 3.11+ callers sit below their
			 * callees on the data stack, so the rest of the walk is mostly in it */
			len = (off + TP_PY_FRAME_READ + 63) & ~63ULL;
			if (len > TP_USTACK_PAGE)
				len = TP_USTACK_PAGE;
			asm volatile("" : "+r"(len));
			if (len > TP_USTACK_PAGE || len < TP_PY_FRAME_READ)
				goto single;
			if (bpf_probe_read_user(s->page, len, (void *)page)) {
				w->page = 0;
				goto single;
			}
			w->page = page;
			w->page_len = len;
		}
		asm volatile("" : "+r"(off));
		if (off > TP_USTACK_PAGE - TP_PY_FRAME_READ)
			return NULL;
		return s->page + off;
	}
single:	/* near the page end: this frame alone */
	if (bpf_probe_read_user(s->f, fsize, (void *)w->frame))
		return NULL;
	return s->f;
}

/* One frame; 1 when the walk ends. */
static __always_inline long ustack_py_step(struct ustack_walk *w)
{
	struct ustack_scratch *s = w->s;
	const struct tp_ustack_config *c = w->c;
	__u64 code, lasti, owner = 0;
	__u32 n = w->n, fsize = w->fsize;
	const __u8 *f;

	if (!w->frame)
		return 1;
	if (fsize > TP_PY_FRAME_READ)
		fsize = TP_PY_FRAME_READ;
	if (!fsize || !(f = ustack_frame_bytes(w, fsize))) {
		s->st.flags |= TP_USTACK_PY_FAULT;
		return 1;
	}
	code = ustack_u64(f, c->f_code, TP_PY_FRAME_READ);
	w->frame = ustack_u64(f, c->f_back, TP_PY_FRAME_READ);
	if (c->f_owner >= 0) {
		__u32 o = c->f_owner;

		if (o < TP_PY_FRAME_READ)
			owner = f[o];
	}
	if (c->skip_owner && owner == c->skip_owner)
		return 0;
	if (n >= TP_PY_MAX_FRAMES) {
		s->st.flags |= TP_USTACK_PY_TRUNCATED;
		return 1;
	}
	if (c->lasti_is_ptr)
		lasti = (ustack_u64(f, c->f_lasti, TP_PY_FRAME_READ) & TP_PY_LASTI_MASK) |
			owner << TP_PY_OWNER_SHIFT;
	else
		lasti = (__u32)ustack_u64(f, c->f_lasti, TP_PY_FRAME_READ);
	s->st.py[n][0] = code;
	s->st.py[n][1] = lasti;
	w->h = ustack_mix(ustack_mix(w->h, code), lasti);
	w->n = n + 1;
	return 0;
}

/* Frames a few at a time: a bpf_loop turn costs about as much as a frame. */
#define TP_USTACK_FRAMES_PER_TURN 4

static long ustack_py_cb(__u32 i, void *ctx)
{
	for (int k = 0; k < TP_USTACK_FRAMES_PER_TURN; k++)
		if (ustack_py_step(ctx))
			return 1;
	return 0;
}

/* Python frames, innermost first, into s->st.py. */
static __always_inline void ustack_py(struct ustack_walk *w)
{
	struct ustack_scratch *s = w->s;
	const struct tp_ustack_config *c = w->c;

	w->frame = ustack_u64(s->ts, c->ts_frame, sizeof(s->ts));
	w->n = 0;
	w->page = 0;
	w->fsize = c->f_size > TP_PY_FRAME_READ ? TP_PY_FRAME_READ : c->f_size;
	if (w->frame && c->cf_current >= 0 &&
	    bpf_probe_read_user(&w->frame, sizeof(w->frame), (void *)(w->frame + c->cf_current))) {
		s->st.flags |= TP_USTACK_PY_FAULT;
		w->frame = 0;
	}
	/* C-stack shim frames (3.12+) take a turn without a slot: a few more turns */
	bpf_loop((TP_PY_MAX_FRAMES + 16) / TP_USTACK_FRAMES_PER_TURN, ustack_py_cb, w, 0);
	if (w->frame && !(s->st.flags & TP_USTACK_PY_FAULT))
		s->st.flags |= TP_USTACK_PY_TRUNCATED;	/* deeper, or a chain that loops */
	s->st.nr_py = w->n;
}

/* A return address a pending uretprobe (any tool's) replaced by the trampoline: the original
 * from the calling thread's own pending return instances, the newest whose slot is `slot`
 * (a chained run shares its slot and address). 0 when none matches. The probe runs in the
 * thread itself: its list cannot change under the read. */
#define TP_URET_SCAN	64	/* the kernel pushes no instance past depth 64 (MAX_URETPROBE_DEPTH) */
static __always_inline __u64 ustack_uret_orig(struct ustack_walk *w, __u64 slot)
{
	struct task_struct *task = (struct task_struct *)w->task;
	struct return_instance *ri = BPF_CORE_READ(task, utask, return_instances);

	for (int i = 0; i < TP_URET_SCAN && ri; i++) {
		if (BPF_CORE_READ(ri, stack) == slot) {
			__u64 orig = BPF_CORE_READ(ri, orig_ret_vaddr);

			return orig == w->tramp ? 0 : orig;
		}
		ri = BPF_CORE_READ(ri, next);
	}
	return 0;
}

static long ustack_native_cb(__u32 i, void *ctx)
{
	struct ustack_walk *w = ctx;
	struct ustack_scratch *s = w->s;
	__u64 pair[2];
	__u32 n = w->n;

	if (!w->fp)
		return 1;	/* the outermost frame (_start, clone3 clear rbp) */
	if (w->fp < w->sp || w->fp + 16 > w->top || (w->fp & 7)) {
		s->st.flags |= TP_USTACK_NATIVE_LEFT_STACK;
		return 1;
	}
	if (n >= TP_NATIVE_MAX_FRAMES) {
		s->st.flags |= TP_USTACK_NATIVE_TRUNCATED;
		return 1;
	}
	if (bpf_probe_read_user(pair, sizeof(pair), (void *)w->fp)) {
		s->st.flags |= TP_USTACK_NATIVE_FAULT;
		return 1;
	}
	if (w->tramp && pair[1] == w->tramp) {
		__u64 orig = ustack_uret_orig(w, w->fp + 8);

		if (orig)
			pair[1] = orig;	/* else kept: user space says it is the trampoline */
	}
	if (!pair[1])
		return 1;
	s->st.native[n] = pair[1];
	w->h = ustack_mix(w->h, pair[1]);
	w->n = n + 1;
	if (pair[0] && pair[0] <= w->fp) {
		s->st.flags |= TP_USTACK_NATIVE_LEFT_STACK;	/* a chain must grow upwards */
		return 1;
	}
	w->fp = pair[0];
	return 0;
}

/* The stamps of a new stack's code objects (bpf/ustacks.h): read once per distinct stack. */
static long ustack_stamp_cb(__u32 i, void *ctx)
{
	struct ustack_walk *w = ctx;
	struct ustack_scratch *s = w->s;
	const struct tp_ustack_config *c = w->c;
	__u64 code, filename = 0;
	__s32 line = 0;

	__u64 j = i;

	/* one 64-bit register for the check and the index, or the verifier loses the bound */
	asm volatile("" : "+r"(j));
	if (j >= TP_PY_MAX_FRAMES || j >= s->st.nr_py)
		return 1;
	code = s->st.py[j][0];
	if (c->co_filename < 0 || c->co_firstlineno < 0 ||
	    bpf_probe_read_user(&filename, sizeof(filename), (void *)(code + c->co_filename)) ||
	    bpf_probe_read_user(&line, sizeof(line), (void *)(code + c->co_firstlineno)))
		s->st.py[j][2] = 0;
	else
		s->st.py[j][2] = TP_PY_STAMP(filename, line);
	return 0;
}

/* Native frames through frame pointers, kept inside the thread's stack: [sp, top) where top
 * is the thread's TCB (glibc puts it just above a thread's stack; fs_base points at it) or,
 * for the main thread, the stack's start. A chain that leaves it stops there, flagged. */
static __always_inline void ustack_native(struct ustack_walk *w, struct pt_regs *ctx,
					  struct task_struct *task, __u32 pid, __u32 tid)
{
	struct ustack_scratch *s = w->s;
	__u64 ret = 0;

	w->sp = PT_REGS_SP(ctx);
	w->fp = PT_REGS_FP(ctx);
	w->task = (__u64)task;
	w->tramp = BPF_CORE_READ(task, mm, uprobes_state.xol_area, vaddr);
	if (pid == tid)
		w->top = BPF_CORE_READ(task, mm, start_stack) + 4096;
	else
		w->top = w->fsbase;
	s->st.native[0] = PT_REGS_IP(ctx);
	w->h = ustack_mix(w->h, s->st.native[0]);
	w->n = 1;
	if (!(w->top > w->sp && w->top - w->sp < TP_USTACK_STACK_SPAN) ||
	    bpf_probe_read_user(&ret, sizeof(ret), (void *)w->sp)) {
		s->st.flags |= TP_USTACK_NATIVE_FAULT;
	} else {
		/* a tail call from a probed function: its return probe already holds [sp] */
		if (w->tramp && ret == w->tramp) {
			__u64 orig = ustack_uret_orig(w, w->sp);

			if (orig)
				ret = orig;
		}
		s->st.native[1] = ret;
		w->h = ustack_mix(w->h, ret);
		w->n = 2;
		bpf_loop(TP_NATIVE_MAX_FRAMES, ustack_native_cb, w, 0);
	}
	s->st.nr_native = w->n;
}

/* The stack id of the calling thread (bpf/ustacks.h): TP_USTACK_NONE when the process is
 * not set up for capture. */
static __always_inline __u64 tp_ustack_capture(struct pt_regs *ctx, __u64 pid_tgid)
{
	__u32 pid = pid_tgid >> 32, tid = (__u32)pid_tgid, zero = 0;
	struct ustack_walk w = {};
	struct task_struct *task;
	struct ustack_scratch *s;
	__u64 ts = 0, h, gen;

	if (!ustacks_on)
		return TP_USTACK_NONE;
	w.c = bpf_map_lookup_elem(&ustack_procs, &pid);
	if (!w.c)
		return TP_USTACK_NONE;
	w.s = s = bpf_map_lookup_elem(&ustack_scratch, &zero);
	if (!s)
		return TP_USTACK_NONE;
	task = bpf_get_current_task_btf();
	w.fsbase = ustack_fsbase(task);
	s->st.pid = pid;
	s->st.flags = 0;
	s->st.nr_py = 0;
	s->st.nr_native = 0;
	gen = w.c->code_gen;	/* one read: the stored stack and its id agree */
	s->st.code_gen = (__u32)gen;
	w.h = ustack_mix(0xcbf29ce484222325ULL, pid ^ (gen << 32));
	if (w.c->runtime)
		ts = ustack_find_ts(&w, task);
	if (ts) {
		ustack_py(&w);
	} else {
		s->st.flags |= TP_USTACK_PY_NOSTATE;
		if (!w.c->native) {
			ustack_count(TP_USTACK_CNT_NOPY);
			return TP_USTACK_NOPY;
		}
	}
	if (w.c->native)
		ustack_native(&w, ctx, task, pid, tid);
	if (!s->st.nr_py && !s->st.nr_native && (s->st.flags & TP_USTACK_PY_FAULT))
		return TP_USTACK_FAULT;
	h = ustack_mix(w.h, s->st.flags | (__u64)s->st.nr_py << 32 | (__u64)s->st.nr_native << 48);
	if (h < TP_USTACK_FIRST_ID)
		h += TP_USTACK_FIRST_ID;
	ustack_count(TP_USTACK_CNT_CAPTURED);
	if (!bpf_map_lookup_elem(&ustacks, &h)) {
		long err;

		if (s->st.nr_py)
			bpf_loop(TP_PY_MAX_FRAMES, ustack_stamp_cb, &w, 0);
		err = bpf_map_update_elem(&ustacks, &h, &s->st, BPF_NOEXIST);

		if (!err) {
			ustack_count(TP_USTACK_CNT_NEW);
		} else if (err != -17 /* EEXIST: another CPU stored it first */) {
			ustack_count(TP_USTACK_CNT_LOST);
			return TP_USTACK_LOST;
		}
	}
	return h;
}

/* At the entry of the code type's deallocator (PyCode_Type.tp_dealloc) of a set-up process:
 * one more code object freed (user/core/ustack.c attaches it per process). */
SEC("uprobe")
int ustack_code_free(struct pt_regs *ctx)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	struct tp_ustack_config *c = bpf_map_lookup_elem(&ustack_procs, &pid);

	if (c)
		__sync_fetch_and_add(&c->code_gen, 1);
	return 0;
}

#endif
