// SPDX-License-Identifier: GPL-2.0 OR MIT
/* GPU memory: PyTorch's caching-allocator USDT probes (tensor level) and the allocation APIs
 * of the CUDA runtime and driver (segment level). Like cuda.bpf.c, one generic entry/return
 * pair serves every API through the attach cookie (mem.h); user space (memtrace.c) decodes.
 * An API's entry arguments wait in a per-thread map until its return, which sends one record
 * with both: allocations are rare next to launches, one record per call keeps the consumer
 * simple. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>
#include "mem.h"
#include "ustack.bpf.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);	/* resized by the loader */
} mem_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MEM_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} mem_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);	/* resized by the loader */
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MEM_STACK_DEPTH * sizeof(__u64));
} mem_stacks SEC(".maps");

struct mem_inflight {
	__u64 ts;
	__u64 args[6];
	__u64 deref_val;
	__u64 caller;
	__s32 stack_id;
	__u32 flags;
	__u64 ustack;
};

/* (tid << 16 | api) -> the entry of a call not returned yet (ts 0: returned). Entries stay
 * and are rewritten in place by the thread's next call: an update that allocates a hash
 * element at entry and a delete at return cost ~3x a lookup each, per allocation call
 * (docs/benchmarks.md, "alloc"). LRU: the entries of threads that are gone make room. Only
 * the thread of the key writes its entry, so writing in place is safe. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct mem_inflight);
} mem_inflight SEC(".maps");

/* tid -> runtime-level allocation calls open on that thread (0 kept, not deleted: as above) */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u32);
} mem_rt_depth SEC(".maps");

/* Records are submitted without a wake-up (a wake-up per record costs more than the trap);
 * the consumer drains the ring every few milliseconds. */

/* Stacks cost a frame-pointer walk per allocation; user space may turn them off. */
const volatile bool capture_stacks = true;

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&mem_counters, &idx);

	if (v)
		*v += 1;
}

static __always_inline __s32 user_stack(void *ctx)
{
	long id;

	if (!capture_stacks)
		return -1;
	id = bpf_get_stackid(ctx, &mem_stacks, BPF_F_USER_STACK);
	if (id < 0)
		count(MEM_CNT_STACK_FAIL);
	return (__s32)id;
}

SEC("usdt")
int BPF_USDT(mem_usdt_malloc, void *ptr, long device, long size, long stream)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 ustack = tp_ustack_capture(ctx, pid_tgid);
	struct mem_rec_usdt *rec;

	rec = bpf_ringbuf_reserve(&mem_events, sizeof(*rec), 0);
	if (!rec) {
		count(MEM_CNT_DROPPED);
		return 0;
	}
	rec->type = MEM_REC_MALLOC;
	rec->pid = pid_tgid >> 32;
	rec->tid = (__u32)pid_tgid;
	rec->ts = bpf_ktime_get_ns();
	rec->ptr = (__u64)ptr;
	rec->device = device;
	rec->size = size;
	rec->stream = stream;
	rec->stack_id = user_stack(ctx);
	rec->ustack = ustack;
	bpf_ringbuf_submit(rec, BPF_RB_NO_WAKEUP);
	return 0;
}

SEC("usdt")
int BPF_USDT(mem_usdt_free, void *ptr)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct mem_rec_usdt *rec;

	rec = bpf_ringbuf_reserve(&mem_events, sizeof(*rec), 0);
	if (!rec) {
		count(MEM_CNT_DROPPED);
		return 0;
	}
	rec->type = MEM_REC_FREE;
	rec->pid = pid_tgid >> 32;
	rec->tid = (__u32)pid_tgid;
	rec->ts = bpf_ktime_get_ns();
	rec->ptr = (__u64)ptr;
	rec->device = rec->size = rec->stream = 0;
	rec->stack_id = -1;
	rec->ustack = 0;
	bpf_ringbuf_submit(rec, BPF_RB_NO_WAKEUP);
	return 0;
}

static __always_inline int do_mem_entry(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	__u64 key = ((__u64)tid << 16) | MEM_COOKIE_API(cookie);
	__u32 deref_arg = MEM_COOKIE_DEREF_ARG(cookie);
	struct mem_inflight in = {}, *slot;

	/* The nested-call rule's kernel-side twin (user space: target__call_nesting, for the
	 * trace writer and the recorder): a driver call made by a runtime call is part of it.
	 * Here "made by" is "while a probed runtime allocation call is open on this thread",
	 * decided at entry so a nested call costs no record: the memory APIs' runtime calls all
	 * have return probes, and a driver allocation the runtime makes outside them (its own
	 * context setup) is memory no runtime call shows, so it stays a call of its own.
	 * tests/e2e/test_mem.py test_mem_nested_rule_twins_agree runs both on one process. */
	if (cookie & MEM_COOKIE_DRIVER) {
		__u32 *depth = bpf_map_lookup_elem(&mem_rt_depth, &tid);

		if (depth && *depth) {
			count(MEM_CNT_NESTED);
			return 0;
		}
	}
	in.ts = bpf_ktime_get_ns();
	in.args[0] = PT_REGS_PARM1(ctx);
	in.args[1] = PT_REGS_PARM2(ctx);
	in.args[2] = PT_REGS_PARM3(ctx);
	in.args[3] = PT_REGS_PARM4(ctx);
	in.args[4] = PT_REGS_PARM5(ctx);
#if defined(__TARGET_ARCH_x86)
	in.args[5] = ctx->r9;
#else
	in.args[5] = PT_REGS_PARM6(ctx);
#endif
	in.stack_id = -1;
	if (cookie & MEM_COOKIE_STACK) {
		in.stack_id = user_stack(ctx);
		in.ustack = tp_ustack_capture(ctx, pid_tgid);
		bpf_probe_read_user(&in.caller, sizeof(in.caller), (void *)PT_REGS_SP(ctx));
	}
	if (deref_arg && deref_arg <= 6) {
		__u64 src = in.args[deref_arg - 1] + MEM_COOKIE_DEREF_OFF(cookie);

		if (!bpf_probe_read_user(&in.deref_val, sizeof(in.deref_val), (void *)src))
			in.flags |= MEM_CALL_DEREF_OK;
	}
	slot = bpf_map_lookup_elem(&mem_inflight, &key);
	if (slot)
		*slot = in;
	else
		bpf_map_update_elem(&mem_inflight, &key, &in, BPF_ANY);
	if (cookie & MEM_COOKIE_RUNTIME) {
		__u32 *depth = bpf_map_lookup_elem(&mem_rt_depth, &tid);
		__u32 one = 1;

		if (depth)
			*depth += 1;
		else
			bpf_map_update_elem(&mem_rt_depth, &tid, &one, BPF_ANY);
	}
	return 0;
}

static __always_inline int do_mem_return(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	__u64 key = ((__u64)tid << 16) | MEM_COOKIE_API(cookie);
	__u32 out_arg = MEM_COOKIE_OUT_ARG(cookie);
	struct mem_inflight *in;
	struct mem_rec_call *rec;

	in = bpf_map_lookup_elem(&mem_inflight, &key);
	if (!in || !in->ts) {
		/* a driver call skipped at entry (nested), or attached while inside the call */
		if (!(cookie & MEM_COOKIE_DRIVER))
			count(MEM_CNT_ORPHAN);
		return 0;
	}
	if (cookie & MEM_COOKIE_RUNTIME) {
		__u32 *depth = bpf_map_lookup_elem(&mem_rt_depth, &tid);

		if (depth && *depth)
			*depth -= 1;	/* per-thread key: no other writer */
	}
	rec = bpf_ringbuf_reserve(&mem_events, sizeof(*rec), 0);
	if (!rec) {
		count(MEM_CNT_DROPPED);
		in->ts = 0;
		return 0;
	}
	rec->type = MEM_REC_CALL;
	rec->api = MEM_COOKIE_API(cookie);
	rec->flags = in->flags;
	rec->pid = pid_tgid >> 32;
	rec->tid = tid;
	rec->ts_entry = in->ts;
	rec->ts_return = bpf_ktime_get_ns();
	rec->args[0] = in->args[0];
	rec->args[1] = in->args[1];
	rec->args[2] = in->args[2];
	rec->args[3] = in->args[3];
	rec->args[4] = in->args[4];
	rec->args[5] = in->args[5];
	rec->deref_val = in->deref_val;
	rec->stack_id = in->stack_id;
	rec->pad = 0;
	rec->caller = in->caller;
	rec->ustack = in->ustack;
	rec->rc = PT_REGS_RC(ctx);
	rec->out_val = 0;
	if (out_arg && out_arg <= 6) {
		__u64 ptr = in->args[out_arg - 1], val = 0;

		/* read into the BPF stack first: reading user memory straight into ring memory
		 * is far slower (docs/benchmarks.md) */
		if (ptr && !bpf_probe_read_user(&val, sizeof(val), (void *)ptr))
			rec->flags |= MEM_CALL_OUT_OK;
		rec->out_val = val;
	}
	in->ts = 0;	/* returned: a return without a new entry is an orphan */
	bpf_ringbuf_submit(rec, BPF_RB_NO_WAKEUP);
	return 0;
}

/* Two flavours, as in cuda.bpf.c: one probe at a time, or all the allocation functions of one
 * library in a single uprobe_multi link (kernel >= 6.6; the loader sets the expected attach
 * type of the *_multi ones, or leaves them unloaded). */
SEC("uprobe")
int BPF_KPROBE(mem_entry)
{
	return do_mem_entry(ctx);
}

SEC("uretprobe")
int BPF_KRETPROBE(mem_return)
{
	return do_mem_return(ctx);
}

SEC("uprobe")
int BPF_KPROBE(mem_entry_multi)
{
	return do_mem_entry(ctx);
}

SEC("uprobe")
int BPF_KPROBE(mem_return_multi)
{
	return do_mem_return(ctx);
}
