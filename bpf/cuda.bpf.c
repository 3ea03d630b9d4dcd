// SPDX-License-Identifier: GPL-2.0 OR MIT
/* Generic uprobe programs for CUDA runtime entry points. One entry program serves every API:
 * the attach cookie (see cuda.h) says how many stack slots and which pointed-to struct to
 * copy. All argument decoding happens in user space, so the per-call work here is one ring
 * reservation and a few copies on top of the trap. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "cuda.h"
#include "ustack.bpf.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);	/* resized by the loader */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TP_NR_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* (tid, api) -> out-pointer saved at entry, for functions that return a value through an
 * argument. Keyed by api too: ncclCommInitRank may call the exported InitRankConfig, and the
 * inner return must not consume the outer call's pointer. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
} out_ptrs SEC(".maps");


/* Wake the consumer only when this many bytes wait: a wake-up per record costs more than
 * the trap itself. The consumer also drains on its own every few milliseconds. */
const volatile __u64 wakeup_bytes = 1 << 20;

/* The fill level is asked for about one record in 16, picked by bits 4..7 of the record's
 * own timestamp (calls are far more than 256 ns apart, so those bits are as good as random):
 * bpf_ringbuf_query reads the consumer position the reader keeps writing, a cache line
 * from the reader's CPU on every call (~50 ns per run measured, docs/benchmarks.md,
 * "ladder"). The wake-up then comes some 16 records past wakeup_bytes, an eighth of the
 * ring: far from full. */
#define TP_WAKE_SAMPLE_MASK	0xf0

static __always_inline __u64 submit_flags(__u64 ts)
{
	if (ts & TP_WAKE_SAMPLE_MASK)
		return BPF_RB_NO_WAKEUP;
	return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes ?
	       BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);

	if (v)
		*v += 1;
}

/* tests/bench/bench.mk compiles this file again with -DTP_BENCH_STOP=n to time do_entry cut
 * short, so the benchmark's ladder is this program and cannot drift from it (docs/
 * benchmarks.md, "ladder"): 1 = returns before the ring, 2 = submits the record without any
 * user-memory read. The product is built without it: the cuts compile to nothing. */
#ifdef TP_BENCH_STOP
#define BENCH_STOP_AT(n)	(TP_BENCH_STOP == (n))
#else
#define BENCH_STOP_AT(n)	0
#endif

/* tptrace fr -a (user/fr/fr_exec.c): the library probes are attached per file for every process,
 * so the entry and return programs first drop the calls of processes the recorder does not
 * want: only tgids in fr_pids pass (added here when a process maps libnccl, and by user space).
 * Loaded with fr_filter 0 (every other user) the check is dead code the verifier removes. */
const volatile bool fr_filter = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} fr_pids SEC(".maps");

/* tptrace fr -a --scope (user/core/fr_scope.h): 0 every process, 1 one pid namespace (dev, ino),
 * 2 one network namespace (ino), 3 one cgroup v2 subtree (ino: its id, at depth level). */
const volatile __u32 fr_scope = 0;
const volatile __u64 fr_scope_dev = 0, fr_scope_ino = 0;
const volatile __u32 fr_scope_level = 0;

static __always_inline bool fr_in_scope(struct task_struct *task)
{
	struct bpf_pidns_info ns;

	switch (fr_scope) {
	case 1:
		return bpf_get_ns_current_pid_tgid(fr_scope_dev, fr_scope_ino, &ns, sizeof(ns)) == 0;
	case 2:
		return BPF_CORE_READ(task, nsproxy, net_ns, ns.inum) == fr_scope_ino;
	case 3:
		return bpf_get_current_ancestor_cgroup_id(fr_scope_level) == fr_scope_ino;
	}
	return true;
}

static __always_inline bool fr_unwanted(__u64 pid_tgid)
{
	__u32 tgid = pid_tgid >> 32;

	return fr_filter && !bpf_map_lookup_elem(&fr_pids, &tgid);
}

static __always_inline int do_entry(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 nstack = TP_COOKIE_STACK(cookie);
	__u32 deref_arg = TP_COOKIE_DEREF_ARG(cookie);
	__u32 deref_len = TP_COOKIE_DEREF_LEN(cookie);
	struct tp_rec_call *rec;
	__u16 flags = 0;
	__u64 ustack, ts;

	if (fr_unwanted(pid_tgid))
		return 0;
	if (BENCH_STOP_AT(1)) {
		asm volatile("" :: "r"(cookie), "r"(pid_tgid));
		return 0;
	}
	/* before the reservation: a record reserved but not submitted holds back the consumer */
	ustack = tp_ustack_capture(ctx, pid_tgid);
	if (deref_arg)
		rec = bpf_ringbuf_reserve(&events, TP_REC_CALL_FULL_SIZE, 0);
	else
		rec = bpf_ringbuf_reserve(&events, TP_REC_CALL_SHORT_SIZE, 0);
	if (!rec) {
		count(TP_CNT_DROPPED);
		return 0;
	}
	rec->type = TP_REC_CALL;
	rec->api = TP_COOKIE_API(cookie);
	rec->pid = pid_tgid >> 32;
	rec->tid = (__u32)pid_tgid;
	rec->ts = ts = bpf_ktime_get_ns();
	rec->args[0] = PT_REGS_PARM1(ctx);
	rec->args[1] = PT_REGS_PARM2(ctx);
	rec->args[2] = PT_REGS_PARM3(ctx);
	rec->args[3] = PT_REGS_PARM4(ctx);
	rec->args[4] = PT_REGS_PARM5(ctx);
#if defined(__TARGET_ARCH_x86)
	rec->args[5] = ctx->r9;
#else
	rec->args[5] = PT_REGS_PARM6(ctx);
#endif
	if (BENCH_STOP_AT(2)) {
		rec->flags = 0;
		rec->ustack = ustack;
		bpf_ringbuf_submit(rec, submit_flags(ts));
		return 0;
	}
	/* user memory is read into the BPF stack, then stored into the record: a
	 * bpf_probe_read_user straight into ring-buffer memory cost microseconds in our VM
	 * when measured (docs/benchmarks.md, "Before and after"), the two steps ~0.1 us */
	if (nstack > TP_STACK_MAX)
		nstack = TP_STACK_MAX;
	if (nstack) {
		__u64 stk[TP_STACK_MAX] = {};

		if (bpf_probe_read_user(stk, nstack * sizeof(__u64), (void *)PT_REGS_SP(ctx)))
			flags |= TP_CALL_STACK_FAULT;
		rec->stack[0] = stk[0];
		rec->stack[1] = stk[1];
		rec->stack[2] = stk[2];
		rec->stack[3] = stk[3];
	} else {
		rec->stack[0] = rec->stack[1] = rec->stack[2] = rec->stack[3] = 0;
	}
	if (deref_arg) {
		void *src;

		if (deref_arg == TP_DEREF_STACK)
			src = (void *)(PT_REGS_SP(ctx) + 8);
		else if (deref_arg <= 6)
			src = (void *)rec->args[deref_arg - 1];
		else
			src = 0;
		if (deref_len > TP_DEREF_MAX)
			deref_len = TP_DEREF_MAX;
		{
			__u8 buf[TP_DEREF_MAX] = {};

			if (cookie & TP_COOKIE_DEREF_STR) {
				if (!src || bpf_probe_read_user_str(buf, TP_DEREF_MAX, src) < 0)
					flags |= TP_CALL_DEREF_FAULT;
			} else if (!src || bpf_probe_read_user(buf, deref_len, src)) {
				flags |= TP_CALL_DEREF_FAULT;
			} else if (cookie & TP_COOKIE_DEREF_ATTRS) {
				/* second level: the config's attribute array, a bounded
				 * prefix of it (user space reports how many were left) */
				__u64 attrs;
				__u32 n;

				__builtin_memcpy(&attrs, buf + TP_LAUNCH_CONFIG_ATTRS, sizeof(attrs));
				__builtin_memcpy(&n, buf + TP_LAUNCH_CONFIG_NATTRS, sizeof(n));
				if (n > TP_LAUNCH_ATTRS_MAX)
					n = TP_LAUNCH_ATTRS_MAX;
				if (n && (!attrs ||
					  bpf_probe_read_user(buf + TP_LAUNCH_CONFIG_SIZE,
							      n * TP_LAUNCH_ATTR_SIZE,
							      (void *)attrs)))
					flags |= TP_CALL_ATTRS_FAULT;
			}
			__builtin_memcpy(rec->deref, buf, TP_DEREF_MAX);
		}
	}
	/* The loader sets this cookie bit only for processes whose stubs lack their __handle
	 * statics. rbp is a frame pointer only in code built with one; elsewhere it is any
	 * value, and a user read that faults costs microseconds (docs/benchmarks.md): read
	 * [rbp+8] only when rbp points into the stack just above rsp. */
	rec->caller2 = 0;
	rec->ustack = ustack;
	if (cookie & TP_COOKIE_CALLER2) {
		__u64 sp = PT_REGS_SP(ctx), fp = PT_REGS_FP(ctx), caller2 = 0;

		if (fp > sp && fp - sp < (1 << 16)) {
			if (bpf_probe_read_user(&caller2, sizeof(caller2), (void *)(fp + 8)))
				flags |= TP_CALL_CALLER2_FAULT;
		} else {
			flags |= TP_CALL_CALLER2_FAULT;
		}
		rec->caller2 = caller2;
	}
	if (cookie & TP_COOKIE_SAVE_OUT) {
		__u64 key = ((__u64)(__u32)pid_tgid << 16) | TP_COOKIE_API(cookie);
		__u32 out_arg = TP_COOKIE_OUT_ARG(cookie);
		__u64 ptr = out_arg < 6 ? rec->args[out_arg] : 0;

		bpf_map_update_elem(&out_ptrs, &key, &ptr, BPF_ANY);
	}
	rec->flags = flags;
	bpf_ringbuf_submit(rec, submit_flags(ts));
	return 0;
}

static __always_inline int do_return(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct tp_rec_ret *rec;
	__u64 ts;

	if (fr_unwanted(pid_tgid))
		return 0;
	rec = bpf_ringbuf_reserve(&events, sizeof(*rec), 0);
	if (!rec) {
		count(TP_CNT_DROPPED);
		return 0;
	}
	rec->type = TP_REC_RET;
	rec->api = TP_COOKIE_API(cookie);
	rec->flags = 0;
	rec->pid = pid_tgid >> 32;
	rec->tid = (__u32)pid_tgid;
	rec->ts = ts = bpf_ktime_get_ns();
	rec->rc = PT_REGS_RC(ctx);
	rec->out_val = 0;
	if (cookie & TP_COOKIE_SAVE_OUT) {
		__u64 key = ((__u64)(__u32)pid_tgid << 16) | TP_COOKIE_API(cookie);
		__u64 *ptr = bpf_map_lookup_elem(&out_ptrs, &key);

		if (ptr) {
			__u64 val = 0;

			if (!bpf_probe_read_user(&val, sizeof(val), (void *)*ptr))
				rec->flags = TP_RET_OUT_VALID;
			rec->out_val = val;
			bpf_map_delete_elem(&out_ptrs, &key);
		}
	}
	bpf_ringbuf_submit(rec, submit_flags(ts));
	return 0;
}

static __always_inline int do_dl_debug_state(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct tp_rec_dlopen *rec;

	rec = bpf_ringbuf_reserve(&events, sizeof(*rec), 0);
	if (!rec) {
		count(TP_CNT_DROPPED);
		return 0;
	}
	rec->type = TP_REC_DLOPEN;
	rec->pid = pid_tgid >> 32;
	rec->tid = (__u32)pid_tgid;
	rec->pad = 0;
	rec->ts = bpf_ktime_get_ns();
	/* wake the consumer now: new libraries must be probed before they are used */
	bpf_ringbuf_submit(rec, BPF_RB_FORCE_WAKEUP);
	return 0;
}

/* Two flavours of each program: attached one probe at a time through perf events, or many
 * probes of one file in a single uprobe_multi link (kernel >= 6.6; the loader sets the
 * expected attach type of the *_multi ones, or leaves them unloaded). A multi link is also
 * removed in one go, where single probes each wait for a grace period. */
SEC("uprobe")
int BPF_KPROBE(cuda_entry)
{
	return do_entry(ctx);
}

SEC("uretprobe")
int BPF_KRETPROBE(cuda_return)
{
	return do_return(ctx);
}

SEC("uprobe")
int BPF_KPROBE(dl_debug_state)
{
	return do_dl_debug_state(ctx);
}

SEC("uprobe")
int BPF_KPROBE(cuda_entry_multi)
{
	return do_entry(ctx);
}

SEC("uprobe")
int BPF_KPROBE(cuda_return_multi)
{
	return do_return(ctx);
}

SEC("uprobe")
int BPF_KPROBE(dl_debug_state_multi)
{
	return do_dl_debug_state(ctx);
}

/* tptrace fr -a where the kernel has uprobe sessions (>= 6.13): the entry and the return of a
 * probe are this one program on one uprobe_multi session link, and the entry says whether the
 * return runs (0: it does). A call of a process the recorder does not record (another host's,
 * under --scope; one without NCCL) then costs one run and no return probe, where an entry and
 * a return link cost two runs and the return trampoline: on a kernel shared by many recorders
 * every recorder's programs run on every process's calls (docs/benchmarks.md, "Many recorders
 * on one kernel"). At the entry the registers' ip is the probed address (the kernel sets it
 * before the handlers); at the return it is the address returned to, never the function's. */
SEC("uprobe")
int BPF_KPROBE(cuda_session)
{
	if (PT_REGS_IP(ctx) != bpf_get_func_ip(ctx))
		return do_return(ctx);
	if (fr_unwanted(bpf_get_current_pid_tgid()))
		return 1;
	do_entry(ctx);
	return bpf_get_attach_cookie(ctx) & TP_COOKIE_RET ? 0 : 1;
}

/* Processes whose exit status user space wants (flight recorder: a rank that died). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} watch_pids SEC(".maps");

SEC("tp_btf/sched_process_exit")
int BPF_PROG(proc_exit, struct task_struct *task)
{
	__u32 tgid = BPF_CORE_READ(task, tgid);
	struct tp_rec_exit *rec;

	if (fr_filter && bpf_map_lookup_elem(&fr_pids, &tgid) &&
	    BPF_CORE_READ(task, signal, live.counter) == 0)
		bpf_map_delete_elem(&fr_pids, &tgid);
	if (!bpf_map_lookup_elem(&watch_pids, &tgid))
		return 0;
	/* signal->live drops to 0 when the last thread of the group exits */
	if (BPF_CORE_READ(task, signal, live.counter) != 0)
		return 0;
	rec = bpf_ringbuf_reserve(&events, sizeof(*rec), 0);
	if (!rec) {
		count(TP_CNT_DROPPED);
		return 0;
	}
	rec->type = TP_REC_EXIT;
	rec->pid = tgid;
	rec->tid = BPF_CORE_READ(task, pid);
	rec->exit_code = BPF_CORE_READ(task, exit_code);
	rec->ts = bpf_ktime_get_ns();
	bpf_map_delete_elem(&watch_pids, &tgid);
	bpf_ringbuf_submit(rec, BPF_RB_FORCE_WAKEUP);
	return 0;
}

/* ---- tptrace fr -a: library files learnt from the kernel (user/fr/fr_exec.c) ----
 * Loaded only for -a (autoload off otherwise). Every executable file mapping on the host passes
 * here, so the common case (not a library of ours) costs a few loads and compares. */
#define TP_PROT_EXEC	4

static __always_inline __u32 lib_kind(const char *n)
{
	if (n[0] != 'l' || n[1] != 'i' || n[2] != 'b')
		return 0;
	if (n[3] == 'n' && n[4] == 'c' && n[5] == 'c' && n[6] == 'l')
		return TP_MAP_NCCL;
	if (n[3] != 'c' || n[4] != 'u' || n[5] != 'd' || n[6] != 'a')
		return 0;
	if (n[7] == 'r' && n[8] == 't')
		return TP_MAP_CUDART;
	if (n[7] == '.' && n[8] == 's' && n[9] == 'o')
		return TP_MAP_DRIVER;
	return 0;
}

#if defined(__TARGET_ARCH_x86)
#define TP_NR_MMAP	9
#define SYSCALL_NR(r)	((r)->orig_ax)
#define SYSCALL_PROT(r)	((r)->dx)
#define SYSCALL_FD(r)	((r)->r8)
#elif defined(__TARGET_ARCH_arm64)
#define TP_NR_MMAP	222
#define SYSCALL_NR(r)	((r)->syscallno)
#define SYSCALL_PROT(r)	((r)->regs[2])
#define SYSCALL_FD(r)	((r)->regs[4])
#endif

/* Every syscall's exit (no fentry/kprobe needed: this kernel may lack both): only an mmap that
 * succeeded with PROT_EXEC goes further, so the common case is one compare. The mapping
 * exists now (ret: its address) and /proc/PID/maps shows it when user space reads it. */
SEC("tp_btf/sys_exit")
int BPF_PROG(fr_map, struct pt_regs *regs, long ret)
{
	struct task_struct *task;
	struct file **fds, *file = NULL;
	const unsigned char *dname;
	struct tp_rec_map *rec;
	char name[TP_MAP_NAME_MAX] = {};
	__u64 pid_tgid;
	__u32 kind, tgid, fd, max_fds;
	__u8 one = 1;

#ifdef TP_NR_MMAP
	if (SYSCALL_NR(regs) != TP_NR_MMAP || !(SYSCALL_PROT(regs) & TP_PROT_EXEC) ||
	    (unsigned long)ret >= (unsigned long)-4095)
		return 0;
	fd = (__u32)SYSCALL_FD(regs);
#else
	return 0;
#endif
	/* the file through the fd the mapping was made from: no lock to take (bpf_find_vma's
	 * mmap_lock trylock can fail under contention and lose the mapping) */
	task = bpf_get_current_task_btf();
	max_fds = BPF_CORE_READ(task, files, fdt, max_fds);
	if (fd >= max_fds)
		return 0;
	fds = BPF_CORE_READ(task, files, fdt, fd);
	if (bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]) || !file)
		return 0;
	dname = BPF_CORE_READ(file, f_path.dentry, d_name.name);
	if (bpf_probe_read_kernel_str(name, sizeof(name), dname) < 0)
		return 0;
	kind = lib_kind(name);
	if (!kind)
		return 0;
	/* another host's process (--scope): never recorded, its files not learnt from it */
	if (!fr_in_scope(task))
		return 0;
	pid_tgid = bpf_get_current_pid_tgid();
	tgid = pid_tgid >> 32;
	/* from now on its calls into the libraries pass fr_unwanted */
	if (kind == TP_MAP_NCCL)
		bpf_map_update_elem(&fr_pids, &tgid, &one, BPF_ANY);
	rec = bpf_ringbuf_reserve(&events, sizeof(*rec), 0);
	if (!rec) {
		count(TP_CNT_DROPPED);
		return 0;
	}
	rec->type = TP_REC_MAP;
	rec->pid = tgid;
	rec->tid = (__u32)pid_tgid;
	rec->kind = kind;
	rec->ts = bpf_ktime_get_ns();
	rec->dev = BPF_CORE_READ(file, f_inode, i_sb, s_dev);
	rec->ino = BPF_CORE_READ(file, f_inode, i_ino);
	rec->start = ret;
	__builtin_memcpy(rec->name, name, sizeof(rec->name));
	/* now: a new library file must be probed before the process calls into it */
	bpf_ringbuf_submit(rec, BPF_RB_FORCE_WAKEUP);
	return 0;
}

/* A recorded process replaced its image: the old one is over (user space dumps it); the new
 * one is recorded again only if it maps libnccl. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(fr_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);
	struct tp_rec_exec *rec;

	if (!bpf_map_lookup_elem(&fr_pids, &tgid) && !bpf_map_lookup_elem(&watch_pids, &tgid))
		return 0;
	bpf_map_delete_elem(&fr_pids, &tgid);
	bpf_map_delete_elem(&watch_pids, &tgid);
	rec = bpf_ringbuf_reserve(&events, sizeof(*rec), 0);
	if (!rec) {
		count(TP_CNT_DROPPED);
		return 0;
	}
	rec->type = TP_REC_EXEC;
	rec->pid = tgid;
	rec->ts = bpf_ktime_get_ns();
	bpf_ringbuf_submit(rec, BPF_RB_FORCE_WAKEUP);
	return 0;
}
