/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/* The stack of the calling thread at a probed call (--py-stacks), for bpf/cuda.bpf.c and
 * bpf/mem.bpf.c: tp_ustack_capture() walks the thread's Python frames with the layout user
 * space put in ustack_procs for its process (user/ustack.c, from user/pyframes), and, when
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

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);	/* tid */
	__type(value, struct ustack_thread);
} ustack_threads SEC(".maps");

/* Per-CPU scratch: the stack being built and the bytes of one thread state / frame. */
struct ustack_scratch {
	struct tp_ustack st;
	__u8 ts[TP_PY_TSTATE_READ];
	__u8 f[TP_PY_FRAME_READ];
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

/* The thread state of the calling thread, left in s->ts; 0 when it has none. */
static __always_inline __u64 ustack_find_ts(struct ustack_scratch *s, const struct tp_ustack_config *c,
					    __u32 tid, __u64 fsbase, __u64 now)
{
	struct ustack_thread *t = bpf_map_lookup_elem(&ustack_threads, &tid);
	struct ustack_thread nt = { .fsbase = fsbase, .checked_ns = now };
	__u64 interp = 0, ts = 0;
	int i, interps = 0;

	if (t && t->fsbase == fsbase) {
		if (t->tstate && ustack_read_ts(s, c, t->tstate, fsbase))
			return t->tstate;
		if (!t->tstate && now - t->checked_ns < TP_USTACK_NOPY_RECHECK_NS)
			return 0;
	}
	ustack_count(TP_USTACK_CNT_WALKS);
	if (bpf_probe_read_user(&interp, sizeof(interp), (void *)(c->runtime + c->rt_interp_head)))
		interp = 0;
	for (i = 0; i < TP_USTACK_MAX_TSTATES; i++) {
		if (!ts) {
			/* the next interpreter's first thread state */
			if (!interp || interps++ >= TP_USTACK_MAX_INTERPS)
				break;
			if (bpf_probe_read_user(&ts, sizeof(ts), (void *)(interp + c->is_threads_head)))
				ts = 0;
			if (bpf_probe_read_user(&interp, sizeof(interp), (void *)(interp + c->is_next)))
				interp = 0;
			continue;
		}
		if (ustack_read_ts(s, c, ts, fsbase)) {
			nt.tstate = ts;
			break;
		}
		ts = ustack_u64(s->ts, c->ts_next, sizeof(s->ts));
	}
	bpf_map_update_elem(&ustack_threads, &tid, &nt, BPF_ANY);
	if (nt.tstate)	/* the loop's last read was of another state: read ours again */
		ustack_read_ts(s, c, nt.tstate, fsbase);
	return nt.tstate;
}

/* Python frames, innermost first, into s->st.py; the hash goes on in *h. */
static __always_inline void ustack_py(struct ustack_scratch *s, const struct tp_ustack_config *c,
				      __u64 *h)
{
	__u64 frame = ustack_u64(s->ts, c->ts_frame, sizeof(s->ts));
	__u32 n = 0, fsize = c->f_size;
	int i;

	if (frame && c->cf_current >= 0 &&
	    bpf_probe_read_user(&frame, sizeof(frame), (void *)(frame + c->cf_current))) {
		s->st.flags |= TP_USTACK_PY_FAULT;
		frame = 0;
	}
	if (fsize > TP_PY_FRAME_READ)
		fsize = TP_PY_FRAME_READ;
	for (i = 0; i < TP_PY_MAX_FRAMES + 8 && frame; i++) {
		__u64 code, lasti, owner = 0;

		if (bpf_probe_read_user(s->f, fsize, (void *)frame)) {
			s->st.flags |= TP_USTACK_PY_FAULT;
			break;
		}
		code = ustack_u64(s->f, c->f_code, sizeof(s->f));
		frame = ustack_u64(s->f, c->f_back, sizeof(s->f));
		if (c->f_owner >= 0) {
			__u32 o = c->f_owner;

			if (o < TP_PY_FRAME_READ)
				owner = s->f[o];
		}
		if (c->skip_owner && owner == c->skip_owner)
			continue;
		if (n >= TP_PY_MAX_FRAMES) {
			s->st.flags |= TP_USTACK_PY_TRUNCATED;
			break;
		}
		if (c->lasti_is_ptr)
			lasti = (ustack_u64(s->f, c->f_lasti, sizeof(s->f)) & TP_PY_LASTI_MASK) |
				owner << TP_PY_OWNER_SHIFT;
		else
			lasti = (__u32)ustack_u64(s->f, c->f_lasti, sizeof(s->f));
		s->st.py[n & (TP_PY_MAX_FRAMES - 1)][0] = code;
		s->st.py[n & (TP_PY_MAX_FRAMES - 1)][1] = lasti;
		*h = ustack_mix(ustack_mix(*h, code), lasti);
		n++;
	}
	if (frame && !(s->st.flags & TP_USTACK_PY_FAULT))
		s->st.flags |= TP_USTACK_PY_TRUNCATED;	/* deeper, or a chain that loops */
	s->st.nr_py = n;
}

/* Native frames through frame pointers, kept inside the thread's stack: [sp, top) where top
 * is the thread's TCB (glibc puts it just above a thread's stack; fs_base points at it) or,
 * for the main thread, the stack's start. A chain that leaves it stops there, flagged. */
static __always_inline void ustack_native(struct ustack_scratch *s, struct pt_regs *ctx,
					  struct task_struct *task, __u32 pid, __u32 tid,
					  __u64 fsbase, __u64 *h)
{
	__u64 sp = PT_REGS_SP(ctx), fp = PT_REGS_FP(ctx), top, ret = 0;
	__u64 pair[2];
	__u32 n = 0;
	int i;

	if (pid == tid)
		top = BPF_CORE_READ(task, mm, start_stack) + 4096;
	else
		top = fsbase;
	s->st.native[n++] = PT_REGS_IP(ctx);
	if (!(top > sp && top - sp < TP_USTACK_STACK_SPAN) ||
	    bpf_probe_read_user(&ret, sizeof(ret), (void *)sp)) {
		s->st.flags |= TP_USTACK_NATIVE_FAULT;
		goto out;
	}
	s->st.native[n++] = ret;
	for (i = 0; i < TP_NATIVE_MAX_FRAMES; i++) {
		if (!fp)
			break;	/* the outermost frame (_start, clone3 clear rbp) */
		if (fp < sp || fp + 16 > top || (fp & 7)) {
			s->st.flags |= TP_USTACK_NATIVE_LEFT_STACK;
			break;
		}
		if (n >= TP_NATIVE_MAX_FRAMES) {
			s->st.flags |= TP_USTACK_NATIVE_TRUNCATED;
			break;
		}
		if (bpf_probe_read_user(pair, sizeof(pair), (void *)fp)) {
			s->st.flags |= TP_USTACK_NATIVE_FAULT;
			break;
		}
		if (!pair[1])
			break;
		s->st.native[n & (TP_NATIVE_MAX_FRAMES - 1)] = pair[1];
		n++;
		if (pair[0] && pair[0] <= fp) {
			s->st.flags |= TP_USTACK_NATIVE_LEFT_STACK;	/* must grow upwards */
			break;
		}
		fp = pair[0];
	}
out:
	for (i = 0; i < TP_NATIVE_MAX_FRAMES; i++) {
		if (i >= n)
			break;
		*h = ustack_mix(*h, s->st.native[i & (TP_NATIVE_MAX_FRAMES - 1)]);
	}
	s->st.nr_native = n;
}

/* The stack id of the calling thread (bpf/ustacks.h): TP_USTACK_NONE when the process is
 * not set up for capture. */
static __always_inline __u64 tp_ustack_capture(struct pt_regs *ctx, __u64 pid_tgid)
{
	__u32 pid = pid_tgid >> 32, tid = (__u32)pid_tgid, zero = 0;
	const struct tp_ustack_config *c;
	struct ustack_scratch *s;
	struct task_struct *task;
	__u64 fsbase, ts = 0, h;

	if (!ustacks_on)
		return TP_USTACK_NONE;
	c = bpf_map_lookup_elem(&ustack_procs, &pid);
	if (!c)
		return TP_USTACK_NONE;
	s = bpf_map_lookup_elem(&ustack_scratch, &zero);
	if (!s)
		return TP_USTACK_NONE;
	task = bpf_get_current_task_btf();
	fsbase = ustack_fsbase(task);
	s->st.pid = pid;
	s->st.flags = 0;
	s->st.nr_py = 0;
	s->st.nr_native = 0;
	s->st.pad = 0;
	if (c->runtime)
		ts = ustack_find_ts(s, c, tid, fsbase, bpf_ktime_get_ns());
	if (ts) {
		h = ustack_mix(0xcbf29ce484222325ULL, pid);
		ustack_py(s, c, &h);
	} else {
		s->st.flags |= TP_USTACK_PY_NOSTATE;
		if (!c->native) {
			ustack_count(TP_USTACK_CNT_NOPY);
			return TP_USTACK_NOPY;
		}
		h = ustack_mix(0xcbf29ce484222325ULL, pid);
	}
	if (c->native)
		ustack_native(s, ctx, task, pid, tid, fsbase, &h);
	if (!s->st.nr_py && !s->st.nr_native && (s->st.flags & TP_USTACK_PY_FAULT))
		return TP_USTACK_FAULT;
	h = ustack_mix(h, s->st.flags | (__u64)s->st.nr_py << 32 | (__u64)s->st.nr_native << 48);
	if (h < TP_USTACK_FIRST_ID)
		h += TP_USTACK_FIRST_ID;
	ustack_count(TP_USTACK_CNT_CAPTURED);
	if (!bpf_map_lookup_elem(&ustacks, &h)) {
		long err = bpf_map_update_elem(&ustacks, &h, &s->st, BPF_NOEXIST);

		if (!err) {
			ustack_count(TP_USTACK_CNT_NEW);
		} else if (err != -17 /* EEXIST: another CPU stored it first */) {
			ustack_count(TP_USTACK_CNT_LOST);
			return TP_USTACK_LOST;
		}
	}
	return h;
}

#endif
